r"""Method chaining on a remote session: ``remote.table(name).filter(...).group_by(...).agg(...)``.

A :class:`RemoteFrame` (and the :class:`RemoteGroupBy` its ``group_by`` gives) records each call and its
arguments; a query (``agg``, ``top_k``, ``bounds``, ``interior_point``, ``learn_threshold``,
``learn_rectangle``, or any family through ``query``) is a :class:`~dpframe.remote.client.RemoteQuery`,
whose ``cost``, ``explain`` and ``collect`` send the whole chain. The server replays it on its session's
own API (:mod:`dpframe.remote.replay`), so the methods, their checks and errors, and the charges are those of
``sess.table(name)`` in process; an error shows up when the chain is sent, not when a call is recorded.

What crosses is JSON (:mod:`dpframe.remote.values`): numbers, text, dates, lists, dicts, Polars expressions
as Polars' JSON, dp measures, public keys as Arrow. A Python function cannot cross (neither can a Polars
expression that calls one): it stays in the analyst's process, refused here before anything is sent.

Example:
    >>> import polars as pl, secrets, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": list(range(100))})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> key = secrets.token_bytes(32)
    >>> with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
    ...         dp.connect(server.address, authkey=key) as remote:
    ...     remote.table("t").filter(pl.col("x") >= 50).agg(dp.len())
    <dp.RemoteQuery t.filter(...).agg(...)>

"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from dpframe.frame import Frame, GroupBy
from dpframe.habits import FRAME, GROUP_BY, habit
from dpframe.remote.client import RemoteQuery, _signed_as
from dpframe.remote.values import Packer

if TYPE_CHECKING:
    from dpframe.remote.client import Remote


class _Chain:
    """Calls recorded on one table, in order (immutable: each call makes a new chain)."""

    def __init__(self, remote: Remote, table: str, steps: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...] = ()
                 ) -> None:
        self._remote, self._table, self._steps = remote, table, steps

    def _then(self, call: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        return self._remote, self._table, (*self._steps, (call, args, kwargs))

    def _query(self, call: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> RemoteQuery:
        """The query the chain ends in (its calls packed once now: a value that cannot cross is refused here)."""
        table, calls = self._table, (*self._steps, (call, args, kwargs))
        _source(table, calls, Packer())
        return RemoteQuery(self._remote, lambda packer: _source(table, calls, packer),
                           ".".join([table, *(f"{name}(...)" for name, _, _ in calls)]))

    def _family(self, name: str, owner: str, habits: Mapping[str, tuple[str, str]]) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        found = habit(owner, habits, name)       # a Polars habit (head, sort, ...): the error it gives in process
        if found is not None:
            raise found
        return lambda *args, **kwargs: self.query(name, *args, **kwargs)

    def query(self, family: str, /, *args: Any, **kwargs: Any) -> RemoteQuery:
        """A query of any family the server's session has (built-in or a plugin's), as ``frame.query`` in process."""
        return self._query("query", (family, *args), kwargs)

    def __repr__(self) -> str:
        calls = "".join(f".{name}(...)" for name, _, _ in self._steps)
        return f"<dp.{type(self).__name__} {self._table}{calls}>"


class RemoteFrame(_Chain):
    """A private table on a :class:`~dpframe.remote.client.Remote`, queried by method chaining (``remote.table``).

    The methods are ``dp.Frame``'s (see its reference): arguments are recorded as given, sent and checked by the
    server's session (against the method's own signature too) when the query's ``cost``, ``explain`` or ``collect``
    is called (or ``schema`` read).
    """

    def __getattr__(self, name: str) -> Any:
        return self._family(name, "Frame", FRAME)       # a family query the server knows: frame.<family>(...)

    @property
    def schema(self) -> pl.Schema:
        """The frame's columns and types after its calls (public; one request, free), as ``dp.Frame.schema``."""
        packer = Packer()
        source = _source(self._table, self._steps, packer)
        frames: list[pl.DataFrame] = self._remote._request({"op": "schema", **source}, packer.attached)[1]
        return frames[0].schema

    @property
    def columns(self) -> list[str]:
        """The frame's column names (:attr:`schema`'s)."""
        return list(self.schema.names())

    def filter(self, *predicates: Any, **constraints: Any) -> RemoteFrame:
        """The rows where every row-level predicate holds (``dp.Frame.filter``)."""
        return RemoteFrame(*self._then("filter", predicates, constraints))

    def with_columns(self, *exprs: Any, **named: Any) -> RemoteFrame:
        """Columns added or replaced, computed row by row (``dp.Frame.with_columns``)."""
        return RemoteFrame(*self._then("with_columns", exprs, named))

    def select(self, *exprs: Any, **named: Any) -> RemoteFrame:
        """Only these row-level columns (``dp.Frame.select``)."""
        return RemoteFrame(*self._then("select", exprs, named))

    @_signed_as(Frame.bound)
    def bound(self, *args: Any, **bounds: Any) -> RemoteFrame:
        """Tighter contribution bounds, ``max_rows=`` / ``max_groups=`` (``dp.Frame.bound``)."""
        return RemoteFrame(*self._then("bound", args, bounds))

    def drop(self, *columns: Any) -> RemoteFrame:
        """Without these columns (``dp.Frame.drop``)."""
        return RemoteFrame(*self._then("drop", columns, {}))

    @_signed_as(Frame.rename)
    def rename(self, *args: Any, **kwargs: Any) -> RemoteFrame:
        """Columns renamed, ``{old: new}`` (``dp.Frame.rename``)."""
        return RemoteFrame(*self._then("rename", args, kwargs))

    @_signed_as(Frame.sample)
    def sample(self, *args: Any, **kwargs: Any) -> RemoteFrame:
        """Privacy units Poisson-sampled with public probability ``rate`` (``dp.Frame.sample``)."""
        return RemoteFrame(*self._then("sample", args, kwargs))

    @_signed_as(Frame.group_by)
    def group_by(self, *by: Any, **kwargs: Any) -> RemoteGroupBy:
        """Grouped by columns or row-level expressions, with public ``keys`` or private ones (``dp.Frame.group_by``)."""
        return RemoteGroupBy(*self._then("group_by", by, kwargs))

    def agg(self, *measures: Any, **named: Any) -> RemoteQuery:
        """One row of private statistics of the whole frame (``dp.Frame.agg``)."""
        return self._query("agg", measures, named)

    @_signed_as(Frame.bounds)
    def bounds(self, *args: Any, **options: Any) -> RemoteQuery:
        """Private clipping bounds of ``column``: ``collect`` gives ``(low, high)`` (``dp.Frame.bounds``)."""
        return self._query("bounds", args, options)

    @_signed_as(Frame.interior_point)
    def interior_point(self, *args: Any, **options: Any) -> RemoteQuery:
        """A private point between the column's min and max (``dp.Frame.interior_point``)."""
        return self._query("interior_point", args, options)

    @_signed_as(Frame.learn_threshold)
    def learn_threshold(self, *args: Any, **options: Any) -> RemoteQuery:
        """A private threshold classifier of ``feature`` (``dp.Frame.learn_threshold``)."""
        return self._query("learn_threshold", args, options)

    @_signed_as(Frame.learn_rectangle)
    def learn_rectangle(self, *args: Any, **options: Any) -> RemoteQuery:
        """A private axis-aligned box of ``features`` (``dp.Frame.learn_rectangle``)."""
        return self._query("learn_rectangle", args, options)


def _source(table: str, calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...], packer: Packer
            ) -> dict[str, Any]:
    """A chain's description: its table and calls, their arguments packed (frames attached to ``packer``)."""
    steps = [{"call": name, "args": [packer.pack(a, name) for a in positional],
              "kwargs": {k: packer.pack(v, k) for k, v in named.items()}} for name, positional, named in calls]
    return {"chain": {"table": table, "steps": steps}}


class RemoteGroupBy(_Chain):
    """A grouped :class:`RemoteFrame`; finish it with ``agg``, ``top_k`` or a group-by family (``dp.GroupBy``)."""

    def __getattr__(self, name: str) -> Any:
        return self._family(name, "GroupBy", GROUP_BY)

    def agg(self, *measures: Any, **named: Any) -> RemoteQuery:
        """Private statistics per group (``dp.GroupBy.agg``)."""
        return self._query("agg", measures, named)

    @_signed_as(GroupBy.top_k)
    def top_k(self, *args: Any, **options: Any) -> RemoteQuery:
        """The private set of the ``k`` keys with the largest ``score`` (``dp.GroupBy.top_k``, its signature)."""
        return self._query("top_k", args, options)


__all__ = ["RemoteFrame", "RemoteGroupBy"]
