"""Accountants and the ledger (dpframe/accounting/): composition, refusal, durability, atomicity."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from core_testkit import make_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpframe as dp
from dpframe.accounting import BasicAccountant, Ledger, ZCDPAccountant
from dpframe.budgets import make

DATA = pl.DataFrame({"u": [1, 2, 3, 4], "g": ["a", "b", "a", "b"], "x": [1.0, 2.0, 3.0, 4.0]})
SECRET = "s3cr3t-4242"


# ---------------------------------------------------------------------------------------- accountants


def test_basic_accountant_by_hand() -> None:
    acc = BasicAccountant(dp.ApproxDP(1, 1e-6))
    assert acc.notion == "approx" and acc.name == "basic"
    assert acc.empty() == make("approx", Fraction(0))
    assert acc.charge(dp.PureDP(0.5)) == dp.ApproxDP(0.5, 0)
    spent = acc.compose([dp.ApproxDP(0.25, 1e-7), acc.charge(dp.PureDP(0.5)), dp.ApproxDP(0.125, 2e-7)])
    assert spent == dp.ApproxDP(Fraction(7, 8), Fraction(3, 10**7))
    assert acc.fits(spent)
    assert acc.remaining(spent) == dp.ApproxDP(Fraction(1, 8), Fraction(7, 10**7))
    over_eps = make("approx", Fraction(3, 2), Fraction(1, 10**6))
    over_delta = make("approx", Fraction(1), Fraction(2, 10**6))
    assert acc.fits(make("approx", Fraction(1), Fraction(1, 10**6)))          # exactly the total fits
    assert not acc.fits(over_eps) and not acc.fits(over_delta)
    assert acc.shortfall(over_eps) == "ε=1/2, δ=0"
    assert acc.shortfall(over_delta) == "ε=0, δ=1e-06"
    assert acc.remaining(over_eps) == make("approx", Fraction(0), Fraction(0))  # never negative
    assert "basic" in acc.describe()


def test_basic_accountant_pure() -> None:
    acc = BasicAccountant(dp.PureDP(1))
    assert acc.charge(dp.ApproxDP(0.5, 0)) == dp.PureDP(0.5)
    with pytest.raises(dp.BudgetConversionError):
        acc.charge(dp.ApproxDP(0.5, 1e-9))
    with pytest.raises(dp.BudgetConversionError):
        acc.charge(dp.ZCDP(0.5))
    assert acc.compose([dp.PureDP(0.5), dp.PureDP(0.25)]) == dp.PureDP(0.75)
    assert acc.compose([]) == make("pure", Fraction(0))
    assert not acc.fits(make("pure", Fraction(1) + Fraction(1, 10**30)))
    assert acc.shortfall(dp.PureDP(3)) == "ε=2"


def test_zcdp_accountant_by_hand() -> None:
    acc = ZCDPAccountant(dp.ZCDP(1, 1e-6))
    assert acc.charge(dp.PureDP(1)) == dp.ZCDP(0.5)
    assert acc.charge(dp.ApproxDP(1, 0)) == dp.ZCDP(0.5)
    with pytest.raises(dp.BudgetConversionError):
        acc.charge(dp.ApproxDP(1, 1e-7))
    spent = acc.compose([acc.charge(dp.PureDP(1)), dp.ZCDP(0.25, 1e-7)])
    assert spent == dp.ZCDP(0.75, 1e-7) and acc.fits(spent)
    assert acc.remaining(spent) == dp.ZCDP(0.25, Fraction(9, 10**7))
    assert acc.shortfall(dp.ZCDP(2, 1e-6)) == "ρ=1"
    assert "zCDP" in acc.describe()


@pytest.mark.parametrize("cls, total", [(BasicAccountant, dp.ZCDP(1)), (ZCDPAccountant, dp.PureDP(1)),
                                        (ZCDPAccountant, dp.ApproxDP(1, 1e-6))])
def test_accountants_refuse_totals_of_other_notions(cls, total) -> None:
    with pytest.raises(dp.BudgetConversionError) as info:
        cls(total)
    assert info.value.argument == "accountant"


# ------------------------------------------------------------------------------------ over-budget


@pytest.mark.parametrize("total, ask, requested, remaining, difference", [
    (dp.PureDP(1), dp.PureDP(3), "ε=3", "ε=1/2", "ε=5/2"),
    (dp.ApproxDP(1, 1e-6), dp.PureDP(0.75), "ε=3/4, δ=0", "ε=1/2, δ=1e-06", "ε=1/4, δ=0"),
    (dp.ZCDP(1), dp.ZCDP(0.75), "ρ=3/4", "ρ=1/2", "ρ=1/4"),
    (dp.ZCDP(1), dp.PureDP(1.5), "ρ=9/8", "ρ=1/2", "ρ=5/8"),
])
def test_over_budget_query_is_refused_and_charges_nothing(total, ask, requested, remaining, difference) -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=total)
    first = dp.PureDP(0.5) if total.notion != "zcdp" else dp.ZCDP(0.5)
    s.table("t").agg(dp.len()).collect(first)
    spent, history = s.spent(), s.history()
    q = s.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 5)))
    with pytest.raises(dp.BudgetExceededError) as info:
        q.collect(ask)
    e = info.value
    assert (e.requested, e.remaining, e.difference) == (requested, remaining, difference)
    assert e.argument == "budget" and "nothing was charged" in str(e) and e.fix
    assert s.spent() == spent
    assert s.history().equals(history)
    # explain still works and shows the overshoot, for free
    assert "DOES NOT FIT" in q.explain(ask) and q.explain(ask, format="json")["budget"]["fits"] is False


def test_delta_shortfall_is_refused() -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, 1e-6))
    q = s.table("t").group_by("g").agg(dp.len())
    q.collect(dp.ApproxDP(1, 1e-6))
    with pytest.raises(dp.BudgetExceededError) as info:
        q.collect(dp.ApproxDP(0.001, 1e-9))
    assert info.value.difference == "ε=0, δ=1e-09"
    assert s.spent() == dp.ApproxDP(1, 1e-6)


def test_exactly_exhausting_the_budget_is_allowed() -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    for _ in range(10):
        s.table("t").agg(dp.len()).collect(dp.PureDP(0.1))         # 10 × 1/10 = 1 exactly (not 0.999..)
    assert s.spent() == dp.PureDP(1) and s.remaining().epsilon == 0
    with pytest.raises(dp.BudgetExceededError):
        s.table("t").agg(dp.len()).collect(dp.PureDP(Fraction(1, 10**12)))


# --------------------------------------------------------------------------- failure after reservation


def _fail_backend(sess: dp.Session, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(request):  # noqa: ANN001, ANN202
        raise RuntimeError(f"row with spend={SECRET} could not be parsed")

    monkeypatch.setattr(sess._catalog.default_backend, "statistics", boom)


def test_failure_after_reservation_keeps_the_charge_and_hides_private_values(monkeypatch) -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(2))
    s.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    _fail_backend(s, monkeypatch)
    with pytest.raises(dp.DPFrameError) as info:
        s.table("t").agg(dp.len()).collect(dp.PureDP(0.25))
    err = info.value
    assert SECRET not in str(err) and SECRET not in repr(err)
    assert "RuntimeError" in str(err) and "stays charged" in str(err)
    assert err.__cause__ is None and err.__context__ is None
    assert s.spent() == dp.PureDP(0.75)
    h = s.history()
    assert h["status"].to_list() == ["committed", "failed"]
    assert h["cost"].to_list() == ["ε=1/2", "ε=1/4"]
    assert SECRET not in str(h.rows())
    charges = s._release.charges()
    assert charges[-1].error == "RuntimeError" and charges[0].error is None


def test_failure_error_does_not_carry_the_private_exception(monkeypatch) -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(2))
    _fail_backend(s, monkeypatch)
    with pytest.raises(dp.DPFrameError) as info:
        s.table("t").agg(dp.len()).collect(dp.PureDP(0.25))
    chained = [info.value.__context__, info.value.__cause__]
    assert all(c is None or SECRET not in str(c) for c in chained)


def test_failure_of_a_mechanism_after_reservation_is_also_kept(monkeypatch) -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(2))
    q = s.table("t").agg(dp.len())
    pinned = q._planned(dp.PureDP(1))                 # collect() would plan again: pin this plan
    monkeypatch.setattr(q, "_planned", lambda budget: pinned)
    plan = pinned.detail

    def always(stats, rng):  # noqa: ANN001, ANN202
        raise ValueError("broken plugin")

    monkeypatch.setattr(plan.plans[0], "release", always)
    with pytest.raises(dp.PluginError):          # caught by the dry run on zero statistics: nothing charged
        q.collect(dp.PureDP(1))
    assert s.history().height == 0

    original = type(plan.plans[0]).release

    def on_data(stats, rng):  # noqa: ANN001, ANN202
        if any(v.any() for v in stats.values()):  # fails only on real (non-zero) statistics
            raise ValueError(SECRET)
        return original(plan.plans[0], stats, rng)

    monkeypatch.setattr(plan.plans[0], "release", on_data)
    with pytest.raises(dp.DPFrameError) as info:
        q.collect(dp.PureDP(1))
    assert SECRET not in str(info.value)
    assert s.spent() == dp.PureDP(1) and s.history()["status"].to_list() == ["failed"]


# ------------------------------------------------------------------------------------------- ledger


def _ledger_session(path: Path, budget: dp.Budget = dp.PureDP(2), **kw) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, ledger=path, seed=0, **kw)


def test_ledger_survives_a_new_session(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    s = _ledger_session(path)
    s.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    s.table("t").agg(dp.len()).collect(dp.PureDP(0.25))
    s.close()
    again = _ledger_session(str(path))
    assert again.spent() == dp.PureDP(0.75)
    assert again.history()["cost"].to_list() == ["ε=1/2", "ε=1/4"]
    again.table("t").agg(dp.len()).collect(dp.PureDP(1))
    with pytest.raises(dp.BudgetExceededError):                       # 1.75 + 0.5 > 2
        again.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    assert _ledger_session(path).spent() == dp.PureDP(1.75)


@pytest.mark.parametrize("budget", [dp.PureDP(3), dp.ApproxDP(2, 0), dp.ApproxDP(2, 1e-6), dp.ZCDP(2)], ids=repr)
def test_ledger_refuses_a_session_with_another_budget(tmp_path: Path, budget: dp.Budget) -> None:
    path = tmp_path / "budget.ledger"
    _ledger_session(path).table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    with pytest.raises(dp.LedgerError) as info:
        _ledger_session(path, budget)
    assert info.value.argument == "ledger"
    assert _ledger_session(path).spent() == dp.PureDP(0.5)               # nothing was reset


def test_ledger_refuses_another_accountant(tmp_path: Path) -> None:
    class Other(BasicAccountant):
        name = "other"

        def describe(self) -> str:
            return "other"

    path = tmp_path / "l.db"
    Ledger(path, BasicAccountant(dp.PureDP(1))).reserve(dp.PureDP(0.5), "q", "m")
    with pytest.raises(dp.LedgerError) as info:
        Ledger(path, Other(dp.PureDP(1)))
    assert "accountant" in str(info.value)
    assert Ledger(path, BasicAccountant(dp.PureDP(1))).spent() == dp.PureDP(0.5)


@pytest.mark.parametrize("content", [b"garbage bytes, not a database" * 200, bytes(range(256)) * 16,
                                     b"SQLite format 3\x00" + b"\xff" * 4000], ids=["text", "binary", "bad-header"])
def test_corrupt_ledger_file_is_an_error_never_a_reset(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "budget.ledger"
    path.write_bytes(content)
    with pytest.raises(dp.LedgerError) as info:
        _ledger_session(path)
    assert info.value.argument == "ledger"
    assert path.read_bytes() == content                                   # the file was not overwritten


def test_corrupt_charge_row_is_a_ledger_error(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    s = _ledger_session(path)
    s.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    s.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE charges SET cost = 'not json'")
    again = _ledger_session(path)
    with pytest.raises(dp.LedgerError):
        again.spent()
    with pytest.raises(dp.LedgerError):
        again.table("t").agg(dp.len()).collect(dp.PureDP(0.1))


def test_history_of_a_corrupt_ledger_is_a_ledger_error(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    s = _ledger_session(path)
    s.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    s.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE charges SET cost = 'not json'")
    with pytest.raises(dp.LedgerError):
        _ledger_session(path).history()


def test_ledger_direct_api(tmp_path: Path) -> None:
    led = Ledger(None, BasicAccountant(dp.PureDP(1)))
    a = led.reserve(dp.PureDP(0.25), "q1", "m1")
    b = led.reserve(dp.PureDP(0.5), "q2", "m2")
    assert led.spent() == dp.PureDP(0.75)          # reservations count before commit
    led.commit(a)
    led.fail(b, "ValueError")
    with pytest.raises(dp.BudgetExceededError):
        led.reserve(dp.PureDP(0.5), "q3", "m3")
    rows = led.charges()
    assert [(r.status, r.query, r.mechanisms, r.cost, r.error) for r in rows] == [
        ("committed", "q1", "m1", dp.PureDP(0.25), None), ("failed", "q2", "m2", dp.PureDP(0.5), "ValueError")]
    assert led.spent() == dp.PureDP(0.75)


# ------------------------------------------------------------ property: never overspend, exact spending

QUERY = st.tuples(st.sampled_from(["pure", "approx"]),
                  st.fractions(min_value=Fraction(1, 50), max_value=Fraction(3, 4), max_denominator=100),
                  st.sampled_from([Fraction(1, 10**6), Fraction(3, 10**6), Fraction(7, 10**6)]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries=st.lists(QUERY, min_size=1, max_size=10))
def test_session_never_overspends_and_spends_exactly_the_admitted_costs(queries) -> None:
    total = dp.ApproxDP(2, Fraction(1, 10**5))
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=total)
    admitted_eps, admitted_delta, admitted = Fraction(0), Fraction(0), 0
    for kind, eps, delta in queries:
        if kind == "pure":
            q, budget = s.table("t").agg(dp.len()), dp.PureDP(eps)
        else:
            q, budget = s.table("t").group_by("g").agg(dp.len()), dp.ApproxDP(eps, delta)
        cost = q.cost(budget)
        fits = (admitted_eps + cost.epsilon <= total.epsilon and admitted_delta + cost.delta <= total.delta)
        try:
            q.collect(budget)
        except dp.BudgetExceededError:
            assert not fits
        else:
            assert fits
            admitted_eps += cost.epsilon
            admitted_delta += cost.delta
            admitted += 1
        spent = s.spent()
        assert spent.epsilon <= total.epsilon and spent.delta <= total.delta
        assert (spent.epsilon, spent.delta) == (admitted_eps, admitted_delta)
    assert s.history().height == admitted


# ----------------------------------------------------------------------------------------- concurrency


def _hammer(sessions: list[dp.Session], threads: int, per_thread: int, cost: dp.Budget) -> list[int]:
    ok = [0] * threads
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def work(i: int) -> None:
        s = sessions[i % len(sessions)]
        q = s.table("t").group_by("g", keys=["a", "b"]).agg(dp.len(), dp.sum("x", bounds=(0, 5)))
        barrier.wait()
        for _ in range(per_thread):
            try:
                q.collect(cost)
                ok[i] += 1
            except dp.BudgetExceededError:
                pass
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors, errors
    return ok


def test_threads_sharing_one_session_never_overspend() -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(5), seed=None)
    ok = _hammer([s], threads=8, per_thread=5, cost=dp.PureDP(0.25))
    assert sum(ok) == 20                                     # 40 attempts, exactly 5 / 0.25 fit
    assert s.spent() == dp.PureDP(sum(ok) * Fraction(1, 4)) == dp.PureDP(5)
    h = s.history()
    assert h.height == 20 and set(h["status"]) == {"committed"}


def test_two_sessions_sharing_a_ledger_file_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "shared.ledger"
    sessions = [dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(3), ledger=path)
                for _ in range(2)]
    ok = _hammer(sessions, threads=8, per_thread=4, cost=dp.PureDP(0.25))
    assert sum(ok) == 12
    for s in sessions:
        assert s.spent() == dp.PureDP(3)
    assert sessions[0].history().equals(sessions[1].history())


@pytest.mark.slow
def test_processes_sharing_a_ledger_file_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "shared.ledger"
    script = textwrap.dedent(f"""
        import polars as pl, dpframe as dp
        data = pl.DataFrame({{"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]}})
        s = dp.Session({{"t": data}}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(2), ledger={str(path)!r})
        ok = 0
        for _ in range(6):
            try:
                s.table("t").agg(dp.len()).collect(dp.PureDP(0.125)); ok += 1
            except dp.BudgetExceededError:
                pass
        print(ok)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(int(o.strip()) for o in outs) == 16
    assert _ledger_session(path).spent() == dp.PureDP(2)
