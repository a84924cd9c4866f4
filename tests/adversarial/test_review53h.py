"""Review 53h: a fresh red team of the public entry points (threads, expressions, SQL, remote, outputs).

Each test is one attack; those that found something say so in their docstring.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import dpframe as dp
from dpframe.remote import wire

# Two units with the same rows; only the first unit's id differs between the twin sessions: NaN against 1.0.
# The engine's unit equality makes every NaN one unit (as -0.0 and 0.0 are one), so a per-unit mechanism must
# treat the NaN unit exactly as it treats the unit 1.0: same seed, same releases.
_IDS = {"nan": [math.nan, math.nan, 2.0], "one": [1.0, 1.0, 2.0]}


BACKENDS = ["polars", "duckdb"]


def _twin(first: str, budget: dp.Budget, backend: str) -> dp.Session:
    data = pl.DataFrame({"u": _IDS[first], "first": [True, True, False], "x": [1.0, 1.0, 1.0]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=budget, seed=7,
                      backend=backend)


def _individual_run(first: str, backend: str) -> list[Any]:
    sess = _twin(first, dp.ZCDP(10), backend)
    filt = sess.individual_filter(budget=dp.ZCDP(1))
    q = sess.table("t").filter(pl.col("first")).agg(n=dp.len())
    return [filt.collect(q, budget=dp.ZCDP(Fraction(1, 2)))["n"][0] for _ in range(12)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_individual_filter_charges_a_nan_unit_like_any_other(backend: str) -> None:
    """Found: the individual filter kept each unit's spent ρ in a dict keyed by the ids Polars hands back, and
    every NaN read from a frame is a new float object that no dict lookup finds (NaN != NaN). The NaN unit was a
    fresh unit at every query: never left out, its loss unbounded (40 queries of ρ = 1/2 each under a per-unit
    budget of 1, and their mean told its count). Now it pays like the unit 1.0 with the same rows: out after two.
    """
    assert _individual_run("nan", backend) == _individual_run("one", backend)


def _per_unit_run(first: str, backend: str) -> list[bool]:
    sess = _twin(first, dp.ApproxDP(100, 1e-5), backend)
    q = sess.table("t").filter(pl.col("first")).agg(dp.len())
    with sess.target_charging(epsilon=1, max_hits=2, delta=1e-6, per_unit=True) as ch:
        return [ch.test(q, threshold=1) for _ in range(12)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_unit_target_charging_removes_a_nan_unit_after_max_hits(backend: str) -> None:
    """Found: the per-unit channel counted hits in a dict keyed by unit ids as Polars returns them; each NaN id
    was a new key with one hit, so the NaN unit never reached `max_hits` and was never removed (every later
    "above" read it again). Now it is removed after its `max_hits` hits, as the unit 1.0 with the same rows."""
    assert _per_unit_run("nan", backend) == _per_unit_run("one", backend)


# A unit id Polars stores but Python's datetime cannot hold (year > 9999 or < 1), against an ordinary one.
_FAR: dict[str, tuple[Any, int]] = {"date": (pl.Date, 10**8), "datetime_ms": (pl.Datetime("ms"), 2**62),
                                    "datetime_us_utc": (pl.Datetime("us", "UTC"), -(2**62)),
                                    "duration_ms": (pl.Duration("ms"), 2**62)}


def _far_twin(dtype: Any, first: int, budget: dp.Budget, backend: str = "polars") -> dp.Session:
    ids = pl.Series([first, first, 5], dtype=pl.Int64).cast(pl.Int32 if dtype == pl.Date else pl.Int64).cast(dtype)
    data = pl.DataFrame({"u": ids, "first": [True, True, False], "x": [1.0, 1.0, 1.0]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=budget, seed=3,
                      backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", sorted(_FAR))
def test_per_unit_tools_read_a_unit_id_beyond_pythons_dates(kind: str, backend: str) -> None:
    """Found: the per-unit tools turned the unit ids of each read into Python values; an id past year 9999 (or a
    duration past Python's timedelta) raised — a Rust panic for dates and naive or zoned datetimes — only when
    that unit's rows reached the query. The query was charged and failed (the filter closed), so `filter(P)`
    before it told whether a far-dated unit satisfies P. Now such a unit is counted like any other: the same
    releases as the twin whose unit has an ordinary id."""
    dtype, far = _FAR[kind]
    if backend == "duckdb" and kind == "datetime_ms":
        with pytest.raises(dp.SchemaError, match="cannot hold the privacy-unit column"):   # refused, free
            _far_twin(dtype, far, dp.ZCDP(10), backend)
        return

    def individual(first: int) -> list[Any]:
        sess = _far_twin(dtype, first, dp.ZCDP(10), backend)
        filt = sess.individual_filter(budget=dp.ZCDP(1))
        q = sess.table("t").filter(pl.col("first")).agg(n=dp.len())
        return [filt.collect(q, budget=dp.ZCDP(Fraction(1, 2)))["n"][0] for _ in range(4)]

    def per_unit(first: int) -> list[bool]:
        sess = _far_twin(dtype, first, dp.ApproxDP(100, 1e-5), backend)
        q = sess.table("t").filter(pl.col("first")).agg(dp.len())
        with sess.target_charging(epsilon=1, max_hits=2, delta=1e-6, per_unit=True) as ch:
            return [ch.test(q, threshold=1) for _ in range(6)]

    assert individual(far) == individual(1)
    assert per_unit(far) == per_unit(1)


def test_individual_filter_grouped_by_the_unit_column_keeps_its_keys() -> None:
    """Found (on every dataset alike, so no leak): a query grouped by the unit column itself asked the backend for
    statistics by (unit, unit), a DuplicateError after the filter's charge, which closed the filter for good. Now
    it runs, and the unit column keeps its type (units are named by their keys beside the rows, a temporal id as
    its integer): the public keys are released as given."""
    sess = _far_twin(pl.Date, 1, dp.ZCDP(10))
    filt = sess.individual_filter(budget=dp.ZCDP(1))
    keys = pl.Series([1, 5], dtype=pl.Int32).cast(pl.Date).to_list()
    out = filt.collect(sess.table("t").group_by("u", keys=keys).agg(n=dp.len()), budget=dp.ZCDP(Fraction(1, 2)))
    assert out["u"].to_list() == keys and out.schema["u"] == pl.Date


_NESTED = {"list": pl.Series([[1], [1], [2]]), "array": pl.Series([[1], [1], [2]], dtype=pl.Array(pl.Int64, 1)),
           "struct": pl.Series([{"a": 1}, {"a": 1}, {"a": 2}])}


@pytest.mark.parametrize("kind", sorted(_NESTED))
def test_per_unit_tools_refuse_nested_unit_ids_before_reading(kind: str) -> None:
    """Found: a session takes a list, array or struct unit column (queries bound and count such units), but the
    per-unit tools kept their records in dicts keyed by the ids as Python values, and a list is no dict key: a
    query failed with a TypeError, after the charge, where rows reached it (the individual filter's count of
    `filter(P)`; a per-unit channel's "above" answer), and ran where none did — the failure answered "does any
    row satisfy P". Now both refuse such a unit column when the query is asked, before any read, alike on every
    dataset: nothing more is charged, and the filter or channel stays open."""
    data = pl.DataFrame({"u": _NESTED[kind], "x": [1.0, 2.0, 3.0]})
    for hit in (False, True):           # no row reaches the query / every row does: the same refusal
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ZCDP(10), seed=0)
        q = sess.table("t").filter(pl.col("x") > (0 if hit else 10)).agg(dp.len())
        filt = sess.individual_filter(budget=dp.ZCDP(1))
        with pytest.raises(dp.PlanError, match="nested type") as refused:
            filt.collect(q, budget=dp.ZCDP(Fraction(1, 2)))
        assert refused.value.argument == "query" and not filt.closed
        assert sess.history()["status"].to_list() == ["committed"]         # the filter's own charge only
        approx = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2),
                            budget=dp.ApproxDP(100, 1e-5), seed=0)
        q = approx.table("t").filter(pl.col("x") > (0 if hit else 10)).agg(dp.len())
        with approx.target_charging(epsilon=1, max_hits=2, delta=1e-6, per_unit=True) as ch:
            for call in (lambda: ch.test(q, threshold=0), lambda: ch.conditional_release(q, when=dp.above(0))):
                with pytest.raises(dp.PlanError, match="nested type"):
                    call()
            assert ch.calls == 0


class _Hollow(list[Any]):
    """A list that says it has one item and iterates none."""

    def __len__(self) -> int:
        return 1


def test_select_best_reads_its_queries_once() -> None:
    """Found: `select_best` checked `len(queries)` and then iterated them: a sequence of length 1 that iterates
    nothing reached `max()` of no values, a raw ValueError (no read, no charge). Now the queries are read once,
    into a tuple, and an empty one is the ArgumentError naming `queries`."""
    data = pl.DataFrame({"u": list(range(20)), "x": [1.0] * 20})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.ApproxDP(100, 1e-5),
                      seed=0)
    with sess.target_charging(epsilon=1, max_hits=3, delta=1e-6) as ch:
        with pytest.raises(dp.ArgumentError) as refused:
            ch.select_best(_Hollow())
        assert refused.value.argument == "queries" and ch.calls == 0 and ch.hits == 0


def test_a_served_reply_numbers_categorical_keys_from_zero() -> None:
    """Noted (docs/guarantees.md, same-process code): in process, a released Categorical key column carries Polars'
    process-wide codes, which number strings in the order the process first saw them — a private category between
    two public keys shows as a gap. What a served session sends is the Arrow stream of the frame: its dictionary
    holds the released values only, numbered from 0, and no other category's text."""
    data = pl.DataFrame({"u": [1, 2, 3], "c": pl.Series(["k53h_a", "k53h_secret", "k53h_b"], dtype=pl.Categorical)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10), seed=0)
    out = sess.table("t").group_by("c", keys=["k53h_a", "k53h_b"]).agg(dp.len()).collect(dp.PureDP(1))
    codes = out["c"].to_physical().to_list()
    assert codes[1] - codes[0] == 2                 # the gap the in-process frame shows (documented)
    sent = wire.frame_bytes(out)
    column = pa.ipc.open_stream(pa.BufferReader(sent)).read_all().column("c").combine_chunks()
    assert column.dictionary.to_pylist() == ["k53h_a", "k53h_b"] and column.indices.to_pylist() == [0, 1]
    assert b"k53h_secret" not in sent
