"""Review 46 (lead): the composed D/D′ oracles through the remote boundary.

The method-chain and SQL oracles (``test_composed_oracle.py``, ``test_sql_composed_oracle.py``) compare what an
analyst in the session's process sees on D and on D′. A remote analyst sends the same chains and SQL through
``dp.connect`` to a ``dp.Server`` (its chains recorded by :class:`dp.RemoteFrame` and replayed on the server's
session): here each drawn query runs on a served D and a served D′, and must show the same kind of outcome on
both (released with the same columns and types, or the same error class and text, the same ledger statuses),
and the outcome the same query has in process — except what the client itself cannot send (a Python callable,
an ending the server does not serve), refused in the analyst's process before anything is sent.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import polars as pl
from hypothesis import HealthCheck, event, given, settings

import dpframe as dp

from .composed import DP_ERRORS, MEMORY, Chain, Outcome, chains, extreme_rows
from .sql_composed import SQLQuery, queries
from .test_composed_oracle import SESSIONS, _shape, same
from .test_sql_composed_oracle import POST_FAILED, _same
from .test_sql_composed_oracle import SESSIONS as SQL_SESSIONS
from .test_sql_composed_oracle import run as run_sql

KEY = secrets.token_bytes(32)
BUDGET = dp.ApproxDP(1, 1e-6)
REMOTE = settings(max_examples=12, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
#: Refused in the analyst's process before anything is sent: what a remote chain cannot carry (a callable, an
#: ending the server does not serve, an expression JSON cannot hold); compared between D and D′ only.
CLIENT_SIDE = ("cannot send a", "cannot send this frame", "does not cross as JSON")


@contextmanager
def served(sess: dp.Session) -> Iterator[dp.Remote]:
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        yield remote


def observe(run: Callable[[Any], Any], sess: dp.Session, via: Callable[[dp.Session], Any]) -> Outcome:
    """What the analyst sees of ``run(handle)``, ``handle`` being ``via(sess)``: the release's shape or the error,
    and the statuses the query added to the ledger (warnings stay in the server's process, except TOP_K's)."""
    before = sess.history().height
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = run(via(sess))
            seen: tuple[Any, ...] = ("released", *_shape(result.frame if isinstance(result, tuple) else result))
        except dp.DPFrameError as e:       # a SQL post-processing failure: the release happened (see the SQL oracle)
            seen = ("released", None) if POST_FAILED in str(e) else (type(e).__name__, str(e))
        except BaseException as e:  # noqa: BLE001 - the analyst catches everything
            seen = (type(e).__name__, str(e))
    return seen, (), tuple(sess.history()["status"].to_list()[before:])


def remote_outcome(run: Callable[[Any], Any]) -> Callable[[dp.Session, Any], Outcome]:
    def outcome(sess: dp.Session, query: Any) -> Outcome:
        with served(sess) as remote:
            return observe(lambda handle: run(handle), sess, lambda _: remote)
    return outcome


def _renamed(remote: tuple[Any, ...], here: tuple[Any, ...]) -> bool:
    """The same refusal of a row-level expression, named by the call's argument (``group_by``, ``measures``).

    The server checks an expression's tree against the row-level allowlist before Polars reads it (reading it
    first could run the sender's code), where only the call's argument name is known; in process the same rule
    refuses it later under the key's or measure's output name. Known, documented (docs/remote.md); the class and
    the rest of the text must agree.
    """
    return (remote[0] == here[0] == "PlanError" and remote[1] != here[1] and "uses '" in remote[1]
            and remote[1].split(": ", 1)[1] == here[1].split(": ", 1)[1])


def _client_side(seen: tuple[Any, ...]) -> bool:
    return seen[0] != "released" and any(text in seen[1] for text in CLIENT_SIDE)


def compare(on_d: Outcome | None, here: Outcome, query: object,
            alike: Callable[[Outcome, Outcome], bool] = same) -> str:
    if on_d is None:
        return "D′ refused by the session"
    seen, _, statuses = on_d
    assert seen[0] == "released" or statuses == (), f"refused remotely but charged: {query}: {on_d}"
    assert seen[0] in DP_ERRORS | {"released", "RemoteError"}, f"not a dpframe error: {query}: {on_d}"
    if _client_side(seen):
        return "refused by the client"
    if _renamed(seen, here[0]):
        return "refused before unpacking, under the call's argument name"
    assert alike(on_d, here), f"remote and in-process outcomes differ: {query}\n  remote : {on_d}\n  process: {here}"
    return seen[0]


def check(query: Any, unit: Any, extra: pl.DataFrame, run: Callable[[Any], Any], sessions: Any,
          alike: Callable[[Outcome, Outcome], bool]) -> str:
    """``run(handle)`` on a served D and D′ (the same outcome), then against the same query in process on D."""
    on_d = sessions.compare(query, unit, extra, "polars", MEMORY, 1, remote_outcome(run), alike)
    if on_d is None:
        return "D′ refused by the session"
    return compare(on_d, observe(run, sessions.d("polars", unit), lambda s: s), query, alike)


@REMOTE
@given(chain=chains(), extra=extreme_rows())
def test_a_chain_sent_to_a_server_behaves_alike_on_neighbours_and_as_in_process(chain: Chain,
                                                                                 extra: pl.DataFrame) -> None:
    event(check(chain, (chain.unit, chain.account), extra, lambda handle: chain.collect(handle, BUDGET), SESSIONS,
                same))


@REMOTE
@given(query=queries(), extra=extreme_rows())
def test_sql_sent_to_a_server_behaves_alike_on_neighbours_and_as_in_process(query: SQLQuery,
                                                                             extra: pl.DataFrame) -> None:
    event(check(query, (query.unit, query.account), extra, lambda handle: run_sql(handle, query), SQL_SESSIONS,
                _same))
