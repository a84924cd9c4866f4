"""Hockey-stick profiles δ(ε) = H_{e^ε}(P‖Q) of dominating pairs (Zhu, Dong & Wang 2022; thesis Def. 3.3.1).

Closed forms (sensitivity-normalised; digest ``research/004_modern_accounting.md`` §2.3–2.4), each for ε ≥ 0:

* Gaussian with μ = Δ/σ: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (exact).
* Laplace with ε₀ = Δ/b: δ(ε) = 1 − e^{(ε−ε₀)/2} on [0, ε₀] (exact).
* A discrete privacy-loss distribution: δ(ε) = Σ p_i (1 − e^{ε − L_i})_+.
* ε-bounded range: δ(ε') = (e^{ε/2} − e^{ε'/2})²/(e^ε − 1) for 0 ≤ ε' ≤ ε.
* Discrete Laplace(t) shifted by an integer Δ (exact, summed in closed form).
* Discrete Gaussian N_Z(0, σ²) shifted by an integer Δ (exact, from a table of its prefix sums; for any σ, the
  Gaussian profile plus a bound on the lattice sum's error, :func:`hs_discrete_gaussian_bound`).

A profile for ε < 0 is the reverse pair's (:func:`two_sided`), and any RDP curve gives a profile bound
(:func:`hs_from_rdp`).

Example:
    >>> import numpy as np
    >>> round(float(hs_gaussian(1.0)(np.array([0.276617]))[0]), 4)
    0.3
    >>> round(float(hs_laplace(1.0)(np.array([0.5]))[0]), 6)          # 1 − e^{(0.5 − 1)/2}
    0.221199

"""

from __future__ import annotations

import math

import numpy as np

from dpframe.accounting.numerics.common import E_MAX, Array, Fn, special
from dpframe.accounting.numerics.envelope import evaluate_envelope, lower_envelope

_U = 2.0 ** -53      # unit roundoff of a float64


def hs_gaussian(mu: float) -> Fn:
    """The Gaussian mechanism with μ = Δ/σ: Φ(z₁) − e^ε Φ(z₂), rounded up (never below the exact profile at ``mu``).

    The two terms nearly cancel in the tails (δ 10⁻¹⁵ from terms 10⁻¹²), where their float errors were 3·10⁻¹² of δ
    below it (against 150-digit references). Each term's error is bounded and added: z = −ε/μ ± μ/2 errs by ulps of
    |ε/μ| + μ/2, which moves Φ(z) by at most (|z| + 1)·Φ(z) per unit of z (Mills' ratio), and exp/log_ndtr by ulps of
    their logs.
    """
    def f(e: Array) -> Array:
        sp = special()
        e = np.minimum(np.asarray(e, dtype=np.float64), E_MAX)
        with np.errstate(over="ignore", invalid="ignore"):
            z1, z2 = -e / mu + mu / 2, -e / mu - mu / 2
            l1, l2 = sp.log_ndtr(z1), e + sp.log_ndtr(z2)
            a, b = np.exp(l1), np.exp(l2)
            shift = 2 * (np.abs(e) / mu + mu / 2)                  # ulps of z (a few roundings)
            err_a = (np.abs(z1) + 1) * (shift + np.abs(z1)) + 4 * (1 + np.abs(l1))
            err_b = (np.abs(z2) + 1) * (shift + np.abs(z2)) + 4 * (1 + np.abs(e) + np.abs(l2 - e))
            margin = np.where(a > 0, err_a * a, 0.0) + np.where(b > 0, err_b * b, 0.0)   # (0·∞ is no error)
            out = a - b + 2 * _U * margin
        return np.asarray(np.clip(np.nan_to_num(out, nan=1.0), 0.0, 1.0))

    return f


def hs_laplace(eps: float) -> Fn:
    """Laplace with ε = Δ/b: δ(e) = 1 − e^{(e−ε)/2} on [0, ε], 0 beyond."""
    return lambda e: np.where(e >= eps, 0.0, -np.expm1(np.minimum(e - eps, 0.0) / 2))


def hs_atoms(losses: Array, probs: Array) -> Fn:
    """δ(ε) = Σ p_i (1 − e^{ε − L_i})_+ for a discrete privacy-loss distribution."""
    def f(e: Array) -> Array:
        e = np.asarray(e, dtype=np.float64)
        terms = probs[None, :] * -np.expm1(np.minimum(e[:, None] - losses[None, :], 0.0))
        return np.asarray(np.clip(terms.sum(axis=1), 0.0, 1.0))

    return f


def hs_bounded_range(eps: float) -> Fn:
    """ε-bounded range: (e^{ε/2} − e^{e/2})²/(e^ε − 1) = (1 − e^{(e−ε)/2})²/(1 − e^{−ε}), no overflow for any ε."""
    return lambda e: np.where(e >= eps, 0.0, np.expm1((np.minimum(e, eps) - eps) / 2) ** 2 / -math.expm1(-eps))


def hs_discrete_laplace(t: float, d: int) -> Fn:
    """Exact profile of discrete Laplace(t) shifted by integer Δ (P-loss atoms, summed in closed form)."""
    norm = 1 + math.exp(-1 / t)

    def f(e: Array) -> Array:
        e = np.minimum(np.asarray(e, dtype=np.float64), E_MAX)
        top = (1 / norm) * -np.expm1(np.minimum(e - d / t, 0.0))          # atom at +Δ/t (k ≤ 0)
        # middle atoms k = 1..K with loss (Δ − 2k)/t > ε and P-mass c·e^{−k/t}, c = (1 − e^{−1/t})/norm:
        # Σ_k c e^{−k/t}(1 − e^{ε − (Δ−2k)/t}) = (1 − e^{−K/t})/norm · (e^{−1/t} − e^{ε − (Δ−K)/t}),
        # both exponents ≤ 0 on the atoms used, so nothing overflows for a tiny t
        kmax = np.clip(np.ceil((d - e * t) / 2) - 1, 0, d - 1)
        with np.errstate(over="ignore", invalid="ignore"):
            mid = -np.expm1(-kmax / t) / norm * (math.exp(-1 / t) - np.exp(np.minimum(e - (d - kmax) / t, 0.0)))
        mid = np.where(kmax > 0, mid, 0.0)
        return np.clip(top + np.maximum(mid, 0.0), 0.0, 1.0)

    return f


#: Largest σ of :func:`hs_discrete_gaussian` (its pmf is tabulated over ±38σ; beyond, use an RDP-derived profile).
MAX_DISCRETE_GAUSSIAN_SIGMA = 10_000.0


def hs_discrete_gaussian(sigma: float, d: int) -> Fn:
    """Exact profile of the discrete Gaussian N_Z(0, σ²) against N_Z(Δ, σ²), integer Δ ≥ 1, σ ≤ 10⁴.

    The loss at k is L(k) = Δ(Δ − 2k)/(2σ²), decreasing in k, so (Canonne, Kamath & Steinke 2020, Thm 7)
    δ(ε) = Σ_{k ≤ K} p(k)(1 − e^{ε − L(k)}) = S₁(K) − e^ε·S₂(K), K the largest k with L(k) > ε, where
    S₁(m) = P[X ≤ m] and S₂(m) = P[X ≤ m − Δ] are prefix sums of the pmf over k ∈ [−W, W], W = ⌈38σ⌉ + Δ
    (the mass beyond is below e^{−722}: zero in floats). Prefix sums of positive terms are accurate to
    (number of terms)·u relative, so that much of S₁ + e^ε S₂ is added back (an upper bound, never under).

    Example:
        >>> import numpy as np
        >>> round(float(hs_discrete_gaussian(1.0, 1)(np.array([0.0]))[0]), 6)   # total variation: P[X = 0]
        0.398942

    """
    width = math.ceil(38 * sigma) + d
    k = np.arange(-width, width + 1, dtype=np.float64)
    log_p = -k * k / (2 * sigma * sigma)
    pmf = np.exp(log_p - float(special().logsumexp(log_p)))
    s1 = np.cumsum(pmf)                                            # s1[i] = P[X ≤ k_i]
    u = np.finfo(np.float64).eps

    def f(e: Array) -> Array:
        e = np.minimum(np.asarray(e, dtype=np.float64), E_MAX)
        top = np.ceil(d / 2 - e * sigma * sigma / d) - 1           # K: L(k) > ε ⟺ k < Δ/2 − εσ²/Δ
        i = np.clip(top + width, -1, 2 * width).astype(np.int64)   # index of K in the table (−1: below it)
        j = i - d                                                   # index of K − Δ
        a = np.where(i >= 0, s1[np.maximum(i, 0)], 0.0)
        b = np.where(j >= 0, s1[np.maximum(j, 0)], 0.0)
        with np.errstate(over="ignore", invalid="ignore"):
            eb = np.where(b > 0, np.exp(np.minimum(e, 700.0)) * b, 0.0)
            out = a - eb + (np.maximum(i, 0) + 4) * u * (a + eb)
        return np.asarray(np.clip(np.nan_to_num(out, nan=1.0), 0.0, 1.0))

    return f


def hs_discrete_gaussian_bound(sigma: float, d: int) -> Fn:
    """An upper bound on the profile of N_Z(0, σ²) against N_Z(Δ, σ²), integer Δ ≥ 1, any σ (no table).

    With f(x) = e^{−x²/(2σ²)}, Z = Σ_{x∈ℤ} f(x) and c = Δ/2 − εσ²/Δ (the loss Δ(Δ − 2x)/(2σ²) is ε at x = c), the
    exact profile is δ(ε) = Σ_x h(x)/Z with h = (f − e^ε f(· − Δ))₊, which is f − e^ε f(· − Δ) on (−∞, c] and 0
    beyond. Two facts bound it by the continuous Gaussian profile δ_c (μ = Δ/σ) plus a term of order 1/σ²:

    * Z = σ√(2π)·Σ_k e^{−2π²σ²k²} ≥ σ√(2π) (Poisson summation; every term is positive);
    * |Σ_x h(x) − ∫h| ≤ V(h′)/12, V the total variation of h′ (Poisson summation again: integrating ĥ(k) by parts
      twice, |ĥ(k)| ≤ V(h′)/(4π²k²), and Σ_{k≠0} 1/(4π²k²) = 1/12).

    ∫h/(σ√(2π)) = δ_c(ε) = Φ(z) − e^ε Φ(z − μ) with z = c/σ = μ/2 − ε/μ, and by the triangle inequality
    V(h′) ≤ V_{(−∞,c]}(f′) + e^ε V_{(−∞,c−Δ]}(f′) + |h′(c)| (the last: the jump of h′ to 0 at c). With f′ rising to
    e^{−1/2}/σ at −σ, falling to −e^{−1/2}/σ at σ and rising to 0, V_{(−∞,σz]}(f′)/(σ√(2π)) = W(z)/σ², where
    W(z) = |z|φ(z) for z ≤ −1, 2φ(1) + zφ(z) on [−1, 1], 4φ(1) − zφ(z) beyond; e^ε φ(z − μ) = φ(z) (the loss is ε
    at c), so the second term is |z − μ|φ(z)/σ² when z − μ ≤ −1 (else e^ε ≤ e^{1/2} and it is computed as is),
    and |h′(c)| = f(c)Δ/σ² gives μφ(z)/σ². So

        δ(ε) ≤ δ_c(ε) + [W(z) + e^ε W(z − μ) + μφ(z)]/(12σ²),

    relatively within about z²/(12σ²) of the exact profile in the tails. μ is rounded up (δ_c grows with μ) and a
    float margin of the two Φ terms is added. The result need not be convex: the PLD takes its convex envelope.

    Example:
        >>> import numpy as np
        >>> e = np.array([0.0, 0.5, 2.0])
        >>> exact, bound = hs_discrete_gaussian(3000.0, 1000)(e), hs_discrete_gaussian_bound(3000.0, 1000)(e)
        >>> bool(np.all(bound >= exact)), float(np.max((bound - exact) / exact)) < 1e-4
        (True, True)

    """
    mu = d / sigma * (1 + 4 * _U)
    phi1 = math.exp(-0.5) / math.sqrt(2 * math.pi)
    inv = 1 / (12 * sigma * sigma) * (1 + 4 * _U)

    def w(z: Array, phi: Array) -> Array:
        return np.asarray(np.where(z <= -1, -z * phi, np.where(z <= 1, 2 * phi1 + z * phi, 4 * phi1 - z * phi)))

    def f(e: Array) -> Array:
        sp = special()
        e = np.minimum(np.asarray(e, dtype=np.float64), E_MAX)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            z = -e / mu + mu / 2
            zp = z - mu
            a = np.exp(sp.log_ndtr(z))
            b = np.exp(e + sp.log_ndtr(zp))
            phi = np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
            shifted = np.where(zp <= -1, -zp * phi, np.exp(np.minimum(e, 1.0)) * w(zp, np.exp(-zp * zp / 2)
                                                                                  / math.sqrt(2 * math.pi)))
            lattice = (w(z, phi) + shifted + mu * phi) * inv * (1 + 16 * _U)
            out = a - b + lattice + 16 * _U * (1 + e) * (a + b)
            # Φ(z) below 10⁻²⁹⁰ (z < −36): the float terms are subnormal; δ ≤ Φ(z) + the lattice term ≤ 10⁻²⁵⁰ there,
            # as φ(z) ≤ (|z| + 1)Φ(z) and (|z| + 1)(2|z| + 2μ)/(12σ²) < 10⁴⁰ for σ ≥ 10⁻³, Δ ≤ 2⁵³ (a smaller σ
            # with Δ > 10⁴ has μ > 10⁷ and z ≥ μ/2 − 700/μ > 0: never here)
            out = np.where(a < 1e-290, 1e-250, out)
        return np.asarray(np.clip(np.nan_to_num(out, nan=1.0), 0.0, 1.0))

    return f


def two_sided(hs: Fn, hs_rev: Fn, e: Array) -> Array:
    """H_{e^ε}(P‖Q) for every real ε: for ε < 0, H_x(P‖Q) = 1 − x + x·H_{1/x}(Q‖P)."""
    e = np.asarray(e, dtype=np.float64)
    neg = e < 0
    out = np.empty_like(e)
    out[~neg] = hs(e[~neg])
    x = np.exp(e[neg])
    out[neg] = -np.expm1(e[neg]) + x * hs_rev(-e[neg])
    return out


def hs_from_rdp(rdp: Fn, orders: Array, fine: int = 8) -> Fn:
    """A privacy-profile bound from an RDP curve: min over orders of the improved conversion (≤ 1).

    At order α, log δ(ε) = (α−1)(ε(α) + log(1 − 1/α)) − log α − (α−1)ε is a line in ε, so the minimum
    over orders is the lower envelope of lines (computed once, evaluated by binary search). The orders
    are ``orders`` refined by ``fine`` points between neighbours (the curve is evaluated once on them).

    Example:
        >>> import numpy as np
        >>> f = hs_from_rdp(lambda a: a / 2.0, np.array([2.0, 4.0, 8.0]))
        >>> bool(0 < f(np.array([3.0]))[0] < 0.1)
        True

    """
    grid = np.unique(np.concatenate([np.linspace(a, b, fine + 1) for a, b in zip(orders[:-1], orders[1:])]))
    with np.errstate(all="ignore"):
        intercept = (grid - 1) * (np.asarray(rdp(grid), dtype=np.float64) + np.log1p(-1 / grid)) - np.log(grid)
    ok = np.isfinite(intercept)
    if not ok.any():
        return lambda e: np.ones(np.shape(e))
    env = lower_envelope(1 - grid[ok], intercept[ok])

    def f(e: Array) -> Array:
        with np.errstate(over="ignore"):
            return np.asarray(np.minimum(1.0, np.exp(evaluate_envelope(env, np.asarray(e, dtype=np.float64)))))

    return f


def hs_mixture(hs: Fn, delta0: float) -> Fn:
    """The profile of a mechanism that is ``hs`` except with probability δ0: δ0 + (1 − δ0)·hs, rounded up.

    1 − δ0, the product and the sum of non-negative terms each round by ≤ U relative: 4U and an ulp cover them.

    Example:
        >>> from fractions import Fraction
        >>> v = float(hs_mixture(lambda e: np.full(len(e), 0.1), 0.3)(np.array([0.0]))[0])
        >>> Fraction(v) >= Fraction(0.3) + (1 - Fraction(0.3)) * Fraction(0.1)
        True

    """
    def f(e: Array) -> Array:
        h = np.asarray(hs(e), dtype=np.float64)
        v = delta0 + (1 - delta0) * h
        up = np.minimum(np.nextafter(v + 4 * _U * v, np.inf), 1.0)
        return np.asarray(np.where(h == 0, delta0, up))          # hs = 0: exactly δ0 (a point mass's δ stays exact)

    return f
