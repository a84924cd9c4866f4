"""The built-in privacy curves: one constructor per mechanism (each curve's kind is registered for the ledger).

Closed forms are in :mod:`dpframe.accounting.numerics` (sensitivity-normalised; derivations in the digest
``research/004_modern_accounting.md`` §1.3, §2.3–2.4):

* Gaussian σ: ε(α) = α/(2σ²); δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), μ = 1/σ (exact).
* Laplace b: ε(α) = 1/b + log1p((α−1)·expm1((1−2α)/b)/(2α−1))/(α−1); δ(ε) = 1 − e^{(ε−1/b)/2} on
  [0, 1/b] (exact).
* Randomized response p: binary pair (p, 1−p) vs (1−p, p) (exact).
* pure ε-DP (any mechanism): dominated by randomized response with p = e^ε/(1+e^ε) (Kairouz et al.
  2015); RDP (1/(α−1))·log[(sinh(αε) − sinh((α−1)ε))/sinh(ε)] (Bun & Steinke 2016).
* ε-bounded-range (exponential mechanism, report-noisy-max with Gumbel noise): RDP min(pure, αε²/8)
  (Cesar & Rogers 2021); δ(ε') = (e^{ε/2} − e^{ε'/2})²/(e^ε − 1) for 0 ≤ ε' ≤ ε (the sup over the
  binary worst cases with losses in [t − ε, t]; derived in this module's tests).
* discrete Laplace t, integer sensitivity Δ (one coordinate): exact RDP and profile by geometric sums.
* threshold test (thesis Thm 4.3.1): a binary output "noisy count ≥ T" with Gaussian noise on a count
  in [lo, hi]; exact binary divergences (also after subsampling, where they stay binary).
* sparse vectors (discrete Laplace and Gaussian noise; thesis Ch. 7).

Poisson subsampling is :meth:`PrivacyCurve.subsampled`; several mechanisms on one input are
:func:`~dpframe.accounting.composition`.

Example:
    >>> g = gaussian(sigma=2.0)
    >>> float(g.rdp_at([2.0, 4.0])[1])
    0.5
    >>> round(laplace(scale=10.0).delta_at(0.05), 6)
    0.02469

"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dpframe.accounting.checks import (
    check_rate,
    nonnegative,
    positive,
    ratio,
    rdp_out,
    real,
    shown,
)
from dpframe.accounting.curve import PrivacyCurve, register_core_curve
from dpframe.accounting.numerics.binary import binary_profile, binary_rdp, sampled_pairs, threshold_pairs
from dpframe.accounting.numerics.common import Array, Fn
from dpframe.accounting.numerics.profiles import (
    MAX_DISCRETE_GAUSSIAN_SIGMA,
    hs_atoms,
    hs_bounded_range,
    hs_discrete_gaussian,
    hs_discrete_gaussian_bound,
    hs_discrete_laplace,
    hs_gaussian,
    hs_laplace,
    hs_mixture,
)
from dpframe.accounting.numerics.rdp import (
    half_square_ratio_up,
    product_up,
    rdp_binary,
    rdp_discrete_laplace,
    rdp_laplace,
    rdp_linear,
    rdp_pure,
    root_sum_squares_up,
)
from dpframe.accounting.numerics.sampled import sampled_gaussian_rdp, sampled_laplace_rdp
from dpframe.accounting.numerics.svt import SVT_GAMMA_FRACTIONS, gaussian_svt_log_moments, log_binomial_sum
from dpframe.errors import BudgetError

__all__ = [
    "MAX_COUNT_RANGE", "MAX_SVT_LENGTH", "PrivacyCurve", "approx", "discrete_gaussian", "discrete_laplace",
    "exponential", "from_profile", "from_rdp", "gaussian", "gaussian_sparse_vector", "laplace", "pure",
    "randomized_response", "sparse_vector", "threshold_test", "tree_aggregation", "zcdp",
]

#: Largest count range [lower, upper] of :func:`threshold_test` (its cost grows with the range).
MAX_COUNT_RANGE = 100_000


def gaussian(sigma: float, sensitivity: float = 1.0) -> PrivacyCurve:
    """Gaussian noise of standard deviation ``sigma`` on a statistic of L2 sensitivity ``sensitivity``.

    Example:
        >>> round(gaussian(sigma=1.0).delta_at(0.276617), 4)
        0.3

    """
    s = positive(sigma, "sigma", "pass the noise standard deviation, e.g. sigma=1.0")
    d = positive(sensitivity, "sensitivity", "pass the L2 sensitivity, e.g. 1.0")
    mu = ratio(d, s, "sigma", "μ = Δ/σ")
    hs = hs_gaussian(mu)
    rho = half_square_ratio_up(d, s)           # Δ²/(2σ²) rounded up; +∞ beyond floats: a vacuous, valid bound
    return PrivacyCurve(f"Gaussian(σ={s:g}, Δ={d:g})", {"kind": "gaussian", "sigma": s, "sensitivity": d},
                        rdp_linear(rho), hs, hs, None, 0.0, rho, True, kl=rho,
                        sampled_rdp=(lambda g: sampled_gaussian_rdp(mu, g)) if math.isfinite(rho) else None)


def tree_aggregation(sigma: float, steps: int | Sequence[int], sensitivity: float = 1.0) -> PrivacyCurve:
    """Tree aggregation (DP-FTRL's prefix sums, one epoch): Gaussian noise σ on every node of a binary tree.

    ``steps``: the leaves of the tree, or a list of epoch lengths when the tree restarts (each record in
    one epoch). A record's contribution (L2 ≤ Δ) is in one leaf and its ancestors, at most
    D = ⌈log₂(max steps + 1)⌉ nodes, so the whole release is one Gaussian mechanism with sensitivity Δ√D
    (Kairouz et al. 2021, App. D; dp_accounting's ``SingleEpochTreeAggregationDpEvent``).

    Example:
        >>> round(float(tree_aggregation(sigma=1.0, steps=100).rdp_at([2.0])[0]), 12)   # αD/(2σ²), D = ⌈log₂ 101⌉
        7.0

    """
    counts = [steps] if isinstance(steps, int) and not isinstance(steps, bool) else steps
    if (isinstance(counts, str | bytes) or not isinstance(counts, Sequence) or not counts
            or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 2**53 for n in counts)):
        raise BudgetError(f"must be a positive int or a non-empty list of them, got {shown(steps)}",
                          argument="steps", fix="pass the number of steps per tree, e.g. steps=1000")
    depth = math.ceil(math.log2(max(counts) + 1))
    s = positive(sigma, "sigma", "pass the noise standard deviation, e.g. sigma=1.0")
    d = positive(sensitivity, "sensitivity", "pass the L2 sensitivity of one record, e.g. 1.0")
    one = gaussian(s, root_sum_squares_up([(d, 1.0, depth)]))      # Δ√D rounded up
    return replace(one, label=f"tree aggregation(σ={s:g}, Δ={d:g}, depth {depth})",
                   spec={"kind": "tree_aggregation", "sigma": s, "steps": list(counts), "sensitivity": d})


def laplace(scale: float, sensitivity: float = 1.0) -> PrivacyCurve:
    """Laplace noise of scale ``scale`` on a statistic of L1 sensitivity ``sensitivity`` (ε = Δ/b).

    Example:
        >>> laplace(scale=10.0).eps_inf
        0.1

    """
    b = positive(scale, "scale", "pass the Laplace scale, e.g. scale=10.0")
    d = positive(sensitivity, "sensitivity", "pass the L1 sensitivity, e.g. 1.0")
    eps = ratio(d, b, "scale", "ε = Δ/b")
    hs = hs_laplace(eps)
    return PrivacyCurve(f"Laplace(b={b:g}, Δ={d:g})", {"kind": "laplace", "scale": b, "sensitivity": d},
                        rdp_laplace(eps), hs, hs, eps, 0.0, half_square_ratio_up(d, b), True, pure_eps=eps,
                        kl=eps + math.expm1(-eps),     # D(Lap(0, b)‖Lap(Δ, b)) = ε + e^{−ε} − 1
                        sampled_rdp=lambda g: sampled_laplace_rdp(eps, g))


def randomized_response(p: float | None = None, *, epsilon: float | None = None, k: int = 2) -> PrivacyCurve:
    """k-ary randomized response (binary by default): the true value w.p. ``p`` (or e^ε/(e^ε + k − 1)).

    Each of the k − 1 other values comes out with probability (1 − p)/(k − 1). Two inputs x ≠ x′ give
    outputs whose likelihood ratio is e^ε at x, e^{−ε} at x′ and 1 elsewhere, so the privacy loss is ±ε
    or 0 with probabilities (e^ε, 1, k − 2)/(e^ε + k − 1): exact curves.
    (dp_accounting's ``RandomizedResponseDpEvent(q, k)`` is p = 1 − q + q/k.)

    Example:
        >>> randomized_response(epsilon=1000.0).eps_inf      # p rounds to 1 as a float: built from ε
        1000.0
        >>> round(randomized_response(0.5, k=4).eps_inf, 6)   # log(0.5/(0.5/3))
        1.098612

    """
    if (p is None) == (epsilon is None):
        raise BudgetError("give exactly one of p and epsilon", argument="p",
                          fix="randomized_response(p=0.75) or randomized_response(epsilon=1.0)")
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= 2**53:
        raise BudgetError(f"must be an int in [2, 2**53], got {shown(k)}", argument="k",
                          fix="pass the number of possible values, e.g. k=2")
    spec: dict[str, Any]
    others = math.log(k - 1)
    if p is None:
        eta = positive(epsilon, "epsilon", "pass epsilon > 0")
        prob = 1 / (1 + (k - 1) * math.exp(-eta))
        if 1 / k < prob < 1:         # representable: described by p, as always
            return randomized_response(prob, k=k)
        # log p, log q (q = one other value's probability), without forming e^η
        lp = -float(np.logaddexp(0.0, others - eta))
        lq = lp - eta
        label, spec = f"randomized response(ε={eta:g}{_k(k)})", {"kind": "randomized_response", "epsilon": eta}
    else:
        prob = real(p, "p", "pass the truth probability, in (1/k, 1)")
        if not (1 / k < prob < 1):
            raise BudgetError(f"must be in (1/k, 1) = ({1 / k:g}, 1), got {shown(p)}", argument="p",
                              fix="pass the truth probability")
        lp, lq = math.log(prob), math.log1p(-prob) - others
        eta = lp - lq
        label, spec = f"randomized response(p={prob:g}{_k(k)})", {"kind": "randomized_response", "p": prob}
    if k != 2:
        spec["k"] = k
    atoms = np.array([eta, -eta, 0.0])
    probs = np.array([math.exp(lp), math.exp(lq), max(0.0, 1 - math.exp(lp) - math.exp(lq))])
    hs = hs_atoms(atoms, probs) if k > 2 else hs_atoms(atoms[:2], probs[:2])
    rest = math.log1p(-math.exp(lp) - math.exp(lq)) if k > 2 else -math.inf
    return PrivacyCurve(label, spec, rdp_binary(lp, lq, lq, lp, rest), hs, hs, eta, 0.0,
                        half_square_ratio_up(eta, 1.0), k == 2, pure_eps=eta,
                        kl=eta * (math.exp(lp) - math.exp(lq)))   # Σ P·loss = ε(P(x) − P(x′))


def _k(k: int) -> str:
    return "" if k == 2 else f", k={k}"


def pure(epsilon: float) -> PrivacyCurve:
    """Any ε-DP mechanism (dominated by randomized response with p = e^ε/(1+e^ε))."""
    e = positive(epsilon, "epsilon", "pass epsilon > 0")
    p = 1 / (1 + math.exp(-e))
    hs = hs_atoms(np.array([e, -e]), np.array([p, math.exp(-float(np.logaddexp(0.0, e)))]))
    return PrivacyCurve(f"ε-DP(ε={e:g})", {"kind": "pure", "epsilon": e}, rdp_pure(e), hs, hs, e, 0.0,
                        half_square_ratio_up(e, 1.0), False, pure_eps=e, kl=min(_kl_rr(e), e))   # ρ: ∞ past floats


def _kl_rr(eta: float) -> float:
    """D(RR_p‖RR_{1−p}) = (2p − 1)·η = η·tanh(η/2), p = e^η/(1+e^η): the KL divergence of ε-DP's worst case."""
    return eta * math.tanh(eta / 2)


def sparse_vector(eps1: float, eps2: float, max_positives: int) -> PrivacyCurve:
    """Sparse vector with one ε₁-DP threshold noise and ε₂/c-DP query noise (at sensitivity 2Δ), cut-off c.

    RDP at order α (digest 004 §5.2; ``R_ε`` is the RDP of any ε-DP mechanism, the curve of :func:`pure`):
    the classic (ε₁ + ε₂)-DP bound ``R_{ε₁+ε₂}(α)``, and for c = 1 the least of it and the thesis's (7.3),
    ``R_{ε₁}(α) + ε₂`` (query noise with ε_ν(∞) = ε₂ at sensitivity 2Δ). The privacy profile is the
    classic one.

    Proof of (7.3) for the stream of :mod:`dpframe.interactive.svt` (c = 1; thesis §7.6.1, re-derived).
    Integers throughout: ρ ~ DLap(Δ/ε₁) with pmf p, ν_i ~ DLap(2Δ/ε₂), "above" iff q_i + ν_i ≥ T + ρ, halt at
    the first "above". Before it every answer is "below", so the i-th query is a fixed function of i (and
    of the analyst's coins, conditioned on); a stream closed after k "below"s is the stream whose (k+1)-th
    query always answers "above" (the same on both datasets). The output is the stopping index K. Fix an
    ordered neighbouring pair (D, D'); |q_i(D) − q_i(D')| ≤ Δ. Substituting z = u − Δ for the threshold noise,

        P_D[K = k] = Σ_u p(u)·λ(u)·a_k(u),   P_D'[K = k] = Σ_u p(u)·b_k(u),   λ(u) = p(u − Δ)/p(u),

    where a_k(u) is the law of K at threshold T + u for the *shifted* queries q_i(D) + Δ and b_k(u) that of
    the queries q_i(D'). (1) Jensen for the jointly convex (x, y) ↦ x^α y^{1−α} (α > 1):
    Σ_k P_D[k]^α P_D'[k]^{1−α} ≤ Σ_u p(u) λ(u)^α Σ_k a_k(u)^α b_k(u)^{1−α}. (2) For fixed u let
    X_k = a_k(u)/b_k(u): each "below" factor P[q_i(D) + Δ + ν < T + u]/P[q_i(D') + ν < T + u] ≤ 1 because
    q_i(D) + Δ ≥ q_i(D'); the "above" factor is ≤ e^{ε₂} because the two statistics differ by a shift in
    [0, 2Δ] and DLap(2Δ/ε₂) tails move by at most e^{ε₂} under it. So 0 ≤ X_k ≤ e^{ε₂}, and
    Σ_k b_k X_k = Σ_k a_k(u) ≤ 1 (a is a sub-probability law of K), hence
    Σ_k b_k X_k^α ≤ e^{(α−1)ε₂}·Σ_k b_k X_k ≤ e^{(α−1)ε₂} (X^α ≤ X·e^{(α−1)ε₂} on [0, e^{ε₂}]). (3)
    Σ_u p(u) λ(u)^α = exp((α−1)·D_α(p(· − Δ)‖p)) and p(u − Δ)/p(u) ∈ [e^{−ε₁}, e^{ε₁}], so that divergence
    is at most R_{ε₁}(α), the largest α-Rényi divergence of two laws with likelihood ratio in that range
    (attained by randomized response). Together: D_α(K_D‖K_D') ≤ R_{ε₁}(α) + ε₂ for every ordered pair, so
    both directions. The classic bound holds because the stream is (ε₁ + ε₂)-DP (Lyu et al. 2017); the
    minimum of two valid bounds is valid. ``tests/interactive/test_svt_rdp.py`` checks the curve against the
    exact Rényi divergence of small discrete streams.

    The thesis's length-capped bound (Thm. 7.2.7, ``R_{ε₁} + c·R_{ε₂/c} + log Σ_{j≤c} C(k, j)/(α−1)``)
    is not used: with Laplace noise it never beats ``R_{ε₁+ε₂}`` (checked on a grid of ε₁, ε₂, c, k, α).

    Example:
        >>> [round(float(v), 4) for v in sparse_vector(0.1, 0.9, 1).rdp_at([8, 64])]   # ε-DP(1): 0.9552, 0.995
        [0.9367, 0.9898]

    """
    e1 = positive(eps1, "eps1", "pass ε₁ > 0")
    e2 = positive(eps2, "eps2", "pass ε₂ > 0")
    if isinstance(max_positives, bool) or not isinstance(max_positives, int) or max_positives < 1:
        raise BudgetError(f"must be an int ≥ 1, got {shown(max_positives)}", argument="max_positives",
                          fix="pass 1 or more")
    total = pure(e1 + e2)
    assert total.rdp is not None
    rdp = total.rdp
    if max_positives == 1:
        r1, classic = rdp_pure(e1), total.rdp

        def rdp(a: Array) -> Array:
            return np.minimum(classic(a), r1(a) + e2)

    return PrivacyCurve(f"sparse vector(ε₁={e1:g}, ε₂={e2:g}, c={max_positives})",
                        {"kind": "sparse_vector", "eps1": e1, "eps2": e2, "max_positives": max_positives},
                        rdp, total.hs, total.hs_rev, e1 + e2, 0.0, total.rho, False, pure_eps=e1 + e2)


#: Longest stream a length-capped sparse vector may declare (its log-term sums min(c, k) + 1 binomials).
MAX_SVT_LENGTH = 10**6

#: Orders γ of the Hölder step in (7.2), as fractions of the way from 1 to (σ₂/σ₁)² (where the moment diverges).


def gaussian_sparse_vector(sigma1: float, sigma2: float, sensitivity: float, max_positives: int,
                           threshold: float, max_length: int | None = None,
                           nonnegative: bool = False) -> PrivacyCurve:
    """Gaussian sparse vector: one threshold noise N_ℤ(0, σ₁²), query noise N_ℤ(0, σ₂²), cut-off c, no refresh.

    The stream answers ⊤ iff q_i + ν_i ≥ T + ρ for integer statistics q_i of sensitivity Δ (integer
    noise ρ, ν_i; a non-integer T acts as ⌈T⌉, since q_i + ν_i − ρ is an integer). With
    ε_ρ(α) = αΔ²/(2σ₁²) and ε_ν(α) = α(2Δ)²/(2σ₂²) (discrete Gaussian RDP is at most the continuous one,
    Canonne–Kamath–Steinke 2020), the RDP curve at order α is the least of the bounds that apply
    (thesis Ch. 7, digest 004 §5.2, with the digest's corrections):

    * ``max_length`` k given (any c; Thm 7.2.7, Remark 7.2.3 for c = 1):
      ε_ρ(α) + c·ε_ν(α) + log(Σ_{j≤c} C(k, j))/(α−1) — the log of the number of outputs.
    * c = 1 and ``nonnegative`` (every query is ≥ 0 on every dataset; (7.2)), minimised over a grid
      of γ ∈ (1, (σ₂/σ₁)²): ((α − (γ−1)/γ)/(α−1))·ε_ρ(γα/(γ−1)) + ε_ν(α) + log M_γ/(γ(α−1)),
      M_γ = E_{z}[E[K|z]^γ] bounded by :func:`gaussian_svt_log_moments`.

    Why M_γ bounds the moment for every nonnegative stream (the extremal stream is q ≡ 0): given the
    threshold noise ρ = z, K (the number of queries asked, up to and including the first ⊤) counts
    independent trials; trial i is ⊤ iff ν_i ≥ ⌈T⌉ + z − q_i, of probability P[ν ≥ ⌈T⌉ + z − q_i] ≥
    P[ν ≥ ⌈T⌉ + z] =: p(z) because q_i ≥ 0 (the tail is non-increasing). An adaptive analyst only
    chooses q_i after i − 1 ⊥'s, so each trial still succeeds with probability ≥ p(z) and K is
    stochastically dominated by a geometric variable: E[K|z] = Σ_{k≥0} P[K > k | z] ≤ Σ_k (1 − p(z))^k
    = 1/p(z) — i.e. 1/(1 − F_ν(T + z − 1)), not the thesis's F/(1 − F) = E[K|z] − 1 (the digest's
    off-by-one). The proof's fictitious queries q + Δ are nonnegative too. The Hölder step (exponents
    γ/(γ−1) and γ) gives the threshold term ((α − (γ−1)/γ)/(α−1))·ε_ρ(γα/(γ−1)) (the factor the thesis's
    Prop. 7.2.5 drops). Halting after k queries post-processes the uncapped stream, so both bounds
    hold together. Without ``max_length`` and for c > 1 or queries that can be negative no finite
    bound is known: refused (BudgetError naming ``max_length``).

    Example (ρ = 1/2 split as in ``sess.sparse_vector``: σ₁ = Δ·√((1+c)/(2ρ)), σ₂ = 2σ₁):
        >>> curve = gaussian_sparse_vector(2 ** 0.5, 2 * 2 ** 0.5, 1, 1, 0, max_length=100)
        >>> [round(float(v), 4) for v in curve.rdp_at([2, 8])]     # α/2 + log(101)/(α−1)
        [5.6151, 4.6593]

    """
    s1 = positive(sigma1, "sigma1", "pass the threshold noise's σ₁ > 0")
    s2 = positive(sigma2, "sigma2", "pass the query noise's σ₂ > 0")
    d = positive(sensitivity, "sensitivity", "pass the queries' sensitivity Δ")
    t = real(threshold, "threshold", "pass the threshold in statistic units")
    c = max_positives
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise BudgetError(f"must be an int ≥ 1, got {shown(c)}", argument="max_positives", fix="pass 1 or more")
    k = max_length
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not (1 <= k <= MAX_SVT_LENGTH)):
        raise BudgetError(f"must be None or an int in [1, {MAX_SVT_LENGTH:,}], got {shown(k)}",
                          argument="max_length", fix="pass the most queries the stream may test, e.g. 1000")
    if not isinstance(nonnegative, bool):
        raise BudgetError(f"must be True or False, got {shown(nonnegative)}", argument="nonnegative",
                          fix="pass True only if every query is ≥ 0 on every dataset")
    use_moment = nonnegative and c == 1
    if k is None and not use_moment:
        raise BudgetError("a Gaussian sparse vector has no finite RDP bound without a maximum length "
                          + ("for max_positives > 1" if c > 1 else "when queries can be negative"),
                          argument="max_length", fix="pass max_length=k (the stream halts after k queries)")
    r1 = d * d / (2 * s1 * s1)
    r2 = 4 * d * d / (2 * s2 * s2)
    fns: list[Fn] = []
    if k is not None:
        log_outputs = log_binomial_sum(k, c)

        def capped(a: Array) -> Array:
            return a * (r1 + c * r2) + log_outputs / (a - 1)
        fns.append(capped)
    if use_moment:
        if s2 <= s1:
            raise BudgetError("the nonnegative-query bound needs σ₂ > σ₁", argument="sigma2",
                              fix="pass σ₂ = 2σ₁ (as sess.sparse_vector does), or a max_length")
        gam = 1 + ((s2 / s1) ** 2 - 1) * SVT_GAMMA_FRACTIONS
        log_m = gaussian_svt_log_moments(s1, s2, math.ceil(t), gam)

        def moment(a: Array) -> Array:
            x = np.asarray(a, dtype=np.float64)[..., None]
            thr = (x - (gam - 1) / gam) / (x - 1) * r1 * (gam * x / (gam - 1))
            out: Array = np.min(thr + r2 * x + log_m / (gam * (x - 1)), axis=-1)
            return out
        fns.append(moment)

    def rdp(a: Array) -> Array:
        out: Array = np.min(np.stack([f(a) for f in fns]), axis=0)
        return out

    spec = {"kind": "gaussian_sparse_vector", "sigma1": s1, "sigma2": s2, "sensitivity": d, "max_positives": c,
            "threshold": t, "max_length": k, "nonnegative": nonnegative}
    noise = f"σ₁={s1:g}, σ₂={s2:g}, Δ={d:g}, T={t:g}" if use_moment else f"σ₁/Δ={s1 / d:g}, σ₂/Δ={s2 / d:g}"
    label = (f"Gaussian sparse vector({noise}, c={c}"
             + (f", k={k}" if k is not None else "") + (", q ≥ 0" if nonnegative else "") + ")")
    return PrivacyCurve(label, spec, rdp, None, None, None, 0.0, None, False)


def zcdp(rho: float, delta0: float = 0.0) -> PrivacyCurve:
    """Any ρ-zCDP mechanism (ε(α) = αρ), optionally δ0-approximate."""
    r = positive(rho, "rho", "pass rho > 0")
    d0 = _delta0(delta0)
    return PrivacyCurve(f"{r:g}-zCDP" + (f" (δ0={d0:g})" if d0 else ""), {"kind": "zcdp", "rho": r, "delta0": d0},
                        rdp_linear(r), None, None, None, d0, r, False, kl=None if d0 else r)


def approx(epsilon: float, delta: float) -> PrivacyCurve:
    """Any (ε, δ)-DP mechanism: δ-approximately ε-DP (its tight dominating pair: δ + (1−δ)·RR_ε)."""
    base = pure(epsilon)
    d0 = _delta0(delta)
    assert base.hs is not None
    hs = hs_mixture(base.hs, d0)
    return PrivacyCurve(f"(ε={base.eps_inf:g}, δ={d0:g})-DP", {"kind": "approx", "epsilon": base.eps_inf,
                        "delta": d0}, base.rdp, hs, hs, base.eps_inf, d0, base.rho, False, pure_eps=base.eps_inf)


def discrete_laplace(scale: float, sensitivity: int = 1) -> PrivacyCurve:
    """Discrete Laplace noise (pmf ∝ e^{−|k|/t}) on one integer statistic of sensitivity Δ (exact curves)."""
    t = positive(scale, "scale", "pass the discrete Laplace scale t > 0")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or not (1 <= sensitivity <= 2**53):
        raise BudgetError(f"must be an int in [1, 2**53], got {shown(sensitivity)}", argument="sensitivity",
                          fix="the sensitivity of an integer statistic is a positive integer")
    eps = ratio(sensitivity, t, "scale", "ε = Δ/t")
    hs = hs_discrete_laplace(t, sensitivity)
    return PrivacyCurve(f"discrete Laplace(t={t:g}, Δ={sensitivity})",
                        {"kind": "discrete_laplace", "scale": t, "sensitivity": sensitivity},
                        rdp_discrete_laplace(t, sensitivity), hs, hs, eps, 0.0,
                        half_square_ratio_up(sensitivity, t), False, pure_eps=eps)


def discrete_gaussian(sigma: float, sensitivity: float = 1.0, *, scalar: bool = False) -> PrivacyCurve:
    """Discrete Gaussian noise N_Z(0, σ²) with L2 sensitivity Δ: ε(α) = αΔ²/(2σ²) (Canonne et al. 2020).

    By default its PLD is derived from this RDP curve (valid for vectors of any dimension). With
    ``scalar=True`` the noise is on *one* integer statistic whose sensitivity Δ is an integer: the PLD then
    uses the exact privacy profile of N_Z(0, σ²) against N_Z(Δ, σ²) (CKS20 Thm 7) while σ and Δ are at most 10⁴
    (a table of the pmf), and beyond the Gaussian profile plus a proven bound on the lattice sum's error
    (:func:`~dpframe.accounting.numerics.profiles.hs_discrete_gaussian_bound`: relatively about z²/(12σ²) above
    the exact profile, e.g. 10⁻⁷ at σ = 10⁵; the RDP-derived profile is several % above it).

    Example:
        >>> round(discrete_gaussian(1.0, scalar=True).delta_at(1.0), 4)    # exact; 0.2475 from the RDP curve
        0.1414

    """
    s = positive(sigma, "sigma", "pass sigma > 0")
    d = positive(sensitivity, "sensitivity", "pass the L2 sensitivity")
    ratio(d, s, "sigma", "Δ/σ")                # refuses a Δ/σ beyond floats
    rho = half_square_ratio_up(d, s)
    spec: dict[str, Any] = {"kind": "discrete_gaussian", "sigma": s, "sensitivity": d}
    hs = None
    if scalar is not False:
        if scalar is not True or not float(d).is_integer() or d > 2**53:
            raise BudgetError(f"scalar=True needs an integer sensitivity, got {shown(sensitivity)}"
                              if scalar is True else f"scalar must be True or False, got {shown(scalar)}",
                              argument="scalar" if scalar is not True else "sensitivity",
                              fix="pass the integer sensitivity of the one statistic, or leave scalar=False")
        if s <= MAX_DISCRETE_GAUSSIAN_SIGMA and d <= MAX_DISCRETE_GAUSSIAN_SIGMA:
            hs = _tabulated_on_first_use(s, int(d))
        else:
            hs = hs_discrete_gaussian_bound(s, int(d))
        spec["scalar"] = True
    return PrivacyCurve(f"discrete Gaussian(σ={s:g}, Δ={d:g}{', scalar' if hs else ''})", spec,
                        rdp_linear(rho), hs, hs, None, 0.0, rho, False, kl=rho)


def _tabulated_on_first_use(sigma: float, sensitivity: int) -> Fn:
    """:func:`hs_discrete_gaussian`, its pmf table built when δ(ε) is first asked for.

    A session that composes RDP only never needs it: planning stays cheap.
    """
    table: list[Fn] = []

    def hs(eps: Any) -> Any:
        if not table:
            table.append(hs_discrete_gaussian(sigma, sensitivity))
        return table[0](eps)

    return hs


def exponential(epsilon: float) -> PrivacyCurve:
    """An ε-bounded-range mechanism: the exponential mechanism exp(ε·u/(2Δ)), report-noisy-max (Gumbel)."""
    base = pure(epsilon)
    e = float(base.eps_inf)  # type: ignore[arg-type]
    hs = hs_bounded_range(e)
    assert base.rdp is not None
    pure_rdp = base.rdp
    rho = half_square_ratio_up(e, 2.0)        # ε²/8 rounded up (αε²/8 in floats was up to an ulp or two below)
    return PrivacyCurve(f"exponential mechanism(ε={e:g})", {"kind": "exponential", "epsilon": e},
                        lambda a: np.minimum(pure_rdp(a), product_up(np.asarray(a, dtype=np.float64), rho)), hs, hs,
                        e, 0.0, rho, False, pure_eps=e, kl=min(float(base.kl or math.inf), rho))


def threshold_test(sigma: float, threshold: float, lower: int, upper: int) -> PrivacyCurve:
    """Noisy threshold test 1[c + N(0, σ²) ≥ T] on a count c ∈ [lower, upper] (thesis Thm 4.3.1).

    The output is binary, so its RDP curve and profile are exact maxima over the neighbour pairs
    (c, c ± 1); subsampled versions stay binary and are computed exactly too.

    Validity condition: [``lower``, ``upper``] must contain every count the test can *see*. After
    ``.subsampled(rate)`` that is the count on the Poisson sample, not on the full data: the exact
    subsampled curves take the max over mixtures of the pairs (c, c ± 1) with c in the range (valid by
    joint convexity of the divergences only while the sampled count stays in it), and sampling can push
    the count below a ``lower`` that holds for the full data. Use ``lower=0`` for a subsampled test
    unless the sampled count is bounded below by construction.
    """
    s = positive(sigma, "sigma", "pass sigma > 0")
    t = real(threshold, "threshold", "pass the public threshold T as a finite number")
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_) for v in (lower, upper)) or not (
            0 <= lower <= upper <= 2**53):
        raise BudgetError(f"need integers 0 ≤ lower ≤ upper ≤ 2**53, got {shown(lower)}, {shown(upper)}",
                          argument="lower", fix="pass the public range of the count")
    lo, hi = int(lower), int(upper)
    if hi - lo > MAX_COUNT_RANGE:
        raise BudgetError(f"the count range [{lo}, {hi}] has more than {MAX_COUNT_RANGE} values (the curves are "
                          "exact maxima over every count in it)", argument="upper",
                          fix=f"pass a range of at most {MAX_COUNT_RANGE} counts around the values the count can take")
    spec = {"kind": "threshold_test", "sigma": s, "threshold": t, "lower": lo, "upper": hi}
    return _binary_family(f"threshold test(σ={s:g}, T={t:g}, c∈[{lo},{hi}])", spec,
                          threshold_pairs(s, t, lo, hi), 1.0)


def _binary_family(label: str, spec: dict[str, Any], pairs: Array, rate: float) -> PrivacyCurve:
    """Exact curves of a mechanism with a binary output over a finite set of neighbour pairs (P, Q).

    ``pairs`` holds rows (log p, log(1−p), log q, log(1−q)) of the output "1" (see
    :mod:`dpframe.accounting.numerics.binary`); both neighbour directions are included.
    """
    both = sampled_pairs(pairs, rate)
    rdp, hs = binary_rdp(both), binary_profile(both)
    spec = {**spec, "rate": rate} if rate < 1 else spec
    curve = PrivacyCurve(label, spec, rdp, hs, hs, None, 0.0, None, False, rate)
    return _BinaryCurve(curve, pairs)


class _BinaryCurve(PrivacyCurve):
    """A binary-output curve whose subsampling is computed exactly."""

    def __init__(self, curve: PrivacyCurve, pairs: Array) -> None:
        for name in curve.__dataclass_fields__:
            object.__setattr__(self, name, getattr(curve, name))
        object.__setattr__(self, "_pairs", pairs)

    def subsampled(self, rate: float) -> PrivacyCurve:
        g = check_rate(rate)
        if g == 1:
            return self
        assert self.spec is not None
        base = {k: v for k, v in self.spec.items() if k != "rate"}
        pairs = self._pairs  # type: ignore[attr-defined]
        if self.rate < 1:  # compose the rates: sampling at a then b keeps a unit w.p. a·b
            g *= self.rate
        return _binary_family(f"{self.label} sampled at rate {g:g}", base, pairs, g)


def from_profile(delta: Callable[[float], float], *, label: str = "custom (δ(ε) only)") -> PrivacyCurve:
    """A mechanism known only by its privacy profile ε ↦ δ(ε) ≥ sup over neighbours (both orders).

    The PLD accountant composes it via a dominating pair built from the profile (thesis Lemma 3.3.3 and
    Cor. 3.5.1: connect-the-dots of the convex envelope); the RDP and zCDP accountants cannot. ``delta``
    receives public values only (the accountant's ε grid), never data.
    """
    if not callable(delta):
        raise BudgetError(f"expected a function ε ↦ δ(ε), got {shown(delta)}", argument="delta",
                          fix="pass e.g. lambda eps: max(0.0, 1e-6 - eps)")
    _check_label(label)

    def hs(e: Array) -> Array:
        values = np.array([_returned(delta, float(v), "delta") for v in np.asarray(e)])
        return np.asarray(np.clip(values, 0.0, 1.0))      # a NaN stays: it is read as the vacuous δ = 1

    return PrivacyCurve(label, None, None, hs, hs, None, 0.0, None, False)


def _check_label(label: object) -> None:
    if not isinstance(label, str):
        raise BudgetError(f"must be a string, got {shown(label)}", argument="label", fix="pass a short description")


def _returned(function: Callable[[float], object], x: float, argument: str) -> float:
    """``function(x)`` for a user's curve function: a number (NaN allowed: read as the vacuous bound).

    An exception the function raises becomes a BudgetError naming the argument (chained to the cause).
    """
    try:
        value = function(x)
    except Exception as e:
        raise BudgetError(f"the function raised {type(e).__name__}: {e} at {x!r}", argument=argument,
                          fix="make the function return a number (math.inf for no bound) for every input") from e
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise BudgetError(f"the function returned {shown(value)}, not a number", argument=argument,
                          fix="return a float from the function")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def from_rdp(rdp: Callable[[float], float], *, label: str = "custom (RDP only)",
             eps_inf: float | None = None) -> PrivacyCurve:
    """A mechanism known only by its RDP curve α ↦ ε(α); subsampling uses the general bound.

    ``rdp`` receives public values only (the accountant's orders α), never data.
    """
    if not callable(rdp):
        raise BudgetError(f"expected a function α ↦ ε(α), got {shown(rdp)}", argument="rdp",
                          fix="pass e.g. lambda alpha: alpha / 8")
    _check_label(label)
    cap = None if eps_inf is None else nonnegative(eps_inf, "eps_inf", "pass the pure ε-DP bound, or None")

    def f(a: Array) -> Array:
        return rdp_out([_returned(rdp, float(v), "rdp") for v in np.asarray(a)])   # NaN → ∞, below 0 → 0

    return PrivacyCurve(label, None, f, None, None, cap, 0.0, None, False)


def _delta0(value: object) -> float:
    d = nonnegative(value, "delta", "pass a δ such as 1e-7")
    if d >= 1:
        raise BudgetError(f"must be in [0, 1), got {shown(value)}", argument="delta", fix="pass a δ such as 1e-7")
    return d


_BUILT_IN: dict[str, Callable[..., PrivacyCurve]] = {
    "gaussian": gaussian, "laplace": laplace, "randomized_response": randomized_response, "pure": pure,
    "zcdp": zcdp, "approx": approx, "discrete_laplace": discrete_laplace, "discrete_gaussian": discrete_gaussian,
    "exponential": exponential, "threshold_test": threshold_test, "sparse_vector": sparse_vector,
    "tree_aggregation": tree_aggregation,
    "gaussian_sparse_vector": gaussian_sparse_vector}
for _kind, _build in _BUILT_IN.items():
    register_core_curve(_kind, _build)
