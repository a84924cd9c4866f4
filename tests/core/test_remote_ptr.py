"""The robust median and the gated release on a remote session answer as they do in process.

``remote.robust_median(frame, column, bounds)`` (a chain ending, replayed on the server's session) and
``remote.gated_release(query, budget, gate, threshold, gate_budget, refund=...)`` (the session's function, its
arguments unpacked on the server): same-seed twins give the same releases, costs, plans, ledgers and errors.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.ptr import gated_release, robust_median

KEY = secrets.token_bytes(32)
DATA = pl.DataFrame({"visitor": [i % 700 for i in range(6000)], "store": [i % 12 for i in range(6000)],
                     "spend": [float(i % 50) for i in range(6000)], "day": [f"d{i % 7}" for i in range(6000)]})


def session(budget: dp.Budget = dp.ApproxDP(40, 1e-5), accountant: str | None = None) -> dp.Session:
    return dp.Session({"visits": DATA}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=10), budget=budget,
                      accountant=accountant, seed=3)


@contextmanager
def served(sess: dp.Session, **options: Any) -> Iterator[dp.Remote]:
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, **options).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        yield remote


def outcome(run: Callable[[], Any]) -> Any:
    try:
        out = run()
    except dp.DPFrameError as e:
        return type(e).__name__, str(e)
    return out.rows() if isinstance(out, pl.DataFrame) else out


def both(script: Callable[[Any, Callable[..., Any]], list[Callable[[], Any]]], **kw: Any) -> tuple[list[Any],
                                                                                                   list[Any]]:
    """``script(session_or_remote, median)`` in process and remotely on same-seed twins; their ledgers agree."""
    here, there = session(**kw), session(**kw)
    local = [outcome(step) for step in script(here, robust_median)]
    with served(there) as remote:
        far = [outcome(step) for step in script(remote, remote.robust_median)]
    assert there.history().drop("id").rows() == here.history().drop("id").rows()
    return local, far


def test_robust_median_as_in_process() -> None:
    def script(s: Any, median: Callable[..., Any]) -> list[Callable[[], Any]]:
        q = median(s.table("visits").filter(pl.col("store") < 6), "spend", (0, 100))
        return [lambda: q.cost(dp.ApproxDP(1, 1e-6)), lambda: str(q.explain(dp.ApproxDP(1, 1e-6))),
                lambda: q.explain(dp.ApproxDP(1, 1e-6), format="json")["budget"],
                lambda: q.collect(dp.ApproxDP(4, 1e-6)), lambda: q.collect(dp.ApproxDP(0.001, 1e-9), refund=True),
                lambda: q.collect(dp.ApproxDP(2, 1e-6), refund=False)]

    local, far = both(script)
    assert far == local
    assert isinstance(local[3], float) and 0 <= local[3] <= 100


BAD_MEDIANS = {
    "a text column": lambda s, median: median(s.table("visits"), "day", (0, 1)).cost(dp.ApproxDP(1, 1e-6)),
    "an unknown column": lambda s, median: median(s.table("visits"), "nope", (0, 1)).cost(dp.ApproxDP(1, 1e-6)),
    "bounds reversed": lambda s, median: median(s.table("visits"), "spend", (5, 1)).cost(dp.ApproxDP(1, 1e-6)),
    "bounds not a pair": lambda s, median: median(s.table("visits"), "spend", 5).cost(dp.ApproxDP(1, 1e-6)),
    "a pure budget": lambda s, median: median(s.table("visits"), "spend", (0, 9)).collect(dp.PureDP(1)),
    "no budget": lambda s, median: median(s.table("visits"), "spend", (0, 9)).collect(),
    "no budget to explain": lambda s, median: median(s.table("visits"), "spend", (0, 9)).explain(),
    "a bad format": lambda s, median: median(s.table("visits"), "spend", (0, 9)).explain(dp.ApproxDP(1, 1e-6),
                                                                                        format="yaml"),
    "too much": lambda s, median: median(s.table("visits"), "spend", (0, 9)).collect(dp.ApproxDP(400, 1e-6)),
    "a bad refund": lambda s, median: median(s.table("visits"), "spend", (0, 9)).collect(dp.ApproxDP(1, 1e-6),
                                                                                        refund="yes"),
    "not a frame": lambda s, median: median("visits", "spend", (0, 9)),
}


@pytest.mark.parametrize("case", list(BAD_MEDIANS))
def test_robust_median_refusals_as_in_process(case: str) -> None:
    local, far = both(lambda s, median: [lambda: BAD_MEDIANS[case](s, median)])
    if case == "not a frame":        # the client's own check: no frame of this connection to send
        assert far == [("ArgumentError", "frame: expected a frame of this connection, got str. Fix: pass "
                                         "remote.table(name) (after its filters and derived columns)")]
        assert local[0][0] == "ArgumentError" and local[0][1].startswith("frame: expected a private frame, got str")
        return
    assert far == local and local[0][0] != "float", local


def test_robust_median_in_a_pure_session_is_refused_alike() -> None:
    local, far = both(lambda s, median: [lambda: median(s.table("visits"), "spend", (0, 9)).cost(
        dp.ApproxDP(1, 1e-6))], budget=dp.PureDP(10))
    assert far == local and local[0][0] == "BudgetConversionError"


def gated(s: Any, query_budget: dp.Budget, threshold: float, **kw: Any) -> Any:
    t = s.table("visits")
    release = gated_release if isinstance(s, dp.Session) else s.gated_release
    return release(t.filter(pl.col("store") == 2).agg(dp.mean("spend", bounds=(0, 50))), query_budget,
                   t.filter(pl.col("store") == 2).agg(dp.len()), threshold, dp.PureDP(0.5), **kw)


def test_gated_release_as_in_process() -> None:
    def script(s: Any, _: Any) -> list[Callable[[], Any]]:
        return [lambda: gated(s, dp.PureDP(1), 100), lambda: gated(s, dp.PureDP(1), 10**6),
                lambda: gated(s, dp.PureDP(1), 10**6, refund=False), lambda: gated(s, dp.PureDP(1), 10, refund=True)]

    local, far = both(script)
    assert far == local
    assert isinstance(local[0], list) and local[1] is None      # released; held back (the gate: ~500 rows)


BAD_GATES = {
    "a SQL query": lambda s: (gated_release if isinstance(s, dp.Session) else s.gated_release)(
        s.sql("SELECT COUNT(*) AS n FROM visits"), dp.PureDP(1), s.table("visits").agg(dp.len()), 5, dp.PureDP(1)),
    "a grouped gate": lambda s: (gated_release if isinstance(s, dp.Session) else s.gated_release)(
        s.table("visits").agg(dp.len()), dp.PureDP(1), s.table("visits").group_by("day").agg(dp.len()), 5,
        dp.PureDP(1)),
    "an approximate budget": lambda s: gated(s, dp.ApproxDP(1, 1e-6), 5),
    "a budget that is a number": lambda s: gated(s, 1.0, 5),
    "a threshold that is text": lambda s: gated(s, dp.PureDP(1), "many"),
    "too much": lambda s: gated(s, dp.PureDP(100), 5),
    "a bad refund": lambda s: gated(s, dp.PureDP(1), 5, refund="no"),
}


@pytest.mark.parametrize("case", list(BAD_GATES))
def test_gated_release_refusals_as_in_process(case: str) -> None:
    local, far = both(lambda s, _: [lambda: BAD_GATES[case](s)])
    assert far == local and isinstance(local[0], tuple), local


def test_a_gated_release_reply_is_padded() -> None:
    """The gate reads private rows: its reply is held to ``pad`` like every release's, whether it passed or not."""
    sess = session()
    with served(sess, pad=0.4) as remote:
        for threshold in (10, 10**6):
            start = time.monotonic()
            gated(remote, dp.PureDP(0.1), threshold)
            assert 0.39 <= time.monotonic() - start < 0.75
