"""Review 55g: accounting leftovers — curves handed to a third-party accountant, conversions at a tiny δ, the
partition-selection threshold at the ends of its range, the PLD's FFT margin, and a scalar discrete Gaussian
describing a noise on several coordinates.

Each test is one attack or one check against an independent reference; those that found something say so in their
docstring (``Found:``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp_charge import FILTER_ORDERS, RDPCharge
from dpframe.budgets import Budget
from dpframe.mechanism import Noise
from dpframe.planning.curve_checks import _describes, _third_party_curves
from dpframe.testing import pin_mechanisms
from tests.adversarial.test_review51f import CurveCount
from tests.adversarial.test_review53c import Wrapped

DATA = pl.DataFrame({"u": [i // 4 for i in range(800)], "k": ["a", "b"] * 400})


def _floor(noises: Sequence[Noise]) -> np.ndarray:
    return np.asarray(sum((n.filter_rdp() for n in noises), np.zeros(len(FILTER_ORDERS))))


# -- 1. the curves a third-party accountant is handed are never below the declared noises' floor --------------------


def test_soundness_handed_curves_are_not_below_the_floor_within_the_slack() -> None:
    """Found: `_third_party_curves` handed a third-party accountant the rebuilt curves whenever they were at least
    10⁻⁹ *relatively below* the declared noises' floor (the float slack of the plan checks): a discrete Laplace
    description of scale t·(1 + 10⁻¹⁰) on noise of scale t reached the accountant as it was, below the divergence of
    a neighbouring pair the noise has. The accountant composes what it is handed at every order, with no slack to
    raise it away (the engine's own charge raises such curves to what they were checked against): it now gets the
    cost's own curve instead (None), which every cost-private mechanism has."""
    noise = Noise("discrete_laplace", Fraction(3), Fraction(1))
    low = acc.discrete_laplace(3.0 * (1 + 1e-10), 1)
    below = np.asarray(RDPCharge.of([low]).values) < _floor([noise])
    assert below.any() and np.all(np.asarray(RDPCharge.of([low]).values) >= _floor([noise]) * (1 - 1e-9))
    assert _third_party_curves((low,), noise.cost(), [("count", noise)]) is None
    honest = acc.discrete_laplace(3.0, 1)
    handed = _third_party_curves((honest,), noise.cost(), [("count", noise)])
    assert handed is not None and [c.label for c in handed] == [honest.label]


def test_soundness_handed_guarantees_are_held_to_the_floor_too() -> None:
    """An untied plan's parts are handed as the guarantees they state (a Gaussian of ρ as ρ-zCDP); those are no more
    than the parts at the filter's orders, so they are now held to the floor after the replacement, not before."""
    noise = Noise("discrete_gaussian", Fraction(2), Fraction(1))            # ρ = 1/4
    rho = 0.25 * (1 - 1e-10)
    part = acc.gaussian(math.sqrt(1 / (2 * rho)))
    assert _third_party_curves((part,), dp.ZCDP(Fraction(1, 4)), [("count", noise)], untied=True) is None
    fair = _third_party_curves((acc.gaussian(math.sqrt(2.0) * (1 - 1e-12)),), dp.ZCDP(Fraction(1, 4)),
                               [("count", noise)], untied=True)
    assert fair is not None and [c.spec["kind"] for c in fair] == ["zcdp"]  # type: ignore[index]


def _sigma(noise: Noise) -> float:
    return math.sqrt(float(noise.scale))            # rounded to nearest: sometimes a hair above the noise's σ


DESCRIPTIONS = {
    "discrete_laplace": (dp.PureDP(1), lambda n: acc.discrete_laplace(float(n.scale), int(n.sensitivity))),
    "pure": (dp.PureDP(Fraction(1, 3)), lambda n: acc.pure(float(n.sensitivity / n.scale))),
    "scalar_dg": (dp.ZCDP(Fraction(1, 3)), lambda n: acc.discrete_gaussian(_sigma(n), float(n.sensitivity),
                                                                             scalar=True)),
    "zcdp": (dp.ZCDP(Fraction(1, 7)), lambda n: acc.zcdp(float(n.sensitivity ** 2 / (2 * n.scale)))),
}


class Recording(Wrapped):
    """test_review53c's delegating accountant under a name of its own (its module fixture may hold the other)."""

    name = "recording_r55g"
    seen: list[tuple[acc.PrivacyCurve, ...]] = []

    def charge_plan(self, cost: Budget, curves: Sequence[acc.PrivacyCurve] | None, rate: float = 1.0) -> Any:
        Recording.seen.append(tuple(curves or ()))
        return self._inner.charge_plan(cost, curves, rate)


class RecordingHooks:
    @dp.hookimpl
    def dpframe_accountants(self, register: Any) -> None:
        register(Recording, name=Recording.name)


@pytest.mark.parametrize("how", sorted(DESCRIPTIONS))
def test_a_recording_third_party_accountant_gets_curves_at_least_the_floor(how: str) -> None:
    """A third-party accountant (dpframe's Rényi filter by delegation, recording what it is handed) is given, for
    honest plugins describing their noise with dpframe's constructors (floats rounded to nearest, as a plugin
    writes them), curves whose RDP at every filter order is at least the declared noise's floor, exactly."""
    from dpframe.plugin import plugin_host

    host = plugin_host()
    host.register(RecordingHooks(), name="recording_r55g")
    try:
        budget, describe = DESCRIPTIONS[how]
        plugin = CurveCount(f"described_{how}_r55g", describe)       # declares the noise it adds
        sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=3),
                          budget=dp.ApproxDP(50, 1e-5), accountant=Recording.name, seed=0)
        pin_mechanisms(sess, plugin)
        Recording.seen.clear()
        sess.table("t").agg(dp.measure(plugin.name)).collect(budget)
        assert sess.history().height == 1 and Recording.seen
        noise = Noise.calibrate(Fraction(3), budget)
        for curves in Recording.seen:
            assert np.all(np.asarray(RDPCharge.of(list(curves)).values) >= _floor([noise])), how
    finally:
        host.unregister(name="recording_r55g")


# -- 5. a scalar discrete Gaussian describing noise that moves several coordinates ----------------------------------


def _vector_profile(sigma: float, shift: Sequence[int], eps: np.ndarray) -> np.ndarray:
    """δ(ε) of N_Z(0, σ²)^d against N_Z(v, σ²)^d, exactly (the privacy loss is a function of ⟨v, x⟩)."""
    k = np.arange(-60, 61)
    p = np.exp(-k.astype(float) ** 2 / (2 * sigma * sigma))
    p /= p.sum()
    dist = {0: 1.0}
    for v in shift:
        step: dict[int, float] = {}
        for a, pa in dist.items():
            for kk, pk in zip(k, p):
                if pk > 1e-300:
                    step[a + v * int(kk)] = step.get(a + v * int(kk), 0.0) + pa * pk
        dist = step
    norm2 = sum(v * v for v in shift)
    dots = np.array(list(dist), dtype=float)
    mass = np.array(list(dist.values()))
    loss = (norm2 - 2 * dots) / (2 * sigma * sigma)
    return np.array([float(np.sum(mass * np.clip(-np.expm1(e - loss), 0.0, None))) for e in eps])


def test_a_scalar_description_does_not_dominate_a_spread_release() -> None:
    """Why a scalar description needs one coordinate: N_Z(0, σ²) against N_Z(2, σ²) (a scalar discrete Gaussian of
    Δ = 2) has a privacy profile *below* that of four coordinates each moved by 1 (L2 sensitivity 2 too), by up to
    6 % at σ = 0.5 and 0.8 (exact sums), so it describes noise of L2 sensitivity 2 only where one coordinate takes
    all of it."""
    eps = np.linspace(0.0, 3.0, 31)
    for sigma in (0.5, 0.8):
        one = _vector_profile(sigma, [2], eps)
        spread = _vector_profile(sigma, [1, 1, 1, 1], eps)
        assert np.max(spread / one) > 1.05
        assert np.allclose(acc.discrete_gaussian(sigma, 2.0, scalar=True).profile()[0](eps), one, rtol=1e-6,
                           atol=1e-12)


def test_soundness_a_scalar_description_of_spread_noise_is_not_kept() -> None:
    """Found: `_describes` kept a `scalar=True` discrete Gaussian of the noise's own σ and Δ as the description of
    discrete Gaussian noise whatever its `coordinate_sensitivity` said: noise of L2 sensitivity 2 declared with
    `coordinate_sensitivity=1` (each coordinate moves by at most 1: four coordinates move) was described, for the
    PLD reports and for a third-party accountant, by the one-coordinate profile, 6 % below the release's
    (the test above). As for discrete Laplace noise, the exact one-coordinate curve now describes the noise only where
    one coordinate may take all of its sensitivity; the vector curve (derived from RDP, any dimension) still does."""
    spread = Noise("discrete_gaussian", Fraction(1, 4), Fraction(2), coordinate_sensitivity=Fraction(1))
    whole = Noise("discrete_gaussian", Fraction(1, 4), Fraction(2))
    scalar = acc.discrete_gaussian(0.5, 2.0, scalar=True).spec
    vector = acc.discrete_gaussian(0.5, 2.0).spec
    assert scalar is not None and vector is not None
    assert not _describes(spread, scalar)
    assert _describes(whole, scalar) and _describes(spread, vector) and _describes(whole, vector)
    assert _describes(Noise("discrete_gaussian", Fraction(1, 4), Fraction(2), coordinate_sensitivity=Fraction(2)),
                      scalar)


def test_a_two_coordinate_release_is_charged_l2_sensitivity_root_two() -> None:
    """Two coordinates each moved by one step under one discrete Gaussian noise (`coordinate_sensitivity=1`, the L2
    sensitivity √2 declared as the rational 3/2 above it): the floor a plan's curves are held to is ⌊α⌋·⌊Δ²⌋/(2σ²)
    with ⌊Δ²⌋ = 2, i.e. L2 sensitivity √2, not 1 (one coordinate) and not 3/2; hand-computed at σ² = 4: ρ = 1/4."""
    noise = Noise("discrete_gaussian", Fraction(4), Fraction(3, 2), coordinate_sensitivity=Fraction(1))
    orders = np.array([1.5, 2.0, 3.0, 10.0, 64.0])
    assert [float(v) for v in noise.rdp(orders)] == [0.25, 0.5, 0.75, 2.5, 16.0]
    root_two = acc.discrete_gaussian(2.0, math.sqrt(2.0))          # the vector curve of L2 sensitivity √2
    assert np.all(root_two.rdp_at(orders) >= noise.rdp(orders))
    assert np.all(acc.discrete_gaussian(2.0, 1.0).rdp_at(orders[1:]) < noise.rdp(orders[1:]))   # one coordinate: short


def test_statistical_a_two_coordinate_release_against_its_charged_curve() -> None:
    """Neighbouring datasets: the release (c₁ + Z₁, c₂ + Z₂) against (c₁ + 1 + Z₁, c₂ + 1 + Z₂), Z discrete Gaussian
    of σ = 1. The audit (every output and their sum, the likelihood ratio's statistic) passes the curve charged for
    L2 sensitivity √2 and catches the one for sensitivity 1 (one coordinate)."""
    from dpframe.noise import SeededRandomSource, discrete_gaussian
    from dpframe.testing.audit import audit_claims, curve_claims

    def runs(shift: int, seed: int, n: int = 40_000) -> dict[str, np.ndarray]:
        z = discrete_gaussian(Fraction(1), 2 * n, SeededRandomSource(seed)).reshape(n, 2) + shift
        return {"x1": z[:, 0], "x2": z[:, 1], "sum": z.sum(axis=1)}

    samples = (runs(0, 1), runs(1, 2), runs(0, 3), runs(1, 4))
    eps = [0.5, 1.0, 1.5, 2.0]
    honest = audit_claims(*samples, curve_claims([acc.discrete_gaussian(1.0, math.sqrt(2.0))], eps))
    assert honest.passed
    assert not audit_claims(*samples, curve_claims([acc.discrete_gaussian(1.0, 1.0, scalar=True)], eps)).passed


# -- 2. conversions at a δ below the normal floats -------------------------------------------------------------------

SUBNORMAL = [1e-310, 1e-315, 1e-320, 5e-324]


def _gaussian_delta(mu: float, eps: float) -> Decimal:
    """δ(ε) of the Gaussian mechanism with μ = Δ/σ: Q(ε/μ − μ/2) − e^ε Q(ε/μ + μ/2), to ~10⁻⁷⁰ (Decimal, 90 digits)."""
    from .selection_exact import PREC, dec, normal_tail

    with localcontext() as ctx:
        ctx.prec = PREC
        m, e = dec(mu), dec(eps)
        return normal_tail(e / m - m / 2) - e.exp() * normal_tail(e / m + m / 2)


@pytest.mark.parametrize("delta", SUBNORMAL)
def test_soundness_rdp_standard_conversion_below_the_normal_floats(delta: float) -> None:
    """Found: the standard RDP conversion ε(α) + ln(1/δ)/(α − 1) computed 1/δ, which overflows to ∞ for δ below
    5.6·10⁻³⁰⁹: `epsilon(δ, "standard")` was ∞ where a finite ε exists. Now −ln δ (log space). Against the exact
    minimum for a Gaussian of σ = 1 (ε(α) = α/2): min_α α/2 + L/(α − 1) = 1/2 + √(2L), L = ln(1/δ) of the float δ,
    in 90-digit Decimals; the result is at least that (an upper bound) and within 10⁻⁶ of it."""
    rdp = acc.RDPAccountant().compose(acc.gaussian(1.0))
    got = rdp.epsilon(delta, "standard")
    with localcontext() as ctx:
        ctx.prec = 90
        exact = Decimal(1) / 2 + (2 * -Decimal(delta).ln()).sqrt()
    assert math.isfinite(got) and Decimal(got) >= exact and got <= float(exact) * (1 + 1e-6)
    assert rdp.epsilon(delta) <= got


@pytest.mark.parametrize("delta", SUBNORMAL)
def test_soundness_a_curve_s_epsilon_below_the_normal_floats_is_an_upper_bound(delta: float) -> None:
    """Found: `PrivacyCurve.approx_dp` inverts the float privacy profile, whose values below the normal floats carry
    absolute errors of subnormal ulps: the Gaussian (σ = 1) at δ = 5·10⁻³²⁴ returned ε = 38.865 where its exact δ
    is 6.5·10⁻³²⁴ (1.3 δ; 1.03 δ at 10⁻³²²), not an upper bound. Below the normal floats it is now the RDP
    conversion (log space, with the engine's margin) or the pure bound, whichever is less: at least the exact ε
    (checked against 90-digit Decimals) and finite."""
    got = acc.gaussian(1.0).approx_dp(delta)
    assert math.isfinite(got) and _gaussian_delta(1.0, got) <= Decimal(delta)
    assert got <= _exact_rdp_bound(delta) * (1 + 1e-4)       # the fixed orders, not refined
    assert acc.laplace(1.0).approx_dp(delta) == 1.0          # a pure curve keeps its ε∞ (δ(ε∞) = 0)
    sampled = acc.gaussian(1.0).subsampled(0.01).approx_dp(delta)
    assert math.isfinite(sampled) and sampled < got


def _exact_rdp_bound(delta: float) -> float:
    """The improved RDP conversion's minimum for ε(α) = α/2, over a fine grid of α (a reference, not a bound)."""
    alpha = np.linspace(1.5, 200.0, 400_001)
    return float(np.min(alpha / 2 + np.log1p(-1 / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1)))


def test_a_normal_delta_keeps_the_profile_inversion() -> None:
    """Above the subnormals the profile is inverted as before (tighter than RDP): Gaussian σ = 1 at δ = 10⁻³⁰⁰."""
    got = acc.gaussian(1.0).approx_dp(1e-300)
    assert _gaussian_delta(1.0, got) <= Decimal(1e-300) and got < acc.RDPAccountant().compose(
        acc.gaussian(1.0)).epsilon(1e-300)


# -- 3. the partition-selection threshold τ: δ > ½, and the discrete Gaussian beyond σ² = 10¹⁴ ------------------------


def _achieved(kind: str, l0: int, scale: Fraction, tau: int) -> tuple[Decimal, Decimal]:
    """(lower, upper) bounds of the δ partition selection achieves at threshold ``tau`` (exact for Laplace, and for
    the discrete Gaussian up to σ² = 10⁵; 90-digit Euler–Maclaurin bounds beyond)."""
    from .selection_exact import PREC, any_released, gaussian_tail_range, selection_delta

    with localcontext() as ctx:
        ctx.prec = PREC
        if kind == "discrete_laplace":
            exact = selection_delta(kind, l0, scale, tau)
            return exact, exact
        low, up = gaussian_tail_range(scale, tau - 1)
        return any_released(l0, low), any_released(l0, up)


LARGE_DELTAS = [Fraction(11, 20), Fraction(3, 4), Fraction(9, 10), Fraction(99, 100), Fraction(999_999, 10**6)]


@pytest.mark.parametrize("kind,scales", [
    ("discrete_laplace", [Fraction(1, 10), Fraction(1, 2), Fraction(1), Fraction(3), Fraction(100)]),
    ("discrete_gaussian", [Fraction(1, 1000), Fraction(1, 4), Fraction(1), Fraction(4), Fraction(100),
                           Fraction(10**6), Fraction(10**20)]),
])
def test_soundness_the_threshold_is_the_smallest_sound_one_for_delta_above_a_half(kind: str,
                                                                                 scales: list[Fraction]) -> None:
    """Found: τ had a floor of 2, so at δ > ½ (where the per-group chance δ₁ = 1 − (1 − δ)^{1/L0} can exceed
    P[Z ≥ 0], a little above ½) the threshold was 2 where 1 meets δ: at t = 1, L0 = 1, δ = 0.9 a new group is released
    with probability 0.54 at τ = 2 against δ = 0.9 allowed (sound, but not the threshold the docstring promises).
    τ = 1 is now returned where P[Z ≥ 0] ≤ δ₁ (with the same margins); at every point τ is sound (the δ achieved is at
    most δ, exactly) and τ − 1 is not."""
    from dpframe_aggregates.partition_selection import gaussian_threshold, laplace_threshold

    threshold = laplace_threshold if kind == "discrete_laplace" else gaussian_threshold
    ones = 0
    for scale, delta, l0 in ((s, d, n) for s in scales for d in LARGE_DELTAS for n in (1, 2, 7)):
        tau = threshold(l0, scale, delta)
        assert tau >= 1 and _achieved(kind, l0, scale, tau)[1] <= delta, (scale, delta, l0, tau)
        if tau > 1 and scale <= 10**14:
            assert _achieved(kind, l0, scale, tau - 1)[0] > delta, (scale, delta, l0, tau)
        ones += tau == 1
    assert ones >= 20


def test_a_selection_plan_at_delta_above_a_half_uses_tau_one() -> None:
    """The plan (as `group_by(...).agg(...)` makes it) calibrates, charges and notes τ = 1 at (ε = 1, δ = 0.9),
    L0 = 1: a new group (one unit) is released with probability 1/(1 + e⁻¹) = 0.73 ≤ 0.9; it is charged (1, 0.9)."""
    from dpframe_aggregates.partition_selection import PartitionSelection

    from dpframe.testing import measure_context

    plan = PartitionSelection().plan([dp.len()], measure_context(max_rows=1, grouped=True),
                                     dp.ApproxDP(1, Fraction(9, 10)))
    assert plan.threshold == 1 and plan.cost == dp.ApproxDP(1, Fraction(9, 10))
    assert "τ = 1 " in plan.notes[0]


BEYOND = [Fraction(10**15), Fraction(10**18 + 1), Fraction(10**22), Fraction(10**26 + 3), Fraction(10**30),
          Fraction(2**110)]          # up to the largest σ² the sampler takes (MAX_GAUSSIAN_SIGMA2)


def test_the_gaussian_threshold_beyond_sigma2_1e14_is_sound_and_not_absurd() -> None:
    """Beyond σ² = 10¹⁴ (the exact reference's reach in test_review53d) up to 2¹¹⁰, the largest σ² a plan
    calibrates: at every point the δ achieved at τ is at most δ (a 90-digit Euler–Maclaurin upper bound), τ is at
    most the subgaussian τ, and τ is either the smallest sound one or τ − 1's δ is within 10⁻⁸ of δ (the margins,
    ≈ 2·10⁻⁹ in log space, plus one step of k, ≈ x/σ; past σ² ≈ 10¹⁸ the margins span many k and τ is that much
    above the smallest: e.g. 1,256,307 instead of 2 at σ² = 10³⁰, δ = ½, a threshold of 10⁻⁹ σ)."""
    from dpframe_aggregates.partition_selection import gaussian_threshold, subgaussian_threshold

    from .selection_exact import PREC, per_group_delta

    for s2, delta, l0 in ((s, d, n) for s in BEYOND for d in [*LARGE_DELTAS[:1], Fraction(1, 2), Fraction(1, 10),
                                                              Fraction(1, 10**6), Fraction(1, 10**100)]
                          for n in (1, 7)):
        tau = gaussian_threshold(l0, s2, delta)
        low, up = _achieved("discrete_gaussian", l0, s2, tau)
        assert up <= delta and tau <= subgaussian_threshold(l0, s2, delta), (s2, delta, l0, tau)
        if tau > 1:
            with localcontext() as ctx:
                ctx.prec = PREC
                per_group = per_group_delta(l0, delta)
                from .selection_exact import gaussian_tail_range

                smaller = gaussian_tail_range(s2, tau - 2)[0] > per_group
                close = (per_group - gaussian_tail_range(s2, tau - 1)[1]) / per_group <= Decimal("1e-8")
            assert smaller or close, (s2, delta, l0, tau)


# -- 4. the PLD's FFT margin: an adversarial composition against its exact value -------------------------------------

#: Randomized response of five ε, 273 mechanisms in all: 980,880 distinct composed losses, spread from 0.05 to 2.0.
HETEROGENEOUS = [(0.05, 200), (0.1, 60), (0.37, 9), (1.3, 3), (2.0, 1)]


def _rr_losses(mix: Sequence[tuple[float, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The exact privacy-loss distribution (losses, masses) of composed randomized responses: under P the loss of
    RR(ε) is +ε with probability e^ε/(1 + e^ε), −ε otherwise, so n of them lose ε·(n − 2B), B ~ Binomial(n, q),
    q = 1/(1 + e^ε); the composition is the sum over the kinds (every combination enumerated)."""
    losses, masses = np.zeros(1), np.ones(1)
    for eps, n in mix:
        q = 1 / (1 + math.exp(eps))
        b = np.arange(n + 1)
        log_binom = np.array([math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(n + 1)])
        mass = np.exp(log_binom + b * math.log(q) + (n - b) * math.log1p(-q))
        losses = (losses[:, None] + eps * (n - 2 * b)[None, :]).ravel()
        masses = (masses[:, None] * mass[None, :]).ravel()
    return losses, masses


def test_pld_of_many_heterogeneous_mechanisms_is_an_upper_bound_of_the_exact_composition() -> None:
    """273 randomized responses of five different ε composed by the PLD accountant (one discretisation and one FFT,
    with its single rounding margin, per direction; RR is symmetric) against the exact composition (the enumerated
    loss distribution, δ(ε) = Σ p·(1 − e^{ε − l})₊ summed directly): the exact δ at the ε the PLD reports is at most
    δ at every δ asked (an upper bound), and the ε is within 0.1 % of the exact one at δ ≥ 10⁻⁶ (measured: 4·10⁻⁹
    at 10⁻², 1·10⁻⁵ at 10⁻⁶; below the FFT's resolution, 10⁻¹², the RDP bound takes over, 10 % above)."""
    losses, masses = _rr_losses(HETEROGENEOUS)
    order = np.argsort(losses)
    losses, masses = losses[order], masses[order]
    above = np.cumsum(masses[::-1])[::-1]
    weighted = np.cumsum((masses * np.exp(-(losses - losses[-1])))[::-1])[::-1]

    def fast(eps: float) -> float:          # A − e^ε·B over the losses above ε (for the bisection only)
        i = int(np.searchsorted(losses, eps, side="right"))
        return 0.0 if i == len(losses) else float(above[i] - math.exp(eps - losses[-1]) * weighted[i])

    def exact_delta(eps: float) -> float:   # summed directly: no cancellation
        return math.fsum((masses * np.clip(-np.expm1(eps - losses), 0.0, None)).tolist())

    pld = acc.PLDAccountant()
    for eps, n in HETEROGENEOUS:
        pld.compose(acc.randomized_response(epsilon=eps), n)
    for delta in (1e-2, 1e-6, 1e-12):
        got = pld.epsilon(delta)
        assert exact_delta(got) <= delta, delta
        lo, hi = 0.0, got
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if fast(mid) <= delta else (mid, hi)
        if delta >= 1e-6:
            assert got <= hi * 1.001, (delta, got, hi)


_PI = np.longdouble("3.141592653589793238462643383279502884197")


def _dft_matrix(n: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of −2π·jk/n for k ≤ n/2, j < n, in long double (64-bit mantissa; jk reduced mod n exactly)."""
    j, k = np.arange(n, dtype=np.int64), np.arange(n // 2 + 1, dtype=np.int64)
    angle = -2 * _PI * ((k[:, None] * j[None, :]) % n).astype(np.longdouble) / n
    return np.cos(angle), np.sin(angle)


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="needs an 80-bit long double for the reference")
def test_fft_rounding_per_level_is_far_below_the_assumed_16_ulps() -> None:
    """The FFT margin (numerics.pld.fft_error) assumes each level of scipy's pocketfft rounds within FFT_ETA = 16 ulps
    of its inputs' ‖·‖₁: |fl(Fx)_k − (Fx)_k| ≤ 16U·L·‖x‖₁ forward, and each inverse entry within (2/n)·16U·L·Σ|S_k|
    (L = ⌈log₂ n⌉). Measured against a long-double DFT (its own error, n·2⁻⁶⁴ of the same norms, is added to the
    measurement) on the lengths the PLD uses (5-smooth: radix-4, 2, 3 and 5 passes) with PLD-like inputs (masses over
    700 orders of magnitude, and heavy-headed ones) and Hermitian spectra of such transforms raised to a power: the
    worst, the reference's error included, is 0.9 ulps per level, 18× inside the assumption (FFT_ETA's docstring
    sketches why pocketfft's passes stay within it)."""
    from scipy.fft import irfft, next_fast_len, rfft

    from dpframe.accounting.numerics.pld import FFT_ETA

    u, ld = 2.0**-53, float(np.finfo(np.longdouble).eps)
    rng = np.random.default_rng(55)
    worst = 0.0
    for n in (1024, 729, 625, 960, 1125, 1458):
        assert next_fast_len(n, real=True) == n
        levels = math.ceil(math.log2(n))
        cos, sin = _dft_matrix(n)
        for heavy in (False, True):
            x = rng.random(n - int(rng.integers(0, n // 3))) ** 8 if heavy else np.exp(rng.uniform(-700, 0, n // 2))
            x /= x.sum()
            z = rfft(x, n)
            xl = np.zeros(n, dtype=np.longdouble)
            xl[:len(x)] = x
            err = np.abs(z.real - cos @ xl) + np.abs(z.imag - sin @ xl)
            norm = float(np.sum(x))
            worst = max(worst, (float(np.max(err)) + 2 * n * ld * norm) / (u * levels * norm))
            spectrum = z ** 3
            y = irfft(spectrum, n)
            weight = np.full(n // 2 + 1, 2.0, dtype=np.longdouble)
            weight[0] = 1
            if n % 2 == 0:
                weight[-1] = 1
            sr, si = spectrum.real.astype(np.longdouble), spectrum.imag.astype(np.longdouble)
            exact = ((weight * sr) @ cos + (weight * si) @ sin) / n       # F⁻¹ of the Hermitian spectrum
            size = float(np.sum(np.abs(spectrum)))
            err_inv = float(np.max(np.abs(y - exact))) + 4 * ld * size
            worst = max(worst, err_inv / (2 / n * u * levels * size))
    assert worst < FFT_ETA / u / 10, worst
