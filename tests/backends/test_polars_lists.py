"""Per-group sorted lists by one packed sort (``polars_lists``): the same lists as aggregating, every key type."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.backends import polars as polars_backend
from dpframe.backends import polars_lists, polars_windows
from dpframe.backends.polars_lists import packs, sorted_lists


def expected(keys: pl.Series, codes: pl.Series, groups: pl.Series) -> list[list[int]]:
    """The lists by Polars' aggregation, then sorted (what the backend did before)."""
    agg = pl.DataFrame({"k": keys, "c": codes}).group_by("k").agg(pl.col("c").sort())
    by_key = {k: v for k, v in agg.iter_rows()}
    return [by_key.get(g, []) for g in groups.to_list()]


def check(keys: pl.Series, codes: pl.Series, groups: pl.Series) -> None:
    assert sorted_lists(keys, codes, groups).to_list() == expected(keys, codes, groups)


@pytest.mark.parametrize("dtype", [pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt32, pl.UInt64])
def test_every_integer_type_with_nulls_absent_keys_and_extremes(dtype: Any) -> None:
    info = np.iinfo(np.dtype(str(dtype).lower()))
    rng = np.random.default_rng(1)
    low = int(info.min) if info.min < 0 else 0
    values = [int(v) for v in rng.integers(max(low, -50), min(int(info.max), 50), 400, endpoint=True)]
    values[::37] = [None] * len(values[::37])
    keys = pl.Series(values, dtype=dtype)
    codes = pl.Series(rng.integers(-(10**6), 10**6, keys.len()))
    check(keys, codes, pl.Series([None, *range(max(low, -60), 60)], dtype=dtype))   # absent keys: empty lists
    check(keys, codes, pl.Series([3, None, 1], dtype=dtype))                          # any order, a subset
    ends = pl.Series([int(info.min), int(info.max), int(info.min), None], dtype=dtype)  # the widest spread
    check(ends, pl.Series([5, 4, 3, 2]), pl.Series([int(info.max), None, int(info.min)], dtype=dtype))


def test_keys_spread_wider_than_a_count_are_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(polars_lists, "SPAN", 8)
    rng = np.random.default_rng(2)
    keys = pl.Series(rng.choice([-(2**62), -3, 0, 7, 2**40, 2**62], 300))
    codes = pl.Series(rng.integers(0, 100, 300))
    check(keys, codes, pl.Series([2**62, None, 7, 8, -(2**62), 0]))
    u = pl.Series(np.array([0, 2**63 + 5, 2**64 - 1], dtype=np.uint64)[rng.integers(0, 3, 50)])
    check(u, pl.Series(rng.integers(0, 9, 50)), pl.Series([2**64 - 1, 0, 2**63 + 5, 4], dtype=pl.UInt64))


def test_dates_booleans_and_codes_too_wide_to_pack() -> None:
    days = pl.Series([dt.date(2024, 1, d) for d in (3, 1, 3, 2)] + [None])
    check(days, pl.Series([4, 3, 2, 1, 0]), pl.Series([None, dt.date(2024, 1, 1), dt.date(2024, 1, 3)]))
    flags = pl.Series([True, False, None, True, True])
    check(flags, pl.Series([9, 8, 7, 6, 5]), pl.Series([None, False, True]))
    wide = pl.Series([-(2**62), 2**62, 0, 5, -7])         # codes spanning 2**63: the lexsort route
    check(pl.Series([1, 1, 2, 1, 2]), wide, pl.Series([1, 2]))


def test_no_rows_only_null_keys_and_chunked_input() -> None:
    check(pl.Series([], dtype=pl.Int64), pl.Series([], dtype=pl.Int64), pl.Series([1, 2]))
    check(pl.Series([None, None], dtype=pl.Int32), pl.Series([3, 1]), pl.Series([None, 4], dtype=pl.Int32))
    keys = pl.concat([pl.Series([2, 1]), pl.Series([2, None])], rechunk=False)
    codes = pl.concat([pl.Series([5, 6]), pl.Series([1, 0])], rechunk=False)
    check(keys, codes, pl.Series([1, 2, None]))


def test_which_key_types_pack() -> None:
    assert all(packs(t) for t in (pl.Int64(), pl.UInt8(), pl.Date(), pl.Boolean()))
    assert not any(packs(t) for t in (pl.String(), pl.Float64(), pl.Int128(), pl.Datetime(), pl.Categorical()))


def release(df: pl.DataFrame, keys: list[Any] | None) -> list[Any]:
    total = dp.ApproxDP(100, 1e-5) if keys is None else dp.PureDP(100)
    sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit.row(), budget=total, seed=5)
    out = sess.table("t").group_by("g", keys=keys).agg(
        dp.median("x", bounds=(0, 200)).alias("m"), dp.quantile("x", [0.1, 0.9], bounds=(0, 200)).alias("q"),
        dp.len().alias("n")).collect(dp.ApproxDP(3, 1e-6) if keys is None else dp.PureDP(3))
    return out.rows()


DAY = dt.date(2025, 3, 1)


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize(("kind", "keys"), [
    ("int", None), ("int", [-1, 0, 3, 5, 11, 17, 40]), ("nullable int", None),
    ("date", [DAY + dt.timedelta(days=d) for d in (0, 3, 4, 5, 11, 17)]), ("bool", [False, True])])
def test_same_seed_same_release_as_the_aggregation(kind: str, keys: list[Any] | None, windows: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouped by an integer, a date or a boolean: the packed lists (whole lists, or the codes inside rank
    windows); with packing turned off, the aggregation's lists. Same seed, identical releases (public keys
    with and without rows, a group too small for the sample to see, private keys, null keys, NaNs)."""
    rng = np.random.default_rng(4)
    n = 30_000
    x = rng.normal(100, 30, n)
    x[rng.random(n) < 0.02] = np.nan
    g = pl.Series(rng.choice([0, 3, 5, 11, 17], n, p=[0.3, 0.3, 0.2, 0.1999, 0.0001]))
    if kind == "nullable int":
        g = pl.Series([None if i % 50 == 0 else v for i, v in enumerate(g.to_list())], dtype=pl.Int16)
    elif kind == "date":
        g = pl.Series([DAY + dt.timedelta(days=int(v)) for v in g.to_list()])
    elif kind == "bool":
        g = g > 4
    df = pl.DataFrame({"x": x, "g": g})
    if not windows:
        monkeypatch.setattr(polars_windows, "WORTH", -1.0)     # rank windows never pay: whole sorted lists
    calls: list[int] = []
    real = polars_lists.sorted_lists
    for module in (polars_backend, polars_windows):
        monkeypatch.setattr(module, "sorted_lists", lambda *a: calls.append(1) or real(*a))
    packed = release(df, keys)
    assert calls                                        # the packed route ran
    monkeypatch.setattr(polars_backend, "packs", lambda dtype: False)
    calls.clear()
    assert release(df, keys) == packed
    assert not calls
