"""Tests of the histogram plugin: dpframe's conformance suite plus histogram-specific checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import dpframe as dp
import numpy as np
import polars as pl
import pytest
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext
from dpframe.testing import (
    CountingRandomSource,
    MechanismConformance,
    audit_release,
    check_refused,
    exact_statistics,
    measure_context,
    neighbouring_tables,
)

from dpframe_histogram import HistogramMechanism, bin_columns, parse_edges
from dpframe_histogram.mechanism import HistogramPlan

AGE = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))
HALVES = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 50, 100)).alias("age_half")
FINE = dp.measure("histogram", "x", bounds=(-1, 1), edges=(-1, -0.5, 0, 0.25, 1))

BAD = [
    dp.measure("histogram", "age", bounds=(0, 100), edges=(5,)),                 # one edge: no bin
    dp.measure("histogram", "age", bounds=(0, 100), edges=()),
    dp.measure("histogram", "age", bounds=(0, 100)),                             # no edges
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 65, 18, 100)),     # not sorted
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 18, 100)),     # repeated edge
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, math.inf)),        # not finite
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, math.nan)),
    dp.measure("histogram", "age", bounds=(0, 100), edges=(-1, 50)),             # outside bounds
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 101)),
    dp.measure("histogram", "age", bounds=(0, 100), edges="0,18,100"),           # not a sequence
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, "18", 100)),       # not a number
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, True)),
    dp.measure("histogram", "age", edges=(0, 18, 100)),                          # no bounds
    dp.measure("histogram", "name", bounds=(0, 100), edges=(0, 18, 100)),        # non-numeric column
    dp.measure("histogram", "nope", bounds=(0, 100), edges=(0, 18, 100)),        # unknown column
    dp.measure("histogram", bounds=(0, 100), edges=(0, 18, 100)),                # no column
    dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 100), bins=3),  # unknown option
]


class TestHistogram(MechanismConformance):
    mechanism = HistogramMechanism()
    measures = [AGE, HALVES]
    bad_measures = BAD
    neighbour_values = {"age": [10.0, 99.5]}


class TestHistogramFloatEdges(MechanismConformance):
    mechanism = HistogramMechanism()
    privacy_unit = dp.PrivacyUnit("user", max_rows=5)
    measures = [FINE]
    bad_measures = [dp.measure("histogram", "x", bounds=(-1, 1), edges=(-1, 0.5, 0.25))]


def test_edges_errors_name_edges() -> None:
    ctx = measure_context()
    for m in BAD[:12]:
        err = check_refused(HistogramMechanism(), m, ctx, dp.PureDP(1))
        assert isinstance(err, dp.BoundsError) and err.argument == "edges", (m.describe(), err)


def test_columns_and_names() -> None:
    assert bin_columns(AGE) == ["age_hist_0_18", "age_hist_18_65", "age_hist_65_100"]
    assert bin_columns(HALVES) == ["age_half_0_50", "age_half_50_100"]
    assert bin_columns(FINE) == ["x_hist_-1_-0.5", "x_hist_-0.5_0", "x_hist_0_0.25", "x_hist_0.25_1"]
    assert parse_edges([0, 0.5]) == (Fraction(0), Fraction(1, 2))
    assert parse_edges([np.float32(0), np.float32(0.5), np.float64(1)]) == (Fraction(0), Fraction(1, 2), Fraction(1))


def test_one_share_covers_all_bins() -> None:
    ctx = measure_context(max_rows=4)
    wide = dp.measure("histogram", "age", bounds=(0, 100), edges=tuple(range(0, 101, 5)))   # 20 bins
    for m in (AGE, wide):
        plan = HistogramMechanism().plan([m], ctx, dp.PureDP(Fraction(1, 2)))
        (noise, columns), = plan.layout
        assert noise.distribution == "discrete_laplace" and noise.scale == 8 and noise.sensitivity == 4
        assert plan.cost == dp.PureDP(Fraction(1, 2))
    plan = HistogramMechanism().plan([wide], ctx, dp.ZCDP(Fraction(1, 8)))
    (noise, _), = plan.layout
    assert noise.distribution == "discrete_gaussian" and noise.scale == Fraction(16, 2 * Fraction(1, 8))


def test_two_measures_split_the_share() -> None:
    plan = HistogramMechanism().plan([AGE, HALVES], measure_context(max_rows=2), dp.PureDP(1))
    assert [n.scale for n, _ in plan.layout] == [4, 4]
    assert plan.cost == dp.PureDP(1)


def test_colliding_columns_are_refused_at_plan_time() -> None:
    other = dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 30))     # age_hist_0_18 again
    with pytest.raises(dp.PlanError, match="age_hist_0_18"):
        HistogramMechanism().plan([AGE, other], measure_context(), dp.PureDP(1))


def test_release_is_exact_counts_plus_noise() -> None:
    table = pl.DataFrame({"user": [1, 2, 3, 4, 5, 6], "age": [0.0, 17.9, 18.0, 64.0, 65.0, 100.0]})
    unit = dp.PrivacyUnit("user")
    plan = HistogramMechanism().plan([AGE], measure_context(unit=unit, schema=table.schema), dp.PureDP(1))
    stats = exact_statistics(table, unit, plan.statistics)
    assert [int(stats[s.key][0]) for s in plan.statistics] == [2, 2, 1]       # 100 is in no bin
    out = plan.release({k: np.repeat(v, 20_000) for k, v in stats.items()}, CountingRandomSource(0))
    assert abs(out["age_hist_0_18"].mean() - 2) < 0.1 and out["age_hist_0_18"].dtype == np.int64


def test_audit_catches_a_histogram_charged_per_bin_wrongly() -> None:
    """A histogram whose noise ignores max_rows (Δ = 1 instead of m) is caught by the audit."""
    ctx = measure_context(max_rows=3)
    share = dp.PureDP(1)
    good = HistogramMechanism().plan([AGE], ctx, share)

    class Sloppy(HistogramMechanism):
        def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: dp.Budget) -> HistogramPlan:
            return super().plan(measures, measure_context(max_rows=1), share)

    bad = Sloppy().plan([AGE], ctx, share)
    table = pl.DataFrame({"user": list(range(30)), "age": [float(3 * i) for i in range(30)]})
    unit = dp.PrivacyUnit("user", max_rows=3)
    neighbour = neighbouring_tables(table, unit, {"age": 70.0})
    a, b = exact_statistics(table, unit, good.statistics), exact_statistics(neighbour, unit, good.statistics)
    assert audit_release(good, a, b, samples=20_000).passed
    caught = audit_release(bad, a, b, samples=20_000)
    assert not caught.passed and caught.epsilon_lower_bound > 1.5, caught


def test_plan_declares_one_privacy_curve_per_histogram() -> None:
    from dpframe import accounting as acc

    ctx = measure_context(max_rows=2)
    pure = HistogramMechanism().plan([AGE, HALVES], ctx, dp.PureDP(1))
    assert pure.privacy is not None
    assert [c.label for c in pure.privacy] == ["ε-DP(ε=0.5)", "ε-DP(ε=0.5)"]     # m/t = 2/4 each
    zc = HistogramMechanism().plan([AGE], measure_context(max_rows=2, notion="zcdp"), dp.ZCDP(Fraction(1, 8)))
    assert zc.privacy is not None
    (curve,) = zc.privacy
    assert curve.rho == pytest.approx(0.125) and curve.rdp_at([2.0, 8.0]).tolist() == pytest.approx([0.25, 1.0])
    # an RDP session charges the declared curves: hand value of the RR-dominated ε-DP curve at α = 2
    data = pl.DataFrame({"u": range(50), "age": [float(i) for i in range(50)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(5, 1e-6),
                      accountant="rdp", seed=0)
    charge = sess.table("t").agg(AGE).cost(dp.PureDP(0.5))
    p = math.exp(0.5) / (1 + math.exp(0.5))
    want = math.log(p**2 / (1 - p) + (1 - p) ** 2 / p)
    from dpframe.accounting.rdp import FILTER_ORDERS

    assert isinstance(charge, acc.RDPCharge)                 # an RDP session's charge, not a dp budget
    assert charge.values[list(FILTER_ORDERS).index(2.0)] == pytest.approx(want, rel=1e-12)
    assert charge.labels == (acc.pure(0.5).label,)
