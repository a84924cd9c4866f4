"""Review 39d: review 39b's sweeps on every backend, storage and unit; the composed and SQL oracles under every
accountant.

Scope: review 39b ran every query ending under every accountant and budget kind (``basic`` pure and approximate,
``zcdp`` with δ = 0 and δ > 0, ``rdp``, ``pld``: :data:`tests.adversarial.composed.SESSION_KINDS`) on D and D′,
and checked ``cost()`` against the ledger's charge, on the Polars backend only, in memory, under a user-level unit.
Mechanisms choose their noise (Laplace or Gaussian), their partition-selection thresholds, quantile and top-k
methods by the session's accountant and the query's budget kind, and each backend computes them in its own engine.
This review:

* runs 39b's sweep (:func:`tests.adversarial.test_review39b.sweep`: every ending of
  :data:`tests.adversarial.test_empty_inputs.ENDINGS` in a session of each kind, on D and D′) on the DuckDB
  backend, in memory and from a Parquet file DuckDB scans itself, under user-level, row-level and automatic
  (``max_rows="auto"``) units; on Polars from a Parquet file; and on Spark for a few endings (partition
  selection, SQL, histograms, automatic bounds) — a few by default, the rest under ``-m slow``;
* checks that each query's cost, explanation and refusals are the same on Polars and DuckDB under every kind, and
  ``cost()`` against the ledger's charge (:func:`tests.adversarial.test_review39b.cost_defects`) on DuckDB
  under each unit, and on Polars under an automatic unit;
* lets the composed and SQL oracles draw the session's accountant and total and the query's budget kind
  (``chains(accounts=True)``, ``queries(accounts=True)``: :func:`tests.adversarial.composed.draw_account`), a few
  examples by default and a few hundred under ``-m slow`` on Polars and DuckDB.

Finding: under a unit with automatic bounds (``max_rows="auto"``), an ``agg`` query's budget is split into tuning
and release shares before it is planned, so a budget the session's accountant cannot take was refused naming the
release's share, a budget the analyst never gave (``ApproxDP(epsilon=9/10, delta=1e-06) cannot be converted to
pure`` for ``collect(dp.ApproxDP(1, 1e-6))`` in a pure session) — free and data-independent, but misleading
(:func:`test_a_budget_the_session_cannot_take_is_refused_by_its_own_name_under_an_automatic_unit`; fixed in
``dpframe.tuning.stage.plan_staged``: the accountant takes the query's own budget before it is split). Otherwise
sound: every ending gave the same outcome on D and D′ under every session kind on DuckDB (in memory and from its
own Parquet scan; user, row and automatic units), on Polars from Parquet, and on Spark (its endings; user, row and
automatic units); the ``agg`` endings under an automatic unit on every case (many rows, odd values, values on the
bounds); none charged then failed; every query's cost, explained mechanisms and refusals were the same on Polars
and DuckDB under every kind and unit (only the line naming the backend differs); ``cost()`` equalled the ledger's
charge on DuckDB under every unit, on Polars under an automatic unit and on Spark; the oracles under every
accountant (in memory and on Parquet files) found nothing.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import dpframe as dp

from . import test_review39b as r39b
from . import test_sql_composed_oracle as sql_oracle
from .composed import SPARK, STORAGES, Chain, chains, extreme_rows
from .sql_composed import SQLQuery, queries
from .test_composed_oracle import check

FEW = settings(max_examples=3, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
KINDS = tuple(sorted(r39b.KINDS))
#: Endings whose mechanism depends most on the accountant and budget kind (partition selection's threshold under
#: δ, Gaussian or Laplace noise, quantiles, top-k, grids, accuracy targets), run on Spark.
SPARK_ENDINGS = ("private_all", "private_auto", "sql_count", "sql_measures", "sql_top_k", "agg_histogram",
                 "agg_sum_auto", "agg_quantiles", "agg_accuracy", "bounds", "top_k_tct", "top_k_gumbel")


#: The ``agg`` endings (those an automatic unit tunes), run on every case of
#: :data:`tests.adversarial.test_empty_inputs.CASES` under an automatic unit.
AGG_ENDINGS = ("agg_all", "agg_sum_auto", "agg_mean_auto", "agg_var_auto", "agg_all_ci", "agg_all_diag",
               "agg_auto_ci_diag", "agg_pure", "agg_zcdp", "agg_zcdp_diag", "public_all", "public_auto", "private_all",
               "private_auto", "private_all_ci_diag", "sql_measures", "sql_private", "sql_ci_diag", "regression",
               "bound_groups", "derived_bounds")


def _report(defects: list[str]) -> None:
    assert not defects, "\n".join(defects)


# ------------------------------------------------------------------------------------------------ 39b's sweep

def test_partition_selection_under_every_accountant_on_duckdb() -> None:
    """Partition selection (its threshold depends on the budget kind) under every session kind on DuckDB, D against
    D′."""
    _report(r39b.sweep(("private_all",), KINDS, "duckdb"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("unit", ["user", "row", "auto"])
@pytest.mark.parametrize(("backend", "storage"), [("duckdb", "memory"), ("duckdb", "parquet_duckdb"),
                                                  ("polars", "parquet")])
def test_every_ending_under_every_accountant_on_every_backend(backend: str, storage: str, unit: str,
                                                              kind: str) -> None:
    _report(r39b.sweep(None, (kind,), backend, unit, STORAGES[storage]))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_agg_endings_on_every_case_under_every_accountant_with_an_automatic_unit(kind: str) -> None:
    """D′'s unit with many rows (beyond any bound), odd values or values on the bounds, against D: the automatic
    unit's choices read them."""
    _report(r39b.sweep(AGG_ENDINGS, (kind,), "duckdb", "auto", cases=("one", "many", "odd", "edge")))


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["user", "row", "auto"])
def test_a_few_endings_under_every_accountant_on_spark(unit: str, spark_session: Any) -> None:
    _report(r39b.sweep(SPARK_ENDINGS, KINDS, "spark", unit, SPARK))


@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
def test_cost_is_the_charge_under_every_accountant_on_duckdb() -> None:
    _report([d for kind in KINDS for d in r39b.cost_defects(kind, every=False, backend="duckdb")])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("backend", "unit"), [("duckdb", "user"), ("duckdb", "row"), ("duckdb", "auto"),
                                               ("polars", "auto")])
def test_cost_is_the_charge_of_every_query_family_on_every_unit(backend: str, unit: str, kind: str) -> None:
    _report(r39b.cost_defects(kind, every=True, backend=backend, unit=unit))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
@pytest.mark.parametrize("kind", ["basic_approx", "zcdp", "pld"])
def test_cost_is_the_charge_of_every_query_family_on_spark(kind: str, spark_session: Any) -> None:
    _report(r39b.cost_defects(kind, every=True, backend="spark", storage=SPARK))


def _planned(backend: str, unit: str, kind: str) -> dict[tuple[str, str], tuple[str, list[str]]]:
    """Each cost query at each budget kind: its cost and explanation (less the line naming the backend), or the
    refusal."""
    sess = r39b._session("one", kind, backend, unit)
    planned = {}
    for name, build in r39b._queries(sess, every=True).items():
        for b_name, budget in r39b.BUDGETS.items():
            try:
                q = build()
                planned[name, b_name] = (repr(q.cost(budget)), [line for line in str(q.explain(budget)).splitlines()
                                                                if not line.startswith("backend:")])
            except dp.DPFrameError as e:
                planned[name, b_name] = (f"{type(e).__name__}: {e}", [])
    return planned


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
@pytest.mark.parametrize("unit", ["user", "auto"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_query_is_planned_alike_on_polars_and_duckdb(kind: str, unit: str) -> None:
    """The mechanisms a query's budget kind and the session's accountant pick (noise, thresholds, quantiles,
    top-k), its cost and its refusals do not depend on the backend."""
    on_polars, on_duckdb = _planned("polars", unit, kind), _planned("duckdb", unit, kind)
    _report([f"{key}: {on_polars[key]} != {on_duckdb[key]}" for key in on_polars if on_polars[key] != on_duckdb[key]])


# ------------------------------------------------------------------------------------------------ the oracles

@settings(FEW)
@given(chain=chains(tuned=True, accounts=True), extra=extreme_rows(many=True))
def test_a_chain_under_any_accountant_behaves_alike_on_neighbouring_datasets(chain: Chain,
                                                                            extra: pl.DataFrame) -> None:
    event(check(chain, extra, "polars"))


@settings(FEW)
@given(query=queries(tuned=True, accounts=True), extra=extreme_rows(many=True))
def test_a_sql_query_under_any_accountant_behaves_alike_on_neighbouring_datasets(query: SQLQuery,
                                                                                extra: pl.DataFrame) -> None:
    event(sql_oracle.check(query, extra, "duckdb"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(MANY)
@given(chain=chains(max_steps=5, depth=3, tuned=True, sample=True, accounts=True), extra=extreme_rows(many=True))
def test_many_chains_under_any_accountant_behave_alike_on_neighbouring_datasets(backend: str, chain: Chain,
                                                                               extra: pl.DataFrame) -> None:
    event(check(chain, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(MANY)
@given(query=queries(depth=3, tuned=True, accounts=True), extra=extreme_rows(many=True))
def test_many_sql_queries_under_any_accountant_behave_alike_on_neighbouring_datasets(backend: str, query: SQLQuery,
                                                                                    extra: pl.DataFrame) -> None:
    event(sql_oracle.check(query, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "stored"), [("polars", "parquet"), ("duckdb", "parquet_duckdb")])
@settings(MANY, max_examples=100)
@given(data=st.data())
def test_many_chains_and_sql_queries_under_any_accountant_behave_alike_on_neighbouring_files(
        backend: str, stored: str, data: st.DataObject) -> None:
    storage = STORAGES[stored]
    extra = data.draw(extreme_rows(storage, many=True))
    if data.draw(st.booleans(), label="sql"):
        event(sql_oracle.check(data.draw(queries(depth=3, storage=storage, tuned=True, accounts=True)), extra,
                               backend, storage=storage))
    else:
        event(check(data.draw(chains(max_steps=5, depth=3, storage=storage, tuned=True, sample=True, accounts=True)),
                    extra, backend, storage))


# ------------------------------------------------------------------------------------------------ findings

@pytest.mark.parametrize(("total", "accountant", "budget"), [
    (dp.PureDP(10), "basic", dp.ApproxDP(1, 1e-6)), (dp.ZCDP(10), "zcdp", dp.ApproxDP(1, 1e-6)),
    (dp.ApproxDP(10, 1e-3), "basic", dp.ZCDP(0.5))])
@pytest.mark.parametrize("grouped", [False, True])
def test_a_budget_the_session_cannot_take_is_refused_by_its_own_name_under_an_automatic_unit(
        total: dp.Budget, accountant: str, budget: dp.Budget, grouped: bool) -> None:
    """Under ``max_rows="auto"`` an ``agg`` query's budget is split into tuning and release shares before it is
    planned, and a budget the session's accountant cannot take (an (ε, δ > 0) budget in a pure or zCDP session, a
    zCDP one in an (ε, δ) ``basic`` session) was refused naming the release's share — ``ApproxDP(epsilon=9/10,
    delta=1e-06) cannot be converted to pure`` for ``collect(dp.ApproxDP(1, 1e-6))`` —, a budget the analyst never
    gave. It is now refused as under a unit with numbers, naming the query's own budget (free, as before)."""
    data = pl.DataFrame({"u": [1, 2, 3, 1], "s": ["a", "b", "a", "a"], "x": [1.0, 2.0, 3.0, 4.0]})
    seen = []
    for unit in (dp.PrivacyUnit("u", max_rows=2), dp.PrivacyUnit("u", max_rows="auto")):
        sess = dp.Session({"t": data}, privacy_unit=unit, budget=total, accountant=accountant)
        frame = sess.table("t")
        query = frame.group_by("s", keys={"s": ["a", "b"]}).agg(n=dp.len()) if grouped else frame.agg(n=dp.len())
        with pytest.raises(dp.BudgetConversionError) as refused:
            query.collect(budget)
        assert sess.history().height == 0
        seen.append(str(refused.value))
    assert seen[1] == seen[0] and repr(budget) in seen[1]
