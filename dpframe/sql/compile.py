"""Lowering a whole SQL query into the plan the method chain builds.

FROM/WHERE become row nodes, GROUP BY the keys, aggregates the measures, and the rest (HAVING, ORDER
BY, LIMIT, expressions over aggregates) the post-processing of the released values. The result is
the same :class:`~dpframe.plan.nodes.Aggregate` node the method chain builds, so the one planner and
the one accountant path handle both. Only GROUP BY keys and aggregates can reach the
output; a raw column, ``SELECT *`` or a window function is refused before anything is charged.

Example:
    >>> import polars as pl
    >>> from dpframe.sql.catalog import SQLCatalog
    >>> from dpframe.sql.parse import parse
    >>> cat = SQLCatalog.build({"t": pl.Schema({"u": pl.Int64, "x": pl.Float64})}, "u", public_tables=None,
    ...                        public_keys=None, bounds=None)
    >>> done = Compiler(cat, parse("SELECT SUM(CLAMP(x, 0, 1)) / COUNT(*) AS r FROM t WHERE x > 0"), None).compile()
    >>> [m.describe() for m in done.node.measures], done.post.describe()
    (['sum(x, bounds=[0, 1])', 'len()'], 'SELECT (x_sum / len) AS r FROM __dp_released')

"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from dpframe.errors import BoundsError, DPFrameError, PlanError, SchemaError
from dpframe.frame import _public_keys
from dpframe.measures import Measure
from dpframe.plan.nodes import Aggregate, Node
from dpframe.sql.aggregates import SUPPORTED, contains, is_aggregate, make_measure, parse_call
from dpframe.sql.catalog import SQLCatalog
from dpframe.sql.expr import build_filter, build_project, column_ref, rewrite
from dpframe.sql.lower import Lowering
from dpframe.sql.parse import (
    CLAUSE_ENDS,
    Parsed,
    _short,
    clause,
    fragment,
    location,
    modifier_fragment,
    set_operation_fragment,
)
from dpframe.sql.post import PostProcess, build_post
from dpframe.sql.sandbox import Json, function_types, render_expression
from dpframe.sql.scope import Column, Scope

_NO_AGG = ("every output column must be an aggregate (COUNT, SUM, AVG, ...) or a GROUP BY key: "
           "raw values of private rows are never released")


_UNCOMPARED = frozenset({"query_location", "query_location_length", "alias"})


def canonical(node: Any) -> str:
    """A comparable text of a parse tree (locations and aliases removed)."""
    return json.dumps(_strip(node), sort_keys=True)


def _strip(n: Any) -> Any:
    if type(n) in _LEAVES:         # (most nodes: the parse tree's strings, numbers and nulls)
        return n
    if isinstance(n, dict):
        return {k: _strip(v) for k, v in n.items() if k not in _UNCOMPARED}
    if isinstance(n, list):
        return [_strip(x) for x in n]
    return n


_LEAVES = frozenset({str, int, float, bool, type(None)})


@dataclass
class Key:
    """A GROUP BY key: its plan column, its SQL output name, and its public domain if any.

    ``outputs`` are the aliases of the SELECT items that compute it (``SELECT year(d) AS y ... GROUP BY
    year(d)``): ``keys=`` may name it by any of them.
    """

    flat: str
    name: str
    canon: str
    expr: Json
    column: Column | None
    outputs: tuple[str, ...] = ()


@dataclass
class Compiled:
    """A lowered query: the Aggregate node, the post-processing, and notes for explain()."""

    node: Aggregate
    post: PostProcess
    notes: tuple[str, ...] = ()


class Compiler:
    """Compiles one parsed SELECT against a session catalog."""

    def __init__(self, catalog: SQLCatalog, parsed: Parsed, keys: Mapping[str, Any] | None) -> None:
        self.catalog, self.parsed, self.text = catalog, parsed, parsed.text
        self.lower = Lowering(catalog, parsed.text)
        self.override = dict(keys or {})
        self.notes: list[str] = []

    def error(self, node: Json | None, what: str, fix: str = _NO_AGG) -> PlanError:
        return PlanError(f"{what}: {fragment(self.text, node)}", argument="sql", fix=fix)

    def compile(self) -> Compiled:
        node = self.parsed.node
        if node.get("type") != "SELECT_NODE":
            quoted = set_operation_fragment(self.text, node) if node.get("type") == "SET_OPERATION_NODE" else None
            raise PlanError(f"UNION/INTERSECT/EXCEPT are not supported: {quoted or repr(_short(self.text))}",
                            argument="sql", fix="send one SELECT (with GROUP BY for several groups) per query")
        for key, what in (("qualify", "QUALIFY (a window filter)"), ("sample", "USING SAMPLE")):
            if node.get(key):
                raise self.error(node[key] if isinstance(node[key], dict) else node, f"{what} is not supported",
                                 "remove it")
        ctes = self.lower.ctes(node, {})
        rel = self.lower.relation(node["from_table"], ctes)
        if rel.node is None:
            raise PlanError("the query reads only public tables, which need no privacy", argument="sql",
                            fix="query a private table (public tables may be JOINed to it)")
        current: Node = rel.node
        if node.get("where_clause"):
            current = build_filter(current, node["where_clause"], rel.scope, self.text)
        items = node["select_list"]
        for item in items:
            if item.get("class") in ("STAR", "COLUMNS"):
                raise self.error(item, "SELECT * would release raw rows")
        orders, limit = self.modifiers(node)
        window, subquery = self.parsed.may_contain("WINDOW"), self.parsed.may_contain("SUBQUERY")
        for part in [*items, node.get("having"), *[o["expression"] for o in orders]]:
            if window and contains(part, lambda n: isinstance(n, dict) and n.get("class") == "WINDOW"):
                raise self.error(_first(part, "WINDOW"), "window functions are not supported",
                                 "use GROUP BY with aggregates; post-process the result in Python")
            if subquery and contains(part, lambda n: isinstance(n, dict) and n.get("class") == "SUBQUERY"):
                raise self.error(_first(part, "SUBQUERY"), "subqueries in SELECT/HAVING/ORDER BY are not supported",
                                 "send them as separate queries")
        unknown = None
        if self.parsed.kinds is None or _unknown_names(self.parsed.kinds):   # walk only when a name is unknown
            unknown = _first_unknown_function([*items, node.get("having"), *[o["expression"] for o in orders]])
        if unknown is not None:
            name = str(unknown["function_name"]).upper()
            raise self.error(unknown, f"{name}() is neither one of dpframe's SQL aggregates nor a DuckDB function",
                             f"the aggregates are {SUPPORTED}; a measure kind a plugin adds is used from the method "
                             f"chain: sess.table(...).agg(dp.measure('{name.lower()}', column, bounds=...)) "
                             "(`dpframe plugins` lists the kinds)")
        keys = self.group_keys(node, items, rel.scope)
        calls = self.aggregate_calls([*items, node.get("having"), *[o["expression"] for o in orders]])
        if not calls and not keys:
            raw = _first(items, "COLUMN_REF")
            if raw is not None:
                raise self.error(raw, "the raw column would be released (the query computes no aggregate)")
        if not calls:
            raise self.error(items[0] if items else node, "the query computes no aggregate",
                             "add one, e.g. COUNT(*) (a DISTINCT list of private values is not private)")
        measures, derived = self.measures(calls, rel.scope, current.schema, keys)
        current = self.project(current, keys, derived, measures)
        key_frame = self.key_domain(keys, current.schema)
        by = tuple(k.flat for k in keys)
        named = self.name_measures(items, calls, measures, by)
        aggregate = Aggregate(current, by, key_frame, tuple(named.values()))
        post = build_post(self.text, items, node.get("having"), orders, limit, keys, calls, named, aggregate,
                          rel.scope)
        return Compiled(aggregate, post, tuple(self.notes))

    # --------------------------------------------------------------------------------- modifiers
    def modifiers(self, node: Json) -> tuple[list[Json], Json | None]:
        orders: list[Json] = []
        limit = None
        for mod in node.get("modifiers", []):
            kind = mod.get("type")
            if kind == "ORDER_MODIFIER":
                orders = mod["orders"]
            elif kind == "LIMIT_MODIFIER":
                for part in ("limit", "offset"):
                    value = mod.get(part)
                    if value is not None and not (value.get("class") == "CONSTANT"
                                                  and (value.get("literal") or {}).get("kind") == "INTEGER"):
                        raise self.error(value, f"{part.upper()} must be a whole number", "e.g. LIMIT 10")
                if mod.get("limit_type") not in (None, "ROW_COUNT"):
                    raise self.error(mod.get("limit"), "LIMIT n% is not supported", "use LIMIT n")
                limit = mod
            elif kind == "DISTINCT_MODIFIER":
                quoted = modifier_fragment(self.text, node, mod) or "'DISTINCT'"
                raise PlanError(f"SELECT DISTINCT is not supported: {quoted}", argument="sql",
                                fix="GROUP BY the columns instead (each key is released once)")
            else:
                quoted = modifier_fragment(self.text, node, mod) or repr(_short(self.text))
                what = "LIMIT n%" if kind == "LIMIT_PERCENT_MODIFIER" else "this clause"
                raise PlanError(f"{what} is not supported: {quoted}", argument="sql",
                                fix="use ORDER BY and LIMIT n (a whole number) on the released values")
        return orders, limit

    # --------------------------------------------------------------------------------- group keys
    def group_keys(self, node: Json, items: list[Json], scope: Scope) -> list[Key]:
        groups = list(node.get("group_expressions") or [])
        sets = node.get("group_sets") or []
        if len(sets) > 1 or (sets and sorted(sets[0]) != list(range(len(groups)))):
            at = location(groups)
            quoted = clause(self.text, [("GROUP", "BY")], before=at + 1 if at is not None else None,
                            stop=CLAUSE_ENDS) or "'GROUP BY ...'"
            raise PlanError(f"GROUPING SETS / ROLLUP / CUBE are not supported: {quoted}", argument="sql",
                            fix="send one query per grouping, each with GROUP BY plain columns or expressions")
        if node.get("aggregate_handling") == "FORCE_AGGREGATES":  # GROUP BY ALL
            groups = [i for i in items if not contains(i, is_aggregate) and i.get("class") != "CONSTANT"]
        aliases = {str(i.get("alias")).lower(): i for i in items if i.get("alias")}
        keys: list[Key] = []
        for g in groups:
            source = g
            lit = g.get("literal") or {}
            if g.get("class") == "CONSTANT" and lit.get("kind") == "INTEGER":
                pos = int(lit["text"])
                if not 1 <= pos <= len(items):
                    raise self.error(g, f"GROUP BY {pos} is out of range", f"use 1..{len(items)}")
                source = items[pos - 1]
            elif g.get("class") == "COLUMN_REF" and len(g["column_names"]) == 1 \
                    and str(g["column_names"][0]).lower() in aliases:
                try:
                    scope.resolve(g["column_names"], "GROUP BY")
                except SchemaError:
                    source = aliases[str(g["column_names"][0]).lower()]
            if contains(source, is_aggregate):
                raise self.error(source, "GROUP BY an aggregate is not possible", "group by columns")
            checked, used = rewrite(source, scope, self.text, "GROUP BY")
            plain = checked.get("class") == "COLUMN_REF" and len(used) == 1 and not used[0].path
            name = str(source.get("alias") or "") or (used[0].name if plain else render_expression(source))
            flat = used[0].flat if plain else render_expression(source)
            canon = canonical(checked)
            if any(k.canon == canon for k in keys):
                continue
            keys.append(Key(flat, name, canon, dict(checked, alias=""), used[0] if plain else None,
                            self.outputs(canon, items, scope)))
        return keys

    def outputs(self, canon: str, items: list[Json], scope: Scope) -> tuple[str, ...]:
        """The aliases of the SELECT items (not aggregates) whose canonical form is ``canon``."""
        found = []
        for item in items:
            if item.get("alias") and not contains(item, is_aggregate):
                try:
                    checked, _ = rewrite(dict(item, alias=""), scope, self.text, "SELECT")
                except DPFrameError:
                    continue
                if canonical(checked) == canon:
                    found.append(str(item["alias"]))
        return tuple(found)

    def key_domain(self, keys: list[Key], schema: pl.Schema) -> pl.DataFrame | None:
        """Public keys for the GROUP BY columns, or None (DP partition selection chooses them)."""
        if not keys:
            return None
        domains: dict[str, list[Any]] = {}
        missing = []
        for k in keys:
            values = self.domain(k)
            if values is None:
                missing.append(k.name)
            else:
                domains[k.flat] = values
        unknown = sorted(set(self.override) - {n for k in keys for n in (k.name, k.flat, *k.outputs)})
        if unknown:
            raise SchemaError(f"keys= names {unknown}, which the query does not GROUP BY", argument="keys",
                              fix=f"name the GROUP BY columns: {[n for k in keys for n in (k.name, *k.outputs)]}")
        if missing:
            self.notes.append(f"GROUP BY {', '.join(missing)}: no public keys declared, so DP partition selection "
                              "chooses the released keys (needs δ > 0); declare them with "
                              "dp.Session(public_keys={'table.column': [...]}) or sess.sql(..., keys={...})")
            return None
        try:
            return _public_keys(domains, [k.flat for k in keys], schema)
        except DPFrameError as e:
            given = any(n in self.override for k in keys for n in (k.name, k.flat, *k.outputs))   # sql(keys=...)
            raise SchemaError(f"the public keys do not fit the GROUP BY columns: {e.message}",
                              argument="keys" if given else "public_keys",
                              fix=e.fix or "declare keys of the column's type") from None

    def domain(self, key: Key) -> list[Any] | None:
        for name in (key.name, key.flat, *key.outputs):
            if name in self.override:
                values = self.override[name]
                if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
                    raise SchemaError(f"keys[{name!r}] must be a list of values", argument="keys",
                                      fix=f"pass keys={{{name!r}: [value, ...]}}")
                return list(values.to_list() if isinstance(values, pl.Series) else values)
        col = key.column
        if col is None:
            return None
        if col.origin is not None and col.origin in self.catalog.keys:
            return list(self.catalog.keys[col.origin])
        if col.domain is not None:
            values = col.domain.unique(maintain_order=True).drop_nulls().sort().to_list()
            return [*values, None] if col.left_joined or col.domain.null_count() else values
        return None

    # --------------------------------------------------------------------------------- aggregates
    def aggregate_calls(self, parts: list[Any]) -> list[Json]:
        calls: list[Json] = []

        def visit(n: Any) -> None:
            if is_aggregate(n):
                calls.append(n)
                return
            if isinstance(n, dict):
                for v in n.values():
                    visit(v)
            elif isinstance(n, list):
                for v in n:
                    visit(v)
        for p in parts:
            visit(p)
        return calls

    def measures(self, calls: list[Json], scope: Scope, schema: pl.Schema,
                 keys: list[Key]) -> tuple[list[Measure], dict[str, Json]]:
        """One unnamed measure per call; derived value expressions become projected columns."""
        out: list[Measure] = []
        derived: dict[str, Json] = {}
        for call in calls:
            try:
                kind, value, explicit, options = parse_call(call)
            except DPFrameError as e:
                raise type(e)(f"{e.args[0].split('. Fix:')[0]}: {fragment(self.text, call)}",
                              argument=e.argument, fix=e.fix) from None
            bounds: Any = explicit
            column = None
            if value is not None:
                checked, used = rewrite(value, scope, self.text, f"{str(call['function_name']).upper()}(...)")
                plain = checked.get("class") == "COLUMN_REF" and len(used) == 1 and not used[0].path
                if plain:
                    column = used[0].flat
                else:
                    column = self.derived_name(render_expression(value), canonical(checked), derived, schema)
                    derived[column] = dict(checked, alias="")
                if kind == "count_distinct" and self.is_unit(used[0].origin if plain and used[0].public is None
                                                             else None):
                    kind = "count_units"            # COUNT(DISTINCT user_id): the privacy units
                if bounds is None and kind not in ("count", "len", "count_units", "count_distinct"):
                    origin = used[0].origin if plain else None
                    bounds = self.catalog.bounds.get(origin) if origin else None
                    if bounds is None:
                        name = str(call["function_name"]).upper()
                        inner = fragment(self.text, value).strip("'\"")
                        # declared bounds follow a column, never an expression: offer them for a column only
                        declare = (f", or declare them: dp.Session(..., bounds={{{origin!r}: (lower, upper)}})"
                                   if origin else "")
                        raise BoundsError(f"{name}({inner}) needs clipping bounds: {fragment(self.text, call)}",
                                          argument="sql", fix=f"write {name}(CLAMP({inner}, lower, upper)) with "
                                          f"public bounds{declare}")
            try:
                out.append(make_measure(kind, column, bounds, options))
            except DPFrameError as e:      # the measure's bounds are CLAMP's here: its fix is spelled in SQL
                fix = "write CLAMP(x, lower, upper) with finite numeric literals, lower < upper, chosen without " \
                      "looking at the data" if e.argument == "bounds" else e.fix
                raise type(e)(f"{e.args[0].split('. Fix:')[0]} in {fragment(self.text, call)}", argument=e.argument,
                              fix=fix) from None
        return out, derived

    def is_unit(self, origin: str | None) -> bool:
        """Whether a column of this ``origin`` (``"table.column"``, kept through renames) is a private table's unit."""
        unit = self.catalog.unit
        return (unit is not None and origin is not None and origin.endswith(f".{unit}")
                and origin[:-len(unit) - 1] in self.catalog.private)

    def derived_name(self, text: str, canon: str, derived: dict[str, Json], schema: pl.Schema) -> str:
        name, n = text, 1
        while name in schema or (name in derived and canonical(derived[name]) != canon):
            n += 1
            name = f"{text}_{n}"
        return name

    def project(self, current: Node, keys: list[Key], derived: dict[str, Json], measures: list[Measure]) -> Node:
        """A projection computing derived keys and aggregate values (only when there are any)."""
        if not derived and all(k.column is not None for k in keys):
            return current
        items: dict[str, Json] = {}
        unit = self.catalog.unit
        if unit is not None and unit in current.schema:
            items[unit] = column_ref(unit)
        for k in keys:
            items[k.flat] = k.expr if k.column is None else column_ref(k.flat)
        for m in measures:
            if m.column is not None and m.column not in items:
                items[m.column] = derived.get(m.column, column_ref(m.column))
        return build_project(current, list(items.items()), self.text, "GROUP BY / aggregate expressions")

    def name_measures(self, items: list[Json], calls: list[Json], measures: list[Measure],
                      by: tuple[str, ...]) -> dict[str, Measure]:
        """``{canonical call: named measure}``: top-level aliases first, then default names."""
        named: dict[str, Measure] = {}
        taken = set(by)
        order = [canonical(c) for c in calls]
        by_call = dict(zip(order, measures))
        for item in items:
            c = canonical(item)
            if is_aggregate(item) and c not in named:
                name = str(item.get("alias") or "") or by_call[c].output_name
                if name in taken:
                    raise self.error(item, f"two output columns are named {name!r}", "give one another alias")
                named[c] = by_call[c].alias(name)
                taken.add(name)
        for c in order:
            if c in named:
                continue
            base = by_call[c].output_name
            name, n = base, 1
            while name in taken:
                n += 1
                name = f"{base}_{n}"
            named[c] = by_call[c].alias(name)
            taken.add(name)
        return named


def _first(node: Any, cls: str) -> Json | None:
    if isinstance(node, dict):
        if node.get("class") == cls:
            return node
        for v in node.values():
            found = _first(v, cls)
            if found is not None:
                return found
    elif isinstance(node, list):
        for v in node:
            found = _first(v, cls)
            if found is not None:
                return found
    return None


_DPFRAME_FUNCTIONS = frozenset({"clamp", "top_k"})
"""Functions dpframe's SQL reads itself that DuckDB does not have (``CLAMP`` bounds, ``TOP_K``)."""


def _unknown_names(kinds: frozenset[str]) -> frozenset[str]:
    """The function names among a statement's node kinds (``"fn:<name>"``) that neither DuckDB nor dpframe knows.

    Example:
        >>> sorted(_unknown_names(frozenset({"fn:count_star", "fn:clamp", "fn:my_mean", "COLUMN_REF"})))
        ['my_mean']

    """
    known = function_types()
    return frozenset(k[3:] for k in kinds if k.startswith("fn:") and k[3:] not in known
                     and k[3:] not in _DPFRAME_FUNCTIONS)


def _first_unknown_function(parts: list[Any]) -> Json | None:
    """The first call in ``parts`` (the output side: SELECT, HAVING, ORDER BY) of a function no one knows.

    Neither a DuckDB function nor one of dpframe's own: e.g. a plugin's measure kind written as an aggregate
    (``SELECT WINSOR_MEAN(x)``), which the output check would otherwise report as a raw column released.

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> _first_unknown_function([parse_expression("1 + my_mean(x)")])["function_name"]
        'my_mean'
        >>> _first_unknown_function([parse_expression("sum(clamp(x, 0, 1))")]) is None
        True

    """
    known = function_types()
    found: list[Json] = []

    def unknown(node: Any) -> bool:
        if (isinstance(node, dict) and node.get("class") == "FUNCTION" and not node.get("schema")
                and str(node.get("function_name", "")).lower() not in known
                and str(node.get("function_name", "")).lower() not in _DPFRAME_FUNCTIONS):
            found.append(node)
            return True
        return False
    for part in parts:
        if contains(part, unknown):
            return found[0]
    return None
