"""Regressions from the issue-5 audit: signed scores over keys from the data (neighbouring datasets,
exact law), typed partial/failed results for a fixed k, δ_t validation, k limits, count_units without
row bounding, bad input refused before anything is charged."""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
import polars as pl
import pytest
from dpframe_topk import TopKFailed, TopKPartial

import dpframe as dp
from dpframe.mechanism import Statistic
from dpframe.testing import epsilon_lower_bound
from tests.topk import oracle
from tests.topk.test_topk_laws import _fits

SIGNED = dp.sum("spend", bounds=(-1, 1))


def _signed_data(a: int, c: int, b: int, *, without_unit_0: bool = False) -> pl.DataFrame:
    """a units give key A +1 (unit 0 among them), c units give C +1, b units give B −1."""
    rows = ([(u, "A", 1.0) for u in range(a)] + [(100 + u, "C", 1.0) for u in range(c)]
            + [(200 + u, "B", -1.0) for u in range(b)])
    data = pl.DataFrame(rows, schema=["user", "key", "spend"], orient="row")
    return data.filter(pl.col("user") != 0) if without_unit_0 else data


def _signed_query(data: pl.DataFrame, k_max: int, seed: int = 0):
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ApproxDP(10**4, 0.5), seed=seed)
    return sess, sess.table("t").group_by("key").top_k(k=None, k_max=k_max, score=SIGNED)


def _exact_law(data: pl.DataFrame, k_max: int, budget) -> dict:
    """The law of Alg 2 on the *whole* domain's clamped histogram (unobserved keys 0, max(total, 0))."""
    sess, q = _signed_query(data, k_max)
    stats = sess._release.reader().statistics(q.query._node, (q.score.statistic,), by=q.query._by)
    keys = stats["key"].to_list()
    scores = np.maximum(stats[q.score.statistic.key].to_numpy(), 0)
    law = oracle.alg2_law(scores, q.plan(budget).stable, k_max)
    return {None if o is None else tuple(sorted(keys[i] for i in o)): p for o, p in law.items()}


def _outcomes(data: pl.DataFrame, k_max: int, budget, n: int, seed: int) -> Counter:
    out: Counter = Counter()
    for i in range(n):
        if i % 40 == 0:                          # a fresh session before the total δ runs out
            _, q = _signed_query(data, k_max, seed * 10**6 + i)
        r = q.collect(budget)
        out[tuple(r["key"].to_list()) if isinstance(r, pl.DataFrame) else None] += 1
    return out


@pytest.mark.parametrize(("counts", "k_max", "budget"), [
    ((1, 0, 50), 1, dp.ApproxDP(8, 1e-6)),          # the audit's repro: D released {A} every time
    pytest.param((30, 10, 50), 2, dp.ApproxDP(2, 1e-2),     # a law with real mass on several outcomes
                 marks=pytest.mark.slow),
])
def test_signed_scores_over_keys_from_the_data_are_dp(counts, k_max, budget):
    """D vs D′ = D minus unit 0: exact laws satisfy (ε, δ), and the engine's outputs follow them on both."""
    d, d_prime = _signed_data(*counts), _signed_data(*counts, without_unit_0=True)
    laws = [_exact_law(d, k_max, budget), _exact_law(d_prime, k_max, budget)]
    eps, delta = float(budget.epsilon), float(budget.delta)
    outcomes = set(laws[0]) | set(laws[1])
    for p, q in (laws, laws[::-1]):
        assert sum(max(0.0, p.get(o, 0.0) - math.exp(eps) * q.get(o, 0.0)) for o in outcomes) <= delta
    n = 300
    runs = [_outcomes(d, k_max, budget, n, 1), _outcomes(d_prime, k_max, budget, n, 2)]
    for draws, law in zip(runs, laws):
        assert _fits(draws, law, n) > 1e-3
    released_a = [np.array([o is not None and "A" in o for o in r.elements()], dtype=float) for r in runs]
    assert epsilon_lower_bound(*released_a, threshold=1, delta=delta) <= eps


def test_signed_scores_with_public_keys_rank_negative_totals():
    """Public keys: the full vector is known, negatives are real scores (no clamping), g doubles."""
    data = _signed_data(0, 0, 50)            # B = −50, A and C absent (score 0)
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ApproxDP(100, 1e-3), seed=1)
    q = sess.table("t").group_by("key", keys=["A", "B", "C"]).top_k(k=2, score=SIGNED)
    assert q.score.gap == 2 * q.score.key_sensitivity
    assert q.collect(dp.ApproxDP(20, 1e-6))["key"].to_list() == ["A", "C"]


def _flat(n_keys: int = 300) -> pl.DataFrame:
    gen = np.random.default_rng(0)
    return pl.DataFrame({"user_id": gen.integers(0, 2000, 20000), "place": gen.integers(0, n_keys, 20000)})


def test_fixed_k_never_returns_an_empty_frame():
    """The audit's repro: flat counts, keys from the data, k=10 at (0.5, 1e-7): typed, never height 0."""
    sess = dp.Session({"v": _flat()}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=50),
                      budget=dp.ApproxDP(100, 1e-3), seed=0)
    q = sess.table("v").group_by("place").top_k(k=10)
    kinds = Counter()
    for _ in range(8):
        out = q.collect(dp.ApproxDP(0.5, 1e-7))
        assert not (isinstance(out, pl.DataFrame) and out.height < 10)
        if isinstance(out, TopKPartial):
            assert 0 < out.k_returned < 10 and out.keys.columns == ["place"] and not out
        kinds[type(out).__name__] += 1
    assert set(kinds) <= {"TopKFailed", "TopKPartial", "DataFrame"} and "TopKFailed" in kinds
    assert "limited domain" in q.explain(dp.ApproxDP(0.5, 1e-7))


def test_partial_result_carries_the_released_keys():
    """A clear top-2 but k=4 over keys from the data: StableTopK finds 2, limited domain cannot add zeros."""
    rows = [(u, "a") for u in range(300)] + [(1000 + u, "b") for u in range(250)]
    sess = dp.Session({"v": pl.DataFrame(rows, schema=["u", "k"], orient="row")}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.ApproxDP(100, 1e-3), seed=2)
    out = sess.table("v").group_by("k").top_k(k=4, release_scores=True).collect(dp.ApproxDP(8, 1e-6))
    assert isinstance(out, TopKPartial) and isinstance(out, dp.TopKFailed) and not out
    assert out.k == 4 and out.k_returned == 2 and out.keys["k"].to_list() == ["a", "b"]
    assert out.keys.columns == ["k", "count_units"] and "limited-domain patch" in out.reason
    with pytest.warns(dp.TopKWarning) as caught:
        sql = sess.sql("SELECT k AS key FROM v GROUP BY k HAVING TOP_K(COUNT(DISTINCT u), 4)").collect(
            dp.ApproxDP(8, 1e-6))
    partial = caught[0].message.outcome
    assert isinstance(partial, TopKPartial) and partial.keys.equals(sql) and sql.columns == ["key"]


def test_zcdp_fixed_k_over_keys_from_the_data_is_partial_not_patched():
    rows = [(u, "a") for u in range(300)] + [(1000 + u, "b") for u in range(250)] + [(2000, "c")]
    sess = dp.Session({"v": pl.DataFrame(rows, schema=["u", "k"], orient="row")}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.ZCDP(10, 1e-3), seed=2)
    q = sess.table("v").group_by("k").top_k(k=3)
    out = q.collect(dp.ZCDP(1, 1e-6))
    assert isinstance(out, TopKPartial) and out.keys["k"].to_list() == ["a", "b"]
    assert "no patch over keys from the data" in out.reason and "no zCDP proof" in q.explain(dp.ZCDP(1, 1e-6))
    assert sess.spent() == dp.ZCDP(1, 1e-6)


@pytest.mark.parametrize(("session_budget", "budget", "kwargs"), [
    (dp.ZCDP(5, 1e-5), dp.ZCDP(0.001, 1e-6), dict(k=5, delta_t=1e-6)),       # the audit's repro (charged twice)
    (dp.ZCDP(5, 1e-5), dp.ZCDP(0.5, 1e-6), dict(k=None, delta_t=1e-6)),
    (dp.ZCDP(5, 1e-5), dp.ZCDP(0.5, 1e-6), dict(k=2, delta_t=1e-6, keys=["a", "b", "c"])),
    (dp.ApproxDP(5, 1e-5), dp.ApproxDP(1, 1e-6), dict(k=5, delta_t=1e-6)),
    (dp.ApproxDP(5, 1e-5), dp.ApproxDP(1, 1e-6), dict(k=None, delta_t=2e-6, ptr="laplace")),
    (dp.ApproxDP(5, 1e-5), dp.ApproxDP(1, 1e-6), dict(k=5, delta_t=1e-6, method="stable", accountant="rdp")),
])
def test_delta_t_not_below_delta_is_refused_uncharged(session_budget, budget, kwargs):
    keys = kwargs.pop("keys", None)
    accountant = kwargs.pop("accountant", None)
    data = pl.DataFrame({"u": range(30), "c": ["a", "b", "c"] * 10})
    sess = dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit("u"), budget=session_budget, seed=0,
                      **({"accountant": accountant} if accountant else {}))
    with pytest.raises(dp.BudgetError) as e:
        sess.table("v").group_by("c", keys=keys).top_k(**kwargs).collect(budget)
    assert e.value.argument == "delta_t" and "smaller" in str(e.value)
    assert sess.history().height == 0


@pytest.mark.parametrize(("kwargs", "argument"), [
    (dict(k=10**400), "k"), (dict(k=10**6 + 1), "k"), (dict(k=None, k_max=10**6 + 1), "k_max"),
    (dict(k=3, k_max=10**9), "k_max"), (dict(release_scores="yes"), "release_scores"),
    (dict(release_scores=1), "release_scores"),
])
def test_sizes_and_flags_are_validated_before_charging(kwargs, argument):
    sess = dp.Session({"v": pl.DataFrame({"u": [1, 2], "c": ["a", "b"]})}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.ApproxDP(5, 1e-5), seed=0)
    with pytest.raises(dp.PlanError) as e:
        sess.table("v").group_by("c").top_k(**kwargs).collect(dp.ApproxDP(1, 1e-6))
    assert e.value.argument == argument and e.value.fix and len(str(e.value)) < 400
    assert sess.history().height == 0


def test_huge_k_over_two_keys_is_fast():
    """k = 10⁶ over 2 keys from the data used to peel a 2·10⁶-item pool 10⁶ times (> 7 min)."""
    sess = dp.Session({"v": pl.DataFrame({"u": range(100), "c": ["a"] * 60 + ["b"] * 40})},
                      privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(5, 1e-5), seed=0)
    start = time.perf_counter()
    out = sess.table("v").group_by("c").top_k(k=10**6).collect(dp.ApproxDP(1, 1e-6))
    assert time.perf_counter() - start < 30
    assert isinstance(out, TopKFailed) and out.k == 10**6


def _visits() -> pl.DataFrame:
    """1000 users each visit x, y and z; 300 other users visit w (the audit's truncation example)."""
    rows = [(u, c) for u in range(1000) for c in "xyz"] + [(u, "w") for u in range(1000, 1300)]
    return pl.DataFrame(rows, schema=["user", "place"], orient="row")


@pytest.mark.parametrize("backend", ["polars", "duckdb", pytest.param("spark", marks=pytest.mark.slow)])
def test_count_units_counts_every_key_of_a_unit(backend):
    """Distinct units per key need no max_rows bound (Δ = 1 per key under add/remove of a whole unit)."""
    if backend == "spark":
        from tests.conftest import spark_unavailable
        if spark_unavailable():
            pytest.skip(spark_unavailable())
    sess = dp.Session({"t": _visits()}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ApproxDP(100, 1e-3),
                      seed=0, backend=backend)
    q = sess.table("t").group_by("place").top_k(k=3)
    stats = sess._release.reader().statistics(q.query._node, (Statistic("units"),), by=q.query._by,
                                              bound=q.score.bound_rows)
    assert dict(stats.rows()) == {"w": 300, "x": 1000, "y": 1000, "z": 1000}
    assert q.collect(dp.ApproxDP(5, 1e-6))["place"].to_list() == ["x", "y", "z"]
    assert "no max_rows" in q.explain(dp.ApproxDP(5, 1e-6))
    # len() still counts rows per unit, so it is bounded (max_rows = 1 keeps one of x, y, z per user)
    bounded = sess._release.reader().statistics(q.query._node, (Statistic("rows"),), by=q.query._by)
    assert bounded["__rows"].sum() == 1300


def test_explain_shows_sum_thresholds_in_score_units():
    sess = dp.Session({"t": _signed_data(30, 10, 50)}, privacy_unit=dp.PrivacyUnit("user"),
                      budget=dp.ApproxDP(100, 1e-3), seed=0)
    text = sess.table("t").group_by("key").top_k(k=None, score=SIGNED).explain(dp.ApproxDP(8, 1e-6))
    ptr = next(line for line in text.splitlines() if "PTR:" in line)
    threshold = float(ptr.split("> ")[1].split(" score units")[0])
    assert 5 < threshold < 30 and "grid units of 1.52588e-05" in ptr     # ≈ 13.5 score units, not 885979
    assert "negative total is ranked as 0" in text


def test_selections_without_a_full_sort_match_the_full_sort():
    """``top_desc`` / ``sorted_padded`` (partition, then sort the few) equal the full stable sort, ties included."""
    from dpframe_topk.select import order_desc, sorted_padded, top_desc

    gen = np.random.default_rng(0)
    for trial in range(400):
        n = int(gen.integers(0, 40))
        scores = gen.integers(-2, 3, n) if trial % 2 else gen.integers(0, 10**6, n)
        for count in (1, 2, 5, n - 1, n, n + 2):
            if count < 1:
                continue
            assert top_desc(scores, count).tolist() == order_desc(scores)[:count].tolist()
            full = np.sort(scores)[::-1][:count].tolist()
            assert sorted_padded(scores, count).tolist() == full + [0] * (count - len(full))
