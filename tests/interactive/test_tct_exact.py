"""Whole-channel exact checks of target charging (issue 23): for each call type, the true privacy loss of a
channel on small neighbouring inputs, by enumeration of its transcripts (:mod:`.exact_channel`), against
the channel's reservation — and a cheaper accounting that the same enumeration shows to be unsound, so
each check can fail.

The per-call laws are the implementation's exactly: discrete Laplace of scale Δ/ε (Δ = 1: counts of a
row-level unit), the wrapped test of :mod:`dpframe.interactive.boundary`, the noisy argmax of
``select_best`` with its tie rule. Each channel makes up to ``CALLS`` calls (more calls can only leak
more, so the true loss of a longer interaction is at least this).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.boundary import minority_steps, q_boundary
from dpframe.interactive.tct import ChannelPlan, q_between, q_notprior
from dpframe.noise import discrete_laplace_tail

from .exact_channel import channel_delta

CALLS = 300
TAU, DELTA = 2, 1e-3


def _session() -> dp.Session:
    data = pl.DataFrame({"u": range(100), "g": [i % 5 for i in range(100)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(1000, 1e-2))


def _reserved(**kwargs: object) -> float:
    """The ε' the channel reserves (read without opening it: nothing is charged)."""
    return _session().target_charging(max_hits=TAU, delta=DELTA, **kwargs).plan.epsilon  # type: ignore[arg-type]


def _above(value: int, bar: int, scale: float) -> float:
    """P[value + Z ≥ bar] for Z ~ discrete Laplace(scale)."""
    return discrete_laplace_tail(scale, bar - value)


@pytest.mark.parametrize("p0", [0.02, 0.1, 0.3])
def test_notprior_channel_true_loss_within_reservation(p0: float) -> None:
    """NotPrior tests (worst case p₁ = e^ε·p₀ for the target), halting at τ hits."""
    eps, tau, delta = 0.5, 3, 1e-3
    plan = ChannelPlan.optimise(eps, q_notprior(eps), tau, delta)
    hit = np.array([True, False])

    def law(p: float) -> np.ndarray:
        return np.array([p, 1 - p])

    p1 = min(1.0, math.exp(eps) * p0)
    assert channel_delta(law(p1), law(p0), hit, tau, 400, plan.epsilon) <= delta
    # An odometer charging only the hits seen (τ·ε) is not a valid guarantee for the interaction.
    assert max(channel_delta(law(min(1, math.exp(eps) * p)), law(p), hit, tau, 400, tau * eps)
               for p in (0.02, 0.1, 0.3)) > delta


@pytest.mark.parametrize("width", [1, 3])
def test_between_channel_true_loss_within_reservation(width: int) -> None:
    """BetweenThresholds on values v vs v ± 1 around a band of ``width`` grid steps: the channel opened with
    min_q = q_between covers it; charging it with the NotPrior q (larger, so fewer accesses) does not."""
    eps = 0.5
    good = _reserved(epsilon=eps, min_q=q_between(eps, width, 1))
    notprior = ChannelPlan.optimise(eps, q_notprior(eps), TAU, DELTA).epsilon
    hit = np.array([False, True, False])

    def law(v: int) -> np.ndarray:      # below, between, above of v + Z for the band [0, width]
        below, above = 1 - _above(v, 0, 1 / eps), _above(v, width + 1, 1 / eps)
        return np.array([below, 1 - below - above, above])

    pairs = [(v, v + s) for v in range(-4, width + 5) for s in (1, -1)]
    assert max(channel_delta(law(a), law(b), hit, TAU, CALLS, good) for a, b in pairs) <= DELTA
    if width == 1:       # the narrow band: q_between ≈ 0.39·q_notprior, and the NotPrior q's channel leaks
        assert max(channel_delta(law(a), law(b), hit, TAU, CALLS, notprior) for a, b in pairs) > DELTA


def test_boundary_channel_true_loss_within_reservation() -> None:
    """The boundary wrapper (charged t = 4ε/3 with q_boundary(ε)) on values v vs v ± 1 around the threshold."""
    eps = 0.375                                     # ¾ of the channel's ε = 0.5: the default call ε
    reserved = _reserved(epsilon=4 * eps / 3, min_q=q_boundary(eps))
    hit = np.array([True, False, False])

    def law(v: int) -> np.ndarray:      # boundary, above, below of the wrapped test of v + Z ≥ 0
        r = math.exp(-eps)
        pi = r ** minority_steps(v, 0) / (1 + r)
        above = pi if -v >= 1 else 1 - pi
        top = pi / (1 + pi)
        return np.array([top, (1 - top) * above, (1 - top) * (1 - above)])

    pairs = [(v, v + s) for v in range(-5, 6) for s in (1, -1)]
    assert max(channel_delta(law(a), law(b), hit, TAU, CALLS, reserved) for a, b in pairs) <= DELTA
    # charging only the boundary answers seen (τ·t) would not cover the interaction
    assert max(channel_delta(law(a), law(b), hit, TAU, CALLS, TAU * 4 * eps / 3) for a, b in pairs) > DELTA


def test_per_unit_channel_true_loss_within_reservation() -> None:
    """Per-unit charging (Alg. 5): unit u adds 1 to every count; each "above" charges u, and after τ of them u
    is removed, so later calls have the same law with and without u — the transcript's privacy loss is that
    of a channel halting at u's τ-th hit. Without the removal the same reservation would not cover it."""
    eps = 0.5
    reserved = _reserved(epsilon=eps, per_unit=True)
    assert reserved == ChannelPlan.optimise(eps, q_notprior(eps), TAU, DELTA).epsilon
    hit = np.array([True, False])
    worst = never_removed = 0.0
    for v in range(-6, 7):                          # count without u, threshold 0
        with_u, without = _above(v + 1, 0, 1 / eps), _above(v, 0, 1 / eps)
        p, q = np.array([with_u, 1 - with_u]), np.array([without, 1 - without])
        worst = max(worst, channel_delta(p, q, hit, TAU, CALLS, reserved))
        never_removed = max(never_removed, channel_delta(p, q, hit, CALLS + 1, CALLS, reserved))
    assert worst <= DELTA < never_removed


def _select_law(values: list[int], eps: float, grid: np.ndarray) -> np.ndarray:
    """P[select_best returns (i, y)] on ``grid``: values + discrete Laplace(1/ε), largest wins, ties → lowest i."""
    r = math.exp(-eps)

    def below(v: int, y: np.ndarray) -> np.ndarray:          # P[v + Z ≤ y]
        d = y - v
        return np.where(d >= 0, 1 - r ** (d + 1) / (1 + r), r ** (-d) / (1 + r))

    rows = []
    for i, v in enumerate(values):
        p = (1 - r) / (1 + r) * r ** np.abs(grid - v)
        for j, w in enumerate(values):
            if j != i:
                p = p * below(w, grid - 1 if j < i else grid)
        rows.append(p)
    return np.concatenate(rows)


@pytest.mark.parametrize("m", [4, 8])
def test_select_best_channel_true_loss_within_reservation(m: int) -> None:
    """τ = 2 selections (every selection is a hit, so the channel closes after them) of m candidates moving in
    opposite directions: the transcript's exact δ (2-fold product; the truncated tails added) is within the
    reservation, while one 2ε-DP call per selection by basic composition (τ·2ε) is not a valid bound."""
    eps = 0.25                                      # each candidate; the call is charged 2ε = the channel's ε
    reserved = _reserved(epsilon=2 * eps)
    grid = np.arange(-150, 151)
    worst = basic = 0.0
    for shift in ([1] + [-1] * (m - 1), [-1] + [1] * (m - 1), [1] * m):
        a, b = _select_law([0] * m, eps, grid), _select_law(shift, eps, grid)
        for p, q in ((a, b), (b, a)):
            tail = 1 - p.sum()                      # mass beyond the grid: bounds what truncation can hide
            loss = np.log(p)[:, None] + np.log(p)[None, :] - np.log(q)[:, None] - np.log(q)[None, :]
            mass = p[:, None] * p[None, :]

            def delta(e: float, loss: np.ndarray = loss, mass: np.ndarray = mass, tail: float = tail) -> float:
                return float(np.sum(mass * np.maximum(0.0, -np.expm1(e - loss)))) + 2 * tail
            worst, basic = max(worst, delta(reserved)), max(basic, delta(TAU * 2 * eps))
    assert worst <= DELTA < basic
