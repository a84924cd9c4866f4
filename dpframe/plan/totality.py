"""Row-level expressions that cannot fail on any private value.

A query fails *after* its budget is charged if an operation raises (or panics in the engine) on some
private value. That failure is not covered by any ε: with ``pl.when(P).then(...)`` around an operation
that fails on every non-null value, "the query failed" answers any row predicate ``P`` exactly. So a
row-level expression is run only in a form that is *total*: defined for every value of its input types.
:func:`total_expression` makes it so, at build time and free, in three steps:

1. **The allowlist** (:func:`~dpframe.plan.rowlevel.check_row_level`): only reviewed, row-by-row
   operations, with parameters that are literals; strict casts and ``strict=True`` / ``"raise"`` modes
   are refused.
2. **Temporal guards.** Polars computes dates with a calendar that covers about ±262,000 years; a date
   or datetime outside it makes ``month_start``, ``truncate``, ``to_string``, a cast to a string and
   other operations panic, and such values are easy to make (``cast(pl.Datetime("ms"), strict=False)``
   of a large integer) or may be in the data. Every date, datetime or duration that a function or cast
   reads is first replaced by null when it lies more than ``SAFE_DAYS`` (about 100,000 years) from
   1970; a literal offset, rounding or truncation then stays inside the calendar. The branches of a
   ``when/then/otherwise`` of an integer type are cast to that type: Polars types a batch whose rows all
   take a branch built from literals alone by the literal, and other batches by the supertype, and the
   mismatch panicked on some rows only.
3. **The isolation probe.** Every operation of the guarded expression (function, cast, arithmetic,
   comparison, ``when``) is run on its own, with each non-literal input replaced by *every* adversarial
   value of that input's type (:func:`~dpframe.plan.values.probe_values`: extremes, NaN/inf, odd
   Unicode, out-of-range dates, nulls; all combinations for several inputs). Since every operation is
   then known not to fail on any value of its input type, neither does the expression, whatever rows
   reach it. An operation that fails on some probe value — a literal parameter outside its legal
   domain (``str.to_integer(base=1)``, a ``to_string`` format that a ``Date`` cannot fill,
   ``dt.round("0ns")``), decimal arithmetic that overflows, ``cast_time_unit("ns")`` of a far date —
   is refused with the value it failed on. Any exception counts, pyo3's ``PanicException`` included.

Literal strings, and the lengths ``pad_start``/``pad_end``/``zfill``/``split_exact``/``splitn`` take,
are limited to ``MAX_LITERAL`` characters, so no expression can make a row's value grow without bound.

Example:
    >>> import polars as pl
    >>> schema = pl.Schema({"s": pl.String, "d": pl.Date})
    >>> total_expression(pl.col("s").str.to_integer(base=16, strict=False), "exprs", schema) is not None
    True
    >>> total_expression(pl.col("s").str.to_integer(base=1, strict=False), "exprs", schema)
    Traceback (most recent call last):
    ...
    dpframe.errors.PlanError: exprs: 'StringExpr:ToInteger' fails on some values of its input (ComputeError on ...
    >>> guarded = total_expression(pl.col("d").dt.month_start(), "exprs", schema)
    >>> far = pl.DataFrame({"d": [0, 90_000_000]}, schema={"d": pl.Int32}).with_columns(pl.col("d").cast(pl.Date))
    >>> far.select(guarded)["d"].to_list()         # the far date is null, not a panic
    [datetime.date(1970, 1, 1), None]

"""

from __future__ import annotations

import copy
import io
import itertools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import polars as pl

from dpframe.engine_output import ENGINE, check_engine
from dpframe.errors import PlanError, SchemaError
from dpframe.plan.growth import Growth, check_growth
from dpframe.plan.rowlevel import MAX_LITERAL, check_row_level, too_deep
from dpframe.plan.values import guard_range, probe_values
from dpframe.sealed import plain_cache, plain_expr

# Functions that read a temporal value's null mask or physical integer only: they cannot fail on it.
_PHYSICAL = {"Boolean:IsNull", "Boolean:IsNotNull", "ToPhysical"}
_LENGTHS = {"StringExpr:PadStart", "StringExpr:PadEnd", "StringExpr:ZFill"}
_COUNTS = {"StringExpr:SplitExact", "StringExpr:SplitN"}
_MAX_ROWS = 20_000
_FLOATS = {"Float", "Float32", "Float64"}
_IN = "__dp_in"


def _variant(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        return str(next(iter(value)))
    return None


def _label(function: Any) -> str:
    """``"StringExpr:ToInteger"`` for a namespaced function, ``"Abs"`` for a plain one."""
    name = _variant(function) or "?"
    sub = _variant(function.get(name)) if isinstance(function, dict) else None
    return f"{name}:{sub}" if sub else name


def _is_literal(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"Literal"}


def _lossy(node: Any) -> bool:
    """Whether ``node`` holds a NaN or ±inf float literal, which Polars' JSON form writes as ``null``."""
    if isinstance(node, dict):
        return any((k in _FLOATS and v is None) or _lossy(v) for k, v in node.items())
    return isinstance(node, list) and any(_lossy(v) for v in node)


def _typable(node: Any) -> Any:
    """``node`` with every lost (NaN/±inf) float literal written as 0.0: the same types, and it deserializes."""
    if isinstance(node, dict):
        return {k: 0.0 if k in _FLOATS and v is None else _typable(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_typable(v) for v in node]
    return node


def _split(node: Any) -> tuple[str | None, Any]:
    """(variant, payload) of an expression node, or (None, None) for anything else."""
    if isinstance(node, dict) and len(node) == 1:
        variant, payload = next(iter(node.items()))
        return str(variant), payload
    return None, None


def _expr(node: Any) -> pl.Expr:
    return pl.Expr.deserialize(io.StringIO(json.dumps(node)), format="json")


class _Total:
    """One expression over one (public) input schema: guard, then probe every operation."""

    def __init__(self, schema: pl.Schema, argument: str) -> None:
        self.schema = schema
        self.argument = argument

    def refuse(self, what: str, fix: str) -> PlanError:
        return PlanError(what, argument=self.argument, fix=fix)

    def dtypes(self, node: Any) -> list[pl.DataType]:
        typable = _typable(node)
        return list(output_schema(lambda f: f.select(_expr(typable)), self.schema, self.argument).dtypes())

    # -- 2. guards --------------------------------------------------------------------------------------
    def guard(self, node: Any) -> Any:
        """``node``, or ``when(node's physical value is in range).then(node)`` for a temporal node."""
        if _is_literal(node):
            return node
        types = self.dtypes(node)
        ranges = {guard_range(t) for t in types}
        if ranges == {None}:
            return node
        if len(types) != 1:
            raise self.refuse("applies a temporal operation to several columns of different types at once",
                              "apply it to each column by name, e.g. pl.col('a').dt.year(), pl.col('b').dt.year()")
        lo, hi = ranges.pop() or (0, 0)
        placeholder = pl.col("__dp_guarded")
        guarded = pl.when(placeholder.to_physical().is_between(lo, hi)).then(placeholder).otherwise(None)
        tree = json.loads(guarded.meta.serialize(format="json"))
        return _replace_column(tree, "__dp_guarded", node)

    def typed_branches(self, node: Any, payload: dict[str, Any]) -> dict[str, Any]:
        """A ternary's rewritten ``payload`` with both branches cast to its planned type when that is an integer.

        Polars types a branch built from integer literals alone (``pl.lit(3)``, ``-pl.lit(2**31)``) by its value
        where every row of a batch takes it, and by the supertype where rows take both branches: its batches then
        disagree (``when(p).then(pl.lit(3)).otherwise(pl.lit(2**40))`` panicked on 20 rows that ``p`` split, ran on
        two), so a failure told how the private rows fall around ``p``. Cast to the type the plan gives the
        ternary (a non-strict integer cast cannot fail), every batch has that type, whatever the rows (a branch
        already reported in that type may compute in another: ``pl.lit(1) + pl.lit(2)``). A null literal is left
        as it is (the Spark backend translates it natively).
        """
        types = self.dtypes(node)
        if len(types) != 1 or not types[0].is_integer():
            return payload
        cast = json.loads(pl.col("__dp_cast").cast(types[0], strict=False).meta.serialize(format="json"))
        return {**payload, **{k: _replace_column(cast, "__dp_cast", payload[k]) for k in ("truthy", "falsy")
                              if self.dtypes(node["Ternary"][k]) != [pl.Null()]}}

    def rewrite(self, node: Any) -> Any:
        """The expression with a guard in front of every temporal input of a function or cast."""
        variant, payload = _split(node)
        if variant == "Alias":
            return {"Alias": [self.rewrite(payload[0]), *payload[1:]]}
        if variant == "KeepName":
            return {"KeepName": self.rewrite(payload)}
        if variant == "RenameAlias":
            return {"RenameAlias": {**payload, "expr": self.rewrite(payload["expr"])}}
        if variant == "Ternary":
            return {"Ternary": self.typed_branches(node, {k: self.rewrite(v) for k, v in payload.items()})}
        if variant == "BinaryExpr":
            return {"BinaryExpr": {**payload, "left": self.rewrite(payload["left"]),
                                   "right": self.rewrite(payload["right"])}}
        if variant == "Cast":
            return {"Cast": {**payload, "expr": self.guard(self.rewrite(payload["expr"]))}}
        if variant == "Function":
            inputs = [self.rewrite(i) for i in payload.get("input", [])]
            if _label(payload.get("function")) not in _PHYSICAL:
                inputs = [self.guard(i) for i in inputs]
            return {"Function": {**payload, "input": inputs}}
        return node

    # -- 3. the isolation probe ------------------------------------------------------------------------
    def probe_all(self, node: Any) -> None:
        """Probe every operation node of ``node`` (the unguarded tree; each probe guards its own inputs)."""
        variant, payload = _split(node)
        children: list[Any] = []
        if variant == "Alias":
            children = [payload[0]]
        elif variant == "KeepName":
            children = [payload]
        elif variant == "RenameAlias":
            children = [payload["expr"]]
        elif variant in ("Ternary", "BinaryExpr", "Cast", "Function"):
            children = _inputs(node)
            self.limits(node)
            self.probe(node)
        for child in children:
            self.probe_all(child)

    def limits(self, node: Any) -> None:
        variant, payload = next(iter(node.items()))
        if variant != "Function":
            return
        label = _label(payload.get("function"))
        sizes: list[int] = []
        if label in _LENGTHS:
            sizes = [abs(i["Literal"]["Dyn"]["Int"]) for i in payload["input"][1:]
                     if _is_literal(i) and isinstance(i["Literal"].get("Dyn"), dict) and "Int" in i["Literal"]["Dyn"]]
        elif label in _COUNTS:
            options = payload["function"]["StringExpr"][label.split(":")[1]]
            sizes = [int(options["n"] if isinstance(options, dict) else options)]
        if any(s > MAX_LITERAL for s in sizes):
            raise self.refuse(f"{label} with a length above {MAX_LITERAL:,}",
                              f"use a length of at most {MAX_LITERAL:,}")

    def probe(self, node: Any) -> None:
        inputs = _inputs(node)
        slots = [j for j, i in enumerate(inputs) if not _is_literal(i) or _lossy(i)]
        choices = [self.dtypes(inputs[j]) for j in slots]
        for types in itertools.product(*choices):
            isolated = copy.deepcopy(node)
            _set_inputs(isolated, {j: {"Column": f"{_IN}{k}"} for k, j in enumerate(slots)})
            schema = pl.Schema({f"{_IN}{k}": t for k, t in enumerate(types)})
            failure = _run_probe(json.dumps(isolated), tuple(schema.items()))
            if failure is not None:
                raise self.refuse(f"{_describe(node)!r} fails on some values of its input ({failure}), so it "
                                  "could fail on the private data, and a failure would reveal them",
                                  _FIX.get(_describe(node), "use another operation, or check its parameters "
                                                            "(a format, base, unit or duration) against the "
                                                            "column's type"))


_FIX = {
    "StringExpr:ToInteger": "use a base from 2 to 36",
    "TemporalExpr:CastTimeUnit": "cast to a coarser unit, or with .cast(pl.Datetime(unit), strict=False) "
                                 "(out-of-range values become null)",
    "TemporalExpr:ToString": "use a format the column's type can fill (a Date has no %H, %M, %S)",
}


def _describe(node: Any) -> str:
    variant, payload = next(iter(node.items()))
    if variant == "Function":
        return _label(payload.get("function"))
    if variant == "BinaryExpr":
        return f"operator {payload.get('op')}"
    if variant == "Cast":
        return f"cast to {_variant(payload.get('dtype', {}).get('Literal'))}"
    return str(variant)


def _inputs(node: Any) -> list[Any]:
    variant, payload = next(iter(node.items()))
    if variant == "Function":
        return list(payload.get("input", []))
    if variant == "Cast":
        return [payload["expr"]]
    if variant == "BinaryExpr":
        return [payload["left"], payload["right"]]
    return [payload["predicate"], payload["truthy"], payload["falsy"]]   # Ternary


def _set_inputs(node: Any, new: dict[int, Any]) -> None:
    variant, payload = next(iter(node.items()))
    if variant == "Function":
        payload["input"] = [new.get(j, i) for j, i in enumerate(payload.get("input", []))]
    elif variant == "Cast":
        payload["expr"] = new.get(0, payload["expr"])
    else:
        keys = ("left", "right") if variant == "BinaryExpr" else ("predicate", "truthy", "falsy")
        for j, key in enumerate(keys):
            payload[key] = new.get(j, payload[key])


def _replace_column(tree: Any, name: str, node: Any) -> Any:
    if tree == {"Column": name}:
        return node
    if isinstance(tree, dict):
        return {k: _replace_column(v, name, node) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_replace_column(v, name, node) for v in tree]
    return tree


def _probe_frame(schema: pl.Schema) -> pl.DataFrame:
    """Every combination of the columns' adversarial values (a deterministic spread when there are too many).

    With no column (an operation on literals only) one row: it runs once per row of the data, so it
    must not fail either.
    """
    if not schema:
        return pl.DataFrame({"__dp_row": [0]})
    pools = [probe_values(t).alias(name) for name, t in schema.items()]
    total = math.prod(p.len() for p in pools)   # exact: NumPy's int64 product wrapped past 2⁶³ (10 strings)
    if total <= _MAX_ROWS:
        frame = pools[0].to_frame()
        for p in pools[1:]:
            frame = frame.join(p.to_frame(), how="cross")
        return frame
    length = _MAX_ROWS
    rng = np.random.default_rng(0)
    columns = [p.gather(np.concatenate([rng.permutation(p.len()) for _ in range(length // p.len() + 1)])[:length])
               for p in pools]
    return pl.DataFrame(columns)


@plain_cache(maxsize=4096)
def _run_probe(tree: str, columns: tuple[tuple[str, pl.DataType], ...]) -> str | None:
    """Run one isolated, guarded operation on every adversarial value: None, or how it failed."""
    check_engine()      # the answer is kept for the process: never an engine object's (engine_output)
    schema = pl.Schema(columns)
    node = json.loads(tree)
    guarded = _Total(schema, "exprs").rewrite(node)
    frame = _probe_frame(schema)

    def failure(start: int, length: int) -> str | None:
        """How the probe fails on rows ``[start, start + length)`` as one frame (None: it runs)."""
        try:
            frame.slice(start, length).lazy().select(_expr(guarded).alias("__dp_out")).collect(engine=ENGINE)
            return None
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:   # noqa: BLE001 — any failure, PanicException included
            return type(e).__name__

    kind = failure(0, frame.height)
    if kind is None:
        return None
    row = _first_failing_row(frame.height, lambda a, b: failure(a, b - a) is not None)
    if row is None:
        return kind
    values = ", ".join(f"{t} value {_shown(frame[c], row)}" for c, t in schema.items())
    return f"{failure(row, 1)} on {values}"


def _first_failing_row(height: int, fails: Callable[[int, int], bool]) -> int | None:
    """The first row that fails alone, for a refusal's message: rows ``[0, height)`` fail as one frame.

    Bisection (a few dozen probe runs, where one row at a time took up to thousands): a part that fails
    holds the first row that fails alone when rows fail independently, as element-wise operations do; a
    part whose halves both run (a failure only the rows together cause) is searched one row at a time.

    Example:
        >>> _first_failing_row(1000, lambda a, b: a <= 617 < b)
        617

    """
    a, b = 0, height
    while b - a > 1:
        middle = (a + b) // 2
        if fails(a, middle):
            b = middle
        elif fails(middle, b):
            a = middle
        else:
            return next((row for row in range(a, b) if fails(row, row + 1)), None)
    return a


def _shown(column: pl.Series, row: int) -> str:
    """One probe value for a message (a far date has no Python form: then its physical integer)."""
    try:
        text = repr(column[row])
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:   # noqa: BLE001 — out of Python's date range (an error or a Polars panic)
        text = f"{column.to_physical()[row]} (physical)"
    return text if len(text) <= 48 else text[:45] + "..."


def output_schema(apply: Callable[[pl.LazyFrame], pl.LazyFrame], schema: pl.Schema, argument: str) -> pl.Schema:
    """The schema ``apply`` gives on an empty frame of ``schema`` (reads no data), or a :class:`SchemaError`.

    ``apply`` receives public values only: an empty frame with the public schema.

    Example:
        >>> output_schema(lambda f: f.select(pl.col("x") + 1), pl.Schema({"x": pl.Int8}), "exprs")
        Schema([('x', Int8)])

    """
    try:
        return apply(pl.LazyFrame(schema=schema)).collect(engine=ENGINE).schema
    except pl.exceptions.ColumnNotFoundError as e:
        raise SchemaError(f"unknown column: {str(e).splitlines()[0]}", argument=argument,
                          fix=f"use one of the columns {list(schema.names())}") from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:   # noqa: BLE001 — a Polars panic (pyo3's PanicException) too
        lines = str(e).strip().splitlines()
        raise SchemaError(f"invalid expression: {type(e).__name__}: {lines[0] if lines else ''}", argument=argument,
                          fix="check the column types with Frame.schema") from None


def total_expression(expr: object, argument: str, schema: pl.Schema,
                     growth: Mapping[str, Growth] | None = None) -> pl.Expr:
    """``expr`` in a form that cannot fail on any value of ``schema``, or a :class:`PlanError` saying why not.

    Checks the allowlist (:func:`~dpframe.plan.rowlevel.check_row_level`), bounds how much its strings may grow
    (:func:`~dpframe.plan.growth.check_growth`, its input columns bounded by ``growth``: what earlier steps
    derived, :func:`~dpframe.plan.growth.column_growth`), limits literal sizes, adds the
    temporal guards and probes every operation in isolation (see the module docstring). Free: reads no
    private row. The result is what runs on every backend.
    """
    if isinstance(expr, pl.Expr):
        expr = _owned(expr)     # read once: what is checked below is what runs (a subclass's meta could lie)
    check_row_level(expr, argument, schema)
    assert isinstance(expr, pl.Expr)
    check_growth(expr, argument, growth or {}, schema.names())   # before anything computes it (the probes below)
    output_schema(lambda f: f.select(expr), schema, argument)
    text = expr.meta.serialize(format="json")
    guarded = _total(text, tuple(schema.items()), argument)
    if guarded is None:
        return expr
    try:
        faithful = _expr(json.loads(text)).meta.serialize() == expr.meta.serialize()
    except pl.exceptions.PolarsError:
        faithful = False
    if not faithful:
        raise PlanError("combines a NaN or infinite literal with a date or time operation in one expression",
                        argument=argument, fix="compute the two parts in separate with_columns(...) steps")
    return _expr(json.loads(guarded))


def _owned(expr: pl.Expr) -> pl.Expr:
    """A plain copy of ``expr`` that shares no memory with the caller's (read once, through Polars' binary form).

    A literal Series in an expression shares the memory of the NumPy array it was built from:
    ``pl.col("x").replace(pl.Series(array), ...)`` was checked with distinct old values, then ``array[1] =
    array[0]`` made every query reading it fail after its charge. One that cannot be serialized (a Python
    function) is returned as a plain expression for :func:`check_row_level` to refuse.

    Example:
        >>> import numpy as np
        >>> old = np.array([1, 2])
        >>> mine = _owned(pl.col("x").replace(pl.Series(old), pl.Series([10, 20])))
        >>> old[1] = 1; pl.DataFrame({"x": [1, 2]}).select(mine)["x"].to_list()
        [10, 20]

    """
    expr = plain_expr(expr)
    try:
        data = expr.meta.serialize()
    except Exception:  # noqa: BLE001 — Python UDFs do not serialize without pickling: refused by the allowlist
        return expr
    return pl.Expr.deserialize(io.BytesIO(data))


@plain_cache(maxsize=1024)
def _total(text: str, columns: tuple[tuple[str, pl.DataType], ...], argument: str) -> str | None:
    """The guarded form of one serialized expression after probing it; None when it needs no guard.

    Cached: queries rebuild the same expressions.
    """
    tree = json.loads(text)
    if nesting(tree) > MAX_NESTING:     # Polars' JSON reader stops there: the probes below could not rebuild it
        raise too_deep(argument)
    _check_literals(tree, argument)
    total = _Total(pl.Schema(columns), argument)
    total.probe_all(tree)
    rewritten = total.rewrite(tree)
    if nesting(rewritten) > MAX_NESTING:    # the guards add levels (a cast per integer when): Polars could not read
        raise too_deep(argument)            # it back (a bare ComputeError from 32 nested whens, review 55b)
    return None if rewritten == tree else json.dumps(rewritten)


MAX_NESTING = 129
"""The deepest serialized expression tree (JSON levels) the probes can check: Polars reads no deeper JSON back
(serde_json: the root and 128 levels below it; a chain of 63 ``|`` comparisons reaches it), so a deeper one is
refused as nested too deep, free."""


def nesting(tree: Any) -> int:
    """How many JSON levels ``tree`` (lists and dicts) nests, without recursing.

    Example:
        >>> nesting({"a": [1, {"b": 2}]})
        3

    """
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _check_literals(tree: Any, argument: str) -> None:
    if isinstance(tree, dict):
        literal = tree.get("Literal")
        scalar = literal.get("Scalar") if isinstance(literal, dict) else None
        text = scalar.get("String") if isinstance(scalar, dict) else None
        if isinstance(text, str) and len(text) > MAX_LITERAL:
            raise PlanError(f"uses a string literal of {len(text):,} characters", argument=argument,
                            fix=f"use literals of at most {MAX_LITERAL:,} characters")
        for v in tree.values():
            _check_literals(v, argument)
    elif isinstance(tree, list):
        for v in tree:
            _check_literals(v, argument)


__all__ = ["MAX_LITERAL", "MAX_NESTING", "nesting", "output_schema", "total_expression"]
