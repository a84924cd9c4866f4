"""f-DP: trade-off curves, the power of membership tests and μ-GDP, from any curve or standalone accountant.

``tradeoff(source, fpr)`` is a lower bound on the false-negative rate β of *any* test telling two
neighbouring datasets apart at false-positive rate α (Dong, Roth & Su 2019): the maximum of
f_{ε,δ(ε)}(α) over a grid of 4,000 ε from 0 to the ε at δ = 10⁻¹², with δ(ε) the source's privacy profile
(the max of both neighbour directions; for an accountant, its composed δ(ε)). Any pairs give a valid
bound; with the PLD's profile of a dominating pair it is the trade-off curve itself, to the grid's
resolution. ``power(source, fpr)`` = 1 − β is the most a membership-inference attack can achieve.
``gdp_mu(source)``: μ of μ-GDP — exact for (compositions of) unsampled Gaussians, μ = √(Σ (Δ/σ)²); for
anything else the smallest μ whose Gaussian profile is above the source's on the ε grid (an estimate:
not certified between grid points).

Example:
    >>> from dpframe import accounting as acc
    >>> a = acc.PLDAccountant().compose(acc.gaussian(sigma=2.0), times=4)     # μ = 1
    >>> gdp_mu(a), round(float(power(a, [0.05])[0]), 3)                         # G_1: TPR at 5% FPR
    (1.0, 0.26)

"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpframe.accounting.accountants import Accountant
from dpframe.accounting.checks import shown
from dpframe.accounting.curve import PrivacyCurve
from dpframe.accounting.numerics.common import Array
from dpframe.accounting.numerics.fdp import tradeoff_from_profile
from dpframe.accounting.numerics.profiles import hs_gaussian
from dpframe.accounting.numerics.rdp import root_sum_squares_up
from dpframe.errors import BudgetError

#: ε grid points of a trade-off curve.
GRID = 4000
#: The grid ends where δ(ε) falls below this (or at ε = 100 when it never does).
DELTA_END = 1e-12

Source = PrivacyCurve | Accountant


def _check(source: object) -> Source:
    if isinstance(source, PrivacyCurve):
        return source
    if isinstance(source, Accountant) and source.entries:
        return source
    raise BudgetError(f"expected a privacy curve or a standalone accountant with composed mechanisms, got "
                      f"{shown(source)}", argument="source",
                      fix="pass e.g. acc.gaussian(sigma=2.0) or acc.PLDAccountant().compose(curve, times=10)")


def _fpr(fpr: object) -> Array:
    try:
        a = np.atleast_1d(np.asarray(fpr, dtype=np.float64))
    except (TypeError, ValueError, OverflowError):
        a = np.array([math.nan])
    if a.ndim != 1 or a.size == 0 or not np.all((a >= 0) & (a <= 1)):
        raise BudgetError(f"false-positive rates must be numbers in [0, 1], got {shown(fpr)}", argument="fpr",
                          fix="pass e.g. [0.01, 0.05, 0.1]")
    return a


def _profile(source: Source) -> tuple[Array, Array]:
    """(ε grid, δ at each): the grid from 0 to where δ < :data:`DELTA_END` (at most ε = 100)."""
    end = source.approx_dp(DELTA_END) if isinstance(source, PrivacyCurve) else source.epsilon(DELTA_END)
    eps = np.linspace(0.0, min(end, 100.0) if math.isfinite(end) and end > 0 else 100.0, GRID)
    return eps, (_curve_deltas(source, eps) if isinstance(source, PrivacyCurve) else source.deltas(eps))


def _curve_deltas(curve: PrivacyCurve, eps: Array) -> Array:
    hs, rev = curve.profile()
    with np.errstate(all="ignore"):
        return np.asarray(np.clip(np.nan_to_num(np.maximum(hs(eps), rev(eps)), nan=1.0), 0.0, 1.0))


def tradeoff(source: Source, fpr: Sequence[float] | Array) -> Array:
    """The least false-negative rate β(α) of any test at each false-positive rate α (see the module docstring).

    Example:
        >>> from dpframe import accounting as acc
        >>> [round(float(b), 4) for b in tradeoff(acc.pure(1.0), [0.1, 0.5])]      # max(1 − e·α, (1 − α)/e)
        [0.7282, 0.1839]

    """
    src, alpha = _check(source), _fpr(fpr)
    eps, delta = _profile(src)
    return tradeoff_from_profile(eps, delta, alpha)


def power(source: Source, fpr: Sequence[float] | Array) -> Array:
    """The largest true-positive rate 1 − β(α) any membership test reaches at each false-positive rate α.

    Example:
        >>> from dpframe import accounting as acc
        >>> round(float(power(acc.laplace(scale=1.0), [0.01])[0]), 4)             # e^ε·α for small α
        0.0272

    """
    return 1 - tradeoff(source, fpr)


def gdp_mu(source: Source) -> float:
    """μ of μ-GDP: exact for compositions of unsampled Gaussians, else an estimate on the ε grid (see above).

    Example:
        >>> from dpframe import accounting as acc
        >>> gdp_mu(acc.gaussian(sigma=0.5)), round(gdp_mu(acc.laplace(scale=1.0)), 2)
        (2.0, 1.03)

    """
    src = _check(source)
    entries = [(src, 1)] if isinstance(src, PrivacyCurve) else list(src.entries)
    specs = [c.spec for c, _ in entries]
    if all(s is not None and s.get("kind") == "gaussian" and "rate" not in s for s in specs):
        return root_sum_squares_up((s["sensitivity"], s["sigma"], t)  # type: ignore[index]
                                   for (_, t), s in zip(entries, specs))
    eps, delta = _profile(src)

    def above(mu: float) -> bool:
        return bool(np.all(hs_gaussian(mu)(eps) >= delta - 1e-15))

    lo, hi = 0.0, 1.0
    while not above(hi):
        lo, hi = hi, hi * 2
        if hi > 1e6:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if above(mid) else (mid, hi)
    return hi
