"""What crosses the socket between an analyst's :class:`~dpframe.remote.client.Remote` and a :class:`Server`.

Only two kinds of bytes: JSON text and Arrow IPC streams. Nothing is unpickled on either side (a pickle
from an analyst would run the analyst's code in the data owner's process), and every frame is read with
a size limit stated before its bytes arrive.

* **Frames**: an 8-byte big-endian length, then that many bytes (:func:`send`, :func:`receive`).
* **Handshake** (:func:`prove`, :func:`challenge`): mutual HMAC-SHA256 over fresh random nonces with the
  shared ``authkey``; each side's answer is bound to its role, so neither can replay the other's. The key
  itself never crosses the socket.
* **After it** (:class:`Channel`): every frame ends with an HMAC-SHA256 tag under a key of this connection
  (from ``authkey`` and both nonces), its sender's role and its position, so a frame that one who relays
  the handshake without the key injects, replays, reorders or reflects is refused.
* **A request**: one JSON frame ``{"op": ..., ...}``, followed by one Arrow frame when it says
  ``"keys": true``. **A reply**: one JSON frame ``{"ok": true, "value": ..., "frames": n}`` followed by
  ``n`` Arrow frames (a released frame, and its diagnostics), or ``{"ok": false, "error": ..., "message": ...}``.
* **Budgets from the analyst** (:func:`budget_from_json`): a type among ``PureDP``, ``ApproxDP`` and
  ``ZCDP`` and each field as an exact decimal fraction ``"p/q"`` of bounded length (``q`` = 2^i·5^j, as
  every float's), built by the public constructors, which validate them as in-process calls do.

Example:
    >>> import dpframe as dp
    >>> budget_from_json(budget_to_json(dp.ApproxDP(0.5, 1e-6))) == dp.ApproxDP(0.5, 1e-6)
    True

"""

from __future__ import annotations

import hashlib
import hmac
import io
import re
import secrets
import socket
import ssl
import struct
import time
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from dpframe.accuracy import Accuracy, check_accuracy
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP
from dpframe.errors import ArgumentError, RemoteError

VERSION = b"dpframe-remote-4"
"""Sent first by the server, so that a client of another protocol (or version) stops at once."""
NONCE = 32
"""Bytes of each side's random challenge."""
MIN_KEY = 16
"""The shortest ``authkey`` accepted (bytes)."""
REQUEST_LIMIT = 64 << 20
"""The most a server reads for one request: its JSON and its Arrow streams (public keys) together, 64 MiB."""
REPLY_LIMIT = 1 << 34
"""The largest frame a client reads (a released frame): 16 GiB."""
BUDGETS: Mapping[str, tuple[type[Budget], tuple[str, ...]]] = MappingProxyType({
    "PureDP": (PureDP, ("epsilon",)), "ApproxDP": (ApproxDP, ("epsilon", "delta")), "ZCDP": (ZCDP, ("rho", "delta"))})
"""The budget types an analyst may send, and their fields (read-only: the server decides by it)."""
_FRACTION = re.compile(r"-?[0-9]{1,400}(/[0-9]{1,400})?")
_LENGTH = struct.Struct("!Q")


def send(sock: socket.socket, payload: bytes) -> None:
    """One frame: the length, then the bytes (one write while small: no wait for the peer's acknowledgement)."""
    head = _LENGTH.pack(len(payload))
    if len(payload) <= 1 << 16:
        sock.sendall(head + payload)
    else:
        sock.sendall(head)
        sock.sendall(payload)


def no_delay(sock: socket.socket) -> None:
    """Send small frames at once (no Nagle delay) on a TCP socket; a Unix socket needs nothing."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def receive(sock: socket.socket, limit: int, deadline: float | None = None) -> bytes:
    """One frame of at most ``limit`` bytes; :class:`RemoteError` when longer, or when the peer hung up.

    ``deadline`` (a :func:`time.monotonic` time): the whole frame must have arrived by then
    (``TimeoutError`` otherwise), however the peer spaces its bytes; None: the socket's own timeout, per read.
    """
    (size,) = _LENGTH.unpack(_exactly(sock, _LENGTH.size, deadline))
    if size > limit:
        raise RemoteError(f"a message of {size} bytes is over the limit of {limit}", argument="message",
                          fix="send smaller requests (fewer public keys per query)")
    return _exactly(sock, size, deadline)


def _exactly(sock: socket.socket, size: int, deadline: float | None = None) -> bytes:
    """``size`` bytes, held as they arrive.

    A stated length reserves nothing: a peer that announces the limit and sends a few bytes costs a few bytes.
    """
    chunks: list[bytes] = []
    got = 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the peer did not send in time")
            sock.settimeout(left)
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            raise RemoteError("the connection was closed", argument="connection",
                              fix="connect again (dp.connect) and check that the server is running")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Channel:
    """A proven connection's frames: each ends with a tag binding it to this connection, its sender and its place.

    ``role``: this side's (``b"server"`` or ``b"client"``); ``server_nonce`` and ``client_nonce``: the
    handshake's. The tag is HMAC-SHA256, under a key derived from ``authkey`` and both nonces, of the
    sender's role, the frame's number in its direction and its bytes; a frame whose tag is wrong is a
    :class:`RemoteError` (the connection is then closed).
    """

    TAG = 32

    def __init__(self, sock: socket.socket, authkey: bytes, role: bytes, server_nonce: bytes,
                 client_nonce: bytes) -> None:
        self.sock = sock
        self._key = hmac.new(authkey, VERSION + b"connection" + server_nonce + client_nonce, hashlib.sha256).digest()
        self._role, self._peer = role, b"client" if role == b"server" else b"server"
        self._sent = self._received = 0
        self.received_bytes = 0         # every frame's bytes received so far (tags not counted)

    def _tag(self, role: bytes, number: int, payload: bytes) -> bytes:
        return hmac.new(self._key, role + _LENGTH.pack(number) + payload, hashlib.sha256).digest()

    def send(self, payload: bytes) -> None:
        """One tagged frame."""
        tag = self._tag(self._role, self._sent, payload)
        self._sent += 1
        send(self.sock, payload + tag)

    def receive(self, limit: int) -> bytes:
        """One tagged frame of at most ``limit`` bytes (its tag checked and removed)."""
        data = receive(self.sock, limit + self.TAG)
        payload, tag = data[:-self.TAG], data[-self.TAG:]
        if len(data) < self.TAG or not hmac.compare_digest(tag, self._tag(self._peer, self._received, payload)):
            raise RemoteError("a message does not carry this connection's tag", argument="message",
                              fix="connect with dp.connect, and not through a relay that changes the traffic")
        self._received += 1
        self.received_bytes += len(payload)
        return payload

    def send_json(self, message: dict[str, Any]) -> None:
        """One JSON frame."""
        self.send(_dumps(message))

    def receive_json(self, limit: int) -> dict[str, Any]:
        """One JSON frame holding an object; :class:`RemoteError` for anything else."""
        import json

        try:
            message = json.loads(self.receive(limit))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise RemoteError("a message is not JSON text", argument="message", fix="use dp.connect's client") from None
        if not isinstance(message, dict):
            raise RemoteError("a message is not a JSON object", argument="message", fix="use dp.connect's client")
        return message


def _dumps(message: dict[str, Any]) -> bytes:
    import json

    return json.dumps(message).encode()


def frame_bytes(frame: pl.DataFrame) -> bytes:
    """A frame as an Arrow IPC stream."""
    out = io.BytesIO()
    frame.write_ipc_stream(out)
    return out.getvalue()


def frame_from_bytes(data: bytes) -> pl.DataFrame:
    """A reply's Arrow IPC stream as a frame (the client's side: :func:`table_from_bytes`, then Polars).

    A frame of a type Arrow's Python library does not read (Polars' 128-bit integers: released ``UInt128`` keys, a
    table's schema) is read by Polars' own reader, as the server's Polars wrote it; a stream neither reads is a
    :class:`~dpframe.errors.RemoteError` about the reply (a release it held is charged: ``history()`` shows it).

    Example:
        >>> frame_from_bytes(frame_bytes(pl.DataFrame({"g": ["a", "b"]})))["g"].to_list()
        ['a', 'b']
        >>> frame_from_bytes(frame_bytes(pl.DataFrame({"k": pl.Series([2**100], dtype=pl.UInt128)})))["k"].dtype
        UInt128

    """
    try:
        pa.ipc.open_stream(pa.BufferReader(data)).schema    # noqa: B018 — reads the schema message only
    except pa.ArrowNotImplementedError:
        try:
            return pl.read_ipc_stream(io.BytesIO(data))
        except Exception as e:      # noqa: BLE001 — a panic too: a stream Polars does not read either
            raise RemoteError(f"a reply frame this client cannot read ({type(e).__name__})", argument="reply",
                              fix="use the server's dpframe and Polars versions") from None
    except (pa.ArrowException, ValueError, OSError, struct.error) as e:
        raise RemoteError(f"a reply frame is not an Arrow IPC stream ({type(e).__name__})", argument="reply",
                          fix="use the server's dpframe and Polars versions") from None
    try:
        table = table_from_bytes(data)
    except ArgumentError as e:
        raise RemoteError(f"a reply frame this client cannot read ({e.message})", argument="reply",
                          fix="use the server's dpframe and Polars versions") from None
    out = pl.from_arrow(table)
    assert isinstance(out, pl.DataFrame)
    return out


def table_from_bytes(data: bytes) -> pa.Table:
    """An Arrow IPC stream as a table, validated in full (its buffers, offsets and UTF-8).

    A compressed stream is refused before any body is read (:func:`_compressed`): decoding is then zero-copy,
    bounded by the bytes received.
    """
    try:
        compressed = any(message.type in ("record batch", "dictionary") and _compressed(
            message.metadata.to_pybytes(), message.type == "dictionary")
            for message in pa.ipc.MessageReader.open_stream(pa.BufferReader(data)))
        table = None if compressed else pa.ipc.open_stream(pa.BufferReader(data)).read_all()
        if table is not None:
            table.validate(full=True)
    except pa.ArrowNotImplementedError as e:    # a type this Arrow does not read (an integer of more than 64 bits)
        raise ArgumentError(f"keys of a type this server cannot read ({str(e)[:200]})", argument="keys",
                            fix="pass keys as {'column': [value, ...]} (128-bit integers as Python ints)") from None
    except (pa.ArrowException, ValueError, OSError, struct.error) as e:
        raise ArgumentError(f"not an Arrow IPC stream ({type(e).__name__})", argument="keys",
                            fix="pass keys as {'column': [value, ...]}") from None
    if table is None:
        raise ArgumentError("a compressed Arrow IPC stream (its bodies could inflate to many times their bytes)",
                            argument="keys", fix="send the keys uncompressed, as dp.connect's client does")
    return table


def read_keys(data: bytes) -> dict[str, list[Any]]:
    """Public keys sent as one row of list columns (one per GROUP BY column), as ``{column: [key, ...]}``.

    What they unpack to is bounded by the bytes sent (an analyst's few bytes must not become gigabytes
    here): lists of plain values only (numbers, booleans, text, bytes, dates and times, or nulls — the
    type of an empty list; no dictionary, nested or extension type, whose values can repeat one long
    value), and at most one value, and one byte of text, per byte received (a null takes no byte).
    Refused before anything is charged.
    """
    table = table_from_bytes(data)
    fields = list(table.schema)
    if not fields:
        return {}                               # keys={}: no keys, as in process
    if table.num_rows != 1 or not all(pa.types.is_list(f.type) or pa.types.is_large_list(f.type) for f in fields) \
            or any(column.null_count for column in table.columns):
        raise ArgumentError("expected one list of keys per column", argument="keys",
                            fix="pass keys={'column': [value, ...]}")
    for field in fields:
        if not _plain(field.type.value_type):
            raise ArgumentError(f"keys of type {field.type.value_type} for {field.name!r}", argument="keys",
                                fix="pass keys of the column's type: numbers, booleans, text, bytes, dates or times")
    values = sum(len(pc.list_flatten(column)) for column in table.columns)
    if values > len(data):
        raise _unpacked(len(data))
    plain = pa.Table.from_arrays([column.cast(pa.list_(field.type.value_type))
                                  for field, column in zip(fields, table.columns, strict=True)],
                                 names=[field.name for field in fields])      # no metadata: Polars reads types only
    frame = pl.from_arrow(plain)
    assert isinstance(frame, pl.DataFrame)
    lists = {c: frame[c][0] for c in frame.columns}
    text = sum(int(s.str.len_bytes().sum() if s.dtype == pl.String else s.bin.size().sum() if s.dtype == pl.Binary
                   else 0) for s in lists.values())
    if values + text > len(data):
        raise _unpacked(len(data))
    return {c: s.to_list() for c, s in lists.items()}


def _unpacked(size: int) -> ArgumentError:
    return ArgumentError(f"keys of {size} bytes that unpack to more values and text than that", argument="keys",
                         fix="pass keys={'column': [value, ...]}, as dp.connect's client does")


def _plain(kind: pa.DataType) -> bool:
    """Whether public keys may be of type ``kind`` (each value stored in bytes of its own, or a null)."""
    types = pa.types
    return bool(types.is_null(kind) or types.is_integer(kind) or types.is_floating(kind) or types.is_boolean(kind)
                or types.is_decimal(kind) or types.is_string(kind) or types.is_large_string(kind)
                or types.is_string_view(kind) or types.is_binary(kind) or types.is_large_binary(kind)
                or types.is_binary_view(kind) or types.is_date(kind) or types.is_timestamp(kind)
                or types.is_time(kind) or types.is_duration(kind))


def _compressed(metadata: bytes, dictionary: bool) -> bool:
    """Whether a record batch's (or a dictionary batch's) flatbuffer metadata names a body compression.

    Read before Arrow decodes the body: a compressed buffer states its own inflated length, which Arrow
    allocates and fills (kilobytes of zstd inflate to gigabytes). Arrow's schema (``Message.fbs``): a Message's
    field 2 is its header; a DictionaryBatch's field 1 its RecordBatch; a RecordBatch's field 3 its compression.
    ``struct.error`` when the metadata points outside itself.
    """
    def at(fmt: str, offset: int) -> int:
        if offset < 0:
            raise struct.error("an offset before the metadata")
        value: int = struct.unpack_from(fmt, metadata, offset)[0]
        return value

    def field(table: int, index: int) -> int | None:
        vtable = table - at("<i", table)
        if 4 + 2 * index >= at("<H", vtable):
            return None
        offset = at("<H", vtable + 4 + 2 * index)
        return table + offset if offset else None

    def table_of(offset: int) -> int:
        return offset + at("<I", offset)

    header = field(table_of(0), 2)
    if header is None:
        return False
    batch = table_of(header)
    if dictionary:
        data = field(batch, 1)
        if data is None:
            return False
        batch = table_of(data)
    return field(batch, 3) is not None


def prove(sock: socket.socket, authkey: bytes, role: bytes, nonce: bytes) -> None:
    """Answer the peer's ``nonce``: HMAC-SHA256 of the role and the nonce under ``authkey``."""
    send(sock, _answer(authkey, role, nonce))


def challenge(sock: socket.socket, authkey: bytes, role: bytes, nonce: bytes, deadline: float | None = None) -> None:
    """Check the peer's answer to our ``nonce`` (:func:`prove` with the peer's role); RemoteError if wrong."""
    answer = receive(sock, 64, deadline)
    if not hmac.compare_digest(answer, _answer(authkey, role, nonce)):
        raise RemoteError("the peer did not prove it holds the authkey", argument="authkey",
                          fix="use the authkey the server was started with")


def _answer(authkey: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(authkey, VERSION + role + nonce, hashlib.sha256).digest()


def nonce() -> bytes:
    """A fresh random challenge."""
    return secrets.token_bytes(NONCE)


def check_authkey(authkey: object) -> bytes:
    """``authkey`` as bytes of at least :data:`MIN_KEY`; ArgumentError otherwise.

    Example:
        >>> check_authkey(b"0123456789abcdef")
        b'0123456789abcdef'

    """
    if not isinstance(authkey, bytes) or len(authkey) < MIN_KEY:
        raise ArgumentError(f"expected at least {MIN_KEY} bytes, got {type(authkey).__name__}"
                            + (f" of {len(authkey)}" if isinstance(authkey, bytes) else ""),
                            argument="authkey", fix="pass authkey=secrets.token_bytes(32), shared with the analyst")
    return authkey


def check_tls(tls: object, address: object) -> ssl.SSLContext | None:
    """``tls`` as an ``ssl.SSLContext`` (or ``None``) for a TCP ``address``; ArgumentError otherwise."""
    if tls is None:
        return None
    if not isinstance(tls, ssl.SSLContext):
        raise ArgumentError(f"expected an ssl.SSLContext, got {type(tls).__name__}", argument="tls",
                            fix="pass ssl.create_default_context(...) with the certificate loaded, or leave tls out")
    if not isinstance(address, tuple):
        raise ArgumentError("TLS is for TCP addresses: a Unix socket does not leave the machine", argument="tls",
                            fix="pass (host, port) as the address, or leave tls out")
    return tls


def host_port(address: object, fix: str) -> tuple[str, int]:
    """``address`` as a TCP ``(host, port)``: a string and a port from 0 to 65535; ArgumentError otherwise.

    Example:
        >>> host_port(("127.0.0.1", 70000), "pick a port")
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: address: expected (host, port) with a port from 0 to 65535, got ...

    """
    if (not isinstance(address, tuple) or len(address) != 2 or not isinstance(address[0], str)
            or isinstance(address[1], bool) or not isinstance(address[1], int) or not 0 <= address[1] <= 65535):
        raise ArgumentError(f"expected (host, port) with a port from 0 to 65535, got {address!r}",
                            argument="address", fix=fix)
    return address[0], address[1]


def accuracy_to_json(accuracy: Accuracy) -> dict[str, Any]:
    """An accuracy target as its fields (the half-widths as numbers, or a mapping of output names to numbers)."""
    check_accuracy(accuracy)        # the in-process error (class and text), before anything is sent
    widths = accuracy.half_width
    return {"half_width": dict(widths) if isinstance(widths, Mapping) else widths,
            "confidence": accuracy.confidence, "notion": accuracy.notion}


def accuracy_from_json(value: object) -> Accuracy | None:
    """The target :func:`accuracy_to_json` wrote (``None`` stays ``None``), built by ``dp.Accuracy``."""
    if value is None:
        return None
    fields = ("half_width", "confidence", "notion")
    if not isinstance(value, dict) or set(value) != set(fields) or not all(
            _number(v) for v in (value["half_width"].values() if isinstance(value["half_width"], dict)
                                 else [value["half_width"]])) or not _number(value["confidence"]):
        raise ArgumentError("not an accuracy target", argument="accuracy",
                            fix="pass accuracy=dp.Accuracy(half_width=5)")
    return Accuracy(value["half_width"], value["confidence"], value["notion"])


def _number(value: object) -> bool:
    return type(value) in (int, float)


def budget_to_json(budget: Budget) -> dict[str, str]:
    """A budget as its type's name and its fields as exact fractions."""
    name = type(budget).__name__
    if name not in BUDGETS:
        raise ArgumentError(f"expected dp.PureDP, dp.ApproxDP or dp.ZCDP, got {name}", argument="budget",
                            fix="pass a budget such as dp.PureDP(0.5)")
    return {"type": name, **{f: str(Fraction(getattr(budget, f))) for f in BUDGETS[name][1]}}


def budget_from_json(value: object) -> Budget | None:
    """The budget :func:`budget_to_json` wrote (``None`` stays ``None``), built by its public constructor."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str) or value["type"] not in BUDGETS \
            or len(value) != 1 + len(BUDGETS[value["type"]][1]):
        raise ArgumentError("not a budget", argument="budget", fix="pass a budget such as dp.PureDP(0.5)")
    kind, fields = BUDGETS[value["type"]]
    numbers = []
    for field in fields:
        text = value.get(field)
        if not isinstance(text, str) or not _FRACTION.fullmatch(text):
            raise ArgumentError(f"{field} is not an exact fraction", argument="budget",
                                fix="pass a budget such as dp.PureDP(0.5)")
        try:
            number = Fraction(text)
        except ZeroDivisionError:
            raise ArgumentError(f"{field} divides by zero", argument="budget",
                                fix="pass a budget such as dp.PureDP(0.5)") from None
        if not _decimal(number.denominator):
            raise ArgumentError(f"{field} is not a decimal fraction (its denominator has a prime factor other "
                                "than 2 and 5)", argument="budget",
                                fix="pass the budget as a decimal number, e.g. dp.PureDP(0.3333) for a third")
        numbers.append(number)
    return kind(*numbers)


def _decimal(denominator: int) -> bool:
    """Whether ``denominator`` is 2^i·5^j: a decimal (or binary) fraction's, as every float's is.

    The session's totals are exact: denominators an analyst picks with new prime factors each time would
    grow its spent budget's denominator without bound (past the 4,300 digits Python writes as text, so
    ``remaining()`` and ``spent()`` would fail for every analyst). Decimal ones stay within 10^400.
    """
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1
