"""Rank windows for a partial ``sorted`` statistic (``Statistic.near``): which codes a backend lists.

A backend answering a ``sorted`` statistic with ``near = (q₁, …, q_k)`` and ``reach = R`` may list, per
group, only the codes whose ranks lie near ``qⱼ·n``. It does so in two passes over the codes:

1. a *sample* (every ``SAMPLE_STRIDE``-th row) gives, per group and target, two codes ``loⱼ ≤ hiⱼ``
   whose ranks should enclose ``qⱼ·n ± R`` (:func:`window_bounds`: the sample's order statistics at
   ``qⱼ·m ± (R/stride + Z·σ)``, σ = √(m·q(1 − q)) the standard deviation of a sample quantile's index);
2. the main pass counts ``belowⱼ = #{x < loⱼ}`` and collects the codes inside any ``[loⱼ, hiⱼ]``, sorted;
   :func:`window_positions` turns those into the ranks they hold.

Why the ranks are exact: the codes below ``loⱼ`` are exactly the first ``belowⱼ`` ranks, so the codes in
``[loⱼ, hiⱼ]``, sorted, sit at ranks ``belowⱼ, belowⱼ + 1, …``. The sample only decides *which* ranks get
listed; if it misjudges (an adversarial row order, bad luck), :class:`~dpframe.mechanism.SortedCodes`
notices an unknown rank and completes from the data, so the answer never depends on the sample — only
the time does. The sample is a deterministic stride (Polars) or a sample seeded by the query's seed (DuckDB's
``TABLESAMPLE``, Spark's ``sample``): one seed places the same windows; it is never released, and any placement
releases the same (``test_review55f.py``).

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

SAMPLE_STRIDE = 8
"""Every 8th row is sampled per group (speed only: a larger stride samples less but needs wider windows)."""
SINGLE_STRIDE = 64
"""Without grouping, every 64th row: one large group's windows stay narrow with a sparser sample."""
SAMPLE_SIGMAS = 5.0
"""Windows extend 5 standard deviations of the sample quantile beyond the reach (speed only)."""
OPEN_LOW, OPEN_HIGH = np.iinfo(np.int64).min, np.iinfo(np.int64).max
"""Window ends meaning "no bound": the window starts at the group's first code / ends at its last."""


def window_ranks(sizes: npt.NDArray[np.int64], near: Sequence[Fraction | float], reach: int,
                 stride: int = SAMPLE_STRIDE) -> tuple[Int64s, Int64s]:
    """Per group of ``sizes[g]`` sampled codes and per target, the sample indices of the window ends.

    An index below 0 or past the sample's end means the window is open on that side. Shape
    (groups, targets).

    Example:
        >>> window_ranks(np.array([100]), [0.5], reach=20, stride=16)    # 50 ± (5·√25 + 20/16 + 2)
        (array([[21]]), array([[79]]))

    """
    m = sizes.astype(np.float64)[:, None]
    q = np.array([float(x) for x in near])[None, :]
    half = SAMPLE_SIGMAS * np.sqrt(m * q * (1 - q)) + reach / stride + 2
    return np.floor(q * m - half).astype(np.int64), np.ceil(q * m + half).astype(np.int64)


def window_bounds(sample: Int64s, offsets: Int64s, near: Sequence[Fraction | float], reach: int,
                  stride: int = SAMPLE_STRIDE) -> tuple[Int64s, Int64s]:
    """Per group and target, the window ends ``(lo, hi)``, shape (groups, targets), from the samples.

    ``sample[offsets[g]:offsets[g + 1]]`` is group g's sample, sorted (or at least holding its order
    statistics at the :func:`window_ranks` indices, as after ``np.partition``). Ends are non-decreasing
    along the targets (so each listed code has a last window starting at or below it); a window reaching
    past the sample's ends is open there (:data:`OPEN_LOW` / :data:`OPEN_HIGH`).

    Example:
        >>> lo, hi = window_bounds(np.arange(100) * 10, np.array([0, 100]), [0.5], reach=20, stride=16)
        >>> lo.tolist(), hi.tolist()      # the sample's values at indices 21 and 79
        ([[210]], [[790]])

    """
    sizes = np.diff(offsets)
    i_lo, i_hi = window_ranks(sizes, near, reach, stride)
    first = offsets[:-1, None]
    top = max(sample.size - 1, 0)
    lo = np.where(i_lo >= 0, sample[np.minimum(first + np.maximum(i_lo, 0), top)] if sample.size else 0, OPEN_LOW)
    hi = np.where(i_hi < sizes[:, None], sample[np.minimum(first + np.maximum(i_hi, 0), top)] if sample.size else 0,
                  OPEN_HIGH)
    return monotone_ends(lo, hi)


def monotone_ends(lo: Int64s, hi: Int64s) -> tuple[Int64s, Int64s]:
    """Widen windows so both ends are non-decreasing along the targets (never loses a rank).

    Example:
        >>> [a.tolist() for a in monotone_ends(np.array([[5, 3]]), np.array([[9, 8]]))]
        [[[3, 3]], [[9, 9]]]

    """
    lo = np.minimum.accumulate(np.asarray(lo, dtype=np.int64)[:, ::-1], axis=1)[:, ::-1]
    hi = np.maximum.accumulate(np.asarray(hi, dtype=np.int64), axis=1)
    return lo, hi


def window_share(sizes: npt.NDArray[np.int64], near: Sequence[Fraction | float], reach: int,
                 stride: int = SAMPLE_STRIDE) -> float:
    """The share of the sampled codes that fall inside a window (from the sample sizes alone).

    Example:
        >>> round(window_share(np.array([1000, 10]), [0.5], reach=0), 3)     # 500 ± 82 of 1000; all 10
        0.173

    """
    i_lo, i_hi = window_ranks(sizes, near, reach, stride)
    top = sizes[:, None] - 1
    start, end = np.clip(i_lo, 0, np.maximum(top, 0)), np.clip(i_hi, -1, top) + 1      # [start, end)
    covered = np.zeros(sizes.size, dtype=np.int64)
    reached = np.zeros(sizes.size, dtype=np.int64)
    for j in range(start.shape[1]):        # windows start in order: count each new stretch once
        begin = np.maximum(start[:, j], reached)
        covered += np.maximum(end[:, j] - begin, 0)
        reached = np.maximum(reached, end[:, j])
    total = int(sizes.sum())
    return float(covered.sum() / total) if total else 1.0


def partition_sample(sample: Int64s, near: Sequence[Fraction | float], reach: int,
                     stride: int = SAMPLE_STRIDE) -> Int64s:
    """One group's unsorted sample with its window-end order statistics in place (``np.partition``).

    Faster than sorting a large sample; :func:`window_bounds` reads only those indices.

    Example:
        >>> part = partition_sample(np.arange(100)[::-1].copy(), [0.5], reach=20, stride=16)
        >>> int(part[21]), int(part[79])
        (21, 79)

    """
    i_lo, i_hi = window_ranks(np.array([sample.size]), near, reach, stride)
    kth = np.unique(np.concatenate([i_lo.ravel(), i_hi.ravel()]))
    kth = kth[(kth >= 0) & (kth < sample.size)]
    out: Int64s = np.partition(sample, kth) if kth.size else sample
    return out


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
