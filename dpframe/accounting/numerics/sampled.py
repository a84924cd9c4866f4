"""The Rényi DP of the Poisson-subsampled Gaussian and Laplace mechanisms at any real order α > 1, exactly.

Both mechanisms have a *symmetric* dominating pair (P, Q): with ℓ = log dP/dQ and ν its law under Q, the
law of ℓ under P is that of −ℓ under Q, i.e. ν(−dℓ) = e^ℓ ν(dℓ). On a Poisson sample of rate γ the remove
pair is ((1−γ)Q + γP, Q) and ε(α) = log A_α/(α − 1) with A_α = E_Q[(1 − γ + γe^ℓ)^α].

**The add pair is dominated** (for every real α ≥ 1; Mironov, Talwar & Zhang 2019, §3.3 for the Gaussian):
the add pair's B_α = E_Q[(1 − γ + γe^ℓ)^{1−α}] ≤ A_α. Fold ν's negative half onto its positive half with
ν(−dℓ) = e^ℓ ν(dℓ): A_α − B_α = ∫_{ℓ>0} F(e^ℓ) ν(dℓ) with, for t ≥ 1, a = 1 − γ + γt, b = (1 − γ)t + γ,
F(t) = a^α + t^{1−α}b^α − a^{1−α} − t^α b^{1−α} = G(a, 1) − G(t, b), G(x, y) = (xy)^{1−α}(x^{2α−1} − y^{2α−1}).
Both pairs have the gap x − y = d = γ(t − 1); writing x = y·e^s, G = d·sinh((2α − 1)s/2)/sinh(s/2), which is
non-decreasing in s (β·tanh(s/2) ≥ tanh(βs/2) for β = 2α − 1 ≥ 1, tanh being concave on [0, ∞)), and at a
fixed gap s = log(1 + d/y) decreases as y grows; y = 1 ≤ b, so G(a, 1) ≥ G(t, b) and F ≥ 0.
(``tests/accounting/test_exact_rdp.py`` also checks B_α ≤ A_α by quadrature.)

**The series.** Split the line at ℓ₀ = log((1 − γ)/γ), where γe^ℓ = 1 − γ, and expand (1 + x)^α binomially in
x = γe^ℓ/(1−γ) ≤ 1 below ℓ₀ and in x = (1−γ)/(γe^ℓ) ≤ 1 above (the fractional-α series of MTZ19, as
dp_accounting computes it for the Gaussian)::

    A_α = Σ_{i≥0} C(α, i) [(1−γ)^{α−i} γ^i M₋(i) + γ^{α−i} (1−γ)^i M₊(α − i)],
    M₋(s) = ∫_{ℓ≤ℓ₀} e^{sℓ} ν(dℓ),   M₊(s) = ∫_{ℓ>ℓ₀} e^{sℓ} ν(dℓ).

* Gaussian (μ = Δ/σ): ν = N(−μ²/2, μ²), M₋(s) = e^{μ²(s²−s)/2}Φ(z₀ − sμ), M₊(s) = e^{μ²(s²−s)/2}Φ(sμ − z₀),
  z₀ = ℓ₀/μ + μ/2.
* Laplace (ε = Δ/b): ν has atoms ½ at −ε and ½e^{−ε} at +ε, and the density ¼e^{−(ℓ+ε)/2} on (−ε, ε). The
  atoms' terms ½(1 − γ + γe^{−ε})^α and ½e^{−ε}(1 − γ + γe^ε)^α are added exactly; the series runs over the
  density, M±(s) = ¼e^{−ε/2}∫e^{(s−½)ℓ}dℓ over the part of (−ε, ε) on that side of ℓ₀ (closed form).

**Error bound.** For i > α the coefficients C(α, i) alternate in sign and |C(α, i+1)|/|C(α, i)| =
(i − α)/(i + 1) < 1, so at every ℓ the pointwise series is alternating with decreasing terms from
i = ⌊α⌋ + 1 on (x ≤ 1), and its remainder after term N has the sign of term N + 1 and at most its size
(Leibniz). Integrating against ν keeps both facts for the integrated terms. The sum is therefore stopped
once a term is below 10⁻⁹ of log A_α (that is, of (α − 1)ε(α)), and the next term's size plus a
floating-point margin is added: the result is an upper bound of ε(α), within about 10⁻⁸ of it (relative).
For integer α the series is finite (the exact binomial sum).

Example:
    >>> import numpy as np
    >>> f = sampled_gaussian_rdp(mu=1 / 2.5, rate=0.01)
    >>> [round(float(v), 9) for v in f(np.array([1.5, 2.0]))]     # mpmath quadrature: 1.3001418e-05, ...
    [1.3001e-05, 1.7351e-05]
    >>> g = sampled_laplace_rdp(eps=1.0, rate=0.1)
    >>> [round(float(v), 8) for v in g(np.array([1.5, 2.0]))]     # mpmath quadrature: 0.0063174785, 0.0085364570
    [0.00631748, 0.00853646]

"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from dpframe.accounting.numerics.common import Array, Fn, special

#: Terms summed at most; the bound then adds the size of the next one (valid, a little looser).
MAX_TERMS = 1 << 14
_FIRST_BLOCK = 16       # tail terms computed at first (the series usually converges within a few); blocks grow ×4
_RELATIVE = 1e-9         # stop once a tail term is below this fraction of log A (≥ 10⁻¹⁶ of A)
_ULPS = 2.3e-16          # one rounding (a little over the unit roundoff of a float)

#: (M₋, M₊) in log space: s ↦ log ∫ e^{sℓ} dν below / above ℓ₀ (−∞ where that side is empty).
Moments = tuple[Callable[[Array], Array], Callable[[Array], Array]]


def sampled_gaussian_rdp(mu: float, rate: float) -> Fn:
    """ε(α) of the Gaussian mechanism with Δ/σ = ``mu`` on a Poisson sample of rate ``rate`` in (0, 1).

    Orders ≤ 1 and α = ∞ are +∞ (the caller keeps its other bound there).
    """
    z0 = (math.log1p(-rate) - math.log(rate)) / mu + mu / 2         # γ·L(z₀) = 1 − γ

    def below(s: Array) -> Array:
        return np.asarray(mu * mu * (s * s - s) / 2 + special().log_ndtr(z0 - s * mu))

    def above(s: Array) -> Array:
        return np.asarray(mu * mu * (s * s - s) / 2 + special().log_ndtr(s * mu - z0))

    return _curve(rate, (below, above), lambda alpha: [], lambda alpha: mu * mu * alpha * alpha / 2)


def sampled_laplace_rdp(eps: float, rate: float) -> Fn:
    """ε(α) of the Laplace mechanism with Δ/b = ``eps`` on a Poisson sample of rate ``rate`` in (0, 1).

    Orders ≤ 1 and α = ∞ are +∞ (the caller keeps its other bound there).
    """
    l0 = math.log1p(-rate) - math.log(rate)
    lo_hi = (-eps, min(eps, l0))                   # the density's support on each side of ℓ₀
    hi_lo = (max(-eps, l0), eps)
    scale = math.log(0.25) - eps / 2

    def below(s: Array) -> Array:
        return scale + _log_integral_exp(s - 0.5, *lo_hi)

    def above(s: Array) -> Array:
        return scale + _log_integral_exp(s - 0.5, *hi_lo)

    lower_atom = math.log1p(rate * math.expm1(-eps))                       # log(1 − γ + γe^{−ε})
    upper_atom = float(np.logaddexp(math.log1p(-rate), math.log(rate) + eps))  # log(1 − γ + γe^{ε})

    def atoms(alpha: float) -> list[float]:
        return [alpha * lower_atom - math.log(2), alpha * upper_atom - eps - math.log(2)]

    return _curve(rate, (below, above), atoms, lambda alpha: (alpha + 1) * eps)


def _log_integral_exp(c: Array, lo: float, hi: float) -> Array:
    """The log of ∫_lo^hi e^{cℓ} dℓ for each c (−∞ when lo ≥ hi), without cancellation."""
    c = np.asarray(c, dtype=np.float64)
    if not lo < hi:
        return np.full(c.shape, -math.inf)
    top = np.maximum(c * hi, c * lo)
    w = np.abs(c) * (hi - lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        width = np.where(c == 0, hi - lo, -np.expm1(-w) / np.where(c == 0, 1.0, np.abs(c)))
    return np.asarray(top + np.log(width))


def _curve(rate: float, moments: Moments, atoms: Callable[[float], list[float]],
           scale: Callable[[float], float]) -> Fn:
    """The RDP curve from the series.

    ``atoms(α)``: the logs of exact extra terms of A_α; ``scale(α)``: the size of the moments' exponents (for the
    floating-point margin).
    """
    cache: dict[float, float] = {}

    def at(alpha: float) -> float:
        if alpha not in cache:
            if not alpha > 1 or not math.isfinite(alpha):
                cache[alpha] = math.inf
            else:
                with np.errstate(all="ignore"):
                    v = _log_a(alpha, rate, moments, atoms(alpha), scale(alpha)) / (alpha - 1)
                cache[alpha] = max(v, 0.0) if not math.isnan(v) else math.inf   # NaN (overflow): no bound
        return cache[alpha]

    def f(a: Array) -> Array:
        return np.array([at(float(alpha)) for alpha in np.asarray(a, dtype=np.float64)])

    return f


def _terms(alpha: float, rate: float, moments: Moments, i: Array) -> tuple[Array, Array]:
    """(log |term i|, sign of term i) of the series, both halves of the line together."""
    sp = special()
    lq, l1q = math.log(rate), math.log1p(-rate)
    below, above = moments
    j = alpha - i
    with np.errstate(divide="ignore", invalid="ignore"):
        log_coef = sp.gammaln(alpha + 1) - sp.gammaln(i + 1) - sp.gammaln(j + 1)
        sign = np.where(np.isfinite(log_coef), sp.gammasgn(j + 1), 0.0)
        low = j * l1q + i * lq + below(i)
        high = j * lq + i * l1q + above(j)
        return log_coef + np.logaddexp(low, high), sign


def _log_a(alpha: float, rate: float, moments: Moments, atoms: list[float], scale: float) -> float:
    """An upper bound of log A_α (see the module docstring)."""
    sp = special()
    head = np.arange(0.0, math.floor(alpha) + 1)
    log_t, _ = _terms(alpha, rate, moments, head)        # i ≤ ⌊α⌋: every coefficient is > 0
    log_head = float(sp.logsumexp(np.concatenate([log_t, atoms])))
    # floating-point margin: each log-term sums ~6 parts of at most this size (log-gamma, the moments' exponent,
    # α·log γ, each correct to a few roundings); log-sum-exp of n positive terms adds ~n roundings
    part = abs(float(sp.gammaln(alpha + 1))) + scale - alpha * (math.log(rate) + math.log1p(-rate))
    margin = _ULPS * (6 * part + 2 * (len(head) + len(atoms)))
    if float(alpha).is_integer():
        return log_head + margin
    total, magnitude = 0.0, 0.0                          # the tail, relative to e^{log_head}
    start, block = math.floor(alpha) + 1, _FIRST_BLOCK
    while True:
        i = np.arange(start, start + block, dtype=np.float64)
        log_t, sign = _terms(alpha, rate, moments, i)
        rel = np.exp(log_t - log_head)                   # ≤ 1: the tail terms are below the last head term
        log_a = log_head + math.log1p(total + float(sign[0] * rel[0]))   # an estimate of log A ≈ A − 1
        small = np.nonzero(rel < max(_RELATIVE * log_a, 1e-16))[0]
        last = start + block >= MAX_TERMS
        if small.size or last:                           # Leibniz: the remainder is at most the next term
            stop = int(small[0]) if small.size else len(i) - 1
            total += float(np.sum(sign[:stop] * rel[:stop]))
            magnitude += float(np.sum(rel[:stop]))
            bound = 1 + total + float(rel[stop]) + _ULPS * (start + stop) * (1 + magnitude)
            return log_head + math.log(bound) + margin
        total += float(np.sum(sign * rel))
        magnitude += float(np.sum(rel))
        start, block = start + block, block * 4
