"""Multi-label PATE protects a training record by default (issue 23): the regression pair of the proof review.

One record changes one teacher's whole vote vector. With 800 teachers and 40 labels, the pair is the
counts (774, 387, 0, …, 0) against (775, 386, 1, …, 1) — one teacher's vote moving from {2} to {1, 3..40} —
in each of the 600 queries. The exact output law of one query is computed from the mechanism's own plan
(EM on the gaps, discrete Gaussian PTR), and the 600-fold composition by FFT on a grid of privacy losses:
rounding every per-query loss *down* gives a lower bound of the exact δ(ε), rounding it *up* an upper
bound (δ(ε) = E_P[(1 − e^{ε−L})₊] is increasing in the loss L).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_topk import MultiLabelPATE

import dpframe as dp

LABELS, QUERIES = 40, 600
BEFORE = [774, 387] + [0] * (LABELS - 2)
AFTER = [775, 386] + [1] * (LABELS - 2)      # the teacher's vote moved from label 2 to labels 1, 3..40


def _log_dgauss_tail(sigma2: float, t: int) -> float:
    """log P[Z > t] for the discrete Gaussian N_ℤ(0, σ²), by summing the pmf over ±40σ."""
    span = int(40 * math.sqrt(sigma2)) + 40
    xs = np.arange(-span, span + 1)
    lw = -(xs.astype(float) ** 2) / (2 * sigma2)
    w = np.exp(lw - lw.max())
    return math.log(w[xs > t].sum()) - math.log(w.sum())


def _log_law(pate: MultiLabelPATE, counts: list[int]) -> dict[tuple[int, tuple[int, ...] | None], float]:
    """log P[output] of one query of ``pate.release``: (k, the released label indices) or (k, None) for ⊥."""
    p = pate.plan()
    c = np.asarray(counts)
    desc = -np.sort(-c)
    u = float(p.em_scale) * (desc[:-1] - desc[1:])
    log_k = u - (u.max() + math.log(np.exp(u - u.max()).sum()))
    order = np.argsort(-c, kind="stable")
    out = {}
    for k in range(1, c.size):
        stat = max(int(desc[k - 1] - desc[k]), int(p.g))
        log_pass = _log_dgauss_tail(float(p.ptr_scale), int(p.threshold()) - stat)
        out[(k, tuple(sorted(order[:k].tolist())))] = log_k[k - 1] + log_pass
        out[(k, None)] = log_k[k - 1] + math.log(-math.expm1(log_pass))
    return out


def _composed_delta(log_p: np.ndarray, log_q: np.ndarray, n: int, eps: float, h: float, rounding) -> float:
    """δ(ε) of n independent copies of the pair (P, Q), per-query losses rounded to multiples of h."""
    j = rounding((log_p - log_q) / h).astype(np.int64)
    lo, width = int(j.min()), int(j.max() - j.min()) + 1
    pmf = np.zeros(width)
    np.add.at(pmf, j - lo, np.exp(log_p))
    size = n * (width - 1) + 1
    fft_size = 1 << (size - 1).bit_length()
    composed = np.maximum(np.fft.irfft(np.fft.rfft(pmf, fft_size) ** n, fft_size)[:size], 0.0)
    losses = (np.arange(size) + n * lo) * h
    return float(np.sum(composed * np.maximum(0.0, -np.expm1(eps - losses))))


def _delta(pate: MultiLabelPATE, eps: float, bound: str) -> float:
    """A lower or upper bound of the exact δ(ε) of the pair (both directions) over 600 queries."""
    a, b = _log_law(pate, BEFORE), _log_law(pate, AFTER)
    out = []
    for p, q in ((a, b), (b, a)):
        keys = list(p)
        log_p, log_q = np.array([p[o] for o in keys]), np.array([q[o] for o in keys])
        loss = log_p - log_q
        main = loss[np.exp(log_p) > 0.1]         # the four outputs (k ∈ {1, 2}) × (pass, ⊥) carry ~99% of the mass
        # any grid step gives a valid bound; take the one in [4e-5, 1.2e-4] that puts the main losses closest
        # above grid points, so that rounding down loses almost nothing (the bound is then nearly exact)
        steps = np.linspace(4e-5, 1.2e-4, 50_001)
        frac = (main[None, :] / steps[:, None]) % 1.0
        h = float(steps[int(np.argmin(frac.max(axis=1)))])
        out.append(_composed_delta(log_p, log_q, QUERIES, eps, h, np.floor if bound == "lower" else np.ceil))
    return max(out)


def test_teacher_level_charge_does_not_cover_one_changed_record() -> None:
    teacher = MultiLabelPATE(gumbel_scale=50, sigma=60, delta_t=1e-9, privacy_unit="teacher")
    # the teacher-level ε at δ = 1e-6: 3.665 with ρ + 2√(ρ ln 1/δ'), 3.278 with the optimal conversion
    assert teacher.cost(QUERIES) == dp.ZCDP(Fraction(61, 300), 6e-7)
    assert _delta(teacher, 3.665, "lower") >= 1.5e-3                    # > 1000 × the claimed 1e-6
    assert _delta(teacher, teacher.epsilon(QUERIES, 1e-6), "lower") >= 3e-3


def test_record_level_default_covers_the_pair() -> None:
    pate = MultiLabelPATE(gumbel_scale=50, sigma=60, delta_t=1e-9)
    assert pate.privacy_unit == "record" and pate.g == 2
    eps = pate.epsilon(QUERIES, 1e-6)
    assert eps == pytest.approx(7.124, abs=1e-3)
    assert _delta(pate, eps, "upper") <= 1e-6
    # and the record-level charge is needed: the same noise at the teacher-level ε leaks far more
    assert _delta(pate, 3.665, "lower") >= 1e-3


@pytest.mark.parametrize("delta_t", [1e-9, 1e-3])
def test_a_gap_of_exactly_g_whose_tie_flips_releases_the_set_with_probability_at_most_delta_t(delta_t: float) -> None:
    # label 1 leads label 0 by g = 2; one teacher's vote moves from label 1 to label 0: a tie, broken towards
    # label 0, so the top-1 sets differ although the gap was g. The PTR statistic is max{g, q} = g on both sides.
    pate = MultiLabelPATE(gumbel_scale=5, sigma=6, delta_t=delta_t)
    before, after = _log_law(pate, [10, 12, 0]), _log_law(pate, [11, 11, 0])
    assert (1, (1,)) in before and (1, (0,)) in after
    only = [math.exp(lp) for law, other in ((before, after), (after, before)) for o, lp in law.items()
            if o[1] is not None and o not in other]
    assert only and max(only) <= delta_t                      # each one-sided release: P ≤ P[Z > T] ≤ δ_t
    # one more vote of lead (q = g + 1) and the sets agree on every neighbour: no one-sided output at all
    assert set(_log_law(pate, [9, 12, 0])) == set(_log_law(pate, [10, 11, 0]))


def _votes() -> pl.DataFrame:
    return pl.DataFrame({"query": [0, 0, 0, 1, 1, 1], "label": ["a", "b", "c"] * 2, "vote": [90, 88, 2, 50, 3, 1]})


@pytest.mark.parametrize(("unit", "g"), [("record", 2), ("teacher", 1)])
def test_explain_and_history_name_the_protected_unit(unit: str, g: int) -> None:
    pate = MultiLabelPATE(gumbel_scale=5, sigma=6, delta_t=1e-9, privacy_unit=unit)
    text = pate.explain(2)
    assert f"privacy unit: {unit}: " in text and f"gap sensitivity g = {g}" in text
    assert ("does not protect a training record" in text) == (unit == "teacher")
    assert ("disjoint partitions" in text) == (unit == "record")      # the record unit's assumption, stated
    data = pate.explain(2, format="json")
    assert data["privacy_unit"] == unit and data["gap_sensitivity"] == g and data["cost"] == repr(pate.cost(2))
    sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ZCDP(10, 1e-6),
                      seed=1)
    pate.collect(sess, _votes())
    row = sess.history().row(0, named=True)
    assert f"privacy_unit={unit!r}" in row["query"]
    assert f"protecting {unit}: " in row["mechanisms"] and f"gap sensitivity {g}" in row["mechanisms"]


def test_unknown_privacy_unit_is_refused() -> None:
    for unit in ("add_remove", "substitute", "user"):
        with pytest.raises(dp.PlanError, match="unknown privacy unit") as info:
            MultiLabelPATE(privacy_unit=unit)
        assert info.value.argument == "privacy_unit" and "'record'" in info.value.fix
    with pytest.raises(dp.PlanError) as info:
        MultiLabelPATE().explain(3, format="html")
    assert info.value.argument == "format"


@pytest.mark.parametrize("huge", [2**64 - 1, 2**63, 2**62 + 1])
def test_a_vote_count_that_int64_cannot_hold_is_refused_before_the_charge(huge: int) -> None:
    """A UInt64 vote of 2⁶⁴ − 1 used to wrap to −1 on its way to int64 (passing the ≥ 0 check, which ran before)."""
    votes = _votes().with_columns(pl.col("vote").cast(pl.UInt64)).with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(huge, pl.UInt64)).otherwise(pl.col("vote")).alias("vote"))
    sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ZCDP(10, 1e-6),
                      seed=1)
    with pytest.raises(dp.SchemaError, match="above 2\\^62") as info:
        MultiLabelPATE(gumbel_scale=5, sigma=6, delta_t=1e-9).collect(sess, votes)
    assert info.value.argument == "vote" and sess.history().height == 0
    edge = votes.with_columns(pl.when(pl.col("vote") == huge).then(pl.lit(2**62, pl.UInt64)).otherwise(pl.col("vote"))
                              .alias("vote"))
    assert MultiLabelPATE(gumbel_scale=5, sigma=6, delta_t=1e-9).collect(sess, edge).height == 2
