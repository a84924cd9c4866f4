"""Nested samples multiply their rates on every backend (audit issue 6 §2: one seed for every Sample
node made ``.sample(0.5).sample(0.5)`` keep half the units while the accountant charged rate 0.25)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.plan.sample import node_seed

N = 20_000
DATA = pl.DataFrame({"u": np.arange(N), "x": np.ones(N)})


def _counts(backend: str, runs: int = 3, **kw: object) -> list[int]:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1e4), backend=backend,
                      seed=5, **kw)
    q = sess.table("t").sample(0.5).sample(0.5).agg(dp.len())
    assert "Poisson sample at rate 0.25" in q.explain(dp.PureDP(1.0))
    # ε = 200: discrete Laplace noise of scale 1/200 is 0 with probability > 0.99
    return [int(q.collect(budget=dp.PureDP(200.0))["len"][0]) for _ in range(runs)]


def _check(counts: list[int]) -> None:
    sd = math.sqrt(N * 0.25 * 0.75)                                   # 61: Binomial(N, 0.25)
    assert all(abs(c - N * 0.25) < 5 * sd for c in counts), counts   # the rate 0.5 bug gives ~10 000
    assert len(set(counts)) > 1                                      # fresh samples per execution


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_nested_samples_keep_rate_a_times_b(backend: str) -> None:
    _check(_counts(backend))


def test_nested_samples_on_spark(spark_session: Any) -> None:
    _check(_counts("spark", runs=2, spark=spark_session))


def test_polars_and_duckdb_draw_the_same_samples() -> None:
    assert _counts("polars", runs=2) == _counts("duckdb", runs=2)


def test_each_sample_node_gets_its_own_seed() -> None:
    seeds = {node_seed(12345, i) for i in range(100)}
    assert len(seeds) == 100 and all(0 <= s < 2**64 for s in seeds)
    assert node_seed(1, 0) != node_seed(2, 0)
