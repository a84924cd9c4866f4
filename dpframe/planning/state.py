"""The planner's state: a frozen record each pass reads and returns a new copy of.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from dpframe.plugin import plugin_host
    >>> from dpframe.accounting import BasicAccountant
    >>> ctx = PlanContext(dp.PrivacyUnit.row(), plugin_host(), BasicAccountant(dp.PureDP(1)))
    >>> state = PlanState.start(agg_node(pl.Schema({"x": pl.Float64}), dp.len()), ctx, dp.PureDP(0.5))
    >>> state.budget, state.notion, state.notes
    (PureDP(epsilon=1/2), None, ())

"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import polars as pl

from dpframe.budgets import ZCDP, ApproxDP, Budget, Notion
from dpframe.measures import Measure
from dpframe.mechanism import Mechanism, MechanismPlan, Statistic
from dpframe.plan.nodes import Aggregate, Scan
from dpframe.privacy_unit import PrivacyUnit

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.accounting.accountants import Accountant
    from dpframe.plugin import PluginHost


@dataclass(frozen=True)
class PlanContext:
    """The public facts of a session a plan depends on: the privacy unit, the plugins, the accountant.

    Everything a planner (or a query family) may read before charging; nothing here touches private data.
    """

    unit: PrivacyUnit
    plugins: PluginHost
    accountant: Accountant
    backend: str = "polars"     # the session's backend (a query may name another)


@dataclass
class PhysicalPlan:
    """Mechanisms bound to their shares, the statistics they need, and the exact cost."""

    budget: Budget
    cost: Budget
    session_cost: SessionCost
    selection: MechanismPlan | None
    plans: list[MechanismPlan]
    rate: float = 1.0      # Poisson sampling rate of the input (amplification is in session_cost)
    notes: tuple[str, ...] = ()   # what the passes decided, for explain()

    def statistics(self) -> tuple[Statistic, ...]:
        """The distinct statistics the backend must compute."""
        seen: dict[str, Statistic] = {}
        for p in ([self.selection] if self.selection else []) + self.plans:
            for s in p.statistics:
                seen.setdefault(s.key, s)
        return tuple(seen.values())

    def kinds(self) -> frozenset[str]:
        """The statistic kinds the backend must compute (see :class:`~dpframe.backends.base.ListsKinds`)."""
        return frozenset(s.kind for s in self.statistics())


@dataclass(frozen=True)
class PlanState:
    """Where planning stands: filled in pass by pass (see :data:`dpframe.planning.PASSES`)."""

    node: Aggregate
    context: PlanContext
    budget: Any                                  # checked into a Budget by ``check_budget``
    accountant: Accountant                       # prices the plan (the session's, or a standalone one)
    notion: Notion | None = None                 # the mechanisms' share notion: "pure" or "zcdp"
    groups: tuple[tuple[Mechanism, tuple[Measure, ...]], ...] = ()
    parts: tuple[int, ...] = ()                  # parts of the budget each group asks for
    part: Fraction | None = None                 # one part's ε (or ρ)
    selection: MechanismPlan | None = None
    plans: tuple[MechanismPlan, ...] = ()
    physical: PhysicalPlan | None = None
    notes: tuple[str, ...] = field(default=())
    # each plan's (cost, privacy curves) as ``check_plugin_costs`` read and checked them (the selection's first):
    # what ``price`` charges, whatever plugin code run since did to the plans
    checked: tuple[tuple[Budget, Any], ...] | None = None

    @classmethod
    def start(cls, node: Aggregate, context: PlanContext, budget: object,
              accountant: Accountant | None = None) -> PlanState:
        """The state before any pass: ``accountant`` defaults to the context's."""
        return cls(node, context, budget, accountant if accountant is not None else context.accountant)

    def but(self, **changes: Any) -> PlanState:
        """A copy with ``changes`` (the state is frozen): ``dataclasses.replace`` without re-running ``__init__``.

        The fields are copied as they are (a pass runs this about ten times per plan: ``replace`` cost 8 µs a
        call, this 2 µs); a name that is not a field is a ``TypeError``, as ``replace`` says.

        Example:
            >>> state = example_state()
            >>> state.but(notes=("n",)).notes, state.notes
            (('n',), ())
            >>> state.but(note="n")
            Traceback (most recent call last):
            ...
            TypeError: PlanState has no field 'note'

        """
        unknown = changes.keys() - _FIELDS
        if unknown:
            raise TypeError(f"PlanState has no field {min(unknown)!r}")
        copy = object.__new__(PlanState)
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    def noted(self, note: str) -> PlanState:
        """A copy with one more note for ``explain()``."""
        return self.but(notes=(*self.notes, note))

    @property
    def select(self) -> bool:
        """Whether the group keys come from DP partition selection (grouped, no public keys)."""
        return self.node.grouped and self.node.keys is None

    @property
    def delta(self) -> Fraction:
        """The query budget's δ (0 for pure and δ-free zCDP budgets)."""
        return Fraction(getattr(self.budget, "delta", 0))


_FIELDS = frozenset(f.name for f in dataclasses.fields(PlanState))
"""The names :meth:`PlanState.but` may change."""


def first(budget: Budget) -> Fraction:
    """ε of a pure/approximate budget, ρ of a zCDP one.

    Example:
        >>> import dpframe as dp
        >>> first(dp.PureDP(1)), first(dp.ZCDP(0.5)), first(dp.ApproxDP(2, 1e-6))
        (Fraction(1, 1), Fraction(1, 2), Fraction(2, 1))

    """
    return budget.rho if isinstance(budget, ZCDP) else budget.epsilon


def agg_node(schema: pl.Schema, *measures: Measure, by: tuple[str, ...] = (),
             keys: pl.DataFrame | None = None) -> Aggregate:
    """An aggregate over a table of ``schema`` (for examples and tests of single passes)."""
    return Aggregate(Scan.of("t", schema), by, keys, measures)


def example_state() -> PlanState:
    """The state the passes' examples start from: ``len`` and ``mean`` per private group of ``g`` at (1, 1e-7).

    Example:
        >>> example_state().budget
        ApproxDP(epsilon=1, delta=1e-07)

    """
    from dpframe.accounting import BasicAccountant
    from dpframe.measures import len as count_rows
    from dpframe.measures import mean
    from dpframe.plugin import plugin_host

    context = PlanContext(PrivacyUnit("u", max_rows=2), plugin_host(), BasicAccountant(ApproxDP(4, 1e-6)))
    schema = pl.Schema({"u": pl.Int64, "g": pl.String, "x": pl.Float64})
    node = agg_node(schema, count_rows(), mean("x", bounds=(0, 10)), by=("g",))
    return PlanState.start(node, context, ApproxDP(1, 1e-7))


__all__ = ["PhysicalPlan", "PlanContext", "PlanState", "agg_node", "example_state", "first"]
