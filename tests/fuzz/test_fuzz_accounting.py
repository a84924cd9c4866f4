"""Fuzzing the budget constructors and the standalone accounting API: a valid object or a dpframe error.

``dp.PureDP`` / ``dp.ApproxDP`` / ``dp.ZCDP`` (and ``+``, ``to_approx``, ``to_zcdp``), every curve
constructor of ``dpframe.accounting`` (``gaussian``, ``laplace``, ``randomized_response``, ``pure``, ``zcdp``,
``approx``, ``discrete_laplace``, ``discrete_gaussian``, ``exponential``, ``threshold_test``, ``from_rdp``),
``PrivacyCurve.subsampled`` / ``delta_at`` / ``approx_dp`` / ``rdp_at``, and the ``BasicAccountant``,
``ZCDPAccountant``, ``RDPAccountant`` and ``PLDAccountant`` (``compose``, ``epsilon``, ``delta``) with
adversarial numbers. Results must be numbers in range: ε ≥ 0 (possibly inf), δ ∈ [0, 1], budgets with
non-negative exact coordinates; composing more never reports less.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import dpframe as dp
from dpframe import accounting as acc

from .entry_points import mostly
from .strategies import CI, DEEP, NUMBERS, time_limit

POSITIVE = mostly(st.sampled_from([0.5, 1, 2.0, 10, Fraction(1, 3), 1e-3]), NUMBERS)
UNIT_INTERVAL = mostly(st.sampled_from([1e-6, 0.01, 0.5, 0.99]), NUMBERS)


def _outcome(build: Any) -> Any:
    try:
        with time_limit():
            return build()
    except dp.DPFrameError:
        return None


@CI
@given(kind=st.sampled_from(["pure", "approx", "zcdp"]), a=NUMBERS, b=NUMBERS, c=NUMBERS)
def test_fuzz_budgets(kind: str, a: Any, b: Any, c: Any) -> None:
    make = {"pure": lambda: dp.PureDP(a), "approx": lambda: dp.ApproxDP(a, b), "zcdp": lambda: dp.ZCDP(a, b)}[kind]
    budget = _outcome(make)
    event("valid" if budget is not None else "refused")
    if budget is None:
        return
    for value in vars(budget).values():
        assert not isinstance(value, Fraction) or value >= 0, budget
    converted = [_outcome(lambda: budget.to_approx(c)), _outcome(budget.to_zcdp) if kind == "pure" else None,
                 _outcome(lambda: budget + budget)]
    for out in converted:
        if out is not None:
            assert isinstance(out, dp.PureDP | dp.ApproxDP | dp.ZCDP), out
            assert all(v >= 0 for v in vars(out).values() if isinstance(v, Fraction)), out


CURVES = st.sampled_from(["gaussian", "laplace", "rr_p", "rr_eps", "pure", "zcdp", "approx", "discrete_laplace",
                          "discrete_gaussian", "exponential", "threshold_test", "from_rdp"])


def _curve(name: str, a: Any, b: Any, c: Any) -> Any:
    return {
        "gaussian": lambda: acc.gaussian(a, b), "laplace": lambda: acc.laplace(a, b),
        "rr_p": lambda: acc.randomized_response(a), "rr_eps": lambda: acc.randomized_response(epsilon=a),
        "pure": lambda: acc.pure(a), "zcdp": lambda: acc.zcdp(a, c), "approx": lambda: acc.approx(a, c),
        "discrete_laplace": lambda: acc.discrete_laplace(a, b),
        "discrete_gaussian": lambda: acc.discrete_gaussian(a, b),
        "exponential": lambda: acc.exponential(a), "threshold_test": lambda: acc.threshold_test(a, b, 0, 3),
        "from_rdp": lambda: acc.from_rdp(lambda alpha: alpha / (2 * (abs(float(a)) + 0.1) ** 2)),
    }[name]()


#: Float rounding the curves may show (e.g. RDP −1.6e-17 for ε = 1e-300, δ = 1 + 2e-16): harmless.
TOL = 1e-12


def _fuzz_curve(name: str, a: Any, b: Any, c: Any, rate: Any, delta: Any, eps: Any, times: Any,
                accountant: str) -> None:
    curve = _outcome(lambda: _curve(name, a, b, c))
    if curve is None:
        event("refused")
        return
    sampled = _outcome(lambda: curve.subsampled(rate))
    for cv in (curve, sampled):
        if cv is None:
            continue
        d = _outcome(lambda cv=cv: cv.delta_at(eps))
        assert d is None or -TOL <= d <= 1 + TOL, (cv, eps, d)
        e = _outcome(lambda cv=cv: cv.approx_dp(delta))
        assert e is None or e >= -TOL, (cv, delta, e)
        r = _outcome(lambda cv=cv: cv.rdp_at([2.0, 8.0]))
        assert r is None or all(v >= -TOL for v in r), (cv, r)
    target = sampled if sampled is not None else curve
    a1 = {"rdp": acc.RDPAccountant, "pld": acc.PLDAccountant}[accountant]()
    composed = _outcome(lambda: a1.compose(target, times=times))
    if composed is None:
        event("compose refused")
        return
    e1 = _outcome(lambda: composed.epsilon(delta))
    d1 = _outcome(lambda: composed.delta(eps))
    assert e1 is None or e1 >= -TOL, e1
    assert d1 is None or -TOL <= d1 <= 1 + TOL, d1
    more = _outcome(lambda: composed.compose(target))
    if more is not None and e1 is not None:
        e2 = _outcome(lambda: more.epsilon(delta))
        assert e2 is None or e2 >= e1 - 1e-9, ("composing more reported less", e1, e2)
    event("composed")


ACCOUNTING = dict(name=CURVES, a=POSITIVE, b=mostly(st.sampled_from([1, 2, 1.0]), NUMBERS),
                  c=mostly(st.sampled_from([0, 1e-6]), NUMBERS), rate=UNIT_INTERVAL, delta=UNIT_INTERVAL,
                  eps=POSITIVE, times=mostly(st.integers(1, 50), NUMBERS), accountant=st.sampled_from(["rdp", "pld"]))


@CI
@given(**ACCOUNTING)
def test_fuzz_accounting(**kw: Any) -> None:
    _fuzz_curve(**kw)


@pytest.mark.slow
@DEEP
@given(**ACCOUNTING)
def test_fuzz_accounting_deep(**kw: Any) -> None:
    _fuzz_curve(**kw)


@CI
@given(total=st.sampled_from([lambda: dp.PureDP(2), lambda: dp.ApproxDP(2, 1e-6), lambda: dp.ZCDP(1)]),
       charges=st.lists(st.sampled_from([lambda: dp.PureDP(0.5), lambda: dp.ApproxDP(0.5, 1e-7), lambda: dp.ZCDP(0.1),
                                         lambda: "x", lambda: None, lambda: dp.PureDP(10**9)]), max_size=4))
def test_fuzz_session_accountants(total: Any, charges: list[Any]) -> None:
    """The session accountants' ``charge``/``compose``/``fits``/``remaining``: a value or a dpframe error."""
    for cls in (acc.BasicAccountant, acc.ZCDPAccountant, acc.RDPAccountant, acc.PLDAccountant):
        accountant = _outcome(lambda cls=cls: cls(total()))
        if accountant is None:
            continue
        spent = accountant.empty()
        for c in charges:
            if not isinstance(c(), dp.PureDP | dp.ApproxDP | dp.ZCDP):     # F-accounting-curve-inputs
                continue
            charge = _outcome(lambda c=c: accountant.charge(c()))
            if charge is None:
                continue
            after = _outcome(lambda charge=charge: accountant.compose([spent, charge]))
            assert after is not None, (cls, charge)
            fits = accountant.fits(after)
            assert isinstance(fits, bool)
            if fits:
                spent = after
        assert accountant.fits(spent)
        assert _outcome(lambda: accountant.remaining(spent)) is not None
