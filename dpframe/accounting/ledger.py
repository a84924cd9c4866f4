"""The budget ledger: an append-only record of every charge, in SQLite.

Each query's cost is *reserved* (a row with status ``reserved``) inside one ``BEGIN IMMEDIATE``
transaction that first re-reads every earlier charge and asks the accountant whether the new total
fits; only then is any private row read. Afterwards the row becomes ``committed`` or ``failed``; both
still count as spent, so a crash or an error after reservation never loses a charge. With a file path
the ledger survives restarts and may be shared by several processes; without one it lives in memory.

Example:
    >>> from dpframe.accounting import BasicAccountant
    >>> from dpframe.budgets import PureDP
    >>> led = Ledger(None, BasicAccountant(PureDP(1)))
    >>> cid = led.reserve(PureDP(0.25), "count", "laplace")
    >>> led.commit(cid); led.spent()
    PureDP(epsilon=1/4)

"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpframe.accounting.accountants import Accountant
from dpframe.budgets import describe, make
from dpframe.errors import BudgetExceededError, LedgerError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, status TEXT NOT NULL,
    query TEXT NOT NULL, mechanisms TEXT NOT NULL, cost TEXT NOT NULL, error TEXT);
"""


def _check(notion: str, values: list[str]) -> str:
    return hashlib.sha256(json.dumps([notion, values]).encode()).hexdigest()[:16]


def encode(b: Any) -> str:
    """Exact JSON text of a budget, with a checksum (a flipped bit in a stored cost is detected).

    An accountant's own charge type (e.g. an RDP curve) is stored through its ``to_json``.
    """
    values = [b.to_json()] if hasattr(b, "to_json") else [str(v) for k, v in vars(b).items() if k != "notion"]
    return json.dumps({"notion": b.notion, "values": values, "check": _check(b.notion, values)})


def decode(text: str) -> Any:
    """Inverse of :func:`encode`; raises ValueError when the checksum does not match."""
    d = json.loads(text)
    if d.get("check") != _check(d["notion"], d["values"]):
        raise ValueError(f"checksum mismatch in the stored cost {text!r}")
    if d["notion"] == "rdp":
        from dpframe.accounting.rdp import RDPCharge

        return RDPCharge.from_json(d["values"][0])
    values = [Fraction(v) for v in d["values"]]
    return make(d["notion"], values[0], values[1] if len(values) > 1 else Fraction(0))


@dataclass(frozen=True)
class Charge:
    """One ledger row."""

    id: int
    created: float
    status: str
    query: str
    mechanisms: str
    cost: Any
    error: str | None


class Ledger:
    """Durable, atomic storage of charges for one session budget."""

    def __init__(self, path: str | Path | None, accountant: Accountant) -> None:
        self.accountant = accountant
        self.path = str(path) if path is not None else ":memory:"
        self._lock = threading.Lock()
        self._cache: tuple[int, Any] = (0, accountant.empty())
        if path is not None and Path(path).exists() and Path(path).stat().st_size == 0:
            raise LedgerError(f"the ledger file {self.path!r} is empty (truncated?); refusing to start from zero",
                              argument="ledger", fix="restore it from a backup, or delete it knowingly")
        if path is not None and Path(path).exists():
            with open(path, "rb") as f:     # SQLite would take a few stray bytes for a new, empty database
                if f.read(16) != b"SQLite format 3\x00":
                    raise LedgerError(f"the ledger file {self.path!r} is not a SQLite database (truncated or "
                                      "overwritten?); refusing to start from zero", argument="ledger",
                                      fix="restore it from a backup, or delete it knowingly")
        try:
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL" if path is not None else "PRAGMA journal_mode=MEMORY")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._check_meta()
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"cannot open the ledger {self.path!r}: {e}", argument="ledger",
                              fix="point ledger= at the file this session wrote, or at a new path") from e

    def _check_meta(self) -> None:
        want = {"total": encode(self.accountant.total), "accountant": self.accountant.name}
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                have = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
                if not have:
                    self._db.executemany("INSERT INTO meta VALUES (?, ?)", list(want.items()))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        for key, value in want.items():
            if have and have.get(key) != value:
                shown = describe(decode(have[key])) if key == "total" else have.get(key)
                raise LedgerError(
                    f"this ledger was written for {key} {shown}, the session has "
                    f"{describe(self.accountant.total) if key == 'total' else value}", argument="ledger",
                    fix="open the session with the ledger's original budget and accountant, or use a new file")

    def _spent_locked(self) -> Any:
        # Incremental: only rows added since the last read (by this or another process) are composed.
        last_id, total = self._cache
        rows = self._rows("SELECT id, cost FROM charges WHERE id > ? ORDER BY id", (last_id,))
        if not rows:
            return total
        try:
            total = self.accountant.compose([total, *(decode(r[1]) for r in rows)])
            self._cache = (rows[-1][0], total)
            return total
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise LedgerError(f"the ledger {self.path!r} has an unreadable charge: {e}", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it") from e

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read; a damaged file (SQLite cannot read a page or a text) is a LedgerError, never a reset."""
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"the ledger {self.path!r} is damaged: {e}", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it") from e

    def reserve(self, cost: Any, query: str, mechanisms: str) -> int:
        """Atomically check that ``cost`` fits and record it; raise BudgetExceededError otherwise."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                spent = self._spent_locked()
                after = self.accountant.compose([spent, cost])
                if not self.accountant.fits(after):
                    raise BudgetExceededError(self.accountant.describe_charge(cost),
                                              describe(self.accountant.remaining(spent)),
                                              self.accountant.shortfall(after))
                cur = self._db.execute(
                    "INSERT INTO charges (created, status, query, mechanisms, cost) VALUES (?, ?, ?, ?, ?)",
                    (time.time(), "reserved", query, mechanisms, encode(cost)))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            assert cur.lastrowid is not None
            return cur.lastrowid

    def _finish(self, charge_id: int, status: str, error: str | None) -> None:
        with self._lock:
            self._db.execute("UPDATE charges SET status = ?, error = ? WHERE id = ?", (status, error, charge_id))

    def commit(self, charge_id: int) -> None:
        """Mark a reservation as released."""
        self._finish(charge_id, "committed", None)

    def fail(self, charge_id: int, error: str) -> None:
        """Mark a reservation whose run failed (it stays spent)."""
        self._finish(charge_id, "failed", error)

    def spent(self) -> Any:
        """The composition of every charge ever reserved (a budget, or the accountant's charge type)."""
        with self._lock:
            return self._spent_locked()

    def charges(self) -> list[Charge]:
        """Every row, oldest first."""
        with self._lock:
            rows = self._rows("SELECT id, created, status, query, mechanisms, cost, error FROM charges ORDER BY id")
        try:
            return [Charge(r[0], r[1], r[2], r[3], r[4], decode(r[5]), r[6]) for r in rows]
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise LedgerError(f"the ledger {self.path!r} has an unreadable charge: {e}", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it") from e

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()
