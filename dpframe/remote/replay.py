"""A remote method chain run on the server: the analyst's calls replayed on the session's own API.

The analyst's :class:`~dpframe.remote.frames.RemoteFrame` records calls (``filter``, ``group_by``, ``agg``,
``top_k``, any query family ...) and sends them as ``{"table": name, "steps": [{"call", "args",
"kwargs"}]}``. Here they are made again, one by one, on ``session.table(name)``: the same public methods
with the same checks, errors and charges as in process. Only the public builder methods of a frame and of
a group-by are callable (:data:`FRAME_CALLS`, :data:`GROUP_CALLS`; a plugin's family through ``query``),
and the chain must end in a query; its arguments are rebuilt by :class:`~dpframe.remote.values.Unpacker`.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [1, 2]})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> q = replay(sess, {"table": "t", "steps": [{"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}, [])
    >>> q.cost(dp.PureDP(0.5))
    PureDP(epsilon=1/2)

"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from dpframe.errors import ArgumentError, PlanError
from dpframe.family import Releasable
from dpframe.frame import Frame, GroupBy, Query
from dpframe.interactive.ptr import RobustMedian, robust_median
from dpframe.remote.values import Unpacker, call_as_given
from dpframe.session import Session

FRAME_CALLS = frozenset({"filter", "with_columns", "select", "bound", "drop", "rename", "sample", "group_by", "agg",
                         "query", "bounds", "interior_point", "learn_threshold", "learn_rectangle"})
"""A frame's methods a remote chain may call (its family queries go through ``query``)."""
GROUP_CALLS = frozenset({"agg", "top_k", "query"})
"""A group-by's methods a remote chain may call."""
ENDINGS: Mapping[str, Callable[..., Any]] = MappingProxyType({"robust_median": robust_median})
"""Functions of a frame that end a chain as its query (``robust_median(frame, column, bounds)`` in process)."""
POSITIONAL: Mapping[str, str] = MappingProxyType({"filter": "predicate", "with_columns": "exprs", "select": "exprs",
                                                  "agg": "measures"})
"""The argument an error names for a call's positional arguments, as the method in process names it."""
MAX_STEPS = 256
"""Calls in one chain."""
QUERIES = (Query, Releasable, RobustMedian)
"""What a chain may end in."""


def replay(session: Session, chain: object, attached: list[bytes], *, frame: bool = False,
           values: Unpacker | None = None) -> Any:
    """The query a chain builds on ``session`` (nothing run, nothing charged); the API's own error otherwise.

    ``frame=True``: the chain ends in a frame instead (a remote frame's schema), never a query. ``values``: the
    unpacker of its arguments, when the chain is one of a request's several queries (:meth:`Unpacker.chained`).
    """
    if not isinstance(chain, Mapping) or not isinstance(chain.get("table"), str) \
            or not isinstance(chain.get("steps"), list) or len(chain["steps"]) > MAX_STEPS:
        raise ArgumentError("not a method chain", argument="chain",
                            fix=f"build it with dp.connect(...).table(...) (at most {MAX_STEPS} calls)")
    values = Unpacker(attached) if values is None else values
    built: Any = session.table(chain["table"])
    for step in chain["steps"]:
        call, args, kwargs = _step(step)
        allowed = FRAME_CALLS | ENDINGS.keys() if type(built) is Frame else GROUP_CALLS if type(built) is GroupBy \
            else frozenset()
        if call not in allowed:
            where = "a query" if isinstance(built, QUERIES) else f"a {type(built).__name__}"
            raise PlanError(f"{where} has no method {call!r} a remote chain may call", argument=call,
                            fix="frames take " + ", ".join(sorted(FRAME_CALLS | ENDINGS.keys())) + "; group-bys take "
                                + ", ".join(sorted(GROUP_CALLS)) + "; a query ends the chain")
        positional = POSITIONAL.get(call, call)
        method = functools.partial(ENDINGS[call], built) if call in ENDINGS else getattr(built, call)
        built = call_as_given(method, [values.unpack(a, positional) for a in args],
                              {k: values.unpack(v, k) for k, v in kwargs.items()})
    if frame and type(built) is not Frame:
        raise PlanError("the chain does not end in a frame", argument="chain", fix="ask a frame for its schema")
    if not frame and not isinstance(built, QUERIES):
        raise PlanError("the chain does not end in a query", argument="chain",
                        fix="finish it with .agg(...), .group_by(...).agg(...), .top_k(...) or another query")
    return built


def _step(step: object) -> tuple[str, list[Any], dict[str, Any]]:
    """One recorded call: its method's name, positional and keyword arguments (still packed)."""
    if isinstance(step, Mapping):
        call, args, kwargs = step.get("call"), step.get("args", []), step.get("kwargs", {})
        if isinstance(call, str) and isinstance(args, list) and isinstance(kwargs, dict) \
                and all(isinstance(k, str) for k in kwargs):
            return call, args, kwargs
    raise ArgumentError("not a recorded call", argument="chain", fix="build it with dp.connect(...).table(...)")


__all__ = ["ENDINGS", "FRAME_CALLS", "GROUP_CALLS", "MAX_STEPS", "POSITIONAL", "QUERIES", "replay"]
