"""Name resolution for SQL lowering: which plan column a (qualified) SQL column reference means.

DuckDB identifiers are case-insensitive, so ``City`` finds the column ``city`` (an exact match wins).
A column keeps its *origin* (``"table.column"``) while it passes through unchanged, so bounds and
public keys declared on the session for that table column still apply after CTEs and renames.

Example:
    >>> scope = Scope([Column("city", "city", frozenset({"visits", "v"}), "visits.city")])
    >>> scope.resolve(["v", "city"], "").flat
    'city'

"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import polars as pl

from dpframe.errors import SchemaError, one_of


@dataclass(frozen=True)
class Column:
    """A column visible to SQL: its SQL name, the plan column behind it, and where it came from.

    ``public`` names the public table (or public subquery) a column comes from, ``domain`` holds that
    public column's values (the public group keys when grouping by it), ``left_joined`` says it may also
    be NULL (a LEFT JOIN found no match).
    """

    name: str
    flat: str
    qualifiers: frozenset[str] = frozenset()
    origin: str | None = None
    public: str | None = None
    left_joined: bool = False
    path: tuple[str, ...] = ()
    domain: pl.Series | None = field(default=None, compare=False, repr=False)

    def requalified(self, qualifiers: frozenset[str]) -> Column:
        """The same column under other table aliases."""
        return replace(self, qualifiers=qualifiers)


@dataclass
class Scope:
    """The columns a SQL expression may reference (``using``: names merged by ``JOIN ... USING``)."""

    columns: list[Column]
    using: dict[str, Column] = field(default_factory=dict)

    def names(self) -> list[str]:
        """Visible column names, for error messages."""
        return [c.name for c in self.columns]

    def _named(self, columns: list[Column], name: str) -> list[Column]:
        exact = [c for c in columns if c.name == name]
        return exact or [c for c in columns if c.name.lower() == name.lower()]

    def resolve(self, parts: list[str], where: str) -> Column:
        """The column ``parts`` (``[name]``, ``[alias, name]`` or ``[..., struct field ...]``) refers to.

        The returned column's ``path`` holds struct fields to extract, if any.
        """
        if len(parts) >= 2:
            qualified = [c for c in self.columns if parts[0].lower() in c.qualifiers]
            if qualified:
                found = self._named(qualified, parts[1])
                if len(found) == 1:
                    return replace(found[0], path=tuple(parts[2:]))
                if not found:
                    raise SchemaError(f"{parts[0]!r} has no column {parts[1]!r} in {where}", argument="sql",
                                      fix=f"use one of {[c.name for c in qualified]}")
                raise SchemaError(f"column {'.'.join(parts[:2])!r} is ambiguous in {where}", argument="sql",
                                  fix="rename one of the columns in a subquery")
        name = parts[0]
        if name.lower() in self.using:
            return replace(self.using[name.lower()], path=tuple(parts[1:]))
        found = self._named(self.columns, name)
        if len(found) == 1:
            return replace(found[0], path=tuple(parts[1:]))
        if len(found) > 1:
            quals = sorted(q for c in found for q in c.qualifiers)
            raise SchemaError(f"column {name!r} is ambiguous in {where}", argument="sql",
                              fix=f"qualify it with its table alias (one of {quals})")
        raise SchemaError(f"unknown column {'.'.join(parts)!r} in {where}", argument="sql",
                          fix=one_of(name, self.names(), "the columns "))
