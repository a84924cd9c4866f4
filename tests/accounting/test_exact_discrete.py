"""Issue 21 item 2: the PLD's ε at a δ on a point mass, the optimal zCDP conversion for every ρ, and the exact
privacy profile of the discrete Gaussian (the discrete Laplace's is exact already: test_curves_and_accountants).

Reference values: the issue's vectors (from the peers' test suites) and brute-force sums over the pmfs.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.budgets import zcdp_delta, zcdp_log_delta


# ------------------------------------------------------------------------------- point masses in the PLD
def test_epsilon_at_a_point_mass_delta_is_finite_and_exact() -> None:
    """(ε=1, δ=0.1) then (ε=2, δ=0.2): δ(ε) = 0.28 for every ε ≥ 3, so ε(0.28) = 3 (was ∞: 0.28 + 2e-15)."""
    a = acc.PLDAccountant().compose(acc.approx(1.0, 0.1)).compose(acc.approx(2.0, 0.2))
    # δ(3) carries the composition's proven rounding margin (r53j) over 0.28: never below it, by < 1e-10
    assert 0.28 <= a.delta(3.0) <= 0.28 + 1e-10 and a.epsilon(0.28) == pytest.approx(3.0, abs=1e-9)
    assert a.epsilon(0.27999) == math.inf                   # below the point mass: no ε is enough
    three = acc.PLDAccountant().compose(acc.approx(1.0, 0.1), times=3)
    assert three.epsilon(0.271) == pytest.approx(3.0, abs=1e-9)     # 1 − 0.9³, exactly (rationals)
    assert three.epsilon(1 - 0.9**3) == math.inf            # the float 1 − 0.9³ is a rounding below it


def test_a_window_over_the_whole_support_adds_no_tail_bound() -> None:
    rr = acc.PLDAccountant().compose(acc.randomized_response(0.75), times=4)   # losses in {±log 3·k}
    assert rr.delta(4 * math.log(3)) == 0.0 and rr.epsilon(1e-9) == pytest.approx(4 * math.log(3), rel=1e-3)


# --------------------------------------------------------------------------------------- zCDP → (ε, δ)
def test_zcdp_conversion_reaches_the_optimal_order_for_tiny_rho() -> None:
    """ρ = 5e-30 at ε = 1e-13: the optimal order is α ≈ 10¹⁶; δ ≈ 2.6e-234 (was 3.7e-8, the grid ended at 10⁷)."""
    rho, eps = Fraction(5e-30), Fraction(1e-13)
    got = zcdp_log_delta(rho, eps)
    assert zcdp_delta(rho, eps) == pytest.approx(2.6197e-234, rel=1e-3)
    alphas = np.geomspace(1 + 1e-9, 1e20, 20001)                 # CKS20 Cor. 13 at every order of a dense grid
    r, e = float(rho), float(eps)
    grid = (alphas - 1) * (alphas * r - e) - np.log(alphas - 1) + alphas * np.log1p(-1 / alphas)
    assert float(np.min(grid)) - 5e-3 <= got <= float(np.min(grid))             # (the grid's steps are 0.23%)
    near = alphas[np.argmin(grid)] * np.linspace(0.997, 1.003, 2001)           # a fine grid around its best
    fine = (near - 1) * (near * r - e) - np.log(near - 1) + near * np.log1p(-1 / near)
    assert got == pytest.approx(float(np.min(fine)), abs=1e-6)
    assert zcdp_delta(Fraction(1, 2), Fraction(5)) == pytest.approx(2.896122809e-06, rel=1e-8)   # as before


# ------------------------------------------------------------------------------------ discrete Gaussian
def _brute(sigma: float, d: int, eps: float) -> float:
    k = np.arange(-int(60 * sigma) - d, int(60 * sigma) + d + 1, dtype=np.float64)
    p = np.exp(-k * k / (2 * sigma * sigma))
    q = np.exp(-(k - d) ** 2 / (2 * sigma * sigma))
    return float(np.sum(np.maximum(p / p.sum() - math.exp(eps) * q / q.sum(), 0.0)))


@pytest.mark.parametrize(("sigma", "d"), [(1.0, 1), (3.0, 1), (0.5, 2), (20.0, 3)])
def test_discrete_gaussian_profile_is_exact(sigma: float, d: int) -> None:
    curve = acc.discrete_gaussian(sigma, d, scalar=True)
    for eps in (0.0, 0.1, 0.5, 1.0, 2.0, 5.0):
        exact = _brute(sigma, d, eps)
        got = curve.delta_at(eps)
        assert exact <= got <= exact * (1 + 1e-9) + 1e-300


def test_discrete_gaussian_was_75_percent_loose() -> None:
    """The issue's vector: δ(1) of N_Z(0, 1) from the RDP curve is 75% above the exact value."""
    exact, rdp = acc.discrete_gaussian(1.0, scalar=True).delta_at(1.0), acc.discrete_gaussian(1.0).delta_at(1.0)
    assert exact == pytest.approx(_brute(1.0, 1, 1.0), rel=1e-9) and rdp / exact == pytest.approx(1.746, abs=1e-3)


def test_discrete_gaussian_pld_composes_like_brute_force() -> None:
    """Two runs at σ = 1: the PLD accountant's δ(ε) against the exact two-fold loss distribution."""
    k = np.arange(-40, 41, dtype=np.float64)
    p = np.exp(-k * k / 2)
    p /= p.sum()
    loss = (1 - 2 * k) / 2                                     # L(k) = Δ(Δ − 2k)/(2σ²)
    pair = (loss[:, None] + loss[None, :]).ravel()
    mass = (p[:, None] * p[None, :]).ravel()
    a = acc.PLDAccountant().compose(acc.discrete_gaussian(1.0, scalar=True), times=2)
    for eps in (0.5, 1.0, 3.0):
        exact = float(np.sum(mass * np.maximum(0.0, -np.expm1(eps - pair))))
        assert exact <= a.delta(eps) <= exact + 1e-3               # discretisation at step 1e-4: pessimistic


def test_scalar_needs_an_integer_sensitivity_and_round_trips() -> None:
    with pytest.raises(dp.BudgetError) as info:
        acc.discrete_gaussian(1.0, 1.5, scalar=True)
    assert info.value.argument == "sensitivity"
    big = acc.discrete_gaussian(1e5, 3, scalar=True)     # beyond the table: the proven bound (review 52e)
    assert acc.from_json(big.to_json()).delta_at(1e-5) == big.delta_at(1e-5) >= acc.gaussian(1e5, 3).delta_at(1e-5)
    with pytest.raises(dp.BudgetError):
        acc.discrete_gaussian(1.0, scalar="yes")  # type: ignore[arg-type]
    c = acc.discrete_gaussian(2.0, 2, scalar=True).subsampled(0.1)
    again = acc.from_json(c.to_json())
    assert again.label == c.label and again.delta_at(0.3) == c.delta_at(0.3)
    assert acc.discrete_gaussian(2.0).to_json() == '{"kind": "discrete_gaussian", "sensitivity": 1.0, "sigma": 2.0}'
