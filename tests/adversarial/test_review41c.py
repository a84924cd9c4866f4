"""Review 41c: attacks on the code of stop 41.

Scope: the one process-wide DuckDB database that SQL post-processing and public subqueries now run on
(``dpframe.sql.sandbox.public_connection``: what code holding a cursor of it can make another query's
post-processing see), the Polars settings ``dpframe.engine_output.check_quiet`` refuses (review 41a), and the
integer ternary cast of ``dpframe.plan.totality`` (review 41b) with the other expression shapes whose batch
type could depend on the rows a batch holds.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from contextlib import contextmanager

import polars as pl
import pytest

import dpframe as dp
from dpframe.sql.sandbox import public_connection


def _session() -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"g": ["a", "b"] * 100, "x": [1.0, 3.0] * 100})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0,
                      public_tables={"names": pl.DataFrame({"g": ["a", "b"], "w": [-1, -2]})})


@contextmanager
def _macro(definition: str, name: str) -> Iterator[None]:
    """A macro created in the shared database's default schema (as any code holding a cursor can), then dropped."""
    with public_connection() as con:
        con.execute(f"CREATE MACRO memory.main.{definition}")
    try:
        yield
    finally:
        with public_connection() as con:
            con.execute(f"DROP MACRO IF EXISTS memory.main.{name}")


def test_a_macro_in_the_shared_database_does_not_change_a_release() -> None:
    """``public_connection()`` hands out cursors on one database; ``CREATE MACRO`` on one of them (the database is
    locked against settings and files, not against DDL) went to the database's ``main`` schema, which every later
    cursor searched before DuckDB's built-ins: ``CREATE MACRO abs(x) AS 1000`` made every session's
    ``ABS(COUNT(*))`` post-processing release 1000, and a public subquery's ``abs(w)`` read 1000 too. Each cursor
    now searches only its own temporary catalog (and the built-ins)."""
    sess = _session()
    with _macro("abs(x) AS 1000", "abs"):
        out = sess.sql("SELECT g, ABS(COUNT(*)) AS n FROM t GROUP BY g", keys={"g": ["a", "b"]}).collect(dp.PureDP(1))
        assert all(50 < n < 150 for n in out["n"])
        sub = sess.sql("WITH k AS (SELECT g, abs(w) AS w FROM names) "
                       "SELECT k.w, COUNT(*) AS n FROM t JOIN k ON t.g = k.g GROUP BY k.w",
                       keys={"w": [1, 2]}).collect(dp.PureDP(1))
        assert sorted(sub["w"]) == [1, 2]


def test_a_macro_added_after_the_check_does_not_fail_a_release_after_its_charge() -> None:
    """Post-processing is checked on a typical release when the query is built, and run after the charge: a macro
    created in between (``CREATE MACRO round(x, n) AS error('x')``) failed the release, charged. It no longer
    reaches the release's cursor."""
    sess = _session()
    q = sess.sql("SELECT g, ROUND(SUM(CLAMP(x, 0, 4)), 1) AS s FROM t GROUP BY g", keys={"g": ["a", "b"]})
    with _macro("round(x, n) AS error('x')", "round"):
        out = q.collect(dp.PureDP(1))
    assert out.height == 2 and sess.history()["status"].to_list() == ["committed"]


@pytest.mark.slow
def test_detaching_the_default_database_does_not_reach_other_cursors() -> None:
    """A cursor may ``ATTACH ':memory:' AS other; USE other; DETACH memory``: later cursors then opened on
    ``other``, whose objects (a macro there) they searched first. Each cursor searches its temporary catalog.
    (In a process of its own: the detach is for the process; 4 s.)"""
    import subprocess
    import sys
    code = ("import polars as pl, dpframe as dp\n"
            "from dpframe.sql.sandbox import public_connection\n"
            "with public_connection() as c:\n"
            "    for s in [\"ATTACH ':memory:' AS other\", 'USE other', 'DETACH memory',\n"
            "              'CREATE MACRO other.main.abs(x) AS 1000']:\n"
            "        c.execute(s)\n"
            "sess = dp.Session({'t': pl.DataFrame({'x': [1.0] * 100})}, privacy_unit=dp.PrivacyUnit.row(),\n"
            "                  budget=dp.PureDP(10), seed=0)\n"
            "print(sess.sql('SELECT ABS(COUNT(*)) AS n FROM t').collect(dp.PureDP(1))['n'][0])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert 50 < float(out.stdout.strip()) < 150


@contextmanager
def _engine_affinity(engine: object) -> Iterator[None]:
    try:
        pl.Config.set_engine_affinity(engine)  # type: ignore[arg-type]
        yield
    finally:
        pl.Config.set_engine_affinity(None)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_an_engine_object_set_as_polars_default_never_receives_private_rows(backend: str) -> None:
    """``pl.Config.set_engine_affinity(engine)`` takes an ``Engine`` object, and every ``collect()`` that names no
    engine hands its ``LazyFrame`` to that object's ``collect``: a subclass of ``InMemoryEngine`` kept what it
    collected, and a release on the Polars backend handed it the private rows (every unit id and value, then the
    exact sum); the DuckDB backend's session read its tables through it. A release, and a session, are refused
    while an engine object (or the GPU engine) is Polars' default, free; the engine never sees a row."""
    from polars.lazyframe.engine import InMemoryEngine

    seen: list[pl.DataFrame] = []

    class Spy(InMemoryEngine):
        def collect(self, lf: pl.LazyFrame, **kwargs: object) -> pl.DataFrame:  # type: ignore[override]
            out: pl.DataFrame = super().collect(lf, **kwargs)  # type: ignore[arg-type]
            seen.append(out)
            return out

    table = pl.DataFrame({"u": range(100), "x": [float(i) for i in range(100)]})

    def session() -> dp.Session:
        return dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10), seed=0,
                          backend=backend)

    sess = session()
    for engine in (Spy(), "gpu"):
        with _engine_affinity(engine):
            with pytest.raises(dp.ArgumentError) as e:
                sess.table("t").agg(dp.sum("x", bounds=(0, 100))).collect(dp.PureDP(1))
            assert e.value.argument == "pl.Config.set_engine_affinity"
            with pytest.raises(dp.ArgumentError):
                sess.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1))
            with pytest.raises(dp.ArgumentError):
                session()
    assert seen == [] and sess.history().height == 0
    with _engine_affinity("streaming"):     # a named engine of Polars' own is not refused
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1))


def test_an_engine_object_cannot_vouch_for_an_expression_the_probe_refuses() -> None:
    """The build-time isolation probe (``totality._run_probe``) runs each operation on adversarial values with
    Polars' default engine and caches its answer for the process. An ``Engine`` object set as the default that
    swallowed errors (answering nulls) made ``str.to_integer(base=1)`` pass it, and the answer was kept:
    ``total_expression`` accepted the operation after the default was restored. (The whole-expression probe of
    ``plan.nodes._derive``, run afresh for each query, still refused this one; the isolation probe exists for the
    operations it misses.) Every public method of the engine's objects is refused while such an engine is Polars'
    default, and so is the probe, so nothing it answers is kept."""
    from polars.lazyframe.engine import InMemoryEngine

    from dpframe.plan import totality

    class Liar(InMemoryEngine):
        def collect(self, lf: pl.LazyFrame, **kwargs: object) -> pl.DataFrame:  # type: ignore[override]
            try:
                return super().collect(lf, **kwargs)  # type: ignore[arg-type, no-any-return]
            except Exception:       # as many nulls as rows (a count's plan skips the failing column)
                rows = super().collect(lf.select(pl.len()), **kwargs).item()  # type: ignore[arg-type]
                return pl.DataFrame([pl.Series(c, [None] * rows, t) for c, t in lf.collect_schema().items()])

    expr, schema = pl.col("s").str.to_integer(base=1, strict=False), pl.Schema({"s": pl.String})
    sess = dp.Session({"t": pl.DataFrame({"s": ["7"]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10))
    try:
        with _engine_affinity(Liar()):
            with pytest.raises(dp.ArgumentError) as e:
                sess.table("t").with_columns(y=expr)
            assert e.value.argument == "pl.Config.set_engine_affinity"
            # refused by the engine check, or by the probe's refusal an earlier test in this process cached:
            # either way the operation is not accepted while the engine is set
            with pytest.raises((dp.ArgumentError, dp.PlanError)):
                totality.total_expression(expr, "y", schema)
        with pytest.raises(dp.PlanError, match="fails on some values"):
            totality.total_expression(expr, "y", schema)
    finally:
        totality._run_probe.cache_clear()  # type: ignore[attr-defined]


_P = pl.col("i") > 3


def _ternary(then: object, otherwise: object) -> pl.Expr:
    return pl.when(_P).then(then).otherwise(otherwise)


#: Shapes whose batch type Polars could take from the rows a batch holds (the integer ternary of review 41b, with
#: the functions that take a supertype of their inputs around it, and ternaries of other literal types).
_SHAPES = {
    "nested ternary": lambda: _ternary(pl.lit(3), pl.when(pl.col("i") > -5).then(pl.lit(2**40)).otherwise(pl.lit(-1))),
    "coalesce": lambda: pl.coalesce(_ternary(pl.lit(None), pl.lit(1)), pl.lit(2**40)),
    "fill_null": lambda: _ternary(pl.lit(1), None).fill_null(pl.lit(2**40)),
    "min_horizontal": lambda: pl.min_horizontal(_ternary(pl.lit(1), None), pl.lit(2**40)),
    "sum_horizontal": lambda: pl.sum_horizontal(_ternary(pl.lit(1), pl.lit(2)), pl.lit(2**40)),
    "Int128 literal": lambda: _ternary(pl.lit(1), pl.lit(2**70)),
    "UInt64 literal": lambda: _ternary(pl.lit(1), pl.lit(2**63 + 5)),
    "Float32 and Float64": lambda: _ternary(pl.lit(1.5, pl.Float32), pl.lit(2.5)),
    "decimals": lambda: _ternary(pl.lit(decimal.Decimal("1.5")), pl.lit(decimal.Decimal("123456.789"))),
    "date and datetime": lambda: _ternary(pl.lit(dt.date(2020, 1, 1)), pl.lit(dt.datetime(2020, 1, 1, 5))).dt.year(),
    "durations": lambda: _ternary(pl.lit(dt.timedelta(1)), pl.lit(dt.timedelta(microseconds=1))).dt.total_seconds(),
    "concat_str": lambda: pl.concat_str(_ternary(pl.lit(1), pl.lit(2**40)), pl.lit("a")).str.len_chars(),
    "bool and integer": lambda: _ternary(pl.lit(True), pl.lit(2**40)),
}

_NEIGHBOURS = {"d": [*range(-16, 4)], "d_plus": [*range(-16, 4), 5], "two": [1, 5]}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("shape", list(_SHAPES))
def test_supertyped_shapes_behave_alike_whatever_the_rows(shape: str, backend: str) -> None:
    """The sweep review 41c ran (around review 41b's integer ternary cast): each shape over a predicate that holds
    on no row of D, on one row of D′ (D′ also in one chunk per row) and on one of two rows, under the default and
    the streaming engine, gives one outcome and no failure. It found none (under 1 s a shape and backend)."""
    outcomes = set()
    for engine in ("auto", "streaming"):
        with _engine_affinity(engine):
            for name, values in _NEIGHBOURS.items():
                data = pl.DataFrame({"u": range(len(values)), "i": values})
                layouts = [data] + ([pl.concat([data.slice(k, 1) for k in range(data.height)], rechunk=False)]
                                    if name == "d_plus" else [])
                for layout in layouts:
                    sess = dp.Session({"t": layout}, privacy_unit=dp.PrivacyUnit("u", max_rows=2),
                                      budget=dp.ApproxDP(10, 1e-3), seed=0, backend=backend)
                    try:
                        sess.table("t").with_columns(v=_SHAPES[shape]()).agg(
                            s=dp.sum(pl.col("v").cast(pl.Float64, strict=False), bounds=(0, 1)),
                            n=dp.count("v")).collect(dp.ApproxDP(1, 1e-6))
                        seen = "released"
                    except BaseException as e:  # noqa: BLE001 - the analyst catches everything, panics included
                        seen = f"{type(e).__name__}: {e}"
                    outcomes.add((seen, tuple(sess.history()["status"].to_list())))
    assert len(outcomes) == 1 and "failed" not in next(iter(outcomes))[1], outcomes
