"""A unit that can change one coordinate only is charged the exact 1-D curve of its noise.

Without a group-by, or when a unit can touch at most one group (a row-level unit, ``max_groups=1``), the
neighbouring outputs of a count or a sum differ in one coordinate: the pair is (Z, Z + Δ) for the discrete
Laplace / Gaussian Z, and its exact privacy profile is what an RDP/PLD session composes. The expected
values are computed here by summing the discrete Laplace pmf directly, not with the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

import dpframe as dp

DATA = pl.DataFrame({"u": list(range(200)), "g": ["a", "b"] * 100, "x": [1.0] * 200})
DELTA = 1e-6


def composed_epsilon(delta: float, t: float, sensitivity: int, times: int) -> float:
    """ε(δ) of ``times`` releases of DL(t) against DL(t) + Δ, exactly: the loss (|k − Δ| − |k|)/t lies on
    the lattice of multiples of 1/t, so its distribution under DL(t) composes by convolution (symmetric
    noise: both directions alike)."""
    norm = (1 - math.exp(-1 / t)) / (1 + math.exp(-1 / t))
    one = np.zeros(2 * sensitivity + 1)                  # index m + Δ for the loss m/t, m ∈ [−Δ, Δ]
    for k in range(-int(80 * t) - sensitivity, int(80 * t) + sensitivity):
        one[abs(k - sensitivity) - abs(k) + sensitivity] += norm * math.exp(-abs(k) / t)
    dist = np.ones(1)
    for _ in range(times):
        dist = np.convolve(dist, one)
    loss = (np.arange(dist.size) - times * sensitivity) / t

    def delta_at(eps: float) -> float:
        return float(np.sum(dist * np.maximum(0.0, 1 - np.exp(eps - loss))))

    lo, hi = 0.0, times * sensitivity / t
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if delta_at(mid) <= delta else (mid, hi)
    return hi


def session(unit: dp.PrivacyUnit) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=unit, budget=dp.ApproxDP(20, 1e-5), accountant="pld", seed=1)


def test_ungrouped_counts_are_charged_their_exact_discrete_laplace_curve() -> None:
    # Δ = 3 (max_rows) on one coordinate, ε = 1/4 each: t = 12. The exact curve composes well below the
    # ε-DP curve's composition (the randomized-response pair, the worst ε-DP pair); with Δ = 1 the two
    # coincide (the discrete Laplace loss is then ±ε: randomized response itself).
    sess = session(dp.PrivacyUnit("u", max_rows=3))
    for _ in range(20):
        sess.table("t").agg(dp.len()).collect(budget=dp.PureDP(0.25))
    want = composed_epsilon(DELTA, 12.0, 3, 20)
    rr = composed_epsilon(DELTA, 4.0, 1, 20)             # 20 × (ε = 1/4)-DP by the RR pair
    assert want < rr - 0.1
    reported = sess.spent_report(DELTA)["pld"]
    assert want - 1e-9 <= reported <= want + 2e-3          # never under the exact value


@pytest.mark.parametrize("unit, cells", [(dp.PrivacyUnit.row(), 1), (dp.PrivacyUnit("u", max_rows=3, max_groups=1), 1),
                                         (dp.PrivacyUnit("u", max_rows=3), 3)])
def test_a_group_by_is_charged_exactly_only_when_a_unit_changes_one_group(unit: dp.PrivacyUnit, cells: int) -> None:
    sess = session(unit)
    for _ in range(20):
        sess.table("t").group_by("g", keys=["a", "b"]).agg(dp.len()).collect(budget=dp.PureDP(0.25))
    reported = sess.spent_report(DELTA)["pld"]
    rows = unit.max_rows
    if cells == 1:          # Δ = max_rows on one coordinate, t = 4Δ
        want = composed_epsilon(DELTA, 4.0 * rows, rows, 20)
    else:                   # the rows may be split over 3 groups: the dimension-free ε-DP curve (RR pair)
        want = composed_epsilon(DELTA, 4.0, 1, 20)
    assert want - 1e-9 <= reported <= want + 2e-3


def test_a_sensitivity_beyond_the_exact_curves_range_keeps_the_dimension_free_curve() -> None:
    # Δ > 2**53 (e.g. a sum's grid steps times a huge max_rows): the exact 1-D curves refuse such a Δ, so the
    # charge stays the ε-DP curve rather than refusing the query.
    from fractions import Fraction

    from dpframe_aggregates.aggregates import noise_curve

    from dpframe.mechanism import Noise

    huge = Noise.calibrate(Fraction(2**60), dp.PureDP(1024))
    curve = noise_curve(huge, 1)
    assert curve.pure_eps == pytest.approx(1024.0)
    assert noise_curve(Noise.calibrate(Fraction(3), dp.PureDP(1)), 1).label.startswith("discrete Laplace")
