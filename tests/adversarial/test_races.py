"""Thread races on every stateful interactive object (issue 16, finding 4): check–run–record is atomic.

The analyst chooses the threads. Each test starts 32–64 threads at one :class:`threading.Barrier`, all
calling the same object at once, and asserts that its limit holds *exactly* (not "usually"): at most
``max_hits`` released values, at most ``max_positives`` "above" answers, no unit over its budget, one
open stream per session. Before the per-object locks, 64 threads released 64 values on a
``max_hits=1`` channel and an SVT with ``max_positives=1`` answered "above" 64 times.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.accounting.ledger import Ledger
from dpframe.interactive import ptr
from dpframe.interactive.boundary import q_boundary
from dpframe.interactive.ptr import robust_median
from dpframe.interactive.stream import Reservation
from dpframe.release import PrivateReader

THREADS = 64


@pytest.fixture(autouse=True)
def _slow_private_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with slow_private_steps(monkeypatch):
        yield


@contextmanager
def slow_private_steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every private read, ledger reservation, stream check and PTR noise draw takes a millisecond more.

    So racing threads really are inside the same check–run–record window at once: without the locks
    each test below fails every time, not once in a while.
    """
    def slowed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.001)
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(PrivateReader, "run", slowed(PrivateReader.run))
    monkeypatch.setattr(Ledger, "reserve", slowed(Ledger.reserve))
    monkeypatch.setattr(Reservation, "check_open", slowed(Reservation.check_open))
    monkeypatch.setattr(ptr, "discrete_laplace", slowed(ptr.discrete_laplace))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)        # and threads switch every microsecond (default 5 ms)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _race(call: Callable[[int], Any], n: int = THREADS) -> tuple[list[Any], list[dp.DPFrameError]]:
    """Run ``call(i)`` in ``n`` threads released together; (answers, dpframe errors). Anything else fails."""
    barrier = threading.Barrier(n)
    answers: list[Any] = []
    refused: list[dp.DPFrameError] = []
    crashed: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        barrier.wait()
        try:
            out = call(i)
        except dp.DPFrameError as e:
            with lock:
                refused.append(e)
        except BaseException as e:  # noqa: BLE001 — reported below
            with lock:
                crashed.append(e)
        else:
            with lock:
                answers.append(out)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not crashed, crashed
    assert len(answers) + len(refused) == n
    return answers, refused


def _session(budget: dp.Budget = dp.ApproxDP(10**6, 1e-5), **kw: Any) -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)], "x": [float(i % 10) for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=0, **kw)


def _all(sess: dp.Session) -> dp.Query:
    return sess.table("t").agg(dp.len())          # 600: far above every threshold below


# ------------------------------------------------------------------------------ target charging

def test_channel_test_hits_at_most_max_hits() -> None:
    sess = _session()
    q = _all(sess)
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6) as ch:
        answers, refused = _race(lambda i: ch.test(q, threshold=0))
        assert answers == [True] and ch.hits == 1 and ch.calls == 1
        assert all("closed" in str(e) or "left" in str(e) for e in refused)


def test_channel_conditional_release_releases_at_most_max_hits() -> None:
    sess = _session()
    q = _all(sess)
    with sess.target_charging(epsilon=1, max_hits=2, delta=1e-6) as ch:
        answers, _ = _race(lambda i: ch.conditional_release(q, when=dp.above(0)))
        assert len([a for a in answers if a is not None]) == 2 and ch.hits == 2


def test_channel_select_best_hits_at_most_max_hits() -> None:
    sess = _session()
    q = _all(sess)
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6) as ch:
        answers, _ = _race(lambda i: ch.select_best([q, q]))
        assert len(answers) == 1 and ch.hits == 1


def test_channel_mixed_calls_never_exceed_max_hits() -> None:
    """Every call kind at once; an answer in its target is a hit, and hits never pass τ."""
    sess = _session()
    q = _all(sess)
    hit_answers: dict[str, Callable[[Any], bool]] = {
        "test": lambda a: a is True, "release": lambda a: a is not None, "between": lambda a: a == "between",
        "boundary": lambda a: a == "boundary", "best": lambda a: True}
    kinds = list(hit_answers)

    def call(i: int) -> tuple[str, Any]:
        kind = kinds[i % len(kinds)]
        out = {"test": lambda: ch.test(q, threshold=0, epsilon=0.75),
               "release": lambda: ch.conditional_release(q, when=dp.above(0), epsilon=0.75),
               "between": lambda: ch.between(q, 0, 10_000, epsilon=0.75),
               "boundary": lambda: ch.boundary_test(q, threshold=600),
               "best": lambda: ch.select_best([q, q], epsilon=0.5)}[kind]()
        return kind, out

    with sess.target_charging(epsilon=1, max_hits=3, delta=1e-6, min_q=q_boundary(0.75)) as ch:
        answers, _ = _race(call)
        hits = sum(hit_answers[kind](out) for kind, out in answers)
        assert hits == ch.hits <= 3
        assert ch.calls == len(answers)


def test_revise_releases_a_named_value_once() -> None:
    sess = _session()
    with sess.target_charging(epsilon=1, max_hits=40, delta=1e-6) as ch:
        assert ch.conditional_release(_all(sess), when=dp.above(10**9), name="h") is None
        answers, refused = _race(lambda i: ch.revise("h", when=dp.above(0)), n=32)
        assert len(answers) == 1 and answers[0] is not None and ch.hits == 1
        assert all("no unreleased value" in str(e) for e in refused)


def test_per_unit_channel_never_charges_a_unit_past_max_hits() -> None:
    sess = _session()
    q = _all(sess)
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6, per_unit=True) as ch:
        _race(lambda i: ch.test(q, threshold=0))
        assert max(ch._unit_hits.values()) == 1 and len(ch._unit_hits) == 600


def test_one_channel_entered_by_many_threads_reserves_once() -> None:
    sess = _session()
    ch = sess.target_charging(epsilon=1, max_hits=2, delta=1e-6)
    answers, refused = _race(lambda i: ch.__enter__(), n=32)
    assert len(answers) == 1 and all(isinstance(e, dp.PlanError) for e in refused)
    assert sess.history().height == 1 and sess.spent() == ch.cost
    ch.close()


# -------------------------------------------------------------------------------- sparse vector

@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_sparse_vector_answers_above_at_most_max_positives(noise: str) -> None:
    if noise == "gaussian":
        sess = _session(dp.ApproxDP(10**6, 1e-5), accountant="rdp")
        sv = sess.sparse_vector(threshold=0, max_positives=2, budget=dp.ZCDP(1), noise="gaussian", max_length=1000)
    else:
        sess = _session(dp.PureDP(10))
        sv = sess.sparse_vector(threshold=0, max_positives=2, budget=dp.PureDP(1))
    q = _all(sess)
    answers, refused = _race(lambda i: sv.test(q))
    assert answers == [True, True] and sv.positives == 2 and len(sv.answers) == 2
    assert sv.closed and all("closed" in str(e) for e in refused)
    assert sess.history()["status"].to_list() == ["committed"]
    assert sess.spent() == sv.charged() or noise == "gaussian"     # (an RDP session reports its curve as (ε, δ))


def test_sparse_vector_close_racing_tests_charges_every_positive() -> None:
    """close() settles to the cell of the positives it counted: no "above" answer may come after that count."""
    sess = _session(dp.PureDP(10))
    q = _all(sess)
    sv = sess.sparse_vector(threshold=0, max_positives=3, budget=dp.PureDP(1), release=dp.PureDP(1))

    def call(i: int) -> Any:
        if i % 2:
            time.sleep(0.005)          # the tests are running by now
            return sv.close()
        return sv.test(q)
    _race(call, n=32)
    assert sv.closed and 0 <= sv.positives <= 3 and sorted(sv.values) == [i for i, a in enumerate(sv.answers) if a]
    assert sess.history()["status"].to_list() == ["committed"] and sess.spent() == sv.charged()


def test_one_stream_per_session_under_concurrent_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    # A refused open first runs gc.collect() (to finalize a lost stream): ~0.1 s each here, and beside the point.
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    sess = _session(dp.PureDP(100))
    answers, refused = _race(lambda i: sess.sparse_vector(threshold=5, max_positives=1, budget=dp.PureDP(1)), n=32)
    assert len(answers) == 1 and all("still open" in str(e) for e in refused)
    assert sess.history()["status"].to_list() == ["reserved"]
    answers[0].close()


# ---------------------------------------------------------------------------- individual filter

def test_individual_filter_never_lets_a_unit_pay_past_its_budget() -> None:
    sess = _session(dp.ZCDP(10))
    filt = sess.individual_filter(budget=dp.ZCDP(1))
    q = _all(sess)                                    # each unit pays ρ = 1/4 per query: 4 queries each
    answers, _ = _race(lambda i: filt.collect(q, budget=dp.ZCDP(0.25)))
    assert len(answers) == THREADS
    assert set(filt._spent.values()) == {Fraction(1)}  # exactly the budget: four queries, then left out


# ------------------------------------------------------------------------------------------- PTR

def test_robust_median_collected_from_many_threads() -> None:
    """Each collect releases its own test's median (the private codes are never shared between calls)."""
    data = pl.DataFrame({"x": [50.0 + (i % 7) for i in range(4000)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(100, 1e-3), seed=4)
    q = robust_median(sess.table("t"), "x", bounds=(0, 1000))
    answers, _ = _race(lambda i: q.collect(dp.ApproxDP(2, 1e-7)), n=16)
    assert len(answers) == 16 and all(a is not None and 45 <= a <= 61 for a in answers), answers
