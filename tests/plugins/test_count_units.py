"""``dp.count_units()`` in ``.agg()``: distinct privacy units per group (aggregates plugin).

Cost: hand-computed sensitivities (L1 = G for discrete Laplace, L2 = √G for discrete Gaussian, G = groups a
unit can touch after bounding); brute force over every removable unit of the L1/L∞ change of the exact
statistic; the kit's conformance suite; and an end-to-end audit on neighbours where the added unit touches
G = 2 groups, which catches noise calibrated to one group (L∞) instead of the whole vector.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates import AggregateMechanism

import dpframe as dp
from dpframe.mechanism import Statistic
from dpframe.testing import MechanismConformance, measure_context


class TestCountUnitsConformance(MechanismConformance):
    mechanism = AggregateMechanism()
    measures = [dp.count_units(), dp.len()]
    bad_measures = [dp.measure("count_units", "x"), dp.measure("count_units", bounds=(0, 1))]
    noise_outputs = {"count_units": "count(distinct units)", "len": "count(rows)"}


@pytest.mark.parametrize(("unit", "grouped", "share", "distribution", "scale", "sensitivity"), [
    (dp.PrivacyUnit("user", max_rows=3), True, dp.PureDP(1), "discrete_laplace", Fraction(3), Fraction(3)),
    (dp.PrivacyUnit("user", max_rows=3, max_groups=2), True, dp.PureDP(Fraction(1, 2)), "discrete_laplace",
     Fraction(4), Fraction(2)),
    (dp.PrivacyUnit("user", max_rows=5), False, dp.PureDP(2), "discrete_laplace", Fraction(1, 2), Fraction(1)),
    (dp.PrivacyUnit.row(), True, dp.PureDP(1), "discrete_laplace", Fraction(1), Fraction(1)),
    (dp.PrivacyUnit("user", max_rows=4), True, dp.ZCDP(Fraction(1, 2)), "discrete_gaussian", Fraction(4),
     Fraction(2)),                                               # σ² = (√4)² / (2ρ)
    (dp.PrivacyUnit("user", max_rows=9, max_groups=9), False, dp.ZCDP(1), "discrete_gaussian", Fraction(1, 2),
     Fraction(1)),
])
def test_cost_and_noise_hand_computed(unit, grouped, share, distribution, scale, sensitivity):
    ctx = measure_context(unit=unit, grouped=grouped, notion=share.notion)
    plan = AggregateMechanism().plan([dp.count_units()], ctx, share)
    assert plan.statistics == (Statistic("units"),)
    noise = plan.noise["count(distinct units)"]
    assert (noise.distribution, noise.scale, noise.sensitivity) == (distribution, scale, sensitivity)
    assert plan.cost == share


def test_zcdp_sensitivity_of_a_non_square_is_rounded_up():
    ctx = measure_context(unit=dp.PrivacyUnit("user", max_rows=3), grouped=True, notion="zcdp")
    noise = AggregateMechanism().plan([dp.count_units()], ctx, dp.ZCDP(1)).noise["count(distinct units)"]
    assert noise.sensitivity ** 2 > 3 and noise.sensitivity ** 2 - 3 < Fraction(1, 10**5)
    assert 3 / (2 * noise.scale) < 1                          # the true ρ is below the charged ρ = 1


def _units_vector(table: pl.DataFrame, unit: dp.PrivacyUnit, keys: list[str]) -> np.ndarray:
    sess = dp.Session({"t": table}, privacy_unit=unit, budget=dp.PureDP(1), seed=4)
    frame = sess.table("t")
    stats = sess._release.reader().statistics(frame._node, (Statistic("units"),), by=("g",),
                                              keys=pl.DataFrame({"g": keys}))
    return stats.sort("g")[Statistic("units").key].to_numpy()


@pytest.mark.parametrize("unit", [dp.PrivacyUnit("user", max_rows=4), dp.PrivacyUnit("user", max_rows=4, max_groups=2)])
def test_brute_force_sensitivity_over_every_unit(unit):
    rng = np.random.default_rng(1)
    keys = [f"k{i}" for i in range(6)]
    rows = [(u, keys[int(g)]) for u in range(25) for g in rng.integers(0, 6, int(rng.integers(1, 9)))]
    table = pl.DataFrame(rows, schema=["user", "g"], orient="row")
    full = _units_vector(table, unit, keys)
    declared = unit.groups_per_unit
    l1 = []
    for u in range(25):
        diff = full - _units_vector(table.filter(pl.col("user") != u), unit, keys)
        assert diff.min() >= 0 and diff.max() <= 1                # L∞ = 1, every coordinate moves the same way
        l1.append(int(diff.sum()))
    assert max(l1) == declared                                   # L1 = G, and it is attained


# ---------------------------------------------------------------------------------------------------------
# End-to-end audit: PAIRS pairs of groups; in D' one more unit with a row in both groups of every pair
PAIRS = 2_000
UNIT = dp.PrivacyUnit("user", max_rows=2)


def _tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    rows = [(p * 3 + j, f"g{2 * p + (j % 2)}") for p in range(PAIRS) for j in range(3)]
    base = pl.DataFrame(rows, schema={"user": pl.Int64, "g": pl.String}, orient="row")
    extra = pl.DataFrame([(10**6 + p, f"g{2 * p + s}") for p in range(PAIRS) for s in (0, 1)], schema=base.schema,
                         orient="row")
    return base, pl.concat([base, extra])


@pytest.fixture(scope="module")
def tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    return _tables()


def _pair_sums(out: pl.DataFrame) -> np.ndarray:
    out = out.with_columns(pair=pl.col("g").str.slice(1).cast(pl.Int64) // 2)
    return out.group_by("pair").agg(pl.col("count_units").sum())["count_units"].to_numpy()


def test_audit_on_a_unit_in_two_groups_catches_one_group_calibration(tables, audit_pair, group_sampler, shrunk_noise):
    """The classic mistake caught: count_units noise calibrated to one group (L∞ = 1) instead of L1 = G."""
    sampler = group_sampler(UNIT, [f"g{i}" for i in range(2 * PAIRS)], dp.count_units(), _pair_sums)
    audit_pair(sampler, tables, shrunk_noise(lambda ctx: ctx.unit.groups_per_unit))
