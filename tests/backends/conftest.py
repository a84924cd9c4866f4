"""Spark in local mode for the backend tests: one SparkSession per test process (``local[2]``).

Skipped, with the reason shown in the summary (``pytest -rs``), when PySpark or Java is unavailable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def spark_unavailable() -> str | None:
    """Why a local SparkSession cannot start here (None if it can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "PySpark is not installed (pip install 'dpframe[spark]')"
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    if java is None or subprocess.run([java, "-version"], capture_output=True).returncode != 0:
        return "Java is not available (the Spark backend tests need Java 17+)"
    return None


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    reason = spark_unavailable()
    if reason is not None:
        pytest.skip(f"Spark backend: {reason}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("dpframe-tests")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2").config("spark.driver.memory", "1g")
             # Tiny test tables: compiling generated code would cost more than it saves.
             .config("spark.sql.codegen.wholeStage", "false").config("spark.sql.adaptive.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


# The Spark cases of the conformance suite that run by default (a JVM query costs ~0.3-1 s); the others
# are marked slow and run with ``-m slow`` / ``-m ''``.
SPARK_DEFAULT = {
    "test_every_statistic_on_edge_values[by2]", "test_fixed_sums_saturate[by1]",
    "test_public_keys_give_zeros_and_drop_other_keys", "test_null_units_are_dropped",
    "test_empty_result_ungrouped_and_grouped", "test_method_chain_row_nodes", "test_sql_row_nodes",
    "test_bounding_keeps_min_rows_per_unit[3]", "test_bounding_keeps_min_groups_per_unit[2]",
    "test_bounding_is_stable_for_a_seed", "test_bounding_picks_rows_not_distinct_values",
    "test_bounding_samples_rows_without_replacement", "test_bounding_with_copies_is_stable_for_a_seed",
    "test_bounding_counts_copies_of_null_and_nan[null]", "test_bounding_counts_copies_of_null_and_nan[nan]",
    "test_key_types_are_kept", "test_sorted_codes_on_edge_values[by1]",
    "test_sorted_codes_with_public_keys_and_empty_groups", "test_backend_is_registered",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "::TestSpark::" in item.nodeid and item.nodeid.startswith("tests/backends/test_conformance.py") \
                and item.name not in SPARK_DEFAULT:
            item.add_marker(pytest.mark.slow)
