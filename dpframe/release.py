"""The release context: the only place that charges the budget and reads private data.

Every release takes the same road: the cost is **reserved** in the ledger (atomically, before any
private row is read; refused if it does not fit), a :class:`PrivateReader` is handed to the release's
code, the code runs under the **guard** (any failure, a Rust panic included, marks the charge failed: it
stays spent, and only the exception's type is reported), and the charge is **committed** — or, for
output-DP mechanisms under basic composition, **settled** to the cell the released output fell in.

A :class:`PrivateReader` exists only inside its reservation: after the release it refuses to read. It
is how query families (``dpframe.family``) and interactive streams get exact statistics; the
statistics are private and must only reach a user through a mechanism.

Changed files (:mod:`dpframe.file_versions`): a release names the tables it reads (``tables=``); before
anything is charged, the files of those tables — of every table when the release cannot name them —
are checked, and a changed one refuses the release. After each read, the file read is checked again:
a write found then fails the release (charged, nothing released). The reader of a release that named
its tables reads only those.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> node, context = sess.table("t")._node, sess._release    # the session's context is private
    >>> rows = context.release(dp.PureDP(0.5), "count rows", "example",
    ...                        lambda reader: int(reader.statistics(node, (Statistic("rows"),))["__rows"][0]))
    >>> rows, sess.spent()          # a real release would add noise before returning anything
    (2, PureDP(epsilon=1/2))

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl
from polars.datatypes import DataTypeClass, FloatType

from dpframe.backends.base import StatisticsRequest
from dpframe.engine_output import check_quiet, numpy_defaults, numpy_quiet
from dpframe.errors import DPFrameError, TableChangedError
from dpframe.mechanism import Statistic
from dpframe.plan.nodes import Node, RowNode, Scan, bounded_unit
from dpframe.privacy_unit import AUTO, PrivacyUnit
from dpframe.tables import holds_type

if TYPE_CHECKING:
    from dpframe.accounting import Ledger, SessionCost
    from dpframe.catalog import TableCatalog
    from dpframe.noise import RandomSource

T = TypeVar("T")


class PluginFailure(Exception):
    """A registered plugin's hook failed inside a release (engine-raised): the guard reports whose hook it was.

    It holds public facts only (the plugin's registered name, the hook, the type of what the hook raised), never
    the hook's exception or its message, which could quote private values. :meth:`ReleaseContext.guarded` turns
    it into the :class:`~dpframe.errors.DPFrameError` the caller sees, naming the plugin.

    Example:
        >>> str(PluginFailure("mechanism", "histogram", "release", "ValueError"))
        "mechanism 'histogram' failed in release() (ValueError)"

    """

    def __init__(self, what: str, name: str, hook: str, failure: str) -> None:
        super().__init__(f"{what} {name!r} failed in {hook}() ({failure})")
        self.what, self.name, self.hook, self.failure = what, name, hook, failure


class PluginRefusal(PluginFailure):
    """A registered plugin's hook refused on purpose inside a release **before reading any private rows**.

    Engine-raised (:func:`~dpframe.family.run_family`) for a :class:`~dpframe.errors.DPFrameError` the plugin raised
    itself while its reader had read nothing (:attr:`PrivateReader.has_read`): its message, argument and fix can
    depend on public facts only (the query, the plan, random draws), so they are kept, and the caller sees the
    error's own dpframe type (``kind``; a plugin's subclass is seen as the dpframe class it derives from). After a
    read only the type is kept (:class:`PluginFailure`).

    Example:
        >>> from dpframe.errors import PlanError
        >>> r = PluginRefusal("query family", "rows", "run", PlanError("needs keys", argument="keys", fix="pass keys"))
        >>> str(r), r.kind.__name__, r.argument
        ("query family 'rows' refused in run(), before reading any data: needs keys", 'PlanError', 'keys')

    """

    def __init__(self, what: str, name: str, hook: str, error: DPFrameError) -> None:
        Exception.__init__(self, f"{what} {name!r} refused in {hook}(), before reading any data: {error.message}")
        self.what, self.name, self.hook, self.failure = what, name, hook, type(error).__name__
        self.kind = next(c for c in type(error).__mro__ if issubclass(c, DPFrameError) and
                         c.__module__ == DPFrameError.__module__ and c.__init__ is DPFrameError.__init__)
        self.argument, self.fix = error.argument, error.fix

    @staticmethod
    def keeps(error: DPFrameError) -> bool:
        """Whether ``error``'s parts are plain text (a message, argument and fix that are other objects are not kept).

        Example:
            >>> from dpframe.errors import PlanError
            >>> PluginRefusal.keeps(PlanError("no keys")), PluginRefusal.keeps(PlanError(3))  # type: ignore[arg-type]
            (True, False)

        """
        return type(error.message) is str and all(type(p) is str or p is None for p in (error.argument, error.fix))


class PrivateReader:
    """Exact, contribution-bounded statistics of the private tables, valid only inside one open reservation.

    Private: what it returns must reach a user only through a mechanism (noise drawn by the core's
    random source). Each :meth:`request` draws a fresh engine seed for contribution bounding; run the
    same request again (:meth:`run`) to read the same bounded rows.
    """

    def __init__(self, context: ReleaseContext, backend: str | None = None,
                 tables: frozenset[str] | None = None) -> None:
        self._context = context
        self._backend = context.catalog.backend(backend)
        self._open = True
        self._unit = context.unit
        self._tables = tables          # the tables its release declared (checked before charging); None: any
        self._parent: PrivateReader | None = None
        self._tunes = False            # a tuning query's reader (:meth:`tuning`)
        self._read = False             # whether a backend was asked for rows (:attr:`has_read`; the root's counts)

    def bounded_by(self, unit: PrivacyUnit) -> PrivateReader:
        """A view of this reader that bounds contributions by ``unit``; it lives and dies with this reader.

        ``unit``: the session's unit with the numbers chosen for ``"auto"`` (see :mod:`dpframe.tuning`).
        """
        if unit.column != self._unit.column:
            raise DPFrameError("a reader bounds by the session's privacy-unit column only", argument="unit",
                               fix="tune max_rows / max_groups of the session's unit")
        view = PrivateReader.__new__(PrivateReader)
        view._context, view._backend, view._open = self._context, self._backend, True
        view._unit, view._tables, view._parent, view._tunes = unit, self._tables, self, self._tunes
        view._read = False
        return view

    def tuning(self) -> PrivateReader:
        """A view of this reader for a query that chooses its ``"auto"`` bounds itself (``agg``: ``tuning.stage``).

        Other queries read a unit whose ``max_groups`` is ``"auto"`` as one without ``max_groups`` (their plans read
        ``max_rows`` alone); a tuning query must read through :meth:`bounded_by` its chosen unit, so a read through
        a unit still ``"auto"`` is an engine bug and fails, after the charge but on every dataset alike.
        """
        view = self.bounded_by(self._unit)
        view._tunes = True
        return view

    @property
    def has_read(self) -> bool:
        """Whether this reader, the reader it is a view of or any view of that one asked a backend for rows.

        Set before the backend is asked (a read that fails counts): until then, whatever the run holding the reader
        computed depends on public facts and random draws only (:class:`PluginRefusal`).
        """
        return self._root()._read

    def _root(self) -> PrivateReader:
        root = self
        while root._parent is not None:
            root = root._parent
        return root

    @property
    def backend_name(self) -> str:
        """The name of the backend this reader reads through."""
        return str(self._backend.name)

    def _check(self) -> None:
        self._context.check_readable()
        reader: PrivateReader | None = self
        while reader is not None and reader._open:    # a view lives as long as every reader it was made from
            reader = reader._parent
        if reader is not None:
            raise DPFrameError("this reader's release is over: a reader only reads inside its reservation",
                               argument="reader", fix="read statistics inside the run function you pass to release")

    def request(self, node: Node, statistics: tuple[Statistic, ...], *, by: tuple[str, ...] = (),
                keys: pl.DataFrame | None = None, bound: bool = True) -> StatisticsRequest:
        """A backend request for ``statistics`` of ``node``'s rows per group of ``by``, with a fresh engine seed.

        ``bound=False`` skips ``max_groups`` / ``max_rows`` bounding: only for statistics whose sensitivity
        does not depend on it (top-k's distinct units per key).
        """
        self._check()
        lineage = node.lineage()
        scan = lineage[0]
        assert isinstance(scan, Scan)
        rows = tuple(n for n in lineage if isinstance(n, RowNode))
        unit = bounded_unit(self._unit, node)
        if unit.groups == AUTO and unit.rows != AUTO and not self._tunes:
            # a query that does not tune (not agg): its plan read max_rows only (one reading max_groups is refused
            # when built), so its rows are bounded by max_rows alone, as under a unit without max_groups
            unit = unit.tuned(unit.rows, None)
        if bound and unit.auto:   # engine bug: a tuned query reads through bounded_by(tuned unit)
            raise DPFrameError("contribution bounds are 'auto' but were not chosen", argument="privacy_unit",
                               fix="this is a dpframe bug: report it")
        return StatisticsRequest(scan.table, rows, unit, by, keys, statistics,
                                 self._context.rng.seed_for_engine(), contribution_bounding=bound)

    def run(self, request: StatisticsRequest) -> pl.DataFrame:
        """The exact statistics of ``request`` (one backend query).

        Then a :class:`~dpframe.errors.TableChangedError` if the table's file changed since the session
        was created (:mod:`dpframe.file_versions`): the statistics may mix two versions of it. A table its
        release did not declare is refused before the read (its file was not checked before charging), and so is
        any read while Polars' diagnostic output is on, or the backend's (:meth:`check_quiet`).
        """
        self._check()
        if self._tables is not None and request.table not in self._tables:
            raise DPFrameError(f"this release reads table {request.table!r}, which it did not declare when it was "
                               f"charged (it declared {sorted(self._tables)})", argument="tables",
                               fix="this is a dpframe bug (or a query family's that reads beyond its source): "
                                   "report it")
        self.check_quiet()
        self._root()._read = True
        out: pl.DataFrame = canonical_keys(self._backend.statistics(request), request.by)
        self._context.catalog.check_unchanged((request.table,))
        return out

    def check_quiet(self) -> None:
        """An :class:`~dpframe.errors.ArgumentError` while Polars' or the backend's diagnostic output is on.

        Polars': :func:`~dpframe.engine_output.check_quiet`; the backend's logs or progress output:
        :class:`~dpframe.backends.base.Quiet` (Spark's), read as its ``check_quiet`` attribute (what ``isinstance``
        of that protocol tests, at 10 µs a call: it runs twice per query).
        """
        check_quiet()
        backend_check = getattr(self._backend, "check_quiet", None)
        if backend_check is not None:
            backend_check()

    def rerun(self, request: StatisticsRequest, statistics: tuple[Statistic, ...]) -> pl.DataFrame:
        """``request`` again with other ``statistics`` (same seed and rows: the same bounded rows)."""
        return self.run(dataclasses.replace(request, statistics=statistics))

    def statistics(self, node: Node, statistics: tuple[Statistic, ...], *, by: tuple[str, ...] = (),
                   keys: pl.DataFrame | None = None, bound: bool = True) -> pl.DataFrame:
        """:meth:`request` then :meth:`run`."""
        return self.run(self.request(node, statistics, by=by, keys=keys, bound=bound))

    def close(self) -> None:
        """End the reader's life (the release calls it when its run returns or fails)."""
        self._open = False


def bare_interrupt(error: KeyboardInterrupt | SystemExit) -> KeyboardInterrupt | SystemExit:
    """A new ``KeyboardInterrupt`` (or ``SystemExit``, its exit code kept if an int) to raise in place of ``error``.

    ``error`` interrupted a private run; the new one is raised once its charge is marked failed. ``error``'s
    traceback holds the frames of the run it interrupted, and their locals are exact statistics: an analyst's
    ``_thread.interrupt_main()`` from a timer thread, landing while a release drew its noise, handed back every
    exact count of the query (``error.__traceback__`` … ``tb_frame.f_locals["exact"]``) for a failed charge.
    Raise the new one outside the ``except`` block, so that ``error`` is not its ``__context__`` either.

    Example:
        >>> bare_interrupt(KeyboardInterrupt("x")).args, bare_interrupt(SystemExit(3)).code
        ((), 3)

    """
    if isinstance(error, SystemExit):
        return SystemExit(error.code if isinstance(error.code, int) and not isinstance(error.code, bool) else None)
    return KeyboardInterrupt()


def canonical_keys(out: pl.DataFrame, by: tuple[str, ...]) -> pl.DataFrame:
    """``out`` with the floats in its key columns ``by`` canonical: ``0.0`` for both zeros, one quiet NaN for NaNs.

    Equal keys are one group, but a backend gives the group the bits of the first row it met: without this a
    released key ``-0.0`` (or a NaN's sign and payload) told whether one row led its group (review 53i). Floats
    inside list, array and struct keys too (DuckDB kept ``[-0.0]``).

    Example:
        >>> out = canonical_keys(pl.DataFrame({"x": [-0.0, float("-nan")], "l": [[-0.0], None]}), ("x", "l"))
        >>> [str(v) for v in out["x"]], out["x"].is_nan().to_list(), out["l"].to_list()
        (['0.0', 'nan'], [False, True], [[0.0], None])

    """
    floats = [c for c in by if c in out.columns and holds_type(out.schema[c], FloatType)]
    if not floats:
        return out
    return out.with_columns(_canonical(pl.col(c), out.schema[c]).alias(c) for c in floats)


_Dtype = pl.DataType | DataTypeClass
"""A dtype as a schema or a nested dtype's ``inner`` / field holds it (an instance or a class)."""


def _canonical(e: pl.Expr, dtype: _Dtype) -> pl.Expr:
    """``e`` (of ``dtype``) with every float in it canonical (:func:`canonical_keys`); nulls stay null."""
    if not holds_type(dtype, FloatType):  # type: ignore[arg-type]
        return e
    if dtype.is_float():
        return (pl.when(e.is_nan()).then(pl.lit(float("nan"), dtype)).when(e == 0).then(pl.lit(0.0, dtype))
                .otherwise(e))
    if isinstance(dtype, pl.List):
        return e.list.eval(_canonical(pl.element(), dtype.inner))
    if isinstance(dtype, pl.Array):
        return e.arr.eval(_canonical(pl.element(), dtype.inner), as_list=False)
    assert isinstance(dtype, pl.Struct)
    fields = pl.struct([_canonical(e.struct.field(f.name), f.dtype).alias(f.name) for f in dtype.fields])
    return pl.when(e.is_null()).then(pl.lit(None, dtype)).otherwise(fields)


class ReleaseContext:
    """The ledger, the guard and the private reader: every charge of a session goes through here."""

    def __init__(self, unit: PrivacyUnit, ledger: Ledger, rng: RandomSource, catalog: TableCatalog) -> None:
        self._unit, self._ledger, self._rng, self._catalog = unit, ledger, rng, catalog

    @property
    def unit(self) -> PrivacyUnit:
        """The privacy unit every read is bounded by."""
        return self._unit

    @property
    def rng(self) -> RandomSource:
        """The random source mechanisms draw from."""
        return self._rng

    @property
    def catalog(self) -> TableCatalog:
        """The tables and their backends."""
        return self._catalog

    def release(self, cost: SessionCost, what: str, mechanisms: str, run: Callable[[PrivateReader], T], *,
                backend: str | None = None, settle: Callable[[T], tuple[SessionCost, str]] | None = None,
                tables: frozenset[str] | None = None) -> T:
        """Reserve ``cost``, call ``run(reader)`` under the guard, then commit (or settle); the one road.

        ``run`` receives the private reader: engine and registered plugin code only (the context is private
        to the session; nothing public hands a reader to analyst code). ``settle`` receives released values
        only.

        ``settle`` (output-DP mechanisms, basic composition only) maps the *released* result to (its cell's
        cost, the cell's name): ``cost`` is the worst cell, and the ledger lowers the charge to the realised
        cell. A settlement that fails marks the charge failed, in full.

        ``tables``: the tables ``run`` reads (see :meth:`reserve`); the reader reads only those. None:
        not known, every file-backed table is checked.

        ``backend`` (None: the session's) is looked up, and created on first use, before the charge: a backend that
        cannot be created (an unknown name, a start failure) is a free refusal
        (:meth:`~dpframe.catalog.TableCatalog.backend`), never a reservation left open.
        """
        reader = PrivateReader(self, backend, tables)
        try:
            reader.check_quiet()        # the backend's output too, before the charge (reserve checks Polars')
            charge = self.reserve(cost, what, mechanisms, tables=tables)
            result = self.guarded(charge, lambda: run(reader))
        finally:
            reader.close()
        if settle is None:
            self._ledger.commit(charge)
        else:
            self.guarded(charge, lambda: self._ledger.settle(charge, *settle(result)))
        return result

    def reserve(self, cost: SessionCost, what: str, mechanisms: str, *, tables: frozenset[str] | None = None) -> int:
        """Reserve ``cost`` in the ledger (atomic; ``BudgetExceededError`` if it does not fit): the charge id.

        First, nothing charged: an :class:`~dpframe.errors.ArgumentError` while Polars' diagnostic output is
        on (it would print statistics of the private rows: :mod:`dpframe.engine_output`), and a
        :class:`~dpframe.errors.TableChangedError` if the file of a table in ``tables`` (the tables the
        charge's run reads; None: not known, so every table) changed since the session was created
        (:mod:`dpframe.file_versions`).
        """
        check_quiet()
        self._catalog.check_unchanged(tables)
        with numpy_defaults():
            return self._ledger.reserve(cost, what, mechanisms)

    def guarded(self, charge: int, run: Callable[[], T]) -> T:
        """Call ``run()`` for the reservation ``charge``; on any failure mark it failed (it stays spent).

        ``run`` receives no values (engine code running inside the reservation). Any failure counts:
        pyo3's ``PanicException`` (a Rust panic in the engine) derives from ``BaseException``, not
        ``Exception``. ``run`` runs with numpy's floating-point errors ignored, whatever the caller set
        (:func:`~dpframe.engine_output.numpy_quiet`). ``KeyboardInterrupt`` and ``SystemExit`` are
        re-raised after the charge is marked failed, as new exceptions of their type (:func:`bare_interrupt`);
        everything else becomes a :class:`DPFrameError` naming only its type.
        """
        failure, plugin, interrupted = None, None, None
        try:
            with numpy_quiet():
                result = run()
        except (KeyboardInterrupt, SystemExit) as e:
            self._ledger.fail(charge, "interrupted")
            interrupted = bare_interrupt(e)
        except PluginFailure as e:   # a plugin's hook, named by the engine (public facts only)
            failure, plugin = e.failure, e
        except BaseException as e:   # noqa: BLE001 — PanicException too
            failure = type(e).__name__
        if interrupted is not None:     # raised outside the except block: no frame of the run is reachable
            raise interrupted
        if isinstance(plugin, PluginRefusal):    # refused before reading: its public message, argument and fix
            self._ledger.fail(charge, plugin.failure)
            fix = (f"{plugin.fix}; " if plugin.fix else "") + (
                f"(the plugin that registers {plugin.name!r} refused after the charge what does not depend on the "
                "data: such a refusal belongs in its plan(), where it is free; report it to its authors)")
            raise plugin.kind(f"the query failed while running: {plugin}; its cost stays charged",
                              argument=plugin.argument, fix=fix)
        if plugin is not None:
            self._ledger.fail(charge, plugin.failure)
            raise DPFrameError(f"the query failed while running: {plugin}; its cost stays charged", argument="query",
                               fix=f"a bug of the plugin that registers {plugin.name!r} (see `dpframe plugins`): "
                                   "report it to its authors; only the error's type is kept (its message could quote "
                                   "private values): reproduce it in a seeded test session on the plugin's own data")
        if failure is not None:
            # Raised outside the except block so the engine's exception (whose message may quote
            # private values) is neither chained nor kept as __context__: only its type name survives.
            self._ledger.fail(charge, failure)
            fix = ("create a new session to read the new version of the file" if failure == TableChangedError.__name__
                   else "check column types and expressions against Frame.schema")
            raise DPFrameError(f"the query failed while running ({failure}); its cost stays charged",
                               argument="query", fix=fix)
        return result

    def reader(self, backend: str | None = None) -> PrivateReader:
        """A reader through ``backend`` (None: the session's).

        :meth:`release` makes one per release and closes it when the run ends; core code that holds a
        reservation of its own (an interactive stream, an ex-post run) reads only inside a :meth:`guarded`
        call of that reservation.
        """
        return PrivateReader(self, backend)

    def commit(self, charge: int) -> None:
        """Close the reservation ``charge``, keeping it charged in full."""
        self._ledger.commit(charge)

    def fail(self, charge: int, error: str) -> None:
        """Mark the reservation ``charge`` failed (it stays spent)."""
        self._ledger.fail(charge, error)

    def settle(self, charge: int, cost: SessionCost, cell: str) -> None:
        """Close the reservation ``charge`` at the released output's cell (basic composition, ε only)."""
        self._ledger.settle(charge, cost, cell)

    def spent(self) -> Any:
        """Everything charged so far (reservations included), composed by the session's accountant."""
        return self._ledger.spent()

    def charges(self) -> list[Any]:
        """The ledger's rows, oldest first."""
        return self._ledger.charges()

    def check_readable(self) -> None:
        """A LedgerError in a fork's child (:meth:`Ledger.check_process`) or once the session was closed.

        Neither may read: a stream or filter opened before ``sess.close()`` answered every later call
        (its reservation covered them, but a closed session reads nothing).
        """
        self._ledger.require_open()

    @property
    def closed(self) -> bool:
        """Whether the ledger was closed."""
        return self._ledger.closed

    def close(self) -> None:
        """Close the ledger."""
        self._ledger.close()


__all__ = ["PrivateReader", "ReleaseContext", "bare_interrupt"]
