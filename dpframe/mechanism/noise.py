"""Calibrated discrete noise: the two additive mechanisms every built-in uses, with their cost formulas.

* Discrete Laplace with scale t on a statistic of L1 sensitivity Δ is ε-DP with ε = Δ / t
  (the ratio of pmfs at x and x + d is exp(|d|/t) ≤ exp(Δ/t)).
* Discrete Gaussian with variance parameter σ² on a statistic of L2 sensitivity Δ is ρ-zCDP with
  ρ = Δ² / (2σ²) (Canonne, Kamath & Steinke 2020, Thm. 14).

Calibration is exact (Fractions), so the cost of the calibrated noise equals the share it was
calibrated to. Real-valued statistics live on a grid of ``unit = 2**k``: the statistic is an integer
count of grid steps, the noise is an integer, and the release is ``(statistic + noise) * unit``, a
float that is exactly representable while |value| < 2**53 units.

Example:
    >>> from fractions import Fraction
    >>> from dpframe.budgets import PureDP
    >>> n = Noise.calibrate(Fraction(10), PureDP(0.5))
    >>> n.scale, n.cost()
    (Fraction(20, 1), PureDP(epsilon=1/2))

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from dpframe.accounting.numerics.rdp import rdp_discrete_laplace_bounds
from dpframe.accounting.rdp_charge import FILTER_ORDERS
from dpframe.budgets import ZCDP, Budget, PureDP, down, make, up
from dpframe.errors import BudgetConversionError, BudgetError, PluginError
from dpframe.noise import (
    MAX_GAUSSIAN_SIGMA2,
    MAX_LAPLACE_SCALE,
    RandomSource,
    discrete_gaussian,
    discrete_gaussian_batch,
    discrete_laplace,
    discrete_laplace_batch,
    discrete_laplace_variance,
)
from dpframe.sealed import frozen_array, plain_cache

Distribution = Literal["discrete_laplace", "discrete_gaussian"]
MAX_SPREAD_LOG2 = 1016.0
"""The largest noise spread (log₂, in output units: 2¹⁰¹⁶ ≈ 7·10³⁰⁵) a release is planned with. A float holds up to
2¹⁰²⁴, so a noise draw overflows only beyond 2⁸ spreads (probability below e⁻²⁵⁶); with a larger spread the
released value would be ±inf (and its interval NaN) often, so such a query is refused, free, while planning."""


def _log2(x: Fraction) -> float:
    """log₂ of a positive Fraction, however large or small (no float overflow)."""
    return math.log2(x.numerator) - math.log2(x.denominator)


@dataclass(frozen=True)
class Noise:
    """Integer noise of a known distribution on a statistic of known sensitivity."""

    distribution: Distribution
    scale: Fraction          # Laplace: t; Gaussian: σ²
    sensitivity: Fraction    # L1 (Laplace) or L2 (Gaussian), in statistic units
    unit: Fraction = Fraction(1)
    # L∞: the most one coordinate (one released value) moves, in statistic units; None: all of ``sensitivity`` can
    # (the floor of the declared curves, :meth:`rdp`, reads it for discrete Laplace noise)
    coordinate_sensitivity: Fraction | None = None

    def __post_init__(self) -> None:
        """Refuse a ``coordinate_sensitivity`` that is not a positive exact number; keep a whole one as a Fraction."""
        m = self.coordinate_sensitivity
        if m is None:
            return
        if isinstance(m, bool) or not isinstance(m, (int, Fraction)) or m <= 0:
            raise PluginError(f"Noise: coordinate_sensitivity must be a positive int or Fraction, not {m!r}",
                              argument="coordinate_sensitivity",
                              fix="pass the most one coordinate moves as an exact number, e.g. Fraction(1), or "
                                  "leave it None (all of the sensitivity)")
        object.__setattr__(self, "coordinate_sensitivity", Fraction(m))

    @classmethod
    def calibrate(cls, sensitivity: Fraction, share: Budget, unit: Fraction = Fraction(1), *,
                  coordinate_sensitivity: Fraction | None = None) -> Noise:
        """The noise that makes a statistic of this sensitivity cost exactly ``share``.

        ``coordinate_sensitivity``: the most one coordinate of the statistic moves (L∞), where it is less than
        ``sensitivity`` (L1: e.g. two counts that each move by one step, under one noise of sensitivity 2); it does not
        change the noise, only the least privacy curve the plan may declare for it (:meth:`rdp`).

        Example:
            >>> Noise.calibrate(Fraction(2), PureDP(1), coordinate_sensitivity=Fraction(1)).coordinate_sensitivity
            Fraction(1, 1)

        """
        if isinstance(share, PureDP):
            noise = cls("discrete_laplace", sensitivity / share.epsilon, sensitivity, unit, coordinate_sensitivity)
        elif isinstance(share, ZCDP):
            noise = cls("discrete_gaussian", sensitivity**2 / (2 * share.rho), sensitivity, unit,
                        coordinate_sensitivity)
        else:
            raise BudgetConversionError(f"additive noise is calibrated to pure DP or zCDP, not {share!r}",
                                        argument="share", fix="pass a PureDP or ZCDP share")
        limit = MAX_LAPLACE_SCALE if noise.distribution == "discrete_laplace" else MAX_GAUSSIAN_SIGMA2
        if noise.scale > limit:  # refused while planning, before anything is charged
            digits = math.log10(noise.scale.numerator) - math.log10(noise.scale.denominator)  # no float overflow
            raise BudgetError(f"this budget is so small that the noise scale (about 10^{digits:.0f}) exceeds what "
                              "the exact sampler supports", argument="budget",
                              fix="give the query a larger budget, or narrow the bounds / max_rows")
        spread = noise.spread_log2()
        if spread > MAX_SPREAD_LOG2:    # the release, (statistic + noise) × unit, would be ±inf as a float
            digits = spread * math.log10(2)
            raise BudgetError(f"at this budget the noise of the released value is about 10^{digits:.0f}, beyond what a "
                              "float holds (the value would be ±inf)", argument="budget",
                              fix="give the query a larger budget, or narrow the bounds / max_rows")
        return noise

    def spread_log2(self) -> float:
        """log₂ of the noise's spread in output units: t·unit (Laplace) or σ·unit (Gaussian), without overflow.

        Example:
            >>> Noise("discrete_laplace", Fraction(4), Fraction(1), Fraction(1, 8)).spread_log2()
            -1.0

        """
        scale = _log2(self.scale)
        return (scale if self.distribution == "discrete_laplace" else scale / 2) + _log2(self.unit)

    def cost(self) -> Budget:
        """ε = Δ/t for discrete Laplace; ρ = Δ²/(2σ²) for discrete Gaussian."""
        if self.distribution == "discrete_laplace":
            return make("pure", self.sensitivity / self.scale)
        return make("zcdp", self.sensitivity**2 / (2 * self.scale))

    def rdp(self, alpha: np.ndarray) -> np.ndarray:
        """A lower bound, at each order α > 1, on the Rényi divergence this noise's release has at its sensitivity.

        The least divergence of a release whose integer statistic (one or several coordinates, each with its own
        draw of this noise) moves by the whole sensitivity: what any privacy curve a plan declares for this noise is
        at least (the engine refuses a plan whose declared curves are below it,
        :func:`~dpframe.planning.passes.check_plugin_costs`). The divergence of independent coordinates adds up.

        Discrete Laplace(t), L1 sensitivity Δ: an integer shift v with ‖v‖₁ = ⌊Δ⌋ has divergence Σᵢ D(|vᵢ|), where
        D(s) = D_α(Z ‖ Z + s). exp((α−1)·D(s)) = A·e^{(α−1)s/t} + B·e^{−αs/t} with A, B > 0 (the geometric sums of
        :func:`~dpframe.accounting.numerics.rdp.rdp_discrete_laplace`), a log-convex function of s, so (α−1)·D is
        convex with D(0) = 0: D(s) ≥ s·D(1), and Σᵢ D(|vᵢ|) ≥ ⌊Δ⌋·D(1), with equality when every step is on a
        coordinate of its own. A release whose one coordinate moves by m = ⌊:attr:`coordinate_sensitivity`⌋ (by
        default all of ⌊Δ⌋) has divergence D(m) at least. So the floor is max(D(m), ⌊Δ⌋·D(1)) (t rounded up, the
        float error taken off): each is the divergence of a neighbouring pair the declared sensitivities say exists
        (the one-coordinate D(⌊Δ⌋) by default — four one-step curves declared for one coordinate moved by 4 are a
        fraction of its RDP at low orders; a plugin whose steps are spread declares ``coordinate_sensitivity=1``).
        Discrete Gaussian(σ²), L2 sensitivity Δ: an integer shift has an integer ‖v‖₂² ≤ Δ², so at most ⌊Δ²⌋, and
        its divergence at an integer order α is exactly α‖v‖₂²/(2σ²) whatever the coordinates (CKS20); the floor is
        ⌊α⌋·ρ with ρ = ⌊Δ²⌋/(2σ²) rounded down (the divergence grows with α), ρ below order 2 (the KL divergence).
        0 where it does not say (Δ < 1 step). (The check allows 10⁻⁹ of relative float slack on top.)

        Example:
            >>> n = Noise("discrete_gaussian", Fraction(2), Fraction(1))             # ρ = 1/4
            >>> [float(v) for v in n.rdp(np.array([1.5, 2.0, 2.5, 8.0]))]
            [0.25, 0.5, 0.5, 2.0]
            >>> float(Noise("discrete_laplace", Fraction(1), Fraction(1)).rdp(np.array([256.0]))[0]) > 0.99
            True
            >>> one, spread = (Noise("discrete_laplace", Fraction(400), Fraction(4), coordinate_sensitivity=m)
            ...                for m in (None, Fraction(1)))
            >>> round(float(one.rdp(np.array([2.0]))[0] / spread.rdp(np.array([2.0]))[0]), 1)   # D(4) / 4·D(1)
            4.0

        """
        return _rdp(self.distribution, self.scale, self.sensitivity, np.asarray(alpha, dtype=np.float64),
                    self.coordinate_sensitivity)

    def filter_rdp(self) -> np.ndarray:
        """:meth:`rdp` at the Rényi filter's orders (``FILTER_ORDERS``), cached by the noise's parameters (read-only).

        Example:
            >>> float(Noise("discrete_gaussian", Fraction(2), Fraction(1)).filter_rdp()[3])      # order 2
            0.5

        """
        return _filter_rdp(self.distribution, self.scale, self.sensitivity, self.coordinate_sensitivity)

    def pure_bound(self) -> float:
        """A lower bound on this noise's pure ε (Rényi order ∞) at its sensitivity: ⌊Δ⌋/t, ∞ for the Gaussian.

        Example:
            >>> Noise("discrete_laplace", Fraction(4), Fraction(2)).pure_bound() <= 0.5
            True
            >>> Noise("discrete_gaussian", Fraction(4), Fraction(2)).pure_bound()
            inf

        """
        if self.distribution == "discrete_gaussian":
            return math.inf
        return down(Fraction(self.sensitivity.numerator // self.sensitivity.denominator) / self.scale)

    def sample(self, size: int, rng: RandomSource) -> np.ndarray:
        """``size`` integer draws (in statistic units) from the session's random source."""
        if self.distribution == "discrete_laplace":
            return discrete_laplace(self.scale, size, rng)
        return discrete_gaussian(self.scale, size, rng)

    def std(self) -> float:
        """Standard deviation in output units (for the Gaussian, σ is an upper bound)."""
        if self.distribution == "discrete_laplace":
            var = discrete_laplace_variance(self.scale)
        else:
            var = float(self.scale)
        return math.sqrt(var) * float(self.unit)

    def ci95(self) -> float:
        """Half-width of a 95% interval for the noise, in output units."""
        return self.half_width(0.95)

    def half_width(self, confidence: float) -> float:
        """The smallest k (in output units) with P[|noise| ≤ k] ≥ ``confidence``: exact for both distributions.

        Discrete Laplace(t): P[|Z| > k] = 2e^{-(k+1)/t} / (1 + e^{-1/t}). Discrete Gaussian(σ²): the mass is
        summed exactly; beyond σ = 10⁵ the discrete and continuous Gaussians agree to far better than a
        unit, and the normal quantile, rounded up, is used.

        Example:
            >>> from fractions import Fraction
            >>> Noise("discrete_laplace", Fraction(10), Fraction(1)).half_width(0.95)
            30.0
            >>> Noise("discrete_gaussian", Fraction(100), Fraction(1)).half_width(0.95)
            20.0

        """
        return _half_width_units(self.distribution, self.scale, confidence) * float(self.unit)

    def describe(self) -> str:
        """E.g. 'discrete Laplace(t=20) on grid 2^-3, ±58 (95%)'."""
        name = "discrete Laplace" if self.distribution == "discrete_laplace" else "discrete Gaussian"
        par = f"t={_short(self.scale)}" if self.distribution == "discrete_laplace" else f"σ²={_short(self.scale)}"
        grid = "" if self.unit == 1 else f" on grid 2^{round(math.log2(self.unit))}"
        return f"{name}({par}, Δ={_short(self.sensitivity)}){grid}, ±{self.ci95():.4g} (95%)"


def _rdp(distribution: Distribution, scale: Fraction, sensitivity: Fraction, a: np.ndarray,
         coordinate: Fraction | None = None) -> np.ndarray:
    """:meth:`Noise.rdp` of a noise with these parameters (``coordinate``: its ``coordinate_sensitivity``)."""
    if distribution == "discrete_gaussian":
        squared = sensitivity**2
        rho = down(Fraction(squared.numerator // squared.denominator) / (2 * scale))
        return np.asarray(np.maximum(np.floor(a), 1.0) * rho)
    steps = min(sensitivity.numerator // sensitivity.denominator, 2**53)
    if steps < 1:
        return np.zeros_like(a)
    most = steps if coordinate is None else min(steps, coordinate.numerator // coordinate.denominator)
    if most >= steps:       # one coordinate moved by ⌊Δ⌋: D(⌊Δ⌋) ≥ ⌊Δ⌋·D(1) (D convex, D(0) = 0)
        one_coordinate, _ = rdp_discrete_laplace_bounds(up(scale), int(steps))(a)
        return np.asarray(one_coordinate)
    one_step, _ = rdp_discrete_laplace_bounds(up(scale), 1)(a)
    spread = np.asarray(one_step * steps * (1 - 2.0**-52))
    if most <= 1:
        return spread
    one_coordinate, _ = rdp_discrete_laplace_bounds(up(scale), int(most))(a)
    return np.asarray(np.maximum(spread, one_coordinate))


@plain_cache(maxsize=4096)
def _filter_rdp(distribution: Distribution, scale: Fraction, sensitivity: Fraction,
                coordinate: Fraction | None = None) -> np.ndarray:
    """:meth:`Noise.filter_rdp`: a pure function of public values, cached (each query plans the same few noises)."""
    return frozen_array(_rdp(distribution, scale, sensitivity, np.asarray(FILTER_ORDERS), coordinate))


def sample_batch(draws: Sequence[tuple[Noise, int]], rng: RandomSource) -> list[np.ndarray]:
    """Integer draws for several noises at once, ``size`` of each ``(noise, size)``: one vectorised batch per family.

    The same distribution as calling :meth:`Noise.sample` for each (independent draws); the fixed cost of a
    sampler call is paid once per distribution family, not once per statistic.

    Example:
        >>> from dpframe.noise import SeededRandomSource
        >>> a = Noise("discrete_laplace", Fraction(4), Fraction(1))
        >>> b = Noise("discrete_gaussian", Fraction(9), Fraction(1))
        >>> [z.shape for z in sample_batch([(a, 3), (b, 2)], SeededRandomSource(0))]
        [(3,), (2,)]

    """
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(draws)
    families = (("discrete_laplace", discrete_laplace_batch), ("discrete_gaussian", discrete_gaussian_batch))
    for family, sampler in families:
        which = [i for i, (noise, _) in enumerate(draws) if noise.distribution == family]
        if which:
            for i, z in zip(which, sampler([draws[i][0].scale for i in which], [draws[i][1] for i in which], rng),
                            strict=True):
                out[i] = z
    return out


@plain_cache(maxsize=4096)
def _half_width_units(distribution: Distribution, scale: Fraction, confidence: float) -> int:
    """:meth:`Noise.half_width` in statistic units.

    A pure function of public values, cached: every plan, explanation and interval asks for the same few.
    """
    miss = 1 - confidence
    if distribution == "discrete_laplace":
        t = float(scale)
        return max(0, math.ceil(-t * math.log(miss / 2 * (1 + math.exp(-1 / t))) - 1))
    sigma = math.sqrt(float(scale))
    if sigma > 1e5:
        return math.ceil(_normal_quantile(1 - miss / 2) * sigma)
    z = float(-np.log(miss)) if miss > 0 else 40.0
    support = np.arange(0, math.ceil((6 + z) * sigma) + 12)
    mass = np.exp(-(support.astype(np.float64) ** 2) / (2 * float(scale)))
    two_sided = np.concatenate([[mass[0]], 2 * mass[1:]])
    return int(np.searchsorted(np.cumsum(two_sided) / two_sided.sum(), confidence))


@plain_cache(maxsize=64)
def _normal_quantile(p: float) -> float:
    """The standard normal quantile (scipy's), cached: a query asks for a few levels, each costing ~0.2 ms in scipy."""
    from scipy.stats import norm

    return float(norm.ppf(p))


def _short(x: Fraction) -> str:
    return str(x) if x.denominator == 1 else f"{float(x):.6g}"
