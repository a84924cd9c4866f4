"""Statistical checks used by the conformance suite: noise goodness of fit and binomial confidence bounds.

* :func:`noise_cdf` — P[Z ≤ k] of a declared :class:`~dpframe.mechanism.Noise` (exact closed form for
  the discrete Laplace; exact normalised sum, or the continuous normal for σ > 1000, for the discrete
  Gaussian).
* :func:`noise_chisquare` — the p-value of a chi-square goodness-of-fit test of integer samples against
  that distribution, on bins of (nearly) equal probability.
* :func:`clopper_pearson` — exact one-sided binomial confidence bounds.

These functions only *check* noise; they never draw any.

Example:
    >>> from fractions import Fraction
    >>> from dpframe.mechanism import Noise
    >>> from dpframe.noise import SeededRandomSource
    >>> noise = Noise("discrete_laplace", Fraction(3), Fraction(1))
    >>> z = noise.sample(20_000, SeededRandomSource(0))
    >>> noise_chisquare(z, noise) > 1e-6
    True

"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from dpframe.mechanism import Noise

__all__ = ["clopper_pearson", "noise_cdf", "noise_chisquare", "noise_pmf"]

FloatArray = npt.NDArray[np.float64]

#: Above this σ² the discrete Gaussian CDF is taken from the continuous normal at k + 1/2. By Poisson
#: summation the two differ by about exp(−2π²σ²), i.e. nothing measurable.
_EXACT_GAUSSIAN_SIGMA2 = 1e6


def _gaussian_table(sigma2: float) -> tuple[int, FloatArray]:
    """(K, cdf) with cdf[i] = P[Z ≤ i − K] for the discrete Gaussian, |Z| ≤ K carrying all the mass."""
    k = math.ceil(14 * math.sqrt(sigma2)) + 3
    support = np.arange(-k, k + 1, dtype=np.float64)
    weights = np.exp(-(support**2) / (2 * sigma2))
    cdf: FloatArray = np.cumsum(weights) / weights.sum()
    return k, cdf


def noise_cdf(noise: Noise, k: npt.ArrayLike) -> FloatArray:
    """P[Z ≤ k] for integer ``k`` (array), Z distributed as ``noise`` in its own integer units.

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.mechanism import Noise
        >>> float(noise_cdf(Noise("discrete_laplace", Fraction(2), Fraction(1)), [-1])[0]) < 0.5
        True

    """
    ks = np.floor(np.asarray(k, dtype=np.float64))
    if noise.distribution == "discrete_laplace":
        t = float(noise.scale)
        norm = 1 + math.exp(-1 / t)
        # P[Z ≥ j] = e^{−j/t} / (1 + e^{−1/t}) for j ≥ 1, and P[Z ≤ −j] is the same by symmetry.
        lower = np.exp(np.minimum(ks, 0) / t) / norm            # k ≤ −1: P[Z ≤ k] = P[Z ≥ −k]
        upper = 1 - np.exp(-(np.maximum(ks, 0) + 1) / t) / norm   # k ≥ 0: 1 − P[Z ≥ k + 1]
        out: FloatArray = np.where(ks < 0, lower, upper)
        return out
    sigma2 = float(noise.scale)
    if sigma2 > _EXACT_GAUSSIAN_SIGMA2:
        gauss: FloatArray = sps.norm.cdf((ks + 0.5) / math.sqrt(sigma2))
        return gauss
    kk, table = _gaussian_table(sigma2)
    idx = np.clip(ks + kk, -1, 2 * kk).astype(np.int64)
    out = np.where(idx < 0, 0.0, table[np.maximum(idx, 0)])
    return out


def noise_pmf(noise: Noise, k: npt.ArrayLike) -> FloatArray:
    """P[Z = k] for integer ``k`` (array).

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.mechanism import Noise
        >>> p = noise_pmf(Noise("discrete_gaussian", Fraction(4), Fraction(1)), [0, 1, -1])
        >>> bool(np.isclose(p[1], p[2], rtol=1e-12) and p[0] > p[1])   # (a difference of two cdfs: not bit-exact)
        True

    """
    ks = np.asarray(k, dtype=np.float64)
    if noise.distribution == "discrete_laplace":
        t = float(noise.scale)
        pmf: FloatArray = math.tanh(1 / (2 * t)) * np.exp(-np.abs(ks) / t)
        return pmf
    return noise_cdf(noise, ks) - noise_cdf(noise, ks - 1)


def _quantile_guess(noise: Noise, q: FloatArray) -> FloatArray:
    """Approximate quantiles (continuous Laplace / normal) used only to place bin edges."""
    if noise.distribution == "discrete_laplace":
        t = float(noise.scale)
        guess: FloatArray = np.where(q < 0.5, t * np.log(2 * q), -t * np.log(2 * (1 - q)))
        return guess
    normal: FloatArray = math.sqrt(float(noise.scale)) * sps.norm.ppf(q)
    return normal


def noise_chisquare(samples: npt.ArrayLike, noise: Noise, bins: int | None = None) -> float:
    """p-value of a chi-square goodness-of-fit test of integer ``samples`` against ``noise``.

    Bins are intervals of integers with nearly equal probability (at most ``bins`` of them, default
    ``min(40, n // 50)``); bins expected to hold fewer than 5 samples are merged into a neighbour. A
    sample that is not an integer fails the test outright (p = 0).

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.mechanism import Noise
        >>> from dpframe.noise import SeededRandomSource
        >>> noise = Noise("discrete_gaussian", Fraction(25), Fraction(1))
        >>> wrong = Noise("discrete_gaussian", Fraction(36), Fraction(1))
        >>> z = noise.sample(20_000, SeededRandomSource(1))
        >>> noise_chisquare(z, noise) > 1e-6, noise_chisquare(z, wrong) < 1e-6
        (True, True)

    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    n = x.size
    if n < 50:
        raise ValueError(f"need at least 50 samples for a chi-square test, got {n}")
    if not np.all(np.isfinite(x)) or not np.all(x == np.round(x)):
        return 0.0
    nbins = bins if bins is not None else min(40, max(5, n // 50))
    q = np.arange(1, nbins) / nbins
    edges = np.unique(np.round(_quantile_guess(noise, q)))   # bin j = (edges[j−1], edges[j]]
    cdf = noise_cdf(noise, edges)
    probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    observed = np.bincount(np.searchsorted(edges, x, side="left"), minlength=edges.size + 1).astype(np.float64)
    expected = probs * n
    # Merge low-expectation bins into their neighbour (left to right, then the last into its left).
    obs_m: list[float] = []
    exp_m: list[float] = []
    acc_o = acc_e = 0.0
    for o, e in zip(observed, expected):
        acc_o += o
        acc_e += e
        if acc_e >= 5:
            obs_m.append(acc_o)
            exp_m.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        if exp_m:
            obs_m[-1] += acc_o
            exp_m[-1] += acc_e
        else:
            obs_m, exp_m = [acc_o], [acc_e]
    if len(obs_m) < 2:
        # All the mass in one bin: the test can only say whether every sample landed there.
        return 1.0 if obs_m[0] == n else 0.0
    obs_a, exp_a = np.asarray(obs_m), np.asarray(exp_m)
    exp_a *= n / exp_a.sum()
    result: Any = sps.chisquare(obs_a, exp_a)
    return float(result.pvalue)


def clopper_pearson(successes: npt.ArrayLike, trials: int, alpha: float) -> tuple[FloatArray, FloatArray]:
    """Exact one-sided (lower, upper) bounds on a binomial proportion, each holding with prob. ≥ 1 − alpha.

    Example:
        >>> lo, hi = clopper_pearson([50], 100, 0.05)
        >>> 0.41 < float(lo[0]) < 0.5 < float(hi[0]) < 0.59
        True

    """
    k = np.asarray(successes, dtype=np.float64)
    safe_k = np.maximum(k, 1)
    safe_rest = np.maximum(trials - k, 1)
    lower = np.where(k > 0, sps.beta.ppf(alpha, safe_k, trials - k + 1), 0.0)
    upper = np.where(k < trials, sps.beta.ppf(1 - alpha, k + 1, safe_rest), 1.0)
    return np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
