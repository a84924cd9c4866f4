"""Review 34a: the learning, selection and quantile mechanisms, end to end, under an adversarial analyst.

Scope: quantiles (single, per group, public and private keys, the rank-window and whole-list paths), the
robust median (generalized PTR), interior point, threshold and rectangle learning, top-k (every method)
and PATE, with what ``explain()``, ``cost()`` and ``ci=`` say about them. The analyst picks every
argument (bounds, budgets, scores, k, quantile levels) and catches every exception. Each test is an attack
that broke, kept with its fix: it fails if the defence regresses. D and D′ are neighbouring datasets (D′
adds one privacy unit) where the attack is data-dependent.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from dpframe_quantiles.em import joint_quantiles, scale

import dpframe as dp
import dpframe.interactive.ptr as ptr
from dpframe.interactive.ptr import robust_median
from dpframe.noise import SeededRandomSource


def _visits() -> pl.DataFrame:
    rows = [(u, c, float(u % 7)) for u in range(300) for c in ["a", "b", "c"][: 1 + (u % 3 != 0) + (u % 3 == 2)]]
    return pl.DataFrame(rows, schema=["user", "city", "x"], orient="row")


def _topk_session(backend: str = "polars") -> dp.Session:
    return dp.Session({"v": _visits()}, privacy_unit=dp.PrivacyUnit("user", max_rows=3),
                      budget=dp.ApproxDP(10**6, Fraction(1, 2)), seed=3, backend=backend)


def _topk(method: str) -> tuple[dict[str, Any], dp.Budget]:
    """The group-by arguments and a budget each top-k method accepts."""
    if method in ("gumbel", "peeling"):
        return {"keys": ["a", "b", "c"]}, dp.PureDP(1)
    return ({"keys": ["a", "b", "c"]} if method == "tct" else {}), dp.ApproxDP(1, 1e-7)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("method", ["stable", "gumbel"])
@pytest.mark.parametrize("bounds", [(0, 5e-324), (0, 1e-310), (-5e-324, 0)])
def test_a_topk_sum_score_with_subnormal_bounds_runs(backend: str, method: str, bounds: tuple[float, float]) -> None:
    """``top_k(score=dp.sum("x", bounds=(0, 5e-324)))`` put the score on the grid 2^(⌊log₂ 5e-324⌋ − 16) = 2⁻¹⁰⁹⁰;
    the backends scale each value by 2¹⁰⁹⁰ (∞ in float64), so the query was charged, then failed with an
    OverflowError on every dataset (a charged failure from an analyst's parameter), and with
    ``release_scores=True`` ``cost()`` was a raw ``ValueError: math domain error`` (log₂ of the grid unit,
    0.0 as a float). The grid now stops at 2⁻¹⁰²², as the aggregates' sums do (coarser is sound).
    """
    by, budget = _topk(method)
    sess = _topk_session(backend)
    score = dp.sum("x", bounds=bounds)
    cost = sess.table("v").group_by("city", **by).top_k(k=1, score=score, method=method,
                                                        release_scores=True).cost(budget)
    assert cost.epsilon == budget.epsilon
    sess.table("v").group_by("city", **by).top_k(k=1, score=score, method=method).collect(budget)
    assert sess.history()["status"].to_list() == ["committed"]


@pytest.mark.parametrize("method", ["stable", "gumbel", "peeling", "limited_domain", "tct"])
@pytest.mark.parametrize(("bounds", "epsilon"), [((-1e308, 1e308), Fraction(1)), ((0, 1), Fraction(1, 10**310))],
                         ids=["bounds-near-float-max", "tiny-epsilon"])
def test_topk_explain_of_a_scale_beyond_float_is_text_not_an_overflow(method: str, bounds: tuple[float, float],
                                                                       epsilon: Fraction) -> None:
    """``explain``/``cost`` printed the Gumbel scale, sensitivities and PTR noise through ``float()``: a sum
    score bounded near 1e308 (its grid unit 2¹⁰⁰⁷ times 3·2¹⁷ rows) or a budget of ε = 10⁻³¹⁰ gave a raw
    ``OverflowError`` (uncharged, but not a dpframe error). Now such numbers are written out (``3E+310``),
    and the query either plans or is refused with a dpframe error, nothing charged."""
    by, budget = _topk(method)
    budget = dp.PureDP(epsilon) if isinstance(budget, dp.PureDP) else dp.ApproxDP(epsilon, 1e-7)
    sess = _topk_session()
    q = sess.table("v").group_by("city", **by).top_k(k=1, score=dp.sum("x", bounds=bounds), method=method)
    try:
        text = q.explain(budget)
    except dp.DPFrameError:
        with pytest.raises(dp.DPFrameError):
            q.cost(budget)
    else:
        assert "score units" in str(text)
        assert q.cost(budget).epsilon == epsilon
    assert sess.history().is_empty()


@pytest.mark.parametrize("score", [dp.len(), dp.count_units()], ids=["len", "count_units"])
@pytest.mark.parametrize("ptr", ["gaussian", "laplace"])
def test_stable_topk_at_a_tiny_budget_is_a_budget_error(score: dp.Measure, ptr: str) -> None:
    """StableTopK converts (ε, δ) to a zCDP ρ for its Gaussian PTR; at ε = 10⁻³⁰ that ρ rounds to 0 and
    ``cost()`` divided by it: a raw ``ZeroDivisionError``. Now a BudgetError while planning, uncharged."""
    sess = _topk_session()
    q = sess.table("v").group_by("city").top_k(k=1, score=score, ptr=ptr)
    for run in (q.cost, q.explain, q.collect):
        with pytest.raises(dp.BudgetError):
            run(dp.ApproxDP(Fraction(1, 10**30), 1e-7))
    assert sess.history().is_empty()


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("bounds", [(0.5, 1000.5), (-10.5, 10.5), (2.5, 9.5)])
def test_robust_median_of_a_whole_number_column_with_fractional_bounds_is_unbiased(
        backend: str, bounds: tuple[float, float]) -> None:
    """``robust_median`` coded a whole-number column from ``int(lower)`` (the backends' integer codes take
    whole-number ends) but decoded from ``lower``: with ``bounds=(0.5, 1000.5)`` every released median was
    0.5 too high, with ``(-10.5, 10.5)`` 0.5 too low — on every dataset, whatever the noise. Whole-number
    columns now use the whole numbers inside the bounds as their ends."""
    data = pl.DataFrame({"x": [-3] * 10 + [6] * 4000})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-5), seed=4,
                      backend=backend)
    median = robust_median(sess.table("t"), "x", bounds=bounds).collect(dp.ApproxDP(1, 1e-7))
    assert median is not None and abs(median - 6) < 0.1


def test_robust_median_refuses_a_decimal_column_and_bounds_without_two_whole_numbers() -> None:
    """A Decimal column was coded truncated toward zero (5.5 → 5) while the quantiles refuse it: now a
    SchemaError, as theirs; whole-number bounds holding one whole number, (0.5, 1.5), a BoundsError. Free."""

    data = pl.DataFrame({"d": pl.Series([Decimal("5.5")] * 50, dtype=pl.Decimal(10, 2)), "x": list(range(50))})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-5), seed=4)
    with pytest.raises(dp.SchemaError, match="cast"):
        robust_median(sess.table("t"), "d", bounds=(0, 100))
    with pytest.raises(dp.BoundsError, match="two whole numbers"):
        robust_median(sess.table("t"), "x", bounds=(0.5, 1.5))
    assert sess.history().is_empty()


def test_robust_median_codes_stay_under_the_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The distance to instability pads the sorted codes with M = ⌊(upper − lower)/2^g⌋ above; its sensitivity
    bound (m) needs every code ≤ M. With ``bounds=(2⁻⁶⁰, 1)`` the float difference 1 − 2⁻⁶⁰ rounds to 1.0,
    so a value at the upper bound was coded M + 1 = 65536 above the padding 65535. Codes are now clipped to M.
    """
    seen: list[int] = []
    original = ptr.instability_distance

    def spy(codes: Any, top: int, m: int, beta: int) -> int:
        seen.append(int(codes.max()) - top)
        return original(codes, top, m, beta)
    monkeypatch.setattr(ptr, "instability_distance", spy)
    data = pl.DataFrame({"x": [1.0] * 10 + [0.5] * 5})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-5), seed=4)
    ptr.robust_median(sess.table("t"), "x", bounds=(2.0**-60, 1.0)).collect(dp.ApproxDP(1, 1e-7))
    assert seen and max(seen) <= 0


@pytest.mark.parametrize(("score", "says"), [(dp.len(), "≤ 3 rows per unit"),
                                              (dp.count_units(), "every row (count_units")], ids=["len", "count_units"])
def test_topk_and_robust_median_explain_name_the_privacy_unit(score: dp.Measure, says: str) -> None:
    """``explain()`` of a top-k query and of the robust median stated costs and noise but not the unit they
    protect (the ``agg`` and learning queries print ``ContributionBound: unit 'user': ≤ 3 rows per unit``).
    Both now name it; top-k's ``count_units`` says that it bounds nothing (each unit counts once per key)."""
    sess = _topk_session()
    text = str(sess.table("v").group_by("city").top_k(k=1, score=score).explain(dp.ApproxDP(1, 1e-7)))
    assert f"ContributionBound: unit 'user': {says}" in text
    text = robust_median(sess.table("v"), "x", bounds=(0, 10)).explain(dp.ApproxDP(1, 1e-7))
    assert "privacy unit: unit 'user': ≤ 3 rows per unit" in text


@pytest.mark.parametrize("budget", [dp.ApproxDP(200, Fraction(1, 10**320)), dp.ApproxDP(200, Fraction(1, 10**400)),
                                    dp.ApproxDP(10**4, 1e-6)], ids=["delta-subnormal", "delta-below-float", "huge-eps"])
def test_learn_rectangle_rsc_accounting_at_extreme_budgets_plans(budget: dp.Budget) -> None:
    """The RSC bound w = ⌈ln(1/δ̂)/ln(1/(1 − p))⌉ read δ̂ as a float (1/1e-320 = ∞: OverflowError; 10⁻⁴⁰⁰ → 0.0:
    ZeroDivisionError) and p = 1/(1 + e^{ε₀}) overflowed at ε₀ ≈ 10⁴ (OverflowError): ``cost()`` of
    ``learn_rectangle`` raised each raw. ln(1/δ̂) is now exact and ln(1/(1 − p)) = ln(1 + e^{−ε₀}), so the query
    plans (here sequential composition is the cheaper bound) and nothing is charged."""
    data = pl.DataFrame({"x": [i / 100 for i in range(100)] * 3, "x2": [0.5] * 300, "y": [i % 2 for i in range(300)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10**9, 0.5), seed=0)
    q = sess.table("t").learn_rectangle(["x", "x2"], label="y", bounds={"x": (0, 1), "x2": (0, 1)})
    assert q.cost(budget).epsilon == budget.epsilon
    assert "accounting: sequential" in str(q.explain(budget))
    assert sess.history().is_empty()


@pytest.mark.parametrize("make", [
    lambda t: t.interior_point("x", bounds=(0, 1), beta=5e-324),
    lambda t: t.interior_point("x", bounds=(0, 1), beta=1e-310),
    lambda t: t.learn_threshold("x", label="y", bounds=(0, 1), beta=5e-324),
    lambda t: t.learn_threshold("x", label="y", bounds=(0, 1), xi=5e-324),
    lambda t: t.learn_rectangle(["x", "x2"], label="y", bounds={"x": (0, 1), "x2": (0, 1)}, beta=5e-324),
], ids=["ip", "ip-1e-310", "threshold", "threshold-xi", "rectangle"])
def test_a_subnormal_failure_probability_is_an_argument_error(make: Any) -> None:
    """``beta=5e-324`` (or ``xi``) passed the (0, 1/2] check, then the row requirements divided by it in floats
    (|X|/β = ∞): ``cost()`` raised a raw OverflowError / ZeroDivisionError. β and ξ now lie in [10⁻¹⁰⁰, …]:
    an ArgumentError naming the argument, when the query is built, nothing charged."""
    data = pl.DataFrame({"x": [i / 300 for i in range(300)], "x2": [0.5] * 300, "y": [i % 2 for i in range(300)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-5), seed=0)
    with pytest.raises(dp.ArgumentError, match=r"(beta|xi) must be in \[1e-100"):
        make(sess.table("t")).cost(dp.ApproxDP(1, 1e-6))
    assert sess.history().is_empty()


def _em_law(codes: Any, size: int, q: Fraction, epsilon: Fraction) -> Any:
    """The exponential mechanism's exact law of one quantile (the module docstring of ``dpframe_quantiles.em``)."""
    a, b, n = q.numerator, q.denominator, len(codes)
    z = np.arange(size)
    low, high = np.searchsorted(codes, z, side="left"), np.searchsorted(codes, z, side="right")
    u = -np.maximum(np.maximum(b * low - a * n, a * n - b * high), 0)
    w = np.exp(float(scale(q, epsilon, 1)) * (u - u.max()))
    return w / w.sum()


@pytest.mark.slow
def test_quantile_sampler_draws_the_em_law_and_neighbours_stay_within_e_epsilon() -> None:
    """Statistical check on a small neighbouring pair (D = {3, 5, 5, 7}, D′ = D + {15}, 16 codes, ε = 1): the
    exact sampler's draws (10,000 identical groups: one independent draw each) follow the EM's exact law
    (total variation < 0.03), that law moves by ≤ e^ε between D and D′, and so do the empirical marginals
    of a joint release of three quantiles (3 levels of ε/2 each would be 3ε/2: the tree composes to
    2 levels, ε)."""
    pair = [np.array([3, 5, 5, 7], dtype=np.int64), np.array([3, 5, 5, 7, 15], dtype=np.int64)]
    size, eps, draws = 16, Fraction(1), 10_000
    for q in (Fraction(1, 2), Fraction(1, 4)):
        laws = [_em_law(d, size, q, eps) for d in pair]
        assert np.abs(np.log(laws[0] / laws[1])).max() <= float(eps) + 1e-9
        for d, law in zip(pair, laws, strict=True):
            out = joint_quantiles([d] * draws, size, (q,), eps, 1, SeededRandomSource(7))[:, 0]
            assert 0.5 * np.abs(np.bincount(out, minlength=size) / draws - law).sum() < 0.03
    qs = (Fraction(1, 4), Fraction(1, 2), Fraction(3, 4))
    joint = [joint_quantiles([d] * draws, size, qs, eps / 2, 1, SeededRandomSource(9)) for d in pair]
    for j in range(3):
        p, p2 = (np.bincount(o[:, j], minlength=size) / draws for o in joint)
        common = (p > 0.02) & (p2 > 0.02)
        assert np.abs(np.log(p[common] / p2[common])).max() <= float(eps) + 0.15


@pytest.mark.parametrize("lam", [1e-300, 2**31, 1e300, 2**70])
def test_a_topk_regularizer_beyond_int64_is_rounded_or_refused_uncharged(lam: float) -> None:
    """StableTopK's Alg 1 scales its int64 gap utilities by λ's numerator and denominator: ``lam=1e-300``
    (1/10³⁰⁰) or ``lam=1e300`` was accepted, charged, then failed with an OverflowError on every dataset.
    λ is now rounded to a denominator ≤ 2³¹ (public: any λ keeps the privacy) and refused above 2³¹."""
    sess = _topk_session()
    q = sess.table("v").group_by("city").top_k(k=2, lam=lam) if lam <= 2**31 else None
    if q is None:
        with pytest.raises(dp.BoundsError, match="lam"):
            sess.table("v").group_by("city").top_k(k=2, lam=lam)
        assert sess.history().is_empty()
        return
    q.collect(dp.ApproxDP(5, 1e-6))
    assert sess.history()["status"].to_list() == ["committed"]


@pytest.mark.parametrize("epsilon", [Fraction(1, 10**15), Fraction(1, 10**30)])
def test_robust_median_noise_beyond_the_sampler_is_refused_uncharged(epsilon: Fraction) -> None:
    """At ε = 10⁻³⁰ the AboveThreshold noise (scale 4m/ε_test) is beyond the exact sampler: the query was
    charged, then failed with a ValueError. At ε = 10⁻¹⁵ the test's noise is drawable but the release's
    (β/ε_rel) is not, so the outcome depended on the data: ⊥ (committed) when no proposal passed, a charged
    failure when one did. Both are now refused while planning, nothing charged."""
    sess = dp.Session({"t": pl.DataFrame({"u": list(range(200)), "x": [50.0 + i % 7 for i in range(200)]})},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 0.5), seed=0)
    q = robust_median(sess.table("t"), "x", bounds=(0, 100))
    for run in (q.cost, q.explain, q.collect):
        with pytest.raises(dp.BudgetError, match="exact sampler"):
            run(dp.ApproxDP(epsilon, 1e-7))
    assert sess.history().is_empty()
