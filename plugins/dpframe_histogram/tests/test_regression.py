"""The example plugin's query family ``linear_regression``: end to end from its own package, the family
conformance kit, the neighbouring-dataset audit, SQL-free accounting in every session kind."""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

import dpframe as dp
import numpy as np
import polars as pl
import pytest
from dpframe.family import Releasable
from dpframe.testing import FamilyConformance

import dpframe_histogram
from dpframe_histogram import LinearModel, LinearRegression

BOUNDS = {"x": (0, 10), "y": (0, 25)}


def _data(n: int = 400) -> pl.DataFrame:
    x = [i % 11 for i in range(n)]
    return pl.DataFrame({"user": list(range(n)), "x": x, "y": [2 * v + 3 + (i % 3) - 1 for i, v in enumerate(x)]})


def _fit(frame: dp.Frame) -> Releasable[LinearModel]:
    query: Releasable[LinearModel] = frame.linear_regression(["x"], "y", bounds=BOUNDS)
    return query


class TestRegressionFamily(FamilyConformance):
    """The family tested as this package defines it: pinned in the suite's sessions (no registration needed, none
    made), and the package's ``dpframe_query_families`` hook checked to register it."""

    family = LinearRegression()
    plugin: ClassVar[Any] = dpframe_histogram
    table = _data()
    call = staticmethod(_fit)
    bad_calls = [
        lambda f: f.linear_regression(["x"], "y", bounds={"x": (0, 10)}),
        lambda f: f.linear_regression(["x"], "y", bounds={"x": (10, 0), "y": (0, 1)}),
        lambda f: f.linear_regression(["nope"], "y", bounds=BOUNDS),
        lambda f: f.linear_regression("x", "y", bounds=BOUNDS),
        lambda f: f.linear_regression(["x"], "y", bounds=BOUNDS, ridge=-1),
    ]
    features = staticmethod(lambda m: {"slope": m.coefficients["x"], "intercept": m.intercept, "rows": m.rows})


def _session(budget: dp.Budget = dp.PureDP(10)) -> dp.Session:
    return dp.Session({"t": _data(4000)}, privacy_unit=dp.PrivacyUnit("user"), budget=budget, seed=3)


def test_fits_the_line_from_its_own_package() -> None:
    sess = _session()
    query = sess.table("t").linear_regression(["x"], "y", bounds=BOUNDS)
    model = query.collect(dp.PureDP(4))
    assert isinstance(model, LinearModel) and abs(model.coefficients["x"] - 2) < 0.1 and abs(model.intercept - 3) < 1
    assert sess.spent() == dp.PureDP(4)
    assert sess.history()["query"][0] == "linear_regression(['x'], 'y', ridge=1)"
    assert dp.LinearModel is LinearModel                     # the family's result type, exported as dp.<Name>
    np.testing.assert_allclose(model.predict(pl.DataFrame({"x": [0, 10]})),
                               [model.intercept, model.intercept + 10 * model.coefficients["x"]])


def test_reachable_by_name_and_explained_by_the_core() -> None:
    sess = _session()
    by_name = sess.table("t").query("linear_regression", ["x"], "y", bounds=BOUNDS)
    text = by_name.explain(dp.PureDP(2))
    assert text.startswith("dpframe linear regression") and "fit: ridge least squares" in text
    assert "budget: requested ε=2; cost ε=2; charged ε=2" in text
    assert "Σ (clamp(__lr_x*y)" in text                    # the product's clamped sum, from the agg family
    data = by_name.explain(dp.PureDP(2), format="json")
    assert data["features"] == ["x"] and data["budget"]["fits"]
    assert sess.history().height == 0


def test_the_budget_is_split_over_every_sufficient_statistic() -> None:
    """1 count + Σx + Σy + Σx² + Σxy = 5 equal parts of ε (hand-computed)."""
    plan = _session().table("t").linear_regression(["x"], "y", bounds=BOUNDS).plan(dp.PureDP(1))
    assert [p.cost for p in plan.plans] == [dp.PureDP(1)] and plan.notes[0].startswith(
        "budget: ε split into 5 equal parts of 1/5")


def test_a_clash_with_a_core_method_or_another_family_is_refused() -> None:
    from dpframe.plugin import PluginHost, RegisterFamily

    class Bad:
        name, attach, methods = "filter", "frame", ()
        result_types: dict[str, type] = {}

        def build(self, source: object) -> NoReturn:
            raise AssertionError

    class Hooks:
        @dp.hookimpl
        def dpframe_query_families(self, register: RegisterFamily) -> None:
            register(Bad())

    with pytest.raises(dp.PluginError, match="core method"):
        PluginHost().register(Hooks(), name="bad")

    class Twice:
        @dp.hookimpl
        def dpframe_query_families(self, register: RegisterFamily) -> None:
            register(LinearRegression())

    with pytest.raises(dp.PluginError, match="'linear_regression', which plugin 'histogram'"):
        PluginHost().register(Twice(), name="twice")
