"""Review 38 (lead): the robust median's test threshold at a δ far below the float range.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import polars as pl

import dpframe as dp
from dpframe.interactive.ptr import robust_median


def _exact_log_tail(scale: Fraction, k: int) -> Decimal:
    """Log P[Z ≥ k] of a discrete Laplace Z with scale λ, in 60 digits: −k/λ − log(1 + e^{−1/λ})."""
    lam = Decimal(scale.numerator) / Decimal(scale.denominator)
    return -Decimal(k) / lam - (1 + (-1 / lam).exp()).ln()


def test_the_robust_median_threshold_covers_delta_at_a_tiny_delta() -> None:
    """PTR's test threshold t is the smallest with J·(P[ν ≥ ⌈t/2⌉] + P[−ρ ≥ ⌈t/2⌉]) ≤ δ, checked in logs.

    The check added an absolute 10⁻⁹ to the float log of the left side: at δ = 42·2^−98,965,002 (log δ ≈
    −6.9·10⁷) the float logs err by ~10⁻⁸ and the noise scales (m = 549,637 rows, ε = 0.0093) make the
    union bound move by only ~10⁻¹¹ per step of t, so the t chosen let the union bound exceed δ by a relative
    3·10⁻⁸ (exact arithmetic below). The margin is now relative to |log δ| as well.
    """
    m, eps, r, e = 549_637, Fraction(93, 10_000), 42, 98_965_002
    sess = dp.Session({"t": pl.DataFrame({"u": [1], "x": [1.0]})}, privacy_unit=dp.PrivacyUnit("u", max_rows=m),
                      budget=dp.ApproxDP(1, 1e-6))
    median = robust_median(sess.table("t"), "x", (0, 1))
    t, rho_scale, nu_scale = median.threshold(eps, Fraction(r, 2**e))
    with localcontext() as ctx:
        ctx.prec = 60
        a, b = _exact_log_tail(nu_scale, (t + 1) // 2), _exact_log_tail(rho_scale, (t + 1) // 2)
        top = max(a, b)
        union = Decimal(len(median.proposals)).ln() + top + ((a - top).exp() + (b - top).exp()).ln()
        assert union <= Decimal(r).ln() - e * Decimal(2).ln()


