"""Fixtures of the core-engine tests. Helpers live in ``core_testkit.py`` (same directory)."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # so test modules can `import core_testkit` in any mode

from core_testkit import HUGE, make_session  # noqa: E402

import dpframe as dp  # noqa: E402


@pytest.fixture
def visits() -> pl.DataFrame:
    """A small 'visits' table: 6 users with 1–3 rows each, nulls, NaN and ±inf in ``spend``."""
    return pl.DataFrame({
        "u": [1, 1, 1, 2, 2, 3, 4, 4, 5, 6, 6, 6],
        "city": ["a", "a", "b", "b", "b", "a", "c", "a", "b", "c", "c", "a"],
        "age": [20, 20, 20, 35, 35, 17, 50, 50, 64, 29, 29, 29],
        "spend": [10.0, 250.5, None, float("nan"), 499.0, 600.0, float("inf"), -5.0, 42.25, 0.0, 100.0,
                  float("-inf")],
        "flag": [True, False, True, True, False, False, True, True, False, True, False, True],
    })


@pytest.fixture
def sess(visits: pl.DataFrame) -> dp.Session:
    """A seeded session over ``visits``: unit ``u`` with ≤ 3 rows, total ε = 10."""
    return make_session(visits)


@pytest.fixture
def huge_sess(visits: pl.DataFrame) -> dp.Session:
    """A seeded session with ε = 1e9 and max_rows = 3 (no row of ``visits`` is dropped by bounding)."""
    return make_session(visits, budget=dp.PureDP(HUGE))
