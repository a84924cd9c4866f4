"""Extreme and ill-typed input to the accounting API: a correct (finite where it can be) result or a dpframe error.

Audit findings F-accounting-curve-inputs, F-core-budget-overflow, F-accounting-pld-step-memory and
F-accounting-sample-overflow. Results are checked for soundness, not only for being well-formed: a zCDP
conversion is checked against an order α that witnesses it, PLD results against closed forms.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.numerics.pld import LOSS_MAX
from dpframe.accounting.numerics.subsampling import MAX_SUBSAMPLED_ORDER, unamplified_epsilon


def cks_log_delta(am1: np.ndarray, rho: float, eps: float) -> np.ndarray:
    """log δ of the CKS20 (Cor. 13) conversion at orders α = 1 + am1, written to stay exact for tiny am1."""
    alpha = 1 + am1
    with np.errstate(all="ignore"):
        return am1 * ((rho - eps) + am1 * rho + np.log(am1)) - alpha * np.log1p(am1)


def witnessed(rho: float, eps: float, delta: float | Fraction) -> bool:
    """Whether some order α proves that ρ-zCDP implies (ε, δ)-DP (any α gives a valid bound)."""
    from scipy.optimize import minimize_scalar

    logs = np.linspace(-200 * math.log(10), 200 * math.log(10), 40_001)      # log(α − 1)
    values = cks_log_delta(np.exp(logs), rho, eps)
    i = int(np.nanargmin(values))
    lo, hi = logs[max(i - 1, 0)], logs[min(i + 1, len(logs) - 1)]
    res = minimize_scalar(lambda t: float(cks_log_delta(np.exp(np.array([t])), rho, eps)[0]), bounds=(lo, hi),
                          method="bounded", options={"xatol": 1e-12})
    exact = delta if isinstance(delta, Fraction) else Fraction(repr(delta))   # as budgets read it (1e-320 ≠ float)
    return min(float(values[i]), float(res.fun)) <= math.log(exact.numerator) - math.log(exact.denominator)


# ------------------------------------------------------------------------------ budgets (F-core-budget-overflow)
@pytest.mark.parametrize("rho, d0, delta", [
    (7e16, 1e-159, 1e-159), (5e-324, 5e-324, 5e-324), (0.5, 0, 1e-6), (1e-300, 0, 0.5), (1e12, 0, 1e-300),
    (3.0, 0.25, 1e-10), (1e-10, 0, 1e-320),
])
def test_zcdp_to_approx_is_sound_at_the_extremes(rho: float, d0: float, delta: float) -> None:
    out = dp.ZCDP(rho, d0).to_approx(delta)
    assert out.delta == Fraction(repr(d0)) + Fraction(repr(delta))
    eps = float(out.epsilon)
    assert math.isfinite(eps) and eps > 0
    assert witnessed(rho, eps, delta)                                   # never under-reports
    standard = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    assert eps <= standard * (1 + 1e-12) + 3e-12                      # never above the standard bound
    assert repr(out).startswith("ApproxDP(")


def test_zcdp_to_approx_beyond_floats_is_the_exact_standard_bound() -> None:
    out = dp.ZCDP(10**400).to_approx(Fraction(1, 10**500))
    root = math.isqrt(int(10**400 * Fraction(500 * math.log(10))))
    assert out.epsilon >= 10**400 + 2 * root                    # ρ + 2√(ρ log 1/δ), rounded up
    assert out.epsilon <= 10**400 + 2 * root * Fraction(1_000_000_001, 10**9)   # the margin on log(1/δ) only
    assert "e+400" in repr(out) and repr(dp.PureDP(Fraction(10**401 + 1, 7919))) == "PureDP(epsilon=1.26279e+397)"
    assert float(dp.ZCDP(7e16).to_approx(1e-6).epsilon) > 7e16


def test_zcdp_delta_never_overflows() -> None:
    from dpframe.budgets import zcdp_delta

    assert zcdp_delta(Fraction(10**400), Fraction(1)) == 1.0
    assert zcdp_delta(Fraction(7e16), Fraction(1)) == 1.0
    assert zcdp_delta(Fraction(1, 2), Fraction(10**400)) == 0.0
    assert 0 < zcdp_delta(Fraction(1, 2), Fraction(5)) < 1e-5


# ------------------------------------------------------------------------- curves (F-accounting-curve-inputs)
@pytest.mark.parametrize("call, argument", [
    (lambda: acc.laplace(10**400), "scale"),
    (lambda: acc.laplace(1e-320), "scale"),
    (lambda: acc.laplace(1e300, sensitivity=1e-300), "scale"),
    (lambda: acc.gaussian(1e-320), "sigma"),
    (lambda: acc.gaussian(float("inf")), "sigma"),
    (lambda: acc.gaussian("1"), "sigma"),
    (lambda: acc.laplace(0.5).delta_at(None), "epsilon"),
    (lambda: acc.laplace(0.5).delta_at(-1.0), "epsilon"),
    (lambda: acc.randomized_response(0.6224593).delta_at(float("nan")), "epsilon"),
    (lambda: acc.laplace(0.5).approx_dp([1]), "delta"),
    (lambda: acc.laplace(0.5).approx_dp(float("nan")), "delta"),
    (lambda: acc.laplace(0.5).rdp_at("2"), "alpha"),
    (lambda: acc.laplace(0.5).rdp_at([[2.0, 3.0], [4.0]]), "alpha"),
    (lambda: acc.laplace(0.5).rdp_at([10**400]), "alpha"),
    (lambda: acc.laplace(0.5).subsampled(float("nan")), "rate"),
    (lambda: acc.laplace(0.5).subsampled("0.5"), "rate"),
    (lambda: acc.zcdp(1.0, delta0=float("nan")), "delta"),
    (lambda: acc.approx(1.0, 1.0), "delta"),
    (lambda: acc.randomized_response(1.0), "p"),
    (lambda: acc.randomized_response(epsilon=-1.0), "epsilon"),
    (lambda: acc.discrete_laplace(1.0, sensitivity=2**60), "sensitivity"),
    (lambda: acc.threshold_test(1.0, float("nan"), 0, 5), "threshold"),
    (lambda: acc.threshold_test(1.0, 3.0, 0, 10**7), "upper"),
    (lambda: acc.threshold_test(1.0, 3.0, 5, 2), "lower"),
    (lambda: acc.from_profile("not a function"), "delta"),
    (lambda: acc.from_profile(lambda e: "x").delta_at(1.0), "delta"),
    (lambda: acc.from_rdp(lambda a: 1.0, eps_inf=float("nan")), "eps_inf"),
    (lambda: acc.from_rdp(lambda a: 1.0, label=3), "label"),
    (lambda: acc.composition([acc.laplace(1.0), acc.pure(1.0)], grid=0), "grid"),
    (lambda: acc.composition("ab"), "curves"),
    (lambda: acc.from_json(None), "text"),
    (lambda: acc.from_json(b"{}"), "text"),
    (lambda: acc.from_json("not json"), "text"),
    (lambda: acc.from_json("[1, 2]"), "text"),
    (lambda: acc.from_json('{"kind": "gaussian"}'), "text"),
    (lambda: acc.from_json('{"kind": "gaussian", "sigma": 1.0, "rate": "x"}'), "text"),
    (lambda: acc.from_json('{"kind": "gaussian", "sigma": 1.0, "rate": 1e999}'), "rate"),
    (lambda: acc.from_json('{"kind": "gaussian", "sigma": 1.0, "colour": 1}'), "text"),
    (lambda: acc.from_json("[" * 100_000 + "]" * 100_000), "text"),
    (lambda: acc.smallest_noise(None, 1.0, 1e-6), "curve"),
    (lambda: acc.largest_epsilon(acc.pure(1.0), 1.0, 1e-6), "curve"),
    (lambda: acc.largest_epsilon(lambda e: 1 / 0, 1.0, 1e-6), "curve"),
    (lambda: acc.tradeoff(acc.pure(1.0), 10**400), "fpr"),
    (lambda: acc.power(acc.pure(1.0), [0.1, 10**400]), "fpr"),
])
def test_bad_curve_arguments_are_dpframe_errors(call, argument: str) -> None:
    with pytest.raises(dp.BudgetError) as info:
        call()
    assert info.value.argument == argument and info.value.fix
    assert len(str(info.value)) < 400


def test_numbers_of_every_kind_are_read() -> None:
    ref = acc.laplace(2.0).eps_inf
    for scale in (2, Fraction(2), Decimal("2"), np.float32(2.0), np.int64(2)):
        assert acc.laplace(scale).eps_inf == ref
    assert acc.laplace(0.5).delta_at(Fraction(1, 3)) == acc.laplace(0.5).delta_at(1 / 3)


def test_extreme_curves_give_finite_sound_values() -> None:
    # δ of a hopeless mechanism (μ = 4.5e15) sampled at 1e-300 is ≈ the rate, not NaN
    assert acc.gaussian(2, 9e15).subsampled(1e-300).delta_at(2776) == pytest.approx(1e-300, rel=1e-9)
    assert acc.exponential(80).delta_at(0) == 1.0
    # α(ε²/2) ≈ 10⁻⁶⁰⁰ is below the least float: rounded up to a few of them, not to 0 (review 53a)
    assert all(0 < v < 1e-320 for v in acc.pure(1e-300).rdp_at([2, 8]).tolist())
    rr = acc.randomized_response(epsilon=1000.0)             # p rounds to 1: built from ε
    assert rr.eps_inf == 1000.0 and rr.delta_at(999.0) > 0.6 and rr.delta_at(1000.0) == 0.0
    from dpframe.accounting import from_json

    assert from_json(rr.to_json()).eps_inf == 1000.0
    lap = acc.laplace(1e-5)                                  # ε = 1e5
    assert lap.approx_dp(0.5) == pytest.approx(1e5 - 2 * math.log(2), rel=1e-9)
    assert acc.exponential(1e5).delta_at(5e4) == pytest.approx(1.0)
    assert acc.discrete_laplace(1e-3, 5).delta_at(4999.0) == pytest.approx(1 - math.exp(-1))   # the atom at 5000
    g = acc.gaussian(1e-200)                                 # μ = 1e200: ρ overflows to a vacuous +∞
    assert g.rdp_at([2.0])[0] == math.inf and g.delta_at(1e6) == 1.0
    assert acc.ZCDPAccountant().compose(g).epsilon(1e-6) == math.inf
    assert acc.ZCDPAccountant().compose(g).delta(1.0) == 1.0
    bad = acc.from_rdp(lambda a: float("nan") if a > 5 else -1.0)   # user curve: NaN → ∞, negative → 0
    assert bad.rdp_at([2.0, 8.0]).tolist() == [0.0, math.inf]
    assert acc.from_profile(lambda e: float("nan")).delta_at(1.0) == 1.0


@pytest.mark.parametrize(("curve", "argument"), [
    (lambda: acc.from_rdp(lambda a: 1 / (a - a)), "rdp"),                 # ZeroDivisionError inside the function
    (lambda: acc.from_profile(lambda e: math.exp(1e6 * e)), "delta"),     # OverflowError inside the function
])
def test_a_user_function_that_raises_becomes_a_budget_error(curve: Any, argument: str) -> None:
    with pytest.raises(dp.BudgetError) as info:
        curve().approx_dp(1e-6)
    assert info.value.argument == argument and "raised" in str(info.value)
    assert info.value.__cause__ is not None                                # the user's own exception is kept


def test_subsampled_rdp_beyond_the_term_limit_uses_the_unsampled_curve() -> None:
    g = acc.discrete_gaussian(1.0)                  # (the continuous Gaussian's series is exact at any order)
    s = g.subsampled(0.01)
    high = 2.5 * MAX_SUBSAMPLED_ORDER
    assert s.rdp_at([high])[0] == g.rdp_at([high])[0]                       # valid: sampling never hurts
    exact = acc.gaussian(1.0).subsampled(0.01).rdp_at([high])[0]            # ≈ α/2 + α·log(γ)/(α − 1)
    assert exact == pytest.approx(high / 2 + high * math.log(0.01) / (high - 1), rel=1e-6)
    p = acc.pure(1.0).subsampled(0.01)
    assert p.rdp_at([high])[0] == pytest.approx(math.log1p(0.01 * math.expm1(1.0)))   # the pure-DP cap


def test_inverse_amplification_is_finite_for_any_epsilon() -> None:
    e = np.array([0.0, 1e-20, 0.5, 700.0, 1e5, 1e300])
    for rate in (1e-300, 0.01, 0.999):
        v = unamplified_epsilon(e, rate)
        assert np.all(np.isfinite(v)) and np.all(np.diff(v) >= 0)
        with np.errstate(over="ignore"):
            small = np.log1p(np.expm1(e[:3]) / rate)
        assert v[:3] == pytest.approx(small, rel=1e-12, abs=1e-300) if rate > 1e-200 else True
    assert unamplified_epsilon(np.array([1000.0]), 0.01)[0] == pytest.approx(1000 + math.log(100))


# ----------------------------------------------------------------------------------------- accountants
@pytest.mark.parametrize("call, argument", [
    (lambda: acc.BasicAccountant(dp.PureDP(1)).charge("x"), "cost"),
    (lambda: acc.RDPAccountant(dp.ApproxDP(1, 1e-6)).charge(None), "cost"),
    (lambda: acc.BasicAccountant(dp.PureDP(1)).charge_plan(dp.PureDP(1), "curves"), "curves"),
    (lambda: acc.BasicAccountant(dp.PureDP(1)).charge_plan(dp.PureDP(1), None, rate=float("nan")), "rate"),
    (lambda: acc.RDPAccountant(dp.ApproxDP(1, 1e-6)).charge_plan(dp.PureDP(1), [acc.pure(1)], 2.0), "rate"),
    (lambda: acc.BasicAccountant(dp.PureDP(1)).compose(["x"]), "charges"),
    (lambda: acc.BasicAccountant(dp.PureDP(1)).compose([dp.ZCDP(1)]), "charges"),
    (lambda: acc.BasicAccountant(dp.PureDP(1)).compose(3), "charges"),
    (lambda: acc.RDPAccountant(dp.ApproxDP(1, 1e-6)).compose([dp.PureDP(1)]), "charges"),
    (lambda: acc.BasicAccountant(dp.PureDP(1)).fits("x"), "spent"),
    (lambda: acc.RDPAccountant(dp.ApproxDP(1, 1e-6)).fits(None), "spent"),
    (lambda: acc.ZCDPAccountant(dp.ZCDP(1)).remaining(1), "spent"),
    (lambda: acc.BasicAccountant("x"), "total"),
    (lambda: acc.RDPAccountant(dp.ApproxDP(10**400, 1e-6)), "budget"),
    (lambda: acc.PLDAccountant().compose(acc.laplace(1.0), times=10**400), "times"),
    (lambda: acc.PLDAccountant().compose(acc.laplace(1.0), times=2.0), "times"),
    (lambda: acc.PLDAccountant(grid=float("nan")), "grid"),
    (lambda: acc.RDPAccountant().compose(acc.laplace(1.0)).epsilon(1e-6, conversion="bogus"), "conversion"),
    (lambda: acc.RDPAccountant().compose(acc.laplace(1.0)).explain(delta=2), "delta"),
    (lambda: acc.PLDAccountant().compose(acc.laplace(1.0)).explain(delta=0), "delta"),
    (lambda: acc.BasicAccountant().compose(acc.laplace(1.0)).delta(epsilon=float("inf")), "epsilon"),
    (lambda: acc.ZCDPAccountant().compose(acc.zcdp(1.0)).epsilon(delta=Fraction(1, 10**400)), "delta"),
    (lambda: acc.PLDAccountant().compose(acc.laplace(1.0)).deltas([1j]), "epsilons"),
    (lambda: acc.PLDAccountant().compose(acc.laplace(1.0)).deltas(np.array(["x"])), "epsilons"),
    (lambda: acc.PLDAccountant().compose(acc.laplace(1.0)).deltas([-1.0, 1.0]), "epsilons"),
])
def test_bad_accountant_arguments_are_dpframe_errors(call, argument: str) -> None:
    with pytest.raises(dp.DPFrameError) as info:
        call()
    assert info.value.argument == argument and info.value.fix


def test_huge_compositions_stay_finite_and_sound() -> None:
    times = 2**53
    for a in (acc.BasicAccountant(), acc.RDPAccountant(), acc.ZCDPAccountant()):
        eps = a.compose(acc.laplace(1.0), times=times).epsilon(1e-6)
        assert math.isfinite(eps) and eps >= times * 1e-12
    basic = acc.BasicAccountant().compose(acc.pure(1e300), times=10**9).epsilon(1e-6)
    assert basic == math.inf                                   # 1e309 > float max: ∞ is the honest value
    assert acc.BasicAccountant().compose(acc.pure(1e300), times=10**9).delta(1.0) == 1.0


# --------------------------------------------------------------------------------------------------- PLD
def test_small_scale_laplace_pld_is_close_to_exact() -> None:
    a = acc.PLDAccountant().compose(acc.laplace(0.001))
    exact = 1000 - 2 * math.log(2)                    # δ(ε) = 1 − e^{(ε − 1000)/2} = 0.5
    assert exact - 1e-9 <= a.epsilon(0.5) <= 1000
    assert a.effective_grid > a.grid and "coarsened" in a.explain(delta=0.5)
    assert a.delta(999.0) >= 1 - math.exp(-0.5) - 1e-12


def test_coarsened_pld_of_large_epsilon_mechanisms_is_sound() -> None:
    a = acc.PLDAccountant().compose(acc.laplace(0.02), times=50)           # ε∞ = 50 each, 2500 in all
    eps = a.epsilon(1e-6)
    assert eps <= 2500 + 50 * a.effective_grid
    # exact: the sum of 50 Laplace losses exceeds 2500 − x only with probability ~ e^{-x/2}-ish, so ε ≫ 2000
    assert eps > 2000
    b = acc.PLDAccountant().compose(acc.gaussian(0.03))      # losses up to ~ 820: beyond LOSS_MAX
    rdp = acc.RDPAccountant().compose(acc.gaussian(0.03))
    assert b.epsilon(1e-6) <= rdp.epsilon(1e-6) + 1e-9 and math.isfinite(b.epsilon(1e-6))
    assert LOSS_MAX < 709


def test_pld_memory_is_bounded_in_a_1_gib_process() -> None:
    """F-accounting-pld-step-memory / -grid-memory: each case ran out of memory (1e8-point grids) before."""
    code = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from dpframe import accounting as acc
        print(acc.PLDAccountant().compose(acc.approx(1, 1e-6)).epsilon(1e-5))
        print(acc.PLDAccountant().compose(acc.zcdp(0.5, 1e-6)).epsilon(1e-5))
        print(acc.PLDAccountant().compose(acc.laplace(0.001)).epsilon(0.5))
        print(acc.PLDAccountant().compose(acc.laplace(0.05), times=50).epsilon(1e-6))
        print(acc.PLDAccountant().compose(acc.threshold_test(0.3, 5.0, 0, 2000)).epsilon(1e-6))
    """)
    one_thread = {**os.environ, "POLARS_MAX_THREADS": "1", "RAYON_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=one_thread)
    assert out.returncode == 0, out.stderr[-2000:]
    step, zc, lap, many, thr = (float(v) for v in out.stdout.split())
    assert step == pytest.approx(1.0, abs=1e-3) and step <= 1.0            # (1, 1e-6)-DP at δ = 1e-5
    exact_zcdp = float(dp.ZCDP(0.5).to_approx(1e-5 - 1e-6).epsilon)
    assert 3.0 < zc <= exact_zcdp + 1e-3          # the RDP-derived profile is within rounding of CKS20
    assert 1000 - 2 * math.log(2) - 1e-9 <= lap <= 1000
    assert 0 < many <= 50 * 20 + 50 * 1e-3
    assert 0 < thr < math.inf


# ------------------------------------------------------------------------ sessions (F-accounting-sample-overflow)
@pytest.mark.parametrize("accountant, total", [
    ("basic", dp.PureDP(10**6)), ("rdp", dp.ApproxDP(10**6, 1e-6)), ("pld", dp.ApproxDP(10**6, 1e-6)),
])
def test_sampled_query_with_a_huge_epsilon_is_charged_not_an_overflow(accountant: str, total: dp.Budget) -> None:
    df = pl.DataFrame({"user": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit.row(), budget=total, accountant=accountant, seed=0)
    q = sess.table("t").sample(0.5).agg(dp.len())
    q.cost(dp.PureDP(710))
    q.collect(dp.PureDP(710))
    spent = float(sess.spent().epsilon)  # type: ignore[union-attr]
    assert 709.3 <= spent <= 710                    # log((1 − γ) + γe^710) = 709.307, amplified once


def test_query_budget_beyond_floats_is_refused_before_charging() -> None:
    df = pl.DataFrame({"user": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10**500))
    for budget in (dp.PureDP(10**400), dp.ZCDP(10**300)):
        with pytest.raises(dp.BudgetError) as info:
            sess.table("t").sample(0.5).agg(dp.len()).collect(budget)
        assert info.value.argument == "budget"
    assert float(sess.spent().epsilon) == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("accountant", [acc.BasicAccountant, acc.ZCDPAccountant, acc.RDPAccountant, acc.PLDAccountant])
def test_an_empty_accountant_answers_every_question(accountant: Any) -> None:
    """Nothing composed yet: ε = δ = 0 and an explanation (the PLD accountant's ``explain()`` and ``effective_grid``
    raised ``max() arg is an empty sequence``, review 48)."""
    a = accountant()
    assert a.epsilon(1e-6) == 0.0 and a.delta(1.0) == 0.0 and a.entries == ()
    assert "accountant" in a.explain()
    if isinstance(a, acc.PLDAccountant):
        assert a.effective_grid == a.grid and a.composed() == [] and a.directions(1e-6) == {"remove": 0.0, "add": 0.0}
        assert "nothing composed" in a.explain()
    for bad in ("laplace", 3, np.array([1.0]), None):          # a predicate: no (an AttributeError once)
        assert not a.supports(bad)
