"""The planner: from a logical plan and a budget to a physical plan with an exact cost.

It reads no data. It routes every measure to a mechanism plugin, splits the query's budget, asks each
mechanism to calibrate to its share, and converts the total cost into the session's notion, so the
accountant can reserve it before execution.

Budget split (documented in ``docs/concepts.md``): the query budget's first coordinate (ε or ρ) is
split into equal parts; each mechanism asks for as many parts as it releases distinct statistics, and
partition selection (private group keys) takes one part plus all of δ. Noise family: a pure or
approximate-DP budget uses discrete Laplace noise; a zCDP budget uses discrete Gaussian noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from dpframe.accounting.accountants import plan_curves
from dpframe.budgets import ZCDP, ApproxDP, Budget, Notion, PureDP, convert, make
from dpframe.errors import BudgetError, PlanError, PluginError
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, Mechanism, MechanismPlan, Statistic
from dpframe.plan.nodes import Aggregate, Node

if TYPE_CHECKING:
    from dpframe.accounting.accountants import Accountant
    from dpframe.session import Session


@dataclass
class PhysicalPlan:
    """Mechanisms bound to their shares, the statistics they need, and the exact cost."""

    budget: Budget
    cost: Budget
    session_cost: Budget
    selection: MechanismPlan | None
    plans: list[MechanismPlan]
    rate: float = 1.0      # Poisson sampling rate of the input (amplification is in session_cost)

    def statistics(self) -> tuple[Statistic, ...]:
        """The distinct statistics the backend must compute."""
        seen: dict[str, Statistic] = {}
        for p in ([self.selection] if self.selection else []) + self.plans:
            for s in p.statistics:
                seen.setdefault(s.key, s)
        return tuple(seen.values())


#: Largest ε (or ρ) of one query: noise is calibrated in floats, and its scale (Δ/ε) must not underflow.
MAX_QUERY_BUDGET = Fraction(10**300)


def check_budget(budget: object) -> Budget:
    """A query budget must be given, be one of dp.PureDP / dp.ApproxDP / dp.ZCDP, and be below 1e300.

    Example:
        >>> check_budget(PureDP(10**400))
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: ε (or ρ) of one query must be below 1e300 ...

    """
    if not isinstance(budget, PureDP | ApproxDP | ZCDP):
        raise BudgetError(f"expected dp.PureDP, dp.ApproxDP or dp.ZCDP, got {budget!r}", argument="budget",
                          fix="pass budget=dp.PureDP(0.5) (or another budget) to explain/cost/collect")
    if _first(budget) >= MAX_QUERY_BUDGET:
        raise BudgetError("ε (or ρ) of one query must be below 1e300 (noise scales are floats: Δ/ε would "
                          "underflow to 0)", argument="budget", fix="pass a smaller budget; 1e6 already adds "
                          "next to no noise")
    return budget


def check_convertible(budget: Budget, total: Budget) -> None:
    """Refuse a query budget whose δ the session's notion cannot hold (docs/concepts.md, Conversions).

    An (ε, δ > 0) budget implies no pure-DP or zCDP guarantee; planning it in a pure or zCDP session
    would silently drop its δ (only partition selection uses δ), so it is a
    :class:`~dpframe.errors.BudgetConversionError` before anything runs.

    Example:
        >>> check_convertible(PureDP(1), PureDP(2)) is None
        True
        >>> check_convertible(ApproxDP(1, 1e-6), PureDP(2))
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetConversionError: budget: ApproxDP(epsilon=1, delta=1e-06) cannot be converted to pure ...

    """
    if total.notion in ("pure", "zcdp") and isinstance(budget, ApproxDP) and budget.delta > 0:
        convert(budget, total.notion)


def _first(b: Budget) -> Fraction:
    return b.rho if isinstance(b, ZCDP) else b.epsilon


def plan_query(session: Session, node: Aggregate, budget: object, accountant: Accountant | None = None) -> PhysicalPlan:
    """Plan ``node`` under ``budget``; raise a DPFrameError (nothing charged) if it cannot run.

    ``accountant`` prices the plan (default: the session's); a mechanism with its own inner accounting
    (early stopping's zCDP steps in a basic session) passes a standalone one.
    """
    budget = check_budget(budget)
    accountant = session.accountant if accountant is None else accountant
    check_convertible(budget, accountant.total)
    notion: Notion = "zcdp" if budget.notion == "zcdp" else "pure"
    ctx = MeasureContext(session.privacy_unit, node.input.schema, node.grouped, notion)
    host = session.plugins
    groups: dict[str, tuple[Mechanism, list[Measure]]] = {}
    for m in node.measures:
        mech = host.mechanism_for(m.kind, notion, m.option("mechanism"))
        mech.validate(m, ctx)
        groups.setdefault(mech.name, (mech, []))[1].append(m)
    select = node.grouped and node.keys is None
    delta = getattr(budget, "delta", Fraction(0))
    total = accountant.total
    if select and (delta == 0 or getattr(total, "delta", Fraction(0)) == 0):
        where = "the query budget has" if getattr(total, "delta", Fraction(0)) else "this session's total budget has"
        fix = ("pass public keys: group_by(..., keys=[...])" if where.startswith("this") else
               "pass public keys: group_by(..., keys=[...]), or give the query a δ: "
               + ("dp.ZCDP(rho, delta=1e-7)" if total.notion == "zcdp" else "dp.ApproxDP(epsilon, delta=1e-7)"))
        raise BudgetError(f"grouping by private keys needs DP partition selection, which needs δ > 0, and "
                          f"{where} δ = 0", argument="budget", fix=fix)
    parts = {name: mech.parts(ms, ctx) for name, (mech, ms) in groups.items()}
    total_parts = sum(parts.values()) + (1 if select else 0)
    part = _first(budget) / total_parts
    selection = None
    if select:
        sel_mech = host.mechanism_for("partition_selection", budget.notion)
        share = make(budget.notion, part, delta)
        selection = sel_mech.plan([Measure("partition_selection")], ctx, share)
    plans = [mech.plan(ms, ctx, make(notion, part * parts[name])) for name, (mech, ms) in groups.items()]
    for p in plans:
        if p.cost.notion != notion or getattr(p.cost, "delta", Fraction(0)) != 0:
            raise PluginError(f"mechanism {p.mechanism!r} reported a {p.cost!r} cost for a {notion} share",
                              argument="mechanism", fix="this is a plugin bug: report it to the plugin's authors")
    names = set(node.by)
    for p in plans:
        for name in p.output_names():
            if name in names:
                raise PlanError(f"two output columns are named {name!r}", argument="measures",
                                fix="rename one with .alias('new_name')")
            names.add(name)
    first = sum((_first(p.cost) for p in plans), Fraction(0))
    if selection is not None:
        first += _first(selection.cost)
    used_delta = delta if select else Fraction(0)
    cost = make(budget.notion, first, used_delta)
    if first > _first(budget):
        raise PluginError(f"mechanisms cost {cost!r}, more than the query's {budget!r}", argument="budget",
                          fix="this is a mechanism plugin bug: report it")
    rate = sampling_rate(node.input)
    # every mechanism of the query reads the same Poisson sample: the accountant composes the curves
    # first and amplifies the composition once (never each curve on its own)
    curves = [c for p in ([selection] if selection else []) + plans for c in plan_curves(p.privacy, p.cost)]
    return PhysicalPlan(budget, cost, accountant.charge_plan(cost, curves, rate), selection, plans, rate)


def sampling_rate(node: Node) -> float:
    """The product of the Poisson sampling rates on the way from the scan to ``node`` (1: no sampling)."""
    rate = 1.0
    for n in node.lineage():
        rate *= getattr(n, "rate", 1.0)
    return rate
