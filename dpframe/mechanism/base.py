"""The contract between the planner and a mechanism plugin.

A :class:`Mechanism` handles one or more measure *kinds*. For the measures of one query that it
handles, it says how many equal budget parts it needs (:meth:`Mechanism.parts`) and, given its share,
returns a :class:`MechanismPlan`: the exact statistics the backend must compute (:class:`Statistic`),
the cost, the noise it will add, an accuracy estimate, and ``release(statistics, rng)``. Mechanisms
never charge budget and never create randomness: the core reserves the cost and passes the random
source.

Example (a minimal plugin; see ``docs/plugins.md`` for the full walk-through):

    >>> from dpframe.mechanism import Mechanism
    >>> class Mine:
    ...     name = "mine"
    ...     handles = frozenset({"my_kind"})
    ...     notions = frozenset({"pure"})
    ...     def validate(self, measure, ctx): ...
    ...     def parts(self, measures, ctx): return 1
    ...     def plan(self, measures, ctx, share): ...
    >>> isinstance(Mine(), Mechanism)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.budgets import Budget, Notion
from dpframe.measures import Measure
from dpframe.mechanism.sorted_codes import SortedCodes
from dpframe.noise import RandomSource
from dpframe.privacy_unit import PrivacyUnit

StatisticKind = Literal["rows", "nonnull", "distinct", "fixed_sum", "units", "indicator_sum", "sorted"]
LIST_KINDS = frozenset({"sorted"})
SUM_LIMIT = 2**62
"""The saturation bound of a ``fixed_sum`` (terms and total), in grid steps: every backend clips to ±2⁶²,
leaving int64 headroom for the noise a mechanism adds."""
MIN_GRID_EXPONENT, MAX_GRID_EXPONENT = -1022, 1023
"""The range of a ``fixed_sum``'s ``grid_exp``: 2^k and 2^(−k) stay normal float64 numbers (the backends
scale each value by 2^(−k); a finer grid overflowed to ∞ there). A mechanism picking a grid from the bounds
raises a finer one to 2⁻¹⁰²² (coarser is sound: each row's bound is computed on the grid)."""
"""Statistic kinds whose per-group value is a list (passed to ``release`` as an object array of int64 arrays)."""


@dataclass(frozen=True)
class Statistic:
    """An exact per-group statistic that every backend computes (no noise; never released as is).

    Kinds:
        * ``rows``: number of rows.
        * ``nonnull``: rows where ``column`` is neither null nor NaN.
        * ``distinct``: distinct values of ``column`` among them (``0.0`` and ``-0.0`` one value; one row
          adds at most one, so it moves as ``nonnull`` does).
        * ``fixed_sum``: Σ trunc(((clamp(x, lower, upper) − shift) ** power) / 2**grid_exp) over
          non-null, non-NaN values, summed exactly as integers (fixed point: no float-summation error).
          Every term and the total are clipped to ±:data:`SUM_LIMIT` (2⁶², saturating: never an overflow,
          a wrap-around or an error). Clipping is 1-Lipschitz, so one unit still moves the total by at
          most max_rows · :meth:`row_bound`; with the aggregates' grid (≤ 2³¹ steps a row) a total only
          saturates beyond 2³¹ rows at the bound in one group.
        * ``units``: number of distinct privacy units (partition selection).
        * ``indicator_sum``: number of rows with ``lower <= column < upper`` (histograms).
        * ``sorted``: the list of trunc((clamp(x, lower, upper) − shift) / 2**grid_exp) over the non-null,
          non-NaN values, sorted ascending (the codes of an ordered domain, see :mod:`dpframe.domains`).
          Float columns are computed in float64 as for ``fixed_sum``; integer columns exactly (division
          by 2**grid_exp toward zero; Decimal values first truncated toward zero to integers); dates as
          days and datetimes as time units since the epoch.
          A group without values gets an empty list.

          With ``near`` (probabilities q) the consumer mostly reads ranks within ``reach`` of ⌊q·n⌋: a
          backend may then return a struct ``{n, positions, codes}`` per group — the group's number of
          codes and the codes at some of its ranks (0-based, increasing) — instead of the whole list.
          ``release`` then receives a :class:`~dpframe.mechanism.SortedCodes`, which answers exactly as the
          whole list would and completes itself from the data when it must.
    """

    kind: StatisticKind
    column: str | None = None
    lower: Fraction | None = None
    upper: Fraction | None = None
    shift: Fraction = Fraction(0)
    power: int = 1
    grid_exp: int = 0
    near: tuple[Fraction, ...] = ()
    reach: int = 0

    @property
    def key(self) -> str:
        """A unique, readable name (also the column name in the backend's result)."""
        if self.kind in ("rows", "units"):
            return f"__{self.kind}"
        if self.kind == "nonnull":
            return f"__nonnull:{self.column}"
        if self.kind == "distinct":
            return f"__distinct:{self.column}"
        if self.kind == "indicator_sum":
            return f"__ind:{self.column}:[{self.lower},{self.upper})"
        if self.kind == "sorted":
            ranks = f"~{','.join(map(str, self.near))}±{self.reach}" if self.near else ""
            return f"__sorted:{self.column}:[{self.lower},{self.upper}]-{self.shift}@2^{self.grid_exp}{ranks}"
        return f"__sum:{self.column}:[{self.lower},{self.upper}]-{self.shift}^{self.power}@2^{self.grid_exp}"

    def whole(self) -> Statistic:
        """The same statistic without ``near``: every rank (what a partial ``sorted`` completes from)."""
        return replace(self, near=(), reach=0)

    def row_bound(self) -> Fraction:
        """The largest |contribution| of one row, in the statistic's own integer units.

        For ``fixed_sum`` this is ⌈max(|lower − shift|, |upper − shift|)^power / 2^grid_exp⌉ + 1: the +1
        covers float rounding of the subtraction/power (truncation to the grid only shrinks |value|).
        """
        if self.kind != "fixed_sum":
            return Fraction(1)
        assert self.lower is not None and self.upper is not None
        top = max(abs(self.lower - self.shift), abs(self.upper - self.shift)) ** self.power
        return Fraction(-((-top) // Fraction(2) ** self.grid_exp) + 1)


def statistic_values(column: pl.Series, complete: Callable[[], Sequence[Any]] | None = None) -> Any:
    """A backend result column as ``release`` receives it.

    Int64 values, or for a list-valued kind (``sorted``) a :class:`~dpframe.mechanism.SortedCodes` holding
    every group's codes in one buffer (no copy; it is also a sequence of per-group int64 arrays:
    ``codes[g]``, ``len(codes)``, iteration). A partial ``sorted`` (a struct ``{n, positions, codes}``, see
    :class:`Statistic`) becomes a :class:`~dpframe.mechanism.SortedCodes` completed by ``complete``, which
    the engine supplies and a mechanism calls inside the charged run; ``complete`` receives no values.

    Example:
        >>> [a.tolist() for a in statistic_values(pl.Series([[1, 2], [], [5]], dtype=pl.List(pl.Int64)))]
        [[1, 2], [], [5]]

    """
    if isinstance(column.dtype, pl.Struct):
        return partial_codes(column, complete)
    if not isinstance(column.dtype, pl.List):
        return column.to_numpy()
    return SortedCodes.lists(*flat_lists(column))


def partial_codes(column: pl.Series, complete: Callable[[], Sequence[Any]] | None) -> SortedCodes:
    """A struct column ``{n, positions, codes}`` (one row per group) as :class:`SortedCodes`.

    ``complete`` (engine-supplied, called by the mechanism inside the charged run) receives no values.

    Example:
        >>> col = pl.Series([{"n": 4, "positions": [1, 2], "codes": [5, 6]}])
        >>> partial_codes(col, lambda: [np.array([1, 5, 6, 9])]).at(np.array([2])).tolist()
        [6]

    """
    sizes = column.struct.field("n").to_numpy().astype(np.int64)
    ranks, offsets = flat_lists(column.struct.field("positions"))
    codes, _ = flat_lists(column.struct.field("codes"))
    starts = np.cumsum(sizes) - sizes
    owner = np.repeat(np.arange(sizes.size), np.diff(offsets))
    return SortedCodes(sizes, starts[owner] + ranks, codes, complete)


def flat_lists(column: pl.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A List[Int64] column's values and offsets (no copy where Arrow allows).

    Example:
        >>> [a.tolist() for a in flat_lists(pl.Series([[1, 2], [], [3]]))]
        [[1, 2, 3], [0, 2, 2, 3]]

    """
    arrow = column.rechunk().to_arrow()
    offsets = np.asarray(arrow.offsets, dtype=np.int64)
    values = np.asarray(arrow.values, dtype=np.int64)[offsets[0]:offsets[-1]]
    return values, offsets - offsets[0]


@dataclass(frozen=True)
class MeasureContext:
    """Public facts a mechanism may use: privacy unit, input schema, grouping, the budget notion."""

    unit: PrivacyUnit
    schema: pl.Schema
    grouped: bool
    notion: Notion


@dataclass
class MechanismPlan:
    """What a mechanism will do for its measures with its budget share.

    ``release`` receives the exact statistics (one numpy array per :attr:`Statistic.key`, one entry per
    group, already restricted to the released groups) and the session's random source, and returns one
    array per output column.
    """

    mechanism: str
    measures: tuple[Measure, ...]
    statistics: tuple[Statistic, ...]
    cost: Budget
    # noise, accuracy, ci95 and privacy may be built on first read (dpframe.mechanism.deferred): only explain()
    # and the curve accountants read them.
    noise: Mapping[str, object] = field(default_factory=dict)   # label -> Noise (or any describable)
    accuracy: Mapping[str, str] = field(default_factory=dict)   # output column -> text
    notes: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()                             # released columns (default: measure names)
    ci95: Mapping[str, float] = field(default_factory=dict)     # output column -> 95% half-width, if known
    # The privacy curves of the noise this plan adds (``dpframe.accounting`` curves, e.g. acc.gaussian(...)):
    # RDP/PLD sessions charge them instead of ``cost`` (tighter); None: charged from ``cost``.
    privacy: Sequence[Any] | None = None
    # ``collect(budget, ci=...)``: a mechanism whose plan lists ``interval_outputs()`` then also releases
    # ``<output>_ci_low`` / ``<output>_ci_high`` (noise-only intervals; post-processing, no extra cost).
    confidence: float | None = None

    def output_names(self) -> tuple[str, ...]:
        """The columns ``release`` returns (declared ``outputs``, else one per measure; then the intervals)."""
        names = self.outputs or tuple(m.output_name for m in self.measures)
        if self.confidence is None:
            return names
        return names + tuple(f"{n}_{end}" for n in self.interval_outputs() for end in ("ci_low", "ci_high"))

    def interval_outputs(self) -> tuple[str, ...]:
        """The outputs this plan releases a confidence interval for when ``confidence`` is set (none here)."""
        return ()

    def no_intervals(self) -> dict[str, str]:
        """The released outputs ``collect(..., ci=...)`` gives no interval, each with why (public parameters only).

        Here: every output not in :meth:`interval_outputs`. A plan whose outputs are not released columns (partition
        selection's mask) returns none; a mechanism with a better reason (quantiles) says it.
        """
        has = set(self.interval_outputs())
        names = self.outputs or tuple(m.output_name for m in self.measures)
        return {n: f"its mechanism ({self.mechanism}) declares no confidence interval" for n in names if n not in has}

    def half_widths(self, confidence: float) -> dict[str, float]:
        """Per output, the noise's half-width k with P[|noise| ≤ k] ≥ ``confidence``, where it is data-independent.

        None here. Public parameters only: accuracy-first queries (``collect(accuracy=dp.Accuracy(...))``)
        plan at candidate budgets and read it.
        """
        return {}

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        """Add noise and post-process (overridden by each mechanism's plan class)."""
        raise NotImplementedError(f"{self.mechanism} does not define release()")


@runtime_checkable
class Mechanism(Protocol):
    """A mechanism plugin (return instances from the ``dpframe_mechanisms`` hook)."""

    name: str
    handles: frozenset[str]
    notions: frozenset[Notion]

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        """Raise a :class:`~dpframe.errors.DPFrameError` if ``measure`` is malformed for ``ctx``."""

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        """How many equal budget parts this mechanism needs for ``measures`` (≥ 1)."""
        ...

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> MechanismPlan:
        """Calibrate to ``share`` (a budget in ``ctx.notion``) and describe the work."""
        ...
