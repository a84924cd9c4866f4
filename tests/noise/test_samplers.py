"""Exact samplers: goodness of fit against exact pmfs, moments, symmetry, determinism, validation.

Every statistical test rejects only at p < 1e-6 (or |z| > 5.3), so a correct sampler essentially never
fails, while a wrong pmf (e.g. off by a factor in the scale, a biased sign or a doubled zero) fails with
n = 200k draws.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpframe.noise import (
    MAX_GAUSSIAN_SIGMA2,
    MAX_LAPLACE_SCALE,
    SeededRandomSource,
    SystemRandomSource,
    bernoulli_exp,
    discrete_gaussian,
    discrete_laplace,
    discrete_laplace_tail,
    discrete_laplace_variance,
    samplers,
)

P_FLOOR = 1e-6
Z_MAX = 5.3  # two-sided normal p ≈ 1.2e-7
N = 200_000


# ----------------------------------------------------------------------------------------- helpers


def _pmf_on_support(log_weight: Any, half_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Values -W..W and their exact pmf, normalised by summing the weights over the whole support."""
    xs = np.arange(-half_width, half_width + 1)
    w = np.exp(log_weight(xs.astype(float)) - log_weight(np.zeros(1))[0])
    return xs, w / w.sum()


def _gof_p(samples: np.ndarray, xs: np.ndarray, pmf: np.ndarray, min_expected: float = 20.0) -> float:
    """Chi-square p-value of integer samples against a pmf on xs, with both tails merged into one bin each."""
    n = samples.size
    core = np.flatnonzero(pmf * n >= min_expected)
    lo, hi = int(xs[core[0]]), int(xs[core[-1]])
    in_core = (xs >= lo) & (xs <= hi)
    expected = np.concatenate([[pmf[xs < lo].sum()], pmf[in_core], [pmf[xs > hi].sum()]]) * n
    observed = np.concatenate([
        [np.count_nonzero(samples < lo)],
        np.bincount(samples[(samples >= lo) & (samples <= hi)] - lo, minlength=hi - lo + 1),
        [np.count_nonzero(samples > hi)],
    ])
    keep = expected > 0
    assert observed[~keep].sum() == 0, "draws where the target pmf is (numerically) zero"
    expected, observed = expected[keep], observed[keep]
    expected *= observed.sum() / expected.sum()
    return float(stats.chisquare(observed, expected).pvalue)


def _check_moments(samples: np.ndarray, xs: np.ndarray, pmf: np.ndarray) -> None:
    """Mean 0, variance = the pmf's variance and symmetric signs, each as a 5.3-sigma test."""
    n = samples.size
    var = float((xs.astype(float) ** 2 * pmf).sum())
    mu4 = float((xs.astype(float) ** 4 * pmf).sum())
    x = samples.astype(float)
    assert abs(x.mean()) <= Z_MAX * math.sqrt(var / n)
    assert abs((x**2).mean() - var) <= Z_MAX * math.sqrt((mu4 - var**2) / n)
    pos, neg = int((samples > 0).sum()), int((samples < 0).sum())
    assert stats.binomtest(pos, pos + neg, 0.5).pvalue > P_FLOOR


def _laplace_pmf(scale: Fraction) -> tuple[np.ndarray, np.ndarray]:
    t = float(scale)
    return _pmf_on_support(lambda x: -np.abs(x) / t, max(60, int(80 * t)))


def _gaussian_pmf(sigma2: Fraction) -> tuple[np.ndarray, np.ndarray]:
    s2 = float(sigma2)
    return _pmf_on_support(lambda x: -(x**2) / (2 * s2), max(40, int(14 * math.sqrt(s2))))


# ----------------------------------------------------------------------------------- bernoulli_exp


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2), Fraction(10),
                                   Fraction(10**30 + 1, 10**30), 0.75])
def test_bernoulli_exp_frequency(gamma: Fraction | float) -> None:
    draws = bernoulli_exp(gamma, N, SeededRandomSource(1))
    assert draws.dtype == bool and draws.shape == (N,)
    p = math.exp(-float(gamma))
    if p == 1.0:
        assert draws.all()
    else:
        assert stats.binomtest(int(draws.sum()), N, p).pvalue > P_FLOOR


def test_bernoulli_exp_system_source() -> None:
    draws = bernoulli_exp(Fraction(2, 3), N, SystemRandomSource())
    assert stats.binomtest(int(draws.sum()), N, math.exp(-2 / 3)).pvalue > P_FLOOR


def test_bernoulli_exp_large_gamma_is_almost_never_true() -> None:
    assert not bernoulli_exp(Fraction(10**6), 10_000, SeededRandomSource(0)).any()
    assert not bernoulli_exp(Fraction(10**40, 3), 1000, SeededRandomSource(0)).any()


# -------------------------------------------------------------------------------- discrete Laplace


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(10), 0.7,
                                   Fraction(10**20 + 1, 10**20)])
def test_discrete_laplace_fits_exact_pmf(scale: Fraction | float) -> None:
    z = discrete_laplace(scale, N, SeededRandomSource(2))
    assert z.dtype == np.int64 and z.shape == (N,)
    xs, pmf = _laplace_pmf(Fraction(scale))
    assert _gof_p(z, xs, pmf) > P_FLOOR
    _check_moments(z, xs, pmf)


def test_discrete_laplace_variance_formula_matches_samples() -> None:
    for scale in (Fraction(1, 3), Fraction(7, 2), Fraction(10)):
        xs, pmf = _laplace_pmf(scale)
        assert discrete_laplace_variance(scale) == pytest.approx(float((xs**2 * pmf).sum()), rel=1e-9)
    z = discrete_laplace(Fraction(10), N, SystemRandomSource())
    var = discrete_laplace_variance(10)
    assert abs(z.astype(float).var() - var) < Z_MAX * var * math.sqrt(5 / N)  # kurtosis of Laplace ≈ 6


def test_discrete_laplace_large_scale_binned() -> None:
    """Scale 10^6: compare decile-like bins with the exact geometric tail formula."""
    scale = 10**6
    z = discrete_laplace(Fraction(scale), N, SeededRandomSource(3))
    q = math.exp(-1 / scale)
    edges = [-(10**8), -2 * 10**6, -5 * 10**5, -10**5, 0, 1, 10**5 + 1, 5 * 10**5 + 1, 2 * 10**6 + 1, 10**8]

    def cdf_below(k: int) -> float:  # P[Z < k]
        return 1 - q**k / (1 + q) if k >= 1 else q ** (1 - k) / (1 + q)

    expected = np.diff([cdf_below(e) for e in edges]) * N
    observed = np.histogram(z, bins=edges)[0]  # bins [e_i, e_{i+1}); last bin closed, but it is empty
    assert observed.sum() == N
    assert stats.chisquare(observed, expected * N / expected.sum()).pvalue > P_FLOOR


def test_discrete_laplace_tiny_scale_is_zero() -> None:
    assert not discrete_laplace(Fraction(1, 10**6), 10_000, SeededRandomSource(0)).any()
    assert not discrete_laplace(1e-300, 1000, SeededRandomSource(0)).any()


# ------------------------------------------------------------------------------- discrete Gaussian


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(9, 2), Fraction(50),
                                    Fraction(10**13 + 1, 10**12),  # two-limb (128-bit) acceptance test
                                    0.3])                          # float -> 2^-54 denominator, 128-bit
def test_discrete_gaussian_fits_exact_pmf(sigma2: Fraction | float) -> None:
    z = discrete_gaussian(sigma2, N, SeededRandomSource(4))
    assert z.dtype == np.int64 and z.shape == (N,)
    xs, pmf = _gaussian_pmf(Fraction(sigma2))
    assert _gof_p(z, xs, pmf) > P_FLOOR
    _check_moments(z, xs, pmf)


def test_discrete_gaussian_python_int_path() -> None:
    """σ² with a 40-digit denominator: the acceptance test needs integers beyond 128 bits."""
    sigma2 = Fraction(10**40 + 1, 10**39)
    z = discrete_gaussian(sigma2, 100_000, SeededRandomSource(5))
    xs, pmf = _gaussian_pmf(sigma2)
    assert _gof_p(z, xs, pmf) > P_FLOOR
    _check_moments(z, xs, pmf)


@pytest.mark.parametrize("sigma2", [10**8, 10**12])
def test_discrete_gaussian_large_sigma_binned(sigma2: int) -> None:
    """For large σ the bin masses equal normal-CDF differences (Euler–Maclaurin error ~ 1/σ²)."""
    z = discrete_gaussian(Fraction(sigma2), N, SeededRandomSource(6))
    sigma = math.sqrt(sigma2)
    cuts = np.array([-math.inf, -2.5, -1.5, -1, -0.5, -0.2, 0, 0.2, 0.5, 1, 1.5, 2.5, math.inf])
    int_edges = np.ceil(cuts[1:-1] * sigma).astype(np.int64)  # bin = integers in [e_i, e_{i+1})
    probs = np.diff(np.concatenate([[0.0], stats.norm.cdf((int_edges - 0.5) / sigma), [1.0]]))
    observed = np.bincount(np.searchsorted(int_edges, z, side="right"), minlength=len(probs))
    assert stats.chisquare(observed, probs * N).pvalue > P_FLOOR
    assert z.astype(float).var() < sigma2 * (1 + Z_MAX * math.sqrt(2 / N))  # σ² bounds the variance


def test_discrete_gaussian_system_source() -> None:
    z = discrete_gaussian(Fraction(9, 2), N, SystemRandomSource())
    xs, pmf = _gaussian_pmf(Fraction(9, 2))
    assert _gof_p(z, xs, pmf) > P_FLOOR


def test_discrete_gaussian_tiny_sigma_is_zero() -> None:
    assert not discrete_gaussian(Fraction(1, 1000), 20_000, SeededRandomSource(0)).any()


# -------------------------------------------------------------------------------------- the source


@pytest.mark.parametrize("sample", [
    lambda rng: bernoulli_exp(Fraction(1, 3), 500, rng),
    lambda rng: discrete_laplace(Fraction(7, 2), 500, rng),
    lambda rng: discrete_gaussian(Fraction(9, 2), 500, rng),
    lambda rng: discrete_gaussian(0.3, 500, rng),
])
def test_samplers_use_the_given_source(sample: Any) -> None:
    a, b = sample(SeededRandomSource(7)), sample(SeededRandomSource(7))
    c = sample(SeededRandomSource(8))
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()


def test_samplers_draw_only_from_the_source() -> None:
    class Counting(SeededRandomSource):
        def __init__(self) -> None:
            super().__init__(0)
            self.words = 0

        def random_uint64(self, size: int) -> np.ndarray:
            self.words += size
            return super().random_uint64(size)

    np.random.seed(0)
    before = np.random.get_state()[1].copy()  # type: ignore[index]
    src = Counting()
    discrete_laplace(3, 1000, src)
    discrete_gaussian(3, 1000, src)
    assert src.words > 1000
    assert (np.random.get_state()[1] == before).all()  # type: ignore[index]


def test_sizes() -> None:
    src = SeededRandomSource(0)
    for size in (0, 1, 2, 17):
        assert discrete_laplace(1, size, src).shape == (size,)
        assert discrete_gaussian(1, size, src).shape == (size,)
        assert bernoulli_exp(1, size, src).shape == (size,)
    assert discrete_laplace(1, 0, src).dtype == np.int64


# -------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [0, -1, Fraction(-1, 2), float("nan"), float("inf"), -0.5,
                                 Decimal("NaN"), MAX_LAPLACE_SCALE + 1])
def test_discrete_laplace_rejects_bad_scale(bad: Any) -> None:
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace(bad, 10, SeededRandomSource(0))


@pytest.mark.parametrize("bad", [0, -2, float("nan"), float("-inf"), MAX_GAUSSIAN_SIGMA2 * 2])
def test_discrete_gaussian_rejects_bad_sigma2(bad: Any) -> None:
    with pytest.raises(ValueError, match="sigma2"):
        discrete_gaussian(bad, 10, SeededRandomSource(0))


def test_other_validation() -> None:
    src = SeededRandomSource(0)
    with pytest.raises(ValueError, match="gamma"):
        bernoulli_exp(Fraction(-1, 3), 10, src)
    with pytest.raises(ValueError, match="gamma"):
        bernoulli_exp(float("nan"), 10, src)
    for sampler in (discrete_laplace, discrete_gaussian, bernoulli_exp):
        with pytest.raises(ValueError, match="size"):
            sampler(1, -1, src)
        with pytest.raises(TypeError, match="size"):
            sampler(1, 2.0, src)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="rng"):
            sampler(1, 2, np.random.default_rng(0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scale"):
        discrete_laplace("1", 10, src)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scale"):
        discrete_laplace(True, 10, src)
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace_tail(0, 3)
    with pytest.raises(TypeError, match="k"):
        discrete_laplace_tail(1, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale"):
        discrete_laplace_variance(-1)


def test_exact_parameter_types_are_accepted() -> None:
    src = SeededRandomSource(0)
    a = discrete_laplace(Decimal("3.5"), 50, SeededRandomSource(1))
    assert a.tolist() == discrete_laplace(Fraction(7, 2), 50, SeededRandomSource(1)).tolist()
    assert discrete_laplace(np.int64(3), 5, src).shape == (5,)
    assert discrete_gaussian(np.float64(2.5), 5, src).shape == (5,)


# ------------------------------------------------------------------------------- helpers' formulas


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(10)])
def test_discrete_laplace_tail_matches_pmf(scale: Fraction) -> None:
    xs, pmf = _laplace_pmf(scale)
    for k in (-3, 0, 1, 2, 5, 20):
        exact = float(pmf[xs >= k].sum())
        assert discrete_laplace_tail(scale, k) == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_discrete_laplace_tail_extremes() -> None:
    assert discrete_laplace_tail(Fraction(1, 10**6), 1) == 0.0
    assert discrete_laplace_tail(10, 10**400) == 0.0
    far = discrete_laplace_tail(1, 700)  # e^-700 / (1 + e^-1): tiny but representable, in log space
    assert far == pytest.approx(math.exp(-700) / (1 + math.exp(-1)), rel=1e-12)
    assert discrete_laplace_tail(10**9, 1) == pytest.approx(0.5, rel=1e-8)


def test_discrete_laplace_variance_extremes() -> None:
    assert discrete_laplace_variance(Fraction(1, 10**6)) == 0.0
    assert discrete_laplace_variance(10**12) == pytest.approx(2e24, rel=1e-12)
    assert discrete_laplace_variance(Fraction(10**9)) == pytest.approx(2e18, rel=1e-12)
    q = math.exp(-1)
    assert discrete_laplace_variance(1) == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-14)


# -------------------------------------------------------------------------------- exact arithmetic
# White-box property tests of the integer helpers behind the wide paths. Their errors (a lost carry, an
# off-by-one threshold) would shift probabilities by far less than any sampling test can see, so they are
# checked exactly against Python ints instead.

U62 = st.integers(0, 2**62 - 1)


@settings(max_examples=100, deadline=None)
@given(xs=st.lists(U62 | st.sampled_from([0, 1, 2**32 - 1, 2**32, 2**62 - 1]), min_size=1, max_size=30))
def test_square_u128_is_exact(xs: list[int]) -> None:
    hi, lo = samplers._square_u128(np.array(xs, dtype=np.uint64))
    assert [(int(h) << 64) | int(lo_) for h, lo_ in zip(hi, lo, strict=True)] == [x * x for x in xs]


@settings(max_examples=150, deadline=None)
@given(D=st.integers(1, 2**126 - 1), xs=st.lists(U62, min_size=1, max_size=20), data=st.data())
def test_floor_square_div_is_exact(D: int, xs: list[int], data: st.DataObject) -> None:
    # Concentrate half the points on the thresholds ceil(sqrt(jD)) and their neighbours.
    j = data.draw(st.integers(1, 50))
    root = math.isqrt(j * D - 1) + 1
    xs = [x for x in xs + [root - 1, root, root + 1] if 0 <= x < 2**62 and x * x // D <= 2**14]
    if not xs:
        return
    kmax = max(x * x // D for x in xs)
    k = samplers._floor_square_div(np.array(xs, dtype=np.uint64), D, kmax)
    assert k.tolist() == [x * x // D for x in xs]


U128 = st.integers(0, 2**127 - 1)


@settings(max_examples=200, deadline=None)
@given(a=U128, b=U128, c=st.integers(0, 2**128 - 1), tweak=st.sampled_from([None, -1, 0, 1]))
def test_sum_less_u128_is_exact(a: int, b: int, c: int, tweak: int | None) -> None:
    if tweak is not None:
        c = min(max(a + b + tweak, 0), 2**128 - 1)  # probe the boundary a + b == c exactly
    limbs = [np.array([v >> 64], dtype=np.uint64) for v in (a, b, c)]
    lows = [np.array([v & (2**64 - 1)], dtype=np.uint64) for v in (a, b, c)]
    got = samplers._sum_less_u128(limbs[0], lows[0], limbs[1], lows[1], limbs[2], lows[2])
    assert bool(got[0]) == (a + b < c)


@settings(max_examples=100, deadline=None)
@given(nums=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=20),
       big=st.lists(st.integers(0, 2**200), min_size=1, max_size=20), den=st.integers(1, 2**140))
def test_divmod_exact(nums: list[int], big: list[int], den: int) -> None:
    for arr in (np.array(nums, dtype=np.int64), np.array(big, dtype=object)):
        k, r = samplers._divmod_exact(arr, den)
        assert [int(v) for v in k] == [int(v) // den for v in arr]
        assert [int(v) for v in r] == [int(v) % den for v in arr]


@settings(max_examples=120, deadline=None)
@given(t=st.integers(1, 2**70) | st.integers(2**57, 2**66), data=st.data())
def test_fold_is_exact(t: int, data: st.DataObject) -> None:
    s = data.draw(st.integers(max(1, t >> 50), 4 * t))  # keeps results within int64
    us = data.draw(st.lists(st.integers(0, t - 1), min_size=1, max_size=10))
    vs = data.draw(st.lists(st.integers(0, 60), min_size=len(us), max_size=len(us)))
    expected = [(u + t * v) // s for u, v in zip(us, vs, strict=True)]
    u_arr = np.array(us, dtype=np.int64) if t <= 2**63 else np.array(us, dtype=object)
    assert samplers._fold(u_arr, np.array(vs, dtype=np.int64), t, s).tolist() == expected


@pytest.mark.parametrize("bound", [6, 2**63, 2**63 + 5, 2**64, 3 * 2**64, 3 * 2**100, 2**126 - 1])
def test_uniform_below_128(bound: int) -> None:
    hi, lo = samplers._uniform_below_128(bound, 30_000, SeededRandomSource(bound % 97))
    values = [(int(h) << 64) | int(x) for h, x in zip(hi, lo, strict=True)]
    assert all(0 <= v < bound for v in values)
    thirds = np.bincount([3 * v // bound for v in values], minlength=3)
    assert stats.chisquare(thirds).pvalue > P_FLOOR


class _Scripted(SeededRandomSource):
    """uniform_below returns bound - 1; random_uint64 returns ``first`` once, then zeros."""

    def __init__(self, first: int) -> None:
        super().__init__(0)
        self.first: int | None = first

    def uniform_below(self, bound: int, size: int) -> np.ndarray:
        return np.full(size, bound - 1, dtype=np.int64)

    def random_uint64(self, size: int) -> np.ndarray:
        value, self.first = (self.first or 0), None
        return np.full(size, value, dtype=np.uint64)


@pytest.mark.parametrize("bound", [3 * 2**64 + 5, 2**100 + 2**64 + 1, 2**63 + 1])
def test_uniform_below_128_rejects_the_bound_itself(bound: int) -> None:
    """The candidate (high = max, low = bound's low limb) equals ``bound`` and must be redrawn."""
    hi, lo = samplers._uniform_below_128(bound, 4, _Scripted(bound & (2**64 - 1)))
    values = [(int(h) << 64) | int(x) for h, x in zip(hi, lo, strict=True)]
    assert values == [bound - (bound & (2**64 - 1))] * 4


@pytest.mark.parametrize(("m", "D"), [
    (2**32 - 1, 2**64 + 1),            # k = 0, r just below 2^64: only the low limbs differ
    (2**33, 3 * 2**64),                # k = 1
    (3 * 2**40 + 7, 2**81 + 12345),    # k = 4
    (2**61 + 3, 2**121 + 1),           # k = 2, large limbs
    (10**15, 7 * 10**29 + 1),          # k = 1
])
def test_accept_wide_frequency(m: int, D: int) -> None:
    """The 128-bit acceptance test accepts with probability exp(-m²/D) (checked on direct inputs)."""
    n = 40_000
    absm = np.full(n, m, dtype=np.uint64)
    acc = samplers._accept_wide(absm, D, m * m // D, SeededRandomSource(m % 1000))
    p = math.exp(-(m * m) / D)
    assert stats.binomtest(int(acc.sum()), n, p).pvalue > P_FLOOR


@pytest.mark.parametrize(("a", "A", "P", "D"), [
    (3, 5, 7, 50),                       # int64 arithmetic: m = 8
    (1, 2**40, 3, 2**80 + 1),            # 128-bit limbs
    (2, 2**61, 2**62 - 5, 3 * 2**62),    # 128-bit limbs, |m| close to 2^62
    (1, 2**63, 2**63, 1),                # Python ints: m = 0, so always accepted
    (1, 2**63, 2**63 - 1, 2),            # Python ints: m = 1, exp(-1/2)
    (1, 10**40, 10**40 + 3, 7),          # Python ints: m = -3, exp(-9/7)
])
def test_gaussian_accept_each_arithmetic_path(a: int, A: int, P: int, D: int) -> None:
    """Bernoulli(exp(-(a·A - P)²/D)) on direct inputs, so that an off-by-one in m is visible."""
    n = 40_000
    acc = samplers._gaussian_accept(np.full(n, a, dtype=np.int64), A, P, D, SeededRandomSource(D % 1000))
    p = math.exp(-float(Fraction((a * A - P) ** 2, D)))
    if p == 1.0:
        assert acc.all()
    else:
        assert stats.binomtest(int(acc.sum()), n, p).pvalue > P_FLOOR
