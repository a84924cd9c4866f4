"""Hypothesis strategies for the entry points beyond ``agg``: top-k, learning, bounds, sampling, the
interactive streams, the PTR helpers, budgets and the standalone accountants.

Every strategy draws *thunks* (building the object may itself raise a dpframe error, which the test
must accept) from adversarial values: the numbers of :data:`~tests.fuzz.strategies.NUMBERS` (NaN, ±inf,
huge, tiny, 0, negative, wrong types), unknown / non-string / unit columns, malformed bounds and keys.

A bug the search finds gets a minimal regression test in ``test_known_bugs.py`` (marked
``xfail(strict=True)`` with its finding id until the fix lands) and, meanwhile, an ``assume`` that keeps
the input out of the random search so the general tests keep finding new bugs.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import polars as pl
from hypothesis import strategies as st

import dpframe as dp

from .strategies import BOUNDS, KEYS, NUMBERS, budgets


def mostly(valid: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` about 3 times in 4, else ``bad``: most examples get past validation to the mechanism."""
    return st.one_of(valid, valid, valid, bad)


#: Columns a query may name: real ones (of :func:`tables`), the unit column, unknown ones, wrong types.
BAD_COLUMNS = st.sampled_from(["user", "nope", "", 3, None, ["x"], ("x",), pl.col("x"), b"x"])
COLUMNS = st.one_of(st.sampled_from(["x", "g", "y", "z", "f"]), BAD_COLUMNS)


def tables(rows: int = 40) -> st.SearchStrategy[pl.DataFrame]:
    """A well-formed table (unit ``user``, ints ``x``, labels ``y``, ints ``z``, keys ``g``, floats ``f``)."""
    @st.composite
    def build(draw: st.DrawFn) -> pl.DataFrame:
        n = draw(st.integers(1, rows))
        ints = st.integers(-5, 20)
        return pl.DataFrame({
            "user": draw(st.lists(st.integers(0, n), min_size=n, max_size=n)),
            "x": draw(st.lists(ints, min_size=n, max_size=n)),
            "y": draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n)),
            "z": draw(st.lists(ints, min_size=n, max_size=n)),
            "g": draw(st.lists(st.sampled_from(["a", "b", "c", "ä"]), min_size=n, max_size=n)),
            "f": draw(st.lists(st.one_of(st.floats(-100, 100), st.sampled_from([math.nan, math.inf])), min_size=n,
                               max_size=n)),
        })
    return build()


SCORES = st.one_of(st.none(), st.sampled_from(["count_units", "len", "count_x", "sum_x", "sum_signed", "sum_f",
                                               "mean_x", "raw"]))


def score_of(name: str | None) -> Any:
    """A top-k ``score`` argument from a drawn name (built lazily: the constructor may refuse)."""
    return {None: lambda: None, "count_units": dp.count_units, "len": dp.len, "count_x": lambda: dp.count("x"),
            "sum_x": lambda: dp.sum("x", bounds=(0, 20)), "sum_signed": lambda: dp.sum("x", bounds=(-5, 5)),
            "sum_f": lambda: dp.sum("f", bounds=(0, 1e6)), "mean_x": lambda: dp.mean("x", bounds=(0, 5)),
            "raw": lambda: "x"}[name]()


TOP_K = st.fixed_dictionaries({
    "by": mostly(st.just("g"), st.one_of(st.sampled_from(["x", "y", "nope", "user"]), COLUMNS)),
    "keys": mostly(st.sampled_from([None, ["a", "b", "c"], ["a", "b", "c", "ä", "zz"]]),
                   st.one_of(st.lists(KEYS, max_size=4), st.sampled_from([[1, 2], "a", [], ["a", "a"]]))),
    "k": mostly(st.one_of(st.integers(1, 4), st.none()),
                st.one_of(st.integers(-1, 12), st.sampled_from([0, 2**63, 10**400, 1.0, "2", True]), NUMBERS)),
    "score": mostly(st.sampled_from([None, "count_units", "len", "count_x", "sum_x"]), SCORES),
    "method": mostly(st.sampled_from(["stable", "gumbel", "peeling", "limited_domain", "tct"]),
                     st.one_of(st.text(max_size=4), st.none())),
    "release_scores": mostly(st.booleans(), st.sampled_from([None, 1, "yes"])),
    "k_max": mostly(st.one_of(st.none(), st.integers(1, 8)), st.one_of(st.integers(-1, 0), NUMBERS)),
    "lam": mostly(st.sampled_from([None, 0, 0.5, 2]), st.one_of(st.sampled_from([-1, math.nan, math.inf, "1"]),
                                                                 NUMBERS)),
    "ptr": mostly(st.sampled_from(["gaussian", "laplace"]), st.one_of(st.text(max_size=3), st.none())),
    "delta_t": mostly(st.sampled_from([None, None, 1e-9, 1e-12]),
                      st.one_of(st.sampled_from([0.5, 0, 1, -1, math.nan]), NUMBERS)),
})

INTERIOR = st.fixed_dictionaries({
    "column": mostly(st.sampled_from(["x", "z", "f"]), COLUMNS),
    "bounds": mostly(st.sampled_from([(0, 20), (-5, 20), (0, 10**6), (-100.0, 100.0)]), BOUNDS),
    "method": mostly(st.sampled_from(["auto", "exponential", "binary_search", "treelog"]),
                     st.one_of(st.text(max_size=3), NUMBERS)),
    "beta": mostly(st.sampled_from([1e-6, 0.5, 0.1]), NUMBERS),
    "resolution": mostly(st.sampled_from([None, None, 1, 0.5]), st.one_of(
        st.sampled_from([0, -1, math.nan, 1e-300, 10**9]), NUMBERS)),
})

THRESHOLD = st.fixed_dictionaries({
    "feature": mostly(st.sampled_from(["x", "z"]), COLUMNS), "label": mostly(st.just("y"), COLUMNS),
    "bounds": mostly(st.sampled_from([(0, 20), (-5, 20)]), BOUNDS),
    "positive": mostly(st.sampled_from(["auto", "below", "above"]), st.one_of(st.text(max_size=3), NUMBERS)),
    "beta": mostly(st.sampled_from([1e-6, 0.5]), NUMBERS), "xi": mostly(st.sampled_from([0.05, 0.5]), NUMBERS),
    "resolution": mostly(st.sampled_from([None, 1]), NUMBERS),
})

RECTANGLE = st.fixed_dictionaries({
    "features": mostly(st.sampled_from([["x", "z"], ["x"], ("z",)]), st.one_of(st.lists(COLUMNS, max_size=3),
                                                                                   COLUMNS)),
    "label": mostly(st.just("y"), COLUMNS),
    "bounds": mostly(st.just({"x": (0, 20), "z": (-5, 20)}), st.one_of(st.dictionaries(
        st.sampled_from(["x", "z", "y", "nope"]), BOUNDS, max_size=3), BOUNDS)),
    "beta": mostly(st.just(0.5), NUMBERS),
    "resolution": mostly(st.sampled_from([None, {"x": 1}]), st.one_of(NUMBERS, st.just({"nope": 1}))),
})

BOUNDS_QUERY = st.fixed_dictionaries({
    "column": mostly(st.sampled_from(["x", "z", "f"]), COLUMNS),
    "domain": mostly(st.sampled_from([None, (0, 20), (-100, 100), (-1e6, 1e6)]), BOUNDS),
    "quantiles": mostly(st.sampled_from([(0.1, 0.9), (0.05, 0.95), [0.5, 0.5]]),
                        st.one_of(st.lists(NUMBERS, max_size=3), NUMBERS, st.just((0.9, 0.1)))),
    "resolution": mostly(st.sampled_from([None, 1]), NUMBERS),
})

QUANTILE = st.fixed_dictionaries({
    "column": mostly(st.sampled_from(["x", "f"]), COLUMNS),
    "q": mostly(st.sampled_from([0.5, [0.1, 0.9], [0.9, 0.1], (0.5,), [0, 1]]),
                st.one_of(NUMBERS, st.lists(NUMBERS, max_size=3), st.just([]))),
    "bounds": mostly(st.sampled_from([(0, 20), (-100, 100)]), BOUNDS),
    "resolution": mostly(st.sampled_from([None, 1]), NUMBERS),
})

RATES = mostly(st.sampled_from([0.5, 1, 0.01, 0.9]),
               st.one_of(st.sampled_from([1e-300, 0, 1.5, -0.5, math.nan, "0.5", None]), NUMBERS))

SESSION_BUDGETS = st.sampled_from([
    lambda: dp.PureDP(1000), lambda: dp.ApproxDP(1000, Fraction(1, 10)), lambda: dp.ZCDP(1000),
    lambda: dp.ZCDP(1000, Fraction(1, 10))])
ACCOUNTANTS = mostly(st.none(), st.sampled_from(["basic", "zcdp", "rdp", "pld", "nope"]))
QUERY_BUDGETS = budgets()
SANE_BUDGETS = budgets(sane=True)
