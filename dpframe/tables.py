"""Reading a table source (polars frame, pyarrow Table, Parquet/CSV path) as a lazy Polars frame.

Example:
    >>> import polars as pl
    >>> load_table("t", pl.DataFrame({"x": [1, 2]})).collect().height
    2

"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa

from dpframe.errors import SchemaError

_FIX = "pass a polars DataFrame/LazyFrame, a pyarrow Table, or a path to a .parquet or .csv file"


def load_table(name: str, source: object, argument: str = "tables") -> pl.LazyFrame:
    """``source`` as a LazyFrame (files are scanned lazily); a SchemaError naming ``argument[name]`` if not."""
    where = f"{argument}[{name!r}]"
    if isinstance(source, pl.LazyFrame):
        return source
    if isinstance(source, pl.DataFrame):
        return source.lazy()
    if isinstance(source, pa.Table):
        if len(set(source.column_names)) != len(source.column_names):   # Arrow allows it, Polars does not
            raise SchemaError("the table has duplicate column names", argument=where, fix="rename the columns")
        frame = pl.from_arrow(source)
        assert isinstance(frame, pl.DataFrame)
        return frame.lazy()
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.exists():
            raise SchemaError(f"file {str(path)!r} does not exist", argument=where, fix=_FIX)
        if path.suffix.lower() == ".parquet":
            return pl.scan_parquet(path)
        if path.suffix.lower() == ".csv":
            return pl.scan_csv(path)
        raise SchemaError(f"unsupported file type {path.suffix!r}", argument=where, fix=_FIX)
    raise SchemaError(f"unsupported table type {type(source).__name__}", argument=where, fix=_FIX)
