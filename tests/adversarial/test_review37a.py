"""Review 37a: calls cut short by ``Session.close()``, ungrouped queries under ``max_rows=N, max_groups="auto"``,
and tuned-unit paths on unit columns that are not Int64.

Scope: the ledger's record of a reservation whose session is closed — from another thread, or from a callable
the analyst passes — before the call finishes (queries, SQL, ``run_until``, gated release, the robust median,
sparse vectors and target-charging channels open or mid-call; ``dpframe.accounting.ledger``); every query entry
point under ``dp.PrivacyUnit(..., max_rows=N, max_groups="auto")`` with a query that has no group-by
(``dpframe.tuning.stage``, ``dpframe.privacy_unit``, the interactive mechanisms); and the tuned paths
(``max_rows="auto"``, ``max_groups="auto"``, ``bounds="auto"``) on float, string, 128-bit and UInt64 unit columns
on neighbouring datasets (``tests/adversarial/composed.py``). Each test is an attack that broke, kept with its
fix: it fails if the defence regresses. Races are made deterministic with events, not timing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.accounting import Ledger
from dpframe.interactive.ptr import gated_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.release import PrivateReader

# ---------------------------------------------------------------------------- 1. calls cut short by close()

_CUT = "cut short: its session was closed before it finished"


def _data() -> pl.DataFrame:
    return pl.DataFrame({"u": range(200), "x": [float(i % 50) for i in range(200)], "g": [i % 3 for i in range(200)]})


def _file_session(path: Path, unit: dp.PrivacyUnit | None = None) -> dp.Session:
    return dp.Session({"t": _data()}, privacy_unit=unit or dp.PrivacyUnit("u", max_rows=2),
                      budget=dp.ApproxDP(100, 1e-3), ledger=str(path), seed=0)


def _rows(sess: dp.Session, path: Path) -> list[tuple[str, str | None]]:
    """(status, error) of every charge, read from the file by a fresh ledger (the closed session reads nothing)."""
    ledger = Ledger(path, sess.accountant)
    try:
        return [(c.status, c.error) for c in ledger.charges()]
    finally:
        ledger.close()


@contextmanager
def _paused_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Every private read waits at ``go`` after setting ``inside``: a call can be held inside its reservation."""
    inside, go = threading.Event(), threading.Event()
    run = PrivateReader.run

    def paused(self: PrivateReader, request: Any) -> Any:
        inside.set()
        assert go.wait(10), "the test never let the read go on"
        return run(self, request)
    monkeypatch.setattr(PrivateReader, "run", paused)
    yield inside, go


_IN_FLIGHT: dict[str, Callable[[dp.Session], Any]] = {
    "collect": lambda s: s.table("t").agg(dp.len()).collect(dp.PureDP(1)),
    "sql": lambda s: s.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1)),
    "top_k": lambda s: s.table("t").group_by("g", keys=[0, 1, 2]).top_k(k=1, method="gumbel").collect(dp.PureDP(1)),
    "run_until": lambda s: run_until([s.table("t").agg(dp.len())] * 2, dp.PureDP(1), stop=lambda r: False),
    "gated_release": lambda s: gated_release(s.table("t").agg(dp.len()), dp.PureDP(1), s.table("t").agg(dp.len()),
                                             0, dp.PureDP(1)),
    "robust_median": lambda s: robust_median(s.table("t"), "x", (0, 100)).collect(dp.ApproxDP(1, 1e-6)),
    "sparse_vector": lambda s: s.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1)).test(
        s.table("t").agg(dp.len())),
    "target_charging": lambda s: s.target_charging(epsilon=1, max_hits=1, delta=1e-6).__enter__().test(
        s.table("t").agg(dp.len()), threshold=10**6),
}


@pytest.mark.parametrize("call", sorted(_IN_FLIGHT))
def test_a_call_cut_short_by_close_is_recorded_failed_not_left_reserved(
        call: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call holds its reservation while it reads; the analyst closes the session from another thread then. The
    call fails (a LedgerError: the closed session reads and records nothing) and its charge stays spent — but the
    ledger row stayed ``reserved`` for good: ``history()`` of every later session on the file showed a dangling
    reservation, and (worse) every refund on that file was forfeited from then on, since an open reservation is
    read as another stream running beside the refund's run. ``close()`` now marks the reservations its session
    still holds ``failed`` ("cut short ..."), before it closes the file."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    outcome: list[BaseException | None] = []

    def analyst() -> None:
        try:
            _IN_FLIGHT[call](sess)
            outcome.append(None)
        except BaseException as e:   # noqa: BLE001 — the analyst catches everything
            outcome.append(e)
    with _paused_reads(monkeypatch) as (inside, go):
        worker = threading.Thread(target=analyst)
        worker.start()
        assert inside.wait(10)
        sess.close()
        go.set()
        worker.join(10)
    assert isinstance(outcome[0], dp.LedgerError) and "closed" in str(outcome[0])
    assert _rows(sess, path) == [("failed", _CUT)]
    again = _file_session(path)
    assert again.history()["status"].to_list() == ["failed"] and again.spent().epsilon > 0


def test_a_stream_left_open_when_its_session_closes_is_recorded_failed(tmp_path: Path) -> None:
    """A sparse vector and a target-charging channel hold one reservation across their calls. Closed with the
    session while open, their row stayed ``reserved``; now it is ``failed`` (cut short), charged in full: its
    answers were released under it, and no refund is made after the session is gone."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    q = sess.table("t").agg(dp.len())
    sv = sess.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1))
    assert sv.test(q) is False
    sess.close()
    with pytest.raises(dp.LedgerError, match="closed"):
        sv.test(q)
    with pytest.raises(dp.LedgerError, match="closed"):
        sv.close()
    assert _rows(sess, path) == [("failed", _CUT)]
    assert _file_session(path).spent() == dp.ApproxDP(1, 0)


def test_a_callable_that_closes_the_session_cuts_its_own_call_short(tmp_path: Path) -> None:
    """``run_until``'s ``stop`` runs inside the run's reservation; the analyst's rule closes the session. The run
    fails with a LedgerError — whatever the released values were (the rule saw them only) — and its row is
    ``failed``, the worst cell charged."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    steps = [sess.table("t").agg(dp.len())] * 3

    def stop(results: list[pl.DataFrame]) -> bool:
        sess.close()
        return len(results) > 1
    with pytest.raises(dp.LedgerError, match="closed"):
        run_until(steps, dp.PureDP(1), stop=stop)
    assert _rows(sess, path) == [("failed", _CUT)]
    assert _file_session(path).spent() == dp.ApproxDP(3, 0)


def test_a_call_cut_short_no_longer_forfeits_later_refunds_on_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dangling ``reserved`` row a cut call left was read by every later ex-post run on the ledger file as
    another open stream: a gated release whose gate said ⊥ was charged its query too, in every later session.
    Now the cut row is ``failed``, and a later ⊥ is charged its gate alone."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    with _paused_reads(monkeypatch) as (inside, go):
        worker = threading.Thread(target=lambda: pytest.raises(dp.LedgerError, _IN_FLIGHT["collect"], sess))
        worker.start()
        assert inside.wait(10)
        sess.close()
        go.set()
        worker.join(10)
    later = _file_session(path)
    t = later.table("t")
    assert gated_release(t.agg(dp.len()), dp.PureDP(2), t.agg(dp.len()), 10**6, dp.PureDP(Fraction(1, 4))) is None
    assert later.spent() == dp.ApproxDP(Fraction(5, 4), 0)        # the cut query's 1 and the gate's 1/4


def test_a_finished_call_keeps_its_status_when_the_session_closes(tmp_path: Path) -> None:
    """Only reservations still open are cut: committed, settled and failed rows keep their status, and another
    session's open stream on the same file is not this session's to cut."""
    path = tmp_path / "budget.ledger"
    sess, other = _file_session(path), _file_session(path)
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    sv = other.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1))
    sess.close()
    assert [s for s, _ in _rows(sess, path)] == ["committed", "reserved"]
    sv.close()
    assert other.history()["status"].to_list() == ["committed", "committed"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_closing_the_session_cuts_nothing_of_its_parent(tmp_path: Path) -> None:
    """``close()`` now writes (it marks open reservations cut); a fork's child holds a copy of the parent's ledger
    and its open stream. The child's close must not mark the parent's stream failed (the child may neither
    charge nor write), so the parent's stream still closes normally."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    sv = sess.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1))
    pid = os.fork()
    if pid == 0:                                    # the child: close the copied session, then exit at once
        try:
            sess.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert _rows(sess, path) == [("reserved", None)]
    sv.close()
    assert sess.history()["status"].to_list() == ["committed"]
