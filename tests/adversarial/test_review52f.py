"""Review 52f: a plugin author's third day.

* Attribution: plugin code that runs while a query is planned (``validate``, ``parts``, ``plan``, a deferred noise
  table, ``output_names()``, the texts ``explain()`` reads, a family's ``plan`` and explanation) and calls one of
  dpframe's samplers with a bad argument is a ``dp.PluginError`` naming the plugin and the hook, not an
  ``ArgumentError`` that blames the analyst; nothing is charged, and after the charge the failure names the
  mechanism, stays charged and quotes no value. An analyst's bad argument is still an ``ArgumentError``.
* Routing: a plugin that replaces a built-in by name (``replaces=``) takes the built-in's place, its precedence
  included; two plugins replacing the same name are refused, naming both.
* ``FamilyConformance`` runs a family that is not registered anywhere, and leaves the process-wide host as it was.
* Result types: ``sess.plugins.result_types()`` gives a pinned family's ``dp.<Name>`` types.
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
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise
from dpframe.mechanism.deferred import DeferredMapping
from dpframe.noise import RandomSource, SeededRandomSource, discrete_laplace
from dpframe.plugin import PluginHost, plugin_host
from dpframe.testing import FamilyConformance, pin_families, pin_mechanisms
from tests.adversarial.doubles import ROWS, RowsFamily, RowsQuery

DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "city": ["Oslo", "Rome"] * 200,
                     "x": [float(i % 13) for i in range(400)]})
ZERO = make("pure", Fraction(0))


def _bad_sample() -> None:
    """A plugin's own slip: a sampler called with a negative scale (no analyst value involved)."""
    discrete_laplace(-1, 1, SeededRandomSource(0))


@dataclass
class SlipPlan(MechanismPlan):
    """A noisy row count whose ``where`` hook calls a sampler with a bad argument."""

    count_noise: Noise | None = None
    where: str = ""

    def output_names(self) -> tuple[str, ...]:
        if self.where == "output_names":
            _bad_sample()
        if self.where == "output_names_keyerror":
            raise KeyError("outputs")
        return super().output_names()

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.count_noise is not None
        exact = np.asarray(stats[ROWS.key], dtype=np.int64)
        if self.where == "release" and exact.sum() > 0:      # on the data only (the dry run sees zeros)
            discrete_laplace(-int(exact.sum()), 1, rng)       # a scale derived from the private count
        return {m.output_name: exact + self.count_noise.sample(exact.size, rng) for m in self.measures}


class Slip:
    """A mechanism written from docs/plugins.md whose ``where`` hook calls a sampler with a bad argument."""

    notions = frozenset({"pure", "zcdp"})

    def __init__(self, where: str, refuse: str | None = None) -> None:
        self.where, self.refuse = where, refuse
        self.name = f"slip_{where}"
        self.handles = frozenset({"slip"})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        if self.refuse is not None and measure.option("edges") is not None:   # the plugin refuses an option
            raise dp.ArgumentError("edges must increase", argument="edges", fix="pass increasing edges")
        if self.where == "validate":
            _bad_sample()

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        if self.where == "parts":
            _bad_sample()
        return 1

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> MechanismPlan:
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        if self.where == "plan":
            _bad_sample()
        if self.where == "plan_rng":
            noise.sample(1, None)  # type: ignore[arg-type]     # no rng while planning

        def table() -> dict[str, object]:
            if self.where == "noise_table":
                _bad_sample()
            return {"count": noise}

        def accuracy() -> dict[str, str]:
            if self.where == "accuracy":
                _bad_sample()
            if self.where == "accuracy_valueerror":      # (a KeyError would read as a missing key: no text)
                raise ValueError("ci")
            return {m.output_name: f"±{noise.ci95():.3g}" for m in measures}
        return SlipPlan(self.name, tuple(measures), (ROWS,), noise.cost(), noise=DeferredMapping(table),
                        accuracy=DeferredMapping(accuracy), count_noise=noise, where=self.where)


def _session(*mechanisms: Any, data: pl.DataFrame = DATA) -> dp.Session:
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0)
    return pin_mechanisms(sess, *mechanisms)


def _refused_free(sess: dp.Session, call: Callable[[], Any], kind: type[dp.DPFrameError]) -> dp.DPFrameError:
    with pytest.raises(dp.DPFrameError) as info:
        call()
    assert type(info.value) is kind, f"{type(info.value).__name__}: {info.value}"
    assert sess.spent() == ZERO and sess.history().height == 0
    return info.value


@pytest.mark.parametrize(("where", "hook"), [
    ("validate", "validate()"), ("parts", "parts()"), ("plan", "plan()"), ("plan_rng", "plan()"),
    ("noise_table", "its noise table"), ("output_names", "output_names()"),
])
@pytest.mark.parametrize("step", ["cost", "explain", "collect"])
def test_a_sampler_slip_while_planning_is_the_plugins_error(where: str, hook: str, step: str) -> None:
    """The attack on attribution: a sampler's ArgumentError out of plugin code read as the analyst's mistake."""
    sess = _session(Slip(where))

    def query() -> Any:      # validate() runs when the query is built
        return sess.table("t").group_by("city", keys=["Oslo", "Rome"]).agg(dp.measure("slip"))
    err = _refused_free(sess, lambda: getattr(query(), step)(dp.PureDP(1)), dp.PluginError)
    assert f"slip_{where}" in str(err) and hook in str(err), str(err)
    assert "dpframe.noise" in str(err) and err.argument == "mechanism"


@pytest.mark.parametrize("where", ["accuracy", "accuracy_valueerror"])
def test_the_texts_explain_reads_name_the_mechanism(where: str) -> None:
    """A deferred accuracy table is plugin code run by explain() only: a failure there names the mechanism too."""
    sess = _session(Slip(where))
    query = sess.table("t").agg(dp.measure("slip"))
    err = _refused_free(sess, lambda: query.explain(dp.PureDP(1)), dp.PluginError)
    assert f"slip_{where}" in str(err) and "explain()" in str(err), str(err)
    assert query.collect(dp.PureDP(1)).columns == ["slip"]      # collect() never reads it


def test_a_foreign_error_in_output_names_names_the_mechanism() -> None:
    sess = _session(Slip("output_names_keyerror"))
    err = _refused_free(sess, lambda: sess.table("t").agg(dp.measure("slip")).cost(dp.PureDP(1)), dp.PluginError)
    assert "slip_output_names_keyerror" in str(err) and "KeyError" in str(err)


def test_the_refusal_does_not_depend_on_the_data() -> None:
    """Planning sees no rows: the same refusal, word for word, on a table and its neighbour."""
    texts = []
    for data in (DATA, pl.concat([DATA, DATA.head(2).with_columns(pl.lit(10**6, dtype=pl.Int64).alias("u"))])):
        sess = _session(Slip("plan"), data=data)
        texts.append(str(_refused_free(sess, lambda s=sess: s.table("t").agg(dp.measure("slip")).collect(
            dp.PureDP(1)), dp.PluginError)))
    assert texts[0] == texts[1]


def test_the_analysts_bad_argument_is_still_an_argument_error() -> None:
    """What a plugin refuses on purpose (its own dp.ArgumentError), and the built-ins' checks, still blame the call."""
    sess = _session(Slip("none", refuse="edges"))
    err = _refused_free(sess, lambda: sess.table("t").agg(dp.measure("slip", edges=(2, 1))).cost(dp.PureDP(1)),
                        dp.ArgumentError)
    assert err.argument == "edges"
    plain = _session()
    with pytest.raises(dp.ArgumentError) as info:
        plain.table("t").agg(dp.quantile("x", 90, bounds=(0, 20))).cost(dp.PureDP(1))
    assert info.value.argument == "q" and plain.spent() == ZERO
    _refused_free(plain, lambda: plain.table("t").agg(dp.measure("histogram", "x", bounds=(0, 20), edges=(5, 1)))
                  .cost(dp.PureDP(1)), dp.BoundsError)


def test_a_sampler_slip_on_the_data_stays_charged_and_quotes_no_value() -> None:
    """After the charge: the failure names the mechanism and the hook, keeps the charge, and drops the message
    (its scale was the private count)."""
    sess = _session(Slip("release"))
    with pytest.raises(dp.DPFrameError) as info:
        sess.table("t").agg(dp.measure("slip")).collect(dp.PureDP(1))
    assert "slip_release" in str(info.value) and "release()" in str(info.value)
    assert "ArgumentError" in str(info.value) and "400" not in str(info.value) and info.value.__cause__ is None
    assert sess.spent() == dp.PureDP(1) and sess.history()["status"].to_list() == ["failed"]


class SlipQuery(RowsQuery):
    """A family's query whose plan (or explanation) calls a sampler with a bad argument."""

    def share(self, budget: Any) -> Budget:
        return budget if isinstance(budget, dp.ZCDP) else dp.PureDP(budget.epsilon)

    def explain(self) -> Explain:
        if self.how == "explain":
            _bad_sample()
        if self.how == "explain_keyerror":
            raise KeyError("title")
        return super().explain()

    def plan(self, budget: Any) -> FamilyPlan[int]:
        planned = super().plan(budget)      # the noise is calibrated first, as a family would
        if self.how == "plan":
            _bad_sample()
        return planned


class SlipRows(RowsFamily):
    def __init__(self) -> None:
        super().__init__("slip_rows", SlipQuery)

    def build(self, source: Source, how: Any = "") -> RowsQuery:
        if how == "build":
            _bad_sample()
        return super().build(source, how)


@pytest.mark.parametrize(("where", "step", "hook"), [
    ("plan", "cost", "plan()"), ("plan", "collect", "plan()"), ("explain", "explain", "explain()"),
    ("explain_keyerror", "explain", "explain()"), ("build", None, "build()"),
])
def test_a_family_slip_names_the_family(where: str, step: str | None, hook: str) -> None:
    sess = pin_families(_session(), SlipRows())
    frame = sess.table("t")
    call = (lambda: frame.slip_rows(where)) if step is None else \
        (lambda: getattr(frame.slip_rows(where), step)(dp.PureDP(1)))
    err = _refused_free(sess, call, dp.PluginError)
    assert "slip_rows" in str(err) and hook in str(err), str(err)
    assert frame.slip_rows().collect(dp.PureDP(1)) > 0             # the honest variant runs


# --- Routing: replacing a built-in is an explicit override, with the built-in's precedence -----------------------

def _sum_mechanism(name: str, kinds: set[str], notions: tuple[str, ...] = ("pure", "zcdp")) -> Any:
    from dpframe_aggregates import AggregateMechanism

    m = AggregateMechanism()
    m.name, m.handles, m.notions = name, frozenset(kinds), frozenset(notions)     # type: ignore[misc]
    return m


class _Mechanisms:
    def __init__(self, *mechanisms: tuple[Any, str | None]) -> None:
        self.mechanisms = mechanisms

    @dp.hookimpl
    def dpframe_mechanisms(self, register: Any) -> None:
        for m, replaces in self.mechanisms:
            register(m, replaces=replaces)


def _replacing_host() -> tuple[PluginHost, Any]:
    """A fresh host: ``mine`` replaces the built-in ``aggregates`` on purpose (and adds ``mykind``); ``other`` offers
    ``sum`` and ``mykind`` next to it."""
    host = PluginHost()
    mine = _sum_mechanism("aggregates", {"sum", "len", "mykind"})
    host.register(_Mechanisms((mine, "aggregates")), name="mine")
    host.register(_Mechanisms((_sum_mechanism("othersum", {"sum", "mykind"}), None)), name="other")
    return host, mine


def _route(host: PluginHost, name: str, notion: str) -> Any:
    [found] = [r for r in host.routes() if (r.what, r.name, r.notion) == ("measure", name, notion)]
    return found


def test_a_replacement_of_a_built_in_keeps_its_precedence() -> None:
    """The documented override (``replaces="aggregates"``) made ``sum`` third-party: installing any other plugin that
    offers ``sum`` made every ``dp.sum`` ambiguous, refused. The replacement stands in the built-in's place."""
    host, mine = _replacing_host()
    for notion in ("pure", "zcdp"):
        route = _route(host, "sum", notion)
        assert (route.handler, route.plugin, route.replaced, route.also) == \
            ("aggregates", "mine", "aggregates", ("othersum (other)",))
        assert host.mechanism_for("sum", notion) is mine
    assert host.mechanism_for("sum", "pure", "othersum") is not mine      # named, the other one runs
    assert _route(host, "len", "pure").handler == "aggregates"


def test_a_kind_the_replaced_built_in_did_not_serve_stays_ambiguous() -> None:
    """Precedence is the built-in's, for what the built-in served: ``mykind`` is new, offered by two third parties."""
    host, _ = _replacing_host()
    route = _route(host, "mykind", "pure")
    assert route.handler is None and route.also == ("aggregates (mine)", "othersum (other)")
    with pytest.raises(dp.PluginError, match="several plugins") as info:
        host.mechanism_for("mykind", "pure")
    assert "'mine'" in str(info.value) and "'other'" in str(info.value) and info.value.argument == "mechanism"
    assert "DPFRAME_BLOCK_PLUGINS" in (info.value.fix or "") and "mechanism='othersum'" in (info.value.fix or "")


def test_two_plugins_replacing_one_built_in_are_refused_naming_both() -> None:
    """Which one won depended on the order the environment lists entry points in: refused, naming both."""
    host, _ = _replacing_host()
    with pytest.raises(dp.PluginError) as info:
        host.register(_Mechanisms((_sum_mechanism("aggregates", {"sum"}), "aggregates")), name="third")
    text = str(info.value)
    assert "'third'" in text and "'mine'" in text and "'aggregates'" in text and "DPFRAME_BLOCK_PLUGINS" in text
    assert host.mechanism_for("sum", "pure") is dict(host.mechanisms())["mine"]   # the host is as it was
    assert "third" not in {name for name, _ in host.pm.list_name_plugin()}


def test_the_cli_marks_the_override(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from dpframe import cli

    host, _ = _replacing_host()
    monkeypatch.setattr(cli, "plugin_host", lambda: host)
    assert cli.main(["plugins"]) == 0
    table, routing = capsys.readouterr().out.split("\n\n", 1)
    mine = next(line for line in table.splitlines() if line.split()[0] == "mine")
    assert "aggregates: len, mykind, sum [pure/zcdp] (replaces aggregates's)" in mine
    row = next(line for line in routing.splitlines() if line.split()[:2] == ["sum", "pure/zcdp"])
    assert "aggregates (mine, replaces aggregates's)" in row and "othersum (other)" in row
    row = next(line for line in routing.splitlines() if line.split()[:2] == ["mykind", "pure/zcdp"])
    assert "ambiguous" in row


def test_pins_still_stack_over_a_replacement() -> None:
    """A test's pins (``pin_families``) go over whatever is installed, a replacement included, and over each other."""
    class Named:
        attach, methods, result_types = "frame", (), {}

        def __init__(self, tag: str) -> None:
            self.name, self.tag = "bounds", tag

        def build(self, source: Source, /, *args: Any, **kwargs: Any) -> Any:
            return plugin_host().family("bounds").build(source, *args, **kwargs)
    sess = pin_families(pin_families(_session(), Named("first")), Named("second"))
    assert sess.plugins.family("bounds").tag == "second"                 # type: ignore[attr-defined]
    assert sess.plugins.families().entry("bounds").plugin == "dpframe.testing"


# --- FamilyConformance without a process-wide registration; a pinned family's result types ---------------------

@dataclass(frozen=True)
class Tally:
    """The result type of the ``tally`` family below (``dp.Tally`` once installed)."""

    rows: int


class TallyQuery:
    def __init__(self, source: Source) -> None:
        self.source = source

    def describe(self) -> str:
        return "tally()"

    def plan(self, budget: Any) -> FamilyPlan[Tally]:
        share = budget if isinstance(budget, dp.ZCDP) else dp.PureDP(budget.epsilon)
        noise = Noise.calibrate(Fraction(self.source.unit.max_rows), share)

        def run(reader: Any, rng: RandomSource) -> Tally:
            exact = int(reader.statistics(self.source.node, (ROWS,))[ROWS.key][0])
            return Tally(exact + int(noise.sample(1, rng)[0]))
        charge = self.source.context.accountant.charge_plan(noise.cost(), None)
        return FamilyPlan(budget, noise.cost(), charge, "tally", Explain("tally", lines=(noise.describe(),)), run)


class TallyFamily:
    """A family a plugin author tests before it is installed: registered nowhere in this process."""

    name, attach, methods, result_types = "tally", "frame", (), {"Tally": Tally}

    def build(self, source: Source, *, strict: bool = False) -> TallyQuery:
        if not isinstance(strict, bool):
            raise dp.ArgumentTypeError("must be True or False", argument="strict", fix="pass strict=True")
        return TallyQuery(source)


class TallyHooks:
    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        register(TallyFamily())


class TestAnUnregisteredFamily(FamilyConformance):
    """The suite runs a family no plugin host of the process knows: each of its sessions pins it."""

    family = TallyFamily()
    plugin = TallyHooks()
    table = pl.DataFrame({"user": list(range(60)), "x": [1.0] * 60})
    call = staticmethod(lambda frame: frame.tally())
    bad_calls = [lambda frame: frame.tally(strict="yes")]


def test_the_conformance_suite_leaves_the_process_host_alone() -> None:
    """Run the whole inherited suite here (an unregistered family) and check nothing was registered on the way."""
    before = plugin_host().families().names()
    suite = TestAnUnregisteredFamily()
    suite.test_declares_the_family_protocol()
    suite.test_cost_is_computed_before_running_and_is_data_independent()
    suite.test_collect_charges_exactly_the_cost()
    suite.test_bad_calls_charge_nothing()
    suite.test_neighbouring_audit()
    assert plugin_host().families().names() == before and "tally" not in before
    with pytest.raises(dp.PluginError):
        plugin_host().family("tally")


def test_the_suite_checks_the_plugins_hook_registers_the_family() -> None:
    """``plugin``: the object with the hooks; a hook that registers nothing (or another name) fails the suite."""
    class Forgot:
        @dp.hookimpl
        def dpframe_query_families(self, register: Any) -> None:
            return None

    class Broken(TestAnUnregisteredFamily):
        plugin = Forgot()
    with pytest.raises(AssertionError, match="dpframe_query_families"):
        Broken().test_declares_the_family_protocol()


def test_a_pinned_familys_result_types_are_the_sessions() -> None:
    """``dp.<Name>`` is module-wide, so it lists installed families only; a session's pinned ones are in
    ``sess.plugins.result_types()``, the same road the installed ones take (``plugin_host().result_types()``)."""
    sess = pin_families(dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10),
                                   seed=0), TallyFamily())
    out = sess.table("t").tally().collect(dp.PureDP(1))
    types = sess.plugins.result_types()
    assert isinstance(out, types["Tally"]) and types["TopKFailed"] is dp.TopKFailed
    assert "Tally" not in plugin_host().result_types() and not hasattr(dp, "Tally")
    assert plugin_host().result_types()["LinearModel"] is dp.LinearModel


@pytest.mark.parametrize(("types", "says"), [({"Session": Tally}, "dp.Session"), ({"Tally": "Tally"}, "class"),
                                             ([("Tally", Tally)], "mapping")])
def test_result_types_that_cannot_be_exported_are_refused(types: Any, says: str) -> None:
    """A result type named like one of dpframe's own names would never be dp.<Name> (the module's wins)."""
    family = TallyFamily()
    family.result_types = types
    with pytest.raises(dp.PluginError, match=says):
        pin_families(_session(), family)


class _CityQuery(TallyQuery):
    """Releases a city's name (a str): no number the default features can audit."""

    def plan(self, budget: Any) -> FamilyPlan[Any]:
        planned = super().plan(budget)
        return FamilyPlan(planned.budget, planned.cost, planned.charge, "city", planned.explain,
                          lambda reader, rng: "Oslo" if planned.run(reader, rng).rows > 30 else "Rome")


class _City(TallyFamily):
    name, result_types = "city", {}

    def build(self, source: Source, *, strict: bool = False) -> TallyQuery:
        return _CityQuery(source)


def test_an_audit_with_nothing_to_compare_fails() -> None:
    """Walk-through: a newcomer's family releasing text passed the neighbouring audit vacuously (no feature but the
    charge: a test that cannot fail). The suite now asks for ``features``."""
    class Vacuous(FamilyConformance):
        family = _City()
        table = TestAnUnregisteredFamily.table
        call = staticmethod(lambda frame: frame.city())
    with pytest.raises(pytest.fail.Exception, match="features"):
        Vacuous().test_neighbouring_audit()

    class Featured(Vacuous):
        features = staticmethod(lambda city: {"oslo": float(city == "Oslo")})
    Featured().test_neighbouring_audit()


def test_the_documented_pyproject_installs() -> None:
    """Walk-through: the pyproject.toml docs/plugins.md gave had no version and no build backend, and
    ``pip install .`` stopped at "`project` must contain ['version']". It declares both now (the walk-through built
    and installed it with pip in a throwaway venv; here, the fields pip needs)."""
    import tomllib
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "plugins.md").read_text()
    section = page[page.index("## Packaging: the entry point"):page.index("## Walk-through")]
    block = section[section.index("```toml\n") + len("```toml\n"):]
    config = tomllib.loads(block[:block.index("```")])
    assert config["build-system"]["build-backend"] and config["build-system"]["requires"]
    assert config["project"]["version"] and config["project"]["name"] == "dpframe-units"
    assert config["project"]["entry-points"]["dpframe"] == {"units": "dpframe_units"}


@dataclass
class _IntervalSlipPlan(SlipPlan):
    def interval_outputs(self) -> tuple[str, ...]:
        raise KeyError("intervals")

    def half_widths(self, confidence: float) -> dict[str, float]:
        _bad_sample()
        return {}


class _IntervalSlip(Slip):
    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> MechanismPlan:
        p = super().plan(measures, ctx, share)
        assert isinstance(p, SlipPlan)
        return _IntervalSlipPlan(p.mechanism, p.measures, p.statistics, p.cost, noise=p.noise, accuracy=p.accuracy,
                                 count_noise=p.count_noise)


@pytest.mark.parametrize(("call", "hook"), [
    (lambda q: q.collect(dp.PureDP(1), ci=0.9), "output_names()"),     # it lists the intervals
    (lambda q: q.explain(accuracy=dp.Accuracy(half_width=50)), "half_widths()"),
])
def test_the_interval_hooks_name_the_mechanism(call: Callable[[Any], Any], hook: str) -> None:
    """``collect(ci=)`` and accuracy-first planning read more plan code, before the charge: guarded alike."""
    sess = _session(_IntervalSlip("intervals"))
    err = _refused_free(sess, lambda: call(sess.table("t").agg(dp.measure("slip"))), dp.PluginError)
    assert "slip_intervals" in str(err) and hook in str(err), str(err)
