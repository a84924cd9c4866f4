"""Checks that a Polars expression is row-level: each output row depends on one input row only.

Filters and derived columns before aggregation must be *stable*: adding or removing one privacy unit may
change only that unit's rows. They must also never fail because of a private value: an error raised by
the engine mid-query would itself reveal something about the data, outside the DP guarantee. So strict
casts and parsers (``strict=True``), ``ambiguous="raise"``, out-of-bounds list access and JSON/decimal
parsing are refused too, with the non-failing alternative as the fix. Aggregations, windows, sorting,
shifting, ranking, sampling and Python UDFs mix rows together and are refused with a
:class:`~dpframe.errors.PlanError` that names the operation. The check walks the expression's serialized
tree against an allowlist, so an operation Polars adds in the future is refused until someone reviews
it.

Example:
    >>> import polars as pl
    >>> check_row_level(pl.col("age") >= 18, "predicate")
    >>> check_row_level(pl.col("age") > pl.col("age").mean(), "predicate")
    Traceback (most recent call last):
    ...
    dpframe.errors.PlanError: predicate: uses 'Agg:Mean', which combines several rows ...

"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from dpframe.errors import PlanError

_NODES = {"Column", "Literal", "BinaryExpr", "Alias", "Cast", "Ternary", "Function", "KeepName",
          "RenameAlias", "Selector", "Field", "Nth", "Columns"}
_FUNCTIONS = {"Abs", "Log", "Log1p", "Exp", "Pow", "Sign", "Clip", "Round", "RoundSF", "Floor", "Ceil",
              "Trigonometry", "Atan2", "Boolean", "StringExpr", "TemporalExpr", "FillNull", "FillNan",
              "Coalesce", "MaxHorizontal", "MinHorizontal", "SumHorizontal", "MeanHorizontal", "Hash",
              "AsStruct", "StructExpr", "Replace", "Negate",
              "Cbrt", "ToPhysical", "Reinterpret", "IsIn", "Not"}
_SUB_DENIED = {"IsDuplicated", "IsUnique", "IsFirstDistinct", "IsLastDistinct", "Any", "All",
               "ConcatVertical", "Join", "JsonDecode", "JsonPathMatch", "ToDecimal"}
_FAILS = "can fail on some private values, and a failure would reveal them"


def _may_raise(payload: Any) -> bool:
    """Whether a function's options ask it to raise on bad data (strict=True, ambiguous='raise').

    (Parsing to a Date carries an ``ambiguous='raise'`` literal that can never fire: no time zone.)
    """
    if isinstance(payload, dict):
        if payload.get("strict") is True:
            return True
        return any(_may_raise(v) for v in payload.values())
    if isinstance(payload, list):
        return any(_may_raise(v) for v in payload)
    return payload in ("raise", "Raise")


def _variant(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        return str(next(iter(value)))
    return None


def _is_node(value: Any) -> bool:
    """Expression nodes serialize as ``{"CamelCaseVariant": payload}``; struct fields are snake_case."""
    return isinstance(value, dict) and len(value) == 1 and str(next(iter(value)))[:1].isupper()


def _walk(node: Any, bad: list[str]) -> None:
    """Check one expression node and everything below it."""
    if isinstance(node, str):
        if node == "Len":
            bad.append("Len")
        return
    if not _is_node(node):
        _fields(node, bad)
        return
    variant, payload = next(iter(node.items()))
    if variant not in _NODES:
        bad.append(f"{variant}:{_variant(payload)}" if variant == "Agg" else variant)
    elif variant == "Cast" and payload.get("options") == "Strict":
        bad.append(f"strict cast ({_FAILS}; use .cast(dtype, strict=False): unconvertible values become null)")
        _fields(payload, bad)
    elif variant == "Literal":
        if isinstance(payload, dict) and "Series" in payload:
            bad.append("Literal:Series")
    elif variant == "Function":
        function = payload.get("function")
        name = _variant(function)
        sub = _variant(function.get(name)) if isinstance(function, dict) else None
        if name not in _FUNCTIONS or sub in _SUB_DENIED:
            bad.append(f"{name}:{sub}" if sub else str(name))
        elif _may_raise(function) or (_may_raise(payload.get("input", [])) and "'Date'" not in str(function)):
            bad.append(f"{name}:{sub} in strict/raise mode ({_FAILS}; pass strict=False or ambiguous='null')")
        for item in payload.get("input", []):
            _walk(item, bad)
    else:
        _fields(payload, bad)


def _fields(payload: Any, bad: list[str]) -> None:
    """Walk a node's payload (a struct of fields or a list), visiting sub-expressions."""
    items = payload.values() if isinstance(payload, dict) else payload if isinstance(payload, list) else []
    for value in items:
        if _is_node(value):
            _walk(value, bad)
        elif isinstance(value, dict | list):
            _fields(value, bad)


def check_row_level(expr: object, argument: str) -> None:
    """Raise :class:`PlanError` unless ``expr`` is a Polars expression computed row by row."""
    if not isinstance(expr, pl.Expr):
        raise PlanError(f"expected a Polars expression, got {type(expr).__name__}", argument=argument,
                        fix="pass an expression such as pl.col('age') >= 18")
    try:
        tree = json.loads(expr.meta.serialize(format="json"))
    except Exception as e:  # Python UDFs (map_elements/map_batches) do not serialize without pickling
        raise PlanError("uses an operation dpframe cannot inspect (a Python function?)", argument=argument,
                        fix="express the transformation with built-in Polars expressions") from e
    bad: list[str] = []
    _walk(tree, bad)
    if bad:
        raise PlanError(
            f"uses {bad[0]!r}" + ("" if "private values" in bad[0] else
                                  ", which combines several rows (or is not on dpframe's list of row-by-row "
                                  "operations); before aggregation every expression must be computed from "
                                  "one row at a time"),
            argument=argument,
            fix="aggregate with dp measures in .agg(...) instead, or use an element-wise expression")
