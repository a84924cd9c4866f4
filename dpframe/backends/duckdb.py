"""The DuckDB backend: the stable part of a plan as ONE DuckDB query that returns the statistics.

What runs in DuckDB, in one ``WITH ... SELECT`` statement:

1. the registered table (an Arrow table handed over by Polars, or a Parquet file DuckDB scans itself),
   each row numbered (``__dp_row``, used only to break ties between identical rows);
2. the row-level SQL nodes built by ``sess.sql`` (filters, projections, joins with public tables),
   each expression evaluated under ``TRY(...)`` so no private value can make the query fail;
3. the semi-join with the public group keys, then contribution bounding: rows with a NULL unit are
   dropped; with ``max_groups`` each unit keeps the distinct keys with the smallest seeded hash of
   (unit, keys) (ties broken by the keys); then each unit keeps its ``max_rows`` rows with the smallest
   seeded hash of the values the statistics read (unit, keys, measured columns), ties broken by
   ``__dp_row`` — so never more than ``min(n, max_rows)`` rows (only units with more rows are ranked:
   the window runs on their rows alone, and the rows it ranks past ``max_rows`` are anti-joined away by
   ``__dp_row``; the same rows as one window over every unit). Copies of a row (equal in every hashed
   column) are numbered 0, 1, ... within the unit by a window partitioned by (unit, hash), and copy
   j ≥ 1 is ranked by the hash of (hash, j): each row, not each distinct row, is equally likely to be
   kept. As in the Polars backend, which *values* a unit keeps depends only on its own rows and the seed
   (not on row order or other units): bounding is a stable transformation for every seed; the row
   number only picks among rows that agree on every hashed column, which are interchangeable for the
   statistics;
4. the exact integer statistics per group (the same definitions as the Polars backend: fixed-point
   clamped sums truncated onto the grid, NaN and NULL ignored, ±inf clamped).

Public keys with no rows get zeros; rows come back sorted by key (nulls first). Noise is never drawn in
SQL: the result goes back to the mechanisms in Python.

Plans built by the method chain hold Polars expressions that DuckDB cannot run: those row nodes are
applied by Polars (lazily, then collected to Arrow once) and DuckDB does the keys, bounding and
aggregation on the result.

Privacy of the connection: an in-memory DuckDB database private to this backend, Python replacement
scans off (no variable of the caller is visible), extension auto-loading off, and — from the first query
on — external access off (except the registered Parquet files) with the configuration locked.

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
import threading
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from dpframe.backends.base import StatisticsRequest
from dpframe.errors import SchemaError
from dpframe.mechanism import LIST_KINDS, SUM_LIMIT, Statistic
from dpframe.plan.nodes import RowNode
from dpframe.plan.sample import apply_node
from dpframe.plan.values import instance as _instance
from dpframe.sql.nodes import PublicJoin, SQLFilter, SQLProject, guard
from dpframe.sql.sandbox import connect, literal, lock, quote

ROW = "__dp_row"
_SQL_NODES = (SQLFilter, SQLProject, PublicJoin)
_SEED_MASK = (1 << 63) - 1


def _first_line(error: BaseException, limit: int = 200) -> str:
    """The first paragraph of an engine's error message, on one line (Polars puts newlines in quotes)."""
    text = " ".join(str(error).strip().split("\n\n")[0].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _duckdb_type(dtype: pl.DataType) -> pl.DataType:
    """The type a column is handed to DuckDB as, so that no value can make DuckDB fail reading it.

    DuckDB keeps times in microseconds: a millisecond datetime beyond its range raises a conversion error
    *when a row is read* (which rows reach the engine is private); Arrow cannot carry Polars' 128-bit
    integers; and a duration comes back from DuckDB as an interval Polars cannot read. They become
    microseconds, ``DECIMAL(38, 0)`` and the duration's integer count of its unit (a group key is cast
    back to its type when the result returns); a value that does not fit becomes null (non-strict
    cast), as the Polars backend's statistics would not read it either.

    Example:
        >>> _duckdb_type(pl.List(pl.Datetime("ms", "UTC"))), _duckdb_type(pl.Int128()), _duckdb_type(pl.Duration())
        (List(Datetime(time_unit='us', time_zone='UTC')), Decimal(precision=38, scale=0), Int64)

    """
    if isinstance(dtype, pl.Datetime) and dtype.time_unit == "ms":
        return pl.Datetime("us", dtype.time_zone)
    if isinstance(dtype, pl.Duration):
        return pl.Int64()
    if dtype in (pl.Int128, pl.UInt128):
        return pl.Decimal(38, 0)
    if isinstance(dtype, pl.List):
        return pl.List(_duckdb_type(_instance(dtype.inner)))
    if isinstance(dtype, pl.Array):
        return pl.Array(_duckdb_type(_instance(dtype.inner)), dtype.size)
    if isinstance(dtype, pl.Struct):
        return pl.Struct({f.name: _duckdb_type(_instance(f.dtype)) for f in dtype.fields})
    return dtype


def _for_duckdb(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``frame`` with every column in its :func:`_duckdb_type` (unchanged when all already are)."""
    schema = frame.collect_schema()
    casts = [pl.col(name).cast(_duckdb_type(t), strict=False) for name, t in schema.items() if _duckdb_type(t) != t]
    return frame.with_columns(casts) if casts else frame


def _double(value: Any) -> str:
    """An exact DOUBLE literal (parsed from Python's round-trip repr)."""
    return f"CAST({literal(repr(float(value)))} AS DOUBLE)"


class Statistics:
    """The DuckDB SQL computing a request's statistics exactly (BIGINTs named ``stat.key``).

    Definitions as in the Polars backend: NULL and NaN are not values; values are cast to DOUBLE, clamped
    (±inf too), shifted, raised to ``power``, scaled to the 2^grid_exp grid, truncated toward zero onto
    it (so ``|term| ≤ Statistic.row_bound()``), and the integers summed exactly (HUGEINT); terms and totals
    are clipped to ±SUM_LIMIT. A projection computes
    each clamped column once (NULL when the value is NULL or NaN); the aggregates then read it.

    Example:
        >>> from fractions import Fraction
        >>> st = Statistics(None, pl.Schema({"x": pl.Float64}))
        >>> st.aggregate(Statistic("nonnull", "x"))
        'CAST(count("__dp_v0") AS BIGINT) AS "__nonnull:x"'

    """

    def __init__(self, unit: str | None, schema: pl.Schema, statistics: tuple[Statistic, ...] = ()) -> None:
        self.unit, self.schema = unit, schema
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

    def _present(self, column: str) -> str:
        """True for a value, NULL/false for NULL and NaN (``isnan(NULL)`` is NULL)."""
        col = quote(column)
        return f"NOT isnan({col})" if self.schema[column].is_float() else f"{col} IS NOT NULL"

    def _clamp(self, stat: Statistic) -> str:
        assert stat.column is not None
        value = f"CAST({quote(stat.column)} AS DOUBLE)"
        lo, hi = _double(stat.lower), _double(stat.upper)
        return self._value(f"CASE WHEN {self._present(stat.column)} THEN least(greatest({value}, {lo}), {hi}) END")

    def aggregate(self, stat: Statistic) -> str:
        """The aggregate for one statistic (registering the projected value it reads)."""
        key = quote(stat.key)
        if stat.kind == "rows":
            return f"CAST(count(*) AS BIGINT) AS {key}"
        if stat.kind == "units":
            return f"CAST(count(DISTINCT {quote(self.unit)}) AS BIGINT) AS {key}" if self.unit else \
                f"CAST(count(*) AS BIGINT) AS {key}"
        assert stat.column is not None
        present = self._present(stat.column)
        value = f"CAST({quote(stat.column)} AS DOUBLE)"
        if stat.kind == "nonnull":
            counted = self._clamped.get(stat.column) or self._value(f"CASE WHEN {present} THEN 1 END")
            return f"CAST(count({counted}) AS BIGINT) AS {key}"
        assert stat.lower is not None and stat.upper is not None
        if stat.kind == "sorted":
            code = self._code(stat)
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
        total = f"coalesce(sum(CAST(trunc({term}) AS BIGINT)), 0)"
        return f"CAST(least(greatest({total}, -{SUM_LIMIT}), {SUM_LIMIT}) AS BIGINT) AS {key}"

    def _code(self, stat: Statistic) -> str:
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
            number = f"CAST(epoch_{dtype.time_unit or 'us'}({col}) AS HUGEINT)"
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


class DuckDBBackend:
    """Runs plans in a private, locked DuckDB connection (see the module docstring)."""

    name = "duckdb"

    def __init__(self) -> None:
        self._con = connect(locked=False)
        self._frames: dict[str, pl.LazyFrame] = {}
        self._views: dict[str, str] = {}
        self._paths: list[str] = []
        self._locked = False
        self._mutex = threading.Lock()

    # ---------------------------------------------------------------------------------- registration
    def register(self, name: str, source: pl.LazyFrame) -> None:
        """Own a private table given as a Polars LazyFrame (collected once into Arrow)."""
        self.register_source(name, source, None)

    def register_source(self, name: str, frame: pl.LazyFrame, source: object) -> None:
        """Own a private table; a Parquet path is scanned by DuckDB itself, anything else via Arrow."""
        schema = frame.collect_schema()
        if ROW in schema:
            raise SchemaError(f"table {name!r} has a column named {ROW!r}, which the DuckDB backend reserves",
                              argument="tables", fix="rename that column")
        lowered = [c.lower() for c in schema.names()]
        clash = sorted({c for c in schema.names() if lowered.count(c.lower()) > 1})
        if clash:
            raise SchemaError(f"table {name!r} has columns that differ only in case ({clash}), which DuckDB "
                              "cannot tell apart", argument="tables", fix="rename them")
        with self._mutex:
            internal = f"__dp_t{len(self._views)}"
            path = self._parquet(source, schema)
            try:
                if path is not None:
                    self._con.execute(f"CREATE VIEW {internal} AS SELECT * EXCLUDE (file_row_number), file_row_number "
                                      f"AS {ROW} FROM read_parquet({literal(path)}, file_row_number=true)")
                else:
                    self._con.register(internal, _for_duckdb(frame).collect().with_row_index(ROW).to_arrow())
            except (pl.exceptions.PolarsError, duckdb.Error, pa.ArrowException, OSError) as e:
                # Run by the data owner when the session is created (a malformed CSV, an unreadable file ...).
                raise SchemaError(f"cannot read table {name!r}: {type(e).__name__}: {_first_line(e)}",
                                  argument=f"tables[{name!r}]",
                                  fix="check the file (a CSV needs the same number of fields on every line) "
                                      "or load it yourself and pass a DataFrame") from e
            if path is not None:
                self._paths.append(path)
            self._views[name] = internal
            self._frames[name] = frame

    def _parquet(self, source: object, schema: pl.Schema) -> str | None:
        if self._locked or not isinstance(source, str | Path) or Path(source).suffix.lower() != ".parquet" \
                or any(_duckdb_type(t) != t for t in schema.dtypes()):   # DuckDB would read such columns itself
            return None
        path = str(Path(source).resolve())
        try:
            names = [r[0] for r in self._con.execute(
                f"DESCRIBE SELECT * FROM read_parquet({literal(path)})").fetchall()]
        except duckdb.Error:
            return None
        return path if names == list(schema.names()) and "file_row_number" not in names else None

    def supports(self, node: RowNode) -> str | None:
        """Every row node runs here (SQL nodes in DuckDB, method-chain nodes through Polars)."""
        return None

    # ------------------------------------------------------------------------------------ statistics
    def compile(self, request: StatisticsRequest) -> tuple[str, dict[str, Any]]:
        """The SQL of the statistics query and the frames it needs registered (for tests and EXPLAIN)."""
        q = _Query()
        nodes = request.row_nodes
        split = max((i + 1 for i, n in enumerate(nodes) if not isinstance(n, _SQL_NODES)), default=0)
        if split:
            frame = self._frames[request.table]
            for position, node in enumerate(nodes[:split]):
                frame = apply_node(node, frame, request.seed, position)
            source = q.frame(_for_duckdb(frame).with_row_index(ROW).collect().to_arrow())
        else:
            source = self._views[request.table]
        cur = q.add(f"SELECT * FROM {source}")
        for node in nodes[split:]:
            cur = self._node(q, cur, node)
        schema = nodes[-1].schema if nodes else self._frames[request.table].collect_schema()
        cur = self._bound(q, cur, request)
        by = [quote(b) for b in request.by]
        unit = request.unit
        st = Statistics(unit.column, schema, request.statistics)
        aggregates = [st.aggregate(s) for s in request.statistics]
        carry = [*by, *([quote(unit.column)] if unit.column is not None and unit.column not in request.by else [])]
        cur = q.add(f"SELECT {st.projection(carry)} FROM {cur}")
        final = f"SELECT {', '.join([*by, *aggregates])} FROM {cur}" + (f" GROUP BY {', '.join(by)}" if by else "")
        return q.sql(final), q.frames

    def _bound(self, q: _Query, cur: str, request: StatisticsRequest) -> str:
        """Public-key semi-join, then contribution bounding (null units dropped, max_groups, max_rows)."""
        by = [quote(b) for b in request.by]
        unit = request.unit
        if unit.column is None:
            # Nothing is bounded: rows of other groups cost nothing; _finish keeps only the public keys.
            return cur
        if request.keys is not None:
            # Rows outside the public keys must not use up a unit's max_rows / max_groups.
            keys = q.frame(_for_duckdb(request.keys.lazy()).collect().to_arrow())
            on = " AND ".join(f"s.{b} IS NOT DISTINCT FROM k.{b}" for b in by)
            cur = q.add(f"SELECT s.* FROM {cur} AS s SEMI JOIN {keys} AS k ON {on}")
        u = quote(unit.column)
        seed = request.seed & _SEED_MASK
        cur = q.add(f"SELECT * FROM {cur} WHERE {u} IS NOT NULL")
        if not request.contribution_bounding:
            return cur
        if by and unit.max_groups is not None and unit.max_groups < unit.max_rows:
            cols = ", ".join(dict.fromkeys([u, *by]))
            pairs = q.add(f"SELECT DISTINCT {cols} FROM {cur}")
            # rank() over a unique order (hash, then the pair itself) is a row number; DuckDB runs it
            # several times faster than row_number() here.
            chosen = q.add(f"SELECT {cols} FROM {pairs} QUALIFY rank() OVER (PARTITION BY {u} "
                           f"ORDER BY hash({cols}, {seed}), {cols}) <= {unit.max_groups}")
            on = " AND ".join(f"s.{c} IS NOT DISTINCT FROM p.{c}" for c in dict.fromkeys([u, *by]))
            cur = q.add(f"SELECT s.* FROM {cur} AS s SEMI JOIN {chosen} AS p ON {on}")
        used = sorted({s.column for s in request.statistics if s.column is not None} - {unit.column, *request.by})
        hashed = ", ".join(dict.fromkeys([u, *by, *(quote(c) for c in used)]))
        # Only units with more than max_rows rows lose any: rank just their rows, on the three columns the
        # window needs (not every column), and drop the rows ranked past max_rows by their row number
        # (unique). The same rows as ranking every unit (QUALIFY rank() ... <= max_rows), at a fraction of
        # the window's cost when most units are small. GROUP BY, the join and PARTITION BY agree on which
        # values are one unit (NaN = NaN, -0.0 = 0.0), and every row node is deterministic (volatile SQL
        # functions are refused), so the three reads of the CTE see the same rows.
        # Copies of a row (equal in every hashed column, so with one hash) are numbered 0, 1, ... within
        # the unit and copy j ≥ 1 is re-hashed with j: without it copies would share one rank position and
        # be kept or dropped together (a choice uniform over distinct rows, not rows). Which copy gets which
        # number does not matter (copies are interchangeable; the row number only makes it reproducible),
        # so the hashes a unit's rows get depend only on its multiset of rows and the seed.
        row_seed = seed ^ 0x5DEECE66D
        big = q.add(f"SELECT {u} FROM {cur} GROUP BY {u} HAVING count(*) > {unit.max_rows}")
        hashed_rows = q.add(f"SELECT {u}, {ROW}, hash({hashed}, {row_seed}) AS __dp_hash "
                            f"FROM {cur} SEMI JOIN {big} USING ({u})")
        copies = q.add(f"SELECT {u}, {ROW}, __dp_hash, row_number() OVER (PARTITION BY {u}, __dp_hash "
                       f"ORDER BY {ROW}) - 1 AS __dp_copy FROM {hashed_rows}")
        ranked = q.add(f"SELECT {u}, {ROW}, CASE WHEN __dp_copy = 0 THEN __dp_hash "
                       f"ELSE hash(__dp_hash, __dp_copy, {row_seed}) END AS __dp_hash FROM {copies}")
        dropped = q.add(f"SELECT {ROW} FROM {ranked} QUALIFY rank() OVER (PARTITION BY {u} "
                        f"ORDER BY __dp_hash, {ROW}) > {unit.max_rows}")
        return q.add(f"SELECT * FROM {cur} ANTI JOIN {dropped} USING ({ROW})")

    def _node(self, q: _Query, cur: str, node: RowNode) -> str:
        if isinstance(node, SQLFilter):
            return q.add(f"SELECT * FROM {cur} WHERE {guard(node.sql)}")
        if isinstance(node, SQLProject):
            items = ", ".join(f"{guard(sql)} AS {quote(name)}" for name, sql in node.items)
            return q.add(f"SELECT {items}, {ROW} FROM {cur}")
        assert isinstance(node, PublicJoin)
        public = q.frame(node.data.to_arrow())
        added = "".join(f", r.{quote(c)}" for c in node.added)
        on = " AND ".join(f"l.{quote(a)} = r.{quote(b)}" for a, b in zip(node.left_on, node.right_on))
        how = "LEFT" if node.how == "left" else "INNER"
        return q.add(f"SELECT l.*{added} FROM {cur} AS l {how} JOIN {public} AS r ON {on}")

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        """One DuckDB query: row nodes, keys, bounding, statistics; zeros for empty public keys."""
        sql, frames = self.compile(request)
        with self._mutex:
            if not self._locked:
                lock(self._con, self._paths)
                self._locked = True
            for name, data in frames.items():
                self._con.register(name, data)
            try:
                out = self._con.sql(sql).pl()
            finally:
                for name in frames:
                    self._con.unregister(name)
        nodes = request.row_nodes
        schema = nodes[-1].schema if nodes else self._frames[request.table].collect_schema()
        return self._finish(out, request, schema)

    @staticmethod
    def _finish(out: pl.DataFrame, request: StatisticsRequest, schema: pl.Schema) -> pl.DataFrame:
        names = [s.key for s in request.statistics]
        by = list(request.by)
        types = {s.key: pl.List(pl.Int64) if s.kind in LIST_KINDS else pl.Int64 for s in request.statistics}
        out = out.with_columns([pl.col(n).cast(t) for n, t in types.items()])
        if not by:
            return out.select(names)
        # Keys come back with the plan's types (DuckDB may return e.g. a Categorical as a String).
        out = out.with_columns([pl.col(b).cast(schema[b], strict=False) for b in by if out.schema[b] != schema[b]])
        if request.keys is not None:
            out = out.with_columns([pl.col(b).cast(request.keys.schema[b]) for b in by])
            out = (request.keys.join(out, on=by, how="left", nulls_equal=True)
                   .with_columns([pl.col(n).fill_null(pl.lit([], dtype=t) if t == pl.List(pl.Int64) else 0)
                                  for n, t in types.items()]))
        return out.sort(by, nulls_last=False).select([*by, *names])
