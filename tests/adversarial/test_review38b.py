"""Review 38b: the D/D′ oracles with a privacy-unit column of every type, and queries grouped by the unit column.

Scope: the composed oracles (method chains and SQL; ``tests/adversarial/composed.py``, ``sql_composed.py``) now draw
the unit column's type (:data:`~tests.adversarial.composed.UNIT_TYPES`: Int64, UInt64, Int128, Float64, Float32,
String, Categorical, Enum, Binary, Decimal, Date, Datetime, Datetime with a time zone, Boolean) and the added
unit's id adversarially — the type's extremes, an id equal to one of D's by the unit equality (``-0.0`` for
``0.0``, a NaN of another payload), ids a conversion or normalization would merge with one of D's (a trailing
space, another case or Unicode form, ``2**53 + 1`` as a float, another UTC offset of one instant), null-like
strings and a null id — and group by the unit column itself; on the Polars, DuckDB and Spark backends, in memory
and in files (with ``sample()`` and ``bound()`` steps); and the engine's unit equality (``docs/guarantees.md``:
0.0 and −0.0 one unit, every NaN one unit, strings and binaries byte by byte) checked end to end on each backend.
Each test is an attack that broke, kept with its fix, or a check that found the engine sound.
"""

from __future__ import annotations

import math
import struct
import unicodedata
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

import dpframe as dp

_APPROX = dp.ApproxDP(1, 1e-6)

# ---------------------------------------------------------------------------- 1. grouping by the unit column


def _ids() -> pl.DataFrame:
    return pl.DataFrame({"u": [f"u{i}" for i in range(40)] * 2, "x": [0.5] * 80})


_BY_UNIT: dict[str, tuple[dp.PrivacyUnit, Callable[[dp.Session], Any]]] = {
    "max_rows=auto": (dp.PrivacyUnit("u", max_rows="auto"),
                      lambda s: s.table("t").group_by("u").agg(n=dp.len()).collect(_APPROX)),
    "max_groups=auto": (dp.PrivacyUnit("u", max_rows=2, max_groups="auto"),
                        lambda s: s.table("t").group_by("u", keys=["u1", "u2"]).agg(n=dp.len()).collect(_APPROX)),
    "diagnostics": (dp.PrivacyUnit("u", max_rows=2),
                    lambda s: s.table("t").group_by("u").agg(n=dp.mean("x", bounds=(0, 1))).collect(
                        _APPROX, diagnostics=True)),
    "sql_diagnostics": (dp.PrivacyUnit("u", max_rows=2, max_groups=1),
                        lambda s: s.sql("SELECT u, COUNT(*) AS n FROM t GROUP BY u").collect(_APPROX,
                                                                                             diagnostics=True)),
}


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("entry", sorted(_BY_UNIT))
def test_a_query_grouped_by_the_unit_column_runs_when_it_tunes_or_diagnoses(entry: str, backend: str) -> None:
    """Attack (found by the composed oracle once its chains could group by the unit column): ``group_by("u")`` —
    grouping by the privacy-unit column itself, which the engine accepts — under a unit with ``max_rows="auto"``
    or ``max_groups="auto"``, or collected with ``diagnostics=True``, was charged, then failed with a
    ``DuplicateError`` on every dataset (``failed`` in the ledger, the budget spent for nothing): the tuning stage
    and the diagnostics count rows per unit and group, ``by=(unit, *keys)``, and asked for ``("u", "u")``. Both now
    ask for the unit column once (``dpframe.tuning.diagnostics.by_unit_and_group``): the query is released and
    committed."""
    unit, query = _BY_UNIT[entry]
    sess = dp.Session({"t": _ids()}, privacy_unit=unit, budget=dp.ApproxDP(10, 1e-3), backend=backend, seed=0)
    query(sess)
    assert sess.history()["status"].to_list() == ["committed"]


# ---------------------------------------------------------------------------- 2. a grid's bins when no row is read

_EMPTY_BINS: dict[str, Callable[[dp.Frame], Any]] = {
    "frame.bounds": lambda f: f.bounds("x").collect(_APPROX),
    "bounds=auto": lambda f: f.agg(s=dp.sum("x", bounds="auto")).collect(_APPROX),
    "grouped bounds=auto": lambda f: f.group_by("g", keys=[0, 1]).agg(m=dp.mean("x", bounds="auto")).collect(_APPROX),
    "histogram": lambda f: f.agg(h=dp.measure("histogram", "x", bounds=(0, 32), edges=list(range(33)))).collect(
        _APPROX),
}


@pytest.mark.parametrize("entry", sorted(_EMPTY_BINS))
def test_a_grid_of_bins_that_no_row_reaches_is_counted_on_duckdb(entry: str) -> None:
    """Attack (found by the unit-type oracle, a chain ending in ``filter(False)`` then ``bounds="auto"``): on the
    DuckDB backend, a query whose statistics are a grid of at least 16 adjacent bins — ``frame.bounds()``,
    ``bounds="auto"``, a histogram with many edges — counts them in one ASOF join whose pairs come back as
    ``list(...)``, and DuckDB's ``list()`` of no rows is NULL, which the counting read as a list: an
    ``AttributeError`` after the charge. So on D, where no row passes ``filter(x > 5)``, the query was charged,
    then failed; on D′ = D plus one unit with ``x = 7`` it was released — ``failed`` or ``committed`` answered
    "does any row pass this filter?" exactly, outside every ε. NULL now counts as no pair
    (``dpframe.backends.bins.Bins.counts``): both are released and committed, on both datasets. (The same held
    under ``dp.PrivacyUnit.row()``; the Polars backend counts the bins as an empty list, and the Spark backend
    counts each bin on its own.)"""
    d = pl.DataFrame({"u": list(range(40)) * 2, "x": [1.0] * 80, "g": [0, 1] * 40})
    d_plus = pl.concat([d, pl.DataFrame({"u": [99], "x": [7.0], "g": [0]})])
    seen = []
    for data in (d, d_plus):
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 1e-3),
                          backend="duckdb", seed=0)
        _EMPTY_BINS[entry](sess.table("t").filter(pl.col("x") > 5))
        seen.append(sess.history()["status"].to_list())
    assert seen == [["committed"], ["committed"]]


# ---------------------------------------------------------------------------- 3. the unit equality on every backend

def _far_ms_units() -> pl.DataFrame:
    """Four units of two rows each: two ordinary millisecond datetimes, two beyond the microsecond range (the years
    402,000 and 402,001; Polars' millisecond datetimes reach 292 million years)."""
    day = 86_400_000
    ids = pl.Series([18_262 * day, 18_263 * day, 146_730_000 * day, 146_730_365 * day]).cast(pl.Datetime("ms"))
    return pl.DataFrame({"u": ids.gather([0, 0, 1, 1, 2, 2, 3, 3]), "x": [1.0] * 8})


_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0001))[0]
_NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8_0000_0000_0000))[0]
_NFC, _NFD = unicodedata.normalize("NFC", "é"), unicodedata.normalize("NFD", "é")
#: Unit ids and how many units they are by the documented equality (0.0 and −0.0 one unit, every NaN one unit,
#: strings and binaries byte by byte; one value of a type is one unit whatever a backend converts it to).
_EQUALITY: dict[str, tuple[pl.Series, int]] = {
    "float64": (pl.Series([0.0, -0.0, math.nan, _NAN, _NEG_NAN, 1.0, 1.0 + 2**-52, 5e-324]), 5),
    "float32": (pl.Series([0.0, -0.0, math.nan, 1e-45, 3.4028234663852886e38], dtype=pl.Float32), 4),
    "string": (pl.Series(["a", "a ", " a", "A", _NFC, _NFD, "", "\x00", "a\x00", "NULL", "nan", "\ufeffa"]), 12),
    "categorical": (pl.Series(["a", "a ", "A", "", "NULL"], dtype=pl.Categorical), 5),
    "enum": (pl.Series(["a", "a ", "A", ""], dtype=pl.Enum(["a", "a ", "A", ""])), 4),
    "binary": (pl.Series([b"", b"\x00", b"\x00\x00", b"a", b"a ", b"\xff"]), 6),
    "uint64": (pl.Series([2**64 - 1, 2**63, 2**63 - 1, 0], dtype=pl.UInt64), 4),
    "int128": (pl.Series([2**127 - 1, 2**127 - 2, -(2**127)], dtype=pl.Int128), 3),
    "decimal": (pl.Series(["1.10", "1.1", "-0.00", "0.00", "9" * 36 + ".99"]).cast(pl.Decimal(38, 2)), 3),
    "datetime_tz": (pl.Series([0, 1, 3_600_000_000, 2 * 3_600_000_000]).cast(pl.Datetime("us", "UTC"))
                    .dt.convert_time_zone("America/St_Johns"), 4),
    "boolean": (pl.Series([True, False]), 2),
    "datetime_ms": (_far_ms_units()["u"].unique(maintain_order=True), 4),
}
#: Unit types a backend refuses (on the type, when the session is created).
_REFUSED = {("duckdb", "int128"), ("spark", "int128"), ("duckdb", "datetime_ms"), ("spark", "datetime_ms")}


def _counted(backend: str, ids: pl.Series) -> tuple[int, int, int, list[int]]:
    """Rows under ``max_rows=1`` (method chain and SQL), units, and rows per group under ``max_rows=2, max_groups=1``,
    released at ε = 10⁷ (noise ≪ 1) from a table holding each id on three rows, over two groups."""
    n = ids.len()
    table = pl.DataFrame({"u": ids.gather([j // 3 for j in range(3 * n)]), "g": [j % 2 for j in range(3 * n)]})
    big = dp.PureDP(10**7)
    one = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10**9),
                     backend=backend, seed=3)
    groups = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("u", max_rows=2, max_groups=1),
                        budget=dp.PureDP(10**9), backend=backend, seed=3)
    return (one.table("t").agg(n=dp.len()).collect(big).item(), one.sql("SELECT COUNT(*) FROM t").collect(big).item(),
            one.table("t").agg(n=dp.count_units()).collect(big).item(),
            groups.table("t").group_by("g", keys=[0, 1]).agg(n=dp.len()).collect(big)["n"].to_list())


def _check_equality(backend: str, kind: str) -> None:
    ids, units = _EQUALITY[kind]
    try:
        rows, sql, counted, per_group = _counted(backend, ids)
    except dp.SchemaError as e:     # a type the backend refuses, when the session is created
        assert (backend, kind) in _REFUSED and e.argument == "privacy_unit", e
        return
    assert (backend, kind) not in _REFUSED
    assert (rows, sql, counted) == (units, units, units), (kind, backend, rows, sql, counted)
    assert sum(per_group) <= 2 * units and sum(per_group) >= units, (kind, backend, per_group)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_every_backend_counts_units_by_the_documented_equality(backend: str) -> None:
    """Sound (nothing broke): the ids above, each on three rows, are counted as the documented number of units —
    rows under ``max_rows=1`` (chain and SQL), ``count_units()``, and at most ``2 · units`` rows under ``max_rows=2,
    max_groups=1`` — so no backend splits one unit (−0.0 and 0.0, NaNs of other payloads or signs) or merges two
    (a trailing space, a case, Unicode forms, NUL bytes, ``"NULL"``, UInt64 above 2⁶³, 128-bit neighbours, decimals
    of one value written alike, one instant in a time zone). The fast subset; every type and Spark: slow."""
    for kind in ("float64", "string"):
        _check_equality(backend, kind)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb", "spark"])
@pytest.mark.parametrize("kind", sorted(_EQUALITY))
def test_every_backend_counts_every_unit_type_by_the_documented_equality(kind: str, backend: str,
                                                                        request: pytest.FixtureRequest) -> None:
    if backend == "spark":
        request.getfixturevalue("spark_session")
    _check_equality(backend, kind)


# ---------------------------------------------------------------------------- 4. a unit column Spark cannot hold

def test_a_unit_column_spark_cannot_hold_is_refused_by_its_type(spark_session: Any) -> None:
    """Attack: a privacy-unit column of millisecond datetimes on the Spark backend. Spark keeps microseconds, and
    the rows are shipped by a non-strict cast, so the two units beyond the microsecond range arrived as NULL ids:
    their rows were dropped on Spark (``len()`` under ``max_rows=1``: 2) while the Polars backend counted them (4)
    — the unit equality must be one on every backend, and the DuckDB backend refuses this type for that reason
    (``test_review34.py``). Fix: the Spark backend refuses it by type too (``SparkBackend.check_unit``): a
    ``SchemaError`` naming ``privacy_unit`` when the session is created or a query naming ``backend="spark"`` is
    built, nothing read or charged (such a column that is not the unit stays accepted: the oracles' ``z``)."""
    table = _far_ms_units()
    polars = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10**9), seed=3)
    assert polars.table("t").agg(n=dp.len()).collect(dp.PureDP(10**7)).item() == 4
    with pytest.raises(dp.SchemaError) as refused:
        dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(1), backend="spark",
                   spark=spark_session)
    assert refused.value.argument == "privacy_unit" and "microseconds" in str(refused.value)
    with pytest.raises(dp.SchemaError, match="privacy_unit"):
        polars.sql("SELECT COUNT(*) AS n FROM t", backend="spark")
    assert polars.history().height == 1
