"""Review 55j: seeded Spark releases drift from Polars/DuckDB after an overflowing query — not a bug.

Review 55f ran one seeded session per backend through the same 184 queries: Polars and DuckDB agreed on every
one, Spark differed from the first (an Int64 overflow: NULL on Spark, wrapped on Polars, docs/scaling.md) and
afterwards even on queries whose exact values agree. Cause, found here: the seeded stream is consumed per
release in a number of draws that depends on the data — the exponential mechanism draws one word per candidate
(a quantile's candidate intervals come from the distinct values; more words on near-ties) and private-key
selection one per candidate group. So once one query sees other values on one backend, every later seeded
release shifts; Spark draws nothing of its own. The pin: Spark on the data equals Polars on the data Spark
computed (the overflowing column NULL) on every query of a sequence — no extra draw on Spark's paths, neither
its overflow NULLs nor its ANSI 64-bit sum overflow rerun in DECIMAL(38,0) (that rerun is inside the
backend's exact statistics, before any noise is drawn); and a draw whose query then fails is never released.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pytest

import dpframe as dp
import dpframe.backends.spark as spark_backend
from dpframe.backends.spark import SparkBackend
from dpframe.errors import DPFrameError
from dpframe.noise import SeededRandomSource

ROWS = 40
DATA = pl.DataFrame({"u": list(range(ROWS)), "g": ["a", "b"] * (ROWS // 2),
                     "x": [2**62 + i for i in range(ROWS)],
                     "w": [2**40 + i for i in range(ROWS)], "v": [float(i % 7) for i in range(ROWS)]})
NULLED = DATA.with_columns(x=pl.lit(None, pl.Int64))    # "x * 4" as Spark computes it: NULL, not wrapped
Query = Callable[[Any], Any]


def _over(t: Any) -> Any:
    return t.with_columns(y=pl.col("x") * 4)      # overflows Int64 on every row


def _short() -> Iterator[tuple[str, Query]]:
    yield "len", lambda t: t.agg(dp.len())
    yield "big_sum", lambda t: t.agg(dp.sum("w", bounds=(0, 2**41)))
    yield "over_groups", lambda t: _over(t).group_by("g", keys=["a", "b"]).agg(dp.count("y"),
                                                                              dp.sum("y", bounds=(0, 10)))
    yield "len_after", lambda t: t.agg(dp.len())
    yield "mean_after", lambda t: t.agg(dp.mean("v", bounds=(0, 10)))


def _long() -> Iterator[tuple[str, Query]]:
    yield from _short()
    yield "over_count", lambda t: _over(t).agg(dp.count("y"))
    yield "over_filter", lambda t: _over(t).filter(pl.col("y") > 0).agg(dp.len())
    yield "over_median", lambda t: _over(t).agg(dp.median("y", bounds=(0, 10)))
    yield "mean_after_median", lambda t: t.agg(dp.mean("v", bounds=(0, 10)))
    yield "over_var", lambda t: _over(t).agg(dp.var("y", bounds=(0, 10)))
    yield "over_private_keys", lambda t: _over(t).group_by("y").agg(dp.len())
    yield "len_last", lambda t: t.agg(dp.len())


def _releases(data: pl.DataFrame, queries: Iterator[tuple[str, Query]], backend: str = "polars",
              spark: Any = None, seed: int = 7) -> dict[str, list[dict[str, Any]]]:
    """Every query of the sequence, in order, released by one seeded session."""
    extra = {"spark": spark} if spark is not None else {}
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(100, 1e-3), seed=seed,
                      backend=backend, **extra)
    out = {}
    for name, q in queries:
        budget = dp.ApproxDP(1, 1e-6) if name == "over_private_keys" else dp.PureDP(1)
        out[name] = q(sess.table("t")).collect(budget=budget).to_dicts()
    return out


@pytest.fixture
def wide_reruns(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records the ``wide`` flag of every aggregation job the Spark backend runs, every sum taken as one that may
    leave 64 bits (more than 2³⁰ rows at the grid's bound, too many for a test): each runs again in DECIMAL(38,0),
    the path an ANSI 64-bit overflow takes."""
    seen: list[bool] = []
    original = SparkBackend._aggregate_all

    def spy(self: SparkBackend, *args: Any, **kwargs: Any) -> Any:
        seen.append(bool(kwargs["wide"]))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SparkBackend, "_aggregate_all", spy)
    monkeypatch.setattr(spark_backend, "int64_sums_are_exact", lambda statistics, rows: False)
    return seen


def test_spark_draws_as_polars_on_sparks_values(spark_session: Any, wide_reruns: list[bool]) -> None:
    """A sequence with an overflowing query and an overflowing 64-bit sum: Spark releases, query by query, what
    Polars releases on the values Spark computed, and the queries whose values agree release the same on both;
    its sums run twice (narrow, then DECIMAL(38,0)) and draw once."""
    spark = _releases(DATA, _short(), "spark", spark_session)
    assert wide_reruns.count(True) >= 3              # the DECIMAL(38,0) reruns ran (big_sum, over_groups, mean)
    assert spark == _releases(NULLED, _short())
    polars = _releases(DATA, _short())
    assert spark["over_groups"] != polars["over_groups"]          # the documented NULL-vs-wrap difference
    for name in ("len", "big_sum", "len_after", "mean_after"):   # its draws were as many: the stream goes on
        assert spark[name] == polars[name], name


@pytest.mark.slow
def test_spark_long_sequence_drifts_only_by_data(spark_session: Any) -> None:
    """The longer sequence (quantile, private keys): Spark = Polars on Spark's values on every query; against
    Polars on its own (wrapped) values the stream shifts after the median, whose draws count candidates."""
    spark = _releases(DATA, _long(), "spark", spark_session)
    assert spark == _releases(NULLED, _long())
    polars = _releases(DATA, _long())
    assert spark["len_after"] == polars["len_after"]
    assert spark["mean_after_median"] != polars["mean_after_median"]   # same exact mean, later draws


def test_a_quantile_consumes_a_data_dependent_number_of_draws() -> None:
    """Why the streams part (no Spark needed): two datasets differing in one column only; after a median of it
    the next engine seed differs — a count released after it can differ though its exact value is the same."""
    def next_seed(data: pl.DataFrame) -> int:
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=3)
        sess.table("t").agg(dp.median("v", bounds=(0, 10))).collect(budget=dp.PureDP(1))
        return sess.rng.seed_for_engine()

    spread = DATA.with_columns(v=pl.col("u").cast(pl.Float64) / 4)          # 40 distinct values
    assert next_seed(DATA) == next_seed(DATA)
    assert next_seed(DATA) != next_seed(spread)


def test_a_query_failing_after_its_first_draw_releases_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that fails after drawing noise for one of its cells (a mean: a noisy sum and a noisy count)
    releases no cell and stays charged; asking again is a second charge and one release with fresh draws."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=5)
    query = sess.table("t").agg(dp.mean("v", bounds=(0, 10)))
    draws: list[int] = []
    original = SeededRandomSource.random_uint64

    def fail_after_first(self: SeededRandomSource, size: int) -> Any:
        draws.append(size)
        if len(draws) > 1:
            raise RuntimeError("the source failed")
        return original(self, size)

    monkeypatch.setattr(SeededRandomSource, "random_uint64", fail_after_first)
    with pytest.raises(DPFrameError, match="stays charged"):
        query.collect(budget=dp.PureDP(1))
    assert len(draws) > 1                                   # it did draw before it failed
    monkeypatch.undo()
    assert sess.spent() == dp.PureDP(1)
    released = query.collect(budget=dp.PureDP(1))
    assert released.height == 1 and sess.spent() == dp.PureDP(2)
    assert sess.history().get_column("status").to_list() == ["failed", "committed"]
