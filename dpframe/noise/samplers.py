"""Exact, vectorised samplers for discrete Laplace and discrete Gaussian noise, and Bernoulli(exp(-γ)).

Every sample is an exact function of fresh uniform bits, and its distribution is exactly the stated
pmf: each random decision is the indicator ``U < p`` of a uniform U ∈ [0, 1) (an infinite string of
fair bits, of which only as many are drawn as the decision needs) and an exact threshold p. The
decisions are made by :mod:`dpframe.noise.certified`: in float64 where the error bounds *prove* the
outcome (all but about 2⁻³⁶ of them), else exactly with :mod:`decimal` bounds and more bits of U.
No floating-point value ever decides what it cannot certify.

* **Bernoulli(exp(-γ))**: one uniform per draw, ``U < exp(-γ)``.
* **Discrete Laplace** (scale t > 0, q = e^(-1/t)): P[Z = z] ∝ q^|z|. One 64-bit word per draw: its top
  bit is a sign S, its other 63 bits begin U, and with c = 2/(1 + q) the magnitude is
  M = #{m ≥ 1 : U < c·qᵐ} (inverse-CDF sampling). Then P[M ≥ m] = c·qᵐ for m ≥ 1, so
  P[Z = 0] = 1 − c·q = (1 − q)/(1 + q) and, for m ≥ 1, P[Z = ±m] = (c·qᵐ − c·qᵐ⁺¹)/2 =
  qᵐ(1 − q)/(1 + q) — exactly the discrete Laplace pmf (which sums to 1). M is found from a float64
  guess ⌈t·(ln c − ln U)⌉ − 1 that is then *verified* exactly (U < c·q^M and U ≥ c·q^(M+1)), and
  corrected by a galloping search when the guess is off; the guess only affects speed.
* **Discrete Gaussian** (σ² > 0): Canonne, Kamath & Steinke 2020 ("CKS20") Algorithm 3. With
  t = ⌊σ⌋ + 1, a discrete Laplace Y of scale t is accepted when ``U < exp(-(|Y| − σ²/t)²/(2σ²))``.
  Expanding, exp(-|y|/t)·exp(-(|y| − σ²/t)²/(2σ²)) = exp(-y²/(2σ²))·exp(-σ²/(2t²)), whose second factor
  does not depend on y, so accepted values have P[Z = y] ∝ exp(-y²/(2σ²)) exactly. Rejected candidates
  are replaced by fresh ones; accepted candidates of a batch are iid, so the output is iid.

Speed without changing a draw: the words are read in order and the numpy passes run over chunks of
2¹⁵ elements (their arrays stay in the CPU cache); in a run of at least 4096 draws, a small scale (t ≤ 67)
or σ (≤ ~340) reads its p̂ from a table built by the same float evaluation, so a lookup gives the same
floats, the same decisions and the same draws.

Certified float64 evaluation of the thresholds (proof of the bounds that :func:`~dpframe.noise.certified.decide`
needs, |x̂ − x| ≤ 2⁻⁴² for x ≤ 64, u = 2⁻⁵² bounding every IEEE-754 rounding):

* Laplace: x_m = m/t − ln c, evaluated as fl(fl(m·fl(1/t)) − fl(ln c)) (the constants correctly rounded
  from 50-digit Decimals). Its error is at most 3.01u·m/t + u·ln 2 + 1.01u·x̂ ≤ 4.1u(x̂ + 1) ≤ 2⁻⁴³·⁹.
  The next threshold c·q^(m+1) is p̂·fl(q) (one more factor within u, allowed by ``decide``).
* Gaussian: x = (|Y| − S)²/(2σ²) with S = σ²/t, evaluated as fl(fl(d̂·d̂)·fl(1/(2σ²))),
  d̂ = fl(fl(|Y|) − fl(S)). Then |d̂ − d| ≤ δ = 2.01u(|Y| + S), and for x̂ ≤ 64: |d̂| ≤ 11.4σ, S ≤ σ
  (t > σ), so δ ≤ 26.7uσ and |x̂ − x| ≤ (2|d̂| + δ)·δ/(2σ²) + 3.01u·x̂ ≤ 495u < 2⁻⁴³ (for
  2⁻⁹⁰⁰ ≤ σ² ≤ 2¹¹⁰, where nothing overflows and underflow costs below 2⁻¹⁷⁰ absolute; other σ² go
  to the exact path).
* Bernoulli(exp(-num/den)): fl(fl(num)/fl(den)) is within 3.01u·x̂ ≤ 2⁻⁴⁴ (Python ``int / int``,
  correctly rounded, for huge operands).

Parameters (``gamma``, ``scale``, ``sigma2``) are exact rationals: ``int``, ``fractions.Fraction`` (or
any ``numbers.Rational``), ``decimal.Decimal`` or ``float``. A float is converted *exactly* to the
binary fraction it stores (``0.1`` becomes ``3602879701896397/36028797018963968``), so pass
``Fraction(1, 10)`` when you mean one tenth. NaN and infinities are rejected.

Example:
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource, discrete_laplace
    >>> z = discrete_laplace(Fraction(7, 2), 1000, SeededRandomSource(0))
    >>> z.dtype, z.shape
    (dtype('int64'), (1000,))

"""

from __future__ import annotations

import decimal
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from numbers import Rational
from typing import Any

import numpy as np
import numpy.typing as npt

from dpframe.errors import ArgumentError, ArgumentTypeError
from dpframe.noise.certified import LazyUniform, decide, exp_neg, exp_neg_bounds, uniform_cells
from dpframe.noise.random import RandomSource, as_int, check_size
from dpframe.sealed import plain, plain_cache

__all__ = [
    "MAX_GAUSSIAN_SIGMA2",
    "MAX_LAPLACE_SCALE",
    "bernoulli_exp",
    "bernoulli_exp_ratio",
    "discrete_gaussian",
    "discrete_gaussian_batch",
    "discrete_laplace",
    "discrete_laplace_batch",
    "discrete_laplace_log_tail",
    "discrete_laplace_tail",
    "discrete_laplace_variance",
]

#: What the samplers accept as an exact rational parameter (floats and Decimals are converted exactly).
RationalLike = Fraction | int | float | Decimal | np.integer[Any] | np.floating[Any]

IntArray = npt.NDArray[Any]  # int64, or object (Python ints)
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]
Bounds = Callable[[int, int], tuple[Fraction, Fraction]]   # (element, digits) -> rational bounds of p

#: Largest accepted discrete Laplace scale. Outputs are int64; at this scale a draw exceeds 2**63 in
#: magnitude with probability about exp(-64) ≈ 1.6e-28 (if it ever happens, OverflowError is raised).
MAX_LAPLACE_SCALE = Fraction(2**57)
#: Largest accepted discrete Gaussian σ² (σ ≤ 2**55), for the same int64 reason.
MAX_GAUSSIAN_SIGMA2 = Fraction(2**110)
_MIN_FAST_SIGMA2 = Fraction(1, 2**900)
_INT64_MAX = 2**63 - 1
_HUGE = 2.0**100   # larger exponents (scales below 2^-100) are stored as this: still far beyond X_MAX, and finite


# --------------------------------------------------------------------------------------------------
# Parameter handling


def _exact(value: object, name: str) -> Fraction:
    """``value`` as an exact Fraction; floats/Decimals converted exactly, NaN/inf rejected."""
    fix = "pass a finite rational such as Fraction(1, 2) or an int"
    value = plain(value)
    if isinstance(value, bool):
        raise ArgumentTypeError("must be a rational number, got a bool", argument=name, fix=fix)
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(float(value)):
            raise ArgumentError(f"must be finite, got {value!r}", argument=name, fix=fix)
        return Fraction(float(value))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ArgumentError(f"must be finite, got {value!r}", argument=name, fix=fix)
        return Fraction(value)
    raise ArgumentTypeError(f"must be an int, Fraction, Decimal or float, got {type(value).__name__}", argument=name,
                            fix=fix)


def _positive(value: object, name: str, maximum: Fraction | None = None) -> Fraction:
    x = _exact(value, name)     # a plain Fraction (positive denominator): compared on its ints, without
    if x.numerator <= 0:        # Fraction's comparison (a few µs each, for every scale of every sampler call)
        raise ArgumentError(f"must be > 0, got {x}", argument=name,
                            fix="pass a positive rational such as Fraction(1, 2)")
    if maximum is not None and x.numerator * maximum.denominator > maximum.numerator * x.denominator:
        raise ArgumentError(f"must be <= {maximum} (int64 outputs), got {x}", argument=name,
                            fix="rescale the statistic so that less noise (in grid units) is needed")
    return x


def _check_rng(rng: object) -> RandomSource:
    if not (hasattr(rng, "random_uint64") and hasattr(rng, "uniform_below")):
        raise ArgumentTypeError(f"must be a dpframe RandomSource, got {type(rng).__name__}", argument="rng",
                                fix="pass dpframe.noise.default_source() (numpy generators are not accepted)")
    return rng  # type: ignore[return-value]


def _ratio_numerators(num: object) -> IntArray:
    """``num`` as a 1-D int array (numpy integers, or an object array of Python ints) of values ``>= 0``.

    Checked once per call: a numpy integer array by one vectorised ``min``; an object array (ints beyond int64) by
    one pass in Python, as :func:`_ratio_floats` and the exact fallback read it anyway.
    """
    fix = ("pass a 1-D array of integers >= 0 (int64, uint64, or an object array of Python ints beyond int64): "
           "the exponent is num/den exactly, so scale fractional values to integers and multiply den")
    array = np.asarray(num)
    if array.ndim != 1:
        raise ArgumentError(f"must be one-dimensional, got shape {array.shape}", argument="num", fix=fix)
    if array.dtype.kind in "iu":
        if array.dtype.kind == "i" and array.size and int(array.min()) < 0:
            raise ArgumentError("must be >= 0 (exp(-num/den) is a probability)", argument="num", fix=fix)
        return array
    if array.dtype == object and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in array):
        if any(v < 0 for v in array):
            raise ArgumentError("must be >= 0 (exp(-num/den) is a probability)", argument="num", fix=fix)
        return array
    found = array.dtype if array.dtype != object else "object with values other than ints"
    raise ArgumentTypeError(f"must be integers, got dtype {found}", argument="num", fix=fix)


def _float(x: Fraction) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


# --------------------------------------------------------------------------------------------------
# Exact decisions


class _Cells:
    """Uniforms known by their first 63 bits (the low bits of ``words``), extended exactly where needed."""

    def __init__(self, words: npt.NDArray[np.uint64], rng: RandomSource) -> None:
        self.u, self.u_hat = uniform_cells(words)
        self._rng = rng
        self._lazy: dict[int, LazyUniform] = {}

    def below(self, idx: npt.NDArray[np.intp] | None, p_hat: FloatArray, bounds: Bounds) -> BoolArray:
        """Exactly ``U_i < p_i`` for the elements ``idx`` (None: all), p̂ certified as ``decide`` requires.

        ``bounds(j, digits)`` gives exact rational bounds of the j-th threshold (j indexes ``p_hat``).
        Undecided elements keep their :class:`LazyUniform`, so later decisions see the same U.
        """
        yes, no = decide(self.u_hat if idx is None else self.u_hat[idx], p_hat)
        for j in np.flatnonzero(~(yes | no)):
            i = int(j if idx is None else idx[j])
            lazy = self._lazy.setdefault(i, LazyUniform(int(self.u[i]), 63, self._rng))
            yes[j] = lazy.below(functools.partial(bounds, int(j)))
        return yes


def _ratio_floats(num: IntArray, den: int) -> FloatArray:
    """fl(num/den) per element, within 3.01u (relative; Python ``int / int`` is correctly rounded)."""
    if num.dtype != object and den < 2**1000:
        out: FloatArray = num.astype(np.float64) / float(den)
        return out
    return np.array([_true_div(int(a), den) for a in num], dtype=np.float64)


def _true_div(a: int, b: int) -> float:
    try:
        return a / b
    except OverflowError:
        return math.inf


def bernoulli_exp_ratio(num: IntArray, den: int, rng: RandomSource) -> BoolArray:
    """One Bernoulli(exp(-num_i / den)) per element: an int64 or object array ``num >= 0``, an int ``den >= 1``.

    Exact: element i is the indicator U_i < exp(-num_i/den) of its own uniform.

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> bernoulli_exp_ratio(np.array([0, 0, 10**6]), 3, SeededRandomSource(0)).tolist()
        [True, True, False]

    """
    num = _ratio_numerators(num)
    fix = "pass the exponent's denominator as an int >= 1"
    den = as_int(den, "den", fix)
    if den < 1:
        raise ArgumentError(f"must be >= 1, got {den}", argument="den", fix=fix)
    rng = _check_rng(rng)
    cells = _Cells(rng.random_uint64(num.size), rng)
    return cells.below(None, exp_neg(_ratio_floats(num, den)),
                       lambda j, digits: exp_neg_bounds(Fraction(int(num[j]), den), digits))


def bernoulli_exp(gamma: RationalLike, size: int, rng: RandomSource) -> BoolArray:
    """``size`` independent draws of Bernoulli(exp(-gamma)) for a rational ``gamma >= 0``.

    Each draw is the indicator U < exp(-γ) of its own uniform U, so it is True with probability
    exp(-γ) exactly.

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource
        >>> bernoulli_exp(Fraction(1, 3), 4, SeededRandomSource(0)).dtype
        dtype('bool')
        >>> bool(bernoulli_exp(0, 10, SeededRandomSource(0)).all())
        True

    """
    g = _exact(gamma, "gamma")
    if g < 0:
        raise ArgumentError(f"must be >= 0, got {g}", argument="gamma",
                            fix="pass a non-negative rational such as Fraction(1, 3)")
    size = check_size(size)
    rng = _check_rng(rng)
    cells = _Cells(rng.random_uint64(size), rng)
    return cells.below(None, exp_neg(np.full(size, _float(g))), lambda j, digits: exp_neg_bounds(g, digits))


# --------------------------------------------------------------------------------------------------
# Discrete Laplace


_SPLIT = 24   # scales above 2^24: the magnitude is split into a coarse part and an exact low part


@dataclass(frozen=True)
class _Scale:
    """A discrete Laplace scale t and the float64 constants of its coarse magnitude M' (each within u).

    M' = #{j ≥ 1 : U < c·q·q^(K(j−1))} with K = 2^k; the magnitude is M' for k = 0, else 0 when M' = 0 and
    1 + K(M' − 1) + L otherwise, L a truncated geometric on [0, K) (:func:`_low_parts`). The j-th
    threshold is exp(-x_j) with x_j = (j − 1)·K/t + x₁.
    """

    t: Fraction
    k: int          # 0 up to t = 2^24; else ⌊log₂ t⌋ − 12, so K/t ∈ (2⁻¹³, 2⁻¹²]
    inv_step: float  # t/K (only the guess uses it)
    step: float     # K/t
    x1: float       # 1/t − ln c, with c = 2/(1 + q), q = e^(-1/t): −ln of the first threshold c·q
    first: float    # c·q
    r: float        # q^K: the ratio of consecutive thresholds
    inv_t: float    # 1/t (the low part's acceptance)
    cap: int        # ⌈61·t/K⌉ + 1: x_cap ≥ 61, so M' < cap whenever U ≥ 2⁻⁶³


_TABLE = 4096   # a scale's (σ's) p̂ come from a table of at most this many entries, for runs of at least as many draws
_SMALL_TABLE = 256   # ... and from a table of at most this many entries for a run of any size (built once: cached)


def _by_runs(runs: list[tuple[int, int, _Batch, Any]], values: IntArray, f: Callable[..., tuple[FloatArray, ...]],
             outputs: int) -> tuple[FloatArray, ...]:
    """``f(values, sub-batch, table)`` run by run (:meth:`_Batch.runs`), its ``outputs`` arrays put together."""
    if len(runs) == 1:
        return f(values, runs[0][2], runs[0][3])
    out = tuple(np.empty(values.size) for _ in range(outputs))
    for lo, hi, sub, table in runs:
        for whole, part in zip(out, f(values[lo:hi], sub, table), strict=True):
            whole[lo:hi] = part
    return out


def _threshold_pair(j: Int64Array, batch: _Batch, table: tuple[FloatArray, FloatArray] | None = None
                    ) -> tuple[FloatArray, FloatArray]:
    """p̂ of the thresholds j and j + 1 per element of ``batch`` (j ≥ 0; p̂ = 2 for j = 0, where A(0) is certain).

    Thresholds j ≥ 1 are exp_neg of fl(fl((j − 1)·K/t) + x₁) (the module docstring's certified evaluation),
    the next one p̂·fl(q^K) (for j = 0: fl(c·q)). ``table`` (:func:`_threshold_table`, for a batch of one
    scale) holds exactly these floats for every j the scale can meet, so a lookup gives the same p̂ bit for bit.
    """
    if table is not None:
        return table[0].take(j), table[1].take(j)
    here = _threshold_estimate(j, batch("step"), batch("x1"))
    return here, np.where(here == 2.0, batch("first"), here * batch("r"))


def _threshold_estimate(j: IntArray, step: Any, x1: Any) -> FloatArray:
    """p̂ of threshold j: exp_neg of fl(fl((j − 1)·K/t) + x₁), and 2 for j = 0 (A(0) holds, c > 1: certain)."""
    out: FloatArray = np.where(np.asarray(j == 0), 2.0, exp_neg((np.asarray(j, dtype=np.float64) - 1) * step + x1))
    return out


@functools.lru_cache(maxsize=256)
def _threshold_table(s: _Scale) -> tuple[FloatArray, FloatArray] | None:
    """p̂ of the thresholds j and j + 1 for j = 0..cap (the guess is clipped to that range), if cap ≤ _TABLE."""
    if s.cap > _TABLE:
        return None
    here, nxt = _threshold_pair(np.arange(s.cap + 1, dtype=np.int64), _Batch([s], [s.cap + 1]))
    here.flags.writeable = nxt.flags.writeable = False
    return here, nxt


@plain_cache(maxsize=256)
def _scale(t: Fraction) -> _Scale:
    k = max(0, math.floor(math.log2(t.numerator) - math.log2(t.denominator)) - 12) if t > 2**_SPLIT else 0
    ctx = decimal.Context(prec=50, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX, traps=[])   # never the global one
    inv = ctx.divide(Decimal(t.denominator), Decimal(t.numerator))
    q = ctx.exp(inv.copy_negate())                   # copy_negate: exact (unary minus rounds in the global context)
    one_q = ctx.add(1, q)
    step = Fraction(2**k) / t
    return _Scale(t, k, _float(1 / step), min(_float(step), _HUGE),
                  min(float(ctx.subtract(inv, ctx.ln(ctx.divide(2, one_q)))), _HUGE),
                  float(ctx.divide(ctx.multiply(2, q), one_q)), float(ctx.exp(ctx.multiply(inv.copy_negate(), 2**k))),
                  min(_float(1 / t), _HUGE), math.ceil(61 / step) + 1)


def _threshold_bounds(s: _Scale, j: int, digits: int) -> tuple[Fraction, Fraction]:
    """Rational bounds of the j-th threshold c·q·q^(K(j−1)) = 2·exp(-(1 + K(j−1))/t)/(1 + exp(-1/t))."""
    e_lo, e_hi = exp_neg_bounds((1 + (j - 1) * 2**s.k) / s.t, digits)
    q_lo, q_hi = exp_neg_bounds(1 / s.t, digits)
    return 2 * e_lo / (1 + q_hi), 2 * e_hi / (1 + q_lo)


class _Batch:
    """Per-element constants of draws of several scales (plain scalars when there is one scale)."""

    def __init__(self, scales: Sequence[Any], sizes: Sequence[int]) -> None:
        self.scales, self.sizes = list(scales), [int(s) for s in sizes]
        self.offsets = np.cumsum([0, *self.sizes])
        self._per: dict[str, npt.NDArray[Any]] = {}   # a constant per element, built once per name (read-only)

    def __call__(self, name: str, idx: npt.NDArray[np.intp] | None = None) -> Any:
        if len(self.scales) == 1:
            return getattr(self.scales[0], name)
        per = self._per.get(name)
        if per is None:
            per = np.repeat(np.array([getattr(s, name) for s in self.scales]), self.sizes)
            per.flags.writeable = False
            self._per[name] = per
        return per if idx is None else per[idx]

    def runs(self, table_of: Callable[[Any], Any]) -> list[tuple[int, int, _Batch, Any]]:
        """The elements in runs ``(lo, hi, sub-batch, table)``, in order, covering them all.

        A scale with :data:`_TABLE` elements or more and a table (``table_of(scale)``, None if it has none) is a
        run of its own; the elements between form one run each (table None). A table pays for itself over as
        many draws as it has entries; a run of several scales costs one set of numpy passes (not one per scale).
        A batch of one scale whose table has at most :data:`_SMALL_TABLE` entries (:func:`_table_entries`: a
        small count's noise) uses it for a run of any size: built once per scale and cached, it spares every
        later call of the sampler its certified evaluation (the same floats, bit for bit). (In a batch of
        several scales such a run of its own costs more numpy passes than the table saves.)
        """
        out: list[tuple[int, int, _Batch, Any]] = []
        start, total = 0, int(self.offsets[-1])
        alone = len(self.scales) == 1
        for lo, hi, scale in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist(), self.scales, strict=True):
            small = alone and _table_entries(scale) <= _SMALL_TABLE
            table = table_of(scale) if hi - lo >= _TABLE or small else None
            if table is not None:
                out += [(start, lo, self.slice(start, lo), None)] if start < lo else []
                out.append((lo, hi, self.slice(lo, hi), table))
                start = hi
        return out + ([(start, total, self.slice(start, total), None)] if start < total or not out else [])

    def of(self, i: int) -> Any:
        """The scale of element ``i``."""
        return self.scales[int(np.searchsorted(self.offsets, i, side="right")) - 1]

    def slice(self, lo: int, hi: int) -> _Batch:
        """The elements ``lo:hi`` as a batch of their own (scales that end before it keep a size of 0)."""
        if lo == 0 and hi == self.offsets[-1]:
            return self
        if len(self.scales) == 1:
            return _Batch(self.scales, [hi - lo])
        ends, starts = np.minimum(self.offsets[1:], hi), np.maximum(self.offsets[:-1], lo)
        return _Batch(self.scales, np.maximum(ends - starts, 0))


_CHUNK = 1 << 15   # elements per numpy pass: the working arrays of a chunk stay in the CPU cache


def _chunks(total: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges of at most :data:`_CHUNK` elements covering ``range(total)`` (one when it is empty)."""
    return [(lo, min(lo + _CHUNK, total)) for lo in range(0, max(total, 1), _CHUNK)]


def _batched(params: Sequence[RationalLike], sizes: Sequence[int], rng: RandomSource, name: str, maximum: Fraction,
             prepare: Callable[[Fraction], Any], draw: Callable[[_Batch, RandomSource], Int64Array]
             ) -> list[Int64Array]:
    """``sizes[k]`` draws with parameter ``params[k]`` for each k, from one call of ``draw`` (checked first)."""
    if len(params) != len(sizes):
        raise ArgumentError(f"{name}s and sizes must have the same length, got {len(params)} and {len(sizes)}",
                            argument="sizes", fix=f"pass one size per {name}")
    values = [_positive(p, name, maximum) for p in params]
    counts = [check_size(n) for n in sizes]
    rng = _check_rng(rng)
    if not values:
        return []
    batch = _Batch([prepare(v) for v in values], counts)
    out = draw(batch, rng)
    bounds = batch.offsets.tolist()
    return [out[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]   # views, as np.split gives


def _gallop(lo: IntArray, hi: IntArray, cap: IntArray, test: Callable[[IntArray, npt.NDArray[np.intp]], BoolArray]
            ) -> IntArray:
    """max{m ≥ 0 : A(m)} per element, for A non-increasing in m with A(0) true and A(cap) false.

    ``lo`` holds an m with A(m) true or -1, ``hi`` an m with A(m) false or -1 (one of them known).
    Steps 1, 2, 4, ... away from the known end until the other end is found, then bisects.
    ``test(m, positions)`` is the exact A(m) for those positions.
    """
    step = np.ones_like(lo)
    active = np.arange(lo.shape[0])
    while active.size:
        a, b, s = lo[active], hi[active], step[active]
        probe = np.where(b < 0, a + np.minimum(s, cap[active] - a),
                         np.where(a < 0, np.maximum(b - s, 0), (a + b) // 2))
        ok = test(probe, active)
        lo[active], hi[active], step[active] = np.where(ok, probe, a), np.where(ok, b, probe), s * 2
        active = active[(lo[active] < 0) | (hi[active] != lo[active] + 1)]
    return lo


def _coarse(batch: _Batch, cells: _Cells) -> IntArray:
    """M' per element (int64, or object where U < 2⁻⁶³): a float64 guess, verified exactly, corrected by search."""
    def thresholds(j: IntArray, idx: npt.NDArray[np.intp] | None) -> FloatArray:
        return _threshold_estimate(j, batch("step", idx), batch("x1", idx))

    def above(j: IntArray, idx: npt.NDArray[np.intp] | None, p_hat: FloatArray) -> BoolArray:
        def bounds(pos: int, digits: int) -> tuple[Fraction, Fraction]:
            return _threshold_bounds(batch.of(pos if idx is None else int(idx[pos])), int(j[pos]), digits)
        return cells.below(idx, p_hat, bounds)

    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        guess_f = np.ceil((-np.log(cells.u_hat + 2.0**-64) - batch("x1")) * batch("inv_step"))
    guess = np.clip(guess_f, 0, batch("cap")).astype(np.int64)
    p_here, p_next = _by_runs(batch.runs(_threshold_table), guess, _threshold_pair, 2)
    here, nxt = above(guess, None, p_here), above(guess + 1, None, p_next)
    m: IntArray = guess
    wrong = ~here | nxt
    if not wrong.any():
        return m
    for bad, dtype in ((np.flatnonzero(wrong & (cells.u > 0)), np.int64),
                       (np.flatnonzero(wrong & (cells.u == 0)), object)):   # U < 2⁻⁶³: no cap
        if bad.size:
            start = guess[bad].astype(dtype)
            cap = (np.broadcast_to(np.asarray(batch("cap", bad)), bad.shape) if dtype is np.int64
                   else np.full(bad.size, 2**4096, dtype=object))
            found = _gallop(np.where(nxt[bad], start + 1, -1), np.where(nxt[bad], -1, start), cap,
                            functools.partial(_probe, above, thresholds, bad))
            if dtype is object:
                m = m.astype(object)
            m[bad] = found
    return m


def _probe(above: Callable[..., BoolArray], thresholds: Callable[..., FloatArray], bad: npt.NDArray[np.intp],
           j: IntArray, pos: npt.NDArray[np.intp]) -> BoolArray:
    """A(j) for the elements ``bad[pos]`` (one step of :func:`_gallop`)."""
    return above(j, bad[pos], thresholds(j, bad[pos]))


def _low_parts(batch: _Batch, idx: npt.NDArray[np.intp], rng: RandomSource) -> Int64Array:
    """L per element of ``idx``: P[L = l] ∝ q^l on [0, 2^k), by rejection (uniform l accepted w.p. q^l ≥ 1 − 2⁻¹²).

    l is the top k bits of a fresh word (exactly uniform); acceptance is the exact U < exp(-l/t).
    """
    out = np.empty(idx.size, dtype=np.int64)
    pending = np.arange(idx.size)
    while pending.size:
        k = np.asarray(batch("k", idx[pending]), dtype=np.uint64)
        low = (rng.random_uint64(pending.size) >> (np.uint64(64) - k)).astype(np.int64)
        cells = _Cells(rng.random_uint64(pending.size), rng)
        p_hat = exp_neg(low.astype(np.float64) * batch("inv_t", idx[pending]))

        def bounds(j: int, digits: int, low: Int64Array = low, pending: Any = pending) -> tuple[Fraction, Fraction]:
            return exp_neg_bounds(int(low[j]) / batch.of(int(idx[pending[j]])).t, digits)

        ok = cells.below(None, p_hat, bounds)
        out[pending[ok]] = low[ok]
        pending = pending[~ok]
    return out


def _laplace(batch: _Batch, rng: RandomSource) -> Int64Array:
    """Discrete Laplace draws, ``batch.sizes[k]`` of scale ``batch.scales[k]``, concatenated.

    The words are drawn chunk by chunk (:func:`_chunks`: the same stream as one call) and each chunk's
    coarse magnitudes are found while its arrays are in the cache; the split scales' low parts follow.
    """
    if not any(s.k for s in batch.scales):
        return np.concatenate([_signed(_coarse(sub, _Cells(words, rng)), words)
                               for sub, words in _chunk_words(batch, rng)])
    parts = [(_coarse(sub, _Cells(words, rng)), words) for sub, words in _chunk_words(batch, rng)]
    words = np.concatenate([w for _m, w in parts])
    m: IntArray = np.concatenate([m for m, _w in parts])
    split = np.flatnonzero((np.asarray(batch("k")) > 0) & (m > 0))
    k = np.asarray(batch("k", split))
    m[split] = 1 + (m[split] - 1) * (np.ones_like(k) << k).astype(m.dtype) + _low_parts(batch, split, rng)
    return _signed(m, words)


def _chunk_words(batch: _Batch, rng: RandomSource) -> list[tuple[_Batch, npt.NDArray[np.uint64]]]:
    """Per chunk of the batch: its sub-batch and its words, one word per element, drawn in order."""
    return [(batch.slice(lo, hi), rng.random_uint64(hi - lo)) for lo, hi in _chunks(int(batch.offsets[-1]))]


def _signed(m: IntArray, words: npt.NDArray[np.uint64]) -> Int64Array:
    """±m as int64: negative where the word's top bit (the sign S) is set.

    Branch-free, (m XOR −S) + S (two's complement: −m = (m XOR −1) + 1), since the sign bits are random.
    """
    s = (words >> np.uint64(63)).view(np.int64)
    out: Int64Array = (_checked_int64(m) ^ -s) + s
    return out


def _checked_int64(values: IntArray) -> Int64Array:
    if values.dtype == object and values.size and max(int(v) for v in values) > _INT64_MAX:
        raise OverflowError("a discrete Laplace draw does not fit in int64; use a smaller scale")
    return values.astype(np.int64, copy=False)


def discrete_laplace_batch(scales: Sequence[RationalLike], sizes: Sequence[int],
                           rng: RandomSource) -> list[Int64Array]:
    """``sizes[k]`` independent discrete Laplace draws of scale ``scales[k]`` for each k, in one vectorised pass.

    The same distribution as :func:`discrete_laplace` per scale (and the same draws for one scale); one
    batch costs one set of numpy passes however many scales it mixes.

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> [a.shape for a in discrete_laplace_batch([1, Fraction(7, 2)], [3, 2], SeededRandomSource(0))]
        [(3,), (2,)]

    """
    return _batched(scales, sizes, rng, "scale", MAX_LAPLACE_SCALE, _scale, _laplace)


def discrete_laplace(scale: RationalLike, size: int, rng: RandomSource) -> Int64Array:
    """``size`` independent draws Z with P[Z = x] ∝ exp(-|x| / scale), as int64.

    ``scale`` = t is an exact positive rational (a float is converted exactly), at most
    :data:`MAX_LAPLACE_SCALE`. Adding Z to an integer statistic of L1 sensitivity Δ is (Δ/scale)-DP.

    Correctness: one 64-bit word per draw, a sign bit S and a uniform U, and Z = ±M with
    M = #{m ≥ 1 : U < c·qᵐ}, q = e^(-1/t), c = 2/(1 + q), so P[Z = z] = q^|z|(1 − q)/(1 + q) exactly
    (module docstring); every comparison U < c·qᵐ is exact (:mod:`dpframe.noise.certified`).

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource
        >>> z = discrete_laplace(Fraction(1, 3), 5, SeededRandomSource(0))
        >>> z.dtype, len(z)
        (dtype('int64'), 5)

    """
    return discrete_laplace_batch([scale], [size], rng)[0]


def discrete_laplace_variance(scale: RationalLike) -> float:
    """Variance of the discrete Laplace with this scale t: 2 e^{-1/t} / (1 - e^{-1/t})².

    Computed as ``2·exp(-x) / expm1(-x)**2`` with x = 1/t (accurate for all t), and by the series
    2t² - 1/6 when x < 1e-8. A reporting helper: floats, never used to sample.

    Example:
        >>> round(discrete_laplace_variance(1), 6)
        1.841347
        >>> round(discrete_laplace_variance(1000) / 2e6, 6)
        1.0

    """
    lam = _positive(scale, "scale")
    x = _float(1 / lam)
    if x > 1e-8:
        q = math.exp(-x) if x < 800 else 0.0
        d = -math.expm1(-x)
        return 2 * q / (d * d)
    return _float(2 * lam * lam) - 1 / 6


def discrete_laplace_tail(scale: RationalLike, k: int) -> float:
    """P[Z >= k] for Z discrete Laplace with scale t: e^{-k/t} / (1 + e^{-1/t}) for k >= 1.

    Evaluated in log space, ``exp(-k/t - log1p(exp(-1/t)))``, with k/t formed exactly before the one
    rounding to float, so it neither overflows nor loses relative accuracy in the far tail. For k <= 0
    it returns 1 - P[Z >= 1 - k] (symmetry). P[|Z| >= k] is twice the value for k >= 1.

    Example:
        >>> round(discrete_laplace_tail(1, 1), 6)   # e^-1 / (1 + e^-1)
        0.268941
        >>> discrete_laplace_tail(10, 10_000) < 1e-300
        True

    """
    lam, kk = _positive(scale, "scale"), _threshold_int(k)
    if kk <= 0:
        return 1.0 - discrete_laplace_tail(lam, 1 - kk)
    log_p = discrete_laplace_log_tail(lam, kk)
    return math.exp(log_p) if log_p > -800 else 0.0


def discrete_laplace_log_tail(scale: RationalLike, k: int) -> float:
    """Log P[Z >= k] for Z discrete Laplace with scale t (:func:`discrete_laplace_tail` before its exp).

    Never underflows: compare it with a log δ where δ may be below the float range (a tail that has
    underflowed to 0.0 is ``<= δ`` for every δ, which would set a threshold far too low).

    Example:
        >>> round(discrete_laplace_log_tail(4, 4000), 4)           # -1000 - log(1 + e^-1/4)
        -1000.5759

    """
    lam, kk = _positive(scale, "scale"), _threshold_int(k)
    if kk <= 0:
        return math.log1p(-discrete_laplace_tail(lam, 1 - kk))
    return -_float(Fraction(kk) / lam) - math.log1p(math.exp(-_float(1 / lam)))


def _threshold_int(k: object) -> int:
    """An integer threshold (a bool or a non-integer: an :class:`~dpframe.errors.ArgumentTypeError`)."""
    return as_int(k, "k", "pass an integer threshold")



# --------------------------------------------------------------------------------------------------
# Discrete Gaussian (CKS20 Algorithm 3)


@dataclass(frozen=True)
class _Sigma2:
    """A discrete Gaussian σ² with its Laplace proposal (t = ⌊σ⌋ + 1) and float64 constants (within u)."""

    sigma2: Fraction
    laplace: _Scale
    s: Fraction      # σ²/t
    s_f: float
    v_f: float       # 1/(2σ²)
    fast: bool       # 2⁻⁹⁰⁰ ≤ σ²: the float64 bound of the module docstring holds
    rate: float      # approximate acceptance rate (batch sizing only)


@plain_cache(maxsize=256)
def _sigma2(s2: Fraction) -> _Sigma2:
    t = math.isqrt(s2.numerator // s2.denominator) + 1  # floor(sqrt(p/q)) = isqrt(floor(p/q))
    return _Sigma2(s2, _scale(Fraction(t)), s2 / t, _float(s2 / t), _float(1 / (2 * s2)),
                   s2 >= _MIN_FAST_SIGMA2, _gaussian_rate(s2, t))


def _acceptance_end(g: _Sigma2) -> int:
    """L of :func:`_acceptance_table`: the first |y| whose p̂ is 0 (d ≥ √122·σ: x > 60); beyond _TABLE without one."""
    return math.floor(g.s_f + math.sqrt(122 * float(g.sigma2))) + 2 if g.fast else _TABLE + 1


def _table_entries(scale: Any) -> int:
    """How many entries a scale's table has, or would have (more than :data:`_TABLE`: it has none).

    A :class:`_Scale`'s is :func:`_threshold_table`, a :class:`_Sigma2`'s :func:`_acceptance_table`.
    """
    return scale.cap + 1 if isinstance(scale, _Scale) else _acceptance_end(scale) + 1


@functools.lru_cache(maxsize=256)
def _acceptance_table(g: _Sigma2) -> FloatArray | None:
    """p̂ of the acceptance for |y| = 0..L (see :func:`_acceptance`), if L ≤ _TABLE."""
    end = _acceptance_end(g)
    if end > _TABLE:
        return None
    table = _acceptance(np.arange(end + 1, dtype=np.int64), _Batch([g], [end + 1]))
    if table[end] != 0.0:            # (never: x̂ > X_MAX there; then no table rather than a wrong one)
        return None
    table.flags.writeable = False
    return table


def _acceptance(y: Int64Array, batch: _Batch, table: FloatArray | None = None) -> FloatArray:
    """p̂ of exp(-(|y| − σ²/t)²/(2σ²)) per candidate: exp_neg of fl(fl(d̂·d̂)·fl(1/(2σ²))) (module docstring).

    NaN for σ² < 2⁻⁹⁰⁰ (no float bound: NaN is never certain, so the exact path decides); x̂ is never NaN
    for the others (d̂ and 1/(2σ²) finite, the latter > 0). ``table`` (:func:`_acceptance_table`, for a batch
    of one σ²) holds these floats for |y| ≤ L, where x̂ > X_MAX (p̂ = 0); x̂ only grows beyond (|y| > σ²/t,
    every rounding monotone), so |y| ≥ L reads entry L.
    """
    if table is not None:
        out: FloatArray = table.take(np.minimum(np.abs(y), table.size - 1))
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.abs(y).astype(np.float64) - batch("s_f")
        x = d * d * batch("v_f")
        if all(g.fast for g in batch.scales):
            return exp_neg(x)
        p_hat = exp_neg(np.nan_to_num(x, nan=np.inf))
    p_hat[np.broadcast_to(~np.asarray(batch("fast"), dtype=bool), p_hat.shape)] = np.nan
    return p_hat


def _gaussian_rate(sigma2: Fraction, t: int) -> float:
    """Approximate acceptance rate of Algorithm 3 (batch sizing only)."""
    s2 = max(float(sigma2), 1e-300)
    sigma = math.sqrt(s2)
    if sigma >= 2:
        norm_g = math.sqrt(2 * math.pi) * sigma
    else:
        norm_g = 1 + 2 * sum(math.exp(-y * y / (2 * s2)) for y in range(1, 61))
    norm_l = 1 / math.tanh(1 / (2 * t))
    return min(max(norm_g * math.exp(-s2 / (2 * t * t)) / norm_l, 0.05), 1.0)


def _accept(y: Int64Array, batch: _Batch, rng: RandomSource) -> BoolArray:
    """Exactly U < exp(-(|y| − σ²/t)²/(2σ²)) per candidate (σ² per element from ``batch``), one word each.

    All the words are drawn first, in order (as one call would), then decided chunk by chunk (:func:`_chunks`).
    """
    words = [rng.random_uint64(hi - lo) for lo, hi in _chunks(y.size)]
    return np.concatenate([_accept_chunk(y[lo:hi], batch.slice(lo, hi), _Cells(w, rng))
                           for (lo, hi), w in zip(_chunks(y.size), words, strict=True)])


def _accept_chunk(y: Int64Array, batch: _Batch, cells: _Cells) -> BoolArray:
    """:func:`_accept` on one chunk, with its uniforms ``cells``."""
    (p_hat,) = _by_runs(batch.runs(_acceptance_table), y, lambda v, sub, table: (_acceptance(v, sub, table),), 1)

    def bounds(j: int, digits: int) -> tuple[Fraction, Fraction]:
        g = batch.of(j)
        return exp_neg_bounds((abs(int(y[j])) - g.s) ** 2 / (2 * g.sigma2), digits)

    return cells.below(None, p_hat, bounds)


def _gaussian(batch: _Batch, rng: RandomSource) -> Int64Array:
    """Concatenated draws, ``batch.sizes[k]`` of σ² = ``batch.scales[k]``: candidates until each has enough."""
    need = list(batch.sizes)
    parts: list[list[Int64Array]] = [[] for _ in need]
    while any(need):
        live = [k for k, n in enumerate(need) if n]
        round_ = _Batch([batch.scales[k] for k in live],
                        [int(need[k] / batch.scales[k].rate * 1.03) + 16 for k in live])
        y = _laplace(_Batch([g.laplace for g in round_.scales], round_.sizes), rng)
        keep = _accept(y, round_, rng)
        for pos, k in enumerate(live):
            span = slice(round_.offsets[pos], round_.offsets[pos + 1])
            got = np.compress(keep[span], y[span])      # (faster than a boolean index on a random mask)
            parts[k].append(got[:need[k]])   # accepted candidates are iid: the first ones are iid too
            need[k] -= parts[k][-1].size
    return np.concatenate([np.concatenate(p) if p else np.zeros(0, dtype=np.int64) for p in parts])


def discrete_gaussian_batch(sigma2s: Sequence[RationalLike], sizes: Sequence[int],
                            rng: RandomSource) -> list[Int64Array]:
    """``sizes[k]`` independent discrete Gaussian draws of variance parameter ``sigma2s[k]`` for each k, vectorised.

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> [a.shape for a in discrete_gaussian_batch([1, Fraction(9, 2)], [3, 2], SeededRandomSource(0))]
        [(3,), (2,)]

    """
    return _batched(sigma2s, sizes, rng, "sigma2", MAX_GAUSSIAN_SIGMA2, _sigma2, _gaussian)


def discrete_gaussian(sigma2: RationalLike, size: int, rng: RandomSource) -> Int64Array:
    """``size`` independent draws Z with P[Z = x] ∝ exp(-x² / (2·sigma2)), as int64.

    ``sigma2`` is an exact positive rational (a float is converted exactly), at most
    :data:`MAX_GAUSSIAN_SIGMA2`. Adding Z to an integer statistic of L2 sensitivity Δ is
    (Δ²/(2σ²))-zCDP (CKS20 Thm. 14). The variance of Z is strictly less than σ² (CKS20 Cor. 9), so σ²
    is a safe upper bound for accuracy reporting.

    Correctness (CKS20 Algorithm 3): with t = ⌊σ⌋ + 1, a discrete Laplace Y of scale t is accepted
    when U < exp(-(|Y| − σ²/t)²/(2σ²)); accepted values have P[Z = y] ∝ exp(-y²/(2σ²)) exactly (module
    docstring), and every acceptance is an exact comparison (:mod:`dpframe.noise.certified`).

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource
        >>> z = discrete_gaussian(Fraction(9, 2), 5, SeededRandomSource(0))
        >>> z.dtype, len(z)
        (dtype('int64'), 5)

    """
    return discrete_gaussian_batch([sigma2], [size], rng)[0]
