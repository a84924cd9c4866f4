"""Parsing SQL with DuckDB's own parser (``json_serialize_sql``), and quoting offending fragments.

Example:
    >>> p = parse("EXPLAIN SELECT COUNT(*) FROM visits")
    >>> p.explain, p.node["type"]
    (True, 'SELECT_NODE')
    >>> parse("SELEC 1")
    Traceback (most recent call last):
    ...
    dpframe.errors.PlanError: sql: syntax error at or near "SELEC" (at 'SELEC'). Fix: ...

"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from dpframe.errors import PlanError
from dpframe.sealed import plain_cache
from dpframe.sql.sandbox import Json, macro_copies, render, render_expression, serialize

SUPPORTED = ("supported: one SELECT (optionally after EXPLAIN, with WITH ... CTEs) over registered tables with "
             "COUNT/SUM/AVG/VAR/STDDEV/MEDIAN/QUANTILE_CONT aggregates, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT; "
             "see docs/sql.md")
_NO_LOCATION = 2**64 - 1


@dataclass(frozen=True)
class Parsed:
    """A parsed statement: the SELECT's query node, the SQL text it came from, and whether it was EXPLAIN.

    ``kinds``: every node ``class`` in the statement's tree and, for each ``FUNCTION`` node, ``"fn:"`` and its
    lower-cased name (:func:`tree_kinds`), so that a check for a construct the text never uses skips its walk
    of the tree; None (a node built by hand): not known, every check walks the tree.
    """

    text: str
    node: Json
    explain: bool
    kinds: frozenset[str] | None = None

    def may_contain(self, kind: str) -> bool:
        """False only when ``kind`` (a node class, or ``"fn:name"``) is nowhere in the statement's tree."""
        return self.kinds is None or kind in self.kinds


def tree_kinds(node: Any) -> frozenset[str]:
    """Every node ``class`` below ``node`` and ``"fn:<name>"`` (lower-cased) for each ``FUNCTION`` node.

    Example:
        >>> sorted(tree_kinds(parse("SELECT COUNT(*) FROM t WHERE x > 1").node))
        ['COLUMN_REF', 'COMPARISON', 'CONSTANT', 'FUNCTION', 'fn:count_star']

    """
    found: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            kind = n.get("class")
            if isinstance(kind, str):
                found.add(kind)
                if kind == "FUNCTION":
                    found.add("fn:" + str(n.get("function_name", "")).lower())
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return frozenset(found)


MAX_LAMBDA_DEPTH = 6
"""How many lambdas (``lambda x: ...``, a list comprehension's) a query may nest in each other's bodies.

DuckDB binds a lambda's body once more for each lambda around it: its cost doubles a level (``list_filter`` nested 14
deep in the body took 0.2 s of DuckDB's CPU, 16 deep seconds, 18 deep tens of seconds, the query a few hundred bytes),
and a query is bound several times on the process's checking connection, under its lock: on a ``dpframe serve`` server
every other client's query waited. Real queries nest two or three (a list of lists)."""


def lambda_depth(node: Any) -> int:
    """The most ``LAMBDA`` nodes below ``node`` nested in each other's bodies (``expr``); a function of the text alone.

    Example:
        >>> lambda_depth(parse("SELECT list_filter(l, lambda v: len(list_filter(v, lambda w: w > 0)) > 0) FROM t").node)
        2

    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(node, 0)]
    while stack:
        n, depth = stack.pop()
        if isinstance(n, dict):
            if n.get("class") == "LAMBDA":
                deepest = max(deepest, depth + 1)
                stack.extend((v, depth + 1 if k == "expr" else depth) for k, v in n.items())
            else:
                stack.extend((v, depth) for v in n.values())
        elif isinstance(n, list):
            stack.extend((v, depth) for v in n)
    return deepest


MAX_COPIES = 64
"""How many times DuckDB (or SQL's Polars form) may have to bind one part of a query.

A built-in macro's call is expanded into its definition, which may read an argument twice (``nullif(a, b)`` is
``CASE WHEN a = b THEN NULL ELSE a END``), and ``a BETWEEN l AND h``'s Polars form holds ``a`` twice: nested ``n``
deep, ``2ⁿ`` copies (``nullif`` nested 14 deep, a 200-byte query, took 70 s to build, 18 deep 38 s of DuckDB's binder
alone, review 55k)."""


def copies(node: Any) -> int:
    """The most copies of one part of ``node`` that binding it (or its Polars form) makes; the text's function.

    Example:
        >>> copies(parse("SELECT nullif(nullif(x, 1), 2) FROM t").node)
        4

    """
    doubling = macro_copies()
    most = 1
    stack: list[tuple[Any, int]] = [(node, 1)]
    while stack:
        n, factor = stack.pop()
        most = max(most, factor)
        if isinstance(n, dict):
            if n.get("class") == "BETWEEN":
                factor *= 2
            elif n.get("class") == "FUNCTION":
                factor *= doubling.get(str(n.get("function_name", "")).lower(), 1)
            stack.extend((v, factor) for v in n.values())
        elif isinstance(n, list):
            stack.extend((v, factor) for v in n)
    return most


def _strip_explain(text: str) -> tuple[str, bool]:
    """Remove a leading ``EXPLAIN`` keyword (comments before it are allowed)."""
    try:
        tokens = duckdb.tokenize(text)
    except Exception:  # pragma: no cover - tokenizer errors surface in the parser below
        return text, False
    words = [(pos, kind) for pos, kind in tokens if kind != duckdb.token_type.comment]
    if not words:
        return text, False
    start = words[0][0]
    match = re.compile(r"explain\b", re.IGNORECASE).match(text, start)
    if not match:
        return text, False
    rest = text[match.end():]
    if re.match(r"\s*analy[sz]e\b", rest, re.IGNORECASE):
        raise PlanError("EXPLAIN ANALYZE would run the query", argument="sql",
                        fix="use EXPLAIN SELECT ... (free), then collect() to run it")
    return rest, True


def check_text(text: object) -> str:
    """``text`` if it is a non-blank string, else the PlanError every SQL entry point (remote ones too) raises.

    Example:
        >>> check_text(123)
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: sql: expected a SQL string, got 123. Fix: pass a query such as ...

    """
    if not isinstance(text, str) or not text.strip():
        raise PlanError(f"expected a SQL string, got {text!r}", argument="sql",
                        fix="pass a query such as \"SELECT COUNT(*) FROM visits\"")
    return text


def parse(text: object) -> Parsed:
    """Parse one DuckDB-dialect SELECT statement (optionally prefixed by ``EXPLAIN``).

    The node is a fresh copy each call; the checks of the text and the tree's :func:`tree_kinds` (functions of
    the text alone) are made once per text (:func:`_checked`).
    """
    text = check_text(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:      # (a lone surrogate: DuckDB's parser raised its own error)
        raise PlanError(f"the SQL text is not UTF-8 text: {e.reason} at position {e.start}", argument="sql",
                        fix="remove the character (a lone surrogate) from the query") from None
    body, explain, kinds = _checked(text)
    return Parsed(body, serialize(body)["statements"][0]["node"], explain, kinds)


@plain_cache(maxsize=256)
def _checked(text: str) -> tuple[str, bool, frozenset[str]]:
    """The statement of ``text`` without EXPLAIN, whether it had one, and its tree's kinds; or the PlanError.

    A function of the text alone, cached (a text that fails raises again each time: errors are not cached).
    """
    body, explain = _strip_explain(text)
    doc = serialize(body)
    if doc.get("error"):
        message = str(doc.get("error_message", "cannot parse the query")).splitlines()[0]
        if doc.get("error_type") == "parser":
            at = _location(body, doc.get("location"), doc.get("position"))
            raise PlanError(f"{message}{at}", argument="sql", fix="correct the SQL syntax (DuckDB dialect)")
        raise _not_serializable(body)
    statements = doc["statements"]
    if len(statements) != 1:
        raise _several(body, len(statements))
    window = clause(body, [("WINDOW", None, "AS")], group=True)
    if window is not None:
        raise PlanError(f"named WINDOW clauses are not supported (window functions combine rows): {window}",
                        argument="sql", fix="remove the WINDOW clause; " + SUPPORTED)
    depth = lambda_depth(statements[0]["node"])
    if depth > MAX_LAMBDA_DEPTH:
        raise PlanError(f"lambdas nested {depth} deep (one in another's body; a list comprehension is one), more than "
                        f"{MAX_LAMBDA_DEPTH}: DuckDB binds each body again for each lambda around it",
                        argument="sql", fix=f"nest at most {MAX_LAMBDA_DEPTH} lambdas in each other's bodies, e.g. "
                                            "compute an inner list in a CTE first")
    most = copies(statements[0]["node"])
    if most > MAX_COPIES:
        raise PlanError(f"the query makes DuckDB bind one of its parts {most:,} times, more than {MAX_COPIES}: a "
                        "built-in macro reading its argument twice (nullif, split_part, array_to_string ...), or "
                        "BETWEEN, doubles what it is nested in", argument="sql",
                        fix="nest such calls less deep, e.g. compute the inner part in a CTE first")
    return body, explain, tree_kinds(statements[0]["node"])


def _statements(text: str) -> list[tuple[int, int]]:
    """(start, end) of each ';'-separated statement (outside parentheses, strings and comments)."""
    spans, start, depth = [], 0, 0
    for pos, word, kind in _tokens(text):
        if kind == "operator":
            depth += word.count("(") - word.count(")")
            if word == ";" and depth == 0:
                spans.append((start, pos))
                start = pos + 1
    spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _several(text: str, count: int) -> PlanError:
    spans = _statements(text)
    extra = f": {_short(text[spans[1][0]:spans[1][1]].strip())!r}" if len(spans) > 1 else ""
    return PlanError(f"expected one statement, got {count}{extra}", argument="sql",
                     fix="send one SELECT per call (remove the ';'-separated extra statements)")


def _not_serializable(text: str) -> PlanError:
    """The error for a statement DuckDB cannot serialize: name the statement or construct that is not a SELECT."""
    spans = _statements(text)
    for a, b in spans:
        part = text[a:b]
        words = [w for _, w, kind in _tokens(part) if kind in ("keyword", "identifier")]
        head = words[0].upper() if words else ""
        if head not in ("SELECT", "WITH", "FROM"):
            what = f"got a {head} statement" if head else "got a statement that is not a SELECT"
            return PlanError(f"only SELECT queries are supported, {what}: {_short(part.strip())!r}",
                             argument="sql", fix=SUPPORTED)
    for a, b in spans:
        pivot = clause(text[a:b], [("PIVOT",), ("UNPIVOT",), ("PIVOT_WIDER",), ("PIVOT_LONGER",)])
        if pivot is not None:
            return PlanError(f"PIVOT/UNPIVOT is not supported: {pivot}", argument="sql",
                             fix="GROUP BY the pivot column instead; " + SUPPORTED)
    if len(spans) > 1:
        return _several(text, len(spans))
    return PlanError(f"DuckDB cannot check this query (only plain SELECT statements can be): {_short(text.strip())!r}",
                     argument="sql", fix=SUPPORTED)


def _tokens(text: str) -> list[tuple[int, str, str]]:
    """(position, text, kind) of each token; kind is 'keyword', 'identifier', 'operator', ... (no comments)."""
    try:
        raw = duckdb.tokenize(text)
    except Exception:  # pragma: no cover - a tokenizer failure only loses the quoted fragment
        return []
    out = []
    for i, (pos, kind) in enumerate(raw):
        end = raw[i + 1][0] if i + 1 < len(raw) else len(text)
        name = str(kind).rsplit(".", 1)[-1]
        if name != "comment":
            out.append((pos, text[pos:end].strip(), name))
    return out


Pattern = tuple[str | None, ...]


def clause(text: str, starts: Sequence[Pattern], *, after: int | None = None, before: int | None = None,
           group: bool = False, stop: tuple[str, ...] = ()) -> str | None:
    """The quoted text of a clause that starts with keywords (``None`` matches any token), or None.

    Only keyword tokens match (not identifiers, strings or comments). With ``before`` the last match
    starting before that position is used, else the first at or after ``after``. The clause runs to the
    end of its parenthesis level (or ``;``), to a keyword of ``stop`` at its own level, or — with
    ``group`` — just after its first parenthesised group.

    Example:
        >>> clause("SELECT COUNT(*) FROM (SELECT * FROM t ORDER BY x) LIMIT 2", [("ORDER", "BY")])
        "'ORDER BY x'"

    """
    tokens = _tokens(text)
    hit = None
    for i in range(len(tokens)):
        if (after is not None and tokens[i][0] < after) or (before is not None and tokens[i][0] >= before):
            continue
        if any(_matches(tokens, i, pattern) for pattern in starts):
            hit = i
            if before is None:
                break
    if hit is None:
        return None
    depth, opened, end = 0, False, len(text)
    for j in range(hit + 1, len(tokens)):
        pos, word, kind = tokens[j]
        if kind == "operator":
            if (word == ";" or word.startswith(")")) and depth == 0:
                end = pos
                break
            depth += word.count("(") - word.count(")")
            opened = opened or "(" in word
            if group and opened and depth == 0:
                end = pos + len(word)
                break
        elif kind == "keyword" and depth == 0 and word.upper() in stop:
            end = pos
            break
    return repr(_short(text[tokens[hit][0]:end].strip()))


def _matches(tokens: list[tuple[int, str, str]], i: int, pattern: Pattern) -> bool:
    if i + len(pattern) > len(tokens) or tokens[i][2] != "keyword":
        return False
    return all(want is None or (tokens[i + k][2] == "keyword" and tokens[i + k][1].upper() == want)
               for k, want in enumerate(pattern))


def _location(text: str, location: Any, position: Any) -> str:
    span = re.match(r"\[(\d+),(\d+)\]", str(location or ""))
    if span:
        a, b = int(span.group(1)), int(span.group(2))
    elif str(position or "").isdigit():
        a = int(str(position))
        b = a + 20
    else:
        return ""
    piece = text[a:b].strip() or text[a:a + 20].strip()
    return f" (at {_short(piece)!r})" if piece else " (at the end of the query)"


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fragment(text: str, node: Json | None) -> str:
    """The query text of a parse-tree node, quoted for an error message (``'...'``)."""
    if node is None:
        return "''"
    loc, size = node.get("query_location"), node.get("query_location_length")
    if isinstance(loc, int) and loc != _NO_LOCATION and isinstance(size, int) and size > 0 and loc < len(text):
        return repr(_short(text[loc:loc + size]))
    try:
        if "class" in node:
            return repr(_short(render_expression(node)))
        if str(node.get("type", "")).endswith("_NODE"):   # a query node: its SQL, never the node's name
            return repr(_short(render(node)))
    except Exception:  # pragma: no cover - rendering is best-effort in an error path
        pass
    return repr(_short(str(node.get("table_name") or "the query")))


def location(node: Any) -> int | None:
    """The smallest query position of anything inside a parse-tree node (None: no position known)."""
    if isinstance(node, list):
        found = [location(x) for x in node]
        return min((f for f in found if f is not None), default=None)
    if not isinstance(node, dict):
        return None
    own = node.get("query_location")
    found = [own if isinstance(own, int) and own != _NO_LOCATION else None, *(location(v) for v in node.values())]
    return min((f for f in found if f is not None), default=None)


SET_OPERATIONS: tuple[Pattern, ...] = (("UNION",), ("INTERSECT",), ("EXCEPT",))
CLAUSE_ENDS = ("HAVING", "WINDOW", "QUALIFY", "ORDER", "LIMIT", "OFFSET", "UNION", "INTERSECT", "EXCEPT")


def modifier_fragment(text: str, node: Json, mod: Json) -> str | None:
    """The quoted text of a SELECT node's modifier (ORDER BY / LIMIT / DISTINCT), or None."""
    kind = mod.get("type")
    if kind == "ORDER_MODIFIER":
        return clause(text, [("ORDER", "BY")], before=location(mod.get("orders")), stop=("LIMIT", "OFFSET"))
    if kind in ("LIMIT_MODIFIER", "LIMIT_PERCENT_MODIFIER"):
        at = location([mod.get("limit"), mod.get("offset")])
        return clause(text, [("LIMIT",), ("OFFSET",)], before=at, stop=("OFFSET",)) if at is not None else None
    if kind == "DISTINCT_MODIFIER":
        return clause(text, [("SELECT", "DISTINCT")], before=location(node.get("select_list")),
                      stop=("FROM",), group=bool(mod.get("distinct_on_targets")))
    return None


def set_operation_fragment(text: str, node: Json) -> str | None:
    """The quoted ``UNION ...`` (INTERSECT, EXCEPT) text of a set-operation node, or None."""
    children = node.get("children") or [node.get("left")]
    return clause(text, SET_OPERATIONS, after=location(children[0]))
