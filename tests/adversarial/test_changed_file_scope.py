"""The changed-file check is scoped to the files a query reads (``dpframe.file_versions``).

A session with two file-backed tables, ``a`` and ``b``: once ``b``'s file is written, every query that
reads ``b`` is refused before anything is charged (method chains, SQL with a join or a CTE, query
families, multi-step releases), and a change found after a read still fails the query that read the
file; queries that read only ``a`` keep running. Before, any change refused every query of the session.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.base import StatisticsRequest
from dpframe.interactive.ptr import gated_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.mechanism import Statistic

BACKENDS = ["polars", "duckdb"]
JOIN = "SELECT label, COUNT(*) AS n FROM {t} JOIN groups USING (g) GROUP BY label"
CTE = "WITH s AS (SELECT * FROM {t} WHERE x > 0) SELECT COUNT(*) AS n FROM s"


def _write(path: Path, rows: int) -> None:
    pl.DataFrame({"u": list(range(rows)), "g": ["a"] * rows, "x": [1.0] * rows}).write_parquet(path)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    _write(a, 30)
    _write(b, 30)
    return a, b


def _session(files: tuple[Path, Path], backend: str, accountant: str | None = None) -> dp.Session:
    return dp.Session({"a": str(files[0]), "b": str(files[1])}, privacy_unit=dp.PrivacyUnit("u", max_rows=1),
                      budget=dp.ApproxDP(1000, 1e-3), backend=backend, accountant=accountant, seed=0,
                      public_tables={"groups": pl.DataFrame({"g": ["a"], "label": ["first"]})},
                      public_keys={"a.g": ["a"], "b.g": ["a"]})


def _refused_free(sess: dp.Session, path: Path, run: object) -> None:
    """``run()`` raises TableChangedError naming ``path``'s table and file and the fix; nothing is charged."""
    history = sess.history().height
    with pytest.raises(dp.TableChangedError, match=re.escape(str(path))) as info:
        run()   # type: ignore[operator]
    assert info.value.argument == "tables['b']" and "create a new session" in (info.value.fix or "")
    assert sess.history().height == history


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_query_on_an_unchanged_table_runs_after_another_file_changed(files: tuple[Path, Path], backend: str) -> None:
    sess = _session(files, backend)
    _write(files[1], 5)                                   # b's file is rewritten
    a = sess.table("a")
    assert a.agg(dp.len()).collect(dp.PureDP(1)).height == 1                          # before: refused
    assert a.group_by("g", keys=["a"]).agg(dp.sum("x", bounds=(0, 1))).collect(dp.PureDP(1)).height == 1
    assert sess.sql(JOIN.format(t="a")).collect(dp.PureDP(1))["label"].to_list() == ["first"]
    assert sess.sql(CTE.format(t="a")).collect(dp.PureDP(1)).height == 1
    assert sess.history()["status"].to_list() == ["committed"] * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_query_reading_the_changed_file_is_refused_free(files: tuple[Path, Path], backend: str) -> None:
    sess = _session(files, backend)
    sess.table("b").agg(dp.len()).collect(dp.PureDP(1))
    _write(files[1], 5)
    b = sess.table("b")
    _refused_free(sess, files[1], lambda: b.agg(dp.len()).collect(dp.PureDP(1)))
    _refused_free(sess, files[1], lambda: b.group_by("g", keys=["a"]).agg(dp.len()).collect(dp.PureDP(1)))
    _refused_free(sess, files[1], lambda: sess.sql(JOIN.format(t="b")).collect(dp.PureDP(1)))
    _refused_free(sess, files[1], lambda: sess.sql(CTE.format(t="b")).collect(dp.PureDP(1)))
    assert sess.spent() == dp.ApproxDP(1, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_families_and_multi_step_releases_check_every_table_they_read(files: tuple[Path, Path], backend: str) -> None:
    """Top-k (two reads of its table), run_until (one per step), gated_release (gate and query), PTR."""
    sess = _session(files, backend)
    _write(files[1], 5)
    a, b = sess.table("a"), sess.table("b")
    eps = dp.PureDP(1)
    a.group_by("g").top_k(k=1).collect(dp.ApproxDP(1, 1e-6))
    _refused_free(sess, files[1], lambda: b.group_by("g").top_k(k=1).collect(dp.ApproxDP(1, 1e-6)))
    _refused_free(sess, files[1], lambda: sess.sql(
        "SELECT g FROM b GROUP BY g HAVING TOP_K(COUNT(*), 1)").collect(dp.ApproxDP(1, 1e-6)))
    run_until([a.agg(dp.len()), a.agg(dp.len())], eps, stop=lambda r: False)
    _refused_free(sess, files[1], lambda: run_until([a.agg(dp.len()), b.agg(dp.len())], eps, stop=lambda r: True))
    gated_release(a.agg(dp.len()), eps, a.agg(dp.len()), 0, eps)
    _refused_free(sess, files[1], lambda: gated_release(a.agg(dp.len()), eps, b.agg(dp.len()), 0, eps))
    _refused_free(sess, files[1], lambda: gated_release(b.agg(dp.len()), eps, a.agg(dp.len()), 0, eps))
    robust_median(a, "x", bounds=(0, 10)).collect(dp.ApproxDP(1, 1e-7))
    _refused_free(sess, files[1], lambda: robust_median(b, "x", bounds=(0, 10)).collect(dp.ApproxDP(1, 1e-7)))
    assert set(sess.history()["status"]) == {"committed"} and sess.history().height == 4


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("written", ["a", "b"])
def test_the_check_after_reading_covers_the_file_the_query_read(files: tuple[Path, Path], backend: str, written: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A write while a query on ``a`` reads: to ``a``'s file it fails the query (charged, nothing released);
    to ``b``'s file it changes nothing the query read."""
    sess = _session(files, backend)
    engine = type(sess._release.catalog.default_backend)
    read = engine.statistics

    def read_then_write(self: object, request: object) -> pl.DataFrame:
        out = read(self, request)   # type: ignore[arg-type]
        _write(files[0] if written == "a" else files[1], 5)
        return out

    monkeypatch.setattr(engine, "statistics", read_then_write)
    query = sess.table("a").agg(dp.len())
    if written == "a":
        with pytest.raises(dp.DPFrameError, match=r"TableChangedError.*create a new session"):
            query.collect(dp.PureDP(1))
        assert sess.history()["status"].to_list() == ["failed"]
    else:
        assert query.collect(dp.PureDP(1)).height == 1
        assert sess.history()["status"].to_list() == ["committed"]


def test_a_stream_whose_tables_are_not_known_when_it_opens_checks_every_file(files: tuple[Path, Path]) -> None:
    """A stream reserves before it is given its queries: it cannot open once any file changed; once open,
    each call checks the file it read."""
    sess = _session(files, "polars")
    count_a = sess.table("a").agg(dp.len())
    with sess.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1), max_length=3) as sv:
        _write(files[1], 5)
        assert sv.test(count_a) is False                 # reads a: unchanged
    _refused_free(sess, files[1], lambda: sess.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1)))


def test_a_release_reads_only_the_tables_it_declared(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader of a release declared to read ``a`` refuses a read of ``b`` (its file was not checked
    before charging): a dpframe (or plugin) bug, refused before the backend reads; the charge stays."""
    sess = _session(files, "polars")
    engine = type(sess._release.catalog.default_backend)
    asked: list[str] = []
    read = engine.statistics

    def recorded(self: object, request: StatisticsRequest) -> pl.DataFrame:
        asked.append(request.table)
        return read(self, request)   # type: ignore[arg-type]

    monkeypatch.setattr(engine, "statistics", recorded)
    a, b = sess.table("a")._node, sess.table("b")._node
    rows, cost = (Statistic("rows"),), sess.accountant.charge(dp.PureDP(1))
    sess._release.release(cost, "count", "test", lambda reader: reader.statistics(a, rows),
                          tables=frozenset({"a"}))
    with pytest.raises(dp.DPFrameError, match=r"failed while running \(DPFrameError\)"):
        sess._release.release(cost, "count", "test", lambda reader: reader.statistics(b, rows),
                              tables=frozenset({"a"}))
    assert asked == ["a"] and sess.history()["status"].to_list() == ["committed", "failed"]


def test_a_release_that_reads_no_table_runs_after_a_change(files: tuple[Path, Path]) -> None:
    """Multi-label PATE releases votes the caller passes: it reads no table, so no file is checked."""
    from dpframe_topk import MultiLabelPATE

    sess = _session(files, "polars", accountant="rdp")
    _write(files[1], 5)
    votes = pl.DataFrame({"query": [0, 0], "label": [0, 1], "vote": [90, 10]})
    assert MultiLabelPATE(gumbel_scale=5, sigma=6, delta_t=1e-9).collect(sess, votes).height == 1


def test_run_ex_post_checks_the_tables_it_names(files: tuple[Path, Path]) -> None:
    """The public ex-post building block: ``tables=`` names what ``run`` reads (left out: every file)."""
    from dpframe.interactive import OdpSpec, run_ex_post

    sess = _session(files, "polars")
    spec = OdpSpec.trivial(0.5, 0)
    _write(files[1], 5)
    assert run_ex_post(sess, spec, "toy", "toy", lambda: 1, tables=["a"]) == 1
    _refused_free(sess, files[1], lambda: run_ex_post(sess, spec, "toy", "toy", lambda: 1, tables=["a", "b"]))
    _refused_free(sess, files[1], lambda: run_ex_post(sess, spec, "toy", "toy", lambda: 1))
    for bad in ("a", ["nope"], [1], 3):
        with pytest.raises(dp.ArgumentError) as info:
            run_ex_post(sess, spec, "toy", "toy", lambda: 1, tables=bad)   # type: ignore[arg-type]
        assert info.value.argument == "tables"
    assert sess.history().height == 1


def test_a_backend_first_used_after_a_change_runs_queries_on_the_other_tables(files: tuple[Path, Path]) -> None:
    """``sess.sql(..., backend="duckdb")`` on a Polars session creates that backend with the session's
    tables; a deleted (or rewritten) file is left out of it instead of failing every query."""
    sess = _session(files, "polars")
    files[1].unlink()
    assert sess.sql(JOIN.format(t="a"), backend="duckdb").collect(dp.PureDP(1))["label"].to_list() == ["first"]
    _refused_free(sess, files[1], lambda: sess.sql(JOIN.format(t="b"), backend="duckdb").collect(dp.PureDP(1)))
