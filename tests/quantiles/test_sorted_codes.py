"""Partial sorted codes answer exactly as the full sorted array, and the EM draws the same outputs from them."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
from dpframe_quantiles.em import joint_quantiles

from dpframe.mechanism import SortedCodes
from dpframe.noise import SeededRandomSource


def groups_of(rng: np.random.Generator, ngroups: int, max_size: int, span: int) -> list[np.ndarray]:
    return [np.sort(rng.integers(0, span, rng.integers(0, max_size + 1))) for _ in range(ngroups)]


def partial(groups: list[np.ndarray], keep: list[np.ndarray], calls: list[int] | None = None) -> SortedCodes:
    """Known positions ``keep[g]`` (within-group ranks) of each group; completion counts its calls."""
    sizes = [g.size for g in groups]
    starts = np.cumsum([0, *sizes[:-1]])
    positions = np.concatenate([s + k for s, k in zip(starts, keep)]).astype(np.int64)
    values = np.concatenate([g[k] for g, k in zip(groups, keep)]).astype(np.int64)

    def complete() -> list[np.ndarray]:
        if calls is not None:
            calls.append(1)
        return groups
    return SortedCodes(sizes, positions, values, complete)


def random_keep(rng: np.random.Generator, groups: list[np.ndarray]) -> list[np.ndarray]:
    """A random union of a few rank windows per group."""
    out = []
    for g in groups:
        mask = np.zeros(g.size, dtype=bool)
        for _ in range(rng.integers(0, 3)):
            if g.size:
                a = rng.integers(0, g.size)
                mask[a:a + rng.integers(1, g.size + 1)] = True
        out.append(np.flatnonzero(mask))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_partial_codes_answer_as_the_full_array(seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = groups_of(rng, 5, 12, 8)          # small span: many ties, the hard case for counts
    full = SortedCodes.of(groups)
    part = partial(groups, random_keep(rng, groups))
    for _ in range(30):
        g = rng.integers(0, len(groups))
        start = int(full.starts[g]) + rng.integers(0, groups[g].size + 1)
        end = rng.integers(start, int(full.starts[g] + full.sizes[g]) + 1)
        v = rng.integers(-1, 9, 1)
        for strict in (True, False):
            s, e = np.array([start]), np.array([end])
            assert part.count(s, e, v, strict=strict).tolist() == full.count(s, e, v, strict=strict).tolist()
        if end > start:
            pos = np.array([rng.integers(start, end)])
            assert part.at(pos).tolist() == full.at(pos).tolist()


def test_known_ranks_decide_without_completing() -> None:
    calls: list[int] = []
    part = partial([np.array([1, 2, 2, 5, 9, 9])], [np.array([1, 2, 3])], calls)
    assert part.at(np.array([1, 3])).tolist() == [2, 5]
    s, e = np.array([0]), np.array([6])
    assert part.count(s, e, np.array([5]), strict=True).tolist() == [3]     # rank 2 (=2) < 5 ≤ rank 3
    assert part.count(s, e, np.array([2]), strict=False).tolist() == [3]    # rank 2 ≤ 2 < rank 3
    assert calls == []
    assert part.count(s, e, np.array([2]), strict=True).tolist() == [1]     # rank 0 unknown: completes
    assert calls == [1] and part.known
    assert part.at(np.array([5])).tolist() == [9]


def test_a_size_mismatch_on_completion_is_refused() -> None:
    part = SortedCodes([3], [0], [4], complete=lambda: [np.array([4, 5])])
    with pytest.raises(RuntimeError, match="data changed"):
        part.at(np.array([2]))


def test_partial_codes_need_a_completion() -> None:
    with pytest.raises(ValueError, match="complete"):
        SortedCodes([3], [0], [4])


@pytest.mark.parametrize("seed", range(12))
def test_the_mechanism_draws_the_same_outputs_from_partial_codes(seed: int) -> None:
    """Same random source, partial vs full codes: identical releases (completion or not)."""
    rng = np.random.default_rng(100 + seed)
    groups = groups_of(rng, 30, 60, 40 if seed % 2 else 4)
    qs = [F(1, 10), F(1, 2), F(9, 10)] if seed % 3 else [F(1, 2)]
    calls: list[int] = []
    keep = random_keep(rng, groups)
    expected = joint_quantiles(groups, 50, qs, F(1), 1, SeededRandomSource(seed))
    got = joint_quantiles(partial(groups, keep, calls), 50, qs, F(1), 1, SeededRandomSource(seed))
    assert got.tolist() == expected.tolist()
    assert len(calls) <= 1


@pytest.mark.parametrize("seed", range(6))
def test_tie_broken_splits_draw_the_same_outputs_from_partial_codes(seed: int) -> None:
    """Joint quantiles on heavily tied groups (a split reads where a run of ties starts, which may lie outside
    every known window): partial codes that know windows around the targets only give the same releases as the
    full codes, completing at most once."""
    rng = np.random.default_rng(300 + seed)
    groups = [np.sort(np.where(rng.random(n) < share, value, rng.integers(0, 50, n)))
              for n, share, value in ((400, 0.7, 0), (300, 0.5, 49), (200, 0.3, 20), (50, 1.0, 7))]
    qs = [F(1, 10), F(1, 2), F(3, 4), F(9, 10)]
    keep = [np.flatnonzero(np.min(np.abs(np.arange(g.size)[:, None] - np.array([float(q) * g.size for q in qs])),
                                  axis=1) <= 10) for g in groups]
    calls: list[int] = []
    expected = joint_quantiles(groups, 50, qs, F(1), 1, SeededRandomSource(seed))
    got = joint_quantiles(partial(groups, keep, calls), 50, qs, F(1), 1, SeededRandomSource(seed))
    assert got.tolist() == expected.tolist()
    assert len(calls) <= 1


def test_wide_windows_need_no_completion() -> None:
    rng = np.random.default_rng(5)
    data = np.sort(rng.integers(0, 2**20, 200_000))
    keep = np.arange(100_000 - 5_000, 100_000 + 5_000)
    calls: list[int] = []
    for seed in range(20):
        got = joint_quantiles(partial([data], [keep], calls), 2**20, [F(1, 2)], F(1), 1, SeededRandomSource(seed))
        assert got.tolist() == joint_quantiles([data], 2**20, [F(1, 2)], F(1), 1, SeededRandomSource(seed)).tolist()
    assert calls == []
