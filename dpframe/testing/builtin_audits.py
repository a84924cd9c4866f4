"""Audit specs of the built-in mechanisms (registered on import) and of deliberately broken ones.

Registered: ``len`` and ``count_units`` (grouped by public keys), ``count``, ``count_distinct``, ``sum``, ``mean``,
``var``/``std``, partition selection (private keys) and the median (``quantile`` plugin) — each under
a pure ε budget and under a zCDP ρ budget (discrete Gaussian noise;
audited as (ε(δ = 10⁻³), 10⁻³)-DP). The query-level specs (top-k, learning, bounds, sampling, the
interactive mechanisms) are in :mod:`dpframe.testing.query_audits`, registered on import of this module;
plugins register theirs through the ``dpframe_audits`` hook (the example ``histogram`` plugin, multi-label
PATE in ``dpframe_topk``), loaded by :func:`~dpframe.testing.registered_audits`.
Each release-level spec is
audited on the adversarial pairs of :func:`~dpframe.testing.registry.adversarial_pairs`: the empty
dataset vs one unit, one added unit of ``max_rows`` rows at the ends of the bounds and far outside
them (±inf, ±1e300: clamping must hold), and an added unit with 3 × ``max_rows`` rows (bounding must
cut it). Partition selection is audited where it can break: a group absent from D vs present with
one unit (the δ part: the key must stay hidden), and τ − 1 vs τ and τ vs τ + 1 units (the ε part).

:func:`broken_specs` are the same audits of mechanisms that claim more than they deliver
(:class:`~dpframe.testing.registry.Overclaiming`: noise scale halved, or a selection threshold
meant for 50 × δ): the audit must flag
each of them.

To audit a new mechanism, register a spec (see ``docs/guarantees.md``)::

    register_audit(AuditSpec("quantile", frozenset({"quantile"}), dp.PureDP(1), pairs, sampler))

Example:
    >>> sorted({k for s in BUILTIN for k in s.kinds})[:5]
    ['count', 'count_distinct', 'count_units', 'len', 'mean']

"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction

import polars as pl

from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP
from dpframe.measures import Measure, count, count_distinct, count_units, len, mean, median, std, sum, var
from dpframe.plugin import plugin_host
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.harness import default_table
from dpframe.testing.queries import _session
from dpframe.testing.registry import (
    AuditSpec,
    Neighbours,
    Overclaiming,
    adversarial_pairs,
    agg_sampler,
    register_audit,
)

__all__ = ["BUILTIN", "broken_specs", "selection_pairs"]

UNIT = PrivacyUnit("user", max_rows=3)
KEYS = ["a", "b", "c"]
FAR = [math.inf, -math.inf, 1e300, -1e300]
ONE = PureDP(1)


def _agg(name: str, kinds: set[str], measures: list[Measure], values: Mapping[str, Sequence[object]], *,
         budget: Budget = ONE, grouped: bool = False, min_power: float = 0.0, fast: bool = True,
         mechanisms: tuple[object, ...] = (), samples: int = 20_000, units: int = 45) -> AuditSpec:
    base = default_table(measures, unit=UNIT, units=units)
    by = ["group"] if grouped else []
    sampler = agg_sampler(measures, UNIT, by=by, keys=KEYS if grouped else None, group="a",
                          mechanisms=mechanisms)
    return AuditSpec(name, frozenset(kinds), budget, lambda: adversarial_pairs(base, UNIT, values), sampler,
                     min_power=min_power, fast=fast, samples=samples, slow_samples=10 * samples,
                     queries=frozenset({"GroupBy.agg" if grouped else "Frame.agg"}))


def _specs(mechanisms: tuple[object, ...] = ()) -> list[AuditSpec]:
    bounded = {"x": [100.0, -50.0, *FAR]}
    return [
        _agg("len (group_by public keys)", {"len"}, [len()], {"group": ["a"]}, grouped=True, min_power=0.5,
             mechanisms=mechanisms),
        _agg("count", {"count"}, [count("x")], {"x": [100.0, math.inf]}, min_power=0.5, mechanisms=mechanisms),
        _agg("count_distinct", {"count_distinct"}, [count_distinct("x")], {"x": [1234.5, math.nan]},
             mechanisms=mechanisms),
        _agg("sum", {"sum"}, [sum("x", bounds=(-50, 100))], bounded, min_power=0.5, mechanisms=mechanisms),
        _agg("sum (zCDP)", {"sum"}, [sum("x", bounds=(-50, 100))], {"x": [100.0, -50.0]},
             budget=ZCDP(Fraction(1, 2)), mechanisms=mechanisms),
        _agg("mean", {"mean"}, [mean("x", bounds=(-50, 100))], bounded, mechanisms=mechanisms),
        _agg("var / std", {"var", "std"}, [var("x", bounds=(-10, 5)), std("x", bounds=(-10, 5), ddof=0)],
             {"x": [-10.0, 5.0, *FAR]}, mechanisms=mechanisms),
    ]


def _zcdp_specs() -> list[AuditSpec]:
    """The discrete-Gaussian (zCDP) form of every aggregate, audited as (ε(δ = 10⁻³), 10⁻³)-DP."""
    rho = ZCDP(Fraction(1, 2))
    bounded = {"x": [100.0, -50.0, *FAR]}
    return [
        _agg("len (zCDP, group_by public keys)", {"len"}, [len()], {"group": ["a"]}, grouped=True, budget=rho,
             min_power=0.3),
        _agg("count (zCDP)", {"count"}, [count("x")], {"x": [100.0, math.inf]}, budget=rho, min_power=0.3),
        _agg("count_distinct (zCDP)", {"count_distinct"}, [count_distinct("x")], {"x": [1234.5]}, budget=rho),
        _agg("mean (zCDP)", {"mean"}, [mean("x", bounds=(-50, 100))], bounded, budget=rho, min_power=0.2),
        _agg("var / std (zCDP)", {"var", "std"}, [var("x", bounds=(-10, 5)), std("x", bounds=(-10, 5), ddof=0)],
             {"x": [-10.0, 5.0, *FAR]}, budget=rho, min_power=0.1),
        _agg("count_units (zCDP, group_by public keys)", {"count_units"}, [count_units()], {"group": ["a"]},
             grouped=True, budget=rho, min_power=0.15),
        _agg("median (zCDP, quantile plugin)", {"quantile"}, [median("x", bounds=(0, 100))],
             {"x": [0.0, 100.0, math.inf]}, budget=rho, min_power=0.1, samples=2_000, units=12),
    ]


def selection_pairs(unit: PrivacyUnit, tau: int, *, base_units: int = 30) -> list[Neighbours]:
    """Pairs for partition selection with threshold ``tau`` on group ``"s"`` (other groups: ``"a"``).

    Example:
        >>> [p.label for p in selection_pairs(PrivacyUnit("user"), 7)]
        ['group absent vs one unit', '6 vs 7 units', '7 vs 8 units']

    """
    column = unit.column
    assert column is not None

    def table(in_s: int) -> pl.DataFrame:
        rows = [(u, "a") for u in range(base_units)] + [(base_units + u, "s") for u in range(in_s)]
        return pl.DataFrame(rows, schema={column: pl.Int64, "group": pl.String}, orient="row")

    return [Neighbours("group absent vs one unit", table(0), table(1)),
            Neighbours(f"{tau - 1} vs {tau} units", table(tau - 1), table(tau)),
            Neighbours(f"{tau} vs {tau + 1} units", table(tau), table(tau + 1))]


SELECTION_BUDGET = ApproxDP(2, Fraction(1, 100))


def _selection(mechanisms: tuple[object, ...] = (), budget: Budget = SELECTION_BUDGET) -> AuditSpec:
    """Partition selection at (2, 10⁻²) (or a (ρ, δ) budget): δ this large makes the δ part measurable."""
    unit = PrivacyUnit("user")
    sampler = agg_sampler([len()], unit, by=["group"], group="s", mechanisms=mechanisms)

    def pairs() -> list[Neighbours]:
        stand_in = selection_pairs(unit, 1)[1].neighbour
        return selection_pairs(unit, _threshold(stand_in, unit, budget, mechanisms))

    name = "partition selection" + (" (zCDP)" if budget.notion == "zcdp" else "")
    return AuditSpec(name, frozenset({"partition_selection"}), budget, pairs, sampler,
                     min_power=0.15 if budget.notion == "zcdp" else 0.3,
                     queries=frozenset({"GroupBy.agg"}))


def _threshold(table: pl.DataFrame, unit: PrivacyUnit, budget: Budget, mechanisms: tuple[object, ...]) -> int:
    plan = _session(table, unit, budget, mechanisms, 0).table("t").group_by("group").agg(len()).plan(budget)
    return int(plan.selection.threshold)


def _median() -> AuditSpec:
    """The exponential-mechanism quantile (per-group releases are slower: 5 000 runs, 12 units)."""
    return _agg("median (quantile plugin)", {"quantile"}, [median("x", bounds=(0, 100))],
                {"x": [0.0, 100.0, math.inf]}, min_power=0.3, samples=5_000, units=12)


def _count_units() -> AuditSpec:
    """Distinct units per group: noise for L1 = G = 3 groups, so one group's change of 1 shows ε/3 at best."""
    return _agg("count_units (group_by public keys)", {"count_units"}, [count_units()], {"group": ["a"]},
                grouped=True, min_power=0.2)


BUILTIN: list[AuditSpec] = [register_audit(s) for s in [
    *_specs(), _count_units(), _selection(), _median(), *_zcdp_specs(),
    _selection(budget=ZCDP(Fraction(1, 2), Fraction(1, 100)))]]

from dpframe.testing import query_audits  # noqa: E402  (registers the query-level specs after the agg ones)

QUERY: list[AuditSpec] = query_audits.QUERY_SPECS


def broken_specs() -> list[AuditSpec]:
    """Audits of deliberately broken built-ins; each must report a violation.

    Example:
        >>> [s.name for s in broken_specs()][:2]
        ['BROKEN len (group_by public keys)', 'BROKEN count']

    """
    host = plugin_host()
    halved = (Overclaiming(host.mechanism_for("len", "pure")),)
    specs = [s for s in _specs(halved) if s.budget.notion == "pure" and s.min_power]
    low_threshold = (Overclaiming(host.mechanism_for("partition_selection", "approx"), factor=1, delta_factor=50),)
    out = [*specs, _selection(low_threshold)]
    return [replace(s, name="BROKEN " + s.name) for s in out]
