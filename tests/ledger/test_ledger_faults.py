"""The budget ledger under faults: killed processes, torn and corrupt files, concurrent processes and threads.

* A process SIGKILLed at any point between reserve and commit leaves a ledger that, reopened, counts
  the reservation as spent (and a kill inside the reserve transaction, before any private row is read,
  leaves no half-written charge and no lock behind).
* Killed at random moments in a loop of queries, the ledger never counts less than the results released.
* A truncated file, or a flipped bit in a stored cost, is refused with a LedgerError — never read as a
  smaller spend or reset to zero; a bit flipped anywhere else either is refused or changes nothing.
* Two processes sharing one ledger, and N threads with their own sessions on one ledger file, never
  together exceed the budget (in ε, in δ, and across notions for a zCDP accountant).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

import dpframe as dp
from dpframe.accounting import BasicAccountant, Ledger

CHILD = Path(__file__).with_name("ledger_child.py")
DATA = pl.DataFrame({"u": [1, 2, 3, 4], "g": ["a", "a", "b", "b"], "x": [1.0, 2.0, 3.0, 4.0]})
TOTAL = dp.ApproxDP(2, 1e-5)


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _reopen(path: Path) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=TOTAL, ledger=path)


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


# ------------------------------------------------------------------------------- killed processes

POINTS = {  # point -> (ε counted after the kill, status of the second charge)
    "in_reserve": (Fraction(1, 4), None),
    "after_reserve": (Fraction(3, 4), "reserved"),
    "in_run": (Fraction(3, 4), "reserved"),
    "before_commit": (Fraction(3, 4), "reserved"),
    "after_commit": (Fraction(3, 4), "committed"),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_sigkill_between_reserve_and_commit_keeps_the_charge(tmp_path: Path, point: str) -> None:
    path = tmp_path / "budget.ledger"
    proc = _child(str(path), "pause", point)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "PAUSED", (line, proc.stderr.read() if proc.stderr else "")
    _kill(proc)
    spent, status = POINTS[point]
    sess = _reopen(path)
    assert sess.spent() == dp.ApproxDP(spent, 0), (point, sess.spent())
    assert sess.history()["status"].to_list() == ["committed"] + ([status] if status else [])
    # The dead process left no lock: the ledger takes a new charge at once, and refuses an overdraft.
    started = time.monotonic()
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    assert time.monotonic() - started < 10
    with pytest.raises(dp.BudgetExceededError):
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    assert sess.spent() == dp.ApproxDP(spent + 1, 0)


# Small enough that no machine exhausts the budget (2) within the rounds: 2**14 queries.
LOOP_SHARE = Fraction(1, 2**14)


def _kill_loop_at_random(path: Path, delay: float) -> int:
    proc = _child(str(path), "loop", str(LOOP_SHARE.denominator))
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "released"      # the loop is running
    time.sleep(delay)
    _kill(proc)
    return 1 + proc.stdout.read().count("released")


def _random_kills(tmp_path: Path, rounds: int) -> None:
    rng = random.Random(8)
    path = tmp_path / "budget.ledger"
    released = 0
    for _ in range(rounds):
        released += _kill_loop_at_random(path, rng.uniform(0, 0.3))
        spent = _reopen(path).spent()
        # Every released result is counted; at most one reservation per kill is counted without a result.
        assert released * LOOP_SHARE <= spent.epsilon, (released, spent)
        history = _reopen(path).history()
        assert history.filter(pl.col("status") == "committed").height >= released
        assert spent.epsilon == history.height * LOOP_SHARE


def test_random_sigkills_never_lose_a_released_charge(tmp_path: Path) -> None:
    _random_kills(tmp_path, rounds=3)


@pytest.mark.slow
def test_many_random_sigkills_never_lose_a_released_charge(tmp_path: Path) -> None:
    _random_kills(tmp_path, rounds=25)


# -------------------------------------------------------------------------------- corrupt files


def _ledger_file(tmp_path: Path, charges: int = 200) -> tuple[Path, bytes]:
    path = tmp_path / "budget.ledger"
    led = Ledger(path, BasicAccountant(dp.PureDP(1000)))
    for i in range(charges):
        led.commit(led.reserve(dp.PureDP(Fraction(1, 4)), f"query {i} " + "q" * 100, "aggregates"))
    led._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")      # everything in the main file
    led.close()
    return path, path.read_bytes()


def _open_spent(path: Path) -> dp.Budget:
    led = Ledger(path, BasicAccountant(dp.PureDP(1000)))
    try:
        led.charges()
        return led.spent()
    finally:
        led.close()


def test_truncated_ledger_file_is_refused(tmp_path: Path) -> None:
    path, data = _ledger_file(tmp_path)
    page = 4096
    cuts = sorted({1, 99, 100, page - 1, page, page + 17, *range(2 * page, len(data), 3 * page), len(data) - 1})
    for cut in cuts:
        path.write_bytes(data[:cut])
        with pytest.raises(dp.LedgerError):
            _open_spent(path)
        assert path.read_bytes() == data[:cut], "a refused ledger must not be rewritten"


def test_flipped_bit_in_a_stored_cost_is_refused(tmp_path: Path) -> None:
    path, data = _ledger_file(tmp_path, charges=20)
    costs = [i for i in range(len(data)) if data.startswith(b'{"notion"', i)]
    assert len(costs) == 21                                  # 20 charges and the session total (meta)
    rng = random.Random(3)
    for start in costs[::3]:
        end = data.index(b"}", start)
        for _ in range(4):
            flipped = bytearray(data)
            flipped[rng.randrange(start, end)] ^= 1 << rng.randrange(7)   # stay ASCII: still valid UTF-8
            path.write_bytes(bytes(flipped))
            with pytest.raises(dp.LedgerError):
                _open_spent(path)


def test_a_flipped_bit_anywhere_is_refused_or_harmless(tmp_path: Path) -> None:
    path, data = _ledger_file(tmp_path)
    rng = random.Random(5)
    outcomes = {"refused": 0, "harmless": 0}
    for _ in range(60):
        flipped = bytearray(data)
        flipped[rng.randrange(100, len(data))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(flipped))
        try:
            spent = _open_spent(path)
        except dp.LedgerError:
            outcomes["refused"] += 1
        else:
            assert spent == dp.PureDP(50), f"a corrupt ledger was read as {spent!r} instead of refused"
            outcomes["harmless"] += 1
    print(outcomes)


def test_sqlite_errors_on_a_damaged_page_are_ledger_errors(tmp_path: Path) -> None:
    """A damaged page that SQLite detects while reading is a LedgerError (was a bare sqlite3 error)."""
    path, data = _ledger_file(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE charges SET query = CAST(x'ff' AS TEXT) WHERE id = 3")   # undecodable text
    with pytest.raises(dp.LedgerError, match="damaged"):
        _reopen_history(path)


def _reopen_history(path: Path) -> None:
    Ledger(path, BasicAccountant(dp.PureDP(1000))).charges()


# ------------------------------------------------------------------------------------ concurrency


def test_two_processes_racing_on_one_ledger_never_exceed_the_budget(tmp_path: Path) -> None:
    path, barrier = tmp_path / "shared.ledger", tmp_path / "go"
    _reopen(path).close()                                  # create it (meta row) before the race
    procs = [_child(str(path), "race", "12", str(barrier)) for _ in range(2)]
    time.sleep(0.5)
    barrier.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    admitted = sum(int(out.strip()) for out, _ in outs)
    # 24 attempts of (1/8, 10⁻⁶) against (2, 10⁻⁵): δ admits exactly 10.
    assert admitted == 10, outs
    spent = _reopen(path).spent()
    assert spent == dp.ApproxDP(Fraction(10, 8), Fraction(1, 10**5))


def test_threads_with_their_own_sessions_on_one_ledger_never_exceed_a_zcdp_budget(tmp_path: Path) -> None:
    path = tmp_path / "zcdp.ledger"
    total = dp.ZCDP(1)
    sessions = [dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=total, ledger=path)
                for _ in range(4)]
    # Each query costs ρ = 1/8: ZCDP(1/8), PureDP(1/2) (ρ = ε²/2) and SQL; exactly 8 fit.
    queries = [lambda s: s.table("t").agg(dp.len()).collect(dp.ZCDP(Fraction(1, 8))),
               lambda s: s.table("t").agg(dp.sum("x", bounds=(0, 5))).collect(dp.PureDP(Fraction(1, 2))),
               lambda s: s.sql("SELECT COUNT(*) AS n FROM t").collect(dp.ZCDP(Fraction(1, 8)))]
    admitted, errors = [0] * 8, []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        barrier.wait()
        for j in range(4):
            try:
                queries[(i + j) % 3](sessions[i % 4])
                admitted[i] += 1
            except dp.BudgetExceededError:
                pass
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sum(admitted) == 8
    for s in sessions:
        assert s.spent() == total
    assert sessions[0].history().height == 8
