"""Privacy budgets: pure ε-DP, approximate (ε, δ)-DP and zero-concentrated DP (ρ-zCDP).

Budgets are exact: every number is stored as a :class:`fractions.Fraction` (a float argument is read as
the decimal it prints as, so ``0.1`` is exactly 1/10; text such as ``"0.5"`` is refused, see :func:`exact`).
Conversions between notions are sound:

* pure ε-DP → ρ-zCDP with ρ = ε²/2 (exact);
* pure ε-DP → (ε, 0)-DP (exact);
* ρ-zCDP (with an optional δ₀ for approximate zCDP) → (ε, δ₀ + δ)-DP with the conversion of
  Canonne, Kamath and Steinke (2020, Corollary 13), which is tighter than ρ + 2√(ρ ln 1/δ); the ε is
  rounded *up* so it never under-reports; its inverse :func:`zcdp_rho` (the largest ρ that fits an (ε, δ)
  share, rounded down) calibrates zCDP mechanisms to (ε, δ) budgets;
* (ε, δ)-DP with δ > 0 → pure or zCDP: impossible, a :class:`~dpframe.errors.BudgetConversionError`.

Example:
    >>> import dpframe as dp
    >>> dp.PureDP(1).to_zcdp()
    ZCDP(rho=1/2)
    >>> round(float(dp.ZCDP(0.5).to_approx(delta=1e-6).epsilon), 3)
    5.222

"""

from __future__ import annotations

import math
import numbers
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal, TypeAlias, TypeVar, Union

import numpy as np

from dpframe.errors import BudgetConversionError, BudgetError
from dpframe.sealed import Final, plain, plain_cache
from dpframe.signatures import checked_class

Number: TypeAlias = Union[int, float, Fraction]
Notion: TypeAlias = Literal["pure", "approx", "zcdp"]


def exact(value: Number, argument: str, *, allow_zero: bool = False) -> Fraction:
    """Read a user number as an exact, finite Fraction (floats by their shortest decimal repr).

    Text is refused, as clipping bounds refuse it: a budget given as ``"0.5"`` was almost always read from a
    file or an environment variable and not converted, and the fix gives the number to write instead.

    Example:
        >>> exact(0.1, "epsilon")
        Fraction(1, 10)
        >>> exact("0.5", "epsilon")
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: epsilon: expected a number, got the text '0.5'... pass the number, epsilon=0.5...

    """
    value = plain(value)
    if isinstance(value, str):
        raise BudgetError(f"expected a number, got the text {_short(value)} (text read from a file or an environment "
                          "variable must be converted first)", argument=argument, fix=_as_number(value, argument))
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = int(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, float | Fraction | bool):
        value = float(value)  # numpy floating scalars
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise BudgetError(f"expected a number, got {type(value).__name__}", argument=argument,
                          fix=f"pass {argument} as an int, float or Fraction")
    if isinstance(value, float) and not math.isfinite(value):
        raise BudgetError(f"must be finite, got {value}", argument=argument, fix=f"pass a finite positive {argument}")
    result = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)  # a float: the decimal it prints as
    if result < 0 or (result == 0 and not allow_zero):
        shown = repr(value) if isinstance(value, float) else str(value)     # (a huge Fraction: only when refused)
        raise BudgetError(f"must be {'≥' if allow_zero else '>'} 0, got {shown}", argument=argument,
                          fix=f"pass a positive {argument}")
    return result


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}…({len(text)} characters)"


_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,3})?|[+-]?\d+/\d+")
"""Text :func:`_as_number` reads as a number: a decimal whose exponent has at most 3 digits, or a ratio."""
_LITERAL = 60
"""The longest number a fix spells out (a longer one would not be worth copying)."""


def _as_number(text: str, argument: str) -> str:
    """The fix for a budget number given as text: the number it reads as, written as a number.

    Only short text of a decimal (exponent of at most 3 digits) or a ratio is read: ``Fraction("1e30000000")``
    computes ``10**30000000`` (77 s), and ``str`` of an integer past 4,300 digits is a ``ValueError``.

    Example:
        >>> _as_number("0.5", "epsilon")
        'pass the number, epsilon=0.5 (convert text read from a file with float(text))'
        >>> _as_number("1e30000000", "epsilon")
        'pass epsilon as a number such as 0.5 (convert text read from a file with float(text))'

    """
    convert = "convert text read from a file with float(text)"
    generic = f"pass {argument} as a number such as 0.5 ({convert})"
    stripped = text.strip()
    if len(stripped) > _LITERAL or not _NUMBER_TEXT.fullmatch(stripped):
        return generic
    try:
        number = Fraction(stripped)
    except (ValueError, ZeroDivisionError):
        return generic
    try:
        literal = repr(float(number))
        literal = literal.removesuffix(".0") if Fraction(literal) == number else ""
    except OverflowError:
        literal = ""
    if not literal and len(str(number.numerator)) + len(str(number.denominator)) <= _LITERAL:
        literal = f"Fraction({number.numerator}, {number.denominator})"
    return f"pass the number, {argument}={literal} ({convert})" if literal else generic


def _fmt(x: Fraction) -> str:
    if x.denominator == 1 or x.denominator < 1000:
        return str(x)
    if 1e-300 < abs(x) < 1e300:
        return f"{float(x):.6g}"
    return f"{Decimal(x.numerator) / Decimal(x.denominator):.6g}"   # beyond floats: Decimal has no range limit


@checked_class
@dataclass(frozen=True)
class PureDP(Final, argument="budget"):
    """Pure ε-differential privacy.

    Example:
        >>> PureDP(0.5) + PureDP(0.25)
        PureDP(epsilon=3/4)

    """

    epsilon: Fraction
    notion: Notion = "pure"

    def __init__(self, epsilon: Number) -> None:
        object.__setattr__(self, "epsilon", exact(epsilon, "epsilon", allow_zero=False))
        object.__setattr__(self, "notion", "pure")

    def __repr__(self) -> str:
        return f"PureDP(epsilon={_fmt(self.epsilon)})"

    def __add__(self, other: PureDP) -> PureDP:
        if not isinstance(other, PureDP):
            return NotImplemented
        return _raw(PureDP, epsilon=self.epsilon + other.epsilon)

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        """The same guarantee as (ε, 0)-DP (``delta`` is accepted for a uniform signature and ignored)."""
        return _raw(ApproxDP, epsilon=self.epsilon, delta=Fraction(0))

    def to_zcdp(self) -> ZCDP:
        """ε-DP implies (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        return _raw(ZCDP, rho=self.epsilon**2 / 2, delta=Fraction(0))


@checked_class
@dataclass(frozen=True)
class ApproxDP(Final, argument="budget"):
    """Approximate (ε, δ)-differential privacy, 0 ≤ δ < 1.

    Example:
        >>> ApproxDP(1, 1e-6).delta
        Fraction(1, 1000000)

    """

    epsilon: Fraction
    delta: Fraction
    notion: Notion = "approx"

    def __init__(self, epsilon: Number, delta: Number = 0) -> None:
        eps = exact(epsilon, "epsilon", allow_zero=False)
        d = exact(delta, "delta", allow_zero=True)
        if d >= 1:
            raise BudgetError(f"must be < 1, got {delta}", argument="delta",
                              fix="δ is a probability of failure: use something like 1e-6, below 1/n")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "notion", "approx")

    def __repr__(self) -> str:
        return f"ApproxDP(epsilon={_fmt(self.epsilon)}, delta={_fmt(self.delta)})"

    def __add__(self, other: ApproxDP) -> ApproxDP:
        if not isinstance(other, ApproxDP):
            return NotImplemented
        return _raw(ApproxDP, epsilon=self.epsilon + other.epsilon, delta=self.delta + other.delta)

    def to_approx(self, delta: Number = 0) -> ApproxDP:
        """Itself."""
        return self


@checked_class
@dataclass(frozen=True)
class ZCDP(Final, argument="budget"):
    """ρ-zero-concentrated DP (Bun & Steinke 2016); ``delta`` > 0 makes it approximate (δ, ρ)-zCDP.

    Example:
        >>> ZCDP(0.125) + PureDP(0.5).to_zcdp()
        ZCDP(rho=1/4)

    """

    rho: Fraction
    delta: Fraction
    notion: Notion = "zcdp"

    def __init__(self, rho: Number, delta: Number = 0) -> None:
        r = exact(rho, "rho", allow_zero=False)
        d = exact(delta, "delta", allow_zero=True)
        if d >= 1:
            raise BudgetError(f"must be < 1, got {delta}", argument="delta", fix="use a δ such as 1e-7")
        object.__setattr__(self, "rho", r)
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "notion", "zcdp")

    def __repr__(self) -> str:
        extra = f", delta={_fmt(self.delta)}" if self.delta else ""
        return f"ZCDP(rho={_fmt(self.rho)}{extra})"

    def __add__(self, other: ZCDP) -> ZCDP:
        if not isinstance(other, ZCDP):
            return NotImplemented
        return _raw(ZCDP, rho=self.rho + other.rho, delta=self.delta + other.delta)

    def to_zcdp(self) -> ZCDP:
        """Itself."""
        return self

    def to_approx(self, delta: Number) -> ApproxDP:
        """The (ε, δ₀ + δ)-DP guarantee implied by this (δ₀, ρ)-zCDP budget, ε rounded up."""
        d = exact(delta, "delta", allow_zero=False)
        if d + self.delta >= 1:
            raise BudgetError("δ₀ + δ must be < 1", argument="delta", fix="use a smaller delta")
        return _raw(ApproxDP, epsilon=zcdp_epsilon(self.rho, d), delta=self.delta + d)


Budget: TypeAlias = PureDP | ApproxDP | ZCDP


_B = TypeVar("_B", PureDP, ApproxDP, ZCDP)


def _raw(cls: type[_B], **fields: Fraction) -> _B:
    """Build a budget from already-exact, already-valid numbers (zero allowed: 'nothing spent')."""
    obj = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(obj, name, value)
    object.__setattr__(obj, "notion", {PureDP: "pure", ApproxDP: "approx", ZCDP: "zcdp"}[cls])
    return obj


def make(notion: Notion, first: Fraction, delta: Fraction = Fraction(0)) -> Budget:
    """Build a (possibly zero) budget of a notion from exact, non-negative numbers."""
    if notion == "pure":
        return _raw(PureDP, epsilon=first)
    if notion == "approx":
        return _raw(ApproxDP, epsilon=first, delta=delta)
    return _raw(ZCDP, rho=first, delta=delta)


def divide(share: Budget, parts: int) -> Budget:
    """``share`` in ``parts`` equal parts: one part, every coordinate (ε or ρ, and δ) divided by ``parts``.

    For a mechanism plugin that adds several noises within the share its ``plan`` received: calibrate each
    noise to one part (``Noise.calibrate(sensitivity, divide(share, 2))``), and the parts add up to the share
    by basic composition (pure ε, (ε, δ)) or zCDP composition (ρ).

    Example:
        >>> divide(PureDP(1), 4), divide(ZCDP(0.5), 2)
        (PureDP(epsilon=1/4), ZCDP(rho=1/4))
        >>> divide(ApproxDP(1, 1e-6), 2)
        ApproxDP(epsilon=1/2, delta=5e-07)
        >>> divide(PureDP(1), 0)
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: parts: expected a whole number ≥ 1, got 0. Fix: ...

    """
    if isinstance(parts, bool) or not isinstance(parts, numbers.Integral) or parts < 1:
        raise BudgetError(f"expected a whole number ≥ 1, got {parts!r}", argument="parts",
                          fix="divide a share into as many equal parts as the noises it pays for: divide(share, 2)")
    if not isinstance(share, PureDP | ApproxDP | ZCDP):
        raise BudgetError(f"expected dp.PureDP, dp.ApproxDP or dp.ZCDP, got {share!r}", argument="share",
                          fix="pass the share a mechanism's plan() received")
    n = int(parts)
    if isinstance(share, PureDP):
        return make("pure", share.epsilon / n)
    if isinstance(share, ApproxDP):
        return make("approx", share.epsilon / n, share.delta / n)
    return make("zcdp", share.rho / n, share.delta / n)


def zero(notion: Notion) -> Budget:
    """The zero budget of a notion (what a fresh session has spent)."""
    return make(notion, Fraction(0))


#: Above this ρ the float search of the CKS20 conversion is not used: ε is the exact standard bound.
_FLOAT_RHO = 1e100


def _log_delta(alpha: float, rho: float, eps: float) -> float:
    # CKS20 Cor. 13: δ = exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α, in log space.
    return (alpha - 1) * (alpha * rho - eps) - math.log(alpha - 1) + alpha * math.log1p(-1 / alpha)


def _float(x: Fraction, rounding: Callable[[Fraction], float]) -> float:
    """``rounding(x)`` (:func:`up` or :func:`down`), +∞ when x is too large for a float.

    Example:
        >>> _float(Fraction(1, 3), up) > 1 / 3, _float(Fraction(10**400), down)
        (True, inf)

    """
    try:
        return rounding(x)
    except OverflowError:
        return math.inf


def exact_log(x: Fraction) -> float:
    """Log x for an exact x > 0 within a few ulps of the result, also where float(x) underflows or overflows.

    What every calibration to a δ uses: ``float(δ)`` is 0 below 5e-324 and loses precision below 2.2e-308
    (a subnormal), so ``math.log(float(δ))`` fails or is wrong exactly where an analyst may pick δ. x = 2^e·m with
    m in [1/2, 2) (exact), ln x = e·ln 2 + ln m; within 1/2 of 1, log1p of the exact x − 1. (The difference
    log(numerator) − log(denominator) erred by ulps of those logs: ln(1 − 10⁻¹⁵) was 0.0.)

    Example:
        >>> round(exact_log(Fraction(1, 10**400)), 4), round(exact_log(Fraction(1, 2)), 6)
        (-921.034, -0.693147)
        >>> exact_log(Fraction(10**15 - 1, 10**15)) < 0
        True

    """
    num, den = x.numerator, x.denominator       # integer true divisions: correctly rounded, no gcd of huge parts
    if 2 * abs(num - den) < den:
        return math.log1p((num - den) / den)
    e = num.bit_length() - den.bit_length()
    return e * math.log(2) + math.log(num / (den << e) if e >= 0 else (num << -e) / den)


def up(x: Fraction) -> float:
    """The smallest float ≥ x (privacy curves take floats; rounding up never under-reports).

    Example:
        >>> up(Fraction(1, 3)) > 1 / 3, up(Fraction(1, 2)), up(Fraction(1, 10**400))   # 1/3 rounds down, 1/2 is exact
        (True, 0.5, 5e-324)

    """
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def down(x: Fraction) -> float:
    """The largest float ≤ x (a budget read as a float never allows more than it says).

    Example:
        >>> down(Fraction(1, 10)) < 0.1, down(Fraction(1, 2)), down(Fraction(1, 10**400))   # 0.1 is above 1/10
        (True, 0.5, 0.0)

    """
    f = float(x)
    return f if Fraction(f) <= x else math.nextafter(f, -math.inf)


def add_up(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The elementwise sum a + b rounded up: ≥ the exact sum (a ledger's running total never under-reports).

    Float addition rounds to nearest, which may be below the exact sum by half an ulp; over thousands of
    charges those errors add up (the RDP filter's per-order sums fell below their exact values by more than
    its 10⁻¹² margin beyond about 9,000 charges). The exact error of each sum (Knuth's TwoSum) says when to
    move one ulp up; exact sums are unchanged.

    Example:
        >>> s = add_up(np.array([1.0, 0.5]), np.array([1e-17, 0.25]))   # 1 + 1e-17 rounds to 1.0
        >>> bool(s[0] > 1.0), float(s[1])
        (True, 0.75)

    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    s = a + b
    # ∞ − ∞ in the error term of an infinite sum (s stays); the step up from 0 is subnormal (an underflow)
    with np.errstate(invalid="ignore", under="ignore"):
        bb = s - a
        err = (a - (s - bb)) + (b - bb)
        out: np.ndarray = np.where(err > 0, np.nextafter(s, np.inf), s)
    return out


def sqrt_down(x: Fraction) -> float:
    """The largest float whose square is ≤ x (a noise σ read from its exact σ²: a curve never under-reports).

    Computed on x scaled by a power of 4 into the float range (``math.sqrt(down(x))`` was far below √x where
    down(x) is subnormal or 0, e.g. 5e-324 for x = 2⁻¹⁰⁷⁴/3, whose root is 1.3e-162), then moved ulp by ulp to the
    largest float f with f² ≤ x (exact rational squares). Beyond the float range: the largest float.

    Example:
        >>> s = sqrt_down(Fraction(3, 2))
        >>> Fraction(s) ** 2 <= Fraction(3, 2) < Fraction(math.nextafter(s, math.inf)) ** 2, sqrt_down(Fraction(9, 4))
        (True, 1.5)
        >>> sqrt_down(Fraction(1, 3 * 2**1074)) > 1e-162
        True

    """
    if x <= 0:
        return 0.0
    half = (x.numerator.bit_length() - x.denominator.bit_length()) // 2      # x/4^half is in [1/16, 16]
    try:
        f = math.ldexp(math.sqrt(float(x / Fraction(4) ** half)), half)
    except OverflowError:
        f = math.inf
    f = min(f, sys.float_info.max)
    while f > 0 and Fraction(f) ** 2 > x:
        f = math.nextafter(f, 0.0)
    while f < sys.float_info.max and Fraction(math.nextafter(f, math.inf)) ** 2 <= x:
        f = math.nextafter(f, math.inf)
    return f


def sqrt_up(x: Fraction) -> float:
    """The smallest float whose square is ≥ x (+∞ beyond the float range): :func:`sqrt_down`, moved up where inexact.

    Example:
        >>> s = sqrt_up(Fraction(3, 2))
        >>> Fraction(math.nextafter(s, 0.0)) ** 2 < Fraction(3, 2) <= Fraction(s) ** 2, sqrt_up(Fraction(9, 4))
        (True, 1.5)

    """
    f = sqrt_down(x)
    if Fraction(f) ** 2 >= x:
        return f
    return math.inf if f == sys.float_info.max else math.nextafter(f, math.inf)


def zcdp_log_delta(rho: Fraction, epsilon: Fraction) -> float:
    """Log of the smallest δ the CKS20 conversion gives for ρ-zCDP ⇒ (ε, δ)-DP, capped at 0 (δ ≤ 1).

    Any order α gives a valid bound, so a search that misses the optimum only loses tightness.
    """
    r, e = _float(rho, up), _float(epsilon, down)    # δ grows with ρ and falls with ε: both on the safe side
    if r == 0:
        return -math.inf
    if not math.isfinite(r) or r > _FLOAT_RHO:
        return 0.0                      # δ ≤ 1: vacuous but true (such a ρ protects nothing)
    if not math.isfinite(e):
        e = sys.float_info.max          # δ is non-increasing in ε: a smaller ε gives a larger, valid δ
    grid = np.exp(np.linspace(math.log(1 + 1e-9), math.log(1e7), 2000))
    with np.errstate(all="ignore"):
        values = (grid - 1) * (grid * r - e) - np.log(grid - 1) + grid * np.log1p(-1 / grid)
    values = np.where(np.isnan(values), math.inf, values)
    best = int(np.argmin(values))
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    from scipy.optimize import minimize_scalar  # imported lazily: it is slow to import and rarely needed

    with np.errstate(all="ignore"):
        res = minimize_scalar(lambda a: _log_delta(float(a), r, e), bounds=(lo, hi), method="bounded")
    found = float(res.fun) if math.isfinite(float(res.fun)) else math.inf
    return min(0.0, float(values[best]), found, _at_optimal_order(r, e))


def _at_optimal_order(rho: float, eps: float) -> float:
    """The CKS20 log δ at its optimal order, which may lie far beyond any grid (ρ = 5e-30, ε = 1e-13: α ≈ 10¹⁶).

    The exponent is convex in α (second derivative 2ρ + 1/(α(α − 1)) > 0) and its derivative
    (2α − 1)ρ − ε + log(1 − 1/α) increases from −∞, so the optimum is its unique root, found by bisection
    on log(α − 1). Any α gives a valid δ, so a root found inexactly only loses tightness.
    """
    def slope(log_am1: float) -> float:
        am1 = math.exp(log_am1)
        return (2 * am1 + 1) * rho - eps - math.log1p(1 / am1)   # log(1 − 1/α) = −log(1 + 1/(α − 1))

    lo, hi = -40.0, 700.0                 # α − 1 from e⁻⁴⁰ to e⁷⁰⁰
    if slope(hi) < 0:
        return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if slope(mid) < 0 else (lo, mid)
    am1 = math.exp(hi)
    value = am1 * ((am1 + 1) * rho - eps) - math.log(am1) - (am1 + 1) * math.log1p(1 / am1)
    return value if math.isfinite(value) else math.inf


def zcdp_delta(rho: Fraction, epsilon: Fraction) -> float:
    """The smallest δ the CKS20 conversion gives for ρ-zCDP ⇒ (ε, δ)-DP (any α gives a valid bound).

    Example:
        >>> round(zcdp_delta(Fraction(1, 2), Fraction(5)), 8)
        2.9e-06
        >>> zcdp_delta(Fraction(10**400), Fraction(1))     # too large for floats: the vacuous δ = 1
        1.0

    """
    return math.exp(zcdp_log_delta(rho, epsilon))


def _sqrt_up(x: Fraction) -> Fraction:
    """A Fraction ≥ √x (exact integer square root of the scaled value, rounded up)."""
    n, d = x.numerator, x.denominator
    m = math.isqrt(n * d)
    return Fraction(m if m * m == n * d else m + 1, d)


def _round_up(x: Fraction) -> Fraction:
    """The multiple of 10⁻¹² at or above x."""
    return Fraction(-((-x.numerator * 10**12) // x.denominator), 10**12)


@plain_cache(maxsize=256)
def zcdp_epsilon(rho: Fraction, delta: Fraction) -> Fraction:
    """The ε of the CKS20 conversion of ρ-zCDP to (ε, δ)-DP, rounded up (never under-reports).

    Cached (keyed on the plain values): a 64-step search of about 50 ms, asked again for every display of
    a zCDP budget as (ε, δ) and by :func:`zcdp_rho`'s check.

    It is never above the standard bound ρ + 2√(ρ·log(1/δ)) (Bun & Steinke 2016, Prop. 1.3), which is
    what is returned, computed exactly and rounded up, when ρ is too large for the float search.

    Example:
        >>> float(zcdp_epsilon(Fraction(1, 2), Fraction(1, 10**6))) < 0.5 + 2 * (0.5 * math.log(1e6)) ** 0.5
        True
        >>> zcdp_epsilon(Fraction(10**200), Fraction(1, 10**6)) > 10**200
        True

    """
    if rho == 0:
        return Fraction(0)
    log_inv = -exact_log(delta)                               # log(1/δ) > 0, also for δ below the float range
    # an upper bound of log(1/δ) as an exact number (relative margin far above float error)
    log_up = Fraction(log_inv * (1 + 1e-12) + 1e-300)
    standard = _round_up(rho + 2 * _sqrt_up(rho * log_up)) + Fraction(1, 10**12)
    r = _float(rho, up)
    if r > _FLOAT_RHO:
        return standard
    target = -log_inv
    lo, hi = 0.0, float(standard)
    for _ in range(64):
        mid = (lo + hi) / 2
        if zcdp_log_delta(rho, Fraction(mid)) <= target:
            hi = mid
        else:
            lo = mid
    # Round up with a margin far above float error in evaluating the bound.
    found = Fraction(hi * (1 + 1e-9) + 1e-12).limit_denominator(10**12) + Fraction(1, 10**12)
    return min(found, standard)


@plain_cache(maxsize=256)
def zcdp_rho(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest ρ (rounded down) whose CKS20 conversion fits (ε, δ): the inverse of :func:`zcdp_epsilon`.

    For a fixed order α the CKS20 bound ``δ ≤ e^{(α−1)(αρ−ε)}·(1 − 1/α)^α/(α − 1)`` is linear in ρ
    inside the exponent, so it holds exactly for ``ρ ≤ r(α) = (ε + (ln δ + ln(α−1) − α·ln(1 − 1/α))/(α−1))/α``;
    every α gives a valid ρ, and the best over a grid of α (refined) is taken, less a relative 10⁻⁶. The
    result is checked against :func:`zcdp_epsilon` (the conversion the engine reports), so
    ``zcdp_epsilon(ρ, δ) ≤ ε`` always holds; it is never below the classic inverse ``(√(L + ε) − √L)²``,
    ``L = ln 1/δ`` (also checked), and is 0 only when no positive ρ passes the check.

    Example:
        >>> classic = (math.sqrt(math.log(1e6) + 1) - math.sqrt(math.log(1e6))) ** 2
        >>> rho = zcdp_rho(Fraction(1), Fraction(1, 10**6))
        >>> round(classic, 5), round(float(rho), 5), zcdp_epsilon(rho, Fraction(1, 10**6)) <= 1
        (0.01747, 0.02436, True)

    """
    eps, log_d = float(epsilon), exact_log(delta)
    classic_root = math.sqrt(-log_d + eps) - math.sqrt(-log_d)
    classic = Fraction(classic_root * classic_root * (1 - 1e-6))
    candidates = [classic]
    grid = np.exp(np.linspace(math.log(1 + 1e-6), math.log(1e6), 4000))

    def r(a: np.ndarray) -> np.ndarray:
        return np.asarray((eps + (log_d + np.log(a - 1) - a * np.log1p(-1 / a)) / (a - 1)) / a)

    with np.errstate(all="ignore"):
        values = np.nan_to_num(r(grid), nan=-math.inf)
    best = int(np.argmax(values))
    from scipy.optimize import minimize_scalar  # imported lazily: it is slow to import and rarely needed

    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)]
    with np.errstate(all="ignore"):
        res = minimize_scalar(lambda a: -float(r(np.array([a]))[0]), bounds=(lo, hi), method="bounded")
    found = max(float(values[best]), -float(res.fun) if math.isfinite(float(res.fun)) else -math.inf)
    if found > 0:
        candidates.append(Fraction(found * (1 - 1e-6)))
    fitting = [c for c in candidates if c > 0 and zcdp_epsilon(c, delta) <= epsilon]
    return max(fitting, default=Fraction(0))


_NOTION_NAMES = {"pure": "a pure-ε", "approx": "an (ε, δ)", "zcdp": "a zCDP"}


def convert(budget: Budget, notion: Notion, *, argument: str = "budget") -> Budget:
    """Convert ``budget`` into ``notion`` soundly, or raise :class:`BudgetConversionError`.

    Approximate DP with δ > 0 converts to nothing else; zCDP converts to approximate DP only with a δ
    (use :meth:`ZCDP.to_approx`). ``argument`` is what the error names.

    Example:
        >>> convert(PureDP(1), "zcdp"), convert(ApproxDP(1, 0), "pure"), convert(ZCDP(0.5, 1e-6), "zcdp")
        (ZCDP(rho=1/2), PureDP(epsilon=1), ZCDP(rho=1/2, delta=1e-06))
        >>> convert(ApproxDP(1, 1e-6), "zcdp")
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetConversionError: budget: ApproxDP(epsilon=1, delta=1e-06) cannot be converted to zcdp ...
        >>> convert(ZCDP(0.5), "approx", argument="cost")
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetConversionError: cost: ZCDP(rho=1/2) cannot be charged to an (ε, δ) budget...

    """
    if budget.notion == notion:
        return budget
    if isinstance(budget, PureDP):
        return budget.to_approx() if notion == "approx" else budget.to_zcdp()
    if isinstance(budget, ApproxDP) and budget.delta == 0:
        return convert(_raw(PureDP, epsilon=budget.epsilon), notion, argument=argument)
    if isinstance(budget, ApproxDP):
        raise BudgetConversionError(
            f"{budget!r} cannot be converted to {notion} (an (ε, δ) guarantee with δ > 0 implies no "
            f"{'pure' if notion == 'pure' else 'zCDP'} guarantee)", argument=argument,
            fix="give this query's budget as dp.PureDP(epsilon)" + (" or dp.ZCDP(rho)" if notion == "zcdp" else ""))
    raise BudgetConversionError(
        f"{budget!r} cannot be charged to {_NOTION_NAMES.get(notion, notion)} budget", argument=argument,
        fix=("give this query a dp.PureDP(epsilon) budget" if notion == "pure" else
             "give this query an (ε, δ) budget such as dp.ApproxDP(1, 1e-7) or dp.PureDP(1)")
        + "; for Gaussian noise, open the session with a dp.ZCDP budget")


def describe(budget: Budget) -> str:
    """Human text such as 'ε=1' or 'ρ=0.5, δ=1e-06'."""
    if isinstance(budget, PureDP):
        return f"ε={_fmt(budget.epsilon)}"
    if isinstance(budget, ApproxDP):
        return f"ε={_fmt(budget.epsilon)}, δ={_fmt(budget.delta)}"
    return f"ρ={_fmt(budget.rho)}" + (f", δ={_fmt(budget.delta)}" if budget.delta else "")
