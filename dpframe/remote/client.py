r"""``dp.connect``: an analyst's handle on a session served by :class:`~dpframe.remote.server.Server` elsewhere.

The analyst's process holds no private data: it sends SQL text, public keys and budgets, and receives the
released frames, costs, plans and the session's spent and remaining budget. The errors are the session's
own (``dp.BudgetExceededError``, ``dp.PlanError``, ...), raised here with the text they had there; a
broken connection or protocol is a :class:`~dpframe.RemoteError`.

Example:
    >>> import polars as pl, secrets, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"g": ["a", "b", "a"]})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> key = secrets.token_bytes(32)
    >>> with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
    ...         dp.connect(server.address, authkey=key) as remote:
    ...     out = remote.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", keys={"g": ["a", "b"]}).collect(dp.PureDP(1))
    ...     out.columns, remote.remaining()
    (['g', 'n'], PureDP(epsilon=0))

"""

from __future__ import annotations

import functools
import inspect
import os
import re
import socket
import ssl
import threading
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from dpframe import errors
from dpframe.accounting.ledger import decode
from dpframe.accounting.rdp_charge import SessionCost
from dpframe.accuracy import Accuracy
from dpframe.aggregate import confidence
from dpframe.budgets import Budget
from dpframe.catalog import check_table_name
from dpframe.errors import (
    ArgumentError,
    DPFrameError,
    NoIntervalWarning,
    RemoteError,
    SignatureError,
    TopKWarning,
    emit,
)
from dpframe.family import check_format
from dpframe.frame import accuracy_target, diagnostics_flag
from dpframe.interactive import ptr, stopping
from dpframe.interactive.odp import check_refund
from dpframe.interactive.stopping import step_list
from dpframe.planning.passes import budget_of
from dpframe.remote import wire
from dpframe.remote.values import Packer, RemoteCharge, Sendable, unpack_charge, unpack_result
from dpframe.sealed import plain
from dpframe.session import Session
from dpframe.signatures import checked, checked_class, refusal, refuse
from dpframe.sql.parse import check_text
from dpframe.sql.query import check_keys
from dpframe.tuning import Diagnosed

if TYPE_CHECKING:
    from dpframe.remote.frames import RemoteFrame
    from dpframe.remote.tools import RemoteTool

M = TypeVar("M", bound=Callable[..., Any])

CONNECT_SECONDS = 10.0
"""How long connecting and the handshake may take."""


def _signed_as(like: Callable[..., Any]) -> Callable[[M], M]:
    """The decorated method shows the parameters of the session's ``like``, which it binds.

    ``help()``, editors and ``inspect.signature`` show them (a frame or query there is a remote one here); the
    method binds them as the session does (:func:`_given`, or the server's session): one signature, kept once.

    Example:
        >>> def f(x, *, y=0): ...
        >>> class C:
        ...     @_signed_as(f)
        ...     def g(self, *args, **kwargs): ...
        >>> str(inspect.signature(C.g))
        '(self, x, *, y=0)'

    """
    def mark(method: M) -> M:
        shown = [p.replace(annotation=re.sub(r"\b(Frame|Query)\b", r"Remote\1", p.annotation))
                 if isinstance(p.annotation, str) else p
                 for p in inspect.signature(like).parameters.values() if p.name != "self"]
        self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        setattr(method, "__signature__", inspect.signature(method).replace(parameters=[self_, *shown]))  # noqa: B010
        return method
    return mark


@checked
def connect(address: tuple[str, int] | str | os.PathLike[str], *, authkey: bytes,
            tls: ssl.SSLContext | None = None) -> Remote:
    """A :class:`Remote` on the server at ``address`` (``(host, port)`` or a Unix socket's path).

    ``authkey``: the key the server was started with (both sides prove they hold it; it is never sent).
    ``tls``: an ``ssl.SSLContext`` that verifies the server's certificate (e.g.
    ``ssl.create_default_context(cafile="server.pem")``), for a server started with ``tls=``.
    """
    key = wire.check_authkey(authkey)
    context = wire.check_tls(tls, address)
    try:
        if isinstance(address, (str, os.PathLike)):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(CONNECT_SECONDS)
            sock.connect(os.fspath(address))
        else:
            tcp = wire.host_port(address, "pass the server's address (dp.Server(...).address)")
            sock = socket.create_connection(tcp, timeout=CONNECT_SECONDS)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=tcp[0])
    except OSError as e:
        raise RemoteError(f"cannot connect to {address!r} ({e.strerror or e})", argument="address",
                          fix="check that the server is running at that address") from None
    try:
        wire.no_delay(sock)
        hello = wire.receive(sock, len(wire.VERSION) + wire.NONCE)
        if not hello.startswith(wire.VERSION) or len(hello) != len(wire.VERSION) + wire.NONCE:
            theirs = hello[:len(wire.VERSION)]
            spoken = (f" (it speaks {theirs.decode('ascii')}, this client {wire.VERSION.decode('ascii')})"
                      if theirs[:-1] == wire.VERSION[:-1] and theirs[-1:].isdigit() else "")
            raise RemoteError(f"the server does not speak this protocol{spoken}", argument="address",
                              fix="connect to a dp.Server of the same dpframe version (install the server's dpframe "
                                  "release here, or the same release on the server)")
        ours = wire.nonce()
        wire.send(sock, ours)
        wire.prove(sock, key, b"client", hello[len(wire.VERSION):])
        wire.challenge(sock, key, b"server", ours)
        sock.settimeout(None)
    except OSError as e:     # a timeout too: a server that does not answer (one expecting TLS, say)
        sock.close()
        raise RemoteError(f"the handshake with {address!r} failed ({e.strerror or type(e).__name__})",
                          argument="address", fix="check the address, the authkey and tls=") from None
    except BaseException:
        sock.close()
        raise
    return Remote(wire.Channel(sock, key, b"client", hello[len(wire.VERSION):], ours))


@checked_class
class Remote:
    """A session served elsewhere: ``sql`` queries, the budget, the history. Thread-safe (one request at a time).

    Made by :func:`connect`; close it (or leave its ``with`` block) when done.
    """

    def __init__(self, channel: wire.Channel) -> None:
        self._channel = channel
        self._sock = channel.sock
        self._lock = threading.Lock()
        self._closed = False
        self._asking: tuple[int, str] | None = None      # the thread answering the server, and its question (_BUSY)

    def sql(self, query: str, *, keys: Mapping[str, Any] | None = None) -> RemoteQuery:
        """A private query in SQL (as ``sess.sql``): nothing is sent until ``cost``, ``explain`` or ``collect``.

        ``keys={"column": [...]}``: public GROUP BY keys, sent as an Arrow table (their types kept).
        """
        query = check_text(plain(query))    # the in-process error (its class and text), before anything is sent
        check_keys(keys)
        sent = _keys(keys)
        if keys is not None and sent is None:
            # not lists of plain values of one type by column name: sent as given, for the session's own checks (in
            # their order) to take or refuse as in process
            given = dict(keys)
            return RemoteQuery(self, lambda packer: {"sql": query, "keys": {"$value": packer.pack(given, "keys")}},
                               repr(query))
        return RemoteQuery(self, lambda packer: {"sql": query, "keys": None if sent is None else packer.attach(sent)},
                           repr(query))

    def table(self, name: str) -> RemoteFrame:
        r"""A private table to query by method chaining, as ``sess.table(name)`` in process.

        The calls are recorded here and replayed on the server's session when ``cost``, ``explain`` or
        ``collect`` is called: the same methods, checks, errors and charges (``docs/remote.md``).

        Example:
            >>> import polars as pl, secrets, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"g": ["a", "b", "a"], "x": [1.0, 5.0, 3.0]})},
            ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), seed=0)
            >>> key = secrets.token_bytes(32)
            >>> with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            ...         dp.connect(server.address, authkey=key) as remote:
            ...     q = remote.table("t").filter(pl.col("x") > 0).group_by("g", keys=["a", "b"]).agg(
            ...         dp.len(), dp.mean("x", bounds=(0, 10)))
            ...     q.cost(dp.PureDP(1)), q.collect(dp.PureDP(1)).columns
            (PureDP(epsilon=1), ['g', 'len', 'x_mean'])

        """
        name = plain(name)          # the session's error (class and text), before anything is sent
        check_table_name(name, self.tables)
        from dpframe.remote.frames import RemoteFrame  # frames builds this module's RemoteQuery

        return RemoteFrame(self, name)

    @_signed_as(Session.sparse_vector)
    def sparse_vector(self, *args: Any, **kwargs: Any) -> RemoteTool:
        """A sparse-vector stream opened in the server's session (``sess.sparse_vector``'s arguments).

        ``sv.test(query)`` with remote queries; ``close()``, ``status()``, ``charged()``, ``answers``,
        ``values``, ``positives``, ``closed``; a context manager (``docs/remote.md``).
        """
        from dpframe.remote.tools import open_tool

        return open_tool(self, "sparse_vector", args, kwargs)

    @_signed_as(Session.target_charging)
    def target_charging(self, *args: Any, **kwargs: Any) -> RemoteTool:
        """A target-charging channel opened (and reserved now) in the server's session.

        ``sess.target_charging``'s arguments; its calls take remote queries and ``dp.above`` / ``below`` /
        ``between`` / ``outside`` targets.
        """
        from dpframe.remote.tools import open_tool

        return open_tool(self, "target_charging", args, kwargs)

    @_signed_as(Session.individual_filter)
    def individual_filter(self, *args: Any, **kwargs: Any) -> RemoteTool:
        """A per-unit Rényi filter opened (and charged) in the server's session.

        ``sess.individual_filter``'s arguments; ``cost(query, budget)``, ``collect(query, budget)``, ``closed``.
        """
        from dpframe.remote.tools import open_tool

        return open_tool(self, "individual_filter", args, kwargs)

    @_signed_as(ptr.robust_median)
    def robust_median(self, *args: Any, **kwargs: Any) -> RemoteRobustMedian:
        """The generalized-PTR median of ``column`` over a remote frame, run in the server's session.

        As ``dpframe.interactive.ptr.robust_median(frame, column, bounds)`` in process (its signature): ``cost(budget)``
        and ``explain(budget)`` are free, ``collect(budget, refund=None)`` returns the noisy median or None (⊥).
        """
        from dpframe.interactive.ptr import robust_median
        from dpframe.remote.frames import RemoteFrame

        given = _given(robust_median, args, kwargs)
        frame = given["frame"]
        if type(frame) is not RemoteFrame or frame._remote is not self:
            raise ArgumentError(f"expected a frame of this connection, got {type(frame).__name__}", argument="frame",
                                fix="pass remote.table(name) (after its filters and derived columns)")
        return RemoteRobustMedian(frame._query("robust_median", (given["column"], given["bounds"]), {}))

    @_signed_as(ptr.gated_release)
    def gated_release(self, *args: Any, **kwargs: Any) -> pl.DataFrame | None:
        """``query``'s release if a noisy ``gate`` count passes ``threshold``, run in the server's session.

        As ``dpframe.interactive.ptr.gated_release(query, budget, gate, threshold, gate_budget, *, refund=None)`` in
        process (its signature, arguments, checks, charges and refund): both queries are method chains ending in
        ``agg``; the released frame, or None when the gate held it back.
        """
        from dpframe.interactive.ptr import gated_release

        given = _given(gated_release, args, kwargs)
        packer = Packer()
        sent = [packer.pack(given[a], "gated_release") for a in ("query", "budget", "gate", "threshold", "gate_budget")]
        value, frames = self._request({"op": "gated_release", "args": sent,
                                       "kwargs": {"refund": packer.pack(given["refund"], "refund")}}, packer.attached)
        out: pl.DataFrame | None = unpack_result(value, frames)
        return out

    @_signed_as(stopping.run_until)
    def run_until(self, *args: Any, **kwargs: Any) -> list[pl.DataFrame]:
        """Collect ``steps`` in order on the server until ``stop(results so far)`` is true at a stopping point.

        As ``dpframe.interactive.stopping.run_until(steps, budget, stop, *, delta=0, stops=None, refund=None)`` in
        process (its signature, arguments, checks, cells and refund): the steps are remote ``agg`` queries; ``stop``
        runs here, in the analyst's process, and receives released values only: the results released so far (the
        server asks between steps; ``stop`` may not use this connection meanwhile). An exception it raises fails the
        run, whose worst cell stays charged.
        """
        from dpframe.interactive.stopping import run_until

        given = _given(run_until, args, kwargs)
        steps, budget, stop = given["steps"], given["budget"], given["stop"]
        delta, stops, refund = given["delta"], given["stops"], given["refund"]
        listed = list(step_list(steps))     # the in-process errors, before anything is sent
        if not callable(stop):
            raise ArgumentError("must be a function of the released results", argument="stop",
                                fix="pass stop=lambda r: ...")
        packer = Packer()
        sent = [packer.pack(listed, "steps"), packer.pack(budget, "budget")]
        # stops as in process: any sequence of step counts (a range, a tuple) is their list; text is refused there
        points = list(stops) if isinstance(stops, Sequence) and not isinstance(stops, str) else stops
        options = {"delta": packer.pack(delta, "delta"), "stops": packer.pack(points, "stops"),
                   "refund": packer.pack(refund, "refund")}
        value, frames = self._request({"op": "run_until", "args": sent, "kwargs": options}, packer.attached,
                                      ask=stop)
        out: list[pl.DataFrame] = unpack_result(value, frames)
        return out

    def tables(self) -> list[str]:
        """The private tables' names."""
        out: list[str] = self._request({"op": "tables"})[0]
        return out

    def schema(self, table: str) -> pl.Schema:
        """A table's columns and their types (public metadata)."""
        table = plain(table)        # the session's error, before sending what JSON may not carry
        check_table_name(table, self.tables)
        return self._request({"op": "schema", "table": table})[1][0].schema

    def remaining(self) -> Budget:
        """The session's remaining budget (every client draws on it)."""
        out: Budget = decode(self._request({"op": "remaining"})[0])
        return out

    def spent(self) -> Budget:
        """What the session has spent, for every client."""
        out: Budget = decode(self._request({"op": "spent"})[0])
        return out

    def history(self) -> pl.DataFrame:
        """The session's ledger of queries (``sess.history()``), every client's.

        The clients of one server are one party (one budget, one ledger: docs/remote.md, "Who sees what"); analysts who
        must not see each other's queries are served a session each.
        """
        out: pl.DataFrame = self._request({"op": "history"})[1][0]
        return out

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the connection broke)."""
        return self._closed

    def close(self) -> None:
        """Close the connection, cutting a request in flight.

        Another thread's, or the ``run_until`` whose ``stop`` calls this: it raises a :class:`~dpframe.RemoteError`,
        and what the server reserved for it stays charged.
        """
        self._closed = True
        try:        # wakes a request waiting for its reply: it closes the socket, holding the lock
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._lock.acquire(blocking=False):      # never waits for the request (stop's own would wait for ever)
            try:
                self._sock.close()
            finally:
                self._lock.release()

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dp.Remote{' closed' if self._closed else ''}>"

    def _request(self, message: dict[str, Any], attached: Sequence[bytes] = (),
                 ask: Callable[[list[pl.DataFrame]], bool] | None = None) -> tuple[Any, list[pl.DataFrame]]:
        """Send one request (and its Arrow streams); the reply's value and frames, or the server's error raised here.

        ``ask``: answers the server's questions before its reply (``run_until``'s ``stop``, given the results
        released so far); it runs in this process, and may not use this connection meanwhile.
        """
        if self._asking is not None and self._asking[0] == threading.get_ident():
            text, argument, fix = _BUSY[self._asking[1]]
            raise ArgumentError(text, argument=argument, fix=fix)
        interrupted: BaseException | None = None       # of the analyst's rule: raised once the reply is read
        with self._lock:
            if self._closed:
                raise RemoteError("this connection is closed", argument="remote", fix="connect again (dp.connect)")
            try:
                self._channel.send_json({**message, "attached": len(attached)})
                for data in attached:
                    self._channel.send(data)
                released: list[pl.DataFrame] = []
                while True:
                    reply = self._channel.receive_json(wire.REPLY_LIMIT)
                    count = reply.get("frames", 0)
                    frames = [wire.frame_from_bytes(self._channel.receive(wire.REPLY_LIMIT))
                              for _ in range(count if type(count) is int else 0)]
                    if "ask" not in reply:
                        break
                    if reply["ask"] == "warn":      # a warning the session gave: warned here, before it goes on
                        interrupted = self._warn(reply, frames) or interrupted
                        continue
                    if ask is None:
                        raise RemoteError("the server asked a question this request does not answer",
                                          argument="message", fix="use a dpframe server of the client's version")
                    released += frames
                    interrupted = self._answer(ask, released) or interrupted
            except BaseException as e:
                # cut mid-exchange (a broken connection, close(), or Ctrl-C while waiting): the reply, or the rest of
                # it, may still come, and the next request would read it as its own, so the connection is closed
                cut = self._closed
                self._closed = True
                self._sock.close()
                if not isinstance(e, OSError):
                    raise
                raise RemoteError("this connection was closed during a request" if cut else
                                  f"the connection failed ({e.strerror or e})", argument="remote",
                                  fix="connect again and read remote.history(): a request in flight may have "
                                      "been charged") from None
            if self._closed:        # close() (on another thread) once the reply had come: it left the socket to us
                self._sock.close()
        if interrupted is not None:     # the analyst's rule was interrupted: the run failed, charged; raised as is
            raise interrupted
        if not reply.get("ok"):
            raise _raised(reply, frames)
        return reply.get("value"), frames

    def _warn(self, question: Mapping[str, Any], frames: list[pl.DataFrame]) -> BaseException | None:
        """Warn the server's warning at the analyst's line, and say whether it was.

        A ``dp.NoIntervalWarning``, or a SQL ``TOP_K``'s ``dp.TopKWarning`` (its outcome rebuilt, ``frames``: its keys).
        When the analyst's filters turn it into an exception (``simplefilter("error", ...)``), the server is told, stops
        the request there (as the exception does in process: a NoIntervalWarning's before the charge), and the
        exception is returned, to be raised once the server's reply is read. The warning's hooks may not use this
        connection meanwhile.
        """
        warning = _top_k_warning(question, frames[0] if frames else None) if question.get("kind") == "TopKWarning" \
            else NoIntervalWarning(str(question.get("warning")), tuple(map(str, question.get("outputs", ()))))
        self._asking = threading.get_ident(), "warn"
        raised = None
        try:
            emit(warning)
        except BaseException as e:  # noqa: BLE001 - raised here once the reply is read, as it is raised in process
            raised = e
        finally:
            self._asking = None
        self._channel.send_json({"warned": raised is None})
        return raised

    def _answer(self, ask: Callable[[list[pl.DataFrame]], bool], released: list[pl.DataFrame]) -> BaseException | None:
        """Send ``ask(a copy of released)`` to the server.

        A failure of the analyst's rule is sent by its type's name (the run fails, as in process); an interrupt
        is returned, to be raised (on this thread) once the server's reply is read.
        """
        self._asking = threading.get_ident(), "stop"
        interrupted = None
        try:
            answer: dict[str, Any] = {"stop": bool(ask(list(released)))}
        except Exception as e:  # noqa: BLE001 - the analyst's code: the run fails, as in process
            answer = {"error": type(e).__name__}
        except BaseException as e:  # KeyboardInterrupt, SystemExit: the run fails, then it goes on up
            answer, interrupted = {"error": type(e).__name__}, e
        finally:
            self._asking = None
        self._channel.send_json(answer)
        return interrupted


_GIVEN: ContextVar[frozenset[str]] = ContextVar("dpframe_remote_given", default=frozenset())
"""The keywords the analyst gave the :class:`RemoteQuery` method running (:func:`_queried` sets them)."""


def _options_given(**options: Any) -> dict[str, Any]:
    """Those of a :class:`RemoteQuery` method's ``options`` the analyst gave (by keyword): its request sends these."""
    given = _GIVEN.get()
    return {name: value for name, value in options.items() if name in given}


_BUSY: Mapping[str, tuple[str, str, str]] = MappingProxyType({
    "stop": ("this connection is waiting for run_until's stop answer", "stop",
             "decide from the results stop receives, or use another connection (dp.connect)"),
    "warn": ("this connection is waiting for the answer to a warning its server gave", "warnings",
             "warn without this connection (a warnings.showwarning hook may not call it), or use another connection "
             "(dp.connect)")})
"""A request from the thread answering the server's question (``run_until``'s stop, a warning) meanwhile: the
refusal (its text, argument and fix); the connection is waiting for that thread's answer."""


def _queried(method: M) -> M:
    """A :class:`RemoteQuery` method whose arguments its signature refuses are refused by the server's query.

    The client's signature is an aggregate's (``collect(budget, *, ci, diagnostics, accuracy)``); the query the server
    builds may be another family's (a TOP_K query's takes a budget only), whose own signature Python refuses them
    with in process: the server names that refusal (:meth:`RemoteQuery._refusal`), or this one when it takes them.
    Only how many positional arguments and which keywords cross (the error names no value). Nothing is charged.
    The request carries the options the analyst gave, and only those (:func:`_options_given`): ``ci=None`` given to
    a query that takes no ``ci`` is refused there as in process, where an option left out is not sent.
    """
    @functools.wraps(method)
    def call(self: RemoteQuery, *args: Any, **kwargs: Any) -> Any:
        token = _GIVEN.set(frozenset(kwargs))
        try:
            return method(self, *args, **kwargs)
        except TypeError as e:
            try:
                refuse(method, (self, *args), kwargs, e)
            except SignatureError as own:
                raise self._refusal(method.__name__, len(args), list(kwargs)) or own from None
            raise
        finally:
            _GIVEN.reset(token)
    return call  # type: ignore[return-value]


class RemoteQuery(Sendable):
    """A query on a :class:`Remote` (SQL, or a method chain): ``cost`` and ``explain`` are free, ``collect`` charges.

    Made by :meth:`Remote.sql` or by a :class:`~dpframe.remote.frames.RemoteFrame`'s ``agg``, ``top_k`` and
    other queries; nothing is sent until one of these three methods is called. ``source`` writes the query's
    description for a request: it receives public values only (the request's :class:`Packer`).
    """

    def __init__(self, remote: Remote, source: Callable[[Packer], dict[str, Any]], shown: str) -> None:
        self._remote, self._source, self._shown = remote, source, shown

    def packed(self, packer: Packer) -> dict[str, Any]:
        """The query's description (its SQL and keys, or its chain), its frames attached to ``packer``."""
        return self._source(packer)

    @_queried
    def cost(self, budget: Budget | None = None, *, accuracy: Accuracy | None = None,
             diagnostics: bool = False) -> SessionCost | RemoteCharge:
        """The exact charge ``collect`` would make, in the session's notion (as ``dp.Query.cost``). Free.

        A charge of the served accountant's own kind (neither a dp budget nor an RDP charge) arrives as a
        :class:`~dpframe.remote.values.RemoteCharge`: its notion, its JSON text and the accountant's description.
        """
        options = _options_given(accuracy=accuracy, diagnostics=diagnostics)
        out: SessionCost | RemoteCharge = unpack_charge(self._ask("cost", budget, options)[0])
        return out

    @_queried
    def explain(self, budget: Budget | None = None, format: str = "text", *, accuracy: Accuracy | None = None) -> Any:
        """The plan, mechanisms, cost and accuracy: text, or with ``format="json"`` a JSON-able dict. Free."""
        return self._ask("explain", budget, {"format": format, **_options_given(accuracy=accuracy)})[0]

    @_queried
    def collect(self, budget: Budget | None = None, *, ci: float | None = None, diagnostics: bool = False,
                accuracy: Accuracy | None = None) -> Any:
        """Reserve the cost on the server, run, and return what the query releases (as its ``collect`` in process).

        An aggregate's frame; with ``diagnostics=True`` a ``dp.Diagnosed(frame, diagnostics)`` (except for an
        ``EXPLAIN`` query's frame); another family's result (top-k keys or ``dp.TopKFailed``, bounds,
        ``InteriorPoint``, ``Threshold`` ...) rebuilt here. ``ci`` and ``accuracy`` as in ``dp.Query.collect``.
        """
        value, frames = self._ask("collect", budget, _options_given(accuracy=accuracy, ci=ci, diagnostics=diagnostics))
        if isinstance(value, dict) and "result" in value:
            return unpack_result(value["result"], frames)
        return Diagnosed(frames[0], frames[1]) if len(frames) == 2 else frames[0]   # EXPLAIN: one frame

    def __repr__(self) -> str:
        return f"<dp.RemoteQuery {self._shown}>"

    def _refusal(self, call: str, positional: int, keywords: list[str]) -> DPFrameError | None:
        """The server's query's error for ``call`` with ``positional`` arguments and ``keywords`` (None: it takes them).

        Free: the server builds the query (as ``cost`` does) and binds its method's signature, calling nothing.
        """
        packer = Packer()
        try:
            self._remote._request({"op": "refusal", **self.packed(packer), "call": call, "positional": positional,
                                   "keywords": keywords}, packer.attached)
        except RemoteError:         # no answer: the client's own refusal
            return None
        except DPFrameError as e:   # the server's query's (or its chain's own error, raised first as in process)
            return e
        return None

    def _ask(self, op: str, budget: Budget | None, options: Mapping[str, Any]) -> tuple[Any, list[pl.DataFrame]]:
        # every argument as the analyst gave it, so that the server's session checks it as in process (its order, its
        # class and text); a dp budget and an accuracy target as their fields (a budget checked here first, as the
        # session does, a tool's or a measure's keeping its own rules); ``options``: those to send (the analyst's)
        packer = Packer()
        sent = _argument(budget, "budget", packer, budget_of,
                         lambda b: wire.budget_to_json(budget_of(b)) if isinstance(b, Budget) else None)
        sent_options = {name: _argument(value, name, packer, lambda a: accuracy_target(budget, a),
                                        lambda a: wire.accuracy_to_json(a) if isinstance(a, Accuracy) else None)
                        if name == "accuracy" else _argument(value, name, packer, OPTION_CHECKS.get(name, _no_option))
                        for name, value in options.items()}
        source = self.packed(packer)
        return self._remote._request({"op": op, **source, "budget": sent, **sent_options}, packer.attached)


@checked_class
class RemoteRobustMedian:
    """A robust median on a :class:`Remote` (:meth:`Remote.robust_median`): free ``cost``/``explain``, ``collect``.

    As ``dpframe.interactive.ptr.RobustMedian`` in process; its chain is replayed on the server's session.
    """

    def __init__(self, query: RemoteQuery) -> None:
        self._query = query

    def cost(self, budget: Budget | None = None) -> SessionCost | RemoteCharge:
        """The worst-case charge (the whole budget; a ⊥ is settled to the test's share), as ``RemoteQuery.cost``.

        Free.
        """
        out: SessionCost | RemoteCharge = unpack_charge(self._query._ask("cost", budget, {})[0])
        return out

    def explain(self, budget: Budget | None = None, format: str = "text") -> Any:
        """The proposals, the test threshold and the costs: text, or a JSON-able dict. Free."""
        return self._query._ask("explain", budget, {"format": format})[0]

    def collect(self, budget: Budget | None = None, *, refund: bool | None = None) -> float | None:
        """The noisy median, or None (⊥) when no proposal passed the test; charged on the server."""
        value, frames = self._query._ask("collect", budget, {"refund": refund})
        out: float | None = unpack_result(value["result"], frames)
        return out

    def __repr__(self) -> str:
        return f"<dp.RemoteRobustMedian {self._query._shown}>"


def _argument(value: object, argument: str, packer: Packer, check: Callable[[Any], object],
              typed: Callable[[Any], object] = lambda value: None) -> Any:
    """An argument of a query's ``cost`` / ``explain`` / ``collect`` as a request carries it.

    ``typed(value)``: its own JSON (a dp budget's fields), or None; else the value as the analyst gave it (packed:
    a NumPy scalar as its type, ``{"$value": ...}`` around a budget or an accuracy target), checked by the server's
    session in its own order, as in process. One JSON cannot carry (bytes, an object) is refused here by
    ``check``, the session's own check of it (the in-process class and text); what that check takes is sent as the
    plain value it stands for.
    """
    own = None if value is None else typed(value)
    if own is not None:
        return own
    try:
        packed = packer.pack(value, argument)
    except DPFrameError:
        packed = packer.pack(check(value), argument)
    return {"$value": packed} if argument in ("budget", "accuracy") and value is not None else packed


def _given(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a call of the session's ``function`` by name, its defaults filled in.

    Arguments its signature does not take get the in-process :class:`~dpframe.errors.SignatureError` (raised before
    the function's body runs).
    """
    refused = refusal(function, args, kwargs)
    if refused is not None:
        raise refused
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _no_option(value: object) -> None:
    raise ArgumentError(f"cannot send a {type(value).__name__} as an option", argument="options",
                        fix="pass a number, text, True/False or None, as the query takes in process")


def _format(value: object) -> str:
    check_format(value)
    return str(value)


OPTION_CHECKS: Mapping[str, Callable[[Any], object]] = MappingProxyType({
    "ci": confidence, "diagnostics": diagnostics_flag, "format": _format, "refund": check_refund})
"""The in-process check of each option a query sends, run here on a value JSON cannot carry: the same error, or the
plain value it stands for (``numpy.float32(0.9)`` as ``ci``) is sent."""


def _keys(keys: Mapping[str, Any] | None) -> bytes | None:
    """``sess.sql``'s keys as the Arrow stream a server reads (their types kept).

    None when they are not a list of plain values of one type for each column name: the session's checks then see
    them as given.
    """
    if keys is None or not all(isinstance(c, str) and not isinstance(v, str | bytes) and hasattr(v, "__iter__")
                               for c, v in keys.items()):
        return None
    try:
        data = wire.frame_bytes(pl.DataFrame([pl.Series(c, [pl.Series(list(v))]) for c, v in keys.items()]))
        wire.read_keys(data)        # as the server reads them
    except (TypeError, ValueError, pl.exceptions.PolarsError, DPFrameError):
        return None
    return data


def _top_k_warning(value: Mapping[str, Any], keys: pl.DataFrame | None) -> TopKWarning:
    """The ``dp.TopKWarning`` a SQL ``TOP_K`` gave on the server, with its outcome rebuilt (``keys``: a partial's)."""
    import dpframe

    results: Any = dpframe          # the result types load from their plugin on first access
    fields = {"k": value.get("k"), "method": value.get("method"), "reason": value.get("reason")}
    partial = value.get("outcome") == "TopKPartial"
    outcome = results.TopKPartial(**fields, keys=keys) if partial else results.TopKFailed(**fields)
    return TopKWarning(str(value.get("warning")), outcome)


def _raised(reply: Mapping[str, Any], frames: Sequence[pl.DataFrame] = ()) -> Exception:
    """The server's error as the same class, with the same text and fields.

    ``frames``: the frame sent with it, the release a SQL post-processing failure holds (its ``.released``).
    """
    kind = getattr(errors, str(reply.get("error")), None)
    if not (isinstance(kind, type) and issubclass(kind, DPFrameError)):
        kind = DPFrameError
    e = kind.__new__(kind)
    Exception.__init__(e, str(reply.get("message")))
    e.message = str(reply.get("reason", reply.get("message")))
    for field in ("argument", "fix", "requested", "remaining", "difference"):
        if field in reply:
            setattr(e, field, reply[field])
    if len(frames) == 1:
        e.released = frames[0]  # type: ignore[attr-defined]
    return e
