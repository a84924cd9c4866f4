"""Review 52d: partition selection's threshold τ, checked against the exact δ it achieves (no sampling).

A group is released iff u_g + Z ≥ τ. The selection is (ε, δ)-DP (δ-approximately ρ-zCDP) iff
1 − (1 − P[Z ≥ τ − 1])^L0 ≤ δ (proof: ``plugins/dpframe_aggregates/partition_selection.py``, docs/guarantees.md;
the exact δ: ``selection_exact.py``). τ was the smallest integer meeting the union bound L0·P[Z ≥ τ − 1] ≤ δ
*plus one*: the +1 was a float-safety margin from before the thresholds were computed in exact rationals
(review 36c) and bought nothing since. Without it, and with the union bound replaced by the exact condition
(per-group δ₁ = 1 − (1 − δ)^{1/L0} ≥ δ/L0), the discrete Laplace τ is the smallest τ ≥ 2 whose exact δ is
≤ δ at every grid point below (t ≤ 10⁴; beyond, within its 10⁻⁹-of-ℓ margin), so lowering it by one breaks DP;
the discrete Gaussian τ was the smallest meeting the subgaussian bound e^{−(τ−1)²/(2σ²)} ≤ δ₁, whose exact δ is
far below δ (review 53d made it the smallest sound one too: test_review53d.py). Example: ε = 1 per selection,
L0 = 1, δ = 10⁻⁶: τ = 15 (was 16, exact δ 2.2·10⁻⁷), exact δ = 6.1·10⁻⁷; at τ = 14 it would be 1.7·10⁻⁶.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates.partition_selection import (
    SelectionPlan,
    gaussian_threshold,
    laplace_threshold,
    per_group_log_up,
    sqrt_up,
)
from scipy import stats

import dpframe as dp
from dpframe.budgets import make
from dpframe.mechanism import Noise, Statistic
from dpframe.noise import SeededRandomSource

from .selection_exact import PREC, dec, per_group_delta, selection_delta

DELTAS = [Fraction(1, 2), Fraction(1, 10), Fraction(1, 100), Fraction(1e-6), Fraction(1, 10**7), Fraction(1, 10**12),
          Fraction(1, 10**100), Fraction(1, 10**400)]
L0S = [1, 2, 3, 10, 1000, 10**6]
EPSILONS = [Fraction(1, 10**6), Fraction(1, 1000), Fraction(1, 10), Fraction(1, 2), Fraction(1), Fraction(2),
            Fraction(10), Fraction(1000)]
RHOS = [Fraction(1, 1000), Fraction(1, 100), Fraction(1, 8), Fraction(1, 2), Fraction(2), Fraction(50), Fraction(10**4)]
EXACT_T = Fraction(10**4)   # up to this scale the Laplace τ is checked to be exactly the smallest


def _laplace_grid() -> list[tuple[int, Fraction, Fraction]]:
    """(L0, t, δ): t as the plan calibrates it, L0/ε (selection share ε, L1 sensitivity L0)."""
    return [(l0, Noise.calibrate(Fraction(l0), make("pure", eps)).scale, delta)
            for eps, delta, l0 in itertools.product(EPSILONS, DELTAS, L0S)]


def _gaussian_grid() -> list[tuple[int, Fraction, Fraction]]:
    """(L0, σ², δ): σ² as the plan calibrates it, ⌈√L0⌉²/(2ρ) (L2 sensitivity rounded up to a rational)."""
    return [(l0, Noise.calibrate(sqrt_up(l0), make("zcdp", rho)).scale, delta)
            for rho, delta, l0 in itertools.product(RHOS, DELTAS[:-2] + [Fraction(1, 10**100)], [1, 2, 10, 100])]


def _exact(kind: str, l0: int, scale: Fraction, tau: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = PREC
        return selection_delta(kind, l0, scale, tau)


def _violations(kind: str, shift: int = 0) -> list[tuple[int, Fraction, Fraction, int]]:
    """Grid points whose exact δ at the code's τ + ``shift`` exceeds δ (10⁻⁶⁰ relative allowance: Decimal
    rounding; the smallest true slack on the grid is ≈ 10⁻¹¹)."""
    threshold, grid = ((laplace_threshold, _laplace_grid()) if kind == "discrete_laplace"
                       else (gaussian_threshold, _gaussian_grid()))
    out = []
    for l0, scale, delta in grid:
        tau = threshold(l0, scale, delta) + shift
        if _exact(kind, l0, scale, tau) > dec(delta) * (1 + Decimal(10) ** -60):
            out.append((l0, scale, delta, tau))
    return out


@pytest.mark.parametrize("kind", ["discrete_laplace", "discrete_gaussian"])
def test_threshold_meets_its_delta_exactly(kind: str) -> None:
    """At every grid point (ε or ρ, δ from 1/2 to 10⁻⁴⁰⁰, L0 from 1 to 10⁶) the exact δ at τ is ≤ δ; at τ − 1 it
    exceeds δ somewhere (for discrete Laplace, at nearly every point; for the discrete Gaussian at every point
    since review 53d): this test fails if τ is lowered by one."""
    assert _violations(kind) == []
    lowered = _violations(kind, shift=-1)
    assert len(lowered) > 350 if kind == "discrete_laplace" else len(lowered) == len(_gaussian_grid())


def test_laplace_threshold_is_the_smallest_sound_one() -> None:
    """Discrete Laplace up to t = 10⁴: at τ − 1 the exact δ exceeds δ, or τ = 2 is the floor (τ = 1 needs
    δ ≥ 1/2). Beyond, τ − 1 is within its margin (10⁻⁹ of ℓ, times t) of t·(ln(1/δ₁) − ln(1 + e^{−1/t}))."""
    for l0, t, delta in _laplace_grid():
        tau = laplace_threshold(l0, t, delta)
        if t <= EXACT_T:
            assert _exact("discrete_laplace", l0, t, tau - 1) > dec(delta) or (tau == 2 and delta >= Fraction(1, 2))
            continue
        with localcontext() as ctx:
            ctx.prec = PREC
            s = dec(t)
            needed = s * (-per_group_delta(l0, delta).ln() - (1 + (-1 / s).exp()).ln())
            assert needed <= tau - 1 <= needed + 1 + s * Decimal("2e-9")


def test_per_group_log_is_an_upper_bound() -> None:
    """ℓ = per_group_log_up(L0, δ) ≥ ln(1/δ₁) (both branches of a: δ ≤ 1/2 from log1p, above from exact logs;
    δ near 1 and below the float range), and within 10⁻⁸ of it where it is not the union bound's ln(L0/δ)."""
    deltas = [*DELTAS, Fraction(3, 4), Fraction(10**15 - 1, 10**15), Fraction(1, 3), Fraction(2, 2**1074)]
    for l0, delta in itertools.product([*L0S, 10**30, 10**320], deltas):
        with localcontext() as ctx:
            ctx.prec = PREC
            exact = -per_group_delta(l0, delta).ln()
            up = dec(per_group_log_up(l0, delta))
            assert exact <= up
            assert up - exact < Decimal("1e-8") or up - (Decimal(l0) / dec(delta)).ln() < Decimal("1e-8")


@pytest.mark.parametrize(("budget", "max_groups"), [
    (dp.ApproxDP(1, 1e-6), 1), (dp.ApproxDP(Fraction(1, 10), Fraction(1, 100)), 3), (dp.ApproxDP(4, 1e-9), 10),
    (dp.ZCDP(Fraction(1, 2), 1e-6), 1), (dp.ZCDP(2, Fraction(1, 100)), 10)])
def test_a_query_plans_the_smallest_sound_threshold(budget: dp.ApproxDP | dp.ZCDP, max_groups: int) -> None:
    """End to end: a private-keys query's selection plan (its noise, L0 = max_groups, the query's δ) has exact δ
    ≤ δ, the Laplace one > δ at τ − 1, and explain() states that τ. Hand-computed: ApproxDP(1, 10⁻⁶), L0 = 1:
    ε_sel = 1/2 (len and the selection share ε), t = 2, τ − 1 = ⌈2·(13.8155 − ln(1 + e^{−1/2}))⌉ = ⌈26.683⌉ = 27,
    τ = 28 (was 29)."""
    data = pl.DataFrame({"u": list(range(40)), "g": [str(i % 4) for i in range(40)]})
    total = dp.ApproxDP(10, Fraction(1, 10)) if budget.notion == "approx" else dp.ZCDP(10, Fraction(1, 10))
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=max_groups, max_groups=max_groups),
                      budget=total)
    query = sess.table("t").group_by("g").agg(dp.len())
    plan = query.plan(budget).selection
    assert isinstance(plan, SelectionPlan) and plan.selection_noise is not None
    noise, tau = plan.selection_noise, plan.threshold
    assert _exact(noise.distribution, max_groups, noise.scale, tau) <= dec(budget.delta)
    if noise.distribution == "discrete_laplace":
        assert _exact(noise.distribution, max_groups, noise.scale, tau - 1) > dec(budget.delta)
    assert f"τ = {tau} " in query.explain(budget)
    if (budget, max_groups) == (dp.ApproxDP(1, 1e-6), 1):
        assert (noise.scale, tau) == (2, 28)


def test_a_huge_max_groups_plans_under_zcdp() -> None:
    """Attack (found while writing this review's change): max_groups = 10³²⁰ under ρ = 10²⁹⁸ is a drawable
    σ² = 5·10²¹, and the per-group δ₁'s float division a/L0 raised OverflowError in plan() (a PluginError
    before any charge). L0 ≥ 10³⁰⁰ takes the union bound's ln(L0/δ), which needs no float of L0."""
    data = pl.DataFrame({"u": list(range(40)), "g": [str(i % 4) for i in range(40)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=10**320),
                      budget=dp.ZCDP(10**299, Fraction(1, 10)))
    budget = dp.ZCDP(10**298, Fraction(1, 100))
    plan = sess.table("t").group_by("g").agg(dp.count_units()).plan(budget).selection  # L2 √L0, as the selection
    assert isinstance(plan, SelectionPlan) and plan.selection_noise is not None
    assert plan.threshold == gaussian_threshold(10**320, plan.selection_noise.scale, budget.delta) > 2


# --------------------------------------------------------------------------- statistical: D vs D plus one unit

def _released_new_groups(plan: SelectionPlan, draws: int, seed: int) -> int:
    """How many of ``draws`` groups that exist only through the added unit (u = 1) the plan releases."""
    mask = plan.release({Statistic("units").key: np.ones(draws, dtype=np.int64)}, SeededRandomSource(seed))
    return int(np.count_nonzero(mask["__keep"]))


def _too_many(released: int, draws: int, per_group: float) -> bool:
    """Whether ``released`` of ``draws`` is implausible (p < 10⁻⁹) for a release probability ≤ δ₁ = ``per_group``."""
    return float(stats.binom.sf(released - 1, draws, per_group)) < 1e-9


@pytest.mark.slow
@pytest.mark.parametrize(("budget", "max_groups"), [
    (dp.ApproxDP(2, Fraction(1, 100)), 1), (dp.ApproxDP(2, Fraction(1, 100)), 3),
    (dp.ZCDP(Fraction(1, 2), Fraction(1, 100)), 1)])
def test_new_groups_are_released_within_delta_statistically(budget: dp.ApproxDP | dp.ZCDP, max_groups: int) -> None:
    """D = a table; D′ = D plus one unit with a row in each of L0 groups absent from D. Under D no such group can
    appear; under D′ each is released independently with probability p = P[Z ≥ τ − 1], so (ε, δ)-DP needs
    1 − (1 − p)^L0 ≤ δ. The planned selection (its real sampler and ≥ comparison) releases 2·10⁶ such groups: the
    count is plausible for p ≤ δ₁ = 1 − (1 − δ)^{1/L0}. The same plan with τ − 2 and τ − 1 is caught (exact δ at τ,
    τ − 1, τ − 2 here: 0.0049, 0.0134, 0.0364; 0.0084, 0.0117, 0.0163; Gaussian 0.0057, 0.0355, 0.139 against
    δ = 0.01: review 53d lowered its τ by one, to the smallest sound one; more cases in test_review53d.py)."""
    data = pl.DataFrame({"u": list(range(40)), "g": [str(i % 4) for i in range(40)]})
    newcomer = pl.DataFrame({"u": [40] * max_groups, "g": [f"new{j}" for j in range(max_groups)]})
    total = dp.ApproxDP(10, Fraction(1, 10)) if budget.notion == "approx" else dp.ZCDP(10, Fraction(1, 10))
    unit = dp.PrivacyUnit("u", max_rows=max_groups, max_groups=max_groups)
    plans = []
    for table in (data, pl.concat([data, newcomer])):
        sess = dp.Session({"t": table}, privacy_unit=unit, budget=total)
        selection = sess.table("t").group_by("g").agg(dp.len()).plan(budget).selection
        assert isinstance(selection, SelectionPlan)
        plans.append(selection)
    assert (plans[0].threshold, plans[0].selection_noise) == (plans[1].threshold, plans[1].selection_noise)  # public
    plan = plans[1]
    with localcontext() as ctx:
        ctx.prec = PREC
        per_group = float(per_group_delta(max_groups, budget.delta))
    draws = 2_000_000
    assert not _too_many(_released_new_groups(plan, draws, 1), draws, per_group)
    for by in (2, 1):
        broken = replace(plan, threshold=plan.threshold - by)
        assert _too_many(_released_new_groups(broken, draws, 2), draws, per_group), by
