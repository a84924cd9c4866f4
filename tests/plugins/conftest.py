"""Fixtures of the plugin tests: end-to-end audits on one pair of neighbours, of a mechanism and of a broken one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates import AggregateMechanism
from dpframe_aggregates.aggregates import AggregatePlan

import dpframe as dp
from dpframe.testing import audit_sampler, pin_mechanisms

Sampler = Callable[[pl.DataFrame, Any], Any]
"""``sampler(table, mechanism)``: the draws of one query on ``table`` (``mechanism`` pinned when not None)."""


def _group_sampler(unit: dp.PrivacyUnit, keys: list[str], measure: dp.Measure,
                   values: Callable[[pl.DataFrame], np.ndarray]) -> Sampler:
    def sampler(table: pl.DataFrame, mechanism: Any) -> Any:
        def sample(n: int, seed: int) -> dict[str, np.ndarray]:
            sess = dp.Session({"t": table}, privacy_unit=unit, budget=dp.PureDP(10**6), seed=seed)
            if mechanism is not None:
                pin_mechanisms(sess, mechanism)
            query = sess.table("t").group_by("g", keys=keys).agg(measure)
            chunks: list[np.ndarray] = []
            while sum(c.size for c in chunks) < n:
                chunks.append(values(query.collect(dp.PureDP(1))))
            return {"draws": np.concatenate(chunks)[:n]}
        return sample
    return sampler


@pytest.fixture
def group_sampler() -> Callable[..., Sampler]:
    """``group_sampler(unit, keys, measure, values)``: draws of ``values(released frame)`` of ``t`` grouped by
    ``g`` with public ``keys`` at ε = 1, as many frames as the audit asks for."""
    return _group_sampler


def _shrunk(by: Callable[[Any], Any]) -> AggregateMechanism:
    class Shrunk(AggregateMechanism):
        def plan(self, measures: Any, ctx: Any, share: dp.Budget) -> AggregatePlan:
            plan = super().plan(measures, ctx, share)
            assert plan.noises is not None
            plan.noises = {k: replace(n, scale=n.scale / by(ctx)) for k, n in plan.noises.items()}
            return plan
    return Shrunk()


@pytest.fixture
def shrunk_noise() -> Callable[[Callable[[Any], Any]], AggregateMechanism]:
    """``shrunk_noise(by)``: the aggregates mechanism with every noise scale divided by ``by(ctx)``
    (a calibration mistake the audit must catch)."""
    return _shrunk


@pytest.fixture
def audit_pair() -> Callable[[Sampler, tuple[pl.DataFrame, pl.DataFrame], Any], None]:
    """``audit_pair(sampler, (base, neighbour), broken)``: the audit at ε = 1 passes and is strong enough
    (lower bound > 0.4), and it flags ``broken`` (a mechanism that under-calibrates) above ε = 1."""
    def check(sampler: Sampler, tables: tuple[pl.DataFrame, pl.DataFrame], broken: Any) -> None:
        base, neighbour = tables
        result = audit_sampler(sampler(base, None), sampler(neighbour, None), claimed_epsilon=1.0, samples=20_000,
                               seed=2)
        assert result.passed, str(result)
        assert result.epsilon_lower_bound > 0.4, f"too weak to catch anything: {result}"
        result = audit_sampler(sampler(base, broken), sampler(neighbour, broken), claimed_epsilon=1.0,
                               samples=20_000, seed=2)
        assert not result.passed and result.epsilon_lower_bound > 1.0, str(result)
    return check
