"""Reading a table source as a lazy Polars frame, converted once when the session is created.

Conversion is zero-copy where Polars can share memory (a frame built on NumPy arrays, a pandas frame, an
Arrow table): a 10M-row table is not duplicated for each session. The data owner must therefore not write
to those arrays while a session over them is open, as a ``LazyFrame`` must give the same rows to every
query (``docs/guarantees.md``, "One version of each table"). Public lookup tables, which are small, are
copied (:mod:`dpframe.sql.catalog`).

Accepted: a polars DataFrame/LazyFrame, a pyarrow Table, a pandas DataFrame (pandas stays optional: it
is only recognised, never imported), any object with the Arrow PyCapsule stream interface
(``__arrow_c_stream__``: e.g. a DuckDB relation, a pyarrow RecordBatchReader, a nanoarrow or
pandas ≥ 2.2 frame), or a path to a Parquet/CSV file (scanned lazily).

Example:
    >>> import polars as pl
    >>> load_table("t", pl.DataFrame({"x": [1, 2]})).collect().height
    2
    >>> load_table("t", {"x": [1, 2]})
    Traceback (most recent call last):
    ...
    dpframe.errors.SchemaError: tables['t']: unsupported table type builtins.dict. Fix: pass a polars ...

"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa

from dpframe.engine_output import ENGINE
from dpframe.errors import SchemaError

_FIX = ("pass a polars DataFrame/LazyFrame, a pyarrow Table, a pandas DataFrame, an object with the Arrow "
        "stream interface (__arrow_c_stream__), or a path to a .parquet or .csv file")


ENGINE_PREFIX = "__dp"
"""Column names starting with it (in any case) are the engine's: the backends bound contributions with helper
columns so named, and a table's or a frame's column of such a name would shadow one."""


STATISTIC_NAMES = ("__rows", "__units")
STATISTIC_PREFIXES = ("__nonnull:", "__distinct:", "__ind:", "__sorted:", "__sum:")
"""The names of the engine's statistics (:attr:`dpframe.mechanism.Statistic.key`): the columns of a backend's
result beside the group keys, so a group key of such a name would be a second column of that name."""


def reserved_name(name: str) -> str | None:
    """Why ``name`` is not a column's name to give (None: it is one).

    Empty, or starting with :data:`ENGINE_PREFIX` in any case (the engine's helper columns); or ``*`` or
    ``^...$``, which ``pl.col`` reads as every column or as a regular expression, so the Polars backend read
    other columns under that name (``^x.*$`` measured a column ``xx``; ``*`` failed after the charge) while
    DuckDB read the named one (``tests/adversarial/test_review38a.py``); or, in any case, the name of one of
    the engine's statistics (:data:`STATISTIC_NAMES`, :data:`STATISTIC_PREFIXES`): a group key so named made
    the backends' result hold two columns of that name, and ``group_by("__rows", keys=...).agg(dp.len())``
    was charged, then failed (``tests/adversarial/test_review45b.py``).

    Example:
        >>> reserved_name("__DP_hash") is not None, reserved_name("^x$") is not None, reserved_name("dp_x")
        (True, True, None)
        >>> reserved_name("__Rows") is not None, reserved_name("__nonnull:x") is not None, reserved_name("__row")
        (True, True, None)

    """
    if name == "":
        return "an empty name is the engine's own"
    lowered = name.lower()
    if lowered.startswith(ENGINE_PREFIX):
        return f"names starting with {ENGINE_PREFIX!r} are the engine's own"
    if lowered in STATISTIC_NAMES or lowered.startswith(STATISTIC_PREFIXES):
        return "it is the name of one of the engine's statistics (the column a backend returns it in)"
    if pattern_name(name):
        return PATTERN
    return None


PATTERN = "Polars reads '*' and '^...$' as patterns that select other columns"
"""Why :func:`pattern_name` names are refused (a column's, or a SQL query's output's)."""


def pattern_name(name: str) -> bool:
    """Whether ``pl.col(name)`` selects by a pattern (``*``: every column; ``^...$``: a regular expression).

    Example:
        >>> pattern_name("*"), pattern_name("^a$"), pattern_name("a$")
        (True, True, False)

    """
    return name == "*" or (name.startswith("^") and name.endswith("$"))


def check_column_names(names: Iterable[str], where: str) -> None:
    """A SchemaError naming ``where`` for a table with a :func:`reserved_name` column."""
    for name in names:
        why = reserved_name(name)
        if why is not None:
            raise SchemaError(f"the table has a column named {name!r}: {why}", argument=where, fix="rename the column")


_GLOB = re.compile(r"[*?\[\]{}\\]")


def glob_pattern(path: str | Path) -> bool:
    """Whether a reader that expands patterns (DuckDB's ``read_parquet``, Spark's) would read ``path`` as one.

    Such a reader reads the files the name matches, not the file it names (``t[1].parquet`` read ``t1.parquet``,
    whose version the session does not record); it must read such a path through Polars, which scans it with
    ``glob=False`` (``tests/adversarial/test_review39a.py``).

    Example:
        >>> glob_pattern("/data/t[1].parquet"), glob_pattern("/data/t*.csv"), glob_pattern("/data/t.parquet")
        (True, True, False)

    """
    return _GLOB.search(str(path)) is not None


def parquet_reading(path: Path) -> tuple[list[Path], pl.Schema] | None:
    """The files Polars reads for the Parquet file or directory ``path`` (resolved, sorted), and its schema.

    None where Polars cannot list them (a directory Spark wrote holds ``.crc`` files: Polars refuses the mixed
    extensions). Another reader of the path (Spark's) must read these files as this schema to read the table
    Polars reads. A file is itself (its footer read for the schema); a directory's files are listed by Polars'
    own scan, which writes each row's file name (one pass over the row count: ~55–85 ms for 2M rows, at session
    creation; a file of a directory without rows is not listed: Polars reads none of it).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> pl.DataFrame({"u": [1]}).write_parquet(folder / "a.parquet")
        >>> [file.name for file in parquet_reading(folder)[0]]
        ['a.parquet']
        >>> _ = (folder / ".a.parquet.crc").write_text("crc")
        >>> parquet_reading(folder) is None
        True

    """
    column = ENGINE_PREFIX + "_file"     # a reserved name: no table has such a column
    try:
        schema = pl.scan_parquet(path, glob=False).collect_schema()
        if path.is_file():
            return [path.resolve()], schema
        listed = pl.scan_parquet(path, glob=False, include_file_paths=column).select(pl.col(column).unique())
        return sorted({Path(name).resolve() for name in listed.collect(engine=ENGINE)[column]}), schema
    except pl.exceptions.PolarsError:
        return None


def check_parquet_columns(files: list[Path], path: str, where: str) -> None:
    """A SchemaError naming ``where`` where the Parquet ``files`` of ``path`` differ in their columns or types.

    Polars refuses such a directory when it reads it in full, while Spark read every file against one file's
    schema (a column another file lacks as null, ``U`` as ``u``; ``test_review39c.py``). Columns may come in any
    order. Reads each file's footer.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> pl.DataFrame({"u": [1]}).write_parquet(folder / "a.parquet")
        >>> pl.DataFrame({"U": [2]}).write_parquet(folder / "b.parquet")
        >>> check_parquet_columns(sorted(folder.iterdir()), "t.parquet", "tables['t']")
        Traceback (most recent call last):
        ...
        dpframe.errors.SchemaError: tables['t']: the Parquet files 'a.parquet' and 'b.parquet' of 't.parquet' ...

    """
    fix = "give every file of the directory the same columns and types, or load it yourself and pass a DataFrame"
    try:
        columns = [dict(pl.read_parquet_schema(file)) for file in files]
    except (pl.exceptions.PolarsError, OSError) as e:
        lines = str(e).strip().splitlines()
        failure = f"{type(e).__name__}: {lines[0] if lines else ''}"
        raise SchemaError(f"cannot read the Parquet footers at {path!r} ({failure})", argument=where, fix=fix) from None
    for file, found in zip(files[1:], columns[1:]):
        if found != columns[0]:
            raise SchemaError(f"the Parquet files {files[0].name!r} and {file.name!r} of {path!r} have different "
                              f"columns ({columns[0]} and {found})", argument=where, fix=fix)


def _is_pandas(source: object) -> bool:
    """Whether ``source`` is a pandas DataFrame (recognised by its type, without importing pandas)."""
    return any(c.__module__.split(".")[0] == "pandas" and c.__name__ == "DataFrame" for c in type(source).__mro__)


def _from_arrow(source: pa.Table, where: str) -> pl.LazyFrame:
    """An Arrow table converted once; a type Polars cannot import is a SchemaError naming ``where``.

    Polars refuses some Arrow types with an error, and panics on others (a ``decimal256``: a
    ``PanicException``, which derives from ``BaseException``).
    """
    if len(set(source.column_names)) != len(source.column_names):   # Arrow allows it, Polars does not
        raise SchemaError("the table has duplicate column names", argument=where, fix="rename the columns")
    return _converted(lambda: pl.from_arrow(source), "the Arrow table", where,
                      "cast the column to a type Polars reads (e.g. a decimal256 to decimal128 or float64, an interval "
                      "or union to its parts) or drop it")


def _converted(convert: Callable[[], object], what: str, where: str, fix: str) -> pl.LazyFrame:
    """``convert()``'s frame, lazy; any failure of the conversion (a Rust panic too) a SchemaError naming ``where``."""
    failure = None
    try:
        frame = convert()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 — a PanicException derives from BaseException
        lines = str(e).strip().splitlines()
        failure = f"{type(e).__name__}: {lines[0] if lines else ''}"
    if failure is not None:     # raised outside the except block: the engine's exception is not chained
        raise SchemaError(f"cannot convert {what} ({failure})", argument=where, fix=fix)
    assert isinstance(frame, pl.DataFrame)
    return frame.lazy()


def _plain_types(frame: pl.LazyFrame, where: str) -> pl.LazyFrame:
    """``frame`` with each extension-typed column as its storage type; a SchemaError for Python objects.

    Extension types (Arrow extension types Polars keeps): DuckDB is handed one as its own type where it has one,
    and takes its values as valid: an ``arrow.json`` column (a Parquet file's JSON column reads as one) is DuckDB's
    ``JSON``, and text in it that is not JSON made ``length(j)`` raise a ``FatalException`` — after the charge,
    only where that unit's row was read (``tests/adversarial/test_review39a.py``). As its storage (``String``)
    every backend reads the same text. An extension type inside a list, array or struct has no such conversion:
    refused. An ``Object`` column (Python objects) is refused: Polars cannot hash or group it (every query
    bounding by it failed after its charge), and DuckDB was handed each object's address, so equal ids held by
    two objects were two units there. A frame whose schema cannot be read is left as it is (the catalog says why).

    Example:
        >>> import pyarrow as pa
        >>> json = pa.ExtensionArray.from_storage(pa.json_(), pa.array(['{"a": 1}']))
        >>> load_table("t", pa.table({"j": json})).collect_schema()
        Schema([('j', String)])

    """
    try:
        schema = frame.collect_schema()
    except (pl.exceptions.PolarsError, OSError):   # (a cycle of links: an OSError)
        return frame
    for name, dtype in schema.items():
        if holds_type(dtype, pl.Object):
            raise SchemaError(f"column {name!r} holds Python objects ({dtype})", argument=where,
                              fix="convert it to a basic type (e.g. pl.col(...).map_elements(str, "
                                  "return_dtype=pl.String) before registering) or drop it")
        if dtype.is_nested() and holds_type(dtype, pl.Extension):
            raise SchemaError(f"column {name!r} holds an extension type ({dtype}) inside a list, array or struct",
                              argument=where, fix="convert it to plain types first (e.g. the extension's storage) "
                              "or drop the column")
    extension = [name for name, dtype in schema.items() if isinstance(dtype, pl.Extension)]
    return frame.with_columns(pl.col(name).ext.storage() for name in extension) if extension else frame


def holds_type(dtype: pl.DataType, kind: type[pl.DataType]) -> bool:
    """Whether ``dtype`` is, or holds somewhere inside a list, array or struct, a type of class ``kind``.

    Example:
        >>> from polars.datatypes import FloatType
        >>> holds_type(pl.Struct({"a": pl.List(pl.Float32)}), FloatType), holds_type(pl.List(pl.Int8), FloatType)
        (True, False)

    """
    if isinstance(dtype, kind) or (isinstance(dtype, type) and issubclass(dtype, kind)):   # pl.Float64 or Float64()
        return True
    if isinstance(dtype, pl.List | pl.Array):
        return holds_type(dtype.inner, kind)  # type: ignore[arg-type]
    if isinstance(dtype, pl.Struct):
        return any(holds_type(field.dtype, kind) for field in dtype.fields)  # type: ignore[arg-type]
    return False


def _from_pandas(source: object, where: str) -> pl.LazyFrame:
    """A pandas DataFrame converted once (its index is not a column: ``reset_index()`` first to keep it)."""
    columns = list(source.columns)  # type: ignore[attr-defined]
    odd = [c for c in columns if not isinstance(c, str)]
    if odd:
        raise SchemaError(f"the pandas DataFrame has non-string column names {odd[:3]}", argument=where,
                          fix="rename the columns to strings, e.g. df.columns = [str(c) for c in df.columns]")
    if len(set(columns)) != len(columns):
        raise SchemaError("the pandas DataFrame has duplicate column names", argument=where, fix="rename the columns")
    return _converted(lambda: pl.from_pandas(source), "the pandas DataFrame", where,  # type: ignore[call-overload]
                      "convert object columns to a single type (e.g. df[c].astype(str)), and Arrow-backed columns to "
                      "types Polars reads (a decimal256 to decimal128 or float64)")


def load_table(name: str, source: object, argument: str = "tables") -> pl.LazyFrame:
    """``source`` as a LazyFrame (files are scanned lazily); a SchemaError naming ``argument[name]`` if not.

    Extension-typed columns become their storage type, and ``Object`` columns are refused (:func:`_plain_types`).
    """
    where = f"{argument}[{name!r}]"
    return _plain_types(_loaded(source, where), where)


def _loaded(source: object, where: str) -> pl.LazyFrame:
    if isinstance(source, pl.LazyFrame):
        return source
    if isinstance(source, pl.DataFrame):
        return source.lazy()
    if isinstance(source, pa.Table):
        return _from_arrow(source, where)
    if _is_pandas(source):
        return _from_pandas(source, where)
    if hasattr(type(source), "__arrow_c_stream__"):
        try:
            table = pa.table(source)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise SchemaError(f"cannot read the Arrow stream of a {_type_name(source)}: {str(e).splitlines()[0]}",
                              argument=where, fix=_FIX) from e
        return _from_arrow(table, where)
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            exists = bool(os.fsencode(path)) and path.exists()
        except (OSError, ValueError) as e:          # (too long, a lone surrogate, a NUL byte)
            raise SchemaError(f"cannot use {str(path)!r:.80} as a file path ({type(e).__name__})", argument=where,
                              fix=_FIX) from None
        if not exists:
            raise SchemaError(f"file {str(path)!r:.200} does not exist", argument=where, fix=_FIX)
        # glob=False: the file (or directory) named, never the files its name would match as a pattern
        # (``t[1].parquet`` read ``t1.parquet``, whose version the session does not record)
        if path.suffix.lower() == ".parquet":
            return pl.scan_parquet(path, glob=False)
        if path.suffix.lower() == ".csv":
            return pl.scan_csv(path, glob=False)
        raise SchemaError(f"unsupported file type {path.suffix!r}", argument=where, fix=_FIX)
    raise SchemaError(f"unsupported table type {_type_name(source)}", argument=where, fix=_FIX)


def _type_name(source: object) -> str:
    return f"{type(source).__module__}.{type(source).__qualname__}"
