"""Interior-point algorithms, slice accounting and learners on integer codes: oracles from the digest §10."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from dpframe_learning.interior_point import (
    BinarySearch,
    Exponential,
    Stability,
    TreeLog,
    TreeLogParameters,
    _heavy_path,
    _labels,
    exponential_interior_point,
    levels,
    score_blocks,
)
from dpframe_learning.learners import Labelled, best_errors, learn_rectangle_codes, learn_threshold_codes
from dpframe_learning.slicing import SlicePlan, geometric, rsc_calls, rsc_cost, sequential_cost, slice_plan
from scipy import stats

from dpframe.noise import SeededRandomSource
from dpframe.testing.audit import audit_sampler
from dpframe.testing.stats import clopper_pearson

EM, BS, TL = Exponential(), BinarySearch(), TreeLog()


def exact_pmf(codes: np.ndarray, size: int, scale: float) -> np.ndarray:
    """P[z] ∝ exp(scale·f(z)) over the whole (small) domain, by brute force on the definition of f."""
    z = np.arange(size)
    f = np.minimum((codes[None, :] <= z[:, None]).sum(1), (codes[None, :] >= z[:, None]).sum(1))
    w = np.exp(scale * (f - f.max()))
    return w / w.sum()


def two_point_failure(size: int, n: int, epsilon: float, rows: int = 1) -> float:
    """Exact failure probability of the exponential interior point on {v × n/2, (v+1) × n/2}.

    f = n/2 on v and v + 1, 0 on the other size − 2 codes; scale ε/(2·rows).
    """
    return (size - 2) / ((size - 2) + 2 * math.exp(epsilon * n / (4 * rows)))


# ------------------------------------------------------------------------------- exponential interior point

def test_score_blocks_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        size = int(rng.integers(2, 40))
        codes = np.sort(rng.integers(0, size, int(rng.integers(0, 12))))
        starts, lengths, scores = score_blocks(codes, size)
        assert lengths.sum() == size and np.all(np.diff(starts) == lengths[:-1])
        f = np.repeat(scores, lengths)
        z = np.arange(size)
        brute = np.minimum((codes[None, :] <= z[:, None]).sum(1), (codes[None, :] >= z[:, None]).sum(1))
        assert np.array_equal(f, brute)


def test_two_point_failure_formula_is_the_exact_pmf() -> None:
    for size, n, eps in [(16, 6, 1.0), (64, 10, 0.5), (1000, 20, 0.3)]:
        v = size // 3
        codes = np.array([v] * (n // 2) + [v + 1] * (n // 2))
        pmf = exact_pmf(codes, size, eps / 2)
        assert pmf[[v, v + 1]].sum() == pytest.approx(1 - two_point_failure(size, n, eps), rel=1e-12)


def test_min_rows_meets_beta_on_two_point_data_and_is_tight() -> None:
    # digest §10 T4, for our largest encoding (2^62 codes) and a 2^64-like one
    for size, eps in [(2**62, 1.0), (2**62, 0.1), (2**20, 1.0)]:
        n = EM.min_rows(Fraction(eps), Fraction(0), 1e-6, size, Stability(1))
        assert two_point_failure(size, n, eps) <= 1e-6
        assert two_point_failure(size, int(n * 0.9), eps) > 1e-6
    assert EM.min_rows(Fraction(1), Fraction(0), 1e-6, 2**64, Stability(1)) == 233    # the digest's 233
    assert EM.min_rows(Fraction(1), Fraction(0), 1e-6, 2**20, Stability(3)) == math.ceil(12 * math.log(2**20 / 1e-6))


def test_two_point_failure_rate_matches_exact_probability() -> None:
    size, eps, n = 2**20, 1.0, 56
    p = two_point_failure(size, n, eps)
    assert 0.15 < p < 0.5
    rng = SeededRandomSource(11)
    codes = np.array([777] * (n // 2) + [778] * (n // 2), dtype=np.int64)
    runs = 3000
    fails = sum(not 777 <= EM.run(codes, size, Fraction(eps), Fraction(0), 1e-6, Stability(1), rng) <= 778
                for _ in range(runs))
    lo, hi = clopper_pearson(np.array([fails]), runs, 1e-6)
    assert lo[0] <= p <= hi[0]


@pytest.mark.parametrize("neighbour", [[], [3], pytest.param([0], marks=pytest.mark.slow),
                                       pytest.param([7], marks=pytest.mark.slow)])
def test_em_distribution_matches_exact_pmf_on_neighbours(neighbour: list[int]) -> None:
    """The exact pmfs of D and D + one row satisfy the DP inequality; draws on D + row follow its pmf (``[]``: D).

    The rows added at the domain's ends (0, 7) under ``-m slow`` (6,000 draws each).
    """
    size, eps = 8, Fraction(1)
    d = np.array([1, 2, 2, 5], dtype=np.int64)
    d2 = np.sort(np.concatenate([d, np.array(neighbour, dtype=np.int64)]))
    p, p2 = exact_pmf(d, size, 0.5), exact_pmf(d2, size, 0.5)
    assert np.max(np.abs(np.log(p / p2))) <= float(eps) + 1e-12          # the DP inequality, exactly
    rng = SeededRandomSource(5 + len(neighbour) + sum(neighbour))
    draws = [EM.run(d2, size, eps, Fraction(0), 1e-6, Stability(1), rng) for _ in range(6000)]
    assert stats.chisquare(np.bincount(draws, minlength=size), p2 * len(draws)).pvalue > 1e-4


@pytest.mark.parametrize(("ranks", "n"), [(0, 1500), pytest.param(3, 1500, marks=pytest.mark.slow),
                                         pytest.param(0, 8000, marks=pytest.mark.slow),
                                         pytest.param(3, 8000, marks=pytest.mark.slow)])
def test_listed_em_with_envelopes_matches_exact_pmf(ranks: int, n: int) -> None:
    """Few listed ranks: most of the mass lies in the envelopes, drawn by rejection; still the exact pmf.

    ``n`` draws: 1,500 by default (a rejection draw is slow: about 4 ms), 8,000 with ``-m slow``.
    """
    size, scale = 32, Fraction(1, 6)
    codes = np.sort(np.random.default_rng(3).integers(4, 28, 40)).astype(np.int64)
    rng = SeededRandomSource(9)
    draws = [exponential_interior_point(codes, size, scale, rng, ranks=ranks) for _ in range(n)]
    pmf = exact_pmf(codes, size, float(scale))
    assert stats.chisquare(np.bincount(draws, minlength=size), pmf * len(draws)).pvalue > 1e-4


def test_em_success_at_min_rows_on_adversarial_data() -> None:
    rng, size = SeededRandomSource(2), 2**40
    n = EM.min_rows(Fraction(1), Fraction(0), 1e-3, size, Stability(1))
    for data in (np.full(n, 5), np.repeat([9, 10], [n // 2, n - n // 2]), np.sort(np.arange(n) * 7919)):
        codes = data.astype(np.int64)
        outs = [EM.run(codes, size, Fraction(1), Fraction(0), 1e-3, Stability(1), rng) for _ in range(50)]
        assert all(codes[0] <= z <= codes[-1] for z in outs)


# ------------------------------------------------------------------------------- binary search

def test_binary_search_min_rows_formula() -> None:
    # b = 20 rounds, Δ' = 1: ⌈20/ε·ln(20/β)⌉
    assert BS.min_rows(Fraction(1), Fraction(0), 1e-6, 2**20, Stability(1)) == math.ceil(20 * math.log(20e6))
    assert BS.min_rows(Fraction(1), Fraction(0), 1e-6, 2**20, Stability(1, swap=True)) == \
        math.ceil(40 * math.log(20e6))


def test_binary_search_succeeds_at_min_rows() -> None:
    rng, size = SeededRandomSource(3), 2**16
    n = BS.min_rows(Fraction(1), Fraction(0), 1e-3, size, Stability(1))
    for data in (np.full(n, 40000), np.repeat([100, 101], [n // 2, n - n // 2])):
        codes = data.astype(np.int64)
        outs = [BS.run(codes, size, Fraction(1), Fraction(0), 1e-3, Stability(1), rng) for _ in range(30)]
        assert all(codes[0] <= z <= codes[-1] for z in outs)


def test_binary_search_audit_on_neighbours() -> None:
    d = np.array([3, 4, 4, 9], dtype=np.int64)
    d2 = np.sort(np.append(d, 12))

    def sampler(codes: np.ndarray):
        def run(n: int, seed: int) -> dict[str, np.ndarray]:
            rng = SeededRandomSource(seed)
            return {"z": np.array([BS.run(codes, 16, Fraction(1, 2), Fraction(0), 0.1, Stability(1), rng)
                                   for _ in range(n)])}
        return run

    result = audit_sampler(sampler(d), sampler(d2), claimed_epsilon=0.5, samples=4000)
    assert result.passed


# ------------------------------------------------------------------------------- TreeLog

def test_levels_table() -> None:  # digest §10 T12
    assert [levels(2**8), levels(2**9), levels(2**64), levels(2**256), levels(2**256 + 1), levels(8)] == \
        [1, 2, 2, 2, 3, 0]


def test_treelog_parameters_hand_computed() -> None:
    p = TreeLogParameters.of(Fraction(1), Fraction(1, 10**6), 1e-6, 2**40, Stability(1))
    assert (p.levels, p.epsilon0) == (2, Fraction(1, 17))
    delta0 = 1e-6 / (2 * (2 + math.exp(1 / 17)) + 1)
    assert p.delta0 == pytest.approx(delta0, rel=1e-9) and p.delta0 <= delta0
    assert p.t == math.ceil(100 * 17 * math.log(1 / delta0))
    assert TL.min_rows(Fraction(1), Fraction(1, 10**6), 1e-6, 2**40, Stability(1)) == 20 * p.t
    # the accounting closes: (9 + 4L)·ε₀ = ε and (L·(2 + e^ε₀) + 1)·δ₀ ≤ δ
    assert (9 + 4 * p.levels) * p.epsilon0 == 1
    assert (p.levels * (2 + math.exp(1 / 17)) + 1) * p.delta0 <= 1e-6
    assert TL.min_rows(Fraction(1), Fraction(0), 1e-6, 2**40, Stability(1)) is None     # pure DP: impossible
    assert TL.min_rows(Fraction(1), Fraction(1, 10**6), 1e-6, 2**40, Stability(2)) is None


def test_labels_and_heavy_path_match_bitwise_definition() -> None:
    rng = np.random.default_rng(4)
    bits = 62
    x = np.sort(rng.integers(0, 2**bits, 500, dtype=np.int64))
    gamma, leaf = _heavy_path(x, bits)
    labels = _labels(x, leaf, bits)
    for xi, li in zip(x.tolist(), labels.tolist()):
        diff = xi ^ leaf
        assert li == (bits if diff == 0 else bits - diff.bit_length() + 1)
    # near powers of two, where float log2 rounds
    edge = np.array([2**k - 1 for k in range(1, 62)] + [2**k for k in range(1, 62)], dtype=np.int64)
    assert np.array_equal(_labels(edge, 0, bits), np.array([bits - int(v).bit_length() + 1 for v in edge]))


def test_one_heavy_round_returns_the_root_left_right_leaf() -> None:  # digest §10 T6
    size, eps, delta = 2**62, Fraction(17), Fraction(1, 10**6)
    t = TreeLogParameters.of(eps, delta, 1e-6, size, Stability(1)).t
    rng = np.random.default_rng(6)
    x = np.sort(np.concatenate([rng.integers(0, 10, 2 * t), 2**61 + rng.integers(0, 10, 2 * t)])).astype(np.int64)
    src = SeededRandomSource(6)
    assert {TL.run(x, size, eps, delta, 1e-6, Stability(1), src) for _ in range(20)} == {2**61 - 1}


@pytest.mark.parametrize("shape", ["equal", "two_point", "uniform", "nested"])
def test_treelog_succeeds_at_min_rows(shape: str) -> None:
    size, eps, delta = 2**40, Fraction(4), Fraction(1, 10**6)
    n = TL.min_rows(eps, delta, 1e-6, size, Stability(1))
    assert n is not None
    rng = np.random.default_rng(7)
    if shape == "equal":
        x = np.full(n, 123456)
    elif shape == "two_point":
        x = np.repeat([99, 100], [n // 2, n - n // 2])
    elif shape == "uniform":
        x = rng.integers(0, size, n)
    else:  # mass at 0 plus a few points hanging off each level of the heavy path
        x = np.concatenate([np.zeros(n - 40, dtype=np.int64), [2**k for k in range(40)]])
    codes = np.sort(x).astype(np.int64)
    src = SeededRandomSource(8)
    outs = [TL.run(codes, size, eps, delta, 1e-6, Stability(1), src) for _ in range(5)]
    assert all(codes[0] <= z <= codes[-1] for z in outs)


# ------------------------------------------------------------------------------- slicing accountants

def test_rsc_holder_calls_table() -> None:  # digest §3.6 (tight p)
    assert [rsc_calls(Fraction(e), 1e-6) for e in ("0.01", "0.1", "0.5", "1")] == [21, 22, 30, 45]


def test_rsc_cost_formula() -> None:
    assert rsc_cost(Fraction(1, 10), 100, Fraction(1, 10**6)) == \
        type(rsc_cost(Fraction(1, 10), 100, Fraction(1, 10**6)))(Fraction(44, 10), Fraction(1, 10**6))
    few = rsc_cost(Fraction(1, 10), 7, Fraction(1, 10**6))       # w ≥ τ: 2τε₀, no δ̂
    assert (few.epsilon, few.delta) == (Fraction(14, 10), 0)
    assert sequential_cost(Fraction(1, 10), 7).epsilon == Fraction(7, 10)


def test_slice_plan_picks_sequential_for_few_slices() -> None:
    p = slice_plan(Fraction(1), Fraction(1, 10**6), 4)
    assert p.method == "sequential" and p.epsilon0 == Fraction(1, 4) and p.cost.epsilon == 1
    # at that ε₀, RSC would have cost more
    assert rsc_cost(p.epsilon0, 4, Fraction(1, 10**6)).epsilon > p.cost.epsilon


def test_slice_plan_picks_rsc_for_many_slices() -> None:
    eps, delta = Fraction(2), Fraction(1, 10**6)
    p = slice_plan(eps, delta, 400)
    assert p.method == "rsc" and p.cost.epsilon <= eps and p.cost.delta == delta
    assert p.epsilon0 > eps / 400                                  # each slice gets more than sequential gives
    assert sequential_cost(p.epsilon0, 400).epsilon > p.cost.epsilon   # and sequential would cost more
    assert p.cost == rsc_cost(p.epsilon0, 400, delta)


def test_slice_plan_without_delta_is_sequential() -> None:
    assert slice_plan(Fraction(2), Fraction(0), 400).method == "sequential"


def test_geometric_padding_distribution() -> None:  # digest §10 T2
    eps = Fraction(1, 2)
    g = geometric(eps, 40_000, SeededRandomSource(9))
    assert g.min() >= 0
    k = np.arange(0, 12)
    observed = np.bincount(np.minimum(g, 11), minlength=12)
    pmf = (1 - math.exp(-0.5)) * np.exp(-0.5 * k)
    pmf[-1] = math.exp(-0.5 * 11)                                  # tail P[G ≥ 11]
    assert stats.chisquare(observed, pmf * g.size).pvalue > 1e-4


# ------------------------------------------------------------------------------- learners

def test_best_errors() -> None:
    x = np.array([1, 2, 3, 4, 5])
    assert best_errors(Labelled.of(x, np.array([1, 1, 0, 0, 0], dtype=np.int8))) == (0, 2)
    assert best_errors(Labelled.of(x, np.array([0, 0, 1, 1, 1], dtype=np.int8))) == (2, 0)
    assert best_errors(Labelled.of(x, np.array([0, 0, 0, 0, 0], dtype=np.int8))) == (0, 0)
    rng = np.random.default_rng(4)            # against every cut, by brute force (ties included)
    for _ in range(50):
        xs, ys = rng.integers(0, 9, 30), rng.integers(0, 2, 30).astype(np.int8)
        cuts = np.arange(-1, 9)[:, None]
        below = ((xs > cuts) & (ys == 1)).sum(1) + ((xs <= cuts) & (ys == 0)).sum(1)
        above = ((xs <= cuts) & (ys == 1)).sum(1) + ((xs > cuts) & (ys == 0)).sum(1)
        assert best_errors(Labelled.of(xs, ys)) == (int(below.min()), int(above.min()))


@pytest.mark.parametrize("positive", ["below", "above"])
def test_threshold_training_error_at_most_2k_with_ties(positive: str) -> None:
    rng = np.random.default_rng(10)
    size, k = 50, 150
    src = SeededRandomSource(10)
    for _ in range(20):
        u = int(rng.integers(5, 45))
        x = rng.integers(0, size, 1200).astype(np.int64)          # many ties
        y = ((x <= u) if positive == "below" else (x >= u)).astype(np.int8)
        z = learn_threshold_codes(Labelled.of(x, y), size, positive, k=k, epsilon=Fraction(1), rows=1,  # type: ignore[arg-type]
                                  rng=src)
        pred = (x <= z) if positive == "below" else (x >= z)
        assert int((pred != (y == 1)).sum()) <= 2 * k


def test_rectangle_inside_true_box_when_every_call_succeeds() -> None:
    rng = np.random.default_rng(12)
    sizes, lo, hi = [1000, 1000, 1000], [200, 100, 500], [700, 300, 900]
    plan = slice_plan(Fraction(3), Fraction(0), 6)
    targets = [Exponential().min_rows(plan.epsilon0, Fraction(0), 1e-6 / 12, s, Stability(1, swap=True))
               for s in sizes]
    src = SeededRandomSource(12)
    for _ in range(10):
        n = 2 * sum(t for t in targets if t is not None) + 500
        pts = np.column_stack([rng.integers(a, b + 1, n) for a, b in zip(lo, hi)]).astype(np.int64)
        box = learn_rectangle_codes(pts, sizes, plan, targets, 1, src)  # type: ignore[arg-type]
        assert all(a_true <= a <= b <= b_true for (a, b), a_true, b_true in zip(box, lo, hi))


def test_rectangle_with_rsc_padding_stays_inside() -> None:
    rng = np.random.default_rng(13)
    plan = SlicePlan("rsc", Fraction(1, 2), 4, rsc_cost(Fraction(1, 2), 4, Fraction(1, 10**6)), "")
    src = SeededRandomSource(13)
    for _ in range(5):
        pts = np.column_stack([rng.integers(10, 60, 3000), rng.integers(30, 40, 3000)]).astype(np.int64)
        box = learn_rectangle_codes(pts, [100, 100], plan, [300, 300], 1, src)
        assert 10 <= box[0][0] <= box[0][1] <= 59 and 30 <= box[1][0] <= box[1][1] <= 39
