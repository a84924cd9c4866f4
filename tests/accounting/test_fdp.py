"""f-DP (issue 21 item 4): trade-off curves, power at a false-positive rate and μ-GDP, against the closed
forms of Dong, Roth & Su (2019, 2022): G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (Def. 2.7); Laplace with ε = Δ/b:
1 − e^ε α for α < e^{−ε}/2, e^{−ε}/(4α) up to ½, e^{−ε}(1 − α) beyond; pure ε-DP: max(0, 1 − e^ε α, e^{−ε}(1 − α)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

import dpframe as dp
from dpframe import accounting as acc

FPR = np.array([1e-4, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9])


def _g(mu: float) -> np.ndarray:
    return np.asarray(norm.cdf(norm.ppf(1 - FPR) - mu))


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
def test_gaussian_tradeoff_is_gdp(mu: float) -> None:
    got = acc.tradeoff(acc.gaussian(sigma=1 / mu), FPR)
    assert np.all(got <= _g(mu) + 1e-12) and np.max(np.abs(got - _g(mu))) < 1e-6   # a valid bound, tight


def test_laplace_and_pure_tradeoffs() -> None:
    e = 1.0
    lap = np.where(FPR < math.exp(-e) / 2, 1 - math.exp(e) * FPR,
                   np.where(FPR <= 0.5, math.exp(-e) / (4 * FPR), math.exp(-e) * (1 - FPR)))
    got = acc.tradeoff(acc.laplace(scale=1 / e), FPR)
    assert np.all(got <= lap + 1e-12) and np.max(np.abs(got - lap)) < 1e-6
    pure = np.maximum.reduce([np.zeros_like(FPR), 1 - math.exp(e) * FPR, math.exp(-e) * (1 - FPR)])
    assert acc.tradeoff(acc.pure(e), FPR) == pytest.approx(pure, abs=1e-9)


def test_compositions_and_power() -> None:
    pld = acc.PLDAccountant().compose(acc.gaussian(sigma=2.0), times=4)             # μ = √4/2 = 1
    assert np.max(np.abs(acc.tradeoff(pld, FPR) - _g(1.0))) < 1e-5
    assert acc.gdp_mu(pld) == 1.0 and acc.gdp_mu(acc.composition([acc.gaussian(3.0), acc.gaussian(4.0)])) == \
        pytest.approx(5 / 12)
    assert acc.power(pld, [0.05])[0] == pytest.approx(norm.cdf(norm.ppf(0.05) + 1), abs=1e-5)   # 0.2595
    rdp = acc.RDPAccountant().compose(acc.gaussian(sigma=2.0), times=4)             # valid, looser
    assert np.all(acc.tradeoff(rdp, FPR) <= _g(1.0) + 1e-12)
    zcdp = acc.ZCDPAccountant().compose(acc.gaussian(sigma=2.0), times=4)
    assert np.all(acc.tradeoff(zcdp, FPR) <= _g(1.0) + 1e-12)


def test_gdp_estimate_dominates_the_profile_on_its_grid() -> None:
    sgm = acc.PLDAccountant().compose(acc.gaussian(1.0).subsampled(0.01), times=200)
    mu = acc.gdp_mu(sgm)
    eps = np.linspace(0, sgm.epsilon(1e-12), 50)
    assert np.all(acc.gaussian(sigma=1 / mu).profile()[0](eps) >= sgm.deltas(eps) - 1e-12)
    assert 0 < acc.gdp_mu(acc.laplace(scale=1.0)) < 2


def test_bad_input_names_the_argument() -> None:
    for source in ("gaussian", acc.PLDAccountant()):
        with pytest.raises(dp.BudgetError) as info:
            acc.tradeoff(source, [0.1])  # type: ignore[arg-type]
        assert info.value.argument == "source"
    for fpr in ([], [1.5], ["a"], [[0.1]], math.nan):
        with pytest.raises(dp.BudgetError) as info:
            acc.power(acc.gaussian(1.0), fpr)  # type: ignore[arg-type]
        assert info.value.argument == "fpr"
