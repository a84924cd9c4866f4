"""Review 45a: a remote session's options (``ci``, ``diagnostics``, ``accuracy``), multi-frame replies, the
forwarded TOP_K warning and the tagged channel, against an analyst who speaks the wire protocol by hand.

* An option's value crosses as the analyst sent it: the session's own checks refuse what they refuse in
  process (``ci=False``, ``diagnostics=None``), uncharged, and nothing stands for "left out" but the
  value the client sends for it. ``explain``'s ``format`` is checked by the session's own check too.
* Refusals of options (and of their combinations) come before the charge and say the same on neighbouring
  datasets; a reply carries the released frames and nothing else.
* A tagged frame is bound to its connection: the analyst's own request replayed on another of its
  connections is not served, and a reply-shaped request is only an unknown request.
* Keys as in process: ``keys={}`` is no keys, ``keys={"g": "ab"}`` is refused (not the keys "a", "b").
* A request is 64 MiB in all (docs/remote.md), not 64 MiB for each of its 17 frames.
"""

from __future__ import annotations

import json
import secrets
import socket
import warnings
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.remote import wire
from dpframe.remote.values import Packer

KEY = secrets.token_bytes(32)
COUNT = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"
SUM = "SELECT SUM(CLAMP(x, 0, 10)) AS s FROM t"
ONE = {"type": "PureDP", "epsilon": "1"}


def session(seed: int = 0, rows: int = 50) -> dp.Session:
    data = pl.DataFrame({"g": ["a", "b"] * (rows // 2), "x": [float(i % 7) for i in range(rows)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(3, 1e-5), seed=seed)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Server]]:
    sess = session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        yield sess, server


def _outcome(call: Any) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call()
    except dp.DPFrameError as e:
        return type(e).__name__, str(e)
    return "released"


def _described(query: dp.RemoteQuery) -> tuple[dict[str, Any], list[bytes]]:
    """A remote query's request description and the Arrow streams sent with it."""
    packer = Packer()
    return query.packed(packer), packer.attached


@pytest.mark.parametrize("sql", [COUNT, SUM])
@pytest.mark.parametrize("options", [{"ci": False}, {"diagnostics": None}, {"ci": False, "diagnostics": None}])
def test_an_option_the_session_refuses_in_process_is_refused_remotely_free(sql: str, options: dict[str, Any]) -> None:
    """JSON ``false`` for ``ci`` and ``null`` for ``diagnostics`` are values, not "left out": in process
    both are refused before the charge, so remotely too (they were dropped, and the query charged)."""
    keys = {"g": ["a", "b"]} if "GROUP" in sql else None
    local = session()
    here = _outcome(lambda: local.sql(sql, keys=keys).collect(dp.PureDP(1), **options))
    assert here[0] == "PlanError" and local.history().height == 0
    sess = session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        source, attached = _described(remote.sql(sql, keys=keys))
        there = _outcome(lambda: remote._request({"op": "collect", **source, "budget": ONE, **options}, attached))
        assert there == here
        assert remote.remaining() == dp.ApproxDP(3, 1e-5)
    assert sess.history().height == 0


@pytest.mark.parametrize("sql", [SUM, "EXPLAIN SELECT COUNT(*) AS n FROM t",
                                 "SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(*), NULL, method := 'stable')"])
@pytest.mark.parametrize("form", ["xml", 3, None, ["text"]])
def test_an_explain_format_is_refused_as_in_process(served: tuple[dp.Session, dp.Server], sql: str,
                                                    form: object) -> None:
    """The server's own check of ``format`` raised an ArgumentError with its own text; in process it is a
    PlanError (``check_format``): the same class and text remotely."""
    sess, server = served
    here = _outcome(lambda: session().sql(sql).explain(dp.ApproxDP(1, 1e-6), format=form))  # type: ignore[arg-type]
    assert here[0] == "PlanError"
    with dp.connect(server.address, authkey=KEY) as remote:
        there = _outcome(lambda: remote._request({"op": "explain", "sql": sql, "format": form,
                                                  "budget": {"type": "ApproxDP", "epsilon": "1",
                                                             "delta": "1/1000000"}}))
    assert there == here
    assert sess.history().height == 0


REFUSED: list[dict[str, Any]] = [
    {"op": "collect", "sql": COUNT, "budget": ONE, "ci": 1.5},
    {"op": "collect", "sql": COUNT, "budget": ONE, "ci": True},
    {"op": "collect", "sql": COUNT, "budget": ONE, "ci": "0.9"},
    {"op": "collect", "sql": COUNT, "budget": ONE, "diagnostics": 1},
    {"op": "collect", "sql": COUNT, "budget": ONE, "ci": 0.9, "diagnostics": "yes"},
    {"op": "collect", "sql": COUNT, "budget": None, "diagnostics": True,
     "accuracy": {"half_width": 5, "confidence": 0.9, "notion": None}},
    {"op": "collect", "sql": COUNT, "budget": ONE, "accuracy": {"half_width": 5, "confidence": 0.9, "notion": None}},
    {"op": "collect", "sql": COUNT, "budget": None,                       # more than the remaining budget
     "accuracy": {"half_width": 0.01, "confidence": 0.999, "notion": None}},
    {"op": "collect", "sql": COUNT, "budget": None, "accuracy": {"half_width": {"nope": 1}, "confidence": 0.9,
                                                                 "notion": None}},
    {"op": "collect", "sql": "SELECT AVG(CLAMP(x, 0, 10)) AS m FROM t", "budget": None,
     "accuracy": {"half_width": 1, "confidence": 0.9, "notion": None}},
    {"op": "collect", "sql": "SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(*), 1)", "budget": ONE, "ci": 0.9},
    {"op": "cost", "sql": COUNT, "budget": None, "diagnostics": True,
     "accuracy": {"half_width": 5, "confidence": 0.9, "notion": None}},
]


def _reply(remote: dp.Remote, request: dict[str, Any]) -> dict[str, Any]:
    """The server's JSON reply to ``request`` exactly as sent (the keys ride along for a GROUP BY)."""
    keys = [wire.frame_bytes(pl.DataFrame([pl.Series("g", [pl.Series(["a", "b"])])]))] if "GROUP BY g" in \
        str(request.get("sql")) and "TOP_K" not in str(request.get("sql")) else []
    channel = remote._channel
    channel.send_json({**request, "keys": bool(keys), "attached": len(keys)})
    for data in keys:
        channel.send(data)
    reply = channel.receive_json(wire.REPLY_LIMIT)
    for _ in range(reply.get("frames", 0)):
        channel.receive(wire.REPLY_LIMIT)
    return reply


def test_option_refusals_are_free_and_the_same_on_neighbouring_data() -> None:
    """Each refused combination is answered before anything is charged, with the same reply whether or not
    one more row is in the table (its text and fields: nothing read from the data)."""
    replies = []
    for rows in (50, 52):
        sess = session(rows=rows)
        with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
                dp.connect(server.address, authkey=KEY) as remote:
            got = [_reply(remote, request) for request in REFUSED]
            assert remote.remaining() == dp.ApproxDP(3, 1e-5)
        assert sess.history().height == 0
        assert all(r["ok"] is False for r in got), [r for r in got if r["ok"]]
        replies.append(got)
    assert replies[0] == replies[1]


@pytest.mark.parametrize(("sql", "options", "frames"), [
    (COUNT, {}, 1), (COUNT, {"ci": 0.9}, 1), (SUM, {"diagnostics": True}, 2),
    (SUM, {"ci": 0.9, "diagnostics": True}, 2), ("EXPLAIN SELECT COUNT(*) AS n FROM t", {"diagnostics": True}, 1),
])
def test_a_reply_carries_the_released_frames_and_nothing_else(sql: str, options: dict[str, Any],
                                                               frames: int) -> None:
    """The JSON of a release says only that it succeeded and how many frames follow; the frames are the ones
    the same call returns in process (a Diagnosed's frame, then its diagnostics)."""
    keys = {"g": ["a", "b"]} if "GROUP" in sql else None
    here = session().sql(sql, keys=keys).collect(dp.PureDP(1), **options)
    expected = list(here) if isinstance(here, dp.Diagnosed) else [here]
    with dp.Server(session(), ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        source, attached = _described(remote.sql(sql, keys=keys))
        channel = remote._channel
        channel.send_json({"op": "collect", **source, "budget": ONE, **options, "attached": len(attached)})
        for data in attached:
            channel.send(data)
        reply = channel.receive_json(wire.REPLY_LIMIT)
        assert reply == {"ok": True, "value": None, "frames": frames}
        got = [wire.frame_from_bytes(channel.receive(wire.REPLY_LIMIT)) for _ in range(frames)]
        assert remote.tables() == ["t"]        # nothing more was sent: the next reply is the next request's
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.schema == b.schema and a.equals(b)


def _raw_channel(server: dp.Server) -> wire.Channel:
    address = server.address
    assert isinstance(address, tuple)
    sock = socket.create_connection(address, timeout=5)
    hello = wire.receive(sock, 64)
    theirs = hello[len(wire.VERSION):]
    ours = wire.nonce()
    wire.send(sock, ours)
    wire.prove(sock, KEY, b"client", theirs)
    wire.challenge(sock, KEY, b"server", ours)
    return wire.Channel(sock, KEY, b"client", theirs, ours)


def _hung_up(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_request_tagged_for_one_connection_is_not_served_on_another(served: tuple[dp.Session, dp.Server]) -> None:
    """The tag's key comes from both nonces: a frame of connection 1 (its first) replayed as connection 2's
    first is refused; one who relays the analyst's traffic cannot charge its requests twice."""
    sess, server = served
    first, second = _raw_channel(server), _raw_channel(server)
    request = json.dumps({"op": "collect", "sql": SUM, "budget": {"type": "PureDP", "epsilon": "1/4"}}).encode()
    tagged = request + first._tag(b"client", 0, request)
    wire.send(first.sock, tagged)
    assert first.receive_json(wire.REPLY_LIMIT)["ok"] is True
    first.receive(wire.REPLY_LIMIT)
    wire.send(second.sock, tagged)
    assert _hung_up(second.sock)
    assert sess.history().height == 1
    first.sock.close()


@pytest.mark.parametrize("message", [
    {"ok": True, "value": None, "frames": 1},
    {"ok": False, "error": "BudgetExceededError", "message": "x", "op": "collect"},
    {"op": "collect", "sql": SUM, "budget": ONE, "attached": -1},
    {"op": "collect", "sql": SUM, "budget": ONE, "attached": True},
])
def test_a_reply_shaped_or_miscounted_request_charges_nothing(served: tuple[dp.Session, dp.Server],
                                                              message: dict[str, Any]) -> None:
    sess, server = served
    channel = _raw_channel(server)
    channel.send_json(message)
    if "attached" in message:
        assert _hung_up(channel.sock)           # a broken count ends the connection
    else:
        reply = channel.receive_json(wire.REPLY_LIMIT)
        assert reply["ok"] is False and set(reply) == {"ok", "error", "message", "argument", "fix", "reason"}
        channel.send_json({"op": "tables"})     # and the connection goes on
        assert channel.receive_json(wire.REPLY_LIMIT)["value"] == ["t"]
    channel.sock.close()
    assert sess.history().height == 0


@pytest.mark.parametrize("sql", [SUM, COUNT])
def test_empty_keys_are_no_keys_as_in_process(served: tuple[dp.Session, dp.Server], sql: str) -> None:
    """``keys={}`` is no keys in process (a query without GROUP BY releases; one with it needs δ); remotely
    the empty table of keys was refused as malformed."""
    sess, server = served
    local = session()
    here = _outcome(lambda: local.sql(sql, keys={}).collect(dp.PureDP(1)))
    with dp.connect(server.address, authkey=KEY) as remote:
        there = _outcome(lambda: remote.sql(sql, keys={}).collect(dp.PureDP(1)))
    assert there == here
    assert sess.history().height == local.history().height


def test_accuracy_and_diagnostics_collects_from_many_connections_share_the_budget_exactly() -> None:
    """``collect(accuracy=...)`` checks that the remaining budget can pay, then reserves; diagnostics run in
    stages. From eight connections at once, each either releases in full or is refused uncharged, and the
    session never spends past its total."""
    import threading

    data = pl.DataFrame({"g": ["a", "b"] * 25, "x": [float(i % 7) for i in range(50)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(3))
    aim = dp.Accuracy(half_width=5, confidence=0.95)
    priced = sess.sql(SUM)
    assert isinstance(priced, dp.Query)
    price = priced.cost(accuracy=aim)
    outcomes: list[object] = []
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        barrier = threading.Barrier(8)

        def client(i: int) -> None:
            with dp.connect(server.address, authkey=KEY) as remote:
                q = remote.sql(SUM if i % 2 else "SELECT COUNT(*) AS n, SUM(CLAMP(x, 0, 5)) AS s FROM t")
                barrier.wait()
                try:
                    out = q.collect(accuracy=aim) if i % 2 else q.collect(dp.PureDP(1), diagnostics=True)
                    outcomes.append(price if i % 2 else dp.PureDP(1))
                    assert isinstance(out, pl.DataFrame) if i % 2 else isinstance(out, dp.Diagnosed)
                except dp.BudgetExceededError:
                    outcomes.append("refused")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    spent = [o for o in outcomes if o != "refused"]
    assert len(outcomes) == 8 and spent
    total = sum((Fraction(c.epsilon) for c in spent), Fraction(0))  # type: ignore[attr-defined]
    assert sess.spent() == dp.PureDP(total) and sess.history().height == len(spent)
    assert total <= 3 and len(spent) < 8      # the total is smaller than eight queries' price


def test_a_request_is_64_mib_in_all_not_per_frame(served: tuple[dp.Session, dp.Server]) -> None:
    """docs/remote.md: 64 MiB for a request. Each of its frames was read up to 64 MiB, and a request may
    carry 16 Arrow streams: 17 × 64 MiB held per connection (× ``max_clients``). The JSON and the streams
    together are bounded now; the connection is closed, nothing charged, others served."""
    sess, server = served
    channel = _raw_channel(server)
    channel.send_json({"op": "collect", "sql": SUM, "budget": ONE, "keys": True, "attached": 2})
    part = b"\0" * (40 << 20)
    try:
        channel.send(part)
        channel.send(part)
    except OSError:
        pass                                        # closed while the second was on its way: also refused
    assert _hung_up(channel.sock)
    channel.sock.close()
    assert sess.history().height == 0
    with dp.connect(server.address, authkey=KEY) as remote:
        assert remote.tables() == ["t"]


@pytest.mark.parametrize("values", ["ab", b"ab"])
def test_keys_given_as_one_string_are_refused_as_in_process(served: tuple[dp.Session, dp.Server],
                                                             values: object) -> None:
    """In process ``keys={"g": "ab"}`` is refused (a string is not a list of values); the client split it
    into the keys "a" and "b" and the query was charged."""
    sess, server = served
    local = session()
    here = _outcome(lambda: local.sql(COUNT, keys={"g": values}).collect(dp.PureDP(1)))
    assert here[0] == "SchemaError" and local.history().height == 0
    with dp.connect(server.address, authkey=KEY) as remote:
        there = _outcome(lambda: remote.sql(COUNT, keys={"g": values}).collect(dp.PureDP(1)))
    assert there == here
    assert sess.history().height == 0
