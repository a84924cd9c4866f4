"""Review 42b: accounting completeness and consistency (items carried from review 41d), and the shared SQL database.

Scope:

* **One budget rule for every family** (:func:`dpframe.family.Releasable._planned`, ``docs/concepts.md``): a budget
  of the session's notion, or one that converts to it, is taken and the query is charged what its mechanisms use;
  one that cannot convert is a ``BudgetConversionError``, free. The learners (``interior_point``,
  ``learn_threshold``, ``learn_rectangle``) and the Gaussian sparse vector refused ``dp.ZCDP(rho, delta)`` in the
  sessions that take it (``zcdp``, ``rdp``, ``pld``) where ``agg`` charges its ρ; the robust median and stable
  top-k advised a budget the session refuses.
* **Refusals of a δ the session has not got**: ``BudgetExceededError``'s text, and the Rényi filter's reports
  (``spent()``, ``explain()``) before any charge.
* ``dpframe.budgets.convert``'s docstring example (run by the doctests).
* ``dpframe.sql.sandbox``: its module lock and a fork; a cursor holder filling the shared database.
* A sweep of the reports (``explain``, ``cost(diagnostics=True)``, ``history``, ``remaining``) against the ledger
  under every built-in accountant.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from dpframe_topk.pate import MultiLabelPATE

import dpframe as dp
from dpframe.budgets import describe
from dpframe.interactive.ptr import robust_median

_FORK = textwrap.dedent("""
    import os, sys, threading, time
    import polars as pl, dpframe as dp
    from dpframe.sql import sandbox

    sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=0)
    sess.sql("SELECT COUNT(*) + 1 AS m FROM t ORDER BY m LIMIT 1").collect(dp.PureDP(1))   # both connections exist
    held, release = threading.Event(), threading.Event()

    def hold():
        with sandbox._LOCK:
            held.set()
            release.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    pid = os.fork()
    if pid == 0:                                     # the child: what its first SQL query parses and post-processes on
        code = 1
        try:
            with sandbox._shared() as con:
                assert con.sql("SELECT 2").fetchall() == [(2,)]
            with sandbox.public_connection() as con:
                assert con.sql("SELECT 41 + 1").fetchall() == [(42,)]
            code = 0
        finally:
            os._exit(code)
    release.set()
    thread.join()
    deadline = time.time() + 30
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("exit", os.waitstatus_to_exitcode(status))
            sys.exit(0)
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("hung")
""")


def test_a_child_forked_while_another_thread_holds_the_sql_lock_runs_its_sql() -> None:
    """``os.fork`` copies only the forking thread: the module lock of ``dpframe.sql.sandbox``, held by another thread
    at the fork, stayed held in the child for ever, and the child's first SQL parse or post-processing waited on it
    without end. The child now gets a fresh lock (``os.register_at_fork``) and connections of its own. (A whole
    query cannot run in such a child anyway: Polars is not fork-safe — a ``collect`` in the child of a process that
    used Polars hangs in its thread pool — and a session's ledger refuses a forked process. The sandbox no longer
    adds a hang of its own.)"""
    out = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True, timeout=240)
    assert out.stdout.strip() == "exit 0", (out.stdout, out.stderr[-2000:])


# ------------------------------------------------------------------------------------- 1. one budget rule

DATA = pl.DataFrame({"u": list(range(40)), "x": [float(i % 10) for i in range(40)], "g": ["a", "b"] * 20,
                     "y": [i % 2 for i in range(40)]})


def _session(total: dp.Budget, accountant: str | None = None) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=total, accountant=accountant,
                      seed=0)


def _learners(sess: dp.Session) -> dict[str, Any]:
    t = sess.table("t")
    return {"interior_point": t.interior_point("x", bounds=(0, 10)),
            "learn_threshold": t.learn_threshold("x", label="y", bounds=(0, 10)),
            "learn_rectangle": t.learn_rectangle(["x"], label="y", bounds={"x": (0, 10)})}


@pytest.mark.parametrize(("total", "accountant"), [(dp.ZCDP(10), "zcdp"), (dp.ZCDP(10, 1e-3), "zcdp"),
                                                   (dp.ApproxDP(10, 1e-3), "rdp"), (dp.ApproxDP(10, 1e-3), "pld")])
def test_the_learners_take_a_zcdp_budget_with_a_delta_as_agg_does(total: dp.Budget, accountant: str) -> None:
    """``agg`` charges ``dp.ZCDP(rho, delta)`` the ρ of its Gaussian noise (its δ only pays a partition selection);
    the learners refused it with a ``BudgetError`` ("dp.ZCDP (without δ)") in every session that takes zCDP budgets.
    They now run on its ρ and are charged as for ``dp.ZCDP(rho)``: in a zCDP session exactly ρ = 1/2, in an RDP/PLD
    session the curves of a gate at ε = √(2ρ/10) (discrete Laplace of scale 1/ε = √10 = 3.16228) and, for the
    interior point, an exponential mechanism at ε = √(8·9ρ/10) = √3.6 = 1.89737."""
    sess = _session(total, accountant)
    with_delta, plain_rho = dp.ZCDP(Fraction(1, 2), Fraction(1, 10**6)), dp.ZCDP(Fraction(1, 2))
    for name, query in _learners(sess).items():
        cost = query.cost(with_delta)
        assert cost == query.cost(plain_rho), name
        if accountant == "zcdp":
            assert cost == dp.ZCDP(Fraction(1, 2)), (name, cost)
        else:
            assert "discrete Laplace(t=3.16228, Δ=1)" in cost.labels, (name, cost)
    ip = _learners(sess)["interior_point"]
    if accountant != "zcdp":
        assert "exponential mechanism(ε=1.89737)" in ip.cost(with_delta).labels
    text = str(ip.explain(with_delta))
    assert "requested ρ=1/2, δ=1e-06; cost ρ=1/2;" in text and "exponential at ε=1.897" in text, text
    ip.collect(with_delta)
    assert sess.history()["status"].to_list() == ["committed"]
    if accountant == "zcdp":
        assert sess.spent() == dp.ZCDP(Fraction(1, 2)) and sess.spent().delta == 0     # ρ charged, no δ
    assert sess.history()["cost"][0] == sess.accountant.describe_charge(ip.cost(plain_rho))


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_gaussian_sparse_vector_takes_a_zcdp_budget_with_a_delta(accountant: str) -> None:
    """``sess.sparse_vector(..., noise="gaussian", budget=dp.ZCDP(rho, delta))`` said it "needs a zCDP budget" of a
    zCDP budget. It now sets the noise from ρ and is charged the stream's curve, as for ``dp.ZCDP(rho)``:
    σ₁ = √((1 + c)/(2ρ)) = √2 per unit of sensitivity at c = 1, ρ = 1/2."""
    sess = _session(dp.ApproxDP(10, 1e-3), accountant)
    with sess.sparse_vector(threshold=50, max_positives=1, budget=dp.ZCDP(0.5, 1e-6), noise="gaussian",
                            max_length=3) as sv:
        assert [sv.test(sess.table("t").agg(dp.len())) for _ in range(3)] == [False] * 3
    assert "σ₁/Δ=1.41421" in sess.history()["mechanisms"][0]
    other = _session(dp.ApproxDP(10, 1e-3), accountant)
    with other.sparse_vector(threshold=50, max_positives=1, budget=dp.ZCDP(0.5), noise="gaussian",
                             max_length=3) as sv:
        sv.test(other.table("t").agg(dp.len()))
    assert sess.spent() == other.spent()


def test_the_individual_filter_takes_a_zcdp_budget_with_a_delta_and_refuses_a_basic_session_as_a_conversion() -> None:
    """The individual filter refused ``dp.ZCDP(rho, delta)`` ("expected dp.ZCDP(rho) (δ = 0)"), for the filter and for
    each query, where ``agg`` takes it; it now uses the ρ (charged ``ZCDP(rho)``: its Gaussian queries use no δ). In a
    ``basic`` session, which cannot compose a zCDP filter, the refusal was a ``BudgetError``: a
    ``BudgetConversionError`` now, nothing charged."""
    sess = _session(dp.ZCDP(10))
    filt = sess.individual_filter(budget=dp.ZCDP(0.5, 1e-6))
    assert sess.spent() == dp.ZCDP(Fraction(1, 2)) and sess.spent().delta == 0
    query = sess.table("t").agg(n=dp.len())
    assert filt.cost(query, dp.ZCDP(0.25, 1e-6)) == filt.cost(query, dp.ZCDP(0.25)) == dp.ZCDP(Fraction(1, 4))
    assert filt.collect(query, budget=dp.ZCDP(0.25, 1e-6)).height == 1
    basic = _session(dp.ApproxDP(10, 1e-3))
    with pytest.raises(dp.BudgetConversionError) as refused:
        basic.individual_filter(budget=dp.ZCDP(0.5))
    assert refused.value.argument == "budget" and basic.history().height == 0


@pytest.mark.parametrize(("total", "accountant"), [(dp.PureDP(10), "basic"), (dp.ZCDP(10), "zcdp"),
                                                   (dp.ZCDP(10, 1e-3), "zcdp")])
def test_the_robust_median_in_a_session_that_cannot_charge_it_is_a_conversion_error(
        total: dp.Budget, accountant: str) -> None:
    """The robust median is (ε, δ > 0)-DP: no budget converts to that in a pure or zCDP session. Every budget the
    session takes was refused with "PTR needs an (ε, δ) budget ... Fix: pass dp.ApproxDP(1, 1e-7)", a budget the
    session refuses in turn; it is now a ``BudgetConversionError`` naming the session's kind, whose fix is a session
    with an (ε, δ) total, nothing charged."""
    sess = _session(total, accountant)
    query = robust_median(sess.table("t"), "x", (0, 10))
    budgets = [dp.PureDP(1)] + ([dp.ZCDP(0.5), dp.ZCDP(0.5, 1e-6)] if total.notion == "zcdp" else [])
    for budget in budgets:
        for call in (query.cost, query.explain, query.collect):
            with pytest.raises(dp.BudgetConversionError) as refused:
                call(budget)
            assert refused.value.argument == "budget" and repr(budget) in str(refused.value)
            assert "dp.ApproxDP(2, 1e-6)" in (refused.value.fix or "") and "session" in (refused.value.fix or "")
    assert sess.history().height == 0


def test_stable_top_k_without_a_delta_advises_what_the_session_takes() -> None:
    """Stable top-k refused a budget without δ advising "dp.ApproxDP(1, 1e-7) / dp.ZCDP(0.1, 1e-8)" in every session:
    in a pure session the first is a ``BudgetConversionError``, and where the total has δ = 0 either is a
    ``BudgetExceededError``. The fix now names the session's δ = 0 there, and a budget of the session's notion
    elsewhere — which is then taken."""
    cases = [(dp.PureDP(10), "basic", None), (dp.ZCDP(10), "zcdp", None),
             (dp.ApproxDP(10, 1e-3), "basic", dp.ApproxDP(1, 1e-7)), (dp.ZCDP(10, 1e-3), "zcdp", dp.ZCDP(0.1, 1e-8)),
             (dp.ApproxDP(10, 1e-3), "rdp", dp.ApproxDP(1, 1e-7))]
    for total, accountant, advised in cases:
        sess = _session(total, accountant)
        query = sess.table("t").group_by("g").top_k(1)
        with pytest.raises(dp.BudgetError) as refused:
            query.cost(dp.PureDP(1))
        fix = refused.value.fix or ""
        if advised is None:
            assert "δ = 0" in str(refused.value) and "dp.ApproxDP" not in fix and "dp.ZCDP" not in fix, fix
        else:
            assert _spelled(advised) in fix, fix
            query.cost(advised)                       # the advised budget is taken
        assert sess.history().height == 0


def _spelled(budget: dp.Budget) -> str:
    """How the fixes write a budget: ``dp.ApproxDP(1, 1e-7)``, ``dp.ZCDP(0.1, 1e-8)``."""
    return {"approx": "dp.ApproxDP(1, 1e-7)", "zcdp": "dp.ZCDP(0.1, 1e-8)"}[budget.notion]


def test_pate_in_a_session_that_cannot_charge_it_is_a_conversion_error() -> None:
    """Multi-label PATE's cost, δ-approximate zCDP, converts to nothing a ``basic`` session holds: that refusal was a
    ``BudgetError``; it is now a ``BudgetConversionError`` (the rule of every other entry point), free."""
    votes = pl.DataFrame({"query": [0, 0, 1, 1], "label": [0, 1, 0, 1], "vote": [90, 10, 20, 80]})
    for total in (dp.PureDP(10), dp.ApproxDP(10, 1e-3)):
        sess = dp.Session({"votes": votes}, privacy_unit=dp.PrivacyUnit.row(), budget=total, seed=0)
        with pytest.raises(dp.BudgetConversionError) as refused:
            MultiLabelPATE().collect(sess, votes)
        assert refused.value.argument == "session"
        assert sess.history().height == 0


# ---------------------------------------------------------------------- 2. refusals of a δ, the filter's reports

def test_a_delta_the_session_has_not_got_is_refused_by_name_and_nothing_is_charged() -> None:
    """A zCDP session whose total has δ = 0 refused a ``ZCDP(ρ, δ)`` top-k with "remaining ρ=1, short by ρ=0,
    δ=1e-06 ... Fix: ask for a smaller budget ...": the remaining δ (0) was left out (a zCDP budget's text omits a
    δ of 0), and the fix did not name the δ. In an ``rdp``/``pld`` session a partition selection whose δ0 exceeds
    the session δ was "short by ε=inf (by the Rényi filter)". Each refusal now names what is short (the δ) and a
    fix about it, and charges nothing."""
    sess = _session(dp.ZCDP(1))
    with pytest.raises(dp.BudgetExceededError) as refused:
        sess.table("t").group_by("g").top_k(1).collect(dp.ZCDP(0.5, 1e-6))
    text, fix = str(refused.value), refused.value.fix or ""
    assert "remaining ρ=1, δ=0, short by ρ=0, δ=1e-06;" in text and "nothing was charged" in text, text
    assert "total budget has δ = 0" in fix and refused.value.argument == "budget", fix
    assert sess.history().height == 0 and sess.spent().rho == 0
    for accountant in ("basic", "rdp", "pld"):
        sess = _session(dp.ApproxDP(10, 1e-6), accountant)
        with pytest.raises(dp.BudgetExceededError) as refused:
            sess.table("t").group_by("g").agg(n=dp.len()).collect(dp.ApproxDP(1, 1e-5))
        text, fix = str(refused.value), refused.value.fix or ""
        assert ("short by ε=0, δ=9e-06;" if accountant == "basic" else "short by δ=9e-06 (") in text, (accountant, text)
        assert "inf" not in text, text
        assert "remaining ε=10, δ=1e-06" in text and "smaller δ" in fix, (accountant, text)
        assert sess.history().height == 0 and sess.spent().epsilon == 0


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_renyi_filter_reports_no_delta_spent_before_a_charge(accountant: str) -> None:
    """A fresh ``rdp``/``pld`` session's ``spent()`` was ``ApproxDP(0, δ)`` — the whole session δ — and every
    ``explain()`` said "spent so far ε=0, δ=1e-06", while ``remaining()`` kept all of δ. Before any RDP is spent the
    filter uses no δ: both now say (0, 0). After a charge the filter's conversion uses the session δ, which is what
    they report (unchanged), and the filter's state (what fits) is the same as before."""
    sess = _session(dp.ApproxDP(10, 1e-6), accountant)
    query = sess.table("t").agg(n=dp.len())
    spent = sess.spent()
    assert (spent.epsilon, spent.delta) == (0, 0), spent
    assert sess.remaining() == dp.ApproxDP(10, 1e-6)
    assert "spent so far ε=0, δ=0;" in str(query.explain(dp.PureDP(1)))
    assert query.explain(dp.PureDP(1), format="json")["budget"]["spent"] == "ε=0, δ=0"
    query.collect(dp.PureDP(1))
    spent = sess.spent()
    assert spent.delta == Fraction(1, 10**6) and 1 < spent.epsilon < Fraction(105, 100), spent
    assert "spent so far ε=1.03959, δ=1e-06;" in str(query.explain(dp.PureDP(1)))


# ------------------------------------------------------------------------------------ 5. reports against the ledger

SESSIONS = [(dp.PureDP(50), "basic"), (dp.ApproxDP(50, 1e-3), "basic"), (dp.ZCDP(50), "zcdp"),
            (dp.ZCDP(50, 1e-3), "zcdp"), (dp.ApproxDP(50, 1e-3), "rdp"), (dp.ApproxDP(50, 1e-3), "pld")]


@pytest.mark.parametrize(("total", "accountant"), SESSIONS, ids=lambda v: repr(v))
def test_every_report_agrees_with_what_the_ledger_charged(total: dp.Budget, accountant: str) -> None:
    """The sweep of review 42b: for each kind of release (an aggregate, a sampled one, one with diagnostics, an
    accuracy target, ``frame.bounds``, a learner, and with a δ partition selection and stable top-k), ``cost()``
    (``cost(diagnostics=True)``, ``cost(accuracy=...)``) is what the ledger then holds, ``history()`` shows the
    ledger's charge as the accountant describes it, and so does ``explain()``'s "charged"; its "spent so far" is
    ``spent()`` before the release and its "remaining after" is ``remaining()`` after it; ``spent()`` is the
    accountant's report of the ledger's charges composed. Only the Rényi filter's "spent so far" before any charge
    disagreed (it showed the whole δ: fixed above)."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=total, accountant=accountant,
                      seed=0)
    acc, t = sess.accountant, sess.table("t")
    budget = dp.ZCDP(Fraction(1, 8)) if total.notion == "zcdp" else dp.PureDP(Fraction(1, 2))
    delta_budget = (dp.ZCDP(Fraction(1, 8), 1e-6) if total.notion == "zcdp" else dp.ApproxDP(Fraction(1, 2), 1e-6))
    releases: list[tuple[str, Any, dict[str, Any]]] = [
        ("agg", t.agg(n=dp.len(), s=dp.sum("x", bounds=(0, 10))), {"budget": budget}),
        ("sampled", t.sample(0.5).agg(n=dp.len()), {"budget": budget}),
        ("diagnostics", t.group_by("g", keys=["a", "b"]).agg(n=dp.len()), {"budget": budget, "diagnostics": True}),
        ("accuracy", t.agg(n=dp.len()), {"accuracy": dp.Accuracy(half_width=20, confidence=0.9)}),
        ("bounds", t.bounds("x"), {"budget": budget}), ("learner", t.interior_point("x", bounds=(0, 10)),
                                                          {"budget": budget})]
    if getattr(total, "delta", 0):
        releases += [("private keys", t.group_by("g").agg(n=dp.len()), {"budget": delta_budget}),
                     ("top-k", t.group_by("g").top_k(1), {"budget": delta_budget})]
    for name, query, kwargs in releases:
        cost = _call(query.cost, kwargs)
        shown = None if "diagnostics" in kwargs else _call(query.explain, {**kwargs, "format": "json"})["budget"]
        spent_before = sess.spent()
        if shown is not None:
            assert shown["spent"] == describe(spent_before), (name, shown["spent"], spent_before)
        _call(query.collect, kwargs)
        rows = sess._release.charges()
        assert rows[-1].status == "committed" and rows[-1].cost == cost, (name, rows[-1].cost, cost)
        assert sess.history()["cost"].to_list()[-1] == acc.describe_charge(cost), name
        if shown is not None:
            assert shown["charged"] == acc.describe_charge(cost), name
            assert shown["remaining_after"] == describe(sess.remaining()), (name, shown, sess.remaining())
        assert acc.report(acc.compose([r.cost for r in rows])) == sess.spent(), name



def test_a_refunded_sparse_vector_reports_what_the_ledger_kept() -> None:
    """Under basic composition a Laplace sparse vector closed with fewer positives than reserved is settled to its
    realised cell (output DP): the history and ``sv.charged()`` showed e.g. ε=252/887, ``sv.status()`` only
    "reserved ε=1". It now adds what the ledger kept."""
    sess = _session(dp.PureDP(10))
    with sess.sparse_vector(threshold=10**6, max_positives=2, budget=dp.PureDP(1)) as sv:
        sv.test(sess.table("t").agg(dp.len()))
    kept = sess.history()["cost"].to_list()[-1]
    assert kept == sess.accountant.describe_charge(sv.charged()) != "ε=1"
    assert sv.status().startswith(f"reserved ε=1, charged {kept} on close (output DP);"), sv.status()

def _call(method: Any, kwargs: dict[str, Any]) -> Any:
    """``method(budget, **rest)``, or ``method(**rest)`` without a budget (every ending takes its budget first)."""
    rest = {k: v for k, v in kwargs.items() if k != "budget"}
    return method(kwargs["budget"], **rest) if "budget" in kwargs else method(**rest)
