"""Interactive tools on a remote session answer as they do in process, and only their public calls are served."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pytest

import dpframe as dp

KEY = secrets.token_bytes(32)
DATA = pl.DataFrame({"visitor": [i % 700 for i in range(6000)], "store": [i % 12 for i in range(6000)],
                     "spend": [float(i % 50) for i in range(6000)]})


def session(budget: dp.Budget, seed: int | None = 0) -> dp.Session:
    return dp.Session({"visits": DATA}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=10), budget=budget,
                      seed=seed)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Remote]]:
    sess = session(dp.ApproxDP(200, 1e-5))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        yield sess, remote


def both(budget: dp.Budget, script: Callable[[Any, Callable[[int], Any]], Any]) -> tuple[Any, Any, dp.Session,
                                                                                      dp.Session]:
    """``script(session_or_remote, store)`` in process and remotely on twin sessions (same seed)."""
    here, there = session(budget), session(budget)

    def store_of(frames: Any) -> Callable[[int], Any]:
        return lambda s: frames.table("visits").filter(pl.col("store") == s).agg(dp.len())

    local = script(here, store_of(here))
    with dp.Server(there, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        far = script(remote, store_of(remote))
    return local, far, here, there


def test_sparse_vector_as_in_process() -> None:
    def script(s: Any, store: Callable[[int], Any]) -> Any:
        with s.sparse_vector(threshold=480, max_positives=3, budget=dp.PureDP(1), release=dp.PureDP(0.5)) as sv:
            answers = [sv.test(store(i)) for i in range(12) if not sv.closed]
            status = sv.status()
        return answers, sv.answers, sv.values, sv.positives, sv.closed, sv.charged(), status, sv.status()

    local, far, here, there = both(dp.PureDP(5), script)
    assert far == local
    assert there.spent() == here.spent() and there.history()["query"].to_list() == here.history()["query"].to_list()


def test_target_charging_as_in_process() -> None:
    def script(s: Any, store: Callable[[int], Any]) -> Any:
        with s.target_charging(epsilon=0.5, max_hits=30, delta=1e-7, min_q=0.2) as ch:
            out = [ch.test(store(3), threshold=480), ch.test(store(3), threshold=480, prior=True),
                   ch.conditional_release(store(0), when=dp.above(400)),
                   ch.conditional_release(store(1), when=dp.above(9000), name="s1"),
                   ch.revise("s1", when=dp.above(300)),
                   ch.select_best([store(0), store(1), store(2)]),
                   ch.between(store(4), 400, 600), ch.boundary_test(store(5), threshold=500),
                   ch.hits, ch.calls, ch.closed, ch.status()]
        return out, ch.closed, ch.status()

    local, far, here, there = both(dp.ApproxDP(200, 1e-5), script)
    assert far == local
    assert there.spent() == here.spent()


def test_individual_filter_as_in_process() -> None:
    def script(s: Any, store: Callable[[int], Any]) -> Any:
        filt = s.individual_filter(budget=dp.ZCDP(0.5))
        costs = [filt.cost(store(i), budget=dp.ZCDP(0.1)) for i in range(3)]
        frames = [filt.collect(store(i), budget=dp.ZCDP(0.1)) for i in range(6)]
        return costs, [f.rows() for f in frames], filt.closed

    local, far, here, there = both(dp.ZCDP(1), script)
    assert far == local
    assert there.spent() == here.spent()


def test_a_tool_left_open_is_closed_with_its_connection() -> None:
    here, there = session(dp.PureDP(5)), session(dp.PureDP(5))
    with here.sparse_vector(threshold=480, max_positives=4, budget=dp.PureDP(1)) as sv:
        sv.test(here.table("visits").filter(pl.col("store") == 0).agg(dp.len()))
    with dp.Server(there, ("127.0.0.1", 0), authkey=KEY).start() as server:
        remote = dp.connect(server.address, authkey=KEY)
        remote.sparse_vector(threshold=480, max_positives=4, budget=dp.PureDP(1)).test(
            remote.table("visits").filter(pl.col("store") == 0).agg(dp.len()))
        assert there.spent() == dp.PureDP(1)          # reserved in full while open
        remote.close()
        deadline = time.monotonic() + 10
        while there.spent() == dp.PureDP(1) and time.monotonic() < deadline:     # the server sees the hang-up
            time.sleep(0.01)
    assert there.spent() == here.spent() and there.spent().epsilon < 1   # the refund of unused positives, as on close


def test_only_a_tools_public_calls_are_served(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    sv = remote.sparse_vector(threshold=480, max_positives=1, budget=dp.PureDP(1))
    spent = sess.spent()
    for call in ("_reservation", "session", "__enter__", "_positive_queries", "_values", "epsilon", "delta"):
        with pytest.raises(dp.PlanError, match="no method"):
            remote._request({"op": "use", "handle": 1, "call": call})
    with pytest.raises(AttributeError, match="no 'session'"):
        sv.session  # noqa: B018
    with pytest.raises(dp.PlanError, match="no interactive tool"):
        remote._request({"op": "open", "tool": "close"})
    for handle in (0, 2, "1", None, 1.0):
        with pytest.raises(dp.ArgumentError, match="no such open tool"):
            remote._request({"op": "use", "handle": handle, "call": "status"})
    with pytest.raises(dp.ArgumentError, match="not a query"):
        remote._request({"op": "use", "handle": 1, "call": "test", "args": [{"$query": [1]}]})
    with pytest.raises(dp.PlanError, match="Python objects or code"):
        remote._request({"op": "use", "handle": 1, "call": "test", "args": [{"$query": {"chain": {
            "table": "visits", "steps": [{"call": "with_columns", "args": [{"$expr": {"AnonymousFunction": {}}}]},
                                         {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}}}]})
    assert sess.spent() == spent and sv.answers == ()
    with dp.connect(remote._sock.getpeername(), authkey=KEY) as other:      # handles are per connection
        with pytest.raises(dp.ArgumentError, match="no such open tool"):
            other._request({"op": "use", "handle": 1, "call": "status"})


def test_the_sessions_errors_arrive_as_themselves(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    for s in (sess, remote):
        with pytest.raises(dp.DPFrameError) as refused:
            s.sparse_vector(threshold=1, max_positives=0, budget=dp.PureDP(1))
        with pytest.raises(dp.DPFrameError) as refused_too:
            s.target_charging(epsilon=0.5, max_hits=30, delta=2.0)
        if s is sess:
            here = (type(refused.value), str(refused.value), type(refused_too.value), str(refused_too.value))
    assert (type(refused.value), str(refused.value), type(refused_too.value), str(refused_too.value)) == here
    assert sess.history().height == 0


def test_an_idle_client_is_disconnected_and_its_tools_closed() -> None:
    """A session opens one sparse vector at a time: a client holding one while silent would block every other."""
    sess = session(dp.PureDP(5))
    # A timeout long enough that the refusal below comes before it on a loaded machine; the release after it is
    # polled for (up to 60 s), not slept for, so a slow server thread cannot fail the test either.
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, idle_timeout=6.0).start() as server:
        idle = dp.connect(server.address, authkey=KEY)
        idle.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1))
        with dp.connect(server.address, authkey=KEY) as other:
            with pytest.raises(dp.DPFrameError):
                other.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1))
        deadline = time.monotonic() + 60.0
        while True:                     # both silent past the timeout: disconnected, its sparse vector closed
            time.sleep(1.0)
            try:
                with dp.connect(server.address, authkey=KEY) as other, \
                        other.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1)) as sv:
                    assert sv.answers == ()
                break
            except dp.PlanError:
                if time.monotonic() > deadline:
                    raise
        with pytest.raises(dp.RemoteError):
            idle.tables()
    for bad in (0, -1, True, "60", float("inf"), float("nan")):
        with pytest.raises(dp.ArgumentError, match="idle_timeout"):
            dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, idle_timeout=bad)
