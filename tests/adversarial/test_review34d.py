"""Review 34d: the composed D/D′ oracles on file-backed tables.

``test_composed_oracle.py`` and ``test_sql_composed_oracle.py`` now also write D and D′ each to a Parquet file
(scanned lazily by Polars, scanned by DuckDB itself, or read through Polars) or a CSV file and register them by
path (:data:`tests.adversarial.composed.STORAGES`), D′'s session running each query up to three times. Each test
is a defect they led to, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import dpframe as dp

_WIDE = pl.lit(3) * pl.lit(-(2**63))
"""Integer literals whose product leaves 64 bits: Polars reports ``Int32`` for it and computes ``Int128``."""


def _session(backend: str, tmp_path: Path) -> dp.Session:
    path = tmp_path / "t.parquet"
    pl.DataFrame({"u": [1, 2, 3], "c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}).write_parquet(path)
    return dp.Session({"t": path}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 1e-6),
                      backend=backend, seed=0)


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@pytest.mark.parametrize("build", [
    lambda t: t.select("c").filter(pl.lit(True)).agg(n=dp.count(_WIDE.abs())),     # the oracle's chain
    lambda t: t.agg(n=dp.count(_WIDE)),
    lambda t: t.with_columns(v=pl.lit(2**62) * pl.lit(4)).group_by("v").agg(dp.len()),
    lambda t: t.with_columns(v=pl.lit(2**62) + pl.lit(2**62)).agg(s=dp.sum("v", bounds=(0, 1))),
], ids=["chain", "count", "key", "sum"])
def test_a_column_polars_reports_in_another_type_than_it_computes_is_refused_when_built(
        backend: str, build: object, tmp_path: Path) -> None:
    """Integer literals combined beyond 64 bits: Polars' lazy schema says ``Int32``/``Int64`` while the values are
    ``Int128``/``UInt64``. The plan checked its reported types against the computed ones on collected frames
    only, which agree; the DuckDB backend converts the method chain's rows by the lazy schema, so every such
    query was charged, then failed (``ArrowInvalid``), on every dataset (found on a Parquet file DuckDB scans
    itself; in memory too). Now refused when built, nothing charged, on every backend."""
    sess = _session(backend, tmp_path)
    with pytest.raises(dp.PlanError, match="reported as .* but computed as"):
        build(sess.table("t")).collect(dp.ApproxDP(1, 1e-7))   # type: ignore[operator]
    assert sess.history().height == 0
    cast = sess.table("t").agg(n=dp.count(_WIDE.cast(pl.Int64, strict=False)))     # the fix the error names
    assert cast.collect(dp.ApproxDP(1, 1e-7)).columns == ["n"]
