"""The privacy audit of multi-label PATE, registered through the ``dpframe_audits`` hook.

The ``top_k`` family's methods are audited end to end by dpframe's query specs (they are reached
through ``GroupBy.top_k``); :class:`~dpframe_topk.pate.MultiLabelPATE` is a module-level entry point,
audited here at the release level: one query per run, batched (``MultiLabelPATE.release``), on a
teacher whose votes move and on an added teacher voting for every label.

Example:
    >>> [s.name for s in specs()]
    ['multi-label PATE (StableTopK per query, record level)']

"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from dpframe.budgets import Budget
from dpframe.noise import SeededRandomSource
from dpframe.testing import AuditSpec, Neighbours
from dpframe_topk.pate import MultiLabelPATE

__all__ = ["ENTRY_POINTS", "specs"]

#: The module-level query entry point these specs cover.
ENTRY_POINTS = ("dpframe_topk:MultiLabelPATE.collect",)
LABELS = ["l0", "l1", "l2"]


def _teachers(votes: Sequence[tuple[int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(list(votes), schema=LABELS, orient="row")


def _pate() -> AuditSpec:
    pate = MultiLabelPATE(gumbel_scale=2, sigma=3, delta_t=1e-3)

    def factory(table: pl.DataFrame, budget: Budget) -> tuple[Budget, Any]:
        counts = [int(table[label].sum()) for label in LABELS]

        def sample(n: int, seed: int) -> dict[str, Any]:
            votes = pl.DataFrame({"query": np.repeat(np.arange(n), 3), "label": LABELS * n,
                                  "vote": np.tile(counts, n)})
            out = pate.release(votes, SeededRandomSource(seed))
            sets = out["labels"].to_list()
            return {**{f"has {lab}": np.asarray([float(s is not None and lab in s) for s in sets]) for lab in LABELS},
                    "answered": np.asarray([float(s is not None) for s in sets]), "k": out["k"].to_numpy()}
        return pate.cost(1), sample

    base = _teachers([(1, 1, 0)] * 20 + [(1, 0, 0)] * 12)
    moved = _teachers([(1, 1, 0)] * 19 + [(0, 0, 1)] + [(1, 0, 0)] * 12)   # one record: a teacher's votes change
    extra = pl.concat([base, _teachers([(1, 1, 1)])])

    def pairs() -> list[Neighbours]:
        return [Neighbours("one teacher's votes move from {l0, l1} to {l2}", base, moved),
                Neighbours("+1 teacher voting for every label", base, extra)]

    return AuditSpec("multi-label PATE (StableTopK per query, record level)", frozenset(), pate.cost(1), pairs,
                     factory, samples=20_000, slow_samples=200_000, fast=True, min_power=0.1,
                     queries=frozenset(ENTRY_POINTS), notions=frozenset(), fast_pairs=1, max_samples=None)


def specs() -> list[AuditSpec]:
    """Return the audit specs of this package's module-level entry points (see the module docstring)."""
    return [_pate()]
