"""Gaussian sparse vector (thesis Ch. 7 with digest 004's corrections): the moment bound against oracle
O-16 and brute force, the RDP curve against hand formulas and against the exact Rényi divergences of
small discrete Gaussian SVTs (c = 1 unbounded on nonnegative queries, c = 1, 2 length-capped), the
stream's law, and bad input (nothing charged)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from scipy import integrate, special, stats

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting import curves
from dpframe.accounting.numerics import svt as svt_math
from dpframe.budgets import sqrt_down

ORDERS = [1.5, 2.0, 4.0, 8.0, 16.0]


def _log_pmf(s: float, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Discrete Gaussian N_Z(0, s²) on [−r, r] (the mass left out, < e^{−r²/2s²}·…, is far below 1e−15)."""
    x = np.arange(-r, r + 1)
    lp = -x * x / (2 * s * s)
    return x, lp - special.logsumexp(lp)


def _log_tail(s: float, r: int) -> tuple[int, np.ndarray]:
    """log P[ν ≥ m] for m = −r … r + 1 (index m + r)."""
    _, lp = _log_pmf(s, r)
    lt = np.logaddexp.accumulate(lp[::-1])[::-1]
    return r, np.concatenate([lt, [-np.inf]])


def _exact_log_moment(s1: float, s2: float, bar: int, gamma: float) -> float:
    z, lp1 = _log_pmf(s1, int(40 * s1) + 2)
    off, lt = _log_tail(s2, 4000)
    return float(special.logsumexp(lp1 - gamma * lt[bar + z + off]))


# ------------------------------------------------------------------------------------- the moment
def test_oracle_o16_continuous_moment() -> None:
    # O-16 (σ₁ = 1, σ₂ = √3, γ = 2): E_z[E[K|z]²] with E[K|z] = 1/(1 − Φ((T+z)/σ₂))
    for t, expected in ((0.0, 12.9644), (0.5, 38.8064), (1.0, 161.4347)):
        value, _ = integrate.quad(lambda z, t=t: stats.norm.pdf(z) * stats.norm.sf((t + z) / math.sqrt(3)) ** -2,
                                  -40, 40, limit=200)
        assert value == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(("t", "expected"), [(0.0, 12.9644), (0.5, 38.8064), (1.0, 161.4347)])
def test_discrete_moment_approaches_o16(t: float, expected: float) -> None:
    # σ₁ = 300 on the integers is a fine grid for the continuous σ₁ = 1 (threshold T·300)
    s = 300.0
    m = float(np.exp(svt_math.gaussian_svt_log_moments(s, s * math.sqrt(3), math.ceil(t * s), np.array([2.0]))[0]))
    assert m == pytest.approx(expected, rel=3e-3)


@pytest.mark.parametrize(("s1", "bar", "gamma"), [(1.5, 2, 2.0), (1.5, 0, 3.5), (1.0, 5, 1.5), (0.7, -3, 2.5),
                                                 (3.0, 10, 3.0), (0.4, 1, 1.2)])
def test_moment_bound_is_an_upper_bound_and_tight(s1: float, bar: int, gamma: float) -> None:
    exact = _exact_log_moment(s1, 2 * s1, bar, gamma)
    bound = float(svt_math.gaussian_svt_log_moments(s1, 2 * s1, bar, np.array([gamma]))[0])
    assert exact <= bound <= exact + 1e-6


def test_moment_blocks_for_large_sigma_stay_close() -> None:
    # σ₁ = 10⁴: the sum runs over blocks of integers (each bounded above); compare with σ₁ = 10³ scaled
    g = np.array([2.0])
    small = float(svt_math.gaussian_svt_log_moments(1e3, 2e3, 2000, g)[0])
    large = float(svt_math.gaussian_svt_log_moments(1e4, 2e4, 20000, g)[0])
    assert small - 1e-3 <= large <= small + 0.02


def test_moment_refuses_divergent_orders() -> None:
    with pytest.raises(dp.BudgetError):
        svt_math.gaussian_svt_log_moments(1.0, 2.0, 0, np.array([4.0]))


# -------------------------------------------------------------------------------------- the curve
def test_length_capped_curve_by_hand() -> None:
    # σ₁ = 2, σ₂ = 4, Δ = 1, c = 2, k = 10: α(1/8 + 2·4/32) + log(1 + 10 + 45)/(α − 1)
    curve = curves.gaussian_sparse_vector(2.0, 4.0, 1.0, 2, 0.0, max_length=10)
    for a in (2.0, 8.0):
        assert curve.rdp_at([a])[0] == pytest.approx(a * 0.375 + math.log(56) / (a - 1), rel=1e-12)
    c1 = curves.gaussian_sparse_vector(2.0, 4.0, 1.0, 1, 0.0, max_length=100)
    assert c1.rdp_at([3.0])[0] == pytest.approx(3 * 0.25 + math.log(101) / 2, rel=1e-12)
    # c ≥ k: every subset is an output, log 2^k
    assert curves.gaussian_sparse_vector(2.0, 4.0, 1.0, 5, 0.0, max_length=3).rdp_at([2.0])[0] == \
        pytest.approx(2 * (1 / 8 + 5 / 8) + 3 * math.log(2), rel=1e-12)


def test_moment_curve_by_hand() -> None:
    # (7.2) with the digest's factor, minimised over the curve's γ grid, with a brute-force M_γ
    s1, s2, bar = 1.5, 3.0, 2
    curve = curves.gaussian_sparse_vector(s1, s2, 1.0, 1, bar, nonnegative=True)
    gammas = 1 + 3 * svt_math.SVT_GAMMA_FRACTIONS
    er, en = 1 / (2 * s1 * s1), 4 / (2 * s2 * s2)
    for a in (2.0, 6.0):
        hand = min((a - (g - 1) / g) / (a - 1) * er * g * a / (g - 1) + en * a
                   + _exact_log_moment(s1, s2, bar, g) / (g * (a - 1)) for g in gammas)
        assert curve.rdp_at([a])[0] == pytest.approx(hand, rel=1e-8)
    # with a length cap too: the least of both at each order
    both = curves.gaussian_sparse_vector(s1, s2, 1.0, 1, bar, max_length=3, nonnegative=True)
    capped = curves.gaussian_sparse_vector(s1, s2, 1.0, 1, bar, max_length=3)
    assert np.allclose(both.rdp_at(ORDERS), np.minimum(curve.rdp_at(ORDERS), capped.rdp_at(ORDERS)))


def test_non_integer_threshold_acts_as_its_ceiling() -> None:
    a = curves.gaussian_sparse_vector(1.5, 3.0, 1.0, 1, 1.2, nonnegative=True).rdp_at(ORDERS)
    b = curves.gaussian_sparse_vector(1.5, 3.0, 1.0, 1, 2, nonnegative=True).rdp_at(ORDERS)
    assert np.array_equal(a, b)


def test_curve_needs_a_length_or_nonnegative_c1() -> None:
    with pytest.raises(dp.BudgetError, match="max_length"):
        curves.gaussian_sparse_vector(1.0, 2.0, 1.0, 1, 0.0)
    with pytest.raises(dp.BudgetError, match="max_length"):
        curves.gaussian_sparse_vector(1.0, 2.0, 1.0, 2, 0.0, nonnegative=True)
    for bad in (0, -1, curves.MAX_SVT_LENGTH + 1, 2.5, True):
        with pytest.raises(dp.BudgetError, match="max_length"):
            curves.gaussian_sparse_vector(1.0, 2.0, 1.0, 2, 0.0, max_length=bad)  # type: ignore[arg-type]


def test_curve_json_round_trip() -> None:
    curve = curves.gaussian_sparse_vector(1.5, 3.0, 1.0, 1, 2.0, max_length=7, nonnegative=True)
    again = acc.from_json(curve.to_json())
    assert np.array_equal(again.rdp_at(ORDERS), curve.rdp_at(ORDERS))


# --------------------------------------------------------------- exact Rényi divergences of small SVTs
def _divergence(p: np.ndarray, q: np.ndarray, a: float) -> float:
    keep = (p > 0) | (q > 0)
    with np.errstate(divide="ignore"):
        lp, lq = np.log(p[keep]), np.log(q[keep])
    return float(special.logsumexp(a * lp + (1 - a) * lq)) / (a - 1)


def _unbounded_c1_law(prefix: list[int], tail: int, s1: float, s2: float, bar: int, kmax: int) -> np.ndarray:
    """Law of K (first ⊤) for queries prefix + (tail, tail, …), coarsened to {1, …, kmax, > kmax}."""
    z, lp1 = _log_pmf(s1, int(12 * s1) + 2)
    off, lt = _log_tail(s2, 400)

    def above(q: int) -> np.ndarray:          # P[⊤ | z] for a query of value q
        return np.exp(lt[np.clip(bar + z - q + off, 0, len(lt) - 1)])

    p1 = np.exp(lp1)
    out = np.zeros(kmax + 1)
    alive = p1.copy()
    for i, q in enumerate(prefix):
        s = above(q)
        out[i] = float((alive * s).sum())
        alive = alive * (1 - s)
    s = above(tail)
    k = np.arange(kmax - len(prefix))
    out[len(prefix):kmax] = ((alive * s)[None, :] * (1 - s)[None, :] ** k[:, None]).sum(axis=1)
    out[kmax] = float((alive * (1 - s) ** len(k)).sum())
    return out


@pytest.mark.parametrize("bar", [0, 1, 3])
def test_moment_curve_bounds_exact_divergence_of_unbounded_c1_svt(bar: int) -> None:
    # σ₁ = 1, σ₂ = 2, Δ = 1; nonnegative queries, no length cap; the output K is coarsened beyond 4000
    # (post-processing: the coarsened divergence is a lower bound of the stream's, so it must fit the curve)
    s1, s2 = 1.0, 2.0
    bound = curves.gaussian_sparse_vector(s1, s2, 1.0, 1, bar, nonnegative=True).rdp_at(ORDERS)
    worst = np.zeros(len(ORDERS))
    for prefix in ([], [0], [2], [0, 1]):
        for tail_d, tail_e in ((0, 1), (1, 0), (1, 2), (2, 1)):
            for shift in itertools.product((-1, 0, 1), repeat=len(prefix)):
                other = [v + d for v, d in zip(prefix, shift, strict=True)]
                if min(other, default=0) < 0:
                    continue
                p = _unbounded_c1_law(prefix, tail_d, s1, s2, bar, 4000)
                q = _unbounded_c1_law(other, tail_e, s1, s2, bar, 4000)
                for j, a in enumerate(ORDERS):
                    for x, y in ((p, q), (q, p)):
                        worst[j] = max(worst[j], _divergence(x, y, a))
    assert np.all(worst <= bound + 1e-9), (worst, bound)
    assert worst[-1] > 0.2 * bound[-1]   # the check is not vacuous


def _capped_law(values: list[int], s1: float, s2: float, bar: int, c: int) -> dict[tuple[bool, ...], float]:
    """Exact law of the answers of a length-len(values) stream halting at the c-th ⊤."""
    z, lp1 = _log_pmf(s1, int(12 * s1) + 2)
    off, lt = _log_tail(s2, 400)
    out: dict[tuple[bool, ...], float] = {}

    def walk(prefix: tuple[bool, ...], weights: np.ndarray) -> None:
        if sum(prefix) == c or len(prefix) == len(values):
            out[prefix] = float(weights.sum())
            return
        up = np.exp(lt[np.clip(bar + z - values[len(prefix)] + off, 0, len(lt) - 1)])
        walk((*prefix, True), weights * up)
        walk((*prefix, False), weights * (1 - up))

    walk((), np.exp(lp1))
    return out


@pytest.mark.parametrize(("c", "k", "bar"), [(1, 3, 0), (1, 3, 2), (2, 3, 1), (2, 4, 0)])
def test_capped_curve_bounds_exact_divergence(c: int, k: int, bar: int) -> None:
    # σ₁ = 0.8, σ₂ = 1.6 (small: the capped bound is far from vacuous), queries of any sign, per-query ±Δ
    s1, s2 = 0.8, 1.6
    bound = curves.gaussian_sparse_vector(s1, s2, 1.0, c, bar, max_length=k).rdp_at(ORDERS)
    worst = np.zeros(len(ORDERS))
    for values in itertools.product((-1, 1), repeat=k):
        p_law = _capped_law(list(values), s1, s2, bar, c)
        for shift in itertools.product((-1, 1), repeat=k):
            q_law = _capped_law([v + d for v, d in zip(values, shift, strict=True)], s1, s2, bar, c)
            keys = sorted(p_law)
            p = np.array([p_law[o] for o in keys])
            q = np.array([q_law[o] for o in keys])
            for j, a in enumerate(ORDERS):
                worst[j] = max(worst[j], _divergence(p, q, a))
    assert np.all(worst <= bound + 1e-9), (worst, bound)


# ------------------------------------------------------------------------------------------ sessions
def _session(accountant: str | None = "rdp", budget: object = None, max_rows: int = 1) -> dp.Session:
    data = pl.DataFrame({"u": list(range(100)), "g": [i % 10 for i in range(100)],
                         "x": [float(i % 7) - 3 for i in range(100)], "n": [i % 2 for i in range(100)]})
    unit = dp.PrivacyUnit.row() if max_rows == 1 else dp.PrivacyUnit("u", max_rows=max_rows)
    kwargs = {} if accountant is None else {"accountant": accountant}
    return dp.Session({"t": data}, privacy_unit=unit, budget=budget or dp.ApproxDP(50, 1e-6), seed=5, **kwargs)


def _count(sess: dp.Session, g: int | None = None) -> object:
    frame = sess.table("t")
    return (frame if g is None else frame.filter(pl.col("g") == g)).agg(dp.len())


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_session_charges_the_gaussian_curve_before_running(accountant: str) -> None:
    sess = _session(accountant)
    sv = sess.sparse_vector(threshold=12, max_positives=1, budget=dp.ZCDP(0.2), noise="gaussian")
    assert sv.nonnegative and sv.curve is not None
    # reserved at open (before any query ran): the curve's charge, shown by status()
    assert sess.history().height == 1 and "Gaussian sparse vector" in sv.status()
    expected = sess.accountant.charge_plan(dp.ZCDP(0.2), [sv.curve])
    assert np.allclose(sv.charged().values, expected.values)
    # σ₁ = Δ·√((1+c)/(2ρ)) = √5 rounded down (math.sqrt(5) is above √5: a smaller ρ), σ₂ = 2σ₁; T = 12 on counts
    sigma1 = sqrt_down(Fraction(5))
    assert Fraction(sigma1) ** 2 <= 5 < Fraction(math.sqrt(5)) ** 2
    assert sv.curve.spec == {"kind": "gaussian_sparse_vector", "sigma1": sigma1, "sigma2": 2 * sigma1,
                             "sensitivity": 1.0, "max_positives": 1, "threshold": 12.0, "max_length": None,
                             "nonnegative": True}
    answers = []
    while not sv.closed:
        answers.append(sv.test(_count(sess, len(answers) % 10)))   # each group has 10 rows < T
    assert answers[-1] and not any(answers[:-1])
    assert sess.history().height == 1
    assert sess.spent().epsilon == pytest.approx(sess.accountant.report(expected).epsilon)


def test_capped_stream_halts_after_max_length_and_takes_signed_sums() -> None:
    sess = _session()
    sv = sess.sparse_vector(threshold=1000, max_positives=2, budget=dp.ZCDP(0.1), noise="gaussian", max_length=4)
    assert not sv.nonnegative
    query = sess.table("t").agg(dp.sum("x", bounds=(-3, 3)))
    answers = [sv.test(query) for _ in range(4)]
    assert answers == [False] * 4 and sv.closed
    with pytest.raises(dp.DPFrameError, match="closed"):
        sv.test(query)
    # length-capped (Thm 7.2.7): αρ + log(1 + 4 + 6)/(α − 1), ρ = 0.1
    assert sv.curve is not None
    assert sv.curve.rdp_at([2.0])[0] == pytest.approx(0.2 + math.log(11), rel=1e-9)


def test_c1_with_length_is_charged_the_capped_curve_and_takes_sums() -> None:
    sess = _session()
    with sess.sparse_vector(threshold=1000, max_positives=1, budget=dp.ZCDP(0.05), noise="gaussian",
                            max_length=3) as sv:
        assert not sv.nonnegative and sv.curve is not None
        assert sv.curve.rdp_at([4.0])[0] == pytest.approx(0.2 + math.log(4) / 3, rel=1e-9)
        assert sv.test(sess.table("t").agg(dp.sum("x", bounds=(-3, 3)))) is False


def test_gaussian_stream_law_matches_the_declared_noise() -> None:
    # q = count = 100, T = 103: P[⊤] = P[ν − ρ ≥ 3], ρ ~ N_Z(0, 1), ν ~ N_Z(0, 4) (ZCDP(1), c = 1: σ₁² = 1)
    sess = _session(budget=dp.ApproxDP(10**6, 1e-6))
    z, lp1 = _log_pmf(1.0, 40)
    off, lt = _log_tail(2.0, 80)
    expected = float((np.exp(lp1) * np.exp(lt[3 + z + off])).sum())
    n = 300
    hits = 0
    for _ in range(n):
        with sess.sparse_vector(threshold=103, max_positives=1, budget=dp.ZCDP(1), noise="gaussian",
                                max_length=1) as sv:
            hits += sv.test(_count(sess))
    assert abs(hits - n * expected) <= 4.5 * math.sqrt(n * expected * (1 - expected))


def test_laplace_default_unchanged() -> None:
    sess = _session("basic", dp.PureDP(2))
    with sess.sparse_vector(threshold=1000, max_positives=1, budget=dp.PureDP(1)) as sv:
        assert sv.noise == "laplace"
        sv.test(_count(sess))
    assert sess.history().height == 1


def _refused(sess: dp.Session, argument: str, error: type[Exception] = dp.DPFrameError, **kwargs: object) -> None:
    before = sess.history().height
    args = {"threshold": 5, "max_positives": 1, "budget": dp.ZCDP(0.1), "noise": "gaussian"} | kwargs
    with pytest.raises(error) as info:
        sess.sparse_vector(**args)  # type: ignore[arg-type]
    assert getattr(info.value, "argument", None) == argument, info.value
    assert sess.history().height == before


def test_bad_input_is_refused_by_name_and_nothing_charged() -> None:
    sess = _session()
    _refused(sess, "noise", noise="normal")
    _refused(sess, "noise", noise=None)
    _refused(sess, "budget", dp.BudgetError, budget=dp.PureDP(1))
    _refused(sess, "budget", dp.BudgetError, budget=dp.ApproxDP(1, 1e-6))
    _refused(sess, "max_length", dp.BudgetError, max_positives=2)
    for bad in (0, -3, 10**12, 2.5, True):
        _refused(sess, "max_length", dp.BudgetError, max_length=bad)
    _refused(sess, "refund", dp.BudgetError, refund=True)
    _refused(sess, "release", release=dp.PureDP(1))
    _refused(sess, "budget", dp.BudgetExceededError, threshold=1000)   # the curve does not fit: nothing charged
    for accountant, budget in (("basic", dp.PureDP(5)), ("zcdp", dp.ZCDP(5)), (None, dp.ApproxDP(5, 1e-6))):
        _refused(_session(accountant, budget), "noise", dp.BudgetError)


def test_non_count_query_refused_when_the_curve_relies_on_nonnegativity() -> None:
    sess = _session()
    sv = sess.sparse_vector(threshold=5, max_positives=1, budget=dp.ZCDP(0.1), noise="gaussian")
    with pytest.raises(dp.PlanError) as info:
        sv.test(sess.table("t").agg(dp.sum("x", bounds=(-3, 3))))
    assert info.value.argument == "query" and not sv.closed and not sv.answers
    with pytest.raises(dp.PlanError, match="count"):   # ≥ 0, but sums are on a finer grid than the calibration
        sv.test(sess.table("t").agg(dp.sum("n", bounds=(0, 1))))
    sv.test(sess.table("t").filter(pl.col("g") == 0).agg(dp.count("n")))
    sv.close()
    assert sess.history().height == 1


def test_nonnegative_stream_is_calibrated_for_max_rows() -> None:
    sess = _session(max_rows=3)
    with sess.sparse_vector(threshold=5, max_positives=1, budget=dp.ZCDP(0.1), noise="gaussian") as sv:
        assert sv.curve is not None and sv.curve.spec is not None
        assert sv.curve.spec["sensitivity"] == 3.0 and sv.curve.spec["sigma1"] == pytest.approx(3 * math.sqrt(10))
        sv.test(_count(sess, 0))


def test_extreme_thresholds_give_sound_moments() -> None:
    g = np.array([2.0])
    assert svt_math.gaussian_svt_log_moments(1.0, 2.0, -10**15, g)[0] == pytest.approx(0.0, abs=1e-6)   # always ⊤
    assert svt_math.gaussian_svt_log_moments(1.0, 2.0, 10**300, g)[0] == math.inf                       # vacuous
    sess = _session()
    _refused(sess, "budget", dp.BudgetExceededError, threshold=1e300)   # an infinite curve never fits


def test_laplace_stream_halts_after_max_length() -> None:
    sess = _session("basic", dp.PureDP(2))
    with sess.sparse_vector(threshold=1000, max_positives=2, budget=dp.PureDP(1), max_length=2) as sv:
        assert [sv.test(_count(sess)) for _ in range(2)] == [False, False] and sv.closed
    before = sess.history().height
    with pytest.raises(dp.BudgetError) as info:
        sess.sparse_vector(threshold=1000, max_positives=2, budget=dp.PureDP(1), max_length=0)
    assert info.value.argument == "max_length" and sess.history().height == before
