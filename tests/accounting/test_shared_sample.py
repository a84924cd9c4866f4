"""All mechanisms of a query read one Poisson sample: the plan is charged subsample(composition).

Audit issue 6 §1: each curve was amplified on its own and the results added, which is the cost of
independent samples and under-charges (ε=0.0732 charged vs 0.0990 for the composition). The expected
values here are computed by hand from the thesis' formulas, not with the code under test.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp import FILTER_ORDERS, RDPCharge

DATA = pl.DataFrame({"u": list(range(2000)), "g": [0, 1] * 1000, "x": [1.0] * 2000})
GAMMA = 0.01


def session(accountant: str, budget: dp.Budget = dp.ApproxDP(2.0, 1e-6)) -> dp.Session:
    # Two groups a unit may touch both of: each statistic's noise is charged by its ε-DP curve (a unit
    # that can change one coordinate only is charged the exact 1-D curve: tests/accounting/test_exact_cells.py).
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=budget,
                      accountant=accountant, seed=3)


def two_counts(sess: dp.Session) -> dp.Frame:
    return sess.table("t").sample(GAMMA).group_by("g", keys=[0, 1]).agg(dp.len(), dp.sum("x", bounds=(0, 1)))


def pure_rdp(eps: float, alpha: int) -> float:
    """RDP of any ε-DP mechanism (Bun & Steinke 2016): the RR pair p = e^ε/(1+e^ε), capped at ε."""
    p = math.exp(eps) / (1 + math.exp(eps))
    return min(eps, math.log(p**alpha * (1 - p) ** (1 - alpha) + (1 - p) ** alpha * p ** (1 - alpha)) / (alpha - 1))


def general_bound(alpha: int, gamma: float, rdp) -> float:  # type: ignore[no-untyped-def]
    """Thesis Thm 2.3.1, term by term (integer α)."""
    w = [math.comb(alpha, ell) * (1 - gamma) ** (alpha - ell) * gamma**ell for ell in range(alpha + 1)]
    total = (1 - gamma) ** (alpha - 1) * (alpha * gamma - gamma + 1) + w[2] * math.exp(rdp(2))
    total += 3 * sum(w[ell] * math.exp((ell - 1) * rdp(ell)) for ell in range(3, alpha + 1))
    return math.log(total) / (alpha - 1)


def test_rdp_session_charges_the_composition_subsampled_once() -> None:
    sess = session("rdp")
    charge = two_counts(sess).cost(dp.PureDP(2.0))
    assert isinstance(charge, RDPCharge) and charge.labels == (
        "composition of (ε-DP(ε=1); ε-DP(ε=1)) sampled at rate 0.01",)
    cap = math.log(1 + GAMMA * (math.e**2 - 1))                       # Li et al. on the pair: 0.061933
    assert cap == pytest.approx(0.0619325294, abs=1e-9)
    separate = 2 * math.log(1 + GAMMA * (math.e - 1))                # the old, wrong charge's cap: 0.0341
    for alpha in (2, 3, 4, 8, 32):
        i = int(np.nonzero(FILTER_ORDERS == alpha)[0][0])
        want = min(cap, general_bound(alpha, GAMMA, lambda a: 2 * pure_rdp(1.0, a)))
        assert charge.values[i] == pytest.approx(want, rel=1e-9)
        wrong = 2 * min(math.log(1 + GAMMA * (math.e - 1)), general_bound(alpha, GAMMA, lambda a: pure_rdp(1.0, a)))
        assert charge.values[i] > wrong
    assert separate < cap
    # α = 32: two separately amplified curves gave 0.00675 (audit); the composition, subsampled once, 0.0177
    assert charge.values[int(np.nonzero(FILTER_ORDERS == 32)[0][0])] == pytest.approx(0.0176908, abs=1e-6)


def _exact_subsampled_rr_pair_epsilon(delta: float) -> float:
    """ε(δ) of two RR(p = e/(1+e)) releases on one Poisson sample, both neighbour directions, exactly."""
    p = math.e / (1 + math.e)
    outs = list(product((0, 1), repeat=2))
    P = np.array([np.prod([p if o else 1 - p for o in out]) for out in outs])
    Q = np.array([np.prod([1 - p if o else p for o in out]) for out in outs])
    A = (1 - GAMMA) * Q + GAMMA * P                                   # remove: (A, Q); add: (Q, A)

    def d(e: float) -> float:
        return max(float(np.maximum(A - math.exp(e) * Q, 0).sum()), float(np.maximum(Q - math.exp(e) * A, 0).sum()))

    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if d(mid) <= delta else (mid, hi)
    return hi


def test_pld_plan_report_is_the_composition_subsampled_once() -> None:
    exact = _exact_subsampled_rr_pair_epsilon(1e-6)
    assert exact == pytest.approx(0.06193, abs=1e-4)
    sess = session("pld")
    text = two_counts(sess).explain(dp.PureDP(2.0))
    reported = float(text.split("PLD of this plan: ε=")[1].split(" ")[0])
    assert exact - 1e-9 <= reported <= exact + 3e-4     # never below the exact value; two grids of 1e-4
    report = sess.accountant.describe_charge(two_counts(sess).cost(dp.PureDP(2.0)))
    assert "composition of" in report


def test_basic_session_amplifies_the_whole_cost_once() -> None:
    sess = session("basic")
    cost = two_counts(sess).cost(dp.PureDP(2.0))
    assert float(cost.epsilon) == pytest.approx(math.log1p(GAMMA * math.expm1(2.0)), abs=1e-9)


def test_spent_report_recomposes_the_shared_sample_from_the_ledger() -> None:
    sess = session("pld")
    two_counts(sess).collect(budget=dp.PureDP(2.0))
    report = sess.spent_report()
    exact = _exact_subsampled_rr_pair_epsilon(1e-6)
    assert report["pld"] is not None and exact - 1e-9 <= report["pld"] <= exact + 3e-4
    assert report["basic"] == pytest.approx(math.log1p(GAMMA * math.expm1(2.0)), abs=1e-6)
    assert report["rdp"] is not None and report["rdp"] >= report["pld"] and report["zcdp"] is None


def test_gaussians_on_one_sample_are_one_gaussian_with_the_tight_bound() -> None:
    a, b = acc.gaussian(sigma=2.0), acc.gaussian(sigma=3.0, sensitivity=2.0)
    mu = math.sqrt((1 / 2) ** 2 + (2 / 3) ** 2)
    joint = acc.composition([a, b]).subsampled(GAMMA)
    one = acc.gaussian(sigma=1 / mu).subsampled(GAMMA)
    assert np.allclose(joint.rdp_at([2, 8, 32, 128]), one.rdp_at([2, 8, 32, 128]), rtol=1e-12)
    # the tight bound for the composed Gaussian is larger than adding the separately amplified curves
    assert joint.rdp_at([32])[0] > a.subsampled(GAMMA).rdp_at([32])[0] + b.subsampled(GAMMA).rdp_at([32])[0]
    # mixed families: the general bound on the summed curve, capped by the summed pure bound
    mixed = acc.composition([acc.laplace(scale=1.0), acc.gaussian(sigma=1.0)]).subsampled(GAMMA)
    assert mixed.eps_inf is None and not mixed.tight_subsampling
    lap = acc.composition([acc.laplace(scale=1.0), acc.laplace(scale=2.0)]).subsampled(GAMMA)
    assert lap.eps_inf == pytest.approx(math.log1p(GAMMA * math.expm1(1.5)), rel=1e-12)


def test_composition_round_trips_through_json_and_refuses_bad_input() -> None:
    c = acc.composition([acc.pure(1.0), acc.approx(0.5, 1e-7)]).subsampled(0.1)
    back = acc.PrivacyCurve.to_json(c)
    from dpframe.accounting import from_json

    again = from_json(back)
    assert np.allclose(again.rdp_at([2, 8, 32]), c.rdp_at([2, 8, 32]), rtol=1e-12)
    assert again.delta0 == pytest.approx(1e-8) and again.delta_at(0.1) == pytest.approx(c.delta_at(0.1), rel=1e-9)
    for bad in ([], [1.0], None):
        with pytest.raises(dp.DPFrameError) as info:
            acc.composition(bad)  # type: ignore[arg-type]
        assert info.value.argument == "curves"


def test_huge_epsilon_on_a_sample_is_a_dpframe_error_or_a_finite_charge_never_overflow() -> None:
    """Audit issue 6 §8: math.expm1(800) raised a plain OverflowError."""
    basic = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1.0), seed=3)
    cost = basic.table("t").sample(0.5).agg(dp.len()).cost(dp.PureDP(800.0))
    assert float(cost.epsilon) == pytest.approx(800 + math.log(0.5), abs=1e-6)
    with pytest.raises(dp.BudgetExceededError):
        basic.table("t").sample(0.5).agg(dp.len()).collect(budget=dp.PureDP(800.0))
    rdp = session("rdp")
    charge = rdp.table("t").sample(0.5).agg(dp.len()).cost(dp.PureDP(1000.0))
    assert all(math.isfinite(v) for v in charge.values)
    with pytest.raises(dp.BudgetExceededError):
        rdp.table("t").sample(0.5).agg(dp.len()).collect(budget=dp.PureDP(1000.0))
    assert basic.history().height == 0 and rdp.history().height == 0
    assert acc.pure(1000.0).subsampled(0.5).eps_inf == pytest.approx(1000 + math.log(0.5), abs=1e-9)


def test_pld_history_composes_each_stored_plan_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """history() describes every charge; a PLD session computes each plan's PLD note once, not on every call
    (35 charges took about 1.3 s per history() call; noticed by review 39b)."""
    import dpframe.accounting.pld as pld

    sess = session("pld")
    for _ in range(3):
        two_counts(sess).collect(dp.PureDP(0.1))
    first = sess.history()["cost"].to_list()
    built = []
    monkeypatch.setattr(pld, "from_json", lambda spec: built.append(spec) or acc.laplace(1.0))
    assert sess.history()["cost"].to_list() == first and built == []
    assert all("PLD of this plan" in c for c in first)
