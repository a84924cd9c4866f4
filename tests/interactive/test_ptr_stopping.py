"""PTR block, generalized-PTR median (sensitivity of the instability distance by brute force, ⊥
charging), gated release and early stopping charged by stopping time."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.ptr import gated_release, instability_distance, propose_test_release, robust_median
from dpframe.interactive.stopping import run_until


def _median(codes: list[int]) -> int:
    s = sorted(codes)
    return s[(len(s) + 1) // 2 - 1]


@pytest.mark.parametrize(("m", "n", "top"), [(1, 4, 5), (2, 3, 4),
                                              pytest.param(2, 4, 6, marks=pytest.mark.slow)])
def test_instability_distance_has_sensitivity_m_and_certifies_local_sensitivity(m: int, n: int, top: int) -> None:
    for data in itertools.product(range(top + 1), repeat=n):
        codes = sorted(data)
        neighbours = []                # remove or add up to m values (one privacy unit)
        for k in range(1, m + 1):
            neighbours += [[c for i, c in enumerate(codes) if i not in drop]
                           for drop in itertools.combinations(range(len(codes)), k)]
            neighbours += [sorted(codes + list(add)) for add in itertools.product(range(top + 1), repeat=k)]
        for beta in (0, 1, 2):
            d = instability_distance(np.array(codes), top, m, beta)
            for nb in neighbours:
                assert abs(instability_distance(np.array(sorted(nb)), top, m, beta) - d) <= m
                if d >= 1 and nb:       # certified: one unit moves the median by ≤ β
                    assert abs(_median(nb) - _median(codes)) <= beta


def test_robust_median_threshold_is_the_smallest_that_covers_delta_by_hand() -> None:
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(1, 1e-6), seed=0)
    q = robust_median(sess.table("t"), "x", bounds=(0, 1000))
    # width 1000 → grid 2^(10 − 16): top = 64 000 codes; proposals top >> j, j = 1..17, at least 1: 15 distinct
    assert q.top == 64_000 and len(q.proposals) == 15
    t, rho_scale, nu_scale = q.threshold(Fraction(1, 2), Fraction(1, 10**7))
    assert (rho_scale, nu_scale) == (4, 8)               # m/(ε_test/2), 2m/(ε_test/2) at ε_test = 1/2, m = 1
    # 15·(e^{−h/8}/(1 + e^{−1/8}) + e^{−h/4}/(1 + e^{−1/4})) ≤ 1e-7 first at h = 146 (9.45e-8; h = 145: 1.071e-7)
    def union(h: int) -> float:
        return 15 * (math.exp(-h / 8) / (1 + math.exp(-1 / 8)) + math.exp(-h / 4) / (1 + math.exp(-1 / 4)))
    assert union(146) <= 1e-7 < union(145)
    assert t == 2 * 146 - 1                     # ⌈t/2⌉ = 146: the smallest t that covers δ, not a step past it
    assert sess.spent().epsilon == 0 and sess.spent().delta == 0    # planning only: nothing charged


def test_block_charges_only_the_test_on_bottom() -> None:
    sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(1, 1e-6), seed=0)
    out = propose_test_release(sess, lambda: False, lambda: 1, test_epsilon=Fraction(1, 4),
                               release_epsilon=Fraction(1, 2), delta=Fraction(1, 10**7))
    assert out is None and sess.spent() == dp.ApproxDP(Fraction(1, 4), Fraction(1, 10**7))
    assert propose_test_release(sess, lambda: True, lambda: 7, test_epsilon=Fraction(1, 4),
                                release_epsilon=Fraction(1, 2), delta=Fraction(1, 10**7)) == 7
    assert sess.spent() == dp.ApproxDP(1, Fraction(2, 10**7))


def test_robust_median_adapts_and_bottom_is_cheap() -> None:
    dense = pl.DataFrame({"x": [500.0 + (i % 5) for i in range(5000)]})
    sess = dp.Session({"t": dense}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-5), seed=5)
    q = robust_median(sess.table("t"), "x", bounds=(0, 10_000))
    vals = [q.collect(dp.ApproxDP(1, 1e-7)) for _ in range(5)]
    assert all(v is not None and abs(v - 502) < 5 for v in vals)   # bounds span 10 000: noise adapted
    assert "generalized PTR" in q.explain(dp.ApproxDP(1, 1e-7))
    sparse = dp.Session({"t": pl.DataFrame({"x": [1.0, 9000.0, 40.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                        budget=dp.ApproxDP(2, 1e-5), seed=5)
    assert robust_median(sparse.table("t"), "x", bounds=(0, 10_000)).collect(dp.ApproxDP(1, 1e-7)) is None
    assert sparse.spent() == dp.ApproxDP(Fraction(1, 2), Fraction(1, 10**7))
    with pytest.raises(dp.BudgetError):
        q.collect(dp.PureDP(1))
    with pytest.raises(dp.DPFrameError):
        robust_median(sess.table("t"), "x", bounds=(5, 1))
    with pytest.raises(dp.SchemaError):
        robust_median(sess.table("t"), "nope", bounds=(0, 1))


def test_gated_release_and_early_stopping() -> None:
    data = pl.DataFrame({"x": [float(i % 10) for i in range(200)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(3), seed=6)
    t = sess.table("t")
    out = gated_release(t.agg(dp.mean("x", bounds=(0, 10))), dp.PureDP(1), t.agg(dp.len()), 100, dp.PureDP(0.5))
    assert out is not None and abs(out["x_mean"][0] - 4.5) < 1
    assert sess.spent() == dp.PureDP(Fraction(3, 2))
    assert gated_release(t.agg(dp.mean("x", bounds=(0, 10))), dp.PureDP(1), t.agg(dp.len()), 10**6,
                         dp.PureDP(0.5)) is None
    assert sess.spent() == dp.PureDP(2)
    steps = [t.filter(pl.col("x") < b).agg(dp.len()) for b in (1, 5, 9)]
    with pytest.raises(dp.BudgetExceededError):        # the worst case (3 × 0.5) must fit up front
        run_until(steps, dp.PureDP(0.5), stop=lambda r: True)
    assert sess.spent() == dp.PureDP(2)
    res = run_until(steps, dp.PureDP(Fraction(1, 3)), stop=lambda r: r[-1]["len"][0] > 50)
    assert len(res) == 2 and sess.spent() == dp.PureDP(Fraction(8, 3))
    with pytest.raises(dp.DPFrameError):
        run_until([], dp.PureDP(0.1), stop=lambda r: True)


def test_ptr_and_gated_release_refused_outside_basic_sessions_unless_refund_false() -> None:
    data = pl.DataFrame({"x": [float(i % 10) for i in range(200)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-5),
                      accountant="rdp", seed=8)
    t = sess.table("t")
    with pytest.raises(dp.BudgetConversionError, match="refund=False"):
        gated_release(t.agg(dp.mean("x", bounds=(0, 10))), dp.PureDP(1), t.agg(dp.len()), 10**6, dp.PureDP(0.5))
    with pytest.raises(dp.BudgetConversionError, match="refund=False"):
        robust_median(t, "x", bounds=(0, 100)).collect(dp.ApproxDP(1, 1e-7))
    with pytest.raises(dp.DPFrameError, match="refund"):
        propose_test_release(sess, lambda: False, lambda: 1, test_epsilon=Fraction(1, 4),
                             release_epsilon=Fraction(1), refund="no")  # type: ignore[arg-type]
    assert sess.history().height == 0                     # nothing charged
    assert gated_release(t.agg(dp.mean("x", bounds=(0, 10))), dp.PureDP(1), t.agg(dp.len()), 10**6,
                         dp.PureDP(0.5), refund=False) is None
    assert sess.spent().epsilon >= Fraction(3, 2)         # type: ignore[union-attr]  # ⊥, yet the worst case


def test_ptr_bad_input_is_refused_before_anything_is_charged() -> None:
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 10})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(3), seed=1)
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    bad = [
        ("test_epsilon", dict(test=lambda: False, release=lambda: 1.0, test_epsilon=Fraction(-1), release_epsilon=2)),
        ("release_epsilon", dict(test=lambda: False, release=lambda: 1.0, test_epsilon=1, release_epsilon=-1)),
        ("delta", dict(test=lambda: False, release=lambda: 1.0, test_epsilon=1, release_epsilon=1, delta=2)),
        ("test", dict(test=None, release=lambda: 1.0, test_epsilon=1, release_epsilon=1)),
    ]
    for argument, kwargs in bad:
        with pytest.raises(dp.DPFrameError) as info:
            propose_test_release(sess, **kwargs)
        assert info.value.argument == argument
    t = sess.table("t")
    with pytest.raises(dp.DPFrameError) as info:
        gated_release("x", dp.PureDP(1), t.agg(dp.len()), 1, dp.PureDP(1))   # type: ignore[arg-type]
    assert info.value.argument == "query"
    for column in (["x"], pl.col("x")):
        with pytest.raises(dp.SchemaError):
            robust_median(t, column, (0, 100))                                # type: ignore[arg-type]
    assert sess.spent() == dp.PureDP(1)              # the earlier charge is intact, nothing new charged


def test_robust_median_explains_like_every_query() -> None:
    # The same Explanation as other queries: the text, the budget block, format="json"; bad input free.
    sess = dp.Session({"t": pl.DataFrame({"x": [float(i % 9) for i in range(500)]})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(2, 1e-5), seed=5)
    q = robust_median(sess.table("t"), "x", bounds=(0, 100))
    e = q.explain(dp.ApproxDP(1, 1e-7))
    assert "generalized PTR" in e and "budget: requested ε=1, δ=1e-07; cost ε=1, δ=1e-07" in e
    assert "remaining after this query" in e and e.budget["fits"] is True
    data = q.explain(dp.ApproxDP(1, 1e-7), format="json")
    assert data["budget"]["cost"] == "ε=1, δ=1e-07" and data["epsilon_test"] == 0.5
    assert data["test_threshold_rows"] > 0 and data["bounds"] == [0.0, 100.0] and data["private"] is False
    assert "DOES NOT FIT" in q.explain(dp.ApproxDP(3, 1e-7))
    with pytest.raises(dp.PlanError, match="format"):
        q.explain(dp.ApproxDP(1, 1e-7), format="yaml")
    with pytest.raises(dp.BudgetError, match="explain"):
        q.explain(None)  # type: ignore[arg-type]
    assert sess.history().height == 0


@pytest.mark.parametrize("threshold", [10, 10**6])           # released, held back: the same charge
def test_gated_release_in_a_zcdp_session_composes_the_two_rho(threshold: int) -> None:
    """A zCDP session with ``refund=False``: ε_gate²/2 + ε²/2 (the gate's Laplace count, then an ε-DP query,
    composed), where the pure cell (ε_gate + ε)²/2 was charged — here 1/8 + 1/2 = 5/8 against 9/8."""
    data = pl.DataFrame({"x": [float(i % 10) for i in range(200)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ZCDP(5), seed=8)
    t = sess.table("t")
    out = gated_release(t.agg(dp.mean("x", bounds=(0, 10))), dp.PureDP(1), t.agg(dp.len()), threshold,
                        dp.PureDP(Fraction(1, 2)), refund=False)
    assert (out is None) == (threshold == 10**6)
    assert sess.spent() == dp.ZCDP(Fraction(5, 8))
    assert sess.history()["mechanisms"].to_list() == ["gated release (zCDP composition)"]
    with pytest.raises(dp.BudgetConversionError, match="refund=False"):
        gated_release(t.agg(dp.len()), dp.PureDP(1), t.agg(dp.len()), threshold, dp.PureDP(1))
