"""Review 30: the analyst's objects must not change what the engine charges (stateful callables, shared state).

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import polars as pl
import pytest

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


def test_a_query_cannot_be_given_another_node_or_privacy_unit() -> None:
    """A query's ``node`` and its family query (``q.query``) were writable; collect planned from them.

    A stop rule swapped a public-keys step's node for a private-keys one: the rare key was released with
    no partition selection, at the public-keys price. ``q.query.source`` with a row unit made a count of
    100-row units noised for one row. Both are read-only now.
    """
    data = pl.DataFrame({"u": [i // 100 for i in range(1000)], "g": ["common"] * 999 + ["rare"]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=100), budget=dp.ApproxDP(10, 1e-6),
                      seed=0)
    t = sess.table("t")
    public = t.group_by("g", keys=["common"]).agg(dp.len())
    private = t.group_by("g").agg(dp.len())
    with pytest.raises(AttributeError):
        public.node = private.node  # type: ignore[misc]
    source = public.query.source
    with pytest.raises(AttributeError, match="read-only"):
        public.query.source = dataclasses.replace(source, context=dataclasses.replace(
            source.context, unit=dp.PrivacyUnit.row()))
    with pytest.raises(AttributeError, match="read-only"):
        del public.query.node
    steps = [t.agg(dp.len()), public]

    def stop(results: list[pl.DataFrame]) -> bool:
        with pytest.raises(AttributeError):
            steps[1].node = private.node  # type: ignore[misc]
        return False
    out = run_until(steps, dp.PureDP(Fraction(1, 10)), stop=stop)
    assert out[1]["g"].to_list() == ["common"]
    assert public.plan(dp.PureDP(1)).plans[0].noise["count(rows)"].sensitivity == 100
