"""The catalog of private tables: their public schemas, their sources, and the backends that hold them.

The data owner's tables are loaded and checked once, when the session is created (before any analyst
query): each must be non-empty, have distinct column names without NUL characters, contain the
privacy-unit column, and have every value readable under its schema (read in full once: by Polars, or by
the backend that keeps the table, :meth:`~dpframe.backends.base.LoadsOwnTables.count_rows`).
Backends are created on first use and given every table; a backend that reads its own sources
(:class:`~dpframe.backends.base.LoadsOwnTables`) or wants the original source
(:class:`~dpframe.backends.base.SourceAware`) gets it through its typed capability.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from dpframe.plugin import plugin_host
    >>> cat = TableCatalog.load({"t": pl.DataFrame({"u": [1, 2], "x": [0.5, 1.5]})}, dp.PrivacyUnit("u"),
    ...                         plugin_host(), "polars")
    >>> cat.names(), cat.schema("t")
    (['t'], Schema([('u', Int64), ('x', Float64)]))

"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import polars as pl
import pyarrow as pa

from dpframe.backends.base import ChecksUnit, LoadsOwnTables, SourceAware, SparkBound
from dpframe.engine_output import STREAMING
from dpframe.errors import ArgumentError, DPFrameError, PluginError, SchemaError, TableChangedError, one_of
from dpframe.file_versions import FileVersion, file_version
from dpframe.privacy_unit import PrivacyUnit
from dpframe.sealed import ReadOnlySchema
from dpframe.tables import check_column_names, load_table

if TYPE_CHECKING:
    from dpframe.plugin import PluginHost



@runtime_checkable
class ArrowStream(Protocol):
    """Anything with the Arrow PyCapsule stream interface (pandas ≥ 2.2, DuckDB relations, RecordBatchReaders ...)."""

    def __arrow_c_stream__(self, requested_schema: object = None) -> object: ...


TableSource: TypeAlias = pl.DataFrame | pl.LazyFrame | pa.Table | ArrowStream | str | Path
"""What a session accepts as a table (a pandas DataFrame too; see :mod:`dpframe.tables`)."""


def check_table_name(name: object, names: Callable[[], list[str]]) -> None:
    """A SchemaError naming the tables (``names()``, asked only then) unless ``name`` is text.

    ``names`` receives no values (it lists the session's public table names).

    Example:
        >>> check_table_name(3, lambda: ["t"])
        Traceback (most recent call last):
        ...
        dpframe.errors.SchemaError: name: expected a table name, got int. Fix: use one of ['t']

    """
    if not isinstance(name, str):
        raise SchemaError(f"expected a table name, got {type(name).__name__}", argument="name",
                          fix=f"use one of {names()}")


class TableCatalog:
    """Private tables by name, with their public schemas and the backends that hold them."""

    def __init__(self, plugins: PluginHost, backend: Any, unit: PrivacyUnit) -> None:
        self._plugins = plugins
        self._unit = unit
        self._default = backend
        self._schemas: dict[str, pl.Schema] = {}
        self._sources: dict[str, tuple[pl.LazyFrame, object]] = {}
        self._versions: dict[str, FileVersion] = {}     # file-backed tables: the version the session reads
        self._backends: dict[str, Any] = {str(backend.name): backend}

    @classmethod
    def load(cls, tables: Mapping[str, TableSource], unit: PrivacyUnit, plugins: PluginHost, backend: str,
             spark: Any = None) -> TableCatalog:
        """Load and check every table into a new backend named ``backend`` (run by the data owner)."""
        engine = plugins.backend(backend)
        if spark is not None:
            if not isinstance(engine, SparkBound):
                raise ArgumentError(f"spark= is for backend='spark', not {backend!r}", argument="spark",
                                   fix="pass backend='spark', or leave spark= out")
            engine.use_spark(spark)
        if not isinstance(tables, Mapping) or not tables:
            raise SchemaError("give at least one table", argument="tables", fix="pass {'name': dataframe}")
        catalog = cls(plugins, engine, unit)
        for name, source in tables.items():
            if not isinstance(name, str) or not name:
                raise SchemaError(f"table names must be strings, got {name!r}", argument="tables",
                                  fix="use {'visits': data}")
            version = file_version(source)      # taken first: a write while the table loads is found later
            frame = engine.load_table(name, source) if isinstance(engine, LoadsOwnTables) else load_table(name, source)
            if version is not None:
                catalog._versions[name] = version
            catalog._schemas[name] = catalog._check(name, frame, unit)
            _check_unit(engine, name, catalog._schemas[name], unit)
            catalog._sources[name] = (frame, source)
            _register(engine, name, frame, source)
        return catalog

    def _check(self, name: str, frame: pl.LazyFrame, unit: PrivacyUnit) -> pl.Schema:
        try:
            schema = frame.collect_schema()
            engine = self._default
            rows = engine.count_rows(name) if isinstance(engine, LoadsOwnTables) else None
            if rows is None:
                # Every value read once, now (in the pass that counts the rows): a file's rows are parsed by each
                # query, and a row that does not parse (text in a CSV column its first rows made numeric, a
                # Parquet string that is not UTF-8) would make every query reading its column fail after its
                # charge, on D′ and not on D.
                count = "__dp_rows" + "_" * max((len(c) for c in schema.names()), default=0)   # a name no column has
                wide = {f"{count}{i}": (c, t) for i, (c, t) in enumerate(schema.items()) if isinstance(t, pl.Decimal)}
                read = frame.select(pl.len().alias(count), pl.all().null_count(),
                                    *[beyond_38_digits(c, t).alias(a) for a, (c, t) in wide.items()]
                                    ).collect(engine=STREAMING)
                rows = read[count].item()
                _refuse_wide_decimals(name, [c for a, (c, _) in wide.items() if read[a].item()])
        except (pl.exceptions.PolarsError, OSError) as e:   # OSError: a cycle of links in a directory
            lines = str(e).strip().splitlines()
            raise SchemaError(f"cannot read table {name!r}: {type(e).__name__}: {lines[0] if lines else ''}",
                              argument=f"tables[{name!r}]",
                              fix="check the file (a CSV's column types come from its first rows; every later value "
                                  "must parse as them) or load it yourself and pass a DataFrame") from e
        if len(schema) == 0 or rows == 0:
            raise SchemaError(f"table {name!r} is empty", argument="tables", fix="register a table with rows")
        if len(set(schema.names())) != len(schema):
            raise SchemaError(f"table {name!r} has duplicate column names", argument="tables",
                              fix="rename the columns")
        check_column_names(schema.names(), f"tables[{name!r}]")
        if any("\x00" in c for c in schema.names()):   # Arrow (and so DuckDB) cannot carry such a name
            raise SchemaError(f"table {name!r} has a column name with a NUL character", argument="tables",
                              fix="rename the column")
        if unit.column is not None and unit.column not in schema:
            raise SchemaError(f"table {name!r} has no privacy-unit column {unit.column!r}", argument="privacy_unit",
                              fix=f"use one of {list(schema.names())}")
        return ReadOnlySchema(schema)

    def check_unchanged(self, tables: Iterable[str] | None = None) -> None:
        """A :class:`TableChangedError` if the file of one of ``tables`` (None: of any table) changed since loading.

        See :mod:`dpframe.file_versions`: a session reads each file-backed table as it was when the
        session was created. Cheap (a ``stat`` and a read of the file's footer per file); tables that are
        not file-backed have nothing to check.
        """
        names = list(self._versions) if tables is None else list(tables)
        for table in names:
            if self._changed(table):
                version = self._versions[table]
                raise TableChangedError(
                    f"the file of table {table!r} ({version.path!r}) changed after the session was created; "
                    "a session reads each table as it was when it was created", argument=f"tables[{table!r}]",
                    fix="create a new session to query the new data (pass the same ledger= file to keep the "
                        "budget already spent)")

    def _changed(self, table: str) -> bool:
        """Whether table ``table`` is file-backed and its file changed since loading."""
        version = self._versions.get(table)
        return version is not None and file_version(version.path) != version

    def names(self) -> list[str]:
        """The registered table names."""
        return list(self._schemas)

    def schemas(self) -> dict[str, pl.Schema]:
        """Every table's public schema."""
        return dict(self._schemas)

    def schema(self, name: str) -> pl.Schema:
        """Table ``name``'s public schema; a SchemaError naming the tables otherwise."""
        check_table_name(name, self.names)
        if name not in self._schemas:
            raise SchemaError(f"unknown table {name!r}", argument="name", fix=one_of(name, self.names()))
        return self._schemas[name]

    @property
    def default_backend(self) -> Any:
        """The session's backend."""
        return self._default

    def backend(self, name: str | None = None) -> Any:
        """The backend named ``name`` (None: the session's), created on first use with every table.

        Except the tables whose file changed by then: no query may read them again (see
        :meth:`check_unchanged`), and their new version may not even load. A backend that cannot bound the
        privacy unit's type (:class:`~dpframe.backends.base.ChecksUnit`) raises its SchemaError first, every
        time (on the schema alone, when a query naming it is built: nothing charged). Any other failure to create
        it (a DuckDB or Spark start failure, a plugin's factory) is a DPFrameError naming ``backend`` and only the
        failure's type (registering a table may quote its values); a release looks its backend up before its charge.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> from dpframe.plugin import plugin_host
            >>> cat = TableCatalog.load({"t": pl.DataFrame({"u": [1]})}, dp.PrivacyUnit("u"), plugin_host(), "polars")
            >>> cat.backend("duckdb").name
            'duckdb'
            >>> cat.backend("nope")
            Traceback (most recent call last):
            ...
            dpframe.errors.PluginError: backend: unknown backend 'nope'...

        """
        if name is None:
            return self._default
        if not isinstance(name, str):       # a list or dict: no name (and unhashable)
            raise PluginError(f"expected a backend name, got {type(name).__name__}", argument="backend",
                              fix=f"use one of {self._plugins.backend_names()}, or leave backend= out")
        if name not in self._backends:
            failure = None
            try:
                self._backends[name] = self._created(name)
            except (DPFrameError, KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # noqa: BLE001 — a Rust panic too; its message may quote a table's values
                failure = type(e).__name__
            if failure is not None:      # raised outside the except block: the failure is neither chained nor kept
                raise DPFrameError(f"backend {name!r} could not be created ({failure})", argument="backend",
                                   fix=f"check that backend {name!r} is installed and can start (Spark needs Java "
                                       "17), or leave backend= out to run on the session's backend")
        return self._backends[name]

    def _created(self, name: str) -> Any:
        """A new backend ``name`` holding every table whose file did not change (see :meth:`backend`)."""
        engine = self._plugins.backend(name)
        for table, schema in self._schemas.items():
            _check_unit(engine, table, schema, self._unit)
        for table, (frame, source) in self._sources.items():
            if not self._changed(table):
                _register(engine, table, frame, source)
        return engine


def beyond_38_digits(column: str, dtype: pl.Decimal) -> pl.Expr:
    """How many values of a decimal ``column`` have more than 38 digits (a 128-bit value beyond any precision).

    A Polars decimal is a 128-bit integer, which may hold up to 39 digits whatever the precision (an Arrow array cast
    unsafely): Polars and DuckDB kept such a value, Spark (whose decimals have at most 38 digits) held it as null
    (``test_review55f.py``). The comparison is exact (Polars compares the scaled integers).

    Example:
        >>> import pyarrow as pa
        >>> from decimal import Decimal
        >>> wide = pa.array([Decimal(10**38), Decimal(5)], pa.decimal256(76, 0)).cast(pa.decimal128(38, 0), safe=False)
        >>> frame = pl.from_arrow(pa.table({"d": wide.view(pa.decimal128(3, 1))}))
        >>> frame.select(beyond_38_digits("d", frame.schema["d"])).item()
        1

    """
    scale = dtype.scale or 0
    top = pl.lit(Decimal(f"{10**38 - 1}E-{scale}"), dtype=pl.Decimal(38, scale))
    return pl.col(column).is_between(-top, top).not_().sum()


def _refuse_wide_decimals(name: str, columns: list[str]) -> None:
    """A SchemaError naming table ``name``'s first decimal column holding a value beyond 38 digits (none: nothing)."""
    if columns:
        raise SchemaError(f"table {name!r}: column {columns[0]!r} holds a decimal of more than 38 digits (a value "
                          "beyond any decimal precision, which the Spark backend cannot hold and the others would "
                          "keep)", argument=f"tables[{name!r}]",
                          fix=f"cast the column to Float64 (pl.col({columns[0]!r}).cast(pl.Float64)) or drop the "
                              "values beyond 38 digits before registering the table")


def _check_unit(backend: Any, name: str, schema: pl.Schema, unit: PrivacyUnit) -> None:
    """A backend's refusal of table ``name``'s privacy-unit column type (:class:`ChecksUnit`), before it has it."""
    if unit.column is not None and isinstance(backend, ChecksUnit):
        backend.check_unit(name, unit.column, schema[unit.column])


def _register(backend: Any, name: str, frame: pl.LazyFrame, source: object) -> None:
    """Hand a private table to a backend (with its original source when it is :class:`SourceAware`)."""
    if isinstance(backend, SourceAware):
        backend.register_source(name, frame, source)
    else:
        backend.register(name, frame)


__all__ = ["ArrowStream", "TableCatalog", "TableSource"]
