"""The SQL composed exception-oracle fuzzer: a random ``sess.sql`` query behaves alike on D and on D′.

``test_composed_oracle.py`` runs random method chains on neighbouring datasets; this is its twin for the SQL
surface (:mod:`tests.adversarial.sql_composed` writes the queries: derived expressions in WHERE, GROUP BY
keys and aggregate arguments, CTEs, subqueries, public joins, HAVING/ORDER BY/LIMIT, TOP_K, ``ci=``, under
four privacy units). Each query runs on D and on D′ = D plus one unit of the engine's probe values (NaN,
±inf, integer extremes, far dates, long strings, nulls ...), on the DuckDB and the Polars backends, with both
datasets in memory or each written to a Parquet or CSV file registered by its path (the storages of
``test_composed_oracle.py``: :data:`~tests.adversarial.composed.STORAGES`). The analyst
must see the same kind of outcome on both: released on both (with the same columns and types), or the same
dpframe error with the same message on both; the same warnings; the same ledger statuses. A refusal charges
nothing, and a query charged on both that fails on both is a charged query that could never be computed.

Two outcomes are the released values' own business and are not compared: whether a ``TOP_K`` falls short
(``dp.TopKWarning``: what the released key set says) and whether the post-processing of the released values
fails (``CAST(COUNT(*) AS TINYINT)`` overflows for a large noisy count: the query was charged, the released
values are in the error).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import dpframe as dp

from .composed import (
    DP_ERRORS,
    MEMORY,
    SPARK,
    SPARK_PARQUET,
    STORAGES,
    Neighbours,
    Outcome,
    Storage,
    base,
    extreme_rows,
    open_session,
)
from .sql_composed import SESSION_OPTIONS, SQLQuery, queries
from .test_composed_oracle import FEW, FILES, unit_storage

CI = settings(max_examples=25, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
DEEP = settings(max_examples=1_000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
BUDGET = dp.ApproxDP(1, 1e-6)
POST_FAILED = "post-processing of the released values failed"



SESSIONS = Neighbours(functools.partial(open_session, **SESSION_OPTIONS))
_d_session = SESSIONS.d


def run(sess: dp.Session, query: SQLQuery) -> Any:
    """``query`` collected as the analyst writes it: its budget (or :data:`BUDGET`), ``ci=``, ``diagnostics=``."""
    built, budget = sess.sql(query.text, keys=query.keys), query.budget or BUDGET
    if query.diagnostics:
        return built.collect(budget, ci=query.ci, diagnostics=True)   # type: ignore[call-arg]
    return built.collect(budget, ci=query.ci) if query.ci is not None else built.collect(budget)


def outcome(sess: dp.Session, query: SQLQuery) -> Outcome:
    """What the analyst sees of one query: released (columns and types) or the error; warnings; ledger statuses."""
    before = sess.history().height
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run(sess, query)
            if query.diagnostics:
                result, diagnostics = result
                seen: tuple[Any, ...] = ("released", tuple(result.schema.items()), diagnostics["diagnostic"].to_list())
            else:
                seen = ("released", tuple(result.schema.items()))
        except dp.DPFrameError as e:
            seen = ("released", None) if POST_FAILED in str(e) else (type(e).__name__, str(e))
        except BaseException as e:  # noqa: BLE001 - the analyst catches everything, panics included
            seen = (type(e).__name__, str(e))
    statuses = tuple(sess.history()["status"].to_list()[before:])
    shown = tuple(sorted((w.category.__name__, str(w.message)) for w in caught
                         if not issubclass(w.category, dp.TopKWarning)))
    return seen, shown, statuses


def _same(on_d: Outcome, on_plus: Outcome) -> bool:
    """Equal outcomes; a post-processing failure (``("released", None)``) matches any release."""
    (seen_d, *rest_d), (seen_plus, *rest_plus) = on_d, on_plus
    if seen_d[0] == seen_plus[0] == "released" and None in (seen_d[1], seen_plus[1]):
        return rest_d == rest_plus
    return on_d == on_plus


def check(query: SQLQuery, extra: pl.DataFrame, backend: str,
          observe: Callable[[dp.Session, SQLQuery], Outcome] = outcome, storage: Storage = MEMORY,
          runs: int = 1) -> str:
    """The query's outcome on D and on D′ (D plus ``extra``), both in ``storage``, as ``observe`` sees it, agree; a
    refusal charged nothing. D′'s session runs the query ``runs`` times, each compared (as the chains' check)."""
    on_d = SESSIONS.compare(query, (query.unit, query.account), extra, backend, storage, runs, observe, _same)
    if on_d is None:
        return "D′ refused by the session"
    seen, _, statuses = on_d
    assert seen[0] == "released" or statuses == (), f"{backend}: charged, then failed on D and D′: {query}: {on_d}"
    assert seen[0] in DP_ERRORS | {"released"}, f"{backend}: not a dpframe error: {query}: {on_d}"
    if seen[0] == "released":
        return "released" if seen[1] is not None else "released, post-processing failed"
    return f"{seen[0]}: {seen[1][:60]}"


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@CI
@given(query=queries(), extra=extreme_rows())
def test_a_sql_query_behaves_alike_on_neighbouring_datasets(backend: str, query: SQLQuery,
                                                             extra: pl.DataFrame) -> None:
    event(check(query, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@DEEP
@given(query=queries(depth=3), extra=extreme_rows())
def test_many_sql_queries_behave_alike_on_neighbouring_datasets(backend: str, query: SQLQuery,
                                                                extra: pl.DataFrame) -> None:
    event(check(query, extra, backend))


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@settings(CI, max_examples=8)
@given(query=queries(tuned=True), extra=extreme_rows(many=True))
def test_a_tuned_sql_query_behaves_alike_on_neighbouring_datasets(backend: str, query: SQLQuery,
                                                                   extra: pl.DataFrame) -> None:
    """Units with ``max_rows="auto"`` / ``max_groups="auto"`` and ``ci=``'s edge levels, against a unit that may also
    have many rows."""
    event(check(query, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@DEEP
@given(query=queries(depth=3, tuned=True), extra=extreme_rows(many=True))
def test_many_tuned_sql_queries_behave_alike_on_neighbouring_datasets(backend: str, query: SQLQuery,
                                                                      extra: pl.DataFrame) -> None:
    event(check(query, extra, backend))


@pytest.mark.parametrize(("backend", "stored"), FILES)
@FEW
@given(data=st.data())
def test_a_sql_query_behaves_alike_on_neighbouring_files(backend: str, stored: str, data: st.DataObject) -> None:
    storage = STORAGES[stored]
    event(check(data.draw(queries(storage=storage)), data.draw(extreme_rows(storage)), backend, storage=storage,
                runs=data.draw(st.sampled_from([1, 3]))))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "stored"), FILES)
@DEEP
@given(data=st.data())
def test_many_sql_queries_behave_alike_on_neighbouring_files(backend: str, stored: str, data: st.DataObject) -> None:
    storage = STORAGES[stored]
    event(check(data.draw(queries(depth=3, storage=storage)), data.draw(extreme_rows(storage)), backend,
                storage=storage, runs=data.draw(st.sampled_from([1, 3]))))


def test_the_check_catches_a_query_that_fails_on_one_dataset_only() -> None:
    """The comparison can fail: an outcome that differs between D and D′ is reported, with the query and the unit;
    the same query seen alike on both is not."""
    extra = base().head(1).with_columns(u=pl.lit(10_000, dtype=pl.Int64))
    query = SQLQuery("SELECT COUNT(*) AS n FROM t WHERE u < 10000")

    def fails_on_d_plus(sess: dp.Session, q: SQLQuery) -> Outcome:
        seen = outcome(sess, q)
        on_d = sess is _d_session("duckdb", (q.unit, q.account))
        return seen if on_d else (("RuntimeError", "failed on D′ only"), (), ())

    with pytest.raises(AssertionError, match="RuntimeError"):
        check(query, extra, "duckdb", fails_on_d_plus)
    check(query, extra, "duckdb")


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@settings(CI, max_examples=2)
@given(data=st.data())
def test_a_sql_query_on_any_unit_type_behaves_alike_on_neighbouring_datasets(backend: str, data: st.DataObject
                                                                            ) -> None:
    """The unit column in every type (:data:`~tests.adversarial.composed.UNIT_TYPES`) with an adversarial added id,
    ``GROUP BY u`` among the keys and ``WHERE`` conditions no row of D meets (``queries(units=True)``, as the
    chains' ``test_a_chain_on_any_unit_type_behaves_alike_...``)."""
    storage = unit_storage(data, MEMORY)
    event(check(data.draw(queries(storage=storage, tuned=True, units=True)),
                data.draw(extreme_rows(storage, many=True, ids=True)), backend, storage=storage))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "stored"), [("duckdb", "memory"), ("polars", "memory"), *FILES])
@settings(DEEP, max_examples=300)
@given(data=st.data())
def test_many_sql_queries_on_any_unit_type_behave_alike_on_neighbouring_datasets(backend: str, stored: str,
                                                                                 data: st.DataObject) -> None:
    storage = unit_storage(data, STORAGES[stored])
    tuned = data.draw(st.booleans())
    event(check(data.draw(queries(depth=3, storage=storage, tuned=tuned, units=True)),
                data.draw(extreme_rows(storage, many=tuned, ids=True)), backend, storage=storage,
                runs=data.draw(st.sampled_from([1, 3]))))


@pytest.mark.slow
@settings(DEEP, max_examples=100)
@given(data=st.data())
def test_many_sql_queries_on_any_unit_type_behave_alike_on_spark(data: st.DataObject, spark_session: Any) -> None:
    storage = unit_storage(data, data.draw(st.sampled_from([SPARK, SPARK_PARQUET])))
    event(check(data.draw(queries(depth=3, storage=storage, tuned=True, units=True)),
                data.draw(extreme_rows(storage, many=True, ids=True)), "spark", storage=storage,
                runs=data.draw(st.sampled_from([1, 3]))))
