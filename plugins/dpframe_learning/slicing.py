"""Accounting for τ computations on data-dependent slices: sequential (domino) composition vs RSC.

Reorder–Slice–Compute (digest §3): τ computations, each on a slice cut from what remains of the data
in a deterministic order. Two valid ways to pay for it, both implemented here:

* **Sequential (domino) composition** with deterministic slice sizes: the remainders of neighbouring
  datasets stay add/remove-adjacent, so every slice differs by at most one swap (§3.5). Each
  computation calibrated to be ε_s-DP *for swap-neighbours* costs ε_s; the total is ``τ·ε_s`` (pure).
* **RSC** (Theorem 2.1, explicit constants of §3.5): every slice size is padded with one-sided
  ``Geom(1 − e^{−ε₀})`` noise (never published), each computation is ε₀-DP for add/remove *and* for
  swap neighbours of its slice, and with ``p = 1/(1 + e^{ε₀})``, ``w = ⌈ln(1/δ̂)/ln(1/(1 − p))⌉`` the
  whole run is ``(2wε₀, δ̂)``-DP when w < τ (else ``2τε₀``, never better than sequential). A holder call
  (Lemma 2.6) releases the padded size and sync bit (ε₀) and the computation on slices that are one
  swap apart (no sync) or one addition apart (sync): ε₀ for a swap-stable computation, where the
  paper's generic (add/remove-only) computation pays 2ε₀ by group privacy, hence its 3wε₀.

For the exponential interior point both calibrations use the same sampling scale s (its score moves
by ≤ 1 under a swap and under an addition), so ε_s = ε₀ = 2s and RSC pays off once τ > 2w.
:func:`slice_plan` picks, for a budget, whichever lets each computation run with the larger ε₀ and
charges the cheaper valid bound.

Example:
    >>> from fractions import Fraction
    >>> rsc_calls(Fraction(1, 10), 1e-6)
    22
    >>> slice_plan(Fraction(1), Fraction(0), 4).method, slice_plan(Fraction(1), Fraction(1, 10**6), 400).method
    ('sequential', 'rsc')

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpframe.budgets import ApproxDP, PureDP, exact_log, up
from dpframe.noise import RandomSource, bernoulli_exp


def rsc_calls(epsilon0: Fraction, delta_hat: Fraction | float) -> int:
    """The RSC holder-call bound w = ⌈ln(1/δ̂)/ln(1/(1 − p))⌉, p = 1/(1 + e^{ε₀}) (§3.5), never below it.

    §10 T3: w = 22 at ε₀ = 0.1, δ̂ = 1e-6. ln(1/(1 − p)) = ln(1 + e^{−ε₀}). The quotient is formed in logs, each log
    within a few ulps (ε₀ read up; past ε₀ = 700, where e^{−ε₀} would be subnormal, ln ln(1 + e^{−ε₀}) ≥ −ε₀ − e^{−ε₀}
    is −ε₀; near δ̂ = 1, ln(1/δ̂) ≤ (1 − δ̂)/δ̂, in exact rationals) and raised by 10⁻¹² of their sizes: a δ̂ below
    the float range (10⁻⁴⁰⁰) or within 10⁻⁴⁰⁰ of 1, or a huge ε₀, gives the bound, not a float error (beyond
    :data:`MAX_CALLS` it is capped there: more than any number of slices, so RSC is not chosen).

    Example:
        >>> rsc_calls(Fraction(1, 10), Fraction(1, 10**400)), rsc_calls(Fraction(10**4), 1e-6) == MAX_CALLS
        (1430, True)
        >>> rsc_calls(Fraction(1, 10), Fraction(10**400 - 1, 10**400))      # ln(1/δ̂) ≈ 10⁻⁴⁰⁰, still one call
        1

    """
    delta_hat = Fraction(delta_hat)
    gap = delta_hat.denominator - delta_hat.numerator       # 1 − δ̂ = gap/denominator > 0
    log_log_inv = (exact_log(Fraction(gap, delta_hat.numerator)) if gap << 50 < delta_hat.denominator
                   else math.log(-exact_log(delta_hat)))     # ≥ ln ln(1/δ̂) but for float rounding
    eps = up(epsilon0)
    log_per_call = math.log(math.log1p(math.exp(-eps))) if eps < 700 else -eps
    log_calls = log_log_inv - log_per_call + 1e-12 * (1 + abs(log_log_inv) + abs(log_per_call))
    return MAX_CALLS if log_calls >= math.log(MAX_CALLS) else max(1, math.ceil(math.exp(log_calls)))


MAX_CALLS = 2**62
"""The cap of :func:`rsc_calls` (a bound beyond it exceeds every number of slices a query can have)."""


def sequential_cost(epsilon0: Fraction, slices: int) -> PureDP:
    """τ·ε₀: one swap-DP computation per deterministic slice (domino composition, §3.5)."""
    return PureDP(epsilon0 * slices)


def rsc_cost(epsilon0: Fraction, slices: int, delta_hat: Fraction) -> ApproxDP:
    """(2·min(w, τ)·ε₀, δ̂ if w < τ else 0) for pure, swap-stable ε₀-DP computations on Geom-padded slices.

    Each holder call costs ε₀ (padded size and sync bit, Lemma 2.4) + ε₀ (the computation on slices one
    swap or one addition apart); see the module docstring and ``docs/learning.md``.
    """
    w = rsc_calls(epsilon0, delta_hat)
    if w >= slices:
        return ApproxDP(2 * slices * epsilon0, 0)
    return ApproxDP(2 * w * epsilon0, delta_hat)


@dataclass(frozen=True)
class SlicePlan:
    """How τ slice computations are paid for: the method, the per-computation ε₀ and the charge."""

    method: Literal["sequential", "rsc"]
    epsilon0: Fraction
    slices: int
    cost: PureDP | ApproxDP
    alternative: str    # the other bound at this ε₀, for explain()


def _largest_rsc_epsilon0(epsilon: Fraction, slices: int, delta_hat: Fraction) -> Fraction:
    """The largest ε₀ (on a 1/2^40 grid) with 2·w(ε₀)·ε₀ ≤ ε, w < τ (0 if none); w grows with ε₀."""
    lo, hi = Fraction(0), epsilon / 2       # 2·w·ε₀ ≤ ε with w ≥ 1
    for _ in range(40):
        mid = (lo + hi) / 2
        c = rsc_cost(mid, slices, delta_hat)
        if c.epsilon <= epsilon and c.delta > 0:
            lo = mid
        else:
            hi = mid
    return Fraction(math.floor(lo * 2**40), 2**40)


def slice_plan(epsilon: Fraction, delta: Fraction, slices: int) -> SlicePlan:
    """For a budget (ε, δ) over τ slices: the bound giving each computation the larger ε₀.

    RSC is considered only when δ > 0 (its δ̂ is the budget's δ). The charge is the chosen bound at
    that ε₀, which is also the cheaper of the two there.
    """
    seq = epsilon / slices
    rsc = _largest_rsc_epsilon0(epsilon, slices, delta) if delta > 0 else Fraction(0)
    if rsc > seq:
        return SlicePlan("rsc", rsc, slices, rsc_cost(rsc, slices, delta),
                         f"sequential composition would cost ε={float(sequential_cost(rsc, slices).epsilon):.4g}")
    alt = (f"RSC would cost ε={float(rsc_cost(seq, slices, delta).epsilon):.4g}, δ={float(delta):.3g}"
           if delta > 0 else "RSC needs δ > 0")
    return SlicePlan("sequential", seq, slices, sequential_cost(seq, slices), alt)


def geometric(epsilon0: Fraction, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
    """``size`` exact draws of Geom(1 − e^{−ε₀}): P[G = k] = (1 − e^{−ε₀})·e^{−kε₀}, k ≥ 0 (§1).

    G counts the Bernoulli(e^{−ε₀}) successes before the first failure (each draw is exact).
    """
    out = np.zeros(size, dtype=np.int64)
    alive = np.arange(size)
    while alive.size:
        more = bernoulli_exp(epsilon0, alive.size, rng)
        out[alive[more]] += 1
        alive = alive[more]
    return out
