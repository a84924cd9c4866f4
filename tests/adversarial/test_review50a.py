"""Review 50a: a misspelt keyword (or an argument a signature does not take) gets a dpframe error with its fix.

``dp.sum("x", bound=(0, 10))`` raised Python's bare ``TypeError: sum() got an unexpected keyword argument 'bound'``:
it named the keyword but gave no fix, where every other bad argument gets a dpframe error naming the argument and
one fix (DESIGN §5). Now every public call raises a :class:`dp.SignatureError` (an ``ArgumentError`` that is also a
``TypeError``, so ``except TypeError`` still catches it) naming the keyword, with "did you mean bounds=...?" (or the
keywords it takes when none is close); a missing required argument and too many positional ones likewise. Only a
call whose signature refuses the arguments: a ``TypeError`` raised inside a function's body goes on as it is.

Through a remote session (docs/remote.md) the same call gets the same error class and text, and nothing is charged
on either side (the style of :mod:`tests.adversarial.test_review48a`, whose ``compare`` runs both sides).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.engine_output import under_numpy_defaults
from dpframe.interactive.ptr import gated_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.sealed import FixedClass

from .test_review48a import APPROX, CASES, CH, FILT, NONE, PURE, SV, ZC, Case, compare, count, median, on

DATA = pl.DataFrame({"u": [1, 2, 3, 4], "x": [1.0, 2.0, 3.0, 4.0], "g": ["a", "b", "a", "b"],
                     "y": [True, False, True, False]})


def session() -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.ApproxDP(50, 1e-5),
                      seed=0)


def agg(s: dp.Session) -> Any:
    return s.table("t").agg(dp.len())


#: name -> (the call on a fresh session, the argument the error names, what its fix says)
MISSPELT: dict[str, tuple[Callable[[dp.Session], Any], str, str]] = {
    "dp.sum(bound=)": (lambda s: dp.sum("x", bound=(0, 10)), "bound", "did you mean bounds=...?"),
    "dp.mean(bound=)": (lambda s: dp.mean("x", bound=(0, 10)), "bound", "did you mean bounds=...?"),
    "dp.quantile(bound=)": (lambda s: dp.quantile("x", 0.5, bound=(0, 10)), "bound", "did you mean bounds=...?"),
    "dp.median(resolutin=)": (lambda s: dp.median("x", (0, 10), resolutin=1), "resolutin",
                              "did you mean resolution=...?"),
    "dp.var(dof=)": (lambda s: dp.var("x", (0, 10), dof=0), "dof", "did you mean ddof=...?"),
    "dp.count(colum=)": (lambda s: dp.count(colum="x"), "colum", "did you mean column=...?"),
    "dp.len(name=)": (lambda s: dp.len(name="n"), "name", "len() takes no keyword arguments"),
    "dp.above(treshold=)": (lambda s: dp.above(treshold=1), "treshold", "did you mean threshold=...?"),
    "dp.PureDP(eps=)": (lambda s: dp.PureDP(eps=1), "eps", "did you mean epsilon=...?"),
    "dp.ApproxDP(delt=)": (lambda s: dp.ApproxDP(1, delt=1e-6), "delt", "did you mean delta=...?"),
    "dp.ZCDP(roh=)": (lambda s: dp.ZCDP(roh=0.1), "roh", "did you mean rho=...?"),
    "PureDP.to_approx(delt=)": (lambda s: dp.PureDP(1).to_approx(delt=0), "delt", "did you mean delta=...?"),
    "dp.PrivacyUnit.row(x=)": (lambda s: dp.PrivacyUnit.row(x=1), "x", "row() takes no keyword arguments"),
    "dp.datasets.visits(row=)": (lambda s: dp.datasets.visits(row=10), "row", "did you mean rows=...?"),
    "dp.Accuracy(half_widht=)": (lambda s: dp.Accuracy(half_widht=1), "half_widht", "did you mean half_width=...?"),
    "dp.PrivacyUnit(max_row=)": (lambda s: dp.PrivacyUnit("u", max_row=10), "max_row", "did you mean max_rows=...?"),
    "dp.Session(budgt=)": (lambda s: dp.Session(tables={"t": DATA}, budgt=dp.PureDP(1)), "budgt",
                           "did you mean budget=...?"),
    "dp.Server(authky=)": (lambda s: dp.Server(s, ("127.0.0.1", 0), authky=b"k" * 32), "authky",
                           "did you mean authkey=...?"),
    "dp.connect(authky=)": (lambda s: dp.connect(("127.0.0.1", 9), authky=b"k" * 32), "authky",
                            "did you mean authkey=...?"),
    "sess.sql(key=)": (lambda s: s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", key={"g": ["a"]}), "key",
                       "did you mean keys=...?"),
    "sess.sparse_vector(max_positive=)": (lambda s: s.sparse_vector(threshold=1, max_positive=1, budget=PURE),
                                          "max_positive", "did you mean max_positives=...?"),
    "sess.history(all=)": (lambda s: s.history(all=True), "all", "history() takes no keyword arguments"),
    "frame.group_by(key=)": (lambda s: s.table("t").group_by("g", key=["a"]), "key", "did you mean keys=...?"),
    "frame.bound(max_row=)": (lambda s: s.table("t").bound(max_row=1), "max_row", "did you mean max_rows=...?"),
    "frame.bounds(domian=)": (lambda s: s.table("t").bounds("x", domian=(0, 10)), "domian",
                              "did you mean domain=...?"),
    "frame.interior_point(bound=)": (lambda s: s.table("t").interior_point("x", bound=(0, 10)), "bound",
                                     "did you mean bounds=...?"),
    "group_by.top_k(mthod=)": (lambda s: s.table("t").group_by("g").top_k(1, mthod="gumbel"), "mthod",
                               "did you mean method=...?"),
    "query.collect(budgt=)": (lambda s: agg(s).collect(budgt=PURE), "budgt", "did you mean budget=...?"),
    "query.collect(epsilon=)": (lambda s: agg(s).collect(epsilon=0.5), "epsilon",
                                "pass the budget as budget=dp.PureDP(epsilon)"),
    "query.cost(accuarcy=)": (lambda s: agg(s).cost(PURE, accuarcy=dp.Accuracy(1)), "accuarcy",
                              "did you mean accuracy=...?"),
    "query.explain(fromat=)": (lambda s: agg(s).explain(PURE, fromat="json"), "fromat", "did you mean format=...?"),
    "query.collect(zz=)": (lambda s: agg(s).collect(PURE, zz=1), "zz",
                           "use one of its keywords: budget, ci, diagnostics, accuracy"),
    "sql.collect(budgt=)": (lambda s: s.sql("SELECT COUNT(*) AS n FROM t").collect(budgt=PURE), "budgt",
                            "did you mean budget=...?"),
    "top_k.collect(ci=)": (lambda s: s.table("t").group_by("g").top_k(1).collect(APPROX, ci=0.9), "ci",
                           "use one of its keywords: budget"),
    "robust_median(bound=)": (lambda s: robust_median(s.table("t"), "x", bound=(0, 10)), "bound",
                              "did you mean bounds=...?"),
    "gated_release(refnd=)": (lambda s: gated_release(agg(s), PURE, agg(s), 1, PURE, refnd=True), "refnd",
                              "did you mean refund=...?"),
    "run_until(delt=)": (lambda s: run_until([agg(s)], PURE, lambda r: True, delt=0), "delt",
                         "did you mean delta=...?"),
    # an argument missing, too many, or given twice
    "dp.quantile(x)": (lambda s: dp.quantile("x"), "q", "pass q=..."),
    "query.cost(budget, 3)": (lambda s: agg(s).cost(PURE, 3), "cost",
                              "pass the others by keyword: accuracy=..., diagnostics=..."),
    "dp.len(1)": (lambda s: dp.len(1), "len", "pass none"),
    "dp.sum(x, column=)": (lambda s: dp.sum("x", column="x"), "column", "pass column once"),
    "frame.query(family=)": (lambda s: s.table("t").query(family="agg"), "family",
                             "pass family by position, without 'family='"),
    # a query family called by name: its builder passes the arguments on (the family's ``takes`` names to what)
    "frame.query('interior_point', bound=)": (lambda s: s.table("t").query("interior_point", "x", bound=(0, 10)),
                                              "bound", "did you mean bounds=...?"),
    "frame.query('learn_threshold', lable=)": (lambda s: s.table("t").query(
        "learn_threshold", "x", lable="y", bounds=(0, 10)), "lable", "did you mean label=...?"),
    "frame.query('bounds', domian=)": (lambda s: s.table("t").query("bounds", "x", domian=(0, 10)), "domian",
                                       "did you mean domain=...?"),
    "group_by.query('top_k', kk=)": (lambda s: s.table("t").group_by("g").query("top_k", kk=1), "kk",
                                     "did you mean k=...?"),
    "group_by.query('top_k', 1)": (lambda s: s.table("t").group_by("g").query("top_k", 1), "top_k",
                                   "pass the others by keyword: k=..."),
    "frame.linear_regression(bound=)": (lambda s: s.table("t").linear_regression(["x"], "x", bound={}), "bound",
                                        "did you mean bounds=...?"),
    "frame.interior_point() by name, no column": (lambda s: s.table("t").query("interior_point", bounds=(0, 1)),
                                                  "column", "pass column=..."),
}


@pytest.mark.parametrize("case", list(MISSPELT))
def test_a_misspelt_keyword_gets_a_dpframe_error_with_its_fix(case: str) -> None:
    call, argument, fix = MISSPELT[case]
    s = session()
    before = s.history().rows()
    with pytest.raises(dp.SignatureError) as caught:
        call(s)
    e = caught.value
    assert isinstance(e, dp.ArgumentError) and isinstance(e, TypeError)
    assert e.argument == argument, str(e)
    assert e.fix is not None and fix in e.fix, str(e)
    assert str(e) == f"{argument}: {e.message}. Fix: {e.fix}"
    assert s.history().rows() == before == []          # nothing charged


def test_except_type_error_still_catches_it() -> None:
    try:
        dp.sum("x", bound=(0, 10))
    except TypeError as e:
        assert str(e) == "bound: not an argument of sum(). Fix: did you mean bounds=...?"
    else:
        raise AssertionError("no error")


# ----------------------------------------------------------------------- a TypeError from a body goes on as it is

def inner(x: int) -> int:
    return x


class Engine(FixedClass):      # its public methods are wrapped as the engine's objects' are
    def body(self, x: int) -> int:
        raise TypeError("Engine.body() got an unexpected keyword argument 'y'")  # the text of a binding failure

    def nested(self, x: int) -> int:
        return inner(y=x)       # type: ignore[call-arg]  # a call in the body that its callee's signature refuses


def test_a_type_error_raised_in_a_body_goes_on_as_it_is() -> None:
    with pytest.raises(TypeError) as caught:
        Engine().body(1)
    assert type(caught.value) is TypeError and str(caught.value) == "Engine.body() got an unexpected keyword " \
        "argument 'y'"
    with pytest.raises(TypeError) as caught:
        Engine().nested(1)
    assert type(caught.value) is TypeError and "inner() got an unexpected keyword argument 'y'" in str(caught.value)
    with pytest.raises(dp.SignatureError, match="^y: not an argument of body"):
        Engine().body(1, y=2)   # type: ignore[call-arg]
    # a public call's: the sealed wrapper's own TypeError (``__init__`` called again) is not a signature's refusal
    s = session()
    with pytest.raises(TypeError, match="^a Session is built once") as caught:
        s.__init__({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=PURE)  # type: ignore[misc]
    assert type(caught.value) is TypeError


def test_numpy_defaults_wrapper_keeps_refusing_the_same_way() -> None:
    class Curve:
        def tail(self, at: float = 1.0) -> float:
            return at
    under_numpy_defaults(Curve)
    with pytest.raises(dp.SignatureError, match=r"^a: not an argument of tail\(\). Fix: did you mean at=\.\.\.\?$"):
        Curve().tail(a=2)       # type: ignore[call-arg]
    assert Curve().tail(at=2) == 2


# ----------------------------------------------------------------------------------- through a remote session

def chain(h: Any) -> Any:
    return h.table("visits").agg(dp.len())


def sql(h: Any) -> Any:
    return h.sql("SELECT COUNT(*) AS n FROM visits")


REMOTE: dict[str, Case] = {
    "sql(key=)": ("approx", NONE, on(lambda h: h.sql("SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
                                                     key={"day": ["d0"]}).cost(PURE))),
    "table(nme=)": ("approx", NONE, on(lambda h: h.table(nme="visits").agg(dp.len()).cost(PURE))),
    "agg(dp.sum(bound=))": ("approx", NONE, on(lambda h: h.table("visits").agg(dp.sum("spend", bound=(0, 50))))),
    "group_by(key=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day", key=["d0"]).agg(
        dp.len()).cost(PURE))),
    "bound(max_row=)": ("approx", NONE, on(lambda h: h.table("visits").bound(max_row=3).agg(dp.len()).cost(PURE))),
    "bounds(domian=)": ("approx", NONE, on(lambda h: h.table("visits").bounds("spend", domian=(0, 50)).cost(PURE))),
    "interior_point(bound=)": ("approx", NONE, on(lambda h: h.table("visits").interior_point(
        "spend", bound=(0, 50)).cost(PURE))),
    "query('interior_point', bound=)": ("approx", NONE, on(lambda h: h.table("visits").query(
        "interior_point", "spend", bound=(0, 50)).cost(PURE))),
    "query('top_k', kk=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").query(
        "top_k", kk=2).cost(APPROX))),
    "learn_threshold(lable=)": ("approx", NONE, on(lambda h: h.table("visits").learn_threshold(
        "spend", lable="label", bounds=(0, 50)).cost(PURE))),
    "top_k(mthod=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(
        2, mthod="gumbel").cost(APPROX))),
    "top_k.cost(accuracy=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(2).cost(
        APPROX, accuracy=dp.Accuracy(1)))),
    "top_k.collect(ci=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(2).collect(
        APPROX, ci=0.9))),
    # another family's query, whose signature is not the aggregate's the client shows: the server's query refuses
    "top_k.collect(acuracy=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(2).collect(
        APPROX, acuracy=dp.Accuracy(1)))),
    "top_k.collect(zz=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(2).collect(
        APPROX, zz=1))),
    "top_k.cost(budget, 3)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(2).cost(
        APPROX, 3))),
    "top_k.explain(accuracy=)": ("approx", NONE, on(lambda h: h.table("visits").group_by("day").top_k(2).explain(
        APPROX, accuracy=dp.Accuracy(1)))),
    "sql TOP_K.collect(zz=)": ("approx", NONE, on(lambda h: h.sql(
        "SELECT day FROM visits GROUP BY day HAVING TOP_K(COUNT(DISTINCT visitor), 1)").collect(APPROX, zz=1))),
    "bounds.collect(diagnostics=)": ("approx", NONE, on(lambda h: h.table("visits").bounds("spend").collect(
        APPROX, diagnostics=True))),
    "chain.collect(budgt=)": ("approx", NONE, on(lambda h: chain(h).collect(budgt=PURE))),
    "chain.collect(epsilon=)": ("approx", NONE, on(lambda h: chain(h).collect(epsilon=0.5))),
    "chain.cost(accuarcy=)": ("approx", NONE, on(lambda h: chain(h).cost(PURE, accuarcy=dp.Accuracy(1)))),
    "chain.explain(fromat=)": ("approx", NONE, on(lambda h: chain(h).explain(PURE, fromat="json"))),
    "chain.cost(budget, 3)": ("approx", NONE, on(lambda h: chain(h).cost(PURE, 3))),
    "sql.collect(budgt=)": ("approx", NONE, on(lambda h: sql(h).collect(budgt=PURE))),
    "sql.collect(zz=)": ("approx", NONE, on(lambda h: sql(h).collect(PURE, zz=1))),
    "median.collect(refnd=)": ("approx", NONE, on(lambda h: median(h).collect(APPROX, refnd=True))),
    "median.explain(fromat=)": ("approx", NONE, on(lambda h: median(h).explain(APPROX, fromat="json"))),
    "robust_median(bound=)": ("approx", NONE, on(lambda h: h.robust_median(h.table("visits"), "spend",
                                                                           bound=(0, 50)).cost(APPROX))),
    "gated_release(refnd=)": ("approx", NONE, on(lambda h: h.gated_release(count(h), PURE, count(h), 1, PURE,
                                                                           refnd=True))),
    "run_until(delt=)": ("approx", NONE, on(lambda h: h.run_until([count(h)], PURE, lambda r: True, delt=0))),
    "sparse_vector(max_positive=)": ("approx", NONE, on(lambda h: h.sparse_vector(
        threshold=100, max_positive=2, budget=PURE).status())),
    "target_charging(max_hit=)": ("approx", NONE, on(lambda h: h.target_charging(
        epsilon=1, max_hit=3, delta=1e-6).status())),
    "individual_filter(budgt=)": ("zcdp", NONE, on(lambda h: h.individual_filter(budgt=ZC).closed)),
    "sv.test(querry=)": ("approx", SV, lambda h, s, v: s.test(querry=count(h))),
    "ch.test(epsilo=)": ("approx", CH, lambda h, s, v: s.test(count(h), 1, epsilo=0.5)),
    "filt.cost(budgt=)": ("zcdp", FILT, lambda h, s, v: s.cost(count(h), budgt=ZC)),
}


@pytest.mark.parametrize("case", list(REMOTE))
def test_a_misspelt_keyword_gets_the_in_process_error_through_a_server(case: str) -> None:
    CASES[case] = REMOTE[case]
    try:
        differ = compare(case, None)
        kind, setup, call = REMOTE[case]
        here = session_outcome(kind, setup, call)
    finally:
        del CASES[case]
    assert differ is None, f"{case}: {differ}"
    assert here[0] == "SignatureError", here


def session_outcome(kind: str, setup: Callable[[Any], Any], call: Callable[[Any, Any, Any], Any]) -> tuple[Any, ...]:
    """The in-process outcome (the error's class and text, whether the ledger changed)."""
    from .test_review48a import Local, Tracked, outcome
    from .test_review48a import session as twin

    sess = twin(kind)
    local = Tracked(Local(sess))
    state = setup(local)
    try:
        return outcome(sess, lambda: call(local, state, None))
    finally:
        local.close_all()


@pytest.mark.parametrize("request_", [
    {"call": "drop", "positional": 0, "keywords": []}, {"call": "collect", "positional": 10**9, "keywords": []},
    {"call": "collect", "positional": -1, "keywords": []}, {"call": "collect", "positional": 0, "keywords": "zz"},
    {"call": "collect", "positional": 0, "keywords": ["k"] * 65}, {"call": "collect", "positional": 0,
                                                                   "keywords": [1]}])
def test_a_refusal_request_the_client_does_not_send_is_refused_free(request_: dict[str, Any]) -> None:
    """The request a remote query's refused call sends (how many positional arguments, which keywords): anything
    else is an ArgumentError, nothing charged, the connection usable."""
    from .test_review48a import served
    from .test_review48a import session as twin

    sess = twin("approx")
    with served(sess) as remote:
        with pytest.raises(dp.ArgumentError, match="^call: not a call of a query"):
            remote._request({"op": "refusal", "sql": "SELECT COUNT(*) AS n FROM visits", **request_})
        assert remote.tables() == ["visits"]
        with pytest.raises(dp.SignatureError, match="^zz: not an argument of collect"):
            remote._request({"op": "refusal", "sql": "SELECT COUNT(*) AS n FROM visits", "call": "collect",
                             "positional": 1, "keywords": ["zz"]})
    assert sess.history().height == 0


def test_a_chain_s_own_error_comes_first_as_in_process() -> None:
    """A chain refused when it is built (in process at ``filter``) is refused first remotely too, where the chain is
    sent when its query's method is called, even when that call is refused as well."""
    case = "filter(nope).collect(budgt=)"
    CASES[case] = ("approx", NONE, on(lambda h: h.table("visits").filter(pl.col("nope") > 1).agg(dp.len()).collect(
        budgt=PURE)))
    try:
        differ = compare(case, None)
    finally:
        del CASES[case]
    assert differ is None, differ


def test_a_closed_connection_still_names_the_misspelt_keyword() -> None:
    from .test_review48a import served
    from .test_review48a import session as twin

    with served(twin("approx")) as remote:
        q = remote.sql("SELECT COUNT(*) AS n FROM visits")
    with pytest.raises(dp.SignatureError, match=r"^budgt: not an argument of collect\(\). Fix: did you mean budget"):
        q.collect(budgt=PURE)
