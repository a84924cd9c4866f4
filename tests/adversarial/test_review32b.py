"""Review 32b: mechanisms and numerics under an analyst who picks every argument and value.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses. D and D′ are
neighbouring datasets (D′ adds one privacy unit) where the attack is data-dependent.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp

SMALL_QS = [0, 1 / 10_000, 1 / 5000, 1 / 4999, 1 / 4998]


def test_quantile_probabilities_whose_rescaled_parts_round_to_zero_are_planned_and_run() -> None:
    """The joint split rescales the q's of a sub-problem by (q − p)/(1 − p) and rounds them to denominators
    ≤ 2²⁰: 1/4999 and 1/4998 above p = 1/5000 both became 0, and the sub-problem [0, 0] split at p = 0
    divided 0 by 0 — a raw ZeroDivisionError from ``cost``/``explain``/``collect`` (§5: a dpframe error or
    an answer). Now a sub-problem's q's stay in [0, 1] whatever the rounding, and the run is charged and
    answers with monotone quantiles.
    """
    sess = dp.Session({"t": pl.DataFrame({"x": list(range(1000))})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(2), seed=0)
    q = sess.table("t").agg(dp.quantile("x", SMALL_QS, bounds=(0, 1000)))
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    values = q.collect(dp.PureDP(1))["x_quantile"][0].to_list()
    assert len(values) == len(SMALL_QS) and values == sorted(values)
    assert sess.spent() == dp.PureDP(1)


def _session(total: dp.Budget) -> dp.Session:
    data = pl.DataFrame({"x": [float(i % 50) for i in range(500)], "y": [int(i % 50 >= 20) for i in range(500)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=total, seed=0)


def _refused_or_answered(sess: dp.Session, query: Any, budget: dp.Budget) -> None:
    """Either a dpframe error before anything is charged, or an answer charged ``budget``: never a charged failure."""
    try:
        query.cost(budget)
    except dp.DPFrameError:
        with pytest.raises(dp.DPFrameError):
            query.collect(budget)
        assert sess.history().is_empty(), "a query refused when planned was charged"
        return
    query.collect(budget)
    assert sess.history().height == 1


@pytest.mark.parametrize("method", ["auto", "binary_search", "exponential"])
@pytest.mark.parametrize("epsilon", [Fraction(1, 10**400), Fraction(1, 10**30), Fraction(40, 2**57), Fraction(10**400)])
def test_a_learning_budget_beyond_the_samplers_range_is_refused_uncharged(method: str, epsilon: Fraction) -> None:
    """The learning queries' noisy row count (scale 10/ε) and the binary search's rounds (scale b·Δ/ε) were
    drawn with scales beyond the exact sampler's 2⁵⁷: ``interior_point(...).collect(dp.PureDP(1e-30))`` was
    charged, then failed (a ValueError from the sampler); ``binary_search`` at ε = 40/2⁵⁷ (the gate's scale
    fits, the rounds' does not) failed only when the gate passed. ε = 10⁴⁰⁰ was a raw OverflowError. Now
    each is refused while planning, uncharged, as every other query's noise beyond the sampler's range.
    """
    sess = _session(dp.PureDP(Fraction(10**401)))
    _refused_or_answered(sess, sess.table("t").interior_point("x", bounds=(0, 100), method=method, beta=0.5),
                         dp.PureDP(epsilon))


def test_a_learning_zcdp_budget_too_small_for_every_method_is_a_budget_error() -> None:
    """``interior_point(method="auto")`` at ρ = 10⁻³⁰ found no usable method and raised a raw ValueError
    (``min()`` of nothing) from ``cost``; now a BudgetError naming the budget."""
    sess = _session(dp.ZCDP(1))
    with pytest.raises(dp.BudgetError):
        sess.table("t").interior_point("x", bounds=(0, 100)).cost(dp.ZCDP(Fraction(1, 10**30)))


@pytest.mark.parametrize("budget", [dp.ZCDP(Fraction(1, 10**30)), dp.PureDP(10**30), dp.PureDP(Fraction(1, 10**30))])
def test_a_sum_grid_beyond_float64_is_refused_or_coarsened(budget: dp.Budget) -> None:
    """A sum's grid 2^k follows the noise scale: with bounds (0, 5e-324) (a subnormal) it went below 2⁻¹⁰⁷⁴ —
    the grid unit became 0.0 and ``cost`` raised a raw ValueError (log₂ 0) — and under ρ = 10⁻³⁰ the
    backend's 2^(−k) overflowed *after* the charge (a charged OverflowError). Now the grid stays within
    float64's normal range (coarser is sound: each row's bound is computed on it)."""
    total = dp.ZCDP(Fraction(10**31)) if isinstance(budget, dp.ZCDP) else dp.PureDP(Fraction(10**31))
    sess = _session(total)
    q = sess.table("t").agg(dp.sum("x", bounds=(-1e-300, 1e-300)), dp.mean("x", bounds=(0, 5e-324)))
    _refused_or_answered(sess, q, budget)


def test_a_quantile_budget_too_small_for_the_exact_sampler_is_a_budget_error() -> None:
    """At ε = 10⁻³⁰ the quantile's utility window (≈ ln|X|/ε ranks) overflowed int64: ``cost`` answered and
    ``collect`` failed in the dry run with "mechanism 'quantiles' fails on empty statistics ... this is a
    plugin bug" (uncharged). Just below 2⁶³ it wrapped silently when added to a·n, on D′'s larger n only
    (no change of the output was seen: the window only sets speed, but the arithmetic was wrong).
    Now a window beyond 2⁶¹ is refused while planning with a BudgetError."""
    sess = _session(dp.PureDP(1))
    q = sess.table("t").agg(dp.median("x", bounds=(0, 100)))
    with pytest.raises(dp.BudgetError):
        q.cost(dp.PureDP(Fraction(1, 10**30)))
    assert q.cost(dp.PureDP(Fraction(1, 10**6))) == dp.PureDP(Fraction(1, 10**6))


@pytest.mark.parametrize("make_query", [
    lambda t: t.agg(dp.median("x", bounds=(0, 50))),
    lambda t: t.agg(dp.quantile("x", [0.25, 0.75], bounds=(0, 50))),
    lambda t: t.bounds("x"),
], ids=["median", "quantiles", "bounds"])
def test_an_exponential_mechanism_rho_below_its_epsilon_grid_is_a_budget_error(make_query: Any) -> None:
    """ρ = 10⁻³⁰ gives ε = 0 on the EM's grid of 2⁻⁴⁰: the median's ``cost`` was a raw ZeroDivisionError and
    ``bounds()`` said "epsilon: must be > 0, got 0.0" (review 32b's note) — a message about an argument the
    analyst did not pass. Now a BudgetError naming the budget and ρ, while planning, uncharged.
    """
    sess = _session(dp.ZCDP(1))
    query = make_query(sess.table("t"))
    for run in (query.cost, query.collect):
        with pytest.raises(dp.BudgetError, match="ρ = .* too small"):
            run(dp.ZCDP(Fraction(1, 10**30)))
    assert sess.history().is_empty()
