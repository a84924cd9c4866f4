"""``dp.Server(pad=...)``: a release's reply leaves at a whole period after its request, whatever its work took."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.remote.server import reply_time

KEY = secrets.token_bytes(32)
SMALL = pl.DataFrame({"u": list(range(20)), "g": ["a", "b"] * 10, "x": [1.0] * 20})
LARGE = pl.DataFrame({"u": list(range(300_000)), "g": ["a", "b", "c"] * 100_000, "x": [2.0] * 300_000})
QUERY = "SELECT g, COUNT(*) AS n, SUM(CLAMP(x, 0, 5)) AS s FROM t GROUP BY g"


def served(data: pl.DataFrame, pad: float | None) -> dp.Server:
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(100))
    return dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, pad=pad).start()


def timed(remote: dp.Remote, ask: str) -> float:
    start = time.monotonic()
    if ask == "collect":
        remote.sql(QUERY, keys={"g": ["a", "b", "c"]}).collect(dp.PureDP(1))
    elif ask == "refused":
        with pytest.raises(dp.BudgetExceededError):
            remote.sql(QUERY, keys={"g": ["a", "b", "c"]}).collect(dp.PureDP(1000))
    else:
        remote.remaining()
    return time.monotonic() - start


def test_reply_time_doubles_past_the_pad() -> None:
    assert [reply_time(t, 0.5) for t in (0.0, 0.2, 0.5, 0.51, 1.0, 1.7, 9.0)] == [0.5, 0.5, 0.5, 1.0, 1.0, 2.0, 16.0]


def test_a_small_and_a_large_table_answer_at_the_same_time(padded_holds: Any) -> None:
    """Releases and refusals are answered one period after the request; a request that reads no row is not held.

    What the analyst sees is at least ``pad``; what the server scheduled (``padded_holds``, load-proof) is one hold
    per release or refusal, at the first period from the request's arrival that its work did not overrun
    (``pad`` here, unless the machine is slow enough to overrun it: then a doubling, never the work's time), and no
    hold for a request that reads no row, nor on a server without ``pad``."""
    pad = 1.5
    took: dict[tuple[str, str], float] = {}
    for name, data in (("small", SMALL), ("large", LARGE)):
        with served(data, pad) as server, dp.connect(server.address, authkey=KEY) as remote:
            for ask in ("collect", "refused"):
                took[name, ask] = timed(remote, ask)
            held = len(padded_holds)
            timed(remote, "remaining")                                  # reads no row: not held
            assert len(padded_holds) == held
    for name in ("small", "large"):
        for ask in ("collect", "refused"):
            assert took[name, ask] >= pad, took
    assert len(padded_holds) == 4 and all(hold.period() is not None for hold in padded_holds), padded_holds
    with served(SMALL, None) as fast, dp.connect(fast.address, authkey=KEY) as remote:
        timed(remote, "collect")
    assert len(padded_holds) == 4


def test_an_overrun_waits_for_the_next_doubling_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    pad = 0.001            # far below what a 300,000-row release takes: it overruns
    with served(LARGE, pad) as server, dp.connect(server.address, authkey=KEY) as remote, \
            caplog.at_level(logging.WARNING, logger="dpframe.remote"):
        timed(remote, "collect")
    assert any("more than pad=0.001" in r.getMessage() for r in caplog.records), caplog.records


def test_closing_the_server_does_not_wait_for_a_held_reply() -> None:
    server = served(SMALL, 60.0)
    remote = dp.connect(server.address, authkey=KEY)
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            timed(remote, "collect")
        except BaseException as e:     # the reply never comes: the connection closes
            failed.append(e)

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(1.0)
    start = time.monotonic()
    server.close()
    asking.join(10)
    assert time.monotonic() - start < 10 and not asking.is_alive()
    assert failed and isinstance(failed[0], dp.RemoteError)
    remote.close()


@pytest.mark.parametrize("bad", [0, -1.0, True, "1", float("inf"), float("nan"), 10**6])
def test_bad_pad_is_refused(bad: object) -> None:
    sess = dp.Session({"t": SMALL}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    with pytest.raises(dp.ArgumentError, match="pad"):
        dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, pad=bad)  # type: ignore[arg-type]
