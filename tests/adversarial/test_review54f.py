"""Review 54f: the plugin-author surface (the audit kit, families' run errors, registry snapshots) and the histogram
plugin, red-teamed as a malicious or careless plugin author and as an analyst using a third-party plugin.

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc
from dpframe.budgets import Budget
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, SortedCodes
from dpframe.noise import RandomSource, SeededRandomSource
from dpframe.plugin import PluginHost, plugin_host
from dpframe.testing import MechanismConformance, audit_curves, measure_context, pin_families, pin_mechanisms
from tests.adversarial.doubles import ROWS, CountPlan, FakeMechanism, FamilyHooks, RowsFamily, RowsQuery

STEPS = 4                   # max_rows: the L1 sensitivity of a row count


# --- 1. the audit kit catches what no static check sees: a false coordinate_sensitivity, curves without noise -------


class SpreadClaim(FakeMechanism):
    """A count of max_rows = 4 rows per unit under one discrete Laplace draw (the pair is (Z, Z + 4)) whose plan
    charges, in RDP/PLD sessions, the curves of four one-step moves, [acc.discrete_laplace(t, 1)] * 4.

    ``how``: ``"false_coordinate"`` declares its noise with ``coordinate_sensitivity=1`` (a lie: one coordinate moves
    by 4), so the engine's floor (max(D(1·⌊L∞⌋), 4·D(1))) is met; ``"no_noise"`` declares no ``Noise`` at all (the
    floor then has nothing to read; four one-step curves are a sound charge of the cost ε = 4/t); ``"honest"``
    declares its noise as it is and the one-coordinate curve ``acc.discrete_laplace(t, 4)``.
    """

    def __init__(self, how: str) -> None:
        super().__init__(f"spread_{how}")
        self.how = how

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        rows = Fraction(ctx.unit.max_rows)
        used = Noise.calibrate(rows, share)
        t = float(used.scale)
        if self.how == "honest":
            noise: dict[str, object] = {"count": used}
            curves = (acc.discrete_laplace(t, int(rows)),)
        else:
            noise = {"count": Noise.calibrate(rows, share, coordinate_sensitivity=Fraction(1))} \
                if self.how == "false_coordinate" else {}
            curves = (acc.discrete_laplace(t, 1),) * int(rows)
        return CountPlan(self.name, tuple(measures), (ROWS,), used.cost(), noise=noise, privacy=curves, used=used)


def _conformance(how: str) -> MechanismConformance:
    mechanism = SpreadClaim(how)

    class Conformance(MechanismConformance):
        privacy_unit = dp.PrivacyUnit("user", max_rows=STEPS)
        measures = [dp.measure(mechanism.name)]
        shares = [dp.PureDP(1)]
    Conformance.mechanism = mechanism
    return Conformance()


def _spent(how: str, accountant: str) -> float:
    data = pl.DataFrame({"u": [i // STEPS for i in range(400)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=STEPS), budget=dp.ApproxDP(50, 1e-5),
                      accountant=accountant, seed=0)
    pin_mechanisms(sess, SpreadClaim(how))
    sess.table("t").agg(dp.measure(f"spread_{how}")).collect(dp.PureDP(Fraction(1, 100)))
    return float(sess.spent().epsilon)  # type: ignore[attr-defined]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("how", ["false_coordinate", "no_noise"])
def test_soundness_a_curve_session_charges_the_spread_curves_of_one_moved_coordinate(how: str,
                                                                                     accountant: str) -> None:
    """The attack the audit must catch: the engine cannot see how far a coordinate really moves, so RDP and PLD
    sessions run both plugins and charge four one-step curves for a release moving one coordinate by four steps,
    less than the honest plugin is charged for the same release."""
    assert _spent(how, accountant) < _spent("honest", accountant)


@pytest.mark.parametrize("how", ["false_coordinate", "no_noise"])
def test_soundness_the_audit_fails_a_plan_whose_curves_claim_spread_steps(how: str) -> None:
    """Found: `MechanismConformance`'s neighbouring audit held a plan to its `cost` only (pure ε = 4/t, true here),
    never to the `privacy` curves RDP/PLD sessions charge instead, so a false `coordinate_sensitivity=1`, or curves
    with no `Noise` declared at all, passed every test a plugin author runs. The audit now also holds the release to
    the (ε, δ) pairs its declared curves claim (composed by the PLD accountant, tight), on the same neighbours: at
    ε = 1/2 the four one-step curves claim δ ≈ 0.04 where the release has δ ≈ 0.22."""
    with pytest.raises(pytest.fail.Exception, match="privacy audit failed"):
        _conformance(how).test_neighbouring_audit()


def test_an_honest_one_coordinate_plan_passes_the_curve_audit() -> None:
    results = _conformance("honest").conformance_audit(20_000)
    assert any("curves" in r.label for r in results) and all(r.passed for r in results)


@dataclass
class SpreadPlan(MechanismPlan):
    """``bins`` counts under one noise each (a histogram whose unit puts one row in each bin)."""

    used: Noise | None = None
    bins: int = STEPS

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.used is not None
        return {f"bin{i}": np.asarray(stats[f"b{i}"], dtype=np.int64) + self.used.sample(len(stats[f"b{i}"]), rng)
                for i in range(self.bins)}


def test_an_honest_spread_plan_passes_the_curve_audit() -> None:
    """Four counts each moved by one step under noise of L1 sensitivity 4: its four one-step curves are true, and the
    audit on all its outputs (each alone and jointly) passes them."""
    noise = Noise.calibrate(Fraction(STEPS), dp.PureDP(1), coordinate_sensitivity=Fraction(1))
    plan = SpreadPlan("spread", (), (), noise.cost(), noise={"bins": noise},
                      privacy=(acc.discrete_laplace(float(noise.scale), 1),) * STEPS, used=noise)
    base = {f"b{i}": np.array([20]) for i in range(STEPS)}
    other = {f"b{i}": np.array([21]) for i in range(STEPS)}
    results = audit_curves(plan, base, other, samples=20_000, seed=3)
    assert results and all(r.passed for r in results), [str(r) for r in results]
    moved_one = {**base, "b0": np.array([24])}      # the same claim for a release moving one bin by 4: caught
    caught = audit_curves(plan, base, moved_one, samples=20_000, seed=3)
    assert not all(r.passed for r in caught), [str(r) for r in caught]


def test_audit_curves_of_a_plan_without_curves_is_empty() -> None:
    noise = Noise.calibrate(Fraction(STEPS), dp.PureDP(1))
    plan = CountPlan("plain", (dp.len(),), (ROWS,), noise.cost(), noise={"count": noise}, used=noise)
    assert audit_curves(plan, {ROWS.key: np.array([10])}, {ROWS.key: np.array([14])}) == []


# --- 2. a family's run failing after the charge: whose failure, and what of it may be shown ---------------------------


class RefusingQuery(RowsQuery):
    """A row count whose ``run`` fails the way ``how`` says (after the charge, inside the reservation)."""

    def before_read(self) -> None:
        if self.how == "before":     # a refusal of public facts only: it could have been made in plan()
            raise dp.PlanError("this family needs a public key list", argument="keys",
                               fix="pass keys=[...] to group_by")

    def released(self, exact: int, noise: Noise, rng: RandomSource) -> int:
        if self.how == "after":      # the message quotes the private count
            raise dp.PlanError(f"{exact} rows is too few", argument="query", fix="use a larger table")
        if self.how == "engine":     # engine code the family called, given a wrong argument
            SortedCodes.of(None)     # type: ignore[arg-type]
        return super().released(exact, noise, rng)


def _failed(how: str) -> tuple[dp.DPFrameError, dp.Session]:
    data = pl.DataFrame({"u": [i // 2 for i in range(400)]})
    sess = pin_families(dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10),
                                   seed=0), RowsFamily("refusing_rows", RefusingQuery))
    with pytest.raises(dp.DPFrameError) as info:
        sess.table("t").refusing_rows(how).collect(dp.PureDP(1))
    assert info.value.__cause__ is None and info.value.__context__ is None and info.value.__traceback__ is not None
    assert sess.spent() == dp.PureDP(1) and sess.history()["status"].to_list() == ["failed"]   # the charge stays
    return info.value, sess


def test_a_family_refusal_before_any_read_keeps_its_type_and_message() -> None:
    """Found: a family's own dp.PlanError raised in run() was reported as "the query failed while running
    (PlanError)" with the fix "check column types and expressions against Frame.schema": neither the family nor its
    reason. Raised before the run read any private row, its message can depend on public facts only: it is kept,
    with its type and argument, naming the family, and the fix says such a refusal belongs in plan() (free)."""
    err, _ = _failed("before")
    assert type(err) is dp.PlanError and err.argument == "keys", (type(err), str(err))
    assert "query family 'refusing_rows'" in str(err) and "needs a public key list" in str(err), str(err)
    assert "before reading" in str(err) and "stays charged" in str(err), str(err)
    assert "pass keys=[...]" in (err.fix or "") and "plan()" in (err.fix or ""), err.fix


def test_a_family_refusal_after_a_read_keeps_only_its_type() -> None:
    """After a read the message may quote private values (here the count): only the type, naming the family."""
    err, _ = _failed("after")
    text = str(err)
    assert "query family 'refusing_rows' failed in run() (PlanError)" in text, text
    assert "rows is too few" not in text and "400" not in text and "Frame.schema" not in (err.fix or ""), text


def test_engine_code_a_family_called_is_named_beside_the_family() -> None:
    """Found: a failure inside dpframe code the family called outside the reader (here `SortedCodes.of` given None)
    was blamed on the family alone, "failed in run() (TypeError)". It now names the dpframe function it came out of
    too, a public code fact like the type: the author (or dpframe's maintainers) can tell where to look."""
    err, _ = _failed("engine")
    text = str(err)
    assert "query family 'refusing_rows' failed in run()" in text, text
    assert "TypeError raised in dpframe.mechanism.sorted_codes.SortedCodes.of" in text, text
    assert "not iterable" not in text, text


def test_a_reader_knows_whether_it_has_read() -> None:
    data = pl.DataFrame({"u": [1, 2, 3]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(1), seed=0)
    reader = sess._release.reader()
    view = reader.bounded_by(dp.PrivacyUnit("u", max_rows=1))
    assert not reader.has_read and not view.has_read
    view.statistics(sess.table("t")._node, (ROWS,))
    assert reader.has_read and view.has_read


# --- 3. what a running session sees of the plugins is fixed when it is made -------------------------------------------


def _late() -> RowsFamily:
    """A family a plugin registers after a session was made."""
    return RowsFamily("late_rows_r54f")


def _data_session() -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"u": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1),
                      seed=0)


def test_a_plugin_registered_later_does_not_change_a_running_session() -> None:
    """Found: a session read the process-wide plugin host live, so a plugin registered in the process after the
    session was made (another library's import, a test) changed the families, mechanisms and routing that session's
    queries already planned with. A session now keeps the registries it was made with; a new session sees the
    plugin."""
    sess = _data_session()
    host = plugin_host()
    host.register(FamilyHooks(_late()), name="late_r54f")
    try:
        assert "late_rows_r54f" in [e.name for e in host.families()]
        assert "late_rows_r54f" not in [e.name for e in sess.plugins.families()]
        with pytest.raises(AttributeError):
            sess.table("t").late_rows_r54f()
        assert _data_session().table("t").late_rows_r54f().cost(dp.PureDP(1)) == dp.PureDP(1)
    finally:
        host.unregister("late_r54f")


def test_a_sessions_host_refuses_registering() -> None:
    sess = _data_session()
    with pytest.raises(dp.PluginError) as refused:
        sess.plugins.register(FamilyHooks(_late()), name="late_r54f")
    assert refused.value.argument == "plugin" and "plugin_host()" in (refused.value.fix or "")
    with pytest.raises(dp.PluginError):
        sess.plugins.unregister("core")
    assert "late_r54f" not in [p.name for p in plugin_host().describe()]


@pytest.mark.parametrize("what", ["families", "accountants"])
def test_the_registries_a_host_returns_are_copies(what: str) -> None:
    """Found: `sess.plugins.families()` and `accountants()` returned the host's own registries, shared by every
    session of the process: `sess.plugins.families().pin(...)` re-routed `agg` everywhere, and `accountants().add`
    added an accountant every later session could select. They are copies now."""
    sess = _data_session()
    registry = getattr(sess.plugins, what)()
    if what == "families":
        registry.pin(_late(), name="agg", plugin="mine")
        assert plugin_host().family("agg") is not registry.get("agg") and sess.plugins.family("agg").name == "agg"
    else:
        registry.add(dp.accounting.BasicAccountant, name="mine_r54f", plugin="mine", first_party=False)
        assert "mine_r54f" not in plugin_host().accountant_names() + sess.plugins.accountant_names()


class Fit:
    """A result type."""


def test_result_types_are_read_when_the_family_is_registered() -> None:
    """Found: `result_types()` (and so `dp.<Name>`) re-read every family's `result_types` on each access, after the
    check that refuses two classes under one name: a family that rebinds its mapping later (`"TopKFailed": its own
    class`) changed `dp.TopKFailed` for every session. What it declared when registered is kept."""
    family = RowsFamily("fit_r54f")
    family.result_types = {"Fit": Fit}
    host = PluginHost()
    host.register(FamilyHooks(family), name="fit_r54f")
    family.result_types["TopKFailed"] = Fit                         # type: ignore[index]
    family.result_types["Fit"] = RowsFamily                         # type: ignore[index]
    types = host.result_types()
    assert types["Fit"] is Fit and types["TopKFailed"] is dp.TopKFailed


# --- 4. the hooks: a hook that raises, the order plugins load in ------------------------------------------------------


class RaisingHooks:
    @dp.hookimpl
    def dpframe_mechanisms(self, register: Any) -> None:
        raise RuntimeError("cannot read /etc/mine.conf")


def test_a_hook_that_raises_is_a_plugin_error_naming_it_and_leaves_the_host_as_it_was() -> None:
    """Found: a hook raising anything but a PluginError (a plugin's own bug, a missing config file) came out of
    `register` raw, and the plugin stayed registered: every later question to the host (every `dp.Session` of an
    installed plugin) raised the same raw error, naming no plugin. It is a PluginError naming the plugin, the hook
    and the error, with the way out (block it), and `register` leaves the host as it was."""
    host = PluginHost()
    with pytest.raises(dp.PluginError) as refused:
        host.register(RaisingHooks(), name="raising_r54f")
    text = str(refused.value)
    assert "'raising_r54f'" in text and "dpframe_mechanisms" in text and "RuntimeError" in text, text
    assert "DPFRAME_BLOCK_PLUGINS" in (refused.value.fix or "")
    assert "raising_r54f" not in [p.name for p in host.describe()]
    assert host.family("agg").name == "agg"          # the host still answers


@pytest.mark.parametrize("replacing_first", [False, True])
def test_a_replacement_does_not_depend_on_the_order_plugins_load_in(replacing_first: bool) -> None:
    """Found: a third-party plugin replacing another third-party plugin's family (`replaces="order_r54f"`) loaded,
    or failed the whole host with "replaces ... which nothing registered", depending on which of the two the
    environment listed first. Replacements now apply after every plain registration: the replacing one wins
    either way."""
    host = PluginHost()
    replacing = FamilyHooks(RowsFamily("order_r54f"), replaces="order_r54f")
    plugins: list[tuple[object, str]] = [(FamilyHooks(RowsFamily("order_r54f")), "plain_r54f"),
                                         (replacing, "replacing_r54f")]
    for plugin, name in reversed(plugins) if replacing_first else plugins:
        host.pm.register(plugin, name=name)          # as load_setuptools_entrypoints does, in the environment's order
    entry = host.families().entry("order_r54f")
    assert entry.item is replacing.families[0] and entry.plugin == "replacing_r54f" and entry.replaced == "plain_r54f"


# --- 5. the histogram plugin ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("edges", "shown"), [
    ((0, Fraction(1, 10**400)), "1/1000000000"),
    ((2**53, 2**53 + 1), "9007199254740993"),
    ((Fraction(-1, 2**1075), Fraction(1, 2**1075)), "-1/"),
])
def test_histogram_edges_one_float_apart_say_so(edges: tuple[Any, Any], shown: str) -> None:
    """Found: distinct edges that are one float64 value (the backends compare in float64) were refused as "must be
    strictly increasing, but 0 >= 0.0", or "9007199254740992 >= 9007199254740993", a false statement. The message
    now says they are distinct but one float64, naming both and the float."""
    from dpframe_histogram import parse_edges

    with pytest.raises(dp.BoundsError) as refused:
        parse_edges(edges)
    text = refused.value.message
    assert "the same float64" in text and shown in text and ">=" not in text, text
    assert refused.value.argument == "edges"


def test_a_histogram_of_many_bins_plans_and_releases_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: MAX_BINS allows 10,000 bins, but planning one such histogram took 119 s (and collecting it 85 s more):
    `plan` described the whole measure, every edge, once per bin (O(bins²)), and `release` drew its noise one bin at a
    time (~0.4 ms a draw, twice: the dry run and the release). A query of several such histograms held a server for
    minutes. Now the measure is described once and each histogram's noise is one draw: 1.6 s and 2.8 s."""
    from dpframe_histogram import MAX_BINS, HistogramMechanism
    from dpframe_histogram.mechanism import HistogramPlan

    calls = {"describe": 0, "sample": 0}
    describe, sample = Measure.describe, Noise.sample

    def counted_describe(self: Measure) -> str:
        calls["describe"] += 1
        return describe(self)

    def counted_sample(self: Noise, size: int, rng: RandomSource) -> np.ndarray:
        calls["sample"] += 1
        return sample(self, size, rng)
    monkeypatch.setattr(Measure, "describe", counted_describe)
    monkeypatch.setattr(Noise, "sample", counted_sample)
    hists = [dp.measure("histogram", "x", bounds=(0, 1), edges=np.linspace(0, 1, MAX_BINS + 1)).alias(f"h{i}")
             for i in range(2)]
    plan = HistogramMechanism().plan(hists, measure_context(max_rows=2, schema={"x": pl.Float64}), dp.PureDP(1))
    assert isinstance(plan, HistogramPlan) and calls["describe"] <= 2 * len(hists), calls
    stats = {s.key: np.full(3, 5, dtype=np.int64) for s in plan.statistics}
    out = plan.release(stats, SeededRandomSource(0))
    assert calls["sample"] == len(hists) and len(out) == 2 * MAX_BINS and all(v.shape == (3,) for v in out.values())
    spread = np.concatenate([v - 5 for v in out.values()])
    assert 0 < np.mean(spread == 0) < 0.5 and abs(float(np.mean(spread))) < 0.5      # noisy, centred, per bin
