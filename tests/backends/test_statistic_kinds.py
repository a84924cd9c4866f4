"""Statistic kinds a backend computes (``statistic_kinds``): a query reading a kind its backend lacks is refused
before its charge, not failed after it; a backend listing kinds badly is refused when it is created.

A third-party backend written before ``distinct`` existed (stop 46) computed every kind the contract had; a
``dp.count_distinct`` query on it reached its ``statistics`` with a kind it did not know and failed after the
charge (the budget spent for nothing). These backends wrap the Polars backend, so every kind they list runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.base import BASE_KINDS, STATISTIC_KINDS, StatisticsRequest, kinds_of
from dpframe.backends.polars import PolarsBackend
from dpframe.plugin import RegisterFactory, plugin_host
from dpframe.testing import BackendConformance

_UNIT = dp.PrivacyUnit("u", max_rows=2)


class _Old:
    """A backend of the first contract: no ``statistic_kinds`` (base kinds only); counts what it is asked."""

    name = "kinds_old"
    asked: list[str] = []

    def __init__(self) -> None:
        self._inner = PolarsBackend()

    def register(self, name: str, source: pl.LazyFrame) -> None:
        self._inner.register(name, source)

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        _Old.asked += [s.kind for s in request.statistics]
        if any(s.kind not in BASE_KINDS for s in request.statistics):
            raise KeyError("a kind this backend does not know")
        return self._inner.statistics(request)


class _Listing(_Old):
    """The same backend, listing every kind (it computes them through Polars)."""

    name = "kinds_listing"
    statistic_kinds = STATISTIC_KINDS

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        return self._inner.statistics(request)


def _odd(kinds: Any, name: str) -> type:
    return type(f"Odd_{name}", (_Old,), {"name": name, "statistic_kinds": kinds})


_ODD = {"kinds_no_rows": frozenset(BASE_KINDS - {"rows"} | {"distinct"}),
        "kinds_unknown": frozenset(BASE_KINDS | {"median"}),
        "kinds_list": list(STATISTIC_KINDS)}


class _Hooks:
    @dp.hookimpl
    def dpframe_backends(self, register: RegisterFactory) -> None:
        register(_Old, name=_Old.name)
        register(_Listing, name=_Listing.name)
        for name, kinds in _ODD.items():
            register(_odd(kinds, name), name=name)


@pytest.fixture(autouse=True)
def hooks() -> Iterator[None]:
    host = plugin_host()
    host.register(_Hooks(), name="statistic_kinds")
    _Old.asked = []
    try:
        yield
    finally:
        host.unregister("statistic_kinds")


def _session(backend: str) -> dp.Session:
    data = pl.DataFrame({"u": [i % 40 for i in range(120)], "x": [float(i % 7) for i in range(120)],
                         "g": [i % 2 for i in range(120)]})
    return dp.Session({"t": data}, privacy_unit=_UNIT, budget=dp.PureDP(10), backend=backend,
                      public_keys={"t.g": [0, 1]}, seed=1)


def test_built_in_backends_compute_every_kind() -> None:
    assert STATISTIC_KINDS == {"rows", "nonnull", "distinct", "fixed_sum", "units", "indicator_sum", "sorted"}
    for name in ("polars", "duckdb"):
        assert kinds_of(plugin_host().backend(name)) == STATISTIC_KINDS
    assert kinds_of(_Old()) == BASE_KINDS == STATISTIC_KINDS - {"distinct"}


QUERIES = {
    "chain": lambda s: s.table("t").agg(dp.count_distinct("x")),
    "grouped": lambda s: s.table("t").group_by("g", keys=[0, 1]).agg(dp.len(), dp.count_distinct("x")),
    "sql": lambda s: s.sql("SELECT g, COUNT(DISTINCT x) AS d FROM t GROUP BY g"),
    "ci": lambda s: s.table("t").agg(dp.count_distinct("x")),
}


@pytest.mark.parametrize("entry", list(QUERIES))
def test_a_kind_the_backend_does_not_compute_is_refused_before_the_charge(entry: str) -> None:
    """Before: a KeyError inside the backend, after the charge (DPFrameError "the query failed while running",
    the ledger row failed and spent). Now a PlanError naming ``backend``, nothing charged, nothing read."""
    sess = _session(_Old.name)
    query = QUERIES[entry](sess)
    with pytest.raises(dp.PlanError, match=r"^backend: backend 'kinds_old' does not compute 'distinct' statistics, "
                                           r"which this query reads \(dp.count_distinct"):
        if entry == "ci":
            query.collect(dp.PureDP(1), ci=0.9)
        else:
            query.collect(dp.PureDP(1))
    assert sess.history().height == 0 and sess.spent().epsilon == 0 and _Old.asked == []
    assert query.cost(dp.PureDP(1)) == dp.PureDP(1)      # pricing reads no row: still free and the same
    out = sess.table("t").group_by("g", keys=[0, 1]).agg(dp.len(), dp.count("x")).collect(dp.PureDP(1))  # base: run
    assert out.height == 2 and sess.history()["status"].to_list() == ["committed"]


def test_auto_bounds_are_refused_before_the_tuning_charge() -> None:
    """A staged query (``max_rows="auto"``) spends a tuning share first: refused before any of it."""
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 1, 2], "x": [1.0, 2.0, 3.0]})}, budget=dp.PureDP(10),
                      privacy_unit=dp.PrivacyUnit("u", max_rows="auto"), backend=_Old.name)
    with pytest.raises(dp.PlanError, match=r"^backend: backend 'kinds_old' does not compute 'distinct'"):
        sess.table("t").agg(dp.count_distinct("x")).collect(dp.PureDP(1))
    assert sess.history().height == 0 and _Old.asked == []


def test_a_backend_listing_the_kind_runs_it() -> None:
    sess = _session(_Listing.name)
    out = sess.table("t").group_by("g", keys=[0, 1]).agg(d=dp.count_distinct("x")).collect(dp.PureDP(1))
    assert out.columns == ["g", "d"] and sess.history()["status"].to_list() == ["committed"]


def test_the_query_names_another_backend_the_refusal_names_it() -> None:
    """``sess.sql(..., backend=)``: the backend checked is the query's, not the session's."""
    sess = _session(_Listing.name)
    with pytest.raises(dp.PlanError, match=r"^backend: backend 'kinds_old' does not compute 'distinct'"):
        sess.sql("SELECT COUNT(DISTINCT x) AS d FROM t", backend=_Old.name).collect(dp.PureDP(1))
    assert sess.history().height == 0
    assert sess.sql("SELECT COUNT(DISTINCT x) AS d FROM t").collect(dp.PureDP(1)).columns == ["d"]


@pytest.mark.parametrize("name", list(_ODD))
def test_a_backend_listing_kinds_badly_is_refused_when_created(name: str) -> None:
    """Leaving out a base kind (families read them without declaring), an unknown kind, or not a frozenset."""
    with pytest.raises(dp.PluginError, match=rf"^backend: backend '{name}' lists statistic_kinds .* must be a "
                                             r"frozenset of kinds"):
        _session(name)
    sess = _session(_Listing.name)
    with pytest.raises(dp.PluginError, match=rf"^backend: backend '{name}' lists statistic_kinds"):
        sess.sql("SELECT COUNT(*) AS n FROM t", backend=name).collect(dp.PureDP(1))
    assert sess.history().height == 0


class TestTheKitOnABackendOfTheFirstContract(BackendConformance):
    """The conformance kit checks the kinds a backend lists, and that a query reading another is refused free."""

    backend_name = _Old.name


def test_run_until_and_gated_release_refuse_it_before_the_charge() -> None:
    """Both plan ``agg`` queries themselves (not through ``collect``): the same refusal, free."""
    from dpframe.interactive.ptr import gated_release
    from dpframe.interactive.stopping import run_until

    sess = _session(_Old.name)
    distinct, rows = sess.table("t").agg(dp.count_distinct("x")), sess.table("t").agg(dp.len())
    with pytest.raises(dp.PlanError, match=r"^backend: backend 'kinds_old' does not compute 'distinct'"):
        run_until([rows, distinct], dp.PureDP(1), stop=lambda r: False)
    with pytest.raises(dp.PlanError, match=r"^backend: backend 'kinds_old' does not compute 'distinct'"):
        gated_release(distinct, dp.PureDP(1), rows, 10, dp.PureDP(0.5))
    assert sess.history().height == 0 and _Old.asked == []


@pytest.mark.parametrize("entry", ["chain", "grouped", "sql"])
def test_explain_says_collect_will_refuse_the_kind(entry: str) -> None:
    """``explain()`` (free) said nothing of it: the plan looked runnable and ``collect`` then refused. Now a note
    names the missing kind, in the text and in the JSON; nothing is charged or read either way."""
    sess = _session(_Old.name)
    query = QUERIES[entry](sess)
    says = "REFUSED on this backend: backend 'kinds_old' does not compute 'distinct' statistics"
    assert says in str(query.explain(dp.PureDP(1)))
    assert any(says in note for note in query.explain(dp.PureDP(1), format="json")["notes"])
    assert sess.history().height == 0 and _Old.asked == []
    runnable = _session(_Listing.name)
    assert "REFUSED" not in str(QUERIES[entry](runnable).explain(dp.PureDP(1)))


def test_explain_at_an_accuracy_target_says_it_too() -> None:
    sess = _session(_Old.name)
    query = sess.table("t").agg(dp.count_distinct("x"))
    text = str(query.explain(accuracy=dp.Accuracy(50, 0.9)))
    assert "REFUSED on this backend: backend 'kinds_old' does not compute 'distinct'" in text
