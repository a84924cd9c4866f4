"""The outcome checks every fuzz test applies to one public call: a correct result or a dpframe error.

* :func:`run_query` — anything with ``explain``/``cost``/``collect`` (``Query``, top-k, learning,
  bounds, SQL, the robust median): a refused call charges nothing; a released result is charged exactly
  its ``cost`` (at most that, never less than its δ, for an ex-post query that may refund ε).
* :func:`run_stream` — an interactive stream (sparse vector, target-charging channel, individual
  filter): opening it charges its reservation or nothing; each call answers or raises a dpframe error
  without charging more; closing never charges more than the reservation.

Any other exception, or a hang (:func:`time_limit`), fails the test that called them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import dpframe as dp

from .strategies import Ledgered

Check = Callable[[Any, Any, Any], None]


def _first(budget: Any) -> Fraction:
    return budget.rho if isinstance(budget, dp.ZCDP) else budget.epsilon  # type: ignore[no-any-return]


def _explain(query: Any, budget: Any) -> None:
    query.explain(budget)
    if "format" in inspect.signature(query.explain).parameters:
        query.explain(budget, format="json")


def run_query(sess: dp.Session, make: Callable[[], Any], budget_thunk: Callable[[], Any], check: Check | None = None,
              *, ex_post: bool = False) -> str:
    """Build, inspect and collect one query; returns the outcome ("refused", "failed" or "released")."""
    ledger = Ledgered(sess)
    try:
        query = make()
        budget = budget_thunk()
        _explain(query, budget)
        cost = query.cost(budget)
    except dp.DPFrameError as e:
        ledger.refused(e)
        return "refused"
    try:
        out = query.collect(budget)
    except dp.DPFrameError as e:
        ledger.refused(e)
        return "failed" if "failed while running" in str(e) else "refused"
    if ex_post:
        spent = sess.spent()
        worst = ledger.after(cost)
        assert _first(ledger.spent) <= _first(spent) <= _first(worst), (ledger.spent, cost, spent)
        assert getattr(spent, "delta", 0) == getattr(worst, "delta", 0), ("δ must never be refunded", spent, worst)
        assert sess.history().height == ledger.rows + 1
    else:
        ledger.released(cost)
    if check is not None:
        check(out, query, budget)
    return "released"


def run_stream(sess: dp.Session, open: Callable[[], Any], reserved: Callable[[Any], Any],
               calls: Sequence[Callable[[Any], Any]], *, context: bool = False) -> str:
    """Open a stream, make ``calls`` on it (each may be refused), close it; check every charge on the way."""
    ledger = Ledgered(sess)
    try:
        stream = open()
        if context:
            stream = stream.__enter__()
    except dp.DPFrameError as e:
        ledger.refused(e)
        return "refused"
    cost = reserved(stream)
    worst = ledger.after(cost)
    assert sess.spent() == worst, ("opening must reserve exactly its cost", ledger.spent, cost, sess.spent())
    outcome = "opened"
    for call in calls:
        try:
            call(stream)
            outcome = "answered"
        except dp.DPFrameError as e:
            assert "failed while running" not in str(e), f"a call passed validation, then failed: {e}"
        assert sess.spent() == worst, ("a call charged more than the reservation", sess.spent(), worst)
    close = getattr(stream, "close", None)
    if close is not None:
        close()
    spent = sess.spent()
    assert _first(ledger.spent) <= _first(spent) <= _first(worst), (ledger.spent, cost, spent)
    assert getattr(spent, "delta", 0) == getattr(worst, "delta", 0), ("δ must never be refunded", spent, worst)
    return outcome
