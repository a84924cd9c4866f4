"""``collect(..., diagnostics=True)``: noisy counts of what bounding, clipping and selection left out.

A stated share of the query's budget (:data:`~dpframe.tuning.shares.DIAGNOSTICS_SHARE`) is split evenly
among the counts below; each gets discrete Laplace (ε) or discrete Gaussian (ρ) noise calibrated to its
sensitivity under add/remove of one unit (after the query's contribution bounds, m = ``max_rows``,
g = the groups a unit may keep):

* ``units that lost rows``: units with rows dropped by bounding (one unit: 0 or 1; Δ = 1);
* ``rows dropped by bounding``: each unit's dropped rows, counted up to m (Δ = m; a unit losing more
  than m rows counts m, so this is a lower bound);
* ``<output> values clipped``: kept rows whose value lies outside the measure's bounds (Δ = m);
* ``groups suppressed by selection`` (private keys): distinct groups among the kept rows (Δ = g), less
  the groups released (public), floored at 0.

Bounding is random: these reads bound contributions again with a fresh seed, so they describe the
same law as the release, not its very rows. The table also lists the bounds the query chose (released
by its tuning stage: free).

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"u": [i % 20 for i in range(400)], "x": [float(i % 9) for i in range(400)]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=10), budget=dp.PureDP(10), seed=0)
    >>> out, diag = sess.table("t").agg(dp.sum("x", bounds=(0, 5))).collect(dp.PureDP(10), diagnostics=True)
    >>> diag["diagnostic"].to_list()
    ['units that lost rows', 'rows dropped by bounding', 'x_sum values clipped']

"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dpframe.budgets import Budget, describe, make
from dpframe.measures import Measure, auto_bounds
from dpframe.mechanism import Noise, Statistic
from dpframe.plan.nodes import Aggregate
from dpframe.planning import first
from dpframe.tuning.choose import Chosen
from dpframe.tuning.shares import Shares

if TYPE_CHECKING:
    from dpframe.noise import RandomSource
    from dpframe.privacy_unit import PrivacyUnit
    from dpframe.release import PrivateReader


@dataclass(frozen=True)
class Diagnosed:
    """A released frame and its diagnostics: ``frame, diagnostics = q.collect(budget, diagnostics=True)``.

    ``diagnostics`` has one row per count: ``diagnostic``, ``value`` (noisy), ``ci95`` (the noise's 95%
    half-width; null for the chosen bounds, which are released as they are) and ``detail``.
    """

    frame: pl.DataFrame
    diagnostics: pl.DataFrame

    def __iter__(self) -> Iterator[pl.DataFrame]:
        return iter((self.frame, self.diagnostics))


def counted(unit_is_row: bool, node: Aggregate) -> bool:
    """Whether ``node`` has anything to diagnose (bounded units, clipped measures or private keys).

    A measure with ``bounds="auto"`` is clipped too, at the bounds the query chooses when it runs.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> from dpframe.planning import agg_node
        >>> schema = pl.Schema({"x": pl.Float64})
        >>> [counted(True, agg_node(schema, m)) for m in (dp.len(), dp.mean("x", bounds="auto"))]
        [False, True]

    """
    return not unit_is_row or any(m.bounds is not None or auto_bounds(m) for m in node.measures) or (
        node.grouped and node.keys is None)


def noises(unit: PrivacyUnit, node: Aggregate, share: Budget) -> list[Noise]:
    """The noise of each count :func:`diagnose` releases, in its order: public (the unit's numbers, the query's shape).

    A BudgetError when one is beyond the exact sampler's range: :func:`~dpframe.tuning.stage.plan_staged`
    calls it at the largest bounds the query may choose, before anything is charged.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> from dpframe.planning import agg_node
        >>> node = agg_node(pl.Schema({"x": pl.Float64}), dp.sum("x", bounds=(0, 5)))
        >>> [n.sensitivity for n in noises(dp.PrivacyUnit("u", max_rows=10), node, dp.PureDP(1))]
        [Fraction(1, 1), Fraction(10, 1), Fraction(10, 1)]

    """
    rows = Fraction(unit.max_rows)
    sensitivities = [Fraction(1), rows] if unit.column is not None else []
    sensitivities += [rows] * len(_clipped(node))
    if node.grouped and node.keys is None:
        sensitivities.append(Fraction(unit.groups_per_unit))
    part = make(share.notion, first(share) / max(len(sensitivities), 1))
    return [Noise.calibrate(sensitivity, part) for sensitivity in sensitivities]


def _clipped(node: Aggregate) -> dict[str, Measure]:
    """The measures whose values are clipped, by output name."""
    return {m.output_name: m for m in node.measures if m.bounds is not None and m.column is not None}


def diagnose(bounded: PrivateReader, node: Aggregate, chosen: Chosen, shares: Shares, released: int,
             rng: RandomSource) -> pl.DataFrame:
    """The diagnostics table (reads the private rows again; runs inside the query's reservation)."""
    unit = chosen.unit
    exact: list[tuple[str, int, str]] = []      # name, exact value, detail (the noises: :func:`noises`)
    if unit.column is not None:
        by = by_unit_and_group(unit.column, node.by)
        kept = _by_unit(bounded.statistics(node.input, (Statistic("rows"),), by=by), node)
        every = _by_unit(bounded.statistics(node.input, (Statistic("rows"),), by=by, bound=False), node)
        lost = every.join(kept, on=unit.column, how="left", suffix="_kept").fill_null(0)
        dropped = (lost["__rows"] - lost["__rows_kept"]).to_numpy()
        exact.append(("units that lost rows", int((dropped > 0).sum()), "Δ = 1"))
        exact.append(("rows dropped by bounding", int(np.minimum(dropped, unit.max_rows).sum()),
                      f"each unit counted up to max_rows = {unit.max_rows}; Δ = {unit.max_rows}"))
    clipped = _clipped(node)
    if clipped:
        stats: dict[str, tuple[Statistic, Statistic]] = {}
        for name, m in clipped.items():
            assert m.bounds is not None
            upper = Fraction(float(np.nextafter(float(m.bounds[1]), np.inf)))
            stats[name] = (Statistic("nonnull", m.column), Statistic("indicator_sum", m.column, m.bounds[0], upper))
        read = bounded.statistics(node.input, tuple(dict.fromkeys(s for pair in stats.values() for s in pair)),
                                  by=node.by, keys=node.keys)
        for name, (values, inside) in stats.items():
            exact.append((f"{name} values clipped", int(read[values.key].sum()) - int(read[inside.key].sum()),
                          f"kept rows outside the bounds; Δ = {unit.max_rows}"))
    if node.grouped and node.keys is None:
        groups = bounded.statistics(node.input, (Statistic("rows"),), by=node.by).height
        exact.append(("groups suppressed by selection", groups - released,
                      f"distinct groups after bounding less the {released} released; Δ = {unit.groups_per_unit}"))
    assert shares.diagnostics is not None
    rows: list[dict[str, Any]] = [{"diagnostic": name, "value": value, "ci95": None, "detail": "chosen privately"}
                                  for name, value in chosen.rows()]
    for (name, value, detail), noise in zip(exact, noises(unit, node, shares.diagnostics), strict=True):
        noisy = max(value + int(noise.sample(1, rng)[0]), 0)
        rows.append({"diagnostic": name, "value": float(noisy), "ci95": noise.ci95(),
                     "detail": f"{detail}; {describe(noise.cost())}"})
    return pl.DataFrame(rows, schema={"diagnostic": pl.String, "value": pl.Float64, "ci95": pl.Float64,
                                      "detail": pl.String})


def by_unit_and_group(column: str, by: tuple[str, ...]) -> tuple[str, ...]:
    """The columns of rows per unit and group: the unit ``column``, then the group keys ``by`` less it.

    A query may group by the unit column itself: ``("u", "u")`` failed on every dataset, after the query's charge.

    Example:
        >>> by_unit_and_group("u", ("u",)), by_unit_and_group("u", ("g", "u", "h"))
        (('u',), ('u', 'g', 'h'))

    """
    return tuple(dict.fromkeys((column, *by)))


def _by_unit(frame: pl.DataFrame, node: Aggregate) -> pl.DataFrame:
    """Rows per unit (``frame``: rows per unit and group), public keys only when the query has them."""
    unit = frame.columns[0]
    if node.keys is not None:
        frame = frame.join(node.keys, on=list(node.by), how="semi", nulls_equal=True)
    return frame.group_by(unit).agg(pl.col("__rows").sum())


__all__ = ["Diagnosed", "by_unit_and_group", "counted", "diagnose", "noises"]
