"""Review 37e: directed rounding in the samplers, the learning and the quantile plugins; partition selection's
threshold at extreme scales.

Scope: every ``float(·)`` / ``_float(·)`` / ``math.*`` read of an ε, ρ, δ, β, scale, σ or threshold in
``dpframe/noise/samplers.py``, ``plugins/dpframe_learning/`` (interior point, TreeLog, binary search, RSC
slicing, thresholds, rectangles, the gate) and ``plugins/dpframe_quantiles/`` (grid bounds, the EM, joint
quantiles), classified in ``docs/guarantees.md`` (proofs section, "Rounding"); ``budgets.exact_log``, which
several of them read δ through; ``laplace_threshold`` of partition selection at scales beyond the float range.

Findings: ``exact_log`` subtracted log(numerator) − log(denominator), so a δ near 1 lost every digit:
ln(1 − 10⁻¹⁵) was 0.0. RSC's holder-call bound w = ⌈ln(1/δ̂)/ln(1 + e^{−ε₀})⌉ read it so: at ε₀ = 30,
δ̂ = 1 − 791·10⁻¹² it gave w = 8453 where the theorem needs 8454 (the charge 2wε₀ one call short), and at
δ̂ = 1 − 10⁻¹⁵ w = 0 (learn_rectangle refused with a BudgetError naming ``epsilon``); past ε₀ = 708 its
e^{−ε₀} was subnormal (w 2·10⁵ short of 1.08·10¹² at ε₀ = 730). RSC's ε₀ and TreeLog's ε/2, ε₀ and its two
thresholds (t, the histogram's 1 + ⌈ln(1/δ₀)/ε₀⌉) read ε as ``float(·)`` to nearest (inside their 10⁻¹² margins);
now directed. TreeLog's e^{ε₀} overflowed: every interior point (auto included) under an (ε, δ) budget of
ε ≥ ~1.3·10⁴ raised a raw OverflowError; grid bounds at ε ≤ 10⁻³⁰⁸ too (its accuracy-only inward shift).
``laplace_threshold`` raised ZeroDivisionError for a scale below 2.5·10⁻³²⁴ and OverflowError above
1.8·10³⁰⁸; no analyst reaches either (a query's ε is below 10³⁰⁰ and its scale at most 2⁵⁷, both refused
before the charge), and it is now exact at every scale.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from dpframe_aggregates.partition_selection import laplace_threshold
from dpframe_learning import interior_point, slicing

import dpframe as dp
from dpframe.budgets import exact_log

from .test_review37b import PREC, _dec
from .test_review37d import THIRD, _spy


def _ln(x: Fraction) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = PREC
        return _dec(x).ln()


# --------------------------------------------------------------------------- exact_log near 1 (finding 1)

@pytest.mark.parametrize("x", [Fraction(10**15 - 1, 10**15), Fraction(10**12 - 791, 10**12), Fraction(2**60 + 1, 2**60),
                               Fraction(2**53, 2**53 - 1), Fraction(3**400 + 1, 4 * 3**400), Fraction(1, 10**400),
                               Fraction(10**400 + 7, 3), Fraction(1, 2), Fraction(3, 2), Fraction(5, 7)])
def test_exact_log_is_accurate_relative_to_the_log(x: Fraction) -> None:
    """Attack: ln(1 − 10⁻¹⁵) was log(10¹⁵ − 1) − log(10¹⁵) = 0.0 (both logs round to one float). Now within
    4 ulps of the 60-digit value, also for a δ near 1 and for numerators and denominators of hundreds of digits."""
    got, want = exact_log(x), _ln(x)
    assert abs(Decimal(got) - want) <= 4 * Decimal(math.ulp(got))


def _holder_ratio(eps0: Fraction, delta_hat: Fraction) -> Decimal:
    """ln(1/δ̂)/ln(1 + e^{−ε₀}) to 60 digits (450 digits inside: δ̂ within 10⁻⁴⁰⁰ of 1, e^{−ε₀} down to 10⁻³³⁰)."""
    with localcontext() as ctx:
        ctx.prec = 450
        return -_dec(delta_hat).ln() / (1 + (-_dec(eps0)).exp()).ln()


@pytest.mark.parametrize("eps0, delta_hat", [
    (Fraction(30), Fraction(10**12 - 791, 10**12)), (Fraction(1, 10), Fraction(10**15 - 1, 10**15)),
    (Fraction(730), Fraction(10**305 - 1, 10**305)), (Fraction(1, 10), Fraction(10**400 - 1, 10**400)),
    (Fraction(1, 10), Fraction(1, 10**6)), (Fraction(3, 2), Fraction(1, 10**400)), (Fraction(700), Fraction(1, 2))])
def test_rsc_holder_calls_are_an_upper_bound(eps0: Fraction, delta_hat: Fraction) -> None:
    """Attack: at ε₀ = 30, δ̂ = 1 − 791·10⁻¹² the exact ratio is 8453.0014, so RSC is (2·8454·ε₀, δ̂)-DP; rsc_calls
    gave 8453 (ln(1/δ̂) read 1.3·10⁻¹⁶ low). At δ̂ = 1 − 10⁻¹⁵ and 1 − 10⁻⁴⁰⁰ it gave 0; at ε₀ = 730 (e^{−ε₀}
    subnormal, 35 bits) and δ̂ = 1 − 10⁻³⁰⁵ 1,083,856,307,677 of 1,083,856,507,270. Now ≥ the exact ceiling, within
    a relative 2·10⁻⁹ of it."""
    ratio = _holder_ratio(eps0, delta_hat)
    w = slicing.rsc_calls(eps0, delta_hat)
    if ratio >= slicing.MAX_CALLS:
        assert w == slicing.MAX_CALLS
    else:
        assert math.ceil(ratio) <= w <= max(1, math.ceil(ratio * (1 + Decimal("2e-9"))))


def test_rsc_plan_near_delta_one() -> None:
    """slice_plan at δ = 1 − 10⁻¹⁵ raised a BudgetError naming ``epsilon`` (w = 0: a cost of ε = 0); now RSC
    with w = 1."""
    plan = slicing.slice_plan(Fraction(1), Fraction(10**15 - 1, 10**15), 4)
    assert plan.method == "rsc" and plan.cost.epsilon == 2 * plan.epsilon0


# --------------------------------------------------------------------------- directed ε in RSC and TreeLog

def test_rsc_calls_reads_epsilon0_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: per_call = ln(1 + e^{−ε₀}) must be a lower bound (w divides by it); e^{−float(1/3)} was above
    e^{−1/3}. Now the exponent is −up(ε₀)."""
    calls = _spy(monkeypatch, slicing.math, "exp")
    slicing.rsc_calls(THIRD, Fraction(1, 10**6))
    (arg,), _ = calls                                  # then the exp of the quotient's log
    assert -Fraction(arg) >= THIRD


def test_treelog_parameters_round_the_safe_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack (ε = 1/3, δ = 10⁻⁶, |X| = 2²⁰: ε₀ = 1/51, float(1/51) < 1/51): δ₀ = δ/(L(2 + e^{ε₀}) + 1) read
    e^{float(ε₀)} (ε₀ low: δ₀ high) and, for swaps, ln(1 + e^{float(ε)/2}); t = ⌈100·ln(1/δ₀)/ε₀⌉ and the
    histogram threshold ⌈ln(1/δ₀)/ε₀⌉ were float quotients below the exact ones. Now ε₀ and ε/2 are read through
    ``up`` and the quotients are exact."""
    ceil_args = _spy(monkeypatch, interior_point, "_ceil")
    rounded = _spy(monkeypatch, interior_point, "up")
    p = interior_point.TreeLogParameters.of(THIRD, Fraction(1, 10**6), 1e-6, 2**20, interior_point.Stability(1))
    threshold = p.threshold
    assert p.epsilon0 == Fraction(1, 51) and Fraction(float(p.epsilon0)) < p.epsilon0
    assert rounded == [(p.epsilon0,)]
    (t_arg,), (th_arg,) = ceil_args
    log_inv = Fraction(p.log_inv_delta0)
    assert Fraction(t_arg) >= 100 * log_inv / p.epsilon0 and Fraction(th_arg) >= log_inv / p.epsilon0
    assert threshold == 1 + math.ceil(log_inv / p.epsilon0 * (1 + Fraction(1, 10**12)))
    rounded.clear()
    swap = interior_point.Stability(1, swap=True)
    p = interior_point.TreeLogParameters.of(THIRD, Fraction(1, 10**6), 1e-6, 2**20, swap)
    assert rounded == [(THIRD / 2,), (p.epsilon0,)]


def test_treelog_parameters_at_a_large_epsilon() -> None:
    """Attack: e^{ε₀} overflowed past ε₀ = 709, so every interior point under an (ε, δ) budget of ε ≥ ~1.3·10⁴
    (auto and binary_search too: the plan prices TreeLog for its table) raised a raw OverflowError before the
    charge. Now in logs: it runs and charges its budget."""
    sess = dp.Session({"t": pl.DataFrame({"x": [float(i % 50) for i in range(400)]})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10**6, Fraction(1, 1000)))
    budget = dp.ApproxDP(10**5, Fraction(1, 10**6))
    point = sess.table("t").interior_point("x", bounds=(0, 100)).collect(budget)
    assert 0 <= point.value <= 49 and sess.spent() == dp.ApproxDP(10**5, 0)
    p = interior_point.TreeLogParameters.of(Fraction(10**299), Fraction(1, 10**6), 1e-6, 2**20,
                                            interior_point.Stability(1))
    assert (p.t, p.threshold) == (101, 3)                   # ln(1/δ₀) ≈ ε₀: t = ⌈100·(1 + 10⁻¹²)²⌉


# --------------------------------------------------------------------------- partition selection's threshold (part 2)

def test_laplace_threshold_at_scales_beyond_the_float_range() -> None:
    """Attack: t = float(scale) is 0.0 below 2.5·10⁻³²⁴ (ε above ~4·10³²³ per group) and −1/t raised
    ZeroDivisionError; above 1.8·10³⁰⁸ float(scale) raised OverflowError. Now τ = 2 at a vanishing scale (a
    unit-only group needs noise ≥ 1, probability ≈ e^{−1/t}) and τ − 1 ≥ t·(ln(1/δ) − ln 2) at a huge one."""
    assert laplace_threshold(1, Fraction(1, 10**330), Fraction(1, 10**6)) == 2
    t = Fraction(10**400)
    tau = laplace_threshold(1, t, Fraction(1, 10**6))
    with localcontext() as ctx:
        ctx.prec = PREC
        low = _dec(t) * (_ln(Fraction(10**6)) - _ln(Fraction(2)))
        assert low <= tau - 1 <= low + _dec(t) * Decimal("1e-9")


@pytest.mark.parametrize("notion", ["approx", "zcdp"])
def test_huge_epsilon_never_reaches_the_threshold(notion: str) -> None:
    """Private keys through group_by, SQL GROUP BY and top-k: ε (ρ) ≥ 10³⁰⁰ is refused before the charge, naming
    the budget (so a scale l0/ε ≥ 10⁻³⁰⁰ reaches laplace_threshold), and 10³⁰⁰ − 1 runs and charges exactly."""
    data = pl.DataFrame({"u": list(range(40)), "c": [str(i % 4) for i in range(40)]})
    total = dp.ApproxDP(10**400, Fraction(1, 10**6)) if notion == "approx" else dp.ZCDP(10**700, Fraction(1, 10**6))
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=total)
    make: Any = dp.ApproxDP if notion == "approx" else dp.ZCDP
    queries = [lambda: sess.table("t").group_by("c").agg(dp.len()),
               lambda: sess.sql("SELECT c, COUNT(*) AS n FROM t GROUP BY c"),
               lambda: sess.table("t").group_by("c").top_k(k=2)]
    for query in queries:
        with pytest.raises(dp.errors.BudgetError) as err:
            query().collect(make(10**330, Fraction(1, 10**7)))
        assert err.value.argument == "budget"
    spent = sess.spent()
    assert (spent.epsilon if notion == "approx" else spent.rho) == 0 and spent.delta == 0  # type: ignore[union-attr]
    out = sess.table("t").group_by("c").agg(dp.len()).collect(make(10**300 - 1, Fraction(1, 10**7)))
    assert sorted(out["len"].to_list()) == [10] * 4
    assert sess.spent() == make(10**300 - 1, Fraction(1, 10**7))



def test_grid_bounds_at_a_tiny_epsilon() -> None:
    """Attack: frame.bounds() at ε = 10⁻³²⁰ computed its inward shift 2m/float(ε₀)·ln(bins/β) = ∞ (OverflowError
    while planning), at 10⁻³³⁰ float(ε₀) = 0. The shift is accuracy only (public); now exact: it runs (the EM
    at such a scale is uniform) and charges its budget."""
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0] * 20})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(1))
    for eps in (Fraction(1, 10**320), Fraction(1, 10**330)):
        low, high = sess.table("t").bounds("x").collect(dp.PureDP(eps))
        assert low <= high
    assert sess.spent() == dp.PureDP(Fraction(1, 10**320) + Fraction(1, 10**330))
