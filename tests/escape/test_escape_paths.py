"""Escape paths: nothing public hands back private rows, DuckDB sees only what the engine registers, and the
order of a result's rows carries no information about the private data.

1. Every object a user can reach through public attributes and free calls (session, frame, group-by,
   query, physical plan, explain output, SQL query, result, history, and the context and plan objects a
   mechanism plugin receives) is walked; none holds a private table handle (LazyFrame, Arrow table,
   DuckDB connection) or any private value (sentinels planted in the data).
2. ``sess.sql`` cannot name a caller's variable, a file, a table function or the engine's settings, in
   any position (FROM, JOIN, CTE, subquery, expression), on either backend — each is refused with a
   dpframe error and charges nothing; the engine's own DuckDB connections have replacement scans and
   external access off, and their configuration is locked.
3. Result rows come in key order, whatever the data, the input row order or the order keys were given
   in; with the same seed, shuffling the input rows changes nothing at all.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest

import dpframe as dp
from dpframe.mechanism import MeasureContext
from dpframe.sql.sandbox import connect
from dpframe.testing import pin_mechanisms

SECRET_TEXT = "S3CR3T-r0w-7f3a"
SECRET_FLOAT = 98765.4321
SECRET_INT = 313373133

PRIVATE = pl.DataFrame({
    "user": [1, 2, 3, 4, 5, 6],
    "city": ["a", "b", "a", SECRET_TEXT, "b", "a"],
    "x": [1.5, SECRET_FLOAT, 3.0, 4.0, 2.0, 1.0],
    "n": [1, 2, SECRET_INT, 4, 5, 6],
})
HANDLES = (pl.LazyFrame, pa.Table, duckdb.DuckDBPyConnection)
OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
          types.CodeType, types.FrameType)


def _holds_secret(obj: Any) -> bool:
    if isinstance(obj, str):
        return SECRET_TEXT in obj
    if isinstance(obj, float | int | np.number) and not isinstance(obj, bool):
        return obj in (SECRET_FLOAT, SECRET_INT)
    if isinstance(obj, pl.DataFrame):
        return any(_holds_secret(v) for col in obj.iter_columns() for v in col.to_list())
    if isinstance(obj, pl.Series):
        return any(_holds_secret(v) for v in obj.to_list())
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        return bool(np.isin(obj, [SECRET_FLOAT, SECRET_INT]).any()) if obj.dtype.kind in "iuf" else False
    return False


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"[{k!r}]", k
            yield f"[{k!r}]", v
        return
    if isinstance(obj, list | tuple | set | frozenset):
        for i, v in enumerate(obj):
            yield f"[{i}]", v
        return
    if isinstance(obj, str | bytes | int | float | bool | complex | pl.DataFrame | pl.Series | np.ndarray
                  | pl.Schema) or obj is None:
        return
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            value = inspect.getattr_static(obj, name)
        except AttributeError:
            continue
        if isinstance(value, property):
            try:
                value = getattr(obj, name)
            except Exception:  # noqa: BLE001 - a property that refuses is not a leak
                continue
        if callable(value) and not isinstance(value, HANDLES):
            continue                  # methods are checked by calling the free ones explicitly below
        yield f".{name}", value


def find_private(root: Any, path: str = "root", depth: int = 10) -> list[str]:
    """Paths (through public attributes and containers) to a private handle or a private value."""
    found: list[str] = []
    seen: set[int] = set()
    stack = [(path, root, 0)]
    while stack:
        where, obj, level = stack.pop()
        if id(obj) in seen or isinstance(obj, OPAQUE):
            continue
        seen.add(id(obj))
        if isinstance(obj, HANDLES):
            found.append(f"{where}: {type(obj).__name__}")
            continue
        if _holds_secret(obj):
            found.append(f"{where}: {type(obj).__name__}")
            continue
        if level < depth:
            stack += [(where + step, child, level + 1) for step, child in _children(obj)]
    return found


def test_the_walker_finds_what_it_looks_for() -> None:
    class Leaky:
        def __init__(self) -> None:
            self.rows = PRIVATE.lazy()
            self.nested = {"k": [("x", SECRET_FLOAT)]}
            self.frame = PRIVATE.select("city")
    assert sorted(find_private(Leaky())) == ["root.frame: DataFrame", "root.nested['k'][0][1]: float",
                                             "root.rows: LazyFrame"]


class SpyMechanism:
    """Records what a mechanism plugin is handed (the context, its plan) and releases nothing private."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seen = inner, []
        self.name, self.handles, self.notions = inner.name, inner.handles, inner.notions

    def validate(self, measure: dp.Measure, ctx: MeasureContext) -> None:
        self.seen.append(ctx)
        self.inner.validate(measure, ctx)

    def parts(self, measures: Any, ctx: MeasureContext) -> int:
        return self.inner.parts(measures, ctx)  # type: ignore[no-any-return]

    def plan(self, measures: Any, ctx: MeasureContext, share: dp.Budget) -> Any:
        plan = self.inner.plan(measures, ctx, share)
        self.seen += [ctx, plan]
        return plan


def test_no_public_object_reaches_private_rows() -> None:
    sess = dp.Session({"visits": PRIVATE}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
                      budget=dp.ApproxDP(50, 1e-5), seed=0)
    spy = SpyMechanism(sess.plugins.mechanism_for("sum", "pure"))
    pin_mechanisms(sess, spy)
    frame = sess.table("visits").filter(pl.col("x") > 0).with_columns(y=pl.col("x") * 2)
    grouped = frame.group_by("city", keys=["a", "b"])
    query = grouped.agg(dp.len(), dp.sum("y", bounds=(0, 10)), dp.mean("x", bounds=(0, 10)))
    selected = frame.group_by("city").agg(dp.len())
    sql = sess.sql("SELECT city, COUNT(*) AS n FROM visits GROUP BY city", keys={"city": ["a", "b"]})
    budget = dp.PureDP(1)
    reachable = {
        "session": sess, "frame": frame, "groupby": grouped, "query": query, "selected": selected, "sql": sql,
        "plan": query.plan(budget), "selected_plan": selected.plan(dp.ApproxDP(1, 1e-7)),
        "sql_plan": sql.plan(budget), "explain": query.explain(budget), "explain_json": query.explain(budget, "json"),
        "sql_explain": sql.explain(budget), "cost": query.cost(budget), "result": query.collect(budget),
        "selected_result": selected.collect(dp.ApproxDP(1, 1e-7)), "sql_result": sql.collect(budget),
        "history": sess.history(), "spent": sess.spent(), "remaining": sess.remaining(), "repr": repr(sess),
        "tables": sess.tables(), "schema": frame.schema, "plugin_saw": spy.seen,
    }
    assert spy.seen, "the spy mechanism was not used"
    leaks = find_private(reachable)
    assert not leaks, "private rows reachable through public objects:\n" + "\n".join(leaks)


# ------------------------------------------------------------------------------------------ DuckDB

ESCAPES = [
    "SELECT COUNT(*) AS n FROM caller_secret",                                     # a caller's variable
    "SELECT COUNT(*) AS n FROM visits JOIN caller_secret USING (user)",
    "WITH s AS (SELECT * FROM caller_secret) SELECT COUNT(*) AS n FROM s",
    "SELECT COUNT(*) AS n FROM read_csv('{file}')",                               # files
    "SELECT COUNT(*) AS n FROM read_csv_auto('{file}')",
    "SELECT COUNT(*) AS n FROM read_parquet('{file}')",
    "SELECT COUNT(*) AS n FROM read_json('{file}')",
    "SELECT COUNT(*) AS n FROM read_text('{file}')",
    "SELECT COUNT(*) AS n FROM read_blob('{file}')",
    "SELECT COUNT(*) AS n FROM glob('/etc/*')",
    "SELECT COUNT(*) AS n FROM '{file}'",
    "SELECT COUNT(*) AS n FROM sniff_csv('{file}')",
    "SELECT COUNT(*) AS n FROM visits JOIN read_csv('{file}') AS f ON TRUE",
    "WITH f AS (SELECT * FROM read_csv('{file}')) SELECT COUNT(*) AS n FROM f",
    "SELECT COUNT(*) AS n FROM visits WHERE x > (SELECT COUNT(*) FROM read_csv('{file}'))",
    "SELECT SUM(CLAMP(length(content), 0, 10)) AS s FROM read_text('{file}')",
    "SELECT COUNT(*) AS n FROM query('SELECT * FROM caller_secret')",              # dynamic SQL
    "SELECT COUNT(*) AS n FROM query_table('caller_secret')",
    "SELECT COUNT(*) AS n FROM duckdb_settings()",                                 # the engine
    "SELECT COUNT(*) AS n FROM duckdb_tables()",
    "SELECT COUNT(*) AS n FROM visits WHERE current_setting('enable_external_access')",
    "SELECT COUNT(*) AS n FROM visits WHERE getenv('HOME') IS NOT NULL",
    "COPY visits TO '{file}.out'",                                                 # statements
    "ATTACH '{file}.db' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "EXPORT DATABASE '{file}.dir'",
    "CREATE TABLE leak AS SELECT * FROM visits",
    "SELECT COUNT(*) AS n FROM visits; SELECT * FROM visits",
]


@pytest.fixture
def secret_file(tmp_path: Any) -> str:
    path = tmp_path / "secret.csv"
    path.write_text(f"a\n{SECRET_TEXT}\n")
    return str(path)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_sql_cannot_reach_variables_files_or_the_engine(backend: str, secret_file: str) -> None:
    caller_secret = PRIVATE  # noqa: F841 - the variable a replacement scan would find
    sess = dp.Session({"visits": PRIVATE}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(10), seed=0,
                      backend=backend)
    for text in ESCAPES:
        sql = text.format(file=secret_file)
        with pytest.raises(dp.DPFrameError) as info:
            sess.sql(sql).collect(dp.PureDP(1))
        assert SECRET_TEXT not in str(info.value), sql
    assert sess.spent().epsilon == 0, "a refused query was charged"
    assert sess.history().height == 0


def test_engine_connections_are_locked(secret_file: str) -> None:
    caller_secret = PRIVATE  # noqa: F841
    sess = dp.Session({"visits": PRIVATE}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(10), seed=0,
                      backend="duckdb")
    sess.table("visits").agg(dp.len()).collect(dp.PureDP(1))            # the backend locks on first use
    engine = sess._catalog.default_backend._con
    for con in (engine, connect()):
        settings = dict(con.execute("SELECT name, value FROM duckdb_settings()").fetchall())
        assert settings["python_enable_replacements"] == "false"
        assert settings["enable_external_access"] == "false"
        assert settings["lock_configuration"] == "true"
        with pytest.raises(duckdb.Error):
            con.execute("SELECT * FROM caller_secret").fetchall()
        with pytest.raises(duckdb.Error):
            con.execute(f"SELECT * FROM read_csv('{secret_file}')").fetchall()
        with pytest.raises(duckdb.Error):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error):
            con.execute("SET python_enable_replacements = true")


# --------------------------------------------------------------------------------------- row order


def _dataset(seed: int, rows: int = 300) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    return pl.DataFrame({"user": rng.integers(0, 60, rows), "city": rng.choice(["d", "b", "a", "c"], rows),
                         "x": rng.uniform(0, 10, rows)})


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_result_row_order_is_key_order_whatever_the_data(backend: str) -> None:
    for seed in range(4):
        data = _dataset(seed)
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=3),
                          budget=dp.ApproxDP(100, 1e-4), seed=seed, backend=backend)
        public = sess.table("t").group_by("city", keys=["d", "c", "a", "b", "zz"]).agg(dp.len())
        assert public.collect(dp.PureDP(1))["city"].to_list() == ["a", "b", "c", "d", "zz"]
        private = sess.table("t").group_by("city").agg(dp.len()).collect(dp.ApproxDP(5, 1e-5))["city"].to_list()
        assert private == sorted(private)
        sql = sess.sql("SELECT city, COUNT(*) AS n FROM t GROUP BY city ORDER BY n DESC",
                       keys={"city": ["d", "c", "a", "b"]})
        out = sql.collect(dp.PureDP(1))
        # ORDER BY a released value is post-processing: rows in released-n order, ties in key order.
        assert sorted(out["city"].to_list()) == ["a", "b", "c", "d"], out
        assert out.rows() == sorted(out.rows(), key=lambda r: (-r[1], r[0])), out


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_shuffling_the_input_rows_changes_nothing(backend: str) -> None:
    data = _dataset(11)
    shuffled = data.sample(fraction=1.0, shuffle=True, seed=5)
    assert not data.equals(shuffled)
    outs = []
    for table in (data, shuffled):
        sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
                          budget=dp.ApproxDP(100, 1e-4), seed=3, backend=backend)
        grouped = sess.table("t").group_by("city")
        outs.append((grouped.agg(dp.len(), dp.sum("x", bounds=(0, 10))).collect(dp.ApproxDP(4, 1e-5)),
                     sess.table("t").agg(dp.mean("x", bounds=(0, 10))).collect(dp.PureDP(1))))
    assert outs[0][0].equals(outs[1][0]) and outs[0][1].equals(outs[1][1]), outs
