"""Envelopes of lines, evaluated by binary search.

The upper envelope of lines y = m·x + b is the profile of a binary-output mechanism over a set of
neighbour pairs (:mod:`.binary`); the lower envelope is the minimum over Rényi orders of the RDP →
δ(ε) conversion, a line in ε for each order (:func:`.profiles.hs_from_rdp`).

Example:
    >>> import numpy as np
    >>> env = upper_envelope(np.array([-1.0, 0.0, -0.5]), np.array([1.0, 0.0, 0.9]))
    >>> [float(v) for v in evaluate_envelope(env, np.array([0.0, 1.0, 10.0]))]
    [1.0, 0.4, 0.0]
    >>> low = lower_envelope(np.array([1.0, 0.0]), np.array([0.0, 1.0]))      # min(x, 1)
    >>> [float(v) for v in evaluate_envelope(low, np.array([0.0, 2.0]))]
    [0.0, 1.0]

"""

from __future__ import annotations

import numpy as np

from dpframe.accounting.numerics.common import Array

#: (slopes, intercepts, breakpoints) of an envelope: line k is the envelope on [cut[k−1], cut[k]).
Envelope = tuple[Array, Array, Array]


def upper_envelope(slopes: Array, intercepts: Array) -> Envelope:
    """The upper envelope of the lines y = m·x + b, slopes increasing."""
    order = np.lexsort((intercepts, slopes))               # by slope, then intercept
    m, b = slopes[order], intercepts[order]
    last = np.append(m[1:] != m[:-1], True)                # of equal slopes keep the largest intercept
    ms, bs = m[last].tolist(), b[last].tolist()
    hm: list[float] = []
    hb: list[float] = []
    cut: list[float] = []
    for mi, bi in zip(ms, bs):
        while hm:
            x = (hb[-1] - bi) / (mi - hm[-1])                # where the new (steeper) line overtakes the last
            if cut and x <= cut[-1]:
                hm.pop()
                hb.pop()
                cut.pop()
                continue
            cut.append(x)
            break
        hm.append(mi)
        hb.append(bi)
    return np.array(hm), np.array(hb), np.array(cut)


def lower_envelope(slopes: Array, intercepts: Array) -> Envelope:
    """The lower envelope of the lines y = m·x + b: minus the upper envelope of the negated lines."""
    m, b, cut = upper_envelope(-slopes, -intercepts)
    return -m, -b, cut


def evaluate_envelope(env: Envelope, x: Array) -> Array:
    """The envelope at the points ``x``."""
    m, b, cut = env
    k = np.searchsorted(cut, x, side="right")
    with np.errstate(over="ignore"):
        return np.asarray(m[k] * x + b[k])
