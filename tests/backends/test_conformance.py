"""Backend conformance: every registered backend returns the same exact statistics on the same data.

The suite itself is :class:`dpframe.testing.BackendConformance` (shipped with dpframe, so a third-party
backend package runs it in its own tests). Here it runs on the built-in backends and on every other
backend registered through ``dpframe_backends`` in this environment.
"""

from __future__ import annotations

from typing import Any

import pytest

from dpframe.plugin import plugin_host
from dpframe.testing import BackendConformance

BUILTIN = {"polars", "duckdb", "spark"}


class TestPolars(BackendConformance):
    backend_name = "polars"


class TestDuckDB(BackendConformance):
    backend_name = "duckdb"


class TestSpark(BackendConformance):
    """local[2]; skipped with the reason without PySpark or Java (see conftest.py)."""

    backend_name = "spark"

    @pytest.fixture(autouse=True)
    def _spark(self, spark_session: Any) -> None:
        """Start (or reuse) the test SparkSession: the backend runs on the active session."""


for _name in sorted(set(plugin_host().backend_names()) - BUILTIN):   # third-party backends installed here
    globals()[f"TestPlugin_{_name}"] = type(f"TestPlugin_{_name}", (BackendConformance,), {"backend_name": _name})


def test_builtin_backends_are_registered() -> None:
    assert {"polars", "duckdb"} <= set(plugin_host().backend_names())
