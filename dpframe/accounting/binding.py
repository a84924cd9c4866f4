"""What a ledger protects: the privacy unit and the identity of the tables its charges were spent on.

A spent budget means something only for one neighbouring relation: ε = 0.1 per *row* is up to
ε = 0.1·max_rows per *user*, so charges made under different privacy units (or on other tables) do not
add up to any single guarantee. A ledger file therefore records, next to its total budget, the session's
privacy unit (column, ``max_rows``, ``max_groups``) and its tables (names and a fingerprint of each
schema), and refuses a session that differs (:class:`~dpframe.errors.LedgerError`, with a fix; nothing
is charged). A ledger written before dpframe recorded this adopts the first session that opens it.

Example:
    >>> import polars as pl, dpframe as dp
    >>> b = LedgerBinding.of(dp.PrivacyUnit("user", max_rows=10), {"visits": pl.Schema({"user": pl.Int64})})
    >>> sorted(b.meta())
    ['privacy_unit', 'tables']
    >>> describe_meta("privacy_unit", b.meta()["privacy_unit"])
    "PrivacyUnit('user', max_rows=10)"

"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from dpframe.privacy_unit import PrivacyUnit


def schema_fingerprint(schema: pl.Schema) -> str:
    """A short, stable fingerprint of a table's public schema (column names and types, in order).

    Example:
        >>> schema_fingerprint(pl.Schema({"x": pl.Int64})) == schema_fingerprint(pl.Schema({"x": pl.Float64}))
        False

    """
    text = json.dumps([[name, str(dtype)] for name, dtype in schema.items()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LedgerBinding:
    """The privacy unit and tables of a session, as a ledger records them (``meta`` rows)."""

    unit: PrivacyUnit
    tables: Mapping[str, str]          # table name -> schema fingerprint

    @classmethod
    def of(cls, unit: PrivacyUnit, schemas: Mapping[str, pl.Schema]) -> LedgerBinding:
        """The binding of a session with privacy unit ``unit`` and tables ``schemas``."""
        return cls(unit, {name: schema_fingerprint(s) for name, s in schemas.items()})

    def meta(self) -> dict[str, str]:
        """The ledger ``meta`` rows (JSON text, compared as text)."""
        unit = {"column": self.unit.column, "max_rows": self.unit.rows, "max_groups": self.unit.groups}  # or "auto"
        return {"privacy_unit": json.dumps(unit, sort_keys=True, default=str),
                "tables": json.dumps(dict(sorted(self.tables.items())))}


def describe_meta(key: str, value: str) -> str:
    """A recorded ``privacy_unit`` or ``tables`` value in words (the text itself if unreadable)."""
    try:
        data: Any = json.loads(value)
        if key == "privacy_unit":
            if data["column"] is None:
                return "PrivacyUnit.row()"
            groups = f", max_groups={data['max_groups']!r}" if data["max_groups"] is not None else ""
            return f"PrivacyUnit({data['column']!r}, max_rows={data['max_rows']!r}{groups})"
        return "tables " + ", ".join(f"{name!r} (schema {fp})" for name, fp in data.items())
    except (ValueError, KeyError, TypeError, AttributeError):
        return repr(value)


def difference(key: str, have: str, want: str) -> str:
    """Why a session with ``want`` may not use a ledger that recorded ``have`` (one sentence)."""
    if key == "tables":
        try:
            old, new = json.loads(have), json.loads(want)
            missing, added = sorted(set(old) - set(new)), sorted(set(new) - set(old))
            changed = sorted(n for n in set(old) & set(new) if old[n] != new[n])
            parts = [f"tables {missing} are missing" if missing else "", f"tables {added} are new" if added else "",
                     f"tables {changed} have another schema" if changed else ""]
            return (f"this ledger was written for {describe_meta(key, have)}; in this session "
                    + "; ".join(p for p in parts if p))
        except (ValueError, TypeError, AttributeError):
            pass
    return f"this ledger was written for {describe_meta(key, have)}, the session has {describe_meta(key, want)}"


__all__ = ["LedgerBinding", "describe_meta", "difference", "schema_fingerprint"]
