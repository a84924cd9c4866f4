"""Mechanisms with a binary output over a finite set of neighbour pairs: exact RDP curves and profiles.

A pair is a row (log p, log(1−p), log q, log(1−q)) of the probabilities of the output "1" on the two
neighbours. Poisson subsampling keeps the output binary, so subsampled curves stay exact
(:func:`sampled_pairs`).

Example:
    >>> import numpy as np
    >>> rows = np.log(np.array([[0.75, 0.25, 0.25, 0.75]]))             # randomized response, p = 3/4
    >>> pairs = sampled_pairs(rows, 1.0)
    >>> round(float(binary_rdp(pairs)(np.array([2.0]))[0]), 6)          # log(p²/q + q²/p) = log(7/3)
    0.847298
    >>> round(float(binary_profile(pairs)(np.array([0.0]))[0]), 6)      # p − q
    0.5

"""

from __future__ import annotations

import math

import numpy as np

from dpframe.accounting.numerics.common import BLOCK, Array, Fn, special
from dpframe.accounting.numerics.envelope import evaluate_envelope, upper_envelope


def threshold_pairs(sigma: float, threshold: float, lower: int, upper: int) -> Array:
    """Rows (log p, log(1−p), log q, log(1−q)) of P[c + N(0, σ²) ≥ T] for each c ∈ [lower, upper] and c ± 1.

    Kept in log space (log Φ, not Φ): a probability that underflows as a float still has its exact log, so the
    divergences of far-away counts are not cut off.
    """
    c = np.arange(lower, upper + 1, dtype=np.float64)
    sp = special()
    with np.errstate(over="ignore", invalid="ignore"):
        z = (c - threshold) / sigma
        rows = [np.stack([sp.log_ndtr(z), sp.log_ndtr(-z), sp.log_ndtr(z + d / sigma), sp.log_ndtr(-z - d / sigma)],
                         axis=1) for d in (1, -1)]
    return np.concatenate(rows)


def sampled_pairs(pairs: Array, rate: float) -> tuple[Array, Array, Array, Array]:
    """(log p, log(1−p), log q, log(1−q)) over both directions of every pair, after sampling at ``rate``.

    Under Poisson subsampling the remove pair is ((1−γ)Q + γP, Q) and the add pair its reverse (thesis
    Thm 3.3.5); without sampling the reverse of every pair is included, so both neighbour orders count.
    """
    lp, l1p, lq, l1q = (pairs[:, i] for i in range(4))
    if rate < 1:
        la = np.logaddexp(math.log1p(-rate) + lq, math.log(rate) + lp)        # A = (1−γ)Q + γP
        l1a = np.logaddexp(math.log1p(-rate) + l1q, math.log(rate) + l1p)
        first, second = (la, l1a, lq, l1q), (lq, l1q, la, l1a)
    else:
        first, second = (lp, l1p, lq, l1q), (lq, l1q, lp, l1p)
    a, b, c, d = (np.concatenate([x, y]) for x, y in zip(first, second))
    return a, b, c, d


def binary_rdp(pairs: tuple[Array, Array, Array, Array]) -> Fn:
    """The largest D_α over the pairs, evaluated in blocks (bounded memory for many pairs)."""
    lp, l1p, lq, l1q = pairs
    step = max(1, BLOCK // len(lp))

    def rdp(a: Array) -> Array:
        a = np.asarray(a, dtype=np.float64)
        out = np.empty(len(a))
        for i in range(0, len(a), step):
            b = a[i:i + step, None]
            with np.errstate(invalid="ignore", over="ignore"):
                one, zero = b * lp + (1 - b) * lq, b * l1p + (1 - b) * l1q
                v = np.logaddexp(np.nan_to_num(one, nan=-math.inf), np.nan_to_num(zero, nan=-math.inf)) / (b - 1)
            out[i:i + step] = np.max(v, axis=1)        # 0·log 0 terms (p = q = 0) count as 0 above
        return out

    return rdp


def binary_profile(pairs: tuple[Array, Array, Array, Array]) -> Fn:
    """The largest hockey-stick divergence over the pairs.

    H_x = max over pairs of (p − xq)_+ + ((1−p) − x(1−q))_+ = max(0, 1 − x, p − xq, (1−p) − x(1−q)) (the
    two parts add up to 1 − x): the upper envelope of lines in x, evaluated by binary search.
    """
    lp, l1p, lq, l1q = pairs
    with np.errstate(under="ignore"):
        hull = upper_envelope(np.concatenate([-np.exp(lq), -np.exp(l1q), [0.0, -1.0]]),
                              np.concatenate([np.exp(lp), np.exp(l1p), [0.0, 1.0]]))

    def hs(e: Array) -> Array:
        with np.errstate(over="ignore"):
            x = np.minimum(np.exp(np.asarray(e, dtype=np.float64)), 1e308)   # a smaller x only raises H: sound
        return np.asarray(np.clip(evaluate_envelope(hull, x), 0.0, 1.0))

    return hs
