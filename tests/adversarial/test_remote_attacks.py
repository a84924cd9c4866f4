"""Attacks on dp.Server from the network: an analyst (or anyone who can reach the port) picks every byte.

The server must run no code it receives (no pickle), serve nothing before the handshake, refuse budgets
the public constructors refuse, keep one client's stall or garbage from reaching the others, and say no
more about an unexpected failure than its type.
"""

from __future__ import annotations

import json
import pickle
import secrets
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.remote import server as server_module
from dpframe.remote import wire

KEY = secrets.token_bytes(32)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Server]]:
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0, 3.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(1), seed=0)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        yield sess, server


def raw(server: dp.Server) -> socket.socket:
    address = server.address
    assert isinstance(address, tuple)
    sock = socket.create_connection(address, timeout=5)
    hello = wire.receive(sock, 64)
    assert hello.startswith(wire.VERSION)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server hung up without sending anything more."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def handshake(sock: socket.socket, hello_nonce: bytes) -> wire.Channel:
    ours = wire.nonce()
    wire.send(sock, ours)
    wire.prove(sock, KEY, b"client", hello_nonce)
    wire.challenge(sock, KEY, b"server", ours)
    return wire.Channel(sock, KEY, b"client", hello_nonce, ours)


class Flag:
    ran = False

    def __reduce__(self) -> Any:
        return (setattr, (Flag, "ran", True))


def test_a_pickle_is_never_loaded(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    address = server.address
    assert isinstance(address, tuple)
    sock = socket.create_connection(address, timeout=5)
    hello = wire.receive(sock, 64)
    channel = handshake(sock, hello[len(wire.VERSION):])
    channel.send(pickle.dumps(Flag()))             # tagged: the analyst holds the key
    assert closed_by_server(sock)
    assert not Flag.ran
    with dp.connect(address, authkey=KEY) as remote:
        assert remote.tables() == ["t"]


def test_nothing_is_served_before_the_handshake(served: tuple[dp.Session, dp.Server]) -> None:
    sess, server = served
    sock = raw(server)
    wire.send(sock, b"x" * wire.NONCE)                 # the client's nonce
    wire.send(sock, json.dumps({"op": "collect", "sql": "SELECT COUNT(*) FROM t",
                                "budget": {"type": "PureDP", "epsilon": "1"}}).encode())   # no answer: a request
    assert closed_by_server(sock)
    assert sess.history().height == 0


def test_a_wrong_answer_gets_no_proof_from_the_server(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    sock = raw(server)
    wire.send(sock, wire.nonce())
    wire.send(sock, b"\0" * 32)
    assert closed_by_server(sock)


def test_a_short_challenge_gets_no_proof(served: tuple[dp.Session, dp.Server]) -> None:
    """An empty nonce would make the server's proof a constant; the server hangs up before proving anything."""
    _, server = served
    sock = raw(server)
    wire.send(sock, b"")
    assert closed_by_server(sock)


def test_an_oversized_frame_is_refused_unread(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    sock = raw(server)
    sock.sendall(struct.pack("!Q", 1 << 62))
    assert closed_by_server(sock)


def test_a_stalled_handshake_neither_blocks_others_nor_stays(served: tuple[dp.Session, dp.Server],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Judged by order, not by a wall-clock bound: another client is served while the stalled connection is still
    open (within its 3 s: not after the server gave up on it), and the stalled one is then closed (within 10 times
    its limit)."""
    monkeypatch.setattr(server_module, "AUTH_SECONDS", 3.0)
    _, server = served
    stalled = raw(server)                                  # says nothing after the hello
    with dp.connect(server.address, authkey=KEY) as remote:
        assert remote.tables() == ["t"]
    assert not select.select([stalled], [], [], 0)[0], "another client waited for the stalled handshake"
    stalled.settimeout(10 * server_module.AUTH_SECONDS)
    assert closed_by_server(stalled)


def test_more_clients_than_allowed_are_closed() -> None:
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, max_clients=1).start() as server:
        with dp.connect(server.address, authkey=KEY) as first:
            with pytest.raises(dp.RemoteError):
                dp.connect(server.address, authkey=KEY)
            assert first.tables() == ["t"]
        for _ in range(50):            # the slot is freed when the first client hangs up
            try:
                with dp.connect(server.address, authkey=KEY) as again:
                    assert again.tables() == ["t"]
                break
            except dp.RemoteError:
                time.sleep(0.05)
        else:
            pytest.fail("the freed slot was not reused")


@pytest.mark.parametrize("budget", [
    {"type": "PureDP", "epsilon": "-1"},
    {"type": "PureDP", "epsilon": "0"},
    {"type": "PureDP", "epsilon": "1e999999999"},
    {"type": "PureDP", "epsilon": "nan"},
    {"type": "PureDP", "epsilon": "1/0"},
    {"type": "PureDP", "epsilon": 1},
    {"type": "PureDP", "epsilon": "1", "delta": "1"},
    {"type": "ApproxDP", "epsilon": "1", "delta": "2"},
    {"type": "RDPCharge", "values": "[]"},
    {"type": "__class__", "epsilon": "1"},
    {"type": ["PureDP"], "epsilon": "1"},
    {"type": {"PureDP": 1}, "epsilon": "1"},
    ["PureDP", "1"],
])
def test_budgets_the_constructors_refuse_are_refused_free(served: tuple[dp.Session, dp.Server], budget: object) -> None:
    sess, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        start = time.monotonic()
        with pytest.raises((dp.ArgumentError, dp.BudgetError)):
            remote._request({"op": "collect", "sql": "SELECT COUNT(*) AS n FROM t", "budget": budget})
        assert time.monotonic() - start < 30       # 1e999999999 as a Fraction would take hours: a margin for load
        assert remote.tables() == ["t"]
    assert sess.history().height == 0


@pytest.mark.parametrize("keys", [b"not arrow", wire.frame_bytes(pl.DataFrame({"g": ["a", "b"]})),
                                  wire.frame_bytes(pl.DataFrame({"g": [["a"], ["b"]]}))])
def test_malformed_keys_are_refused_and_the_connection_goes_on(served: tuple[dp.Session, dp.Server],
                                                               keys: bytes) -> None:
    _, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.ArgumentError, match="keys"):
            remote._request({"op": "cost", "sql": "SELECT COUNT(*) AS n FROM t", "budget": None, "keys": 0}, [keys])
        assert remote.tables() == ["t"]


@pytest.mark.parametrize("request_", [{"op": "__init__"}, {"op": None}, {"sql": "SELECT 1"},
                                      {"op": "schema", "table": ["t"]}, {"op": "collect", "sql": 7}])
def test_unknown_or_malformed_requests_are_refused(served: tuple[dp.Session, dp.Server],
                                                   request_: dict[str, Any]) -> None:
    _, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.DPFrameError):
            remote._request(request_)
        assert remote.tables() == ["t"]


def test_an_unexpected_failure_says_only_its_type(served: tuple[dp.Session, dp.Server],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sess, server = served

    def broken(self: dp.Session) -> list[str]:      # a failure whose text would carry a private value
        raise RuntimeError("the exact count is 42")

    monkeypatch.setattr(dp.Session, "tables", broken)    # the data owner's own process: trusted code
    with dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.RemoteError) as e:
            remote.tables()
        assert "RuntimeError" in str(e.value) and "42" not in str(e.value)
        assert remote.remaining() == dp.PureDP(1)


def test_a_unix_socket_path_that_exists_is_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / "taken"
    path.write_text("the data owner's file")
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    with pytest.raises(dp.ArgumentError, match="address"):
        dp.Server(sess, str(path), authkey=KEY)
    assert path.read_text() == "the data owner's file"


def test_the_server_is_sealed(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    with pytest.raises(AttributeError):
        server.address = ("0.0.0.0", 1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        pickle.dumps(server)


@pytest.mark.parametrize("options", [{"diagnostics": True}, {"ci": 0.9},
                                     {"accuracy": {"half_width": 5, "confidence": 0.9, "notion": None}}])
def test_options_a_top_k_query_lacks_are_refused_free(options: dict[str, Any]) -> None:
    """A SQL TOP_K's collect refuses ci= and diagnostics= (it has neither: a PlanError, as in process, test_review50b)
    and accuracy=; remotely too, before the charge."""
    data = pl.DataFrame({"u": list(range(300)), "k": ["a"] * 200 + ["b"] * 100})
    sess = dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, 1e-3), seed=1)
    top = "SELECT k FROM v GROUP BY k HAVING TOP_K(COUNT(DISTINCT u), 1)"
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.ArgumentError if "accuracy" in options else dp.PlanError):
            remote._request({"op": "collect", "sql": top, "budget": {"type": "ApproxDP", "epsilon": "1",
                                                                     "delta": "1/1000000"}, **options})
        assert remote.tables() == ["v"]
    assert sess.history().height == 0
