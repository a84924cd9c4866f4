"""Python keys for privacy-unit ids: one key per unit, as the engine's unit equality groups them.

The per-unit interactive tools (the individual filter, per-unit target charging) keep state per unit in
Python dicts, keyed by the ids a statistics call grouped by the unit returns. Two things go wrong with the
ids as Polars hands them to Python:

* **NaN.** The engine groups every NaN id as one unit, but each NaN read from a frame is a new float, and
  ``NaN != NaN``: no dict lookup finds the key of an earlier query, so the NaN unit was a fresh unit at every
  query and never ran out of its budget (review 53h). Every NaN becomes the one :data:`NAN_ID` object, which
  dict and set lookups find by identity (``-0.0`` and ``0.0`` are already one key, as they are one unit).
* **Nested ids** (a list, array or struct unit column): a list is no dict key, and a query whose rows reached
  the tool failed with a ``TypeError`` after the charge, one that no row reached did not. :func:`check_keyable`
  refuses such a column before anything is read (the unit column's type is public).
* **Dates and times outside Python's range.** Polars stores dates and times about ±262,000 years from 1970;
  Python's ``datetime`` stops at year 9999, and converting a farther id raised (a Rust panic for some types)
  only when that unit reached the query — charged, and a failure that told whether it did. A temporal id is
  keyed by its physical integer (days, or ticks of its unit; one instant has one integer whatever its
  offset), which Python holds whatever its value.

:func:`unit_keys` turns the ids of a result into keys; :func:`unit_key_expr` computes the same keys in an
expression, to select the rows of given units (``unit_key_expr(c, dtype).is_in(keys)``: Polars' ``is_in``
matches a NaN key with NaN ids).

Example:
    >>> import datetime as dt
    >>> ids = pl.Series([float("nan"), float("nan"), -0.0, 0.0])
    >>> len(set(unit_keys(ids)))
    2
    >>> far = pl.Series([dt.date(1970, 1, 2)]).append(pl.Series([10**8], dtype=pl.Int32).cast(pl.Date))
    >>> unit_keys(far)
    [1, 100000000]
    >>> far.to_frame("u").select(unit_key_expr("u", far.dtype).is_in(unit_keys(far[1:])))["u"].to_list()
    [False, True]

"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from dpframe.errors import PlanError

NAN_ID = float("nan")
"""The one key of every NaN unit id (dict and set lookups find it by identity, NaN being unequal to itself)."""


def check_keyable(dtype: pl.DataType, what: str) -> None:
    """A :class:`PlanError` (before any read) when ``what`` cannot keep a record per unit of ids of type ``dtype``.

    Example:
        >>> check_keyable(pl.List(pl.Int64), "the individual filter")
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: query: the individual filter keeps a record per privacy unit, and cannot for ids of \
the nested type List(Int64)...

    """
    if dtype.is_nested():
        raise PlanError(f"{what} keeps a record per privacy unit, and cannot for ids of the nested type {dtype}",
                        argument="query", fix="register the unit ids as one plain column (e.g. text: "
                                              "pl.col('id').list.join('/') or .struct.json_encode()) for these tools")


def unit_key_expr(column: str, dtype: pl.DataType) -> pl.Expr:
    """The key of each row's unit id, as :func:`unit_keys` makes it: a temporal id's physical integer (Int64)."""
    if dtype.is_temporal():
        return pl.col(column).to_physical().cast(pl.Int64, strict=False)
    return pl.col(column)


def unit_keys(ids: pl.Series) -> list[Any]:
    """One hashable Python key per id in ``ids``: equal keys for the ids the engine counts as one unit."""
    if ids.dtype.is_temporal():
        return ids.to_physical().cast(pl.Int64, strict=False).to_list()
    values = ids.to_list()
    if ids.dtype.is_float():
        return [NAN_ID if isinstance(v, float) and math.isnan(v) else v for v in values]
    return values


__all__ = ["NAN_ID", "check_keyable", "unit_key_expr", "unit_keys"]
