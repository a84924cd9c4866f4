"""Review 32c: interactive mechanisms, accounting, session lifecycle, threads and plugins.

The analyst picks every argument, callable, thread and query order, and catches every exception (a
``KeyboardInterrupt`` may land between any two bytecodes). Each test is an attack that broke, kept with
its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from fractions import Fraction
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
        assert len(sv.answers) == cap and sv.positives <= kw["max_positives"]
        assert answered <= cap


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
