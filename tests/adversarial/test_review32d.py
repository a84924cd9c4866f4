"""Review 32d: method-chain frames, their outputs and side channels, under an analyst who picks every argument.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses. D and D′ are
neighbouring datasets (D′ adds one privacy unit) where the attack is data-dependent.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from typing import Any

import polars as pl
import pytest

import dpframe as dp

_PLAN_IN_A_SMALL_PROCESS = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import polars as pl, dpframe as dp
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2, 3], "s": ["a", "b", "c"], "i": [1, 2, 3]})},
                      privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=0)
    for expr in (pl.concat_str([pl.col("s")] * 10).str.len_bytes(), pl.sum_horizontal([pl.col("i")] * 15)):
        print(sess.table("t").with_columns(n=expr).agg(dp.sum("n", bounds=(0, 1))).cost(dp.PureDP(1)))
""")


def test_an_operation_with_many_inputs_is_planned_without_exhausting_memory() -> None:
    """The totality probe runs an operation on every combination of its inputs' adversarial values when
    there are at most 20,000 of them, else on a spread of 20,000 rows. The count was ``np.prod`` in int64:
    for 10 string inputs (83¹⁰ combinations) or 15 integer ones (26¹⁵) it wrapped to a negative number, so the
    probe cross-joined them all — ``cost()`` of ``pl.concat_str([pl.col("s")] * 10)``, a free call, asked
    for a 15.7 GB block and aborted the process (a Rust allocation failure no handler sees; the kernel's
    OOM killer without a memory limit). Now the count is exact and the probe spreads 20,000 rows.
    """
    run = subprocess.run([sys.executable, "-c", _PLAN_IN_A_SMALL_PROCESS],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("PureDP(epsilon=1)") == 2


I64 = (-(2**63), 2**63 - 1)


def _extreme_neighbours(values: tuple[float | None, float | None],
                        integers: tuple[int | None, int | None]) -> tuple[pl.DataFrame, pl.DataFrame]:
    base = pl.DataFrame({"u": range(40), "g": ["a", "b"] * 20, "x": [float(i % 7) for i in range(40)],
                         "i": list(range(40))})
    unit = pl.DataFrame({"u": [99, 99], "g": ["a", "new"], "x": values, "i": integers}, schema=base.schema)
    return base, pl.concat([base, unit])


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize(("values", "integers"), [((float("nan"), float("inf")), I64), ((None, -1e308), (None, 0))])
def test_no_warning_is_raised_while_private_rows_are_read(backend: str, values: tuple[float | None, float | None],
                                                          integers: tuple[int | None, int | None]) -> None:
    """Warnings as a channel: under ``warnings.simplefilter("error")`` (or ``-W error`` set by the data
    owner) a warning raised while private rows are read would become a charged failure on D′ alone, and
    a recorded warning's text could quote a value. NaN, ±inf, −1e308, the int64 limits and nulls, in
    sums, means, variances, quantiles, a derived column and private and public keys, raise none.
    """
    outcomes = []
    for data in _extreme_neighbours(values, integers):
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 1e-3),
                          backend=backend, seed=0)
        t = sess.table("t").with_columns(r=pl.col("x") / pl.col("x"), y=pl.col("i") * 3)
        queries = [t.agg(dp.sum("i", bounds=(0, 100)), dp.var("x", bounds=(0, 10)), dp.mean("r", bounds=(0, 2)),
                         dp.sum("y", bounds=(-5, 5)), dp.quantile("x", [0.1, 0.9], bounds=(0, 10))),
                   t.group_by("g", keys=["a", "new"]).agg(dp.len(), dp.std("x", bounds=(0, 10))),
                   t.group_by("g").agg(dp.count("x"))]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            # the quantile's dp.NoIntervalWarning (test_review50b) reads the plan only and comes before the charge
            warnings.simplefilter("ignore", dp.NoIntervalWarning)
            outcomes.append([q.collect(dp.ApproxDP(1, 1e-5), ci=0.9).columns for q in queries])
        assert sess.history()["status"].to_list() == ["committed"] * 3
    assert outcomes[0] == outcomes[1]


def _one_group_per_unit_and_a_unit_in_three() -> tuple[pl.DataFrame, pl.DataFrame]:
    base = pl.DataFrame({"u": range(30), "g": ["a", "b", "c"] * 10, "x": [float(i % 7) for i in range(30)]})
    return base, pl.concat([base, pl.DataFrame({"u": [99] * 3, "g": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]})])


def _outcome(data: pl.DataFrame, backend: str, make: Any) -> tuple[str, int]:
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2, max_groups=1),
                      budget=dp.ApproxDP(10, 1e-3), backend=backend, seed=0)
    try:
        make(sess.table("t")).collect(dp.ApproxDP(1, 1e-5))
        return "released", sess.history().height
    except dp.DPFrameError as e:
        return f"{type(e).__name__}: {e}", sess.history().height


RESERVED_NAMES = {
    "a group key named like the bounding hash": lambda t: t.with_columns(pl.col("g").alias("__dp_hash"))
    .group_by("__dp_hash").agg(dp.len()),
    "a public group key named like the bounding hash": lambda t: t.with_columns(pl.col("g").alias("__dp_hash"))
    .group_by("__dp_hash", keys=["a", "b"]).agg(dp.len()),
    "a column renamed like the row number": lambda t: t.rename({"x": "__dp_row"})
    .group_by("g", keys=["a", "b", "c"]).agg(dp.sum("__dp_row", bounds=(0, 10))),
    "a group key named like the row number": lambda t: t.with_columns(pl.col("g").alias("__dp_row"))
    .group_by("__dp_row").agg(dp.len()),
    "a column named like the kept-row mask": lambda t: t.with_columns(pl.lit(1).alias("__dp_keep")).agg(dp.len()),
    "a group key with an empty name": lambda t: t.with_columns(pl.col("g").alias("")).group_by("").agg(dp.len()),
    "an engine name in capitals": lambda t: t.with_columns(pl.col("g").alias("__DP_HASH")).group_by("__DP_HASH")
    .agg(dp.len()),
    "a column named like another but for case": lambda t: t.with_columns((pl.col("x") * 2).alias("X"))
    .agg(dp.sum("X", bounds=(0, 10)), dp.sum("x", bounds=(0, 10))),
    "a column named like the group key but for case": lambda t: t.with_columns(pl.col("x").alias("G"))
    .group_by("g").agg(dp.sum("G", bounds=(0, 10))),
    "SQL: a group key named like the bounding hash": lambda t: t._session.sql(
        "SELECT __dp_hash, COUNT(*) AS n FROM (SELECT g AS __dp_hash FROM t) GROUP BY __dp_hash"),
    "SQL: a group key named like the row number": lambda t: t._session.sql(
        "SELECT __DP_ROW, COUNT(*) AS n FROM (SELECT g AS __DP_ROW FROM t) GROUP BY __DP_ROW"),
}


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("attack", list(RESERVED_NAMES))
def test_a_column_named_like_an_engine_column_is_refused_uncharged(backend: str, attack: str) -> None:
    """The DuckDB backend bounds contributions with helper columns of its own (``__dp_hash``, ``__dp_row``,
    ``__dp_keep`` ...) beside the frame's. A derived column of the same name shadowed them: grouping by a
    column named ``__dp_hash`` under ``max_groups=1`` was charged and failed with a *UFuncTypeError* on D
    (no unit in two groups) and a *TypeError* on D′ (one unit in three) — the message told D from D′; the
    others were charged and failed on every dataset, as did a group key with an empty name (a DuckDB
    ParserException). Now a new column's name that starts with ``__dp`` or is empty is refused when the
    frame is built, nothing charged, on every backend. So is a new column named like another but for case
    (``x`` and ``X``): DuckDB's names ignore case, so the query was charged and failed there.
    """
    outcomes = [_outcome(data, backend, RESERVED_NAMES[attack]) for data in _one_group_per_unit_and_a_unit_in_three()]
    assert outcomes[0] == outcomes[1]
    message, charges = outcomes[0]
    assert message.startswith("PlanError") and charges == 0, outcomes


@pytest.mark.parametrize("name", ["__dp_hash", "__DP_ROW", ""])
def test_a_table_with_a_column_named_like_an_engine_column_is_refused_when_the_session_is_created(name: str) -> None:
    """The same shadowing through the tables: grouping by a private table's column ``__dp_hash`` (or a joined
    public table's) under ``max_groups=1`` was charged and failed with a UFuncTypeError on D and a TypeError
    on D′. Such a table is now a SchemaError naming it when the session is created, before any query."""
    data = pl.DataFrame({"u": [1, 2], name: ["a", "b"]})
    with pytest.raises(dp.SchemaError, match=r"tables\['t'\]"):
        dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    with pytest.raises(dp.SchemaError, match=r"public_tables\['p'\]"):
        dp.Session({"t": data.rename({name: "g"})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1),
                   public_tables={"p": pl.DataFrame({"k": ["a"], name: ["x"]})})
