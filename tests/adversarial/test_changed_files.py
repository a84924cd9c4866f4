"""A file-backed table that changes while a session is open (``dpframe.file_versions``).

The finding (stop 29): the DuckDB backend keeps, per Parquet table, which units have more than
``max_rows`` rows (only those rows are hashed and may be dropped). After the file was rewritten with one
unit owning 100 rows that cache still said "at most one row each", and a count with ``max_rows=1`` counted
all 100 of them: the release was no longer covered by its cost. Reading a file twice within one query
(the Polars backend's hashes, then its statistics through the mask) had the same hazard in a race. Now a
session reads each file as it was when the session was created: a query after a change is refused before
anything is charged, and a change while a query reads is found before anything is released.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

import dpframe as dp
from dpframe.file_versions import FileVersion, _tail_digest, file_version

BACKENDS = ["polars", "duckdb"]
BIG = dp.PureDP(10_000)     # noise small enough to read the count to within a few


def _write(path: Path, units: list[int]) -> None:
    frame = pl.DataFrame({"u": units, "g": ["a"] * len(units)})
    if path.suffix == ".csv":
        frame.write_csv(path)
    else:
        frame.write_parquet(path)


def _session(path: Path, backend: str) -> dp.Session:
    return dp.Session({"t": str(path)}, privacy_unit=dp.PrivacyUnit("u", max_rows=1),
                      budget=dp.PureDP(10**6), backend=backend)


def _count(sess: dp.Session) -> int:
    out = sess.table("t").group_by("g", keys=["a"]).agg(dp.len()).collect(BIG)
    return int(out["len"][0])


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rewritten_file_is_refused_before_anything_is_charged(tmp_path: Path, backend: str, suffix: str) -> None:
    path = tmp_path / f"t{suffix}"
    _write(path, list(range(200)))                  # 200 units of one row each
    sess = _session(path, backend)
    assert [abs(_count(sess) - 200) <= 5 for _ in range(3)] == [True] * 3   # the DuckDB cache is built
    spent = sess.spent()
    _write(path, [0] * 100 + list(range(100, 200)))  # same row count; unit 0 now owns 100 rows
    with pytest.raises(dp.TableChangedError, match="create a new session"):
        _count(sess)                                # before the fix (DuckDB, Parquet): about 200
    assert sess.spent() == spent and sess.history().height == 3
    assert abs(_count(_session(path, backend)) - 101) <= 5      # a new session reads the new version


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_change_while_a_query_reads_releases_nothing(tmp_path: Path, backend: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer between the query's reads: the query fails, its cost stays charged, nothing comes back."""
    path = tmp_path / "t.parquet"
    _write(path, list(range(50)))
    sess = _session(path, backend)
    engine = type(sess._release.catalog.default_backend)
    read = engine.statistics

    def read_then_rewrite(self: object, request: object) -> pl.DataFrame:
        out = read(self, request)   # type: ignore[arg-type]
        _write(path, [0] * 50)
        return out

    monkeypatch.setattr(engine, "statistics", read_then_rewrite)
    with pytest.raises(dp.DPFrameError, match=r"TableChangedError.*create a new session"):
        _count(sess)
    assert sess.spent() == BIG and sess.history()["status"].to_list() == ["failed"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("change", ["deleted", "same bytes again", "touched"])
def test_any_write_counts_as_a_change(tmp_path: Path, backend: str, change: str) -> None:
    """Even a rewrite with the same bytes, or a restored modification time: the status-change time moved."""
    path = tmp_path / "t.parquet"
    _write(path, list(range(20)))
    sess = _session(path, backend)
    _count(sess)
    if change == "deleted":
        path.unlink()
    elif change == "same bytes again":
        copy = tmp_path / "copy.parquet"
        shutil.copyfile(path, copy)
        os.replace(copy, path)
    else:
        info = path.stat()
        path.write_bytes(path.read_bytes())
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))    # the old modification time back
    with pytest.raises(dp.TableChangedError):
        _count(sess)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reading_the_file_elsewhere_is_not_a_change(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "t.parquet"
    _write(path, list(range(20)))
    sess = _session(path, backend)
    _count(sess)
    pl.read_parquet(path)
    _count(_session(path, backend))
    assert abs(_count(sess) - 20) <= 5 and sess.history().height == 2


def test_in_memory_tables_have_no_version() -> None:
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2]})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    assert sess._release.catalog._versions == {}


def test_a_directory_changes_when_a_file_under_it_does(tmp_path: Path) -> None:
    """Spark reads Parquet directories and Delta tables: every file under the directory is in its version."""
    (tmp_path / "part").mkdir()
    _write(tmp_path / "part" / "a.parquet", [1, 2])
    before = file_version(tmp_path)
    assert isinstance(before, FileVersion) and [e[0] for e in before.entries] == [os.path.join("part", "a.parquet")]
    assert file_version(tmp_path) == before
    _write(tmp_path / "part" / "b.parquet", [3])
    assert file_version(tmp_path) != before


def test_the_digest_reads_a_parquet_footer_and_else_the_tail(tmp_path: Path) -> None:
    """Two same-size versions written within one clock tick differ in their footers (row group statistics)."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pl.DataFrame({"x": [1, 2, 3]}).write_parquet(a, statistics=True, compression="uncompressed")
    pl.DataFrame({"x": [1, 2, 4]}).write_parquet(b, statistics=True, compression="uncompressed")
    assert a.stat().st_size == b.stat().st_size

    def digest(path: Path, parquet: bool) -> bytes:
        with path.open("rb") as f:
            return _tail_digest(f, path.stat().st_size, parquet)

    assert digest(a, True) != digest(b, True)
    footer = int.from_bytes(a.read_bytes()[-8:-4], "little")
    same_footer = tmp_path / "c.parquet"                   # other bytes before the footer, the same footer
    same_footer.write_bytes(b"\0" * 100 + a.read_bytes()[-8 - footer:])
    assert digest(same_footer, True) == digest(a, True)
    assert digest(same_footer, False) != digest(a, False)  # any other file: its last bytes, whatever they are


@pytest.mark.parametrize("make", [lambda p: p.write_bytes(b"PAR1"), lambda p: p.write_bytes(b"x" * 20 + b"PAR1")])
def test_a_file_that_is_not_parquet_still_has_a_version(tmp_path: Path, make: Callable[[Path], object]) -> None:
    path = tmp_path / "odd.parquet"
    make(path)
    version = file_version(path)
    assert version is not None and len(version.entries) == 1 and file_version(path) == version


def test_a_file_uri_is_its_local_path(tmp_path: Path) -> None:
    """Spark users write local paths as ``file://`` URIs: those are checked too."""
    path = tmp_path / "t.parquet"
    _write(path, [1, 2])
    version = file_version(f"file://{path}")
    assert version is not None and version.entries == file_version(path).entries   # type: ignore[union-attr]
    _write(path, [1, 2, 3])
    assert file_version(f"file://{path}") != version


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stream_whose_file_changes_closes_charged(tmp_path: Path, backend: str) -> None:
    """An open sparse-vector stream reads inside its own reservation: a write before its next test makes
    that test fail (the post-read check), and the stream closes charged in full, as after any failure."""
    path = tmp_path / "t.parquet"
    _write(path, list(range(40)))
    sess = _session(path, backend)
    query = sess.table("t").agg(dp.len())
    with pytest.raises(dp.DPFrameError, match="TableChangedError"):
        with sess.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1), max_length=3) as sv:
            assert sv.test(query) is False
            _write(path, [0] * 40)
            sv.test(query)
    assert sv.closed and sess.spent() == dp.PureDP(1)
    with pytest.raises(dp.TableChangedError):       # and the next query is refused before its charge
        _count(sess)
    assert sess.spent() == dp.PureDP(1)
