"""The shared database for public and released data (``dpframe.sql.sandbox.public_connection``).

SQL post-processing of a released frame and public subqueries used to open a DuckDB database per query
(about 12 ms each); they now take a cursor on one locked database per process. These tests pin what the
fresh databases gave: each use sees only its own frames, the configuration stays locked, files stay shut,
the time zone is UTC, and a released frame's post-processing is what it was.
"""

from __future__ import annotations

import threading

import duckdb
import polars as pl
import pytest

import dpframe as dp
from dpframe.sql.post import run
from dpframe.sql.sandbox import public_connection


def test_a_cursor_sees_only_what_it_registered() -> None:
    with public_connection() as first:
        first.register("__dp_released", pl.DataFrame({"n": [1]}).to_arrow())
        with public_connection() as second:
            with pytest.raises(duckdb.CatalogException):
                second.sql("SELECT * FROM __dp_released").fetchall()
    with public_connection() as later, pytest.raises(duckdb.CatalogException):
        later.sql("SELECT * FROM __dp_released").fetchall()


def test_the_configuration_is_locked_and_files_are_shut(tmp_path: object) -> None:
    with public_connection() as con:
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET TimeZone = 'America/New_York'")
        with pytest.raises(duckdb.Error):
            con.sql("SELECT * FROM read_csv('/etc/hostname')").fetchall()
        assert con.sql("SELECT current_setting('TimeZone')").fetchall() == [("UTC",)]


def test_concurrent_post_processing_keeps_each_query_to_its_own_frame() -> None:
    results: dict[int, list[tuple[int, ...]]] = {}

    def post(i: int) -> None:
        frame = pl.DataFrame({"n": [i, i + 100]})
        rows: list[tuple[int, ...]] = []
        for _ in range(30):
            rows += run("SELECT n FROM __dp_released ORDER BY n DESC", frame, {}).rows()
        results[i] = rows

    threads = [threading.Thread(target=post, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: [(i + 100,), (i,)] * 30 for i in range(4)}


def test_a_sql_query_with_post_processing_and_a_public_subquery_runs_as_before() -> None:
    table = pl.DataFrame({"g": ["a", "b", "c"] * 200, "x": [1.0, 2.0, 3.0] * 200})
    sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10),
                      public_tables={"names": pl.DataFrame({"g": ["a", "b", "c"], "w": [1, 2, 3]})}, seed=0)
    sql = ("WITH k AS (SELECT g, w FROM names WHERE g <> 'c') "
           "SELECT t.g, COUNT(*) AS n, SUM(CLAMP(x, 0, 4)) / COUNT(*) AS avg FROM t JOIN k ON t.g = k.g "
           "GROUP BY t.g ORDER BY t.g DESC LIMIT 5")
    out = sess.sql(sql, keys={"g": ["a", "b"]}).collect(dp.PureDP(1))
    assert out["g"].to_list() == ["b", "a"]
    assert out.columns == ["g", "n", "avg"]
    assert all(150 < n < 250 for n in out["n"])
