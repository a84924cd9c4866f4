"""TreeLog (experimental): brute-force checks of the two lemmas proven in docs/learning.md, on the
implementation's own heavy path and labels, the exact (ε₀, δ₀) of the stability histogram on S_d, and the
experimental label (never chosen by method='auto')."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_learning.interior_point import TreeLog, TreeLogParameters, _heavy_path, _labels, _TreeLogRun
from scipy import stats

import dpframe as dp
from dpframe.noise import SeededRandomSource

BITS = 4           # a 16-leaf tree


def _slices(codes: list[int], t: int) -> tuple[Counter, Counter]:
    """(S_d codes, remaining labels) of one TreeLog level on the sorted multiset ``codes`` (as in solve())."""
    x = np.sort(np.asarray(codes, dtype=np.int64))
    _, leaf = _heavy_path(x, BITS)
    labels = _labels(x, leaf, BITS)
    order = np.lexsort((-x, -labels))                  # deepest labels first, then codes descending
    return Counter(x[order[:2 * t]].tolist()), Counter(labels[order[2 * t:]].tolist())


def _multisets(size: int) -> list[list[int]]:
    return [list(c) for c in itertools.combinations_with_replacement(range(2**BITS), size)]


def test_lemma_1_gamma_is_monotone_with_sensitivity_one() -> None:
    for size in range(5):
        for a in _multisets(size):
            gamma = _heavy_path(np.asarray(sorted(a), dtype=np.int64), BITS)[0]
            for x in range(2**BITS):
                after = _heavy_path(np.asarray(sorted([*a, x]), dtype=np.int64), BITS)[0]
                assert gamma <= after <= gamma + 1, (a, x)


@pytest.mark.parametrize(("t", "largest", "random"), [
    (1, 3, 300), (2, 3, 300),
    pytest.param(1, 4, 1500, marks=pytest.mark.slow), pytest.param(2, 4, 1500, marks=pytest.mark.slow)])
def test_lemma_2_relabelled_rest_stays_neighbouring_when_gamma_is_below_t(t: int, largest: int, random: int) -> None:
    """Every multiset of ≤ ``largest`` codes and ``random`` random ones of 5–14 codes, each with every added code x.

    The default run checks every multiset of ≤ 3 codes (about 1,000) and 300 random ones; ``-m slow`` every
    multiset of ≤ 4 codes (about 4,800) and 1,500 random ones (about 25 s each on 2 cores).
    """
    gen = np.random.default_rng(t)
    cases = [a for size in range(largest + 1) for a in _multisets(size)]
    cases += [gen.integers(0, 2**BITS, int(gen.integers(5, 15))).tolist() for _ in range(random)]
    broken = 0
    for a in cases:
        gamma = _heavy_path(np.asarray(sorted(a), dtype=np.int64), BITS)[0]
        sd_a, rest_a = _slices(a, t)
        for x in range(2**BITS):
            sd_b, rest_b = _slices([*a, x], t)
            neighbours = not (rest_a - rest_b) and (rest_b - rest_a).total() <= 1
            one_swap = (sd_b - sd_a).total() <= 1 and (sd_a - sd_b).total() <= 1
            if gamma < t:
                assert neighbours and one_swap, (a, x)
            broken += not neighbours
    assert broken > 0          # the premise matters: with Γ ≥ t the relabelled rests can differ by more


class _Cheap:
    """A plugin-style method that claims to need 1 row, marked experimental: 'auto' must not pick it."""

    name = "cheap_experimental"
    approximate = False
    experimental = True

    def min_rows(self, epsilon: Fraction, delta: Fraction, beta: float, size: int, stability: object) -> int:
        return 1

    def cost(self, epsilon: Fraction, delta: Fraction) -> dp.Budget:
        return dp.PureDP(epsilon)

    def run(self, codes: np.ndarray, size: int, epsilon: Fraction, delta: Fraction, beta: float,
            stability: object, rng: object) -> int:
        return int(codes[0])


def test_experimental_methods_are_never_picked_by_auto() -> None:
    from dpframe.plugin import PluginHost

    host = PluginHost()

    class Methods:
        @dp.hookimpl
        def dpframe_methods(self, register) -> None:  # noqa: ANN001
            register(_Cheap(), family="interior_point")

    host.pm.register(Methods(), name="third-party")
    sess = dp.Session({"t": pl.DataFrame({"x": list(range(500))})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(10, 1e-5))
    sess._plugins = host
    auto = sess.table("t").interior_point("x", bounds=(0, 1000))
    assert auto.plan(dp.ApproxDP(1, 1e-6)).mechanisms == "noisy count + exponential"
    assert "1 rows (experimental: never chosen by method='auto')" in auto.explain(dp.ApproxDP(1, 1e-6))
    named = sess.table("t").interior_point("x", bounds=(0, 1000), method="treelog")
    assert named.plan(dp.ApproxDP(1, 1e-6)).mechanisms == "noisy count + treelog (experimental)"
    assert "EXPERIMENTAL" in named.explain(dp.ApproxDP(1, 1e-6))
    assert TreeLog.experimental


# ------------------------------------------------------------------------- the stability histogram on S_d

CHOOSE = TreeLogParameters(1, Fraction(1), math.log(1000), 10)   # ε₀ = 1, δ₀ = 1e-3: threshold 1 + ⌈ln 1000⌉ = 8


def _choose_law(counts: dict[int, int]) -> dict[int, float]:
    """Exact law of ``_TreeLogRun._choose``'s vertex (0: the root, a failed run) for bins {vertex: count}.

    noisy_v = count_v + Z_v, Z_v discrete Laplace of scale 1/ε₀; the argmax (ties: the smaller vertex) is
    released iff it reaches the threshold.
    """
    eps, thr = float(CHOOSE.epsilon0), CHOOSE.threshold
    z = np.arange(-80, 81)
    pmf = np.exp(-eps * np.abs(z))
    pmf /= pmf.sum()
    verts = sorted(counts)
    law = {v: 0.0 for v in verts}
    for i, v in enumerate(verts):
        for zi, pi in zip(z, pmf, strict=True):
            top = counts[v] + zi
            if top < thr:
                continue
            p = pi
            for j, u in enumerate(verts):
                if u != v:          # earlier vertices must be strictly below, later ones at most equal
                    p *= pmf[counts[u] + z < top].sum() if j < i else pmf[counts[u] + z <= top].sum()
            law[v] += p
    law[0] = 1 - sum(law.values())
    return law


def _hockey(p: dict[int, float], q: dict[int, float], eps: float) -> float:
    return sum(max(0.0, p.get(o, 0.0) - np.exp(eps) * q.get(o, 0.0)) for o in set(p) | set(q))


@pytest.mark.parametrize(("before", "after"), [({1: 8, 2: 6}, {1: 8, 2: 7}),          # one count grows
                                               ({1: 8, 2: 6}, {1: 8, 2: 6, 3: 1}),    # a new vertex appears
                                               ({2: 7, 3: 7}, {1: 1, 2: 7, 3: 7}),    # ... below the others
                                               ({1: 9}, {1: 9, 2: 1})])
def test_stability_histogram_is_eps0_delta0_per_added_point(before: dict[int, int], after: dict[int, int]) -> None:
    # the per-add/remove (ε₀, δ₀) that TreeLog's tally doubles for S_d's one swap, exactly
    a, b = _choose_law(before), _choose_law(after)
    eps, delta0 = float(CHOOSE.epsilon0), CHOOSE.delta0
    assert max(_hockey(a, b, eps), _hockey(b, a, eps)) <= delta0
    if len(after) > len(before):      # the new vertex is released only if its count 1 + noise passes: ≤ δ₀
        (new,) = set(after) - set(before)
        assert 0 < b[new] <= delta0


@pytest.mark.slow
def test_choose_samples_its_exact_law() -> None:
    run = _TreeLogRun(CHOOSE, SeededRandomSource(3))
    deep = np.array([0b0100] * 8 + [0b1000] * 7 + [0b1100] * 2, dtype=np.int64)   # vertices 1, 2, 3 at q = 3
    law = _choose_law({1: 8, 2: 7, 3: 2})
    draws = Counter(run._choose(deep, 4, 3)[0] for _ in range(20_000))
    observed = np.array([draws.get(o, 0) for o in sorted(law)], dtype=float)
    expected = np.array([law[o] for o in sorted(law)]) * 20_000
    assert stats.chisquare(observed, expected).pvalue > 1e-4
