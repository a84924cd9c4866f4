"""Calibration: the smallest noise, the largest ε per step or the most steps that meet a target (ε, δ).

Each function searches a one-parameter family of mechanisms with an accountant (default: the PLD) and
returns a value **whose own accounting was checked against the target**: the search keeps a bracket
[fails, meets] and returns its *meeting* end, so rounding always goes toward privacy (more noise, a smaller
ε per step, fewer steps). The accountants' ε(δ) are upper bounds of the true ε, so the guarantee holds for
the returned value whatever the accountant's numerics; they only decide how close to optimal it is. The
family is assumed monotone (more noise, a smaller ε per step or fewer steps never cost more); where an
accountant's discretisation is not, the answer is still valid, just possibly not the optimum.

The curve functions receive public values only (a candidate noise, ε or step count), never data.

Example (ten pure releases under basic composition: ε₀ = 0.1 each, rounded down)::

    >>> from dpframe import accounting as acc
    >>> e0 = largest_epsilon(acc.pure, 1.0, 1e-5, steps=10, accountant=acc.BasicAccountant)
    >>> 0.09999 < e0 <= 0.1
    True

"""

from __future__ import annotations

import math
from collections.abc import Callable

from dpframe.accounting.accountants import Accountant
from dpframe.accounting.checks import check_delta, check_times, positive, shown
from dpframe.accounting.curve import PrivacyCurve
from dpframe.accounting.pld import PLDAccountant
from dpframe.errors import BudgetError

#: The widest search range of a noise or per-step ε parameter.
LIMITS = (1e-12, 1e12)
#: The most steps :func:`most_steps` considers.
MAX_STEPS = 1 << 40


def _meets(curve: Callable[[float], PrivacyCurve], x: float, steps: int, epsilon: float, delta: float,
           accountant: Callable[[], Accountant]) -> bool:
    try:
        c = curve(x)
    except Exception as e:
        raise BudgetError(f"the curve function raised {type(e).__name__}: {e} at {x!r}", argument="curve",
                          fix="make it return a privacy curve for every candidate, e.g. acc.gaussian(sigma=x)") from e
    if not isinstance(c, PrivacyCurve):
        raise BudgetError(f"the curve function returned {shown(c)} for {x!r}, not a privacy curve",
                          argument="curve", fix="return e.g. acc.gaussian(sigma=x)")
    return accountant().compose(c, times=steps).epsilon(delta) <= epsilon


def _check(epsilon: object, delta: object, tolerance: object, accountant: object) -> tuple[float, float, float]:
    """The target (ε, δ) and tolerance as floats, checked, and the accountant class (BudgetError otherwise)."""
    e = positive(epsilon, "epsilon", "pass the target ε > 0")
    if not math.isfinite(e):
        raise BudgetError(f"the target ε must be finite, got {shown(epsilon)}", argument="epsilon",
                          fix="pass a finite target such as 1.0")
    d = check_delta(delta)
    t = positive(tolerance, "tolerance", "pass a relative tolerance such as 1e-3")
    if not callable(accountant):
        raise BudgetError(f"expected an accountant class, got {shown(accountant)}", argument="accountant",
                          fix="pass e.g. acc.PLDAccountant or acc.RDPAccountant")
    return e, d, t


def _check_function(curve: object, example: str) -> None:
    """A BudgetError naming ``curve`` unless it is a function (of one candidate value, returning a curve)."""
    if not callable(curve) or isinstance(curve, PrivacyCurve):
        raise BudgetError(f"expected a function of the candidate value that returns a privacy curve, got "
                          f"{shown(curve)}", argument="curve", fix=f"pass e.g. lambda x: {example}")


def _search(meets: Callable[[float], bool], grows_private: bool, tolerance: float, what: str) -> float:
    """The meeting end of a bracket [fails, meets] at most a factor 1 + tolerance wide (bisection in log x)."""
    lo, hi = LIMITS
    start = 1.0
    if meets(start):
        good, step = start, (1 / 2 if grows_private else 2.0)
    else:
        bad, step = start, (2.0 if grows_private else 1 / 2)
        good = math.nan
    # walk from 1 until the answer changes (doubling or halving), keeping the last of each kind
    x = start
    while True:
        nxt = x * step
        if not lo <= nxt <= hi:
            if math.isnan(good):
                raise BudgetError(f"no {what} in [{lo:g}, {hi:g}] meets the target", argument="epsilon",
                                  fix="ask for a larger ε or δ, or fewer steps")
            return good
        if math.isnan(good):
            if meets(nxt):
                good = nxt
                break
            bad = nxt
        elif meets(nxt):
            good = nxt
        else:
            bad = nxt
            break
        x = nxt
    while max(good, bad) / min(good, bad) > 1 + tolerance:
        mid = math.sqrt(good * bad)
        if meets(mid):
            good = mid
        else:
            bad = mid
    return good


def smallest_noise(curve: Callable[[float], PrivacyCurve], epsilon: float, delta: float, *, steps: int = 1,
                   accountant: Callable[[], Accountant] = PLDAccountant, tolerance: float = 1e-4) -> float:
    """The smallest noise x (σ, a Laplace scale, ...) whose ``steps`` runs of ``curve(x)`` meet (ε, δ).

    Returned within a factor 1 + ``tolerance`` of the optimum and on its safe side (checked: the
    accountant's ε at ``delta`` is at most ``epsilon``). Sampling goes in the curve:
    ``lambda s: acc.gaussian(sigma=s).subsampled(rate=0.01)``. ``curve`` receives public values only (the
    candidate noise); ``accountant`` receives no values (it builds a fresh standalone accountant).

    Example:
        >>> from dpframe import accounting as acc
        >>> sgm = lambda s: acc.gaussian(s).subsampled(0.01)
        >>> round(smallest_noise(sgm, 1.0, 1e-5, steps=1000, accountant=acc.RDPAccountant, tolerance=1e-3), 2)
        1.51

    """
    _check_function(curve, "acc.gaussian(sigma=x)")
    e, d, t = _check(epsilon, delta, tolerance, accountant)
    n = check_times(steps)
    return _search(lambda x: _meets(curve, x, n, e, d, accountant), True, t, "noise")


def largest_epsilon(curve: Callable[[float], PrivacyCurve], epsilon: float, delta: float, *, steps: int = 1,
                    accountant: Callable[[], Accountant] = PLDAccountant, tolerance: float = 1e-4) -> float:
    """The largest per-step ε₀ whose ``steps`` runs of ``curve(ε₀)`` meet (ε, δ).

    ``curve`` is e.g. ``lambda e: acc.laplace(scale=1 / e)`` or ``acc.pure``; the result is within a factor
    1 + ``tolerance`` of the optimum, on the safe (smaller) side. ``curve`` receives public values only (the
    candidate ε₀); ``accountant`` receives no values.

    Example:
        >>> from dpframe import accounting as acc
        >>> round(largest_epsilon(lambda e: acc.laplace(scale=1 / e), 1.0, 1e-5, steps=100, tolerance=1e-3), 3)
        0.027

    """
    _check_function(curve, "acc.laplace(scale=1 / e)")
    e, d, t = _check(epsilon, delta, tolerance, accountant)
    n = check_times(steps)
    return _search(lambda x: _meets(curve, x, n, e, d, accountant), False, t, "per-step ε")


def most_steps(curve: PrivacyCurve, epsilon: float, delta: float, *,
               accountant: Callable[[], Accountant] = PLDAccountant) -> int:
    """The most runs of ``curve`` that meet (ε, δ) (0 when one run does not), by doubling then bisection.

    ``accountant`` receives no values (it builds a fresh standalone accountant).

    Example:
        >>> from dpframe import accounting as acc
        >>> most_steps(acc.gaussian(sigma=10.0), 1.0, 1e-5)
        7

    """
    if not isinstance(curve, PrivacyCurve):
        raise BudgetError(f"expected a privacy curve, got {shown(curve)}", argument="curve",
                          fix="pass e.g. acc.gaussian(sigma=10.0)")
    e, d, _ = _check(epsilon, delta, 1.0, accountant)

    def meets(n: int) -> bool:
        return accountant().compose(curve, times=n).epsilon(d) <= e

    if not meets(1):
        return 0
    good, bad = 1, 2
    while meets(bad):
        good, bad = bad, bad * 2
        if bad > MAX_STEPS:
            return good
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if meets(mid) else (good, mid)
    return good
