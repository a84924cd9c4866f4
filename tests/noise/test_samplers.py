"""Exact samplers: goodness of fit against exact pmfs, moments, symmetry, determinism, validation.

Every statistical test rejects only at p < 1e-6 (or |z| > 5.3), so a correct sampler essentially never
fails, while a wrong pmf (e.g. off by a factor in the scale, a biased sign or a doubled zero) fails with
n = 200k draws.
"""

from __future__ import annotations

import decimal
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
    certified,
    discrete_gaussian,
    discrete_gaussian_batch,
    discrete_laplace,
    discrete_laplace_batch,
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


@pytest.mark.parametrize("scale", [10**6, 2**30 + 7])   # 2^30 + 7: the split magnitude (coarse part + low part)
def test_discrete_laplace_large_scale_binned(scale: int) -> None:
    """Large scales: compare decile-like bins with the exact geometric tail formula."""
    z = discrete_laplace(Fraction(scale), N, SeededRandomSource(3))
    q = math.exp(-1 / scale)
    edges = [-100 * scale, -2 * scale, -scale // 2, -scale // 10, 0, 1, scale // 10 + 1, scale // 2 + 1,
             2 * scale + 1, 100 * scale]

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


# ----------------------------------------------------------------------- certified decisions (white box)
# The fast path decides about all but 2^-40 of the comparisons; its errors (a wrong table entry, a margin
# too thin, a fallback that compares with the wrong threshold) would shift probabilities far below what a
# sampling test can see, so they are checked exactly instead: table entries and bounds against 60-digit
# Decimals, and the samplers' outputs on scripted bits (cells placed on thresholds, so that the exact
# fallback runs) against an independent high-precision inverse CDF.

_CTX = decimal.Context(prec=80)


def _dexp(x: Fraction) -> Decimal:
    return _CTX.exp(-_CTX.divide(Decimal(x.numerator), Decimal(x.denominator)))


def test_exp_tables_are_correctly_rounded() -> None:
    for i, table in enumerate(certified._tables()):
        step = Fraction(2) ** (certified._DIGIT_BITS * i - certified._FRAC_BITS)
        for j in range(0, table.size, 7):
            exact = _dexp(j * step)
            assert abs(Decimal(float(table[j])) / exact - 1) <= Decimal(2) ** -53


@settings(max_examples=300, deadline=None)
@given(x=st.floats(0, 60) | st.integers(0, 60 * 2**20).map(lambda k: k * 2.0**-20),
       shift=st.sampled_from([0, 1, -1]), delta=st.integers(-(2**20), 2**20))
def test_exp_neg_bounds_hold(x: float, shift: int, delta: int) -> None:
    """p̂ = exp_neg(x̂) is within 2^-42.9 of exp(-x) for every x within 2^-43 of x̂ (grid edges included)."""
    xf = max(0.0, x + shift * 2.0**-48)
    p_hat = Decimal(float(certified.exp_neg(np.array([xf]))[0]))
    true_x = max(Fraction(xf) + Fraction(delta, 2**63), Fraction(0))   # |delta| ≤ 2^-43
    assert abs(_dexp(true_x) / p_hat - 1) <= Decimal(2) ** Decimal("-42.9")


@settings(max_examples=300, deadline=None)
@given(u=st.integers(0, 2**63 - 1), rel=st.integers(-(2**20), 2**20), near=st.booleans(),
       p_exp=st.integers(-70, 0))
def test_decide_is_sound(u: int, rel: int, near: bool, p_exp: int) -> None:
    """Whenever decide() is certain, it is right for every p within 2^-42.5 of p̂ and every U in u's cell."""
    p_hat = float(Fraction(u + rel, 2**63)) if near else 2.0**p_exp * 0.75
    u_hat = certified.uniform_cells(np.array([u], dtype=np.uint64))[1]
    yes, no = certified.decide(u_hat, np.array([p_hat]))
    slack = Fraction(2) ** -42 * Fraction(p_hat)   # wider than the claimed 2^-42.5
    if yes[0]:
        assert Fraction(u + 1, 2**63) <= Fraction(p_hat) - slack
    if no[0]:
        assert Fraction(u, 2**63) >= Fraction(p_hat) + slack


class _Words(SeededRandomSource):
    """Returns the scripted 64-bit words first (in order), then seeded ones."""

    def __init__(self, words: list[int]) -> None:
        super().__init__(11)
        self.script = list(words)

    def random_uint64(self, size: int) -> np.ndarray:
        head, self.script = self.script[:size], self.script[size:]
        return np.concatenate([np.array(head, dtype=np.uint64), super().random_uint64(size - len(head))])


def _uniform(words: list[int]) -> Fraction:
    """U from its first word's low 63 bits and the following words (what LazyUniform reads)."""
    value, bits = words[0] & (2**63 - 1), 63
    for w in words[1:]:
        value, bits = (value << 64) | w, bits + 64
    return Fraction(value, 2**bits)


def _laplace_reference(t: Fraction, words: list[int]) -> int:
    """Z by the definition: ±#{m ≥ 1 : U < c·q^m} in 80-digit arithmetic."""
    u = Decimal(_uniform(words).numerator) / Decimal(_uniform(words).denominator)
    q = _dexp(1 / t)
    c = 2 / (1 + q)
    m = 0
    if u < c * q:   # count by bisection on the monotone condition
        lo, hi = 1, 2
        while u < c * _dexp(hi / t):
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if u < c * _dexp(mid / t) else (lo, mid)
        m = lo
    return -m if words[0] >> 63 else m


def _on_threshold(t: Fraction, exponent: Fraction, sign: int, seed: int) -> list[int]:
    """Words whose first cell contains the threshold c·q·exp(-exponent), then random continuation words."""
    q = _dexp(1 / t)
    cell = int(2 * q / (1 + q) * _dexp(exponent) * 2**63)
    return [sign | cell, *[int(w) * 2 + 1 for w in np.random.default_rng(seed).integers(0, 2**62, 4)]]


@pytest.mark.parametrize("t", [Fraction(7, 2), Fraction(4), Fraction(2048004)])
@pytest.mark.parametrize("m", [1, 2, 5, 30])
def test_laplace_on_a_threshold_matches_the_definition(t: Fraction, m: int) -> None:
    """U's first 63 bits straddle the m-th threshold: only the exact fallback can decide."""
    for sign in (0, 2**63):
        words = _on_threshold(t, (m - 1) / t, sign, m)
        assert discrete_laplace(t, 1, _Words(words))[0] == _laplace_reference(t, words)


@pytest.mark.parametrize("j", [1, 2, 40])
def test_split_laplace_on_a_coarse_threshold(j: int) -> None:
    """t > 2^24: |Z| = 1 + K(M' − 1) + L with L < K; M' (the coarse count) must match the definition."""
    t = Fraction(2**30 + 1, 3)
    K = 2 ** samplers._scale(t).k
    words = _on_threshold(t, Fraction((j - 1) * K) / t, 0, j)
    z = int(discrete_laplace(t, 1, _Words(words))[0])
    u = _uniform(words)
    q = _dexp(1 / t)
    coarse = 0
    while Decimal(u.numerator) / Decimal(u.denominator) < 2 * q / (1 + q) * _dexp(Fraction(coarse * K) / t):
        coarse += 1
    assert (0 if z == 0 else (z - 1) // K + 1) == coarse


def test_laplace_tiniest_uniform_takes_the_exact_path() -> None:
    """u = 0 (U < 2^-63): the magnitude exceeds the float cap; found exactly with Python ints."""
    words = [0, 2**40, 12345]
    z = int(discrete_laplace(Fraction(1, 3), 1, _Words(words))[0])
    assert z == _laplace_reference(Fraction(1, 3), words) >= 20


@pytest.mark.parametrize("x", [Fraction(1, 3), Fraction(5, 2), Fraction(10**30 + 1, 10**30)])
def test_bernoulli_on_the_threshold_matches_the_definition(x: Fraction) -> None:
    cell = int(_dexp(x) * 2**63)
    for follow in (0, 2**64 - 1, 2**63):
        words = [cell, follow, 777]
        expected = _uniform(words) < Fraction(_dexp(x))
        assert bool(bernoulli_exp(x, 1, _Words(words))[0]) == expected


def test_gaussian_acceptance_on_the_threshold_matches_the_definition() -> None:
    sigma2 = Fraction(9, 2)
    g = samplers._sigma2(sigma2)
    y = np.array([0, 1, 3, -7], dtype=np.int64)
    xs = [(abs(int(v)) - g.s) ** 2 / (2 * sigma2) for v in y]
    cells = [int(_dexp(x) * 2**63) for x in xs]
    for follow in (0, 2**64 - 1):
        rng = _Words(cells + [follow] * 12)
        got = samplers._accept(y, samplers._Batch([g], [y.size]), rng)
        assert got.tolist() == [_uniform([c, follow]) < Fraction(_dexp(x)) for c, x in zip(cells, xs, strict=True)]


def test_batches_match_single_draws_and_mix_scales() -> None:
    one = discrete_laplace(Fraction(7, 2), 50, SeededRandomSource(3))
    assert discrete_laplace_batch([Fraction(7, 2)], [50], SeededRandomSource(3))[0].tolist() == one.tolist()
    a, b, c = discrete_laplace_batch([Fraction(1, 3), 10, 2**30], [N // 4, N // 4, 1000], SeededRandomSource(4))
    for z, scale in ((a, Fraction(1, 3)), (b, Fraction(10))):
        assert _gof_p(z, *_laplace_pmf(scale)) > P_FLOOR
    assert c.size == 1000 and np.abs(c).max() > 2**28
    g1, g2 = discrete_gaussian_batch([Fraction(1, 4), 50], [N // 4, N // 4], SeededRandomSource(5))
    assert _gof_p(g1, *_gaussian_pmf(Fraction(1, 4))) > P_FLOOR
    assert _gof_p(g2, *_gaussian_pmf(Fraction(50))) > P_FLOOR
    with pytest.raises(ValueError, match="same length"):
        discrete_laplace_batch([1, 2], [3], SeededRandomSource(0))
