"""Review 30: the analyst's objects must not change what the engine charges (stateful callables, shared state).

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.stopping import run_until
from dpframe.interactive.targets import Target
from dpframe.measures import Measure


def test_a_stop_rule_that_shortens_the_results_is_charged_every_step_it_saw() -> None:
    """``stop`` used to receive the run's own list: deleting from it made the run classify as one step.

    The rule saw 8 released steps, then left one in the list: the run was settled at ε = 1/2 (one step)
    instead of 4. The cell is now the number of steps run, whatever the rule does to what it receives.
    """
    sess = dp.Session({"t": pl.DataFrame({"x": list(range(100))})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=0)
    steps = [sess.table("t").filter(pl.col("x") < b).agg(dp.len()) for b in range(10, 100, 10)]
    seen: list[pl.DataFrame] = []

    def stop(results: list[pl.DataFrame]) -> bool:
        seen.append(results[-1])
        del results[1:]
        return len(seen) == 8
    out = run_until(steps, dp.PureDP(Fraction(1, 2)), stop=stop)
    assert len(seen) == len(out) == 8
    assert sess.spent() == dp.PureDP(4)


def test_a_query_cannot_be_given_another_node_or_privacy_unit() -> None:
    """A query's ``node`` and its family query (``q.query``) were writable; collect planned from them.

    A stop rule swapped a public-keys step's node for a private-keys one: the rare key was released with
    no partition selection, at the public-keys price. ``q.query.source`` with a row unit made a count of
    100-row units noised for one row. Both are read-only now.
    """
    data = pl.DataFrame({"u": [i // 100 for i in range(1000)], "g": ["common"] * 999 + ["rare"]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=100), budget=dp.ApproxDP(10, 1e-6),
                      seed=0)
    t = sess.table("t")
    public = t.group_by("g", keys=["common"]).agg(dp.len())
    private = t.group_by("g").agg(dp.len())
    with pytest.raises(AttributeError):
        public.node = private.node  # type: ignore[misc]
    source = public.query.source
    with pytest.raises(AttributeError, match="read-only"):
        public.query.source = dataclasses.replace(source, context=dataclasses.replace(
            source.context, unit=dp.PrivacyUnit.row()))
    with pytest.raises(AttributeError, match="read-only"):
        del public.query.node
    with pytest.raises(AttributeError, match="read-only"):
        public.query.__dict__["source"] = None
    steps = [t.agg(dp.len()), public]

    def stop(results: list[pl.DataFrame]) -> bool:
        with pytest.raises(AttributeError):
            steps[1].node = private.node  # type: ignore[misc]
        return False
    out = run_until(steps, dp.PureDP(Fraction(1, 10)), stop=stop)
    assert out[1]["g"].to_list() == ["common"]
    assert public.plan(dp.PureDP(1)).plans[0].noise["count(rows)"].sensitivity == 100


def _counts(budget: dp.Budget = dp.ApproxDP(100, 1e-5), unit: dp.PrivacyUnit | None = None) -> dp.Session:
    data = pl.DataFrame({"u": range(1000), "x": [float(i % 10) for i in range(1000)]})
    return dp.Session({"t": data}, privacy_unit=unit or dp.PrivacyUnit.row(), budget=budget, seed=0)


def test_a_sparse_vector_keeps_its_caps_and_its_answers() -> None:
    """``sv.answers.clear()`` reset the positives (an unbounded stream, settled at k = 0), ``sv.max_positives``
    could be raised after paying for fewer, ``sv.session`` pointed at another session's data."""
    sess, other = _counts(), _counts()
    q = sess.table("t").agg(dp.len())
    sv = sess.sparse_vector(threshold=10, max_positives=2, budget=dp.PureDP(1))
    assert sv.test(q)
    with pytest.raises(AttributeError):
        sv.answers.clear()       # type: ignore[attr-defined]
    sv.values.clear()            # a copy
    assert sv.positives == 1 and sv.answers == (True,)
    for name, value in (("max_positives", 10**6), ("session", other), ("refund", True), ("eps2", Fraction(100)),
                        ("max_length", None)):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(sv, name, value)
    with pytest.raises(AttributeError, match="read-only"):
        del sv.eps1
    assert sv.test(q) and sv.closed and sess.spent() == dp.ApproxDP(1, 0)


def test_a_channel_keeps_its_hits_and_parameters() -> None:
    """``ch.hits = 0`` after each hit gave more than ``max_hits`` hits for the reserved price."""
    sess = _counts()
    q = sess.table("t").agg(dp.len())
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6) as ch:
        for name, value in (("hits", 0), ("max_hits", 10**6), ("epsilon", Fraction(50)), ("q", 1e-9),
                            ("per_unit", True), ("session", _counts())):
            with pytest.raises(AttributeError, match="read-only"):
                setattr(ch, name, value)
        while not ch.closed:
            ch.test(q, threshold=0)
        assert ch.hits == 1


def test_an_individual_filter_keeps_its_per_unit_budget() -> None:
    sess = _counts(dp.ZCDP(10), dp.PrivacyUnit("u", max_rows=1))
    f = sess.individual_filter(dp.ZCDP(0.5))
    with pytest.raises(AttributeError, match="read-only"):
        f.budget = dp.ZCDP(10**6)
    with pytest.raises(AttributeError, match="read-only"):
        f.session = _counts(dp.ZCDP(10), dp.PrivacyUnit("u", max_rows=1))
    assert f.budget == dp.ZCDP(0.5)


def test_a_robust_median_keeps_its_unit_and_grid() -> None:
    """``rm.m = 0`` (the unit's rows) made the test's noise scale 0: an exact distance to instability."""
    from dpframe.interactive.ptr import robust_median
    sess = _counts()
    rm = robust_median(sess.table("t"), "x", bounds=(0, 100))
    for name, value in (("m", 0), ("top", 1), ("proposals", (1,)), ("lo", Fraction(-10**9))):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(rm, name, value)
    assert rm.m == 1 and isinstance(rm.proposals, tuple)


def test_a_sql_query_keeps_the_backend_it_was_checked_for() -> None:
    """``q.backend_name = "duckdb"`` on a Polars session skipped the refusal of a DuckDB-only function, and the
    query failed on Polars after it was charged (a refusal must cost nothing)."""
    sess = _counts(dp.PureDP(10))
    q = sess.sql("SELECT COUNT(*) FROM t WHERE gcd(u, 0) > 0")
    for name, value in (("backend_name", "duckdb"), ("explain_only", True), ("text", "SELECT 1")):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(q, name, value)
    with pytest.raises(dp.DPFrameError, match="nothing was charged"):
        q.collect(dp.PureDP(1))
    assert sess.history().height == 0


class _Spy(int):
    """An int whose comparisons record the other operand: Python asks a subclass's reflected method first."""

    seen: list[object] = []

    def _see(self, other: object) -> None:
        _Spy.seen.append(other)

    def __le__(self, other: object) -> bool:
        self._see(other)
        return int(self) <= other  # type: ignore[operator]

    def __ge__(self, other: object) -> bool:
        self._see(other)
        return int(self) >= other  # type: ignore[operator]

    def __lt__(self, other: object) -> bool:
        self._see(other)
        return int(self) < other  # type: ignore[operator]

    def __gt__(self, other: object) -> bool:
        self._see(other)
        return int(self) > other  # type: ignore[operator]

    def __eq__(self, other: object) -> bool:
        self._see(other)
        return int(self) == other

    __hash__ = int.__hash__


def test_an_int_subclass_never_sees_a_per_unit_hit_count() -> None:
    """A per-unit channel compared each unit's private hit count with ``max_hits``: given an int subclass,
    its ``__le__`` received every count (1, 2, 3 for the one contributing unit), which ``status()`` hides.
    Counts, caps and k are stored as plain ints."""
    sess = _counts(unit=dp.PrivacyUnit("u", max_rows=_Spy(1)))
    q = sess.table("t").filter(pl.col("u") < 1).agg(dp.len())
    with sess.target_charging(epsilon=1, max_hits=_Spy(5), delta=1e-6, per_unit=True) as ch:
        _Spy.seen.clear()
        for _ in range(3):
            ch.test(q, threshold=-100)
        assert _Spy.seen == [] and type(ch.max_hits) is int
    assert type(sess.privacy_unit.max_rows) is int
    sv = sess.sparse_vector(threshold=10, max_positives=_Spy(2), budget=dp.PureDP(1), max_length=_Spy(3))
    assert type(sv.max_positives) is int and type(sv.max_length) is int
    sv.close()
    grouped = _counts(dp.ZCDP(10, 1e-6), dp.PrivacyUnit("u")).table("t").with_columns(g=pl.col("u") % 3).group_by("g")
    top = grouped.top_k(k=_Spy(2), k_max=_Spy(3))
    assert type(top.query.k) is int and type(top.query.k_max) is int


@pytest.mark.parametrize(("cls", "argument"), [(dp.PureDP, "budget"), (dp.ApproxDP, "budget"), (dp.ZCDP, "budget"),
                                             (Measure, "measures"), (Target, "when"), (dp.Accuracy, "accuracy"),
                                             (dp.PrivacyUnit, "privacy_unit")])
def test_a_value_the_engine_reads_twice_cannot_be_subclassed(cls: type, argument: str) -> None:
    """A subclass's property can answer differently on each read. A PureDP whose ``epsilon`` was 1/100 on its
    first read and 1000 after made ``run_until`` charge 1/100 per step and run at ε = 1000; a Measure whose
    ``bounds`` were (0, 1) for the first 11 reads and (0, 10⁶) after was planned for sensitivity 1 and
    clamped at 10⁶ (a sum of 100 × 1000 came back as 101,445)."""
    with pytest.raises(dp.DPFrameError, match="cannot be subclassed") as info:
        type("Shifty", (cls,), {})
    assert info.value.argument == argument


@pytest.mark.parametrize("attribute", ["fits", "charge", "compose", "entries"])
def test_the_session_accountant_cannot_be_patched(attribute: str) -> None:
    """``sess.accountant.fits = lambda *a: True`` let a PureDP(1) session spend 50; ``charge`` returning 1e-9
    charged a 0.9 query 1e-9."""
    sess = _counts(dp.PureDP(1))
    with pytest.raises(AttributeError, match="read-only"):
        setattr(sess.accountant, attribute, lambda *args: True)
    with pytest.raises(dp.BudgetExceededError):
        sess.table("t").agg(dp.len()).collect(dp.PureDP(50))


@pytest.mark.parametrize("attribute", ["random_uint64", "uniform_below", "permutation", "private", "seed_for_engine"])
def test_the_session_random_source_cannot_be_patched(attribute: str) -> None:
    """``sess.rng.random_uint64 = ...`` replaced the words every noise draw is made of."""
    data = pl.DataFrame({"x": [1.0] * 10})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))    # not seeded
    with pytest.raises(AttributeError, match="read-only"):
        setattr(sess.rng, attribute, lambda *args: None)
    assert sess.rng.private


def test_a_gated_release_refuses_a_sql_query_uncharged() -> None:
    """A SQL query built for DuckDB (a DuckDB-only function) ran inside ``gated_release`` on the session's
    Polars backend and failed after both budgets were charged; it is refused before anything is charged."""
    from dpframe.interactive.ptr import gated_release
    sess = _counts(dp.PureDP(10))
    q = sess.sql("SELECT COUNT(*) AS n FROM t WHERE gcd(u, 0) > 0", backend="duckdb")
    with pytest.raises(dp.DPFrameError, match="method chain") as info:
        gated_release(q, dp.PureDP(Fraction(1, 10)), sess.table("t").agg(dp.len()), 0, dp.PureDP(Fraction(1, 10)))
    assert info.value.argument == "query" and sess.history().height == 0
