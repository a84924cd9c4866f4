"""Early stopping with a non-additive inner accountant (digest 002 §2.3: Lemma 11, Eq. 4, Thm 15, oracle O6)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.composition import lemma11_delta, optimal_delta, optimal_epsilon, optimal_stopping_delta
from dpframe.interactive.stopping import run_until, stopping_cells


@pytest.mark.parametrize(("stops", "step", "cells", "eq4", "thm15"), [
    ((1, 2), (1, 0), (0.5, 1.5), 0.497938, 0.287649),
    ((1, 2), (1, 0), (1, 2), 0.0, 0.0),
    ((2, 4), (0.5, 0), (0.8, 1.6), 0.119726, 0.070234),
    ((1, 2, 3), (0.5, 1e-3), (0.5, 1, 1.5), 0.005996, 0.002997),
    ((1, 2, 3, 4), (0.5, 1e-3), (0.5, 1, 1.5, 2), 0.009990, 0.003994),
])
def test_o6_lemma11_and_thm15(stops: tuple[int, ...], step: tuple[float, float], cells: tuple[float, ...],
                              eq4: float, thm15: float) -> None:
    eps, delta_i = step
    assert lemma11_delta(eps, delta_i, stops, cells) == pytest.approx(eq4, abs=1e-6)
    assert optimal_stopping_delta(eps, delta_i, stops, cells) == pytest.approx(thm15, abs=1e-6)
    assert optimal_stopping_delta(eps, delta_i, stops, cells) <= lemma11_delta(eps, delta_i, stops, cells) + 1e-15
    if all(math.isclose(c, k * eps) for k, c in zip(stops, cells, strict=True)):   # basic charges
        assert optimal_stopping_delta(eps, delta_i, stops, cells) == pytest.approx(1 - (1 - delta_i) ** stops[-1])


def test_o6_row1_by_hand_and_tree_dp_by_brute_force() -> None:
    e = math.e
    assert lemma11_delta(1, 0, (1, 2), (0.5, 1.5)) == pytest.approx(
        (e - e**0.5) / (1 + e) + (e**2 - e**1.5) / (1 + e) ** 2, rel=1e-12)
    # Thm 15 by brute force over prefix-free sets: outputs of {1, 2}^k (pure steps), stops (1, 3)
    a, b = math.exp(0.7) / (1 + math.exp(0.7)), 1 / (1 + math.exp(0.7))
    cells = (0.4, 1.2)

    def gain(y: tuple[int, ...], cell: float) -> float:
        n1 = y.count(1)
        return a**n1 * b ** (len(y) - n1) - math.exp(cell) * b**n1 * a ** (len(y) - n1)

    best = 0.0
    for first in itertools.product([False, True], repeat=2):          # which length-1 prefixes are in S_1
        total = sum(gain((y,), cells[0]) for y, take in zip((1, 2), first, strict=True) if take)
        total += sum(max(0.0, gain(y, cells[1])) for y in itertools.product((1, 2), repeat=3)
                     if not first[y[0] - 1])
        best = max(best, total)
    assert optimal_stopping_delta(0.7, 0, (1, 3), cells) == pytest.approx(best, rel=1e-12)


def test_optimal_composition_matches_enumeration_and_inverts() -> None:
    eps, k = 0.3, 5
    a, b = math.exp(eps) / (1 + math.exp(eps)), 1 / (1 + math.exp(eps))
    for total in (0.0, 0.4, 1.0, 1.5):
        brute = sum(max(0.0, a ** y.count(1) * b ** y.count(2) - math.exp(total) * b ** y.count(1) * a ** y.count(2))
                    for y in itertools.product((1, 2), repeat=k))
        assert optimal_delta(k, eps, total) == pytest.approx(brute, rel=1e-10, abs=1e-15)
    for k, eps, delta in [(10, 0.5, 1e-6), (40, 0.1, 1e-8), (3, 1.0, 1e-3)]:
        e = optimal_epsilon(k, eps, delta)
        assert e <= k * eps and optimal_delta(k, eps, e) <= delta
        assert optimal_delta(k, eps, e * (1 - 1e-6)) > delta * (1 - 1e-6) or e == 0


def test_stopping_cells_hand_computed() -> None:
    assert stopping_cells(3, dp.PureDP(Fraction(1, 4))) == {"1": Fraction(1, 4), "2": Fraction(1, 2),
                                                            "3": Fraction(3, 4)}
    cells = stopping_cells(30, dp.ZCDP(0.005), delta=1e-6, stops=[10, 20])
    assert list(cells) == ["10", "20", "30"]                       # the last step is always a stopping point
    for k, eps in cells.items():                                   # CKS20 of k·ρ at δ/3
        assert eps == dp.ZCDP(Fraction(5, 1000) * int(k)).to_approx(Fraction(1, 3 * 10**6)).epsilon
    assert float(cells["30"]) == pytest.approx(2.7955, abs=1e-3)
    assert 30 * float(dp.ZCDP(0.005).to_approx(1e-6 / 30).epsilon) > 15    # 30 separate (ε, δ/30) rounds
    pure = stopping_cells(20, dp.PureDP(0.1), delta=2e-5)
    assert pure["5"] <= Fraction(1, 2) and float(pure["5"]) == pytest.approx(0.5, abs=1e-4)   # ≈ basic for few steps
    assert float(pure["20"]) == pytest.approx(1.789, abs=1e-3)
    # Lemma 11 soundness, checked exactly: the declared δ covers Eq. 4 of the declared cells (pure steps)
    stops = [int(k) for k in pure]
    assert lemma11_delta(0.1, 0, stops, [float(v) for v in pure.values()]) <= 2e-5


def _session(budget: dp.Budget, seed: int = 0, **kw: object) -> dp.Session:
    data = pl.DataFrame({"x": list(range(1000))})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=budget, seed=seed, **kw)  # type: ignore[arg-type]


def test_run_until_gaussian_steps_settle_to_the_cell() -> None:
    sess = _session(dp.ApproxDP(10, 1e-5), seed=1)
    steps = [sess.table("t").filter(pl.col("x") < b).agg(dp.len()) for b in range(100, 1001, 100)]
    cells = stopping_cells(10, dp.ZCDP(0.02), delta=1e-6, stops=[3, 6])
    seen: list[int] = []
    out = run_until(steps, dp.ZCDP(0.02), stop=lambda r: seen.append(len(r)) or r[-1]["len"][0] > 450,
                    delta=1e-6, stops=[3, 6])
    assert seen == [3, 6] and len(out) == 6                       # consulted only at the stopping points
    assert all(abs(r["len"][0] - 100 * (i + 1)) < 40 for i, r in enumerate(out))   # σ = 5 (ρ = 0.02)
    assert sess.spent() == dp.ApproxDP(cells["6"], Fraction(1, 10**6))
    assert cells["6"] < 6 * dp.ZCDP(0.02).to_approx(1e-6 / 3).epsilon             # beats separate rounds


@pytest.mark.parametrize("runs", [150, pytest.param(600, marks=pytest.mark.slow)])
def test_run_until_stopping_time_law_on_neighbouring_datasets(runs: int) -> None:
    """Statistical check of the spec: P[stop at k | D] ≤ e^{ε_k}·P[stop at k | D′] + δ (sampling slack).

    ``runs`` per dataset: 150 by default (each is up to three queries), 600 with ``-m slow``.
    """
    counts: dict[int, list[int]] = {}
    for n in (20, 21):                                             # neighbours: one row more
        data = pl.DataFrame({"x": [1] * n})
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10**6), seed=n)
        steps = [sess.table("t").agg(dp.len())] * 3
        counts[n] = [0, 0, 0]
        for _ in range(runs):
            counts[n][len(run_until(steps, dp.PureDP(0.5), stop=lambda r: r[-1]["len"][0] >= 21)) - 1] += 1
    cells = stopping_cells(3, dp.PureDP(0.5))
    for k in range(3):
        for a, b in ((20, 21), (21, 20)):
            pa, pb = counts[a][k] / runs, counts[b][k] / runs
            slack = 4 * math.sqrt(0.25 / runs)
            assert pa <= math.exp(float(cells[str(k + 1)])) * (pb + slack) + slack
    assert counts[21][0] > counts[20][0]                           # the data does move the stopping time


def test_run_until_refuses_non_basic_sessions_and_bad_input() -> None:
    sess = _session(dp.ApproxDP(10, 1e-5), accountant="rdp")
    steps = [sess.table("t").agg(dp.len())] * 3
    with pytest.raises(dp.BudgetConversionError, match="refund=False"):
        run_until(steps, dp.PureDP(0.5), stop=lambda r: True)
    assert sess.spent().epsilon == 0                              # type: ignore[union-attr]
    assert len(run_until(steps, dp.PureDP(0.5), stop=lambda r: True, refund=False)) == 1
    assert sess.spent().epsilon >= 1.5                              # type: ignore[union-attr]  # the worst cell
    basic = _session(dp.ApproxDP(10, 1e-5))
    steps = [basic.table("t").agg(dp.len())] * 3
    for kwargs, error in [({"budget": dp.ZCDP(0.1)}, "delta"),
                          ({"budget": dp.ZCDP(0.1, 1e-7), "delta": 1e-6}, "budget"),
                          ({"stops": [0, 2]}, "stops"), ({"stops": "all"}, "stops"), ({"delta": 2}, "delta"),
                          ({"refund": "yes"}, "refund")]:
        args = {"budget": dp.PureDP(0.5)} | kwargs
        with pytest.raises(dp.DPFrameError) as info:
            run_until(steps, args.pop("budget"), stop=lambda r: True, **args)  # type: ignore[arg-type]
        assert info.value.argument == error
    pure = _session(dp.PureDP(5))
    with pytest.raises(dp.DPFrameError):                           # a δ > 0 spec in a pure session
        run_until([pure.table("t").agg(dp.len())] * 3, dp.PureDP(0.5), stop=lambda r: True, delta=1e-6)
    assert basic.spent().epsilon == 0 and pure.spent().epsilon == 0   # type: ignore[union-attr]


@pytest.mark.parametrize(("step", "rho"), [(dp.ZCDP(Fraction(1, 50)), Fraction(1, 50)),
                                           (dp.PureDP(Fraction(1, 5)), Fraction(1, 50))])     # ε²/2 = 1/50
def test_run_until_in_a_zcdp_session_composes_the_steps_rho(step: dp.Budget, rho: Fraction) -> None:
    """A zCDP session with ``refund=False`` charges n·ρ for n steps of ρ each, whenever the run stops.

    Before, zCDP steps were refused there (their cells are (ε, δ_j), which a zCDP session cannot hold) and pure
    steps were charged the cell (nε)²/2 — here 10 steps of ε = 1/5: 2, against 10 · 1/50 = 1/5 now. zCDP composes
    additively under adaptive composition (Bun & Steinke 2016, Lemma 2.3): ``stop`` reads released results only,
    so any stopping time of at most n ρ-zCDP steps is n·ρ-zCDP.
    """
    sess = _session(dp.ZCDP(1), seed=2)
    steps = [sess.table("t").filter(pl.col("x") < b).agg(dp.len()) for b in range(100, 1001, 100)]
    seen: list[int] = []
    out = run_until(steps, step, stop=lambda r: seen.append(len(r)) or len(r) == 4, stops=[2, 4, 8], refund=False)
    assert len(out) == 4 and seen == [2, 4]
    assert sess.spent() == dp.ZCDP(10 * rho)                                     # hand-computed: all ten steps
    assert sess.history()["mechanisms"].to_list() == ["early stopping (zCDP composition)"]
    with pytest.raises(dp.BudgetConversionError, match="refund=False"):           # a refund needs basic sessions
        run_until(steps, step, stop=lambda r: True)


def test_run_until_in_a_zcdp_session_refuses_a_delta_and_approximate_steps() -> None:
    sess = _session(dp.ZCDP(1))
    steps = [sess.table("t").agg(dp.len())] * 3
    for budget, kwargs, argument in [(dp.ZCDP(0.01), {"delta": 1e-6}, "delta"),
                                     (dp.ZCDP(0.01, 1e-7), {}, "budget"), (dp.ApproxDP(1, 1e-6), {}, "budget")]:
        with pytest.raises(dp.BudgetError) as info:
            run_until(steps, budget, stop=lambda r: True, refund=False, **kwargs)
        assert info.value.argument == argument
    assert sess.history().height == 0
