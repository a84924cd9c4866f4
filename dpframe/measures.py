"""Measures: the private statistics a query asks for (``dp.len()``, ``dp.sum(...)``, ...).

A measure is a frozen description; it reads no data. The planner hands each measure to the mechanism
plugin that handles its ``kind`` (built-ins: ``len``, ``count``, ``sum``, ``mean``, ``var``, ``std``),
and that plugin decides which exact statistics the backend computes and how noise is added.

Nulls and NaN: ``dp.len()`` counts rows; ``dp.count(col)`` counts rows where ``col`` is neither null nor
NaN; ``sum``/``mean``/``var``/``std`` ignore null and NaN values (mean and variance divide by the noisy
count of non-null values); ±inf and out-of-range values are clamped to the bounds.

Example:
    >>> import dpframe as dp
    >>> dp.mean("spend", bounds=(0, 500)).output_name
    'spend_mean'
    >>> dp.len().alias("n").output_name
    'n'

"""

from __future__ import annotations

import builtins
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpframe.errors import BoundsError, DPFrameError

Bounds = tuple[Fraction, Fraction]


def check_bounds(bounds: object, argument: str = "bounds") -> Bounds:
    """Validate ``(lower, upper)`` clipping bounds: two finite numbers with lower < upper."""
    fix = "pass bounds=(lower, upper) with two finite numbers, lower < upper, chosen without looking at the data"
    if bounds is None:
        raise BoundsError("bounds are required", argument=argument, fix=fix)
    if not isinstance(bounds, tuple | list) or builtins.len(bounds) != 2:
        raise BoundsError(f"expected a pair (lower, upper), got {bounds!r}", argument=argument, fix=fix)
    out = []
    for b in bounds:
        if isinstance(b, numbers.Real) and not isinstance(b, bool | int | float | Fraction):
            b = float(b)  # numpy scalars
        if isinstance(b, bool) or not isinstance(b, int | float | Fraction):
            raise BoundsError(f"bound {b!r} is not a number", argument=argument, fix=fix)
        if isinstance(b, float) and not math.isfinite(b):
            raise BoundsError(f"bound {b} is not finite", argument=argument, fix=fix)
        out.append(Fraction(b))
    if out[0] >= out[1]:
        raise BoundsError(f"lower {bounds[0]} must be below upper {bounds[1]}", argument=argument, fix=fix)
    return out[0], out[1]


def _check_column(column: object) -> str:
    if not isinstance(column, str) or not column:
        raise DPFrameError(f"expected a column name, got {column!r}", argument="column",
                           fix="pass the column's name as a string")
    return column


@dataclass(frozen=True)
class Measure:
    """A private aggregate request: ``kind`` (routed to a mechanism plugin), column, bounds, options.

    Third-party plugins add kinds; build their measures with :func:`measure`.
    """

    kind: str
    column: str | None = None
    bounds: Bounds | None = None
    options: tuple[tuple[str, Any], ...] = ()
    name: str | None = None

    @property
    def output_name(self) -> str:
        """The released column's name (``len``, ``<col>_<kind>``, or the alias)."""
        if self.name is not None:
            return self.name
        return self.kind if self.column is None else f"{self.column}_{self.kind}"

    def alias(self, name: str) -> Measure:
        """The same measure released under another column name."""
        if not isinstance(name, str) or not name:
            raise DPFrameError(f"expected a non-empty string, got {name!r}", argument="name",
                               fix="pass the output column name")
        return replace(self, name=name)

    def option(self, key: str, default: Any = None) -> Any:
        """An option's value (options are stored as a sorted tuple so measures stay hashable)."""
        return dict(self.options).get(key, default)

    def describe(self) -> str:
        """Text such as ``mean(spend, bounds=[0, 500])``."""
        args = [] if self.column is None else [self.column]
        if self.bounds is not None:
            args.append(f"bounds=[{_num(self.bounds[0])}, {_num(self.bounds[1])}]")
        args += [f"{k}={v!r}" for k, v in self.options]
        return f"{self.kind}({', '.join(args)})"


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


def measure(kind: str, column: str | None = None, bounds: object = None, **options: Any) -> Measure:
    """Build a measure of any kind, e.g. one added by a third-party mechanism plugin.

    Example:
        >>> measure("histogram", "age", bounds=(0, 120), edges=(0, 18, 65, 120)).describe()
        'histogram(age, bounds=[0, 120], edges=(0, 18, 65, 120))'

    """
    if not isinstance(kind, str) or not kind:
        raise DPFrameError(f"expected a non-empty string, got {kind!r}", argument="kind",
                           fix="name the measure kind a mechanism plugin handles (see `dpframe plugins`)")
    col = None if column is None else _check_column(column)
    b = None if bounds is None else check_bounds(bounds)
    return Measure(kind, col, b, tuple(sorted(options.items())))


def len() -> Measure:  # noqa: A001  (mirrors polars' pl.len())
    """The number of rows (after contribution bounding), released with noise. Output column ``len``."""
    return Measure("len")


def count_units() -> Measure:
    """The number of distinct privacy units (e.g. users) per group. Output column ``count_units``.

    Used as a top-k score: adding or removing one unit changes every group's value by 0 or 1, however
    many groups the unit touches (``docs/topk.md``).
    """
    return Measure("count_units")


def count(column: str) -> Measure:
    """The number of rows whose ``column`` is neither null nor NaN. Output ``<column>_count``."""
    return Measure("count", _check_column(column))


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


def _clipped(kind: str, column: str, bounds: object, options: tuple[tuple[str, Any], ...] = ()) -> Measure:
    if isinstance(bounds, str) and bounds == AUTO_BOUNDS:
        return Measure(kind, _check_column(column), None, tuple(sorted((*options, ("bounds", AUTO_BOUNDS)))))
    return Measure(kind, _check_column(column), check_bounds(bounds), options)


def sum(column: str, bounds: tuple[float, float] | str) -> Measure:  # noqa: A001
    """The sum of ``column`` clamped to ``bounds`` (nulls/NaN ignored). Output ``<column>_sum``.

    ``bounds="auto"`` chooses the clipping range privately from a share of the query's budget
    (``docs/bounds.md``): the range whose clipping bias plus noise is smallest.
    """
    return _clipped("sum", column, bounds)


def mean(column: str, bounds: tuple[float, float] | str) -> Measure:
    """The mean of ``column`` clamped to ``bounds``: noisy centred sum / noisy count of values (or ``"auto"``)."""
    return _clipped("mean", column, bounds)


def var(column: str, bounds: tuple[float, float] | str, ddof: int = 1) -> Measure:
    """The variance of ``column`` clamped to ``bounds`` (``ddof=1``: sample variance, like polars; or ``"auto"``)."""
    if ddof not in (0, 1):
        raise DPFrameError(f"must be 0 or 1, got {ddof!r}", argument="ddof", fix="pass ddof=0 or ddof=1")
    return _clipped("var", column, bounds, (("ddof", ddof),))


def std(column: str, bounds: tuple[float, float] | str, ddof: int = 1) -> Measure:
    """The standard deviation: the square root of :func:`var`."""
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
        raise DPFrameError("no quantile probabilities given", argument=argument, fix=fix)
    out = []
    for v in items:
        if isinstance(v, numbers.Real) and not isinstance(v, bool | int | float | Fraction):
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, int | float | Fraction) or \
                (isinstance(v, float) and not math.isfinite(v)) or not 0 <= v <= 1:
            raise DPFrameError(f"quantile probabilities must be numbers in [0, 1], got {v!r}", argument=argument,
                               fix=fix)
        out.append(Fraction(v).limit_denominator(Q_DENOMINATOR))
    if builtins.len(set(out)) != builtins.len(out):
        raise DPFrameError(f"duplicate quantile probabilities in {items!r}", argument=argument,
                           fix="pass each probability once")
    return tuple(sorted(out))


def quantile(column: str, q: float | Sequence[float], bounds: tuple[Any, Any], resolution: Any = None) -> Measure:
    """The private q-quantile(s) of ``column`` on its public ordered domain (``docs/quantiles.md``).

    ``bounds=(lower, upper)`` are public clipping bounds (numbers; ``date``/``datetime`` for temporal
    columns); float columns are placed on a power-of-two grid (``resolution``, rounded down; default:
    at most 2³² grid points). Nulls and NaN are ignored. One ``q`` gives a Float64 column
    ``<column>_quantile`` (the column's type for dates); a list of ``q`` gives one list per group,
    released jointly (the recursive split of ``docs/quantiles.md``) in the order given, monotone in ``q``.

    Example:
        >>> quantile("age", [0.25, 0.75], bounds=(0, 120)).describe()
        'quantile(age, bounds=[0, 120], q=(0.25, 0.75))'

    """
    quantile_fractions(q)
    qs: float | tuple[float, ...] = tuple(float(v) for v in q) if isinstance(q, list | tuple) else float(q)  # type: ignore[arg-type]
    options: dict[str, Any] = {"q": qs}
    if resolution is not None:
        options["resolution"] = resolution
    numeric = isinstance(bounds, tuple | list) and all(
        isinstance(b, numbers.Real) and not isinstance(b, bool) for b in bounds)
    if bounds is not None and not numeric and isinstance(bounds, tuple | list):
        options["bounds"] = tuple(bounds)       # dates / datetimes: validated against the column's type
        return Measure("quantile", _check_column(column), None, tuple(sorted(options.items())))
    return Measure("quantile", _check_column(column), check_bounds(bounds), tuple(sorted(options.items())))


def median(column: str, bounds: tuple[Any, Any], resolution: Any = None) -> Measure:
    """The private median: ``quantile(column, 0.5, bounds=...)``, output ``<column>_median``.

    Example:
        >>> median("age", bounds=(0, 120)).output_name
        'age_median'

    """
    return quantile(column, 0.5, bounds, resolution).alias(f"{_check_column(column)}_median")
