"""Review 53b: stop 52's non-accounting changes, attacked as an analyst and as a third-party plugin author.

1. ``frame.bound(max_rows=N)`` under a unit whose ``max_groups`` is ``"auto"`` (with ``max_rows`` ``"auto"`` or a
   number) pinned the rows and left the groups to the session's ``"auto"``. An ``agg`` with ``bounds="auto"`` then
   failed on every dataset *after* its charge: the tuning stage reads the chosen unit through
   ``PrivacyUnit.within(scan.bound)``, and ``within`` took the pin's ``"auto"`` over the chosen unit's resolved
   ``max_groups`` (None: it follows the chosen ``max_rows``), so the read found ``"auto"`` not chosen ("a dpframe
   bug") and the whole budget of the query was lost for nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates.aggregates import AggregateMechanism, AggregatePlan

import dpframe as dp
from dpframe.aggregate import released_by
from dpframe.budgets import Budget
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext
from dpframe.noise import RandomSource, SeededRandomSource, discrete_laplace
from dpframe.plugin import PluginHost
from dpframe.plugin.manager import check_family
from dpframe.privacy_unit import PrivacyUnit
from dpframe.release import PluginFailure
from dpframe.testing import pin_mechanisms

DATA = pl.DataFrame({"u": [i % 50 for i in range(500)], "g": [i % 7 for i in range(500)],
                     "x": [float(i % 13) for i in range(500)]})


def _session(unit: dp.PrivacyUnit) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=unit, budget=dp.ApproxDP(50, 1e-3), seed=1)


@pytest.mark.parametrize("unit", [dp.PrivacyUnit("u", max_rows="auto", max_groups="auto"),
                                  dp.PrivacyUnit("u", max_rows=10, max_groups="auto")], ids=repr)
@pytest.mark.parametrize("query", ["ungrouped", "public keys", "private keys"])
def test_bounds_auto_on_a_frame_pinned_by_bound_runs(unit: dp.PrivacyUnit, query: str) -> None:
    sess = _session(unit)
    frame = sess.table("t").bound(max_rows=4)
    q = {"ungrouped": lambda: frame.agg(dp.len(), dp.sum("x", bounds="auto")),
         "public keys": lambda: frame.group_by("g", keys=list(range(7))).agg(dp.mean("x", bounds="auto")),
         "private keys": lambda: frame.group_by("g").agg(dp.sum("x", bounds="auto"))}[query]()
    _, diagnostics = q.collect(dp.ApproxDP(1, 1e-6), diagnostics=True)
    assert sess.history()["status"].to_list() == ["committed"]
    assert "max_rows (chosen)" not in diagnostics["diagnostic"].to_list()     # the pin is not tuned


def test_within_keeps_a_resolved_max_groups_over_auto() -> None:
    chosen = PrivacyUnit("u", max_rows=3)                                  # tuned: max_groups follows max_rows
    assert chosen.within(PrivacyUnit("u", max_rows=4, max_groups="auto")) == PrivacyUnit("u", max_rows=3)
    session = PrivacyUnit("u", max_rows="auto", max_groups="auto")         # planning: still to be chosen
    assert session.within(PrivacyUnit("u", max_rows=4, max_groups="auto")) == \
        PrivacyUnit("u", max_rows=4, max_groups="auto")


# 2. Exception oracles. ``plugin_failure`` / ``refused_in`` quote a plugin's error while planning only; in a
# release, whatever the plugin raises (a sampler's refusal of a data-dependent scale, a DPFrameError quoting the
# statistics, any other type) reaches the analyst as its type alone, nothing chained, and stays charged (held).
# Found: a DPFrameError the plugin's release raised itself passed through as "the engine's own", so the analyst was
# told to "check column types and expressions against Frame.schema" for a plugin's bug; it now names the plugin,
# as every other failure of its release does (the engine's own: raised through the private reader, below).

SECRET = 987654321


class _Leaky(AggregatePlan):
    """A release that fails only on some data, each way quoting the exact statistic."""

    how: str = "sampler"

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        exact = int(np.asarray(next(iter(stats.values())))[0])
        if exact > 100:                       # the data-dependent branch
            if self.how == "sampler":         # dpframe.noise refuses the plugin's argument, quoting it
                discrete_laplace(-exact * SECRET, 1, rng)
            if self.how == "dpframe":
                raise dp.PlanError(f"count is {exact * SECRET}", argument="secret", fix=str(exact))
            raise KeyError(exact * SECRET)
        return super().release(stats, rng)


def _leaky_plan(how: str) -> _Leaky:
    leaky = _Leaky.__new__(_Leaky)
    object.__setattr__(leaky, "mechanism", "leaky")
    object.__setattr__(leaky, "how", how)
    return leaky


class _LeakyMechanism(AggregateMechanism):
    def __init__(self, how: str) -> None:
        self.how = how

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> AggregatePlan:
        planned = super().plan(measures, ctx, share)
        leaky = _Leaky.__new__(_Leaky)
        leaky.__dict__.update(planned.__dict__)
        leaky.how = self.how
        return leaky


@pytest.mark.parametrize("how", ["sampler", "dpframe", "other"])
def test_a_data_dependent_release_failure_quotes_nothing_private(how: str) -> None:
    texts = []
    for n in (500, 50):                                        # the failing and the quiet dataset
        sess = dp.Session({"t": DATA.head(n)}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
        pin_mechanisms(sess, _LeakyMechanism(how))
        try:
            sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
            texts.append("released")
        except BaseException as e:  # noqa: BLE001 — the analyst catches everything
            assert e.__cause__ is None and e.__context__ is None
            text = f"{type(e).__name__} {e} {getattr(e, 'argument', '')} {getattr(e, 'fix', '')}"
            assert str(SECRET)[:6] not in text and "500" not in text, text
            assert sess.history()["status"].to_list() == ["failed"]   # charged: the failure cost the query
            texts.append(text)
    assert texts[1] == "released" and "failed in release()" in texts[0]


def test_the_engine_readers_own_error_still_passes_through_a_release() -> None:
    """What the plugin's release reads through the private reader (a partial ``sorted`` statistic reads the table
    again) may fail in the engine (the file changed, the release is over): that error stays the engine's."""
    sess = _session(dp.PrivacyUnit("u", max_rows=2))
    reader = sess._release.reader()
    reader._open = False                                     # the reservation it belonged to is over
    node = sess.table("t")._node

    class Rereads:
        mechanism = "rereads"

        def release(self, inputs: Mapping[str, object], rng: RandomSource) -> dict[str, object]:
            reader.statistics(node, ())
            return {}

        def output_names(self) -> tuple[str, ...]:
            return ()

    with pytest.raises(dp.DPFrameError, match="release is over") as info:
        released_by(Rereads(), {}, SeededRandomSource(0), 1)     # type: ignore[arg-type]
    assert not isinstance(info.value, PluginFailure)
    with pytest.raises(PluginFailure, match=r"'leaky' failed in release\(\) \(PlanError\)"):
        released_by(_leaky_plan("dpframe"), {"n": np.asarray([SECRET])}, SeededRandomSource(0), 1)


# 3. ``dp.<Name>`` result types (stop 52: ``PluginHost.result_types()``). Found: a third-party family could declare a
# result type under a name another family already declares (``TopKFailed``) with its own class; the later one won
# silently, so ``isinstance(out, dp.TopKFailed)`` no longer matched top-k's failures. Registering it is now refused,
# naming both plugins (as two plugins registering one name are); the same class declared twice is no clash.

class _Result:
    pass


class _Family:
    attach, methods = "frame", ()

    def __init__(self, name: str, result_types: dict[str, type]) -> None:
        self.name, self.result_types = name, result_types

    def build(self, source: object, /, *args: object, **kwargs: object) -> object:
        raise AssertionError("not built here")


class _FamilyHooks:
    def __init__(self, *families: _Family) -> None:
        self.families = families

    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        for family in self.families:
            register(family)


def test_a_plugin_cannot_take_another_familys_result_type_name() -> None:
    host = PluginHost()
    with pytest.raises(dp.PluginError, match="TopKFailed") as info:
        host.register(_FamilyHooks(_Family("my_top", {"TopKFailed": _Result})), name="shadow")
    assert "'shadow'" in str(info.value) and "'topk'" in str(info.value)
    assert host.result_types()["TopKFailed"] is dp.TopKFailed and "my_top" not in host.families()   # rolled back
    same = PluginHost()
    same.register(_FamilyHooks(_Family("my_top", {"TopKFailed": dp.TopKFailed, "Mine": _Result})), name="kind")
    assert same.result_types()["TopKFailed"] is dp.TopKFailed and same.result_types()["Mine"] is _Result


# 4. Typo suggestions (held): "did you mean" draws on public names only (schemas, registered tables, keywords), never
# on values, so a misspelled name that is close to a private group key suggests nothing of it.

def test_did_you_mean_never_suggests_a_private_value() -> None:
    data = pl.DataFrame({"u": list(range(20)), "carrier": ["carrier_secret"] * 20})
    sess = dp.Session({"flights": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=0)
    frame = sess.table("flights")
    for call in (lambda: frame.select("carrier_secrte"), lambda: frame.group_by("carrier_secrte"),
                 lambda: frame.filter(carrier_secrte="x"), lambda: sess.table("carrier_secrte"),
                 lambda: sess.sql("SELECT COUNT(*) FROM flights GROUP BY carrier_secrte"),
                 lambda: sess.sql("SELECT COUNT(*) FROM carrier_secrte")):
        with pytest.raises(dp.SchemaError) as info:
            call()
        assert "carrier_secret'" not in f"{info.value.message} {info.value.fix}"
    assert sess.history().height == 0


def test_a_result_type_cannot_take_the_name_of_a_dpframe_submodule(monkeypatch: pytest.MonkeyPatch) -> None:
    """``name in vars(dpframe)`` missed the submodules not imported yet (``dp.testing`` until ``import
    dpframe.testing``): a result type named so was ``dp.testing`` in one process and the module in another."""
    monkeypatch.delattr(dp, "testing")                     # as in a process that has not imported it
    with pytest.raises(dp.PluginError, match="'testing'"):
        check_family("mine", _Family("my_top", {"testing": _Result}), "families")
