"""Review 44c: dp.Server against an analyst who picks every byte (and anyone who can reach its port).

* The handshake's 10 seconds bound the whole handshake, not each read: a peer that drips a byte at a time
  without ever proving the key is closed on time (one slot of ``max_clients`` each, for anyone on the
  network).
* Public keys arrive as Arrow IPC: what they unpack to in the data owner's process is bounded by the bytes
  sent. A compressed body, values that take no bytes (null), views or dictionary entries that repeat one
  long string are refused before they are unpacked, free.
"""

from __future__ import annotations

import io
import json
import os
import random
import secrets
import select
import signal
import socket
import string
import struct
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import dpframe as dp
from dpframe.remote import server as server_module
from dpframe.remote import wire

KEY = secrets.token_bytes(32)
GROUPED = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Server]]:
    sess = dp.Session({"t": pl.DataFrame({"g": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        yield sess, server


def _hung_up(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _drip(sock: socket.socket, data: bytes) -> bool:
    """Send ``data`` one byte every 0.1 s (or more, on a loaded machine); whether the peer closed before the end."""
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return True
        if select.select([sock], [], [], 0.1)[0]:
            return _hung_up(sock)
    return False


def test_a_handshake_dripped_byte_by_byte_is_closed_on_time(served: tuple[dp.Session, dp.Server],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The handshake's 80 bytes but its last (the proof, which is wrong: it would close the connection), one every
    0.1 s, take at least 7.9 s: a limit on each read (1 s) would never close the connection; the limit on the whole
    handshake (1 s) closes it long before the drip ends. Judged by the drip, not by a wall-clock bound: a loaded
    machine only makes the drip slower, which leaves the close as early."""
    monkeypatch.setattr(server_module, "AUTH_SECONDS", 1.0)
    _, server = served
    address = server.address
    assert isinstance(address, tuple)
    sock = socket.create_connection(address, timeout=5)
    assert wire.receive(sock, 64).startswith(wire.VERSION)
    drip = struct.pack("!Q", wire.NONCE) + wire.nonce() + struct.pack("!Q", 32) + b"\0" * 32
    assert len(drip[:-1]) * 0.1 >= 7.9 * server_module.AUTH_SECONDS
    assert _drip(sock, drip[:-1]), "a handshake that never ends held its connection"
    with dp.connect(address, authkey=KEY) as remote:
        assert remote.tables() == ["t"]


def _ipc(table: pa.Table, compression: str | None = None) -> bytes:
    out = io.BytesIO()
    with pa.ipc.new_stream(out, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return out.getvalue()


def _one_row(values: pa.Array) -> pa.Table:
    """A table of one row holding ``values`` as its list: the shape the server's keys take."""
    return pa.table({"g": pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)})


def _shared_views(count: int, length: int) -> pa.Array:
    """``count`` distinct strings of ``length`` bytes, views into one buffer of ``count + length`` bytes."""
    text = "".join(random.Random(0).choices(string.ascii_letters, k=count + length)).encode()
    views = b"".join(struct.pack("<i4sii", length, text[i:i + 4], 0, i) for i in range(count))
    return pa.Array.from_buffers(pa.string_view(), count, [None, pa.py_buffer(views), pa.py_buffer(text)])


BOMBS = {
    "compressed": _ipc(_one_row(pa.array([0] * 2_000_000, pa.int64())), compression="zstd"),
    "nulls": _ipc(_one_row(pa.nulls(5_000_000))),
    "shared views": _ipc(_one_row(_shared_views(2_000, 20_000))),   # keys the column could take
    "one dictionary entry": _ipc(_one_row(pa.DictionaryArray.from_arrays(pa.array([0] * 2_000, pa.int8()),
                                                                        pa.array(["a" * 20_000])))),
    "nested": _ipc(pa.table({"g": pa.array([[[1] * 10, [2] * 10]], pa.list_(pa.list_(pa.int64())))})),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_keys_that_unpack_past_their_bytes_are_refused_free(served: tuple[dp.Session, dp.Server], name: str) -> None:
    sess, server = served
    keys = BOMBS[name]
    assert len(keys) < 100_000                       # each unpacks to tens of MB (or more) of keys
    with dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.ArgumentError, match="keys") as refused:
            remote._request({"op": "collect", "sql": GROUPED, "budget": {"type": "PureDP", "epsilon": "1/2"},
                             "keys": 0}, [keys])
        assert "bytes" in str(refused.value) or "type" in str(refused.value)
        assert remote.tables() == ["t"]
    assert sess.history().height == 0


def test_keys_as_the_client_sends_them_still_pass(served: tuple[dp.Session, dp.Server]) -> None:
    sess, server = served
    keys = [f"key {i}" for i in range(1000)] + ["a", "b"]
    with dp.connect(server.address, authkey=KEY) as remote:
        out = remote.sql(GROUPED, keys={"g": keys}).collect(dp.PureDP(0.5))
        assert out.height == len(keys)
        with pytest.raises(dp.SchemaError, match="no keys given"):          # the session's own refusal
            remote.sql(GROUPED, keys={"g": []}).cost(dp.PureDP(0.5))
        assert remote.sql("SELECT x > 1 AS big, COUNT(*) AS n FROM t GROUP BY big",
                          keys={"big": [True, False]}).cost(dp.PureDP(0.5)) == dp.PureDP(0.5)
    assert sess.history().height == 1


def test_sigterm_with_a_release_in_flight_leaves_it_charged_and_unsent(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``dpframe serve`` stops on SIGTERM while a client's release runs: the release reaches no one, and the
    ledger keeps its charge (never an open reservation, never a release without its charge)."""
    from dpframe.cli import main
    from dpframe.release import ReleaseContext
    from dpframe.sql import cli as sql_cli

    table, ledger, key, sock = (tmp_path / "t.csv", tmp_path / "b.ledger", tmp_path / "key", tmp_path / "s")
    pl.DataFrame({"g": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}).write_csv(table)
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    running, go = threading.Event(), threading.Event()
    guarded = ReleaseContext.guarded

    def held(self: ReleaseContext, charge: int, run: Any) -> Any:     # the data owner's own slow query
        running.set()
        go.wait(10)
        return guarded(self, charge, run)

    monkeypatch.setattr(ReleaseContext, "guarded", held)
    outcome: list[object] = []

    def analyst() -> None:
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.05)
        try:
            with dp.connect(str(sock), authkey=key.read_text().strip().encode()) as remote:
                outcome.append(remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(0.5)))
        except dp.DPFrameError as e:
            outcome.append(e)

    def terminate() -> None:
        running.wait(20)
        for _ in range(100):                 # SIGTERM only while dpframe serve handles it (else it ends pytest)
            if signal.getsignal(signal.SIGTERM) is sql_cli._interrupt:
                os.kill(os.getpid(), signal.SIGTERM)     # (stops the server even if the release never started)
                break
            time.sleep(0.1)
        time.sleep(0.5)
        go.set()

    threads = [threading.Thread(target=analyst), threading.Thread(target=terminate)]
    for thread in threads:
        thread.start()
    code = main(["serve", "--table", f"t={table}", "--row-privacy", "--total-epsilon", "2", "--ledger", str(ledger),
                 "--address", str(sock), "--authkey-file", str(key)])
    for thread in threads:
        thread.join(20)
    assert code == 0 and running.is_set()
    assert len(outcome) == 1 and isinstance(outcome[0], dp.RemoteError), outcome
    monkeypatch.setattr(ReleaseContext, "guarded", guarded)
    with dp.Session({"t": pl.read_csv(table)}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2),
                    ledger=ledger) as after:
        assert after.history()["status"].to_list() in (["failed"], ["committed"])
        assert after.spent() == dp.PureDP(0.5)


def test_a_port_out_of_range_names_the_address() -> None:
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    with pytest.raises(dp.ArgumentError, match="address"):
        dp.Server(sess, ("127.0.0.1", 70_000), authkey=KEY)
    with pytest.raises(dp.ArgumentError, match="address"):
        dp.Server(sess, ("127.0.0.1", -1), authkey=KEY)


def test_a_key_file_that_is_not_text_is_refused_without_quoting_it(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from dpframe.cli import main

    table, key = tmp_path / "t.csv", tmp_path / "key"
    pl.DataFrame({"x": [1.0]}).write_csv(table)
    key.write_bytes(b"\xfe\xed" + secrets.token_bytes(30))
    code = main(["serve", "--table", f"t={table}", "--row-privacy", "--total-epsilon", "1",
                 "--address", "127.0.0.1:0", "--authkey-file", str(key)])
    err = capsys.readouterr().err
    assert code == 2 and "authkey" in err and len(err.strip().splitlines()) == 1, err
    assert "0xfe" not in err and "position" not in err          # nothing of the key's bytes in the owner's logs


@pytest.mark.parametrize("attack", ["inject", "replay", "reflect"])
def test_a_man_in_the_middle_cannot_use_a_proven_connection(served: tuple[dp.Session, dp.Server],
                                                            attack: str) -> None:
    """One who relays the handshake (without the key) and then speaks on the connection is refused.

    The handshake proves both ends hold the key; after it, each frame carries a tag under a key of this
    connection, its sender and its position, so a request of the relay's own, the analyst's request
    replayed, or the server's reply reflected back is not served (the connection is closed).
    """
    sess, server = served
    address = server.address
    assert isinstance(address, tuple)
    collect = {"op": "collect", "sql": "SELECT COUNT(*) AS n FROM t", "budget": {"type": "PureDP", "epsilon": "1/4"}}
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        connected: list[dp.Remote] = []
        analyst = threading.Thread(target=lambda: connected.append(dp.connect(("127.0.0.1", port), authkey=KEY)))
        analyst.start()
        victim, _ = listener.accept()
        upstream = socket.create_connection(address, timeout=5)
        victim.settimeout(5)
        wire.send(victim, wire.receive(upstream, 64))              # the server's hello and nonce
        wire.send(upstream, wire.receive(victim, 64))              # the analyst's nonce
        wire.send(upstream, wire.receive(victim, 64))              # the analyst's proof
        wire.send(victim, wire.receive(upstream, 64))              # the server's proof
        analyst.join(5)
        assert connected, "the relayed handshake succeeds: the relay only forwards"
        if attack == "inject":
            wire.send(upstream, json.dumps({**collect, "keys": False}).encode())
        else:
            asked = threading.Thread(target=lambda: connected[0]._request(collect))
            asked.start()
            request = wire.receive(victim, 1 << 20)
            wire.send(upstream, request)                           # the analyst's collect, once
            reply = wire.receive(upstream, 1 << 20)
            wire.send(victim, reply)
            wire.send(victim, wire.receive(upstream, 1 << 20))     # its frame
            asked.join(5)
            wire.send(upstream, request if attack == "replay" else reply)
        assert _hung_up(upstream)
        connected[0].close()
        victim.close()
    assert sess.remaining() == (dp.PureDP(1) if attack == "inject" else dp.PureDP(0.75))


def test_budgets_of_coprime_denominators_cannot_make_the_spent_budget_unreadable(
        served: tuple[dp.Session, dp.Server]) -> None:
    """ε = a/b with a new 400-digit b each time: the exact total's denominator would grow past the 4,300 digits
    Python turns into text, and ``remaining()`` / ``spent()`` would fail for every analyst of the session
    (in process they answer). Budgets cross as decimal fractions (denominators 2^i·5^j: every float is one)."""
    sess, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        for i in range(12):
            odd = {"type": "PureDP", "epsilon": f"{10**398}/{10**399 + 2 * i + 1}"}      # ≈ 0.1 each
            with pytest.raises(dp.ArgumentError, match="budget"):
                remote._request({"op": "collect", "sql": "SELECT COUNT(*) AS n FROM t", "budget": odd})
        assert remote.remaining() == sess.remaining() == dp.PureDP(1)
        with pytest.raises(dp.ArgumentError, match="budget"):
            remote.sql("SELECT COUNT(*) AS n FROM t").cost(dp.PureDP(Fraction(1, 3)))
        assert remote.sql("SELECT COUNT(*) AS n FROM t").cost(dp.PureDP(1 / 3)) == dp.PureDP(1 / 3)
    for budget in (dp.ApproxDP(0.5, 5e-324), dp.ZCDP(1e-300), dp.PureDP(1.7976931348623157e308)):   # floats' ends
        assert wire.budget_from_json(wire.budget_to_json(budget)) == budget
    assert sess.history().height == 0


def test_serve_on_an_empty_host_is_refused_not_every_interface(tmp_path: Path) -> None:
    """``--address :7070`` would listen on every interface (Python's ``""`` host), not on this machine alone."""
    import subprocess
    import sys

    table, key = tmp_path / "t.csv", tmp_path / "key"
    pl.DataFrame({"x": [1.0]}).write_csv(table)
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    owner = subprocess.Popen([sys.executable, "-m", "dpframe.cli", "serve", "--table", f"t={table}", "--row-privacy",
                              "--total-epsilon", "1", "--address", ":0", "--authkey-file", str(key)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = owner.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        owner.kill()
        owner.communicate()
        pytest.fail("dpframe serve --address :0 served (on every interface)")
    assert owner.returncode == 2 and "address" in err and len(err.strip().splitlines()) == 1, err


def test_a_length_header_alone_reserves_no_memory() -> None:
    """A frame's stated length is a limit, not an allocation: a peer (a man in the middle before the tag is
    checked, or an analyst) who announces the largest frame allowed and sends a few bytes costs a few bytes."""
    import tracemalloc

    left, right = socket.socketpair()
    with left, right:
        right.sendall(struct.pack("!Q", 256 << 20) + b"only this")
        right.shutdown(socket.SHUT_WR)
        tracemalloc.start()
        try:
            with pytest.raises(dp.RemoteError, match="closed"):
                wire.receive(left, wire.REPLY_LIMIT)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 16 << 20, peak


@pytest.fixture(scope="module")
def tls_server_context(tls_certificate: tuple[Path, Path]) -> Any:
    """The server's TLS context (tests/conftest.py's self-signed certificate) and a client's that trusts it."""
    import ssl

    cert, key = tls_certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, ssl.create_default_context(cafile=str(cert))


def _client_hello() -> bytes:
    import ssl

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    with pytest.raises(ssl.SSLWantReadError):
        context.wrap_bio(incoming, outgoing).do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("stall", ["silent", "dripped"])
def test_a_stalled_tls_handshake_neither_holds_the_server_nor_stays(tls_server_context: Any, stall: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Anyone who can reach the port: a TLS handshake that never finishes must not stop the server from
    serving others (it once ran under the server's lock, which accepting a connection takes), and is
    closed within the handshake's time however it spaces its bytes.

    Judged by order, not by a wall-clock bound: the other client is served while the stalled connection is still
    open (a server that waited for it would serve the other only once it had closed it, after AUTH_SECONDS = 4 s);
    the stalled one is then closed before its bytes, one every 0.1 s (≥ 50 s for a hello), run out, or, silent,
    within 10 times its limit."""
    monkeypatch.setattr(server_module, "AUTH_SECONDS", 4.0)
    server_side, trusted = tls_server_context
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, tls=server_side).start() as server:
        address = server.address
        assert isinstance(address, tuple)
        stalled = socket.create_connection(address, timeout=5)
        hello = _client_hello() if stall == "dripped" else b""
        time.sleep(0.3)                                  # the server has (likely) taken the stalled connection
        with dp.connect(address, authkey=KEY, tls=trusted) as remote:
            assert remote.tables() == ["t"]
        assert not select.select([stalled], [], [], 0)[0], "another client waited for the stalled handshake"
        if hello:                                        # all but its last byte
            assert len(hello[:-1]) * 0.1 >= 10 * server_module.AUTH_SECONDS
            closed = _drip(stalled, hello[:-1])
        else:
            stalled.settimeout(10 * server_module.AUTH_SECONDS)
            closed = _hung_up(stalled)
        assert closed, "a TLS handshake that never ends held its connection"
        stalled.close()
