"""Budgets: exact numbers, validation, composition, sound conversions (dpframe/budgets.py)."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar
from scipy.stats import norm

import dpframe as dp
from dpframe import budgets as B


class _Opaque:
    """An object that is no number and no string (with a stable repr for test ids)."""

    def __repr__(self) -> str:
        return "<opaque>"


# ------------------------------------------------------------------------------------- exact numbers


@pytest.mark.parametrize("given, exact", [
    (0.1, Fraction(1, 10)),
    (1e-6, Fraction(1, 10**6)),
    (0.3, Fraction(3, 10)),
    (2, Fraction(2)),
    (Fraction(1, 3), Fraction(1, 3)),
])      # text ("0.25", "1/3") is refused, as clipping bounds refuse it: tests/adversarial/test_review50b.py
def test_numbers_are_read_as_exact_fractions(given: object, exact: Fraction) -> None:
    assert dp.PureDP(given).epsilon == exact
    assert dp.ApproxDP(given, given if exact < 1 else 0).epsilon == exact
    assert dp.ZCDP(given).rho == exact
    assert isinstance(dp.PureDP(given).epsilon, Fraction)


def test_float_sum_is_exact_not_binary() -> None:
    # 0.1 + 0.2 != 0.3 in binary floating point; budgets are decimal-exact.
    assert dp.PureDP(0.1) + dp.PureDP(0.2) == dp.PureDP(0.3)
    assert (dp.PureDP(0.1) + dp.PureDP(0.2)).epsilon == Fraction(3, 10)


def test_delta_is_exact() -> None:
    assert dp.ApproxDP(1, 1e-6).delta == Fraction(1, 10**6)
    assert dp.ZCDP(1, 1e-7).delta == Fraction(1, 10**7)
    assert dp.ApproxDP(1).delta == 0
    assert dp.ZCDP(1).delta == 0


def test_budgets_are_frozen_hashable_and_compare_by_value() -> None:
    a, b = dp.PureDP(0.5), dp.PureDP(Fraction(1, 2))
    assert a == b and hash(a) == hash(b)
    assert dp.PureDP(0.5) != dp.ApproxDP(0.5)            # different notions are different budgets
    with pytest.raises(AttributeError):
        a.epsilon = Fraction(1)  # type: ignore[misc]
    assert {a, b} == {a}


def test_repr_and_describe() -> None:
    assert repr(dp.PureDP(0.5)) == "PureDP(epsilon=1/2)"
    assert repr(dp.ApproxDP(1, 1e-6)) == "ApproxDP(epsilon=1, delta=1e-06)"
    assert repr(dp.ZCDP(0.125)) == "ZCDP(rho=1/8)"
    assert repr(dp.ZCDP(0.125, 1e-7)) == "ZCDP(rho=1/8, delta=1e-07)"
    assert B.describe(dp.PureDP(2)) == "ε=2"
    assert B.describe(dp.ApproxDP(1, 1e-6)) == "ε=1, δ=1e-06"
    assert B.describe(dp.ZCDP(0.5)) == "ρ=1/2"
    assert B.describe(dp.ZCDP(0.5, 1e-7)) == "ρ=1/2, δ=1e-07"


# ---------------------------------------------------------------------------------------- validation

BAD_POSITIVE = [0, 0.0, -1, -0.5, -0.0, float("nan"), float("inf"), float("-inf"), "abc", "", "1/0", None,
                True, False, [1], _Opaque(), "nan", "inf", complex(1, 0)]


@pytest.mark.parametrize("value", BAD_POSITIVE, ids=repr)
@pytest.mark.parametrize("build, argument", [
    (lambda v: dp.PureDP(v), "epsilon"),
    (lambda v: dp.ApproxDP(v, 1e-6), "epsilon"),
    (lambda v: dp.ZCDP(v), "rho"),
])
def test_bad_first_coordinate_raises_budget_error_naming_it(build, argument: str, value: object) -> None:
    with pytest.raises(dp.BudgetError) as info:
        build(value)
    assert info.value.argument == argument
    assert str(info.value).startswith(f"{argument}:")
    assert info.value.fix  # every error says how to fix it


BAD_DELTA = [-1e-9, -1, 1, 1.0, 1.5, 2, float("nan"), float("inf"), "abc", True, None, [0.1]]


@pytest.mark.parametrize("value", BAD_DELTA, ids=repr)
@pytest.mark.parametrize("build", [lambda d: dp.ApproxDP(1, d), lambda d: dp.ZCDP(1, d)],
                         ids=["approx", "zcdp"])
def test_bad_delta_raises_budget_error_naming_delta(build, value: object) -> None:
    with pytest.raises(dp.BudgetError) as info:
        build(value)
    assert info.value.argument == "delta"


def test_budget_errors_are_value_errors_and_dpframe_errors() -> None:
    with pytest.raises(ValueError):
        dp.PureDP(-1)
    with pytest.raises(dp.DPFrameError):
        dp.ApproxDP(1, 1)


def test_delta_just_below_one_and_zero_are_accepted() -> None:
    assert dp.ApproxDP(1, 0).delta == 0
    assert dp.ApproxDP(1, 0.999999).delta == Fraction(999999, 10**6)


@pytest.mark.parametrize("value", [np.int64(1), np.float32(0.5)], ids=["int64", "float32"])
def test_numpy_scalars_are_accepted(value: object) -> None:
    assert dp.PureDP(value).epsilon == Fraction(str(value))


# --------------------------------------------------------------------------------------- composition


def test_addition_is_exact_in_each_notion() -> None:
    assert dp.PureDP(0.5) + dp.PureDP(0.25) == dp.PureDP(0.75)
    s = dp.ApproxDP(1, 1e-6) + dp.ApproxDP(0.5, 2e-6)
    assert (s.epsilon, s.delta) == (Fraction(3, 2), Fraction(3, 10**6))
    z = dp.ZCDP(0.125, 1e-7) + dp.ZCDP(0.25)
    assert (z.rho, z.delta) == (Fraction(3, 8), Fraction(1, 10**7))


def test_pure_plus_approx_never_drops_delta() -> None:
    # Mixed notions are refused rather than silently dropping δ; convert explicitly instead.
    with pytest.raises(TypeError):
        dp.PureDP(1) + dp.ApproxDP(1, 1e-6)
    total = dp.PureDP(1).to_approx() + dp.ApproxDP(1, 1e-6)
    assert total.delta == Fraction(1, 10**6)


@pytest.mark.parametrize("a, b", [
    (dp.ApproxDP(1, 1e-6), dp.PureDP(1)),
    (dp.PureDP(1), dp.ZCDP(1)),
    (dp.ZCDP(1), dp.PureDP(1)),
    (dp.ApproxDP(1, 1e-6), dp.ZCDP(1)),
    (dp.PureDP(1), 1),
], ids=["approx+pure", "pure+zcdp", "zcdp+pure", "approx+zcdp", "pure+int"])
def test_mixed_notion_addition_is_a_clear_error(a: object, b: object) -> None:
    with pytest.raises((TypeError, dp.DPFrameError)):
        a + b  # type: ignore[operator]


# --------------------------------------------------------------------------------------- conversions


@pytest.mark.parametrize("eps", [Fraction(1), Fraction(1, 10), Fraction(3), Fraction(7, 3)])
def test_pure_to_zcdp_is_eps_squared_over_two(eps: Fraction) -> None:
    z = dp.PureDP(eps).to_zcdp()
    assert isinstance(z, dp.ZCDP)
    assert z.rho == eps * eps / 2 and z.delta == 0
    assert B.convert(dp.PureDP(eps), "zcdp") == z


def test_pure_to_approx_and_approx_with_zero_delta() -> None:
    a = dp.PureDP(0.5).to_approx()
    assert (type(a), a.epsilon, a.delta) == (dp.ApproxDP, Fraction(1, 2), 0)
    assert B.convert(dp.PureDP(0.5), "approx") == a
    # (ε, 0)-DP is pure ε-DP, so it converts to pure and zCDP exactly.
    assert B.convert(dp.ApproxDP(0.5, 0), "pure") == dp.PureDP(0.5)
    assert B.convert(dp.ApproxDP(0.5, 0), "zcdp") == dp.ZCDP(Fraction(1, 8))


def test_convert_to_same_notion_is_identity() -> None:
    for b in (dp.PureDP(1), dp.ApproxDP(1, 1e-6), dp.ZCDP(1, 1e-7)):
        assert B.convert(b, b.notion) is b


@pytest.mark.parametrize("budget, notion", [
    (dp.ApproxDP(1, 1e-6), "pure"),
    (dp.ApproxDP(1, 1e-6), "zcdp"),
    (dp.ZCDP(1), "approx"),
    (dp.ZCDP(1), "pure"),
    (dp.ZCDP(1, 1e-7), "approx"),
])
def test_unsound_conversions_are_refused(budget: dp.Budget, notion: str) -> None:
    with pytest.raises(dp.BudgetConversionError) as info:
        B.convert(budget, notion, argument="budget")  # type: ignore[arg-type]
    assert info.value.argument == "budget"
    assert info.value.fix


def test_zcdp_to_approx_needs_a_positive_delta() -> None:
    for bad in (0, -1e-6, 1, float("nan")):
        with pytest.raises(dp.BudgetError) as info:
            dp.ZCDP(1).to_approx(bad)
        assert info.value.argument == "delta"
    with pytest.raises(dp.BudgetError):
        dp.ZCDP(1, 0.5).to_approx(0.5)  # δ₀ + δ = 1


# ρ-zCDP → (ε, δ): the CKS20 (Cor. 13) conversion. Reference values are computed here independently from
# the closed form ε(α) = αρ + (ln(1/δ) + (α−1)ln(1−1/α) − ln α)/(α−1), minimised over α > 1.


def _cks_reference(rho: float, delta: float) -> float:
    def f(a: np.ndarray | float) -> np.ndarray | float:
        return a * rho + (np.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)

    grid = np.exp(np.linspace(np.log(1 + 1e-9), np.log(1e9), 100_001))
    values = f(grid)
    i = int(np.argmin(values))
    res = minimize_scalar(f, bounds=(grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]), method="bounded",
                          options={"xatol": 1e-13})
    return max(0.0, min(float(values[i]), float(res.fun)))


def _gaussian_delta(eps: float, rho: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism that is exactly ρ-zCDP (μ = Δ/σ = √(2ρ))."""
    mu = math.sqrt(2 * rho)
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)))


@cache
def _converted(rho: float, delta: float) -> float:
    out = dp.ZCDP(rho).to_approx(delta)
    assert isinstance(out, dp.ApproxDP) and out.delta == Fraction(repr(delta))
    return float(out.epsilon)


CASES = [(0.5, 1e-6), (0.01, 1e-5), (1.0, 1e-10), (2.0, 1e-3), (1e-4, 1e-8), (10.0, 1e-6)]


@pytest.mark.parametrize("rho, delta", CASES)
def test_zcdp_to_approx_is_at_most_the_classic_bound(rho: float, delta: float) -> None:
    assert _converted(rho, delta) <= rho + 2 * math.sqrt(rho * math.log(1 / delta))


@pytest.mark.parametrize("rho, delta", CASES)
def test_zcdp_to_approx_never_under_reports_the_gaussian(rho: float, delta: float) -> None:
    # A ρ-zCDP Gaussian mechanism exists; any sound conversion must give an ε at which it is (ε, δ)-DP.
    eps = _converted(rho, delta)
    assert _gaussian_delta(eps, rho) <= delta
    # ... and the conversion is not absurdly loose either: the Gaussian needs most of that ε.
    assert _gaussian_delta(0.8 * eps, rho) > delta * 1e-3


@pytest.mark.parametrize("rho, delta", CASES)
def test_zcdp_to_approx_matches_cks20_and_rounds_up(rho: float, delta: float) -> None:
    ref = _cks_reference(rho, delta)
    eps = _converted(rho, delta)
    assert eps >= ref * (1 - 1e-12)                 # rounded up: never below the formula's infimum
    assert eps <= ref * (1 + 1e-6) + 1e-9           # ... but only by a hair


def test_zcdp_to_approx_documented_value() -> None:
    assert round(_converted(0.5, 1e-6), 3) == 5.222
    assert B.zcdp_delta(Fraction(1, 2), Fraction(_converted(0.5, 1e-6))) <= 1e-6 * (1 + 1e-9)


def test_approximate_zcdp_adds_its_delta() -> None:
    out = dp.ZCDP(0.5, 1e-7).to_approx(1e-6)
    assert out.delta == Fraction(1, 10**7) + Fraction(1, 10**6)
    assert float(out.epsilon) == pytest.approx(_converted(0.5, 1e-6), rel=1e-9)


def test_zcdp_epsilon_is_monotone() -> None:
    assert _converted(0.5, 1e-6) < _converted(1.0, 1e-10)
    assert B.zcdp_epsilon(Fraction(1, 2), Fraction(1, 10**5)) < B.zcdp_epsilon(Fraction(1, 2), Fraction(1, 10**6))
    assert B.zcdp_epsilon(Fraction(0), Fraction(1, 10**6)) == 0


def test_make_and_zero() -> None:
    assert B.zero("pure") == B.make("pure", Fraction(0))
    assert B.zero("approx").delta == 0 and B.zero("approx").epsilon == 0
    assert B.make("zcdp", Fraction(1, 2), Fraction(1, 10)).delta == Fraction(1, 10)


@settings(max_examples=40, deadline=None)
@given(rho=st.floats(min_value=1e-4, max_value=50), log10_delta=st.floats(min_value=-12, max_value=-2))
def test_zcdp_to_approx_property(rho: float, log10_delta: float) -> None:
    """For random (ρ, δ): Gaussian-sound, never above the classic bound, and within 1e-6 of CKS20."""
    delta = float(f"{10 ** log10_delta:.3g}")
    eps = float(dp.ZCDP(rho).to_approx(delta).epsilon)
    assert _gaussian_delta(eps, rho) <= delta * (1 + 1e-9)
    assert eps <= rho + 2 * math.sqrt(rho * math.log(1 / delta))
    ref = _cks_reference(rho, delta)
    assert ref * (1 - 1e-12) <= eps <= ref * (1 + 1e-6) + 1e-9


# (ε, δ) → the largest ρ: the inverse of the CKS20 conversion (calibration of zCDP mechanisms to (ε, δ) shares).
INVERSE_CASES = [(1.0, 1e-6), (0.15, 1e-6), (1.0, 1 / 4586), (0.01, 1e-9), (8.0, 1e-5), (50.0, 1e-7)]


@pytest.mark.parametrize("eps, delta", INVERSE_CASES)
def test_zcdp_rho_is_the_largest_rho_the_cks20_conversion_fits(eps: float, delta: float) -> None:
    rho = float(B.zcdp_rho(Fraction(repr(eps)), Fraction(repr(delta))))
    assert _cks_reference(rho, delta) <= eps                       # fits, by the independent reference ...
    assert _cks_reference(rho * (1 + 1e-5), delta) > eps           # ... and is the largest, to 1e-5
    assert _gaussian_delta(eps, rho) <= delta                      # sound for the Gaussian that is exactly ρ-zCDP
    classic = (math.sqrt(math.log(1 / delta) + eps) - math.sqrt(math.log(1 / delta))) ** 2
    assert rho >= classic                                          # never below ρ + 2√(ρ ln 1/δ) = ε's root


def test_documented_conversion_gains() -> None:
    """PATE at the paper's setting (600 queries, δ' = 4e-7): classic ρ + 2√(ρ ln 1/δ') vs CKS20 (docs/topk.md)."""
    for rho, classic, optimal in ((61 / 300, 3.665, 3.278), (61 / 75, 7.736, 7.124)):
        assert rho + 2 * math.sqrt(rho * math.log(1 / 4e-7)) == pytest.approx(classic, abs=1e-3)
        assert _cks_reference(rho, 4e-7) == pytest.approx(optimal, abs=1e-3)
    # calibration: the ρ an (ε, δ) = (1, 1e-6) share buys, classic 0.01747 → optimal 0.02436 (+39 %)
    assert float(B.zcdp_rho(Fraction(1), Fraction(1, 10**6))) == pytest.approx(0.02436, abs=1e-5)
