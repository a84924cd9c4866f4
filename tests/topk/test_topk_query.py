"""End-to-end top-k queries: every method, results, the typed failure, bad input (nothing charged)."""

import numpy as np
import polars as pl
import pytest
from dpframe_topk import TopKFailed
from scipy import stats

import dpframe as dp

COUNTS = {"a": 400, "b": 300, "c": 200, "d": 20, "e": 10, "f": 5}


def _data():
    rows, user = [], 0
    for city, n in COUNTS.items():
        for _ in range(n):
            rows.append((user, city))
            rows.append((user, "a" if city != "a" else "b"))   # each user touches two cities
            user += 1
    return pl.DataFrame(rows, schema=["user", "city"], orient="row")


def _session(budget=None, seed=0, **kw):
    return dp.Session({"v": _data()}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
                      budget=budget or dp.ApproxDP(100, 1e-3), seed=seed, **kw)


KEYS = sorted(COUNTS)


@pytest.mark.parametrize(("method", "budget", "keys"), [
    ("stable", dp.ApproxDP(2, 1e-6), None), ("stable", dp.ApproxDP(2, 1e-6), KEYS),
    ("gumbel", dp.PureDP(8), KEYS), ("peeling", dp.ApproxDP(8, 1e-6), KEYS),
    ("limited_domain", dp.ApproxDP(8, 1e-6), None), ("tct", dp.ApproxDP(8, 1e-6), KEYS)])
def test_methods_find_the_top_3(method, budget, keys):
    sess = _session()
    out = sess.table("v").group_by("city", keys=keys).top_k(k=3, method=method).collect(budget)
    assert isinstance(out, pl.DataFrame)
    assert out["city"].to_list() == ["a", "b", "c"]            # sorted by key, not by score
    assert sess.spent() == sess.accountant.charge(budget)      # charged exactly the budget
    assert ("count_units" in out.columns) == (method == "tct")  # TCT releases its noisy scores free


def test_adaptive_k_and_zcdp_session():
    sess = _session(dp.ZCDP(2, 1e-6))
    q = sess.table("v").group_by("city").top_k(k=None)
    assert q.cost(dp.ZCDP(1, 1e-8)) == dp.ZCDP(1, 1e-8)
    assert q.collect(dp.ZCDP(1, 1e-8))["city"].to_list() == ["a", "b"]   # scores 935, 700, 200: big gap after b
    text = q.explain(dp.ZCDP(1, 1e-8))
    assert "PTR" in text and "Regularized Large Gap" in text and "NOT PRIVATE" in text


def test_failed_is_typed_and_still_charged():
    sess = _session()
    out = sess.table("v").group_by("city").top_k(k=None).collect(dp.ApproxDP(0.01, 1e-6))
    assert isinstance(out, TopKFailed) and not out and out.k >= 1
    assert sess.spent() == dp.ApproxDP(0.01, 1e-6)


def test_release_scores_and_fixed_k_exact():
    sess = _session()
    out = sess.table("v").group_by("city", keys=KEYS).top_k(k=4, release_scores=True).collect(dp.ApproxDP(20, 1e-6))
    assert out.height == 4 and out.columns == ["city", "count_units"]
    truth = {"a": 935, "b": 700, "c": 200}
    for city, value in zip(out["city"], out["count_units"]):
        if city in truth:
            assert abs(value - truth[city]) < 60
    assert "scores:" in sess.table("v").group_by("city").top_k(k=2, release_scores=True).explain(dp.ApproxDP(1, 1e-6))


def test_sum_and_len_scores():
    data = pl.DataFrame({"user": list(range(300)), "k": ["x"] * 200 + ["y"] * 100, "spend": [5.0] * 300})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ApproxDP(50, 1e-5), seed=1)
    for score in (dp.len(), dp.sum("spend", bounds=(0, 10)), dp.sum("spend", bounds=(-10, 10))):
        out = sess.table("t").group_by("k", keys=["x", "y", "z"]).top_k(k=1, score=score).collect(dp.ApproxDP(5, 1e-6))
        assert out["k"].to_list() == ["x"]
    explained = sess.table("t").group_by("k").top_k(k=1, score=dp.sum("spend", bounds=(-10, 10))).explain(
        dp.ApproxDP(1, 1e-6), format="json")
    assert "every gap by ≤ 20" in explained["score"].replace(".0", "")  # signed: doubled


BAD = [
    (dict(k=0), dp.PlanError, "k"), (dict(k=True), dp.PlanError, "k"),
    (dict(k=7, keys=KEYS), dp.PlanError, "k"),                              # more than the public keys
    (dict(score=dp.mean("user", bounds=(0, 1))), dp.PlanError, "score"),     # not a monotone total
    (dict(score="user"), dp.PlanError, "score"),
    (dict(method="nope"), dp.PlanError, "method"),
    (dict(method="gumbel"), dp.PlanError, "keys"),                           # needs a public domain
    (dict(k=None, method="tct", keys=KEYS), dp.PlanError, "k"),
    (dict(ptr="cauchy"), dp.PlanError, "ptr"),
    (dict(k_max=1, k=3), dp.PlanError, "k_max"),
    (dict(lam=-1.0), dp.BoundsError, "lam"),
]


@pytest.mark.parametrize(("kwargs", "error", "argument"), BAD)
def test_bad_input_raises_and_charges_nothing(kwargs, error, argument):
    sess = _session()
    keys = kwargs.pop("keys", None)
    with pytest.raises(error) as e:
        sess.table("v").group_by("city", keys=keys).top_k(**kwargs).collect(dp.ApproxDP(1, 1e-6))
    assert e.value.argument == argument and e.value.fix
    assert sess.history().height == 0


@pytest.mark.parametrize(("session_budget", "budget", "kwargs", "argument"), [
    (dp.PureDP(5), dp.PureDP(1), {}, "budget"),                              # approx method, pure session
    (dp.ApproxDP(5, 1e-6), dp.PureDP(1), {"method": "limited_domain"}, "budget"),
    (dp.ApproxDP(5, 1e-6), dp.ApproxDP(1, 1e-7), {"delta_t": 1e-7}, "delta_t"),   # δ_t ≥ δ
    (dp.ApproxDP(5, 1e-6), dp.ApproxDP(1, 1e-7), {"delta_t": 2.0}, "delta_t"),
    (dp.ZCDP(5, 1e-6), dp.ZCDP(1, 1e-8), {"delta_t": 1e-7}, "delta_t"),
    (dp.ZCDP(5, 1e-6), dp.ZCDP(1), {}, "budget"),
])
def test_budget_errors_charge_nothing(session_budget, budget, kwargs, argument):
    sess = _session(session_budget)
    with pytest.raises(dp.DPFrameError) as e:
        sess.table("v").group_by("city").top_k(**kwargs).collect(budget)
    assert e.value.argument == argument
    assert sess.history().height == 0


def test_neighbouring_datasets_output_distribution():
    """Adaptive StableTopK on two neighbouring tables: the released-set frequencies match the exact law
    (EM on gaps × PTR pass) on each side."""
    from fractions import Fraction as F

    from dpframe_topk import calibrate as cal
    base = [(u, c) for c, n in {"a": 30, "b": 12, "c": 11}.items() for u in range(n)]
    d0 = pl.DataFrame(base, schema=["user", "city"], orient="row")
    d1 = pl.concat([d0, pl.DataFrame({"user": [999, 999], "city": ["b", "c"]})])
    budget = dp.ZCDP(F(1, 5), F(1, 1000))
    plan = cal.stable_plan_zcdp(F(1, 5), F(1, 1000), F(1))
    for data, hist in ((d0, [30, 12, 11]), (d1, [30, 13, 12])):
        sess = dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=3),
                          budget=dp.ZCDP(1000, 0.5), seed=4)
        q = sess.table("v").group_by("city", keys=["a", "b", "c"]).top_k(k=None, k_max=2)
        outs = [q.collect(budget) for _ in range(300)]
        got = sum(isinstance(o, pl.DataFrame) and o["city"].to_list() == ["a"] for o in outs)
        gaps = np.array([hist[0] - hist[1], hist[1] - hist[2]])
        p_k = np.exp(float(plan.em_scale) * gaps) / np.exp(float(plan.em_scale) * gaps).sum()
        from tests.topk.test_topk_oracles import dgauss_tail
        exact = p_k[0] * dgauss_tail(plan.ptr_scale, int(plan.threshold()) - max(1, gaps[0]))
        assert stats.binomtest(got, 300, exact).pvalue > 1e-3


@pytest.mark.parametrize("keys", [None, KEYS])
def test_laplace_ptr_default_delta_t(keys):
    """With ptr='laplace' and no delta_t, δ_t defaults within the budget's δ (public keys: all of it)."""
    sess = _session()
    q = sess.table("v").group_by("city", keys=keys).top_k(k=None, ptr="laplace")
    budget = dp.ApproxDP(4, 1e-6)
    assert q.cost(budget) == budget
    assert q.collect(budget)["city"].to_list() == ["a", "b"]
    with pytest.raises(dp.BudgetError):                       # an explicit δ_t = δ is refused
        sess.table("v").group_by("city", keys=keys).top_k(k=None, ptr="laplace", delta_t=1e-6).cost(budget)
