"""Random SQL queries over the composed fuzzer's table, for the SQL D/D′ exception-oracle fuzzer.

:mod:`tests.adversarial.composed` builds random method chains; this module builds what an analyst writes
in ``sess.sql(...)`` (DuckDB dialect, ``docs/sql.md``) over the same table ``t`` and the same neighbouring
datasets (:func:`tests.adversarial.composed.neighbours`: D′ adds one unit of the engine's probe values):
row-level expressions by type (:data:`_BUILDERS`: arithmetic, ``CASE WHEN``, ``CAST``/``TRY_CAST``,
string, date, timestamp and list functions) in ``WHERE``, in ``GROUP BY`` keys (private, public through
``keys=``, the session's ``public_keys`` or a joined public table) and in aggregate arguments (``COUNT``,
``SUM``/``AVG``/``VAR_SAMP``/``STDDEV_POP``/``MEDIAN``/``QUANTILE_CONT``/``PERCENTILE_CONT`` with bounds as
``CLAMP`` or ``LEAST(GREATEST(...))``, or the session's declared bounds), read through a CTE, a subquery or
a public join, then ``HAVING``/``ORDER BY``/``LIMIT``/expressions over the released values, or
``HAVING TOP_K(...)``. The table is that of a :class:`~tests.adversarial.composed.Storage` (in memory, or a
Parquet or CSV file): its columns are read as their types there (:func:`sql_kind`).

Example:
    >>> from hypothesis import given, settings
    >>> @settings(max_examples=1, derandomize=True, database=None)
    ... @given(queries())
    ... def show(query):
    ...     assert "FROM" in query.text
    >>> show()

"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from hypothesis import strategies as st

import dpframe as dp

from .composed import AUTO_UNITS, CI_LEVELS, MEMORY, UNITS_OF_PRIVACY, Storage, base, draw_account

#: The public lookup table a query may join (``t.s = pub.name``; ``name`` is unique).
PUBLIC = pl.DataFrame({"name": ["a", "bc", "12", ""], "region": ["r1", "r2", "r1", None]})
SESSION_OPTIONS: dict[str, Any] = {
    "public_tables": {"pub": PUBLIC}, "public_keys": {"t.c": ["a", "b", "c"], "t.b": [True, False]},
    "bounds": {"t.x": (-10, 10), "t.n": (0, 5)}}
"""Declarations every session of the fuzzer makes (D's and D′'s alike)."""


def sql_kind(dtype: pl.DataType) -> str:
    """The kind (:data:`KINDS`) a query reads a column of ``dtype`` as (a duration reaches SQL as an integer;
    ``"other"``: a type no expression builds on, such as a unit column's ``Categorical`` or ``Binary``).

    Example:
        >>> sql_kind(pl.Duration("us")), sql_kind(pl.Datetime("ms", "UTC")), sql_kind(pl.Categorical())
        ('int', 'tstz', 'other')

    """
    if dtype.is_integer() or isinstance(dtype, pl.Duration):
        return "int"
    if isinstance(dtype, pl.Datetime):
        return "ts" if dtype.time_zone is None else "tstz"
    return "float" if dtype.is_float() else {pl.Decimal: "dec", pl.String: "str", pl.Enum: "enum", pl.Date: "date",
                                             pl.Boolean: "bool"}.get(dtype.base_type(), "other")


def columns_of(storage: Storage) -> dict[str, str]:
    """The table's columns (besides the unit ``u``) in ``storage``, by the SQL kind a query reads them as."""
    return {name: sql_kind(dtype) for name, dtype in base(storage).drop("u").schema.items()}


COLUMNS = columns_of(MEMORY)
KINDS = ("int", "float", "dec", "str", "enum", "date", "ts", "tstz", "bool", "list", "interval")
NUMERIC = ("int", "float", "dec")
_LITERALS: dict[str, list[str]] = {
    "int": ["0", "1", "-1", "3", "2147483648", "(-9223372036854775808)", "9223372036854775807", "NULL"],
    "float": ["0.0", "1.5", "(-2.0)", "'nan'::DOUBLE", "'inf'::DOUBLE", "1e308", "'-inf'::DOUBLE"],
    "dec": ["0.00", "1.25", "CAST(99999999.99 AS DECIMAL(10,2))"],
    "str": ["''", "'a'", "'2020-01-01'", f"'{'x' * 50}'", "'é'", "'12'", "NULL"],
    "enum": ["'a'", "'b'"],
    "date": ["DATE '2020-01-01'", "DATE '0001-01-01'", "'infinity'::DATE", "DATE '5877642-06-25'"],
    "ts": ["TIMESTAMP '2020-01-01 12:00:00'", "'-infinity'::TIMESTAMP", "TIMESTAMP '294247-01-10 04:00:54'"],
    "tstz": ["TIMESTAMPTZ '2020-01-01 12:00:00+00'"],
    "bool": ["true", "false"],
    "list": ["['a', 'bc']", "[]::VARCHAR[]", "[NULL]::VARCHAR[]"],
    "interval": ["INTERVAL 1 DAY", "INTERVAL '2147483647 months'"],
}
_INTERVALS = ["INTERVAL 1 DAY", "INTERVAL 1 MONTH", "INTERVAL '-3 hours'", "INTERVAL 100000 YEAR",
              "INTERVAL '2147483647 months'"]
_REGEXPS = [r"\d", "^$", "a"]
_FORMATS = ["'%Y-%m-%d'", "'%d/%m/%Y'", "'%Y'", "'%H:%M'", "'%Y-%m-%d %H:%M:%S'"]

Sub = Callable[[str], str]
Build = Callable[[Sub, st.DrawFn], str]


def _pick(options: list[str]) -> Build:
    return lambda sub, draw: draw(st.sampled_from(options))


def _case(kind: str) -> Build:
    return lambda sub, draw: f"CASE WHEN {sub('bool')} THEN {sub(kind)} ELSE {sub(kind)} END"


def _f(template: str, *kinds: str) -> Build:
    """A builder filling ``template``'s ``{0}``, ``{1}`` ... with expressions of ``kinds``."""
    return lambda sub, draw: template.format(*(sub(k) for k in kinds))


_BUILDERS: dict[str, dict[str, Build]] = {
    "int": {
        "plus": _f("({0} + {1})", "int", "int"), "minus": _f("({0} - {1})", "int", "int"),
        "times": _f("({0} * {1})", "int", "int"), "intdiv": _f("({0} // {1})", "int", "int"),
        "mod": _f("({0} % {1})", "int", "int"), "abs": _f("abs({0})", "int"), "neg": _f("(-{0})", "int"),
        "cast": lambda sub, draw: f"CAST({sub('float')} AS {draw(st.sampled_from(['BIGINT', 'TINYINT', 'UBIGINT']))})",
        "try_cast": lambda sub, draw: f"TRY_CAST({sub(draw(st.sampled_from(['float', 'str'])))} AS "
                                      f"{draw(st.sampled_from(['BIGINT', 'INTEGER', 'UTINYINT']))})",
        "from_dec": _f("CAST({0} AS INTEGER)", "dec"), "length": _f("length({0})", "str"),
        "instr": _f("instr({0}, 'a')", "str"), "ascii": _f("ascii({0})", "str"),
        "year": _f("year({0})", "date"), "month": _f("month({0})", "date"), "dow": _f("dayofweek({0})", "date"),
        "hour": _f("hour({0})", "ts"), "epoch": _f("epoch_ms({0})", "ts"), "tz_hour": _f("hour({0})", "tstz"),
        "diff": lambda sub, draw: f"date_diff('{draw(st.sampled_from(['day', 'month', 'year']))}', {sub('date')}, "
                                  f"{sub('date')})",
        "extract": _f("extract(isodow FROM {0})", "date"), "case": _case("int"),
        "coalesce": _f("coalesce({0}, {1})", "int", "int"), "greatest": _f("greatest({0}, {1})", "int", "int"),
        "nullif": _f("nullif({0}, {1})", "int", "int"), "len": _f("len({0})", "list"),
        "position": _f("list_position({0}, 'a')", "list"), "shift": _f("({0} >> 2)", "int"),
        "from_bool": _f("CAST({0} AS INTEGER)", "bool"), "hash": _f("hash({0})", "str"),
        "gcd": _f("gcd({0}, {1})", "int", "int"), "round": _f("CAST(round({0}) AS BIGINT)", "float"),
        "from_enum": _f("enum_code({0})", "enum"), "md5_number": _f("md5_number({0})", "str"),
        "hugeint": _f("CAST({0} AS HUGEINT)", "int"), "unsigned": _f("({0} * CAST({1} AS UBIGINT))", "int", "int"),
        "interval_days": _f("datepart('day', {0})", "interval"),
    },
    "float": {
        "div": _f("({0} / {1})", "float", "float"), "idiv": _f("({0} / {1})", "int", "int"),
        "times": _f("({0} * {1})", "float", "float"), "plus": _f("({0} + {1})", "float", "int"),
        "sqrt": _f("sqrt({0})", "float"), "ln": _f("ln({0})", "float"), "exp": _f("exp({0})", "float"),
        "pow": _f("pow({0}, {1})", "float", "float"), "round": _f("round({0}, 2)", "float"),
        "floor": _f("floor({0})", "float"), "sin": _f("sin({0})", "float"),
        "from_int": _f("CAST({0} AS DOUBLE)", "int"), "from_str": _f("TRY_CAST({0} AS DOUBLE)", "str"),
        "from_dec": _f("CAST({0} AS DOUBLE)", "dec"), "to_real": _f("CAST({0} AS REAL)", "float"),
        "case": _case("float"), "coalesce": _f("coalesce({0}, 0.5)", "float"),
        "greatest": _f("greatest({0}, {1})", "float", "float"), "log10": _f("log10({0})", "float"),
        "atan2": _f("atan2({0}, {1})", "float", "float"), "epoch": _f("epoch({0})", "ts"),
        "least_h": _f("least({0}, {1})", "float", "int"),
    },
    "dec": {
        "plus": _f("({0} + {1})", "dec", "dec"), "times": _f("({0} * {1})", "dec", "int"),
        "from_int": _f("CAST({0} AS DECIMAL(18,2))", "int"), "from_str": _f("TRY_CAST({0} AS DECIMAL(10,2))", "str"),
        "from_float": _f("CAST({0} AS DECIMAL(20,4))", "float"), "round": _f("round({0}, 1)", "dec"),
        "abs": _f("abs({0})", "dec"), "case": _case("dec"),
    },
    "str": {
        "upper": _f("upper({0})", "str"), "lower": _f("lower({0})", "str"), "concat": _f("({0} || {1})", "str", "str"),
        "concat_f": _f("concat({0}, {1})", "str", "int"),
        "substr": lambda sub, draw: f"substr({sub('str')}, {draw(st.sampled_from(['1', '2', '-2', '0']))}, 3)",
        "replace": _f("replace({0}, 'a', 'bb')", "str"),
        "lpad": lambda sub, draw: f"lpad({sub('str')}, {draw(st.sampled_from(['5', '10000']))}, '*')",
        "from_int": _f("CAST({0} AS VARCHAR)", "int"), "from_float": _f("CAST({0} AS VARCHAR)", "float"),
        "from_date": lambda sub, draw: f"strftime({sub('date')}, {draw(st.sampled_from(_FORMATS))})",
        "from_ts": lambda sub, draw: f"strftime({sub('ts')}, {draw(st.sampled_from(_FORMATS))})",
        "from_tstz": _f("CAST({0} AS VARCHAR)", "tstz"), "from_dec": _f("CAST({0} AS VARCHAR)", "dec"),
        "from_enum": _f("CAST({0} AS VARCHAR)", "enum"), "extract": _f(r"regexp_extract({0}, '(\d+)', 1)", "str"),
        "regexp_replace": _f("regexp_replace({0}, '.', 'x', 'g')", "str"), "coalesce": _f("coalesce({0}, '?')", "str"),
        "left": _f("left({0}, 2)", "str"), "repeat": _f("repeat({0}, 3)", "str"), "reverse": _f("reverse({0})", "str"),
        "trim": _f("trim({0})", "str"), "split_part": _f("split_part({0}, '-', 2)", "str"),
        "format": _f("format('{{}}|{{}}', {0}, {1})", "str", "int"), "printf": _f("printf('%d', {0})", "int"),
        "md5": _f("md5({0})", "str"), "element": _f("{0}[1]", "list"),
        "join": _f("array_to_string({0}, ',')", "list"), "case": _case("str"),
        "json": _f("json_extract_string({0}, '$.a')", "str"), "monthname": _f("monthname({0})", "date"),
        "base64": _f("to_base64(CAST({0} AS BLOB))", "str"),
    },
    "enum": {"case": _case("enum")},
    "date": {
        "from_ts": _f("CAST({0} AS DATE)", "ts"), "from_str": _f("TRY_CAST({0} AS DATE)", "str"),
        "plus_days": _f("({0} + {1})", "date", "int"), "trunc": _f("date_trunc('month', {0})", "date"),
        "make": _f("make_date({0}, 1, 1)", "int"), "last_day": _f("last_day({0})", "date"),
        "strptime": lambda sub, draw: f"CAST(try_strptime({sub('str')}, {draw(st.sampled_from(_FORMATS[:3]))}) "
                                      "AS DATE)",
        "case": _case("date"), "greatest": _f("greatest({0}, {1})", "date", "date"),
        "from_tstz": _f("CAST({0} AS DATE)", "tstz"),
    },
    "ts": {
        "from_date": _f("CAST({0} AS TIMESTAMP)", "date"),
        "plus": lambda sub, draw: f"({sub('ts')} + {draw(st.sampled_from(_INTERVALS))})",
        "date_plus": lambda sub, draw: f"({sub('date')} - {draw(st.sampled_from(_INTERVALS))})",
        "trunc": lambda sub, draw: f"date_trunc('{draw(st.sampled_from(['hour', 'day', 'year']))}', {sub('ts')})",
        "make": _f("make_timestamp({0})", "int"), "days": _f("({0} + to_days({1}))", "ts", "int"),
        "strptime": _f("try_strptime({0}, '%Y-%m-%d %H:%M:%S')", "str"), "from_tstz": _f("CAST({0} AS TIMESTAMP)",
                                                                                          "tstz"),
        "timezone": _f("timezone('Europe/Amsterdam', {0})", "tstz"), "bucket": _f("time_bucket(INTERVAL '1 day', {0})",
                                                                                  "ts"),
        "case": _case("ts"),
    },
    "tstz": {
        "from_ts": _f("CAST({0} AS TIMESTAMPTZ)", "ts"), "epoch": _f("to_timestamp({0})", "float"),
        "plus": _f("({0} + INTERVAL '1 hour')", "tstz"), "trunc": _f("date_trunc('day', {0})", "tstz"),
    },
    "bool": {
        "gt": _f("({0} > {1})", "int", "int"), "lt": _f("({0} < {1})", "float", "float"),
        "eq": _f("({0} = {1})", "str", "str"), "date_ge": _f("({0} >= {1})", "date", "date"),
        "ts_lt": _f("({0} < {1})", "ts", "ts"), "dec_gt": _f("({0} > {1})", "dec", "float"),
        "and": _f("({0} AND {1})", "bool", "bool"), "or": _f("({0} OR {1})", "bool", "bool"),
        "not": _f("(NOT {0})", "bool"),
        "is_null": lambda sub, draw: f"({sub(draw(st.sampled_from(KINDS)))} IS NULL)",
        "isnan": _f("isnan({0})", "float"), "isfinite": _f("isfinite({0})", "float"),
        "in": _f("({0} IN (0, 1, 2, -50))", "int"), "in_str": _f("({0} IN ('a', 'bc', ''))", "str"),
        "between": _f("({0} BETWEEN -1 AND 1)", "float"),
        "like": lambda sub, draw: f"({sub('str')} {draw(st.sampled_from(['LIKE', 'ILIKE', 'NOT LIKE']))} "
                                  f"'{draw(st.sampled_from(['%a%', 'A_', '', '%']))}')",
        "regexp": lambda sub, draw: f"regexp_matches({sub('str')}, '{draw(st.sampled_from(_REGEXPS))}')",
        "starts": _f("starts_with({0}, '2')", "str"), "contains": _f("contains({0}, 'a')", "str"),
        "enum_eq": _f("({0} = 'a')", "enum"), "list_contains": _f("list_contains({0}, 'a')", "list"),
        "distinct": _f("({0} IS DISTINCT FROM {1})", "float", "float"), "case": _case("bool"),
        "from_str": _f("TRY_CAST({0} AS BOOLEAN)", "str"), "glob": _f("({0} GLOB '*a*')", "str"),
        "tz_lt": _f("({0} < {1})", "tstz", "tstz"),
    },
    "interval": {
        "minus": _f("({0} - {1})", "ts", "ts"), "age": _f("age({0}, {1})", "ts", "ts"),
        "days": _f("to_days({0})", "int"), "times": _f("({0} * {1})", "interval", "int"),
        "case": _case("interval"),
    },
    "list": {
        "split": _f("string_split({0}, '-')", "str"), "make": _f("[{0}, {1}]", "str", "str"),
        "distinct": _f("list_sort(list_distinct({0}))", "list"), "slice": _f("list_slice({0}, 1, 2)", "list"),
        "regexp": _f(r"regexp_extract_all({0}, '\d')", "str"),
        "transform": _f("list_transform({0}, lambda v: upper(v))", "list"),
        "filter": _f("list_filter({0}, lambda v: v <> '')", "list"), "concat": _f("list_concat({0}, {1})", "list",
                                                                                  "list"),
    },
}

#: Key expressions of nested or exotic types, from expressions over the query's columns.
_NESTED_KEYS: dict[str, Build] = {
    "struct": _f("{{'a': {0}, 'b': {1}}}", "int", "str"), "struct_pack": _f("struct_pack(a := {0})", "date"),
    "time": _f("CAST({0} AS TIME)", "ts"), "blob": _f("CAST({0} AS BLOB)", "str"), "interval": _f("{0}", "interval"),
    "hugeint": _f("CAST({0} AS HUGEINT)", "int"), "map": _f("MAP {{{0}: {1}}}", "str", "int"),
    "decimal": _f("CAST({0} AS DECIMAL(38, 10))", "float"), "uuid": _f("TRY_CAST({0} AS UUID)", "str"),
}

Columns = dict[str, str]   # name (as the query reads it) -> kind


def expression(draw: st.DrawFn, columns: Columns, kind: str, depth: int) -> str:
    """A row-level SQL expression of ``kind`` over ``columns`` (dpframe may refuse it: that is checked too)."""
    names = sorted(n for n, k in columns.items() if k == kind)
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        if names and draw(st.integers(0, 4)):
            return draw(st.sampled_from(names))
        return draw(st.sampled_from(_LITERALS[kind]))
    builders = _BUILDERS[kind]
    name = draw(st.sampled_from(sorted(builders)))
    return builders[name](lambda k: expression(draw, columns, k, depth - 1), draw)


_BOUNDS = ["0, 1", "-10, 10", "-1e6, 1e6", "0, 1099511627776"]
#: Conditions no row of D meets (the added unit's probe values may), as the chains' ``unread_filters``:
#: (column, kind, condition).
_UNREAD = [("x", "float", "isnan(x)"), ("x", "float", "abs(x) > 1e6"), ("i", "int", "i > 1000000"),
           ("s", "str", "length(s) > 20"), ("d", "date", "d < DATE '1900-01-01'"), ("f", "float", "f IS NULL")]


def _aggregate(draw: st.DrawFn, columns: Columns, depth: int) -> str:
    """An aggregate call with its bounds, as the SQL dialect takes them."""
    kind = draw(st.sampled_from(["count_star", "count", "sum", "avg", "var", "std", "median", "quantile",
                                 "quantiles", "percentile", "declared", "units"]))
    if kind == "units":      # dp.count_units() where u is the unit, else dp.count_distinct
        other = expression(draw, columns, draw(st.sampled_from(KINDS)), depth)
        return draw(st.sampled_from(["COUNT(DISTINCT u)", f"COUNT(DISTINCT {other})"]))
    if kind == "count_star":
        return draw(st.sampled_from(["COUNT(*)", "COUNT(1)"]))
    if kind == "count":
        return f"COUNT({expression(draw, columns, draw(st.sampled_from(KINDS)), depth)})"
    if kind == "declared":   # the session declares bounds for x and n (read through CTEs and renames)
        name = draw(st.sampled_from([c for c in ("x", "n") if c in columns] or ["x"]))
        return f"{draw(st.sampled_from(['SUM', 'AVG']))}({name})"
    target = expression(draw, columns, draw(st.sampled_from([*NUMERIC, "bool"])), depth)
    bounds = draw(st.sampled_from(_BOUNDS))
    low, high = bounds.split(", ")
    clamped = f"CLAMP({target}, {bounds})" if draw(st.integers(0, 3)) else f"LEAST(GREATEST({target}, {low}), {high})"
    if kind == "percentile":
        return f"PERCENTILE_CONT({draw(st.sampled_from(['0.5', '0.9']))}) WITHIN GROUP (ORDER BY {clamped})"
    if kind in ("quantile", "quantiles"):
        return f"QUANTILE_CONT({clamped}, {'0.5' if kind == 'quantile' else '[0.1, 0.9]'})"
    function = {"sum": "SUM", "avg": "AVG", "var": "VAR_SAMP", "std": "STDDEV_POP", "median": "MEDIAN"}[kind]
    return f"{function}({clamped})"


@dataclass(repr=False)
class SQLQuery:
    """A query's text, the session's privacy unit, ``keys=`` and ``ci=``; the query's budget (None: the oracle's)
    and the session's kind (:data:`~tests.adversarial.composed.SESSION_KINDS`)."""

    text: str
    unit: dp.PrivacyUnit = field(default_factory=lambda: dp.PrivacyUnit("u", max_rows=2))
    keys: dict[str, list[Any]] | None = None
    ci: float | None = None
    diagnostics: bool = False
    budget: dp.Budget | None = None
    account: str = "default"

    def __repr__(self) -> str:
        return (f"{self.unit!r} ({self.account}): sess.sql({self.text!r}, keys={self.keys!r}).collect("
                f"{self.budget or ''}, ci={self.ci}, diagnostics={self.diagnostics})")


_KEY_VALUES: dict[str, list[Any]] = {"int": [0, 1, -50, 2020], "str": ["a", "bc", ""], "bool": [True, False],
                                     "date": [dt.date(2020, 1, 1)], "float": [0.0, 0.5], "enum": ["a", "b"]}


@st.composite
def _source(draw: st.DrawFn, columns: Columns, depth: int) -> str:
    """FROM: the table, a CTE or subquery deriving columns, or a join with the public table (updates ``columns``,
    which start as the table's)."""
    table_columns = {c: k for c, k in columns.items() if c != "u"}
    kind = draw(st.sampled_from(["table", "table", "cte", "subquery", "join", "join_derived"]))
    if kind == "table":
        return "t"
    if kind == "join":
        columns["region"] = "str"
        return draw(st.sampled_from(["t LEFT JOIN pub ON t.s = pub.name", "t JOIN pub ON s = name",
                                     "pub JOIN t ON pub.name = t.s", "t LEFT JOIN (SELECT name AS s, upper(region) "
                                     "AS region FROM pub WHERE name <> '') p USING (s)"]))
    if kind == "join_derived":   # the private join key is an expression of any type (the public keys are cast to it)
        on_kind = draw(st.sampled_from(["str", "str", "str", "int"]))   # the public keys are strings
        on = expression(draw, dict(columns), on_kind, depth)
        columns.update(v0=on_kind, region="str")
        how = draw(st.sampled_from(["LEFT JOIN", "JOIN"]))
        return f"(SELECT *, {on} AS v0 FROM t) q {how} pub ON q.v0 = pub.name"
    derived: dict[str, str] = {}
    table = dict(columns)   # what the inner SELECT and WHERE read
    for j in range(draw(st.integers(1, 2))):
        out = draw(st.sampled_from([k for k in KINDS if k != "enum"]))
        derived[f"v{j}"] = f"{expression(draw, table, out, depth)} AS v{j}"
        columns[f"v{j}"] = out
    shape = draw(st.sampled_from(["*"] * 4 + ["columns"] * 4 + ["replace", "exclude"]))
    keep = "*"
    if shape == "columns":
        keep = ", ".join(sorted({"u", *draw(st.lists(st.sampled_from(sorted(table_columns)), min_size=1,
                                                     max_size=4))}))
        for c in [c for c in columns if c not in keep.split(", ") and c not in derived]:
            columns.pop(c)
    elif shape == "replace":   # a derived column under an existing name (refused: SQL lists columns)
        name, out = draw(st.sampled_from(sorted(table_columns.items())))
        kind = draw(st.sampled_from([out, out, "str", "int", "float"]))
        keep = f"* REPLACE ({expression(draw, table, kind, depth)} AS {name})"
        columns[name] = kind
    elif shape == "exclude":
        name = draw(st.sampled_from(sorted(table_columns)))
        keep = f"* EXCLUDE ({name})"
        columns.pop(name)
    where = f" WHERE {expression(draw, table, 'bool', depth)}" if draw(st.booleans()) else ""
    inner = f"SELECT {keep}, {', '.join(derived.values())} FROM t{where}"
    if kind == "cte":
        return f"(WITH a AS ({inner}) SELECT * FROM a) q" if draw(st.integers(0, 5)) == 0 else f"a\x00{inner}"
    return f"({inner}) q"


@st.composite
def queries(draw: st.DrawFn, depth: int = 2, storage: Storage = MEMORY, tuned: bool = False,
            units: bool = False, accounts: bool = False) -> SQLQuery:
    """A random SQL query over ``storage``'s table: source, WHERE, GROUP BY keys, aggregates, post-processing,
    ``keys=``, ``ci=``; with ``tuned``, also under the units with automatic bounds (``AUTO_UNITS``) and at
    ``ci=``'s edge levels (``CI_LEVELS``), as the method chains' ``chains(tuned=True)``. With ``units`` (as
    ``chains(units=True)``), a key may be the unit column itself, and a ``WHERE`` one that no row of D meets
    (:data:`_UNREAD`). With ``accounts`` (as ``chains(accounts=True)``), the session's kind and the query's budget
    are drawn, the budget mostly one the kind takes (``draw_account(fitting=True)``)."""
    unit = draw(st.sampled_from(UNITS_OF_PRIVACY + (AUTO_UNITS * 2 if tuned else ())))
    row_unit = unit.column is None
    columns: Columns = {**columns_of(storage), **({"u": sql_kind(base(storage).schema["u"])} if row_unit else {})}
    source = draw(_source(columns, depth))
    with_clause = ""
    if "\x00" in source:
        source, inner = source.split("\x00")
        with_clause = f"WITH a AS ({inner}) "
    readable = {c: k for c, k in columns.items() if c != "u" or row_unit}
    where = f" WHERE {expression(draw, readable, 'bool', depth)}" if draw(st.booleans()) else ""
    unread = [condition for column, kind, condition in _UNREAD if readable.get(column) == kind] if units else []
    if unread and draw(st.integers(0, 3)) == 0:      # no row of D passes it: D′'s unit alone may
        where = f" WHERE {draw(st.sampled_from(unread))}"
    query = SQLQuery("", unit=unit, ci=draw(st.sampled_from([None, None, 0.9, *(CI_LEVELS if tuned else [])])),
                     diagnostics=draw(st.integers(0, 5)) == 0)
    if accounts:
        query.account, query.budget = draw_account(draw, fitting=True)
    n_keys = draw(st.sampled_from([0, 1, 1, 2]))
    items: list[str] = []
    group: list[str] = []
    names: list[str] = []   # the keys' output names
    keys: dict[str, list[Any]] = {}
    for j in range(n_keys):
        key_kind = draw(st.sampled_from(["int", "str", "bool", "date", "float", "enum", "list", "ts", "nested",
                                         *(["unit"] if units else [])]))
        if key_kind == "unit":      # the privacy-unit column itself, of its type
            expr = "u"
        elif key_kind == "nested":
            nested = _NESTED_KEYS[draw(st.sampled_from(sorted(_NESTED_KEYS)))]
            expr = nested(lambda k: expression(draw, readable, k, depth - 1), draw)
        else:
            expr = expression(draw, readable, key_kind, depth)
        plain = expr in readable
        name = expr if plain and draw(st.booleans()) else f"k{j}"
        items.append(expr if name == expr else f"{expr} AS {name}")
        group.append(draw(st.sampled_from([name, str(j + 1), expr])))
        names.append(name)
        if key_kind in _KEY_VALUES and draw(st.integers(0, 2)) == 0:
            keys[name] = _KEY_VALUES[key_kind]
    query.keys = keys or None
    top_k = n_keys > 0 and unit.rows != "auto" and draw(st.integers(0, 5)) == 0   # it refuses max_rows="auto", free
    if top_k:
        score = draw(st.sampled_from(["COUNT(*)", *([] if row_unit else ["COUNT(DISTINCT u)"]),
                                      "SUM(CLAMP(x, 0, 1))"]))
        k = draw(st.sampled_from(["2", "NULL", "1, method := 'limited_domain'", "2, method := 'gumbel'"]))
        shown = f", {score} AS score" if draw(st.booleans()) else ""
        query.ci, query.diagnostics = None, False   # TOP_K's collect takes neither
        query.text = (f"{with_clause}SELECT {', '.join(items)}{shown} FROM {source}{where} GROUP BY "
                      f"{', '.join(group)} HAVING TOP_K({score}, {k})")
        return query
    aggregates = [_aggregate(draw, readable, depth) for _ in range(draw(st.integers(1, 2)))]
    for j, agg in enumerate(aggregates):
        items.append(f"{agg} AS a{j}" if draw(st.integers(0, 3)) else agg)
    if draw(st.integers(0, 4)) == 0:
        items.append(draw(st.sampled_from([f"{aggregates[0]} / COUNT(*) AS r", f"round({aggregates[0]}, 1) AS r",
                                           f"CAST({aggregates[0]} AS TINYINT) AS r",
                                           f"CAST(CAST({aggregates[0]} AS VARCHAR) || 'x' AS INTEGER) AS r",
                                           *[f"CAST({name} AS INTEGER) AS r" for name in names[:1]]])))
    text = f"{with_clause}SELECT {', '.join(items)} FROM {source}{where}"
    if group:
        text += " GROUP BY ALL" if draw(st.integers(0, 5)) == 0 else f" GROUP BY {', '.join(group)}"
    if draw(st.integers(0, 3)) == 0:
        text += f" HAVING {draw(st.sampled_from(['COUNT(*) > 5', f'{aggregates[0]} IS NOT NULL', 'a0 > 0']))}"
    if draw(st.integers(0, 3)) == 0:
        text += f" ORDER BY {draw(st.sampled_from(['1', '1 DESC', 'a0 DESC NULLS LAST', 'COUNT(*)']))}"
    if draw(st.integers(0, 3)) == 0:
        text += f" LIMIT {draw(st.sampled_from(['1', '2 OFFSET 1', '0']))}"
    query.text = text
    return query
