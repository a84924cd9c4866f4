"""The cost checks of a mechanism plan's privacy curves: what the planner holds a plugin's curves to before a charge.

:func:`~dpframe.planning.passes.check_plugin_costs` runs :func:`_check_cost` on every plan (its partition
selection's too). A plan reports a cost (ε or ρ, and a selection's δ), the :class:`~dpframe.mechanism.Noise` it
adds, and, for sessions that charge privacy curves (``rdp``, ``pld``, a third-party accountant), the curves it
claims; the engine charges what the plan reports, so every number is plugin code, and the analyst may be the
plugin's author. The cost rule for plugin curves, checked here:

* the cost is in its share's notion, positive, at most the share, and at least its declared noises' cost
  (:func:`_declared`);
* the curves, composed, are at least the declared noises' at every order the Rényi filter reads, and in their pure
  bound (:func:`_check_curves`); a selection's curves carry its cost's δ (:func:`_check_delta0`, charged in full:
  :func:`_carrying`);
* a plan declaring no noise, or noise paying for less than its cost, has its curves held to a query family's charge
  rule (:func:`_check_bare_curves`: at least the cost's own curve, or dpframe-built descriptions);
* the reports compose only descriptions that describe the declared noises (:func:`_own_descriptions`,
  :func:`_matches`, :func:`_describes`), or, where the declared noise does not pay for the cost, the guarantees
  the descriptions state (:func:`_guarantees`); a third-party accountant gets only curves dpframe rebuilt
  (:func:`_third_party_curves`), and curves accepted within the float slack, or on a Poisson sample, are charged
  as they were checked (:func:`_under`, :func:`_as_checked`, :func:`_plain`).

Each plan's curves are read once (:func:`_snapshot`, :func:`_read_curves`): what is checked is what is charged.
A failure is a :class:`~dpframe.errors.PluginError` (nothing is charged): a bug, or a lie, of the plugin.

Example:
    >>> from dpframe import accounting as acc
    >>> noise = Noise("discrete_laplace", Fraction(1), Fraction(1))
    >>> _check_curves("mine", (acc.discrete_laplace(1.0, 1),), [("count", noise)])
    >>> _check_curves("mine", (acc.discrete_laplace(100.0, 1),), [("count", noise)])
    Traceback (most recent call last):
    ...
    dpframe.errors.PluginError: mechanism: mechanism 'mine' declares privacy curves whose pure bound (ε∞) is...

"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, TypeVar

import numpy as np

from dpframe.accounting.curve import PrivacyCurve, from_json
from dpframe.accounting.curve_charge import check_curve_charge, guarantee, reference
from dpframe.accounting.rdp import RenyiFilter
from dpframe.accounting.rdp_charge import FILTER_ORDERS, RDPCharge, filter_rdp
from dpframe.budgets import Budget, add_up, convert, describe, up
from dpframe.errors import BudgetConversionError, PluginError, plugin_failure
from dpframe.mechanism import MechanismPlan, Noise
from dpframe.mechanism.deferred import DeferredTuple
from dpframe.planning.state import first

T = TypeVar("T")

def _check_cost(p: MechanismPlan, notion: str, share: Fraction, delta: Fraction, curves: bool = False,
                sampled: bool = False, rdp: RenyiFilter | None = None,
                third_party: bool = False) -> tuple[Budget, Any]:
    """``p``'s reported cost against its share (``share`` in ε or ρ, ``delta``).

    The checks of :func:`~dpframe.planning.passes.check_plugin_costs`, on one plan.

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
        privacy = _read(p.mechanism, "its privacy curves", _carrying, privacy, cost)
    if rdp is not None and not (noises and declared == spent):     # noises paying for the whole cost: checked above
        floor = _read(p.mechanism, "its privacy curves", _check_bare_curves, p.mechanism, privacy, cost, rdp,
                      bool(noises))
    if curves and noises:       # the reports compose the descriptions: only those of the declared noises
        privacy = _read(p.mechanism, "its privacy curves", _own_descriptions, privacy, noises)
    untied = curves and not (noises and declared == spent)      # no noise ties its descriptions to its mechanism
    if third_party:
        return cost, _read(p.mechanism, "its privacy curves", _third_party_curves, privacy, cost, noises, untied)
    if untied:                  # the reports compose the guarantees its descriptions state, not their profiles
        privacy = _read(p.mechanism, "its privacy curves", _guarantees, privacy)
    if sampled and isinstance(privacy, Sequence) and all(isinstance(c, PrivacyCurve) for c in privacy):
        privacy = _as_checked(tuple(_plain(c) for c in privacy), noises, floor)
    elif (floor or (curves and noises)) and _under(privacy, noises, floor):
        # accepted within the checks' 10⁻⁹ of float slack, below what they were checked against: charged that
        privacy = _as_checked(tuple(privacy), noises, floor)    # type: ignore[arg-type]
    return cost, privacy


def _third_party_curves(privacy: object, cost: Budget, noises: Sequence[tuple[str, Noise]],
                        untied: bool = False) -> tuple[PrivacyCurve, ...] | None:
    """The curves a third-party accountant (one charging curves, not a Rényi filter) is given for a checked plan.

    Such an accountant may read any function of a curve (its privacy profile, its RDP at any order, how it amplifies
    on a sample), while the engine checks a plan's curves by their RDP at the Rényi filter's orders: a curve honest
    there and lying elsewhere (a profile a hundredth of its noise's) would be charged its lie. So the accountant
    gets only curves dpframe built itself from checked parameters: those the plan's descriptions rebuild where
    :func:`~dpframe.accounting.curve_charge.check_curve_charge` accepts the plan's charge (against its cost, dpframe's
    formulas, unamplified: the accountant amplifies; a charge accepted as at least the cost's own curve is described
    by that curve) and they are at least its declared noises' floor at every filter order, exactly (the checks of
    the plan's own curves allow 10⁻⁹ of float slack, which the charge then raises away, :func:`_as_checked`; the
    accountant composes what it is handed as it is, so a curve up to 10⁻⁹ below the floor is not handed); else None:
    the cost's own curve (:func:`~dpframe.accounting.accountants.plan_curves`), which every ``cost``-private mechanism
    has, so at least every neighbouring pair's divergence, the floor's included. ``untied``: no declared noise pays
    for the plan's cost, so nothing ties its descriptions to its mechanism; the accountant gets the curves of the
    guarantees they state (:func:`~dpframe.accounting.curve_charge.guarantee`: a Gaussian of ρ as ρ-zCDP), held to
    the same floor, else None.

    Example:
        >>> from dpframe import accounting as acc; from dpframe.budgets import ApproxDP, PureDP
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
    handed = tuple(from_json(text) for text in checked.specs)
    if untied:
        stated = [guarantee(c.to_json()) for c in handed]
        if not all(c is not None for c in stated):
            return None
        handed = tuple(c for c in stated if c is not None)
    if noises:      # no float slack: the accountant composes these curves as they are, at any order
        floor = sum((Noise.filter_rdp(n) for _, n in noises), np.zeros(len(FILTER_ORDERS)))
        if not np.all(np.asarray(RDPCharge.of(handed).values) >= floor):
            return None
    return handed


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

    return tuple(_replaced(c, spec=s if matched else None) for c, s in zip(privacy, specs))


def _replaced(curve: PrivacyCurve, **changes: Any) -> PrivacyCurve:
    """``curve`` with ``changes`` (its description, its δ0), keeping its checked filter-order values (those charged)."""
    out = dataclasses.replace(curve, **changes)
    cached = curve.__dict__.get("_filter_rdp")
    if cached is not None:              # the values checked are the values charged (filter_rdp's cache)
        object.__setattr__(out, "_filter_rdp", cached)
    return out


def _guarantees(privacy: object) -> object:
    """``privacy`` with each description replaced by what the reports may compose of it (None: nothing).

    For a plan whose declared noise does not pay for its cost (none declared, the exponential-mechanism quantiles,
    or less than its cost): its curves are checked as a charge of its cost (:func:`_check_bare_curves`), and nothing
    ties their descriptions to the mechanism it runs. The reports compose the privacy profiles the descriptions
    rebuild: a ρ-zCDP plan described as a Gaussian of that ρ would report the Gaussian's profile, below that of
    other ρ-zCDP mechanisms (ε = 4.38 at δ = 1e-5 for ρ = 1/2, against 4.73), while charged as any of them. So each
    part is reported as its guarantee where its charge is that guarantee's
    (:func:`~dpframe.accounting.curve_charge.guarantee`); the charge's values are unchanged.

    Example:
        >>> from dpframe import accounting as acc
        >>> [c.spec for c in _guarantees((acc.gaussian(1.0), acc.from_rdp(lambda a: a)))]
        [{'kind': 'zcdp', 'rho': 0.5, 'delta0': 0.0}, None]

    """
    if not isinstance(privacy, Sequence) or not privacy or not all(isinstance(c, PrivacyCurve) for c in privacy):
        return privacy

    def stated(curve: PrivacyCurve) -> dict[str, Any] | None:
        spec = _plain_spec(curve.spec)
        general = None if spec is None else guarantee(json.dumps(spec))
        return None if general is None else _plain_spec(general.spec)
    return tuple(_replaced(c, spec=stated(c)) for c in privacy)


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
    for any mechanism with it), or a ``scalar`` one of the same Δ and σ (within float rounding down) where one
    coordinate may move by all of Δ (``coordinate_sensitivity`` not below: the one-coordinate profile of N_Z(0, σ²)
    against N_Z(2, σ²) is up to 6 % below that of four coordinates each moved by 1, the same L2 sensitivity;
    ``tests/adversarial/test_review55g.py``). Not ``gaussian``: the continuous profile is not shown above the discrete
    one. Any other key (a ``rate``) is not a description of it.
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
    coordinate = noise.coordinate_sensitivity
    return (spec["scalar"] is True and sensitivity == noise.sensitivity and sigma ** 2 <= noise.scale
            and sigma ** 2 >= noise.scale * (1 - Fraction(1, 10**9))
            and (coordinate is None or coordinate >= sensitivity))


def _check_delta0(mechanism: str, privacy: object, cost: Budget) -> None:
    """A PluginError when a plan whose ``cost`` has a δ (a partition-selection plan's) declares curves charging less δ0.

    Releasing a group key only the private data holds is never pure DP: the δ of a selection plan's cost is what its
    threshold is calibrated to, and curves charged as they are (each with an RDP curve,
    :func:`~dpframe.accounting.accountants.plan_curves`) whose δ0 add up to less would leave it charged nowhere in an
    RDP or PLD session (a pure curve of the selection's noise: δ0 = 0). Curves charged as the cost's own curve carry
    its δ.

    Example:
        >>> from dpframe import accounting as acc; from dpframe.budgets import ApproxDP, PureDP
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


def _carrying(privacy: object, cost: Budget) -> object:
    """``privacy`` whose δ0 add up, exactly, to at least the δ of ``cost``: the last curve's raised by what is short.

    :func:`_check_delta0` accepts curves whose δ0 add up to 10⁻⁹ relatively less (a δ given as a float is a hair
    below the exact one); the session charges their δ0, so the shortfall is added to the last curve's (rounded up),
    and to its description where that is an ``approx`` or ``zcdp`` curve (the reports compose it; another kind of
    description is then dropped from them, :func:`~dpframe.accounting.curve_charge.described`).

    Example:
        >>> from dpframe import accounting as acc; from dpframe.budgets import ApproxDP
        >>> (c,) = _carrying((acc.approx(1.0, 1e-6),), ApproxDP(1, Fraction(1, 10**6)))
        >>> Fraction(c.delta0) >= Fraction(1, 10**6), Fraction(c.spec["delta"]) == Fraction(c.delta0)
        (True, True)

    """
    delta = Fraction(getattr(cost, "delta", 0))
    if not delta or not isinstance(privacy, Sequence) or not privacy or not all(
            isinstance(c, PrivacyCurve) for c in privacy):
        return privacy
    have = sum((Fraction(c.delta0) for c in privacy), Fraction(0))
    if have >= delta:
        return privacy
    last = privacy[-1]
    raised = up(Fraction(last.delta0) + delta - have)
    spec = _plain_spec(last.spec)
    kind = None if spec is None else spec.get("kind")
    key = {"approx": "delta", "zcdp": "delta0"}.get(kind) if isinstance(kind, str) else None
    described = {**spec, key: raised} if spec is not None and key is not None and key in spec else None
    return (*privacy[:-1], _replaced(last, delta0=raised, spec=described))


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
        >>> from dpframe import accounting as acc; from dpframe.budgets import ApproxDP, PureDP
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
