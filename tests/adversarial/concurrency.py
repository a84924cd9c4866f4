"""A random concurrency oracle: many threads at one barrier, each running one query entry point on one session.

:func:`race` draws, from a seed, a mix of calls — method-chain and SQL collects, public-key group-bys,
``ci=`` and ``diagnostics=`` collects, ``bounds="auto"`` sums, quantiles, top-k, ``frame.bounds``, interactive
sparse vectors and target-charging channels, free ``explain``/``cost`` calls, ledger reads and (optionally)
``sess.close()`` — with budgets that together ask for about twice the session's total, starts them all at one
:class:`threading.Barrier`, and checks what the analyst and the ledger see afterwards:

* the spent budget fits the total, and the ledger's rows compose to it;
* no charge is left ``reserved``, and none is ``failed`` but those a ``sess.close()`` cut short (every call is a
  valid query: a failure after its charge could depend on the data);
* every call that returned a result has its committed charge (released ≤ charged), and each free call
  charged nothing;
* every exception is a dpframe error, and every refusal for budget is sound: the query would not fit even
  in what is left at the end (the spent budget only grows, so it did not fit when it was refused);
* after ``sess.close()`` nothing is charged.

Example:
    >>> report = race(seed=1, threads=8)
    >>> report.calls == 8 and report.spent_fits
    True

"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import polars as pl

import dpframe as dp
from dpframe.accounting import Ledger
from dpframe.accounting.ledger import CUT

TOTAL = dp.ApproxDP(3, Fraction(1, 10**5))
"""The session's total: the calls of one race ask for about twice its ε."""


def data(rows: int = 400) -> pl.DataFrame:
    """The private table: units with a few rows each, a group column and a value."""
    return pl.DataFrame({"u": [i % (rows // 4) for i in range(rows)],
                         "g": [("a", "b", "c")[i % 3] for i in range(rows)],
                         "x": [float(i % 50) for i in range(rows)]})


Call = Callable[[], Any]
Build = Callable[[dp.Session, dp.PureDP], tuple[Call, Any]]
"""``(session, budget) -> (call, charge)``: the call to race, and what it charges when it runs (None: free)."""


def _query(build: Callable[[dp.Session], Any], **options: Any) -> Build:
    def make(sess: dp.Session, budget: dp.PureDP) -> tuple[Call, Any]:
        q = build(sess)
        return (lambda: q.collect(budget, **options)), q.cost(budget)
    return make


def _free(build: Callable[[dp.Session], Any], method: str) -> Build:
    def make(sess: dp.Session, budget: dp.PureDP) -> tuple[Call, Any]:
        q = build(sess)
        return (lambda: getattr(q, method)(budget)), None
    return make


def _sparse_vector(sess: dp.Session, budget: dp.PureDP) -> tuple[Call, Any]:
    q = sess.table("t").agg(dp.len())

    def call() -> Any:
        with sess.sparse_vector(threshold=10**6, max_positives=1, budget=budget) as sv:
            return sv.test(q)
    return call, sess.accountant.charge(budget)


def _channel(sess: dp.Session, budget: dp.PureDP) -> tuple[Call, Any]:
    q = sess.table("t").agg(dp.len())

    def call() -> Any:
        with sess.target_charging(epsilon=budget.epsilon, max_hits=1, delta=1e-7) as ch:
            return ch.test(q, threshold=10**6)
    return call, None      # its reservation is the channel's own (ε′, δ), read from the ledger


def _count(s: dp.Session) -> Any:
    return s.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 50)))


def _grouped(s: dp.Session) -> Any:
    return s.table("t").group_by("g", keys=["a", "b", "c"]).agg(dp.len(), dp.mean("x", bounds=(0, 50)))


BUILDS: dict[str, Build] = {
    "collect": _query(_count),
    "group_by": _query(_grouped),
    "ci": _query(_grouped, ci=0.9),
    "diagnostics": _query(_grouped, diagnostics=True),
    "sql": _query(lambda s: s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", keys={"g": ["a", "b", "c"]})),
    "auto_bounds": _query(lambda s: s.table("t").agg(dp.sum("x", bounds="auto"))),
    "quantile": _query(lambda s: s.table("t").agg(dp.quantile("x", [0.25, 0.75], bounds=(0, 50)))),
    "top_k": _query(lambda s: s.table("t").group_by("g", keys=["a", "b", "c"]).top_k(k=1, method="gumbel")),
    "bounds": _query(lambda s: s.table("t").bounds("x")),
    "sparse_vector": _sparse_vector,
    "channel": _channel,
    "explain": _free(_grouped, "explain"),
    "cost": _free(_grouped, "cost"),
}
"""Every kind of call a race draws from."""

READS: dict[str, Callable[[dp.Session], Call]] = {
    "spent": lambda s: s.spent, "history": lambda s: s.history, "remaining": lambda s: s.remaining,
}


@dataclass(frozen=True)
class Report:
    """What one race did (its checks have passed when :func:`race` returns)."""

    calls: int
    released: int
    refused: int
    after_close: int
    spent_fits: bool


def race(seed: int, threads: int = 32, *, backend: str = "polars", ledger: str | None = None) -> Report:
    """Race ``threads`` calls drawn from ``seed`` on one session; an AssertionError names a broken invariant.

    With a ``ledger`` file one of the calls is ``sess.close()`` (the file keeps the charges for the checks).
    """
    rng = random.Random(seed)
    sess = dp.Session({"t": data()}, privacy_unit=dp.PrivacyUnit("u", max_rows=8), budget=TOTAL, backend=backend,
                      seed=seed, ledger=ledger)
    close = ledger is not None
    names = [rng.choice([*BUILDS, *READS]) for _ in range(threads)]
    if close:
        names[rng.randrange(threads)] = "close"
    calls: list[tuple[str, Call, Any]] = []
    for name in names:
        budget = dp.PureDP(rng.choice([Fraction(1, 8), Fraction(1, 4), Fraction(1, 2)]))
        if name == "close":
            calls.append((name, sess.close, None))
        elif name in READS:
            calls.append((name, READS[name](sess), None))
        else:
            call, charge = BUILDS[name](sess, budget)
            calls.append((name, call, charge))
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i][1]()
        except BaseException as e:   # noqa: BLE001 — the analyst catches everything; the oracle records it
            results[i] = e

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return _check(sess, calls, results)


def _check(sess: dp.Session, calls: list[tuple[str, Call, Any]], results: list[Any]) -> Report:
    for (name, _, _), result in zip(calls, results):
        if isinstance(result, BaseException):
            assert isinstance(result, dp.DPFrameError), f"{name}: {type(result).__name__}: {result}"
    ledger = sess._release._ledger     # the oracle reads the ledger as the data owner would
    charges = (Ledger(ledger.path, sess.accountant) if sess.closed else ledger).charges()
    accountant = sess.accountant
    spent = accountant.compose([accountant.empty(), *(c.cost for c in charges)])
    assert accountant.fits(spent), f"spent {spent} beyond the total {accountant.total}"
    statuses = [c.status if c.error != CUT else "cut" for c in charges]
    closed = sum(isinstance(r, dp.LedgerError) for r in results)    # a call the close cut short is failed, cut
    assert set(statuses) <= {"committed", "cut"} and statuses.count("cut") <= closed, \
        f"charges left {statuses} ({closed} calls cut short by the close)"
    released = sum(1 for (name, _, charge), r in zip(calls, results)
                   if (charge is not None or name == "channel") and not isinstance(r, BaseException))
    assert released <= statuses.count("committed"), f"{released} released calls, {statuses.count('committed')} charged"
    if not closed:
        assert len(charges) == released, f"{len(charges)} charges for {released} released calls"
    refused = 0
    for (name, _, charge), result in zip(calls, results):
        if isinstance(result, dp.BudgetExceededError) and charge is not None:
            refused += 1
            assert not accountant.fits(accountant.compose([spent, charge])), f"{name} refused, yet it fits in the end"
    return Report(len(calls), released, refused, closed, True)


__all__ = ["BUILDS", "READS", "Report", "TOTAL", "data", "race"]
