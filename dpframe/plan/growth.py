"""A bound on how much longer a row-level expression's strings can be than its inputs, checked when it is built.

Some string operations multiply a value's length: ``str.replace_all("", r, literal=True)`` puts ``r`` at every
position of a string (each character becomes ``1 + len(r)``), a regular-expression replacement can insert its
match again (``"$0$0"``), case mappings and encodings widen characters, ``concat_str`` and ``+`` add values up.
Each call's literals are capped (:data:`~dpframe.plan.rowlevel.MAX_LITERAL`), but nested calls (in one expression,
or across the steps of a method chain) multiply: two nested ``replace_all("", r)`` with a 10,000-character ``r``
turn each character into about 10⁸ (review 54e) — gigabytes from one row, on the rows a private condition lets
through, and seconds to minutes of the engine's own checks when the query is built.

So each expression gets a bound ``(a, b)``: every value it computes (the result and every value on the way: a
string's bytes, a list's or struct's JSON text, a number's or date's text) is at most ``a·L + b`` bytes, where ``L``
(at least 1) is the longest value, in text form, of the table's row it reads. Lists count their elements (an
overlapping ``extract_many`` may match each pattern at each position), structs their fields' names, JSON its
escapes (a control byte becomes six), a date format what its specifiers write.
Columns of the scanned table are ``(1, 0)``; a column an earlier step derived has that step's bound
(:func:`column_growth`). An expression is refused (:func:`check_growth`, free: it reads no row) when some value
on the way may exceed :data:`MAX_GROWTH` bytes per byte of input, ``a + b > MAX_GROWTH``: one ``replace_all``
of a literal of up to 10,000 characters (``a + b`` about 20,001) passes, two nested do not.

Example:
    >>> import polars as pl
    >>> s = pl.col("s")
    >>> growth(s.str.replace_all("", "ab", literal=True), {})
    (3, 2)
    >>> check_growth(s.str.replace_all("", "r" * 200, literal=True).str.replace_all("", "r" * 200, literal=True),
    ...              "exprs", {})
    Traceback (most recent call last):
    ...
    dpframe.errors.PlanError: exprs: the string ... may grow to 80801 bytes per byte of its input...

"""

from __future__ import annotations

import io
import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from dpframe.errors import PlanError
from dpframe.plan.rowlevel import MAX_LITERAL
from dpframe.sealed import plain_cache

MAX_GROWTH = 25_000
"""The most bytes a row-level expression may compute (a result or a value on the way) per byte of the longest value
of the row it reads: one replacement of every position by a 10,000-character literal (about 20,001) fits."""

Growth = tuple[int, int]
"""``(a, b)``: a string computed is at most ``a·L + b`` bytes, ``L`` the longest value of the row (at least 1)."""

_SCALE = {"Uppercase": 3, "Lowercase": 3, "Titlecase": 3,   # bytes of a character's case mapping (U+0390: 2 → 6)
          "Normalize": 11,                                   # NFKC/NFKD of U+FDFA: 3 bytes → 33
          "HexEncode": 2, "JsonEncode": 6}                   # a byte as two hex digits; "\u0000" for one byte
_ONE: Growth = (1, 0)
_ESCAPE = 6      # JSON text of a byte: "\u0001"
_INDEX = 10      # a match's byte offset (u32) in JSON text
_FIELD = 8       # a struct field's quotes, colon and comma, and a null, in JSON; its name's bytes are added
_VALUE = 64      # the longest text of a number, date, time, duration or boolean (computed from a shorter input:
                 # 1/3 from two bytes, a datetime from one)
_NOT_TEXT = {"Strptime", "ToInteger", "LenBytes", "LenChars", "Find", "CountMatches", "Contains", "StartsWith",
             "EndsWith", "ContainsAny"}
"""String functions whose value is not a string (its text may be longer than the input: "false" from "")."""
_FORMAT = 16     # bytes a date format writes per byte of it (%c: 24 bytes for 2, %+: 25 for 2 in a time zone)


class _TooLarge(Exception):
    def __init__(self, size: Growth) -> None:
        self.size = size


def growth(expr: pl.Expr, columns: Mapping[str, Growth], names: Sequence[str] = ()) -> Growth:
    """The bound ``(a, b)`` of ``expr``'s result, its input columns bounded by ``columns`` (others: ``(1, 0)``).

    ``names`` are the input's columns: a selector (``pl.all()``, ``pl.col(pl.String)``) may expand to all of them.

    Raises nothing: a value on the way above :data:`MAX_GROWTH` is what :func:`check_growth` refuses.

    Example:
        >>> growth(pl.concat_str(pl.col("s"), pl.col("s").str.zfill(50)), {"s": (2, 0)})
        (4, 50)

    """
    return _Walk(columns, names, check=False).size(json.loads(expr.meta.serialize(format="json")))


def check_growth(expr: pl.Expr, argument: str, columns: Mapping[str, Growth], names: Sequence[str] = ()) -> None:
    """Refuse ``expr`` if a string it computes may exceed :data:`MAX_GROWTH` bytes per byte of the row it reads.

    A :class:`PlanError` naming ``argument``; its input columns (``names``) are bounded by ``columns``.

    Example:
        >>> check_growth(pl.col("s").str.replace_all("", "-", literal=True), "exprs", {})
        >>> check_growth(pl.col("s").str.replace_all("", "-", literal=True), "exprs", {"s": (20_000, 0)})
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: exprs: the string ... may grow to 40001 bytes per byte of its input...

    """
    try:
        _Walk(columns, names, check=True).size(json.loads(expr.meta.serialize(format="json")))
    except _TooLarge as e:
        raise too_large(_short(expr), e.size, argument,
                        "shorter replacements and fewer nested calls (in one expression or across with_columns "
                        "steps)") from None
    # (a RecursionError propagates: as from the checks after this one, the query's builder refuses the tree as
    # nested too deep — SQL's says so rather than handing it to DuckDB as an expression without a Polars form)


def too_large(what: str, size: Growth, argument: str, fix: str) -> PlanError:
    """The refusal of ``what`` (an expression), one of whose values may grow to ``size``; the fix: use ``fix``.

    Shared with SQL's bound (:mod:`dpframe.sql.growth`).

    Example:
        >>> print(too_large("s", (30_000, 1), "exprs", "fewer calls"))  # doctest: +ELLIPSIS
        exprs: the string s may grow to 30001 bytes per byte of its input (at most 25,000)... Fix: use fewer calls

    """
    a, b = size
    return PlanError(f"the string {what} may grow to {a + b} bytes per byte of its input (at most {MAX_GROWTH:,}): "
                     "repetitions, paddings, replacements of empty or repeated patterns, case mappings, encodings and "
                     "concatenations multiply when nested", argument=argument, fix=f"use {fix}")


def _short(expr: pl.Expr) -> str:
    text = str(expr)
    return text if len(text) <= 80 else text[:77] + "..."


_CACHE: weakref.WeakKeyDictionary[object, dict[str, Growth]] = weakref.WeakKeyDictionary()


def column_growth(node: Any) -> dict[str, Growth]:
    """Each column's bound on the output of a plan ``node`` (cached per node).

    ``(1, 0)`` for the scanned table's columns (left out), the bound of the expression that computed it for a column a
    ``with_columns``/``select`` step derived, or a SQL projection (its ``column_bounds``).

    Example:
        >>> from dpframe.plan.nodes import Scan, WithColumns
        >>> scan = Scan.of("t", pl.Schema({"s": pl.String}))
        >>> step = WithColumns.of(scan, [pl.col("s").str.replace_all("", "ab", literal=True)], {}, None)
        >>> column_growth(step)
        {'s': (3, 2)}

    """
    from dpframe.plan.nodes import RowNode, Select, WithColumns  # (the nodes check with this module)
    from dpframe.sql.nodes import PublicJoin

    if node in _CACHE:
        return _CACHE[node]
    if not isinstance(node, RowNode):
        out: dict[str, Growth] = {}
    elif (bounds := getattr(node, "column_bounds", None)) is not None:   # a projection bounding its columns itself
        out = dict(bounds)                                                    # (SQL's: dpframe.sql.growth)
    elif isinstance(node, PublicJoin):     # a public value is as long as it is, not as the private row's longest
        out = {**column_growth(node.input), **{name: (0, _longest(node.data[name])) for name in node.added}}
    else:
        out = dict(column_growth(node.input))
        exprs = node.exprs if isinstance(node, WithColumns | Select) else getattr(node, "exprs", None)
        if isinstance(node, Select):
            out = {}
        if exprs is not None:
            inputs = column_growth(node.input)
            for e in exprs:
                size = growth(e, inputs, node.input.schema.names())
                for name in _output_names(e, node.input.schema, node.schema):
                    if size != _ONE:
                        out[name] = size
                    else:
                        out.pop(name, None)
    _CACHE[node] = out
    return out


def _longest(values: pl.Series) -> int:
    """The most bytes of a public column's values in text form (JSON for a list or struct)."""
    if values.dtype == pl.Binary:
        found = values.bin.size().max()
    elif values.dtype.is_nested():
        found = values.to_frame().select(pl.struct(pl.all()).struct.json_encode().str.len_bytes()).to_series().max()
    else:
        found = values.cast(pl.String, strict=False).str.len_bytes().max()
    return int(found) if isinstance(found, int) else 0


def _output_names(expr: pl.Expr, schema: pl.Schema, output: pl.Schema) -> list[str]:
    """The columns ``expr`` writes over ``schema`` (every column of the step's ``output`` if Polars cannot say).

    One, or those of a selector (``pl.col(pl.String)``, ``pl.all()``) or a ``name.keep()``: no single output name.
    """
    try:
        return [expr.meta.output_name()]
    except pl.exceptions.PolarsError:
        pass
    try:
        return list(pl.LazyFrame(schema=schema).select(expr).collect_schema().names())
    except pl.exceptions.PolarsError:
        return list(output.names())


class _Walk:
    def __init__(self, columns: Mapping[str, Growth], names: Sequence[str], check: bool) -> None:
        self.columns = columns
        self.names = list(dict.fromkeys([*names, *columns]))   # the columns a selector may pick
        self.check = check

    def size(self, node: Any) -> Growth:
        out = self._size(node)
        if self.check and out[0] + out[1] > MAX_GROWTH:
            raise _TooLarge(out)
        return out

    def _sum(self, nodes: list[Any]) -> Growth:
        sizes = [self.size(n) for n in nodes]
        return sum(s[0] for s in sizes), sum(s[1] for s in sizes)

    def name_bytes(self, node: Any) -> int:
        """The bytes of the field names an input of ``pl.struct`` makes, each with a field's punctuation.

        A selector's: every column's it may pick.
        """
        if isinstance(node, dict) and len(node) == 1 and next(iter(node)) in ("Selector", "Columns", "Nth"):
            return sum(_FIELD + len(n.encode("utf-8", "surrogatepass")) for n in self.names)
        return _name_bytes(node)

    def _size(self, node: Any) -> Growth:
        if not isinstance(node, dict) or len(node) != 1:
            return self._sum(_children(node))
        kind, body = next(iter(node.items()))
        if kind == "Column" and isinstance(body, str):
            return self.columns.get(body, _ONE)
        if kind in ("Selector", "Columns", "Nth"):      # inside a function, one input per column it picks: all
            sizes = [self.columns.get(n, _ONE) for n in self.names] or [_ONE]
            return sum(s[0] for s in sizes), sum(s[1] for s in sizes)
        if kind == "Literal":
            return 0, _literal_bytes(node, longest=True)
        if kind == "Ternary" and isinstance(body, dict):
            self.size(body.get("predicate"))
            t, f = self.size(body.get("truthy")), self.size(body.get("falsy"))
            return max(t[0], f[0]), max(t[1], f[1])
        if kind == "Function" and isinstance(body, dict) and isinstance(body.get("input"), list):
            return self._function(body["input"], body.get("function"))
        if kind == "Cast" and isinstance(body, dict):
            a, b = self.size(body.get("expr"))
            if body.get("dtype") in ({"Literal": "String"}, {"Literal": "Binary"}):   # the value's own text
                return a, b
            return a, max(b, _VALUE)                    # (an Enum's value is the string cast to it)
        if kind == "BinaryExpr" and isinstance(body, dict):     # a concatenation, or a number or boolean
            a, b = self._sum([body.get("left"), body.get("right")])
            return a, max(b, _VALUE)
        return self._sum(_children(body))

    def _function(self, inputs: list[Any], function: Any) -> Growth:
        sizes = [self.size(i) for i in inputs]
        first = sizes[0] if sizes else (0, 0)
        total = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
        if function == "AsStruct":                       # each field's name, quotes, colon, comma, a null or number
            return total[0], total[1] + sum(_FIELD + self.name_bytes(i) for i in inputs) + 2
        if not isinstance(function, dict) or len(function) != 1:
            return total[0], max(total[1], _VALUE)
        namespace, op = next(iter(function.items()))
        name = op if isinstance(op, str) else next(iter(op)) if isinstance(op, dict) and op else ""
        options = op.get(name) if isinstance(op, dict) else None
        if namespace == "StructExpr":
            return _struct(name, options, first, total)
        if namespace == "TemporalExpr" and name == "ToString" and isinstance(options, str):
            return 0, _FORMAT * len(options.encode())    # the format's text and what each specifier writes
        if namespace != "StringExpr":                   # its inputs, or a number, date or boolean
            return total[0], max(total[1], _VALUE)
        if name in ("SplitExact", "SplitN"):                        # up to n + 1 fields named field_0 ... field_n
            n = options.get("n") if isinstance(options, dict) else options
            n = n if isinstance(n, int) and not isinstance(n, bool) else MAX_LITERAL
            return first[0], first[1] + (abs(n) + 1) * (_FIELD + len(f"field_{abs(n)}")) + 2
        return self._string(name, options if isinstance(options, dict) else {}, inputs, first, total)

    def _string(self, name: str, options: dict[str, Any], inputs: list[Any], first: Growth, total: Growth) -> Growth:
        a, b = first
        if name in _SCALE:
            return a * _SCALE[name], b * _SCALE[name]
        if name == "Base64Encode":                      # 4 characters per 3 bytes, padded
            return 2 * a, 2 * b + 4
        if name in ("PadStart", "PadEnd", "ZFill"):     # max(value, n fill characters)
            width = _literal_int(inputs[1]) if len(inputs) > 1 else None
            fill = len(str(options.get("fill_char", "0")).encode()) or 4
            return a, max(b, fill * (MAX_LITERAL if width is None else abs(width)))
        if name == "ConcatHorizontal":
            delimiter = len(str(options.get("delimiter", "")).encode())
            return total[0], total[1] + delimiter * max(len(inputs) - 1, 0)
        if name == "Format":
            return total[0], total[1] + len(str(options.get("format", "")).encode())
        if name == "Replace" and len(inputs) == 3:
            pattern = _literal_bytes(inputs[1], longest=False)
            value = _literal_bytes(inputs[2], longest=True)
            if options.get("literal") is True:      # no references to the match
                if pattern > 0:                      # each match of ≥ pattern bytes becomes value
                    times = max(1, -(-value // pattern))
                    return a * times, b * times
                return a * (1 + value), b * (1 + value) + value
            return insert(first, value)
        if name == "ReplaceMany" and len(inputs) >= 3:              # a pattern may be empty
            return insert(first, _literal_bytes(inputs[2], longest=True))
        if name in ("Split", "SplitRegex", "ExtractAll"):           # up to L + 1 disjoint pieces, JSON-escaped
            return _elements(first, 1, _ESCAPE)
        if name in ("ExtractMany", "FindMany"):                     # overlapping: each pattern at each position
            patterns = _literal_value(inputs[1]) if len(inputs) > 1 else None
            count = len(json.dumps(inputs[1:])) if patterns is None else patterns.len()   # (unread: its size)
            each = _INDEX if name == "FindMany" else _ESCAPE * _literal_bytes(inputs[1], longest=True)   # (cached)
            if options.get("overlapping") is True:
                return _elements(first, max(count, 1), max(each, 1))
            return _elements(first, 1, _ESCAPE if name == "ExtractMany" else _INDEX)
        if name in _NOT_TEXT:                                       # a number, boolean or date: its own text
            return total[0], max(total[1], _VALUE)
        if name == "ExtractGroups":                                 # nested groups copy the same bytes again
            fields = _fields(options.get("dtype"))
            return (a * max(len(fields), 1), b * max(len(fields), 1)
                    + sum(_FIELD + len(f.encode()) for f in fields) + 2)
        return total


def _struct(name: str, options: Any, first: Growth, total: Growth) -> Growth:
    """A struct function's bound: JSON text writes a control byte as 6 characters; renames add their names."""
    a, b = first
    if name == "JsonEncode":
        return _ESCAPE * a, _ESCAPE * b + 2
    if name == "RenameFields":                         # the new names (the old ones' room is kept: a bound)
        names = options if isinstance(options, list) else []
        return a, b + sum(_FIELD + len(str(n).encode()) for n in names)
    if name in ("PrefixFields", "SuffixFields"):       # at most one field per byte of the struct's JSON text
        affix = len(str(options).encode())
        return a * (1 + affix), b * (1 + affix)
    return total


def _elements(size: Growth, per: int, each: int) -> Growth:
    """A list of up to ``per`` elements at each of the L + 1 positions of its input, in JSON text.

    Each element up to ``each`` bytes (a split's pieces: disjoint, so ``each`` per input byte in all), plus a comma
    and two quotes, plus the brackets.
    """
    a, b = size
    k = per * (each + 3)
    return k * a, k * (b + 1) + 2


def _name_bytes(node: Any) -> int:
    """The length of a serialized expression's output name (the field name it makes in a struct).

    Its serialized size when Polars cannot say (an expression over a selector: every name is in its tree).
    """
    try:
        expr = pl.Expr.deserialize(io.StringIO(json.dumps(node)), format="json")
        return len(expr.meta.output_name().encode("utf-8", "surrogatepass"))
    except Exception:  # noqa: BLE001 — no single output name: the caller's refusals come later; an upper bound
        return len(json.dumps(node).encode())


def _fields(dtype: Any) -> list[str]:
    """The field names of a serialized struct type (``{"Struct": [{"name": ...}, ...]}``), or []."""
    fields = dtype.get("Struct") if isinstance(dtype, dict) else None
    return [str(f.get("name", "")) for f in fields if isinstance(f, dict)] if isinstance(fields, list) else []


def insert(size: Growth, value: int) -> Growth:
    """A replacement of up to ``value`` bytes at each of the L + 1 positions.

    With ``$0``-style references to the match: at most one per two bytes of ``value``; the matches do not overlap.
    """
    a, b = size
    times = 1 + 2 * value
    return a * times, b * times + value


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node.values())
    if isinstance(node, list):
        return node
    return []


def _literal_value(node: Any) -> pl.Series | None:
    """A literal's values (a list's elements), read by Polars; None when it cannot be read."""
    return _read_literal(json.dumps(node))


@plain_cache(maxsize=512)
def _read_literal(text: str) -> pl.Series | None:
    """(Cached: a chain's steps and the derived columns' bounds walk the same literals again; read-only use.)"""
    try:
        value = pl.select(pl.Expr.deserialize(io.StringIO(text), format="json")).to_series()
    except Exception:  # noqa: BLE001 — not a literal Polars reads back: the caller takes the worst case
        return None
    while isinstance(value.dtype, pl.List | pl.Array):
        value = value.explode() if isinstance(value.dtype, pl.List) else value.arr.explode()
    return value


def _dyn_int(node: Any) -> int | None:
    """The value of a Python integer literal (``pl.lit(3)``, ``x * 2``), read without Polars, or None."""
    scalar = node.get("Literal") if isinstance(node, dict) and len(node) == 1 else None
    inner = scalar.get("Dyn") if isinstance(scalar, dict) and len(scalar) == 1 else None
    value = inner.get("Int") if isinstance(inner, dict) and len(inner) == 1 else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _literal_bytes(node: Any, *, longest: bool) -> int:
    """The longest (or, ``longest=False``, shortest) value of a literal, in bytes of its text.

    The literal's serialized size (an upper bound) when it cannot be read, and 0 for the shortest then.
    """
    scalar = node.get("Literal") if isinstance(node, dict) and len(node) == 1 else None
    if isinstance(scalar, dict) and len(scalar) == 1 and scalar.keys() <= {"Scalar", "Dyn"}:
        inner = next(iter(scalar.values()))
        if isinstance(inner, dict) and len(inner) == 1 and next(iter(inner)) in ("String", "Str"):
            text = next(iter(inner.values()))
            if isinstance(text, str):        # (the common case, read without Polars)
                return len(text.encode("utf-8", "surrogatepass"))
    if (number := _dyn_int(node)) is not None:
        return len(str(number))
    value = _literal_value(node)
    if value is None:
        return len(json.dumps(node)) if longest else 0
    try:
        if value.dtype == pl.Binary:
            lengths = value.bin.size()
        else:
            lengths = value.cast(pl.String, strict=False).str.len_bytes()
    except Exception:  # noqa: BLE001 — a type without a text form (a duration, a struct): its serialized size
        return len(json.dumps(node)) if longest else 0
    found = lengths.max() if longest else lengths.min()
    return int(found) if isinstance(found, int) else 0


def _literal_int(node: Any) -> int | None:
    if (number := _dyn_int(node)) is not None:
        return number
    value = _literal_value(node)
    if value is None or value.len() != 1 or not value.dtype.is_integer():
        return None
    item = value.item()
    return item if isinstance(item, int) else None
