"""A reservation held open across several interactive calls (sparse vector, target-charging channels).

The cost is reserved in the ledger when the stream opens (atomically, before any private row is
read). Every call runs inside :meth:`Reservation.run`. A failure there — any ``BaseException``: a
Rust panic (pyo3's ``PanicException`` is not an ``Exception``) as much as an engine error — marks the
charge failed and closes the stream *charged in full*: a failure may depend on the data, so after one
there is no further call and no refund, ever. The caller sees a :class:`DPFrameError` naming the
failure's type only (``KeyboardInterrupt`` and ``SystemExit`` are re-raised after marking, as new exceptions of
their type: :func:`dpframe.release.bare_interrupt`). Closing commits the reservation, or — output DP, basic
composition only — settles it to the cell the released answers fell in. A crash before closing leaves the
whole reservation spent. One interactive stream may be open per session at a time (nesting is refused).

Threads: the analyst may call one stream from many threads at once. Every stateful interactive object
holds a lock (:func:`_atomic`) across each call's check, private run and record, so a limit checked
before a run (``max_hits``, ``max_positives``, a unit's budget) still holds after it; the reservation
itself (:meth:`Reservation.run`, commit, settle) and the one-open-stream-per-session registry are
locked too.

A stream object that becomes unreachable without being closed is committed in full (no refund) by a
``weakref.finalize``, so a lost handle never locks the session. Refunds need the stream to have run
alone: :meth:`Reservation.interleaved` compares every other ledger row (status included) with a
snapshot taken *before* the reservation, so a charge that was reserved earlier and released while
the stream was open (another thread, or another process on the same ledger) forfeits the refund, and
so does another reservation still open (a channel of another session on the same ledger file).
"""

from __future__ import annotations

import functools
import gc
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from dpframe.errors import DPFrameError, PlanError
from dpframe.interactive.odp import interleaved_charges

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.session import Session

T = TypeVar("T")
P = ParamSpec("P")


class _Locked(Protocol):
    """An object whose calls :func:`_atomic` serialises."""

    _lock: threading.RLock


L = TypeVar("L", bound=_Locked)


def _atomic(method: Callable[Concatenate[L, P], T]) -> Callable[Concatenate[L, P], T]:
    """Run ``method`` holding ``self._lock``: its check, private run and record are one step for other threads.

    Example:
        >>> import threading
        >>> class Counter:
        ...     def __init__(self) -> None:
        ...         self._lock, self.n = threading.RLock(), 0
        ...     @_atomic
        ...     def bump(self) -> int:
        ...         self.n += 1
        ...         return self.n
        >>> Counter().bump()
        1

    """
    def locked(self: L, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with self._lock:
            return method(self, *args, **kwargs)
    functools.update_wrapper(locked, method)      # name, docstring and signature of the method
    return locked


_REGISTRY = threading.RLock()
"""Held across "is another stream open?", the reservation and the registration of the new stream."""


class Reservation:
    """One open interactive stream's ledger charge."""

    closed: bool
    failed: bool
    what: str

    def __init__(self, session: Session, cost: SessionCost, what: str, mechanisms: str, owner: object) -> None:
        self.lock = threading.RLock()
        session.privacy_unit.require_numbers(what)
        with _REGISTRY:
            other = _open(session)
            if other is not None:
                gc.collect()                  # a lost, unreachable stream in a reference cycle: finalize it now
                other = _open(session)
            if other is not None:
                raise StreamBusy(f"{other.what} is still open; interactive streams cannot be nested or interleaved",
                                 argument="session", fix="close it first (leave its `with` block or call .close())")
            self.session = session
            self.cost = cost
            self.what = what
            self.closed = False
            self.failed = False
            before = {(c.id, c.status) for c in session._release.charges()}
            # its queries come later, so every table's file is checked now (each read then checks its own)
            self.id = session._release.reserve(cost, what, mechanisms)
            self._before = before
            _OPEN[session] = weakref.ref(self)
        lost = weakref.finalize(owner, self._lost)   # unreachable and unclosed: keep it fully charged
        lost.atexit = False                           # at exit the row stays reserved: still fully charged

    def _lost(self) -> None:
        # No lock: the owner is unreachable, so no call of it can be running (and gc may run this anywhere).
        if self.closed:
            return
        self.closed = True
        try:
            self.session._release.commit(self.id)
        except Exception:   # noqa: BLE001 — e.g. the ledger was closed: the row stays reserved (fully charged)
            pass

    def check_open(self) -> None:
        """Raise (nothing charged) if the stream is closed, or its session (a LedgerError: it reads nothing)."""
        self.session._release.check_readable()
        if self.closed:
            why = " after a call failed while running (it stays charged in full)" if self.failed else ""
            raise DPFrameError(f"{self.what} is closed{why}", argument="stream",
                               fix="open a new one (sess.sparse_vector / sess.target_charging)")

    def run(self, fn: Callable[[], T]) -> T:
        """Run one private call under the reservation; any failure closes the stream, charged in full.

        ``fn`` receives no values: it is the mechanism's own private computation (library code).
        """
        with self.lock:
            self.check_open()
            try:
                return self.session._release.guarded(self.id, fn)
            except DPFrameError:            # the session's guard marked the charge failed
                self._fail(None)
                raise
            except (KeyboardInterrupt, SystemExit) as e:
                self._fail(type(e).__name__)
                raise
            except BaseException as e:      # noqa: BLE001 — a panic that passed the guard: reported by type only
                failure = type(e).__name__
            # Raised outside the except block: the failure (whose message may quote private values) is
            # neither chained nor kept as __context__.
            self._fail(failure)
            raise DPFrameError(f"the query failed while running ({failure}); the stream is closed and stays "
                               "charged in full", argument="query",
                               fix="check column types and expressions against Frame.schema")

    def _fail(self, failure: str | None) -> None:
        """Close for good after a failure: the row is failed (fully charged); no commit, no settlement."""
        self.closed = self.failed = True
        if failure is not None:
            self.session._release.fail(self.id, failure)

    def interleaved(self) -> bool:
        """Whether the stream did not run alone (:func:`~dpframe.interactive.odp.interleaved_charges`).

        Another ledger row appeared or changed status since just before it opened, or another is still open.
        """
        return any(c.id != self.id for c in interleaved_charges(self.session._release.charges(), self._before))

    def commit(self) -> None:
        """Close, keeping the whole reservation charged."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.session._release.commit(self.id)

    def settle(self, cost: SessionCost, cell: str) -> None:
        """Close, charging ``cost`` (the realised output cell; basic composition only, δ unchanged).

        Never after a failure: the stream is closed then, and its row stays failed, charged in full.
        """
        with self.lock:
            if not self.closed:
                self.closed = True
                self.session._release.settle(self.id, cost, cell)


class StreamBusy(PlanError):
    """The refusal to open a stream while the session's one stream is open: its text names the open one.

    In process that is the caller's own stream; a server answers another client with a refusal of its own that
    names nothing of the stream (:meth:`dpframe.remote.tools.Tools.open`).
    """


_OPEN: weakref.WeakKeyDictionary[Any, weakref.ref[Reservation]] = weakref.WeakKeyDictionary()


def _open(session: Session) -> Reservation | None:
    """The session's open stream, if any (a collected or closed one does not count)."""
    with _REGISTRY:
        ref = _OPEN.get(session)
    res = ref() if ref is not None else None
    return res if res is not None and not res.closed else None
