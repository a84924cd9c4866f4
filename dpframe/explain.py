"""What ``explain()`` shows of an ``agg`` plan: the steps, the measures, the noise and the notes (reads no data).

The budget block and the text/JSON layout are the same for every query family
(:func:`dpframe.family.render`); this module builds the ``agg`` family's part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from dpframe.errors import plugin_failure
from dpframe.family import Explain
from dpframe.plan.nodes import Aggregate

if TYPE_CHECKING:
    from dpframe.mechanism import MechanismPlan
    from dpframe.planning import PhysicalPlan
    from dpframe.privacy_unit import PrivacyUnit

T = TypeVar("T")
NULLS = ("nulls: len counts rows; count/count_distinct/sum/mean/var/std ignore null and NaN values; "
         "±inf and out-of-range values are clamped to the bounds")


def error_sources(unit: PrivacyUnit, node: Aggregate, plan: PhysicalPlan) -> list[str]:
    """Every source of error besides the noise, from public parameters alone (free): what the ± omits.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"u": [1], "x": [1.0]})}, privacy_unit=dp.PrivacyUnit("u", max_rows=5),
        ...                   budget=dp.PureDP(1))
        >>> q = sess.table("t").agg(dp.sum("x", bounds=(0, 10)))
        >>> for line in error_sources(sess.privacy_unit, q.node, q.plan(dp.PureDP(1))):
        ...     print(line[:60])
        error: noise — the ± above (collect(..., ci=0.95) releases i
        error: contribution bounding — each unit keeps at most 5 row
        error: clipping — values outside the bounds are clamped to t

    """
    lines = ["error: noise — the ± above (collect(..., ci=0.95) releases intervals for it); it is the only error "
             "the ± and the intervals cover"]
    if unit.column is not None:
        rows = "the chosen max_rows" if unit.rows == "auto" else str(unit.rows)
        count = "the chosen max_groups" if unit.groups == "auto" else None if unit.auto else unit.groups_per_unit
        groups = f" in at most {count or 'max_rows'} groups" if node.grouped else ""
        lines.append(f"error: contribution bounding — each unit keeps at most {rows} rows{groups} (a "
                     "uniformly random subset); a unit with more loses rows, so counts and sums are biased low by "
                     "what it loses, not covered by the ±")
    clipped = [m.describe() for p in plan.plans for m in p.measures if m.bounds is not None]
    if clipped:
        lines.append(f"error: clipping — values outside the bounds are clamped to them ({'; '.join(clipped)}); "
                     "the bias this causes is not covered by the ±")
    if plan.selection is not None:
        lines.append("error: partition selection — groups with few privacy units are not released at all (see τ "
                     "above); released groups' values are unbiased by it")
    return lines


def temporal_key_hints(node: Aggregate, plan: PhysicalPlan) -> list[str]:
    """Why private keys on a date / datetime column rarely pass partition selection, and what to do instead.

    From the schema and the plan alone (never the data): one hint per ``Date`` / ``Datetime`` group-by column
    of a query whose keys come from partition selection.

    Example:
        >>> import datetime, polars as pl, dpframe as dp
        >>> data = pl.DataFrame({"u": [1], "day": [datetime.date(2024, 1, 1)]})
        >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.ApproxDP(1, 1e-6))
        >>> q = sess.table("t").group_by("day").agg(dp.len())
        >>> temporal_key_hints(q.node, q.plan(dp.ApproxDP(1, 1e-7)))[0][:60]
        "private keys on 'day' (Date): every distinct date is its own"

    """
    if plan.selection is None:
        return []
    schema = node.input.schema
    hints = []
    for c in node.by:
        dtype = schema[c]
        if dtype not in (pl.Date, pl.Datetime):
            continue
        kind, what, span = ("Date", "date", "date_range") if dtype == pl.Date else \
            ("Datetime", "timestamp", "datetime_range")
        hints.append(
            f"private keys on {c!r} ({kind}): every distinct {what} is its own group, released only when about τ "
            f"privacy units (see τ above) have rows on that very {what}, so daily or finer data often releases few "
            f"groups or none (an empty frame; collect(..., diagnostics=True) counts the groups suppressed). Pass "
            f"public keys: group_by({c!r}, keys=pl.{span}(start, end, '1d', eager=True)), or bin it first: "
            f"group_by(pl.col({c!r}).dt.truncate('1mo').alias('month')) (in SQL on DuckDB: "
            f"GROUP BY date_trunc('month', {c}))")
    return hints


def no_interval_notes(missing: Mapping[str, str]) -> list[str]:
    """What ``ci=`` does not give: one line per reason, naming the outputs (``missing``: output -> why).

    Example:
        >>> no_interval_notes({"x_median": "no interval", "y_median": "no interval"})
        ["ci= adds no interval columns for 'x_median', 'y_median': no interval"]

    """
    by_reason: dict[str, list[str]] = {}
    for name, why in missing.items():
        by_reason.setdefault(why, []).append(name)
    return [f"ci= adds no interval columns for {', '.join(repr(n) for n in names)}: {why}"
            for why, names in by_reason.items()]


def _shown(mechanism: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, reading what a mechanism's plan shows (plugin code: deferred tables, ``output_names()``).

    Any failure is the plugin's (a :class:`~dpframe.errors.PluginError` naming the mechanism, free: ``explain()``
    charges nothing), a sampler's refusal of the plugin's arguments included; a DPFrameError the plugin raises on
    purpose passes through (:func:`~dpframe.errors.plugin_failure`).
    """
    try:
        return call(*args)
    except Exception as e:
        failure = plugin_failure(e, f"mechanism {mechanism!r}", "in explain() (reading its plan's outputs, accuracy, "
                                 "noise and notes)", argument="mechanism",
                                 fix="a bug of the plugin that registers it: report it to its authors; collect() "
                                     "does not read these texts")
        if failure is None:
            raise
        raise failure from e


def _measure_rows(p: MechanismPlan) -> list[dict[str, Any]]:
    # The plugin's tables are read whole (a KeyError in a deferred one's build is its bug, not a missing text:
    # ``Mapping.get`` would read it as one), then looked up.
    described = {m.output_name: m.describe() for m in p.measures}
    accuracy, ci95 = dict(p.accuracy), dict(p.ci95)
    return [{"output": name, "measure": described.get(name, ", ".join(described.values())), "mechanism": p.mechanism,
             "accuracy": accuracy.get(name, ""), "ci95": ci95.get(name)} for name in p.output_names()]


def _noise_rows(p: MechanismPlan) -> list[dict[str, Any]]:
    return [{"plan": p.mechanism, "statistic": label, "noise": n.describe()}  # type: ignore[attr-defined]
            for label, n in p.noise.items()]


def explain_aggregate(unit: PrivacyUnit, node: Aggregate, plan: PhysicalPlan, backend: str) -> Explain:
    """The explanation of ``plan`` for ``node``: steps, measures (with accuracy), noise, notes."""
    steps = [n.describe() for n in node.lineage()[:-1]]
    steps.append(f"ContributionBound: {unit.describe()}")
    steps.append(node.describe())
    measures: list[dict[str, Any]] = []
    for p in plan.plans:
        measures += _shown(p.mechanism, _measure_rows, p)
    every = ([plan.selection] if plan.selection else []) + plan.plans
    noise = [row for p in every for row in _shown(p.mechanism, _noise_rows, p)]
    missing = {n: why for p in plan.plans for n, why in _shown(p.mechanism, p.no_intervals).items()}
    notes = [*plan.notes, *(n for p in every for n in _shown(p.mechanism, tuple, p.notes)),
             NULLS, *error_sources(unit, node, plan), *temporal_key_hints(node, plan), *no_interval_notes(missing)]
    width = max(len(m["output"]) for m in measures)
    lines = ["measures:",
             *(f"  {m['output']:<{width}}  {m['measure']}  via {m['mechanism']}  {m['accuracy']}" for m in measures),
             "noise:", *(f"  {n['statistic']}: {n['noise']}" for n in noise)]
    return Explain("dpframe query plan", tuple(steps), tuple(lines), tuple(notes),
                   {"backend": backend, "measures": measures, "noise": noise})
