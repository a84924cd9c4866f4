"""Measures: the private statistics a query asks for (``dp.len()``, ``dp.sum(...)``, ...).

A measure is a frozen description; it reads no data. The planner hands each measure to the mechanism
plugin that handles its ``kind`` (built-ins: ``len``, ``count``, ``sum``, ``mean``, ``var``, ``std``),
and that plugin decides which exact statistics the backend computes and how noise is added.

Nulls and NaN: ``dp.len()`` counts rows; ``dp.count(col)`` counts rows where ``col`` is neither null nor
NaN; ``sum``/``mean``/``var``/``std`` ignore null and NaN values (mean and variance divide by the noisy
count of non-null values); ±inf and out-of-range values are clamped to the bounds.

A measure's column may be a row-level Polars expression, as in ``with_columns`` (same allow-list, same
totality checks): ``dp.mean(pl.col("delay") > 15, bounds=(0, 1))`` is the share of rows with a delay
over 15. It is named like Polars names the expression (``delay_mean``); ``.alias()`` names it otherwise.

Example:
    >>> import polars as pl, dpframe as dp
    >>> dp.mean("spend", bounds=(0, 500)).output_name
    'spend_mean'
    >>> dp.len().alias("n").output_name
    'n'
    >>> dp.mean(pl.col("delay") > 15, bounds=(0, 1)).alias("late_share").describe()
    'mean([(col("delay")) > (dyn int: 15)], bounds=[0, 1])'

"""

from __future__ import annotations

import builtins
import datetime as dt
import io
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl

from dpframe.budgets import NUMBER_BITS
from dpframe.errors import ArgumentError, BoundsError, MissingBoundsError, PlanError
from dpframe.sealed import Final, plain, plain_copy
from dpframe.signatures import checked, checked_constructors

Bounds = tuple[Fraction, Fraction]


BOUNDS_FIX = "pass bounds=(lower, upper) with two finite numbers, lower < upper, chosen without looking at the data"


def check_bounds(bounds: object, argument: str = "bounds", fix: str = BOUNDS_FIX) -> Bounds:
    """Validate ``(lower, upper)`` clipping bounds: two finite numbers with lower < upper (``fix`` says how)."""
    if bounds is None:
        raise BoundsError("bounds are required", argument=argument, fix=fix)
    # read once: a list another thread (or a subclass's __len__) shortens between the count and the loop
    pair = tuple(bounds) if isinstance(bounds, tuple | list) else None
    if pair is None or builtins.len(pair) != 2:
        raise BoundsError(f"expected a pair (lower, upper), got {bounds!r}", argument=argument, fix=fix)
    out = []
    for b in map(plain, pair):
        if isinstance(b, dt.date):
            raise BoundsError(f"bound {b!r} is a date: this measure takes numbers", argument=argument,
                              fix="sums, means and variances of dates are not supported: dp.median and dp.quantile "
                                  "take date bounds; or measure days since 1970: dp.mean(pl.col('day').to_physical(), "
                                  "bounds=(lo_days, hi_days))")
        if isinstance(b, numbers.Real) and not isinstance(b, bool | int | float | Fraction):
            b = float(b)  # numpy scalars
        if isinstance(b, bool) or not isinstance(b, int | float | Fraction):
            raise BoundsError(f"bound {b!r} is not a number", argument=argument, fix=fix)
        if isinstance(b, float) and not math.isfinite(b):
            raise BoundsError(f"bound {b} is not finite", argument=argument, fix=fix)
        out.append(within_digits(within_float64(Fraction(b), "bound", argument, fix), "bound", argument, fix))
    if out[0] >= out[1]:
        raise BoundsError(f"lower {pair[0]} must be below upper {pair[1]}", argument=argument, fix=fix)
    return out[0], out[1]


#: The largest finite float64, exactly.
FLOAT64_MAX = Fraction(np.finfo(np.float64).max)


def within_float64(value: Fraction, what: str, argument: str, fix: str) -> Fraction:
    """``value`` if a float64 can hold it (the backends compare and clip in float64), else a ``BoundsError``.

    An integer such as ``10**400`` has no float: ``float()`` would raise a raw ``OverflowError``.

    Example:
        >>> within_float64(Fraction(10**400), "edge", "edges", "use smaller edges")
        Traceback (most recent call last):
        ...
        dpframe.errors.BoundsError: edges: edge 1000000000000000000... (401 digits) is beyond the range of a ...

    """
    if abs(value) <= FLOAT64_MAX:
        return value
    whole, sign = abs(value.numerator) // value.denominator, "-" if value < 0 else ""
    if whole.bit_length() < 14_000:          # str() of an int past 4,300 digits is a ValueError
        digits = str(whole)
        shown = f"{sign}{digits[:19]}... ({builtins.len(digits)} digits)"
    else:
        shown = f"{sign}about 10^{int(whole.bit_length() * math.log10(2))}"
    raise BoundsError(f"{what} {shown} is beyond the range of a float64 (±1.8e308)", argument=argument, fix=fix)


def within_digits(value: Fraction, what: str, argument: str, fix: str) -> Fraction:
    """``value`` if its numerator and denominator have at most :data:`~dpframe.budgets.NUMBER_BITS` bits.

    Else a ``BoundsError``: the plans, ``explain()`` and the ledger write bounds as text, and Python writes no int of
    more than 4,300 digits (a ValueError deep inside a mechanism's plan, blamed on its plugin).

    Example:
        >>> within_digits(Fraction(1, 10**5000), "bound", "bounds", "round it")
        Traceback (most recent call last):
        ...
        dpframe.errors.BoundsError: bounds: bound is an exact number of about 5,000 digits (numerator or ...

    """
    bits = max(abs(value.numerator).bit_length(), value.denominator.bit_length())
    if bits <= NUMBER_BITS:
        return value
    raise BoundsError(f"{what} is an exact number of about {int(bits * math.log10(2)):,} digits (numerator or "
                      f"denominator); one has at most {int(NUMBER_BITS * math.log10(2)):,}, as a budget's",
                      argument=argument, fix=f"round it to a few significant digits (e.g. a float); {fix}")


def _frozen(value: object) -> Any:
    """``value`` with every list, tuple, array or set in it a tuple, and every number plain (:func:`plain`)."""
    if isinstance(value, np.ndarray | pl.Series):
        value = plain_copy(value)        # read once: it can be changed in place
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(_frozen(v) for v in value)
    return plain(value)


Column = str | pl.Expr
"""A measure's input: a column name, or a row-level Polars expression."""


def _check_column(column: object) -> str:
    if not isinstance(column, str) or not column:
        raise ArgumentError(f"expected a column name or a Polars expression, got {column!r}", argument="column",
                           fix="pass the column's name as a string, or a row-level expression such as "
                               "pl.col('delay') > 15")
    return column


def column_input(column: object) -> tuple[str, bytes | None]:
    """``(name, expression)``: a column's name and None, or an expression's Polars output name and its bytes.

    Polars' binary form, not its JSON: JSON writes a NaN or infinite float literal as ``null``, which does
    not read back (the measure failed with a raw Polars error when the query was built).

    ``pl.col("x")`` is the column ``x``. Any other expression is checked like a ``with_columns``
    expression (allow-list and totality, against the frame's schema) when the measure is used.
    """
    if not isinstance(column, pl.Expr):
        return _check_column(column), None
    fix = "pass one row-level expression with one output, e.g. (pl.col('a') + pl.col('b')).alias('total')"
    if column.meta.has_multiple_outputs():
        raise ArgumentError("the expression has several outputs", argument="column", fix=fix)
    try:
        name = column.meta.output_name()
    except pl.exceptions.PolarsError:
        raise ArgumentError("the expression has no output name", argument="column", fix=fix) from None
    if column.meta.is_column():
        return name, None
    try:
        return name, column.meta.serialize()
    except Exception as e:  # Python UDFs (map_elements/map_batches) do not serialize without pickling
        raise PlanError("uses an operation dpframe cannot inspect (a Python function?)", argument="column",
                        fix="express it with built-in Polars expressions") from e


@checked_constructors
@dataclass(frozen=True)
class Measure(Final, argument="measures"):
    """A private aggregate request: ``kind`` (routed to a mechanism plugin), column, bounds, options.

    Third-party plugins add kinds; build their measures with :func:`measure`.
    """

    kind: str
    column: str | None = None
    bounds: Bounds | None = None
    options: tuple[tuple[str, Any], ...] = ()
    name: str | None = None
    expression: bytes | None = None   # a row-level expression (Polars' binary form) computing ``column``

    def __post_init__(self) -> None:
        # the analyst's lists as tuples of plain numbers: options are read again when the query runs, after
        # it was priced (a list changed in between, by the analyst or another thread, would run other bins)
        object.__setattr__(self, "options", tuple((k, _frozen(v)) for k, v in self.options))
        for name in ("kind", "column", "name"):      # a str subclass could answer differently to the planner
            object.__setattr__(self, name, plain(getattr(self, name)))
        if isinstance(self.name, str) and not self.name.isascii():
            try:
                self.name.encode("utf-8")
            except UnicodeEncodeError:  # Polars names columns in UTF-8: the release failed after its charge
                raise ArgumentError(f"the output name {self.name!r:.80} is not UTF-8 text (it holds a lone "
                                    "surrogate), which no released column can be named", argument="name",
                                    fix="pass a name of valid Unicode text") from None

    @property
    def expr(self) -> pl.Expr | None:
        """The row-level expression the measure reads (named ``column``), or None for a plain column."""
        if self.expression is None:
            return None
        return pl.Expr.deserialize(io.BytesIO(self.expression))

    @property
    def output_name(self) -> str:
        """The released column's name (``len``, ``<col>_<kind>``, or the alias)."""
        if self.name is not None:
            return self.name
        return self.kind if self.column is None else f"{self.column}_{self.kind}"

    def alias(self, name: str) -> Measure:
        """The same measure released under another column name."""
        if not isinstance(name, str) or not name:
            raise ArgumentError(f"expected a non-empty string, got {name!r}", argument="name",
                               fix="pass the output column name")
        return replace(self, name=name)

    def option(self, key: str, default: Any = None) -> Any:
        """An option's value (options are stored as a sorted tuple so measures stay hashable)."""
        return dict(self.options).get(key, default)

    def describe(self) -> str:
        """Text such as ``mean(spend, bounds=[0, 500])``."""
        expr = self.expr
        args = [] if self.column is None else [self.column if expr is None else str(expr)]
        if self.bounds is not None:
            args.append(f"bounds=[{_num(self.bounds[0])}, {_num(self.bounds[1])}]")
        args += [f"{k}={v!r}" for k, v in self.options]
        return f"{self.kind}({', '.join(args)})"


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


@checked
def measure(kind: str, column: Column | None = None, bounds: object = None, **options: Any) -> Measure:
    """Build a measure of any kind, e.g. one added by a third-party mechanism plugin.

    Example:
        >>> measure("histogram", "age", bounds=(0, 120), edges=(0, 18, 65, 120)).describe()
        'histogram(age, bounds=[0, 120], edges=(0, 18, 65, 120))'

    """
    if not isinstance(kind, str) or not kind:
        raise ArgumentError(f"expected a non-empty string, got {kind!r}", argument="kind",
                           fix="name the measure kind a mechanism plugin handles (see `dpframe plugins`)")
    col, expression = (None, None) if column is None else column_input(column)
    b = None if bounds is None else check_bounds(bounds)
    return Measure(kind, col, b, tuple(sorted(options.items())), expression=expression)


@checked
def len() -> Measure:  # noqa: A001  (mirrors polars' pl.len())
    """The number of rows (after contribution bounding), released with noise. Output column ``len``."""
    return Measure("len")


@checked
def count_units() -> Measure:
    """The number of distinct privacy units (e.g. users) per group. Output column ``count_units``.

    Used as a top-k score: adding or removing one unit changes every group's value by 0 or 1, however
    many groups the unit touches (``docs/topk.md``).
    """
    return Measure("count_units")


@checked
def count(column: Column) -> Measure:
    """The number of rows whose ``column`` is neither null nor NaN. Output ``<column>_count``."""
    name, expression = column_input(column)
    return Measure("count", name, expression=expression)


@checked
def count_distinct(column: Column) -> Measure:
    """The number of distinct values of ``column`` (null and NaN not counted) per group, with noise.

    Output ``<column>_count_distinct``. Counted over the rows contribution bounding keeps (``max_rows`` per
    unit), so one unit adds at most ``max_rows`` new values: the noise is a count's. ``COUNT(DISTINCT column)``
    in SQL.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"u": [1, 1, 2], "x": ["a", "b", "a"]})},
        ...                   privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(1))
        >>> sess.table("t").agg(dp.count_distinct("x")).collect(dp.PureDP(1)).columns
        ['x_count_distinct']

    """
    name, expression = column_input(column)
    return Measure("count_distinct", name, expression=expression)


COUNT_KINDS = frozenset({"len", "count", "count_units", "count_distinct"})
"""The built-in measures released as whole numbers (Int64 columns): one noisy count each."""
AUTO_BOUNDS = "auto"
"""``bounds="auto"``: the clipping range is chosen privately per query (``docs/bounds.md``)."""


def auto_bounds(m: Measure) -> bool:
    """Whether ``m`` has ``bounds="auto"`` (chosen privately when the query runs).

    Example:
        >>> auto_bounds(mean("spend", bounds="auto")), auto_bounds(mean("spend", bounds=(0, 1)))
        (True, False)

    """
    return m.bounds is None and m.option("bounds") == AUTO_BOUNDS


def with_bounds(m: Measure, bounds: Bounds) -> Measure:
    """``m`` with explicit clipping ``bounds`` in place of ``"auto"``.

    Example:
        >>> with_bounds(sum("x", bounds="auto"), (Fraction(0), Fraction(8))).describe()
        'sum(x, bounds=[0, 8])'

    """
    return replace(m, bounds=bounds, options=tuple((k, v) for k, v in m.options if k != "bounds"))


TAKES_AUTO_BOUNDS = frozenset({"sum", "mean", "var", "std"})
"""The measures whose release accepts every candidate range, so ``bounds="auto"`` (``docs/bounds.md``)."""


def bounds_fix(kind: str) -> str:
    """How to give a ``kind`` measure its bounds: numbers, and ``"auto"`` where the measure takes it.

    Example:
        >>> bounds_fix("mean").endswith("bounds='auto' to choose them privately from a share of the query's budget")
        True
        >>> "auto" in bounds_fix("quantile")
        False

    """
    if kind in TAKES_AUTO_BOUNDS:
        return f"{BOUNDS_FIX}, or bounds='auto' to choose them privately from a share of the query's budget"
    return f"{BOUNDS_FIX} (frame.bounds(column) estimates them privately)"


def _bounded(kind: str, column: Column, bounds: object, **options: Any) -> Measure:
    """A measure that needs ``bounds``: numbers (a BoundsError naming them when missing), or ``"auto"``.

    Left out, or neither a pair nor ``"auto"``: a ``BoundsError`` naming ``bounds``, whose fix says what the
    measure takes (the guide's error table: missing bounds are a ``BoundsError``; left out, also a ``TypeError``,
    as Python's missing-argument error was).

    Example:
        >>> mean("spend")
        Traceback (most recent call last):
        ...
        dpframe.errors.MissingBoundsError: bounds: mean('spend') needs clipping bounds. Fix: ...

    """
    name, expression = column_input(column)
    if isinstance(bounds, str) and bounds == AUTO_BOUNDS:
        return Measure(kind, name, None, tuple(sorted({**options, "bounds": AUTO_BOUNDS}.items())),
                       expression=expression)
    if bounds is None:
        raise missing_bounds(kind, column)
    return Measure(kind, name, check_bounds(bounds, fix=bounds_fix(kind)), tuple(sorted(options.items())),
                   expression=expression)


def missing_bounds(kind: str, column: Column) -> MissingBoundsError:
    """The error of a ``kind`` measure of ``column`` built without bounds: it names them and says how to give them."""
    return MissingBoundsError(f"{kind}({column_input(column)[0]!r}) needs clipping bounds", argument="bounds",
                              fix=bounds_fix(kind))


@checked
def sum(column: Column, bounds: tuple[float, float] | str | None = None) -> Measure:  # noqa: A001
    """The sum of ``column`` clamped to ``bounds`` (nulls/NaN ignored). Output ``<column>_sum``.

    ``bounds`` is required: left out, it is a ``dp.BoundsError`` saying how to give it.

    ``bounds="auto"`` chooses the clipping range privately from a share of the query's budget
    (``docs/bounds.md``): the range whose clipping bias plus noise is smallest.
    """
    return _bounded("sum", column, bounds)


@checked
def mean(column: Column, bounds: tuple[float, float] | str | None = None) -> Measure:
    """The mean of ``column`` clamped to ``bounds``: noisy centred sum / noisy count of values (or ``"auto"``).

    ``bounds`` is required: left out, it is a ``dp.BoundsError`` saying how to give it.

    Example:
        >>> import polars as pl
        >>> mean(pl.col("delay") > 15, bounds=(0, 1)).output_name       # the share of rows with delay > 15
        'delay_mean'

    """
    return _bounded("mean", column, bounds)


@checked
def var(column: Column, bounds: tuple[float, float] | str | None = None, ddof: int = 1) -> Measure:
    """The variance of ``column`` clamped to ``bounds`` (``ddof=1``: sample variance, like polars; or ``"auto"``).

    ``bounds`` is required: left out, it is a ``dp.BoundsError`` saying how to give it.
    """
    return _bounded("var", column, bounds, ddof=check_ddof(ddof))


def check_ddof(ddof: object) -> int:
    """``ddof`` as 0 or 1 (the population or the sample variance); an ArgumentError naming it otherwise.

    Example:
        >>> check_ddof(1.0), check_ddof(np.int64(0))
        (1, 0)
        >>> check_ddof(True)
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: ddof: must be 0 or 1, got True...

    """
    value = plain(ddof)
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real) or value not in (0, 1):
        raise ArgumentError(f"must be 0 or 1, got {value!r:.40}", argument="ddof",
                            fix="pass ddof=0 (population) or ddof=1 (sample)")
    return 1 if value == 1 else 0


@checked
def std(column: Column, bounds: tuple[float, float] | str | None = None, ddof: int = 1) -> Measure:
    """The standard deviation: the square root of :func:`var` (``bounds`` required, as there)."""
    if bounds is None:
        raise missing_bounds("std", column)          # named std, not var
    return replace(var(column, bounds, ddof), kind="std")


Q_DENOMINATOR = 10_000
"""Quantile probabilities are rounded to the nearest fraction with a denominator ≤ this (public)."""


def quantile_fractions(q: object, argument: str = "q") -> tuple[Fraction, ...]:
    """Validate quantile probabilities: one number or a sequence of distinct numbers in [0, 1].

    Each becomes the nearest fraction with denominator ≤ 10,000 (``0.1`` → 1/10, ``1/3`` → 1/3); that
    rounding depends only on ``q``, never on data. Returned sorted.

    Example:
        >>> quantile_fractions([0.9, 0.1])
        (Fraction(1, 10), Fraction(9, 10))

    """
    fix = "pass a probability in [0, 1] or a list of distinct ones, e.g. q=[0.25, 0.5, 0.75]"
    items = list(q) if isinstance(q, list | tuple) else [q]
    if not items:
        raise ArgumentError("no quantile probabilities given", argument=argument, fix=fix)
    out = []
    for v in map(plain, items):
        if isinstance(v, numbers.Real) and not isinstance(v, bool | int | float | Fraction):
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, int | float | Fraction) or \
                (isinstance(v, float) and not math.isfinite(v)) or not 0 <= v <= 1:
            raise ArgumentError(f"quantile probabilities must be numbers in [0, 1], got {v!r}", argument=argument,
                               fix=fix)
        out.append(Fraction(v).limit_denominator(Q_DENOMINATOR))
    if builtins.len(set(out)) != builtins.len(out):
        raise ArgumentError(f"duplicate quantile probabilities in {items!r}", argument=argument,
                           fix="pass each probability once")
    return tuple(sorted(out))


@checked
def quantile(column: Column, q: float | Sequence[float], bounds: tuple[Any, Any] | None = None,
             resolution: Any = None) -> Measure:
    """The private q-quantile(s) of ``column`` on its public ordered domain (``docs/quantiles.md``).

    ``bounds=(lower, upper)`` are public clipping bounds (numbers; ``date``/``datetime`` for temporal
    columns), required (left out, a ``dp.BoundsError`` saying how to give them); float columns are placed
    on a power-of-two grid (``resolution``, rounded down; default: at most 2³² grid points). Nulls and NaN
    are ignored. One ``q`` gives a Float64 column
    ``<column>_quantile`` (the column's type for dates); a list of ``q`` gives one list per group,
    released jointly (the recursive split of ``docs/quantiles.md``) in the order given, monotone in ``q``.

    Example:
        >>> quantile("age", [0.25, 0.75], bounds=(0, 120)).describe()
        'quantile(age, bounds=[0, 120], q=(0.25, 0.75))'

    """
    # read once: a list subclass could iterate differently the second time
    given: tuple[Any, ...] | Any = tuple(plain(v) for v in q) if isinstance(q, list | tuple) else plain(q)
    quantile_fractions(given)
    qs: float | tuple[float, ...] = tuple(float(v) for v in given) if isinstance(given, tuple) else float(given)
    options: dict[str, Any] = {"q": qs}
    if resolution is not None:
        exact_resolution = plain(resolution)
        if isinstance(exact_resolution, int | Fraction) and not isinstance(exact_resolution, bool):   # in its text
            within_digits(Fraction(exact_resolution), "resolution", "resolution", "pass e.g. resolution=0.01")
        options["resolution"] = resolution
    numeric = isinstance(bounds, tuple | list) and all(
        isinstance(b, numbers.Real) and not isinstance(b, bool) for b in bounds)
    if bounds is not None and not numeric and isinstance(bounds, tuple | list):
        options["bounds"] = tuple(bounds)       # dates / datetimes: validated against the column's type
        name, expression = column_input(column)
        return Measure("quantile", name, None, tuple(sorted(options.items())), expression=expression)
    return _bounded("quantile", column, bounds, **options)


@checked
def median(column: Column, bounds: tuple[Any, Any] | None = None, resolution: Any = None) -> Measure:
    """The private median: ``quantile(column, 0.5, bounds=...)``, output ``<column>_median`` (``bounds`` required).

    Example:
        >>> median("age", bounds=(0, 120)).output_name
        'age_median'

    """
    if bounds is None:
        raise missing_bounds("median", column)       # named median, not quantile
    m = quantile(column, 0.5, bounds, resolution)
    return m.alias(f"{m.column}_median")
