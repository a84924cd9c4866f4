"""Target-charging channels: q and reservation oracles (digest 000; the optimal composition they use is
brute-forced in test_stopping.py), LP check of the discrete BetweenThresholds q, admission from public state
only, and bad input.
Whole-channel exact checks of every call type: ``test_tct_exact.py``."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.composition import optimal_epsilon
from dpframe.interactive.tct import ChannelPlan, delta_star, q_between, q_notprior, q_revise
from dpframe.noise import discrete_laplace_tail
from dpframe.release import PrivateReader

from .lp import is_q_target


def test_q_oracles() -> None:
    assert [round(q_notprior(e), 10) for e in (0.01, 0.1, 0.5, 1, 2)] == \
        [0.4975000208, 0.4750208125, 0.3775406688, 0.2689414214, 0.119202922]          # O1
    assert [round(q_revise(e), 10) for e in (0.1, 0.25, 0.5)] == [0.4501660027, 0.3775406688, 0.2689414214]  # O2
    assert [round(q_between(0.1, g, 1), 6) for g in (5, 10, 20, 50)] == [0.186906, 0.30027, 0.410734, 0.47182]  # O14


def test_binomial_tail_and_reservation_oracles() -> None:
    assert delta_star(100, 315, 0.475020813) == pytest.approx(4.857e-9, rel=1e-3)          # O4 exact tail
    assert delta_star(1, 24, q_notprior(0.2)) == pytest.approx((1 - q_notprior(0.2)) ** 24)  # τ = 1
    # O6–O8: the digest's values use advanced composition (4.8 = basic at n = 24; 9.636, 25.334, 102.95;
    # 5.466); the optimal composition of the same n accesses is smaller (docs/interactive.md table)
    p = ChannelPlan.optimise(0.2, q_notprior(0.2), 1, 1e-6)
    assert (p.n, round(p.epsilon, 4)) == (24, 4.3808)                                           # O6: 4.8
    assert _advanced(0.2, 24, 1e-6 - p.delta_star) == pytest.approx(4.8)
    for k, n, e, digest in ((10, 62, 7.9801, 9.636), (100, 319, 22.5658, 25.334), (1000, 2503, 96.533, 102.95)):
        p = ChannelPlan.optimise(0.2, q_notprior(0.2), k, 1e-6)                                 # O7
        assert p.n == n and p.epsilon == pytest.approx(e, rel=1e-4) and p.epsilon < digest
        assert p.epsilon == optimal_epsilon(n, 0.2, 1e-6 - p.delta_star)   # brute-forced in test_stopping.py
    p = ChannelPlan.optimise(0.1, q_notprior(0.1), 20, 1e-6)                                    # O8: 5.466
    assert p.n == 89 and p.epsilon == pytest.approx(4.5069, rel=1e-4)
    # The loose Chernoff form would need far more hits for the same δ* (why the exact tail is used).
    assert math.exp(-0.25 * 20 / 3) > 1e-6 > p.delta_star


def _advanced(eps: float, n: int, delta: float) -> float:
    """Advanced composition (Lemma A.4 with the √2), the paper's f_ε."""
    return min(n * eps, 0.5 * n * eps * eps + eps * math.sqrt(2 * n * math.log(1 / delta)))


def _dlap_cdf_below(scale: float, k: int) -> float:
    """P[Z < k] = 1 − P[Z ≥ k]."""
    return 1.0 - discrete_laplace_tail(scale, k)


@pytest.mark.parametrize(("eps", "width", "sensitivity"), [(0.3, 6, 1), (0.3, 6, 2), (0.5, 4, 3), (0.1, 20, 5),
                                                          (1.0, 3, 2)])
def test_between_thresholds_q_verified_by_lp(eps: float, width: int, sensitivity: int) -> None:
    """The discrete BetweenThresholds q ≤ the LP's worst-case q over all pairs shifted by ≤ Δ (digest §9)."""
    lo, hi = 0, width
    scale = sensitivity / eps

    def law(v: int) -> np.ndarray:   # P[below], P[between], P[above] for value v + Z
        below = _dlap_cdf_below(scale, lo - v)
        above = discrete_laplace_tail(scale, hi + 1 - v)
        return np.array([below, 1 - below - above, above])

    claim = q_between(eps, width, sensitivity)
    between = np.array([False, True, False])
    pairs = [(v, v + s) for v in range(-3 * sensitivity, width + 3 * sensitivity + 1)
             for s in range(-sensitivity, sensitivity + 1) if s]
    assert all(is_q_target(law(a), law(b), eps, between, claim * (1 - 1e-6)) for a, b in pairs)
    # and not vacuous: within 20% of the LP's worst case (5% at Δ = 1, where Lemma G.1 is tight, O14)
    assert not all(is_q_target(law(a), law(b), eps, between, claim * 1.2) for a, b in pairs)


def _session(seed: int = 0, budget: dp.Budget = dp.ApproxDP(100, 1e-5), **kw: object) -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=seed, **kw)  # type: ignore[arg-type]


def _q(sess: dp.Session, g: int) -> dp.Query:
    return sess.table("t").filter(pl.col("g") <= g).agg(dp.len())


def test_channel_reserves_on_enter_and_halts_at_tau() -> None:
    sess = _session()
    ch = sess.target_charging(epsilon=1, max_hits=2, delta=1e-6)
    assert sess.spent().epsilon == 0  # type: ignore[union-attr]
    with ch:
        assert sess.spent() == ch.cost
        assert ch.test(_q(sess, 5), threshold=0)          # far above: a hit
        assert not ch.test(_q(sess, 0), threshold=10_000)  # far below: free
        assert "1 of 2 hits used; open" in ch.status()
        assert ch.conditional_release(_q(sess, 5), when=dp.above(1)) == pytest.approx(600, abs=30)
        assert ch.closed                                   # the τ-th hit closes the channel
        with pytest.raises(dp.DPFrameError, match="closed"):
            ch.test(_q(sess, 0), threshold=10_000)
    assert sess.spent() == ch.cost                         # a filter: the reservation, whatever the hits


def test_pay_only_for_change_prior_and_revisions() -> None:
    sess = _session(1)
    with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6, min_q=0.25) as ch:
        assert ch.test(_q(sess, 5), threshold=100, prior=True)     # unchanged "above": free
        assert ch.hits == 0
        assert ch.conditional_release(_q(sess, 2), when=dp.above(1001), name="h") is None
        assert ch.hits == 0
        assert ch.revise("h", when=dp.above(11)) == pytest.approx(300, abs=40)
        assert ch.hits == 1
        with pytest.raises(dp.DPFrameError, match="no unreleased"):
            ch.revise("h", when=dp.above(0))
        for name in (["h"], {"h": 1}, 3):          # not a name: an ArgumentError (a list was a bare TypeError)
            with pytest.raises(dp.ArgumentError, match="^name: no unreleased value named"):
                ch.revise(name, when=dp.above(0))  # type: ignore[arg-type]
        assert ch.calls == 3 and ch.hits == 1                  # refused: no call counted
        assert ch.between(_q(sess, 5), 0, 50) == "above" and ch.between(_q(sess, 0), 90, 110) == "between"
        best, value = ch.select_best([_q(sess, 0), _q(sess, 3), _q(sess, 1)], epsilon=0.5)
        assert best == 1 and value == pytest.approx(400, abs=40)
        assert ch.hits == 3


def test_per_unit_channel_removes_exhausted_units() -> None:
    sess = _session(2, budget=dp.ApproxDP(1000, 1e-5))
    with sess.target_charging(epsilon=2, max_hits=2, delta=1e-6, per_unit=True) as ch:
        q = sess.table("t").filter(pl.col("g") == 0).agg(dp.len())
        answers = [ch.test(q, threshold=50) for _ in range(4)]
        assert answers == [True, True, False, False]     # the 100 units of g = 0 are exhausted after 2 hits
        assert ch.test(_q(sess, 5), threshold=450)        # the other 500 units still answer
        assert "hits per privacy unit" in ch.status()     # never how many units are exhausted
    with pytest.raises(dp.PlanError, match="privacy-unit column"):
        dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
                   budget=dp.ApproxDP(1, 1e-6)).target_charging(epsilon=1, max_hits=2, delta=1e-7, per_unit=True)


def test_zcdp_session_reserves_rho_with_delta_star() -> None:
    sess = _session(budget=dp.ZCDP(100, 1e-5))
    with sess.target_charging(epsilon=0.2, max_hits=10, delta=1e-6) as ch:
        assert ch.plan.delta_star <= 1e-6
        assert ch.cost.rho == pytest.approx(ch.plan.n * 0.02, rel=1e-9)  # type: ignore[attr-defined]


def test_admission_depends_only_on_public_state(monkeypatch: pytest.MonkeyPatch) -> None:
    sess = _session(3)
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6) as ch:
        def no_data(*a: object, **k: object) -> None:
            raise AssertionError("data read before admission")
        with monkeypatch.context() as m:
            m.setattr(PrivateReader, "run", no_data)
            with pytest.raises(dp.BudgetError):           # ε above the channel's: refused before any read
                ch.test(_q(sess, 0), threshold=1, epsilon=2)
            with pytest.raises(dp.BudgetError):           # a revision needs 2ε ≤ ε_ch
                ch.conditional_release(_q(sess, 0), when=dp.above(0), name="x", epsilon=1)
            with pytest.raises(dp.BudgetError, match="q ="):  # BetweenThresholds' q below the channel's
                ch.between(_q(sess, 0), 0, 2)
        assert ch.test(_q(sess, 5), threshold=0)
        with monkeypatch.context() as m:
            m.setattr(PrivateReader, "run", no_data)
            with pytest.raises(dp.DPFrameError, match="closed"):   # τ reached: refused from the count
                ch.test(_q(sess, 0), threshold=1)


def test_bad_input_charges_nothing() -> None:
    sess = _session(4)
    for kwargs in ({"epsilon": 0}, {"epsilon": -1}, {"max_hits": 0}, {"delta": 0}, {"delta": 1.5},
                   {"min_q": 0.9}):
        args = {"epsilon": 0.5, "max_hits": 5, "delta": 1e-7} | kwargs
        with pytest.raises(dp.DPFrameError):
            with sess.target_charging(**args):  # type: ignore[arg-type]
                pass
        assert sess.spent().epsilon == 0  # type: ignore[union-attr]
    pure = _session(budget=dp.PureDP(5))
    with pytest.raises(dp.BudgetError, match="δ > 0"):
        pure.target_charging(epsilon=0.5, max_hits=5, delta=1e-7)
    ch = sess.target_charging(epsilon=0.5, max_hits=5, delta=1e-7)
    with pytest.raises(dp.DPFrameError, match="not open"):
        ch.test(_q(sess, 0), threshold=3)
    with ch:
        spent = sess.spent()
        with pytest.raises(dp.PlanError, match="still open"):
            sess.sparse_vector(threshold=3, max_positives=1, budget=dp.PureDP(1))
        with pytest.raises(dp.PlanError, match="still open"):
            sess.target_charging(epsilon=0.5, max_hits=5, delta=1e-7).__enter__()
        for call in (lambda: ch.test(_q(sess, 0), threshold=_q(sess, 1)),
                     lambda: ch.test(sess.table("t").group_by("g", keys=[0]).agg(dp.len()), threshold=3),
                     lambda: ch.conditional_release(_q(sess, 0), when=5),
                     lambda: ch.between(_q(sess, 0), 5, 1),
                     lambda: ch.select_best([]),
                     lambda: ch.test(_q(sess, 0), threshold=3, prior="yes")):
            with pytest.raises(dp.DPFrameError):
                call()
        assert sess.spent() == spent and ch.hits == 0 and ch.calls == 0
    with pytest.raises(dp.DPFrameError, match="closed"):
        ch.test(_q(sess, 0), threshold=3)


def test_arguments_of_the_wrong_type_or_past_floats_are_dpframe_errors() -> None:
    """Each was a raw TypeError, ValueError (ambiguous truth) or OverflowError (review 48), charged nothing."""
    sess = _session(4)
    for kwargs, argument in [({"min_q": "x"}, "min_q"), ({"min_q": [0.1]}, "min_q"), ({"min_q": 10**400}, "min_q"),
                             ({"per_unit": np.array([True, False])}, "per_unit"), ({"per_unit": "yes"}, "per_unit"),
                             ({"per_unit": pl.col("x")}, "per_unit")]:
        with pytest.raises(dp.DPFrameError) as info:
            sess.target_charging(**({"epsilon": 0.5, "max_hits": 5, "delta": 1e-7} | kwargs))  # type: ignore[arg-type]
        assert info.value.argument == argument
    assert sess.spent().epsilon == 0  # type: ignore[union-attr]
    with sess.target_charging(epsilon=0.5, max_hits=5, delta=1e-7) as ch:
        spent = sess.spent()
        for call, argument in [(lambda: ch.test(_q(sess, 0), 3, epsilon=10**400), "epsilon"),
                               (lambda: ch.conditional_release(_q(sess, 0), dp.above(3), epsilon=10**400), "epsilon"),
                               (lambda: ch.between(_q(sess, 0), 1, 10**400), "upper"),
                               (lambda: ch.test(_q(sess, 0), -(10**400)), "threshold"),
                               (lambda: ch.boundary_test(_q(sess, 0), 10**309), "threshold")]:
            with pytest.raises(dp.DPFrameError) as info:
                call()
            assert info.value.argument == argument
        assert ch.calls == 0 and ch.hits == 0 and sess.spent() == spent


def test_per_unit_charges_exactly_the_units_in_the_released_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (audit 7, gap 1): the value and the charged units come from ONE bounded sample.

    Unit 0 has rows x = 0 and x = 5 but max_rows = 1, so contribution bounding keeps one of them at
    random. With the noise patched to 0 the released sum shows whether unit 0's 5 was kept; unit 0 must
    be charged exactly then (Alg. 5 charges every unit with f_i(x) > 0). The old two-call code charged
    from a second, independently bounded sample (8 mismatches in 40 seeds).
    """
    import dpframe.interactive.tct as tct

    monkeypatch.setattr(tct, "discrete_laplace", lambda scale, size, rng: np.zeros(size, dtype=np.int64))
    data = pl.DataFrame({"u": [0, 0] + list(range(1, 200)), "x": [0.0, 5.0] + [5.0] * 199})
    kept = 0
    for seed in range(40):
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1),
                          budget=dp.ApproxDP(1e6, 1e-5), seed=seed)
        with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6, per_unit=True) as ch:
            q = sess.table("t").agg(dp.sum("x", bounds=(0, 10)))
            released = ch.conditional_release(q, when=dp.above(10))
            assert released in (995.0, 1000.0)
            unit0_in_value = released == 1000.0
            assert (ch._unit_hits.get(0, 0) == 1) == unit0_in_value, seed
            assert all(ch._unit_hits[u] == 1 for u in range(1, 200))
            kept += unit0_in_value
            before = ch._unit_hits.get(0, 0)
            value = ch.conditional_release(q, when=dp.above(10))   # a fresh bounded sample
            assert ch._unit_hits.get(0, 0) - before == (value == 1000.0)
    assert 5 <= kept <= 35                         # both cases were exercised


def test_declarative_targets_decide_release_exactly() -> None:
    """The library evaluates the target on the exact noisy value; each kind splits the line as documented."""
    sess = _session(5)
    q = sess.table("t").agg(dp.sum("g", bounds=(0, 0.5)))         # a float sum on a fine grid
    with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6) as ch:
        value = ch.conditional_release(q, when=dp.above(-10**9))
        assert isinstance(value, float) and ch.hits == 1
        for target, inside in ((dp.above(value), True), (dp.below(value), False),
                               (dp.between(value, value), True), (dp.outside(value, value), False)):
            assert target.contains(value) is inside
        assert ch.conditional_release(_q(sess, 5), when=dp.between(0, 10)) is None          # 600: a miss
        assert ch.conditional_release(_q(sess, 5), when=dp.outside(0, 10)) is not None      # a hit
        assert ch.conditional_release(_q(sess, 5), when=dp.below(10)) is None and ch.hits == 2


def test_bad_targets_are_refused_naming_the_argument() -> None:
    for build, argument in ((lambda: dp.above(math.nan), "threshold"), (lambda: dp.below("4000"), "threshold"),
                            (lambda: dp.between(5, 1), "upper"), (lambda: dp.outside(math.inf, 1), "lower"),
                            (lambda: dp.between(True, 2), "lower"), (lambda: dp.above(_q(_session(), 0)), "threshold")):
        with pytest.raises(dp.DPFrameError) as info:
            build()
        assert info.value.argument == argument and info.value.fix
    sess = _session(6)
    with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6) as ch:
        for when in (4000, None, "above 4000", (0, 10)):
            with pytest.raises(dp.DPFrameError, match="target") as info:
                ch.conditional_release(_q(sess, 0), when=when)  # type: ignore[arg-type]
            assert info.value.argument == "when" and "dp.above(4000)" in (info.value.fix or "")
        assert ch.calls == 0 and sess.spent() == ch.cost


def test_huge_epsilon_is_refused_without_overflow_or_charge() -> None:
    assert q_notprior(1000) == 0.0 and q_between(1000, 3, 1) == 0.0      # no OverflowError
    assert q_notprior(-math.log(3)) == pytest.approx(0.75)
    sess = _session(budget=dp.ApproxDP(1e9, 1e-5))
    for eps in (1000, 30):
        with pytest.raises(dp.BudgetError, match="cannot pay off") as info:
            sess.target_charging(epsilon=eps, max_hits=5, delta=1e-7)
        assert info.value.argument == "epsilon"
    with pytest.raises(dp.BudgetError, match="cannot pay off") as info:
        sess.target_charging(epsilon=0.5, max_hits=5, delta=1e-7, min_q=1e-9)
    assert info.value.argument == "min_q"
    assert sess.spent().epsilon == 0  # type: ignore[union-attr]


def test_o3_hits_per_log_factor_and_exact_tail_beats_chernoff() -> None:
    """Remark B.5 (digest O3/O3b): τ ≥ ln(1/δ*)/(α − ln(1+α)) hits suffice by raw Chernoff; the exact
    binomial tail the channels use is at least as small at those τ (n = ⌊(1+α)τ/q⌋ accesses)."""
    raw = {0.5: 10.578, 1: 3.2589, 5: 0.31170, 0.25: 37.235, 2: 1.1094}
    for alpha, factor in raw.items():
        assert 1 / (alpha - math.log1p(alpha)) == pytest.approx(factor, abs=1e-3)
    for alpha, simple in {0.5: 12, 1: 4, 5: 0.48}.items():
        assert 2 * (1 + alpha) / alpha**2 == pytest.approx(simple)
    q, target = q_notprior(0.1), 1e-6
    for alpha in (0.5, 1, 5):
        tau = math.ceil(raw[alpha] * math.log(1 / target))
        n = math.floor((1 + alpha) * tau / q)
        chernoff = math.exp(-tau * (alpha - math.log1p(alpha)))
        assert chernoff <= target * 1.001
        assert delta_star(tau, n, q) <= chernoff


def test_status_in_a_pld_session_and_equal_thresholds_message() -> None:
    import warnings

    sess = _session(budget=dp.ApproxDP(1000, 1e-5), accountant="pld")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with sess.target_charging(epsilon=0.5, max_hits=30, delta=1e-7) as ch:
            assert ch.status().startswith("reserved ε=49.97")             # the channel's (ε', δ), no overflow
    basic = _session()
    with basic.target_charging(epsilon=1, max_hits=5, delta=1e-6, min_q=0.25) as ch:
        with pytest.raises(dp.DPFrameError, match="two different thresholds"):
            ch.between(_q(basic, 0), 3, 3)
        with pytest.raises(dp.DPFrameError, match="swap them"):
            ch.between(_q(basic, 0), 5, 3)


def test_delta_star_is_within_1e_13_of_the_exact_binomial_tail() -> None:
    """δ*(n) = P[Bin(n, q) ≤ τ − 1] (Boost's incomplete beta) against the exact rational tail at the float q: every
    plan multiplies it by 1 + 1e-9, so an error below 1e-13 never under-reports; τ > n is certain (δ* = 1)."""
    from fractions import Fraction

    for n in (5, 27, 62, 300):
        for q in (0.49, 0.1, 4.5e-5):
            for tau in (1, 2, 10, 100):
                if tau > n:
                    assert delta_star(tau, n, q) == 1.0
                    continue
                exact = sum(math.comb(n, j) * Fraction(q) ** j * (1 - Fraction(q)) ** (n - j) for j in range(tau))
                assert abs(Fraction(delta_star(tau, n, q)) - exact) <= exact * Fraction(1, 10**13)
