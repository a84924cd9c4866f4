"""Review 36b: every privacy claim and cost formula, re-derived independently, at the parameters the analyst picks.

Scope: the mechanism plugins of the registry (aggregates, partition selection, quantiles, histogram) and the query
families and interactive mechanisms around them (top-k, PATE, bounds, interior point, threshold and rectangle
learning, sparse vector, PTR / robust median, gated release, the individual filter, target charging), with the
accountant conversions they rely on (zCDP ↔ (ε, δ), RDP, PLD, subsampling, composition). Each cost was derived
by hand (or with mpmath) and compared with what ``cost()`` / ``explain()`` / the charged curves say at edge
parameters. Each test is a defect that broke, kept with its fix: it fails if the defence regresses. Expected
values are exact rationals derived in each docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting
from dpframe.accounting import curves

THIRD = Fraction(1, 3)
"""An ε whose nearest float (0.333…3148) is below it: a curve given ``float(ε)`` under-reports."""

_RECORDED = ("exponential", "pure", "discrete_laplace", "discrete_gaussian", "sparse_vector", "gaussian_sparse_vector")


@pytest.fixture
def handed() -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """Every call to a curve constructor (name and positional arguments) while the test plans its queries."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    saved = {name: getattr(curves, name) for name in _RECORDED}

    def recording(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, args))
            return original(*args, **kwargs)
        return record

    for name, original in saved.items():
        setattr(curves, name, recording(name, original))
        setattr(accounting, name, getattr(curves, name))
    try:
        yield seen
    finally:
        for name, original in saved.items():
            setattr(curves, name, original)
            setattr(accounting, name, original)


def _session(budget: dp.Budget, unit: dp.PrivacyUnit | None = None) -> dp.Session:
    rows = 400
    data = pl.DataFrame({"u": range(rows), "x": [float(i % 97) for i in range(rows)],
                         "z": [float(i % 13) for i in range(rows)], "y": [int(i % 97 < 40) for i in range(rows)],
                         "k": [i % 97 for i in range(rows)]})
    return dp.Session({"t": data}, privacy_unit=unit or dp.PrivacyUnit("u"), budget=budget, accountant="rdp", seed=0)


def _args(seen: list[tuple[str, tuple[Any, ...]]], name: str) -> list[tuple[Any, ...]]:
    found = [args for n, args in seen if n == name]
    assert found, f"no {name} curve was built"
    return found


def test_plugin_curves_round_epsilon_up_and_noise_scales_down_in_rdp_sessions(
        handed: list[tuple[str, tuple[Any, ...]]]) -> None:
    """``docs/guarantees.md`` (float safety): an ε, δ or ρ handed to a privacy curve is rounded *up* to a float —
    an RDP/PLD session charges the curves, so a curve built from ``float(ε)`` (round to nearest) under-reports
    whenever the float lies below ε. The aggregates and top-k plugins round up; the quantile plugin
    (``acc.exponential(float(ε₀))``), ``frame.bounds``, the learning queries (the gate's discrete Laplace scale, the
    interior point's exponential and binary-search curves, threshold and rectangle learning) and the histogram
    plugin did not. At ε = 1/3 every one of them charged ε₀ = 0.33333333333333331 < 1/3 (by 1.9e-17). Derivations:

    * quantile, one q: one level, ε₀ = 1/3; ``bounds`` at ε = 2/3: two EM quantiles at ε₀ = ε/2 = 1/3;
    * interior point (row unit, ε = 7/10): gate ε_c = 7/100, scale 1/ε_c = 100/7 (a float above it is a smaller
      ε), the EM at 9/10·7/10 = 63/100; binary search over the 101 codes of an integer column in (0, 100)
      (b = 7 rounds) at 63/100: scale b·Δ'/ε = 700/63 = 100/9;
    * threshold (positive="auto"): direction EM at 7/100, interior point at 8/10·7/10 = 14/25;
    * histogram: pure ε = Δ/t = 1/3; zCDP ρ = 1/3, Δ = 1: σ² = 3/2, and the σ handed over must satisfy σ² ≤ 3/2.
    """
    sess = _session(dp.ApproxDP(100, 1e-5))
    t = sess.table("t")
    t.agg(dp.quantile("x", 0.5, bounds=(0, 100))).cost(dp.PureDP(THIRD))
    assert all(Fraction(a[0]) >= THIRD for a in _args(handed, "exponential"))
    handed.clear()
    t.bounds("x").cost(dp.PureDP(THIRD * 2))
    assert all(Fraction(a[0]) >= THIRD for a in _args(handed, "exponential"))

    handed.clear()
    seven = Fraction(7, 10)
    t.interior_point("x", bounds=(0, 100), method="exponential").cost(dp.PureDP(seven))
    assert all(Fraction(a[0]) <= Fraction(100, 7) for a in _args(handed, "discrete_laplace"))
    assert all(Fraction(a[0]) >= seven * 9 / 10 for a in _args(handed, "exponential"))
    handed.clear()
    t.interior_point("k", bounds=(0, 100), method="binary_search").cost(dp.PureDP(seven))
    scales = sorted(Fraction(a[0]) for a in _args(handed, "discrete_laplace"))
    assert scales[0] <= Fraction(100, 9) and scales[-1] <= Fraction(100, 7)
    handed.clear()
    t.learn_threshold("x", label="y", bounds=(0, 100)).cost(dp.PureDP(seven))
    eps = sorted(Fraction(a[0]) for a in _args(handed, "exponential"))
    assert eps[0] >= Fraction(7, 100) and eps[-1] >= Fraction(14, 25)
    handed.clear()
    t.learn_rectangle(["x", "z"], label="y", bounds={"x": (0, 100), "z": (0, 20)}).cost(dp.PureDP(seven))
    assert all(Fraction(a[0]) <= Fraction(100, 7) for a in _args(handed, "discrete_laplace"))

    handed.clear()
    hist = dp.measure("histogram", "x", bounds=(0, 100), edges=(0, 50, 100))
    t.agg(hist).cost(dp.PureDP(THIRD))
    assert all(Fraction(a[0]) >= THIRD for a in _args(handed, "pure"))
    t.agg(hist).cost(dp.ZCDP(THIRD))
    sigma, sensitivity = _args(handed, "discrete_gaussian")[-1][:2]
    assert Fraction(sigma) ** 2 <= Fraction(3, 2) and sensitivity == 1


def test_sparse_vector_curves_round_epsilon_up_and_sigma_down(handed: list[tuple[str, tuple[Any, ...]]]) -> None:
    """The sparse vector's curves in an RDP session: the Laplace stream handed ``float(ε₁)``, ``float(ε₂)`` and
    ``float(ε₃)`` (nearest), the Gaussian stream σ = √float(σ²) (nearest: above the true σ by up to an ulp, a
    smaller ρ). Derivation: ε = 1, c = 1: ``svt_split`` gives ε₁ = 349/903, ε₂ = 554/903 (both round down to a
    float); release ε₃ = 1/3. Gaussian, ρ = 1/3, c = 1, Δ = max_rows = 1: σ₁² = (1 + c)/(2ρ) = 3, so the σ₁
    handed over must satisfy σ₁² ≤ 3 and σ₂ = 2σ₁ (exact in floats)."""
    sess = _session(dp.ApproxDP(100, 1e-5))
    sess.sparse_vector(10, 1, dp.PureDP(1), release=dp.PureDP(THIRD)).close()
    eps1, eps2 = _args(handed, "sparse_vector")[0][:2]
    assert Fraction(eps1) >= Fraction(349, 903) and Fraction(eps2) >= Fraction(554, 903)
    assert Fraction(_args(handed, "pure")[-1][0]) >= THIRD
    sess.sparse_vector(10, 1, dp.ZCDP(THIRD), noise="gaussian").close()
    sigma1, sigma2 = _args(handed, "gaussian_sparse_vector")[0][:2]
    assert Fraction(sigma1) ** 2 <= 3 and sigma2 == 2 * sigma1


def test_tct_top_k_is_calibrated_at_or_below_the_charged_delta_and_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    """``method="tct"`` top-k is charged its query budget (ε, δ) as it stands, and calibrated by
    ``calibrate.tct_plan``: the largest ε_c whose TCT channel (k hits of 2ε_c-DP calls, its ε' found in floats)
    fits. It planned the channel at ``float(δ)`` — rounded to nearest, so above δ for δ = 10⁻⁵ (the float
    1.0000000000000000818e-05) — and accepted an ε_c whose float ε' was ≤ ``float(ε)``, with no margin (for
    ε = 1/10 the float 0.1 is above 1/10): the release then held at (ε', float(δ)) while (ε, δ) was charged.
    ``sess.target_charging`` (the same channel) plans at ``down(δ)`` and charges ``round_up(ε')`` (a 10⁻¹²
    margin); top-k now does the same. The channel search is replaced by a stub here: it records the δ it is
    planned at and fits for every ε_c ≤ 0.05 whose budget is at least the float 0.1 — which fits ε = 1/10 only
    if the float rounding is ignored. (Review 36c: the search checks the channel at the budget itself,
    ``calibrate.within(ε)``, the largest float whose ``round_up`` is ≤ ε.)"""
    from dpframe_topk import calibrate

    from dpframe.interactive.tct import ChannelPlan

    delta = Fraction(1, 10**5)
    assert Fraction(float(delta)) > delta and Fraction(0.1) > Fraction(1, 10)
    seen: list[float] = []

    def channel(notion: str, k: int, eps_c: float, first: float, d: float) -> ChannelPlan | None:
        seen.append(d)
        return ChannelPlan(10, d / 2, first) if eps_c <= 0.05 and first >= 0.1 else None

    monkeypatch.setattr(calibrate, "tct_channel", channel)
    calibrate.tct_plan.cache_clear()
    assert calibrate.tct_plan("approx", Fraction(1, 10), delta, 2) is None
    assert seen and all(Fraction(d) <= delta for d in seen)
    calibrate.tct_plan.cache_clear()
    assert calibrate.tct_plan("approx", Fraction(2, 10), delta, 2) is not None


def test_the_quantile_utility_is_within_its_claimed_epsilon_on_every_small_neighbour_pair() -> None:
    """Checked sound (no defect): the EM quantile's tie-aware utility u(z) = −max(b·L(z) − a·n, a·n − b·C(z), 0)
    for q = a/b at scale s = ε/(2·m·max(a, b − a)) (``dpframe_quantiles.em``) is a novel score, so its claim is
    checked exactly, not statistically: on every multiset D of ≤ 3 codes in a domain of 5 and every D′ = D plus
    1…m codes (m = ``max_rows`` = 1, 2), for q ∈ {0, 1/3, 1/2, 2/3, 1}, the largest |ln P_D(z) − ln P_D′(z)|
    over outputs z, computed from the exact pmf ∝ exp(s·u), is ≤ ε (0.81 at ε = 1: the EM's factor 2 is slack
    on these small domains, and the score's sensitivity m·max(a, b − a) is reached)."""
    from itertools import combinations_with_replacement

    import numpy as np
    from dpframe_quantiles.em import _utility, scale

    size, eps = 5, Fraction(1)
    z = np.arange(size)

    def log_pmf(data: tuple[int, ...], q: Fraction, m: int) -> Any:
        x = np.array(data, dtype=np.int64)
        low, high = (x[None, :] < z[:, None]).sum(1), (x[None, :] <= z[:, None]).sum(1)
        a, b = q.numerator, q.denominator
        w = float(scale(q, eps, m)) * _utility(a, b, a * x.size, low, high).astype(np.float64)
        return w - np.logaddexp.reduce(w)

    worst = 0.0
    for m in (1, 2):
        for q in (Fraction(0), Fraction(1, 3), Fraction(1, 2), Fraction(2, 3), Fraction(1)):
            for n in range(4):
                for data in combinations_with_replacement(range(size), n):
                    base = log_pmf(data, q, m)
                    for extra in range(1, m + 1):
                        for added in combinations_with_replacement(range(size), extra):
                            gap = float(np.abs(base - log_pmf(tuple(sorted(data + added)), q, m)).max())
                            worst = max(worst, gap)
    assert 0.5 * float(eps) < worst <= float(eps) + 1e-9
