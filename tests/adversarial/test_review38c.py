"""Review 38c: every query ending on an input that holds no row, against one that holds one unit's rows.

Scope: review 38a found ``t.filter(pl.col("u") == id).bounds("x")`` charged, then failed, on DuckDB exactly when
no row had ``u == id``; the D/D′ oracles' random filters rarely leave the added unit alone. The sweep
``tests/adversarial/test_empty_inputs.py`` runs every query ending — ``agg`` with every measure (on every
numeric and temporal dtype), grouped by public and private keys, with ``ci=``, ``diagnostics=True``,
``accuracy=``, ``bounds="auto"``, ``max_rows``/``max_groups="auto"``; ``frame.bounds``, histograms, the interior
point (every method), threshold and rectangle learning, linear regression, the robust median, top-k (every
method, ``k=None``, released scores, public keys); SQL (measures, post-processing, CTEs, public and private
``GROUP BY``, ``TOP_K``, ``ci=``/``diagnostics=``/``accuracy=``); sparse vectors (Laplace and Gaussian), target
charging (tests, conditional releases, ``between``, boundary tests, selection), the individual filter, gated
release, propose-test-release and ``run_until`` — after ``filter(pl.col("u") == TARGET)`` on tables where that
unit is absent, has one ordinary row, only null/NaN/±inf/out-of-bounds values, or 300 rows, under user-level,
row-level and automatic units, on Polars and DuckDB, in memory and in Parquet files (read by Polars, or scanned
by DuckDB itself), and Spark under ``-m slow``. It compares the error (type, message, argument), the warnings,
the ledger rows (status, cost, text) and the result's type, columns and dtypes.

Findings: on Polars and DuckDB the sweep found no ending whose outcome depends on the case (a ``TOP_K`` that
releases no key set warns: a ⊥, which the sweep treats as such). On Spark, the robust median of an integer column (a
grid finer than one) read its step 2^-k as the DECIMAL literal 0 and failed after its charge on the first row it
coded: ``robust_median(t.filter(pl.col("u") == id), "i", ...)`` failed exactly when unit ``id`` had a row, a
membership oracle; Polars coded negative values on such a grid wrongly (latent). The brief's side items: an
analyst's number beyond float64 (``10**400``) reached ``float()`` unguarded and raised a raw ``OverflowError``
(nothing charged, but no dpframe error naming the argument and the fix) from histogram edges (``parse_edges``), the
clipping bounds of every measure (``sum``/``mean``/``var``/``std``/quantiles, SQL ``CLAMP``, a top-k score), a query
family's bounds and domain (``frame.bounds``, the learners, ``linear_regression`` and its ``ridge``), public keys,
and ``dp.Accuracy(half_width=...)``. Documented, not changed (noticed by review 38a): a 128-bit integer beyond 38
digits is NULL on DuckDB (handed over as ``DECIMAL(38, 0)``) and counted on Polars (``docs/scaling.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.mechanism import Statistic

HUGE = 10**400


def _session() -> dp.Session:
    data = pl.DataFrame({"u": range(40), "x": [float(i % 7) for i in range(40)], "y": [i % 2 for i in range(40)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.ApproxDP(10, 1e-3))


#: (argument the refusal names, the query an analyst builds and releases with a number beyond float64).
BEYOND_FLOAT64: dict[str, tuple[str, Callable[[dp.Session], Any]]] = {
    "histogram edge": ("edges", lambda s: s.table("t").agg(
        dp.measure("histogram", "x", bounds=(0, 10), edges=[0, HUGE]))),
    "histogram bounds and edges": ("bounds", lambda s: s.table("t").agg(
        dp.measure("histogram", "x", bounds=(-HUGE, HUGE), edges=[-HUGE, 0, HUGE]))),
    "sum bounds": ("bounds", lambda s: s.table("t").agg(dp.sum("x", bounds=(0, HUGE))).collect(dp.PureDP(1))),
    "mean bounds": ("bounds", lambda s: s.table("t").agg(dp.mean("x", bounds=(-HUGE, 0))).collect(dp.PureDP(1))),
    "var bounds": ("bounds", lambda s: s.table("t").agg(dp.var("x", bounds=(0, HUGE))).collect(dp.PureDP(1))),
    "a Fraction's description": ("bounds", lambda s: dp.sum("x", bounds=(0, Fraction(HUGE, 3))).describe()),
    "top-k score": ("bounds", lambda s: s.table("t").group_by("y", keys=[0, 1]).top_k(
        k=1, score=dp.sum("x", bounds=(0, HUGE)), method="gumbel").collect(dp.PureDP(1))),
    "SQL CLAMP": ("bounds", lambda s: s.sql(f"SELECT SUM(CLAMP(x, 0, {HUGE})) AS s FROM t").collect(dp.PureDP(1))),
    "frame.bounds domain": ("bounds['x']", lambda s: s.table("t").bounds("x", domain=(0, HUGE)).collect(
        dp.PureDP(1))),
    "regression bounds": ("bounds['x']", lambda s: s.table("t").linear_regression(
        ["x"], "y", bounds={"x": (0, HUGE), "y": (0, 1)}).collect(dp.PureDP(1))),
    "regression ridge": ("ridge", lambda s: s.table("t").linear_regression(
        ["x"], "y", bounds={"x": (0, 10), "y": (0, 1)}, ridge=HUGE).collect(dp.PureDP(1))),
    "public keys": ("keys", lambda s: s.table("t").group_by("y", keys=[0, HUGE]).agg(dp.len())),
    "accuracy": ("half_width", lambda s: s.table("t").agg(dp.len()).collect(
        accuracy=dp.Accuracy(half_width=HUGE))),
}


@pytest.mark.parametrize("case", sorted(BEYOND_FLOAT64))
def test_a_number_beyond_float64_is_refused_naming_its_argument(case: str) -> None:
    """Attack (the brief's item, and its kin found probing every numeric argument with ``10**400``): an integer
    beyond float64 reached ``float()`` (``float(a) < float(b)`` in ``parse_edges``, ``math.isfinite``, a
    message's ``{float(b):g}``, Polars' conversion of keys) and raised a raw ``OverflowError`` when the query was
    built or before its charge. Now a dpframe error naming the argument and the fix, nothing charged (a bound or
    edge beyond float64 is refused by :func:`dpframe.measures.within_float64`: the backends clip and compare in
    float64)."""
    argument, build = BEYOND_FLOAT64[case]
    sess = _session()
    with pytest.raises(dp.DPFrameError) as refused:
        build(sess)
    assert str(refused.value).startswith(f"{argument}: ") and "Fix:" in str(refused.value)
    assert sess.history().height == 0


def test_the_largest_float64_is_still_a_bound_and_an_edge() -> None:
    """The refusal starts past float64's largest finite value: it, and edges up to it, are accepted as before."""
    top = 1.7976931348623157e308
    dp.measure("histogram", "x", bounds=(-top, top), edges=[-top, 0, top])
    assert dp.sum("x", bounds=(0, int(top))).bounds == (0, Fraction(top))
    with pytest.raises(dp.BoundsError, match=r"bound 1797693134862315807\.\.\. \(309 digits\) is beyond"):
        dp.sum("x", bounds=(0, int(top) + 2**970))       # float() rounds it to inf: beyond
    sess = _session()           # a grid's width check names the bounds as floats, not 309-digit Fractions
    with pytest.raises(dp.BoundsError, match=r"bounds \(0, 1\.79769e\+308\) of 'x' are too far apart"):
        sess.table("t").agg(dp.median("x", bounds=(0, int(top))))


def test_int128_beyond_38_digits_is_null_on_duckdb_only_as_documented() -> None:
    """Noticed by review 38a, documented (``docs/scaling.md``, "Same answers"): DuckDB is handed a 128-bit integer as
    ``DECIMAL(38, 0)``, so a value beyond 38 digits is NULL there and counted on Polars. The same on every dataset
    of one backend (read from the type); if the handover changes, the documentation must."""
    data = pl.DataFrame({"u": range(20), "v": pl.Series([10**38 + 5] * 10 + [7] * 10, dtype=pl.Int128)})
    counts = {}
    for backend in ("polars", "duckdb"):
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(200), backend=backend,
                          seed=1)
        counts[backend] = sess.table("t").agg(dp.count("v")).collect(dp.PureDP(200)).item()
    assert counts == {"polars": 20, "duckdb": 10}


# ------------------------------------------------------------------ an integer column on a grid finer than one

_FINE = Statistic("sorted", "i", Fraction(-100), Fraction(100), grid_exp=-3)
_INTS = pl.DataFrame({"i": pl.Series([-1, 2, -100, 100, 0, None, -7], dtype=pl.Int64)})


def _codes(backend: Any) -> list[int]:
    backend.register("t", _INTS.lazy())
    out = backend.statistics(StatisticsRequest("t", (), dp.PrivacyUnit.row(), (), None, (_FINE,), 1))
    return list(out.row(0)[0])


@pytest.mark.parametrize("backend", [PolarsBackend, DuckDBBackend], ids=["polars", "duckdb"])
def test_an_integer_on_a_grid_finer_than_one_is_coded_exactly(backend: type) -> None:
    """Found with the Spark finding below: an integer column's ``sorted`` codes on a grid 2^-k (k > 0, as the
    robust median's) are the value times 2^k. Polars divided by the step, 2^-k, and below zero added ``step − 1``
    (the truncation for steps ≥ 1): −1 was coded −15, not −8, and the lower bound −100 as −807, below the grid.
    Latent: the public queries shift such a grid to its lower bound, so no code is negative; now exact."""
    assert _codes(backend()) == [-800, -56, -8, 0, 16, 800]


@pytest.mark.slow
def test_a_robust_median_of_integers_on_spark_fails_on_no_row_alike(spark_session: Any) -> None:
    """Attack (the sweep, on Spark): ``robust_median(t.filter(pl.col("u") == id), "i", (0, 10))`` on an integer
    column read its grid step 2^-k as the DECIMAL literal 0, so ``pmod(code, 0)`` raised Spark's ArithmeticException
    on the first row it coded: charged then failed when unit ``id`` had a row, released (⊥) when it had none — a
    membership oracle at any ε. The codes are now the value times 2^k, as on the other backends."""
    from dpframe.backends.spark import SparkBackend
    from dpframe.interactive.ptr import robust_median

    assert _codes(SparkBackend(spark_session)) == _codes(PolarsBackend())
    statuses = []
    for rows in ([], [3]):
        data = pl.DataFrame({"u": [*range(30), *([10_000] * len(rows))], "i": [*range(30), *rows]})
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-3),
                          backend="spark", seed=0)
        robust_median(sess.table("t").filter(pl.col("u") == 10_000), "i", (0, 10)).collect(dp.ApproxDP(1, 1e-4))
        statuses.append(sess.history()["status"].to_list())
    assert statuses == [["committed"]] * 2
