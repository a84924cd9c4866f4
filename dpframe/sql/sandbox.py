"""Locked-down DuckDB connections, the DuckDB function catalog, and SQL rendering helpers.

Every DuckDB connection dpframe opens is private to the engine: an in-memory database with Python
replacement scans off (no variable of the caller is readable), extension auto-install/auto-load off,
external access (files, network, ``read_csv``, ``COPY``, ``ATTACH``) off except for the Parquet files the
data owner registered, no progress bar (DuckDB prints one to standard output for a query running over 2 s),
and the configuration locked so later SQL cannot undo any of it.

Example:
    >>> con = connect()
    >>> con.execute("SELECT 40 + 2").fetchall()
    [(42,)]
    >>> render_expression(parse_expression("a+1"))
    '(a + 1)'

"""

from __future__ import annotations

import atexit
import copy
import json
import os
import re
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import duckdb

from dpframe.sealed import plain_cache

Json = dict[str, Any]

CONFIG: Mapping[str, str | bool] = MappingProxyType({
    "python_enable_replacements": False,
    "python_scan_all_frames": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
})


def quote(name: str) -> str:
    """A DuckDB quoted identifier (``"a""b"`` for ``a"b``)."""
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    """A DuckDB string literal."""
    return "'" + text.replace("'", "''") + "'"


def lock(con: duckdb.DuckDBPyConnection, allowed_paths: Iterable[str] = ()) -> None:
    """Turn off external access (except ``allowed_paths``) and lock the configuration."""
    paths = list(allowed_paths)
    if paths:
        con.execute("SET allowed_paths = [" + ", ".join(literal(p) for p in paths) + "]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def connect(*, locked: bool = True) -> duckdb.DuckDBPyConnection:
    """A new private in-memory connection (locked unless ``locked=False``: then call :func:`lock`).

    Its time zone is UTC, whatever the machine's: DuckDB reads the fields of a time-zoned timestamp
    (``hour(ts)``, ``ts::DATE`` ...) in the connection's zone, so an answer would otherwise depend on
    where the query runs.
    """
    con = duckdb.connect(":memory:", config=dict(CONFIG))
    con.execute("SET TimeZone = 'UTC'")     # not in CONFIG: the time-zone extension loads after connecting
    con.execute("SET enable_progress_bar = false")  # (a session setting): a query over 2 s printed its progress
    _OPEN.add(con)
    if locked:
        lock(con)
    return con


PROBE_MEMORY = "512MB"
"""The memory the engine's shared (checking) connection may use."""
_LOCK = threading.RLock()
_SHARED: dict[int, duckdb.DuckDBPyConnection] = {}
"""Per process id: the connection of :func:`_shared` (a forked child opens its own)."""
_OPEN: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()
_PUBLIC: dict[int, duckdb.DuckDBPyConnection] = {}
"""Per process id: the database of :func:`public_connection` (a forked child opens its own)."""


def _after_fork_in_child() -> None:
    """A forked child's own lock: the parent's may have been held by another of its threads at the fork.

    ``os.fork`` copies only the forking thread, so a lock that another thread held then stays held in the
    child for ever: its first SQL query (parsed on :func:`_shared`, post-processed on
    :func:`public_connection`) waited on it without end. The parent's DuckDB connections are not used in the
    child either (both are kept per process id): DuckDB's own state is not fork-safe.
    """
    global _LOCK
    _LOCK = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_all() -> None:
    """Close dpframe's connections before the interpreter tears DuckDB's bindings down."""
    for con in list(_OPEN):
        try:
            con.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass
    _SHARED.clear()
    _PUBLIC.clear()


@contextmanager
def public_connection() -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection of its own, for the block, to the process's database for public and released data.

    SQL over data that is not private (the released frame a SQL query post-processes, the public tables of
    a public subquery) runs here. Opening a DuckDB database costs about 12 ms (a fresh connection per query
    did); a cursor on this one costs well under 1 ms. Each cursor is a separate connection: what it
    registers is visible to it alone and is gone when the block ends, so concurrent queries never see each
    other's frames. The database is locked as :func:`connect`'s are, its time zone UTC for every cursor.
    The lock covers settings and files, not DDL: a cursor can create a macro, a table, a type or an attached
    database there, or detach the default one (``CREATE MACRO abs(x) AS 1000`` made every later cursor's
    ``abs`` answer 1000). Each cursor searches only its own temporary catalog (where ``register`` puts its
    frames) and DuckDB's built-ins, which no cursor can create anything in or change.
    A cursor can also fill the database's memory (a large table in ``memory.main``): post-processing after a
    release may then fail, charged — a denial of service only, since it reads released rows alone
    (``docs/guarantees.md``, resource exhaustion).

    Example:
        >>> with public_connection() as con:
        ...     con.sql("SELECT current_setting('TimeZone') AS tz").fetchall()
        [('UTC',)]

    """
    with _LOCK:
        database = _PUBLIC.get(os.getpid())
        if database is None:
            database = connect(locked=False)
            database.execute("SET GLOBAL TimeZone = 'UTC'")
            lock(database)
            _PUBLIC[os.getpid()] = database
        con = database.cursor()
    try:
        con.execute("SET search_path = 'temp'")   # (a per-connection setting): nothing another cursor created
        yield con
    finally:
        con.close()


@contextmanager
def _shared() -> Iterator[duckdb.DuckDBPyConnection]:
    """The process-wide locked connection used for parsing, rendering and schema derivation.

    It never holds private data: only empty frames with a table's schema are registered on it. Private to
    the engine: it is locked against files and settings, not against ``CREATE MACRO``, and a macro on it
    would change the types the planner derives for SQL expressions (not what the backends run). It may
    use at most :data:`PROBE_MEMORY` (the SQL checks run expressions on adversarial values there: one that
    would allocate more fails, and is refused).
    """
    with _LOCK:
        con = _SHARED.get(os.getpid())
        if con is None:
            con = connect(locked=False)
            con.execute(f"SET memory_limit = {literal(PROBE_MEMORY)}")
            con.execute("SET threads = 1")
            lock(con)
            _SHARED[os.getpid()] = con
        yield con


@lru_cache(maxsize=1)
def macro_copies() -> Mapping[str, int]:
    """``{built-in macro: the most times its definition reads one parameter}``, for those reading one more than once.

    DuckDB expands a macro's call into its definition when it binds it: ``nullif(a, b)`` binds ``a`` twice, so
    nested ``n`` deep ``2ⁿ`` times (:func:`dpframe.sql.parse.copies`). Read-only, the process's cache.

    Example:
        >>> macro_copies()["nullif"]
        2

    """
    with _shared() as con:
        rows = con.execute("SELECT lower(function_name), parameters, coalesce(macro_definition, '') "
                           "FROM duckdb_functions() WHERE function_type = 'macro'").fetchall()
    out: dict[str, int] = {}
    for name, parameters, definition in rows:
        most = max([len(re.findall(r"\b" + re.escape(str(p)) + r"\b", str(definition))) for p in parameters or []]
                   or [0])
        if most > 1:
            out[str(name)] = max(out.get(str(name), 0), most)
    return MappingProxyType(out)


@lru_cache(maxsize=1)
def function_types() -> Mapping[str, frozenset[str]]:
    """``{function name: {"scalar", "aggregate", "table", "macro", ..., "volatile"}}`` of this DuckDB build.

    ``"volatile"`` marks functions whose result may differ between calls (``random``, ``nextval`` ...);
    ``"of_query"`` those with an overload that reads nothing but the query or its transaction (``now``,
    ``today``, ``txid_current`` ...: DuckDB calls them consistent within a query, not volatile).
    Built-in *macros* are classified by their definition: ``"aggregate_macro"`` when it calls an
    aggregate (``geomean``, ``weighted_avg``, ``json_group_array`` ...), ``"subquery_macro"`` when it
    runs a subquery or a window (``pg_get_viewdef`` ...).

    Read-only: the SQL checker refuses functions by it, and the cache is the process's.
    """
    with _shared() as con:
        rows = con.execute("SELECT DISTINCT lower(function_name), function_type, stability = 'VOLATILE', "
                           "lower(coalesce(macro_definition, '')), stability = 'CONSISTENT_WITHIN_QUERY' "
                           "AND len(parameters) = 0 FROM duckdb_functions()").fetchall()
    out: dict[str, set[str]] = {}
    for name, kind, volatile, _, of_query in rows:
        out.setdefault(name, set()).add(kind)
        if volatile:
            out[name].add("volatile")
        if of_query:
            out[name].add("of_query")
    aggregates = {name for name, kinds in out.items() if "aggregate" in kinds}
    for name, kind, _, definition, _ in rows:
        if kind == "macro":
            calls = set(re.findall(r"([a-z_][a-z0-9_]*)\s*\(", definition))
            if calls & aggregates:
                out[name].add("aggregate_macro")
            if re.search(r"\b(select|over)\b", definition):
                out[name].add("subquery_macro")
    return MappingProxyType({k: frozenset(v) for k, v in out.items()})


@lru_cache(maxsize=1)
def return_types() -> Mapping[str, frozenset[str]]:
    """``{function name: the return types of its scalar overloads}`` of this DuckDB build (lower-case names).

    Example:
        >>> sorted(return_types()["to_years"])
        ['INTERVAL']

    """
    with _shared() as con:
        rows = con.execute("SELECT lower(function_name), list(DISTINCT return_type) FROM duckdb_functions() "
                           "WHERE function_type = 'scalar' GROUP BY ALL").fetchall()
    return MappingProxyType({name: frozenset(str(t) for t in types) for name, types in rows})


@lru_cache(maxsize=1)
def lambda_parameters() -> Mapping[str, frozenset[int]]:
    """``{function name: positions of its LAMBDA parameters}`` of this DuckDB build (``list_transform``: ``{1}``).

    A lambda there is a lambda; an arrow ``a -> b`` anywhere else is DuckDB's JSON extraction.

    Example:
        >>> lambda_parameters()["list_transform"], lambda_parameters()["invoke"]
        (frozenset({1}), frozenset({0}))

    """
    with _shared() as con:
        rows = con.execute("SELECT DISTINCT lower(function_name), parameter_types FROM duckdb_functions() "
                           "WHERE list_contains(parameter_types, 'LAMBDA')").fetchall()
    out: dict[str, set[int]] = {}
    for name, params in rows:
        out.setdefault(name, set()).update(i for i, p in enumerate(params) if p == "LAMBDA")
    return MappingProxyType({k: frozenset(v) for k, v in out.items()})


def serialize(text: str) -> Json:
    """DuckDB's own parse tree of ``text`` (``json_serialize_sql``), errors included: a fresh copy each call."""
    result: Json = json.loads(_serialized(text))
    return result


@plain_cache(maxsize=256)
def _serialized(text: str) -> str:
    """The JSON text of :func:`serialize`; a function of the text alone, so a query asked again skips DuckDB."""
    with _shared() as con:
        out: str = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [text]).fetchall()[0][0]
    return out


@lru_cache(maxsize=1)
def _template() -> str:
    return json.dumps(serialize("SELECT 1"))


def statement(node: Json) -> Json:
    """A serialized statement around a query node (the input of :func:`render`)."""
    doc = json.loads(_template())
    doc["statements"][0]["node"] = node
    return doc  # type: ignore[no-any-return]


def render(node: Json) -> str:
    """SQL text of a query node (``json_deserialize_sql``)."""
    with _shared() as con:
        text: str = con.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(statement(node))]).fetchall()[0][0]
    return text


def select_node(select_list: list[Json]) -> Json:
    """A ``SELECT <items>`` node with no FROM clause."""
    node = copy.deepcopy(json.loads(_template())["statements"][0]["node"])
    node["select_list"] = select_list
    return node  # type: ignore[no-any-return]


def render_expression(expr: Json) -> str:
    """SQL text of one expression (its alias dropped)."""
    expr = dict(expr, alias="")
    text = render(select_node([expr]))
    assert text.startswith("SELECT "), text
    return text[len("SELECT "):]


def parse_expression(text: str) -> Json:
    """The parse tree of one SQL expression (for tests and docs)."""
    doc = serialize(f"SELECT {text}")
    if doc.get("error"):
        raise ValueError(doc.get("error_message"))
    return doc["statements"][0]["node"]["select_list"][0]  # type: ignore[no-any-return]
