"""Threshold and axis-aligned-rectangle learners on encoded (integer) features, via interior points.

Both work on integer codes in ``[0, size)`` (see :mod:`dpframe.domains`) and binary labels.

Thresholds (digest §5.2). For ``positive="below"`` (label 1 ⇔ x ≤ u): take the k largest positives P_k
and the k smallest negatives N_k, run an interior point on ``{p + 1 : p ∈ P_k} ∪ N_k`` over
``[0, size]`` and return ``z − 1``. Every positive outside P_k is ≤ min P_k ≤ z and every negative
outside N_k is ≥ max N_k > z, so at most the 2k points of P_k ∪ N_k are misclassified (the +1 shift
makes this hold with ties). ``positive="above"`` mirrors the codes.

Rectangles (digest §6): from the positive points, per axis slice off the points with the smallest
coordinate, take an interior point of that coordinate, delete the slice, then the same with the
largest; the box of the 2d interior points is inside the target box whenever every call succeeds.

Example:
    >>> import numpy as np
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource
    >>> x = np.arange(400, dtype=np.int64); y = (x <= 150).astype(np.int8)
    >>> z = learn_threshold_codes(x, y, 400, "below", k=60, epsilon=Fraction(1), rows=1,
    ...                           rng=SeededRandomSource(0))
    >>> int(((x <= z) != (y == 1)).sum()) <= 2 * 60      # at most the 2k sliced points are wrong
    True

"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpframe.noise import RandomSource, exponential_index
from dpframe_learning.interior_point import Codes, Exponential, Stability
from dpframe_learning.slicing import SlicePlan, geometric

Direction = Literal["below", "above"]
_EM = Exponential()


def best_errors(x: Codes, y: npt.NDArray[np.int8]) -> tuple[int, int]:
    """The smallest training error of any threshold for ``positive="below"`` and ``"above"``.

    Each changes by at most m when a privacy unit with m rows is added or removed (every threshold's
    error does), so they are valid exponential-mechanism scores for choosing the direction.

    Example:
        >>> import numpy as np
        >>> best_errors(np.array([1, 2, 3, 4]), np.array([1, 1, 0, 0], dtype=np.int8))
        (0, 2)

    """
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order].astype(np.int64)
    pos, neg = int(ys.sum()), int(ys.size - ys.sum())
    last = np.append(xs[1:] != xs[:-1], True)          # cut after each distinct value
    pos_le = np.cumsum(ys)[last]
    neg_le = np.cumsum(1 - ys)[last]
    below = min(pos, int(np.min(pos - pos_le + neg_le, initial=pos)))          # predict 1 iff x ≤ z
    above = min(neg, int(np.min(pos_le + neg - neg_le, initial=neg)))          # predict 1 iff x > z
    return below, above


def choose_direction(x: Codes, y: npt.NDArray[np.int8], epsilon: Fraction, rows: int,
                     rng: RandomSource) -> Direction:
    """The exponential mechanism over the two directions with score −(best training error), ε-DP."""
    below, above = best_errors(x, y)
    i = exponential_index(np.array([-below, -above], dtype=np.int64), epsilon / (2 * rows), rng)
    return "below" if i == 0 else "above"


def learn_threshold_codes(x: Codes, y: npt.NDArray[np.int8], size: int, positive: Direction, *, k: int,
                          epsilon: Fraction, rows: int, rng: RandomSource) -> int:
    """A threshold code z (``below``: predict 1 iff x ≤ z, z ∈ [−1, size − 1]; ``above``: iff x ≥ z, z ∈ [0, size]).

    Privacy: P_k and N_k are deterministic slices (k is public), so neighbouring inputs differ by at
    most ``rows`` swaps and the exponential interior point calibrated to swap-stability is ε-DP.
    """
    codes = x if positive == "below" else (size - 1) - x
    pos = np.sort(codes[y == 1])
    neg = np.sort(codes[y == 0])
    sample = np.sort(np.concatenate([pos[max(0, pos.size - k):] + 1, neg[:k]]))
    z = _EM.run(sample, size + 1, epsilon, Fraction(0), 0.5, Stability(rows, swap=True), rng) - 1
    return z if positive == "below" else (size - 1) - z


def learn_rectangle_codes(points: npt.NDArray[np.int64], sizes: list[int], plan: SlicePlan, target: list[int],
                          rows: int, rng: RandomSource) -> list[tuple[int, int]]:
    """Per-axis code intervals [a_i, b_i] from the positive ``points`` (n × d), by 2d sliced interior points.

    Slices are cut in a total order on whole records (the axis coordinate, then the other coordinates),
    so they depend only on the multiset of points. ``target[i]`` is the slice size for axis i; with
    ``plan.method == "rsc"`` each size is padded with Geom(1 − e^{−ε₀}) noise that is never published.
    """
    d = points.shape[1]
    remaining = points
    box = []
    for i in range(d):
        ends = []
        for largest in (False, True):
            keys = [remaining[:, j] for j in reversed(range(d)) if j != i] + [remaining[:, i]]
            order = np.lexsort(keys)
            if largest:
                order = order[::-1]
            m = target[i] + (int(geometric(plan.epsilon0, 1, rng)[0]) if plan.method == "rsc" else 0)
            chosen, keep = order[:m], order[m:]
            coords = np.sort(remaining[chosen, i])
            ends.append(_EM.run(coords, sizes[i], plan.epsilon0, Fraction(0), 0.5, Stability(rows, swap=True), rng))
            remaining = remaining[np.sort(keep)]
        box.append((ends[0], ends[1]))
    return box
