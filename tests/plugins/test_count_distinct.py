"""``dp.count_distinct(column)``: distinct values per group (aggregates plugin), on every backend and in SQL.

Cost: hand-computed noise (a count's: sensitivity m = ``max_rows``, since each kept row adds at most one new
value and the bounding law is per unit); brute force over every removable unit of the L1 change of the exact
statistic (≤ m, attained); the kit's conformance suite; an end-to-end audit on neighbours where the added unit
brings m new values to one group, which catches noise calibrated to one value per unit; the same released values
on the Polars and DuckDB backends and from SQL's ``COUNT(DISTINCT x)``; bad input refused, nothing charged.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates import AggregateMechanism
from polars.testing import assert_frame_equal

import dpframe as dp
from dpframe.mechanism import Statistic
from dpframe.testing import MechanismConformance, measure_context


class TestCountDistinctConformance(MechanismConformance):
    mechanism = AggregateMechanism()
    measures = [dp.count_distinct("x"), dp.len()]
    bad_measures = [dp.measure("count_distinct"), dp.measure("count_distinct", "x", bounds=(0, 1))]
    noise_outputs = {"x_count_distinct": "count(distinct x)", "len": "count(rows)"}


@pytest.mark.parametrize(("unit", "grouped", "share", "distribution", "scale", "sensitivity"), [
    (dp.PrivacyUnit("user", max_rows=3), True, dp.PureDP(1), "discrete_laplace", Fraction(3), Fraction(3)),
    (dp.PrivacyUnit("user", max_rows=3, max_groups=2), False, dp.PureDP(Fraction(1, 2)), "discrete_laplace",
     Fraction(6), Fraction(3)),
    (dp.PrivacyUnit.row(), True, dp.PureDP(2), "discrete_laplace", Fraction(1, 2), Fraction(1)),
    (dp.PrivacyUnit("user", max_rows=4), True, dp.ZCDP(Fraction(1, 2)), "discrete_gaussian", Fraction(16),
     Fraction(4)),                                               # σ² = 4² / (2ρ)
])
def test_cost_and_noise_hand_computed(unit, grouped, share, distribution, scale, sensitivity):
    ctx = measure_context(unit=unit, grouped=grouped, notion=share.notion)
    plan = AggregateMechanism().plan([dp.count_distinct("x")], ctx, share)
    assert plan.statistics == (Statistic("distinct", "x"),)
    noise = plan.noise["count(distinct x)"]
    assert (noise.distribution, noise.scale, noise.sensitivity) == (distribution, scale, sensitivity)
    assert plan.cost == share


def _distinct_vector(table: pl.DataFrame, unit: dp.PrivacyUnit, keys: list[str]) -> np.ndarray:
    sess = dp.Session({"t": table}, privacy_unit=unit, budget=dp.PureDP(1), seed=4)
    stats = sess._release.reader().statistics(sess.table("t")._node, (Statistic("distinct", "x"),), by=("g",),
                                              keys=pl.DataFrame({"g": keys}))
    return stats.sort("g")[Statistic("distinct", "x").key].to_numpy()


@pytest.mark.parametrize("unit", [dp.PrivacyUnit("user", max_rows=4), dp.PrivacyUnit("user", max_rows=4, max_groups=2)])
def test_brute_force_sensitivity_over_every_unit(unit):
    rng = np.random.default_rng(1)
    keys = [f"k{i}" for i in range(4)]
    rows = []
    for u in range(25):
        n = int(rng.integers(1, 9))
        rows += [(u, keys[int(g)], int(v)) for g, v in zip(rng.integers(0, 4, n), rng.integers(0, 12, n))]
    table = pl.DataFrame(rows, schema=["user", "g", "x"], orient="row")
    full = _distinct_vector(table, unit, keys)
    l1 = []
    for u in range(25):
        diff = full - _distinct_vector(table.filter(pl.col("user") != u), unit, keys)
        assert diff.min() >= 0                                  # removing a unit never adds a value
        l1.append(int(diff.sum()))
    assert max(l1) <= unit.max_rows
    unique = pl.DataFrame({"user": [99] * 4, "g": ["k0"] * 4, "x": [100, 101, 102, 103]})
    grown = pl.concat([table, unique])
    assert int((_distinct_vector(grown, unit, keys) - full).sum()) == unit.max_rows   # attained


# ---------------------------------------------------------------------------------------------------------
# End-to-end audit: in D' one more unit with max_rows rows, each a value no other row holds, in GROUPS groups
GROUPS = 2_000
UNIT = dp.PrivacyUnit("user", max_rows=2)


def _tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    base = pl.DataFrame({"user": [g * 2 + j for g in range(GROUPS) for j in range(2)],
                         "g": [f"g{g}" for g in range(GROUPS) for _ in range(2)],
                         "x": [0] * (2 * GROUPS)})
    extra = pl.DataFrame({"user": [10**6 + g for g in range(GROUPS) for _ in range(2)],
                          "g": [f"g{g}" for g in range(GROUPS) for _ in range(2)],
                          "x": [1 + j for _ in range(GROUPS) for j in range(2)]})
    return base, pl.concat([base, extra])


@pytest.fixture(scope="module")
def tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    return _tables()


def test_audit_on_a_unit_with_new_values_catches_one_value_calibration(tables, audit_pair, group_sampler,
                                                                       shrunk_noise):
    """The mistake caught: a distinct count calibrated as if one unit added one value (sensitivity 1, not m)."""
    sampler = group_sampler(UNIT, [f"g{i}" for i in range(GROUPS)], dp.count_distinct("x"),
                            lambda out: out["x_count_distinct"].to_numpy())   # each group: one draw of the noise
    audit_pair(sampler, tables, shrunk_noise(lambda ctx: ctx.unit.max_rows))


# ---------------------------------------------------------------------------------------------------------
DATA = pl.DataFrame({
    "u": [1, 1, 2, 2, 3, 3, 3, 4],
    "g": ["p", "p", "q", "q", "p", "q", "q", "p"],
    "s": ["a", "b", "a", "c", "d", "d", None, "a"],
    "f": [0.0, -0.0, float("nan"), 1.0, 2.0, 2.0, None, 5.5],
    "d": pl.Series(["2024-01-01", "2024-01-02", None, "2024-01-01", "2024-01-01", "2024-01-03", "2024-01-03",
                    "2024-01-04"]).str.to_date(),
})


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_exact_values_on_every_backend_and_from_sql(backend):
    """0.0 and −0.0 are one value; null and NaN are none; the same seed releases the same values everywhere."""
    def session(b: str) -> dp.Session:
        return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=5), budget=dp.PureDP(10**7),
                          seed=8, backend=b, public_keys={"t.g": ["p", "q"]})

    measures = [dp.count_distinct("s"), dp.count_distinct("f"), dp.count_distinct("d"), dp.count_distinct("u")]
    got = session(backend).table("t").group_by("g", keys=["p", "q"]).agg(*measures).collect(dp.PureDP(10**6))
    assert got.rows() == [("p", 3, 3, 3, 3), ("q", 3, 2, 2, 2)]
    noisy = session(backend).table("t").group_by("g", keys=["p", "q"]).agg(*measures).collect(dp.PureDP(1))
    same = session("polars").table("t").group_by("g", keys=["p", "q"]).agg(*measures).collect(dp.PureDP(1))
    assert_frame_equal(noisy, same)
    sql = session(backend).sql("SELECT g, COUNT(DISTINCT s), COUNT(DISTINCT f), COUNT(DISTINCT d) AS days, "
                               "COUNT(DISTINCT u) FROM t GROUP BY g").collect(dp.PureDP(1))
    assert sql.columns == ["g", "s_count_distinct", "f_count_distinct", "days", "count_units"]
    assert sql.drop("count_units").rows() == noisy.drop("u_count_distinct").rename({"d_count_distinct": "days"}).rows()


def test_bad_input_is_refused_before_anything_is_charged():
    sess = dp.Session({"t": DATA.with_columns(l=pl.concat_list("f", "f"))},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(1))
    t = sess.table("t")
    with pytest.raises(dp.SchemaError, match="unknown column 'nope'"):
        t.agg(dp.count_distinct("nope")).collect(dp.PureDP(0.5))
    with pytest.raises(dp.SchemaError, match="count_distinct\\(\\) of a List"):
        t.agg(dp.count_distinct("l")).collect(dp.PureDP(0.5))
    with pytest.raises(dp.ArgumentError, match="takes no bounds"):
        t.agg(dp.measure("count_distinct", "s", bounds=(0, 1))).collect(dp.PureDP(0.5))
    with pytest.raises(dp.ArgumentError, match="needs a column"):
        t.agg(dp.measure("count_distinct")).collect(dp.PureDP(0.5))
    assert sess.history().height == 0
