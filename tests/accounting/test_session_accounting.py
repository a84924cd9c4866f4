"""Session accountants 'rdp' / 'pld', Poisson sampling in the engine, the ledger, spent_report()."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp import FILTER_ORDERS, RDPCharge, best_epsilon

DATA = pl.DataFrame({"u": list(range(2000)), "x": [1.0] * 2000})


def session(accountant: str, budget: dp.Budget = dp.ApproxDP(2.0, 1e-6), **kw) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, accountant=accountant,
                      seed=3, **kw)


def test_rdp_session_charges_the_plans_curves_and_enforces_by_the_filter() -> None:
    sess = session("rdp")
    q = sess.table("t").agg(dp.len())
    n = 0
    with pytest.raises(dp.BudgetExceededError):
        while True:
            q.collect(budget=dp.ZCDP(0.01))
            n += 1
    # hand-computed filter: ρ per query, ε = min_α nρα + conversion at δ/|Λ|; the first n that exceeds 2 stops
    def filt(k: int) -> float:
        return best_epsilon(FILTER_ORDERS, k * 0.01 * FILTER_ORDERS * (1 + 1e-12), 1e-6 / len(FILTER_ORDERS)).epsilon
    assert filt(n) <= 2.0 < filt(n + 1)
    # more queries than basic composition of the CKS conversion per query would allow (each ≈ 0.48)
    assert n > 2 / float(dp.ZCDP(0.01).to_approx(1e-6 / n).epsilon)
    spent = sess.spent()
    assert isinstance(spent, dp.ApproxDP) and float(spent.epsilon) == pytest.approx(filt(n), abs=1e-9)


def test_refused_and_bad_queries_charge_nothing() -> None:
    sess = session("rdp", dp.ApproxDP(0.5, 1e-6))
    before = sess._release.spent()
    with pytest.raises(dp.BudgetExceededError):
        sess.table("t").agg(dp.len()).collect(budget=dp.PureDP(5.0))
    with pytest.raises(dp.DPFrameError) as info:
        sess.table("t").sample(0.0)
    assert info.value.argument == "rate"
    with pytest.raises(dp.DPFrameError):
        sess.table("t").sample(1.5)
    assert sess._release.spent() == before and sess.history().height == 0


def test_rdp_session_needs_delta() -> None:
    with pytest.raises(dp.DPFrameError):
        session("rdp", dp.PureDP(1.0))
    with pytest.raises(dp.BudgetError):
        session("rdp", dp.ApproxDP(1.0, 0))


def test_sampling_amplifies_the_charge_and_explain_shows_it() -> None:
    for name in ("basic", "rdp", "pld"):
        sess = session(name)
        full = sess.table("t").agg(dp.len())
        sampled = sess.table("t").sample(0.05).agg(dp.len())
        text = sampled.explain(budget=dp.PureDP(1.0))
        assert "PoissonSample rate=0.05" in text and "amplified" in text
        if name == "basic":
            assert float(sampled.cost(dp.PureDP(1.0)).epsilon) == pytest.approx(math.log1p(0.05 * math.expm1(1)),
                                                                                abs=1e-9)
        else:
            a = np.asarray(sampled.cost(dp.PureDP(1.0)).values)
            b = np.asarray(full.cost(dp.PureDP(1.0)).values)
            assert np.all(a < b)
    z = session("zcdp", dp.ZCDP(1.0))
    assert "charged the full cost" in z.table("t").sample(0.05).agg(dp.len()).explain(budget=dp.ZCDP(0.1))


def test_sample_keeps_about_rate_units_fresh_each_run_and_backends_agree() -> None:
    sizes = []
    for backend in ("polars", "duckdb"):
        sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(100.0), seed=11,
                          backend=backend)
        q = sess.table("t").sample(0.25).agg(dp.len())
        runs = [int(q.collect(budget=dp.PureDP(20.0))["len"][0]) for _ in range(4)]
        assert all(abs(r - 500) < 90 for r in runs) and len(set(runs)) > 1   # fresh randomness per execution
        sizes.append(runs)
    assert sizes[0] == sizes[1]      # same seeds ⇒ same samples and noise on both backends


def test_ledger_reopen_recomposes_exactly(tmp_path) -> None:
    path = tmp_path / "budget.ledger"
    sess = session("pld", ledger=path)
    sess.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 1))).collect(budget=dp.ZCDP(0.02))
    sess.table("t").sample(0.1).agg(dp.len()).collect(budget=dp.PureDP(0.5))
    raw, spent, report = sess._release.spent(), sess.spent(), sess.spent_report()
    sess.close()
    again = session("pld", ledger=path)
    assert again._release.spent() == raw and isinstance(raw, RDPCharge)
    assert again.spent() == spent and again.spent_report() == report
    assert set(report) == {"basic", "zcdp", "rdp", "pld"}
    assert report["zcdp"] is None                       # a sampled query: zCDP cannot compose it
    assert report["pld"] <= report["rdp"] and report["pld"] <= report["basic"]


def test_plugin_accountants_are_registered() -> None:
    from dpframe.plugin import plugin_host

    host = plugin_host()
    for name in ("basic", "zcdp", "rdp", "pld"):
        assert host.accountant(name) is not None
    assert host.accountant("pld") is acc.PLDAccountant


def test_plan_curve_without_rdp_composes_by_its_cost_in_rdp_and_pld_sessions() -> None:
    """Issue 6 item 7: a mechanism that declares only δ(ε) must still compose. The Rényi filter cannot use
    a profile, so the plan is charged the curve its budget cost guarantees (sound: the cost bounds it).
    (This test used to assert a refusal whose fix named the 'pld' accountant, which refused it too.)"""
    only_profile = acc.from_profile(lambda e: 0.0, label="profile-only plugin mechanism")
    for name in ("rdp", "pld"):
        sess = session(name)
        for rate in (1.0, 0.1):
            got = sess.accountant.charge_plan(dp.PureDP(0.1), [only_profile], rate)
            want = RDPCharge.of([acc.pure(0.1).subsampled(rate)])
            assert got.values == want.values and got.delta0 == 0.0
        assert sess.history().height == 0


def test_standalone_composability_errors_name_the_accountants_that_can() -> None:
    only_profile = acc.from_profile(lambda e: 0.0, label="profile-only")
    with pytest.raises(dp.BudgetConversionError) as info:
        acc.RDPAccountant().compose(only_profile)
    assert "has no RDP curve" in str(info.value) and "'pld'" in str(info.value) and "'rdp' or" not in str(info.value)
    with pytest.raises(dp.BudgetConversionError) as info:
        acc.ZCDPAccountant().compose(acc.gaussian(sigma=1.0).subsampled(rate=0.1))
    assert "has no zCDP bound" in str(info.value) and info.value.argument == "mechanism"
    assert acc.PLDAccountant().compose(only_profile).epsilon(1e-6) == 0.0


def test_standalone_accountants_do_not_need_a_total_but_session_methods_say_so() -> None:
    a = acc.RDPAccountant()
    with pytest.raises(dp.DPFrameError) as info:
        a.total
    assert info.value.argument == "total"


def test_query_delta_the_session_cannot_hold_is_refused_not_dropped() -> None:
    """docs/concepts.md: (ε, δ>0) → pure or zCDP is impossible. The planner used to drop δ silently."""
    for total in (dp.PureDP(5.0), dp.ZCDP(5.0)):
        sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=total, seed=3)
        q = sess.table("t").agg(dp.len())
        before = sess._release.spent()
        for run in (q.cost, q.explain, q.collect):
            with pytest.raises(dp.BudgetConversionError) as info:
                run(dp.ApproxDP(1.0, 1e-6))
            assert info.value.argument == "budget" and "dp.PureDP" in str(info.value)
        assert sess._release.spent() == before and sess.history().height == 0
        assert q.cost(dp.ApproxDP(1.0, 0)) == (dp.PureDP(1) if total.notion == "pure" else dp.ZCDP(0.5))
    rdp = session("rdp")
    assert isinstance(rdp.table("t").agg(dp.len()).cost(dp.ApproxDP(1.0, 1e-6)), RDPCharge)
