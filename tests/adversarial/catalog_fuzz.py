"""Run every scalar function of DuckDB's catalog under ``TRY(...)`` on adversarial values of its parameter types.

``TRY`` turns conversion, range and invalid-input errors into NULL, not others (see :mod:`dpframe.sql.uncaught`):
:func:`findings` lists the signatures that raise another error on some argument values, with those values.
``test_sql_catalog_fuzz.py`` checks that dpframe refuses each of them when the query is built.

Values are SQL literals; a signature's calls are its arguments at their first value, each argument in turn at
every value of its pool, and for two-argument signatures every pair of the pools' first eight values. Generic
parameters (``ANY``, ``T``, ``K``, ``V``, ``T[]``, ``MAP(K, V)`` ...) take values of many types, most of which
the binder refuses (those calls are skipped: a binder error does not depend on a row).

Example:
    >>> "BIGINT" in VALUES and "MAP(K, V)" in VALUES
    True

"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import duckdb

_ANY = ["'a'", "1", "(-1)", "1.5::DOUBLE", "''", "'%'", "DATE '2020-01-01'", "INTERVAL 1 DAY",
        "TIMESTAMP '2020-01-01'", "true", "'\\xAA'::BLOB", "'{\"a\":1}'::JSON", "[1, 2]", "['a', '']", "[]::INTEGER[]",
        "{'a': 1}", "MAP {'a': 1}", "'nan'::DOUBLE", "9223372036854775807", "INTERVAL 0 DAY", "' '", "'UTC'",
        "2147483647", "0", "'[1'", "'$.a'"]
_LISTS = ["[1, 2]", "[]::INTEGER[]", "['a', 'b']", "['']", "[NULL]::VARCHAR[]", "[[1], [2, 3]]", "[{'a': 1}]",
          "[INTERVAL 1 DAY]", "[DATE '2020-01-01']", "[1.5, 'nan'::DOUBLE]", "[9223372036854775807, 1]",
          "[MAP {'a': 1}]", "['%', '\\']", "[0, -1]", "[true, false]", "['\\xAA'::BLOB]", "['a', 'a']", "[1, 1, NULL]"]
_STRUCTS = ["{'a': 1}", "{'a': 1, 'b': 'x'}", "{'a': INTERVAL 1 DAY}", "{'a': [1, 2]}", "{'a': NULL}"]
_MAPS = ["MAP {'a': 1}", "MAP {}", "MAP {1: 'a'}", "MAP {'a': [1]}", "MAP {'': NULL}", "MAP {INTERVAL 1 DAY: 1}"]
VALUES: dict[str, list[str]] = {
    "VARCHAR": ["'a'", "''", "'%'", "'\\'", "'xy'", "'('", "'[1'", "'{\"a\":1}'", "'nan'", "'-1'", "'2020-01-01'",
                "'é'", "' '", "'1e400'", "'a,b'", "'%s'", "'{}'", "'__'", "'$.a'", "'0x'", "'\\x'", "'abc'",
                "'UTC'", "'$[*]'", "'[1, 2]'", "'POINT (1 2)'"],
    "BIGINT": ["1", "0", "-1", "2", "63", "64", "-9223372036854775808", "9223372036854775807", "1000000",
               "2147483647"],
    "INTEGER": ["1::INTEGER", "0::INTEGER", "-1::INTEGER", "2147483647::INTEGER", "(-2147483648)::INTEGER",
                "65::INTEGER"],
    "DOUBLE": ["1.5::DOUBLE", "0.0::DOUBLE", "(-0.0)::DOUBLE", "(-1.0)::DOUBLE", "'nan'::DOUBLE", "'inf'::DOUBLE",
               "'-inf'::DOUBLE", "1e308::DOUBLE", "5e-324::DOUBLE", "1e20::DOUBLE"],
    "DATE": ["DATE '2020-01-01'", "'infinity'::DATE", "'-infinity'::DATE", "DATE '5877642-06-25'",
             "DATE '5877642-06-25 (BC)'"],
    "TIMESTAMP": ["TIMESTAMP '2020-01-01'", "'infinity'::TIMESTAMP", "'-infinity'::TIMESTAMP",
                  "TIMESTAMP '294247-01-10 04:00:54'", "TIMESTAMP '290309-12-22 (BC) 00:00:00'"],
    "BOOLEAN": ["true", "false"],
    "INTERVAL": ["INTERVAL 1 DAY", "INTERVAL '2147483647 months'", "to_microseconds(9223372036854775807)",
                 "INTERVAL '-2147483648 days'", "INTERVAL 0 SECOND"],
    "BLOB": ["'\\xAA'::BLOB", "''::BLOB", "'a'::BLOB"],
    "HUGEINT": ["1::HUGEINT", "170141183460469231731687303715884105727::HUGEINT", "0::HUGEINT",
                "(-170141183460469231731687303715884105727-1)::HUGEINT"],
    "UHUGEINT": ["1::UHUGEINT", "340282366920938463463374607431768211455::UHUGEINT", "0::UHUGEINT"],
    "TIME": ["TIME '00:00:00'", "TIME '24:00:00'", "TIME '23:59:59.999999'"],
    "TIME_NS": ["TIME_NS '00:00:00'", "TIME_NS '23:59:59.999999999'"],
    "TIME WITH TIME ZONE": ["TIMETZ '00:00:00+00'", "TIMETZ '24:00:00-15:59:59'", "TIMETZ '12:00:00+15:59:59'"],
    "TIMESTAMP WITH TIME ZONE": ["TIMESTAMPTZ '2020-01-01'", "'infinity'::TIMESTAMPTZ",
                                 "TIMESTAMPTZ '294247-01-10 04:00:54+00'"],
    "TIMESTAMP_NS": ["TIMESTAMP_NS '2020-01-01'", "'infinity'::TIMESTAMP_NS", "TIMESTAMP_NS '2262-04-11 23:47:16'"],
    "TIMESTAMPTZ_NS": ["'2020-01-01'::TIMESTAMPTZ_NS", "'infinity'::TIMESTAMPTZ_NS"],
    "TIMESTAMP_S": ["TIMESTAMP_S '2020-01-01'", "'infinity'::TIMESTAMP_S"],
    "TIMESTAMP_MS": ["TIMESTAMP_MS '2020-01-01'", "'infinity'::TIMESTAMP_MS"],
    "JSON": ["'{\"a\":1}'::JSON", "'[1,2]'::JSON", "'null'::JSON", "'1'::JSON", "'\"a\"'::JSON"],
    "FLOAT": ["1.5::FLOAT", "'nan'::FLOAT", "3.4e38::FLOAT", "0::FLOAT"],
    "SMALLINT": ["1::SMALLINT", "(-32768)::SMALLINT", "32767::SMALLINT", "0::SMALLINT"],
    "TINYINT": ["1::TINYINT", "(-128)::TINYINT", "127::TINYINT", "0::TINYINT"],
    "UBIGINT": ["1::UBIGINT", "18446744073709551615::UBIGINT", "0::UBIGINT"],
    "UINTEGER": ["1::UINTEGER", "4294967295::UINTEGER", "0::UINTEGER"],
    "USMALLINT": ["1::USMALLINT", "65535::USMALLINT", "0::USMALLINT"],
    "UTINYINT": ["1::UTINYINT", "255::UTINYINT", "0::UTINYINT"],
    "DECIMAL": ["1.5::DECIMAL(4,1)", "99999999999999999999999999999999999999::DECIMAL(38,0)", "(-9.9)::DECIMAL(2,1)"],
    "UUID": ["'00000000-0000-0000-0000-000000000000'::UUID", "'ffffffff-ffff-ffff-ffff-ffffffffffff'::UUID"],
    "BIT": ["'0101'::BIT", "'1'::BIT"],
    "BIGNUM": ["'1'::BIGNUM", "'-99999999999999999999999999999999999999999'::BIGNUM"],
    "VARIANT": ["1::VARIANT", "'a'::VARIANT", "[1, 2]::VARIANT", "{'a': 1}::VARIANT", "NULL::VARIANT"],
    "GEOMETRY": ["'POINT (1 2)'::GEOMETRY", "'LINESTRING (0 0, 1 1)'::GEOMETRY", "'POINT EMPTY'::GEOMETRY"],
    "VARCHAR[]": ["['a', 'b']", "[]::VARCHAR[]", "['']", "[NULL]::VARCHAR[]", "['%', '\\']", "['UTC']"],
    "BIGINT[]": ["[1, 2]", "[]::BIGINT[]", "[9223372036854775807, 1]", "[0, -1]", "[2147483647]"],
    "BOOLEAN[]": ["[true, false]", "[]::BOOLEAN[]", "[NULL]::BOOLEAN[]"],
    "DOUBLE[]": ["[1.0, 2.0]::DOUBLE[]", "[]::DOUBLE[]", "['nan'::DOUBLE]", "[1e308, 1e308]::DOUBLE[]"],
    "FLOAT[]": ["[1.0, 2.0]::FLOAT[]", "[]::FLOAT[]", "['nan'::FLOAT]", "[3e38, 3e38]::FLOAT[]"],
    "DOUBLE[ANY]": ["[1.0, 2.0]::DOUBLE[2]", "[1.0, 2.0, 3.0]::DOUBLE[3]", "['nan'::DOUBLE, 0]::DOUBLE[2]",
                    "[1e308, 1e308]::DOUBLE[2]"],
    "FLOAT[ANY]": ["[1.0, 2.0]::FLOAT[2]", "[1.0, 2.0, 3.0]::FLOAT[3]", "['nan'::FLOAT, 0]::FLOAT[2]",
                   "[3e38, 3e38]::FLOAT[2]"],
    "DOUBLE[3]": ["[1.0, 2.0, 3.0]::DOUBLE[3]", "[0, 0, 0]::DOUBLE[3]", "['nan', 1e308, -1e308]::DOUBLE[3]"],
    "FLOAT[3]": ["[1.0, 2.0, 3.0]::FLOAT[3]", "[0, 0, 0]::FLOAT[3]", "['nan', 3e38, -3e38]::FLOAT[3]"],
    "ANY": _ANY, "T": _ANY, "K": _ANY, "V": _ANY,
    "ANY[]": _LISTS, "T[]": _LISTS, "K[]": _LISTS, "V[]": _LISTS,
    "T[][]": ["[[1], [2, 3]]", "[[]]::INTEGER[][]", "[]::INTEGER[][]", "[['a'], NULL]", "[[NULL]]::INTEGER[][]"],
    "MAP(K, V)": _MAPS,
    "STRUCT": _STRUCTS, "TUPLE": _STRUCTS,
    "TUPLE(K, V)[]": ["[{'key': 'a', 'value': 1}]", "[]::STRUCT(key VARCHAR, value INTEGER)[]",
                      "[{'key': 'a', 'value': 1}, {'key': 'a', 'value': 2}]", "[{'key': NULL, 'value': 1}]"],
    'STRUCT("year" BIGINT, "month" BIGINT, "day" BIGINT)': [
        "{'year': 2020, 'month': 1, 'day': 1}", "{'year': 9223372036854775807, 'month': 1, 'day': 1}",
        "{'year': 2020, 'month': 13, 'day': 0}", "{'year': -2147483648, 'month': -1, 'day': 2147483647}"],
    "UNION": ["union_value(a := 1)", "union_value(b := 'x')"],
    "LAMBDA": ["lambda x: x", "lambda x, y: x", "lambda x: x IS NULL", "lambda x, i: i"],
}
"""SQL literals of each parameter type of the catalog; the first, a typical one, is a signature's usual value of it."""

SKIPPED = frozenset({"error", "sleep_ms", "getvariable", "current_setting", "unnest", "unlist"})
"""Functions that raise or wait by design, read settings, or are table operators; all out of row-level SQL."""


@dataclass(frozen=True)
class Finding:
    """A signature ``name(params)`` and argument values on which it raises ``error`` under ``TRY``."""

    name: str
    params: tuple[str, ...]
    values: tuple[str, ...]
    error: str
    message: str


def connect() -> duckdb.DuckDBPyConnection:
    """A memory-capped single-threaded connection (an unchecked ``repeat`` would otherwise take the machine)."""
    return duckdb.connect(config={"memory_limit": "64MB", "threads": "1"})


def signatures(con: duckdb.DuckDBPyConnection) -> list[tuple[str, tuple[str, ...]]]:
    """Every deterministic scalar signature whose parameter types :data:`VALUES` covers, in a fixed order.

    A variadic one gets its variadic type appended once when it has fewer than two parameters. A scalar macro
    (``list_kurtosis(l)``, ``split_part(s, d, i)`` ...) has untyped parameters: each is ``ANY``. The list
    aggregates (``list_aggr(l, 'name', ...)``) get one signature per aggregate function, with no extra
    argument and with one: a parameter ``=<sql>`` always takes the value ``<sql>``.
    """
    rows = con.execute("SELECT function_name, function_type, parameter_types, varargs FROM duckdb_functions() "
                       "WHERE function_type IN ('scalar', 'macro') AND stability IS DISTINCT FROM 'VOLATILE'"
                       ).fetchall()
    aggregates = sorted({name for (name,) in con.execute(
        "SELECT function_name FROM duckdb_functions() WHERE function_type = 'aggregate'").fetchall()})
    found = set()
    for name, kind, params, varargs in rows:
        if name in SKIPPED or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            continue
        full = tuple("ANY" if kind == "macro" else p for p in params)
        full += (varargs,) if varargs and len(params) < 2 else ()
        if (tuple(params), varargs) == (("ANY[]", "VARCHAR"), "ANY"):     # list_aggr and its aliases
            for aggregate in aggregates:
                found |= {(name, ("ANY[]", f"='{aggregate}'")), (name, ("ANY[]", f"='{aggregate}'", "ANY"))}
        elif full and all(p in VALUES for p in full):
            found.add((name, full))
    return sorted(found)


def _pool(param: str) -> list[str]:
    return [param[1:]] if param.startswith("=") else VALUES[param]


def _calls(params: tuple[str, ...]) -> list[tuple[str, ...]]:
    usual = [_pool(p)[0] for p in params]
    combos = {tuple(usual)}
    for i, p in enumerate(params):
        for v in _pool(p):
            combos.add(tuple(usual[:i] + [v] + usual[i + 1:]))
    if len(params) == 2:
        combos |= {(a, b) for a in _pool(params[0])[:8] for b in _pool(params[1])[:8]}
    return sorted(combos)


def call_sql(name: str, args: tuple[str, ...]) -> str:
    """``name(arg, ...)``."""
    return f"{name}({', '.join(args)})"


def _runs(con: duckdb.DuckDBPyConnection, name: str, values: tuple[str, ...]) -> str | None:
    """None if the call runs under TRY (or does not bind), else ``"<ExceptionType>: message"``."""
    lambdas = [i for i, v in enumerate(values) if v.startswith("lambda ")]
    cols = ", ".join(f"{v} AS c{i}" for i, v in enumerate(values) if i not in lambdas) or "1 AS c"
    args = tuple(v if i in lambdas else f"c{i}" for i, v in enumerate(values))
    try:
        con.execute(f"SELECT TRY({call_sql(name, args)}) IS NULL FROM (SELECT {cols} FROM range(2)) t").fetchall()
    except (duckdb.BinderException, duckdb.CatalogException):
        return None
    except duckdb.Error as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return None


MODES = 3
"""At most this many failing calls are kept per signature, each with an error of its own (its type and message,
quoted values and numbers left out): a signature can fail in several ways (``LIKE ... ESCAPE`` on an escape
longer than one character, and on a pattern ending with its escape)."""


def findings(con: duckdb.DuckDBPyConnection,
             chosen: list[tuple[str, tuple[str, ...]]] | None = None) -> Iterator[Finding]:
    """Failing calls of each signature (of ``chosen``, default :func:`signatures`), at most :data:`MODES`."""
    for name, params in signatures(con) if chosen is None else chosen:
        seen: set[str] = set()
        for values in _calls(params):
            error = _runs(con, name, values)
            if error is None or (mode := re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "", error)) in seen:
                continue
            seen.add(mode)
            kind, _, message = error.partition(": ")
            yield Finding(name, params, values, kind, message)
            if len(seen) == MODES:
                break


HEADROOM = 1_500_000_000
"""Bytes of address space the fuzz process may take beyond what it holds once DuckDB is loaded."""


def run_isolated() -> list[Finding]:
    """:func:`findings` of every signature, computed in a child process whose address space is capped.

    Some calls (``lpad`` to a huge length ...) allocate outside DuckDB's memory limit: capped, the allocation
    fails inside DuckDB (an ``OutOfMemoryException``, a finding) instead of the machine running out of memory.
    """
    done = subprocess.run([sys.executable, "-m", "tests.adversarial.catalog_fuzz"], capture_output=True, text=True,
                          check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return [Finding(r["name"], tuple(r["params"]), tuple(r["values"]), r["error"], r["message"]) for r in rows]


def _main() -> None:
    con = connect()
    with open("/proc/self/statm") as statm:
        held = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (held + HEADROOM, held + HEADROOM))
    for found in findings(con):
        print(json.dumps(asdict(found)), flush=True)


if __name__ == "__main__":
    _main()
