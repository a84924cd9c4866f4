"""The Spark backend beyond the shared conformance suite: expression translation, sessions over Spark
DataFrames and Parquet paths, identical releases to Polars for one seed, and bad input (nothing charged)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.spark import SparkBackend, _native, _Untranslatable
from dpframe.errors import DPFrameError, PlanError, SchemaError
from dpframe.plan.nodes import Filter, Scan, WithColumns

INF, NAN = float("inf"), float("nan")
TABLE = pl.DataFrame({
    "u": [1, 2, 3, 4, 5, 6, 7, 8],
    "x": [1.5, -2.0, NAN, INF, None, 0.0, 7.25, -INF],
    "i": [3, None, -4, 9_000_000_000, 0, 2, -1, 5],
    "b": [True, False, None, True, False, None, True, True],
    "s": ["a", "b", None, "a", "c", "b", "a", None],
    "d": [dt.date(2024, 1, k) for k in range(1, 9)],
})
SCHEMA = TABLE.schema

NATIVE = [  # translated to Spark columns: must agree with Polars on NaN, ±inf and nulls
    pl.col("x") > 1, pl.col("x") == 7.25, pl.col("x") <= pl.col("i"), pl.col("i") != 2, pl.col("s") >= "b",
    (pl.col("x") > 0) & pl.col("b"), (pl.col("x") < 0) | ~pl.col("b"), pl.col("x").is_nan(), pl.col("x").is_not_nan(),
    pl.col("s").is_null(), pl.col("i").is_not_null(), pl.col("d") < pl.col("d"),
    pl.when(pl.col("x") > 0).then(pl.col("i")).otherwise(pl.lit(None)) > 1,
]
NATIVE_COLUMNS = [
    (pl.col("i") * 2 + 1).alias("j"), (pl.col("x") * pl.col("i") - 0.5).alias("f"),
    pl.col("b").cast(pl.Int64, strict=False).alias("bi"), pl.col("i").cast(pl.Float64, strict=False).alias("fi"),
    pl.col("i").cast(pl.Int32, strict=False).alias("i32"),   # 9e9 overflows: null in both engines
    pl.when(pl.col("b")).then(pl.lit("yes")).otherwise(pl.col("s")).alias("w"),
]
THROUGH_POLARS = [  # no exact Spark equivalent known to dpframe: Polars runs them on the executors
    (pl.col("x") / pl.col("i")).alias("q"), pl.col("s").str.to_uppercase().alias("su"), pl.col("x").sqrt().alias("r"),
    (pl.col("x") == NAN).alias("n"), (pl.col("x") < INF).alias("fin"), pl.col("d").dt.weekday().alias("wd"),
    (pl.col("i") // 3).alias("fd"),
]


@pytest.fixture(scope="module")
def backend(spark_session: Any) -> SparkBackend:
    b = SparkBackend(spark_session)
    b.register("t", TABLE.lazy())
    return b


def _rows(backend: SparkBackend, node: Any) -> pl.DataFrame:
    frame = backend._node(backend._frames["t"], node, SCHEMA, 3)
    from dpframe.backends.spark import _decode

    return _decode(frame.toArrow(), dict(node.schema)).sort("u")


def _same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.schema == b.schema
    assert a.to_dicts() == b.to_dicts() or str(a.to_dicts()) == str(b.to_dicts())  # NaN != NaN in ==
MIXED_BRANCHES = [  # Spark would cast the String branch to a number (NumberFormatException on "a"): through Polars
    pl.when(pl.col("s") == "a").then(pl.col("s")).otherwise(pl.lit(1)).alias("m"),
    pl.when(pl.col("i") > 0).then(pl.col("i")).otherwise(pl.col("s")).alias("m"),
]


@pytest.mark.parametrize("predicate", NATIVE, ids=str)
def test_native_filters_match_polars(backend: SparkBackend, predicate: pl.Expr) -> None:
    node = Filter.of(Scan.of("t", SCHEMA), predicate)
    _native(node, SCHEMA)  # translated (raises _Untranslatable otherwise)
    _same(_rows(backend, node), node.apply(TABLE.lazy()).collect().sort("u"))


def test_native_columns_match_polars(backend: SparkBackend) -> None:
    node = WithColumns.of(Scan.of("t", SCHEMA), NATIVE_COLUMNS, {}, "u")
    _native(node, SCHEMA)
    _same(_rows(backend, node), node.apply(TABLE.lazy()).collect().sort("u"))


def test_other_expressions_run_through_polars_on_executors(backend: SparkBackend) -> None:
    node = WithColumns.of(Scan.of("t", SCHEMA), THROUGH_POLARS, {}, "u")
    with pytest.raises(_Untranslatable):
        _native(node, SCHEMA)
    _same(_rows(backend, node), node.apply(TABLE.lazy()).collect().sort("u"))


@pytest.mark.parametrize("column", MIXED_BRANCHES, ids=str)
def test_mixed_type_branches_are_not_translated(backend: SparkBackend, column: pl.Expr) -> None:
    node = WithColumns.of(Scan.of("t", SCHEMA), [column], {}, "u")
    with pytest.raises(_Untranslatable, match="mixes"):
        _native(node, SCHEMA)
    _same(_rows(backend, node), node.apply(TABLE.lazy()).collect().sort("u"))


# --------------------------------------------------------------------------------------------- sessions


def _visits(n: int = 3_000) -> pl.DataFrame:
    return pl.DataFrame({"user": [k % 400 for k in range(n)], "city": [f"c{k % 7}" for k in range(n)],
                         "spend": [float((k * 37) % 101) for k in range(n)]})


def _query(sess: dp.Session) -> pl.DataFrame:
    q = (sess.table("v").filter(pl.col("spend") > 10).with_columns(big=pl.col("spend") * 2)
         .group_by("city", keys=[f"c{k}" for k in range(8)])
         .agg(dp.len(), dp.sum("big", bounds=(0, 200)), dp.mean("spend", bounds=(0, 100))))
    return q.collect(dp.PureDP(1))


@pytest.mark.parametrize("kind", ["spark", pytest.param("parquet", marks=pytest.mark.slow),
                                  pytest.param("polars", marks=pytest.mark.slow)])
def test_same_release_as_polars_for_a_seed(spark_session: Any, tmp_path: Any, kind: str) -> None:
    """Bounding binds nowhere (≤ 8 rows per user): same statistics, same seed ⇒ identical released values,
    for a Spark DataFrame, a Parquet path read by Spark, and a Polars frame shipped to Spark."""
    data = _visits()
    unit = dp.PrivacyUnit("user", max_rows=8)
    path = tmp_path / "v.parquet"
    data.write_parquet(path)
    source = {"spark": spark_session.createDataFrame(data.to_arrow()), "parquet": str(path), "polars": data}[kind]
    want = _query(dp.Session({"v": data}, privacy_unit=unit, budget=dp.PureDP(5), seed=42))
    sess = dp.Session({"v": source}, privacy_unit=unit, budget=dp.PureDP(5), seed=42, backend="spark",
                      spark=spark_session)
    assert sess.backend_name == "spark"
    assert _query(sess).equals(want)


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_64_bit_sums_that_could_leave_64_bits_run_again_wide(spark_session: Any, ansi: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Four terms of 2^62 leave 64 bits: ANSI mode raises an overflow, without it the sum wraps; either way
    the backend runs the sums again in DECIMAL(38,0) and the total saturates. Small sums run once."""
    from dpframe.backends.base import StatisticsRequest
    from dpframe.mechanism import SUM_LIMIT, Statistic

    runs: list[bool] = []
    real = SparkBackend._aggregate_all

    def counted(self: Any, *args: Any, wide: bool) -> Any:
        runs.append(wide)
        return real(self, *args, wide=wide)
    monkeypatch.setattr(SparkBackend, "_aggregate_all", counted)
    before = spark_session.conf.get("spark.sql.ansi.enabled")
    spark_session.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        b = SparkBackend(spark_session)
        b.register("t", pl.LazyFrame({"x": [2.0**62] * 4}))
        huge, small = (Statistic("fixed_sum", "x", Fraction(0), Fraction(top), grid_exp=0) for top in (2**62, 10))
        for stat, want, wide in ((huge, SUM_LIMIT, [False, True]), (small, 40, [False])):
            runs.clear()
            out = b.statistics(StatisticsRequest("t", (), dp.PrivacyUnit.row(), (), None, (stat,), 1))
            assert out[stat.key].item() == want and runs == wide
    finally:
        spark_session.conf.set("spark.sql.ansi.enabled", before)


def test_spark_table_seen_by_another_backend(spark_session: Any) -> None:
    """The session's Polars view of a Spark table reads it from Spark (sess.sql(..., backend="polars"))."""
    data = _visits(500)
    sess = dp.Session({"v": spark_session.createDataFrame(data.to_arrow())}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(4), seed=1, backend="spark", spark=spark_session)
    ref = dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(4), seed=1)
    text = "SELECT COUNT(*) AS n, SUM(CLAMP(spend, 0, 50)) AS s FROM v WHERE spend > 3"
    assert sess.sql(text, backend="polars").collect(dp.PureDP(1)).equals(ref.sql(text).collect(dp.PureDP(1)))


# ---------------------------------------------------------------------------------------------- bad input


def test_without_pyspark_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(DPFrameError, match=r"pip install 'dpframe\[spark\]'"):
        dp.Session({"t": TABLE}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), backend="spark")


def test_core_import_does_not_load_pyspark() -> None:
    code = "import sys, dpframe as dp; dp.plugin.plugin_host().backend_names(); print('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_bad_tables_and_arguments(spark_session: Any) -> None:
    unit = dp.PrivacyUnit("user", max_rows=2)
    spark_df = spark_session.createDataFrame(TABLE.to_arrow())
    with pytest.raises(SchemaError, match="no privacy-unit column 'user'"):
        dp.Session({"t": spark_df}, privacy_unit=unit, budget=dp.PureDP(1), backend="spark", spark=spark_session)
    backend = SparkBackend(spark_session)
    with pytest.raises(SchemaError, match=r"has no column\(s\) \['z'\]"):   # declared schema vs the Spark table
        backend.register_source("t", TABLE.lazy().with_columns(z=pl.lit(1)), spark_df)
    with pytest.raises(SchemaError, match="map<string,int>"):
        bad = spark_session.sql("SELECT 1 AS u, map('a', 1) AS m")
        dp.Session({"t": bad}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), backend="spark",
                   spark=spark_session)
    with pytest.raises(SchemaError, match="cannot store"):
        ns = TABLE.with_columns(ts=pl.lit(dt.datetime(2024, 1, 1)).cast(pl.Datetime("ns")))
        dp.Session({"t": ns}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), backend="spark",
                   spark=spark_session)
    with pytest.raises(SchemaError, match="is empty"):
        dp.Session({"t": spark_df.limit(0)}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1),
                   backend="spark", spark=spark_session)
    with pytest.raises(DPFrameError, match="spark= is for backend='spark'"):
        dp.Session({"t": TABLE}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), spark=spark_session)
    with pytest.raises(DPFrameError, match="expected a pyspark.sql.SparkSession"):
        dp.Session({"t": TABLE}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), backend="spark",
                   spark="local[2]")


def test_bad_queries_charge_nothing(spark_session: Any) -> None:
    sess = dp.Session({"t": spark_session.createDataFrame(TABLE.to_arrow())}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.PureDP(1), backend="spark", spark=spark_session, seed=0)
    before = sess.spent()
    with pytest.raises(SchemaError):
        sess.table("t").filter(pl.col("nope") > 1).agg(dp.len()).collect(dp.PureDP(0.5))
    with pytest.raises(PlanError, match="cannot run"):   # a DuckDB-only SQL function
        sess.sql("SELECT COUNT(*) FROM t WHERE levenshtein(s, 'ab') < 2").collect(dp.PureDP(0.5))
    assert sess.spent() == before


def test_null_units_are_dropped_in_a_session(spark_session: Any) -> None:
    """Documented handling: rows whose privacy unit is NULL belong to nobody and are dropped (every backend)."""
    data = pl.DataFrame({"u": [1, None, 2, None, 3], "x": [1.0, 2.0, 3.0, 4.0, 5.0]})
    kept = data.filter(pl.col("u").is_not_null())
    run = [dp.Session({"t": d}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), backend="spark",
                      spark=spark_session, seed=5).table("t").agg(dp.len()).collect(dp.PureDP(1)) for d in (data, kept)]
    assert run[0].equals(run[1])


def test_a_parquet_directory_that_changes_is_refused(spark_session: Any, tmp_path: Any) -> None:
    """A file added under a Parquet directory after the session was created: refused, nothing charged."""
    folder = tmp_path / "visits"
    folder.mkdir()
    pl.DataFrame({"u": [1, 2, 3]}).write_parquet(folder / "part-0.parquet")
    sess = dp.Session({"v": str(folder)}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(2), backend="spark",
                      spark=spark_session)
    sess.table("v").agg(dp.len()).collect(dp.PureDP(1))
    pl.DataFrame({"u": [1] * 50}).write_parquet(folder / "part-1.parquet")
    with pytest.raises(dp.TableChangedError, match="tables\\['v'\\]"):
        sess.table("v").agg(dp.len()).collect(dp.PureDP(1))
    assert sess.spent() == dp.PureDP(1)


def test_a_changed_directory_refuses_only_the_queries_that_read_it(spark_session: Any, tmp_path: Any) -> None:
    """Two Parquet directories; a file added under one: queries on the other still run."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        pl.DataFrame({"u": [1, 2, 3]}).write_parquet(tmp_path / name / "part-0.parquet")
    sess = dp.Session({"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.PureDP(2), backend="spark", spark=spark_session)
    pl.DataFrame({"u": [1] * 50}).write_parquet(tmp_path / "b" / "part-1.parquet")
    with pytest.raises(dp.TableChangedError, match="tables\\['b'\\]"):
        sess.table("b").agg(dp.len()).collect(dp.PureDP(1))
    assert sess.history().height == 0
    sess.table("a").agg(dp.len()).collect(dp.PureDP(1))
    assert sess.spent() == dp.PureDP(1)


def test_unreadable_sources_are_schema_errors_naming_the_table(spark_session: Any, tmp_path: Any) -> None:
    """Spark read failures at registration (no Delta Lake, a corrupt file) are dpframe errors with a hint."""
    delta = tmp_path / "delta"
    (delta / "_delta_log").mkdir(parents=True)
    with pytest.raises(SchemaError) as info:
        dp.Session({"events": delta}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), backend="spark",
                   spark=spark_session)
    assert info.value.argument == "tables['events']" and "delta-spark" in (info.value.fix or "")
    assert "Spark cannot read the Delta table" in str(info.value) and "\n" not in str(info.value)
    corrupt = tmp_path / "bad.parquet"
    corrupt.write_bytes(b"not a parquet file")
    with pytest.raises(SchemaError, match=r"Spark cannot read the Parquet data") as info:
        dp.Session({"v": corrupt}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), backend="spark",
                   spark=spark_session)
    assert info.value.argument == "tables['v']" and "\n" not in str(info.value)


def test_without_java_a_clear_error(tmp_path: Any) -> None:
    """No Java (JAVA_HOME pointing nowhere, in a subprocess): a DPFrameError naming spark= and the fix."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pandas")
    code = ("import polars as pl, dpframe as dp\n"
            "try:\n"
            "    dp.Session({'t': pl.DataFrame({'u': [1]})}, privacy_unit=dp.PrivacyUnit('u'),\n"
            "               budget=dp.PureDP(1), backend='spark')\n"
            "except dp.DPFrameError as e:\n"
            "    print('DPFrameError', e.argument, '|', e.fix)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    env["JAVA_HOME"] = str(tmp_path / "no-java")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.stdout.startswith("DPFrameError spark | install Java 17+"), (proc.stdout, proc.stderr[-2000:])


@pytest.mark.slow
def test_a_session_dpframe_starts_itself_answers() -> None:
    """``backend="spark"`` with no SparkSession (a fresh process): dpframe starts a local one and it answers.

    Spark 4 starts a local driver log at INFO, which dpframe refuses (it prints statistics of the private rows):
    every session dpframe started was refused before any query. It now sets its own session's log to WARN; a
    session the analyst started at INFO is still refused.
    """
    from tests.conftest import spark_unavailable
    if spark_unavailable():
        pytest.skip(spark_unavailable())
    code = ("import polars as pl, dpframe as dp\n"
            "from pyspark.sql import SparkSession\n"
            "sess = dp.Session({'t': pl.DataFrame({'u': [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit('u'),\n"
            "                  budget=dp.PureDP(10**6), backend='spark', seed=0)\n"
            "print('released', sess.table('t').agg(dp.len()).collect(dp.PureDP(10**6)).item())\n"
            "SparkSession.getActiveSession().sparkContext.setLogLevel('INFO')\n"
            "try:\n"
            "    sess.table('t').agg(dp.len()).collect(dp.PureDP(1))\n"
            "except dp.DPFrameError as e:\n"
            "    print('refused', e.argument, len(sess.history()))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.stdout.split("\n")[:2] == ["released 3", "refused spark 1"], (proc.stdout, proc.stderr[-2000:])


def test_time_zone_aware_datetimes_register_and_answer(spark_session: Any) -> None:
    """A tz-aware Datetime column is stored as a Spark TIMESTAMP (an instant) and reads back as the same instants."""
    stamps = TABLE.with_columns(ts=pl.datetime(2024, 1, 1, time_zone="Europe/Paris") + pl.duration(hours=pl.col("u")))
    sess = dp.Session({"t": stamps}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1e6), backend="spark",
                      spark=spark_session, seed=0)
    cut = pl.lit(dt.datetime(2024, 1, 1, 2, tzinfo=dt.UTC)).dt.convert_time_zone("Europe/Paris")
    released = sess.table("t").filter(pl.col("ts") >= cut).agg(dp.len()).collect(dp.PureDP(1e6))
    assert abs(released.item(0, "len") - stamps.filter(pl.col("ts") >= cut).height) <= 1


def test_a_spark_session_dpframe_creates_runs_its_workers_on_this_python(monkeypatch: pytest.MonkeyPatch,
                                                                         spark_starts: Any) -> None:
    """Without ``PYSPARK_PYTHON``, Spark's workers ran the first ``python3`` on the path: one without Polars
    made every query with a step Spark runs through Polars fail after its charge (review 32d's note). A
    session dpframe creates now names this interpreter; ``PYSPARK_PYTHON``, when set, still wins."""
    starts = spark_starts("session")
    monkeypatch.setattr("dpframe.backends.spark._check_metrics", lambda spark: None)  # (test_review33a.py)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert starts.backend().spark == "session" and ("spark.pyspark.python", sys.executable) in starts.seen
    starts.seen.clear()
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python")
    assert starts.backend().spark == "session" and not any(key == "spark.pyspark.python" for key, _ in starts.seen)
