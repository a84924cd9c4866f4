"""The exponential-mechanism quantile on an ordered integer domain, and the joint (recursive) version.

**One quantile** (the EM quantile of Smith 2011, digest ``003_thresholds_rsc.md`` §8, with a tie-aware
score). Data: codes ``x₁ ≤ … ≤ xₙ`` in a public domain ``[lo, hi]`` of integers. For an output ``z``
let ``L(z) = #{i : xᵢ < z}`` and ``C(z) = #{i : xᵢ ≤ z}``; ``z`` is an exact q-quantile when
``L(z) ≤ q·n ≤ C(z)``. With ``q = a/b`` the utility is minus the distance of ``q·n`` from ``[L, C]``:

    ``u(z) = −max(b·L(z) − a·n, a·n − b·C(z), 0)``,

and ``z`` is drawn with probability ∝ ``exp(s·u(z))``, ``s = ε / (2·m·max(a, b − a))``, over *every*
integer of ``[lo, hi]`` (``m`` = rows per privacy unit). Privacy: adding one row moves ``b·L − a·n``
by ``b − a`` or ``−a`` and ``a·n − b·C`` by ``a − b`` or ``a`` (removing: the opposite), so each term
of the max — and the max — moves by ≤ ``max(a, b − a)``, and ``m`` rows by ≤ ``m·max(a, b − a)``: the
McSherry–Talwar exponential mechanism is ε-DP with ``n`` private (add/remove), and ε-bounded-range,
hence ε²/8-zCDP (Cesar & Rogers 2021). Unlike the plain ``−|C(z) − q·n|``, a value repeated many
times scores 0 when the target rank falls inside its run, so tied data (integers, dates) get the value
itself rather than a random point of the gap after it.

Sampling is exact: ``(L, C)`` is constant on each data value ``{vⱼ}`` and on each gap
``(vⱼ, vⱼ₊₁)`` (and ``[lo, v₁)``), so a block is drawn with its length as multiplicity by
:func:`~dpframe.noise.exponential_index_grouped` — exactly the mass the EM gives its integers — then a
uniform integer inside it (``rng.uniform_below``). Only blocks within a window of the best utility are
listed; the rest is covered by two envelopes and a rejection step (:func:`em_quantile`), so a draw
costs O(window + log n), not O(n). No float ``exp``-then-normalise step exists anywhere.

**Several quantiles** ``q₁ < … < q_k`` of one column are released jointly by the recursive split of
Kaplan, Ligett & Stemmer (2022, "Differentially private approximate quantiles"): estimate the middle
quantile ``p`` with the EM at ``ε₀``, split the data at the released value, and recurse with the
rescaled probabilities ``qᵢ/p`` on the left and ``(qᵢ − p)/(1 − p)`` on the right. The rescaling
assumes the left part holds about ``p·n`` rows; splitting at a *value* breaks that on tied data (every
row equal to the value on one side: on 70 % zeros the deciles above the median missed by 16,000 of
100,000 rows, review 54h). So the splits run on **tie-broken codes** (:class:`TieBroken`): within each
group, the j-th row (0-based, in sorted order) equal to the code ``x`` gets the code
``x·M + min(j, M − 1)`` on a domain of ``|X|·M`` codes (``M`` = :func:`tie_spread`, public). A split
node draws a tie-broken code ``e`` with the EM and sends the rows with tie-broken code ``≤ e`` left
(domain ``[lo, e]``) and the rest right (domain ``[e, hi]``); it releases ``⌊e/M⌋``. A node without
sub-problems (a leaf) draws on the plain codes of its rows, over ``[⌊lo/M⌋, ⌊hi/M⌋]``. Releasing
``e`` means releasing how many rows equal to ``⌊e/M⌋`` go left, so a split can fall inside a run of
ties at the target rank (for runs of fewer than ``M`` rows; longer runs are split within their first
``M − 1`` rows or at their end).

Privacy. (1) The tie-break is neighbour-preserving: adding a row equal to ``x`` to a group that holds
``c`` of them adds exactly the tie-broken code ``x·M + min(c, M − 1)`` and leaves every other row's
code as it was (removing one removes the top code of its run), so datasets that differ in ``m`` rows
of one unit have tie-broken codes that differ in ``m`` codes. (2) On the tie-broken codes the
mechanism is the recursive split above: the split depends only on released codes and the public
``q``, and each code falls in exactly one sub-problem of a level, so a unit's ``≤ m`` codes in a level
spread over its sub-problems with Σcᵢ ≤ m — the level costs ε₀ (pure: Σ ε₀cᵢ/m ≤ ε₀; zCDP: Σ
(ε₀cᵢ/m)²/8 ≤ ε₀²/8); a leaf's EM on its rows' plain codes is an ε₀-DP function of its sub-problem's
rows as well. (3) Releasing ``⌊e/M⌋`` rather than ``e`` is post-processing. The tree has
``⌈log₂(k + 1)⌉`` levels, composed adaptively: total ε = ⌈log₂(k + 1)⌉·ε₀ instead of k·ε₀ for a k-way
split (deciles: 4ε₀ vs 9ε₀). Outputs are non-decreasing in q by construction. Groups are disjoint and
use the same calibration (a unit's rows across groups again sum to ≤ m; the tie-break counts within
each group). Splitting at the *target rank* among ties instead (``clamp(⌊p·n⌋, L, C)`` rows left) is
not private at this cost: one added row above the run moves ``⌊p·n⌋`` by one, so a tied row changes
sides and the right part swaps a row — three rows of change where the proof above allows one.

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
from typing import Any

import numpy as np
import numpy.typing as npt

from dpframe.mechanism.sorted_codes import SortedCodes, ranges
from dpframe.noise import RandomSource, bernoulli_exp_ratio, exponential_index_grouped
from dpframe.parallel import chunk_size, map_chunks

SUB_DENOMINATOR = 2**20
"""Rescaled probabilities of sub-problems are rounded to this denominator (public; only shapes accuracy)."""

TIE_SPREAD = 2**20
"""Tie-broken codes per plain code at a split (:func:`tie_spread`): runs of ties shorter than this are split
at any row (public; each split level's rank error bound grows by ln of it)."""

MAX_CODES = 2**62
"""The largest tie-broken domain (|X|·M): codes, lengths and the uniform draws stay in int64."""


def tie_spread(size: int) -> int:
    """M, the tie-broken codes per plain code on a domain of ``size`` codes: 2²⁰, less where |X|·M would pass 2⁶².

    Example:
        >>> tie_spread(101), tie_spread(2**32), tie_spread(2**50), tie_spread(2**62)
        (1048576, 1048576, 4096, 1)

    """
    return max(1, min(TIE_SPREAD, MAX_CODES // max(size, 1)))


class TieBroken:
    """Sorted codes read as tie-broken codes: a group's j-th code ``x`` (sorted order) as ``x·M + min(j, M − 1)``.

    Answers :meth:`at`, :meth:`at_where` and :meth:`count` as :class:`~dpframe.mechanism.SortedCodes` does, on
    the tie-broken codes (same positions: the map keeps the order). A row's tie rank j is counted from the start
    of its value's run *in its group* (a search; partial codes complete where a run's start is not known).

    Example:
        >>> codes = TieBroken(SortedCodes.of([np.array([0, 0, 0, 2]), np.array([0, 0])]), 2)
        >>> codes.at(np.arange(6)).tolist()           # the third 0 saturates at 0·2 + 1
        [0, 1, 1, 4, 0, 1]
        >>> codes.count(np.array([0, 1]), np.array([4, 4]), np.array([1, 1]), strict=True).tolist()
        [1, 0]

    """

    def __init__(self, codes: SortedCodes, spread: int) -> None:
        self.codes, self.spread = codes, spread

    def _groups(self, pos: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Start and end of the group holding each position (an empty range at the end maps to the last group)."""
        starts = self.codes.starts
        g = np.clip(np.searchsorted(starts, pos, side="right") - 1, 0, max(starts.size - 1, 0))
        return starts[g], starts[g] + self.codes.sizes[g]

    def _run_start(self, pos: npt.NDArray[np.int64], v: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The first position of v's run in the group of ``pos``, for codes ``≥ v`` at ``pos`` (v = the code there).

        Searched among the :data:`NEAR` positions before ``pos`` first (most runs are short), then in the
        group's positions before ``pos`` where the run reaches past them (unless the group's first code, when
        known, is already ``≥ v``): the same answer, fewer search steps.
        """
        first = self._groups(pos)[0]
        near = np.maximum(first, pos - NEAR)
        below = self.codes.count(near, pos, v, strict=True)
        out: npt.NDArray[np.int64] = near + below
        far = np.flatnonzero((below == 0) & (near > first))
        if far.size:
            # a run from the group's first code (a zero-inflated group's zeros) needs no search, where that
            # code is known (reading an unknown one would complete partial codes the search may not need)
            first_far = first[far]
            seen = np.flatnonzero(self.codes.is_known(first_far))
            if seen.size:
                at_first = np.zeros(far.size, dtype=bool)
                at_first[seen] = self.codes.at(first_far[seen]) >= v[far[seen]]
                out[far[at_first]] = first_far[at_first]
                far = far[~at_first]
            if far.size and self.codes.known:
                # full codes: a wider look back before the group search (on partial codes a window's unknown
                # start could complete them where the group search would not)
                wide = np.maximum(first[far], near[far] - WIDE)
                found = self.codes.count(wide, near[far], v[far], strict=True)
                hit = (found > 0) | (wide == first[far])
                out[far[hit]] = wide[hit] + found[hit]
                far = far[~hit]
            out[far] = first[far] + self.codes.count(first[far], near[far], v[far], strict=True)
        return out

    def at(self, pos: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The tie-broken codes at the global positions ``pos``."""
        v = self.codes.at(pos)
        if self.spread == 1 or not pos.size:
            return v
        out: npt.NDArray[np.int64] = v * self.spread + np.minimum(pos - self._run_start(pos, v), self.spread - 1)
        return out

    def at_where(self, pos: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_], default: Any = 0
                 ) -> npt.NDArray[np.int64]:
        """The tie-broken codes at ``pos`` where ``mask`` holds, ``default`` elsewhere (only those are read)."""
        if self.spread == 1:
            return self.codes.at_where(pos, mask, default)
        out = np.broadcast_to(np.asarray(default, dtype=np.int64), pos.shape).copy()
        out[mask] = self.at(pos[mask])
        return out

    def count(self, start: npt.NDArray[np.int64], end: npt.NDArray[np.int64], e: npt.NDArray[np.int64], *,
              strict: bool) -> npt.NDArray[np.int64]:
        """``#{tie-broken code < e[i]}`` (``strict``) or ``≤ e[i]`` among the positions ``[start[i], end[i])``.

        With ``e = v·M + r``: the codes below v, plus the copies of v whose tie rank j has ``min(j, M − 1) < r``
        (j < r) or ``≤ r`` (j ≤ r, or every copy when r = M − 1) — the first ones of v's run — inside the range.
        The run is found locally: it starts at the range's first code ≥ v when a smaller code precedes that
        inside the range (else :meth:`_run_start` searches back from the range's start), and its end is
        searched only up to the last copy that can pass (``run + r``), not in the whole group.
        """
        if self.spread == 1:
            return self.codes.count(start, end, e, strict=strict)
        v, r = np.divmod(e, self.spread)
        below = self.codes.count(start, end, v, strict=True)
        out: npt.NDArray[np.int64] = below.copy()
        p = start + below                       # the range's first position with a code ≥ v (or its end)
        i = np.flatnonzero(p < end)             # elsewhere no copy of v lies inside the range
        if not i.size:
            return out
        # v's run starts at p when a code < v precedes it inside the range (below > 0), else at or before start
        run = p[i].copy()
        back = np.flatnonzero(below[i] == 0)
        if back.size:
            run[back] = self._run_start(p[i][back], v[i][back])
        upto = run + r[i] + (0 if strict else 1)
        lim = np.minimum(end[i], upto)
        if not strict:
            lim = np.where(r[i] == self.spread - 1, end[i], lim)
        # the copies of v in [p, lim): the run's first rows that pass, inside the range
        out[i] += self.codes.count(p[i], np.maximum(lim, p[i]), v[i], strict=False)
        return out


NEAR = 8
""":meth:`TieBroken._run_start` looks this many positions back before searching a whole group (speed only)."""

WIDE = 256
""":meth:`TieBroken._run_start` then looks this many further back on full codes (speed only)."""

Codes = SortedCodes | TieBroken
"""What the EM reads: plain sorted codes (a leaf, one quantile) or tie-broken ones (a split)."""


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

    def take(self, index: npt.NDArray[np.intp]) -> Segments:
        """The segments at ``index`` (repeats allowed)."""
        return Segments(self.start[index], self.end[index], self.lo[index], self.hi[index])


SEGMENT_CHUNK = 512
"""At least this many segments (groups) per task of :func:`em_quantile` on the thread pool, and at most
:data:`TASKS` tasks (:func:`~dpframe.parallel.chunk_size`: a function of the number of segments only, so a
seeded run draws the same stream on every machine)."""

TASKS = 8
"""At most this many tasks per proposal round: few and large, so that each numpy call works on many segments
and releases the GIL for long (on 16 cores, deciles over 100,000 groups: 2.7–2.9 s at 8 tasks and 4–8
workers against 3.3–4.4 s at 32 tasks and 2 workers; bench/README.md, "The EM's task layout")."""

WORKERS = 8
"""At most this many threads draw at once (:func:`~dpframe.parallel.map_chunks`' ``workers``): a proposal round
is many numpy calls that hold the GIL between them, so more threads than this only queue for it."""

COPIES = 8
"""At most this many independent proposals per pending segment in one round, once fewer than
:data:`SEGMENT_CHUNK` segments are pending (speed only)."""

ENVELOPE_NATS = 12
"""Window slack: a proposal falls outside the window with probability ≤ e⁻¹² (speed only, not privacy)."""
CORE_NATS = Fraction(1, 2)
"""Blocks within ½ nat (utility 1/(2s)) of the best are listed one by one; beyond, pieces of ½, ½, 1, 2, … nats."""


def window(s: Fraction, size: int) -> int:
    """Δ_U: blocks with utility ≥ U_ref − Δ_U are proposed exactly or through pieces; the rest, two envelopes.

    With Δ_U ≥ (ln|X| + 12)/s the two outer envelopes' total weight is ≤ e⁻¹² of the window's, so they
    are almost never proposed. Any Δ_U ≥ 0 gives the same (exact) output distribution.
    """
    return math.ceil(Fraction(math.ceil((size.bit_length() * 0.6932 + ENVELOPE_NATS) * 1024), 1024) / s)


def core_window(s: Fraction) -> int:
    """The utility span listed block by block (:data:`CORE_NATS`/s); also the first envelope pieces' span."""
    return math.ceil(CORE_NATS / s)


def em_quantile(codes: Codes, seg: Segments, q: Fraction, epsilon: Fraction, max_rows: int,
                rng: RandomSource) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """One EM quantile per segment: (the released codes, #{x ≤ code} in each segment — private, for splitting).

    A rejection sampler. The score is unimodal along the domain and moves by b per rank, so blocks are
    grouped by rank distance from the target q·n:

    * the *core* — blocks within :func:`core_window` (½ nat) of the best utility — is listed block by
      block with its exact utility;
    * beyond it, up to :func:`window` (ln|X| + 12 nats), consecutive ranks form *pieces* spanning ½, ½, 1,
      2, … nats outwards (:func:`_piece_steps`): a piece is one candidate whose weight is its domain length
      times exp(s·U_piece), with U_piece the utility bound at its inner edge (≥ the utility of each of its
      integers);
    * beyond the window, two outer *envelopes* reach the domain ends, bounded the same way.

    One exact EM draw over the candidates (``exponential_index_grouped``), a uniform integer z inside the
    chosen block or piece, and for a piece or envelope acceptance with probability exp(−s·(U − u(z)))
    (an exact Bernoulli); rejected segments draw again from scratch. Every integer z is thus proposed
    with weight exp(s·ũ(z)), ũ ≥ u and equal in the core, so accepted draws have probability exactly
    ∝ exp(s·u(z)). A piece w nats wide that starts d nats below the best is proposed with weight about
    w·e⁻ᵈ and accepted with probability ≥ e⁻ʷ: doubling widths keep the far pieces (d ≥ 2w) rare while
    their count grows only with the logarithm of the window; 80–95 % of the draws are accepted in
    ``bench/quantiles.py`` (speed only: any piece layout gives the same distribution).

    ``codes`` is read only through :meth:`SortedCodes.at` / :meth:`SortedCodes.count`, which answer as
    the fully sorted data would (completing partial codes first if they must); the reads stay within
    the window (plus the envelope tests), which :func:`listing_reach` bounds.

    Segments are independent: each round proposes for every pending segment, in chunks
    (:data:`SEGMENT_CHUNK`) that run as tasks on the thread pool (:func:`dpframe.parallel.map_chunks`; in
    chunk order on one thread for a seeded source), then the rejected ones (about one in six) go to the
    next round together — few, larger chunks rather than a small round in every chunk. Once fewer than
    a chunk are pending, each gets several independent proposals in one round (up to :data:`COPIES`)
    and keeps its first accepted one: the first acceptance among independent tries is a draw of the
    target distribution, as with one try per round, in fewer rounds of fixed numpy dispatch.
    """
    out = np.zeros(seg.start.size, dtype=np.int64)
    below = np.zeros(seg.start.size, dtype=np.int64)
    pending = np.arange(seg.start.size)
    while pending.size:
        copies = max(1, min(COPIES, SEGMENT_CHUNK // pending.size))
        tries = np.repeat(pending, copies)             # a segment's tries are consecutive

        def chunk(first: int, end: int, tries: npt.NDArray[np.int64] = tries) -> tuple[Any, Any, Any]:
            return _propose(codes, seg.take(tries[first:end]), q, epsilon, max_rows, rng)

        parts = map_chunks(chunk, tries.size, chunk_size(tries.size, SEGMENT_CHUNK, TASKS), rng, workers=WORKERS)
        code, c, accepted = (np.concatenate([p[i] for p in parts]) for i in range(3))
        hits = np.flatnonzero(accepted)
        _, first = np.unique(hits // copies, return_index=True)     # each segment's first accepted try
        won = hits[first]
        out[tries[won]], below[tries[won]] = code[won], c[won]
        done = np.zeros(pending.size, dtype=bool)
        done[won // copies] = True
        pending = pending[~done]
    return out, below


def _utility(a: int, b: int, an: Any, low: Any, high: Any) -> Any:
    """−max(b·L − a·n, a·n − b·C, 0), elementwise (``low`` = L, ``high`` = C)."""
    return -np.maximum(np.maximum(b * low - an, an - b * high), 0)


def _take(codes: Codes, pos: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_],
          default: Any = 0) -> npt.NDArray[np.int64]:
    """``codes`` at ``pos`` where ``mask`` holds, ``default`` elsewhere (only masked positions are read)."""
    return codes.at_where(pos, mask, default)


def _propose(codes: Codes, seg: Segments, q: Fraction, epsilon: Fraction, max_rows: int,
             rng: RandomSource) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """One round of the rejection sampler of :func:`em_quantile` for every segment."""
    a, b = q.numerator, q.denominator
    s = scale(q, epsilon, max_rows)
    n = seg.end - seg.start
    an = a * n
    nseg = n.size
    size = int((seg.hi - seg.lo).max()) + 1 if nseg else 1
    full = n > 0
    # reference: the value at position ⌊q·n⌋ (a block of length 1); an empty segment has one block, u = 0
    p_ref = np.minimum(an // b, np.maximum(n - 1, 0))
    v_ref = _take(codes, seg.start + p_ref, full)
    ref_low = _count_near(codes, seg, v_ref, p_ref, strict=True)
    ref_high = _count_near(codes, seg, v_ref, p_ref + full, strict=False)
    u_ref = np.where(full, -_utility(a, b, an, ref_low, ref_high), 0)
    wide, narrow = window(s, size), min(core_window(s), window(s, size))
    outer_min, outer_max = _rank_range(u_ref + wide, an, b, n)      # the window, in ranks C
    c_min, c_max = _rank_range(u_ref + narrow, an, b, n)            # the core
    # core: runs meeting positions [c_min − 1, c_max] (listed by their last position), plus the run holding c_max
    p0 = np.where(full, np.maximum(c_min - 1, 0), 0)
    p1 = np.where(full, np.minimum(c_max, n - 1), -1)
    pos = ranges(p0, p1 + 1)
    owner = np.repeat(np.arange(nseg), p1 + 1 - p0)
    glob = seg.start[owner] + pos
    here = codes.at(glob)
    inner = pos < n[owner] - 1
    last = ~inner | (here != _take(codes, glob + 1, inner))
    continues = full & (p1 + 1 < n)
    end_value = _take(codes, seg.start + np.maximum(p1, 0), continues)
    tail = np.flatnonzero(continues & (end_value == _take(codes, seg.start + p1 + 1, continues)))
    run_value = np.concatenate([here[last], end_value[tail]])
    run_owner = np.concatenate([owner[last], tail])
    # runs are listed in (segment, value) order, each segment's tail run after its other runs: a stable
    # sort by segment alone gives the (segment, value) order
    order = np.argsort(run_owner, kind="stable")
    run_value, run_owner = run_value[order], run_owner[order]
    # C of a run listed by its last position is that position + 1; L is the previous run's C (a search
    # only for the first run of each segment and for the runs continuing past c_max)
    tail_high = _count(codes, seg.take(tail), end_value[tail], strict=False)
    run_high = np.concatenate([pos[last] + 1, tail_high])[order]
    follows = np.zeros(run_owner.size, dtype=bool)
    follows[1:] = run_owner[1:] == run_owner[:-1]
    run_low = np.zeros(run_owner.size, dtype=np.int64)
    run_low[1:][follows[1:]] = run_high[:-1][follows[1:]]
    heads = np.flatnonzero(~follows)
    run_low[heads] = _count_near(codes, seg.take(run_owner[heads]), run_value[heads], run_high[heads] - 1,
                                 strict=True)
    more = run_high < n[run_owner]
    after = _take(codes, seg.start[run_owner] + run_high, more, seg.hi[run_owner] + 1)
    gap_in = run_high <= c_max[run_owner]
    # candidates per segment, in domain order:
    #   [left envelope, left pieces (outermost first)…, gap0?, (value, gap?)…, right pieces…, right envelope]
    cap = PIECE_CAP if isinstance(codes, TieBroken) and codes.spread > 1 else None
    pieces = _pieces(s, b, (c_min, c_max), (outer_min, outer_max), n, cap)
    gap0 = c_min == 0
    first_run = np.searchsorted(run_owner, np.arange(nseg))
    nruns = np.bincount(run_owner, minlength=nseg)
    per = 2 + 2 * pieces + gap0 + nruns + np.bincount(run_owner, weights=gap_in, minlength=nseg).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
    total = int(offsets[-1])
    length = np.zeros(total, dtype=np.int64)                        # lower ends and C: read for the chosen only
    util = np.zeros(total, dtype=np.int64)
    # value blocks and the gaps after them
    rank_in_seg = np.arange(run_owner.size) - first_run[run_owner]
    gaps_before = np.concatenate([[0], np.cumsum(gap_in)])[:-1] - np.concatenate([[0], np.cumsum(gap_in)])[
        first_run[run_owner]]
    vslot = offsets[run_owner] + 1 + pieces + gap0[run_owner] + rank_in_seg + gaps_before
    length[vslot] = 1
    util[vslot] = _utility(a, b, an[run_owner], run_low, run_high)
    gslot = vslot[gap_in] + 1
    length[gslot] = after[gap_in] - run_value[gap_in] - 1
    util[gslot] = _utility(a, b, an[run_owner[gap_in]], run_high[gap_in], run_high[gap_in])
    # gap0 [lo, first value) when c_min = 0
    z0 = np.flatnonzero(gap0)
    first_value = _take(codes, seg.start, full & gap0, seg.hi + 1)     # read only where it is used
    length[offsets[z0] + 1 + pieces] = first_value[z0] - seg.lo[z0]
    util[offsets[z0] + 1 + pieces] = _utility(a, b, an[z0], 0, 0)
    bound_lower, bound_length, bound_util = _bounding_candidates(codes, seg, an, b, s, pieces, (c_min, c_max),
                                                                 (outer_min, outer_max), cap)
    steps = np.arange(pieces + 1)[:, None]
    slots = np.concatenate([offsets[:-1] + steps, offsets[1:] - 1 - steps])     # as _bounding_candidates' rows
    length[slots], util[slots] = bound_length, bound_util
    pick = exponential_index_grouped(util, s, rng, offsets, multiplicities=length)
    chosen = offsets[:-1] + pick
    # the chosen candidate's lower end and C: a piece or envelope (row of _bounding_candidates), gap0, or the
    # value block or gap of run r (vslot is increasing: r is the last run listed at or before the slot)
    from_right = per - 1 - pick
    bounded = (pick <= pieces) | (from_right <= pieces)
    lower = np.empty(nseg, dtype=np.int64)
    c = np.zeros(nseg, dtype=np.int64)
    edge = np.flatnonzero(bounded)
    lower[edge] = bound_lower[np.where(pick[edge] <= pieces, pick[edge], pieces + 1 + from_right[edge]), edge]
    core = np.flatnonzero(~bounded)
    if vslot.size:
        r = np.maximum(np.searchsorted(vslot, chosen[core], side="right") - 1, 0)
        first_gap = gap0[core] & (pick[core] == 1 + pieces)
        lower[core] = np.where(first_gap, seg.lo[core], run_value[r] + (chosen[core] != vslot[r]))
        c[core] = np.where(first_gap, 0, run_high[r])
    else:                                       # no runs listed: the core is gap0 alone
        lower[core] = seg.lo[core]
    code = lower + _uniform_below_each(length[chosen], rng)
    accepted = ~bounded
    tested = np.flatnonzero(bounded)            # a piece or an envelope: test z's exact utility
    if tested.size:
        sub = seg.take(tested)
        low_z = _count(codes, sub, code[tested], strict=True)
        c[tested] = _count_near(codes, sub, code[tested], low_z, strict=False)     # C = L unless z is a code
        gap = util[chosen[tested]] - _utility(a, b, an[tested], low_z, c[tested])       # ≥ 0 integers
        big = int(gap.max()) > 2**62 // s.numerator          # s·gap as an exact ratio, in Python ints if needed
        accepted[tested] = bernoulli_exp_ratio((gap.astype(object) if big else gap) * s.numerator, s.denominator, rng)
    return code, c, accepted


def _rank_range(reach: npt.NDArray[np.int64], an: npt.NDArray[np.int64], b: int, n: npt.NDArray[np.int64]
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The ranks C with a·n − b·C ≤ reach and b·C − a·n ≤ reach, clipped to [0, n]."""
    return np.maximum(-((reach - an) // b), 0), np.minimum((an + reach) // b, n)


def _pieces(s: Fraction, b: int, core: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
            outer: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]], n: npt.NDArray[np.int64],
            cap: int | None = None) -> int:
    """Pieces per side: enough to reach the window's edge in every segment (≥ 1; speed only).

    Fewer would still be exact (the outer envelope's bound holds from wherever the pieces stop); small
    segments, whose core already spans the window, get one (empty) piece a side. ``cap``: see :func:`_piece_steps`.
    """
    (c_min, c_max), (outer_min, outer_max) = core, outer
    left = c_min - 1 - np.maximum(outer_min - 1, 0)
    right = np.minimum(outer_max, n - 1) - c_max
    needed = -(-int(np.maximum(left, right).max(initial=0)) // _piece_ranks(s, b))    # in first-piece widths
    if cap is None or needed <= cap:
        return max(needed - 1, 0).bit_length() + 1
    return cap.bit_length() - 1 - (-needed // cap)


def _piece_ranks(s: Fraction, b: int) -> int:
    """Ranks of the first envelope piece: the score moves by b per rank, so it spans ≈ core_window(s)."""
    return max(1, core_window(s) // b)


PIECE_CAP = 4
"""On tie-broken codes, pieces stop doubling at this many first-piece widths (2 nats; speed only). A piece is
accepted with probability ≥ e^(−its width in nats) whatever its length, but it is *proposed* in proportion to
its length: a piece holding a gap between two plain codes (M tie-broken codes per plain code) next to a run
of ties was proposed almost every time and, 8 or 16 nats wide, accepted once in thousands of rounds (1,000
groups of top-heavy data: minutes). Capped, each proposal is accepted with probability ≥ e⁻²."""


def _piece_steps(s: Fraction, b: int, pieces: int, cap: int | None = None) -> npt.NDArray[np.int64]:
    """Rank distances of the piece boundaries from the core: 0, r, 2r, 4r, … (``pieces + 1`` of them).

    With ``cap`` (a power of two) the widths stop doubling at ``cap·r``: 0, r, 2r, …, cap·r, 2·cap·r, 3·cap·r, …

    Example:
        >>> _piece_steps(Fraction(1, 4), 1, 4).tolist()     # r = 2 ranks: pieces of 2, 2, 4, 8 ranks
        [0, 2, 4, 8, 16]
        >>> _piece_steps(Fraction(1, 4), 1, 6, cap=4).tolist()      # then pieces of 8 ranks
        [0, 2, 4, 8, 16, 24, 32]

    """
    grow = pieces if cap is None else min(pieces, cap.bit_length())
    steps = [0, *(1 << i for i in range(grow))]
    steps += [steps[-1] * (j + 2) for j in range(pieces - grow)]
    return _piece_ranks(s, b) * np.array(steps, dtype=np.int64)


def _bounding_candidates(codes: Codes, seg: Segments, an: npt.NDArray[np.int64], b: int, s: Fraction,
                         pieces: int, core: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
                         outer: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]], cap: int | None = None
                         ) -> tuple[Any, Any, Any]:
    """(lower, length, utility bound) of each segment's pieces and envelopes, shape (2·pieces + 2, segments).

    Rows: the left envelope and left pieces from the outside in, then the right ones from the outside
    in. Left of the core the boundaries are ranks B₀ = c_min − 1 ≥ B₁ ≥ … ≥ B_P ≥ max(outer_min − 1, 0)
    (:func:`_piece_steps` from B₀, stopping at the window); piece i is ``[x(Bᵢ), x(Bᵢ₋₁))``: every z in it
    has z < x(Bᵢ₋₁), so C(z) ≤ Bᵢ₋₁ and u(z) ≤ −(a·n − b·Bᵢ₋₁); the envelope is ``[lo, x(B_P))``. Right of the core,
    A₀ = c_max ≤ A₁ ≤ … ≤ A_P ≤ min(outer_max, n − 1); piece i is ``[x(Aᵢ₋₁) + 1, x(Aᵢ) + 1)`` where
    L(z) ≥ Aᵢ₋₁ + 1, so u(z) ≤ −(b·(Aᵢ₋₁ + 1) − a·n); the envelope is ``[x(A_P) + 1, hi]``. Together with
    the core they partition ``[lo, hi]``. A side the core already reaches the end of gets zero lengths.
    """
    (c_min, c_max), (outer_min, outer_max) = core, outer
    n = seg.end - seg.start
    step = _piece_steps(s, b, pieces, cap)[:, None]
    # rows are boundaries or columns, segments along rows: long contiguous rows for numpy's inner loops
    left_ok = (n > 0) & (c_min >= 1)
    left_rank = np.maximum(c_min - 1 - step, np.maximum(outer_min - 1, 0))      # B₀ … B_P
    left_x = _take(codes, seg.start + left_rank, np.broadcast_to(left_ok, left_rank.shape))
    right_ok = (n > 0) & (c_max < n)
    right_rank = np.minimum(c_max + step, np.minimum(outer_max, n - 1))         # A₀ … A_P
    right_x = _take(codes, seg.start + right_rank, np.broadcast_to(right_ok, right_rank.shape))
    # columns, each side: [envelope, piece P, …, piece 1], written in place (one pass each)
    width = pieces + 1
    lower = np.empty((2 * width, n.size), dtype=np.int64)
    length = np.empty((2 * width, n.size), dtype=np.int64)
    util = np.empty((2 * width, n.size), dtype=np.int64)
    left, right = slice(0, width), slice(width, 2 * width)
    lower[0] = seg.lo
    lower[1:width] = left_x[pieces:0:-1]
    np.subtract(left_x[::-1], lower[left], out=length[left])                    # ends: x(B_P), …, x(B₀)
    np.multiply(left_rank[::-1], b, out=util[left])
    util[left] -= an                                                            # −(a·n − b·B)
    np.add(right_x[::-1], 1, out=lower[right])
    length[width] = seg.hi + 1
    length[width + 1:] = lower[width:2 * width - 1]                             # ends: hi + 1, x(A_P) + 1, …
    length[right] -= lower[right]
    np.add(right_rank[::-1], 1, out=util[right])
    util[right] *= -b
    util[right] += an                                                           # −(b·(A + 1) − a·n)
    for ok, side in ((left_ok, left), (right_ok, right)):
        if not ok.all():
            length[side, ~ok] = 0
            util[side, ~ok] = 0
    return lower, length, util


def _count(codes: Codes, seg: Segments, v: npt.NDArray[np.int64], *, strict: bool) -> npt.NDArray[np.int64]:
    """#{x < v[g]} (``strict``) or #{x ≤ v[g]} in each segment's sorted slice."""
    return codes.count(seg.start, seg.end, v, strict=strict)


def _count_near(codes: Codes, seg: Segments, v: npt.NDArray[np.int64], near: npt.NDArray[np.int64], *,
                strict: bool) -> npt.NDArray[np.int64]:
    """:func:`_count` when the answer is probably ``near`` (in ``[0, n]``): two reads instead of a search.

    The count is ``near`` exactly when the code before it passes the test (or ``near`` = 0) and the code at
    it fails (or ``near`` = n); only the other segments (ties around the reference) are searched. The reads
    are the neighbours of ranks the caller reads anyway.
    """
    n = seg.end - seg.start
    passes = np.less if strict else np.less_equal
    before = near > 0
    at = near < n
    fits = ~before | passes(_take(codes, seg.start + near - 1, before), v)
    fits &= ~at | ~passes(_take(codes, seg.start + near, at), v)
    out = near.copy()
    miss = np.flatnonzero(~fits)
    if miss.size:
        out[miss] = _count(codes, seg.take(miss), v[miss], strict=strict)
    return out


def joint_quantiles(groups: SortedCodes | Sequence[npt.NDArray[np.int64]], size: int, qs: Sequence[Fraction],
                    epsilon_level: Fraction, max_rows: int, rng: RandomSource, *, spread: int | None = None
                    ) -> npt.NDArray[np.int64]:
    """Codes of the quantiles ``qs`` (sorted, distinct) per group: shape (groups, k), rows non-decreasing.

    ``groups`` holds each group's sorted codes (arrays, or :class:`~dpframe.mechanism.SortedCodes`,
    possibly partial); codes outside ``[0, size)`` (float rounding at the top bound) are clipped. Each
    level of the recursion costs ``epsilon_level`` (see the module docstring). Splits draw on the
    tie-broken codes (``spread`` of them per code, default :func:`tie_spread`; public), leaves on the codes.

    Example:
        >>> import numpy as np
        >>> from dpframe.noise import SeededRandomSource
        >>> zeros = [np.array([0] * 7_000 + list(range(1, 3_001)), dtype=np.int64)]   # 70 % zeros
        >>> out = joint_quantiles(zeros, 10_000, (Fraction(3, 5), Fraction(4, 5)), Fraction(2), 1,
        ...                       SeededRandomSource(1))
        >>> out[0, 0], bool(950 < out[0, 1] < 1050)      # the 0.8-quantile is 1,000 (rank 8,000)
        (np.int64(0), True)

    """
    codes = SortedCodes.of(groups).clipped(0, size - 1)
    spread = tie_spread(size) if spread is None else spread
    ties = TieBroken(codes, spread)
    ngroups = codes.sizes.size
    root = Segments(codes.starts, codes.starts + codes.sizes, np.zeros(ngroups, dtype=np.int64),
                    np.full(ngroups, size * spread - 1, dtype=np.int64))
    out = np.zeros((ngroups, len(qs)), dtype=np.int64)
    stack: list[tuple[list[int], list[Fraction], Segments]] = [(list(range(len(qs))), list(qs), root)]
    while stack:
        idx, probs, seg = stack.pop()
        if not idx or ngroups == 0:
            continue
        mid = len(idx) // 2
        p = probs[mid]
        left, right = split_probabilities(probs, mid)
        if not left and not right:      # a leaf: the plain codes of its rows, on the plain domain
            plain = Segments(seg.start, seg.end, seg.lo // spread, seg.hi // spread)
            out[:, idx[mid]] = em_quantile(codes, plain, p, epsilon_level, max_rows, rng)[0]
            continue
        e, below = em_quantile(ties, seg, p, epsilon_level, max_rows, rng)
        out[:, idx[mid]] = e // spread
        split = seg.start + below
        if left:
            stack.append((idx[:mid], left, Segments(seg.start, split, seg.lo, e)))
        if right:
            stack.append((idx[mid + 1:], right, Segments(split, seg.end, e, seg.hi)))
    return out


def listing_reach(size: int, qs: Sequence[Fraction], epsilon_level: Fraction, max_rows: int) -> int:
    """How far from ⌊qᵢ·n⌋ (in ranks) :func:`joint_quantiles` usually reads: the ``reach`` of its ``near``.

    Each EM call lists ranks within ``window/b + 1`` of its sub-problem's target (q = a/b; a split's
    window is over the |X|·M tie-broken codes), and a sub-problem's target moves by at most its ancestors'
    listing widths (unless an envelope was drawn, probability ≤ e⁻¹²); the reach is the largest sum along a
    path of the split tree, plus a margin. Public: a function of the domain size, the probabilities and the
    budget only. Reading further is still exact (:class:`~dpframe.mechanism.SortedCodes` completes), just
    slower; so is finding where a long run of ties starts, which a split reads.

    Example:
        >>> listing_reach(2**20, [Fraction(1, 2)], Fraction(1), 1)   # ±27 ranks listed, +2, +16
        45

    """
    spread = tie_spread(size)

    def width(q: Fraction, codes: int) -> int:
        return window(scale(q, epsilon_level, max_rows), codes) // q.denominator + 2

    def reach(probs: list[Fraction]) -> int:
        if not probs:
            return 0
        mid = len(probs) // 2
        p = probs[mid]
        left, right = split_probabilities(probs, mid)
        if not left and not right:
            return width(p, size)
        return width(p, size * spread) + max(reach(left), reach(right))
    return reach(list(qs)) + 16


def rank_error_bound(size: int, k: int, epsilon_level: Fraction, max_rows: int, beta: float) -> float:
    """A (1 − β) bound on each released quantile's rank error (from public facts only).

    The rank error of z is the distance from q·n to [L(z), C(z)] (0 for an exact quantile, ties
    included). Each EM call has utility optimum 0, so by the McSherry–Talwar bound it is within
    ``(2·m/ε₀)·ln(N·k/β)`` ranks of its target with probability ≥ 1 − β/k (sensitivity ≤ m ranks), N
    the number of candidates: |X| at a leaf, |X|·M (tie-broken codes, :func:`tie_spread`) at a split,
    where the rank of the split is what its sub-problems' targets inherit. A quantile's error adds those
    of its ancestors in the split tree: at most ⌈log₂(k + 1)⌉ − 1 splits and one last call, a leaf
    where the path is longest. This holds when no value is held by M or more rows of a group (a longer run
    of ties is split within its first M − 1 rows or at its end).

    Example:
        >>> round(rank_error_bound(2**32, 1, Fraction(1), 1, 0.05))
        50
        >>> round(rank_error_bound(101, 9, Fraction(1, 4), 1, 0.05))     # 3 splits over 101·2²⁰ codes, a leaf
        647

    """
    splits = depth(k) - 1
    per_rank = 2 * max_rows / float(epsilon_level)
    return per_rank * (splits * math.log(size * tie_spread(size) * k / beta) + math.log(size * k / beta))


def split_probabilities(probs: Sequence[Fraction], mid: int) -> tuple[list[Fraction], list[Fraction]]:
    """The sub-problems' probabilities when ``probs`` (sorted, in [0, 1]) is split at p = ``probs[mid]``.

    Left of p: qᵢ/p; right: (qᵢ − p)/(1 − p); each rounded to a denominator ≤ :data:`SUB_DENOMINATOR`
    (public; rounding is monotone, so they stay sorted in [0, 1]). Rounding can make p itself 0 or 1
    (say 1/4999 and 1/4998 above 1/5000 both round to 0): then every qᵢ on that side equals p, and its
    sub-problem's probability is p's own end of [0, 1] (0 on the left, 1 on the right) rather than 0/0.

    Example:
        >>> [str(x) for side in split_probabilities([Fraction(0), Fraction(0), Fraction(1, 2)], 1) for x in side]
        ['0', '1/2']

    """
    p = probs[mid]
    left = [_bounded(x / p) if p else Fraction(0) for x in probs[:mid]]
    right = [_bounded((x - p) / (1 - p)) if p != 1 else Fraction(1) for x in probs[mid + 1:]]
    return left, right


def _bounded(x: Fraction) -> Fraction:
    return x.limit_denominator(SUB_DENOMINATOR)


def _uniform_below_each(bounds: npt.NDArray[np.int64], rng: RandomSource) -> npt.NDArray[np.int64]:
    """One exact uniform integer in ``[0, bounds[i])`` per entry (1 ≤ bound ≤ 2⁶²), vectorised.

    64-bit words below 2⁶⁴ mod bound are rejected and redrawn; the accepted range has a length divisible
    by the bound, so the residue is exactly uniform.
    """
    m = bounds.astype(np.uint64)
    threshold = (np.uint64(2**64 - 1) - m + np.uint64(1)) % m        # 2⁶⁴ mod m, in uint64
    words = rng.random_uint64(m.size)
    bad = np.flatnonzero(words < threshold)
    while bad.size:
        words[bad] = rng.random_uint64(bad.size)
        bad = bad[words[bad] < threshold[bad]]
    out: npt.NDArray[np.int64] = (words % m).astype(np.int64)
    return out
