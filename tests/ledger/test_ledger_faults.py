"""The budget ledger under faults: killed processes, torn and corrupt files, concurrent processes and threads.

* A process SIGKILLed at any point between reserve and commit leaves a ledger that, reopened, counts
  the reservation as spent (and a kill inside the reserve transaction, before any private row is read,
  leaves no half-written charge and no lock behind).
* Killed at random moments in a loop of queries, the ledger never counts less than the results released.
* A truncated file, or a flipped bit in a stored cost, is refused with a LedgerError — never read as a
  smaller spend or reset to zero; a bit flipped anywhere else either is refused or changes nothing.
* The rollback journal left by a process killed inside a transaction (a *hot* journal, after SQLite
  spilled pages to the main file) may be deleted, truncated or bit-flipped: the ledger is refused or reads
  the full committed spend, never less. (The ledger used WAL mode before; a damaged ``-wal`` file was
  silently read as a smaller spend.) A ledger an older version left in WAL mode is converted on open.
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


def _killed_in_a_spilled_transaction(tmp_path: Path, charges: int) -> tuple[Path, bytes, Path, bytes]:
    """A ledger whose writer was SIGKILLed inside a transaction, with a hot journal: (file, bytes, journal, bytes)."""
    path = tmp_path / "budget.ledger"
    proc = _child(str(path), "spill", str(charges))
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "PAUSED", (line, proc.stderr.read() if proc.stderr else "")
    _kill(proc)
    journal = tmp_path / "budget.ledger-journal"
    data, jdata = path.read_bytes(), journal.read_bytes()
    assert jdata[:8] == bytes.fromhex("d9d505f920a163d7"), "the journal is not hot: the test lost its point"
    assert len(data) > 50 * 4096, "SQLite did not spill the uncommitted transaction into the main file"
    return path, data, journal, jdata


def _damaged_journals(jdata: bytes) -> dict[str, bytes | None]:
    rng = random.Random(11)
    out: dict[str, bytes | None] = {"intact": jdata, "deleted": None, "emptied": b"",
                                    "header zeroed": bytes(28) + jdata[28:], "garbage": rng.randbytes(len(jdata))}
    for cut in sorted({1, 27, 28, 512, 516, 4096, len(jdata) // 2, len(jdata) - 1}):
        out[f"cut at {cut}"] = jdata[:cut]
    for _ in range(30):
        flipped = bytearray(jdata)
        at = rng.randrange(len(jdata))
        flipped[at] ^= 1 << rng.randrange(8)
        out[f"bit flipped at {at}"] = bytes(flipped)
    return out


def test_a_damaged_journal_after_a_kill_is_refused_or_reads_the_full_spend(tmp_path: Path) -> None:
    path, data, journal, jdata = _killed_in_a_spilled_transaction(tmp_path, charges=40)
    outcomes: dict[str, list[str]] = {"refused": [], "full": []}
    for name, damaged in _damaged_journals(jdata).items():
        path.write_bytes(data)
        journal.unlink(missing_ok=True)
        if damaged is not None:
            journal.write_bytes(damaged)
        try:
            spent = _open_spent(path)
        except dp.LedgerError:
            outcomes["refused"].append(name)
            continue
        # 40 committed charges of 1/4; the killed reservation (1/2) had not committed (no private row read).
        assert spent == dp.PureDP(10), f"journal {name}: the ledger read {spent!r}, not the committed ε = 10"
        outcomes["full"].append(name)
    print(outcomes)
    assert "intact" in outcomes["full"]


def test_a_killed_reservation_leaves_no_journal_that_matters(tmp_path: Path) -> None:
    """Killed inside the reserve transaction (nothing spilled): any damage to the journal changes nothing."""
    path = tmp_path / "budget.ledger"
    proc = _child(str(path), "pause", "in_reserve")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "PAUSED"
    _kill(proc)
    journal = tmp_path / "budget.ledger-journal"
    data, jdata = path.read_bytes(), journal.read_bytes() if journal.exists() else b""
    for name, damaged in _damaged_journals(jdata).items():
        path.write_bytes(data)
        journal.unlink(missing_ok=True)
        if damaged is not None:
            journal.write_bytes(damaged)
        assert _reopen(path).spent() == dp.ApproxDP(Fraction(1, 4), 0), name


def test_no_charge_is_left_only_in_a_side_file(tmp_path: Path) -> None:
    """After a commit the charge is in the main file: a copy of the main file alone reads the full spend."""
    path = tmp_path / "budget.ledger"
    proc = _child(str(path), "pause", "after_commit")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "PAUSED"
    _kill(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budget.ledger"]     # no -wal, no -journal
    copy = tmp_path / "copy" / "budget.ledger"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    assert _reopen(copy).spent() == dp.ApproxDP(Fraction(3, 4), 0)


def test_a_ledger_left_in_wal_mode_is_converted_on_open(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    proc = _child(str(path), "legacy_wal", "12")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "PAUSED"
    _kill(proc)
    assert (tmp_path / "budget.ledger-wal").stat().st_size > 0          # the charges are only there
    led = Ledger(path, BasicAccountant(dp.PureDP(1000)))
    assert led._db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert led.spent() == dp.PureDP(3)
    led.close()
    assert not (tmp_path / "budget.ledger-wal").exists()
    assert _open_spent(path) == dp.PureDP(3)


def test_a_ledger_open_in_wal_mode_elsewhere_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "budget.ledger"
    Ledger(path, BasicAccountant(dp.PureDP(1000))).close()
    other = sqlite3.connect(path)
    try:
        assert other.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        other.execute("SELECT COUNT(*) FROM charges").fetchall()
        with pytest.raises(dp.LedgerError, match="journal mode"):
            Ledger(path, BasicAccountant(dp.PureDP(1000)))
    finally:
        other.close()
    assert _open_spent(path) == BasicAccountant(dp.PureDP(1000)).empty()


def test_lost_charge_rows_are_refused(tmp_path: Path) -> None:
    """Rows missing from the middle or the end (ids not 1..N, or N below SQLite's id counter) are refused."""
    path, data = _ledger_file(tmp_path, charges=20)
    for where in ("id = 7", "id = 20"):
        path.write_bytes(data)
        with sqlite3.connect(path) as db:
            db.execute(f"DELETE FROM charges WHERE {where}")
        with pytest.raises(dp.LedgerError, match="lost charges"):
            _open_spent(path)


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


def test_sessions_creating_one_new_ledger_at_once_all_open_it(tmp_path: Path) -> None:
    """SQLite creates a database as an empty file first: a racing opener saw it and refused it as truncated."""
    for attempt in range(10):
        path, barrier, errors = tmp_path / f"new{attempt}.ledger", threading.Barrier(6), []

        def open_it(path: Path = path, barrier: threading.Barrier = barrier, errors: list = errors) -> None:
            barrier.wait()
            try:
                dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=TOTAL, ledger=path).close()
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no file left aside


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
