"""Sampled output laws against exact oracles (``tests/topk/oracle.py``): Alg 3's patch paths and the
whole fixed-k StableTopK, the TCT one-shot top-k, the Laplace PTR pass probability, limited domain."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction as F

import numpy as np
import polars as pl
import pytest
from dpframe_topk import calibrate as cal
from dpframe_topk import select
from scipy import stats

import dpframe as dp
from dpframe.noise import SeededRandomSource
from tests.topk import oracle

PUBLIC = list("abcde")


def _query(keys, session_budget, k, seed=7, **kw):
    data = pl.DataFrame({"user": [0, 1], "city": ["a", "b"]})
    sess = dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit("user"), budget=session_budget, seed=seed)
    return sess.table("v").group_by("city", keys=keys).top_k(k=k, **kw)


def _fits(draws: Counter, law: dict, n: int) -> float:
    """Chi-square p-value of ``draws`` against ``law``; outcomes with expected count < 5 are pooled.

    An outcome the law gives probability 0 is an immediate failure (p = 0).
    """
    if any(law.get(o, 0.0) == 0.0 for o in draws):
        return 0.0
    big = [o for o, p in law.items() if p * n >= 5]
    observed = [draws.get(o, 0) for o in big]
    expected = [law[o] * n for o in big]
    rest = n - sum(observed)
    rest_expected = n - sum(expected)
    if rest_expected >= 1e-9:
        observed.append(rest)
        expected.append(rest_expected)
    expected = np.array(expected) * n / sum(expected)
    return float(stats.chisquare(observed, expected).pvalue)


def _sample(q, plan, scores, n, runner=None):
    scores = np.asarray(scores, dtype=np.int64)
    draws: Counter = Counter()
    for _ in range(n):
        sel = runner(scores) if runner else q.query._select(plan, scores, q._front.rng)
        draws[None if sel.chosen is None else frozenset(sel.chosen.tolist())] += 1
    return draws


SCORES = [14, 10, 7, 4, 0]


@pytest.mark.parametrize(("keys", "session_budget", "budget", "scores", "ptr"), [
    (PUBLIC, dp.ZCDP(10, 0.5), dp.ZCDP(F(1, 10), F(4, 10)), SCORES, "gaussian"),         # peeling patch
    (None, dp.ApproxDP(10, 0.5), dp.ApproxDP(2, F(4, 10)), SCORES[:4], "gaussian"),    # limited-domain patch
    pytest.param(None, dp.ZCDP(10, 0.5), dp.ZCDP(F(1, 10), F(4, 10)), SCORES[:4], "gaussian",  # zCDP: no fill
                 marks=pytest.mark.slow),                                                 # (partial; -m slow)
    (PUBLIC, dp.ApproxDP(10, 0.5), dp.ApproxDP(F(3, 2), F(4, 10)), SCORES, "laplace"),  # Laplace PTR, pure patch
])
def test_fixed_k_stable_topk_law(keys, session_budget, budget, scores, ptr):
    """Alg 3 end to end on fixed scores: every path (k̃ < k, = k, > k drop/keep, ⊥ fallback) mixed."""
    q = _query(keys, session_budget, 2, ptr=ptr)
    plan = q.plan(budget)
    law = oracle.alg3_law(np.array(scores), q, plan)
    assert abs(sum(law.values()) - 1) < 1e-9
    n = 2000
    assert _fits(_sample(q, plan, scores, n), law, n) > 1e-3


def _patch_runner(q, plan, k_tilde, found):
    def run(scores):
        return q.query._patch(plan, scores, k_tilde, None if found is None else np.asarray(found, dtype=np.int64),
                             q._front.rng)
    return run


@pytest.mark.parametrize(("keys", "budget", "k", "k_tilde", "found", "path"), [
    (PUBLIC, dp.ZCDP(F(1, 10), F(4, 10)), 2, 3, [0, 1, 2], "drop"),     # k̃ − k = 1 < k: drop the lowest by EM
    (PUBLIC, dp.ZCDP(F(1, 10), F(4, 10)), 2, 4, [0, 1, 2, 3], "keep"),  # k̃ − k = 2 ≥ k: keep k by EM
    (PUBLIC, dp.ZCDP(F(1, 10), F(4, 10)), 3, 1, [0], "grow"),            # k̃ < k: peel the rest outside S
    (PUBLIC, dp.ZCDP(F(1, 10), F(4, 10)), 2, 2, None, "fallback"),       # ⊥: peel k over everything
    (None, dp.ApproxDP(2, F(4, 10)), 2, 1, [0], "ld-grow"),              # keys from the data: limited domain
    (None, dp.ApproxDP(2, F(4, 10)), 2, 2, None, "ld-fallback"),
])
def test_patch_paths_match_their_exact_law(keys, budget, k, k_tilde, found, path):
    session_budget = dp.ZCDP(10, 0.5) if isinstance(budget, dp.ZCDP) else dp.ApproxDP(10, 0.5)
    scores = np.array([9, 8, 6, 5, 3] if keys else [9, 8, 6, 5], dtype=np.int64)
    q = _query(keys, session_budget, k)
    plan = q.plan(budget)
    patch, g = plan.patch, int(q.score.gap)
    have = frozenset(found or [])
    if path in ("drop", "keep"):
        steps = k_tilde - k if path == "drop" else k
        picked = oracle.peel_law(-scores if path == "drop" else scores, sorted(have), steps,
                                 float(patch.peel_epsilon(steps)) / g)
        law = {(have - s) if path == "drop" else s: p for s, p in picked.items()}
    else:
        steps = k - len(have)
        outside = [i for i in range(scores.size) if i not in have]
        if path.startswith("ld"):
            k_bar = max(steps, q.k_max)
            picked = oracle.ld_law(scores, outside, steps, k_bar, patch.ld_epsilon(steps), q.score.gap,
                                   np.log(k_bar) + cal.log_inv(patch.ld_delta))
        else:
            picked = oracle.peel_law(scores, outside, steps, float(patch.peel_epsilon(steps)) / g)
        law = {have | s: p for s, p in picked.items()}
    assert len(law) > 2                                   # a real spread, not a point mass
    n = 1500
    assert _fits(_sample(q, plan, scores, n, _patch_runner(q, plan, k_tilde, found)), law, n) > 1e-3


def test_zcdp_patch_over_keys_from_the_data_only_drops():
    """zCDP, keys from the data: k̃ < k returns the k̃ keys (partial), ⊥ returns nothing; k̃ > k still drops."""
    q = _query(None, dp.ZCDP(10, 0.5), 3)
    plan = q.plan(dp.ZCDP(F(1, 10), F(4, 10)))
    scores = np.array([9, 8, 6, 5], dtype=np.int64)
    short = q.query._patch(plan, scores, 1, np.array([0]), q._front.rng)
    assert short.chosen.tolist() == [0] and "no patch over keys from the data" in short.reason
    assert q.query._patch(plan, scores, 3, None, q._front.rng).chosen.size == 0
    assert q.query._patch(plan, scores, 4, np.array([0, 1, 2, 3]), q._front.rng).chosen.size == 3


@pytest.mark.parametrize("k", [1, 2])
def test_tct_one_shot_topk_law(k):
    """TCT: score + discrete Laplace(t) per candidate, top-k of the noisy scores, ties to the lower index."""
    scores = np.array([5, 4, 4], dtype=np.int64)
    t = F(3, 2)
    law = oracle.tct_law(scores, k, t)
    assert abs(sum(law.values()) - 1) < 1e-9
    rng, n = SeededRandomSource(10 + k), 3000
    draws = Counter(frozenset(select.tct_topk(scores, k, t, rng)[0].tolist()) for _ in range(n))
    assert _fits(draws, law, n) > 1e-3


def test_tct_noisy_scores_are_the_released_ones():
    rng = SeededRandomSource(3)
    scores = np.array([50, 10, 0], dtype=np.int64)
    top, noisy = select.tct_topk(scores, 2, F(1), rng)
    assert top.size == noisy.size == 2 and abs(noisy - scores[top]).max() < 40


@pytest.mark.parametrize("plan", [cal.stable_plan_pure_parts(F(1, 2), F(1, 100), F(1)),
                                  cal.stable_plan_zcdp(F(1, 20), F(1, 100), F(2), "laplace")],
                         ids=["pure-parts", "zcdp-laplace"])
@pytest.mark.parametrize("q", [0, 2, 8, 14])
def test_ptr_laplace_pass_probability(plan, q):
    """P[q + Z > g + T] = P[Z ≥ g + T − q + 1] for Z discrete Laplace (exact tail), against 3000 draws."""
    exact = oracle.ptr_pass(plan, q)
    rng = SeededRandomSource(q)
    passes = sum(select.ptr_pass(q, plan, rng) for _ in range(3000))
    assert stats.binomtest(passes, 3000, exact).pvalue > 1e-3
    if q <= plan.g:
        assert exact <= float(plan.delta_t)                  # Pr[pass | q ≤ g] ≤ δ_t, exactly


def test_limited_domain_law_with_virtual_items():
    """Fewer candidates than k̄: the zero-score virtual items (one item with a multiplicity) stop the draw."""
    scores = np.array([12, 11, 3], dtype=np.int64)
    eps, k_bar, log_term = F(1), 6, float(np.log(6) + np.log(10))
    law = oracle.ld_law(scores, [0, 1, 2], 3, k_bar, eps, F(1), log_term)
    rng, n = SeededRandomSource(4), 3000
    draws = Counter(frozenset(select.limited_domain(scores, np.arange(3), 3, k_bar, eps, F(1), log_term,
                                                     rng).tolist()) for _ in range(n))
    assert len(law) > 3 and _fits(draws, law, n) > 1e-3
