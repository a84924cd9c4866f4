"""Partial sorted codes on the Polars backend: rank windows, exact positions, and exact releases."""

from __future__ import annotations

from fractions import Fraction as F
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
import dpframe.session
from dpframe.backends import polars_windows
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.backends.polars_windows import sort_each
from dpframe.backends.rank_windows import OPEN_HIGH, OPEN_LOW, window_bounds, window_positions
from dpframe.backends.spark import SparkBackend
from dpframe.mechanism import Statistic
from dpframe.testing.backends import ROW, request


@pytest.mark.parametrize("seed", range(20))
def test_window_positions_are_the_true_ranks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = [np.sort(rng.integers(0, 30, rng.integers(0, 80))) for _ in range(4)]
    lo = np.sort(rng.integers(-2, 32, (4, 3)), axis=1)
    hi = np.maximum(np.sort(rng.integers(-2, 32, (4, 3)), axis=1), lo)
    hi = np.maximum.accumulate(hi, axis=1)
    listed, below, offsets, truth = [], [], [0], []
    for g, values in enumerate(groups):
        inside = np.zeros(values.size, dtype=bool)
        for j in range(3):
            inside |= (values >= lo[g, j]) & (values <= hi[g, j])
        listed.append(values[inside])
        truth.append(np.flatnonzero(inside))
        below.append([(values < lo[g, j]).sum() for j in range(3)])
        offsets.append(offsets[-1] + int(inside.sum()))
    got = window_positions(np.concatenate(listed), np.array(offsets), np.array(below), lo)
    assert got.tolist() == np.concatenate(truth).tolist()


def test_window_bounds_are_monotone_and_open_past_the_sample() -> None:
    sample = np.arange(0, 100)
    lo, hi = window_bounds(sample, np.array([0, 100, 100]), [F(1, 100), F(1, 2), F(99, 100)], reach=0)
    assert (lo[0, :-1] <= lo[0, 1:]).all() and (hi[0, :-1] <= hi[0, 1:]).all()
    assert lo[0, 0] == OPEN_LOW and hi[0, 2] == OPEN_HIGH        # q·m ± 5σ passes the ends
    assert lo[1].tolist() == [OPEN_LOW] * 3 and hi[1].tolist() == [OPEN_HIGH] * 3   # an empty sample: open


def table(n: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(100, 30, n).round(2)
    x[rng.random(n) < 0.01] = np.nan
    return pl.DataFrame({"x": x, "d": rng.integers(0, 1000, n), "g": rng.choice(["a", "b", "c"], n)})


def releases(df: pl.DataFrame, backend: str, grouped: bool, spark: Any = None) -> list[Any]:
    extra = {"spark": spark} if backend == "spark" else {}
    sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(100), seed=17, backend=backend,
                      **extra)
    frame = sess.table("t").group_by("g", keys=["a", "b", "c", "zz"]) if grouped else sess.table("t")
    out = frame.agg(dp.median("x", bounds=(0, 200)).alias("m"),
                    dp.quantile("d", [0.1, 0.5, 0.9], bounds=(0, 1000)).alias("d")).collect(dp.PureDP(2))
    return out.rows()


def partial_statistics(monkeypatch: pytest.MonkeyPatch, backend: type) -> list[int]:
    """Counts the partial ``sorted`` statistics (rank windows) ``backend`` returns."""
    calls: list[int] = []
    real = backend.statistics

    def counted(self: Any, request: Any) -> Any:
        out = real(self, request)
        calls.extend(1 for s in request.statistics if s.near and isinstance(out.schema[s.key], pl.Struct))
        return out
    monkeypatch.setattr(backend, "statistics", counted)
    return calls


def completions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the sessions' completions of partial codes."""
    calls: list[int] = []
    real = dpframe.aggregate._whole_codes

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)
    monkeypatch.setattr(dpframe.aggregate, "_whole_codes", counted)
    return calls


@pytest.mark.parametrize("grouped", [False, True])
def test_windows_release_exactly_what_whole_lists_release(grouped: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same seed, rank windows on Polars and on DuckDB, whole lists on Polars (the sample made to miss
    nothing: no windows): the same random draws give the same outputs, and on ordinary data the
    windows held every rank the draws read (no completion)."""
    df = table(80_000, 1)
    calls = completions(monkeypatch)
    partial = partial_statistics(monkeypatch, DuckDBBackend)
    on_duckdb = releases(df, "duckdb", grouped)
    assert partial                                  # DuckDB answered with rank windows
    assert releases(df, "polars", grouped) == on_duckdb
    monkeypatch.setattr(polars_windows, "WORTH", -1.0)   # windows never pay: whole sorted lists
    assert releases(df, "polars", grouped) == on_duckdb
    assert calls == []


@pytest.mark.parametrize("grouped", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_spark_windows_release_what_polars_releases(grouped: bool, spark_session: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on Spark (rank windows from a Spark sample): identical releases for one seed."""
    df = table(80_000, 4)
    partial = partial_statistics(monkeypatch, SparkBackend)
    assert releases(df, "spark", grouped, spark_session) == releases(df, "polars", grouped)
    assert partial


def test_private_keys_with_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition selection reads only its own statistic; the kept groups' windows release as whole lists do."""
    rng = np.random.default_rng(5)
    n = 90_000
    df = pl.DataFrame({"u": np.arange(n), "x": rng.normal(0, 1, n), "g": rng.choice(["a", "b", "c"], n)})

    def run(backend: str) -> list[Any]:
        sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, 1e-6), seed=3,
                          backend=backend)
        return sess.table("t").group_by("g").agg(dp.median("x", bounds=(-5, 5))).collect(dp.ApproxDP(1, 1e-7)).rows()
    calls = completions(monkeypatch)
    assert run("polars") == run("duckdb")
    assert calls == []


def test_user_level_quantiles_agree_where_bounding_keeps_every_row(spark_session: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """With a user unit whose max_rows binds nowhere the three backends bound (and cache, on Spark) and
    still release the same quantiles for one seed (windows on each)."""
    rng = np.random.default_rng(6)
    n = 30_000
    df = pl.DataFrame({"u": rng.permutation(n) // 3, "x": rng.normal(0, 1, n), "g": rng.choice(["a", "b"], n)})

    def run(backend: str) -> list[Any]:
        extra = {"spark": spark_session} if backend == "spark" else {}
        sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.PureDP(10), seed=8,
                          backend=backend, **extra)
        q = sess.table("t").group_by("g", keys=["a", "b"]).agg(dp.quantile("x", [0.25, 0.75], bounds=(-5, 5)))
        return q.collect(dp.PureDP(1)).rows()
    calls = completions(monkeypatch)
    assert run("polars") == run("duckdb") == run("spark")
    assert calls == []


def test_a_misleading_sample_completes_and_stays_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every 16th row (so every sampled one) is spread over [0, 200], the rest sits in [20, 21]: the
    windows from the sample miss the true median, and the codes complete from the data."""
    rng = np.random.default_rng(2)
    x = rng.uniform(20, 21, 64_000).round(3)
    x[::16] = rng.uniform(0, 200, x[::16].size).round(3)
    df = pl.DataFrame({"x": x, "d": rng.integers(0, 1000, x.size), "g": rng.choice(["a", "b", "c"], x.size)})
    calls = completions(monkeypatch)
    assert releases(df, "polars", False) == releases(df, "duckdb", False)
    assert calls          # the window missed, and the completion ran


def test_small_groups_get_whole_lists() -> None:
    """Windows that would hold most codes are not worth it: the backend returns whole sorted lists."""
    df = table(2_000, 3)
    backend = PolarsBackend()
    backend.register("t", df.lazy())
    stat = Statistic("sorted", "d", F(0), F(1000), F(0), near=(F(1, 2),), reach=500)
    out = backend.statistics(request((stat,), ROW, ("g",)))
    assert out.schema[stat.key] == pl.List(pl.Int64)
    want = df.group_by("g").agg(pl.col("d").sort()).sort("g")["d"].to_list()
    assert out[stat.key].to_list() == want


def test_user_level_bounding_is_materialised_once() -> None:
    """With contribution bounding the bounded rows are computed once; the windows still sit at true ranks."""
    rng = np.random.default_rng(4)
    n = 60_000
    df = pl.DataFrame({"u": rng.integers(0, 5_000, n), "x": rng.normal(0, 1, n), "g": rng.choice(["a", "b"], n)})
    backend = PolarsBackend()
    backend.register("t", df.lazy())
    unit = dp.PrivacyUnit("u", max_rows=3)
    whole = Statistic("sorted", "x", F(-5), F(5), F(-5), grid_exp=-8)
    near = Statistic("sorted", "x", F(-5), F(5), F(-5), grid_exp=-8, near=(F(1, 2),), reach=30)
    part = backend.statistics(request((near,), unit, ("g",), seed=9))
    full = backend.statistics(request((whole,), unit, ("g",), seed=9))
    for row, lists in zip(part[near.key].to_list(), full[whole.key].to_list()):
        assert row["n"] == len(lists) and row["positions"]
        assert [lists[p] for p in row["positions"]] == row["codes"]


@pytest.mark.parametrize(("groups", "span"), [(5, 100), (12_000, 100), (12_000, 2**62)])
def test_sort_each_sorts_every_list(groups: int, span: int) -> None:
    """Few lists: sorted one by one; many: one packed sort, or a lexsort when the values are too wide."""
    rng = np.random.default_rng(groups)
    lists = [rng.integers(-span // 2, span // 2, rng.integers(0, 6)).tolist() for _ in range(groups)]
    got = sort_each(pl.Series("k", lists, dtype=pl.List(pl.Int64)))
    assert got.name == "k" and got.to_list() == [sorted(v) for v in lists]


@pytest.mark.parametrize("threads", ["1", "16"])
def test_sort_each_lists_of_a_hundred_on_few_and_many_threads(threads: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lists of ~100 values: one by one on ≤ 2 threads, packed sorts on more (LONG_LIST); same lists, same order."""
    monkeypatch.setenv("DPFRAME_THREADS", threads)
    rng = np.random.default_rng(3)
    lists = [rng.integers(0, 10**6, rng.integers(60, 140)).tolist() for _ in range(3_000)]
    order = rng.permutation(3_000)
    order[::7] = -1
    got = sort_each(pl.Series("k", lists, dtype=pl.List(pl.Int64)), order)
    assert got.to_list() == [sorted(lists[i]) if i >= 0 else [] for i in order]


@pytest.mark.parametrize("dtype", [pl.Int8, pl.Int32, pl.Int64, pl.UInt32, pl.UInt64])
def test_integer_codes_are_exact_in_int64_and_int128(dtype: Any) -> None:
    """Codes clamp, shift and round toward zero exactly, whether computed in Int64 or (near int64's ends) Int128."""
    info = np.iinfo(np.dtype(str(dtype).lower()))
    rng = np.random.default_rng(0)
    values = [int(v) for v in rng.integers(int(info.min), int(info.max), 40, endpoint=True, dtype=info.dtype)]
    values += [int(info.min), int(info.max), None]
    top = min(int(info.max), 2**63 - 1)
    for lower, upper, shift, grid in [(int(info.min), top, 0, 0), (-5, 1000, 3, 2), (int(info.min), top, -7, 3),
                                      (0, top, top // 2, 1)]:
        lower = max(lower, int(info.min))
        stat = Statistic("sorted", "x", F(lower), F(upper), shift=F(shift), grid_exp=grid)
        got = pl.select(polars_windows.code_values(pl.lit(pl.Series(values, dtype=dtype)), dtype(), stat))
        want = [None if v is None else int((min(max(v, lower), upper) - shift) / F(2**grid)) for v in values]
        assert got.to_series().to_list() == want


def test_many_small_public_groups_skip_the_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """2,000 public groups of ~20 rows: windows would hold every code, so no sample is drawn (HOPELESS);
    never skipping gives the same release for one seed."""
    rng = np.random.default_rng(6)
    df = pl.DataFrame({"x": rng.normal(100, 30, 40_000), "g": rng.integers(0, 2_000, 40_000)})
    placed: list[int] = []
    real = polars_windows.RankWindows.placed.__func__   # type: ignore[attr-defined]
    monkeypatch.setattr(polars_windows.RankWindows, "placed",
                        classmethod(lambda cls, *a: placed.append(1) or real(cls, *a)))

    def release() -> list[Any]:
        sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=11)
        return sess.table("t").group_by("g", keys=list(range(2_000))).agg(
            dp.median("x", bounds=(0, 200)).alias("m")).collect(dp.PureDP(1)).rows()

    skipped = release()
    assert placed == []
    monkeypatch.setattr(polars_windows, "HOPELESS", 2.0)    # never skip: sample, find windows not worth it
    assert release() == skipped
    assert placed == [1]


def test_a_small_bounded_table_gets_whole_lists_without_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under WHOLE_BELOW bounded rows no sample is drawn or placed (a few ms per query saved); same releases."""
    rng = np.random.default_rng(8)
    df = pl.DataFrame({"u": rng.integers(0, 300, 1000), "x": rng.uniform(0, 100, 1000)})

    def median(seed: int) -> Any:
        sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit("u", max_rows=5), budget=dp.PureDP(10), seed=seed)
        return sess.table("t").agg(dp.median("x", bounds=(0, 100))).collect(dp.PureDP(1)).rows()

    whole = median(3)
    placed: list[int] = []
    real = polars_windows.RankWindows.placed
    monkeypatch.setattr(polars_windows.RankWindows, "placed", classmethod(
        lambda cls, *a, **k: placed.append(1) or real.__func__(cls, *a, **k)))
    assert median(3) == whole and placed == []
    monkeypatch.setattr(polars_windows, "WHOLE_BELOW", 0)        # the old route: sampled and placed
    assert median(3) == whole and placed == [1]


def _awkward_values(rng: np.random.Generator, lower: float, upper: float, shift: float) -> np.ndarray:
    """Values around the bounds, the shift, grid points and zero, with their neighbouring floats, NaN and infinities."""
    x = np.concatenate([rng.uniform(lower - 5, upper + 5, 2_000), [np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324,
                                                                    -5e-324, lower, upper, shift]])
    return np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)])


@pytest.mark.parametrize("seed", range(40))
def test_float_ends_compare_exactly_as_codes(seed: int) -> None:
    """For any grid, shift and window, comparing a float value with float_ends' (a, b) selects exactly the rows
    whose code is below lo / inside [lo, hi], and counting non-NaN values counts the non-null codes."""
    rng = np.random.default_rng(seed)
    lower = F(int(rng.integers(-1000, 1000)), int(rng.integers(1, 8)))
    upper = lower + F(int(rng.integers(1, 10**6)), int(rng.integers(1, 8)))
    shift = lower if seed % 3 else F(int(rng.integers(-5000, 5000)), 3)
    stat = Statistic("sorted", "x", lower, upper, shift, grid_exp=int(rng.integers(-30, 6)))
    x = pl.Series(_awkward_values(rng, float(lower), float(upper), float(shift)))
    for dtype in (pl.Float64, pl.Float32):
        values = x.cast(dtype)
        codes = pl.select(polars_windows.code_values(pl.lit(values), dtype(), stat)).to_series()
        known = codes.drop_nulls().to_numpy()
        inner = known[(known > known.min()) & (known < known.max())]       # ends some float lies beyond
        picked = [sorted(int(v) for v in rng.choice(inner, 2)) for _ in range(3)]
        ends = [(min(lo for lo, _ in picked[j:]), max(hi for _, hi in picked[:j + 1])) for j in range(3)]  # monotone
        found = polars_windows.float_ends(stat, ends)
        assert found is not None
        wide = values.cast(pl.Float64)
        assert codes.count() == wide.is_not_nan().sum()
        for (lo, hi), (a, b) in zip(ends, found):
            assert (codes < lo).fill_null(False).to_list() == (wide <= a).fill_null(False).to_list()
            assert codes.is_between(lo, hi).fill_null(False).to_list() == \
                ((wide > a) & (wide <= b)).fill_null(False).to_list()


def test_float_ends_refuse_open_and_unreachable_ends() -> None:
    """An open window end, or a code no float reaches (below the lower bound's code), keeps the code comparisons."""
    stat = Statistic("sorted", "x", F(0), F(10), grid_exp=-1)
    assert polars_windows.float_ends(stat, [(OPEN_LOW, 5)]) is None
    assert polars_windows.float_ends(stat, [(3, OPEN_HIGH)]) is None
    assert polars_windows.float_ends(stat, [(0, 5)]) is None          # every float's code is >= 0: none below
    assert polars_windows.float_ends(stat, [(3, 20)]) is None         # every float's code is <= 20
    assert polars_windows.float_ends(stat, [(1, 19)]) == [(0.49999999999999994, 9.999999999999998)]


def _value_table(kind: str) -> pl.DataFrame:
    rng = np.random.default_rng(12)
    n = 40_000
    x = rng.normal(100, 30, n).round(2)
    if kind == "misleading":           # every sampled row spread over [0, 200], the rest in [20, 21]
        x = rng.uniform(20, 21, n).round(3)
        x[::8] = rng.uniform(0, 200, x[::8].size).round(3)
    x[rng.random(n) < 0.01] = np.nan
    out = pl.DataFrame({"x": x, "g": rng.choice(["a", "b", "c"], n), "d": rng.integers(0, 1000, n)})
    out = out.with_columns(pl.when(pl.int_range(pl.len()) % 97 == 0).then(None).otherwise(pl.col("x")).alias("x"))
    return out.with_columns(pl.col("x").cast(pl.Float32)) if kind == "float32" else out


@pytest.mark.parametrize("kind", ["float64", "float32", "misleading"])
@pytest.mark.parametrize("grouped", [False, True])
def test_value_comparisons_release_what_code_comparisons_release(kind: str, grouped: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Same seed: a stored float column's windows compared on values (float_ends) and on codes release the same,
    with NaN, nulls, Float32 values and a sample that misses the true ranks (then completed from the data)."""
    df = _value_table(kind)
    used: list[int] = []
    real = polars_windows.float_ends

    def counted(*args: Any) -> Any:
        used.append(1)
        return real(*args)
    monkeypatch.setattr(polars_windows, "float_ends", counted)
    monkeypatch.setattr(polars_windows, "COMPARE_FROM", 1 << 62)      # codes compared (as before)
    by_codes = releases(df, "polars", grouped)
    assert used == []
    monkeypatch.setattr(polars_windows, "COMPARE_FROM", 0)
    assert releases(df, "polars", grouped) == by_codes
    assert used                                                       # values compared
    monkeypatch.setattr(polars_windows, "WORTH", -1.0)                # whole sorted lists
    assert releases(df, "polars", grouped) == by_codes
