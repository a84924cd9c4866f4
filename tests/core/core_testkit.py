"""Helpers shared by the core-engine tests (imported by conftest.py and the test modules).

Conventions:
* ``seed=`` sessions are used wherever a test needs reproducible noise; they are NOT private.
* ``HUGE`` is a budget so large that every count's noise is 0 and every sum's noise is far below the
  fixed-point grid step, so a released value equals the exact (clamped, bounded) answer — the accuracy
  oracle for the post-processing formulas.
"""

from __future__ import annotations

from typing import Any

import polars as pl

import dpframe as dp

HUGE = 10**9


def make_session(tables: dict[str, Any] | pl.DataFrame, *, unit: dp.PrivacyUnit | None = None,
                 budget: dp.Budget | None = None, seed: int | None = 0, **kwargs: Any) -> dp.Session:
    """A session over ``tables`` (a single frame is registered as ``"t"``); unit ``u`` ≤ 3 rows, ε = 10."""
    if isinstance(tables, pl.DataFrame):
        tables = {"t": tables}
    return dp.Session(tables, privacy_unit=unit if unit is not None else dp.PrivacyUnit("u", max_rows=3),
                      budget=budget if budget is not None else dp.PureDP(10), seed=seed, **kwargs)
