"""Whether a plan's charge of privacy curves (an RDP or PLD session's) is at least what its cost costs the session.

A query family (:mod:`dpframe.family`) reports its plan's ``cost`` (a budget: what the query costs) and the
``charge`` the ledger reserves; in ``rdp`` and ``pld`` sessions the charge is an :class:`RDPCharge` (the Rényi
filter's values at :data:`FILTER_ORDERS`, a δ0, and the plain-data descriptions, ``specs``, of the curves it came
from, which the PLD reports compose). :func:`check_curve_charge` accepts a charge, and returns the copy the ledger
reserves, when

1. it has no descriptions dpframe can rebuild, and it is at least, at every order the filter reads and in δ0, the
   charge of the cost's own curve (``charge_plan(cost, None, rate)``: the curve every ``cost``-private mechanism
   has, amplified by the frame's Poisson sampling, or unamplified where that is less), which is sound whatever the
   mechanism is; **or**
2. it is backed by its descriptions (a charge with descriptions dpframe rebuilds is held to this rule, as its
   reports compose them): each is of a kind dpframe itself builds (rebuilt with dpframe's own formulas: a plugin's
   registered builder, or a curve object's own functions, are not asked), the charge is at least, at every order and
   in δ0, what the rebuilt curves charge (unamplified, or their composition amplified once at the frame's rate where
   that is less: the rate a description claims for the frame is not read; within :data:`VALUE_SLACK` for float
   order, the copy reserved then raised to theirs), and the rebuilt curves do not prove the
   plan more private than its cost says: by basic composition of their parts, the loosest rule a cost may be priced
   with, they give at least the cost in its own notion (:func:`_more_private`; relative slack 10⁻⁶ for floats).

Why that is sound for the filter: the filter composes the charges order by order (:mod:`dpframe.accounting.rdp`), so
a charge must bound the mechanism's Rényi divergence at *every* order (a curve honest at a few orders leaves the
others' filters open). Rule 1 bounds it from the cost alone. Rule 2 bounds it for the mechanism the descriptions
declare, by the engine's formulas at every order; that the declared mechanism is the one that runs is the claim the
family makes with its cost too, and (2)'s last condition refuses curves that contradict the cost (a curve of a
hundredth of the cost's ε, a Gaussian of tiny ρ under a pure cost). It is a consistency check, not a proof: curves
that give the cost by basic composition and less by a tighter one are accepted (that is what tight curves are for),
and a plan lying in both its cost and its curves is what the neighbouring-dataset audit is for, as for a mechanism
plugin's noise.

Why that is sound for the PLD reports: a PLD session enforces with the same filter; its reports (``history()``,
``explain()``, ``describe_charge``, ``spent_report()``) compose the curves the charge's descriptions rebuild. The copy
returned keeps only the descriptions rule 2 checked (normalised: the rebuilt curves, or their amplified composition
where that is what the charge was checked against), so a report composes the profiles of the curves whose RDP was
checked against the charge and the cost, never a profile the plan declared beside values it does not match; a
charge passing by rule 1 is described by the cost's own curve (amplified at the frame's rate), which it is at least.
The PLD of the checked curves is composed instead of any PLD the plan declares: a profile is only ever built by
dpframe's builders from checked parameters.

Everything is read once: the values, δ0 and descriptions are copied (floats, strings) before they are checked, and
the copy is what the ledger reserves.

Example:
    >>> from dpframe import accounting as acc
    >>> from dpframe.budgets import ApproxDP, PureDP
    >>> filt = acc.RDPAccountant(ApproxDP(10, 1e-5))
    >>> honest = filt.charge_plan(PureDP(1), [acc.laplace(scale=1.0)])
    >>> check_curve_charge(honest, PureDP(1), filt, 1.0)[1] is None
    True
    >>> tiny = filt.charge_plan(PureDP(1), [acc.laplace(scale=100.0)])
    >>> print(check_curve_charge(tiny, PureDP(1), filt, 1.0)[1])
    its curves (Laplace(b=100, Δ=1)) prove it ε=0.01-DP by basic composition, more private than its cost ε=1 says

"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpframe.accounting.composition import composition
from dpframe.accounting.curve import PrivacyCurve, from_json, from_spec, is_core_kind
from dpframe.accounting.curves import pure, zcdp
from dpframe.accounting.numerics.rdp import RDP_ORDERS, best_epsilon
from dpframe.accounting.rdp_charge import FILTER_ORDERS, RDPCharge
from dpframe.budgets import Budget, describe, make
from dpframe.errors import BudgetError
from dpframe.sealed import plain_cache

if TYPE_CHECKING:
    from dpframe.accounting.rdp import RenyiFilter

#: Relative slack of the comparisons with the cost (float rounding of honest plans; a lie is far larger).
COST_SLACK = 1e-6
#: Relative slack of a charge against the rebuilt curves' (the same formulas, summed in another order); a charge
#: accepted within it is reserved at the rebuilt curves' values (the slack is no discount).
VALUE_SLACK = 1e-9


def reference() -> RenyiFilter:
    """The engine's own Rényi filter (standalone, built once), whose formulas check curves a third-party charges.

    They check a charge of curves where the session's accountant is not a
    :class:`~dpframe.accounting.rdp.RenyiFilter` (a third-party accountant).

    Example:
        >>> from dpframe.budgets import PureDP
        >>> reference().charge_plan(PureDP(1), None).labels
        ('ε-DP(ε=1)',)

    """
    return _reference()


@functools.cache
def _reference() -> RenyiFilter:
    from dpframe.accounting.rdp import RDPAccountant

    return RDPAccountant()


def copy_charge(charge: object) -> RDPCharge | None:
    """A plain :class:`RDPCharge` of ``charge``'s values, δ0, descriptions and labels, read once (None: not one).

    Example:
        >>> copy_charge(RDPCharge((0.5,) * len(FILTER_ORDERS), 0.0)).delta0
        0.0
        >>> copy_charge("a charge") is None
        True

    """
    if not isinstance(charge, RDPCharge):
        return None
    try:
        values = tuple(float(v) for v in tuple(charge.values))
        delta0 = float(charge.delta0)
        specs = tuple(charge.specs)
        labels = tuple(str(x) for x in tuple(charge.labels))
    except Exception:       # plugin objects: whatever their __float__, __str__ or __iter__ raises, not a charge
        return None
    if len(values) != len(FILTER_ORDERS) or not all(v >= 0 for v in values) or not 0 <= delta0 <= 1 \
            or not all(type(s) is str for s in specs):
        return None
    return RDPCharge(values, delta0, specs, labels)


def check_curve_charge(charge: object, cost: Budget, accountant: RenyiFilter,
                       rate: float) -> tuple[RDPCharge | None, str | None]:
    """(the copy of ``charge`` to reserve, None) or (None, why it is refused): see the module docstring.

    ``rate``: the Poisson sampling rate of the frame the plan reads (the engine's, 1: none).
    """
    copied = copy_charge(charge)
    if copied is None:
        if isinstance(charge, RDPCharge):
            return None, ("its charge's values, δ0, descriptions or labels cannot be read as the numbers and text "
                          f"of an RDPCharge on the filter's {len(FILTER_ORDERS)} orders")
        return None, (f"its charge is {type(charge).__name__}, not the RDPCharge this session's Rényi filter "
                      "composes")
    backed = _rebuilt(copied.specs) if copied.specs else None
    if backed is None:
        floor = accountant.charge_plan(cost, None, rate)
        floor_specs = floor.specs
        if rate < 1:        # the amplified bound, or the cost's own curve where that is less (both are valid)
            whole = accountant.charge_plan(cost, None, 1.0)
            floor = RDPCharge(tuple(float(v) for v in np.minimum(floor.values, whole.values)),
                              min(floor.delta0, whole.delta0))
        if _dominates(copied, floor, 0.0):
            return RDPCharge(copied.values, copied.delta0, floor_specs, copied.labels), None
        why = "its curves have no description dpframe can rebuild" if copied.specs else "it declares no curves"
        return None, (f"it charges less than its cost's curve at some order the Rényi filter reads (or in δ0), "
                      f"and {why} (a plugin's curve kind, or a curve object's own functions, are not trusted)")
    curves, parts, expected, specs = backed
    named = "; ".join(c.label for c in parts)
    if rate < 1 and not _dominates(copied, expected, VALUE_SLACK):
        # the composition amplified once, as charge_plan; the unamplified charge where that is less (both valid)
        amplified, specs = _amplified(copied.specs, float(rate))
        expected = RDPCharge(tuple(float(v) for v in np.minimum(expected.values, amplified.values)),
                             min(expected.delta0, amplified.delta0))
    if not _dominates(copied, expected, VALUE_SLACK):
        return None, ("it charges less, at some order the Rényi filter reads (or in δ0), than the curves it "
                      f"describes ({named}) cost by dpframe's formulas")
    try:
        try:
            more = _cost_link(tuple(copied.specs), cost.notion, _first(cost), Fraction(getattr(cost, "delta", 0)))
        except TypeError:       # a cost that is not plain values (a plugin's Budget subclass): not cached
            more = _more_private(parts, cost)
    except OverflowError:       # as charge_plan refuses such a cost (rule 1's path)
        raise BudgetError(f"the cost {describe(cost)} is too large to account with privacy curves", argument="cost",
                          fix="use a budget below 1e300") from None
    if more is not None:
        return None, f"its curves ({named}) {more}"
    # accepted within VALUE_SLACK of the rebuilt curves: reserved at least at what they cost (the slack is for
    # honest float order, not a discount: 10⁻⁹ is millions of ulps of the curves' outward-rounded values)
    values = tuple(float(v) for v in np.maximum(copied.values, expected.values))
    return RDPCharge(values, max(copied.delta0, expected.delta0), specs, copied.labels), None


def guarantee(text: str) -> PrivacyCurve | None:
    """What the reports may compose for the description ``text`` of curves no declared noise ties to a mechanism.

    A description names a mechanism (a Gaussian of σ), whose privacy profile can be below that of other mechanisms
    with the same guarantee (ρ-zCDP). Where nothing ties a plan's curves to the noise it adds (a mechanism plan
    declaring no :class:`~dpframe.mechanism.Noise`, or one paying for less than its cost), each part, rebuilt by
    dpframe (:func:`_rebuilt`), is replaced by the curve of the guarantee it states (ε-DP, δ0 = 0, as ``pure(ε)``;
    else ρ-zCDP as ``zcdp(ρ, δ0)``) wherever that guarantee's RDP is at most the part's at every order the filter
    reads: the charge of the part is then what any mechanism with the guarantee is charged, and does not rely on the
    part being the mechanism it names, so the reports may not either (the Gaussian of ρ = ½ reports ε = 4.38 at
    δ = 10⁻⁵, any ½-zCDP mechanism 4.73). A part whose RDP is below its guarantee's (an exponential mechanism, a
    Laplace, a curve on a sample) is kept: its charge already relies on it, as the cost rule accepts (the module
    docstring). Their composition where there are several; None where the description is not one dpframe builds.

    Example:
        >>> from dpframe import accounting as acc
        >>> guarantee(acc.gaussian(2.0).to_json()).spec, guarantee(acc.exponential(0.5).to_json()).spec
        ({'kind': 'zcdp', 'rho': 0.125, 'delta0': 0.0}, {'kind': 'exponential', 'epsilon': 0.5})

    """
    backed = _rebuilt((text,))
    if backed is None:
        return None
    parts = [_stated(part) for part in backed[1]]
    return parts[0] if len(parts) == 1 else composition(parts)


def _stated(part: PrivacyCurve) -> PrivacyCurve:
    """``part``'s guarantee (ε-DP, else ρ-zCDP) where it costs no more at the filter's orders, else ``part``."""
    if part.spec is not None and part.spec.get("kind") in ("pure", "approx", "zcdp"):
        return part
    if part.pure_eps is not None and part.delta0 == 0:
        general = pure(part.pure_eps)
    elif part.rho is not None:
        general = zcdp(part.rho, part.delta0)
    else:
        return part
    charged = RDPCharge.of([part])
    return general if _dominates(charged, RDPCharge.of([general]), 0.0) else part


@plain_cache(maxsize=256)
def _cost_link(specs: tuple[str, ...], notion: str, first: Fraction, delta: Fraction) -> str | None:
    """:func:`_more_private` of the parts ``specs`` rebuild and the cost ``make(notion, first, delta)``, cached."""
    return _more_private(_rebuilt_cached(specs)[1], make(notion, first, delta))  # type: ignore[arg-type]


def _first(cost: Budget) -> Fraction:
    return Fraction(cost.rho if cost.notion == "zcdp" else cost.epsilon)  # type: ignore[union-attr]


def described(charge: RDPCharge) -> RDPCharge:
    """``charge``, keeping its descriptions only where dpframe builds them and they cost at least as much everywhere.

    Everywhere: at every order the filter reads, and in δ0.

    The reports of an RDP or PLD session (the PLD note of ``history()`` and ``explain()``, ``spent_report()``) compose
    the curves a charge's descriptions rebuild (:func:`~dpframe.accounting.curve.from_json`), while the charge's
    values are what the engine checked (a mechanism plugin's curves against its declared noise). A description whose
    curves cost less than the values at some order (a curve object honest in its functions, its ``spec`` a tenth
    of its noise) would make the reports claim more privacy than was charged: it is dropped, and the reports say
    they cannot compose the charge rather than underreport. So is one naming a kind a plugin registered, anywhere
    in it: its builder, not dpframe's, would give the pure bound, ρ and profile the reports compose (an honest RDP
    curve beside a profile of nothing passed the comparison), as for a query family's charge
    (:func:`check_curve_charge`). Cached by the descriptions.

    Example:
        >>> from dpframe import accounting as acc
        >>> honest = RDPCharge.of([acc.laplace(1.0)])
        >>> described(honest) == honest
        True
        >>> described(RDPCharge(honest.values, 0.0, (acc.laplace(100.0).to_json(),))).specs
        ()

    """
    if not charge.specs:
        return charge
    rebuilt = _as_stored(tuple(charge.specs))
    if rebuilt is not None and _dominates(rebuilt, charge, VALUE_SLACK):
        return charge
    return RDPCharge(charge.values, charge.delta0, (), charge.labels)


def _as_stored(specs: tuple[str, ...]) -> RDPCharge | None:
    try:
        return _as_stored_cached(specs)
    except Exception:     # not descriptions dpframe's own builders rebuild
        return None


@plain_cache(maxsize=256)
def _as_stored_cached(specs: tuple[str, ...]) -> RDPCharge:
    for text in specs:
        _core_only(json.loads(text))
    return RDPCharge.of([from_json(text) for text in specs])


def _core_only(value: object) -> None:
    """Every ``"kind"`` named anywhere in a parsed description is one dpframe builds itself; else :class:`_Untrusted`.

    Anywhere: a composition's parts, a converted curve's base (:func:`~dpframe.accounting.curve.is_core_kind`).
    """
    if isinstance(value, dict):
        if "kind" in value and not (isinstance(value["kind"], str) and is_core_kind(value["kind"])):
            raise _Untrusted(str(value["kind"]))
        for inner in value.values():
            _core_only(inner)
    elif isinstance(value, list):
        for inner in value:
            _core_only(inner)


def _dominates(charge: RDPCharge, least: RDPCharge, slack: float) -> bool:
    values, floor = np.asarray(charge.values), np.asarray(least.values)
    return bool(np.all(values >= floor * (1 - slack))) and charge.delta0 >= least.delta0 * (1 - slack)


Rebuilt = tuple[tuple[PrivacyCurve, ...], tuple[PrivacyCurve, ...], RDPCharge, tuple[str, ...]]


def _rebuilt(specs: Sequence[str]) -> Rebuilt | None:
    """The curves ``specs`` describe (rebuilt by dpframe), their parts, their charge and their descriptions.

    None when one is not a description dpframe builds (not JSON, a plugin's kind anywhere in it, parameters its
    builder refuses, a replace-one curve). A description's own top-level ``rate`` (the frame's sample, as
    ``charge_plan`` records it) is dropped: the frame's rate is applied to their composition by :func:`_amplified`.
    Cached by the descriptions (plain data, rebuilt by dpframe's deterministic builders).
    """
    try:
        return _rebuilt_cached(tuple(specs))
    except Exception:       # not JSON, a plugin's kind, a builder refusing a parameter: not a description it builds
        return None


class _Untrusted(Exception):
    """A description dpframe does not build itself."""


@plain_cache(maxsize=256)
def _rebuilt_cached(specs: tuple[str, ...]) -> Rebuilt:
    curves, parts = [], []
    for text in specs:
        spec = json.loads(text)
        if not isinstance(spec, dict):
            raise _Untrusted(text)
        _check_kinds(spec)
        _core_only(spec)        # a converted curve's base too (replace_one's "curve"): no plugin builder is asked
        spec = {k: v for k, v in spec.items() if k != "rate"}
        curves.append(_build(spec))
        parts += [_build(p) for p in _parts(spec)]
    if not curves:
        raise _Untrusted("no curves")
    kept = tuple(c.to_json() for c in curves) if all(c.spec is not None for c in curves) else ()
    return tuple(curves), tuple(parts), RDPCharge.of(curves), kept


@plain_cache(maxsize=256)
def _amplified(specs: tuple[str, ...], rate: float) -> tuple[RDPCharge, tuple[str, ...]]:
    """The charge of the rebuilt curves' composition on a Poisson sample of ``rate``, and its description."""
    sampled = composition(list(_rebuilt_cached(specs)[0])).subsampled(rate)
    return RDPCharge.of([sampled]), (sampled.to_json(),) if sampled.spec is not None else ()


def _build(spec: dict[str, Any]) -> PrivacyCurve:
    curve = from_spec(spec)
    if not isinstance(curve, PrivacyCurve) or curve.neighbours != "add_remove":
        raise _Untrusted(str(spec.get("kind")))
    return curve


def _check_kinds(spec: dict[str, Any]) -> None:
    """Every kind in ``spec`` (a composition's parts too) is one dpframe builds itself."""
    kind = spec.get("kind")
    if not isinstance(kind, str) or not is_core_kind(kind):
        raise _Untrusted(str(kind))
    if kind == "composition":
        parts = spec.get("parts")
        if not isinstance(parts, list):
            raise _Untrusted("parts")
        for p in parts:
            if not isinstance(p, dict):
                raise _Untrusted("part")
            _check_kinds(p)


def _parts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The mechanisms a description composes (a composition's parts, at every depth; else itself)."""
    if spec.get("kind") == "composition" and "rate" not in spec:
        return [p for part in spec["parts"] for p in _parts(part)]
    return [spec]


def _more_private(parts: Sequence[PrivacyCurve], cost: Budget) -> str | None:
    """Why ``parts``, composed by basic composition, prove a plan more private than ``cost`` (None: they do not).

    Basic composition is the loosest rule a family may price its cost with (ε and δ add up; ρ adds up): a pure ε cost
    is at most the sum of the parts' pure bounds (each part needs one), a ρ cost at most the sum of their loosest ρ
    (:func:`_loosest_rho`; each needs one), an (ε, δ) cost at most Σ ε_i: a part's pure bound where it has one, else
    its standard RDP conversion (Mironov 2017, the loosest of dpframe's: a family's own zCDP or RDP conversion is at
    most it) at an equal share of what δ leaves after the parts' δ0 (none left: nothing is proven at δ, as the δ0 are
    charged in full). Curves below that prove the plan more private than its cost: a plan priced by basic composition
    with an uneven δ split
    over several parts without a pure bound can be refused by the equal split (none of dpframe's is).
    """
    def short(bound: float, claimed: float) -> bool:
        return bound < claimed * (1 - COST_SLACK)

    if cost.notion == "zcdp":
        rhos = [_loosest_rho(c) for c in parts]
        if any(r is None for r in rhos):
            return f"give no zCDP bound for its cost {describe(cost)}"
        rho = math.fsum(r for r in rhos if r is not None)
        return f"prove it ρ={rho:.6g}-zCDP, more private than its cost {describe(cost)} says" \
            if short(rho, float(cost.rho)) else None  # type: ignore[union-attr]
    eps, delta = float(cost.epsilon), float(getattr(cost, "delta", 0))  # type: ignore[union-attr]
    pure = [c.eps_inf for c in parts if c.eps_inf is not None and math.isfinite(c.eps_inf)]
    other = [c for c in parts if c.eps_inf is None or not math.isfinite(c.eps_inf)]
    if delta == 0 and other:
        return f"give no ε-DP bound for its cost {describe(cost)}"
    left = delta - math.fsum(c.delta0 for c in parts)
    if other and left <= 0:
        return None
    total = math.fsum(pure)
    for c in other:
        if c.rdp is None:
            return None
        values = np.asarray(c.rdp_at(RDP_ORDERS), dtype=np.float64)
        total += best_epsilon(RDP_ORDERS, values, left / len(other), "standard").epsilon
    if not short(total, eps):
        return None
    at = f"ε={total:.6g}" if delta == 0 else f"(ε={total:.6g}, δ={delta:g})"
    return f"prove it {at}-DP by basic composition, more private than its cost {describe(cost)} says"


def _loosest_rho(curve: PrivacyCurve) -> float | None:
    """The largest zCDP bound a family may price ``curve`` with: its ρ, or ε²/2 from its pure bound (None: neither).

    Example:
        >>> from dpframe import accounting as acc
        >>> _loosest_rho(acc.exponential(1.0)), _loosest_rho(acc.gaussian(2.0))      # ε²/2 beside ε²/8; Δ²/(2σ²)
        (0.5, 0.125)

    """
    bounds = [r for r in (curve.rho, None if curve.eps_inf is None or not math.isfinite(curve.eps_inf)
                          else curve.eps_inf ** 2 / 2) if r is not None]
    return max(bounds) if bounds else None


__all__ = ["COST_SLACK", "VALUE_SLACK", "check_curve_charge", "copy_charge", "described", "guarantee", "reference"]
