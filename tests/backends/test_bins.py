"""A grid's adjacent bins counted in one pass (``bins``) give ``statistic_expr``'s counts exactly."""

from __future__ import annotations

import math
from fractions import Fraction as F
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.bins import LEAST_BINS, adjacent_bins
from dpframe.backends.polars import statistic_expr
from dpframe.mechanism import Statistic
from dpframe.plan.nodes import Filter, Scan


def _grid(edges: list[F], column: str = "x") -> list[Statistic]:
    return [Statistic("indicator_sum", column, lo, hi) for lo, hi in zip(edges, edges[1:])]


def _one_by_one(frame: pl.DataFrame, stats: list[Statistic]) -> dict[str, int]:
    return frame.select([statistic_expr(s, None, frame.schema) for s in stats]).row(0, named=True)


def _binned(frame: pl.DataFrame, stats: list[Statistic]) -> dict[str, int]:
    [bins] = adjacent_bins(stats, least=2)
    return bins.counts(frame.select(bins.polars("h"))["h"][0]).row(0, named=True)


EDGES = [F(-10**6), F(-1), F(-1, 3), F(0), F(1, 10), F(1, 3), F(1), F(2**53 + 1), F(10**20)]
ODD = [-0.0, 0.0, -1.0, -1 / 3, 1 / 3, 0.1, math.nextafter(0.1, 0), math.nextafter(1 / 3, 1), 1.0, 2.0**53,
       2.0**53 + 2, 1e20, math.nextafter(1e20, 0), -1e6, math.nextafter(-1e6, -math.inf), math.inf, -math.inf,
       math.nan, 5e-324, -5e-324, 1e300, -1e300]


@pytest.mark.parametrize("dtype", [pl.Float64, pl.Float32])
def test_edge_values_fall_in_the_bins_the_comparisons_put_them_in(dtype: pl.DataType) -> None:
    frame = pl.DataFrame({"x": pl.Series(ODD + [None], dtype=dtype)})
    stats = _grid(EDGES)
    assert _binned(frame, stats) == _one_by_one(frame, stats)


def test_integer_columns_are_read_as_floats_as_the_comparisons_read_them() -> None:
    values = [-(10**6), -1, 0, 1, 2**53, 2**53 + 1, 2**53 + 2, 2**62, -(2**63), None]
    frame = pl.DataFrame({"x": pl.Series(values, dtype=pl.Int64)})
    stats = _grid(EDGES)
    assert _binned(frame, stats) == _one_by_one(frame, stats)


def test_random_values_on_a_geometric_grid() -> None:
    rng = np.random.default_rng(5)
    edges = sorted({F(s * 2.0**e) for s in (-1, 1) for e in range(-30, 31)} | {F(0)})
    x = np.concatenate([rng.standard_cauchy(3000), [float(e) for e in edges], [-float(e) for e in edges]])
    frame = pl.DataFrame({"x": x})
    stats = _grid(edges)
    assert _binned(frame, stats) == _one_by_one(frame, stats)


def test_only_adjacent_runs_are_binned() -> None:
    grid = _grid([F(i) for i in range(LEAST_BINS + 1)])
    assert [len(b.stats) for b in adjacent_bins(grid)] == [LEAST_BINS]
    assert adjacent_bins(grid[:-1]) == []                                    # too few
    assert adjacent_bins(grid[:5] + grid[6:], least=2) == []                 # a gap
    assert adjacent_bins(grid + [grid[3]], least=2) == []                    # a duplicate bin
    assert adjacent_bins([*grid, Statistic("indicator_sum", "x", F(3, 2), F(5, 2))], least=2) == []   # overlap
    other = _grid([F(i) for i in range(LEAST_BINS + 1)], column="y")
    assert sorted(b.column for b in adjacent_bins(list(reversed(grid)) + other)) == ["x", "y"]


def test_an_empty_table_counts_zero_everywhere() -> None:
    frame = pl.DataFrame({"x": pl.Series([], dtype=pl.Float64)})
    stats = _grid(EDGES)
    assert set(_binned(frame, stats).values()) == {0}


def test_bounds_release_the_same_values_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end (same seed): both backends' bounds in one pass equal those counted one aggregate per bin."""
    x = np.random.default_rng(2).standard_cauchy(20_000)
    out = {}
    for backend, least in (("polars", LEAST_BINS), ("duckdb", LEAST_BINS), ("polars", 10**9)):
        monkeypatch.setattr(f"dpframe.backends.{backend}.adjacent_bins", lambda s, n=least: adjacent_bins(s, n))
        sess = dp.Session({"t": pl.DataFrame({"x": x})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(3),
                          backend=backend, seed=11)
        out[backend, least] = tuple(sess.table("t").bounds("x").collect(dp.PureDP(1)) for _ in range(3))
    assert len(set(out.values())) == 1


def _backend_counts_a_grid_as_one_aggregate_per_bin_would(backend: Any, name: str, extra: bool,
                                                         per_bin: bool = True) -> None:
    """The one-pass counts equal the definition (Polars, one by one) and, with ``per_bin``, the backend's own."""
    from dpframe.backends.base import StatisticsRequest

    values = pl.Series(ODD + [None, 7.0, 7.0, -3.0], dtype=pl.Float64)
    stats = tuple(_grid(EDGES + [F(10**21), F(10**22)] + [F(10**22 + k) for k in range(1, 10)]))
    others = (Statistic("rows"), Statistic("nonnull", "x")) if extra else ()
    backend.register("t", pl.DataFrame({"x": values}).lazy())

    def counted(least: int, keep: pl.Expr = pl.lit(True)) -> dict[str, int]:
        request = StatisticsRequest("t", (Filter.of(Scan.of("t", pl.Schema({"x": pl.Float64})), keep),),
                                    dp.PrivacyUnit.row(), (), None, stats + others, 1)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(f"dpframe.backends.{name}.adjacent_bins", lambda s: adjacent_bins(s, least=least))
            out = backend.statistics(request)
        assert out.height == 1          # one row, not one per source row
        return out.row(0, named=True)

    assert counted(2) == {**_one_by_one(pl.DataFrame({"x": values}), list(stats)),
                          **({"__rows": len(values), "__nonnull:x": 24} if extra else {})}
    nothing = pl.col("x") == 12345.0     # no row: every bin 0, one row still
    assert counted(2, nothing) == {**dict.fromkeys((s.key for s in stats), 0),
                                   **({"__rows": 0, "__nonnull:x": 0} if extra else {})}
    if per_bin:
        assert counted(2) == counted(10**9)
        assert counted(2, nothing) == counted(10**9, nothing)


@pytest.mark.parametrize("extra", [False, True])
def test_duckdb_counts_a_grid_as_one_aggregate_per_bin_would(extra: bool) -> None:
    """DuckDB's one-pass count of a grid (``histogram``) equals its one-by-one counts, with or without others."""
    from dpframe.backends.duckdb import DuckDBBackend

    _backend_counts_a_grid_as_one_aggregate_per_bin_would(DuckDBBackend(), "duckdb", extra)


@pytest.mark.parametrize("per_bin", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_spark_counts_a_grid_as_one_aggregate_per_bin_would(per_bin: bool, spark_session: Any) -> None:
    """Spark's one-pass count of a grid (a search in SQL, one group-by) equals the definition (and, slow: its
    one-by-one counts, about 30 s here)."""
    from dpframe.backends.spark import SparkBackend

    _backend_counts_a_grid_as_one_aggregate_per_bin_would(SparkBackend(spark_session), "spark", True, per_bin)

