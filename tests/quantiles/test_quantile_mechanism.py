"""The EM quantile and the joint recursive split: exact pmfs (brute force) vs sampled, privacy on neighbours."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction as F

import numpy as np
import pytest
from dpframe_quantiles import em
from dpframe_quantiles.em import Segments, _count, depth, joint_quantiles, rank_error_bound, scale
from scipy import stats as sps

from dpframe.mechanism import SortedCodes
from dpframe.noise import SeededRandomSource, SystemRandomSource

# ------------------------------------------------------------------------- brute-force reference


def em_pmf(data: list[int], lo: int, hi: int, q: F, eps: F, m: int) -> dict[int, float]:
    """P[z] ∝ exp(ε·u(z)/(2Δ)), u(z) = −max(L(z) − q·n, q·n − C(z), 0), Δ = m·max(q, 1 − q), every z in [lo, hi]."""
    n = len(data)
    delta = m * max(q, 1 - q)
    logits = {}
    for z in range(lo, hi + 1):
        below, upto = sum(x < z for x in data), sum(x <= z for x in data)
        logits[z] = -float(eps) * max(below - float(q) * n, float(q) * n - upto, 0) / (2 * float(delta))
    top = max(logits.values())
    w = {z: math.exp(v - top) for z, v in logits.items()}
    total = sum(w.values())
    return {z: v / total for z, v in w.items()}


SPREAD = 3
"""Tie-broken codes per code in the brute-force tests (production: ``em.tie_spread``, 2²⁰): small enough to
enumerate, and runs of 3 or more ties (saturated at the top code) are exercised too."""


def tie_broken(data: list[int], spread: int) -> list[int]:
    """The j-th copy of x (sorted order) as x·M + min(j, M − 1)."""
    seen: Counter[int] = Counter()
    out = []
    for x in sorted(data):
        out.append(x * spread + min(seen[x], spread - 1))
        seen[x] += 1
    return out


def joint_pmf(data: list[int], lo: int, hi: int, qs: list[F], eps0: F, m: int,
              spread: int = SPREAD) -> dict[tuple[int, ...], float]:
    """The recursive split's exact output distribution, by enumerating every branch.

    Splits draw a tie-broken code e (the EM over [lo·M, hi·M + M − 1]), send codes ≤ e left and release
    ⌊e/M⌋; a node without sub-problems draws on its rows' plain codes over [⌊lo/M⌋, ⌊hi/M⌋].
    """
    return _joint_pmf(tie_broken(data, spread), lo * spread, hi * spread + spread - 1, qs, eps0, m, spread)


def _joint_pmf(codes: list[int], lo: int, hi: int, qs: list[F], eps0: F, m: int,
               spread: int) -> dict[tuple[int, ...], float]:
    if not qs:
        return {(): 1.0}
    mid = len(qs) // 2
    p = qs[mid]
    lefts, rights = [x / p for x in qs[:mid]], [(x - p) / (1 - p) for x in qs[mid + 1:]]
    if not lefts and not rights:
        plain = em_pmf([x // spread for x in codes], lo // spread, hi // spread, p, eps0, m)
        return {(z,): pz for z, pz in plain.items()}
    out: dict[tuple[int, ...], float] = {}
    for e, pe in em_pmf(codes, lo, hi, p, eps0, m).items():
        left = _joint_pmf([x for x in codes if x <= e], lo, e, lefts, eps0, m, spread)
        right = _joint_pmf([x for x in codes if x > e], e, hi, rights, eps0, m, spread)
        for a, pa in left.items():
            for b, pb in right.items():
                key = (*a, e // spread, *b)
                out[key] = out.get(key, 0.0) + pe * pa * pb
    return out


def sample(data: list[int], size: int, qs: list[F], eps0: F, m: int, draws: int, seed: int) -> Counter[tuple[int, ...]]:
    """``draws`` independent releases, vectorised as ``draws`` identical groups."""
    groups = [np.array(sorted(data), dtype=np.int64)] * draws
    codes = joint_quantiles(groups, size, qs, eps0, m, SeededRandomSource(seed), spread=SPREAD)
    return Counter(map(tuple, codes.tolist()))


def chi2_pvalue(counts: Counter[tuple[int, ...]], pmf: dict[tuple[int, ...], float]) -> float:
    assert set(counts) <= {k for k, v in pmf.items() if v > 0}, "an output of probability 0 was drawn"
    keys = sorted(pmf)
    n = sum(counts.values())
    observed = np.array([counts.get(k, 0) for k in keys], dtype=float)
    expected = np.array([pmf[k] * n for k in keys])
    # pool cells with small expectation so the χ² approximation holds
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return float(sps.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


# ------------------------------------------------------------------------------------------ tests

D = [1, 2, 2, 5, 6]
NEIGHBOURS = [D, D + [0], D + [7], D[:-1], [2, 2, 5, 6], D + [2], [1, 2, 5, 6]]   # ties added and removed too


def test_count_per_segment() -> None:
    values = SortedCodes.of([np.array([1, 2, 2, 5]), np.array([3, 3])])
    seg = Segments(np.array([0, 0, 4, 6]), np.array([4, 4, 6, 6]), np.zeros(4, dtype=np.int64), np.full(4, 9))
    assert _count(values, seg, np.array([2, 0, 3, 7]), strict=False).tolist() == [3, 0, 2, 0]
    assert _count(values, seg, np.array([2, 0, 3, 7]), strict=True).tolist() == [1, 0, 0, 0]


def test_tied_data_give_the_tied_value() -> None:
    """A run holding the target rank scores 0: integer data with many ties get the value, not the gap after it."""
    data = np.repeat(np.arange(18, 90), 300)
    codes = joint_quantiles([data] * 200, 2**40, [F(1, 100), F(99, 100)], F(1, 2), 1, SeededRandomSource(3))
    assert (codes[:, 0] == 18).mean() > 0.9 and (codes[:, 1] == 89).mean() > 0.9


@pytest.mark.parametrize("qs", [[F(1, 2)], pytest.param([F(1, 5), F(3, 5)], marks=pytest.mark.slow),
                                pytest.param([F(0), F(1)], marks=pytest.mark.slow)])
def test_envelope_rejection_path_is_exact(monkeypatch: pytest.MonkeyPatch, qs: list[F]) -> None:
    """With no window every block outside the reference block goes through the envelopes and the
    rejection step: the output distribution must still be the exact EM's."""
    monkeypatch.setattr(em, "window", lambda s, size: 0)
    data = [1, 2, 2, 2, 5, 6, 6, 9]
    pmf = joint_pmf(data, 0, 11, qs, F(1), 1)
    counts = sample(data, 12, qs, F(1), 1, 10_000, seed=len(qs))
    assert chi2_pvalue(counts, pmf) > 1e-4


@pytest.mark.parametrize(("core", "wide", "qs"), [(4, 16, [F(1, 2)]), (8, 40, [F(1, 4)]), (8, 30, [F(1, 3), F(3, 4)]),
                                                (20, 60, [F(9, 10)]), (1, 6, [F(1, 2)])])
def test_envelope_pieces_are_exact(monkeypatch: pytest.MonkeyPatch, core: int, wide: int, qs: list[F]) -> None:
    """A narrow core and many envelope pieces (each tested and often rejected): still the exact EM."""
    monkeypatch.setattr(em, "core_window", lambda s: core)
    monkeypatch.setattr(em, "window", lambda s, size: wide)
    tests: list[int] = []
    real = em.bernoulli_exp_ratio

    def counted(num: np.ndarray, den: int, rng: SeededRandomSource) -> np.ndarray:
        out: np.ndarray = real(num, den, rng)
        tests.append(int((~out).sum()))
        return out
    monkeypatch.setattr(em, "bernoulli_exp_ratio", counted)
    data = [0, 1, 2, 2, 2, 5, 6, 6, 9, 30, 31, 31, 40]
    pmf = joint_pmf(data, 0, 44, qs, F(1), 1)
    counts = sample(data, 45, qs, F(1), 1, 10_000, seed=core * 100 + wide)
    assert chi2_pvalue(counts, pmf) > 1e-4
    # pieces were proposed and tested (rejections need pieces of ≥ 2 ranks: 1-rank pieces are exact)
    assert len(tests) >= 1 and (sum(tests) > 100 or core < 2 * max(q.denominator for q in qs))


@pytest.mark.parametrize(("q", "m"), [(F(1, 2), 1), (F(1, 4), 1), (F(9, 10), 2), (F(0), 1), (F(1), 1)])
def test_single_quantile_matches_exact_pmf(q: F, m: int) -> None:
    pmf = em_pmf(D, 0, 7, q, F(1), m)
    counts = sample(D, 8, [q], F(1), m, 20_000, seed=int(q * 100) + m)
    assert chi2_pvalue(counts, {(z,): p for z, p in pmf.items()}) > 1e-4


def test_several_tries_per_round_keep_the_exact_pmf(monkeypatch: pytest.MonkeyPatch) -> None:
    """Few pending segments get several proposals in one round (the first accepted one is kept): with a
    narrow core every round rejects often, and small calls take that path from the first round."""
    monkeypatch.setattr(em, "core_window", lambda s: 1)
    monkeypatch.setattr(em, "window", lambda s, size: 8)
    data = [0, 1, 2, 2, 2, 5, 6, 6, 9, 30, 31, 31, 40]
    pmf = em_pmf(data, 0, 44, F(1, 2), F(1), 1)
    counts: Counter[tuple[int, ...]] = Counter()
    rng = SeededRandomSource(11)
    for _ in range(200):                 # 200 calls of 60 identical groups: 8 tries per segment and round
        out = joint_quantiles([np.array(data, dtype=np.int64)] * 60, 45, [F(1, 2)], F(1), 1, rng)
        counts.update(map(tuple, out.tolist()))
    assert chi2_pvalue(counts, {(z,): p for z, p in pmf.items()}) > 1e-4


def test_joint_quantiles_match_exact_pmf() -> None:
    qs = [F(1, 4), F(1, 2), F(3, 4)]
    pmf = joint_pmf(D, 0, 7, qs, F(1, 2), 1)
    assert math.isclose(sum(pmf.values()), 1.0)
    assert all(list(k) == sorted(k) for k, v in pmf.items() if v > 0)   # non-decreasing in q
    counts = sample(D, 8, qs, F(1, 2), 1, 30_000, seed=5)
    assert chi2_pvalue(counts, pmf) > 1e-4


@pytest.mark.parametrize("workers", [None, 3])
def test_joint_quantiles_on_the_thread_pool_match_exact_pmf(workers: int | None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS CSPRNG's path: chunks of segments drawn on 4 threads (``workers`` at once; None: all), the
    rejected ones redrawn in later rounds — 30,000 identical groups are 30,000 independent releases.

    (Random, unlike the seeded tests above: a false failure has probability about 10⁻⁴.)
    """
    monkeypatch.setenv("DPFRAME_THREADS", "4")
    monkeypatch.setattr(em, "WORKERS", workers)
    qs = [F(1, 4), F(1, 2), F(3, 4)]
    groups = [np.array(sorted(D), dtype=np.int64)] * 30_000
    codes = joint_quantiles(groups, 8, qs, F(1, 2), 1, SystemRandomSource(), spread=SPREAD)
    assert chi2_pvalue(Counter(map(tuple, codes.tolist())), joint_pmf(D, 0, 7, qs, F(1, 2), 1)) > 1e-4


@pytest.mark.parametrize("qs", [[F(1, 2)], [F(1, 10), F(9, 10)], [F(1, 4), F(1, 2), F(3, 4)],
                                [F(1, 5), F(2, 5), F(3, 5), F(4, 5)]])
def test_exact_privacy_loss_on_neighbours(qs: list[F]) -> None:
    """max |ln P[o|D] − ln P[o|D']| over outputs and add/remove neighbours ≤ ε = depth·ε₀ (exact pmfs)."""
    eps0 = F(1, 3)
    budget = float(eps0 * depth(len(qs)))
    pmfs = [joint_pmf(d, 0, 7, qs, eps0, 1) for d in NEIGHBOURS]
    worst = 0.0
    for other in pmfs[1:]:
        for o in pmfs[0]:
            worst = max(worst, abs(math.log(pmfs[0][o]) - math.log(other[o])))
    assert worst <= budget + 1e-9
    assert worst > 0.2 * budget     # the bound is not vacuous


@pytest.mark.parametrize("qs", [[F(1, 4), F(1, 2), F(3, 4)], [F(1, 3), F(2, 3)]])
def test_exact_privacy_loss_on_tied_neighbours(qs: list[F]) -> None:
    """Heavy ties (runs longer than the tie spread, so the saturated top code is reached): adding or removing a
    row inside, below or above a run — which shifts the run and every tie-broken code above it in the group's
    order — still moves every output's log-probability by ≤ depth·ε₀ (exact pmfs)."""
    eps0 = F(1, 3)
    tied = [0, 0, 0, 0, 2, 2, 5]
    pmfs = [joint_pmf(d, 0, 7, qs, eps0, 1) for d in
            (tied, tied + [0], tied + [2], tied + [1], tied + [7], tied[1:], tied[:4] + tied[5:])]
    worst = max(abs(math.log(pmfs[0][o]) - math.log(other[o])) for other in pmfs[1:] for o in pmfs[0])
    assert worst <= float(eps0 * depth(len(qs))) + 1e-9


def test_tie_broken_codes_are_neighbour_preserving() -> None:
    """Adding one row to a group adds exactly one tie-broken code and keeps every other (as multisets), for
    random tied groups, added values and spreads; the codes are non-decreasing, as the sampler needs."""
    rng = np.random.default_rng(8)
    for _ in range(150):
        spread = int(rng.integers(1, 5))
        groups = [np.sort(rng.integers(0, 4, rng.integers(0, 9))) for _ in range(3)]
        g, x = int(rng.integers(0, 3)), int(rng.integers(0, 4))
        bigger = [np.sort(np.append(c, x)) if i == g else c for i, c in enumerate(groups)]

        def broken(gs: list[np.ndarray]) -> list[list[int]]:
            codes = em.TieBroken(SortedCodes.of(gs), spread)
            flat = codes.at(np.arange(sum(c.size for c in gs), dtype=np.int64)).tolist()
            out, start = [], 0
            for c in gs:
                out.append(flat[start:start + c.size])
                start += c.size
            return out
        before, after = broken(groups), broken(bigger)
        assert all(a == sorted(a) for a in after)
        assert after[:g] + after[g + 1:] == before[:g] + before[g + 1:]
        assert sorted((Counter(after[g]) - Counter(before[g])).elements()) == [x * spread + min(
            int(np.sum(groups[g] == x)), spread - 1)]
        assert not Counter(before[g]) - Counter(after[g])
        # count() agrees with the listed codes, in sub-ranges of a group, strict and not
        codes = em.TieBroken(SortedCodes.of(bigger), spread)
        starts = np.cumsum([0, *[c.size for c in bigger[:-1]]])
        lo = starts[g] + int(rng.integers(0, bigger[g].size + 1))
        hi = int(rng.integers(lo, starts[g] + bigger[g].size + 1))
        flat = [c for part in after for c in part]
        for e in range(0, 4 * spread + 1):
            for strict in (True, False):
                got = codes.count(np.array([lo]), np.array([hi]), np.array([e]), strict=strict)[0]
                assert got == sum((c < e) if strict else (c <= e) for c in flat[lo:hi]), (lo, hi, e, strict)


def test_two_rows_per_unit_privacy() -> None:
    """With max_rows = 2 the calibration covers adding two rows of one unit (in either sub-problem)."""
    eps0 = F(1, 2)
    qs = [F(1, 3), F(2, 3)]
    base = joint_pmf(D, 0, 7, qs, eps0, 2)
    for extra in ([0, 7], [3, 3], [0, 0]):
        other = joint_pmf(D + extra, 0, 7, qs, eps0, 2)
        worst = max(abs(math.log(base[o]) - math.log(other[o])) for o in base)
        assert worst <= float(eps0 * depth(2)) + 1e-9


def test_scale_and_depth_hand_checked() -> None:
    assert scale(F(1, 2), F(1), 1) == F(1, 2)          # ε/(2·1·max(1, 1))
    assert scale(F(1, 10), F(1), 1) == F(1, 18)        # ε/(2·max(1, 9))
    assert scale(F(3, 4), F(2), 3) == F(1, 9)          # 2/(2·3·3)
    assert [depth(k) for k in range(1, 10)] == [1, 2, 2, 3, 3, 3, 3, 4, 4]


def test_accuracy_within_stated_bound() -> None:
    rng = np.random.default_rng(0)
    data = np.sort(rng.integers(0, 2**20, 2_000))
    qs = [F(k, 10) for k in range(1, 10)]
    eps0 = F(1, 4)
    codes = joint_quantiles([data] * 40, 2**20, qs, eps0, 1, SeededRandomSource(9))
    ranks = np.searchsorted(data, codes, side="right")
    errors = np.abs(ranks - np.array([float(q) * 2_000 for q in qs]))
    bound = rank_error_bound(2**20, 9, eps0, 1, 0.05)
    assert np.mean(errors <= bound) >= 0.95
    assert np.median(errors) < bound / 4        # typical errors are well inside the bound


def test_empty_group_is_uniform_on_the_domain() -> None:
    counts = sample([], 6, [F(1, 2)], F(1), 1, 12_000, seed=2)
    assert set(counts) == {(z,) for z in range(6)}
    assert sps.chisquare([counts[(z,)] for z in range(6)]).pvalue > 1e-4


@pytest.mark.parametrize(("spread", "expected"), [(None, "c6699b07f7484e3ef088c279766c6f66"),
                                                  (1, "0eef63ccff71583afd3ebb3b19fba0b8")])
def test_seeded_releases_and_stream_are_pinned(spread: int | None, expected: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded run's releases and how many random words it draws stay those of the reference code (r49a).

    Speed work on the EM (``em._propose``, ``exponential_index_grouped``) must keep the law *and* the stream:
    the same words consumed in the same order, the same candidates. The digest covers ties, empty and
    single-code groups, a 2⁶² domain, a tiny ε (object-int acceptance tests) and partial codes (completion);
    it was computed with the code before the r49a changes and again after them. Splits on tie-broken codes
    (r55c) changed it; with one tie-broken code per code (``tie_spread`` 1) the run is the pre-r55c one, digest
    and stream alike: the tie-break is the only change.
    """
    import hashlib

    if spread is not None:
        monkeypatch.setattr(em, "tie_spread", lambda size: spread)

    rng = np.random.default_rng(49)
    digest = hashlib.sha256()
    for i in range(12):
        size = [2, 1000, 2**20, 2**62][i % 4]
        groups = []
        for _ in range(int(rng.integers(1, 300))):
            n = int(rng.poisson([0.5, 5, 60][i % 3]))
            groups.append(np.sort(rng.integers(0, min(size, 4) if i % 5 == 1 else size, n)).astype(np.int64))
        qs = [F(j, 10) for j in range(1, 10)] if i % 2 else [F(1, 2)] if i % 3 else [F(1, 100), F(1, 3), F(99, 100)]
        eps = F(1, 2**16) if i == 7 else F(int(rng.integers(1, 300)), 100)
        full = SortedCodes.of(groups)
        codes = full
        if i % 3 == 2 and full.total:           # partial codes: every other position known
            known = np.arange(0, full.total, 2)
            def complete(g: list[np.ndarray] = groups) -> list[np.ndarray]:
                return g
            codes = SortedCodes(full.sizes, known, np.concatenate(groups)[known], complete=complete)
        source = SeededRandomSource(i)
        digest.update(joint_quantiles(codes, size, qs, eps, [1, 3][i % 2], source).tobytes())
        digest.update(source.random_uint64(1).tobytes())          # the stream's position after the run
    assert digest.hexdigest()[:32] == expected
