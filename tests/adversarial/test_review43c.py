"""Review 43c: the analyst as an adversary against stop 43's changes (the diff 2f6178d..main).

Scope:

* ``dpframe.backends._bounding.sort``: Polars' sort (a read-only result) or numpy's, whichever is faster here.
  Every caller (contribution bounding, ``polars_lists._sorted_by_id``, ``polars_windows``' packed and ungrouped
  sorts) must release the same values with either engine, from the first key on.
* ``dpframe.mechanism.deferred``: a plan's deferred containers read from two threads at once.
* ``dpframe.sql.parse``: the per-text cached kinds must never let a text skip a refusal that the full walk of its
  tree makes (TOP_K, window functions, subqueries, however spelled or placed).
* ``dpframe.accounting.ledger``: the kept composed total, with two sessions on one file, settlements and failures.
* ``RobustMedian.explain(budget, format=)``: free, and refused free without a budget or with a bad format.
"""

from __future__ import annotations

import sys
import threading
from fractions import Fraction
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.backends import _bounding, polars_windows
from dpframe.mechanism.deferred import DeferredMapping, DeferredTuple


# --------------------------------------------------------------------------- deferred containers, two threads
def _stop_between_reads(container: Any, other_done: threading.Event, paused: threading.Event) -> Any:
    """Read ``container`` on this thread, paused right after its first look at the built value.

    The pause lasts until ``other_done``: another thread's read builds the value meanwhile (the check-then-act
    window of a lazy build).
    """
    items = type(container)._items.__code__

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is not items:
            return None

        def line(frame: FrameType, event: str, arg: object) -> Any:
            if (
                event == "line"
                and "built" in frame.f_locals
                and frame.f_locals["built"] is None
                and not paused.is_set()
            ):
                paused.set()
                other_done.wait(10)
            return line

        return line

    sys.settrace(trace)
    try:
        return list(container)
    finally:
        sys.settrace(None)


@pytest.mark.parametrize("kind", [DeferredMapping, DeferredTuple])
def test_a_deferred_read_on_two_threads_at_once_answers_both(kind: type) -> None:
    # Two threads read one plan's accuracy texts (explain() on one, a curve accountant on another): the second
    # looked at the built value before the first finished building it, then found its build handed on.
    container = kind(lambda: {"len": "±3 (95%)"} if kind is DeferredMapping else ("curve",))
    other_done, paused = threading.Event(), threading.Event()
    got: list[Any] = []
    failed: list[BaseException] = []

    def slow() -> None:
        try:
            got.append(_stop_between_reads(container, other_done, paused))
        except BaseException as e:  # noqa: BLE001 - the failure is what the test reports
            failed.append(e)

    worker = threading.Thread(target=slow)
    worker.start()
    assert paused.wait(10)
    first = list(container)  # builds it, while the worker waits between its two looks
    other_done.set()
    worker.join(10)
    assert not failed, failed
    assert got == [first]


# --------------------------------------------------------------------------- the sort engine: same releases
def _released(engine: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Same-seed releases that sort through ``_bounding.sort`` (bounding, listed codes, rank windows)."""
    monkeypatch.setattr(_bounding, "SORT_ENGINE", engine)
    monkeypatch.setattr(_bounding, "POLARS_SORT_FROM", 0)  # every sort, from the first key, in that engine
    monkeypatch.setattr(polars_windows, "WHOLE_BELOW", 0)  # rank windows on a small table too,
    monkeypatch.setattr(polars_windows, "WORTH", 1.0)  # wide ones included
    rng = np.random.default_rng(43)
    n = 30_000
    data = pl.DataFrame(
        {
            "user": rng.integers(0, n // 4, n),  # units of 4 rows on average: bounding drops some
            "name": rng.choice(["ann", "bo", "cy", "di", "ed"] * 20 + [f"u{i}" for i in range(30)], n),
            "g": rng.choice(["a", "b", "c"], n),
            "gi": rng.integers(0, 5, n),
            "x": rng.integers(-(10**6), 10**6, n),
            "y": rng.normal(0, 100, n),
        }
    )
    out: list[Any] = []
    for unit in ("user", "name"):
        sess = dp.Session(
            {"t": data},
            privacy_unit=dp.PrivacyUnit(unit, max_rows=5),
            budget=dp.PureDP(1000),
            seed=3,
            backend=backend,
        )
        t = sess.table("t")
        out.append(t.agg(dp.len(), dp.sum("x", bounds=(-(10**6), 10**6))).collect(dp.PureDP(1)).rows())
        out.append(t.agg(dp.quantile("x", [0.1, 0.5, 0.9], bounds=(-(10**6), 10**6))).collect(dp.PureDP(10)).rows())
        out.append(
            t.group_by("g", keys=["a", "b", "c"])
            .agg(dp.quantile("y", [0.25, 0.75], bounds=(-300, 300)), dp.median("x", bounds=(-(10**6), 10**6)))
            .collect(dp.PureDP(10))
            .sort("g")
            .rows()
        )
        by_int = t.group_by("gi", keys=list(range(5))).agg(dp.median("y", bounds=(-300, 300)))
        out.append(by_int.collect(dp.PureDP(10)).sort("gi").rows())
    return out


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_release_is_the_same_whichever_engine_sorts(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Polars' sort hands back a read-only array: a caller that wrote into it would fail on one engine only.
    numpy = _released("numpy", backend, monkeypatch)
    assert _released("polars", backend, monkeypatch) == numpy


@pytest.mark.parametrize("engine", ["numpy", "polars"])
def test_the_packed_sorts_of_lists_and_windows_are_exact_at_the_extremes(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpframe.backends.polars_lists import _sorted_by_id
    from dpframe.backends.polars_windows import _sort_by_group, sort_each

    monkeypatch.setattr(_bounding, "SORT_ENGINE", engine)
    monkeypatch.setattr(_bounding, "POLARS_SORT_FROM", 0)
    rng = np.random.default_rng(7)
    big = np.iinfo(np.int64)
    for low, high in [(0, 1), (-5, 5), (big.min, big.min + 2**40), (big.max - 2**40, big.max), (-(2**61), 2**61)]:
        values = rng.integers(low, high, 500, dtype=np.int64, endpoint=True)
        group = np.sort(rng.integers(0, 9, values.size))
        want = values[np.lexsort((values, group))]
        got = _sort_by_group(values.copy(), group, 9)
        assert got.dtype == np.int64 and np.array_equal(got, want)
        ids = rng.integers(0, 9, values.size)
        ordered, offsets = _sorted_by_id(ids, pl.Series(values), 9)
        assert np.array_equal(ordered, values[np.lexsort((values, ids))])
        assert offsets.tolist() == [0, *np.cumsum(np.bincount(ids, minlength=9)).tolist()]
    lists = pl.Series("k", [[3, -(2**62), 2**62, 0], [], [9, 9, -1], [big.min, big.max]])
    assert sort_each(lists).to_list() == [sorted(v) for v in lists.to_list()]


# --------------------------------------------------------------------------- SQL: the cached kinds skip nothing
_SPELLED = [
    "SELECT g, TOP_K(COUNT(*), 2) FROM t GROUP BY g",
    "SELECT g FROM t GROUP BY g HAVING top_k(COUNT(*), 2)",
    "SELECT g FROM t GROUP BY g HAVING Top_K(COUNT(*), 2)",
    'SELECT g FROM t GROUP BY g HAVING "TOP_K"(COUNT(*), 2)',
    "SELECT g FROM t GROUP BY g HAVING main.top_k(COUNT(*), 2)",
    "SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(*), 2) AND COUNT(*) > 1",
    "SELECT g FROM t GROUP BY g HAVING NOT TOP_K(COUNT(*), 2)",
    "SELECT g, COUNT(*) FROM t GROUP BY g ORDER BY TOP_K(COUNT(*), 2)",
    "WITH c AS (SELECT g, x FROM t WHERE TOP_K(x, 1)) SELECT COUNT(*) FROM c",
    "SELECT COUNT(*) FROM t WHERE x IN (SELECT TOP_K(x, 1) FROM t)",
    "SELECT g, TOP_K(COUNT(*), 2) OVER () FROM t GROUP BY g",
    "SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(*), 2) OVER ()",
    "-- TOP_K\nSELECT g, COUNT(*) FROM t GROUP BY g",
    "SELECT SUM(x) OVER () FROM t",
    "SELECT g, COUNT(*) OVER (PARTITION BY g) FROM t GROUP BY g",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING ROW_NUMBER() OVER () < 3",
    "SELECT g, COUNT(*) AS n FROM t GROUP BY g ORDER BY RANK() OVER (ORDER BY COUNT(*))",
    "SELECT g, COUNT(*) FROM t GROUP BY g QUALIFY ROW_NUMBER() OVER () = 1",
    "SELECT g, COUNT(*), SUM(COUNT(*)) OVER w FROM t GROUP BY g WINDOW w AS ()",
    "SELECT g, COUNT(*) + LAG(COUNT(*)) OVER (ORDER BY g) FROM t GROUP BY g",
    "SELECT g, (SELECT 1) FROM t GROUP BY g",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING COUNT(*) > (SELECT COUNT(*) FROM t)",
    "SELECT g, COUNT(*) FROM t GROUP BY g ORDER BY (SELECT 1)",
    "SELECT g, COUNT(*) FROM t GROUP BY g HAVING EXISTS (SELECT 1 FROM t)",
    "SELECT g, COUNT(*) + (SELECT MAX(x) FROM t) FROM t GROUP BY g",
    "SELECT COUNT(*) FROM t WHERE x > (SELECT AVG(x) FROM t)",
    "EXPLAIN SELECT g, COUNT(*) OVER () FROM t GROUP BY g",
    "explain SELECT g, TOP_K(COUNT(*), 2) FROM t GROUP BY g",
    "SELECT g, COUNT(*) FROM t GROUP BY g",
    "SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(*), 2)",
]


def _outcome(sess: dp.Session, text: str) -> tuple[str, str]:
    try:
        q = sess.sql(text)
        return "built", str(q.explain(dp.ApproxDP(1, 1e-7)))
    except Exception as e:  # noqa: BLE001 - the refusal itself is what is compared
        return type(e).__name__, str(e)


def test_a_text_is_refused_as_its_full_walk_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each text twice (the second from the per-text cache), then with the kinds unknown (every check walks the
    # whole tree, as a parse built by hand does): the same query or the same refusal, word for word.
    import dataclasses

    import dpframe.sql.query as query
    from dpframe.sql.parse import parse

    data = pl.DataFrame({"g": ["a", "b", "a", "c"], "x": [1.0, 2.0, 3.0, 4.0]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-5), seed=1)
    cached = [(_outcome(sess, text), _outcome(sess, text)) for text in _SPELLED]
    monkeypatch.setattr(query, "parse", lambda text: dataclasses.replace(parse(text), kinds=None))
    walked = [_outcome(sess, text) for text in _SPELLED]
    for text, (first, again), full in zip(_SPELLED, cached, walked):
        assert first == again == full, text
    assert sum(kind == "built" for kind, _ in walked) >= 2  # the corpus holds queries that run, too


# --------------------------------------------------------------------------- ledger: the kept total loses nothing
def _ledger_run(path: Path, accountant: Any, costs: list[Any], settle_to: Any) -> list[Any]:
    """Two sessions on one file, interleaved: reserves, commits, failures, refusals, settlements, a close."""
    from dpframe.accounting.ledger import Ledger

    mine, theirs = Ledger(path, accountant()), Ledger(path, accountant())
    seen: list[Any] = []
    for i, cost in enumerate(costs):
        led = (mine, theirs)[i % 3 == 1]
        try:
            cid = led.reserve(cost, f"q{i}", "m")
        except dp.BudgetExceededError:
            seen.append("refused")
            continue
        if i % 4 == 0:
            led.fail(cid, "boom")
        elif i % 5 == 2 and settle_to is not None:
            theirs.settle(cid, settle_to, "cell")
        else:
            led.commit(cid)
        seen += [mine.spent(), theirs.spent()]
    theirs.close()
    seen.append(mine.spent())
    again = Ledger(path, accountant())
    seen.append(again.spent())
    again.close()
    mine.close()
    return seen


@pytest.mark.parametrize("notion", ["basic", "rdp"])
def test_the_kept_total_is_the_total_read_from_the_file(
    notion: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same operations with the total kept after each reserve and with every charge read back from the file:
    # every total either session reads, bit for bit (an RDP charge's floats included), and a fresh read agrees.
    import dpframe.accounting.ledger as ledger
    from dpframe.accounting import BasicAccountant, RDPAccountant, RDPCharge, curves

    if notion == "basic":
        costs: list[Any] = [dp.ApproxDP(Fraction(1, 7 + i % 5), Fraction(1, 10**9)) for i in range(24)]

        def accountant() -> Any:
            return BasicAccountant(dp.ApproxDP(2, 1e-6))

        settle_to: Any = dp.ApproxDP(Fraction(1, 20), Fraction(1, 10**9))  # ε refunded, δ kept
    else:
        costs = [RDPCharge.of([curves.gaussian(3.0 + (i % 4) / 3)]) for i in range(24)]

        def accountant() -> Any:
            return RDPAccountant(dp.ApproxDP(3, 1e-6))

        settle_to = None  # (an RDP ledger settles nothing: ex-post needs additive composition)
    kept = _ledger_run(tmp_path / "kept.ledger", accountant, costs, settle_to)
    monkeypatch.setattr(ledger, "_stored_exactly", lambda charge: False)
    read = _ledger_run(tmp_path / "read.ledger", accountant, costs, settle_to)
    assert kept == read
    assert kept[-1] == kept[-2] and "refused" in kept  # the budget ran out on the way


def test_reserves_on_four_threads_and_two_sessions_are_all_counted(tmp_path: Path) -> None:
    # Two sessions' ledgers on one file, each used by two threads: every reservation that was granted is in
    # every total read afterwards, exactly (Fractions), and no more was granted than the budget.
    from dpframe.accounting import BasicAccountant
    from dpframe.accounting.ledger import Ledger

    path = tmp_path / "budget.ledger"
    ledgers = [Ledger(path, BasicAccountant(dp.PureDP(3))) for _ in range(2)]
    granted: list[Fraction] = []
    lock = threading.Lock()

    def work(led: Ledger, k: int) -> None:
        for i in range(40):
            eps = Fraction(1, 30 + (i * 7 + k) % 11)
            try:
                cid = led.reserve(dp.PureDP(eps), f"t{k}-{i}", "m")
            except dp.BudgetExceededError:
                continue
            with lock:
                granted.append(eps)
            if i % 3:
                led.commit(cid)
            else:
                led.fail(cid, "x")

    errors: list[BaseException] = []

    def run(led: Ledger, k: int) -> None:
        try:
            work(led, k)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(ledgers[k % 2], k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    total = dp.PureDP(sum(granted, Fraction(0)))
    assert len(granted) > 20 and sum(granted) <= 3
    assert all(led.spent() == total for led in ledgers)
    again = Ledger(path, BasicAccountant(dp.PureDP(3)))
    assert again.spent() == total
    for led in [*ledgers, again]:
        led.close()


# --------------------------------------------------------------------------- robust_median's explain
@pytest.mark.parametrize("unit", ["row", "user"])
def test_robust_median_explain_is_the_same_on_neighbouring_data_and_free(unit: str) -> None:
    # The Explanation reads the session's spent budget (public) and the query's public parameters only: on
    # datasets one unit apart, text and JSON are the same, whatever the budget; nothing is charged.
    from dpframe.interactive.ptr import robust_median

    def explained(extra: int) -> list[Any]:
        rows = [(i % 13, float(i % 9)) for i in range(300)] + [(99, 1e6)] * extra
        data = pl.DataFrame(rows, schema=["user", "x"], orient="row")
        privacy_unit = dp.PrivacyUnit.row() if unit == "row" else dp.PrivacyUnit("user", max_rows=3)
        sess = dp.Session({"t": data}, privacy_unit=privacy_unit, budget=dp.ApproxDP(2, 1e-5), seed=5)
        q = robust_median(sess.table("t").filter(pl.col("x") < 5), "x", bounds=(0, 100))
        out = [str(q.explain(b)) for b in (dp.ApproxDP(1, 1e-7), dp.ApproxDP(5, 1e-7))]
        out.append(q.explain(dp.ApproxDP(Fraction(1, 3), 1e-6), format="json"))
        assert sess.history().height == 0
        return out

    assert explained(0) == explained(3)
