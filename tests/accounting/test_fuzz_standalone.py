"""Fuzzing the standalone accounting API: a correct result or a dpframe error, nothing else.

Every public constructor and method of ``dpframe.accounting`` (curves, ``subsampled``, ``rdp_at``,
``delta_at``, ``approx_dp``, the four accountants' ``compose``/``epsilon``/``delta``/``explain``, the
session-filter methods) and ``dp.ZCDP(...).to_approx`` get extreme floats (NaN, ±∞, subnormals, 1e308),
huge ints (10**400), Fractions, Decimals, numpy scalars and wrong types. The only allowed outcomes are a
:class:`dp.DPFrameError` or a result that is well-formed (δ ∈ [0, 1], ε and RDP ∈ [0, ∞], never NaN) and
correct where that is cheap to check: ``approx_dp`` meets its δ, a pure-DP mechanism's composed ε is at most
the basic bound, δ(ε) is non-increasing, and a zCDP conversion is witnessed by some Rényi order.

Default run: few derandomized examples (well under 20 s); ``-m slow`` runs many more.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from fuzz.strategies import time_limit  # tests/ is on sys.path: its packages are imported by their names
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import dpframe as dp
from dpframe import accounting as acc

from .test_extreme_inputs import witnessed

CI = settings(max_examples=120, derandomize=True, deadline=None, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
DEEP = settings(max_examples=1000, deadline=None, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))

EXTREMES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 1e-320, 1e-300, 1e-12, 1e-3, 0.5, 1 - 1e-16, 1.0,
            2.0, 7.5, 709.8, 1e3, 1e12, 1e300, 1.7976931348623157e308, -1.0]
WEIRD = [None, "1", [1], (), complex(1, 1), True, Decimal("NaN"), Decimal("1.5"), Fraction(1, 3), Fraction(1, 10**400),
         10**400, -(10**400), 2**53 + 1, np.float32(0.25), np.int64(3), np.float64("nan"), b"1"]
NUMBER = st.one_of(st.sampled_from(EXTREMES), st.floats(allow_nan=True, allow_infinity=True),
                   st.integers(-10**30, 10**30), st.sampled_from(WEIRD), st.fractions())
POSITIVE = st.one_of(st.floats(1e-3, 1e3), st.sampled_from([0.1, 1.0, 10.0]))
PROBABILITY = st.one_of(st.floats(1e-12, 0.999), st.sampled_from([1e-6, 0.01, 0.5]))
GRID = st.sampled_from([0.01, 0.05, 0.1])        # coarse grids: a fast PLD (drawn through arg(): or anything)

PROFILES: list[Callable[[float], Any]] = [
    lambda e: max(0.0, 1e-6 - e), lambda e: math.exp(-e), lambda e: 1e-6 if e >= 1 else 1.0, lambda e: float("nan"),
    lambda e: 2.0, lambda e: -1.0, lambda e: "x", lambda e: 10**400, lambda e: 1 / (1 + e)]
RDPS: list[Callable[[float], Any]] = [
    lambda a: a / 8, lambda a: float("nan"), lambda a: -1.0, lambda a: math.inf, lambda a: None, lambda a: a * 1e300]

#: Wall-clock limit of one example (a hang fails the test instead of stalling the suite).
EXAMPLE_SECONDS = 60


def arg(data: st.DataObject, sane: st.SearchStrategy[Any]) -> Any:
    """Mostly a sensible value (to get past the checks and exercise the numerics), else anything."""
    return data.draw(NUMBER if data.draw(st.integers(0, 5)) == 5 else sane)


def attempt(call: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, result) or (False, None) for a dpframe error; any other exception fails the test."""
    try:
        return True, call()
    except dp.DPFrameError as e:
        assert e.argument and e.fix, e
        return False, None


def is_delta(v: Any) -> bool:
    return isinstance(v, float) and 0.0 <= v <= 1.0


def is_epsilon(v: Any) -> bool:
    return isinstance(v, float) and not math.isnan(v) and v >= 0.0


def draw_curve(data: st.DataObject, depth: int = 0) -> acc.PrivacyCurve | None:
    kind = data.draw(st.sampled_from(["gaussian", "laplace", "rr_p", "rr_eps", "pure", "zcdp", "approx", "dlaplace",
                                      "dgaussian", "exponential", "threshold", "profile", "rdp", "composition"]))
    pos, prob = POSITIVE, PROBABILITY
    small_int = st.one_of(st.integers(1, 5), NUMBER)
    builders: dict[str, Callable[[], acc.PrivacyCurve]] = {
        "gaussian": lambda: acc.gaussian(arg(data, pos), arg(data, pos)),
        "laplace": lambda: acc.laplace(arg(data, pos), arg(data, pos)),
        "rr_p": lambda: acc.randomized_response(arg(data, st.floats(0.51, 0.99))),
        "rr_eps": lambda: acc.randomized_response(epsilon=arg(data, pos)),
        "pure": lambda: acc.pure(arg(data, pos)),
        "zcdp": lambda: acc.zcdp(arg(data, pos), arg(data, st.sampled_from([0.0, 1e-6]))),
        "approx": lambda: acc.approx(arg(data, pos), arg(data, prob)),
        "dlaplace": lambda: acc.discrete_laplace(arg(data, pos), data.draw(small_int)),
        "dgaussian": lambda: acc.discrete_gaussian(arg(data, pos), arg(data, pos)),
        "exponential": lambda: acc.exponential(arg(data, pos)),
        "threshold": lambda: acc.threshold_test(arg(data, pos), arg(data, st.floats(-5, 20)),
                                                data.draw(st.one_of(st.integers(0, 3), NUMBER)),
                                                data.draw(st.one_of(st.integers(3, 40), NUMBER))),
        "profile": lambda: acc.from_profile(data.draw(st.sampled_from(PROFILES))),
        "rdp": lambda: acc.from_rdp(data.draw(st.sampled_from(RDPS)),
                                    eps_inf=data.draw(st.one_of(st.none(), st.just(2.0), NUMBER))),
        "composition": lambda: acc.composition(
            [c for c in (draw_curve(data, depth + 1) for _ in range(data.draw(st.integers(1, 3)))) if c is not None]
            or [acc.pure(1.0)], grid=arg(data, GRID)),
    }
    if kind == "composition" and depth > 0:
        kind = "pure"
    ok, curve = attempt(builders[kind])
    if ok and data.draw(st.booleans()):
        ok, curve = attempt(lambda: curve.subsampled(arg(data, st.sampled_from([0.01, 0.5, 1.0, 1e-300]))))
    return curve if ok else None


def check_curve(curve: acc.PrivacyCurve, data: st.DataObject) -> None:
    alpha = arg(data, st.one_of(st.just([1.5, 2.0, 8.0, 64.0, 1e4]), st.floats(1.01, 1e6)))
    event(f"curve {curve.label.split('(')[0]}")
    ok, rdp = attempt(lambda: curve.rdp_at(alpha))
    if ok:
        assert isinstance(rdp, np.ndarray) and rdp.dtype == np.float64 and not np.isnan(rdp).any() and (rdp >= 0).all()
    eps = arg(data, st.floats(0, 50))
    ok, d = attempt(lambda: curve.delta_at(eps))
    if ok:
        assert is_delta(d), d
        ok2, d2 = attempt(lambda: curve.delta_at(float(eps) + 1.0))
        assert ok2 and d2 <= d + 1e-9, (eps, d, d2)                     # non-increasing
    delta = arg(data, PROBABILITY)
    ok, e = attempt(lambda: curve.approx_dp(delta))
    if ok:
        assert is_epsilon(e), e
        if math.isfinite(e):
            assert curve.delta_at(e) <= float(delta) * (1 + 1e-9) + 1e-12, (e, delta)    # meets its δ


def check_accountant(curve: acc.PrivacyCurve, data: st.DataObject, kind: str) -> None:
    make = {"basic": acc.BasicAccountant, "rdp": acc.RDPAccountant, "zcdp": acc.ZCDPAccountant,
            "pld": lambda: acc.PLDAccountant(grid=arg(data, GRID))}[kind]
    ok, a = attempt(make)
    if not ok:
        return
    times = arg(data, st.sampled_from([1, 3, 1000, 2**53]))
    ok, _ = attempt(lambda: a.compose(curve, times=times))
    if not ok:
        return
    delta = arg(data, PROBABILITY)
    ok, eps = attempt(lambda: a.epsilon(delta))
    event(f"{kind} epsilon {'ok' if ok else 'refused'}")
    if ok:
        assert is_epsilon(eps), eps
        if curve.pure_eps is not None and curve.delta0 == 0 and "composition" not in curve.label and kind in (
                "basic", "pld"):
            step = a.effective_grid if kind == "pld" else 0.0
            assert eps <= times * (curve.pure_eps + step) * (1 + 1e-9) + 1e-9, (eps, times, curve.pure_eps, step)
    e = arg(data, st.floats(0, 20))
    ok, d = attempt(lambda: a.delta(e))
    if ok:
        assert is_delta(d), d
        if kind in ("rdp", "pld"):
            assert a.delta(float(e) + 1.0) <= d + 1e-9                       # non-increasing
    ok, text = attempt(lambda: a.explain(delta))
    assert not ok or isinstance(text, str)


def check_session_accountant(data: st.DataObject) -> None:
    budgets = [dp.PureDP(1), dp.ApproxDP(1, 1e-6), dp.ZCDP(1)]
    total = arg(data, st.sampled_from(budgets))
    fitting = {"pure": [acc.BasicAccountant], "approx": [acc.BasicAccountant, acc.RDPAccountant, acc.PLDAccountant],
               "zcdp": [acc.ZCDPAccountant]}.get(getattr(total, "notion", ""), [acc.BasicAccountant])
    anyone = [acc.BasicAccountant, acc.RDPAccountant, acc.ZCDPAccountant, acc.PLDAccountant]
    kind = data.draw(st.sampled_from(anyone if data.draw(st.integers(0, 3)) == 3 else fitting))
    ok, a = attempt(lambda: kind(total))
    if not ok:
        return
    junk = st.one_of(NUMBER, st.sampled_from([dp.PureDP(0.5), dp.ApproxDP(0.5, 1e-8), dp.ZCDP(0.1)]))
    cost = arg(data, st.sampled_from([dp.PureDP(0.5), dp.PureDP(800), dp.ApproxDP(0.5, 1e-8), dp.ZCDP(0.1)]))
    curves = arg(data, st.sampled_from([None, [], [acc.pure(0.5)], [acc.gaussian(3.0)], [acc.laplace(1e-3)]]))
    rate = arg(data, st.sampled_from([1.0, 0.5, 0.01]))
    for call in (lambda: a.charge(cost), lambda: a.charge_plan(cost, curves, rate)):
        ok, charge = attempt(call)
        if ok and total is not None:
            event("charged")
            spent = a.compose([charge, a.empty()])
            assert isinstance(a.fits(spent), bool)
            assert isinstance(a.remaining(spent), dp.PureDP | dp.ApproxDP | dp.ZCDP)
            assert isinstance(a.shortfall(spent), str) and isinstance(a.describe_charge(charge), str)
            a.report(spent)
        elif ok:
            assert attempt(lambda: a.fits(charge)) == (False, None)      # standalone: no total to fit into
    other = data.draw(junk)
    for call in (lambda: a.fits(other), lambda: a.compose([other]), lambda: a.remaining(other),
                 lambda: a.describe_charge(other), lambda: a.compose(other)):
        attempt(call)


def check_zcdp_conversion(data: st.DataObject) -> None:
    rho = arg(data, st.one_of(st.floats(1e-12, 1e12), st.sampled_from([7e16, 5e-324, 1e300])))
    d0 = arg(data, st.sampled_from([0, 1e-9, 5e-324, 0.3]))
    delta = arg(data, st.one_of(PROBABILITY, st.sampled_from([1e-159, 5e-324, 1e-300])))
    ok, budget = attempt(lambda: dp.ZCDP(rho, d0))
    if not ok:
        return
    ok, out = attempt(lambda: budget.to_approx(delta))
    if not ok:
        return
    event("converted")
    assert isinstance(out, dp.ApproxDP) and out.epsilon >= 0 and repr(out)
    d = out.delta - budget.delta
    if Fraction(1, 10**12) <= budget.rho <= 10**12 and d >= Fraction(1, 10**300):
        assert witnessed(float(budget.rho), float(out.epsilon), d), (budget, out)


def run(body: Callable[[st.DataObject], None], data: st.DataObject) -> None:
    with time_limit(EXAMPLE_SECONDS), np.errstate(all="ignore"):
        body(data)


def curves_body(data: st.DataObject) -> None:
    curve = draw_curve(data)
    if curve is not None:
        check_curve(curve, data)


def accountants_body(data: st.DataObject) -> None:
    curve = draw_curve(data)
    if curve is not None:
        for kind in ("basic", "rdp", "zcdp", "pld"):
            check_accountant(curve, data, kind)


@CI
@given(st.data())
def test_curves_give_results_or_dpframe_errors(data: st.DataObject) -> None:
    run(curves_body, data)


@CI
@given(st.data())
def test_standalone_accountants_give_results_or_dpframe_errors(data: st.DataObject) -> None:
    run(accountants_body, data)


@CI
@given(st.data())
def test_session_accountant_methods_refuse_junk(data: st.DataObject) -> None:
    run(check_session_accountant, data)


@CI
@given(st.data())
def test_zcdp_conversions_are_sound_or_refused(data: st.DataObject) -> None:
    run(check_zcdp_conversion, data)


@pytest.mark.slow
@DEEP
@given(st.data(), st.sampled_from([curves_body, accountants_body, check_session_accountant, check_zcdp_conversion]))
def test_standalone_api_deep(data: st.DataObject, body: Callable[[st.DataObject], None]) -> None:
    run(body, data)
