"""Review 43c: the analyst as an adversary against stop 43's changes (the diff 2f6178d..main).

Scope:

* ``dpframe.backends._bounding.sort``: Polars' sort (a read-only result) or numpy's, whichever is faster here.
  Every caller (contribution bounding, ``polars_lists._sorted_by_id``, ``polars_windows``' packed and ungrouped
  sorts) must release the same values with either engine, from the first key on.
* ``dpframe.mechanism.deferred``: a plan's deferred containers read from two threads at once.
* ``dpframe.sql.parse``: the per-text cached kinds must never let a text skip a refusal that the full walk of its
  tree makes (TOP_K, window functions, subqueries, however spelled or placed).
* ``dpframe.accounting.ledger``: the kept composed total, with two sessions on one file, settlements and failures.
* ``RobustMedian.explain(budget, format=)``: free, and refused free without a budget or with a bad format.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

import pytest

from dpframe.mechanism.deferred import DeferredMapping, DeferredTuple


# --------------------------------------------------------------------------- deferred containers, two threads
def _stop_between_reads(container: Any, other_done: threading.Event, paused: threading.Event) -> Any:
    """Read ``container`` on this thread, paused right after its first look at the built value.

    The pause lasts until ``other_done``: another thread's read builds the value meanwhile (the check-then-act
    window of a lazy build).
    """
    items = type(container)._items.__code__

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is not items:
            return None

        def line(frame: FrameType, event: str, arg: object) -> Any:
            if (
                event == "line"
                and "built" in frame.f_locals
                and frame.f_locals["built"] is None
                and not paused.is_set()
            ):
                paused.set()
                other_done.wait(10)
            return line

        return line

    sys.settrace(trace)
    try:
        return list(container)
    finally:
        sys.settrace(None)


@pytest.mark.parametrize("kind", [DeferredMapping, DeferredTuple])
def test_a_deferred_read_on_two_threads_at_once_answers_both(kind: type) -> None:
    # Two threads read one plan's accuracy texts (explain() on one, a curve accountant on another): the second
    # looked at the built value before the first finished building it, then found its build handed on.
    container = kind(lambda: {"len": "±3 (95%)"} if kind is DeferredMapping else ("curve",))
    other_done, paused = threading.Event(), threading.Event()
    got: list[Any] = []
    failed: list[BaseException] = []

    def slow() -> None:
        try:
            got.append(_stop_between_reads(container, other_done, paused))
        except BaseException as e:  # noqa: BLE001 - the failure is what the test reports
            failed.append(e)

    worker = threading.Thread(target=slow)
    worker.start()
    assert paused.wait(10)
    first = list(container)  # builds it, while the worker waits between its two looks
    other_done.set()
    worker.join(10)
    assert not failed, failed
    assert got == [first]
