"""The planner must account for what a (third-party) mechanism says it costs, exactly like a built-in."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from core_testkit import make_session

import dpframe as dp
from dpframe.budgets import make
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.plugin import PluginHost


class _Plan(MechanismPlan):
    def release(self, stats, rng):  # noqa: ANN001, ANN201
        return {m.output_name: np.asarray(stats["__rows"], dtype=np.float64) for m in self.measures}


class _Fake:
    """A mechanism whose reported cost is chosen by the test."""

    name = "fake"
    handles = frozenset({"fake"})
    notions = frozenset({"pure", "zcdp"})

    def __init__(self, cost_of) -> None:  # noqa: ANN001
        self.cost_of = cost_of

    def validate(self, measure: dp.Measure, ctx: MeasureContext) -> None:
        pass

    def parts(self, measures: Sequence[dp.Measure], ctx: MeasureContext) -> int:
        return 1

    def plan(self, measures: Sequence[dp.Measure], ctx: MeasureContext, share: dp.Budget) -> MechanismPlan:
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        return _Plan(self.name, tuple(measures), (Statistic("rows"),), self.cost_of(share), noise={"rows": noise})


def _session_with(cost_of, budget: dp.Budget = dp.ApproxDP(10, 1e-3)) -> dp.Session:  # noqa: ANN001
    s = make_session(pl.DataFrame({"u": [1, 2, 3]}), unit=dp.PrivacyUnit("u"), budget=budget)
    host = PluginHost()

    class Plugin:
        @dp.hookimpl
        def dpframe_mechanisms(self, register):  # noqa: ANN001, ANN202
            register(_Fake(cost_of))

    host.pm.register(Plugin(), name="fake-plugin")
    s._plugins = host
    return s


def test_a_plugin_with_an_honest_cost_is_charged_that_cost() -> None:
    s = _session_with(lambda share: share)
    q = s.table("t").agg(dp.measure("fake"))
    assert q.cost(dp.PureDP(0.5)) == dp.ApproxDP(0.5, 0)
    out = q.collect(dp.PureDP(0.5))
    assert out.columns == ["fake"] and s.spent() == dp.ApproxDP(0.5, 0)


def test_a_plugin_that_overspends_its_share_is_refused() -> None:
    s = _session_with(lambda share: make("pure", share.epsilon * 2))
    with pytest.raises(dp.PluginError):
        s.table("t").agg(dp.measure("fake")).cost(dp.PureDP(0.5))
    assert s.history().height == 0


def test_a_plugin_cost_with_delta_is_not_dropped() -> None:
    s = _session_with(lambda share: dp.ApproxDP(share.epsilon, 1e-6))
    try:
        cost = s.table("t").agg(dp.measure("fake")).cost(dp.PureDP(0.5))
    except dp.DPFrameError:
        return                                   # refusing such a plugin is also sound
    assert cost.delta >= Fraction(1, 10**6)


def test_a_plugin_cost_in_another_notion_is_refused() -> None:
    s = _session_with(lambda share: dp.ZCDP(share.epsilon))   # ρ = ε is not ε-DP
    with pytest.raises(dp.DPFrameError):
        s.table("t").agg(dp.measure("fake")).cost(dp.PureDP(0.5))
