"""Review 37d: directed rounding on every privacy path left by review 37b, and subnormal δ outside TCT.

Scope: every ``float(·)`` of an ε, ρ, δ, scale or σ in ``dpframe/`` and ``plugins/`` (the rule: an ε or ρ handed
to a curve or a calibration is rounded up, a δ down, with ``dpframe.budgets.up`` / ``down``); the duplicate
Fraction ``sqrt_down`` of ``plugins/dpframe_topk/calibrate.py`` (now ``root_down``, a view of
``budgets.sqrt_down``); the stable and limited-domain top-k and partition selection at a subnormal δ
(below 2.2e-308), checked against 60-digit decimal values.

Findings: early stopping's cells (``stopping_cells``), the TCT channel's composition and q, the CKS20
zCDP → (ε, δ) search (``zcdp_log_delta``), Poisson amplification (``charge_plan``) and the limited-domain
step ε (``ld_step_epsilon``) read their exact ε/ρ as ``float(·)``, rounded to nearest: float(1/3) < 1/3 (an
ε below the exact one composed) and float(1/(10⁶ + 1)) > 1/(10⁶ + 1) (a δ above the share). Each value was
one ulp off and every result carries a relative margin of ≥ 10⁻¹² (``round_up``, ``_Q_SLACK``, the 10⁻⁹ of
``optimal_epsilon``), so no released guarantee was exceeded; the inputs are now directed. At a subnormal δ
the three mechanisms stay within their δ (log-domain calibration; ``optimal_delta`` rounds up an ulp): no
refusal is needed there.
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from dpframe_topk import calibrate

import dpframe as dp
from dpframe import budgets
from dpframe.accounting import accountants
from dpframe.budgets import sqrt_down
from dpframe.interactive import stopping, tct

from .test_review37b import PREC, _dec, kov_delta

THIRD = Fraction(1, 3)                        # its nearest float is below it
TINY = Fraction(1, 10**6 + 1)                 # its nearest float is above it
SUBNORMAL = Fraction(1, 10**320)


def test_the_chosen_values_round_the_wrong_way() -> None:
    assert Fraction(float(THIRD)) < THIRD and Fraction(float(TINY)) > TINY


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    real = getattr(module, name)

    def spy(*args: Any) -> Any:
        calls.append(args)
        return real(*args)
    monkeypatch.setattr(module, name, spy)
    return calls


def test_stopping_cells_compose_epsilon_up_and_delta_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: 20 steps of ε = 1/3 at δ = 1/(10⁶ + 1): the cell was the optimal composition of float(1/3) < 1/3
    at float(δ) > δ. Now of up(ε) at down(δ)."""
    calls = _spy(monkeypatch, stopping, "optimal_epsilon")
    stopping.stopping_cells(20, dp.PureDP(THIRD), delta=TINY, stops=[20])
    (k, eps, delta), = calls
    assert Fraction(eps) >= THIRD and Fraction(delta) <= TINY


def test_tct_channel_composes_epsilon_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: a channel of ε = 1/3 composed n calls of float(1/3) < 1/3 and took q at it (above the exact q,
    which falls with ε). Now up(1/3): every composed ε ≥ 1/3 and the channel's q ≤ 1/(e^{1/3} + 1)."""
    calls = _spy(monkeypatch, tct, "optimal_epsilon")
    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(100, Fraction(1, 1000)))
    ch = sess.target_charging(epsilon=THIRD, max_hits=2, delta=Fraction(1, 10**6))
    assert calls and all(Fraction(eps) >= THIRD for _, eps, _ in calls)
    with localcontext() as ctx:
        ctx.prec = PREC
        assert _dec(ch.q * tct._Q_SLACK) <= 1 / (_dec(THIRD).exp() + 1)     # the tail's q: below the exact one


def test_zcdp_conversion_reads_rho_up_and_epsilon_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: the CKS20 search read ρ = 1/3 as float(1/3) < ρ (δ grows with ρ: an under-reported δ). Now up(ρ);
    an ε whose nearest float is above it is read down (δ falls with ε)."""
    calls = _spy(monkeypatch, budgets, "_at_optimal_order")
    budgets.zcdp_log_delta(THIRD, 3 + TINY)
    (rho, eps), = calls
    assert Fraction(rho) >= THIRD and Fraction(eps) <= 3 + TINY


def test_amplification_reads_epsilon_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: Poisson amplification of a cost ε = 1/3 computed log(1 + γ(e^ε − 1)) at float(1/3) < 1/3."""
    calls = _spy(monkeypatch, accountants, "amplified_epsilon")
    acc = accountants.BasicAccountant(dp.PureDP(10))
    charged = acc.charge_plan(dp.PureDP(THIRD), None, 0.5)
    (eps, rate), = calls
    assert Fraction(eps) >= THIRD and charged.epsilon >= Fraction(math.log1p(0.5 * math.expm1(1 / 3)))  # type: ignore[union-attr]


def test_limited_domain_reads_delta_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: δ = 2·10⁻⁶ gives the composition δ_comp = (δ/2)/(1 + δ/2) = 1/(10⁶ + 1), read as float(·) > it."""
    calls = _spy(monkeypatch, calibrate, "optimal_epsilon")
    calibrate.ld_step_epsilon(Fraction(1), Fraction(2, 10**6), 5)
    assert calls and all(Fraction(d) <= TINY for _, _, d in calls)


# --------------------------------------------------------------------------- one square root (finding: duplication)

@pytest.mark.parametrize("x", [Fraction(9, 4), THIRD, Fraction(8, 10**6 + 1), Fraction(1, 10**40),
                               Fraction(1, 3 * 2**1074), Fraction(10**300 + 1)])
def test_root_down_is_budgets_sqrt_down(x: Fraction) -> None:
    """The top-k root is the budgets' one as a Fraction: ≤ √x, the next float above it is not (the old 10⁻¹⁵
    grid gave 0 below x = 10⁻³⁰, an EM with ε = 0 at ρ = 10⁻⁴⁰)."""
    r = calibrate.root_down(x)
    assert r == Fraction(sqrt_down(x)) and r * r <= x < Fraction(math.nextafter(float(r), math.inf)) ** 2


# --------------------------------------------------------------------------- subnormal δ: sound without a refusal

def test_limited_domain_fits_a_subnormal_delta() -> None:
    """ld_step_epsilon at δ = 10⁻³²⁰: the pure route's steps·ε' under the exact optimal composition stays within
    δ_comp (the float δ is down(δ_comp) and optimal_delta rounds up an ulp)."""
    for steps, eps in ((5, Fraction(40)), (20, Fraction(300))):
        e = calibrate.ld_step_epsilon(eps, SUBNORMAL, steps)
        half = SUBNORMAL / 2
        slack = Fraction((steps + 1) * math.log1p(budgets.up(half))) * Fraction(10**9 + 1, 10**9)
        assert e > 0
        assert kov_delta(steps, _dec(e), _dec(eps - slack))[1] <= _dec(half / (1 + half))


def test_stable_topk_fits_a_subnormal_delta() -> None:
    """Stable top-k (Gaussian PTR) at δ_t = δ' = 10⁻³²⁰: P[Z > T] ≤ e^{−T²/(2σ²)} ≤ δ_t and the CKS20 conversion
    of the ρ it plans fits ε at δ' at some order α (60 digits)."""
    with localcontext() as ctx:
        ctx.prec = PREC
        rho = budgets.zcdp_rho(Fraction(1), SUBNORMAL)
        assert rho > 0
        plan = calibrate.stable_plan_zcdp(rho, SUBNORMAL, Fraction(1))
        assert (-Decimal(plan.shift) ** 2 / (2 * _dec(plan.ptr_scale))).exp() <= _dec(SUBNORMAL)
        r, best = _dec(rho), Decimal(0)
        for i in range(1, 4000):
            a = 1 + Decimal(10) ** (Decimal(i - 1000) / 500)        # α − 1 from 10⁻² to 10⁶
            log_d = (a - 1) * (a * r - 1) - (a - 1).ln() + a * (1 - 1 / a).ln()
            best = min(best, log_d)
        assert best <= _dec(SUBNORMAL).ln()


def test_partition_selection_charges_a_subnormal_delta() -> None:
    """End to end: a grouped count at δ = 10⁻³²⁰ plans a threshold from the exact logs (review 37b checks the
    tail exactly down to 10⁻⁴⁰⁰), runs, and charges exactly its budget."""
    data = pl.DataFrame({"u": list(range(200)), "c": [str(i % 3) for i in range(200)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, Fraction(1, 10**300)),
                      seed=0)
    sess.table("t").group_by("c").agg(dp.len()).collect(dp.ApproxDP(5, SUBNORMAL))
    assert sess.spent().delta == SUBNORMAL  # type: ignore[union-attr]
    assert sys.float_info.min > float(SUBNORMAL) > 0
