"""Query families: every way to release something takes the same road, built-ins and plugins alike.

A **query family** (``agg``, ``top_k``, ``bounds``, ``interior_point``, a plugin's DP linear regression
...) is registered through the ``dpframe_query_families`` hook and reached as a method of
:class:`~dpframe.Frame` or :class:`~dpframe.GroupBy` (``attach``). It only *describes*:

* :meth:`QueryFamily.build` validates the arguments against the public :class:`Source` (the frame's
  plan, schema, privacy unit, group keys) and returns a :class:`FamilyQuery`;
* :meth:`FamilyQuery.plan` turns a budget into a :class:`FamilyPlan` — the cost (data-independent,
  computed before anything runs), the charge in the session's notion, what ``explain()`` shows, and a
  ``run(reader, rng)`` function.

The core does the rest, the same way for every family (:class:`Releasable`): ``explain`` and ``cost``
are free; ``collect`` reserves the charge in the ledger, hands ``run`` a private reader that exists
only inside that reservation and the session's random source, and commits. A family never charges,
never sees the ledger and never creates randomness, like a mechanism one level down.

Example (a toy family: a noisy row count; see ``docs/plugins.md`` for a complete one)::

    >>> import polars as pl, dpframe as dp
    >>> from dpframe.mechanism import Noise, Statistic
    >>> class RowsQuery:
    ...     def __init__(self, source):
    ...         self.source = source
    ...     def describe(self):
    ...         return "rows()"
    ...     def plan(self, budget):      # the analyst's budget as given: an (ε, δ) one read as pure ε
    ...         share = budget if isinstance(budget, dp.ZCDP) else dp.PureDP(budget.epsilon)
    ...         noise = Noise.calibrate(self.source.unit.max_rows, share)
    ...         def run(reader, rng):
    ...             exact = int(reader.statistics(self.source.node, (Statistic("rows"),))["__rows"][0])
    ...             return exact + int(noise.sample(1, rng)[0])
    ...         return FamilyPlan(budget, share, self.source.context.accountant.charge(share), "noisy rows",
    ...                           Explain("rows query", lines=(f"noise: {noise.describe()}",)), run)
    >>> class Rows:
    ...     name, attach, methods, result_types = "rows", "frame", (), {}
    ...     def build(self, source):
    ...         return RowsQuery(source)
    >>> isinstance(Rows(), QueryFamily)
    True

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

import polars as pl

from dpframe.accounting.curve_charge import check_curve_charge, reference
from dpframe.accounting.rdp import RenyiFilter
from dpframe.accounting.rdp_charge import RDPCharge
from dpframe.backends.base import check_kinds, kinds_refusal
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP, convert, describe
from dpframe.display import Explanation, query_html
from dpframe.errors import (
    BudgetConversionError,
    BudgetError,
    DPFrameError,
    PlanError,
    PluginError,
    plugin_failure,
    refused_in,
)
from dpframe.habits import QUERY, habit
from dpframe.plan.nodes import Node, bounded_unit
from dpframe.planning import PlanContext
from dpframe.planning.passes import budget_of
from dpframe.planning.state import first
from dpframe.privacy_unit import RELATIONS, PrivacyUnit
from dpframe.release import PluginFailure, PluginRefusal
from dpframe.sealed import ReadOnlyKeys, Sealed, engine_only

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.accounting.accountants import Accountant
    from dpframe.noise import RandomSource
    from dpframe.release import PrivateReader, ReleaseContext

RESERVED = frozenset({"filter", "with_columns", "select", "sample", "group_by", "schema", "columns", "query",
                      "plan", "cost", "explain", "collect", "describe", "bound", "drop", "rename", "dtypes",
                      "width", "collect_schema"})
"""Names no query family may take: the core methods of ``Frame``, ``GroupBy`` and queries."""

R = TypeVar("R")


@dataclass(frozen=True)
class Source:
    """What a family may see of a frame: public facts only (no data, no ledger, no session)."""

    node: Node                               # the row-level plan: Scan → Filter → WithColumns ...
    context: PlanContext                     # privacy unit, plugins, accountant
    by: tuple[str, ...] = ()                 # the group-by columns (a ``group_by`` family)
    keys: pl.DataFrame | None = None         # public group keys (None: keys from the data)
    backend: str | None = None               # another backend than the session's (``sess.sql(..., backend=)``)

    @property
    def schema(self) -> pl.Schema:
        """The frame's public schema."""
        return self.node.schema

    def __post_init__(self) -> None:
        if self.keys is not None and type(self.keys) is not ReadOnlyKeys:    # q.query.source.keys hands them out
            object.__setattr__(self, "keys", ReadOnlyKeys.of(self.keys))
        # The unit a query on this node is planned with: the session's, tightened by ``frame.bound(...)``
        # (the reader bounds the rows with the same function, dpframe.plan.nodes.bounded_unit).
        unit = bounded_unit(self.context.unit, self.node)
        if unit != self.context.unit:
            object.__setattr__(self, "context", dataclasses.replace(self.context, unit=unit))

    @property
    def unit(self) -> PrivacyUnit:
        """The privacy unit this query is bounded by (the session's, or tighter after ``frame.bound``)."""
        return self.context.unit


@dataclass(frozen=True)
class Explain:
    """What ``explain()`` shows of a plan: a title, the row-level steps, the family's own lines, notes.

    ``data`` is the same content as JSON-able values (``explain(format="json")``); the core adds the
    budget block (requested, cost, charged, spent, fits, remaining) and whether the session is private.
    ``protects``: the neighbouring relation the release protects, starting with a key phrase of
    :data:`dpframe.privacy_unit.RELATIONS`; None (every built-in family) is the session's, the query's privacy
    unit (:meth:`~dpframe.PrivacyUnit.protects`). The core shows it as ``explain()``'s ``protects:`` line.
    """

    title: str
    steps: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    protects: str | None = None


@dataclass(frozen=True)
class FamilyPlan(Generic[R]):
    """A planned query: its data-independent cost and how to run it (see the module docstring).

    ``run`` receives the private reader (and the session's random source): registered family code only,
    called by the core inside the reservation. ``settle`` receives released values only; ``check``
    receives no values. ``charge`` is what the session's ledger reserves (``cost`` in the session's
    notion, or the plan's privacy curves in RDP/PLD sessions: ``context.accountant.charge_plan``).
    ``settle`` (output-DP mechanisms, basic composition only) maps the released result to (its cell's
    cost, cell name). ``check`` runs before charging (e.g. every mechanism on all-zero statistics): a
    plugin bug fails for free. ``detail`` is the family's own plan object (``query.plan(budget)`` returns it).
    ``kinds``: the statistic kinds ``run`` reads (it may leave out :data:`~dpframe.backends.base.BASE_KINDS`, which
    every backend computes); ``collect`` refuses, free, a backend that does not compute one of them.
    ``explain`` is the :class:`Explain`, or a function of no arguments that makes it: only ``explain()`` calls
    it, so ``collect()`` does not build text it never shows (:meth:`explained` returns it either way).
    """

    budget: Budget
    cost: Budget
    charge: SessionCost
    mechanisms: str
    explain: Callable[[], Explain] | Explain
    run: Callable[[PrivateReader, RandomSource], R]
    settle: Callable[[R], tuple[SessionCost, str]] | None = None
    check: Callable[[], None] | None = None
    detail: Any = None
    kinds: frozenset[str] = frozenset()

    def explained(self) -> Explain:
        """The explanation (made now when ``explain`` is a function).

        Example:
            >>> import dpframe as dp
            >>> plan = FamilyPlan(dp.PureDP(1), dp.PureDP(1), dp.PureDP(1), "m", lambda: Explain("t"), print)
            >>> plan.explained().title
            't'

        """
        return self.explain if isinstance(self.explain, Explain) else self.explain()


@runtime_checkable
class FamilyQuery(Protocol[R]):
    """A built, validated query of one family."""

    def describe(self) -> str:
        """One line for ``repr`` and the ledger's history."""
        ...

    def plan(self, budget: Any) -> FamilyPlan[R]:
        """The plan under ``budget``, free; a DPFrameError (nothing charged) if it cannot run."""
        ...


@runtime_checkable
class QueryFamily(Protocol):
    """A kind of query, registered through ``dpframe_query_families`` (built-ins use the same hook).

    ``name`` is the method name (``frame.<name>(...)`` or ``frame.group_by(...).<name>(...)`` as
    ``attach`` says, or both); ``methods`` the variants the privacy audit must cover (``()`` if none);
    ``result_types`` the types its results may have besides a frame (exported as ``dp.<Name>``). Optional:
    ``takes``, the callable ``build`` passes its arguments to (e.g. the query class) when ``build`` itself takes
    ``*args, **kwargs``: an argument its signature does not take is then a ``dp.SignatureError`` with a fix.
    """

    name: str
    attach: Literal["frame", "group_by", "both"]
    methods: Sequence[str]
    result_types: Mapping[str, type]

    def build(self, source: Source, /, *args: Any, **kwargs: Any) -> FamilyQuery[Any]:
        """Validate the arguments (free; a DPFrameError naming the argument otherwise) and build the query."""
        ...


_SQL: ContextVar[bool] = ContextVar("dpframe_written_in_sql", default=False)


def written_in_sql() -> bool:
    """Whether the query being built was written in SQL: its family's refusals may then word their fixes in SQL.

    True only while the SQL front end builds a family's query (``HAVING TOP_K(...)`` builds the ``top_k`` family's,
    under :func:`building_sql`), so a family reads it in ``build`` (or its query's constructor) and keeps it: the
    built-in top-k then names ``method := 'stable'`` where a method chain's query names ``method='stable'``. Not an
    argument of any query: the analyst's method chain cannot set it, and a family that ignores it gets the
    arguments the protocol documents only. The wording alone: the checks, the plan and the cost are the same.

    Example:
        >>> written_in_sql()
        False
        >>> with building_sql():
        ...     written_in_sql()
        True

    """
    return _SQL.get()


@contextmanager
def building_sql() -> Iterator[None]:
    """The block builds a query written in SQL (:func:`written_in_sql` is true in it: this thread's context only)."""
    token = _SQL.set(True)
    try:
        yield
    finally:
        _SQL.reset(token)


class Front(Protocol):
    """What :class:`Releasable` needs of a session (the session is a front door; families never see it)."""

    @property
    def accountant(self) -> Accountant: ...

    @property
    def rng(self) -> RandomSource: ...

    @property
    def _release(self) -> ReleaseContext: ...


class ReadOnly:
    """A view of an object that reads its attributes and refuses to assign or delete any.

    Example:
        >>> view = ReadOnly(Explain("a plan"))
        >>> view.title
        'a plan'
        >>> view.title = "another"
        Traceback (most recent call last):
        ...
        AttributeError: 'title' is read-only: this query was validated and planned with it; build a new query

    """

    __slots__ = ("_target",)

    def __init__(self, target: object) -> None:
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):          # e.g. ``__dict__``: the target's own attribute dict, writable
            raise AttributeError(f"{name!r} is not readable through a read-only view")
        return getattr(object.__getattribute__(self, "_target"), name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{name!r} is read-only: this query was validated and planned with it; build a new query")

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)

    def __repr__(self) -> str:
        return repr(object.__getattribute__(self, "_target"))


class Releasable(Sealed, Generic[R]):
    """A lazy private query of any family: ``explain`` and ``cost`` are free, ``collect`` charges once.

    Its public attributes are read-only once built (:class:`~dpframe.sealed.Sealed`): e.g. a SQL query's
    ``backend_name`` was checked for what that backend refuses.

    ``family``: the registered name of the query family that built ``query`` (a failure of its ``run`` names it,
    :func:`run_family`; None: the query's description).

    ``tables``: the private tables the query reads, those of its source
    (:func:`~dpframe.plan.nodes.tables_read`): ``collect`` checks their files before charging and reads
    only them. None: not known, every file-backed table is checked.

    ``unit``: the privacy unit the query is bounded by, its source's (the session's, tightened by ``frame.bound``):
    ``explain()``'s ``protects:`` line states what the query keeps of a unit from it. None: the session's.

    Built by the engine only (:func:`~dpframe.sealed.engine_only`), around a registered family's query: the
    family's ``run`` receives the private reader.
    """

    def __init__(self, front: Front, query: FamilyQuery[R], *, family: str | None = None,
                 tables: frozenset[str] | None = None, rate: float | None = None, unit: PrivacyUnit | None = None,
                 _engine: object = None) -> None:
        engine_only(_engine, type(self).__name__, "build queries from a session: sess.table(...).agg(...), "
                    ".group_by(...).top_k(...), frame.<family>(...) or sess.sql(...)")
        self._front = front
        self._query = query
        self._family = family   # the registered name of the family that built ``query``, named by its failures
        self._tables = tables
        self._rate = rate       # a registered family's frame's sampling rate: its charge is checked (check_charge)
        self._unit = unit       # the bound the query keeps of a unit (frame.bound), for the protects: line

    @property
    def query(self) -> FamilyQuery[R]:
        """The family's built query, read-only (its validated arguments, e.g. ``top_k(...).query.k``).

        A :class:`ReadOnly` view: ``collect`` plans from the query's attributes, so assigning one (a
        weaker privacy unit in ``source``, another ``node``) would change what is charged and run.
        """
        return ReadOnly(self._query)  # type: ignore[return-value]

    def __getattr__(self, name: str) -> Any:
        # The family query's public attributes read through (``frame.bounds("x").domain``); a Polars habit
        # (``q.head()``) says to collect first.
        found = habit("Query", QUERY, name)
        if name.startswith("_") or name == "query":
            raise found or AttributeError(name)
        try:
            return getattr(self._query, name)
        except AttributeError:
            raise found or AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}") from None

    def __len__(self) -> int:
        raise habit("Query", QUERY, "__len__") or TypeError("no len()")

    def __iter__(self) -> Any:
        raise habit("Query", QUERY, "__iter__") or TypeError("not iterable")

    def __getitem__(self, item: object) -> Any:
        raise habit("Query", QUERY, "__getitem__") or TypeError("not subscriptable")

    def __bool__(self) -> bool:
        return True

    def _planned(self, budget: object) -> FamilyPlan[R]:
        # Every family takes the query's budget as it is given, in a notion the session's accountant holds:
        # an (ε, δ > 0) budget in a pure or zCDP session (whose δ a family that needs none would silently
        # drop), or a zCDP budget in an (ε, δ) ``basic`` session, is a BudgetConversionError naming it, free
        # (the rule of ``agg``: :func:`~dpframe.planning.passes.check_budget`).
        self._front.accountant.charge(budget_of(budget))
        try:
            plan = self._query.plan(budget)
        except Exception as e:      # the family's plan sees public values only: its message may be quoted
            failure = plugin_failure(e, f"the query family of {self.describe()}", "in plan()", argument="budget",
                                     fix=_plan_fix(e, budget))
            if failure is None:
                raise
            raise failure from e
        plan = copy_plan(plan, self.describe())
        check_cost(plan, budget_of(budget), self.describe())
        if self._rate is not None:
            plan = dataclasses.replace(plan, charge=check_charge(plan, self._front.accountant, self._rate,
                                                                 self.describe()))
        return plan

    def plan(self, budget: object = None) -> Any:
        """The family's own plan for ``budget`` (mechanisms, shares, cost). Free."""
        planned = self._planned(needs_budget(budget, "plan"))
        return planned.detail if planned.detail is not None else planned

    def cost(self, budget: object = None) -> SessionCost:
        """The exact charge this query would be charged, in the session's notion. Free."""
        return self._planned(needs_budget(budget, "cost")).charge

    def explain(self, budget: object = None, format: str = "text") -> Any:
        """The plan, the mechanisms, the cost and the accuracy: an :class:`~dpframe.display.Explanation`. Free.

        ``str(e)``/``print(e)`` is the text; in a notebook it renders as HTML; ``e.to_dict()`` (or
        ``format="json"``) is the same content as JSON-able values.
        """
        check_format(format)
        return render(self._front, self._shown(self._planned(needs_budget(budget, "explain"))), format, self._unit)

    def _shown(self, plan: FamilyPlan[R]) -> FamilyPlan[R]:
        """``plan`` for ``explain()``: its explanation made (:meth:`_explained`), noting a backend's refusal.

        The note says when ``collect`` would refuse it, free, on the query's backend.
        """
        shown = self._explained(plan)
        reason = self._kinds_refusal(plan)
        if reason is None:
            return dataclasses.replace(plan, explain=shown)
        note = f"REFUSED on this backend: {reason}; collect() raises a PlanError and charges nothing"
        return dataclasses.replace(plan, explain=dataclasses.replace(shown, notes=(*shown.notes, note)))

    def _explained(self, plan: FamilyPlan[R]) -> Explain:
        """``plan.explained()``: the family's explanation, made now if it is a function (plugin code, free).

        A failure in it is a PluginError naming the family (a sampler's refusal of the family's arguments too), as
        is something other than an :class:`Explain`; a DPFrameError the family raises on purpose passes through.
        """
        try:
            shown = plan.explained()
        except Exception as e:
            failure = plugin_failure(e, f"the query family of {self.describe()}", "in explain()", argument="query",
                                     fix="a bug of the plugin that registers the family (see `dpframe plugins`); "
                                         "report it to its authors (collect() does not make the explanation)")
            if failure is None:
                raise
            raise failure from e
        if not isinstance(shown, Explain):
            raise PluginError(f"the query family of {self.describe()} explained its plan with a {type(shown).__name__}",
                              argument="query", fix="a plan's explain is a dpframe.family.Explain, or a function of no "
                              "arguments returning one: a bug of the plugin that registers the family; report it")
        if shown.protects is not None and not (isinstance(shown.protects, str)
                                               and shown.protects.startswith(tuple(RELATIONS.values()))):
            raise PluginError(f"the query family of {self.describe()} states that it protects {shown.protects!r}, "
                              "which names no neighbouring relation dpframe knows", argument="query",
                              fix="Explain.protects starts with one of dpframe.privacy_unit.RELATIONS' phrases ("
                                  + "; ".join(repr(v) for v in RELATIONS.values()) + "), or is None for the session's "
                                  "privacy unit: a bug of the plugin that registers the family; report it")
        return shown

    def _kinds_refusal(self, plan: FamilyPlan[R]) -> str | None:
        """Why the query's backend refuses ``plan``'s statistic kinds (None: it computes them all)."""
        if not plan.kinds:
            return None
        return kinds_refusal(self._front._release.catalog.backend(getattr(self._query, "backend", None)), plan.kinds)

    def collect(self, budget: object = None) -> R:
        """Reserve the cost, run once on the private rows, release the result."""
        return self._collect(self._planned(needs_budget(budget, "collect")))

    def _collect(self, plan: FamilyPlan[R]) -> R:
        front = self._front
        backend = getattr(self._query, "backend", None)
        if plan.kinds:      # a statistic kind the backend does not compute would fail after the charge
            check_kinds(front._release.catalog.backend(backend), plan.kinds)
        if plan.check is not None:
            plan.check()
        family = self._family or self.describe()
        return front._release.release(plan.charge, self.describe(), plan.mechanisms,
                                      lambda reader: run_family(family, plan.run, reader, front.rng),
                                      settle=plan.settle, backend=backend, tables=self._tables)

    def describe(self) -> str:
        """A compact one-line text of the query (used in the history)."""
        return self._query.describe()

    def __repr__(self) -> str:
        return f"<dp.{type(self).__name__} {self.describe()}>"

    def _repr_html_(self) -> str:
        return query_html(f"dp.{type(self).__name__}", [self.describe()],
                          "q.explain(budget) shows the plan, cost and accuracy for free; q.collect(budget) charges "
                          "and releases")


def _plan_fix(error: Exception, budget: object) -> str:
    """The fix of a family's ``plan()`` failing on ``budget``: the analyst's way round it, where there is one.

    A family that hands an (ε, δ) budget to ``Noise.calibrate`` as it is (which takes pure DP or zCDP shares) runs
    with the pure budget of the same ε, or a zCDP one: the fix says so, before the plugin's bug.
    """
    bug = ("a bug of the plugin that registers the family (see `dpframe plugins`): report it to its authors (a "
           "family's plan takes budgets of every notion: dp.PureDP, dp.ApproxDP, dp.ZCDP)")
    if isinstance(budget, ApproxDP) and isinstance(error, BudgetConversionError) and \
            str(refused_in(error)).endswith(".calibrate"):
        return (f"give this query budget=dp.PureDP({float(budget.epsilon):g}) or a dp.ZCDP budget: its family "
                f"passed your (ε, δ) budget to Noise.calibrate, which takes pure DP or zCDP shares only; {bug}")
    return f"plan() raised something other than a dp.DPFrameError refusing the query: {bug}"


ENGINE_READS = ("dpframe.release", "dpframe.backends")
"""The engine's code that reads private rows for a family's ``run`` (the private reader and the backends)."""


def run_family(family: str, run: Callable[[PrivateReader, RandomSource], R], reader: PrivateReader,
               rng: RandomSource) -> R:
    """``run(reader, rng)``, a family's run inside its charge; a failure of the family's own code names the family.

    ``run`` receives the private reader: it is a registered family's ``FamilyPlan.run``, called by the core only
    (:meth:`Releasable.collect`, inside the reservation). Whatever fails, the charge stands
    (:meth:`~dpframe.release.ReleaseContext.guarded`). Who is named, and what of the error is kept:

    * raised while the private reader or a backend read the rows (:data:`ENGINE_READS` in its traceback), a
      mechanism's failure the engine already named (a family running the ``agg`` family's plan), or a
      :class:`~dpframe.errors.DPFrameError` dpframe's own code raised (a frame of the ``dpframe`` package below
      ``run``: a built-in family's refusal, an engine check): the engine's, passed as it is (the guard keeps its
      type only);
    * a :class:`~dpframe.errors.DPFrameError` the family's code raised itself **before its reader read anything**
      (:attr:`~dpframe.release.PrivateReader.has_read`): a refusal of public facts only (the query, the plan, random
      draws), which is not data-dependent however it is worded. It is kept, type, message, argument and fix, naming
      the family (:class:`~dpframe.release.PluginRefusal`); its fix adds that such a refusal belongs in ``plan()``,
      where it is free. That the reader has read is the one thing the engine can know: a message made after a read
      may quote private values whatever the family meant, so it is never kept;
    * anything else (the family's own error after a read, any other exception, a sampler refusing the family's
      arguments, :func:`~dpframe.errors.refused_in`) is a :class:`~dpframe.release.PluginFailure` naming the family
      and ``run`` with the error's type only, and, when it came out of dpframe code the family called (the outermost
      frame of the ``dpframe`` package below ``run``: a helper given a wrong argument, or an engine bug), that
      function's name (``TypeError raised in dpframe.mechanism.sorted_codes.SortedCodes.of``): a public fact of the
      code, like the type, that says where to look. Neither the message nor the exception is kept.

    Example:
        >>> plugin_run = eval("lambda reader, rng: {}['secret 42']", {"__name__": "myplugin"})  # a plugin's run
        >>> run_family("rows", plugin_run, None, None)  # type: ignore[arg-type]
        Traceback (most recent call last):
        ...
        dpframe.release.PluginFailure: query family 'rows' failed in run() (KeyError)
        >>> run_family("rows", lambda reader, rng: check_format("xml"), None, None)  # type: ignore[arg-type]
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: format: unknown format 'xml'. Fix: use 'text' or 'json'

    """
    failure, refusal = None, None
    try:
        return run(reader, rng)
    except (KeyboardInterrupt, SystemExit, PluginFailure):
        raise
    except DPFrameError as e:   # the engine's, or the family's own refusal; a sampler's refusal of its call is its bug
        if refused_in(e) is None and (_read_by_engine(e) or _called_engine(e) is not None):
            raise
        if refused_in(e) is None and reader is not None and not reader.has_read and PluginRefusal.keeps(e):
            refusal = PluginRefusal("query family", family, "run", e)
        else:
            failure = _failure(e)
    except BaseException as e:  # noqa: BLE001 — PanicException too
        if _read_by_engine(e):
            raise
        failure = _failure(e)
    if refusal is not None:     # outside the except blocks: nothing chained
        raise refusal
    raise PluginFailure("query family", family, "run", str(failure))


def _failure(error: BaseException) -> str:
    """The error's type, and the dpframe function it came out of where the family called one (:func:`run_family`)."""
    callee = _called_engine(error)
    return type(error).__name__ if callee is None else f"{type(error).__name__} raised in {callee}"


def _called_engine(error: BaseException) -> str | None:
    """The outermost function of the ``dpframe`` package in ``error``'s traceback below :func:`run_family` (None: none).

    Module-qualified (``dpframe.mechanism.sorted_codes.SortedCodes.of``): the engine code a family called, or a
    built-in family's own ``run``.
    """
    tb = error.__traceback__
    tb = tb.tb_next if tb is not None else None        # run_family's own frame
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module == "dpframe" or module.startswith("dpframe."):
            return f"{module}.{tb.tb_frame.f_code.co_qualname}"
        tb = tb.tb_next
    return None


def _read_by_engine(error: BaseException) -> bool:
    """Whether ``error`` was raised inside the engine's reading of the rows (a frame of :data:`ENGINE_READS`)."""
    tb = error.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if any(module == m or module.startswith(f"{m}.") for m in ENGINE_READS):
            return True
        tb = tb.tb_next
    return False


def check_cost(plan: FamilyPlan[Any], budget: Budget, what: str) -> None:
    """A PluginError (nothing charged) when a family's ``plan`` costs more than the query's ``budget``.

    ``agg`` refuses its mechanisms' total above the query's budget as a plugin bug; every family gets the same
    check. The cost is compared in the budget's notion where it converts soundly (pure ε to ρ = ε²/2 or (ε, 0)),
    else the budget in the cost's notion (a zCDP cost for a pure budget: the budget's ε as ρ = ε²/2); a cost
    neither converts to or from (zCDP for an (ε, δ > 0) budget) is a plugin bug too: the family's plan, not the
    analyst's budget.

    Example:
        >>> import dpframe as dp
        >>> plan = FamilyPlan(dp.PureDP(1), dp.PureDP(2), dp.PureDP(2), "m", Explain("t"), print)
        >>> check_cost(plan, dp.PureDP(1), "mine()")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: budget: the plan of mine() costs ε=2, more than the query's ε=1...

    """
    fix = ("this is a query family plugin bug: a plan's cost is at most the budget it was given, in its notion; "
           "report it to the authors of the plugin that registers it (see `dpframe plugins`)")
    try:
        cost, limit = convert(plan.cost, budget.notion), budget
    except BudgetConversionError:
        try:
            cost, limit = plan.cost, convert(budget, plan.cost.notion)
        except BudgetConversionError:
            raise PluginError(f"the plan of {what} costs {describe(plan.cost)}, which no {describe(budget)} budget "
                              "pays for (no sound conversion between them)", argument="budget", fix=fix) from None
    if first(cost) > first(limit) or getattr(cost, "delta", 0) > getattr(limit, "delta", 0):
        raise PluginError(f"the plan of {what} costs {describe(plan.cost)}, more than the query's {describe(budget)}",
                          argument="budget", fix=fix)


def copy_plan(plan: object, what: str) -> FamilyPlan[Any]:
    """A plain :class:`FamilyPlan` of ``plan``'s fields, each read once: what the core checks is what it charges.

    A subclass could answer a field (``charge``) through a property, honestly while checked and otherwise when
    reserved; the copy has the values the first read gave. Not a FamilyPlan: a PluginError naming ``what``.

    Example:
        >>> import dpframe as dp
        >>> plan = FamilyPlan(dp.PureDP(1), dp.PureDP(1), dp.PureDP(1), "m", Explain("t"), print)
        >>> copy_plan(plan, "mine()") == plan, copy_plan(plan, "mine()") is plan
        (True, False)

    """
    if not isinstance(plan, FamilyPlan):
        raise PluginError(f"the query family of {what} returned a {type(plan).__name__} from plan(), not a "
                          "dpframe.family.FamilyPlan", argument="budget",
                          fix="a bug of the plugin that registers the family (see `dpframe plugins`); report it to "
                              "its authors")
    try:
        return FamilyPlan(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(FamilyPlan)})
    except Exception as e:
        raise PluginError(f"the query family of {what} returned a plan whose fields cannot be read "
                          f"({type(e).__name__}: {e})", argument="budget",
                          fix="plan() returns a dpframe.family.FamilyPlan: a bug of the plugin that registers the "
                              "family (see `dpframe plugins`); report it to its authors") from e


def check_charge(plan: FamilyPlan[Any], accountant: Accountant, rate: float, what: str) -> SessionCost:
    """What the ledger reserves for a family's ``plan``: its charge, once checked against its cost (else a PluginError).

    In a session that charges budgets (``basic``, ``zcdp``) the charge is at least ``accountant.charge_plan(plan.cost,
    None, rate)`` (its cost, amplified by the frame's Poisson sampling ``rate`` where the accountant amplifies). In a
    session that charges privacy curves (``rdp``, ``pld``: the Rényi filter) it is at least the cost's curve at every
    order the filter reads, or it is backed by the descriptions of the curves it came from, rebuilt by dpframe, which
    do not prove the plan more private than its cost
    (:func:`~dpframe.accounting.curve_charge.check_curve_charge`, whose docstring says why that is sound, for the
    filter and for the PLD reports); the charge returned is then a copy keeping only the descriptions checked. An
    :class:`~dpframe.accounting.RDPCharge` a third-party accountant composes is checked alike, with dpframe's own
    filter's formulas (:func:`~dpframe.accounting.curve_charge.reference`). A charge the core cannot compare (a
    third-party accountant's own kind) is not reserved: the core reserves ``accountant.charge_plan(plan.cost, None,
    rate)``, the accountant's charge of the cost itself (sound for every ``cost``-private plan; a plan's curves
    cannot make it lower there). A refusal charges nothing: the core checks while planning (``cost()``,
    ``explain()``, ``collect()``).

    Example:
        >>> import dpframe as dp
        >>> from dpframe.accounting import BasicAccountant
        >>> plan = FamilyPlan(dp.PureDP(1), dp.PureDP(1), dp.PureDP(0.01), "m", Explain("t"), print)
        >>> check_charge(plan, BasicAccountant(dp.PureDP(10)), 1.0, "mine()")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: budget: the plan of mine() charges ε=1/100, less than its cost ε=1 costs...
        >>> from dpframe import accounting as acc
        >>> rdp = acc.RDPAccountant(dp.ApproxDP(10, 1e-5))
        >>> tiny = FamilyPlan(dp.PureDP(1), dp.PureDP(1), rdp.charge(dp.PureDP(0.01)), "m", Explain("t"), print)
        >>> check_charge(tiny, rdp, 1.0, "mine()")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: budget: the plan of mine() costs ε=1 but its curves (ε-DP(ε=0.01)) prove it...

    """
    charged = plan.charge
    fix = ("this is a query family plugin bug: a plan's charge is accountant.charge_plan(cost, curves, rate) with the "
           "curves of the mechanisms it runs (dpframe's curve constructors, e.g. dpframe.accounting.laplace), or "
           "charge_plan(cost, None, rate); report it to the authors of the plugin that registers it (see "
           "`dpframe plugins`)")
    budget = isinstance(plan.cost, PureDP | ApproxDP | ZCDP)
    if budget and isinstance(accountant, RenyiFilter):
        return _curve_charge(charged, plan.cost, accountant, rate, what, fix)
    try:
        least = accountant.charge_plan(plan.cost, None, rate)
    except DPFrameError as e:   # the budget converts (checked first): a cost that does not is the plan's
        raise _uncharged(plan.cost, what, e) from None
    if budget and isinstance(least, RDPCharge):     # a third-party accountant composing RDP charges
        return _curve_charge(charged, plan.cost, reference(), rate, what, fix)
    if not isinstance(least, PureDP | ApproxDP | ZCDP):
        return least            # a third-party accountant's own kind of charge: not one the core can compare
    if not isinstance(charged, PureDP | ApproxDP | ZCDP):
        return charged          # not a charge of this accountant: its check_charge refuses it, free
    if charged.notion != least.notion or first(charged) < first(least) \
            or getattr(charged, "delta", 0) < getattr(least, "delta", 0):
        raise PluginError(f"the plan of {what} charges {describe(charged)}, less than its cost {describe(plan.cost)} "
                          f"costs the session ({describe(least)})", argument="budget", fix=fix)
    return charged


def _curve_charge(charged: object, cost: Budget, filt: RenyiFilter, rate: float, what: str, fix: str) -> RDPCharge:
    """The copy of a charge of curves to reserve (:func:`check_curve_charge` with ``filt``), or a PluginError."""
    try:
        checked, why = check_curve_charge(charged, cost, filt, rate)
    except DPFrameError as e:   # the budget converts (checked first): a cost that does not is the plan's
        raise _uncharged(cost, what, e) from None
    if checked is None:
        raise PluginError(f"the plan of {what} costs {describe(cost)} but {why}", argument="budget", fix=fix)
    return checked


def _uncharged(cost: Budget, what: str, e: DPFrameError) -> PluginError:
    """The PluginError of a plan whose ``cost`` the session's accountant cannot charge (``e`` says why)."""
    return PluginError(f"the plan of {what} costs {describe(cost)}, which this session cannot charge ({e.message})",
                       argument="budget",
                       fix="this is a query family plugin bug: a plan's cost is in a notion its session holds (one the "
                           "query's budget converts to); report it to the authors of the plugin that registers it "
                           "(see `dpframe plugins`)")


def check_format(format: object) -> None:
    """``explain(format=...)`` is ``"text"`` or ``"json"``; a PlanError otherwise."""
    if not isinstance(format, str) or format not in ("text", "json"):
        raise PlanError(f"unknown format {format!r}", argument="format", fix="use 'text' or 'json'")


def needs_budget(budget: object, method: str) -> object:
    """``budget``, or (None: a Polars habit, ``collect()``) a BudgetError saying what to pass. Nothing is charged.

    Example:
        >>> needs_budget(None, "collect")
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: collect() needs this query's privacy budget. Fix: ...

    """
    if budget is None:
        raise BudgetError(f"{method}() needs this query's privacy budget", argument="budget",
                          fix=f"pass one, e.g. {method}(budget=dp.PureDP(0.5)) (or dp.ApproxDP(eps, delta), "
                              "dp.ZCDP(rho)); explain(budget) shows what it buys and costs nothing")
    return budget


def render(front: Front, plan: FamilyPlan[Any], format: str = "text", unit: PrivacyUnit | None = None) -> Any:
    """The one ``explain()`` renderer: the family's explanation plus the budget block.

    An :class:`~dpframe.display.Explanation` (the text, with notebook reprs), or its ``to_dict()`` for
    ``format="json"``. ``unit``: the unit the query is bounded by (``frame.bound``), None for the session's.
    """
    return render_explain(front, plan.explained(), plan.budget, plan.cost, plan.charge, format, unit)


def guarantee(cost: Budget) -> str:
    """The privacy notion a release of cost ``cost`` satisfies, in words (``explain()``'s ``protects:`` line).

    Example:
        >>> import dpframe as dp
        >>> guarantee(dp.PureDP(1)), guarantee(dp.ApproxDP(1, 1e-6)), guarantee(dp.ZCDP(0.5, 1e-9))
        ('ε-DP at the cost below', '(ε, δ)-DP at the cost below', 'δ-approximate ρ-zCDP at the cost below')

    """
    if isinstance(cost, ZCDP):
        notion = "δ-approximate ρ-zCDP" if cost.delta else "ρ-zCDP"
    else:
        notion = "(ε, δ)-DP" if isinstance(cost, ApproxDP) and cost.delta else "ε-DP"
    return f"{notion} at the cost below"


def render_explain(front: Front, e: Explain, requested: Budget, cost: Budget, charge: SessionCost,
                   format: str = "text", unit: PrivacyUnit | None = None) -> Any:
    """:func:`render` for a query that is not a :class:`FamilyQuery` (``robust_median``): ``e`` and its charge.

    The ``protects:`` line is the family's own relation, else ``unit``'s (what a query bounded by ``frame.bound``
    keeps of a unit; None: the session's unit).
    """
    accountant = front.accountant
    spent = front._release.spent()
    after = accountant.compose([spent, charge])
    fits = accountant.fits(after)
    budget = {"requested": describe(requested), "cost": describe(cost),
              "charged": accountant.describe_charge(charge), "accountant": accountant.describe(),
              "spent": describe(accountant.report(spent)), "fits": fits,
              "remaining_after": describe(accountant.remaining(after))}
    default = front._release.unit.default_note
    notes = (*e.notes, *([default] if default else []))
    protects = f"{e.protects or (unit or front._release.unit).protects()}; guarantee: {guarantee(cost)}"
    out = Explanation(e.title, private=front.rng.private, steps=e.steps, lines=e.lines, budget=budget,
                      remaining=describe(accountant.remaining(spent)), notes=notes, data=e.data, protects=protects)
    return out.to_dict() if format == "json" else out


__all__ = ["RESERVED", "Explain", "FamilyPlan", "FamilyQuery", "Front", "QueryFamily", "ReadOnly", "Releasable",
           "Source", "check_charge", "check_cost", "check_format", "copy_plan", "guarantee", "needs_budget", "render",
           "render_explain"]
