"""The planner's passes: small pure functions ``PlanState -> PlanState``, run in order by :func:`plan`.

Each pass does one job, raises a :class:`~dpframe.errors.DPFrameError` (nothing is charged) when the
query cannot run, and may leave a note for ``explain()``. Build-time validation (``Frame.agg``) runs the
first ones only, so it can never disagree with planning. The examples start from
:func:`~dpframe.planning.state.example_state`: ``len`` and ``mean`` per private group, at (1, 1e-7).

"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, TypeVar

from dpframe.accounting.accountants import Accountant, plan_curves
from dpframe.accounting.curve import PrivacyCurve
from dpframe.accounting.curve_charge import described, reference
from dpframe.accounting.rdp import RenyiFilter
from dpframe.accounting.rdp_charge import RDPCharge
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP, make, up
from dpframe.errors import BudgetError, PlanError, PluginError, plugin_failure
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, Mechanism, MechanismPlan
from dpframe.mechanism.deferred import DeferredTuple
from dpframe.plan.nodes import Node
from dpframe.plan.sample import Sample
from dpframe.planning.curve_checks import _check_cost
from dpframe.planning.state import PhysicalPlan, PlanState, first

T = TypeVar("T")

#: Largest ε (or ρ) of one query: noise is calibrated in floats, and its scale (Δ/ε) must not underflow.
MAX_QUERY_BUDGET = Fraction(10**300)


#: The most values one query releases per group (output columns, summed over its measures: a histogram's bins each).
MAX_RELEASED_VALUES = 20_000
#: The most cells one query releases: values per group × public groups (private keys count as one group).
MAX_RELEASED_CELLS = 20_000_000


def check_released(values: int, groups: int, argument: str = "measures") -> None:
    """A PlanError (naming ``argument``) when ``values`` per group × ``groups`` exceed the caps, else nothing.

    The caps bound the work of one query, which holds the session (a served one too) while it runs: planning and
    computing a released value cost about a millisecond each (100 histograms of 10,000 bins took minutes), a cell of a
    public group a few hundred nanoseconds. Public facts only: the measures, their options and the public keys (with
    private keys the groups released are the data's: counted as one here). The planner calls it before any measure
    is validated (:func:`route_measures`: each measure's values, from its mechanism's optional
    ``values_per_group(measure)``, else 1) and again with every plan's outputs (:func:`check_released_cells`);
    query families and mechanisms may call it with what they know before building their plans.

    Example:
        >>> check_released(10_000, 2_000)
        >>> check_released(20_001, 1)
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: measures: this query would release 20,001 values per group (at most 20,000: ...

    """
    if values > MAX_RELEASED_VALUES:
        raise PlanError(f"this query would release {values:,} values per group (at most {MAX_RELEASED_VALUES:,}: "
                        "planning and computing each takes about a millisecond)", argument=argument,
                        fix="release fewer values per query: fewer measures or histogram bins, split over several "
                            "queries")
    if values * groups > MAX_RELEASED_CELLS:
        raise PlanError(f"this query would release {values:,} values in each of {groups:,} public groups: "
                        f"{values * groups:,} cells (at most {MAX_RELEASED_CELLS:,})", argument=argument,
                        fix="release fewer values per query, or split the public keys over several queries")


def _public_groups(state: PlanState) -> int:
    keys = state.node.keys
    return keys.height if keys is not None else 1


def check_released_cells(state: PlanState) -> PlanState:
    """Every plan's output columns, times the public groups, within the caps of :func:`check_released`.

    After :func:`check_plugin_costs` (``output_names()`` is plugin code: what it may change in a plan is read first).

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> s = check_plugin_costs(plan_mechanisms(split_budget(route_measures(choose_notion(check_budget(state))))))
        >>> check_released_cells(s) is s
        True

    """
    values = sum(len(plugin_hook(p.mechanism, "output_names()", p.output_names)) for p in state.plans)
    check_released(values, _public_groups(state))
    return state


def check_budget(state: PlanState) -> PlanState:
    """The query budget is a dp budget below 1e300, in a notion the pricing accountant can hold.

    An (ε, δ > 0) budget implies no pure-DP or zCDP guarantee; planning it in a pure or zCDP session
    would silently drop its δ, so it is a :class:`~dpframe.errors.BudgetConversionError`; so is a zCDP budget in
    an (ε, δ) ``basic`` session. Either is refused naming the query's own budget (the cost, priced later, may
    hold less of it: a zCDP budget's δ only where partition selection spends it).

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> check_budget(state).budget
        ApproxDP(epsilon=1, delta=1e-07)
        >>> check_budget(state.but(budget=0.5))
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: expected dp.PureDP, dp.ApproxDP or dp.ZCDP, got 0.5...

    """
    budget = budget_of(state.budget)
    state.accountant.charge(budget)
    return state.but(budget=budget)


def budget_of(budget: object) -> Budget:
    """``budget`` if it is a dp budget below 1e300 (noise scales are floats), else a BudgetError.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> budget_of(PureDP(10**400))
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: ε (or ρ) of one query must be below 1e300 ...

    """
    if not isinstance(budget, PureDP | ApproxDP | ZCDP):
        raise BudgetError(f"expected dp.PureDP, dp.ApproxDP or dp.ZCDP, got {budget!r}", argument="budget",
                          fix="pass budget=dp.PureDP(0.5) (or another budget) to explain/cost/collect")
    if first(budget) >= MAX_QUERY_BUDGET:
        raise BudgetError("ε (or ρ) of one query must be below 1e300 (noise scales are floats: Δ/ε would "
                          "underflow to 0)", argument="budget", fix="pass a smaller budget; 1e6 already adds "
                          "next to no noise")
    return budget


def choose_notion(state: PlanState) -> PlanState:
    """The mechanisms' share notion: a zCDP budget calibrates Gaussian noise, any other Laplace noise.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> choose_notion(check_budget(state)).notion
        'pure'

    """
    return state.but(notion="zcdp" if state.budget.notion == "zcdp" else "pure")


def session_notion(state: PlanState) -> PlanState:
    """Build-time form of :func:`choose_notion`: no query budget yet, so the session's notion (pure or zCDP).

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> session_notion(state).notion
        'pure'

    """
    return state.but(notion="zcdp" if state.accountant.total.notion == "zcdp" else "pure")


def route_measures(state: PlanState) -> PlanState:
    """Each measure to the mechanism that handles its kind under the notion; each mechanism validates it.

    At build time (:func:`session_notion`) a measure whose mechanisms all use another notion is
    validated under one of theirs: the query budget may be of that notion.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> [(m.name, len(ms)) for m, ms in route_measures(choose_notion(check_budget(state))).groups]
        [('aggregates', 2)]

    """
    assert state.notion is not None
    host = state.context.plugins
    check_released(len(state.node.measures), _public_groups(state))    # each releases a value at least: routing costs
    routed: list[tuple[Measure, Mechanism, str]] = []
    for m in state.node.measures:
        name, notion = m.option("mechanism"), state.notion
        if state.budget is None:   # build time: fall back to a notion the kind's mechanisms support
            notions = {n for _, mech in host.mechanisms() if m.kind in mech.handles and name in (None, mech.name)
                       for n in mech.notions}
            notion = notion if notion in notions or not notions else sorted(notions)[0]  # type: ignore[assignment]
        routed.append((m, host.mechanism_for(m.kind, notion, name), notion))
    # before any validation (a histogram's parses its edges: 100 of 10,000 bins took seconds, each time)
    check_released(sum(_values_per_group(mech, m) for m, mech, _ in routed), _public_groups(state))
    groups: dict[str, tuple[Mechanism, list[Measure]]] = {}
    for m, mech, routed_notion in routed:
        ctx = _measure_context(state, routed_notion)
        _hook(mech, "validate", mech.validate, m, ctx)
        groups.setdefault(mech.name, (mech, []))[1].append(m)
    return state.but(groups=tuple((mech, tuple(ms)) for mech, ms in groups.values()))


def _values_per_group(mech: Mechanism, measure: Measure) -> int:
    """How many values per group ``measure`` releases: ``mech.values_per_group(measure)`` if it has one, else 1.

    Called before the measure is validated (so a mechanism reads only what it can count cheaply, e.g. how many edges
    an option holds, and answers 1 for what it would refuse); a count that is not a whole number ≥ 1 is a
    PluginError naming ``values_per_group()``.
    """
    count = getattr(mech, "values_per_group", None)
    if count is None:
        return 1
    n: object = _hook(mech, "values_per_group", count, measure)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise PluginError(f"mechanism {mech.name!r} said a measure releases {n!r} values per group in "
                          "values_per_group()", argument="mechanism",
                          fix="values_per_group() must return an int ≥ 1 (how many columns the measure releases): a "
                              "bug of the plugin that registers it; report it to its authors")
    return int(n)


def _hook(mech: Mechanism, name: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, ``mech``'s hook ``name``: an exception other than a DPFrameError is a PluginError.

    A plugin refuses a measure with a :class:`~dpframe.errors.DPFrameError` naming the argument; any other
    exception (a ``KeyError``, an ``AttributeError``) is a bug of the plugin, named as such, with its hook. The
    hooks receive public values only (measures, the context, the share), so the message may quote the error's.

    Example:
        >>> from dpframe_aggregates import AggregateMechanism
        >>> _hook(AggregateMechanism(), "parts", {}.__getitem__, "x")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: mechanism: mechanism 'aggregates' failed in parts() (KeyError: 'x')...

    """
    return plugin_hook(mech.name, f"{name}()", call, *args)


def plugin_hook(mechanism: str, hook: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, plugin code of ``mechanism`` (its ``hook``) run while planning: see :func:`_hook`.

    ``call`` receives public values only (the measures, the context, the share, the plan's own parameters).

    A DPFrameError the plugin raises passes through (its refusal of the measure); one a dpframe sampler raised
    about the arguments the plugin gave it, or any other exception, is a PluginError naming the mechanism and hook
    (:func:`~dpframe.errors.plugin_failure`).

    Example:
        >>> from dpframe.noise import SeededRandomSource, discrete_laplace
        >>> plugin_hook("mine", "output_names()", discrete_laplace, 0, 1, SeededRandomSource(0))
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: mechanism: mechanism 'mine' failed in output_names(): dpframe.noise.samplers...

    """
    try:
        return call(*args)
    except Exception as e:
        failure = plugin_failure(e, f"mechanism {mechanism!r}", f"in {hook}", argument="mechanism",
                                 fix=f"{hook} raised something other than a dp.DPFrameError refusing the measure: a "
                                     f"bug of the plugin that registers {mechanism!r} (see `dpframe plugins`); report "
                                     "it to its authors, or route the measure to another mechanism with "
                                     "mechanism=\"name\"")
        if failure is None:
            raise
        raise failure from e


def _parts(mech: Mechanism, measures: Sequence[Measure], ctx: MeasureContext) -> int:
    """``mech.parts(measures, ctx)``, checked: a whole number ≥ 1, else a PluginError naming ``parts()``."""
    n: object = _hook(mech, "parts", mech.parts, measures, ctx)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise PluginError(f"mechanism {mech.name!r} asked for {n!r} budget parts in parts()", argument="mechanism",
                          fix="parts() must return an int ≥ 1 (how many equal parts of the budget the plan needs): "
                              "a bug of the plugin that registers it; report it to its authors")
    return int(n)


def _measure_context(state: PlanState, notion: str | None = None) -> MeasureContext:
    return MeasureContext(state.context.unit, state.node.input.schema, state.node.grouped,
                          notion or state.notion)  # type: ignore[arg-type]


def require_delta_for_private_keys(state: PlanState) -> PlanState:
    """Keys chosen from the data need DP partition selection, which needs δ > 0 in the query and the session.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> require_delta_for_private_keys(check_budget(state.but(budget=dp.PureDP(1))))
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: grouping by private keys needs DP partition selection, ...

    """
    total_delta = Fraction(getattr(state.accountant.total, "delta", 0))
    if not state.select or (state.delta > 0 and total_delta > 0):
        return state
    if total_delta == 0:
        where, fix = "this session's total budget has", "pass public keys: group_by(..., keys=[...])"
    else:
        example = "dp.ZCDP(rho, delta=1e-7)" if state.accountant.total.notion == "zcdp" else \
            "dp.ApproxDP(epsilon, delta=1e-7)"
        where = "the query budget has"
        fix = f"pass public keys: group_by(..., keys=[...]), or give the query a δ: {example}"
    raise BudgetError(f"grouping by private keys needs DP partition selection, which needs δ > 0, and {where} "
                      "δ = 0", argument="budget", fix=fix)


def split_budget(state: PlanState) -> PlanState:
    """Equal parts of ε (or ρ): each mechanism asks for as many as it releases statistics; selection takes one.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> s = split_budget(route_measures(choose_notion(check_budget(state))))
        >>> s.parts, s.part
        ((3,), Fraction(1, 4))
        >>> s.notes[-1]
        'budget: ε split into 4 equal parts of 1/4 (3 for aggregates, 1 for partition selection)'

    """
    ctx = _measure_context(state)
    parts = tuple(_parts(mech, ms, ctx) for mech, ms in state.groups)
    total = sum(parts) + (1 if state.select else 0)
    part = first(state.budget) / total
    who = [f"{p} for {mech.name}" for (mech, _), p in zip(state.groups, parts)]
    who += ["1 for partition selection"] if state.select else []
    symbol = "ρ" if state.budget.notion == "zcdp" else "ε"
    return state.but(parts=parts, part=part).noted(
        f"budget: {symbol} split into {total} equal part{'s' * (total != 1)} of {part} ({', '.join(who)})")


def plan_selection(state: PlanState) -> PlanState:
    """Partition selection's plan (private keys only), at one part of the budget and all of its δ.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> s = plan_selection(split_budget(route_measures(choose_notion(check_budget(state)))))
        >>> s.selection.mechanism
        'partition_selection'

    """
    if not state.select:
        return state
    assert state.part is not None
    mech = state.context.plugins.mechanism_for("partition_selection", state.budget.notion)
    share = make(state.budget.notion, state.part, state.delta)
    ctx = _measure_context(state)
    measures = (Measure("partition_selection"),)
    return state.but(selection=_planned(mech, _hook(mech, "plan", mech.plan, measures, ctx, share)))


def plan_mechanisms(state: PlanState) -> PlanState:
    """Each mechanism calibrated to its parts of the budget.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> s = plan_mechanisms(split_budget(route_measures(choose_notion(check_budget(state)))))
        >>> [(p.mechanism, p.cost) for p in s.plans]
        [('aggregates', PureDP(epsilon=3/4))]

    """
    assert state.part is not None and state.notion is not None
    ctx = _measure_context(state)
    notion = state.notion

    def plan(mech: Mechanism, measures: tuple[Measure, ...], share: Budget) -> MechanismPlan:
        # ``measures`` a tuple: a plan that emptied a list it was given released nothing and was charged
        return _planned(mech, _hook(mech, "plan", mech.plan, measures, ctx, share))
    plans = tuple(plan(mech, ms, make(notion, state.part * n)) for (mech, ms), n in zip(state.groups, state.parts))
    return state.but(plans=plans)


def _planned(mech: Mechanism, plan: object) -> MechanismPlan:
    """``plan`` if ``mech.plan`` returned a MechanismPlan whose cost is a dp budget, else a PluginError."""
    if not isinstance(plan, MechanismPlan):
        raise PluginError(f"mechanism {mech.name!r} returned a {type(plan).__name__} from plan()", argument="mechanism",
                          fix="plan() must return a dpframe.mechanism.MechanismPlan (a subclass overriding release): "
                              "a bug of the plugin that registers it; report it to its authors")
    if not isinstance(plan.cost, PureDP | ApproxDP | ZCDP):
        raise PluginError(f"mechanism {mech.name!r} returned a plan from plan() whose cost is a "
                          f"{type(plan.cost).__name__}", argument="mechanism",
                          fix="a plan's cost is a budget in its share's notion (e.g. noise.cost()): a bug of the "
                              "plugin that registers it; report it to its authors")
    return plan


def check_plugin_costs(state: PlanState) -> PlanState:
    """A mechanism's cost: its share's notion, no δ, positive, at most the share, at least its declared noise.

    Otherwise a plugin bug (a PluginError, free); the declared noise is the :class:`~dpframe.mechanism.Noise` in
    the plan's ``noise``, their costs read in the share's notion and added up (a pure-ε noise under a zCDP share
    costs ε²/2; a Gaussian noise under a pure share has no pure cost: refused). The partition-selection plan (which
    a plugin handling ``partition_selection`` provides) is checked alike, against its (ε or ρ, δ) share. Where the
    session charges privacy curves (``rdp``, ``pld``), a plan's declared curves, composed, are at least its declared
    noises' at every order the filter reads (:meth:`~dpframe.mechanism.Noise.rdp`); a plan declaring no noise (the
    exponential-mechanism quantiles), or noise costing less than its cost, has its curves checked against its cost
    as a query family's charge is, and a partition-selection plan's curves carry its cost's δ. A third-party
    accountant charging curves (not a Rényi filter) gets the same checks, with dpframe's own filter's formulas, and
    only curves dpframe built. The checks are :mod:`dpframe.planning.curve_checks`'s (its ``_check_cost``). Each
    plan's cost and curves are read once: :func:`price` charges what was checked (plugin code run in between cannot
    change it). The engine charges the cost a plan reports; these are the lies it can see. One it cannot (noise
    weaker than declared, randomness not from ``rng``) is the conformance suite's and the audit's to catch.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> s = check_plugin_costs(plan_mechanisms(split_budget(route_measures(choose_notion(check_budget(state))))))
        >>> s.plans[0].cost, s.checked[0][0]
        (PureDP(epsilon=3/4), PureDP(epsilon=3/4))

    """
    assert state.part is not None and state.notion is not None
    curves = _charges_curves(state.accountant)
    sampled = curves and sampling_rate(state.node.input) < 1
    rdp: RenyiFilter | None = None
    if curves:
        rdp = state.accountant if isinstance(state.accountant, RenyiFilter) else reference()
    third = curves and not isinstance(state.accountant, RenyiFilter)
    checked = []
    if state.selection is not None:
        checked.append(_check_cost(state.selection, state.budget.notion, state.part, state.delta, curves, sampled,
                                   rdp, third))
    for p, n in zip(state.plans, state.parts):
        checked.append(_check_cost(p, state.notion, state.part * n, Fraction(0), curves, sampled, rdp, third))
    return state.but(checked=tuple(checked))


def _charges_curves(accountant: Accountant) -> bool:
    """Whether ``accountant`` charges a plan's privacy curves (the base ``charge_plan`` charges its cost)."""
    return type(accountant).charge_plan is not Accountant.charge_plan


def check_output_names(state: PlanState) -> PlanState:
    """No two output columns (group keys included) share a name.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> twice = state.node.__class__(state.node.input, (), None, (dp.len(), dp.len()))
        >>> check_output_names(plan_mechanisms(split_budget(route_measures(choose_notion(check_budget(
        ...     state.but(node=twice)))))))
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: measures: two output columns are named 'len'...

    """
    _distinct_outputs(state.node.by, state.plans, "measures", "rename one with .alias('new_name')")
    return state


def with_intervals(physical: PhysicalPlan, by: Sequence[str], confidence: float) -> PhysicalPlan:
    """``physical`` whose mechanisms also release ``<output>_ci_low`` / ``_ci_high`` at ``confidence`` (free).

    A PlanError naming ``ci`` when an interval column would take the name of another output (a measure
    or a group key): the release would overwrite one with the other, or fail after its charge.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> physical = price(plan_mechanisms(split_budget(route_measures(choose_notion(check_budget(state)))))).physical
        >>> with_intervals(physical, (), 0.9).plans[0].output_names()
        ('len', 'x_mean', 'len_ci_low', 'len_ci_high', 'x_mean_ci_low', 'x_mean_ci_high')

    """
    plans = [dataclasses.replace(p, confidence=confidence) for p in physical.plans]
    _distinct_outputs(by, plans, "ci", "rename the output whose name ends in _ci_low / _ci_high (with .alias(...) or "
                                       "AS), or leave ci= out")
    return dataclasses.replace(physical, plans=plans)


def _distinct_outputs(by: Sequence[str], plans: Sequence[MechanismPlan], argument: str, fix: str) -> None:
    names = set(by)
    for p in plans:
        for name in plugin_hook(p.mechanism, "output_names()", p.output_names):
            if name in names:
                raise PlanError(f"two output columns are named {name!r}", argument=argument, fix=fix)
            names.add(name)


def price(state: PlanState) -> PlanState:
    """The exact cost (never above the budget) and the session's charge, Poisson sampling included.

    Every mechanism reads the same sample, so the accountant composes their curves first and
    amplifies the composition once (never each curve on its own).

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> s = price(plan_mechanisms(plan_selection(split_budget(route_measures(choose_notion(check_budget(state)))))))
        >>> s.physical.cost, s.physical.session_cost
        (ApproxDP(epsilon=1, delta=1e-07), ApproxDP(epsilon=1, delta=1e-07))

    """
    if state.checked is None:
        state = check_plugin_costs(state)
    assert state.checked is not None
    spent = sum((first(cost) for cost, _ in state.checked), Fraction(0))
    cost = make(state.budget.notion, spent, state.delta if state.select else Fraction(0))
    if spent > first(state.budget):
        raise PluginError(f"mechanisms cost {cost!r}, more than the query's {state.budget!r}", argument="budget",
                          fix="this is a mechanism plugin bug: report it")
    rate = sampling_rate(state.node.input)
    try:
        charge = state.accountant.charge_plan(cost, _charged_curves(state.accountant, state.checked), rate)
    except Exception as e:   # a plan's curve function, read at the orders amplification asks: the plugin's slip
        names = ", ".join(repr(p.mechanism) for p in (*([state.selection] if state.selection else []), *state.plans))
        failure = plugin_failure(e, f"mechanism {names}", "reading its privacy curves for the charge",
                                 argument="mechanism", fix="a bug of the plugin that registers it (a curve's rdp "
                                 "function is read at every order its amplification asks); report it to its authors")
        if failure is None:
            raise
        raise failure from e
    if isinstance(charge, RDPCharge):       # the reports compose its descriptions: only those costing what it does
        charge = described(charge)
    notes = state.notes
    if rate < 1:
        notes = (*notes, f"Poisson sample at rate {rate:g}: " + (
            "charged the full cost (zCDP cannot express amplification; use accountant='rdp')"
            if state.accountant.notion == "zcdp" else "the charge is the amplified cost"))
    physical = PhysicalPlan(state.budget, cost, charge, state.selection, list(state.plans), rate, notes)
    return state.but(physical=physical, notes=notes)


def _charged_curves(accountant: Accountant, checked: Sequence[tuple[Budget, Any]]) -> list[PrivacyCurve] | None:
    """The curves ``accountant.charge_plan`` is passed for the plans' checked ``(cost, privacy)`` (or None).

    None where it would only check them.

    The base :meth:`~dpframe.accounting.Accountant.charge_plan` (``basic`` and ``zcdp`` sessions) charges the
    cost and only checks the curves; a plan's curves that are still deferred (:class:`DeferredTuple`: built
    by the engine's own mechanisms, on first read) are then not built. Every other accountant, or any plan
    whose curves were given as they are, gets them all, as before.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> s = check_plugin_costs(plan_mechanisms(split_budget(route_measures(choose_notion(check_budget(state))))))
        >>> _charged_curves(state.accountant, s.checked), s.plans[0].privacy.built
        (None, False)

    """
    if not _charges_curves(accountant) and all(
            isinstance(privacy, DeferredTuple) and not privacy.built for _, privacy in checked):
        return None
    return [c for cost, privacy in checked for c in plan_curves(privacy, cost)]


def sampling_rate(node: Node) -> float:
    """The product of the Poisson sampling rates on the way from the scan to ``node`` (1: no sampling), rounded up.

    Example:
        >>> import dpframe as dp; from dpframe.planning.state import example_state; state = example_state()
        >>> sampling_rate(state.node.input)
        1.0

    """
    rate = Fraction(1)
    for n in node.lineage():
        if isinstance(n, Sample):
            rate *= Fraction(n.rate)
    return up(rate)       # rounded up: a product rounded to the nearest float can be below the true rate
