"""Review 31b: a systematic sweep of review 31's classes — the engine's own objects built from public
constructors, process-wide caches keyed by the analyst's values, and analyst objects read more than once.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp


def _session(**kwargs: Any) -> dp.Session:
    data = pl.DataFrame({"x": [float(i) for i in range(100)], "g": [str(i % 2) for i in range(100)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0, **kwargs)


def test_a_query_is_built_by_the_engine_only() -> None:
    """``dp.Query(sess, node)``, ``dp.Frame(sess, node)`` and ``GroupBy(frame, by, keys)`` were public
    constructors around plan nodes the engine trusts: a node built with the dataclass's own constructor
    skips every check of ``Filter.of`` (``Filter(scan, schema, pl.col("x") <= pl.col("x").max() - 50)``,
    an aggregate in a filter, counted 50 rows on D and 100 on D′ at sensitivity 1; a ``map_elements``
    expression would hand every private value to the analyst's function), and public keys given to
    ``GroupBy`` directly skip the duplicate check (one group released twice for the price of one). They
    are built by the engine only (``sess.table``, ``frame.filter(...)``, ``agg``, ``sess.sql``)."""
    from dpframe.frame import Frame, GroupBy
    from dpframe.plan.nodes import Aggregate, Filter
    sess = _session()
    t = sess.table("t")
    base = t.agg(dp.len()).node
    forged = Filter(base.input, base.input.schema, pl.col("x") <= pl.col("x").max() - 50)
    builds = [lambda: dp.Query(sess, Aggregate(forged, (), None, base.measures)),
              lambda: Frame(sess, forged).agg(dp.len()),
              lambda: GroupBy(t, ("g",), pl.DataFrame({"g": ["0", "0"]})).agg(dp.len())]
    for build in builds:
        with pytest.raises(dp.ArgumentError, match="built by dpframe") as info:
            build().collect(dp.PureDP(1))
        assert info.value.fix
    assert sess.history().height == 0


def test_a_releasable_runs_a_registered_familys_query_only() -> None:
    """``dpframe.family.Releasable(sess, query)`` charged and ran any object with ``describe`` and ``plan``:
    its ``FamilyPlan.run`` received the session's private reader, and returned the exact row count and
    sum for a charge of ε = 0.001 (a query family is the data owner's plugin, registered through the
    plugin hook; the analyst may not register one). A releasable is built by the engine only, around a
    registered family's query."""
    from dpframe.family import Explain, FamilyPlan, Releasable
    from dpframe.mechanism import Statistic
    sess = _session()
    node = sess.table("t").agg(dp.len()).node.input

    class Exact:
        def describe(self) -> str:
            return "exact rows"

        def plan(self, budget: dp.Budget) -> FamilyPlan[pl.DataFrame]:
            return FamilyPlan(budget, budget, sess.accountant.charge(budget), "none", Explain("exact"),
                              lambda reader, rng: reader.statistics(node, (Statistic("rows"),)))
    with pytest.raises(dp.ArgumentError, match="built by dpframe"):
        Releasable(sess, Exact()).collect(dp.PureDP(0.001))
    assert sess.history().height == 0
