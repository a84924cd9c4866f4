"""The top-k selection algorithms on exact integer scores, with exact samplers only.

Inputs are the candidates' exact scores (int64, private) and public parameters from
:mod:`dpframe_topk.calibrate`. Outputs are candidate *indices*; the caller maps them to keys and sorts
by key (the released set is unordered — digest §6 P5). Randomness: ``dpframe.noise`` discrete Gaussian /
discrete Laplace and ``exponential_index`` (exact EM; a one-shot Gumbel top-k has the same distribution
as k rounds of peeling EM — Durfee & Rogers 2019 — so it is sampled as peeling with the exact EM).

Example (Alg 2 on the paper's intro sequence, seeded):
    >>> import numpy as np
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource
    >>> from dpframe_topk.calibrate import stable_plan_zcdp
    >>> h = np.array([100, 100, 99, 99] + [98] * 15 + [54, 53, 53, 52, 50] + list(range(49, 0, -1)))
    >>> plan = stable_plan_zcdp(Fraction(28, 1000), Fraction(1, 4586), Fraction(1))
    >>> k, chosen = stable_topk(h, plan, SeededRandomSource(1), k_max=72)
    >>> k, sorted(chosen.tolist()) == list(range(19))
    (19, True)

"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpframe.noise import RandomSource, discrete_gaussian, discrete_laplace, exponential_index
from dpframe_topk.calibrate import StablePlan

IntArray = npt.NDArray[np.int64]


def order_desc(scores: npt.ArrayLike) -> IntArray:
    """Indices of ``scores`` from largest to smallest (ties: lower index first)."""
    return np.argsort(-np.asarray(scores, dtype=np.int64), kind="stable").astype(np.int64)


def top_desc(scores: IntArray, count: int) -> IntArray:
    """``order_desc(scores)[:count]`` without sorting every score: a selection, then a sort of ``count`` items.

    The ``count``-th largest value v splits the scores: every index above v, then the lowest indices at v
    (ties go to the lower index, as in :func:`order_desc`), ordered among themselves.

    Example:
        >>> top_desc(np.array([5, 9, 5, 1, 9, 5]), 4).tolist()
        [1, 4, 0, 2]

    """
    if count >= scores.size:
        return order_desc(scores)
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    v = np.partition(scores, scores.size - count)[scores.size - count]
    above = np.flatnonzero(scores > v)
    ties = np.flatnonzero(scores == v)[:count - above.size]
    chosen = np.sort(np.concatenate([above, ties]))
    return chosen[order_desc(scores[chosen])]


def sorted_padded(scores: IntArray, length: int) -> IntArray:
    """The ``length`` largest scores in descending order, padded with zeros (unobserved keys score 0).

    Over keys from the data the caller passes scores ≥ 0 (signed sums are clamped at 0, like the
    unobserved keys), so the padding stays below every observed score and the result is sorted.
    """
    cut = scores.size - length           # the largest `length` scores are selected first, then sorted
    top = np.partition(scores, cut)[cut:] if 0 < length < scores.size else scores[:max(length, 0)]
    return np.concatenate([np.sort(top)[::-1], np.zeros(max(0, length - top.size), dtype=np.int64)])


def large_gap(hs: IntArray, j_max: int, epsilon: Fraction, g: Fraction, rng: RandomSource, *,
              k_target: int | None = None, lam: Fraction = Fraction(0)) -> int:
    """Alg 1 (Regularized Large Gap): k ∈ {1..j_max} with P(k) ∝ exp(ε/(2g)·(h_(k) − h_(k+1) + r(k))).

    ``hs``: descending scores with at least ``j_max + 1`` entries; r(k) = −λ|k − k_target| (public).
    Privacy: every gap moves by ≤ g (non-monotone), so this is the EM with sensitivity g: ε-DP and
    ε-bounded-range, ε²/8-zCDP (digest §3.1, Prop 7). Sampled exactly (fractional λ: utilities are
    scaled by λ's denominator and the scale divided by it).
    """
    gaps = hs[:j_max] - hs[1:j_max + 1]
    scale = epsilon / (2 * g)
    if k_target is None or lam == 0:
        return 1 + exponential_index(gaps, scale, rng)
    j = np.arange(1, j_max + 1, dtype=np.int64)
    util = lam.denominator * gaps - lam.numerator * np.abs(j - k_target)
    return 1 + exponential_index(util, scale / lam.denominator, rng)


def ptr_pass(gap: int, plan: StablePlan, rng: RandomSource) -> bool:
    """The PTR test on the chosen gap q_k (Alg 4 Gaussian / Alg 5 Laplace), exact integer comparison.

    Gaussian: max{g, q} + Z > g + T, Z ~ discrete N(0, σ²), T ≥ σ√(2 ln 1/δ_t). Laplace: q + Z > g + T.
    If q ≤ g (the set may differ on a neighbour) the test passes with probability ≤ P[Z > T] ≤ δ_t;
    if q > g the top-k set is identical on every neighbour (Lemma 10), so releasing it is
    post-processing of the noisy bit (generic PTR lemma, digest §3.3).
    """
    if plan.ptr == "gaussian":
        z = int(discrete_gaussian(plan.ptr_scale, 1, rng)[0])
        return max(plan.g, Fraction(gap)) + z > plan.threshold()
    z = int(discrete_laplace(plan.ptr_scale, 1, rng)[0])
    return gap + z > plan.threshold()


def stable_topk(scores: IntArray, plan: StablePlan, rng: RandomSource, *, k_max: int,
                k_target: int | None = None, lam: Fraction = Fraction(0)) -> tuple[int, IntArray | None]:
    """Alg 2 (StableTopK, adaptive k): (k, indices of the exact top-k) or (k, None) when the PTR fails.

    ``k_max`` caps k (public); scores are padded with zeros to ``k_max + 1`` (unknown domain: unobserved
    keys score 0). Privacy: δ_t-approximate zCDP of the EM plus the PTR (digest §3.6, Thm 11).
    """
    hs = sorted_padded(scores, k_max + 1)
    k = large_gap(hs, k_max, plan.em_epsilon, plan.g, rng, k_target=k_target, lam=lam)
    if not ptr_pass(int(hs[k - 1] - hs[k]), plan, rng):
        return k, None
    return k, top_desc(scores, k)


def peeling(scores: IntArray, candidates: IntArray, steps: int, scale: Fraction,
            rng: RandomSource) -> IntArray:
    """``steps`` rounds of the exact EM ∝ exp(scale·score) over ``candidates``, without replacement.

    Same distribution as the one-shot Gumbel top-k (add Gumbel(1/scale) once, take the k largest), in
    selection order. Each round is (scale·g)-DP and (scale·g)-bounded-range.
    """
    pool = np.asarray(candidates, dtype=np.int64)
    chosen: list[int] = []
    for _ in range(min(steps, pool.size)):
        i = exponential_index(scores[pool], scale, rng)
        chosen.append(int(pool[i]))
        pool = np.delete(pool, i)
    return np.asarray(chosen, dtype=np.int64)


def limited_domain(scores: IntArray, candidates: IntArray, steps: int, k_bar: int, step_epsilon: Fraction,
                   g: Fraction, log_k_over_delta: float, rng: RandomSource) -> IntArray:
    """Durfee–Rogers limited-domain top-k over the top ``k_bar`` of ``candidates`` (unknown domain).

    The top k̄ candidates (padded with zero-score virtual items) and a ⊥ item with score
    h_(k̄+1) + g + ⌈g·ln(k̄/δ)/ε'⌉ go through peeling EM at ε' per step; the output is the items drawn
    before ⊥ or a virtual item, at most ``steps``. Equivalent to the one-shot Gumbel version (items above
    the noisy ⊥ in noisy order). May return fewer than ``steps`` items.

    Cost O(#candidates) to select the top k̄ + 1 (no full sort), then O(steps · min(k̄, #candidates)):
    drawing stops at the first ⊥ or virtual item, and the virtual items are one item of multiplicity
    k̄ − #real (any of them stops the draw, so they need not be told apart — the exact EM with
    multiplicities has the same law as the padded pool).
    """
    order = candidates[top_desc(scores[candidates], k_bar + 1)]
    top = order[:k_bar]
    nxt = int(scores[order[k_bar]]) if order.size > k_bar else 0
    bottom = nxt + int(g) + int(np.ceil(float(g) * log_k_over_delta / float(step_epsilon) * (1 + 1e-12)))
    values = np.concatenate([scores[top], [0, bottom]]).astype(np.int64)
    weights = np.concatenate([np.ones(top.size, dtype=np.int64), [k_bar - top.size, 1]]).astype(np.int64)
    alive = np.ones(values.size, dtype=bool)
    out: list[int] = []
    for _ in range(steps):
        live = np.flatnonzero(alive)
        pick = int(live[exponential_index(values[live], step_epsilon / g, rng, multiplicities=weights[live])])
        if pick >= top.size:         # ⊥ or a zero-score virtual item: stop
            break
        out.append(int(top[pick]))
        alive[pick] = False
    return np.asarray(out, dtype=np.int64)


def tct_topk(scores: IntArray, k: int, laplace_scale: Fraction, rng: RandomSource) -> tuple[IntArray, IntArray]:
    """One-shot top-k from private candidates (TCT Alg 3): indices and noisy scores of the k largest.

    Each candidate is score + discrete Laplace(t) (ε_c-DP with t = Δ_key/ε_c); ties in the noisy scores
    are broken by the fixed public candidate order (lower index first).
    """
    noisy = scores + discrete_laplace(laplace_scale, scores.size, rng)
    top = top_desc(noisy, k)
    return top, noisy[top]
