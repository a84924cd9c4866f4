"""The privacy audits of this plugin, registered through the ``dpframe_audits`` hook.

dpframe's audit suite (``dpframe.testing.registered_audits``) calls :func:`specs` only when an audit
runs, so importing the plugin never loads the test kit. Three specs: the ``histogram`` mechanism under
a pure ε budget and under a zCDP ρ budget (audited as (ε(δ = 10⁻³), 10⁻³)-DP), on the adversarial pairs
of :func:`dpframe.testing.adversarial_pairs` (one unit of ``max_rows`` rows on a bin edge, at the top
bound and outside the bounds); and the ``linear_regression`` family end to end through ``collect``.

Example:
    >>> [s.name for s in specs()]
    ['histogram (example plugin)', 'histogram (zCDP, example plugin)', 'linear_regression (example plugin)']

"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import polars as pl
from dpframe.budgets import ZCDP, Budget, PureDP
from dpframe.measures import measure
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing import AuditSpec, Neighbours, adversarial_pairs, agg_sampler, default_table, query_sampler

__all__ = ["specs"]

UNIT = PrivacyUnit("user", max_rows=3)
HISTOGRAM = measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))
EDGE_VALUES = {"age": [10.0, 99.5, 100.0, -5.0]}


def _histogram(name: str, budget: Budget, min_power: float) -> AuditSpec:
    base = default_table([HISTOGRAM], unit=UNIT)
    sampler = agg_sampler([HISTOGRAM], UNIT, group="a")
    return AuditSpec(name, frozenset({"histogram"}), budget, lambda: adversarial_pairs(base, UNIT, EDGE_VALUES),
                     sampler, min_power=min_power, fast=True, samples=20_000, slow_samples=200_000,
                     queries=frozenset({"Frame.agg"}))


def _ints(values: Sequence[int], labels: Sequence[int]) -> pl.DataFrame:
    return pl.DataFrame({"user": range(len(values)), "x": values, "y": labels},
                        schema={"user": pl.Int64, "x": pl.Int64, "y": pl.Int64})


def _regression() -> AuditSpec:
    """Few rows at ε = 4: one mislabelled row at the low end, or one positive row at the high end."""
    values = [3, 4, 5, 10, 11, 12] * 3
    labels = [int(v <= 7) for v in values]
    base = _ints(values, labels)
    unit = PrivacyUnit("user", max_rows=1)

    def pairs() -> list[Neighbours]:
        return [Neighbours("+1 mislabelled row at the low end", base, _ints([*values, 0], [*labels, 0])),
                Neighbours("+1 positive row at the high end", base, _ints([*values, 15], [*labels, 1]))]

    sampler = query_sampler(lambda s: s.table("t").linear_regression(["x"], "y", bounds={"x": (0, 15), "y": (0, 1)}),
                            unit, features=lambda m: {"slope": m.coefficients["x"], "intercept": m.intercept,
                                                      "rows": m.rows})
    return AuditSpec("linear_regression (example plugin)", frozenset(), PureDP(4), pairs, sampler, samples=400,
                     slow_samples=4_000, fast=False, queries=frozenset({"Frame.linear_regression"}),
                     notions=frozenset(), fast_pairs=1,
                     max_samples=4_000, notes="five noisy sums (ε/5 each) and a least-squares fit: a single-output "
                                              "test sees a part of the claimed ε")


def specs() -> list[AuditSpec]:
    """Return the plugin's audit specs (see the module docstring)."""
    return [_histogram("histogram (example plugin)", PureDP(1), 0.5),
            _histogram("histogram (zCDP, example plugin)", ZCDP(Fraction(1, 2)), 0.3), _regression()]
