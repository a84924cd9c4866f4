"""Review 54a: stop 53's accounting change, attacked by an analyst and by a plugin author.

1. A third-party accountant with a charge kind of its own (not a dp budget, not an ``RDPCharge``): documented as
   charged the accountant's own charge of a plan's cost where the core cannot compare a family's charge, and given
   only curves dpframe built for a mechanism plan; the ledger must store and read back such charges.
2. The reports (``history()``'s PLD note, ``spent_report()``) of plans declaring no noise.

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from dpframe_aggregates.partition_selection import KEEP

import dpframe as dp
from dpframe import accounting as acc
from dpframe.budgets import Budget, make
from dpframe.errors import BudgetError, LedgerError
from dpframe.mechanism import Noise, Statistic
from dpframe.testing import pin_mechanisms
from tests.adversarial.test_review53c import KeepAll, NoDeltaSelection

DATA = pl.DataFrame({"u": [i // 4 for i in range(800)], "k": ["a", "b"] * 400})
UNIT = dp.PrivacyUnit("u", max_rows=4)


# -- 1. a third-party accountant with a charge kind of its own -------------------------------------------------------


@dataclass(frozen=True)
class Moments:
    """The charge kind of :class:`OwnKind`: a pure ε as a float (dpframe knows nothing of it)."""

    epsilon: float
    notion: str = "moments_r54a"

    def to_json(self) -> str:
        return json.dumps({"epsilon": self.epsilon})


class OwnKind(acc.Accountant):
    """Basic composition of pure ε, with charges of its own kind; a plan's charge is the sum of its curves' ε∞ (a
    function of a curve the engine's checks never compare: only dpframe's own curves may reach it). ``seen`` records
    the curves each ``charge_plan`` was given."""

    name = "own_kind_r54a"
    accepts = frozenset({"pure"})
    seen: list[tuple[acc.PrivacyCurve, ...]] = []

    def charge(self, cost: Budget) -> Any:
        return Moments(float(cost.epsilon))         # type: ignore[attr-defined]

    def charge_plan(self, cost: Budget, curves: Sequence[acc.PrivacyCurve] | None, rate: float = 1.0) -> Any:
        OwnKind.seen.append(tuple(curves or ()))
        if not curves:
            return self.charge(cost)
        return Moments(math.fsum(math.inf if c.eps_inf is None else c.eps_inf for c in curves))

    def charge_from_json(self, text: str) -> Any:
        return Moments(float(json.loads(text)["epsilon"]))

    def check_charge(self, charge: object, argument: str = "charges") -> None:
        if not isinstance(charge, Moments):
            raise BudgetError(f"expected Moments, got {charge!r}", argument=argument, fix="pass a charge of mine")

    def _compose_charges(self, charges: Sequence[Any]) -> Any:
        return Moments(math.fsum(c.epsilon for c in charges))

    def empty(self) -> Any:
        return Moments(0.0)

    def fits(self, spent: Any) -> bool:
        return bool(Fraction(spent.epsilon) <= self._session_total().epsilon)  # type: ignore[attr-defined]

    def remaining(self, spent: Any) -> Budget:
        total = self._session_total().epsilon        # type: ignore[attr-defined]
        return make("pure", max(Fraction(0), total - Fraction(spent.epsilon)))

    def report(self, spent: Any) -> Budget:
        return make("pure", Fraction(spent.epsilon))

    def shortfall(self, spent_after: Any) -> str:
        return f"ε={spent_after.epsilon - float(self._session_total().epsilon):g}"  # type: ignore[attr-defined]

    def short_of_delta(self, spent_after: Any) -> bool:
        return False

    def describe_charge(self, charge: Any) -> str:
        return f"moments ε={charge.epsilon:g}"

    def describe(self) -> str:
        return "basic composition of pure ε, in charges of its own kind"

    def epsilon(self, delta: float) -> float:
        return math.fsum(t * (c.eps_inf or math.inf) for c, t in self.entries)

    def delta(self, epsilon: float) -> float:
        return 0.0 if self.epsilon(0.0) <= epsilon else 1.0


class Unreadable(OwnKind):
    """The same, without ``charge_from_json``: its charges are written and cannot be read back."""

    name = "unreadable_r54a"

    def charge_from_json(self, text: str) -> Any:
        return acc.Accountant.charge_from_json(self, text)


class OwnHooks:
    @dp.hookimpl
    def dpframe_accountants(self, register: Any) -> None:
        register(OwnKind, name=OwnKind.name)
        register(Unreadable, name=Unreadable.name)


@pytest.fixture(scope="module")
def own() -> Any:
    from dpframe.plugin import plugin_host
    from tests.adversarial.doubles import FamilyHooks
    from tests.adversarial.test_review52b import ledger_families

    host, hooks = plugin_host(), {"own_r54a": OwnHooks(), "rows_r52b": FamilyHooks(*ledger_families())}
    for name, hook in hooks.items():
        host.register(hook, name=name)
    yield
    for name in reversed(hooks):
        host.unregister(name=name)


def _session(accountant: str, ledger: Path | None = None) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.PureDP(10), accountant=accountant, seed=0,
                      ledger=ledger)


def test_an_accountant_s_own_charges_are_stored_and_read_back(own: Any, tmp_path: Path) -> None:
    """Found: the ledger wrote an accountant's own charge through its ``to_json`` and read every stored charge back
    as a dp budget (or an RDPCharge): after the first release of a session whose accountant has a charge kind of its
    own, ``history()``, ``spent()`` and the next query's reservation were a LedgerError ("unreadable charge"), and a
    ledger file stayed so ("restore it from a backup"). The ledger now reads such a charge with the accountant's
    ``charge_from_json``."""
    path = tmp_path / "own.db"
    sess = _session(OwnKind.name, path)
    for _ in range(3):
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    assert sess.history()["cost"].to_list() == ["moments ε=1"] * 3
    assert sess.spent() == dp.PureDP(3)
    sess.close()
    again = _session(OwnKind.name, path)        # a new process reads the file: the same spend
    assert again.spent() == dp.PureDP(3)
    again.table("t").agg(dp.len()).collect(dp.PureDP(1))
    assert again.spent() == dp.PureDP(4)


def test_a_charge_the_ledger_cannot_read_back_is_refused_before_it_is_recorded(own: Any) -> None:
    """An accountant whose charges do not read back as themselves (no ``charge_from_json``) would record a charge the
    next read could not count: the reservation is refused, a LedgerError naming the fix, nothing recorded or
    released (the refusal reads no data)."""
    sess = _session(Unreadable.name)
    with pytest.raises(LedgerError, match="charge_from_json") as refused:
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    assert refused.value.argument == "accountant"
    assert sess.history().height == 0 and sess.spent() == make("pure", Fraction(0))


@pytest.mark.parametrize("how", ["small", "no_spec", "honest"])
def test_soundness_a_family_charge_of_the_accountant_s_own_kind_is_its_cost_s(own: Any, how: str) -> None:
    """A family plan's charge of a kind the core cannot compare (a hundredth of its cost, or a curve whose ε∞ is a
    hundredth of its noise's) is not reserved: the core reserves the accountant's charge of the plan's cost, as
    docs/plugins.md says."""
    sess = _session(OwnKind.name)
    getattr(sess.table("t"), f"rows_{how}_r52b")().collect(dp.PureDP(1))
    assert sess.history()["cost"].to_list() == ["moments ε=1"]


@dataclass
class _Lying:
    """A curve honest at every order the Rényi filter reads (the ε-DP curve of its cost) whose ε∞ is a hundredth."""

    share: float

    def __call__(self, noise: Noise) -> acc.PrivacyCurve:
        return acc.from_rdp(acc.pure(self.share).rdp, eps_inf=self.share / 100)    # type: ignore[arg-type]


def test_soundness_an_own_kind_accountant_reads_no_plugin_curve(own: Any) -> None:
    """A plan declaring no noise whose curve passes the check (its RDP is its cost's ε-DP curve) with an ε∞ a hundredth
    of its cost: an accountant reading ε∞ would charge a hundredth. It is given the cost's own curve (dpframe's)."""
    from tests.adversarial.test_review51f import CurveCount

    sess = _session(OwnKind.name)
    pin_mechanisms(sess, CurveCount("lying_eps_inf", _Lying(1.0), table=lambda noises: {}))
    OwnKind.seen.clear()
    sess.table("t").agg(dp.measure("lying_eps_inf")).collect(dp.PureDP(1))
    assert sess.history()["cost"].to_list() == ["moments ε=1"]
    assert OwnKind.seen and all(c.eps_inf == 1.0 for curves in OwnKind.seen for c in curves)


# -- 2. the reports of a plan no declared noise ties to a mechanism ---------------------------------------------------


def _gaussian_of(noise: Noise) -> acc.PrivacyCurve:
    """The Gaussian whose ρ = Δ²/(2σ²) is the plan's (Δ = 1, σ² = the declared noise's σ²/Δ²): a ρ-zCDP curve."""
    sigma2 = noise.scale / noise.sensitivity ** 2
    return acc.gaussian(float(sigma2) ** 0.5, 1.0)


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
def test_soundness_a_plan_declaring_no_noise_reports_its_guarantee_not_its_description(sampled: bool) -> None:
    """Found: a plan declaring no noise, of cost ρ = 1/2, whose curve is a Gaussian of that ρ (its RDP is the cost's
    own curve: the charge is right) was reported by the Gaussian's privacy profile: ``spent_report()["pld"]`` 4.38 at
    δ = 1e-5, below the 4.73 of an arbitrary ½-zCDP mechanism, which is all its cost says (nothing ties the curve to
    the noise the plan adds). The reports now compose the guarantee a description states (ρ-zCDP here) wherever its
    charge is that guarantee's, or say None."""
    from tests.adversarial.test_review51f import CurveCount

    sess = dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.ApproxDP(50, 1e-5), accountant="pld", seed=0)
    pin_mechanisms(sess, CurveCount("described_gaussian", _gaussian_of, table=lambda noises: {}))
    frame = sess.table("t").sample(0.5) if sampled else sess.table("t")
    query = frame.agg(dp.measure("described_gaussian"))
    assert not any('"gaussian"' in text for text in query.cost(dp.ZCDP(0.5)).specs)   # what the reports compose
    query.collect(dp.ZCDP(0.5))
    general = acc.PLDAccountant()
    general.compose(acc.zcdp(0.5).subsampled(0.5) if sampled else acc.zcdp(0.5))
    report = sess.spent_report(1e-5)["pld"]
    assert report is None or report >= general.epsilon(1e-5) * (1 - 1e-6), (report, general.epsilon(1e-5))


def test_the_guarantee_of_a_description() -> None:
    from dpframe.accounting.curve_charge import guarantee

    assert guarantee(acc.gaussian(2.0).to_json()).spec == acc.zcdp(0.125).spec         # type: ignore[union-attr]
    assert guarantee(acc.exponential(0.5).to_json()).spec == acc.exponential(0.5).spec  # type: ignore[union-attr]
    assert guarantee(acc.laplace(2.0).to_json()).spec == acc.laplace(2.0).spec   # its RDP is below pure(½)'s: kept
    assert guarantee(acc.approx(1.0, 1e-6).to_json()).spec == acc.approx(1.0, 1e-6).spec  # type: ignore[union-attr]
    both = guarantee(acc.composition([acc.laplace(2.0), acc.gaussian(2.0)]).to_json())
    assert both is not None and [p["kind"] for p in both.spec["parts"]] == ["laplace", "zcdp"]  # type: ignore[index]
    assert guarantee('{"kind": "plugin_kind_r54a"}') is None and guarantee("not json") is None


# -- 3. a selection plan's δ, accepted within the check's float slack ------------------------------------------------


class ShortDeltaSelection(NoDeltaSelection):
    """A partition-selection plugin declaring the (ε, δ) curve of its share with δ a 1e-9 relative hair below it (the
    check of its curves' δ0 allows that much for a δ given as a float)."""

    name = "short_delta_selection"

    def plan(self, measures: Sequence[Any], ctx: Any, share: Budget) -> Any:
        assert isinstance(share, dp.ApproxDP)
        noise = Noise.calibrate(Fraction(ctx.unit.groups_per_unit), dp.PureDP(share.epsilon))
        curve = acc.approx(float(share.epsilon), float(share.delta) * (1 - 5e-10))
        return KeepAll(self.name, tuple(measures), (Statistic("units"),), share,
                       noise={"units": noise}, outputs=(KEEP,), privacy=(curve,), selection_noise=noise)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_soundness_a_selection_plan_is_charged_all_of_its_delta(accountant: str) -> None:
    """Found: a selection plan's curves are accepted with δ0 adding up to 10⁻⁹ relatively below its cost's δ (float
    slack), and the session was charged their δ0: 9.9999999950e-07 for a δ of 1e-6. The δ0 charged is now raised to the
    cost's δ (rounded up)."""
    sess = dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.ApproxDP(50, 1e-5), accountant=accountant, seed=0)
    pin_mechanisms(sess, ShortDeltaSelection())
    charge = sess.table("t").group_by("k").agg(dp.len()).cost(dp.ApproxDP(1, 1e-6))
    assert Fraction(charge.delta0) >= Fraction(1, 10**6), charge.delta0
