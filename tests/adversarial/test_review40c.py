"""Review 40c: the rest of review 40's class — process-wide settings, changed through public APIs, that turn the
engine's work on private rows into something the analyst reads outside any ε.

Scope: Polars settings that change how a query runs between the time it is built (the totality probe) and the
time it is collected (the engine affinity, in-memory or streaming); Python's process state (the recursion limit,
``warnings`` filters, the ``decimal`` context, the integer-to-text digit limit, the time zone, the locale); the
loggers and progress output of the backends' libraries; and settings another thread flips during a query. Each
test is an attack that broke, kept with its fix, or a check that found the engine sound.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType

import polars as pl

import dpframe as dp


def _depth() -> int:
    """The number of Python frames on this thread's stack, this function's caller included."""
    frame: FrameType | None = sys._getframe(1)
    n = 0
    while frame is not None:
        n += 1
        frame = frame.f_back
    return n


def _under_limit(headroom: int, call: Callable[[], object]) -> str:
    """``call()`` with the recursion limit ``headroom`` frames above the caller's stack: its outcome."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_depth() + headroom)
    try:
        call()
        return "released"
    except dp.DPFrameError as e:
        return f"{type(e).__name__}: {e}"
    except RecursionError:
        return "RecursionError"
    finally:
        sys.setrecursionlimit(limit)


def test_a_recursion_limit_just_above_the_callers_stack_is_refused_before_the_charge() -> None:
    """``sys.setrecursionlimit(depth + 26)`` let a count over one row run and failed it, charged, over two rows:
    the engine's stack while it reads depends on the data (one row skips the thread pool that ranks the units'
    rows), and the limit is the analyst's. A limit that leaves less room than a release may need is now refused,
    free, on every dataset."""
    outcomes = []
    for rows in (1, 2):
        sess = dp.Session({"t": pl.DataFrame({"u": list(range(rows))})}, privacy_unit=dp.PrivacyUnit("u"),
                          budget=dp.PureDP(10))
        query = sess.table("t").agg(dp.len())
        query.collect(dp.PureDP(1))                           # imports and caches warmed: only the read differs
        seen = [_under_limit(headroom, lambda: query.collect(dp.PureDP(1))) for headroom in range(24, 64, 4)]
        outcomes.append((seen, sess.history()["status"].to_list()))
    assert outcomes[0] == outcomes[1], outcomes
    assert all("sys.setrecursionlimit" in seen and "nothing was charged" in seen for seen in outcomes[0][0])
    assert outcomes[0][1] == ["committed"]


def test_a_read_of_a_charged_stream_checks_the_recursion_limit_alike_on_every_dataset() -> None:
    """An interactive stream is charged once and reads later, at another depth: each read checks the limit."""
    outcomes = []
    for rows in (1, 2):
        sess = dp.Session({"t": pl.DataFrame({"u": list(range(rows))})}, privacy_unit=dp.PrivacyUnit("u"),
                          budget=dp.PureDP(10))
        sv = sess.sparse_vector(5, 1, dp.PureDP(1))
        query = sess.table("t").agg(dp.len())
        outcome = _under_limit(30, lambda: sv.test(query))
        outcomes.append((outcome, sess.history()["status"].to_list()))
    assert outcomes[0] == outcomes[1], outcomes
    assert "sys.setrecursionlimit" in outcomes[0][0]


def test_the_ordinary_recursion_limit_is_enough() -> None:
    """Python's default limit (1000) from a test's stack runs every kind of release (no refusal by default)."""
    assert sys.getrecursionlimit() >= 1000
    sess = dp.Session({"t": pl.DataFrame({"u": list(range(30)), "x": [1.0] * 30})}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.PureDP(10))
    sess.table("t").agg(dp.len(), dp.median("x", bounds=(0, 2))).collect(dp.PureDP(1))


def test_inside_the_engine_the_headroom_is_counted_from_its_entry() -> None:
    """The check before each private read ran at the read's own depth, which a data-dependent path deepens (a
    second read of the same rows when a quantile's sampled windows missed a rank): a limit leaving 500-odd frames
    at the entry passed the first read and refused the second, charged, on some data only. Counted from the
    outermost public method's caller, the answer is the same at any depth inside."""
    from dpframe.engine_output import HEADROOM, check_headroom, under_numpy_defaults

    class Engine:
        def read_at(self, extra: int) -> None:
            if extra:
                return self.read_at(extra - 1)
            return check_headroom()

    under_numpy_defaults(Engine)
    frame: FrameType | None = sys._getframe()
    depth = 0
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + HEADROOM + 10)
    try:
        for extra in (0, 40):    # both deeper than the entry; the second by more than its spare 10 frames
            Engine().read_at(extra)
    finally:
        sys.setrecursionlimit(limit)
