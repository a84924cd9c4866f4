"""Translation of row-level DuckDB expressions into Polars expressions with the same results.

Only constructs whose semantics were checked to match DuckDB's on nulls, NaN, ±inf and negative numbers
are translated: column references, literals, ``+ - * /``, comparisons (NaN is the largest value and
equals itself in both engines), ``AND/OR/NOT`` (three-valued), ``IS [NOT] NULL``, ``IS [NOT] DISTINCT
FROM``, ``IN``/``NOT IN`` over literals, ``BETWEEN``, ``CASE``, ``COALESCE``, ``NULLIF``, ``LIKE``,
``||``, a few numeric and string functions, date parts, and widening casts. Integer ``+ - *``, unary
``-`` and ``abs`` are computed exactly in Int128 and give NULL when the result leaves the result type, as
DuckDB's overflow error does under ``TRY`` (Polars alone would wrap around). Anything else raises
:class:`Untranslatable`; the node then runs only on the DuckDB backend. The caller also checks that the
Polars result type equals DuckDB's.

Example:
    >>> import polars as pl
    >>> from dpframe.sql.sandbox import parse_expression
    >>> expr = to_polars(parse_expression("a + 1 > 2"), pl.Schema({"a": pl.Int64}))
    >>> pl.DataFrame({"a": [1, 2, None]}).select(expr)["a"].to_list()
    [False, True, None]
    >>> big = to_polars(parse_expression("a * 4"), pl.Schema({"a": pl.Int64}))
    >>> pl.DataFrame({"a": [2, 2**62]}).select(big)["a"].to_list()   # overflow: NULL, as in DuckDB
    [8, None]

"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import polars as pl

from dpframe.sql.sandbox import Json


class Untranslatable(Exception):
    """The expression has no Polars equivalent with DuckDB's exact semantics."""


_CASTS: dict[str, pl.DataType] = {
    "DOUBLE": pl.Float64(), "FLOAT8": pl.Float64(), "FLOAT": pl.Float32(), "REAL": pl.Float32(),
    "BIGINT": pl.Int64(), "INT8": pl.Int64(), "INTEGER": pl.Int32(), "INT": pl.Int32(), "INT4": pl.Int32(),
    "SMALLINT": pl.Int16(), "TINYINT": pl.Int8(), "VARCHAR": pl.String(), "TEXT": pl.String(),
    "STRING": pl.String(), "BOOLEAN": pl.Boolean(), "BOOL": pl.Boolean(),
}
_COMPARE: dict[str, Callable[[pl.Expr, pl.Expr], pl.Expr]] = {
    "COMPARE_EQUAL": lambda a, b: a == b, "COMPARE_NOTEQUAL": lambda a, b: a != b,
    "COMPARE_LESSTHAN": lambda a, b: a < b, "COMPARE_GREATERTHAN": lambda a, b: a > b,
    "COMPARE_LESSTHANOREQUALTO": lambda a, b: a <= b, "COMPARE_GREATERTHANOREQUALTO": lambda a, b: a >= b,
    "COMPARE_DISTINCT_FROM": lambda a, b: ~a.eq_missing(b),
    "COMPARE_NOT_DISTINCT_FROM": lambda a, b: a.eq_missing(b),
}
_DATE_PARTS = {"year": "year", "month": "month", "day": "day", "dayofmonth": "day", "hour": "hour",
               "minute": "minute"}


def _dtype(expr: pl.Expr, schema: pl.Schema) -> pl.DataType:
    return pl.LazyFrame(schema=schema).select(expr.alias("x")).collect_schema()["x"]


_INT_BITS: dict[pl.DataType, tuple[int, int]] = {
    pl.Int8(): (-(2**7), 2**7 - 1), pl.Int16(): (-(2**15), 2**15 - 1), pl.Int32(): (-(2**31), 2**31 - 1),
    pl.Int64(): (-(2**63), 2**63 - 1), pl.UInt8(): (0, 2**8 - 1), pl.UInt16(): (0, 2**16 - 1),
    pl.UInt32(): (0, 2**32 - 1), pl.UInt64(): (0, 2**64 - 1),
}
_ARITH: dict[str, Callable[..., pl.Expr]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "neg": lambda a: -a,
    "abs": lambda a: a.abs(),
}


def _checked(name: str, xs: list[pl.Expr], schema: pl.Schema) -> pl.Expr:
    """Integer arithmetic with DuckDB's overflow semantics (under ``TRY``): NULL instead of wrapping around.

    The result type is the one Polars gives (the caller checks it equals DuckDB's); the value is computed
    exactly in Int128 and kept only inside that type's range. Operands of 64-bit size fit: a sum or
    difference needs 66 bits, a product of signed 64-bit values 127 bits; a product with an unsigned
    64-bit operand could need 128, so it stays DuckDB-only.
    """
    op = _ARITH[name]
    target = _dtype(op(*xs), schema)
    if not target.is_integer():
        return op(*xs)
    types = [_dtype(x, schema) for x in xs]
    if target not in _INT_BITS or any(t.is_integer() and t not in _INT_BITS for t in types):
        raise Untranslatable(f"128-bit integer arithmetic ({name})")
    if name == "*" and pl.UInt64() in (target, *types):
        raise Untranslatable("multiplication of unsigned 64-bit integers")
    wide = [x.cast(pl.Int128, strict=False) for x in xs]
    exact = pl.lit(0, dtype=pl.Int128) - wide[0] if name == "neg" else op(*wide)  # Polars cannot negate Int128
    # A non-strict cast is NULL outside the target's range. ``when(exact.is_between(lo, hi)).then(exact)`` held each
    # operand twice: nested n deep, 2ⁿ copies — ``((x + 1) + 1) ...`` 20 deep (a 100-byte query) took a minute to
    # translate, and the probes of each copy longer (review 55k).
    return exact.cast(target, strict=False)


def _literal(node: Json) -> pl.Expr:
    lit = node.get("literal") or {}
    kind, text = lit.get("kind"), str(lit.get("text", ""))
    if kind == "INTEGER":
        return pl.lit(int(text))
    if kind == "NUMERIC":
        return pl.lit(float(text))
    if kind == "STRING":
        return pl.lit(text, dtype=pl.String)
    if kind == "BOOLEAN":
        return pl.lit(text.lower() == "true")
    if kind == "NULL_LITERAL":
        return pl.lit(None)
    raise Untranslatable(f"literal of kind {kind}")


def _like(pattern: Json) -> str:
    if pattern.get("class") != "CONSTANT" or (pattern.get("literal") or {}).get("kind") != "STRING":
        raise Untranslatable("LIKE with a non-literal pattern")
    text = str(pattern["literal"]["text"])
    out = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in text)
    return f"(?s)^{out}$"


class _Translator:
    def __init__(self, schema: pl.Schema) -> None:
        self.schema = schema

    def __call__(self, node: Json) -> pl.Expr:
        cls = node.get("class")
        method = getattr(self, f"t_{str(cls).lower()}", None)
        if method is None:
            raise Untranslatable(f"{str(cls).lower()} expressions")
        result: pl.Expr = method(node)
        return result

    def t_column_ref(self, node: Json) -> pl.Expr:
        names = node["column_names"]
        if len(names) != 1:
            raise Untranslatable("struct field access")
        return pl.col(names[0])

    def t_constant(self, node: Json) -> pl.Expr:
        return _literal(node)

    def t_comparison(self, node: Json) -> pl.Expr:
        op = _COMPARE.get(node["type"])
        if op is None:
            raise Untranslatable(node["type"])
        return op(self(node["left"]), self(node["right"]))

    def t_conjunction(self, node: Json) -> pl.Expr:
        parts = [self(c) for c in node["children"]]
        out = parts[0]
        for p in parts[1:]:
            out = (out & p) if node["type"] == "CONJUNCTION_AND" else (out | p)
        return out

    def t_between(self, node: Json) -> pl.Expr:
        x = self(node["input"])
        return (x >= self(node["lower"])) & (x <= self(node["upper"]))

    def t_case(self, node: Json) -> pl.Expr:
        checks = node["case_checks"]
        chain: Any = pl.when(self(checks[0]["when_expr"])).then(self(checks[0]["then_expr"]))
        for c in checks[1:]:
            chain = chain.when(self(c["when_expr"])).then(self(c["then_expr"]))
        otherwise = node.get("else_expr")
        return chain.otherwise(self(otherwise) if otherwise else pl.lit(None))  # type: ignore[no-any-return]

    def t_cast(self, node: Json) -> pl.Expr:
        if node.get("try_cast"):
            raise Untranslatable("TRY_CAST")
        target = _CASTS.get(str(node["type_expr"].get("type_name", "")).upper())
        if target is None or node["type_expr"].get("children"):
            raise Untranslatable(f"CAST to {node['type_expr'].get('type_name')}")
        child = self(node["child"])
        source = _dtype(child, self.schema)
        ok = ((source.is_integer() or source == pl.Boolean) and (target.is_numeric() or target == pl.String)) \
            or (source.is_float() and target.is_float()) or source == target \
            or (source == pl.Null)
        if not ok:
            raise Untranslatable(f"CAST from {source} to {target}")
        return child.cast(target, strict=False)

    def t_operator(self, node: Json) -> pl.Expr:
        kind = node["type"]
        kids = node.get("children", [])
        if kind == "OPERATOR_NOT":
            return ~self(kids[0])
        if kind == "OPERATOR_IS_NULL":
            return self(kids[0]).is_null()
        if kind == "OPERATOR_IS_NOT_NULL":
            return self(kids[0]).is_not_null()
        if kind == "OPERATOR_COALESCE":
            return pl.coalesce([self(k) for k in kids])
        if kind in ("COMPARE_IN", "COMPARE_NOT_IN"):
            values = []
            for k in kids[1:]:
                if k.get("class") != "CONSTANT" or (k.get("literal") or {}).get("kind") == "NULL_LITERAL":
                    raise Untranslatable("IN with a non-literal or NULL value")
                values.append(_literal(k))
            x = self(kids[0])
            found = pl.lit(False)
            for v in values:
                found = found | (x == v)
            return ~found if kind == "COMPARE_NOT_IN" else found
        raise Untranslatable(kind.lower())

    def t_function(self, node: Json) -> pl.Expr:
        name = str(node["function_name"]).lower()
        args = [a["expression"] for a in node.get("arguments", [])]
        if any(a.get("name") for a in node.get("arguments", [])):
            raise Untranslatable("named arguments")
        if name in ("~~", "!~~"):
            matched = self(args[0]).str.contains(_like(args[1]), strict=False)
            return ~matched if name == "!~~" else matched
        xs = [self(a) for a in args]
        if name in ("+", "-", "*") and len(xs) == 2:
            return _checked(name, xs, self.schema)
        if name == "/" and len(xs) == 2:
            return xs[0].cast(pl.Float64, strict=False) / xs[1].cast(pl.Float64, strict=False)
        if name == "-" and len(xs) == 1:
            return _checked("neg", xs, self.schema)
        if name == "||" and len(xs) == 2:
            return pl.concat_str(xs)
        if name in ("lower", "lcase") and len(xs) == 1:
            return xs[0].str.to_lowercase()
        if name in ("upper", "ucase") and len(xs) == 1:
            return xs[0].str.to_uppercase()
        if name == "abs" and len(xs) == 1:
            return _checked("abs", xs, self.schema)
        if name in ("starts_with", "prefix") and len(xs) == 2:
            return xs[0].str.starts_with(xs[1])
        if name in ("ends_with", "suffix") and len(xs) == 2:
            return xs[0].str.ends_with(xs[1])
        if name == "contains" and len(xs) == 2 and _dtype(xs[0], self.schema) == pl.String:
            return xs[0].str.contains(xs[1], literal=True, strict=False)
        if name == "nullif" and len(xs) == 2:
            return pl.when(xs[0] == xs[1]).then(None).otherwise(xs[0])
        if name == "isnan" and len(xs) == 1:
            return xs[0].is_nan()
        if name in ("sqrt", "exp", "ln") and len(xs) == 1 and _dtype(xs[0], self.schema).is_float():
            return {"sqrt": xs[0].sqrt(), "exp": xs[0].exp(), "ln": xs[0].log()}[name]
        if name in ("greatest", "least") and xs and all(
                _dtype(x, self.schema).is_integer() or _dtype(x, self.schema) == pl.String for x in xs):
            return pl.max_horizontal(xs) if name == "greatest" else pl.min_horizontal(xs)
        if name == "round" and len(xs) in (1, 2) and _dtype(xs[0], self.schema).is_float():
            digits = 0 if len(xs) == 1 else _int_constant(args[1])
            if digits < 0:
                raise Untranslatable("ROUND to negative digits")
            return xs[0].round(digits, mode="half_away_from_zero")
        if name in _DATE_PARTS and len(xs) == 1 and (dtype := _dtype(xs[0], self.schema)).is_temporal():
            x = xs[0]
            if isinstance(dtype, pl.Datetime) and dtype.time_zone not in (None, "UTC"):
                x = x.dt.convert_time_zone("UTC")   # DuckDB reads a zoned timestamp's fields in UTC (its zone)
            return getattr(x.dt, _DATE_PARTS[name])().cast(pl.Int64, strict=False)  # type: ignore[no-any-return]
        raise Untranslatable(f"function {name}()")


def _int_constant(node: Json) -> int:
    if node.get("class") == "CONSTANT" and (node.get("literal") or {}).get("kind") == "INTEGER":
        return int(node["literal"]["text"])
    raise Untranslatable("a non-constant number of digits")


def to_polars(node: Json, schema: pl.Schema) -> pl.Expr:
    """A Polars expression computing the (column-resolved) DuckDB expression ``node`` over ``schema``."""
    return _Translator(schema)(node)
