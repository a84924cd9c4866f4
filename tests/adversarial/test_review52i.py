"""Review 52i: a mechanism plan that declares no noise still has its privacy curves checked in RDP/PLD sessions.

Each test is one attack; those that found something say so in their docstring.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.accounting.rdp_charge import FILTER_ORDERS, filter_rdp
from dpframe.planning.curve_checks import _as_checked, _check_bare_curves
from dpframe.testing import pin_mechanisms
from tests.adversarial.test_review51f import CurveCount, honest_curve, weak_curve

DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "x": [float(i % 13) for i in range(400)],
                     "k": ["a", "b"] * 200})
UNIT = dp.PrivacyUnit("u", max_rows=2)
BUDGET = dp.ApproxDP(1, 1e-6)


def _session(accountant: str) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.ApproxDP(50, 1e-5), accountant=accountant, seed=0)


def _frame(sess: dp.Session, sampled: bool) -> Any:
    frame = sess.table("t")
    return frame.sample(0.1) if sampled else frame


def _no_table(noises: dict[str, object]) -> dict[str, object]:
    """A noise table declaring no noise (as the exponential-mechanism quantiles do)."""
    return {}


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_soundness_a_weak_curve_with_no_declared_noise_is_refused(accountant: str, sampled: bool) -> None:
    """Found: the curves of a plan were checked only against the `Noise` it declares; a plan declaring none (an empty
    noise table) and a curve 100 times too private for its cost (ε=1) was charged ε ≈ 0.039 instead of 1.03 in an
    RDP session. Now a PluginError naming the mechanism, nothing charged."""
    sess = _session(accountant)
    pin_mechanisms(sess, CurveCount("bare_weak", weak_curve, table=_no_table))
    q = _frame(sess, sampled).agg(dp.measure("bare_weak"))
    for run in (q.cost, q.collect):
        with pytest.raises(dp.PluginError) as refused:
            run(BUDGET)
        assert "bare_weak" in str(refused.value) and refused.value.argument == "mechanism"
    assert sess.history().height == 0


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_an_honest_curve_with_no_declared_noise_is_charged_what_it_declares(accountant: str, sampled: bool) -> None:
    """The exact curve of the noise the plan adds (not declared) passes, and is charged as if it were declared."""
    costs = []
    for name, table in (("bare_exact", _no_table), ("exact", dict)):
        sess = _session(accountant)
        pin_mechanisms(sess, CurveCount(name, honest_curve, table=table))
        q = _frame(sess, sampled).agg(dp.measure(name))
        costs.append(q.cost(BUDGET))
        q.collect(BUDGET)
        assert sess.history().height == 1
    assert costs[0] == costs[1]


MEASURES = {
    "len": lambda: dp.len(), "count": lambda: dp.count("x"), "sum": lambda: dp.sum("x", bounds=(0, 12)),
    "mean": lambda: dp.mean("x", bounds=(0, 12)), "var": lambda: dp.var("x", bounds=(0, 12)),
    "std": lambda: dp.std("x", bounds=(0, 12)), "median": lambda: dp.median("x", bounds=(0, 12)),
    "quantiles": lambda: dp.quantile("x", q=(0.25, 0.5, 0.9), bounds=(0, 12)),
    "histogram": lambda: dp.measure("histogram", "x", bounds=(0, 12), edges=(0, 4, 8, 12)),
}


@pytest.mark.parametrize("sampled", [False, True], ids=["whole", "sampled"])
@pytest.mark.parametrize("budget", [dp.PureDP(1), dp.ZCDP(0.5), dp.ApproxDP(1, 1e-6)], ids=["pure", "zcdp", "approx"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_no_built_in_mechanism_is_refused(accountant: str, budget: dp.Budget, sampled: bool) -> None:
    """Every built-in mechanism (the quantiles declare no `Noise`), grouped or not, runs under the check."""
    sess = _session(accountant)
    frame = _frame(sess, sampled)
    for name, measure in MEASURES.items():
        for q in (frame.agg(measure()), frame.group_by("k", keys=["a", "b"]).agg(measure())):
            try:
                q.cost(budget)
            except dp.PluginError as e:         # pragma: no cover - the failure message
                raise AssertionError(f"{name} under {budget!r}: {e}") from e
    if isinstance(budget, dp.ApproxDP):        # partition selection (its own plan, checked alike)
        frame.group_by("k").agg(dp.len(), dp.median("x", bounds=(0, 12))).cost(budget)
    frame.agg(dp.median("x", bounds=(0, 12)), dp.len()).collect(dp.PureDP(1))
    assert sess.history().height == 1


def test_a_sampled_bare_plan_reads_no_lower_than_the_curves_it_was_checked_against() -> None:
    """Amplification reads a curve at orders the filter does not (and its pure bound): a plan declaring no noise is
    read there no lower than the dpframe curves its own were accepted against."""
    cost, filt = dp.PureDP(1), acc.RDPAccountant(dp.ApproxDP(10, 1e-5))
    honest = acc.pure(1.0)          # the cost's own curve (what rule 1 of check_curve_charge holds it to)
    assert honest.rdp is not None
    values = filter_rdp(honest)
    # honest at every order the filter reads, nothing in between, and a pure bound of nothing
    sly = acc.from_rdp(lambda a: float(np.interp(a, FILTER_ORDERS, values)) if a in set(FILTER_ORDERS) else 0.0,
                       eps_inf=1e-9)
    floor = _check_bare_curves("sly", (sly,), cost, filt)
    (read,) = _as_checked((sly,), [], floor)
    at = np.array([9.0, 100.0])
    assert np.all(np.asarray(read.rdp(at)) >= np.asarray(honest.rdp(at))) and read.eps_inf == 1.0
