"""The boundary wrapper (digest 000 §3.10, oracles O9–O12, O18): cost formulas, exact oracle, LP check."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.boundary import (
    boundary_coin,
    boundary_probability,
    minority_steps,
    q_boundary,
    wrapped_law,
    wrapped_test,
)
from dpframe.noise import SeededRandomSource
from dpframe.release import PrivateReader

from .lp import is_q_target


def _t_ratio(eps: float, n: int = 200_000) -> float:
    """t(ε)/ε: the largest of the log-ratios (3)–(7) of Lemma E.1 on a grid of π (digest O9)."""
    e = math.exp(eps)
    p = np.linspace(0, 0.5, n + 2)[1:-1]
    same = [np.log((1 - p / e) / (1 + p / e) * (1 + p) / (1 - p)), np.log((p / e) / (1 + p / e) * (1 + p) / p)]
    p = np.linspace(1 / (2 * e), 1 / (1 + e), n + 2)[1:-1]
    cross = [np.log(p / (1 + p) * (2 - e * p) / (e * p)), np.log((1 - p) / (1 + p) * (2 - e * p) / (1 - e * p)),
             np.log(p / (1 + p) * (2 - e * p) / (1 - e * p))]
    return max(float(np.abs(x).max()) for x in same + cross) / eps


def test_o9_wrapper_privacy_ratio_is_at_most_four_thirds() -> None:
    for eps, expected in [(0.01, 1.3223), (0.1, 1.2314), (0.5, 1.0), (1, 1.0), (2, 1.0)]:
        ratio = _t_ratio(eps)
        assert ratio == pytest.approx(expected, abs=1e-3)
        assert ratio <= 4 / 3


def test_o10_boundary_q() -> None:
    for eps, q in [(1e-9, 2 / 7), (0.01, 0.284285), (0.1, 0.271365), (0.5, 0.214296), (1, 0.149999)]:
        assert q_boundary(eps) == pytest.approx(q, abs=1e-6)
    assert q_boundary(0.1, t=0.1) == pytest.approx((math.exp(0.1) - 1) / (2 * (math.exp(0.2) - 1)), rel=1e-12)
    assert q_boundary(1000) == 0.0                       # no overflow


def test_o11_o12_wrapped_law() -> None:
    for s, expected in [(0.5, (1 / 3, 1 / 3, 1 / 3)), (0.9, (0.090909, 0.090909, 0.818182)),
                        (0.99, (0.009901, 0.009901, 0.980198))]:
        law = wrapped_law(min(s, 1 - s))
        assert law == pytest.approx(expected, abs=1e-6)
        assert law[2] == pytest.approx(s / (2 - s), abs=1e-12)       # the majority is reported w.p. p/(2−p)
        assert sum(law) == pytest.approx(1)
    pi = 0.5 * math.exp(-2)                               # O12: Laplace AboveThreshold, f − T = 20, ε = 0.1
    assert pi == pytest.approx(0.0676676, abs=1e-7)
    assert boundary_probability(pi) == pytest.approx(0.0633789, abs=1e-7)


@pytest.mark.parametrize("scale", [Fraction(2), Fraction(10, 3)])
def test_exact_oracle_matches_the_discrete_laplace_pmf(scale: Fraction) -> None:
    """π from the closed form r^m/(1+r) equals the brute-force minority mass; the coin is π/(1+π)."""
    r = math.exp(-1 / float(scale))
    z = np.arange(-4000, 4001)
    pmf = np.exp(-np.abs(z) / float(scale))
    pmf /= pmf.sum()
    for value, bar in [(0, 0), (5, 0), (-3, 0), (100, 104), (7, 8)]:
        above = pmf[value + z >= bar].sum()
        m = minority_steps(value, bar)
        assert min(above, 1 - above) == pytest.approx(r**m / (1 + r), rel=1e-9)
        assert boundary_probability(r**m / (1 + r)) == pytest.approx(r**m / (1 + r + r**m), rel=1e-12)


def _wrapped_exact_law(value: int, bar: int, scale: float) -> np.ndarray:
    """(P[boundary], P[above], P[below]) of the wrapped discrete-Laplace test, exactly."""
    r = math.exp(-1 / scale)
    m = minority_steps(value, bar)
    pi = r**m / (1 + r)
    above = pi if bar - value >= 1 else 1 - pi
    top = pi / (1 + pi)
    return np.array([top, (1 - top) * above, (1 - top) * (1 - above)])


def test_coin_and_wrapped_test_sample_the_exact_law() -> None:
    """Statistical test of the sampler on neighbouring values v, v ± 1 (5σ per outcome)."""
    rng = SeededRandomSource(11)
    scale = Fraction(2)
    n = 3000
    for value in (-1, 0, 2):
        expected = _wrapped_exact_law(value, 0, 2.0)
        draws = [wrapped_test(value, 0, scale, rng) for _ in range(n)]
        counts = np.array([draws.count(k) for k in ("boundary", "above", "below")])
        sigma = np.sqrt(n * expected * (1 - expected))
        assert np.all(np.abs(counts - n * expected) <= 5 * sigma + 1), (value, counts, n * expected)
    coins = sum(boundary_coin(Fraction(1), 2, rng) for _ in range(n))
    p = math.exp(-2) / (1 + math.exp(-1) + math.exp(-2))
    assert abs(coins - n * p) <= 5 * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize(("eps", "sensitivity"), [(0.1, 1), (0.5, 1), (1.0, 2), (0.3, 3)])
def test_wrapped_discrete_test_is_t_dp_with_a_q_target(eps: float, sensitivity: int) -> None:
    """Exact enumeration + LP (digest O18): on every pair shifted by ≤ Δ the wrapper is 4ε/3-DP and
    "boundary" is a q_boundary(ε)-target at t = 4ε/3 (the channel charges exactly that pair)."""
    scale = sensitivity / eps
    t = 4 * eps / 3
    top = np.array([True, False, False])
    pairs = [(v, v + s) for v in range(-4 * sensitivity - 3, 4 * sensitivity + 4)
             for s in range(-sensitivity, sensitivity + 1) if s]
    for a, b in pairs:
        za, zb = _wrapped_exact_law(a, 0, scale), _wrapped_exact_law(b, 0, scale)
        assert np.max(np.abs(np.log(za / zb))) <= t + 1e-12
        assert is_q_target(za, zb, t, top, q_boundary(eps) * (1 - 1e-6)), (a, b)


def _session(seed: int = 0) -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(200, 1e-5), seed=seed)


def test_channel_boundary_test_charges_only_the_boundary() -> None:
    sess = _session(3)
    q = q_boundary(0.75)
    with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6, min_q=q) as ch:
        far = [ch.boundary_test(sess.table("t").filter(pl.col("g") <= g).agg(dp.len()), threshold=300)
               for g in (0, 5)]
        assert far == ["below", "above"] and ch.hits == 0           # far from the threshold: free
        near = sess.table("t").filter(pl.col("g") <= 2).agg(dp.len())    # exactly 300 = the threshold
        outcomes = [ch.boundary_test(near, threshold=300) for _ in range(30) if not ch.closed]
        assert outcomes.count("boundary") == ch.hits >= 1                # π ≈ 0.46: ⊤ about a third of the time
        assert set(outcomes) <= {"boundary", "above", "below"}
    with pytest.raises(dp.BudgetError, match="q ="):                     # a NotPrior channel's q is too large
        with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6) as ch2:
            ch2.boundary_test(near, threshold=300)


def test_boundary_test_bad_input_charges_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    sess = _session(4)
    q = sess.table("t").agg(dp.len())
    with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6, min_q=0.1) as ch:
        def no_data(*a: object, **k: object) -> None:
            raise AssertionError("data read before admission")
        monkeypatch.setattr(PrivateReader, "run", no_data)
        with pytest.raises(dp.BudgetError, match="4/3"):                 # 4/3 · 0.8 > 1
            ch.boundary_test(q, threshold=3, epsilon=0.8)
        with pytest.raises(dp.DPFrameError):
            ch.boundary_test(q, threshold=float("nan"))
        with pytest.raises(dp.PlanError):
            ch.boundary_test(sess.table("t").agg(dp.mean("u", bounds=(0, 10))), threshold=3)
        assert ch.calls == 0 and ch.hits == 0
    with _session(5).target_charging(epsilon=1, max_hits=5, delta=1e-6, per_unit=True) as ch3:
        with pytest.raises(dp.PlanError, match="per-unit"):
            ch3.boundary_test(q, threshold=3)
