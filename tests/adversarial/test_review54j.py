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
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import dpframe as dp
from dpframe.backends.spark import metrics_reachable


def _quiet_log(name: str) -> Any:
    """log4j's logger as the driver reads it, at WARN (not INFO)."""
    return SimpleNamespace(isInfoEnabled=lambda: False)


class _Spark:
    """A stand-in for a SparkSession whose context has no web UI, no event log, and ``conf`` as its SparkConf."""

    def __init__(self, conf: dict[str, str], private: str = "false") -> None:
        jvm = SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(logging=SimpleNamespace(
            log4j=SimpleNamespace(LogManager=SimpleNamespace(getLogger=_quiet_log))))))
        self.sparkContext = SimpleNamespace(uiWebUrl=None, getConf=lambda: dict(conf), _jvm=jvm)
        self.conf = {"spark.dpframe.metricsArePrivate": private}


def test_a_console_progress_bar_is_reachable_unless_declared_private() -> None:
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
