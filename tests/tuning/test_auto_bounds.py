"""max_rows / max_groups / bounds = "auto" and diagnostics: costs, shares, bad input (issue 17 items 2–4)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import polars as pl
import pytest

import dpframe as dp


def heavy(units: int = 300, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = np.minimum(np.ceil(rng.pareto(1.3, units) * 4), 400).astype(int)
    u = np.repeat(np.arange(units), n)
    return pl.DataFrame({"u": u, "x": rng.lognormal(3, 1, u.size), "g": rng.choice(["a", "b", "c"], u.size),
                         "s": ["z"] * u.size})


def session(unit: dp.PrivacyUnit, budget: dp.Budget = dp.ApproxDP(10, 1e-6), **kw: object) -> dp.Session:
    return dp.Session({"t": heavy()}, privacy_unit=unit, budget=budget, seed=3, **kw)  # type: ignore[arg-type]


AUTO = dp.PrivacyUnit("u", max_rows="auto", max_groups="auto")


def test_cost_is_the_query_budget_and_history_shows_the_shares() -> None:
    sess = session(AUTO)
    q = sess.table("t").group_by("g").agg(dp.len(), dp.mean("x", bounds="auto"))
    budget = dp.ApproxDP(1, 1e-7)
    assert q.cost(budget) == budget
    text = q.explain(budget)
    # three tuned items at 1/10 each: max_rows, max_groups, bounds(x); the release keeps 7/10 and δ
    assert "budget split: max_rows ε=1/10, max_groups ε=1/10, bounds(x) ε=1/10, release ε=7/10, δ=1e-07" in text
    assert _first(sess.spent()) == 0
    q.collect(budget)
    assert sess.spent() == budget
    mechanisms = sess.history()["mechanisms"][0]
    assert mechanisms.startswith("bound tuning, ") and "max_rows ε=1/10, max_groups ε=1/10" in mechanisms


@pytest.mark.parametrize("budget, tuning, diagnostics, release", [
    (dp.PureDP(1), ["1/10"], None, "9/10"),                       # one item
    (dp.ZCDP(Fraction(1, 2)), ["1/20"], "1/20", "2/5"),           # ρ split the same way, diagnostics 1/10
])
def test_shares_by_hand(budget: dp.Budget, tuning: list[str], diagnostics: str | None, release: str) -> None:
    sess = dp.Session({"t": heavy()}, privacy_unit=dp.PrivacyUnit("u", max_rows="auto"), budget=budget, seed=0)
    q = sess.table("t").agg(dp.len())
    plan = q._query.plan(budget, diagnostics=diagnostics is not None)
    shares = plan.detail.shares
    assert [str(first) for first in (_first(s) for _, s in shares.tuning)] == tuning
    assert (None if shares.diagnostics is None else str(_first(shares.diagnostics))) == diagnostics
    assert str(_first(shares.release)) == release
    assert plan.cost == budget and q.cost(budget) == budget


def _first(b: dp.Budget) -> Fraction:
    return b.rho if isinstance(b, dp.ZCDP) else b.epsilon  # type: ignore[union-attr]


def test_four_auto_items_share_three_tenths() -> None:
    sess = session(AUTO)
    q = sess.table("t").group_by("g").agg(dp.sum("x", bounds="auto"), dp.mean("u", bounds="auto"))
    assert "max_rows ε=3/40, max_groups ε=3/40, bounds(x) ε=3/40, bounds(u) ε=3/40, release ε=7/10" in \
        q.explain(dp.ApproxDP(1, 1e-7))


def test_rdp_session_charges_the_shares_curves() -> None:
    sess = session(dp.PrivacyUnit("u", max_rows="auto"), accountant="rdp")
    q = sess.table("t").agg(dp.len())
    charge = q.cost(dp.ApproxDP(1, 1e-7))
    q.collect(dp.ApproxDP(1, 1e-7))
    assert sess.history().height == 1 and charge is not None


def test_auto_runs_on_duckdb_and_through_sql() -> None:
    for backend in ("polars", "duckdb"):
        sess = session(dp.PrivacyUnit("u", max_rows="auto", max_groups=1), backend=backend)
        out = sess.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g").collect(dp.ApproxDP(2, 1e-7))
        assert out.columns == ["g", "n"] and sess.spent() == dp.ApproxDP(2, 1e-7)


def test_diagnostics_table_and_chosen_values() -> None:
    sess = session(AUTO)
    q = sess.table("t").group_by("g").agg(dp.sum("x", bounds="auto"))
    out, diag = q.collect(dp.ApproxDP(4, 1e-7), diagnostics=True)
    names = diag["diagnostic"].to_list()
    assert names[:4] == ["max_rows (chosen)", "max_groups (chosen)", "x_sum lower bound (chosen)",
                         "x_sum upper bound (chosen)"]
    assert names[4:] == ["units that lost rows", "rows dropped by bounding", "x_sum values clipped",
                         "groups suppressed by selection"]
    assert diag["ci95"][4:].is_not_null().all() and set(out.columns) == {"g", "x_sum"}
    assert sess.spent() == dp.ApproxDP(4, 1e-7)


def test_plain_query_with_diagnostics_and_ci() -> None:
    sess = session(dp.PrivacyUnit("u", max_rows=5))
    out, diag = sess.table("t").agg(dp.mean("x", bounds=(0, 50))).collect(dp.PureDP(2), ci=0.9, diagnostics=True)
    assert "x_mean_ci_low" in out.columns
    assert diag["diagnostic"].to_list() == ["units that lost rows", "rows dropped by bounding", "x_mean values clipped"]


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("bad", [0, -3, 2.5, "AUTO", "3", True, None, [2]], ids=repr)
@pytest.mark.parametrize("argument", ["max_rows", "max_groups"])
def test_bad_max_rows_max_groups(argument: str, bad: object) -> None:
    if bad is None:
        return   # None: the default (max_rows = 1, explained; max_groups = max_rows)
    with pytest.raises(dp.DPFrameError) as info:
        dp.PrivacyUnit("u", **{argument: bad})  # type: ignore[arg-type]
    assert info.value.argument == argument and "'auto'" in str(info.value)


@pytest.mark.parametrize("make, argument, needle", [
    (lambda t: t.agg(dp.len()).collect(dp.PureDP(0.05)), "budget", "at least ε = 0.1"),
    (lambda t: t.agg(dp.sum("s", bounds="auto")), "bounds", "numeric"),
    (lambda t: t.agg(dp.mean("x", bounds="sometimes")), "bounds", "pair"),
    (lambda t: t.sample(0.5).agg(dp.len()), "privacy_unit", "sample"),
    (lambda t: t.agg(dp.len()).plan(dp.PureDP(1)), "privacy_unit", "explain"),
    (lambda t: t.group_by("g").top_k(k=1, score=dp.len()).collect(dp.ZCDP(1, 1e-8)), "max_rows", "agg"),
    (lambda t: t.agg(dp.len()).collect(dp.PureDP(1), diagnostics="yes"), "diagnostics", "True"),
], ids=["budget-too-small", "non-numeric", "bad-bounds", "sample", "plan", "top_k", "diagnostics-flag"])
def test_bad_auto_input_is_free(make, argument: str, needle: str) -> None:
    sess = session(dp.PrivacyUnit("u", max_rows="auto"), budget=dp.ApproxDP(10, 1e-6))
    with pytest.raises(dp.DPFrameError) as info:
        make(sess.table("t"))
    assert info.value.argument == argument and needle in str(info.value)
    assert _first(sess.spent()) == 0 and sess.history().height == 0


def test_zcdp_budget_too_small_names_rho() -> None:
    sess = session(dp.PrivacyUnit("u", max_rows="auto"), budget=dp.ZCDP(1))
    with pytest.raises(dp.BudgetError, match=r"at least ρ = 0.0005"):
        sess.table("t").agg(dp.len()).cost(dp.ZCDP(0.0001))
    assert _first(sess.spent()) == 0


def test_nothing_to_diagnose() -> None:
    sess = dp.Session({"t": heavy()}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), seed=0)
    with pytest.raises(dp.PlanError) as info:
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1), diagnostics=True)
    assert info.value.argument == "diagnostics" and _first(sess.spent()) == 0


def test_bound_under_an_auto_unit_pins_a_number_and_a_looser_one_charges_nothing() -> None:
    """frame.bound() under an 'auto' unit pins a number for the frame's queries (review 52g: it was refused, which
    left top-k and frame.bounds unreachable in such a session); one above what 'auto' may choose is refused, free."""
    data = pl.DataFrame({"u": [i % 20 for i in range(200)], "g": [i % 3 for i in range(200)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows="auto"), budget=dp.PureDP(4), seed=0)
    assert "≤ 2 rows per unit" in str(sess.table("t").bound(max_rows=2).agg(dp.len()).explain(dp.PureDP(1)))
    with pytest.raises(dp.PlanError, match="'auto'") as info:
        sess.table("t").bound(max_rows=2**16 + 1)
    assert info.value.argument == "max_rows" and sess.history().height == 0
