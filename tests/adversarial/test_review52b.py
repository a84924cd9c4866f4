"""Review 52b: a query family's charge in sessions that charge privacy curves (``accountant="rdp"`` / ``"pld"``).

Stop 51 checked a family plan's ``charge`` against its ``cost`` only where the session charges budgets (``basic``,
``zcdp``); in RDP and PLD sessions a charge of curves was "the plan's to get right". Each test is one attack by a
third-party family registered the documented way (``dpframe_query_families``), whose plan reports an honest cost of
ε = 1 and lies in what the ledger reserves or what the reports read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp_charge import RDPCharge
from dpframe.family import Explain, FamilyPlan
from dpframe.mechanism import Noise, Statistic
from dpframe.planning import sampling_rate
from tests.adversarial.doubles import RowsFamily, installed

ROWS = Statistic("rows")
DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "g": ["a", "b", "c", "d"] * 100,
                     "x": [float(i % 13) for i in range(400)], "y": [i % 2 for i in range(400)]})
TOTAL = dp.ApproxDP(20, Fraction(1, 10**5))


def _session(accountant: str, total: dp.Budget = TOTAL) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=total,
                      accountant=accountant, seed=0)


def _few_orders(honest: acc.PrivacyCurve) -> acc.PrivacyCurve:
    """``honest`` (its spec, label, pure bound and profile) with an RDP curve honest at orders ≥ 64 only."""
    truth = honest.rdp
    assert truth is not None

    def rdp(a: Any) -> Any:
        a = np.asarray(a, dtype=np.float64)
        return np.where(a >= 64, truth(a), 1e-6 * truth(a))
    return dataclasses.replace(honest, rdp=rdp)


class Flip:
    """A FamilyPlan's ``charge`` read through a property: the honest charge on the first read, then a tiny one."""

    def __init__(self, honest: Any, tiny: Any) -> None:
        self.reads, self.honest, self.tiny = 0, honest, tiny

    def __call__(self) -> Any:
        self.reads += 1
        return self.honest if self.reads == 1 else self.tiny


class FlippingPlan(FamilyPlan[Any]):
    """A FamilyPlan whose ``charge`` each read asks the plugin (``flip``)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "charge":
            return object.__getattribute__(self, "flip")()
        return object.__getattribute__(self, name)


class LedgerQuery:
    """A noisy row count (Laplace, ε = the budget's) whose plan lies in one way (``how``) in RDP/PLD sessions."""

    def __init__(self, source: Any, how: str) -> None:
        self.source, self.how = source, how

    def describe(self) -> str:
        return f"rows_{self.how}()"

    def plan(self, budget: Any) -> Any:
        eps = budget.epsilon
        delta = Fraction(self.source.unit.max_rows)
        noise = Noise.calibrate(delta, dp.PureDP(eps))
        accountant, rate = self.source.context.accountant, sampling_rate(self.source.node)
        honest = acc.laplace(scale=float(noise.scale), sensitivity=float(delta))

        def run(reader: Any, rng: Any) -> int:
            exact = int(reader.statistics(self.source.node, (ROWS,))[ROWS.key][0])
            return exact + int(noise.sample(1, rng)[0])

        charge: Any
        if self.how == "small":         # the curve of a hundredth of the cost
            charge = accountant.charge_plan(dp.PureDP(eps / 100), None, rate)
        elif self.how == "small_curve":  # a Laplace curve of a hundredth of the cost, declared as such
            charge = accountant.charge_plan(dp.PureDP(eps), [acc.laplace(float(noise.scale) * 100, float(delta))],
                                            rate)
        elif self.how == "few_orders":  # the honest curve's spec, an RDP curve honest only at orders ≥ 64
            charge = accountant.charge_plan(dp.PureDP(eps), [_few_orders(honest)], rate)
        elif self.how == "no_spec":     # a curve without a description, a hundredth of the honest one
            charge = accountant.charge_plan(dp.PureDP(eps), [acc.from_rdp(lambda a: float(honest.rdp_at([a])[0]) / 100,
                                                                          eps_inf=float(eps) / 100)], rate)
        elif self.how == "pld_profile":  # the honest RDP values, the description (the PLD reports read) of a tiny one
            right = accountant.charge_plan(dp.PureDP(eps), [honest], rate)
            tiny = acc.laplace(float(noise.scale) * 100, float(delta))
            tiny = tiny.subsampled(rate) if rate < 1 else tiny
            charge = dataclasses.replace(right, specs=(tiny.to_json(),))
        elif self.how == "flip":
            honest_charge = accountant.charge_plan(dp.PureDP(eps), [honest], rate)
            tiny_charge = accountant.charge_plan(dp.PureDP(eps / 100), None, rate)
            plan = FlippingPlan(budget, dp.PureDP(eps), honest_charge, "rows", Explain("rows"), run)
            object.__setattr__(plan, "flip", Flip(honest_charge, tiny_charge))
            return plan
        else:                           # honest: the Laplace curve the noise has
            charge = accountant.charge_plan(dp.PureDP(eps), [honest], rate)
        return FamilyPlan(budget, dp.PureDP(eps), charge, "rows", Explain("rows"), run)


HOWS = ("small", "small_curve", "few_orders", "no_spec", "pld_profile", "flip", "honest")


@pytest.fixture(scope="module")
def families() -> Iterator[None]:
    yield from installed("rows_r52b", *ledger_families())


def ledger_families() -> list[RowsFamily]:
    """One family per variant of :data:`HOWS` (reviews 53c and 54a install them too)."""
    return [RowsFamily(f"rows_{how}_r52b", LedgerQuery, how) for how in HOWS]


def _frame(sess: dp.Session, sampled: bool) -> Any:
    frame = sess.table("t")
    return frame.sample(0.5) if sampled else frame


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("how", ["small", "small_curve", "few_orders", "no_spec", "pld_profile"])
def test_soundness_a_family_charge_of_curves_below_its_cost_is_refused(families: Any, how: str, accountant: str,
                                                                       sampled: bool) -> None:
    """Found: in an RDP or PLD session a family plan of cost ε = 1 whose charge was a curve of ε = 1/100 (or the
    honest Laplace curve's description with an RDP curve honest only at orders ≥ 64, or a curve without a
    description, or honest RDP values beside the description of a hundredth of the noise, which the PLD reports
    compose) ran: the ledger reserved what the plan said, on a Poisson sample too. Now a PluginError naming the
    query, nothing charged."""
    sess = _session(accountant)
    remaining = sess.remaining()
    query = getattr(_frame(sess, sampled), f"rows_{how}_r52b")()
    for call in (query.cost, query.explain, query.collect):
        with pytest.raises(dp.PluginError) as refused:
            call(dp.PureDP(1))
        assert f"rows_{how}()" in str(refused.value)
    assert sess.history().height == 0 and sess.remaining() == remaining


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_an_honest_family_of_curves_is_charged_its_curves(families: Any, accountant: str, sampled: bool) -> None:
    """The honest variant (the Laplace curve its noise has, amplified on a sample) runs and is charged what
    ``cost()`` said, below what the cost's own curve would charge (its tight curve is kept)."""
    sess = _session(accountant)
    query = getattr(_frame(sess, sampled), "rows_honest_r52b")()
    charge = query.cost(dp.PureDP(1))
    rate = 0.5 if sampled else 1.0
    floor = sess.accountant.charge_plan(dp.PureDP(1), None, rate)
    assert isinstance(charge, RDPCharge) and min(np.array(charge.values) / np.array(floor.values)) < 0.9
    query.collect(dp.PureDP(1))
    assert sess.history().height == 1
    if accountant == "pld":
        assert "PLD of this plan" in sess.history()["cost"][0]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_soundness_the_charge_checked_is_the_charge_reserved(families: Any, accountant: str) -> None:
    """Found: the core read a plan's ``charge`` once to check it (stop 51, basic/zCDP) and again to reserve it; a
    FamilyPlan subclass whose ``charge`` is a property answered honestly first, then a hundredth. The core now
    copies the plan once (a plain FamilyPlan) and checks and reserves that copy."""
    sess = _session(accountant)
    query = sess.table("t").rows_flip_r52b()
    honest = sess.accountant.charge_plan(dp.PureDP(1), [acc.laplace(2.0, 2.0)])
    query.collect(dp.PureDP(1))
    after = _session(accountant)
    after.table("t").rows_honest_r52b().collect(dp.PureDP(1))
    assert sess.remaining() == after.remaining() and sess.spent() == after.spent()
    assert query.cost(dp.PureDP(1)).values == honest.values


# -- the built-in families are never refused ---------------------------------------------------------------------

B = (0.0, 12.0)


def _builtins(frame: Any) -> dict[str, Any]:
    keyed = frame.group_by("g", keys=["a", "b", "c", "d"])
    return {
        "bounds": lambda: frame.bounds("x", domain=B),
        "interior_point": lambda: frame.interior_point("x", bounds=B, beta=0.5),
        "learn_threshold": lambda: frame.learn_threshold("x", label="y", bounds=B, beta=0.5),
        "learn_rectangle": lambda: frame.learn_rectangle(["x"], label="y", bounds={"x": B}, beta=0.5),
        "linear_regression": lambda: frame.query("linear_regression", ["x"], "y", bounds={"x": B, "y": (0, 1)}),
        **{f"top_k[{m}]": (lambda m=m: (keyed if m in ("gumbel", "peeling", "tct") else frame.group_by("g")).top_k(
            k=1, method=m)) for m in ("stable", "gumbel", "peeling", "limited_domain", "tct")},
    }


BUDGETS = {"pure": dp.PureDP(1), "approx": dp.ApproxDP(1, Fraction(1, 10**7)), "zcdp": dp.ZCDP(Fraction(1, 2))}
SESSIONS = {"basic": dp.ApproxDP(20, Fraction(1, 10**5)), "zcdp": dp.ZCDP(20, Fraction(1, 10**5)), "rdp": TOTAL,
            "pld": TOTAL}


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("accountant", list(SESSIONS))
def test_no_built_in_family_is_refused(accountant: str, sampled: bool) -> None:
    """Every built-in family (top-k's five methods, bounds, interior point, thresholds, rectangles, the example
    plugin's regression) plans under every budget notion its session takes, on the whole table and on a Poisson
    sample, in basic, zCDP, RDP and PLD sessions: the check refuses none (a refusal that is not the check's, a
    method that needs a δ, is the family's own)."""
    sess = _session(accountant, SESSIONS[accountant])
    planned = 0
    for name, build in _builtins(_frame(sess, sampled)).items():
        for notion, budget in BUDGETS.items():
            try:
                build().cost(budget)
                planned += 1
            except dp.PluginError as e:
                raise AssertionError(f"{name} under {notion}: {e}") from e
            except dp.DPFrameError:
                pass
    assert planned >= 12


# -- the reports compose only descriptions that cost what the charge does -----------------------------------------


class DescribedCount:
    """A plugin row count (discrete Laplace calibrated to its pure share) whose declared curve is honest in its
    functions (the engine checks them against the noise) while its description (``spec``), which the reports
    rebuild, is the noise's at a hundred times the scale."""

    name = "described_count"
    handles = frozenset({"described_count"})
    notions = frozenset({"pure"})

    def validate(self, measure: Any, ctx: Any) -> None:
        pass

    def parts(self, measures: Any, ctx: Any) -> int:
        return 1

    def plan(self, measures: Any, ctx: Any, share: dp.Budget) -> Any:
        from tests.adversarial.test_review50d import CountPlan

        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        honest = acc.discrete_laplace(float(noise.scale), int(ctx.unit.max_rows))
        assert honest.spec is not None
        lying = dataclasses.replace(honest, spec={**honest.spec, "scale": float(noise.scale) * 100})
        return CountPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise={"count": noise},
                         count_noise=noise, privacy=(lying,))


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
def test_soundness_a_mechanism_s_description_cannot_shrink_the_pld_reports(sampled: bool) -> None:
    """Found: the PLD note of ``history()``/``explain()`` and ``spent_report()`` compose the curves a charge's
    descriptions rebuild, which nothing compared with the curves the engine checked: a mechanism plugin whose curve
    was honest in its functions and described a hundredth of its noise was reported ε ≈ 0.01 for an ε = 1 release.
    A description that costs less than the charge at some order is now dropped (the reports cannot compose the
    charge, and say so by None) rather than underreport."""
    from dpframe.testing import pin_mechanisms

    sess = _session("pld")
    pin_mechanisms(sess, DescribedCount())
    _frame(sess, sampled).agg(dp.measure("described_count")).collect(dp.PureDP(1))
    line = sess.history()["cost"][0]
    assert "PLD of this plan" not in line, line
    report = sess.spent_report()
    assert report["pld"] is None or report["pld"] >= (0.3 if sampled else 0.9), report
