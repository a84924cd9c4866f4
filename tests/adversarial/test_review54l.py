"""Review 54 (lead): leftovers of the stop's helper reports, each written as a test first."""

from __future__ import annotations

from fractions import Fraction

import pytest

from dpframe.errors import PluginError
from dpframe.mechanism.noise import Noise


@pytest.mark.parametrize("bad", [1.0, 0, -1, Fraction(-1, 2), True, "1"])
def test_noise_refuses_a_coordinate_sensitivity_that_is_not_a_positive_exact_number(bad: object) -> None:
    """Found by review 54a: ``Noise`` took any ``coordinate_sensitivity``. A float failed later, inside the plan's cost
    check, with an AttributeError; 0, negatives and True were accepted silently. Each is now a PluginError naming the
    argument when the noise is made."""
    with pytest.raises(PluginError, match="coordinate_sensitivity") as caught:
        Noise("discrete_laplace", Fraction(4), Fraction(4), coordinate_sensitivity=bad)  # type: ignore[arg-type]
    assert caught.value.argument == "coordinate_sensitivity"


def test_noise_keeps_a_whole_number_coordinate_sensitivity_as_a_fraction() -> None:
    noise = Noise("discrete_laplace", Fraction(4), Fraction(4), coordinate_sensitivity=1)  # type: ignore[arg-type]
    assert noise.coordinate_sensitivity == Fraction(1) and isinstance(noise.coordinate_sensitivity, Fraction)
    assert Noise("discrete_laplace", Fraction(4), Fraction(4)).coordinate_sensitivity is None


@pytest.mark.parametrize("terms", [64, 100, 250, 400, 2000])
@pytest.mark.parametrize("step", ["filter", "with_columns"])
def test_a_deeply_nested_expression_is_refused_as_too_deep_whatever_its_depth(terms: int, step: str) -> None:
    """Found by review 54i (and on main before it): a chain of ``|`` comparisons in a method chain was refused with a
    SchemaError blaming the column types (70-100 terms: Polars' JSON reader stops at 128 levels), or escaped as a raw
    RecursionError (250, 400: the growth walk) or a raw Polars ComputeError (2000: 'depth limit exceeded'), free in
    each case but not a dpframe error saying what is wrong. Each depth is now a PlanError saying the expression is
    nested too deep, naming the argument, with the fix."""
    from functools import reduce

    import polars as pl

    import dpframe as dp
    from dpframe.errors import PlanError

    sess = dp.Session({"t": pl.DataFrame({"x": list(range(10))})}, budget=dp.PureDP(1),
                      privacy_unit=dp.PrivacyUnit.row())
    deep = reduce(lambda a, b: a | b, [pl.col("x") == i for i in range(terms)])
    frame = sess.table("t")
    with pytest.raises(PlanError, match="nested too deep") as caught:
        if step == "filter":
            frame.filter(deep).agg(dp.len()).cost(dp.PureDP(0.1))
        else:
            frame.with_columns(y=deep).agg(dp.len()).cost(dp.PureDP(0.1))
    assert caught.value.argument == ("predicate" if step == "filter" else "y")
    assert "with_columns" in (caught.value.fix or "")
    assert sess.history().height == 0


def test_sixty_three_terms_still_build() -> None:
    from functools import reduce

    import polars as pl

    import dpframe as dp

    sess = dp.Session({"t": pl.DataFrame({"x": list(range(10))})}, budget=dp.PureDP(1),
                      privacy_unit=dp.PrivacyUnit.row())
    ok = reduce(lambda a, b: a | b, [pl.col("x") == i for i in range(63)])
    assert sess.table("t").filter(ok).agg(dp.len()).cost(dp.PureDP(0.1)) == dp.PureDP(0.1)
