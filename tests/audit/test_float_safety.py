"""Float safety: released reals lie on the documented grid, and no output depends on a private value's low bits.

Mironov (CCS 2012) showed that textbook floating-point Laplace noise leaks: the set of doubles
``x + Lap(b)`` can produce depends on the low-order bits of ``x``, so an output can rule a dataset out.
dpframe's defence is that the noise is added to an integer count of grid steps and the release is
``(statistic + noise) · 2^k``. Two checks follow from that design, and both catch a naive float mechanism:

1. every released sum is an exact multiple of the grid step ``2^k`` that ``explain()`` documents (for
   random bounds, budgets, notions and data, including values far outside the bounds);
2. with the same random seed, two datasets that differ only in low-order bits of private values that
   no statistic keeps (below the grid of every fixed-point statistic) give bit-identical releases of
   every measure, on both backends: the output is a function of the integer statistics and the noise,
   and carries no information about those bits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpframe as dp
from dpframe.mechanism import MeasureContext, MechanismPlan, Statistic
from dpframe.noise import RandomSource
from dpframe.testing import pin_mechanisms, session_budget

UNIT = dp.PrivacyUnit("user", max_rows=3)
GRID = re.compile(r"on grid 2\^(-?\d+)")


def _grid_exponent(query: dp.Query, budget: dp.Budget, statistic: str) -> int:
    """The grid exponent ``explain()`` documents for ``statistic`` (0 when it says no grid)."""
    noise = {n["statistic"]: n["noise"] for n in query.explain(budget, format="json")["noise"]}
    found = GRID.search(noise[statistic])
    return int(found.group(1)) if found else 0


def _session(table: pl.DataFrame, seed: int = 0, backend: str = "polars",
             budget: dp.Budget = dp.PureDP(1)) -> dp.Session:
    return dp.Session({"t": table}, privacy_unit=UNIT, budget=session_budget(budget, 10**6), seed=seed,
                      backend=backend)


def _table(values: Sequence[float]) -> pl.DataFrame:
    """Units of 1..3 rows (never more than max_rows: bounding keeps every row, whatever the hash)."""
    users = [i // 2 for i in range(len(values))]
    return pl.DataFrame({"user": users, "x": pl.Series(values, dtype=pl.Float64)})


def _on_grid(values: np.ndarray, exponent: int) -> bool:
    steps = np.asarray(values, dtype=np.float64) / 2.0**exponent     # exact: dividing by a power of two
    return bool(np.all(np.isfinite(steps)) and np.all(steps == np.round(steps)))


# ------------------------------------------------------------------------------------ 1. the grid

FINITE = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
BUDGETS = st.one_of(st.fractions(Fraction(1, 1000), 1000).map(dp.PureDP),
                    st.fractions(Fraction(1, 1000), 1000).map(dp.ZCDP))


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(bounds=st.tuples(FINITE, FINITE).filter(lambda b: b[0] < b[1]), budget=BUDGETS,
       data=st.lists(st.one_of(FINITE, st.sampled_from([math.inf, -math.inf, math.nan, 1e300])),
                     min_size=1, max_size=12),
       seed=st.integers(0, 2**32))
def test_released_sums_lie_on_the_documented_grid(bounds, budget, data, seed) -> None:
    sess = _session(_table(data), seed, budget=budget)
    query = sess.table("t").agg(dp.sum("x", bounds=bounds))
    exponent = _grid_exponent(query, budget, "Σ (clamp(x))")
    released = query.collect(budget)["x_sum"].to_numpy()
    assert _on_grid(released, exponent), (released, exponent)
    # Exactly representable: fewer than 2^53 grid steps.
    assert abs(released[0]) / 2.0**exponent < 2.0**53


def test_counts_and_histograms_are_integers() -> None:
    sess = _session(_table([1.5, 2.5, 70.0, math.nan]))
    hist = dp.measure("histogram", "x", bounds=(0, 100), edges=(0, 50, 100))
    out = sess.table("t").agg(dp.len(), dp.count("x"), hist).collect(dp.PureDP(1))
    for column in out.columns:
        assert out[column].dtype.is_integer(), (column, out.schema)


# ------------------------------------------------------------------- 2. low-order bits (Mironov)

MEASURES = [dp.sum("x", bounds=(-1000, 1000)), dp.mean("x", bounds=(-1000, 1000)),
            dp.var("x", bounds=(-1000, 1000)), dp.std("x", bounds=(-1000, 1000)), dp.count("x")]


def _low_bit_pair(rng: np.random.Generator, n: int, k_linear: int, k_square: int) -> tuple[list[float], list[float]]:
    """Two value lists that differ in every value, only in bits no statistic keeps.

    With centre 0 (symmetric bounds), the statistics are trunc(x / 2^k_linear) and trunc(x² / 2^k_square).
    ``a`` is a multiple of G = 2^max(k_linear, ⌈k_square / 2⌉), so both are exact integers; ``b`` moves
    each value away from 0 by less than one step of either grid, so both truncate to the same integers.
    """
    g = 2.0 ** max(k_linear, -(-k_square // 2))
    a = np.clip(rng.integers(-10**6, 10**6, n) * g, -900, 900)
    a = np.trunc(a / g) * g
    room = np.minimum(2.0**k_linear, 2.0**k_square / (2 * np.abs(a) + 2))
    b = a + np.where(a >= 0, 1.0, -1.0) * rng.uniform(0.01, 0.9, n) * room
    assert not np.array_equal(a, b)
    return a.tolist(), b.tolist()


def _grids(measures: Sequence[dp.Measure], budget: dp.Budget) -> tuple[int, int]:
    """(linear, squared) grid exponents that explain() documents for ``measures``."""
    sess = _session(_table([0.0]), budget=budget)
    noise = {n["statistic"]: n["noise"] for n in sess.table("t").agg(*measures).explain(budget, format="json")["noise"]}
    exponent = {k: int(GRID.search(v).group(1)) for k, v in noise.items() if GRID.search(v)}
    return exponent["Σ (clamp(x))"], exponent["Σ (clamp(x))²"]


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("budget", [dp.PureDP(1), dp.PureDP(Fraction(1, 50)), dp.ZCDP(Fraction(1, 2))], ids=repr)
def test_outputs_do_not_depend_on_bits_below_the_grid(backend: str, budget: dp.Budget) -> None:
    a, b = _low_bit_pair(np.random.default_rng(0), 40, *_grids(MEASURES, budget))
    for seed in range(3):
        out_a = _session(_table(a), seed, backend, budget).table("t").agg(*MEASURES).collect(budget)
        out_b = _session(_table(b), seed, backend, budget).table("t").agg(*MEASURES).collect(budget)
        assert out_a.equals(out_b), f"the release depends on bits no statistic keeps:\n{out_a}\n{out_b}"


# A naive float mechanism (the kind Mironov attacked): exact float sum + float Laplace noise.


class NaiveFloatPlan(MechanismPlan):
    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        exact = np.asarray(stats[self.statistics[0].key], dtype=np.float64) * 2.0**-40
        gen = np.random.default_rng(int(rng.random_uint64(1)[0]))
        return {"x_sum": exact + gen.laplace(0.0, 2000.0, exact.size)}


class NaiveFloatSum:
    name = "naive-float-sum"
    handles = frozenset({"sum"})
    notions = frozenset({"pure"})

    def validate(self, measure: dp.Measure, ctx: MeasureContext) -> None: ...

    def parts(self, measures: Sequence[dp.Measure], ctx: MeasureContext) -> int:
        return 1

    def plan(self, measures: Sequence[dp.Measure], ctx: MeasureContext, share: dp.Budget) -> MechanismPlan:
        lo, hi = measures[0].bounds
        stat = Statistic("fixed_sum", measures[0].column, lo, hi, grid_exp=-40)   # ~ the float sum itself
        return NaiveFloatPlan(self.name, tuple(measures), (stat,), share)


def _naive(values: list[float], seed: int) -> Any:
    sess = pin_mechanisms(_session(_table(values), seed), NaiveFloatSum())
    return sess.table("t").agg(dp.sum("x", bounds=(-1000, 1000))).collect(dp.PureDP(1))["x_sum"].to_numpy()


def test_both_checks_catch_naive_float_noise() -> None:
    a, b = _low_bit_pair(np.random.default_rng(1), 40, -12, -12)
    out_a, out_b = _naive(a, 0), _naive(b, 0)
    assert not np.array_equal(out_a, out_b), "low-order bits of the private values change the naive output"
    assert not _on_grid(out_a, -12)
