"""``collect(budget, ci=...)``: noise-only confidence intervals (issue 17 item 5).

Coverage is checked on many groups of one query (each group is an independent release of the same true
statistic), against a binomial band at 6 standard deviations: a correct interval fails about never.
"""

from __future__ import annotations

import math

import polars as pl
import pytest

import dpframe as dp

GROUPS = 600
ROWS = 20           # per group: x = 0..19, so the clamped statistics below are known exactly


def _session(budget: dp.Budget) -> dp.Session:
    data = pl.DataFrame({"user": list(range(GROUPS * ROWS)), "g": [i // ROWS for i in range(GROUPS * ROWS)],
                         "x": [float(i % ROWS) for i in range(GROUPS * ROWS)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=budget, seed=11)


TRUTH = {"len": ROWS, "x_sum": sum(range(ROWS)), "x_mean": (ROWS - 1) / 2,
         "x_var": sum((v - (ROWS - 1) / 2) ** 2 for v in range(ROWS)) / (ROWS - 1)}
TRUTH["x_std"] = math.sqrt(TRUTH["x_var"])
MEASURES = [dp.len(), dp.sum("x", bounds=(0, 20)), dp.mean("x", bounds=(0, 20)), dp.var("x", bounds=(0, 20)),
            dp.std("x", bounds=(0, 20))]


@pytest.mark.parametrize("budget", [dp.PureDP(2), dp.ZCDP(1)], ids=["laplace", "gaussian"])
def test_intervals_cover_at_least_their_level(budget: dp.Budget) -> None:
    confidence = 0.9
    sess = _session(dp.PureDP(100) if isinstance(budget, dp.PureDP) else dp.ZCDP(100))
    out = sess.table("t").group_by("g", keys=list(range(GROUPS))).agg(*MEASURES).collect(budget, ci=confidence)
    floor = confidence - 6 * math.sqrt(confidence * (1 - confidence) / GROUPS)
    for name, truth in TRUTH.items():
        inside = ((out[f"{name}_ci_low"] <= truth + 1e-9) & (truth - 1e-9 <= out[f"{name}_ci_high"])).mean()
        assert inside >= floor, (name, inside)
        assert (out[f"{name}_ci_low"] <= out[name]).all() and (out[name] <= out[f"{name}_ci_high"]).all()



@pytest.mark.parametrize("budget", [dp.PureDP(0.02), dp.ZCDP(0.0002)], ids=["laplace", "gaussian"])
def test_count_and_sum_intervals_are_exact(budget: dp.Budget) -> None:
    """With noise much wider than a unit, coverage is the level itself (not a trivially wide band)."""
    confidence = 0.8
    sess = _session(dp.PureDP(100) if isinstance(budget, dp.PureDP) else dp.ZCDP(100))
    out = (sess.table("t").group_by("g", keys=list(range(GROUPS))).agg(dp.len(), dp.sum("x", bounds=(0, 20)))
           .collect(budget, ci=confidence))
    band = 6 * math.sqrt(confidence * (1 - confidence) / GROUPS)
    for name in ("len", "x_sum"):
        inside = ((out[f"{name}_ci_low"] <= TRUTH[name]) & (TRUTH[name] <= out[f"{name}_ci_high"])).mean()
        assert confidence - band <= inside <= confidence + band + 0.01, (name, inside)


def test_intervals_cost_nothing_extra_and_sql_names_them() -> None:
    sess = _session(dp.PureDP(10))
    query = sess.table("t").agg(dp.len(), dp.mean("x", bounds=(0, 20)))
    out = query.collect(dp.PureDP(1), ci=0.95)
    assert out.columns == ["len", "len_ci_low", "len_ci_high", "x_mean", "x_mean_ci_low", "x_mean_ci_high"]
    assert sess.spent() == dp.PureDP(1) == query.cost(dp.PureDP(1))
    sql = sess.sql("SELECT COUNT(*) AS n, AVG(CLAMP(x, 0, 20)) AS m, COUNT(*) + 1 AS n1 FROM t")
    assert sql.collect(dp.PureDP(1)).columns == ["n", "m", "n1"]
    plain = sess.sql("SELECT COUNT(*) AS n, AVG(CLAMP(x, 0, 20)) AS m FROM t").collect(dp.PureDP(1), ci=0.9)
    assert plain.columns == ["n", "n_ci_low", "n_ci_high", "m", "m_ci_low", "m_ci_high"]      # as the chain has them


def test_sql_intervals_follow_having_order_by_and_limit() -> None:
    """With HAVING / ORDER BY / LIMIT or an expression among the outputs, the released frame is reshaped by a
    query over it: each selected measure's interval rides along in the same rows (they were dropped before)."""
    sess = _session(dp.PureDP(10))
    keys = {"g": list(range(GROUPS))}
    with pytest.warns(dp.NoIntervalWarning, match="'twice': an expression over measures"):  # as the chain warns
        out = sess.sql("SELECT g, COUNT(*) AS n, AVG(CLAMP(x, 0, 20)) AS m, COUNT(*) * 2 AS twice FROM t GROUP BY g "
                       "HAVING COUNT(*) > 0 ORDER BY n DESC LIMIT 50", keys=keys).collect(dp.PureDP(1), ci=0.9)
    assert out.columns == ["g", "n", "n_ci_low", "n_ci_high", "m", "m_ci_low", "m_ci_high", "twice"]
    assert out.height == 50 and out["n"].is_sorted(descending=True)
    assert (out["n_ci_low"] <= out["n"]).all() and (out["n"] <= out["n_ci_high"]).all()
    assert ((out["m_ci_low"] <= out["m"]) & (out["m"] <= out["m_ci_high"])).all()
    assert sess.spent() == dp.PureDP(1)
    # a median has no interval: its output passes on alone, the count's interval still comes
    with pytest.warns(dp.NoIntervalWarning, match="'med'"):
        median = sess.sql("SELECT g, COUNT(*) AS n, MEDIAN(CLAMP(x, 0, 20)) AS med FROM t GROUP BY g ORDER BY g",
                          keys=keys).collect(dp.PureDP(1), ci=0.9)
    assert median.columns == ["g", "n", "n_ci_low", "n_ci_high", "med"] and median["g"].is_sorted()
    with pytest.raises(dp.PlanError, match="ci"):
        sess.sql("SELECT g, COUNT(*) AS n, COUNT(*) + 1 AS n_ci_low FROM t GROUP BY g ORDER BY g",
                 keys=keys).collect(dp.PureDP(1), ci=0.9)
    assert sess.history().height == 2


def test_one_measure_selected_twice_gets_an_interval_under_each_name() -> None:
    """``COUNT(*) AS a, COUNT(*) AS b`` is one released measure under two names: with HAVING / ORDER BY / LIMIT the
    query used to be refused with Polars' raw DuplicateError (its interval columns were listed twice)."""
    sess = _session(dp.PureDP(10))
    for tail in ("LIMIT 1", "HAVING COUNT(*) > 5", "ORDER BY 1"):
        out = sess.sql(f"SELECT COUNT(*) AS a, COUNT(*) AS b FROM t {tail}").collect(dp.PureDP(1), ci=0.9)
        assert out.columns == ["a", "a_ci_low", "a_ci_high", "b", "b_ci_low", "b_ci_high"], tail
        assert out["a"].to_list() == out["b"].to_list() and out["a_ci_low"].to_list() == out["b_ci_low"].to_list()
    # a measure without an interval (a median) selected twice: its null stand-ins were added twice, after the charge
    out = sess.sql("SELECT COUNT(*) AS n, MEDIAN(CLAMP(x, 0, 20)) AS a, MEDIAN(CLAMP(x, 0, 20)) AS b FROM t "
                   "LIMIT 1").collect(dp.PureDP(1), ci=0.9)
    assert out.columns == ["n", "n_ci_low", "n_ci_high", "a", "b"]
    assert sess.history()["status"].to_list() == ["committed"] * 4


@pytest.mark.parametrize("ci", [0, 1, 1.5, -0.1, 95, float("nan"), "0.9", True])
def test_a_bad_confidence_is_refused_before_anything_is_charged(ci: object) -> None:
    sess = _session(dp.PureDP(10))
    with pytest.raises(dp.PlanError) as info:
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1), ci=ci)  # type: ignore[arg-type]
    assert info.value.argument == "ci" and sess.history().height == 0
    with pytest.raises(dp.PlanError):
        sess.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1), ci=ci)  # type: ignore[arg-type]
    assert sess.history().height == 0
