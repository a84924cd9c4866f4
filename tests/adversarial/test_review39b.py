"""Review 39b: every query ending under every accountant and budget kind; budget arithmetic at scale; races.

Scope: the composed, SQL and interactive D/D′ oracles run under the default accountant of their budget (a few
tests elsewhere use ``"rdp"``). The session accepts ``"basic"`` (pure and approximate totals), ``"zcdp"`` (zCDP
totals, with or without δ), ``"rdp"`` and ``"pld"`` (approximate totals with δ > 0), and mechanisms pick their
noise, thresholds, quantile, top-k, PTR and interactive filters by budget kind and accountant. This review:

* runs every ending of :data:`tests.adversarial.test_empty_inputs.ENDINGS` (every measure, public and private
  keys, ``ci=``, ``diagnostics=``, ``accuracy=``, automatic bounds and units, ``frame.bounds``, histograms, the
  learners, the robust median, every top-k method, SQL, sparse vectors, target charging, the individual filter,
  PTR, gated releases, ``run_until``) in a session of each kind (:data:`KINDS`) on D (the added unit isolated by a
  filter holds no row) and D′ (one row): the same outcome, warnings and ledger rows, and nothing charged then
  failed (a few by default, all under ``-m slow``);
* checks that ``cost()`` equals what the ledger records and ``explain()`` runs, for queries of every budget kind
  (pure, approximate, zCDP with and without δ) in each session kind, and that a refused query charged nothing;
* spends to within a hair of the total with many small charges under each accountant: exact (Fraction) totals for
  ``basic`` and ``zcdp`` (the last query refused before it runs, nothing charged, a query of exactly what is left
  admitted), and for the Rényi filter (``rdp``, ``pld``) 3,000 charges through the ledger, checked against the exact
  sum of the recorded charges and the conversion evaluated in 60-digit decimals;
* races threads on one session near its total, under each accountant: exactly the queries that fit are admitted.

Findings: the Rényi filter (``rdp`` and ``pld`` sessions) converted its recorded RDP total to ε in round-to-nearest
floats, ε(α) + log(1/δ′)/(α − 1) and the improved rule, with a 10⁻¹² margin on the RDP values only: the result was
below its exact value by up to an ulp whenever the charges were small next to the log terms, so a total ε between
the two admitted a charge whose exact filter ε exceeds it
(:func:`test_renyi_filter_conversion_is_never_below_its_exact_value`;
fixed in ``RenyiFilter.filter_epsilon``: the result is rounded up by 10⁻¹² of the conversion's terms). Otherwise
sound — every ending gave the same outcome on D and D′ under every session kind, none was charged then failed,
``cost()`` always equalled the ledger's charge, no refusal charged, and the filters admitted exactly what fits at
the boundary and under races (the running-total rounding that review 39 fixed is checked again through the ledger).
Noticed, not changed: ``history()`` of a PLD session composes one PLD per charge on every call (slow for long
sessions); ``spent()`` of a Rényi-filter session is the filter's ε rounded up, so it may print a hair above the
total while ``remaining()`` is 0.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from collections import Counter
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.accounting import BasicAccountant, PLDAccountant, RDPAccountant, ZCDPAccountant
from dpframe.accounting.accountants import Accountant
from dpframe.accounting.ledger import Ledger
from dpframe.accounting.rdp import FILTER_ORDERS, RDPCharge
from dpframe.budgets import down

from . import test_empty_inputs as empty
from .composed import MEMORY, QUERY_BUDGETS, SESSION_KINDS, Storage

#: Session kinds: (total budget, accountant). Every accountant, with each budget kind it accepts.
KINDS = {name: kind for name, kind in SESSION_KINDS.items() if name != "default"}


def _session(case: str, kind: str, backend: str = "polars", unit: str = "user", storage: Storage = MEMORY
             ) -> dp.Session:
    total, accountant = KINDS[kind]
    return dp.Session({"t": empty._session_source(case, storage)}, privacy_unit=empty.UNITS[unit], budget=total,
                      accountant=accountant, backend=backend, seed=0, public_tables={"p": empty.PUBLIC})


def sweep(names: tuple[str, ...] | None, kinds: tuple[str, ...], backend: str = "polars", unit: str = "user",
          storage: Storage = MEMORY, cases: tuple[str, ...] = ("one",)) -> list[str]:
    """The endings named (None: all) in a fresh session of each kind (on ``backend``, under ``unit`` of
    :data:`tests.adversarial.test_empty_inputs.UNITS`, the table in ``storage``), on D ("empty") and each D′ of
    ``cases`` (:data:`tests.adversarial.test_empty_inputs.CASES`)."""
    endings = [e for e in empty.ENDINGS if names is None or e.name in names]
    defects = []
    for kind in kinds:
        seen = {case: [empty.observe(_session(case, kind, backend, unit, storage), dataclasses.replace(e, account=kind))
                       for e in endings]
                for case in ("empty", *cases)}
        for case in cases:
            for e, on_d, on_d2 in zip(endings, seen["empty"], seen[case], strict=True):
                if not empty.alike(on_d, on_d2):
                    defects.append(f"{e.name} under {kind} on {case}: {on_d} != {on_d2}")
                defects += [f"{e.name} under {kind}: charged then failed: {o}" for o in (on_d, on_d2)
                            if any(row[0] == "failed" for row in o[2])]
    return defects


def test_a_few_endings_under_every_accountant_on_d_and_d_prime() -> None:
    """Partition selection and SQL under every session kind (every ending under ``-m slow``)."""
    defects = sweep(("private_all", "sql_count"), tuple(KINDS))
    assert not defects, "\n".join(defects)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_ending_under_every_accountant_on_d_and_d_prime(kind: str) -> None:
    defects = sweep(None, (kind,))
    assert not defects, "\n".join(defects)


# ------------------------------------------------------------------------------------ cost() = the charge

#: Query budgets of every kind.
BUDGETS = QUERY_BUDGETS


def _queries(sess: dp.Session, every: bool) -> dict[str, Callable[[], Any]]:
    """The queries whose cost is checked, each built when called (a unit with automatic bounds refuses some, free,
    as they are built)."""
    f = sess.table("t")
    few: dict[str, Callable[[], Any]] = {
        "private": lambda: f.group_by("s").agg(n=dp.len(), m=dp.median("x", bounds=(0, 10)))}
    if not every:
        return few
    return {
        **few, "agg": lambda: f.agg(n=dp.len(), s=dp.sum("x", bounds=(0, 10)), q=dp.median("x", bounds=(0, 10))),
        "sampled": lambda: f.sample(0.3).agg(n=dp.len(), s=dp.sum("x", bounds=(0, 10))),
        "sql_top_k": lambda: sess.sql("SELECT s FROM t GROUP BY s HAVING TOP_K(COUNT(*), 2)"),
        "all": lambda: f.agg(**empty.ALL), "auto": lambda: f.agg(**empty.AUTO),
        "public": lambda: f.group_by("s", keys=empty.KEYS).agg(**empty.ALL),
        "private_auto": lambda: f.group_by("s").agg(**empty.AUTO),
        "bounds": lambda: f.bounds("x", domain=(-1e9, 1e9)),
        "interior": lambda: f.interior_point("x", bounds=(-10, 10)),
        "threshold": lambda: f.learn_threshold("x", label="b", bounds=(-10, 10)),
        "rectangle": lambda: f.learn_rectangle(["x", "i"], label="b", bounds={"x": (-10, 10), "i": (-100, 100)}),
        "regression": lambda: f.linear_regression(["x"], "i", bounds={"x": (-10, 10), "i": (-100, 100)}),
        **{f"top_k_{m}": functools.partial(lambda m: f.group_by("s").top_k(k=2, method=m), m)
           for m in ("stable", "limited_domain")},
        **{f"top_k_{m}": functools.partial(lambda m: f.group_by("s", keys=empty.KEYS).top_k(k=2, method=m), m)
           for m in ("gumbel", "peeling", "tct")},
        "sampled_private": lambda: f.sample(0.3).group_by("s").agg(n=dp.len()),
        "sql": lambda: sess.sql("SELECT COUNT(*) AS n, SUM(CLAMP(x, 0, 10)) AS s, MEDIAN(CLAMP(x, 0, 10)) AS m FROM t"),
        "sql_private": lambda: sess.sql("SELECT s, COUNT(*) AS n FROM t GROUP BY s")}


def cost_defects(kind: str, every: bool, backend: str = "polars", unit: str = "user", storage: Storage = MEMORY
                 ) -> list[str]:
    """Each query at each budget kind: cost() and explain() against what collect() records (or refuses)."""
    sess = _session("one", kind, backend, unit, storage)
    defects = []
    for name, build in _queries(sess, every).items():
        try:
            q = build()
        except dp.DPFrameError:
            continue        # refused as it is built: nothing to charge (the same on D and D′: the sweeps)
        for b_name, budget in BUDGETS.items():
            where = f"{name} at {b_name} under {kind}"
            try:
                cost: Any = q.cost(budget)
                q.explain(budget)
            except dp.DPFrameError as e:
                cost = e
            before = len(sess._release.charges())
            try:
                q.collect(budget)
                out: Any = None
            except dp.BudgetExceededError as e:       # cost() does not check the total: only collect() does
                out = e
            except dp.DPFrameError as e:
                out = e
                if not isinstance(cost, dp.DPFrameError) or (type(cost), str(cost)) != (type(e), str(e)):
                    defects.append(f"{where}: cost() gave {cost!r}, collect() refused {e!r}")
            rows = sess._release.charges()[before:]
            if out is not None and rows:
                defects.append(f"{where}: refused ({out!r}) but charged {rows}")
            if out is None and [(r.status, r.cost) for r in rows] != [("committed", cost)]:
                defects.append(f"{where}: cost() {cost!r}, the ledger {rows}")
    return defects


@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
def test_cost_is_the_charge_under_every_accountant() -> None:
    defects = [d for kind in KINDS for d in cost_defects(kind, every=False)]
    assert not defects, "\n".join(defects)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cost_is_the_charge_of_every_query_family(kind: str) -> None:
    defects = cost_defects(kind, every=True)
    assert not defects, "\n".join(defects)


# ------------------------------------------------------------------------------------ to within a hair

_ROW = pl.DataFrame({"u": list(range(20)), "x": [1.0] * 20})


def _first(b: dp.Budget) -> Fraction:
    """ε, or ρ for a zCDP budget."""
    return b.rho if isinstance(b, dp.ZCDP) else b.epsilon


@pytest.mark.parametrize(("total", "accountant", "step"), [
    (dp.PureDP(1), "basic", lambda r: dp.PureDP(r)), (dp.ApproxDP(1, Fraction(1, 10**6)), "basic", None),
    (dp.ZCDP(1), "zcdp", lambda r: dp.ZCDP(r))])
def test_exact_totals_refuse_a_hair_over(total: dp.Budget, accountant: str, step: Any) -> None:
    """59 charges of varied size, then one that leaves 10⁻⁶: a query of 2·10⁻⁶ is refused before it runs,
    nothing charged; one of exactly 10⁻⁶ is released and leaves exactly nothing."""
    sess = dp.Session({"t": _ROW}, privacy_unit=dp.PrivacyUnit.row(), budget=total, accountant=accountant, seed=0)
    hair = Fraction(1, 10**6)
    if step is None:     # (ε, δ): partition selection charges δ; the hair is on ε
        def step(r: Fraction) -> dp.Budget:
            return dp.ApproxDP(r, 0)
    q = sess.table("t").agg(dp.len())
    parts = [Fraction(1, 100 + 3 * i) for i in range(59)]
    first = Fraction(1) - hair - sum(parts)
    for part in [*parts, first]:
        q.collect(step(part))
    assert _first(sess.remaining()) == hair
    before = sess.history()
    with pytest.raises(dp.BudgetExceededError):
        q.collect(step(2 * hair))
    assert sess.history().equals(before)
    q.collect(step(hair))
    assert _first(sess.remaining()) == 0
    with pytest.raises(dp.BudgetExceededError):
        q.collect(step(hair))


def _decimal_epsilon(values: list[Fraction], delta: Fraction) -> Decimal:
    """The Rényi filter's ε in 60-digit decimals: min over Λ of both conversions at ``delta`` (exact inputs)."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = Decimal(delta.numerator) / Decimal(delta.denominator)
        best = Decimal("Infinity")
        for alpha, v in zip(FILTER_ORDERS, values, strict=True):
            a, rdp = Decimal(float(alpha)), Decimal(v.numerator) / Decimal(v.denominator)
            standard = rdp + (-d.ln()) / (a - 1)
            improved = rdp + (1 - 1 / a).ln() - (d.ln() + a.ln()) / (a - 1)
            best = min(best, standard, max(improved, Decimal(0)))
        return best


@pytest.mark.parametrize("count", [300, pytest.param(3_000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("accountant", [RDPAccountant, PLDAccountant])
def test_renyi_filter_at_the_boundary_after_thousands_of_charges(accountant: type[Accountant], count: int) -> None:
    """``count`` small charges of three kinds (pure ε, ρ-zCDP, (ε, δ)) through a ledger, then smaller and smaller
    ones until each is refused: the recorded total is never below the exact sum of the recorded charges, the exact
    conversion of that sum fits the total, and a refused charge leaves the ledger as it was."""
    total = dp.ApproxDP(1, Fraction(1, 10**6))
    acc = accountant(total)
    led = Ledger(None, acc)
    kinds = [acc.charge(dp.PureDP(Fraction(1, 10**4))), acc.charge(dp.ZCDP(Fraction(1, 10**7))),
             acc.charge(dp.ApproxDP(Fraction(1, 10**5), Fraction(1, 10**13)))]
    charged: list[RDPCharge] = []
    for i in range(count):
        led.reserve(kinds[i % 3], "q", "m")
        charged.append(kinds[i % 3])
    for rho in (Fraction(1, 10**3), Fraction(1, 10**5), Fraction(1, 10**7)):   # closer and closer to the total
        step = acc.charge(dp.ZCDP(rho))
        while True:
            try:
                led.reserve(step, "q", "m")
            except dp.BudgetExceededError:
                assert len(led.charges()) == len(charged)
                break
            charged.append(step)
    spent = led.spent()
    times = Counter(charged)
    exact = [sum((n * Fraction(c.values[j]) for c, n in times.items()), Fraction(0)) for j in range(len(FILTER_ORDERS))]
    delta0 = sum((n * Fraction(c.delta0) for c, n in times.items()), Fraction(0))
    assert all(Fraction(v) >= e for v, e in zip(spent.values, exact, strict=True))
    assert Fraction(spent.delta0) >= delta0
    share = (Fraction(1, 10**6) - delta0) / len(FILTER_ORDERS)
    assert _decimal_epsilon(exact, share) <= 1
    assert float(acc.report(spent).epsilon) <= 1 + 1e-9 and acc.remaining(spent).epsilon >= 0


@pytest.mark.parametrize("accountant", [BasicAccountant, ZCDPAccountant])
def test_exact_accountants_sum_thousands_of_charges_exactly(accountant: type[Accountant]) -> None:
    """Basic and zCDP totals are Fractions: 1,000 charges of 1/1001 (a repeating binary fraction) leave exactly
    1/1001; one more fits, the next does not."""
    total: dp.Budget = dp.PureDP(1) if accountant is BasicAccountant else dp.ZCDP(1)
    led = Ledger(None, accountant(total))
    part: dp.Budget = type(total)(Fraction(1, 1001))
    for _ in range(1_000):
        led.reserve(part, "q", "m")
    assert _first(led.accountant.remaining(led.spent())) == Fraction(1, 1001)
    led.reserve(part, "q", "m")
    with pytest.raises(dp.BudgetExceededError):
        led.reserve(type(total)(Fraction(1, 10**40)), "q", "m")


# ------------------------------------------------------------------------------------------------ races

@pytest.mark.parametrize(("total", "accountant", "query_budget"), [
    (dp.ApproxDP(1, 1e-6), "basic", dp.PureDP(Fraction(1, 5))), (dp.ZCDP(1), "zcdp", dp.PureDP(Fraction(2, 3))),
    (dp.ApproxDP(1, 1e-6), "rdp", dp.PureDP(Fraction(1, 8))), (dp.ApproxDP(1, 1e-6), "pld", dp.ZCDP(0.002))])
def test_threads_near_the_total_are_admitted_exactly_what_fits(total: dp.Budget, accountant: str,
                                                               query_budget: dp.Budget) -> None:
    """Six threads each try as many queries as fit in all: exactly that many are released, the rest refused."""
    sess = dp.Session({"t": _ROW}, privacy_unit=dp.PrivacyUnit.row(), budget=total, accountant=accountant, seed=0)
    acc, charge = sess.accountant, sess.table("t").agg(dp.len()).cost(query_budget)
    spent, fit = acc.empty(), 0
    while acc.fits(acc.compose([spent, charge])):
        spent, fit = acc.compose([spent, charge]), fit + 1
    barrier, outcomes = threading.Barrier(6), []

    def run() -> None:
        barrier.wait()
        for _ in range(fit):
            try:
                sess.table("t").agg(dp.len()).collect(query_budget)
                outcomes.append("released")
            except dp.BudgetExceededError:
                outcomes.append("refused")

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 2 <= fit and outcomes.count("released") == fit and outcomes.count("refused") == 5 * fit
    assert sess.history()["status"].to_list() == ["committed"] * fit and acc.fits(sess._release.spent())


# ------------------------------------------------------------------------------------ the filter's conversion

@pytest.mark.parametrize("delta", [1e-6, 1e-5, 3e-7, 1e-9, 1e-12, 5e-8])
def test_renyi_filter_conversion_is_never_below_its_exact_value(delta: float) -> None:
    """The filter converted each order's RDP to ε in round-to-nearest floats: ε(α) + log(1/δ′)/(α − 1) and the
    improved rule came out below their exact values (by under an ulp; the 10⁻¹² margin covers the RDP values only,
    and is nothing next to the log terms when the charges are small). A data owner's total ε between the two
    admitted a charge whose exact filter ε exceeds it: here a 10⁻¹⁵-DP count in a session whose total ε is the
    float the filter computes for it. The conversion is now rounded up by a margin of its terms' size."""
    acc = RDPAccountant(dp.ApproxDP(1, delta))
    charge = acc.charge(dp.PureDP(1e-15))
    share = Fraction(down(Fraction(down(Fraction(delta) - Fraction(charge.delta0))) / len(FILTER_ORDERS)))
    exact = _decimal_epsilon([Fraction(v) for v in charge.values], share)
    computed = acc.filter_epsilon(charge).epsilon
    assert Decimal(computed) >= exact
    # a total just below the exact ε (the largest float under it, where the float conversion used to land)
    below = float(exact)
    if Decimal(below) >= exact:
        below = math.nextafter(below, 0)
    tight = Ledger(None, RDPAccountant(dp.ApproxDP(below, delta)))
    with pytest.raises(dp.BudgetExceededError):
        tight.reserve(charge, "q", "m")
    assert tight.charges() == []
