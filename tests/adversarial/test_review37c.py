"""Review 37c: grouped queries under ``max_groups="auto"`` at every entry point, backends created after a charge,
and the individual filter cut short by ``Session.close()``.

Scope: every entry point that takes a grouped query (``collect`` with ``ci=``, ``diagnostics=`` or ``accuracy=``,
``cost(accuracy=)``, ``Query.plan``, ``explain``/``cost``, SQL, top-k by method chain and by SQL, ``run_until``,
``gated_release``, the individual filter) under ``dp.PrivacyUnit(..., max_rows=N, max_groups="auto")``
(``dpframe.tuning.stage.require_plan``, ``dpframe.privacy_unit``, ``plugins/dpframe_topk``); the backend a release
names (``dpframe.release.ReleaseContext.release``, ``dpframe.catalog.TableCatalog.backend``), reached through a
query family whose query names a backend and through ``sess.sql(..., backend=)``; and the individual filter's query
cut short by ``sess.close()`` from another thread (``dpframe.interactive.individual``). Each test is an attack that
broke, kept with its fix: it fails if the defence regresses. Races are made deterministic with events, not timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.family import Explain, FamilyPlan, Source
from dpframe.interactive.ptr import gated_release
from dpframe.interactive.stopping import run_until
from dpframe.plugin import RegisterFactory, RegisterFamily, plugin_host
from dpframe.release import PrivateReader

from .test_review37a import _closed_mid_call

_GROUPS_AUTO, _NO_GROUPS = dp.PrivacyUnit("u", max_rows=2, max_groups="auto"), dp.PrivacyUnit("u", max_rows=2)
_PURE, _APPROX = dp.PureDP(1), dp.ApproxDP(1, 1e-6)


def _data(extra_groups: int = 0) -> pl.DataFrame:
    """150 units over groups 0-2; ``extra_groups`` > 0 adds a neighbour's unit 999 with a row in each of that many
    groups (its many groups are what ``max_groups`` bounds)."""
    d = pl.DataFrame({"u": [i % 150 for i in range(300)], "x": [float(i % 50) for i in range(300)],
                      "g": [i % 3 for i in range(300)]})
    extra = pl.DataFrame({"u": [999] * extra_groups, "x": [1.0] * extra_groups, "g": list(range(extra_groups))})
    return pl.concat([d, extra]) if extra_groups else d


def _session(unit: dp.PrivacyUnit, data: pl.DataFrame | None = None, budget: dp.Budget = dp.ZCDP(50)
             ) -> dp.Session:
    return dp.Session({"t": _data() if data is None else data}, privacy_unit=unit, budget=budget, seed=0)


# ---------------------------------------------------------------------------- 1. grouped queries, max_groups="auto"

def _grouped(s: dp.Session) -> dp.Query:
    return s.table("t").group_by("g", keys=[0, 1, 2]).agg(dp.len())


def _count(s: dp.Session) -> dp.Query:
    return s.table("t").agg(dp.len())


def _filtered(s: dp.Session) -> Callable[[], Any]:
    f = s.individual_filter(dp.ZCDP(1))             # opened (and charged) before the grouped query is tried
    return lambda: f.collect(_grouped(s), dp.ZCDP(0.5))


#: Entry points refusing a grouped query under max_groups="auto" (each needs the query's plan before it runs):
#: ``prepare(session)`` does what comes before the call (the individual filter is opened) and returns the call.
_REFUSED: dict[str, Callable[[dp.Session], Callable[[], Any]]] = {
    "plan": lambda s: lambda: _grouped(s).plan(_PURE),
    "collect_accuracy": lambda s: lambda: _grouped(s).collect(accuracy=dp.Accuracy(half_width=50)),
    "cost_accuracy": lambda s: lambda: _grouped(s).cost(accuracy=dp.Accuracy(half_width=50)),
    "explain_accuracy": lambda s: lambda: _grouped(s).explain(accuracy=dp.Accuracy(half_width=50)),
    "sql_plan": lambda s: lambda: s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", keys={"g": [0, 1, 2]}).plan(
        _PURE),
    "run_until": lambda s: lambda: run_until([_count(s), _grouped(s)], _PURE, stop=lambda r: False),
    "gated_release": lambda s: lambda: gated_release(_grouped(s), _PURE, _count(s), 10, _PURE),
    "individual_filter": _filtered,
}

#: Entry points that run it: a grouped ``agg`` chooses max_groups when it runs (its whole budget is charged) ...
_TUNED: dict[str, Callable[[dp.Session], Any]] = {
    "collect": lambda s: _grouped(s).collect(_PURE),
    "collect_ci": lambda s: _grouped(s).collect(_PURE, ci=0.9),
    "collect_diagnostics": lambda s: _grouped(s).collect(_PURE, diagnostics=True).frame,
    "sql": lambda s: s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", keys={"g": [0, 1, 2]}).collect(_PURE),
}

#: ... and top-k reads max_rows alone (its sensitivity is max_rows, or 1 for count_units, whatever max_groups is).
_TOP_K: dict[str, Callable[[dp.Session], Any]] = {
    "top_k_count_units": lambda s: s.table("t").group_by("g", keys=[0, 1, 2]).top_k(k=1, method="gumbel").collect(
        _PURE),
    "top_k_len": lambda s: s.table("t").group_by("g", keys=[0, 1, 2]).top_k(
        k=2, score=dp.len(), method="peeling").collect(_PURE),
    "top_k_stable_sum": lambda s: s.table("t").group_by("g", keys=[0, 1, 2]).top_k(
        k=1, score=dp.sum("x", bounds=(0, 50)), method="stable").collect(_APPROX),
    "sql_top_k": lambda s: s.sql("SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(*), 1, method := 'gumbel')",
                                 keys={"g": [0, 1, 2]}).collect(_PURE),
}


def _refusal(prepare: Callable[[dp.Session], Callable[[], Any]], data: pl.DataFrame) -> tuple[str, str | None, str]:
    sess = _session(_GROUPS_AUTO, data)
    call = prepare(sess)
    before = sess.history().drop("id").rows()
    with pytest.raises(dp.PlanError) as caught:
        call()
    assert sess.history().drop("id").rows() == before, "a refusal charged"
    return str(caught.value.argument), caught.value.fix, str(caught.value)


@pytest.fixture(scope="module")
def plan_refusal() -> tuple[str, str | None, str]:
    """``Query.plan``'s refusal: the reference every other entry point's refusal is held to."""
    return _refusal(_REFUSED["plan"], _data())


@pytest.mark.parametrize("entry", sorted(_REFUSED))
def test_every_entry_point_that_plans_a_grouped_query_first_refuses_it_alike(
        entry: str, plan_refusal: tuple[str, str | None, str]) -> None:
    """Under ``max_rows=N, max_groups="auto"`` a grouped query chooses ``max_groups`` when it runs, so it has no plan
    before it runs. The entry points that need one refused it unevenly: ``run_until`` with a DPFrameError naming
    ``max_groups`` ("this query needs a number"), raised from deep in planning; ``collect``/``cost(accuracy=)`` naming
    ``accuracy``; ``Query.plan``, ``gated_release`` and the individual filter naming ``privacy_unit``, each with
    another fix. Now each one raises the same PlanError (``dpframe.tuning.stage.require_plan``): it names
    ``privacy_unit`` and gives the same fix, charges nothing, and reads public facts only — D and D′ (D plus a unit in
    50 groups) get the same text."""
    argument, fix, _ = plan_refusal
    on_d = _refusal(_REFUSED[entry], _data())
    on_d_plus = _refusal(_REFUSED[entry], _data(extra_groups=50))
    assert on_d == on_d_plus
    assert on_d[:2] == (argument, fix) == ("privacy_unit", fix)
    assert "this query chooses max_groups when it runs" in on_d[2]
    assert fix is not None and "max_groups=M" in fix and "collect(budget)" in fix


@pytest.mark.parametrize("entry", sorted(_TUNED))
def test_a_grouped_agg_query_chooses_max_groups_where_it_runs(entry: str) -> None:
    """``collect`` (with ``ci=`` or ``diagnostics=``) and SQL run a grouped query under ``max_groups="auto"``: it
    chooses ``max_groups`` from a share of its budget, charged its whole budget, once."""
    sess = _session(_GROUPS_AUTO, budget=dp.ApproxDP(100, 1e-3))
    assert _TUNED[entry](sess).height <= 3
    assert sess.history()["status"].to_list() == ["committed"] and sess.spent() == dp.ApproxDP(1, 0)


@pytest.mark.parametrize("entry", sorted(_TOP_K))
def test_top_k_under_max_groups_auto_runs_as_under_no_max_groups(entry: str) -> None:
    """Top-k bounds a unit by ``max_rows`` alone (a unit's ≤ ``max_rows`` rows move the score vector by ≤ ``max_rows``
    in L1 whatever groups they fall in; ``count_units`` is not bounded and moves each key by ≤ 1): it never reads
    ``max_groups``, so ``max_groups="auto"`` changes nothing — sound, and charged as under ``dp.PrivacyUnit("u",
    max_rows=2)``: the same seed gives the same release and the same ledger rows. ``describe()`` said "(other queries:
    no max_groups)"; it now says that grouped ``agg`` queries choose it and that top-k reads ``max_rows`` alone."""
    seen = []
    for unit in (_GROUPS_AUTO, _NO_GROUPS):
        sess = _session(unit, budget=dp.ApproxDP(100, 1e-3))
        seen.append((str(_TOP_K[entry](sess)), sess.history().drop("id").rows()))
    assert seen[0] == seen[1]
    assert "top-k: max_rows alone" in _GROUPS_AUTO.describe()


def test_run_until_refuses_a_step_under_max_rows_auto_with_the_same_refusal() -> None:
    """``run_until`` under ``max_rows="auto"`` failed in planning with a DPFrameError naming ``max_rows`` ("chosen per
    query by agg queries ... this query needs a number"); it now gives the shared refusal, free."""
    sess = _session(dp.PrivacyUnit("u", max_rows="auto"))
    with pytest.raises(dp.PlanError, match=r"^privacy_unit: this query chooses max_rows when it runs, so run_until"):
        run_until([_count(sess)], _PURE, stop=lambda r: False)
    assert sess.history().height == 0


# ---------------------------------------------------------------------------- 2. a backend created after the charge

class _Broken:
    """A backend whose creation fails, as a Spark or DuckDB start can (the message quotes a private value)."""

    name = "review37c_broken"

    def __init__(self) -> None:
        raise RuntimeError("cannot start: the value 31337 of table t")


class _OnBackend:
    """A query family whose query runs on a backend its caller names (``Source.backend``, as SQL's queries do)."""

    name, attach, methods, result_types = "review37c_rows", "frame", (), {}

    def build(self, source: Source, *, backend: str) -> Any:
        class RowsQuery:
            def describe(self) -> str:
                return f"rows on {backend}"

            @property
            def backend(self) -> str:
                return backend

            def plan(self, budget: Any) -> FamilyPlan[int]:
                def run(reader: PrivateReader, rng: Any) -> int:
                    return 0        # a real family adds noise to what it reads; nothing is read here

                return FamilyPlan(budget, budget, source.context.accountant.charge(budget), "rows",
                                  Explain("rows"), run)
        return RowsQuery()


class _Hooks:
    @dp.hookimpl
    def dpframe_backends(self, register: RegisterFactory) -> None:
        register(_Broken, name=_Broken.name)

    @dp.hookimpl
    def dpframe_query_families(self, register: RegisterFamily) -> None:
        register(_OnBackend())


@pytest.fixture
def hooks() -> Iterator[None]:
    host = plugin_host()
    host.register(_Hooks(), name="review37c")
    try:
        yield
    finally:
        host.unregister("review37c")


@pytest.mark.parametrize("backend", ["nope", _Broken.name])
def test_a_backend_that_cannot_be_created_is_refused_before_the_charge(backend: str, hooks: None) -> None:
    """A release looked its backend up (creating it on first use, ``catalog.backend(name)``) after reserving the
    charge and outside the guard. A query family whose query names a backend — an unknown name, or one whose start
    fails — raised the raw exception (a RuntimeError quoting whatever the start failure said) after the charge, and
    the ledger row stayed ``reserved`` until the session closed (spent, and read as an open stream by every refund).
    The backend is now looked up before the charge: a free refusal, a DPFrameError naming ``backend`` and only the
    failure's type."""
    sess = _session(_NO_GROUPS, budget=dp.PureDP(10))
    with pytest.raises(dp.DPFrameError, match=r"^backend: ") as caught:
        sess.table("t").review37c_rows(backend=backend).collect(_PURE)
    assert "31337" not in str(caught.value) and caught.value.__cause__ is None and caught.value.__context__ is None
    assert sess.history().height == 0 and sess.spent().epsilon == 0
    assert sess.table("t").review37c_rows(backend="duckdb").collect(_PURE) == 0     # a backend that starts: runs
    assert sess.history()["status"].to_list() == ["committed"]


def test_sql_on_a_backend_that_cannot_start_is_a_dpframe_error(hooks: None) -> None:
    """``sess.sql(..., backend=name)`` creates the backend when the query is built (free), but a start failure
    escaped as the raw exception, not a dpframe error, with its message; it is now a DPFrameError naming
    ``backend``, the failure's type only, every time it is tried."""
    sess = _session(_NO_GROUPS, budget=dp.PureDP(10))
    for _ in range(2):
        with pytest.raises(dp.DPFrameError, match=r"^backend: backend 'review37c_broken' could not be created "
                                                  r"\(RuntimeError\)\. Fix: "):
            sess.sql("SELECT COUNT(*) AS n FROM t", backend=_Broken.name)
    assert sess.history().height == 0


# ---------------------------------------------------------------------------- 3. the individual filter cut short

def test_the_individual_filter_cut_short_by_close_raises_the_ledger_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call cut short by ``sess.close()`` from another thread raises the closed session's LedgerError
    (``test_review37a.py``); the individual filter's query raised "the query failed while running (LedgerError)"
    instead (its run catches every failure). It now raises the LedgerError too, and so does every later call."""
    sess = _session(_NO_GROUPS, budget=dp.ZCDP(5))
    f = sess.individual_filter(dp.ZCDP(1))
    outcome = _closed_mid_call(monkeypatch, sess, lambda: f.collect(_count(sess), dp.ZCDP(0.5)))
    assert type(outcome) is dp.LedgerError and "closed" in str(outcome)
    with pytest.raises(dp.LedgerError, match="closed"):
        f.collect(_count(sess), dp.ZCDP(0.5))
