"""RDP closed forms of the base mechanisms and the RDP → (ε, δ) conversions.

Closed forms (sensitivity-normalised; digest ``research/004_modern_accounting.md`` §1.3):

* Gaussian / any ρ-zCDP mechanism: ε(α) = αρ (ρ = Δ²/(2σ²) for the Gaussian).
* Laplace with ε = Δ/b: ε(α) = ε + log1p((α−1)·expm1((1−2α)ε)/(2α−1))/(α−1).
* Binary pair (p, 1−p) vs (q, 1−q): D_α = log(p^α q^{1−α} + (1−p)^α (1−q)^{1−α})/(α−1).
* Pure ε-DP (Bun & Steinke 2016): the binary pair of randomized response with p = e^ε/(1+e^ε).
* Discrete Laplace(t) shifted by an integer Δ: geometric sums.

Conversions: the standard one, ε(α) + log(1/δ)/(α − 1) (Mironov 2017, Prop. 3), and the improved one,
ε(α) + log(1 − 1/α) − (log δ + log α)/(α − 1) (Balle et al. 2020; Canonne, Kamath & Steinke 2020,
Prop. 12).

Example:
    >>> import numpy as np
    >>> float(rdp_linear(0.125)(np.array([4.0]))[0])
    0.5
    >>> c = best_epsilon(np.array([2.0, 4.0, 8.0]), np.array([0.1, 0.2, 0.4]), 1e-5)
    >>> c.rule, c.alpha
    ('improved', 8.0)

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dpframe.accounting.numerics.common import Array, Fn
from dpframe.sealed import frozen_array

Conversion = Literal["best", "standard", "improved"]

#: The default grid of Rényi orders (dp_accounting's, extended at the top).
RDP_ORDERS = frozen_array(np.concatenate([np.arange(1.1, 11.0, 0.1), np.arange(11, 64, dtype=np.float64),
                                          np.array([80.0, 128, 256, 512, 1024])]))


def rdp_linear(rho: float) -> Fn:
    """ε(α) = αρ (Gaussian with ρ = Δ²/(2σ²), any ρ-zCDP mechanism); ρ may be +∞ (vacuous)."""
    return lambda a: np.asarray(a * rho)


def rdp_laplace(eps: float) -> Fn:
    """Laplace with ε = Δ/b: ε + log1p((α−1)·expm1((1−2α)ε)/(2α−1))/(α−1)."""
    def f(a: Array) -> Array:
        with np.errstate(over="ignore"):
            return np.asarray(eps + np.log1p((a - 1) * np.expm1((1 - 2 * a) * eps) / (2 * a - 1)) / (a - 1))

    return f


def rdp_binary(lp: float, l1p: float, lq: float, l1q: float, rest: float = -math.inf) -> Fn:
    """D_α((p, 1−p) ‖ (q, 1−q)) from logs of the four probabilities.

    ``rest``: the log of mass both share (outputs with the same probability under both, as k-ary
    randomized response's other values).
    """
    def f(a: Array) -> Array:
        both = np.logaddexp(a * lp + (1 - a) * lq, a * l1p + (1 - a) * l1q)
        return np.asarray(np.logaddexp(both, rest) / (a - 1))

    return f


def rdp_pure(eps: float) -> Fn:
    """(1/(α−1)) log[(sinh(αε) − sinh((α−1)ε))/sinh(ε)]: randomized response with p = e^ε/(1+e^ε), capped at ε."""
    p = -float(np.logaddexp(0.0, -eps))        # log p
    q = -float(np.logaddexp(0.0, eps))         # log (1 − p)
    rr = rdp_binary(p, q, q, p)
    return lambda a: np.minimum(rr(a), eps)


def rdp_discrete_laplace(t: float, d: int) -> Fn:
    """Discrete Laplace(t) (pmf ∝ e^{−|k|/t}) shifted by the integer Δ = ``d``: exact, by geometric sums."""
    def f(a: Array) -> Array:
        with np.errstate(over="ignore"):
            k = (2 * a - 1) / t
            # middle sum Σ_{k=1}^{Δ−1} r^k with r = e^{−(2α−1)/t}, written with expm1 (all terms ≥ 0)
            mid = np.exp(-k) * (-np.expm1(-k * (d - 1))) / (-np.expm1(-k)) if d > 1 else np.zeros_like(a)
            inner = 1 + np.exp(-(2 * a - 1) * (d / t)) + (-math.expm1(-1 / t)) * mid
            return np.asarray(((a - 1) * (d / t) + np.log(inner) - math.log1p(math.exp(-1 / t))) / (a - 1))

    return f


def conversions(alpha: Array, rdp: Array, delta: float) -> tuple[Array, Array]:
    """(standard, improved) ε at ``delta`` for each order (improved clamped at ≥ 0)."""
    std = rdp + math.log(1 / delta) / (alpha - 1)
    imp = rdp + np.log1p(-1 / alpha) - (math.log(delta) + np.log(alpha)) / (alpha - 1)
    return std, np.maximum(imp, 0.0)


def delta_conversions(alpha: Array, rdp: Array, epsilon: float) -> tuple[Array, Array]:
    """(standard, improved) δ at ``epsilon`` for each order (capped at 1)."""
    with np.errstate(over="ignore"):
        std = np.exp((alpha - 1) * (rdp - epsilon))
        imp = np.exp((alpha - 1) * (rdp - epsilon + np.log1p(-1 / alpha)) - np.log(alpha))
    return np.minimum(std, 1.0), np.minimum(imp, 1.0)


@dataclass(frozen=True)
class Converted:
    """The result of a conversion: ε, the order and the rule that gave it."""

    epsilon: float
    alpha: float
    rule: str


def best_epsilon(alpha: Array, rdp: Array, delta: float, conversion: Conversion = "best") -> Converted:
    """The smallest ε over ``alpha`` by the chosen conversion rule(s)."""
    std, imp = conversions(alpha, rdp, delta)
    options = []
    if conversion in ("best", "standard"):
        i = int(np.nanargmin(std))
        options.append(Converted(float(std[i]), float(alpha[i]), "standard"))
    if conversion in ("best", "improved"):
        i = int(np.nanargmin(imp))
        options.append(Converted(float(imp[i]), float(alpha[i]), "improved"))
    return min(options, key=lambda c: c.epsilon)
