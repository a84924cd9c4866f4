"""Checks that a Polars expression is row-level: each output row depends on one input row only.

Filters and derived columns before aggregation must be *stable*: adding or removing one privacy unit may
change only that unit's rows. They must also never fail because of a private value: an error raised by
the engine mid-query would itself reveal something about the data, outside the DP guarantee.

The check is a strict allowlist over the expression's serialized tree. It visits **every** node, at
every depth and in every expression position (a bare variant such as ``"Len"`` inside an alias, a
binary operation or a ``when`` is a node too), and refuses any node, function or operator that is not
on the list, so an operation Polars adds in the future is refused until someone reviews it. Refused:

- anything whose value for a row depends on other rows: aggregations (``len``, ``count``, ``sum``,
  ``mean``, ``implode``, ``has_nulls`` ...), windows (``over``), cumulative and rolling functions,
  ``shift``, ``rank``, ``sort``, ``unique``, sampling, Series literals (except as ``replace``'s old/new
  values, a constant mapping), ``replace``/``is_in`` against a column (both look at the whole column),
  date parsing with an inferred format or ``ambiguous="infer"``;
- operations that can fail on some private values: strict casts and parsers (``strict=True``),
  ``ambiguous="raise"``, JSON/decimal parsing, and parameters (regex patterns, lengths, durations,
  integer exponents) taken from a column rather than a literal;
- the physical codes of a ``pl.Categorical`` (``to_physical``, ``reinterpret``, ``min``/``max_horizontal``
  and anything else not on the short categorical allowlist) and casts/literals *to* ``pl.Categorical``:
  Polars numbers categories in the order the process first saw each string, so a code depends on
  other rows. ``pl.Enum([...])`` is allowed: its categories, and so its codes, are public;
- Python functions (``map_elements``/``map_batches``), which cannot be inspected.

Example:
    >>> import polars as pl
    >>> check_row_level(pl.col("age") >= 18, "predicate")
    >>> check_row_level(pl.col("age") > pl.col("age").mean(), "predicate")
    Traceback (most recent call last):
    ...
    dpframe.errors.PlanError: predicate: uses 'Agg:Mean', which combines several rows ...
    >>> check_row_level(pl.len().alias("n"), "exprs")
    Traceback (most recent call last):
    ...
    dpframe.errors.PlanError: exprs: uses 'Len', which combines several rows ...

"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from dpframe.errors import PlanError

_ROWS = ("which combines several rows (or is not on dpframe's list of row-by-row operations); before "
         "aggregation every expression must be computed from one row at a time")
_ROWS_FIX = "aggregate with dp measures in .agg(...) instead, or use an element-wise expression"
_FAILS = "can fail on some private values, and a failure would reveal them"
_CATEGORICAL = ("which reads a Categorical's physical codes; Polars numbers categories in the order the process "
                "first saw each string, so a code depends on other rows")
_CATEGORICAL_FIX = "cast to pl.String, or to pl.Enum([...]) with public categories, before this operation"


@dataclass(frozen=True)
class _Refusal:
    what: str
    why: str = _ROWS
    fix: str = _ROWS_FIX


# Expression nodes that are row-level by themselves (their sub-expressions are checked separately).
_LEAVES = {"Column", "Columns", "Nth", "Selector", "Field"}
_OPERATORS = {"Eq", "EqValidity", "NotEq", "NotEqValidity", "Lt", "LtEq", "Gt", "GtEq", "Plus", "Minus",
              "Multiply", "RustDivide", "TrueDivide", "FloorDivide", "TruncDivide", "Modulus", "And",
              "Or", "Xor", "LogicalAnd", "LogicalOr"}
_RENAMES = {"Prefix", "Suffix", "ToLowercase", "ToUppercase"}

# Functions: name -> allowed sub-variants (for namespaces), or None (a plain function; its payload holds options).
_STRING = {"ConcatHorizontal", "Contains", "CountMatches", "EndsWith", "Extract", "ExtractAll", "ExtractGroups",
           "Find", "ToInteger", "LenBytes", "LenChars", "Lowercase", "Replace", "Reverse", "PadStart", "PadEnd",
           "Slice", "Head", "Tail", "HexEncode", "HexDecode", "Base64Encode", "Base64Decode", "StartsWith",
           "StripChars", "StripCharsStart", "StripCharsEnd", "StripPrefix", "StripSuffix", "SplitExact", "SplitN",
           "Strptime", "Split", "SplitRegex", "Titlecase", "Uppercase", "ZFill", "ContainsAny", "ReplaceMany",
           "EscapeRegex", "Normalize", "Format", "ExtractMany", "FindMany"}
_TEMPORAL = {"Millennium", "Century", "Year", "IsLeapYear", "IsoYear", "Quarter", "Month", "DaysInMonth", "Week",
             "WeekDay", "Day", "OrdinalDay", "Time", "Date", "Duration", "Hour", "Minute", "Second",
             "Millisecond", "Microsecond", "Nanosecond", "TotalDays", "TotalHours", "TotalMinutes", "TotalSeconds",
             "TotalMilliseconds", "TotalMicroseconds", "TotalNanoseconds", "ToString", "CastTimeUnit",
             "ConvertTimeZone", "TimeStamp", "Truncate", "OffsetBy", "MonthStart", "MonthEnd",
             "BaseUtcOffset", "DSTOffset", "Round", "Replace", "ReplaceTimeZone", "Combine", "DatetimeFunction"}
_FUNCTIONS: dict[str, set[str] | None] = {
    "Abs": None, "Negate": None, "Log": None, "Log1p": None, "Exp": None, "Sign": None,
    "Clip": None, "Round": None, "RoundSF": None, "Floor": None, "Ceil": None, "Atan2": None,
    "FillNull": None, "Coalesce": None, "Hash": None, "AsStruct": None, "Replace": None,
    "MaxHorizontal": None, "MinHorizontal": None, "SumHorizontal": None, "MeanHorizontal": None,
    "ToPhysical": None, "Reinterpret": None,
    "Pow": {"Generic", "Sqrt", "Cbrt"},
    "Trigonometry": {"Cos", "Cot", "Sin", "Tan", "ArcCos", "ArcSin", "ArcTan", "Cosh", "Sinh", "Tanh", "ArcCosh",
                     "ArcSinh", "ArcTanh", "Degrees", "Radians"},
    "Boolean": {"IsNull", "IsNotNull", "IsFinite", "IsInfinite", "IsNan", "IsNotNan", "IsBetween", "IsIn",
                "IsClose", "AllHorizontal", "AnyHorizontal", "Not"},
    "StringExpr": _STRING,
    "TemporalExpr": _TEMPORAL,
    "StructExpr": {"FieldByName", "RenameFields", "PrefixFields", "SuffixFields", "JsonEncode", "SelectFields"},
}
# Functions whose inputs after the first may be any row-level expression. For every other function
# those inputs are parameters (a regex, a length, a duration, a replacement map ...): they must be
# literals, because a bad value from a column would make the query fail, or (replace, is_in) because
# Polars reads the whole column as the parameter.
_COLUMN_PARAMETERS = {
    "Log", "Clip", "Atan2", "FillNull", "Coalesce", "AsStruct", "Hash", "MaxHorizontal",
    "MinHorizontal", "SumHorizontal", "MeanHorizontal", "Boolean:IsBetween", "Boolean:IsClose",
    "Boolean:AllHorizontal", "Boolean:AnyHorizontal", "StringExpr:ConcatHorizontal", "StringExpr:Format",
    "StringExpr:StartsWith", "StringExpr:EndsWith", "StringExpr:Contains", "StringExpr:StripChars",
    "StringExpr:StripCharsStart", "StringExpr:StripCharsEnd", "StringExpr:StripPrefix", "StringExpr:StripSuffix",
    "TemporalExpr:Combine", "TemporalExpr:Duration",
}
# Functions that may consume a Categorical value: they see the string, never the physical code (the
# other nodes the walk allows, alias/when/comparisons, do too; a Cast only to String or Enum).
_CATEGORICAL_SAFE = {"FillNull", "Coalesce", "Hash", "AsStruct", "StructExpr", "Boolean:IsNull", "Boolean:IsNotNull",
                     "Boolean:IsIn", "StringExpr:ConcatHorizontal"}


def _variant(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        return str(next(iter(value)))
    return None


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


def _is_literal(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"Literal"}


def _string_literal(node: Any) -> str | None:
    scalar = node.get("Literal", {}).get("Scalar") if _is_literal(node) and isinstance(node["Literal"], dict) else None
    value = scalar.get("String") if isinstance(scalar, dict) else None
    return value if isinstance(value, str) else None


def _names_categorical(tree: Any) -> bool:
    """Whether a serialized type or value names the Categorical type (as a variant key, never a string value)."""
    return _names(tree, "Categorical")


def _names(tree: Any, variant: str) -> bool:
    """Whether ``variant`` is a key (a variant's name, never a string value) anywhere in a serialized tree."""
    if isinstance(tree, dict):
        return variant in tree or any(_names(v, variant) for v in tree.values())
    if isinstance(tree, list):
        return any(_names(v, variant) for v in tree)
    return False


def _has_categorical(dtype: Any) -> bool:
    """Whether a Polars type is, or contains (list, array, struct field), a Categorical."""
    if isinstance(dtype, pl.Categorical):
        return True
    if isinstance(dtype, pl.List | pl.Array):
        return _has_categorical(dtype.inner)
    if isinstance(dtype, pl.Struct):
        return any(_has_categorical(f.dtype) for f in dtype.fields)
    return False


class _Checker:
    """One walk over a serialized expression tree, collecting refusals."""

    def __init__(self, schema: pl.Schema | None, categoricals: bool, structural: bool = False) -> None:
        self.schema = schema
        self.categoricals = categoricals   # whether a Categorical value can occur at all in this expression
        self.structural = structural       # check the tree's shape only: never deserialize a node (see check_tree)
        self.bad: list[_Refusal] = []

    def dtypes(self, node: Any) -> list[pl.DataType] | None:
        """The output types of a sub-expression over the input schema, or None when unknown."""
        if self.structural:
            return None
        try:
            expr = pl.Expr.deserialize(io.StringIO(json.dumps(node)), format="json")
            frame = pl.LazyFrame(schema=self.schema or {})
            return list(frame.select(expr).collect_schema().dtypes())
        except Exception:   # invalid over this schema: the node's own validation reports it
            return None

    def is_categorical(self, node: Any) -> bool:
        types = self.dtypes(node) if self.categoricals else None
        return bool(types) and any(_has_categorical(t) for t in types or ())

    def walk(self, node: Any) -> None:
        """Check one expression node (in expression position) and everything below it."""
        if isinstance(node, str):   # a unit variant: Len, Element, ... — none is row-level
            self.bad.append(_Refusal(node))
            return
        if not (isinstance(node, dict) and len(node) == 1):
            self.bad.append(_Refusal(f"unrecognised expression {str(node)[:40]}"))
            return
        variant, payload = next(iter(node.items()))
        children: list[Any]
        if variant in _LEAVES:
            children = []
        elif variant == "Literal":
            children = []
            self.literal(payload, node)
        elif variant == "Alias" and isinstance(payload, list) and payload:
            children = [payload[0]]
        elif variant == "KeepName":
            children = [payload]
        elif variant == "RenameAlias" and isinstance(payload, dict):
            if _variant(payload.get("function")) not in _RENAMES:
                self.bad.append(_Refusal(f"name.{_variant(payload.get('function'))}"))
            children = [payload.get("expr")]
        elif variant == "BinaryExpr" and isinstance(payload, dict):
            if payload.get("op") not in _OPERATORS:
                self.bad.append(_Refusal(f"operator {payload.get('op')}"))
            children = [payload.get("left"), payload.get("right")]
        elif variant == "Ternary" and isinstance(payload, dict):
            children = [payload.get("predicate"), payload.get("truthy"), payload.get("falsy")]
        elif variant == "Cast" and isinstance(payload, dict):
            children = [payload.get("expr")]
            self.cast(payload)
        elif variant == "Function" and isinstance(payload, dict):
            children = list(payload.get("input", []))
            self.function(payload, children)
            return
        else:
            self.bad.append(_Refusal(f"{variant}:{_variant(payload)}" if variant == "Agg" else variant))
            return
        for child in children:
            self.walk(child)

    def literal(self, payload: Any, node: Any) -> None:
        kind = _variant(payload)
        if kind not in ("Dyn", "Scalar"):
            self.bad.append(_Refusal(f"Literal:{kind}"))   # a Series (one value per row, by position) or a range
        elif _names_categorical(payload) or (kind == "Scalar" and self.is_literal_categorical(node)):
            self.bad.append(_Refusal("a pl.Categorical literal", _CATEGORICAL, "use a plain string literal"))

    def is_literal_categorical(self, node: Any) -> bool:
        scalar = _variant(node["Literal"]["Scalar"]) if isinstance(node["Literal"]["Scalar"], dict) else None
        if scalar not in ("List", "Array", "Struct"):   # nested values are Arrow bytes: ask Polars for the type
            return False
        types = self.dtypes(node)
        return bool(types) and any(_has_categorical(t) for t in types or ())

    def cast(self, payload: dict[str, Any]) -> None:
        dtype: Any = payload.get("dtype")
        if _variant(dtype) != "Literal":
            self.bad.append(_Refusal("a cast to a computed type", fix="cast to a concrete type, e.g. pl.Float64"))
        elif _names_categorical(dtype):
            self.bad.append(_Refusal("a cast to pl.Categorical", _CATEGORICAL,
                                     "keep pl.String, or cast to pl.Enum([...]) with public categories"))
        elif self.categoricals and self.is_categorical(payload.get("expr")) \
                and str(_variant(dtype["Literal"])) not in ("String", "Enum"):
            self.bad.append(_Refusal("a cast of a Categorical to a non-string type", _CATEGORICAL, _CATEGORICAL_FIX))
        if payload.get("options") == "Strict":
            self.bad.append(_Refusal("strict cast", f"which {_FAILS}",
                                     "use .cast(dtype, strict=False): unconvertible values become null"))

    def function(self, payload: dict[str, Any], inputs: list[Any]) -> None:
        function = payload.get("function")
        name = _variant(function)
        subs = _FUNCTIONS.get(name or "", set())
        sub = _variant(function.get(name)) if isinstance(function, dict) and subs is not None else None
        label = f"{name}:{sub}" if sub else str(name)
        if name not in _FUNCTIONS or (subs is not None and sub not in subs):
            detail = _variant(function.get(name)) if isinstance(function, dict) else None
            self.bad.append(_Refusal(f"{name}:{detail}" if detail else str(name)))
        else:
            self.function_rules(name or "", label, function, inputs)
        for position, item in enumerate(inputs):
            if not (position and label == "Replace" and self.is_mapping_series(item)):
                self.walk(item)

    def is_mapping_series(self, node: Any) -> bool:
        """A Series literal given as ``replace``'s old/new values: a constant mapping, not one value per row.

        ``replace`` keeps its input's type (the new values are cast to it), and replacing in a Categorical
        input is refused by the categorical rules, so no category code can come from the Series.
        """
        return _is_literal(node) and _variant(node["Literal"]) == "Series"

    def function_rules(self, name: str, label: str, function: Any, inputs: list[Any]) -> None:
        """The per-function rules for an allowlisted function."""
        if _may_raise(function) or (_may_raise(inputs) and "'Date'" not in str(function)):
            self.bad.append(_Refusal(f"{label} in strict/raise mode", f"which {_FAILS}",
                                     "pass strict=False or ambiguous='null'"))
        if label == "StringExpr:Strptime" and isinstance(function["StringExpr"]["Strptime"], list) \
                and function["StringExpr"]["Strptime"][1].get("format") is None:
            self.bad.append(_Refusal(f"{label} without a format", "whose format Polars infers from other rows",
                                     "give the format, e.g. .str.to_date('%Y-%m-%d', strict=False)"))
        if label in ("StringExpr:Strptime", "TemporalExpr:ReplaceTimeZone") and \
                any(_string_literal(i) == "infer" for i in inputs):
            self.bad.append(_Refusal(f"{label} with ambiguous='infer'", "which resolves a time from neighbouring rows",
                                     "pass ambiguous='earliest', 'latest' or 'null'"))
        if label not in _COLUMN_PARAMETERS:
            for i in inputs[1:]:
                if not _is_literal(i) and not self.parameter_ok(label, inputs[0], i):
                    self.bad.append(_Refusal(f"{label} with a parameter taken from a column",
                                             f"which either reads the whole column or {_FAILS}",
                                             "pass the parameter as a literal value"))
                    break
        if self.categoricals and name not in _CATEGORICAL_SAFE and label not in _CATEGORICAL_SAFE \
                and any(self.is_categorical(i) for i in inputs):
            self.bad.append(_Refusal(label, _CATEGORICAL, _CATEGORICAL_FIX))

    def parameter_ok(self, label: str, first: Any, parameter: Any) -> bool:
        """Column parameters that are row-level and cannot fail: is_in a list column; a float exponent."""
        if self.structural:     # the types decide: the full check, after deserializing, does
            return True
        if self.schema is None:
            return False
        types = self.dtypes(parameter)
        if not types or len(types) != 1:
            return False
        if label == "Boolean:IsIn":
            return isinstance(types[0], pl.List | pl.Array)
        if label == "Pow:Generic":   # only an integer raised to a negative integer fails
            base = self.dtypes(first)
            return types[0].is_float() or bool(base and len(base) == 1 and base[0].is_float())
        return False


def allowed_operations() -> frozenset[str]:
    """Every operation label the allowlist accepts (the adversarial fuzzer must cover each one).

    Labels: ``"Abs"``, ``"StringExpr:ToInteger"``, ``"operator Plus"``, ``"Cast"``, ``"Ternary"`` ...

    Example:
        >>> ops = allowed_operations()
        >>> "TemporalExpr:MonthStart" in ops, "operator Plus" in ops, "Agg:Sum" in ops
        (True, True, False)

    """
    functions = {f"{name}:{sub}" if subs else name for name, subs in _FUNCTIONS.items() for sub in (subs or [None])}
    return frozenset({*functions, *(f"operator {op}" for op in _OPERATORS), *(f"name.{r}" for r in _RENAMES),
                      "Cast", "Ternary"})


TREE_DEPTH = 400
TREE_NODES = 2000
"""Objects (nodes and their options) from which :func:`check_tree` refuses a tree: checking and planning an
expression costs time growing with the square of its size (a sum of 400 small terms, 5,200 objects: 2.7 s),
time a remote analyst would take from every other."""
MAX_LITERAL = 10_000
"""The most fields ``split_exact``/``splitn`` may make and the longest ``pad_start``/``pad_end``/``zfill`` length."""
_COUNTS = {"StringExpr:SplitExact", "StringExpr:SplitN"}
_LENGTHS = {"StringExpr:PadStart", "StringExpr:PadEnd", "StringExpr:ZFill"}
"""Nesting (JSON objects and arrays) from which :func:`check_tree` refuses a tree (Polars reads ~128 levels)."""


def check_tree(tree: object, argument: str) -> None:
    """Raise :class:`PlanError` unless a serialized expression from elsewhere may be deserialized here.

    A tree that came over the wire (:mod:`dpframe.remote`) is checked *before* Polars reads it: Polars'
    reader can rebuild a Python function from its pickled bytes, which would run code. This is the walk of
    :func:`check_row_level` on the shape of the tree alone — every node on the allowlist, no node
    deserialized on the way (so no rule that needs a type: the deserialized expression then goes through
    the API's own :func:`check_row_level`, with the schema) — and no ``Object`` type anywhere.

    Example:
        >>> check_tree({"BinaryExpr": {"left": {"Column": "x"}, "op": "Gt", "right": {"Column": "y"}}}, "predicate")
        >>> check_tree({"AnonymousFunction": {"input": [{"Column": "x"}]}}, "predicate")
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: predicate: uses 'AnonymousFunction', which can hold Python objects or code. Fix: ...

    """
    check_size(tree, argument)
    suspect = _suspect(tree)
    if suspect is not None:       # the allowlist below refuses these too: a second, independent line
        raise PlanError(f"uses {suspect!r}, which can hold Python objects or code", argument=argument,
                        fix="use Polars' own functions and types")
    _check_sizes(tree, argument)
    checker = _Checker(None, False, structural=True)
    checker.walk(tree)
    if checker.bad:
        first = checker.bad[0]
        raise PlanError(f"uses {first.what!r}, {first.why}", argument=argument, fix=first.fix)


_SUSPECT = re.compile(r"Object|Python|Udf|UDF|Anonymous|Plugin|^Ffi|^FFI|Pickle|Opaque|^Map$|^MapField|[Cc]allback|"
                      r"^PipeWith|FoldHorizontal|ReduceHorizontal|^OfExpr$")
"""Keys of variants that carry a Python object or function (``fold``/``reduce`` and ``pipe_with_dtype`` keep theirs
under ``callback``, ``name.map_fields`` under ``MapFieldNames``), and ``OfExpr``: a type computed from an expression,
which would hide an expression inside a function's options, where the allowlist walk does not look."""


def _suspect(tree: object) -> str | None:
    """A key anywhere in ``tree`` naming a variant that can carry a Python object or function, or None."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(key, str) and _SUSPECT.search(key):
                    return key
                pending.append(value)
        elif isinstance(node, list):
            pending += node
    return None


def _check_sizes(tree: object, argument: str) -> None:
    """Refuse a count or length above :data:`MAX_LITERAL`, before anything types or plans the expression.

    ``split_exact(n)`` is typed as a struct of n + 1 fields: Polars allocates them all when it plans the
    expression, and an allocation that fails aborts the process (a remote request took the server down).
    """
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending += node
            continue
        if not isinstance(node, dict):
            continue
        pending += node.values()
        array = node.get("Array")
        if isinstance(array, list) and len(array) == 2 and _values_per_row(node) > MAX_LITERAL:
            raise PlanError(f"uses an Array type of more than {MAX_LITERAL:,} values per row", argument=argument,
                            fix=f"use pl.Array widths whose product is at most {MAX_LITERAL:,}, or pl.List")
        payload = node.get("Function")
        if len(node) != 1 or not isinstance(payload, dict) or not isinstance(payload.get("function"), dict):
            continue
        function = payload["function"]
        name = _variant(function)
        label = f"{name}:{_variant(function.get(name))}"
        sizes: list[Any] = []
        if label in _COUNTS:
            sizes = [function[name][label.split(":")[1]]]
        elif label in _LENGTHS and isinstance(payload.get("input"), list):
            sizes = [i for i in payload["input"][1:] if _is_literal(i)]
        if any(isinstance(n, int | float) and not isinstance(n, bool) and abs(n) > MAX_LITERAL
               for n in _numbers(sizes)):
            raise PlanError(f"{label} with a length above {MAX_LITERAL:,}", argument=argument,
                            fix=f"use a length of at most {MAX_LITERAL:,}")


def _values_per_row(dtype: object) -> int:
    """How many values one row of a serialized type holds at least (an Array's width times its inner type's).

    A null cast to ``pl.Array(pl.List(pl.Int64), 10**12)`` allocated its 10**12 offsets: Polars aborted.
    """
    if isinstance(dtype, dict) and len(dtype) == 1:
        kind, inner = next(iter(dtype.items()))
        if kind == "Array" and isinstance(inner, list) and len(inner) == 2:
            width = inner[1]
            if isinstance(width, int | float) and not isinstance(width, bool):
                return int(min(abs(width), 2**62)) * max(_values_per_row(inner[0]), 1)
        if kind == "Struct" and isinstance(inner, list):
            return sum(_values_per_row(f.get("dtype")) if isinstance(f, dict) else 1 for f in inner)
        if kind == "Literal":
            return _values_per_row(inner)
    return 1


def _numbers(tree: object) -> list[Any]:
    """Every number (at any depth) in a JSON value."""
    pending, out = [tree], []
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            pending += node.values()
        elif isinstance(node, list):
            pending += node
        elif isinstance(node, int | float):
            out.append(node)
    return out


def check_size(tree: object, argument: str) -> None:
    """Raise :class:`PlanError` for a tree deeper than :data:`TREE_DEPTH` or larger than :data:`TREE_NODES`."""
    if _deeper(tree, TREE_DEPTH):
        raise PlanError(f"the expression is nested more than {TREE_DEPTH} levels deep", argument=argument,
                        fix="split it into several with_columns steps")
    if tree_objects(tree) > TREE_NODES:
        raise PlanError(f"the expression has more than {TREE_NODES} parts", argument=argument,
                        fix="split it into several with_columns steps, or sum fewer terms per expression")


def tree_objects(tree: object) -> int:
    """How many JSON objects ``tree`` holds (its nodes and their options; iteratively).

    Example:
        >>> tree_objects({"Alias": [{"Column": "x"}, "y"]})
        2

    """
    pending, count = [tree], 0
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            count += 1
            pending += node.values()
        elif isinstance(node, list):
            pending += [v for v in node if isinstance(v, dict | list)]
    return count


def _deeper(tree: object, depth: int) -> bool:
    """Whether ``tree`` (JSON values) nests more than ``depth`` levels (iteratively: no recursion limit)."""
    pending = [(tree, 0)]
    while pending:
        node, level = pending.pop()
        if level > depth:
            return True
        if isinstance(node, dict):
            pending += [(v, level + 1) for v in node.values()]
        elif isinstance(node, list):
            pending += [(v, level + 1) for v in node]
    return False


def too_deep(argument: str) -> PlanError:
    """The refusal of an expression nested deeper than its checks can walk (free: its shape is the analyst's).

    Example:
        >>> too_deep("predicate").fix
        'split it into several with_columns steps'

    """
    return PlanError("the expression is nested too deep to check", argument=argument,
                     fix="split it into several with_columns steps")


def check_row_level(expr: object, argument: str, schema: pl.Schema | None = None) -> None:
    """Raise :class:`PlanError` unless ``expr`` is a Polars expression computed row by row.

    ``schema`` is the input's (public) schema. Give it whenever it is known: it lets the check see
    Categorical values, allow a list column in ``is_in`` and a float exponent in ``pow``.
    """
    if not isinstance(expr, pl.Expr):
        raise PlanError(f"expected a Polars expression, got {type(expr).__name__}", argument=argument,
                        fix="pass an expression such as pl.col('age') >= 18")
    try:
        text = expr.meta.serialize(format="json")
    except Exception as e:  # Python UDFs (map_elements/map_batches) do not serialize without pickling
        raise PlanError("uses an operation dpframe cannot inspect (a Python function?)", argument=argument,
                        fix="express the transformation with built-in Polars expressions") from e
    try:        # Python's JSON reader and the walk recurse: a tree nested past the recursion limit is refused
        tree = json.loads(text)
        _check_sizes(tree, argument)
        categoricals = "Categorical" in text or (schema is not None and any(_has_categorical(t) for t in
                                                                             schema.dtypes()))
        checker = _Checker(schema, categoricals)
        checker.walk(tree)
    except RecursionError:
        raise too_deep(argument) from None
    if checker.bad:
        first = checker.bad[0]
        raise PlanError(f"uses {first.what!r}, {first.why}", argument=argument, fix=first.fix)
