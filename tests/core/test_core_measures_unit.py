"""Measures (dpframe/measures.py) and the privacy unit (dpframe/privacy_unit.py)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import dpframe as dp
from dpframe.measures import check_bounds


class _Opaque:
    """An object that is no number and no string (with a stable repr for test ids)."""

    def __repr__(self) -> str:
        return "<opaque>"

# ------------------------------------------------------------------------------------------ measures


@pytest.mark.parametrize("m, name, kind, column", [
    (dp.len(), "len", "len", None),
    (dp.count("age"), "age_count", "count", "age"),
    (dp.sum("spend", bounds=(0, 500)), "spend_sum", "sum", "spend"),
    (dp.mean("spend", bounds=(0, 500)), "spend_mean", "mean", "spend"),
    (dp.var("spend", bounds=(0, 500)), "spend_var", "var", "spend"),
    (dp.std("spend", bounds=(0, 500)), "spend_std", "std", "spend"),
    (dp.measure("histogram", "age", bounds=(0, 120)), "age_histogram", "histogram", "age"),
    (dp.measure("custom"), "custom", "custom", None),
])
def test_output_names_kinds_columns(m: dp.Measure, name: str, kind: str, column: str | None) -> None:
    assert (m.output_name, m.kind, m.column) == (name, kind, column)


def test_bounds_are_exact_fractions() -> None:
    m = dp.mean("x", bounds=(0.1, 2))
    # Bounds keep the float's exact binary value (unlike budgets, which read 0.1 as 1/10): the backend
    # clamps with exactly this float.
    assert m.bounds == (Fraction(0.1), Fraction(2))
    assert all(isinstance(b, Fraction) for b in m.bounds)
    assert dp.sum("x", bounds=[Fraction(1, 3), 1]).bounds == (Fraction(1, 3), Fraction(1))


def test_alias_renames_without_changing_the_measure() -> None:
    m = dp.mean("spend", bounds=(0, 500))
    a = m.alias("avg")
    assert a.output_name == "avg"
    assert (a.kind, a.column, a.bounds) == (m.kind, m.column, m.bounds)
    assert m.output_name == "spend_mean"               # the original is unchanged (frozen)
    assert dp.len().alias("n").alias("m").output_name == "m"
    for bad in ("", None, 3):
        with pytest.raises(dp.DPFrameError) as info:
            m.alias(bad)  # type: ignore[arg-type]
        assert info.value.argument == "name"


def test_option_and_describe() -> None:
    v = dp.var("x", bounds=(0, 10), ddof=0)
    assert v.option("ddof") == 0
    assert dp.var("x", bounds=(0, 10)).option("ddof") == 1
    assert v.option("missing") is None and v.option("missing", 7) == 7
    assert dp.std("x", bounds=(0, 10)).option("ddof") == 1 and dp.std("x", bounds=(0, 10)).kind == "std"
    assert dp.mean("spend", bounds=(0, 500)).describe() == "mean(spend, bounds=[0, 500])"
    assert dp.sum("x", bounds=(-0.5, 1.5)).describe() == "sum(x, bounds=[-0.5, 1.5])"
    assert dp.len().describe() == "len()"
    assert dp.var("x", bounds=(0, 10)).describe() == "var(x, bounds=[0, 10], ddof=1)"
    m = dp.measure("histogram", "age", bounds=(0, 120), edges=(0, 18, 65, 120), b=1)
    assert m.describe() == "histogram(age, bounds=[0, 120], b=1, edges=(0, 18, 65, 120))"  # options sorted
    assert m.option("edges") == (0, 18, 65, 120)
    assert hash(m) == hash(dp.measure("histogram", "age", bounds=(0, 120), b=1, edges=(0, 18, 65, 120)))


@pytest.mark.parametrize("ddof", [2, -1, 0.5, "1", None])
def test_var_ddof_must_be_0_or_1(ddof: object) -> None:
    for build in (dp.var, dp.std):
        with pytest.raises(dp.DPFrameError) as info:
            build("x", bounds=(0, 1), ddof=ddof)  # type: ignore[arg-type]
        assert info.value.argument == "ddof"


BAD_BOUNDS = [
    (5, 1), (1, 1), (0.0, 0.0), (float("nan"), 1), (0, float("nan")), (0, float("inf")), (float("-inf"), 0),
    None, (1,), (0, 1, 2), [], ("0", "1"), ("a", 1), (True, 2), (0, None), 5, "0,1", {0: 1}, np.array([0, 1]),
]


@pytest.mark.parametrize("bounds", BAD_BOUNDS, ids=repr)
@pytest.mark.parametrize("build", [dp.sum, dp.mean, dp.var, dp.std])
def test_bad_bounds_raise_bounds_error(build, bounds: object) -> None:
    with pytest.raises(dp.BoundsError) as info:
        build("x", bounds=bounds)
    assert info.value.argument == "bounds"
    assert "lower" in info.value.fix  # the fix explains what bounds must look like


def test_bounds_are_required_and_keyword_named_in_measure() -> None:
    with pytest.raises(TypeError):
        dp.sum("x")  # type: ignore[call-arg]
    with pytest.raises(dp.BoundsError):
        dp.measure("sum", "x", bounds=(1, 0))
    assert check_bounds([0, 1], "b") == (Fraction(0), Fraction(1))
    with pytest.raises(dp.BoundsError) as info:
        check_bounds((2, 1), "my_bounds")
    assert info.value.argument == "my_bounds"


def test_numpy_scalar_bounds_are_accepted() -> None:
    assert dp.sum("x", bounds=(np.int64(0), np.float32(1.5))).bounds == (Fraction(0), Fraction(3, 2))


@pytest.mark.parametrize("column", ["", None, 3, _Opaque()], ids=repr)
def test_bad_column_names_are_refused(column: object) -> None:
    for build in (lambda c: dp.count(c), lambda c: dp.sum(c, bounds=(0, 1)), lambda c: dp.mean(c, bounds=(0, 1)),
                  lambda c: dp.var(c, bounds=(0, 1))):
        with pytest.raises(dp.DPFrameError) as info:
            build(column)
        assert info.value.argument == "column"


def test_bad_measure_kind() -> None:
    for kind in ("", None, 3):
        with pytest.raises(dp.DPFrameError) as info:
            dp.measure(kind)  # type: ignore[arg-type]
        assert info.value.argument == "kind"


# -------------------------------------------------------------------------------------- privacy unit


def test_privacy_unit_fields_repr_describe() -> None:
    u = dp.PrivacyUnit("user", max_rows=10)
    assert (u.column, u.max_rows, u.max_groups, u.is_row) == ("user", 10, None, False)
    assert repr(u) == "PrivacyUnit('user', max_rows=10)"
    assert "≤ 10 rows" in u.describe() and "'user'" in u.describe()
    g = dp.PrivacyUnit("user", max_rows=10, max_groups=3)
    assert repr(g) == "PrivacyUnit('user', max_rows=10, max_groups=3)"
    assert "≤ 3 groups" in g.describe()
    assert dp.PrivacyUnit("user").max_rows == 1


def test_row_unit() -> None:
    r = dp.PrivacyUnit.row()
    assert (r.column, r.max_rows, r.is_row, r.groups_per_unit) == (None, 1, True, 1)
    assert repr(r) == "PrivacyUnit.row()"
    assert r.describe() == "one row per unit"
    assert r == dp.PrivacyUnit(None)
    with pytest.raises(dp.DPFrameError) as info:
        dp.PrivacyUnit(None, max_rows=2)
    assert info.value.argument == "max_rows"


@pytest.mark.parametrize("max_rows, max_groups, l0", [
    (1, None, 1), (10, None, 10), (10, 3, 3), (3, 10, 3), (5, 5, 5),
])
def test_groups_per_unit_is_min_of_groups_and_rows(max_rows: int, max_groups: int | None, l0: int) -> None:
    assert dp.PrivacyUnit("u", max_rows=max_rows, max_groups=max_groups).groups_per_unit == l0


@pytest.mark.parametrize("bad", [0, -1, 1.0, 2.5, "3", True, False, np.float64(2)], ids=repr)
def test_max_rows_must_be_a_whole_number_at_least_one(bad: object) -> None:
    with pytest.raises(dp.DPFrameError) as info:
        dp.PrivacyUnit("u", max_rows=bad)  # type: ignore[arg-type]
    assert info.value.argument == "max_rows"


def test_max_rows_none_is_the_default_and_explain_says_so() -> None:
    unit = dp.PrivacyUnit("u", max_rows=None)
    assert unit == dp.PrivacyUnit("u", max_rows=1) and not unit.max_rows_given and unit.default_note


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True], ids=repr)
def test_max_groups_must_be_a_whole_number_at_least_one(bad: object) -> None:
    with pytest.raises(dp.DPFrameError) as info:
        dp.PrivacyUnit("u", max_rows=3, max_groups=bad)  # type: ignore[arg-type]
    assert info.value.argument == "max_groups"


@pytest.mark.parametrize("bad", ["", 3, ["u"], b"u"], ids=repr)
def test_unit_column_must_be_a_non_empty_string(bad: object) -> None:
    with pytest.raises(dp.DPFrameError) as info:
        dp.PrivacyUnit(bad)  # type: ignore[arg-type]
    assert info.value.argument == "column"


def test_privacy_unit_is_frozen() -> None:
    u = dp.PrivacyUnit("u", max_rows=2)
    with pytest.raises(AttributeError):
        u.max_rows = 100  # type: ignore[misc]
