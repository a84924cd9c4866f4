"""Review 33a: the Spark backend under an analyst who picks every expression and column name, and a data owner
whose SparkSession keeps Spark's defaults (its web UI on).

Each test is an attack that broke, kept with its fix: it fails if the defence regresses. D and D′ are
neighbouring datasets (D′ adds one privacy unit) where the attack is data-dependent.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.spark import metrics_reachable


def _session(spark: Any, data: pl.DataFrame, unit: str = "u", max_rows: int = 1) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit(unit, max_rows=max_rows), budget=dp.PureDP(100),
                      seed=0, backend="spark", spark=spark)


@pytest.mark.slow
def test_spark_web_ui_metrics_are_refused_at_session_creation(tmp_path: Path) -> None:
    """Attack: Spark's web UI (on by default, bound to every interface, no authentication) and its event log
    record every operator's "number of output rows" and every stage's shuffle record counts. After
    ``filter(pl.col("x") == 3).agg(dp.len())`` anyone who could reach port 4040 — the analyst's own process
    on the same host, the recommended deployment — read the exact count (143) from
    ``/api/v1/applications/<id>/sql``, outside any ε. Fix: a SparkSession whose metrics others may read (UI or
    event log on) is refused when the session is created (``ArgumentError`` naming ``spark``, nothing
    charged) unless its owner declares them private (``spark.dpframe.metricsArePrivate=true``); a
    SparkSession dpframe starts itself has its UI off."""
    script = textwrap.dedent("""
        import os, sys, json
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        import polars as pl, dpframe as dp
        spark = (SparkSession.builder.master("local[1]").config("spark.ui.port", "0")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        t = pl.DataFrame({"u": range(100), "x": [i % 7 for i in range(100)]})
        args = dict(privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=0, backend="spark", spark=spark)
        try:
            dp.Session({"t": t}, **args)
            print("created")
        except dp.ArgumentError as e:
            print("refused", e.argument)
        spark.conf.set("spark.dpframe.metricsArePrivate", "true")
        sess = dp.Session({"t": t}, **args)
        print("opted in", sess.table("t").agg(n=dp.len()).collect(dp.PureDP(0.5)).height)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "refused spark" in out.stdout and "opted in 1" in out.stdout, out.stdout + out.stderr[-3000:]


class _Logger:
    def isInfoEnabled(self) -> bool:  # noqa: N802 - log4j's name
        return False

    def isErrorEnabled(self) -> bool:  # noqa: N802 - log4j's name (the task-failure loggers, turned off)
        return False


class _Context:
    def __init__(self, url: str | None, log: str) -> None:
        self.uiWebUrl, self._log = url, log
        # the JVM's log4j, as the driver reads it (a WARN level: test_review41a.py)
        self._jvm = SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(logging=SimpleNamespace(
            log4j=SimpleNamespace(LogManager=SimpleNamespace(getLogger=lambda name: _Logger()),
                                  Level=SimpleNamespace(OFF="OFF"), core=SimpleNamespace(config=SimpleNamespace(
                                      Configurator=SimpleNamespace(setLevel=lambda name, level: None))))))))

    def getConf(self) -> Any:  # noqa: N802 - PySpark's name
        return {"spark.eventLog.enabled": self._log}


class Spark:
    """A stand-in for a SparkSession: what :func:`metrics_reachable` reads."""

    def __init__(self, url: str | None, log: str, private: str = "false") -> None:
        self.sparkContext = _Context(url, log)
        self.conf = {"spark.dpframe.metricsArePrivate": private}


def test_metrics_reachable_reads_the_ui_and_the_event_log(spark_session: Any) -> None:
    """The check behind the fix above (the shared test SparkSession has its UI off and no event log): a
    session whose context has a UI address or logs events is reachable; the owner's declaration wins."""
    assert metrics_reachable(spark_session) is None
    assert "web UI" in str(metrics_reachable(Spark("http://host:4040", "false")))
    assert "event log" in str(metrics_reachable(Spark(None, "true")))
    assert metrics_reachable(Spark("http://host:4040", "true", private="true")) is None


def test_a_spark_session_dpframe_starts_has_no_web_ui(monkeypatch: pytest.MonkeyPatch, spark_starts: Any) -> None:
    """The SparkSession dpframe starts when none is active is its own: its UI is off (see the test above)."""
    starts = spark_starts(Spark(None, "false"))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    assert starts.backend().spark is starts.created and ("spark.ui.enabled", "false") in starts.seen


@pytest.mark.parametrize("column", [
    pl.col("t") - pl.col("t"),                       # Duration
    pl.col("t").dt.time(),                           # Time
    pl.lit(None),                                    # Null
    pl.col("i").cast(pl.Int128, strict=False),       # Int128
], ids=["duration", "time", "null", "int128"])
def test_a_derived_column_spark_cannot_store_is_refused_uncharged(spark_session: Any, column: pl.Expr) -> None:
    """Attack: a derived column of a type Spark cannot store (a Duration, a Time, a Null or an Int128 column)
    passed every check, was charged, then failed in the Spark backend (``SchemaError`` from its schema
    conversion): the analyst lost budget for a query the engine could have refused. Fix: a Spark session
    refuses the step when the frame is built (``PlanError`` naming ``backend``, with the fix), nothing
    charged."""
    data = pl.DataFrame({"u": range(10), "i": range(10), "t": [dt.datetime(2020, 1, 1)] * 10})
    sess = _session(spark_session, data)
    with pytest.raises(dp.PlanError, match="cannot store") as info:
        sess.table("t").with_columns(e=column).filter(pl.col("e").is_not_null()).agg(dp.len())
    assert info.value.argument == "backend" and sess.history().height == 0


def test_an_integer_literal_beyond_64_bits_runs(spark_session: Any) -> None:
    """Attack: ``pl.col("i") > 2**70`` was translated to a native Spark comparison whose literal Spark cannot
    hold (a ``Py4JError`` after the charge: the query failed, charged, on every dataset). Fix: integer
    literals beyond 64 bits are not translated; the step runs through Polars on the executors, as Polars
    would: released, the same count as on Polars."""
    data = pl.DataFrame({"u": range(20), "i": range(20)})
    q = _session(spark_session, data).table("t").filter(pl.col("i") < 2**70).agg(n=dp.len())
    assert q.collect(dp.PureDP(50)).item() == pytest.approx(20, abs=3)


def test_decimal_comparisons_at_two_scales_match_polars(spark_session: Any) -> None:
    """Attack: a comparison of two decimal columns of different scales was translated to Spark's, which casts
    both to one wider type bounded at 38 digits and rounds the finer one: ``a < b`` with a = 1 (scale 0,
    30 digits) and b = 1.0000000001 (scale 10) was false on Spark and true on Polars, so the two engines
    counted different rows. Fix: comparisons whose sides Spark stores differently with a decimal on one side
    run through Polars on the executors."""
    schema = {"u": pl.Int64, "a": pl.Decimal(30, 0), "b": pl.Decimal(30, 10)}
    data = pl.DataFrame({"u": range(30), "a": [Decimal(1)] * 30, "b": [Decimal("1.0000000001")] * 30}, schema=schema)
    q = _session(spark_session, data).table("t").filter(pl.col("a") < pl.col("b")).agg(n=dp.len())
    assert q.collect(dp.PureDP(50)).item() == pytest.approx(30, abs=3)


@pytest.mark.parametrize("name", ["uſer", "İd"])
def test_a_name_spark_equates_with_another_columns_is_refused(name: str) -> None:
    """Attack: Spark's ``withColumns`` matches names with Java's ``equalsIgnoreCase``, which equates ``ſ``
    (long s) with ``s`` and ``İ`` with ``i``, while the check for names differing only in case used Python's
    ``lower()``, which does not. ``with_columns(uſer=pl.col("x"))`` then replaced the privacy-unit column
    ``user`` itself on Spark: its later reads resolved to Spark's ``user`` function, every unit became NULL
    and every row was dropped (0 released, ~10 on Polars). Fix: names are compared per character by their
    simple case mapping, the rule Spark uses; the step is refused when the frame is built, on every backend."""
    data = pl.DataFrame({"user": [1] * 100 + list(range(2, 11)), "x": range(109), "id": range(109)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=1), budget=dp.PureDP(10), seed=0)
    with pytest.raises(dp.PlanError, match="differ only in case"):
        sess.table("t").with_columns(**{name: pl.col("x")})
