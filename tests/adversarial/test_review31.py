"""Review 31: process-wide caches and helpers the engine's checks rely on, reachable through public names; the
analyst's DataFrames and expressions read more than once; files whose rows no query can read.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl
import pytest

import dpframe as dp


def test_the_probe_values_handed_out_are_copies() -> None:
    """``dpframe.plan.values.probe_values(dtype)`` returned the process-wide cached Series the totality probe
    runs every operation on: ``probe_values(pl.Datetime("us")).scatter(...)`` overwrote the extreme dates
    with ordinary ones, ``dt.cast_time_unit("ns")`` then passed the build-time probe, and the query failed
    after its charge exactly when some row's date was beyond 2262 (an exception oracle, charged, for every
    later query in the process). The values and frames handed out are copies."""
    from dpframe.plan.values import probe_frame, probe_values
    dtype = pl.Datetime("us")
    before = probe_values(dtype)
    probe_values(dtype).scatter(list(range(before.len() - 1)), dt.datetime(2000, 1, 1))
    probe_frame(pl.Schema({"d": dtype}))[0, "d"] = dt.datetime(2000, 1, 1)
    assert probe_values(dtype).equals(before) and probe_frame(pl.Schema({"d": dtype}))["d"].equals(before.alias("d"))
    data = pl.DataFrame({"d": [dt.datetime(2000, 1, 1), dt.datetime(3000, 1, 1)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    with pytest.raises(dp.PlanError, match="CastTimeUnit"):
        sess.table("t").with_columns(n=pl.col("d").dt.cast_time_unit("ns")).agg(dp.len())
    assert sess.history().height == 0


def test_the_sql_function_catalog_is_read_only() -> None:
    """``dpframe.sql.sandbox.function_types()`` returned the cached dict the SQL checker classifies functions
    by: ``function_types()["txid_current"] = frozenset({"scalar"})`` let ``WHERE txid_current() % 2 = 1``
    through again, and it counted 0 rows on D and 201 on D′ (one more person with two equal rows: one
    bounding query more), the attack ``test_query_time_functions.py`` closed. The mapping is read-only."""
    from dpframe.sql.sandbox import function_types
    kinds = function_types()
    with pytest.raises(TypeError):
        kinds["txid_current"] = frozenset({"scalar"})  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        kinds.pop("random")  # type: ignore[attr-defined]
    assert "of_query" in function_types()["txid_current"] and "volatile" in function_types()["random"]


def test_the_shared_parsing_connection_is_not_handed_out() -> None:
    """``dpframe.sql.sandbox.shared()`` yielded the process-wide DuckDB connection that derives every SQL
    expression's type. It is locked against files and settings, not against DDL: ``CREATE MACRO upper(x)
    AS length(x)`` on it made ``upper(s)`` an integer to the planner while the backend ran DuckDB's own
    ``upper``, and ``SUM(CLAMP(upper(s), 0, 10))`` was released when every string was a number and failed
    after its charge (ConversionException) when one was not. That connection is private now; ``connect()``
    gives a new connection of one's own."""
    from dpframe.sql import sandbox
    assert not hasattr(sandbox, "shared")
    con = sandbox.connect()
    con.execute("CREATE MACRO upper(x) AS length(x)")
    assert con.execute("SELECT upper('ab')").fetchall() == [(2,)]
    for rows in (["1", "2"], ["1", "x"]):
        sess = dp.Session({"t": pl.DataFrame({"s": rows})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10),
                          seed=0, backend="duckdb")
        q = sess.sql("SELECT SUM(CLAMP(upper(s), 0, 10)) AS total FROM t")
        with pytest.raises(dp.SchemaError, match="needs a numeric column"):
            q.collect(dp.PureDP(1))
        assert sess.history().height == 0


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_public_join_keeps_the_table_it_was_checked_with(backend: str) -> None:
    """A SQL join with a public table is row-level because the public join keys are unique (checked when the
    query is built); the node kept the public rows as an ordinary DataFrame, read again when the query runs.
    ``node.data[1, "__dp_key0"] = 1`` on ``q.node``'s join made two public rows match key 1: each of its
    private rows was counted twice (110 rows counted as 200 at a row unit's sensitivity 1, both backends).
    The joined table is read-only."""
    data = pl.DataFrame({"k": [1] * 100 + [2] * 10})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(100), seed=0, backend=backend,
                      public_tables={"p": pl.DataFrame({"k": [1, 2], "name": ["a", "b"]})})
    q = sess.sql("SELECT COUNT(*) AS n FROM t JOIN p ON t.k = p.k")
    (join,) = [n for n in q.node.lineage() if type(n).__name__ == "PublicJoin"]
    key = join.data.columns[0]
    with pytest.raises(TypeError, match="read-only"):
        join.data[1, key] = 1
    with pytest.raises(TypeError, match="read-only"):
        join.data.replace_column(0, pl.Series(key, [1, 1]))
    with pytest.raises(TypeError, match="read-only"):
        join.schema["name"] = pl.Int64
    assert abs(q.collect(dp.PureDP(50))["n"][0] - 110) < 10


def test_multi_label_pate_releases_the_queries_it_charged() -> None:
    """``MultiLabelPATE.collect`` counted the vote table's queries for the charge, then read the table again
    when it ran: a DataFrame whose ``select`` gave one query on the first read and 100 after (or a table
    another thread extended in place meanwhile) released 100 label sets for the charge of one (the ledger
    said ``T=1``). The table is read once, and the run releases what was counted."""
    from dpframe_topk import MultiLabelPATE

    def votes(t: int) -> pl.DataFrame:
        return pl.DataFrame({"query": [q for q in range(t) for _ in range(3)], "label": ["a", "b", "c"] * t,
                             "vote": [700, 10, 5] * t})

    class Growing(pl.DataFrame):
        reads = 0

        def select(self, *args: object, **kwargs: object) -> pl.DataFrame:
            Growing.reads += 1
            return (votes(1) if Growing.reads == 1 else votes(100)).select(*args, **kwargs)  # type: ignore[arg-type]
    sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ZCDP(100, 1e-3),
                      seed=0)
    pate = MultiLabelPATE()
    out = pate.collect(sess, Growing(votes(1)))
    assert out.height == 1 and sess.spent() == pate.cost(1)


def test_public_keys_given_as_a_dataframe_subclass_are_read_as_plain_data() -> None:
    """``_public_keys`` checked a keys DataFrame through its own ``schema``: a subclass whose ``schema`` said
    String while its column held integers passed the type check, and the integer keys reached the backend.
    On DuckDB the string column was then compared with integers: the count was released when every string
    was a number and failed after its charge (InvalidOperationError) when one was not. Keys are read once
    into a plain DataFrame before any check."""
    class Liar(pl.DataFrame):
        @property
        def schema(self) -> pl.Schema:  # type: ignore[override]
            return pl.Schema({"g": pl.String})
    for rows in (["1", "2", "3"], ["1", "2", "x"]):
        sess = dp.Session({"t": pl.DataFrame({"g": rows * 50})}, privacy_unit=dp.PrivacyUnit.row(),
                          budget=dp.PureDP(10), seed=0, backend="duckdb")
        with pytest.raises(dp.SchemaError, match="keys for 'g' are Int64") as info:
            sess.table("t").group_by("g", keys=Liar({"g": [1, 2]})).agg(dp.len())
        assert info.value.argument == "keys" and sess.history().height == 0


def test_an_expression_subclass_runs_what_was_checked() -> None:
    """The allow-list and the totality probe read an expression through its ``meta`` namespace; the backend
    ran the expression object itself. ``Masked.deserialize(...)`` (a ``pl.Expr`` subclass, built through
    Polars' public API) whose ``meta`` showed ``pl.col("x") <= 49`` while it computed
    ``pl.col("x") <= pl.col("x").max() - 50`` — an aggregate inside a filter, never row-level — counted
    50 rows on D and 100 on D′ (one more row, x = 1000) at a count's sensitivity 1. Expressions are read
    once into a plain ``pl.Expr``, and that is what is checked and run."""
    import io

    class Masked(pl.Expr):
        @property
        def meta(self) -> Any:  # type: ignore[override]
            return (pl.col("x") <= 49).meta
    real = pl.col("x") <= pl.col("x").max() - 50
    masked = Masked.deserialize(io.StringIO(real.meta.serialize(format="json")), format="json")
    assert type(masked) is Masked
    sess = dp.Session({"t": pl.DataFrame({"x": [float(i) for i in range(100)]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=0)
    t = sess.table("t")
    for build in (lambda: t.filter(masked), lambda: t.with_columns(masked.alias("y")), lambda: t.select(y=masked),
                  lambda: t.group_by(masked.alias("y"), keys=[True, False])):
        with pytest.raises(dp.PlanError, match="row"):
            build()
    assert sess.history().height == 0


def _bad_utf8_parquet(path: str) -> None:
    """A Parquet file whose last string is not UTF-8 (written without validation, as a buggy writer could)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    values = [b"a", b"b"] * 50 + [b"\xff\xfe"]
    offsets = pa.array([sum(len(v) for v in values[:i]) for i in range(len(values) + 1)], pa.int32())
    data = pa.py_buffer(b"".join(values))
    strings = pa.Array.from_buffers(pa.string(), len(values), [None, offsets.buffers()[1], data])
    pq.write_table(pa.table({"s": strings, "x": [1.0] * len(values)}), path)


@pytest.mark.parametrize(("kind", "backend"), [("csv", "polars"), ("parquet", "polars"), ("parquet", "duckdb")])
def test_a_file_with_a_row_no_query_can_read_is_refused_when_the_session_is_created(
        kind: str, backend: str, tmp_path: Any) -> None:
    """A file's schema comes from its first rows (CSV) or its metadata (Parquet); its values are parsed by each
    query. One unit's row that does not parse (``oops`` in a column the first 5000 rows made Int64; a string
    that is not UTF-8) made every query reading that column fail after its charge, while the same file
    without the row answered: the failure told D′ from D with certainty, at any ε. Every value is read
    once when the session is created (the data owner sees the error; nothing is charged)."""
    path = str(tmp_path / f"t.{kind}")
    if kind == "csv":
        with open(path, "w") as f:
            f.write("u,x\n" + "".join(f"{i},{i % 10}\n" for i in range(5000)) + "9999,oops\n")
    else:
        _bad_utf8_parquet(path)
    with pytest.raises(dp.SchemaError, match="cannot read table 't'") as info:
        dp.Session({"t": path}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0, backend=backend)
    assert info.value.argument == "tables['t']"
