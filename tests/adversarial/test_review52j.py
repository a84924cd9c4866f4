"""Review 52j: subsampling and composition never round toward the analyst.

Each float result is checked against the same formula in exact arithmetic (``decimal`` at 80 digits, integer
binomials, ``Fraction`` sums and products), never against the float code under test: it is at least the exact
value, and above it by no more than a small relative margin.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from dpframe import accounting as acc
from dpframe.accounting.composition import composition
from dpframe.accounting.numerics.rdp import rdp_discrete_laplace, rdp_linear, rdp_pure
from dpframe.accounting.numerics.subsampling import amplified_epsilon, subsampled_rdp
from dpframe.accounting.rdp_charge import FILTER_ORDERS

EXACT = Context(prec=80, Emax=MAX_EMAX, Emin=MIN_EMIN)
Curve = Callable[[np.ndarray], np.ndarray]


def exact_subsampled_integer(alpha: int, rate: float, eps: np.ndarray, tight: bool) -> Decimal:
    """Thesis Thm 2.3.4 (tight) / Thm 2.3.1 (general) at integer α on the base curve's float values ``eps``
    (ε(2), …, ε(α)), in the thesis' own form (not the log1p form the code uses), exactly."""
    with localcontext(EXACT):
        g = Decimal(rate)
        w = [Decimal(math.comb(alpha, k)) * (1 - g) ** (alpha - k) * g ** k for k in range(2, alpha + 1)]
        x = [(k - 1) * Decimal(float(eps[k - 2])) for k in range(2, alpha + 1)]
        if tight:
            total = 1 + sum(wk * (xk.exp() - 1) for wk, xk in zip(w, x))
        else:
            total = ((1 - g) ** (alpha - 1) * (alpha * g - g + 1) + w[0] * x[0].exp()
                     + 3 * sum((wk * xk.exp() for wk, xk in zip(w[1:], x[1:])), Decimal(0)))
        return +(total.ln() / (alpha - 1))


def exact_subsampled(alpha: float, rate: float, base: Curve, tight: bool, cache: dict[int, Decimal]) -> Decimal:
    """The subsampled curve at any order the filter reads: α ≤ 2 reads α = 2, fractional orders interpolate the
    CGF (α − 1)ε(α) linearly between the integers around them, exactly."""
    def at(n: int) -> Decimal:
        if n not in cache:
            cache[n] = exact_subsampled_integer(n, rate, base(np.arange(2, n + 1, dtype=np.float64)), tight)
        return cache[n]

    if alpha <= 2:
        return at(2)
    lo, hi = math.floor(alpha), math.ceil(alpha)
    if lo == hi:
        return at(lo)
    with localcontext(EXACT):
        a = Decimal(alpha)
        w = a - lo
        return +(((1 - w) * (lo - 1) * at(lo) + w * (hi - 1) * at(hi)) / (a - 1))


BASES: dict[str, Curve] = {
    "gaussian rho=0.5": rdp_linear(0.5), "gaussian rho=1e-4": rdp_linear(1e-4), "gaussian rho=3": rdp_linear(3.0),
    "discrete Laplace t=2": rdp_discrete_laplace(2.0, 1), "discrete Laplace t=0.3": rdp_discrete_laplace(0.3, 1),
    "pure eps=1": rdp_pure(1.0), "pure eps=0.01": rdp_pure(0.01),
}


@pytest.mark.parametrize("name", sorted(BASES))
def test_subsampled_rdp_is_never_below_its_exact_formula(name: str) -> None:
    """Found: the subsampled RDP bounds were rounded to nearest and came out below the exact formula: the tight
    bound by up to 58 ulps (Gaussian ρ = 0.5, γ = 10⁻⁶, α = 24: the log-binomials and ℓ·log γ each carry ulps of
    their size), the general bound by up to 5.6·10⁻⁷ relative (ε = 0.01, γ = 10⁻⁶, α = 4: it took the log of a sum
    ≈ 1 + 10⁻¹⁶, losing all but a few digits). Now both are log1p of a sum of non-negative terms plus a margin for
    the terms' float error, and the interpolated orders are rounded up too: at least the exact value at every order
    the filter reads, at most 10⁻¹⁰ above it."""
    base = BASES[name]
    orders = np.asarray(FILTER_ORDERS, dtype=np.float64)
    for rate in (1e-6, 1e-4, 0.003, 0.05, 0.3, 0.7, 0.99):
        for tight in (True, False):
            values = subsampled_rdp(base, rate, tight, None)(orders)
            cache: dict[int, Decimal] = {}
            for a, v in zip(orders, values):
                ex = exact_subsampled(float(a), rate, base, tight, cache)
                assert Decimal(float(v)) >= ex, (name, rate, tight, a, float(v), ex)
                assert Decimal(float(v)) - ex <= ex * Decimal("1e-10") + Decimal("1e-300"), (name, rate, tight, a)


def test_amplified_epsilon_is_never_below_exact() -> None:
    """log(1 + γ(e^ε − 1)) (the cap of every subsampled curve and the pure ε of a sampled ε-DP mechanism) was
    rounded to nearest: half the time an ulp below. Now it is at least the exact value."""
    for eps in (1e-9, 1e-3, 0.1, 1.0, 7.0, 60.0, 699.0, 750.0, 5000.0):
        for rate in (1e-300, 1e-12, 1e-6, 1e-3, 0.01, 0.3, 0.7, 0.99):
            with localcontext(EXACT):
                x = Decimal(rate) * (Decimal(eps).exp() - 1)
                ex = +(x - x * x / 2 if x < Decimal("1e-30") else (1 + x).ln())   # log1p: the rest is < x³
            v = amplified_epsilon(eps, rate)
            assert Decimal(v) >= ex, (eps, rate)
            assert Decimal(v) - ex <= ex * Decimal("1e-13"), (eps, rate)


def _exact_sum(parts: list[tuple[np.ndarray, int]]) -> list[Fraction]:
    return [sum((Fraction(times) * Fraction(float(v[i])) for v, times in parts), Fraction(0))
            for i in range(len(parts[0][0]))]


def test_rdp_accountant_sum_of_many_curves_is_never_below_exact() -> None:
    """Found: the RDP accountant's composed ε(α) was a float sum of ``times · ε_i(α)`` rounded to nearest: with
    hundreds of mechanisms it was below the exact sum of the curves' values at most orders (by up to hundreds of ulps).
    Every product and every partial sum is now rounded up."""
    rng = np.random.default_rng(52)
    curves = ([acc.gaussian(float(s)) for s in rng.uniform(3.0, 300.0, 250)]
              + [acc.laplace(float(b)) for b in rng.uniform(50.0, 5000.0, 150)]
              + [acc.gaussian(float(s)).subsampled(float(r)) for s, r in zip(rng.uniform(0.8, 3.0, 20),
                                                                             rng.uniform(1e-3, 0.05, 20))])
    accountant = acc.RDPAccountant()
    times = [int(t) for t in rng.integers(1, 4, len(curves))]
    for c, t in zip(curves, times):
        accountant.compose(c, t)
    orders = np.asarray(accountant.orders, dtype=np.float64)
    got = accountant.rdp()
    exact = _exact_sum([(c.rdp_at(orders), t) for c, t in zip(curves, times)])
    assert all(Fraction(float(g)) >= e for g, e in zip(got, exact))
    assert all(Fraction(float(g)) - e <= e * Fraction(1, 10**12) for g, e in zip(got, exact))


def test_composition_curve_sums_are_never_below_exact() -> None:
    """``composition(...)``'s RDP curve, its ε∞, ρ and KL sums: at least the exact sums of the parts (they were
    a float sum and ``math.fsum``, both rounded to nearest)."""
    rng = np.random.default_rng(7)
    parts = [acc.laplace(float(b)) for b in rng.uniform(1.0, 90.0, 200)] + [acc.pure(float(e))
                                                                            for e in rng.uniform(0.01, 1, 50)]
    c = composition(parts)
    orders = np.asarray(FILTER_ORDERS, dtype=np.float64)
    exact = _exact_sum([(p.rdp_at(orders), 1) for p in parts])
    assert all(Fraction(float(g)) >= e for g, e in zip(c.rdp_at(orders), exact))
    assert c.eps_inf is not None and c.kl is not None
    assert Fraction(c.eps_inf) >= sum(Fraction(p.eps_inf) for p in parts if p.eps_inf is not None)
    assert Fraction(c.kl) >= sum(Fraction(p.kl) for p in parts if p.kl is not None)
    gaussians = [acc.zcdp(float(r)) for r in rng.uniform(1e-4, 1e-2, 300)]
    g = composition(gaussians)
    assert g.rho is not None and Fraction(g.rho) >= sum(Fraction(p.rho) for p in gaussians if p.rho is not None)


def test_linear_curve_and_gaussian_rho_round_up_only_when_inexact() -> None:
    """Found: ``rdp_linear`` returned α·ρ and ``gaussian()`` ρ = μ²/2 with μ = Δ/σ, both rounded to nearest
    (σ = 3 gave ρ = 0.05555555555555555 < 1/18). ρ is now Δ²/(2σ²) rounded up from the exact fraction, and αρ is
    raised by an ulp exactly where the float product is below the exact one; exact values (σ = 1, 2, ½; 4 · 0.125)
    are unchanged."""
    rng = np.random.default_rng(3)
    raised = 0
    for sigma in [3.0, 7.0, 0.3, *rng.uniform(0.01, 1e4, 300)]:
        exact = Fraction(1) / (2 * Fraction(float(sigma)) ** 2)
        rho = acc.gaussian(float(sigma)).rho
        assert rho is not None and Fraction(rho) >= exact, sigma
        assert Fraction(math.nextafter(rho, -math.inf)) < exact, sigma         # the least float at or above it
        mu = 1 / float(sigma)
        raised += Fraction(mu * mu / 2) < exact
    assert raised > 50                                      # the old μ²/2 was below the exact ρ this often
    assert [acc.gaussian(s).rho for s in (1.0, 2.0, 0.5)] == [0.5, 0.125, 2.0]
    orders = np.concatenate([np.asarray(FILTER_ORDERS, dtype=np.float64), rng.uniform(1.01, 1e4, 300)])
    for r in [0.1, 1 / 3, 0.125, 1e-300, 2.5e-320, 1e300, *rng.uniform(1e-6, 10.0, 20)]:
        values = rdp_linear(float(r))(orders)
        for a, v in zip(orders, values):
            ex = Fraction(float(a)) * Fraction(float(r))
            assert Fraction(float(v)) >= ex, (r, a)
            if 2.0 ** -960 < v < 2.0 ** 960:                # beyond, one ulp up without the check
                assert Fraction(math.nextafter(float(v), -math.inf)) < ex, (r, a)   # the least one above
    assert float(rdp_linear(0.125)(np.array([4.0]))[0]) == 0.5
