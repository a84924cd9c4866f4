"""Row-level plan nodes built from SQL: a filter, a projection and a join with a public table.

Each node keeps the DuckDB SQL text of its expressions (over the input's column names) and, when
dpframe can translate them with identical semantics, the equivalent Polars expressions. The DuckDB
backend compiles the SQL; the Polars backend applies the Polars expressions, and refuses — before any
budget is charged — a node that has none (``polars_unavailable`` says why; use ``backend='duckdb'``).

Output schemas are derived when the node is built, by DuckDB on an empty frame with the input schema
(reads no data), so the planner sees the same types on every backend.

Example:
    >>> import polars as pl
    >>> from dpframe.plan.nodes import Scan
    >>> scan = Scan.of("visits", pl.Schema({"age": pl.Int64}))
    >>> node = SQLFilter(scan, scan.schema, '(age >= 18)', pl.col("age") >= 18, None)
    >>> node.describe()
    'Filter [SQL: (age >= 18)]'

"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from dpframe.errors import PlanError
from dpframe.plan.growth import Growth
from dpframe.plan.nodes import RowNode
from dpframe.sealed import ExprCopies, ReadOnlyKeys

_IDENTIFIER = re.compile(r'^(?:"(?:[^"]|"")*"|[A-Za-z_][A-Za-z0-9_]*)$')


def guard(sql: str) -> str:
    """``TRY(sql)``: on DuckDB a row-level expression that fails on some value yields NULL instead.

    A failure that depends on a private value would otherwise reveal it. Plain column names stay as is.

    Example:
        >>> guard('"age"'), guard("(a // b)")
        ('"age"', 'TRY((a // b))')

    """
    return sql if _IDENTIFIER.match(sql) else f"TRY({sql})"


def _refuse(node: RowNode, reason: str | None) -> PlanError:
    return PlanError(f"{node.describe()} cannot run on the Polars backend: {reason}", argument="backend",
                     fix="run it on DuckDB: sess.sql(..., backend='duckdb') or dp.Session(..., backend='duckdb')")


def _suffix(reason: str | None) -> str:
    return "" if reason is None else f" (DuckDB only: {reason})"


@dataclass(frozen=True, eq=False)
class SQLFilter(ExprCopies, RowNode):
    """``WHERE <predicate>``: keep rows where the predicate is true (null counts as false)."""

    sql: str
    polars: pl.Expr | None
    polars_unavailable: str | None
    expr_fields = frozenset({"polars"})

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        if self.polars is None:
            raise _refuse(self, self.polars_unavailable)
        return frame.filter(self.polars)

    def describe(self) -> str:
        return f"Filter [SQL: {self.sql}]{_suffix(self.polars_unavailable)}"


@dataclass(frozen=True, eq=False)
class SQLProject(ExprCopies, RowNode):
    """``SELECT <expr> AS <name>, ...``: exactly these columns (the privacy-unit column is one of them)."""

    items: tuple[tuple[str, str], ...]
    polars: tuple[pl.Expr, ...] | None
    polars_unavailable: str | None
    column_bounds: tuple[tuple[str, Growth], ...] = ()
    """Each computed column's growth bound other than ``(1, 0)`` (:mod:`dpframe.sql.growth`): what later steps read."""
    expr_fields = frozenset({"polars"})

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        if self.polars is None:
            raise _refuse(self, self.polars_unavailable)
        return frame.select(self.polars)

    def describe(self) -> str:
        shown = ", ".join(sql if sql == f'"{name}"' or sql == name else f"{sql} AS {name}" for name, sql in self.items)
        return f"Select [SQL: {shown}]{_suffix(self.polars_unavailable)}"


@dataclass(frozen=True, eq=False)
class PublicJoin(RowNode):
    """An INNER or LEFT equi-join with a public lookup table whose join keys are unique.

    ``data`` holds the public key columns (``right_on``, cast to the private columns' types; named
    ``public_on`` in the public table) and the public columns to add, already named as in the output.
    Each private row matches at most one public row, so the join is row-level: it never multiplies a
    privacy unit's rows. ``data`` is read-only (``q.node`` hands it out; it was checked when built and is
    read again when the query runs).
    """

    table: str
    data: pl.DataFrame
    left_on: tuple[str, ...]
    right_on: tuple[str, ...]
    how: str
    added: tuple[str, ...]
    public_on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if type(self.data) is not ReadOnlyKeys:
            object.__setattr__(self, "data", ReadOnlyKeys.of(self.data))

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        joined = frame.join(self.data.lazy(), left_on=list(self.left_on), right_on=list(self.right_on),
                            how="left" if self.how == "left" else "inner", nulls_equal=False,
                            coalesce=True, maintain_order="left")
        return joined.select(list(self.output_schema.names()))

    def describe(self) -> str:
        names = self.public_on or self.right_on
        on = " AND ".join(f"{a} = {self.table}.{b}" for a, b in zip(self.left_on, names))
        return f"{self.how.capitalize()}Join public {self.table} ON {on} (+{list(self.added)})"
