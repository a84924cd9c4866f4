"""Row-level SQL expressions: the allow-list check, column resolution, schema derivation, node building.

Before aggregation every expression must be computed from one row at a time: aggregates, window
functions, subqueries, table functions, ``*`` and parameters are refused with a
:class:`~dpframe.errors.PlanError` that quotes the fragment. So are functions that change engine state or
read its configuration (``setseed``, ``nextval``, ``current_setting`` ...), non-deterministic ones
(every function DuckDB marks volatile: ``random``, ``uuid``, ``nextval``, ``sleep_ms`` ...), functions of
the query rather than the row (``now``, ``today``, ``txid_current``, one-argument ``age`` ...), ``unnest``
(it multiplies rows) and ``error`` (a data-dependent failure is a side channel). Everything else DuckDB
knows as a scalar function is allowed. An arrow ``a -> b`` is checked as the ``json_extract(a, b)`` DuckDB
binds it as, except as a list function's lambda argument (rendered as ``lambda x: ...``).

No row-level expression may fail because of a private value (the failure itself would reveal
something): the DuckDB backend evaluates each one under ``TRY(...)`` (:func:`guard`), so an error becomes
NULL — in ``WHERE`` the row is dropped — like Polars' non-strict casts. The calls and casts that raise an
error ``TRY`` does not catch are refused when the expression is built (:mod:`dpframe.sql.uncaught`: each is
run once on typical values, and casts to ``VARIANT`` are refused).

Example:
    >>> import polars as pl
    >>> from dpframe.plan.nodes import Scan
    >>> from dpframe.sql.sandbox import parse_expression
    >>> scan = Scan.of("t", pl.Schema({"age": pl.Int64}))
    >>> scope = Scope([Column("age", "age", frozenset({"t"}), "t.age")])
    >>> node = build_filter(scan, parse_expression("age >= 18"), scope, "age >= 18")
    >>> node.sql, node.polars is not None
    ('(age >= 18)', True)

"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import polars as pl

from dpframe.engine_output import ENGINE
from dpframe.errors import PlanError, SchemaError
from dpframe.plan.growth import column_growth
from dpframe.plan.nodes import Node, check_new_names
from dpframe.plan.totality import total_expression
from dpframe.sql.growth import check_sql_growth, sql_column_growth
from dpframe.sql.handover import for_duckdb
from dpframe.sql.nodes import SQLFilter, SQLProject, guard
from dpframe.sql.parse import fragment
from dpframe.sql.sandbox import (
    Json,
    _shared,
    function_types,
    lambda_parameters,
    parse_expression,
    quote,
    render,
    render_expression,
    select_node,
)
from dpframe.sql.scope import Column, Scope
from dpframe.sql.topolars import Untranslatable, to_polars
from dpframe.sql.uncaught import argument_list, calls, check_call, check_type, operands, try_is_null, typical_call

DENIED: Mapping[str, str] = MappingProxyType({
    "current_setting": "it reads the engine's configuration", "getvariable": "it reads engine variables",
    "error": "a data-dependent error is a side channel",
    "unnest": "it turns one row into several", "unlist": "it turns one row into several",
})
_ROWLEVEL_HINT = "before aggregation every expression must be computed from one row at a time"


class _Checker:
    """Walks one expression: refuses what is not row-level, rewrites column references to plan columns."""

    def __init__(self, text: str, scope: Scope, where: str) -> None:
        self.text, self.scope, self.where = text, scope, where
        self.origins: list[Column] = []

    def refuse(self, node: Json, what: str, fix: str) -> PlanError:
        return PlanError(f"{what} in {self.where}: {fragment(self.text, node)}", argument="sql", fix=fix)

    def walk(self, node: Any, params: frozenset[str] = frozenset()) -> Any:
        if isinstance(node, list):
            return [self.walk(x, params) for x in node]
        if not isinstance(node, dict):
            return node
        cls = node.get("class")
        if cls is None:
            return {k: self.walk(v, params) for k, v in node.items()}
        if cls == "COLUMN_REF":
            return self.column(node, params)
        if cls == "FUNCTION":
            self.function(node)
            return self.call(node, params)
        if cls == "LAMBDA":
            if node.get("syntax_type") != "SINGLE_ARROW":
                raise self.refuse(node, "a lambda is allowed only as the lambda argument of a list function",
                                  "e.g. list_transform(l, lambda x: x + 1)")
            # Not a list function's lambda argument: DuckDB binds ``a -> b`` as json_extract(a, b). Checked (and
            # rendered) as that call: its left side is an expression like any other, not lambda parameters.
            return self.walk(json_extract(node), params)
        elif cls == "SUBQUERY":
            raise self.refuse(node, "subqueries inside expressions are not supported",
                              "join a public table instead, or compute the value as a separate query")
        elif cls == "WINDOW":
            raise self.refuse(node, "window functions combine rows", f"{_ROWLEVEL_HINT}; remove the OVER (...)")
        elif cls in ("STAR", "COLUMNS"):
            raise self.refuse(node, "'*' is not allowed here", "name the columns")
        elif cls in ("PARAMETER", "POSITIONAL_REFERENCE", "DEFAULT"):
            raise self.refuse(node, f"{cls.lower().replace('_', ' ')} is not supported", "write the value inline")
        elif cls == "TYPE" and (reason := check_type(node)) is not None:
            raise self.refuse(node, f"a cast to {str(node.get('type_name')).upper()} is not allowed ({reason})",
                              "cast to another type, or remove the cast")
        elif cls not in ("CONSTANT", "OPERATOR", "COMPARISON", "CONJUNCTION", "CASE", "CAST", "BETWEEN",
                         "COLLATE", "TYPE"):
            raise self.refuse(node, f"the expression kind {cls} is not supported", "rewrite the expression")
        return {k: self.walk(v, params) for k, v in node.items()}

    def column(self, node: Json, params: frozenset[str]) -> Json:
        parts = [str(p) for p in node["column_names"]]
        if parts[0].lower() in params:
            return node
        col = self.scope.resolve(parts, f"{self.where} ({fragment(self.text, node)})")
        self.origins.append(col)
        return dict(node, column_names=[col.flat, *col.path])

    def function(self, node: Json) -> None:
        name = str(node.get("function_name", "")).lower()
        kinds = function_types().get(name, frozenset())
        if node.get("schema") or node.get("catalog"):
            raise self.refuse(node, "schema-qualified functions are not supported", "call the function by name")
        if name == "clamp":
            raise self.refuse(node, "CLAMP(col, lower, upper) only declares the bounds of an aggregate",
                              "write it as the whole argument of SUM/AVG/VAR/STDDEV/MEDIAN/QUANTILE_CONT, "
                              "e.g. SUM(CLAMP(spend, 0, 500)); elsewhere use LEAST(GREATEST(x, lo), hi)")
        if name in DENIED:
            raise self.refuse(node, f"{name}() is not allowed ({DENIED[name]})", "remove it from the query")
        if "volatile" in kinds:
            raise self.refuse(node, f"{name}() is not allowed (it is volatile: not deterministic, or it changes "
                              "or reads the engine's state)", "remove it from the query")
        if "of_query" in kinds or (name == "age" and len(node.get("arguments") or []) == 1):
            # a backend runs several queries per request (bounding, then the statistics): such a value
            # differs between them, by how many ran before and how long they took, i.e. by the data
            raise self.refuse(node, f"{name}() is not allowed (its value is the query's, not the row's: the "
                              "time or the transaction)", "use a literal date or timestamp instead")
        if "aggregate_macro" in kinds or ("aggregate" in kinds and not kinds & {"scalar", "macro"}):
            raise self.refuse(node, f"aggregate {name}() combines rows", f"{_ROWLEVEL_HINT}; aggregate only in "
                              "the outermost SELECT")
        if kinds and not kinds & {"scalar", "macro"}:
            raise self.refuse(node, f"{name}() is a table function", "read data only from registered tables")
        if "subquery_macro" in kinds:
            raise self.refuse(node, f"{name}() runs a subquery", "remove it from the query")
        reason = check_call(node)
        if reason is not None:
            raise self.refuse(node, f"{name}() is not allowed here ({reason})",
                              "use literal arguments, or remove it from the query")
        if node.get("distinct") or node.get("filter") or (node.get("order_bys") or {}).get("orders"):
            raise self.refuse(node, "DISTINCT/FILTER/ORDER BY inside a function call is not supported",
                              "remove it")

    def call(self, node: Json, params: frozenset[str]) -> Json:
        """A checked call: a lambda at one of its lambda parameters is a lambda, any other argument an expression.

        An arrow ``a -> b`` elsewhere is DuckDB's JSON extraction (:func:`json_extract`).
        """
        lambdas = lambda_parameters().get(str(node.get("function_name", "")).lower(), frozenset())
        out = {k: self.walk(v, params) for k, v in node.items() if k != "arguments"}
        out["arguments"] = [
            dict(a, expression=self.lambda_(a["expression"], params))
            if i in lambdas and isinstance(a, dict) and (a.get("expression") or {}).get("class") == "LAMBDA"
            else self.walk(a, params)
            for i, a in enumerate(node.get("arguments") or [])]
        return out

    def lambda_(self, node: Json, params: frozenset[str]) -> Json:
        lhs = node.get("lhs") or {}
        names: list[Any] = [lhs] if lhs.get("class") == "COLUMN_REF" else [
            a.get("expression") for a in lhs.get("arguments", []) if isinstance(a, dict)] \
            if lhs.get("class") == "FUNCTION" and str(lhs.get("function_name")).lower() == "row" else [None]
        if any(not isinstance(n, dict) or n.get("class") != "COLUMN_REF" or len(n["column_names"]) != 1
               for n in names):
            raise self.refuse(node, "a lambda's parameters must be names", "e.g. lambda x: x + 1 or lambda x, i: x")
        bound = {str(n["column_names"][0]).lower() for n in names}
        # rendered in the lambda keyword's syntax: DuckDB 2 refuses the arrow's for a lambda
        return dict(node, expr=self.walk(node.get("expr"), params | bound), syntax_type="LAMBDA_KEYWORD")


def json_extract(arrow: Json) -> Json:
    """The ``json_extract(a, b)`` call DuckDB binds ``a -> b`` as, where no list function takes it as a lambda.

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> render_expression(json_extract(parse_expression("j -> '$.a'")))
        "json_extract(j, '$.a')"

    """
    call = parse_expression("json_extract(NULL, NULL)")
    call["arguments"][0]["expression"] = arrow["lhs"]
    call["arguments"][1]["expression"] = arrow["expr"]
    return dict(call, alias=arrow.get("alias", ""), query_location=arrow.get("query_location"),
                query_location_length=arrow.get("query_location_length"))


def rewrite(expr: Json, scope: Scope, text: str, where: str) -> tuple[Json, list[Column]]:
    """Check ``expr`` is row-level and point its column references at plan columns.

    Returns the rewritten expression and the columns it references.
    """
    checker = _Checker(text, scope, where)
    out = checker.walk(copy.deepcopy(expr))
    return out, checker.origins


_UNREADABLE = re.compile(r"\b(INTERVAL|UNION|TIME WITH TIME ZONE)\b")
"""DuckDB types dpframe cannot read: Polars cannot import an interval of months, days and nanoseconds, nor a union
(it panics); a time with a time zone comes back as a plain ``Time``, to which DuckDB has no cast (so the backend could
not compare the column with keys of the type the plan gives it)."""


def _check_readable(names: Sequence[str], types: Sequence[str], where: str, text: str) -> None:
    """A SchemaError naming the first output column whose DuckDB type Polars cannot read (see :data:`_UNREADABLE`).

    Example:
        >>> _check_readable(["n", "gap"], ["BIGINT", "INTERVAL"], "SELECT", "...")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        dpframe.errors.SchemaError: sql: column 'gap' is of the DuckDB type INTERVAL, ... Fix: convert it to a number...

    """
    for name, dtype in zip(names, types, strict=True):
        if _UNREADABLE.search(dtype):
            fix = (f"convert it to a number, e.g. epoch({name}) / 86400 for days" if "INTERVAL" in dtype
                   else f"convert it to TIME (its local time) or VARCHAR, e.g. CAST({name} AS TIME)"
                   if "TIME WITH TIME ZONE" in dtype
                   else f"convert it to a standard type, e.g. CAST({name} AS VARCHAR)")
            raise SchemaError(f"column {name!r} is of the DuckDB type {dtype}, which dpframe cannot read, in {where}: "
                              f"{text!r}", argument="sql", fix=fix)


def derive(input_schema: pl.Schema, items: Sequence[tuple[str, str]], where: str, text: str,
           checked: Sequence[Json] = ()) -> pl.Schema:
    """Output schema of ``SELECT <sql> AS <name>, ...`` over an empty frame of ``input_schema`` (in DuckDB).

    The columns are typed as the DuckDB backend hands them over (:func:`~dpframe.sql.handover.for_duckdb`),
    and each function call of the ``checked`` expressions is probed (:func:`_probe_all`).
    """
    return _derive(input_schema, items, where, text, checked)[0]


def _derive(input_schema: pl.Schema, items: Sequence[tuple[str, str]], where: str, text: str,
            checked: Sequence[Json] = (), handed: bool = False) -> tuple[pl.Schema, list[str], list[str]]:
    """:func:`derive`'s schema, the DuckDB type of each output, and (with ``handed``) their handed types.

    A handed type is the DuckDB type a frame of the output schema is handed to DuckDB as (:func:`_handed_types`);
    without ``handed`` the list is empty.
    """
    try:
        empty = for_duckdb(pl.LazyFrame(schema=input_schema), decimals=False).collect(engine=ENGINE).to_arrow()
    except Exception as e:
        raise SchemaError(f"a column type cannot be used in SQL: {e}", argument="sql",
                          fix="cast the column to a standard type when registering the table") from e
    select = ", ".join(f"{guard(sql)} AS {quote(name)}" for name, sql in items)
    with _shared() as con:
        try:
            con.register("__dp_in", empty)
            relation = con.sql(f"SELECT {select} FROM __dp_in")
            types = [str(t) for t in relation.types]
            _check_readable(relation.columns, types, where, text)
            result = relation.pl()
            back = _handed_types(con, result.schema) if handed else []
        except (KeyboardInterrupt, SystemExit, SchemaError):
            raise
        except BaseException as e:   # noqa: BLE001 — a type Polars cannot import panics (pyo3's PanicException)
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SchemaError(f"{message} in {where}: {text!r}", argument="sql",
                              fix="check the column names and types (DuckDB's message above)") from None
        else:
            _probe_all(con, [c for expr in checked for c in calls(expr)], where)
        finally:
            con.unregister("__dp_in")
    if result.height:  # an empty input gave a row: something aggregated
        raise PlanError(f"{where} combines rows: {text!r}", argument="sql",
                        fix="before aggregation every expression must be computed from one row at a time")
    schema: pl.Schema = result.schema
    return schema, types, back


_HANDED: dict[str, str] = {}
"""``{str(Polars type): DuckDB type}`` found by :func:`_handed_types` (a function of the type and the DuckDB build)."""


def _handed_types(con: Any, schema: pl.Schema) -> list[str]:
    """The DuckDB type of each column of an (empty) Polars frame of ``schema``, handed over as the backend does it.

    The backend hands frames (public keys, the groups ``max_groups`` chose) to DuckDB through
    :func:`~dpframe.sql.handover.for_duckdb`; each type is looked up once per process.
    """
    missing = {str(t): t for t in schema.dtypes() if str(t) not in _HANDED}
    if missing:
        names = [f"c{i}" for i in range(len(missing))]
        empty = pl.LazyFrame(schema=pl.Schema(dict(zip(names, missing.values()))))
        con.register("__dp_back", for_duckdb(empty, decimals=False).collect(engine=ENGINE).to_arrow())
        try:
            _HANDED.update(zip(missing, (str(t) for t in con.sql("SELECT * FROM __dp_back").types)))
        finally:
            con.unregister("__dp_back")
    return [_HANDED[str(t)] for t in schema.dtypes()]


def _probe_all(con: Any, found: list[Json], where: str) -> None:
    """:func:`_probe` every call of ``found``: all at once, one by one only if that fails.

    One DESCRIBE gives every call's argument types and one SELECT runs every typical call, each rendered
    once (every query or rendering is a DuckDB call): a query with several functions is not billed per
    call. If either fails, each call is probed alone and the first that fails is refused (the batch can
    fail only where some call does, or on the checking connection's memory cap, where they pass alone).
    """
    if not found:
        return
    try:
        types: list[list[str]] = [[] for _ in found]
        items = [item for i, c in enumerate(found) for item in argument_list(c, f"c{i}_")]
        if items:
            for name, type_, *_ in con.execute(f"DESCRIBE {render(select_node(items))} FROM __dp_in").fetchall():
                types[int(str(name)[1:].split("_", 1)[0])].append(str(type_))
        probes = [try_is_null(typical_call(c, types[i]), f"p{i}") for i, c in enumerate(found)]
        con.execute(render(select_node(probes))).fetchall()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:   # noqa: BLE001 — find the call that fails (or none: then each passes alone)
        for call in found:
            _probe(con, call, where)


def _probe(con: Any, call: Json, where: str) -> None:
    """Refuse ``call`` if it fails under ``TRY`` with its non-literal arguments at a typical value of their types.

    Such a call fails on every row that reaches it, an error ``TRY`` does not catch (see
    :mod:`dpframe.sql.uncaught`): whether a row reaches it would decide whether the query fails.
    """
    try:
        types = []
        if operands(call):
            listed = render(select_node(argument_list(call)))
            types = [str(row[1]) for row in con.execute(f"DESCRIBE {listed} FROM __dp_in").fetchall()]
        con.execute(render(select_node([try_is_null(typical_call(call, types))]))).fetchall()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:   # noqa: BLE001 — DuckDB's errors, and a panic converting a value
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PlanError(f"{render_expression(call)} in {where} fails on every row that reaches it ({message}), an "
                        "error TRY cannot turn into NULL: whether a row reaches it would show in the answer",
                        argument="sql",
                        fix="fix the call's literal arguments (a cast: its type), or remove it") from None


def _translate(exprs: Sequence[Json], input: Node, want: pl.Schema,
               names: Sequence[str]) -> tuple[tuple[pl.Expr, ...] | None, str | None]:
    """The Polars expressions with DuckDB's semantics, or ``None`` and the reason.

    Each is checked as a method chain's would be, its growth bound included, with the bounds earlier steps (a CTE's
    or subquery's columns) derived: as SQL's own bound (:mod:`dpframe.sql.growth`) was.
    """
    input_schema, growth = input.schema, column_growth(input)
    out = []
    try:
        for expr, name in zip(exprs, names):
            pe = to_polars(expr, input_schema)
            got = pl.LazyFrame(schema=input_schema).select(pe.alias(name)).collect_schema()[name]
            if got != want[name]:
                raise Untranslatable(f"{name!r} has type {want[name]} in DuckDB but {got} in Polars")
            out.append(total_expression(pe.alias(name), name, input_schema, growth))
    except Untranslatable as e:
        return None, str(e)
    except (PlanError, pl.exceptions.PolarsError, TypeError, ValueError) as e:
        return None, f"no Polars equivalent ({str(e).splitlines()[0]})"
    return tuple(out), None


def build_filter(input: Node, predicate: Json, scope: Scope, text: str) -> SQLFilter:
    """A validated ``WHERE`` node."""
    where = "WHERE"
    checked, _ = rewrite(predicate, scope, text, where)
    check_sql_growth(checked, column_growth(input), where, _nested(input.schema))   # before anything runs it
    sql = render_expression(checked)
    frag = fragment(text, predicate).strip("'\"")
    schema = derive(input.schema, [("__dp_pred", sql)], where, frag, [checked])
    if schema["__dp_pred"] != pl.Boolean:
        raise SchemaError(f"WHERE needs a true/false condition, got {schema['__dp_pred']}: {frag!r}",
                          argument="sql", fix="compare a column, e.g. WHERE age >= 18")
    exprs, reason = _translate([checked], input, pl.Schema({"__dp_pred": pl.Boolean}), ["__dp_pred"])
    return SQLFilter(input, input.schema, sql, None if exprs is None else exprs[0], reason)


def build_project(input: Node, items: Sequence[tuple[str, Json]], text: str, where: str) -> SQLProject:
    """A validated projection: exactly the columns ``items`` = ``[(name, rewritten expression)]``."""
    names = [n for n, _ in items]
    lowered = [n.lower() for n in names]
    dupes = sorted({n for n in names if lowered.count(n.lower()) > 1})
    if dupes:
        raise PlanError(f"{where} names the column {dupes[0]!r} twice (SQL names ignore case)", argument="sql",
                        fix="give each output column its own alias")
    check_new_names(input.schema, names, "sql")
    bounds = sql_column_growth(list(items), column_growth(input), where,   # before anything runs them (the probes)
                               _nested(input.schema))
    sql_items = [(name, render_expression(expr)) for name, expr in items]
    text = ", ".join(s for _, s in sql_items)
    derived, types, back = _derive(input.schema, sql_items, where, text, [e for _, e in items], handed=True)
    # A computed column runs as the type the plan holds it as: the DuckDB type its Polars type is handed to DuckDB
    # as. DuckDB computes some types Polars reads as others (HUGEINT as Decimal(38, 0), JSON and UUID as String):
    # the backend then compared the column with the public keys (or the groups max_groups chose), handed over
    # as the plan's type, and a value that type cannot hold failed to convert, outside TRY, after the charge.
    retyped = [(name, sql if _plain(expr, input.schema) or got == want else f"TRY_CAST({sql} AS {want})")
               for (name, sql), (_, expr), got, want in zip(sql_items, items, types, back, strict=True)]
    if retyped != sql_items:
        again, types, _ = _derive(input.schema, retyped, where, text)
        if again != derived or any(got != want for (name, _), got, want in zip(items, types, back, strict=True)
                                   if not _plain(dict(items)[name], input.schema)):
            raise SchemaError(f"{where} computes a DuckDB type dpframe cannot hold as it is: {text!r}", argument="sql",
                              fix="cast the expression to a standard type (a number, VARCHAR, DATE, TIMESTAMP ...)")
        sql_items = retyped
    # A plain column reference keeps its type exactly (DuckDB may round-trip e.g. Categorical as String).
    schema = pl.Schema({name: input.schema[expr["column_names"][0]] if _plain(expr, input.schema) else derived[name]
                        for name, expr in items})
    exprs, reason = _translate([e for _, e in items], input, schema, names)
    return SQLProject(input, schema, tuple(sql_items), exprs, reason, tuple(bounds.items()))


def _nested(schema: pl.Schema) -> frozenset[str]:
    """The columns holding lists, arrays or structs (``concat_ws`` joins a list's elements)."""
    return frozenset(name for name, dtype in schema.items() if dtype.is_nested())


def _plain(expr: Json, schema: pl.Schema) -> bool:
    return (expr.get("class") == "COLUMN_REF" and len(expr["column_names"]) == 1
            and expr["column_names"][0] in schema)


def column_ref(flat: str) -> Json:
    """A parse-tree column reference to the plan column ``flat``."""
    return {"class": "COLUMN_REF", "type": "COLUMN_REF", "alias": "", "query_location": 2**64 - 1,
            "query_location_length": 0, "column_names": [flat]}
