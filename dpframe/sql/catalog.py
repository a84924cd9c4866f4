"""What a session declares for SQL: private table schemas, public tables, public keys and bounds.

* ``public_tables={"cities": df}`` — public lookup tables that SQL may JOIN with (never charged, never
  protected). A public table's join key must be unique, so each private row matches at most one row.
* ``public_keys={"visits.city": [...]}`` — the public group keys of a private table's column: ``GROUP BY``
  that column releases exactly these keys (missing ones with a count of ~0), at no privacy cost for the
  keys. A ``GROUP BY`` column of a public table uses that table's distinct values as keys.
* ``bounds={"visits.spend": (0, 500)}`` — clipping bounds used when an aggregate names the column
  without ``CLAMP(col, lower, upper)``.

Keys are ``"table.column"``. Everything here is public: it is never read from the private data.

Example:
    >>> import polars as pl
    >>> cat = SQLCatalog.build({"visits": pl.Schema({"city": pl.String, "spend": pl.Float64})}, None,
    ...                        public_tables=None, public_keys={"visits.city": ["a", "b"]},
    ...                        bounds={"visits.spend": (0, 500)})
    >>> cat.keys["visits.city"], cat.bounds["visits.spend"]
    (['a', 'b'], (Fraction(0, 1), Fraction(500, 1)))

"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from dpframe.engine_output import ENGINE
from dpframe.errors import SchemaError, one_of
from dpframe.measures import Bounds, check_bounds
from dpframe.sealed import plain_frame
from dpframe.tables import check_column_names, load_table


def _public_frame(name: str, source: object) -> pl.DataFrame:
    argument = "public_tables"
    frame = load_table(name, source, argument)
    try:
        out = frame.collect(engine=ENGINE)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise SchemaError(f"cannot read public table {name!r}: {str(e).splitlines()[0]}",
                          argument=f"{argument}[{name!r}]", fix="check the file or frame") from e
    check_column_names(out.columns, f"{argument}[{name!r}]")
    return plain_frame(out)   # its own memory: a write to the NumPy arrays it was built on changes nothing


def _split(key: object, argument: str) -> tuple[str, str]:
    if not isinstance(key, str) or key.count(".") < 1:
        raise SchemaError(f"expected 'table.column', got {key!r}", argument=argument,
                          fix="name the column with its table, e.g. {'visits.city': [...]}")
    table, column = key.split(".", 1)
    return table, column


@dataclass
class SQLCatalog:
    """The session's public declarations for SQL (validated when the session is created)."""

    private: dict[str, pl.Schema]
    unit: str | None
    public: dict[str, pl.DataFrame] = field(default_factory=dict)
    keys: dict[str, list[Any]] = field(default_factory=dict)
    bounds: dict[str, Bounds] = field(default_factory=dict)

    @classmethod
    def build(cls, private: Mapping[str, pl.Schema], unit: str | None, *, public_tables: Mapping[str, Any] | None,
              public_keys: Mapping[str, Any] | None, bounds: Mapping[str, Any] | None) -> SQLCatalog:
        """Validate the declarations against the registered tables."""
        cat = cls(dict(private), unit)
        if public_tables is not None and not isinstance(public_tables, Mapping):
            raise SchemaError(f"expected a dict, got {type(public_tables).__name__}", argument="public_tables",
                              fix="pass {'cities': data}")
        for name, source in (public_tables or {}).items():
            if not isinstance(name, str) or not name:
                raise SchemaError(f"table names must be strings, got {name!r}", argument="public_tables",
                                  fix="use {'cities': data}")
            if name.lower() in {p.lower() for p in private}:
                raise SchemaError(f"{name!r} is both a private and a public table", argument="public_tables",
                                  fix="give the public table another name")
            cat.public[name] = _public_frame(name, source)
        if public_keys is not None and not isinstance(public_keys, Mapping):
            raise SchemaError(f"expected a dict, got {type(public_keys).__name__}", argument="public_keys",
                              fix="pass {'table.column': [key, ...]}")
        for key, values in (public_keys or {}).items():
            table, column = _split(key, "public_keys")
            dtype = cat.column_type(table, column, "public_keys")
            if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
                raise SchemaError(f"keys of {key!r} must be a list of values, got {values!r}",
                                  argument="public_keys", fix=f"pass {{{key!r}: [value, ...]}}")
            listed = list(values.to_list() if isinstance(values, pl.Series) else values)
            if not listed:
                raise SchemaError(f"no keys given for {key!r}", argument="public_keys", fix="pass at least one key")
            if len(set(map(repr, listed))) != len(listed):
                raise SchemaError(f"the keys of {key!r} contain duplicates", argument="public_keys",
                                  fix="list each key once")
            try:
                listed = pl.Series(column, listed).cast(dtype, strict=True).to_list()
            except (pl.exceptions.PolarsError, pl.exceptions.PanicException, TypeError, ValueError,
                    OverflowError) as e:     # (10**400; Decimal('NaN'): a panic in Polars' constructor)
                reason = "a value Polars cannot read" if isinstance(e, pl.exceptions.PanicException) else \
                    (str(e).splitlines() or [""])[0]
                raise SchemaError(f"keys of {key!r} do not fit the column type {dtype}: {reason}",
                                  argument="public_keys", fix="pass keys of the column's type") from None
            cat.keys[f"{table}.{column}"] = listed
        if bounds is not None and not isinstance(bounds, Mapping):
            raise SchemaError(f"expected a dict, got {type(bounds).__name__}", argument="bounds",
                              fix="pass {'table.column': (lower, upper)}")
        for key, pair in (bounds or {}).items():
            table, column = _split(key, "bounds")
            dtype = cat.column_type(table, column, "bounds")
            if not (dtype.is_numeric() or dtype == pl.Boolean):
                raise SchemaError(f"{key!r} is {dtype}, not numeric", argument="bounds",
                                  fix="declare bounds for numeric columns only")
            cat.bounds[f"{table}.{column}"] = check_bounds(pair, f"bounds[{key!r}]")
        return cat

    def column_type(self, table: str, column: str, argument: str) -> pl.DataType:
        """The type of ``table.column`` (private or public), or a SchemaError."""
        schema = self.private.get(table)
        if schema is None and table in self.public:
            schema = self.public[table].schema
        if schema is None:
            raise SchemaError(f"unknown table {table!r}", argument=argument,
                              fix=one_of(table, sorted([*self.private, *self.public])))
        if column not in schema:
            raise SchemaError(f"table {table!r} has no column {column!r}", argument=argument,
                              fix=one_of(column, schema.names()))
        return schema[column]

    def lookup(self, name: str) -> tuple[str, str] | None:
        """``("private" | "public", registered name)`` for a SQL table name (case-insensitive), or None."""
        for kind, names in (("private", list(self.private)), ("public", list(self.public))):
            if name in names:
                return kind, name
        for kind, names in (("private", list(self.private)), ("public", list(self.public))):
            found = [n for n in names if n.lower() == name.lower()]
            if len(found) == 1:
                return kind, found[0]
        return None
