"""Post-processing of released values: the SELECT list, HAVING, ORDER BY and LIMIT of a SQL query.

After the mechanisms release the noisy statistics (one column per GROUP BY key and per aggregate), the
rest of the query only reshapes those *public* values, which costs no privacy: expressions over
aggregates (``SUM(x) / COUNT(*)``), ``HAVING`` (a filter on released values), ``ORDER BY`` and
``LIMIT``. DuckDB runs it on a connection that sees nothing but the released frame (a cursor on the
locked database for public data, :func:`~dpframe.sql.sandbox.public_connection`). A column
reference that is neither a GROUP BY key nor an aggregate is refused when the query is built, so no
raw value can leak through this step.

Example:
    >>> released = pl.DataFrame({"city": ["a", "b"], "n": [12, 3]})
    >>> PostProcess("SELECT city FROM __dp_released WHERE n > 5", ()).apply(released)["city"].to_list()
    ['a']

"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from dpframe.errors import DPFrameError, PlanError
from dpframe.measures import COUNT_KINDS, Measure
from dpframe.plan.nodes import Aggregate
from dpframe.sql.aggregates import contains, is_aggregate
from dpframe.sql.expr import column_ref, rewrite
from dpframe.sql.parse import fragment
from dpframe.sql.sandbox import Json, public_connection, quote, render, render_expression, select_node
from dpframe.sql.scope import Scope
from dpframe.tables import PATTERN, pattern_name

if TYPE_CHECKING:
    from dpframe.sql.compile import Key

RELEASED = "__dp_released"
INTERVAL_ENDS = ("ci_low", "ci_high")
"""The suffixes of a measure's interval columns (``collect(..., ci=...)``)."""
CHECKED_KEYS = 10_000
"""The most public keys the post-processing is checked on when the query is built."""
_RAW = ("only GROUP BY keys and aggregates can be released: use the column in GROUP BY, or aggregate it "
        "(COUNT, SUM(CLAMP(...)), AVG(CLAMP(...)), ...)")


def released_dtype(m: Measure) -> pl.DataType:
    """The type a measure's released column will have (for checking post-processing before running)."""
    if m.kind in COUNT_KINDS:
        return pl.Int64()
    if m.kind == "quantile" and isinstance(m.option("q"), tuple):
        return pl.List(pl.Float64())
    return pl.Float64()


def _beside(frame: pl.DataFrame, pairs: tuple[tuple[str, str], ...]) -> pl.DataFrame:
    """``frame`` with each output's interval columns right after it, as a method chain's ``collect(ci=...)`` has them.

    Example:
        >>> _beside(pl.DataFrame({"n": [1], "m": [2.0], "n_ci_low": [0], "n_ci_high": [2]}),
        ...         (("n_ci_low", "n_ci_low"), ("n_ci_high", "n_ci_high"))).columns
        ['n', 'n_ci_low', 'n_ci_high', 'm']

    """
    added = {out for _, out in pairs if out in frame.columns}
    order: list[str] = []
    for name in frame.columns:
        if name not in added:
            order += [name, *(f"{name}_{end}" for end in INTERVAL_ENDS if f"{name}_{end}" in added)]
    return frame.select(order + [name for name in frame.columns if name not in order])


@dataclass(frozen=True)
class PostProcess:
    """Reshapes the released frame: a column selection, or a DuckDB query over the released values.

    ``columns`` are the ``(output, released column)`` pairs of the outputs that are a released column
    itself (every output when ``sql`` is None); ``names`` all output names, in order; ``sql_ci`` the same
    query as ``sql`` also selecting ``<column>_ci_low`` / ``<column>_ci_high`` as ``<output>_ci_low`` /
    ``<output>_ci_high`` for each of ``columns``, so that intervals follow the rows HAVING, ORDER BY and
    LIMIT keep.
    """

    sql: str | None
    columns: tuple[tuple[str, str], ...]
    restore: tuple[tuple[str, pl.DataType], ...] = ()
    names: tuple[str, ...] = ()
    sql_ci: str | None = None
    ends: tuple[tuple[str, str], ...] | None = None
    """The (interval column, output name) pairs ``sql_ci`` selects (None: every ``<column>_ci_low`` /
    ``<column>_ci_high`` of ``columns``). A pair whose column is itself a released column (a measure selected as
    ``n_ci_low`` beside ``n``), or whose name another output has, is left out: it is no interval."""
    derived: tuple[str, ...] = ()
    """The outputs computed from measures that are not a measure itself (``COUNT(*) + 1``): they have no interval."""

    def describe(self) -> str | None:
        """The post-processing SQL (None when the output is just a selection of released columns)."""
        return self.sql

    def apply(self, released: pl.DataFrame, intervals: bool = False) -> pl.DataFrame:
        """Run on the released (noisy) frame; ``intervals``: also pass the selected measures' interval columns on.

        Example:
            >>> post = PostProcess("SELECT n FROM __dp_released ORDER BY n DESC", (("n", "n"),), (), ("n",),
            ...                    "SELECT n, n_ci_low AS n_ci_low, n_ci_high AS n_ci_high FROM __dp_released "
            ...                    "ORDER BY n DESC")
            >>> post.apply(pl.DataFrame({"n": [1, 5], "n_ci_low": [0, 4], "n_ci_high": [2, 6]}), True).rows()
            [(5, 4, 6), (1, 0, 2)]

        """
        pairs = self._pairs()
        present = {src for src, _ in pairs if src in released.columns}
        if self.sql is None:
            return _beside(released.select([pl.col(src).alias(out) for out, src in self.columns] + (
                [pl.col(src).alias(out) for src, out in pairs if src in present] if intervals else [])), pairs)
        if not intervals or not present or self.sql_ci is None:
            return run(self.sql, released, dict(self.restore))
        # the measures without intervals get null ones for the query, dropped from its output
        missing = list(dict.fromkeys(src for src, _ in pairs if src not in present))
        out = run(self.sql_ci, released.with_columns([pl.lit(None, pl.Float64).alias(c) for c in missing]),
                  dict(self.restore))
        dropped = {out_name for src, out_name in pairs if src in missing}
        return _beside(out.drop([c for c in out.columns if c in dropped]), pairs)

    def _pairs(self) -> tuple[tuple[str, str], ...]:
        """The (interval column, output name) pairs ``apply`` passes on where the released frame has them."""
        sources = {src for _, src in self.columns}      # a selected column named like an interval is not one
        pairs = self.ends if self.ends is not None else tuple(
            (f"{src}_{end}", f"{out}_{end}") for out, src in self.columns for end in INTERVAL_ENDS)
        return tuple((src, out) for src, out in pairs if src not in sources)

    def no_intervals(self, measures: Mapping[str, str], with_intervals: Set[str]) -> tuple[dict[str, str], bool]:
        """The outputs ``ci=`` gives no interval (each with why), and whether any output gets one. Free.

        ``measures``: each released measure without an interval, with why; ``with_intervals``: those with one.

        Example:
            >>> post = PostProcess("SELECT n, n + 1 AS m FROM __dp_released", (("n", "n"),), (), ("n", "m"),
            ...                    derived=("m",))
            >>> post.no_intervals({}, {"n"})
            ({'m': 'an expression over measures has no interval (select a measure as it is for one)'}, True)

        """
        given = {out for _, out in self._pairs()}
        sources = dict(self.columns)
        missing: dict[str, str] = {}
        has = False
        for name in self.names or tuple(sources):
            src = sources.get(name)
            if src in with_intervals and all(f"{name}_{end}" in given for end in INTERVAL_ENDS):
                has = True
            elif src in with_intervals:
                missing[name] = "its interval's column name is taken by another column"
            elif src is not None and src in measures:
                missing[name] = measures[src]
            elif name in self.derived:
                missing[name] = "an expression over measures has no interval (select a measure as it is for one)"
        return missing, has


def run(sql: str, released: pl.DataFrame, restore: dict[str, pl.DataType]) -> pl.DataFrame:
    """Evaluate ``sql`` with ``released`` registered as the only table (``__dp_released``)."""
    with public_connection() as con:
        con.register(RELEASED, released.to_arrow())
        relation = con.sql(sql)
        intervals = [name for name, t in zip(relation.columns, relation.types) if "INTERVAL" in str(t)]
        if intervals:   # (Polars reads no DuckDB INTERVAL; its own error names an unstable environment flag)
            raise ValueError(f"the output {intervals[0]!r} is an INTERVAL, which cannot be returned as a Polars "
                             "column: return a number instead (e.g. epoch(...), datediff(...), or the count itself)")
        out: pl.DataFrame = relation.pl()
    casts = [pl.col(c).cast(t, strict=False) for c, t in restore.items() if c in out.columns and out.schema[c] != t]
    return out.with_columns(casts) if casts else out


class _Substitute:
    """Replaces aggregates and GROUP BY expressions by references to released columns."""

    def __init__(self, text: str, keys: list[Key], named: dict[str, Measure], scope: Scope,
                 aliases: set[str]) -> None:
        from dpframe.sql.compile import canonical

        self.canonical = canonical
        self.text, self.keys, self.named, self.scope, self.aliases = text, keys, named, scope, aliases
        self.by_canon = {k.canon: k.flat for k in keys}

    def key_for(self, node: Json) -> str | None:
        try:
            checked, _ = rewrite(node, self.scope, self.text, "output")
        except DPFrameError:
            return None
        return self.by_canon.get(self.canonical(checked))

    def __call__(self, node: Any, where: str, alias_first: bool) -> Any:
        if isinstance(node, list):
            return [self(x, where, alias_first) for x in node]
        if not isinstance(node, dict):
            return node
        if is_aggregate(node):
            return column_ref(self.named[self.canonical(node)].output_name)
        if "class" in node and not contains(node, is_aggregate):
            is_col = node.get("class") == "COLUMN_REF"
            single = is_col and len(node["column_names"]) == 1
            if single and alias_first and str(node["column_names"][0]).lower() in self.aliases:
                return node
            flat = self.key_for(node)
            if flat is not None:
                return column_ref(flat)
            if single and str(node["column_names"][0]).lower() in self.aliases:
                return node
            if is_col:
                raise PlanError(f"the raw column {fragment(self.text, node)} would be released in {where}",
                                argument="sql", fix=_RAW)
        return {k: self(v, where, alias_first) for k, v in node.items()}


def build_post(text: str, items: list[Json], having: Json | None, orders: list[Json], limit: Json | None,
               keys: list[Key], calls: list[Json], named: dict[str, Measure], aggregate: Aggregate,
               scope: Scope) -> PostProcess:
    """Check the output side of the query and build its post-processing."""
    aliases = {str(i.get("alias")).lower() for i in items if i.get("alias")}
    sub = _Substitute(text, keys, named, scope, aliases)
    out_items: list[Json] = []
    names: list[str] = []
    for item in items:
        new = sub(item, "SELECT", alias_first=False)
        name = str(item.get("alias") or "") or _output_name(item, new, named, sub)
        if name in names:
            raise PlanError(f"two output columns are named {name!r}", argument="sql", fix="give one another alias")
        if pattern_name(name):      # the released columns are selected by name: '*' failed after the charge
            raise PlanError(f"an output column may not be named {name!r}: {PATTERN}", argument="sql",
                            fix="give it another alias")
        names.append(name)
        out_items.append(dict(new, alias=name))
    where = sub(having, "HAVING", alias_first=False) if having else None
    new_orders = [dict(o, expression=sub(o["expression"], "ORDER BY", alias_first=True)) for o in orders]
    released = {*[k.flat for k in keys], *[m.output_name for m in named.values()]}
    simple = where is None and not orders and limit is None and all(
        i.get("class") == "COLUMN_REF" and len(i["column_names"]) == 1 and i["column_names"][0] in released
        for i in out_items)
    if simple:
        return PostProcess(None, tuple((n, i["column_names"][0]) for n, i in zip(names, out_items)), (), tuple(names))
    measures = {m.output_name for m in named.values()}
    measured = tuple((n, str(i["column_names"][0])) for n, i in zip(names, out_items)
                     if i.get("class") == "COLUMN_REF" and len(i["column_names"]) == 1
                     and i["column_names"][0] in measures)
    # an interval's column or name taken by a released column or an output: no interval (ci= refuses it, free,
    # where that measure has one: SQLQuery._check_interval_names)
    ends = [(f"{src}_{end}", f"{n}_{end}") for n, src in measured for end in INTERVAL_ENDS
            if f"{src}_{end}" not in released and f"{n}_{end}" not in names]
    sql, sql_ci = (_render(out_items + [dict(column_ref(src), alias=out) for src, out in extra], where, new_orders,
                           limit) for extra in ([], ends))
    schema = {k.flat: aggregate.input.schema[k.flat] for k in keys}
    schema.update({m.output_name: released_dtype(m) for m in named.values()})
    # sql_ci is sql plus plain references to the interval columns: it runs iff sql does (one check); a failure
    # at every aggregate 1 is tried again at 1000 (ln(COUNT(*) - 1) fails only on some released values)
    intervals = list(dict.fromkeys(src for src, _ in ends))   # one measure may be selected under two names
    failure = _fails(sql_ci, typical_release(schema, named, intervals, aggregate.keys))
    if failure is not None and _fails(sql_ci, typical_release(schema, named, intervals, aggregate.keys,
                                                              1000)) is not None:
        raise PlanError(f"the output expressions cannot be computed: {failure} (on released rows with every aggregate "
                        "1, then 1000, and the public keys, or NULL keys: the query would be charged, then fail)",
                        argument="sql", fix="check the SELECT/HAVING/ORDER BY expressions over the released columns; "
                        "TRY_CAST or TRY(...) gives NULL where a released value does not convert")
    restore = tuple((n, schema[i["column_names"][0]]) for n, i in zip(names, out_items)
                    if i.get("class") == "COLUMN_REF" and len(i["column_names"]) == 1
                    and i["column_names"][0] in schema)
    derived = tuple(n for n, i in zip(names, out_items) if n not in dict(measured)
                    and contains(i, lambda node: _refers_to(node, measures)))
    return PostProcess(sql, measured, restore, tuple(names), sql_ci, tuple(ends), derived)


def _refers_to(node: Any, columns: Set[str]) -> bool:
    """Whether ``node`` (a parse-tree node of the output side) is a reference to one of the released ``columns``."""
    return isinstance(node, dict) and node.get("class") == "COLUMN_REF" and len(node.get("column_names", ())) == 1 \
        and node["column_names"][0] in columns


def _fails(sql: str, released: pl.DataFrame) -> str | None:
    """The first line of the error ``sql`` raises on ``released``, or None if it runs."""
    try:
        run(sql, released, {})
    except Exception as e:
        return str(e).splitlines()[0]
    return None


def typical_release(schema: dict[str, pl.DataType], named: dict[str, Measure], intervals: list[str],
                    keys: pl.DataFrame | None, value: int = 1) -> pl.DataFrame:
    """Released rows to check the post-processing on when the query is built.

    Each aggregate is ``value`` (a list of them for several quantiles), each interval end too, and the keys are
    the public ``keys`` (at most :data:`CHECKED_KEYS` of them: every one is released) or, for a whole-table
    aggregate or private keys, one row of NULL keys (a key may be NULL).

    An expression that fails on them at two values (``CAST(COUNT(*) || 'x' AS INTEGER)``, ``error(...)``,
    ``CAST(city AS INTEGER)`` with public keys that are names) fails whatever the data: checked on no row, it
    would be charged, then fail.

    Example:
        >>> typical_release({"k": pl.String(), "len": pl.Int64()}, {"n": Measure("len", None)}, [], None).rows()
        [(None, 1)]

    """
    measures = {m.output_name: m for m in named.values()}
    rows = 1 if keys is None else min(keys.height, CHECKED_KEYS)
    values: list[pl.Series] = []
    for name, dtype in schema.items():
        m = measures.get(name)
        if m is None:
            column = keys[name].head(rows) if keys is not None and name in keys.columns else None
            values.append(pl.Series(name, [None] * rows, dtype=dtype) if column is None else column.cast(dtype))
            continue
        q = m.option("q") if m.kind == "quantile" else None
        stand_in: object = [float(value)] * len(q) if isinstance(q, tuple) else value
        values.append(pl.Series(name, [stand_in] * rows, dtype=dtype, strict=False))
    values += [pl.Series(name, [float(value)] * rows, dtype=pl.Float64()) for name in intervals]
    return pl.DataFrame(values)


def _render(items: list[Json], where: Json | None, orders: list[Json], limit: Json | None) -> str:
    """``SELECT items FROM __dp_released WHERE … ORDER BY … LIMIT …`` as SQL text."""
    node = select_node(copy.deepcopy(items))
    node["from_table"] = {"type": "BASE_TABLE", "alias": "", "sample": None, "schema_name": "",
                          "table_name": RELEASED, "column_name_alias": [], "catalog_name": "", "at_clause": None}
    node["where_clause"] = copy.deepcopy(where)
    modifiers = []
    if orders:
        modifiers.append({"type": "ORDER_MODIFIER", "orders": copy.deepcopy(orders)})
    if limit is not None:
        modifiers.append(copy.deepcopy(limit))
    node["modifiers"] = modifiers
    return render(node)


def _output_name(item: Json, new: Json, named: dict[str, Measure], sub: _Substitute) -> str:
    if is_aggregate(item):
        return str(new["column_names"][0]) if new.get("class") == "COLUMN_REF" else render_expression(item)
    if item.get("class") == "COLUMN_REF":
        try:
            return sub.scope.resolve([str(p) for p in item["column_names"]], "SELECT").name
        except DPFrameError:
            return str(item["column_names"][-1])
    return render_expression(item)


__all__ = ["INTERVAL_ENDS", "RELEASED", "PostProcess", "build_post", "quote"]
