r"""Interactive tools on a remote session: sparse vector, target charging and the individual filter.

``remote.sparse_vector(...)``, ``remote.target_charging(...)`` and ``remote.individual_filter(...)`` open the
tool in the server's session (``sess.sparse_vector(...)`` and so on: the same checks and reservation) and
return a :class:`RemoteTool`, the analyst's handle on it. Its methods are the tool's (``sv.test(query)``,
``ch.conditional_release(query, dp.above(x))``, ``filt.collect(query, budget)`` ...), with remote queries
(a method chain's or SQL's) as arguments; only the tool's public methods and read-only properties listed in
:data:`CALLS` can be used. The server keeps each open tool for its connection (at most :data:`MAX_OPEN`),
and closes the ones still open when the connection ends, as leaving their ``with`` block would.

Example:
    >>> import polars as pl, secrets, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"g": [i % 4 for i in range(400)]})},
    ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(4), seed=0)
    >>> key = secrets.token_bytes(32)
    >>> with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
    ...         dp.connect(server.address, authkey=key) as remote:
    ...     with remote.sparse_vector(threshold=50, max_positives=1, budget=dp.PureDP(1)) as sv:
    ...         above = sv.test(remote.table("t").filter(pl.col("g") == 0).agg(dp.len()))
    ...     above, sv.answers, sv.closed
    (True, (True,), True)

"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import unicodedata
from collections.abc import Mapping
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from dpframe.errors import ArgumentError, PlanError
from dpframe.interactive.stream import StreamBusy
from dpframe.remote.values import Packer, Unpacker, call_as_given, unpack_result

if TYPE_CHECKING:
    from dpframe.remote.client import Remote
    from dpframe.session import Session

CALLS: Mapping[str, frozenset[str]] = MappingProxyType({
    "sparse_vector": frozenset({"test", "close", "status", "charged", "answers", "values", "positives", "closed"}),
    "target_charging": frozenset({"test", "conditional_release", "revise", "between", "boundary_test",
                                  "select_best", "close", "status", "hits", "calls", "closed"}),
    "individual_filter": frozenset({"cost", "collect", "closed"}),
})
"""Each tool (by the session method that opens it) and what a remote handle may use of it."""
PROPERTIES = frozenset({"answers", "values", "positives", "closed", "hits", "calls"})
"""The tools' read-only properties (the rest of :data:`CALLS` are methods)."""
MAX_OPEN = 64
"""Tools one connection may hold open (closed ones are kept for their properties until the limit is reached)."""
STREAMS = frozenset({"sparse_vector", "target_charging"})
"""The tools that hold the session's one interactive stream while open (:mod:`dpframe.interactive.stream`)."""
LOG = logging.getLogger("dpframe.remote")
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories escaped in the log: controls (terminal escapes, newlines), format characters (bidirectional
overrides), lone surrogates and line or paragraph separators."""


def escaped(text: str, *, lines: bool = False) -> str:
    r"""``text`` with every control or format character written as its escape (``\x1b``, ``\u202e``).

    ``lines=True`` keeps line breaks (``\n``: a traceback's own); else they are escaped too.

    Example:
        >>> print(escaped("name\x1b[2J\nforged"))
        name\x1b[2J\nforged

    """
    return "".join(c if (lines and c == "\n") or unicodedata.category(c) not in _UNPRINTABLE
                   else c.encode("unicode_escape").decode("ascii") for c in text)


def _traceback(error: BaseException) -> str:
    """A traceback as ``logging`` formats it, escaped (:func:`escaped`).

    An exception's text (which may quote the analyst's names) on one line each; the stack's lines as they are.
    """
    formatted = traceback.TracebackException.from_exception(error)
    messages: set[str] = set()
    chained, seen = [formatted], set()
    while chained:
        one = chained.pop()
        if id(one) in seen:
            continue
        seen.add(id(one))
        messages.update(one.format_exception_only())
        chained += [c for c in (one.__cause__, one.__context__) if c is not None]
    return "".join(escaped(chunk.removesuffix("\n")) + "\n" if chunk in messages else escaped(chunk, lines=True)
                   for chunk in formatted.format()).removesuffix("\n")


class EscapedLog(logging.Filter):
    """The ``dpframe.remote`` log's filter: what a record says, escaped (:func:`escaped`), before any handler writes it.

    An exception's text may quote a name the analyst chose (a table, a column, an alias); written as it is, its
    escape sequences reached the data owner's terminal and its newlines forged log lines.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = escaped(record.getMessage()), None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = _traceback(record.exc_info[1])
        elif record.exc_text:
            record.exc_text = escaped(record.exc_text, lines=True)
        record.exc_info = None          # a handler formats exc_text: the escaped one
        if record.stack_info:
            record.stack_info = escaped(record.stack_info, lines=True)
        return True


LOG.addFilter(EscapedLog())


class Tools:
    """The server's side: one connection's open tools, by handle."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._open: dict[int, tuple[str, Any]] = {}
        self._next = 0
        # Each handle's last call's end (time.monotonic()), the calls of it under way, and the tools the server closed
        # for another client (:meth:`release_idle`): read by other connections' threads, so under a lock.
        self._lock = threading.Lock()
        self._used: dict[int, float] = {}
        self._busy: dict[int, int] = {}
        self._released: dict[int, float] = {}

    def open(self, request: Mapping[str, Any], values: Unpacker) -> dict[str, Any]:
        """Open the tool a request names in the session (a target-charging channel reserves now)."""
        tool, args, kwargs = call_of(request, "tool")
        if tool not in CALLS:
            raise PlanError(f"no interactive tool {tool!r} is served", argument="tool",
                            fix="open one of " + ", ".join(sorted(CALLS)))
        if len(self._open) >= MAX_OPEN:     # closed tools are forgotten first (their handles then read nothing)
            with self._lock:
                self._open = {h: (name, t) for h, (name, t) in self._open.items() if not t.closed}
        if len(self._open) >= MAX_OPEN:
            raise ArgumentError(f"{MAX_OPEN} tools are open on this connection", argument="tool",
                                fix="close some (tool.close(), or leave their with blocks)")
        try:
            opened = call_as_given(getattr(self._session, tool), [values.unpack(a, tool) for a in args],
                                   {k: values.unpack(v, k) for k, v in kwargs.items()})
            if tool == "target_charging":
                opened.__enter__()
        except StreamBusy as e:
            if self._holds_stream():    # this connection's own stream: its text names the caller's own tool
                raise PlanError(e.message, argument=e.argument, fix=e.fix) from None    # a class the client knows
            raise PlanError("the session's interactive stream (a sparse vector or target-charging channel) is still "
                            "open, held by another user of this session (another client, or the data owner's own "
                            "code); a session holds one at a time", argument="session",
                            fix="try again later: a client's stream is closed when it closes it or disconnects, or "
                                "for the next open once unused for the server's stream_idle seconds") from None
        with self._lock:
            self._next += 1
            self._open[self._next] = (tool, opened)
            self._used[self._next] = time.monotonic()
        return {"handle": self._next}

    def use(self, request: Mapping[str, Any], values: Unpacker) -> Any:
        """Call a method of an open tool (or read one of its properties)."""
        handle = request.get("handle")
        if type(handle) is not int or handle not in self._open:
            raise ArgumentError("no such open tool on this connection", argument="handle",
                                fix="open it on this connection (remote.sparse_vector(...), ...)")
        tool, opened = self._open[handle]
        call, args, kwargs = call_of(request, "call")
        if call not in CALLS[tool]:
            raise PlanError(f"{tool} has no method {call!r} a remote handle may use", argument=call,
                            fix="use one of " + ", ".join(sorted(CALLS[tool])))
        if call in PROPERTIES:
            return getattr(opened, call)
        with self._lock:
            idle = self._released.get(handle)
            self._busy[handle] = self._busy.get(handle, 0) + 1
        try:
            if idle is not None and call not in ("close", "status", "charged"):
                raise PlanError(f"the server closed this {tool} after it sat unused for {idle:.0f} s while another "
                                "client asked to open one (a session holds one sparse vector or channel at a time); "
                                "it was closed as leaving its with block does, and its charge stands", argument=call,
                                fix=f"open a new one ({tool}(...)) and use it without long pauses; its status, answers "
                                    "and values can still be read")
            return call_as_given(getattr(opened, call), [values.unpack(a, call) for a in args],
                                 {k: values.unpack(v, k) for k, v in kwargs.items()})
        finally:
            with self._lock:
                self._busy[handle] -= 1
                self._used[handle] = time.monotonic()

    def _holds_stream(self) -> bool:
        """Whether a stream tool (:data:`STREAMS`) this connection opened is still open: the session's one stream."""
        with self._lock:
            return any(tool in STREAMS and not opened.closed for tool, opened in self._open.values())

    def idle_stream(self, now: float) -> tuple[int, float] | None:
        """The connection's open stream tool (:data:`STREAMS`) with no call under way: its handle and idle seconds.

        Idle: since its last call ended (or it opened), before ``now`` (``time.monotonic()``). None when there is none.
        """
        with self._lock:
            for handle, (tool, opened) in self._open.items():
                if tool in STREAMS and not opened.closed and not self._busy.get(handle, 0):
                    return handle, now - self._used[handle]
        return None

    def release_idle(self, handle: int, least: float) -> bool:
        """Close the stream tool ``handle`` for another client if unused ``least`` seconds, as leaving its with block.

        Checked again here, under the lock a call takes (:meth:`use`): no call of it under way and its last call ended
        ``least`` seconds ago, whatever :meth:`idle_stream` saw (a call starting or ending since then keeps the stream).
        The tool's own close settles its reservation exactly once (a sparse vector's ``release`` values are measured
        then, and kept for this connection's ``values``); its later calls are refused, saying why. A failure while
        closing (a value release failing: the stream stays charged in full) is logged by type only, never passed on
        to the client that asked: it is this connection's stream. True when it was closed.
        """
        with self._lock:
            if handle not in self._open or self._busy.get(handle, 0):  # ended meanwhile (close_all), or in use
                return False
            idle = time.monotonic() - self._used[handle]
            if idle < least:
                return False
            tool, opened = self._open[handle]
            self._released[handle] = idle
        try:
            opened.close()
        except Exception as e:      # noqa: BLE001 — the holder's failure, closed and charged in full either way
            LOG.warning("closing an idle %s for another client failed (%s): it stays charged in full", tool,
                        type(e).__name__)
        return True

    def close_all(self) -> None:
        """Close every tool still open (the connection ended), as leaving its ``with`` block would."""
        with self._lock:
            still = list(self._open.values())
        for _, opened in still:
            close = getattr(opened, "close", None)
            if close is not None and not opened.closed:
                close()
        with self._lock:
            self._open.clear()


def call_of(request: Mapping[str, Any], field: str) -> tuple[str, list[Any], dict[str, Any]]:
    """A request's call: the name in ``field``, its positional and keyword arguments (still packed)."""
    name, args, kwargs = request.get(field), request.get("args", []), request.get("kwargs", {})
    if isinstance(name, str) and isinstance(args, list) and isinstance(kwargs, dict):
        return name, args, kwargs
    raise ArgumentError("not a tool's call", argument=field, fix="use dp.connect's client")


class RemoteTool:
    """The analyst's handle on an interactive tool open in a remote session (``remote.sparse_vector(...)`` ...).

    Its methods and properties are the tool's in process (``dp.SparseVector``, target charging's channel,
    ``dp.IndividualFilter``), run in the server's session; queries are remote ones. A context manager: the
    tool is closed when its ``with`` block ends.
    """

    def __init__(self, remote: Remote, tool: str, handle: int) -> None:
        self._remote, self._tool, self._handle = remote, tool, handle

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in CALLS.get(self._tool, ()):
            has = ", ".join(sorted(CALLS.get(self._tool, ())))
            raise AttributeError(f"a remote {self._tool} has no {name!r} (it has {has})")
        if name in PROPERTIES:
            return self._use(name, (), {})
        return lambda *args, **kwargs: self._use(name, args, kwargs)

    def _use(self, call: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        packer = Packer()
        message = {"op": "use", "handle": self._handle, "call": call, "args": [packer.pack(a, call) for a in args],
                   "kwargs": {k: packer.pack(v, k) for k, v in kwargs.items()}}
        value, frames = self._remote._request(message, packer.attached)
        return unpack_result(value, frames)

    def __enter__(self) -> RemoteTool:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if "close" in CALLS[self._tool] and not self._remote.closed:
            self._use("close", (), {})

    def __repr__(self) -> str:
        return f"<dp.RemoteTool {self._tool} #{self._handle}>"


def open_tool(remote: Remote, tool: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> RemoteTool:
    """Open ``tool`` in the remote session (the analyst's side of :meth:`Tools.open`)."""
    packer = Packer()
    message = {"op": "open", "tool": tool, "args": [packer.pack(a, tool) for a in args],
               "kwargs": {k: packer.pack(v, k) for k, v in kwargs.items()}}
    value, _ = remote._request(message, packer.attached)
    return RemoteTool(remote, tool, int(value["handle"]))


__all__ = ["CALLS", "MAX_OPEN", "PROPERTIES", "STREAMS", "RemoteTool", "Tools", "call_of", "open_tool"]
