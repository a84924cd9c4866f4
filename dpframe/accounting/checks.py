"""Argument checks and output guards of the standalone accounting API.

Every public constructor and method of :mod:`dpframe.accounting` reads its numbers through these
functions, so bad input is a :class:`~dpframe.errors.BudgetError` naming the argument and the fix (never a
raw ``TypeError``/``OverflowError``/``ZeroDivisionError``, never a silent NaN). Numbers may be ints,
floats, Fractions, Decimals or numpy scalars; they must convert to *finite* floats (``10**400`` does not).

Outputs are guarded the other way: a δ is clipped to [0, 1] and an ε or RDP value to [0, ∞]; a NaN
(which would mean a numerical failure) becomes the *vacuous* bound (δ = 1, ε = ∞), which is always true,
so a guard can never under-report. ∞ is a legitimate answer ("no finite ε has this δ").

Example:
    >>> real(3, "times", "pass a number")
    3.0
    >>> try:
    ...     positive(float("nan"), "sigma", "pass sigma > 0")
    ... except BudgetError as e:
    ...     print(e)
    sigma: must be a finite number > 0, got nan. Fix: pass sigma > 0
    >>> delta_out(1.0000000000000002), epsilon_out(float("nan"))
    (1.0, inf)

"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from dpframe.errors import BudgetError

#: The largest repetition count a standalone accountant composes (exact as a float).
MAX_TIMES = 2**53


def shown(value: object) -> str:
    """``repr(value)`` for an error message, shortened (a 400-digit int is not worth printing).

    Example:
        >>> shown(10**400)
        'an int with 401 digits'
        >>> shown(2**20_000)
        'an int of 20,001 bits'
        >>> shown(Fraction(1, 10**5000))
        'a fraction of about 5,000 digits'

    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        digits = len(str(abs(value))) if value.bit_length() < 10_000 else None   # str() refuses > 4,300 digits
        return f"an int with {digits} digits" if digits else f"an int of {value.bit_length():,} bits"
    if isinstance(value, Fraction) and max(abs(value.numerator).bit_length(), value.denominator.bit_length()) > 10_000:
        bits = max(abs(value.numerator).bit_length(), value.denominator.bit_length())
        return f"a fraction of about {int(bits * math.log10(2)):,} digits"        # its repr would raise
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + f"… ({len(text)} characters)"


def _number(value: object) -> float | None:
    """``value`` as a float, or None when it is not a real number (bools are not numbers here)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real | Decimal):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError, TypeError):    # 10**400, Decimal('sNaN')
        return math.nan


def real(value: object, argument: str, fix: str) -> float:
    """A finite real number as a float."""
    x = _number(value)
    if x is None or not math.isfinite(x):
        what = "a number" if x is None else "a finite number"
        raise BudgetError(f"must be {what}, got {shown(value)}", argument=argument, fix=fix)
    return x


def positive(value: object, argument: str, fix: str) -> float:
    """A finite number > 0 (also after conversion to float: 1e-400 as a Fraction is refused)."""
    x = _number(value)
    if x is None or not math.isfinite(x) or x <= 0:
        raise BudgetError(f"must be a finite number > 0, got {shown(value)}", argument=argument, fix=fix)
    return x


def nonnegative(value: object, argument: str, fix: str) -> float:
    """A finite number ≥ 0."""
    x = _number(value)
    if x is None or not math.isfinite(x) or x < 0:
        raise BudgetError(f"must be a finite number ≥ 0, got {shown(value)}", argument=argument, fix=fix)
    return x


def ratio(top: float, bottom: float, argument: str, what: str) -> float:
    """``top / bottom`` (a privacy parameter such as ε = Δ/b) as a positive finite float, or a clear error.

    Rounded up: every curve grows with its ε = Δ/b or μ = Δ/σ, and the float quotient is below the exact one about
    half the time (1/3 is 0.333…331); it is raised by one ulp exactly then.

    Example:
        >>> ratio(1.0, 4.0, "scale", "ε = Δ/b"), ratio(1.0, 3.0, "sigma", "μ = Δ/σ") > 1 / 3
        (0.25, True)

    """
    with np.errstate(all="ignore"):
        r = top / bottom if bottom != 0 else math.inf
    if math.isfinite(r) and r > 0 and Fraction(r) < Fraction(top) / Fraction(bottom):
        r = math.nextafter(r, math.inf)
    if not math.isfinite(r) or r <= 0:
        side = "small" if not math.isfinite(r) else "large"
        raise BudgetError(f"{what} = {top:g}/{bottom:g} is not a positive finite float (the {argument} is too "
                          f"{side} relative to the sensitivity)", argument=argument,
                          fix=f"pass a {argument} within a factor 1e300 of the sensitivity")
    return r


def check_rate(rate: object) -> float:
    """A Poisson sampling rate must be a number in (0, 1]."""
    x = _number(rate)
    if x is None or not (0 < x <= 1):
        raise BudgetError(f"must be in (0, 1], got {shown(rate)}", argument="rate",
                          fix="pass the public probability with which each privacy unit is kept, e.g. 0.01")
    return x


def check_delta(delta: object) -> float:
    """δ for a conversion must be a number in (0, 1) (and not underflow to 0 as a float)."""
    x = _number(delta)
    if x is None or not (0 < x < 1):
        raise BudgetError(f"must be in (0, 1), got {shown(delta)}", argument="delta", fix="pass delta such as 1e-6")
    return x


def check_epsilon(epsilon: object) -> float:
    """ε for a conversion must be a finite number ≥ 0."""
    return nonnegative(epsilon, "epsilon", "pass epsilon such as 1.0")


def check_times(times: object) -> int:
    """A repetition count: an int in [1, 2**53]."""
    if isinstance(times, bool | np.bool_) or not isinstance(times, numbers.Integral) or not (
            1 <= int(times) <= MAX_TIMES):
        raise BudgetError(f"must be an int in [1, 2**53], got {shown(times)}", argument="times",
                          fix="pass how many times the mechanism runs")
    return int(times)


def check_alpha(alpha: object, *, limits: bool = False) -> np.ndarray:
    """Rényi orders must be finite numbers > 1 (one or a non-empty sequence); with ``limits``, α = 1 and ∞ too."""
    try:
        raw = np.atleast_1d(np.asarray(alpha))
    except (TypeError, ValueError, OverflowError):       # ragged nesting
        raw = np.array([math.nan])
    if raw.dtype.kind in "iuf":
        a = raw.astype(np.float64)
    elif raw.dtype.kind == "O":                           # Fractions, huge ints, mixed objects
        a = np.array([math.nan if (x := _number(v)) is None else x for v in raw.ravel()]).reshape(raw.shape)
    else:                                                 # strings, booleans, dates
        a = np.array([math.nan])
    if limits and a.ndim == 1 and a.size and not np.any(np.isnan(a)) and np.all(a >= 1):
        return a
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 1):
        raise BudgetError(f"Rényi orders must be finite and > 1, got {shown(alpha)}", argument="alpha",
                          fix="use orders such as 1.5, 2, 8, 64 (curve.rdp_at also takes 1 and math.inf)")
    return a


#: The finest PLD discretisation step. Below it the grid buys nothing and costs seconds: the points x = e^{jh} are
#: within 10⁻¹⁰ of each other near 1 (under 500,000 float spacings: the chords' slopes lose digits, and below
#: 2.2·10⁻¹⁶ consecutive points are equal), and any step below a mechanism's range / 2²⁰ is cut at 2²⁰ points per
#: side and doubled back up (a subnormal step: a thousand doublings, then 2-7 s per mechanism against 10 ms at 1e-4).
MIN_GRID = 1e-10


def check_grid(grid: object) -> float:
    """A PLD discretisation step in [:data:`MIN_GRID`, 0.1].

    Example:
        >>> check_grid(1e-4)
        0.0001
        >>> check_grid(1e-310)
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: grid: must be in [1e-10, 0.1], got 1e-310... Fix: pass e.g. 1e-4 (the default)...

    """
    x = _number(grid)
    if x is None or not (0 < x <= 0.1):
        raise BudgetError(f"must be in (0, 0.1], got {shown(grid)}", argument="grid", fix="pass e.g. 1e-4")
    if x < MIN_GRID:
        raise BudgetError(f"must be in [{MIN_GRID:g}, 0.1], got {shown(grid)}: a finer step is too close to the float "
                          "spacing of e^{jh} near 1 to discretise, and is coarsened anyway (seconds per mechanism)",
                          argument="grid", fix=f"pass e.g. 1e-4 (the default), or at least {MIN_GRID:g} for a "
                                               "mechanism of tiny ε")
    return x


def delta_out(value: Any) -> float:
    """A computed δ as a float in [0, 1] (NaN → 1, the vacuous bound)."""
    v = float(value)
    return 1.0 if math.isnan(v) else min(1.0, max(0.0, v))


def epsilon_out(value: Any) -> float:
    """A computed ε as a float in [0, ∞] (NaN → ∞, the vacuous bound)."""
    v = float(value)
    return math.inf if math.isnan(v) else max(0.0, v)


def rdp_out(values: Any) -> np.ndarray:
    """Computed RDP values, each in [0, ∞] (NaN → ∞)."""
    v = np.asarray(values, dtype=np.float64)
    return np.where(np.isnan(v), math.inf, np.maximum(v, 0.0))
