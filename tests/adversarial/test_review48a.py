"""Review 48a: arguments of the wrong type, sent through the remote boundary, get the in-process error.

A remote session answers as the session does in process (docs/remote.md): the same error class and text, nothing
charged for a refused call. Here every public call of the remote client objects — the session's (``sql``, ``table``,
``schema``, the tools it opens, ``robust_median``, ``gated_release``, ``run_until``), a remote frame's method chain
and its queries' ``cost`` / ``explain`` / ``collect``, a robust median's, each open tool's calls — gets values of
the wrong type in one argument (None, lists, dicts, bytes, a float where a count goes, an object, numpy scalars,
negative and huge numbers, NaN and infinity, text, a boolean, a tuple), on a served session and on its same-seed twin
in process. Both must give the same outcome (the same error class and text, or the same result) and the same
ledger; a refused call charges nothing on either side.

The one allowed difference, documented (docs/remote.md, "Method chaining"; ``test_review46.CLIENT_SIDE``): an object
JSON cannot carry (here :class:`Opaque`) is refused in the analyst's process with "cannot send a ..." where in process
another check names it (both refuse, nothing sent). Every other value crosses as itself (NumPy scalars and arrays as
their type, bytes), so the session's own checks take or refuse it, in their order.

What the sweep found, fixed: NumPy scalars crossed as plain numbers (``max_positives=np.int64(3)``, refused in
process, was taken remotely; texts named ``3`` for ``np.int64(3)``) — they now cross as their type; a query's
budget, accuracy target and options were checked by the client in another order than the session's (``cost(budget,
accuracy=[1])``) — they are now sent as given and checked by the session; ``remote.table`` / ``sql(keys=...)`` raised
other classes than in process; and bare TypeErrors in process (an unhashable family name, ``min_q=[...]``), which a
server answered "the server failed this request (TypeError)" (the tests at the end).
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.ptr import gated_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.remote.tools import CALLS
from dpframe.remote.values import unplaced

from .test_review46 import CLIENT_SIDE

KEY = secrets.token_bytes(32)
DATA = pl.DataFrame({"visitor": [i % 300 for i in range(1500)], "store": [i % 6 for i in range(1500)],
                     "spend": [float(i % 50) for i in range(1500)], "day": [f"d{i % 3}" for i in range(1500)],
                     "label": [i % 2 == 0 for i in range(1500)]})
PURE, APPROX, ZC = dp.PureDP(0.5), dp.ApproxDP(1, 1e-6), dp.ZCDP(0.05)


class Opaque:
    """An object of no type the API takes (its repr without an address, so that texts compare)."""

    def __repr__(self) -> str:
        return "<Opaque>"


BAD: Mapping[str, Any] = {
    "None": None, "list": [1], "dict": {"a": 1}, "bytes": b"x", "float": 2.5, "object": Opaque(),
    "np.int64": np.int64(3), "np.float64": np.float64(0.5), "np.bool_": np.bool_(True), "negative": -3,
    "huge": 10**30, "nan": float("nan"), "inf": float("inf"), "text": "x", "bool": True, "tuple": (1, 2),
}


def session(kind: str) -> dp.Session:
    budget = dp.ZCDP(5) if kind == "zcdp" else dp.ApproxDP(400, 1e-5)
    return dp.Session({"visits": DATA}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=10), budget=budget, seed=3)


class Local:
    """A session in process, with the remote client's calls (``remote.schema``, ``remote.gated_release`` ...)."""

    def __init__(self, sess: dp.Session) -> None:
        self.sess = sess

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sess, name)

    def target_charging(self, *args: Any, **kwargs: Any) -> Any:
        """Entered now, as a remote channel is when it opens (docs/remote.md)."""
        return self.sess.target_charging(*args, **kwargs).__enter__()

    def schema(self, table: Any) -> pl.Schema:
        return self.sess.table(table).collect_schema()

    def robust_median(self, *args: Any, **kwargs: Any) -> Any:
        return robust_median(*args, **kwargs)

    def gated_release(self, *args: Any, **kwargs: Any) -> Any:
        return gated_release(*args, **kwargs)

    def run_until(self, *args: Any, **kwargs: Any) -> Any:
        return run_until(*args, **kwargs)


class Tracked:
    """A handle (in process or remote) that keeps the tools it opens, to close them when the case ends."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.opened: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.handle, name)
        if name not in ("sparse_vector", "target_charging", "individual_filter"):
            return found

        def opening(*args: Any, **kwargs: Any) -> Any:
            self.opened.append(found(*args, **kwargs))
            return self.opened[-1]
        return opening

    def close_all(self) -> None:
        """Close the tools still open, as a server does (later, on its own thread) when a connection ends."""
        for opened in self.opened:
            if not opened.closed and (isinstance(opened, dp.RemoteTool) or getattr(opened, "close", None)):
                if not isinstance(opened, dp.RemoteTool) or "close" in CALLS[opened._tool]:
                    opened.close()


def count(h: Any, store: int = 1) -> Any:
    return h.table("visits").filter(pl.col("store") == store).agg(dp.len())


def grouped(h: Any) -> Any:
    return h.table("visits").group_by("day", keys=["d0", "d1", "d2"])


def median(h: Any) -> Any:
    return h.robust_median(h.table("visits"), "spend", (0, 50))


def gated(h: Any, **args: Any) -> Any:
    a = {"query": h.table("visits").agg(dp.mean("spend", bounds=(0, 50))), "budget": PURE, "gate": count(h),
         "threshold": 10, "gate_budget": PURE, "refund": None, **args}
    return h.gated_release(a["query"], a["budget"], a["gate"], a["threshold"], a["gate_budget"], refund=a["refund"])


def until(h: Any, **args: Any) -> Any:
    a = {"steps": [count(h, 1), count(h, 2)], "budget": PURE, "stop": lambda r: True, "delta": 0, "stops": None,
         "refund": None, **args}
    return h.run_until(a["steps"], a["budget"], a["stop"], delta=a["delta"], stops=a["stops"], refund=a["refund"])


def tool(h: Any, name: str) -> Any:
    if name == "sv":
        return h.sparse_vector(threshold=100, max_positives=2, budget=PURE)
    if name == "ch":
        return h.target_charging(epsilon=1, max_hits=3, delta=1e-6)
    return h.individual_filter(budget=dp.ZCDP(0.5))


#: name -> (session kind, setup(handle) -> state, call(handle, state, bad value)); the call is what is compared.
Case = tuple[str, Callable[[Any], Any], Callable[[Any, Any, Any], Any]]
NONE: Callable[[Any], Any] = lambda h: None  # noqa: E731


def _cases() -> dict[str, Case]:
    c: dict[str, Case] = {}

    def add(name: str, call: Callable[[Any, Any, Any], Any], setup: Callable[[Any], Any] = NONE,
            kind: str = "approx") -> None:
        c[name] = (kind, setup, call)

    # the session's calls
    add("sql(query)", lambda h, s, v: h.sql(v).cost(PURE))
    add("sql(keys)", lambda h, s, v: h.sql("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", keys=v).cost(PURE))
    add("sql(keys={day: v})", lambda h, s, v: h.sql("SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
                                                     keys={"day": v}).cost(PURE))
    add("table(name)", lambda h, s, v: h.table(v).agg(dp.len()).cost(PURE))
    add("schema(table)", lambda h, s, v: h.schema(v))
    def opened(method: str, given: dict[str, Any], arg: str) -> Callable[[Any, Any, Any], Any]:
        return lambda h, s, v: getattr(h, method)(**{**given, arg: v}).status()

    def called(function: Callable[..., Any], arg: str) -> Callable[[Any, Any, Any], Any]:
        return lambda h, s, v: function(h, **{arg: v})

    for arg in ("threshold", "max_positives", "budget", "release", "refund", "noise", "max_length"):
        add(f"sparse_vector({arg})", opened("sparse_vector", {"threshold": 100, "max_positives": 2, "budget": PURE},
                                            arg))
    for arg in ("epsilon", "max_hits", "delta", "min_q", "per_unit"):
        add(f"target_charging({arg})", opened("target_charging", {"epsilon": 1, "max_hits": 3, "delta": 1e-6}, arg))
    add("individual_filter(budget)", lambda h, s, v: h.individual_filter(budget=v).closed, kind="zcdp")
    add("robust_median(column)", lambda h, s, v: h.robust_median(h.table("visits"), v, (0, 50)).cost(APPROX))
    add("robust_median(bounds)", lambda h, s, v: h.robust_median(h.table("visits"), "spend", v).cost(APPROX))
    for arg in ("query", "budget", "gate", "threshold", "gate_budget", "refund"):
        add(f"gated_release({arg})", called(gated, arg))
    for arg in ("steps", "budget", "stop", "delta", "stops", "refund"):
        add(f"run_until({arg})", called(until, arg))
    add("run_until(steps=[v])", lambda h, s, v: until(h, steps=[v]))

    # a frame's method chain (sent when the query's cost is asked)
    def chain(name: str, build: Callable[[Any, Any], Any]) -> None:
        add(name, lambda h, s, v: build(h.table("visits"), v).cost(PURE))

    chain("filter(v)", lambda f, v: f.filter(v).agg(dp.len()))
    chain("filter(store=v)", lambda f, v: f.filter(store=v).agg(dp.len()))
    chain("with_columns(v)", lambda f, v: f.with_columns(v).agg(dp.len()))
    chain("with_columns(y=v)", lambda f, v: f.with_columns(y=v).agg(dp.len()))
    chain("select(v)", lambda f, v: f.select(v).agg(dp.len()))
    chain("select(y=v)", lambda f, v: f.select(y=v).agg(dp.len()))
    chain("bound(max_rows=v)", lambda f, v: f.bound(max_rows=v).agg(dp.len()))
    chain("bound(max_groups=v)", lambda f, v: f.bound(max_groups=v).agg(dp.len()))
    chain("drop(v)", lambda f, v: f.drop(v).agg(dp.len()))
    chain("rename(v)", lambda f, v: f.rename(v).agg(dp.len()))
    chain("rename({spend: v})", lambda f, v: f.rename({"spend": v}).agg(dp.len()))
    chain("sample(v)", lambda f, v: f.sample(v).agg(dp.len()))
    chain("group_by(v)", lambda f, v: f.group_by(v).agg(dp.len()))
    chain("group_by(day, keys=v)", lambda f, v: f.group_by("day", keys=v).agg(dp.len()))
    chain("agg(v)", lambda f, v: f.agg(v))
    chain("agg(n=v)", lambda f, v: f.agg(n=v))
    chain("agg(mean(bounds=v))", lambda f, v: f.agg(dp.mean("spend", bounds=v)))
    chain("agg(mean(v))", lambda f, v: f.agg(dp.mean(v, bounds=(0, 50))))
    chain("bounds(v)", lambda f, v: f.bounds(v))
    chain("bounds(domain=v)", lambda f, v: f.bounds("spend", domain=v))
    chain("interior_point(v)", lambda f, v: f.interior_point(v, bounds=(0, 50)))
    chain("interior_point(bounds=v)", lambda f, v: f.interior_point("spend", bounds=v))
    chain("learn_threshold(v)", lambda f, v: f.learn_threshold(v, label="label", bounds=(0, 50)))
    chain("learn_threshold(label=v)", lambda f, v: f.learn_threshold("spend", label=v, bounds=(0, 50)))
    chain("learn_rectangle(v)", lambda f, v: f.learn_rectangle(v, label="label", bounds=(0, 50)))
    chain("query(v)", lambda f, v: f.query(v))
    chain("top_k(v)", lambda f, v: f.group_by("day").top_k(v))
    chain("top_k(3, v)", lambda f, v: f.group_by("day").top_k(3, v))
    chain("group_by.agg(v)", lambda f, v: f.group_by("day", keys=["d0", "d1"]).agg(v))
    chain("group_by.query(v)", lambda f, v: f.group_by("day", keys=["d0", "d1"]).query(v))

    # a query's cost, explain and collect (a chain's and SQL's)
    queries: list[tuple[str, Callable[[Any], Any]]] = [
        ("chain", lambda h: h.table("visits").agg(dp.len(), dp.sum("spend", bounds=(0, 50)))),
        ("sql", lambda h: h.sql("SELECT COUNT(*) AS n FROM visits"))]
    def asked(build: Callable[[Any], Any], ask: Callable[[Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        return lambda h, s, v: ask(build(h), v)

    for q, build in queries:
        add(f"{q}.cost(v)", asked(build, lambda q, v: q.cost(v)))
        add(f"{q}.cost(accuracy=v)", asked(build, lambda q, v: q.cost(PURE, accuracy=v)))
        add(f"{q}.cost(diagnostics=v)", asked(build, lambda q, v: q.cost(PURE, diagnostics=v)))
        add(f"{q}.explain(v)", asked(build, lambda q, v: str(q.explain(v))))
        add(f"{q}.explain(format=v)", asked(build, lambda q, v: str(q.explain(PURE, format=v))))
        add(f"{q}.explain(accuracy=v)", asked(build, lambda q, v: str(q.explain(PURE, accuracy=v))))
        add(f"{q}.collect(v)", asked(build, lambda q, v: q.collect(v)))
        add(f"{q}.collect(ci=v)", asked(build, lambda q, v: q.collect(PURE, ci=v)))
        add(f"{q}.collect(diagnostics=v)", asked(build, lambda q, v: q.collect(PURE, diagnostics=v)))
        add(f"{q}.collect(accuracy=v)", asked(build, lambda q, v: q.collect(PURE, accuracy=v)))
    add("grouped.collect(v)", lambda h, s, v: grouped(h).agg(dp.len()).collect(v))
    add("top_k.cost(v)", lambda h, s, v: h.table("visits").group_by("day").top_k(2).cost(v))
    add("interior_point.collect(v)", lambda h, s, v: h.table("visits").interior_point(
        "spend", bounds=(0, 50)).collect(v))

    # a robust median's
    add("median.cost(v)", lambda h, s, v: median(h).cost(v))
    add("median.explain(v)", lambda h, s, v: str(median(h).explain(v)))
    add("median.explain(format=v)", lambda h, s, v: str(median(h).explain(APPROX, format=v)))
    add("median.collect(v)", lambda h, s, v: median(h).collect(v))
    add("median.collect(refund=v)", lambda h, s, v: median(h).collect(APPROX, refund=v))

    # an open tool's calls
    sv: Callable[[Any], Any] = lambda h: tool(h, "sv")  # noqa: E731
    ch: Callable[[Any], Any] = lambda h: tool(h, "ch")  # noqa: E731
    filt: Callable[[Any], Any] = lambda h: tool(h, "filt")  # noqa: E731
    add("sv.test(v)", lambda h, s, v: s.test(v), sv)
    add("ch.test(v, 1)", lambda h, s, v: s.test(v, 1), ch)
    add("ch.test(q, v)", lambda h, s, v: s.test(count(h), v), ch)
    add("ch.test(q, 1, prior=v)", lambda h, s, v: s.test(count(h), 1, prior=v), ch)
    add("ch.test(q, 1, epsilon=v)", lambda h, s, v: s.test(count(h), 1, epsilon=v), ch)
    add("ch.conditional_release(v, above)", lambda h, s, v: s.conditional_release(v, dp.above(1)), ch)
    add("ch.conditional_release(q, v)", lambda h, s, v: s.conditional_release(count(h), v), ch)
    add("ch.conditional_release(epsilon=v)", lambda h, s, v: s.conditional_release(count(h), dp.above(1),
                                                                                    epsilon=v), ch)
    add("ch.revise(v, above)", lambda h, s, v: s.revise(v, dp.above(1)), ch)
    add("ch.revise(len, v)", lambda h, s, v: s.revise("len", v), ch)
    add("ch.between(v, 1, 9)", lambda h, s, v: s.between(v, 1, 9), ch)
    add("ch.between(q, v, 9)", lambda h, s, v: s.between(count(h), v, 9), ch)
    add("ch.between(q, 1, v)", lambda h, s, v: s.between(count(h), 1, v), ch)
    add("ch.between(epsilon=v)", lambda h, s, v: s.between(count(h), 1, 9, epsilon=v), ch)
    add("ch.boundary_test(v, 1)", lambda h, s, v: s.boundary_test(v, 1), ch)
    add("ch.boundary_test(q, v)", lambda h, s, v: s.boundary_test(count(h), v), ch)
    add("ch.select_best(v)", lambda h, s, v: s.select_best(v), ch)
    add("ch.select_best([v])", lambda h, s, v: s.select_best([count(h), v]), ch)
    add("ch.select_best(epsilon=v)", lambda h, s, v: s.select_best([count(h)], epsilon=v), ch)
    add("filt.cost(v, budget)", lambda h, s, v: s.cost(v, budget=ZC), filt, "zcdp")
    add("filt.cost(q, v)", lambda h, s, v: s.cost(count(h), budget=v), filt, "zcdp")
    add("filt.collect(v, budget)", lambda h, s, v: s.collect(v, budget=ZC), filt, "zcdp")
    add("filt.collect(q, v)", lambda h, s, v: s.collect(count(h), budget=v), filt, "zcdp")
    return c


CASES = _cases()


def shown(value: Any) -> Any:
    """A result as compared: frames by their rows, costs and budgets by their text, tools and queries by kind."""
    if isinstance(value, dp.Diagnosed):
        return "diagnosed", shown(value.frame)
    if isinstance(value, pl.DataFrame):
        return value.rows()
    if isinstance(value, pl.Schema):
        return dict(value)
    if isinstance(value, list | tuple):
        return type(value).__name__, [shown(v) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return repr(value)
    return type(value).__name__ if "Query" in type(value).__name__ or "Tool" in type(value).__name__ \
        else str(value)


def outcome(sess: dp.Session, run: Callable[[], Any]) -> tuple[Any, ...]:
    """What the analyst sees of ``run()`` (the result, or the error's class and text) and whether a refusal
    changed the ledger."""
    before = sess.history().drop("id").rows()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "ok", shown(run())
        except Exception as e:  # noqa: BLE001 - the analyst catches everything
            changed = sess.history().drop("id").rows() != before
            return type(e).__name__, unplaced(str(e)), "charged" if changed else ""


@contextmanager
def served(sess: dp.Session) -> Iterator[dp.Remote]:
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        yield remote


def boundary(case: str, far: tuple[Any, ...], here: tuple[Any, ...]) -> bool:
    """A documented difference: both refuse, the remote client because JSON cannot carry the value (module docstring).

    Only an object of no type the API takes (:class:`Opaque`): every other value of the sweep crosses, so that the
    session's own checks refuse it.
    """
    if here[0] == "ok" or far[0] not in ("ArgumentError", "PlanError"):
        return False
    return any(text in far[1] for text in CLIENT_SIDE) and "cannot send a Opaque" in far[1]


def compare(case: str, value: Any) -> str | None:
    """The case with ``value`` in process and through a server, on same-seed twins: a difference, or None."""
    kind, setup, call = CASES[case]
    here_sess, there_sess = session(kind), session(kind)
    local = Tracked(Local(here_sess))
    state = setup(local)
    here = outcome(here_sess, lambda: call(local, state, value))
    local.close_all()
    with served(there_sess) as client:
        remote = Tracked(client)
        state = setup(remote)
        far = outcome(there_sess, lambda: call(remote, state, value))
        remote.close_all()
    if "charged" in (here[-1], far[-1]) and here[0] != "ok":
        return f"a refusal charged: here {here}, there {far}"
    if far != here and not boundary(case, far, here):
        return f"there {far}\n      here  {here}"
    if here_sess.history().drop("id").rows() != there_sess.history().drop("id").rows():
        return "the ledgers differ"
    return None


@pytest.mark.parametrize("case", list(CASES))
def test_wrong_typed_arguments_get_the_in_process_outcome_through_a_server(case: str) -> None:
    differ = {name: d for name, value in BAD.items() if (d := compare(case, value)) is not None}
    assert not differ, f"{case}:\n" + "\n".join(f"  {name}: {d}" for name, d in differ.items())


# ------------------------------------------------------------------------------ arguments a signature does not take

#: Calls with an argument too many, too few or of an unknown name: in process Python's TypeError, whose text names the
#: method and its parameters only (since review 50a a ``dp.SignatureError``, also a TypeError, with a fix:
#: test_review50a). Through a server it was "the server failed this request (TypeError)" (a tool's
#: call, a chain's method), or the client's own signature's text (``RemoteFrame.bound()``, ``Remote.gated_release()``),
#: and ``top_k(2, dp.len(), "gumbel")`` (the method as the third positional argument, as in process) was refused.
SV: Callable[[Any], Any] = lambda h: tool(h, "sv")  # noqa: E731
CH: Callable[[Any], Any] = lambda h: tool(h, "ch")  # noqa: E731
FILT: Callable[[Any], Any] = lambda h: tool(h, "filt")  # noqa: E731


def on(build: Callable[[Any], Any]) -> Callable[[Any, Any, Any], Any]:
    return lambda h, s, v: build(h)


SIGNATURES: Mapping[str, Case] = {
    "sv.status(1)": ("approx", SV, lambda h, s, v: s.status(1)),
    "sv.test()": ("approx", SV, lambda h, s, v: s.test()),
    "sv.test(q, 1)": ("approx", SV, lambda h, s, v: s.test(count(h), 1)),
    "sv.test(q, foo=1)": ("approx", SV, lambda h, s, v: s.test(count(h), foo=1)),
    "ch.test(q)": ("approx", CH, lambda h, s, v: s.test(count(h))),
    "filt.cost(q)": ("zcdp", FILT, lambda h, s, v: s.cost(count(h))),
    "filt.collect(q, budget, 3)": ("zcdp", FILT, lambda h, s, v: s.collect(count(h), ZC, 3)),
    "sparse_vector(foo=1)": ("approx", NONE, on(lambda h: h.sparse_vector(threshold=1, max_positives=1, budget=PURE,
                                                                            foo=1).status())),
    "sparse_vector()": ("approx", NONE, on(lambda h: h.sparse_vector().status())),
    "target_charging(1, 3, 1e-6, 4)": ("approx", NONE, on(lambda h: h.target_charging(1, 3, 1e-6, 4).status())),
    "individual_filter()": ("zcdp", NONE, on(lambda h: h.individual_filter().closed)),
    "bound(foo=1)": ("approx", NONE, on(lambda h: h.table("visits").bound(foo=1).agg(dp.len()).cost(PURE))),
    "bound(3)": ("approx", NONE, on(lambda h: h.table("visits").bound(3).agg(dp.len()).cost(PURE))),
    "rename()": ("approx", NONE, on(lambda h: h.table("visits").rename().agg(dp.len()).cost(PURE))),
    "sample(0.5, 1)": ("approx", NONE, on(lambda h: h.table("visits").sample(0.5, 1).agg(dp.len()).cost(PURE))),
    "group_by(day, foo=1)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day", foo=1).agg(
        dp.len()).cost(PURE))),
    "top_k(2, len, gumbel)": ("approx", NONE, on(lambda h: h.table("visits").group_by(
        "day", keys=["d0", "d1", "d2"]).top_k(2, dp.len(), "gumbel").cost(PURE))),
    "top_k(1, len, stable, 4, 5, 6)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(
        1, dp.len(), "stable", 4, 5, 6).cost(APPROX))),
    "top_k(foo=1)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(2, foo=1).cost(APPROX))),
    "bounds(spend, foo=1)": ("approx", NONE, on(lambda h: h.table("visits").bounds("spend", foo=1).cost(PURE))),
    "bounds()": ("approx", NONE, on(lambda h: h.table("visits").bounds().cost(PURE))),
    "interior_point(spend)": ("approx", NONE, on(lambda h: h.table("visits").interior_point("spend").cost(PURE))),
    "learn_threshold(spend)": ("approx", NONE, on(lambda h: h.table("visits").learn_threshold("spend").cost(PURE))),
    "learn_rectangle()": ("approx", NONE, on(lambda h: h.table("visits").learn_rectangle().cost(PURE))),
    "robust_median(frame, spend, (0, 50), 4)": ("approx", NONE, on(lambda h: h.robust_median(
        h.table("visits"), "spend", (0, 50), 4).cost(APPROX))),
    "robust_median(frame)": ("approx", NONE, on(lambda h: h.robust_median(h.table("visits")).cost(APPROX))),
    "robust_median(keywords)": ("approx", NONE, on(lambda h: h.robust_median(
        frame=h.table("visits"), column="spend", bounds=(0, 50)).cost(APPROX))),
    "gated_release(foo=1)": ("approx", NONE, on(lambda h: h.gated_release(count(h), PURE, count(h), 1, PURE,
                                                                            foo=1))),
    "gated_release(q, budget)": ("approx", NONE, on(lambda h: h.gated_release(count(h), PURE))),
    "gated_release(keywords)": ("approx", NONE, on(lambda h: h.gated_release(
        query=count(h), budget=PURE, gate=count(h), threshold=10, gate_budget=PURE))),
    "run_until(steps, budget)": ("approx", NONE, on(lambda h: h.run_until([count(h)], PURE))),
    "run_until(foo=1)": ("approx", NONE, on(lambda h: h.run_until([count(h)], PURE, lambda r: True, foo=1))),
    "run_until(keywords)": ("approx", NONE, on(lambda h: h.run_until(steps=[count(h), count(h, 2)], budget=PURE,
                                                                      stop=lambda r: True))),
}


@pytest.mark.parametrize("case", list(SIGNATURES))
def test_arguments_a_signature_does_not_take_get_python_s_own_error_through_a_server(case: str) -> None:
    CASES[case] = SIGNATURES[case]
    try:
        differ = compare(case, None)
    finally:
        del CASES[case]
    assert differ is None, f"{case}: {differ}"


# -------------------------------------------------------------------------------------- values inside the arguments

QUERY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"
#: Values a first sweep's probes found crossing as something else: NumPy arrays (sent as lists: a list is taken where
#: in process the array is refused), SQL keys that are not lists of plain values of one type (the client's Arrow
#: encoding refused them with its own text, where the session's check names them), and a gap too wide for a float
#: (a bare OverflowError in process, "the server failed this request (OverflowError)" through a server).
VALUES: Mapping[str, Case] = {
    "run_until(stops=np.array)": ("approx", NONE, on(lambda h: until(h, stops=np.array([1, 2])))),
    "robust_median(bounds=np.array)": ("approx", NONE, on(lambda h: h.robust_median(
        h.table("visits"), "spend", np.array([0, 50])).cost(APPROX))),
    "group_by(keys=np.array)": ("approx", NONE, on(lambda h: h.table("visits").group_by(
        "day", keys=np.array(["d0", "d1"], dtype="<U5")).agg(dp.len()).cost(PURE))),
    "gated_release(threshold=np.array)": ("approx", NONE, on(lambda h: gated(h, threshold=np.array([1.0])))),
    "sql(keys={day: [d0, 1]})": ("approx", NONE, on(lambda h: h.sql(QUERY, keys={"day": ["d0", 1]}).cost(PURE))),
    "sql(keys={day: [[d0]]})": ("approx", NONE, on(lambda h: h.sql(QUERY, keys={"day": [["d0"]]}).cost(PURE))),
    "sql(keys={day: [{a: 1}]})": ("approx", NONE, on(lambda h: h.sql(QUERY, keys={"day": [{"a": 1}]}).cost(PURE))),
    "sql(keys={day: [10**30]})": ("approx", NONE, on(lambda h: h.sql(QUERY, keys={"day": [10**30]}).cost(PURE))),
    "sql(keys={1: [d0]})": ("approx", NONE, on(lambda h: h.sql(QUERY, keys={1: ["d0"]}).cost(PURE))),
    "sql(keys={day: np.array})": ("approx", NONE, on(lambda h: h.sql(QUERY, keys={"day": np.array(["d0"])}).cost(
        PURE))),
    "ch.between(q, 10**400, 10**401)": ("approx", CH, lambda h, s, v: s.between(count(h), 10**400, 10**401)),
}


@pytest.mark.parametrize("case", list(VALUES))
def test_values_inside_arguments_cross_as_given(case: str) -> None:
    CASES[case] = VALUES[case]
    try:
        differ = compare(case, None)
    finally:
        del CASES[case]
    assert differ is None, f"{case}: {differ}"


# ----------------------------------------------------------------------------- in process: what the sweep found there

@pytest.mark.parametrize("family", [["agg"], {"agg": 1}])
def test_a_family_that_is_no_name_is_a_plugin_error(family: Any) -> None:
    """``frame.query([...])`` was a bare TypeError (unhashable) in process; through a server, "the server failed this
    request (TypeError)". Now the PluginError an unknown family name gets, in both."""
    sess = session("approx")
    with pytest.raises(dp.PluginError, match="unknown query family"):
        sess.table("visits").query(family)
    with pytest.raises(dp.PluginError, match="unknown query family"):
        sess.table("visits").group_by("day", keys=["d0"]).query(family)
    assert sess.history().height == 0


@pytest.mark.parametrize("min_q", [[0.1], {"q": 0.1}, "0.1", "x", (0.1,)])
def test_a_min_q_that_is_no_number_is_refused_by_the_channel_s_check(min_q: Any) -> None:
    """``target_charging(min_q=[0.1])`` was a bare TypeError from ``float()`` (text a ValueError, and ``"0.1"`` was
    read as the number); now the channel's BudgetError naming min_q, nothing reserved."""
    sess = session("approx")
    with pytest.raises(dp.BudgetError, match="^min_q: must be a number or None"):
        sess.target_charging(epsilon=1, max_hits=3, delta=1e-6, min_q=min_q)
    assert sess.history().height == 0


@pytest.mark.parametrize("per_unit", [[1], "x", {"a": 1}, 1, None])
def test_per_unit_that_is_no_flag_is_refused(per_unit: Any) -> None:
    """``per_unit=[1]`` (or any truthy object) opened a per-unit channel; ``per_unit=None`` a plain one. A flag is
    True or False, as ``diagnostics=`` is."""
    sess = session("approx")
    with pytest.raises(dp.ArgumentError, match="^per_unit: must be True or False"):
        sess.target_charging(epsilon=1, max_hits=3, delta=1e-6, per_unit=per_unit)
    flag: Any = np.bool_(True)      # numpy's bool is a flag
    with sess.target_charging(epsilon=1, max_hits=3, delta=1e-6, per_unit=flag) as ch:
        assert "per privacy unit" in ch.status()
