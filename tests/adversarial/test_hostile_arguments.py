"""Every argument of the analyst's API, given a hostile value, is used or refused with a dpframe error, free.

The probes of reviews 47 and 48 found the same class again and again: a value of an unexpected type — an
array, a Series, an expression, a set, a number past floats, numpy's bool — reaching code that assumed a
type, and raising the value's own ``TypeError``/``ValueError`` (an array's ambiguous truth, an unhashable
key, ``float()`` overflowing), SQLite's ``IntegrityError`` from the ledger, or being read wrongly
(``refund=np.bool_(False)`` as a refund). This harness calls every public entry point below with valid
arguments, then with each parameter in turn replaced by each :data:`HOSTILE` value, and requires: the call
succeeds, or raises a :class:`dp.DPFrameError` (naming an argument) and the session's ledger gained no row.

The meta-test at the end enumerates the analyst's surface — the functions and classes of ``dp.__all__``,
the public methods of the session, frames, group-bys, queries, endings and interactive tools, the
interactive functions, ``dp.plots`` and ``dp.datasets`` — and fails for a parameter no entry covers, so a
new argument is fuzzed from the day it is added (or listed in :data:`EXEMPT` with the reason).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.family import Releasable
from dpframe.interactive import OdpSpec, odp_delta, run_ex_post
from dpframe.interactive.individual import IndividualFilter
from dpframe.interactive.ptr import RobustMedian, gated_release, propose_test_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.interactive.svt import SparseVector
from dpframe.interactive.tct import TargetChargingChannel

HOSTILE: list[Any] = [
    None, "", "zz", b"x", bytearray(b"x"), ["x"], [1, 2], {"x": 1}, {"x"}, (1, 2), object(), lambda *a: 1,
    math.nan, math.inf, -1, 0, 10**400, 1e308, True, 1j, np.float32(1.0), np.int64(-1), np.bool_(False),
    np.array([1.0, 2.0]), np.array(["x", "g"]), pl.Series(["x"]), pl.DataFrame({"x": [1]}), pl.col("x"), pl.lit(1),
    "\ud800", "x" * 100_000, -0.0, Decimal("nan"), Fraction(1, 3**400), dt.date(2020, 1, 1), np.array(2.0),
]
"""Values of every kind an analyst can pass: each parameter of each entry gets each of them."""
MEMBERS: list[Any] = [v for v in HOSTILE if isinstance(v, Decimal | float | int | str | np.ndarray | pl.Expr)
                      or v is None]
"""Those also tried as one member of a parameter that takes a list, tuple or dict (keys, bounds, features)."""

DATA = pl.DataFrame({"u": [i // 2 for i in range(80)], "x": [float(i % 9) for i in range(80)],
                     "g": ["a", "b"] * 40, "i": list(range(80)), "lab": [i % 2 for i in range(80)]})
B = dp.ApproxDP(1, 1e-6)


def _plotted(plot: Callable[..., object], **kw: Any) -> None:
    import matplotlib.pyplot as plt
    try:
        plot(**kw)
    finally:
        plt.close("all")


def _session(backend: str = "polars", budget: dp.Budget = dp.ApproxDP(10**6, 1e-3), **kw: Any) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=budget, seed=0,
                      backend=backend, **kw)


def _rdp(backend: str = "polars") -> dp.Session:
    return _session(backend, accountant="rdp")


def _pure(backend: str = "polars") -> dp.Session:
    return _session(backend, dp.PureDP(1000))


def _q(s: dp.Session) -> dp.Query:
    return s.table("t").agg(dp.len())


def _curve() -> Any:
    from dpframe import accounting as acc
    return acc.gaussian(1.0)


_SOCKETS = f"{tempfile.gettempdir()}/dp-hostile-{os.getpid()}"       # one per test process


def _socket() -> str:
    return f"{_SOCKETS}/{uuid.uuid4().hex[:12]}"      # (the folder is made by _server)


def _elsewhere(call: Callable[..., object], **kw: Any) -> None:
    """``call(**kw)`` in a fresh temporary directory (a ledger named ``"zz"`` is a file there)."""
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        call(**kw)


def _server(s: dp.Session, **kw: Any) -> None:
    Path(_SOCKETS).mkdir(exist_ok=True)
    try:
        dp.Server(**kw).close()
    finally:
        shutil.rmtree(Path(_SOCKETS), ignore_errors=True)


def _channel(s: dp.Session, method: str, **kw: Any) -> None:
    with s.target_charging(epsilon=1, max_hits=3, delta=1e-6, min_q=0.01) as ch:
        ch.conditional_release(_q(s), dp.above(10**9), name="n")      # a value revise() can name
        getattr(ch, method)(**kw)


def _vector(s: dp.Session, **kw: Any) -> None:
    s.sparse_vector(3, 1, dp.PureDP(1)).test(**kw)


def _sparse(s: dp.Session, **kw: Any) -> None:
    s.sparse_vector(**kw).close()


def _tct(s: dp.Session, **kw: Any) -> None:
    with s.target_charging(**kw):
        pass


def _median(s: dp.Session) -> RobustMedian:
    return robust_median(s.table("t"), "x", (0, 10))


def _ending(s: dp.Session) -> Releasable[Any]:
    return s.table("t").bounds("x")


Entry = tuple[Callable[..., dp.Session], Callable[..., object], Callable[[dp.Session], dict[str, Any]]]
"""(the session it runs in, the call ``f(session, **arguments)``, the valid arguments by parameter name)."""

ENTRIES: dict[str, Entry] = {
    # the session and its methods
    "Session": (_session, lambda s, **kw: _elsewhere(dp.Session, **kw), lambda s: {
        "tables": {"t": DATA}, "privacy_unit": dp.PrivacyUnit("u", max_rows=2), "budget": dp.PureDP(1),
        "ledger": None, "backend": "polars", "accountant": None, "seed": 0, "public_tables": None,
        "public_keys": {"t.g": ["a", "b"]}, "bounds": {"t.x": (0, 10)}, "spark": None}),
    "Session.table": (_session, lambda s, **kw: s.table(**kw), lambda s: {"name": "t"}),
    "Session.sql": (_session, lambda s, **kw: s.sql(**kw).collect(B), lambda s: {
        "query": "SELECT g, COUNT(*) AS n FROM t GROUP BY g", "keys": {"g": ["a", "b"]}, "backend": None}),
    "Session.sparse_vector": (_pure, _sparse, lambda s: {
        "threshold": 3, "max_positives": 1, "budget": dp.PureDP(1), "release": None, "refund": None,
        "noise": "laplace", "max_length": None}),
    "Session.target_charging": (_session, _tct, lambda s: {
        "epsilon": 0.5, "max_hits": 3, "delta": 1e-6, "min_q": None, "per_unit": False}),
    "Session.individual_filter": (_rdp, lambda s, **kw: s.individual_filter(**kw), lambda s: {"budget": dp.ZCDP(1)}),
    "Session.spent_as_approx": (_session, lambda s, **kw: s.spent_as_approx(**kw), lambda s: {"delta": 1e-6}),
    "Session.spent_report": (_session, lambda s, **kw: s.spent_report(**kw), lambda s: {"delta": 1e-6}),
    # frames, group-bys and the measures
    "Frame.agg": (_session, lambda s, measures, named: s.table("t").agg(measures, n=named).collect(B),
                  lambda s: {"measures": dp.sum("x", bounds=(0, 10)), "named": dp.len()}),
    "Frame.bound": (_session, lambda s, **kw: s.table("t").bound(**kw).agg(dp.len()).collect(B),
                    lambda s: {"max_rows": 1, "max_groups": None}),
    "Frame.bounds": (_session, lambda s, **kw: s.table("t").bounds(**kw).collect(B), lambda s: {
        "column": "x", "domain": None, "quantiles": (0.01, 0.99), "resolution": None}),
    "Frame.drop": (_session, lambda s, columns: s.table("t").drop(columns).agg(dp.len()).collect(B),
                   lambda s: {"columns": "i"}),
    "Frame.filter": (_session, lambda s, predicates, constraints: s.table("t").filter(predicates, g=constraints)
                     .agg(dp.len()).collect(B), lambda s: {"predicates": pl.col("x") > 1, "constraints": "a"}),
    "Frame.group_by": (_session, lambda s, by, keys: s.table("t").group_by(by, keys=keys).agg(dp.len()).collect(B),
                       lambda s: {"by": "g", "keys": ["a", "b"]}),
    "Frame.interior_point": (_session, lambda s, **kw: s.table("t").interior_point(**kw).collect(B), lambda s: {
        "column": "x", "bounds": (0, 10), "method": "auto", "beta": 1e-6, "resolution": None}),
    "Frame.learn_rectangle": (_session, lambda s, **kw: s.table("t").learn_rectangle(**kw).collect(B), lambda s: {
        "features": ["x"], "label": "lab", "bounds": {"x": (0, 10)}, "beta": 1e-6, "resolution": None}),
    "Frame.learn_threshold": (_session, lambda s, **kw: s.table("t").learn_threshold(**kw).collect(B), lambda s: {
        "feature": "x", "label": "lab", "bounds": (0, 10), "positive": "auto", "beta": 1e-6, "xi": 0.05,
        "resolution": None}),
    "Frame.query": (_session, lambda s, family, args, kwargs: s.table("t").query(family, args, n=kwargs).collect(B),
                    lambda s: {"family": "agg", "args": dp.len(), "kwargs": dp.count("x")}),
    "Frame.rename": (_session, lambda s, **kw: s.table("t").rename(**kw).agg(dp.len()).collect(B),
                     lambda s: {"mapping": {"x": "y"}}),
    "Frame.sample": (_session, lambda s, **kw: s.table("t").sample(**kw).agg(dp.len()).collect(B),
                     lambda s: {"rate": 0.5}),
    "Frame.select": (_session, lambda s, exprs, named: s.table("t").select(exprs, y=named)
                     .agg(dp.sum("y", bounds=(0, 10))).collect(B), lambda s: {"exprs": "g", "named": pl.col("x")}),
    "Frame.with_columns": (_session, lambda s, exprs, named: s.table("t").with_columns(exprs, z=named)
                           .agg(dp.sum("z", bounds=(0, 10))).collect(B),
                           lambda s: {"exprs": pl.col("x") * 2, "named": pl.col("x")}),
    "GroupBy.agg": (_session, lambda s, measures, named: s.table("t").group_by("g", keys=["a", "b"])
                    .agg(measures, n=named).collect(B), lambda s: {"measures": dp.mean("x", bounds=(0, 10)),
                                                                   "named": dp.len()}),
    "GroupBy.query": (_session, lambda s, family, args, kwargs: s.table("t").group_by("g", keys=["a", "b"])
                      .query(family, args, n=kwargs).collect(B),
                      lambda s: {"family": "agg", "args": dp.len(), "kwargs": dp.count("x")}),
    "GroupBy.top_k": (_session, lambda s, **kw: s.table("t").group_by("g").top_k(**kw).collect(B), lambda s: {
        "k": 1, "score": None, "method": "stable", "release_scores": False, "k_max": None, "lam": None,
        "ptr": "gaussian", "delta_t": None}),
    "count": (_session, lambda s, **kw: s.table("t").agg(dp.count(**kw)).collect(B), lambda s: {"column": "x"}),
    "count_distinct": (_session, lambda s, **kw: s.table("t").agg(dp.count_distinct(**kw)).collect(B),
                       lambda s: {"column": "g"}),
    "mean": (_session, lambda s, **kw: s.table("t").agg(dp.mean(**kw)).collect(B),
             lambda s: {"column": "x", "bounds": (0, 10)}),
    "sum": (_session, lambda s, **kw: s.table("t").agg(dp.sum(**kw)).collect(B),
            lambda s: {"column": "x", "bounds": (0, 10)}),
    "var": (_session, lambda s, **kw: s.table("t").agg(dp.var(**kw)).collect(B),
            lambda s: {"column": "x", "bounds": (0, 10), "ddof": 1}),
    "std": (_session, lambda s, **kw: s.table("t").agg(dp.std(**kw)).collect(B),
            lambda s: {"column": "x", "bounds": (0, 10), "ddof": 1}),
    "median": (_session, lambda s, **kw: s.table("t").agg(dp.median(**kw)).collect(B),
               lambda s: {"column": "x", "bounds": (0, 10), "resolution": None}),
    "quantile": (_session, lambda s, **kw: s.table("t").agg(dp.quantile(**kw)).collect(B),
                 lambda s: {"column": "x", "q": 0.5, "bounds": (0, 10), "resolution": None}),
    "measure": (_session, lambda s, kind, column, bounds, options: s.table("t").agg(
        dp.measure(kind, column, bounds, ddof=options)).collect(B),
        lambda s: {"kind": "var", "column": "x", "bounds": (0, 10), "options": 1}),
    # queries and endings
    "Query.collect": (_session, lambda s, **kw: _q(s).collect(**kw), lambda s: {
        "budget": B, "ci": None, "diagnostics": False, "accuracy": None}),
    "Query.cost": (_session, lambda s, **kw: _q(s).cost(**kw), lambda s: {
        "budget": B, "accuracy": None, "diagnostics": False}),
    "Query.explain": (_session, lambda s, **kw: _q(s).explain(**kw), lambda s: {
        "budget": B, "format": "text", "accuracy": None}),
    "Query.plan": (_session, lambda s, **kw: _q(s).plan(**kw), lambda s: {"budget": B}),
    "Releasable.collect": (_session, lambda s, **kw: _ending(s).collect(**kw), lambda s: {"budget": B}),
    "Releasable.cost": (_session, lambda s, **kw: _ending(s).cost(**kw), lambda s: {"budget": B}),
    "Releasable.explain": (_session, lambda s, **kw: _ending(s).explain(**kw), lambda s: {
        "budget": B, "format": "text"}),
    "Releasable.plan": (_session, lambda s, **kw: _ending(s).plan(**kw), lambda s: {"budget": B}),
    # budgets, units, targets, accuracy
    "PureDP": (_session, lambda s, **kw: dp.PureDP(**kw), lambda s: {"epsilon": 1}),
    "ApproxDP": (_session, lambda s, **kw: dp.ApproxDP(**kw), lambda s: {"epsilon": 1, "delta": 1e-6}),
    "ZCDP": (_session, lambda s, **kw: dp.ZCDP(**kw), lambda s: {"rho": 1, "delta": 0}),
    "PrivacyUnit": (_session, lambda s, **kw: dp.PrivacyUnit(**kw), lambda s: {
        "column": "u", "max_rows": 2, "max_groups": None}),
    "Accuracy": (_session, lambda s, **kw: dp.Accuracy(**kw), lambda s: {
        "half_width": 5, "confidence": 0.95, "notion": None}),
    "above": (_session, lambda s, **kw: dp.above(**kw), lambda s: {"threshold": 3}),
    "below": (_session, lambda s, **kw: dp.below(**kw), lambda s: {"threshold": 3}),
    "between": (_session, lambda s, **kw: dp.between(**kw), lambda s: {"lower": 1, "upper": 3}),
    "outside": (_session, lambda s, **kw: dp.outside(**kw), lambda s: {"lower": 1, "upper": 3}),
    # interactive tools and functions
    "SparseVector.test": (_pure, _vector, lambda s: {"query": _q(s)}),
    "TargetChargingChannel.test": (_session, lambda s, **kw: _channel(s, "test", **kw), lambda s: {
        "query": _q(s), "threshold": 3, "prior": False, "epsilon": None}),
    "TargetChargingChannel.between": (_session, lambda s, **kw: _channel(s, "between", **kw), lambda s: {
        "query": _q(s), "lower": 1, "upper": 30, "epsilon": None}),
    "TargetChargingChannel.boundary_test": (_session, lambda s, **kw: _channel(s, "boundary_test", **kw),
                                            lambda s: {"query": _q(s), "threshold": 3, "epsilon": None}),
    "TargetChargingChannel.conditional_release": (
        _session, lambda s, **kw: _channel(s, "conditional_release", **kw),
        lambda s: {"query": _q(s), "when": dp.above(3), "epsilon": None, "name": None}),
    "TargetChargingChannel.revise": (_session, lambda s, **kw: _channel(s, "revise", **kw),
                                     lambda s: {"name": "n", "when": dp.above(3)}),
    "TargetChargingChannel.select_best": (_session, lambda s, **kw: _channel(s, "select_best", **kw),
                                          lambda s: {"queries": [_q(s), _q(s)], "epsilon": None}),
    "IndividualFilter.collect": (_rdp, lambda s, **kw: s.individual_filter(dp.ZCDP(5)).collect(**kw),
                                 lambda s: {"query": _q(s), "budget": dp.ZCDP(0.1)}),
    "IndividualFilter.cost": (_rdp, lambda s, **kw: s.individual_filter(dp.ZCDP(5)).cost(**kw),
                              lambda s: {"query": _q(s), "budget": dp.ZCDP(0.1)}),
    "IndividualFilter.plan": (_rdp, lambda s, **kw: s.individual_filter(dp.ZCDP(5)).plan(**kw),
                              lambda s: {"query": _q(s), "budget": dp.ZCDP(0.1)}),
    "robust_median": (_session, lambda s, **kw: robust_median(**kw).collect(B), lambda s: {
        "frame": s.table("t"), "column": "x", "bounds": (0, 10)}),
    "RobustMedian.collect": (_session, lambda s, **kw: _median(s).collect(**kw), lambda s: {
        "budget": B, "refund": None}),
    "RobustMedian.cost": (_session, lambda s, **kw: _median(s).cost(**kw), lambda s: {"budget": B}),
    "RobustMedian.explain": (_session, lambda s, **kw: _median(s).explain(**kw), lambda s: {
        "budget": B, "format": "text"}),
    "RobustMedian.threshold": (_session, lambda s, **kw: _median(s).threshold(**kw), lambda s: {
        "eps_test": Fraction(1, 2), "delta": Fraction(1, 10**6)}),
    "gated_release": (_session, lambda s, **kw: gated_release(**kw), lambda s: {
        "query": _q(s), "budget": dp.PureDP(1), "gate": _q(s), "threshold": 3, "gate_budget": dp.PureDP(1),
        "refund": None}),
    "propose_test_release": (_session, lambda s, **kw: propose_test_release(**kw), lambda s: {
        "session": s, "test": lambda: True, "release": lambda: 1, "test_epsilon": 1, "release_epsilon": 1,
        "delta": 0, "what": "ptr", "mechanisms": "PTR", "refund": None, "tables": None}),
    "run_until": (_session, lambda s, **kw: run_until(**kw), lambda s: {
        "steps": [_q(s), _q(s)], "budget": dp.PureDP(1), "stop": lambda results: True, "delta": 0, "stops": None,
        "refund": None}),
    "run_ex_post": (_session, lambda s, **kw: run_ex_post(**kw), lambda s: {
        "session": s, "spec": OdpSpec.trivial(1), "what": "w", "mechanisms": "m", "run": lambda: 1, "refund": None,
        "tables": None}),
    "odp_delta": (_session, lambda s, **kw: odp_delta(**kw), lambda s: {
        "law0": {None: 0.5, 1: 0.5}, "law1": {None: 0.5, 1: 0.5}, "spec": OdpSpec.trivial(1)}),
    "OdpSpec": (_session, lambda s, **kw: OdpSpec(**kw), lambda s: {
        "cells": {"a": 1}, "delta": 0, "classify": lambda y: "a"}),
    # query families a plugin attaches (reached as frame.<name>(...) or frame.query("<name>", ...))
    "family linear_regression": (_session, lambda s, **kw: s.table("t").linear_regression(**kw).collect(B),
                                 lambda s: {"features": ["x"], "label": "i",
                                            "bounds": {"x": (0, 10), "i": (0, 100)}, "ridge": 1.0}),
    # plots and data
    "plots.budget": (_session, lambda s, **kw: _plotted(dp.plots.budget, **kw), lambda s: {"session": s, "ax": None}),
    "plots.spent_after_each": (_session, lambda s, **kw: dp.plots.spent_after_each(**kw), lambda s: {"session": s}),
    "plots.estimates": (_session, lambda s, **kw: _plotted(dp.plots.estimates, **kw), lambda s: {
        "result": pl.DataFrame({"g": ["a"], "n": [3]}), "column": "n", "by": None, "ax": None}),
    "plots.privacy_curve": (_session, lambda s, **kw: _plotted(dp.plots.privacy_curve, **kw), lambda s: {
        "sources": _curve(), "deltas": [1e-6], "ax": None}),
    "datasets.visits": (_session, lambda s, **kw: dp.datasets.visits(**kw), lambda s: {
        "rows": 50, "users": None, "seed": 0}),
    "Server": (_session, _server, lambda s: {
        "session": s, "address": _socket(), "authkey": b"k" * 32, "max_clients": 2, "tls": None,
        "idle_timeout": 10, "pad": None, "stream_idle": 60}),
}

EXEMPT: dict[str, str] = {
    "connect": "needs a running server: tests/core/test_remote.py::test_bad_input_names_the_argument and "
               "tests/adversarial/test_review48a.py fuzz it",
    "Session.close": "no parameters", "Session.history": "no parameters", "Session.remaining": "no parameters",
    "Session.spent": "no parameters", "Session.tables": "no parameters", "Frame.collect_schema": "no parameters",
    "Query.describe": "no parameters", "Releasable.describe": "no parameters", "SparseVector.charged": "no parameters",
    "SparseVector.close": "no parameters", "SparseVector.status": "no parameters",
    "TargetChargingChannel.close": "no parameters", "TargetChargingChannel.status": "no parameters",
    "len": "no parameters", "count_units": "no parameters",
}
"""Public entry points this harness does not call, with the reason."""


def _cases() -> Iterator[tuple[str, str]]:
    for name, (make, _, valid) in ENTRIES.items():
        for parameter in valid(make()):
            yield name, parameter


@pytest.mark.parametrize("backend", ["polars", pytest.param("duckdb", marks=pytest.mark.slow),
                                     pytest.param("spark", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("name", "parameter"), list(_cases()), ids=[f"{n}-{p}" for n, p in _cases()])
def test_a_hostile_argument_is_used_or_refused_free(name: str, parameter: str, backend: str,
                                                    request: pytest.FixtureRequest) -> None:
    """On the Polars backend by default; on DuckDB and Spark too under ``-m slow`` (3.5 and 8 minutes on 2 cores)."""
    if backend == "spark":
        request.getfixturevalue("spark_session")      # the JVM started with the tests' settings
    make, call, valid = ENTRIES[name]
    sess = make(backend)
    call(sess, **valid(sess))                  # the valid call runs (what the hostile ones vary)
    raw: list[str] = []
    variants: list[Callable[[Any], Any]] = [lambda given: value]
    if isinstance(valid(sess)[parameter], list | tuple | dict) and valid(sess)[parameter]:
        variants.append(lambda given: _with_member(given, value))      # one member of a list, tuple or dict
    for value in HOSTILE:
        for variant in variants if any(value is m for m in MEMBERS) else variants[:1]:    # (by identity: arrays)
            sess = make(backend)
            given = valid(sess)
            arguments = given | {parameter: variant(given[parameter])}
            shown = f"{type(value).__name__} {value!r:.40}{' as a member' if variant is not variants[0] else ''}"
            try:
                call(sess, **arguments)
            except dp.DPFrameError as e:
                if "failed" in sess.history()["status"].to_list():     # charged, then failed: not a free refusal
                    raw.append(f"{shown}: refused after its charge ({str(e)[:120]})")
                if not (e.argument and e.fix) or str(e).count("Fix:") > 1:     # DESIGN §5: names both, once
                    raw.append(f"{shown}: a refusal without its argument and one fix ({str(e)[:160]})")
            except BaseException as e:     # noqa: BLE001  (what the harness looks for; a Polars panic too)
                raw.append(f"{shown}: {type(e).__name__}: {str(e)[:120]}")
    assert not raw, f"{name}({parameter}=...) raised what is not a dpframe error naming its argument and fix:\n" + \
        "\n".join(raw)


def _with_member(given: list[Any] | tuple[Any, ...] | dict[Any, Any], value: object) -> object:
    """``given`` with its last member replaced by ``value`` (a dict: in its last value, itself if not a list)."""
    if isinstance(given, dict):
        last = list(given)[-1]
        inner = given[last]
        deeper = _with_member(inner, value) if isinstance(inner, list | tuple | dict) and inner else value
        return {k: deeper if k == last else v for k, v in given.items()}
    return type(given)([*given[:-1], value])


def _surface() -> dict[str, Any]:
    """The analyst's entry points by the names :data:`ENTRIES` uses."""
    found: dict[str, Any] = {}
    for name in dp.__all__:
        obj = getattr(dp, name)
        if inspect.isfunction(obj) or (inspect.isclass(obj) and not issubclass(obj, BaseException | Warning)
                                       and not name.startswith("Remote") and name not in (
                                           "Frame", "GroupBy", "Query", "Diagnosed", "Budget", "Measure")):
            found[name] = obj
    for cls in (dp.Session, dp.Frame, dp.GroupBy, dp.Query, Releasable, SparseVector, TargetChargingChannel,
                IndividualFilter, RobustMedian):
        for attr in dir(cls):
            member = inspect.getattr_static(cls, attr)
            if not attr.startswith("_") and inspect.isfunction(member):
                found[f"{cls.__name__}.{attr}"] = getattr(cls, attr)
    for fn in (robust_median, gated_release, propose_test_release, run_until, run_ex_post, odp_delta, OdpSpec):
        found[fn.__name__] = fn
    from dpframe_histogram.regression import RegressionQuery

    found["family linear_regression"] = RegressionQuery.__init__
    for module in ("plots", "datasets"):
        mod = getattr(dp, module)
        for attr in getattr(mod, "__all__", None) or [a for a in vars(mod) if not a.startswith("_")]:
            obj = getattr(mod, attr)
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                found[f"{module}.{attr}"] = obj
    return found


def test_every_public_argument_is_fuzzed() -> None:
    """A new entry point or parameter of the analyst's API fails this until an entry covers it."""
    surface = _surface()
    families = {e.name for e in _session().plugins.families()}
    built_in = {"agg", "interior_point", "learn_threshold", "learn_rectangle", "bounds", "top_k"}   # (methods above)
    assert families - built_in <= {n.removeprefix("family ") for n in ENTRIES}, "add an entry for each family"
    missing = sorted(set(surface) - set(ENTRIES) - set(EXEMPT))
    assert not missing, f"add these entry points to ENTRIES (or EXEMPT, with the reason): {missing}"
    assert not (set(ENTRIES) | set(EXEMPT)) - set(surface), "stale entries"
    for name, (make, _, valid) in ENTRIES.items():
        params = [p for p in inspect.signature(surface[name]).parameters if p not in ("self", "source")]
        covered = set(valid(make()))
        assert set(params) == covered, f"{name}: fuzz exactly its parameters {params}, not {sorted(covered)}"
