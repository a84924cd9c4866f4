"""The exponential-mechanism quantile on an ordered integer domain, and the joint (recursive) version.

**One quantile** (Smith 2011; digest ``003_thresholds_rsc.md`` §8). Data: codes ``x₁ ≤ … ≤ xₙ`` in a
public domain ``[lo, hi]`` of integers. For an output ``z`` let ``C(z) = #{i : xᵢ ≤ z}``. With
``q = a/b`` the utility is

    ``u(z) = −|b·C(z) − a·n|``   (= −b·|C(z) − q·n|),

and ``z`` is drawn with probability ∝ ``exp(s·u(z))``, ``s = ε / (2·m·max(a, b − a))``, over *every*
integer of ``[lo, hi]`` (``m`` = rows per privacy unit). Privacy: adding or removing one row changes
either ``C(z)`` and ``n`` together (``xᵢ ≤ z``: ``u`` moves by ≤ ``b − a``) or ``n`` alone (``u`` moves
by ≤ ``a``), so ``m`` rows move ``u`` by ≤ ``m·max(a, b − a)`` — the McSherry–Talwar exponential
mechanism, ε-DP for private ``n`` (add/remove), and ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers
2021). ``n`` is never needed in public.

Sampling is exact and O(n) after the backend's sort: ``C`` is constant on each block ``[vⱼ, vⱼ₊₁)``
between consecutive distinct values (plus ``[lo, v₁)``), so the block is drawn by
:func:`~dpframe.noise.exponential_index_grouped` with its length as multiplicity — exactly the
probability mass the EM gives the block's integers — and then a uniform integer inside it
(``rng.uniform_below``). No float ``exp``-then-normalise step exists anywhere.

**Several quantiles** ``q₁ < … < q_k`` of one column are released jointly by the recursive split of
Kaplan, Ligett & Stemmer (2022, "Differentially private approximate quantiles"): estimate the middle
quantile ``p`` with the EM at ``ε₀``, split the data at the released value ``v`` (``x ≤ v`` left with
domain ``[lo, v]``, ``x > v`` right with domain ``[v, hi]``), and recurse with the rescaled
probabilities ``qᵢ/p`` on the left and ``(qᵢ − p)/(1 − p)`` on the right. Privacy: the split depends only
on released outputs and public ``q``, and each row falls in exactly one sub-problem of a level, so a
unit's ``≤ m`` rows in a level spread over its sub-problems with Σcᵢ ≤ m — the level costs ε₀ (pure:
Σ ε₀cᵢ/m ≤ ε₀; zCDP: Σ (ε₀cᵢ/m)²/8 ≤ ε₀²/8). The tree has ``⌈log₂(k + 1)⌉`` levels, composed
adaptively: total ε = ⌈log₂(k + 1)⌉·ε₀ instead of k·ε₀ for a k-way split (deciles: 4ε₀ vs 9ε₀). Outputs
are non-decreasing in q by construction. Groups are disjoint and use the same calibration (a unit's
rows across groups again sum to ≤ m).

Example:
    >>> import numpy as np
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource
    >>> data = [np.arange(1000, 2000, dtype=np.int64)]
    >>> out = joint_quantiles(data, 10_000, (Fraction(1, 2),), Fraction(2), 1, SeededRandomSource(1))
    >>> bool(1400 < out[0, 0] < 1600)
    True

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpframe.noise import RandomSource, exponential_index_grouped

SUB_DENOMINATOR = 2**20
"""Rescaled probabilities of sub-problems are rounded to this denominator (public; only shapes accuracy)."""


def depth(k: int) -> int:
    """Levels of the recursive split for ``k`` quantiles: ⌈log₂(k + 1)⌉.

    Example:
        >>> [depth(k) for k in (1, 2, 3, 4, 9, 99)]
        [1, 2, 2, 3, 4, 7]

    """
    return (k).bit_length()


def scale(q: Fraction, epsilon: Fraction, max_rows: int) -> Fraction:
    """The EM scale s = ε / (2·m·max(a, b − a)) for the integer utility −|b·C − a·n| with q = a/b.

    Example:
        >>> scale(Fraction(1, 2), Fraction(1), 1)     # the median: sensitivity max(1, 1) = 1
        Fraction(1, 2)

    """
    a, b = q.numerator, q.denominator
    return epsilon / (2 * max_rows * max(a, b - a))


@dataclass
class Segments:
    """Sub-problems, one per group: a slice ``[start, end)`` of the concatenated sorted codes and a domain.

    ``lo``/``hi`` are inclusive domain ends (integers, public given earlier outputs).
    """

    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]


def blocks(values: npt.NDArray[np.int64], seg: Segments, q: Fraction) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
        npt.NDArray[np.int64]]:
    """The EM's blocks of every segment: (offsets, lower, length, C, utility), blocks in segment order.

    Segment g has r_g distinct values and r_g + 1 blocks: ``[lo, v₁)`` with C = 0, then ``[vⱼ, vⱼ₊₁)``
    (the last one ``[v_r, hi + 1)``) with C = #{x ≤ vⱼ}. Lengths may be 0 (never chosen).
    """
    count = seg.end - seg.start
    nseg = count.size
    index = _ranges(seg.start, seg.end)
    x = values[index]
    owner = np.repeat(np.arange(nseg), count)
    first = np.ones(x.size, dtype=bool)
    first[1:] = (x[1:] != x[:-1]) | (owner[1:] != owner[:-1])
    runs = np.flatnonzero(first)
    run_owner = owner[runs]
    run_value = x[runs]
    run_end = np.append(runs[1:], x.size)                    # next run, or the next segment's first value
    seg_base = np.concatenate([[0], np.cumsum(count)])[:-1]
    run_c = run_end - seg_base[run_owner]
    per_seg = np.bincount(run_owner, minlength=nseg) + 1
    offsets = np.concatenate([[0], np.cumsum(per_seg)]).astype(np.int64)
    total = int(offsets[-1])
    lower = np.empty(total, dtype=np.int64)
    c = np.zeros(total, dtype=np.int64)
    gap0 = offsets[:-1]
    lower[gap0] = seg.lo
    run_slot = np.arange(runs.size) + run_owner + 1           # run j of segment g sits after g + 1 gap blocks
    lower[run_slot] = run_value
    c[run_slot] = run_c
    upper = np.empty(total, dtype=np.int64)
    upper[:-1] = lower[1:]
    last = offsets[1:] - 1
    upper[last] = seg.hi + 1
    length = upper - lower
    a, b = q.numerator, q.denominator
    utility = -np.abs(b * c - a * np.repeat(count, per_seg))
    return offsets, lower, length, c, utility


def em_quantile(values: npt.NDArray[np.int64], seg: Segments, q: Fraction, epsilon: Fraction, max_rows: int,
                rng: RandomSource) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """One EM quantile per segment: (the released codes, #{x ≤ code} in each segment — private, for splitting)."""
    offsets, lower, length, c, utility = blocks(values, seg, q)
    pick = exponential_index_grouped(utility, scale(q, epsilon, max_rows), rng, offsets, multiplicities=length)
    chosen = offsets[:-1] + pick
    inside = np.array([int(rng.uniform_below(int(n), 1)[0]) for n in length[chosen]], dtype=np.int64)
    return lower[chosen] + inside, c[chosen]


def joint_quantiles(groups: Sequence[npt.NDArray[np.int64]], size: int, qs: Sequence[Fraction], epsilon_level: Fraction,
                    max_rows: int, rng: RandomSource) -> npt.NDArray[np.int64]:
    """Codes of the quantiles ``qs`` (sorted, distinct) per group: shape (groups, k), rows non-decreasing.

    ``groups`` holds each group's sorted codes; codes outside ``[0, size)`` (float rounding at the top
    bound) are clipped. Each level of the recursion costs ``epsilon_level`` (see the module docstring).
    """
    arrays = [np.clip(np.asarray(g, dtype=np.int64), 0, size - 1) for g in groups]
    values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    lengths = np.array([a.size for a in arrays], dtype=np.int64)
    end = np.cumsum(lengths)
    ngroups = lengths.size
    root = Segments(end - lengths, end, np.zeros(ngroups, dtype=np.int64), np.full(ngroups, size - 1, dtype=np.int64))
    out = np.zeros((ngroups, len(qs)), dtype=np.int64)
    stack: list[tuple[list[int], list[Fraction], Segments]] = [(list(range(len(qs))), list(qs), root)]
    while stack:
        idx, probs, seg = stack.pop()
        if not idx or ngroups == 0:
            continue
        mid = len(idx) // 2
        p = probs[mid]
        v, below = em_quantile(values, seg, p, epsilon_level, max_rows, rng)
        out[:, idx[mid]] = v
        split = seg.start + below
        if mid > 0:
            stack.append((idx[:mid], [_bounded(x / p) for x in probs[:mid]], Segments(seg.start, split, seg.lo, v)))
        if mid + 1 < len(idx):
            stack.append((idx[mid + 1:], [_bounded((x - p) / (1 - p)) for x in probs[mid + 1:]],
                          Segments(split, seg.end, v, seg.hi)))
    return out


def rank_error_bound(size: int, k: int, epsilon_level: Fraction, max_rows: int, beta: float) -> float:
    """A (1 − β) bound on |C(z) − q·n| for each released quantile (an estimate, from public facts only).

    Each EM call is within ``(2·m/ε₀)·ln(|X|·k/β) + m`` ranks of its target with probability
    ≥ 1 − β/k (McSherry–Talwar utility bound, sensitivity ≤ m, ties cost ≤ m); the errors of a quantile's
    ancestors in the split tree add, over at most ⌈log₂(k + 1)⌉ levels.
    """
    per_call = 2 * max_rows / float(epsilon_level) * math.log(size * k / beta) + max_rows
    return depth(k) * per_call


def _bounded(x: Fraction) -> Fraction:
    return x.limit_denominator(SUB_DENOMINATOR)


def _ranges(start: npt.NDArray[np.int64], end: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Concatenated ``arange(start[i], end[i])`` (vectorised)."""
    count = end - start
    total = int(count.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(start - (np.cumsum(count) - count), count)
    out: npt.NDArray[np.int64] = np.arange(total, dtype=np.int64) + shift
    return out
