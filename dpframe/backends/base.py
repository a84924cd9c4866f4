"""The backend contract.

A backend receives a :class:`StatisticsRequest`: the private table, the row-level plan nodes, the
privacy unit, the grouping and the exact statistics the mechanisms need. It returns one small
``pl.DataFrame`` with one row per group (sorted by the key columns, nulls first) and one integer column
per :attr:`Statistic.key`. It must bound contributions inside the query (a uniformly random subset of
each unit's groups and rows) and must never add noise: noise is drawn by mechanisms in Python.

``contribution_bounding=False`` asks for no ``max_groups`` / ``max_rows`` bounding (rows with a null unit
are still dropped). Only callers whose sensitivity does not depend on the bounds may ask for it: top-k's
distinct-units-per-key score moves every key by at most 1 when a whole unit is added or removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import polars as pl

from dpframe.mechanism import Statistic
from dpframe.plan.nodes import RowNode
from dpframe.privacy_unit import PrivacyUnit


@dataclass(frozen=True, eq=False)
class StatisticsRequest:
    """Everything a backend needs to compute a query's statistics in one pass."""

    table: str
    row_nodes: tuple[RowNode, ...]
    unit: PrivacyUnit
    by: tuple[str, ...]
    keys: pl.DataFrame | None
    statistics: tuple[Statistic, ...]
    seed: int
    contribution_bounding: bool = True


class Backend(Protocol):
    """An execution engine (register a factory with the ``dpframe_backends`` hook)."""

    name: str

    def register(self, name: str, source: pl.LazyFrame) -> None:
        """Take ownership of a private table (called once per table by the session)."""

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        """Compute the requested exact statistics per group."""
        ...
