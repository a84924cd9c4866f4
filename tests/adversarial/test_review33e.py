"""Review 33e: contribution bounding on every backend, on privacy-unit and key columns of every type.

The privacy proof needs every step to agree on which rows form one unit (counting, bucketing, hashing,
ranking, choosing its groups, then the engine's grouping), what a unit keeps to depend only on its own rows
and the seed, and the same seed to keep the same rows on every backend. Probed (none broke the first two):
floats with 0.0 / −0.0 and NaNs with other payloads (scalars, in lists and structs), strings differing only
by case, trailing spaces or Unicode normalization, decimals, time-zoned datetimes, binaries, UInt64 above
2⁶³, Spark's partitioning and sampling of float units. What broke is below: each test is an attack that
broke, kept with its fix; it fails if the defence regresses. D and D′ are neighbouring datasets (D′ adds
one privacy unit).
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.mechanism import Statistic
from dpframe.privacy_unit import PrivacyUnit

SEED = 11


def _statistics(backend: type[PolarsBackend] | type[DuckDBBackend], data: pl.DataFrame, unit: PrivacyUnit,
                by: tuple[str, ...] = (), keys: pl.DataFrame | None = None) -> pl.DataFrame:
    b = backend()
    b.register("t", data.lazy())
    stats = (Statistic("rows"), Statistic("units"))
    return b.statistics(StatisticsRequest("t", (), unit, by, keys, stats, SEED))


def _neighbours(dtype: pl.DataType) -> tuple[pl.DataFrame, pl.DataFrame]:
    """D: units a, b, c with 3 rows each over groups 0-2; D′: D plus unit z with 30 rows in every group."""
    units = [u for u in "abc" for _ in range(3)]
    d = pl.DataFrame({"u": pl.Series(units, dtype=dtype), "g": [i % 3 for i in range(9)]})
    z = pl.DataFrame({"u": pl.Series(["z"] * 30, dtype=dtype), "g": [i % 3 for i in range(30)]})
    return d, pl.concat([d, z])


@pytest.mark.parametrize("dtype", [pl.Categorical(), pl.Enum(["a", "b", "c", "z"])], ids=["categorical", "enum"])
@pytest.mark.parametrize("keyed", [False, True], ids=["no keys", "public keys"])
def test_a_categorical_unit_is_bounded_on_duckdb_as_on_polars(dtype: pl.DataType, keyed: bool) -> None:
    """Attack: a privacy unit (or a group key) stored as a Polars ``Categorical`` or ``Enum`` — a legitimate
    id column of the data owner. The DuckDB backend decides which rows bounding ranks in Polars, after
    decoding Arrow dictionaries with ``pyarrow``'s cast, which has no kernel for Polars' dictionaries of
    string views: every bounded query on such a table failed *after its charge* (``ArrowNotImplementedError``,
    the budget spent, nothing released). Fix: the dictionary columns are decoded by Polars
    (``duckdb._plain``); on DuckDB each unit keeps what it keeps on Polars (the totals agree: which groups
    a unit keeps for one seed may differ, the engines' hashes differ), and one unit moves a count by at most
    ``max_rows`` per group, in at most ``max_groups`` groups."""
    unit = PrivacyUnit("u", max_rows=2, max_groups=1)
    by = ("g",) if keyed else ()
    keys = pl.DataFrame({"g": [0, 1, 2]}) if keyed else None
    d, d2 = _neighbours(dtype)
    before, after = (_statistics(DuckDBBackend, data, unit, by, keys) for data in (d, d2))
    for data, got in ((d, before), (d2, after)):
        assert got.select("__rows", "__units").sum().equals(
            _statistics(PolarsBackend, data, unit, by, keys).select("__rows", "__units").sum())
    moved = (after["__rows"] - before["__rows"]).to_list()
    assert before["__rows"].sum() == (3 if keyed else 6)
    assert all(0 <= m <= 2 for m in moved) and sum(m > 0 for m in moved) == 1


@pytest.mark.parametrize("dtype", [pl.Int128(), pl.UInt128()], ids=["Int128", "UInt128"])
def test_a_128_bit_unit_is_refused_on_duckdb_rather_than_dropped(dtype: pl.DataType) -> None:
    """Attack: a privacy unit of 128-bit integers (a UUID held as ``UInt128``: seven in ten are above 10³⁸).
    DuckDB is handed such a column as ``DECIMAL(38, 0)`` (Arrow has no 128-bit integer), by a non-strict
    cast: a unit beyond 38 digits became NULL there and its rows were dropped, while the Polars backend
    counted them — for the same seed the two backends released different statistics (a count of 2 on DuckDB
    for 4 units on Polars), and a unit's presence changed nothing on one backend and everything on the
    other. Fix: the DuckDB backend refuses a 128-bit integer privacy-unit column (its type, never its
    values: a ``SchemaError`` naming ``privacy_unit`` with the fix, when the session is created — or, for a
    query that names ``backend='duckdb'`` in a session on another backend, when the query is built),
    nothing charged; the Polars backend keeps every such unit."""
    data = pl.DataFrame({"u": pl.Series([10**38 + 1, 10**38 + 2, 5, 6], dtype=dtype), "x": [1.0] * 4})
    unit = dp.PrivacyUnit("u", max_rows=1)
    with pytest.raises(dp.SchemaError) as refused:
        dp.Session({"t": data}, privacy_unit=unit, budget=dp.PureDP(1), backend="duckdb")
    assert refused.value.argument == "privacy_unit" and "String" in (refused.value.fix or "")
    sess = dp.Session({"t": data}, privacy_unit=unit, budget=dp.PureDP(10**6), seed=SEED)
    assert sess.table("t").agg(n=dp.len()).collect(dp.PureDP(10**5)).item() == 4
    with pytest.raises(dp.SchemaError) as later:
        sess.sql("SELECT COUNT(*) AS n FROM t", backend="duckdb")
    assert later.value.argument == "privacy_unit" and sess.spent() == dp.PureDP(10**5)
