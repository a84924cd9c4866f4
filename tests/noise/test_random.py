"""Random sources: exact uniform draws, permutations, determinism of the seeded source, privacy flag."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpframe.noise import RandomSource, SeededRandomSource, SystemRandomSource, default_source

P_FLOOR = 1e-6  # reject only at p < 1e-6, so a correct implementation essentially never fails


def _uniformity_p(values: np.ndarray, bound: int) -> float:
    counts = np.bincount(values, minlength=bound)
    assert counts.size == bound, "values outside [0, bound)"
    return float(stats.chisquare(counts).pvalue)


# ----------------------------------------------------------------------------------------- sources


def test_privacy_flags_and_default_source() -> None:
    assert SystemRandomSource().private is True
    assert SeededRandomSource(0).private is False
    assert isinstance(default_source(), SystemRandomSource)
    seeded = default_source(5)
    assert isinstance(seeded, SeededRandomSource) and seeded.private is False
    assert isinstance(SystemRandomSource(), RandomSource)
    assert isinstance(SeededRandomSource(1), RandomSource)
    assert "tests only" in (SeededRandomSource.__doc__ or "")


def test_system_source_reads_os_urandom(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake_urandom(n: int) -> bytes:
        calls.append(n)
        return bytes((37 * i + 11) % 256 for i in range(n))

    monkeypatch.setattr(os, "urandom", fake_urandom)
    words = SystemRandomSource().random_uint64(3)
    assert calls == [24]
    assert words.tolist() == np.frombuffer(fake_urandom(24), dtype=np.uint64).tolist()
    assert words.flags.writeable


def test_random_uint64_shape_and_dtype() -> None:
    for src in (SystemRandomSource(), SeededRandomSource(3)):
        w = src.random_uint64(1000)
        assert w.dtype == np.uint64 and w.shape == (1000,)
        assert len(set(w.tolist())) == 1000  # 64-bit words: a collision would be astronomically unlikely
        assert src.random_uint64(0).shape == (0,)


def test_system_source_bits_are_balanced() -> None:
    w = SystemRandomSource().random_uint64(20_000)
    ones = int(np.unpackbits(w.view(np.uint8)).sum())
    assert stats.binomtest(ones, 64 * 20_000, 0.5).pvalue > P_FLOOR


def test_seeded_source_is_reproducible_and_seed_dependent() -> None:
    a, b, c = SeededRandomSource(11), SeededRandomSource(11), SeededRandomSource(12)
    assert a.random_uint64(50).tolist() == b.random_uint64(50).tolist()
    assert a.uniform_below(1000, 50).tolist() == b.uniform_below(1000, 50).tolist()
    assert a.permutation(30).tolist() == b.permutation(30).tolist()
    assert a.seed_for_engine() == b.seed_for_engine()
    assert SeededRandomSource(11).random_uint64(50).tolist() != c.random_uint64(50).tolist()


def test_seed_validation() -> None:
    with pytest.raises(ValueError, match="seed"):
        SeededRandomSource(-1)
    with pytest.raises(TypeError, match="seed"):
        SeededRandomSource(1.5)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- uniform_below


@pytest.mark.parametrize("bound", [2, 3, 7, 10, 256, 257, 1000, 70_000])
def test_uniform_below_small_bounds_are_uniform(bound: int) -> None:
    values = SeededRandomSource(bound).uniform_below(bound, 200_000)
    assert values.dtype == np.int64
    assert _uniformity_p(values, bound) > P_FLOOR


@pytest.mark.parametrize("bound", [3, 7, 10])
def test_uniform_below_system_source_is_uniform(bound: int) -> None:
    assert _uniformity_p(SystemRandomSource().uniform_below(bound, 100_000), bound) > P_FLOOR


@pytest.mark.parametrize("bound", [3 * 2**40, 2**63 - 1, 2**63, 2**62 + 2**63, 2**64 - 1, 2**64,
                                   2**64 + 1, 3 * 2**100, 2**200 + 12345])
def test_uniform_below_large_bounds(bound: int) -> None:
    """Correct range and dtype near and above 2**63, and no bias towards the low end of the range."""
    n = 60_000
    values = SeededRandomSource(bound % 1000).uniform_below(bound, n)
    as_ints = [int(v) for v in values]
    assert values.dtype == (np.int64 if bound <= 2**63 else object)
    assert all(0 <= v < bound for v in as_ints)
    # Split [0, bound) into thirds; each must get 1/3 of the draws (a modulo bias or a wrong rejection
    # region would skew this for bounds like 3·2^62 and 3·2^100).
    thirds = np.bincount([3 * v // bound for v in as_ints], minlength=3)
    assert stats.chisquare(thirds).pvalue > P_FLOOR


@pytest.mark.parametrize("bound", [2**20, 2**40, 2**63])
def test_uniform_below_powers_of_two_use_all_bits(bound: int) -> None:
    values = SeededRandomSource(9).uniform_below(bound, 50_000).astype(np.uint64)
    bits = (values[:, None] >> np.arange(bound.bit_length() - 1, dtype=np.uint64)) & np.uint64(1)
    ones = bits.sum(axis=0)
    for count in ones:
        assert stats.binomtest(int(count), 50_000, 0.5).pvalue > P_FLOOR


@settings(max_examples=60, deadline=None)
@given(bound=st.integers(1, 2**130), size=st.integers(0, 40), seed=st.integers(0, 2**32))
def test_uniform_below_range_property(bound: int, size: int, seed: int) -> None:
    values = SeededRandomSource(seed).uniform_below(bound, size)
    assert values.shape == (size,)
    assert all(0 <= int(v) < bound for v in values)


def test_uniform_below_bound_one_is_zero() -> None:
    assert SeededRandomSource(0).uniform_below(1, 5).tolist() == [0] * 5


def test_uniform_below_validation() -> None:
    src = SeededRandomSource(0)
    with pytest.raises(ValueError, match="bound"):
        src.uniform_below(0, 5)
    with pytest.raises(ValueError, match="bound"):
        src.uniform_below(-3, 5)
    with pytest.raises(TypeError, match="bound"):
        src.uniform_below(2.5, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size"):
        src.uniform_below(10, -1)
    with pytest.raises(ValueError, match="size"):
        src.random_uint64(-1)
    with pytest.raises(TypeError, match="size"):
        src.random_uint64(1.0)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------- permutation


def test_permutation_is_a_permutation() -> None:
    for src in (SystemRandomSource(), SeededRandomSource(2)):
        for n in (0, 1, 2, 17, 1000):
            perm = src.permutation(n)
            assert perm.dtype == np.int64
            assert sorted(perm.tolist()) == list(range(n))
    with pytest.raises(ValueError, match="n"):
        SeededRandomSource(0).permutation(-1)


def test_permutation_is_uniform() -> None:
    src = SeededRandomSource(21)
    index = {p: i for i, p in enumerate(itertools.permutations(range(4)))}
    counts = np.zeros(len(index), dtype=np.int64)
    for _ in range(24_000):
        counts[index[tuple(src.permutation(4).tolist())]] += 1
    assert stats.chisquare(counts).pvalue > P_FLOOR


def test_permutation_redraws_on_tied_keys() -> None:
    class TieSource(SeededRandomSource):
        """Returns all-equal keys once, then behaves normally."""

        def __init__(self) -> None:
            super().__init__(0)
            self.calls = 0

        def random_uint64(self, size: int) -> np.ndarray:
            self.calls += 1
            if self.calls == 1:
                return np.zeros(size, dtype=np.uint64)
            return super().random_uint64(size)

    src = TieSource()
    perm = src.permutation(10)
    assert src.calls == 2
    assert sorted(perm.tolist()) == list(range(10))


def test_seed_for_engine_range_and_freshness() -> None:
    for src in (SystemRandomSource(), SeededRandomSource(4)):
        seeds = [src.seed_for_engine() for _ in range(50)]
        assert all(isinstance(s, int) and 0 <= s < 2**63 for s in seeds)
        assert len(set(seeds)) == 50
    assert any(SystemRandomSource().seed_for_engine() >= 2**62 for _ in range(64))


def test_no_global_numpy_randomness() -> None:
    np.random.seed(123)
    before = np.random.get_state()[1].copy()  # type: ignore[index]
    SystemRandomSource().uniform_below(10, 100)
    SeededRandomSource(1).permutation(10)
    assert (np.random.get_state()[1] == before).all()  # type: ignore[index]


class _ScriptedWords(SeededRandomSource):
    """Returns a fixed block of words on the first call, zeros afterwards."""

    def __init__(self, first: list[int]) -> None:
        super().__init__(0)
        self.first: list[int] | None = first

    def random_uint64(self, size: int) -> np.ndarray:
        if self.first is None:
            return np.zeros(size, dtype=np.uint64)
        block, self.first = self.first, None
        assert size % len(block) == 0
        return np.array(block * (size // len(block)), dtype=np.uint64)


@pytest.mark.parametrize("bound", [2**64 + 1, 3 * 2**100 + 7, 2**200 + 12345, 2**127 - 1])
def test_uniform_below_rejects_draws_equal_to_bound(bound: int) -> None:
    """Python-int path: a candidate equal to ``bound`` must be redrawn, never returned."""
    nbits = bound.bit_length()
    nwords = -(-nbits // 64)
    combined = bound << (64 * nwords - nbits)  # the words that the sampler turns into `bound`
    block = [(combined >> (64 * i)) & (2**64 - 1) for i in range(nwords)]
    values = _ScriptedWords(block).uniform_below(bound, 3)
    assert [int(v) for v in values] == [0, 0, 0]  # redrawn from zero words
