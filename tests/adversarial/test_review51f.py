"""Review 51f: a plugin's plan is charged no less than the noise it declares costs (curves in RDP/PLD sessions, a
deferred noise table, a plan changed after its check) and SQL ``ci=`` on expressions over measures.

Each test is one attack; those that found something say so in their docstring.
"""

from __future__ import annotations

import dataclasses
import secrets
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.budgets import Budget, make
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, Noise
from dpframe.mechanism.deferred import DeferredMapping
from dpframe.planning.state import first
from dpframe.testing import pin_mechanisms
from tests.adversarial.test_review50d import ROWS, CountPlan

DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "city": ["Oslo", "Rome"] * 200,
                     "x": [float(i % 13) for i in range(400)], "y": [float(i % 7) for i in range(400)]})
UNIT = dp.PrivacyUnit("u", max_rows=2)


def honest_curve(noise: Noise) -> acc.PrivacyCurve:
    """The exact curve of ``noise`` on one integer statistic (what the engine's aggregates declare)."""
    if noise.distribution == "discrete_laplace":
        return acc.discrete_laplace(float(noise.scale), int(noise.sensitivity))
    return acc.discrete_gaussian(float(noise.scale) ** 0.5, float(noise.sensitivity))


def weak_curve(noise: Noise) -> acc.PrivacyCurve:
    """A curve a hundred times too private for ``noise`` (its noise scale times 100)."""
    if noise.distribution == "discrete_laplace":
        return acc.discrete_laplace(float(noise.scale) * 100, int(noise.sensitivity))
    return acc.discrete_gaussian(float(noise.scale) ** 0.5 * 100, float(noise.sensitivity))


class CurveCount:
    """A count plugin whose noise is calibrated to its share (its cost: the share) and whose declared privacy curve is
    ``curve(noise)``; ``table`` wraps its noise table (a dict, or a :class:`DeferredMapping`)."""

    notions = frozenset({"pure", "zcdp"})

    def __init__(self, name: str, curve: Callable[[Noise], acc.PrivacyCurve] | None = None,
                 table: Callable[[dict[str, object]], Any] = dict, cost_scale: Fraction = Fraction(1)) -> None:
        self.name, self.curve, self.table, self.cost_scale = name, curve, table, cost_scale
        self.handles = frozenset({name})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        pass

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        return 1

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        cost = make(share.notion, first(share) * self.cost_scale)
        noises: dict[str, object] = {"count": noise}
        return CountPlan(self.name, tuple(measures), (ROWS,), cost, noise=self.table(noises),
                         privacy=None if self.curve is None else (self.curve(noise),), count_noise=noise)


def _session(accountant: str, budget: Budget | None = None) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=UNIT, budget=budget or dp.ApproxDP(50, 1e-5), accountant=accountant,
                      seed=0)


# -- 1. declared privacy curves against the declared noise -----------------------------------------------------------


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_soundness_a_declared_curve_below_its_declared_noise_is_refused(accountant: str) -> None:
    """Found: an RDP/PLD session charges a plan's declared privacy curves, and nothing compared them with the noise
    the plan declares: a plugin whose discrete Laplace noise is calibrated to its share (and reports that cost) but
    declares the curve of a noise 100 times wider was charged 1/100 of... its noise's RDP, and ran. Now a PluginError,
    nothing charged."""
    sess = _session(accountant)
    pin_mechanisms(sess, CurveCount("weak_curve", weak_curve))
    q = sess.table("t").agg(dp.measure("weak_curve"))
    for run in (q.cost, q.collect):
        with pytest.raises(dp.PluginError) as refused:
            run(dp.ApproxDP(1, 1e-6))
        assert "weak_curve" in str(refused.value) and refused.value.argument == "mechanism"
    assert sess.history().height == 0


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_an_honest_declared_curve_still_runs_and_is_what_is_charged(accountant: str) -> None:
    sess = _session(accountant)
    pin_mechanisms(sess, CurveCount("exact_curve", honest_curve))
    q = sess.table("t").agg(dp.measure("exact_curve"))
    q.cost(dp.ApproxDP(1, 1e-6))
    q.collect(dp.ApproxDP(1, 1e-6))
    assert sess.history().height == 1


def test_soundness_a_curve_that_is_low_at_one_filter_order_only_is_refused() -> None:
    """A curve honest at the orders one might spot-check (2, 8, 32) and zero at every other order the filter reads."""
    orders = {2.0, 8.0, 32.0}

    def sly(noise: Noise) -> acc.PrivacyCurve:
        honest = honest_curve(noise)
        assert honest.rdp is not None
        rdp = honest.rdp
        return acc.from_rdp(lambda a: float(rdp(__import__("numpy").array([a]))[0]) if a in orders else 1e-300,
                            label="sly")

    sess = _session("rdp")
    pin_mechanisms(sess, CurveCount("sly_curve", sly))
    with pytest.raises(dp.PluginError):
        sess.table("t").agg(dp.measure("sly_curve")).collect(dp.ApproxDP(1, 1e-6))
    assert sess.history().height == 0


class SubsampledToNothing(acc.PrivacyCurve):
    """A curve whose own ``subsampled`` says a Poisson sample makes it free."""

    def subsampled(self, rate: float) -> acc.PrivacyCurve:
        return acc.from_rdp(lambda a: 1e-300, label="nothing")


def _lying(claim: str) -> Callable[[Noise], acc.PrivacyCurve]:
    def curve(noise: Noise) -> acc.PrivacyCurve:
        honest = honest_curve(noise)
        if claim == "eps_inf":
            return dataclasses.replace(honest, eps_inf=1e-9)
        if claim == "sampled_rdp":
            return dataclasses.replace(honest, sampled_rdp=lambda rate: (lambda a: a * 0.0))
        if claim == "tight_subsampling":
            return dataclasses.replace(honest, tight_subsampling=True)
        return SubsampledToNothing(**{f.name: getattr(honest, f.name) for f in dataclasses.fields(honest)})
    return curve


def _sampled_charge(claim: str) -> Any:
    sess = _session("rdp")
    pin_mechanisms(sess, CurveCount("count", honest_curve if claim == "honest" else _lying(claim)))
    return sess.table("t").sample(0.1).agg(dp.measure("count")).cost(dp.ApproxDP(1, 1e-6))


def test_soundness_a_curve_s_pure_bound_below_its_noise_is_refused() -> None:
    """Found: on a Poisson-sampled frame an RDP session caps the amplified curve by the curve's pure bound ``eps_inf``,
    which nothing checked: a plugin whose curve is honest at every order but claims ε∞ = 10⁻⁹ was charged 0 at every
    order of the filter. Its ε∞ is now compared with its noise's (Δ/t for a discrete Laplace, ∞ for a Gaussian)."""
    with pytest.raises(dp.PluginError) as refused:
        _sampled_charge("eps_inf")
    assert "pure" in str(refused.value)


@pytest.mark.parametrize("claim", ["sampled_rdp", "tight_subsampling", "subclass"])
def test_soundness_a_curve_s_own_subsampling_claims_are_not_charged(claim: str) -> None:
    """Found: on a Poisson-sampled frame the charge is the declared curves' composition ``.subsampled(rate)``, which
    reads claims of the curve the check does not see: its exact ``sampled_rdp`` (a plugin's function), its
    ``tight_subsampling`` flag, or a subclass's own ``subsampled``; each made the charge 0 (or lower). A plugin
    curve carrying one is charged as a plain curve of its checked RDP (the general amplification bound)."""
    honest, lying = _sampled_charge("honest"), _sampled_charge(claim)
    assert all(a >= b for a, b in zip(lying.values, honest.values)), (lying, honest)


# -- 2. a deferred noise table is read -------------------------------------------------------------------------------


@pytest.mark.parametrize("accountant", ["basic", "rdp"])
def test_soundness_a_deferred_noise_table_is_checked_too(accountant: str) -> None:
    """Found: the noise check skipped a noise table that is a :class:`DeferredMapping` not built yet (the engine's own
    plans build theirs on first read), so a plugin that wraps its table in one reported a tenth of what its noise
    costs and was charged that. The table is now built and checked."""
    sess = _session(accountant)
    pin_mechanisms(sess, CurveCount("deferred_table", table=lambda t: DeferredMapping(lambda: t),
                                    cost_scale=Fraction(1, 10)))
    with pytest.raises(dp.PluginError) as refused:
        sess.table("t").agg(dp.measure("deferred_table")).collect(dp.ApproxDP(1, 1e-6))
    assert "below what the noise its plan declares costs" in str(refused.value)
    assert sess.history().height == 0


def test_a_noise_table_that_fails_to_build_is_the_plugin_s_error() -> None:
    """A deferred noise table (now read before the charge) whose build raises: a PluginError naming the mechanism,
    not the plugin's own KeyError, and nothing charged."""
    def broken(table: dict[str, object]) -> Any:
        empty: dict[str, object] = {}
        return DeferredMapping(lambda: {"count": empty["count"]})

    sess = _session("rdp")
    pin_mechanisms(sess, CurveCount("broken_table", honest_curve, table=broken))
    with pytest.raises(dp.PluginError, match="broken_table' failed reading its noise table"):
        sess.table("t").agg(dp.measure("broken_table")).collect(dp.ApproxDP(1, 1e-6))
    assert sess.history().height == 0


# -- 3. check, then act: a plan changed after its check --------------------------------------------------------------


@dataclass
class ShiftyPlan(CountPlan):
    """A plan that, once checked, lowers its own cost (and swaps its curves) when the engine asks its output names."""

    def output_names(self) -> tuple[str, ...]:
        self.cost = make(self.cost.notion, first(self.cost) / 100)
        if self.privacy is not None and self.count_noise is not None:
            self.privacy = (weak_curve(self.count_noise),)
        return super().output_names()


class Shifty(CurveCount):
    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        p = super().plan(measures, ctx, share)
        return ShiftyPlan(p.mechanism, p.measures, p.statistics, p.cost, noise=p.noise, privacy=p.privacy,
                          count_noise=p.count_noise)


@pytest.mark.parametrize("accountant", ["basic", "rdp"])
def test_soundness_a_plan_is_charged_what_was_checked(accountant: str) -> None:
    """Found: plugin code (``output_names()``) runs between ``check_plugin_costs`` and ``price``, which read the plan's
    ``cost`` (and curves) again: a plan that lowered its cost after the check was charged 1/100 of its noise. The
    checked cost and curves are what is charged now."""
    honest, shifty = _session(accountant), _session(accountant)
    pin_mechanisms(honest, CurveCount("count", honest_curve))
    pin_mechanisms(shifty, Shifty("count", honest_curve))
    for sess in (honest, shifty):
        sess.table("t").agg(dp.measure("count")).collect(dp.ApproxDP(1, 1e-6))
    assert shifty.spent() == honest.spent() and shifty.history().height == 1


# -- no false refusal: every built-in mechanism and family under every accountant ------------------------------------

BUILT_INS: list[tuple[str, Callable[[dp.Session], Any]]] = [
    ("aggregates", lambda s: s.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 20)), dp.mean("x", bounds=(0, 20)),
                                              dp.var("x", bounds=(0, 20)), dp.count_units())),
    ("grouped", lambda s: s.table("t").group_by("city", keys=["Oslo", "Rome"]).agg(dp.len(),
                                                                               dp.std("x", bounds=(0, 20)))),
    ("selection", lambda s: s.table("t").group_by("city").agg(dp.len(), dp.sum("x", bounds=(0, 20)))),
    ("quantiles", lambda s: s.table("t").agg(dp.median("x", bounds=(0, 20)), dp.quantile("x", 0.9, bounds=(0, 20)))),
    ("histogram", lambda s: s.table("t").agg(dp.measure("histogram", "x", bounds=(0, 20), edges=(0, 5, 10, 20)))),
    ("sampled", lambda s: s.table("t").sample(0.5).agg(dp.len(), dp.sum("x", bounds=(0, 20)))),
    ("top_k", lambda s: s.table("t").group_by("city").top_k(k=1, score=dp.len())),
    ("interior_point", lambda s: s.table("t").interior_point("x", bounds=(0, 20))),
    ("regression", lambda s: s.table("t").linear_regression(["x"], "y", bounds={"x": (0, 20), "y": (0, 10)})),
    ("sql", lambda s: s.sql("SELECT city, COUNT(*) AS n, AVG(CLAMP(x, 0, 20)) AS m FROM t GROUP BY city")),
]


@pytest.mark.parametrize("accountant", ["basic", "zcdp", "rdp", "pld"])
def test_no_built_in_is_refused_under_any_accountant(accountant: str) -> None:
    budget = dp.ZCDP(50, 1e-5) if accountant == "zcdp" else dp.ApproxDP(50, 1e-5)
    query_budget = dp.ZCDP(Fraction(1, 2), 1e-6) if accountant == "zcdp" else dp.ApproxDP(1, 1e-6)
    sess = _session(accountant, budget)
    refused = []
    for name, build in BUILT_INS:
        try:
            build(sess).cost(query_budget)
        except dp.PluginError as e:
            refused.append((name, str(e)))
    assert refused == []


# -- 4. SQL ci= on expressions over measures -------------------------------------------------------------------------


def _sql_session() -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.PureDP(10), seed=0,
                      public_keys={"t.city": ["Oslo", "Rome"]})


@pytest.mark.parametrize("sql", ["SELECT COUNT(*) + 1 AS n FROM t",
                                 "SELECT COUNT(*) + MEDIAN(CLAMP(x, 0, 20)) AS s FROM t",
                                 "SELECT city, 2 * COUNT(*) AS n FROM t GROUP BY city"])
def test_sql_ci_on_expressions_only_is_refused_free_as_the_method_chain(sql: str) -> None:
    """Found: ``ci=`` on a SQL query whose outputs are only expressions over measures added no interval column, with
    neither the method chain's "no output has a confidence interval" refusal nor a ``dp.NoIntervalWarning``: the
    analyst was charged for intervals that never came. Now a PlanError naming ``ci``, free."""
    sess = _sql_session()
    with pytest.raises(dp.PlanError) as refused:
        sess.sql(sql).collect(dp.PureDP(1), ci=0.9)
    assert refused.value.argument == "ci" and sess.history().height == 0


def test_sql_ci_warns_about_an_expression_beside_a_measure_with_an_interval() -> None:
    sess = _sql_session()
    q = sess.sql("SELECT COUNT(*) AS n, COUNT(*) + 1 AS m, SUM(CLAMP(x, 0, 20)) / COUNT(*) AS r FROM t")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = q.collect(dp.PureDP(1), ci=0.9)
    assert [w.category for w in caught] == [dp.NoIntervalWarning]
    assert caught[0].message.outputs == ("m", "r")  # type: ignore[union-attr]
    assert out.columns == ["n", "n_ci_low", "n_ci_high", "m", "r"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.NoIntervalWarning)
        with pytest.raises(dp.NoIntervalWarning):
            q.collect(dp.PureDP(1), ci=0.9)
    assert sess.history().height == 1, "the strict caller is refused before the charge"


def test_sql_ci_on_expressions_through_a_server() -> None:
    sess = _sql_session()
    key = secrets.token_bytes(32)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        with pytest.raises(dp.PlanError) as refused:
            remote.sql("SELECT COUNT(*) + 1 AS n FROM t").collect(dp.PureDP(1), ci=0.9)
        assert refused.value.argument == "ci" and sess.history().height == 0
        with warnings.catch_warnings():
            warnings.simplefilter("error", dp.NoIntervalWarning)
            with pytest.raises(dp.NoIntervalWarning) as warned:
                remote.sql("SELECT COUNT(*) AS n, COUNT(*) + 1 AS m FROM t").collect(dp.PureDP(1), ci=0.9)
        assert warned.value.outputs == ("m",) and sess.history().height == 0
