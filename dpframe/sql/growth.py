"""A bound on how much longer a row-level SQL expression's values can be than its inputs, checked when it is built.

Each DuckDB call's size argument is capped (:data:`~dpframe.sql.uncaught.SIZE_LIMIT`), but nested calls multiply:
``repeat(repeat(s, 10000), 10000)`` is 10⁸ copies of ``s`` on each row that reaches it — behind a private condition
(``CASE WHEN x > 100 THEN ... END``) gigabytes on one unit's rows only, an out-of-memory error ``TRY`` does not catch
(after the charge: an oracle) or the process killed (review 54k). So, as for method chains (:mod:`dpframe.plan.growth`,
whose :data:`~dpframe.plan.growth.MAX_GROWTH` and ``(a, b)`` bounds this reuses), each SQL expression gets a worst case
``a·L + b`` bytes for every value it computes, result or value on the way, in text form (a list, struct, map, BLOB or
BIT as DuckDB writes it when cast to VARCHAR), ``L`` the longest value (in text form) of the row it reads: ``repeat``
multiplies, ``lpad``/``rpad`` add their width, ``replace``/``regexp_replace`` multiply by their replacement, case
mappings, encodings (``bin``: 8 digits a byte; a BLOB: 4 characters a byte) and JSON escaping widen,
``||``/``concat``/``concat_ws``/``printf``/``format`` add up (a format's widths included, an argument it reads by
position once per placeholder), ``list_resize``/``range`` make lists of their size, ``array_to_string``/``concat_ws``/
``list_aggregate(..., 'string_agg', sep)`` put a separator between each two elements. A list, struct or map quotes and
escapes what it is built from, with a separator per element (:data:`_NESTED`): a text split into one element per byte,
or nested in a list and cast to VARCHAR again, multiplies. A lambda runs once per element, its parameters each bounded
by the element (a lambda whose body reads anything else, another lambda's parameter, copies it once per element: ``L²``,
refused), and ``list_reduce`` may not copy its accumulator. A list has at most ``a·L + b + 1`` elements. A width, a size
or a format read from a row is a size decided by a value, which no ``a·L + b`` bounds: refused. A column a CTE or
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
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from dpframe.plan.growth import MAX_GROWTH, Growth, insert, too_large
from dpframe.sql.aggregates import number
from dpframe.sql.sandbox import Json, render_expression, return_types
from dpframe.sql.uncaught import JSON_PATHS, SIZE_LIMIT, is_literal

_ONE: Growth = (1, 0)
_BOOLEAN: Growth = (0, 5)
_INDEX: Growth = (0, 20)
"""A lambda's index parameter (``lambda v, i: ...``): a whole number's text, however short the element."""
_UNBOUNDED: Growth = (MAX_GROWTH + 1, 0)
"""The bound of a value no ``a·L + b`` bounds (a format or a width read from a row, a copied accumulator)."""
_SCALE: Mapping[str, int] = {
    "upper": 3, "lower": 3, "ucase": 3, "lcase": 3,                 # a character's case mapping (U+0390: 2 → 6)
    "nfc_normalize": 11,                                            # NFC of U+FB2C: 3 bytes up to 33
    "hex": 2, "to_hex": 2, "url_encode": 3, "translate": 4,         # a byte as two hex digits, %XX; a character
    "to_base64": 2, "base64": 2,                                    # 4 characters per 3 bytes (and padding)
    "bin": 8, "to_binary": 8,                                       # a byte as eight binary digits
    "encode": 4, "from_base64": 3, "unhex": 2, "from_hex": 2,       # a BLOB, written \xNN a byte
    "json_structure": 9,                                            # a one-digit number written "UBIGINT"
    "icu_sort_key": 32,                                             # U+FDFA (3 bytes): 46 key bytes, in hex
    "regexp_escape": 2,                                             # a backslash before each byte
}
_CONSTANT: Mapping[str, int] = {"icu_sort_key": 16, "format_bytes": 16, "formatreadablesize": 16,
                                "formatreadabledecimalsize": 16, "version": 64, "hex": 32, "to_hex": 32, "bin": 128,
                                "to_binary": 128, "-": 1, "subtract": 1}
"""Bytes a call may write whatever its arguments' lengths (a key's terminator, a unit's name, the engine's version, a
negative HUGEINT's 32 hex or 128 binary digits: ``hex(-1)`` of two bytes is 16 digits; a minus sign)."""
_WIDTHS: Mapping[str, int] = {
    **dict.fromkeys(("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                     "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL", "DATE", "TIME", "TIME_NS", "TIMESTAMP",
                     "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "TIMESTAMP WITH TIME ZONE",
                     "TIME WITH TIME ZONE", "UUID", "INT1", "INT2", "INT4", "INT8", "INT", "INT128", "SIGNED",
                     "LONG", "SHORT", "REAL", "FLOAT4", "FLOAT8", "NUMERIC", "DATETIME", "TIMESTAMPTZ", "TIMETZ"),
                    48),
    "BOOLEAN": 5, "BOOL": 5, "LOGICAL": 5, "INTERVAL": 96,
}
"""Types whose every value's text is at most this long, whatever it was computed from (a 38-digit DECIMAL and its
sign and point, a timestamp of year 294247 BC, an interval of every part at its extreme)."""
_HASHES: Mapping[str, int] = {"md5": 32, "sha1": 40, "sha256": 64}
_ESCAPE = frozenset({"to_json", "json_quote", "json_object", "json_array", "array_to_json", "row_to_json",
                     "json_insert", "json_set", "json_replace", "json_serialize_plan", "json_serialize_sql"})
"""Functions writing their arguments as JSON: each byte of a text may become 6 (a control character as an escape
sequence), and a JSON text cast to VARCHAR and written again is escaped again (each quote gets a backslash, each
backslash another: nested calls multiply)."""
_REPEAT = frozenset({"repeat", "list_resize", "array_resize"})
_PAD = frozenset({"lpad", "rpad"})
_LISTS = frozenset({"range", "generate_series"})
_REDUCE = frozenset({"list_reduce", "array_reduce", "reduce"})
_TRANSFORM = frozenset({"list_transform", "array_transform", "list_apply", "array_apply", "apply"})
_FORMATS = frozenset({"printf", "format"})
_JOINS: Mapping[str, int] = {"array_to_string": 1, "array_to_string_comma_default": 1, "list_string_agg": 1}
"""Functions joining a list's elements (``string_agg``), and the position of their first separator argument."""
_AGGREGATES = frozenset({"list_aggregate", "array_aggregate", "list_aggr", "array_aggr", "aggregate"})
_STRING_AGG = frozenset({"string_agg", "group_concat", "listagg"})
_NESTED = 8
"""A list, struct or map's text form per byte of what it is built from, and per element: each element quoted, its
quotes and backslashes escaped (a quote is written as four bytes), separated by a comma and a space, a NULL written
``NULL``: a text split into one element per byte (or parsed as a list) is at most 8 times as long in text form."""
_SPLITS = frozenset({"string_split", "str_split", "string_to_array", "split", "string_split_regex",
                     "str_split_regex", "regexp_split_to_array", "regexp_extract_all"})
_BUILDS: Mapping[str, int] = {
    **dict.fromkeys(("list_value", "array_value", "list_pack", "struct_pack", "row", "union_value", "struct_insert",
                     "struct_update", "struct_concat", "map", "map_from_entries", "map_keys", "map_values",
                     "list_zip", "array_zip", "unpivot_list", "list_grade_up", "array_grade_up", "grade_up",
                     "from_json", "from_json_strict", "json_transform", "json_transform_strict", "parse_path",
                     "json_keys", "create_sort_key", "remap_struct", "list_where", "array_where"), _NESTED),
    "map_entries": 12,                                              # each entry a struct: {'key': k, 'value': v}
}
"""Calls writing their arguments (or their elements) again inside a list, struct or map, quoted and escaped once
more, with a separator (and a key) per element: at most this many times their arguments' text forms."""
_CAST: Mapping[str, int] = {"list": _NESTED, "array": _NESTED, "struct": _NESTED, "map": _NESTED, "union": _NESTED,
                            "blob": 4, "bytea": 4, "binary": 4, "varbinary": 4, "bit": 8, "bitstring": 8,
                            "json": 6}
"""A cast's factor for (each part of) its target type: a text parsed as a list or struct (``'[,,,]'::VARCHAR[]``), a
BLOB's four characters a byte, a BIT's eight digits a byte, JSON's escapes."""
_BOOLEAN_CLASSES = frozenset({"COMPARISON", "CONJUNCTION", "BETWEEN"})
_BOOLEAN_OPERATORS = frozenset({"COMPARE_IN", "COMPARE_NOT_IN", "OPERATOR_NOT", "OPERATOR_IS_NULL",
                                "OPERATOR_IS_NOT_NULL"})
_DIGITS = re.compile(r"\d+")
_POSITIONAL = re.compile(r"\{\s*\d|%\d+\$")
"""A format reading an argument by its position (``{0}``, ``%1$s``): it may write that argument once per placeholder."""
_VALUE_WIDTH = re.compile(r"%[^%a-zA-Z]*\*|\{[^{}]*\{")
"""A width or precision read from an argument (``%*s``, ``{:>{}}``): a size decided by a value."""


@lru_cache(maxsize=1)
def fixed_widths() -> Mapping[str, int]:
    """``{function name: the longest text of its result}``, for calls whose result's length no argument decides.

    The scalar functions all of whose overloads return a type of :data:`_WIDTHS` (``length``, ``make_timestamp``,
    ``to_years``, ``hash`` ...), and the hashes.

    Example:
        >>> fixed_widths()["to_years"], fixed_widths()["md5"], "repeat" in fixed_widths()
        (96, 32, False)

    """
    out = dict(_HASHES)
    for name, types in return_types().items():
        widths = [_WIDTHS.get(str(t).split("(")[0].upper()) for t in types]
        if widths and all(w is not None for w in widths):
            out[name] = max(w for w in widths if w is not None)
    return MappingProxyType(out)


def sql_growth(expr: Json, columns: Mapping[str, Growth], nested: frozenset[str] = frozenset()) -> Growth:
    """The bound ``(a, b)`` of a rewritten SQL expression, its plan columns bounded by ``columns`` (others ``(1, 0)``).

    ``nested`` names the columns holding lists, structs or maps (``concat_ws`` joins their elements).

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> sql_growth(parse_expression("lpad(s, 10, 'x')"), {})
        (1, 10)

    """
    return _Walk(columns, False, {}, nested).size(expr)


def check_sql_growth(expr: Json, columns: Mapping[str, Growth], where: str,
                     nested: frozenset[str] = frozenset()) -> Growth:
    """``expr``'s bound, or a :class:`~dpframe.errors.PlanError` naming ``sql`` if a value may exceed ``MAX_GROWTH``.

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> check_sql_growth(parse_expression("repeat(repeat(s, 200), 200)"), {}, "WHERE")
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: sql: the string repeat(repeat(s, 200), 200) in WHERE may grow to 40000 bytes...

    """
    try:
        return _Walk(columns, True, {}, nested).size(expr)
    except _TooLarge as e:
        raise too_large(f"{_short(render_expression(e.node))} in {where}", e.grown, "sql",
                        "smaller repeat/lpad/rpad sizes and replacements, literal widths and separators, fewer "
                        "nested calls, copies and lists (in one expression or across CTEs and subqueries)") from None


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


class _TooLarge(Exception):
    def __init__(self, node: Json, grown: Growth) -> None:
        self.node, self.grown = node, grown


def _arguments(node: Json) -> list[Any]:
    return [a.get("expression") if isinstance(a, dict) else a for a in node.get("arguments") or []]


def _keys(node: Json) -> int:
    """Bytes of the field names a call's arguments carry (``struct_pack(k := v)``, ``{'k': v}``)."""
    return sum(len(str(a.get("name") or "").encode("utf-8", "surrogatepass")) for a in node.get("arguments") or []
               if isinstance(a, dict))


def _integer(node: Any) -> int | None:
    value = number(node) if isinstance(node, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(node: Any) -> str | None:
    literal = node.get("literal") if isinstance(node, dict) and node.get("class") == "CONSTANT" else None
    if isinstance(literal, dict) and literal.get("kind") == "STRING":
        return str(literal.get("text", ""))
    return None


def _lambda_names(node: Json) -> list[str]:
    """A lambda's parameter names, in order (lower case)."""
    lhs = node.get("lhs") or {}
    names = [lhs] if lhs.get("class") == "COLUMN_REF" else [
        a.get("expression") for a in lhs.get("arguments") or [] if isinstance(a, dict)]
    return [str(n["column_names"][0]).lower() for n in names
            if isinstance(n, dict) and n.get("class") == "COLUMN_REF" and n.get("column_names")]


def _reads_outside(node: Any, bound: frozenset[str]) -> bool:
    """Whether ``node`` reads a name outside ``bound`` (a lambda's own parameters, and those of lambdas inside it)."""
    if isinstance(node, list):
        return any(_reads_outside(x, bound) for x in node)
    if not isinstance(node, dict):
        return False
    if node.get("class") == "COLUMN_REF":
        return str((node.get("column_names") or [""])[-1]).lower() not in bound
    if node.get("class") == "LAMBDA":
        return _reads_outside(node.get("expr"), bound | frozenset(_lambda_names(node)))
    return any(_reads_outside(v, bound) for k, v in node.items() if k != "type_expr")


def _cast_factor(node: Any) -> int:
    """The product of :data:`_CAST`'s factors over a cast's target type and the types inside it."""
    if isinstance(node, list):
        out = 1
        for x in node:
            out *= _cast_factor(x)
        return out
    if not isinstance(node, dict):
        return 1
    return _CAST.get(str(node.get("type_name", "")).lower(), 1) * _cast_factor(node.get("children") or [])


def _product(n: Growth, each: Growth) -> Growth | None:
    """A bound of ``n`` times ``each`` (both ``a·L + b``), or None where both grow with ``L`` (``L²``)."""
    if n[0] and each[0]:
        return None
    return n[0] * each[1] + n[1] * each[0], n[1] * each[1]


class _Walk:
    def __init__(self, columns: Mapping[str, Growth], check: bool, params: Mapping[str, Growth],
                 nested: frozenset[str], outside: dict[int, bool] | None = None) -> None:
        self.columns, self.check, self.params, self.nested = columns, check, dict(params), nested
        self.outside = {} if outside is None else outside   # each lambda's _reads_outside, by id (one walk's tree)

    def _with(self, check: bool, params: Mapping[str, Growth]) -> _Walk:
        """A walk of a lambda's body: its parameters bounded by ``params``, outer ones as they are here."""
        return _Walk(self.columns, check, {**self.params, **params}, self.nested, self.outside)

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
        if cls == "CAST":
            a, b = self.size(node.get("child"))
            target = node.get("type_expr") or {}
            width = _WIDTHS.get(str(target.get("type_name", "")).upper()) if not target.get("children") else None
            if width is not None:
                return 0, width                                   # a number, a time, a UUID ...: its text's width
            k = _cast_factor(target)
            return a * k, b * k
        if cls == "OPERATOR" and node.get("type") == "ARRAY_CONSTRUCTOR":          # ARRAY[...]: as list_value
            items = [self.size(c) for c in node.get("children") or []]
            return (_NESTED * sum(x[0] for x in items),
                    _NESTED * sum(x[1] for x in items) + _NESTED * len(items) + 2)
        if cls == "OPERATOR" and node.get("type") in ("ARRAY_EXTRACT", "STRUCT_EXTRACT", "ARRAY_SLICE"):
            children = node.get("children") or []
            sizes = [self.size(c) for c in children]
            return sizes[0] if sizes else (0, 0)
        if cls == "FUNCTION":
            return self._function(node)
        if cls == "LAMBDA":                     # an arrow outside a list function: DuckDB's json_extract(a, b)
            return self._function({"function_name": "json_extract", "arguments": [
                {"expression": node.get("lhs")}, {"expression": node.get("expr")}]})
        return self._sum(self._children(node))

    def _scalar(self, node: Any) -> bool:
        """Whether ``node`` is surely one value rather than a list (whose elements ``concat_ws`` would join)."""
        if not isinstance(node, dict):
            return True
        if node.get("class") == "CONSTANT":
            return True
        if node.get("class") == "COLUMN_REF":
            name = str(node["column_names"][0])
            return name.lower() not in self.params and name not in self.nested
        return node.get("class") == "CAST" and _cast_factor(node.get("type_expr")) == 1

    def _function(self, node: Json) -> Growth:
        name = str(node.get("function_name", "")).lower()
        args = _arguments(node)
        lambdas = [a for a in args if isinstance(a, dict) and a.get("class") == "LAMBDA"]
        values = [a for a in args if not (isinstance(a, dict) and a.get("class") == "LAMBDA")]
        sizes = [self.size(a) for a in values]
        first = sizes[0] if sizes else (0, 0)
        total: Growth = (sum(s[0] for s in sizes), sum(s[1] for s in sizes))
        a, b = first
        extra = _CONSTANT.get(name, 0)
        if lambdas:
            return self._lambda(name, lambdas[0], sizes, total)
        width = fixed_widths().get(name)
        if width is not None:
            return 0, width
        if name in _SCALE:
            k = _SCALE[name]
            return (a * k, b * k + 4 + extra) if name in ("to_base64", "base64") else (a * k, b * k + extra)
        if name in _ESCAPE:                  # quoted, escaped, separated and bracketed
            return 6 * total[0], 6 * total[1] + 4 * len(sizes) + 2
        if name in _SPLITS:                  # at most L + 1 pieces of the text, each quoted, escaped and separated
            return _NESTED * a, _NESTED * b + _NESTED
        if name in _BUILDS:
            k = _BUILDS[name]
            return k * total[0], k * total[1] + k * len(sizes) + 2 * _keys(node) + 2
        if name in _REPEAT:
            n = _integer(args[1]) if len(args) > 1 else None
            if n is None:
                return _UNBOUNDED
            n = max(n, 0)
            if name == "repeat":
                return a * n, b * n
            fill = sizes[2] if len(sizes) > 2 else (0, 0)          # n elements, each an old one, the fill or NULL
            return (a + 2 * fill[0]) * n, (b + 2 * fill[1] + _NESTED) * n + 2
        if name in _PAD:
            n = _integer(args[1]) if len(args) > 1 else None
            text = _text(args[2]) if len(args) > 2 else None
            width = max((len(c.encode("utf-8", "surrogatepass")) for c in text), default=1) if text is not None else 4
            return _UNBOUNDED if n is None else (a, b + width * max(n, 0))
        if name == "bitstring":
            n = _integer(args[1]) if len(args) > 1 else None
            return _UNBOUNDED if n is None else (a, b + max(n, 0))
        if name in _LISTS:
            return self._range(args)
        if name in ("list_select", "array_select") and len(sizes) > 1:
            picked = _product((sizes[1][0], sizes[1][1] + 1), (2 * a, 2 * b + _NESTED))   # an element per index
            return _UNBOUNDED if picked is None else (picked[0], picked[1] + 2)
        if name in _AGGREGATES and sizes:
            function = _text(args[1]) if len(args) > 1 else None
            if function is None:
                return _UNBOUNDED
            if function.lower() not in _STRING_AGG:
                return _NESTED * a, _NESTED * b + _NESTED               # (a list, a histogram's map ...)
            return self._join(first, sizes[2:])
        if name in _JOINS and sizes:           # a separator between each two of at most a·L + b + 1 elements
            return self._join(first, sizes[_JOINS[name]:])
        if name == "concat_ws" and sizes:
            return self._concat_ws(values, sizes, total)
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
            return self._format(name, _text(args[0]), total)
        if name == "strftime" and len(args) == 2:
            form = _text(args[1]) if _text(args[1]) is not None else _text(args[0])
            if form is None:                  # a format read from a row: its specifiers' expansions
                return 16 * total[0], 16 * total[1]
            return 0, 16 * len(form.encode("utf-8", "surrogatepass"))  # %c: 19 bytes, %Z: a zone's name, per 2
        if (name in JSON_PATHS or name == "json_extract") and len(args) > 1 and self._many(args[1]):
            k = self._count(args[1], sizes[1])      # a list of paths: the value (or a part of it) once per path
            return 2 * k * a + total[0], k * (2 * b + _NESTED) + total[1] + 2
        if name == "regexp_extract" and len(args) > 2 and self._many(args[2]):
            k = self._count(args[2], sizes[2])      # a struct of the named groups: each may be the whole match
            return 2 * k * a + total[0], k * (2 * b + _NESTED + 2) + total[1] + 2
        if name == "hive_partition_component":
            return 3 * total[0], 3 * total[1] + 2                        # key=value/, each byte %XX at most
        if name == "to_base":
            return 0, 64                                               # a BIGINT's binary digits at most
        if name == "bar":
            bars = _integer(args[3]) if len(args) > 3 else 80
            return _UNBOUNDED if bars is None else (0, 3 * max(bars, 0) + 3)   # 3-byte block characters
        return total[0], total[1] + extra

    @staticmethod
    def _many(node: Any) -> bool:
        """Whether ``node`` may be a list (of JSON paths, of group names), not one literal string or number."""
        return not (isinstance(node, dict) and node.get("class") == "CONSTANT")

    @staticmethod
    def _count(node: Any, size: Growth) -> int:
        """How many elements the list ``node`` (of bound ``size``, a literal's) has at most."""
        if isinstance(node, dict) and (node.get("function_name") in ("list_value", "array_value")
                                       or node.get("type") == "ARRAY_CONSTRUCTOR"):
            return len(node.get("arguments") or node.get("children") or [])
        return size[1] + 1                          # (each element at least a byte of its text)

    def _range(self, args: list[Any]) -> Growth:
        """``range``/``generate_series`` of literal bounds: each number's text and a separator."""
        bounds = [_integer(x) for x in args]
        ints = [v for v in bounds if v is not None]
        if not ints or len(ints) != len(bounds) or len(ints) > 3:
            return _UNBOUNDED
        start, stop, step = (0, ints[0], 1) if len(ints) == 1 else (ints[0], ints[1], ints[2] if len(ints) == 3
                                                                       else 1)
        if step == 0:
            return _UNBOUNDED
        count = min(SIZE_LIMIT + 1, max(0, (stop - start) // step + 1))
        digits = max(len(str(v)) for v in ints)
        return 0, count * (digits + 2) + 2

    def _join(self, items: Growth, separators: list[Growth]) -> Growth:
        """A list's elements joined, a separator (``','`` if none given) between each two."""
        sep = (sum(x[0] for x in separators), sum(x[1] for x in separators) + (0 if separators else 1))
        if sep[0]:
            return _UNBOUNDED                                                 # a separator read from a row
        a, b = items
        return a * (1 + sep[1]), b * (1 + sep[1]) + sep[1]

    def _concat_ws(self, values: list[Any], sizes: list[Growth], total: Growth) -> Growth:
        """``concat_ws(sep, ...)``: a separator between each two values, and each two elements of a list argument."""
        count = (0, 0)
        for value, (a, b) in zip(values[1:], sizes[1:]):
            each = (0, 1) if self._scalar(value) else (a, b + 1)
            count = (count[0] + each[0], count[1] + each[1])
        seps = _product(count, sizes[0])
        if seps is None:
            return _UNBOUNDED                      # a separator read from a row between a list's elements: L²
        return total[0] + seps[0], total[1] + seps[1]

    def _format(self, name: str, form: str | None, total: Growth) -> Growth:
        """``printf``/``format``: their arguments, the format's text and widths, an argument by position per use."""
        if form is None:
            return _UNBOUNDED                                                 # widths read from a row
        plain = form.replace("%%", "").replace("{{", "").replace("}}", "")
        if _VALUE_WIDTH.search(plain):
            return _UNBOUNDED                                                 # a width read from an argument
        widths = sum(int(d) for d in _DIGITS.findall(form))
        uses = max(1, plain.count("{" if name == "format" else "%")) if _POSITIONAL.search(plain) else 1
        return uses * total[0], uses * total[1] + widths

    def _lambda(self, name: str, node: Json, sizes: list[Growth], total: Growth) -> Growth:
        """A call with a lambda: the body once per element of its list (at most ``a·L + b + 1`` elements).

        Each parameter is bounded by one element (``invoke``: by its argument; an index by a number's text); the
        body's values summed over the elements are at most ``p·Σℓ + n·q``, ``Σℓ`` the list's bound. A body that
        reads anything else (another lambda's parameter) copies it once per element: with a list growing with
        ``L``, ``L²``. A reduction may not copy its accumulator (it would double each step:
        ``list_reduce(l, lambda acc, v: acc || acc)``).
        """
        names = _lambda_names(node)
        body = node.get("expr")
        if name == "invoke":
            given = {n: sizes[i] if i < len(sizes) else _ONE for i, n in enumerate(names)}
            return self._with(self.check, given).size(body)
        a, b = sizes[0] if sizes else (0, 0)
        reduce = name in _REDUCE
        roles = ["acc", "element", "index"] if reduce else ["element", "index"]
        role = dict(zip(names, roles))
        unit = {n: _INDEX if r == "index" else _ONE for n, r in role.items()}
        if reduce and names:
            if self._with(False, {**{n: (0, 0) for n in names}, names[0]: _ONE}).size(body)[0] > 1:
                return _UNBOUNDED
        p, q = self._with(False, unit).size(body)
        if id(node) not in self.outside:
            self.outside[id(node)] = _reads_outside(body, frozenset(names))
        if self.outside[id(node)]:
            if a:
                return _UNBOUNDED                  # a value from outside the list, once per element: L²
            grown: Growth = ((b + 1) * p, p * b + (b + 1) * q)    # each element also ≤ p·L + q
        else:
            grown = (a * (p + q), b * (p + q) + q)                  # p·Σℓ + n·q, n ≤ a·L + b + 1
        if name in _TRANSFORM:                                       # a list of them: quoted, escaped, separated
            result: Growth = (2 * grown[0] + _NESTED * a, 2 * grown[1] + _NESTED * (b + 1) + 2)
        elif reduce:
            result = (total[0] + grown[0], total[1] + grown[1])      # the initial value and each step's addition
        else:
            result = (max(total[0], grown[0]), max(total[1], grown[1]))
        if self.check:                     # each value in the body, its parameters as large as the list allows
            each = {n: _INDEX if r == "index" else result if r == "acc" else (a, b) for n, r in role.items()}
            self._with(True, each).size(body)
        return result


def sql_column_growth(items: list[tuple[str, Json]], columns: Mapping[str, Growth], where: str,
                      nested: frozenset[str] = frozenset()) -> dict[str, Growth]:
    """The bound of each projected column (those other than ``(1, 0)``), each refused as :func:`check_sql_growth`.

    Example:
        >>> from dpframe.sql.sandbox import parse_expression
        >>> sql_column_growth([("r", parse_expression("repeat(s, 3)")), ("s", parse_expression("s"))], {}, "SELECT")
        {'r': (3, 0)}

    """
    out = {}
    for name, expr in items:
        size = check_sql_growth(expr, columns, where, nested)
        if size != _ONE:
            out[name] = size
    return out
