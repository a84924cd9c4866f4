"""Lowering SQL ``FROM`` clauses into plan nodes: tables, CTEs, subqueries and joins with public tables.

* A registered private table becomes a :class:`~dpframe.plan.nodes.Scan`.
* A CTE or subquery that reads a private table must be row-level: ``SELECT <expressions> FROM ...
  [WHERE ...]`` (``*`` allowed), lowered to a filter and a projection. The privacy-unit column is kept
  even when the subquery does not select it (it stays invisible to SQL), and cannot be overwritten.
* A CTE or subquery that reads only public tables is public data: DuckDB evaluates it at once, on a
  connection that sees nothing but the public tables (:func:`~dpframe.sql.sandbox.public_connection`).
* ``private [INNER|LEFT] JOIN public ON private.a = public.b [AND ...]`` (or ``USING (...)``) becomes a
  :class:`~dpframe.sql.nodes.PublicJoin`; the public join key must be unique.

Anything else — table functions (``read_csv(...)``), file names as tables, unregistered tables, joins
of two private tables, ``DISTINCT``/``GROUP BY``/``LIMIT``/``ORDER BY``/``QUALIFY``/``SAMPLE`` inside a
subquery, set operations, recursive CTEs — is refused with the offending fragment quoted.

Example:
    >>> import polars as pl
    >>> from dpframe.sql.catalog import SQLCatalog
    >>> from dpframe.sql.parse import parse
    >>> cat = SQLCatalog.build({"t": pl.Schema({"u": pl.Int64, "x": pl.Float64})}, "u", public_tables=None,
    ...                        public_keys=None, bounds=None)
    >>> node = parse("SELECT * FROM (SELECT x * 2 AS y FROM t WHERE x > 0)").node
    >>> rel = Lowering(cat, "").relation(node["from_table"], {})
    >>> [n.describe() for n in rel.node.lineage()]
    ['Scan t (2 columns)', 'Filter [SQL: (x > 0)]', 'Select [SQL: (x * 2) AS y, u]']
    >>> rel.scope.names()
    ['y']

"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from dpframe.errors import PlanError, SchemaError, closest
from dpframe.plan.growth import MAX_GROWTH, too_large
from dpframe.plan.nodes import Node, Scan
from dpframe.sql.catalog import SQLCatalog
from dpframe.sql.expr import build_filter, build_project, column_ref, rewrite
from dpframe.sql.growth import check_sql_growth
from dpframe.sql.nodes import PublicJoin
from dpframe.sql.parse import clause, fragment, modifier_fragment, set_operation_fragment
from dpframe.sql.sandbox import Json, public_connection, render, render_expression
from dpframe.sql.scope import Column, Scope

_ROW_LEVEL = ("a subquery or CTE over a private table must be row-level: SELECT expressions FROM ... "
              "[WHERE ...]; aggregate only in the outermost SELECT")


@dataclass
class Relation:
    """A lowered FROM item: a private plan node, or public data; and the columns SQL can see."""

    node: Node | None
    data: pl.DataFrame | None
    scope: Scope
    label: str

    @property
    def private(self) -> bool:
        return self.node is not None


class Lowering:
    """Turns the FROM side of a parsed query into plan nodes for one session catalog."""

    def __init__(self, catalog: SQLCatalog, text: str) -> None:
        self.catalog, self.text = catalog, text

    def error(self, node: Json | None, what: str, fix: str) -> PlanError:
        return PlanError(f"{what}: {fragment(self.text, node)}", argument="sql", fix=fix)

    # ---------------------------------------------------------------------------------------- CTEs
    def ctes(self, node: Json, outer: dict[str, Json]) -> dict[str, Json]:
        """The CTEs visible inside ``node`` (its own ``WITH`` plus the enclosing ones)."""
        out = dict(outer)
        for entry in (node.get("cte_map") or {}).get("map", []):
            value = entry["value"]
            if value.get("materialized") not in (None, "CTE_MATERIALIZE_DEFAULT"):
                raise self.error(value["query_node"], "MATERIALIZED hints are not supported", "remove the hint")
            if value.get("aliases"):
                raise self.error(value["query_node"], "column lists on a CTE are not supported",
                                 "name the columns with AS inside the CTE")
            out[str(entry["key"]).lower()] = value["query_node"]
        return out

    # ------------------------------------------------------------------------------------- relations
    def relation(self, ref: Json, ctes: dict[str, Json]) -> Relation:
        """Lower one FROM item."""
        kind = ref.get("type")
        if ref.get("sample"):
            raise self.error(ref, "USING SAMPLE / TABLESAMPLE is not supported", "remove the sample clause")
        if kind == "BASE_TABLE":
            return self.base_table(ref, ctes)
        if kind == "SUBQUERY":
            rel = self.subquery(ref["subquery"]["node"], ctes, str(ref.get("alias") or "subquery"))
            return self.requalify(rel, ref.get("alias") or "", ref)
        if kind == "JOIN":
            return self.join(ref, ctes)
        if kind == "TABLE_FUNCTION":
            raise self.error(ref.get("function") or ref, "table functions and file readers are not allowed "
                             "(a query may read only the tables registered on the session)",
                             f"register the data as a table: dp.Session({{'name': path_or_frame}}, ...); "
                             f"registered: {self.registered()}")
        if kind == "EMPTY":
            raise PlanError("the query reads no table", argument="sql", fix="add FROM <private table>")
        raise self.error(ref, f"{str(kind).lower().replace('_', ' ')} in FROM is not supported",
                         "read a registered table, a CTE or a subquery")

    def registered(self) -> str:
        public = f"; public: {sorted(self.catalog.public)}" if self.catalog.public else ""
        return f"private: {sorted(self.catalog.private)}{public}"

    def base_table(self, ref: Json, ctes: dict[str, Json]) -> Relation:
        name = str(ref["table_name"])
        if ref.get("schema_name") or ref.get("catalog_name"):
            raise self.error(ref, "schema- or catalog-qualified tables are not supported",
                             f"use the registered table name ({self.registered()})")
        if ref.get("column_name_alias"):
            raise self.error(ref, "column aliases on a table are not supported", "rename columns in a subquery")
        if ref.get("at_clause"):
            raise self.error(ref, "AT (time travel) is not supported", "remove the AT clause")
        alias = str(ref.get("alias") or name)
        if name.lower() in ctes:
            rel = self.subquery(ctes[name.lower()], {k: v for k, v in ctes.items() if k != name.lower()}, name)
            return self.requalify(rel, alias, ref)
        found = self.catalog.lookup(name)
        if found is None:
            what = "a file name cannot be read as a table" if "." in name or "/" in name else "unknown table"
            close = closest(name, [*self.catalog.private, *self.catalog.public])
            raise SchemaError(f"{what}: {fragment(self.text, ref)}", argument="sql",
                              fix=(f"did you mean {close!r}? Or " if close else "") +
                              f"register it on the session and use its name ({self.registered()})")
        kind, table = found
        quals = frozenset({alias.lower()})
        if kind == "public":
            data = self.catalog.public[table]
            cols = [Column(c, c, quals, f"{table}.{c}", public=table, domain=data[c]) for c in data.columns]
            return Relation(None, data, Scope(cols), table)
        schema = self.catalog.private[table]
        cols = [Column(c, c, quals, f"{table}.{c}") for c in schema.names()]
        return Relation(Scan.of(table, schema), None, Scope(cols), table)

    def requalify(self, rel: Relation, alias: str, ref: Json) -> Relation:
        if ref.get("column_name_alias"):
            raise self.error(ref, "column aliases on a subquery are not supported", "name the columns with AS")
        quals = frozenset({alias.lower()}) if alias else frozenset()
        return replace(rel, scope=Scope([c.requalified(quals) for c in rel.scope.columns]))

    # ------------------------------------------------------------------------------------ subqueries
    def subquery(self, node: Json, ctes: dict[str, Json], label: str) -> Relation:
        """A CTE body or FROM subquery: public (evaluated now) or row-level over a private table."""
        if node.get("type") == "SET_OPERATION_NODE":
            quoted = set_operation_fragment(self.text, node) or fragment(self.text, None)
            raise PlanError(f"UNION/INTERSECT/EXCEPT inside a subquery or CTE is not supported: {quoted}",
                            argument="sql", fix=_ROW_LEVEL)
        if node.get("type") != "SELECT_NODE":
            recursive = node.get("type") == "RECURSIVE_CTE_NODE"
            what = "recursive CTEs are" if recursive else f"this kind of subquery ({node.get('type')}) is"
            cte = clause(self.text, [("WITH", "RECURSIVE")], group=True) if recursive else None
            raise PlanError(f"{what} not supported: {cte or repr(label)}", argument="sql", fix=_ROW_LEVEL)
        inner = self.ctes(node, ctes)
        if not self.reads_private(node, inner):
            return self.public_subquery(node, inner, label)
        return self.row_select(node, inner, label)

    def reads_private(self, node: Any, ctes: dict[str, Json], seen: frozenset[str] = frozenset()) -> bool:
        """Whether any table reference below ``node`` resolves to a private table."""
        if isinstance(node, list):
            return any(self.reads_private(x, ctes, seen) for x in node)
        if not isinstance(node, dict):
            return False
        if node.get("type") == "BASE_TABLE":
            name = str(node.get("table_name", "")).lower()
            if name in ctes and name not in seen:
                return self.reads_private(ctes[name], ctes, seen | {name})
            found = self.catalog.lookup(str(node.get("table_name", "")))
            return found is None or found[0] == "private"
        if node.get("type") == "TABLE_FUNCTION":
            raise self.error(node.get("function") or node, "table functions and file readers are not allowed",
                             f"register the data on the session ({self.registered()})")
        return any(self.reads_private(v, ctes, seen) for v in node.values())

    def public_subquery(self, node: Json, ctes: dict[str, Json], label: str) -> Relation:
        node = copy.deepcopy(node)
        node.setdefault("cte_map", {"map": []})["map"] = [
            {"key": k, "value": {"aliases": [], "materialized": "CTE_MATERIALIZE_DEFAULT", "key_targets": [],
                                 "payload_aggregates": [], "query_node": v}}
            for k, v in ctes.items() if not self.reads_private(v, ctes)]
        self.check_public_growth(node)        # before DuckDB runs it: it runs now, when the query is built
        sql = render(node)
        try:
            with public_connection() as con:
                for name, data in self.catalog.public.items():
                    con.register(name, data.to_arrow())
                data = con.sql(sql).pl()
        except Exception as e:
            raise self.error(node, f"cannot evaluate this public subquery ({str(e).splitlines()[0]})",
                             "check it against the public tables' columns") from None
        if len(set(data.columns)) != len(data.columns):
            raise self.error(node, "a public subquery returns two columns with the same name",
                             "give each column its own alias")
        cols = [Column(c, c, frozenset(), None, public=label, domain=data[c]) for c in data.columns]
        return Relation(None, data, Scope(cols), label)

    def check_public_growth(self, node: Json) -> None:
        """Refuse a public subquery whose values may grow past ``MAX_GROWTH`` times the public rows it reads.

        It runs when the query is built (free, data-independent, but a memory denial of service on a server:
        ``repeat(repeat('x', 10000), 10000)`` over a public table made 10⁸ bytes a row). Each expression of each
        SELECT in it (its CTEs' and nested subqueries' included; SELECT list, WHERE, join conditions, ORDER BY ...) is
        bounded as a private one's are (:func:`~dpframe.sql.growth.check_sql_growth`, every column it reads at
        ``(1, 0)``), and as one SELECT may read another's columns, their bounds compose: ``a·L + b`` with ``a`` the
        product of each SELECT's largest ``a`` and ``b`` its ``b``'s, each times that product, is bounded too.
        """
        nested = frozenset(c for data in self.catalog.public.values()
                           for c, dtype in data.schema.items() if dtype.is_nested())
        grown_a, grown_b = 1, 0     # a·L + b for any order of the SELECTs: the a's multiply, each b times all a's
        for select in _selects(node):
            most_a, most_b = 1, 0
            for expr in _expressions(select):
                a, b = check_sql_growth(expr, {}, "a public subquery", nested)
                most_a, most_b = max(most_a, a), max(most_b, b)
            grown_a, grown_b = grown_a * most_a, grown_b * most_a + most_b
            if grown_a + grown_b * grown_a > MAX_GROWTH:
                raise too_large(f"of the public subquery {fragment(self.text, node)!r}", (grown_a, grown_b * grown_a),
                                "sql", "fewer nested repetitions, paddings and concatenations across its CTEs and "
                                       "subqueries (their bounds multiply)")

    def row_select(self, node: Json, ctes: dict[str, Json], label: str) -> Relation:
        """``SELECT <row-level expressions> FROM <private> [WHERE ...]`` as Filter + projection nodes."""
        for key, what in (("qualify", "QUALIFY"), ("having", "HAVING"), ("sample", "USING SAMPLE")):
            if node.get(key):
                raise self.error(node.get(key), f"{what} inside a subquery is not supported", _ROW_LEVEL)
        if node.get("group_expressions") or node.get("aggregate_handling") == "FORCE_AGGREGATES":
            raise self.error((node.get("group_expressions") or [None])[0] or node,
                             "GROUP BY inside a subquery is not supported (one aggregation per query)", _ROW_LEVEL)
        for mod in node.get("modifiers", []):
            what = {"ORDER_MODIFIER": "ORDER BY", "LIMIT_MODIFIER": "LIMIT", "DISTINCT_MODIFIER": "DISTINCT",
                    "LIMIT_PERCENT_MODIFIER": "LIMIT %"}.get(mod.get("type"), "this clause")
            quoted = modifier_fragment(self.text, node, mod) or repr(label)
            raise PlanError(f"{what} inside a subquery is not supported (which rows are kept must not depend on "
                            f"other rows): {quoted}", argument="sql", fix=_ROW_LEVEL)
        rel = self.relation(node["from_table"], ctes)
        if not rel.private:  # pragma: no cover - reads_private said so
            raise self.error(node, "expected a private table", _ROW_LEVEL)
        assert rel.node is not None
        current: Node = rel.node
        if node.get("where_clause"):
            current = build_filter(current, node["where_clause"], rel.scope, self.text)
        items: list[tuple[str, Json]] = []
        columns: list[Column] = []
        for item in node["select_list"]:
            if item.get("class") == "STAR":
                picked = self.star(item, rel.scope)
                items += [(c.name, column_ref(c.flat)) for c in picked]
                columns += [replace(c, flat=c.name, qualifiers=frozenset()) for c in picked]
                continue
            checked, used = rewrite(item, rel.scope, self.text, f"SELECT of {label}")
            name = str(item.get("alias") or "") or _default_name(item)
            plain = checked.get("class") == "COLUMN_REF" and len(used) == 1 and not used[0].path
            base = used[0] if plain else None
            columns.append(Column(name, name, frozenset(), base.origin if base else None,
                                  public=base.public if base else None,
                                  left_joined=base.left_joined if base else False,
                                  domain=base.domain if base else None))
            items.append((name, dict(checked, alias="")))
        unit = self.catalog.unit
        if unit is not None and unit in current.schema:
            mine = [(n, e) for n, e in items if n == unit]
            if any(e.get("class") != "COLUMN_REF" or e["column_names"] != [unit] for _, e in mine):
                raise self.error(node, f"this would overwrite the privacy-unit column {unit!r}",
                                 f"give the new column another name (AS ...); {unit!r} is kept automatically")
            if not mine:
                items.append((unit, column_ref(unit)))
        return Relation(build_project(current, items, self.text, f"SELECT of {label}"), None, Scope(columns), label)

    def star(self, item: Json, scope: Scope) -> list[Column]:
        for key in ("exclude_list", "replace_list", "rename_list", "qualified_exclude_list"):
            if item.get(key):
                raise self.error(item, "* EXCLUDE/REPLACE/RENAME is not supported", "list the columns")
        if item.get("columns") or item.get("expr"):
            raise self.error(item, "COLUMNS(...) is not supported", "list the columns")
        rel = str(item.get("relation_name") or "").lower()
        picked = [c for c in scope.columns if not rel or rel in c.qualifiers]
        if not picked:
            raise self.error(item, f"no table {rel!r} to expand", f"use one of the columns {scope.names()}")
        return picked

    # ----------------------------------------------------------------------------------------- joins
    def join(self, ref: Json, ctes: dict[str, Json]) -> Relation:
        if ref.get("ref_type") != "REGULAR":
            raise self.error(ref, f"{str(ref.get('ref_type')).lower()} joins are not supported",
                             "use [INNER|LEFT] JOIN <public table> ON private.col = public.col")
        how = str(ref.get("join_type"))
        left, right = self.relation(ref["left"], ctes), self.relation(ref["right"], ctes)
        if left.private and right.private:
            raise self.error(ref, "joins between two private tables are not supported",
                             "join a private table only with a public table (dp.Session(public_tables=...))")
        if not left.private and not right.private:
            raise self.error(ref, "a join of two public tables must be written as a subquery",
                             "wrap it: JOIN (SELECT ... FROM a JOIN b ON ...) AS p ON ...")
        if how == "RIGHT" and not left.private:
            left, right, how = right, left, "LEFT"
        elif how == "INNER" and not left.private:
            left, right = right, left
        if how not in ("INNER", "LEFT") or not left.private:
            raise self.error(ref, f"a {how} join of a public table with a private one is not supported",
                             "use private [INNER|LEFT] JOIN public")
        assert left.node is not None and right.data is not None
        pairs = self.join_keys(ref, left, right)
        return self.public_join(ref, left, right, pairs, how.lower())

    def join_keys(self, ref: Json, left: Relation, right: Relation) -> list[tuple[Column, Column]]:
        using = [str(u) for u in ref.get("using_columns") or []]
        if using:
            return [(left.scope.resolve([u], "USING"), right.scope.resolve([u], "USING")) for u in using]
        cond = ref.get("condition")
        if cond is None:
            raise self.error(ref, "a join needs ON or USING", "add ON private.col = public.col")
        terms = cond["children"] if cond.get("type") == "CONJUNCTION_AND" else [cond]
        both = Scope(left.scope.columns + right.scope.columns)
        pairs = []
        for term in terms:
            if term.get("type") != "COMPARE_EQUAL" or term["left"].get("class") != "COLUMN_REF" \
                    or term["right"].get("class") != "COLUMN_REF":
                raise self.error(term, "join conditions must be equalities of columns joined by AND",
                                 "write ON private.a = public.b [AND ...]; filter other conditions in WHERE")
            a = both.resolve(term["left"]["column_names"], "ON")
            b = both.resolve(term["right"]["column_names"], "ON")
            if a.public and not b.public:
                a, b = b, a
            if a.public or not b.public:
                raise self.error(term, "each join condition must compare a private column with a public one",
                                 "write ON private.a = public.b")
            pairs.append((a, b))
        return pairs

    def public_join(self, ref: Json, left: Relation, right: Relation, pairs: list[tuple[Column, Column]],
                    how: str) -> Relation:
        assert left.node is not None and right.data is not None
        schema = left.node.schema
        data = right.data
        keys = list(dict.fromkeys(b.flat for _, b in pairs))    # ON t.k = p.k AND t.j = p.k names p.k twice
        if data.select(keys).is_duplicated().any():
            raise self.error(ref, f"the public table {right.label!r} has repeated values in its join key {keys}, "
                             "so a private row could match several rows", "join on a unique key of the public table")
        taken = set(schema.names())
        series: list[pl.Series] = []
        for i, (a, b) in enumerate(pairs):
            want = schema[a.flat]
            try:
                cast = data[b.flat].cast(want, strict=True)
                lossless = cast.cast(data.schema[b.flat], strict=True).equals(data[b.flat])
            except (pl.exceptions.PolarsError, TypeError, ValueError):
                lossless = False
            if not lossless:
                raise self.error(ref, f"cannot compare {a.name} ({want}) with {right.label}.{b.name} "
                                 f"({data.schema[b.flat]}) without changing values", "cast one side in a subquery")
            series.append(cast.alias(f"__dp_key{i}"))
        added: list[Column] = []
        for c in right.scope.columns:
            flat = c.name if c.name not in taken else f"{right.label}.{c.name}"
            n = 1
            while flat in taken:
                n += 1
                flat = f"{right.label}.{c.name}_{n}"
            taken.add(flat)
            series.append(data[c.flat].alias(flat))
            added.append(replace(c, flat=flat, left_joined=how == "left"))
        table = pl.DataFrame(series)
        out_schema = pl.Schema({**dict(schema), **{c.flat: table.schema[c.flat] for c in added}})
        node = PublicJoin(left.node, out_schema, right.label, table, tuple(a.flat for a, _ in pairs),
                          tuple(f"__dp_key{i}" for i in range(len(pairs))), how, tuple(c.flat for c in added),
                          tuple(b.name for _, b in pairs))
        using = {str(u).lower(): left.scope.resolve([str(u)], "USING") for u in ref.get("using_columns") or []}
        scope = Scope(left.scope.columns + added, {**left.scope.using, **using})
        return Relation(node, None, scope, f"{left.label}+{right.label}")


def _default_name(item: Json) -> str:
    if item.get("class") == "COLUMN_REF":
        return str(item["column_names"][-1])
    return render_expression(item)


def _selects(node: Any) -> list[Json]:
    """Every ``SELECT_NODE`` at or below ``node`` (CTE bodies, subqueries in FROM and in expressions)."""
    found, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if n.get("type") == "SELECT_NODE":
                found.append(n)
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return found


def _expressions(select: Json) -> list[Json]:
    """The outermost expression nodes of ``select``, not those of the SELECTs nested in it.

    Its SELECT list, WHERE, GROUP BY, HAVING, join conditions, ORDER BY ...: a nested SELECT (a CTE, a subquery) is
    its own :func:`_selects` entry.
    """
    found: list[Json] = []
    stack: list[Any] = [v for k, v in select.items() if k != "cte_map"]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if "class" in n:
                found.append(n)
            elif n.get("type") != "SELECT_NODE":
                stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return found
