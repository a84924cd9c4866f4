"""The rules that turn noisy histograms into bounds: minimise estimated bias plus noise (post-processing).

All inputs are released values (noisy histograms) and public facts (candidates, the release's noise),
so every choice here is post-processing. The error model, in one line per bound:

* ``max_rows = c`` (:func:`rows_error`): a unit with n rows loses (n − c)⁺ of them, so the bias is
  D(c) = Σ_u (n_u − c)⁺ rows; the noise of each of the query's G cells is k·c (k: the release's noise
  standard deviation per unit of sensitivity). A total (count, sum) errs by (D(c) + G·k·c)/N as a
  fraction of the N rows; a ratio (mean, var, std, quantile) by at most D(c)/N + G·k·c/N_kept(c).
  The minimiser is where about G·k units still exceed c: raising c further adds more noise than the
  rows it recovers. With private keys and no ``max_groups`` (a unit keeps up to c groups), the stage adds
  τ(c)/N̂ per cell and measure, τ(c) the selection threshold at c and N̂ the units counted
  (``Tuner._selection_error``): a c whose τ no group can reach would release nothing.
* ``max_groups = g`` (:func:`groups_error`): a unit in m groups loses (m − g)⁺ of them; raising g costs
  what the release pays per group (the partition-selection threshold and the noise of unit counts).
* clipping bounds (:func:`clipping_error`): values beyond ``hi`` lose (x − hi), below ``lo`` (lo − x);
  the noise of a sum grows with max(|lo|, |hi|), of a mean/var/std with the width (hi − lo)/2.

Bins whose noisy count is below the noise's (1 − 0.05/bins) half-width are read as empty
(:func:`denoise`): noise in empty bins would otherwise invent a tail of huge units or values. A bin cut off
from the bulk by empty bins must stand out at (1 − 10⁻⁶/bins): a phantom bound there (2⁵⁰ for values
of 0–500) would make the release pure noise, so it may happen far more rarely than a one-bin widening.

Example:
    >>> from dpframe.tuning.grid import ROW_CANDIDATES
    >>> counts = np.zeros(len(ROW_CANDIDATES)); counts[4] = 1000; counts[10] = 30   # 6–7 rows, 48–63 rows
    >>> model = ErrorModel(cells=1, noise=2.0, totals=1, ratios=0)
    >>> ROW_CANDIDATES[int(np.argmin(rows_error(counts, model)))]
    64

"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from dpframe.mechanism import Noise
from dpframe.privacy_unit import PrivacyUnit
from dpframe.tuning.grid import ROW_CANDIDATES, representatives

Array = npt.NDArray[np.float64]

MISS = 0.05
"""The chance that noise alone makes some empty bin next to the bulk of a histogram look occupied (:func:`denoise`)."""

FAR = 1e-6
"""The chance that noise alone makes some empty bin cut off from the bulk look occupied (:func:`denoise`): such a
phantom would move a bound by orders of magnitude, not by one bin."""


@dataclass(frozen=True)
class Chosen:
    """What the tuning stage chose (released values: public): the unit, each measure's bounds, what was tuned."""

    unit: PrivacyUnit
    bounds: dict[str, tuple[Fraction, Fraction]]
    tuned: tuple[str, ...] = ()          # "max_rows", "max_groups": the unit's numbers that were chosen

    def rows(self) -> list[tuple[str, float]]:
        """(name, value) pairs for the diagnostics table."""
        out = [(f"{item} (chosen)", float(getattr(self.unit, item) or 0)) for item in self.tuned]
        for name, (lo, hi) in self.bounds.items():
            out += [(f"{name} lower bound (chosen)", float(lo)), (f"{name} upper bound (chosen)", float(hi))]
        return out


@dataclass(frozen=True)
class ErrorModel:
    """The release's error, from public facts: cells (G), noise per unit of sensitivity (k), measure kinds."""

    cells: int
    noise: float
    totals: int
    ratios: int


def denoise(noisy: npt.ArrayLike, noise: Noise) -> Array:
    """Noisy counts read as a histogram: the bins that stand out of the noise and their neighbours (post-processing).

    A bin *stands out* when its count exceeds the noise's (1 − MISS/bins) half-width (noise alone does that
    in some bin with probability ≤ MISS). The support starts at the largest count, if it stands out, and grows
    outwards while the next bin exceeds the (1 − MISS) half-width. A bin beyond it, cut off by bins that do
    not, joins (with the bins between) only if it exceeds the (1 − FAR/bins) half-width: noise alone lifts
    one of the many empty bins that high with probability ≤ FAR, where MISS would let it happen to about
    one histogram in 40 and move a bound to the far end of the grid. Counts inside the support are kept
    (floored at 0), counts outside are 0. Nothing stands out: all 0.

    Example:
        >>> from fractions import Fraction
        >>> denoise([3, 9, 40, 7, -2], Noise("discrete_laplace", Fraction(2), Fraction(1))).tolist()
        [0.0, 9.0, 40.0, 7.0, 0.0]

    """
    counts = np.asarray(noisy, dtype=np.float64)
    out: Array = np.zeros_like(counts)
    bins, unit = max(counts.size, 1), float(noise.unit)
    peak = int(np.argmax(counts)) if counts.size else 0
    if not counts.size or counts[peak] <= noise.half_width(1 - MISS / bins) / unit:
        return out
    weak = noise.half_width(1 - MISS) / unit
    far = np.flatnonzero(counts > noise.half_width(1 - FAR / bins) / unit)
    low, high = min(peak, int(far[0]) if far.size else peak), max(peak, int(far[-1]) if far.size else peak)
    while low > 0 and counts[low - 1] > weak:
        low -= 1
    while high < counts.size - 1 and counts[high + 1] > weak:
        high += 1
    out[low:high + 1] = np.maximum(counts[low:high + 1], 0.0)
    return out


def kept_rows(counts: npt.ArrayLike) -> Array:
    """Estimated rows kept at each candidate ``max_rows`` (counts: units per bin): Σ_u min(n_u, c).

    Example:
        >>> kept_rows(np.eye(1, len(ROW_CANDIDATES), 3)[0] * 10)[:6].tolist()   # 10 units of 4–5 rows (as 5)
        [10.0, 20.0, 30.0, 40.0, 50.0, 50.0]

    """
    h = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    c = np.asarray(ROW_CANDIDATES, dtype=np.float64)
    out: Array = (h[None, :] * np.minimum(representatives(ROW_CANDIDATES)[None, :], c[:, None])).sum(axis=1)
    return out


def rows_error(counts: npt.ArrayLike, model: ErrorModel) -> Array:
    """Estimated relative error of the query at each candidate ``max_rows`` (counts: units per bin)."""
    h = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    c = np.asarray(ROW_CANDIDATES, dtype=np.float64)
    v = representatives(ROW_CANDIDATES)
    total = max(float(h @ v), 1.0)
    dropped = (h[None, :] * np.maximum(v[None, :] - c[:, None], 0.0)).sum(axis=1)
    kept = np.maximum(kept_rows(h), 1.0)
    noise = model.cells * model.noise * c
    out: Array = model.totals * (dropped + noise) / total + model.ratios * (dropped / total + noise / kept)
    return out


def groups_error(counts: npt.ArrayLike, cost: npt.ArrayLike, cells: int) -> Array:
    """Estimated relative error at each candidate ``max_groups`` (counts: units per bin of groups touched).

    ``cost[i]``: what one cell pays, in units, when units keep ``ROW_CANDIDATES[i]`` groups (the selection
    threshold plus the noise of unit counts; 0 when nothing depends on it).
    """
    h = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    g = np.asarray(ROW_CANDIDATES, dtype=np.float64)
    v = representatives(ROW_CANDIDATES)
    total = max(float(h @ v), 1.0)
    dropped = (h[None, :] * np.maximum(v[None, :] - g[:, None], 0.0)).sum(axis=1)
    out: Array = (dropped + cells * np.asarray(cost, dtype=np.float64)) / total
    return out


def clipping_error(counts: npt.ArrayLike, edges: npt.ArrayLike, kind: str, noise: float) -> Array:
    """Estimated error (value units, up to the common 1/n) of each bounds pair ``(edges[a], edges[b])``.

    ``counts`` has ``len(edges) + 1`` bins: below ``edges[0]``, between consecutive edges, from the last
    edge on (ties go to the narrower pair). ``noise``: the noise, in value units, per unit of bound
    magnitude (G·k·max_rows). Pairs with ``a ≥ b`` are ``inf``. ``kind``: ``"sum"`` (noise ∝
    max(|lo|, |hi|)) or anything else (∝ width/2).

    Example:
        >>> e = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
        >>> err = clipping_error([0, 0, 0, 50, 50, 0], e, "sum", 1.0)
        >>> a, b = np.unravel_index(np.argmin(err), err.shape); (e[a], e[b])
        (np.float64(0.0), np.float64(2.0))

    """
    h = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    e = np.asarray(edges, dtype=np.float64)
    r = np.concatenate([e[:1], (e[:-1] + e[1:]) / 2, e[-1:]])          # a value standing for each bin
    mass, moment = np.cumsum(h), np.cumsum(h * r)
    # below lo = e[a]: bins 0..a; above hi = e[b]: bins b+1..
    lower = e * mass[:-1] - moment[:-1]
    upper = (moment[-1] - moment[:-1]) - e * (mass[-1] - mass[:-1])
    lo, hi = e[:, None], e[None, :]
    size = np.maximum(np.abs(lo), np.abs(hi)) if kind == "sum" else (hi - lo) / 2
    err: Array = lower[:, None] + upper[None, :] + noise * (size + 1e-6 * (hi - lo))   # ties: the narrower
    return np.where(lo < hi, err, np.inf)


__all__ = ["FAR", "MISS", "Chosen", "ErrorModel", "clipping_error", "denoise", "groups_error", "kept_rows",
           "rows_error"]
