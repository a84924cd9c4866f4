"""Reorder-Slice-Compute: the lemmas behind the (2w·ε₀, δ̂) charge, checked exactly (docs/learning.md, RSC proof).

The charge of :func:`dpframe_learning.slicing.rsc_cost` rests on two facts (Cohen, Lyu, Nelson, Sarlós &
Stemmer 2022, Lemmas 2.4 and 2.7; digest ``003`` §3.4–3.5):

* the synchronisation map R^b (b = 0: the element is absent, b = 1: present) turns one padding draw
  G ~ Geom(1 − e^{−ε}) into a pair (q̂, sync bit) whose laws under b = 0 and b = 1 are within e^{±ε}, and
  the sync bit is 1 with probability ≥ p = 1/(1 + e^ε) under both;
* so the data holder is called more than w times with probability ≤ (1 − p)^w ≤ δ̂, and w is the smallest
  such count.

The first test computes both laws exactly on a grid of ε (the paper states the lemma for ε < 1 with the
constant 1/6, which is *not* a lower bound for ε > ln 6: there P[sync | b = 1] = e^{−ε}; dpframe may plan
any ε₀ and uses p = 1/(1 + e^ε)). The slow test checks that the rectangle learner
samples the law the analysis is about (one-sided padding, slices cut in the record order, the EM on each
slice) on a pair of neighbours, and that the exact privacy loss of that law is within the charge.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import product

import numpy as np
import pytest
from dpframe_learning.learners import learn_rectangle_codes
from dpframe_learning.slicing import SlicePlan, rsc_calls, rsc_cost
from scipy import stats

from dpframe.budgets import ApproxDP
from dpframe.noise import SeededRandomSource


def synchronisation_laws(eps: float) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    """The exact laws of R⁰(G) and R¹(G) over (q̂, sync bit), G ~ Geom(1 − e^{−ε}) (Lemma 2.4).

    t_i = max{0, e^{−iε} + e^{−(i+1)ε} − 1}; R⁰(0) = (0, 0) w.p. e^{−ε}, else (0, 1); R¹(0) = (0, 0);
    for i ≥ 1, R⁰(i) = (i, 0) w.p. t_i·e^{iε}, else (i, 1); R¹(i) = (i, 0) w.p. t_i·e^{(i+1)ε}, else (i − 1, 1).
    G is summed up to a tail below 1e-40 (its mass is dropped from both laws alike).
    """
    q = math.exp(-eps)
    top = math.ceil(95 / eps) + 2
    laws: tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]] = ({}, {})
    for i in range(top):
        g = (1 - q) * q**i
        t = max(0.0, q**i + q ** (i + 1) - 1)
        stay0 = q if i == 0 else t * math.exp(i * eps)
        stay1 = 1.0 if i == 0 else t * math.exp((i + 1) * eps)
        assert -1e-12 <= stay0 <= 1 + 1e-12 and -1e-12 <= stay1 <= 1 + 1e-12      # both maps are kernels
        for law, key, mass in ((laws[0], (i, 0), g * stay0), (laws[0], (i, 1), g * (1 - stay0)),
                               (laws[1], (i, 0), g * stay1), (laws[1], (i - 1, 1), g * (1 - stay1))):
            if mass > 0:
                law[key] = law.get(key, 0.0) + mass
    return laws


@pytest.mark.parametrize("eps", [0.001, 0.01, 0.05, 0.1, 0.25, 0.48, 0.5, 1.0, 1.79, 2.0, 4.0])
def test_synchronisation_map_is_eps_close_and_syncs_with_probability_p(eps: float) -> None:
    p0, p1 = synchronisation_laws(eps)
    q = math.exp(-eps)
    cut = math.ceil(90 / eps)           # compare away from the truncation (the last G's (i − 1, 1) has no partner)
    keys = [k for k in set(p0) | set(p1) if k[0] < cut]
    assert all(k in p0 and k in p1 for k in keys)                  # the same support
    loss = max(abs(math.log(p0[k] / p1[k])) for k in keys)
    assert loss <= eps * (1 + 1e-9)
    assert loss >= eps * (1 - 1e-9)                                # and ε is attained: the map is tight
    sync = [sum(v for k, v in law.items() if k[1] == 1) for law in (p0, p1)]
    p = 1 / (1 + math.exp(eps))
    assert min(sync) >= p * (1 - 1e-9)                             # the p that rsc_calls uses
    if q + q * q <= 1:                                             # ε ≥ ln φ: every t_i (i ≥ 1) is 0
        assert sync[1] == pytest.approx(q, rel=1e-9)               # e^{−ε}: below the paper's 1/6 when ε > ln 6


@pytest.mark.parametrize(("eps0", "delta_hat"), [("0.001", 1e-6), ("0.1", 1e-6), ("0.1", 1e-9), ("1", 1e-6),
                                                 ("3", 1e-3), ("0.37", 1e-12)])
def test_holder_call_bound_is_the_smallest_w_with_tail_below_delta_hat(eps0: str, delta_hat: float) -> None:
    w = rsc_calls(Fraction(eps0), delta_hat)
    p = 1 / (1 + math.exp(float(eps0)))
    assert w * math.log1p(-p) <= math.log(delta_hat)              # (1 − p)^w ≤ δ̂: more than w calls is rarer
    assert (w - 1) * math.log1p(-p) > math.log(delta_hat)         # and w − 1 would not do


def test_rsc_cost_by_hand() -> None:
    # ε₀ = 0.1, δ̂ = 1e-6: p = 1/(1 + e^0.1) = 0.47502, ln(1/(1 − p)) = 0.64439, w = ⌈13.8155/0.64439⌉ = ⌈21.44⌉ = 22
    assert rsc_calls(Fraction(1, 10), 1e-6) == 22
    # a holder call: ε₀ for (q̂, sync bit) + ε₀ for the swap-stable interior point on slices one swap or one
    # addition apart (Lemma 2.6's two cases; the paper's generic 2ε₀ there is group privacy over a swap)
    assert rsc_cost(Fraction(1, 10), 23, Fraction(1, 10**6)) == ApproxDP(Fraction(44, 10), Fraction(1, 10**6))
    assert rsc_cost(Fraction(1, 10), 22, Fraction(1, 10**6)) == ApproxDP(Fraction(44, 10), 0)   # w ≥ τ: 2τε₀, pure


# ------------------------------------------------------------------------------- the sampled law, on neighbours

SIZE, TARGET, EPS0 = 6, 2, Fraction(1, 2)
BEFORE = np.array([0, 1, 1, 2, 3, 4, 5, 5], dtype=np.int64)
AFTER = np.sort(np.append(BEFORE, 0))           # one point added at the very front: every slice shifts (Example 1.5)


def _em_pmf(codes: np.ndarray) -> np.ndarray:
    """The exponential interior point's law at scale ε₀/2 (swap-stable, one row per unit), brute force."""
    z = np.arange(SIZE)
    f = np.minimum((codes[None, :] <= z[:, None]).sum(1), (codes[None, :] >= z[:, None]).sum(1))
    w = np.exp(float(EPS0) / 2 * (f - f.max()))
    return w / w.sum()


def _exact_law(points: np.ndarray) -> np.ndarray:
    """P[(a, b)] of a one-feature rectangle with Geom-padded slices: a from the TARGET + G smallest points,
    b from the TARGET + G' largest of the rest (all of it when it is shorter)."""
    q = math.exp(-float(EPS0))
    geom = (1 - q) * q ** np.arange(200)        # P[G ≥ 200] = e^{−100}: negligible
    law = np.zeros((SIZE, SIZE))
    for g, pg in enumerate(geom):
        first, rest = points[:TARGET + g], points[TARGET + g:]
        inner = np.zeros(SIZE)
        for h, ph in enumerate(geom):
            inner += ph * _em_pmf(rest[max(0, rest.size - TARGET - h):])
            if TARGET + h >= rest.size:          # every larger G' takes all of the rest too
                inner += geom[h + 1:].sum() * _em_pmf(rest)
                break
        law += pg * np.outer(_em_pmf(first), inner)
    return law / law.sum()


@pytest.mark.slow
def test_rsc_rectangle_samples_the_analysed_law_and_its_loss_is_within_the_charge() -> None:
    plan = SlicePlan("rsc", EPS0, 2, rsc_cost(EPS0, 2, Fraction(1, 10**6)), "")
    runs = 12_000
    for seed, points in ((1, BEFORE), (2, AFTER)):
        rng = SeededRandomSource(seed)
        counts = np.zeros((SIZE, SIZE))
        for _ in range(runs):
            ((a, b),) = learn_rectangle_codes(points[:, None], [SIZE], plan, [TARGET], 1, rng)
            counts[a, b] += 1
        expected = _exact_law(points) * runs
        assert expected.min() > 5                                    # every cell is well populated
        assert stats.chisquare(counts.ravel(), expected.ravel()).pvalue > 1e-4
    before, after = _exact_law(BEFORE), _exact_law(AFTER)
    loss = float(np.abs(np.log(before / after)).max())
    assert 0 < loss <= float(plan.cost.epsilon)                     # 2·2·ε₀ = 2 (w ≥ τ: pure)
    assert all(before[a, b] > 0 for a, b in product(range(SIZE), repeat=2))
