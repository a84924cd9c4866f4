"""Review 38a: the code stop 37 added or changed that no review had attacked.

Scope: a grid's adjacent ``indicator_sum`` bins counted in one pass (``dpframe/backends/bins.py``: Polars'
search over the edges, DuckDB's ASOF join; used by ``frame.bounds()``, ``bounds="auto"`` and histograms of
ungrouped queries) against the one-by-one aggregates and across backends, on adversarial values and dtypes,
derived columns, filters, user-level units and files; the rank windows' ``WHOLE_BELOW`` switch
(``dpframe/backends/polars_windows.py``: whole lists below 4,096 bounded rows) and the quantile EM's task
layout (``plugins/dpframe_quantiles/em.py``: ``TASKS``, ``WORKERS``); and the totality probe's bisection for
a refusal's message (``dpframe.plan.totality._first_failing_row``). Each attack that broke is kept with its
fix (it fails if the defence regresses); the checks found sound are kept as tests where a regression would
show.
"""

from __future__ import annotations

import math
from fractions import Fraction as F

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.bins import adjacent_bins
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.mechanism import Statistic

# ------------------------------------------------------------------ 1. a grid's bins counted in one pass

_EDGES = [F(k) for k in range(-3, 4)]


def _grid(column: str = "x", edges: list[F] = _EDGES) -> tuple[Statistic, ...]:
    return tuple(Statistic("indicator_sum", column, lo, hi) for lo, hi in zip(edges, edges[1:]))


def _counted(backend: type[PolarsBackend | DuckDBBackend], frame: pl.DataFrame, stats: tuple[Statistic, ...],
             least: int) -> dict[str, int]:
    """``stats`` over ``frame`` (ungrouped, rows as units), bins in one pass from ``least`` adjacent bins on."""
    engine = backend()
    engine.register("t", frame.lazy())
    module = "polars" if backend is PolarsBackend else "duckdb"
    with pytest.MonkeyPatch.context() as m:
        m.setattr(f"dpframe.backends.{module}.adjacent_bins", lambda s: adjacent_bins(s, least=least))
        out = engine.statistics(StatisticsRequest("t", (), dp.PrivacyUnit.row(), (), None, stats, 1))
    return out.row(0, named=True)


@pytest.mark.parametrize("values", [[], [None], [math.nan, None], [-math.inf], [-5.0]],
                         ids=["empty", "null", "nan", "-inf", "below"])
@pytest.mark.parametrize("backend", [PolarsBackend, DuckDBBackend], ids=["polars", "duckdb"])
def test_no_value_in_the_grid_counts_zero_in_one_pass(backend: type[PolarsBackend | DuckDBBackend],
                                                      values: list[float | None]) -> None:
    """Attack: on DuckDB, a grid that no row reaches (no row, or only null, NaN or values below its first edge)
    made the ASOF join's list NULL, and reading it raised an AttributeError after the charge — so
    ``filter(pl.col("u") == id).bounds("x")`` failed exactly when the unit ``id`` was absent (test below)."""
    frame = pl.DataFrame({"x": pl.Series(values, dtype=pl.Float64)})
    stats = (*_grid(), Statistic("rows"))
    assert _counted(backend, frame, stats, 2) == _counted(backend, frame, stats, 10**9) == \
        {**{s.key: 0 for s in _grid()}, "__rows": len(values)}


def test_a_grid_no_row_reaches_is_released_not_failed_on_duckdb() -> None:
    """Attack, end to end: one unit's presence decided whether the query failed (charged) or released."""
    statuses = []
    for present in (False, True):
        rows = pl.DataFrame({"u": [*range(20), *([10_000] if present else [])],
                             "x": [float(i) for i in range(20)] + ([3.0] if present else [])})
        sess = dp.Session({"t": rows}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(1),
                          backend="duckdb", seed=3)
        frame = sess.table("t").filter(pl.col("u") == 10_000)
        for query in (frame.bounds("x", domain=(-1e9, 1e9)),
                      frame.agg(dp.measure("histogram", "x", bounds=(0, 100), edges=list(range(0, 101, 5))))):
            query.collect(dp.PureDP(F(1, 10)))
        statuses.append(sess.history()["status"].to_list())
    assert statuses == [["committed"] * 2] * 2
