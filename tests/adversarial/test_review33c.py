"""Review 33c: the accounting and privacy claims at parameters the analyst picks (tiny δ, rounding edges).

The analyst picks every budget, δ and sampling rate; a δ such as ``Fraction(1, 10**400)`` is a valid
``dp.ApproxDP`` δ (an exact Fraction) that ``float()`` turns into 0.0, and a δ below 2.2e-308 is a subnormal
float with few bits. Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
Expected values are literals computed independently (by hand or with mpmath at 60 digits, as each docstring says).
"""

from __future__ import annotations

import math
from fractions import Fraction

import polars as pl
import pytest
from dpframe_aggregates.partition_selection import gaussian_threshold, laplace_threshold
from dpframe_learning.interior_point import Stability, TreeLogParameters

import dpframe as dp
from dpframe.interactive.ptr import robust_median

TINY = Fraction(1, 10**400)          # a valid δ, far below the smallest float (5e-324)


def _session(budget: dp.Budget, **kw: object) -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)], "x": [float(i % 50) for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=0, **kw)  # type: ignore[arg-type]


def test_the_robust_median_test_threshold_covers_a_delta_below_the_float_range() -> None:
    """The generalized-PTR threshold was the smallest t with J·(P[ν ≥ ⌈t/2⌉] + P[−ρ ≥ ⌈t/2⌉]) ≤ δ, evaluated
    in floats: a tail below e^-800 was rounded to 0.0 and ``float(δ)`` of δ = 10^-400 is 0.0, so the search
    stopped where the tails underflowed (t = 5957), whose real failure probability is J·e^-742 ≈ 10^-322:
    the ledger recorded δ = 10^-400, 10^78 times less than the run could fail with. The comparison is now in
    logs against the exact log δ. Expected (mpmath, 60 digits): J = 15 proposals, ν = 4, ρ = 2 (m = 1,
    ε_test = 1): the least half with 15·(e^{-h/4}/(1 + e^{-1/4}) + e^{-h/2}/(1 + e^{-1/2})) ≤ 10^-400 is
    h = 3693 (9.20e-401; h = 3692 gives 1.18e-400), so t = 2h − 1 = 7385; at δ = 10^-6, h = 64, t = 127."""
    rm = robust_median(_session(dp.ApproxDP(10, 1e-5)).table("t"), "x", bounds=(0, 1000))
    assert len(rm.proposals) == 15
    assert rm.threshold(Fraction(1), TINY) == (7385, Fraction(2), Fraction(4))
    assert rm.threshold(Fraction(1), Fraction(1, 10**6))[0] == 127
    assert "distance to instability ≥ 7385 rows" in rm.explain(dp.ApproxDP(2, TINY))


def test_partition_selection_calibrates_to_a_delta_below_the_float_range() -> None:
    """``math.log(float(δ))`` raised a raw ValueError (discrete Laplace) or ZeroDivisionError (discrete
    Gaussian) for δ = 10^-400, escaping as a non-dpframe error from ``cost()``; and the plan's curve took
    ``float(δ)`` = 0.0, so an RDP/PLD session would have charged the selection δ0 = 0. The thresholds now use
    the exact log of δ and the curve's δ is rounded up (to 5e-324). Hand-computed: Laplace t = 1, l0 = 1:
    k = 921.0340 − ln(1 + e^-1) = 920.7208 → τ = ⌈k⌉ + 1 = 922; Gaussian σ² = 1: k = √(2·921.0340) = 42.92 →
    44; in the session (ε split in two, t = 2): k = 2·(921.0340 − ln(1 + e^-1/2)) = 1841.12 → τ = 1843 (review 52d
    dropped a +1 margin that no proof needed: test_review52d.py)."""
    assert laplace_threshold(1, Fraction(1), TINY) == 922
    assert gaussian_threshold(1, Fraction(1), TINY) == 44
    for budget in (dp.ApproxDP(1, TINY), dp.ZCDP(1, TINY)):
        sess = _session(dp.ApproxDP(10, 1e-300) if budget.notion == "approx" else dp.ZCDP(10, 1e-300))
        q = sess.table("t").group_by("g").agg(dp.len())
        assert q.cost(budget) == budget
        q.collect(budget)
    rdp = _session(dp.ApproxDP(10, 1e-300), accountant="rdp")
    query = rdp.table("t").group_by("g").agg(dp.len())
    assert query.cost(dp.ApproxDP(1, TINY)).delta0 == 5e-324         # type: ignore[union-attr]
    assert "τ = 1843 " in query.explain(dp.ApproxDP(1, TINY))


def test_interior_point_plans_a_delta_below_the_float_range() -> None:
    """TreeLog's δ₀ = min(δ, β)/(L(2 + e^ε₀) + 1) was formed from ``float(δ)``: δ = 10^-400 raised a raw
    ZeroDivisionError and δ = 10^-320 an OverflowError from ``cost()`` of every interior-point method (the
    planner sizes TreeLog for each), and a subnormal δ had a relative error far above the 1e-12 margin. It is
    now ln(1/δ₀), from the exact log of δ. Hand-computed for ε = 1, δ = 10^-400, β = 1e-6, N = 2^40 (L = 2,
    ε₀ = 1/17): ln(1/δ₀) = 921.03404 + ln(2·(2 + e^{1/17}) + 1) = 921.03404 + ln 7.12117 = 922.99711."""
    p = TreeLogParameters.of(Fraction(1), TINY, 1e-6, 2**40, Stability(1))
    assert (p.levels, p.epsilon0) == (2, Fraction(1, 17))
    assert p.log_inv_delta0 == pytest.approx(922.99711, abs=1e-5) and p.log_inv_delta0 >= 400 * math.log(10)
    assert p.t == math.ceil(100 * 17 * p.log_inv_delta0 * (1 + 1e-12)) and p.delta0 == 0.0
    for delta in (Fraction("1e-320"), TINY):       # (text is refused since review 50b: a Fraction of it)
        for method in ("treelog", "binary_search", "exponential"):
            q = _session(dp.ApproxDP(10, 1e-5)).table("t").interior_point("x", bounds=(0, 100), method=method)
            assert q.cost(dp.ApproxDP(1, delta)).epsilon == 1      # type: ignore[union-attr]


def test_a_sampled_query_is_charged_its_delta_at_the_rate_it_samples_with() -> None:
    """A sample keeps a unit with probability ⌊γ·2⁶⁴⌋/2⁶⁴ for the float γ, whose exact value can exceed its
    decimal repr (0.1 is 0.1000000000000000055511151231257827…), but the basic accountant charged
    δ·Fraction(repr(γ)) = δ/10, below γδ; and ``.sample(0.7).sample(0.1)`` was charged at the float product
    0.7·0.1 rounded to nearest, which is below the exact product of the two floats. The δ is now charged at
    the float's exact value and nested rates are multiplied exactly and rounded up."""
    sess = _session(dp.ApproxDP(10, 1e-3))
    cost = sess.table("t").sample(0.1).group_by("g").agg(dp.len()).cost(dp.ApproxDP(1, Fraction(1, 10**6)))
    assert cost.delta == Fraction(0.1) / 10**6 and cost.delta > Fraction(1, 10**7)      # type: ignore[union-attr]
    assert Fraction(0.7 * 0.1) < Fraction(0.7) * Fraction(0.1)                         # the product rounds down
    nested = sess.table("t").sample(0.7).sample(0.1).group_by("g").agg(dp.len()).cost(dp.ApproxDP(1, Fraction(1, 2)))
    assert nested.delta >= Fraction(0.7) * Fraction(0.1) / 2                            # type: ignore[union-attr]


def test_budgets_read_as_floats_round_the_safe_way() -> None:
    """A charge's curve took ``float(ε)``, ``float(ρ)`` and ``float(δ)`` (the nearest float: 1/10 → 0.1, just
    above, but 2/3 → 0.66…63, just below), and the Rényi filter read its own total ε and δ the same way and
    split δ − Σδ0 over its orders with a float division that may round up, so the shares could add up to
    more than δ. Both at 10⁻¹⁶ relative, but in the wrong direction. Now a charge's ε, ρ and δ round up, the
    filter's total rounds down and so does each order's share of δ."""
    from dpframe.accounting.accountants import curve_of
    from dpframe.accounting.rdp import RDPAccountant
    from dpframe.accounting.rdp_charge import FILTER_ORDERS
    two_thirds = Fraction(2, 3)
    assert Fraction(float(two_thirds)) < two_thirds                       # the nearest float is below
    assert Fraction(curve_of(dp.PureDP(two_thirds)).eps_inf) >= two_thirds
    assert Fraction(curve_of(dp.ApproxDP(1, two_thirds / 10**6)).delta0) >= two_thirds / 10**6
    assert Fraction(curve_of(dp.ZCDP(two_thirds)).rho) >= two_thirds  # type: ignore[arg-type]
    tenth = Fraction(1, 10)
    assert Fraction(float(tenth)) > tenth                                  # the nearest float is above
    eps, delta = RDPAccountant(dp.ApproxDP(tenth, tenth / 10**5))._budget()
    assert Fraction(eps) <= tenth and Fraction(delta) <= tenth / 10**5
    seen: list[float] = []
    import dpframe.accounting.rdp as rdp
    original = rdp.best_epsilon

    def spy(orders: object, values: object, share: float) -> object:
        seen.append(share)
        return original(orders, values, share)  # type: ignore[arg-type]
    rdp.best_epsilon = spy  # type: ignore[assignment]
    try:
        f = RDPAccountant(dp.ApproxDP(1, Fraction(2, 3 * 10**5)))
        f.filter_epsilon(f.charge(dp.ZCDP(Fraction(1, 100))))
    finally:
        rdp.best_epsilon = original
    assert seen and Fraction(seen[0]) * len(FILTER_ORDERS) <= Fraction(2, 3 * 10**5)


def test_target_charging_is_calibrated_to_at_most_the_delta_it_charges() -> None:
    """A TCT channel planned its hits at ``float(δ)`` and charged δ as written: for ``delta=0.1`` the plan's δ
    was 0.1000000000000000055…, above the 1/10 charged. Now the plan takes the largest float not above the
    charged δ."""
    sess = _session(dp.ApproxDP(10, Fraction(1, 5)))
    with sess.target_charging(epsilon=0.1, max_hits=2, delta=0.1) as ch:
        assert Fraction(ch.delta) <= Fraction(1, 10) == ch.charged_delta
        assert ch.guarantee.delta == Fraction(1, 10)  # type: ignore[union-attr]


@pytest.mark.parametrize("delta", [TINY, Fraction(1, 10**322)])
def test_an_rdp_session_whose_delta_leaves_no_float_per_order_is_refused_when_opened(delta: Fraction) -> None:
    """δ = 10⁻⁴⁰⁰ (or 10⁻³²², whose share over the 23 orders underflows): the session opened and then refused every
    query with "δ0 exceeds δ" (safe, but wrong: nothing was spent). Now the session is refused when opened, with
    the reason and the fix."""
    with pytest.raises(dp.BudgetError, match="rounds to 0") as info:
        _session(dp.ApproxDP(1, delta), accountant="rdp")
    assert info.value.argument == "budget"
    assert _session(dp.ApproxDP(1, 1e-300), accountant="rdp").remaining().epsilon == 1
