"""Review 52a: adversarial review of stop 51 (plugin checks before a charge, the remote warning question, budget
text, SQL ``ci=``, the SQL-building context).

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp_charge import FILTER_ORDERS
from dpframe.budgets import make
from dpframe.family import Explain, FamilyPlan
from dpframe.mechanism import Noise
from dpframe.testing import pin_mechanisms
from tests.adversarial.doubles import RowsFamily, installed
from tests.adversarial.test_review50d import ROWS
from tests.adversarial.test_review51f import DATA, UNIT, CurveCount, _session, honest_curve

# -- 1. a sampled plan's curves are charged as checked, at every order the amplification reads -----------------------

FILTER = {float(a) for a in FILTER_ORDERS}


def _off_filter(noise: Noise) -> acc.PrivacyCurve:
    """Honest at every order the Rényi filter reads, and next to nothing at every other order."""
    honest = honest_curve(noise).rdp
    assert honest is not None
    return acc.from_rdp(lambda a: float(honest(np.array([a]))[0]) if a in FILTER else 1e-300, label="off filter")


def _honest_once(noise: Noise) -> acc.PrivacyCurve:
    """Honest the first time it is asked (the check's reading), next to nothing afterwards."""
    honest = honest_curve(noise).rdp
    assert honest is not None
    asked: list[float] = []

    def rdp(a: float) -> float:
        asked.append(a)
        return float(honest(np.array([a]))[0]) if len(asked) <= len(FILTER_ORDERS) else 1e-300
    return acc.from_rdp(rdp, label="honest once")


def _sampled_cost(curve: Callable[[Noise], acc.PrivacyCurve], rate: float = 0.1) -> Any:
    sess = _session("rdp")
    pin_mechanisms(sess, CurveCount("count", curve))
    return sess.table("t").sample(rate).agg(dp.measure("count")).cost(dp.ApproxDP(1, 1e-6))


@pytest.mark.parametrize("curve", [_off_filter, _honest_once], ids=["off_filter", "honest_once"])
def test_soundness_a_sampled_plan_is_charged_at_least_its_checked_curves_at_every_order(
        curve: Callable[[Noise], acc.PrivacyCurve]) -> None:
    """Found: on a Poisson-sampled frame the charge amplifies the declared curves (``composition(...).subsampled``),
    whose bound at order α reads the curve at every integer order 2..α (9, 11, 13, 15, 17, ... that the Rényi filter,
    and so the plugin check, never reads), by calling the plugin's function again: a curve honest at the filter's
    orders and ~0 elsewhere, or honest only the first time it is asked (the check's reading), was charged less than
    the honest curve (order 10: about half). The sampled charge now reads each curve no lower than what was checked
    (its filter-order values, non-decreasing in α) and the plan no lower than its declared noises' floor
    (``Noise.rdp``), at every order."""
    floor, lying = _sampled_cost(_floor), _sampled_cost(curve)
    assert all(b >= a * (1 - 1e-9) for a, b in zip(floor.values, lying.values)), (floor.values, lying.values)


def _floor(noise: Noise) -> acc.PrivacyCurve:
    """The least curve the engine can hold ``noise``'s declarations to at every order: its ``Noise.rdp`` floor.

    Since r53c, a discrete Laplace noise of L1 sensitivity Δ floors at max(D(m), ⌊Δ⌋·D(1)), m its declared
    ``coordinate_sensitivity`` (by default Δ: this plugin's one-coordinate D(Δ)).
    """
    return acc.from_rdp(lambda a: float(noise.rdp(np.array([a]))[0]), label="floor")


# -- 2. a query family's plan is charged as it was checked -----------------------------------------------------------


class ShiftyFamilyPlan(FamilyPlan[int]):
    """A family plan whose ``charge`` is honest the first time it is read (``check_charge``'s reading) and a
    hundredth of it afterwards (the ledger's)."""

    def _charge(self) -> Any:
        self.__dict__["reads"] = self.__dict__.get("reads", 0) + 1
        honest = self.__dict__["honest"]
        return honest if self.__dict__["reads"] == 1 else make("pure", honest.epsilon / 100)

    def _store(self, value: Any) -> None:
        self.__dict__["honest"] = value

    charge = property(_charge, _store)  # type: ignore[assignment]


class HeldRowsQuery:
    """A noisy row count whose plan lies in one way (``how``): ``"shifty"``, a :class:`ShiftyFamilyPlan`; ``"unheld"``,
    Gaussian noise (its cost ρ = ε²/2 for a budget of ε, which a pure session cannot hold) charged a pure ε/100."""

    def __init__(self, source: Any, how: str) -> None:
        self.source, self.how = source, how

    def describe(self) -> str:
        return f"{self.how}_rows()"

    def plan(self, budget: Any) -> Any:
        cost = budget if self.how == "shifty" else dp.ZCDP(budget.epsilon ** 2 / 2)
        noise = Noise.calibrate(Fraction(self.source.unit.max_rows), cost)

        def run(reader: Any, rng: Any) -> int:
            return int(reader.statistics(self.source.node, (ROWS,))[ROWS.key][0]) + int(noise.sample(1, rng)[0])
        charged = budget if self.how == "shifty" else make("pure", budget.epsilon / 100)
        charge = self.source.context.accountant.charge_plan(charged, None, 1.0)
        kind = ShiftyFamilyPlan if self.how == "shifty" else FamilyPlan
        return kind(budget, cost, charge, "rows", Explain("rows"), run)


@pytest.fixture(scope="module")
def lying_families() -> Iterator[None]:
    yield from installed("rows_r52a", *(RowsFamily(f"{how}_rows_r52a", HeldRowsQuery, how)
                                                for how in ("shifty", "unheld")))


def test_soundness_a_family_plan_is_charged_what_was_checked(lying_families: Any) -> None:
    """Found: ``check_charge`` (stop 51) compares a family plan's ``charge`` with its cost, and the ledger then reads
    ``plan.charge`` again: a plan (a ``FamilyPlan`` subclass, whose fields may be properties) whose charge is honest
    when checked and a hundredth of it when reserved ran, charged ε = 1/100 for a query of ε = 1. The plan's fields
    are now read once, into a plain ``FamilyPlan``, before its checks; what is checked is what is reserved."""
    sess = dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.PureDP(10), seed=0)
    q = sess.table("t").shifty_rows_r52a()
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    q.collect(dp.PureDP(1))
    assert sess.spent() == dp.PureDP(1), sess.spent()


# -- 3. one remote analyst cannot break the session's totals for the others ------------------------------------------


def test_denial_of_service_exact_charges_with_long_denominators_keep_the_totals_readable() -> None:
    """Found: budgets sent as ``$budget`` must have decimal denominators (so the session's exact totals stay short),
    but a number sent as a Fraction (``$fraction``, up to 400 digits each side) is charged exactly where a tool charges
    what the analyst wrote (a target-charging channel's δ): a dozen channels with 400-digit denominators sharing no
    factor made the spent δ's denominator pass the 4,300 digits Python writes as text, and ``remaining()`` and
    ``spent()`` failed for every analyst of the server ("the server failed this request (ValueError)"); each further
    charge added more digits for every later sum. A basic/zCDP session's total is now rounded up (by < 2⁻²⁰⁴⁸, sound)
    when its denominator would pass 2²⁰⁴⁸."""
    import random
    import secrets

    import polars as pl

    rng = random.Random(3)
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 10})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(1000, 0.9), seed=0)
    key = secrets.token_bytes(32)
    deltas = []
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server:
        with dp.connect(server.address, authkey=key) as attacker:
            for _ in range(12):
                d = int("9" + "".join(rng.choice("0123456789") for _ in range(399))) | 1
                deltas.append(Fraction(d // 1000, d))
                with attacker.target_charging(epsilon=0.5, max_hits=1, delta=deltas[-1]):
                    pass
        with dp.connect(server.address, authkey=key) as other:
            spent, remaining = other.spent(), other.remaining()
            assert other.sql("SELECT COUNT(*) AS n FROM t").collect(dp.ApproxDP(1, 0)).height == 1
    exact = sum(deltas, Fraction(0))
    assert exact <= spent.delta <= exact + Fraction(1, 2**2040), "rounded up, by next to nothing"
    assert remaining.delta == Fraction(9, 10) - spent.delta


# -- 4. a curve subclass's fields are read once ----------------------------------------------------------------------


class ShiftyCurve(acc.PrivacyCurve):
    """A privacy curve whose ``rdp`` field is a property: the honest function for its first three reads (the
    check's), next to nothing afterwards (the charge's); it also refuses the cache of its filter-order values."""

    _filter_rdp = property(lambda self: None, lambda self, value: None)

    def _rdp(self) -> Any:
        reads = self.__dict__["reads"] = self.__dict__.get("reads", 0) + 1
        return self.__dict__["honest"] if reads <= 3 else (lambda a: np.asarray(a, dtype=np.float64) * 0 + 1e-300)

    def _store(self, value: Any) -> None:
        self.__dict__["honest"] = value

    rdp = property(_rdp, _store)  # type: ignore[assignment]


def _shifty(noise: Noise) -> acc.PrivacyCurve:
    import dataclasses

    honest = honest_curve(noise)
    return ShiftyCurve(**{f.name: getattr(honest, f.name) for f in dataclasses.fields(honest)})


@pytest.mark.parametrize("rate", [1.0, 0.1], ids=["whole", "sampled"])
def test_soundness_a_curve_subclass_is_charged_what_was_checked(rate: float) -> None:
    """Found: the curve check and the charge read a declared curve's fields separately, and the charge's filter-order
    values were kept on the curve only where the curve lets them be set: a ``PrivacyCurve`` subclass whose ``rdp`` is
    a property (honest for the check's reads, ~0 afterwards) and which refuses that cache passed the check and was
    charged 1e-300 at every order of an RDP session. A declared curve is now read once, into a plain PrivacyCurve,
    before it is checked."""
    sess = _session("rdp")
    pin_mechanisms(sess, CurveCount("count", _shifty))
    frame = sess.table("t") if rate == 1 else sess.table("t").sample(rate)
    cost = frame.agg(dp.measure("count")).cost(dp.ApproxDP(1, 1e-6))
    honest = _session("rdp")
    pin_mechanisms(honest, CurveCount("count", honest_curve))
    frame = honest.table("t") if rate == 1 else honest.table("t").sample(rate)
    expected = frame.agg(dp.measure("count")).cost(dp.ApproxDP(1, 1e-6))
    assert all(b >= a * (1 - 1e-9) for a, b in zip(expected.values, cost.values)), (expected.values, cost.values)


# -- 5. a family's cost the session cannot hold is not a way around check_charge ---------------------------------------


def test_soundness_a_family_cost_the_session_cannot_hold_is_refused(lying_families: Any) -> None:
    """Found: ``check_charge`` compares a family plan's charge with what the accountant charges for its cost, and
    skipped the check where the accountant cannot charge that cost at all: a Gaussian family (cost ρ = ε²/2, which
    ``check_cost`` accepts against a pure budget of ε) in a pure session charging ε/100 ran, charged 1/100, though its
    noise gives no pure guarantee at any ε. A cost the session cannot hold is now a PluginError, free."""
    sess = dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.PureDP(10), seed=0)
    q = sess.table("t").unheld_rows_r52a()
    for run in (q.cost, q.collect):
        with pytest.raises(dp.PluginError) as refused:
            run(dp.PureDP(1))
        assert "unheld_rows()" in str(refused.value)
    assert sess.history().height == 0
