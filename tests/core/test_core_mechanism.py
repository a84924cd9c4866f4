"""The mechanism contract (dpframe/mechanism/): Statistic keys and row bounds, Noise calibration, cost and
the accuracy figures explain() prints."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpframe as dp
from dpframe.mechanism import Mechanism, Noise, Statistic
from dpframe.noise import SeededRandomSource
from dpframe.plugin import plugin_host

# ------------------------------------------------------------------------------------------ Statistic


def test_statistic_keys_are_distinct_and_readable() -> None:
    stats = [Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"), Statistic("nonnull", "y"),
             Statistic("fixed_sum", "x", Fraction(0), Fraction(1), Fraction(0), 1, -3),
             Statistic("fixed_sum", "x", Fraction(0), Fraction(1), Fraction(1, 2), 1, -3),
             Statistic("fixed_sum", "x", Fraction(0), Fraction(1), Fraction(1, 2), 2, -3),
             Statistic("fixed_sum", "x", Fraction(0), Fraction(1), Fraction(1, 2), 2, -4),
             Statistic("fixed_sum", "x", Fraction(0), Fraction(2), Fraction(1, 2), 2, -4),
             Statistic("indicator_sum", "x", Fraction(0), Fraction(1))]
    keys = [s.key for s in stats]
    assert len(set(keys)) == len(keys)
    assert all(k.startswith("__") for k in keys)
    assert Statistic("rows").key == "__rows" and Statistic("nonnull", "x").key == "__nonnull:x"


@pytest.mark.parametrize("lo, hi, shift, power, k, bound", [
    (0, 500, 0, 1, -6, 500 * 64 + 1),
    (0, 500, 250, 1, -7, 250 * 128 + 1),
    (0, 10, 5, 2, 0, 25 + 1),
    (0, 10, 5, 2, 3, 4 + 1),          # ⌈25/8⌉ = 4
    (-3, 1, 0, 1, 0, 3 + 1),
    (Fraction(1, 3), 1, 0, 1, -2, 4 + 1),
])
def test_row_bound_by_hand(lo, hi, shift, power: int, k: int, bound: int) -> None:
    s = Statistic("fixed_sum", "x", Fraction(lo), Fraction(hi), Fraction(shift), power, k)
    assert s.row_bound() == bound
    assert Statistic("rows").row_bound() == 1 and Statistic("nonnull", "x").row_bound() == 1


# ---------------------------------------------------------------------------------------------- Noise


@pytest.mark.parametrize("sens, share, dist, scale", [
    (Fraction(10), dp.PureDP(0.5), "discrete_laplace", Fraction(20)),
    (Fraction(3), dp.PureDP(Fraction(1, 3)), "discrete_laplace", Fraction(9)),
    (Fraction(2), dp.ZCDP(0.25), "discrete_gaussian", Fraction(8)),
    (Fraction(7), dp.ZCDP(Fraction(1, 10)), "discrete_gaussian", Fraction(49 * 5)),
])
def test_calibration_costs_exactly_the_share(sens: Fraction, share: dp.Budget, dist: str, scale: Fraction) -> None:
    n = Noise.calibrate(sens, share)
    assert (n.distribution, n.scale, n.sensitivity) == (dist, scale, sens)
    assert n.cost() == share


def test_calibration_refuses_approx_shares() -> None:
    with pytest.raises(dp.BudgetConversionError):
        Noise.calibrate(Fraction(1), dp.ApproxDP(1, 1e-6))


def test_noise_samples_are_integers_from_the_given_source() -> None:
    n = Noise.calibrate(Fraction(1), dp.PureDP(1))
    a = n.sample(1000, SeededRandomSource(5))
    b = n.sample(1000, SeededRandomSource(5))
    assert a.dtype == np.int64 and a.shape == (1000,) and (a == b).all()
    assert abs(a.mean()) < 0.3 and 1.0 < a.var() < 2.8          # var of DLap(t=1) = 1.843...
    g = Noise.calibrate(Fraction(1), dp.ZCDP(Fraction(1, 8))).sample(2000, SeededRandomSource(1))
    assert g.dtype == np.int64 and 3.0 < g.var() < 5.0          # σ² = 4 (discrete: a bit less)


def test_std_and_describe() -> None:
    lap = Noise("discrete_laplace", Fraction(40), Fraction(10))
    t = 40.0
    assert lap.std() == pytest.approx(math.sqrt(2 * math.exp(-1 / t) / (1 - math.exp(-1 / t)) ** 2))
    assert lap.describe().startswith("discrete Laplace(t=40, Δ=10)") and "(95%)" in lap.describe()
    g = Noise("discrete_gaussian", Fraction(9), Fraction(3), Fraction(1, 8))
    assert g.std() == pytest.approx(3 / 8)
    assert "σ²=9" in g.describe() and "grid 2^-3" in g.describe()


def _lap_outside(t: float, k: int) -> float:
    """P[|Z| > k] for the discrete Laplace with scale t."""
    return 2 * math.exp(-(k + 1) / t) / (1 + math.exp(-1 / t))


@pytest.mark.parametrize("t", [0.1, 1, 6, 40, 1000, 123456])
def test_laplace_ci95_is_the_smallest_integer_with_95_percent_coverage(t: float) -> None:
    k = Noise("discrete_laplace", Fraction(t), Fraction(1)).ci95()
    assert k == int(k)
    assert _lap_outside(t, int(k)) <= 0.05
    if k > 0:
        assert _lap_outside(t, int(k) - 1) > 0.05


def _gauss_outside(s2: float, k: float) -> float:
    w = int(60 * math.sqrt(s2)) + 60
    x = np.arange(-w, w + 1, dtype=np.float64)
    p = np.exp(-(x * x) / (2 * s2))
    return float(p[np.abs(x) > k].sum() / p.sum())


@pytest.mark.parametrize("s2", [10_000.0, 10**6])
def test_gaussian_ci95_covers_95_percent_for_large_sigma(s2: float) -> None:
    assert _gauss_outside(s2, Noise("discrete_gaussian", Fraction(s2), Fraction(1)).ci95()) <= 0.05


@pytest.mark.parametrize("s2", [1.0, 2.0, 4.0, 16.0, 100.0])
def test_gaussian_ci95_covers_95_percent_for_small_sigma(s2: float) -> None:
    assert _gauss_outside(s2, Noise("discrete_gaussian", Fraction(s2), Fraction(1)).ci95()) <= 0.05


# ----------------------------------------------------------------------------------- plugin registry


def test_builtin_mechanisms_satisfy_the_protocol() -> None:
    host = plugin_host()
    mechs = dict((m.name, m) for _, m in host.mechanisms())
    assert {"aggregates", "partition_selection"} <= set(mechs)
    for m in mechs.values():
        assert isinstance(m, Mechanism)
    assert host.mechanism_for("mean", "pure").name == "aggregates"
    assert host.mechanism_for("partition_selection", "approx").name == "partition_selection"
    with pytest.raises(dp.PluginError):
        host.mechanism_for("no_such_kind", "pure")
    with pytest.raises(dp.PluginError):
        host.mechanism_for("partition_selection", "pure")     # selection needs δ
    assert "polars" in host.backend_names()
