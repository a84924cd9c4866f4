"""Amplification by Poisson subsampling with rate γ: RDP curves and dominating pairs.

RDP (thesis Ch. 2): the tight bound (Thm 2.3.4; mechanisms meeting its condition (2.2): Gaussian,
Laplace, randomized response) or the general bound (Thm 2.3.1), both in log space with the expm1 form
(digest §1.4.1), CGF-interpolated between integer orders, and capped by log(1 + γ(e^{ε∞} − 1)) (Li et al.
2012). Each is rounded up (:func:`~dpframe.accounting.numerics.rdp.round_up_rdp`): never below the same
formula in exact arithmetic on the base curve's float values. Profiles: the two amplified dominating pairs of
Thm 3.3.5 (remove: ((1−γ)Q + γP, Q); add: the reverse); accountants take the max of both.

Example:
    >>> round(subsampled_rdp_integer(2, 0.01, lambda a: a / 8.0, tight=True), 14)
    2.840213832e-05

"""

from __future__ import annotations

import math

import numpy as np

from dpframe.accounting.numerics.common import E_MAX, Array, Fn, special
from dpframe.accounting.numerics.profiles import two_sided
from dpframe.accounting.numerics.rdp import round_up_rdp

#: Largest integer order at which a subsampled RDP curve is computed term by term (beyond: the cap).
MAX_SUBSAMPLED_ORDER = 4096


def amplified_epsilon(epsilon: float, rate: float) -> float:
    """log(1 + γ(e^ε − 1)): ε-DP on a Poisson sample of rate γ (Li et al. 2012), finite for any finite ε.

    Proof, both directions of add/remove (the bound of Li, Qardaji & Su 2012, Thm 1, derived here for each). For
    D = S ∪ {x}, D′ = S and an event E, with the sample T of S shared: Q(E) = E_T[M(T) ∈ E] and P(E) =
    E_T[M(T ∪ {x}) ∈ E] ∈ [e^{−ε}Q(E), e^ε Q(E)], and M∘S(D) gives (1 − γ)Q(E) + γP(E). Remove: that is ≤ (1 + γ(e^ε −
    1))·Q(E). Add: Q(E) / ((1 − γ)Q(E) + γP(E)) ≤ a/((1 − γ)a + γ) with a = e^ε, and (1 + γ(a − 1))·((1 − γ)a + γ) =
    a + γ(1 − γ)(a − 1)² ≥ a, so the same bound holds.

    Rounded up: a few ulps of the magnitudes it adds are added (it is never below the exact value).

    Example:
        >>> round(amplified_epsilon(1.0, 0.01), 6), round(amplified_epsilon(1000.0, 0.5), 6)
        (0.017037, 999.306853)

    """
    if epsilon < 700:
        value = math.log1p(rate * math.expm1(epsilon))          # all factors ≥ 0: a few ulps of the value
        return float(round_up_rdp(value, 0.0, 2.0))
    value = epsilon + math.log(rate) + math.log1p((1 - rate) * math.exp(-epsilon) / rate)  # log((1−γ) + γe^ε)
    return float(round_up_rdp(value, epsilon - math.log(rate), 2.0))


def unamplified_epsilon(e: Array, rate: float) -> Array:
    """log(1 + (e^ε − 1)/γ) for ε ≥ 0 (the inverse of :func:`amplified_epsilon`), finite where it can be.

    Example:
        >>> [round(float(v), 6) for v in unamplified_epsilon(np.array([0.017037, 1000.0]), 0.01)]
        [1.000005, 1004.60517]

    """
    e = np.asarray(e, dtype=np.float64)
    log_rate = math.log(rate)
    with np.errstate(over="ignore", divide="ignore"):
        em1 = np.expm1(np.minimum(e, 700.0))
        direct = np.log1p(em1 / rate)                               # accurate for small ε
        summed = np.log(em1 + rate) - log_rate                      # when em1/γ overflows
        large = e + np.log1p((rate - 1) * np.exp(-e)) - log_rate    # when e^ε overflows
    out = np.where(e >= 700.0, large, np.where(np.isfinite(direct), direct, summed))
    return np.asarray(np.minimum(out, E_MAX))


def log_comb(n: Array, k: Array) -> Array:
    """The log of C(n, k) for real n ≥ k ≥ 0 (by log-gamma)."""
    sp = special()
    return np.asarray(sp.gammaln(n + 1) - sp.gammaln(k + 1) - sp.gammaln(n - k + 1))


def subsampled_rdp_integer(alpha: int, rate: float, rdp: Fn, *, tight: bool) -> float:
    """ε of the Poisson-subsampled mechanism at integer α ≥ 2 (thesis Thm 2.3.4 / Thm 2.3.1).

    Tight: log1p(Σ_{ℓ≥2} w_ℓ·expm1((ℓ−1)ε(ℓ)))/(α−1) with w_ℓ = C(α,ℓ)(1−γ)^{α−ℓ}γ^ℓ, all terms ≥ 0
    (no cancellation, digest §1.4.1). General: log{(1−γ)^{α−1}(αγ−γ+1) + w_2 e^{ε(2)} + 3Σ_{ℓ≥3} w_ℓ
    e^{(ℓ−1)ε(ℓ)}}/(α−1) in plain log-sum-exp.
    """
    sp = special()
    if rate == 1:
        return float(rdp(np.array([float(alpha)]))[0])
    ell = np.arange(2, alpha + 1, dtype=np.float64)
    eps = rdp(ell)
    if not np.all(np.isfinite(eps)):
        return math.inf
    log_rate, log_keep = math.log(rate), math.log1p(-rate)
    log_w = log_comb(np.asarray(float(alpha)), ell) + ell * log_rate + (alpha - ell) * log_keep
    x = (ell - 1) * eps
    # Both bounds are log1p(Σ w_ℓ·c_ℓ)/(α − 1) with every term ≥ 0 (Σ_ℓ w_ℓ = 1 takes the ℓ = 0, 1 terms to the 1):
    # tight c_ℓ = e^{x_ℓ} − 1; general c_2 = e^{x_2} − 1, c_ℓ = 3e^{x_ℓ} − 1 for ℓ ≥ 3 (3e^x − 1 ≥ 2).
    small = x < 30
    log_c = np.empty_like(x)
    log_c[small] = np.log(np.expm1(np.maximum(x[small], 1e-300)))
    log_c[~small] = x[~small] + np.log1p(-np.exp(-x[~small]))
    if not tight and alpha >= 3:
        log_c[1:] = x[1:] + math.log(3) + np.log1p(-np.exp(-x[1:]) / 3)
    log_t = log_w + log_c
    log_s = float(sp.logsumexp(log_t))
    # the float error of log S, in units of roundoff: each term's exponent is off by ulps of the magnitudes it
    # adds (log-gammas, ℓ·|log γ|, (α − ℓ)·|log(1 − γ)|, x_ℓ), weighted by the term's share of the sum
    size = (sp.gammaln(alpha + 1.0) + sp.gammaln(ell + 1) + sp.gammaln(alpha - ell + 1) + ell * abs(log_rate)
            + (alpha - ell) * abs(log_keep) + np.abs(x) + np.abs(log_c) + 4)
    spread = float(np.sum(np.exp(log_t - log_s) * size)) + abs(log_s)
    numerator = float(np.logaddexp(0.0, log_s))
    # log1p(S) moves by S/(1 + S) per unit of relative error in S
    return float(round_up_rdp(numerator / (alpha - 1), spread * -math.expm1(-numerator), float(alpha)))


def subsampled_rdp(rdp: Fn, rate: float, tight: bool, cap: float | None) -> Fn:
    """The subsampled RDP curve at any real α > 1 (integer orders exact, fractional ones interpolated)."""
    cache: dict[int, float] = {}

    def at_int(n: int) -> float:
        if n not in cache:
            cache[n] = subsampled_rdp_integer(n, rate, rdp, tight=tight)
        return cache[n]

    def f(a: Array) -> Array:
        out = np.empty(len(a))
        for i, alpha in enumerate(np.asarray(a, dtype=np.float64)):
            if alpha <= 2:
                v = at_int(2)  # RDP is non-decreasing in α
            elif alpha > MAX_SUBSAMPLED_ORDER:
                # subsampling never increases a Rényi divergence (joint quasi-convexity, van Erven &
                # Harremoës 2014, Thm 13: D_α((1−γ)Q + γP‖Q) ≤ D_α(P‖Q), likewise for the reverse pair)
                v = float(rdp(np.array([alpha]))[0])
            else:
                lo, hi = math.floor(alpha), math.ceil(alpha)
                if lo == hi:
                    v = at_int(lo)
                else:  # the CGF (α−1)ε(α) is convex: linear interpolation bounds it from above
                    w = alpha - lo
                    v = ((1 - w) * (lo - 1) * at_int(lo) + w * (hi - 1) * at_int(hi)) / (alpha - 1)
                    v = float(round_up_rdp(v, 0.0, alpha))   # terms ≥ 0: a few ulps of the value
            out[i] = v if cap is None else min(v, cap)
        return out

    return f


_U = 2.0 ** -53         # unit roundoff of a float64


def hs_subsampled(hs: Fn, hs_rev: Fn, rate: float) -> tuple[Fn, Fn]:
    """Profiles of the remove pair ((1−γ)Q + γP, Q) and its reverse (thesis Thm 3.3.5), for ε ≥ 0.

    **Which pairs, and why** (the seed's statement of Thm 3.3.5(1) names one (P, Q) for both directions, which read
    literally swaps them). A curve's (P, Q) is its *remove* pair: for D = S ∪ {x} and D′ = S, H(M(D)‖M(D′)) ≤
    H(P‖Q), and its add pair is the reverse (Q, P) (``hs_rev``; the thesis: (P, Q) dominates add iff (Q, P) dominates
    removal). Poisson sampling keeps x with probability γ, independently of the sample T of S, so M∘S(D) =
    E_T[(1 − γ)M(T) + γM(T ∪ {x})] and M∘S(D′) = E_T[M(T)]. H is jointly convex (the average over T only lowers
    it), and for each T the two identities below write H_x((1 − γ)Q_T + γP_T‖Q_T) and H_x(Q_T‖(1 − γ)Q_T + γP_T)
    as non-negative multiples of H_y(P_T‖Q_T) and H_y(Q_T‖P_T), with (P_T, Q_T) = (M(T ∪ {x}), M(T)), which the
    pair bounds at every y ≥ 0 (Def. 3.3.1's α ≥ 0). So the remove direction is dominated by ((1 − γ)Q + γP, Q)
    and the add direction (D′ then D) by (Q, (1 − γ)Q + γP) — Thm 3.3.5(1)'s add pair (P′, (1 − γ)P′ + γQ′) with
    the add pair (P′, Q′) = (Q, P), not (P, (1 − γ)P + γQ), which is smaller for an asymmetric pair
    (``tests/adversarial/test_review54g.py``: exact against a binary mechanism). For symmetric pairs (Laplace,
    Gaussian) the two coincide.

    Remove: H_x(A‖Q) = γ·H_{x′}(P‖Q) with x′ = 1 + (x − 1)/γ. Reverse: H_x(Q‖A) = ∫(c·q − xγ·p)₊ = c·H_{xγ/c}(Q‖P)
    with c = 1 − x(1 − γ) (0 when c ≤ 0). Rounded outward, given base profiles accurate to a few ulps: the base is read
    at a log x′ rounded down (a profile is non-increasing; near the end of its support a few ulps of log x′ were
    all of δ: 0 where the exact value is 10⁻¹⁷), the integral ∫(c·q − xγ·p)₊ grows with c and falls with xγ, so c is
    raised and xγ lowered by their float errors (c = −expm1(ε + log(1 − γ)) cancels near the reverse profile's end:
    it was 10⁻⁷ below the exact value at γ = 10⁻⁹), and the products are raised by a few ulps.
    """
    l1 = math.log1p(-rate)

    def rem(e: Array) -> Array:
        e = np.asarray(e, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            un = unamplified_epsilon(e, rate)
            # its float error: a few ulps of the magnitudes it adds (ε, log γ, the result; log1p's argument ≤ 1 u)
            un = np.maximum(un - 8 * _U * (1 + e + abs(math.log(rate)) + un), 0.0)
            return np.asarray(np.clip(rate * hs(un) * (1 + 4 * _U), 0.0, 1.0))

    def rev(e: Array) -> Array:
        e = np.asarray(e, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            s = e + l1                                   # log(x(1 − γ)); c = 1 − e^s
            c = -np.expm1(s)
            # s errs by ulps of e and of log(1 − γ); c by e^s times that, and by its own ulps
            c_up = c + 4 * _U * (np.abs(c) + np.exp(s) * (1 + e + abs(l1)))
            xg = np.exp(e + math.log(rate)) * (1 - 8 * _U)   # xγ, lowered (also for the quotient and its log)
            out = np.zeros_like(e)
            ok = c_up > 0
            out[ok] = c_up[ok] * two_sided(hs_rev, hs, np.log(xg[ok] / c_up[ok])) * (1 + 4 * _U)
        return np.asarray(np.clip(np.nan_to_num(out, nan=1.0), 0.0, 1.0))

    return rem, rev
