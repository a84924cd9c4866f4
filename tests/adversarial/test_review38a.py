"""Review 38a: the code stop 37 added or changed that no review had attacked.

Scope: a grid's adjacent ``indicator_sum`` bins counted in one pass (``dpframe/backends/bins.py``: Polars'
search over the edges, DuckDB's ASOF join; used by ``frame.bounds()``, ``bounds="auto"`` and histograms of
ungrouped queries) against the one-by-one aggregates and across backends, on adversarial values and dtypes,
derived columns, filters, user-level units and files; the rank windows' ``WHOLE_BELOW`` switch
(``dpframe/backends/polars_windows.py``: whole lists below 4,096 bounded rows) and the quantile EM's task
layout (``plugins/dpframe_quantiles/em.py``: ``TASKS``, ``WORKERS``); and the totality probe's bisection for
a refusal's message (``dpframe.plan.totality._first_failing_row``). Each attack that broke is kept with its
fix (it fails if the defence regresses); the checks found sound are kept as tests where a regression would
show.

Findings: on DuckDB a grid that no row reached (a filter leaving no row, or only null, NaN or values below the
first edge) failed after its charge, so ``filter(pl.col("u") == id)`` before ``frame.bounds``, a histogram or
``bounds="auto"`` told whether unit ``id`` was present; and (older than the bins, found binning a derived
column) a column or SQL output named ``*`` or ``^...$`` was read by ``pl.col`` as a pattern: another column
measured on Polars only, or a failure or a dropped output after the charge.
"""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.bins import adjacent_bins
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.mechanism import Statistic

# ------------------------------------------------------------------ 1. a grid's bins counted in one pass

_EDGES = [F(k) for k in range(-3, 4)]


def _grid(column: str = "x", edges: list[F] = _EDGES) -> tuple[Statistic, ...]:
    return tuple(Statistic("indicator_sum", column, lo, hi) for lo, hi in zip(edges, edges[1:]))


def _counted(backend: type[PolarsBackend | DuckDBBackend], frame: pl.DataFrame, stats: tuple[Statistic, ...],
             least: int) -> dict[str, int]:
    """``stats`` over ``frame`` (ungrouped, rows as units), bins in one pass from ``least`` adjacent bins on."""
    engine = backend()
    engine.register("t", frame.lazy())
    module = "polars" if backend is PolarsBackend else "duckdb"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(f"dpframe.backends.{module}.adjacent_bins", lambda s: adjacent_bins(s, least=least))
        out = engine.statistics(StatisticsRequest("t", (), dp.PrivacyUnit.row(), (), None, stats, 1))
    return out.row(0, named=True)


@pytest.mark.parametrize("values", [[], [None], [math.nan, None], [-math.inf], [-5.0]],
                         ids=["empty", "null", "nan", "-inf", "below"])
@pytest.mark.parametrize("backend", [PolarsBackend, DuckDBBackend], ids=["polars", "duckdb"])
def test_no_value_in_the_grid_counts_zero_in_one_pass(backend: type[PolarsBackend | DuckDBBackend],
                                                      values: list[float | None]) -> None:
    """Attack: on DuckDB, a grid that no row reaches (no row, or only null, NaN or values below its first edge)
    made the ASOF join's list NULL, and reading it raised an AttributeError after the charge — so
    ``filter(pl.col("u") == id).bounds("x")`` failed exactly when the unit ``id`` was absent (test below)."""
    frame = pl.DataFrame({"x": pl.Series(values, dtype=pl.Float64)})
    stats = (*_grid(), Statistic("rows"))
    assert _counted(backend, frame, stats, 2) == _counted(backend, frame, stats, 10**9) == \
        {**{s.key: 0 for s in _grid()}, "__rows": len(values)}


def test_a_grid_no_row_reaches_is_released_not_failed_on_duckdb() -> None:
    """Attack, end to end: one unit's presence decided whether ``frame.bounds``, a histogram or ``bounds="auto"``
    failed (charged) or released."""
    statuses = []
    for present in (False, True):
        rows = pl.DataFrame({"u": [*range(20), *([10_000] if present else [])],
                             "x": [float(i) for i in range(20)] + ([3.0] if present else [])})
        sess = dp.Session({"t": rows}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(1),
                          backend="duckdb", seed=3)
        frame = sess.table("t").filter(pl.col("u") == 10_000)
        for query in (frame.bounds("x", domain=(-1e9, 1e9)),
                      frame.agg(dp.measure("histogram", "x", bounds=(0, 100), edges=list(range(0, 101, 5)))),
                      frame.agg(m=dp.mean("x", bounds="auto"))):
            query.collect(dp.PureDP(F(1, 4)))
        statuses.append(sess.history()["status"].to_list())
    assert statuses == [["committed"] * 3] * 2


def _adversarial_columns() -> tuple[pl.DataFrame, tuple[Statistic, ...]]:
    """One column per binnable dtype, holding values on, next to and beyond its grid's edges, and each column's
    grid (edges that float64 rounds: 2⁵³ + 1, 1/3; Fractions adjacent only as floats)."""
    big = 2**53
    third = F(1, 3)
    edges = {
        "f64": [F(-(2**1023)), F(-1), F(0), F(5e-324), F(1, 10), third, F(1), F(big + 1), F(2**1023)],
        "f32": [F(-1), F(0), F(1, 10), F(float(np.float32(0.1))), F(1), F(10**39)],
        "i64": [F(-(2**63)), F(-1), F(0), F(big - 1), F(big + 1), F(big + 3), F(2**63)],
        "u64": [F(0), F(big + 1), F(2**63), F(2**63 + 2**11), F(2**64)],
        "i128": [F(-(10**37)), F(0), F(2**100), F(2**100 + 2**47 + 1), F(2**101), F(10**37 + 1)],
        "dec": [F(-1), F(0), F(1, 10), third - F(1, 10**30), F(1), F(10**18)],
        "bool": [F(-1), F(0), F(1, 2), F(1), F(2)],
        "f16": [F(-1), F(0), F(1, 2), F(1), F(65504)],
        "dur": [F(-1), F(0), F(1), F(2), F(10**6)],
    }
    f64 = [-0.0, 0.0, 5e-324, -5e-324, 0.1, math.nextafter(0.1, 0), 1 / 3, 1.0, 2.0**53, 2.0**53 + 2, math.inf,
           -math.inf, math.nan, 1.7976931348623157e308, -1.7976931348623157e308, None]
    n = len(f64)
    values = {
        "f64": pl.Series(f64),
        "f32": pl.Series(f64, dtype=pl.Float32),
        "i64": pl.Series([-(2**63), -1, 0, big - 1, big, big + 1, big + 2, big + 3, 2**63 - 1, None] * 2,
                         dtype=pl.Int64),
        "u64": pl.Series([0, big + 1, 2**63 - 1, 2**63, 2**63 + 2**10, 2**63 + 2**11, 2**64 - 1, None] * 2,
                         dtype=pl.UInt64),
        "i128": pl.Series([-(10**37), 0, 2**100 + 2**47, 2**100 + 2**47 + 1, 2**100 + 2**48, 10**37, None] * 2 + [1, 2],
                          dtype=pl.Int128),
        "dec": pl.Series(["-0.0", "0.1", "0.3333333333333333333", "0.3333333333333333148", "1", None] * 2 + ["7"] * 4,
                         dtype=pl.String).cast(pl.Decimal(38, 19)),
        "bool": pl.Series([True, False, None, True] * 4),
        "f16": pl.Series(f64, dtype=pl.Float32).cast(pl.Float16),
        "dur": pl.Series([0, 1, 2, -1, None, 10**6, 3, 5] * 2, dtype=pl.Int64).cast(pl.Duration("us")),
    }
    frame = pl.DataFrame({c: s.head(n).extend_constant(None, n - min(n, s.len())) for c, s in values.items()})
    stats = [s for c, e in edges.items() for s in _grid(c, e)]
    # adjacent as floats only: [1/10, 1/3 − 10⁻³⁰) and [1/3 + 10⁻³⁰, 1) meet at float(1/3)
    stats = [Statistic("indicator_sum", "dec", third + F(1, 10**30), s.upper) if s.lower == third - F(1, 10**30)
             else s for s in stats]
    return frame, tuple(stats)


def test_one_pass_counts_equal_the_one_by_one_aggregates_on_every_backend() -> None:
    """Sound: on every binnable dtype (floats of three widths, 64- and 128-bit integers past 2⁵³, decimals,
    booleans, durations) with values on the edges, ±0, subnormals, ±inf, NaN and null, the one-pass counts of
    Polars and DuckDB equal their one-by-one aggregates and each other (DuckDB reads 128-bit integers as
    ``DECIMAL(38, 0)``: these stay within 38 digits)."""
    frame, stats = _adversarial_columns()
    assert len(adjacent_bins(stats, least=2)) == frame.width          # every column's grid is one run
    stats = (*stats, Statistic("rows"), Statistic("nonnull", "f64"))
    counted = [_counted(b, frame, stats, least) for b in (PolarsBackend, DuckDBBackend) for least in (2, 10**9)]
    assert all(c == counted[0] for c in counted)



@pytest.mark.slow
def test_spark_counts_each_bin_as_the_one_pass_does(spark_session: object) -> None:
    """Sound: the Spark backend (one aggregate per bin) counts the same grids as Polars' one pass, on each dtype
    it stores (it refuses ``Int128`` and ``Duration`` columns when the table is registered)."""
    from dpframe.backends.spark import SparkBackend

    frame, stats = _adversarial_columns()
    frame = frame.drop("i128", "dur")
    stats = (*(s for s in stats if s.column in frame.columns), Statistic("rows"))
    spark = SparkBackend(spark_session)
    spark.register("t", frame.lazy())
    counted = spark.statistics(StatisticsRequest("t", (), dp.PrivacyUnit.row(), (), None, stats, 1))
    assert counted.row(0, named=True) == _counted(PolarsBackend, frame, stats, 2)


@pytest.mark.slow
@pytest.mark.parametrize("storage", [".memory", ".parquet", ".csv"])
def test_grids_release_alike_in_one_pass_per_bin_and_on_each_backend(storage: str, tmp_path: object) -> None:
    """Sound: ``frame.bounds``, histograms and ``bounds="auto"`` on derived columns after filters, under row and
    user units (each unit within ``max_rows``), from memory, Parquet (scanned by DuckDB itself) or CSV: with one
    seed, Polars and DuckDB release the same values in one pass and one aggregate per bin."""
    rng = np.random.default_rng(4)
    odd = [math.nan, math.inf, -math.inf, -0.0, 0.0, 5e-324, 1.7976931348623157e308, -1.7976931348623157e308, 0.5]
    x = np.concatenate([rng.standard_cauchy(3_000 - len(odd)), odd])
    data = pl.DataFrame({"u": np.arange(3_000) // 3, "x": x, "g": np.arange(3_000) % 5}).with_columns(
        i=(pl.col("x").fill_nan(0).clip(-1e15, 1e15) * 1000).cast(pl.Int64))
    source: object = data
    if storage != ".memory":
        source = f"{tmp_path}/t{storage}"
        data.write_parquet(source) if storage == ".parquet" else data.write_csv(source)
    edges = [-1e6, *(k / 4 for k in range(-40, 41)), 1e6]
    endings = [lambda t: t.bounds("x", domain=(-1e9, 1e9)), lambda t: t.bounds("i"),
               lambda t: t.with_columns(y=pl.col("x") * 3 - 1).filter(pl.col("g") != 2).bounds("y", domain=(-1e9, 1e9)),
               lambda t: t.with_columns(y=pl.col("x").abs().sqrt()).filter(pl.col("g") < 4).agg(
                   dp.measure("histogram", "y", bounds=(-1e6, 1e6), edges=edges), n=dp.len()),
               lambda t: t.filter(pl.col("g") == 9).agg(dp.measure("histogram", "x", bounds=(-1e6, 1e6), edges=edges)),
               lambda t: t.agg(m=dp.mean("x", bounds="auto"))]
    for unit in (dp.PrivacyUnit.row(), dp.PrivacyUnit("u", max_rows=3)):
        out = {}
        for backend in ("polars", "duckdb"):
            for least in (2, 10**9):
                with pytest.MonkeyPatch.context() as m:
                    m.setattr(f"dpframe.backends.{backend}.adjacent_bins", lambda s, n=least: adjacent_bins(s, n))
                    sess = dp.Session({"t": source}, privacy_unit=unit, budget=dp.PureDP(10), backend=backend, seed=7)
                    out[backend, least] = [str(end(sess.table("t")).collect(dp.PureDP(1))) for end in endings]
        assert len({tuple(v) for v in out.values()}) == 1, out


@pytest.mark.parametrize("name", ["^x.*$", "*"])
def test_a_column_named_like_a_pattern_is_refused_when_made(name: str) -> None:
    """Attack (found binning a derived column; older than the bins): ``pl.col(name)`` reads ``*`` as every column
    and ``^...$`` as a regular expression, so on Polars a measure of a column named ``^x.*$`` read the column
    ``xx`` instead (DuckDB read the named one: two answers for one query) and one of ``*`` was charged, then
    failed on every dataset; a SQL query's output so named was dropped from its result (``^...$``) or failed in
    post-processing (``*``), charged. Such a name is refused where it is made: a PlanError, nothing charged (the
    method chain's own output names are fine: they are never read as patterns)."""
    sess = dp.Session({"t": pl.DataFrame({"v": [float(i) for i in range(50)], "xx": [1.0] * 50})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    t = sess.table("t")
    for made in (lambda: t.with_columns(pl.col("v").alias(name)), lambda: t.rename({"v": name}),
                 lambda: t.select(pl.col("v").alias(name)),
                 lambda: sess.sql(f'SELECT SUM(CLAMP("{name}", 0, 1)) AS s FROM (SELECT v AS "{name}" FROM t)')):
        with pytest.raises(dp.PlanError, match="patterns"):
            made()
    with pytest.raises(dp.PlanError, match="patterns"):     # an output: dropped ('^...$') or failed ('*') once charged
        sess.sql(f'SELECT SUM(CLAMP(v, 0, 1)) AS "{name}", COUNT(*) AS n FROM t')
    with pytest.raises(dp.SchemaError, match="patterns"):
        dp.Session({"t": pl.DataFrame({name: [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    assert sess.history().height == 0

# ------------------------------------------------------------------ 2. whole lists below WHOLE_BELOW rows


def test_the_whole_below_switch_releases_the_same_values_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sound: ``WHOLE_BELOW`` is compared with the private count of bounded rows, but it only picks how the codes
    are read (whole lists, or windows completed from the data when a read falls outside them): with windows
    forced (0) or never used (10⁹), one seed releases the same quantiles, ungrouped and per public key."""
    from dpframe.backends import polars_windows

    rng = np.random.default_rng(8)
    n = 12_000
    rows = pl.DataFrame({"u": rng.integers(0, n // 3, n), "x": rng.uniform(0, 100, n), "g": rng.integers(0, 3, n)})
    windowed: list[bool] = []
    placed = polars_windows.RankWindows.placed

    def spy(cls: type, *args: object) -> object:
        out = placed.__func__(cls, *args)   # type: ignore[attr-defined]
        windowed.append(out is not None and bool(out.near))
        return out

    monkeypatch.setattr(polars_windows.RankWindows, "placed", classmethod(spy))

    def release(whole_below: int) -> list[object]:
        monkeypatch.setattr(polars_windows, "WHOLE_BELOW", whole_below)
        sess = dp.Session({"t": rows}, privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.PureDP(20), seed=5)
        t = sess.table("t")
        return [t.agg(dp.median("x", bounds=(0, 100))).collect(dp.PureDP(5)).rows(),
                t.group_by("g", keys=[0, 1, 2, 7]).agg(dp.median("x", bounds=(0, 100))).collect(dp.PureDP(5)).rows()]

    whole = release(10**9)
    assert windowed == []
    assert release(0) == whole and windowed == [True, True]


# ------------------------------------------------------------------ 3. the EM's task layout


@pytest.mark.parametrize("groups", [1, 7, 8, 9, 64, 65, 511, 513])
def test_seeded_quantiles_do_not_depend_on_the_core_count(groups: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sound: a seeded EM draws its chunks in order on one thread, laid out by the segment count alone
    (``chunk_size(n, SEGMENT_CHUNK, TASKS)``), so 1, 3 or 16 usable cores give the same release."""
    from dpframe_quantiles.em import joint_quantiles

    from dpframe.noise import SeededRandomSource

    rng = np.random.default_rng(groups)
    codes = [np.sort(rng.integers(0, 1_000, int(rng.integers(0, 40)))) for _ in range(groups)]
    out = []
    for cores in ("1", "3", "16"):
        monkeypatch.setenv("DPFRAME_THREADS", cores)
        out.append(joint_quantiles(codes, 1_000, [F(1, 10), F(1, 2), F(9, 10)], F(1, 2), 1, SeededRandomSource(9)))
    assert all((o == out[0]).all() for o in out)


# ------------------------------------------------------------------ 4. the probe's bisection (a refusal's message)


def test_a_failure_only_rows_together_cause_is_refused_without_a_row() -> None:
    """Sound: the refusal is decided on the whole probe frame; the bisection only looks for a row to show, and
    a failure that needs two rows at once (neither half fails, no row alone) shows none."""
    from dpframe.plan.totality import _first_failing_row

    calls: list[tuple[int, int]] = []

    def together(a: int, b: int) -> bool:
        calls.append((a, b))
        return a <= 3 and b > 700

    assert _first_failing_row(1_000, together) is None
    assert all(0 <= a < b <= 1_000 for a, b in calls)            # probe rows only
    assert _first_failing_row(1_000, lambda a, b: a <= 617 < b or a <= 900 < b) == 617


def test_a_refusal_names_a_probe_value_never_a_row_of_the_data() -> None:
    """Sound: the message is built from the adversarial probe values; the same on D and D′, nothing charged."""
    messages = []
    for extra in ([], ["2031-07-04"]):
        dates = pl.Series(["1999-12-31", *extra]).str.to_date()
        sess = dp.Session({"t": pl.DataFrame({"d": dates})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
        with pytest.raises(dp.PlanError) as refused:
            sess.table("t").with_columns(h=pl.col("d").dt.to_string("%H")).agg(n=dp.len()).collect(dp.PureDP(1))
        messages.append(str(refused.value))
        assert sess.history().height == 0
    assert messages[0] == messages[1] and "1999" not in messages[0] and "2031" not in messages[0]
