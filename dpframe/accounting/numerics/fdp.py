"""Hypothesis-testing (f-DP) views of a privacy profile (Dong, Roth & Su 2019/2022).

A mechanism that is (ε, δ)-DP for every ε of a set has, for any test of "D" against "D′" at type I error
(false-positive rate) α, a type II error (false-negative rate) of at least (DRS Prop. 2.5 and 2.12)::

    f_{ε,δ}(α) = max(0, 1 − δ − e^ε·α, e^{−ε}·(1 − δ − α)),

so the trade-off curve is bounded below by the maximum of these over the pairs (ε, δ(ε)) of its profile —
a valid bound for any finite set of pairs, and the exact trade-off curve of a dominating pair as the pairs
fill its profile (the profile and the trade-off curve are convex conjugates, DRS Prop. 2.12).
μ-GDP is the trade-off G_μ(α) = Φ(Φ⁻¹(1 − α) − μ), whose profile is the Gaussian mechanism's with Δ/σ = μ.

Example:
    >>> import numpy as np
    >>> [round(float(v), 4) for v in tradeoff_from_profile(np.array([1.0]), np.array([0.0]), np.array([0.1, 0.5]))]
    [0.7282, 0.1839]
    >>> round(float(gaussian_tradeoff(1.0, np.array([0.05]))[0]), 4)
    0.7405

"""

from __future__ import annotations

import numpy as np

from dpframe.accounting.numerics.common import BLOCK, Array, special


def tradeoff_from_profile(eps: Array, delta: Array, alpha: Array) -> Array:
    """Max over the pairs (εᵢ, δᵢ) of f_{εᵢ,δᵢ}(α), for each α in [0, 1] (blocks of bounded memory)."""
    eps, delta = np.asarray(eps, dtype=np.float64), np.asarray(delta, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    keep = 1 - delta
    out = np.zeros(len(alpha))
    step = max(1, BLOCK // max(1, len(eps)))
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(0, len(alpha), step):
            a = alpha[i:i + step, None]
            lines = np.maximum(keep[None, :] - np.exp(eps)[None, :] * a, np.exp(-eps)[None, :] * (keep[None, :] - a))
            out[i:i + step] = np.nanmax(np.maximum(lines, 0.0), axis=1)
    return out


def gaussian_tradeoff(mu: float, alpha: Array) -> Array:
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ): the trade-off curve of μ-GDP."""
    sp = special()
    return np.asarray(sp.ndtr(sp.ndtri(1 - np.asarray(alpha, dtype=np.float64)) - mu))
