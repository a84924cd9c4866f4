"""Replace-one neighbours and sampling without replacement: RDP curves and privacy profiles.

**Replace-one from add/remove (a group of two).** Replacing x by y in D = S ∪ {x} is removing x, then adding y
(or adding y, then removing x), so every bound below composes the mechanism's add/remove curves along that
path:

* RDP, the weak triangle inequality (Mironov 2017, Prop. 11): for p > 1, q = p/(p − 1),
  D_α(P‖R) ≤ (α − 1/p)/(α − 1)·D_{pα}(P‖Q) + D_{q(α−1)+1}(Q‖R) (Hölder's inequality on
  E_R[(P/R)^α] = E_Q[(P/Q)^α (Q/R)^{α−1}]); ε(α) bounds both directions, so ε_r(α) is the least of it over
  p ∈ {1.25, 1.5, 2, 3, 5} (each is valid; p = 2 is the best for large α: 4ρα for ρ-zCDP curves).
* Privacy profile (group privacy of two steps): P_D(A) ≤ e^{ε₁}P_S(A) + δ_rem(ε₁) and P_S(A) ≤ e^{ε₂}P_D'(A) +
  δ_add(ε₂) give δ_r(ε₁ + ε₂) ≤ δ_rem(ε₁) + e^{ε₁}δ_add(ε₂), and through S ∪ {x, y} the same with the
  directions swapped; the least over ε₁ = tε, t ∈ {0, 1/16, …, 1}, of both. The relation is symmetric, so
  the bound holds for both orders of every pair (one profile, ``hs_rev is hs``).

**Sampling without replacement** (a fixed-size batch of m of the n units, γ = m/n; replace-one neighbours,
n public). Condition on whether the replaced unit is in the batch: the output is (1 − γ)μ₀ + γμ₁ against
(1 − γ)μ₀ + γμ₁' where μ₀, μ₁, μ₁' are, after coupling the rest of the batch, mixtures of the base mechanism
on pairwise replace-one neighbours.

* RDP at integer α ≥ 2: Wang, Balle & Kasiviswanathan (2019, "Subsampled Rényi differential privacy",
  Thm 9), for a base with replace-one RDP ε(·) and pure bound ε∞ (∞ if none)::

      (α−1)ε'(α) ≤ log(1 + γ²C(α,2)·min{4(e^{ε(2)} − 1), e^{ε(2)}·min{2, (e^{ε∞} − 1)²}}
                     + Σ_{j=3}^{α} γ^j C(α,j)·e^{(j−1)ε(j)}·min{2, (e^{ε∞} − 1)^j})

  and for the Gaussian the sharper term of their Thm 27 (arXiv v4; as dp_accounting computes it), the j-th
  term's factor being the least of the above and 4·√(χ_{2⌊j/2⌋}·χ_{2⌈j/2⌉}), χ_k = E_Q[(L − 1)^k] for the
  Gaussian pair's likelihood ratio L (k even, up to 256). χ_k is an alternating binomial sum of
  e^{μ²i(i−1)/2}, computed in decimal arithmetic with a rounding-error bound added (an upper bound).
  Fractional orders interpolate the cumulant (α − 1)ε'(α) between integers (convex in α: WBK19 Cor. 10);
  α < 2 takes the α = 2 value. Also ε'(α) ≤ ε(α) (joint convexity: coupled batches are equal or
  neighbours) and ≤ log(1 + γ(e^{ε∞} − 1)).
* Privacy profile: δ'(ε') = γ·δ_r(log(1 + (e^{ε'} − 1)/γ)) (Balle, Barthe & Gaboardi 2018, advanced joint
  convexity: H_{e^{ε'}}((1−γ)μ₀ + γμ₁‖(1−γ)μ₀ + γμ₁') ≤ γ·max(H_{e^ε}(μ₁‖μ₀), H_{e^ε}(μ₁‖μ₁'))), for both orders.

Example:
    >>> import numpy as np
    >>> f = wor_rdp(lambda a: a / 2.0, rate=0.01, eps_inf=None, moments=gaussian_moments(1.0))
    >>> float(f(np.array([2.0]))[0])                 # dp_accounting: 0.0005435086381094331
    0.0005435086381094331

"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, localcontext

import numpy as np

from dpframe.accounting.numerics.common import Array, Fn, special
from dpframe.accounting.numerics.subsampling import MAX_SUBSAMPLED_ORDER, amplified_epsilon, unamplified_epsilon
from dpframe.sealed import frozen_array, plain_cache

#: The orders p of the weak triangle inequality (each gives a valid bound; the least is taken).
TRIANGLE_P = (1.25, 1.5, 2.0, 3.0, 5.0)
#: The splits ε₁ = tε of the group-privacy profile.
SPLITS = frozen_array(np.linspace(0.0, 1.0, 17))
#: Largest moment order χ_k computed for the Gaussian's sharper term (dp_accounting's is 256 too).
MAX_MOMENT = 256
_MAX_DIGITS = 400       # decimal precision at most (beyond: the bound stays valid, a little looser)


# ----------------------------------------------------------------------------------- replace-one
def rdp_group_of_two(rdp: Fn) -> Fn:
    """Replace-one RDP from an add/remove RDP curve (the weak triangle inequality; least over :data:`TRIANGLE_P`)."""
    def f(a: Array) -> Array:
        a = np.asarray(a, dtype=np.float64)
        out = np.full(a.shape, math.inf)
        with np.errstate(all="ignore"):
            for p in TRIANGLE_P:
                q = p / (p - 1)
                out = np.fmin(out, (a - 1 / p) / (a - 1) * rdp(p * a) + rdp(q * (a - 1) + 1))
        return out

    return f


def hs_group_of_two(hs: Fn, hs_rev: Fn) -> Fn:
    """Replace-one privacy profile from the two add/remove profiles (group privacy along both paths)."""
    def f(e: Array) -> Array:
        e = np.asarray(e, dtype=np.float64)
        out = np.ones(e.shape)
        with np.errstate(all="ignore"):
            for t in SPLITS:
                first, second = t * e, (1 - t) * e
                x = np.exp(first)
                out = np.fmin(out, np.fmin(hs(first) + x * hs_rev(second), hs_rev(first) + x * hs(second)))
        return np.clip(out, 0.0, 1.0)

    return f


# -------------------------------------------------------------------------------- without replacement
def hs_without_replacement(hs: Fn, rate: float) -> Fn:
    """The profile of a fixed-size batch of rate γ = m/n from the base's replace-one profile (BBG18)."""
    return lambda e: np.clip(rate * hs(unamplified_epsilon(e, rate)), 0.0, 1.0)


def gaussian_moments(mu: float) -> Callable[[int], float]:
    """K ↦ log of an upper bound of χ_k = E_Q[(L − 1)^k], L = e^{μZ − μ²/2}, for even 2 ≤ k ≤ :data:`MAX_MOMENT`.

    χ_k = Σ_i C(k, i)(−1)^{k−i}e^{μ²i(i−1)/2}: summed in decimal arithmetic at P digits, where every term has a
    relative error of at most (2a_i + 3)u (a_i = μ²i(i−1)/2, u = 10^{1−P}: the rounded exponent, the exponential
    and the product) and every addition at most u times the sum S_k of the terms' sizes, so the error is at
    most S_k·u·(2a_k + k + 4), which is added; P grows until that is below 10⁻⁹ of every sum (all k at once).

    Example:
        >>> f = gaussian_moments(1.0)
        >>> abs(math.exp(f(2)) / math.expm1(1.0) - 1) < 1e-9                # χ₂ = e^{μ²} − 1
        True

    """
    return lambda k: _chis(mu)[k // 2 - 1]


@plain_cache(maxsize=64)
def _chis(mu: float) -> tuple[float, ...]:
    """Log upper bounds of χ_2, χ_4, …, χ_{MAX_MOMENT} (see :func:`gaussian_moments`)."""
    digits = 40
    while True:
        with localcontext(Context(prec=digits, Emax=MAX_EMAX, Emin=MIN_EMIN)):
            m2 = Decimal(mu) * Decimal(mu)
            exps = [(m2 * (i * (i - 1) // 2)).exp() for i in range(MAX_MOMENT + 1)]
            u = Decimal(10) ** (1 - digits)
            out, worst = [], Decimal(0)
            for k in range(2, MAX_MOMENT + 1, 2):
                total, size, coef = Decimal(0), Decimal(0), 1
                for i in range(k + 1):
                    term = coef * exps[i]                             # C(k, i) e^{a_i}
                    total += term if (k - i) % 2 == 0 else -term
                    size += term
                    coef = coef * (k - i) // (i + 1)
                err = size * u * (2 * m2 * (k * (k - 1) // 2) + k + 4)
                worst = max(worst, err / total if total > 0 else Decimal(10) ** digits)
                v = float((abs(total) + err).ln())
                out.append(v + 1e-12 * (1 + abs(v)))
            if worst <= Decimal("1e-9") or digits >= _MAX_DIGITS:
                return tuple(out)
            digits = min(_MAX_DIGITS, digits + int(min(worst.log10(), Decimal(digits))) + 20)


def wor_rdp(rdp: Fn, rate: float, eps_inf: float | None, moments: Callable[[int], float] | None) -> Fn:
    """ε'(α) of a base with replace-one RDP ``rdp`` on a fixed-size batch of rate γ (see the module docstring).

    ``moments``: the Gaussian's log χ_k bounds (:func:`gaussian_moments`) for the sharper Thm 27 term, or None;
    it receives public values only (moment orders k), as ``rdp`` does (orders α).
    """
    log_em1_inf = math.inf if eps_inf is None else _log_expm1(eps_inf)
    cap = math.inf if eps_inf is None else amplified_epsilon(eps_inf, rate)
    cgf: dict[int, float] = {}
    base: list[float] = []                  # ε(j) for j = 2, 3, …

    def base_upto(n: int) -> Array:
        if len(base) < n - 1:
            base.extend(float(v) for v in rdp(np.arange(len(base) + 2, n + 1, dtype=np.float64)))
        return np.array(base[: n - 1])

    def at_int(n: int) -> float:
        if n not in cgf:
            cgf[n] = _wor_cgf(n, rate, base_upto(n), log_em1_inf, moments)
        return cgf[n]

    def f(a: Array) -> Array:
        a = np.asarray(a, dtype=np.float64)
        out = np.empty(len(a))
        own = rdp(a)
        for i, alpha in enumerate(a):
            if alpha > MAX_SUBSAMPLED_ORDER:
                v = math.inf
            elif alpha <= 2:
                v = at_int(2)
            else:
                lo, hi = math.floor(alpha), math.ceil(alpha)
                w = alpha - lo
                v = ((1 - w) * at_int(lo) + w * at_int(hi)) / (alpha - 1) if lo != hi else at_int(lo) / (lo - 1)
            out[i] = min(v, float(own[i]), cap)
        return out

    return f


def _log_expm1(x: float) -> float:
    """log(e^x − 1) for x ≥ 0 (−∞ at 0), without overflow."""
    if x <= 0:
        return -math.inf
    return x + math.log1p(-math.exp(-x)) if x > 30 else math.log(math.expm1(x))


def _wor_cgf(n: int, rate: float, eps: Array, log_em1_inf: float, moments: Callable[[int], float] | None) -> float:
    """(n − 1)ε'(n) by WBK19 Thm 9 (Thm 27's term where ``moments`` is given); ``eps``: ε(2), …, ε(n)."""
    sp = special()
    if not np.all(np.isfinite(eps)):
        return math.inf
    j = np.arange(2, n + 1, dtype=np.float64)
    log_coef = sp.gammaln(n + 1) - sp.gammaln(j + 1) - sp.gammaln(n - j + 1) + j * math.log(rate)
    factor = (j - 1) * eps + np.minimum(math.log(2), j * log_em1_inf)       # e^{(j−1)ε(j)} min{2, (e^{ε∞} − 1)^j}
    factor[0] = min(math.log(4) + _log_expm1(float(eps[0])),
                    float(eps[0]) + min(math.log(2), 2 * log_em1_inf))
    if moments is not None:
        for idx in range(1, min(n, MAX_MOMENT) - 1):                          # j = 3 … min(n, 256)
            k = idx + 2
            sharp = math.log(4) + 0.5 * (moments(2 * (k // 2)) + moments(2 * ((k + 1) // 2)))
            factor[idx] = min(factor[idx], sharp)
    return float(np.logaddexp(0.0, sp.logsumexp(log_coef + factor)))
