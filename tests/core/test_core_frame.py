"""Plan nodes and the Frame API: build-time validation, no data read, public keys, measures in agg."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from core_testkit import make_session

import dpframe as dp
from dpframe.plan.nodes import Aggregate, Filter, Scan, Select, WithColumns

SCHEMA = pl.Schema({"u": pl.Int64, "age": pl.Int64, "city": pl.String, "spend": pl.Float64})


# ------------------------------------------------------------------------------ no data is ever read


class _Exploding:
    """A backend stand-in whose every data access fails loudly.

    ``supports(node)`` is answered (every step can run): it reads the step's public types, never data, and
    a frame asks it when it is built; so are ``check_quiet()`` (its output settings: a release asks before its
    charge) and ``statistic_kinds`` (what it computes: a release asks before its charge).
    """

    name = "polars"
    statistic_kinds = frozenset({"rows", "nonnull", "distinct", "fixed_sum", "units", "indicator_sum", "sorted"})

    def supports(self, node: object) -> None:
        return None

    def check_quiet(self) -> None:
        return None

    def __getattr__(self, item: str):  # noqa: ANN204
        raise AssertionError(f"the backend was touched: {item}")


def _full_query(t: dp.Frame) -> dp.Query:
    return (t.filter(pl.col("age") >= 18)
            .with_columns(double=pl.col("spend") * 2, adult=pl.col("age") >= 21)
            .select("age", "city", "double", "adult")
            .filter(pl.col("adult"))
            .group_by("city", keys=["a", "b", "c"])
            .agg(dp.len(), dp.sum("double", bounds=(0, 1000)), dp.mean("age", bounds=(0, 100)),
                 dp.var("age", bounds=(0, 100)), dp.count("double")))


def test_building_explaining_and_costing_never_touch_the_backend(sess: dp.Session, monkeypatch) -> None:
    monkeypatch.setattr(sess._catalog, "_default", _Exploding())
    q = _full_query(sess.table("t"))
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    assert q.plan(dp.PureDP(0.5)).session_cost == dp.PureDP(0.5)
    text = q.explain(dp.PureDP(1))
    assert "Filter" in text and "GroupBy" in text and "WithColumns" in text and "Select" in text
    assert q.explain(dp.PureDP(1), format="json")["backend"] == "polars"
    assert sess.spent().epsilon == 0
    assert sess.history().height == 0
    with pytest.raises(dp.DPFrameError):   # sanity: the stand-in does explode when data is needed
        q.collect(dp.PureDP(1))


def test_explain_and_cost_work_when_the_data_is_gone(tmp_path: Path, visits: pl.DataFrame) -> None:
    """A scanned CSV deleted after the session opened: planning still works; running is refused, free."""
    path = tmp_path / "visits.csv"
    visits.drop("spend").write_csv(path)
    s = dp.Session({"v": str(path)}, privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.PureDP(2), seed=0)
    path.unlink()
    q = (s.table("v").filter(pl.col("age") >= 18).with_columns(old=pl.col("age") > 60)
         .group_by("city", keys=["a", "b"]).agg(dp.len(), dp.mean("age", bounds=(0, 100))))
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    text = q.explain(dp.PureDP(1))
    assert "Filter" in text and "ContributionBound" in text
    d = q.explain(dp.PureDP(1), format="json")
    assert d["budget"]["cost"] == "ε=1"
    assert s.spent().epsilon == 0                              # explain/cost are free
    with pytest.raises(dp.TableChangedError, match="changed after the session was created"):
        q.collect(dp.PureDP(1))                                # the file is gone: refused before the charge
    assert s.spent().epsilon == 0 and s.history().height == 0


# ------------------------------------------------------------------------------- row-level plan nodes


def test_nodes_derive_schemas_without_data() -> None:
    scan = Scan.of("t", SCHEMA)
    f = Filter.of(scan, pl.col("age") >= 18)
    assert f.schema == SCHEMA and f.input is scan
    w = WithColumns.of(f, [pl.col("spend").round(0).alias("r")], {"flag": pl.col("age") > 30, "k": 5}, "u")
    assert w.schema == pl.Schema({**SCHEMA, "r": pl.Float64, "flag": pl.Boolean, "k": pl.Int32})
    s = Select.of(w, [pl.col("r")], {"a2": pl.col("age") * 2}, "u")
    assert list(s.schema.names()) == ["u", "r", "a2"]                 # the unit column is kept, first
    assert [type(n).__name__ for n in s.lineage()] == ["Scan", "Filter", "WithColumns", "Select"]
    assert f.describe().startswith("Filter") and "age" in f.describe()
    assert scan.describe() == "Scan t (4 columns)"


def test_select_without_a_unit_column_keeps_only_what_is_asked() -> None:
    s = Select.of(Scan.of("t", SCHEMA), ["age"], {}, None)
    assert list(s.schema.names()) == ["age"]


def test_dropping_or_selecting_every_column_of_a_row_level_frame_is_refused_clearly() -> None:
    """A frame of no columns has no rows; the probe used to say "gives 0 rows for 3 input rows"."""
    s = dp.Session({"t": pl.DataFrame({"a": [1, 2], "b": [3, 4]})}, privacy_unit=dp.PrivacyUnit.row(),
                   budget=dp.PureDP(1))
    with pytest.raises(dp.PlanError, match="would drop every column") as info:
        s.table("t").drop("a", "b")
    assert info.value.argument == "columns"
    with pytest.raises(dp.PlanError, match="would leave no columns") as info:
        s.table("t").select()
    assert info.value.argument == "exprs"
    assert s.table("t").drop("a").columns == ["b"]


def test_frames_are_immutable(sess: dp.Session) -> None:
    t = sess.table("t")
    f = t.filter(pl.col("age") > 30)
    w = t.with_columns(z=pl.lit(1))
    assert t.columns == ["u", "city", "age", "spend", "flag"]
    assert "z" in w.columns and "z" not in t.columns
    assert f is not t and "Filter" in repr(f) and "Filter" not in repr(t)


def test_frame_repr_shows_the_plan_not_the_data(sess: dp.Session) -> None:
    r = repr(sess.table("t").filter(pl.col("age") >= 18))
    assert r.startswith("<dp.Frame (private)") and "Scan t" in r
    assert "250.5" not in r and "499" not in r
    g = sess.table("t").group_by("city", keys=["a"])
    assert "GroupBy" in repr(g) or "dp.GroupBy" in repr(g)


def test_schema_and_columns(sess: dp.Session) -> None:
    t = sess.table("t").with_columns(spend2=pl.col("spend") * 2)
    assert t.schema["spend2"] == pl.Float64
    assert t.columns[-1] == "spend2"


@pytest.mark.parametrize("build", [
    lambda t: t.filter(pl.col("nope") > 1),
    lambda t: t.filter(pl.col("age") > 1, pl.col("nope")),
    lambda t: t.with_columns(pl.col("nope") + 1),
    lambda t: t.with_columns(z=pl.col("nope")),
    lambda t: t.select("age").filter(pl.col("spend") > 0),          # spend was dropped by select
    lambda t: t.group_by("nope"),
    lambda t: t.group_by("city", "nope", keys={"city": ["a"], "nope": [1]}),
], ids=["filter", "filter-2nd", "with_columns", "with_columns-named", "after-select", "group_by", "group_by-2nd"])
def test_unknown_columns_raise_schema_error(sess: dp.Session, build) -> None:
    with pytest.raises(dp.SchemaError) as info:
        build(sess.table("t"))
    assert info.value.argument in ("predicate", "exprs", "z", "by")
    assert "nope" in str(info.value) or "spend" in str(info.value)


@pytest.mark.parametrize("build", [
    lambda t: t.select("nope"),
    lambda t: t.select(pl.col("nope")),
    lambda t: t.select(z=pl.col("nope") * 2),
    lambda t: t.select(pl.col("city") + 1),
], ids=["unknown-str", "unknown-expr", "unknown-named", "type-error"])
def test_select_errors_are_dpframe_errors(sess: dp.Session, build) -> None:
    with pytest.raises(dp.SchemaError):
        build(sess.table("t"))


@pytest.mark.parametrize("build", [
    lambda t: t.filter(pl.col("city") > 1),
    lambda t: t.with_columns(z=pl.col("city") + 1),
    lambda t: t.with_columns(pl.col("city").str.to_uppercase().dt.year().alias("z")),
])
def test_type_errors_raise_schema_error_at_build_time(sess: dp.Session, build) -> None:
    with pytest.raises(dp.SchemaError):
        build(sess.table("t"))


@pytest.mark.parametrize("pred", [pl.col("age"), pl.col("city"), pl.col("age") + 1, pl.lit(1)],
                         ids=["int", "str", "arith", "lit"])
def test_non_boolean_filter_is_refused(sess: dp.Session, pred: pl.Expr) -> None:
    with pytest.raises(dp.SchemaError) as info:
        sess.table("t").filter(pred)
    assert info.value.argument == "predicate"


def test_filter_needs_a_predicate_expression(sess: dp.Session) -> None:
    with pytest.raises(dp.PlanError) as info:
        sess.table("t").filter()
    assert info.value.argument == "predicates"
    with pytest.raises(dp.PlanError):
        sess.table("t").filter("age")  # type: ignore[arg-type]


@pytest.mark.parametrize("build", [
    lambda t: t.with_columns(pl.col("age").alias("u")),
    lambda t: t.with_columns(u=pl.col("age")),
    lambda t: t.with_columns(u=1),
    lambda t: t.with_columns(pl.col("u") + 1),
    lambda t: t.with_columns(pl.all().fill_null(0)),
    lambda t: t.with_columns(pl.col("u").cast(pl.String, strict=False)),
], ids=["alias", "named", "literal", "arith", "all", "cast"])
def test_overwriting_the_unit_column_is_refused(sess: dp.Session, build) -> None:
    with pytest.raises(dp.PlanError) as info:
        build(sess.table("t"))
    assert "privacy-unit" in str(info.value)


@pytest.mark.parametrize("build", [
    lambda t: t.select("u"),
    lambda t: t.select("u", "age"),
    lambda t: t.select(pl.all()),
    lambda t: t.select(pl.col("age").alias("u")),
    lambda t: t.select(u=pl.col("age")),
], ids=["plain", "with-others", "all", "alias", "named"])
def test_selecting_the_unit_column_is_refused(sess: dp.Session, build) -> None:
    with pytest.raises(dp.PlanError) as info:
        build(sess.table("t"))
    assert "privacy-unit" in str(info.value)


def test_row_level_sessions_have_no_protected_column(visits: pl.DataFrame) -> None:
    s = make_session(visits, unit=dp.PrivacyUnit.row())
    assert s.table("t").with_columns(u=pl.lit(0)).schema["u"] == pl.Int32
    assert s.table("t").select("u", "age").columns == ["u", "age"]


def test_unit_column_can_be_used_in_predicates(sess: dp.Session) -> None:
    f = sess.table("t").filter(pl.col("u") > 2)
    assert f.schema == sess.table("t").schema


# ------------------------------------------------------------------------------------------ group_by


def test_group_by_validation(sess: dp.Session) -> None:
    t = sess.table("t")
    with pytest.raises(dp.SchemaError) as info:
        t.group_by("nope")
    assert info.value.argument == "by"
    with pytest.raises(dp.PlanError) as info:
        t.group_by("city", "city")
    assert info.value.argument == "by"
    with pytest.raises(dp.PlanError):
        t.group_by(["city", "age", "city"])
    with pytest.raises(dp.PlanError):
        t.group_by()
    assert t.group_by(["city", "age"], keys={"city": ["a"], "age": [1]}).agg(dp.len()).node.by == ("city", "age")


def _keys(sess: dp.Session, *by: str, keys: object) -> pl.DataFrame:
    node = sess.table("t").group_by(*by, keys=keys).agg(dp.len()).node
    assert isinstance(node, Aggregate) and node.keys is not None
    return node.keys


def test_public_keys_as_a_list(sess: dp.Session) -> None:
    k = _keys(sess, "city", keys=["b", "a", "zz"])
    assert k.columns == ["city"] and k["city"].to_list() == ["b", "a", "zz"]
    assert _keys(sess, "age", keys=range(3))["age"].to_list() == [0, 1, 2]
    assert _keys(sess, "age", keys=(5,)).schema["age"] == pl.Int64        # cast to the column's type
    assert _keys(sess, "city", keys=pl.Series(["a", None]))["city"].to_list() == ["a", None]


def test_public_keys_as_a_dict_are_the_cartesian_product(sess: dp.Session) -> None:
    k = _keys(sess, "city", "age", keys={"city": ["a", "b", "c"], "age": [20, 35]})
    assert k.height == 6
    assert set(k.iter_rows()) == {(c, a) for c in "abc" for a in (20, 35)}
    assert k.columns == ["city", "age"]
    # the dict's column order does not matter
    assert _keys(sess, "city", "age", keys={"age": [20], "city": ["a"]}).rows() == [("a", 20)]


def test_public_keys_as_a_dataframe(sess: dp.Session) -> None:
    df = pl.DataFrame({"age": [20, 35], "city": ["a", "b"]})
    k = _keys(sess, "city", "age", keys=df)
    assert k.columns == ["city", "age"] and k.rows() == [("a", 20), ("b", 35)]


@pytest.mark.parametrize("by, keys", [
    (("city",), pl.DataFrame({"town": ["a"]})),
    (("city",), pl.DataFrame({"city": ["a"], "extra": [1]})),
    (("city", "age"), pl.DataFrame({"city": ["a"]})),
    (("city", "age"), ["a", "b"]),
    (("city", "age"), {"city": ["a"]}),
    (("city",), []),
    (("city",), pl.DataFrame({"city": []}, schema={"city": pl.String})),
    (("city",), {"city": []}),
    (("city",), ["a", "a"]),
    (("city", "age"), pl.DataFrame({"city": ["a", "a"], "age": [1, 1]})),
    (("age",), ["x"]),
    (("age",), 5),
    (("city",), None.__class__),
], ids=["wrong-column", "extra-column", "missing-column", "list-for-two", "dict-missing", "empty-list",
        "empty-frame", "empty-dict", "duplicates", "duplicate-rows", "wrong-type", "scalar", "type-object"])
def test_bad_public_keys_raise_schema_error(sess: dp.Session, by: tuple[str, ...], keys: object) -> None:
    with pytest.raises(dp.SchemaError) as info:
        sess.table("t").group_by(*by, keys=keys)
    assert info.value.argument == "keys"


def test_a_string_is_not_a_list_of_keys(sess: dp.Session) -> None:
    with pytest.raises(dp.SchemaError):
        sess.table("t").group_by("city", keys="ab")


def test_keys_that_do_not_fit_the_column_type_are_refused(sess: dp.Session) -> None:
    with pytest.raises(dp.SchemaError):
        sess.table("t").group_by("age", keys=[1.5, 2.5])


def test_dict_keys_with_an_extra_column_are_refused(sess: dp.Session) -> None:
    with pytest.raises(dp.SchemaError):
        sess.table("t").group_by("city", keys={"city": ["a"], "typo": [1]})


# ----------------------------------------------------------------------------------------------- agg


@pytest.mark.parametrize("bad", [
    pl.col("spend"), pl.col("spend").sum(), pl.len(), "spend", 5, {"n": dp.len()}, [dp.len(), pl.col("spend")],
    (pl.col("age"),), None,
], ids=["col", "col.sum", "pl.len", "str", "int", "dict", "list-with-col", "tuple-col", "none"])
def test_only_dp_measures_can_be_aggregated(sess: dp.Session, bad: object) -> None:
    for target in (sess.table("t"), sess.table("t").group_by("city", keys=["a"])):
        with pytest.raises(dp.PlanError) as info:
            target.agg(bad)  # type: ignore[arg-type]
        assert info.value.argument == "measures"


def test_agg_needs_a_measure_and_flattens_iterables(sess: dp.Session) -> None:
    with pytest.raises(dp.PlanError):
        sess.table("t").agg()
    q = sess.table("t").agg([dp.len(), dp.count("age")], (m for m in [dp.sum("age", bounds=(0, 1))]))
    assert [m.output_name for m in q.node.measures] == ["len", "age_count", "age_sum"]
    assert q.node.by == () and q.node.keys is None and not q.node.grouped


@pytest.mark.parametrize("measures, by", [
    ((dp.len(), dp.len()), ()),
    ((dp.sum("age", bounds=(0, 1)), dp.sum("age", bounds=(0, 2))), ()),
    ((dp.len(), dp.count("age").alias("len")), ()),
    ((dp.len().alias("city"),), ("city",)),
])
def test_duplicate_output_names_are_refused(sess: dp.Session, measures, by) -> None:
    """Refused by ``agg`` itself, where they are written (planning checks the mechanisms' outputs again)."""
    t = sess.table("t")
    with pytest.raises(dp.PlanError) as info:
        t.group_by(*by, keys=["a"]).agg(*measures) if by else t.agg(*measures)
    assert info.value.argument == "measures"
    assert sess.spent().epsilon == 0


def test_aliases_resolve_duplicates(sess: dp.Session) -> None:
    q = sess.table("t").agg(dp.sum("age", bounds=(0, 50)), dp.sum("age", bounds=(0, 100)).alias("age_sum_wide"))
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)


@pytest.mark.parametrize("m, exc", [
    (dp.sum("nope", bounds=(0, 1)), dp.SchemaError),
    (dp.mean("city", bounds=(0, 1)), dp.SchemaError),
    (dp.var("city", bounds=(0, 1)), dp.SchemaError),
    (dp.count("nope"), dp.SchemaError),
    (dp.measure("no_such_kind", "age"), dp.PluginError),
])
def test_measures_are_validated_against_the_schema_when_planned(sess: dp.Session, m: dp.Measure, exc) -> None:
    """agg() refuses them at once (build time); the planner checks again (a Query built around agg)."""
    from dpframe.frame import Query
    from dpframe.plan.nodes import Aggregate
    from dpframe.sealed import _ENGINE

    t = sess.table("t")
    with pytest.raises(exc):
        t.agg(m)
    with pytest.raises(exc):
        t.group_by("city", keys=["a"]).agg(m)
    q = Query(sess, Aggregate(t._node, (), None, (m,)), _engine=_ENGINE)
    with pytest.raises(exc):
        q.cost(dp.PureDP(1))
    with pytest.raises(exc):
        q.collect(dp.PureDP(1))
    assert sess.spent().epsilon == 0 and sess.history().height == 0


def test_measures_see_derived_columns(sess: dp.Session) -> None:
    q = sess.table("t").with_columns(a2=pl.col("age") * 2).agg(dp.mean("a2", bounds=(0, 200)))
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    with pytest.raises(dp.SchemaError):
        sess.table("t").select("age").agg(dp.sum("spend", bounds=(0, 1))).cost(dp.PureDP(1))


@pytest.mark.parametrize("budget", [None, 1.0, "eps=1", dp.PrivacyUnit.row()], ids=repr)
def test_query_budget_must_be_a_dp_budget(sess: dp.Session, budget: object) -> None:
    q = sess.table("t").agg(dp.len())
    for call in (q.cost, q.explain, q.collect, q.plan):
        with pytest.raises(dp.BudgetError) as info:
            call(budget)  # type: ignore[arg-type]
        assert info.value.argument == "budget"


def test_explain_format(sess: dp.Session) -> None:
    q = sess.table("t").agg(dp.len())
    for bad in ("html", np.array(["text", "json"]), pl.Series(["text"]), pl.col("x")):  # (arrays: ambiguous truth once)
        with pytest.raises(dp.PlanError) as info:
            q.explain(dp.PureDP(1), format=bad)  # type: ignore[arg-type]
        assert info.value.argument == "format"
    with pytest.raises(dp.ArgumentError, match="noise"):
        sess.sparse_vector(1, 1, dp.PureDP(1), noise=np.array(["laplace", "gaussian"]))
    d = q.explain(dp.PureDP(1), format="json")
    assert set(d) >= {"private", "steps", "measures", "noise", "budget", "notes"}
    assert d["measures"][0]["output"] == "len"


def test_query_describe(sess: dp.Session) -> None:
    q = (sess.table("t").filter(pl.col("age") > 1).group_by("city", keys=["a"])
         .agg(dp.len(), dp.mean("age", bounds=(0, 100))))
    text = q.describe()
    assert text.startswith("Scan t") and "Filter" in text and "group_by['city']" in text
    assert "agg(len(), mean(age, bounds=[0, 100]))" in text
    assert repr(q).startswith("<dp.Query")


@pytest.mark.parametrize(("call", "error", "text"), [
    (lambda s: s.table("t").drop(None), dp.SchemaError, "^columns: expected column names, got NoneType"),
    (lambda s: s.table("t").drop(3), dp.SchemaError, "^columns: expected column names, got int"),
    (lambda s: s.table("t").drop([["x"]]), dp.SchemaError, "^columns: expected a column name, got list"),
    (lambda s: s.table(["visits"]), dp.SchemaError, "^name: expected a table name, got list"),
    (lambda s: s.table({"t": 1}), dp.SchemaError, "^name: expected a table name, got dict"),
    (lambda s: s.sql("SELECT COUNT(*) AS n FROM t", backend=["duckdb"]), dp.PluginError,
     "^backend: expected a backend name, got list"),
    # an array, an expression or an unhashable value where a name goes: its ambiguous truth or unhashable
    # TypeError once (review 48)
    (lambda s: s.table("t").interior_point("age", bounds=(0, 100), method=pl.col("x")), dp.PlanError, "^method"),
    (lambda s: s.table("t").interior_point("age", bounds=(0, 100), method={"auto"}), dp.PlanError, "^method"),
    (lambda s: s.table("t").group_by("city").top_k(1, method=pl.col("x")), dp.PlanError, "^method"),
    (lambda s: s.table("t").group_by("city").top_k(None, ptr=np.array(["gaussian", "laplace"])), dp.PlanError,
     "^ptr"),
    (lambda s: s.table("t").agg(dp.var("age", bounds=(0, 100), ddof=pl.col("x"))), dp.ArgumentError, "^ddof"),
    (lambda s: s.table("t").agg(dp.std("age", bounds=(0, 100), ddof=True)), dp.ArgumentError, "^ddof"),
    (lambda s: s.table("t").query({"agg"}), dp.PluginError, "unknown query family"),
    (lambda s: s.table("t").group_by("city").query(pl.col("x")), dp.PluginError, "unknown query family"),
])
def test_arguments_of_the_wrong_type_are_dpframe_errors(sess: dp.Session, call: Any, error: type, text: str) -> None:
    """A list where a name goes was a bare TypeError (unhashable), a number in ``drop`` one too ('not iterable')."""
    with pytest.raises(error, match=text):
        call(sess)
    assert sess.history().height == 0
