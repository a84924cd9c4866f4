"""The Spark backend's exact statistics, written as Spark SQL expressions.

Each aggregate is one SQL text that the driver hands to Spark once (``F.expr``): building the same
expression from PySpark ``Column`` operators costs one Py4J round trip per operator (about 300 per query
for a mean), which is most of the time of a small query. The definitions are those of
:class:`~dpframe.mechanism.Statistic`, as on the other backends: NULL and NaN are not values; a
``fixed_sum`` casts to DOUBLE, clamps, shifts, raises to ``power``, scales onto the 2^grid_exp grid and
truncates toward zero (``CAST(... AS BIGINT)``, which cannot fail: terms are bounded, and clipped to
±SUM_LIMIT where their public bound allows more), then sums — a 64-bit ``sum``, exact where the group's
row count proves it cannot leave 64 bits (the backend checks, and otherwise runs the query again), or with
``wide`` a DECIMAL(38,0) sum clipped to ±SUM_LIMIT; a ``sorted`` code is exact (DECIMAL) for non-float
columns.

Example:
    >>> from fractions import Fraction
    >>> schema = pl.Schema({"x": pl.Float64})
    >>> aggregate(Statistic("nonnull", "x"), None, schema)
    'count(CASE WHEN (`x` IS NOT NULL AND NOT isnan(`x`)) THEN 1 END) AS `__nonnull:x`'

"""

from __future__ import annotations

from fractions import Fraction

import polars as pl

from dpframe.mechanism import SUM_LIMIT, Statistic


def ident(column: str) -> str:
    """A Spark SQL identifier (backquoted)."""
    return "`" + column.replace("`", "``") + "`"


def double(value: float | Fraction) -> str:
    """An exact DOUBLE literal (Java parses Python's round-trip repr to the same double)."""
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def decimal(value: int) -> str:
    """An exact DECIMAL(38,0) literal."""
    return f"CAST('{int(value)}' AS DECIMAL(38,0))"


def bigint(value: int) -> str:
    """An exact BIGINT literal (a plain ``-9223372036854775808`` would parse as a DECIMAL)."""
    return f"CAST('{int(value)}' AS BIGINT)"


def present(column: str, schema: pl.Schema) -> str:
    """True where ``column`` holds a value (neither NULL nor NaN)."""
    col = ident(column)
    return f"({col} IS NOT NULL AND NOT isnan({col}))" if schema[column].is_float() else f"{col} IS NOT NULL"


def aggregate(stat: Statistic, unit: str | None, schema: pl.Schema, wide: bool = False) -> str:
    """The aggregate computing ``stat`` exactly, as ``<expression> AS <key>`` (see the module docstring)."""
    key = ident(stat.key)
    if stat.kind == "rows":
        return f"count(1) AS {key}"
    if stat.kind == "units":
        return f"count(DISTINCT {ident(unit)}) AS {key}" if unit else f"count(1) AS {key}"
    assert stat.column is not None
    col, is_value = ident(stat.column), present(stat.column, schema)
    if stat.kind == "nonnull":
        return f"count(CASE WHEN {is_value} THEN 1 END) AS {key}"
    if stat.kind == "distinct":
        return f"count(DISTINCT CASE WHEN {is_value} THEN {col} END) AS {key}"
    assert stat.lower is not None and stat.upper is not None
    if stat.kind == "sorted":
        return f"sort_array(collect_list({code(stat, schema)})) AS {key}"
    value, lo, hi = f"CAST({col} AS DOUBLE)", double(stat.lower), double(stat.upper)
    if stat.kind == "indicator_sum":
        return f"count(CASE WHEN {is_value} AND {value} >= {lo} AND {value} < {hi} THEN 1 END) AS {key}"
    shifted = f"least(greatest({value}, {lo}), {hi})"
    if stat.shift:
        shifted = f"({shifted} - {double(stat.shift)})"
    powered = " * ".join([shifted] * stat.power)
    if stat.grid_exp:
        powered = f"({powered}) * {double(2.0 ** (-stat.grid_exp))}"
    if 2 * stat.row_bound() > SUM_LIMIT:   # public: only then can a term exceed the limit
        limit = double(SUM_LIMIT)
        powered = (f"CASE WHEN {powered} > {limit} THEN {limit} WHEN {powered} < -{limit} THEN -{limit} "
                   f"ELSE {powered} END")
    term = f"CASE WHEN {is_value} THEN CAST({powered} AS BIGINT) END"
    if wide:
        bound, zero = decimal(SUM_LIMIT), decimal(0)
        total = f"coalesce(sum(CAST({term} AS DECIMAL(38,0))), {zero})"
        return f"CAST(least(greatest({total}, -{bound}), {bound}) AS BIGINT) AS {key}"
    return f"coalesce(sum({term}), CAST(0 AS BIGINT)) AS {key}"


def code(stat: Statistic, schema: pl.Schema) -> str:
    """The ``sorted`` code of a row (NULL for NULL/NaN): floats in DOUBLE, the rest exactly in DECIMAL."""
    assert stat.column is not None and stat.lower is not None and stat.upper is not None
    col, dtype = ident(stat.column), schema[stat.column]
    if dtype.is_float():
        value = f"least(greatest(CAST({col} AS DOUBLE), {double(stat.lower)}), {double(stat.upper)})"
        if stat.shift:
            value = f"({value} - {double(stat.shift)})"
        if stat.grid_exp:
            value = f"{value} * {double(2.0 ** (-stat.grid_exp))}"
        return f"CASE WHEN {present(stat.column, schema)} THEN CAST({value} AS BIGINT) END"
    if dtype == pl.Date:
        number = f"unix_date({col})"
    elif isinstance(dtype, pl.Datetime):
        unit = {"ms": "MILLISECOND", "us": "MICROSECOND"}[dtype.time_unit or "us"]
        if dtype.time_zone:
            number = f"unix_{'millis' if unit == 'MILLISECOND' else 'micros'}({col})"
        else:
            number = f"timestampdiff({unit}, CAST('1970-01-01 00:00:00' AS TIMESTAMP_NTZ), {col})"
    elif isinstance(dtype, pl.Decimal):   # toward zero, as Polars (Spark's cast rounds half up)
        number = f"CASE WHEN {col} >= 0 THEN floor({col}) ELSE ceil({col}) END"
    else:
        number = col
    number = f"CAST({number} AS DECIMAL(38,0))"
    # exact; may exceed 64 bits before the division
    coded = f"(least(greatest({number}, {decimal(int(stat.lower))}), {decimal(int(stat.upper))}) - " \
            f"{decimal(int(stat.shift))})"
    if stat.grid_exp > 0:  # division by 2**grid_exp toward zero, exactly in DECIMAL: floor, plus 1 below zero
        step = decimal(2**stat.grid_exp)
        rest = f"pmod({coded}, {step})"
        floor = f"CAST(({coded} - {rest}) / {step} AS BIGINT)"
        coded = f"CASE WHEN {coded} < 0 AND {rest} != 0 THEN {floor} + 1 ELSE {floor} END"
    elif stat.grid_exp < 0:  # a grid finer than 1: an integer is on it, times 2**-grid_exp (the step once read 0)
        coded = f"({coded} * {decimal(2**-stat.grid_exp)})"
    return f"CASE WHEN {col} IS NOT NULL THEN CAST({coded} AS BIGINT) END"


def window_aggregates(stat: Statistic, schema: pl.Schema, ends: list[tuple[int, int]], seen: bool) -> list[str]:
    """A partial ``sorted`` statistic's aggregates: its count, #{code < lo} per window, the codes inside one.

    Named as :class:`~dpframe.backends.polars_windows.RankWindows` expects them; with ``seen``, rows of a
    group the sample missed (``__dp_seen`` NULL) list all their codes.

    Example:
        >>> from fractions import Fraction
        >>> stat = Statistic("sorted", "x", Fraction(0), Fraction(9), near=(Fraction(1, 2),))
        >>> window_aggregates(stat, pl.Schema({"x": pl.Int64}), [(3, 5)], False)[1].rsplit(" AS ", 1)[1]
        '`__sorted:x:[0,9]-0@2^0~1/2±0#below0`'

    """
    coded, key = code(stat, schema), stat.key
    inside = " OR ".join(f"({coded}) BETWEEN {bigint(lo)} AND {bigint(hi)}" for lo, hi in ends)
    if seen:
        inside = f"{inside} OR __dp_seen IS NULL"
    return [f"count({coded}) AS {ident(key + '#n')}",
            *[f"count(CASE WHEN ({coded}) < {bigint(lo)} THEN 1 END) AS {ident(f'{key}#below{j}')}"
              for j, (lo, _) in enumerate(ends)],
            f"collect_list(CASE WHEN {inside} THEN {coded} END) AS {ident(key)}"]
