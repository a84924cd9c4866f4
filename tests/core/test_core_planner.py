"""The planner (dpframe/planning/) and the built-in mechanisms' calibration: budget split, noise scales,
partition selection thresholds, exact total cost. Every expected number is computed by hand here."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from core_testkit import make_session
from hypothesis import given, settings
from hypothesis import strategies as st

import dpframe as dp
from dpframe.mechanism import Noise


@pytest.fixture
def data() -> pl.DataFrame:
    return pl.DataFrame({"u": [1, 1, 2, 3], "g": ["a", "b", "a", "c"], "x": [1.0, 2.0, 3.0, 4.0],
                         "spend": [10.0, 20.0, 30.0, 40.0]})


def _noises(plan) -> dict[str, Noise]:  # noqa: ANN001
    return {label: n for p in plan.plans for label, n in p.noise.items()}


def _grid_exp(sens_real: Fraction, eps_or_scale: float, magnitude: Fraction) -> int:
    """k = max(⌊log2(noise scale)⌋ − 20, ⌈log2(magnitude)⌉ − 31), the documented grid rule."""
    return max(math.floor(math.log2(float(sens_real) / eps_or_scale)) - 20, math.ceil(math.log2(magnitude)) - 31)


# --------------------------------------------------------------------------------- pure-DP budget split


def test_len_sum_mean_split_into_three_parts_with_hand_computed_scales(data: pl.DataFrame) -> None:
    s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=10))
    q = s.table("t").agg(dp.len(), dp.sum("spend", bounds=(0, 500)), dp.mean("spend", bounds=(0, 500)))
    plan = q.plan(dp.PureDP(1))
    assert len(plan.plans) == 1 and plan.plans[0].mechanism == "aggregates" and plan.selection is None
    # len → rows; mean → non-null count + centred sum; the sum (same bounds) is Σ(x − 250) + 250·n: 3 statistics.
    assert len(plan.plans[0].statistics) == 3 and len(plan.statistics()) == 3
    noise = _noises(plan)
    assert set(noise) == {"count(rows)", "count(spend not null)", "Σ (clamp(spend) − 250)"}
    part = Fraction(1, 3)
    # counts: Δ = max_rows = 10, t = Δ/ε_part = 30
    for label in ("count(rows)", "count(spend not null)"):
        n = noise[label]
        assert (n.distribution, n.sensitivity, n.scale, n.unit) == ("discrete_laplace", 10, 30, 1)
    # centred sum (shift 250, |x − 250| ≤ 250): k = max(⌊log2(10·250·3)⌋ − 20, 8 − 31) = −8; row ≤ 250·256 + 1.
    n = noise["Σ (clamp(spend) − 250)"]
    assert (n.sensitivity, n.scale, n.unit) == (10 * 64001, 3 * 10 * 64001, Fraction(1, 256))
    for n in noise.values():
        assert n.cost() == dp.PureDP(part)
    assert plan.cost == dp.PureDP(1) and plan.session_cost == dp.PureDP(1)
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    # a sum with bounds of its own is one clamped sum, a fourth part:
    # k = max(⌊log2(10·500/¼)⌋ − 20, ⌈log2 500⌉ − 31) = max(14 − 20, 9 − 31) = −6; one row ≤ ⌈500 / 2^−6⌉ + 1 = 32001
    # grid steps; Δ = 10·32001; t = Δ/¼.
    own = _noises(s.table("t").agg(dp.len(), dp.sum("spend", bounds=(0, 500)),
                                   dp.mean("spend", bounds=(0, 600))).plan(dp.PureDP(1)))
    assert _grid_exp(Fraction(10 * 500), 0.25, Fraction(500)) == -6
    assert (own["Σ (clamp(spend))"].sensitivity, own["Σ (clamp(spend))"].scale,
            own["Σ (clamp(spend))"].unit) == (320010, 1280040, Fraction(1, 64))


def test_shared_statistics_are_noised_once(data: pl.DataFrame) -> None:
    s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=2))
    t = s.table("t")
    cases = [
        ((dp.mean("x", bounds=(0, 10)), dp.var("x", bounds=(0, 10)), dp.std("x", bounds=(0, 10))), 3),
        ((dp.count("x"), dp.mean("x", bounds=(0, 10))), 2),
        ((dp.mean("x", bounds=(0, 10)), dp.mean("x", bounds=(0, 20)).alias("m2")), 3),
        ((dp.sum("x", bounds=(0, 10)), dp.mean("x", bounds=(0, 10))), 2),       # Σx = Σ(x − c) + c·n
        ((dp.sum("x", bounds=(0, 10)), dp.mean("x", bounds=(0, 20))), 3),
        ((dp.len(), dp.count("x"), dp.count("spend")), 3),
        ((dp.var("x", bounds=(0, 10), ddof=0), dp.var("x", bounds=(0, 10)).alias("v1")), 3),
    ]
    for measures, parts in cases:
        plan = t.agg(*measures).plan(dp.PureDP(3))
        assert len(plan.statistics()) == parts, measures
        for n in _noises(plan).values():
            assert n.cost() == dp.PureDP(Fraction(3, parts)), measures
        assert plan.cost == dp.PureDP(3)


def test_var_statistics_scales(data: pl.DataFrame) -> None:
    s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=2))
    plan = s.table("t").agg(dp.var("x", bounds=(0, 10))).plan(dp.PureDP(3))
    noise = _noises(plan)
    # three parts of ε = 1: count Δ = 2; centred sum |x − 5| ≤ 5; centred square (x − 5)² ≤ 25.
    assert noise["count(x not null)"].scale == 2
    k1 = _grid_exp(Fraction(2 * 5), 1.0, Fraction(5))
    assert noise["Σ (clamp(x) − 5)"].unit == Fraction(2) ** k1
    assert noise["Σ (clamp(x) − 5)"].sensitivity == 2 * (5 * 2 ** (-k1) + 1)
    k2 = _grid_exp(Fraction(2 * 25), 1.0, Fraction(25))
    assert noise["Σ (clamp(x) − 5)²"].unit == Fraction(2) ** k2
    assert noise["Σ (clamp(x) − 5)²"].sensitivity == 2 * (25 * 2 ** (-k2) + 1)
    assert noise["Σ (clamp(x) − 5)²"].scale == noise["Σ (clamp(x) − 5)²"].sensitivity


def test_sensitivity_scales_with_max_rows_not_with_the_data(data: pl.DataFrame) -> None:
    for m in (1, 7, 100):
        s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=m))
        n = _noises(s.table("t").agg(dp.len()).plan(dp.PureDP(0.5)))["count(rows)"]
        assert (n.sensitivity, n.scale) == (m, 2 * m)
    r = make_session(data, unit=dp.PrivacyUnit.row())
    assert _noises(r.table("t").agg(dp.len()).plan(dp.PureDP(2)))["count(rows)"].scale == Fraction(1, 2)


def test_plan_does_not_depend_on_the_data(data: pl.DataFrame) -> None:
    """Same schema and unit, different rows: identical plans (the cost depends on public facts only)."""
    other = pl.DataFrame({"u": list(range(1000)), "g": ["z"] * 1000, "x": [1e6] * 1000, "spend": [-3.0] * 1000})
    plans = []
    for d in (data, other):
        s = make_session(d, unit=dp.PrivacyUnit("u", max_rows=4))
        q = s.table("t").group_by("g", keys=["a", "b"]).agg(dp.len(), dp.mean("x", bounds=(0, 10)))
        p = q.plan(dp.PureDP(1))
        plans.append((p.cost, [(k, n) for k, n in _noises(p).items()], [s.key for s in p.statistics()]))
    assert plans[0] == plans[1]


def test_public_keys_cost_no_delta(data: pl.DataFrame) -> None:
    s = make_session(data, budget=dp.ApproxDP(2, 1e-6))
    q = s.table("t").group_by("g", keys=["a", "b"]).agg(dp.len())
    plan = q.plan(dp.ApproxDP(1, 1e-7))
    assert plan.selection is None
    assert plan.cost == dp.ApproxDP(1, 0)         # δ is not spent when nothing needs it
    assert _noises(plan)["count(rows)"].scale == 3  # all of ε goes to the count: t = 3/1


def test_bounds_too_large_to_compute_are_refused(data: pl.DataFrame) -> None:
    s = make_session(data)
    with pytest.raises(dp.BoundsError):
        s.table("t").agg(dp.sum("x", bounds=(0, 2**1001))).cost(dp.PureDP(1))
    with pytest.raises(dp.BoundsError):
        s.table("t").agg(dp.var("x", bounds=(-(2**501), 0))).cost(dp.PureDP(1))
    assert s.table("t").agg(dp.sum("x", bounds=(0, 2**500))).cost(dp.PureDP(1)) == dp.PureDP(1)


# ------------------------------------------------------------------------------------- zCDP budgets


def test_zcdp_budget_uses_discrete_gaussian_with_hand_computed_variance(data: pl.DataFrame) -> None:
    s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ZCDP(1))
    plan = s.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 10))).plan(dp.ZCDP(0.5))
    noise = _noises(plan)
    rho_part = Fraction(1, 4)
    c = noise["count(rows)"]
    assert (c.distribution, c.sensitivity, c.scale) == ("discrete_gaussian", 2, Fraction(2**2) / (2 * rho_part))
    n = noise["Σ (clamp(x))"]
    # k = max(⌊log2(2·10/√(2·¼))⌋ − 20, ⌈log2 10⌉ − 31) = max(4 − 20, 4 − 31) = −16
    assert n.unit == Fraction(1, 2**16)
    assert n.sensitivity == 2 * (10 * 2**16 + 1)
    assert n.scale == n.sensitivity**2 / (2 * rho_part)
    for n in noise.values():
        assert n.cost() == dp.ZCDP(rho_part)
    assert plan.cost == dp.ZCDP(0.5) and plan.session_cost == dp.ZCDP(0.5)


def test_pure_query_in_a_zcdp_session_is_charged_eps_squared_over_two(data: pl.DataFrame) -> None:
    s = make_session(data, budget=dp.ZCDP(1))
    plan = s.table("t").agg(dp.len(), dp.count("x")).plan(dp.PureDP(1))
    assert plan.cost == dp.PureDP(1)
    assert plan.session_cost == dp.ZCDP(Fraction(1, 2))
    assert all(n.distribution == "discrete_laplace" for n in _noises(plan).values())


def test_query_budgets_that_cannot_convert_to_the_session_notion(data: pl.DataFrame) -> None:
    pure = make_session(data, budget=dp.PureDP(5))
    with pytest.raises(dp.BudgetConversionError):
        pure.table("t").agg(dp.len()).cost(dp.ZCDP(0.1))
    zc = make_session(data, budget=dp.ZCDP(5, 1e-6))
    with pytest.raises(dp.BudgetConversionError):   # (ε, δ>0) implies no zCDP guarantee
        zc.table("t").group_by("g").agg(dp.len()).cost(dp.ApproxDP(1, 1e-7))
    # with public keys the plan would spend no δ, but an (ε, δ>0) budget still does not convert: the
    # documented rule (docs/concepts.md, Conversions) — it used to be charged as ZCDP(0.5), dropping δ
    with pytest.raises(dp.BudgetConversionError) as info:
        zc.table("t").group_by("g", keys=["a"]).agg(dp.len()).cost(dp.ApproxDP(1, 1e-7))
    assert info.value.argument == "budget"
    assert zc.table("t").group_by("g", keys=["a"]).agg(dp.len()).cost(dp.ApproxDP(1, 0)) == dp.ZCDP(0.5)


# ----------------------------------------------------------------------------- partition selection


def _laplace_tail(t: Fraction, k: int) -> float:
    """P[Z ≥ k], k ≥ 1, for the discrete Laplace with scale t: e^{−k/t} / (1 + e^{−1/t})."""
    return math.exp(-k / float(t)) / (1 + math.exp(-1 / float(t)))


def _gaussian_tail(sigma2: Fraction, k: int) -> float:
    """P[Z ≥ k] for the discrete Gaussian N_Z(0, σ²), summed exactly enough in floats."""
    s2 = float(sigma2)
    width = int(40 * math.sqrt(s2)) + 40
    x = np.arange(-width, width + 1, dtype=np.float64)
    w = np.exp(-(x * x) / (2 * s2))
    return float(w[x >= k].sum() / w.sum())


@pytest.mark.parametrize("max_rows, max_groups, eps, delta", [
    (3, 2, 1, 1e-6), (1, None, 0.5, 1e-9), (10, None, 2, 1e-5), (5, 5, 0.1, 1e-7), (4, 1, 3, 1e-3),
])
def test_partition_selection_laplace_share_and_threshold(data: pl.DataFrame, max_rows: int,
                                                         max_groups: int | None, eps: float, delta: float) -> None:
    unit = dp.PrivacyUnit("u", max_rows=max_rows, max_groups=max_groups)
    s = make_session(data, unit=unit, budget=dp.ApproxDP(10, 0.5))
    q = s.table("t").group_by("g").agg(dp.len(), dp.mean("x", bounds=(0, 10)))
    plan = q.plan(dp.ApproxDP(eps, delta))
    sel = plan.selection
    assert sel is not None and sel.mechanism == "partition_selection"
    part = Fraction(repr(eps)) / 4                     # selection 1 + rows 1 + mean 2 = 4 parts
    l0 = unit.groups_per_unit
    noise = sel.noise["distinct units per group"]
    assert (noise.distribution, noise.sensitivity, noise.scale) == ("discrete_laplace", l0, l0 / part)
    assert sel.cost == dp.ApproxDP(part, delta)      # one part of ε, all of δ
    tau = sel.threshold
    assert l0 * _laplace_tail(noise.scale, tau - 1) <= float(Fraction(repr(delta)))
    assert l0 * _laplace_tail(noise.scale, max(tau - 3, 1)) > float(Fraction(repr(delta)))  # not wasteful
    assert f"τ = {tau}" in " ".join(sel.notes)
    # the aggregates get the other three parts; the whole query costs exactly its budget
    assert _noises(plan)["count(rows)"].scale == max_rows / part
    assert plan.cost == dp.ApproxDP(eps, delta) and plan.session_cost == dp.ApproxDP(eps, delta)
    assert plan.statistics()[0].kind == "units"


@pytest.mark.parametrize("l0, rho, delta", [(1, 0.5, 1e-7), (2, 0.5, 1e-7), (4, 0.1, 1e-9), (3, 2, 1e-5)])
def test_partition_selection_gaussian_share_and_threshold(data: pl.DataFrame, l0: int, rho: float,
                                                          delta: float) -> None:
    s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=l0), budget=dp.ZCDP(10, 0.5))
    plan = s.table("t").group_by("g").agg(dp.len()).plan(dp.ZCDP(rho, delta))
    sel = plan.selection
    part = Fraction(repr(rho)) / 2
    noise = sel.noise["distinct units per group"]
    assert noise.distribution == "discrete_gaussian"
    # L2 sensitivity √l0, rounded up to a rational: σ² ≥ l0 / (2ρ_part)
    assert noise.sensitivity**2 >= l0 and noise.sensitivity**2 - l0 < Fraction(1, 10**5)
    assert noise.scale == noise.sensitivity**2 / (2 * part)
    assert noise.cost() == dp.ZCDP(part)
    tau = sel.threshold
    assert l0 * _gaussian_tail(noise.scale, tau - 1) <= float(Fraction(repr(delta)))
    assert sel.cost == dp.ZCDP(part, delta)
    assert plan.cost == dp.ZCDP(rho, delta)


@pytest.mark.parametrize("budget", [dp.PureDP(1), dp.ApproxDP(1, 0), dp.ZCDP(0.5)], ids=repr)
def test_private_keys_without_delta_are_refused_before_anything_runs(data: pl.DataFrame, budget) -> None:
    s = make_session(data, budget=dp.ZCDP(10, 1e-3) if budget.notion == "zcdp" else dp.ApproxDP(10, 1e-3))
    q = s.table("t").group_by("g").agg(dp.len())
    for call in (q.cost, q.explain, q.collect):
        with pytest.raises(dp.BudgetError) as info:
            call(budget)
        assert info.value.argument == "budget"
    assert s.history().height == 0


# ---------------------------------------------------------------------- property: cost == budget exactly

MEASURES = st.sampled_from([
    dp.len(), dp.count("x"), dp.sum("x", bounds=(0, 10)), dp.mean("x", bounds=(-1, 10)),
    dp.var("x", bounds=(0, 10)), dp.std("spend", bounds=(0, 100)), dp.sum("spend", bounds=(-50, 70)),
    dp.mean("spend", bounds=(0, 1e6)), dp.var("spend", bounds=(-3, 1000), ddof=0),
])
FIRST = st.fractions(min_value=Fraction(1, 1000), max_value=20, max_denominator=10**6)


@settings(max_examples=60, deadline=None)
@given(measures=st.lists(MEASURES, min_size=1, max_size=6, unique_by=lambda m: m.output_name),
       first=FIRST, kind=st.sampled_from(["pure", "approx-public", "approx-private", "zcdp", "zcdp-private"]),
       max_rows=st.integers(1, 50))
def test_total_cost_always_equals_the_query_budget(measures, first: Fraction, kind: str, max_rows: int) -> None:
    data = pl.DataFrame({"u": [1, 2], "g": ["a", "b"], "x": [1.0, 2.0], "spend": [3.0, 4.0]})
    total = dp.ZCDP(100, 1e-3) if kind.startswith("zcdp") else dp.ApproxDP(100, 1e-3)
    s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=max_rows), budget=total)
    budget = {"pure": dp.PureDP(first), "approx-public": dp.ApproxDP(first, 1e-6),
              "approx-private": dp.ApproxDP(first, 1e-6), "zcdp": dp.ZCDP(first),
              "zcdp-private": dp.ZCDP(first, 1e-7)}[kind]
    private = kind.endswith("private")
    g = s.table("t").group_by("g") if private else s.table("t").group_by("g", keys=["a", "b"])
    plan = g.agg(*measures).plan(budget)
    parts = [n.cost() for p in plan.plans for n in p.noise.values()]
    spent = sum((_first(c) for c in parts), Fraction(0))
    if private:
        spent += _first(plan.selection.cost)
        assert plan.selection.cost.delta == budget.delta
    assert spent == _first(budget)
    assert _first(plan.cost) == _first(budget)
    assert getattr(plan.cost, "delta", 0) == (budget.delta if private else 0)
    assert len({_first(c) for c in parts}) == 1          # every distinct statistic got the same share


def _first(b: dp.Budget) -> Fraction:
    return b.rho if b.notion == "zcdp" else b.epsilon


@pytest.mark.parametrize("total", [dp.ApproxDP(10, 0), dp.ZCDP(10)], ids=repr)
def test_private_keys_in_a_session_without_delta_are_refused(data: pl.DataFrame, total: dp.Budget) -> None:
    s = make_session(data, budget=total)
    ask = dp.ZCDP(0.5, 1e-7) if total.notion == "zcdp" else dp.ApproxDP(1, 1e-7)
    with pytest.raises(dp.BudgetError) as info:
        s.table("t").group_by("g").agg(dp.len()).cost(ask)
    assert info.value.argument == "budget" and "keys=" in info.value.fix


@pytest.mark.parametrize("m, exc, argument", [
    (dp.measure("len", "x"), dp.DPFrameError, "column"),
    (dp.measure("count"), dp.DPFrameError, "column"),
    (dp.measure("count", "x", bounds=(0, 1)), dp.DPFrameError, "bounds"),
    (dp.measure("sum", "x"), dp.BoundsError, "bounds"),
    (dp.measure("mean", "x"), dp.BoundsError, "bounds"),
    (dp.measure("var", "x", bounds=(0, 1), ddof=3), dp.DPFrameError, "ddof"),
    (dp.measure("sum", "x", bounds=(0, 1), ddof=1), dp.DPFrameError, "ddof"),
    (dp.measure("mean", "x", bounds=(0, 1), colour="red"), dp.DPFrameError, "colour"),
    (dp.measure("sum", "g", bounds=(0, 1)), dp.SchemaError, "column"),
    (dp.measure("sum", "nope", bounds=(0, 1)), dp.SchemaError, "column"),
])
def test_measures_built_with_dp_measure_are_validated(data: pl.DataFrame, m: dp.Measure, exc: type,
                                                      argument: str) -> None:
    s = make_session(data)
    with pytest.raises(exc) as info:
        s.table("t").agg(m).cost(dp.PureDP(1))
    assert info.value.argument == argument


def test_explain_reports_noise_and_ci95_consistent_with_the_plan(data: pl.DataFrame) -> None:
    s = make_session(data, unit=dp.PrivacyUnit("u", max_rows=10))
    q = s.table("t").agg(dp.len(), dp.sum("spend", bounds=(0, 500)), dp.mean("spend", bounds=(0, 500)))
    d = q.explain(dp.PureDP(1), format="json")
    noise = _noises(q.plan(dp.PureDP(1)))
    by_output = {m["output"]: m for m in d["measures"]}
    assert by_output["len"]["ci95"] == noise["count(rows)"].ci95()
    assert by_output["spend_sum"]["ci95"] == q.plan(dp.PureDP(1)).plans[0].ci95["spend_sum"]
    assert by_output["spend_sum"]["ci95"] > noise["Σ (clamp(spend) − 250)"].ci95()      # two noises, Bonferroni
    assert {n["statistic"] for n in d["noise"]} == set(noise)
    assert d["budget"] == {"requested": "ε=1", "cost": "ε=1", "charged": "ε=1", "accountant": s.accountant.describe(),
                           "spent": "ε=0", "fits": True, "remaining_after": "ε=9"}
    text = q.explain(dp.PureDP(1))
    assert "discrete Laplace(t=30, Δ=10)" in text
