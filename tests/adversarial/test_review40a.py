"""Review 40a: the code stop 39 added or changed, attacked.

Scope (``git diff ef91efc 83bd147 -- dpframe plugins``): how a path is read — ``glob=False`` scans, DuckDB scanning
only a regular file whose name is no pattern, Spark reading a local Parquet path itself only where it reads the
files and schema Polars reads (``spark._reads_as_polars``, ``tables.parquet_reading`` and its single-file shortcut,
``tables.check_parquet_columns``) — and the file versions that make a session read one version of each table;
the conversions of Arrow and pandas tables (``tables._converted``, extension and ``Object`` columns); the Rényi
filter's rounded-up running totals (``budgets.add_up``) and ``RenyiFilter.filter_epsilon``; the PLD accountant's
cached ``plan_note``; and the staged ``agg`` path charging its budget's name before the split. Each test is an
attack that broke, kept with its fix, or a check that found the engine sound.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp

_HUGE = dp.ApproxDP(1e6, 1e-3)    # noise far below one: a seeded count is the exact count of the kept rows


def _session(source: Any, backend: str, max_rows: int = 1, unit: str = "u", **kwargs: Any) -> dp.Session:
    return dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit(unit, max_rows=max_rows),
                      budget=dp.ApproxDP(1e9, 0.5), backend=backend, seed=1, **kwargs)


def _count(sess: dp.Session, backend: str | None = None) -> int:
    """The number of rows kept by bounding (under ``max_rows=1``: of units), on ``backend`` (None: the session's)."""
    out = sess.sql("SELECT COUNT(*) AS n FROM t", backend=backend).collect(_HUGE)
    assert sess.history()["status"].to_list()[-1] == "committed"
    return int(out["n"].item())


# ---------------------------------------------------------------------------- 1. what a path's reader reads


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
def test_a_file_in_a_hive_named_directory_is_read_as_its_own_values_on_duckdb(tmp_path: Path, backend: str) -> None:
    """Attack: a single Parquet file in a directory named like a hive partition (``u=1/t.parquet``, as data lakes
    lay out their exports) whose own columns include ``u``. Polars reads the file's values of ``u``; DuckDB's
    ``read_parquet`` detects hive partitioning from the path of a single file too and replaced every row's ``u``
    with ``1`` (same name, same type: the scan passed every check of ``DuckDBBackend._parquet``): on the DuckDB
    backend three units read as one, and a unit's added rows displaced others' kept rows. Now DuckDB scans with
    ``hive_partitioning=false``: the file's own values, as Polars and Spark read them."""
    path = tmp_path / "u=1" / "t.parquet"
    path.parent.mkdir()
    pl.DataFrame({"u": [5, 6, 7], "x": [1.0, 2.0, 3.0]}).write_parquet(path)
    sess = _session(path, backend)
    assert _count(sess) == 3
    assert _count(sess, "duckdb") == 3


def _uri(path: Path, form: str) -> str:
    """``path`` as a ``file:`` URI of ``form`` (Hadoop reads each as the local path)."""
    return {"file:///": f"file://{path}", "file:/": f"file:{path}", "FILE:///": f"FILE://{path}"}[form]


@pytest.mark.slow
@pytest.mark.parametrize("form", ["file:///", "file:/", "FILE:///"])
def test_a_file_uri_is_read_as_its_local_path_on_spark(spark_session: Any, tmp_path: Path, form: str) -> None:
    """Attack: the local path given to a Spark session as a ``file:`` URI. The Spark backend took every path with
    ``://`` for a remote one, and ``file:/...`` for a local path named ``file:``: either way it skipped what a
    local path gets — a name that is a pattern read through Polars (Hadoop read ``t[1].parquet`` as the
    ``t1.parquet`` it matches, 50 other rows), the files and schema compared with Polars' reading (files whose
    columns differ were read against one file's schema) — and ``file:/...`` and ``FILE:///...`` had no version
    at all (a rewritten file went unseen). Now a ``file:`` URI of an absolute path is that local path
    (:func:`dpframe.file_versions.local_path`) on every check, as a plain path is."""
    path = tmp_path / "t[1].parquet"
    pl.DataFrame({"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]}).write_parquet(path)
    pl.DataFrame({"u": [7] * 50, "x": [9.0] * 50}).write_parquet(tmp_path / "t1.parquet")
    assert _count(_session(_uri(path, form), "spark", spark=spark_session)) == 3
    folder = tmp_path / "d.parquet"
    folder.mkdir()
    pl.DataFrame({"u": [1, 2], "x": [1.0, 2.0]}).write_parquet(folder / "a.parquet")
    pl.DataFrame({"U": [3], "x": [3.0]}).write_parquet(folder / "b.parquet")
    with pytest.raises(dp.SchemaError, match="different columns"):
        _session(_uri(folder, form), "spark", spark=spark_session)
    plain = tmp_path / "plain.parquet"
    pl.DataFrame({"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]}).write_parquet(plain)
    sess = _session(_uri(plain, form), "spark", spark=spark_session)
    assert _count(sess) == 3
    pl.DataFrame({"u": [3] * 50, "x": [3.0] * 50}).write_parquet(plain)
    with pytest.raises(dp.TableChangedError):
        _count(sess)


def test_a_file_uri_names_its_local_path() -> None:
    """The ``file:`` URIs Hadoop reads as a local path are that path (scheme in any case); a host is not local."""
    from dpframe.file_versions import local_path

    assert [local_path(t) for t in ("file:///a/t.parquet", "file:/a/t.parquet", "FILE:///a/t.parquet",
                                    "a/t.parquet")] == [Path("/a/t.parquet")] * 3 + [Path("a/t.parquet")]
    assert [local_path(t) for t in ("file://host/t.parquet", "s3a://b/t.parquet", "file:t.parquet", 3)] == [None] * 4


# ---------------------------------------------------------------------------- 2. one version of each table


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_file_under_a_linked_subdirectory_is_part_of_the_tables_version(tmp_path: Path, backend: str) -> None:
    """Attack: a Parquet directory holding a symbolic link to another directory (``t.parquet/sub -> ../more``).
    Polars reads the files under the link (the table is three units here), but the session's version of the
    directory (:func:`dpframe.file_versions.file_version`, ``os.walk`` without following links) did not list
    them: a file rewritten there after the session was created went unseen, and each later query read the new
    rows — the attack of ``test_changed_files.py`` on bounding (a kept-row mask made on one version and applied
    to another). Now the version follows linked directories (each real directory once: a cycle ends), and such
    a query is refused with ``TableChangedError`` before its charge."""
    folder, more = tmp_path / "t.parquet", tmp_path / "more"
    folder.mkdir()
    more.mkdir()
    pl.DataFrame({"u": [1, 2], "x": [1.0, 2.0]}).write_parquet(folder / "a.parquet")
    pl.DataFrame({"u": [3], "x": [3.0]}).write_parquet(more / "b.parquet")
    (folder / "sub").symlink_to(more, target_is_directory=True)
    sess = _session(folder, backend)
    assert _count(sess) == 3
    pl.DataFrame({"u": [3] * 50, "x": [3.0] * 50}).write_parquet(more / "b.parquet")
    with pytest.raises(dp.TableChangedError):
        _count(sess)
    assert sess.history()["status"].to_list() == ["committed"]


def test_a_linked_directory_cycle_ends_the_version_and_is_refused(tmp_path: Path) -> None:
    """A link back to the directory itself (a cycle) is walked once by the version. Polars refuses to read such a
    directory with a raw ``OSError`` ("Too many levels of symbolic links"), which escaped ``dp.Session`` (the
    catalog turned only Polars' own errors into a SchemaError): now a SchemaError naming ``tables['t']``."""
    from dpframe.file_versions import file_version

    folder = tmp_path / "t.parquet"
    folder.mkdir()
    pl.DataFrame({"u": [1]}).write_parquet(folder / "a.parquet")
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    version = file_version(folder)
    assert version is not None and [entry[0] for entry in version.entries] == ["a.parquet"]
    with pytest.raises(dp.SchemaError) as error:
        _session(folder, "polars")
    assert error.value.argument == "tables['t']"


# ---------------------------------------------------------------------------- 3. accounting


def test_a_cached_pld_note_is_the_note_of_its_own_plan() -> None:
    """A check (sound): ``PLDAccountant.plan_note`` is cached by the plan's curve specs, which name everything its
    PLD depends on (a subsampled plan's spec holds its rate; two runs of a curve are two specs) besides the
    session δ, which never changes: plans that differ get other notes, and each cached note is the one a fresh
    accountant computes."""
    from dpframe import accounting as acc
    from dpframe.accounting.pld import PLDAccountant

    total, cost = dp.ApproxDP(10, 1e-6), dp.ApproxDP(5, 1e-7)
    accountant = PLDAccountant(total)
    g1, g2 = acc.gaussian(sigma=1.0), acc.gaussian(sigma=2.0)
    charges = [accountant.charge_plan(cost, [g1]), accountant.charge_plan(cost, [g2]),
               accountant.charge_plan(cost, [g1], 0.5), accountant.charge_plan(cost, [g1, g1])]
    notes = [accountant.plan_note(c) for c in charges]
    assert len(set(notes)) == len(notes)
    assert [accountant.plan_note(c) for c in charges] == notes == [PLDAccountant(total).plan_note(c) for c in charges]


def test_the_individual_filter_runs_its_private_work_under_numpys_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack (review 40's, on the one private path it missed): a mechanism's harmless float work on exact
    statistics (``exp(-count)``, an underflow for large counts) under the caller's ``np.seterr(all="raise")``.
    Review 40 put the session's guarded run under numpy's defaults; the individual filter runs its queries
    itself, outside that guard: the query failed (``FloatingPointError``) and closed the filter on the larger
    dataset only, and was released on the smaller one. Now the filter's run is under numpy's defaults too."""
    import numpy as np

    from tests.adversarial.test_review40 import float_work_on_statistics

    float_work_on_statistics(monkeypatch)
    outcomes = []
    for rows in (10, 1_000):
        sess = dp.Session({"t": pl.DataFrame({"u": list(range(rows))})}, privacy_unit=dp.PrivacyUnit("u"),
                          budget=dp.ApproxDP(10, 1e-6), accountant="rdp", seed=1)
        filt = sess.individual_filter(dp.ZCDP(1))
        with np.errstate(all="raise"):
            try:
                filt.collect(sess.table("t").agg(dp.len()), dp.ZCDP(0.1))
                outcome = "released"
            except dp.DPFrameError as e:
                outcome = str(e)
        outcomes.append((outcome, sess.history()["status"].to_list()))
    assert outcomes == [("released", ["committed"])] * 2, outcomes
