"""Public ordered integer domains for learning queries: clamp to public bounds, then a power-of-two grid.

``code(x) = trunc((clamp(x, lo, hi) − lo) / 2**g)`` on ``[0, size)`` with ``size = trunc((hi − lo)/2**g) + 1``;
``value(code) = lo + code·2**g``. Integer and date columns use ``g = 0`` (every value is a code);
float columns use the finest power-of-two grid with at most 2³² codes unless a ``resolution`` is given.
Everything here depends only on the schema and the user's bounds, never on the data.

Example:
    >>> import polars as pl
    >>> d = Domain.of("x", pl.Float64, (0, 1), resolution=0.25)
    >>> d.size, d.encode(pl.Series([0.3, -5.0, 0.99])).tolist(), d.decode(3)
    (5, [1, 0, 3], 0.75)

"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.errors import BoundsError, SchemaError
from dpframe.measures import check_bounds

MAX_CODES = 2**62
_EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True)
class Domain:
    """The ordered domain of one feature column: its kind, public bounds and grid."""

    column: str
    kind: str            # "int", "float" or "date"
    lower: Fraction
    upper: Fraction
    grid_exp: int
    size: int

    @classmethod
    def of(cls, column: str, dtype: pl.DataType, bounds: object, resolution: float | None = None) -> Domain:
        """Validate the column type and bounds (raising a dpframe error) and build the domain."""
        if dtype == pl.Date:
            kind = "date"
            if (not isinstance(bounds, tuple | list) or len(bounds) != 2
                    or not all(isinstance(b, dt.date) and not isinstance(b, dt.datetime) for b in bounds)):
                raise BoundsError(f"a date column needs bounds=(date, date), got {bounds!r}",
                                  argument=f"bounds[{column!r}]", fix="pass e.g. (date(2000, 1, 1), date(2030, 1, 1))")
            bounds = tuple((b - _EPOCH).days for b in bounds)
        elif dtype.is_integer():
            kind = "int"
        elif dtype.is_float():
            kind = "float"
        else:
            raise SchemaError(f"column {column!r} has type {dtype}; learning needs an int, float or date feature",
                              argument=column, fix="cast it to a number, or pick a numeric column")
        lo, hi = check_bounds(bounds, argument=f"bounds[{column!r}]")
        if kind != "float" and (lo.denominator != 1 or hi.denominator != 1):
            raise BoundsError(f"bounds of the integer column {column!r} must be integers, got {bounds!r}",
                              argument=f"bounds[{column!r}]", fix="pass whole numbers")
        if resolution is not None and kind != "float":
            raise BoundsError("resolution applies to float columns only", argument="resolution",
                              fix="drop resolution= for int and date columns")
        g = 0
        if kind == "float":
            if resolution is None:
                g = math.ceil(math.log2(float(hi - lo) / (2**32 - 1)))
            elif isinstance(resolution, bool) or not isinstance(resolution, int | float) or not resolution > 0 \
                    or not math.isfinite(resolution):
                raise BoundsError(f"resolution must be a positive number, got {resolution!r}",
                                  argument="resolution", fix="pass e.g. resolution=0.01")
            else:
                g = math.floor(math.log2(resolution))
        size = int((hi - lo) / Fraction(2) ** g) + 1
        if size > MAX_CODES:
            raise BoundsError(f"bounds {bounds!r} give {size} codes, more than the {MAX_CODES} supported",
                              argument=f"bounds[{column!r}]", fix="narrow the bounds or coarsen the resolution")
        return cls(column, kind, lo, hi, g, size)

    @property
    def step(self) -> Fraction:
        """The grid step 2**g."""
        return Fraction(2) ** self.grid_exp

    def encode(self, values: pl.Series) -> npt.NDArray[np.int64]:
        """Codes of (non-null, non-NaN) values: clamp to the bounds, shift, truncate onto the grid."""
        if self.kind == "date":
            values = values.cast(pl.Int32)
        if self.kind == "float":
            x = np.clip(values.cast(pl.Float64).to_numpy(), float(self.lower), float(self.upper))
            scaled = (x - float(self.lower)) * 2.0 ** (-self.grid_exp)
            codes: npt.NDArray[np.int64] = np.clip(np.trunc(scaled), 0, self.size - 1).astype(np.int64)
            return codes
        x = values.clip(int(self.lower), int(self.upper)).cast(pl.Int64).to_numpy()
        shifted: npt.NDArray[np.int64] = (x - int(self.lower)).astype(np.int64)
        return shifted

    def decode(self, code: int) -> Any:
        """The value of a code (codes just outside [0, size) decode one grid step beyond the bounds)."""
        value = self.lower + code * self.step
        if self.kind == "date":
            return _EPOCH + dt.timedelta(days=int(value))
        if self.kind == "int":
            return int(value)
        return float(value)

    def describe(self) -> str:
        grid = f", grid 2^{self.grid_exp}" if self.kind == "float" else ""
        return f"{self.column}: {self.size} codes ({self.kind} [{self.decode(0)}, {self.decode(self.size - 1)}]{grid})"
