"""Exact RDP at every order (issue 21 item 1): the Poisson-subsampled Gaussian and Laplace at real α > 1,
α = 1 and ∞, and the RDP accountant never above basic composition of pure mechanisms.

Reference values, recomputed outside the repository (never a dependency):

* ``MPMATH``: log E_Q[(1 − γ + γ·dP/dQ)^α]/(α − 1) (the remove pair, A) and with exponent 1 − α (the add
  pair, B) by mpmath quadrature at 40 digits, P = N(1/σ, 1), Q = N(0, 1);
* ``MPMATH_LAPLACE``: the same for P = Lap(ε, 1), Q = Lap(0, 1) (atoms at ℓ = ±ε added exactly, the density
  part integrated by ``mpmath.quad`` split at ℓ₀ = log((1 − γ)/γ));
* ``DP_ACCOUNTING_PLD_LAPLACE``: ``dp_accounting`` 0.6 ``PLDAccountant`` (grid 1e-4) with
  ``PoissonSampledDpEvent(q, LaplaceDpEvent(b))`` composed T times (dp_accounting has no RDP of the subsampled
  Laplace: an RDP bound must stay above its near-exact ε);
* ``DP_ACCOUNTING``: ``dp_accounting.rdp.rdp_privacy_accountant`` 0.4 (its RDP at integer orders, and
  ``RdpAccountant.get_epsilon`` with ``PoissonSampledDpEvent(q, GaussianDpEvent(σ))`` at δ = 1e-5).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

import dpframe as dp
from dpframe import accounting as acc

# (γ, σ, α, ε_A(α) remove pair, ε_B(α) add pair)
MPMATH = [
    (0.01, 2.5, 1.25, 1.0829614019e-5, 1.08003372706e-5),
    (0.01, 2.5, 1.5, 1.30014179438e-5, 1.29545749895e-5),
    (0.01, 2.5, 2.5, 2.17083611384e-5, 2.15522143719e-5),
    (0.01, 2.5, 4.5, 3.92177225377e-5, 3.86555425332e-5),
    (0.01, 0.5, 1.25, 0.00189777364191, 0.00114376562629),
    (0.01, 0.5, 2.5, 0.0147712782117, 0.00180183873178),
    (0.01, 0.5, 4.5, 3.07917960105, 0.00249830570142),
    (0.1, 1.0, 1.25, 0.00940844072599, 0.00775900736026),
    (0.1, 1.0, 4.5, 0.0842091067168, 0.0209010146334),
    (0.5, 0.5, 1.25, 1.02110523142, 0.371574451055),
    (0.5, 0.5, 4.5, 8.10881183704, 0.528306458015),
    (0.001, 1.0, 1.5, 1.28698495174e-6, 1.28017940536e-6),
    (0.01, 0.25, 1.25, 0.110360317424, 0.00735212859685),
    (0.01, 0.25, 4.5, 30.0790669037, 0.00846351339523),
]


@pytest.mark.parametrize(("rate", "sigma", "alpha", "exact", "add"), MPMATH)
def test_subsampled_gaussian_is_exact_at_fractional_orders(rate: float, sigma: float, alpha: float, exact: float,
                                                           add: float) -> None:
    got = float(acc.gaussian(sigma).subsampled(rate).rdp_at([alpha])[0])
    assert exact * (1 - 1e-10) <= got <= exact * (1 + 5e-8)     # an upper bound, tight (the reference has 12 digits)
    assert add <= exact                                         # MTZ19 §3.3: the remove pair dominates (B_α ≤ A_α)


def test_the_issue_vector_is_no_longer_interpolated() -> None:
    """q = 0.01, σ = 2.5: α = 1.5 was 29% loose (the α = 2 value), α = 2.5 6.7% (CGF interpolation)."""
    curve = acc.gaussian(2.5).subsampled(0.01)
    v = curve.rdp_at([1.25, 1.5, 2.25, 2.5])
    assert v[1] == pytest.approx(1.30014179438e-5, rel=1e-8) and v[3] == pytest.approx(2.17083611384e-5, rel=1e-8)
    assert np.all(np.diff(v) > 0)                               # strictly increasing below 2, no flat α = 2 value


# (γ, σ) → ε(α) at α = 2, 3, 8, 32 by dp_accounting (the exact binomial sum at integer orders)
DP_ACCOUNTING_INT = {
    (0.01, 2.5): [1.735093657081392e-05, 2.6073721692607743e-05, 7.017055184467251e-05, 0.00029397948491116297],
    (0.1, 1.0): [0.017036863236176605, 0.03171230030337645, 1.3783614113481268, 13.623137968522595],
    (0.5, 0.5): [2.6671960885860426, 4.960794445987064, 15.207831793646566, 63.28449323297038],
}


@pytest.mark.parametrize(("key", "values"), DP_ACCOUNTING_INT.items())
def test_integer_orders_match_dp_accounting(key: tuple[float, float], values: list[float]) -> None:
    rate, sigma = key
    got = acc.gaussian(sigma).subsampled(rate).rdp_at([2, 3, 8, 32])
    assert got == pytest.approx(values, rel=1e-9)


@pytest.mark.parametrize(("rate", "sigma", "steps", "peer"), [
    (256 / 60000, 1.1, 14062, 2.5965558697943036),      # DP-SGD on MNIST, 60 epochs of batch 256
    (0.01, 2.5, 50, 0.1447863792989789),
    (0.01, 1.0, 1000, 2.101366525420273),
])
def test_dp_sgd_epsilon_at_most_dp_accountings(rate: float, sigma: float, steps: int, peer: float) -> None:
    eps = acc.RDPAccountant().compose(acc.gaussian(sigma).subsampled(rate), times=steps).epsilon(1e-5)
    assert peer * 0.99 <= eps <= peer * (1 + 1e-9)             # same RDP, orders refined continuously


def test_nested_poisson_samples_stay_exact() -> None:
    twice = acc.gaussian(1.0).subsampled(0.5).subsampled(0.02)
    once = acc.gaussian(1.0).subsampled(0.01)
    assert twice.rdp_at([1.5, 3.0, 7.5]) == pytest.approx(once.rdp_at([1.5, 3.0, 7.5]), rel=1e-12)
    assert acc.from_json(twice.to_json()).rdp_at([1.5])[0] == pytest.approx(once.rdp_at([1.5])[0], rel=1e-12)


def test_gaussians_on_one_sample_use_the_exact_series() -> None:
    both = acc.composition([acc.gaussian(3.0), acc.gaussian(4.0)]).subsampled(0.01)
    one = acc.gaussian(sigma=12 / 5).subsampled(0.01)                       # Δ/σ = √(1/9 + 1/16) = 5/12
    assert both.rdp_at([1.5, 2.5]) == pytest.approx(one.rdp_at([1.5, 2.5]), rel=1e-12)


# ------------------------------------------------------------------------------ the subsampled Laplace
# (γ, ε = Δ/b, α, ε_A(α) remove pair, ε_B(α) add pair)
MPMATH_LAPLACE = [
    (0.1, 1.0, 1.1, 0.00458171796211, 0.00442287698777),
    (0.1, 1.0, 1.5, 0.00631747851183, 0.00595709109031),
    (0.1, 1.0, 2.5, 0.0108072882305, 0.00961552854127),
    (0.1, 1.0, 4.5, 0.0203308012071, 0.0161733914584),
    (0.01, 0.1, 1.25, 6.05663907637e-7, 6.05634101092e-7),
    (0.01, 0.1, 1.5, 7.26802600041e-7, 7.26754909576e-7),
    (0.01, 0.1, 2.5, 1.21137683237e-6, 1.21121786434e-6),
    (0.01, 2.0, 1.25, 0.000242715607448, 0.000236850126867),
    (0.01, 2.0, 10.5, 0.00237257676993, 0.00171627567705),
    (0.01, 10.0, 4.5, 3.92065794006, 0.00974059583702),
    (0.5, 0.5, 1.5, 0.0404952046508, 0.0389252197059),
    (0.5, 1.0, 3.5, 0.316778317039, 0.225333178845),
    (0.3, 5.0, 1.5, 1.54412258558, 0.30263370346),
    (0.2, 3.0, 7.25, 1.24721387524, 0.178987802463),
    (0.05, 1.0, 40.5, 0.0457696420431, 0.020990368962),
    (0.001, 0.5, 1.1, 1.21966643081e-7, 1.21954580376e-7),
]


@pytest.mark.parametrize(("rate", "eps", "alpha", "exact", "add"), MPMATH_LAPLACE)
def test_subsampled_laplace_is_exact_at_fractional_orders(rate: float, eps: float, alpha: float, exact: float,
                                                          add: float) -> None:
    got = float(acc.laplace(scale=1 / eps).subsampled(rate).rdp_at([alpha])[0])
    tol = 2e-6 if exact < 1e-6 else 5e-8                         # the float margin is absolute in (α − 1)ε(α)
    assert exact * (1 - 1e-10) <= got <= exact * (1 + tol)      # an upper bound, tight
    assert add <= exact                                         # symmetric pair: the remove pair dominates


def _binomial_laplace(rate: float, eps: float, alpha: int) -> float:
    """Thesis Thm 2.3.4 at an integer order, by hand: log Σ_ℓ C(α,ℓ)(1−γ)^{α−ℓ}γ^ℓ E_Q[L^ℓ] / (α − 1)."""
    def moment(n: int) -> float:          # E_Q[L^n] = (n e^{(n−1)ε} + (n − 1) e^{−nε})/(2n − 1), n ≥ 1
        return (n * math.exp((n - 1) * eps) + (n - 1) * math.exp(-n * eps)) / (2 * n - 1) if n else 1.0
    total = math.fsum(math.comb(alpha, n) * (1 - rate) ** (alpha - n) * rate**n * moment(n) for n in range(alpha + 1))
    return math.log(total) / (alpha - 1)


def test_subsampled_laplace_integer_orders_are_the_binomial_sum() -> None:
    for rate, eps in [(0.1, 1.0), (0.5, 3.0), (0.2, 0.5)]:
        got = acc.laplace(scale=1 / eps).subsampled(rate).rdp_at([2, 3, 8, 20])
        assert got == pytest.approx([_binomial_laplace(rate, eps, a) for a in (2, 3, 8, 20)], rel=1e-11)


def test_subsampled_laplace_was_interpolated_and_no_longer_is() -> None:
    """α = 1.1 used the α = 2 value (0.00854: +86%); α = 2.5 interpolated the cumulant (0.01160: +7.3%)."""
    curve = acc.laplace(scale=1.0).subsampled(0.1)
    v = curve.rdp_at([1.0, 1.1, 1.5, 2.0, 2.5])
    assert v[1] == pytest.approx(0.00458171796211, rel=1e-8) and v[4] == pytest.approx(0.0108072882305, rel=1e-8)
    assert np.all(np.diff(v) > 0)                               # α = 1 is the KL divergence, from above
    assert acc.laplace(1.0).subsampled(0.5).subsampled(0.2).rdp_at([1.5]) == pytest.approx(v[2], rel=1e-12)
    assert acc.from_json(curve.to_json()).rdp_at([1.5])[0] == v[2]


DP_ACCOUNTING_PLD_LAPLACE = [(0.01, 1.0, 1000, 1e-6, 1.2864239340705244), (0.1, 2.0, 100, 1e-5, 1.8924387244683234)]


@pytest.mark.parametrize(("rate", "scale", "steps", "delta", "peer"), DP_ACCOUNTING_PLD_LAPLACE)
def test_subsampled_laplace_rdp_stays_above_the_peer_pld(rate: float, scale: float, steps: int, delta: float,
                                                         peer: float) -> None:
    curve = acc.laplace(scale).subsampled(rate)
    eps = acc.RDPAccountant().compose(curve, times=steps).epsilon(delta)
    assert peer < eps < peer * 1.1                               # the RDP → (ε, δ) conversion costs ~8% here
    # the peer rounds to nearest; dpframe adds its proven FFT/sum rounding bounds (r53j): a little above it
    assert peer * (1 - 1e-9) <= acc.PLDAccountant().compose(curve, times=steps).epsilon(delta) <= peer * (1 + 2e-5)


# ------------------------------------------------------------------------------------------- α = 1, ∞
def _kl(p: object, q: object, lo: float, hi: float) -> float:
    return integrate.quad(lambda z: p.pdf(z) * (p.logpdf(z) - q.logpdf(z)), lo, hi, limit=200)[0]  # type: ignore[attr-defined]


def test_order_one_is_the_kl_divergence() -> None:
    assert acc.gaussian(2.0).rdp_at([1.0])[0] == pytest.approx(1 / 8)       # D(N(1, 4)‖N(0, 4)) = 1/(2σ²)
    lap = acc.laplace(scale=0.5).rdp_at([1.0])[0]
    assert lap == pytest.approx(_kl(stats.laplace(0, 0.5), stats.laplace(1, 0.5), -30, 30), rel=1e-8)
    p = 0.75
    rr = p * math.log(p / (1 - p)) + (1 - p) * math.log((1 - p) / p)
    assert acc.randomized_response(p).rdp_at([1.0])[0] == pytest.approx(rr)
    assert acc.pure(math.log(3)).rdp_at([1.0])[0] == pytest.approx(rr)       # ε-DP's worst case is RR
    assert acc.composition([acc.laplace(0.5), acc.pure(1.0)]).rdp_at([1.0])[0] == pytest.approx(
        lap + acc.pure(1.0).rdp_at([1.0])[0])
    # the subsampled Gaussian: ε(1 + 10⁻⁶), an upper bound of the remove pair's KL divergence (quadrature)
    mix = integrate.quad(lambda z: (0.99 * stats.norm.pdf(z) + 0.01 * stats.norm.pdf(z, 0.4))
                         * math.log(0.99 + 0.01 * math.exp(0.4 * z - 0.08)), -40, 40, epsabs=1e-16)[0]
    got = acc.gaussian(2.5).subsampled(0.01).rdp_at([1.0])[0]
    assert mix <= got <= mix * (1 + 3e-3)
    for curve in (acc.gaussian(2.0), acc.laplace(1.0), acc.exponential(1.0)):   # the limit of ε(α) as α ↓ 1
        assert curve.rdp_at([1.0])[0] <= curve.rdp_at([1.0001])[0] <= curve.rdp_at([1.0])[0] + 1e-3
    assert acc.approx(1.0, 1e-6).rdp_at([1.0])[0] == math.inf               # δ0 > 0: no RDP curve bounds it


def test_order_infinity_is_the_pure_bound() -> None:
    assert acc.laplace(scale=0.5).rdp_at([math.inf])[0] == 2.0
    assert acc.gaussian(1.0).rdp_at([math.inf])[0] == math.inf
    assert acc.pure(1.0).subsampled(0.01).rdp_at([math.inf])[0] == pytest.approx(math.log1p(0.01 * math.expm1(1)))
    with pytest.raises(dp.BudgetError):
        acc.gaussian(1.0).rdp_at([0.5])
    with pytest.raises(dp.BudgetError):
        acc.RDPAccountant(orders=[1.0, 2.0])                        # conversion orders stay > 1 and finite


# --------------------------------------------------------------------------------- RDP vs basic composition
def test_rdp_accountant_never_exceeds_the_pure_sum() -> None:
    """One Laplace with ε₀ = 0.01: the RDP conversion gives 0.0151 at δ = 1e-6 (dp_accounting's RdpAccountant
    0.01507514), and 0.0241 at δ = 1e-10 was reported (issue 21); basic composition gives ε₀."""
    one = acc.RDPAccountant().compose(acc.laplace(scale=100.0))
    assert one.epsilon(1e-6) == 0.01 and one.conversion(1e-10).rule == "basic"
    assert one.delta(0.01) == 0.0 and 0 < one.delta(0.005) < 1
    assert "basic composition" in one.explain(1e-6)
    many = acc.RDPAccountant().compose(acc.laplace(scale=100.0), times=10_000)
    assert many.epsilon(1e-6) < 10_000 * 0.01 and many.conversion(1e-6).rule != "basic"   # RDP wins for many
    mixed = acc.RDPAccountant().compose(acc.laplace(scale=100.0)).compose(acc.gaussian(100.0))
    assert mixed.conversion(1e-6).rule != "basic"                            # a Gaussian has no pure bound
