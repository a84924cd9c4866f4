"""Sparse vector: cost oracles (digest 002 O1/O10), exact output-DP check of Lemma 8 on discrete noise,
the implementation's output law against the exact pmf, refunds, and bad input (nothing charged)."""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.svt import cell_epsilon, entry_epsilon, svt_split
from dpframe.noise import discrete_laplace_tail


def _pmf_dlap(scale: float, support: np.ndarray) -> np.ndarray:
    w = np.exp(-np.abs(support) / scale)
    return w / w.sum()


def svt_pmf(values: list[int], bar: int, delta: int, eps1: float, eps2: float, c: int) -> dict[tuple[bool, ...], float]:
    """Exact law of the SVT answers (analyst asks every query until the c-th 'above')."""
    rho_scale, nu_scale = delta / eps1, 2 * c * delta / eps2
    rhos = np.arange(-int(80 * rho_scale) - 5, int(80 * rho_scale) + 6)
    prho = _pmf_dlap(rho_scale, rhos)
    out: dict[tuple[bool, ...], float] = {}

    def above(i: int, r: int) -> float:
        return discrete_laplace_tail(nu_scale, bar + r - values[i])

    def walk(prefix: tuple[bool, ...], weights: np.ndarray) -> None:
        if sum(prefix) == c or len(prefix) == len(values):
            out[prefix] = float((prho * weights).sum())
            return
        up = np.array([above(len(prefix), int(r)) for r in rhos])
        walk((*prefix, True), weights * up)
        walk((*prefix, False), weights * (1 - up))

    walk((), np.ones(len(rhos)))
    return out


@pytest.mark.parametrize("c", [45_000, 10**6, 10**9])
def test_split_keeps_a_positive_threshold_share_for_many_positives(c: int) -> None:
    eps1, eps2 = svt_split(Fraction(1), c)
    assert eps1 > 0 and eps1 + eps2 == 1
    assert float(eps1) == pytest.approx(max(1 / (1 + (2 * c) ** (2 / 3)), 1e-6), rel=1e-2)


def test_huge_stream_sizes_are_refused_by_name() -> None:
    sess = dp.Session({"t": pl.DataFrame({"u": [0]})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    with pytest.raises(dp.BudgetError) as info:
        sess.sparse_vector(threshold=1, max_positives=10**400, budget=dp.PureDP(1))
    assert info.value.argument == "max_positives" and "401 digits" in str(info.value)
    with pytest.raises(dp.BudgetError) as info:
        sess.target_charging(epsilon=0.5, max_hits=10**5000, delta=1e-6)
    assert info.value.argument == "max_hits"
    assert sess.history().height == 0


def test_oracles_split_cells_and_entries() -> None:
    eps1, eps2 = svt_split(Fraction(1, 2), 20)
    assert float(eps1) == pytest.approx(0.039382262580038824, abs=2e-5)          # O1
    assert eps1 + eps2 == Fraction(1, 2)
    p1, p2 = Fraction(0.039382262580038824), Fraction(0.46061773741996115)
    assert [round(float(cell_epsilon(p1, p2, 20, k)), 5) for k in (0, 10, 20)] == [0.03938, 0.26969, 0.5]
    assert float(entry_epsilon(p2, Fraction(1, 2), 20, 10, True)) == pytest.approx(0.073031, abs=1e-6)  # O10
    assert entry_epsilon(p2, Fraction(1, 2), 20, 10, False) == Fraction(1, 20)


@pytest.mark.parametrize("c", [1, 2])
def test_lemma8_output_dp_on_neighbours_exact(c: int) -> None:
    eps1, eps2 = 0.3, 0.7
    base = (3, 5, 6)
    pmf = functools.cache(lambda values: svt_pmf(list(values), 5, 1, eps1, eps2, c))   # each dataset's law once
    for shift in itertools.product((-1, 0, 1), repeat=3):
        nb = tuple(v + s for v, s in zip(base, shift, strict=True))
        for a, b in ((base, nb), (nb, base)):
            pa, pb = pmf(a), pmf(b)
            assert sum(pa.values()) == pytest.approx(1, abs=1e-9)
            for o, p in pa.items():
                k = sum(o)
                assert p <= math.exp(eps1 + k * eps2 / c) * pb[o] * (1 + 1e-9) + 1e-15
            # ...and the refund is real: the ⊥-only cell is far below the classic ε1 + ε2 worst case.
            worst = max(math.log(p / pb[o]) for o, p in pa.items() if sum(o) == 0)
            assert worst <= eps1 + 1e-9


def test_broken_spec_would_be_caught() -> None:
    # Charging k·ε2/c without ε1 (forgetting the threshold noise) violates the bound somewhere.
    eps1, eps2, c = 0.3, 0.7, 1
    violated = False
    pa = svt_pmf([3, 5, 6], 5, 1, eps1, eps2, c)
    for shift in itertools.product((-1, 0, 1), repeat=3):
        nb = [v + s for v, s in zip([3, 5, 6], shift, strict=True)]
        pb = svt_pmf(nb, 5, 1, eps1, eps2, c)
        violated |= any(p > math.exp(sum(o) * eps2 / c) * pb[o] * (1 + 1e-6) for o, p in pa.items())
    assert violated


def _counts_session(seed: int, budget: dp.Budget = dp.PureDP(100), **kw: object) -> dp.Session:
    data = pl.DataFrame({"g": [0] * 3 + [1] * 5 + [2] * 6})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=budget, seed=seed, **kw)  # type: ignore[arg-type]


def _q(sess: dp.Session, g: int) -> dp.Query:
    return sess.table("t").filter(pl.col("g") == g).agg(dp.len())


def test_implementation_matches_exact_law() -> None:
    from scipy.stats import chisquare

    eps = Fraction(3, 2)
    e1, e2 = svt_split(eps, 1)
    pmf = svt_pmf([3, 5, 6], 5, 1, float(e1), float(e2), 1)
    sess = _counts_session(11, budget=dp.PureDP(10_000))
    counts: dict[tuple[bool, ...], int] = dict.fromkeys(pmf, 0)
    n = 300
    for _ in range(n):
        sv = sess.sparse_vector(threshold=5, max_positives=1, budget=dp.PureDP(eps))
        answers: list[bool] = []
        for g in range(3):
            answers.append(sv.test(_q(sess, g)))
            if sv.closed:
                break
        sv.close()
        counts[tuple(answers)] += 1
    keys = sorted(pmf)
    assert chisquare([counts[k] for k in keys], [n * pmf[k] for k in keys]).pvalue > 1e-4


def test_refund_of_unused_positives_and_halt() -> None:
    sess = _counts_session(1)
    sv = sess.sparse_vector(threshold=1000, max_positives=3, budget=dp.PureDP(1))
    assert sess.spent() == dp.PureDP(1)                 # reserved on open
    assert not any(sv.test(_q(sess, g)) for g in range(3))
    sv.close()
    assert sess.spent() == dp.PureDP(sv.eps1)           # k = 0: only ε1
    assert "0 of 3 positives used; closed" in sv.status()
    sv2 = sess.sparse_vector(threshold=-1000, max_positives=2, budget=dp.PureDP(1))
    assert sv2.test(_q(sess, 0)) and sv2.test(_q(sess, 1))
    assert sv2.closed                                   # halted at the c-th positive
    assert sess.spent() == dp.PureDP(sv.eps1 + 1)
    with pytest.raises(dp.DPFrameError, match="closed"):
        sv2.test(_q(sess, 2))


def test_value_release_reinvests_refund() -> None:
    sess = _counts_session(2)
    with sess.sparse_vector(threshold=4, max_positives=4, budget=dp.PureDP(20), release=dp.PureDP(10)) as sv:
        answers = [sv.test(_q(sess, g)) for g in range(3)]
    assert sorted(sv.values) == [i for i, a in enumerate(answers) if a]
    assert all(isinstance(v, int) for v in sv.values.values())
    k = sv.positives
    assert sess.spent() == dp.PureDP(sv.eps1 + sv.eps2 + 10 if k else sv.eps1)


def test_interleaving_forfeits_the_refund() -> None:
    sess = _counts_session(3)
    sv = sess.sparse_vector(threshold=1000, max_positives=3, budget=dp.PureDP(1))
    sv.test(_q(sess, 0))
    _q(sess, 1).collect(dp.PureDP(Fraction(1, 10)))     # another release while the stream is open
    sv.close()
    assert sess.spent() == dp.PureDP(Fraction(11, 10))


def test_zcdp_session_charges_worst_case_and_refuses_refund() -> None:
    sess = _counts_session(4, budget=dp.ZCDP(1))
    with pytest.raises(dp.BudgetConversionError, match="basic"):
        sess.sparse_vector(threshold=1000, max_positives=3, budget=dp.PureDP(1), refund=True)
    assert sess.spent().rho == 0  # type: ignore[union-attr]
    with sess.sparse_vector(threshold=1000, max_positives=3, budget=dp.PureDP(1)) as sv:
        sv.test(_q(sess, 0))
    assert sess.spent() == dp.ZCDP(Fraction(1, 2))


def test_bad_input_charges_nothing() -> None:
    sess = _counts_session(5)
    t = sess.table("t")
    for kwargs in ({"threshold": _q(sess, 0)}, {"threshold": pl.col("g")}, {"threshold": float("nan")},
                   {"max_positives": 0}, {"max_positives": 1.5}, {"budget": dp.ZCDP(1)},
                   {"budget": dp.ApproxDP(1, 1e-6)}, {"refund": "yes"}):
        args = {"threshold": 3, "max_positives": 2, "budget": dp.PureDP(1)} | kwargs
        with pytest.raises(dp.DPFrameError):
            sess.sparse_vector(**args)  # type: ignore[arg-type]
        assert sess.spent().epsilon == 0  # type: ignore[union-attr]
    with pytest.raises(dp.BudgetError):
        sess.sparse_vector(threshold=3, max_positives=2, budget=dp.PureDP(-1))
    sv = sess.sparse_vector(threshold=3, max_positives=2, budget=dp.PureDP(1))
    spent = sess.spent()
    bad = [t.group_by("g", keys=[0, 1]).agg(dp.len()), t.agg(dp.mean("g", bounds=(0, 3))),
           t.agg(dp.len(), dp.count("g")), "SELECT 1", t.agg(dp.sum("g", bounds=(0, 3)))]
    sv.test(_q(sess, 0))                               # fixes Δ = 1 and grid 1 for the stream
    for q in bad:
        with pytest.raises(dp.DPFrameError):
            sv.test(q)
    with pytest.raises(dp.PlanError, match="still open"):          # nesting
        sess.sparse_vector(threshold=3, max_positives=2, budget=dp.PureDP(1))
    other = _counts_session(6)
    with pytest.raises(dp.PlanError, match="another session"):
        sv.test(_q(other, 0))
    assert sess.spent() == spent and not sv.closed


def test_o3_sparse_vector_release_noise_with_and_without_refund() -> None:
    """Digest 002 O3 (Fig. 1): per-entry std f(c′) = √2Δ/ε_entry(c′) with the refund re-invested,
    against √2Δc/ε₃ = 56.5685 without ODP (Δ = 1, c = 20, ε₁+ε₂ = 0.5, ε₃ = 0.5)."""
    from dpframe.noise import discrete_laplace_variance

    c, eps3 = 20, Fraction(1, 2)
    eps1, eps2 = svt_split(Fraction(1, 2), c)
    assert float(eps1) == pytest.approx(0.039382262580038824, rel=1e-4)
    table = {1: 1.5084, 2: 3.0927, 5: 8.3635, 10: 19.3646, 15: 34.4844, 19: 51.3737, 20: 56.5685}
    classic = math.sqrt(2) * c / float(eps3)
    assert classic == pytest.approx(56.5685, abs=1e-4)
    for k, f in table.items():
        eps_entry = entry_epsilon(eps2, eps3, c, k, refund=True)
        assert math.sqrt(2) / float(eps_entry) == pytest.approx(f, abs=2e-4)
        assert math.sqrt(2) / float(eps_entry) <= classic + 1e-9
        # the engine's discrete Laplace noise at that scale has (slightly less than) that std
        std = math.sqrt(discrete_laplace_variance(1 / eps_entry))
        assert f - 0.06 <= std <= f + 1e-9


def test_refund_forfeited_when_an_earlier_charge_finishes_while_open() -> None:
    """Audit 7 gap 5: a charge reserved *before* the stream opened (another thread) and released while it
    is open is interleaving (concurrent composition, digest 002 pitfall 7): no refund."""
    import threading

    data = pl.DataFrame({"g": [i % 10 for i in range(1000)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(5), seed=2)
    started, release = threading.Event(), threading.Event()

    def other_query() -> None:
        sess._release.release(dp.PureDP(1), "slow query", "test", lambda reader: (started.set(), release.wait(10)))

    worker = threading.Thread(target=other_query)
    worker.start()
    assert started.wait(10)                      # reserved and running in the other thread
    q = sess.table("t").filter(pl.col("g") == 0).agg(dp.len())
    with sess.sparse_vector(threshold=10_000, max_positives=3, budget=dp.PureDP(1)) as sv:
        assert not sv.test(q)
        release.set()                            # the other charge is committed while the stream is open
        worker.join(10)
    assert sess.spent() == dp.PureDP(2)          # no refund: the stream's full ε = 1 stays charged
    with sess.sparse_vector(threshold=10_000, max_positives=3, budget=dp.PureDP(1)) as sv2:
        assert not sv2.test(q)
    assert sess.spent() == dp.PureDP(2) + dp.PureDP(sv2.eps1)   # alone: refunded to ε₁


def test_a_lost_unclosed_stream_does_not_lock_the_session() -> None:
    """Audit 7 gap 6: an unreachable stream is committed in full (no refund), so new streams can open."""
    import gc

    data = pl.DataFrame({"g": [i % 10 for i in range(1000)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(200, 1e-5), seed=3)
    q = sess.table("t").filter(pl.col("g") == 0).agg(dp.len())
    assert sess.sparse_vector(threshold=10_000, max_positives=2, budget=dp.PureDP(1)).test(q) is False
    gc.collect()
    assert sess.history()["status"].to_list() == ["committed"]
    assert sess.spent().epsilon == 1                     # type: ignore[union-attr]  # fully charged
    with sess.target_charging(epsilon=0.5, max_hits=5, delta=1e-7) as ch:   # not locked
        ch.test(q, threshold=10_000)
    sv = sess.sparse_vector(threshold=10_000, max_positives=2, budget=dp.PureDP(1))
    with pytest.raises(dp.PlanError, match="still open"):  # a reachable open stream still blocks
        sess.sparse_vector(threshold=10_000, max_positives=2, budget=dp.PureDP(1))
    sv.close()
