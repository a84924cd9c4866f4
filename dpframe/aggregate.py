"""The ``agg`` query family: private measures per group (or one row), planned by :mod:`dpframe.planning`.

It is registered by the core plugin through ``dpframe_query_families``, like every other family:
:class:`Aggregates` builds an :class:`AggregateQuery` (measures validated at once, free); its plan runs,
inside the release (:mod:`dpframe.release`), one statistics query, partition selection, then each
mechanism's release (:func:`run_aggregate`). :func:`dry_run` first runs every mechanism on all-zero
statistics, *before* charging, so a broken plugin fails without spending budget. SQL queries lower to
the same family.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> query = sess.table("t").agg(dp.len())
    >>> dry_run(query.plan(dp.PureDP(1)))         # free: no data, no charge
    >>> sess.spent()
    PureDP(epsilon=0)

"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl

from dpframe.accuracy import level
from dpframe.backends.base import StatisticsRequest
from dpframe.errors import DPFrameError, PlanError, PluginError, refused_in
from dpframe.explain import explain_aggregate
from dpframe.family import FamilyPlan, Source
from dpframe.measures import Measure
from dpframe.mechanism import LIST_KINDS, MechanismPlan, Statistic, statistic_values
from dpframe.noise import RandomSource, SeededRandomSource
from dpframe.plan.nodes import Aggregate
from dpframe.planning import PhysicalPlan, plan_query, validate_measures, with_intervals
from dpframe.release import PluginFailure
from dpframe.tuning.diagnostics import counted
from dpframe.tuning.stage import check_auto, plan_staged, staged, stand_in

if TYPE_CHECKING:
    from dpframe.release import PrivateReader


def _empty_lists(n: int) -> np.ndarray:
    """An object array of ``n`` empty int64 arrays (the all-empty value of a list-valued statistic)."""
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = np.zeros(0, dtype=np.int64)
    return out


def dry_run(plan: PhysicalPlan) -> None:
    """Run each mechanism's release on all-zero statistics (no data): a broken plugin fails uncharged."""
    for p in ([plan.selection] if plan.selection else []) + plan.plans:
        zeros = {s.key: _empty_lists(1) if s.kind in LIST_KINDS else np.zeros(1, dtype=np.int64)
                 for s in p.statistics}
        fix = (f"release(stats, rng) must return {{column: array}} with exactly the plan's output_names() (its "
               f"outputs, or one per measure), one value per group: a bug of the plugin that registers "
               f"{p.mechanism!r} (see `dpframe plugins`); report it to its authors")
        try:
            released = p.release(zeros, SeededRandomSource(0))
        except Exception as e:
            raise PluginError(f"mechanism {p.mechanism!r} failed in release() on all-zero statistics, before the "
                              f"charge ({type(e).__name__}: {e})", argument="mechanism", fix=fix) from e
        names = sorted(released) if isinstance(released, Mapping) else type(released).__name__
        if names != sorted(p.output_names()):
            raise PluginError(f"mechanism {p.mechanism!r} returned {names} from release(), but its plan's "
                              f"output_names() are {sorted(p.output_names())}", argument="mechanism", fix=fix)


def mechanisms(plan: PhysicalPlan) -> str:
    """The plan's mechanisms, for the ledger ("partition_selection, aggregates")."""
    return ", ".join(p.mechanism for p in ([plan.selection] if plan.selection else []) + plan.plans)


def run_aggregate(reader: PrivateReader, node: Aggregate, plan: PhysicalPlan, rng: RandomSource) -> pl.DataFrame:
    """The released frame of ``node`` under ``plan`` (runs inside the release: ``reader`` reads private rows)."""
    request = reader.request(node.input, plan.statistics(), by=node.by, keys=node.keys)
    stats = reader.run(request)
    keep: pl.Series | None = None

    def values(stat: Statistic) -> Any:
        if not stat.near:
            return statistic_values(stats[stat.key])
        return statistic_values(stats[stat.key], lambda: _whole_codes(reader, request, stat, keep))
    if plan.selection is not None:     # partition selection reads its own statistics, before any filter
        inputs = {s.key: values(s) for s in plan.selection.statistics}
        kept = released_by(plan.selection, inputs, rng, stats.height, ("__keep",))
        keep = pl.Series(np.asarray(kept["__keep"], dtype=bool))
        stats = stats.filter(keep)
    columns: dict[str, Any] = {c: stats[c] for c in node.by}
    for p in plan.plans:
        released = released_by(p, {s.key: values(s) for s in p.statistics}, rng, stats.height)
        if set(released) & set(columns):      # planning checked the declared names: an engine bug
            raise RuntimeError("two mechanisms released one column")
        columns.update({name: pl.Series(name, values) for name, values in released.items()})
    return pl.DataFrame(columns)


def released_by(plan: MechanismPlan, inputs: Mapping[str, Any], rng: RandomSource, groups: int,
                outputs: Sequence[str] | None = None) -> Mapping[str, Any]:
    """``plan.release(inputs, rng)``, checked: the declared columns (or ``outputs``), one value per group each.

    A failure of the plugin's ``release`` (or a result that breaks the contract) is a
    :class:`~dpframe.release.PluginFailure` naming the mechanism and ``release``, with the error's type only (its
    message could quote private values), as is a sampler's refusal of the arguments the plugin gave it
    (:func:`~dpframe.errors.refused_in`) and a :class:`~dpframe.errors.DPFrameError` the plugin raises itself.
    Only the engine's own passes through: one raised through the private reader (``dpframe.release``: a partial
    ``sorted`` statistic completing itself reads the table again, and finds it changed).
    """
    failure = None
    try:
        released = plan.release(inputs, rng)
        if not isinstance(released, Mapping) or set(released) != set(outputs or plan.output_names()):
            failure = "undeclared columns"
        elif any(len(v) != groups for v in released.values()):
            failure = "not one value per group in each column"
    except (KeyboardInterrupt, SystemExit):
        raise
    except DPFrameError as e:    # the engine's reader's passes; the plugin's own, or a sampler's, is the plugin's
        if refused_in(e) is None and refused_in(e, "dpframe.release") is not None:
            raise
        failure = type(e).__name__
    except BaseException as e:   # noqa: BLE001 — PanicException too
        failure = type(e).__name__
    if failure is not None:      # raised outside the except block: the plugin's exception is not kept
        raise PluginFailure("mechanism", plan.mechanism, "release", failure)
    return released


def _whole_codes(reader: PrivateReader, request: StatisticsRequest, stat: Statistic, keep: pl.Series | None) -> Any:
    """Every group's full sorted codes for a partial ``sorted`` statistic: the same request run again.

    Same seed, same row plan and the same statistics (only ``near`` dropped, so the same columns are
    hashed for contribution bounding): the same bounded rows, hence the same groups; the partial-key
    selection ``keep`` is applied again. See :mod:`dpframe.mechanism.sorted_codes`.
    """
    whole = tuple(dict.fromkeys(s.whole() if s == stat else s for s in request.statistics))
    stats = reader.rerun(request, whole)
    if keep is not None:
        stats = stats.filter(keep)
    return statistic_values(stats[stat.whole().key])


class AggregateQuery:
    """An ``agg`` query: its :class:`~dpframe.plan.nodes.Aggregate` node over a :class:`~dpframe.family.Source`."""

    def __init__(self, source: Source, node: Aggregate) -> None:
        self.source, self.node = source, node

    @property
    def backend(self) -> str | None:
        """The backend this query runs on (None: the session's)."""
        return self.source.backend

    def plan(self, budget: object, ci: float | None = None, diagnostics: bool = False) -> FamilyPlan[Any]:
        """Plan with :data:`dpframe.planning.PASSES` (free; raises, uncharged, if it cannot run).

        ``ci``: also release ``<output>_ci_low`` / ``<output>_ci_high`` at that confidence for the outputs
        whose mechanism gives intervals (post-processing of the same noisy statistics: no extra cost).
        ``diagnostics``, or ``"auto"`` bounds: a staged plan (:mod:`dpframe.tuning.stage`) whose run returns a
        :class:`~dpframe.tuning.diagnostics.Diagnosed` when ``diagnostics`` is set.
        """
        level = None if ci is None else confidence(ci)

        def finish(physical: PhysicalPlan) -> PhysicalPlan:
            return physical if level is None else with_intervals(physical, self.node.by, level)
        if diagnostics or staged(self.source.unit, self.node):
            if diagnostics and not counted(self.source.unit.is_row, self.node):
                raise PlanError("nothing to diagnose: no contribution bounding, clipping or partition selection",
                                argument="diagnostics", fix="drop diagnostics=True: this query has no bias to count")
            planned = plan_staged(self.source, self.node, budget, ci=level, diagnostics=diagnostics,
                                  run=run_aggregate, finish=finish)
            detail = planned.detail

            def check() -> None:
                dry_run(detail.shown)
                dry_run(detail.worst)
            return dataclasses.replace(planned, check=check, kinds=detail.shown.kinds() | detail.worst.kinds())
        physical = finish(plan_query(self.source.context, self.node, budget))
        node = self.node
        backend = self.source.backend or self.source.context.backend
        return FamilyPlan(physical.budget, physical.cost, physical.session_cost, mechanisms(physical),
                          lambda: explain_aggregate(self.source.unit, node, physical, backend),
                          lambda reader, rng: run_aggregate(reader, node, physical, rng),
                          check=lambda: dry_run(physical), detail=physical, kinds=physical.kinds())

    def describe(self) -> str:
        """A compact one-line text of the query (used in the history)."""
        steps = [n.describe() for n in self.node.lineage()[:-1]]
        aggs = ", ".join(m.describe() for m in self.node.measures)
        group = f" | group_by{list(self.node.by)}" if self.node.by else ""
        return " | ".join(steps) + f"{group} | agg({aggs})"


class Aggregates:
    """The ``agg`` family: ``frame.agg(...)`` and ``frame.group_by(...).agg(...)``."""

    name = "agg"
    attach: Literal["frame", "group_by", "both"] = "both"
    methods: tuple[str, ...] = ()
    result_types: Mapping[str, type] = MappingProxyType({})

    def build(self, source: Source, /, *measures: Measure | Iterable[Measure], **named: Measure) -> AggregateQuery:
        """Validate the measures (free) and build the query."""
        node = Aggregate(source.node, source.by, source.keys, tuple(_measures(measures, named)))
        names = [*source.by, *(m.output_name for m in node.measures)]
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:       # (planning checks the mechanisms' outputs again: a plugin's may add some)
            raise PlanError(f"two output columns are named {twice!r}", argument="measures",
                            fix="rename one with .alias('new_name')")
        if staged(source.unit, node):
            check_auto(source, node)
            unit, stand = stand_in(source.unit, node)
            validate_measures(dataclasses.replace(source.context, unit=unit), stand)
        else:
            validate_measures(source.context, node)
        return AggregateQuery(source, node)


def confidence(ci: object) -> float:
    """A confidence level for ``collect(..., ci=...)``: a number strictly between 0 and 1 (at most 1 − 10⁻⁹).

    Example:
        >>> confidence(0.95)
        0.95
        >>> confidence(95)
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: ci: must be a confidence level strictly between 0 and 1, at most 0.999999999, ...

    """
    return level(ci, "ci")


def _measures(measures: Sequence[Measure | Iterable[Measure]], named: dict[str, Measure]) -> list[Measure]:
    flat: list[Measure] = []
    for m in measures:
        if isinstance(m, Measure):
            flat.append(m)
        elif isinstance(m, pl.Expr | str):
            raise PlanError(f"{m} is not a private measure: a raw column cannot be released",
                            argument="measures", fix="use dp measures such as dp.len(), dp.sum(col, bounds=...)")
        else:
            try:
                items = list(m)
            except TypeError as e:
                raise PlanError(f"{m!r} is not a dp measure", argument="measures",
                                fix="use dp.len(), dp.count(), dp.sum(), dp.mean(), dp.var(), dp.std()") from e
            if not all(isinstance(i, Measure) for i in items):
                raise PlanError(f"{m!r} is not a dp measure", argument="measures",
                                fix="use dp.len(), dp.count(), dp.sum(), dp.mean(), dp.var(), dp.std()")
            flat += items
    for name, m in named.items():
        if not isinstance(m, Measure):
            raise PlanError(f"{m!r} is not a dp measure", argument=name,
                            fix=f"e.g. .agg({name}=dp.len()); a raw column or Polars expression cannot be released")
        flat.append(m.alias(name))
    if not flat:
        raise PlanError("no measures given", argument="measures", fix="e.g. .agg(dp.len())")
    return flat


__all__ = ["AggregateQuery", "Aggregates", "confidence", "dry_run", "mechanisms", "run_aggregate"]
