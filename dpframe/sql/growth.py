"""A bound on how much longer a row-level SQL expression's values can be than its inputs, checked when it is built.

Each DuckDB call's size argument is capped (:data:`~dpframe.sql.uncaught.SIZE_LIMIT`), but nested calls multiply:
``repeat(repeat(s, 10000), 10000)`` is 10⁸ copies of ``s`` on each row that reaches it — behind a private condition
(``CASE WHEN x > 100 THEN ... END``) gigabytes on one unit's rows only, an out-of-memory error ``TRY`` does not catch
(after the charge: an oracle) or the process killed (review 54k). So, as for method chains
(:mod:`dpframe.plan.growth`, whose :data:`~dpframe.plan.growth.MAX_GROWTH` and ``(a, b)`` bounds this reuses), each
SQL expression gets a worst case ``a·L + b`` bytes for every value it computes, result or value on the way, ``L``
the longest value (in text form) of the row it reads: ``repeat`` multiplies, ``lpad``/``rpad`` add their width,
``replace``/``regexp_replace`` multiply by their replacement, case mappings, encodings and JSON escaping widen,
``||``/``concat``/``concat_ws``/``printf``/``format`` add up (a format's widths included), ``list_resize``/``range``
make lists of their size, ``array_to_string``/``list_aggregate(..., 'string_agg', sep)`` put a separator between each
two elements, a lambda runs once per element and ``list_reduce`` may not copy its accumulator. A list has at most
``a·L + b + 1`` elements (``string_split(s, ',')`` of ``L`` commas has ``L + 1`` empty ones). A column a CTE or
subquery computed has that expression's bound (:class:`~dpframe.sql.nodes.SQLProject` keeps it). An expression
whose ``a + b`` exceeds ``MAX_GROWTH`` is refused (:func:`check_sql_growth`, free: it reads no row).

Example:
    >>> from dpframe.sql.sandbox import parse_expression
    >>> sql_growth(parse_expression("repeat(s, 3) || 'ab'"), {})
    (3, 2)
    >>> sql_growth(parse_expression("repeat(s, 3)"), {"s": (2, 1)})
    (6, 3)

"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dpframe.plan.growth import MAX_GROWTH, Growth, insert, too_large
from dpframe.sql.aggregates import number
from dpframe.sql.sandbox import Json, render_expression
from dpframe.sql.uncaught import SIZE_LIMIT, is_literal

_ONE: Growth = (1, 0)
_BOOLEAN: Growth = (0, 5)
_UNBOUNDED: Growth = (MAX_GROWTH + 1, 0)
"""The bound of a value no ``a·L + b`` bounds (a format or a width read from a row, a copied accumulator)."""
_SCALE: Mapping[str, int] = {
    "upper": 3, "lower": 3, "ucase": 3, "lcase": 3,                 # a character's case mapping (U+0390: 2 → 6)
    "nfc_normalize": 11,                                            # NFC of U+FB2C: 3 bytes up to 33
    "hex": 2, "to_hex": 2, "url_encode": 3, "translate": 4,         # a byte as two hex digits, %XX; a character
    "to_base64": 2, "base64": 2,                                    # 4 characters per 3 bytes (and padding)
}
_ESCAPE = frozenset({"to_json", "json_quote", "json_object", "json_array", "array_to_json", "row_to_json",
                     "json_insert", "json_set", "json_replace", "json_serialize_plan", "json_serialize_sql"})
"""Functions writing their arguments as JSON: each byte of a text may become 6 (a control character as an escape
sequence), and a JSON text cast to VARCHAR and written again is escaped again (each quote gets a backslash, each
backslash another: nested calls multiply)."""
_REPEAT = frozenset({"repeat", "list_resize", "array_resize"})
_PAD = frozenset({"lpad", "rpad"})
_LISTS = frozenset({"range", "generate_series"})
_REDUCE = frozenset({"list_reduce", "array_reduce", "reduce"})
_FORMATS = frozenset({"printf", "format"})
_JOINS: Mapping[str, int] = {"array_to_string": 1, "array_to_string_comma_default": 1, "list_string_agg": 1,
                             "list_aggregate": 2, "array_aggregate": 2, "list_aggr": 2, "array_aggr": 2,
                             "aggregate": 2}
"""Functions joining a list's elements (``string_agg``), and the position of their first separator argument."""
_BOOLEAN_CLASSES = frozenset({"COMPARISON", "CONJUNCTION", "BETWEEN"})
_BOOLEAN_OPERATORS = frozenset({"COMPARE_IN", "COMPARE_NOT_IN", "OPERATOR_NOT", "OPERATOR_IS_NULL",
                                "OPERATOR_IS_NOT_NULL"})
_DIGITS = re.compile(r"\d+")


def sql_growth(expr: Json, columns: Mapping[str, Growth]) -> Growth:
    """The bound ``(a, b)`` of a rewritten SQL expression, its plan columns bounded by ``columns`` (others ``(1, 0)``).

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> sql_growth(parse_expression("lpad(s, 10, 'x')"), {})
        (1, 10)

    """
    return _Walk(columns, check=False).size(expr)


def check_sql_growth(expr: Json, columns: Mapping[str, Growth], where: str) -> Growth:
    """``expr``'s bound, or a :class:`~dpframe.errors.PlanError` naming ``sql`` if a value may exceed ``MAX_GROWTH``.

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> check_sql_growth(parse_expression("repeat(repeat(s, 200), 200)"), {}, "WHERE")
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: sql: the string repeat(repeat(s, 200), 200) in WHERE may grow to 40000 bytes...

    """
    try:
        return _Walk(columns, check=True).size(expr)
    except _TooLarge as e:
        raise too_large(f"{_short(render_expression(e.node))} in {where}", e.grown, "sql",
                        "smaller repeat/lpad/rpad sizes and replacements, fewer nested calls and copies (in one "
                        "expression or across CTEs and subqueries)") from None


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


class _TooLarge(Exception):
    def __init__(self, node: Json, grown: Growth) -> None:
        self.node, self.grown = node, grown


def _arguments(node: Json) -> list[Any]:
    return [a.get("expression") if isinstance(a, dict) else a for a in node.get("arguments") or []]


def _integer(node: Any) -> int | None:
    value = number(node) if isinstance(node, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(node: Any) -> str | None:
    literal = node.get("literal") if isinstance(node, dict) and node.get("class") == "CONSTANT" else None
    if isinstance(literal, dict) and literal.get("kind") == "STRING":
        return str(literal.get("text", ""))
    return None


def _lambda_names(node: Json) -> set[str]:
    lhs = node.get("lhs") or {}
    names = [lhs] if lhs.get("class") == "COLUMN_REF" else [
        a.get("expression") for a in lhs.get("arguments") or [] if isinstance(a, dict)]
    return {str(n["column_names"][0]).lower() for n in names
            if isinstance(n, dict) and n.get("class") == "COLUMN_REF" and n.get("column_names")}


class _Walk:
    def __init__(self, columns: Mapping[str, Growth], check: bool, params: Mapping[str, Growth] | None = None) -> None:
        self.columns, self.check, self.params = columns, check, dict(params or {})

    def size(self, node: Any) -> Growth:
        out = self._size(node)
        if self.check and out[0] + out[1] > MAX_GROWTH and isinstance(node, dict) and node.get("class"):
            raise _TooLarge(node, out)
        return out

    def _sum(self, nodes: list[Any]) -> Growth:
        sizes = [self.size(n) for n in nodes]
        return sum(s[0] for s in sizes), sum(s[1] for s in sizes)

    def _children(self, node: Any) -> list[Any]:
        if isinstance(node, list):
            return node
        if not isinstance(node, dict):
            return []
        if node.get("class") is not None:       # an expression: its sub-expressions (not its type)
            return [v for k, v in node.items() if k != "type_expr" and isinstance(v, dict | list)]
        return [v for v in node.values() if isinstance(v, dict | list)]

    def _size(self, node: Any) -> Growth:
        if not isinstance(node, dict) or node.get("class") is None:
            return self._sum(self._children(node))
        cls = node["class"]
        if cls == "COLUMN_REF":
            name = str(node["column_names"][0])
            if name.lower() in self.params:
                return self.params[name.lower()]
            return self.columns.get(name, _ONE)
        if cls == "CONSTANT":
            text = _text(node)
            literal = node.get("literal")
            return 0, len((text if text is not None else str(literal.get("text", "")) if isinstance(literal, dict)
                           else "").encode("utf-8", "surrogatepass"))
        if cls in _BOOLEAN_CLASSES or (cls == "OPERATOR" and node.get("type") in _BOOLEAN_OPERATORS):
            self._sum(self._children(node))
            return _BOOLEAN
        if cls == "CASE":
            for check in node.get("case_checks") or []:
                self.size(check.get("when_expr"))
            sizes = [self.size(c.get("then_expr")) for c in node.get("case_checks") or []]
            sizes.append(self.size(node.get("else_expr")))
            return max(s[0] for s in sizes), max(s[1] for s in sizes)
        if cls == "OPERATOR" and node.get("type") in ("ARRAY_EXTRACT", "STRUCT_EXTRACT", "ARRAY_SLICE"):
            children = node.get("children") or []
            sizes = [self.size(c) for c in children]
            return sizes[0] if sizes else (0, 0)
        if cls == "FUNCTION":
            return self._function(node)
        return self._sum(self._children(node))

    def _function(self, node: Json) -> Growth:
        name = str(node.get("function_name", "")).lower()
        args = _arguments(node)
        lambdas = [a for a in args if isinstance(a, dict) and a.get("class") == "LAMBDA"]
        values = [a for a in args if not (isinstance(a, dict) and a.get("class") == "LAMBDA")]
        sizes = [self.size(a) for a in values]
        first = sizes[0] if sizes else (0, 0)
        total: Growth = (sum(s[0] for s in sizes), sum(s[1] for s in sizes))
        a, b = first
        if lambdas:
            return self._lambda(name, lambdas[0], first, total)
        if name in _SCALE:
            k = _SCALE[name]
            return (a * k, b * k + 4) if name in ("to_base64", "base64") else (a * k, b * k)
        if name in _ESCAPE:                  # quoted, escaped, separated and bracketed
            return 6 * total[0], 6 * total[1] + 4 * len(sizes) + 2
        if name in _REPEAT:
            n = _integer(args[1]) if len(args) > 1 else None
            if n is None:
                return _UNBOUNDED
            n = max(n, 0)
            fill = sizes[2] if name != "repeat" and len(sizes) > 2 else (0, 0)
            if name == "repeat":
                return a * n, b * n
            return (a + fill[0]) * n, (b + fill[1]) * n                       # n elements, each an old one or fill
        if name in _PAD:
            n = _integer(args[1]) if len(args) > 1 else None
            text = _text(args[2]) if len(args) > 2 else None
            width = max((len(c.encode("utf-8", "surrogatepass")) for c in text), default=1) if text is not None else 4
            return _UNBOUNDED if n is None else (a, b + width * max(n, 0))
        if name in _LISTS:
            bounds = [_integer(x) for x in args]
            if not bounds or any(v is None for v in bounds):
                return _UNBOUNDED
            return 0, min(SIZE_LIMIT, max(abs(v) for v in bounds if v is not None) + 1)   # its elements: what a
            # lambda over it multiplies (a list of numbers is its elements' count, not its text form, here)
        if name in _JOINS and sizes:           # a separator between each two of at most a·L + b + 1 elements
            separators = sizes[_JOINS[name]:]
            sep = (sum(x[0] for x in separators), sum(x[1] for x in separators) + 1)   # (list_string_agg's ',')
            if sep[0]:
                return _UNBOUNDED                                             # a separator read from a row
            return a * (1 + sep[1]), b * (1 + sep[1]) + sep[1]
        if name == "concat_ws" and sizes:
            return total[0] + a * max(len(sizes) - 2, 0), total[1] + b * max(len(sizes) - 2, 0)
        if name in ("replace", "regexp_replace") and len(args) >= 3:
            if not is_literal(args[2]):
                return _UNBOUNDED                                             # a copy of a row's value per match
            value = sizes[2][1]
            pattern = _text(args[1]) if name == "replace" else None
            if pattern:                                                       # each match of ≥ pattern bytes
                times = max(1, -(-value // len(pattern.encode("utf-8", "surrogatepass"))))
                return a * times, b * times
            return insert(first, value)                                       # \0-style references to the match
        if name in _FORMATS and args:
            text = _text(args[0])
            if text is None:
                return _UNBOUNDED                                             # widths read from a row
            widths = sum(int(d) for d in _DIGITS.findall(text))
            return total[0], total[1] + widths
        if name == "bar":
            bars = _integer(args[3]) if len(args) > 3 else 80
            return _UNBOUNDED if bars is None else (0, 3 * max(bars, 0) + 3)   # 3-byte block characters
        return total

    def _lambda(self, name: str, node: Json, items: Growth, total: Growth) -> Growth:
        """A call with a lambda: the body once per element of its list (at most ``items`` elements).

        Each parameter is bounded by the whole list's bound; a reduction may not copy its accumulator (it would
        double each step: ``list_reduce(l, lambda acc, v: acc || acc)``).
        """
        names = sorted(_lambda_names(node))
        body = node.get("expr")
        if name in _REDUCE and names:
            acc = _Walk(self.columns, False, {**self.params, **{n: (0, 0) for n in names}, names[0]: (1, 0)})
            if acc.size(body)[0] > 1:
                return _UNBOUNDED
        inner = _Walk(self.columns, self.check, {**self.params, **{n: _ONE for n in names}})
        p, q = inner.size(body)         # per element of length ℓ: p·ℓ + q, over at most a·L + b + 1 elements
        return max(total[0], items[0] * (p + q)), max(total[1], items[1] * (p + q) + q)


def sql_column_growth(items: list[tuple[str, Json]], columns: Mapping[str, Growth], where: str) -> dict[str, Growth]:
    """The bound of each projected column (those other than ``(1, 0)``), each refused as :func:`check_sql_growth`.

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> sql_column_growth([("r", parse_expression("repeat(s, 3)")), ("s", parse_expression("s"))], {}, "SELECT")
        {'r': (3, 0)}

    """
    out = {}
    for name, expr in items:
        size = check_sql_growth(expr, columns, where)
        if size != _ONE:
            out[name] = size
    return out

