"""Review 37b: every novel calibration formula of stop 36 checked against exact arithmetic.

Scope: ``plugins/dpframe_topk/calibrate.py`` (``tct_channel``, ``tct_plan``, ``within``), the optimal
composition it and ``sess.target_charging`` rely on (``dpframe.interactive.composition.optimal_delta``), the
budgets' float rounding (``budgets.up`` / ``down`` / ``sqrt_down``), partition selection's thresholds
(``log_ratio_up``), top-k's released-score noise and the robust median's distance to instability. Every
expected value comes from 60-digit decimal arithmetic (binomial sums and composition δ enclosed between an exact
lower bound and a lower bound plus a geometric tail) or from exact rationals, never from the code under test.
Long grids run with ``-m slow``; the default run keeps a short subset.

Findings: ``optimal_delta`` under-reported the exact δ by 1.2·10⁻⁹ relative at 10⁶ steps (past every
caller's 10⁻⁹ margin: a 10⁶-access channel reserved ε' at which the exact δ exceeds its share), and TCT plans
at a subnormal δ (below 2.2e-308) exceeded it by up to 45 % (δ = 10⁻³²³).
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates.partition_selection import gaussian_threshold, laplace_threshold, log_ratio_up
from dpframe_topk import calibrate

import dpframe as dp
from dpframe.accounting.accountants import round_up
from dpframe.budgets import down, sqrt_down, up
from dpframe.interactive.composition import optimal_delta, optimal_epsilon
from dpframe.interactive.ptr import instability_distance
from dpframe.interactive.tct import ChannelPlan, q_notprior

from .selection_exact import any_released, gaussian_tail_range

PREC = 60
PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459")


def _dec(x: Fraction | float) -> Decimal:
    x = Fraction(x)
    return Decimal(x.numerator) / Decimal(x.denominator)


def _lnfact(x: int) -> Decimal:
    """ln x! to ~10⁻³³: exact below 2,000, Stirling's series beyond (next term < 1/(1188·x⁹) < 10⁻³²)."""
    if x < 2000:
        return Decimal(math.factorial(x)).ln()
    d = Decimal(x)
    return d * d.ln() - d + (2 * PI * d).ln() / 2 + 1 / (12 * d) - 1 / (360 * d**3) + 1 / (1260 * d**5) \
        - 1 / (1680 * d**7)


def _tail_sum(first: Decimal, ratio: object, start: int) -> tuple[Decimal, Decimal]:
    """(lower, upper) of Σ_{j ≤ start} t_j with t_start = ``first``, t_{j−1} = t_j·ratio(j) (and a weight).

    ``ratio(j)`` returns (t_{j−1}/t_j, weight of term j); the terms are summed down to j = 0 or until they are
    below 10⁻⁴⁵ of the sum with a ratio < 0.999 (it only falls as j falls): the rest is below t·r/(1 − r).
    """
    s, t, j = Decimal(0), first, start
    while j >= 0:
        r, w = ratio(j)  # type: ignore[operator]
        s += t * w
        if j == 0:
            return s, s
        t, j = t * r, j - 1
        if r < Decimal("0.999") and t < Decimal("1e-45") * s:
            return s, s + t / (1 - r)
    return s, s


def binom_cdf(n: int, top: int, p: Decimal) -> tuple[Decimal, Decimal]:
    """An enclosure of P[Bin(n, p) ≤ top] (exact decimal terms)."""
    with localcontext() as ctx:
        ctx.prec = PREC
        if top < 0:
            return Decimal(0), Decimal(0)
        top = min(top, n)
        lnp, ln1mp = p.ln(), (1 - p).ln()
        first = (_lnfact(n) - _lnfact(top) - _lnfact(n - top) + top * lnp + (n - top) * ln1mp).exp()
        odds = (1 - p) / p
        return _tail_sum(first, lambda j: (Decimal(j) / (n - j + 1) * odds, 1), top)


def kov_delta(k: int, eps: Decimal, total: Decimal) -> tuple[Decimal, Decimal]:
    """An enclosure of the exact optimal-composition δ of k ε-DP steps at ε_total (KOV15 Thm 3.3)."""
    with localcontext() as ctx:
        ctx.prec = PREC
        live = math.floor((k - float(total) / float(eps)) / 2) + 2
        live = min(k, live)
        while live >= 0 and not (k - 2 * live) * eps > total:
            live -= 1
        if live < 0:
            return Decimal(0), Decimal(0)
        lnp, lnq = eps - (1 + eps.exp()).ln(), -(1 + eps.exp()).ln()
        first = (_lnfact(k) - _lnfact(live) - _lnfact(k - live) + (k - live) * lnp + live * lnq).exp()
        odds = (lnp - lnq).exp()                 # t_{l−1}/t_l = l/(k − l + 1)·p/q
        return _tail_sum(first, lambda j: (Decimal(j) / (k - j + 1) * odds,
                                           1 - (total - (k - 2 * j) * eps).exp()), live)


def test_decimal_references_match_closed_forms() -> None:
    """The references themselves: P[Bin(27, 0.4) ≤ 0] = 0.6²⁷; one ε-DP step at ε_total < ε has
    δ = (e^ε − e^{ε_t})/(1 + e^ε)."""
    with localcontext() as ctx:
        ctx.prec = PREC
        lo, hi = binom_cdf(27, 0, Decimal("0.4"))
        assert lo == hi and abs(lo / Decimal("0.6") ** 27 - 1) < Decimal("1e-50")
        lo, hi = kov_delta(1, Decimal(1), Decimal("0.5"))
        exact = (Decimal(1).exp() - Decimal("0.5").exp()) / (1 + Decimal(1).exp())
        assert abs(lo / exact - 1) < Decimal("1e-50") and hi == lo


# --------------------------------------------------------------------------- optimal_delta (finding 1)

def test_optimal_delta_is_an_upper_bound_at_a_million_steps() -> None:
    """Attack: 10⁶ steps of ε = 0.001 at ε_total = 3. The float sum of exp(gammaln(...)) terms was
    1.2·10⁻⁹ below the exact δ (gammaln(10⁶) ≈ 1.3·10⁷ has an ulp of 1.9·10⁻⁹), past the 10⁻⁹ margin of
    ``optimal_epsilon`` and ``tct_channel``. Now an upper bound, within 10⁻⁶ of the exact value."""
    lo, hi = kov_delta(10**6, Decimal(0.001), Decimal(3))
    got = Decimal(optimal_delta(10**6, 0.001, 3.0))
    assert got >= hi, float(got / lo - 1)
    assert got <= lo * (1 + Decimal("1e-6"))


@pytest.mark.parametrize("k, eps, total", [(1, 0.5, 0.0), (2, 1.0, 0.5), (30, 0.2, 1.5), (1000, 0.05, 3.0),
                                            (20000, 0.004, 2.0)])
def test_optimal_delta_upper_bound_grid(k: int, eps: float, total: float) -> None:
    """A short grid: always ≥ the exact δ, within a relative 10⁻⁶ (10⁻⁹ up to k = 1,000)."""
    lo, hi = kov_delta(k, Decimal(eps), Decimal(total))
    got = Decimal(optimal_delta(k, eps, total))
    assert hi <= got <= lo * (1 + Decimal("1e-6" if k > 1000 else "1e-9"))


@pytest.mark.slow
@pytest.mark.parametrize("k, eps, delta", [(10**6, 0.001, 1e-3), (10**6, 0.001, 1e-6), (300000, 0.002, 1e-9)])
def test_optimal_epsilon_fits_its_delta_exactly(k: int, eps: float, delta: float) -> None:
    """Attack (what the channel reserves): ε' = optimal_epsilon(10⁶, 0.001, 10⁻³) had an exact δ 1.8·10⁻¹⁰
    above 10⁻³, also at round_up(ε'); now the exact δ at ε' is ≤ δ."""
    e = optimal_epsilon(k, eps, delta)
    lo, hi = kov_delta(k, Decimal(eps), Decimal(e))
    assert hi <= Decimal(delta)


# --------------------------------------------------------------------------- TCT at a subnormal δ (finding 2)

def test_tct_topk_refuses_a_subnormal_delta() -> None:
    """Attack: tct_plan('approx', 300, 10⁻³²³, k=5) planned n = 1315, ε_c ≈ 0.115 whose exact δ* + δ_opt is
    1.45·10⁻³²³ (a float holds 10⁻³²³ as 2 ulps of 4.9e-324). Now refused, naming the budget, before any charge."""
    with pytest.raises(dp.errors.BudgetError) as err:
        calibrate.tct_plan("approx", Fraction(300), Fraction(1, 10**323), 5)
    assert err.value.argument == "budget"
    data = pl.DataFrame({"u": list(range(40)), "c": [str(i % 4) for i in range(40)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(1000, Fraction(1, 10**300)))
    q = sess.table("t").group_by("c", keys=pl.DataFrame({"c": list("0123")})).top_k(k=2, method="tct")
    with pytest.raises(dp.errors.BudgetError, match="smallest normal float"):
        q.collect(dp.ApproxDP(300, Fraction(1, 10**323)))
    assert sess.spent().epsilon == 0 and sess.spent().delta == 0  # type: ignore[union-attr]


def test_target_charging_refuses_a_subnormal_delta() -> None:
    """Attack: a zCDP channel of ε = 0.5, τ = 5 at δ = 10⁻³²³ chose n with float tail ≤ δ whose exact tail is
    1.13·10⁻³²³. Now refused with argument delta."""
    e = Decimal(0.5)
    plan = ChannelPlan.smallest(q_notprior(0.5), 5, 1e-323)
    assert binom_cdf(plan.n, 4, 1 / (1 + e.exp()))[0] > _dec(Fraction(1, 10**323))   # what was planned
    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ZCDP(10, Fraction(1, 10**300)))
    with pytest.raises(dp.errors.BudgetError) as err:
        sess.target_charging(epsilon=0.5, max_hits=5, delta=Fraction(1, 10**323))
    assert err.value.argument == "delta"


# --------------------------------------------------------------------------- tct_plan against exact values

def _check_tct(notion: str, first: Fraction, delta: Fraction, k: int) -> None:
    """The plan fits exactly: ε_c is what runs; zcdp: n(2ε_c)²/2 ≤ ρ and δ*(n) ≤ δ; approx: δ*(n) + δ_opt ≤ δ."""
    plan = calibrate.tct_plan(notion, first, delta, k)
    if plan is None:
        return
    e2 = 2 * plan.candidate_epsilon
    q = 1 / (1 + _dec(e2).exp())
    tail = binom_cdf(plan.accesses, k - 1, q)[1]
    if notion == "zcdp":
        assert plan.accesses * e2 * e2 / 2 <= first
        assert tail <= _dec(delta)
        assert plan.candidate_epsilon <= Fraction(math.sqrt(float(first) / 2)) * (1 + Fraction(1, 10**9))
    else:
        spent = kov_delta(plan.accesses, _dec(e2), _dec(first))[1]
        assert tail + spent <= _dec(delta)


@pytest.mark.parametrize("notion, first, delta, k", [
    ("approx", Fraction(1), Fraction(1, 10**6), 1), ("approx", Fraction(5), Fraction(1, 10**6), 100),
    ("approx", Fraction(1, 10**6), Fraction(1, 10), 1), ("approx", Fraction(100), Fraction(1, 10**300), 10),
    ("approx", Fraction(3), Fraction(1, 2), 1), ("zcdp", Fraction(1, 100), Fraction(1, 10**6), 1),
    ("zcdp", Fraction(1), Fraction(1, 10**6), 1000), ("zcdp", Fraction(1, 10**9), Fraction(1, 3), 1),
    ("zcdp", Fraction(50), Fraction(3, 10**308), 2)])
def test_tct_plan_fits_exactly(notion: str, first: Fraction, delta: Fraction, k: int) -> None:
    """Short grid (extremes: ε = 10⁻⁶, ρ = 10⁻⁹, δ = 10⁻³⁰⁰ and just above the normal floor, δ = 1/2)."""
    _check_tct(notion, first, delta, k)


@pytest.mark.slow
@pytest.mark.parametrize("notion", ["approx", "zcdp"])
@pytest.mark.parametrize("first", [Fraction(1, 10**4), Fraction(1, 3), Fraction(1), Fraction(20), Fraction(300)])
@pytest.mark.parametrize("delta", [Fraction(1, 3), Fraction(1, 10**6), Fraction(1, 10**50), Fraction(23, 10**308)])
@pytest.mark.parametrize("k", [1, 2, 7, 100, 10000])
def test_tct_plan_fits_exactly_grid(notion: str, first: Fraction, delta: Fraction, k: int) -> None:
    """The long grid (400 plans)."""
    _check_tct(notion, first, delta, k)


# --------------------------------------------------------------------------- within, up, down, sqrt_down

EXTREMES = [Fraction(1, 3), Fraction(1, 10), Fraction(2, 3 * 10**12), Fraction(3, 10**12), Fraction(1, 10**11),
            Fraction(7, 10**400), Fraction(10**300 + 1), Fraction(sys.float_info.max), Fraction(5e-324),
            Fraction(5e-324) * Fraction(3, 2), Fraction(1, 2**1074 * 3), Fraction(2**53 + 1),
            Fraction(10**12 + 1, 10**12)]


@pytest.mark.parametrize("x", EXTREMES)
def test_rounding_is_directed(x: Fraction) -> None:
    """up(x) ≥ x > its predecessor, down(x) ≤ x < its successor; sqrt_down(x)² ≤ x (exact rationals)."""
    u, d = up(x), down(x)
    assert Fraction(u) >= x and Fraction(math.nextafter(u, -math.inf)) < x
    assert Fraction(d) <= x and (d == sys.float_info.max or Fraction(math.nextafter(d, math.inf)) > x)
    s = sqrt_down(x)
    assert Fraction(s) ** 2 <= x and Fraction(math.nextafter(s, math.inf)) ** 2 > x


@pytest.mark.parametrize("first", [x for x in EXTREMES if x < 10**300] + [Fraction(1), Fraction(123456789, 1000)])
def test_within_fits_round_up(first: Fraction) -> None:
    """within(first) ≤ first, its round_up ≤ first, and round_up is monotone, so smaller floats fit too;
    0.0 only when first is below round_up's margin (a few 10⁻¹²)."""
    e = calibrate.within(first)
    assert Fraction(e) <= first and round_up(e) <= first
    assert e > 0 or first < Fraction(3, 10**12)
    assert e == 0 or round_up(math.nextafter(e, 0.0)) <= first


# --------------------------------------------------------------------------- partition selection thresholds

def _exp(x: Decimal) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = PREC
        return x.exp()


@pytest.mark.parametrize("l0", [1, 7, 10**6, 10**30])
@pytest.mark.parametrize("scale", [Fraction(1, 10**6), Fraction(1, 3), Fraction(1), Fraction(2**56 + 1, 3)])
@pytest.mark.parametrize("delta", [Fraction(1, 2), Fraction(1, 10**6), Fraction(1, 10**400)])
def test_partition_thresholds_exact(l0: int, scale: Fraction, delta: Fraction) -> None:
    """1 − (1 − P[Z ≥ τ − 1])^l0 ≤ δ at 60 digits: discrete Laplace P[Z ≥ k] = e^{−k/t}/(1 + e^{−1/t}) (k ≥ 0);
    the discrete Gaussian's tail (σ² = scale; its lattice sum, or Euler–Maclaurin bounds: review 53d).
    log_ratio_up(l0, δ) ≥ ln(l0/δ) (review 52d: the condition was the union bound l0·P[Z ≥ τ − 1] ≤ δ; the exact
    one is P[Z ≥ τ − 1] ≤ δ₁ = 1 − (1 − δ)^{1/l0})."""
    with localcontext() as ctx:
        ctx.prec = PREC
        ln_ratio = Decimal(l0).ln() - _dec(delta).ln()
        assert _dec(log_ratio_up(l0, delta)) >= ln_ratio
        t = _dec(scale)
        tau = laplace_threshold(l0, scale, delta)
        k = tau - 1
        tail = _exp(-k / t) / (1 + _exp(-1 / t)) if k >= 0 else Decimal(1)
        assert any_released(l0, tail) <= _dec(delta)
        tau = gaussian_threshold(l0, scale, delta)   # review 53d: the lattice tail (or its bound), not e^{−k²/(2σ²)}
        assert any_released(l0, gaussian_tail_range(scale, tau - 1)[1]) <= _dec(delta)


# --------------------------------------------------------------------------- robust median: D̂_β has sensitivity m

def test_instability_distance_sensitivity_m() -> None:
    """Every dataset of ≤ 5 codes in 0..6 and every neighbour that adds m ≤ 2 rows: |D̂_β(D) − D̂_β(D')| ≤ m for
    β = 1, 2, 4 (the AboveThreshold of the robust median adds noise for sensitivity m: 2m/ε threshold, 4m/ε query)."""
    rng = np.random.default_rng(7)
    for _ in range(3000):
        m = int(rng.integers(1, 3))
        base = np.sort(rng.integers(0, 7, size=int(rng.integers(0, 6))))
        extra = rng.integers(0, 7, size=m)
        bigger = np.sort(np.concatenate([base, extra]))
        for beta in (1, 2, 4):
            a, b = instability_distance(base, 6, m, beta), instability_distance(bigger, 6, m, beta)
            assert abs(a - b) <= m, (base, extra, beta, a, b)


# --------------------------------------------------------------------------- top-k released scores

def test_released_scores_noise_does_not_grow_with_k() -> None:
    """len/count/sum: the whole released vector moves by ≤ Δ = max_rows × row bound in L1 (a unit's rows lie in
    all keys together), so the Laplace scale is Δ/ε for every k; count_units keeps k·Δ (a unit touches every key)."""
    from dpframe_topk.query import score_of
    schema, unit = pl.Schema({"u": pl.Int64, "c": pl.String, "v": pl.Float64}), dp.PrivacyUnit("u", max_rows=4)
    for k in (1, 10, 1000):
        assert score_of(dp.len(), unit, schema).released_noise(dp.PureDP(2), k).scale == 2
        assert score_of(dp.count_units(), unit, schema).released_noise(dp.PureDP(2), k).scale == Fraction(k, 2)
    s = score_of(dp.sum("v", bounds=(-3, 5)), unit, schema)
    assert s.released_noise(dp.PureDP(1), 50).scale == s.key_sensitivity >= 4 * 5 / s.unit
