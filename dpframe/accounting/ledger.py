"""The budget ledger: an append-only record of every charge, in SQLite.

Each query's cost is *reserved* (a row with status ``reserved``) inside one ``BEGIN IMMEDIATE``
transaction that first re-reads every earlier charge and asks the accountant whether the new total
fits; only then is any private row read. Afterwards the row becomes ``committed`` or ``failed``; both
still count as spent, so a crash or an error after reservation never loses a charge. Closing the ledger
(``Session.close()``) marks ``failed`` the reservations it made that are still open — a call or stream cut
short by the close —, so a closed session leaves no dangling ``reserved`` row (one that only a crash
leaves, and that forfeits every later refund on the file: :func:`~dpframe.interactive.odp.interleaved_charges`).
With a file path the ledger survives restarts and may be shared by several processes; without one it lives in memory.

Durability: the file uses SQLite's rollback journal (``journal_mode=DELETE``, ``synchronous=FULL``), not
WAL. A committed charge is therefore always in the main file, where a damaged page is detected; the
``-journal`` file only ever holds the *old* pages of a transaction that has not committed, so damaging
or deleting it can at worst lose that uncommitted reservation (made before any private row is read).
(With WAL, a commit could live only in the ``-wal`` file, and SQLite silently stops replaying it at a
damaged frame: a smaller spend.) Every read also checks that the charge ids run 1..N without a gap and
that N is the last id SQLite handed out, and opening a file runs ``PRAGMA quick_check``: a lost or
half-restored page is a :class:`~dpframe.errors.LedgerError`, never a smaller spend.

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
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpframe.accounting.accountants import Accountant
from dpframe.accounting.binding import LedgerBinding, difference
from dpframe.accounting.rdp_charge import RDPCharge
from dpframe.budgets import ZCDP, ApproxDP, PureDP, describe, make
from dpframe.errors import LedgerError

CUT = "cut short: its session was closed before it finished"
"""The error recorded for a reservation still open when its ledger was closed (it stays spent)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL NOT NULL, status TEXT NOT NULL,
    query TEXT NOT NULL, mechanisms TEXT NOT NULL, cost TEXT NOT NULL, error TEXT);
CREATE TABLE IF NOT EXISTS settlements (
    charge_id INTEGER PRIMARY KEY, created REAL NOT NULL, reserved TEXT NOT NULL, cell TEXT NOT NULL);
"""


def _create(path: Path) -> None:
    """A new ledger file (schema only) at ``path``, unless one is there already, created atomically.

    SQLite creates a database as an empty file and writes its header only later, so two processes
    opening a new shared ledger at once could see each other's empty file — which the ledger refuses
    as truncated. The file is built aside and hard-linked into place instead: another process sees no
    file or a complete one; if another process linked its own first, that one is kept. A file system
    without hard links gets SQLite's own creation (and the race).
    """
    if path.exists():
        return
    aside = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.new")
    try:
        db = sqlite3.connect(aside, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=DELETE")
            db.executescript(_SCHEMA)
        finally:
            db.close()
        os.link(aside, path)
    except FileExistsError:
        pass
    except (OSError, sqlite3.Error) as e:
        if not path.parent.is_dir():
            raise LedgerError(f"cannot create the ledger file {str(path)!r}: its directory does not exist",
                              argument="ledger", fix="create the directory first, or pass another path") from e
    finally:
        aside.unlink(missing_ok=True)


def _check(notion: str, values: list[str]) -> str:
    return hashlib.sha256(json.dumps([notion, values]).encode()).hexdigest()[:16]


def encode(b: Any) -> str:
    """Exact JSON text of a budget, with a checksum (a flipped bit in a stored cost is detected).

    An accountant's own charge type (e.g. an RDP curve) is stored through its ``to_json``.
    """
    values = [b.to_json()] if hasattr(b, "to_json") else [str(v) for k, v in vars(b).items() if k != "notion"]
    return json.dumps({"notion": b.notion, "values": values, "check": _check(b.notion, values)})


#: The notions of the charges the ledger reads itself (dp budgets, RDP charges); any other is its accountant's.
LEDGER_NOTIONS = ("pure", "approx", "zcdp", "rdp")


def decode(text: str, accountant: Accountant | None = None) -> Any:
    """Inverse of :func:`encode`; raises ValueError when the checksum does not match, or the charge cannot be read.

    A charge of another notion than :data:`LEDGER_NOTIONS` is ``accountant``'s own kind, read by its
    :meth:`~dpframe.accounting.Accountant.charge_from_json` (plugin code: whatever it raises is a ValueError here).

    Example:
        >>> decode(encode(PureDP(Fraction(1, 3))))
        PureDP(epsilon=1/3)

    """
    d = json.loads(text)
    if d.get("check") != _check(d["notion"], d["values"]):
        raise ValueError(f"checksum mismatch in the stored cost {text!r}")
    if d["notion"] == "rdp":
        return RDPCharge.from_json(d["values"][0])
    if d["notion"] not in LEDGER_NOTIONS:
        if accountant is None or len(d["values"]) != 1:
            raise ValueError(f"a stored charge of notion {d['notion']!r} is read by its accountant's "
                             "charge_from_json, from the text of its to_json()")
        try:
            return accountant.charge_from_json(d["values"][0])
        except Exception as e:
            raise ValueError(f"the {accountant.name!r} accountant could not read its charge {text[:200]!r} "
                             f"({type(e).__name__}: {e})") from e
    values = [Fraction(v) for v in d["values"]]
    return make(d["notion"], values[0], values[1] if len(values) > 1 else Fraction(0))


def _stored_exactly(charge: Any) -> bool:
    """Whether :func:`decode` of :func:`encode` of ``charge`` equals it.

    So are exact ``Fraction`` coordinates of a dp budget (stored as their exact text) and an RDP charge's floats
    (stored by ``repr``, which round-trips); a float ε (stored as its shortest decimal) is not.

    Example:
        >>> from dpframe.budgets import _raw
        >>> _stored_exactly(PureDP(Fraction(1, 3))), _stored_exactly(_raw(PureDP, epsilon=0.1))
        (True, False)

    """
    if type(charge) is RDPCharge:
        return all(type(v) is float for v in charge.values) and type(charge.delta0) is float
    return type(charge) in (PureDP, ApproxDP, ZCDP) and all(
        type(v) is Fraction for k, v in vars(charge).items() if k != "notion")


def _shown_total(text: str) -> str:
    try:
        return describe(decode(text))
    except (ValueError, KeyError, TypeError):       # json.JSONDecodeError is a ValueError
        return f"{text!r}, which is unreadable (a corrupt file?)"


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
    """Durable, atomic storage of charges for one session budget.

    ``binding`` (a session's privacy unit and tables, :mod:`dpframe.accounting.binding`) is recorded in a
    new file and checked against an existing one; ``None`` (a standalone ledger, ``dpframe budget``)
    checks only the total and the accountant.
    """

    def __init__(self, path: str | Path | None, accountant: Accountant, binding: LedgerBinding | None = None) -> None:
        self.accountant = accountant
        self.binding = binding
        self.path = str(path) if path is not None else ":memory:"
        # Re-entrant: a lost stream's finalizer (gc, any time) commits through this same lock.
        self._lock = threading.RLock()
        self._cache: tuple[int, Any] = (0, accountant.empty())
        self._settled = 0
        self._closed = False
        self._open: set[int] = set()   # reservations made here and not yet finished: close() marks them cut
        self._pid = os.getpid()
        try:
            _ = path is not None and os.fsencode(path) and Path(path).exists()   # a name no file can have: refused
        except (OSError, ValueError) as e:                  # (too long, a lone surrogate, a NUL byte)
            raise LedgerError(f"cannot use {self.path!r:.80} as a ledger path ({type(e).__name__}: "
                              f"{getattr(e, 'strerror', None) or e})", argument="ledger",
                              fix="pass a file path such as ledger='budget.ledger'") from None
        if path is not None and Path(path).is_dir():
            raise LedgerError(f"the ledger path {self.path!r} is a directory", argument="ledger",
                              fix="pass a file path, e.g. ledger='budget.ledger'")
        if path is not None:
            _create(Path(path))
        if path is not None and Path(path).exists() and Path(path).stat().st_size == 0:
            raise LedgerError(f"the ledger file {self.path!r} is empty (truncated?); refusing to start from zero",
                              argument="ledger", fix="restore it from a backup, or delete it knowingly")
        if path is not None and Path(path).exists():
            try:
                with open(path, "rb") as f:     # SQLite would take a few stray bytes for a new, empty database
                    header = f.read(16)
            except OSError as e:
                raise LedgerError(f"cannot read the ledger file {self.path!r}: {e.strerror}", argument="ledger",
                                  fix="check the path and its permissions") from e
            if header != b"SQLite format 3\x00":
                raise LedgerError(f"the ledger file {self.path!r} is not a SQLite database (truncated or "
                                  "overwritten?); refusing to start from zero", argument="ledger",
                                  fix="restore it from a backup, or delete it knowingly")
        try:
            self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA synchronous=FULL")
            if path is not None:
                self._use_rollback_journal()
                self._quick_check()
            else:
                self._db.execute("PRAGMA journal_mode=MEMORY")
            self._db.executescript(_SCHEMA)
            self._check_meta()
        except BaseException as e:
            if hasattr(self, "_db"):
                self._db.close()            # a refused file stays closed (and unlocked) for other sessions
            if isinstance(e, sqlite3.DatabaseError):
                raise LedgerError(f"cannot open the ledger {self.path!r}: {e}", argument="ledger",
                                  fix="point ledger= at the file this session wrote, or at a new path") from e
            raise

    def _use_rollback_journal(self) -> None:
        """Switch the file to the rollback journal (a ledger written by an older dpframe may be in WAL mode).

        Leaving WAL mode checkpoints the ``-wal`` file into the main file and deletes it; SQLite can do
        that only while no other connection has the file open.
        """
        try:
            mode = self._db.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        except sqlite3.OperationalError:            # "database is locked": another connection holds the WAL
            mode = "wal"
        if str(mode).lower() != "delete":
            raise LedgerError(f"the ledger {self.path!r} is in {mode} journal mode and is open elsewhere, so it "
                              "cannot be switched to the rollback journal", argument="ledger",
                              fix="close every other session (and older dpframe versions) using this file, "
                                  "then open it again")

    def _quick_check(self) -> None:
        """SQLite's structural check of the whole file (after it rolled back any crashed transaction)."""
        problems = [r[0] for r in self._rows("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise LedgerError(f"the ledger {self.path!r} is damaged: {'; '.join(problems[:3])}", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it")

    def _check_meta(self) -> None:
        """The ledger's total, accountant and (with a binding) privacy unit and tables must be the session's.

        A new file records them; an older file without a privacy unit or tables adopts the session's.
        """
        want = {"total": encode(self.accountant.total), "accountant": self.accountant.name,
                **(self.binding.meta() if self.binding is not None else {})}
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                have = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
                wrong = [k for k in want if k in have and have[k] != want[k]]
                if not wrong:
                    self._db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, v) for k, v in want.items()
                                                                           if k not in have])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        for key in wrong:
            if key in ("privacy_unit", "tables"):
                raise LedgerError(difference(key, have[key], want[key]) + ": charges spent under another privacy "
                                  "unit or on other tables add up to no single guarantee", argument="ledger",
                                  fix="open the session with the ledger's privacy unit and tables (`dpframe budget "
                                      "--ledger PATH` shows them), or use a new ledger file")
            shown = _shown_total(have[key]) if key == "total" else have.get(key)
            raise LedgerError(
                f"this ledger was written for {key} {shown}, the session has "
                f"{describe(self.accountant.total) if key == 'total' else want[key]}", argument="ledger",
                fix="open the session with the ledger's original budget and accountant, or use a new file")

    def meta(self) -> dict[str, str]:
        """What the ledger records about itself: ``total``, ``accountant``, ``privacy_unit``, ``tables``."""
        with self._lock:
            return dict(self._rows("SELECT key, value FROM meta"))

    def _spent_locked(self) -> Any:
        # Incremental: only rows added since the last read (by this or another process) are composed.
        # An ex-post settlement (by this or another process) lowers an earlier row: recompose from scratch.
        settled = self._rows("SELECT COUNT(*) FROM settlements")[0][0]
        last_id, total = self._cache if settled == self._settled else (0, self.accountant.empty())
        rows = self._rows("SELECT id, cost FROM charges WHERE id > ? ORDER BY id", (last_id,))
        self._check_ids(last_id, [r[0] for r in rows])
        if not rows:
            self._cache, self._settled = (last_id, total), settled
            return total
        try:
            total = self.accountant.compose([total, *(decode(r[1], self.accountant) for r in rows)])
            self._cache, self._settled = (rows[-1][0], total), settled
            return total
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise LedgerError(f"the ledger {self.path!r} has an unreadable charge: {e}", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it") from e

    def _check_ids(self, last_id: int, ids: list[int]) -> None:
        """Charges are never deleted and ids are AUTOINCREMENT: ids must run 1..N, N the last id handed out.

        A gap, or fewer rows than SQLite's own sequence counter says were inserted, means pages were lost
        (a damaged file or journal): refuse rather than read a smaller spend.
        """
        seq = self._rows("SELECT seq FROM sqlite_sequence WHERE name = 'charges'")
        last = ids[-1] if ids else last_id
        if ids != list(range(last_id + 1, last_id + 1 + len(ids))) or last != (seq[0][0] if seq else 0):
            raise LedgerError(f"the ledger {self.path!r} has lost charges (ids after {last_id}: "
                              f"{ids[:3]}{'...' if len(ids) > 3 else ''}; last id issued: "
                              f"{seq[0][0] if seq else None})", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it")

    def require_open(self) -> None:
        """A LedgerError in a fork's child, or once :meth:`close` ran (a closed session's stream may still try).

        Nothing reads, charges, commits or settles then.
        """
        self.check_process()
        if self._closed:
            raise LedgerError(f"the ledger {self.path!r} is closed (its session was closed)", argument="session",
                              fix="open a new session; what was reserved here stays charged")

    def check_process(self) -> None:
        """A LedgerError in any process but the one that created the ledger (a child of ``os.fork()``).

        A fork copies an in-memory ledger (and an open stream's reservation): the child and the parent
        would each spend the whole budget. So a fork's child can neither charge nor read.
        """
        if os.getpid() != self._pid:
            raise LedgerError(f"the ledger {self.path!r} was created in another process (this one is a fork of it)",
                              argument="session", fix="create the session in the process that runs its queries")

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read; a damaged file (SQLite cannot read a page or a text) is a LedgerError, never a reset."""
        self.require_open()
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as e:
            raise LedgerError(f"the ledger {self.path!r} is damaged: {e}", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it") from e

    @staticmethod
    def _check_cost(cost: Any) -> None:
        """A charge is never negative or NaN in any coordinate (it would erase earlier spending)."""
        parts = [getattr(cost, a) for a in ("epsilon", "rho", "delta", "delta0") if hasattr(cost, a)]
        curve = list(getattr(cost, "values", ()))       # an RDP curve (floats): allow rounding just below 0
        if (not parts and not curve) or any(not isinstance(v, int | float | Fraction) or not v >= 0 for v in parts) \
                or any(not isinstance(v, float) or not v >= -1e-9 for v in curve):
            shown = ", ".join(str(v) for v in [*parts, *curve][:4])  # not repr(cost): it may not print them
            raise LedgerError(f"refusing to record a {type(cost).__name__} charge with coordinates ({shown}): every "
                              "coordinate must be a number ≥ 0",
                              argument="cost", fix="this is a mechanism bug: a cost is never negative")

    def _check_readable(self, cost: Any) -> None:
        """A charge of the accountant's own kind is recorded only if its stored text reads back as itself.

        Every reservation and report re-reads every stored charge (:func:`decode`): one the accountant's
        :meth:`~dpframe.accounting.Accountant.charge_from_json` cannot read back would leave the ledger unreadable
        after its release (a LedgerError on every later read), and one that reads back as less would count less
        from the next read on. dp budgets and RDP charges are the ledger's own (:func:`_stored_exactly`).
        """
        if isinstance(cost, PureDP | ApproxDP | ZCDP | RDPCharge):
            return
        try:
            same = bool(decode(encode(cost), self.accountant) == cost)
        except Exception:
            same = False
        if not same:
            raise LedgerError(f"refusing to record a {type(cost).__name__} charge of the {self.accountant.name!r} "
                              "accountant that does not read back as itself from the ledger", argument="accountant",
                              fix="an accountant whose charges are of its own kind gives them a to_json() and equality "
                                  "and reads them back with charge_from_json(text) (see docs/plugins.md, the "
                                  "accountant hook): a bug of the plugin that registers it; report it to its authors")

    def reserve(self, cost: Any, query: str, mechanisms: str) -> int:
        """Atomically check that ``cost`` fits and record it; raise BudgetExceededError otherwise.

        A negative or NaN cost is refused with a LedgerError (nothing recorded).
        """
        self._check_cost(cost)
        with self._lock:
            self.require_open()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                spent = self._spent_locked()
                after = self.accountant.compose([spent, cost])      # (its check_charge refuses a foreign charge)
                self._check_readable(cost)
                fits = self.accountant.fits(after)
                if fits:
                    cur = self._db.execute(
                        "INSERT INTO charges (created, status, query, mechanisms, cost) VALUES (?, ?, ?, ?, ?)",
                        (time.time(), "reserved", query, mechanisms, encode(cost)))
                    self._db.execute("COMMIT")
                    assert cur.lastrowid is not None
                    charge_id: int = cur.lastrowid
                    self._open.add(charge_id)
                    self._composed(charge_id, after, cost)
                else:
                    self._db.execute("ROLLBACK")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        if not fits:     # the refusal's report (possibly a PLD) is built after the write lock is released
            raise self.accountant.exceeded(cost, spent, after)
        return charge_id

    def _composed(self, charge_id: int, after: Any, cost: Any) -> None:
        """Keep ``after``, the total with the charge ``charge_id`` just committed, as the composed state.

        The next read then starts after ``charge_id`` (its statements and checks all run: the settlements,
        the rows after it, the id counter) instead of decoding this charge and composing it again. Only where
        that is what the read would compose: the charge is the row right after the state kept (the write lock
        was held since that state was read, so no other row lies between), and its stored text reads back as
        the charge itself (:func:`_stored_exactly`: an equal charge composes to the same total); otherwise the next
        read composes the row from the file, as before.
        """
        if charge_id == self._cache[0] + 1 and _stored_exactly(cost):
            self._cache = (charge_id, after)

    def _finish(self, charge_id: int, status: str, error: str | None) -> None:
        """Close an open reservation; a charge already marked failed or committed keeps its status."""
        with self._lock:
            self.require_open()
            self._db.execute("UPDATE charges SET status = ?, error = ? WHERE id = ? AND status = 'reserved'",
                             (status, error, charge_id))
            self._open.discard(charge_id)

    def commit(self, charge_id: int) -> None:
        """Mark a reservation as released."""
        self._finish(charge_id, "committed", None)

    def fail(self, charge_id: int, error: str) -> None:
        """Mark a reservation whose run failed (it stays spent)."""
        self._finish(charge_id, "failed", error)

    def settle(self, charge_id: int, cost: Any, cell: str) -> None:
        """Ex-post (output-DP) settlement: lower a reservation to the cost of the released output's cell.

        Hartmann et al. 2022, Thm 7: a mechanism declares its cells' ε before it runs, the worst cell is
        reserved, and after the run the ε of the cell the *released* output fell in is charged. Only ε
        is refunded, never δ (refunding δ is unsound: ``docs/interactive.md``), and only under basic
        composition (the theorem is proven for additive ε only): any other accountant is refused. The
        reservation and its settlement are one SQLite transaction each; a crash in between leaves the
        full reservation spent. A negative or NaN cost is refused (the reservation stays charged in full).
        """
        self._check_cost(cost)
        with self._lock:
            self.require_open()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._rows("SELECT status, cost FROM charges WHERE id = ?", (charge_id,))
                if not row or row[0][0] != "reserved":
                    raise LedgerError(f"charge {charge_id} is not an open reservation", argument="charge_id",
                                      fix="settle a reservation once, before committing it")
                reserved = decode(row[0][1], self.accountant)
                if not self.accountant.additive:
                    raise LedgerError(f"ex-post settlement needs basic (additive) composition; this ledger's "
                                      f"accountant is {self.accountant.name!r}", argument="accountant",
                                      fix="use a pure/approx session with the basic accountant")
                if (cost.notion != reserved.notion or cost.epsilon > reserved.epsilon
                        or getattr(cost, "delta", 0) != getattr(reserved, "delta", 0)):
                    raise LedgerError(f"cannot settle {describe(reserved)} to {describe(cost)}: only ε may go "
                                      "down, δ is never refunded", argument="cost", fix="this is a mechanism bug")
                self._db.execute("UPDATE charges SET status = 'committed', cost = ? WHERE id = ?",
                                 (encode(cost), charge_id))
                self._db.execute("INSERT INTO settlements VALUES (?, ?, ?, ?)",
                                 (charge_id, time.time(), encode(reserved), cell))
                self._db.execute("COMMIT")
                self._open.discard(charge_id)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def spent(self) -> Any:
        """The composition of every charge ever reserved (a budget, or the accountant's charge type)."""
        with self._lock:
            self.require_open()
            self._db.execute("BEGIN")      # one snapshot for the charges and the id counter checked against them
            try:
                return self._spent_locked()
            finally:
                self._db.execute("COMMIT")

    def charges(self) -> list[Charge]:
        """Every row, oldest first."""
        with self._lock:
            rows = self._rows("SELECT id, created, status, query, mechanisms, cost, error FROM charges ORDER BY id")
        try:
            return [Charge(r[0], r[1], r[2], r[3], r[4], decode(r[5], self.accountant), r[6]) for r in rows]
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            raise LedgerError(f"the ledger {self.path!r} has an unreadable charge: {e}", argument="ledger",
                              fix="restore the ledger file from a backup; dpframe never resets it") from e

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (every later call is a LedgerError)."""
        return self._closed

    def close(self) -> None:
        """Mark this ledger's open reservations failed (:data:`CUT`) and close; every later call is a LedgerError.

        A call (or stream) holding a reservation when its session closes is cut short: it can neither read nor
        record any more, and its charge stays spent. Only this ledger's own reservations are marked (another
        session's open stream on the same file is not), and not in a fork's child (:meth:`check_process`).

        Example:
            >>> import os, tempfile
            >>> from dpframe.accounting import BasicAccountant
            >>> from dpframe.budgets import PureDP
            >>> path = os.path.join(tempfile.mkdtemp(), "budget.ledger")
            >>> led = Ledger(path, BasicAccountant(PureDP(1)))
            >>> cid = led.reserve(PureDP(0.25), "count", "laplace")    # a call still running ...
            >>> led.close()                                             # ... when its session closes
            >>> [(c.status, c.error) for c in Ledger(path, BasicAccountant(PureDP(1))).charges()]
            [('failed', 'cut short: its session was closed before it finished')]

        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._open and os.getpid() == self._pid:
                    ids = sorted(self._open)
                    self._db.execute(f"UPDATE charges SET status = 'failed', error = ? WHERE status = 'reserved' "
                                     f"AND id IN ({', '.join('?' * len(ids))})", (CUT, *ids))
                    self._open.clear()
            except sqlite3.DatabaseError as e:
                raise LedgerError(f"the ledger {self.path!r} is damaged: {e}", argument="ledger",
                                  fix="restore the ledger file from a backup; dpframe never resets it") from e
            finally:
                self._db.close()
