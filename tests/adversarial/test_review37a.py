"""Review 37a: calls cut short by ``Session.close()``, ungrouped queries under ``max_rows=N, max_groups="auto"``,
and tuned-unit paths on unit columns that are not Int64.

Scope: the ledger's record of a reservation whose session is closed — from another thread, or from a callable
the analyst passes — before the call finishes (queries, SQL, ``run_until``, gated release, the robust median,
sparse vectors and target-charging channels open or mid-call; ``dpframe.accounting.ledger``); every query entry
point under ``dp.PrivacyUnit(..., max_rows=N, max_groups="auto")`` with a query that has no group-by
(``dpframe.tuning.stage``, ``dpframe.privacy_unit``, the interactive mechanisms); and the tuned paths
(``max_rows="auto"``, ``max_groups="auto"``, ``bounds="auto"``) on float, string, 128-bit and UInt64 unit columns
on neighbouring datasets (``tests/adversarial/composed.py``). Each test is an attack that broke, kept with its
fix: it fails if the defence regresses. Races are made deterministic with events, not timing.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.accounting import Ledger
from dpframe.interactive.ptr import gated_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.release import PrivateReader

# ---------------------------------------------------------------------------- 1. calls cut short by close()

_CUT = "cut short: its session was closed before it finished"


def _data() -> pl.DataFrame:
    return pl.DataFrame({"u": range(200), "x": [float(i % 50) for i in range(200)], "g": [i % 3 for i in range(200)]})


def _file_session(path: Path, unit: dp.PrivacyUnit | None = None) -> dp.Session:
    return dp.Session({"t": _data()}, privacy_unit=unit or dp.PrivacyUnit("u", max_rows=2),
                      budget=dp.ApproxDP(100, 1e-3), ledger=str(path), seed=0)


def _rows(sess: dp.Session, path: Path) -> list[tuple[str, str | None]]:
    """(status, error) of every charge, read from the file by a fresh ledger (the closed session reads nothing)."""
    ledger = Ledger(path, sess.accountant)
    try:
        return [(c.status, c.error) for c in ledger.charges()]
    finally:
        ledger.close()


@contextmanager
def _paused_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Every private read waits at ``go`` after setting ``inside``: a call can be held inside its reservation."""
    inside, go = threading.Event(), threading.Event()
    run = PrivateReader.run

    def paused(self: PrivateReader, request: Any) -> Any:
        inside.set()
        assert go.wait(10), "the test never let the read go on"
        return run(self, request)
    monkeypatch.setattr(PrivateReader, "run", paused)
    yield inside, go


_IN_FLIGHT: dict[str, Callable[[dp.Session], Any]] = {
    "collect": lambda s: s.table("t").agg(dp.len()).collect(dp.PureDP(1)),
    "sql": lambda s: s.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1)),
    "top_k": lambda s: s.table("t").group_by("g", keys=[0, 1, 2]).top_k(k=1, method="gumbel").collect(dp.PureDP(1)),
    "run_until": lambda s: run_until([s.table("t").agg(dp.len())] * 2, dp.PureDP(1), stop=lambda r: False),
    "gated_release": lambda s: gated_release(s.table("t").agg(dp.len()), dp.PureDP(1), s.table("t").agg(dp.len()),
                                             0, dp.PureDP(1)),
    "robust_median": lambda s: robust_median(s.table("t"), "x", (0, 100)).collect(dp.ApproxDP(1, 1e-6)),
    "sparse_vector": lambda s: s.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1)).test(
        s.table("t").agg(dp.len())),
    "target_charging": lambda s: s.target_charging(epsilon=1, max_hits=1, delta=1e-6).__enter__().test(
        s.table("t").agg(dp.len()), threshold=10**6),
}


def _closed_mid_call(monkeypatch: pytest.MonkeyPatch, sess: dp.Session, call: Callable[[], object]
                     ) -> BaseException | None:
    """Run ``call`` on another thread, close ``sess`` while it reads, then let it go on: what it raised (or None)."""
    outcome: list[BaseException | None] = []

    def analyst() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as e:   # noqa: BLE001 — the analyst catches everything
            outcome.append(e)
    with _paused_reads(monkeypatch) as (inside, go):
        worker = threading.Thread(target=analyst)
        worker.start()
        assert inside.wait(10)
        sess.close()
        go.set()
        worker.join(10)
    return outcome[0]


@pytest.mark.parametrize("call", sorted(_IN_FLIGHT))
def test_a_call_cut_short_by_close_is_recorded_failed_not_left_reserved(
        call: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call holds its reservation while it reads; the analyst closes the session from another thread then. The
    call fails (a LedgerError: the closed session reads and records nothing) and its charge stays spent — but the
    ledger row stayed ``reserved`` for good: ``history()`` of every later session on the file showed a dangling
    reservation, and (worse) every refund on that file was forfeited from then on, since an open reservation is
    read as another stream running beside the refund's run. ``close()`` now marks the reservations its session
    still holds ``failed`` ("cut short ..."), before it closes the file."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    outcome = _closed_mid_call(monkeypatch, sess, lambda: _IN_FLIGHT[call](sess))
    assert isinstance(outcome, dp.LedgerError) and "closed" in str(outcome)
    assert _rows(sess, path) == [("failed", _CUT)]
    again = _file_session(path)
    assert again.history()["status"].to_list() == ["failed"] and again.spent().epsilon > 0


def test_a_stream_left_open_when_its_session_closes_is_recorded_failed(tmp_path: Path) -> None:
    """A sparse vector and a target-charging channel hold one reservation across their calls. Closed with the
    session while open, their row stayed ``reserved``; now it is ``failed`` (cut short), charged in full: its
    answers were released under it, and no refund is made after the session is gone."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    q = sess.table("t").agg(dp.len())
    sv = sess.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1))
    assert sv.test(q) is False
    sess.close()
    with pytest.raises(dp.LedgerError, match="closed"):
        sv.test(q)
    with pytest.raises(dp.LedgerError, match="closed"):
        sv.close()
    assert _rows(sess, path) == [("failed", _CUT)]
    assert _file_session(path).spent() == dp.ApproxDP(1, 0)


def test_a_callable_that_closes_the_session_cuts_its_own_call_short(tmp_path: Path) -> None:
    """``run_until``'s ``stop`` runs inside the run's reservation; the analyst's rule closes the session. The run
    fails with a LedgerError — whatever the released values were (the rule saw them only) — and its row is
    ``failed``, the worst cell charged."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    steps = [sess.table("t").agg(dp.len())] * 3

    def stop(results: list[pl.DataFrame]) -> bool:
        sess.close()
        return len(results) > 1
    with pytest.raises(dp.LedgerError, match="closed"):
        run_until(steps, dp.PureDP(1), stop=stop)
    assert _rows(sess, path) == [("failed", _CUT)]
    assert _file_session(path).spent() == dp.ApproxDP(3, 0)


def test_a_call_cut_short_no_longer_forfeits_later_refunds_on_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dangling ``reserved`` row a cut call left was read by every later ex-post run on the ledger file as
    another open stream: a gated release whose gate said ⊥ was charged its query too, in every later session.
    Now the cut row is ``failed``, and a later ⊥ is charged its gate alone."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    with _paused_reads(monkeypatch) as (inside, go):
        worker = threading.Thread(target=lambda: pytest.raises(dp.LedgerError, _IN_FLIGHT["collect"], sess))
        worker.start()
        assert inside.wait(10)
        sess.close()
        go.set()
        worker.join(10)
    later = _file_session(path)
    t = later.table("t")
    assert gated_release(t.agg(dp.len()), dp.PureDP(2), t.agg(dp.len()), 10**6, dp.PureDP(Fraction(1, 4))) is None
    assert later.spent() == dp.ApproxDP(Fraction(5, 4), 0)        # the cut query's 1 and the gate's 1/4


def test_a_finished_call_keeps_its_status_when_the_session_closes(tmp_path: Path) -> None:
    """Only reservations still open are cut: committed, settled and failed rows keep their status, and another
    session's open stream on the same file is not this session's to cut."""
    path = tmp_path / "budget.ledger"
    sess, other = _file_session(path), _file_session(path)
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    sv = other.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1))
    sess.close()
    assert [s for s, _ in _rows(sess, path)] == ["committed", "reserved"]
    sv.close()
    assert other.history()["status"].to_list() == ["committed", "committed"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_closing_the_session_cuts_nothing_of_its_parent(tmp_path: Path) -> None:
    """``close()`` now writes (it marks open reservations cut); a fork's child holds a copy of the parent's ledger
    and its open stream. The child's close must not mark the parent's stream failed (the child may neither
    charge nor write), so the parent's stream still closes normally."""
    path = tmp_path / "budget.ledger"
    sess = _file_session(path)
    sv = sess.sparse_vector(threshold=10**6, max_positives=1, budget=dp.PureDP(1))
    pid = os.fork()
    if pid == 0:                                    # the child: close the copied session, then exit at once
        try:
            sess.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert _rows(sess, path) == [("reserved", None)]
    sv.close()
    assert sess.history()["status"].to_list() == ["committed"]


# ---------------------------------------------------------------------------- 2. max_rows=N, max_groups="auto"

_GROUPS_AUTO, _NO_GROUPS = dp.PrivacyUnit("u", max_rows=2, max_groups="auto"), dp.PrivacyUnit("u", max_rows=2)
_PURE, _APPROX, _TOTAL = dp.PureDP(1), dp.ApproxDP(1, 1e-6), dp.ApproxDP(100, 1e-3)


def _count(s: dp.Session) -> dp.Query:
    return s.table("t").agg(dp.len())


def _channel(s: dp.Session, **options: Any) -> Any:
    return s.target_charging(epsilon=1, max_hits=2, delta=1e-6, **options).__enter__()


def _revise(s: dp.Session) -> Any:
    ch = _channel(s)
    ch.conditional_release(_count(s), dp.above(10**6), name="n")
    return ch.revise("n", dp.below(10**6))


_UNGROUPED: dict[str, tuple[dp.Budget, Callable[[dp.Session], Any]]] = {
    "collect": (_TOTAL, lambda s: s.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 50))).collect(_PURE)),
    "collect_ci": (_TOTAL, lambda s: _count(s).collect(_PURE, ci=0.9)),
    "collect_diagnostics": (_TOTAL, lambda s: _count(s).collect(_PURE, diagnostics=True)),
    "collect_accuracy": (_TOTAL, lambda s: _count(s).collect(accuracy=dp.Accuracy(half_width=50))),
    "cost_accuracy": (_TOTAL, lambda s: _count(s).cost(accuracy=dp.Accuracy(half_width=50))),
    "plan": (_TOTAL, lambda s: _count(s).plan(_PURE).cost),
    "sql": (_TOTAL, lambda s: s.sql("SELECT COUNT(*) AS n, SUM(CLAMP(x, 0, 50)) AS x FROM t").collect(_PURE)),
    "run_until": (_TOTAL, lambda s: run_until([_count(s)] * 2, _PURE, stop=lambda r: False)),
    "gated_release": (_TOTAL, lambda s: gated_release(_count(s), _PURE, _count(s), 10, _PURE)),
    "robust_median": (_TOTAL, lambda s: robust_median(s.table("t"), "x", (0, 100)).collect(_APPROX)),
    "bounds": (_TOTAL, lambda s: s.table("t").bounds("x").collect(_APPROX)),
    "interior_point": (_TOTAL, lambda s: s.table("t").interior_point("x", bounds=(0, 100)).collect(_APPROX)),
    "sparse_vector": (_TOTAL, lambda s: s.sparse_vector(threshold=10, max_positives=1, budget=_PURE).test(_count(s))),
    "sparse_vector_gaussian": (_TOTAL, lambda s: s.sparse_vector(
        threshold=10, max_positives=1, budget=dp.ZCDP(0.1), noise="gaussian", max_length=2).test(_count(s))),
    "channel_test": (_TOTAL, lambda s: _channel(s).test(_count(s), threshold=10)),
    "channel_conditional_release": (_TOTAL, lambda s: _channel(s).conditional_release(_count(s), dp.above(10))),
    "channel_between": (_TOTAL, lambda s: _channel(s).between(_count(s), 0, 10**6)),
    "channel_boundary_test": (_TOTAL, lambda s: _channel(s, min_q=0.18).boundary_test(_count(s), 10)),
    "channel_select_best": (_TOTAL, lambda s: _channel(s).select_best([_count(s), _count(s)])),
    "channel_revise": (_TOTAL, _revise),
    "individual_filter": (dp.ZCDP(5), lambda s: s.individual_filter(dp.ZCDP(1)).collect(_count(s), dp.ZCDP(0.5))),
}


@pytest.mark.parametrize("entry", sorted(_UNGROUPED))
def test_an_ungrouped_query_under_max_groups_auto_runs_as_under_no_max_groups(entry: str) -> None:
    """``max_groups`` bounds the groups one unit touches: without a group-by it bounds nothing. Under
    ``dp.PrivacyUnit("u", max_rows=2, max_groups="auto")`` an ungrouped query ran through ``collect``, SQL,
    ``run_until``, the robust median and ``frame.bounds`` (bounded by ``max_rows`` alone), but was refused by
    ``gated_release``, ``Query.plan`` and ``collect(accuracy=...)`` ("this query chooses its bounds when it runs",
    naming ``budget``), and by the sparse vector, target-charging channels and the individual filter when they were
    opened. Every entry point now runs it exactly as under ``dp.PrivacyUnit("u", max_rows=2)``: the same seed gives
    the same release, charge and ledger (the backends read alike: ``test_review35a.py``)."""
    budget, call = _UNGROUPED[entry]
    data = pl.DataFrame({"u": [i % 150 for i in range(300)], "x": [float(i % 50) for i in range(300)]})
    seen = []
    for unit in (_GROUPS_AUTO, _NO_GROUPS):
        sess = dp.Session({"t": data}, privacy_unit=unit, budget=budget, seed=0,
                          accountant="rdp" if entry == "sparse_vector_gaussian" else None)
        out = call(sess)
        seen.append((str(out), sess.history().drop("id").rows()))
    assert seen[0] == seen[1]
    assert all(status == "committed" or entry.startswith(("channel", "sparse")) for status, *_ in seen[0][1])


def _grouped(s: dp.Session) -> dp.Query:
    return s.table("t").group_by("g", keys=[0, 1, 2]).agg(dp.len())


_GROUPED: dict[str, Callable[[dp.Session], Any]] = {
    "plan": lambda s: _grouped(s).plan(_PURE),
    "gated_release": lambda s: gated_release(_grouped(s), _PURE, _count(s), 10, _PURE),
    "individual_filter": lambda s: s.individual_filter(dp.ZCDP(1)).collect(_grouped(s), dp.ZCDP(0.5)),
}


@pytest.mark.parametrize("entry", sorted(_GROUPED))
def test_a_grouped_query_that_cannot_tune_max_groups_is_refused_naming_the_privacy_unit(entry: str) -> None:
    """With a group-by, ``max_groups="auto"`` is chosen by ``agg``'s own tuning stage; an entry point that needs the
    query's plan before it runs cannot use it. The refusal named ``budget`` ("use explain(budget) and cost(budget)")
    — not the argument to change. It now names ``privacy_unit`` and the item chosen, free (the individual filter's
    own charge, made when it opened, is all the history holds)."""
    data = pl.DataFrame({"u": range(30), "g": [i % 3 for i in range(30)]})
    sess = dp.Session({"t": data}, privacy_unit=_GROUPS_AUTO, budget=dp.ZCDP(5), seed=0)
    with pytest.raises(dp.PlanError, match=r"privacy_unit: this query chooses max_groups when it runs.* Fix: .*"
                                           r"max_groups='auto' is read only by a query with a group-by"):
        _GROUPED[entry](sess)
    assert sess.history().height == (entry == "individual_filter")


# ---------------------------------------------------------------------------- 3. tuned paths on other unit types

#: Unit column types the composed oracle never drew (its ``u`` is Int64): (dtype, D's ids from its ints, ids of the
#: added unit — extremes of the type, and ids a case fold, a trailing space or a float rounding would merge).
_UNIT_TYPES: dict[str, tuple[pl.DataType, Callable[[int], Any], list[Any]]] = {
    "float": (pl.Float64(), lambda u: u * 0.5 - 3.25, [math.nan, math.inf, -math.inf, 5e-324, 4996.75]),
    "string": (pl.String(), lambda u: f"u{u}", ["", "U0", "u0 ", "x" * 10_000, "u10000"]),
    "int128": (pl.Int128(), lambda u: u + 2**100, [2**127 - 1, -(2**127), 2**100 + 10_000]),
    "uint64": (pl.UInt64(), lambda u: u + 2**63, [2**64 - 1, 2**63 - 1, 0]),
}


def _retyped(frame: pl.DataFrame, kind: str, added: Any) -> pl.DataFrame:
    """``frame`` with its unit column in ``kind``'s type: D's ids mapped, the added unit's (u = 10,000) ``added``."""
    dtype, of, _ = _UNIT_TYPES[kind]
    return frame.with_columns(pl.Series("u", [added if u == 10_000 else of(u) for u in frame["u"]], dtype=dtype))


def _on_both(d: pl.DataFrame, d_plus: pl.DataFrame, backend: str, unit: dp.PrivacyUnit,
             observe: Callable[[dp.Session], Any]) -> list[Any]:
    outs = []
    for data in (d, d_plus):
        try:
            sess = dp.Session({"t": data}, privacy_unit=unit, budget=dp.ApproxDP(10**9, 0.5), backend=backend, seed=0)
        except dp.DPFrameError as e:     # the type alone (Int128 on DuckDB): refused on both
            outs.append(("session", type(e).__name__, str(e)))
            continue
        outs.append(observe(sess))
    return outs


def _tuned_queries(s: dp.Session) -> tuple[Any, ...]:
    t = s.table("t")
    seen: list[Any] = []
    for query in (lambda: t.agg(dp.len(), dp.sum("x", bounds="auto")).collect(_PURE),
                  lambda: t.group_by("n", keys=[0, 1, 2, 3, 4]).agg(dp.len(), dp.mean("x", bounds="auto")).collect(
                      _PURE, diagnostics=True).frame.columns,
                  lambda: t.group_by("c").agg(dp.count_units()).collect(_APPROX).columns):
        try:
            out = query()
            seen.append(("released", getattr(out, "columns", out) if not isinstance(out, list) else out))
        except dp.DPFrameError as e:
            seen.append((type(e).__name__, str(e)))
    return (*seen, s.history().drop("id").rows())


def _tuned_grouped(s: dp.Session) -> tuple[Any, ...]:
    out = s.table("t").group_by("n", keys=[0, 1, 2, 3, 4]).agg(dp.len(), dp.mean("x", bounds="auto")).collect(_PURE)
    return out.columns, s.history().drop("id").rows()


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("kind", sorted(_UNIT_TYPES))
def test_a_tuned_query_on_another_unit_type_is_charged_alike_on_neighbouring_datasets(kind: str, backend: str
                                                                                     ) -> None:
    """The fast default-run form of the test below: one query tuning ``max_rows``, ``max_groups`` and ``bounds``,
    an added unit of 300 rows whose id is the type's first extreme."""
    from .composed import base, neighbours

    extra = pl.concat([base().head(1)] * 300).with_columns(u=pl.lit(10_000, pl.Int64))
    d, d_plus = neighbours(extra)
    added = _UNIT_TYPES[kind][2][0]
    unit = dp.PrivacyUnit("u", max_rows="auto", max_groups="auto")
    outs = _on_both(_retyped(d, kind, added), _retyped(d_plus, kind, added), backend, unit, _tuned_grouped)
    assert outs[0] == outs[1], f"{kind} {backend}: {outs}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("kind", sorted(_UNIT_TYPES))
def test_tuned_bounds_on_other_unit_types_behave_alike_on_neighbouring_datasets(kind: str, backend: str) -> None:
    """``max_rows="auto"``, ``max_groups="auto"`` and ``bounds="auto"`` read a histogram of rows and groups per unit
    (grouping by the unit column without bounding) before the release: on a float, string, 128-bit or UInt64 unit
    column, with an added unit whose id is an extreme of its type (NaN, ±inf, a subnormal, "", a 10,000-character
    string, 2¹²⁷ − 1, 2⁶⁴ − 1 ...) holding 300 rows, D and D′ give the same outcomes, releases of the same shape and
    the same charges (the DuckDB backend refuses an Int128 unit on both, by type). The composed oracle's unit column
    was always Int64; nothing broke here (every extreme id, a unit of 1 and of 300 rows: slow)."""
    from .composed import base, neighbours

    for rows in (1, 300):
        extra = pl.concat([base().head(1)] * rows).with_columns(u=pl.lit(10_000, pl.Int64))
        d, d_plus = neighbours(extra)
        for added in _UNIT_TYPES[kind][2]:
            for unit in (dp.PrivacyUnit("u", max_rows="auto", max_groups="auto"), _GROUPS_AUTO):
                outs = _on_both(_retyped(d, kind, added), _retyped(d_plus, kind, added), backend, unit, _tuned_queries)
                assert outs[0] == outs[1], f"{kind} {backend} {unit} {added!r:.20}: {outs}"
                assert outs[0][0] == "session" or all(o[0] == "released" for o in outs[0][:-1]), outs[0]
