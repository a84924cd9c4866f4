"""Fuzzing the query entry points beyond ``agg``: a correct result or a dpframe error, nothing charged, no hang.

``GroupBy.top_k`` (every argument), ``Frame.interior_point``, ``learn_threshold``, ``learn_rectangle``,
``bounds``, ``sample``, quantile / median / count_units measures and the robust median, on well-formed
tables in sessions of every notion and accountant, with adversarial arguments (``entry_points.py``).
Each query is explained, costed and collected through :func:`~tests.fuzz.checks.run_query`: a refusal
charges nothing, a result is charged exactly its cost and has the documented shape. With a huge ε the
results are checked against exact answers (top-k sets, interior points, bounds, sampled counts).

Default run: the ``CI`` profile (derandomized, 60 examples per test). ``-m slow``: ``DEEP`` (1 500).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import dpframe as dp

from .checks import run_query
from .entry_points import (
    ACCOUNTANTS,
    BOUNDS_QUERY,
    INTERIOR,
    QUANTILE,
    QUERY_BUDGETS,
    RATES,
    RECTANGLE,
    SANE_BUDGETS,
    SESSION_BUDGETS,
    THRESHOLD,
    TOP_K,
    score_of,
    tables,
)
from .strategies import CI, DEEP, time_limit

UNITS = st.sampled_from([dp.PrivacyUnit.row, lambda: dp.PrivacyUnit("user"), lambda: dp.PrivacyUnit("user", max_rows=3),
                         lambda: dp.PrivacyUnit("user", max_rows=2, max_groups=1)])


def _session(data: pl.DataFrame, unit: Any, total: Any, accountant: Any, backend: str = "polars") -> dp.Session | None:
    try:
        return dp.Session({"t": data}, privacy_unit=unit(), budget=total(), accountant=accountant, backend=backend,
                          seed=0)
    except dp.DPFrameError:
        return None


SESSION = dict(data=tables(), unit=UNITS, total=SESSION_BUDGETS, accountant=ACCOUNTANTS)


def _fuzz(sess: dp.Session | None, make: Any, budget: Any, check: Any = None, *, ex_post: bool = False) -> None:
    if sess is None:
        return
    with time_limit():
        outcome = run_query(sess, make, budget, check, ex_post=ex_post)
    event(outcome)
    assert outcome != "failed", "a query passed validation, was charged, then failed while running"


# ------------------------------------------------------------------------------------------ top-k

def _check_top_k(out: Any, query: Any, budget: Any) -> None:
    if isinstance(out, dp.TopKFailed):
        assert not out and out.k >= 1
        return
    assert isinstance(out, pl.DataFrame)
    by = list(query._by)
    assert out.columns[:len(by)] == by
    assert out.height <= (query.k or query.k_max), (out, query.k, query.k_max)
    assert out.select(by).is_duplicated().sum() == 0
    assert out.sort(by, nulls_last=False).equals(out), "keys must come sorted by key"
    if query._keys is not None:
        assert out.select(by).join(query._keys, on=by, how="anti", nulls_equal=True).height == 0


def _top_k(sess: dp.Session, a: dict[str, Any]) -> Any:
    frame = sess.table("t")
    grouped = frame.group_by(a["by"], keys=a["keys"])
    return grouped.top_k(a["k"], score_of(a["score"]), a["method"], a["release_scores"], k_max=a["k_max"],
                         lam=a["lam"], ptr=a["ptr"], delta_t=a["delta_t"])


def _fuzz_top_k(args: dict[str, Any], budget: Any, **session: Any) -> None:
    sess = _session(**session)
    _fuzz(sess, lambda: _top_k(sess, args), budget, _check_top_k)   # type: ignore[arg-type]


@CI
@given(args=TOP_K, budget=QUERY_BUDGETS, **SESSION)
def test_fuzz_top_k(**kw: Any) -> None:
    _fuzz_top_k(**kw)


@CI
@given(args=TOP_K, budget=SANE_BUDGETS, **SESSION)
def test_fuzz_top_k_sane_budgets(**kw: Any) -> None:
    """Mostly valid budgets, so the fuzzing reaches calibration and the selection itself."""
    _fuzz_top_k(**kw)


@pytest.mark.slow
@DEEP
@given(args=TOP_K, budget=SANE_BUDGETS, **SESSION)
def test_fuzz_top_k_deep(**kw: Any) -> None:
    _fuzz_top_k(**kw)


@CI
@given(counts=st.lists(st.integers(1, 60), min_size=2, max_size=6, unique=True), k=st.integers(1, 3),
       method=st.sampled_from(["gumbel", "peeling", "stable"]), zcdp=st.booleans())
def test_top_k_is_correct_at_huge_epsilon(counts: list[int], k: int, method: str, zcdp: bool) -> None:
    """Distinct scores and ε = 10⁶: every method returns the exact top-k set."""
    keys = [f"k{i}" for i in range(len(counts))]
    groups = [key for key, n in zip(keys, counts) for _ in range(n)]
    data = pl.DataFrame({"user": list(range(len(groups))), "g": groups})
    total = dp.ZCDP(10**12, Fraction(1, 10)) if zcdp else dp.ApproxDP(10**12, Fraction(1, 10))
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=total, seed=1)
    k = min(k, len(keys) - 1)
    budget = dp.ZCDP(10**9, Fraction(1, 10**3)) if zcdp else dp.ApproxDP(10**6, Fraction(1, 10**3))
    out = sess.table("t").group_by("g", keys=keys).top_k(k=k, method=method).collect(budget)
    exact = sorted(key for _, key in sorted(zip(counts, keys), reverse=True)[:k])
    assert isinstance(out, pl.DataFrame) and out["g"].to_list() == exact, (out, counts)


# --------------------------------------------------------------------------------- learning, bounds

def _check_interior(out: Any, query: Any, budget: Any) -> None:
    from dpframe_learning.queries import InteriorPoint, NoAnswer

    assert isinstance(out, InteriorPoint | NoAnswer), out
    if isinstance(out, InteriorPoint):
        lo, hi = query.domain.decode(0), query.domain.decode(query.domain.size - 1)
        assert lo <= out.value <= hi, (out, lo, hi)


def _check_learner(out: Any, query: Any, budget: Any) -> None:
    from dpframe_learning.queries import NoAnswer, Rectangle, Threshold

    assert isinstance(out, Threshold | Rectangle | NoAnswer), out


def _check_pair(out: Any, query: Any, budget: Any) -> None:
    low, high = out
    assert low <= high, out


LEARN = st.sampled_from(["interior_point", "learn_threshold", "learn_rectangle", "bounds", "robust_median"])


def _learning(sess: dp.Session, which: str, a: dict[str, Any]) -> Any:
    t = sess.table("t")
    if which == "interior_point":
        return t.interior_point(a["column"], bounds=a["bounds"], method=a["method"], beta=a["beta"],
                                resolution=a["resolution"])
    if which == "learn_threshold":
        return t.learn_threshold(a["feature"], label=a["label"], bounds=a["bounds"], positive=a["positive"],
                                 beta=a["beta"], xi=a["xi"], resolution=a["resolution"])
    if which == "learn_rectangle":
        return t.learn_rectangle(a["features"], label=a["label"], bounds=a["bounds"], beta=a["beta"],
                                 resolution=a["resolution"])
    if which == "bounds":
        return t.bounds(a["column"], domain=a["domain"], quantiles=a["quantiles"], resolution=a["resolution"])
    from dpframe.interactive.ptr import robust_median

    return robust_median(t, a["column"], a["bounds"])


ARGS = {"interior_point": INTERIOR, "learn_threshold": THRESHOLD, "learn_rectangle": RECTANGLE,
        "bounds": BOUNDS_QUERY, "robust_median": INTERIOR}
CHECKS = {"interior_point": _check_interior, "learn_threshold": _check_learner, "learn_rectangle": _check_learner,
          "bounds": _check_pair, "robust_median": None}


@st.composite
def learning_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    which = draw(LEARN)
    return which, draw(ARGS[which])


def _fuzz_learning(call: tuple[str, dict[str, Any]], budget: Any, **session: Any) -> None:
    which, args = call
    sess = _session(**session)
    _fuzz(sess, lambda: _learning(sess, which, args), budget, CHECKS[which],    # type: ignore[arg-type]
          ex_post=which == "robust_median")


@CI
@given(call=learning_calls(), budget=QUERY_BUDGETS, **SESSION)
def test_fuzz_learning_and_bounds(**kw: Any) -> None:
    _fuzz_learning(**kw)


@CI
@given(call=learning_calls(), budget=SANE_BUDGETS, **SESSION)
def test_fuzz_learning_and_bounds_sane_budgets(**kw: Any) -> None:
    _fuzz_learning(**kw)


@pytest.mark.slow
@DEEP
@given(call=learning_calls(), budget=SANE_BUDGETS, **SESSION)
def test_fuzz_learning_and_bounds_deep(**kw: Any) -> None:
    _fuzz_learning(**kw)


@CI
@given(values=st.lists(st.integers(0, 1000), min_size=300, max_size=400))
def test_interior_point_and_bounds_are_correct_at_huge_epsilon(values: list[int]) -> None:
    data = pl.DataFrame({"x": values})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10**7), seed=2)
    point = sess.table("t").interior_point("x", bounds=(0, 1000)).collect(dp.PureDP(10**6))
    assert min(values) <= point.value <= max(values), (point, min(values), max(values))
    low, high = sess.table("t").bounds("x", domain=(0, 1000), quantiles=(0.1, 0.9)).collect(dp.PureDP(10**6))
    ranked = sorted(values)
    # bounds are the edges of the grid bins (every 19%, rounded to integers) holding the two quantiles
    tenth = int(0.1 * len(values))
    assert ranked[tenth - 2] / 1.25 - 1 <= low <= ranked[tenth + 1], (low, ranked[:60])
    assert ranked[int(0.9 * len(values)) - 2] <= high <= ranked[int(0.9 * len(values)) + 1] * 1.25 + 1, \
        (high, ranked[-60:])


# ------------------------------------------------------------------------------- sample, quantiles

def _check_agg(out: Any, query: Any, budget: Any) -> None:
    plan = query.plan(budget)
    assert out.columns == [*query.node.by, *(n for p in plan.plans for n in p.output_names())]


@CI
@given(rate=RATES, q=QUANTILE, measure=st.sampled_from(["quantile", "median", "count_units", "len"]),
       grouped=st.booleans(), budget=SANE_BUDGETS, **SESSION)
def test_fuzz_sample_and_quantiles(rate: Any, q: dict[str, Any], measure: str, grouped: bool, budget: Any,
                                   **session: Any) -> None:
    sess = _session(**session)

    def make() -> Any:
        frame = sess.table("t")    # type: ignore[union-attr]
        if rate != 1:
            frame = frame.sample(rate)
        m = {"quantile": lambda: dp.quantile(q["column"], q["q"], bounds=q["bounds"], resolution=q["resolution"]),
             "median": lambda: dp.median(q["column"], q["bounds"]), "count_units": dp.count_units,
             "len": dp.len}[measure]()
        return (frame.group_by("g", keys=["a", "b"]) if grouped else frame).agg(m)
    _fuzz(sess, make, budget, _check_agg)


@CI
@given(rate=st.sampled_from([0.25, 0.5, 0.9]), units=st.integers(200, 600),
       backend=st.sampled_from(["polars", "duckdb"]))
def test_sampled_counts_are_correct_at_huge_epsilon(rate: float, units: int, backend: str) -> None:
    """A Poisson sample at ``rate`` keeps about rate × units whole units; the amplified cost is charged."""
    data = pl.DataFrame({"user": [u for u in range(units) for _ in range(2)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=dp.PureDP(10**7),
                      seed=3, backend=backend)
    query = sess.table("t").sample(rate).agg(dp.len(), dp.count_units())
    before = sess.spent()
    out = query.collect(dp.PureDP(600))       # 300 per measure: noise far below 1 (above ~1400: F-accounting-...)
    n, kept = out["len"][0], out["count_units"][0]
    assert n == 2 * kept, out                              # whole units are kept or dropped
    sd = (units * rate * (1 - rate)) ** 0.5
    assert abs(kept - rate * units) <= 6 * sd + 1, (kept, rate * units)
    assert sess.spent().epsilon - before.epsilon == query.cost(dp.PureDP(600)).epsilon
