"""Calibration (issue 21 item 3): against dp_accounting's ``mechanism_calibration.calibrate_dp_mechanism``
(0.4, tol 1e-6, recomputed outside the repository) and the analytic Gaussian of Balle & Wang (2018), with
the rounding always on the private side.
"""

from __future__ import annotations

import math

import pytest

import dpframe as dp
from dpframe import accounting as acc


def _sgm(sigma: float) -> acc.PrivacyCurve:
    return acc.gaussian(sigma).subsampled(0.01)


@pytest.mark.parametrize(("curve", "steps", "accountant", "peer"), [
    pytest.param(acc.gaussian, 1, acc.PLDAccountant, 3.73063165314211,   # analytic Gaussian, ε = 1, δ = 1e-5
                 marks=pytest.mark.slow),
    (_sgm, 1000, acc.PLDAccountant, 1.4146308506136906),              # DP-SGD: γ = 0.01, 1,000 steps
    (_sgm, 1000, acc.RDPAccountant, 1.513122226321886),
])
def test_smallest_noise_matches_dp_accounting_and_is_safe(curve, steps: int, accountant, peer: float) -> None:  # noqa: ANN001
    sigma = acc.smallest_noise(curve, 1.0, 1e-5, steps=steps, accountant=accountant, tolerance=1e-3)
    assert peer * (1 - 1e-6) <= sigma <= peer * (1 + 2e-3)
    assert accountant().compose(curve(sigma), times=steps).epsilon(1e-5) <= 1.0       # checked: meets the target
    assert accountant().compose(curve(sigma / 1.003), times=steps).epsilon(1e-5) > 1.0   # and nearly optimal


def test_largest_epsilon_per_step_is_safe_and_tight() -> None:
    lap = acc.largest_epsilon(lambda e: acc.laplace(scale=1 / e), 1.0, 1e-5, steps=100, tolerance=1e-3)
    assert acc.PLDAccountant().compose(acc.laplace(scale=1 / lap), times=100).epsilon(1e-5) <= 1.0
    assert acc.PLDAccountant().compose(acc.laplace(scale=1 / (1.003 * lap)), times=100).epsilon(1e-5) > 1.0
    pure = acc.largest_epsilon(acc.pure, 1.0, 1e-5, steps=10, accountant=acc.BasicAccountant, tolerance=1e-6)
    assert 0.1 * (1 - 1e-6) <= pure <= 0.1                            # basic composition: exactly ε/steps


def test_most_steps_matches_dp_accounting() -> None:
    assert acc.most_steps(acc.gaussian(10.0), 1.0, 1e-5) == 7         # dp_accounting: 7
    assert acc.most_steps(acc.laplace(10.0), 1.0, 1e-5) == 10         # dp_accounting: 10
    assert acc.most_steps(acc.laplace(0.5), 1.0, 1e-5) == 0           # one run is already ε = 2
    # the float 0.01 is above 1/100: 100 runs are 1 + 2·10⁻¹⁷ exactly, over ε = 1 (basic composition's total is
    # the exact sum rounded up since review 53a); 1/16 is exact
    assert acc.most_steps(acc.pure(0.01), 1.0, 1e-5, accountant=acc.BasicAccountant) == 99
    assert acc.most_steps(acc.pure(0.0625), 1.0, 1e-5, accountant=acc.BasicAccountant) == 16


def test_calibration_refuses_bad_input_naming_the_argument() -> None:
    for kwargs, argument in [({"epsilon": 0.0}, "epsilon"), ({"epsilon": math.inf}, "epsilon"),
                             ({"delta": 1.5}, "delta"), ({"tolerance": -1.0}, "tolerance"),
                             ({"steps": 0}, "times"), ({"accountant": "pld"}, "accountant")]:
        args = {"epsilon": 1.0, "delta": 1e-5, **kwargs}
        with pytest.raises(dp.BudgetError) as info:
            acc.smallest_noise(acc.gaussian, **args)  # type: ignore[arg-type]
        assert info.value.argument == argument, kwargs
    with pytest.raises(dp.BudgetError, match="not a privacy curve") as info:
        acc.smallest_noise(lambda s: s, 1.0, 1e-5)  # type: ignore[arg-type,return-value]
    assert info.value.argument == "curve"
    with pytest.raises(dp.BudgetError, match="no noise") as info:                # δ0 alone exceeds δ
        acc.smallest_noise(lambda s: acc.approx(1 / s, 1e-3), 1.0, 1e-5, accountant=acc.BasicAccountant)
    with pytest.raises(dp.BudgetError) as info:
        acc.most_steps("gaussian", 1.0, 1e-5)  # type: ignore[arg-type]
    assert info.value.argument == "curve"
