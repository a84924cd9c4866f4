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


def duckdb_type(dtype: pl.DataType) -> pl.DataType:
    """The type a column is handed to DuckDB as, so that no value can make DuckDB fail reading it.

    DuckDB keeps times in microseconds: a millisecond datetime beyond its range raises a conversion error
    *when a row is read* (which rows reach the engine is private); Arrow cannot carry Polars' 128-bit
    integers; a duration comes back from DuckDB as an interval Polars cannot read; and DuckDB cannot import
    Arrow's half floats. They become microseconds, ``DECIMAL(38, 0)``, the duration's integer count of its
    unit (a group key is cast back to its type when the result returns) and ``Float32`` (which holds every
    half float exactly); a value that does not fit becomes null (non-strict cast), as the Polars backend's
    statistics would not read it either.

    Example:
        >>> duckdb_type(pl.List(pl.Datetime("ms", "UTC"))), duckdb_type(pl.Int128()), duckdb_type(pl.Duration())
        (List(Datetime(time_unit='us', time_zone='UTC')), Decimal(precision=38, scale=0), Int64)

    """
    if isinstance(dtype, pl.Datetime) and dtype.time_unit == "ms":
        return pl.Datetime("us", dtype.time_zone)
    if isinstance(dtype, pl.Duration):
        return pl.Int64()
    if dtype in (pl.Int128, pl.UInt128):
        return pl.Decimal(38, 0)
    if dtype == pl.Float16:
        return pl.Float32()
    if isinstance(dtype, pl.List):
        return pl.List(duckdb_type(instance(dtype.inner)))
    if isinstance(dtype, pl.Array):
        return pl.Array(duckdb_type(instance(dtype.inner)), dtype.size)
    if isinstance(dtype, pl.Struct):
        return pl.Struct({f.name: duckdb_type(instance(f.dtype)) for f in dtype.fields})
    return dtype


def for_duckdb(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``frame`` with every column in its :func:`duckdb_type` (unchanged when all already are).

    Example:
        >>> for_duckdb(pl.LazyFrame({"x": pl.Series([1.5], dtype=pl.Float16)})).collect_schema()["x"]
        Float32

    """
    schema = frame.collect_schema()
    casts = [pl.col(name).cast(duckdb_type(t), strict=False) for name, t in schema.items() if duckdb_type(t) != t]
    return frame.with_columns(casts) if casts else frame
