"""A release whose noise a float cannot hold is refused while planning (free), not released as ±inf / NaN.

Bounds up to 1e300 are accepted; at a tiny budget the noise of a sum over them is beyond 10³⁰⁸, so the
released value came back ±inf with a NaN interval (and numpy's overflow warnings), charged. The spread of the
noise in output units (t·unit, σ·unit) is known from public parameters alone: above 2¹⁰¹⁶ the plan is refused.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import polars as pl
import pytest

import dpframe as dp
from dpframe.mechanism import Noise
from dpframe.mechanism.noise import MAX_SPREAD_LOG2

DATA = pl.DataFrame({"x": [1e299, 5.0, -3.0]})
FAR = (-1e300, 1e300)


def session(budget: dp.Budget) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=budget)


@pytest.mark.parametrize(("total", "tiny", "fits"), [
    (dp.PureDP(10), dp.PureDP(1e-8), dp.PureDP(1e-5)),
    (dp.ZCDP(10), dp.ZCDP(1e-12), dp.ZCDP(1e-8)),
])
@pytest.mark.parametrize("measure", [dp.sum("x", bounds=FAR), dp.mean("x", bounds=FAR)])
def test_noise_beyond_a_float_is_refused_free(total, tiny, fits, measure):
    sess = session(total)
    query = sess.table("t").agg(measure)
    for ask in (lambda: query.collect(tiny), lambda: query.explain(tiny), lambda: query.cost(tiny),
                lambda: sess.sql(f"SELECT {'SUM' if measure.kind == 'sum' else 'AVG'}(CLAMP(x, -1e300, 1e300)) "
                                 "FROM t").collect(tiny)):
        with pytest.raises(dp.BudgetError, match="beyond what a float holds"):
            ask()
    assert sess.history().height == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no overflow warning either
        out = query.collect(fits, ci=0.95)
    assert all(math.isfinite(v) for v in out.row(0)), out


def test_spread_is_computed_without_overflow():
    laplace = Noise("discrete_laplace", Fraction(2**1020), Fraction(1), Fraction(2**10))
    gaussian = Noise("discrete_gaussian", Fraction(2**2040), Fraction(1), Fraction(1, 2**10))
    assert laplace.spread_log2() == 1030.0 and gaussian.spread_log2() == 1010.0
    with pytest.raises(dp.BudgetError, match="beyond what a float holds"):
        Noise.calibrate(Fraction(2**10), dp.PureDP(1), Fraction(2**1010))      # t = 2¹⁰, on a grid of 2¹⁰¹⁰
    assert Noise.calibrate(Fraction(2**10), dp.PureDP(1), Fraction(2**990)).spread_log2() <= MAX_SPREAD_LOG2


def test_a_variance_near_its_bounds_limit_warns_nothing_and_fails_nothing():
    """Bounds near 1e150 (the most var/std accept) at a small budget: the noisy centred mean squared leaves float64.

    numpy warned of the overflow in the analyst's process, and under an ``error`` warnings filter the query failed
    (in the dry run on zeros, or after its charge); the values are post-processing of the noise either way.
    """
    sess = session(dp.PureDP(10))
    query = sess.table("t").agg(dp.var("x", bounds=(0, 1e150)), dp.std("x", bounds=(0, 1e150)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(5):
            query.collect(dp.PureDP(1e-5), ci=0.9)
    assert sess.history()["status"].to_list() == ["committed"] * 5
