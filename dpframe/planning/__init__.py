"""The planner: from a logical plan and a budget to a physical plan with an exact cost, reading no data.

Planning is a tuple of small pure passes over a frozen :class:`PlanState` (the shape of sqlglot's
optimizer): :data:`PASSES` check the budget, choose the noise notion, route every measure to a mechanism plugin
(capping the values released first: :func:`~dpframe.planning.passes.check_released`), require δ for private
keys, split the budget, plan partition selection and the mechanisms, check what plugins report, cap the values again
by the plans' outputs, check output names and price the plan. Each pass is one function with a doctest in
:mod:`dpframe.planning.passes`; :func:`plan` runs them, and ``explain()`` shows the notes they leave. Build-time
validation (:func:`validate_measures`) runs the routing passes only, so it can never disagree with planning; query
families call :func:`~dpframe.planning.passes.budget_of` and :func:`~dpframe.planning.passes.sampling_rate` rather
than re-deriving them.

Budget split (``docs/concepts.md``): the query budget's first coordinate (ε or ρ) is split into equal
parts; each mechanism asks for as many parts as it releases distinct statistics, and partition selection
(private group keys) takes one part plus all of δ. Noise family: a pure or approximate-DP budget uses
discrete Laplace noise; a zCDP budget uses discrete Gaussian noise.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from dpframe.accounting import BasicAccountant
    >>> from dpframe.plugin import plugin_host
    >>> ctx = PlanContext(dp.PrivacyUnit.row(), plugin_host(), BasicAccountant(dp.PureDP(2)))
    >>> node = agg_node(pl.Schema({"x": pl.Float64}), dp.len(), dp.sum("x", bounds=(0, 1)))
    >>> physical = plan_query(ctx, node, dp.PureDP(1))
    >>> physical.session_cost, physical.notes
    (PureDP(epsilon=1), ('budget: ε split into 2 equal parts of 1/2 (2 for aggregates)',))

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dpframe.planning.passes import (
    MAX_QUERY_BUDGET,
    MAX_RELEASED_CELLS,
    MAX_RELEASED_VALUES,
    budget_of,
    check_budget,
    check_output_names,
    check_plugin_costs,
    check_released,
    check_released_cells,
    choose_notion,
    plan_mechanisms,
    plan_selection,
    price,
    require_delta_for_private_keys,
    route_measures,
    sampling_rate,
    session_notion,
    split_budget,
    with_intervals,
)
from dpframe.planning.state import PhysicalPlan, PlanContext, PlanState, agg_node, first

if TYPE_CHECKING:
    from dpframe.accounting.accountants import Accountant
    from dpframe.plan.nodes import Aggregate

Pass = Callable[[PlanState], PlanState]

PASSES: tuple[Pass, ...] = (check_budget, choose_notion, route_measures,
                            require_delta_for_private_keys, split_budget, plan_selection, plan_mechanisms,
                            check_plugin_costs, check_released_cells, check_output_names, price)
"""The passes of a query plan, in order."""

VALIDATION: tuple[Pass, ...] = (session_notion, route_measures)
"""The passes ``Frame.agg`` runs when a query is built (no budget yet): each measure's mechanism accepts it."""


def plan(state: PlanState, passes: Sequence[Pass] = PASSES) -> PlanState:
    """Run ``passes`` in order over ``state``."""
    for step in passes:
        state = step(state)
    return state


def plan_query(context: PlanContext, node: Aggregate, budget: object, accountant: Accountant | None = None
               ) -> PhysicalPlan:
    """Plan ``node`` under ``budget``; raise a DPFrameError (nothing charged) if it cannot run.

    ``accountant`` prices the plan (default: the context's); a mechanism with its own inner accounting
    (early stopping's zCDP steps in a basic session) passes a standalone one.
    """
    physical = plan(PlanState.start(node, context, budget, accountant)).physical
    assert physical is not None
    return physical


def validate_measures(context: PlanContext, node: Aggregate) -> None:
    """Build-time checks of ``agg(...)``, free: each measure's mechanism accepts it (see :data:`VALIDATION`)."""
    plan(PlanState.start(node, context, None), VALIDATION)


__all__ = ["MAX_QUERY_BUDGET", "MAX_RELEASED_CELLS", "MAX_RELEASED_VALUES", "PASSES", "VALIDATION", "Pass",
           "PhysicalPlan", "PlanContext", "PlanState", "agg_node", "budget_of", "check_released", "first", "plan",
           "plan_query", "sampling_rate", "validate_measures", "with_intervals"]
