"""Review 53k: in PLD sessions, a plugin's description of its privacy curve against the noise it declares.

What a ``pld`` session enforces: the Rényi filter's values (``fits``, ``remaining``, the refusal), which were checked
against the declared noise's RDP floor; the PLD is composed only for reports (``spent_report()["pld"]``, the
``PLD of this plan`` note of ``history()``/``explain()``) from the charge's descriptions. A description whose RDP is
at least the noise's at the filter's orders can still have a privacy profile below the noise's: a Gaussian described
on discrete Laplace noise. The attack here is on the reports (the accepted count is the filter's, unchanged).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp_charge import FILTER_ORDERS
from dpframe.mechanism import Noise, Statistic
from dpframe.testing import pin_mechanisms

ROWS = Statistic("rows")
DATA = pl.DataFrame({"u": list(range(40)), "x": [1.0] * 40, "g": ["a", "b"] * 20})
ORDERS = np.asarray(FILTER_ORDERS, dtype=np.float64)


def _widest_gaussian(noise: Noise) -> float:
    """The largest σ whose Gaussian RDP (α/(2σ²)) is still at least ``noise``'s at every order the filter reads."""
    floor = np.asarray(noise.filter_rdp(), dtype=np.float64)
    return float(np.sqrt(np.min(ORDERS / (2 * floor)))) * (1 - 1e-6)


def _gaussian_on_laplace(noise: Noise) -> acc.PrivacyCurve:
    return acc.gaussian(_widest_gaussian(noise))


class Described:
    """A plugin row count adding discrete Laplace noise (calibrated to its pure share) and describing its curve by
    ``describe(noise)``: a dpframe curve whose RDP passes the noise floor at the filter's orders."""

    notions = frozenset({"pure", "zcdp"})

    def __init__(self, name: str, describe: Any) -> None:
        self.name = name
        self.handles = frozenset({name})
        self.describe = describe

    def validate(self, measure: Any, ctx: Any) -> None:
        pass

    def parts(self, measures: Any, ctx: Any) -> int:
        return 1

    def plan(self, measures: Any, ctx: Any, share: dp.Budget) -> Any:
        from tests.adversarial.test_review50d import CountPlan

        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        return CountPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise={"count": noise},
                         count_noise=noise, privacy=(self.describe(noise),))


def _session(mechanism: Described, delta: Fraction = Fraction(1, 5)) -> dp.Session:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.ApproxDP(20, delta),
                      accountant="pld", seed=0)
    pin_mechanisms(sess, mechanism)
    return sess


def _true_pld(noise_scale: float, times: int, delta: float) -> float:
    """ε at ``delta`` of ``times`` discrete Laplace(t) releases of a count (Δ = 1), by dpframe's own curves."""
    return acc.PLDAccountant().compose(acc.discrete_laplace(noise_scale, 1), times=times).epsilon(delta)


@pytest.mark.parametrize("times", [1, 12])
def test_soundness_a_gaussian_description_on_laplace_noise_cannot_understate_the_pld_report(times: int) -> None:
    """Found: a plugin adding discrete Laplace noise (t = 1, a count: ε = 1 per release) and describing its curve as
    acc.gaussian(σ ≈ 1.06) (its RDP at least the noise's at every filter order, so the floor check passes) had its
    charge's description kept for the reports: ``spent_report(0.2)["pld"]`` composed the Gaussian's profile, 0.557
    after one release and 7.17 after twelve, where the noise's own discrete Laplace PLD gives 0.680 and 7.50 (the
    ``PLD of this plan`` note said ε=0.55709 at δ=0.2). Enforcement is by the Rényi filter's values, so the accepted
    count was unchanged; the reports under-stated the loss. Now a description is kept for the reports only where
    it is of the declared noise's own kind and parameters (or a bound every such noise meets), else dropped (the
    reports say they cannot compose the charge)."""
    sess = _session(Described("gauss_on_laplace_r53k", _gaussian_on_laplace))
    frame = sess.table("t")
    for _ in range(times):
        frame.agg(dp.measure("gauss_on_laplace_r53k")).collect(dp.PureDP(1))
    true = _true_pld(1.0, times, 0.2)
    reported = sess.spent_report(0.2)["pld"]
    assert reported is None or reported >= true * (1 - 1e-6), (reported, true)
    note = sess.history()["cost"][0]
    if "PLD of this plan" in note:
        shown = float(note.split("PLD of this plan: ε=")[1].split(" ")[0])
        assert shown >= _true_pld(1.0, 1, 0.2) * (1 - 1e-5), note


def test_the_filter_enforces_the_same_count_either_way() -> None:
    """The filter's values are what a PLD session enforces: a Gaussian-described plugin and an honestly described one
    are refused at the same query (the description only changes what the reports compose)."""
    accepted = []
    for describe in (_gaussian_on_laplace, lambda n: acc.discrete_laplace(float(n.scale), 1)):
        sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1),
                          budget=dp.ApproxDP(3, Fraction(1, 10**6)), accountant="pld", seed=0)
        pin_mechanisms(sess, Described("counted_r53k", describe))
        n = 0
        with pytest.raises(dp.BudgetExceededError):
            for _ in range(400):
                sess.table("t").agg(dp.measure("counted_r53k")).collect(dp.PureDP(Fraction(1, 4)))
                n += 1
        accepted.append(n)
    assert accepted[0] <= accepted[1], accepted


# -- what a description of the noise may be ---------------------------------------------------------------------


def _scaled_laplace(by: float, sensitivity: int = 1) -> Any:
    return lambda n: acc.discrete_laplace(float(n.scale) * by, sensitivity)


KEPT = {
    "its own curve": lambda n: acc.discrete_laplace(float(n.scale), 1),
    "a smaller scale": _scaled_laplace(0.5),
    "the pure bound": lambda n: acc.pure(float(1 / n.scale)),
    "a larger pure bound": lambda n: acc.pure(float(2 / n.scale)),
    "an (ε, δ) bound": lambda n: acc.approx(float(1 / n.scale), 1e-9),
}
DROPPED = {
    "a Gaussian": _gaussian_on_laplace,
    # RDP and ε∞ at least the noise's (b = 0.87 t), yet below randomized response's profile at Δ = 1: δ(0) = 0.434 for
    # 0.462; ε = 0.119 at δ = 0.4 for 0.208
    "a continuous Laplace": lambda n: acc.laplace(float(n.scale) * 0.87),
    "a larger scale": _scaled_laplace(1.0 + 1e-6),
    "a subsampled curve": lambda n: dataclasses.replace(acc.discrete_laplace(float(n.scale), 1),
                                                        spec={"kind": "discrete_laplace", "scale": float(n.scale),
                                                              "sensitivity": 1, "rate": 0.01}),
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_descriptions_of_the_declared_noise_are_kept(name: str) -> None:
    sess = _session(Described("kept_r53k", KEPT[name]))
    sess.table("t").agg(dp.measure("kept_r53k")).collect(dp.PureDP(1))
    assert "PLD of this plan" in sess.history()["cost"][0]
    reported = sess.spent_report(0.2)["pld"]
    assert reported is not None and reported >= _true_pld(1.0, 1, 0.2) * (1 - 1e-6)


@pytest.mark.parametrize("name", sorted(DROPPED))
def test_descriptions_of_other_noise_are_dropped(name: str) -> None:
    sess = _session(Described("dropped_r53k", DROPPED[name]))
    try:
        sess.table("t").agg(dp.measure("dropped_r53k")).collect(dp.PureDP(1))
    except dp.PluginError:          # refused at the floor (a larger scale): nothing reported
        assert name == "a larger scale" and sess.history().height == 0
        return
    assert "PLD of this plan" not in sess.history()["cost"][0]
    assert sess.spent_report(0.2)["pld"] is None


def test_a_gaussian_noise_described_by_a_zcdp_bound_or_its_own_curve_is_kept() -> None:
    """Gaussian noise: its discrete Gaussian curve (σ ≤ its σ, Δ ≥ its Δ) or a ρ-zCDP bound at least its ρ (their PLD
    is derived from the RDP curve, valid for any such mechanism) are kept; a continuous Gaussian is not."""
    def plan_with(describe: Any) -> Any:
        class Gauss(Described):
            def plan(self, measures: Any, ctx: Any, share: dp.Budget) -> Any:
                from tests.adversarial.test_review50d import CountPlan

                noise = Noise.calibrate(Fraction(1), share)
                return CountPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise={"count": noise},
                                 count_noise=noise, privacy=(describe(noise),))
        return Gauss("gauss_r53k", describe)

    def sigma(n: Noise) -> float:
        return float(np.sqrt(float(n.scale))) * (1 - 1e-12)

    for describe, kept in ((lambda n: acc.discrete_gaussian(sigma(n), 1.0, scalar=True), True),
                           (lambda n: acc.discrete_gaussian(sigma(n), 1.0), True),
                           (lambda n: acc.zcdp(1 / (2 * sigma(n) ** 2)), True),
                           (lambda n: acc.gaussian(sigma(n)), False)):
        sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1),
                          budget=dp.ApproxDP(20, Fraction(1, 5)), accountant="pld", seed=0)
        pin_mechanisms(sess, plan_with(describe))
        sess.table("t").agg(dp.measure("gauss_r53k")).collect(dp.ZCDP(Fraction(1, 2)))
        assert ("PLD of this plan" in sess.history()["cost"][0]) is kept, describe(Noise.calibrate(
            Fraction(1), dp.ZCDP(Fraction(1, 2)))).label


def test_built_in_queries_keep_their_reports() -> None:
    """The engine's mechanisms describe the noise they add: their charges and reports in a PLD session are kept."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(40, 1e-5),
                      accountant="pld", seed=0)
    t = sess.table("t")
    t.agg(dp.len()).collect(dp.PureDP(1))
    t.agg(dp.len(), dp.sum("x", bounds=(0, 1))).collect(dp.ZCDP(Fraction(1, 4)))
    t.group_by("g", keys=["a", "b"]).agg(dp.len()).collect(dp.PureDP(1))
    t.group_by("g").agg(dp.len()).collect(dp.ApproxDP(1, 1e-7))
    t.agg(dp.measure("histogram", "x", bounds=(0, 2), edges=(0, 1, 2))).collect(dp.PureDP(1))
    assert all("PLD of this plan" in c for c in sess.history()["cost"])
    assert sess.spent_report()["pld"] is not None
