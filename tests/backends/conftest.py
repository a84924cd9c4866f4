"""Which Spark conformance cases run by default (the ``spark_session`` fixture is in ``tests/conftest.py``)."""

from __future__ import annotations

import pytest

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
