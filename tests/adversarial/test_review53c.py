"""Review 53c: the privacy curves a mechanism plan declaring some noise, or any plan under a third-party accountant, is
charged, against the cost the plan states; the discrete Laplace floor of a declared noise (L1 over coordinates).

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates.partition_selection import KEEP

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp_charge import RDPCharge
from dpframe.budgets import Budget, make
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.noise import RandomSource
from dpframe.planning.state import first
from dpframe.testing import pin_mechanisms
from tests.adversarial.doubles import ROWS, CountPlan, FakeMechanism

DATA = pl.DataFrame({"u": [i // 4 for i in range(800)], "k": ["a", "b"] * 400})
UNIT = dp.PrivacyUnit("u", max_rows=100)
BUDGET = dp.ApproxDP(1, 1e-6)


def _session(accountant: str) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.ApproxDP(50, 1e-5), accountant=accountant, seed=0)


def _frame(sess: dp.Session, sampled: bool) -> Any:
    frame = sess.table("t")
    return frame.sample(0.1) if sampled else frame


def curve_of(noise: Noise) -> acc.PrivacyCurve:
    """The exact curve of ``noise`` at its declared sensitivity, on one integer statistic (dpframe's constructors)."""
    if noise.distribution == "discrete_laplace":
        return acc.discrete_laplace(float(noise.scale), int(noise.sensitivity))
    return acc.discrete_gaussian(float(noise.scale) ** 0.5, float(noise.sensitivity))


class ShortCount(FakeMechanism):
    """A plugin count whose plan states its whole share as its cost, but declares less noise than that costs.

    ``how``: ``"tiny_share"`` declares (and adds) noise calibrated to a hundredth of the share, and releases the exact
    count beside it (an unnoised second output); ``"understated"`` adds the noise the share pays for (sensitivity
    max_rows) and declares it with a hundredth of its sensitivity; ``"honest"`` declares what it adds.
    """

    notions = frozenset({"pure", "zcdp"})

    def __init__(self, how: str) -> None:
        super().__init__(f"short_{how}")
        self.how = how

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        rows = Fraction(ctx.unit.max_rows)
        used = Noise.calibrate(rows, share)
        declared = used
        if self.how == "tiny_share":
            used = declared = Noise.calibrate(rows, make(share.notion, first(share) / 100))
        elif self.how == "understated":
            declared = Noise(used.distribution, used.scale, rows / (100 if used.distribution == "discrete_laplace"
                                                                    else 10))
        outputs = (*(m.output_name for m in measures), *(("exact",) if self.how == "tiny_share" else ()))
        return CountPlan(self.name, tuple(measures), (ROWS,), share, noise={"count": declared}, outputs=outputs,
                         privacy=(curve_of(declared),), used=used, exact_too=self.how == "tiny_share")


# -- 1. a plan declaring some noise: its curves against its stated cost ---------------------------------------------


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("budget", [dp.PureDP(1), dp.ZCDP(Fraction(1, 2))], ids=["pure", "zcdp"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("how", ["tiny_share", "understated"])
def test_soundness_declared_noise_below_the_stated_cost_is_refused(how: str, accountant: str, budget: Budget,
                                                                   sampled: bool) -> None:
    """Found: the curves of a plan declaring a `Noise` were checked only against that noise, never against the cost
    the plan states. A plan stating its whole share (ε = 1) as its cost, declaring noise calibrated to a hundredth of
    it and releasing the exact count beside it, or declaring the noise it adds with a hundredth of its sensitivity,
    was charged the declared noise's curve, a hundredth of its cost (a basic session charged ε = 1 for the same
    plan). Now a PluginError naming the mechanism, nothing charged: where the declared noises do not pay for the
    whole cost, the curves are held to check_curve_charge's rule against the cost."""
    sess = _session(accountant)
    pin_mechanisms(sess, ShortCount(how))
    q = _frame(sess, sampled).agg(dp.measure(f"short_{how}"))
    for run in (q.cost, q.collect):
        with pytest.raises(dp.PluginError) as refused:
            run(budget)
        assert f"short_{how}" in str(refused.value) and refused.value.argument == "mechanism"
        assert "more private than its cost" in str(refused.value)
    assert sess.history().height == 0


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("accountant", ["basic", "rdp", "pld"])
def test_an_honest_noised_plan_is_charged_its_curves(accountant: str, sampled: bool) -> None:
    """The plan declaring what it adds runs, charged its declared curve (tighter than its cost's in RDP sessions)."""
    sess = _session(accountant)
    pin_mechanisms(sess, ShortCount("honest"))
    q = _frame(sess, sampled).agg(dp.measure("short_honest"))
    charged = q.cost(dp.PureDP(1))
    q.collect(dp.PureDP(1))
    assert sess.history().height == 1
    if accountant != "basic":
        whole = sess.accountant.charge_plan(dp.PureDP(1), None, 0.1 if sampled else 1.0)
        assert charged.values[0] < whole.values[0]           # the exact discrete Laplace curve, below ε-DP's


# -- 1b. a selection plan: its δ is charged --------------------------------------------------------------------------


@dataclass
class KeepAll(MechanismPlan):
    selection_noise: Noise | None = None

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.selection_noise is not None
        units = np.asarray(stats[Statistic("units").key], dtype=np.int64)
        return {KEEP: units + self.selection_noise.sample(units.size, rng) >= 1}


class NoDeltaSelection(FakeMechanism):
    """A partition-selection plugin whose plan states an (ε, δ) cost and declares a pure curve (its δ0: none)."""

    name = "no_delta_selection"
    handles = frozenset({"partition_selection"})
    notions = frozenset({"approx", "zcdp"})

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        assert isinstance(share, dp.ApproxDP)
        l0 = Fraction(ctx.unit.groups_per_unit)
        noise = Noise.calibrate(l0, dp.PureDP(share.epsilon))
        return KeepAll(self.name, tuple(measures), (Statistic("units"),), share, noise={"units": noise},
                       outputs=(KEEP,), privacy=(acc.pure(float(share.epsilon)),), selection_noise=noise)


def test_soundness_a_selection_plan_s_delta_is_charged() -> None:
    """Found: a partition-selection plan (pluggable: a mechanism handling `partition_selection`) stating an (ε, δ)
    cost was held only to its declared noise's curve, which has no δ: declaring the pure curve of that noise it was
    charged δ0 = 0 in RDP/PLD sessions (δ = 1e-6 in a basic one). Now a PluginError, free."""
    sess = _session("rdp")
    pin_mechanisms(sess, NoDeltaSelection())
    with pytest.raises(dp.PluginError, match="no_delta_selection"):
        sess.table("t").group_by("k").agg(dp.len()).cost(BUDGET)
    assert sess.history().height == 0


# -- 2. a third-party accountant that charges curves (not a Rényi filter) -------------------------------------------


class Wrapped(acc.Accountant):
    """A third-party accountant composing curves: dpframe's Rényi filter behind delegation (not a subclass), honest in
    every charge it composes. ``seen`` records the curves each plan's charge was built from."""

    name = "wrapped_rdp_r53c"
    accepts = frozenset({"approx"})
    seen: list[tuple[acc.PrivacyCurve, ...]] = []

    def __init__(self, total: Budget | None = None) -> None:
        super().__init__(total)
        self._inner = acc.RDPAccountant(total)

    def charge(self, cost: Budget) -> Any:
        return self._inner.charge(cost)

    def charge_plan(self, cost: Budget, curves: Sequence[acc.PrivacyCurve] | None, rate: float = 1.0) -> Any:
        Wrapped.seen.append(tuple(curves or ()))
        return self._inner.charge_plan(cost, curves, rate)

    def check_charge(self, charge: object, argument: str = "charges") -> None:
        self._inner.check_charge(charge, argument)

    def _compose_charges(self, charges: Sequence[Any]) -> Any:
        return self._inner.compose(list(charges))

    def empty(self) -> Any:
        return self._inner.empty()

    def fits(self, spent: Any) -> bool:
        return self._inner.fits(spent)

    def remaining(self, spent: Any) -> Budget:
        return self._inner.remaining(spent)

    def report(self, spent: Any) -> Budget:
        return self._inner.report(spent)

    def shortfall(self, spent_after: Any) -> str:
        return self._inner.shortfall(spent_after)

    def short_of_delta(self, spent_after: Any) -> bool:
        return self._inner.short_of_delta(spent_after)

    def describe_charge(self, charge: Any) -> str:
        return self._inner.describe_charge(charge)

    def describe(self) -> str:
        return "dpframe's Rényi filter, by delegation"

    def epsilon(self, delta: float) -> float:
        return self._inner.epsilon(delta)

    def delta(self, epsilon: float) -> float:
        return self._inner.delta(epsilon)


class WrappedHooks:
    @dp.hookimpl
    def dpframe_accountants(self, register: Any) -> None:
        register(Wrapped, name=Wrapped.name)


@pytest.fixture(scope="module")
def wrapped() -> Any:
    from dpframe.plugin import plugin_host
    from tests.adversarial.doubles import FamilyHooks
    from tests.adversarial.test_review52b import ledger_families

    host = plugin_host()
    host.register(WrappedHooks(), name="wrapped_r53c")
    host.register(FamilyHooks(*ledger_families()), name="rows_r52b")
    yield
    host.unregister(name="rows_r52b")
    host.unregister(name="wrapped_r53c")


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("how", ["tiny_share", "understated", "bare_weak"])
def test_soundness_a_third_party_accountant_is_given_checked_curves(wrapped: Any, how: str, sampled: bool) -> None:
    """Found: only a session whose accountant is a RenyiFilter (``rdp``, ``pld``) checked a plan's curves against
    its cost; a third-party accountant charging curves (here dpframe's filter behind delegation, honest in what it
    composes) was handed a plan's curves unchecked: a plan declaring no noise and a curve a hundredth of its cost, or
    noise below its cost, was charged that. The same checks now run with dpframe's own filter's formulas: a
    PluginError, free."""
    from tests.adversarial.test_review51f import CurveCount, weak_curve

    sess = _session(Wrapped.name)
    plugin = CurveCount("bare_weak", weak_curve, table=lambda noises: {}) if how == "bare_weak" else ShortCount(how)
    pin_mechanisms(sess, plugin)
    q = _frame(sess, sampled).agg(dp.measure(plugin.name))
    for run in (q.cost, q.collect):
        with pytest.raises(dp.PluginError, match=plugin.name):
            run(dp.PureDP(1))
    assert sess.history().height == 0


def test_soundness_a_third_party_accountant_reads_only_curves_dpframe_built(wrapped: Any) -> None:
    """Found: the engine checks a plan's curves by their RDP at the filter's orders, and handed a third-party
    accountant the plugin's curve objects themselves, whose other functions (the privacy profile, the RDP at other
    orders) nothing checked: a curve honest in its RDP and describing a hundredth of its noise reached it as it was.
    It now gets only curves dpframe built from checked parameters (the descriptions that passed the check, else the
    cost's own curve)."""
    from tests.adversarial.test_review52b import DescribedCount

    for plugin, name in ((DescribedCount(), "described_count"), (ShortCount("honest"), "short_honest")):
        sess = _session(Wrapped.name)
        pin_mechanisms(sess, plugin)
        Wrapped.seen.clear()
        sess.table("t").agg(dp.measure(name)).collect(dp.PureDP(1))
        assert Wrapped.seen and sess.history().height == 1
        for curves in Wrapped.seen:
            for c in curves:        # what its description rebuilds is what it is, and costs its plan's ε = 1
                assert type(c) is acc.PrivacyCurve and c.spec is not None
                rebuilt = acc.from_json(c.to_json())
                assert RDPCharge.of([rebuilt]).values == RDPCharge.of([c]).values
                assert rebuilt.eps_inf is not None and rebuilt.eps_inf >= 0.99     # never the description of 1/100


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("how", ["small", "small_curve", "few_orders", "no_spec", "pld_profile"])
def test_soundness_a_family_charge_under_a_third_party_accountant_is_checked(wrapped: Any, how: str,
                                                                             sampled: bool) -> None:
    """Found: a family's charge was checked only in budget sessions and under a RenyiFilter; under a third-party
    accountant composing RDP charges the ledger reserved whatever the plan said (a curve of ε = 1/100 for a cost of
    ε = 1). An RDPCharge is now checked by check_curve_charge with dpframe's own filter's formulas, whatever the
    accountant."""
    sess = _session(Wrapped.name)
    query = getattr(_frame(sess, sampled), f"rows_{how}_r52b")()
    with pytest.raises(dp.PluginError, match=f"rows_{how}"):
        query.collect(dp.PureDP(1))
    assert sess.history().height == 0


def test_an_honest_family_under_a_third_party_accountant_keeps_its_curves(wrapped: Any) -> None:
    sess = _session(Wrapped.name)
    query = sess.table("t").rows_honest_r52b()
    charged = query.cost(dp.PureDP(1))
    query.collect(dp.PureDP(1))
    assert sess.history().height == 1
    assert charged.values[0] < sess.accountant.charge_plan(dp.PureDP(1), None).values[0]


# -- 3. the discrete Laplace floor: a declared noise says how much of its sensitivity one coordinate takes -----------


class OneCoordinate(FakeMechanism):
    """A count of max_rows (Δ = 4) rows per unit under one discrete Laplace draw (one coordinate: the pair is
    (Z, Z + 4)), declaring the curve of four one-step pairs, [acc.discrete_laplace(t, 1)] * 4: its cost (4/t by
    basic composition) is right, its RDP a fraction of the release's at low orders."""

    name = "one_coordinate"
    notions = frozenset({"pure"})

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        rows = Fraction(ctx.unit.max_rows)
        noise = Noise.calibrate(rows, share)
        one = acc.discrete_laplace(float(noise.scale), 1)
        return CountPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise={"count": noise},
                         privacy=(one,) * int(rows), used=noise)


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_soundness_one_coordinate_declared_as_spread_steps_is_refused(accountant: str, sampled: bool) -> None:
    """Found: since r52e the floor of a declared discrete Laplace noise of L1 sensitivity Δ was ⌊Δ⌋·D(1) (every step
    on its own coordinate), because `Noise` said nothing of coordinates; a plugin whose release puts all of Δ = 4 on
    one coordinate, D(4), declared four one-step curves and was charged 4·D(1): at t = 400 a quarter of the
    release's RDP at low orders (Δ = 100, t = 100: a sixtieth). `Noise` now says how far one coordinate moves
    (`coordinate_sensitivity`, L∞; by default all of the sensitivity), and the floor is max(D(⌊L∞⌋), ⌊Δ⌋·D(1)):
    a PluginError, free, unless the plan declares its steps spread."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=4), budget=dp.ApproxDP(50, 1e-5),
                      accountant=accountant, seed=0)
    pin_mechanisms(sess, OneCoordinate())
    q = _frame(sess, sampled).agg(dp.measure("one_coordinate"))
    with pytest.raises(dp.PluginError, match="one_coordinate"):
        q.collect(dp.PureDP(Fraction(1, 100)))
    assert sess.history().height == 0


def test_the_floor_is_what_a_release_attaining_both_sensitivities_has_at_least() -> None:
    """A release whose L1 sensitivity ⌊Δ⌋ and per-coordinate sensitivity ⌊m⌋ are both attained (by some neighbouring
    pair each) has divergence at least D(⌊m⌋) (one coordinate moved by m) and ⌊Δ⌋·D(1) (the least of any shift of
    L1 norm ⌊Δ⌋): the floor is the larger, within float slack of it, and never above it (exact references)."""
    from tests.adversarial.test_review52e import dlap_divergence

    orders = np.array([1.5, 2.0, 7.5, 32.0])
    for t, steps, most in [(0.7, 3, 1), (3.0, 4, 2), (40.0, 4, 4), (400.0, 6, 3), (1000.0, 3, None)]:
        noise = Noise("discrete_laplace", Fraction(t), Fraction(steps),
                      coordinate_sensitivity=None if most is None else Fraction(most))
        floor = noise.rdp(orders)
        m = steps if most is None else most
        for i, a in enumerate(orders):
            least = max(dlap_divergence(t, m, float(a)), steps * dlap_divergence(t, 1, float(a)))
            assert float(least) * (1 - 1e-9) - 1e-12 <= float(floor[i]) <= float(least), (t, steps, most, a)
