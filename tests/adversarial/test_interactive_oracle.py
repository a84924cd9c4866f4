"""The composed D/D′ oracle for the interactive mechanisms: a random sequence of calls behaves alike on neighbours.

Earlier reviews attacked the stateful mechanisms one at a time; an analyst composes them. Each example draws a
*sequence* of calls (:func:`sequences`): opening sparse vectors, target-charging channels and individual filters
with analyst-chosen arguments (some refused), testing, conditional releases and revisions, ``between``, boundary
tests and selections, closing, calling again after a halt or a close, losing a handle, and, interleaved on the same
session, ordinary collects, gated releases, robust medians, ``run_until`` and ``propose_test_release`` (whose
analyst code runs charged queries). The same sequence runs on a fresh session over D and one over D′ = D plus one
privacy unit of adversarial values (:func:`tests.adversarial.composed.extreme_rows`), both seeded alike, so both
draw the same noise, on Polars and DuckDB (and Spark, on the table less the ``Duration`` column it refuses). Tuned
sequences (``sequences(tuned=True)``) run every query and robust median on a tuned chain's frame (derived columns,
filters, ``bound()``, ``sample()``, ``bounds="auto"``) in sessions whose unit may choose its bounds.

Checked at every step, until the first step whose *released* outputs differ (a test's answer, a hit, a ⊥, a
halt: from there on the analyst has learned something and the runs may rightly part): the same kind of outcome
(released, or the same error with the same message), the same warnings, the same ledger (every row's status, cost
and text), the same public state of every object (answers, hits, calls, closed). On each run, at every step: an
error that changed no ledger row is a refusal, so it charged nothing and changed no object's public state; an
error that did change the ledger left only ``failed`` rows (a failure after the charge); every error is a dpframe
error; the analyst's numbers (int, float and Fraction subclasses that record every operand they meet) are never
compared with anything; and ``run_until``'s ``stop`` receives released results only (prefixes of what it returns).
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import dpframe as dp
from dpframe.interactive.ptr import gated_release, propose_test_release, robust_median
from dpframe.interactive.stopping import run_until

from .composed import (
    MEMORY,
    SESSION_KINDS,
    SPARK,
    STORAGES,
    Columns,
    Neighbours,
    Outcome,
    Storage,
    apply_steps,
    base,
    describe_steps,
    expressions,
    extreme_rows,
    kind_of,
    row_step,
    shown,
)
from .test_composed_oracle import unit_storage

CI = settings(max_examples=12, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
DEEP = settings(max_examples=1_000, deadline=None, database=None, suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate],
                print_blob=True)

#: Session kinds: (budget, accountant). Basic sessions refund; TCT needs δ > 0; Gaussian SVT and the individual
#: filter need an RDP (or zCDP) accountant. The small budgets run out within a sequence.
SESSIONS: dict[str, tuple[dp.Budget, str | None]] = {
    "basic": (dp.ApproxDP(60, 1e-3), None), "small": (dp.ApproxDP(4, 1e-3), None), "pure": (dp.PureDP(30), None),
    "rdp": (dp.ApproxDP(60, 1e-3), "rdp"), "zcdp": (dp.ZCDP(30, 1e-4), None)}
UNITS = {"user2": dp.PrivacyUnit("u", max_rows=2), "user1": dp.PrivacyUnit("u", max_rows=1),
         "row": dp.PrivacyUnit.row()}
#: The units with automatic contribution bounds that tuned sequences (``sequences(tuned=True)``) also open sessions
#: with.
AUTO_UNITS = {"auto_rows": dp.PrivacyUnit("u", max_rows="auto"),
              "auto_groups": dp.PrivacyUnit("u", max_rows=2, max_groups="auto")}


#: With ``sequences(accounts=True)``: every accountant with each budget kind it accepts
#: (:data:`tests.adversarial.composed.SESSION_KINDS`), under names of their own.
ACCOUNTS = {f"account_{name}": kind for name, kind in SESSION_KINDS.items() if name != "default"}


def session(source: object, backend: str, config: tuple[str, str]) -> dp.Session:
    budget, accountant = (SESSIONS | ACCOUNTS)[config[1]]
    return dp.Session({"t": source}, privacy_unit=(UNITS | AUTO_UNITS)[config[0]], budget=budget, accountant=accountant,
                      backend=backend, seed=0)


# ------------------------------------------------------------------------------------------ the analyst's numbers

class Log(list[tuple[str, Any]]):
    """What one run's hostile numbers were asked: (method, operand)."""


def _spying(base_type: type) -> type:
    def spy(name: str) -> Callable[..., Any]:
        def method(self: Any, *args: Any) -> Any:
            self.log.append((name, args))
            return getattr(base_type, name)(self, *args)
        return method

    names = ["__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__add__", "__radd__", "__sub__",
             "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__float__", "__int__", "__hash__"]
    return type(f"Spy{base_type.__name__.title()}", (base_type,), {n: spy(n) for n in names if hasattr(base_type, n)})


SPIES = {int: _spying(int), float: _spying(float), Fraction: _spying(Fraction)}


@dataclass(frozen=True)
class Hostile:
    """An argument the analyst passes as a subclass of its number type that records every operand it meets."""

    value: int | float | Fraction

    def make(self, log: Log) -> Any:
        spy = SPIES[type(self.value)](self.value)
        spy.log = log
        return spy

    def __repr__(self) -> str:
        return f"Hostile({self.value!r})"


@dataclass(frozen=True)
class Budget:
    """A budget built per run (``dp.<kind>(*args)``): its numbers may be :class:`Hostile`."""

    kind: str
    args: tuple[Any, ...]

    def __repr__(self) -> str:
        return f"dp.{self.kind}{self.args!r}"


#: The budgets an ordinary collect is given in those sessions: every kind (some refused by some accountants, free).
COLLECT_BUDGETS = (Budget("PureDP", (1,)), Budget("ApproxDP", (1, 1e-6)), Budget("ZCDP", (0.5,)),
                   Budget("ZCDP", (0.5, 1e-6)))


def _number(draw: st.DrawFn, values: list[Any]) -> Any:
    value = draw(st.sampled_from(values))
    return Hostile(value) if isinstance(value, int | float | Fraction) and not isinstance(value, bool) \
        and draw(st.integers(0, 5)) == 0 else value


# ------------------------------------------------------------------------------------------ queries

@dataclass(frozen=True, repr=False)
class QuerySpec:
    """``t.<steps>.filter(where).agg(measure)``: a scalar count or bounded sum, or (``shape``) a query interactive
    mechanisms refuse (a mean, a grouped query, two measures). ``steps`` are a tuned chain's row steps
    (:class:`tests.adversarial.composed.Chain`: derived columns, filters, ``bound``, ``sample``)."""

    where: pl.Expr | None
    measure: str
    target: Any = None
    bounds: Any = (0, 1)
    shape: str = "scalar"
    steps: tuple[tuple[str, Any], ...] = ()

    def measures(self) -> list[dp.Measure]:
        if self.measure == "len":
            return [dp.len()]
        if self.measure == "count":
            return [dp.count(self.target)]
        if self.shape == "mean":
            return [dp.mean(self.target, bounds=self.bounds)]
        return [dp.sum(self.target, bounds=self.bounds)]

    def build(self, sess: dp.Session) -> dp.Query:
        frame = apply_steps(sess.table("t"), self.steps)
        if self.where is not None:
            frame = frame.filter(self.where)
        measures = self.measures()
        if self.shape == "grouped":
            return frame.group_by("b", keys={"b": [True, False]}).agg(m=measures[0])
        if self.shape == "two":
            return frame.agg(m=measures[0], n=dp.len())
        return frame.agg(m=measures[0])

    def __repr__(self) -> str:
        where = "" if self.where is None else f".filter({self.where})"
        target = "" if self.target is None else f"{self.target}"
        shape = "" if self.shape == "scalar" else f" [{self.shape}]"
        bounds = f", {self.bounds}" if self.measure == "sum" else ""
        return f"t{describe_steps(self.steps)}{where}.{self.measure}({target}{bounds}){shape}"


def _frame(draw: st.DrawFn, unit: str, storage: Storage, tuned: bool) -> tuple[tuple[tuple[str, Any], ...], Columns]:
    """A tuned chain's row steps (none unless ``tuned``) and the columns, by kind, of the frame they give."""
    columns = {name: kind_of(dtype) for name, dtype in base(storage).schema.items() if name != "u" or unit == "row"}
    privacy_unit = (UNITS | AUTO_UNITS)[unit]
    steps = tuple(row_step(draw, columns, 1, privacy_unit, tuned=True, sample=True)
                  for _ in range(draw(st.integers(0, 3)) if tuned else 0))
    return steps, columns


@st.composite
def queries(draw: st.DrawFn, unit: str, storage: Storage = MEMORY, tuned: bool = False) -> QuerySpec:
    """A query an interactive call runs; with ``tuned``, on a tuned chain's frame and maybe with ``bounds="auto"``."""
    steps, columns = _frame(draw, unit, storage, tuned)
    where = draw(st.one_of(st.none(), expressions(columns, "bool", draw(st.integers(0, 2)))))
    measure = draw(st.sampled_from(["len", "count", "sum", "sum"]))
    shape = draw(st.sampled_from(["scalar"] * 8 + ["mean", "grouped", "two"]))
    if shape == "grouped" and columns.get("b") != "bool":    # a tuned chain's steps dropped or replaced it
        shape = "scalar"
    if measure == "len":
        return QuerySpec(where, "len", shape="grouped" if shape == "grouped" else "scalar", steps=steps)
    numeric = sorted(n for n, k in columns.items() if k in ("int", "float", "dec", "bool"))
    computed = expressions(columns, draw(st.sampled_from(["int", "float"])), 1)
    target: Any = draw(st.one_of(st.sampled_from(numeric), computed) if numeric else computed)
    if measure == "count":
        return QuerySpec(where, "count", target, shape="two" if shape == "two" else "scalar", steps=steps)
    bounds = draw(st.sampled_from([(0, 1), (-10, 10), (0, 100), (-1e6, 1e6), (0, 2**40), *(["auto"] if tuned else [])]))
    return QuerySpec(where, "sum", target, bounds, shape, steps)


# ------------------------------------------------------------------------------------------ steps

@dataclass(frozen=True)
class Step:
    """One call of the sequence: ``op`` with its arguments (queries and hostile numbers built per run)."""

    op: str
    args: tuple[tuple[str, Any], ...] = ()

    def __repr__(self) -> str:
        return f"{self.op}({', '.join(f'{k}={v!r}' for k, v in self.args)})"


@dataclass(repr=False)
class Sequence:
    """A session kind and the steps run on it."""

    unit: str
    kind: str
    storage: Storage = field(default=MEMORY, repr=False)
    steps: list[Step] = field(default_factory=list)
    tuned: bool = False

    def __repr__(self) -> str:
        steps = "\n  ".join(f"{i}: {s!r}" for i, s in enumerate(self.steps))
        return f"{self.unit}/{self.kind}/{self.storage.name}:\n  {steps}"


THRESHOLDS = [-5, 0, 3, 10, 25, 40, 60, 1e9, Fraction(61, 2), 2.5]
EPS = [0.1, 0.5, 1, 2, Fraction(1, 3)]


#: Calls that need no open object, and those on each object (drawn once the sequence has opened it).
FREE = ["open_sv", "open_ch", "open_filter", "collect", "gated", "robust", "run_until", "ptr"]
#: The calls drawn under a unit whose ``max_rows`` is ``"auto"``: the others (sparse vectors, channels, filters, gated
#: releases, robust medians, ``run_until``) refuse it when opened or called, free, so their draws tested nothing
#: (review 40b: 4 in 10 of that unit's steps; ``test_review40b.py`` checks those refusals on D and D′ directly).
AUTO_ROWS_FREE = ["collect", "ptr"]
ON = {"sv": ["sv_test", "sv_test", "sv_test", "sv_close", "lose"],
      "ch": ["ch_test", "ch_test", "ch_cond", "ch_cond", "ch_revise", "ch_between", "ch_boundary", "ch_select",
             "ch_close", "ch_enter", "lose"],
      "filter": ["filter_collect", "filter_collect"]}


def _step(draw: st.DrawFn, seq: Sequence, opened: set[str]) -> Step:  # noqa: C901, PLR0912, PLR0915
    unit, kind = seq.unit, seq.kind
    free = AUTO_ROWS_FREE if unit == "auto_rows" else FREE
    op = draw(st.sampled_from(free + [op for o in sorted(opened) for op in ON[o] * 2]))
    if op.startswith("open_"):
        opened.add(op[5:])

    def q() -> QuerySpec:
        return draw(queries(unit, seq.storage, seq.tuned))

    def n(values: list[Any]) -> Any:
        return _number(draw, values)

    args: dict[str, Any] = {}
    if op == "open_sv":
        noise = draw(st.sampled_from(["laplace", "laplace", "gaussian"]))
        args = {"threshold": n(THRESHOLDS), "max_positives": n([1, 2, 3, 0]), "noise": noise}
        if noise == "gaussian":
            args |= {"budget": Budget("ZCDP", (draw(st.sampled_from([0.1, 1, 0.01])),)),
                     "max_length": n([None, 3, 6])}
        else:
            args |= {"budget": Budget("PureDP", (n(EPS),)),
                     "release": draw(st.sampled_from([None, Budget("PureDP", (0.5,))])),
                     "refund": draw(st.sampled_from([None, True, False])), "max_length": n([None, None, 4])}
    elif op in ("sv_test", "filter_collect", "collect"):
        args = {"query": q()}
        if op == "filter_collect":
            args["budget"] = Budget("ZCDP", (draw(st.sampled_from([0.05, 0.5, 5])),))
        if op == "collect":
            args["budget"] = (draw(st.sampled_from(COLLECT_BUDGETS)) if kind in ACCOUNTS else
                              Budget("ApproxDP", (n(EPS), 0)) if kind != "zcdp" else Budget("ZCDP", (0.1,)))
    elif op == "open_ch":
        args = {"epsilon": n(EPS), "max_hits": n([1, 2, 3]), "delta": n([1e-6, 1e-5, 2e-4]),
                "min_q": draw(st.sampled_from([None, None, 0.1, 0.2])),
                "per_unit": draw(st.sampled_from([False, False, True]))}
    elif op == "ch_test":
        args = {"query": q(), "threshold": n(THRESHOLDS), "prior": draw(st.booleans()),
                "epsilon": n([None, None, 0.1, 5])}
    elif op == "ch_cond":
        target = draw(st.sampled_from(["above", "below", "between", "outside"]))
        ends = sorted([draw(st.sampled_from(THRESHOLDS)) for _ in range(1 if target in ("above", "below") else 2)])
        args = {"query": q(), "when": (target, tuple(Hostile(e) if draw(st.integers(0, 4)) == 0 else e
                                                     for e in ends)),
                "epsilon": n([None, None, 0.1]), "name": draw(st.sampled_from([None, "a", "b"]))}
    elif op == "ch_revise":
        args = {"name": draw(st.sampled_from(["a", "b"])), "when": ("above", (draw(st.sampled_from(THRESHOLDS)),))}
    elif op == "ch_between":
        lo, hi = sorted(draw(st.sampled_from(THRESHOLDS)) for _ in range(2))
        args = {"query": q(), "lower": n([lo]), "upper": n([hi]), "epsilon": n([None, 0.1])}
    elif op == "ch_boundary":
        args = {"query": q(), "threshold": n(THRESHOLDS), "epsilon": n([None, None, 0.1])}
    elif op == "ch_select":
        args = {"queries": tuple(q() for _ in range(draw(st.integers(1, 3)))), "epsilon": n([None, 0.1])}
    elif op == "open_filter":
        args = {"budget": Budget("ZCDP", (draw(st.sampled_from([0.1, 1, 2])),))}
    elif op == "gated":
        args = {"query": q(), "budget": Budget("PureDP", (n(EPS),)), "gate": q(), "threshold": n(THRESHOLDS),
                "gate_budget": Budget("PureDP", (n(EPS),)), "refund": draw(st.sampled_from([None, False]))}
    elif op == "robust":
        steps, columns = _frame(draw, unit, seq.storage, seq.tuned)
        numeric = sorted(c for c, k in columns.items() if k in ("int", "float", "dec"))
        column = draw(st.sampled_from(["i", "x", "n", "f", "w", "m", "s"] + (["u"] if unit == "row" else [])) if
                      not seq.tuned else st.sampled_from(numeric or sorted(columns) or ["x"]))
        args = {"steps": steps, "column": column,
                "bounds": draw(st.sampled_from([(0, 100), (-100, 100), (0, 1), (-1e9, 1e9)])),
                "budget": Budget("ApproxDP", (n([1, 2]), n([1e-4, 1e-6]))),
                "refund": draw(st.sampled_from([None, False]))}
    elif op == "run_until":
        args = {"steps": tuple(q() for _ in range(draw(st.integers(1, 3)))), "budget": Budget("PureDP", (n(EPS),)),
                "stop_at": draw(st.sampled_from([1, 2, 99])), "delta": n([0, 0, 1e-6]),
                "stops": draw(st.sampled_from([None, (1,), (2,)])), "refund": draw(st.sampled_from([None, False]))}
    elif op == "ptr":
        args = {"test": q(), "threshold": draw(st.sampled_from(THRESHOLDS)), "release": q(), "test_epsilon": n(EPS),
                "release_epsilon": n(EPS), "refund": draw(st.sampled_from([None, False]))}
    elif op == "lose":
        args = {"which": draw(st.sampled_from(sorted(opened & {"sv", "ch"})))}
    return Step(op, tuple(args.items()))


@st.composite
def sequences(draw: st.DrawFn, max_steps: int = 8, storage: Storage = MEMORY, tuned: bool = False,
              accounts: bool = False) -> Sequence:
    """A session kind and 1-``max_steps`` interactive calls (weighted towards calls on the open objects).

    With ``tuned``, the session's unit may choose its bounds (:data:`AUTO_UNITS`), and every query and robust
    median runs on a tuned chain's frame (derived columns, filters, ``bound``, ``sample``; sums may take
    ``bounds="auto"``). With ``accounts``, the session is of a kind of :data:`ACCOUNTS` (every accountant, each
    budget kind), and ordinary collects are given budgets of every kind (:data:`COLLECT_BUDGETS`)."""
    unit = draw(st.sampled_from(sorted(UNITS) + (sorted(AUTO_UNITS) if tuned else [])))
    seq = Sequence(unit, draw(st.sampled_from(sorted(ACCOUNTS if accounts else SESSIONS))), storage, tuned=tuned)
    opened: set[str] = set()
    for _ in range(draw(st.integers(1, max_steps))):
        seq.steps.append(_step(draw, seq, opened))
    return seq


# ------------------------------------------------------------------------------------------ running a sequence

_TARGETS = {"above": dp.above, "below": dp.below, "between": dp.between, "outside": dp.outside}


@dataclass
class Run:
    """One session's run of a sequence: its open objects, its hostile numbers' log, what ``stop`` received."""

    sess: dp.Session
    objects: dict[str, Any] = field(default_factory=dict)
    log: Log = field(default_factory=Log)
    stopped_on: list[list[pl.DataFrame]] = field(default_factory=list)

    def arg(self, value: Any) -> Any:
        if isinstance(value, Hostile):
            return value.make(self.log)
        if isinstance(value, QuerySpec):
            return value.build(self.sess)
        if isinstance(value, tuple) and value and all(isinstance(v, QuerySpec) for v in value):
            return [v.build(self.sess) for v in value]
        if isinstance(value, Budget):
            return getattr(dp, value.kind)(*(self.arg(v) for v in value.args))
        return value

    def public(self) -> tuple[Any, ...]:
        """Every object's public state (what its attributes say), and the ledger."""
        sv, ch, filt = (self.objects.get(k) for k in ("sv", "ch", "filter"))
        return (None if sv is None else (sv.answers, sv.positives, sv.closed, sv.status(), tuple(sv.values)),
                None if ch is None else (ch.hits, ch.calls, ch.closed, ch.status()),
                None if filt is None else (filt.closed, repr(filt)),
                ledger(self.sess))

    def call(self, step: Step) -> Any:   # noqa: C901, PLR0911, PLR0912 - one branch per call kind
        a = {k: self.arg(v) for k, v in step.args}
        sess, objs = self.sess, self.objects
        if step.op == "open_sv":
            objs["sv"] = sess.sparse_vector(**a)
            return "opened"
        if step.op == "open_ch":
            ch = sess.target_charging(**a)
            objs["ch"] = ch.__enter__()
            return "opened"
        if step.op == "open_filter":
            objs["filter"] = sess.individual_filter(**a)
            return "opened"
        if step.op == "lose":
            objs.pop(a["which"], None)
            gc.collect()
            return "lost"
        if step.op == "collect":
            return a["query"].collect(a["budget"])
        if step.op == "gated":
            return gated_release(a["query"], a["budget"], a["gate"], a["threshold"], a["gate_budget"],
                                 refund=a["refund"])
        if step.op == "robust":
            frame = apply_steps(sess.table("t"), a["steps"])
            return robust_median(frame, a["column"], a["bounds"]).collect(a["budget"], refund=a["refund"])
        if step.op == "run_until":
            stop_at = a.pop("stop_at")

            def stop(results: list[pl.DataFrame]) -> bool:
                self.stopped_on.append([r.clone() for r in results])
                return len(results) == stop_at

            out = run_until(a["steps"], a["budget"], stop, delta=a["delta"], stops=a["stops"], refund=a["refund"])
            for seen in self.stopped_on[-len(out):]:
                assert len(seen) <= len(out) and all(s.equals(r) for s, r in zip(seen, out, strict=False)), \
                    "stop received what run_until did not return"
            self.stopped_on.clear()
            return out
        if step.op == "ptr":
            test_query, release_query, bar = a["test"], a["release"], a["threshold"]
            return propose_test_release(
                sess, lambda: test_query.collect(dp.PureDP(1)).row(0)[0] >= bar,
                lambda: release_query.collect(dp.PureDP(1)), test_epsilon=a["test_epsilon"],
                release_epsilon=a["release_epsilon"], refund=a["refund"])
        kind = step.op.split("_")[0]
        obj = objs.get({"sv": "sv", "ch": "ch", "filter": "filter"}[kind])
        if obj is None:
            return "no object"
        if step.op == "sv_test":
            return obj.test(a["query"])
        if step.op == "sv_close":
            return obj.close()
        if step.op == "filter_collect":
            return obj.collect(a["query"], a["budget"])
        if step.op == "ch_enter":
            return obj.__enter__() and "entered"
        if step.op == "ch_close":
            return obj.close()
        if "when" in a:
            target, ends = a["when"]
            a["when"] = _TARGETS[target](*(self.arg(e) for e in ends))
        method = {"ch_test": "test", "ch_cond": "conditional_release", "ch_revise": "revise",
                  "ch_between": "between", "ch_boundary": "boundary_test", "ch_select": "select_best"}[step.op]
        if method == "revise":
            return obj.revise(a["name"], a["when"])
        positional = a.pop("queries" if method == "select_best" else ("name" if method == "revise" else "query"))
        return getattr(obj, method)(positional, **a)


def ledger(sess: dp.Session) -> tuple[tuple[Any, ...], ...]:
    """Every ledger row: status, cost and text (the ids count rows alike on both sessions)."""
    return tuple(sess.history().select("status", "cost", "query").iter_rows())


def released(value: Any) -> tuple[Any, ...]:
    """The part of a released value that later calls may depend on (answers, ⊥, which cells): compared as a
    *divergence*, not an error; numbers themselves are not compared."""
    if value is None or isinstance(value, bool | str):
        return ("answer", value)
    if isinstance(value, int | float):
        return ("number",)
    if isinstance(value, tuple):                  # select_best: (index, value)
        return ("best", value[0])
    if isinstance(value, dict):                   # a sparse vector's values, by query index
        return ("values", tuple(sorted(value)))
    if isinstance(value, pl.DataFrame):
        return ("frame", tuple(value.schema.items()), value.height)
    if isinstance(value, list):
        return ("frames", tuple(released(v) for v in value))
    return ("other", type(value).__name__)


@dataclass(frozen=True)
class Seen:
    """One step of one run: what came out (released, or the error), the warnings, the public state after it."""

    outcome: Outcome
    warned: tuple[tuple[str, str], ...]
    after: tuple[Any, ...]
    log: int


def play(sess: dp.Session, seq: Sequence, run: Run | None = None) -> list[Seen]:
    """Run ``seq`` on ``sess`` (or through ``run``: a remote run's handle on it), checking each run's own invariants
    (see the module docstring) at every step."""
    run = Run(sess) if run is None else run
    seen: list[Seen] = []
    before = run.public()
    for i, step in enumerate(seq.steps):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outcome: Outcome = ("released", released(run.call(step)))
            except BaseException as e:  # noqa: BLE001 - the analyst catches everything
                if isinstance(e, AssertionError):
                    raise
                outcome = (type(e).__name__, str(e))
                assert isinstance(e, dp.DPFrameError), f"step {i}: {step!r} raised {type(e).__name__}: {e}"
        after = run.public()
        if outcome[0] != "released":
            rows_before, rows_after = before[-1], after[-1]
            if rows_after == rows_before:
                assert after == before, f"step {i}: {step!r} was refused ({outcome}) but changed {before} → {after}"
            else:
                changed = [r for r in rows_after if r not in rows_before]
                # the analyst's own code in propose_test_release runs (and is charged for) ordinary queries
                assert any(r[0] == "failed" for r in changed) and (step.op == "ptr" or all(
                    r[0] == "failed" for r in changed)), \
                    f"step {i}: {step!r} failed ({outcome}) leaving rows other than failed ones: {changed}"
        assert not run.log, f"step {i}: {step!r}: an analyst's number was asked {run.log}"
        seen.append(Seen(outcome, tuple(sorted((w.category.__name__, str(w.message)) for w in caught)), after,
                         len(run.log)))
        before = after
    for name in ("ch", "sv"):          # leave nothing open: a lost handle is committed by its finalizer
        with contextlib.suppress(dp.DPFrameError):
            if run.objects.get(name) is not None:
                run.objects[name].close()
    return seen


def agree(d: list[Seen], d_plus: list[Seen]) -> tuple[int | None, str]:
    """(the step the runs part at, or None; why): the first step whose outcomes differ must differ in what was
    released only (both released); any other difference before it is reported by the caller."""
    for i, (a, b) in enumerate(zip(d, d_plus, strict=True)):
        if a.outcome[0] == b.outcome[0] == "released" and a.outcome != b.outcome:
            return i, "released outputs differ"
        if a != b:
            return i, "differ"
    return None, "alike"


def _observe(sess: dp.Session, seq: Sequence) -> Outcome:
    return tuple(play(sess, seq))


NEIGHBOURS = Neighbours(session, shared=False)


@dataclass(frozen=True)
class Unit:
    """D′'s added unit, shown by :func:`~tests.adversarial.composed.shown` (a far date's repr panics in Polars)."""

    rows: pl.DataFrame

    def __repr__(self) -> str:
        return shown(self.rows)


UNITS_ADDED = st.builds(Unit, extreme_rows())
#: D′'s added unit for tuned sequences: it may also have many rows (beyond every fixed ``max_rows``, and in the
#: far bins of an ``"auto"`` unit's rows-per-unit histogram).
MANY_ROWS_ADDED = st.builds(Unit, extreme_rows(many=True))


def check(seq: Sequence, extra: Unit, backend: str, observe: Callable[[dp.Session, Sequence], Outcome] = _observe,
          then: Callable[[Outcome], None] | None = None) -> str:
    """The sequence behaves alike on D and D′ up to the first released difference; returns a label for events.

    ``observe`` runs it on one session (in process by default; review 47 runs it through a server); ``then``
    receives D's outcome for further checks.
    """
    parted: list[int | None] = []

    def same(on_d: Outcome, on_plus: Outcome) -> bool:
        step, why = agree(list(on_d), list(on_plus))
        parted.append(step)
        return why != "differ"

    on_d = NEIGHBOURS.compare(seq, (seq.unit, seq.kind), extra.rows, backend, seq.storage, 1, observe, same)
    if on_d is None:
        return "D′ refused by the session"
    if then is not None:
        then(on_d)
    event("runs alike throughout" if parted[0] is None else f"released outputs part at step {parted[0]}")
    event(f"{sum(s.outcome[1] != ('answer', 'no object') for s in on_d)} of {len(on_d)} steps ran")
    return "outcomes on D: " + ", ".join(sorted({s.outcome[0] if s.outcome[0] != "released" else
                                                 "released: " + str(s.outcome[1][0]) for s in on_d}))


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@CI
@given(seq=sequences(), extra=UNITS_ADDED)
def test_a_sequence_of_interactive_calls_behaves_alike_on_neighbouring_datasets(
        backend: str, seq: Sequence, extra: Unit) -> None:
    event(check(seq, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@DEEP
@given(seq=sequences(max_steps=14), extra=UNITS_ADDED)
def test_many_sequences_of_interactive_calls_behave_alike_on_neighbouring_datasets(
        backend: str, seq: Sequence, extra: Unit) -> None:
    event(check(seq, extra, backend))


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(CI, max_examples=6)
@given(seq=sequences(tuned=True), extra=MANY_ROWS_ADDED)
def test_a_sequence_on_tuned_frames_behaves_alike_on_neighbouring_datasets(
        backend: str, seq: Sequence, extra: Unit) -> None:
    """Interactive calls whose queries and robust medians run on tuned chains' frames (derived columns, filters,
    ``bound()``, ``sample()``, ``bounds="auto"``), in sessions whose unit may choose its bounds."""
    event(check(seq, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@DEEP
@given(seq=sequences(max_steps=14, tuned=True), extra=MANY_ROWS_ADDED)
def test_many_sequences_on_tuned_frames_behave_alike_on_neighbouring_datasets(
        backend: str, seq: Sequence, extra: Unit) -> None:
    event(check(seq, extra, backend))


@settings(CI, max_examples=2)
@given(seq=sequences(max_steps=4, tuned=True, storage=SPARK), extra=st.builds(Unit, extreme_rows(SPARK)))
def test_a_sequence_of_interactive_calls_behaves_alike_on_spark(seq: Sequence, extra: Unit, spark_session: Any
                                                                ) -> None:
    """The interactive mechanisms on the Spark backend (the table less the ``Duration`` column it refuses)."""
    event(check(seq, extra, "spark"))


@pytest.mark.slow
@settings(DEEP, max_examples=100)
@given(seq=sequences(max_steps=14, tuned=True, storage=SPARK), extra=st.builds(Unit, extreme_rows(SPARK, many=True)))
def test_many_sequences_of_interactive_calls_behave_alike_on_spark(seq: Sequence, extra: Unit, spark_session: Any
                                                                   ) -> None:
    event(check(seq, extra, "spark"))


#: (backend, storage) pairs with D and D′ each written to a file: Parquet scanned by Polars, and by DuckDB itself.
FILES = [("polars", "parquet"), ("duckdb", "parquet_duckdb")]


@pytest.mark.parametrize(("backend", "stored"), FILES)
@settings(CI, max_examples=3)
@given(data=st.data())
def test_a_sequence_of_interactive_calls_behaves_alike_on_neighbouring_files(
        backend: str, stored: str, data: st.DataObject) -> None:
    storage = STORAGES[stored]
    event(check(data.draw(sequences(storage=storage)), data.draw(st.builds(Unit, extreme_rows(storage))), backend))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "stored"), FILES)
@settings(DEEP, max_examples=300)
@given(data=st.data())
def test_many_sequences_of_interactive_calls_behave_alike_on_neighbouring_files(
        backend: str, stored: str, data: st.DataObject) -> None:
    storage = STORAGES[stored]
    seq, extra = data.draw(sequences(max_steps=14, storage=storage)), data.draw(st.builds(Unit, extreme_rows(storage)))
    event(check(seq, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(DEEP, max_examples=300)
@given(data=st.data())
def test_many_sequences_on_any_unit_type_behave_alike_on_neighbouring_datasets(backend: str, data: st.DataObject
                                                                              ) -> None:
    """The unit column of every type, the added unit's id adversarial (``UNIT_TYPES``; review 38b)."""
    storage = unit_storage(data, MEMORY)
    seq = data.draw(sequences(max_steps=14, tuned=True, storage=storage))
    event(check(seq, data.draw(st.builds(Unit, extreme_rows(storage, many=True, ids=True))), backend))
