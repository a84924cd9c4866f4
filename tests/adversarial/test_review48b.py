"""Review 48b: an analyst against ``remote.run_until``'s stopping question, ``gated_release`` and ``robust_median``.

``run_until``'s ``stop`` runs in the analyst's process; the server asks it between steps and waits for the answer
while the run's worst cell is reserved. The analyst controls that answer, its timing and the connection. What
must hold whatever they do: the ledger never loses a charge (a run that fails or is cut is marked failed and stays
charged), a refused call is free, ``stop`` receives released values only, the server neither hangs for ever nor
keeps a connection's thread, and the client never reads one request's reply as another's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.stopping import run_until
from dpframe.remote import wire

KEY = os.urandom(32)
DATA = pl.DataFrame({"u": list(range(400)), "x": [float(i % 13) for i in range(400)]})
ROOT = Path(__file__).resolve().parents[2]
STEP = dp.PureDP(0.5)
WORST = dp.PureDP(Fraction(3, 2))       # three steps of 0.5


def session(budget: dp.Budget = dp.PureDP(10)) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=0)


def steps_of(s: Any, n: int = 3) -> list[Any]:
    return [s.table("t").filter(pl.col("x") > i).agg(dp.len()) for i in range(n)]


@contextmanager
def served(sess: dp.Session, **options: Any) -> Iterator[tuple[dp.Server, dp.Remote]]:
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, **options).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        yield server, remote


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def released(server: dp.Server) -> bool:
    """The server holds no connection (each one's thread has ended: it removes its socket last)."""
    return not server._clients


def statuses(sess: dp.Session) -> list[str]:
    return list(sess.history()["status"])


def in_thread(call: Callable[[], Any], seconds: float = 20.0) -> Any:
    """``call()``'s result (or the exception it raised) on a thread, or a failure if it has not returned in time."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return box.get("error", box.get("value"))


# ------------------------------------------------------------------------------------------ a client that goes away

CLIENT = """
import os, sys, polars as pl, dpframe as dp
key = bytes.fromhex(sys.argv[3])
remote = dp.connect((sys.argv[1], int(sys.argv[2])), authkey=key)
steps = [remote.table("t").filter(pl.col("x") > i).agg(dp.len()) for i in range(3)]
def stop(results):
    print("asked", len(results), flush=True)
    os._exit(0) if sys.argv[4] == "exit" else sys.stdin.readline()
    return False
remote.run_until(steps, dp.PureDP(0.5), stop)
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_client_process_that_dies_while_asked_leaves_its_run_failed_and_charged(how: str) -> None:
    """The analyst's process ends (exits in ``stop``, or is killed while ``stop`` runs) while the server waits for
    the answer: the run is marked failed, its worst cell stays charged, and the connection's thread ends."""
    sess = session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        address = server.address
        assert isinstance(address, tuple)
        with subprocess.Popen([sys.executable, "-c", CLIENT, address[0], str(address[1]), KEY.hex(), how],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}) as child:
            try:
                assert child.stdout is not None and child.stdout.readline() == "asked 1\n"
                if how == "kill":
                    child.kill()
                child.wait(timeout=30)
            finally:
                child.kill()
        assert wait_for(lambda: statuses(sess) == ["failed"] and released(server))
        assert sess.spent() == WORST


def test_stop_may_close_its_own_connection() -> None:
    """``stop`` calling ``remote.close()``: it waited for the lock its own request held (a deadlock in the
    analyst's process, and the server waited for an answer until ``idle_timeout``). Now the close cuts the
    connection: the run fails on the server, charged, and ``run_until`` raises a RemoteError."""
    sess = session()
    with served(sess) as (server, remote):
        def stop(results: list[pl.DataFrame]) -> bool:
            remote.close()
            return False
        out = in_thread(lambda: remote.run_until(steps_of(remote), STEP, stop))
        assert isinstance(out, dp.RemoteError), out
        assert remote.closed
        assert wait_for(lambda: statuses(sess) == ["failed"] and released(server))
        assert sess.spent() == WORST


def test_another_thread_may_close_the_connection_during_a_run() -> None:
    """``close()`` from another thread while ``run_until`` waits in ``stop`` returns at once (it waited for the run,
    and so for ``stop``, to end), and cuts the run: failed, charged."""
    sess = session()
    asked, closed = threading.Event(), threading.Event()
    with served(sess) as (server, remote):
        def stop(results: list[pl.DataFrame]) -> bool:
            asked.set()
            closed.wait(10)
            return False
        runner = threading.Thread(target=lambda: in_thread(lambda: remote.run_until(steps_of(remote), STEP, stop)))
        runner.start()
        assert asked.wait(10)
        assert in_thread(remote.close, 5) is None
        closed.set()
        runner.join(10)
        assert wait_for(lambda: statuses(sess) == ["failed"] and released(server))
        assert sess.spent() == WORST


# ------------------------------------------------------------------------------------------ a client that never answers

def test_a_silent_analyst_is_disconnected_at_idle_timeout_and_no_reply_is_misread() -> None:
    """``stop`` silent past ``idle_timeout``: the run fails, charged, and the client is disconnected, as an idle
    client is. The server used to answer the run's failure and keep the connection, then read the late answer as a
    request: its "unknown request" error became the reply to the analyst's next call."""
    sess = session()
    with served(sess, idle_timeout=0.5) as (server, remote):
        def stop(results: list[pl.DataFrame]) -> bool:
            time.sleep(1.0)
            return False
        with pytest.raises(dp.RemoteError, match="connection (failed|was closed)"):
            remote.run_until(steps_of(remote), STEP, stop)
        assert remote.closed
        with pytest.raises(dp.RemoteError, match="this connection is closed"):
            remote.remaining()
        assert wait_for(lambda: statuses(sess) == ["failed"] and released(server))
        assert sess.spent() == WORST


def test_closing_the_server_while_it_waits_for_an_answer() -> None:
    """``idle_timeout=None``: the server waits for the answer as long as the connection lives; ``server.close()``
    cuts it, and the run is failed and charged, its thread ended; the analyst's late answer gets a RemoteError."""
    sess = session()
    asked, go = threading.Event(), threading.Event()
    with served(sess, idle_timeout=None) as (server, remote):
        def stop(results: list[pl.DataFrame]) -> bool:
            asked.set()
            go.wait(10)
            return False
        result: list[Any] = []
        runner = threading.Thread(target=lambda: result.append(in_thread(
            lambda: remote.run_until(steps_of(remote), STEP, stop))))
        runner.start()
        assert asked.wait(10)
        time.sleep(0.3)
        assert statuses(sess) == ["reserved"]       # waiting, the worst cell reserved
        server.close()
        assert wait_for(lambda: statuses(sess) == ["failed"] and released(server))
        go.set()
        runner.join(10)
        assert isinstance(result[0], dp.RemoteError), result
        assert sess.spent() == WORST


def test_sigterm_to_dpframe_serve_while_it_waits_for_an_answer(tmp_path: Path) -> None:
    """``dpframe serve`` stopped by SIGTERM while a run waits for ``stop``: the ledger file keeps the run failed and
    charged (never ``reserved``, which forfeits every later refund on the file)."""
    data, ledger, key = tmp_path / "t.parquet", tmp_path / "budget.ledger", tmp_path / "key.txt"
    DATA.write_parquet(data)
    key.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    owner = subprocess.Popen([sys.executable, "-m", "dpframe.cli", "serve", "--table", f"t={data}",
                              "--privacy-unit", "u", "--total-epsilon", "10", "--ledger", str(ledger),
                              "--address", "127.0.0.1:0", "--authkey-file", str(key)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    asked = threading.Event()
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        host, port = line.rsplit(" on ", 1)[1].split(";")[0].strip("()").replace("'", "").split(", ")
        remote = dp.connect((host, int(port)), authkey=key.read_text().encode())

        def stop(results: list[pl.DataFrame]) -> bool:
            asked.set()
            time.sleep(3)
            return False
        runner = threading.Thread(target=lambda: in_thread(lambda: remote.run_until(steps_of(remote), STEP, stop)))
        runner.start()
        assert asked.wait(20)
    finally:
        owner.send_signal(signal.SIGTERM)
        assert owner.wait(timeout=30) == 0
        owner.communicate()         # its pipes, closed
    runner.join(10)
    remote.close()
    with dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), ledger=str(ledger)) as again:
        assert statuses(again) == ["failed"] and again.spent() == WORST


# ------------------------------------------------------------------------------------------ hand-made answers

def hand_made(remote: dp.Remote, answer: Callable[[wire.Channel, int], None]) -> None:
    """Replace the client's answer by ``answer(channel, question number)`` (the analyst's own process)."""
    asked = [0]

    def send(ask: Any, results: list[pl.DataFrame]) -> None:
        asked[0] += 1
        answer(remote._channel, asked[0])
    setattr(remote, "_answer", send)  # noqa: B010 - the analyst's own client, answering by hand


def send_all(channel: wire.Channel, *messages: dict[str, Any] | bytes) -> None:
    for message in messages:
        if isinstance(message, bytes):
            channel.send(message)
        else:
            channel.send_json(message)


ANSWERS: dict[str, Callable[[wire.Channel, int], None]] = {
    "text": lambda c, n: c.send_json({"stop": "yes"}),
    "null": lambda c, n: c.send_json({"stop": None}),
    "a-number": lambda c, n: c.send_json({"stop": 1.0}),
    "an-error-of-a-long-name": lambda c, n: c.send_json({"error": "E" * 5000}),
    "a-request-instead": lambda c, n: c.send_json({"op": "remaining", "attached": 0}),
    "a-list": lambda c, n: c.send(b"[true]"),
    "not-JSON": lambda c, n: c.send(b"\xff{"),
    "deep-JSON": lambda c, n: c.send(b"[" * 3000 + b"]" * 3000),
    "huge": lambda c, n: c.send_json({"stop": False, "pad": "x" * 100_000}),
    "a-request-with-a-frame-instead": lambda c, n: send_all(c, {
        "op": "collect", "sql": "SELECT COUNT(*) AS n FROM t", "keys": 0, "budget": None, "attached": 1},
        wire.frame_bytes(pl.DataFrame({"x": [[1.0]]}))),
}


@pytest.mark.parametrize("case", list(ANSWERS))
def test_a_bad_answer_fails_the_run_charged_and_nothing_else_runs(case: str) -> None:
    """Every answer that is not ``{"stop": true|false}``: the run fails, its worst cell charged, nothing else
    charged; the connection then either serves its next request correctly or is closed (never a reply misread)."""
    sess = session()
    with served(sess) as (server, remote):
        hand_made(remote, ANSWERS[case])
        with pytest.raises((dp.DPFrameError, dp.RemoteError)):
            remote.run_until(steps_of(remote), STEP, lambda r: False)
        try:
            assert remote.remaining() == sess.remaining()
            assert remote.history()["status"].to_list() == ["failed"]
        except dp.RemoteError as e:
            assert "closed" in str(e) or "connection" in str(e), e
        assert wait_for(lambda: statuses(sess) == ["failed"])
        assert sess.spent() == WORST
        with dp.connect(server.address, authkey=KEY) as other:      # the server serves others as before
            assert other.remaining() == dp.PureDP(Fraction(17, 2))


def test_answering_twice_charges_nothing_more() -> None:
    """Two answers to each question: the second is taken as the next question's answer, and the ones left over are
    requests without ``op`` (refused, free). The run is charged as its stopping time says, once."""
    sess = session()
    with served(sess) as (server, remote):
        hand_made(remote, lambda c, n: send_all(c, {"stop": False}, {"stop": True}))
        out = remote.run_until(steps_of(remote, 4), STEP, lambda r: False)
        assert len(out) == 2                    # the first question's second answer stopped it at the second
        assert wait_for(lambda: statuses(sess) == ["committed"])
    assert wait_for(lambda: released(server))
    assert sess.spent() == dp.PureDP(1) and sess.history().height == 1


# ------------------------------------------------------------------------------------------ stop's failures, per step

@pytest.mark.parametrize("at", [1, 2])
@pytest.mark.parametrize("kind", [ValueError, KeyboardInterrupt, SystemExit])
def test_stop_failing_at_each_step_as_in_process(at: int, kind: type[BaseException]) -> None:
    """An exception (or an interrupt) from ``stop`` at the first or second question: the same ledger as in process
    (the run failed, its worst cell charged), the interrupt raised as it is, and the connection still serves."""
    def stop(results: list[pl.DataFrame]) -> bool:
        if len(results) == at:
            raise kind("stop")
        return False
    here, there = session(), session()
    with pytest.raises(dp.DPFrameError if kind is ValueError else kind):
        run_until(steps_of(here), STEP, stop)
    with served(there) as (_, remote):
        with pytest.raises(dp.DPFrameError if kind is ValueError else kind):
            remote.run_until(steps_of(remote), STEP, stop)
        assert remote.remaining() == there.remaining() == here.remaining()
    assert statuses(there) == statuses(here) == ["failed"] and there.spent() == WORST


def test_a_slow_stop_is_not_timed_by_the_padded_question(padded_holds: Any) -> None:
    """``stop`` taking longer than ``pad``: each question still leaves ``pad`` after the previous answer (from when
    that step's work began), so the analyst's slowness does not push a question into another period.

    The analyst waits at least ``pad`` after each answer; the server (``padded_holds``: its schedule, load-proof)
    holds each question and the reply once, at a period from the start of its step, which begins once the
    analyst's answer is in (not when the question left: the answer's 0.5 s would overrun the 0.3 s period)."""
    sess = session()
    answered: list[float] = []
    asked: list[float] = []
    with served(sess, pad=0.3) as (_, remote):
        def stop(results: list[pl.DataFrame]) -> bool:
            asked.append(time.monotonic())
            time.sleep(0.5)
            answered.append(time.monotonic())
            return False
        remote.run_until(steps_of(remote, 4), STEP, stop)
    gaps = [b - a for a, b in zip(answered, asked[1:], strict=False)]
    assert len(gaps) == 2 and all(g >= 0.28 for g in gaps), gaps
    assert len(padded_holds) == len(asked) + 1 and all(hold.period() is not None for hold in padded_holds)
    assert all(hold.began >= answer for hold, answer in zip(padded_holds[1:], answered, strict=True)), padded_holds
    assert statuses(sess) == ["committed"]


# ------------------------------------------------------------------------------------------ the client's own state

def test_an_interrupt_while_waiting_for_a_reply_closes_the_connection() -> None:
    """Ctrl-C while a request waits for its reply: the reply still comes, so the connection can no longer pair
    replies with requests. It was kept open, and the next request read the previous one's reply (or its frame
    as a length); now it is closed, and the next request says so."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal is delivered to the main thread")
    sess = session()
    with served(sess, pad=0.6) as (_, remote):
        timer = threading.Timer(0.2, lambda: signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            remote.table("t").agg(dp.len()).collect(dp.PureDP(1))
        timer.join()
        time.sleep(0.8)                         # the reply has arrived
        assert remote.closed
        with pytest.raises(dp.RemoteError, match="this connection is closed"):
            remote.table("t").agg(dp.sum("x", bounds=(0, 13))).collect(dp.PureDP(1))
    assert wait_for(lambda: statuses(sess) == ["committed"])       # the interrupted release: charged


class HandOff:
    """A lock that, when the first run releases it, lets a waiting request run to its end before it returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: int | None = None
        self.done = threading.Event()

    def acquire(self, blocking: bool = True) -> bool:
        return self._lock.acquire(blocking)

    def release(self) -> None:
        self._lock.release()
        if threading.get_ident() == self.owner:
            self.done.wait(5)

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_an_interrupted_stop_is_raised_in_its_own_thread() -> None:
    """The interrupt of a run's ``stop`` was kept on the connection and read after its lock was released: another
    thread's request that took the lock then could raise it (and the run returned normally)."""
    sess = session()
    with served(sess) as (_, remote):
        lock = HandOff()
        remote._lock = lock  # type: ignore[assignment]
        started = threading.Event()
        other: list[Any] = []

        def ask_meanwhile() -> None:
            started.set()
            other.append(in_thread(remote.remaining))
            lock.done.set()

        def stop(results: list[pl.DataFrame]) -> bool:
            threading.Thread(target=ask_meanwhile).start()
            started.wait(5)
            time.sleep(0.1)                     # the other thread now waits for the lock
            raise KeyboardInterrupt

        lock.owner = threading.get_ident()
        with pytest.raises(KeyboardInterrupt):
            remote.run_until(steps_of(remote), STEP, stop)
        assert wait_for(lambda: bool(other))
        assert other == [sess.remaining()], other


# ------------------------------------------------------------------------------------------ clients sharing a budget

def test_concurrent_runs_forfeit_their_refunds_and_lose_no_charge() -> None:
    """A's run waits in ``stop`` while B runs a ``run_until``, a gated release and a robust median (refund None and
    True): each of B's overlaps A's open reservation, so none is refunded, and nor is A's; nothing is lost."""
    sess = session(dp.ApproxDP(20, 1e-5))
    asked, go = threading.Event(), threading.Event()
    with served(sess) as (server, a), dp.connect(server.address, authkey=KEY) as b:
        def stop(results: list[pl.DataFrame]) -> bool:
            asked.set()
            go.wait(20)
            return True
        result: list[Any] = []
        runner = threading.Thread(target=lambda: result.append(in_thread(lambda: a.run_until(steps_of(a), STEP,
                                                                                            stop))))
        runner.start()
        assert asked.wait(10)
        assert len(b.run_until(steps_of(b), STEP, lambda r: True, refund=True)) == 1
        t = b.table("t")
        b.gated_release(t.agg(dp.sum("x", bounds=(0, 13))), dp.PureDP(1), t.agg(dp.len()), 10**6, dp.PureDP(0.5))
        b.robust_median(t, "x", (0, 13)).collect(dp.ApproxDP(1, 1e-6), refund=None)
        go.set()
        runner.join(20)
        assert isinstance(result[0], list) and len(result[0]) == 1
        history = sess.history()
    assert history["status"].to_list() == ["committed"] * 4
    assert history["cost"].to_list() == [str(sess.accountant.describe_charge(c)) for c in (
        dp.ApproxDP(1.5, 0), dp.ApproxDP(1.5, 0), dp.ApproxDP(1.5, 0), dp.ApproxDP(1, 1e-6))]
    assert sess.spent() == dp.ApproxDP(Fraction(11, 2), 1e-6)


@pytest.mark.parametrize("refund", [None, True, False])
def test_racing_runs_keep_the_ledger_whole(refund: bool | None) -> None:
    """Two clients' runs at once, many times: whatever the interleaving, every row is closed, each charged its own
    stopping cell or its worst, and what is spent is their sum."""
    sess = session(dp.PureDP(100))
    with served(sess) as (server, a), dp.connect(server.address, authkey=KEY) as b:
        def run(remote: dp.Remote, at: int) -> list[pl.DataFrame]:
            return remote.run_until(steps_of(remote), STEP, lambda r: len(r) == at, refund=refund)
        for _ in range(6):
            threads = [threading.Thread(target=run, args=(remote, at)) for remote, at in ((a, 1), (b, 2))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(20)
        history = sess.history()
    assert set(history["status"]) == {"committed"} and history.height == 12
    costs = [sess.accountant.describe_charge(c) for c in (dp.PureDP(0.5), dp.PureDP(1), WORST)]
    assert set(history["cost"]) <= set(costs)
    if refund is False:
        assert set(history["cost"]) == {costs[2]}
    total = sum((Fraction(c.split("=")[1]) for c in history["cost"]), Fraction(0))
    assert sess.spent() == dp.PureDP(total)


# ------------------------------------------------------------------------------------------ arguments, as in process

ARGUMENTS: dict[str, Callable[[Any, Callable[..., Any]], Any]] = {
    "steps-a-generator": lambda s, until: until((q for q in steps_of(s)), STEP, lambda r: False),
    "steps-an-iterator": lambda s, until: until(iter(steps_of(s)), STEP, lambda r: False),
    "stops-a-range": lambda s, until: len(until(steps_of(s), STEP, lambda r: True, stops=range(2, 4))),
    "stops-a-tuple": lambda s, until: len(until(steps_of(s), STEP, lambda r: True, stops=(2,))),
    "stops-text": lambda s, until: until(steps_of(s), STEP, lambda r: True, stops="2"),
}


@pytest.mark.parametrize("case", list(ARGUMENTS))
def test_run_until_arguments_as_in_process(case: str) -> None:
    """``stops=range(2, 4)`` is a list of step counts in process; the client sent the range object, which a remote
    session refused ("cannot send a range"). Steps given as a generator got the packer's error, not run_until's.
    Now both are read as in process: the same result or error, the same ledger."""
    def outcome(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except dp.DPFrameError as e:
            return type(e).__name__, str(e)
    here, there = session(), session()
    local = outcome(lambda: ARGUMENTS[case](here, run_until))
    with served(there) as (_, remote):
        far = outcome(lambda: ARGUMENTS[case](remote, remote.run_until))
    assert far == local
    assert there.history().drop("id").rows() == here.history().drop("id").rows()
