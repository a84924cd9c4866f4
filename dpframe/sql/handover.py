"""The types private columns are handed to DuckDB as — for the DuckDB backend and for the SQL checks alike.

A column DuckDB could fail on is converted before DuckDB sees it, and SQL expressions are typed (and
probed) against the converted columns, so the checks see the types the backend runs on.

Example:
    >>> import polars as pl
    >>> duckdb_type(pl.Float16()), duckdb_type(pl.List(pl.Duration("ms")))
    (Float32, List(Int64))

"""

from __future__ import annotations

import polars as pl

from dpframe.plan.values import instance


def duckdb_type(dtype: pl.DataType, *, decimals: bool = True) -> pl.DataType:
    """The type a column is handed to DuckDB as, so that no value can make DuckDB fail or read another value.

    DuckDB keeps times in microseconds: a millisecond datetime beyond its range raises a conversion error
    *when a row is read* (which rows reach the engine is private); Arrow cannot carry Polars' 128-bit
    integers; a duration comes back from DuckDB as an interval Polars cannot read; DuckDB cannot import
    Arrow's half floats; and it holds a ``DECIMAL(p, s)`` in as few bits as ``p`` needs, so a value stored
    beyond its precision (which Polars keeps whole) would wrap. They become microseconds, ``DECIMAL(38, 0)``,
    the duration's integer count of its unit (a group key is cast back to its type when the result
    returns), ``Float32`` (which holds every half float exactly) and ``DECIMAL(38, s)`` (with
    ``decimals=False``: the decimal as it is); a value that does not fit becomes null (non-strict cast), the
    same on every dataset (so no failure can depend on which rows are read). As a group key or a privacy
    unit such a value drops its row on DuckDB only, so the two backends' answers can differ there (a 128-bit
    privacy-unit column is refused on DuckDB for this reason:
    :meth:`dpframe.backends.duckdb.DuckDBBackend.check_unit`).

    Example:
        >>> duckdb_type(pl.List(pl.Datetime("ms", "UTC"))), duckdb_type(pl.Int128()), duckdb_type(pl.Duration())
        (List(Datetime(time_unit='us', time_zone='UTC')), Decimal(precision=38, scale=0), Int64)
        >>> duckdb_type(pl.Decimal(3, 1)), duckdb_type(pl.Decimal(3, 1), decimals=False)
        (Decimal(precision=38, scale=1), Decimal(precision=3, scale=1))

    """
    if isinstance(dtype, pl.Datetime) and dtype.time_unit == "ms":
        return pl.Datetime("us", dtype.time_zone)
    if isinstance(dtype, pl.Duration):
        return pl.Int64()
    if dtype in (pl.Int128, pl.UInt128):
        return pl.Decimal(38, 0)
    if dtype == pl.Float16:
        return pl.Float32()
    if isinstance(dtype, pl.Decimal) and decimals and dtype.precision != 38:
        return pl.Decimal(38, dtype.scale)
    if isinstance(dtype, pl.List):
        return pl.List(duckdb_type(instance(dtype.inner), decimals=decimals))
    if isinstance(dtype, pl.Array):
        return pl.Array(duckdb_type(instance(dtype.inner), decimals=decimals), dtype.size)
    if isinstance(dtype, pl.Struct):
        return pl.Struct({f.name: duckdb_type(instance(f.dtype), decimals=decimals) for f in dtype.fields})
    return dtype


def lossless(dtype: pl.DataType) -> bool:
    """Whether every value of ``dtype`` reaches DuckDB as itself (:func:`duckdb_type` nulls none of them).

    A millisecond datetime beyond DuckDB's microsecond range, and a 128-bit integer beyond 38 digits, become
    null on the way; every other conversion (half floats, durations, decimals widened) keeps each value. The
    Spark backend stores datetimes in microseconds too (and refuses 128-bit integers): it refuses a unit column
    of such a type by this test as well (:meth:`dpframe.backends.spark.SparkBackend.check_unit`).
    Read from the type alone, nested types included: a struct or list holding such a field can change
    (``{a: 2**127 - 1}`` and ``{a: 2**127 - 2}`` both arrive as ``{a: NULL}``).

    Example:
        >>> lossless(pl.Float16()), lossless(pl.Datetime("ms")), lossless(pl.Struct({"a": pl.UInt128()}))
        (True, False, False)

    """
    if isinstance(dtype, pl.Datetime) and dtype.time_unit == "ms" or dtype in (pl.Int128, pl.UInt128):
        return False
    if isinstance(dtype, (pl.List, pl.Array)):
        return lossless(instance(dtype.inner))
    if isinstance(dtype, pl.Struct):
        return all(lossless(instance(f.dtype)) for f in dtype.fields)
    return True


def for_duckdb(frame: pl.LazyFrame, *, decimals: bool = True) -> pl.LazyFrame:
    """``frame`` with every column in its :func:`duckdb_type` (unchanged when all already are).

    Example:
        >>> for_duckdb(pl.LazyFrame({"x": pl.Series([1.5], dtype=pl.Float16)})).collect_schema()["x"]
        Float32

    """
    schema = frame.collect_schema()
    wanted = {name: duckdb_type(t, decimals=decimals) for name, t in schema.items()}
    casts = [pl.col(name).cast(wanted[name], strict=False) for name, t in schema.items() if wanted[name] != t]
    return frame.with_columns(casts) if casts else frame
