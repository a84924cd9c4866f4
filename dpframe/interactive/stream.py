"""A reservation held open across several interactive calls (sparse vector, target-charging channels).

The cost is reserved in the ledger when the stream opens (atomically, before any private row is
read). Every call runs inside :meth:`Reservation.run` (a failure marks the charge failed: it stays
spent and the stream closes). Closing commits the reservation, or — output DP, basic composition
only — settles it to the cell the released answers fell in. A crash before closing leaves the whole
reservation spent. One interactive stream may be open per session at a time (nesting is refused).

A stream object that becomes unreachable without being closed is committed in full (no refund) by a
``weakref.finalize``, so a lost handle never locks the session. Refunds need the stream to have run
alone: :meth:`Reservation.interleaved` compares every other ledger row (status included) with a
snapshot taken *before* the reservation, so a charge that was reserved earlier and released while
the stream was open (another thread, or another process on the same ledger) forfeits the refund.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from dpframe.budgets import Budget
from dpframe.errors import DPFrameError, PlanError

if TYPE_CHECKING:
    from dpframe.session import Session

T = TypeVar("T")
class Reservation:
    """One open interactive stream's ledger charge."""

    closed: bool
    what: str

    def __init__(self, session: Session, cost: Budget, what: str, mechanisms: str, owner: object) -> None:
        other = _open(session)
        if other is not None:
            gc.collect()                  # a lost, unreachable stream in a reference cycle: finalize it now
            other = _open(session)
        if other is not None:
            raise PlanError(f"{other.what} is still open; interactive streams cannot be nested or interleaved",
                            argument="session", fix="close it first (leave its `with` block or call .close())")
        self.session = session
        self.cost = cost
        self.what = what
        self.closed = False
        before = {(c.id, c.status) for c in session._ledger.charges()}
        self.id = session._ledger.reserve(cost, what, mechanisms)
        self._before = before
        _OPEN[session] = weakref.ref(self)
        lost = weakref.finalize(owner, self._lost)   # unreachable and unclosed: keep it fully charged
        lost.atexit = False                           # at exit the row stays reserved: still fully charged

    def _lost(self) -> None:
        try:
            self.commit()
        except Exception:   # noqa: BLE001 — e.g. the ledger was closed: the row stays reserved (fully charged)
            self.closed = True

    def check_open(self) -> None:
        """Raise (nothing charged) if the stream is closed."""
        if self.closed:
            raise DPFrameError(f"{self.what} is closed", argument="stream",
                               fix="open a new one (sess.sparse_vector / sess.target_charging)")

    def run(self, fn: Callable[[], T]) -> T:
        """Run one private call under the reservation (a failure closes the stream, fully charged)."""
        self.check_open()
        try:
            return self.session._guarded(self.id, fn)
        except DPFrameError:
            self.closed = True
            raise

    def interleaved(self) -> bool:
        """Whether any other ledger row appeared or changed status since just before the stream opened."""
        return any(c.id != self.id and (c.id, c.status) not in self._before for c in self.session._ledger.charges())

    def commit(self) -> None:
        """Close, keeping the whole reservation charged."""
        if not self.closed:
            self.closed = True
            self.session._ledger.commit(self.id)

    def settle(self, cost: Budget, cell: str) -> None:
        """Close, charging ``cost`` (the realised output cell; basic composition only, δ unchanged)."""
        if not self.closed:
            self.closed = True
            self.session._ledger.settle(self.id, cost, cell)


_OPEN: weakref.WeakKeyDictionary[Any, weakref.ref[Reservation]] = weakref.WeakKeyDictionary()


def _open(session: Session) -> Reservation | None:
    """The session's open stream, if any (a collected or closed one does not count)."""
    ref = _OPEN.get(session)
    res = ref() if ref is not None else None
    return res if res is not None and not res.closed else None
