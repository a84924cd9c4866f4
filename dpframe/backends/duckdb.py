"""The DuckDB backend: the stable part of a plan as DuckDB SQL that returns the statistics.

What runs in DuckDB:

1. the registered table: an Arrow table handed over by Polars once, zero-copy (strings as string
   views; only types DuckDB could fail on or hold other values of are converted first, see
   :func:`~dpframe.sql.handover.duckdb_type`), or a Parquet file DuckDB scans itself (where its reader
   types each column as that table would be and reads every value: one scan at registration,
   :meth:`DuckDBBackend._parquet`);
2. the row-level SQL nodes built by ``sess.sql`` (filters, projections, joins with public tables),
   each expression evaluated under ``TRY(...)`` so no private value can make the query fail;
3. the semi-join with the public group keys, then contribution bounding: rows with a NULL unit are
   dropped; with ``max_groups`` each unit keeps the distinct keys with the smallest seeded hash of
   (unit, keys); then each unit keeps its ``max_rows`` rows with the smallest seeded hash of the values
   the statistics read (unit, keys, measured columns; each with its null flag, :func:`_hash`) — the
   j-th copy (j ≥ 1) of a row repeated in its unit (equal in every hashed column) ranked by the hash of
   (hash, j), so that each row, not each distinct row, is equally likely to be kept; ties (a 64-bit
   collision) go to the earlier row. As in
   the Polars backend, which *values* a unit keeps depends only on its own rows and the seed (not on
   row order or other units): bounding is a stable transformation for every seed. A first query
   returns the rows' hashes. Where the rows bounded are the source's rows themselves (no SQL row node)
   it is a scan, whose result DuckDB keeps in the rows' order, so a row's position is its place in the
   result; which rows are ranked (a unit, one of the public keys) Polars decides on the same data where
   its equality is DuckDB's (key columns of string, integer, boolean or date types: ``is_in``, or a
   semi-join for several), once per registered table and public parameters (:class:`_Ranking`; from a
   Parquet file's second query on, the columns bounded queries read — unit, keys, measured columns —
   are read by one plain scan, in file order, and kept in memory as Arrow data, strings
   dictionary-encoded, while the file keeps its version: :class:`_Columns`; a file whose columns would
   take more than 1/:data:`MEMORY_SHARE` of the memory has only its unit and key columns read, and is
   masked by a ``POSITIONAL JOIN``). From the second query on, only rows of units with more than
   ``max_rows`` ranked rows are hashed (integer units spanning fewer than 2**22 values; a mask column
   filters the scan): the others keep all their rows whatever their hashes. Rows held as plain Arrow
   data (an in-memory frame, the method chain's rows) are hashed by Polars in this process instead
   (:func:`_local_hashes`: its seeded ``hash_rows``, faster than DuckDB's ``hash`` handed back); a
   Parquet file's rows always by DuckDB, held in memory or not. Otherwise (SQL row
   nodes, float keys, ``max_groups``, a Parquet file's first query) the query returns the candidate rows
   with their positions (a column beside the
   Arrow data, or the Parquet ``file_row_number``) and units.
   The kept positions are picked in numpy exactly as the Polars backend picks them
   (:func:`dpframe.backends._bounding.kept`: a count per unit, one sort, no window over the units) and
   go back as a boolean column the statistics query reads the table through (for a Parquet file not
   in memory, by a ``POSITIONAL JOIN``). For an in-memory table grouped by one string column of public
   keys, that column is each kept row's key code instead (0: not kept; the codes found once with the
   ranking, in place of ``is_in``, :class:`_Groups`): DuckDB groups by the small integers, not the
   strings, and the keys come back from the public keys;
4. the exact integer statistics per group (the same definitions as the Polars backend: fixed-point
   clamped sums truncated onto the grid, NaN and NULL ignored, ±inf clamped). Sums run in doubles where
   the source's row count proves every partial sum an integer a double holds exactly
   (:func:`~dpframe.backends.base.double_sums_are_exact`: DuckDB sums doubles faster than it casts them
   to integers), else in 64 bits (DuckDB's ``sum_no_overflow``) where it proves that no sum can leave
   them (:func:`~dpframe.backends.base.int64_sums_are_exact`), else in HUGEINT. A partial ``sorted``
   statistic (``near``: quantiles) is answered with rank windows, as on Polars: a Bernoulli sample of
   one row in :data:`~dpframe.backends.rank_windows.SAMPLE_STRIDE` places the windows
   (:func:`~dpframe.backends.polars_windows.place_windows`), and the statistics query counts each
   group's codes and those below each window and lists only the codes inside one (a group the sample
   missed lists all of its codes); whole sorted lists where windows would not pay.

Public keys with no rows get zeros; rows come back sorted by key (nulls first). Noise is never drawn in
SQL: the result goes back to the mechanisms in Python.

Plans built by the method chain hold Polars expressions that DuckDB cannot run: those row nodes are
applied by Polars (lazily, then collected to Arrow once per query) and DuckDB does the keys, bounding
and aggregation on the result.

Privacy of the connection: an in-memory DuckDB database private to this backend, Python replacement
scans off (no variable of the caller is visible), extension auto-loading off, and — from the first query
on — external access off (except the registered Parquet files) with the configuration locked. The
bounding step's arrays stay in this process (the engine's), as the Polars backend's do.

Example:
    >>> import polars as pl
    >>> from dpframe.mechanism import LIST_KINDS, SUM_LIMIT, Statistic
    >>> from dpframe.privacy_unit import PrivacyUnit
    >>> b = DuckDBBackend(); b.register("t", pl.LazyFrame({"u": [1, 1, 2], "x": [1.0, 2.0, 3.0]}))
    >>> req = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=1), (), None, (Statistic("rows"),), 7)
    >>> b.statistics(req)["__rows"].item()
    2

"""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from dpframe.backends._bounding import STEP, UNIT_SALT, Mask, Rows, U64s, crowded, empty, in_steps, kept
from dpframe.backends.base import STATISTIC_KINDS, StatisticsRequest, double_sums_are_exact, int64_sums_are_exact
from dpframe.backends.bins import Bins, adjacent_bins, with_counts
from dpframe.backends.polars import row_hashes
from dpframe.backends.polars_windows import RankWindows, code_column, fill_missing_groups, finish_lists
from dpframe.backends.rank_windows import SAMPLE_STRIDE, SINGLE_STRIDE
from dpframe.engine_output import ENGINE
from dpframe.errors import SchemaError
from dpframe.file_versions import FileVersion, file_version
from dpframe.mechanism import LIST_KINDS, SUM_LIMIT, Statistic
from dpframe.plan.nodes import RowNode, case_clashes
from dpframe.plan.sample import apply_node
from dpframe.sql.handover import duckdb_type, for_duckdb, lossless
from dpframe.sql.nodes import PublicJoin, SQLFilter, SQLProject, guard
from dpframe.sql.sandbox import connect, function_types, literal, lock, quote
from dpframe.tables import glob_pattern

ROW = "__dp_row"
KEEP = "__dp_keep"
_SQL_NODES = (SQLFilter, SQLProject, PublicJoin)
_SEED_MASK = (1 << 63) - 1
_ROW_SALT = 0x5DEECE66D
"""XORed into a query's seed for the row hashes (another seed than the ``max_groups`` pairs')."""
MEMORY_SHARE = 8
"""A Parquet file's columns are kept in memory (:class:`_Columns`) only up to this share of the machine's memory
(1/8; their uncompressed size in the file's metadata): a larger file is scanned twice per query, as DuckDB
scans a table bigger than memory."""
_BITWISE = (pl.String, pl.Boolean, pl.Date, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32,
            pl.UInt64)
"""Key types whose values are equal exactly when their bits are, in Polars and in DuckDB alike."""


def _first_line(error: BaseException, limit: int = 200) -> str:
    """The first paragraph of an engine's error message, on one line (Polars puts newlines in quotes)."""
    text = " ".join(str(error).strip().split("\n\n")[0].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wide_decimals(duckdb_type: str) -> str:
    """A DuckDB type with each ``DECIMAL(p,s)`` as the ``DECIMAL(38,s)`` it is handed over as (:func:`duckdb_type`).

    Example:
        >>> _wide_decimals("STRUCT(a DECIMAL(3,1), b DECIMAL(38,2)[])")
        'STRUCT(a DECIMAL(38,1), b DECIMAL(38,2)[])'

    """
    return re.sub(r"DECIMAL\(\d+,(\d+)\)", r"DECIMAL(38,\1)", duckdb_type)


def _parquet_scan(path: str, *options: str) -> str:
    """DuckDB's scan of the Parquet file ``path`` as the file's own columns (``options`` added, e.g. a row number).

    ``hive_partitioning=false``: DuckDB detects hive partitions in a single file's path too, and a file under
    ``u=1/`` read every row's own ``u`` as ``1`` (Polars and Spark read the file's values; ``test_review40a.py``).

    Example:
        >>> _parquet_scan("/data/u=1/t.parquet", "file_row_number=true")
        "read_parquet('/data/u=1/t.parquet', hive_partitioning=false, file_row_number=true)"

    """
    return f"read_parquet({', '.join([literal(path), 'hive_partitioning=false', *options])})"


def _double(value: Any) -> str:
    """An exact DOUBLE literal (parsed from Python's round-trip repr)."""
    return f"CAST({literal(repr(float(value)))} AS DOUBLE)"


class Statistics:
    """The DuckDB SQL computing a request's statistics exactly (BIGINTs named ``stat.key``).

    Definitions as in the Polars backend: NULL and NaN are not values; values are cast to DOUBLE, clamped
    (±inf too), shifted, raised to ``power``, scaled to the 2^grid_exp grid, truncated toward zero onto
    it (so ``|term| ≤ Statistic.row_bound()``), and the integers summed exactly: in ``sums`` (which the
    caller picks from the source's row count) "hugeint", "int64" (no sum can leave 64 bits: DuckDB's
    ``sum_no_overflow``) or "double" (every partial sum is an integer below 2⁵³: the double sum, cast
    back, is the integer sum); terms and totals are clipped to ±SUM_LIMIT. A projection computes
    each clamped column once (NULL when the value is NULL or NaN); the aggregates then read it.

    Example:
        >>> from fractions import Fraction
        >>> st = Statistics(None, pl.Schema({"x": pl.Float64}))
        >>> st.aggregate(Statistic("nonnull", "x"))
        'CAST(count("__dp_v0") AS BIGINT) AS "__nonnull:x"'

    """

    def __init__(self, unit: str | None, schema: pl.Schema, statistics: tuple[Statistic, ...] = (),
                 sums: Literal["hugeint", "int64", "double"] = "hugeint") -> None:
        self.unit, self.schema = unit, schema
        self._sums = sums
        self.values: dict[str, str] = {}
        # A column's non-null count can reuse any of its clamped values (NULL exactly when not a value).
        self._clamped: dict[str, str] = {}
        for stat in statistics:
            if stat.kind == "fixed_sum" and stat.column is not None and stat.column not in self._clamped:
                self._clamped[stat.column] = self._clamp(stat)

    def _value(self, sql: str) -> str:
        for name, existing in self.values.items():
            if existing == sql:
                return quote(name)
        name = f"__dp_v{len(self.values)}"
        self.values[name] = sql
        return quote(name)

    def present(self, column: str) -> str:
        """True for a value, NULL/false for NULL and NaN (``isnan(NULL)`` is NULL)."""
        col = quote(column)
        return f"NOT isnan({col})" if self.schema[column].is_float() else f"{col} IS NOT NULL"

    def _clamp(self, stat: Statistic) -> str:
        assert stat.column is not None
        value = f"CAST({quote(stat.column)} AS DOUBLE)"
        lo, hi = _double(stat.lower), _double(stat.upper)
        return self._value(f"CASE WHEN {self.present(stat.column)} THEN least(greatest({value}, {lo}), {hi}) END")

    def aggregate(self, stat: Statistic) -> str:
        """The aggregate for one statistic (registering the projected value it reads)."""
        key = quote(stat.key)
        if stat.kind == "rows":
            return f"CAST(count(*) AS BIGINT) AS {key}"
        if stat.kind == "units":
            return f"CAST(count(DISTINCT {quote(self.unit)}) AS BIGINT) AS {key}" if self.unit else \
                f"CAST(count(*) AS BIGINT) AS {key}"
        assert stat.column is not None
        present = self.present(stat.column)
        value = f"CAST({quote(stat.column)} AS DOUBLE)"
        if stat.kind == "nonnull":
            counted = self._clamped.get(stat.column) or self._value(f"CASE WHEN {present} THEN 1 END")
            return f"CAST(count({counted}) AS BIGINT) AS {key}"
        if stat.kind == "distinct":
            value = self._value(f"CASE WHEN {present} THEN {quote(stat.column)} END")
            return f"CAST(count(DISTINCT {value}) AS BIGINT) AS {key}"
        assert stat.lower is not None and stat.upper is not None
        if stat.kind == "sorted":
            code = self.code(stat)
            return f"coalesce(list({code} ORDER BY {code}) FILTER (WHERE {code} IS NOT NULL), []::BIGINT[]) AS {key}"
        lo, hi = _double(stat.lower), _double(stat.upper)
        if stat.kind == "indicator_sum":
            inside = self._value(f"CASE WHEN {present} AND {value} >= {lo} AND {value} < {hi} THEN 1 END")
            return f"CAST(count({inside}) AS BIGINT) AS {key}"
        clamped = self._clamp(stat)
        shifted = f"({clamped} - {_double(stat.shift)})" if stat.shift else clamped
        powered = shifted if stat.power == 1 else " * ".join([shifted] * stat.power)
        scaled = f"({powered}) * {_double(2.0 ** (-stat.grid_exp))}" if stat.grid_exp else powered
        # Each term (if its public bound allows more) and the (HUGEINT, exact) total clipped to ±SUM_LIMIT:
        # no overflow error, no wrap-around. A CASE, not least/greatest: those skip NULL, which must stay NULL.
        limit = _double(SUM_LIMIT)
        term = scaled if 2 * stat.row_bound() <= SUM_LIMIT else \
            f"CASE WHEN {scaled} > {limit} THEN {limit} WHEN {scaled} < -{limit} THEN -{limit} ELSE {scaled} END"
        if self._sums == "double":
            total = f"coalesce(CAST(sum(trunc({term})) AS BIGINT), 0)"
        else:
            add = "sum_no_overflow" if self._sums == "int64" else "sum"
            total = f"coalesce({add}(CAST(trunc({term}) AS BIGINT)), 0)"
        return f"CAST(least(greatest({total}, -{SUM_LIMIT}), {SUM_LIMIT}) AS BIGINT) AS {key}"

    def window_aggregates(self, stat: Statistic, ends: list[tuple[int, int]], seen: bool) -> list[str]:
        """A partial ``sorted`` statistic's aggregates: its count, #{code < lo} per window, the codes inside one.

        Named as :class:`~dpframe.backends.polars_windows.RankWindows` expects them (``key#n``,
        ``key#below{j}``, and ``key`` for the unsorted listed codes); with ``seen``, rows of a group the
        sample missed (``__dp_seen`` NULL) are all listed.

        Example:
            >>> from fractions import Fraction
            >>> st = Statistics(None, pl.Schema({"x": pl.Int64}))
            >>> stat = Statistic("sorted", "x", Fraction(0), Fraction(9), near=(Fraction(1, 2),))
            >>> st.window_aggregates(stat, [(3, 5)], False)[1]
            'CAST(count("__dp_v0") FILTER (WHERE "__dp_v0" < 3) AS BIGINT) AS "__sorted:x:[0,9]-0@2^0~1/2±0#below0"'

        """
        code, key = self.code(stat), stat.key
        inside = " OR ".join(f"{code} BETWEEN {lo} AND {hi}" for lo, hi in ends)
        if seen:
            inside = f"{inside} OR __dp_seen IS NULL"
        listed = f"list({code}) FILTER (WHERE {code} IS NOT NULL AND ({inside}))"
        return [f"CAST(count({code}) AS BIGINT) AS {quote(key + '#n')}",
                *[f"CAST(count({code}) FILTER (WHERE {code} < {lo}) AS BIGINT) AS {quote(f'{key}#below{j}')}"
                  for j, (lo, _) in enumerate(ends)],
                f"coalesce({listed}, []::BIGINT[]) AS {quote(key)}"]

    def code(self, stat: Statistic) -> str:
        """The ``sorted`` statistic's code of a row (NULL for NULL/NaN): floats in DOUBLE, the rest exactly."""
        assert stat.column is not None and stat.lower is not None and stat.upper is not None
        dtype = self.schema[stat.column]
        if dtype.is_float():
            shifted = f"({self._clamp(stat)} - {_double(stat.shift)})" if stat.shift else self._clamp(stat)
            scaled = f"{shifted} * {_double(2.0 ** (-stat.grid_exp))}" if stat.grid_exp else shifted
            return self._value(f"CAST(trunc({scaled}) AS BIGINT)")
        col = quote(stat.column)
        if dtype == pl.Date:
            number = f"CAST({col} - DATE '1970-01-01' AS HUGEINT)"
        elif isinstance(dtype, pl.Datetime):
            # DuckDB reads the int64 extremes ±(2⁶³ − 1) as ±infinity, whose epoch is NULL: they are those values
            # to Polars (clamped to the bounds), so here too (``test_review54d.py``)
            top = 2**63 - 1
            number = (f"CAST(CASE WHEN isinf({col}) THEN CASE WHEN {col} = 'infinity' THEN {top} ELSE -{top} END "
                      f"ELSE epoch_{dtype.time_unit or 'us'}({col}) END AS HUGEINT)")
        elif isinstance(dtype, pl.Decimal):
            number = f"CAST(trunc({col}) AS HUGEINT)"   # toward zero, as Polars (a plain CAST rounds)
        else:
            number = f"CAST({col} AS HUGEINT)"
        # greatest/least skip NULLs, hence the CASE.
        clamped = f"least(greatest({number}, {int(stat.lower)}), {int(stat.upper)}) - {int(stat.shift)}"
        return self._value(f"CASE WHEN {col} IS NOT NULL THEN CAST(({clamped}) // {2 ** stat.grid_exp} AS BIGINT) END")

    def projection(self, keep: list[str]) -> str:
        """The SELECT list of the projection (``keep``: key and unit columns, already quoted)."""
        return ", ".join([*keep, *(f"{sql} AS {quote(name)}" for name, sql in self.values.items())]) or "1"


class _Query:
    """Builds one WITH-chain; remembers the frames to register for it."""

    def __init__(self) -> None:
        self.ctes: list[str] = []
        self.frames: dict[str, Any] = {}
        self._names = itertools.count()

    def add(self, sql: str) -> str:
        name = f"__dp_s{len(self.ctes)}"
        self.ctes.append(f"{name} AS ({sql})")
        return name

    def frame(self, data: Any) -> str:
        name = f"__dp_f{next(self._names)}"
        self.frames[name] = data
        return name

    def sql(self, final: str) -> str:
        return ("WITH " + ",\n".join(self.ctes) + "\n" if self.ctes else "") + final


@dataclass
class _Table:
    """A registered table: its DuckDB view, its declared Polars frame, and its Arrow data or Parquet path."""

    view: str
    frame: pl.LazyFrame
    data: pa.Table | None
    path: str | None = None
    numbered: pa.Table | None = None    # ``data`` with each row's position (column ``ROW``), once needed
    rows: int | None = None             # the Parquet file's row count, once needed
    ranking: _Ranking | None = None     # bounding's seed-free part for the last public parameters used
    types: pa.Table | None = None       # no rows: the Parquet file's columns as DuckDB reads them, once needed
    asked: tuple[Any, ...] | None = None    # the Parquet file's last (key, keys) of :class:`_Ranking`
    columns: _Columns | None = None     # the Parquet file's columns bounding read, in memory
    sizes: dict[str, int] | None = None     # the Parquet file's uncompressed bytes per column, once needed


@dataclass
class _Columns:
    """Columns of a Parquet file read into memory by one scan, in file order, for its user-level queries.

    Bounding reads a file twice per query (the rows' hashes, then the statistics through the kept-row
    mask), and a masked scan of a file is a ``POSITIONAL JOIN``, which DuckDB runs on one thread. So the
    columns a bounded query reads (unit, keys, measured columns) are read once — by the query that finds
    the ranking (:meth:`DuckDBBackend._ranking`) — and the next ones run on them as on Arrow data, string
    columns dictionary-encoded (DuckDB hashes and groups those faster, as it does a Parquet file's).

    ``version`` is the file's version (:func:`~dpframe.file_versions.file_version`) taken before the read:
    the columns are used only while the file still has it (checked before each use), on top of the
    catalog's refusal of every query that reads the file once it changed.
    """

    version: FileVersion | None
    data: pa.Table


@dataclass
class _Ranking:
    """What bounding by row order needs that no seed changes: kept per registered table and public parameters.

    ``key`` (unit column, group columns, ``max_rows``) and ``keys`` (the public keys) say what it is for;
    ``every`` is each row's unit, null where the row is not ranked (:func:`_ranked_units`). ``hashed``:
    the rows whose hashes the query reads (the ranked rows; once ``settled``, only those of units with
    more than ``max_rows`` of them, :func:`~dpframe.backends._bounding.crowded`: the others keep all
    their rows), ``rows`` their positions, ``units`` their units, and ``ranked`` every ranked row (kept
    unless dropped); ``hashed`` is ``None`` where every row is hashed (``units``: every row's).

    For a Parquet file it is valid because the file never changes under a session: the catalog refuses
    every query that reads it once it was written (:mod:`dpframe.file_versions`).
    """

    key: tuple[Any, ...]
    keys: pl.DataFrame | None
    every: pl.Series
    units: pl.Series
    settled: bool
    hashed: Mask | None = None
    rows: Rows | None = None
    ranked: Mask | None = None
    groups: _Groups | None = None

    @staticmethod
    def of(key: tuple[Any, ...], keys: pl.DataFrame | None, every: pl.Series, hashed: Mask | None,
           settled: bool) -> _Ranking:
        """The ranking hashing the rows ``hashed`` (``None``: every ranked row)."""
        if (hashed is None or hashed.all()) and not every.null_count():
            return _Ranking(key, keys, every, every, settled)
        ranked = every.is_not_null().to_numpy()
        hashed = ranked if hashed is None else hashed
        return _Ranking(key, keys, every, every.filter(pl.Series(hashed)), settled, hashed, np.flatnonzero(hashed),
                        ranked)


@dataclass
class _Groups:
    """Each row's public key as a small integer, for the statistics queries of a :class:`_Ranking`.

    ``codes`` holds, per row of the table, 1 + the index in ``values`` of its key (a ranked row), else 0
    (a row outside the public keys); ``values`` is the key column's distinct public keys (a Series of the
    keys' type, in the keys' order, a null key last). DuckDB groups the kept rows by ``codes × keep`` (one
    small-integer column, 0 for a dropped row) instead of by the strings, and the groups get their keys back
    from ``values``: the same groups, as Polars' equality of strings is DuckDB's (bytewise).
    """

    codes: np.ndarray[Any, Any]
    values: pl.Series


@dataclass
class _Windows:
    """The rank windows of a request's partial ``sorted`` statistics (see :class:`RankWindows`)."""

    windows: RankWindows
    seen: pa.Table | None     # grouped: the groups the sample saw (column ``__dp_seen``, true)


class DuckDBBackend:
    """Runs plans in a private, locked DuckDB connection (see the module docstring)."""

    name = "duckdb"
    statistic_kinds = STATISTIC_KINDS    # every kind (see dpframe.backends.base.ListsKinds)

    def __init__(self) -> None:
        self._con = connect(locked=False)
        # (the default, relied on: a plain SELECT from one table returns its rows in their order)
        self._con.execute("SET preserve_insertion_order = true")
        self._tables: dict[str, _Table] = {}
        self._views = 0     # views made (one per registration: a name registered again gets a new one)
        self._paths: list[str] = []
        self._locked = False
        self._mutex = threading.RLock()

    # ---------------------------------------------------------------------------------- registration
    def register(self, name: str, source: pl.LazyFrame) -> None:
        """Own a private table given as a Polars LazyFrame (collected once into Arrow)."""
        self.register_source(name, source, None)

    def register_source(self, name: str, frame: pl.LazyFrame, source: object) -> None:
        """Own a private table; a Parquet path is scanned by DuckDB itself (:meth:`_parquet`), anything else via Arrow.

        An in-memory frame is handed over once, zero-copy where its types allow (Arrow string views);
        columns of a type DuckDB could fail on are converted first (:func:`~dpframe.sql.handover.for_duckdb`).
        """
        schema = frame.collect_schema()
        if ROW in schema or KEEP in schema:
            raise SchemaError(f"table {name!r} has a column named {ROW!r} or {KEEP!r}, which the DuckDB backend "
                              "reserves", argument="tables", fix="rename that column")
        clash = case_clashes(schema.names())
        if clash:
            raise SchemaError(f"table {name!r} has columns that differ only in case ({clash}), which DuckDB "
                              "cannot tell apart", argument="tables", fix="rename them")
        with self._mutex:
            internal, self._views = f"__dp_t{self._views}", self._views + 1
            path = self._parquet(source, schema)
            data = None
            try:
                if path is not None:
                    self._con.execute(f"CREATE VIEW {internal} AS SELECT * FROM {_parquet_scan(path)}")
                else:
                    data = _arrow(for_duckdb(frame).collect(engine=ENGINE))
                    self._con.register(internal, data)
            except (pl.exceptions.PolarsError, duckdb.Error, pa.ArrowException, OSError) as e:
                # Run by the data owner when the session is created (a malformed CSV, an unreadable file ...).
                raise SchemaError(f"cannot read table {name!r}: {type(e).__name__}: {_first_line(e)}",
                                  argument=f"tables[{name!r}]",
                                  fix="check the file (a CSV needs the same number of fields on every line) "
                                      "or load it yourself and pass a DataFrame") from e
            if path is not None:
                self._paths.append(path)
            self._tables[name] = _Table(internal, frame, data, path)

    def check_unit(self, table: str, column: str, dtype: pl.DataType) -> None:
        """Refuse a privacy-unit column whose values may not all reach DuckDB (a :class:`SchemaError`).

        128-bit integers are handed over as ``DECIMAL(38, 0)`` and millisecond datetimes as microseconds
        (:func:`duckdb_type`): a value beyond 38 digits (seven UUIDs in ten, as ``UInt128``) or beyond the
        microsecond range becomes NULL. A unit that is such a value would lose its rows, where the Polars
        backend counts them; nested in a struct or list it is worse: ``{a: 2**127 - 1}`` and
        ``{a: 2**127 - 2}`` would both arrive as ``{a: NULL}``, *one* unit, whose kept rows could then be
        another unit's (a neighbour would swap rows, not add them: twice the sensitivity charged). The
        type decides (:func:`dpframe.sql.handover.lossless`), never the values: the check reads no row.

        Example:
            >>> DuckDBBackend().check_unit("t", "u", pl.UInt128())
            Traceback (most recent call last):
            ...
            dpframe.errors.SchemaError: privacy_unit: the DuckDB backend cannot hold the privacy-unit column 'u' ...

        """
        if not lossless(dtype):
            raise SchemaError(f"the DuckDB backend cannot hold the privacy-unit column {column!r} of table {table!r} "
                              f"({dtype}: DuckDB is handed 128-bit integers as 38 digits and datetimes in "
                              "microseconds, and a unit beyond them would lose its rows or merge with another)",
                              argument="privacy_unit",
                              fix=f"register the ids as text (pl.col({column!r}).cast(pl.String)), or run the "
                                  "session on the Polars backend")

    def _parquet(self, source: object, schema: pl.Schema) -> str | None:
        """The path of a Parquet ``source`` DuckDB can scan itself (None: the table is read through Polars).

        Only a regular file whose name is no pattern (:func:`~dpframe.tables.glob_pattern`): DuckDB reads a
        directory's files, or those a pattern matches, each with a ``file_row_number`` from 0 (no position
        names one row), and the session records the version of the path itself (every query on such a path
        failed after its charge, ``tests/adversarial/test_review39a.py``).

        DuckDB's reader must give the session's schema (the Polars reading, the reference on every backend):

        * each column in the DuckDB type of the same table handed over in memory (:meth:`_handed_over`):
          else DuckDB would mean other values (a UUID is a UUID, not its 16 bytes; an INT96 timestamp
          has microseconds, not nanoseconds; a TIME microseconds; a date64 is a date), and e.g. a group
          by public keys of the schema's type would count other rows. A decimal's precision alone may
          differ (in memory it is ``DECIMAL(38, s)``);
        * no decimal stored in more bytes than DuckDB holds its precision in (:meth:`_narrowed`: a
          ``DECIMAL(3, 1)`` in an INT32 is kept in 16 bits, and a value stored beyond the precision
          wraps, where Polars and Spark read it whole); in as many bytes, DuckDB reads every stored
          value as it is;
        * every value: DuckDB refuses values Polars reads (a TIME beyond a day, a JSON value that does
          not parse, an INT96 timestamp beyond its range), and such a value in one unit's row would make
          every query reading its column fail after its charge, on D′ and not on D. One scan hashes every
          column now (the file was read in full when the session was created, so reading it through
          Polars cannot fail).

        Each check reads only public things (the schema, the file's footer) except the last, whose
        failure only reads the table through Polars: the answers are the same either way.
        """
        if self._locked or not isinstance(source, str | Path) or Path(source).suffix.lower() != ".parquet" \
                or not Path(source).is_file() or glob_pattern(source) \
                or any(duckdb_type(t, decimals=False) != t for t in schema.dtypes()):   # DuckDB would read
            return None                                                                 # such columns itself
        path = str(Path(source).resolve())
        scan = _parquet_scan(path)
        try:
            found = self._con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()
            names = [r[0] for r in found]
            if names != list(schema.names()) or "file_row_number" in names:
                return None
            wanted = self._handed_over(schema)
            if [_wide_decimals(r[1]) for r in found] != wanted or self._narrowed(path):
                return None
            self._con.execute(f"SELECT bit_xor(hash({', '.join(quote(c) for c in names)})) FROM {scan}").fetchall()
        except (duckdb.Error, pl.exceptions.PolarsError, pa.ArrowException):   # (the Polars reading says why)
            return None
        return path

    def _handed_over(self, schema: pl.Schema) -> list[str]:
        """DuckDB's type of each column of a table with ``schema`` handed over in memory (no rows read)."""
        empty = _arrow(for_duckdb(pl.DataFrame(schema=schema).lazy()).collect(engine=ENGINE))
        with self._registered({"__dp_types": empty}):
            return [r[1] for r in self._con.execute("DESCRIBE SELECT * FROM __dp_types").fetchall()]

    def _narrowed(self, path: str) -> bool:
        """Whether a decimal of the Parquet file is stored in more bytes than DuckDB holds its precision in.

        DuckDB holds ``DECIMAL(p, s)`` in 2, 4, 8 or 16 bytes (p ≤ 4, 9, 18, 38); the file's storage
        (INT32, INT64, a fixed length, or a variable-length BYTE_ARRAY) is in its footer.
        """
        stored = self._con.execute(f"SELECT type, type_length, precision FROM parquet_schema({literal(path)}) "
                                   "WHERE precision IS NOT NULL").fetchall()
        for physical, length, precision in stored:
            held = 2 if precision <= 4 else 4 if precision <= 9 else 8 if precision <= 18 else 16
            if physical == "BYTE_ARRAY":     # any length
                return True
            width = {"INT32": 4, "INT64": 8}.get(physical) or int(length)
            if width > held:
                return True
        return False

    def supports(self, node: RowNode) -> str | None:
        """Every row node runs here (SQL nodes in DuckDB, method-chain nodes through Polars)."""
        return None

    # ------------------------------------------------------------------------------------ statistics
    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        """Row nodes, keys, bounding, statistics; zeros for empty public keys (see the module docstring).

        Without contribution bounding and rank windows this is one query; bounding adds one query (the
        rows' hashes, see :meth:`_keep`) and rank windows one more (their sample).
        """
        with self._mutex:
            if not self._locked:
                lock(self._con, self._paths)
                self._locked = True
            self._check_version(request)
            source = self._polars_part(request)
            keep = self._keep(request, source) if self._bounds(request) else None
            near = [s for s in request.statistics if s.kind == "sorted" and s.near]
            windows = self._windows(request, source, keep, near) if near else None
            groups = self._groups(request, source) if keep is not None and windows is None else None
            sql, frames = self._compile(request, source, keep, windows, groups)
            bins = _bins(request)
            out = with_counts(self._run(sql, frames), bins, [f"{_BINS}{i}" for i in range(len(bins))])
            if groups is not None:      # each group's key from its code (1 + its index in the keys' values)
                out = out.select(groups.values.gather(out[KEEP].cast(pl.Int64) - 1).alias(request.by[0]),
                                 pl.exclude(KEEP))
        nodes = request.row_nodes
        schema = nodes[-1].schema if nodes else self._tables[request.table].frame.collect_schema()
        return self._finish(out, request, schema, windows.windows if windows is not None else None)

    def compile(self, request: StatisticsRequest) -> tuple[str, dict[str, Any]]:
        """The SQL of the statistics query and the frames it needs registered (for tests and EXPLAIN).

        With contribution bounding, this runs the candidates query first (the mask is one of the frames).
        """
        with self._mutex:
            self._check_version(request)
            source = self._polars_part(request)
            keep = self._keep(request, source) if self._bounds(request) else None
            groups = self._groups(request, source) if keep is not None else None
            return self._compile(request, source, keep, None, groups)

    @staticmethod
    def _bounds(request: StatisticsRequest) -> bool:
        return request.unit.column is not None and request.contribution_bounding

    def _run(self, sql: str, frames: dict[str, Any]) -> pl.DataFrame:
        """Run one query with its frames registered for its duration (under the backend's lock)."""
        with self._registered(frames):
            out: pl.DataFrame = self._con.sql(sql).pl()
        return out

    def _hashes(self, sql: str, frames: dict[str, Any], rows: int) -> U64s:
        """The one (UBIGINT, not null) column of a query's ``rows`` rows, in order, as numpy.

        Read batch by batch into one array from Arrow's pool (:func:`~dpframe.backends._bounding.empty`):
        small batches reuse their memory, where one large result would be fresh pages every query.
        """
        out = empty(rows, np.uint64)
        at = 0
        with self._registered(frames):
            for batch in self._con.sql(sql).to_arrow_reader(STEP):
                part = batch.column(0).to_numpy()
                out[at:at + part.size] = part
                at += part.size
        assert at == rows, (at, rows)
        return out

    @contextmanager
    def _registered(self, frames: dict[str, Any]) -> Iterator[None]:
        for name, data in frames.items():
            self._con.register(name, data)
        try:
            yield
        finally:
            for name in frames:
                self._con.unregister(name)

    def _polars_part(self, request: StatisticsRequest) -> pa.Table | None:
        """The rows after the method-chain nodes (run by Polars once per query, for every query it needs)."""
        nodes, split = request.row_nodes, _split(request)
        if not split:
            return None
        frame = self._tables[request.table].frame
        for position, node in enumerate(nodes[:split]):
            frame = apply_node(node, frame, request.seed, position)
        return _arrow(for_duckdb(frame).collect(engine=ENGINE))

    def _check_version(self, request: StatisticsRequest) -> None:
        """Forget what was read from the request's Parquet file (columns, ranking, sizes) if the file changed."""
        table = self._tables[request.table]
        if table.columns is not None and table.path is not None and file_version(table.path) != table.columns.version:
            table.columns, table.ranking, table.rows, table.asked, table.sizes = None, None, None, None, None

    def _data(self, request: StatisticsRequest, source: pa.Table | None) -> pa.Table | None:
        """The Arrow rows a request reads: ``source``, the table's data, or a Parquet file's columns in memory.

        The latter (:class:`_Columns`) for a bounded request without row nodes whose columns they hold;
        ``None``: DuckDB scans the file.
        """
        if source is not None:
            return source
        table = self._tables[request.table]
        if table.data is not None:
            return table.data
        if table.columns is None or request.row_nodes or not self._bounds(request) \
                or not set(_read(request)) <= set(table.columns.data.column_names):
            return None
        return table.columns.data

    def _to_hold(self, request: StatisticsRequest) -> list[str] | None:
        """The columns to hold in memory for a bounded request on a Parquet file (:func:`_read`, and those held).

        ``None`` where they would take more than 1/:data:`MEMORY_SHARE` of the machine's memory (their
        uncompressed size in the file's metadata, read once).
        """
        table = self._tables[request.table]
        assert table.path is not None
        if table.sizes is None:
            table.sizes = dict(self._con.execute(
                f"SELECT path_in_schema, sum(total_uncompressed_size) FROM parquet_metadata({literal(table.path)}) "
                "GROUP BY ALL").fetchall())
        names = list(dict.fromkeys([*_read(request), *(table.columns.data.column_names if table.columns else [])]))
        needed = sum(size for column, size in table.sizes.items()
                     if any(column == n or column.startswith(f"{n}.") for n in names))
        return names if needed * MEMORY_SHARE <= _memory() else None

    def _read_columns(self, table: _Table, names: list[str]) -> pa.Table:
        """Columns of a Parquet file read by a plain scan, and held in memory (:class:`_Columns`); returned as read."""
        assert table.path is not None
        version = file_version(table.path)     # taken first: a write during the read is found on the next query
        data = self._con.sql(f"SELECT {', '.join(quote(c) for c in names)} FROM {table.view}").to_arrow_table()
        table.columns = _Columns(version, _dictionary(data))
        return data

    def _scan(self, q: _Query, request: StatisticsRequest, source: pa.Table | None, *, numbered: bool = False,
              keep: Mask | None = None, groups: _Groups | None = None) -> str:
        """The source rows through the SQL row nodes: numbered (column ``ROW``: the position), masked, or as is.

        Arrow data gets the extra column zero-copy (a table sharing the data's columns); a Parquet file is
        numbered by its ``file_row_number`` and masked by a ``POSITIONAL JOIN``. With ``groups`` (the
        ranking's key codes, :meth:`_groups`), the mask column is each kept row's key code (0: dropped), kept
        in the rows (column ``KEEP``).
        """
        table = self._tables[request.table]
        data = self._data(request, source)
        if data is None:                 # a Parquet file DuckDB scans itself
            assert table.path is not None
            if numbered:
                cur = q.add(f"SELECT * EXCLUDE (file_row_number), file_row_number AS {ROW} FROM "
                            f"{_parquet_scan(table.path, 'file_row_number=true')}")
            elif keep is not None:
                mask = q.frame(pa.table({KEEP: _bytes(keep)}))
                cur = q.add(f"SELECT s.* FROM {table.view} AS s POSITIONAL JOIN {mask} AS k WHERE k.{KEEP} <> 0")
            else:
                cur = q.add(f"SELECT * FROM {table.view}")
        elif numbered:
            cur = q.add(f"SELECT * FROM {q.frame(self._numbered(table, data))}")
        elif keep is not None and groups is not None:
            assert not request.row_nodes     # (the table's own rows: codes of its ranking, :meth:`_groups`)
            cur = q.add(f"SELECT * FROM {q.frame(data.append_column(KEEP, _codes(groups.codes, keep)))} "
                        f"WHERE {KEEP} <> 0")
        elif keep is not None:
            cur = q.add(f"SELECT * EXCLUDE ({KEEP}) FROM {q.frame(data.append_column(KEEP, _bytes(keep)))} "
                        f"WHERE {KEEP} <> 0")
        else:
            cur = q.add(f"SELECT * FROM {q.frame(data) if data is not table.data else table.view}")
        for node in request.row_nodes[_split(request):]:
            cur = self._node(q, cur, node, numbered)
        return cur

    @staticmethod
    def _numbered(table: _Table, data: pa.Table) -> pa.Table:
        """Arrow data with each row's position as column ``ROW`` (for a registered table's data: made once)."""
        numbered: pa.Table = table.numbered if data is table.data and table.numbered is not None else \
            data.append_column(ROW, pa.array(np.arange(data.num_rows, dtype=np.int64)))
        if data is table.data:
            table.numbered = numbered
        return numbered

    def _compile(self, request: StatisticsRequest, source: pa.Table | None, keep: Mask | None,
                 windows: _Windows | None, groups: _Groups | None = None) -> tuple[str, dict[str, Any]]:
        q = _Query()
        cur = self._scan(q, request, source, keep=keep, groups=groups)
        if keep is None:       # (the mask keeps only rows of public keys with a unit)
            cur = self._unit_rows(q, cur, request)
        nodes = request.row_nodes
        schema = nodes[-1].schema if nodes else self._tables[request.table].frame.collect_schema()
        by = [quote(b) for b in request.by] if groups is None else [KEEP]     # (grouped by the keys' codes)
        unit = request.unit
        st = Statistics(unit.column, schema, request.statistics, self._sum_type(request, source))
        bins = _bins(request)
        binned = {s for b in bins for s in b.stats}
        aggregates = [st.aggregate(s) for s in request.statistics
                      if s not in binned and (windows is None or s not in windows.windows.near)]
        carry = [*by, *([quote(unit.column)] if unit.column is not None
                        and (groups is not None or unit.column not in request.by) else [])]
        if windows is not None:
            aggregates += [a for s in windows.windows.near for a in st.window_aggregates(
                s, windows.windows.ends[windows.windows.stats.index(s)], windows.seen is not None)]
            if windows.seen is not None:   # groups the sample missed list all their codes
                carry.append("__dp_seen")
                on = " AND ".join(f"s.{b} IS NOT DISTINCT FROM z.{b}" for b in by)
                cur = q.add(f"SELECT s.*, z.__dp_seen FROM {cur} AS s LEFT JOIN {q.frame(windows.seen)} AS z ON {on}")
        counted = [b.duckdb(cur, q.frame(b.edge_frame()), f"CAST({quote(b.column)} AS DOUBLE)",
                            st.present(b.column)) + f" AS {quote(f'{_BINS}{i}')}" for i, b in enumerate(bins)]
        cur = q.add(f"SELECT {st.projection(carry)} FROM {cur}")
        final = f"SELECT {', '.join([*by, *aggregates])} FROM {cur}" + (f" GROUP BY {', '.join(by)}" if by else "")
        if counted:     # one row (no group-by): the aggregates' row, then each grid's count
            final = f"SELECT a.*, {', '.join(counted)} FROM ({final}) AS a" if aggregates else \
                f"SELECT {', '.join(counted)}"
        return q.sql(final), q.frames

    def _size(self, request: StatisticsRequest, source: pa.Table | None) -> int:
        """The number of source rows (for a Parquet file: counted once, from its metadata)."""
        table = self._tables[request.table]
        data = self._data(request, source)
        if data is not None:
            return int(data.num_rows)
        if table.rows is None:
            table.rows = int(self._run(f"SELECT count(*) AS n FROM {table.view}", {})["n"][0])
        return table.rows

    def _sum_type(self, request: StatisticsRequest, source: pa.Table | None) -> Literal["hugeint", "int64", "double"]:
        """The cheapest exact sum for the source's row count (row nodes add none: public join keys are unique)."""
        sums = [s for s in request.statistics if s.kind == "fixed_sum"]
        if not sums:
            return "hugeint"
        rows = self._size(request, source)
        if double_sums_are_exact(sums, rows):
            return "double"
        return "int64" if "sum_no_overflow" in function_types() and int64_sums_are_exact(sums, rows) else "hugeint"

    def _unit_rows(self, q: _Query, cur: str, request: StatisticsRequest) -> str:
        """Rows of the public keys (if any) with a unit (with a unit column; else every row)."""
        unit = request.unit
        if unit.column is None:
            # Nothing is bounded: rows of other groups cost nothing; _finish keeps only the public keys.
            return cur
        if request.keys is not None:
            # Rows outside the public keys must not use up a unit's max_rows / max_groups.
            keys = q.frame(_arrow(for_duckdb(request.keys.lazy()).collect(engine=ENGINE)))
            on = " AND ".join(f"s.{quote(b)} IS NOT DISTINCT FROM k.{quote(b)}" for b in request.by)
            cur = q.add(f"SELECT s.* FROM {cur} AS s SEMI JOIN {keys} AS k ON {on}")
        return q.add(f"SELECT * FROM {cur} WHERE {quote(unit.column)} IS NOT NULL")

    def _keep(self, request: StatisticsRequest, source: pa.Table | None) -> Mask:
        """The bounding mask: which positions of the source rows contribution bounding keeps.

        Where the ranked rows are the source's own Arrow rows and Polars can tell which of them are ranked
        exactly as DuckDB's SQL would (:func:`_row_order`), one query hashes the rows bounding may drop (of
        units with more than ``max_rows`` ranked rows; a unit with fewer keeps them all, whatever their
        hashes), in the source's order (a ``SELECT`` from one table, filtered by a mask column: DuckDB
        keeps the row order, ``preserve_insertion_order``), so their positions are implicit: no row
        number, no join. Which rows those are depends on no seed: it is found once per registered table
        and public parameters (:meth:`_ranking`). Otherwise one query returns the candidates (rows of the
        public keys with a unit, of the chosen groups with ``max_groups``): position, unit and hash.
        Either way the kept positions are :func:`~dpframe.backends._bounding.kept` of them
        (:meth:`_definition` decides the rare units the fast steps leave open).
        """
        unit = request.unit
        assert unit.column is not None
        u, by = quote(unit.column), [quote(b) for b in request.by]
        seed = request.seed & _SEED_MASK
        row_seed = seed ^ _ROW_SALT
        used = sorted({s.column for s in request.statistics if s.column is not None} - {unit.column, *request.by})
        unit_and_keys = list(dict.fromkeys([u, *by]))
        hashed = _hash(list(dict.fromkeys([*unit_and_keys, *(quote(c) for c in used)])), row_seed)
        q = _Query()
        rank = None if request.row_nodes[_split(request):] else self._ranking(request, source)
        if rank is not None:
            held = source if source is not None else self._tables[request.table].data    # (not a file's columns)
            local = _local_hashes(held, [unit.column, *request.by, *used], row_seed)
            if rank.hashed is None:     # every row may be dropped: hash them all, no filter
                hashes = local() if local is not None else self._hashes(
                    q.sql(f"SELECT {hashed} FROM {self._scan(q, request, source)}"), q.frames, rank.every.len())
                return self._kept(rank.units, hashes, None, row_seed, unit.max_rows)
            assert rank.ranked is not None
            keep = empty(rank.ranked.size, np.bool_)
            np.copyto(keep, rank.ranked)
            if rank.units.len():
                assert rank.rows is not None
                if local is not None:
                    hashes = empty(rank.rows.size, np.uint64)
                    np.take(local(), rank.rows, out=hashes)
                else:
                    cur = self._scan(q, request, source, keep=rank.hashed)
                    hashes = self._hashes(q.sql(f"SELECT {hashed} FROM {cur}"), q.frames, rank.rows.size)
                # (the hashed rows are ranked rows: one scatter, not a boolean index of the dropped ones, 4x slower)
                keep[rank.rows] = self._kept(rank.units, hashes, rank.rows, row_seed, unit.max_rows)
            return keep
        cur = self._unit_rows(q, self._scan(q, request, source, numbered=True), request)
        if by and unit.max_groups is not None and unit.max_groups < unit.max_rows:
            pairs = self._run(q.sql(f"SELECT {', '.join(unit_and_keys)}, {_hash(unit_and_keys, seed)} "
                                    f"AS __dp_hash, row_number() OVER () AS {ROW} FROM (SELECT DISTINCT "
                                    f"{', '.join(unit_and_keys)} FROM {cur})"), q.frames)
            chosen = pairs.filter(self._kept(pairs[unit.column], pairs["__dp_hash"].to_numpy(), pairs[ROW].to_numpy(),
                                             seed, unit.max_groups)).drop("__dp_hash", ROW)
            on = " AND ".join(f"s.{c} IS NOT DISTINCT FROM p.{c}" for c in unit_and_keys)
            cur = q.add(f"SELECT s.* FROM {cur} AS s SEMI JOIN {q.frame(_arrow(chosen))} AS p ON {on}")
        rows = self._run(q.sql(f"SELECT {ROW}, {u}, {hashed} AS __dp_hash FROM {cur}"), q.frames)
        positions = rows[ROW].to_numpy()
        keep = np.zeros(self._size(request, source), dtype=bool)
        keep[positions[self._kept(rows[unit.column], rows["__dp_hash"].to_numpy(), positions, row_seed,
                                  unit.max_rows)]] = True
        return keep

    def _ranking(self, request: StatisticsRequest, source: pa.Table | None) -> _Ranking | None:
        """Which rows bounding ranks and may drop (:class:`_Ranking`); ``None`` where not by row order.

        The source's rows in their order: Arrow data, or a Parquet file's columns the request reads as
        DuckDB reads them by a plain scan (in the file's order, as every scan of it), then kept in memory
        (:class:`_Columns`). On a registered table the same public parameters find the ranking again: a
        change of the seed (or of the statistics) changes only the hashes. The first query hashes every
        ranked row (on a Parquet file whose columns are not in memory yet it is the numbered query); the
        second finds which rows need no hash (a count per unit: paid only where the table is queried
        again, not by a session's first answer). Computing it raises nothing on any data (no cast, no
        conversion that could fail).
        """
        unit, table = request.unit, self._tables[request.table]
        assert unit.column is not None
        data = self._data(request, source)
        if data is None:       # a Parquet file: its columns' types as DuckDB reads them (found once)
            if table.types is None:
                table.types = self._con.sql(f"SELECT * FROM {table.view} LIMIT 0").to_arrow_table()
        if not _row_order(request, data if data is not None else table.types):
            return None
        key = (unit.column, request.by, unit.max_rows)
        found = table.ranking if source is None else None
        if found is not None and found.key == key and _same(found.keys, request.keys):
            if not found.settled:
                groups = found.groups
                found = table.ranking = _Ranking.of(key, request.keys, found.every,
                                                    crowded(found.every, unit.max_rows), True)
                found.groups = groups
            names = self._to_hold(request) if data is None else None
            if names is not None:   # a Parquet file whose columns in memory lack one this request reads
                self._read_columns(table, names)
            return found
        if data is None:
            asked, table.asked = table.asked, (key, request.keys)
            if asked is None or asked[0] != key or not _same(asked[1], request.keys):
                return None     # a first query: the numbered one (reading the columns first would not pay)
            names = self._to_hold(request)
            if names is not None:
                every = _ranked_units(request, self._read_columns(table, names))
            else:                 # too large to hold: the unit and key columns only
                columns = ", ".join(quote(c) for c in dict.fromkeys([unit.column, *request.by]))
                every = _ranked_units(request, self._con.sql(f"SELECT {columns} FROM {table.view}").to_arrow_table())
            table.ranking = _Ranking.of(key, request.keys, every, crowded(every, unit.max_rows), True)
            return table.ranking
        groups = _key_codes(request, data) if source is None and data is table.data else None
        ranking = _Ranking.of(key, request.keys, _ranked_units(request, data, groups), None, False)
        ranking.groups = groups
        if source is None:
            table.ranking = ranking
        return ranking

    def _groups(self, request: StatisticsRequest, source: pa.Table | None) -> _Groups | None:
        """The key codes of the request's ranking (:class:`_Groups`), where its statistics can use them."""
        table = self._tables[request.table]
        found = table.ranking
        if source is not None or request.row_nodes or found is None or found.groups is None or _bins(request) \
                or self._data(request, source) is not table.data:
            return None
        unit = request.unit
        if found.key != (unit.column, request.by, unit.max_rows) or not _same(found.keys, request.keys):
            return None
        return found.groups

    def _kept(self, units: pl.Series, hashes: U64s, order: Rows | None, seed: int, k: int) -> Mask:
        """The bounding law on rows given by their unit (null: not ranked), hash and order (``None``: as given).

        ``order`` breaks ties and numbers copies (:meth:`_definition`): the rows' source positions.
        """
        def rehash(h: U64s, copy: Rows) -> U64s:
            frame = pa.table({"h": pa.array(h, pa.uint64()), "c": pa.array(copy, pa.int64())})
            out: U64s = self._run(f"SELECT hash(h, c, {seed}) AS h FROM __dp_copies", {"__dp_copies": frame}
                                  )["h"].to_numpy()
            return out

        def exact(at: Rows) -> Mask:
            return self._definition(units.gather(at), hashes[at], at if order is None else order[at], seed, k)

        return kept(units, hashes, k, seed ^ UNIT_SALT, rehash, exact)

    def _definition(self, units: pl.Series, hashes: U64s, order: Rows, seed: int, k: int) -> Mask:
        """The law itself in SQL on a few rows: copies numbered in ``order``, ranks by (hash, ``order``)."""
        data = _arrow(pl.DataFrame({"__dp_unit": units, "__dp_hash": pl.Series(hashes, dtype=pl.UInt64),
                                    ROW: pl.Series(order, dtype=pl.Int64)}).with_row_index("__dp_i"))
        out = self._run(f"SELECT __dp_i FROM (SELECT *, row_number() OVER (PARTITION BY __dp_unit, __dp_hash ORDER "
                        f"BY {ROW}) - 1 AS __dp_copy FROM __dp_rows) QUALIFY rank() OVER (PARTITION BY __dp_unit ORDER "
                        f"BY CASE WHEN __dp_copy = 0 THEN __dp_hash ELSE hash(__dp_hash, __dp_copy, {seed}) END, "
                        f"{ROW}) <= {k}", {"__dp_rows": data})
        mask = np.zeros(units.len(), dtype=bool)
        mask[out["__dp_i"].to_numpy()] = True
        return mask

    def _windows(self, request: StatisticsRequest, source: pa.Table | None, keep: Mask | None,
                 near: list[Statistic]) -> _Windows | None:
        """Sample the codes of ``near`` (Bernoulli, one row in the stride, seeded) and place the rank windows."""
        by = [quote(b) for b in request.by]
        nodes = request.row_nodes
        schema = nodes[-1].schema if nodes else self._tables[request.table].frame.collect_schema()
        q = _Query()
        cur = self._scan(q, request, source, keep=keep)
        if keep is None:
            cur = self._unit_rows(q, cur, request)
        st = Statistics(request.unit.column, schema)
        codes = [f"list({st.code(s)}) FILTER (WHERE {st.code(s)} IS NOT NULL) AS {quote(code_column(i))}"
                 for i, s in enumerate(near)]
        cur = q.add(f"SELECT {st.projection(by)} FROM {cur}")
        stride = SAMPLE_STRIDE if by else SINGLE_STRIDE
        # seeded (a repeatable sample: one seed, one placement, as Spark's and Polars' stride); only where the windows
        # sit depends on it, never what is released (SortedCodes completes a window that missed: test_review55f.py)
        sampled = self._run(q.sql(f"SELECT {', '.join([*by, *codes])} FROM {cur} TABLESAMPLE {100 / stride}% "
                                  f"(bernoulli, {request.seed & 0x7FFFFFFF})"
                                  + (f" GROUP BY {', '.join(by)}" if by else "")), q.frames)
        sampled = _as_schema(sampled, list(request.by), schema).with_columns(
            [pl.col(code_column(i)).cast(pl.List(pl.Int64)).fill_null(pl.lit([], dtype=pl.List(pl.Int64)))
               for i in range(len(near))])
        windows = RankWindows.placed(sampled, near, list(request.by), stride)
        if windows is None:
            return None
        return _Windows(windows, _arrow(windows.sampled.with_columns(pl.lit(True).alias("__dp_seen"))) if by else None)

    def _node(self, q: _Query, cur: str, node: RowNode, numbered: bool = False) -> str:
        if isinstance(node, SQLFilter):
            return q.add(f"SELECT * FROM {cur} WHERE {guard(node.sql)}")
        if isinstance(node, SQLProject):
            items = ", ".join(f"{guard(sql)} AS {quote(name)}" for name, sql in node.items)
            return q.add(f"SELECT {items}{f', {ROW}' if numbered else ''} FROM {cur}")
        assert isinstance(node, PublicJoin)
        public = q.frame(node.data.to_arrow())
        added = "".join(f", r.{quote(c)}" for c in node.added)
        on = " AND ".join(f"l.{quote(a)} = r.{quote(b)}" for a, b in zip(node.left_on, node.right_on))
        how = "LEFT" if node.how == "left" else "INNER"
        return q.add(f"SELECT l.*{added} FROM {cur} AS l {how} JOIN {public} AS r ON {on}")

    @staticmethod
    def _finish(out: pl.DataFrame, request: StatisticsRequest, schema: pl.Schema,
                windows: RankWindows | None) -> pl.DataFrame:
        near = windows.near if windows is not None else []
        names = [s.key for s in request.statistics]
        by = list(request.by)
        types: dict[str, pl.DataType] = {
            s.key: pl.List(pl.Int64) if s.kind in LIST_KINDS else pl.Int64() for s in request.statistics}
        out = out.with_columns([pl.col(n).cast(t) for n, t in types.items()])
        helpers = [c for s in near for c in out.columns if c.startswith(f"{s.key}#")]
        out = out.with_columns([pl.col(c).cast(pl.Int64) for c in helpers])
        if by:
            # Keys come back with the plan's types (DuckDB may return e.g. a Categorical as a String).
            out = _as_schema(out, by, schema)
            if request.keys is not None:
                out = out.with_columns([pl.col(b).cast(request.keys.schema[b]) for b in by])
                out = (request.keys.join(out, on=by, how="left", nulls_equal=True)
                       .with_columns([pl.col(n).fill_null(pl.lit([], dtype=t) if t == pl.List(pl.Int64) else 0)
                                      for n, t in types.items()])
                       .with_columns(fill_missing_groups(near)))
            out = out.sort(by, nulls_last=False)
        return finish_lists(out, windows).select([*by, *names])


_BINS = "__dp_bins"   # a grid's (bin, count) pairs, one column per binned column (ungrouped queries)


def _bins(request: StatisticsRequest) -> list[Bins]:
    """The request's grids of adjacent bins, counted in one pass (ungrouped queries: :mod:`~dpframe.backends.bins`)."""
    return [] if request.by else adjacent_bins(request.statistics)


def _hash(columns: list[str], seed: int) -> str:
    """SQL for a seeded 64-bit hash of a row's values in ``columns`` (quoted), each with its null flag.

    DuckDB hashes NULL like one particular value of each type (a BIGINT and a DOUBLE value hash exactly as
    NULL does, whatever the seed), so without the flags a row holding that value and one holding NULL would
    be copies of each other, and which of the two a unit keeps would depend on their order.

    Example:
        >>> _hash(['"u"', '"x"'], 7)
        'hash("u", "u" IS NULL, "x", "x" IS NULL, 7)'

    """
    return f"hash({', '.join(f'{c}, {c} IS NULL' for c in columns)}, {seed})"


def _local_hashes(data: pa.Table | None, columns: list[str], seed: int) -> Callable[[], U64s] | None:
    """The row hashes of Arrow rows in this process (Polars' seeded ``hash_rows``, as the Polars backend's), or None.

    Faster than DuckDB hashing the rows and handing them back (10M rows: 53 ms for all of them, against
    80 ms for DuckDB's 5.4M of units over ``max_rows``; with the gather of those, an open session gains
    little, a session's first query, which hashes every row, 8-10 %). The law needs only some seeded
    hash under which rows a statistic cannot tell apart are equal, and both backends' are (NULL included:
    Polars hashes it apart from every value). Only for an in-memory table or the method chain's rows: a
    Parquet file's rows are hashed by DuckDB on every path (whether its columns are held in memory
    depends on the query's history and the machine's memory, and a seeded query keeps the same rows
    either way); dictionary-encoded strings too, which decoding would cost more than the hash saves.

    Example:
        >>> h = _local_hashes(pa.table({"u": [1, 1, 2], "x": [0.5, 0.5, None]}), ["u", "x"], 7)
        >>> h is not None and [int(v) for v in h()] == [int(v) for v in row_hashes(pl.DataFrame(
        ...     {"u": [1, 1, 2], "x": [0.5, 0.5, None]}), 7)]
        True

    """
    if data is None:
        return None
    names = list(dict.fromkeys(columns))
    if any(pa.types.is_dictionary(data.schema.field(c).type) for c in names):
        return None
    frame = pl.from_arrow(data.select(names))
    assert isinstance(frame, pl.DataFrame)
    return lambda: row_hashes(frame, seed)


def _memory() -> int:
    """The machine's memory in bytes (8 GiB where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def _read(request: StatisticsRequest) -> list[str]:
    """The columns a request's bounding and statistics read: unit, keys, measured columns."""
    used = [s.column for s in request.statistics if s.column is not None]
    return list(dict.fromkeys([c for c in (request.unit.column, *request.by, *used) if c is not None]))


def _dictionary(data: pa.Table) -> pa.Table:
    """``data`` with its string columns dictionary-encoded.

    Example:
        >>> _dictionary(pa.table({"s": ["a", "b", "a"], "x": [1, 2, 3]})).schema.types
        [DictionaryType(dictionary<values=string, indices=int32, ordered=0>), DataType(int64)]

    """
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    return pa.table({name: column.dictionary_encode() if any(f(column.type) for f in strings) else column
                     for name, column in zip(data.column_names, data.columns)})


def _plain(data: pa.Table) -> pl.DataFrame:
    """``data`` read by Polars with its dictionary-encoded columns decoded (their values' type, not categoricals).

    Decoded by Polars: ``pyarrow`` has no kernel for a dictionary of string views (a Polars ``Categorical`` or
    ``Enum`` handed over), and its cast failed every bounded query on one after its charge.

    Example:
        >>> _plain(_dictionary(pa.table({"s": ["a", "b"]}))).dtypes
        [String]
        >>> _plain(_arrow(pl.DataFrame({"c": pl.Series(["a"], dtype=pl.Categorical)}))).dtypes
        [String]

    """
    frame = pl.from_arrow(data)
    assert isinstance(frame, pl.DataFrame)
    decoded = {f.name: pl.from_arrow(pa.array([], f.type.value_type)).dtype  # type: ignore[union-attr]
               for f in data.schema if pa.types.is_dictionary(f.type)}
    return frame.with_columns(pl.col(name).cast(dtype) for name, dtype in decoded.items()) if decoded else frame


def _split(request: StatisticsRequest) -> int:
    """How many of the request's row nodes run in Polars: up to the last one that is not an SQL node."""
    return max((i + 1 for i, n in enumerate(request.row_nodes) if not isinstance(n, _SQL_NODES)), default=0)


def _row_order(request: StatisticsRequest, data: pa.Table) -> bool:
    """Whether Polars can tell which rows bounding ranks exactly as DuckDB's SQL would (:func:`_ranked_units`).

    A row is ranked iff its unit is not null and, with public keys, its group is one of them (rows outside
    the keys use none of a unit's quota). Polars' ``is_in`` (nulls matching nulls) decides that as
    DuckDB's ``IS NOT DISTINCT FROM`` does for key columns of types whose values are equal exactly when
    their bits are (:data:`_BITWISE`, the keys of the same types; several columns: a semi-join, nulls
    equal); other keys (floats: NaN, -0.0) and ``max_groups`` are left to SQL.

    Example:
        >>> from dpframe.mechanism import Statistic
        >>> from dpframe.privacy_unit import PrivacyUnit
        >>> req = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=1), ("g",), pl.DataFrame({"g": [0.5]}),
        ...                         (Statistic("rows"),), 7)
        >>> _row_order(req, pa.table({"u": [1], "g": [0.5]}))
        False

    """
    unit, by = request.unit, list(request.by)
    if by and unit.max_groups is not None and unit.max_groups < unit.max_rows:
        return False
    if request.keys is None:
        return True
    schema = _plain(data.select(by).slice(0, 0)).schema
    return all(request.keys.schema[b] == schema[b] and isinstance(schema[b], _BITWISE) for b in by)


def _ranked_units(request: StatisticsRequest, data: pa.Table, groups: _Groups | None = None) -> pl.Series:
    """Each row's unit where bounding ranks the row, null where it does not (see :func:`_row_order`).

    ``groups``: the rows' key codes (:func:`_key_codes`), which say which rows are of the keys (code ≠ 0).

    Example:
        >>> from dpframe.mechanism import Statistic
        >>> from dpframe.privacy_unit import PrivacyUnit
        >>> req = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=1), ("g",), pl.DataFrame({"g": ["a"]}),
        ...                         (Statistic("rows"),), 7)
        >>> _ranked_units(req, pa.table({"u": [1, None, 2], "g": ["a", "a", "b"]})).to_list()
        [1, None, None]

    """
    unit, by = request.unit, list(request.by)
    assert unit.column is not None
    frame = _plain(data.select(list(dict.fromkeys([unit.column, *by]))))
    if request.keys is None:
        return frame[unit.column]
    if groups is not None:
        inside = pl.Series(groups.codes != 0)
    elif len(by) == 1:
        # (in a select: Polars runs it on the chunks in parallel, twice as fast as Series.is_in on 2 cores)
        inside = frame.select(pl.col(by[0]).is_in(request.keys[by[0]].implode(), nulls_equal=True)).to_series()
    else:      # a semi-join (nulls equal), as the SQL's: the positions of the rows of the keys
        index = "i" * (1 + max(len(c) for c in frame.columns))
        found = frame.select(by).with_row_index(index).join(request.keys.select(by), on=by, how="semi",
                                                            nulls_equal=True)[index].to_numpy()
        mask = np.zeros(frame.height, dtype=bool)
        mask[found] = True
        inside = pl.Series(mask)
    return frame[unit.column] if inside.all() else frame.select(pl.when(inside).then(pl.col(unit.column))).to_series()


def _key_codes(request: StatisticsRequest, data: pa.Table) -> _Groups | None:
    """Each row's public key as 1 + its index in the keys' distinct values, 0 outside them (:class:`_Groups`).

    For one string key column (as Polars' ``is_in`` of :func:`_ranked_units`: a string is a key exactly when
    its bytes are one's, null when a key is null); ``None`` otherwise.

    Example:
        >>> from dpframe.mechanism import Statistic
        >>> from dpframe.privacy_unit import PrivacyUnit
        >>> keys = pl.DataFrame({"g": ["b", None, "a"]})
        >>> req = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=1), ("g",), keys, (Statistic("rows"),), 7)
        >>> found = _key_codes(req, pa.table({"u": [1, 2, 3, 4], "g": ["a", "c", None, "b"]}))
        >>> found is not None and (found.codes.tolist(), found.values.to_list())
        ([2, 0, 3, 1], ['b', 'a', None])

    """
    if request.keys is None or len(request.by) != 1:
        return None
    name = request.by[0]
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    if not any(f(data.schema.field(name).type) for f in strings) or request.keys.schema[name] != pl.String:
        return None
    keys = request.keys[name]
    values = keys.drop_nulls().unique(maintain_order=True)
    null = bool(keys.null_count())
    count = values.len() + null
    if not count:
        return None
    dtype = pl.UInt16 if count < 2**16 else pl.UInt32
    frame = pl.from_arrow(data.select([name]))
    assert isinstance(frame, pl.DataFrame)
    code = pl.col(name).cast(pl.Enum(values), strict=False).to_physical().cast(dtype) + 1
    if null:
        code = pl.when(pl.col(name).is_null()).then(pl.lit(count, dtype)).otherwise(code)
    codes = frame.select(code.fill_null(0)).to_series().to_numpy()
    return _Groups(codes, values.extend(pl.Series([None], dtype=pl.String)) if null else values)


def _codes(codes: np.ndarray[Any, Any], keep: Mask) -> pa.Array:
    """``codes × keep`` (a dropped row's code 0) as an Arrow column, in memory from Arrow's pool (no fresh pages).

    Example:
        >>> _codes(np.array([3, 0, 2], dtype=np.uint16), np.array([True, True, False])).to_pylist()
        [3, 0, 0]

    """
    out = empty(codes.size, codes.dtype.type)
    in_steps(lambda a, b: np.multiply(codes[a:b], keep[a:b], out=out[a:b]), codes.size)
    return pa.array(out)


def _same(a: pl.DataFrame | None, b: pl.DataFrame | None) -> bool:
    """Whether two sets of public keys are the same frame (values and types; both absent counts).

    Example:
        >>> _same(pl.DataFrame({"g": [1]}), pl.DataFrame({"g": [1.0]})), _same(None, None)
        (False, True)

    """
    if a is None or b is None:
        return a is b
    return a.schema == b.schema and a.equals(b)


def _bytes(mask: Mask) -> pa.Array:
    """A boolean mask as an Arrow ``uint8`` column (0/1), without a copy.

    DuckDB filters on it faster than on Arrow's bit-packed booleans, which would also have to be packed
    first (measured: 8% of the statistics query at 10M rows).

    Example:
        >>> _bytes(np.array([True, False])).to_pylist()
        [1, 0]

    """
    return pa.array(np.ascontiguousarray(mask).view(np.uint8))


def _as_schema(frame: pl.DataFrame, columns: list[str], schema: pl.Schema) -> pl.DataFrame:
    """``frame`` with ``columns`` (DuckDB's group keys) in their ``schema`` types (a non-strict cast).

    A decimal DuckDB was handed as ``DECIMAL(38, s)`` (:func:`duckdb_type`) goes back to its precision
    unchecked, as Polars holds it: a value stored beyond the precision stays that value, not null.

    Example:
        >>> from decimal import Decimal
        >>> out = pl.DataFrame({"d": [Decimal("1234.5")]}, schema={"d": pl.Decimal(38, 1)})
        >>> typed = _as_schema(out, ["d"], pl.Schema({"d": pl.Decimal(3, 1)}))["d"]
        >>> typed.dtype, typed.cast(pl.Float64).to_list()
        (Decimal(precision=3, scale=1), [1234.5])

    """
    casts: list[pl.Expr | pl.Series] = []
    for name in columns:
        have, want = frame.schema[name], schema[name]
        if have == want:
            continue
        if isinstance(have, pl.Decimal) and isinstance(want, pl.Decimal) and have.scale == want.scale:
            column = frame[name].to_arrow().cast(pa.decimal128(want.precision, want.scale), safe=False)
            casts.append(pl.Series(name, column))
        else:
            casts.append(pl.col(name).cast(want, strict=False))
    return frame.with_columns(casts) if casts else frame


def _arrow(frame: pl.DataFrame) -> pa.Table:
    """A Polars frame as Arrow for DuckDB, zero-copy (strings and binaries as views)."""
    return frame.to_arrow(compat_level=pl.CompatLevel.newest())
