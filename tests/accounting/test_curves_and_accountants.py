"""Privacy curves and the standalone accountants against the thesis' numbers and closed forms.

Oracles: research/004_modern_accounting.md §6 (O-1 … O-20), which records which conversion each uses.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special
from scipy.stats import norm

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.numerics.pld import discretize
from dpframe.accounting.numerics.profiles import two_sided
from dpframe.accounting.numerics.subsampling import subsampled_rdp_integer


def gdp_epsilon(mu: float, delta: float) -> float:
    """Exact ε(δ) of μ-GDP (Balle & Wang 2018), by bisection."""
    def d(e: float) -> float:
        return norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2)
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if d(mid) <= delta else (mid, hi)
    return hi


# ------------------------------------------------------------------------------------ thesis numbers
def test_o3_gaussian_8192_rdp_standard_continuous_and_improved() -> None:
    a = acc.RDPAccountant().compose(acc.gaussian(sigma=85.0), times=8192)
    assert a.epsilon(delta=1e-5, conversion="standard") == pytest.approx(5.676485, abs=2e-6)
    assert a.epsilon(delta=1e-5, conversion="improved") == pytest.approx(5.082940, abs=2e-6)
    assert a.epsilon(delta=1e-5) == pytest.approx(5.082940, abs=2e-6)     # the tighter one is used
    integer = acc.RDPAccountant(orders=range(2, 400)).compose(acc.gaussian(sigma=85.0), times=8192)
    assert integer.conversion(1e-5, "standard", refine=False).epsilon == pytest.approx(5.704108, abs=2e-6)
    assert "improved conversion at α" in a.explain(1e-5) and "standard conversion gives 5.67648" in a.explain(1e-5)


def test_o4_subsampled_gaussian_tight_bound() -> None:
    a = acc.RDPAccountant(orders=range(2, 400)).compose(acc.gaussian(sigma=85.0).subsampled(rate=0.25), times=8192)
    std = a.conversion(1e-5, "standard", refine=False)
    assert std.epsilon == pytest.approx(1.313166, abs=2e-6) and std.alpha == 19
    imp = a.conversion(1e-5, "improved", refine=False)
    assert imp.epsilon == pytest.approx(1.0844840332, abs=1e-8) and imp.alpha == 17


def test_o7_o18_subsampled_rdp_values_and_precision() -> None:
    g = lambda s: (lambda a: a / (2 * s * s))  # noqa: E731
    assert subsampled_rdp_integer(2, 0.25, g(85.0), tight=True) == pytest.approx(8.651080289895e-6, rel=1e-10)
    assert subsampled_rdp_integer(32, 0.25, g(85.0), tight=True) == pytest.approx(1.385251598616e-4, rel=1e-10)
    assert subsampled_rdp_integer(128, 0.01, g(2.0), tight=True) == pytest.approx(11.35856863145, rel=1e-10)
    assert subsampled_rdp_integer(32, 1e-3, g(1.0), tight=True) == pytest.approx(8.869413905602, rel=1e-10)
    # digest §1.4.1: the expm1 form keeps all digits where naive log-sum-exp loses ~7
    assert subsampled_rdp_integer(2, 1e-5, g(100.0), tight=True) == pytest.approx(1.0000500016667035e-14, rel=1e-12)
    # the 1000-order case does not overflow
    assert subsampled_rdp_integer(1000, 1e-3, g(5.0), tight=True) == pytest.approx(13.08533, rel=1e-5)


@pytest.mark.parametrize("curve, alpha, tight, general", [
    (acc.laplace(scale=2.0), 10, 1.109598e-6, 1.155272e-6),
    (acc.laplace(scale=0.5), 100, 2.321816e-4, 3.451940e-4),
    (acc.randomized_response(p=0.9), 100, 4.471934e-4, 7.048850e-4),
    (acc.gaussian(sigma=5.0), 100, 2.048848e-6, 5.483661e-6),
])
def test_o11_tight_and_general_subsampling(curve, alpha, tight, general) -> None:
    assert curve.rdp is not None
    assert subsampled_rdp_integer(alpha, 1e-3, curve.rdp, tight=True) == pytest.approx(tight, rel=1e-5)
    assert subsampled_rdp_integer(alpha, 1e-3, curve.rdp, tight=False) == pytest.approx(general, rel=1e-5)


def test_o5_o6_o20_noisy_threshold_test() -> None:
    screen = acc.threshold_test(sigma=85.0, threshold=210, lower=30, upper=300)
    assert screen.rdp_at([2, 3, 4, 5]) == pytest.approx([8.811328008e-5, 1.321721532e-4, 1.762303177e-4,
                                                         2.202943656e-4], rel=1e-8)
    a = acc.RDPAccountant().compose(screen, times=8192)
    c = a.conversion(1e-5, "standard")
    assert c.epsilon == pytest.approx(4.437977, abs=2e-6) and c.alpha == pytest.approx(6.65, abs=0.01)
    # Subsampled at γ = 0.25: the thesis prints 1.042 from its tight formula (Thm 2.3.2). The output is
    # binary, so dpframe computes the subsampled divergences exactly; they are a bit smaller.
    sub = acc.RDPAccountant(orders=range(2, 200)).compose(screen.subsampled(rate=0.25), times=8192)
    exact = sub.conversion(1e-5, "standard", refine=False)
    assert 1.040 < exact.epsilon <= 1.042219
    thesis = acc.RDPAccountant(orders=range(2, 200)).compose(
        acc.from_rdp(lambda a: subsampled_rdp_integer(int(a), 0.25, screen.rdp, tight=True)), times=8192)  # type: ignore[arg-type]
    assert thesis.conversion(1e-5, "standard", refine=False).epsilon == pytest.approx(1.042219, abs=2e-6)


def test_o1_o2_single_mechanism_profiles() -> None:
    assert acc.PLDAccountant().compose(acc.gaussian(sigma=1.0)).epsilon(0.3) == pytest.approx(0.276617, abs=2e-5)
    rr = acc.randomized_response(epsilon=1.0)
    assert acc.PLDAccountant().compose(rr).epsilon(0.3) == pytest.approx(0.471750, abs=2e-5)
    # same RDP curve bound, different (ε, δ): RDP is lossy (thesis Ch. 3)
    assert rr.rdp_at([2.0])[0] == pytest.approx(0.735326, abs=1e-6)


@pytest.mark.parametrize("sigma, k, delta", [(85.0, 8192, 1e-5), (50.0, 1000, 1e-4), (100.0, 100, 1e-4),
                                             (1.0, 1, 1e-6), (3.0, 20, 1e-8)])
def test_gaussian_pld_matches_the_exact_closed_form_from_above(sigma, k, delta) -> None:
    exact = gdp_epsilon(math.sqrt(k) / sigma, delta)
    got = acc.PLDAccountant().compose(acc.gaussian(sigma=sigma), times=k).epsilon(delta=delta)
    assert exact - 1e-6 <= got <= exact * 1.001 + 1e-4


def test_o10_subsampled_gaussian_pld_matches_peers() -> None:
    for k, expected in [(100, 0.18981), (1000, 0.62204), (10000, 2.16271)]:
        got = acc.PLDAccountant().compose(acc.gaussian(sigma=2.0).subsampled(rate=0.01), times=k).epsilon(1e-5)
        assert expected - 2e-4 <= got <= expected * 1.002


def test_o9_heterogeneous_gaussian_and_rr_delta() -> None:
    def exact(k: int) -> float:  # binomial mixture of Gaussian hockey sticks (digest O-9)
        ng, nr = (k + 1) // 2, k // 2
        mu, eta, p = math.sqrt(ng) / 5.0, math.log(0.52 / 0.48), 0.52
        total = 0.0
        for j in range(nr + 1):
            w = math.comb(nr, j) * p**j * (1 - p) ** (nr - j)
            e = 2.0 - (2 * j - nr) * eta
            total += w * (norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2))
        return total
    for k, oracle in [(10, 4.168488e-6), (100, 0.1502016)]:
        assert exact(k) == pytest.approx(oracle, rel=1e-5)
        a = acc.PLDAccountant().compose(acc.gaussian(sigma=5.0), times=(k + 1) // 2)
        a.compose(acc.randomized_response(p=0.52), times=k // 2)
        assert oracle * (1 - 1e-6) <= a.delta(epsilon=2.0) <= oracle * 1.01 + 1e-9


# ---------------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("curve", [acc.gaussian(sigma=0.8), acc.laplace(scale=0.7), acc.randomized_response(p=0.8),
                                   acc.discrete_laplace(scale=1.5, sensitivity=3), acc.exponential(epsilon=1.2)])
def test_profiles_match_brute_force_hockey_sticks(curve) -> None:
    """δ(ε) against a direct sum over a fine grid / the pmfs (both orders of the neighbours)."""
    eps = np.array([0.0, 0.1, 0.5, 1.0, 2.0])
    if curve.spec["kind"] == "gaussian":
        x = np.linspace(-12, 13, 400001)
        p, q = norm.pdf(x, 1, 0.8), norm.pdf(x, 0, 0.8)
        brute = [np.trapezoid(np.maximum(p - math.exp(e) * q, 0), x) for e in eps]
    elif curve.spec["kind"] == "laplace":
        x = np.linspace(-30, 31, 1000001)
        p, q = np.exp(-abs(x) / 0.7) / 1.4, np.exp(-abs(x - 1) / 0.7) / 1.4
        brute = [np.trapezoid(np.maximum(p - math.exp(e) * q, 0), x) for e in eps]
    elif curve.spec["kind"] == "randomized_response":
        p, q = np.array([0.8, 0.2]), np.array([0.2, 0.8])
        brute = [np.maximum(p - math.exp(e) * q, 0).sum() for e in eps]
    elif curve.spec["kind"] == "discrete_laplace":
        k = np.arange(-60, 64)
        p, q = np.exp(-abs(k) / 1.5), np.exp(-abs(k - 3) / 1.5)
        p, q = p / p.sum(), q / q.sum()
        brute = [np.maximum(p - math.exp(e) * q, 0).sum() for e in eps]
        # and its exact RDP against the pmf sum
        for a in (1.5, 2.0, 7.0):
            direct = math.log(np.sum(p**a * q ** (1 - a))) / (a - 1)
            assert curve.rdp_at([a])[0] == pytest.approx(direct, rel=1e-9)
    else:  # ε-bounded range: sup over the binary worst cases with losses in [t − ε, t]
        e0 = 1.2
        brute = []
        for e in eps:
            ts = np.linspace(0, e0, 200001)
            qq = (math.exp(e0) - np.exp(ts)) / math.expm1(e0)
            brute.append(float(np.max(qq * np.maximum(1 - np.exp(e - ts), 0))))
    assert curve.hs(eps) == pytest.approx(np.array(brute), abs=2e-6)


def test_laplace_rdp_closed_form_matches_integration() -> None:
    b = 0.9
    x = np.linspace(-40, 41, 2000001)
    p, q = np.exp(-abs(x) / b) / (2 * b), np.exp(-abs(x - 1) / b) / (2 * b)
    for a in (1.5, 2.0, 5.0):
        direct = math.log(np.trapezoid(p**a * q ** (1 - a), x)) / (a - 1)
        assert acc.laplace(scale=b).rdp_at([a])[0] == pytest.approx(direct, rel=1e-6)


def test_subsampled_profile_equals_the_mixture_hockey_stick() -> None:
    """Thm 3.3.5: the remove pair ((1−γ)Q + γP, Q) and its reverse, against direct integration."""
    g, s = 0.3, 1.0
    sub = acc.gaussian(sigma=s).subsampled(rate=g)
    x = np.linspace(-15, 16, 800001)
    p, q = norm.pdf(x, 1, s), norm.pdf(x, 0, s)
    mix = (1 - g) * q + g * p
    for e in (0.0, 0.2, 0.7):
        rem = np.trapezoid(np.maximum(mix - math.exp(e) * q, 0), x)
        add = np.trapezoid(np.maximum(q - math.exp(e) * mix, 0), x)
        assert sub.hs(np.array([e]))[0] == pytest.approx(rem, abs=1e-6)
        assert sub.hs_rev(np.array([e]))[0] == pytest.approx(add, abs=1e-6)
    assert two_sided(sub.hs, sub.hs_rev, np.array([-0.5]))[0] == pytest.approx(
        np.trapezoid(np.maximum(mix - math.exp(-0.5) * q, 0), x), abs=1e-6)


def test_connect_the_dots_dominates_and_keeps_mass() -> None:
    c = acc.laplace(scale=1.3)
    d = discretize(c.hs, c.hs_rev, 0.01)
    assert d.p.min() >= 0 and d.p.sum() + d.p_inf == pytest.approx(1.0, abs=1e-9)
    losses = (d.start + np.arange(len(d.p))) * 0.01
    for e in np.linspace(0, 0.8, 9):
        discrete = float(np.sum(d.p * np.maximum(0, 1 - np.exp(e - losses)))) + d.p_inf
        assert discrete >= c.hs(np.array([e]))[0] - 1e-12          # pessimistic
        assert discrete <= c.hs(np.array([e]))[0] + 1e-4


def test_pure_and_exponential_compose_below_basic() -> None:
    a = acc.PLDAccountant().compose(acc.exponential(epsilon=0.1), times=200)
    assert a.epsilon(1e-6) < acc.BasicAccountant().compose(acc.exponential(epsilon=0.1), times=200).epsilon(1e-6)
    assert acc.PLDAccountant().compose(acc.pure(0.5), times=3).epsilon(1e-9) <= 1.5 + 1e-3


def test_rdp_only_and_profile_only_mechanisms_compose() -> None:
    only_rdp = acc.from_rdp(lambda a: a / 8.0)              # a Gaussian σ = 2, declared by its RDP curve alone
    r = acc.RDPAccountant().compose(only_rdp, times=10).epsilon(1e-5)
    assert r == pytest.approx(acc.RDPAccountant().compose(acc.gaussian(sigma=2.0), times=10).epsilon(1e-5), rel=1e-9)
    assert acc.PLDAccountant().compose(only_rdp, times=10).epsilon(1e-5) <= r + 1e-3
    exact = acc.gaussian(sigma=2.0)
    only_profile = acc.from_profile(lambda e: float(exact.hs(np.array([e]))[0]))
    got = acc.PLDAccountant().compose(only_profile, times=10).epsilon(1e-5)
    assert gdp_epsilon(math.sqrt(10) / 2, 1e-5) - 1e-6 <= got <= gdp_epsilon(math.sqrt(10) / 2, 1e-5) + 2e-3


def test_standalone_contract_and_delta() -> None:
    a = acc.PLDAccountant()
    assert a.compose(acc.gaussian(sigma=1.0).subsampled(rate=0.01), times=1000) is a
    a.compose(acc.laplace(scale=10.0))
    eps = a.epsilon(delta=1e-5)
    assert a.delta(epsilon=eps) == pytest.approx(1e-5, rel=1e-3)
    for cls in (acc.RDPAccountant, acc.BasicAccountant, acc.ZCDPAccountant):
        cls()  # standalone construction works for every accountant
    z = acc.ZCDPAccountant().compose(acc.gaussian(sigma=2.0), times=4)
    assert z.epsilon(1e-6) == pytest.approx(float(dp.ZCDP(0.5).to_approx(1e-6).epsilon), rel=1e-9)
    assert z.delta(z.epsilon(1e-6)) == pytest.approx(1e-6, rel=1e-3)


# ------------------------------------------------------------------------------------ properties
_mech = st.sampled_from([acc.gaussian(sigma=3.0), acc.laplace(scale=5.0), acc.gaussian(sigma=2.0).subsampled(0.05),
                         acc.randomized_response(p=0.6), acc.exponential(epsilon=0.3)])


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(_mech, st.integers(1, 30)), min_size=1, max_size=3), st.integers(1, 20))
def test_more_compositions_never_decrease_epsilon(parts, extra) -> None:
    for cls in (acc.RDPAccountant, acc.PLDAccountant, acc.BasicAccountant):
        a, b = cls(), cls()
        for curve, times in parts:
            a.compose(curve, times=times)
            b.compose(curve, times=times)
        b.compose(parts[0][0], times=extra)
        assert b.epsilon(1e-6) >= a.epsilon(1e-6) - 1e-9


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(_mech, st.integers(1, 40)), min_size=1, max_size=3))
def test_tighter_accountants_are_never_looser_than_basic(parts) -> None:
    pld, basic = acc.PLDAccountant(), acc.BasicAccountant()
    for curve, times in parts:
        pld.compose(curve, times=times)
        basic.compose(curve, times=times)
    assert pld.epsilon(1e-6) <= basic.epsilon(1e-6) * (1 + 1e-3) + 1e-3


# --------------------------------------------------------------------------- §7: wrong formulas
def test_thesis_eq_1_1_typo_is_not_used() -> None:
    """(1.1) prints ε_M(α − 1); the correct standard conversion uses ε(α) (digest §1.2)."""
    a = acc.RDPAccountant(orders=[6.0]).compose(acc.gaussian(sigma=85.0), times=8192)
    rho = 8192 / (2 * 85.0**2)
    assert a.conversion(1e-5, "standard", refine=False).epsilon == pytest.approx(6 * rho + math.log(1e5) / 5)
    assert a.conversion(1e-5, "standard", refine=False).epsilon != pytest.approx(5 * rho + math.log(1e5) / 5)


def test_zcdp_gaussian_exact_conversion_is_not_used_for_rr() -> None:
    """RR(ε0=1) is ½-zCDP but δ(0.277) = 0.376 > 0.3: the GDP-exact formula would under-report."""
    rr = acc.randomized_response(epsilon=1.0)
    assert rr.delta_at(0.277) == pytest.approx(0.376, abs=1e-3)
    assert acc.ZCDPAccountant().compose(rr).delta(0.277) >= 0.376


def test_both_subsampling_directions_are_counted() -> None:
    """Feeding only ((1−γ)Q + γP, Q) certifies remove-only privacy: the add direction must be included."""
    sub = acc.laplace(scale=0.5).subsampled(rate=0.5)
    a = acc.PLDAccountant().compose(sub, times=50)
    only_remove = max(_one_direction(sub.hs, sub.hs_rev, 50), _one_direction(sub.hs_rev, sub.hs, 50))
    # compose() adds its rounding margin at every ε, the accountant only below the window's top loss
    assert a.epsilon(1e-6) == pytest.approx(only_remove, rel=1e-8)
    assert _one_direction(sub.hs_rev, sub.hs, 50) != pytest.approx(_one_direction(sub.hs, sub.hs_rev, 50), rel=1e-3)


def _one_direction(hs, rev, k: int) -> float:
    return acc.PLDAccountant().compose(acc.from_profile(lambda e: float(hs(np.array([e]))[0])), times=k).epsilon(
        1e-6) if hs is rev else _direct(hs, rev, k)


def _direct(hs, rev, k: int) -> float:
    from dpframe.accounting.numerics.pld import DiscretePLD, compose, epsilon_at
    d = discretize(hs, rev, 1e-4)
    p, s, extra = compose([(DiscretePLD(d.start, d.p, d.p_inf), k)], 1e-4)
    return epsilon_at(p, s, extra, 1e-4, 1e-6)


# --------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, argument", [
    (lambda: acc.RDPAccountant(orders=[1.0, 2.0]), "alpha"),
    (lambda: acc.gaussian(sigma=1.0).rdp_at([0.5]), "alpha"),
    (lambda: acc.gaussian(sigma=1.0).subsampled(rate=0.0), "rate"),
    (lambda: acc.gaussian(sigma=1.0).subsampled(rate=1.5), "rate"),
    (lambda: acc.gaussian(sigma=0.0), "sigma"),
    (lambda: acc.gaussian(sigma=-1.0), "sigma"),
    (lambda: acc.laplace(scale=float("nan")), "scale"),
    (lambda: acc.PLDAccountant().compose(acc.gaussian(sigma=1.0)).epsilon(delta=0.0), "delta"),
    (lambda: acc.RDPAccountant().compose(acc.gaussian(sigma=1.0)).epsilon(delta=1.0), "delta"),
    (lambda: acc.BasicAccountant().compose(acc.gaussian(sigma=1.0)).epsilon(delta=-1e-5), "delta"),
    (lambda: acc.PLDAccountant().compose(acc.gaussian(sigma=1.0), times=0), "times"),
    (lambda: acc.RDPAccountant().compose(acc.gaussian(sigma=1.0)).delta(epsilon=-1.0), "epsilon"),
])
def test_bad_input(call, argument) -> None:
    with pytest.raises(dp.DPFrameError) as info:
        call()
    assert info.value.argument == argument and info.value.fix


def test_missing_curve_names_the_accountants_that_can() -> None:
    with pytest.raises(dp.BudgetConversionError) as info:
        acc.ZCDPAccountant().compose(acc.gaussian(sigma=1.0).subsampled(rate=0.1))
    assert "'basic'" in str(info.value) and "'rdp'" in str(info.value) and "'pld'" in str(info.value)
    with pytest.raises(dp.BudgetConversionError) as info:
        acc.RDPAccountant().compose(acc.from_profile(lambda e: 0.0))
    assert "'pld'" in str(info.value) and "'rdp' accountant cannot" in str(info.value)


def test_log_space_binomials_do_not_overflow() -> None:
    assert np.isfinite(special.gammaln(2000.0))
    v = acc.gaussian(sigma=1.0).subsampled(rate=0.5).rdp_at([1024.0])
    assert np.isfinite(v).all()
