"""Issue 21 item 5 (rest): replace-one neighbours and sampling without replacement (fixed-size batches).

Reference values, recomputed outside the repository with dp_accounting 0.6 (never a dependency):

* ``PEER_WOR_RDP``: ``rdp_privacy_accountant._compute_rdp_sample_wor_gaussian(q, σ, orders)`` (WBK19 Thm 27),
  σ relative to the *replace-one* sensitivity (so dpframe's add/remove ``gaussian(sigma=2σ)``);
* ``PEER_WOR_EPS``: ``RdpAccountant(neighboring_relation=REPLACE_ONE)`` with
  ``SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(σ))`` composed T times, ``get_epsilon(δ)``;
* ``PEER_REPLACE_ONE``: ``PLDAccountant(REPLACE_ONE, value_discretization_interval=1e-4)`` with
  ``GaussianDpEvent(σ)`` × T (its pair N(−Δ, σ²) vs N(Δ, σ²): the add/remove sensitivity doubled) and with
  ``RandomizedResponseDpEvent(q, k)`` once (its count is ignored for randomized response).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.budgets import ApproxDP

# ----------------------------------------------------------------------------------------- replace-one
PEER_REPLACE_ONE = [(2.0, 10, 1e-6, 19.423656477106302), (5.0, 100, 1e-5, 24.381610883857388)]


@pytest.mark.parametrize(("sigma", "times", "delta", "peer"), PEER_REPLACE_ONE)
def test_replace_one_gaussian_matches_dp_accountings_pld(sigma: float, times: int, delta: float, peer: float) -> None:
    curve = acc.replace_one(acc.gaussian(sigma))
    assert acc.PLDAccountant().compose(curve, times=times).epsilon(delta) == pytest.approx(peer, rel=1e-7)
    assert curve.rdp_at([2.0, 8.0]) == pytest.approx([2 * 4 / (2 * sigma**2), 8 * 4 / (2 * sigma**2)])  # 4ρα
    assert curve.rho == pytest.approx(4 / (2 * sigma**2)) and curve.neighbours == "replace_one"


@pytest.mark.parametrize(("q", "k", "delta", "peer"), [(0.5, 4, 1e-6, 1.60949839999872),
                                                       (0.2, 10, 0.05, 3.650686174589431),
                                                       (0.2, 10, 0.2, 3.4340151377808388)])
def test_randomized_response_is_already_a_replace_one_curve(q: float, k: int, delta: float, peer: float) -> None:
    rr = acc.randomized_response(1 - q + q / k, k=k)
    curve = acc.replace_one(rr)
    assert list(curve.rdp_at([2.0, 8.0])) == list(rr.rdp_at([2.0, 8.0]))
    assert peer * (1 - 1e-4) <= acc.PLDAccountant().compose(curve).epsilon(delta) <= peer


def test_exact_conversions_double_the_sensitivity_or_epsilon() -> None:
    lap = acc.replace_one(acc.laplace(scale=4.0))                  # ε = 2Δ/b = 0.5: δ(ε') = 1 − e^{(ε' − 0.5)/2}
    assert lap.eps_inf == 0.5 and lap.delta_at(0.2) == pytest.approx(-math.expm1((0.2 - 0.5) / 2))
    assert acc.replace_one(acc.pure(0.3)).eps_inf == 0.6
    br = acc.replace_one(acc.exponential(0.3))                     # 0.3-bounded range twice: 0.6-bounded range
    assert br.rdp_at([2.0])[0] == pytest.approx(acc.exponential(0.6).rdp_at([2.0])[0])
    assert acc.replace_one(acc.zcdp(0.01)).rho == 0.04
    two = acc.replace_one(acc.approx(1.0, 1e-6))                   # group privacy: (2ε, (1 + e^ε)δ)
    assert two.eps_inf == 2.0 and two.delta0 == pytest.approx((1 + math.e) * 1e-6)
    assert acc.replace_one(acc.discrete_laplace(2.0, sensitivity=3)).eps_inf == 3.0
    both = acc.replace_one(acc.composition([acc.gaussian(3.0), acc.laplace(2.0)]))
    assert both.rdp_at([2.0])[0] == pytest.approx(2 * 4 / 18 + acc.laplace(1.0).rdp_at([2.0])[0])
    assert both.neighbours == "replace_one" and acc.replace_one(both) is both


def test_general_conversion_weak_triangle_and_group_privacy() -> None:
    """A curve known only by ε(α) = α/8 (a Gaussian, σ = 2): Mironov's Prop. 11 at α = 2, p = 3/2 gives
    (2 − 2/3)·ε(3) + ε(4) = 1.0, the exact 4ρα; at α = 1.1 it is above 4ρα = 0.55 (never below)."""
    only_rdp = acc.replace_one(acc.from_rdp(lambda a: a / 8))
    v = only_rdp.rdp_at([1.1, 2.0, 4.0, 100.0])
    assert v[1] == pytest.approx(1.0) and np.all(v >= np.array([1.1, 2.0, 4.0, 100.0]) / 2 * (1 - 1e-12))
    assert v[0] > 0.55 and v[3] < 50 * 1.001
    lap = acc.laplace(1.0)                                    # the Laplace's own curve, as an RDP-only one
    general = acc.replace_one(acc.from_rdp(lambda a: float(lap.rdp_at([a])[0]), eps_inf=1.0))
    orders = [1.5, 2.0, 8.0, 64.0]
    assert np.all(general.rdp_at(orders) >= acc.laplace(0.5).rdp_at(orders) * (1 - 1e-12))   # ≥ exact: Δ = 2
    assert np.all(general.rdp_at(orders) <= acc.pure(2.0).rdp_at(orders))                  # capped by 2ε∞-DP
    # a curve known only by δ(ε): δ(ε₁) + e^{ε₁}δ(ε − ε₁) ≥ the exact δ of N(2Δ), equal at ε₁ = ε/2 − μ²/2
    g = acc.gaussian(2.0)
    only_profile = acc.replace_one(acc.from_profile(lambda e: g.delta_at(e)))
    exact = acc.gaussian(1.0)
    for eps in (0.0, 0.3, 1.0, 2.0, 4.0):
        assert only_profile.delta_at(eps) >= exact.delta_at(eps) * (1 - 1e-12)
    assert only_profile.delta_at(1.0) == pytest.approx(exact.delta_at(1.0), rel=1e-12)     # ε₁ = 0.375 on the grid
    sampled = acc.replace_one(acc.gaussian(1.0).subsampled(0.01))                        # Poisson first, then convert
    assert sampled.label == "Gaussian(σ=1, Δ=1) sampled at rate 0.01, replace-one"
    assert acc.gaussian(1.0).subsampled(0.01).rdp_at([8.0])[0] < sampled.rdp_at([8.0])[0] < 8 * 4 / 2
    with_delta0 = acc.replace_one(acc.zcdp(0.01, delta0=1e-9))                           # profile only
    assert with_delta0.rdp is None and with_delta0.delta_at(10.0) >= 1e-9


def test_one_relation_per_accountant_composition_and_session() -> None:
    a = acc.RDPAccountant().compose(acc.replace_one(acc.gaussian(2.0)))
    assert a.neighbours == "replace_one" and "neighbours: replace-one" in a.explain(1e-6)
    assert "neighbours: replace-one" in acc.PLDAccountant().compose(acc.replace_one(acc.laplace(1.0))).explain()
    with pytest.raises(dp.BudgetError) as info:
        a.compose(acc.gaussian(2.0))
    assert info.value.argument == "charges" and "replace_one" in str(info.value)
    with pytest.raises(dp.BudgetError) as info:
        acc.composition([acc.gaussian(2.0), acc.replace_one(acc.gaussian(2.0))])
    assert info.value.argument == "curves"
    with pytest.raises(dp.BudgetError) as info:
        acc.replace_one(acc.gaussian(2.0)).subsampled(0.1)
    assert info.value.argument == "rate"
    with pytest.raises(dp.BudgetError) as info:
        acc.RDPAccountant(ApproxDP(1, 1e-6)).charge_plan(dp.PureDP(1), [acc.replace_one(acc.laplace(1.0))])
    assert info.value.argument == "curves"


# ------------------------------------------------------------------------------------ without replacement
# (q = m/n, σ per replace-one sensitivity) → ε(α) at α = 2, 3, 4, 8, 16, 32, 64, 256, 2.5
PEER_WOR_RDP = {
    (0.01, 1.0): [0.0005435086381094331, 0.0008348726849544131, 0.0011416065565370108, 0.002684165012688936,
                  3.1340609222758506, 11.26863552351778, 27.332734210751145, 123.37948854732396, 0.0007377513360060864],
    (0.01, 4.0): [2.5797450810048217e-05, 3.8761469258154765e-05, 5.17685645060737e-05, 0.00010422071096167656,
                  0.00021108224276754654, 0.00043190385563910723, 0.0008951183598387118, 3.379500574721464,
                  3.444012977545259e-05],
    (0.5, 1.0): [0.8582975333721059, 1.1562086477166234, 1.4592934401736752, 3.3089587114594385, 7.306853472036618,
                 15.306852819440126, 31.306852819440056, 127.30685281944005, 1.0569049429351176],
}


@pytest.mark.parametrize(("key", "values"), PEER_WOR_RDP.items())
def test_without_replacement_gaussian_rdp_matches_dp_accounting(key: tuple[float, float], values: list[float]) -> None:
    q, sigma = key
    n = 10_000
    curve = acc.sampled_without_replacement(acc.gaussian(2 * sigma), sample_size=round(q * n), population=n)
    got = curve.rdp_at([2, 3, 4, 8, 16, 32, 64, 256, 2.5])
    assert got == pytest.approx(values, rel=1e-11)          # Thm 27's χ_k: an upper bound, to ~1e-12
    assert curve.rdp_at([1.5])[0] == min(values[0], 1.5 / (2 * sigma**2))  # α < 2: the α = 2 value, or the base's


@pytest.mark.parametrize(("n", "m", "sigma", "steps", "delta", "peer"), [
    (60000, 256, 1.1, 14062, 1e-5, 5.243254241628138),
    (10000, 100, 2.0, 1000, 1e-6, 1.629192245961691),
    (1000, 100, 4.0, 50, 1e-5, 1.574959636381346),
])
def test_without_replacement_epsilon_matches_dp_accounting(n: int, m: int, sigma: float, steps: int, delta: float,
                                                           peer: float) -> None:
    curve = acc.sampled_without_replacement(acc.gaussian(2 * sigma), sample_size=m, population=n)
    assert acc.RDPAccountant().compose(curve, times=steps).epsilon(delta) == pytest.approx(peer, rel=1e-9)


def _theorem_9(rate: float, eps: float, alpha: int) -> float:
    """WBK19 Thm 9 by hand for a replace-one ε-DP Laplace (ε(j) = Laplace RDP, ε∞ = ε)."""
    def rdp(a: int) -> float:
        return eps + math.log1p((a - 1) * math.expm1((1 - 2 * a) * eps) / (2 * a - 1)) / (a - 1)
    em1 = math.expm1(eps)
    total = 1 + rate**2 * math.comb(alpha, 2) * min(4 * math.expm1(rdp(2)), math.exp(rdp(2)) * min(2, em1**2))
    total += sum(rate**j * math.comb(alpha, j) * math.exp((j - 1) * rdp(j)) * min(2, em1**j)
                 for j in range(3, alpha + 1))
    return math.log(total) / (alpha - 1)


def test_without_replacement_general_bound_profile_and_pure_cap() -> None:
    lap = acc.laplace(scale=4.0)                                     # replace-one: ε = 0.5
    batch = acc.sampled_without_replacement(lap, sample_size=20, population=1000)
    assert batch.rdp_at([2, 3, 6]) == pytest.approx([_theorem_9(0.02, 0.5, a) for a in (2, 3, 6)], rel=1e-12)
    assert batch.eps_inf == pytest.approx(math.log1p(0.02 * math.expm1(0.5)))
    for e in (0.001, 0.005, 0.009):                                  # BBG18: γ·δ(log(1 + (e^ε − 1)/γ))
        inner = math.log1p(math.expm1(e) / 0.02)
        assert batch.delta_at(e) == pytest.approx(0.02 * -math.expm1((inner - 0.5) / 2), rel=1e-9)
    assert acc.sampled_without_replacement(lap, 5, 5).label == acc.replace_one(lap).label   # the whole population
    again = acc.from_json(batch.to_json())
    assert again.label == batch.label and list(again.rdp_at([2.5])) == list(batch.rdp_at([2.5]))
    assert acc.from_json(acc.replace_one(lap).to_json()).eps_inf == 0.5


def test_without_replacement_pld_is_tighter_than_its_rdp() -> None:
    """The PLD of the profile (symmetric: both orders) lies between dp_accounting's Poisson add/remove PLD at
    the same μ (its directions: 0.7209, 0.6656; dp_accounting 0.7229550292537184) and the WBK19 RDP bound."""
    curve = acc.sampled_without_replacement(acc.gaussian(4.0), sample_size=100, population=10_000)
    pld = acc.PLDAccountant().compose(curve, times=1000).epsilon(1e-6)
    assert 0.7229550292537184 < pld < 1.629192245961691


def test_without_replacement_bounds_a_small_instance_by_brute_force() -> None:
    """n = 3 units with values in [−1, 1], a batch of m = 1, Gaussian noise σ = 1 on it (add/remove Δ = 1): the
    output is a mixture of three Gaussians; unit 1 replaced (1 → −1). Every configuration's divergences (both
    orders, by a fine Riemann sum) stay below the curve; x₂ = x₃ = −1 attains BBG18's profile (to 1e-15
    with mpmath: 0.12103717381064993 at ε = 1)."""
    curve = acc.sampled_without_replacement(acc.gaussian(1.0), sample_size=1, population=3)
    z = np.linspace(-12, 12, 48001)
    dz = z[1] - z[0]

    def mixture(values: list[float]) -> np.ndarray:
        return np.mean([np.exp(-(z - v) ** 2 / 2) / math.sqrt(2 * math.pi) for v in values], axis=0)

    for x2 in (-1.0, 0.0, 1.0):
        for x3 in (-1.0, 1.0):
            p, q = mixture([1.0, x2, x3]), mixture([-1.0, x2, x3])
            for a, b in ((p, q), (q, p)):
                for alpha in (2.0, 4.0):
                    assert np.log(np.sum(a**alpha * b ** (1 - alpha)) * dz) / (alpha - 1) <= curve.rdp_at([alpha])[0]
                for eps in (0.0, 1.0):
                    assert np.sum(np.maximum(a - math.exp(eps) * b, 0)) * dz <= curve.delta_at(eps) * (1 + 1e-6)
    assert curve.delta_at(1.0) == pytest.approx(0.12103717381064993, rel=1e-14)


@pytest.mark.parametrize(("call", "argument"), [
    (lambda: acc.sampled_without_replacement(acc.gaussian(1.0), 11, 10), "sample_size"),
    (lambda: acc.sampled_without_replacement(acc.gaussian(1.0), 0, 10), "sample_size"),
    (lambda: acc.sampled_without_replacement(acc.gaussian(1.0), 2.5, 10), "sample_size"),
    (lambda: acc.sampled_without_replacement(acc.gaussian(1.0), True, 10), "sample_size"),
    (lambda: acc.sampled_without_replacement(acc.gaussian(1.0), 1, None), "population"),
    (lambda: acc.sampled_without_replacement("gaussian", 1, 10), "curve"),
    (lambda: acc.replace_one(None), "curve"),
])
def test_bad_input_names_the_argument(call, argument: str) -> None:  # noqa: ANN001
    with pytest.raises(dp.BudgetError) as info:
        call()
    assert info.value.argument == argument and info.value.fix
