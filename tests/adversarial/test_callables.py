"""No analyst callable ever receives a private or unreleased value (issue 16, finding 3).

``conditional_release(q, when=f)`` and ``revise(name, when=f)`` used to call the analyst's ``f`` on the
noisy value *before* deciding whether to release it: ``lambda v: seen.append(v) or False`` recorded
every value and every call missed, so was free. Targets are now declarative (``dp.above``,
``dp.below``, ``dp.between``, ``dp.outside``), evaluated by the library; a callable is refused before
any data is read, with nothing charged.

The meta-test at the end enumerates every public function, class and method of dpframe and its
plugins and every parameter annotated as a callable. Each must be classified here: receives released
values only (it sees outputs the caller gets anyway), receives no values (a zero-argument hook run
inside a charged run), receives public values only (e.g. an accountant's ε grid), receives the private
reader (engine and registered plugin code, reached only through the session's private release
context: nothing public hands a reader to analyst code), or belongs to the test kit (``dpframe.testing``:
the caller's own data). Its docstring must say which. Declarative parameters must keep refusing callables.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.scalar import scalar
from dpframe.interactive.stopping import run_until
from dpframe.release import PrivateReader


def _session() -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(100, 1e-5), seed=0)


def _no_data(*args: object, **kwargs: object) -> None:
    raise AssertionError("private data read for a refused call")


def test_a_when_callable_never_sees_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    sess = _session()
    q = sess.table("t").agg(dp.len())
    seen: list[Any] = []
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6) as ch:
        assert ch.conditional_release(q, when=dp.above(10**9), name="h") is None
        spent = sess.spent()
        with monkeypatch.context() as m:
            m.setattr(PrivateReader, "run", _no_data)
            for call in (lambda: ch.conditional_release(q, when=lambda v: seen.append(v) or False),
                         lambda: ch.conditional_release(q, lambda v: seen.append(v) or False, name="x"),
                         lambda: ch.revise("h", when=lambda v: seen.append(v) or False)):
                with pytest.raises(dp.DPFrameError, match="function") as info:
                    call()
                assert info.value.argument == "when" and "dp.above(4000)" in (info.value.fix or "")
        assert seen == [] and ch.calls == 1 and ch.hits == 0 and sess.spent() == spent
        assert ch.revise("h", when=dp.above(0)) == pytest.approx(600, abs=40)   # the named value is still there


def test_a_stop_rule_that_runs_other_queries_forfeits_the_refund() -> None:
    """``stop`` runs while the early-stopping reservation is open: a release it makes there is interleaving.

    Lemma 8/11 cover the run's own adaptivity only (digest 002 §5, pitfall 7), so the run is then
    settled at its worst cell, as an interleaved sparse vector is; run alone it is refunded.
    """
    sess = dp.Session({"t": pl.DataFrame({"x": list(range(100))})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(20), seed=0)
    steps = [sess.table("t").filter(pl.col("x") < b).agg(dp.len()) for b in (10, 50, 90)]
    side = sess.table("t").agg(dp.len())

    def stop(results: list[pl.DataFrame]) -> bool:
        side.collect(dp.PureDP(0.5))
        return True
    assert len(run_until(steps, dp.PureDP(1), stop=stop)) == 1
    assert sess.spent() == dp.PureDP(Fraction(7, 2))             # worst cell (3 steps) + the side query
    assert len(run_until(steps, dp.PureDP(1), stop=lambda results: True)) == 1
    assert sess.spent() == dp.PureDP(Fraction(9, 2))             # alone: charged its one step


def test_no_public_name_reads_an_exact_statistic() -> None:
    """Finding 5: ``scalar(...).exact(sess)`` returned the exact statistic, uncharged. The reads are private."""
    sess = _session()
    sc = scalar(sess, sess.table("t").agg(dp.len()), Fraction(1))
    public = {name for name in dir(sc) if not name.startswith("_")}
    assert public == {"query", "statistic", "sensitivity", "unit", "kind", "noise_scale", "to_output",
                      "in_output_units", "threshold_units", "describe"}


# ------------------------------------------------------------------------------------------ meta-test

RELEASED = "receives released values only"
NO_VALUES = "receives no values"
PUBLIC = "receives public values only"
READER = "receives the private reader"

#: Every public parameter annotated as a callable, with what it may receive; its docstring must say so.
ALLOWED: dict[tuple[str, str], str] = {
    ("dpframe.interactive.stopping.run_until", "stop"): RELEASED,
    ("dpframe.interactive.odp.OdpSpec", "classify"): RELEASED,
    ("dpframe.interactive.odp.run_ex_post", "run"): NO_VALUES,
    ("dpframe.interactive.ptr.propose_test_release", "test"): NO_VALUES,
    ("dpframe.interactive.ptr.propose_test_release", "release"): NO_VALUES,
    ("dpframe.interactive.stream.Reservation.run", "fn"): NO_VALUES,
    ("dpframe.mechanism.base.statistic_values", "complete"): NO_VALUES,
    ("dpframe.mechanism.base.partial_codes", "complete"): NO_VALUES,
    ("dpframe.mechanism.sorted_codes.SortedCodes", "complete"): NO_VALUES,
    ("dpframe.accounting.curves.from_profile", "delta"): PUBLIC,
    ("dpframe.planning.passes.plugin_hook", "call"): PUBLIC,
    ("dpframe.accounting.curves.from_rdp", "rdp"): PUBLIC,
    ("dpframe.accounting.curve.register_curve", "build"): PUBLIC,
    ("dpframe.accounting.curve.register_core_curve", "build"): PUBLIC,
    ("dpframe.catalog.check_table_name", "names"): NO_VALUES,
    ("dpframe.remote.values.call_as_given", "method"): PUBLIC,
    ("dpframe.signatures.refuse", "function"): PUBLIC,
    ("dpframe.signatures.refusal", "function"): PUBLIC,
    ("dpframe.remote.client.Remote.run_until", "stop"): RELEASED,     # (its signature is run_until's: _signed_as)
    ("dpframe.accounting.curve.PrivacyCurve", "sampled_rdp"): PUBLIC,
    ("dpframe.accounting.calibrate.smallest_noise", "curve"): PUBLIC,
    ("dpframe.accounting.calibrate.smallest_noise", "accountant"): NO_VALUES,
    ("dpframe.accounting.calibrate.largest_epsilon", "curve"): PUBLIC,
    ("dpframe.accounting.calibrate.largest_epsilon", "accountant"): NO_VALUES,
    ("dpframe.accounting.calibrate.most_steps", "accountant"): NO_VALUES,
    ("dpframe.accuracy.smallest_budget", "half_widths"): PUBLIC,
    ("dpframe.accounting.numerics.pld.composed_profile", "build"): NO_VALUES,
    ("dpframe.accounting.numerics.replacement.wor_rdp", "moments"): PUBLIC,
    ("dpframe.sql.aggregates.contains", "test"): PUBLIC,
    ("dpframe.plan.totality.output_schema", "apply"): PUBLIC,
    ("dpframe.release.ReleaseContext.release", "run"): READER,
    ("dpframe.release.ReleaseContext.release", "settle"): RELEASED,
    ("dpframe.release.ReleaseContext.guarded", "run"): NO_VALUES,
    ("dpframe.family.FamilyPlan", "run"): READER,
    ("dpframe.family.run_family", "run"): READER,
    ("dpframe.family.FamilyPlan", "settle"): RELEASED,
    ("dpframe.family.FamilyPlan", "check"): NO_VALUES,
    ("dpframe.family.FamilyPlan", "explain"): NO_VALUES,
    ("dpframe.plugin.manager.Audits", "specs"): NO_VALUES,
    ("dpframe.noise.certified.LazyUniform.below", "bounds"): PUBLIC,
    ("dpframe.parallel.map_chunks", "fn"): PUBLIC,
    ("dpframe.tuning.stage.plan_staged", "finish"): PUBLIC,
    ("dpframe.mechanism.deferred.DeferredMapping", "build"): NO_VALUES,
    ("dpframe.mechanism.deferred.DeferredTuple", "build"): NO_VALUES,
    ("dpframe.remote.values.Unpacker", "queries"): PUBLIC,
    ("dpframe.remote.client.RemoteQuery", "source"): PUBLIC,
    ("dpframe.remote.server.Asker", "hold"): PUBLIC,
    ("dpframe.errors.handed_to", "handler"): RELEASED,     # dp.Server's: a warning the session gives, to the analyst
}

#: The plugin author kit: its callables build sessions on the caller's own test data ("Nothing here is private").
TEST_KIT = {
    ("dpframe.testing.queries.Stream", "open"), ("dpframe.testing.queries.Stream", "script"),
    ("dpframe.testing.queries.Stream", "reserved"), ("dpframe.testing.queries.query_sampler", "make_query"),
    ("dpframe.testing.queries.query_sampler", "features"), ("dpframe.testing.registry.AuditSpec", "pairs"),
    ("dpframe.testing.distinguish.outcome_sampler", "make_query"),
    ("dpframe.testing.distinguish.outcome_sampler", "features"), ("dpframe.testing.distinguish.catching", "make_query"),
    ("dpframe.testing.distinguish.outcome_features", "features"),
    ("dpframe.testing.queries.family_sampler", "make_query"), ("dpframe.testing.queries.family_sampler", "features"),
}

#: Parameters that once took a callable on unreleased values and are now declarative (a callable is refused).
DECLARATIVE = {
    ("dpframe.interactive.tct.TargetChargingChannel.conditional_release", "when"),
    ("dpframe.interactive.tct.TargetChargingChannel.revise", "when"),
}

ROOTS = ("dpframe", "dpframe_aggregates", "dpframe_histogram", "dpframe_learning", "dpframe_quantiles", "dpframe_topk")


def _public_functions() -> dict[str, Any]:
    """Every public function, class and method defined in a public module of dpframe and its plugins."""
    found: dict[str, Any] = {}
    for root in ROOTS:
        package = importlib.import_module(root)
        names = [root, *(m.name for m in pkgutil.walk_packages(package.__path__, f"{root}."))]
        for module_name in names:
            if any(part.startswith("_") for part in module_name.split(".")):
                continue
            module = importlib.import_module(module_name)
            for name, obj in vars(module).items():
                if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
                    continue
                if inspect.isfunction(obj) or inspect.isclass(obj):
                    found[f"{module_name}.{name}"] = obj
                if inspect.isclass(obj):
                    for attr, member in vars(obj).items():
                        function = member.__func__ if isinstance(member, staticmethod | classmethod) else member
                        if not attr.startswith("_") and inspect.isfunction(function):
                            found[f"{module_name}.{name}.{attr}"] = function
    return found


def _parameters(obj: Any) -> dict[str, str]:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return {}
    return {p.name: p.annotation if isinstance(p.annotation, str) else repr(p.annotation)
            for p in signature.parameters.values()}


def _docs(obj: Any) -> str:
    own = [obj.__doc__ or ""]
    if inspect.isclass(obj):
        own.append(obj.__init__.__doc__ or "")
    return " ".join(" ".join(own).split())


def test_every_public_callable_parameter_is_declarative_or_receives_released_values_only() -> None:
    """A new ``Callable`` parameter anywhere in the public API fails this test until it is classified here."""
    functions = _public_functions()
    callables = {(name, p) for name, obj in functions.items() for p, annotation in _parameters(obj).items()
                 if "Callable" in annotation}
    unclassified = callables - set(ALLOWED) - TEST_KIT
    assert not unclassified, f"classify these callable parameters (see this module's docstring): {unclassified}"
    assert set(ALLOWED) | TEST_KIT <= callables, "stale entries (no longer callable parameters)"
    for (name, parameter), phrase in ALLOWED.items():
        docs = _docs(functions[name])
        assert phrase in docs or phrase.replace("receives", "receive") in docs, \
            f"{name}: its docstring must say `{parameter}` {phrase}"
        if phrase == NO_VALUES:
            assert _parameters(functions[name])[parameter].startswith("Callable[[]"), f"{name}: not zero-argument"
    testing = importlib.import_module("dpframe.testing")
    assert "Nothing here is private" in (testing.__doc__ or "")
    assert all(name.startswith("dpframe.testing.") for name, _ in TEST_KIT)
    for name, parameter in DECLARATIVE:
        assert _parameters(functions[name])[parameter] == "Target", f"{name}({parameter}) must stay declarative"


def test_declarative_parameters_refuse_every_callable(monkeypatch: pytest.MonkeyPatch) -> None:
    sess = _session()
    q = sess.table("t").agg(dp.len())
    calls = {"conditional_release": lambda ch, f: ch.conditional_release(q, when=f),
             "revise": lambda ch, f: ch.revise("h", when=f)}
    assert {name.rsplit(".", 1)[1] for name, _ in DECLARATIVE} == set(calls)
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6) as ch:
        ch.conditional_release(q, when=dp.above(10**9), name="h")
        spent = sess.spent()
        monkeypatch.setattr(PrivateReader, "run", _no_data)
        for call in calls.values():
            for f in (lambda v: True, print, dp.above(0).contains, type("F", (), {"__call__": lambda s, v: True})()):
                with pytest.raises(dp.DPFrameError, match="not a function") as info:
                    call(ch, f)
                assert info.value.argument == "when"
        assert sess.spent() == spent and ch.calls == 1
