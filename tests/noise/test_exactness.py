"""Adversarial exactness checks of the certified samplers (review of the inverse-CDF / certified-float rewrite).

The samplers claim that every decision is the exact indicator ``U < p`` of an exact uniform U. Sampling
tests cannot see errors of 2⁻⁴⁰, so these tests script the random words: the first 63 bits of U are
placed at, next to, and just outside the float fast path's margin around every threshold, and the
outputs are compared with an independent reference (thresholds in 100-digit Decimal arithmetic with an
explicit context; the inverse CDF counted on the integer cells ⌊2⁶³·T_m⌋). Statistical tests at larger
sample sizes are marked slow.
"""

from __future__ import annotations

import decimal
import math
import os
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dpframe.noise import (
    SeededRandomSource,
    SystemRandomSource,
    bernoulli_exp,
    certified,
    discrete_gaussian,
    discrete_gaussian_batch,
    discrete_laplace,
    discrete_laplace_batch,
    samplers,
)

# An explicit context everywhere: Decimal's unary minus and operators round in the *global* context.
_C = decimal.Context(prec=100, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX)
_TWO63 = Decimal(2**63)
_MASK64 = 2**64 - 1
P_FLOOR = 1e-6


def _exp_neg(x: Fraction) -> Decimal:
    """exp(-x) to 100 digits."""
    return _C.exp(_C.divide(Decimal(-x.numerator), Decimal(x.denominator)))


def _c(t: Fraction) -> Decimal:
    return _C.divide(2, _C.add(1, _exp_neg(1 / t)))


def _laplace_cells(t: Fraction) -> np.ndarray:
    """F_m = ⌊2⁶³·c·q^m⌋ for m = 1, 2, ... while F_m ≥ 1 (decreasing): for a cell u ≠ F_m, M = #{m : u < F_m}."""
    q = _exp_neg(1 / t)
    threshold = _C.multiply(_c(t), q)
    out = []
    while (f := int(_C.multiply(threshold, _TWO63))) >= 1:
        out.append(f)
        threshold = _C.multiply(threshold, q)
    return np.array(out, dtype=np.int64)


def _magnitude_ref(cells: np.ndarray, u: np.ndarray) -> np.ndarray:
    """#{m : u < F_m} for non-straddling cells u."""
    ascending = cells[::-1]
    return cells.size - np.searchsorted(ascending, u, side="right")


class _Words(SeededRandomSource):
    """The scripted 64-bit words first, in order, then seeded ones; counts the words drawn."""

    def __init__(self, words: list[int] | np.ndarray) -> None:
        super().__init__(11)
        self.script = [int(w) for w in words]
        self.drawn = 0

    def random_uint64(self, size: int) -> np.ndarray:
        self.drawn += size
        head, self.script = self.script[:size], self.script[size:]
        return np.concatenate([np.array(head, dtype=np.uint64), super().random_uint64(size - len(head))])


def _probe_cells(cells: np.ndarray, seed: int, adjacent_every: int = 1) -> np.ndarray:
    """Cells just outside the fast path's margin (±2⁻⁴⁰..2⁻³⁸ relative), adjacent cells (±1, ±2) and random ones.

    Never a straddling cell (one equal to some F_m) and never u = 0 (covered elsewhere).
    """
    near = [cells + sign * (cells >> e) for sign in (-1, 1) for e in (38, 39, 40)]
    adjacent = [cells[::adjacent_every] + d for d in (-2, -1, 1, 2)]
    rand = np.random.default_rng(seed).integers(1, 2**63 - 1, 2000, dtype=np.int64)
    u = np.concatenate([*near, *adjacent, rand, [1, 2, 2**63 - 1]])
    return u[(u >= 1) & ~np.isin(u, cells)]


@pytest.mark.parametrize("t", [Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(10), Fraction(100),
                               Fraction(3602879701896397, 36028797018963968)])   # 0.05 as a float
def test_laplace_inverse_cdf_on_every_threshold(t: Fraction) -> None:
    """Every threshold m: cells at and beyond the fast path's margin give exactly ±#{m : U < c·q^m}."""
    cells = _laplace_cells(t)
    u = _probe_cells(cells, seed=int(t.numerator % 1000), adjacent_every=max(1, cells.size // 60))
    sign = np.random.default_rng(1).integers(0, 2, u.size).astype(np.uint64) << np.uint64(63)
    words = u.astype(np.uint64) | sign
    src = _Words(words)
    z = discrete_laplace(t, u.size, src)
    expected = np.where(sign > 0, -1, 1) * _magnitude_ref(cells, u)
    assert z.tolist() == expected.tolist()
    assert src.drawn == u.size                 # non-straddling cells never need more bits
    # the full pmf: P[Z = 0] = 1 − c·q and P[Z = ±m] = (c·q^m − c·q^(m+1))/2, read off the cells
    assert int(np.count_nonzero(z == 0)) == np.count_nonzero(u >= cells[0])


def _straddle_words(threshold: Decimal, offset_bits: int, side: int, sign: int) -> tuple[list[int], Fraction]:
    """Two words making U = ⌊2¹²⁷·T⌋ ± 2^offset_bits (in units of 2⁻¹²⁷), 127 bits of U.

    For offset_bits < 64 the first 63 bits (the cell) usually contain T, so only more bits can decide.
    """
    v = int(_C.multiply(threshold, Decimal(2**127))) + side * 2**offset_bits
    return [sign | (v >> 64), v & _MASK64], Fraction(v, 2**127)


def _straddles(threshold: Decimal, words: list[int]) -> bool:
    return words[0] & (2**63 - 1) == int(_C.multiply(threshold, _TWO63))


@pytest.mark.parametrize("t", [Fraction(1, 3), Fraction(7, 2), Fraction(10)])
@pytest.mark.parametrize("m", [1, 2, 7])
def test_laplace_straddling_cell_decided_by_more_bits(t: Fraction, m: int) -> None:
    """U within 2⁻⁷⁰..2⁻⁶⁴ of c·q^m on either side: the exact fallback reads the second word and is right."""
    q = _exp_neg(1 / t)
    threshold = _C.multiply(_c(t), _C.power(q, m))
    straddled = 0
    for side in (-1, 1):
        for offset_bits in (50, 57, 60):
            words, u = _straddle_words(threshold, offset_bits, side, sign=2**63)
            straddled += _straddles(threshold, words)
            expected_m = m if u < Fraction(threshold) else m - 1
            assert int(discrete_laplace(t, 1, _Words(words))[0]) == -expected_m
    assert straddled >= 4


def test_bernoulli_straddling_cell_decided_by_more_bits() -> None:
    for x in (Fraction(1, 3), Fraction(5, 2), Fraction(10**30 + 1, 10**30), Fraction(0)):
        p = _exp_neg(x) if x else _C.subtract(1, _C.power(2, -70))
        for side in (-1, 1):
            words, u = _straddle_words(p, 50, side, sign=0)
            assert _straddles(p, words)
            assert bool(bernoulli_exp(x, 1, _Words(words))[0]) == (u < Fraction(_exp_neg(x)))


# ------------------------------------------------------------------ split magnitude (scales above 2^24)


def _coarse_cell(t: Fraction, big_k: int, j: int) -> int:
    """⌊2⁶³·c·q^(1 + K(j−1))⌋, the cell of the j-th coarse threshold (j ≥ 1)."""
    return int(_C.multiply(_C.multiply(_c(t), _exp_neg(Fraction(1 + big_k * (j - 1)) / t)), _TWO63))


def _coarse_ref(t: Fraction, big_k: int, u: int) -> int:
    """M' = #{j ≥ 1 : U < c·q^(1 + K(j−1))} for a non-straddling cell u (float guess, then exact steps)."""
    guess = max(0, int(1 + (math.log(2**63 / u) - float(1 / t)) * float(t) / big_k))
    while guess > 0 and not u < _coarse_cell(t, big_k, guess):
        guess -= 1
    while u < _coarse_cell(t, big_k, guess + 1):
        guess += 1
    return guess


@pytest.mark.parametrize("t", [Fraction(2**24 + 1), Fraction(2**30 + 1, 3), Fraction(2**57)])
def test_split_laplace_coarse_part_on_thresholds(t: Fraction) -> None:
    big_k = 2 ** samplers._scale(t).k
    assert Fraction(2**-13) < big_k / t <= Fraction(2**-12)
    cap = samplers._scale(t).cap
    js = [1, 2, 3, 17, 1000, cap // 3, cap // 2]    # x ≈ 20 and 30: cells ≥ 2¹⁹ apart by ≥ 96
    near = []
    for j in js:
        f = _coarse_cell(t, big_k, j)           # spacing of these cells ≥ 96: ±2 never reaches a neighbour
        near += [c for c in (f - 2, f - 1, f + 1, f + 2, f - (f >> 39) - 1, f + (f >> 39) + 1) if 1 <= c < 2**63]
    u = near + np.random.default_rng(3).integers(1, 2**63 - 1, 40).tolist()
    z = discrete_laplace(t, len(u), _Words(u))
    for value, cell in zip(z.tolist(), u, strict=True):
        coarse = 0 if value == 0 else (value - 1) // big_k + 1
        assert value >= 0 and coarse == _coarse_ref(t, big_k, cell)


def test_split_laplace_low_part_is_an_exact_rejection() -> None:
    """|Z| = 1 + K(M' − 1) + L: L is the top k bits of a fresh word, kept iff a second uniform is < q^L."""
    t = Fraction(2**30 + 7)
    k = samplers._scale(t).k
    big_k = 2**k
    coarse_word = _coarse_cell(t, big_k, 3) - 1           # M' = 3
    assert _coarse_ref(t, big_k, coarse_word) == 3

    def acceptance_cell(low: int, side: int) -> int:       # a cell just below (accept) or above (reject) q^low
        return int(_C.multiply(_exp_neg(Fraction(low) / t), _TWO63)) + side

    first, second = big_k - 1, 12345
    words = [coarse_word, first << (64 - k), acceptance_cell(first, +1),      # rejected (U ≥ q^L by one cell)
             second << (64 - k) | (2**(64 - k) - 1), acceptance_cell(second, -1)]   # accepted
    src = _Words(words)
    assert int(discrete_laplace(t, 1, src)[0]) == 1 + 2 * big_k + second
    assert src.drawn == 5
    words = [2**63 | coarse_word, first << (64 - k), acceptance_cell(first, -1)]
    assert int(discrete_laplace(t, 1, _Words(words))[0]) == -(1 + 2 * big_k + first)


# ---------------------------------------------------------------------------- batches mix scales per cell


def test_laplace_batch_gives_each_cell_its_own_scale() -> None:
    """One word per cell; the batch's output for a cell depends only on its word and its own scale."""
    scales = [Fraction(1, 3), Fraction(7, 2), Fraction(5), Fraction(10), Fraction(2**30 + 7)]
    sizes = [300, 0, 200, 300, 40]
    tables = {s: _laplace_cells(s) for s in scales[:4]}
    # each non-split cell sits next to a threshold of its *own* scale, so a neighbour's scale would differ
    rng = np.random.default_rng(5)
    words: list[np.ndarray] = []
    for s, n in zip(scales, sizes, strict=True):
        if s in tables:
            cells = tables[s]
            big = cells[cells >= 2**20]                 # far from the consecutive small cells of the tail
            pick = big[rng.integers(0, big.size, n)]
            u = np.where(rng.integers(0, 2, n) == 1, pick + 1, pick - (pick >> 39) - 1)
        else:
            u = rng.integers(1, 2**63 - 1, n, dtype=np.int64)
        words.append(u)
    out = discrete_laplace_batch(scales, sizes, _Words(np.concatenate(words)))
    assert [o.size for o in out] == sizes
    for s, u, z in zip(scales, words, out, strict=True):
        if s in tables:
            assert z.tolist() == _magnitude_ref(tables[s], u).tolist()
        else:
            big_k = 2 ** samplers._scale(s).k
            coarse = [0 if v == 0 else (v - 1) // big_k + 1 for v in z.tolist()]
            assert coarse == [_coarse_ref(s, big_k, int(c)) for c in u]


def test_gaussian_acceptance_uses_each_cells_own_sigma2() -> None:
    """Mixed σ² in one acceptance pass: cells one step inside each element's own threshold."""
    values = [Fraction(9, 2), Fraction(1, 4), Fraction(50)]
    sizes = [3, 2, 3]
    gs = [samplers._sigma2(v) for v in values]
    y = np.array([0, 2, -5, 1, 0, 3, 7, -20], dtype=np.int64)
    owner = np.repeat(np.arange(3), sizes)
    xs = [(abs(int(v)) - gs[o].s) ** 2 / (2 * gs[o].sigma2) for v, o in zip(y, owner, strict=True)]
    side = [1, -1, 1, -1, 1, -1, 1, -1]                 # +1: one cell above p (reject), -1: one below (accept)
    cells = [int(_C.multiply(_exp_neg(x), _TWO63)) + s for x, s in zip(xs, side, strict=True)]
    got = samplers._accept(y, samplers._Batch(gs, sizes), _Words(cells))
    assert got.tolist() == [s < 0 for s in side]


@pytest.mark.parametrize("sample", [
    lambda rng: np.concatenate(discrete_laplace_batch([Fraction(1, 3), 10, 2**30 + 7], [40, 7, 30], rng)),
    lambda rng: np.concatenate(discrete_gaussian_batch([Fraction(1, 4), 50, 2**40], [20, 9, 25], rng)),
    lambda rng: discrete_gaussian(Fraction(9, 2), 100, rng),
])
def test_chunks_do_not_change_the_draws(sample: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 7 elements (scales split across them) give the one-pass draws: same words, same decisions."""
    whole = sample(SeededRandomSource(12)).tolist()
    monkeypatch.setattr(samplers, "_CHUNK", 7)
    assert sample(SeededRandomSource(12)).tolist() == whole


def test_tables_hold_the_computed_estimates() -> None:
    """A small scale's (σ's) table gives bit for bit the p̂ computed per element (what the proofs are about)."""
    s, g, big = samplers._scale(Fraction(7, 2)), samplers._sigma2(Fraction(9, 2)), samplers._scale(Fraction(2**30))
    assert samplers._threshold_table(big) is None
    table, accept = samplers._threshold_table(s), samplers._acceptance_table(g)
    assert table is not None and accept is not None
    j, y = np.arange(s.cap + 1, dtype=np.int64), np.arange(-300, 300, dtype=np.int64)
    looked_up = samplers._threshold_pair(j, samplers._Batch([s], [j.size]), table)
    computed = samplers._threshold_pair(j, samplers._Batch([s, big], [j.size, 0]))     # per-element constants
    assert [a.tobytes() for a in looked_up] == [b.tobytes() for b in computed]
    looked_up = samplers._acceptance(y, samplers._Batch([g], [y.size]), accept)
    computed = samplers._acceptance(y, samplers._Batch([g, samplers._sigma2(Fraction(2**40))], [y.size, 0]))
    assert looked_up.tobytes() == computed.tobytes()


def test_tables_do_not_change_the_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs long enough for the tables, next to scales too large for one and across chunks, give the draws
    computed without them."""
    def sample() -> list[int]:
        rng = SeededRandomSource(3)
        laplace = discrete_laplace_batch([Fraction(7, 2), 2**30 + 7, 10], [30_000, 9000, 5000], rng)
        gaussian = discrete_gaussian_batch([Fraction(9, 2), 2**40], [6000, 6000], rng)
        return np.concatenate(laplace + gaussian).tolist()
    with_tables = sample()
    monkeypatch.setattr(samplers, "_threshold_table", lambda s: None)
    monkeypatch.setattr(samplers, "_acceptance_table", lambda g: None)
    assert sample() == with_tables


def test_bulk_sampling_never_takes_the_per_cell_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """200k mixed draws: every decision is made by the vectorised fast path (no LazyUniform, no bounds)."""
    def forbidden(*args: Any) -> Any:
        raise AssertionError("per-cell exact path taken")

    monkeypatch.setattr(samplers, "LazyUniform", forbidden)
    a = discrete_laplace_batch([Fraction(1, 3), 10, 2**30 + 7], [50_000, 50_000, 50_000], SeededRandomSource(9))
    b = discrete_gaussian_batch([Fraction(1, 4), 50, 2**40], [20_000, 20_000, 10_000], SeededRandomSource(9))
    assert [z.size for z in a + b] == [50_000] * 3 + [20_000, 20_000, 10_000]


# ------------------------------------------------------------------------------------ sources agree


@pytest.mark.parametrize("sample", [
    lambda rng: bernoulli_exp(Fraction(1, 3), 300, rng),
    lambda rng: discrete_laplace(Fraction(7, 2), 300, rng),
    lambda rng: discrete_laplace(2**30 + 7, 300, rng),
    lambda rng: discrete_gaussian(Fraction(9, 2), 300, rng),
    lambda rng: np.concatenate(discrete_gaussian_batch([Fraction(1, 4), 2**40], [100, 100], rng)),
])
def test_system_and_seeded_sources_consume_words_alike(sample: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS source fed PCG64's words gives the seeded source's draws: both are read 64 bits at a time."""
    stream = np.random.PCG64(21)
    monkeypatch.setattr(os, "urandom", lambda n: stream.random_raw(n // 8).astype("<u8").tobytes())
    assert sample(SystemRandomSource()).tolist() == sample(SeededRandomSource(21)).tolist()


# ------------------------------------------------- found by review (fixed; the messages say what broke)

# Regression (negation): exp_neg_bounds negates with Decimal's unary minus (-x_hi, -x_lo), which rounds to the
# GLOBAL context (28 digits by default): its 40+-digit bounds exclude exp(-x) by ~1e-28 relative, so the exact
# fallback decides U < p' for p' != p. Fix: ctx.exp(x_hi.copy_negate()), ctx.exp(x_lo.copy_negate())
# Regression (global context): samplers._scale uses ctx.exp(-inv) and ctx.multiply(-inv, 2**k): the unary minus
# rounds in the global decimal context, so an application's getcontext().prec = 3 makes q, first, r and x1 wrong
# by ~1e-4 and the fast path certifies wrong decisions (and lru_cache keeps them). Fix: inv.copy_negate() here and
# in exp_neg_bounds; build the table context with decimal.Context(...)
# Regression (huge x): exp_neg_bounds(x) for huge x turns Decimal bounds with exponent about -x/ln 10 into
# Fractions (for x >= 2^899, Decimal underflows to 0 and next_plus gives 1E-(10^18): Fraction() never returns):
# sigma2 < 2^-900 hangs on every draw, and u = 0 hangs bernoulli_exp(10**9). Fix: in LazyUniform/exp_neg_bounds
# decide from the Decimal's adjusted() exponent (hi <= 10^(adjusted+1) < 2^-bits) or clamp hi to a power of two
# 2^-n with n = bits + 64 before any Fraction is built



def test_exp_neg_bounds_enclose_the_truth() -> None:
    wide = decimal.Context(prec=400)
    for x in (Fraction(1, 3), Fraction(2, 7), Fraction(10**30 + 1, 10**30), Fraction(55, 7)):
        truth = Fraction(wide.exp(wide.divide(Decimal(-x.numerator), Decimal(x.denominator))))
        for digits in (40, 80, 160):
            lo, hi = certified.exp_neg_bounds(x, digits)
            assert lo <= truth <= hi, (x, digits)
            assert hi - lo <= truth * Fraction(10) ** (3 - digits)


@pytest.mark.parametrize("t", [Fraction(7, 2), Fraction(7, 3)])      # 1/t = 2/7, 3/7: not finite decimals
def test_laplace_straddling_cell_within_2_to_minus_120(t: Fraction) -> None:
    """U within 2⁻¹²⁰ of c·q: Decimal bounds of 40+ digits must still decide it right."""
    threshold = _C.multiply(_c(t), _exp_neg(1 / t))
    for side in (-1, 1):
        words, u = _straddle_words(threshold, 7, side, sign=0)
        assert int(discrete_laplace(t, 1, _Words(words))[0]) == (1 if u < Fraction(threshold) else 0)


def test_bernoulli_straddling_cell_within_2_to_minus_120() -> None:
    x = Fraction(1, 3)
    for side in (-1, 1):
        words, u = _straddle_words(_exp_neg(x), 7, side, sign=0)
        assert bool(bernoulli_exp(x, 1, _Words(words))[0]) == (u < Fraction(_exp_neg(x)))


def test_samplers_ignore_the_global_decimal_context() -> None:
    """An application's decimal precision must not change the noise: the float constants are cached per scale."""
    t = Fraction(7, 2)
    cells = _laplace_cells(t)
    big = cells[cells >= 2**40]
    u = np.concatenate([big + s * ((big >> 20) + 1) for s in (-1, 1)])     # 2⁻²⁰ (relative) from a threshold
    expected = _magnitude_ref(cells, u).tolist()
    samplers._scale.cache_clear()
    try:
        with decimal.localcontext() as ctx:
            ctx.prec = 3
            z = discrete_laplace(t, u.size, _Words(u))
            lo, hi = certified.exp_neg_bounds(Fraction(2, 7), 40)
    finally:
        samplers._scale.cache_clear()
    assert z.tolist() == expected
    assert lo <= Fraction(_exp_neg(Fraction(2, 7))) <= hi

# Regression (tiny scale): for t < 2^-1075, _scale stores inv_step = t/K = 0.0 and x1 = inf, so _coarse's guess is
# ceil((-log U - inf) * 0) = NaN, cast to int64 as -2^63; every draw returns -2^63 (should be 0 but with
# probability < 2^-10^300). Fix: clamp the _Scale floats to finite values (e.g. x1, step <= 2^100) or
# np.nan_to_num(guess_f, nan=0.0)


def test_laplace_scale_below_the_float_range_is_zero() -> None:
    for t in (Fraction(1, 2**1030), Fraction(1, 2**1100), Fraction(1, 10**400)):
        assert discrete_laplace_batch([t, 3], [500, 5], SeededRandomSource(0))[0].tolist() == [0] * 500, t


@pytest.mark.slow
def test_huge_exponents_in_the_exact_path_finish() -> None:
    """σ² < 2⁻⁹⁰⁰ sends every acceptance to the exact path with x ≈ 1/(2σ²); u = 0 does so for any huge x.

    (U's first three words are zero here, U < 2⁻¹⁹⁰, and random after: with zeros forever U = 0 < exp(−10⁹),
    which no exact comparison can certify before reading ~1.4·10⁹ bits.)
    """
    script = (
        "from fractions import Fraction\n"
        "import numpy as np\n"
        "from dpframe.noise import SeededRandomSource, discrete_gaussian, bernoulli_exp\n"
        "class W(SeededRandomSource):\n"
        "    zeros = 3\n"
        "    def random_uint64(self, size):\n"
        "        out = super().random_uint64(size)\n"
        "        out[:self.zeros] = 0\n"
        "        self.zeros = max(0, self.zeros - size)\n"
        "        return out\n"
        "assert not discrete_gaussian(Fraction(1, 2**901), 50, SeededRandomSource(0)).any()\n"
        "assert not bernoulli_exp(Fraction(10**9), 1, W(0))[0]\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


# ------------------------------------------------------------------------------------ slow statistics


def _g_test(samples: np.ndarray, xs: np.ndarray, pmf: np.ndarray) -> float:
    """G-test p-value against a pmf on xs (tails merged, bins with expected count ≥ 20)."""
    n = samples.size
    core = np.flatnonzero(pmf * n >= 20)
    lo, hi = int(xs[core[0]]), int(xs[core[-1]])
    expected = np.concatenate([[pmf[xs < lo].sum()], pmf[(xs >= lo) & (xs <= hi)], [pmf[xs > hi].sum()]]) * n
    observed = np.concatenate([[np.count_nonzero(samples < lo)],
                               np.bincount(samples[(samples >= lo) & (samples <= hi)] - lo, minlength=hi - lo + 1),
                               [np.count_nonzero(samples > hi)]])
    keep = expected > 0
    assert observed[~keep].sum() == 0
    return float(stats.power_divergence(observed[keep], expected[keep] * n / expected[keep].sum(),
                                        lambda_="log-likelihood").pvalue)


def _exact_pmf(log_w: Any, half: int) -> tuple[np.ndarray, np.ndarray]:
    xs = np.arange(-half, half + 1)
    w = np.array([float(_exp_neg(-log_w(int(x)))) for x in xs])   # Decimal: no underflow surprises
    return xs, w / w.sum()


@pytest.mark.slow
@pytest.mark.parametrize("t", [Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(10)])
def test_laplace_g_test_2m(t: Fraction) -> None:
    z = np.concatenate(discrete_laplace_batch([t, 1], [2_000_000, 5], SystemRandomSource()))[:2_000_000]
    xs, pmf = _exact_pmf(lambda x: -Fraction(abs(x)) / t, int(60 * t) + 40)
    assert _g_test(z, xs, pmf) > P_FLOOR


@pytest.mark.slow
@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(1), Fraction(9, 2), Fraction(50)])
def test_gaussian_g_test_2m(sigma2: Fraction) -> None:
    z = np.concatenate(discrete_gaussian_batch([sigma2, 3], [2_000_000, 5], SystemRandomSource()))[:2_000_000]
    xs, pmf = _exact_pmf(lambda x: -Fraction(x * x) / (2 * sigma2), int(12 * math.sqrt(sigma2)) + 20)
    assert _g_test(z, xs, pmf) > P_FLOOR


@pytest.mark.slow
def test_split_laplace_low_part_distribution() -> None:
    """Given M' ≥ 1, L = (|Z| − 1) mod K has P[L < a] = (1 − q^a)/(1 − q^K): 32 exact bins, 2M draws."""
    t = Fraction(2**30 + 7)
    big_k = 2 ** samplers._scale(t).k
    z = np.abs(discrete_laplace(t, 2_000_000, SystemRandomSource()))
    low = (z[z > 0] - 1) % big_k
    edges = np.arange(33) * (big_k // 32)
    q = math.exp(-1 / float(t))
    cdf = (1 - q ** edges.astype(float)) / (1 - q**big_k)
    observed = np.histogram(low, bins=edges)[0]
    assert stats.chisquare(observed, np.diff(cdf) * low.size).pvalue > P_FLOOR
    # and the coarse part: P[|Z| ≥ 1 + K·j] = c·q^(1 + K·j), 12 bins of the magnitude
    qk = [float(_C.multiply(_c(t), _exp_neg(Fraction(1 + big_k * j) / t))) for j in range(0, 44001, 4000)]
    counts = [np.count_nonzero(z >= 1 + big_k * j) for j in range(0, 44001, 4000)]
    tail = np.array([1.0, *qk, 0.0])
    got = np.array([z.size, *counts, 0])
    assert stats.chisquare(-np.diff(got), -np.diff(tail) * z.size).pvalue > P_FLOOR
