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

from collections.abc import Mapping
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from dpframe.errors import ArgumentError, PlanError
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


class Tools:
    """The server's side: one connection's open tools, by handle."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._open: dict[int, tuple[str, Any]] = {}
        self._next = 0

    def open(self, request: Mapping[str, Any], values: Unpacker) -> dict[str, Any]:
        """Open the tool a request names in the session (a target-charging channel reserves now)."""
        tool, args, kwargs = call_of(request, "tool")
        if tool not in CALLS:
            raise PlanError(f"no interactive tool {tool!r} is served", argument="tool",
                            fix="open one of " + ", ".join(sorted(CALLS)))
        if len(self._open) >= MAX_OPEN:     # closed tools are forgotten first (their handles then read nothing)
            self._open = {h: (name, t) for h, (name, t) in self._open.items() if not t.closed}
        if len(self._open) >= MAX_OPEN:
            raise ArgumentError(f"{MAX_OPEN} tools are open on this connection", argument="tool",
                                fix="close some (tool.close(), or leave their with blocks)")
        opened = call_as_given(getattr(self._session, tool), [values.unpack(a, tool) for a in args],
                               {k: values.unpack(v, k) for k, v in kwargs.items()})
        if tool == "target_charging":
            opened.__enter__()
        self._next += 1
        self._open[self._next] = (tool, opened)
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
        return call_as_given(getattr(opened, call), [values.unpack(a, call) for a in args],
                             {k: values.unpack(v, k) for k, v in kwargs.items()})

    def close_all(self) -> None:
        """Close every tool still open (the connection ended), as leaving its ``with`` block would."""
        for _, opened in self._open.values():
            close = getattr(opened, "close", None)
            if close is not None and not opened.closed:
                close()
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


__all__ = ["CALLS", "MAX_OPEN", "PROPERTIES", "RemoteTool", "Tools", "call_of", "open_tool"]
