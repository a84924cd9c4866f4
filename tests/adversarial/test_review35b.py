"""Review 35b: the interactive mechanisms composed, and everything the public API hands out, at main's boundary.

Scope, part 1: sequences of interactive calls (sparse vectors, target-charging channels, individual filters,
PTR, gated releases, robust medians, ``run_until``) composed with each other and with ordinary collects on one
session, run on D and D′ by ``test_interactive_oracle.py``; what it found is kept here, minimised. The analyst
picks every argument (numbers of its own subclasses included), the order of calls, and catches every exception.

Part 2: every object reachable from a representative run of each query entry point
(:func:`dpframe.testing.query_entry_points`: a new one fails here until it has a run below), from the
session's public attributes and readers (``history``, ``spent``, ``explain``, ``plan``, ``cost``, interval and
diagnostics results, a SQL query's post-processing, stream and channel results, errors raised after a charge),
walked through public attributes, properties and the items of containers (ported from the unmerged review 34c).
Each type found must be classified (:data:`KINDS`); an unclassified engine type fails the sweep. For every
engine-made object: no public attribute can be set or deleted by plain syntax (``obj.x = v``, ``del obj.x``,
``obj.__class__ = C``), a one-of-a-kind object cannot be copied or pickled, a mutable container read twice is two
copies, nothing a run hands out is shared with another run, and no ``repr`` of anything handed out shows an exact
statistic or a private key; and races across objects (queries, streams, ledger reads, ``sess.close()``) keep the
ledger whole. Python's reflection (``object.__setattr__``, ``vars()``, ``type.__setattr__``, ``gc``) is patching,
on the trusted side of ``docs/guarantees.md``: it is not tried here.

Each test of a finding is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import inspect
import os
import pickle
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.family import ReadOnly, Releasable
from dpframe.interactive.ptr import gated_release, propose_test_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.sealed import ReadOnlyKeys, ReadOnlySchema, Sealed
from dpframe.testing import query_entry_points

from .test_races import slow_private_steps

ROWS = 1237                       # the exact row count: shown nowhere
SECRET = "zq-secret-key"          # a key one unit holds: never released, shown nowhere
BOUNDS = (0, 10)


def _data() -> pl.DataFrame:
    n = ROWS - 1
    return pl.DataFrame({"u": list(range(ROWS)), "g": [["a", "b", "c"][i % 3] for i in range(n)] + [SECRET],
                         "x": [float(i % 11) for i in range(ROWS)], "y": [i % 2 for i in range(ROWS)]})


def _session(budget: dp.Budget = dp.ApproxDP(10**6, Fraction(1, 2)), **kw: Any) -> dp.Session:
    return dp.Session({"t": _data()}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=0, **kw)


PURE, APPROX = dp.PureDP(1), dp.ApproxDP(1, Fraction(1, 10**6))


def _runs() -> dict[str, Callable[[dp.Session], Any]]:
    """A representative run of each query entry point: what it hands back (a result, a stream, an error)."""
    def agg(s: dp.Session) -> Any:
        q = s.table("t").agg(dp.len(), dp.sum("x", bounds=BOUNDS), dp.median("x", bounds=BOUNDS))
        return q, q.explain(PURE), q.plan(PURE), q.cost(PURE), q.collect(PURE), \
            s.table("t").agg(dp.mean("x", bounds="auto")).collect(PURE, diagnostics=True, ci=0.9)

    def sv(s: dp.Session) -> Any:
        stream = s.sparse_vector(threshold=10, max_positives=1, budget=PURE)
        return stream, stream.test(s.table("t").agg(dp.len())), stream.charged()

    def tct(s: dp.Session) -> Any:
        with s.target_charging(epsilon=1, max_hits=2, delta=1e-6) as ch:
            return ch, ch.test(s.table("t").agg(dp.len()), threshold=10), \
                ch.conditional_release(s.table("t").agg(dp.len()), when=dp.above(10), name="n"), ch.plan

    def individual(s: dp.Session) -> Any:
        z = _session(dp.ZCDP(100))
        f = z.individual_filter(dp.ZCDP(1))
        return f, f.collect(z.table("t").agg(dp.sum("x", bounds=BOUNDS)), budget=dp.ZCDP(Fraction(1, 100)))

    def sql(s: dp.Session) -> Any:
        q = s.sql("SELECT g, COUNT(*) AS n, AVG(CLAMP(x, 0, 10)) AS m FROM t GROUP BY g ORDER BY n LIMIT 2")
        return q, q.explain(APPROX), q.collect(APPROX), q.collect(APPROX, ci=0.9)

    def top_k(method: str) -> Callable[[dp.Session], Any]:
        def run(s: dp.Session) -> Any:
            t = s.table("t")
            gb = t.group_by("g", keys=["a", "b"]) if method in ("gumbel", "peeling", "tct") else t.group_by("g")
            q = gb.top_k(k=1, method=method)
            return q, q.explain(APPROX), q.collect(APPROX)
        return run

    def family(build: Callable[[dp.Frame], Any], budget: dp.Budget = PURE) -> Callable[[dp.Session], Any]:
        def run(s: dp.Session) -> Any:
            q = build(s.table("t"))
            return q, q.explain(budget), q.collect(budget)
        return run

    def pate(s: dp.Session) -> Any:
        from dpframe_topk import MultiLabelPATE
        votes = pl.DataFrame({"query": [0] * 3, "label": ["l0", "l1", "l2"], "vote": [40, 3, 1]})
        mech = MultiLabelPATE(gumbel_scale=20, sigma=10, delta_t=1e-6)
        return mech, mech.collect(_session(dp.ZCDP(100, Fraction(1, 10**5))), votes)

    t = lambda s: s.table("t")   # noqa: E731
    return {
        "Frame.agg": agg,
        "GroupBy.agg": family(lambda f: f.group_by("g").agg(dp.len(), dp.mean("x", bounds=BOUNDS)), APPROX),
        "Frame.bounds": family(lambda f: f.bounds("x", domain=BOUNDS)),
        "Frame.interior_point": family(lambda f: f.interior_point("x", bounds=BOUNDS, beta=0.5)),
        "Frame.learn_threshold": family(lambda f: f.learn_threshold("x", label="y", bounds=BOUNDS, beta=0.5)),
        "Frame.learn_rectangle": family(lambda f: f.learn_rectangle(["x"], label="y", bounds={"x": BOUNDS},
                                                                    beta=0.5)),
        "Frame.sample": family(lambda f: f.sample(0.5).agg(dp.len())),
        "Frame.linear_regression": family(lambda f: f.query("linear_regression", ["x"], "y",
                                                            bounds={"x": BOUNDS, "y": (0, 1)})),
        "GroupBy.top_k": top_k("stable"),
        **{f"GroupBy.top_k[method={m}]": top_k(m) for m in ("stable", "gumbel", "peeling", "limited_domain", "tct")},
        "Session.sql": sql,
        "Session.sparse_vector": sv,
        "Session.target_charging": tct,
        "Session.individual_filter": individual,
        "dpframe.interactive.ptr:propose_test_release":
            lambda s: propose_test_release(s, lambda: True, lambda: 1.0, test_epsilon=Fraction(1),
                                           release_epsilon=Fraction(1)),
        "dpframe.interactive.ptr:gated_release":
            lambda s: gated_release(t(s).agg(dp.mean("x", bounds=BOUNDS)), PURE, t(s).agg(dp.len()), 10, PURE),
        "dpframe.interactive.ptr:robust_median": lambda s: (robust_median(t(s), "x", bounds=BOUNDS),
                                                            robust_median(t(s), "x", bounds=BOUNDS).collect(APPROX)),
        "dpframe.interactive.stopping:run_until":
            lambda s: run_until([t(s).agg(dp.len())] * 2, PURE, stop=lambda released: False),
        "dpframe_topk:MultiLabelPATE.collect": pate,
    }


def _readers(s: dp.Session) -> dict[str, Any]:
    """What the session hands out besides queries: its attributes and its free readers."""
    frame = s.table("t")
    return {"session": s, "frame": frame, "group_by": frame.group_by("g"), "history": s.history(),
            "spent": s.spent(), "spent_report": s.spent_report(), "spent_as_approx": s.spent_as_approx(),
            "remaining": s.remaining(), "tables": s.tables, "refused": _raised(lambda: s.table("t").agg(
                dp.len()).collect(dp.PureDP(10**9)))}


def _raised(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except dp.DPFrameError as e:
        return e
    raise AssertionError("expected a refusal")


# ------------------------------------------------------------------------------------------ part 1: findings


class _Liar(int):
    """An int that says it is neither below nor above anything."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False


class _LiarFloat(float):
    def __lt__(self, other: object) -> bool:
        return True

    def __gt__(self, other: object) -> bool:
        return True


def test_a_cap_is_read_as_a_plain_int_before_it_is_checked() -> None:
    """``positive_int`` (``max_positives``, ``max_length``, ``max_hits``) compared the analyst's int subclass with 1
    and with its ceiling before reading it as a plain int (the oracle's recording numbers were asked ``__lt__`` and
    ``__gt__``): a 0 or a -1 that says "not below 1" passed. Later checks caught them, but with another argument
    named (``eps2``, ``epsilon``) or a ``TypeError``; a channel's δ (a float subclass) was checked the same way."""
    sess = _session(dp.ApproxDP(100, Fraction(1, 10**5)))
    for value in (_Liar(0), _Liar(-1)):
        with pytest.raises(dp.BudgetError, match="^max_positives: must be an int ≥ 1"):
            sess.sparse_vector(threshold=10, max_positives=value, budget=PURE)
        with pytest.raises(dp.BudgetError, match="^max_hits: must be an int ≥ 1"):
            sess.target_charging(epsilon=1, max_hits=value, delta=1e-6)
    with pytest.raises(dp.BudgetError, match="^delta: must be in"):
        sess.target_charging(epsilon=1, max_hits=2, delta=_LiarFloat(5.0))
    assert sess.history().height == 0


def test_a_stream_or_channel_cannot_be_given_another_class() -> None:
    """``sv.__class__ = Wider`` (plain assignment syntax) was accepted by :class:`~dpframe.sealed.Sealed`, which
    refused only public names: a subclass whose ``_halted`` says "not yet" gave three "above" answers on a stream
    paid for one, and one whose ``_admit`` admits everything would lift a channel's ``max_hits``."""
    from dpframe.interactive.svt import SparseVector

    class Wider(SparseVector):
        def _halted(self) -> bool:
            return False

    sess = _session()
    sv = sess.sparse_vector(threshold=10, max_positives=1, budget=PURE)
    with pytest.raises(AttributeError, match="read-only"):
        sv.__class__ = Wider
    assert type(sv) is SparseVector
    assert sv.test(sess.table("t").agg(dp.len())) and sv.closed and sv.positives == 1


def test_a_frames_schema_cannot_be_made_editable_by_giving_it_its_base_class() -> None:
    """``frame.schema.__class__ = pl.Schema`` (found by the sweep once it tried ``__class__`` on read-only
    containers) made the schema the planner and the backends read editable again: ``schema["s"] = pl.Int64`` on a
    string column made the backend cast it, and a sum released on D was charged, then failed on D′, whose added
    unit holds a string that is not a number — "is this unit in the data?" answered exactly."""
    outcomes = []
    for extra in ([], ["x"]):
        data = pl.DataFrame({"u": range(10 + len(extra)), "s": ["1"] * 10 + extra})
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0)
        frame = sess.table("t")
        schema = frame.schema
        with pytest.raises(AttributeError, match="read-only"):
            schema.__class__ = pl.Schema
        with pytest.raises(TypeError, match="read-only"):
            schema["s"] = pl.Int64
        with pytest.raises(dp.DPFrameError):        # a string column has no sum, on D as on D′: refused, free
            frame.agg(dp.sum("s", bounds=(0, 5))).collect(PURE)
        outcomes.append(sess.history()["status"].to_list())
    assert outcomes == [[], []]


def test_public_keys_cannot_be_made_extendable_by_giving_them_their_base_class() -> None:
    """``q.node.keys.__class__ = pl.DataFrame`` turned a query's checked public keys back into a plain frame:
    ``keys.extend(...)`` added 49 copies of key "a", and one ε = 1 charge released 50 independently noised
    counts of group "a" (their mean is the count to within ±0.2)."""
    sess = _session(dp.PureDP(1))
    q = sess.table("t").group_by("g", keys=["a"]).agg(dp.len())
    with pytest.raises(AttributeError, match="read-only"):
        q.node.keys.__class__ = pl.DataFrame
    with pytest.raises(TypeError, match="read-only"):
        q.node.keys.extend(pl.DataFrame({"g": ["a"] * 49}))
    assert q.collect(PURE).height == 1


@pytest.mark.parametrize("sql", [False, True])
def test_a_query_runs_the_expressions_it_checked_whatever_class_a_handed_out_one_is_given(sql: bool) -> None:
    """``q.node.input.predicate`` handed out the filter node's own ``pl.Expr``, and a ``pl.Expr``'s class can be
    reassigned (plain syntax): given a subclass whose ``_pyexpr`` property is ``map_elements(spy) > 0``, the
    engine ran that unchecked expression when the query was collected — the analyst's function received every
    private value (0, 1, ..., 9), and the count changed. Nodes now hand out copies (:class:`dpframe.sealed.ExprCopies`;
    the sweep's shared-state check covers expressions and series too)."""
    seen: list[Any] = []
    evil = pl.col("x").map_elements(lambda v: seen.append(v) or v, return_dtype=pl.Int64) > 0

    class Evil(pl.Expr):
        @property
        def _pyexpr(self) -> Any:
            return evil._pyexpr

        @_pyexpr.setter
        def _pyexpr(self, value: Any) -> None:
            pass

    data = pl.DataFrame({"u": range(10), "x": range(10)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, 1e-6), seed=0)
    q = sess.sql("SELECT COUNT(*) AS n FROM t WHERE x > 3") if sql else sess.table("t").filter(pl.col("x") > 3).agg(
        dp.len())
    node = q.node.input
    handed = node.polars if sql else node.predicate
    handed.__class__ = Evil
    assert not isinstance(node.polars if sql else node.predicate, Evil)
    q.collect(dp.PureDP(1))
    assert seen == []


def test_a_sealed_object_is_built_once() -> None:
    """Not a route of main's boundary (calling a dunder is reflection), closed because it is cheap: a second
    ``rm.__init__(frame2, ...)`` on a robust median set its private session and node to another session's before
    failing on a public name, while its sensitivity ``m`` (``max_rows``) stayed the first session's; a sparse
    vector's second ``__init__`` replaced its threshold the same way."""
    sess, other = _session(), dp.Session({"t": _data()}, privacy_unit=dp.PrivacyUnit("u", max_rows=50),
                                         budget=dp.ApproxDP(10, Fraction(1, 10**5)), seed=0)
    rm = robust_median(sess.table("t"), "x", bounds=BOUNDS)
    with pytest.raises(TypeError, match="built once"):
        rm.__init__(other.table("t"), "x", BOUNDS)      # type: ignore[misc]
    assert rm._session is sess
    sv = sess.sparse_vector(threshold=10, max_positives=1, budget=PURE)
    with pytest.raises(TypeError, match="built once"):
        sv.__init__(sess, 10**9, 1, PURE)               # type: ignore[misc]
    assert sv.test(sess.table("t").agg(dp.len()))


# ------------------------------------------------------------------------------------------ the sweep

SEALED = "sealed: one of a kind (no public attribute is set or deleted; no copy, no pickle)"
FROZEN = "frozen value (no public attribute is set or deleted; copies are equal values)"
VIEW = "read-only view of engine state"
FRESH = "built for the caller by the call that returned it (the engine never reads it again)"
PLAIN = "plain immutable value"
TOOL = "the session's own machinery, trusted by the threat model (plugin registration is the data owner's act)"
SEEDED = "a seeded session's random source: not private by construction (its seed is public)"

#: Every type the sweep meets, by ``module.qualname``; a new engine type fails until it is classified.
KINDS: dict[str, str] = {
    **{f"dpframe.{name}": SEALED for name in (
        "session.Session", "frame.Query", "family.Releasable", "sql.query.SQLQuery",
        "interactive.svt.SparseVector", "interactive.tct.TargetChargingChannel",
        "interactive.individual.IndividualFilter", "interactive.ptr.RobustMedian",
        "accounting.accountants.BasicAccountant", "accounting.accountants.ZCDPAccountant",
        "plugin.manager.PluginHost", "plugin.manager.SessionPlugins")},
    **{f"dpframe.{name}": FROZEN for name in (
        "budgets.PureDP", "budgets.ApproxDP", "budgets.ZCDP", "measures.Measure", "privacy_unit.PrivacyUnit",
        "plan.nodes.Scan", "plan.nodes.Filter", "plan.nodes.WithColumns", "plan.nodes.Select",
        "plan.nodes.Aggregate", "plan.sample.Sample", "family.Source", "planning.state.PlanContext",
        "sql.nodes.SQLFilter", "sql.nodes.SQLProject", "sql.post.PostProcess", "interactive.tct.ChannelPlan")},
    **{f"dpframe.{name}": VIEW for name in ("family.ReadOnly", "frame.Frame", "frame.GroupBy", "sealed.ReadOnlySchema",
                                            "sealed.ReadOnlyKeys")},
    **{name: FRESH for name in (
        "dpframe.display.Explanation", "dpframe.planning.state.PhysicalPlan", "dpframe.tuning.diagnostics.Diagnosed",
        "dpframe.domains.OrderedDomain",
        "dpframe.mechanism.base.Statistic", "dpframe.mechanism.noise.Noise", "dpframe.accounting.curve.PrivacyCurve",
        "dpframe.errors.BudgetExceededError", "dpframe.errors.BudgetError",
        "dpframe_aggregates.aggregates.AggregatePlan", "dpframe_quantiles.mechanism.QuantilePlan",
        "dpframe.mechanism.deferred.DeferredMapping", "dpframe.mechanism.deferred.DeferredTuple",
        "dpframe_quantiles.mechanism.ExponentialNoise", "dpframe_histogram.regression.LinearModel",
        "dpframe_learning.queries.InteriorPoint", "dpframe_learning.queries.Threshold",
        "dpframe_learning.queries.Rectangle", "dpframe_topk.results.TopKFailed", "dpframe_topk.results.TopKPartial",
        "dpframe_topk.pate.MultiLabelPATE", "polars.dataframe.frame.DataFrame")},
    "dpframe.noise.random.SeededRandomSource": SEEDED, "dpframe_topk.query.Score": FROZEN,
    **{name: TOOL for name in ("pluggy._manager.PluginManager", "pluggy._hooks.HookRelay", "pluggy._caller.HookRelay",
                               "pluggy._tracing.TagTracerSub")},
}

PLAIN_TYPES = (type(None), bool, int, float, str, bytes, Fraction, decimal.Decimal, dt.date, dt.time, dt.timedelta,
               np.generic, pl.DataType, frozenset, types.MappingProxyType)


def _name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _walk(roots: Mapping[str, Any]) -> dict[int, tuple[str, Any]]:
    """Every object reachable from ``roots`` through public attributes, properties and container items."""
    seen: dict[int, tuple[str, Any]] = {}

    def visit(path: str, obj: Any, depth: int) -> None:
        if depth > 5 or id(obj) in seen or inspect.isroutine(obj) or inspect.isclass(obj) or \
                isinstance(obj, types.ModuleType):
            return
        seen[id(obj)] = (path, obj)
        if isinstance(obj, str | bytes | int | float | pl.DataFrame | np.ndarray | ReadOnlySchema | pl.DataType |
                      pl.Expr | pl.Series | pl.LazyFrame):
            return
        if isinstance(obj, list | tuple | set | frozenset):
            for i, item in enumerate(list(obj)[:8]):
                visit(f"{path}[{i}]", item, depth + 1)
            return
        if isinstance(obj, Mapping):
            for key, item in list(obj.items())[:8]:
                visit(f"{path}[{key!r}]", item, depth + 1)
            return
        if _name(obj).startswith("pluggy."):
            return
        names = dir(obj)
        if isinstance(obj, ReadOnly):         # a view reads its target's attributes through
            names = dir(object.__getattribute__(obj, "_target"))
        elif isinstance(obj, Releasable):     # a query reads its family query's attributes through
            names = [*names, *dir(obj.query)]
        for attr in names:
            if attr.startswith("_"):
                continue
            try:
                value = getattr(obj, attr)
            except Exception:      # noqa: BLE001 — a property that refuses (e.g. a standalone accountant's total)
                continue
            visit(f"{path}.{attr}", value, depth + 1)

    for name, root in roots.items():
        visit(name, root, 0)
    return seen


#: The entry points run a second time to find what two runs share (those that build plans, curves and keys).
AGAIN = ("Frame.agg", "GroupBy.agg", "Frame.bounds", "Frame.sample", "Session.sql", "GroupBy.top_k[method=gumbel]",
         "Session.sparse_vector", "dpframe.interactive.ptr:gated_release")


def _handed_out(entries: tuple[str, ...] | None = None) -> dict[int, tuple[str, Any]]:
    roots: dict[str, Any] = {}
    for entry, run in _runs().items():
        if entries is not None and entry not in entries:
            continue
        s = _session()
        roots[entry] = run(s)
        roots.update({f"{entry}: {k}": v for k, v in _readers(s).items()})
    if entries is not None:
        return _walk(roots)
    duck = _session(backend="duckdb")             # what a DuckDB session hands out (its connection: nothing)
    roots["duckdb"] = (_runs()["Frame.agg"](duck), _runs()["Session.sql"](duck), _readers(duck))
    return _walk(roots)


@pytest.fixture(scope="module")
def handed_out() -> dict[int, tuple[str, Any]]:
    return _handed_out()


def test_every_entry_point_has_a_representative_run() -> None:
    assert set(query_entry_points()) <= set(_runs()), "add a run of the new entry point to _runs()"


def test_every_type_handed_out_is_classified(handed_out: dict[int, tuple[str, Any]]) -> None:
    found = {_name(obj): path for path, obj in handed_out.values() if not isinstance(obj, PLAIN_TYPES)
             and not isinstance(obj, list | tuple | dict | set)}
    unclassified = {name: path for name, path in found.items() if name not in KINDS}
    assert not unclassified, f"classify these types in KINDS (see the module docstring): {unclassified}"
    for name, kind in KINDS.items():
        if kind == SEALED and name in found:
            obj = next(o for _, o in handed_out.values() if _name(o) == name)
            assert isinstance(obj, Sealed), f"{name} is not {kind}"


def _attempts(obj: Any, name: str) -> dict[str, Callable[[], Any]]:
    """The plain-syntax routes: ``obj.name = v`` and ``del obj.name`` (reflection is on the trusted side)."""
    value = getattr(obj, name)
    return {"setattr": lambda: setattr(obj, name, value), "delattr": lambda: delattr(obj, name)}


def _public_attributes(obj: Any) -> list[str]:
    out = []
    names = dir(object.__getattribute__(obj, "_target")) if isinstance(obj, ReadOnly) else dir(obj)
    for name in names:
        if name.startswith("_"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:      # noqa: BLE001
            continue
        if not inspect.isroutine(value):
            out.append(name)
    return out


def test_no_public_attribute_of_an_engine_object_is_set_or_deleted(handed_out: dict[int, tuple[str, Any]]) -> None:
    changed = []
    for path, obj in handed_out.values():
        if isinstance(obj, ReadOnlySchema | ReadOnlyKeys):     # read-only containers: their base class is editable
            with pytest.raises(AttributeError, match="read-only"):
                obj.__class__ = pl.Schema if isinstance(obj, ReadOnlySchema) else pl.DataFrame
            continue
        if KINDS.get(_name(obj)) not in (SEALED, FROZEN, VIEW):
            continue
        for name in _public_attributes(obj):
            for how, attempt in _attempts(obj, name).items():
                try:
                    attempt()
                except (AttributeError, TypeError):
                    continue
                changed.append(f"{how}({path}, {name!r})")
        try:
            obj.__class__ = type(obj)
        except (AttributeError, TypeError):
            continue
        changed.append(f"{path}.__class__ = ...")
    assert not changed, changed


def test_one_of_a_kind_objects_cannot_be_copied_or_rebuilt(handed_out: dict[int, tuple[str, Any]]) -> None:
    for path, obj in handed_out.values():
        if KINDS.get(_name(obj)) != SEALED:
            continue
        for how in (copy.copy, copy.deepcopy, lambda o: pickle.dumps(o)):
            with pytest.raises(TypeError, match="cannot be copied"):
                how(obj)
                pytest.fail(f"{path} was copied")
        with pytest.raises(TypeError, match="built once"):
            obj.__init__()                   # a second __init__ (its arguments never matter: refused first)


def test_frozen_values_copy_as_equal_sealed_values(handed_out: dict[int, tuple[str, Any]]) -> None:
    for _, obj in handed_out.values():
        if KINDS.get(_name(obj)) == FROZEN and not isinstance(obj, dp.PrivacyUnit | dp.Measure):
            try:
                twins = (copy.copy(obj), pickle.loads(pickle.dumps(obj)))
            except TypeError as e:                 # it holds a one-of-a-kind object (a context's plugin host)
                assert "cannot be copied" in str(e)
                continue
            for twin in twins:
                names = _public_attributes(obj)
                assert [repr(getattr(twin, n)) for n in names] == [repr(getattr(obj, n)) for n in names]
                with pytest.raises(AttributeError):
                    setattr(twin, names[0], None)


def test_nothing_fresh_is_shared_between_two_runs(handed_out: dict[int, tuple[str, Any]]) -> None:
    """What is classified FRESH (and every list, dict and DataFrame) is new to each run: no engine cache hands it out.

    A cached object handed out (a privacy curve from a process-wide cache) would let one query's caller
    change what the next query is charged."""
    again = _handed_out(AGAIN)
    shared = [path for key, (path, obj) in again.items() if key in handed_out and handed_out[key][1] is obj
              and (KINDS.get(_name(obj)) == FRESH or isinstance(obj, list | dict | set | pl.DataFrame))]
    assert not shared, shared


def test_mutable_containers_handed_out_are_copies(handed_out: dict[int, tuple[str, Any]]) -> None:
    """A list, dict, set, DataFrame, expression or series read twice from an engine object is two objects."""
    shared = []
    for path, obj in handed_out.values():
        if KINDS.get(_name(obj)) not in (SEALED, FROZEN, VIEW) or isinstance(obj, ReadOnlySchema | ReadOnlyKeys):
            continue
        for name in _public_attributes(obj):
            first = getattr(obj, name)
            # a polars expression or series can be given another class (``expr.__class__ = Sub``, whose ``_pyexpr``
            # is another expression) or edited in place: the engine's own must not be handed out
            if isinstance(first, list | dict | set | bytearray | pl.DataFrame | np.ndarray | pl.Expr | pl.Series |
                          pl.LazyFrame | tuple) and (not isinstance(first, tuple) or any(
                              isinstance(item, pl.Expr | pl.Series) for item in first)) \
                    and not isinstance(first, ReadOnlyKeys | ReadOnlySchema) and getattr(obj, name) is first:
                if isinstance(first, np.ndarray) and not first.flags.writeable:
                    continue
                shared.append(f"{path}.{name}")
    assert not shared, f"mutable containers handed out by reference: {shared}"


def test_nothing_handed_out_shows_an_exact_statistic_or_a_private_key(handed_out: dict[int, tuple[str, Any]]) -> None:
    shown = []
    for path, obj in handed_out.values():
        if _name(obj).startswith("pluggy."):
            continue
        text = repr(obj) + (str(obj) if isinstance(obj, BaseException) else "")
        if isinstance(obj, list | tuple | dict):  # its items are checked one by one
            continue
        if isinstance(obj, pl.DataFrame):       # released values: a noisy count can equal the exact one
            text = str(obj.rows())
        elif str(ROWS) in text or (isinstance(obj, int | float) and not isinstance(obj, bool) and obj == ROWS):
            shown.append(path)
        if SECRET in text:
            shown.append(path)
    assert not shown, shown


# ----------------------------------------------------------------------------- races across objects


def _together(*calls: Callable[[], Any], rounds: int = 16) -> list[Any]:
    """Each call in its own thread, ``rounds`` times each, all released at one barrier; the outcomes."""
    barrier = threading.Barrier(len(calls) * rounds)
    out: list[Any] = []
    lock = threading.Lock()

    def run(call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            result: Any = call()
        except dp.DPFrameError as e:
            result = e
        with lock:
            out.append(result)
    threads = [threading.Thread(target=run, args=(c,)) for c in calls for _ in range(rounds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("kind", ["sparse_vector", "target_charging", "individual_filter"])
def test_a_stream_opened_before_the_session_closed_reads_nothing_after(kind: str) -> None:
    """A sparse vector, a channel and an individual filter answered every call after ``sess.close()`` (each
    within its reservation, but a closed session reads nothing: ``Session.closed``)."""
    s = _session(dp.ZCDP(100, Fraction(1, 10**5)) if kind == "individual_filter" else dp.ApproxDP(100, 1e-5))
    q = s.table("t").agg(dp.len())
    calls: dict[str, Callable[[], Any]] = {}
    if kind == "sparse_vector":
        sv = s.sparse_vector(threshold=10**6, max_positives=1, budget=PURE)
        calls[kind] = lambda: sv.test(q)
    elif kind == "target_charging":
        ch = s.target_charging(epsilon=1, max_hits=2, delta=1e-6).__enter__()
        calls[kind] = lambda: ch.test(q, threshold=10**6)
    else:
        f = s.individual_filter(dp.ZCDP(1))
        calls[kind] = lambda: f.collect(s.table("t").agg(dp.sum("x", bounds=BOUNDS)), budget=dp.ZCDP(0.01))
    s.close()
    with pytest.raises(dp.LedgerError, match="closed"):
        calls[kind]()


@pytest.fixture
def slowed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The private steps of ``test_races.py``, a millisecond each, threads switching every microsecond."""
    with slow_private_steps(monkeypatch):
        yield


def _committed(path: str, total: dp.Budget) -> pl.DataFrame:
    """The ledger's rows, read by a new session on the file (after the racing session was closed)."""
    return dp.Session({"t": _data()}, privacy_unit=dp.PrivacyUnit("u"), budget=total, ledger=path).history()


@pytest.mark.usefixtures("slowed")
def test_queries_streams_and_ledger_reads_at_once_never_exceed_the_total(tmp_path: Any) -> None:
    """Queries, a sparse vector's opening and test, ``history()``/``spent()``/``remaining()``: all at once on ε = 5.

    Every released value has its committed charge, the charges add up to at most the total, and no read
    sees a total the ledger never held."""
    path = str(tmp_path / "budget.ledger")
    total = dp.ApproxDP(5, Fraction(1, 10**5))
    s = _session(total, ledger=path)
    q = s.table("t").agg(dp.len())

    def open_sv() -> Any:
        return s.sparse_vector(threshold=10, max_positives=1, budget=dp.PureDP(1)).test(q)
    out = _together(lambda: q.collect(dp.PureDP(1)), open_sv, s.history, s.spent, s.remaining)
    spent = s.spent()
    assert spent.epsilon <= 5     # type: ignore[union-attr]
    reads = [r.epsilon for r in out if isinstance(r, dp.ApproxDP)]
    assert reads and max(reads) <= spent.epsilon      # type: ignore[union-attr]
    released = sum(isinstance(r, pl.DataFrame) and "len" in r.columns for r in out)
    answered = sum(isinstance(r, bool) for r in out)
    s.close()
    ledger = _committed(path, total)
    costs = [Fraction(c.split(",")[0].removeprefix("ε=")) for c in ledger["cost"]]
    assert sum(costs) == spent.epsilon <= 5           # type: ignore[union-attr]
    assert ledger.filter(pl.col("query").str.starts_with("Scan")).height >= released
    assert ledger.filter(pl.col("query").str.starts_with("sparse_vector")).height >= answered
    assert not any(isinstance(r, BaseException) and not isinstance(r, dp.DPFrameError) for r in out)


@pytest.mark.usefixtures("slowed")
def test_closing_the_session_while_queries_and_a_channel_run(tmp_path: Any) -> None:
    """``sess.close()`` racing queries and a channel's tests: each released value was charged first."""
    path = str(tmp_path / "budget.ledger")
    total = dp.ApproxDP(10**4, Fraction(1, 10**5))
    s = _session(total, ledger=path)
    q = s.table("t").agg(dp.len())
    ch = s.target_charging(epsilon=1, max_hits=50, delta=1e-6).__enter__()
    out = _together(lambda: q.collect(dp.PureDP(1)), lambda: ch.test(q, threshold=10), s.close, rounds=8)
    assert s.closed
    assert all(not isinstance(r, BaseException) or isinstance(r, dp.DPFrameError) for r in out)
    released = sum(isinstance(r, pl.DataFrame) for r in out)
    ledger = _committed(path, total)
    assert ledger.filter(pl.col("query").str.starts_with("Scan")).height >= released
    assert ch.calls <= 8 and ch.hits <= ch.calls
    with pytest.raises(dp.DPFrameError):
        q.collect(dp.PureDP(1))
    with pytest.raises(dp.DPFrameError):
        ch.test(q, threshold=10)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_cannot_use_a_stream_or_channel_of_its_parent() -> None:
    """The ledger refuses the child (documented); a stream opened in the parent reaches it too."""
    s, other = _session(), _session()
    q = s.table("t").agg(dp.len())
    sv = s.sparse_vector(threshold=10**9, max_positives=1, budget=PURE)
    ch = other.target_charging(epsilon=1, max_hits=2, delta=1e-6).__enter__()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # the child: report what each call did, then exit
        outcomes = []
        for call in (lambda: sv.test(q), lambda: ch.test(other.table("t").agg(dp.len()), threshold=10),
                     lambda: q.collect(PURE),
                     s.spent, s.history):
            try:
                call()
                outcomes.append("ran")
            except BaseException as e:    # noqa: BLE001
                outcomes.append(type(e).__name__)
        os.write(write, ",".join(outcomes).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as f:
        outcomes = f.read().split(",")
    assert "ran" not in outcomes, outcomes
    assert not sv.answers and ch.calls == 0 and other.history().height == 1

