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

from dpframe.noise import RandomSource, bernoulli_exp, exponential_index_grouped

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


ENVELOPE_NATS = 40
"""Window slack: a proposal falls outside the exact window with probability ≤ e⁻⁴⁰ (speed only, not privacy)."""


def window(s: Fraction, size: int) -> int:
    """Δ_U: blocks with utility ≥ U_ref − Δ_U are sampled individually; the rest through two envelopes.

    With Δ_U ≥ (ln|X| + 40)/s the envelopes' total weight is ≤ e⁻⁴⁰ of the window's, so the rejection
    step below almost never runs. Any Δ_U ≥ 0 gives the same (exact) output distribution.
    """
    return math.ceil(Fraction(math.ceil((size.bit_length() * 0.6932 + ENVELOPE_NATS) * 1024), 1024) / s)


def em_quantile(values: npt.NDArray[np.int64], seg: Segments, q: Fraction, epsilon: Fraction, max_rows: int,
                rng: RandomSource) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """One EM quantile per segment: (the released codes, #{x ≤ code} in each segment — private, for splitting).

    Exact sampling in O(window) per segment after an O(log n) search. The blocks ``[vⱼ, vⱼ₊₁)`` (C
    constant) whose utility is within Δ_U of a reference block near rank q·n are candidates as they
    are; the blocks below and above that window form two *envelope* candidates, each weighted by its
    total length times exp(s·U_env), U_env ≥ every utility inside it (U is unimodal in C). The draw is
    a rejection sampler: one exact EM draw over the candidates (``exponential_index_grouped``), a
    uniform integer inside the chosen block (or envelope), and, for an envelope, acceptance with
    probability exp(−s·(U_env − U(z))) (``bernoulli_exp``, exact); rejected segments draw again from
    scratch. The proposal weight of every integer z is exp(s·Ũ(z)) with Ũ ≥ U, equal inside the window,
    so accepted draws have probability exactly ∝ exp(s·U(z)).
    """
    out = np.zeros(seg.start.size, dtype=np.int64)
    below = np.zeros(seg.start.size, dtype=np.int64)
    pending = np.arange(seg.start.size)
    while pending.size:
        sub = Segments(seg.start[pending], seg.end[pending], seg.lo[pending], seg.hi[pending])
        code, c, accepted = _propose(values, sub, q, epsilon, max_rows, rng)
        out[pending[accepted]], below[pending[accepted]] = code[accepted], c[accepted]
        pending = pending[~accepted]
    return out, below


def _propose(values: npt.NDArray[np.int64], seg: Segments, q: Fraction, epsilon: Fraction, max_rows: int,
             rng: RandomSource) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """One round of the rejection sampler of :func:`em_quantile` for every segment."""
    a, b = q.numerator, q.denominator
    s = scale(q, epsilon, max_rows)
    n = seg.end - seg.start
    an = a * n
    size = int((seg.hi - seg.lo).max()) + 1 if n.size else 1
    # reference block: the run containing position ⌊q·n⌋ (or the whole domain when a segment is empty)
    p = np.minimum(an // b, np.maximum(n - 1, 0))
    ref = np.where(n > 0, _count_at_most(values, seg, values[np.minimum(seg.start + p, max(values.size - 1, 0))]
                                         if values.size else np.zeros_like(p)), 0)
    reach = np.abs(b * ref - an) + window(s, size)
    c_min = np.maximum(-((reach - an) // b), 0)
    c_max = np.minimum((an + reach) // b, n)
    # candidate ends i in [c_min, c_max]: 0 (the gap below the data), n, or where the value changes
    i = _ranges(c_min, c_max + 1)
    owner = np.repeat(np.arange(n.size), c_max + 1 - c_min)
    pos = seg.start[owner] + i
    at_end = i == n[owner]
    nxt = values[np.where(at_end, 0, pos)] if values.size else np.zeros_like(pos)
    prev = values[np.where(i == 0, 0, pos - 1)] if values.size else np.zeros_like(pos)
    keep = (i == 0) | at_end | (prev != nxt)
    i, owner, at_end, nxt, prev = i[keep], owner[keep], at_end[keep], nxt[keep], prev[keep]
    lower = np.where(i == 0, seg.lo[owner], prev)
    upper = np.where(at_end, seg.hi[owner] + 1, nxt)
    count = np.bincount(owner, minlength=n.size)
    first = np.concatenate([[0], np.cumsum(count)])[:-1]
    last = first + count - 1
    # envelopes: everything below the first / above the last window block, at the utility bound next to it
    left_len = lower[first] - seg.lo
    right_len = seg.hi + 1 - upper[last]
    left_u = -(an - b * (c_min - 1))
    right_u = -(b * (c_max + 1) - an)
    per = count + 2
    offsets = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
    slot = np.arange(i.size) + 2 * owner + 1
    total = int(offsets[-1])
    util = np.zeros(total, dtype=np.int64)
    mult = np.zeros(total, dtype=np.int64)
    util[slot], mult[slot] = -np.abs(b * i - an[owner]), upper - lower
    util[offsets[:-1]], mult[offsets[:-1]] = np.where(c_min > 0, left_u, 0), np.where(c_min > 0, left_len, 0)
    util[offsets[1:] - 1], mult[offsets[1:] - 1] = np.where(c_max < n, right_u, 0), np.where(c_max < n, right_len, 0)
    pick = exponential_index_grouped(util, s, rng, offsets, multiplicities=mult)
    chosen = offsets[:-1] + pick
    start_code = np.where(pick == 0, seg.lo, np.where(pick == per - 1, upper[last], 0))
    inner = (pick > 0) & (pick < per - 1)
    block = first + np.where(inner, pick - 1, 0)
    start_code = np.where(inner, lower[block], start_code)
    code = start_code + np.array([int(rng.uniform_below(int(m), 1)[0]) for m in mult[chosen]], dtype=np.int64)
    c = np.where(inner, i[block], 0)
    accepted = inner.copy()
    for g in np.flatnonzero(~inner):          # an envelope was proposed (probability ≤ e⁻⁴⁰ by default)
        one = Segments(seg.start[g:g + 1], seg.end[g:g + 1], seg.lo[g:g + 1], seg.hi[g:g + 1])
        c[g] = int(_count_at_most(values, one, code[g:g + 1])[0])
        gamma = s * (int(util[chosen[g]]) + abs(b * int(c[g]) - int(an[g])))
        accepted[g] = bool(bernoulli_exp(gamma, 1, rng)[0])
    return code, c, accepted


def _count_at_most(values: npt.NDArray[np.int64], seg: Segments, v: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """#{x ≤ v[g]} in each segment's sorted slice (a vectorised binary search over all segments)."""
    lo, hi = seg.start.copy(), seg.end.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo - seg.start
        mid = (lo + hi) // 2
        right = active & (values[np.where(active, mid, 0)] <= v)
        lo = np.where(right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)


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
