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
from dataclasses import dataclass
from typing import Any

import duckdb

from dpframe.errors import PlanError
from dpframe.sql.sandbox import Json, render_expression, serialize

SUPPORTED = ("supported: one SELECT (optionally after EXPLAIN, with WITH ... CTEs) over registered tables with "
             "COUNT/SUM/AVG/VAR/STDDEV/MEDIAN/QUANTILE_CONT aggregates, WHERE, GROUP BY, HAVING, ORDER BY, LIMIT; "
             "see docs/sql.md")
_NO_LOCATION = 2**64 - 1


@dataclass(frozen=True)
class Parsed:
    """A parsed statement: the SELECT's query node, the SQL text it came from, and whether it was EXPLAIN."""

    text: str
    node: Json
    explain: bool


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


def parse(text: object) -> Parsed:
    """Parse one DuckDB-dialect SELECT statement (optionally prefixed by ``EXPLAIN``)."""
    if not isinstance(text, str) or not text.strip():
        raise PlanError(f"expected a SQL string, got {text!r}", argument="sql",
                        fix="pass a query such as \"SELECT COUNT(*) FROM visits\"")
    body, explain = _strip_explain(text)
    doc = serialize(body)
    if doc.get("error"):
        message = str(doc.get("error_message", "cannot parse the query")).splitlines()[0]
        if doc.get("error_type") == "parser":
            at = _location(body, doc.get("location"), doc.get("position"))
            raise PlanError(f"{message}{at}", argument="sql", fix="correct the SQL syntax (DuckDB dialect)")
        first = re.match(r"\s*(\w+)", body)
        word = first.group(1).upper() if first else body.strip()[:20]
        raise PlanError(f"only SELECT queries are supported, got a {word} statement", argument="sql",
                        fix=SUPPORTED)
    statements = doc["statements"]
    if len(statements) != 1:
        raise PlanError(f"expected one statement, got {len(statements)}", argument="sql",
                        fix="send one SELECT per call (remove the ';'-separated extra statements)")
    return Parsed(body, statements[0]["node"], explain)


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
    if "class" in node:
        try:
            return repr(_short(render_expression(node)))
        except Exception:  # pragma: no cover - rendering is best-effort in an error path
            pass
    return repr(_short(str(node.get("table_name") or node.get("type") or "?")))
