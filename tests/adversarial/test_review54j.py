"""Review 54j: Spark leftovers from review 54d.

**Spark's console progress bar was only documented.** PySpark turns ``spark.ui.showConsoleProgress`` on for every
SparkContext it starts (review 54d's runs printed ``[Stage n:> (0 + 1) / 1]``): on standard error, the driver's
process, it shows each job's stages and their task counts for every stage running over half a second. How many
jobs a release runs depends on the rows, and adaptive execution sets the task counts from the size of the shuffled
rows: a data-dependent side channel to any code in the process that reads its own standard error (``os.dup2`` a pipe
onto fd 2). :func:`~dpframe.backends.spark.metrics_reachable` refused the web UI and the event log but took a
SparkSession with the bar on. It is now refused the same way: free, when the session is created, an
``ArgumentError`` naming ``spark`` whose fix names the setting (the bar is fixed when the SparkContext starts:
``spark.conf.set`` cannot turn it off later); the data owner's ``spark.dpframe.metricsArePrivate`` still wins.
Spark's executors' error log (``ERROR Executor: Exception in task``, ``WARN TaskSetManager: Lost task``) quotes a
row's values where a task fails, at WARN and ERROR alike (turned off by the backend since review 55f).

**Races over one SparkSession or one session (tried, nothing broke).** Two dpframe sessions over the one
SparkSession the data owner passed, each with its own table under the same name, collected from two threads at
once, each read its own rows: the Spark backend names nothing in the SparkSession (no temp view, no registered
table: its tables are DataFrames it holds). A DuckDB backend owns a private connection (the data owner cannot pass
one) and runs each query under its lock; one DuckDB or Polars session collected from several threads at once
releases what each query asks of its own table, and the ledger holds every charge.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.spark import CONTEXT_LOGGERS, metrics_reachable


def _quiet_log(name: str) -> Any:
    """log4j's logger as the driver reads it, at WARN (not INFO)."""
    return SimpleNamespace(isInfoEnabled=lambda: False, isErrorEnabled=lambda: False)


class _Spark:
    """A stand-in for a SparkSession whose context has no web UI, no event log, and ``conf`` as its SparkConf."""

    def __init__(self, conf: dict[str, str], private: str = "false") -> None:
        jvm = SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(logging=SimpleNamespace(
            log4j=SimpleNamespace(LogManager=SimpleNamespace(getLogger=_quiet_log), Level=SimpleNamespace(OFF="OFF"),
                                  core=SimpleNamespace(config=SimpleNamespace(Configurator=SimpleNamespace(
                                      setLevel=lambda name, level: None))))))))
        self.sparkContext = SimpleNamespace(uiWebUrl=None, getConf=lambda: dict(conf), _jvm=jvm)
        self.conf = {"spark.dpframe.metricsArePrivate": private}


@pytest.fixture
def quiet_context_loggers() -> Iterator[None]:
    """PySpark's query-context loggers off, as :func:`quiet_task_failures` leaves them on a session dpframe takes.

    They are this process's Python loggers, not the stand-in's: left at their default (on), every stand-in is
    reachable through them, or not, depending on whether a real Spark session was quieted earlier in this worker.
    """
    loggers = [logging.getLogger(name) for name in CONTEXT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def test_a_console_progress_bar_is_reachable_unless_declared_private(quiet_context_loggers: None) -> None:
    """The check behind the fix: the bar on (PySpark's default, any case) is reachable; off, or unset (Spark's own
    default), it is not; the owner's declaration wins."""
    for on in ("true", "TRUE"):
        assert "spark.ui.showConsoleProgress" in str(metrics_reachable(_Spark({"spark.ui.showConsoleProgress": on})))
    assert metrics_reachable(_Spark({"spark.ui.showConsoleProgress": "false"})) is None
    assert metrics_reachable(_Spark({})) is None
    assert metrics_reachable(_Spark({"spark.ui.showConsoleProgress": "true"}, private="true")) is None


def test_the_shared_test_session_has_no_progress_bar(spark_session: Any) -> None:
    """The tests' own SparkSession (conftest.py) turns the bar off, so every Spark test runs on a session dpframe
    takes; were it on, every one of them would be refused."""
    assert spark_session.sparkContext.getConf().get("spark.ui.showConsoleProgress") == "false"
    assert metrics_reachable(spark_session) is None


@pytest.mark.slow
def test_a_spark_session_with_a_console_progress_bar_is_refused_free(tmp_path: Path) -> None:
    """Attack: a SparkSession started with PySpark's defaults (its UI off, as dpframe asks) prints
    ``[Stage n:> (done + running) / tasks]`` on standard error for each stage that runs over half a second; a
    session over it was created and answered. Now it is refused at creation (``ArgumentError`` naming ``spark``,
    the fix naming the setting); once restarted with the bar off, the same session answers."""
    script = textwrap.dedent("""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        import polars as pl, dpframe as dp
        def start(**conf):
            builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
            for key, value in conf.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            return spark
        t = pl.DataFrame({"u": range(50), "x": [i % 7 for i in range(50)]})
        args = dict(privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=0, backend="spark")
        spark = start()
        print("bar", spark.sparkContext.getConf().get("spark.ui.showConsoleProgress"))
        try:
            dp.Session({"t": t}, spark=spark, **args)
            print("created")
        except dp.ArgumentError as e:
            print("refused", e.argument, "spark.ui.showConsoleProgress" in e.fix)
        spark.stop()
        spark = start(**{"spark.ui.showConsoleProgress": "false"})
        sess = dp.Session({"t": t}, spark=spark, **args)
        print("answers", sess.table("t").agg(n=dp.len()).collect(dp.PureDP(0.5)).height)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.stdout.split("\n")[:3] == ["bar true", "refused spark True", "answers 1"], \
        out.stdout + out.stderr[-3000:]


def test_the_refusal_names_the_setting() -> None:
    """The backend taking such a session (``spark=``) refuses it, and the fix names the setting to turn off."""
    from dpframe.backends.spark import SparkBackend

    b = SparkBackend.__new__(SparkBackend)     # its PySpark module a stand-in whose SparkSession is _Spark
    b._sql, b._spark = SimpleNamespace(SparkSession=_Spark), None
    with pytest.raises(dp.ArgumentError) as refused:
        b.use_spark(_Spark({"spark.ui.showConsoleProgress": "true"}))
    assert refused.value.argument == "spark" and "spark.ui.showConsoleProgress" in str(refused.value.fix)
    assert "console progress bar" in str(refused.value) and b._spark is None


def test_a_spark_session_dpframe_starts_has_no_progress_bar(monkeypatch: pytest.MonkeyPatch,
                                                            spark_starts: Any) -> None:
    """The SparkSession dpframe starts when none is active turns the bar off, so dpframe takes it."""
    starts = spark_starts(_Spark({"spark.ui.showConsoleProgress": "false"}))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    assert starts.backend().spark is starts.created and ("spark.ui.showConsoleProgress", "false") in starts.seen


def _races(sessions: list[tuple[dp.Session, str, int]], rounds: int) -> list[tuple[int, float]]:
    """Collect ``sess.table(name).agg(dp.len())`` for each entry from its own thread, all at once, ``rounds`` times.

    Returns each entry's (expected count, released count) — or raises what a thread raised."""
    out: list[tuple[int, float]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(sessions))

    def run(sess: dp.Session, name: str, rows: int) -> None:
        try:
            start.wait()
            for _ in range(rounds):
                out.append((rows, sess.table(name).agg(n=dp.len()).collect(dp.PureDP(1e6)).item()))
        except BaseException as e:    # handed to the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=entry) for entry in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return out


def _table(rows: int) -> pl.DataFrame:
    return pl.DataFrame({"u": range(rows), "x": [i % 3 for i in range(rows)]})


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_one_session_collected_from_threads_reads_its_own_tables(backend: str) -> None:
    """Attack: one session's queries on two tables, collected from four threads at once (a DuckDB backend
    registers each query's frames in its connection): each release is its own table's count, every charge in the
    ledger."""
    sess = dp.Session({"a": _table(40), "b": _table(300)}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.PureDP(1e9), backend=backend, seed=1)
    out = _races([(sess, "a", 40), (sess, "b", 300), (sess, "a", 40), (sess, "b", 300)], rounds=5)
    assert len(out) == 20 and all(abs(released - rows) < 1 for rows, released in out), out
    assert sess.history().height == 20 and sess.spent().epsilon == pytest.approx(20 * 1e6)


@pytest.mark.parametrize("backend", ["duckdb", pytest.param("spark", marks=pytest.mark.slow)])
def test_two_sessions_over_one_engine_from_two_threads_read_their_own_rows(backend: str, request: Any) -> None:
    """Attack: two sessions naming their tables alike ("t"), over one SparkSession the data owner passed (DuckDB:
    each its own connection), collected from two threads at once: neither reads the other's rows."""
    spark = {"spark": request.getfixturevalue("spark_session")} if backend == "spark" else {}
    one, other = (dp.Session({"t": _table(rows)}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1e9),
                             backend=backend, seed=rows, **spark) for rows in (30, 200))
    out = _races([(one, "t", 30), (other, "t", 200)], rounds=3 if backend == "spark" else 10)
    assert all(abs(released - rows) < 1 for rows, released in out), out
    assert one.history().height == other.history().height == len(out) // 2
