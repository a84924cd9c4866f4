"""The planner's passes: small pure functions ``PlanState -> PlanState``, run in order by :func:`plan`.

Each pass does one job, raises a :class:`~dpframe.errors.DPFrameError` (nothing is charged) when the
query cannot run, and may leave a note for ``explain()``. Build-time validation (``Frame.agg``) runs the
first ones only, so it can never disagree with planning. The examples start from
:func:`~dpframe.planning.state.example_state`: ``len`` and ``mean`` per private group, at (1, 1e-7).

"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, TypeVar

import numpy as np

from dpframe.accounting.accountants import Accountant, plan_curves
from dpframe.accounting.curve import PrivacyCurve, from_json
from dpframe.accounting.curve_charge import check_curve_charge, described, reference
from dpframe.accounting.rdp import RenyiFilter
from dpframe.accounting.rdp_charge import FILTER_ORDERS, RDPCharge, filter_rdp
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP, add_up, convert, describe, make, up
from dpframe.errors import BudgetConversionError, BudgetError, PlanError, PluginError, plugin_failure
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, Mechanism, MechanismPlan, Noise
from dpframe.mechanism.deferred import DeferredTuple
from dpframe.plan.nodes import Node
from dpframe.plan.sample import Sample
from dpframe.planning.state import PhysicalPlan, PlanState, first

T = TypeVar("T")

#: Largest ε (or ρ) of one query: noise is calibrated in floats, and its scale (Δ/ε) must not underflow.
MAX_QUERY_BUDGET = Fraction(10**300)


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
    groups: dict[str, tuple[Mechanism, list[Measure]]] = {}
    for m in state.node.measures:
        name, notion = m.option("mechanism"), state.notion
        if state.budget is None:   # build time: fall back to a notion the kind's mechanisms support
            notions = {n for _, mech in host.mechanisms() if m.kind in mech.handles and name in (None, mech.name)
                       for n in mech.notions}
            notion = notion if notion in notions or not notions else sorted(notions)[0]  # type: ignore[assignment]
        mech = host.mechanism_for(m.kind, notion, name)
        ctx = _measure_context(state, notion)
        _hook(mech, "validate", mech.validate, m, ctx)
        groups.setdefault(mech.name, (mech, []))[1].append(m)
    return state.but(groups=tuple((mech, tuple(ms)) for mech, ms in groups.values()))


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
    as a query family's charge is (:func:`_check_bare_curves`), and a partition-selection plan's curves carry its
    cost's δ (:func:`_check_delta0`). A third-party accountant charging curves (not a Rényi filter) gets the same
    checks, with dpframe's own filter's formulas, and only curves dpframe built (:func:`_third_party_curves`). Each
    plan's cost and curves are read once: :func:`price` charges what was checked (plugin code run in between cannot
    change it). The engine
    charges the cost a plan reports; these are the lies it can see. One it cannot (noise weaker than declared,
    randomness not from ``rng``) is the conformance suite's and the audit's to catch.

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


def _check_cost(p: MechanismPlan, notion: str, share: Fraction, delta: Fraction, curves: bool = False,
                sampled: bool = False, rdp: RenyiFilter | None = None,
                third_party: bool = False) -> tuple[Budget, Any]:
    """``p``'s reported cost against its share (``share`` in ε or ρ, ``delta``): :func:`check_plugin_costs`.

    Returns the (cost, privacy curves) checked, each read once from the plan; ``curves``: the session charges
    curves (they are checked too); ``sampled``: on a Poisson sample (a curve's subsampling claims are dropped,
    :func:`_plain`); ``rdp``: the session's Rényi filter (dpframe's own, :func:`~dpframe.accounting.curve_charge.
    reference`, under a ``third_party`` accountant), which checks the curves of a plan whose declared noise does not
    pay for its cost (:func:`_check_bare_curves`); ``third_party``: the session's accountant charges curves and is no
    Rényi filter, and is given only dpframe's own curves (:func:`_third_party_curves`).
    """
    cost, privacy = p.cost, _snapshot(p.privacy)
    if curves and isinstance(privacy, Sequence) and all(isinstance(c, PrivacyCurve) for c in privacy):
        privacy = _read(p.mechanism, "its privacy curves", _read_curves, privacy)
    if cost.notion != notion or getattr(cost, "delta", Fraction(0)) > delta:
        raise PluginError(f"mechanism {p.mechanism!r} reported a {cost!r} cost for a {notion} share"
                          + (f" with δ={delta}" if delta else ""),
                          argument="mechanism", fix="this is a plugin bug: report it to the plugin's authors")
    spent = first(cost)
    if not 0 < spent <= share:
        raise PluginError(f"mechanism {p.mechanism!r} reported a cost of {_coordinate(notion)}={spent} for "
                          f"a share of {share}", argument="mechanism",
                          fix="a plan's cost is positive and at most its share (equal to it when every noise is "
                              "calibrated to the share): a bug of the plugin that registers it; report it")
    noises = _read(p.mechanism, "its noise table", _noises, p)
    declared = _declared(p.mechanism, noises, notion)
    if declared > spent:
        raise PluginError(f"mechanism {p.mechanism!r} reported a cost of {_coordinate(notion)}={spent}, below "
                          f"what the noise its plan declares costs ({declared})", argument="mechanism",
                          fix="a plan's cost is at least what its noises cost (noise.cost() added up): a bug of "
                              "the plugin that registers it; report it to its authors")
    floor: tuple[PrivacyCurve, ...] = ()
    if curves and noises:
        _read(p.mechanism, "its privacy curves", _check_curves, p.mechanism, privacy, noises)
    if curves and delta:
        _read(p.mechanism, "its privacy curves", _check_delta0, p.mechanism, privacy, cost)
    if rdp is not None and not (noises and declared == spent):     # noises paying for the whole cost: checked above
        floor = _read(p.mechanism, "its privacy curves", _check_bare_curves, p.mechanism, privacy, cost, rdp,
                      bool(noises))
    if curves and noises:       # the reports compose the descriptions: only those of the declared noises
        privacy = _read(p.mechanism, "its privacy curves", _own_descriptions, privacy, noises)
    if third_party:
        return cost, _read(p.mechanism, "its privacy curves", _third_party_curves, privacy, cost, noises)
    if sampled and isinstance(privacy, Sequence) and all(isinstance(c, PrivacyCurve) for c in privacy):
        privacy = _as_checked(tuple(_plain(c) for c in privacy), noises, floor)
    elif (floor or (curves and noises)) and _under(privacy, noises, floor):
        # accepted within the checks' 10⁻⁹ of float slack, below what they were checked against: charged that
        privacy = _as_checked(tuple(privacy), noises, floor)    # type: ignore[arg-type]
    return cost, privacy


def _third_party_curves(privacy: object, cost: Budget,
                        noises: Sequence[tuple[str, Noise]]) -> tuple[PrivacyCurve, ...] | None:
    """The curves a third-party accountant (one charging curves, not a Rényi filter) is given for a checked plan.

    Such an accountant may read any function of a curve (its privacy profile, its RDP at any order, how it amplifies
    on a sample), while the engine checks a plan's curves by their RDP at the Rényi filter's orders: a curve honest
    there and lying elsewhere (a profile a hundredth of its noise's) would be charged its lie. So the accountant
    gets only curves dpframe built itself from checked parameters: those the plan's descriptions rebuild where
    :func:`~dpframe.accounting.curve_charge.check_curve_charge` accepts the plan's charge (against its cost, dpframe's
    formulas, unamplified: the accountant amplifies; a charge accepted as at least the cost's own curve is described
    by that curve) and they are at least its declared noises' floor at every filter order; else None: the cost's own
    curve (:func:`~dpframe.accounting.accountants.plan_curves`), which every
    ``cost``-private mechanism has.

    Example:
        >>> from dpframe import accounting as acc
        >>> [c.label for c in _third_party_curves((acc.laplace(1.0),), PureDP(1), [])]
        ['Laplace(b=1, Δ=1)']
        >>> [c.label for c in _third_party_curves((acc.from_rdp(lambda a: 0.5 * a),), PureDP(1), [])]  # no description
        ['ε-DP(ε=1)']

    """
    if not isinstance(privacy, Sequence) or not privacy or not all(
            isinstance(c, PrivacyCurve) and c.rdp is not None for c in privacy):
        return None
    checked, _ = check_curve_charge(RDPCharge.of(privacy), cost, reference(), 1.0)
    if checked is None or not checked.specs:
        return None
    rebuilt = tuple(from_json(text) for text in checked.specs)
    if noises:
        floor = sum((Noise.filter_rdp(n) for _, n in noises), np.zeros(len(FILTER_ORDERS)))
        if not np.all(np.asarray(RDPCharge.of(rebuilt).values) >= floor * (1 - 1e-9)):
            return None
    return rebuilt


def _under(privacy: object, noises: Sequence[tuple[str, Noise]], floor: Sequence[PrivacyCurve]) -> bool:
    """Whether checked curves read, at some order the filter reads (or in δ0), below their noises' or ``floor``'s.

    :func:`_check_curves` and :func:`_check_bare_curves` accept curves up to 10⁻⁹ relatively below (float order);
    those are charged as :func:`_as_checked` reads them, no lower than what they were checked against.
    """
    if not isinstance(privacy, Sequence) or not privacy or not all(
            isinstance(c, PrivacyCurve) and c.rdp is not None for c in privacy):
        return False
    have = RDPCharge.of(list(privacy))
    bound = RDPCharge.of(list(floor)) if floor else RDPCharge(tuple(0.0 for _ in FILTER_ORDERS), 0.0)
    least = np.maximum(bound.values, sum((Noise.filter_rdp(n) for _, n in noises), np.zeros(len(FILTER_ORDERS))))
    return bool(np.any(np.asarray(have.values) < least)) or have.delta0 < bound.delta0


def _read(mechanism: str, what: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, reading a plan's ``what`` (plugin code: a mapping, curve functions): a PluginError on failure.

    Example:
        >>> _read("mine", "its noise table", {}.__getitem__, "x")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: mechanism: mechanism 'mine' failed reading its noise table (KeyError: 'x')...

    """
    try:
        return call(*args)
    except Exception as e:
        failure = plugin_failure(e, f"mechanism {mechanism!r}", f"reading {what}", argument="mechanism",
                                 fix="a bug of the plugin that registers it (its plan's noise table and curves are "
                                     "read before the charge); report it to its authors")
        if failure is None:
            raise
        raise failure from e


def _plain(curve: PrivacyCurve) -> PrivacyCurve:
    """``curve`` without the subsampling claims no check reads, for a plan on a Poisson sample (``curve`` if none).

    Its own exact ``sampled_rdp``, its ``tight_subsampling`` flag, a subclass's ``subsampled``, and a ``gaussian``
    spec (the composition of Gaussians is rebuilt from the specs): amplified from its checked RDP curve and pure
    bound instead, with the general bound. The engine's mechanisms declare none of them.
    """
    if type(curve) is PrivacyCurve and curve.sampled_rdp is None and not curve.tight_subsampling and (
            curve.spec is None or curve.spec.get("kind") != "gaussian"):
        return curve
    facts = {f.name: getattr(curve, f.name) for f in dataclasses.fields(PrivacyCurve)}
    return PrivacyCurve(**{**facts, "spec": None, "sampled_rdp": None, "tight_subsampling": False})


def _as_checked(privacy: tuple[PrivacyCurve, ...], noises: Sequence[tuple[str, Noise]],
                floor: Sequence[PrivacyCurve] = ()) -> tuple[PrivacyCurve, ...]:
    """A sampled plan's curves as one curve reading no lower than what was checked, at every order amplification asks.

    Amplifying a curve (:meth:`PrivacyCurve.subsampled`) reads it at every integer order 2..α, most of which the
    Rényi filter (and so :func:`_check_curves`) never reads, by calling its function again. The plan's curves are
    composed (:func:`~dpframe.accounting.composition.composition`: its facts, and its description) and read, in one
    call, as the sum of each curve's value, each no lower than its checked filter-order values
    (:func:`~dpframe.accounting.rdp_charge.filter_rdp`; RDP is non-decreasing in α, so at α, its value at the largest
    filter order ≤ α), and no lower than the plan's declared noises' (:meth:`Noise.rdp` at α) or, for a plan declaring
    none, than the ``floor`` curves its curves were checked against (:func:`_check_bare_curves`: dpframe's own, at
    α; their pure bound too). A plan with a curve without an RDP curve is left as it is (it is charged its cost's
    curve).

    Example:
        >>> from dpframe import accounting as acc
        >>> noise = Noise("discrete_laplace", Fraction(1), Fraction(1))
        >>> (low,) = _as_checked((acc.from_rdp(lambda a: 0.0),), [("count", noise)])
        >>> bool(np.all(low.rdp(np.array([9.0])) >= noise.rdp(np.array([9.0]))))
        True

    """
    if not privacy or any(c.rdp is None for c in privacy):
        return privacy
    from dpframe.accounting.composition import composition

    orders = np.asarray(FILTER_ORDERS, dtype=np.float64)
    parts = [(c.rdp, np.asarray(filter_rdp(c), dtype=np.float64)) for c in privacy]
    kept = tuple(noise for _, noise in noises)

    def read(alpha: np.ndarray) -> np.ndarray:
        a = np.asarray(alpha, dtype=np.float64)
        at = np.searchsorted(orders, a, side="right") - 1       # the largest filter order ≤ α (-1: below them)
        total = np.zeros(a.shape)
        for rdp, checked in parts:
            assert rdp is not None
            least = np.where(at >= 0, checked[np.maximum(at, 0)], 0.0)
            with np.errstate(invalid="ignore"):     # each partial sum rounded up, as the filter's
                total = add_up(total, np.fmax(np.asarray(rdp(a), dtype=np.float64), least))
        if kept:
            total = np.maximum(total, sum((Noise.rdp(n, a) for n in kept), np.zeros(a.shape)))
        if bound_rdp is not None:
            total = np.maximum(total, np.asarray(bound_rdp(a), dtype=np.float64))
        return total

    merged = composition(list(privacy))
    facts = {f.name: getattr(merged, f.name) for f in dataclasses.fields(PrivacyCurve)}
    bound_rdp = None
    if floor:
        bound = composition(list(floor))
        bound_rdp = bound.rdp
        pure = None if merged.eps_inf is None or bound.eps_inf is None else max(merged.eps_inf, bound.eps_inf)
        facts = {**facts, "eps_inf": pure, "delta0": max(merged.delta0, bound.delta0)}
    return (PrivacyCurve(**{**facts, "rdp": read, "tight_subsampling": False, "sampled_rdp": None}),)


def _read_curves(privacy: Sequence[PrivacyCurve]) -> tuple[PrivacyCurve, ...]:
    """Declared curves as plain :class:`PrivacyCurve` s, each field read once: what is checked is what is charged.

    A subclass's field may be a property answering differently on each read (an honest ``rdp`` for the check, another
    for the charge), and may refuse the filter-order values kept on the curve
    (:func:`~dpframe.accounting.rdp_charge.filter_rdp`); a plain curve is kept as it is.

    Example:
        >>> from dpframe import accounting as acc
        >>> g = acc.gaussian(sigma=2.0)
        >>> _read_curves([g])[0] is g
        True

    """
    def plain(c: PrivacyCurve) -> PrivacyCurve:
        if type(c) is PrivacyCurve:
            return c
        return PrivacyCurve(**{f.name: getattr(c, f.name) for f in dataclasses.fields(PrivacyCurve)})
    return tuple(plain(c) for c in privacy)


def _snapshot(privacy: object) -> object:
    """A plan's ``privacy`` as it is now: a plain sequence copied to a tuple (a deferred one is built only once)."""
    if isinstance(privacy, Sequence) and type(privacy) not in (DeferredTuple, tuple, str, bytes):
        return tuple(privacy)
    return privacy


def _coordinate(notion: str | None) -> str:
    return "ρ" if notion == "zcdp" else "ε"


def _noises(plan: MechanismPlan) -> list[tuple[str, Noise]]:
    """The :class:`~dpframe.mechanism.Noise` entries of a plan's noise table (read once; a deferred one is built)."""
    return [(str(label), n) for label, n in plan.noise.items() if isinstance(n, Noise)]


def _declared(mechanism: str, noises: Sequence[tuple[str, Noise]], notion: str) -> Fraction:
    """What the noises a plan declares cost in ``notion`` (ε or ρ, added up).

    Each noise's cost is read in ``notion`` (:func:`~dpframe.budgets.convert`: a pure ε is ε²/2 in zCDP); a noise
    whose cost has no such reading (Gaussian noise under a pure share) is a PluginError. Read with :class:`Noise`'s
    own formulas (a subclass's ``cost`` or ``rdp`` is not asked).
    """
    total = Fraction(0)
    for label, n in noises:
        try:
            total += first(convert(Noise.cost(n), notion))  # type: ignore[arg-type]
        except BudgetConversionError:
            raise PluginError(f"mechanism {mechanism!r} declares a {n.distribution} noise ({label}) costing "
                              f"{n.cost()!r}, which gives no {notion} guarantee for its share", argument="mechanism",
                              fix="calibrate each noise to the share the plan received (Noise.calibrate(sensitivity, "
                                  "share)): a bug of the plugin that registers it; report it to its authors") from None
    return total


def _check_curves(mechanism: str, privacy: object, noises: Sequence[tuple[str, Noise]]) -> None:
    """A PluginError when the curves a session would charge for a plan are below its declared noises' curves.

    The session charges the declared curves where each has an RDP curve (else the curve of the cost, checked above);
    composed, their pure bound ε∞ (which caps an amplified curve) is at least the noises' (:meth:`Noise.pure_bound`),
    and their RDP at every order of the Rényi filter is at least the noises' (:meth:`Noise.rdp`, added up;
    the curves' values are kept on them, :func:`~dpframe.accounting.rdp_charge.filter_rdp`: the charge reads the same).
    Curves that are not privacy curves are left to the accountant, which refuses them.
    """
    if not isinstance(privacy, Sequence) or not privacy or not all(
            isinstance(c, PrivacyCurve) and c.rdp is not None for c in privacy):
        return
    pure = math.fsum(math.inf if c.eps_inf is None else c.eps_inf for c in privacy)
    least = math.fsum(Noise.pure_bound(n) for _, n in noises)
    if not pure >= least * (1 - 1e-9):
        raise PluginError(f"mechanism {mechanism!r} declares privacy curves whose pure bound (ε∞) is {pure:.6g}, below "
                          f"what the noise its plan declares has ({least:.6g}; a Gaussian noise has none)",
                          argument="mechanism", fix="leave eps_inf out, or give the noise's (Δ/t for discrete Laplace "
                          "noise): a bug of the plugin that registers it; report it to its authors")
    floor = sum((Noise.filter_rdp(n) for _, n in noises), np.zeros(len(FILTER_ORDERS)))
    declared = sum((filter_rdp(c) for c in privacy), np.zeros(len(FILTER_ORDERS)))
    low = np.flatnonzero(~(declared >= floor * (1 - 1e-9)))
    if low.size:
        i = int(low[0])
        raise PluginError(f"mechanism {mechanism!r} declares privacy curves of Rényi divergence {declared[i]:.6g} at "
                          f"order {FILTER_ORDERS[i]:g}, below what the noise its plan declares has there "
                          f"({floor[i]:.6g})", argument="mechanism",
                          fix="a plan's curves are those of the noise it adds (e.g. acc.discrete_laplace(t, Δ) for "
                              "discrete Laplace noise of scale t on a sensitivity Δ): a bug of the plugin that "
                              "registers it; report it to its authors")


def _own_descriptions(privacy: object, noises: Sequence[tuple[str, Noise]]) -> object:
    """``privacy`` with the descriptions the reports compose kept only where they describe the declared noises.

    The filter charges a plan's curves by their RDP at its orders, checked against the noises' (:func:`_check_curves`);
    the PLD reports compose the profiles dpframe rebuilds from the curves' descriptions (``spec``). A description
    whose RDP passes the floor can still have a profile below its noise's: a Gaussian described on discrete Laplace
    noise (t = 1, Δ = 1) reports ε = 0.557 at δ = 0.2 where the noise's own PLD gives 0.680. So each declared noise
    must be described by a curve of its own (a one-to-one match, :func:`_describes`); further curves only add to the
    composition. Where one is not, every description is dropped (the charge's values are kept) and the reports say
    they cannot compose the charge. Kept descriptions are plain-data copies of what was checked, each curve keeping
    its checked filter-order values.

    Example:
        >>> from dpframe import accounting as acc
        >>> noise = Noise("discrete_laplace", Fraction(1), Fraction(1))
        >>> [c.spec for c in _own_descriptions((acc.pure(1.0), acc.gaussian(1.0)), [("count", noise)])]
        [{'kind': 'pure', 'epsilon': 1.0}, {'kind': 'gaussian', 'sigma': 1.0, 'sensitivity': 1.0}]
        >>> [c.spec for c in _own_descriptions((acc.gaussian(1.0),), [("count", noise)])]
        [None]

    """
    if not isinstance(privacy, Sequence) or not privacy or not all(isinstance(c, PrivacyCurve) for c in privacy):
        return privacy
    specs = [_plain_spec(c.spec) for c in privacy]
    matched = _matches([n for _, n in noises], specs)

    def kept(curve: PrivacyCurve, spec: dict[str, Any] | None) -> PrivacyCurve:
        out = dataclasses.replace(curve, spec=spec if matched else None)
        cached = curve.__dict__.get("_filter_rdp")
        if cached is not None:              # the values checked are the values charged (filter_rdp's cache)
            object.__setattr__(out, "_filter_rdp", cached)
        return out
    return tuple(kept(c, s) for c, s in zip(privacy, specs))


def _plain_spec(spec: object) -> dict[str, Any] | None:
    """A plain-data copy of a curve's description (None: none, or not JSON)."""
    if not isinstance(spec, dict):
        return None
    try:
        copied = json.loads(json.dumps(spec, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None
    return copied if isinstance(copied, dict) else None


def _matches(noises: Sequence[Noise], specs: Sequence[dict[str, Any] | None]) -> bool:
    """Whether each noise is described by a spec of its own (a matching of noises into specs, by :func:`_describes`)."""
    owner: dict[int, int] = {}      # spec index -> noise index

    def place(i: int, seen: set[int]) -> bool:
        for j, spec in enumerate(specs):
            if j not in seen and spec is not None and _describes(noises[i], spec):
                seen.add(j)
                if j not in owner or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False
    return all(place(i, set()) for i in range(len(noises)))


def _describes(noise: Noise, spec: dict[str, Any]) -> bool:
    """Whether the curve ``spec`` describes, dominates in every privacy profile, the release of ``noise``.

    Discrete Laplace (t, Δ; ⌊Δ⌋ integer steps): ``pure``/``approx`` with ε ≥ ⌊Δ⌋/t (the tight pair of every ε-DP
    mechanism), or ``discrete_laplace`` of the same ⌊Δ⌋ (one coordinate moved by all of it: ``coordinate_sensitivity``
    not below) and a scale ≤ t (the larger scale is the smaller's release plus independent noise: the ratio of their
    characteristic functions is a mixture of a point mass and a discrete Laplace). Not ``laplace``: at Δ = 1 the
    discrete pair is randomized response, above the continuous profile. Discrete Gaussian (σ², Δ; ρ = ⌊Δ²⌋/(2σ²)):
    ``zcdp`` or a vector ``discrete_gaussian`` of ρ at least that (their profile is derived from the RDP curve: valid
    for any mechanism with it), or a ``scalar`` one of the same Δ and σ (within float rounding down). Not ``gaussian``:
    the continuous profile is not shown above the discrete one. Any other key (a ``rate``) is not a description of it.
    """
    kind, keys = spec.get("kind"), set(spec)
    numbers_ok = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                     for k, v in spec.items() if k not in ("kind", "scalar"))
    if not numbers_ok:
        return False
    if noise.distribution == "discrete_laplace":
        steps = noise.sensitivity.numerator // noise.sensitivity.denominator
        least = Fraction(steps) / noise.scale
        if kind == "pure" and keys == {"kind", "epsilon"} or kind == "approx" and keys == {"kind", "epsilon", "delta"}:
            return Fraction(spec["epsilon"]) >= least
        coordinate = noise.coordinate_sensitivity
        return (kind == "discrete_laplace" and keys == {"kind", "scale", "sensitivity"} and steps >= 1
                and isinstance(spec["sensitivity"], int) and spec["sensitivity"] == steps
                and (coordinate is None or coordinate >= steps) and 0 < Fraction(spec["scale"]) <= noise.scale)
    squared = noise.sensitivity ** 2
    rho = Fraction(squared.numerator // squared.denominator) / (2 * noise.scale)
    if kind == "zcdp" and keys == {"kind", "rho", "delta0"}:
        return Fraction(spec["rho"]) >= rho
    if kind != "discrete_gaussian" or not keys <= {"kind", "sigma", "sensitivity", "scalar"} \
            or not {"sigma", "sensitivity"} <= keys or spec["sigma"] <= 0:
        return False
    sigma, sensitivity = Fraction(spec["sigma"]), Fraction(spec["sensitivity"])
    if spec.get("scalar", False) is False:
        return sensitivity ** 2 / (2 * sigma ** 2) >= rho
    return (spec["scalar"] is True and sensitivity == noise.sensitivity and sigma ** 2 <= noise.scale
            and sigma ** 2 >= noise.scale * (1 - Fraction(1, 10**9)))


def _check_delta0(mechanism: str, privacy: object, cost: Budget) -> None:
    """A PluginError when a plan whose ``cost`` has a δ (a partition-selection plan's) declares curves charging less δ0.

    Releasing a group key only the private data holds is never pure DP: the δ of a selection plan's cost is what its
    threshold is calibrated to, and curves charged as they are (each with an RDP curve, :func:`plan_curves`) whose δ0
    add up to less would leave it charged nowhere in an RDP or PLD session (a pure curve of the selection's noise: δ0
    = 0). Curves charged as the cost's own curve carry its δ.

    Example:
        >>> from dpframe import accounting as acc
        >>> _check_delta0("mine", (acc.approx(1.0, 1e-6),), ApproxDP(1, Fraction(1, 10**6)))
        >>> _check_delta0("mine", (acc.pure(1.0),), ApproxDP(1, Fraction(1, 10**6)))
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: mechanism: mechanism 'mine' costs ε=1, δ=1e-06 but its privacy curves' δ0 add...

    """
    delta = Fraction(getattr(cost, "delta", 0))
    if not delta or not isinstance(privacy, Sequence) or not privacy or not all(
            isinstance(c, PrivacyCurve) and c.rdp is not None for c in privacy):
        return
    delta0 = math.fsum(c.delta0 for c in privacy)
    if not delta0 >= float(delta) * (1 - 1e-9):          # (float slack: δ given as a float, 1e-6, is a hair below)
        raise PluginError(f"mechanism {mechanism!r} costs {describe(cost)} but its privacy curves' δ0 add up to "
                          f"{delta0:.6g}: the δ of its cost would be charged nowhere", argument="mechanism",
                          fix="a selection's curves carry the δ its threshold is calibrated to (e.g. acc.approx(ε, "
                              "δ)): a bug of the plugin that registers it; report it to its authors")


def _check_bare_curves(mechanism: str, privacy: object, cost: Budget, accountant: RenyiFilter,
                       noised: bool = False) -> tuple[PrivacyCurve, ...]:
    """A PluginError when the curves of a plan whose declared noise does not pay for its cost are not a charge of it.

    With no :class:`~dpframe.mechanism.Noise` to hold them to (the exponential-mechanism quantiles declare none), or
    noises costing less than the plan's ``cost`` (``noised``: a plan stating its whole share as its cost and declaring
    a hundredth of it, an output released beside the noise, a sensitivity understated), a
    plan's curves are held to the rule a query family's charge is
    (:func:`~dpframe.accounting.curve_charge.check_curve_charge`, unamplified: the engine amplifies them): at least
    the cost's own curve at every order the filter reads, or of kinds dpframe builds, rebuilt by dpframe, charged no
    less than that and not proving the plan more private than its cost. Returns the curves the check accepted them
    against (dpframe's, rebuilt from the accepted descriptions), which an amplified charge reads no lower than
    (:func:`_as_checked`); () where the plan is charged its cost's curve (no RDP curve declared) or no description
    was kept.

    Example:
        >>> from dpframe import accounting as acc
        >>> filt = acc.RDPAccountant(ApproxDP(10, 1e-5))
        >>> [c.label for c in _check_bare_curves("mine", (acc.laplace(1.0),), PureDP(1), filt)]
        ['Laplace(b=1, Δ=1)']
        >>> _check_bare_curves("mine", (acc.laplace(100.0),), PureDP(1), filt)
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: mechanism: mechanism 'mine' declares no noise, and its privacy curves are not...

    """
    if not isinstance(privacy, Sequence) or not privacy or not all(
            isinstance(c, PrivacyCurve) and c.rdp is not None for c in privacy):
        return ()
    checked, why = check_curve_charge(RDPCharge.of(privacy), cost, accountant, 1.0)
    if checked is None:
        which = "declares noise costing less than its cost" if noised else "declares no noise"
        raise PluginError(f"mechanism {mechanism!r} {which}, and its privacy curves are not a charge of its "
                          f"cost {describe(cost)}: {why}", argument="mechanism",
                          fix="a plan's curves are those of the mechanisms it runs, built with dpframe's constructors "
                              "(e.g. acc.exponential(ε) for the exponential mechanism), or declare its Noise: a bug "
                              "of the plugin that registers it; report it to its authors")
    return tuple(from_json(text) for text in checked.specs)


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
