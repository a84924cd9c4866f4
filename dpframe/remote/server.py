"""``dp.Server``: a session served to analysts in other processes, who send SQL and receive releases.

An analyst whose code runs in the session's process can patch the engine, read private attributes or
change a process-wide setting while a query runs (docs/guarantees.md, "Same-process code is trusted").
A server keeps the session, its data and its ledger in the data owner's process; the analyst's process
holds only a :class:`~dpframe.remote.client.Remote`, which sends SQL text, public keys and budgets, and
receives what a release, ``cost``, ``explain``, ``remaining``, ``spent`` or ``history`` returns in
process — nothing else crosses (:mod:`dpframe.remote.wire`: JSON and Arrow, never a pickle).

Each connection is served on its own thread, after the client proved it holds ``authkey``; every
request runs through the session's public API, with its checks, its accountant and its ledger, so all
clients draw on the session's one budget. A request the session refuses is answered with the error it
raised (the same class and text as in process); any other failure with a :class:`~dpframe.RemoteError`
naming only the exception's type (its text stays in the server's log, ``logging`` name
``dpframe.remote``).

Example:
    >>> import polars as pl, secrets, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"g": ["a", "b", "a"]})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> key = secrets.token_bytes(32)
    >>> with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server:
    ...     with dp.connect(server.address, authkey=key) as remote:
    ...         remote.sql("SELECT COUNT(*) AS n FROM t").cost(dp.PureDP(0.5))
    PureDP(epsilon=1/2)

"""

from __future__ import annotations

import json
import logging
import os
import selectors
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any

import polars as pl

from dpframe.accounting.ledger import encode
from dpframe.errors import (
    ArgumentError,
    BudgetExceededError,
    DPFrameError,
    NoIntervalWarning,
    PlanError,
    RemoteError,
    TopKWarning,
    handed_to,
)
from dpframe.family import check_format
from dpframe.frame import Query
from dpframe.interactive.ptr import gated_release
from dpframe.interactive.stopping import run_until
from dpframe.plan.rowlevel import tree_objects
from dpframe.remote import wire
from dpframe.remote.replay import replay
from dpframe.remote.tools import STREAMS, Tools, call_of
from dpframe.remote.values import (
    MAX_ATTACHED,
    Attached,
    Unpacker,
    call_as_given,
    pack_charge,
    pack_result,
    unplaced,
)
from dpframe.sealed import Sealed
from dpframe.session import Session, check_session
from dpframe.signatures import refusal
from dpframe.sql.parse import parse
from dpframe.tuning import Diagnosed

AUTH_SECONDS = 10.0
"""A connection that has not proved it holds the key within this many seconds of its start is closed."""
YEAR_SECONDS = 365 * 86_400
"""The longest ``idle_timeout`` (``None`` waits for ever)."""
IDLE_SECONDS = 3600.0
"""A client that sends nothing for this long is disconnected (its open tools closed): ``dp.Server``'s default."""
STREAM_IDLE_SECONDS = 60.0
"""A sparse vector or channel unused this long is closed when another client asks for one: ``dp.Server``'s default."""
FUNCTIONS: Mapping[str, Callable[..., Any]] = MappingProxyType({"gated_release": gated_release,
                                                                 "run_until": run_until})
"""The session's interactive functions served as requests of their name (their queries remote ones)."""
PADDED = ("collect", "use", *FUNCTIONS)
"""The requests whose replies ``dp.Server(pad=...)`` holds: those that may read private rows (a release, an
interactive tool's call, a gated release, each step of a ``run_until``), and an ``open`` that closed another
client's idle sparse vector (whose close may release values: ``stream_idle``). The others (``cost``, ``explain``,
``schema``, ``remaining``, ...) never read a row."""
LEDGER_READS = ("history", "spent", "remaining", "explain")
"""The requests that show the session's ledger (its charges and their statuses, the spent and remaining budget;
``explain``'s budget block). Under ``pad`` each waits until every request of :data:`PADDED` (or ``open``) in flight
when it arrived has sent its reply (:class:`Flights`): a charge's status turns from ``reserved`` to ``committed``
when its release's work ends, and a refund lowers the spent budget then, which a second connection polling
``history()`` saw to the millisecond while the release's reply was held."""
LEDGER_TRIES = 50
"""The most times a ledger read under ``pad`` is read again because a release started while it read."""
MAX_CHECKED = 64
"""The most positional arguments, and keywords, a ``refusal`` request names (a query's call its client refused)."""
STOP_LIMIT = 4096
"""The bytes of an analyst's answer to ``run_until``'s stopping question."""
SQL_CHARACTERS = 1 << 18
"""The longest SQL text a server reads (characters)."""
SQL_OBJECTS = 5000
"""JSON objects of a SQL query's parsed tree from which a server refuses it (a chain's expression: 2,000 each)."""
POLL_SECONDS = 0.2
"""How often the accepting thread looks whether the server was closed."""
LOG = logging.getLogger("dpframe.remote")
Address = tuple[str, int] | str


class Server(Sealed):
    """Serve ``session`` on ``address`` (``(host, port)`` for TCP, port 0 picks a free one; a path for a Unix socket).

    Only clients holding ``authkey`` (bytes, at least 16: e.g. ``secrets.token_bytes(32)``) are served;
    at most ``max_clients`` at once (others are closed at once). :meth:`start` serves on a background
    thread, :meth:`serve_forever` on the calling one; :meth:`close` (or leaving a ``with`` block) stops.
    The key is never sent, and every message after the handshake is tagged for its connection
    (:class:`~dpframe.remote.wire.Channel`); ``tls=`` (an ``ssl.SSLContext`` holding the server's
    certificate) also encrypts the traffic over TCP, else use a network you trust, or tunnel it (SSH).
    A client silent for ``idle_timeout`` seconds (default an hour; ``None``: never) is disconnected, and the
    interactive tools it held open are closed (a session opens one sparse vector or channel at a time). A sparse
    vector or target-charging channel a client holds open but has not used for ``stream_idle`` seconds (default a
    minute; ``None``: never) is closed when another client asks to open one, as leaving its ``with`` block would (its
    charge stands; its later calls are refused saying why), so one analyst cannot keep the session's one stream
    from the others by holding it idle. An open refused while another user holds the stream names nothing of it;
    the data owner's own stream (opened in process) is never closed so: the server cannot see its calls.
    ``pad`` (seconds; default ``None``, off) hides how long a release took: each reply to a request that may
    read private rows (:data:`PADDED`) leaves ``pad`` seconds after the request arrived, or at the first of
    2·pad, 4·pad, ... that its work did not overrun (:func:`reply_time`); pick one above your longest query. A
    request that shows the ledger (:data:`LEDGER_READS`) then waits for the held replies of the releases in flight
    when it arrived (:class:`Flights`), so another connection's ``history()`` does not show when a release ended.
    """

    def __init__(self, session: Session, address: Address, *, authkey: bytes, max_clients: int = 32,
                 tls: ssl.SSLContext | None = None, idle_timeout: float | None = IDLE_SECONDS,
                 pad: float | None = None, stream_idle: float | None = STREAM_IDLE_SECONDS) -> None:
        check_session(session)
        if isinstance(max_clients, bool) or not isinstance(max_clients, int) or max_clients < 1:
            raise ArgumentError(f"expected a whole number ≥ 1, got {max_clients!r}", argument="max_clients",
                                fix="pass max_clients=32")
        if idle_timeout is not None and (isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int | float)
                                         or not 0 < idle_timeout <= YEAR_SECONDS):
            raise ArgumentError(f"expected seconds from 0 to a year, or None, got {idle_timeout!r:.40}",
                                argument="idle_timeout", fix=f"pass idle_timeout={IDLE_SECONDS:g} (or None: never)")
        if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int | float) or not 0 < pad < 86400):
            raise ArgumentError(f"expected a positive number of seconds below a day, or None, got {pad!r}",
                                argument="pad", fix="pass pad=2.0, longer than your longest query takes (or None: off)")
        if stream_idle is not None and (isinstance(stream_idle, bool) or not isinstance(stream_idle, int | float)
                                        or not 0 < stream_idle <= YEAR_SECONDS):
            raise ArgumentError(f"expected seconds from 0 to a year, or None, got {stream_idle!r:.40}",
                                argument="stream_idle", fix=f"pass stream_idle={STREAM_IDLE_SECONDS:g} (or None: "
                                                            "a stream stays open until its client closes it or leaves)")
        self._idle = None if idle_timeout is None else float(idle_timeout)
        self._stream_idle = None if stream_idle is None else float(stream_idle)
        self._pad = None if pad is None else float(pad)
        self._session = session
        self._authkey = wire.check_authkey(authkey)
        self._tls = wire.check_tls(tls, address)
        self._max_clients = max_clients
        self._listener, self._path = _listen(address)
        self._listener.settimeout(POLL_SECONDS)
        self._address: Address = self._path if self._path is not None else \
            (str(self._listener.getsockname()[0]), int(self._listener.getsockname()[1]))
        self._clients: set[socket.socket] = set()
        self._tools: set[Tools] = set()        # each connection's open interactive tools
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._flights = Flights()

    @property
    def address(self) -> Address:
        """Where clients connect: ``(host, port)`` with the port chosen, or the Unix socket's path."""
        return self._address

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed.is_set()

    def start(self) -> Server:
        """Serve on a background (daemon) thread; returns the server."""
        with self._lock:
            if self._thread is not None or self.closed:
                raise RemoteError("this server was already started", argument="start", fix="start a server once")
            self._thread = threading.Thread(target=self.serve_forever, name="dpframe-server", daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Accept and serve clients on the calling thread until :meth:`close`."""
        while not self.closed:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.closed:
                    return
                raise
            with self._lock:
                full = len(self._clients) >= self._max_clients or self.closed
                if not full:
                    self._clients.add(conn)
            if full:
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="dpframe-client", daemon=True).start()

    def close(self) -> None:
        """Stop accepting, close every client's connection.

        A request being answered runs on, and what it reserved stays charged, but its reply is not sent
        (its client gets a ``RemoteError``; ``history()`` shows the charge).
        """
        with self._lock:
            if self.closed:
                return
            self._closed.set()
            clients = list(self._clients)
        self._flights.wake()                            # ledger reads waiting for a release's reply: closed now
        try:
            self._listener.shutdown(socket.SHUT_RDWR)   # wakes the accepting thread now (Linux), not at its next poll
        except OSError:
            pass                                        # elsewhere it sees the close within POLL_SECONDS
        self._listener.close()
        for conn in clients:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self._path is not None:
            Path(self._path).unlink(missing_ok=True)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dp.Server {self.address!r}{' closed' if self.closed else ''}>"

    def _serve(self, conn: socket.socket) -> None:
        """One client: TLS (if asked), the handshake, then requests until it hangs up (or breaks the protocol)."""
        tools: Tools | None = None
        try:
            deadline = time.monotonic() + AUTH_SECONDS       # for the whole handshake, not each read
            conn.settimeout(AUTH_SECONDS)
            wire.no_delay(conn)
            if self._tls is not None:
                with self._lock:        # the wrap only: the handshake runs unlocked (accepting takes this lock)
                    self._clients.discard(conn)
                    conn = self._tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
                    self._clients.add(conn)
                _tls_handshake(conn, deadline)
            ours = wire.nonce()
            wire.send(conn, wire.VERSION + ours)
            theirs = wire.receive(conn, wire.NONCE, deadline)
            if len(theirs) != wire.NONCE:
                raise RemoteError("the client's challenge is not a fresh nonce", argument="connection",
                                  fix="use dp.connect's client")
            wire.challenge(conn, self._authkey, b"client", ours, deadline)
            wire.prove(conn, self._authkey, b"server", theirs)
            conn.settimeout(self._idle)         # an idle client is closed, and its tools with it
            channel = wire.Channel(conn, self._authkey, b"server", ours, theirs)
            tools = Tools(self._session)
            with self._lock:
                self._tools.add(tools)
            while not self.closed:
                start = channel.received_bytes      # a request's frames share one limit, not one each
                request = channel.receive_json(wire.REQUEST_LIMIT)
                count = request.get("attached", 0)
                if type(count) is not int or not 0 <= count <= MAX_ATTACHED:
                    raise RemoteError("a request with a bad count of frames", argument="attached",
                                      fix="use dp.connect's client")
                attached = Attached([channel.receive(wire.REQUEST_LIMIT - (channel.received_bytes - start))
                                     for _ in range(count)])
                op = request.get("op")
                flight = self._flights.board() if self._pad is not None and (op in PADDED or op == "open") else None
                asker = Asker(channel, self._pad, self._hold, self._flights, flight)    # run_until's questions
                try:
                    ledger = self._pad is not None and op in LEDGER_READS
                    read = self._read_ledger(request, attached, tools, asker) if ledger else \
                        self._answer(request, attached, tools, asker)
                    if read is None:
                        break   # closed while waiting: nothing sent
                    reply, frames = read
                    if asker.broken is not None:    # the run was failed, charged; the connection is cut, not answered
                        raise asker.broken
                    if self._pad is not None and (op in PADDED or asker.read_rows) \
                            and not self._hold(asker.started, self._pad):
                        break   # closed while the reply was held: not sent, as one still running then
                    channel.send_json(reply)
                    for frame in frames:
                        channel.send(wire.frame_bytes(frame))
                finally:
                    self._flights.land(asker.flight)    # its reply is out (or never will be): the ledger may show it
        except (RemoteError, OSError):
            pass                                # a client that hangs up, times out or breaks the protocol
        finally:
            if tools is not None:
                with self._lock:
                    self._tools.discard(tools)
                try:
                    tools.close_all()           # as leaving the tools' with blocks would
                except Exception:
                    LOG.exception("closing a connection's interactive tools failed")
            with self._lock:
                self._clients.discard(conn)
            conn.close()

    def _hold(self, arrived: float, pad: float) -> bool:
        """Wait until the reply to a request that arrived at ``arrived`` (``time.monotonic()``) may leave (``pad``).

        False when the server was closed meanwhile: the reply is not sent (sent at once, its time would show when the
        request's work ended, to within the close).
        """
        took = time.monotonic() - arrived
        at = reply_time(took, pad)
        if at > pad:        # the data owner's log: the period to raise (the client sees only the multiple)
            LOG.warning("a reply took %.3g s, more than pad=%g s: sent at %g s", took, pad, at)
        return not self._closed.wait(max(arrived + at - time.monotonic(), 0.0))     # close() does not wait for it

    def _read_ledger(self, request: Mapping[str, Any], attached: list[bytes], tools: Tools,
                     asker: Asker) -> tuple[dict[str, Any], list[pl.DataFrame]] | None:
        """A ledger read's reply under ``pad`` (:data:`LEDGER_READS`), once the releases in flight sent theirs.

        Read again when a request boarded while it read (it may have reserved, or settled, meanwhile); None when the
        server was closed while it waited.
        """
        for _ in range(LEDGER_TRIES):
            upto = self._flights.issued()
            if not self._flights.wait(upto, self._closed):
                return None
            answer = self._answer(request, attached, tools, asker)
            if self._flights.issued() == upto:      # no request boarded while it read: what it shows is settled
                return answer
        return _error(RemoteError(f"the session's ledger changed while this request read it, {LEDGER_TRIES} times",
                                  argument="request", fix="ask again (other clients' releases were starting)")), []

    def _answer(self, request: Mapping[str, Any], attached: list[bytes], tools: Tools,
                asker: Asker) -> tuple[dict[str, Any], list[pl.DataFrame]]:
        """The reply to one request (and the Arrow streams sent with it), and the frames that follow it."""
        try:
            with handed_to(asker.warn):     # a warning the session gives goes to the analyst at once (Asker.warn)
                value, frames = self._run(request, attached, tools, asker)
            return {"ok": True, "value": value, "frames": len(frames)}, frames
        except DPFrameError as e:       # a SQL post-processing failure's charged release comes with it, as in process
            released = getattr(e, "released", None)
            if isinstance(released, pl.DataFrame):
                return {**_error(e), "frames": 1}, [released]
            return _error(e), []
        except BaseException as e:      # a Polars panic too; the text may say more than the API does: logged only
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            if e is not asker.broken:   # the client gone while asked (hung up, silent) is no failure of the server's
                LOG.exception("a remote request failed")
            return _error(RemoteError(f"the server failed this request ({type(e).__name__}); its log says why",
                                      argument="request", fix="ask the data owner")), []

    def _run(self, request: Mapping[str, Any], attached: list[bytes], tools: Tools,
             asker: Asker) -> tuple[Any, list[pl.DataFrame]]:
        sess, op = self._session, request.get("op")
        if op in ("open", "use", *FUNCTIONS):   # their queries are described like requests
            values = Unpacker(attached, lambda source: self._query(source, attached, values))
            if op == "open":
                if request.get("tool") in STREAMS:
                    asker.read_rows = self._release_idle_stream(tools)
                return tools.open(request, values), []
            frames: list[pl.DataFrame] = []
            if op in FUNCTIONS:             # the session's function, its arguments as the analyst gave them
                _, args, kwargs = call_of(request, "op")
                unpacked = {k: values.unpack(v, k) for k, v in kwargs.items()}
                if op == "run_until":       # its stopping rule runs in the analyst's process, asked between steps
                    unpacked["stop"] = asker.stop
                out = call_as_given(FUNCTIONS[str(op)], [values.unpack(a, str(op)) for a in args], unpacked)
                return pack_result(out, frames), frames
            return pack_result(tools.use(request, values), frames), frames
        if op == "tables":
            return sess.tables(), []
        if op == "schema":          # a table's, or a method chain's frame's (after its with_columns, select ...)
            shown = replay(sess, request["chain"], attached, frame=True) if "chain" in request else \
                sess.table(_text(request, "table"))
            return None, [pl.DataFrame(schema=shown.collect_schema())]
        if op in ("remaining", "spent"):
            return encode(sess.remaining() if op == "remaining" else sess.spent()), []
        if op == "history":
            return None, [sess.history()]
        if op == "refusal":         # a remote query's arguments its client refused: refused as this query's method does
            query = self._query(request, attached)
            call, count, keywords = request.get("call"), request.get("positional"), request.get("keywords")
            if call not in ("cost", "explain", "collect") or type(count) is not int or not 0 <= count <= MAX_CHECKED \
                    or not isinstance(keywords, list) or len(keywords) > MAX_CHECKED \
                    or not all(isinstance(k, str) and len(k) <= 256 for k in keywords):
                raise ArgumentError("not a call of a query", argument="call", fix="use dp.connect's client")
            refused = refusal(getattr(query, call), [None] * count, dict.fromkeys(keywords))
            if refused is not None:
                raise refused
            return None, []
        if op not in ("cost", "explain", "collect"):
            raise RemoteError(f"unknown request {op!r}", argument="op", fix="use dp.connect's client")
        query = self._query(request, attached)
        values = Unpacker(attached)
        budget = _argument(request.get("budget"), "budget", values, wire.budget_from_json)
        options = _options(request, op, values)
        refused = refusal(getattr(query, op), [budget], options)
        if refused is not None:     # an option the query does not take (a top-k query's ci=): refused as in process
            raise refused           # (before the charge)
        if op == "cost":
            return pack_charge(query.cost(budget, **options), sess.accountant), []
        if op == "explain":
            form = values.unpack(request.get("format", "text"), "format")
            check_format(form)          # the session's own check: the same error as in process
            shown = query.explain(budget, format=form, **options)
            return (str(shown) if form == "text" else json.loads(json.dumps(shown, default=str))), []
        out = query.collect(budget, **options)      # its warnings went to the analyst when given (Asker.warn)
        if isinstance(query, Query):
            return None, list(out) if isinstance(out, Diagnosed) else [out]
        frames = []
        return {"result": pack_result(out, frames)}, frames      # any family's result: a frame, a model, a tuple


    def _release_idle_stream(self, asking: Tools) -> bool:
        """Close another connection's stream tool unused for ``stream_idle`` seconds, for ``asking`` to open one.

        True when one was closed (a sparse vector's close may measure its ``release`` values: the reply is then held as
        a release's under ``pad``). Which tool sat idle, and for how long, are facts of the requests' times only.
        """
        if self._stream_idle is None:
            return False
        now = time.monotonic()
        with self._lock:
            held = [(tools, found) for tools in self._tools if tools is not asking
                    for found in [tools.idle_stream(now)] if found is not None]
        released = False
        for tools, (handle, idle) in held:
            if idle >= self._stream_idle:
                released = tools.release_idle(handle, self._stream_idle) or released   # re-checked under its lock
        return released

    def _query(self, source: object, attached: list[bytes], values: Unpacker | None = None) -> Any:
        """The query a request describes: its SQL (and public keys), or its method chain replayed on the session.

        ``values``: the request's unpacker when the query is one of its arguments (its expressions count with the
        request's others).
        """
        if not isinstance(source, Mapping):
            raise ArgumentError("not a query", argument="query", fix="pass a remote query (remote.sql or a chain)")
        if "chain" in source:
            return replay(self._session, source["chain"], attached, values=None if values is None else values.chained())
        values = Unpacker(attached) if values is None else values
        keys: Any = source.get("keys")
        given = isinstance(keys, dict) and len(keys) == 1 and "$value" in keys   # keys that are not lists, as given
        if keys is not None and not given and not (type(keys) is int and 0 <= keys < len(attached)):
            raise ArgumentError("keys that were not sent", argument="keys", fix="use dp.connect's client")
        text = _text(source, "sql")
        _check_sql_size(text, values)
        return self._session.sql(text, keys=values.unpack(keys["$value"], "keys") if given else
                                 None if keys is None else wire.read_keys(attached[keys]))


class Asker:
    """Asks the analyst's process during a request: whether a remote ``run_until`` stops, and to warn a warning.

    ``stop(results)`` sends the results released since the last question (``{"ask": "stop", "frames": n}`` and
    their Arrow streams) and waits for ``{"stop": true|false}``: ``run_until``'s ``stop`` rule runs there. An answer
    that is not a boolean, or the analyst's rule failing (``{"error": "ValueError"}``), fails the run: its worst cell
    stays charged, as an exception raised by ``stop`` does in process.

    ``warn(warning)`` (the request's :func:`~dpframe.errors.emit`) sends a warning when the session gives it
    (``{"ask": "warn", "kind": "NoIntervalWarning", "warning": text, "outputs": [...]}``; a SQL ``TOP_K``'s
    ``TopKWarning`` with its outcome's fields and keys), before the request goes on, and waits for
    ``{"warned": true}``: warned at the analyst's line, at the moment it is in process (a ``NoIntervalWarning`` before
    the charge, a ``TopKWarning`` after the release). ``{"warned": false}`` (the analyst's filters turned it into an
    exception, which the client raises) stops the request there, as that exception does in process: before the
    charge, nothing is charged.

    A padded server holds each question as it holds a reply, from when the request's work began (:attr:`started`: its
    arrival, then each answer's), so a step's time shows only as a doubling of ``pad``, and does not send it when the
    server was closed meanwhile (as a held reply). ``hold`` (the server's wait for a padded reply: false when the server
    was closed) receives public values only: two times.

    The connection failing while asking (the analyst gone, silent for the server's ``idle_timeout``, the server
    closed, or an answer that breaks the protocol: too long, not a JSON object) fails the request too, and is kept in
    :attr:`broken`: the server then closes the connection rather than reply (a late answer would be read as the
    next request, and its reply as the reply to the analyst's next call), and logs no failure of its own for it.
    """

    def __init__(self, channel: wire.Channel, pad: float | None, hold: Callable[[float, float], bool],
                 flights: Flights | None = None, flight: int | None = None) -> None:
        self._channel, self._pad, self._hold = channel, pad, hold
        self._flights = flights
        self.flight = flight        # the request's ticket in ``flights`` (None: not in flight, or landed to ask)
        self._sent = 0
        self.started = time.monotonic()
        self.broken: OSError | RemoteError | None = None
        self.read_rows = False      # a request not in PADDED that read rows all the same (held as one under pad)

    def stop(self, results: list[pl.DataFrame]) -> bool:
        """The analyst's answer for ``results`` (run_until's released results so far)."""
        new = results[self._sent:]
        answer = self._ask({"ask": "stop"}, new)
        self._sent = len(results)
        if type(answer.get("stop")) is bool:
            return bool(answer["stop"])
        error = answer.get("error")
        name = error if isinstance(error, str) and error.isidentifier() and len(error) <= 64 else "StopFailed"
        raise type(name, (Exception,), {})("the analyst's stopping rule failed")

    def warn(self, warning: Warning) -> None:
        """Warn ``warning`` in the analyst's process now; a RemoteError when their filters raised it (it stops here)."""
        question: dict[str, Any]
        frames: list[pl.DataFrame] = []
        if isinstance(warning, NoIntervalWarning):
            question = {"warning": str(warning), "outputs": list(warning.outputs)}
        elif isinstance(warning, TopKWarning):      # its outcome's fields, and its keys (a partial result's) as a frame
            outcome = warning.outcome
            keys = getattr(outcome, "keys", None)
            question = {"warning": str(warning), "outcome": type(outcome).__name__, "k": getattr(outcome, "k", None),
                        "method": getattr(outcome, "method", None), "reason": getattr(outcome, "reason", None)}
            frames += [keys] if isinstance(keys, pl.DataFrame) else []
        else:                                       # no other kind is given by emit
            warnings.warn(warning, stacklevel=2)
            return
        answer = self._ask({"ask": "warn", "kind": type(warning).__name__, **question}, frames)
        if answer.get("warned") is not True:
            raise RemoteError("the analyst's warning filters turned a warning into an exception", argument="warnings",
                              fix="the client raises that exception; this request stopped where it was warned")

    def _ask(self, question: dict[str, Any], frames: list[pl.DataFrame]) -> dict[str, Any]:
        """Send ``question`` (and ``frames``: its ``"frames"`` counts them), held while padded; the analyst's answer."""
        if self._pad is not None and not self._hold(self.started, self._pad):
            self.broken = RemoteError("the server was closed while a question was held", argument="connection",
                                      fix="connect again and read remote.history(): the request may have been charged")
            raise self.broken
        flights = self._flights if self.flight is not None else None
        if flights is not None:     # the question leaves as a held reply would: the ledger may show what came before
            flights.land(self.flight)
            self.flight = None
        try:
            self._channel.send_json({**question, "frames": len(frames)})
            for frame in frames:
                self._channel.send(wire.frame_bytes(frame))
            answer = self._channel.receive_json(STOP_LIMIT)
        except (OSError, RemoteError) as e:
            self.broken = e
            raise
        finally:        # (a stop rule reading history() on another connection meanwhile is answered, not stalled)
            if flights is not None:
                self.flight = flights.board()
        self.started = time.monotonic()
        return answer


class Flights:
    """The requests in flight whose replies ``pad`` holds (and ``open`` s), by ticket: what a ledger read waits for.

    A request boards when it arrives and lands once its reply was sent (or will never be); a ledger read
    (:data:`LEDGER_READS`) arriving meanwhile waits until every ticket issued before it has landed, so the ledger it
    shows holds no more than the replies already sent tell: the status of a charge, or a refund, shows no earlier than
    its release's held reply. A request asking its analyst a question (``run_until``'s ``stop``, a warning) lands
    while it waits for the answer, the question being held as a reply is.

    Example:
        >>> import threading
        >>> flights = Flights()
        >>> first = flights.board()
        >>> flights.wait(flights.issued(), threading.Event(), timeout=0.01)
        False
        >>> flights.land(first)
        >>> flights.wait(flights.issued(), threading.Event())
        True

    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._issued = 0
        self._flying: set[int] = set()

    def board(self) -> int:
        """A new ticket, in flight until :meth:`land`."""
        with self._changed:
            self._issued += 1
            self._flying.add(self._issued)
            return self._issued

    def land(self, ticket: int | None) -> None:
        """``ticket`` is no longer in flight (None: nothing)."""
        if ticket is None:
            return
        with self._changed:
            self._flying.discard(ticket)
            self._changed.notify_all()

    def issued(self) -> int:
        """The last ticket issued (0: none yet)."""
        with self._changed:
            return self._issued

    def wake(self) -> None:
        """Wake every waiter (the server was closed: they look again)."""
        with self._changed:
            self._changed.notify_all()

    def wait(self, upto: int, closed: threading.Event, timeout: float | None = None) -> bool:
        """Wait until no ticket up to ``upto`` is in flight: True.

        False when ``closed`` is set first, or ``timeout`` seconds passed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while any(ticket <= upto for ticket in self._flying):
                left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
                if closed.is_set() or left <= 0:
                    return False
                self._changed.wait(left)
        return True


def reply_time(took: float, pad: float) -> float:
    """When a padded reply leaves, in seconds after its request arrived: the first of pad, 2·pad, 4·pad, ... ≥ ``took``.

    A client then learns from the time only which of these periods a request's work fell in: nothing while every
    query takes less than ``pad``, and one of a few doublings when one overruns it.

    Example:
        >>> [reply_time(t, 1.0) for t in (0.0, 0.3, 1.0, 1.4, 3.5)]
        [1.0, 1.0, 1.0, 2.0, 4.0]

    """
    at = pad
    while at < took:
        at *= 2
    return at


def _options(request: Mapping[str, Any], op: str, values: Unpacker) -> dict[str, Any]:
    """The options the analyst gave ``op`` (an aggregate's ``ci``, ``diagnostics``, ``accuracy``; ``refund``).

    ``refund`` is the robust median's. The client sends the options its analyst gave, and only those, each as given
    (unpacked: a NumPy scalar as its type), so that the session's checks refuse what they refuse in process before the
    charge: ``ci=False``, ``diagnostics=None``, ``diagnostics=np.float64(0.5)``, and an option given at its default
    value to a query that takes none (``ci=None`` to a top-k query: a ``dp.SignatureError``).
    """
    allowed = {"cost": ("accuracy", "diagnostics"), "explain": ("accuracy",),
               "collect": ("ci", "diagnostics", "accuracy", "refund")}[op]
    return {name: _argument(request[name], name, values, wire.accuracy_from_json) if name == "accuracy" else
            values.unpack(request[name], name) for name in allowed if name in request}


def _argument(value: object, argument: str, values: Unpacker, typed: Callable[[object], Any]) -> Any:
    """A query's budget or accuracy target as the client sent it.

    Its fields (read by ``typed``), or ``{"$value": ...}``: any other value the analyst gave, for the session's own
    check to refuse as in process.
    """
    if isinstance(value, dict) and len(value) == 1 and "$value" in value:
        return values.unpack(value["$value"], argument)
    return typed(value)


def _tls_handshake(conn: ssl.SSLSocket, deadline: float) -> None:
    """TLS's handshake on ``conn``, all of it by ``deadline`` (``TimeoutError`` otherwise).

    However the peer spaces its bytes: a blocking handshake waits up to the socket's timeout for each.
    """
    conn.setblocking(False)
    with selectors.DefaultSelector() as waiting:
        waiting.register(conn, selectors.EVENT_READ)
        while True:
            try:
                conn.do_handshake()
                break
            except ssl.SSLWantReadError:
                waiting.modify(conn, selectors.EVENT_READ)
            except ssl.SSLWantWriteError:
                waiting.modify(conn, selectors.EVENT_WRITE)
            left = deadline - time.monotonic()
            if left <= 0 or not waiting.select(left):
                raise TimeoutError("the TLS handshake did not finish in time")
    conn.settimeout(max(deadline - time.monotonic(), 0.001))


def _check_sql_size(text: str, values: Unpacker) -> None:
    """Refuse SQL longer than :data:`SQL_CHARACTERS`, or of a tree of more than :data:`SQL_OBJECTS` JSON objects.

    Its objects count with the request's other queries and expressions (``values``); all before it is built.

    Building a query takes time growing faster than its size (an ``IN`` list of 4,000 numbers, 19 KB: 19 s; of
    16,000: minutes), time one analyst would take from every other; the bound of a chain's expressions. A text
    the parser refuses passes on, to the session's own error.
    """
    if len(text) > SQL_CHARACTERS:
        raise PlanError(f"the SQL text has more than {SQL_CHARACTERS} characters", argument="sql",
                        fix="send a shorter query (public keys go in keys=, not in the text)")
    try:
        node = parse(text).node
    except Exception:
        return
    objects = tree_objects(node)
    if objects > SQL_OBJECTS:
        raise PlanError(f"the query has more than {SQL_OBJECTS} parts ({objects})", argument="sql",
                        fix="split it into several queries, and pass long lists of public values as keys=")
    values.count(objects, "sql")


def _text(request: Mapping[str, Any], field: str) -> str:
    value = request.get(field)
    if not isinstance(value, str):
        raise ArgumentError(f"expected text, got {type(value).__name__}", argument=field,
                            fix=f"pass {field} as a string")
    return value


def _error(e: DPFrameError) -> dict[str, Any]:
    """The reply carrying ``e``: its class's name, its text and its fields.

    Without the memory addresses the ``repr`` of an argument of the wrong type puts in a text
    (``<Expr ['col("s")'] at 0x7f...>``): addresses in this process, where a new object lands depending on what the
    process allocated before, its private work included.
    """
    out = {"ok": False, "error": type(e).__name__, "message": unplaced(str(e)), "argument": unplaced(e.argument),
           "fix": unplaced(e.fix), "reason": unplaced(e.message)}
    if isinstance(e, BudgetExceededError):
        out |= {"requested": e.requested, "remaining": e.remaining, "difference": e.difference}
    return out


def _listen(address: object) -> tuple[socket.socket, str | None]:
    """A listening socket on ``address`` and, for a Unix socket, its path."""
    if isinstance(address, (str, os.PathLike)):
        path = os.fspath(address)
        fix = "pass the path of a Unix socket that does not exist yet, or (host, port)"
        try:
            taken = not isinstance(path, str) or not path or (os.fsencode(path) and Path(path).exists())
        except (OSError, ValueError) as e:                  # (too long, a lone surrogate, a NUL byte)
            raise ArgumentError(f"cannot use {path!r:.80} as a socket path ({type(e).__name__})", argument="address",
                                fix=fix) from None
        if taken:
            raise ArgumentError(f"{path!r:.80} is empty or exists", argument="address", fix=fix)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
        except (OSError, ValueError) as e:
            sock.close()
            raise ArgumentError(f"cannot listen on {path!r:.80} ({getattr(e, 'strerror', None) or e})",
                                argument="address", fix=fix) from None
        sock.listen()
        return sock, path
    tcp = wire.host_port(address, "pass a Unix socket's path, or ('127.0.0.1', 0) for a free local port")
    try:
        return socket.create_server(tcp), None
    except OSError as e:
        raise ArgumentError(f"cannot listen on {address!r} ({e.strerror or e})", argument="address",
                            fix="pick a free port, or 0 for any") from None
