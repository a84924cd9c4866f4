"""Hypothesis strategies for adversarial dpframe input, and the outcome check every fuzz test applies.

Frames: every common dtype (ints of every width at their extremes, floats with NaN / ±inf / subnormals /
±1e308, booleans, unicode strings, categoricals, dates, datetimes, durations, decimals, lists, structs,
all-null columns), 0–12 rows, unicode column names, a privacy-unit column that may hold nulls or be
missing; duplicate column names through pyarrow. Budgets, bounds and options include NaN, ±inf, 0,
negatives, huge and tiny numbers, wrong types. Query plans chain filters, derived columns, selections,
group-bys (public, private or malformed keys) and measures of every kind.

Two settings profiles: ``CI`` (derandomized, few examples: the default run) and ``DEEP`` (many examples,
for ``-m slow``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import signal
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import polars as pl
import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import dpframe as dp

CI = settings(max_examples=60, derandomize=True, deadline=None, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
DEEP = settings(max_examples=1500, deadline=None, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))

#: Wall-clock limit of one example (a hang fails the test instead of stalling the suite).
EXAMPLE_SECONDS = 30

NAMES = st.sampled_from(["x", "y", "k", "ключ", "名前", "a b", "", "x\x00y", "__dp_row", "__rows", "KEY", "😀"])
KEYS = st.one_of(st.text(max_size=6), st.sampled_from(["a", "b", "ä", "", "😀", "\x00", "NULL", "a\nb"]))
EXTREME_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0, 1e-300, 2.0**53 + 1])
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), EXTREME_FLOATS)


def _ints(bits: int, signed: bool) -> st.SearchStrategy[int]:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0]))


COLUMN_TYPES: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "i8": (pl.Int8, _ints(8, True)), "i16": (pl.Int16, _ints(16, True)), "i32": (pl.Int32, _ints(32, True)),
    "i64": (pl.Int64, _ints(64, True)), "u8": (pl.UInt8, _ints(8, False)), "u32": (pl.UInt32, _ints(32, False)),
    "u64": (pl.UInt64, _ints(64, False)), "f32": (pl.Float32, st.floats(width=32)), "f64": (pl.Float64, FLOATS),
    "bool": (pl.Boolean, st.booleans()), "str": (pl.String, KEYS), "cat": (pl.Categorical, KEYS),
    "date": (pl.Date, st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    "datetime": (pl.Datetime("us"), st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 1, 1))),
    "duration": (pl.Duration("us"), st.timedeltas(dt.timedelta(days=-10**5), dt.timedelta(days=10**5))),
    "decimal": (pl.Decimal(20, 4), st.decimals(-10**10, 10**10, places=4, allow_nan=False)),
    "list": (pl.List(pl.Int64), st.lists(st.integers(-5, 5), max_size=3)),
    "struct": (pl.Struct({"a": pl.Int64}), st.fixed_dictionaries({"a": st.integers(-5, 5)})),
    "null": (pl.Null, st.none()),
}


@st.composite
def frames(draw: st.DrawFn, min_rows: int = 0) -> pl.DataFrame:
    """A frame with a unit column ``user`` (maybe with nulls), a key column ``k`` and random other columns."""
    rows = draw(st.integers(min_rows, 12))
    users = draw(st.lists(st.one_of(st.integers(0, 4), st.none() if draw(st.booleans()) else st.integers(0, 4)),
                          min_size=rows, max_size=rows))
    data: dict[str, pl.Series] = {"user": pl.Series("user", users, dtype=pl.Int64),
                                  "k": pl.Series("k", draw(st.lists(st.one_of(KEYS, st.none()), min_size=rows,
                                                                    max_size=rows)), dtype=pl.String)}
    for name in draw(st.lists(NAMES, max_size=4, unique=True)):
        if name in data:
            continue
        dtype, values = COLUMN_TYPES[draw(st.sampled_from(sorted(COLUMN_TYPES)))]
        cells = draw(st.lists(st.one_of(values, st.none()), min_size=rows, max_size=rows))
        with contextlib.suppress(Exception):   # a value polars cannot store in this dtype: skip the column
            data[name] = pl.Series(name, cells, dtype=dtype, strict=False)
    if draw(st.booleans()):
        data["x"] = pl.Series("x", draw(st.lists(st.one_of(FLOATS, st.none()), min_size=rows, max_size=rows)),
                              dtype=pl.Float64)
    return pl.DataFrame(data)


def duplicate_names(frame: pl.DataFrame) -> pa.Table:
    """The frame as a pyarrow table whose last column repeats the first column's name."""
    table = frame.select([c for c in frame.columns if "\x00" not in c]).to_arrow()   # Arrow cannot name "a\x00b"
    names = [*table.column_names[:-1], table.column_names[0]]
    return pa.Table.from_arrays(table.columns, names=names)


NUMBERS = st.one_of(FLOATS, st.integers(-10**30, 10**30), st.fractions(), st.sampled_from(
    [0, 1, -1, 0.5, Fraction(1, 3), 10**400, True, None, "1", Decimal("1.5"), [1], complex(1, 1)]))
SANE = st.one_of(st.fractions(Fraction(1, 100), 20), st.sampled_from([0.5, 1, 2.0, 1e-3, 1e3]))
DELTAS = st.one_of(st.sampled_from([1e-6, 1e-9, 0.5, 0, 1, 1e-300, math.nan]), NUMBERS)


@st.composite
def budgets(draw: st.DrawFn, sane: bool = False) -> Callable[[], Any]:
    """A thunk building a budget (constructing it may itself raise a dpframe error)."""
    eps = draw(SANE if sane or draw(st.integers(0, 3)) else NUMBERS)
    kind = draw(st.sampled_from(["pure", "approx", "zcdp", "zcdp_delta", "raw"]))
    delta = draw(st.sampled_from([1e-6, 1e-8]) if sane else DELTAS)
    builders = {"pure": lambda: dp.PureDP(eps), "approx": lambda: dp.ApproxDP(eps, delta),
                "zcdp": lambda: dp.ZCDP(eps), "zcdp_delta": lambda: dp.ZCDP(eps, delta), "raw": lambda: eps}
    return builders[kind if not sane or kind != "raw" else "pure"]


BOUNDS = st.one_of(
    st.tuples(st.sampled_from([0, -10, 0.5]), st.sampled_from([1, 100, 10.5])),
    st.tuples(NUMBERS, NUMBERS), st.lists(NUMBERS, max_size=3), NUMBERS,
    st.sampled_from([(0, math.inf), (math.nan, 1), (5, 1), (1, 1), (-1e308, 1e308), (0, 1e-320), ("0", "1")]))

COLUMNS = st.one_of(NAMES, st.sampled_from(["user", "k", "x", "nope"]), st.integers(), st.none())


@st.composite
def measures(draw: st.DrawFn) -> Callable[[], Any]:
    """A thunk building a measure (the constructor may refuse with a dpframe error)."""
    column, bounds = draw(COLUMNS), draw(BOUNDS)
    kind = draw(st.sampled_from(["len", "count", "sum", "mean", "var", "std", "histogram", "quantile", "median",
                                 "measure", "raw"]))
    if kind == "len":
        return lambda: dp.len()
    if kind == "count":
        return lambda: dp.count(column)
    if kind in ("sum", "mean"):
        return lambda: getattr(dp, kind)(column, bounds=bounds)
    if kind in ("var", "std"):
        ddof = draw(st.sampled_from([0, 1, 2, -1, 0.5, None, "1"]))
        return lambda: getattr(dp, kind)(column, bounds=bounds, ddof=ddof)
    if kind == "histogram":
        edges = draw(st.one_of(st.lists(NUMBERS, max_size=4), NUMBERS))
        return lambda: dp.measure("histogram", column, bounds=bounds, edges=edges)
    if kind in ("quantile", "median"):
        q = draw(st.one_of(NUMBERS, st.lists(NUMBERS, max_size=3)))
        return lambda: dp.quantile(column, q, bounds=bounds) if kind == "quantile" else dp.median(column, bounds)
    if kind == "measure":
        name = draw(st.one_of(st.text(max_size=8), st.sampled_from(["sum", "len", "partition_selection"])))
        options = draw(st.dictionaries(st.sampled_from(["ddof", "edges", "mechanism", "q", "zzz"]), NUMBERS,
                                       max_size=2))
        return lambda: dp.measure(name, column, bounds, **options)
    raw = draw(st.sampled_from([pl.col("x"), "x", 3, None, [dp.len(), "x"]]))
    return lambda: raw


def _expr(draw: st.DrawFn, column: str) -> Any:
    value = draw(st.one_of(FLOATS, KEYS, st.integers(-10**20, 10**20), st.none()))
    col = pl.col(column)
    return draw(st.sampled_from([
        col > value, col == value, col.is_null(), col.is_nan(), col.cast(pl.Float64) / 0, col * 2 + 1,
        col.cast(pl.Int8), col.cast(pl.String), col.str.len_chars(), col.abs(), -col, col.fill_null(0),
        col.sqrt(), col.log(), col.cum_sum(), col.sum(), col.mean() > col, col.shift(1), col.rank(),
        pl.lit(value), pl.lit(1) / pl.lit(0), col.max(), col.sort(), pl.len(),
    ]))


@st.composite
def plans(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Frame operations before the terminal ``agg``: (method, args, kwargs)."""
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(0, 3))):
        column = draw(st.sampled_from(["x", "k", "user", "y", "nope"]))
        op = draw(st.sampled_from(["filter", "with_columns", "select"]))
        if op == "filter":
            steps.append(("filter", ((_expr(draw, column),), {})))
        elif op == "with_columns":
            steps.append(("with_columns", ((), {draw(st.sampled_from(["y", "x", "user", "k"])): _expr(draw, column)})))
        else:
            steps.append(("select", (tuple(draw(st.lists(st.sampled_from(["x", "k", "user", "y"]), min_size=1,
                                                          max_size=3))), {})))
    if draw(st.booleans()):
        keys = draw(st.one_of(st.none(), st.lists(KEYS, max_size=4), st.lists(st.one_of(KEYS, st.none()), max_size=3),
                              st.sampled_from(["a", 5, {"k": ["a"]}, {"zz": [1]}, pl.DataFrame({"k": ["a", "b"]})])))
        steps.append(("group_by", ((draw(st.sampled_from(["k", "user", "x", "nope"])),), {"keys": keys})))
    return steps


@contextlib.contextmanager
def time_limit(seconds: int = EXAMPLE_SECONDS) -> Iterator[None]:
    """Fail (TimeoutError) instead of hanging."""
    def stop(*_: Any) -> None:
        raise TimeoutError(f"an example ran for more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Ledgered:
    """Checks the budget bookkeeping around one public call: refused calls charge nothing."""

    def __init__(self, sess: dp.Session) -> None:
        self.sess = sess
        self.spent = sess.spent()
        self.raw = sess._release.spent()      # the accountant's own total (an RDP curve for rdp/pld sessions)
        self.rows = sess.history().height

    def after(self, cost: Any) -> dp.Budget:
        """What ``sess.spent()`` must report once ``cost`` (a query's ``cost()``) is charged."""
        return self.sess.accountant.report(self.sess.accountant.compose([self.raw, cost]))

    def refused(self, error: dp.DPFrameError) -> None:
        """A dpframe error: nothing charged, unless the engine says the query failed after its reservation."""
        history = self.sess.history()
        if history.height == self.rows:
            assert self.sess.spent() == self.spent, f"refused ({error}) but charged"
            return
        assert "failed while running" in str(error), f"charged for a refused query: {error}"
        assert history.height == self.rows + 1 and history["status"][-1] == "failed"

    def released(self, cost: dp.Budget) -> None:
        """A result: exactly ``cost`` was charged."""
        after = self.after(cost)
        assert self.sess.spent() == after, (self.spent, cost, self.sess.spent())
        assert self.sess.history().height == self.rows + 1
