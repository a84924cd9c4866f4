"""Backend conformance: every registered backend returns the same exact statistics on the same data.

The suite is parametrized over ``plugin_host().backend_names()``, so a new backend (Spark, or a
third-party plugin registered through ``dpframe_backends``) runs it just by being installed. Each test
compares a backend against an independent NumPy/Python reference, and so every backend against every
other. Contribution bounding keeps a random subset per unit, which may differ between engines, so tests
with bounding compare only what does not depend on which rows are kept (totals of min(n, max_rows),
distinct units, per-unit caps), or use max_rows ≥ rows per unit for exact equality.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter, defaultdict
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

import dpframe as dp
from dpframe.backends.base import StatisticsRequest
from dpframe.mechanism import Statistic
from dpframe.plan.nodes import Filter, Scan, WithColumns
from dpframe.plugin import plugin_host

BACKENDS = plugin_host().backend_names()
INF, NAN = float("inf"), float("nan")
F = Fraction


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    if request.param == "spark":
        request.getfixturevalue("spark_session")  # local[2]; skips with the reason without PySpark/Java
    return str(request.param)


def make(name: str, **tables: pl.DataFrame) -> Any:
    backend = plugin_host().backend(name)
    for table, df in tables.items():
        hook = getattr(backend, "register_source", None)
        if hook is not None:
            hook(table, df.lazy(), df)
        else:
            backend.register(table, df.lazy())
    return backend


def request(stats: tuple[Statistic, ...], unit: dp.PrivacyUnit, by: tuple[str, ...] = (), keys: Any = None,
            rows: tuple[Any, ...] = (), seed: int = 11, table: str = "t") -> StatisticsRequest:
    return StatisticsRequest(table, rows, unit, by, keys, stats, seed)


# ------------------------------------------------------------------------------------- reference


def _value(x: Any) -> float | str | None:
    if x is None or isinstance(x, str):
        return x
    x = float(x)
    return None if math.isnan(x) else x


def reference_stat(stat: Statistic, rows: list[dict[str, Any]], unit: str | None) -> int:
    """The exact statistic, computed in plain Python (float64 steps as the contract specifies)."""
    if stat.kind == "rows":
        return len(rows)
    if stat.kind == "units":
        return len({r[unit] for r in rows}) if unit else len(rows)
    values = [_value(r[stat.column]) for r in rows]
    if stat.kind == "nonnull":
        return sum(v is not None for v in values)
    lo, hi = float(stat.lower), float(stat.upper)
    present = [v for v in values if v is not None]
    if stat.kind == "indicator_sum":
        return sum(lo <= v < hi for v in present)
    total = 0
    for v in present:
        c = min(max(v, lo), hi) - float(stat.shift)
        p = c if stat.power == 1 else c * c
        total += int(np.trunc(np.float64(p) * np.float64(2.0 ** (-stat.grid_exp))))  # toward zero, as Polars
    return total


def reference(df: pl.DataFrame, stats: tuple[Statistic, ...], unit: str | None, by: tuple[str, ...] = (),
              keys: pl.DataFrame | None = None) -> pl.DataFrame:
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
    names = [k for k in (keys.to_dicts() if keys is not None else [dict(zip(by, g)) for g in groups])]
    out = {b: [n[b] for n in names] for b in by}
    for s in stats:
        out[s.key] = [reference_stat(s, groups.get(tuple(n[b] for b in by), []), unit) for n in names]
    schema = {b: df.schema[b] for b in by} | {s.key: pl.Int64 for s in stats}
    return pl.DataFrame(out, schema=schema).sort(list(by), nulls_last=False)


def assert_same(got: pl.DataFrame, want: pl.DataFrame) -> None:
    assert got.columns == want.columns, (got.columns, want.columns)
    assert got.schema == want.schema, (got.schema, want.schema)
    assert got.to_dicts() == want.to_dicts()


# ------------------------------------------------------------------------------------------- data

EDGE = pl.DataFrame({
    "u": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
    "x": [1.3, 2.7, -5.0, INF, -INF, NAN, None, 100.0, 0.25, 0.5, 2.5, -0.5],
    "i": [1, None, 3, 4, 5, 6, 7, 8, 9, -3, 0, 12],
    "b": [True, False, None, True, True, False, True, False, True, None, True, True],
    "g": ["a", "a", "b", "b", "b", "a", None, "c", "c", None, "a", "b"],
    "h": [1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2],
})
ROW = dp.PrivacyUnit.row()
EVERY = (
    Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"), Statistic("nonnull", "i"),
    Statistic("nonnull", "b"), Statistic("nonnull", "g"),
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


def random_table(n: int, seed: int, units: int = 50) -> pl.DataFrame:
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


# ------------------------------------------------------------------------------------------ tests


def test_backends_are_registered() -> None:
    assert {"polars", "duckdb"} <= set(BACKENDS)


@pytest.mark.parametrize("by", [(), ("g",), ("g", "h")])
def test_every_statistic_on_edge_values(backend_name: str, by: tuple[str, ...]) -> None:
    got = make(backend_name, t=EDGE).statistics(request(EVERY, ROW, by))
    assert_same(got, reference(EDGE, EVERY, None, by))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_tables_grouped_and_ungrouped(backend_name: str, seed: int) -> None:
    df = random_table(2_000, seed)
    stats = (Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"),
             Statistic("fixed_sum", "x", F(0), F(100), F(50), 2, -8),
             Statistic("fixed_sum", "x", F(-10), F(90), F(0), 1, -12),
             Statistic("fixed_sum", "q", F(-50), F(50), F(0), 1, 0),
             Statistic("indicator_sum", "x", F(25), F(75)))
    unit = dp.PrivacyUnit("u", max_rows=10_000)
    backend = make(backend_name, t=df)
    for by in [(), ("g",), ("g", "k")]:
        assert_same(backend.statistics(request(stats, unit, by)), reference(df, stats, "u", by))


def test_public_keys_give_zeros_and_drop_other_keys(backend_name: str) -> None:
    keys = pl.DataFrame({"g": ["a", "zz", None, "c"]})
    stats = (Statistic("rows"), Statistic("units"), Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -1))
    got = make(backend_name, t=EDGE).statistics(request(stats, ROW, ("g",), keys))
    assert_same(got, reference(EDGE, stats, None, ("g",), keys))
    assert got.filter(pl.col("g") == "zz")["__rows"].item() == 0
    assert got["g"].to_list() == [None, "a", "c", "zz"]


def test_public_keys_two_columns_with_a_unit(backend_name: str) -> None:
    df = random_table(1_000, 7)
    keys = pl.DataFrame({"g": ["a", "a", "b", "e"], "k": [0, 1, 2, 0]})
    stats = (Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"))
    unit = dp.PrivacyUnit("u", max_rows=1_000)
    got = make(backend_name, t=df).statistics(request(stats, unit, ("g", "k"), keys))
    assert_same(got, reference(df, stats, "u", ("g", "k"), keys))


def test_null_units_are_dropped(backend_name: str) -> None:
    df = pl.DataFrame({"u": [1, None, 2, None], "x": [1.0, 2.0, 3.0, 4.0]})
    got = make(backend_name, t=df).statistics(
        request((Statistic("rows"), Statistic("units")), dp.PrivacyUnit("u", max_rows=5)))
    assert got.to_dicts() == [{"__rows": 2, "__units": 2}]


def test_empty_result_ungrouped_and_grouped(backend_name: str) -> None:
    stats = (Statistic("rows"), Statistic("nonnull", "x"), Statistic("fixed_sum", "x", F(0), F(1), F(0), 1, -2))
    node = Filter.of(Scan.of("t", EDGE.schema), pl.col("h") > 100)
    backend = make(backend_name, t=EDGE)
    assert backend.statistics(request(stats, ROW, (), rows=(node,))).row(0) == (0, 0, 0)
    assert backend.statistics(request(stats, ROW, ("g",), rows=(node,))).height == 0
    keyed = backend.statistics(request(stats, ROW, ("g",), pl.DataFrame({"g": ["a", "b"]}), rows=(node,)))
    assert keyed.rows() == [("a", 0, 0, 0), ("b", 0, 0, 0)]


def test_method_chain_row_nodes(backend_name: str) -> None:
    scan = Scan.of("t", EDGE.schema)
    filt = Filter.of(scan, pl.col("h") == 1)
    wc = WithColumns.of(filt, [(pl.col("i") * 2).alias("i2")], {}, None)
    stats = (Statistic("rows"), Statistic("fixed_sum", "i2", F(-10), F(10), F(0), 1, 0))
    got = make(backend_name, t=EDGE).statistics(request(stats, ROW, ("g",), rows=(filt, wc)))
    want = reference(EDGE.filter(pl.col("h") == 1).with_columns((pl.col("i") * 2).alias("i2")), stats, None, ("g",))
    assert_same(got, want)


def test_sql_row_nodes(backend_name: str) -> None:
    """Row nodes built by sess.sql (with a Polars translation) give the same statistics everywhere."""
    sess = dp.Session({"t": EDGE}, privacy_unit=ROW, budget=dp.PureDP(1), backend=backend_name,
                      public_tables={"lk": pl.DataFrame({"g": ["a", "b"], "w": [10, 20]})})
    q = sess.sql("WITH s AS (SELECT g, h, i * 2 + 1 AS j FROM t WHERE i IS NOT NULL AND h = 1) "
                 "SELECT COUNT(*), SUM(CLAMP(j, -100, 100)), SUM(CLAMP(w, 0, 100)) FROM s LEFT JOIN lk USING (g)")
    stats = q.plan(dp.PureDP(1)).statistics()
    rows = tuple(n for n in q.node.lineage()[1:-1])
    got = sess._backend_for(None).statistics(request(stats, ROW, (), rows=rows))
    base = EDGE.filter(pl.col("i").is_not_null() & (pl.col("h") == 1)).with_columns(j=pl.col("i") * 2 + 1)
    base = base.join(pl.DataFrame({"g": ["a", "b"], "w": [10, 20]}), on="g", how="left")
    assert got.to_dicts() == reference(base, stats, None).to_dicts()


# ------------------------------------------------------------------------------ contribution bounding


def _units_table(n_units: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 25, n_units)
    u = np.repeat(np.arange(n_units), sizes)
    return pl.DataFrame({"u": u, "g": rng.choice(["a", "b", "c", "d", "e"], u.size),
                         "x": rng.random(u.size) * 10})


@pytest.mark.parametrize("max_rows", [1, 3, 10])
def test_bounding_keeps_min_rows_per_unit(backend_name: str, max_rows: int) -> None:
    df = _units_table(300, max_rows)
    sizes = Counter(df["u"].to_list())
    stats = (Statistic("rows"), Statistic("units"))
    got = make(backend_name, t=df).statistics(request(stats, dp.PrivacyUnit("u", max_rows=max_rows)))
    assert got["__rows"].item() == sum(min(n, max_rows) for n in sizes.values())
    assert got["__units"].item() == len(sizes)


@pytest.mark.parametrize("max_groups", [1, 2])
def test_bounding_keeps_min_groups_per_unit(backend_name: str, max_groups: int) -> None:
    df = _units_table(300, 10 + max_groups)
    unit = dp.PrivacyUnit("u", max_rows=50, max_groups=max_groups)
    got = make(backend_name, t=df).statistics(request((Statistic("units"), Statistic("rows")), unit, ("g",)))
    distinct = df.group_by("u").agg(pl.col("g").n_unique())["g"].to_list()
    assert got["__units"].sum() == sum(min(d, max_groups) for d in distinct)
    assert got["__rows"].sum() <= df.height


def test_bounding_with_max_rows_at_least_unit_size_is_exact(backend_name: str) -> None:
    df = _units_table(200, 5)
    stats = (Statistic("rows"), Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -10))
    unit = dp.PrivacyUnit("u", max_rows=25)
    got = make(backend_name, t=df).statistics(request(stats, unit, ("g",)))
    assert_same(got, reference(df, stats, "u", ("g",)))


def test_bounding_is_deterministic_for_a_seed(backend_name: str) -> None:
    df = _units_table(200, 9)
    stats = (Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -10),)
    backend = make(backend_name, t=df)
    unit = dp.PrivacyUnit("u", max_rows=2)
    a = backend.statistics(request(stats, unit, seed=5))
    assert a.equals(backend.statistics(request(stats, unit, seed=5)))
    assert not a.equals(backend.statistics(request(stats, unit, seed=6)))


def test_bounding_picks_rows_uniformly(backend_name: str) -> None:
    """Each of 2,000 units has rows 0..7; with max_rows=1 each value should be kept ~1/8 of the time."""
    units, per = 2_000, 8
    df = pl.DataFrame({"u": np.repeat(np.arange(units), per), "v": np.tile(np.arange(per), units)})
    got = make(backend_name, t=df).statistics(request((Statistic("rows"),), dp.PrivacyUnit("u", max_rows=1), ("v",)))
    counts = got["__rows"].to_numpy()
    assert counts.sum() == units
    assert sps.chisquare(counts).pvalue > 1e-4


def test_key_types_are_kept(backend_name: str) -> None:
    df = pl.DataFrame({"g": pl.Series(["a", "b", "a"], dtype=pl.Categorical), "i": pl.Series([1, 2, 1], dtype=pl.Int8),
                       "d": [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 1)]})
    got = make(backend_name, t=df).statistics(request((Statistic("rows"),), ROW, ("g", "i", "d")))
    assert dict(got.schema) == dict(df.schema) | {"__rows": pl.Int64}
    assert got["__rows"].to_list() == [2, 1]


def test_parquet_sources_match_memory(backend_name: str, tmp_path: Any) -> None:
    df = random_table(500, 4)
    path = tmp_path / "t.parquet"
    df.write_parquet(path)
    backend = plugin_host().backend(backend_name)
    hook = getattr(backend, "register_source", None)
    if hook is None:
        backend.register("t", pl.scan_parquet(path))
    else:
        hook("t", pl.scan_parquet(path), path)
    stats = (Statistic("rows"), Statistic("fixed_sum", "x", F(0), F(100), F(0), 1, -8))
    unit = dp.PrivacyUnit("u", max_rows=10_000)
    assert_same(backend.statistics(request(stats, unit, ("g",))), reference(df, stats, "u", ("g",)))


def test_bounding_is_stable_for_a_seed(backend_name: str) -> None:
    """What a unit keeps depends only on its own rows and the seed: adding another unit's rows (here at
    the front, shifting every position) or reordering rows changes no other unit's kept rows."""
    df = _units_table(150, 21).with_columns(owner=pl.col("u"))
    extra = pl.DataFrame({"u": [10_000] * 30, "g": ["a"] * 30, "x": np.linspace(0, 10, 30), "owner": [10_000] * 30})
    bigger = pl.concat([extra, df.sample(fraction=1.0, shuffle=True, seed=3)])
    stats = (Statistic("rows"), Statistic("fixed_sum", "x", F(0), F(10), F(0), 1, -20))
    unit = dp.PrivacyUnit("u", max_rows=3)
    a = make(backend_name, t=df).statistics(request(stats, unit, ("owner",), seed=99))
    b = make(backend_name, t=bigger).statistics(request(stats, unit, ("owner",), seed=99))
    assert_same(b.filter(pl.col("owner") != 10_000), a)


def test_group_by_the_unit_column(backend_name: str) -> None:
    df = _units_table(100, 8)
    stats = (Statistic("rows"), Statistic("units"))
    got = make(backend_name, t=df).statistics(request(stats, dp.PrivacyUnit("u", max_rows=2, max_groups=1), ("u",)))
    assert got["__units"].to_list() == [1] * 100
    assert got["__rows"].to_list() == [min(n, 2) for n in df.group_by("u").len().sort("u")["len"].to_list()]


# ------------------------------------------------------------------------------- sorted (list) statistic


def reference_sorted(stat: Statistic, rows: list[dict[str, Any]], dtype: pl.DataType) -> list[int]:
    """The ``sorted`` statistic in plain Python: floats in float64 steps, everything else exactly."""
    assert stat.lower is not None and stat.upper is not None
    codes = []
    for r in rows:
        v = r[stat.column]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if dtype.is_float():
            c = (min(max(float(v), float(stat.lower)), float(stat.upper)) - float(stat.shift)) * 2.0 ** -stat.grid_exp
            codes.append(int(np.trunc(np.float64(c))))
            continue
        if isinstance(v, dt.datetime):
            v = (v - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        elif isinstance(v, dt.date):
            v = (v - dt.date(1970, 1, 1)).days
        c = min(max(Fraction(v), stat.lower), stat.upper) - stat.shift
        codes.append(math.trunc(c / 2**stat.grid_exp))
    return sorted(codes)


SORTED_TABLE = EDGE.with_columns(
    d=pl.Series([dt.date(2000, 1, 1) + dt.timedelta(days=37 * k) for k in range(11)] + [None]),
    t=pl.Series([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=1_000_003 * k) for k in range(12)]),
    w=pl.Series([2**64 - 1, 0, 7, None, 3, 2**63, 12, 5, 5, 1, 9, 10], dtype=pl.UInt64),
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
)


def reference_sorted_frame(df: pl.DataFrame, stats: tuple[Statistic, ...], by: tuple[str, ...],
                           keys: pl.DataFrame | None = None) -> pl.DataFrame:
    rows = df.to_dicts()
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[tuple(r[b] for b in by)].append(r)
    names = keys.to_dicts() if keys is not None else [dict(zip(by, g)) for g in groups]
    out: dict[str, list[Any]] = {b: [n[b] for n in names] for b in by}
    for s in stats:
        out[s.key] = [reference_sorted(s, groups.get(tuple(n[b] for b in by), []), df.schema[s.column]) for n in names]
    schema = {b: df.schema[b] for b in by} | {s.key: pl.List(pl.Int64) for s in stats}
    frame = pl.DataFrame(out, schema=schema)
    return frame.sort(list(by), nulls_last=False) if by else frame


@pytest.mark.parametrize("by", [(), ("g",), ("g", "h")])
def test_sorted_codes_on_edge_values(backend_name: str, by: tuple[str, ...]) -> None:
    got = make(backend_name, t=SORTED_TABLE).statistics(request(SORTED, ROW, by))
    assert_same(got, reference_sorted_frame(SORTED_TABLE, SORTED, by))


def test_sorted_codes_with_public_keys_and_empty_groups(backend_name: str) -> None:
    keys = pl.DataFrame({"g": ["a", "zz", None]})
    stats = (Statistic("rows"), *SORTED[:3])
    got = make(backend_name, t=SORTED_TABLE).statistics(request(stats, ROW, ("g",), keys))
    want = reference(SORTED_TABLE, stats[:1], None, ("g",), keys).join(
        reference_sorted_frame(SORTED_TABLE, stats[1:], ("g",), keys), on="g", nulls_equal=True)
    assert_same(got, want.sort("g", nulls_last=False))
    assert got.filter(pl.col("g") == "zz").row(0)[1:] == (0, [], [], [])
    node = Filter.of(Scan.of("t", SORTED_TABLE.schema), pl.col("h") > 100)
    empty = make(backend_name, t=SORTED_TABLE).statistics(request(SORTED[:1], ROW, (), rows=(node,)))
    assert empty.to_dicts() == [{SORTED[0].key: []}]


@pytest.mark.parametrize("seed", [1, 2])
def test_sorted_codes_random_tables(backend_name: str, seed: int) -> None:
    df = random_table(3_000, seed)
    stats = (Statistic("sorted", "x", F(-20), F(120), F(-20), grid_exp=-3),
             Statistic("sorted", "q", F(-60), F(60), F(-60)))
    unit = dp.PrivacyUnit("u", max_rows=10_000)
    for by in [(), ("g",), ("g", "k")]:
        got = make(backend_name, t=df).statistics(request(stats, unit, by))
        assert_same(got, reference_sorted_frame(df, stats, by))


def test_sorted_codes_are_the_domain_encoding(backend_name: str) -> None:
    """dpframe.domains.OrderedDomain.encode is the backends' map: same codes, same order once sorted."""
    from dpframe.domains import OrderedDomain

    for column, bounds, resolution in [("x", (-1, 3), 0.3), ("i", (-2, 9), None), ("w", (-4, 11), 2),
                                       ("d", (dt.date(2000, 1, 1), dt.date(2001, 1, 1)), None)]:
        dom = OrderedDomain.of(column, SORTED_TABLE.schema[column], bounds, resolution)
        got = make(backend_name, t=SORTED_TABLE).statistics(request((dom.statistic,), ROW))
        assert got[dom.statistic.key].to_list() == [sorted(dom.encode(SORTED_TABLE[column]).tolist())]
