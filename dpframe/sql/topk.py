"""``HAVING TOP_K(score, k)``: private top-k selection written in SQL.

.. code-block:: sql

    SELECT city FROM visits WHERE age >= 18 GROUP BY city
    HAVING TOP_K(COUNT(DISTINCT user_id), 10)                      -- the 10 cities with most users

``TOP_K(score, k, [method := '...', k_max := n, lam := x, ptr := '...', delta_t := x])`` as the whole
``HAVING`` clause keeps the groups whose ``score`` is among the k largest: exactly
``frame.group_by(keys).top_k(k=k, score=..., method=...)`` (:class:`dpframe_topk.TopKQuery`), with the same
cost, ``explain()`` and ``collect()``. ``k`` is a whole number, or ``NULL`` to choose k from the data.
The score is ``COUNT(DISTINCT <privacy unit>)`` (``dp.count_units()``), ``COUNT(*)``, ``COUNT(x)`` or
``SUM(CLAMP(x, lo, hi))``. The SELECT list holds the GROUP BY keys and, to also release noisy scores
(``release_scores=True``, a visible share of the budget), the score aggregate itself. The result is a
frame: the key set sorted by key — never ordered by score, so ``ORDER BY`` and ``LIMIT`` are refused —
or, when the selection falls short, the keys it released (possibly none) and a
:class:`dpframe.TopKWarning` carrying the method chain's ``TopKFailed`` / ``TopKPartial``.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": range(400), "city": ["a"] * 250 + ["b"] * 150})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ZCDP(1, 1e-8), seed=0)
    >>> q = sess.sql("SELECT city FROM t GROUP BY city HAVING TOP_K(COUNT(DISTINCT user), NULL)")
    >>> q.collect(dp.ZCDP(1, 1e-8))["city"].to_list()
    ['a', 'b']

"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import polars as pl

from dpframe.errors import PlanError, TopKWarning, emit
from dpframe.family import FamilyQuery, Releasable, Source, building_sql, check_format, needs_budget
from dpframe.measures import Measure
from dpframe.plan.nodes import Node, tables_read
from dpframe.planning import sampling_rate
from dpframe.sealed import _ENGINE
from dpframe.sql.aggregates import contains, is_aggregate, number
from dpframe.sql.compile import Compiler, canonical
from dpframe.sql.parse import Parsed, fragment

if TYPE_CHECKING:
    from dpframe.session import Session

FORM = "SELECT key FROM t GROUP BY key HAVING TOP_K(COUNT(DISTINCT unit) | COUNT(*) | SUM(CLAMP(x, lo, hi)), k | NULL)"
_OPTIONS = {"method": "STRING", "ptr": "STRING", "k_max": "INTEGER", "lam": "number", "delta_t": "number"}


def _is_top_k(node: Any) -> bool:
    return isinstance(node, dict) and node.get("class") == "FUNCTION" and \
        str(node.get("function_name", "")).lower() == "top_k"


def top_k_call(parsed: Parsed) -> dict[str, Any] | None:
    """The ``TOP_K(...)`` call that is the whole HAVING clause, None if the query has no TOP_K.

    A ``TOP_K`` anywhere else (SELECT list, WHERE, a CTE, inside an expression) is refused.
    """
    if not parsed.may_contain("fn:top_k"):      # no TOP_K anywhere in the tree: nothing to find
        return None
    node = parsed.node
    having = node.get("having") if node.get("type") == "SELECT_NODE" else None
    if _is_top_k(having):
        rest = dict(node, having=None)
        if not contains(rest, _is_top_k):
            return having
    found = _find(node)
    if found is None:
        return None
    raise PlanError(f"TOP_K(...) must be the whole HAVING clause: {fragment(parsed.text, found)}", argument="sql",
                    fix=f"write {FORM}")


def _find(node: Any) -> dict[str, Any] | None:
    if _is_top_k(node):
        return dict(node)
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        found = _find(child)
        if found is not None:
            return found
    return None


class SQLTopKQuery(Releasable[Any]):
    """A top-k query written in SQL: the ``top_k`` family's query under the SELECT list's output names.

    ``cost``, ``plan`` and ``explain`` are the top-k query's (free). ``collect`` charges and runs it (the
    ledger records the SQL text) and always returns a ``pl.DataFrame``, as every SQL query does: the key
    set, or — when the selection fell short — the keys it did release (possibly none) with the same
    columns, and a :class:`dpframe.TopKWarning` whose ``outcome`` is the method chain's ``TopKFailed`` /
    ``TopKPartial`` (its reason spelled in SQL).
    """

    def __init__(self, session: Session, query: FamilyQuery[Any], node: Node, *, text: str,
                 columns: tuple[tuple[str, str], ...], explain_only: bool, backend: str | None,
                 _engine: object = None) -> None:
        super().__init__(session, query, family="top_k", tables=tables_read(node), rate=sampling_rate(node),
                         _engine=_engine)
        self._session, self.text, self.columns = session, text, columns
        self.explain_only, self.backend_name, self._node = explain_only, backend, node

    def _refusal(self) -> str | None:
        from dpframe.sql.query import refusal

        return refusal(self._session._catalog.backend(self.backend_name), self._node)

    def explain(self, budget: object = None, format: str = "text") -> Any:
        """The top-k plan, then the SQL, the backend and what ``collect`` returns. Free."""
        check_format(format)
        refused = self._refusal()
        backend = str(self._session._catalog.backend(self.backend_name).name)
        inner = super().explain(budget)
        lines = [f"sql: {' '.join(self.text.split())}", f"backend: {backend}"]
        if "TopKFailed" in str(inner.data.get("output", "")):
            lines.append("sql result: always a frame; a failed or partial selection returns the keys it released "
                         "(possibly none) and warns dp.TopKWarning with the reason and what to try next")
        if refused:
            lines.append(f"REFUSED on this backend: {refused}; run it with backend='duckdb'")
        out = inner.extended(lines, {"sql": self.text, "backend": backend, "refused": refused})
        return out.to_dict() if format == "json" else out

    def collect(self, budget: object = None, *, ci: object = None, diagnostics: object = False) -> pl.DataFrame:
        """Charge and run: the key set (sorted by key) under the SELECT list's names.

        A failed or partial selection returns the keys it released (none for ``TopKFailed``), with the
        full result's columns and dtypes, and warns :class:`dpframe.TopKWarning` (``.outcome``: the typed
        result, ``.outcome.reason``: why, and what to try next). Nothing beyond the query's cost is charged.
        ``ci`` and ``diagnostics``, which an aggregate SQL query takes, are refused (free): a key set has no
        confidence intervals, and top-k has no bounding diagnostics.
        """
        if ci is not None:
            raise PlanError("a TOP_K query releases a key set (and, with its score selected, noisy scores chosen by "
                            "rank), which has no confidence intervals", argument="ci", fix="leave ci= out")
        if diagnostics is not False:
            raise PlanError("a TOP_K query has no diagnostics (noisy counts of what bounding left out)",
                            argument="diagnostics", fix="drop diagnostics=True: a TOP_K query has none")
        if self.explain_only:
            return pl.DataFrame({"explain": [str(self.explain(budget))]})
        plan = self._planned(needs_budget(budget, "collect"))   # bad budgets raise first, uncharged
        refused = self._refusal()
        if refused is not None:
            raise PlanError(f"backend {self._session._catalog.backend(self.backend_name).name!r} cannot run {refused}",
                            argument="backend", fix="run it on DuckDB: sess.sql(..., backend='duckdb'); nothing "
                                                    "was charged")
        out = self._collect(plan)
        if isinstance(out, pl.DataFrame):
            return self._named(out)
        frame, warning = self._short(out, plan.detail)
        emit(warning)       # at the analyst's line (dp.Server's: in the analyst's process, before it replies)
        return frame

    def _short(self, out: Any, detail: Any) -> tuple[pl.DataFrame, TopKWarning]:
        """The released keys of a failed or partial outcome, and the warning that says so (released values only)."""
        query: Any = self.query
        partial = isinstance(getattr(out, "keys", None), pl.DataFrame)
        keys = self._named(out.keys if partial else pl.DataFrame(schema=query.output_schema))
        reason = str(out.reason)          # its next step is spelled in SQL: the query was built under building_sql()
        outcome = dataclasses.replace(out, **({"keys": keys} if partial else {}))
        got = (f"only {keys.height} of the {out.k} keys asked (the frame holds those)" if partial else
               "no key set (the empty frame means 'not released at this budget', not 'no keys')")
        return keys, TopKWarning(f"TOP_K released {got}: {reason}; the cost stays charged", outcome)

    def _named(self, frame: pl.DataFrame) -> pl.DataFrame:
        return frame.select([pl.col(src).alias(name) for name, src in self.columns])

    def describe(self) -> str:
        """The SQL text on one line (``repr`` and the ledger's history)."""
        return "SQL: " + " ".join(self.text.split())

    def __repr__(self) -> str:
        return f"<dp.TopKQuery {self.describe()}>"


def top_k_query(session: Session, parsed: Parsed, call: dict[str, Any], keys: Mapping[str, Any] | None,
                backend: str | None) -> SQLTopKQuery:
    """Lower ``SELECT keys ... GROUP BY keys HAVING TOP_K(score, k, ...)`` to the method chain's top-k query."""
    text, node = parsed.text, parsed.node
    args = [a for a in call.get("arguments", []) if not a.get("name")]
    named = {str(a["name"]).lower(): a["expression"] for a in call.get("arguments", []) if a.get("name")}
    if len(args) != 2 or not is_aggregate(args[0]["expression"]):
        raise PlanError(f"TOP_K takes a score aggregate and k: {fragment(text, call)}", argument="sql",
                        fix=f"write {FORM}")
    score, k = args[0]["expression"], _k(text, args[1]["expression"])
    options = {name: _option(text, name, value) for name, value in named.items()}
    if not node.get("group_expressions"):
        raise PlanError(f"TOP_K ranks groups, but the query has no GROUP BY: {fragment(text, call)}",
                        argument="sql", fix=f"write {FORM}")
    if node.get("modifiers"):
        raise PlanError("ORDER BY / LIMIT / DISTINCT are not supported with TOP_K: the released key set is "
                        "sorted by key and never ordered by score", argument="sql", fix="remove them")
    units = _count_units(score)
    target = canonical(score)
    items = node["select_list"]
    shown = [canonical(i) == target for i in items]
    for item, is_score in zip(items, shown):
        if not is_score and contains(item, is_aggregate):
            raise PlanError(f"with TOP_K the SELECT list holds the GROUP BY keys and optionally the TOP_K score "
                            f"(to release noisy scores): {fragment(text, item)}", argument="sql",
                            fix="compute other aggregates of the selected keys in a second query")
    # The same query without TOP_K, with the score as an aggregate: the compiler builds its row nodes,
    # keys and measure (COUNT(DISTINCT unit), the unit also renamed, is dp.count_units(), as in any query).
    plain = score
    select = [dict(plain, alias=i.get("alias", "")) if s else i for i, s in zip(items, shown)]
    synthetic = dict(copy.deepcopy(node), having=None, modifiers=[],
                     select_list=select if any(shown) else [*select, plain])
    compiled = Compiler(session._sql_catalog, Parsed(text, synthetic, parsed.explain), keys).compile()
    if compiled.post.describe() is not None:
        raise PlanError("with TOP_K the SELECT list holds only GROUP BY keys and the TOP_K score, not expressions "
                        "over them", argument="sql", fix="select the GROUP BY columns themselves")
    agg = compiled.node
    measure: Measure = agg.measures[-1] if not any(shown) else agg.measures[0]
    columns = compiled.post.columns if any(shown) else compiled.post.columns[:-1]
    if units and measure.kind != "count_units":
        unit = session._sql_catalog.unit
        raise PlanError(f"COUNT(DISTINCT ...) counts privacy units, so its argument must be the privacy-unit "
                        f"column: {fragment(text, score)}", argument="sql",
                        fix=f"write COUNT(DISTINCT {unit})" if unit else
                        "with row-level privacy every row is a unit: use COUNT(*)")
    source = Source(agg.input, session.plan_context, agg.by, agg.keys, backend)
    with building_sql():        # the family words its fixes in SQL (TOP_K(score, 10), method := 'stable')
        built = session.plugins.family("top_k").build(
            source, k=k, score=measure, method=options.get("method", "stable"), release_scores=any(shown),
            k_max=options.get("k_max"), lam=options.get("lam"), ptr=options.get("ptr", "gaussian"),
            delta_t=options.get("delta_t"))
    return SQLTopKQuery(session, built, agg.input, text=text, columns=columns,
                        explain_only=parsed.explain, backend=backend, _engine=_ENGINE)


def _count_units(score: dict[str, Any]) -> bool:
    name = str(score.get("function_name", "")).lower()
    if score.get("distinct") and name != "count":
        raise PlanError(f"{name.upper()}(DISTINCT ...) is not a TOP_K score", argument="sql",
                        fix="use COUNT(DISTINCT <privacy unit>), COUNT(*), COUNT(x) or SUM(CLAMP(x, lo, hi))")
    return bool(score.get("distinct"))


def _k(text: str, node: dict[str, Any]) -> int | None:
    lit = node.get("literal") or {}
    if node.get("class") == "CONSTANT" and lit.get("kind") == "NULL_LITERAL":
        return None
    value = number(node)
    if not isinstance(value, int):
        raise PlanError(f"k must be a whole-number literal or NULL: {fragment(text, node)}", argument="sql",
                        fix="e.g. TOP_K(COUNT(*), 10), or TOP_K(COUNT(*), NULL) to choose k from the data")
    return value


def _option(text: str, name: str, node: dict[str, Any]) -> Any:
    kind = _OPTIONS.get(name)
    if kind is None:
        raise PlanError(f"TOP_K has no option {name!r}: {fragment(text, node)}", argument="sql",
                        fix=f"options: {', '.join(f'{o} := ...' for o in _OPTIONS)}")
    lit = node.get("literal") or {}
    if kind == "STRING" and node.get("class") == "CONSTANT" and lit.get("kind") == "STRING":
        return str(lit["text"])
    value = number(node)
    if kind == "INTEGER" and isinstance(value, int):
        return value
    if kind == "number" and value is not None and (not isinstance(value, float) or math.isfinite(value)):
        return Fraction(str(value)) if isinstance(value, float) else value
    raise PlanError(f"TOP_K option {name} must be a {kind.lower()} literal: {fragment(text, node)}",
                    argument="sql", fix=f"e.g. {name} := " + ("'stable'" if kind == "STRING" else "10"))
