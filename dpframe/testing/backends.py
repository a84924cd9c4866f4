"""The conformance suite for execution backends: subclass :class:`BackendConformance` in a pytest module.

Every backend — Polars, DuckDB, Spark, or a third-party one registered through the ``dpframe_backends``
hook — must return the same exact statistics (:class:`~dpframe.mechanism.Statistic`) on the same data.
Each test compares the backend against an independent NumPy/Python reference (:func:`reference`), so
every backend that passes agrees with every other.

Example (a backend package's ``tests/test_conformance.py``)::

    from dpframe.testing import BackendConformance

    class TestMyEngine(BackendConformance):
        backend_name = "myengine"          # the name its dpframe_backends hook registers

What the inherited tests check:

* every statistic kind the backend computes (``rows``, ``units``, ``nonnull``, ``distinct``, ``fixed_sum``,
  ``indicator_sum``, ``sorted``: :func:`~dpframe.backends.base.kinds_of`; a query reading another must be refused
  free) on edge values (NaN, ±inf, NULL, negative numbers, unsigned 64-bit and Decimal values, dates, datetimes),
  ungrouped and grouped, on random tables, through method-chain and SQL row nodes, from Parquet;
* ``fixed_sum`` saturation: terms and totals clipped to ±:data:`~dpframe.mechanism.SUM_LIMIT`, never a
  wrap-around or an error;
* public keys (empty keys get zeros, other keys are dropped before bounding), NULL privacy units dropped;
* contribution bounding: at most ``max_rows`` rows and ``max_groups`` groups per unit, a uniformly random
  choice of rows — not of distinct values: copies of a row are kept with their multiplicity (binomial and
  multivariate hypergeometric tests) — deterministic for a seed and stable (what a unit keeps depends only
  on its own rows and the seed, with or without repeated rows). Which rows are kept may differ between
  engines (each has its own hash), so these tests compare only what does not depend on the choice, test
  its distribution, or use ``max_rows`` ≥ rows per unit;
* key column types come back unchanged.

Override :meth:`BackendConformance.new_backend` to build the backend another way (e.g. on a given
cluster session). Nothing here is private: the data are fixed test tables.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter, defaultdict
from decimal import Decimal
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
import polars as pl
import pytest

from dpframe.backends.base import SourceAware, StatisticsRequest, kinds_of
from dpframe.budgets import PureDP
from dpframe.errors import PlanError
from dpframe.measures import count_distinct
from dpframe.mechanism import SUM_LIMIT, SortedCodes, Statistic, statistic_values
from dpframe.plan.nodes import Filter, Scan, WithColumns
from dpframe.plugin import plugin_host
from dpframe.privacy_unit import PrivacyUnit

__all__ = ["BackendConformance", "reference", "reference_sorted"]

INF, NAN = float("inf"), float("nan")
F = Fraction
ROW = PrivacyUnit.row()


def request(stats: tuple[Statistic, ...], unit: PrivacyUnit, by: tuple[str, ...] = (), keys: Any = None,
            rows: tuple[Any, ...] = (), seed: int = 11, table: str = "t") -> StatisticsRequest:
    """A :class:`StatisticsRequest` with the suite's defaults."""
    return StatisticsRequest(table, rows, unit, by, keys, stats, seed)


# ------------------------------------------------------------------------------------- reference


def _value(x: Any) -> float | str | None:
    if x is None or isinstance(x, str):
        return x
    x = float(x)
    return None if math.isnan(x) else x


def _clip(value: int) -> int:
    return max(-SUM_LIMIT, min(SUM_LIMIT, value))


def reference_stat(stat: Statistic, rows: list[dict[str, Any]], unit: str | None) -> int:
    """One exact statistic in plain Python (float64 steps where the contract specifies them)."""
    if stat.kind == "rows":
        return len(rows)
    if stat.kind == "units":
        return len({r[unit] for r in rows}) if unit else len(rows)
    assert stat.column is not None
    if stat.kind == "distinct":           # the values as they are (0.0 and -0.0 equal: one value)
        raw = [r[stat.column] for r in rows]
        return len({v for v in raw if v is not None and not (isinstance(v, float) and math.isnan(v))})
    values = [_value(r[stat.column]) for r in rows]
    if stat.kind == "nonnull":
        return sum(v is not None for v in values)
    assert stat.lower is not None and stat.upper is not None
    lo, hi = float(stat.lower), float(stat.upper)
    present = [float(v) for v in values if v is not None]
    if stat.kind == "indicator_sum":
        return sum(lo <= v < hi for v in present)
    total = 0
    for v in present:
        c = min(max(v, lo), hi) - float(stat.shift)
        p = c if stat.power == 1 else c**stat.power
        scaled = float(np.float64(p) * np.float64(2.0 ** (-stat.grid_exp)))
        total += _clip(int(np.trunc(min(max(scaled, -float(SUM_LIMIT)), float(SUM_LIMIT)))))  # toward zero
    return _clip(total)


def reference(df: pl.DataFrame, stats: tuple[Statistic, ...], unit: str | None, by: tuple[str, ...] = (),
              keys: pl.DataFrame | None = None) -> pl.DataFrame:
    """The exact statistics of ``df`` (no bounding: use max_rows ≥ rows per unit), as a backend returns them.

    Example:
        >>> df = pl.DataFrame({"g": ["a", "b", "a"], "x": [1.5, None, 2.0]})
        >>> reference(df, (Statistic("rows"), Statistic("nonnull", "x")), None, ("g",)).rows()
        [('a', 2, 2), ('b', 1, 0)]

    """
    rows = df.to_dicts()
    if unit is not None:
        rows = [r for r in rows if r[unit] is not None]
    if keys is not None:
        allowed = {tuple(k[b] for b in by) for k in keys.to_dicts()}
        rows = [r for r in rows if tuple(r[b] for b in by) in allowed]
    if not by:
        return pl.DataFrame({s.key: [reference_stat(s, rows, unit)] for s in stats},
                            schema={s.key: pl.Int64 for s in stats})
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[b] for b in by)].append(r)
    names = keys.to_dicts() if keys is not None else [dict(zip(by, g)) for g in groups]
    out: dict[str, list[Any]] = {b: [n[b] for n in names] for b in by}
    for s in stats:
        out[s.key] = [reference_stat(s, groups.get(tuple(n[b] for b in by), []), unit) for n in names]
    schema = {b: df.schema[b] for b in by} | {s.key: pl.Int64 for s in stats}
    return pl.DataFrame(out, schema=schema).sort(list(by), nulls_last=False)


def reference_sorted(stat: Statistic, rows: list[dict[str, Any]], dtype: pl.DataType) -> list[int]:
    """The ``sorted`` statistic in plain Python: floats in float64 steps, everything else exactly.

    Decimal values are truncated toward zero to integers first (the contract of :class:`Statistic`).
    """
    assert stat.lower is not None and stat.upper is not None and stat.column is not None
    codes = []
    for r in rows:
        v = r[stat.column]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if dtype.is_float():
            f = (min(max(float(v), float(stat.lower)), float(stat.upper)) - float(stat.shift)) * 2.0 ** -stat.grid_exp
            codes.append(int(np.trunc(np.float64(f))))
            continue
        if isinstance(v, dt.datetime):
            v = (v - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        elif isinstance(v, dt.date):
            v = (v - dt.date(1970, 1, 1)).days
        elif isinstance(v, Decimal):
            v = int(v)   # toward zero
        c = min(max(Fraction(v), stat.lower), stat.upper) - stat.shift
        codes.append(math.trunc(c / 2**stat.grid_exp))
    return sorted(codes)


def reference_sorted_frame(df: pl.DataFrame, stats: tuple[Statistic, ...], by: tuple[str, ...],
                           keys: pl.DataFrame | None = None) -> pl.DataFrame:
    """:func:`reference_sorted` for every group (and public key) of ``df``."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in df.to_dicts():
        groups[tuple(r[b] for b in by)].append(r)
    names = keys.to_dicts() if keys is not None else [dict(zip(by, g)) for g in groups]
    out: dict[str, list[Any]] = {b: [n[b] for n in names] for b in by}
    for s in stats:
        assert s.column is not None
        out[s.key] = [reference_sorted(s, groups.get(tuple(n[b] for b in by), []), df.schema[s.column])
                      for n in names]
    schema = {b: df.schema[b] for b in by} | {s.key: pl.List(pl.Int64) for s in stats}
    frame = pl.DataFrame(out, schema=schema)
    return frame.sort(list(by), nulls_last=False) if by else frame


def assert_same(got: pl.DataFrame, want: pl.DataFrame) -> None:
    """Same columns, types and values (NULL = NULL)."""
    assert got.columns == want.columns, (got.columns, want.columns)
    assert got.schema == want.schema, (got.schema, want.schema)
    assert got.to_dicts() == want.to_dicts(), (got.to_dicts(), want.to_dicts())


# ------------------------------------------------------------------------------------------- data

EDGE = pl.DataFrame({
    "u": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
    "x": [1.3, 2.7, -5.0, INF, -INF, NAN, None, 100.0, 0.25, 0.5, 2.5, -0.5],
    "i": [1, None, 3, 4, 5, 6, 7, 8, 9, -3, 0, 12],
    "b": [True, False, None, True, True, False, True, False, True, None, True, True],
    "g": ["a", "a", "b", "b", "b", "a", None, "c", "c", None, "a", "b"],
    "h": [1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2],
})
EVERY = (
    Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"), Statistic("nonnull", "i"),
    Statistic("nonnull", "b"), Statistic("nonnull", "g"), Statistic("distinct", "x"), Statistic("distinct", "i"),
    Statistic("distinct", "b"), Statistic("distinct", "g"),
    Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -1),
    Statistic("fixed_sum", "x", F(0), F(10), F(5), 2, 0),
    Statistic("fixed_sum", "x", F(0), F(10), F(5), 1, 2),
    Statistic("fixed_sum", "x", F(-3, 2), F(7, 4), F(1, 8), 1, -20),
    Statistic("fixed_sum", "x", F(-3, 2), F(7, 4), F(1, 8), 2, -20),
    Statistic("fixed_sum", "i", F(2), F(6), F(0), 1, 0),
    Statistic("fixed_sum", "i", F(-5), F(5), F(0), 2, -3),
    Statistic("fixed_sum", "b", F(0), F(1), F(0), 1, -4),
    Statistic("indicator_sum", "x", F(0), F(3)),
    Statistic("indicator_sum", "i", F(-3), F(4)),
)
# Sums that leave 64 bits: terms of 2^60..2^62 grid steps (a plain Int64 sum would wrap around).
HUGE = pl.DataFrame({
    "u": list(range(1, 30)),
    "g": ["a"] * 5 + ["b"] * 5 + ["c", "c"] + ["d"] * 11 + ["e"] * 6,
    "x": [3.0, 3.0, 3.0, 3.0, 3.0, -3.0, -3.0, -3.0, 2.0, None, 1.0, -1.0] + [3.0] * 11 + [3.0] * 6,
})
SATURATING = (
    Statistic("fixed_sum", "x", F(-4), F(4), F(0), 1, -61),        # ±1.5·2^62 a row: terms clipped to ±2^62
    Statistic("fixed_sum", "x", F(-4), F(4), F(0), 1, -60),        # 3·2^60 a row: 5 rows exceed 2^63
    Statistic("fixed_sum", "x", F(-4), F(4), F(0), 2, -59),        # squares: 9·2^59 a row
    Statistic("fixed_sum", "x", F(-4), F(4), F(0), 1, -58),        # terms need no clip; 11 rows exceed 2^63 (d),
    #                                                                 6 rows exceed 2^62 but not 2^63 (e)
    Statistic("fixed_sum", "x", F(-4), F(4), F(0), 1, -2),         # small: exact
)


def random_table(n: int, seed: int, units: int = 50) -> pl.DataFrame:
    """Normal ``x`` with NaN/inf/NULL, integer ``q``, keys ``g`` and ``k``, units ``u``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(50, 40, n)
    x[rng.random(n) < 0.05] = np.nan
    x[rng.random(n) < 0.01] = np.inf
    return pl.DataFrame({
        "u": rng.integers(0, units, n),
        "x": pl.Series(x).set(pl.Series(rng.random(n) < 0.05), None),
        "q": rng.integers(-100, 100, n),
        "g": rng.choice(["a", "b", "c", "d"], n),
        "k": rng.integers(0, 3, n),
    })


def units_table(n_units: int, seed: int) -> pl.DataFrame:
    """1-24 rows per unit ``u``, keys ``g`` in a..e, values ``x`` in [0, 10)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 25, n_units)
    u = np.repeat(np.arange(n_units), sizes)
    return pl.DataFrame({"u": u, "g": rng.choice(["a", "b", "c", "d", "e"], u.size), "x": rng.random(u.size) * 10})


_DECIMALS = ["-1.5", "2.5", "-2.7", "3.9", "0.5", "7.5", "4.5", "-0.5", None, "12.25", "-9.99", "1.0"]
SORTED_TABLE = EDGE.with_columns(
    d=pl.Series([dt.date(2000, 1, 1) + dt.timedelta(days=37 * k) for k in range(11)] + [None]),
    t=pl.Series([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=1_000_003 * k) for k in range(12)]),
    w=pl.Series([2**64 - 1, 0, 7, None, 3, 2**63, 12, 5, 5, 1, 9, 10], dtype=pl.UInt64),
    m=pl.Series([None if v is None else Decimal(v) for v in _DECIMALS], dtype=pl.Decimal(10, 2)),
)
SORTED = (
    Statistic("sorted", "x", F(-1), F(3), F(-1), grid_exp=-2),
    Statistic("sorted", "x", F(-1, 3), F(7, 2), F(0), grid_exp=-5),   # shift != lower: negative codes
    Statistic("sorted", "i", F(-2), F(9), F(-2)),
    Statistic("sorted", "i", F(-5), F(20), F(3), grid_exp=2),            # trunc of negatives toward zero
    Statistic("sorted", "w", F(-4), F(11), F(-4), grid_exp=1),
    Statistic("sorted", "i", F(-(2**63)), F(2**63 - 1), F(-(2**63)), grid_exp=2),  # whole Int64 range
    Statistic("sorted", "d", F(10_950), F(11_300), F(10_950)),
    Statistic("sorted", "t", F(1_704_067_200_000_000), F(1_704_067_200_000_000 + 2**43), F(1_704_067_200_000_000),
              grid_exp=20),
    Statistic("sorted", "m", F(-20), F(20), F(0)),                       # Decimal: truncated toward zero
    Statistic("sorted", "m", F(-8), F(10), F(3), grid_exp=1),
)


# ------------------------------------------------------------------------------------------ the suite


class BackendConformance:
    """Base class of a backend's conformance tests: set :attr:`backend_name` (see the module docstring).

    Example:
        >>> class TestPolars(BackendConformance):      # in a pytest module
        ...     backend_name = "polars"
        >>> backend = TestPolars().make(t=pl.DataFrame({"u": [1, 2], "x": [1.0, 2.0]}))
        >>> backend.statistics(request((Statistic("rows"),), PrivacyUnit("u")))["__rows"].item()
        2

    """

    #: The name the backend is registered under (``dpframe_backends`` hook).
    backend_name: ClassVar[str] = ""

    def new_backend(self) -> Any:
        """A fresh backend instance (default: the registered factory of :attr:`backend_name`)."""
        return plugin_host().backend(self.backend_name)

    def make(self, **tables: pl.DataFrame) -> Any:
        """A fresh backend owning ``tables`` (through ``register_source`` when it has one)."""
        backend = self.new_backend()
        for table, df in tables.items():
            if isinstance(backend, SourceAware):
                backend.register_source(table, df.lazy(), df)
            else:
                backend.register(table, df.lazy())
        return backend

    def computed(self, stats: tuple[Statistic, ...]) -> tuple[Statistic, ...]:
        """The statistics among ``stats`` whose kind the backend computes (:func:`~dpframe.backends.base.kinds_of`)."""
        kinds = kinds_of(self.new_backend())
        return tuple(s for s in stats if s.kind in kinds)

    # --------------------------------------------------------------------------------- statistics
    def test_backend_is_registered(self) -> None:
        assert self.backend_name in plugin_host().backend_names()

    def test_kinds_it_does_not_compute_are_refused_before_the_charge(self) -> None:
        """A query reading a kind the backend does not list is a free PlanError (none: nothing to check)."""
        from dpframe.session import Session

        if "distinct" in kinds_of(self.new_backend()):
            pytest.skip("the backend computes every kind")
        sess = Session({"t": EDGE}, privacy_unit=ROW, budget=PureDP(1), backend=self.backend_name)
        with pytest.raises(PlanError, match=r"^backend: .* does not compute 'distinct' statistics"):
            sess.table("t").agg(count_distinct("x")).collect(PureDP(1))
        assert sess.history().height == 0

    @pytest.mark.parametrize("by", [(), ("g",), ("g", "h")])
    def test_every_statistic_on_edge_values(self, by: tuple[str, ...]) -> None:
        stats = self.computed(EVERY)
        got = self.make(t=EDGE).statistics(request(stats, ROW, by))
        assert_same(got, reference(EDGE, stats, None, by))

    @pytest.mark.parametrize("by", [(), ("g",)])
    def test_fixed_sums_saturate(self, by: tuple[str, ...]) -> None:
        """Sums beyond 64 bits saturate at ±SUM_LIMIT on every backend: no wrap-around, no error."""
        got = self.make(t=HUGE).statistics(request(SATURATING, ROW, by))
        want = reference(HUGE, SATURATING, None, by)
        assert_same(got, want)
        values = [v for s in SATURATING for v in want[s.key].to_list()]
        assert SUM_LIMIT in values and (-SUM_LIMIT in values or not by)   # the reference does saturate

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_random_tables_grouped_and_ungrouped(self, seed: int) -> None:
        df = random_table(2_000, seed)
        stats = self.computed((
            Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"), Statistic("distinct", "q"),
            Statistic("fixed_sum", "x", F(0), F(100), F(50), 2, -8),
            Statistic("fixed_sum", "x", F(-10), F(90), F(0), 1, -12),
            Statistic("fixed_sum", "q", F(-50), F(50), F(0), 1, 0), Statistic("indicator_sum", "x", F(25), F(75))))
        unit = PrivacyUnit("u", max_rows=10_000)
        backend = self.make(t=df)
        for by in [(), ("g",), ("g", "k")]:
            assert_same(backend.statistics(request(stats, unit, by)), reference(df, stats, "u", by))

    def test_public_keys_give_zeros_and_drop_other_keys(self) -> None:
        keys = pl.DataFrame({"g": ["a", "zz", None, "c"]})
        stats = self.computed((Statistic("rows"), Statistic("units"),
                               Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -1), Statistic("distinct", "i")))
        got = self.make(t=EDGE).statistics(request(stats, ROW, ("g",), keys))
        assert_same(got, reference(EDGE, stats, None, ("g",), keys))
        assert got.filter(pl.col("g") == "zz")["__rows"].item() == 0
        assert got["g"].to_list() == [None, "a", "c", "zz"]

    def test_public_keys_two_columns_with_a_unit(self) -> None:
        df = random_table(1_000, 7)
        keys = pl.DataFrame({"g": ["a", "a", "b", "e"], "k": [0, 1, 2, 0]})
        stats = (Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"))
        unit = PrivacyUnit("u", max_rows=1_000)
        got = self.make(t=df).statistics(request(stats, unit, ("g", "k"), keys))
        assert_same(got, reference(df, stats, "u", ("g", "k"), keys))

    def test_null_units_are_dropped(self) -> None:
        df = pl.DataFrame({"u": [1, None, 2, None], "x": [1.0, 2.0, 3.0, 4.0]})
        got = self.make(t=df).statistics(request((Statistic("rows"), Statistic("units")), PrivacyUnit("u", max_rows=5)))
        assert got.to_dicts() == [{"__rows": 2, "__units": 2}]

    def test_empty_result_ungrouped_and_grouped(self) -> None:
        stats = (Statistic("rows"), Statistic("nonnull", "x"), Statistic("fixed_sum", "x", F(0), F(1), F(0), 1, -2))
        node = Filter.of(Scan.of("t", EDGE.schema), pl.col("h") > 100)
        backend = self.make(t=EDGE)
        assert backend.statistics(request(stats, ROW, (), rows=(node,))).row(0) == (0, 0, 0)
        assert backend.statistics(request(stats, ROW, ("g",), rows=(node,))).height == 0
        keyed = backend.statistics(request(stats, ROW, ("g",), pl.DataFrame({"g": ["a", "b"]}), rows=(node,)))
        assert keyed.rows() == [("a", 0, 0, 0), ("b", 0, 0, 0)]

    def test_method_chain_row_nodes(self) -> None:
        scan = Scan.of("t", EDGE.schema)
        filt = Filter.of(scan, pl.col("h") == 1)
        wc = WithColumns.of(filt, [(pl.col("i") * 2).alias("i2")], {}, None)
        stats = (Statistic("rows"), Statistic("fixed_sum", "i2", F(-10), F(10), F(0), 1, 0))
        got = self.make(t=EDGE).statistics(request(stats, ROW, ("g",), rows=(filt, wc)))
        want = reference(EDGE.filter(pl.col("h") == 1).with_columns((pl.col("i") * 2).alias("i2")), stats, None,
                         ("g",))
        assert_same(got, want)

    def test_sql_row_nodes(self) -> None:
        """Row nodes built by sess.sql (with a Polars translation) give the same statistics everywhere."""
        from dpframe.budgets import PureDP
        from dpframe.frame import Query
        from dpframe.session import Session

        sess = Session({"t": EDGE}, privacy_unit=ROW, budget=PureDP(1), backend=self.backend_name,
                       public_tables={"lk": pl.DataFrame({"g": ["a", "b"], "w": [10, 20]})})
        q = sess.sql("WITH s AS (SELECT g, h, i * 2 + 1 AS j FROM t WHERE i IS NOT NULL AND h = 1) "
                     "SELECT COUNT(*), SUM(CLAMP(j, -100, 100)), SUM(CLAMP(w, 0, 100)) FROM s LEFT JOIN lk USING (g)")
        assert isinstance(q, Query)
        stats = q.plan(PureDP(1)).statistics()
        rows = tuple(q.node.lineage()[1:-1])
        got = sess._catalog.backend().statistics(request(stats, ROW, (), rows=rows))
        base = EDGE.filter(pl.col("i").is_not_null() & (pl.col("h") == 1)).with_columns(j=pl.col("i") * 2 + 1)
        base = base.join(pl.DataFrame({"g": ["a", "b"], "w": [10, 20]}), on="g", how="left")
        assert got.to_dicts() == reference(base, stats, None).to_dicts()

    def test_key_types_are_kept(self) -> None:
        df = pl.DataFrame({"g": pl.Series(["a", "b", "a"], dtype=pl.Categorical),
                           "i": pl.Series([1, 2, 1], dtype=pl.Int8),
                           "d": [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 1)]})
        got = self.make(t=df).statistics(request((Statistic("rows"),), ROW, ("g", "i", "d")))
        assert dict(got.schema) == dict(df.schema) | {"__rows": pl.Int64}
        assert got["__rows"].to_list() == [2, 1]

    def test_parquet_sources_match_memory(self, tmp_path: Any) -> None:
        df = random_table(500, 4)
        path = tmp_path / "t.parquet"
        df.write_parquet(path)
        backend = self.new_backend()
        if isinstance(backend, SourceAware):
            backend.register_source("t", pl.scan_parquet(path), path)
        else:
            backend.register("t", pl.scan_parquet(path))
        stats = (Statistic("rows"), Statistic("fixed_sum", "x", F(0), F(100), F(0), 1, -8))
        unit = PrivacyUnit("u", max_rows=10_000)
        assert_same(backend.statistics(request(stats, unit, ("g",))), reference(df, stats, "u", ("g",)))

    # ------------------------------------------------------------------------- contribution bounding
    @pytest.mark.parametrize("max_rows", [1, 3, 10])
    def test_bounding_keeps_min_rows_per_unit(self, max_rows: int) -> None:
        df = units_table(300, max_rows)
        sizes = Counter(df["u"].to_list())
        got = self.make(t=df).statistics(request((Statistic("rows"), Statistic("units")),
                                                 PrivacyUnit("u", max_rows=max_rows)))
        assert got["__rows"].item() == sum(min(n, max_rows) for n in sizes.values())
        assert got["__units"].item() == len(sizes)

    @pytest.mark.parametrize("max_groups", [None, 1])
    def test_rows_outside_public_keys_use_none_of_a_units_rows(self, max_groups: int | None) -> None:
        # Each unit has one row in a public key (one in the null key, which matches the null key) and 30 in
        # keys outside the public ones: with max_rows = 1 (and max_groups = 1) every unit keeps its public row.
        n = 40
        df = pl.DataFrame({"u": np.repeat(np.arange(n), 31),
                           "g": np.tile(["a", *[f"z{i}" for i in range(30)]], n).tolist(),
                           "k": np.tile(np.arange(31), n)})
        df = df.with_columns(pl.when((pl.col("u") % 2 == 1) & (pl.col("g") == "a")).then(None)
                             .otherwise(pl.col("g")).alias("g"))
        unit = PrivacyUnit("u", max_rows=1, max_groups=max_groups)
        stats = (Statistic("rows"),)
        backend = self.make(t=df)
        for seed in range(5):
            got = backend.statistics(request(stats, unit, ("g",), pl.DataFrame({"g": ["a", None]}), seed=seed))
            assert got.rows() == [(None, n // 2), ("a", n // 2)]
            two = pl.DataFrame({"g": ["a", None], "k": [0, 0]})
            got = backend.statistics(request(stats, unit, ("g", "k"), two, seed=seed))
            assert got.rows() == [(None, 0, n // 2), ("a", 0, n // 2)]

    @pytest.mark.parametrize("max_groups", [1, 2])
    def test_bounding_keeps_min_groups_per_unit(self, max_groups: int) -> None:
        df = units_table(300, 10 + max_groups)
        unit = PrivacyUnit("u", max_rows=50, max_groups=max_groups)
        got = self.make(t=df).statistics(request((Statistic("units"), Statistic("rows")), unit, ("g",)))
        distinct = df.group_by("u").agg(pl.col("g").n_unique())["g"].to_list()
        assert got["__units"].sum() == sum(min(d, max_groups) for d in distinct)
        assert got["__rows"].sum() <= df.height

    def test_bounding_with_max_rows_at_least_unit_size_is_exact(self) -> None:
        df = units_table(200, 5)
        stats = (Statistic("rows"), Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -10))
        got = self.make(t=df).statistics(request(stats, PrivacyUnit("u", max_rows=25), ("g",)))
        assert_same(got, reference(df, stats, "u", ("g",)))

    def test_bounding_is_deterministic_for_a_seed(self) -> None:
        df = units_table(200, 9)
        stats = (Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -10),)
        backend = self.make(t=df)
        unit = PrivacyUnit("u", max_rows=2)
        a = backend.statistics(request(stats, unit, seed=5))
        assert a.equals(backend.statistics(request(stats, unit, seed=5)))
        assert not a.equals(backend.statistics(request(stats, unit, seed=6)))

    def test_bounding_picks_rows_uniformly(self) -> None:
        """Each of 2,000 units has rows 0..7; with max_rows=1 each value should be kept ~1/8 of the time."""
        units, per = 2_000, 8
        df = pl.DataFrame({"u": np.repeat(np.arange(units), per), "v": np.tile(np.arange(per), units)})
        got = self.make(t=df).statistics(request((Statistic("rows"),), PrivacyUnit("u", max_rows=1), ("v",)))
        counts = got["__rows"].to_numpy()
        assert counts.sum() == units
        from scipy import stats as sps

        assert sps.chisquare(counts).pvalue > 1e-4

    def kept_per_unit(self, df: pl.DataFrame, max_rows: int, seed: int) -> pl.DataFrame:
        """How many rows of each value ``v`` each unit ``u`` keeps (one row per unit, a column per value)."""
        got: pl.DataFrame = self.make(t=df).statistics(
            request((Statistic("rows"),), PrivacyUnit("u", max_rows=max_rows), ("u", "v"), seed=seed))
        return got.group_by("u").agg([pl.col("__rows").filter(pl.col("v") == v).sum().alias(str(v))
                                      for v in sorted(set(df["v"].to_list()))]).sort("u")

    def test_bounding_picks_rows_not_distinct_values(self) -> None:
        """A unit's copies of a row are separate rows: 9 copies of 0 and one 1, max_rows=1, keeps the 1 in 1/10.

        Each of 2,000 units is one trial (what a unit keeps depends only on its own rows and the seed). A
        choice uniform over distinct rows would keep the 1 in half of them.
        """
        units = 2_000
        df = pl.DataFrame({"u": np.repeat(np.arange(units), 10), "v": np.tile([0] * 9 + [1], units)})
        got = self.make(t=df.sample(fraction=1.0, shuffle=True, seed=1)).statistics(
            request((Statistic("rows"),), PrivacyUnit("u", max_rows=1), ("v",)))
        kept = dict(zip(got["v"].to_list(), got["__rows"].to_list()))
        assert kept.get(0, 0) + kept.get(1, 0) == units
        from scipy import stats as sps

        assert sps.binomtest(kept.get(1, 0), units, 0.1).pvalue > 1e-4

    @pytest.mark.parametrize("copy", [None, NAN], ids=["null", "nan"])
    def test_bounding_counts_copies_of_null_and_nan(self, copy: float | None) -> None:
        """Copies holding NULL or NaN are copies too: 9 of them and one 1.0, max_rows=1, keep the 1.0 in 1/10."""
        units = 2_000
        df = pl.DataFrame({"u": np.repeat(np.arange(units), 10), "x": ([copy] * 9 + [1.0]) * units},
                          schema={"u": pl.Int64, "x": pl.Float64})
        got = self.make(t=df.sample(fraction=1.0, shuffle=True, seed=3)).statistics(
            request((Statistic("rows"), Statistic("nonnull", "x")), PrivacyUnit("u", max_rows=1)))
        assert got["__rows"].item() == units
        from scipy import stats as sps

        assert sps.binomtest(got["__nonnull:x"].item(), units, 0.1).pvalue > 1e-4

    def test_bounding_samples_rows_without_replacement(self) -> None:
        """max_rows=3 of 5 copies of 0, 3 of 1 and 2 of 2: the kept counts are multivariate hypergeometric."""
        units, copies, k = 2_000, (5, 3, 2), 3
        df = pl.DataFrame({"u": np.repeat(np.arange(units), sum(copies)),
                           "v": np.tile(np.repeat(np.arange(len(copies)), copies), units)})
        kept = self.kept_per_unit(df.sample(fraction=1.0, shuffle=True, seed=2), k, seed=12)
        assert kept.height == units and (kept.select(pl.sum_horizontal(pl.exclude("u")).alias("n"))["n"] == k).all()
        self.assert_hypergeometric(kept, copies, k)

    @staticmethod
    def assert_hypergeometric(kept: pl.DataFrame, copies: tuple[int, ...], k: int) -> None:
        """Chi-square test of per-unit kept counts (columns after ``u``) against sampling k rows without replacement."""
        from itertools import product

        from scipy import stats as sps

        outcomes = [c for c in product(*[range(min(n, k) + 1) for n in copies]) if sum(c) == k]
        total = math.comb(sum(copies), k)
        expected = np.array([math.prod(math.comb(n, c) for n, c in zip(copies, o)) / total for o in outcomes])
        seen = Counter(kept.select(pl.exclude("u")).rows())
        assert set(seen) <= set(outcomes)
        observed = np.array([seen.get(o, 0) for o in outcomes])
        assert sps.chisquare(observed, expected * observed.sum()).pvalue > 1e-4

    @pytest.mark.slow
    def test_bounding_picks_rows_not_distinct_values_over_seeds(self) -> None:
        """The same units under 40 seeds (each unit and seed a trial): 1/10 for max_rows=1, hypergeometric for 3."""
        from scipy import stats as sps

        units, seeds = 50, range(40)
        df = pl.DataFrame({"u": np.repeat(np.arange(units), 10), "v": np.tile([0] * 9 + [1], units)})
        ones = sum(int(self.kept_per_unit(df, 1, seed)["1"].sum()) for seed in seeds)
        assert sps.binomtest(ones, units * len(seeds), 0.1).pvalue > 1e-4
        copies = (5, 3, 2)
        df = pl.DataFrame({"u": np.repeat(np.arange(units), 10), "v": np.tile(np.repeat([0, 1, 2], copies), units)})
        self.assert_hypergeometric(pl.concat([self.kept_per_unit(df, 3, seed) for seed in seeds]), copies, 3)

    def test_bounding_is_stable_for_a_seed(self) -> None:
        """Bounding is stable: what a unit keeps depends only on its own rows and the seed.

        Adding another unit's rows (here at the front, shifting every position) or reordering rows
        changes no other unit's kept rows.
        """
        df = units_table(150, 21).with_columns(owner=pl.col("u"))
        extra = pl.DataFrame({"u": [10_000] * 30, "g": ["a"] * 30, "x": np.linspace(0, 10, 30),
                              "owner": [10_000] * 30})
        bigger = pl.concat([extra, df.sample(fraction=1.0, shuffle=True, seed=3)])
        stats = (Statistic("rows"), Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -20))
        unit = PrivacyUnit("u", max_rows=3)
        a = self.make(t=df).statistics(request(stats, unit, ("owner",), seed=99))
        b = self.make(t=bigger).statistics(request(stats, unit, ("owner",), seed=99))
        assert_same(b.filter(pl.col("owner") != 10_000), a)

    def test_bounding_with_copies_is_stable_for_a_seed(self) -> None:
        """With repeated rows too: shuffling the rows or adding a unit changes no other unit's kept rows."""
        rng = np.random.default_rng(4)
        df = pl.DataFrame({"u": np.repeat(np.arange(300), 12), "v": rng.integers(0, 3, 3_600)})
        extra = pl.DataFrame({"u": [10_000] * 30, "v": [0] * 20 + [1] * 10})
        bigger = pl.concat([extra, df]).sample(fraction=1.0, shuffle=True, seed=5)
        a = self.kept_per_unit(df, 4, seed=77)
        b = self.kept_per_unit(bigger, 4, seed=77)
        assert_same(b.filter(pl.col("u") != 10_000), a)

    def test_group_by_the_unit_column(self) -> None:
        df = units_table(100, 8)
        stats = (Statistic("rows"), Statistic("units"))
        got = self.make(t=df).statistics(request(stats, PrivacyUnit("u", max_rows=2, max_groups=1), ("u",)))
        assert got["__units"].to_list() == [1] * 100
        assert got["__rows"].to_list() == [min(n, 2) for n in df.group_by("u").len().sort("u")["len"].to_list()]

    # ------------------------------------------------------------------------- sorted (list) statistic
    @pytest.mark.parametrize("by", [(), ("g",), ("g", "h")])
    def test_sorted_codes_on_edge_values(self, by: tuple[str, ...]) -> None:
        got = self.make(t=SORTED_TABLE).statistics(request(SORTED, ROW, by))
        assert_same(got, reference_sorted_frame(SORTED_TABLE, SORTED, by))

    def test_sorted_codes_with_public_keys_and_empty_groups(self) -> None:
        keys = pl.DataFrame({"g": ["a", "zz", None]})
        stats = (Statistic("rows"), *SORTED[:3])
        got = self.make(t=SORTED_TABLE).statistics(request(stats, ROW, ("g",), keys))
        want = reference(SORTED_TABLE, stats[:1], None, ("g",), keys).join(
            reference_sorted_frame(SORTED_TABLE, stats[1:], ("g",), keys), on="g", nulls_equal=True)
        assert_same(got, want.sort("g", nulls_last=False))
        assert got.filter(pl.col("g") == "zz").row(0)[1:] == (0, [], [], [])
        node = Filter.of(Scan.of("t", SORTED_TABLE.schema), pl.col("h") > 100)
        empty = self.make(t=SORTED_TABLE).statistics(request(SORTED[:1], ROW, (), rows=(node,)))
        assert empty.to_dicts() == [{SORTED[0].key: []}]

    @pytest.mark.parametrize("seed", [1, 2])
    def test_sorted_codes_random_tables(self, seed: int) -> None:
        df = random_table(3_000, seed)
        stats = (Statistic("sorted", "x", F(-20), F(120), F(-20), grid_exp=-3),
                 Statistic("sorted", "q", F(-60), F(60), F(-60)))
        unit = PrivacyUnit("u", max_rows=10_000)
        for by in [(), ("g",), ("g", "k")]:
            got = self.make(t=df).statistics(request(stats, unit, by))
            assert_same(got, reference_sorted_frame(df, stats, by))

    @pytest.mark.parametrize("by", [(), ("g",)])
    def test_partial_sorted_codes_agree_with_the_whole_list(self, by: tuple[str, ...]) -> None:
        """``near``: whatever a backend lists (everything, or codes near q·n) sits at its true ranks."""
        rng = np.random.default_rng(3)
        n = 60_000
        x = rng.normal(0, 30, n).round(1)           # ties, NaN and nulls
        x[rng.random(n) < 0.02] = np.nan
        keys = pl.Series(rng.choice(["a", "b", "-"], n)).replace("-", None)
        df = pl.DataFrame({"u": np.arange(n), "x": pl.Series(x).set(pl.Series(rng.random(n) < 0.02), None),
                           "q": rng.integers(-50, 50, n), "g": keys})
        whole = (Statistic("sorted", "x", Fraction(-80), Fraction(80), Fraction(-80), grid_exp=-2),
                 Statistic("sorted", "q", Fraction(-60), Fraction(60), Fraction(-60)))
        near = tuple(Statistic(s.kind, s.column, s.lower, s.upper, s.shift, grid_exp=s.grid_exp,
                               near=targets, reach=40)
                     for s, targets in zip(whole, [(Fraction(1, 2),), (Fraction(1, 10), Fraction(9, 10))]))
        backend = self.make(t=df)
        public = pl.DataFrame({"g": ["a", "b", "zz", None]}) if by else None
        got = backend.statistics(request((Statistic("rows"), *near), ROW, by, public))
        full = backend.statistics(request((Statistic("rows"), *whole), ROW, by, public))
        assert got.select(list(by)).equals(full.select(list(by)))
        for partial, complete in zip(near, whole):
            lists = [np.asarray(v, dtype=np.int64) for v in full[complete.key].to_list()]
            codes = statistic_values(got[partial.key], lambda lists=lists: lists)   # type: ignore[misc]
            codes = SortedCodes.of(codes)
            assert codes.sizes.tolist() == [v.size for v in lists]
            reference = np.concatenate(lists)
            known = codes.known_positions()
            assert (codes.at(known) == reference[known]).all()
            assert codes.known or known.size < reference.size

    def test_sorted_codes_are_the_domain_encoding(self) -> None:
        """dpframe.domains.OrderedDomain.encode is the backends' map: same codes, same order once sorted."""
        from dpframe.domains import OrderedDomain

        cases: list[tuple[str, Any, Any]] = [("x", (-1, 3), 0.3), ("i", (-2, 9), None), ("w", (-4, 11), 2),
                                             ("d", (dt.date(2000, 1, 1), dt.date(2001, 1, 1)), None)]
        for column, bounds, resolution in cases:
            dom = OrderedDomain.of(column, SORTED_TABLE.schema[column], bounds, resolution)
            got = self.make(t=SORTED_TABLE).statistics(request((dom.statistic,), ROW))
            assert got[dom.statistic.key].to_list() == [sorted(dom.encode(SORTED_TABLE[column]).tolist())]
