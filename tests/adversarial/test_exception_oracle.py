"""The exception-oracle fuzzer: no row-level expression dpframe accepts may fail on any value.

A failure after the budget is charged answers a row predicate exactly (``pl.when(P).then(...)`` around an
operation that fails on some values), outside any ε. :func:`dpframe.plan.totality.total_expression`
refuses, at build time, every operation it cannot show to be total. This fuzzer checks that claim from
outside: every allow-listed operation (``operations.CASES``: each with adversarial parameters, on every
input type it applies to) is either refused when the query is built, or runs without any exception —
``PanicException`` included — on values the build-time probe did *not* use (random values of the type
from Polars' own Hypothesis strategies, plus extra edge values), as a whole column, one row at a time,
and end to end through a session on every backend.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing.parametric import series

import dpframe as dp
from dpframe.errors import PlanError, SchemaError
from dpframe.plan.nodes import Scan, Select
from dpframe.plan.rowlevel import allowed_operations
from dpframe.plan.totality import total_expression
from dpframe.plan.values import probe_values

from .operations import CASES, Case

CI = settings(max_examples=8, derandomize=True, deadline=None, database=None)
DEEP = settings(max_examples=200, deadline=None, database=None)


def _labels(tree: Any) -> Iterator[str]:
    """The allowlist labels of every operation in a serialized expression."""
    if isinstance(tree, dict):
        if len(tree) == 1:
            variant, payload = next(iter(tree.items()))
            if variant == "Function" and isinstance(payload, dict):
                function = payload["function"]
                name = function if isinstance(function, str) else next(iter(function))
                sub = function.get(name) if isinstance(function, dict) else None
                sub = sub if isinstance(sub, str) else next(iter(sub)) if isinstance(sub, dict) and sub else None
                yield f"{name}:{sub}" if sub and name in {"Pow", "Trigonometry", "Boolean", "StringExpr",
                                                          "TemporalExpr", "StructExpr"} else name
            elif variant == "BinaryExpr" and isinstance(payload, dict):
                yield f"operator {payload['op']}"
            elif variant in ("Cast", "Ternary"):
                yield variant
            elif variant == "RenameAlias":
                function = payload["function"]
                yield f"name.{function if isinstance(function, str) else next(iter(function))}"
        for value in tree.values():
            yield from _labels(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _labels(value)


def _schema(case: Case, dtype: pl.DataType) -> pl.Schema:
    return pl.Schema({"c": dtype, "d": case.second if case.second is not None else pl.Null()})


_ACCEPTED: dict[tuple[str, str], pl.Expr | None] = {}


def _accepted(name: str, case: Case, dtype: pl.DataType) -> pl.Expr | None:
    """:func:`_check` once per operation and input type (the random tests draw the same pairs again and again)."""
    key = (name, repr(dtype))
    if key not in _ACCEPTED:
        _ACCEPTED[key] = _check(case, dtype)
    return _ACCEPTED[key]


def _check(case: Case, dtype: pl.DataType) -> pl.Expr | None:
    """The checked expression, or None when dpframe refuses it at build time (data-independent: allowed).

    Refused means what a frame step refuses: the expression's own checks (:func:`total_expression`) and
    the step's, which also compares the type each output column is computed in with the type Polars reports
    for it (a struct cast to a number is reported as the number but computed as a struct of numbers, and
    panics where a null struct meets a non-null one: refused when the step is built).
    """
    try:
        expr = case.build(pl.col("c"), pl.col("d")).alias("out")
    except (AttributeError, TypeError, ValueError, pl.exceptions.PolarsError):
        return None   # not buildable for this type in this Polars version
    schema = _schema(case, dtype)
    try:
        checked = total_expression(expr, "exprs", schema)
        Select.of(Scan.of("t", schema), [expr], {}, None)
    except (PlanError, SchemaError):
        return None
    return checked


def _run(frame: pl.DataFrame, expr: pl.Expr) -> None:
    try:
        frame.lazy().select(expr).collect()
    except BaseException as e:   # noqa: BLE001 — PanicException derives from BaseException
        pytest.fail(f"{expr} failed with {type(e).__name__}: {str(e)[:200]}")


def _frame(c: pl.Series, d: pl.Series) -> pl.DataFrame:
    return c.alias("c").to_frame().join(d.alias("d").to_frame(), how="cross")


def test_every_allowed_operation_is_fuzzed() -> None:
    """A new allowlist entry without a case here fails: the fuzzer must cover every operation dpframe accepts."""
    covered = {label for case in CASES.values()
               for label in _labels(json.loads(case.build(pl.col("c"), pl.col("d")).meta.serialize(format="json")))}
    assert sorted(allowed_operations() - covered) == []


def test_the_fuzzer_finds_a_failing_operation() -> None:
    """The check this file applies catches an operation that fails on one value (so it can fail)."""
    with pytest.raises(pytest.fail.Exception, match="ComputeError"):
        _run(pl.DataFrame({"c": ["1", "x"]}), pl.col("c").str.to_integer(base=1, strict=False))
    with pytest.raises(pytest.fail.Exception, match="PanicException"):
        far = pl.DataFrame({"c": [10**18]}).select(pl.col("c").cast(pl.Datetime("ms")))
        _run(far, pl.col("c").dt.month_start())


@pytest.mark.parametrize("name", sorted(CASES))
def test_accepted_operations_never_fail(name: str) -> None:
    """Each accepted (operation, type) runs on its probe values crossed with the second input's."""
    case = CASES[name]
    for dtype in case.types:
        expr = _accepted(name, case, dtype)
        if expr is None:
            continue
        schema = _schema(case, dtype)
        frame = _frame(probe_values(schema["c"]), probe_values(schema["d"]))
        _run(frame, expr)


@pytest.mark.parametrize("name", sorted(CASES))
@CI
@given(data=st.data())
def test_accepted_operations_never_fail_on_random_values(name: str, data: st.DataObject) -> None:
    """Values the build-time probe never saw: Polars' own random series of the input types."""
    case = CASES[name]
    dtype = data.draw(st.sampled_from(case.types))
    expr = _accepted(name, case, dtype)
    if expr is None:
        return
    schema = _schema(case, dtype)
    c = data.draw(series(dtype=schema["c"], min_size=1, max_size=6, allow_null=True))
    d = data.draw(series(dtype=schema["d"], min_size=1, max_size=3, allow_null=True))
    frame = _frame(c, d)
    _run(frame, expr)
    for row in range(frame.height):
        _run(frame.slice(row, 1), expr)


_SESSIONS: dict[tuple[str, str], dp.Session] = {}


def _session(schema: pl.Schema, backend: str) -> dp.Session:
    """A session whose private table is every combination of the two inputs' probe values (one row per unit)."""
    key = (repr(schema), backend)
    if key not in _SESSIONS:
        table = _frame(probe_values(schema["c"]), probe_values(schema["d"]))
        _SESSIONS[key] = dp.Session({"t": table}, privacy_unit=dp.PrivacyUnit.row(),
                                    budget=dp.ApproxDP(10**9, 0.5), backend=backend, seed=0)
    return _SESSIONS[key]


def _queries(frame: dp.Frame, every_type: bool) -> dict[str, Any]:
    """Queries reading the result ``out``: filtered on it; with ``every_type`` also grouped by it (both key kinds)."""
    out: dict[str, Any] = {"filter": lambda: frame.filter(pl.col("out").is_null()).agg(dp.len())}
    if every_type:
        keys = probe_values(frame.schema["out"]).slice(0, 2).to_frame("out")
        out["private keys"] = lambda: frame.group_by("out").agg(dp.len())
        out["public keys"] = lambda: frame.group_by("out", keys=keys).agg(dp.len())
    return out


def _fails_on_nulls(schema: pl.Schema, backend: str, case: Case, query: str) -> bool:
    """Whether the same query also fails on a table of nulls only: then the failure does not depend on values."""
    sess = dp.Session({"t": pl.DataFrame(schema=schema).clear(3)}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(10, 0.5), backend=backend, seed=0)
    frame = sess.table("t").with_columns(out=case.build(pl.col("c"), pl.col("d")))
    try:
        _queries(frame, True)[query]().collect(dp.ApproxDP(1, 1e-6))
    except dp.DPFrameError:
        return True
    return False


def _end_to_end(name: str, backend: str, every_type: bool) -> None:
    """Each query of :func:`_queries` runs, or is refused when built; none fails while running.

    With ``every_type``, a failure that a table of nulls reproduces is a type-level Polars inconsistency
    (it fails whatever the data: charged, but no oracle) and is tolerated; any other is an oracle.
    """
    case = CASES[name]
    for dtype in case.types:
        schema = _schema(case, dtype)
        try:
            frame = _session(schema, backend).table("t").with_columns(out=case.build(pl.col("c"), pl.col("d")))
        except (PlanError, SchemaError, AttributeError, TypeError, ValueError, pl.exceptions.PolarsError):
            continue   # refused when built, or not buildable for this type: nothing charged, nothing read
        for label, build in _queries(frame, every_type).items():
            try:
                query = build()
            except dp.DPFrameError:
                continue   # e.g. a key type that cannot be grouped: refused, free
            try:
                query.collect(dp.ApproxDP(1, 1e-6))
            except BaseException as e:   # noqa: BLE001
                if every_type and _fails_on_nulls(schema, backend, case, label):
                    continue
                pytest.fail(f"{name} on {dtype} ({backend}, {label}) failed while running: {type(e).__name__}: "
                            f"{str(e)[:200]}")
        if not every_type:
            return


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_accepted_operations_run_in_a_session(name: str, backend: str) -> None:
    """End to end on a backend: the first type each operation is accepted for, every probe value as a private row."""
    _end_to_end(name, backend, every_type=False)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb", "spark"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_accepted_operations_run_in_a_session_on_every_type(name: str, backend: str,
                                                            request: pytest.FixtureRequest) -> None:
    if backend == "spark":
        request.getfixturevalue("spark_session")
    _end_to_end(name, backend, every_type=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
@DEEP
@given(data=st.data())
def test_accepted_operations_never_fail_on_many_random_values(name: str, data: st.DataObject) -> None:
    test_accepted_operations_never_fail_on_random_values.hypothesis.inner_test(name, data)  # type: ignore[attr-defined]
