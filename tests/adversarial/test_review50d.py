"""Review 50d: a third-party plugin author's first day, and what the engine checks of a misbehaving plugin.

``docs/plugins.md`` promises that "a buggy plugin cannot overspend silently" and that a mechanism's cost is "at
most the share"; DESIGN says the engine checks what it can of a plugin. Each test here is one way a mechanism or a
query family written from the docs can misbehave, and checks that the engine refuses it *before* anything is
charged, with a ``dp.PluginError`` that names the mechanism and the hook (``parts``, ``plan``, ``release``), or,
for what only shows on the private data, that the failure names the mechanism and stays charged. What the engine
cannot check (noise drawn from another generator, an exact statistic returned) is the conformance suite's job
(``docs/plugins.md``, "What the engine checks, and what you must show").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.budgets import Budget, make
from dpframe.family import Explain, FamilyPlan, Source
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.noise import RandomSource
from dpframe.plugin import plugin_host
from dpframe.testing import pin_mechanisms

ROWS = Statistic("rows")
DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "city": ["Oslo", "Rome"] * 200,
                     "x": [float(i % 13) for i in range(400)]})


@dataclass
class CountPlan(MechanismPlan):
    """A noisy row count; ``how`` selects the misbehaviour of ``release`` on real (non-zero) statistics."""

    count_noise: Noise | None = None
    how: str = "ok"

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.count_noise is not None
        exact = np.asarray(stats[ROWS.key], dtype=np.int64)
        noisy = exact + self.count_noise.sample(exact.size, rng)
        real = bool(exact.sum() > 0)           # the dry run before the charge sees all-zero statistics
        if self.how == "raise" and real:
            raise ValueError("a plugin's own error")
        if self.how == "short" and real:
            noisy = noisy[:1]
        if self.how == "extra" and real:
            return {m.output_name: noisy for m in self.measures} | {"extra": exact}
        return {m.output_name: noisy for m in self.measures}


class Count:
    """A plugin's row count, written from ``docs/plugins.md``; ``how`` makes it misbehave in one way."""

    notions = frozenset({"pure", "zcdp"})

    def __init__(self, how: str = "ok", kind: str | None = None) -> None:
        self.how = how
        self.name = f"count_{how}"
        self.handles = frozenset({kind or f"count_{how}"})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        if self.how == "validate_raises":
            raise KeyError("columns")

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> Any:
        return {"zero_parts": 0, "negative_parts": -1, "float_parts": 1.5, "bool_parts": True}.get(self.how, 1)

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        cost: Any = noise.cost()
        eps = share.epsilon if isinstance(share, dp.PureDP) else None
        if self.how == "undercharge":          # noise calibrated to the share, a tenth of it reported
            assert eps is not None
            cost = dp.PureDP(eps / 10)
        if self.how == "negative_cost":
            cost = make("pure", Fraction(-1, 2))
        if self.how == "zero_cost":
            cost = make("pure", Fraction(0))
        if self.how == "above_share":
            assert eps is not None
            cost = dp.PureDP(eps * Fraction(3, 2))
        if self.how == "float_cost":
            cost = 0.5
        if self.how == "plan_raises":
            raise KeyError("bounds")
        if self.how == "not_a_plan":
            return {"cost": cost}
        if self.how == "clears_measures":
            measures.clear()  # type: ignore[attr-defined]
        return CountPlan(self.name, tuple(measures), (ROWS,), cost, noise={"count": noise},
                         accuracy={m.output_name: "±?" for m in measures}, count_noise=noise, how=self.how)


@dataclass
class HalfPlan(CountPlan):
    """An honest plan that spends (and reports) half its share: allowed (``exact_cost = False``)."""


class Half(Count):
    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        assert isinstance(share, dp.PureDP)
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), dp.PureDP(share.epsilon / 2))
        return HalfPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise={"count": noise},
                        count_noise=noise)


def session(*mechanisms: Any, total: Budget | None = None) -> dp.Session:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=total or dp.PureDP(10),
                      seed=0)
    pin_mechanisms(sess, *mechanisms)
    return sess


def refused_free(sess: dp.Session, query: Callable[[], Any]) -> dp.DPFrameError:
    with pytest.raises(dp.DPFrameError) as info:
        query()
    assert sess.spent() == make("pure", Fraction(0)), "a plugin bug the engine can see is refused before the charge"
    return info.value


def test_honest_plugin_count_runs() -> None:
    """The baseline every misbehaving variant differs from by one thing."""
    sess = session(Count())
    out = sess.table("t").group_by("city", keys=["Oslo", "Rome"]).agg(dp.measure("count_ok")).collect(dp.PureDP(1))
    assert out.columns == ["city", "count_ok"] and sess.spent() == dp.PureDP(1)


def test_soundness_cost_below_its_declared_noise_is_refused() -> None:
    """Soundness: a plan whose declared noise costs ε = 1 but that reports ε = 1/10 was charged 1/10.

    The docs promise that a buggy plugin cannot overspend silently and that every noise is declared at its true
    parameters; the engine can add up the declared noises and refuse a cost below them, for free.
    """
    sess = session(Count("undercharge"))
    q = sess.table("t").agg(dp.measure("count_undercharge"))
    err = refused_free(sess, lambda: q.collect(dp.PureDP(1)))
    assert isinstance(err, dp.PluginError) and err.argument == "mechanism"
    assert "count_undercharge" in str(err) and "noise" in str(err)
    refused_free(sess, lambda: q.explain(dp.PureDP(1)))


@pytest.mark.parametrize("how", ["negative_cost", "zero_cost"])
def test_soundness_non_positive_cost_is_refused(how: str) -> None:
    """Soundness: a negative cost (``dpframe.budgets.make`` takes one) lowered the query's total below what the
    other mechanisms spend: ``dp.len()`` at ε = 1 next to it was charged 1/2. A zero cost released for free."""
    sess = session(Count(how))
    q = sess.table("t").agg(dp.len(), dp.measure(f"count_{how}"))
    err = refused_free(sess, lambda: q.collect(dp.PureDP(2)))
    assert isinstance(err, dp.PluginError) and err.argument == "mechanism" and f"count_{how}" in str(err)


def test_cost_above_its_share_is_refused_even_when_the_total_fits() -> None:
    """The docs say a cost is at most the share; one above it hid behind another plan's unspent half."""
    sess = session(Count("above_share"), Half("half"))
    q = sess.table("t").agg(dp.measure("count_above_share"), dp.measure("count_half"))
    err = refused_free(sess, lambda: q.collect(dp.PureDP(2)))
    assert isinstance(err, dp.PluginError) and "count_above_share" in str(err) and "share" in str(err)


def test_an_honest_cost_below_the_share_still_runs() -> None:
    sess = session(Half("half"))
    sess.table("t").agg(dp.measure("count_half")).collect(dp.PureDP(1))
    assert sess.spent() == dp.PureDP(Fraction(1, 2))


@pytest.mark.parametrize("how", ["zero_parts", "negative_parts", "float_parts", "bool_parts"])
def test_parts_must_be_a_positive_int(how: str) -> None:
    """``parts`` returned 0 (a raw ZeroDivisionError), 1.5 (a raw AttributeError) or -1 (run at a share
    computed from a negative part): a PluginError naming ``parts()`` and what it must return."""
    sess = session(Count(how))
    q = sess.table("t").agg(dp.len(), dp.measure(f"count_{how}"))
    err = refused_free(sess, lambda: q.collect(dp.PureDP(1)))
    assert isinstance(err, dp.PluginError) and "parts()" in str(err) and f"count_{how}" in str(err)
    assert err.fix is not None and "int" in err.fix


@pytest.mark.parametrize(("how", "hook"), [("plan_raises", "plan()"), ("validate_raises", "validate()"),
                                           ("not_a_plan", "plan()"), ("float_cost", "plan()"),
                                           ("clears_measures", "plan()")])
def test_a_hook_failing_with_a_foreign_error_names_the_hook(how: str, hook: str) -> None:
    """A KeyError from ``plan``, a dict instead of a MechanismPlan, a float cost, a ``measures.clear()`` (which
    released nothing and charged ε = 1): each a PluginError naming the mechanism and the hook, free."""
    sess = session(Count(how))
    err = refused_free(sess, lambda: sess.table("t").agg(dp.measure(f"count_{how}")).collect(dp.PureDP(1)))
    assert isinstance(err, dp.PluginError), repr(err)
    assert f"count_{how}" in str(err) and hook in str(err) and err.argument == "mechanism"


@pytest.mark.parametrize("how", ["raise", "short", "extra"])
def test_a_release_failing_on_the_data_names_the_mechanism(how: str) -> None:
    """After the charge (the dry run saw zeros only), a plugin's own ValueError, too short an array or an
    undeclared column said "check column types and expressions against Frame.schema": the plugin's author was
    sent to the analyst's query. The failure now names the mechanism and ``release()``; it stays charged and
    reports only the error's type."""
    sess = session(Count(how))
    q = sess.table("t").group_by("city", keys=["Oslo", "Rome"]).agg(dp.measure(f"count_{how}"))
    with pytest.raises(dp.DPFrameError) as info:
        q.collect(dp.PureDP(1))
    assert sess.spent() == dp.PureDP(1)
    text = str(info.value)
    assert f"count_{how}" in text and "release()" in text and "Frame.schema" not in text
    assert "a plugin's own error" not in text and info.value.__cause__ is None and info.value.__context__ is None


class RowsQuery:
    def __init__(self, source: Source, over: bool) -> None:
        self.source, self.over = source, over

    def epsilon_of(self, budget: Any) -> Fraction:
        return Fraction(budget.epsilon)     # the author forgot ZCDP budgets: an AttributeError on dp.ZCDP

    def describe(self) -> str:
        return "rows()"

    def plan(self, budget: Any) -> FamilyPlan[int]:
        cost = make("pure", self.epsilon_of(budget) * 10) if self.over else budget
        noise = Noise.calibrate(Fraction(self.source.unit.max_rows), cost)

        def run(reader: Any, rng: RandomSource) -> int:
            exact = int(reader.statistics(self.source.node, (ROWS,))[ROWS.key][0])
            return exact + int(noise.sample(1, rng)[0])
        return FamilyPlan(budget, cost, self.source.context.accountant.charge_plan(cost, None, 1.0), "rows",
                          Explain("rows"), run)


class Rows:
    attach, methods = "frame", ()
    result_types: dict[str, type] = {}

    def __init__(self, over: bool) -> None:
        self.over, self.name = over, "rows_over_r50d" if over else "rows_r50d"

    def build(self, source: Source) -> RowsQuery:
        return RowsQuery(source, self.over)


class RowsHooks:
    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        register(Rows(False))
        register(Rows(True))


@pytest.fixture(scope="module")
def rows_families() -> Any:
    host = plugin_host()
    host.register(RowsHooks(), name="rows_r50d")
    yield
    host.unregister(name="rows_r50d")


def test_soundness_family_cost_above_the_query_budget_is_refused(rows_families: Any) -> None:
    """Soundness: a family whose plan costs ε = 10 for a query given ε = 1 was charged 10 whenever the session
    had it (and, when it did not, told the analyst they had *requested* ε = 10). ``agg`` refuses its mechanisms'
    cost above the query's budget as a plugin bug; a family now gets the same check, free."""
    sess = session(total=dp.PureDP(50))
    assert sess.table("t").rows_r50d().collect(dp.PureDP(1)) > 0
    assert sess.spent() == dp.PureDP(1)
    sess = session(total=dp.PureDP(50))
    q = sess.table("t").rows_over_r50d()
    err = refused_free(sess, lambda: q.collect(dp.PureDP(1)))
    assert isinstance(err, dp.PluginError) and "rows()" in str(err) and "more than the query's" in str(err)
    refused_free(sess, lambda: q.explain(dp.PureDP(1)))


@pytest.mark.parametrize("sql", ["SELECT COUNT_OK(x) AS n FROM t",
                                 "SELECT city, COUNT(*) AS n, COUNT_OK(CLAMP(x, 0, 12)) FROM t GROUP BY city",
                                 "SELECT city, COUNT(*) AS n FROM t GROUP BY city HAVING count_ok(x) > 3"])
def test_sql_names_an_unknown_aggregate_and_the_method_chain(sql: str) -> None:
    """A plugin author tries the new measure in SQL (``docs/sql.md`` says SQL goes through "the same mechanism
    plugins"); SQL reaches only its listed aggregates. The refusal said "the raw column 'x' would be released":
    now it names the function, says what SQL supports and how to reach a plugin's kind (``dp.measure``)."""
    sess = session(Count())
    with pytest.raises(dp.PlanError) as info:
        sess.sql(sql).explain(dp.PureDP(1))
    text = str(info.value)
    assert info.value.argument == "sql" and "COUNT_OK" in text.upper() and "raw column" not in text
    assert info.value.fix is not None and "dp.measure(" in info.value.fix and "COUNT(*)" in info.value.fix


def test_sql_a_duckdb_aggregate_named_like_a_plugin_kind_points_to_the_method_chain() -> None:
    """``HISTOGRAM`` is a DuckDB aggregate and the example plugin's kind: the refusal listed SQL's aggregates only."""
    sess = session(Count())
    with pytest.raises(dp.PlanError) as info:
        sess.sql("SELECT HISTOGRAM(x) FROM t").explain(dp.PureDP(1))
    assert info.value.fix is not None and "dp.measure('histogram'" in info.value.fix


def test_a_family_plan_failing_with_a_foreign_error_names_the_family(rows_families: Any) -> None:
    """The author's family read ``budget.epsilon`` of a ``dp.ZCDP`` query budget: a raw AttributeError from
    ``cost()``. Now a PluginError (nothing charged) naming the query and ``plan()``, as for a mechanism's hooks."""
    sess = session(total=dp.ZCDP(5))
    q = sess.table("t").rows_over_r50d()
    with pytest.raises(dp.PluginError) as info:
        q.collect(dp.ZCDP(Fraction(1, 10)))
    assert "rows()" in str(info.value) and "plan()" in str(info.value) and "AttributeError" in str(info.value)
    assert sess.spent() == make("zcdp", Fraction(0))


@dataclass
class WrongOutputsPlan(CountPlan):
    def output_names(self) -> tuple[str, ...]:
        return ("declared_only",)


class WrongOutputs(Count):
    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        return WrongOutputsPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise={"count": noise},
                                count_noise=noise)


class FailsOnZeros(Count):
    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        plan = super().plan(measures, ctx, share)
        plan.count_noise = None                # release() then fails on any statistics, zeros included
        return plan


@pytest.mark.parametrize(("mechanism", "says"), [(WrongOutputs("wrong_outputs"), "output_names()"),
                                                 (FailsOnZeros("fails_on_zeros"), "AssertionError")])
def test_the_dry_run_names_release_and_what_it_must_return(mechanism: Count, says: str) -> None:
    """The dry run before the charge refused these with "this is a plugin bug": now it names ``release()`` and
    what it must return."""
    sess = session(mechanism)
    err = refused_free(sess, lambda: sess.table("t").agg(dp.measure(mechanism.name)).collect(dp.PureDP(1)))
    assert isinstance(err, dp.PluginError) and "release()" in str(err) and says in str(err)
    assert err.fix is not None and "output_names()" in err.fix


class _Named(Count):
    def __init__(self, name: str, handles: Any, notions: Any) -> None:
        super().__init__()
        self.name, self.handles, self.notions = name, handles, notions


@pytest.mark.parametrize(("handles", "notions", "says"), [
    (frozenset({"kind_r50d"}), frozenset({"puree"}), "'puree'"),       # a typo: routed nowhere, said the budget
    (frozenset({"kind_r50d"}), "pure", "notions"),                     # a str: "zcdp" in "pure" is False by luck
    ("kind_r50d", frozenset({"pure"}), "handles"),                     # a str: 'k' in handles would route
    (frozenset(), frozenset({"pure"}), "handles"),
])
def test_a_mechanism_declaring_unknown_notions_or_kinds_is_refused_when_registered(handles: Any, notions: Any,
                                                                                   says: str) -> None:
    """``notions = frozenset({"puree"})`` registered, then every query said "give the query a budget of a notion
    listed there"; a ``str`` for ``handles`` or ``notions`` registered and matched by substring. The registration
    now refuses them, naming the hook and the attribute."""
    class Hooks:
        @dp.hookimpl
        def dpframe_mechanisms(self, register: Any) -> None:
            register(_Named("named_r50d", handles, notions))
    host = plugin_host()
    try:
        with pytest.raises(dp.PluginError) as info:
            host.register(Hooks(), name="named_r50d")
            dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(1))
    finally:
        if "named_r50d" in [p.name for p in host.describe()]:
            host.unregister("named_r50d")
    assert info.value.argument == "dpframe_mechanisms" and says in str(info.value)
    assert info.value.fix is not None and "frozenset" in info.value.fix


def test_a_misspelt_hook_is_refused_with_every_hook_name() -> None:
    """``dpframe_query_family`` (for ``dpframe_query_families``) was refused with a fix listing four of the six
    hooks, leaving out the one the author meant."""
    class Hooks:
        @dp.hookimpl
        def dpframe_query_family(self, register: Any) -> None:
            register(Rows(False))
    with pytest.raises(dp.PluginError) as info:
        plugin_host().register(Hooks(), name="misspelt_r50d")
    assert info.value.fix is not None
    assert all(hook in info.value.fix for hook in ("dpframe_query_families", "dpframe_audits", "dpframe_methods"))
