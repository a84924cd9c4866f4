"""The Rényi DP of the Poisson-subsampled Gaussian mechanism at any real order α > 1, exactly.

With μ = Δ/σ, P = N(μ, 1), Q = N(0, 1) and the sampling rate γ, the mechanism's remove pair is
((1−γ)Q + γP, Q) and ε(α) = log A_α/(α − 1) with A_α = E_Q[(1 − γ + γL)^α], L = dP/dQ = e^{μz − μ²/2}.
Mironov, Talwar & Zhang (2019, §3.3) prove that the add pair's B_α = E_Q[(1 − γ + γL)^{1−α}] never
exceeds A_α for α ≥ 1, so ε(α) is the mechanism's RDP (``tests/accounting/test_exact_rdp.py`` checks
B_α ≤ A_α by quadrature). Split the line at z₀, where γL = 1 − γ, and expand (1 + x)^α binomially in
x = γL/(1−γ) ≤ 1 below z₀ and in x = (1−γ)/(γL) ≤ 1 above (their fractional-α series, as dp_accounting
computes it)::

    A_α = Σ_{i≥0} C(α, i) [(1−γ)^{α−i} γ^i e^{μ²(i²−i)/2} Φ(z₀ − iμ)
                          + γ^{α−i} (1−γ)^i e^{μ²(j²−j)/2} Φ(jμ − z₀)],   j = α − i.

**Error bound.** For i > α the coefficients C(α, i) alternate in sign and |C(α, i+1)|/|C(α, i)| =
(i − α)/(i + 1) < 1, so at every z the pointwise series is alternating with decreasing terms from
i = ⌊α⌋ + 1 on (x ≤ 1), and its remainder after term N has the sign of term N + 1 and at most its size
(Leibniz). Integrating against Q keeps both facts for the integrated terms. The sum is therefore stopped
once a term is below 10⁻⁹ of log A_α (that is, of (α − 1)ε(α)), and the next term's size plus a
floating-point margin is added: the result is an upper bound of ε(α), within about 10⁻⁸ of it (relative).
For integer α the series is finite (the exact binomial sum).

Example:
    >>> import numpy as np
    >>> f = sampled_gaussian_rdp(mu=1 / 2.5, rate=0.01)
    >>> [round(float(v), 9) for v in f(np.array([1.5, 2.0]))]     # mpmath quadrature: 1.3001418e-05, ...
    [1.3001e-05, 1.7351e-05]

"""

from __future__ import annotations

import math

import numpy as np

from dpframe.accounting.numerics.common import Array, Fn, special

#: Terms summed at most; the bound then adds the size of the next one (valid, a little looser).
MAX_TERMS = 1 << 14
_FIRST_BLOCK = 16       # tail terms computed at first (the series usually converges within a few); blocks grow ×4
_RELATIVE = 1e-9         # stop once a tail term is below this fraction of log A (≥ 10⁻¹⁶ of A)
_ULPS = 2.3e-16          # one rounding (a little over the unit roundoff of a float)


def sampled_gaussian_rdp(mu: float, rate: float) -> Fn:
    """ε(α) of the Gaussian mechanism with Δ/σ = ``mu`` on a Poisson sample of rate ``rate`` in (0, 1).

    Orders ≤ 1 and α = ∞ are +∞ (the caller keeps its other bound there).
    """
    cache: dict[float, float] = {}

    def at(alpha: float) -> float:
        if alpha not in cache:
            cache[alpha] = _rdp(alpha, mu, rate)
        return cache[alpha]

    def f(a: Array) -> Array:
        return np.array([at(float(alpha)) for alpha in np.asarray(a, dtype=np.float64)])

    return f


def _rdp(alpha: float, mu: float, rate: float) -> float:
    if not alpha > 1 or not math.isfinite(alpha):
        return math.inf
    log_a = _log_a(alpha, mu, rate)
    return max(log_a / (alpha - 1), 0.0)


def _terms(alpha: float, mu: float, rate: float, i: Array) -> tuple[Array, Array]:
    """(log |term i|, sign of term i) of the series, both halves of the line together."""
    sp = special()
    lq, l1q = math.log(rate), math.log1p(-rate)
    z0 = (math.log1p(-rate) - lq) / mu + mu / 2          # γ·L(z₀) = 1 − γ
    j = alpha - i
    with np.errstate(divide="ignore", invalid="ignore"):
        log_coef = sp.gammaln(alpha + 1) - sp.gammaln(i + 1) - sp.gammaln(j + 1)
        sign = np.where(np.isfinite(log_coef), sp.gammasgn(j + 1), 0.0)
        below = (j * l1q + i * lq + mu * mu * (i * i - i) / 2 + sp.log_ndtr(z0 - i * mu))
        above = (j * lq + i * l1q + mu * mu * (j * j - j) / 2 + sp.log_ndtr(j * mu - z0))
        return log_coef + np.logaddexp(below, above), sign


def _log_a(alpha: float, mu: float, rate: float) -> float:
    """An upper bound of log A_α (see the module docstring)."""
    sp = special()
    head = np.arange(0.0, math.floor(alpha) + 1)
    log_t, _ = _terms(alpha, mu, rate, head)             # i ≤ ⌊α⌋: every coefficient is > 0
    log_head = float(sp.logsumexp(log_t))
    # floating-point margin: each log-term sums ~6 parts of at most this size (log-gamma, μ²α²/2, α·log γ, each
    # correct to a few roundings); log-sum-exp of n positive terms adds ~n roundings
    part = abs(float(sp.gammaln(alpha + 1))) + mu * mu * alpha * alpha / 2 - alpha * math.log(rate)
    margin = _ULPS * (6 * part + 2 * len(head))
    if float(alpha).is_integer():
        return log_head + margin
    total, magnitude = 0.0, 0.0                          # the tail, relative to e^{log_head}
    start, block = math.floor(alpha) + 1, _FIRST_BLOCK
    while True:
        i = np.arange(start, start + block, dtype=np.float64)
        log_t, sign = _terms(alpha, mu, rate, i)
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
