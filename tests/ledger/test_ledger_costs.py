"""The ledger refuses charges that would lower the spend: negative or NaN costs, in reserve and in settle.

A mechanism bug (or a helper given bad input, e.g. a negative ε in an output-DP spec) must never be able
to erase earlier spending: the ledger checks every coordinate of every charge itself.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

import dpframe as dp
from dpframe.accounting import BasicAccountant, Ledger
from dpframe.budgets import _raw, make


def _ledger() -> Ledger:
    led = Ledger(None, BasicAccountant(dp.PureDP(10)))
    led.commit(led.reserve(dp.PureDP(1), "first", "m"))
    return led


@pytest.mark.parametrize("cost", [make("pure", Fraction(-1)), make("approx", Fraction(1), Fraction(-1, 10)),
                                  make("zcdp", Fraction(-1, 2)), _raw(dp.PureDP, epsilon=math.nan)])  # type: ignore[arg-type]
def test_a_negative_or_nan_reservation_is_refused(cost: dp.Budget) -> None:
    led = _ledger()
    with pytest.raises(dp.LedgerError, match="never negative"):
        led.reserve(cost, "bad", "m")
    assert led.spent() == dp.PureDP(1) and len(led.charges()) == 1


def test_a_negative_settlement_is_refused_and_the_reservation_stays() -> None:
    led = _ledger()
    cid = led.reserve(dp.PureDP(2), "ex post", "m")
    with pytest.raises(dp.LedgerError, match="never negative"):
        led.settle(cid, make("pure", Fraction(-1)), "⊥")
    assert led.spent() == dp.PureDP(3)
    led.settle(cid, dp.PureDP(Fraction(1, 2)), "⊥")            # a valid settlement still works
    assert led.spent() == dp.PureDP(Fraction(3, 2))


def test_the_refusal_reaches_a_caller_through_propose_test_release() -> None:
    """A negative test ε settled the reservation to −1, erasing earlier spending (F-interactive-ptr-validation)."""
    import polars as pl

    from dpframe.interactive.ptr import propose_test_release

    sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 10})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10),
                      seed=0)
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    with pytest.raises(dp.DPFrameError):
        propose_test_release(sess, lambda: False, lambda: 1.0, test_epsilon=Fraction(-1), release_epsilon=Fraction(2))
    assert sess.spent().epsilon >= 1, sess.spent()


@pytest.mark.parametrize("where", ["a directory", "a missing folder"])
def test_a_ledger_path_that_is_no_file_is_refused(tmp_path: Path, where: str) -> None:
    """A directory (was a raw IsADirectoryError) or a path in a missing folder: a LedgerError, nothing created."""
    import polars as pl

    path = tmp_path if where == "a directory" else tmp_path / "missing" / "budget.ledger"
    with pytest.raises(dp.LedgerError):
        dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1),
                   ledger=path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_rdp_rounding_just_below_zero_is_accepted() -> None:
    """An RDP curve of a tiny ε has values like −1.6e-17 (float rounding): that is not a negative charge."""
    import polars as pl

    sess = dp.Session({"t": pl.DataFrame({"user": [0]})}, privacy_unit=dp.PrivacyUnit("user"),
                      budget=dp.ApproxDP(10, Fraction(1, 10)), accountant="rdp", seed=0)
    sess.table("t").agg(dp.len()).collect(dp.PureDP(Fraction(1, 10**12)))
    assert sess.history()["status"].to_list() == ["committed"]
