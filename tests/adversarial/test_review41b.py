"""Review 41b: a Polars panic seen in review 40b's oracle draws; chunk layouts; review 40b's leftovers.

Scope:

* **The panic** ``implementation error, cannot get ref Int64 from Int32`` that review 40b's method-chain draws
  printed (``int_div_series`` in an input-independent select): an integer division of integer literals alone,
  ``(pl.lit(0) // pl.lit(0)) // pl.lit(2**31)`` — Polars materializes ``lit(0) // lit(0)`` as ``Int32`` where its
  schema says ``Int64``. dpframe types every operation of an expression on an empty frame and probes it on a row
  when the query is built, so a literal-only part that panics is refused there, free, whatever the data
  (:func:`test_the_traced_panic_is_refused_free_alike_on_any_rows`). Tracing it found the same typing fault with a
  row-dependent outcome (below).
* **Chunk layouts**: the composed and SQL oracles' queries on one dataset held as one chunk, as one chunk per row, as
  columns of different chunkings, and as a Parquet file of four-row row groups, under one seed: the same released
  values, warnings, ledger rows and refusals (:func:`test_a_query_releases_the_same_on_every_chunk_layout`, under
  ``-m slow``, 100 chains or SQL queries per backend, a quarter of them released; before it, 300 tuned chains on
  Polars in the same layouts: nothing found beyond the ternary below).
* **Review 40b's leftovers**: ``cost()`` could not price ``collect(budget, diagnostics=True)`` (it differs from
  ``cost(budget)`` in ``rdp``/``pld`` sessions); the refusal of ``max_rows="auto"`` by queries that need a number was
  a bare ``DPFrameError`` (the class the reference gives to failures *after* a charge); the SQL oracle's
  ``queries(accounts=True)`` drew budgets its session kind refuses for about half its queries (now seven in eight
  are budgets the kind takes: ``draw_account(fitting=True)``; in 100 derandomized draws on DuckDB the releases went
  from 21 to 35, and the budget's refusals from 46 to 10, in 57 s where the 100 took 84 s before).

Findings:

* ``pl.when(pl.col("i") > 3).then(pl.lit(3)).otherwise(pl.lit(2**40))`` (both branches integer literals, or
  expressions of literals alone): Polars types a batch whose rows all take one branch by that literal's own type, and
  a batch split between them by the supertype, so on 20 rows that the predicate splits the query was charged, then
  failed (``SchemaMismatch`` panic), while on rows all on one side, or on two rows, it released: "the query failed"
  told whether some private row passes the predicate
  (:func:`test_a_ternary_of_integer_literals_behaves_alike_whatever_the_rows`). The guarded expression now casts both
  branches of an integer ternary to the type the plan gives it (``dpframe.plan.totality._Total.typed_branches``).
* ``cost(budget, diagnostics=True)`` now gives what ``collect(budget, diagnostics=True)`` charges
  (:func:`test_cost_prices_diagnostics_as_collect_charges_them`); review 40b's charged oracles check it.
* The ``max_rows="auto"`` refusal is a ``PlanError`` naming ``max_rows`` and the fix
  (:func:`test_a_query_that_needs_a_number_under_max_rows_auto_is_refused_by_a_plan_error`).
"""
from __future__ import annotations

import itertools
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import dpframe as dp

from . import test_composed_oracle as co
from . import test_review40b as r40b
from . import test_sql_composed_oracle as sql_oracle
from .composed import MEMORY, Chain, chains, extreme_rows, neighbours, open_session
from .sql_composed import SESSION_OPTIONS, SQLQuery, queries

_UNIT = dp.PrivacyUnit("u", max_rows=2)
_BUDGET = dp.ApproxDP(1, 1e-6)


def _rows(values: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"u": list(range(len(values))), "i": values})


def _outcome(data: pl.DataFrame, query: Callable[[dp.Frame], Any], backend: str = "polars"
             ) -> tuple[str, tuple[str, ...]]:
    sess = dp.Session({"t": data}, privacy_unit=_UNIT, budget=dp.ApproxDP(10, 1e-3), seed=0, backend=backend)
    try:
        query(sess.table("t")).collect(_BUDGET)
        seen = "released"
    except BaseException as e:  # noqa: BLE001 - the analyst catches everything, panics included
        seen = f"{type(e).__name__}: {e}"
    return seen, tuple(sess.history()["status"].to_list())


#: D: 20 units whose ``i`` is at most 3; D′: D plus a unit with ``i = 5``; the same rows in one chunk per row; two
#: rows; nulls.
_DATASETS = {"d": _rows(list(range(-16, 4))), "d_plus": _rows([*range(-16, 4), 5]),
             "d_plus_chunks": pl.concat([_rows([*range(-16, 4), 5]).slice(k, 1) for k in range(21)], rechunk=False),
             "two": _rows([1, 5]), "nulls": _rows([1, 5]).with_columns(i=pl.lit(None, pl.Int64))}


# ------------------------------------------------------------------------------------------------ 1. the panic

@pytest.mark.parametrize("backend", ["polars", "duckdb", pytest.param("spark", marks=pytest.mark.slow)])
@pytest.mark.parametrize("then, otherwise", [(pl.lit(3), pl.lit(2**40)), (pl.lit(1) + pl.lit(2), pl.lit(2**40).abs())])
def test_a_ternary_of_integer_literals_behaves_alike_whatever_the_rows(then: pl.Expr, otherwise: pl.Expr,
                                                                       backend: str, request: Any) -> None:
    """Charged, then failed on D′ (a row on each side of ``i > 3``, 21 rows), released on D (every row on one side)
    and on two rows split by it (Polars, DuckDB; Spark refused it, free, on every dataset: the type its probe rows
    computed was not the type reported); now released on every dataset, on every backend."""
    if backend == "spark":
        request.getfixturevalue("spark_session")
    ternary = pl.when(pl.col("i") > 3).then(then).otherwise(otherwise)
    seen = {name: _outcome(data, lambda f: f.with_columns(v=ternary).agg(s=dp.sum("v", bounds=(0, 1))), backend)
            for name, data in _DATASETS.items()}
    assert set(seen.values()) == {("released", ("committed",))}, seen


def test_an_integer_ternary_keeps_its_values_and_type() -> None:
    """The cast is to the type the plan gives: a branch whose values fit is unchanged (Polars' own answer)."""
    sess = dp.Session({"t": _rows([1, 5, 7])}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1e6), seed=0)
    frame = sess.table("t").with_columns(v=pl.when(pl.col("i") > 3).then(pl.lit(3)).otherwise(pl.col("i") * 2))
    assert frame.schema["v"] == pl.Int64
    keys = frame.group_by("v", keys=[2, 3]).agg(n=dp.len()).collect(dp.PureDP(1e6))
    assert keys["n"].round().to_list() == [1, 2]


def test_the_traced_panic_is_refused_free_alike_on_any_rows() -> None:
    """Review 40b's panic, minimised: a literal-only division, alone or inside a ternary that Polars evaluates only on
    some rows, is refused when the query is built (a ``SchemaError`` naming the argument), free, on every dataset."""
    panics = (pl.lit(0) // pl.lit(0)) // pl.lit(2**31)
    for expr in (panics, pl.when(pl.col("i") > 3).then(panics).otherwise(pl.col("i"))):
        seen = {name: _outcome(data, lambda f, e=expr: f.with_columns(v=e).agg(n=dp.len()))
                for name, data in _DATASETS.items()}
        (refusal, charged), = set(seen.values())
        assert refusal.startswith("SchemaError: v: invalid expression: PanicException") and charged == (), seen


# ------------------------------------------------------------------------------------------------ 2. chunk layouts

def _pieces(column: pl.Series, sizes: list[int]) -> pl.Series:
    out, start = [], 0
    for size in itertools.cycle(sizes):
        if start >= column.len():
            break
        out.append(column.slice(start, size))
        start += size
    return pl.concat(out, rechunk=False)


def layouts(data: pl.DataFrame, folder: Path) -> Iterator[tuple[str, object]]:
    """``data`` as one chunk, one chunk per row, columns of different chunkings (1-5, 3 and 7 rows), and a Parquet
    file of four-row row groups (registered by its path)."""
    yield "one", data.rechunk()
    yield "rows", pl.concat([data.slice(k, 1) for k in range(data.height)], rechunk=False)
    yield "mixed", pl.DataFrame([_pieces(data[c], [j % 5 + 1, 3, 7]) for j, c in enumerate(data.columns)])
    data.write_parquet(path := folder / "t.parquet", row_group_size=4)
    yield "row_groups", path


def _released(sess: dp.Session, run: Callable[[], Any]) -> tuple[Any, ...]:
    """What the analyst sees, values included, and the ledger rows the query added."""
    before = len(sess._release.charges())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            seen: Any = ("released", r40b._value(run()))
        except BaseException as e:  # noqa: BLE001 - the analyst catches everything, panics included
            seen = (type(e).__name__, str(e))
    rows = tuple((row.status, repr(row.cost)) for row in sess._release.charges()[before:])
    return seen, tuple(sorted((w.category.__name__, str(w.message)) for w in caught)), rows


def same_on_every_layout(query: Chain | SQLQuery, extra: pl.DataFrame, backend: str) -> str:
    """D′ = D plus ``extra`` in each of :func:`layouts`, one session each with seed 0: the same outcome, values,
    warnings and ledger rows."""
    _, data = neighbours(extra, MEMORY)
    seen: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dpframe-layout-") as folder:
        for name, source in layouts(data, Path(folder)):
            if isinstance(query, SQLQuery):
                sess = open_session(source, backend, (query.unit, query.account), **SESSION_OPTIONS)
                seen[name] = _released(sess, lambda s=sess: sql_oracle.run(s, query))
            else:
                sess = open_session(source, backend, (query.unit, query.account))
                seen[name] = _released(sess, lambda s=sess: query.collect(s, co.BUDGET))
    differ = {name: outcome for name, outcome in seen.items() if outcome != seen["one"]}
    assert not differ, f"{backend}: {query}\n  one chunk: {seen['one']}\n  " + "\n  ".join(
        f"{name}: {outcome}" for name, outcome in differ.items())
    return str(seen["one"][0][0])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(max_examples=100, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_query_releases_the_same_on_every_chunk_layout(backend: str, data: st.DataObject) -> None:
    """Chains (tuned, sampled, any accountant) or SQL queries on D′ in every layout of :func:`layouts`."""
    extra = data.draw(extreme_rows(many=True))
    if data.draw(st.booleans(), label="sql"):
        query: Chain | SQLQuery = data.draw(queries(tuned=True, accounts=True))
    else:
        query = data.draw(chains(tuned=True, sample=True, accounts=True))
    event(same_on_every_layout(query, extra, backend))


# ------------------------------------------------------------------------------------------------ 3. 40b's leftovers

@pytest.mark.parametrize("kind", ["rdp", "pld", "basic_approx", "zcdp_delta"])
@pytest.mark.parametrize("query", ["agg", "group_by", "sql"])
def test_cost_prices_diagnostics_as_collect_charges_them(kind: str, query: str) -> None:
    """``collect(budget, diagnostics=True)`` runs in stages and, in ``rdp``/``pld`` sessions, is charged the curves
    each share's budget guarantees, more than ``cost(budget)`` (the mechanisms' own curves) said; ``cost()`` had no
    way to price it. ``cost(budget, diagnostics=True)`` is now the charge."""
    data = pl.DataFrame({"u": [1, 2, 3, 1], "s": ["a", "b", "a", "a"], "x": [1.0, 2.0, 3.0, 4.0]})
    sess = open_session(data, "polars", (_UNIT, kind))
    budget = dp.ZCDP(0.5, 1e-6) if kind == "zcdp_delta" else _BUDGET
    built = {"agg": lambda: sess.table("t").agg(n=dp.len(), s=dp.sum("x", bounds=(0, 4))),
             "group_by": lambda: sess.table("t").group_by("s").agg(n=dp.len()),
             "sql": lambda: sess.sql("SELECT s, SUM(CLAMP(x, 0, 4)) AS t FROM t GROUP BY s")}[query]()
    priced = built.cost(budget, diagnostics=True)
    built.collect(budget, diagnostics=True)
    assert repr(sess._release.charges()[-1].cost) == repr(priced)
    assert (priced == built.cost(budget)) is (kind in ("basic_approx", "zcdp_delta"))
    with pytest.raises(dp.PlanError, match="^diagnostics: .*accuracy"):
        built.cost(accuracy=dp.Accuracy(half_width=5), diagnostics=True)
    with pytest.raises(dp.PlanError, match="^diagnostics: expected True or False"):
        built.cost(budget, diagnostics=1)


@pytest.mark.parametrize("call", [
    lambda s: s.table("t").group_by("s").top_k(k=1).collect(_BUDGET),
    lambda s: s.table("t").bounds("x").collect(_BUDGET),
    lambda s: s.sql("SELECT s FROM t GROUP BY s HAVING TOP_K(COUNT(*), 2)").collect(_BUDGET)],
    ids=["top_k", "bounds", "sql_top_k"])
def test_a_query_that_needs_a_number_under_max_rows_auto_is_refused_by_a_plan_error(
        call: Callable[[dp.Session], Any]) -> None:
    """It was a bare ``DPFrameError`` — the class docs/reference.md gives to failures while a query runs, its cost
    charged — though it is refused before anything is charged."""
    data = pl.DataFrame({"u": [1, 2, 3, 1], "s": ["a", "b", "a", "a"], "x": [1.0, 2.0, 3.0, 4.0]})
    sess = open_session(data, "polars", (dp.PrivacyUnit("u", max_rows="auto"), "rdp"))
    with pytest.raises(dp.PlanError, match=r"^max_rows: max_rows='auto' is chosen per query .* Fix: pin one for this "
                                           r"query: frame\.bound\(max_rows=<a number>\) .*, or open the "):
        call(sess)
    assert sess.history().height == 0
