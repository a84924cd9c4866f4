"""Exact randomness for dpframe: random sources and exact discrete noise samplers.

* :mod:`dpframe.noise.random` — :class:`SystemRandomSource` (OS CSPRNG, the only private source),
  :class:`SeededRandomSource` (tests only) and exact derived draws (``uniform_below``, ``permutation``).
* :mod:`dpframe.noise.samplers` — Bernoulli(exp(-γ)), discrete Laplace (inverse CDF) and discrete Gaussian
  (Canonne, Kamath & Steinke 2020) samplers, vectorised over numpy arrays (several scales in one batch).
* :mod:`dpframe.noise.certified` — the exact decisions ``U < exp(-x)`` they are built from: certified
  float64 bounds, and an exact Decimal fallback for the rare undecided ones.
* :mod:`dpframe.noise.exponential` — the exponential mechanism sampled exactly (lazy Gumbel-max with
  certified interval comparisons), one draw or one per segment.

Example:
    >>> from fractions import Fraction
    >>> from dpframe.noise import default_source, discrete_gaussian
    >>> discrete_gaussian(Fraction(50), 3, default_source(seed=1)).shape
    (3,)

"""

from dpframe.noise.exponential import exponential_index, exponential_index_grouped
from dpframe.noise.random import RandomSource, SeededRandomSource, SystemRandomSource, default_source
from dpframe.noise.samplers import (
    MAX_GAUSSIAN_SIGMA2,
    MAX_LAPLACE_SCALE,
    bernoulli_exp,
    bernoulli_exp_ratio,
    discrete_gaussian,
    discrete_gaussian_batch,
    discrete_laplace,
    discrete_laplace_batch,
    discrete_laplace_log_tail,
    discrete_laplace_tail,
    discrete_laplace_variance,
)

__all__ = [
    "MAX_GAUSSIAN_SIGMA2",
    "MAX_LAPLACE_SCALE",
    "RandomSource",
    "SeededRandomSource",
    "SystemRandomSource",
    "bernoulli_exp",
    "bernoulli_exp_ratio",
    "default_source",
    "discrete_gaussian",
    "discrete_gaussian_batch",
    "discrete_laplace",
    "discrete_laplace_batch",
    "discrete_laplace_log_tail",
    "discrete_laplace_tail",
    "discrete_laplace_variance",
    "exponential_index",
    "exponential_index_grouped",
]
