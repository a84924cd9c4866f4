"""Running an aggregate plan: one statistics query, partition selection, then each mechanism's release.

The code that runs inside the release (:mod:`dpframe.release`) for ``agg`` queries, in the method chain
and in SQL. :func:`dry_run` first runs every mechanism on all-zero statistics, *before* charging, so a
broken plugin fails without spending budget.

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

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dpframe.backends.base import StatisticsRequest
from dpframe.errors import PluginError
from dpframe.mechanism import LIST_KINDS, Statistic, statistic_values
from dpframe.noise import RandomSource, SeededRandomSource
from dpframe.plan.nodes import Aggregate

if TYPE_CHECKING:
    from dpframe.planning import PhysicalPlan
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
        try:
            released = p.release(zeros, SeededRandomSource(0))
        except Exception as e:
            raise PluginError(f"mechanism {p.mechanism!r} fails on empty statistics ({type(e).__name__}: {e})",
                              argument="mechanism", fix="this is a plugin bug: report it") from e
        if set(released) != set(p.output_names()):
            raise PluginError(f"mechanism {p.mechanism!r} releases {sorted(released)}, declared "
                              f"{sorted(p.output_names())}", argument="mechanism", fix="this is a plugin bug")


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
        keep = pl.Series(np.asarray(plan.selection.release(inputs, rng)["__keep"], dtype=bool))
        stats = stats.filter(keep)
    columns: dict[str, Any] = {c: stats[c] for c in node.by}
    for p in plan.plans:
        released = p.release({s.key: values(s) for s in p.statistics}, rng)
        if set(released) != set(p.output_names()) or set(released) & set(columns):
            raise RuntimeError(f"mechanism {p.mechanism} released unexpected columns")  # plugin bug
        columns.update({name: pl.Series(name, values) for name, values in released.items()})
    return pl.DataFrame(columns)


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


__all__ = ["dry_run", "mechanisms", "run_aggregate"]
