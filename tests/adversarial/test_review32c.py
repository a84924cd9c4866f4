"""Review 32c: interactive mechanisms, accounting, session lifecycle, threads and plugins.

The analyst picks every argument, callable, thread and query order, and catches every exception (a
``KeyboardInterrupt`` may land between any two bytecodes). Each test is an attack that broke, kept with
its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import linecache
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from types import FrameType
from typing import Any

import polars as pl
import pytest

import dpframe as dp


def _session(budget: dp.Budget = dp.ApproxDP(100, 1e-5), **kw: Any) -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=0, **kw)


def _all(sess: dp.Session) -> dp.Query:
    return sess.table("t").agg(dp.len())          # 600: far above a threshold of 0


def test_a_sparse_vector_never_answers_past_its_cap_when_closing_failed() -> None:
    """The stream closed itself after its c-th positive by calling ``close()``; the cap was checked only
    there. ``sess.close()`` (public) made that close fail (the refund check reads the ledger), the error
    was caught, and the stream stayed open: ``max_positives=1`` gave 5 "above" answers for the price of
    one (and a ``max_length`` stream ran past its length, which its RDP curve is computed for). A stream
    whose cap is reached, or whose close started, now refuses every test."""
    for kw in ({"max_positives": 1, "budget": dp.PureDP(1)},
               {"max_positives": 5, "budget": dp.ZCDP(1), "noise": "gaussian", "max_length": 2}):
        sess = _session(accountant="rdp") if kw.get("noise") else _session()
        q = _all(sess)
        sv = sess.sparse_vector(threshold=0, **kw)
        sess.close()
        answered = 0
        for _ in range(5):
            try:
                sv.test(q)
                answered += 1
            except dp.DPFrameError:
                pass
        cap = 1 if kw.get("noise") is None else 2
        assert len(sv.answers) <= cap and sv.positives <= kw["max_positives"]
        assert answered <= cap
        assert answered == 0            # review 34c: a closed session's stream reads nothing (it answered the cap)


class _Spy(Fraction):
    """A Fraction whose comparisons record what they are compared with."""

    seen: list[Any] = []

    def __le__(self, other: Any) -> bool:
        _Spy.seen.append(other)
        return Fraction.__le__(self, other)

    def __ge__(self, other: Any) -> bool:
        _Spy.seen.append(other)
        return Fraction.__ge__(self, other)


def test_a_target_built_directly_reads_its_ends_as_plain_fractions() -> None:
    """``Target(lower, upper, inside)`` (``dpframe.interactive.targets``) checked ``isinstance(end, Fraction)``
    and kept the analyst's object: a Fraction subclass's ``__le__`` received every noisy value the channel
    compared with it — unreleased misses, which are free (600 and 603 for two free calls)."""
    from dpframe.interactive.targets import Target

    sess = _session()
    _Spy.seen.clear()
    with sess.target_charging(epsilon=1, max_hits=2, delta=1e-6) as ch:
        assert ch.conditional_release(_all(sess), when=Target(_Spy(10**6), None, True)) is None
        assert ch.conditional_release(_all(sess), when=Target(Fraction(0), _Spy(1), True)) is None
        assert ch.hits == 0
    assert _Spy.seen == []
    target = Target(_Spy(3), _Spy(7), False)
    assert type(target.lower) is Fraction and type(target.upper) is Fraction


def test_an_interrupted_value_release_is_never_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """``close()`` of a sparse vector with ``release=`` measured each positive query with fresh noise and
    stored it; an interrupt landing between two of those measurements (a ``KeyboardInterrupt``, here
    raised where the first value is converted) left the stream open, and the next ``close()`` measured
    every positive query again: two independent noisy values of one query for the charge of one. A close
    that began and did not finish now only commits the reservation in full."""
    from dpframe.interactive.scalar import Scalar

    sess = _session(dp.PureDP(10))
    q = _all(sess)
    sv = sess.sparse_vector(threshold=0, max_positives=2, budget=dp.PureDP(1), release=dp.PureDP(1))
    assert sv.test(q)
    real, calls = Scalar.to_output, []

    def interrupted(self: Scalar, value: int) -> Any:
        calls.append(value)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(self, value)
    monkeypatch.setattr(Scalar, "to_output", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sv.test(q)                    # the second positive closes the stream: its value release is interrupted
    assert sv.close() == {} and sv.closed and len(calls) == 1
    assert sess.history()["status"].to_list() == ["committed"]
    assert sess.spent() == dp.PureDP(2)          # ε₁ + ε₂ + ε₃: charged in full, no refund


def test_the_module_level_grids_the_accountants_decide_by_cannot_be_changed() -> None:
    """``dpframe.accounting.rdp.FILTER_ORDERS`` (public, a writable NumPy array) is the list of orders every
    stored RDP charge is read at: ``FILTER_ORDERS[0] = 256`` re-read the stored ε(1.25) of every charge as
    ε(256), and an RDP session whose (1, 10⁻⁶) budget was exhausted admitted 36 more queries (ε ≈ 1.09 by
    the true orders). The Rényi orders, the Gaussian sparse vector's γ grid and the group-privacy splits
    were writable too (review 31b's guard looked for dicts, lists and sets only). Each is now an array
    over immutable bytes, and every public module-level NumPy array of the engine and its plugins is."""
    import importlib
    import pkgutil

    import numpy as np

    from dpframe.accounting.rdp import FILTER_ORDERS

    data = pl.DataFrame({"u": range(600)})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(1, 1e-6),
                      accountant="rdp", seed=0)
    _ = sess.table("t").agg(dp.len()).collect(budget=dp.ZCDP(0.01))
    spent = sess.spent()
    with pytest.raises(ValueError, match="read-only"):
        FILTER_ORDERS[0] = 256.0
    with pytest.raises(ValueError, match="WRITEABLE"):
        FILTER_ORDERS.flags.writeable = True
    assert sess.spent() == spent and FILTER_ORDERS[0] == 1.25
    writable = []
    for name in ("dpframe", "dpframe_topk", "dpframe_learning", "dpframe_quantiles", "dpframe_aggregates",
                 "dpframe_histogram"):
        package = importlib.import_module(name)
        for module_name in [name, *(m.name for m in pkgutil.walk_packages(package.__path__, name + "."))]:
            if module_name.startswith("dpframe.testing") or module_name.endswith(".audits") or ".tests" in module_name:
                continue
            module = importlib.import_module(module_name)
            writable += [f"{module_name}.{attr}" for attr, value in vars(module).items()
                         if isinstance(value, np.ndarray) and (value.flags.writeable or value.base is None)]
    assert writable == []


def test_a_stop_rule_that_calls_an_open_channel_forfeits_the_refund() -> None:
    """A refund needs its run to have run alone, which was read from the ledger: another row appearing or
    changing status. A target-charging channel (or sparse vector) opened before ``run_until`` adds no row
    per call: a ``stop`` rule that made private calls on it left the ledger unchanged, and the run was
    settled to one step (ε = 1 of 6) while interleaved with the channel. Another reservation still open
    now forfeits the refund too (for a sparse vector's refund as well)."""
    from dpframe.interactive.stopping import run_until

    sess = _session()
    steps = [sess.table("t").filter(pl.col("g") <= g).agg(dp.len()) for g in range(6)]
    with sess.target_charging(epsilon=1, max_hits=3, delta=1e-6) as ch:
        def stop(results: list[pl.DataFrame]) -> bool:
            ch.test(_all(sess), threshold=10**6)          # a private call, inside run_until's reservation
            return True
        assert len(run_until(steps, dp.PureDP(1), stop=stop)) == 1
    assert ch.calls == 1
    assert sess.history()["cost"].to_list()[1] == "ε=6, δ=0"      # the worst cell: all six steps
    alone = _session()
    assert len(run_until([_all(alone)] * 6, dp.PureDP(1), stop=lambda results: True)) == 1
    assert alone.spent() == dp.ApproxDP(1, 0)                        # the refund where it did run alone


def test_run_until_reads_its_delta_once() -> None:
    """``run_until(..., delta=d)`` asked ``d == 0`` twice: once for the cells (ε_j by optimal composition at
    δ/m) and once for the spec's δ. A float subclass that said "not 0" then "0" had 30 steps of ε = 1/2
    priced at ε = 8.5 with δ = 1/2 of slack, and charged (8.5, δ = 0). δ is now read once, as a number."""
    from dpframe.interactive.stopping import run_until

    class Flip(float):
        answers = iter([False, True, True, True])

        def __eq__(self, other: object) -> bool:
            return next(Flip.answers)

        __hash__ = float.__hash__

    sess = _session()
    with pytest.raises(dp.BudgetExceededError, match="δ=1/2"):   # the δ the cells were priced with
        run_until([_all(sess)] * 30, dp.PureDP(0.5), stop=lambda results: False, delta=Flip(0.5), refund=False)
    assert sess.history().height == 0


@contextmanager
def _interrupt_in(function: Callable[..., Any], when: Callable[[str], bool]) -> Iterator[list[str]]:
    """A ``KeyboardInterrupt`` at the first line of ``function`` for which ``when(line text)`` holds — where a
    signal (``signal.setitimer``, ``_thread.interrupt_main``) could land; yields the lines it fired on."""
    code, fired, previous = function.__code__, [], sys.gettrace()

    def local(frame: FrameType, event: str, arg: object) -> Any:
        line = linecache.getline(code.co_filename, frame.f_lineno)
        if event == "line" and not fired and when(line):
            fired.append(line.strip())
            raise KeyboardInterrupt
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
    try:
        yield fired
    finally:
        sys.settrace(previous)      # a coverage tracer, if any, goes on


def test_a_per_unit_channel_never_lets_a_unit_past_its_hits_after_an_interrupt() -> None:
    """A per-unit channel counted each unit's hits, then cached the set of exhausted units (those at τ hits)
    that later calls leave out. An interrupt between the two left the counts updated and the cache stale:
    with ``max_hits=1``, every unit of the interrupted hit took part in the next call and was charged a
    second hit. The exhausted units are now read from the counts at each call."""
    from dpframe.interactive.tct import TargetChargingChannel

    data = pl.DataFrame({"u": [i // 2 for i in range(600)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(100, 1e-5),
                      seed=0)
    q = sess.table("t").agg(dp.len())
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6, per_unit=True) as ch:
        counted = ch._unit_hits        # the channel's private counts (read here to check them, never handed out)

        def after_the_counts(line: str) -> bool:
            return bool(counted) and not any(s in line for s in ("self._unit_hits[u]", "for u in", "per_unit"))
        with _interrupt_in(TargetChargingChannel._hit, after_the_counts) as fired, pytest.raises(KeyboardInterrupt):
            ch.test(q, threshold=0)
        assert fired and len(counted) == 300 and max(counted.values()) == 1
        ch.test(q, threshold=0)                        # every unit is left out: it tests 0 + noise
        assert max(counted.values()) == 1              # no unit pays a second hit


def test_run_until_runs_the_steps_it_checked() -> None:
    """``run_until`` checked its ``steps`` (every item a query of one session), then iterated them again to
    run: a ``Sequence`` whose ``__iter__`` gave the checked queries twice, then another session's query, ran
    ``filter(2 ** x > 0)`` — built on the analyst's own session, where ``x`` is Float64 and the power is
    total — on this session's Int64 ``x``, where it fails exactly when some ``x`` is negative: released on
    D, "the query failed while running" on D′ (one unit with x = -5). The steps are read once."""
    from collections.abc import Sequence

    from dpframe.interactive.stopping import run_until

    class Swapped(Sequence[dp.Query]):
        def __init__(self, checked: list[dp.Query], run: list[dp.Query]) -> None:
            self.checked, self.run, self.reads = checked, run, 0

        def __len__(self) -> int:
            return len(self.checked)

        def __getitem__(self, i: Any) -> Any:
            return self.checked[i]

        def __iter__(self) -> Iterator[dp.Query]:
            self.reads += 1
            return iter(self.checked if self.reads <= 2 else self.run)

    outcomes = []
    for neighbour in ([], [-5]):
        sess = dp.Session({"t": pl.DataFrame({"x": list(range(300)) + neighbour})}, privacy_unit=dp.PrivacyUnit.row(),
                          budget=dp.PureDP(10), seed=0)
        mine = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
        good = sess.table("t").agg(dp.len())
        evil = mine.table("t").filter(pl.lit(2).pow(pl.col("x")) > 0).agg(dp.len())
        try:
            outcomes.append(len(run_until(Swapped([good, good], [good, evil]), dp.PureDP(1), stop=lambda r: False)))
        except dp.DPFrameError as e:
            outcomes.append(str(e))
        assert sess.history()["status"].to_list() == ["committed"]
    assert outcomes == [2, 2]


def test_a_forked_child_cannot_charge_the_parents_ledger_again() -> None:
    """``os.fork()`` copies an in-memory ledger: the child and the parent would each spend the whole budget
    (review 32c's note; in practice the child hung inside Polars, which is luck, not a defence). A ledger
    now refuses every call from a process other than the one that created it."""
    import os

    ledger = dp.accounting.Ledger(None, dp.accounting.BasicAccountant(dp.PureDP(1)))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # the child: only SQLite and Python, then exit at once
        outcome = b"charged"
        try:
            ledger.reserve(dp.PureDP(1), "q", "m")
        except dp.LedgerError:
            outcome = b"refused"
        except BaseException:  # noqa: BLE001 — anything else is a failure of the test
            outcome = b"other"
        os.write(write, outcome)
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"refused"
    os.close(read)
    ledger.reserve(dp.PureDP(1), "q", "m")        # the parent's budget is whole


def test_a_forked_child_cannot_read_through_an_open_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sparse vector's budget was reserved in the parent: its tests touch no ledger, so in a fork they would
    answer past the cap the parent also answers to. Every private read refuses outside the creating process
    (simulated here by another ``getpid``: Polars' threads do not survive a real fork)."""
    import os

    sess = _session(dp.PureDP(10))
    stream = sess.sparse_vector(threshold=0, max_positives=1, budget=dp.PureDP(1))
    real = os.getpid()
    monkeypatch.setattr(dp.accounting.ledger.os, "getpid", lambda: real + 1)
    with pytest.raises(dp.DPFrameError, match="another process"):
        stream.test(_all(sess))
    with pytest.raises(dp.LedgerError, match="another process"):
        _all(sess).collect(dp.PureDP(1))


def test_quantile_reads_its_probabilities_once() -> None:
    """``dp.quantile`` validated ``q`` by iterating it, then iterated it again to store it: a list subclass
    whose second ``__iter__`` gave other numbers stored [1.0, 0.5] after [0.001, 0.0005] were checked (the
    plan's own check refused only values outside [0, 1]). ``q`` is now read once."""
    class Flip(list[float]):
        calls = 0

        def __iter__(self) -> Iterator[float]:
            Flip.calls += 1
            values = list.__iter__(self) if Flip.calls == 1 else iter([1.0, 0.5])
            return iter(values)

    measure = dp.quantile("x", Flip([0.001, 0.0005]), bounds=(0, 50))
    assert measure.option("q") == (0.001, 0.0005)
