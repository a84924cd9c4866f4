"""Threads racing on one DuckDB backend's per-table bounding state (stop 29 review; no finding).

The DuckDB backend keeps, per registered table, which rows bounding ranks for the last public parameters
(:class:`~dpframe.backends.duckdb._Ranking`: unit, keys, ``max_rows``) and, for a Parquet file, which
parameters were asked last. If one query could read another's ranking, a unit could keep the rows of
another ``max_rows`` (or of other keys) and the release would not be covered by its cost. Threads at a
barrier, each with its own keys, ``max_rows``, statistics and seed, must get exactly the statistics a
serial run gives.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dpframe.backends.base import StatisticsRequest
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.mechanism import Statistic
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.backends import request

THREADS = 24


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def _requests() -> list[StatisticsRequest]:
    total = Statistic("fixed_sum", "x", Fraction(0), Fraction(100), grid_exp=0)
    return [request((Statistic("rows"), total) if i % 2 else (Statistic("rows"),), PrivacyUnit("u", max_rows=1 + i % 4),
                    ("g",), pl.DataFrame({"g": list(range(i % 5 + 1))}) if i % 3 else None, seed=100 + i % 7)
            for i in range(THREADS)]


@pytest.mark.parametrize("source", ["arrow", "parquet"])
def test_racing_queries_never_read_each_others_ranking(source: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 12_000
    data = pl.DataFrame({"u": rng.integers(0, 800, n), "g": rng.integers(0, 6, n), "x": rng.integers(0, 100, n)})
    path = tmp_path / "t.parquet"
    data.write_parquet(path, row_group_size=500)

    def backend() -> DuckDBBackend:
        out = DuckDBBackend()
        if source == "parquet":
            out.register_source("t", pl.scan_parquet(path), str(path))
        else:
            out.register("t", data.lazy())
        return out

    requests = _requests()
    serial = backend()
    want = [serial.statistics(r) for r in requests]
    shared = backend()
    got: list[pl.DataFrame | None] = [None] * len(requests)
    barrier = threading.Barrier(len(requests))

    def run(i: int) -> None:
        barrier.wait()
        for _ in range(2):       # the first round builds the rankings, the second reads them
            got[i] = shared.statistics(requests[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [i for i, (a, b) in enumerate(zip(got, want)) if a is None or not a.equals(b)] == []
