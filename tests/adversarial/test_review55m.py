"""Review 55 (lead): an amplified query reads ONE Poisson sample.

``Frame.sample(rate)`` draws a fresh sample per backend request (each request has its own engine seed), and the
``rdp``/``pld`` accountants charge a sampled query ``composition(curves).subsampled(γ)``: the amplification of the
composition, which is the right charge when every statistic of the query reads the same sample. (Under ``basic``,
independent samples would be covered too: (1 + γa)(1 + γb) ≤ 1 + γ(a + b + ab); for RDP/PLD that ordering is not
proved here.) So every query that is charged an amplified cost must make one backend request; queries that make
several (``bounds="auto"``, ``diagnostics=True``) are charged in full (``tests/adversarial/test_review55h.py``).
This pins the one-request property for the query shapes that amplify (top-k on a sample is charged in full).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.release import PrivateReader

DATA = pl.DataFrame({"x": np.arange(6_000) % 100, "g": np.arange(6_000) % 3})
DECILES = [i / 10 for i in range(1, 10)]

QUERIES: dict[str, Callable[[Any], Any]] = {
    "count and sum": lambda f: f.agg(dp.len(), dp.sum("x", bounds=(0, 100))),
    "mean and var": lambda f: f.agg(dp.mean("x", bounds=(0, 100)), dp.var("x", bounds=(0, 100))),
    "count and median": lambda f: f.agg(dp.len(), dp.median("x", bounds=(0, 100))),
    "deciles": lambda f: f.agg(dp.quantile("x", DECILES, bounds=(0, 100))),
    "public keys, count and median": lambda f: f.group_by("g", keys=[0, 1, 2]).agg(dp.len(),
                                                                                  dp.median("x", bounds=(0, 100))),
    "private keys, count": lambda f: f.group_by("g").agg(dp.len()),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_an_amplified_query_makes_one_backend_request(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds: list[int] = []
    run = PrivateReader.run

    def counted(self: PrivateReader, request: Any) -> pl.DataFrame:
        seeds.append(request.seed)
        return run(self, request)

    monkeypatch.setattr(PrivateReader, "run", counted)
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(100, 1e-5),
                      accountant="rdp", seed=3)
    q = QUERIES[name](sess.table("t").sample(0.5))
    full = QUERIES[name](sess.table("t"))
    budget = dp.ApproxDP(0.5, 1e-7)
    assert q.cost(budget) != full.cost(budget), "the sampled query is charged an amplified cost"
    q.collect(budget)
    assert len(seeds) == 1, seeds
