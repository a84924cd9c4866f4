"""Review 53a: stop 52's accounting changes (the RDP/PLD charge check, the read-once copies, the outward rounding).

Each test is an attack by a third-party plugin author (a query family's charge, a plan's curves) or an analyst (the
public curve constructors and ``composition``), checked against exact rational references where it is about
rounding: a charge or curve is never below the exact value of the formula it stands for.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.composition import composition
from dpframe.accounting.curve_charge import check_curve_charge
from dpframe.accounting.rdp_charge import FILTER_ORDERS, RDPCharge
from dpframe.family import Explain, FamilyPlan
from dpframe.mechanism import Noise, Statistic
from dpframe.planning.curve_checks import _as_checked
from tests.adversarial.doubles import RowsFamily, installed

FILT = acc.RDPAccountant(dp.ApproxDP(10, Fraction(1, 10**5)))
RNG = np.random.default_rng(53)


def _scaled(charge: RDPCharge, by: float, delta_by: float = 1.0) -> RDPCharge:
    return RDPCharge(tuple(v * by for v in charge.values), charge.delta0 * delta_by, charge.specs, charge.labels)


# -- the charge check's value slack -----------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_soundness_a_charge_within_the_slack_is_reserved_at_its_curves_cost(rate: float) -> None:
    """Found: a charge backed by its descriptions was accepted down to 10⁻⁹ relatively below what dpframe's formulas
    give for them (VALUE_SLACK, for float order), and the ledger reserved the plugin's lower values: millions of
    ulps below the curves stop 52 rounds up ulp by ulp (the filter's own margin is 10⁻¹²). Now the charge reserved
    is at least the rebuilt curves' at every order and in δ0."""
    curves = [acc.laplace(1.0), acc.approx(0.5, 1e-7)]
    honest = FILT.charge_plan(dp.ApproxDP(Fraction(3, 2), Fraction(1, 10**7)), curves, rate)
    low = _scaled(honest, 1 - 5e-10, 1 - 5e-10)
    checked, why = check_curve_charge(low, dp.ApproxDP(Fraction(3, 2), Fraction(1, 10**7)), FILT, rate)
    assert why is None and checked is not None
    assert all(c >= h for c, h in zip(checked.values, honest.values)) and checked.delta0 >= honest.delta0


def test_an_honest_charge_above_its_curves_keeps_its_values() -> None:
    """A charge above what its curves cost (a family charging more) is reserved as it is."""
    honest = FILT.charge_plan(dp.PureDP(1), [acc.laplace(1.0)])
    high = _scaled(honest, 1.5)
    checked, why = check_curve_charge(high, dp.PureDP(1), FILT, 1.0)
    assert why is None and checked is not None and checked.values == high.values


# -- a charge whose reads raise ---------------------------------------------------------------------------------


class _Raises:
    def __float__(self) -> float:
        raise RuntimeError("no float today")

    def __str__(self) -> str:
        raise RuntimeError("no text today")

    def __iter__(self) -> Any:
        raise KeyError("no items today")


BAD = {
    "values": lambda: RDPCharge((_Raises(),) * len(FILTER_ORDERS), 0.0),
    "iter": lambda: RDPCharge(_Raises(), 0.0),                          # type: ignore[arg-type]
    "delta0": lambda: RDPCharge((1.0,) * len(FILTER_ORDERS), _Raises()),  # type: ignore[arg-type]
    "specs": lambda: RDPCharge((9.0,) * len(FILTER_ORDERS), 0.0, _Raises()),  # type: ignore[arg-type]
    "labels": lambda: RDPCharge((9.0,) * len(FILTER_ORDERS), 0.0, (), (_Raises(),)),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("field", list(BAD))
def test_a_charge_whose_fields_raise_is_refused_not_raised(field: str) -> None:
    """Found: copy_charge caught only TypeError/ValueError/OverflowError, so a plugin charge whose value's
    ``__float__``, label's ``__str__`` or field's ``__iter__`` raised anything else (RuntimeError, KeyError) escaped
    check_curve_charge, and a query family's ``cost()``/``collect()``, as a bare non-dpframe exception."""
    checked, why = check_curve_charge(BAD[field](), dp.PureDP(1), FILT, 1.0)
    assert checked is None and why is not None and "cannot be read" in why


ROWS = Statistic("rows")
DATA = pl.DataFrame({"u": list(range(60)), "x": [1.0] * 60})


class _RaisingQuery:
    def __init__(self, source: Any, how: str) -> None:
        self.source, self.how = source, how

    def describe(self) -> str:
        return f"{self.how}_charge_r53a()"

    def plan(self, budget: Any) -> Any:
        noise = Noise.calibrate(Fraction(1), dp.PureDP(budget.epsilon))

        def run(reader: Any, rng: Any) -> int:
            return int(reader.statistics(self.source.node, (ROWS,))[ROWS.key][0]) + int(noise.sample(1, rng)[0])
        charge = BAD["values"]() if self.how == "raising" else self.source.context.accountant.charge_plan(
            dp.PureDP(budget.epsilon / 100), None, 1.0)
        return FamilyPlan(budget, dp.PureDP(budget.epsilon), charge, "rows", Explain("rows"), run)


@pytest.fixture()
def raising_family() -> Iterator[None]:
    yield from installed("raising_charge_r53a", *(RowsFamily(f"{how}_charge_r53a", _RaisingQuery, how)
                                                for how in ("raising", "tiny")))


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_family_charge_that_raises_is_a_plugin_error_charging_nothing(raising_family: Any,
                                                                         accountant: str) -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, Fraction(1, 10**5)),
                      accountant=accountant, seed=0)
    remaining = sess.remaining()
    query = sess.table("t").raising_charge_r53a()
    for call in (query.cost, query.collect):
        with pytest.raises(dp.PluginError) as refused:
            call(dp.PureDP(1))
        assert "raising_charge_r53a()" in str(refused.value)
    assert sess.history().height == 0 and sess.remaining() == remaining


def test_the_charge_refusal_does_not_depend_on_the_data(raising_family: Any) -> None:
    """Held: the charge check runs while planning, on the plan's public values (its cost, charge and descriptions,
    the frame's sampling rate): two tables that differ in every row and in size get the same refusal, free."""
    other = pl.DataFrame({"u": list(range(1000, 1007)), "x": [5.0] * 7})
    messages = []
    for data in (DATA, other):
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"),
                          budget=dp.ApproxDP(10, Fraction(1, 10**5)), accountant="rdp", seed=0)
        with pytest.raises(dp.PluginError) as refused:
            sess.table("t").tiny_charge_r53a().collect(dp.PureDP(1))
        messages.append(str(refused.value))
        assert sess.history().height == 0
    assert messages[0] == messages[1] and "tiny_charge_r53a()" in messages[0]


# -- outward rounding: exact references -------------------------------------------------------------------------


def _sqrt_floor_fraction(x: Fraction) -> Fraction:
    """A rational ≤ √x within 2⁻¹⁰⁰ relatively (integer square root of a scaled x)."""
    scale = 2 ** 200
    return Fraction(math.isqrt(x.numerator * scale * scale // x.denominator), scale)


def test_soundness_a_composition_of_gaussians_is_no_more_private_than_its_parts() -> None:
    """Found: composition() of Gaussian parts is one Gaussian of μ = hypot(Δᵢ/σᵢ), each ratio and the hypot
    rounded to nearest: its ρ (and αρ, and the subsampled curve of μ) was below the exact Σ Δᵢ²/(2σᵢ²) for about
    a quarter of random parts (stop 52 rounded a single Gaussian's ρ up, not the composed one's). Now μ is the
    least float ≥ √(Σ (Δᵢ/σᵢ)²), exactly."""
    for _ in range(300):
        s1, s2, d1, d2 = (float(v) for v in RNG.uniform(0.1, 10, 4))
        c = composition([acc.gaussian(s1, d1), acc.gaussian(s2, d2)])
        exact = (Fraction(d1) / Fraction(s1)) ** 2 / 2 + (Fraction(d2) / Fraction(s2)) ** 2 / 2
        assert c.rho is not None and Fraction(c.rho) >= exact
        assert Fraction(float(c.rdp_at([2.0])[0])) >= 2 * exact
        assert c.spec is not None and Fraction(c.spec["sensitivity"]) >= _sqrt_floor_fraction(2 * exact)


def test_soundness_composed_and_sampled_delta0_are_never_below_exact() -> None:
    """Found: a composition's δ0 was math.fsum of the parts' (rounded to nearest) and a sampled curve's δ0 the
    float product δ0·γ: each below the exact value for most random inputs (by an ulp; the filter charges δ0 in
    full, so this was δ the session never counted). Now both are rounded up."""
    for _ in range(300):
        ds = [float(d) for d in RNG.uniform(1e-9, 1e-6, 3)]
        g = float(RNG.uniform(0.01, 0.99))
        c = composition([acc.approx(1.0, d) for d in ds])
        assert Fraction(c.delta0) >= sum(Fraction(d) for d in ds)
        s = acc.approx(1.0, ds[0]).subsampled(g)
        assert Fraction(s.delta0) >= Fraction(ds[0]) * Fraction(g)
        both = composition([acc.approx(1.0, d) for d in ds]).subsampled(g)
        assert Fraction(both.delta0) >= sum(Fraction(d) for d in ds) * Fraction(g)


@pytest.mark.parametrize("eps", [1e-200, 3e-162, 1.5e-160, 1e-155])
@pytest.mark.parametrize("kind", ["laplace", "pure", "discrete_laplace"])
def test_soundness_a_tiny_epsilon_curve_is_not_rounded_to_zero(eps: float, kind: str) -> None:
    """Found: the αε²/2 cap of an ε-DP curve (stop 52) squared ε in floats: below ε ≈ 1.5·10⁻¹⁶² the square is
    subnormal (or 0), so the cap, and with it the Laplace and ε-DP curves, read up to 10⁻⁵ relatively below the
    exact αε²/2 bound, or 0 (a charge of nothing for a Laplace of scale 10²⁰⁰). Now the cap is rounded up exactly.
    The exact Laplace curve is αε²/2 − O(ε³); randomized response's is ≥ αε²/8 − O(ε³): each is checked above a
    bound below it."""
    if kind == "laplace":
        curve, e, low = acc.laplace(1 / eps), Fraction(1) / Fraction(1 / eps), Fraction(1, 2) * (1 - Fraction(1, 10**9))
    elif kind == "pure":
        curve, e, low = acc.pure(eps), Fraction(eps), Fraction(1, 8) * (1 - Fraction(1, 10**9))
    else:
        curve, e, low = acc.discrete_laplace(1 / eps), Fraction(1) / Fraction(1 / eps), Fraction(1, 2) * (
            1 - Fraction(1, 10**9))
    orders = [2.0, 8.0, 256.0]
    values = curve.rdp_at(orders)
    for a, v in zip(orders, values):
        assert Fraction(float(v)) >= Fraction(a) * e * e * low, (a, v)


def test_soundness_a_sampled_plans_parts_are_summed_up() -> None:
    """Found: the curve a sampled plan's curves are read as (_as_checked, stop 52) summed its parts with plain
    float +, below the exact sum where it rounds down (1 + 10⁻¹⁷ read as 1): the amplified charge started from
    less than the curves checked. Now each partial sum is rounded up."""
    parts = (acc.from_rdp(lambda a: 1.0), acc.from_rdp(lambda a: 1e-17))
    (merged,) = _as_checked(parts, [])
    assert merged.rdp is not None
    assert all(float(v) > 1.0 for v in merged.rdp(np.array([2.0, 3.0, 9.0])))


def test_soundness_the_zcdp_bounds_of_pure_curves_are_never_below_exact() -> None:
    """Found: the exponential mechanism's curve min(ε-DP's, αε²/8) took αε²/8 as two float products (below the
    exact value for about a third of random ε, by an ulp), and its ρ = ε²/8, Laplace's and discrete Laplace's
    ρ = (Δ/b)²/2 (of the rounded ratio) and ε-DP's ε²/2 were rounded to nearest: below the exact bounds the
    zCDP accountant adds up and the charge check reads (:func:`_loosest_rho`). Now each is rounded up."""
    for _ in range(300):
        e, b, d = (float(v) for v in RNG.uniform(0.01, 5.0, 3))
        a = float(RNG.choice(FILTER_ORDERS))
        x = acc.exponential(e)
        assert x.rho is not None and Fraction(x.rho) >= Fraction(e) ** 2 / 8
        assert Fraction(float(x.rdp_at([a])[0])) >= min(Fraction(float(acc.pure(e).rdp_at([a])[0])),
                                                         Fraction(a) * Fraction(e) ** 2 / 8)
        lap, dlap, pure = acc.laplace(b, d), acc.discrete_laplace(b, 3), acc.pure(e)
        assert lap.rho is not None and Fraction(lap.rho) >= (Fraction(d) / Fraction(b)) ** 2 / 2
        assert dlap.rho is not None and Fraction(dlap.rho) >= (3 / Fraction(b)) ** 2 / 2
        assert pure.rho is not None and Fraction(pure.rho) >= Fraction(e) ** 2 / 2


# -- the reports compose only descriptions dpframe builds --------------------------------------------------------

QUIET = "r53a.quiet_laplace"


def quiet_laplace(scale: float, sensitivity: int) -> acc.PrivacyCurve:
    """A plugin's curve kind: the discrete Laplace's RDP curve (honest where the engine reads it), beside a pure
    bound, ρ and privacy profile of next to nothing (what the reports compose)."""
    honest = acc.discrete_laplace(scale, sensitivity)
    quiet = acc.pure(1e-9)
    return acc.PrivacyCurve(f"quiet({scale:g})", {"kind": QUIET, "scale": scale, "sensitivity": sensitivity},
                            honest.rdp, quiet.hs, quiet.hs_rev, 1e-9, 0.0, 1e-18, False, pure_eps=1e-9)


class QuietCount:
    """A plugin row count (discrete Laplace calibrated to its pure share) declaring the honest discrete Laplace
    curve, described by the plugin's own kind (``QUIET``), whose builder the reports would ask."""

    name = "quiet_count_r53a"
    handles = frozenset({"quiet_count_r53a"})
    notions = frozenset({"pure"})

    def validate(self, measure: Any, ctx: Any) -> None:
        pass

    def parts(self, measures: Any, ctx: Any) -> int:
        return 1

    def plan(self, measures: Any, ctx: Any, share: dp.Budget) -> Any:
        import dataclasses

        from tests.adversarial.test_review50d import CountPlan

        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        honest = acc.discrete_laplace(float(noise.scale), int(ctx.unit.max_rows))
        described = dataclasses.replace(honest, spec={"kind": QUIET, "scale": float(noise.scale),
                                                      "sensitivity": int(ctx.unit.max_rows)})
        return CountPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise={"count": noise},
                         count_noise=noise, privacy=(described,))


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
def test_soundness_a_plugin_curve_kind_cannot_shrink_the_reports(sampled: bool) -> None:
    """Found: ``described`` (stop 52) kept a charge's descriptions wherever the curves they rebuild cost at least the
    charge at the filter's orders, rebuilding a plugin's kind through the plugin's own builder: a mechanism plugin
    registering a kind whose RDP curve is honest and whose pure bound, ρ and profile are next to nothing had an
    ε = 1 release reported by ``spent_report()`` as ε ≈ 10⁻⁹ (basic), ρ ≈ 10⁻¹⁸ (zCDP) and ≈ 0 (PLD). The engine
    charges by RDP values it checked; the reports are only as good as the builders they trust. The reports now
    keep only descriptions made of dpframe's own kinds (as a query family's charge, check_curve_charge), so a
    plugin kind is reported as not composable (None) rather than underreported."""
    from dpframe.testing import pin_mechanisms

    acc.register_curve(QUIET, quiet_laplace)
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, Fraction(1, 10**5)),
                      accountant="pld", seed=0)
    pin_mechanisms(sess, QuietCount())
    frame = sess.table("t")
    (frame.sample(0.5) if sampled else frame).agg(dp.measure("quiet_count_r53a")).collect(dp.PureDP(1))
    report = sess.spent_report()
    least = 0.3 if sampled else 0.9
    for name in ("basic", "zcdp", "rdp", "pld"):
        assert report[name] is None or report[name] >= least, (name, report)
    assert "PLD of this plan" not in sess.history()["cost"][0]


CALLS: list[float] = []


def counted_laplace(scale: float) -> acc.PrivacyCurve:
    """A plugin's curve kind that records each time its builder is asked."""
    CALLS.append(scale)
    return acc.laplace(scale)


def test_the_charge_check_asks_no_plugin_builder() -> None:
    """Found: check_curve_charge (stop 52) checked the kinds at a description's top level and in a composition's
    parts only: a dpframe kind wrapping another curve (``replace_one``'s ``curve``) passed a plugin's kind on to
    ``from_spec``, which ran the plugin's builder inside the check before the result was refused (for its
    neighbouring relation). Now every kind anywhere in a description is dpframe's before anything is built."""
    acc.register_curve("r53a.counted", counted_laplace)
    CALLS.clear()
    inner = {"kind": "r53a.counted", "scale": 1.0}
    import json

    for spec in ({"kind": "replace_one", "curve": inner}, {"kind": "composition", "parts": [inner]},
                 {"kind": "sampled_without_replacement", "curve": inner, "sample_size": 1, "population": 10}):
        charge = RDPCharge((50.0,) * len(FILTER_ORDERS), 0.0, (json.dumps(spec),))
        checked, why = check_curve_charge(charge, dp.PureDP(1), FILT, 1.0)
        assert checked is not None and why is None            # rule 1: at least the cost's own curve
        assert checked.specs == FILT.charge_plan(dp.PureDP(1), None).specs
    assert CALLS == []


def _shaved(noise: Noise) -> acc.PrivacyCurve:
    """The exact curve of ``noise``, its RDP values 5·10⁻¹⁰ relatively below (its description unchanged)."""
    import dataclasses

    from tests.adversarial.test_review51f import honest_curve

    honest = honest_curve(noise)
    truth = honest.rdp
    assert truth is not None
    return dataclasses.replace(honest, rdp=lambda a: np.asarray(truth(a)) * (1 - 5e-10))


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_soundness_a_bare_plans_curve_within_the_slack_is_charged_its_description(accountant: str) -> None:
    """Found: the same 10⁻⁹ slack on the mechanism side: a plan declaring no noise whose curve's values sat
    5·10⁻¹⁰ below what its own description rebuilds passed ``_check_bare_curves`` and was charged its lower
    values on an unsampled frame (a sampled one was already floored by the rebuilt curves). Now it is charged no
    less than the rebuilt curves at every order the filter reads."""
    from dpframe.testing import pin_mechanisms
    from tests.adversarial.test_review51f import CurveCount, honest_curve

    charges = []
    for name, curve in (("shaved_r53a", _shaved), ("exact_r53a", honest_curve)):
        sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"),
                          budget=dp.ApproxDP(50, Fraction(1, 10**5)), accountant=accountant, seed=0)
        pin_mechanisms(sess, CurveCount(name, curve, table=lambda noises: {}))
        charges.append(sess.table("t").agg(dp.measure(name)).cost(dp.PureDP(1)))
    shaved, exact = charges
    assert isinstance(shaved, RDPCharge) and isinstance(exact, RDPCharge)
    assert all(s >= e for s, e in zip(shaved.values, exact.values)), (shaved.values, exact.values)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_soundness_a_curve_within_the_slack_of_its_noise_is_charged_the_noise_floor(accountant: str) -> None:
    """Found: likewise a plan declaring its noise, whose curve sat 5·10⁻¹⁰ below the noise's own RDP floor
    (``Noise.rdp``, a lower bound on the divergence the release has) passed ``_check_curves`` and was charged below
    that floor on an unsampled frame. Now it is charged no less than the floor at every order the filter reads."""
    from dpframe.testing import pin_mechanisms
    from tests.adversarial.test_review51f import CurveCount

    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(50, Fraction(1, 10**5)),
                      accountant=accountant, seed=0)
    pin_mechanisms(sess, CurveCount("shaved_noise_r53a", _shaved))
    charge = sess.table("t").agg(dp.measure("shaved_noise_r53a")).cost(dp.PureDP(1))
    noise = Noise.calibrate(Fraction(1), dp.PureDP(1))
    assert isinstance(charge, RDPCharge)
    assert all(c >= f for c, f in zip(charge.values, Noise.filter_rdp(noise)))


@pytest.mark.parametrize("cost", [dp.PureDP(10**400), dp.ApproxDP(10**400, Fraction(1, 10**5)), dp.ZCDP(10**400)],
                         ids=["pure", "approx", "zcdp"])
def test_a_cost_beyond_floats_is_a_budget_error(cost: dp.Budget) -> None:
    """Found: check_curve_charge (public) with a cost beyond floats raised OverflowError from the basic-composition
    comparison where the charge had descriptions (without, ``charge_plan`` refused it as a BudgetError). Now a
    BudgetError either way (a query family's cost never gets there: it is at most the query's budget, which the
    session's filter took)."""
    for curves in ([acc.laplace(1.0)], None):
        with pytest.raises(dp.BudgetError):
            check_curve_charge(FILT.charge_plan(dp.PureDP(1), curves), cost, FILT, 1.0)


def _picky(noise: Noise) -> acc.PrivacyCurve:
    """The exact curve of ``noise``, whose RDP function raises at any order the filter does not read."""
    import dataclasses

    from tests.adversarial.test_review51f import honest_curve

    honest = honest_curve(noise)
    truth = honest.rdp
    assert truth is not None

    def rdp(a: Any) -> Any:
        a = np.asarray(a, dtype=np.float64)
        if not np.all(np.isin(a, FILTER_ORDERS)):
            raise RuntimeError("not an order I answer")
        return truth(a)
    return dataclasses.replace(honest, rdp=rdp)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_curve_failing_where_amplification_reads_it_names_the_mechanism(accountant: str) -> None:
    """Found: a plan's curve function that raises at orders only amplification reads (on a Poisson sample) failed
    in the charge, after the checks, as "the query family of ... agg(...) failed in plan()": blamed on the family
    (the engine's own ``agg``) and its plugin. Now a PluginError naming the mechanism; nothing charged."""
    from dpframe.testing import pin_mechanisms
    from tests.adversarial.test_review51f import CurveCount

    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(50, Fraction(1, 10**5)),
                      accountant=accountant, seed=0)
    pin_mechanisms(sess, CurveCount("picky_r53a", _picky))
    for call in ("cost", "collect"):
        with pytest.raises(dp.PluginError) as refused:
            getattr(sess.table("t").sample(0.5).agg(dp.measure("picky_r53a")), call)(dp.PureDP(1))
        assert refused.value.argument == "mechanism" and "mechanism 'picky_r53a'" in str(refused.value)
        assert "query family" not in str(refused.value)
    assert sess.history().height == 0
    sess.table("t").agg(dp.measure("picky_r53a")).collect(dp.PureDP(1))     # the filter's orders only: it runs
    assert sess.history().height == 1


def test_soundness_standalone_totals_are_never_below_exact() -> None:
    """Found: the standalone accountants ``spent_report()`` composes the ledger with (and the analyst's own) added
    their totals with ``math.fsum(t * v)``: each product rounded to nearest, then the sum: the pure total (RDP and
    PLD accountants' pure shortcut), the zCDP accountant's ρ and δ0, and the RDP accountant's δ0 were below the
    exact Σ tᵢ·vᵢ for many random histories. Now the exact sums, rounded up."""
    from dpframe.accounting.accountants import pure_total

    low = {"pure": 0, "rho": 0, "d0z": 0, "d0r": 0}
    for _ in range(200):
        eps = [float(v) for v in RNG.uniform(0.01, 2.0, 3)]
        ds = [float(v) for v in RNG.uniform(1e-9, 1e-7, 3)]
        times = [int(t) for t in RNG.integers(1, 10**6, 3)]
        entries = [(acc.laplace(1 / e), t) for e, t in zip(eps, times)]
        exact = sum(Fraction(c.pure_eps) * t for c, t in entries)               # type: ignore[arg-type]
        low["pure"] += Fraction(pure_total(entries)) < exact                    # type: ignore[arg-type]
        z, r = acc.ZCDPAccountant(), acc.RDPAccountant()
        for e, d, t in zip(eps, ds, times):
            z.compose(acc.zcdp(e, d), times=t)
            r.compose(acc.approx(e, d), times=t)
        rho, d0 = z._rho()
        low["rho"] += Fraction(rho) < sum(Fraction(e) * t for e, t in zip(eps, times))
        low["d0z"] += Fraction(d0) < sum(Fraction(d) * t for d, t in zip(ds, times))
        low["d0r"] += Fraction(r._delta0()) < sum(Fraction(d) * t for d, t in zip(ds, times))
    assert low == {"pure": 0, "rho": 0, "d0z": 0, "d0r": 0}
