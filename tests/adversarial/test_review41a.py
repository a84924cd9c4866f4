"""Review 41a: process-wide settings of the engines' libraries, changed by an analyst in the same process.

Scope: the analyst runs in the session's process, changes any process-wide setting of dpframe's own libraries
(Polars, DuckDB, PySpark and py4j, numpy, Python's ``warnings``, ``logging`` and ``locale``) through their public
APIs before or between queries, and reads the process's standard output and error, its log files and any file
written. Review 40 refused releases while one of Polars' diagnostic settings is on (``engine_output.check_quiet``);
this review looked for the settings it did not cover: ones that make a release print or write a statistic of the
private rows, fail or change depending on them, or write them to a file.
Each test is an attack that broke, kept with its fix: it fails if the defence regresses.

Otherwise sound (runs made for this review, not part of the suite): each ``POLARS_*`` variable the installed
Polars 2.1.0 reads (listed from its binary) that could print, write or fail, set on a filter and group count, a
sum, a mean, a median and a top-k on 300 and 30,000 rows, in memory and from Parquet — the streaming and engine
choices, morsel and chunk sizes, thread counts, partitioning and sort tuning, spill budgets and directories (no
file written), ``POLARS_TRACK_METRICS``, ``POLARS_STRICT_MODE``, ``POLARS_BACKTRACE_IN_ERR``: released alike,
nothing printed; the plans ``POLARS_VISUALIZE_*`` write hold no literal values (a ``Series`` literal prints its
name only). ``logging.basicConfig(level=DEBUG)``: Polars, DuckDB and dpframe log nothing on either backend.
``sys.setswitchinterval(1e-6)`` and ``(1.0)``: the same released values under one seed on Polars and DuckDB. The
default composed, SQL and interactive oracles on Polars and DuckDB under ``warnings.simplefilter("error")``: 24
tests passed. dpframe's DuckDB connections are in-memory databases of their own, locked (``duckdb`` has no
process-wide setting that reaches them; ``DUCKDB_*`` variables: only ``DUCKDB_JE_MALLOC_CONF``, read at start);
a DP release on DuckDB over a 30-million-row Parquet file printed no progress bar (its reads run through
relations). Only the C locales are installed here: ``locale.setlocale`` was not exercised.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import polars as pl
import polars._plr as _plr
import pytest

import dpframe as dp
from dpframe.backends.spark import METRICS_PRIVATE
from dpframe.engine_output import PLAN_FILES

from .test_review40 import _LEAKS, _query, _session


def test_a_setting_put_in_the_process_environment_alone_is_refused(tmp_path, capfd) -> None:
    """``os.putenv("POLARS_VERBOSE", "1")`` changes the process's environment, not ``os.environ`` (Python's copy):
    the check read the copy and passed, then reloaded Polars' own setting from the process's environment, which
    turned it on: the release printed ``rows_before: 49, rows_after: 49`` (the private rows that passed the
    filter) and ``3 estimated groups``."""
    sess = _session(str(tmp_path / "t.parquet"))
    capfd.readouterr()
    os.putenv("POLARS_VERBOSE", "1")
    try:
        assert "POLARS_VERBOSE" not in os.environ
        with pytest.raises(dp.ArgumentError, match="POLARS_VERBOSE"):
            _query(sess)
        os.unsetenv("POLARS_VERBOSE")
        os.putenv("POLARS_LOG_METRICS", "1")        # named with a fix that unsets it in both environments
        with pytest.raises(dp.ArgumentError, match=r"os.unsetenv\('POLARS_LOG_METRICS'\)"):
            _query(sess)
    finally:
        os.unsetenv("POLARS_LOG_METRICS")
        os.unsetenv("POLARS_VERBOSE")
        _plr.config_reload_env_var("POLARS_VERBOSE")
    assert not any(leak in capfd.readouterr().err for leak in _LEAKS)
    assert sess.history().height == 0


@pytest.mark.parametrize("name", PLAN_FILES)
def test_polars_plan_files_are_refused(name, tmp_path, monkeypatch) -> None:
    """``POLARS_VISUALIZE_PHYSICAL_PLAN=path`` (and ``POLARS_VISUALIZE_IR``) writes the plan of every query Polars
    runs to ``path``; ``/dev/stderr`` prints each. A median over 4,095 private rows ran 4 queries, over 4,096 rows 5
    (from 4,096 rows it samples the rows to place its windows): the plans printed counted the private rows past a
    threshold, and any value, ``0`` too, names a file. Planning still writes the plans of its checks, which run the
    analyst's expressions on public probe values."""
    sess = _session()
    plan = tmp_path / "plan"
    monkeypatch.setenv(name, str(plan))
    with pytest.raises(dp.ArgumentError, match=name):
        _query(sess)
    # planning runs the analyst's expressions on public probe values (their plans are public); no private read ran
    assert "__dpframe_keep" not in (plan.read_text() if plan.exists() else "")
    assert sess.history().height == 0
    (tmp_path / "refused").mkdir()
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "refused")     # the checks' plans go to a file named "0" here, not the caller's cwd
    monkeypatch.setenv(name, "0")
    with pytest.raises(dp.ArgumentError, match=name):
        _query(sess)
    monkeypatch.chdir(tmp_path / "run")
    monkeypatch.delenv(name)
    _query(sess)
    assert sess.history().height == 1 and not (tmp_path / "run" / "0").exists()



def test_duckdb_prints_no_progress_bar() -> None:
    """DuckDB's progress bar is on by default in every new database (there is no process-wide setting the analyst
    could reach: dpframe's connections are in-memory databases of their own, locked): a query on dpframe's
    connection running over 2 s printed ``29% ▕███████████ ▏ (~4 seconds remaining)`` and on to standard output,
    the progress of a scan of the private rows over time (measured: ``SELECT sum(hash(range)) FROM
    range(600000000)`` on :func:`~dpframe.sql.sandbox.connect`'s connection). A DP release on the DuckDB backend
    printed nothing in 91 s over a 30-million-row Parquet file (its reads go through relations, which draw no bar),
    but its registration runs ``execute``, which does; the bar is now off on every connection dpframe opens."""
    # (in a fresh process: under pytest DuckDB starts with its bar off, as in no analyst's process)
    code = ("from dpframe.backends.duckdb import DuckDBBackend; from dpframe.sql.sandbox import connect; "
            "print([c.execute(\"SELECT current_setting('enable_progress_bar')\").fetchone()[0] "
            "for c in (connect(), DuckDBBackend()._con)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "[False, False]", out


def test_the_check_asks_polars_to_reload_only_the_settings_it_keeps() -> None:
    """The check asked Polars to reload each diagnostic setting from the environment; Polars reads
    ``POLARS_LOG_METRICS`` and ``POLARS_PARQUET_METRICS`` from there each time and keeps no copy of them, and asked to
    reload one it printed ``unknown config option 'POLARS_LOG_METRICS' found in environment variables`` on every
    release under ``POLARS_WARN_UNKNOWN_CONFIG=1`` (read when Polars is imported; not an error under
    ``warnings.simplefilter("error")``, measured: the release was committed)."""
    code = ("import warnings; import tests.adversarial.test_review40 as r; "
            "sess = r._session(); warnings.simplefilter('error'); "
            "r._query(sess); print(sess.history()['status'].to_list())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "POLARS_WARN_UNKNOWN_CONFIG": "1"})
    assert out.stdout.strip() == "['committed']" and "unknown config option" not in out.stderr, out.stderr[-600:]


@pytest.mark.slow
def test_spark_logs_turned_on_in_the_process_are_refused(spark_session: Any) -> None:
    """``spark.sparkContext.setLogLevel("INFO")`` (any code holding the active SparkSession: it is public) made
    Spark's driver log print on standard error the bytes each task shipped and each shuffle read:
    ``Getting 2 (2012.0 B) non-empty blocks`` for a group count over 300 rows, ``398.2 KiB`` over 30,000, and tasks
    of ``11191 bytes`` against ``650218 bytes``; ``logging.getLogger("py4j").setLevel(logging.DEBUG)`` logs every
    call the driver makes to the JVM. Both are refused before the charge, and before each read, also after code in
    the process declares the metrics private (``spark.dpframe.metricsArePrivate``, a runtime setting)."""
    frame = pl.DataFrame({"u": list(range(100)) * 3, "city": ["a", "b", "c"] * 100,
                          "x": [float(i) for i in range(300)]})
    sess = dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 1e-5),
                      backend="spark")
    spark_session.sparkContext.setLogLevel("INFO")
    # the data owner's declaration is read when the backend takes the session: set later, it is not theirs
    spark_session.conf.set(METRICS_PRIVATE, "true")
    try:
        with pytest.raises(dp.ArgumentError, match="setLogLevel") as refused:
            _query(sess)
        assert "nothing was charged" in str(refused.value.fix)
    finally:
        spark_session.sparkContext.setLogLevel("ERROR")
        spark_session.conf.unset(METRICS_PRIVATE)
    py4j = logging.getLogger("py4j")
    level = py4j.level
    py4j.setLevel(logging.DEBUG)
    try:
        with pytest.raises(dp.ArgumentError, match="py4j"):
            _query(sess)
    finally:
        py4j.setLevel(level)
    assert sess.history().height == 0
    _query(sess)
    assert sess.history()["status"].to_list() == ["committed"]


_PANIC_RUN = ("import os, dpframe as dp, tests.adversarial.test_review40 as r; sess = r._session(); "
              "os.environ['POLARS_PANIC_ON_ERR'] = '1'\n"
              "try:\n    r._query(sess)\nexcept dp.DPFrameError as e:\n    print(e.argument)\n"
              "print(sess.history()['status'].to_list())")


@pytest.mark.slow
def test_polars_panics_set_after_import_reach_no_release() -> None:
    """``POLARS_PANIC_ON_ERR=1``, set after dpframe was imported but before Polars' first error (Polars reads it
    then, once), made Polars panic at an internal downcast it recovers from in every release: each was charged and
    failed (``PanicException``), the panic's message and a backtrace printed on standard error. dpframe's import now
    makes Polars read it."""
    out = subprocess.run([sys.executable, "-c", _PANIC_RUN], capture_output=True, text=True, env=os.environ)
    assert out.stdout.split() == ["['committed']"], out.stdout + out.stderr[-600:]
    assert "panicked" not in out.stderr


@pytest.mark.slow
def test_polars_panics_on_at_import_are_refused() -> None:
    """Set when the process starts (the data owner's), the setting is refused, nothing charged."""
    out = subprocess.run([sys.executable, "-c", _PANIC_RUN], capture_output=True, text=True,
                         env={**os.environ, "POLARS_PANIC_ON_ERR": "1"})
    assert out.stdout.split() == ["POLARS_PANIC_ON_ERR", "[]"], out.stdout + out.stderr[-600:]


def float_overflow_on_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give the built-in aggregates' release a mechanism's harmless float work on its exact statistics:
    ``exp(count)``, which overflows (to inf) past 709 (review 40's ``exp(-count)`` underflows, which numpy ignores
    by default)."""
    from dpframe_aggregates.aggregates import AggregatePlan

    release = AggregatePlan.release

    def with_float_work(self: object, stats: dict[str, np.ndarray], rng: object) -> object:
        for values in stats.values():
            np.exp(np.asarray(values, dtype=np.float64))
        return release(self, stats, rng)  # type: ignore[arg-type]

    monkeypatch.setattr(AggregatePlan, "release", with_float_work)


@pytest.mark.parametrize("through", ["session", "individual filter"])
def test_numpy_warnings_in_private_work_are_neither_printed_nor_raised(through, monkeypatch, capfd) -> None:
    """Private work ran under numpy's defaults, which warn of an overflow: the float work above printed
    ``RuntimeWarning: overflow encountered in exp`` on the dataset of 1,000 units only (whether the count passed
    709), and under ``warnings.simplefilter("error")`` failed the release there, charged (``RuntimeWarning``), and
    was released on the dataset of 10."""
    float_overflow_on_statistics(monkeypatch)
    outcomes = []
    for rows in (10, 1_000):
        sess = dp.Session({"t": pl.DataFrame({"u": list(range(rows))})}, privacy_unit=dp.PrivacyUnit("u"),
                          budget=dp.ApproxDP(1000, 1e-6), accountant="rdp")
        query = sess.table("t").agg(dp.len())
        for action in ("default", "error"):
            capfd.readouterr()
            with warnings.catch_warnings():
                warnings.simplefilter(action)
                try:
                    if through == "session":
                        query.collect(dp.ZCDP(0.1))
                    else:
                        sess.individual_filter(dp.ZCDP(1)).collect(query, dp.ZCDP(0.1))
                    outcome = "released"
                except dp.DPFrameError as e:
                    outcome = str(e)
            outcomes.append((action, outcome, "overflow" in capfd.readouterr().err))
    assert outcomes == [("default", "released", False), ("error", "released", False)] * 2, outcomes
