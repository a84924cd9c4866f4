"""Exact output laws of the top-k selections on small inputs (test oracles, float arithmetic).

Every function mirrors a selection of :mod:`dpframe_topk` as mathematics (softmax probabilities, exact
noise tails, sums over every draw sequence), independently of the samplers, so sampled frequencies can
be compared with it and neighbouring datasets can be checked against the (ε, δ) inequality exactly.
Sets of candidate indices are ``frozenset``; ``None`` is ⊥ (nothing released).
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
from dpframe_topk.calibrate import StablePlan, log_inv

from dpframe.noise import discrete_laplace_tail

Law = dict[frozenset[int] | None, float]


def dgauss_tail(sigma2: Fraction, t: int) -> float:
    """P[Z > t] for the discrete Gaussian N_Z(0, σ²), by direct summation of the pmf."""
    s2 = float(sigma2)
    span = int(40 * math.sqrt(s2)) + 40
    xs = np.arange(-span, span + 1)
    w = np.exp(-(xs.astype(float) ** 2) / (2 * s2))
    return float(w[xs > t].sum() / w.sum())


def dlaplace_pmf(t: Fraction, support: np.ndarray) -> np.ndarray:
    """pmf of the discrete Laplace with scale t on ``support``."""
    r = math.exp(-1 / float(t))
    return (1 - r) / (1 + r) * np.exp(-np.abs(support) / float(t))


def softmax(u: np.ndarray, scale: float) -> np.ndarray:
    z = np.asarray(u, dtype=float) * scale
    z = np.exp(z - z.max())
    return z / z.sum()


def ptr_pass(plan: StablePlan, q: int) -> float:
    """P[the PTR test passes] at gap q (Gaussian: max{g, q} + Z > T; Laplace: q + Z > T)."""
    t = int(plan.threshold())
    if plan.ptr == "gaussian":
        return dgauss_tail(plan.ptr_scale, t - max(int(plan.g), q))
    return discrete_laplace_tail(plan.ptr_scale, t - q + 1)


def order_desc(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-np.asarray(scores), kind="stable")]


def padded(scores: np.ndarray, length: int) -> np.ndarray:
    top = np.sort(np.asarray(scores))[::-1][:length]
    return np.concatenate([top, np.zeros(max(0, length - top.size), dtype=np.int64)])


def gap_law(scores: np.ndarray, plan: StablePlan, k_max: int, k: int | None = None,
            lam: Fraction = Fraction(0)) -> np.ndarray:
    """P(k̃ = j), j = 1..k_max: the exponential mechanism on the gaps with regularizer −λ|j − k|."""
    hs = padded(scores, k_max + 1)
    u = (hs[:-1] - hs[1:]).astype(float)
    if k is not None:
        u = u - float(lam) * np.abs(np.arange(1, k_max + 1) - k)
    return softmax(u, float(plan.em_scale))


def peel_law(scores: np.ndarray, candidates: list[int], steps: int, scale: float) -> dict[frozenset[int], float]:
    """Law of the *set* picked by ``steps`` sequential exponential-mechanism draws without replacement."""
    out: dict[frozenset[int], float] = defaultdict(float)

    def walk(pool: list[int], picked: tuple[int, ...], p: float) -> None:
        if len(picked) == steps or not pool:
            out[frozenset(picked)] += p
            return
        w = softmax(np.array([scores[i] for i in pool]), scale)
        for i, wi in zip(pool, w):
            walk([j for j in pool if j != i], (*picked, i), p * wi)

    walk(list(candidates), (), 1.0)
    return dict(out)


def ld_law(scores: np.ndarray, candidates: list[int], steps: int, k_bar: int, eps: Fraction, g: Fraction,
           log_k_over_delta: float) -> dict[frozenset[int], float]:
    """Limited domain: the top k̄ candidates, k̄ − #real zero-score virtual items and ⊥, drawn until ⊥/virtual."""
    order = [candidates[i] for i in order_desc(np.array([scores[c] for c in candidates]))]
    top = order[:k_bar]
    nxt = int(scores[order[k_bar]]) if len(order) > k_bar else 0
    bottom = nxt + int(g) + math.ceil(float(g) * log_k_over_delta / float(eps) * (1 + 1e-12))
    virtual = k_bar - len(top)
    scale = float(eps / g)
    out: dict[frozenset[int], float] = defaultdict(float)

    def walk(pool: list[int], picked: tuple[int, ...], p: float) -> None:
        if len(picked) == steps:
            out[frozenset(picked)] += p
            return
        logw = [scale * scores[i] for i in pool] + [math.log(virtual) if virtual else -math.inf, scale * bottom]
        m = max(logw)
        w = np.exp(np.array(logw) - m)
        w /= w.sum()
        out[frozenset(picked)] += p * (w[-1] + w[-2])          # ⊥ or a virtual item: stop
        for i, wi in zip(pool, w):
            walk([j for j in pool if j != i], (*picked, i), p * wi)

    walk(top, (), 1.0)
    return dict(out)


def alg2_law(scores: np.ndarray, plan: StablePlan, k_max: int) -> Law:
    """StableTopK with adaptive k on observed scores (unobserved keys score 0): released set or ⊥."""
    hs = padded(scores, k_max + 1)
    order = order_desc(scores)
    law: Law = defaultdict(float)
    for j, pj in enumerate(gap_law(scores, plan, k_max), start=1):
        passed = pj * ptr_pass(plan, int(hs[j - 1] - hs[j]))
        law[frozenset(order[:j])] += passed
        law[None] += pj - passed
    return dict(law)


def alg3_law(scores: np.ndarray, query: object, plan: object) -> Law:
    """Alg 3 (fixed k) as :meth:`TopKQuery._patch` runs it: StableTopK on half, then the patch."""
    st, patch = plan.stable, plan.patch  # type: ignore[attr-defined]
    k, k_max, g = query.k, query.k_max, int(query.score.gap)  # type: ignore[attr-defined]
    hs = padded(scores, k_max + 1)
    order = order_desc(scores)
    everyone = list(range(len(scores)))
    law: Law = defaultdict(float)

    def add(p: float, sets: dict[frozenset[int], float], base: frozenset[int] = frozenset(),
            minus: frozenset[int] | None = None) -> None:
        for s, q in sets.items():
            law[(minus - s) if minus is not None else (base | s)] += p * q

    for j, pj in enumerate(gap_law(scores, st, k_max, k, query.lam), start=1):  # type: ignore[attr-defined]
        p_pass = ptr_pass(st, int(hs[j - 1] - hs[j]))
        found = frozenset(order[:j])
        if j == k:
            law[found] += pj * p_pass
        elif j > k:
            drop = j - k < k
            steps = j - k if drop else k
            scale = float(patch.peel_epsilon(steps)) / g
            picked = peel_law(-scores if drop else scores, sorted(found), steps, scale)
            add(pj * p_pass, picked, minus=found if drop else None)
        for have, p in ((found, pj * p_pass if j < k else 0.0), (frozenset(), pj * (1 - p_pass))):
            if p == 0:
                continue
            steps = k - len(have)
            outside = [i for i in everyone if i not in have]
            if patch.fill == "none":
                law[have] += p
            elif patch.fill == "peel":
                add(p, peel_law(scores, outside, steps, float(patch.peel_epsilon(steps)) / g), base=have)
            else:
                k_bar = max(steps, k_max)
                log_term = math.log(k_bar) + log_inv(patch.ld_delta)
                add(p, ld_law(scores, outside, steps, k_bar, patch.ld_epsilon(steps), query.score.gap,  # type: ignore[attr-defined]
                              log_term), base=have)
    return {s: p for s, p in law.items()}


def tct_law(scores: np.ndarray, k: int, t: Fraction) -> dict[frozenset[int], float]:
    """One-shot top-k with discrete Laplace(t) noise, ties to the lower index (k = 1 or k = m − 1)."""
    m = len(scores)
    span = int(60 * float(t)) + int(max(scores) - min(scores)) + 60
    z = np.arange(-span, span + 1)
    pmf = dlaplace_pmf(t, z)
    cdf = np.cumsum(pmf)

    def below(i: int, level: int, strict: bool) -> float:
        """P[scores[i] + Z_i < level] (strict) or ≤ level."""
        cut = level - scores[i] - (1 if strict else 0)
        return float(cdf[min(max(cut + span, -1), 2 * span)]) if cut + span >= 0 else 0.0

    out: dict[frozenset[int], float] = {}
    for i in range(m):
        total = 0.0
        for zi, pi in zip(z, pmf):
            level = int(scores[i] + zi)
            if k == 1:    # i is the unique winner: lower indices strictly below, higher ones ≤
                prod = math.prod(below(j, level, j < i) for j in range(m) if j != i)
                total += pi * prod
            else:         # i is the one left out: lower indices ≥ its noisy score, higher ones >
                prod = math.prod(1 - below(j, level, j < i) for j in range(m) if j != i)
                total += pi * prod
        out[frozenset([i]) if k == 1 else frozenset(set(range(m)) - {i})] = total
    return out
