"""``Frame.bounds``: private clipping bounds for analysts who do not know them (it spends visible budget).

Clipping bounds must be public, so they may not be read off the data; this helper *estimates* them
privately instead: a low and a high quantile (default the 1st and 99th percentile). Numeric columns
use a coarse relative grid and targets moved inwards by the rank error
(:mod:`dpframe_quantiles.grid_bounds`), so heavy-tailed data get a range near their central mass; dates
and datetimes use the quantile mechanism (:mod:`dpframe_quantiles.em`) jointly over a wide public
``domain`` (1900–2100 by default). The cost is the budget passed to ``collect``, charged like any other
query, and shown by ``explain``/``cost``; the returned pair may then be used as bounds of later queries
(post-processing: no further cost).

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"age": list(range(18, 90)) * 600})},
    ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2), seed=1)
    >>> low, high = sess.table("t").bounds("age").collect(dp.PureDP(1))
    >>> 10 < low <= 20 and 86 <= high < 95          # a 64-bit column: grid of 4, values count as the nearest point
    True

"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Literal

import polars as pl

from dpframe.aggregate import Aggregates
from dpframe.domains import MAX_SIZE, OrderedDomain, domain_kind
from dpframe.errors import ArgumentError, BoundsError, SchemaError, one_of
from dpframe.family import FamilyPlan, Source
from dpframe.measures import quantile, quantile_fractions
from dpframe_quantiles.grid_bounds import GridBoundsQuery

DATE_RANGE = (dt.date(1900, 1, 1), dt.date(2100, 12, 31))


def default_domain(column: str, dtype: pl.DataType) -> tuple[tuple[Any, Any], Any]:
    """The public domain and resolution used when none is given (raises for float columns)."""
    kind = domain_kind(column, dtype)
    if kind == "float":
        raise BoundsError(f"a float column needs domain=(lower, upper) for bounds({column!r})", argument="domain",
                          fix="pass a wide public range that surely holds the data, e.g. domain=(-1e9, 1e9)")
    if kind == "date":
        return DATE_RANGE, None
    if kind == "datetime":
        first, final = DATE_RANGE
        zone = dt.UTC if getattr(dtype, "time_zone", None) else None      # an aware column takes aware bounds
        return ((dt.datetime(first.year, 1, 1, tzinfo=zone), dt.datetime(final.year, 12, 31, 23, 59, 59, tzinfo=zone)),
                dt.timedelta(seconds=1))
    info = pl.select(pl.lit(0, dtype=dtype).lower_bound().alias("lo"), pl.lit(0, dtype=dtype).upper_bound().alias("hi"))
    lo, hi = max(int(info["lo"][0]), -(2**63)), min(int(info["hi"][0]), 2**63 - 1)
    codes = hi - lo + 1
    return (lo, hi), (None if codes <= MAX_SIZE else 2 ** math.ceil(math.log2(codes / MAX_SIZE)))


class BoundsQuery:
    """A private bounds estimate: one ``agg`` quantile query whose released pair becomes (low, high)."""

    def __init__(self, source: Source, column: str, *, domain: Any = None, quantiles: Any = (0.01, 0.99),
                 resolution: Any = None) -> None:
        if not isinstance(column, str) or column not in source.schema:
            raise SchemaError(f"unknown column {column!r}", argument="column", fix=one_of(column, source.schema))
        qs = _pair(quantiles)
        if domain is None:
            domain, default_resolution = default_domain(column, source.schema[column])
            resolution = default_resolution if resolution is None else resolution
        self.domain = OrderedDomain.of(column, source.schema[column], domain, resolution, rounding="nearest")  # free
        self._query = Aggregates().build(source, quantile(column, [float(q) for q in qs], bounds=domain,
                                                          resolution=resolution).alias(f"{column}_bounds"))
        self.column = column

    @property
    def backend(self) -> str | None:
        """The backend this query runs on (None: the session's)."""
        return self._query.backend

    def plan(self, budget: object) -> FamilyPlan[tuple[Any, Any]]:
        """The quantile query's plan; its run returns (low, high): ints for integer columns. Free."""
        inner = self._query.plan(budget)
        column, kind = self.column, self.domain.kind

        def run(reader: Any, rng: Any) -> tuple[Any, Any]:
            low, high = inner.run(reader, rng)[f"{column}_bounds"][0]
            if low is not None and low == high:
                low, high = self._widened(low)
            return (int(low), int(high)) if kind == "int" else (low, high)
        return dataclasses.replace(inner, run=run, settle=None)

    def _widened(self, value: Any) -> tuple[Any, Any]:
        """Both quantiles on one grid point: that point and the next one (the previous one at the domain's top).

        Post-processing of the released value: (d, d) is a range every later query refuses as bounds.
        """
        dom = self.domain
        code = int(dom.encode(pl.Series([value], dtype=dom.dtype))[0])
        code = min(code, dom.size - 2)
        return dom.decode(code), dom.decode(code + 1)

    def describe(self) -> str:
        """One line for the history."""
        return f"bounds({self.column}) on {self.domain.describe()} | {self._query.describe()}"


class Bounds:
    """The ``bounds`` query family: ``frame.bounds(column, ...)``."""

    name = "bounds"
    attach: Literal["frame", "group_by", "both"] = "frame"
    methods: tuple[str, ...] = ()
    result_types: Mapping[str, type] = MappingProxyType({})

    def build(self, source: Source, /, column: Any = None, *, domain: Any = None, quantiles: Any = (0.01, 0.99),
              resolution: Any = None) -> BoundsQuery | GridBoundsQuery:
        """Validate the arguments (free) and build the query: numeric columns on a relative grid."""
        if not isinstance(column, str) or column not in source.schema:
            raise SchemaError(f"unknown column {column!r}", argument="column", fix=one_of(column, source.schema))
        dtype = source.schema[column]
        if dtype.is_numeric() and not dtype.is_decimal():
            low, high = _pair(quantiles)
            return GridBoundsQuery(source, column, (low, high), domain, resolution)
        return BoundsQuery(source, column, domain=domain, quantiles=quantiles, resolution=resolution)


def _pair(quantiles: Any) -> tuple[Fraction, Fraction]:
    qs = quantile_fractions(quantiles, argument="quantiles")
    if len(qs) != 2:
        raise ArgumentError(f"expected two quantiles (low, high), got {quantiles!r}", argument="quantiles",
                            fix="pass e.g. quantiles=(0.01, 0.99)")
    return qs[0], qs[1]
