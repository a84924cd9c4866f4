"""The exact exponential-mechanism sampler: its distribution, the near-tie refinement, and bad input."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpframe.noise import SeededRandomSource
from dpframe.noise.exponential import _score_interval, exponential_index, exponential_index_grouped


def pmf(utilities, scale, multiplicities=None):
    m = np.ones(len(utilities)) if multiplicities is None else np.array([float(x) for x in multiplicities])
    logw = np.log(np.where(m > 0, m, 1)) + float(scale) * np.asarray(utilities, dtype=float)
    logw[m == 0] = -np.inf
    w = np.exp(logw - logw.max())
    return w / w.sum()


def chi2_pvalue(draws, p):
    counts = np.bincount(draws, minlength=len(p))
    keep = p > 0
    assert counts[~keep].sum() == 0, "an item of weight zero was drawn"
    return stats.chisquare(counts[keep], p[keep] * len(draws)).pvalue


def draw_many(utilities, scale, n, seed, multiplicities=None):
    """n independent draws through the grouped API (n copies of the same segment)."""
    u = np.tile(np.asarray(utilities, dtype=np.int64), n)
    m = None if multiplicities is None else np.tile(np.asarray(multiplicities, dtype=object), n)
    offsets = np.arange(n + 1) * len(utilities)
    return exponential_index_grouped(u, scale, SeededRandomSource(seed), offsets, multiplicities=m)


@pytest.mark.parametrize(("utilities", "scale", "mult"), [
    ([0, 1, 2, 3], Fraction(1, 2), None),
    ([-3, 0, 0, 5, -1], Fraction(1, 3), [1, 2, 0, 1, 7]),
    ([0, -1, -2], Fraction(2), [2**64 - 5, 3, 2**62]),      # weights beyond int64, up to 2^64
    ([10, 10, 10], 0, [1, 1, 2]),
])
def test_distribution_matches_the_exact_pmf(utilities, scale, mult):
    draws = draw_many(utilities, scale, 40_000, seed=11, multiplicities=mult)
    assert chi2_pvalue(draws, pmf(utilities, scale, mult)) > 1e-4


def test_neighbouring_rank_utilities_stay_within_e_to_the_epsilon():
    """Quantile-style utilities −|i − k| on neighbouring data (k shifts by one): every outcome's
    probability ratio is at most e^ε with scale ε/2 — checked on the exact pmf the sampler matches."""
    eps = Fraction(1)
    idx = np.arange(12)
    p = pmf(-np.abs(idx - 5), eps / 2)
    q = pmf(-np.abs(idx - 6), eps / 2)
    assert np.max(np.abs(np.log(p / q))) <= float(eps) + 1e-12
    draws = draw_many(-np.abs(idx - 5), eps / 2, 30_000, seed=5)
    assert chi2_pvalue(draws, p) > 1e-4


def test_huge_weight_ranges_do_not_underflow():
    # exp(-5e6) underflows any float; the item with utility 0 must win essentially always.
    u = np.array([-10_000_000, 0, -10_000_000], dtype=np.int64)
    rng = SeededRandomSource(2)
    assert {exponential_index(u, Fraction(1, 2), rng) for _ in range(50)} == {1}


class StuckSource(SeededRandomSource):
    """A source whose first call returns the same word for every item: forces exact near-ties."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.calls = 0

    def random_uint64(self, size: int):
        self.calls += 1
        if self.calls == 1:
            return np.full(size, 2**63 + 12345, dtype=np.uint64)
        return super().random_uint64(size)


def test_refinement_resolves_ties_with_the_conditional_distribution():
    # Equal weights and equal first 64 bits: refinement must pick uniformly among the three.
    wins = [exponential_index([4, 4, 4], Fraction(1), StuckSource(seed)) for seed in range(600)]
    assert chi2_pvalue(np.array(wins), np.full(3, 1 / 3)) > 1e-4
    # With the same first bits, a strictly heavier item wins for sure (its Gumbel interval is equal).
    assert {exponential_index([4, 5, 4], Fraction(1), StuckSource(seed)) for seed in range(50)} == {1}


def test_score_interval_contains_the_true_value():
    # U in [k/2^128, (k+1)/2^128] near 1 (where −ln U loses precision naively).
    bits, k = 128, 2**128 - 3
    lo, hi = _score_interval(k, bits, utility=2, multiplicity=3, s=Fraction(1, 3), precision=bits + 40)
    u_mid = 1 - Fraction(5, 2 * 2**128)
    true = math.log(3) + 2 / 3 - math.log(-math.log1p(float(u_mid - 1)))
    assert float(lo) <= true <= float(hi)
    assert float(hi - lo) < 1.0


def test_grouped_returns_local_indices_per_segment():
    got = exponential_index_grouped([0, 1000, 1000, 0, 0], 1, SeededRandomSource(0), [0, 2, 5])
    assert got.tolist()[0] == 1 and got.tolist()[1] == 0


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"utilities": [0.5, 1.0]}, TypeError),
    ({"utilities": [[0, 1]]}, ValueError),
    ({"scale": -1}, ValueError),
    ({"scale": float("nan")}, ValueError),
    ({"multiplicities": [0, 0]}, ValueError),
    ({"multiplicities": [1, -1]}, ValueError),
    ({"multiplicities": [1.5, 1]}, TypeError),
    ({"multiplicities": [1]}, ValueError),
    ({"rng": np.random.default_rng(0)}, TypeError),
])
def test_bad_input(kwargs, error):
    args = {"utilities": [0, 1], "scale": 1, "rng": SeededRandomSource(0), **kwargs}
    with pytest.raises(error):
        exponential_index(args.pop("utilities"), args.pop("scale"), args.pop("rng"), **args)


@pytest.mark.parametrize("offsets", [[0, 3], [1, 2], [0, 0, 2], [0, 2, 1]])
def test_bad_offsets(offsets):
    with pytest.raises(ValueError):
        exponential_index_grouped([0, 1], 1, SeededRandomSource(0), offsets)


def _true_gumbel(k: int) -> float:
    """G(k/2⁶⁴) = −ln(−ln U), in 60-digit decimal arithmetic (−inf at 0, +inf at 1)."""
    import decimal

    if k == 0:
        return -math.inf
    if k == 2**64:
        return math.inf
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        u = decimal.Decimal(k) / decimal.Decimal(2**64)
        return float(-(-(u.ln())).ln())


@pytest.mark.parametrize("k", [0, 1, 2, 5, 1023, 1024, 2047, 2**11, 2**20, 2**34 - 1, 2**40, 2**52 + 3, 2**54 - 1,
                               2**54, 2**62, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2**40 - 1, 2**64 - 2**40,
                               2**64 - 2**11, 2**64 - 2, 2**64 - 1])
def test_float_gumbel_interval_holds_the_true_value_also_for_tiny_uniforms(k: int) -> None:
    """The first-pass float64 interval of G(U), U ∈ [k/2⁶⁴, (k+1)/2⁶⁴], must contain the true values (with the
    sampler's own slack): tiny uniforms (k < 2¹¹ used to give U = 0, i.e. G = −∞ for the upper end) included."""
    from dpframe.noise.exponential import _MARGIN, _gumbel_bounds

    lo, hi = (float(v[0]) for v in _gumbel_bounds(np.array([k], dtype=np.uint64)))
    true_lo, true_hi = _true_gumbel(k), _true_gumbel(k + 1)
    slack = _MARGIN * (1 + (abs(lo) if math.isfinite(lo) else 0) + (abs(hi) if math.isfinite(hi) else 0))
    assert (lo == -math.inf) if true_lo == -math.inf else lo - slack <= true_lo
    assert (hi == math.inf) if true_hi == math.inf else hi + slack >= true_hi
    assert math.isfinite(hi) or k == 2**64 - 1          # only U = 1 has an infinite upper end
    if 0 < k < 2**64 - 1:
        assert hi - lo < 1e-3 or not 2**20 <= k <= 2**64 - 2**20   # tight except where G itself is steep


def test_bulk_gumbel_bounds_hold_the_true_values() -> None:
    """Random words across the one-evaluation bulk (and its edges): both ends inside the bounds, with the slack."""
    from dpframe.noise.exponential import _BULK, _MARGIN, _gumbel_bounds

    rng = np.random.default_rng(5)
    exponents = rng.uniform(54, 64, 150)
    words = [min(int(2.0**e), 2**64 - 1) for e in exponents] + [_BULK[0], _BULK[1] - 1, 2**64 - 2**40 - 2**30]
    lo, hi = _gumbel_bounds(np.array(words, dtype=np.uint64))
    for k, a, b in zip(words, lo.tolist(), hi.tolist(), strict=True):
        slack = _MARGIN * (1 + abs(a) + abs(b))
        assert a - slack <= _true_gumbel(k) and b + slack >= _true_gumbel(k + 1) and b - a < 1e-9


def test_tiny_uniform_item_can_still_win() -> None:
    """An item whose uniform is tiny has a finite (very low) Gumbel score, so a huge weight lets it win."""
    from dpframe.noise.exponential import _gumbel_bounds

    lo, hi = _gumbel_bounds(np.array([3, 2**63], dtype=np.uint64))
    assert math.isfinite(hi[0]) and hi[0] < lo[1]
    assert hi[0] + 10 > lo[1]                               # a weight e¹⁰ larger overtakes a median uniform
