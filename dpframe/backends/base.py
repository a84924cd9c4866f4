"""The backend contract.

A backend receives a :class:`StatisticsRequest`: the private table, the row-level plan nodes, the
privacy unit, the grouping and the exact statistics the mechanisms need. It returns one small
``pl.DataFrame`` with one row per group (sorted by the key columns, nulls first) and one integer column
per :attr:`Statistic.key` (a list for ``sorted``; for ``sorted`` with ``near``, a list or a partial struct
``{n, positions, codes}``, see :class:`~dpframe.mechanism.Statistic`). It must bound contributions inside
the query (a uniformly random subset of each unit's distinct group keys, then of its rows — each row
counts, copies of a row included) and must never add noise: noise is drawn by mechanisms in Python. A
``fixed_sum`` saturates at ±:data:`~dpframe.mechanism.SUM_LIMIT` (see :func:`int64_sums_are_exact`).

``contribution_bounding=False`` asks for no ``max_groups`` / ``max_rows`` bounding (rows with a null unit
are still dropped). Only callers whose sensitivity does not depend on the bounds may ask for it: top-k's
distinct-units-per-key score moves every key by at most 1 when a whole unit is added or removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Protocol, get_args, runtime_checkable

import polars as pl

from dpframe.errors import PlanError, PluginError
from dpframe.mechanism import SUM_LIMIT, Statistic
from dpframe.mechanism.base import StatisticKind
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


def int64_sums_are_exact(statistics: Sequence[Statistic], rows: int) -> bool:
    """Whether plain 64-bit sums of these ``fixed_sum`` statistics over at most ``rows`` rows are exact.

    A term is at most ``row_bound()`` (doubled: a margin for the float steps before truncation) and never
    more than :data:`SUM_LIMIT`; if ``rows`` such terms stay below 2⁶³ no int64 sum can wrap, and the total
    only needs clipping to ±SUM_LIMIT. Otherwise a backend sums in a wider type (Int128, HUGEINT,
    DECIMAL(38,0)) before clipping. The aggregates' grid (row_bound ≤ 2³¹ + 1) passes up to 2³⁰ rows.

    Example:
        >>> s = Statistic("fixed_sum", "x", Fraction(0), Fraction(2**31), grid_exp=0)
        >>> int64_sums_are_exact([s], 2**30), int64_sums_are_exact([s], 2**31)
        (True, False)

    """
    bounds = [min(2 * s.row_bound(), Fraction(SUM_LIMIT)) for s in statistics if s.kind == "fixed_sum"]
    return rows * max(bounds, default=Fraction(0)) < 2**63


def double_sums_are_exact(statistics: Sequence[Statistic], rows: int) -> bool:
    """Whether summing these ``fixed_sum`` terms over at most ``rows`` rows in doubles gives the exact total.

    Each term is an integer (truncated onto the grid) of at most ``2·row_bound()``; if ``rows`` of them stay
    within 2⁵³, every partial sum of any order (a parallel engine's too) is an integer a double holds
    exactly, so every addition is exact and the double total, cast back, is the integer sum. A backend
    whose double sums are cheaper than its 64-bit integer sums (DuckDB) takes them then.

    Example:
        >>> s = Statistic("fixed_sum", "x", Fraction(0), Fraction(2**20), grid_exp=0)
        >>> double_sums_are_exact([s], 2**31), double_sums_are_exact([s], 2**32)
        (True, False)

    """
    bounds = [2 * s.row_bound() for s in statistics if s.kind == "fixed_sum"]
    return rows * max(bounds, default=Fraction(0)) <= 2**53


class Backend(Protocol):
    """An execution engine (register a factory with the ``dpframe_backends`` hook).

    Optional capabilities are the protocols below; the engine checks them with ``isinstance`` (a backend
    author reads this module to learn every hook the engine may call).
    """

    name: str

    def register(self, name: str, source: pl.LazyFrame) -> None:
        """Take ownership of a private table (called once per table by the session)."""

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        """Compute the requested exact statistics per group."""
        ...


@runtime_checkable
class SourceAware(Protocol):
    """Also receives the table's original source (e.g. a Parquet path the engine can scan itself)."""

    def register_source(self, name: str, frame: pl.LazyFrame, source: object) -> None:
        """Take ownership of a private table; ``source`` is what the data owner passed."""


@runtime_checkable
class LoadsOwnTables(Protocol):
    """Reads table sources itself (Spark DataFrames and paths stay in Spark) and reads their rows in place."""

    def load_table(self, name: str, source: object) -> pl.LazyFrame:
        """The table as a lazy frame with its public schema (its rows may stay in the engine)."""
        ...

    def count_rows(self, name: str) -> int | None:
        """The row count of a table :meth:`load_table` kept in the engine, every value read once.

        None for a table it did not keep (the catalog reads it through Polars). A value the engine cannot
        read is a :class:`~dpframe.errors.SchemaError` naming ``tables[name]`` (every query reading its
        column would fail after its charge).
        """
        ...


@runtime_checkable
class ChecksUnit(Protocol):
    """Refuses privacy-unit columns of types whose values it cannot keep apart (checked on the type, never the rows)."""

    def check_unit(self, table: str, column: str, dtype: pl.DataType) -> None:
        """A :class:`~dpframe.errors.SchemaError` naming ``privacy_unit`` if units of ``dtype`` cannot be bounded."""
        ...


@runtime_checkable
class SparkBound(Protocol):
    """Runs on a SparkSession the data owner gives (``dp.Session(..., spark=...)``)."""

    def use_spark(self, spark: Any) -> None:
        """Run on ``spark`` from now on."""


@runtime_checkable
class Quiet(Protocol):
    """Has output settings (logs, progress) that may print statistics of the rows, and may change at any time."""

    def check_quiet(self) -> None:
        """An :class:`~dpframe.errors.ArgumentError` while one is on (called before a charge and each read)."""


#: Every statistic kind a backend may be asked for (:class:`~dpframe.mechanism.Statistic`).
STATISTIC_KINDS: frozenset[str] = frozenset(get_args(StatisticKind))
#: The kinds every backend computes: those of the first backend contract. A kind added since (``distinct``)
#: runs only on a backend that lists it in ``statistic_kinds`` (:class:`ListsKinds`).
BASE_KINDS: frozenset[str] = frozenset({"rows", "nonnull", "fixed_sum", "units", "indicator_sum", "sorted"})


@runtime_checkable
class ListsKinds(Protocol):
    """Says which statistic kinds it computes: :data:`BASE_KINDS` and any of the later ones (``distinct``).

    A backend without this attribute computes :data:`BASE_KINDS` only: a query reading another kind is refused
    on it before its charge (:func:`check_kinds`), not failed after it.
    """

    statistic_kinds: frozenset[str]


def kinds_of(backend: Any) -> frozenset[str]:
    """The statistic kinds ``backend`` computes (see :class:`ListsKinds`).

    Example:
        >>> class Old:
        ...     name = "old"
        >>> sorted(STATISTIC_KINDS - kinds_of(Old()))
        ['distinct']

    """
    return frozenset(backend.statistic_kinds) if isinstance(backend, ListsKinds) else BASE_KINDS


def check_listed_kinds(backend: Any, name: str) -> None:
    """A PluginError naming ``backend`` unless its ``statistic_kinds`` (if any) are known kinds, the base ones included.

    Checked when a backend is created, so a backend that leaves out a base kind (which families read without
    declaring it) is refused before any query, not after a charge.

    Example:
        >>> class Odd:
        ...     name, statistic_kinds = "odd", frozenset({"rows"})
        >>> check_listed_kinds(Odd(), "odd")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: backend: backend 'odd' lists statistic_kinds ['rows']...

    """
    if not isinstance(backend, ListsKinds):
        return
    listed = backend.statistic_kinds
    if not (isinstance(listed, frozenset) and all(isinstance(k, str) for k in listed)
            and BASE_KINDS <= listed <= STATISTIC_KINDS):
        shown = sorted(map(str, listed)) if isinstance(listed, frozenset) else listed
        raise PluginError(f"backend {name!r} lists statistic_kinds {shown!r}", argument="backend",
                          fix=f"statistic_kinds must be a frozenset of kinds from {sorted(STATISTIC_KINDS)} holding "
                              f"every base kind {sorted(BASE_KINDS)} (or leave the attribute out: base kinds only)")


def check_kinds(backend: Any, kinds: frozenset[str]) -> None:
    """A PlanError naming ``backend`` (free: called before the charge) if it does not compute one of ``kinds``.

    Example:
        >>> class Old:
        ...     name = "old"
        >>> check_kinds(Old(), frozenset({"rows", "distinct"}))
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: backend: backend 'old' does not compute 'distinct' statistics...

    """
    reason = kinds_refusal(backend, kinds)
    if reason is not None:
        raise PlanError(reason, argument="backend",
                        fix="run it on a backend that lists them in statistic_kinds: dp.Session(..., "
                            "backend='polars') (the built-in backends compute every kind); nothing was charged")


def kinds_refusal(backend: Any, kinds: frozenset[str]) -> str | None:
    """Why :func:`check_kinds` refuses ``kinds`` on ``backend`` (None: it computes them all); ``explain()`` shows it.

    Example:
        >>> class Old:
        ...     name = "old"
        >>> kinds_refusal(Old(), frozenset({"rows"})) is None
        True

    """
    missing = sorted(kinds - kinds_of(backend))
    if not missing:
        return None
    what = ", ".join(repr(k) for k in missing)
    return (f"backend {backend.name!r} does not compute {what} statistics, which this query reads "
            f"({_READERS.get(missing[0], 'a mechanism')})")


_READERS = MappingProxyType({"distinct": "dp.count_distinct, SQL COUNT(DISTINCT x)"})


@runtime_checkable
class Refuses(Protocol):
    """Cannot run every row-level node: says which, for free, before anything is charged."""

    def supports(self, node: RowNode) -> str | None:
        """Why this backend cannot run ``node`` (None: it can)."""
        ...


def unsupported(backend: Any, node: RowNode) -> str | None:
    """Why ``backend`` cannot run ``node`` (None if it can).

    A backend may answer itself with ``supports(node) -> str | None``; otherwise a SQL node runs only if it
    has a Polars translation (``polars_unavailable`` is None).
    """
    if isinstance(backend, Refuses):
        reason = backend.supports(node)
        return None if reason is None else str(reason)
    reason = getattr(node, "polars_unavailable", None)
    return None if reason is None else str(reason)
