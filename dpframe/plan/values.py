"""Adversarial values: for each Polars type, the values most likely to make an operation fail.

A row-level expression must never fail on a private value (:mod:`dpframe.plan.totality`). Every
operation in a query is therefore run, at build time, on these values of its input types: the
extremes of each integer type and of each float (NaN, ±inf, subnormals, ±0), empty, huge and odd
Unicode strings, dates and datetimes at the edges of every time unit and just outside the range
the engine's calendar supports, decimals at their precision's limit, nulls — and, for nested types,
the same values inside lists, arrays and structs. The values are public (made up here), never data.

Example:
    >>> import polars as pl
    >>> values = probe_values(pl.Int8())
    >>> values.dtype, values.min(), values.max(), values.null_count()
    (Int8, -128, 127, 1)
    >>> probe_values(pl.Date()).len() > 10
    True

"""

from __future__ import annotations

import decimal
from typing import TYPE_CHECKING

import polars as pl
from polars.datatypes import DataTypeClass

from dpframe.errors import PlanError
from dpframe.sealed import plain_cache, plain_dtype

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

# Temporal values further than this from 1970 are null before any operation reads them (totality.py):
# about ±100,000 years, well inside the calendar Polars computes with (chrono: years ±262,143), so an
# operation that moves a date by a literal amount (offset_by, truncate, round) stays inside it too.
SAFE_DAYS = 36_500_000
_PER_DAY = {"ns": 86_400 * 10**9, "us": 86_400 * 10**6, "ms": 86_400 * 10**3}
_I64 = (-(2**63), 2**63 - 1)

_STRINGS = [
    "", " ", "a", "A", "abc", "0", "1", "-1", "+1", "01", "1.5", "-0", "1e400", "-1e400", "nan", "NaN", "inf",
    "-inf", "true", "false", "null", "NULL", "None", "0x1F", "0b101", "0o17", "1_000", "٣", "１２",
    "9" * 40, "-" + "9" * 40, "18446744073709551616", "-9223372036854775809", "2020-01-01", "2020-02-30",
    "2020-01-01 12:34:56", "2020-01-01T12:34:56.123456789+05:30", "+262144-01-01", "-262145-12-31",
    "99999999-12-31", "0000-00-00", "12:34:56", "25:61:61", "%Y", "%", "{}", "{0}", "(", "[", "\\", "*?+",
    "\n", "\r\n", "\t", "\x00", "\x7f", "\u00e9", "e\u0301", "\u00df", "\u0130", "\u0131", "\ufb03", "\u2126",
    "\u212a", "\u1e9e", "\ufeff", "\u200b", "\u202e", "\u05d0\u05d1", "\u4e2d\u6587", "\U0001f600",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0010ffff", "a" * 10_000, "\U0001f600" * 1_000,
    "AAEC", "===", "zz", "QUJD", "414243", "Zm9v====", "ÿ",
]
_BINARY = [b"", b"\x00", b"\xff", b"\xc3\x28", b"abc", b"\xf0\x9f\x98\x80", b"\x00" * 1_000]
_FLOATS = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308,
           1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, 1e-300, 1e300,
           2.0**53 + 2, 2.0**63, -(2.0**63), 2.0**64, 2.0**127, 3.4028234663852886e38, 1e15 + 0.3, 709.8, -745.2]
_TIME_ZONES = (None, "UTC", "Europe/Amsterdam", "America/St_Johns", "Australia/Lord_Howe")


def _integers(lo: int, hi: int) -> list[int]:
    wanted = [lo, lo + 1, lo // 2, -(2**31) - 1, -(2**31), -1000, -128, -2, -1, 0, 1, 2, 7, 127, 128, 255, 256,
              1000, 2**31 - 1, 2**31, 2**32, 2**53 + 1, hi // 2, hi - 1, hi]
    return sorted({v for v in wanted if lo <= v <= hi})


def _temporal_physical(unit_per_day: int, lo: int, hi: int) -> list[int]:
    """Physical values of a date/datetime/duration type: its extremes, the safe range's edges, and ordinary days."""
    safe = SAFE_DAYS * unit_per_day
    chrono = 262_143 * 366 * unit_per_day
    ordinary_days = [19_782, 0, -1, 1, 11_016, 18_321, 19_783, -719_528, -141_428, 2_932_896]   # 2024-02-29 ...
    # Ordinary values first: an operation that fails on every value is reported with an ordinary one.
    wanted = [*(d * unit_per_day for d in ordinary_days), 19_782 * unit_per_day + unit_per_day // 3,
              # near DST changes in Europe (2024-03-31 01:00 UTC, 2024-10-27 01:00 UTC)
              (19_813 * 24 + 1) * (unit_per_day // 24), (19_993 * 24 + 1) * (unit_per_day // 24) - 1,
              unit_per_day - 1, lo, lo + 1, hi - 1, hi, -safe - 1, -safe, safe, safe + 1, -chrono, chrono,
              -(2**63) // 1000, (2**63 - 1) // 1000, -(2**63) // 10**6, (2**63 - 1) // 10**6]
    return list(dict.fromkeys(v for v in wanted if lo <= v <= hi))


def instance(dtype: PolarsDataType) -> pl.DataType:
    """A type instance (Polars sometimes gives a nested type as the class, e.g. ``pl.Int64``).

    Example:
        >>> instance(pl.Int64), instance(pl.Datetime("ms"))
        (Int64, Datetime(time_unit='ms', time_zone=None))

    """
    return dtype() if isinstance(dtype, DataTypeClass) else dtype   # type: ignore[no-any-return]


def _series(values: list[object], dtype: pl.DataType) -> pl.Series:
    return pl.Series("v", [*values, None], dtype=dtype, strict=False)


def _decimals(dtype: pl.Decimal) -> pl.Series:
    precision = dtype.precision or 38
    scale = dtype.scale or 0
    top = 10**precision - 1
    raw = [top, -top, top // 2, 10**scale, -(10**scale), 1, -1, 0, 10**(precision // 2)]
    values = [decimal.Decimal(v).scaleb(-scale, decimal.Context(prec=precision + 2)) for v in raw]
    return _series(list(values), dtype)


def _nested(dtype: pl.DataType) -> pl.Series:
    """Lists, arrays and structs of the inner types' values.

    Built from Series, not Python objects: an out-of-range datetime has no Python form.
    """
    if isinstance(dtype, pl.List):
        inner = probe_values(instance(dtype.inner))
        singletons = inner.to_frame().select(pl.concat_list(pl.col("v")))["v"]
        edges = pl.Series("v", [[], [None]], dtype=pl.List(inner.dtype))
        return pl.concat([edges, inner.implode(), singletons]).cast(dtype).extend_constant(None, 1)
    if isinstance(dtype, pl.Array):
        inner = probe_values(instance(dtype.inner))
        width = dtype.size
        cycled = pl.concat([inner] * width)
        return cycled.reshape((-1, width)).cast(dtype).extend_constant(None, 1)
    assert isinstance(dtype, pl.Struct)
    fields = {f.name: probe_values(instance(f.dtype)) for f in dtype.fields}
    length = max((s.len() for s in fields.values()), default=1)
    columns = [s.extend_constant(None, length - s.len()).alias(name) if s.len() < length else s.alias(name)
               for name, s in fields.items()]
    return pl.DataFrame(columns).to_struct("v").cast(dtype).extend_constant(None, 1)


@plain_cache(maxsize=256)
def _cached(key: str, dtype: pl.DataType) -> pl.Series:
    if dtype.is_integer():
        bits = {"Int8": 8, "Int16": 16, "Int32": 32, "Int64": 64, "Int128": 128, "UInt8": 8, "UInt16": 16,
                "UInt32": 32, "UInt64": 64, "UInt128": 128}[dtype.base_type().__name__]
        lo, hi = (0, 2**bits - 1) if not dtype.is_signed_integer() else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        return _series(list(_integers(lo, hi)), dtype)
    if dtype.is_float():
        return _series(list(_FLOATS), dtype)
    if dtype == pl.Boolean:
        return _series([True, False], dtype)
    if dtype == pl.String:
        return _series(list(_STRINGS), dtype)
    if dtype == pl.Binary:
        return _series(list(_BINARY), dtype)
    if dtype == pl.Null:
        return pl.Series("v", [None, None], dtype=pl.Null)
    if isinstance(dtype, pl.Decimal):
        return _decimals(dtype)
    if isinstance(dtype, pl.Enum):
        return _series(list(dtype.categories.to_list()), dtype)
    if isinstance(dtype, pl.Categorical):
        return _series(list(_STRINGS[:30]), pl.String()).cast(dtype)
    if dtype == pl.Date:
        return pl.Series("v", [*_temporal_physical(1, -(2**31), 2**31 - 1), None], dtype=pl.Int32).cast(pl.Date)
    if dtype == pl.Time:
        nanos = [0, 1, 10**9, 43_200 * 10**9, 86_399 * 10**9, 86_400 * 10**9 - 1]
        return pl.Series("v", [*nanos, None], dtype=pl.Int64).cast(pl.Time)
    if isinstance(dtype, pl.Datetime | pl.Duration):
        unit = dtype.time_unit or "us"
        physical = pl.Series("v", [*_temporal_physical(_PER_DAY[unit], *_I64), None], dtype=pl.Int64)
        if isinstance(dtype, pl.Duration):
            return physical.cast(dtype)
        return physical.cast(pl.Datetime(unit)).cast(dtype) if dtype.time_zone is None else physical.cast(dtype)
    if isinstance(dtype, pl.List | pl.Array | pl.Struct):
        return _nested(dtype)
    raise PlanError(f"dpframe cannot check operations on values of type {key}", argument="exprs",
                    fix="cast the column to a basic type (number, string, date, datetime) first")


def probe_values(dtype: pl.DataType) -> pl.Series:
    """The adversarial values of ``dtype`` (public, made up), with a null; cached per type.

    A copy of the cache's Series (cheap: the buffers are shared until written), so changing it in place
    cannot change what the totality probe runs every later operation on.

    Raises :class:`~dpframe.errors.PlanError` for a type dpframe has no values for (e.g. ``pl.Object``):
    an operation on it cannot be shown to be safe, so it is refused.
    """
    dtype = plain_dtype(dtype)      # as Polars reads it: the repr below is of the same type
    return _cached(repr(dtype), dtype).clone()


@plain_cache(maxsize=256)
def _frame(columns: tuple[tuple[str, pl.DataType], ...]) -> pl.DataFrame:
    pools = []
    for name, dtype in columns:
        try:
            pools.append(probe_values(dtype).alias(name))
        except PlanError:   # no values for this type: nulls only (an operation on it is refused anyway)
            pools.append(pl.Series(name, [None], dtype=dtype))
    length = max((p.len() for p in pools), default=1)
    return pl.DataFrame([p.extend_constant(None, length - p.len()) for p in pools])


def probe_frame(schema: pl.Schema) -> pl.DataFrame:
    """A frame of ``schema`` whose columns hold their types' adversarial values side by side (padded with nulls).

    A copy of the cached frame, as :func:`probe_values` is.

    Example:
        >>> frame = probe_frame(pl.Schema({"x": pl.Int8, "s": pl.String}))
        >>> frame.schema == pl.Schema({"x": pl.Int8, "s": pl.String}), frame.height == probe_values(pl.String()).len()
        (True, True)

    """
    return _frame(tuple(schema.items())).clone()


def guard_range(dtype: pl.DataType) -> tuple[int, int] | None:
    """The physical range a temporal value must lie in before an operation reads it (None: no limit needed).

    Example:
        >>> guard_range(pl.Date()), guard_range(pl.Datetime("ns")), guard_range(pl.Int64())
        ((-36500000, 36500000), None, None)

    """
    if dtype == pl.Date:
        return -SAFE_DAYS, SAFE_DAYS
    if isinstance(dtype, pl.Datetime | pl.Duration):
        limit = SAFE_DAYS * _PER_DAY[dtype.time_unit or "us"]
        return None if limit > _I64[1] else (-limit, limit)
    return None


__all__ = ["SAFE_DAYS", "guard_range", "instance", "probe_frame", "probe_values"]
