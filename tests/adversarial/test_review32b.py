"""Review 32b: mechanisms and numerics under an analyst who picks every argument and value.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses. D and D′ are
neighbouring datasets (D′ adds one privacy unit) where the attack is data-dependent.
"""

from __future__ import annotations

import polars as pl

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
