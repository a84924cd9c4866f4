"""Inner composition for early stopping: the cells of Lemma 11 and the exact δ of Eq. 4 / Thm 15.

Digest ``002_output_dp.md`` §2.3. An iteration stopped after k_j of its steps (public stopping points
k_1 < … < k_m) has the output-DP spec "stopped at k_j → ε_j", δ, where (Lemma 11) ε_j is *any*
composition theorem applied to the first k_j steps at δ_j and δ = Σ_j δ_j. The inner composition may
be non-additive — that is the point: the session still settles under basic composition (Thm 7).

* :func:`optimal_epsilon` — k adaptive ε-DP steps: the smallest ε_j whose exact optimal-composition δ
  (Kairouz, Oh & Viswanath 2015, Thm 3.3; homogeneous, valid under adaptivity) is ≤ δ_j:

      δ(ε_j) = Σ_{l=0}^{k} C(k, l) · max(0, e^{(k−l)ε} − e^{ε_j} e^{lε}) / (1 + e^ε)^k.

* zCDP steps (Gaussian noise): ρ adds up, ε_j = the CKS20 conversion of k_j·ρ at δ_j
  (:meth:`dpframe.ZCDP.to_approx`).
* :func:`lemma11_delta` (Eq. 4) and :func:`optimal_stopping_delta` (Thm 15, the prefix-free tree
  dynamic program over randomised-response outputs {0, 1, 2, 3}, collapsed to symbol counts since the
  steps are homogeneous) give the exact δ a spec with cells ε(O_j) needs when every step is (ε, δ_i)-DP
  (Lemma 12 reduces every (ε, δ_i)-DP step to RR_{ε,δ_i}): Eq. 4 ≥ Thm 15 ≥ the true worst case.
  They validate early-stopping specs (``tests/interactive/test_stopping.py``: oracle O6).

Example:
    >>> round(lemma11_delta(1.0, 0.0, (1, 2), (0.5, 1.5)), 6)            # digest O6, row 1
    0.497938
    >>> round(optimal_stopping_delta(1.0, 0.0, (1, 2), (0.5, 1.5)), 6)
    0.287649
    >>> round(optimal_epsilon(10, 0.5, 1e-6), 4) < 10 * 0.5
    True

"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln


def _log_comb(n: int, k: np.ndarray) -> np.ndarray:
    return np.asarray(gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1), dtype=np.float64)


def optimal_delta(k: int, eps: float, eps_total: float) -> float:
    """An upper bound of the exact δ at which k adaptive ε-DP steps are (eps_total, δ)-DP (KOV15 Thm 3.3).

    The terms are C(k, l)·p^{k−l}·q^l·(1 − e^{ε_total − (k−2l)ε}) (p = e^ε/(1 + e^ε), q = 1 − p), summed in logs
    relative to the largest (no term underflows). Float safety, so that every caller's check holds for the
    exact δ (review 37b: at k = 10⁶ the plain float sum was 1.2·10⁻⁹ below it, past the 10⁻⁹ margins):

    * the gap (k − 2l)ε − ε_total loses its digits to cancellation near 0: it is raised by 2⁻⁵⁰·(kε + |ε_total|),
      four times its rounding error, which only raises the terms (and may add a term of gap ≤ 0);
    * every other part of a term's log is a float of magnitude ≤ M = 2·lnΓ(k + 1) + 2·k·ln(1 + e^ε) + |ε_total|
      + 40, computed within a few ulps (scipy's gammaln, Cephes' lgam: ≤ 3.5·10⁻¹⁶ relative): the log of the sum
      is raised by 2⁻⁴⁶·M (≥ 64 ulps of M), and the exponential rounded up one ulp.

    So the result is ≥ the exact δ and within a relative 4·10⁻⁷ of it (k = 10⁶; 10⁻¹¹ for k ≤ 100).

    Example:
        >>> round(optimal_delta(1, 1.0, 0.5), 9) == round((math.e - math.exp(0.5)) / (1 + math.e), 9)
        True

    """
    ones = np.arange(k + 1, dtype=np.float64)
    gap = (k - 2 * ones) * eps - eps_total + 2.0**-50 * (k * eps + abs(eps_total))
    live = gap > 0                                    # the term of l ones is positive iff (k − 2l)ε > ε_total
    if not live.any():
        return 0.0
    log_norm = k * (eps + math.log1p(math.exp(-eps)))        # log (1 + e^ε)^k
    log_terms = _log_comb(k, ones[live]) + (k - ones[live]) * eps - log_norm + np.log(-np.expm1(-gap[live]))
    top = float(log_terms.max())
    slack = 2.0**-46 * (2 * float(gammaln(k + 1)) + 2 * log_norm + abs(eps_total) + 40)
    log_total = top + math.log(float(np.exp(log_terms - top).sum())) + slack
    return math.nextafter(math.exp(log_total), math.inf)


def optimal_epsilon(k: int, eps: float, delta: float) -> float:
    """The smallest ε_total ≤ k·ε with :func:`optimal_delta` ≤ δ (bisection; errs upwards). Public inputs."""
    hi = k * eps
    if delta <= 0 or optimal_delta(k, eps, 0.0) <= delta * (1 - 1e-9):
        return hi if delta <= 0 else 0.0
    lo = 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if optimal_delta(k, eps, mid) <= delta * (1 - 1e-9):
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return hi


def _rr(eps: float, delta_i: float) -> tuple[float, float]:
    """(a, b): P[RR = 1], P[RR = 2] under x0 of Kairouz's RR_{ε,δ} (Lemma 12); under x1 they swap."""
    a = (1 - delta_i) * math.exp(eps) / (1 + math.exp(eps))
    return a, (1 - delta_i) / (1 + math.exp(eps))


def _gain(a: float, b: float, k: int, eps_cell: float) -> np.ndarray:
    """P0(y) − e^{ε(cell)}·P1(y) per output y ∈ {1, 2}^k with l ones, l = 0..k (array index l)."""
    ones = np.arange(k + 1, dtype=np.float64)
    return np.asarray(a**ones * b ** (k - ones) - math.exp(eps_cell) * b**ones * a ** (k - ones), dtype=np.float64)


def _check(stops: Sequence[int], cells: Sequence[float]) -> None:
    if len(stops) != len(cells) or not stops or any(b <= a for a, b in zip(stops, stops[1:], strict=False)):
        raise ValueError("stops must be increasing, one cell ε per stop")


def lemma11_delta(eps: float, delta_i: float, stops: Sequence[int], cells: Sequence[float]) -> float:
    """Eq. 4: Σ_j (exact optimal-composition δ of the first k_j (ε, δ_i)-DP steps at ε(O_j))."""
    _check(stops, cells)
    a, b = _rr(eps, delta_i)
    total = 0.0
    for k, e in zip(stops, cells, strict=True):
        ones = np.arange(k + 1, dtype=np.float64)
        total += (1 - (1 - delta_i) ** k) + float((np.exp(_log_comb(k, ones)) * np.maximum(_gain(a, b, k, e), 0)).sum())
    return total


def optimal_stopping_delta(eps: float, delta_i: float, stops: Sequence[int], cells: Sequence[float]) -> float:
    """Thm 15: δ_OPT = max over prefix-free output sets of Σ_j Σ_{y∈S_j} (P0(y) − e^{ε(O_j)} P1(y)).

    Tree DP, V_j(y) = max(gain_j(y), Σ_z V_{j+1}(y‖z)), V_m = max(0, gain_m), on symbol counts: a prefix
    holding a 3 has P0 = 0 (V = 0), one holding a 0 (and no 3) has P1 = 0 (V = P0(y)), the others are
    determined by their number l of 1s.
    """
    _check(stops, cells)
    a, b = _rr(eps, delta_i)
    k = stops[-1]
    value = np.maximum(_gain(a, b, k, cells[-1]), 0.0)        # V_m per output with l ones (index l)
    for j in range(len(stops) - 2, -1, -1):
        kj, ext_len = stops[j], stops[j + 1] - stops[j]
        weights = np.exp(_log_comb(ext_len, np.arange(ext_len + 1, dtype=np.float64)))
        ones = np.arange(kj + 1)
        extend = np.array([float((weights * value[i:i + ext_len + 1]).sum()) for i in ones])
        extend += a**ones * b ** (kj - ones) * (1 - (1 - delta_i) ** ext_len)   # extensions that add a 0
        value = np.maximum(_gain(a, b, kj, cells[j]), extend)
    k1 = stops[0]
    return float((np.exp(_log_comb(k1, np.arange(k1 + 1, dtype=np.float64))) * value).sum()) + (1 - (1 - delta_i) ** k1)
