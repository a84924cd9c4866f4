"""Rank windows for a partial ``sorted`` statistic (``Statistic.near``): which codes a backend lists.

A backend answering a ``sorted`` statistic with ``near = (q₁, …, q_k)`` and ``reach = R`` may list, per
group, only the codes whose ranks lie near ``qⱼ·n``. It does so in two passes over the codes:

1. a *sample* (every ``SAMPLE_STRIDE``-th row) gives, per group and target, two codes ``loⱼ ≤ hiⱼ``
   whose ranks should enclose ``qⱼ·n ± R`` (:func:`window_bounds`: the sample quantiles ``qⱼ ± (R/stride
   + Z·σ)``, σ the standard deviation of a sample quantile's index);
2. the main pass counts ``belowⱼ = #{x < loⱼ}`` and collects the codes inside any ``[loⱼ, hiⱼ]``, sorted;
   :func:`window_positions` turns those into the ranks they hold.

Why the ranks are exact: the codes below ``loⱼ`` are exactly the first ``belowⱼ`` ranks, so the codes in
``[loⱼ, hiⱼ]``, sorted, sit at ranks ``belowⱼ, belowⱼ + 1, …``. The sample only decides *which* ranks get
listed; if it misjudges (an adversarial row order, bad luck), :class:`~dpframe.mechanism.SortedCodes`
notices an unknown rank and completes from the data, so the answer never depends on the sample — only
the time does. The sample is a deterministic stride, not randomness, and it is never released.

Example:
    >>> import numpy as np
    >>> sample = np.arange(0, 1000, 10)           # one group: a sample of 100 sorted codes
    >>> lo, hi = window_bounds(sample, np.array([0, 100]), [0.5], reach=20, stride=10)
    >>> bool(lo[0, 0] < 500 < hi[0, 0])
    True

"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpframe.mechanism.sorted_codes import search_ranges

Int64s = npt.NDArray[np.int64]

SAMPLE_STRIDE = 16
"""Every 16th row is sampled (speed only: a larger stride samples less but needs wider windows)."""
SAMPLE_SIGMAS = 5.0
"""Windows extend 5 standard deviations of the sample quantile beyond the reach (speed only)."""
OPEN_LOW, OPEN_HIGH = np.iinfo(np.int64).min, np.iinfo(np.int64).max
"""Window ends meaning "no bound": the window starts at the group's first code / ends at its last."""


def window_bounds(sample: Int64s, offsets: Int64s, near: Sequence[Fraction | float], reach: int,
                  stride: int = SAMPLE_STRIDE) -> tuple[Int64s, Int64s]:
    """Per group and target, the window ends ``(lo, hi)``, shape (groups, targets), from sorted samples.

    ``sample[offsets[g]:offsets[g + 1]]`` is group g's sample, sorted. Ends are non-decreasing along the
    targets (so each listed code has a last window starting at or below it); a window reaching past the
    sample's ends is open there (:data:`OPEN_LOW` / :data:`OPEN_HIGH`).
    """
    m = np.diff(offsets).astype(np.float64)
    first = offsets[:-1]
    lo = np.empty((m.size, len(near)), dtype=np.int64)
    hi = np.empty((m.size, len(near)), dtype=np.int64)
    for j, q in enumerate(map(float, near)):
        half = SAMPLE_SIGMAS * np.sqrt(m * q * (1 - q)) + reach / stride + 2
        i_lo = np.floor(q * m - half).astype(np.int64)
        i_hi = np.ceil(q * m + half).astype(np.int64)
        top = np.maximum(m.astype(np.int64) - 1, 0)
        lo[:, j] = np.where(i_lo >= 0, sample[np.minimum(first + np.clip(i_lo, 0, top), max(sample.size - 1, 0))]
                            if sample.size else OPEN_LOW, OPEN_LOW)
        hi[:, j] = np.where((i_hi <= top) & (m > 0), sample[np.minimum(first + np.clip(i_hi, 0, top),
                                                                        max(sample.size - 1, 0))]
                            if sample.size else OPEN_HIGH, OPEN_HIGH)
    lo = np.minimum.accumulate(lo[:, ::-1], axis=1)[:, ::-1]     # widening only: never loses a rank
    hi = np.maximum.accumulate(hi, axis=1)
    return lo, hi


def window_positions(codes: Int64s, offsets: Int64s, below: Int64s, lo: Int64s) -> Int64s:
    """The rank (within its group) of each listed code.

    ``codes[offsets[g]:offsets[g + 1]]`` are group g's codes inside any window, sorted; ``below[g, j]`` =
    #{x < lo[g, j]} over the whole group. A code's last window starting at or below it (ends are
    non-decreasing) holds it; inside that window the codes sit at ranks ``below[g, j]`` onwards.

    Example:
        >>> # group codes 1 2 3 4 5 6 7 8; windows [2, 3] and [6, 7]: listed 2 3 6 7
        >>> window_positions(np.array([2, 3, 6, 7]), np.array([0, 4]), np.array([[1, 5]]), np.array([[2, 6]])).tolist()
        [1, 2, 5, 6]

    """
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    # index (in the group's listed codes) of each window's first code: every listed code is ≥ lo[:, 0]
    first = np.column_stack([search_ranges(codes, starts, offsets[1:], lo[:, j], True) - starts
                             for j in range(lo.shape[1])]) if lo.size else np.zeros(lo.shape, dtype=np.int64)
    # window j holds listed indices [first[:, j], first[:, j + 1]) at ranks below[:, j] + (index − first[:, j])
    following = np.column_stack([first[:, 1:], lengths])
    index = np.arange(codes.size, dtype=np.int64) - np.repeat(starts, lengths)
    shift = np.repeat((below - first).ravel(), (following - first).ravel())
    out: Int64s = index + shift
    return out
