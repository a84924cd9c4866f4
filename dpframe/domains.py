"""Ordered domains: a public, data-independent encoding of a column into integers ``0 .. size − 1``.

Quantiles, interior points, thresholds and rectangles work on a finite, totally ordered domain. This
module turns a numeric or temporal column plus the analyst's *public* bounds (and, for floats, a
resolution) into one (digest ``003_thresholds_rsc.md`` §9.2): every value becomes the integer code

    ``code(x) = trunc((clamp(x, lo, hi) − o) / 2**g)``,   ``size = trunc((hi − o) / 2**g) + 1``

and a code decodes back to the grid point ``max(lo, o + code·2**g)``. The grid is **anchored on round
numbers**: its origin ``o = floor(lo / 2**g)·2**g`` is a multiple of the step, so the grid points are
the multiples of ``2**g`` inside the bounds (with ``resolution=1`` the whole numbers, whatever ``lo``
is), plus ``lo`` itself for the first cell when ``lo`` is not on the grid. Nothing here reads data.

**Cells.** A code stands for a *cell* of values. With ``rounding="down"`` (the default) the cell of
grid point ``p`` is ``[p, p + 2**g)``, so the grid points are the cells' lower edges — the natural
choice for classifiers, whose cuts then fall on grid points. With ``rounding="nearest"`` the codes are
``trunc((clamp(x) − lo + 2**(g−1)) / 2**g)`` (clipped to ``size − 1``): each value gets the code of its
nearest grid point, so the cell of ``p`` is ``[p − 2**(g−1), p + 2**(g−1))`` and a released grid point
sits in the middle of the values it stands for — the choice for point outputs (quantiles, interior
points). On an integer grid of step 1 both are the identity. Either way a value *on* the grid decodes
back to itself. :meth:`OrderedDomain.edge` gives the exact lower edge of a cell (the smallest value
whose code reaches it), and :meth:`OrderedDomain.at_least` the exact Polars predicate
``code(x) ≥ c`` — the same map as the backends' float64 arithmetic, value for value.

* **int** columns: ``lo``/``hi`` integers, ``g = 0`` unless an integer ``resolution`` coarsens the grid.
* **float** columns: ``2**g`` is the ``resolution`` rounded *down* to a power of two (so the grid is never
  coarser than asked); without one, the finest power-of-two grid with at most 2³² codes. ±inf clamp to
  the bounds; −0.0 and +0.0 get the same code; **NaN and null are dropped** (they are not values).
* **date** columns: days since 1970-01-01 (bounds are ``datetime.date``); **datetime** columns: the
  column's integer time unit since the epoch (bounds are ``datetime.datetime``, time-zone aware exactly
  when the column has a time zone; ``resolution`` may be a ``datetime.timedelta``).

The backends compute the codes of a column as the ``"sorted"`` :class:`~dpframe.mechanism.Statistic`
(:attr:`OrderedDomain.statistic`); :meth:`OrderedDomain.encode` is the same map in NumPy.

Example:
    >>> import polars as pl
    >>> d = OrderedDomain.of("x", pl.Float64, (0, 1), resolution=0.3)   # grid 2**-2 = 0.25
    >>> d.size, d.encode(pl.Series([0.3, -5.0, 0.99, float("nan")])).tolist(), d.decode(3)
    (5, [1, 0, 3], 0.75)
    >>> d.statistic.key
    '__sorted:x:[0,1]-0@2^-2'

"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, TypeVar, get_args

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.accounting.checks import shown
from dpframe.errors import BoundsError, SchemaError
from dpframe.measures import FLOAT64_MAX, check_bounds
from dpframe.mechanism import Statistic
from dpframe.sealed import plain

DomainKind = Literal["int", "float", "date", "datetime"]
Rounding = Literal["down", "nearest"]

MAX_SIZE = 2**62
"""The largest supported domain: codes (and code differences) stay well inside Int64."""

DEFAULT_FLOAT_CODES = 2**32
"""Without a resolution, a float domain gets the finest power-of-two grid with at most this many codes."""

MAX_FLOAT_WIDTH = Fraction(2) ** 1000
"""Float bounds must be closer than this (their difference, and every code computation, stays finite in float64)."""

MIN_GRID_EXP = -1000
"""The finest float grid, 2⁻¹⁰⁰⁰ (coarser than float64's subnormals, so scaling by 2**-g stays exact)."""

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_PER_SECOND = {"ns": 10**9, "us": 10**6, "ms": 10**3}


def _key_of(y: float) -> int:
    """An integer that orders float64 values like the values themselves (−0.0 and 0.0 share 0)."""
    bits = int(np.float64(y).view(np.int64))
    return bits if bits >= 0 else -(bits & (2**63 - 1))


def _float_of(key: int) -> float:
    """The inverse of :func:`_key_of`."""
    bits = key if key >= 0 else (-key) | -(2**63)
    return float(np.int64(bits).view(np.float64))


def domain_kind(column: str, dtype: pl.DataType) -> DomainKind:
    """The domain kind of a column type, or a :class:`SchemaError` naming the column."""
    if dtype == pl.Date:
        return "date"
    if isinstance(dtype, pl.Datetime):
        return "datetime"
    if dtype.is_integer():
        return "int"
    if dtype.is_float():
        return "float"
    raise SchemaError(f"column {column!r} has type {dtype}; an ordered domain needs an integer, float, date or "
                      "datetime column", argument=column, fix="cast it (e.g. pl.col(...).cast(pl.Float64)) or pick "
                      "another column")


def _ticks(value: dt.datetime, dtype: pl.Datetime) -> int:
    """A datetime as an integer count of the column's time unit since the epoch (exact)."""
    unit = dtype.time_unit or "us"
    if dtype.time_zone is None:
        delta = value - _EPOCH
    else:
        delta = value - _EPOCH.replace(tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * _PER_SECOND[unit] + delta.microseconds * _PER_SECOND[unit] // 10**6


def _temporal_bounds(column: str, kind: DomainKind, dtype: pl.DataType, bounds: object) -> tuple[int, int]:
    argument = f"bounds[{column!r}]"
    if kind == "date":
        ok = isinstance(bounds, tuple | list) and len(bounds) == 2 and all(
            isinstance(b, dt.date) and not isinstance(b, dt.datetime) for b in bounds)
        if not ok:
            raise BoundsError(f"a date column needs bounds=(date, date), got {bounds!r}", argument=argument,
                              fix="pass e.g. (datetime.date(2000, 1, 1), datetime.date(2030, 12, 31))")
        assert isinstance(bounds, tuple | list)
        return (bounds[0] - _EPOCH_DATE).days, (bounds[1] - _EPOCH_DATE).days
    assert isinstance(dtype, pl.Datetime)
    aware = dtype.time_zone is not None
    ok = isinstance(bounds, tuple | list) and len(bounds) == 2 and all(
        isinstance(b, dt.datetime) and (b.tzinfo is not None) == aware for b in bounds)
    if not ok:
        zone = "time-zone-aware" if aware else "naive"
        raise BoundsError(f"a {dtype} column needs bounds=(datetime, datetime), both {zone}, got {bounds!r}",
                          argument=argument, fix="pass e.g. (datetime.datetime(2020, 1, 1), "
                          "datetime.datetime(2025, 1, 1))" + (", tzinfo=datetime.UTC" if aware else ""))
    assert isinstance(bounds, tuple | list)
    return _ticks(bounds[0], dtype), _ticks(bounds[1], dtype)


def floor_log2(x: Fraction) -> int:
    """⌊log₂ x⌋ of a positive rational, exactly (a float log2 is off at powers of two and 0 for subnormals).

    Example:
        >>> floor_log2(Fraction(1, 3)), floor_log2(Fraction(8)), floor_log2(Fraction(10**-320))
        (-2, 3, -1064)

    """
    g = x.numerator.bit_length() - x.denominator.bit_length()
    return g if Fraction(2) ** g <= x else g - 1


def grid_origin(lower: Fraction, grid_exp: int) -> Fraction:
    """The grid's origin: ``lower`` rounded down to a multiple of ``2**grid_exp`` (grid points are round).

    Example:
        >>> grid_origin(Fraction("-4.3"), 0), grid_origin(Fraction("12.34"), -2), grid_origin(Fraction(3), 0)
        (Fraction(-5, 1), Fraction(49, 4), Fraction(3, 1))

    """
    step = Fraction(2) ** grid_exp
    return math.floor(lower / step) * step


def _grid_exponent(kind: DomainKind, dtype: pl.DataType, lo: Fraction, hi: Fraction, resolution: object) -> int:
    """The exponent g with 2**g = ``resolution`` rounded down to a power of two (default: see module docstring)."""
    fix = "pass a positive finite number, e.g. resolution=0.01" if kind == "float" else \
        "pass a positive whole number of units" + (" or a datetime.timedelta" if kind == "datetime" else "")
    if resolution is None:
        if kind != "float":
            return 0
        g = floor_log2((hi - lo) / DEFAULT_FLOAT_CODES)
        while (hi - grid_origin(lo, g)) / Fraction(2) ** g >= DEFAULT_FLOAT_CODES:   # exact: ≤ 2**32 codes
            g += 1
        return g
    resolution = plain(resolution)
    if kind == "datetime" and isinstance(resolution, dt.timedelta):
        assert isinstance(dtype, pl.Datetime)
        micros = (resolution.days * 86_400 + resolution.seconds) * 10**6 + resolution.microseconds
        resolution = Fraction(micros * _PER_SECOND[dtype.time_unit or "us"], 10**6)
    if isinstance(resolution, bool) or not isinstance(resolution, int | float | Fraction) \
            or (isinstance(resolution, float) and not math.isfinite(resolution)) or not 0 < resolution <= FLOAT64_MAX:
        raise BoundsError(f"resolution must be a positive finite number, got {shown(resolution)}",
                          argument="resolution", fix=fix)
    r = Fraction(resolution)
    if kind != "float" and r < 1:
        raise BoundsError(f"the resolution of a {kind} column is at least one unit, got {resolution!r}",
                          argument="resolution", fix=fix)
    return floor_log2(r)


IntValues = TypeVar("IntValues", pl.Expr, pl.Series)

INT128_MAX = 2**127 - 1
"""The largest Int128: a ``UInt128`` value beyond it is clamped to it before the exact Int128 arithmetic below."""


def exact_int128(values: IntValues, dtype: pl.DataType) -> IntValues:
    """Integer ``values`` (an expression or a Series of ``dtype``) as Int128, for clamping to integer bounds.

    Exact where the value fits in Int128; a ``UInt128`` value past 2¹²⁷ − 1 is first clamped to 2¹²⁷ − 1 in its own
    type. Integer bounds fit in Int64, so the clamp to them that follows gives what clamping the value itself would,
    and the cast never fails: a strict cast of such a value failed the query after its charge, on that row only
    (review 54e).

    Example:
        >>> x = pl.Series([3, 2**128 - 1], dtype=pl.UInt128)
        >>> exact_int128(x, x.dtype).clip(0, 100).to_list()
        [3, 100]

    """
    if dtype == pl.UInt128:
        values = values.clip(upper_bound=pl.lit(INT128_MAX, dtype=pl.UInt128))
    return values.cast(pl.Int128)


@dataclass(frozen=True)
class OrderedDomain:
    """The public ordered domain of one column: its kind, bounds (as numbers), grid ``2**grid_exp`` and size.

    For dates and datetimes, ``lower``/``upper`` are in the column's integer representation (days, or
    time units since the epoch). Build it with :meth:`of`, which validates everything.
    """

    column: str
    kind: DomainKind
    lower: Fraction
    upper: Fraction
    grid_exp: int
    size: int
    dtype: pl.DataType
    rounding: Rounding = "down"

    @classmethod
    def of(cls, column: str, dtype: pl.DataType, bounds: object, resolution: object = None,
           rounding: Rounding = "down") -> OrderedDomain:
        """Validate the column type, bounds and resolution (raising a dpframe error) and build the domain.

        ``rounding`` (public, chosen by the caller): ``"down"`` or ``"nearest"`` (see the module docstring).

        Example:
            >>> OrderedDomain.of("age", pl.Int64, (0, 120)).size
            121
            >>> nearest = OrderedDomain.of("x", pl.Float64, (0, 1), 0.25, rounding="nearest")
            >>> nearest.encode(pl.Series([0.3, 0.4])).tolist()
            [1, 2]

        """
        kind = domain_kind(column, dtype)
        argument = f"bounds[{column!r}]"
        if kind in ("date", "datetime"):
            lo_i, hi_i = _temporal_bounds(column, kind, dtype, bounds)
            if lo_i >= hi_i:
                raise BoundsError(f"lower bound {bounds[0]!r} must be before the upper bound {bounds[1]!r}",  # type: ignore[index]
                                  argument=argument, fix="pass (earliest, latest)")
            lo, hi = Fraction(lo_i), Fraction(hi_i)
        else:
            lo, hi = check_bounds(bounds, argument=argument)
            if kind == "int" and (lo.denominator != 1 or hi.denominator != 1):
                raise BoundsError(f"bounds of the integer column {column!r} must be whole numbers, got {bounds!r}",
                                  argument=argument, fix="pass integers, e.g. (0, 120)")
            if kind == "int" and not (-(2**63) <= lo and hi < 2**63):
                raise BoundsError(f"bounds {bounds!r} of the integer column {column!r} do not fit in Int64",
                                  argument=argument, fix="pass bounds within ±9.2e18")
            if kind == "float" and hi - lo >= MAX_FLOAT_WIDTH:
                raise BoundsError(f"bounds ({float(lo):g}, {float(hi):g}) of {column!r} are too far apart: upper − "
                                  "lower must stay below "
                                  "2^1000 ≈ 1.1e301 so the codes can be computed in float64", argument=argument,
                                  fix="pass narrower bounds, e.g. (-1e300, 1e300)")
        if rounding not in get_args(Rounding):
            raise ValueError(f"rounding must be 'down' or 'nearest', got {rounding!r}")
        g = _grid_exponent(kind, dtype, lo, hi, resolution)
        if kind == "float" and g < MIN_GRID_EXP:
            raise BoundsError(f"the grid 2^{g} of {column!r} is finer than the supported 2^{MIN_GRID_EXP}",
                              argument="resolution" if resolution is not None else argument,
                              fix="pass a coarser resolution=" if resolution is not None else
                              "pass bounds at least 2^-968 ≈ 4e-292 apart (rescale the column if needed)")
        size = math.floor((hi - grid_origin(lo, g)) / Fraction(2) ** g) + 1
        if size > MAX_SIZE:
            raise BoundsError(f"bounds {bounds!r} give {size} codes for {column!r}, more than the {MAX_SIZE} (2^62) "
                              "an Int64 code supports", argument=argument,
                              fix="narrow the bounds or pass a coarser resolution=")
        return cls(column, kind, lo, hi, g, size, dtype, rounding)

    @property
    def step(self) -> Fraction:
        """The grid step ``2**grid_exp`` (in the column's units)."""
        return Fraction(2) ** self.grid_exp

    @property
    def origin(self) -> Fraction:
        """Where the grid starts: ``lower`` rounded down to a multiple of the step (``lower`` when on the grid)."""
        return grid_origin(self.lower, self.grid_exp)

    @property
    def bounds(self) -> tuple[Any, Any]:
        """The public bounds as column values (what values are clamped to)."""
        return self._decode_number(self.lower), self._decode_number(self.upper)

    @property
    def shift(self) -> Fraction:
        """What the codes subtract before scaling: ``origin``, or ``origin − step/2`` for ``rounding="nearest"``.

        (On an integer grid of step 1 nearest rounding is the identity, so the shift stays ``origin``.)
        """
        if self.rounding == "nearest" and (self.kind == "float" or self.grid_exp > 0):
            return self.origin - self.step / 2
        return self.origin

    @property
    def statistic(self) -> Statistic:
        """The backend statistic giving each group's sorted codes: ``Statistic("sorted", ...)``.

        The backends do not clip to ``size − 1`` (nearest rounding can reach ``size`` at the upper
        bound); consumers clip, as :meth:`encode` does.
        """
        return Statistic("sorted", self.column, self.lower, self.upper, shift=self.shift, grid_exp=self.grid_exp)

    def encode(self, values: pl.Series) -> npt.NDArray[np.int64]:
        """The codes of ``values`` (null and NaN dropped), in input order: the backends' map, in NumPy.

        Example:
            >>> OrderedDomain.of("n", pl.Int64, (10, 20)).encode(pl.Series([5, 12, None, 99])).tolist()
            [0, 2, 10]

        """
        if self.kind == "float":
            x = values.cast(pl.Float64).drop_nulls().drop_nans().to_numpy()
            scaled = (np.clip(x, float(self.lower), float(self.upper)) - float(self.shift)) * 2.0 ** -self.grid_exp
            codes: npt.NDArray[np.int64] = np.minimum(np.trunc(scaled).astype(np.int64), self.size - 1)
            return codes
        present = values.drop_nulls()
        ints = present.cast(pl.Int64).cast(pl.Int128) if self.kind in ("date", "datetime") else \
            exact_int128(present, present.dtype)
        # exact in Int128 (clamped − shift ≥ 0 can exceed Int64 on a 64-bit range), then floor division by the step
        shifted = ints.clip(int(self.lower), int(self.upper)) - pl.Series([int(self.shift)], dtype=pl.Int128)
        codes = (shifted // (2**self.grid_exp)).cast(pl.Int64).to_numpy()
        return np.minimum(np.asarray(codes, dtype=np.int64), self.size - 1)

    def edge(self, code: int) -> Any:
        """The lower edge of cell ``code`` as a column value: the smallest value ``x`` with ``code(x) ≥ code``.

        ``code ≤ 0`` gives ``lower`` and ``code ≥ size`` a value above ``upper`` (no value of the domain
        reaches it). Exact: float edges are found in the same float64 arithmetic as the codes (a
        datetime with nanoseconds is shown to the microsecond; :meth:`at_least` stays exact).

        Example:
            >>> d = OrderedDomain.of("x", pl.Float64, (0, 1), resolution=0.25)
            >>> [d.edge(c) for c in (0, 2, 5)]
            [0.0, 0.5, 1.25]
            >>> OrderedDomain.of("x", pl.Float64, (0, 1), 0.25, rounding="nearest").edge(2)
            0.375

        """
        number = self._edge_number(code)
        if self.kind == "float":
            return number
        return self._decode_number(Fraction(number))

    def at_least(self, code: int) -> pl.Expr:
        """The Polars predicate ``code(x) ≥ code`` on the column: exact, null for null (and NaN) values.

        Values are clamped to the bounds first, exactly as when they were encoded, so the predicate
        agrees with :meth:`encode` (and the backends) on every input.

        Example:
            >>> d = OrderedDomain.of("x", pl.Float64, (0, 1), resolution=0.25)
            >>> pl.DataFrame({"x": [0.49, 0.5, 7.0, -1.0, None]}).select(d.at_least(2)).to_series().to_list()
            [False, True, True, False, None]

        """
        col = pl.col(self.column)
        if self.kind == "float":
            v = col.cast(pl.Float64)
            test = v.clip(float(self.lower), float(self.upper)) >= self._edge_number(code)
            return pl.when(v.is_nan()).then(None).otherwise(test)
        v = exact_int128(col, self.dtype) if self.kind == "int" else col.cast(pl.Int64)
        return v.clip(int(self.lower), int(self.upper)) >= pl.lit(int(self._edge_number(code)), dtype=pl.Int128)

    def _edge_number(self, code: int) -> int | float:
        """:meth:`edge` in the column's numeric representation (an int, or a float64 for float columns)."""
        if self.kind != "float":
            if code <= 0:
                return int(self.lower)
            if code >= self.size:
                return max(int(self.shift + code * self.step), int(self.upper) + 1)
            return max(int(self.lower), math.ceil(self.shift + code * self.step))
        lo, hi = float(self.lower), float(self.upper)
        if code <= 0:
            return lo
        if code >= self.size:
            beyond = float(self.origin + code * self.step)
            return beyond if beyond > hi else math.nextafter(hi, math.inf)
        shift, target = float(self.shift), code * self.step

        def reaches(key: int) -> bool:     # code(y) ≥ code for the float y of this key, in the encoder's arithmetic
            return Fraction(_float_of(key) - shift) >= target

        # y ↦ fl(y − shift) is monotone, so bisect over the floats in order (≤ 64 steps): the first that reaches
        low, high = _key_of(lo), _key_of(math.inf)
        if reaches(low):
            return lo
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if reaches(mid) else (mid, high)
        return _float_of(high)

    def value(self, code: int) -> Fraction:
        """The exact number a code stands for: ``max(lower, origin + code·2**grid_exp)`` (codes clamped)."""
        return max(self.lower, self.origin + min(max(int(code), 0), self.size - 1) * self.step)

    def decode(self, code: int) -> Any:
        """The column value of a code: an int, float, ``date`` or ``datetime``.

        Example:
            >>> import datetime as dt
            >>> OrderedDomain.of("d", pl.Date, (dt.date(2024, 1, 1), dt.date(2024, 12, 31))).decode(59)
            datetime.date(2024, 2, 29)

        """
        return self._decode_number(self.value(code))

    def _decode_number(self, v: Fraction) -> Any:
        """A number in the column's representation as a column value (int, float, date or datetime)."""
        if self.kind == "float":
            return float(v)
        if self.kind == "int":
            return int(v)
        if self.kind == "date":
            return _EPOCH_DATE + dt.timedelta(days=int(v))
        assert isinstance(self.dtype, pl.Datetime)
        unit = self.dtype.time_unit or "us"
        seconds, rest = divmod(int(v), _PER_SECOND[unit])
        out = _EPOCH + dt.timedelta(seconds=seconds, microseconds=rest * 10**6 // _PER_SECOND[unit])
        return out if self.dtype.time_zone is None else out.replace(tzinfo=dt.UTC)

    def decode_series(self, codes: npt.ArrayLike, name: str) -> pl.Series:
        """Decode many codes into a Series (Float64 for numeric columns, the column's type for dates)."""
        c = np.clip(np.asarray(codes, dtype=np.int64), 0, self.size - 1)
        if self.kind == "int":   # exact in int64 (the value lies within the Int64 bounds), then Float64
            ints = np.maximum(int(self.origin) + c * int(self.step), int(self.lower))
            return pl.Series(name, ints, dtype=pl.Int64).cast(pl.Float64)
        if self.kind == "float":  # origin + code·2^g in float64 (exact: a multiple of the step), at least lower
            points = np.maximum(float(self.origin) + c.astype(np.float64) * float(self.step), float(self.lower))
            return pl.Series(name, points, dtype=pl.Float64)
        return pl.Series(name, [self.decode(int(x)) for x in c], dtype=self.dtype)

    def describe(self) -> str:
        """Text such as ``x: 2^32 codes on [0, 1], grid 2^-32``."""
        grid = f", grid 2^{self.grid_exp}" if self.grid_exp else ""
        return f"{self.column}: {self.size} codes on [{self.decode(0)}, {self.decode(self.size - 1)}]{grid}"
