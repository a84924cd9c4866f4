"""Review 39 (lead): a session's running total of charges, kept in floats, against the exact total.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from fractions import Fraction

import dpframe as dp
from dpframe.accounting import RDPAccountant
from dpframe.accounting.rdp import FILTER_ORDERS, RDPCharge


def test_rdp_running_total_never_below_the_exact_sum() -> None:
    """The Rényi filter added each order's ε with nearest rounding: one large charge then 20,000 charges of
    a quarter ulp each left the total unchanged, 2·10⁻¹² below the exact one — past the 10⁻¹² margin its
    conversion adds. The ledger composes pairwise (spent, next charge), as here."""
    acc = RDPAccountant(dp.ApproxDP(10, 1e-6))
    big = RDPCharge(tuple(1.0 for _ in FILTER_ORDERS), 1e-9)
    tiny = RDPCharge(tuple(2.0**-55 for _ in FILTER_ORDERS), 2.0**-90)
    total = acc.compose([acc.empty(), big])
    n = 20_000
    for _ in range(n):
        total = acc.compose([total, tiny])
    exact = 1 + n * Fraction(2) ** -55
    assert all(Fraction(v) >= exact for v in total.values)
    assert Fraction(total.delta0) >= Fraction(1e-9) + n * Fraction(2) ** -90
    # at most one ulp of the total per charge above it (relative n·2⁻⁵², here 4·10⁻¹²)
    assert all(Fraction(v) - exact <= n * Fraction(2) ** -52 for v in total.values)


def test_exact_sums_stay_exact() -> None:
    """Charges whose sums are exact floats compose to exactly those sums (no ulp added)."""
    acc = RDPAccountant(dp.ApproxDP(10, 1e-6))
    half = RDPCharge(tuple(0.5 for _ in FILTER_ORDERS), 0.0)
    total = acc.compose([half, half, half])
    assert total.values == tuple(1.5 for _ in FILTER_ORDERS) and total.delta0 == 0.0
