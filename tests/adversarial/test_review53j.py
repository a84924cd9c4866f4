"""Review 53j: the PLD accountant's δ is never below the exact δ (outward rounding of the PLD path).

The envelope masses, the FFT composition and the tail sums rounded to nearest with no margin: Laplace(ε₀ = 1e-9)
at grid 1e-9 had δ(0) 8e-8 relatively below the true 1 − e^{−ε₀/2}, ε₀ = 1e-6 at grid 1e-4 4e-13 below,
ε₀ = 0.5 5e-17 below. Now proven bounds (numerics/pld.py: envelope_error, fft_error, delta_at, tail_error) are
added. References are exact: 80-digit Decimals and exact (Fraction) convolutions of small-support PLDs.
"""

from __future__ import annotations

import math
import random
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from dpframe import accounting as acc
from dpframe.accounting.composition import group_rdp_only
from dpframe.accounting.numerics.pld import DiscretePLD, at_least_one, compose, delta_at, epsilon_at
from dpframe.accounting.numerics.profiles import hs_mixture
from tests.adversarial.test_review52e import exact


@exact
def _laplace_delta0(b: float) -> Decimal:
    """δ(0) of Laplace with scale b (Δ = 1): 1 − e^{−1/(2b)}."""
    return 1 - (-Decimal(1) / (2 * Decimal(b))).exp()


@pytest.mark.parametrize(("eps0", "grid"), [(1e-9, 1e-9), (1e-6, 1e-4), (0.5, 1e-4), (1e-3, 1e-4), (3e-7, 1e-7)])
def test_pld_delta_of_laplace_is_never_below_the_exact_delta(eps0: float, grid: float) -> None:
    """Was 8e-8 (ε₀ = 1e-9), 4e-13 (1e-6), 5e-17 (0.5) relatively below; now at or above, and still tight."""
    b = 1 / eps0
    got = acc.PLDAccountant(grid=grid).compose(acc.laplace(b)).delta(0.0)
    want = _laplace_delta0(b)
    assert Decimal(got) >= want
    assert Decimal(got) <= want * (1 + Decimal("1e-4"))


@exact
def _exact_delta(parts: list[tuple[int, list[Fraction], int]], h: Fraction, eps: Fraction) -> Decimal:
    """δ(ε) of the exact convolution: Σ_{l > ε} p_l·(1 − e^{ε − l}) over losses l = index·h (no mass at ∞)."""
    pmf = {0: Fraction(1)}
    for start, masses, times in parts:
        for _ in range(times):
            out: dict[int, Fraction] = {}
            for i, p in pmf.items():
                for j, q in enumerate(masses):
                    if q:
                        out[i + start + j] = out.get(i + start + j, Fraction(0)) + p * q
            pmf = out
    def dec(x: Fraction) -> Decimal:
        return Decimal(x.numerator) / Decimal(x.denominator)

    total = Decimal(0)
    for i, p in pmf.items():
        if i * h > eps:
            total += dec(p) * (1 - (dec(eps) - dec(i * h)).exp())
    return total


def _exact_delta_plain(parts: list[tuple[int, list[Fraction], int]], h: float, eps: float) -> Decimal:
    return _exact_delta(parts, Fraction(h), Fraction(eps))


def _small_parts(seed: int) -> list[tuple[DiscretePLD, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(2):
        size = rng.randint(2, 6)
        raw = [rng.random() ** 3 for _ in range(size)]
        total = sum(raw) * (1 + rng.random() * 1e-3)
        p = np.array([x / total for x in raw])
        out.append((DiscretePLD(rng.randint(-3, 1), p, 0.0), rng.randint(1, 4)))
    return out


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("h", [1e-9, 1e-4, 0.3])
def test_fft_composition_delta_is_never_below_the_exact_convolution(seed: int, h: float) -> None:
    """compose() + delta_at() against the exact (Fraction) convolution of the same float masses, at every loss."""
    parts = _small_parts(seed)
    pmf, start, extra = compose(parts, h)
    exact_parts = [(d.start, [Fraction(x) for x in d.p], t) for d, t in parts]
    lo = min(start, sum(t * d.start for d, t in parts))
    for index in range(lo - 1, start + len(pmf) + 1, 2):
        eps = max(0.0, index * h)
        want = _exact_delta_plain(exact_parts, h, eps)
        assert Decimal(delta_at(pmf, start, extra, h, eps)) >= want, (index, eps)
        target = float(want) * 1.5
        e = epsilon_at(pmf, start, extra, h, target)
        if target > 1e-9:          # above the margins: a finite ε, whose exact δ meets the target
            assert math.isfinite(e)
            assert _exact_delta_plain(exact_parts, h, e) <= Decimal(target)


def test_group_delta0_and_mixture_are_upper_bounds() -> None:
    """group_rdp_only's δ0 = 1 − Π(1 − δ0)^t and hs_mixture's δ0 + (1 − δ0)·hs were rounded to nearest."""
    rng = random.Random(5)
    below = 0
    for _ in range(300):
        d1, d2 = rng.random() * 10 ** -rng.randint(0, 12), rng.random() * 10 ** -rng.randint(0, 12)
        t1, t2 = rng.randint(1, 40), rng.randint(1, 90)
        entries = [(acc.zcdp(0.1, d1), t1), (acc.zcdp(0.2, d2), t2)]
        (group, _), = group_rdp_only(entries)
        want = 1 - (1 - Fraction(d1)) ** t1 * (1 - Fraction(d2)) ** t2
        assert Fraction(group.delta0) >= want
        value = rng.random() * 10 ** -rng.randint(0, 9)
        mixed = hs_mixture(lambda e, v=value: np.full(len(e), v), d1)(np.array([0.0]))[0]
        mix_want = Fraction(d1) + (1 - Fraction(d1)) * Fraction(value)
        assert Fraction(float(mixed)) >= mix_want
        below += Fraction(float(mixed)) < mix_want * (1 + Fraction(1, 10**12))
    assert below > 0          # and tight: within 1e-12 relative


@pytest.mark.parametrize("seed", range(6))
def test_mass_at_infinity_beyond_64_runs_is_an_upper_bound(seed: int) -> None:
    """The log-space path (more than 64 runs) rounds up by a proven 8 ulps."""
    rng = random.Random(seed)
    probabilities = [(rng.random() * 10 ** -rng.randint(0, 15), rng.randint(20, 200)) for _ in range(4)]
    out = at_least_one(probabilities)
    survive = Fraction(1)
    for p, t in probabilities:
        survive *= (1 - Fraction(p)) ** t
    assert Fraction(out) >= 1 - survive
    assert out <= float(1 - survive) * (1 + 1e-14)


def test_basic_accountant_converts_at_most_the_exact_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """BasicAccountant.epsilon gives each approximate part a δ of at most its exact share + δ0."""
    seen: list[float] = []
    original = acc.PrivacyCurve._approx_dp

    def spy(self: acc.PrivacyCurve, delta: float) -> float:
        seen.append(delta)
        return original(self, delta)

    monkeypatch.setattr(acc.PrivacyCurve, "_approx_dp", spy)
    d0 = 1e-7 / 3
    a = acc.BasicAccountant().compose(acc.gaussian(sigma=3.0), times=3).compose(acc.zcdp(0.1, d0), times=7)
    delta = 1e-5 / 7
    a.epsilon(delta)
    share = (Fraction(delta) - 7 * Fraction(d0)) / 10
    assert seen and all(Fraction(d) <= share + Fraction(d0) for d in seen)
