"""Exact oracles for the top-k algorithms (digest 001 §4.4, §4.6; target-charging O7) and brute-force
neighbour checks of the gap sensitivity."""

import itertools
import math
from fractions import Fraction as F

import numpy as np
import pytest
from dpframe_topk import calibrate as cal
from dpframe_topk import select
from dpframe_topk.pate import MultiLabelPATE
from dpframe_topk.query import gap_sensitivity
from scipy import stats

from dpframe.budgets import zcdp_epsilon, zcdp_rho
from dpframe.interactive.tct import ChannelPlan, q_notprior
from dpframe.noise import SeededRandomSource

INTRO = np.array([100, 100, 99, 99] + [98] * 15 + [54, 53, 53, 52, 50] + list(range(49, 0, -1)), dtype=np.int64)


def dgauss_tail(sigma2: F, t: int) -> float:
    """P[Z > t] for the discrete Gaussian, by direct summation of the pmf."""
    s2 = float(sigma2)
    span = int(40 * math.sqrt(s2)) + 40
    xs = np.arange(-span, span + 1)
    w = np.exp(-(xs.astype(float) ** 2) / (2 * s2))
    return float(w[xs > t].sum() / w.sum())


def softmax(u, scale):
    z = np.asarray(u, dtype=float) * scale
    z = np.exp(z - z.max())
    return z / z.sum()


def classic_rho(eps: float, delta: float) -> F:
    """The paper's (ε, δ) → ρ: the largest ρ with ρ + 2√(ρ ln 1/δ) ≤ ε (F4' inverse), for its oracles."""
    L = math.log(1 / delta)
    return F((math.sqrt(L + eps) - math.sqrt(L)) ** 2 * (1 - 1e-12))


def test_rho_and_calibration_vectors():
    rho = classic_rho(1, 1 / 4586)
    assert abs(float(rho) - 0.02802) < 5e-5                     # digest §4.6 accounting vector (paper's conversion)
    # the engine calibrates with the optimal conversion: more ρ for the same (ε, δ), still within it
    optimal = zcdp_rho(F(1), F(1, 4586))
    assert float(optimal) == pytest.approx(0.0456, abs=1e-4) and zcdp_epsilon(optimal, F(1, 4586)) <= 1
    plan = cal.stable_plan_zcdp(rho, F(1, 4586), F(1))
    assert abs(float(1 / plan.em_scale) - 5.97) < 0.01 and abs(math.sqrt(plan.ptr_scale) - 5.97) < 0.01
    assert plan.shift == 25                                    # ⌈5.97·√(2 ln 4586)⌉ = ⌈24.5⌉
    used = plan.em_epsilon ** 2 / 8 + F(1) / (2 * plan.ptr_scale)
    assert used <= rho and float(used) > float(rho) * (1 - 1e-9)   # exactly the share, never more


def test_intro_example_exact_and_sampled():
    """P(return exactly the top-19 at ε = 1) = softmax(gaps/5.97)[19] × P(PTR passes at q = 44)."""
    rho = classic_rho(1, 1 / 4586)                               # the digest's numbers use the paper's conversion
    plan = cal.stable_plan_zcdp(rho, F(1, 4586), F(1))
    gaps = INTRO[:-1] - INTRO[1:]
    p_k = softmax(gaps, float(plan.em_scale))
    p_pass = dgauss_tail(plan.ptr_scale, int(plan.threshold()) - 44)
    exact = p_k[18] * p_pass
    # digest: 0.948 and 0.947 from 4000 simulated runs (binomial s.d. ≈ 0.0035)
    assert abs(p_k[18] - 0.948) < 0.007 and abs(exact - 0.947) < 0.007
    rng, n, hits = SeededRandomSource(11), 1500, 0
    for _ in range(n):
        k, chosen = select.stable_topk(INTRO, plan, rng, k_max=INTRO.size - 1)
        hits += chosen is not None and sorted(chosen.tolist()) == list(range(19))
    assert stats.binomtest(hits, n, exact).pvalue > 1e-3


def test_large_gap_distribution_matches_softmax():
    hs = np.array([9, 7, 7, 3, 2, 0], dtype=np.int64)
    eps, g = F(1), F(1)
    rng = SeededRandomSource(5)
    draws = [select.large_gap(hs, 5, eps, g, rng) for _ in range(4000)]
    observed = np.bincount(draws, minlength=6)[1:]
    expected = softmax(hs[:-1] - hs[1:], float(eps / (2 * g))) * len(draws)
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # regularized: r(j) = -λ|j - k|, λ = 1/2
    draws = [select.large_gap(hs, 5, eps, g, rng, k_target=2, lam=F(1, 2)) for _ in range(4000)]
    u = (hs[:-1] - hs[1:]) - 0.5 * np.abs(np.arange(1, 6) - 2)
    assert stats.chisquare(np.bincount(draws, minlength=6)[1:], softmax(u, 0.5) * 4000).pvalue > 1e-3


@pytest.mark.parametrize("q", [0, 1, 20, 26, 40])
def test_ptr_gaussian_pass_probability(q):
    plan = cal.stable_plan_zcdp(F(1, 20), F(1, 10**4), F(1))
    exact = dgauss_tail(plan.ptr_scale, int(plan.threshold()) - max(1, q))
    rng = SeededRandomSource(q)
    passes = sum(select.ptr_pass(q, plan, rng) for _ in range(3000))
    assert stats.binomtest(passes, 3000, exact).pvalue > 1e-3
    if q <= 1:
        assert exact <= 1e-4                                     # Pr[pass | q ≤ g] ≤ δ_t (exact pmf)


@pytest.mark.parametrize("g", [F(1), F(2), F(7)])
def test_ptr_failure_bound_exact(g):
    for plan in (cal.stable_plan_zcdp(F(1, 50), F(1, 10**9), g, "gaussian"),
                 cal.stable_plan_zcdp(F(1, 50), F(1, 10**9), g, "laplace"),
                 cal.stable_plan_pure_parts(F(1, 3), F(1, 10**9), g)):
        if plan.ptr == "gaussian":
            tail = dgauss_tail(plan.ptr_scale, plan.shift)
        else:
            from dpframe.noise import discrete_laplace_tail
            tail = discrete_laplace_tail(plan.ptr_scale, plan.shift + 1)
        assert tail <= 1e-9


def _neighbours(h, votes, kind):
    if kind == "add":
        return h + votes
    return h - votes  # removal of a unit whose votes are included in h


def test_gap_sensitivity_brute_force():
    """m = 5, every 0/1 vote vector: gaps move by ≤ 1 (add/remove), ≤ 2 (substitution); q_k ≥ 2 ⇒ stable."""
    rng = np.random.default_rng(0)
    vectors = np.array(list(itertools.product([0, 1], repeat=5)))
    worst = {"add_remove": 0, "substitute": 0}
    stable_violations, q1_changes = 0, 0
    for _ in range(150):
        h = rng.integers(1, 6, size=5)
        hs = np.sort(h)[::-1]
        gaps = hs[:-1] - hs[1:]
        for v in vectors:
            for h2 in (h + v, h - v):
                if (h2 < 0).any():
                    continue
                s2 = np.sort(h2)[::-1]
                worst["add_remove"] = max(worst["add_remove"], int(np.abs((s2[:-1] - s2[1:]) - gaps).max()))
                for k in range(1, 5):
                    same = set(np.argsort(-h, kind="stable")[:k]) == set(np.argsort(-h2, kind="stable")[:k])
                    stable_violations += gaps[k - 1] >= 2 and not same
                    q1_changes += gaps[k - 1] == 1 and not same
            for w in vectors:
                h3 = h - v + w
                if (h3 < 0).any():
                    continue
                s3 = np.sort(h3)[::-1]
                worst["substitute"] = max(worst["substitute"], int(np.abs((s3[:-1] - s3[1:]) - gaps).max()))
    assert worst == {"add_remove": int(gap_sensitivity(F(1), True)),
                     "substitute": int(gap_sensitivity(F(1), True, substitution=True))} == {"add_remove": 1,
                                                                                           "substitute": 2}
    assert stable_violations == 0 and q1_changes > 0            # q = 1 is not enough, q ≥ 2 is


def test_signed_contributions_double_the_gap_sensitivity():
    h = np.array([5, 3, 3])
    worst = 0
    for v in itertools.product([-1, 0, 1], repeat=3):
        s = np.sort(h + np.array(v))[::-1]
        worst = max(worst, int(np.abs((s[:-1] - s[1:]) - np.array([2, 0])).max()))
    assert worst == gap_sensitivity(F(1), monotone=False) == 2


def test_peeling_distribution_matches_sequential_softmax():
    scores = np.array([4, 3, 1, 0], dtype=np.int64)
    scale = F(1, 2)
    rng = SeededRandomSource(9)
    draws = [tuple(select.peeling(scores, np.arange(4), 2, scale, rng).tolist()) for _ in range(4000)]
    pairs = list(itertools.permutations(range(4), 2))
    w = np.exp(0.5 * scores)
    exact = np.array([w[a] / w.sum() * w[b] / (w.sum() - w[a]) for a, b in pairs])
    observed = np.array([draws.count(p) for p in pairs])
    assert stats.chisquare(observed, exact * len(draws)).pvalue > 1e-3


def test_limited_domain_matches_one_shot_gumbel_reference():
    """LD sampled by peeling with a ⊥ item equals the one-shot Gumbel version (float reference, test only)."""
    scores = np.array([30, 29, 20, 3, 1], dtype=np.int64)
    eps, k, k_bar, log_term = F(1, 2), 2, 3, math.log(3) + math.log(1e3)
    rng = SeededRandomSource(2)
    ours = [tuple(select.limited_domain(scores, np.arange(5), k, k_bar, eps, F(1), log_term, rng).tolist())
            for _ in range(3000)]
    bottom = 3 + 1 + math.ceil(log_term / 0.5)
    ref_rng = np.random.default_rng(1)
    ref = []
    for _ in range(3000):
        noisy = np.array([30, 29, 20, bottom], dtype=float) + ref_rng.gumbel(scale=2.0, size=4)
        out = []
        for i in np.argsort(-noisy):
            if i == 3 or len(out) == k:
                break
            out.append(int(i))
        ref.append(tuple(out))
    cats = sorted(set(ours) | set(ref))
    table = np.array([[ours.count(c) for c in cats], [ref.count(c) for c in cats]]) + 1
    assert stats.chi2_contingency(table).pvalue > 1e-3


@pytest.mark.parametrize(("k", "expected", "digest"), [(1, 4.3808, 4.80), (10, 7.9801, 9.636), (100, 22.5658, 25.334)])
def test_tct_cost_oracle_o7(k, expected, digest):
    """k hits of 2ε_c = 0.2-DP calls: the channel reservation (optimal composition; the digest's O7 values use
    advanced composition). ``tct_plan`` finds the channel with the same test at ε = the budget
    (``cal.tct_channel``): 0.1 fits a budget just above the reservation, not one just below it."""
    eps = ChannelPlan.optimise(0.2, q_notprior(0.2), k, 1e-6).epsilon
    assert abs(eps - expected) / expected < 1e-4 and expected < digest
    assert cal.tct_channel("approx", k, 0.1, eps * (1 + 1e-6), 1e-6) is not None
    assert cal.tct_channel("approx", k, 0.1, eps * (1 - 1e-6), 1e-6) is None


def test_em_step_costs_hand_checked():
    assert cal.em_step_epsilon("pure", F(1), F(0), 4, "br") == F(1, 4)
    assert abs(float(cal.em_step_epsilon("zcdp", F(1, 2), F(0), 4, "br")) - 1.0) < 1e-12      # √(8·½/4)
    assert abs(float(cal.em_step_epsilon("zcdp", F(1, 2), F(0), 4, "dp")) - 0.5) < 1e-12      # √(2·½/4)
    assert abs(float(classic_rho(0.15, 1e-6)) - 3.857e-4 * 1.05) < 0.3e-4                    # digest §4.3
    rho = float(zcdp_rho(F(15, 100), F(1, 10**6)))                 # the optimal conversion: 6.88e-4
    assert rho == pytest.approx(6.884e-4, rel=1e-3)
    assert float(cal.em_step_epsilon("approx", F(15, 100), F(1, 10**6), 10, "br")) == pytest.approx(
        math.sqrt(8 * rho / 10), rel=1e-9)


def test_pate_accounting_vectors():
    teacher = MultiLabelPATE(gumbel_scale=50, sigma=60, delta_t=1e-9, privacy_unit="teacher")
    assert teacher.query_rho() == F(1, 5000) + F(1, 7200)               # 0.04²/8 + 1/(2·60²)
    assert teacher.cost(600).delta == F(6, 10**7)
    record = MultiLabelPATE(gumbel_scale=50, sigma=60, delta_t=1e-9)    # the default: g = 2
    assert record.query_rho() == F(8, 10**4) + F(4, 7200)               # 0.08²/8 + 4/(2·60²)
    # digest §4.4 with ρ + 2√(ρ ln 1/δ') at δ' = 4e-7: 3.665 (teacher) and 7.736 (record) ...
    for pate, classic in ((teacher, 3.665), (record, 7.736)):
        rho, log_inv = float(pate.cost(600).rho), math.log(1 / 4e-7)
        assert abs(rho + 2 * math.sqrt(rho * log_inv) - classic) < 1e-3
    # ... and the optimal (CKS20) conversion that epsilon() uses: 3.278 and 7.124
    assert abs(teacher.epsilon(600, 1e-6) - 3.278) < 1e-3 and abs(record.epsilon(600, 1e-6) - 7.124) < 1e-3
    assert teacher.plan().shift == math.ceil(60 * math.sqrt(2 * math.log(1e9)))   # 386.3 → 387
    assert (teacher.plan().threshold(), record.plan().threshold()) == (388, 389)   # g + shift
