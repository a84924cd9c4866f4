"""Review 55a: SQL's growth bound (review 54k), second pass; and quantile probabilities checked when SQL is built.

Each attack is only built here (or run on a tiny input to show the bound it was given is exceeded): running them at
size could exhaust the machine's memory.
"""

from __future__ import annotations

import duckdb
import polars as pl
import pytest

import dpframe as dp
from dpframe.sql.growth import check_sql_growth, sql_growth
from dpframe.sql.sandbox import parse_expression


def _session(backend: str = "duckdb") -> dp.Session:
    data = pl.DataFrame({"u": range(40), "x": [1] * 40, "s": ["ab"] * 40, "t": ["cd"] * 40,
                         "l": [["a", "b"]] * 40})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend=backend)


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@pytest.mark.parametrize("qs", ["[0.5, 0.5]", "[0.1, 0.25, 0.10000000001]"])
def test_duplicate_quantile_probabilities_are_refused_when_sql_is_built(backend: str, qs: str) -> None:
    sess = _session(backend)
    with pytest.raises(dp.errors.PlanError, match="duplicate quantile probabilities") as e:
        sess.sql(f"SELECT QUANTILE_CONT(CLAMP(x, 0, 10), {qs}) AS q FROM t")
    assert e.value.argument == "sql" and "once" in str(e.value)
    assert sess.history().height == 0


# ---------------------------------------------------------------------------------------------------------------
# The growth bound: a·L + b must hold on every row (L: the row's longest value in text form). Each expression is run
# on tiny adversarial rows (quotes, backslashes, commas, control and wide characters) and its text form measured.
# ---------------------------------------------------------------------------------------------------------------

_VALUES = ["a'\\,b" * 4, "." * 25, "ab" * 1500, "[,,,,,,,]",
           "'''''\\\\\\", ",,,,,,,,", "\x01\x02\x03\x04", "\ufdfa\ufdfa", "é,ü'ß", "0110"]
_ROW = ("SELECT $s AS s, 'cd' AS t, 1000 AS x, ['a', 'b'] AS l, TIMESTAMP '2020-09-30 12:00:00' AS d, "
        "CAST('0101' AS BIT) AS bits")


def _longest(con: duckdb.DuckDBPyConnection, value: str) -> int:
    row = con.execute(f"SELECT [octet_length(encode(CAST(c AS VARCHAR))) FOR c IN [s, t, x::VARCHAR, l::VARCHAR, "
                      f"d::VARCHAR, bits::VARCHAR]] FROM ({_ROW})", {"s": value}).fetchone()
    assert row is not None
    return max(1, *row[0])


_BOUND_HOLDS = [
    # a lambda body reading an outer lambda's parameter: a copy of it per element of the inner list (L²)
    "array_to_string(flatten(list_transform([s], lambda v: list_transform(string_split(v, ''), lambda c: v))), '')",
    "list_transform([s], lambda v: list_transform(range(0, 100), lambda i: v))",
    "list_transform(string_split(s, ''), lambda c, i: repeat(c, 2) || i::VARCHAR)",
    "invoke(lambda a, b: b || b || b, t, repeat(s, 5))",
    # list_select: one element copied per index, the indices as many as a row's bytes (L²)
    "list_select([s], list_transform(string_split(s, ''), lambda c: 1))",
    # concat_ws joins a list's elements: a separator per element
    "concat_ws(s, string_split(s, ''))",
    "concat_ws('--', string_split(s, ''), t)",
    # formats writing an argument by position, or a width read from an argument
    "format('{0}{0}{0}{0}', format('{0}{0}{0}{0}', s))",
    "printf('%1$s%1$s%1$s', s)",
    "printf('%*s', x, s)",
    "format('{:>{}}', s, x)",
    "strftime(d, '%c%c%c%c')",
    # text forms: a list, struct or map quotes and escapes its elements, one per byte of a split text
    "string_split(s, '')::VARCHAR",
    "string_split(string_split(s, '')::VARCHAR, '')::VARCHAR",
    "regexp_extract_all(s, '')",
    "[[[[s]::VARCHAR]::VARCHAR]::VARCHAR]::VARCHAR",
    "ARRAY[ARRAY[ARRAY[s]::VARCHAR]::VARCHAR]::VARCHAR",
    "{'k': s}::VARCHAR",
    "MAP {s: s}::VARCHAR",
    "map_entries(MAP {s: s})",
    "list_zip(string_split(s, ''), string_split(s, ''))",
    "list_grade_up(string_split(s, ''))",
    "struct_insert({'a': s}, b := s)",
    "unpivot_list(s, s)",
    "list_where([s], [true, true])",
    "CAST(s AS VARCHAR[])",
    "regexp_extract(s, '(.*)', ['k'])",
    # encodings
    "bin(s)", "bin(bin(s))", "to_binary(s)", "encode(s)::VARCHAR", "encode(encode(s)::VARCHAR)::VARCHAR",
    "CAST(encode(s) AS BIT)", "icu_sort_key(s, 'de')", "json_structure('{\"a\":1,\"b\":2}')", "bitstring(bits, 2000)",
    "format_bytes(x)", "version()", "to_base(x * 1000000000000000, 2)", "regexp_escape(s)",
    "hive_partition_component(s, s)",
    # one copy of the value per path of a list of paths, per name of a list of groups
    "json_extract(to_json(s), [" + ", ".join(["'$'"] * 10) + "])",
    "json_extract_string(to_json(s), [" + ", ".join(["'$'"] * 10) + "])",
    "to_json(s) -> [" + ", ".join(["'$'"] * 10) + "]",
    "regexp_extract(s, '" + "(" * 10 + ".*" + ")" * 10 + "', [" + ", ".join(f"'g{i}'" for i in range(10)) + "])",
]


@pytest.mark.parametrize("expr", _BOUND_HOLDS)
def test_the_bound_holds_on_adversarial_rows(expr: str) -> None:
    a, b = sql_growth(parse_expression(expr), {})
    con = duckdb.connect()
    ran = 0
    for value in _VALUES:
        try:
            row = con.execute(f"SELECT octet_length(encode(CAST(({expr}) AS VARCHAR))) FROM ({_ROW})",
                              {"s": value}).fetchone()
        except (duckdb.ConversionException, duckdb.InvalidInputException):
            continue                       # (a value the call does not take: bitstring of a non-bit text ...)
        assert row is not None
        if row[0] is not None:
            length = _longest(con, value)
            assert row[0] <= a * length + b, (expr, value, row[0], (a, b), length)
            ran += 1
    assert ran, f"{expr} ran on none of the rows"



@pytest.mark.parametrize("expr", ["hex(x)", "to_hex(x)", "bin(x)", "to_binary(x)", "to_base(x, 2)"])
def test_the_bound_of_a_short_number_written_in_another_base(expr: str) -> None:
    """A row of one short number (``L`` = 2): ``hex(-1)`` of a HUGEINT is 32 digits, ``bin`` 128."""
    a, b = sql_growth(parse_expression(expr), {})
    con = duckdb.connect()
    ran = 0
    for value in ["-1::HUGEINT", "-1::BIGINT", "9::BIGINT", "9223372036854775807::BIGINT",
                  "170141183460469231731687303715884105727::HUGEINT"]:
        try:
            row = con.execute(f"SELECT strlen(({expr})::VARCHAR), strlen(x::VARCHAR) FROM (SELECT {value} AS x)"
                              ).fetchone()
        except (duckdb.InvalidInputException, duckdb.BinderException):
            continue                       # (to_base of a negative number or of a HUGEINT)
        assert row is not None and row[0] <= a * row[1] + b, (expr, value, row, (a, b))
        ran += 1
    assert ran >= 2



@pytest.mark.parametrize("expr", ["to_years(x)", "to_microseconds(x * 100000000000)", "make_timestamp(x::BIGINT)",
                                  "md5(x::VARCHAR)", "sha256(x::VARCHAR)", "CAST(x::VARCHAR || '-1-1' AS DATE)",
                                  "age(make_date(x, 1, 1))", "pi()", "json_valid(x::VARCHAR)", "hash(x)",
                                  "epoch_ms(x)", "strptime(x::VARCHAR, '%d')"])
def test_the_bound_of_a_call_writing_a_value_of_fixed_width(expr: str) -> None:
    """A row of one one-digit number (``L`` = 1): an interval, a timestamp, a hash is written in up to 96 bytes."""
    a, b = sql_growth(parse_expression(expr), {})
    row = duckdb.connect().execute(f"SELECT strlen(({expr})::VARCHAR) FROM (SELECT 1 AS x)").fetchone()
    assert row is not None and row[0] <= a + b, (expr, row[0], (a, b))


_GUARD = "SELECT COUNT(*) AS n FROM t WHERE length(CASE WHEN x > 100 THEN ({}) END::VARCHAR) > 1"
_NEST = "string_split({}::VARCHAR, '')"


@pytest.mark.parametrize("grow", [
    # L²: a copy of the outer parameter (a whole value) per byte of it
    "flatten(list_transform([s], lambda v: list_transform(string_split(v, ''), lambda c: v)))",
    "list_transform([s], lambda v: list_reduce(string_split(v, ''), lambda acc, c: acc || c || v))",
    "list_select([s], list_transform(string_split(s, ''), lambda c: 1))",
    "concat_ws(s, string_split(s, ''))",
    # sizes decided by a value
    "printf('%*s', x, s)", "printf('%-*.*f', x, x, 1.5)", "format('{:>{}}', s, x)",
    # nesting that multiplies: text forms, encodings, positional formats
    _NEST.format(_NEST.format(_NEST.format(_NEST.format(_NEST.format("s"))))),
    "[" * 15 + "s" + "]::VARCHAR" * 15,
    "ARRAY[" * 15 + "s" + "]::VARCHAR" * 15,
    "bin(bin(bin(bin(bin(s)))))",
    "encode(encode(encode(encode(encode(encode(encode(encode(s)::VARCHAR)::VARCHAR)::VARCHAR)::VARCHAR)::VARCHAR)"
    "::VARCHAR)::VARCHAR)::VARCHAR",
    "format('" + "{0}" * 3000 + "', format('" + "{0}" * 3000 + "', s))",
    "printf('" + "%1$s" * 2000 + "', printf('" + "%1$s" * 2000 + "', s))",
    "repeat(strftime(CAST(x AS TIMESTAMP), '" + "%c" * 10 + "'), 1000)",
    "list_filter([repeat(s, 1000)], lambda v: length(repeat(v, 10000)) > 0)",
    "invoke(lambda a, b: repeat(b, 10000), s, repeat(s, 1000))",
    "json_extract(json_extract(to_json(s), [" + ", ".join(["'$'"] * 200) + "])::VARCHAR, ["
    + ", ".join(["'$'"] * 200) + "])",
    "((to_json(s) -> [" + ", ".join(["'$'"] * 200) + "])::VARCHAR) -> [" + ", ".join(["'$'"] * 200) + "]",
    "repeat(icu_sort_key(repeat(s, 1000), 'de'), 10)",
])
@pytest.mark.parametrize("backend", ["duckdb", "polars"])
def test_growth_beyond_the_bound_is_refused_free_when_built(grow: str, backend: str) -> None:
    sess = _session(backend)
    with pytest.raises(dp.errors.PlanError, match="grow") as e:
        sess.sql(_GUARD.format(grow))
    assert e.value.argument == "sql" and "Fix:" in str(e.value)
    assert sess.history().height == 0


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT COUNT(*) AS n FROM t WHERE len(list_transform(string_split(s, ''), lambda c, i: c || i::VARCHAR)) = 2",
     40),
    ("SELECT COUNT(*) AS n FROM t WHERE len(flatten(list_transform(l, lambda v: list_transform(string_split(v, ''), "
     "lambda c: upper(c))))) = 2", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE list_reduce(string_split(s, ''), lambda acc, c: acc || c, '>') = '>ab'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE invoke(lambda a, b: a || b, s, t) = 'abcd'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE concat_ws('-', s, t, l) = 'ab-cd-a-b'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE concat_ws(t, s, s) = 'abcdab'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE format('{0}{0}', s) = 'abab'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE printf('%s-%5d', s, x) = 'ab-    1'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE length(range(0, 100)::VARCHAR) > 10", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE bin(s) = '0110000101100010'", 40),
    ("SELECT COUNT(*) AS n FROM t WHERE string_split(s, '')::VARCHAR = '[a, b]'", 40),
    ("WITH a AS (SELECT u, string_split(s, '') AS p FROM t) SELECT COUNT(*) AS n FROM a WHERE len(p) = 2", 40),
])
def test_ordinary_sql_still_runs(sql: str, expected: int) -> None:
    sess = _session()
    assert sess.sql(sql).collect(dp.PureDP(10)).item() == pytest.approx(expected, abs=10)


def test_the_growth_walk_is_not_what_a_deep_query_overflows() -> None:
    """The walk recurses, three Python frames a call: at the default limit it copes with about 250 nested calls, where
    the compiler's other checks already give up at about 80 — a RecursionError there becomes the builder's own refusal
    ("nested too deep", free, decided by the query's text alone), never a Python error out of ``sess.sql``."""
    deep = "s"
    for _ in range(200):
        deep = f"trim({deep})"
    assert check_sql_growth(parse_expression(deep), {}, "WHERE") == (1, 0)
    sess = _session()
    with pytest.raises(dp.errors.PlanError, match="nested too deep") as e:
        sess.sql(f"SELECT COUNT(*) AS n FROM t WHERE length({deep}) > 1")
    assert e.value.argument == "sql"
    assert sess.history().height == 0
