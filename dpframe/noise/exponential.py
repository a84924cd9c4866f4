"""The exponential mechanism, sampled exactly: index ``i`` with probability ∝ mᵢ·exp(s·uᵢ).

Method: the Gumbel-max trick, evaluated lazily and rigorously. With Gᵢ independent standard Gumbel
variables, ``argmaxᵢ ln mᵢ + s·uᵢ + Gᵢ`` has exactly the distribution above. A Gumbel variable is a
monotone function G(U) = −ln(−ln U) of a uniform U ∈ (0, 1), and U is an infinite string of fair bits,
of which we draw only as many as needed:

1. Draw 64 bits of every Uᵢ: Uᵢ lies in a known interval of width 2⁻⁶⁴, so the score
   ``Sᵢ = ln mᵢ + s·uᵢ + G(Uᵢ)`` lies in an interval ``[loᵢ, hiᵢ]`` computed in float64 with a safety
   margin (1e-10 relative and absolute, about a million times the worst float64 rounding error of
   the few operations involved; for all but about one word in a thousand, one evaluation of G bounds it
   over the word's whole interval, see ``_gumbel_bounds``).
2. The true argmax has ``hi ≥ max lo``; every other item is discarded. Almost always one candidate
   remains, and it is the argmax.
3. Otherwise (near-ties), the remaining candidates get 64 more bits each and their intervals are
   recomputed with :mod:`decimal` at a precision growing with the number of bits (``ln`` is correctly
   rounded there; the margin covers every rounding), until one candidate remains.

Nothing is normalised and no float ever decides a comparison whose outcome it cannot certify, so the
output distribution is exactly the exponential mechanism's (the only approximation would be a
float64 error a million times beyond its documented bound). Unlike ``exp``-then-normalise sampling,
weights spanning thousands of orders of magnitude (rank utilities over millions of rows, interval
lengths up to 2⁶⁴) are handled without underflow.

Privacy (McSherry–Talwar 2007): if every uᵢ changes by at most Δ between neighbouring datasets and the
mᵢ are public (or change as part of the score), sampling ∝ exp(s·uᵢ) with s = ε/(2Δ) is ε-DP; with
monotone utilities, s = ε/Δ. The caller chooses ``scale``; this module only guarantees exact sampling.

Example:
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource
    >>> rng = SeededRandomSource(3)
    >>> draws = [exponential_index([0, 0, 50], Fraction(1, 2), rng) for _ in range(5)]
    >>> draws
    [2, 2, 2, 2, 2]
    >>> exponential_index_grouped([0, 0, 0, 9], Fraction(1), rng, [0, 2, 4], multiplicities=[0, 5, 1, 1]).tolist()
    [1, 1]

"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from dpframe.errors import ArgumentError, ArgumentTypeError
from dpframe.noise.random import RandomSource
from dpframe.noise.samplers import RationalLike, _check_rng, _exact

__all__ = ["epsilon_from_rho", "exponential_index", "exponential_index_grouped"]

_MARGIN = 1e-10           # relative and absolute slack on float64 score intervals
_TWO_64 = float(2**64)
_LN_2_64 = 64 * math.log(2)


def exponential_index(utilities: npt.ArrayLike, scale: RationalLike, rng: RandomSource, *,
                      multiplicities: npt.ArrayLike | None = None) -> int:
    """One index ``i`` drawn with probability exactly ∝ ``multiplicities[i]·exp(scale·utilities[i])``.

    Args:
        utilities: integer scores (int64).
        scale: the exact rational s ≥ 0 multiplying the utilities (e.g. ε/(2Δ)).
        rng: a dpframe random source.
        multiplicities: non-negative integer weights (default 1), e.g. the number of domain points in an
            interval; may exceed 2⁶³ (uint64 or an object array of Python ints). Zero is never chosen.

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> exponential_index([1, 2, 3], 0, SeededRandomSource(0), multiplicities=[0, 0, 7])
        2

    """
    u = _utilities(utilities)
    return int(exponential_index_grouped(u, scale, rng, [0, u.size], multiplicities=multiplicities)[0])


def exponential_index_grouped(utilities: npt.ArrayLike, scale: RationalLike, rng: RandomSource,
                              offsets: npt.ArrayLike, *,
                              multiplicities: npt.ArrayLike | None = None) -> npt.NDArray[np.int64]:
    """One exponential-mechanism draw per segment ``offsets[g]:offsets[g+1]``, independently.

    Returns, for each segment, the chosen index *within* the segment (0-based). Every segment needs at
    least one positive multiplicity. Vectorised: one pass over all items of all segments.

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> exponential_index_grouped([5, 0, 0, 5], 100, SeededRandomSource(1), [0, 2, 4]).tolist()
        [0, 1]

    """
    rng = _check_rng(rng)
    s = _exact(scale, "scale")
    if s < 0:
        raise ArgumentError(f"must be >= 0, got {s}", argument="scale",
                            fix="pass ε/(2Δ) or another non-negative rational")
    u = _utilities(utilities)
    bounds = _offsets(offsets, u.size)
    mult, log_m = _multiplicities(multiplicities, u.size)
    lengths = np.diff(bounds)
    positive = None if mult is None else mult if log_m is None else _alive(mult, log_m)     # numpy ints: as they are
    if lengths.size and positive is not None and not (np.maximum.reduceat(positive, bounds[:-1]) > 0).all():
        raise ArgumentError("every segment needs at least one item with a positive multiplicity",
                            argument="multiplicities", fix="leave out the segments whose items all weigh 0")
    words = rng.random_uint64(u.size)
    lo = np.empty(u.size)
    hi = np.empty(u.size)
    factor = float(s)
    odd = []
    # ln 0 = −∞ for m = 0 or U = 0; −∞ + ∞ for m = 0; s·u past float64 (then decided exactly, below)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for first in range(0, u.size, _BLOCK):                # blocks that stay in cache (speed only: elementwise)
            part = slice(first, first + _BLOCK)
            rest = _score_bounds(words[part], u[part], _logs(mult, log_m, part), factor, lo[part], hi[part],
                                 bulk=True)
            if rest.size:
                odd.append(rest + first)
        if odd:                                               # the words outside the bulk, all at once
            rare = np.concatenate(odd)
            lo_rare, hi_rare = np.empty(rare.size), np.empty(rare.size)
            _score_bounds(words[rare], u[rare], _logs(mult, log_m, rare), factor, lo_rare, hi_rare, bulk=False)
            lo[rare], hi[rare] = lo_rare, hi_rare
    best = np.maximum.reduceat(lo, bounds[:-1])
    candidate = hi >= np.repeat(best, lengths)
    if mult is not None and np.isneginf(best).any():   # m = 0 items (hi NaN) stay out, whatever the best
        candidate &= _alive(mult, log_m)
    idx = np.flatnonzero(candidate)
    if idx.size == lengths.size and ((idx >= bounds[:-1]) & (idx < bounds[1:])).all():   # one in each: the usual
        return idx - bounds[:-1]
    group = np.searchsorted(bounds, idx, side="right") - 1
    counts = np.bincount(group, minlength=lengths.size)
    if not counts.all():        # every score of a segment beyond float64 (s·u overflowed: lo or hi NaN): all its
        alive = np.repeat(counts == 0, lengths)     # items of positive multiplicity go to the exact refinement
        if mult is not None:
            alive &= _alive(mult, log_m)
        idx = np.flatnonzero(candidate | alive)
        group = np.searchsorted(bounds, idx, side="right") - 1
        counts = np.bincount(group, minlength=lengths.size)
    out = np.empty(lengths.size, dtype=np.int64)
    single = counts[group] == 1
    out[group[single]] = idx[single] - bounds[group[single]]
    for g in np.flatnonzero(counts > 1):
        members = idx[group == g]
        prefixes = [int(words[i]) for i in members]
        win = _refine(members, prefixes, u, mult, s, rng)
        out[g] = win - bounds[g]
    return out


_BLOCK = 8192
"""Items per block of the float work of :func:`exponential_index_grouped` (its temporaries stay in cache)."""


def _alive(mult: npt.NDArray[Any], log_m: npt.NDArray[np.float64] | None) -> npt.NDArray[np.bool_]:
    """Whether each multiplicity is positive."""
    out: npt.NDArray[np.bool_] = log_m > -np.inf if log_m is not None else mult > 0
    return out


def _logs(mult: npt.NDArray[Any] | None, log_m: npt.NDArray[np.float64] | None, part: Any
          ) -> npt.NDArray[np.float64] | None:
    """The ln m of the items ``part`` (None when every m is 1): ``log_m`` where given, else from integer ``mult``."""
    if log_m is not None:
        given: npt.NDArray[np.float64] = log_m[part]
        return given
    if mult is None:
        return None
    out: npt.NDArray[np.float64] = np.log(mult[part], dtype=np.float64)     # −∞ for 0 (caller: errstate)
    return out


def _score_bounds(words: npt.NDArray[np.uint64], u: npt.NDArray[np.int64], log_m: npt.NDArray[np.float64] | None,
                  factor: float, lo: npt.NDArray[np.float64], hi: npt.NDArray[np.float64], *,
                  bulk: bool) -> npt.NDArray[np.intp]:
    """Write the bounds ``[lo, hi]`` of each score ln m + s·u + G(U) (``factor`` = float(s); step 1 above).

    The slack is ``_MARGIN·(1 + |ln m + s·u| + |G bounds|)``, infinite (a looser, still valid bound) at
    U = 0 or 1; items with m = 0 get lo = −∞ and hi = NaN (ln m = −∞ and slack ∞), which is never ≥ anything: they
    are never candidates (the caller masks them too when some segment's best is −∞). ``bulk``: the bounds
    are valid for bulk words only (:func:`_gumbel_bulk`), and the others' indices are returned for the caller
    to redo with ``bulk=False`` (every word, returns nothing).
    """
    base = u * factor
    if log_m is not None:
        base += log_m
    if bulk:
        g_lo, g_hi, odd = _gumbel_bulk(words)
    else:
        (g_lo, g_hi), odd = _gumbel_bounds(words), np.zeros(0, dtype=np.intp)
    slack = np.abs(base)
    slack += np.abs(g_lo)
    slack += np.abs(g_hi)
    slack += 1.0
    slack *= _MARGIN
    np.add(g_lo, base, out=lo)
    lo -= slack
    np.add(g_hi, base, out=hi)
    hi += slack                                    # −∞ + ∞ = NaN for m = 0 only (the caller sets errstate)
    return odd


def _utilities(utilities: npt.ArrayLike) -> npt.NDArray[np.int64]:
    u = np.asarray(utilities)
    if u.ndim != 1:
        raise ArgumentError(f"must be one-dimensional, got shape {u.shape}", argument="utilities",
                            fix="pass a 1-D int array")
    if u.size and u.dtype.kind not in "iu":
        raise ArgumentTypeError(f"must be integers, got dtype {u.dtype}", argument="utilities",
                                fix="scale fractional utilities to integers and divide `scale` by the same factor")
    if u.dtype.kind == "u" and u.size and int(u.max()) > 2**63 - 1:
        raise ArgumentError("must fit in int64", argument="utilities",
                            fix="shift the utilities (the draw depends on their differences only)")
    return u.astype(np.int64, copy=False)


def _offsets(offsets: npt.ArrayLike, n: int) -> npt.NDArray[np.int64]:
    b = np.asarray(offsets)
    fix = "pass the segments' boundaries [0, ..., len(utilities)], increasing strictly (no empty segment)"
    if b.ndim != 1 or b.size < 2 or b.dtype.kind not in "iu":
        raise ArgumentError(f"must be a 1-D integer array with >= 2 entries, got dtype {b.dtype}, shape {b.shape}",
                            argument="offsets", fix=fix)
    b = b.astype(np.int64)
    if b[0] != 0 or b[-1] != n or np.any(np.diff(b) <= 0):
        raise ArgumentError(f"must increase strictly from 0 to len(utilities) = {n}", argument="offsets", fix=fix)
    return b


def _multiplicities(multiplicities: npt.ArrayLike | None, n: int) -> tuple[npt.NDArray[Any] | None,
                                                                           npt.NDArray[np.float64] | None]:
    """The multiplicities and, unless they are numpy integers (:func:`_logs` takes those by blocks), their logs.

    Natural logs in float64, −inf for zero; (None, None) when every multiplicity is 1.
    """
    if multiplicities is None:
        return None, None
    fix = ("pass one integer weight >= 0 per utility (uint64, or an object array of Python ints beyond 2⁶⁴), or "
           "leave multiplicities out (every weight 1)")
    m = np.asarray(multiplicities)
    if m.shape != (n,):
        raise ArgumentError(f"must have the same length as utilities ({n}), got shape {m.shape}",
                            argument="multiplicities", fix=fix)
    if m.dtype.kind in "iu":
        if m.dtype.kind == "i" and n and int(m.min()) < 0:
            raise ArgumentError("must be >= 0", argument="multiplicities", fix=fix)
        return m, None
    if m.dtype == object and all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in m):
        if any(x < 0 for x in m):
            raise ArgumentError("must be >= 0", argument="multiplicities", fix=fix)
        return m, np.array([math.log(int(x)) if x > 0 else -math.inf for x in m])
    raise ArgumentTypeError(f"must be non-negative integers, got dtype {m.dtype}", argument="multiplicities",
                            fix=fix)


_BULK = (2**54, 2**64 - 2**40)
"""Words k in ``[2⁵⁴, 2⁶⁴ − 2⁴⁰)`` (all but about one in a thousand): U ∈ [2⁻¹⁰, 1 − 2⁻²⁴], where one float64
evaluation of G bounds it over the word's whole interval (:func:`_gumbel_bounds`)."""
_BULK_WIDTH = 2.0**-38
"""G(U_hi) − G(U_lo) for a bulk word: G′(U) = 1/(U·(−ln U)) is ≤ 2¹⁰/ln 2 for U ≤ 1/2 and ≤ 2/(1 − U_hi) ≤ 2⁻²³·2⁶⁴
above, so over an interval of 2⁻⁶⁴ G grows by at most 2⁻³⁸."""


def _gumbel_bounds(words: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Float64 bounds of G(U) for U ∈ [k/2⁶⁴, (k+1)/2⁶⁴] (before the safety margin).

    *Bulk* words (:data:`_BULK`): ``E = −ln U = −log1p(U − 1)`` at the lower end, then G = −ln E; the upper end
    adds :data:`_BULK_WIDTH`. U − 1 comes from the word read as a signed integer s (s = k for U < 1/2,
    k − 2⁶⁴ above): s·2⁻⁶⁴, minus 1 when s ≥ 0. For U ≥ 1/2 that is −(1 − U) to a relative 2⁻⁵³ (no
    cancellation near U = 1); below, U carries an absolute error ≤ 2⁻⁵², which moves ``log1p`` by ≤ 2⁻⁵²/U
    ≤ 2⁻⁴². So G is within about 2⁻⁴¹ (with a few ulps) — far inside ``_MARGIN`` (1e-10), with the width.
    Other words (U < 2⁻¹⁰ or U > 1 − 2⁻²⁴) take :func:`_gumbel_bounds_exact`, both ends.
    """
    with np.errstate(divide="ignore"):
        g_lo, g_hi, odd = _gumbel_bulk(words)
    if odd.size:
        g_lo[odd], g_hi[odd] = _gumbel_bounds_exact(words[odd].astype(np.uint64, copy=False))
    return g_lo, g_hi


def _gumbel_bulk(words: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64],
                                                         npt.NDArray[np.intp]]:
    """:func:`_gumbel_bounds` valid for the bulk words only, and the indices of the others (not bulk)."""
    k = words.astype(np.uint64, copy=False)
    signed = k.view(np.int64)
    shifted = signed.astype(np.float64)                   # U·2⁶⁴, or (U − 1)·2⁶⁴ when U ≥ 1/2
    shifted *= 2.0**-64
    shifted -= signed >= 0                                # U − 1
    g_lo = np.log1p(shifted, out=shifted)                 # −E (−∞ at U = 0: the caller sets errstate)
    np.negative(g_lo, out=g_lo)
    np.log(g_lo, out=g_lo)
    np.negative(g_lo, out=g_lo)                           # G = −ln E
    g_hi = g_lo + _BULK_WIDTH
    odd = np.flatnonzero(k + np.uint64(2**64 - _BULK[1]) < np.uint64(_BULK[0] + 2**64 - _BULK[1]))   # not bulk
    return g_lo, g_hi, odd


def _gumbel_bounds_exact(k: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`_gumbel_bounds` for any word, each end evaluated on its own.

    ``E = −ln U`` is computed where it keeps full relative precision: for U ≥ 1/2 (k ≥ 2⁶³) from the
    integer 2⁶⁴ − k as ``−log1p(−(1 − U))`` (an integer, so no cancellation near U = 1); for
    U < 1/2 as ``64·ln 2 − ln k`` (no rounding of 2⁶⁴ − k, which would lose tiny uniforms: for
    k < 2¹¹ it rounds to 2⁶⁴ and gives U = 0). Each is within a few float64 roundings of the truth,
    far inside ``_MARGIN``. G(0) = −∞ and G(1) = +∞.
    """
    high = k >= np.uint64(2**63)
    e_lo = np.empty(k.size)                               # −ln U_lo
    e_hi = np.empty(k.size)                               # −ln U_hi
    with np.errstate(divide="ignore"):
        top = k[high]
        below = (~top).astype(np.float64)                 # 2⁶⁴ − k − 1 < 2⁶³, one relative rounding (0: U_hi = 1)
        e_lo[high] = -np.log1p(-(below + 1.0) / _TWO_64)
        e_hi[high] = -np.log1p(-below / _TWO_64)
        small = k[~high].astype(np.float64)
        e_lo[~high] = _LN_2_64 - np.log(small)            # +∞ at k = 0 (U = 0)
        e_hi[~high] = _LN_2_64 - np.log(small + 1.0)      # k + 1 ≤ 2⁶³: one rounding at most
        return -np.log(e_lo), -np.log(e_hi)


def _refine(members: npt.NDArray[np.intp], prefixes: list[int], u: npt.NDArray[np.int64],
            mult: npt.NDArray[Any] | None, s: Fraction, rng: RandomSource) -> int:
    """Resolve a near-tie exactly: extend the candidates' uniforms and use high-precision intervals."""
    bits = 64
    alive = list(range(len(members)))
    while len(alive) > 1:
        more = rng.random_uint64(len(alive))
        for j, w in zip(alive, more, strict=True):
            prefixes[j] = (prefixes[j] << 64) | int(w)
        bits += 64
        precision = bits + 40                        # decimal digits (see _score_interval)
        intervals = {j: _score_interval(prefixes[j], bits, int(u[members[j]]),
                                        1 if mult is None else int(mult[members[j]]), s, precision)
                     for j in alive}
        top = max(lo for lo, _ in intervals.values())
        alive = [j for j in alive if intervals[j][1] >= top]
    return int(members[alive[0]])


def _score_interval(prefix: int, bits: int, utility: int, multiplicity: int, s: Fraction,
                    precision: int) -> tuple[Decimal, Decimal]:
    """Rigorous bounds of ln m + s·u + G(U) for U ∈ [prefix/2^bits, (prefix+1)/2^bits].

    Every Decimal operation is correctly rounded (relative error ≤ 10^(1−precision)). The only
    amplification is −ln U for U near 1, whose relative error grows by at most 1/(1 − U) ≤ 2^bits; so
    the slack 10^(10−precision)·(2^bits + |base| + 100) bounds the total error, while the interval of
    G over U's unknown bits is wider than 2^−bits (G′ ≥ e), so refinement converges.
    """
    # a fresh context (the application's precision, rounding or traps never apply), global inside the block so
    # that operators (unary minus, /) use it too
    with decimal.localcontext(decimal.Context(prec=precision, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX,
                                              traps=[decimal.InvalidOperation])):
        slack = Decimal(10) ** (10 - precision)
        base = Decimal(multiplicity).ln() + Decimal(s.numerator * utility) / Decimal(s.denominator)
        scale = Decimal(2) ** bits
        out = []
        for k in (prefix, prefix + 1):
            if k == 0:
                out.append(Decimal("-Infinity"))
            elif k == 2**bits:
                out.append(Decimal("Infinity"))
            else:
                g = -(-(Decimal(k) / scale).ln()).ln()
                out.append(base + g)
        width = slack * (Decimal(2) ** bits + abs(base) + 100)
        return out[0] - width, out[1] + width


def epsilon_from_rho(rho: Fraction, *, bounded_range: bool, bits: int = 40) -> Fraction:
    """The largest ε on the grid 2^−bits that a zCDP budget ρ pays for (rounded down: never over-spends).

    An ε-DP *bounded-range* mechanism — the exponential mechanism sampled by this module, report-noisy-max
    — is ε²/8-zCDP (Cesar & Rogers 2021, Lemma 3.2 / Dong, Durfee & Rogers 2020), so ε = √(8ρ); any
    other pure ε-DP mechanism (a noisy count) is ε²/2-zCDP (Bun & Steinke 2016), so ε = √(2ρ).
    ρ is non-negative.

    Example:
        >>> epsilon_from_rho(Fraction(1, 8), bounded_range=True), epsilon_from_rho(Fraction(1, 2), bounded_range=False)
        (Fraction(1, 1), Fraction(1, 1))

    """
    r = _exact(rho, "rho")
    if r < 0:
        raise ArgumentError(f"must be >= 0, got {r}", argument="rho", fix="pass the zCDP budget's ρ, a rational >= 0")
    scaled = (8 if bounded_range else 2) * r * 2 ** (2 * bits)
    return Fraction(math.isqrt(scaled.numerator // scaled.denominator), 2**bits)
