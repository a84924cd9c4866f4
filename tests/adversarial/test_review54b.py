"""Review 54b: stop 53's non-accounting changes attacked, and the remote server's stream leftovers.

* A remote client's ``open`` of a sparse vector or channel while another user of the session held its one stream
  was refused with the holder's parameters (``sparse_vector(T=480, c=2) is still open``) and a fix the caller
  cannot follow ("close it first"): it now says that another user holds the session's stream, and how it gets
  free, naming nothing of it. (The session's ``history()``, which every client of one server reads, lists the
  reservation all the same: clients of one server share one session; analysts who must not see each other's
  queries get sessions of their own, ``docs/remote.md``.)
* The data owner's own stream (opened in process on the served session) is not closed by ``stream_idle``: the
  server sees none of the owner's calls, so it cannot tell that stream idle, and closing it would fail the owner's
  program mid-use. A client's open is refused while it is open, saying so; documented.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import polars as pl
import pytest

import dpframe as dp

KEY = secrets.token_bytes(32)
VISITS = pl.DataFrame({"visitor": [i % 700 for i in range(6000)], "store": [i % 12 for i in range(6000)]})


def _visits(budget: dp.Budget = dp.PureDP(10)) -> dp.Session:
    return dp.Session({"visits": VISITS}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=10), budget=budget, seed=0)


def _store(source: Any, store: int) -> Any:
    return source.table("visits").filter(pl.col("store") == store).agg(dp.len())


def _refused_open(sess: dp.Session, remote: Any, *secrets_shown: str) -> dp.PlanError:
    """``remote``'s sparse vector refused, free, its message and fix naming none of ``secrets_shown``."""
    before = sess.history().height
    with pytest.raises(dp.PlanError, match="still open") as info:
        remote.sparse_vector(threshold=123, max_positives=1, budget=dp.PureDP(1))
    text = f"{info.value} {info.value.fix}"
    assert "another" in str(info.value) and info.value.argument == "session", text
    for secret in secrets_shown:
        assert secret not in text, text
    assert sess.history().height == before
    return info.value


@pytest.mark.parametrize("tool", ["sparse_vector", "target_charging"])
def test_a_refused_remote_open_names_nothing_of_another_clients_stream(tool: str) -> None:
    """The attack: analyst B opens while analyst A holds the stream; the refusal quoted A's threshold and count
    (or ε, τ, δ) and told B to close a stream B cannot reach."""
    sess = _visits(dp.ApproxDP(50, 1e-5))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=None).start() as server, \
            dp.connect(server.address, authkey=KEY) as holder, dp.connect(server.address, authkey=KEY) as other:
        if tool == "sparse_vector":
            held = holder.sparse_vector(threshold=4817, max_positives=7, budget=dp.PureDP(1))
            shown = ("4817", "T=", "c=7")
        else:
            held = holder.target_charging(epsilon=0.3125, max_hits=29, delta=3e-7)
            shown = ("5/16", "0.3125", "τ=29", "3e-07", "target_charging(")
        error = _refused_open(sess, other, *shown)
        assert "stream_idle" in error.fix
        with pytest.raises(dp.PlanError, match="still open") as own:     # the holder's own second open names its own
            holder.sparse_vector(threshold=1, max_positives=1, budget=dp.PureDP(1))
        assert shown[0] in str(own.value) and "another" not in str(own.value)
        held.close()
        with other.sparse_vector(threshold=123, max_positives=1, budget=dp.PureDP(1)) as sv:
            assert sv.test(_store(other, 0)) in (True, False)


def test_the_data_owners_stream_is_not_released_and_its_refusal_names_nothing() -> None:
    """The owner's in-process stream: the server sees none of its calls (it cannot tell it idle) and does not close
    it under the owner's code; a client's open is refused meanwhile, naming nothing of it."""
    sess = _visits()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=0.1).start() as server, \
            dp.connect(server.address, authkey=KEY) as other:
        with sess.sparse_vector(threshold=5903, max_positives=3, budget=dp.PureDP(1)) as mine:
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:          # idle well past stream_idle
                time.sleep(0.05)
            _refused_open(sess, other, "5903", "T=", "c=3")
            assert not mine.closed and mine.test(_store(sess, 0)) in (True, False)
        with other.sparse_vector(threshold=123, max_positives=1, budget=dp.PureDP(1)) as sv:
            assert sv.test(_store(other, 1)) in (True, False)
    assert sess.history()["status"].to_list() == ["committed", "committed"]


def test_in_process_the_refusal_still_names_the_open_stream() -> None:
    """One process, one user: nesting is refused naming the stream that is open (its own), as before."""
    sess = _visits()
    with sess.sparse_vector(threshold=4817, max_positives=7, budget=dp.PureDP(1)), \
            pytest.raises(dp.PlanError, match=r"sparse_vector\(T=4817, c=7\) is still open"):
        sess.sparse_vector(threshold=1, max_positives=1, budget=dp.PureDP(1))
