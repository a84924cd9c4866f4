"""Review 55d: plugin leftovers of stop 54 — what a session's plugin view shows, plugins registered while plugins
load, the cap on released cells per query, the family audit against its curves, and the histogram's inexact edges.

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

import numpy as np
import pluggy
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.cli import plugins as plugins_command
from dpframe.mechanism import Noise
from dpframe.plugin import PluginHost, plugin_host
from tests.adversarial.doubles import ROWS, CountPlan, FakeMechanism, FamilyHooks, RowsFamily, RowsQuery

# --- 1. a session's describe() and `dpframe plugins` read the session's snapshot ------------------------------------


LATE = RowsFamily("late_family_r55d")          # a family a plugin registers after a session was made


def _session() -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"u": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1),
                      seed=0)


def test_a_plugin_registered_later_is_not_in_the_sessions_describe(capsys: pytest.CaptureFixture[str]) -> None:
    """Found: ``sess.plugins.describe()`` (and so `dpframe plugins` printed for a session) listed the plugins of the
    live plugin manager: a plugin registered in the process after the session was made appeared there, "(hooks
    dpframe_query_families: nothing registered)", though the session's queries never see it. It now lists the
    plugins of the session's snapshot; the process-wide host (and a new session) shows the new plugin."""
    sess = _session()
    host = plugin_host()
    host.register(FamilyHooks(LATE), name="late_r55d")
    try:
        assert "late_r55d" in [p.name for p in host.describe()]
        assert "late_r55d" in [p.name for p in _session().plugins.describe()]
        assert "late_r55d" not in [p.name for p in sess.plugins.describe()]
        plugins_command(sess.plugins)
        shown = capsys.readouterr().out
        assert "late_r55d" not in shown and "late_family_r55d" not in shown and "histogram" in shown, shown
        plugins_command()
        assert "late_family_r55d" in capsys.readouterr().out
    finally:
        host.unregister("late_r55d")
    # a plugin unregistered in the process after the session was made stays in that session's view (its queries use it)
    sess = _session()
    host.register(FamilyHooks(LATE), name="late_r55d")
    later = _session()
    host.unregister("late_r55d")
    assert "late_r55d" in [p.name for p in later.plugins.describe()]
    assert "late_r55d" not in [p.name for p in sess.plugins.describe()]


# --- 2. a plugin that registers another plugin while plugins load -------------------------------------------------


class RegisteringHooks:
    """A plugin whose own hook registers another plugin in the process-wide host (instead of calling ``register``)."""

    @dp.hookimpl
    def dpframe_mechanisms(self, register: Any) -> None:
        plugin_host().register(FamilyHooks(LATE), name="inner_r55d")


class UnregisteringHooks:
    @dp.hookimpl
    def dpframe_mechanisms(self, register: Any) -> None:
        plugin_host().unregister("histogram")


@pytest.mark.parametrize("hooks", [RegisteringHooks, UnregisteringHooks])
def test_a_hook_that_registers_a_plugin_is_refused_by_name(hooks: type) -> None:
    """Found: a plugin whose hook registered another plugin (``plugin_host().register`` inside
    ``dpframe_mechanisms``) reloaded the host's registries inside its own loading: the hook ran again, the second
    registration failed with pluggy's raw "Plugin name already registered: ... {'core': <module ...>, ...}", and both
    plugins were lost. It is now a PluginError naming the plugin and hook, saying a hook registers only through its
    ``register`` argument; the host is left as it was."""
    host = PluginHost()
    before = [n for n, _ in host.pm.list_name_plugin()]
    with pytest.raises(dp.PluginError) as refused:
        host.register(hooks(), name="outer_r55d")
    err = refused.value
    assert "while dpframe was loading plugins" in err.message and "'outer_r55d'" in err.message, err.message
    assert "dpframe_mechanisms" in err.message and "<module" not in err.message, err.message
    assert err.argument == "plugin" and "entry point" in (err.fix or ""), err.fix
    assert [n for n, _ in host.pm.list_name_plugin()] == before
    assert "inner_r55d" not in [n for n, _ in plugin_host().pm.list_name_plugin()]
    assert "histogram" in [n for n, _ in plugin_host().pm.list_name_plugin()]
    assert [m.name for _, m in host.mechanisms()] == [m.name for _, m in PluginHost().mechanisms()]


def test_a_plugin_that_registers_a_plugin_at_import_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: an entry point whose module, when imported, registers another plugin (``plugin_host().register(...)`` at
    module level) registered it in whatever host ``plugin_host()`` returned — a second host built inside the first
    one's loading (the process's first, with the importing module half-defined), or the cached one — never in the
    host being loaded, where it was lost. Registering, and building a second host, are now refused while a host loads
    its entry points."""
    def load_entry_points(group: str) -> int:
        plugin_host().register(FamilyHooks(LATE), name="inner_r55d")    # what the module's import does
        return 0
    monkeypatch.setattr(pluggy.PluginManager, "load_setuptools_entrypoints",
                        lambda self, group, name=None: load_entry_points(group))
    with pytest.raises(dp.PluginError) as refused:
        PluginHost()
    assert "while dpframe was loading plugins" in refused.value.message and "entry points" in refused.value.message
    assert "inner_r55d" not in [n for n, _ in plugin_host().pm.list_name_plugin()]
    monkeypatch.setattr(pluggy.PluginManager, "load_setuptools_entrypoints",
                        lambda self, group, name=None: PluginHost())   # plugin_host() at import, none cached yet
    with pytest.raises(dp.PluginError) as refused:
        PluginHost()
    assert "a second plugin host" in refused.value.message and "entry points" in refused.value.message
    monkeypatch.undo()
    host = PluginHost()          # loading ended: registering works again
    host.register(FamilyHooks(LATE), name="inner_r55d")
    assert "late_family_r55d" in host.families()


# --- 3. one cap on the values a query releases, for every mechanism ---------------------------------------------------


def _data() -> pl.DataFrame:
    return pl.DataFrame({"user": range(200), "x": [i / 200 for i in range(200)], "g": [i % 5 for i in range(200)]})


def _hist(i: int, bins: int = 10_000) -> dp.Measure:
    return dp.measure("histogram", "x", bounds=(0, 1), edges=np.linspace(0, 1, bins + 1)).alias(f"h{i}")


@pytest.mark.parametrize("rows", [200, 1])
def test_many_histogram_bins_are_refused_before_any_edge_is_parsed(rows: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: nothing capped the bins of one query: 100 histograms of 10,000 bins (each allowed) took minutes to
    validate, plan and collect, holding the session (a served one: every analyst) — and validation alone parsed every
    edge at build time, again at cost() and again in plan(). Now a query releases at most MAX_RELEASED_VALUES values
    per group, counted from the measures' public options before any is validated: a PlanError naming the measures and
    the fix, free, the same on any data."""
    import dpframe_histogram.mechanism as hist

    from dpframe.planning import MAX_RELEASED_VALUES

    parsed = {"n": 0}
    parse = hist.parse_edges

    def counted(*args: Any, **kwargs: Any) -> Any:
        parsed["n"] += 1
        return parse(*args, **kwargs)
    monkeypatch.setattr(hist, "parse_edges", counted)
    data = _data().head(rows)
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(10), seed=0)
    started = time.process_time()
    with pytest.raises(dp.PlanError) as refused:
        sess.table("t").agg(*[_hist(i) for i in range(3)])
    assert time.process_time() - started < 2 and parsed["n"] == 0
    err = refused.value
    assert err.argument == "measures" and "30,000 values per group" in err.message, err.message
    assert f"at most {MAX_RELEASED_VALUES:,}" in err.message and "fewer measures or histogram bins" in (err.fix or "")
    assert sess.history().height == 0


def test_public_keys_times_values_are_capped_alike_for_built_in_and_plugin_measures() -> None:
    """One rule for every mechanism: values per group × public groups ≤ MAX_RELEASED_CELLS (a built-in count over a
    million public keys, and a histogram's bins over a thousand, are refused alike, free); private keys count as one
    group (the groups they release are the data's)."""
    from dpframe.planning import MAX_RELEASED_CELLS

    sess = dp.Session({"t": _data()}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ApproxDP(10, 1e-6), seed=0)
    keys = list(range(1_000_000))
    counts = [dp.len().alias(f"n{i}") for i in range(MAX_RELEASED_CELLS // len(keys) + 1)]
    for build in (lambda: sess.table("t").group_by("g", keys=keys).agg(*counts),
                  lambda: sess.table("t").group_by("g", keys=keys[:2_001]).agg(_hist(0))):
        with pytest.raises(dp.PlanError) as refused:
            build()
        assert refused.value.argument == "measures" and "public groups" in refused.value.message
        assert f"at most {MAX_RELEASED_CELLS:,}" in refused.value.message, refused.value.message
    assert sess.history().height == 0
    out = sess.table("t").group_by("g").agg(_hist(0, 200), dp.len()).collect(dp.ApproxDP(1, 1e-7))   # private keys
    assert out.width == 1 + 200 + 1


class OneMore(FakeMechanism):
    """A mechanism that says its measures release one value each, but plans a thousand outputs per measure."""

    name = "one_more_r55d"

    def values_per_group(self, measure: dp.Measure) -> int:
        return 1

    def plan(self, measures: Any, ctx: Any, share: Any) -> CountPlan:
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        outputs = tuple(f"{m.output_name}_{i}" for m in measures for i in range(1_000))
        return CountPlan(self.name, tuple(measures), (ROWS,), share, noise={"n": noise}, outputs=outputs, used=noise)


def test_a_mechanism_that_undercounts_its_values_is_capped_by_its_plans_outputs() -> None:
    """The count read before validation is the mechanism's word; the plans' output columns are checked again once
    planned (before anything is charged)."""
    from dpframe.testing import pin_mechanisms

    sess = pin_mechanisms(dp.Session({"t": _data()}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(10),
                                     seed=0), OneMore())
    query = sess.table("t").agg(*[dp.measure("one_more_r55d").alias(f"m{i}") for i in range(21)])
    with pytest.raises(dp.PlanError, match="21,000 values per group"):
        query.cost(dp.PureDP(1))
    assert sess.history().height == 0


@pytest.mark.parametrize("answer", [0, -1, 1.5, True, "3"])
def test_a_bad_values_per_group_is_a_plugin_error(answer: object) -> None:
    from dpframe.testing import pin_mechanisms

    class Bad(OneMore):
        def values_per_group(self, measure: dp.Measure) -> object:
            return answer

    sess = pin_mechanisms(dp.Session({"t": _data()}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(10),
                                     seed=0), Bad())
    with pytest.raises(dp.PluginError, match="values_per_group"):
        sess.table("t").agg(dp.measure("one_more_r55d"))


# --- 4. a histogram's edges are shown as they are compared -----------------------------------------------------------


def test_an_inexact_histogram_edge_is_named_as_the_float64_it_is_compared_as() -> None:
    """Found: an edge no float64 holds was shown exactly but compared as a float64: edges (0, 2**53 + 1, 2**54)
    released columns x_hist_0_9007199254740993 and x_hist_9007199254740993_..., yet a row of 2**53 (below the
    shown edge) was counted in the second bin, the backends comparing with float(2**53 + 1) = 2**53. Edges are now
    the float64 values compared: the names, the notes and describe_measure show them, and explain() notes which
    edge was rounded."""
    from dpframe_histogram.mechanism import describe_measure

    data = pl.DataFrame({"user": [1, 2, 3], "x": [2**53, 2**53 - 2, 2**53 + 2]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(10**7), seed=0)
    hist = dp.measure("histogram", "x", bounds=(0, 2**54), edges=(0, 2**53 + 1, 2**54))
    query = sess.table("t").agg(hist)
    out = query.collect(dp.PureDP(10**6))            # noise of scale 10⁻⁶: the exact counts
    low, high = "x_hist_0_9007199254740992", "x_hist_9007199254740992_18014398509481984"
    assert out.columns == [low, high], out.columns
    assert out.row(0) == (1, 2)                      # 2**53 lies in [2**53, 2**54): the bin the name says
    notes = "\n".join(query.explain(dp.PureDP(1), format="json")["notes"])
    assert "1 edge(s) no float64 holds" in notes and "9007199254740993 as 9007199254740992" in notes, notes
    assert describe_measure(hist)["columns"] == [low, high]
    third = dp.measure("histogram", "x", bounds=(0, 1), edges=(0, Fraction(1, 3), 1))
    notes = "\n".join(sess.table("t").agg(third).explain(dp.PureDP(1), format="json")["notes"])
    assert "1/3 as 0.3333333333333333" in notes, notes                              # 1/3 too
    exact = dp.measure("histogram", "x", bounds=(0, 4), edges=(0, 0.5, 4))
    assert not [n for n in sess.table("t").agg(exact).explain(dp.PureDP(1), format="json")["notes"]
                if "no float64 holds" in n]


# --- 5. a query family's audit holds it to the curves it charges -----------------------------------------------------

SPREAD = 16                 # max_rows: the row count of one unit moves by 16


class SpreadRowsQuery(RowsQuery):
    """A row count under one discrete Laplace draw of scale t = 16/ε (honest: ε-DP, its cost), whose plan charges in
    RDP/PLD sessions the lie [discrete_laplace(t, 1)] * 16 (sixteen one-step moves, each ε/16-DP, which basic
    composition prices at ε: the engine's check accepts them) or, ``how=True``, the truth [discrete_laplace(t, 16)]."""

    def curves(self, noise: Noise) -> list[acc.PrivacyCurve]:
        m, t = int(noise.sensitivity), float(noise.scale)
        return [acc.discrete_laplace(t, m)] if self.how else [acc.discrete_laplace(t, 1)] * m


def _spread_conformance(honest: bool) -> Any:
    from dpframe.testing import FamilyConformance

    class Spread(FamilyConformance):
        family = RowsFamily("spread_rows_r55d", SpreadRowsQuery)
        table = pl.DataFrame({"user": [i // SPREAD for i in range(40 * SPREAD)]})
        neighbour = pl.DataFrame({"user": [10**9] * SPREAD})
        privacy_unit = dp.PrivacyUnit("user", max_rows=SPREAD)
        call = staticmethod(lambda frame: frame.spread_rows_r55d(honest))
        audit_budget = dp.PureDP(4)
    return Spread()


@pytest.mark.parametrize("honest", [False, True])
def test_the_family_audit_holds_a_family_to_its_curves(honest: bool) -> None:
    """Found: FamilyConformance (and run_audit) audited a family's release against its budget only: a family whose
    plan charged RDP/PLD sessions sixteen one-step curves, where its one count moves by sixteen, passed every
    inherited test (the engine's check believes curves their composition prices at the cost): they claim δ = 0.12
    at ε = 1 where the release has 0.78, and a PLD session reported ε = 3.89 at δ = 1e-5 for a release whose ε is
    4 at any δ below 0.39. The conformance audit now also holds the release to the curves
    (FamilyConformance.curve_audit): the lie fails it (ε ≥ 1.77 at 1 − 1e-6 against the claimed 1), the truth
    passes."""
    suite = _spread_conformance(honest)
    sess, query = suite._query(suite._table(), dp.ApproxDP(10, 1e-5), "pld")
    query.collect(dp.PureDP(4))                          # the engine accepts either charge
    results = suite.curve_audit(300)
    assert len(results) == 1 and results[0].passed == honest, results
    assert ("16 × discrete Laplace(t=4, Δ=1)" in results[0].label) != honest, results[0].label
