"""Ordered domains (dpframe.domains): sizes, grids, codes, decoding and validation."""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.domains import DEFAULT_FLOAT_CODES, MAX_SIZE, OrderedDomain


def test_int_domain_codes_and_decoding() -> None:
    d = OrderedDomain.of("a", pl.Int32, (-10, 10))
    assert (d.kind, d.size, d.grid_exp) == ("int", 21, 0)
    assert d.encode(pl.Series([-50, -10, 0, None, 10, 99], dtype=pl.Int32)).tolist() == [0, 0, 10, 20, 20]
    assert [d.decode(c) for c in (0, 10, 20)] == [-10, 0, 10]
    assert d.statistic == dp.mechanism.Statistic("sorted", "a", Fraction(-10), Fraction(10), Fraction(-10))


def test_int_resolution_is_rounded_down_to_a_power_of_two() -> None:
    d = OrderedDomain.of("a", pl.Int64, (0, 100), resolution=5)
    assert (d.grid_exp, d.size) == (2, 26)
    assert d.encode(pl.Series([0, 3, 4, 100])).tolist() == [0, 0, 1, 25]
    assert d.decode(25) == 100


def test_unsigned_values_above_int64_clamp() -> None:
    d = OrderedDomain.of("w", pl.UInt64, (0, 10))
    assert d.encode(pl.Series([2**64 - 1, 3], dtype=pl.UInt64)).tolist() == [10, 3]


@pytest.mark.parametrize(("resolution", "g"), [(0.25, -2), (0.3, -2), (1, 0), (3, 1), (Fraction(1, 1000), -10)])
def test_float_resolution_rounded_down(resolution: object, g: int) -> None:
    d = OrderedDomain.of("x", pl.Float64, (0, 64), resolution=resolution)
    assert d.grid_exp == g
    assert d.size == 64 * 2**-g + 1


def test_float_default_grid_has_at_most_2_32_codes() -> None:
    for lo, hi in [(0, 1), (-1e6, 1e6), (0, 2**32 - 1), (0, 2**32), (0.1, 0.7)]:
        d = OrderedDomain.of("x", pl.Float64, (lo, hi))
        assert d.size <= DEFAULT_FLOAT_CODES + 1
        finer = (Fraction(hi) - Fraction(lo)) / Fraction(2) ** (d.grid_exp - 1)
        assert finer >= DEFAULT_FLOAT_CODES   # the next finer grid would have too many cells


def test_float_nan_dropped_inf_clamped_negative_zero_canonical() -> None:
    d = OrderedDomain.of("x", pl.Float64, (-1, 1), resolution=0.5)
    codes = d.encode(pl.Series([float("nan"), None, float("-inf"), -0.0, 0.0, float("inf"), 0.74]))
    assert codes.tolist() == [0, 2, 2, 4, 3]
    assert d.decode(2) == 0.0 and str(d.decode(2)) == "0.0"


def test_dates_and_datetimes() -> None:
    d = OrderedDomain.of("d", pl.Date, (dt.date(2024, 1, 1), dt.date(2024, 12, 31)))
    assert d.size == 366
    assert d.encode(pl.Series([dt.date(2024, 3, 1), dt.date(1999, 1, 1)])).tolist() == [60, 0]
    assert d.decode(60) == dt.date(2024, 3, 1)
    t = OrderedDomain.of("t", pl.Datetime("ms"), (dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)),
                         resolution=dt.timedelta(seconds=1))
    assert t.grid_exp == 9 and t.size == 86_400_000 // 512 + 1
    when = dt.datetime(2024, 1, 1, 12)
    code = int(t.encode(pl.Series([when]).cast(pl.Datetime("ms")))[0])
    assert abs((t.decode(code) - when).total_seconds()) < 0.52
    aware = OrderedDomain.of("z", pl.Datetime("us", "UTC"),
                             (dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 2, tzinfo=dt.UTC)))
    assert aware.decode(0) == dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def test_decode_series_clamps_and_types() -> None:
    d = OrderedDomain.of("a", pl.Int64, (5, 9))
    assert d.decode_series(np.array([-3, 0, 4, 99]), "v").to_list() == [5.0, 5.0, 9.0, 9.0]
    dd = OrderedDomain.of("d", pl.Date, (dt.date(2024, 1, 1), dt.date(2024, 1, 9)))
    assert dd.decode_series([1], "v").dtype == pl.Date


@pytest.mark.parametrize(("dtype", "bounds", "resolution", "error", "argument"), [
    (pl.Float64, None, None, dp.BoundsError, "bounds['c']"),
    (pl.Float64, (1, 0), None, dp.BoundsError, "bounds['c']"),
    (pl.Float64, (0, float("inf")), None, dp.BoundsError, "bounds['c']"),
    (pl.Float64, (0, 1), 0.0, dp.BoundsError, "resolution"),
    (pl.Float64, (0, 1), float("nan"), dp.BoundsError, "resolution"),
    (pl.Float64, (0, 1e20), 1e-3, dp.BoundsError, "bounds['c']"),        # 2^76 codes
    (pl.Float64, (0, 1e-320), None, dp.BoundsError, "bounds['c']"),       # default grid finer than 2^-1000
    (pl.Float64, (0, 1), 2.0**-1010, dp.BoundsError, "resolution"),
    (pl.Int64, (0, 2**63), None, dp.BoundsError, "bounds['c']"),
    (pl.Int64, (-(2**62), 2**62), None, dp.BoundsError, "bounds['c']"),  # more than 2^62 codes
    (pl.Int64, (0.5, 3), None, dp.BoundsError, "bounds['c']"),
    (pl.Int64, (0, 3), 0.5, dp.BoundsError, "resolution"),
    (pl.Date, (0, 3), None, dp.BoundsError, "bounds['c']"),
    (pl.Date, (dt.date(2024, 2, 1), dt.date(2024, 1, 1)), None, dp.BoundsError, "bounds['c']"),
    (pl.Datetime("us", "UTC"), (dt.datetime(2024, 1, 1), dt.datetime(2024, 2, 1)), None, dp.BoundsError,
     "bounds['c']"),
    (pl.String, (0, 1), None, dp.SchemaError, "c"),
    (pl.Boolean, (0, 1), None, dp.SchemaError, "c"),
])
def test_bad_domains(dtype: pl.DataType, bounds: object, resolution: object, error: type, argument: str) -> None:
    with pytest.raises(error) as info:
        OrderedDomain.of("c", dtype, bounds, resolution)
    assert info.value.argument == argument
    assert info.value.fix


def test_largest_domain_is_accepted() -> None:
    assert OrderedDomain.of("c", pl.Int64, (0, MAX_SIZE - 1)).size == MAX_SIZE
