"""Accuracy-first queries (issue 21 item 6): ``collect/cost/explain(accuracy=dp.Accuracy(...))`` pick the
smallest budget whose noise meets the interval, show it for free and refuse, uncharged, what does not fit.

The reference for the smallest budget is the noise law itself, solved independently here: discrete
Laplace(t) has P[|Z| > k] = 2e^{−(k+1)/t}/(1 + e^{−1/t}); the discrete Gaussian's mass is summed.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy.optimize import brentq

import dpframe as dp


def _session(budget: dp.Budget) -> dp.Session:
    data = pl.DataFrame({"x": [1.0] * 100, "g": [i % 3 for i in range(100)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=budget, seed=0)


def test_count_gets_the_smallest_epsilon_for_its_interval() -> None:
    """±5 at 95% for a count (Δ = 1): the ε where 2e^{−6/t}/(1 + e^{−1/t}) = 0.05, t = 1/ε."""
    def miss(eps: float) -> float:
        t = 1 / eps
        return 2 * math.exp(-6 / t) / (1 + math.exp(-1 / t)) - 0.05

    exact = brentq(miss, 0.01, 10, xtol=1e-14)
    sess = _session(dp.PureDP(1))
    q = sess.table("t").agg(dp.len())
    cost = q.cost(accuracy=dp.Accuracy(half_width=5, confidence=0.95))
    assert isinstance(cost, dp.PureDP) and exact <= float(cost.epsilon) <= exact * (1 + 2e-5)
    assert sess.spent().epsilon == 0                                          # free
    assert q.plan(cost).plans[0].half_widths(0.95) == {"len": 5.0}
    assert q.plan(dp.PureDP(exact * (1 - 1e-6))).plans[0].half_widths(0.95) == {"len": 6.0}


def test_zcdp_sessions_calibrate_gaussian_noise() -> None:
    sess = _session(dp.ZCDP(1))
    q = sess.table("t").agg(dp.len())
    rho = float(q.cost(accuracy=dp.Accuracy(half_width=5, confidence=0.9)).rho)   # type: ignore[attr-defined]

    def covered(r: float) -> float:                     # P[|Z| ≤ 5] for N_Z(0, σ² = 1/(2ρ))
        k = np.arange(-400, 401, dtype=np.float64)
        p = np.exp(-k * k * r)
        return float(p[np.abs(k) <= 5].sum() / p.sum())

    assert covered(rho) >= 0.9 > covered(rho * (1 - 1e-4))


def test_per_measure_targets_and_what_cannot_be_targeted() -> None:
    sess = _session(dp.PureDP(10))
    q = sess.table("t").agg(n=dp.len(), s=dp.sum("x", bounds=(0, 2)), m=dp.mean("x", bounds=(0, 2)))
    target = dp.Accuracy(half_width={"n": 5, "s": 10})
    widths = {k: v for p in q.plan(q.cost(accuracy=target)).plans for k, v in p.half_widths(0.95).items()}
    assert widths["n"] <= 5 and widths["s"] <= 10
    text = q.explain(accuracy=target)
    assert "accuracy-first: n ±5, s ±10 at 0.95 confidence needs the budget ε=" in text
    assert q.explain(accuracy=target, format="json")["notes"][-1].startswith("accuracy-first")
    with pytest.raises(dp.PlanError, match=r"\['m'\] have no interval known before release") as info:
        q.cost(accuracy=dp.Accuracy(half_width=5))
    assert info.value.argument == "accuracy"
    with pytest.raises(dp.PlanError, match="no measure named") as info:
        q.cost(accuracy=dp.Accuracy(half_width={"nope": 1}))
    assert info.value.argument == "half_width"


def test_collect_charges_the_chosen_budget_and_refuses_what_does_not_fit() -> None:
    sess = _session(dp.PureDP(1))
    q = sess.table("t").agg(dp.len())
    target = dp.Accuracy(half_width=5)
    chosen = q.cost(accuracy=target)
    out = q.collect(accuracy=target)
    assert out.columns == ["len"] and sess.spent() == chosen
    with pytest.raises(dp.BudgetExceededError) as info:                    # 0.54 + 0.54 > 1
        q.collect(accuracy=target)
    assert info.value.argument == "accuracy" and sess.spent() == chosen      # nothing charged
    assert "half_width" in (info.value.fix or "")
    ci = sess.table("t").agg(dp.len()).collect(accuracy=dp.Accuracy(half_width=40), ci=0.95)
    assert ci.columns == ["len", "len_ci_low", "len_ci_high"]
    assert ci["len_ci_high"][0] - ci["len"][0] <= 40


def test_sql_queries_take_an_accuracy_target() -> None:
    sess = _session(dp.PureDP(1))
    q = sess.sql("SELECT COUNT(*) AS n FROM t")
    assert q.cost(accuracy=dp.Accuracy(half_width=5)) == sess.table("t").agg(n=dp.len()).cost(
        accuracy=dp.Accuracy(half_width=5))
    assert q.collect(accuracy=dp.Accuracy(half_width=5)).columns == ["n"]


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"half_width": 0}, "half_width"), ({"half_width": math.nan}, "half_width"),
    ({"half_width": {}}, "half_width"), ({"half_width": {"n": -1}}, "half_width"),
    ({"half_width": 5, "confidence": 1.0}, "confidence"), ({"half_width": 5, "confidence": True}, "confidence"),
    ({"half_width": 5, "notion": "approx"}, "notion"),
    ({"half_width": 5, "notion": np.array(["pure", "zcdp"])}, "notion"),
    ({"half_width": 5, "notion": pl.Series(["pure"])}, "notion"),
])
def test_bad_targets_are_refused_naming_the_argument(kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(dp.PlanError) as info:
        dp.Accuracy(**kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument


def test_budget_and_accuracy_are_exclusive() -> None:
    q = _session(dp.PureDP(1)).table("t").agg(dp.len())
    with pytest.raises(dp.PlanError, match="not both"):
        q.collect(dp.PureDP(0.1), accuracy=dp.Accuracy(half_width=5))
    with pytest.raises(dp.BudgetError, match="or an accuracy target") as info:
        q.collect()
    assert info.value.argument == "budget"
    with pytest.raises(dp.PlanError) as info:
        q.cost(accuracy=5)
    assert info.value.argument == "accuracy"
