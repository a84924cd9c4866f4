"""Review 30: the analyst's objects must not change what the engine charges (stateful callables, shared state).

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from fractions import Fraction

import polars as pl

import dpframe as dp
from dpframe.interactive.stopping import run_until


def test_a_stop_rule_that_shortens_the_results_is_charged_every_step_it_saw() -> None:
    """``stop`` used to receive the run's own list: deleting from it made the run classify as one step.

    The rule saw 8 released steps, then left one in the list: the run was settled at ε = 1/2 (one step)
    instead of 4. The cell is now the number of steps run, whatever the rule does to what it receives.
    """
    sess = dp.Session({"t": pl.DataFrame({"x": list(range(100))})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=0)
    steps = [sess.table("t").filter(pl.col("x") < b).agg(dp.len()) for b in range(10, 100, 10)]
    seen: list[pl.DataFrame] = []

    def stop(results: list[pl.DataFrame]) -> bool:
        seen.append(results[-1])
        del results[1:]
        return len(seen) == 8
    out = run_until(steps, dp.PureDP(Fraction(1, 2)), stop=stop)
    assert len(seen) == len(out) == 8
    assert sess.spent() == dp.PureDP(4)
