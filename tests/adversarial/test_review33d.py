"""Review 33d: composed queries — chains of accepted operations, found by the composed exception-oracle fuzzer.

``test_composed_oracle.py`` runs random method chains (derived columns, filters, casts, key expressions,
measures on derived columns) on D and on D′ = D plus one unit of adversarial values, on every backend, and
compares what the analyst sees. Each test is an attack it found, kept with its fix: it fails if the defence
regresses.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp

from .composed import base, neighbours


def _seen(data: pl.DataFrame, build: Any, backend: str) -> tuple[Any, list[str]]:
    """What the analyst sees of one query: ``released`` or the exception (type and message), and the ledger."""
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(100, 0.5),
                      backend=backend, seed=0)
    try:
        build(sess.table("t")).collect(dp.ApproxDP(1, 1e-6))
        seen: Any = "released"
    except BaseException as e:  # noqa: BLE001 - the analyst catches everything
        seen = (type(e).__name__, str(e))
    return seen, sess.history()["status"].to_list()


def _on_neighbours(build: Any, backend: str) -> list[tuple[Any, list[str]]]:
    extra = base().head(2).with_columns(u=pl.lit(10_000, dtype=pl.Int64))
    return [_seen(data, build, backend) for data in neighbours(extra)]


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_private_keys_of_an_enum_column_are_selected(backend: str) -> None:
    """An ``Enum`` key column with keys from the data (DP partition selection) on the DuckDB backend: the rows
    come back from DuckDB dictionary-encoded with ``string_view`` values, and decoding them (an Arrow cast from
    the dictionary to its value type) has no kernel for ``string_view``. The query was charged, then failed
    with ``ArrowNotImplementedError``, on every dataset. Dictionary columns are now decoded chunk by chunk
    through a plain string dictionary, so the query runs."""
    seen = _on_neighbours(lambda t: t.group_by("c").agg(dp.len()), backend)
    assert seen == [("released", ["committed"])] * 2


@pytest.mark.parametrize("literal", [float("nan"), float("inf"), -float("inf")])
def test_a_measure_expression_with_a_nan_literal_is_read_back_as_written(literal: float) -> None:
    """``dp.median((pl.lit(nan) * 0).pow(1e308), ...)``: a measure stored its expression as Polars' JSON, which
    writes a NaN or infinite float literal as ``null`` and does not read back, so building the query (or
    ``Measure.describe()``) raised a raw Polars ``ComputeError`` instead of a dpframe error or a result. The
    expression is now stored in Polars' binary form, which reads back exactly."""
    expr = (pl.lit(literal) * 0 + pl.col("x")).alias("y")
    assert str(dp.mean(expr, bounds=(0, 1)).expr) == str(expr)
    seen = _on_neighbours(lambda t: t.agg(dp.mean(expr, bounds=(0, 1)), dp.median(expr, bounds=(0, 1))), "polars")
    assert seen == [("released", ["committed"])] * 2
