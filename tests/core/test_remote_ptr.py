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
from dpframe.interactive.stopping import run_until

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


def _unchecked(value: Any) -> Any:
    """``value``, typed ``Any``: a wrong-typed argument the test passes on purpose."""
    return value


BAD_GATES = {
    "a SQL query": lambda s: (gated_release if isinstance(s, dp.Session) else s.gated_release)(
        s.sql("SELECT COUNT(*) AS n FROM visits"), dp.PureDP(1), s.table("visits").agg(dp.len()), 5, dp.PureDP(1)),
    "a grouped gate": lambda s: (gated_release if isinstance(s, dp.Session) else s.gated_release)(
        s.table("visits").agg(dp.len()), dp.PureDP(1), s.table("visits").group_by("day").agg(dp.len()), 5,
        dp.PureDP(1)),
    "an approximate budget": lambda s: gated(s, dp.ApproxDP(1, 1e-6), 5),
    "a budget that is a number": lambda s: gated(s, _unchecked(1.0), 5),
    "a threshold that is text": lambda s: gated(s, dp.PureDP(1), _unchecked("many")),
    "too much": lambda s: gated(s, dp.PureDP(100), 5),
    "a bad refund": lambda s: gated(s, dp.PureDP(1), 5, refund="no"),
}


@pytest.mark.parametrize("case", list(BAD_GATES))
def test_gated_release_refusals_as_in_process(case: str) -> None:
    local, far = both(lambda s, _: [lambda: BAD_GATES[case](s)])
    assert far == local and isinstance(local[0], tuple), local


def test_a_gated_release_reply_is_padded(padded_holds: Any) -> None:
    """The gate reads private rows: its reply is held to ``pad`` like every release's, whether it passed or not.

    Once per request, scheduled at a period from the request's arrival (``padded_holds``: the schedule the server
    set, not the machine's lateness), and the analyst waits at least ``pad``."""
    sess = session()
    with served(sess, pad=0.4) as remote:
        for threshold in (10, 10**6):
            start = time.monotonic()
            gated(remote, dp.PureDP(0.1), threshold)
            assert time.monotonic() - start >= 0.39
    assert len(padded_holds) == 2 and all(hold.period() is not None for hold in padded_holds), padded_holds


# ------------------------------------------------------------------------------------------ run_until

def steps_of(s: Any, n: int = 5) -> list[Any]:
    return [s.table("visits").filter(pl.col("store") == i).agg(dp.len()) for i in range(n)]


def until(s: Any, *args: Any, **kw: Any) -> Any:
    return (run_until if isinstance(s, dp.Session) else s.run_until)(*args, **kw)


def test_run_until_as_in_process() -> None:
    """The steps run on the server; ``stop`` runs in the analyst's process and sees the same released results."""
    def script(s: Any, _: Any) -> list[Callable[[], Any]]:
        seen: list[list[Any]] = []

        def stop_at(n: int) -> Callable[[list[pl.DataFrame]], bool]:
            def stop(results: list[pl.DataFrame]) -> bool:
                seen.append([r.rows() for r in results])
                results.clear()                             # the caller's copy: changes nothing
                return len(seen[-1]) == n
            return stop

        def rows(out: list[pl.DataFrame]) -> list[Any]:
            return [r.rows() for r in out]
        return [lambda: rows(until(s, steps_of(s), dp.PureDP(0.5), stop_at(3))),
                lambda: rows(until(s, steps_of(s), dp.PureDP(0.25), stop_at(99), refund=False)),
                lambda: rows(until(s, steps_of(s, 4), dp.PureDP(0.5), stop_at(2), stops=[2], delta=1e-6)),
                lambda: seen]

    local, far = both(script)
    assert far == local
    assert len(local[0]) == 3 and len(local[1]) == 5 and len(local[2]) == 2
    assert [len(s) for s in local[3][:5]] == [1, 2, 3, 1, 2]


def test_run_until_with_pure_steps_in_a_zcdp_session_as_in_process() -> None:
    local, far = both(lambda s, _: [lambda: len(until(s, steps_of(s, 3), dp.PureDP(0.1), lambda r: len(r) == 2,
                                                     refund=False))],
                      budget=dp.ZCDP(5))
    assert far == local == [2]


BAD_RUNS = {
    "no steps": lambda s: until(s, [], dp.PureDP(1), lambda r: False),
    "steps that are one query": lambda s: until(s, steps_of(s)[0], dp.PureDP(1), lambda r: False),
    "a SQL step": lambda s: until(s, [s.sql("SELECT COUNT(*) AS n FROM visits")], dp.PureDP(1), lambda r: False),
    "a grouped step": lambda s: until(s, [s.table("visits").group_by("day").agg(dp.len())], dp.PureDP(1),
                                      lambda r: False),
    "a stop that is not a function": lambda s: until(s, steps_of(s), dp.PureDP(1), True),
    "a budget that is a number": lambda s: until(s, steps_of(s), 0.5, lambda r: False),
    "an approximate budget": lambda s: until(s, steps_of(s), dp.ApproxDP(1, 1e-6), lambda r: False),
    "bad stops": lambda s: until(s, steps_of(s), dp.PureDP(1), lambda r: False, stops=[9]),
    "a bad delta": lambda s: until(s, steps_of(s), dp.PureDP(1), lambda r: False, delta=-1),
    "too much": lambda s: until(s, steps_of(s), dp.PureDP(30), lambda r: False),
    "a failing stop": lambda s: until(s, steps_of(s), dp.PureDP(0.5), lambda r: [][1]),
    "a stop that is not a truth value": lambda s: until(s, steps_of(s), dp.PureDP(0.5), lambda r: pl.DataFrame()),
}


@pytest.mark.parametrize("case", list(BAD_RUNS))
def test_run_until_refusals_and_failures_as_in_process(case: str) -> None:
    """The same error (class and text) and ledger: refused free, or (a stop that fails) failed and charged."""
    local, far = both(lambda s, _: [lambda: BAD_RUNS[case](s)])
    assert far == local and isinstance(local[0], tuple), local


def test_a_stop_rule_may_not_use_its_own_connection() -> None:
    """The connection is waiting for the rule's answer: a request on it from the rule is refused there (an
    ArgumentError in the analyst's process), which fails the run, charged — another connection serves it."""
    sess = session()
    with served(sess) as remote:
        with pytest.raises(dp.DPFrameError, match=r"failed while running \(ArgumentError\)"):
            remote.run_until(steps_of(remote, 2), dp.PureDP(0.5), lambda r: remote.remaining() is None)
        assert sess.history()["status"].to_list() == ["failed"]
        assert remote.remaining() == sess.remaining()          # the connection still works


def test_an_answer_that_is_not_a_truth_value_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-made client answering ``{"stop": 1}`` (not a boolean): the run fails, its worst cell charged."""
    sess = session()
    with served(sess) as remote:
        monkeypatch.setattr(remote, "_answer", lambda ask, released: remote._channel.send_json({"stop": 1}))
        with pytest.raises(dp.DPFrameError, match=r"failed while running \(StopFailed\)"):
            remote.run_until(steps_of(remote, 2), dp.PureDP(0.5), lambda r: True)
        assert sess.history()["status"].to_list() == ["failed"] and sess.spent() == dp.ApproxDP(1, 0)


def test_an_interrupted_stop_rule_is_raised_after_the_run_fails() -> None:
    sess = session()
    with served(sess) as remote:
        def interrupt(results: list[pl.DataFrame]) -> bool:
            raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            remote.run_until(steps_of(remote, 2), dp.PureDP(0.5), interrupt)
        assert sess.history()["status"].to_list() == ["failed"]
        assert remote.remaining() == sess.remaining()


def test_each_step_of_a_padded_run_until_is_held(padded_holds: Any) -> None:
    """The server asks after each step, and replies after the last: each held to ``pad`` from when that step's work
    began (the request's arrival, then the previous answer), so no step's time shows.

    The analyst waits at least ``pad`` between questions; the server scheduled each of its four sends at a period
    from that step's start, and each step starts after the previous send (``padded_holds``: not the request's
    arrival, which would push later steps into later periods)."""
    sess = session()
    asked: list[float] = []
    with served(sess, pad=0.3) as remote:
        start = time.monotonic()

        def stop(results: list[pl.DataFrame]) -> bool:
            asked.append(time.monotonic())
            return len(results) == 3
        remote.run_until(steps_of(remote, 5), dp.PureDP(0.5), stop)
        done = time.monotonic()
    gaps = [b - a for a, b in zip([start, *asked], [*asked, done], strict=True)]
    assert len(gaps) == 4 and all(g >= 0.29 for g in gaps), gaps
    assert len(padded_holds) == 4 and all(hold.period() is not None for hold in padded_holds), padded_holds
    assert all(later.began >= earlier.left for earlier, later in zip(padded_holds, padded_holds[1:])), padded_holds


# ------------------------------------------------------------------------------------------ options JSON cannot carry

UNSENDABLE: dict[str, Callable[[Any, Any], Any]] = {
    "ci": lambda s, median: s.table("visits").agg(dp.len()).collect(dp.PureDP(1), ci=b"0.9"),
    "diagnostics": lambda s, median: s.table("visits").agg(dp.len()).collect(dp.PureDP(1), diagnostics=b"1"),
    "format": lambda s, median: s.table("visits").agg(dp.len()).explain(dp.PureDP(1), format=b"text"),
    "refund": lambda s, median: median(s.table("visits"), "spend", (0, 9)).collect(dp.ApproxDP(1, 1e-6),
                                                                                   refund=b"no"),
    "table": lambda s, median: (s.table if isinstance(s, dp.Session) else s.schema)(_unchecked(b"visits")),
}


@pytest.mark.parametrize("case", list(UNSENDABLE))
def test_an_option_json_cannot_carry_gets_the_in_process_error(case: str) -> None:
    """Bytes (or any object) where a query takes a number, text or a flag: the client ran ``json.dumps`` on it and
    raised a bare TypeError; it now runs the session's own check first — the same error class and text, nothing
    sent, nothing charged."""
    local, far = both(lambda s, median: [lambda: UNSENDABLE[case](s, median)])
    assert far == local and local[0][0] in ("PlanError", "ArgumentError", "SchemaError"), local


def test_an_option_of_a_numpy_type_crosses_as_its_value() -> None:
    """``ci=numpy.float32(0.9)`` is a confidence level in process; the client sends its plain value (json.dumps
    refused it), and the twins release the same intervals."""
    import numpy as np

    local, far = both(lambda s, median: [
        lambda: s.table("visits").agg(dp.len()).collect(dp.PureDP(1), ci=np.float32(0.9)),
        lambda: median(s.table("visits"), "spend", (0, 50)).collect(dp.ApproxDP(4, 1e-6), refund=np.bool_(False))])
    assert far == local and local[0][0][1:] != (None, None)
