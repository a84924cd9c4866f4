"""Fuzzing the interactive entry points: a correct answer or a dpframe error, nothing extra charged, no hang.

``sess.sparse_vector`` (+ ``test``/``close``), ``sess.target_charging`` (+ ``test``,
``conditional_release``, ``revise``, ``between``, ``select_best``), ``sess.individual_filter`` (+ ``cost``,
``collect``), and the output-DP helpers ``propose_test_release``, ``gated_release``, ``run_until``: with
adversarial constructor arguments, budgets, thresholds and queries (valid scalars, grouped or multi-measure
queries, means, sampled inputs, another session's query, non-queries). Opening a stream charges exactly
its reservation or nothing; a call never charges more; closing never charges more than the reservation
and never refunds δ (:func:`~tests.fuzz.checks.run_stream`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import dpframe as dp
from dpframe.interactive.ptr import gated_release, propose_test_release
from dpframe.interactive.stopping import run_until

from .checks import run_stream
from .entry_points import ACCOUNTANTS, QUERY_BUDGETS, SANE_BUDGETS, SESSION_BUDGETS, mostly, tables
from .strategies import CI, DEEP, NUMBERS, Ledgered, time_limit

QUERIES = st.sampled_from(["len", "len_a", "count", "sum", "sum_unbounded", "mean", "grouped", "two", "sampled",
                           "other_session", "string", "none", "quantile"])


def _query(sess: dp.Session, other: dp.Session, name: str) -> Any:
    t = sess.table("t")
    return {
        "len": lambda: t.agg(dp.len()), "len_a": lambda: t.filter(pl.col("g") == "a").agg(dp.len()),
        "count": lambda: t.agg(dp.count("x")), "sum": lambda: t.agg(dp.sum("x", bounds=(0, 20))),
        "sum_unbounded": lambda: t.agg(dp.sum("f", bounds=(-1e300, 1e300))),
        "mean": lambda: t.agg(dp.mean("x", bounds=(0, 20))),
        "grouped": lambda: t.group_by("g", keys=["a", "b"]).agg(dp.len()),
        "two": lambda: t.agg(dp.len(), dp.count("x")), "sampled": lambda: t.sample(0.5).agg(dp.len()),
        "other_session": lambda: other.table("t").agg(dp.len()), "string": lambda: "SELECT COUNT(*) FROM t",
        "none": lambda: None, "quantile": lambda: t.agg(dp.median("x", bounds=(0, 20))),
    }[name]()


def _sessions(data: pl.DataFrame, total: Any, accountant: Any, *budgets: Any) -> tuple[dp.Session, dp.Session] | None:
    try:
        return tuple(dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=total(),  # type: ignore[return-value]
                                accountant=accountant, seed=s) for s in (0, 1))
    except dp.DPFrameError:
        return None


def _safe(build: Any) -> Any:
    """Build a call argument; a dpframe error building it is a valid refusal (re-raised inside the call)."""
    try:
        return build()
    except dp.DPFrameError as e:
        return e


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    for a in [*args, *kwargs.values()]:
        if isinstance(a, dp.DPFrameError):
            raise a
    return fn(*args, **kwargs)


SESSION = dict(data=tables(), total=SESSION_BUDGETS, accountant=ACCOUNTANTS)
THRESHOLDS = mostly(st.sampled_from([0, 5, 10, 20, 2.5]), NUMBERS)
CALLS = st.lists(st.tuples(QUERIES, THRESHOLDS, mostly(st.sampled_from([None, 0.5, 1]), NUMBERS),
                           st.booleans()), max_size=5)


# ----------------------------------------------------------------------------------- sparse vector

@st.composite
def svt_args(draw: st.DrawFn) -> dict[str, Any]:
    return {"threshold": draw(THRESHOLDS), "max_positives": draw(mostly(st.integers(1, 3), NUMBERS)),
            "budget": draw(QUERY_BUDGETS), "release": draw(st.one_of(st.none(), QUERY_BUDGETS)),
            "refund": draw(mostly(st.sampled_from([None, True, False]), st.sampled_from([1, "yes", 0.0])))}


def _fuzz_svt(args: dict[str, Any], calls: list[Any], data: pl.DataFrame, total: Any, accountant: Any) -> None:
    pair = _sessions(data, total, accountant, args["budget"], args["release"])
    if pair is None:
        return
    sess, other = pair

    def open_() -> Any:
        release = None if args["release"] is None else args["release"]()
        return sess.sparse_vector(args["threshold"], args["max_positives"], args["budget"](), release=release,
                                  refund=args["refund"])

    steps = [lambda sv, q=q: None if sv.closed else _call(sv.test, _safe(lambda: _query(sess, other, q)))
             for q, *_ in calls]
    with time_limit():
        event(run_stream(sess, open_, lambda sv: sv._reservation.cost, steps))


@CI
@given(args=svt_args(), calls=CALLS, **SESSION)
def test_fuzz_sparse_vector(**kw: Any) -> None:
    _fuzz_svt(**kw)


@pytest.mark.slow
@DEEP
@given(args=svt_args(), calls=CALLS, **SESSION)
def test_fuzz_sparse_vector_deep(**kw: Any) -> None:
    _fuzz_svt(**kw)


# --------------------------------------------------------------------------------- target charging

@st.composite
def tct_args(draw: st.DrawFn) -> dict[str, Any]:
    return {"epsilon": draw(mostly(st.sampled_from([0.5, 1, 2, Fraction(1, 3)]), NUMBERS)),
            "max_hits": draw(mostly(st.integers(1, 4), NUMBERS)),
            "delta": draw(mostly(st.sampled_from([1e-6, 1e-3, 0.01]),
                                 st.sampled_from([0, 1, -1e-6, math.nan, "1e-6"]))),
            "min_q": draw(mostly(st.none(), st.one_of(st.sampled_from([0.01, 0.2, 0, 1, -1, math.nan]), NUMBERS))),
            "per_unit": draw(mostly(st.booleans(), st.sampled_from([None, 1, "yes"])))}


METHODS = st.sampled_from(["test", "conditional_release", "named_release", "revise", "between", "select_best"])


def _tct_step(sess: dp.Session, other: dp.Session, method: str, q: str, threshold: Any, eps: Any,
              flag: bool) -> Any:
    query = _safe(lambda: _query(sess, other, q))

    def step(ch: Any) -> Any:
        if ch.closed:
            return None
        if method == "test":
            return _call(ch.test, query, threshold, prior=flag, epsilon=eps)
        if method in ("conditional_release", "named_release"):
            name = f"n{q}" if method == "named_release" else None
            when = _safe(lambda: dp.above(threshold)) if flag else threshold   # a bare number is refused
            return _call(ch.conditional_release, query, when, epsilon=eps, name=name)
        if method == "revise":
            return ch.revise(f"n{q}", dp.above(-(10**9)) if flag else dp.below(-(10**9)))
        if method == "between":
            return _call(ch.between, query, threshold, threshold + 5 if isinstance(threshold, int) else eps,
                         epsilon=eps)
        return _call(ch.select_best, [query, _safe(lambda: _query(sess, other, "len_a"))] if flag else query,
                     epsilon=eps)
    return step


def _fuzz_tct(args: dict[str, Any], calls: list[Any], methods: list[str], data: pl.DataFrame, total: Any,
              accountant: Any) -> None:
    pair = _sessions(data, total, accountant, *(eps for _, _, eps, _ in calls))
    if pair is None:
        return
    sess, other = pair
    steps = [_tct_step(sess, other, m, q, th, eps, flag) for m, (q, th, eps, flag) in zip(methods, calls)]
    with time_limit():
        event(run_stream(sess, lambda: sess.target_charging(**args), lambda ch: ch.cost, steps, context=True))


@CI
@given(args=tct_args(), calls=CALLS, methods=st.lists(METHODS, min_size=5, max_size=5), **SESSION)
def test_fuzz_target_charging(**kw: Any) -> None:
    _fuzz_tct(**kw)


@pytest.mark.slow
@DEEP
@given(args=tct_args(), calls=CALLS, methods=st.lists(METHODS, min_size=5, max_size=5), **SESSION)
def test_fuzz_target_charging_deep(**kw: Any) -> None:
    _fuzz_tct(**kw)


# ------------------------------------------------------------------------------- individual filter

FILTER_QUERIES = st.sampled_from(["len", "count", "sum", "mean", "grouped", "two", "sampled", "other_session",
                                  "quantile", "private_keys", "none"])


def _filter_query(sess: dp.Session, other: dp.Session, name: str) -> Any:
    if name == "private_keys":
        return sess.table("t").group_by("g").agg(dp.len())
    return _query(sess, other, name)


def _fuzz_filter(budget: Any, queries: list[tuple[str, Any]], data: pl.DataFrame, total: Any,
                 accountant: Any) -> None:
    pair = _sessions(data, total, accountant, budget, *(b for _, b in queries))
    if pair is None:
        return
    sess, other = pair

    def step(name: str, b: Any) -> Any:
        def run(filt: Any) -> Any:
            query, rho = _safe(lambda: _filter_query(sess, other, name)), _safe(b)
            _call(filt.cost, query, rho)
            return _call(filt.collect, query, rho)
        return run

    def charge(filt: Any) -> Any:
        return sess.accountant.charge(filt.budget)

    with time_limit():
        event(run_stream(sess, lambda: sess.individual_filter(_safe(budget)) if not isinstance(
            _safe(budget), dp.DPFrameError) else _call(lambda: None, _safe(budget)), charge,
            [step(n, b) for n, b in queries]))


@CI
@given(budget=QUERY_BUDGETS, queries=st.lists(st.tuples(FILTER_QUERIES, SANE_BUDGETS), max_size=4), **SESSION)
def test_fuzz_individual_filter(**kw: Any) -> None:
    _fuzz_filter(**kw)


# ------------------------------------------------------------------------- output-DP helpers

def _ex_post(sess: dp.Session, call: Any) -> str:
    """One call of an output-DP helper: refused (nothing charged) or answered (at most the worst cell)."""
    ledger = Ledgered(sess)
    try:
        with time_limit():
            call()
    except dp.DPFrameError as e:
        ledger.refused(e)
        return "refused"
    assert sess.history().height == ledger.rows + 1
    return "answered"


PTR = st.sampled_from(["propose_test_release", "gated_release", "run_until"])


@CI
@given(which=PTR, eps=st.tuples(mostly(st.sampled_from([Fraction(1, 4), Fraction(1)]), NUMBERS),
                                mostly(st.sampled_from([Fraction(1, 2), Fraction(2)]), NUMBERS)),
       delta=mostly(st.sampled_from([Fraction(0), Fraction(1, 10**6)]), NUMBERS), test=st.booleans(),
       queries=st.lists(QUERIES, min_size=1, max_size=3), threshold=THRESHOLDS, budget=QUERY_BUDGETS,
       gate_budget=QUERY_BUDGETS, **SESSION)
def test_fuzz_output_dp_helpers(which: str, eps: tuple[Any, Any], delta: Any, test: bool, queries: list[str],
                                threshold: Any, budget: Any, gate_budget: Any, **session: Any) -> None:
    pair = _sessions(session["data"], session["total"], session["accountant"], budget, gate_budget, *eps)
    if pair is None:
        return
    sess, other = pair
    built = [_safe(lambda q=q: _query(sess, other, q)) for q in queries]

    def call() -> Any:
        if which == "propose_test_release":
            return propose_test_release(sess, lambda: test, lambda: 1.0, test_epsilon=eps[0], release_epsilon=eps[1],
                                        delta=delta)
        if which == "gated_release":
            return _call(gated_release, built[0], _safe(budget), built[-1], threshold, _safe(gate_budget))
        return _call(run_until, built, _safe(budget), stop=lambda results: len(results) > 1)
    event(_ex_post(sess, call))
