"""Review 54e: a fresh red team of the dataframe surface (Polars backend) by an analyst who picks every argument.

Each test is one attack; those that found something say so in their docstring. The others pin what held, so that a
regression (a Polars upgrade, a refactor) fails here.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import polars as pl
import polars.selectors as cs
import pytest

import dpframe as dp
from dpframe.interactive.ptr import robust_median
from dpframe.plan.sample import Sample

_WIDE = dp.ApproxDP(1000, 1e-3)


def _outcome(data: pl.DataFrame, query: Callable[[dp.Frame], Any], *, unit: dp.PrivacyUnit | None = None,
             budget: dp.Budget = dp.ApproxDP(1, 1e-6), backend: str = "polars") -> tuple[str, tuple[str, ...]]:
    """What the analyst sees of one query on ``data``: released or the error's type and text, and the ledger."""
    sess = dp.Session({"t": data}, privacy_unit=unit or dp.PrivacyUnit("u", max_rows=2), budget=_WIDE, seed=0,
                      backend=backend)
    try:
        query(sess.table("t")).collect(budget)
        seen = "released"
    except BaseException as e:  # noqa: BLE001 - the analyst catches everything, panics included
        seen = f"{type(e).__name__}: {e}"
    return seen, tuple(sess.history()["status"].to_list())


# ------------------------------------------------------------------- 1. unsigned 128-bit values on an ordered domain

_BASE = [1, 2, 3, 50, 7, 9, 11, 12]


def _u128(extra: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"u": list(range(len(_BASE) + len(extra))),
                         "x": pl.Series(_BASE + extra, dtype=pl.UInt128), "y": [1, 0] * 4 + [1] * len(extra)})


_ORDERED: dict[str, Callable[[dp.Frame], Any]] = {
    "median": lambda t: t.agg(dp.median("x", bounds=(0, 100))),
    "quantile": lambda t: t.agg(dp.quantile("x", [0.25, 0.5], bounds=(0, 100))),
    "quantile grouped": lambda t: t.group_by("y", keys=[0, 1]).agg(dp.quantile("x", [0.5], bounds=(0, 100))),
    "interior point": lambda t: t.interior_point("x", bounds=(0, 100)),
    "interior point by binary search": lambda t: t.interior_point("x", bounds=(0, 100), method="binary_search"),
    "learn_threshold": lambda t: t.learn_threshold("x", label="y", bounds=(0, 100)),
    "learn_rectangle": lambda t: t.learn_rectangle(["x"], label="y", bounds={"x": (0, 100)}),
    "bounds": lambda t: t.bounds("x", domain=(0, 100)),
    "sum with automatic bounds": lambda t: t.agg(dp.sum("x", bounds="auto")),
    "robust median": lambda t: robust_median(t, "x", bounds=(0, 100)),
}


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("name", list(_ORDERED))
def test_an_unsigned_128_bit_value_past_int128_is_clamped_like_any_other(name: str, backend: str) -> None:
    """Found: a ``UInt128`` column's values were coded on an ordered domain (a quantile's rank windows, the learners'
    grid, the rectangle's cut predicates) after a strict cast to ``Int128``, which fails on a value of 2¹²⁷ or more:
    the median, the quantiles, the interior point, both learners and the robust median were charged, then failed
    (``InvalidOperationError``) on a dataset with one such row, and released without it — "the query failed" told
    whether some unit holds a value past 2¹²⁷ − 1 (behind a filter, any predicate of a row), on the Polars backend.
    The value is now clamped to 2¹²⁷ − 1 in its own type before the cast (the bounds lie below it): released on every
    dataset (and on the DuckDB backend, which did not fail, still).
    """
    query = _ORDERED[name]
    seen = {extra: _outcome(_u128(list(extra)), query, backend=backend)
            for extra in ((), (2**127 - 1,), (2**127,), (2**128 - 1,))}
    assert set(seen.values()) == {("released", ("committed",))}, seen


def test_a_sql_median_of_an_unsigned_128_bit_column_on_the_polars_backend() -> None:
    """The SQL ``MEDIAN(CLAMP(x, 0, 100))`` runs on the same codes: it failed after its charge on the row past 2¹²⁷ − 1
    on the Polars backend (the DuckDB backend released it on every dataset before the fix too)."""
    seen = set()
    for extra in ((), (2**127,), (2**128 - 1,)):
        sess = dp.Session({"t": _u128(list(extra))}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=_WIDE,
                          seed=0, backend="polars")
        try:
            sess.sql("SELECT MEDIAN(CLAMP(x, 0, 100)) AS m FROM t").collect(dp.PureDP(1))
            outcome = "released"
        except dp.errors.DPFrameError as e:
            outcome = f"{type(e).__name__}: {e}"
        seen.add((outcome, tuple(sess.history()["status"].to_list())))
    assert seen == {("released", ("committed",))}, seen


def test_an_unsigned_128_bit_value_past_int128_behind_a_filter_tells_nothing() -> None:
    """The attack as an analyst runs it: a filter keeps one unit's row, and the median's outcome must not say whether
    that row's value is past 2¹²⁷ − 1 (it did: charged, then failed, on D′ only)."""
    d = _u128([5])
    d_plus = _u128([2**128 - 1])
    query: Callable[[dp.Frame], Any] = lambda t: t.filter(pl.col("u") == len(_BASE)).agg(  # noqa: E731
        dp.median("x", bounds=(0, 100)))
    assert _outcome(d, query) == _outcome(d_plus, query) == ("released", ("committed",))


# ------------------------------------------------------------------------ 2. what held (pinned against regressions)

def test_a_ternary_of_typed_non_integer_branches_behaves_alike_whatever_the_rows() -> None:
    """Review 41b cast an *integer* ternary's branches to its planned type, since Polars typed a batch whose rows all
    took one literal branch by that literal. Float, datetime, duration, decimal, struct, string and Enum branches of
    different types were tried on rows all on one side of the predicate, split by it, and one chunk per row: each
    computes the type its plan gives on every layout, so the query is released alike on each."""
    def rows(values: list[int]) -> pl.DataFrame:
        return pl.DataFrame({"u": list(range(len(values))), "i": values}).with_columns(
            f32=pl.col("i").cast(pl.Float32), dms=pl.col("i").cast(pl.Datetime("ms")),
            dec=pl.col("i").cast(pl.Decimal(10, 1)), i8=pl.col("i").cast(pl.Int8))

    d_plus = rows([*range(-16, 4), 5])
    datasets = {"one side": rows(list(range(-16, 4))), "split": d_plus, "two": rows([1, 5]),
                "chunks": pl.concat([d_plus.slice(k, 1) for k in range(d_plus.height)], rechunk=False)}
    p = pl.col("i") > 3
    ternaries = [
        pl.when(p).then(pl.lit(1.5, dtype=pl.Float64)).otherwise(pl.col("f32")),
        pl.when(p).then(pl.lit(1.5, dtype=pl.Float32)).otherwise(pl.lit(1e300, dtype=pl.Float64)),
        pl.when(p).then(pl.lit(dt.datetime(2020, 1, 1), dtype=pl.Datetime("ns"))).otherwise(pl.col("dms")),
        pl.when(p).then(pl.lit(dt.timedelta(1), dtype=pl.Duration("ms"))).otherwise(
            pl.lit(dt.timedelta(2), dtype=pl.Duration("ns"))),
        pl.when(p).then(pl.lit(Decimal("1.25"))).otherwise(pl.col("dec")),
        pl.when(p).then(pl.struct(a=pl.lit(1))).otherwise(pl.struct(a=pl.col("i"))),
        pl.when(p).then(pl.struct(a=pl.col("i8"))).otherwise(pl.struct(a=pl.lit(300))),
        pl.when(p).then(pl.col("i8")).otherwise(pl.lit(2.5)),
        pl.when(p).then(pl.lit("x")).otherwise(pl.col("i")),
    ]
    for ternary in ternaries:
        seen = {name: _outcome(data, lambda f, e=ternary: f.with_columns(v=e).filter(pl.col("v").is_not_null())
                               .agg(n=dp.len()))
                for name, data in datasets.items()}
        assert set(seen.values()) == {("released", ("committed",))}, (ternary, seen)


def test_a_ternary_of_integer_literal_structs_is_refused_free_on_any_rows() -> None:
    """``when(p).then(pl.struct(a=pl.lit(1))).otherwise(pl.struct(a=pl.lit(2**40)))``: Polars panics where ``p`` splits
    a batch (``Int64`` met ``Int32``). The build-time probe splits it on every query, so it is refused, free, with one
    message, whatever the rows."""
    ternary = pl.when(pl.col("i") > 3).then(pl.struct(a=pl.lit(1))).otherwise(pl.struct(a=pl.lit(2**40)))
    data = {"one side": pl.DataFrame({"u": [0, 1], "i": [0, 1]}), "split": pl.DataFrame({"u": [0, 1], "i": [0, 9]})}
    seen = {name: _outcome(d, lambda f: f.with_columns(v=ternary.struct.field("a")).agg(dp.sum("v", bounds=(0, 1))))
            for name, d in data.items()}
    (refusal, charged), = set(seen.values())
    assert refusal.startswith("PlanError: ") and charged == (), seen


def _zero_and_nans() -> list[float]:
    other_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    return [0.0, -0.0, math.nan, other_nan]


@pytest.mark.parametrize("keys", [
    [0.0, -0.0], {"x": [0.0, -0.0]}, pl.DataFrame({"x": [0.0, -0.0]}), [math.nan, _zero_and_nans()[3]]])
def test_public_keys_equal_under_the_unit_equality_are_duplicates(keys: Any) -> None:
    """Public keys ``0.0`` and ``-0.0`` (or two NaNs of different bits) are one group to the engine's grouping: given
    both, every row of that group would count twice (a unit in two groups under ``max_groups=1``). Refused, free."""
    data = pl.DataFrame({"u": list(range(10)), "x": [-0.0] * 5 + [1.0] * 5})
    seen = _outcome(data, lambda t: t.group_by("x", keys=keys).agg(dp.len()), unit=dp.PrivacyUnit("u", max_rows=1))
    assert seen == ("SchemaError: keys: keys contain duplicates. Fix: pass each key once", ())


@pytest.mark.parametrize("column, keys", [
    ([{"a": -0.0}] * 5 + [{"a": 1.0}] * 5, [{"a": 0.0}, {"a": -0.0}]),
    ([[-0.0]] * 5 + [[1.0]] * 5, [[0.0], [-0.0]])])
def test_nested_public_keys_equal_under_the_unit_equality_are_duplicates(column: list[Any], keys: list[Any]) -> None:
    """The same inside struct and list keys."""
    data = pl.DataFrame({"u": list(range(10)), "x": column})
    seen = _outcome(data, lambda t: t.group_by("x", keys=keys).agg(dp.len()), unit=dp.PrivacyUnit("u", max_rows=1))
    assert seen == ("SchemaError: keys: keys contain duplicates. Fix: pass each key once", ())


_RENAMES: dict[str, Callable[[dp.Frame], Any]] = {
    "name.to_uppercase": lambda t: t.with_columns(pl.col("u").name.to_uppercase()),
    "struct of it": lambda t: t.with_columns(pl.struct("u").name.to_uppercase()),
    "keep then upper": lambda t: t.with_columns((pl.col("u") + 1).name.keep().name.to_uppercase()),
    "regex": lambda t: t.with_columns(pl.col("^U.*$") * 1),
    "all": lambda t: t.with_columns(pl.all() * 2),
    "first selector": lambda t: t.with_columns(cs.first() + 1),
    "struct field": lambda t: t.with_columns(pl.struct(pl.col("u").alias("U")).struct.field("U")),
    "key expression": lambda t: t.group_by(pl.col("u").name.to_uppercase(), keys=[5, 6]),
}


@pytest.mark.parametrize("name", list(_RENAMES))
def test_no_expression_renames_a_column_onto_the_unit_column(name: str) -> None:
    """A derived column named like the unit column (``U``) would replace the ids contribution bounding reads. Every
    way to name it so (name operations, regexes, selectors, struct fields, key expressions) is refused, free."""
    data = pl.DataFrame({"U": [1, 1, 1, 2, 3], "u": [5, 6, 7, 8, 9]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("U", max_rows=1), budget=_WIDE, seed=0)
    with pytest.raises(dp.errors.PlanError, match="'U'"):
        _RENAMES[name](sess.table("t"))
    assert sess.history().height == 0


def test_a_filter_constant_is_read_as_a_plain_value() -> None:
    """``filter(x=v)`` builds ``pl.col('x') == pl.lit(v)``: an ``int`` or ``str`` subclass whose ``__eq__`` records
    what it is compared with is read as its plain value (its ``__eq__`` never meets a private value), and an object
    Polars cannot read is refused, free."""
    seen: list[object] = []

    class SpyInt(int):
        def __eq__(self, other: object) -> bool:
            seen.append(other)
            return True

        __hash__ = int.__hash__

    class Spy:
        def __eq__(self, other: object) -> bool:
            seen.append(other)
            return True

        __hash__ = object.__hash__

    data = pl.DataFrame({"u": [1, 2, 3], "x": [1, 2, 3]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0)
    sess.table("t").filter(x=SpyInt(2)).agg(n=dp.len()).collect(dp.PureDP(1))
    with pytest.raises(dp.errors.PlanError, match="must be a value Polars can compare with"):
        sess.table("t").filter(x=Spy())
    assert seen == [] and sess.history()["status"].to_list() == ["committed"]


def test_a_sample_keeps_or_drops_a_unit_whole_under_the_unit_equality() -> None:
    """Amplification needs a unit kept or dropped whole. The unit equality makes ``0.0``/``-0.0`` one unit and every NaN
    one unit; the sample's seeded hash must agree (it does: Polars hashes them canonically), or such a unit's rows
    would be sampled twice over, each part with probability ``rate``."""
    zero, minus_zero, nan, other_nan = _zero_and_nans()
    frame = pl.DataFrame({"u": [zero, minus_zero, nan, other_nan, 1.0, 1.0], "r": list(range(6))}).lazy()
    node = Sample.of(dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=_WIDE)
                     .table("t")._node, 0.5, "u")
    wholes = set()
    for seed in range(64):
        kept = set(node.apply_seeded(frame, seed).collect()["r"].to_list())
        wholes |= {len(kept & group) for group in ({0, 1}, {2, 3}, {4, 5})}
    assert wholes == {0, 2}


def test_a_query_that_reads_its_sample_twice_claims_no_amplification() -> None:
    """Amplification is claimed once per sample read by one release. A query whose release reads its sample in
    stages (automatic bounds, diagnostics) or through an interactive family is charged its full cost, never less; a
    one-stage release, the amplified cost log(1 + q(e^ε − 1))."""
    data = pl.DataFrame({"u": list(range(200)), "x": [float(i % 50) for i in range(200)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0)
    t = sess.table("t").sample(0.1)
    amplified = math.log(1 + 0.1 * math.expm1(1.0))
    assert t.agg(dp.mean("x", bounds=(0, 50))).cost(dp.PureDP(1)).epsilon == pytest.approx(amplified, rel=1e-5)
    assert t.agg(dp.mean("x", bounds=(0, 50))).cost(dp.PureDP(1)).epsilon >= amplified
    assert t.agg(dp.mean("x", bounds="auto")).cost(dp.PureDP(1)).epsilon == 1
    assert t.agg(dp.sum("x", bounds=(0, 50))).cost(dp.PureDP(1), diagnostics=True).epsilon == 1
    assert t.interior_point("x", bounds=(0, 100)).cost(dp.PureDP(1)).epsilon == 1


@pytest.mark.parametrize("accountant, total, each", [
    ("basic", dp.ApproxDP(1, 1e-6), dp.ApproxDP(0.1, 1e-8)),
    ("zcdp", dp.ZCDP(0.5), dp.ZCDP(0.05)),
    ("rdp", dp.ApproxDP(1, 1e-6), dp.ApproxDP(0.2, 1e-8)),
    ("pld", dp.ApproxDP(1, 1e-6), dp.ApproxDP(0.2, 1e-8))])
def test_threads_collecting_on_one_session_admit_what_one_thread_would(accountant: str, total: dp.Budget,
                                                                       each: dp.Budget) -> None:
    """16 threads at a barrier collect one query until refused: they are admitted exactly as often as one thread
    collecting alone (the filter's check and its record are one step under every accountant), and every ledger row is
    committed."""
    data = pl.DataFrame({"u": list(range(20)), "x": [1.0] * 20})

    def session() -> dp.Session:
        return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=total,
                          accountant=accountant, seed=0)

    alone = session()
    admitted_alone = 0
    while True:
        try:
            alone.table("t").agg(dp.len()).collect(each)
        except dp.errors.BudgetExceededError:
            break
        admitted_alone += 1
    shared = session()
    query = shared.table("t").agg(dp.len())
    barrier = threading.Barrier(16)
    admitted: list[int] = []
    other: list[str] = []

    def run() -> None:
        barrier.wait()
        for _ in range(2):
            try:
                query.collect(each)
                admitted.append(1)
            except dp.errors.BudgetExceededError:
                pass
            except BaseException as e:  # noqa: BLE001 - any other outcome fails the test below
                other.append(repr(e))

    threads = [threading.Thread(target=run) for _ in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert other == []
    assert len(admitted) == admitted_alone > 0
    assert shared.history()["status"].to_list() == ["committed"] * admitted_alone


def test_released_categorical_keys_come_in_lexical_order_whatever_the_process_saw_first() -> None:
    """A ``Categorical`` column's codes follow the order the process first saw each string (here the private rows'
    order: ``zeta`` first). Sorting released keys by code would tell that order; they come sorted by their text."""
    data = pl.DataFrame({"u": list(range(300)), "g": pl.Series(["zeta", "alpha", "mid"] * 100, dtype=pl.Categorical)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0)
    t = sess.table("t")
    private_keys = t.group_by("g").agg(dp.len()).collect(dp.ApproxDP(1, 1e-6))["g"].cast(pl.String).to_list()
    public_keys = t.group_by("g", keys=["mid", "zeta", "alpha"]).agg(dp.len()).collect(dp.PureDP(1))
    assert private_keys == ["alpha", "mid", "zeta"]
    assert public_keys["g"].cast(pl.String).to_list() == ["alpha", "mid", "zeta"]


@pytest.mark.parametrize("dtype, first, later", [
    (pl.Float16, -0.0, 0.0), (pl.Map(pl.String, pl.Float64), {"a": -0.0}, {"a": 0.0})])
def test_keys_of_polars_newer_float_types_are_released_canonically(dtype: pl.DataType, first: Any, later: Any) -> None:
    """Review 53i released float keys canonically (a ``-0.0`` key told that one row led its group). Polars' newer
    ``Float16`` and ``Map`` types hold floats too: a group whose first row holds ``-0.0`` is released as ``0.0``."""
    data = pl.DataFrame({"u": list(range(100)), "k": pl.Series([first] * 50 + [later] * 50, dtype=dtype)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0)
    keys = sess.table("t").group_by("k").agg(dp.len()).collect(dp.ApproxDP(1, 1e-6))["k"]
    assert [str(v) for v in keys.to_list()] == [str(later)]
