"""Review 55f: Spark and DuckDB backend leftovers from review 54.

**A failing Spark task printed its row's values on standard error.** Spark's executor (``ERROR Executor: Exception
in task``, in the driver's JVM in local mode), its scheduler (``WARN TaskSetManager: Lost task ...``) and PySpark's
own ``SQLQueryContextLogger`` (a JSON line on the driver's standard error, whenever a Spark error with a query
context reaches Python) quote the failing task's exception, which quotes the value it failed on (``[CAST_INVALID_INPUT]
The value 'secret-4817' ...``, a Python worker's traceback), at WARN and ERROR alike: the process reads its own
standard error. dpframe refuses the failures it knows of before the charge, but a failure it does not know of (and
ANSI mode's 64-bit sum overflow, which the backend catches and reruns in DECIMAL(38,0) — a fact of the private rows
printed as ``Lost task ... ARITHMETIC_OVERFLOW``) reached the log. The backend now turns those loggers off on every
SparkSession it takes (:func:`~dpframe.backends.spark.quiet_task_failures`), and a release is refused, free, while
one of them is back on (:meth:`SparkBackend.check_quiet`).

**Two sessions shared Spark's cache** (keyed by the plan, across a SparkSession's sessions): now scoped to each
backend. **Decimals beyond 38 digits** were null on Spark only: refused on every backend when the session is
created. **DuckDB's window sample was not seeded**: it is now; and the release is shown not to depend on where the
windows sit, on all three backends.

Red team, nothing found (not kept as tests): 16 column types at their extremes (Int64/UInt64/Int8 ends, NaN/±inf/
subnormal floats, Float16, a 38-digit decimal, Date and Datetime at the ends of their 32/64-bit ranges, UTC
datetimes, odd strings, Categorical, Enum, Boolean, an all-null column, Binary) under counts, sums, means,
medians, public and private keys, on all three backends with and without a unit; and 46 row-level expressions
(overflowing integer arithmetic, division by zero, lossy casts, decimal products, date arithmetic at the ends,
string steps through Polars on the executors, categorical and enum comparisons) under sums, filters, sampled frames
and ``bound(max_rows=1)`` with a group-by on the result: no failure after a charge and no raw error on any backend.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp


def _session(spark: Any, table: Any = None, **kw: Any) -> dp.Session:
    t = table if table is not None else pl.DataFrame({"u": list(range(40)), "x": [float(i % 7) for i in range(40)]})
    args: dict[str, Any] = dict(privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=5, backend="spark",
                                spark=spark)
    return dp.Session({"t": t}, **(args | kw))


# ------------------------------------------------------------------------------------ 1. task failure logs


def test_taking_a_session_turns_the_task_failure_logs_off(spark_session: Any) -> None:
    """A SparkSession with Spark's default loggers (the executor's at ERROR, as a fresh one has them) is quieted
    when dpframe takes it: its task-failure loggers and PySpark's query-context loggers print nothing."""
    from dpframe.backends.spark import TASK_LOGGERS, quiet_task_failures

    jvm = spark_session.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    for name in TASK_LOGGERS:   # as a SparkSession nobody quieted
        log4j.core.config.Configurator.setLevel(name, log4j.Level.ERROR)
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        _session(spark_session)
        assert not any(log4j.LogManager.getLogger(name).isErrorEnabled() for name in TASK_LOGGERS)
        assert not logging.getLogger("SQLQueryContextLogger").isEnabledFor(logging.ERROR)
        assert not logging.getLogger("DataFrameQueryContextLogger").isEnabledFor(logging.ERROR)
    finally:
        quiet_task_failures(spark_session)


@pytest.mark.parametrize("logger", ["org.apache.spark.executor.Executor", "SQLQueryContextLogger"])
def test_a_release_is_refused_free_while_a_task_failure_log_is_back_on(spark_session: Any, logger: str) -> None:
    """Turned back on after the session took the SparkSession (code in the process may), the next release is
    refused before its charge, naming ``spark`` and the logger."""
    from dpframe.backends.spark import quiet_task_failures

    sess = _session(spark_session)
    spent = sess.spent()
    log4j = spark_session.sparkContext._jvm.org.apache.logging.log4j
    if logger.startswith("org."):
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.WARN)
    else:
        logging.getLogger(logger).setLevel(logging.ERROR)
    try:
        with pytest.raises(dp.ArgumentError) as refused:
            sess.table("t").agg(n=dp.len()).collect(dp.PureDP(1))
        assert refused.value.argument == "spark" and logger in str(refused.value)
        assert sess.spent() == spent
    finally:
        quiet_task_failures(spark_session)
    assert sess.table("t").agg(n=dp.len()).collect(dp.PureDP(1)).height == 1


_FAILING = textwrap.dedent("""
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    import polars as pl, dpframe as dp
    import dpframe.backends.spark as backend
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    t = pl.DataFrame({"u": [1, 2, 3], "x": [4817, 4818, 4819]})
    sess = dp.Session({"t": t}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend="spark",
                      spark=spark)
    # a task failure dpframe does not know of (every known one is refused before the charge): a statistic that
    # casts a row's value, quoted, to INT under ANSI mode
    backend.aggregate = lambda s, unit, schema, wide: (
        f"max(CAST(concat('secret-', CAST(x AS STRING)) AS INT)) AS {backend.ident(s.key)}")
    try:
        sess.table("t").agg(n=dp.len()).collect(dp.PureDP(1))
    except dp.DPFrameError as e:
        print("failed", type(e).__name__, "secret" in str(e))
    try:   # and the data owner's own job on the SparkSession dpframe took
        spark.createDataFrame([("secret-4817",)], "s string").selectExpr("CAST(s AS INT)").collect()
    except Exception as e:
        print("raised", type(e).__name__)
""")


@pytest.mark.slow
def test_a_failing_task_prints_no_value(tmp_path: Path) -> None:
    """Attack: a task failing on a row (here forced: a statistic casting ``'secret-<x>'`` to INT under ANSI mode)
    printed ``The value 'secret-4817' ...`` on the driver's standard error three times (the executor's ERROR, the
    scheduler's WARN, PySpark's JSON line). On a SparkSession dpframe took, nothing of it reaches standard error
    or standard output, in a release or in a job of the data owner's own."""
    out = subprocess.run([sys.executable, "-c", _FAILING], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "failed DPFrameError False" in out.stdout and "raised NumberFormatException" in out.stdout, \
        out.stdout + out.stderr[-3000:]
    assert "secret" not in out.stderr and "4817" not in out.stderr and "4818" not in out.stderr, out.stderr[-3000:]


# ------------------------------------------------------------------------------------ 3. decimals beyond 38 digits


def _decimal_table(unscaled: int, precision: int = 38, scale: int = 1) -> pl.DataFrame:
    """40 rows (one unit each) of a ``Decimal(precision, scale)`` column ``d``; row 0 holds ``unscaled`` (its 128-bit
    integer, which may have 39 digits whatever the precision: an Arrow array viewed or cast unsafely)."""
    from decimal import Decimal

    import pyarrow as pa

    values = [Decimal(unscaled), *[Decimal(10 * i) for i in range(39)]]
    column = pa.array(values, pa.decimal256(76, 0)).cast(pa.decimal128(38, 0), safe=False).view(
        pa.decimal128(precision, scale))
    frame = pl.from_arrow(pa.table({"u": list(range(40)), "d": column}))
    assert isinstance(frame, pl.DataFrame)
    return frame


@pytest.mark.parametrize("backend", ["polars", "duckdb", "spark"])
@pytest.mark.parametrize("unscaled", [10**38, -(10**38), 2**127 - 1], ids=["1e38", "-1e38", "2^127-1"])
def test_a_decimal_beyond_38_digits_is_refused_when_the_session_is_created(backend: str, unscaled: int,
                                                                          request: Any) -> None:
    """Attack (conformance): a Polars ``Decimal(38, 1)`` holding 10³⁸ unscaled (39 digits) was kept by Polars and
    DuckDB and became null on Spark when shipped (:func:`~dpframe.backends.spark._in_38_digits`), so a filter or a
    statistic reading it counted that row on two backends and not on the third. Such a table is now refused
    on every backend when the session is created (the data owner's act, nothing charged: the catalog's one read of
    every value), a SchemaError naming the table and the column."""
    spark = request.getfixturevalue("spark_session") if backend == "spark" else None
    with pytest.raises(dp.SchemaError) as refused:
        dp.Session({"t": _decimal_table(unscaled)}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1),
                   backend=backend, **({"spark": spark} if spark is not None else {}))
    assert refused.value.argument == "tables['t']" and "'d'" in str(refused.value) and "38 digits" in str(refused.value)


@pytest.mark.parametrize("precision", [38, pytest.param(3, marks=pytest.mark.slow)])
def test_the_widest_decimals_agree_on_the_three_backends(spark_session: Any, precision: int) -> None:
    """38 digits (the most every backend holds): the same seeded release on Polars, DuckDB and Spark, the widest
    values counted alike; a narrow declared precision (``Decimal(3, 1)``) holding them too."""
    table = _decimal_table(10**38 - 1, precision)
    out = []
    for backend in ("polars", "duckdb", "spark"):
        sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), backend=backend,
                          seed=11, **({"spark": spark_session} if backend == "spark" else {}))
        out.append(sess.table("t").filter(pl.col("d") > 300).agg(n=dp.len()).collect(dp.PureDP(5))["n"].item())
    assert out[0] == out[1] == out[2], (precision, out)


# ------------------------------------------------------------------------------------ 4. rank windows' placement


def _quantile_table(n: int = 80_000) -> pl.DataFrame:
    """``n`` rows of units of three rows each, a float column (5 % of it tied at 0), and two groups."""
    import numpy as np

    rng = np.random.default_rng(55)
    x = np.where(rng.random(n) < 0.05, 0.0, rng.normal(0, 1, n)).round(3)
    return pl.DataFrame({"u": rng.permutation(n) // 3, "x": x, "g": rng.choice(["a", "b"], n)})


def _quantiles(backend: str, spark: Any, grouped: bool) -> list[Any]:
    sess = dp.Session({"t": _quantile_table()}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10),
                      seed=21, backend=backend, **({"spark": spark} if backend == "spark" else {}))
    frame = sess.table("t").group_by("g", keys=["a", "b"]) if grouped else sess.table("t")
    return frame.agg(dp.quantile("x", [0.1, 0.5, 0.9], bounds=(-5, 5))).collect(dp.PureDP(2)).rows()


def _placements(monkeypatch: pytest.MonkeyPatch, how: str) -> list[dict[int, list[tuple[int, int]]] | None]:
    """Every backend's windows placed ``how``: "none" (whole lists), "shifted" (each window moved past its own
    width), "narrow" (one code each, at the window's low end) or "missing" (beyond every code); the placements made."""
    from dpframe.backends import polars_windows

    real = polars_windows.place_windows
    made: list[dict[int, list[tuple[int, int]]] | None] = []

    def placed(*args: Any) -> dict[int, list[tuple[int, int]]] | None:
        ends = real(*args)
        if ends is not None and how != "as placed":
            big = 2**62
            move = {"shifted": lambda lo, hi: (min(lo, big) + (min(hi, big) - min(lo, big)) + 1, min(hi, big) * 2 + 1),
                    "narrow": lambda lo, hi: (max(lo, -big), max(lo, -big)),
                    "missing": lambda lo, hi: (big, big)}[how] if how != "none" else None
            ends = None if move is None else {i: [move(lo, hi) for lo, hi in w] for i, w in ends.items()}
        made.append(ends)
        return ends
    monkeypatch.setattr(polars_windows, "place_windows", placed)
    return made


PLACEMENTS = ["as placed", "shifted", "narrow", "missing", "none"]


@pytest.mark.parametrize("backend", ["polars", "duckdb", pytest.param("spark", marks=pytest.mark.slow)])
@pytest.mark.parametrize("grouped", [False, True], ids=["one group", "grouped"])
def test_the_release_does_not_depend_on_where_the_windows_are(backend: str, grouped: bool, request: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The completion contract, on each backend: for one seed, windows placed by the sample, moved past their
    width, narrowed to one code, put beyond every code, or none at all (whole sorted lists) release the same
    quantiles (an unseeded sample — DuckDB's was — can change only where the windows are, never what is released).
    Spark (80,000 rows, five placements, two shapes: about a minute) under ``-m slow``;
    ``tests/backends/test_rank_windows.py`` runs its default windows against Polars'."""
    spark = request.getfixturevalue("spark_session") if backend == "spark" else None
    out = {}
    for how in PLACEMENTS:
        with monkeypatch.context() as m:
            made = _placements(m, how)
            out[how] = _quantiles(backend, spark, grouped)
        assert made and (how == "none" or any(e is not None for e in made)), (how, made)
    assert all(rows == out["none"] for rows in out.values()), out


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("spark", marks=pytest.mark.slow)])
def test_one_seed_places_the_same_windows(backend: str, request: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack (reproducibility): DuckDB's sample (``TABLESAMPLE ... (bernoulli)``) was not seeded, so one seeded
    session placed other windows on every run (the release the same, its time not). It now samples with the
    request's seed, as Spark's ``sample`` does: two runs of one seeded query place the same windows."""
    spark = request.getfixturevalue("spark_session") if backend == "spark" else None
    runs = []
    for _ in range(3):
        with monkeypatch.context() as m:
            made = _placements(m, "as placed")
            _quantiles(backend, spark, True)
        runs.append(made)
    assert runs[0] and runs[0][0] is not None and runs[0] == runs[1] == runs[2], runs


# ------------------------------------------------------------------------------------ 2. Spark's cache


def test_two_sessions_never_share_a_cached_frame(spark_session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's cache is keyed by the plan (``CacheManager.lookupCachedData``: a plan with the same result), across
    every session of one SparkSession. A quantile with bounding persists the bounded rows; two dpframe sessions over
    one Spark DataFrame, seeded alike (or whose fresh query seeds collide), built the same plan, so B's query would
    read A's cached rows while A held them (and either one's ``unpersist`` dropped the other's). The cached frame now
    carries its session's own random scope: the two plans differ, and each query reads only what it cached."""
    from dpframe.backends.spark import SparkBackend

    persisted: list[Any] = []
    real = SparkBackend._windows

    def seen(self: SparkBackend, frame: Any, *args: Any) -> Any:
        persisted.append(frame)
        return real(self, frame, *args)
    monkeypatch.setattr(SparkBackend, "_windows", seen)
    table = spark_session.createDataFrame([(i // 2, float(i % 11)) for i in range(300)], "u long, x double")
    for _ in range(2):
        sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10), seed=9,
                          backend="spark", spark=spark_session)
        sess.table("t").agg(dp.median("x", bounds=(0, 10))).collect(dp.PureDP(1))
    assert len(persisted) == 2
    assert not persisted[0].sameSemantics(persisted[1])
