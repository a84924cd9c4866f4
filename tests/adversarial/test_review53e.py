"""Review 53e: exact references for the accounting numerics stop 52 left without one; late failures of huge budgets.

Each test is one finding or one guarantee. References are exact (``fractions``) or high-precision (``decimal``),
never the float code under test.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc

# -- 1. budget numbers the session cannot store -----------------------------------------------------------------------

HUGE = 10**5000


def _session(total: dp.Budget, **kw: Any) -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"u": list(range(30)), "x": [1.0] * 30})},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=total, seed=0, **kw)


@pytest.mark.parametrize(("make", "argument"), [
    (lambda: dp.PureDP(Fraction(1, HUGE)), "epsilon"),
    (lambda: dp.PureDP(Fraction(HUGE + 1, HUGE)), "epsilon"),
    (lambda: dp.PureDP(HUGE + 1), "epsilon"),
    (lambda: dp.ApproxDP(1, Fraction(1, HUGE)), "delta"),
    (lambda: dp.ZCDP(Fraction(HUGE + 1, 2 * HUGE)), "rho"),
], ids=["tiny", "near_one", "huge_int", "tiny_delta", "zcdp_near_half"])
def test_a_budget_number_of_thousands_of_digits_is_refused_when_made(make: Any, argument: str) -> None:
    """Found: ε = (10⁵⁰⁰⁰ + 1)/3 passed the budget's checks and failed at ``dp.Session`` with a raw ValueError (the
    ledger writes the total as text; ``str`` of an int past 4,300 digits raises); as a query budget, every query of a
    pure or zCDP session failed with a PluginError blaming the built-in ``agg`` family ("failed in plan()"), and a
    sparse vector with a raw ValueError. The number is the analyst's BudgetError naming it, when the budget is made."""
    with pytest.raises(dp.BudgetError) as refused:
        make()
    assert refused.value.argument == argument and "digits" in str(refused.value)


def test_target_charging_refuses_an_unstorable_epsilon_before_charging() -> None:
    """Found: ``target_charging(epsilon=(10⁵⁰⁰⁰ + 1)/10⁵⁰⁰⁰, ...)`` reserved nothing and raised a raw ValueError."""
    sess = _session(dp.ApproxDP(100, Fraction(1, 10)))
    with pytest.raises(dp.BudgetError) as refused:
        sess.target_charging(epsilon=Fraction(HUGE + 1, HUGE), max_hits=2, delta=Fraction(1, 10**6))
    assert refused.value.argument == "epsilon"
    with pytest.raises(dp.BudgetError) as refused:
        sess.target_charging(epsilon=1, max_hits=2, delta=Fraction(1, HUGE))
    assert refused.value.argument == "delta"
    assert sess.spent().epsilon == 0  # type: ignore[union-attr]


def test_sparse_vector_refuses_an_epsilon_beyond_floats_before_charging() -> None:
    """Found: ``sparse_vector(budget=dp.PureDP(10**400))`` (a 1,329-bit int: storable) raised a raw OverflowError
    (its split ε is rounded to a float), and a Gaussian stream with ρ = 10⁴⁰⁰ a raw ZeroDivisionError (σ² = 0)."""
    sess = _session(dp.PureDP(10**400))
    for kw in ({"budget": dp.PureDP(10**400)}, {"budget": dp.PureDP(1), "release": dp.PureDP(10**400)}):
        with pytest.raises(dp.BudgetError) as refused:
            sess.sparse_vector(threshold=5, max_positives=1, **kw)
        assert refused.value.argument in ("budget", "release") and "1e300" in str(refused.value)
    assert sess.spent().epsilon == 0  # type: ignore[union-attr]
    rdp = _session(dp.ApproxDP(10**250, Fraction(1, 10)), accountant="rdp")
    with pytest.raises(dp.BudgetError) as refused:
        rdp.sparse_vector(threshold=5, max_positives=1, budget=dp.ZCDP(10**400), noise="gaussian")
    assert refused.value.argument == "budget" and rdp.spent().epsilon == 0  # type: ignore[union-attr]


def test_budgets_just_below_the_limit_are_stored_shown_and_charged(tmp_path: Path) -> None:
    """A total and a query budget with 4,000-bit denominators (the most a budget takes is 4,096 bits): the session
    stores them in a ledger file, shows them, charges and subtracts them, and reopens the ledger."""
    p, q = 2**4000 + 1, 2**4001 - 1
    total = dp.ApproxDP(Fraction(100 * (q + 4), q), Fraction(1, 10))
    ledger = tmp_path / "b.ledger"
    sess = _session(total, ledger=str(ledger))
    sess.table("t").agg(dp.len()).collect(budget=dp.PureDP(Fraction(p, p - 2)))
    sess.table("t").agg(dp.len()).collect(budget=dp.ApproxDP(1, Fraction(1, p)))
    spent, left = sess.spent(), sess.remaining()
    want = Fraction(p, p - 2) + 1                     # a total past 2²⁰⁴⁸ in its denominator is rounded up (stop 52)
    assert want <= spent.epsilon <= want + Fraction(1, 2**2040)  # type: ignore[union-attr]
    assert left.epsilon == total.epsilon - spent.epsilon  # type: ignore[union-attr]
    assert left.delta == total.delta - spent.delta  # type: ignore[union-attr]
    assert "ApproxDP" in repr(sess) and str(left)
    sess.close()
    again = _session(total, ledger=str(ledger))
    assert again.spent() == spent


def test_ptr_threshold_still_calibrates_at_any_exact_delta() -> None:
    """PTR's threshold only calibrates (nothing is stored): a δ of 5,000 digits is read, as test_review38's."""
    from dpframe.interactive.ptr import robust_median

    sess = _session(dp.ApproxDP(1, Fraction(1, 10**6)))
    t, _, _ = robust_median(sess.table("t"), "x", (0, 1)).threshold(Fraction(1, 10), Fraction(1, HUGE))
    assert t > 0


# -- 2. a PLD grid too fine to discretise -----------------------------------------------------------------------------

@pytest.mark.parametrize("grid", [1e-310, 5e-324, 1e-17, 9e-11])
def test_a_grid_finer_than_floats_can_discretise_is_refused(grid: float) -> None:
    """Found: ``PLDAccountant(grid=1e-310)`` took 2-7 s per mechanism against 10 ms at the default step: below a
    mechanism's range / 2²⁰ every grid is cut at 2²⁰ points per side and doubled back up (a thousand doublings from a
    subnormal), and below 2.2·10⁻¹⁶ the points e^{jh} are equal floats. A step below 1e-10 is a BudgetError naming
    ``grid``; 1e-10 itself is accepted."""
    for make in (lambda: acc.PLDAccountant(grid=grid), lambda: acc.composition([acc.laplace(1.0)] * 2, grid=grid)):
        with pytest.raises(dp.BudgetError) as refused:
            make()
        assert refused.value.argument == "grid" and "1e-10" in str(refused.value)
    assert acc.PLDAccountant(grid=1e-10).grid == 1e-10
