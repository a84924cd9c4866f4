"""The Polars backend (dpframe/backends/polars.py): exact statistics, contribution bounding, public keys."""

from __future__ import annotations

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

import dpframe as dp
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.polars import PolarsBackend
from dpframe.mechanism import Statistic
from dpframe.plan.nodes import Filter, Scan, WithColumns

P_FLOOR = 1e-6

INF, NAN = float("inf"), float("nan")


def _backend(**tables: pl.DataFrame) -> PolarsBackend:
    b = PolarsBackend()
    for name, df in tables.items():
        b.register(name, df.lazy())
    return b


def _req(stats: tuple[Statistic, ...], unit: dp.PrivacyUnit, by: tuple[str, ...] = (), keys=None, seed: int = 1,
         rows=(), table: str = "t") -> StatisticsRequest:  # noqa: ANN001
    return StatisticsRequest(table, tuple(rows), unit, by, keys, stats, seed)


# ------------------------------------------------------------------------------- exact statistics

X = pl.DataFrame({
    "u": [1, 2, 3, 4, 5, 6, 7, 8, 9],
    "x": [1.3, 2.7, -5.0, INF, -INF, NAN, None, 100.0, 0.25],
    "i": [1, None, 3, 4, 5, 6, 7, 8, 9],
    "g": ["a", "a", "b", "b", "b", "a", "a", "c", "c"],
})
ROW = dp.PrivacyUnit.row()


def test_rows_nonnull_units_by_hand() -> None:
    b = _backend(t=X)
    out = b.statistics(_req((Statistic("rows"), Statistic("nonnull", "x"), Statistic("nonnull", "i"),
                             Statistic("units")), dp.PrivacyUnit("u", max_rows=5)))
    assert out.height == 1
    assert out["__rows"].item() == 9
    assert out["__nonnull:x"].item() == 7          # NaN and null are not values; ±inf are (clamped later)
    assert out["__nonnull:i"].item() == 8
    assert out["__units"].item() == 9
    assert all(out.schema[c] == pl.Int64 for c in out.columns)


def test_fixed_sum_truncates_to_grid_and_clamps_by_hand() -> None:
    b = _backend(t=X)
    # bounds [0, 10], grid 2^-1: clamp → 1.3, 2.7, 0, 10, 0, (NaN), (null), 10, 0.25
    #   /0.5 → 2.6, 5.4, 0, 20, 0, 20, 0.5 → truncate toward zero → 2, 5, 0, 20, 0, 20, 0 = 47
    s1 = Statistic("fixed_sum", "x", Fraction(0), Fraction(10), Fraction(0), 1, -1)
    # centred at 5, squared, grid 2^0: (x−5)² → 13.69, 5.29, 25, 25, 25, 25, 22.5625 → 13+5+25·4+22 = 140
    s2 = Statistic("fixed_sum", "x", Fraction(0), Fraction(10), Fraction(5), 2, 0)
    # centred at 5, grid 2^2 = 4: (x−5)/4 → −0.925, −0.575, −1.25, 1.25, −1.25, 1.25, −1.1875
    #   → 0, 0, −1, 1, −1, 1, −1 = −1
    s3 = Statistic("fixed_sum", "x", Fraction(0), Fraction(10), Fraction(5), 1, 2)
    # integer column, bounds [2, 6], grid 2^0: 2, (null), 3, 4, 5, 6, 6, 6, 6 = 38
    s4 = Statistic("fixed_sum", "i", Fraction(2), Fraction(6), Fraction(0), 1, 0)
    out = b.statistics(_req((s1, s2, s3, s4), ROW))
    assert out[s1.key].item() == 47
    assert out[s2.key].item() == 140
    assert out[s3.key].item() == -1
    assert out[s4.key].item() == 38
    assert out.schema[s1.key] == pl.Int64


def test_fixed_sum_matches_numpy_reference_on_random_data() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(3, 10, 2000)
    x[rng.random(2000) < 0.05] = np.nan
    df = pl.DataFrame({"u": np.arange(2000), "x": x})
    b = _backend(t=df)
    for lo, hi, shift, power, k in [(-5, 15, 0, 1, -8), (-5, 15, 5, 1, -10), (-5, 15, 5, 2, -4), (0, 1, 0, 1, -20)]:
        s = Statistic("fixed_sum", "x", Fraction(lo), Fraction(hi), Fraction(shift), power, k)
        v = x[~np.isnan(x)]
        ref = int(np.sum(np.trunc(((np.clip(v, lo, hi) - shift) ** power) * 2.0 ** (-k)).astype(np.int64)))
        assert b.statistics(_req((s,), ROW))[s.key].item() == ref
        assert abs(ref) <= v.size * s.row_bound()


def test_indicator_sum() -> None:
    b = _backend(t=X)
    s = Statistic("indicator_sum", "x", Fraction(0), Fraction(10))
    # in [0, 10): 1.3, 2.7, 0.25 (inf/NaN/null excluded; 100 and -5 outside)
    assert b.statistics(_req((s,), ROW))[s.key].item() == 3


def test_grouped_statistics_are_sorted_by_key_with_nulls_first() -> None:
    df = pl.DataFrame({"u": [1, 2, 3, 4, 5], "g": ["b", None, "a", "b", "c"], "x": [1.0, 2.0, 3.0, 4.0, 5.0]})
    out = _backend(t=df).statistics(_req((Statistic("rows"),), ROW, ("g",)))
    assert out["g"].to_list() == [None, "a", "b", "c"]
    assert out["__rows"].to_list() == [1, 1, 2, 1]


def test_row_nodes_are_applied_before_aggregation() -> None:
    scan = Scan.of("t", X.schema)
    f = Filter.of(scan, pl.col("g") != "a")
    w = WithColumns.of(f, [], {"y": pl.col("i") * 2}, "u")
    s = Statistic("fixed_sum", "y", Fraction(0), Fraction(100), Fraction(0), 1, 0)
    out = _backend(t=X).statistics(_req((Statistic("rows"), s), ROW, rows=(f, w)))
    assert out["__rows"].item() == 5
    assert out[s.key].item() == 2 * (3 + 4 + 5 + 8 + 9)


def test_empty_after_filter() -> None:
    scan = Scan.of("t", X.schema)
    f = Filter.of(scan, pl.col("g") == "zzz")
    s = Statistic("fixed_sum", "x", Fraction(0), Fraction(10), Fraction(0), 1, 0)
    out = _backend(t=X).statistics(_req((Statistic("rows"), Statistic("nonnull", "x"), s), ROW, rows=(f,)))
    assert out.row(0) == (0, 0, 0)


# --------------------------------------------------------------------------------- contribution bounding

UNITS = pl.DataFrame({
    "u": [1] * 7 + [2] * 2 + [3] + [None] * 3,
    "g": ["a", "b", "c", "d", "a", "b", "c", "a", "a", "b", "a", "a", "a"],
    "i": list(range(13)),
})


@pytest.mark.parametrize("max_rows", [1, 2, 3, 5, 10])
def test_bounding_keeps_at_most_max_rows_per_unit_and_drops_null_units(max_rows: int) -> None:
    b = _backend(t=UNITS)
    for seed in range(5):
        # the statistic reads "i": bounded() returns the columns the statistics read, rows told apart by "i"
        req = _req((Statistic("nonnull", "i"),), dp.PrivacyUnit("u", max_rows=max_rows), seed=seed)
        kept = b.bounded(req).collect()
        per_unit = dict(kept.group_by("u").len().iter_rows())
        assert per_unit == {1: min(7, max_rows), 2: min(2, max_rows), 3: 1}
        assert kept["u"].null_count() == 0
        assert kept.is_duplicated().sum() == 0
        assert set(kept["i"]) <= set(UNITS["i"])


@pytest.mark.parametrize("max_rows, max_groups", [(5, 1), (5, 2), (3, 3), (10, 2)])
def test_bounding_keeps_at_most_max_groups_per_unit(max_rows: int, max_groups: int) -> None:
    b = _backend(t=UNITS)
    for seed in range(5):
        req = _req((Statistic("rows"),), dp.PrivacyUnit("u", max_rows=max_rows, max_groups=max_groups), ("g",),
                   seed=seed)
        kept = b.bounded(req).collect()
        groups = dict(kept.group_by("u").agg(pl.col("g").n_unique()).iter_rows())
        rows = dict(kept.group_by("u").len().iter_rows())
        assert groups[1] <= min(4, max_groups, max_rows) and rows[1] <= max_rows
        if max_groups < max_rows:   # whole groups are chosen first, then rows; here no kept group is cut
            assert groups[1] == min(4, max_groups)
        assert groups[2] == 1 and groups[3] == 1
        # the unit's rows in its kept groups are kept, up to max_rows
        total = b.statistics(req)["__rows"].sum()
        assert total == sum(rows.values())


def test_row_unit_keeps_every_row() -> None:
    kept = _backend(t=UNITS).bounded(_req((), ROW)).collect()
    assert kept.height == UNITS.height          # also rows whose 'u' happens to be null: u is not the unit


def _kept_counts(df: pl.DataFrame, unit: dp.PrivacyUnit, seeds: range, by=()) -> Counter:  # noqa: ANN001
    b = _backend(t=df)
    counts: Counter = Counter()
    for seed in seeds:
        # The statistic reads "i", so rows differing in "i" are distinguishable and must be sampled uniformly.
        kept = b.bounded(_req((Statistic("nonnull", "i"),), unit, by, seed=seed * 7919 + 11)).collect()
        counts.update(kept["i"].to_list())
    return counts


def test_kept_rows_are_a_uniform_subset_over_seeds() -> None:
    """Unit 1 owns 7 rows, max_rows = 2: over many seeds each row is kept ≈ 2/7 of the time."""
    n = 700
    counts = _kept_counts(UNITS, dp.PrivacyUnit("u", max_rows=2), range(n))
    observed = np.array([counts[i] for i in range(7)])
    assert observed.sum() == 2 * n
    assert (observed > 0).all()                                            # not always the first rows
    assert sps.chisquare(observed).pvalue > P_FLOOR
    assert counts[7] + counts[8] == 2 * n and counts[9] == n              # units with ≤ 2 rows keep all


def test_kept_groups_are_a_uniform_subset_over_seeds() -> None:
    """Unit 1 touches 4 groups (a: 2 rows, b: 2, c: 2, d: 1), max_groups = 1: each group ≈ 1/4 of the time."""
    n = 600
    b = _backend(t=UNITS)
    seen: Counter = Counter()
    for seed in range(n):
        kept = b.bounded(_req((), dp.PrivacyUnit("u", max_rows=7, max_groups=1), ("g",), seed=seed * 31 + 5)).collect()
        seen.update(kept.filter(pl.col("u") == 1)["g"].unique().to_list())
    observed = np.array([seen[g] for g in "abcd"])
    assert observed.sum() == n and (observed > 0).all()
    assert sps.chisquare(observed).pvalue > P_FLOOR


def _kept_rows_of(df: pl.DataFrame, unit: dp.PrivacyUnit, seed: int, by: tuple[str, ...] = ()) -> set:
    b = _backend(t=df)
    kept = b.bounded(_req((Statistic("nonnull", "i"),), unit, by, seed=seed)).collect()
    return set(kept.filter(pl.col("u") < 10_000).rows())


def _stability_data() -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(0)
    base = pl.DataFrame({"u": np.repeat(np.arange(1, 301), 8), "g": rng.integers(0, 40, 2400),
                         "i": np.arange(2400)})
    newcomer = pl.DataFrame({"u": [10_000] * 8, "g": list(range(8)), "i": list(range(5000, 5008))})
    return base, newcomer


@pytest.mark.parametrize("where", ["appended", "prepended"])
def test_row_bounding_is_stable_when_a_unit_is_added(where: str) -> None:
    """For a fixed seed, adding one unit must not change which rows the other units keep (neighbours stay
    neighbours after bounding — the basis of the sensitivity argument)."""
    base, newcomer = _stability_data()
    bigger = pl.concat([base, newcomer] if where == "appended" else [newcomer, base])
    for seed in range(10):
        unit = dp.PrivacyUnit("u", max_rows=3)
        assert _kept_rows_of(base, unit, seed) == _kept_rows_of(bigger, unit, seed)


def test_group_bounding_is_stable_when_a_unit_is_added() -> None:
    base, newcomer = _stability_data()
    bigger = pl.concat([base, newcomer])
    unit = dp.PrivacyUnit("u", max_rows=4, max_groups=2)
    changed = sum(_kept_rows_of(base, unit, seed, ("g",)) != _kept_rows_of(bigger, unit, seed, ("g",))
                  for seed in range(10))
    assert changed == 0


def test_group_bounding_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(0)
    df = pl.DataFrame({"u": rng.integers(0, 500, 20_000), "g": rng.integers(0, 50, 20_000)})
    b = _backend(t=df)
    req = _req((Statistic("rows"),), dp.PrivacyUnit("u", max_rows=10, max_groups=2), ("g",), seed=123)
    results = {tuple(b.statistics(req)["__rows"].to_list()) for _ in range(6)}
    assert len(results) == 1


def test_row_bounding_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(1)
    df = pl.DataFrame({"u": rng.integers(0, 2000, 50_000), "g": rng.integers(0, 30, 50_000),
                       "x": rng.random(50_000)})
    b = _backend(t=df)
    keys = pl.DataFrame({"g": list(range(0, 30, 3))})
    s = Statistic("fixed_sum", "x", Fraction(0), Fraction(1), Fraction(0), 1, -16)
    req = _req((Statistic("rows"), s), dp.PrivacyUnit("u", max_rows=3), ("g",), keys, seed=99)
    results = {tuple(itertools.chain(*b.statistics(req).select("__rows", s.key).rows())) for _ in range(4)}
    assert len(results) == 1


# ------------------------------------------------------------------------------------------ public keys


def test_public_keys_zero_rows_for_missing_groups_and_drop_unlisted_keys() -> None:
    keys = pl.DataFrame({"g": ["c", "zz", "a"]})
    s = Statistic("fixed_sum", "i", Fraction(0), Fraction(100), Fraction(0), 1, 0)
    out = _backend(t=X).statistics(_req((Statistic("rows"), Statistic("nonnull", "x"), s, Statistic("units")), ROW,
                                        ("g",), keys))
    assert out["g"].to_list() == ["a", "c", "zz"]                             # sorted, every key present
    assert out["__rows"].to_list() == [4, 2, 0]                               # 'b' rows are dropped
    assert out["__nonnull:x"].to_list() == [2, 2, 0]                          # a: 1.3, 2.7 (NaN, null out)
    assert out[s.key].to_list() == [1 + 6 + 7, 8 + 9, 0]
    assert out["__units"].to_list() == [4, 2, 0]


def test_public_keys_with_nulls_and_several_columns() -> None:
    df = pl.DataFrame({"u": [1, 2, 3, 4], "g": ["a", None, "a", "b"], "h": [1, 1, 2, 1]})
    keys = pl.DataFrame({"g": [None, "a", "a", "c"], "h": [1, 1, 2, 1]})
    out = _backend(t=df).statistics(_req((Statistic("rows"),), ROW, ("g", "h"), keys))
    assert out.rows() == [(None, 1, 1), ("a", 1, 1), ("a", 2, 1), ("c", 1, 0)]


def test_unlisted_keys_do_not_use_up_a_units_rows() -> None:
    """Rows of keys that are not released are dropped before bounding, so they cannot crowd out the rest."""
    df = pl.DataFrame({"u": [1] * 5, "g": ["z", "z", "z", "z", "a"], "i": range(5)})
    b = _backend(t=df)
    for seed in range(10):
        out = b.statistics(_req((Statistic("rows"),), dp.PrivacyUnit("u", max_rows=1), ("g",),
                                pl.DataFrame({"g": ["a"]}), seed=seed))
        assert out["__rows"].to_list() == [1]


def test_private_keys_only_report_groups_present_after_bounding() -> None:
    out = _backend(t=X).statistics(_req((Statistic("rows"),), ROW, ("g",)))
    assert out["g"].to_list() == ["a", "b", "c"]
