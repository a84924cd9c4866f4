"""Minimal regressions of bugs found by fuzzing (all fixed today).

Each test states the contract every public entry point has — a correct result or a dpframe error,
nothing charged, no hang — on the smallest input that once broke it. A newly found bug gets its test
here marked ``xfail(strict=True)`` with the finding's id: when the fix lands the test XPASSes, which
fails the suite until the mark is removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp

from .strategies import Ledgered, time_limit


def _session(**kw: Any) -> dp.Session:
    data = pl.DataFrame({"user": list(range(20)), "k": ["a", "b"] * 10, "x": [float(i) for i in range(20)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=kw.pop("budget", dp.ApproxDP(100, 0.01)),
                      seed=0, **kw)


def _contract(sess: dp.Session, call: Callable[[], Any], seconds: int = 30) -> None:
    """A result, or a dpframe error that charged nothing; within ``seconds``."""
    ledger = Ledgered(sess)
    try:
        with time_limit(seconds):
            call()
    except dp.DPFrameError as e:
        assert sess.spent() == ledger.spent and sess.history().height == ledger.rows, f"charged, then: {e}"


@pytest.mark.parametrize("by", [3, None])
def test_group_by_non_string(by: Any) -> None:
    sess = _session()
    _contract(sess, lambda: sess.table("t").group_by(by).agg(dp.len()))


@pytest.mark.parametrize("epsilon", [1000, 10**400], ids=["1000", "10**400"])
def test_target_charging_huge_epsilon(epsilon: Any) -> None:
    sess = _session(budget=dp.ApproxDP(10**500, 0.01))
    _contract(sess, lambda: sess.target_charging(epsilon=epsilon, max_hits=5, delta=1e-7))


def test_top_k_astronomical_k() -> None:
    sess = _session()
    _contract(sess, lambda: sess.table("t").group_by("k").top_k(k=10**400).collect(dp.ApproxDP(1, 1e-6)))


def test_top_k_huge_k_does_not_hang() -> None:
    sess = _session()
    _contract(sess, lambda: sess.table("t").group_by("k").top_k(k=10**6).collect(dp.ApproxDP(1, 1e-6)), seconds=5)


def test_sample_with_a_huge_epsilon() -> None:
    sess = _session(budget=dp.PureDP(10**6))
    _contract(sess, lambda: sess.table("t").sample(0.5).agg(dp.len()).collect(dp.PureDP(710)))


@pytest.mark.parametrize("column", [["x"], pl.col("x")])
def test_robust_median_non_string_column(column: Any) -> None:
    from dpframe.interactive.ptr import robust_median

    sess = _session()
    _contract(sess, lambda: robust_median(sess.table("t"), column, (0, 100)).collect(dp.ApproxDP(1, 1e-6)))


@pytest.mark.parametrize("kwargs", [
    {"test_epsilon": Fraction(-1), "release_epsilon": Fraction(2)},
    {"test_epsilon": Fraction(1), "release_epsilon": Fraction(1), "delta": 1e-6},
], ids=["negative", "float-delta"])
def test_propose_test_release_bad_epsilons(kwargs: dict[str, Any]) -> None:
    from dpframe.interactive.ptr import propose_test_release

    sess = _session(budget=dp.PureDP(10))
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    _contract(sess, lambda: propose_test_release(sess, lambda: False, lambda: 1.0, **kwargs))


@pytest.mark.parametrize("bounds", [(0, 1e-320), (-1e308, 1e308)], ids=["subnormal width", "width past 2^1000"])
def test_robust_median_extreme_bounds(bounds: tuple[float, float]) -> None:
    from dpframe.interactive.ptr import robust_median

    sess = _session()
    with pytest.raises(dp.BoundsError) as info:
        robust_median(sess.table("t"), "x", bounds)
    assert info.value.argument == "bounds"


def test_gated_release_non_query() -> None:
    from dpframe.interactive.ptr import gated_release

    sess = _session(budget=dp.PureDP(10))
    _contract(sess, lambda: gated_release("x", dp.PureDP(1), "y", 1, dp.PureDP(1)))


#: A child under a 1 GiB address-space limit: one Polars thread and one malloc arena, so the limit
#: measures the code under test and not the machine's core count (each thread reserves address space).
_SMALL_CHILD_ENV = {**os.environ, "POLARS_MAX_THREADS": "1", "RAYON_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "1"}


def _accounting_contract(call: Callable[[], Any]) -> None:
    """A standalone accounting call: a number in range or a dpframe error (nothing is charged there)."""
    import math

    try:
        with time_limit(30):
            out = call()
    except dp.DPFrameError:
        return
    values = [out] if isinstance(out, float) else list(getattr(out, "tolist", lambda: [])())
    assert all(isinstance(v, float) and not math.isnan(v) for v in values), out


@pytest.mark.parametrize("case", ["laplace(10**400)", "laplace(1e-320)", "delta_at(None)", "approx_dp([1])",
                                  "subsampled nan", "charge('x')"])
def test_accounting_curve_inputs(case: str) -> None:
    from dpframe import accounting as acc

    call = {
        "laplace(10**400)": lambda: acc.laplace(10**400).approx_dp(1e-6),
        "laplace(1e-320)": lambda: acc.laplace(1e-320).approx_dp(1e-6),
        "delta_at(None)": lambda: acc.laplace(0.5).delta_at(None),
        "approx_dp([1])": lambda: acc.laplace(0.5).approx_dp([1]),
        "subsampled nan": lambda: acc.gaussian(2, 9e15).subsampled(1e-300).delta_at(2776),
        "charge('x')": lambda: acc.BasicAccountant(dp.PureDP(1)).charge("x"),
    }[case]
    _accounting_contract(call)


@pytest.mark.parametrize("args", [(7e16, 1e-159), (5e-324, 5e-324)], ids=["huge rho", "subnormal"])
def test_zcdp_to_approx_extremes(args: tuple[float, float]) -> None:
    _accounting_contract(lambda: float(dp.ZCDP(*args).to_approx(args[1]).epsilon))


@pytest.mark.parametrize("curve", [
    pytest.param("acc.approx(1, 1e-6)"),
    pytest.param("acc.zcdp(0.5, 1e-6)"),
    pytest.param("acc.laplace(0.001)"),
])
def test_pld_of_a_curve_in_a_small_memory_child(curve: str) -> None:
    """Run in a child limited to 1 GiB of address space: today these need ~1e8 grid points or overflow."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    code = f"from dpframe import accounting as acc; print(acc.PLDAccountant().compose({curve}).epsilon(1e-5))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=limit,
                          env=_SMALL_CHILD_ENV)
    assert proc.returncode == 0 and "Error" not in proc.stderr, proc.stderr[-500:]


def test_session_public_tables_not_a_mapping() -> None:
    try:
        dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1),
                   public_tables="p")     # type: ignore[arg-type]
    except dp.DPFrameError:
        pass


@pytest.mark.parametrize("epsilon", [2000, 10**5])
def test_pld_session_refuses_a_huge_query(epsilon: int) -> None:
    """Over budget in a pld session: a BudgetExceededError (run in a 1 GiB child: today it may allocate GBs)."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    code = ("import polars as pl, dpframe as dp\n"
            "s = dp.Session({'t': pl.DataFrame({'u': [0]})}, privacy_unit=dp.PrivacyUnit('u'),\n"
            "               budget=dp.ApproxDP(1000, 0.1), accountant='pld', seed=0)\n"
            "try:\n"
            f"    s.table('t').agg(dp.len()).collect(dp.PureDP({epsilon}))\n"
            "except dp.BudgetExceededError:\n"
            "    print('refused')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=limit,
                          env=_SMALL_CHILD_ENV)
    assert proc.stdout.strip() == "refused", proc.stderr[-500:]
