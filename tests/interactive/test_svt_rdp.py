"""The sparse vector's RDP curve (thesis (7.3) for c = 1) and its use by RDP sessions."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting import curves


def _sinh_bound(eps: float, a: float) -> float:
    """RDP of any ε-DP mechanism (randomized response), by hand: log[(sinh(αε) − sinh((α−1)ε))/sinh ε]/(α−1)."""
    return min(eps, math.log((math.sinh(a * eps) - math.sinh((a - 1) * eps)) / math.sinh(eps)) / (a - 1))


@pytest.mark.parametrize(("e1", "e2", "c"), [(0.1, 0.9, 1), (0.5, 1.0, 1), (0.2, 0.3, 3)])
def test_curve_against_hand_formula(e1: float, e2: float, c: int) -> None:
    curve = curves.sparse_vector(e1, e2, c)
    for a in (1.5, 2.0, 8.0, 64.0):
        classic = _sinh_bound(e1 + e2, a)
        expected = min(classic, _sinh_bound(e1, a) + e2) if c == 1 else classic
        assert curve.rdp_at([a])[0] == pytest.approx(expected, rel=1e-9)
    assert acc.from_json(curve.to_json()).rdp_at([8.0])[0] == curve.rdp_at([8.0])[0]   # ledger round trip


def test_c1_bound_is_tighter_somewhere() -> None:
    # (0.5, 1.0): at α = 2, R_{0.5}(2) + 1 = log(1.25525) + 1 = 1.22734 < R_{1.5}(2) = log(3.70480) = 1.30963
    curve = curves.sparse_vector(0.5, 1.0, 1)
    assert curve.rdp_at([2.0])[0] == pytest.approx(1.22734, abs=1e-5)
    assert curves.pure(1.5).rdp_at([2.0])[0] == pytest.approx(1.30963, abs=1e-5)


def _dlap(t: float, r: int) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(-r, r + 1)
    p = np.exp(-np.abs(k) / t)
    return k, p / p.sum()


def _svt_outputs(qs: list[int], threshold: int, t1: float, t2: float, r: int = 200) -> dict[int, float]:
    """Exact output distribution of AboveThreshold (c = 1): index of the first "above", or -1."""
    ks, pr = _dlap(t1, r)
    _, pn = _dlap(t2, r)
    tail = np.concatenate([[1.0], 1 - np.cumsum(pn)])    # tail[i] = P[ν ≥ i − r]
    out: dict[int, float] = {}
    for rho, p_rho in zip(ks, pr, strict=True):
        alive = float(p_rho)
        for i, q in enumerate(qs):
            above = float(tail[int(np.clip(threshold + rho - q + r, 0, 2 * r + 1))])
            out[i] = out.get(i, 0.0) + alive * above
            alive *= 1 - above
        out[-1] = out.get(-1, 0.0) + alive
    return out


def test_curve_bounds_exact_renyi_divergence_of_small_svt() -> None:
    """Exact Rényi divergences of 4-query streams whose queries move independently by ±1 (the adversarial
    streams: every query but the stopping one moves down on D, the stopping one up) against the curve."""
    # discrete SVT as in svt.py with Δ = 1: threshold noise DLap(1/ε₁), query noise DLap(2/ε₂)
    e1, e2 = 0.5, 1.0
    curve = curves.sparse_vector(e1, e2, 1)
    orders = [2.0, 16.0, 64.0]
    bound = curve.rdp_at(orders)
    worst = np.zeros(len(orders))
    outputs = functools.cache(lambda values: _svt_outputs(list(values), 0, 1 / e1, 2 / e2, r=120))  # once per stream
    for qs in itertools.product([0, 2], repeat=4):
        p = outputs(qs)
        for shifts in itertools.product((1, -1), repeat=4):
            q = outputs(tuple(v + s for v, s in zip(qs, shifts, strict=True)))
            for j, a in enumerate(orders):
                for x, y in ((p, q), (q, p)):
                    worst[j] = max(worst[j], math.log(sum(x[o] ** a * y[o] ** (1 - a) for o in x)) / (a - 1))
    assert np.all(worst <= bound + 1e-9)
    assert worst[2] > 0.9 * bound[2]                                  # close to the curve at α = 64 (0.928)
    # the query term is needed: a curve R_{ε₁}(α) + ε₂/2 would be violated (the (7.3) term binds at α = 2)
    assert np.any(worst > curves.pure(e1).rdp_at(orders) + e2 / 2)
    assert bound[0] < curves.pure(e1 + e2).rdp_at([2.0])[0]


def test_rdp_session_charges_the_curve() -> None:
    data = pl.DataFrame({"g": [i % 10 for i in range(1000)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(5, 1e-6),
                      accountant="rdp", seed=1)
    sv = sess.sparse_vector(threshold=500, max_positives=1, budget=dp.PureDP(1))
    charged = np.asarray(sv.charged().values)
    plain = np.asarray(sess.accountant.charge(dp.PureDP(1)).values)
    assert np.all(charged <= plain + 1e-12) and np.any(charged < plain - 1e-3)
    sv.close()
    assert sess.spent().epsilon < sess.accountant.report(sess.accountant.charge(dp.PureDP(1))).epsilon
