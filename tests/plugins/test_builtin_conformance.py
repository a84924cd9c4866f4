"""The plugin author kit run on the built-in mechanisms, plus end-to-end privacy audits through a session.

* The conformance suite (``dpframe.testing.MechanismConformance``) on ``AggregateMechanism`` and
  ``PartitionSelection``.
* The empirical privacy test of ``count`` and ``sum`` on neighbouring datasets, end to end through a
  seeded ``dp.Session`` (planner, Polars backend with contribution bounding, release).
* Deliberately broken mechanisms (the aggregate mechanism with its noise scale halved) that the kit
  must catch: the cost/calibration check when the halved noise is declared, the distribution test and
  the audit when it is hidden.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates import AggregateMechanism, PartitionSelection
from dpframe_aggregates.aggregates import AggregatePlan
from scipy import stats as sps

import dpframe as dp
from dpframe.measures import Measure
from dpframe.mechanism import Noise
from dpframe.testing import (
    AuditResult,
    CountingRandomSource,
    MechanismConformance,
    audit_release,
    audit_sampler,
    check_refused,
    epsilon_lower_bound,
    measure_context,
    noise_cdf,
    pin_mechanisms,
)

# --------------------------------------------------------------------------------------------------
# Conformance of the built-ins


class TestAggregateConformance(MechanismConformance):
    mechanism = AggregateMechanism()
    # the sum's bounds differ from the mean's: a sum of its own (with the mean's bounds it would be computed from
    # the mean's centred sum and count, see test_a_sum_next_to_a_mean_is_their_post_processing)
    measures = [dp.len(), dp.count("x"), dp.sum("x", bounds=(0, 50)), dp.mean("x", bounds=(0, 100))]
    bad_measures = [
        dp.sum("nope", bounds=(0, 1)),                          # unknown column
        dp.sum("name", bounds=(0, 1)),                          # non-numeric column
        dp.mean("name", bounds=(0, 1)),
        dp.measure("sum", "x", bounds=(-1e302, 1e302)),         # bounds too large to compute with
        dp.var("x", bounds=(0, 1e160)),                         # squared bound too large
        dp.measure("sum", "x"),                                 # no bounds
        dp.measure("len", "x"),                                 # len takes no column
        dp.measure("mean", "x", bounds=(0, 1), ddof=3),         # unknown option for mean
    ]
    noise_outputs = {"len": "count(rows)", "x_count": "count(x not null)", "x_sum": "Σ (clamp(x))"}


class TestAggregateSpreadConformance(MechanismConformance):
    """var / std with negative bounds under a row-level privacy unit."""

    mechanism = AggregateMechanism()
    privacy_unit = dp.PrivacyUnit.row()
    measures = [dp.var("x", bounds=(-10, 5)), dp.std("x", bounds=(-10, 5), ddof=0), dp.sum("x", bounds=(-10, 6))]
    bad_measures = [dp.std("name", bounds=(0, 1))]
    noise_outputs = {"x_sum": "Σ (clamp(x))"}


def test_a_sum_next_to_a_mean_is_their_post_processing() -> None:
    """sum + mean with the same bounds: Σx = Σ(x − c) + c·n from the mean's noisy statistics (one statistic
    fewer, never more noise); the residual has the variance of that combination, and the interval covers it."""
    ctx = measure_context(max_rows=1)
    measures = [dp.sum("x", bounds=(0, 100)), dp.mean("x", bounds=(0, 100))]
    mech = AggregateMechanism()
    assert mech.parts(measures, ctx) == 2
    plan = mech.plan(measures, ctx, dp.PureDP(1))
    assert set(plan.noise) == {"count(x not null)", "Σ (clamp(x) − 50)"}
    n_noise, s_noise = plan.noise["count(x not null)"], plan.noise["Σ (clamp(x) − 50)"]
    own = mech.plan(measures[:1], ctx, dp.PureDP(Fraction(1, 3))).noise["Σ (clamp(x))"]   # a sum of its own
    shared_var = s_noise.std() ** 2 + 50**2 * n_noise.std() ** 2
    assert shared_var < own.std() ** 2
    n, exact = 5000, 40.0          # 5000 identical groups: one value 40 each → n = 1, Σ(x − 50) = −10
    stats = {s.key: np.full(n, 1 if s.kind == "nonnull" else round(-10 / float(s_noise.unit)), dtype=np.int64)
             for s in plan.statistics}
    out = plan.release(stats, CountingRandomSource(7))
    residual = np.asarray(out["x_sum"]) - exact
    assert abs(residual.mean()) < 5.3 * np.sqrt(shared_var / n)
    assert abs(residual.var() / shared_var - 1) < 0.15
    ci = replace(plan, confidence=0.95).release(stats, CountingRandomSource(8))
    covered = (ci["x_sum_ci_low"] <= exact) & (exact <= ci["x_sum_ci_high"])
    assert covered.mean() >= 0.95 - 5.3 * np.sqrt(0.05 * 0.95 / n)


PS_SHARES = [dp.ApproxDP(1, Fraction(1, 10**6)), dp.ApproxDP(Fraction(1, 2), Fraction(1, 10**9)),
             dp.ZCDP(Fraction(1, 2), Fraction(1, 10**6))]


class TestPartitionSelectionConformance(MechanismConformance):
    mechanism = PartitionSelection()
    measures = [Measure("partition_selection")]
    shares = PS_SHARES
    run_in_session = False      # selection runs through group_by(...) without keys, not through agg()
    check_declared_outputs = False  # core gap: SelectionPlan releases "__keep" but declares no outputs

    def test_noise_distribution(self) -> None:
        """P[keep] = P[u + Z ≥ τ] for the declared noise Z (exact binomial test, p ≥ 1e-6)."""
        n = self.distribution_samples
        for share in self.conformance_shares():
            plan = self.conformance_plan(share)
            noise, tau = plan.selection_noise, plan.threshold  # type: ignore[attr-defined]
            for u in (tau - 3, tau - 1, tau, tau + 2):
                keep = plan.release({"__units": np.full(n, u, dtype=np.int64)}, CountingRandomSource(u))["__keep"]
                expected = 1 - float(noise_cdf(noise, [tau - u - 1])[0])
                p = sps.binomtest(int(np.sum(keep)), n, expected).pvalue
                assert p >= self.alpha, f"{share!r}, u = {u}: P[keep] = {np.mean(keep):.4f}, expected {expected:.4f}"

    def test_session_selection(self) -> None:
        table = pl.DataFrame({"user": list(range(200)), "g": ["big"] * 150 + ["tiny"] * 50})
        sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ApproxDP(10, 1e-5), seed=3)
        out = sess.table("t").group_by("g").agg(dp.len()).collect(budget=dp.ApproxDP(1, 1e-6))
        assert "big" in out["g"].to_list()


def test_sum_without_bounds_is_refused_with_a_bounds_error() -> None:
    """Found by the kit (was a bare AssertionError from plan()); fixed in the core, kept as a regression test."""
    err = check_refused(AggregateMechanism(), dp.measure("sum", "x"), measure_context(), dp.PureDP(1))
    assert isinstance(err, dp.BoundsError) and err.argument == "bounds"


def test_len_with_column_charges_nothing() -> None:
    """Found by the kit (failed in release() after the reservation, keeping the charge); now a regression test."""
    table = pl.DataFrame({"user": [1, 2, 3], "x": [1.0, 2.0, 3.0]})
    sess = pin_mechanisms(dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(5),
                                     seed=0), AggregateMechanism())
    for bad in (dp.measure("len", "x"), dp.measure("mean", "x", bounds=(0, 1), ddof=3),
                dp.measure("count", "x", bounds=(0, 1))):
        with pytest.raises(dp.DPFrameError):
            sess.table("t").agg(bad).collect(budget=dp.PureDP(1))
    assert sess.spent().epsilon == 0, f"a malformed measure was charged {sess.spent()!r}"


# --------------------------------------------------------------------------------------------------
# Deliberately broken mechanisms: the kit must catch them


def _halve(noise: Noise) -> Noise:
    return replace(noise, scale=noise.scale / 2)


class HalvedDeclaredAggregate(AggregateMechanism):
    """Noise scale halved, and honestly declared: the cost no longer matches the noise."""

    def plan(self, measures: Any, ctx: Any, share: dp.Budget) -> AggregatePlan:
        plan = super().plan(measures, ctx, share)
        assert plan.noises is not None
        plan.noises = {k: _halve(n) for k, n in plan.noises.items()}
        plan.noise = {label: _halve(n) for label, n in plan.noise.items()}  # type: ignore[arg-type]
        return plan


class HalvedHiddenAggregate(AggregateMechanism):
    """Noise scale halved in release() only; plan.noise still shows the calibrated noise (a lying plugin)."""

    def plan(self, measures: Any, ctx: Any, share: dp.Budget) -> AggregatePlan:
        plan = super().plan(measures, ctx, share)
        assert plan.noises is not None
        plan.noises = {k: _halve(n) for k, n in plan.noises.items()}
        return plan


class BrokenDeclaredSuite(MechanismConformance):   # not collected (no Test prefix): run by hand below
    mechanism = HalvedDeclaredAggregate()
    measures = [dp.len(), dp.sum("x", bounds=(0, 100))]


class BrokenHiddenSuite(MechanismConformance):
    mechanism = HalvedHiddenAggregate()
    measures = [dp.len()]


def test_kit_catches_declared_halved_noise() -> None:
    with pytest.raises(AssertionError, match="the declared noises cost"):
        BrokenDeclaredSuite().test_noise_cost_matches_calibration()


def test_kit_catches_hidden_halved_noise_in_distribution() -> None:
    with pytest.raises(AssertionError, match="does not follow the declared"):
        BrokenHiddenSuite().test_noise_distribution()


def test_kit_catches_hidden_halved_noise_in_audit() -> None:
    with pytest.raises(pytest.fail.Exception, match="privacy audit failed"):
        BrokenHiddenSuite().test_neighbouring_audit()


def test_audit_release_bounds_correct_and_broken() -> None:
    ctx = measure_context(max_rows=3)
    share = dp.PureDP(1)
    good = AggregateMechanism().plan([dp.len()], ctx, share)
    bad = HalvedHiddenAggregate().plan([dp.len()], ctx, share)
    a, b = {"__rows": [40]}, {"__rows": [43]}       # the neighbour adds max_rows = 3 rows
    ok = audit_release(good, a, b, samples=20_000, seed=5)
    caught = audit_release(bad, a, b, samples=20_000, seed=5)
    assert ok.passed and 0.5 < ok.epsilon_lower_bound <= 1.0, ok
    assert not caught.passed and caught.epsilon_lower_bound > 1.0, caught


def test_epsilon_lower_bound_is_zero_on_identical_distributions() -> None:
    rng = CountingRandomSource(9)
    z = Noise("discrete_laplace", Fraction(2), Fraction(1)).sample(40_000, rng)
    assert epsilon_lower_bound(z[:20_000], z[20_000:], threshold=0) < 0.1


# --------------------------------------------------------------------------------------------------
# End-to-end: count and sum on neighbouring datasets through a seeded dp.Session

MAX_ROWS = 3
GROUPS = 5_000
UNITS_PER_GROUP = 4
BOUNDS = (0, 100)


def _tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    """D and D'. Every group of D' is the same group of D plus one privacy unit with max_rows rows at the
    upper bound. Groups are noised independently and a unit touches one group, so the K outputs of one
    query on D (on D') are K independent samples of the output for a group of D (of its neighbour D + that
    unit): one query gives thousands of samples of a neighbouring pair."""
    rows: list[tuple[int, str, float]] = []
    for g in range(GROUPS):
        for j in range(UNITS_PER_GROUP):
            unit = g * UNITS_PER_GROUP + j
            rows += [(unit, f"g{g:05d}", float((7 * unit + 13 * r) % 101)) for r in range(1 + j % MAX_ROWS)]
    base = pl.DataFrame(rows, schema={"user": pl.Int64, "g": pl.String, "x": pl.Float64}, orient="row")
    first_new = GROUPS * UNITS_PER_GROUP
    extra = pl.DataFrame([(first_new + g, f"g{g:05d}", float(BOUNDS[1]))
                          for g in range(GROUPS) for _ in range(MAX_ROWS)], schema=base.schema, orient="row")
    return base, pl.concat([base, extra])


@pytest.fixture(scope="module")
def tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    return _tables()


def _session_sampler(table: pl.DataFrame, measure: Measure, budget: dp.Budget, mechanism: Any = None) -> Any:
    keys = sorted(table["g"].unique().to_list())

    def sample(n: int, seed: int) -> dict[str, np.ndarray]:
        sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("user", max_rows=MAX_ROWS),
                          budget=dp.PureDP(10**6), seed=seed)
        if mechanism is not None:
            pin_mechanisms(sess, mechanism)
        query = sess.table("t").group_by("g", keys=keys).agg(measure)
        chunks = []
        while sum(len(c) for c in chunks) < n:
            chunks.append(query.collect(budget=budget)[measure.output_name].to_numpy())
        assert sess.spent() == dp.PureDP(len(chunks)), "each query is charged its budget"
        return {measure.output_name: np.concatenate(chunks)[:n]}
    return sample


def _session_audit(tables: tuple[pl.DataFrame, pl.DataFrame], measure: Measure, mechanism: Any = None,
                   samples: int = 20_000) -> AuditResult:
    base, neighbour = tables
    budget = dp.PureDP(1)
    return audit_sampler(_session_sampler(base, measure, budget, mechanism),
                         _session_sampler(neighbour, measure, budget, mechanism),
                         claimed_epsilon=1.0, samples=samples, seed=11)


@pytest.mark.parametrize("measure", [dp.count("x"), dp.sum("x", bounds=BOUNDS)], ids=["count", "sum"])
def test_session_audit_count_and_sum(tables: tuple[pl.DataFrame, pl.DataFrame], measure: Measure) -> None:
    result = _session_audit(tables, measure)
    print(result)
    assert result.passed, str(result)
    assert result.epsilon_lower_bound > 0.5, f"the audit is too weak to catch anything: {result}"


@pytest.mark.parametrize("measure", [dp.count("x"), dp.sum("x", bounds=BOUNDS)], ids=["count", "sum"])
def test_session_audit_catches_halved_noise(tables: tuple[pl.DataFrame, pl.DataFrame], measure: Measure) -> None:
    result = _session_audit(tables, measure, mechanism=HalvedHiddenAggregate())
    print(result)
    assert not result.passed and result.epsilon_lower_bound > 1.0, str(result)


def test_session_neighbours_differ_by_one_unit_per_group(tables: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    base, neighbour = tables
    added = neighbour.join(base, on=["user", "g", "x"], how="anti")
    per_group = added.group_by("g").agg(pl.col("user").n_unique().alias("u"), pl.len().alias("rows"))
    assert per_group.height == GROUPS and (per_group["u"] == 1).all() and (per_group["rows"] == MAX_ROWS).all()
    assert (added["x"] == BOUNDS[1]).all()


@pytest.mark.slow
@pytest.mark.parametrize("measure", [dp.count("x"), dp.sum("x", bounds=BOUNDS)], ids=["count", "sum"])
def test_session_audit_single_neighbour_pair(measure: Measure) -> None:
    """Literal neighbours (D and D + one unit), one collect per sample: slow, but no independence argument."""
    base = pl.DataFrame({"user": [u for u in range(30) for _ in range(1 + u % MAX_ROWS)]}).with_columns(
        x=(pl.col("user") * 7 % 101).cast(pl.Float64))
    neighbour = pl.concat([base, pl.DataFrame({"user": [999] * MAX_ROWS, "x": [100.0] * MAX_ROWS})])

    def sampler(table: pl.DataFrame) -> Any:
        def sample(n: int, seed: int) -> dict[str, np.ndarray]:
            values: list[float] = []
            for chunk in range(-(-n // 200)):   # a fresh session every 200 queries keeps the ledger small
                sess = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("user", max_rows=MAX_ROWS),
                                  budget=dp.PureDP(10**6), seed=seed * 10_000 + chunk)
                q = sess.table("t").agg(measure)
                values += [q.collect(budget=dp.PureDP(1))[measure.output_name][0] for _ in range(200)]
            return {"v": np.array(values[:n])}
        return sample

    result = audit_sampler(sampler(base), sampler(neighbour), claimed_epsilon=1.0, samples=2_000, seed=3)
    print(result)
    assert result.passed, str(result)
