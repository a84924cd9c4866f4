"""Row-level SQL calls whose errors DuckDB's ``TRY(...)`` does not turn into NULL.

``TRY`` catches conversion, range and invalid-input errors, not others, and some DuckDB functions raise
others on some values: ``LIKE ... ESCAPE`` a SyntaxException for a pattern that ends with its escape or an
escape longer than one character, ``timezone``/``make_timestamptz``/``time_bucket`` a NotImplementedException
for an unknown time zone or a period of zero, ``array_length`` the same for a dimension other than 1, the
week-day family (``weekday``, ``isodow`` ...) the same on *every* INTERVAL, ``repeat``/``lpad``/``range`` ...
an OutOfMemoryException for a huge size. A private value (or a ``CASE WHEN <private condition>`` in front
of the call) would then decide whether the query fails after its charge. So, when the query is built (nothing charged):

* the arguments that decide such errors must be literals (:data:`LITERAL`), sizes at most
  :data:`SIZE_LIMIT` (:data:`SIZED`), and :data:`REFUSED` functions are refused (:func:`check_call`);
* every function call and every cast is run once (by :mod:`dpframe.sql.expr`, when it types the expression)
  with each operand that is not a literal replaced by a typical value of its type (:func:`typical_call`), and
  its literal operands as written, on the engine's memory-capped checking connection: a call that fails
  there fails on every row that reaches it, and is refused (``CAST(j AS BIT)`` of a JSON value raises a
  NotImplementedException on every value, ``TRY_CAST`` too);
* a cast to a type naming ``VARIANT`` is refused (:func:`check_type`): a VARIANT holding an empty object fails
  to cast to a STRUCT or a MAP with a TypeMismatchException, on that value only, which no probe on typical
  values can see; and no other construct makes a VARIANT from a column.

The set was found by running every scalar function of the DuckDB catalog under ``TRY`` on adversarial
values of its parameter types (``tests/adversarial/test_review32.py`` keeps the attacks); the slow test
``tests/adversarial/test_sql_catalog_fuzz.py`` reruns that fuzz, lists, maps, structs and generic parameters
included, and checks that every call it finds failing is refused.

Example:
    >>> from dpframe.sql.sandbox import parse_expression
    >>> reason = check_call(parse_expression("repeat(s, n)"))
    >>> reason is not None and "literal" in reason
    True

"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dpframe.sql.aggregates import number
from dpframe.sql.sandbox import Json, parse_expression

SIZE_LIMIT = 10_000
"""The largest literal size of :data:`SIZED` calls (as Polars' ``pad_start``/``zfill`` lengths)."""

REFUSED: Mapping[str, str] = MappingProxyType({
    "variant_bytes_to_variant": "it raises an I/O error on malformed bytes, which TRY does not catch",
    "json_deserialize_sql": "it raises a parser error on some JSON, which TRY does not catch",
    "json_contains": "it recurses over both values: JSON nested about 80,000 levels deep (a 160 KB string) overflows "
                     "the stack and kills the process",
    "json_pretty": "its output grows with the square of a value's nesting depth: a 200 KB value takes gigabytes, an "
                   "out-of-memory error TRY does not catch",
})
JSON_PATHS: frozenset[str] = frozenset({
    "json_extract", "json_extract_string", "json_extract_path", "json_extract_path_text", "->>", "json_exists",
    "json_value", "json_array_length", "json_type", "json_keys",
})
"""Functions whose second argument is a JSON path (or a list of them): it must be a literal without recursive descent
(``$..a``, ``$.**``: every match is a whole subtree, so the output grows with the square of the nesting depth)."""
LITERAL: Mapping[str, tuple[int, ...] | None] = MappingProxyType({
    "like_escape": (1, 2), "not_like_escape": (1, 2), "ilike_escape": (1, 2), "not_ilike_escape": (1, 2),
    "timezone": (0,), "make_timestamptz": (6,), "time_bucket": None, "array_length": (1,),
})
"""Positions of the arguments that must be literals (``None``: every argument but the second, the time)."""
SIZED: Mapping[str, tuple[int, ...] | None] = MappingProxyType({
    "repeat": (1,), "lpad": (1,), "rpad": (1,), "bitstring": (1,), "list_resize": (1,), "array_resize": (1,),
    "range": None, "generate_series": None,
})
"""Positions of size arguments (``None``: every argument, a list's bounds and step)."""
_TYPICAL = ("'2020-01-01 00:00:00'", "'1 day'", "'1'", "'a'", "'[2020-01-01 00:00:00]'", "'[1 day]'", "'[1]'",
            "'[a]'", "'[]'", "'{}'")


REFUSED_TYPES: Mapping[str, str] = MappingProxyType({
    "variant": "a VARIANT holding an empty object fails to cast to a STRUCT or a MAP with an error that neither TRY "
               "nor TRY_CAST catches",
})
"""Type names (lower case) a cast may not name, anywhere in its target type (``STRUCT(a VARIANT)`` too)."""


def operands(node: Json) -> list[Json]:
    """The operands of a function call (its arguments) or of a cast (the value cast)."""
    if node.get("class") == "CAST":
        return [node["child"]]
    return [a["expression"] for a in node.get("arguments") or []]


def _set_operand(node: Json, i: int, value: Json) -> None:
    if node.get("class") == "CAST":
        node["child"] = value
    else:
        node["arguments"][i]["expression"] = value


def check_type(node: Json) -> str | None:
    """Why a type a cast names (a ``TYPE`` node of the parse tree) is refused in a row-level position (None: it is not).

    Example:
        >>> check_type(parse_expression("CAST(x AS STRUCT(a VARIANT))")["type_expr"]["children"][0]) is not None
        True
        >>> check_type(parse_expression("CAST(x AS STRUCT(a INTEGER))")["type_expr"]) is None
        True

    """
    return REFUSED_TYPES.get(str(node.get("type_name", "")).lower())


def is_literal(node: Any) -> bool:
    """Whether a parse-tree expression reads no column (nor lambda parameter): a constant of the query text."""
    if isinstance(node, list):
        return all(is_literal(x) for x in node)
    if not isinstance(node, dict):
        return True
    if node.get("class") in ("COLUMN_REF", "LAMBDA", "LAMBDA_REF", "PARAMETER"):
        return False
    return all(is_literal(v) for v in node.values())


def _integer(node: Json) -> int | None:
    value = number(node)
    return value if isinstance(value, int) else None


def _list_length(args: list[Json], inclusive: bool) -> int | None:
    values = [_integer(a) for a in args]
    if not 1 <= len(values) <= 3 or any(v is None for v in values):
        return None
    ints = [v for v in values if v is not None]
    start, stop, step = (0, ints[0], 1) if len(ints) == 1 else (ints[0], ints[1], ints[2] if len(ints) == 3 else 1)
    if step == 0:
        return None
    return max(0, (stop - start) // step + (1 if inclusive else 0))


def check_call(node: Json) -> str | None:
    """Why the function call ``node`` is refused in a row-level position (None: it is not, by these rules)."""
    name = str(node.get("function_name", "")).lower()
    args = operands(node)
    if name in REFUSED:
        return REFUSED[name]
    if name in LITERAL and not (name == "timezone" and len(args) != 2) and not (name == "make_timestamptz"
                                                                               and len(args) != 7):
        wanted = LITERAL[name]
        positions = [i for i in range(len(args)) if i != 1] if wanted is None else wanted
        if not all(is_literal(args[i]) for i in positions if i < len(args)):
            return ("its pattern, escape, time zone, period or dimension must be a literal: a value read from a row "
                    "could make it raise an error that TRY does not catch")
    if name in JSON_PATHS and len(args) > 1:
        if not is_literal(args[1]):
            return "its JSON path must be a literal: a path read from a row could descend recursively"
        if any(".." in text or "**" in text for text in _strings(args[1])):
            return ("a recursive JSON path ('..' or '**') matches every subtree, so its output grows with the square "
                    "of a value's nesting depth: an out-of-memory error TRY does not catch")
    if name in SIZED:
        if SIZED[name] is None:
            size = _list_length(args, inclusive=name == "generate_series")
        else:
            size = _integer(args[1]) if len(args) > 1 else None
        if size is None or size > SIZE_LIMIT:
            return (f"its size must be a whole-number literal of at most {SIZE_LIMIT:,}: a larger one makes DuckDB "
                    "run out of memory, an error TRY does not catch")
    return None


def _strings(node: Any) -> list[str]:
    """The text of every string literal in a parse tree."""
    if isinstance(node, list):
        return [t for x in node for t in _strings(x)]
    if not isinstance(node, dict):
        return []
    lit = node.get("literal") if node.get("class") == "CONSTANT" else None
    if isinstance(lit, dict) and lit.get("kind") == "STRING":
        return [str(lit.get("text", ""))]
    return [t for v in node.values() for t in _strings(v)]


def calls(node: Any) -> list[Json]:
    """Every function call and cast in a parse tree, outside lambda bodies (their parameters have no value here).

    Example:
        >>> [c["class"] for c in calls(parse_expression("CAST(lower(s) AS JSON) IS NULL"))]
        ['CAST', 'FUNCTION']

    """
    found: list[Json] = []
    if isinstance(node, list):
        for x in node:
            found += calls(x)
    elif isinstance(node, dict) and node.get("class") != "LAMBDA":
        if node.get("class") in ("FUNCTION", "CAST"):
            found.append(node)
        for v in node.values():
            found += calls(v)
    return found


def typical_call(node: Json, types: list[str]) -> Json:
    """``node`` (a call or a cast) with each operand that is not a literal (nor a lambda) replaced by a typical value.

    ``types`` holds the DuckDB type of each operand (:func:`argument_list`).
    """
    out = copy.deepcopy(node)
    for i, (arg, type_) in enumerate(zip(operands(out), types)):
        if not is_literal(arg) and arg.get("class") != "LAMBDA":
            _set_operand(out, i, parse_expression(typical(type_)))
    return out


def try_is_null(node: Json, alias: str = "") -> Json:
    """The parse tree of ``TRY(<node>) IS NULL`` (named ``alias``): a probe that fails only where TRY cannot catch."""
    out = parse_expression("TRY(0) IS NULL")
    out["alias"] = alias
    out["children"][0]["children"] = [node]
    return out


def typical(type_: str) -> str:
    """SQL of a typical value of the DuckDB type ``type_``: a list holds one typical element, never only a NULL.

    A lambda over the list (``list_transform(l, lambda v: weekday(v))``) then runs its body on a value, so
    the probe sees a call in the body that fails on every value of its type.

    Example:
        >>> typical("INTERVAL[]").startswith("[COALESCE(TRY_CAST('2020-01-01 00:00:00' AS INTERVAL)")
        True

    """
    if type_.endswith("[]"):
        return f"[{typical(type_[:-2])}]"
    return f"COALESCE({', '.join(f'TRY_CAST({value} AS {type_})' for value in _TYPICAL)})"


def argument_list(node: Json, prefix: str = "a") -> list[Json]:
    """The operands of a call or cast (a lambda as NULL) named ``<prefix>0``, ...: items to DESCRIBE for their types."""
    return [dict(parse_expression("NULL") if a.get("class") == "LAMBDA" else a, alias=f"{prefix}{i}")
            for i, a in enumerate(operands(node))]
