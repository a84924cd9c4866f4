"""Every failure inside an interactive call is caught, charged, and closes the object (issue 16, finding 2).

A failure while a stream, channel or filter reads private data — a Rust panic (pyo3's
``PanicException`` is a ``BaseException``), any other ``BaseException``, an ordinary exception — is
itself an output that may depend on the data. So: the caller sees a dpframe error naming the type only
(``KeyboardInterrupt``/``SystemExit`` are re-raised as themselves), the ledger row is marked
``failed``, and the object closes charged in full: no further call, no refund on ``close()``. Before,
a panic left the row ``reserved`` and the sparse vector open, refunding on close.

The failures are injected into the backend's ``statistics`` (so they do not depend on which
expressions the planner refuses); one test also uses a real polars panic, which is either refused when
the query is built (nothing charged) or caught like the injected ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest
from polars.exceptions import PanicException

import dpframe as dp
from dpframe.interactive.boundary import q_boundary


class Injected(BaseException):
    """A failure that is not an ``Exception`` (like pyo3's ``PanicException``)."""


FAILURES = [Injected("secret 1234"), PanicException("secret 1234"), RuntimeError("secret 1234")]


def _session(budget: dp.Budget = dp.ApproxDP(10**4, 1e-5), **kw: Any) -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=budget, seed=0, **kw)


def _q(sess: dp.Session, g: int = 5) -> dp.Query:
    return sess.table("t").filter(pl.col("g") <= g).agg(dp.len())


class _Breaker:
    """Makes the session's backend raise ``failure`` from ``statistics`` once switched on."""

    def __init__(self, sess: dp.Session, monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
        self.on = False
        backend = sess._catalog.default_backend
        real = backend.statistics

        def statistics(request: Any) -> Any:
            if self.on:
                raise failure
            return real(request)
        monkeypatch.setattr(backend, "statistics", statistics)


def _expect_failure(call: Callable[[], Any], failure: BaseException) -> None:
    """``call`` raises a dpframe error naming only the failure's type (or re-raises an interrupt)."""
    if isinstance(failure, KeyboardInterrupt | SystemExit):
        with pytest.raises(type(failure)):
            call()
        return
    with pytest.raises(dp.DPFrameError, match=type(failure).__name__) as info:
        call()
    assert "secret" not in str(info.value) and info.value.__cause__ is None


def _statuses(sess: dp.Session) -> list[str]:
    return sess.history()["status"].to_list()


@pytest.mark.parametrize("failure", [*FAILURES, KeyboardInterrupt()], ids=lambda f: type(f).__name__)
def test_sparse_vector_failure_closes_it_charged_in_full(monkeypatch: pytest.MonkeyPatch,
                                                          failure: BaseException) -> None:
    sess = _session(dp.PureDP(10))
    breaker = _Breaker(sess, monkeypatch, failure)
    sv = sess.sparse_vector(threshold=10_000, max_positives=3, budget=dp.PureDP(1))
    assert sv.test(_q(sess)) is False                  # one ordinary answer first
    breaker.on = True
    _expect_failure(lambda: sv.test(_q(sess)), failure)
    breaker.on = False
    assert sv.closed and _statuses(sess) == ["failed"]
    with pytest.raises(dp.DPFrameError, match="closed"):
        sv.test(_q(sess))
    sv.close()                                          # no refund after a failure, ever
    assert sess.spent() == dp.PureDP(1) == sv.charged() and _statuses(sess) == ["failed"]


@pytest.mark.parametrize("failure", FAILURES, ids=lambda f: type(f).__name__)
def test_sparse_vector_failure_while_releasing_values_keeps_everything_charged(
        monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    sess = _session(dp.PureDP(10))
    breaker = _Breaker(sess, monkeypatch, failure)
    sv = sess.sparse_vector(threshold=0, max_positives=3, budget=dp.PureDP(1), release=dp.PureDP(1))
    assert sv.test(_q(sess)) is True
    breaker.on = True
    _expect_failure(sv.close, failure)
    assert sv.closed and _statuses(sess) == ["failed"] and sess.spent() == dp.PureDP(2)
    assert sv.close() == {}                             # closing again changes nothing
    assert sess.spent() == dp.PureDP(2)


def _tct_calls(sess: dp.Session) -> dict[str, Callable[[Any], Any]]:
    q = _q(sess)
    return {"test": lambda ch: ch.test(q, threshold=10),
            "conditional_release": lambda ch: ch.conditional_release(q, when=dp.above(10)),
            "between": lambda ch: ch.between(q, 0, 10_000),
            "boundary_test": lambda ch: ch.boundary_test(q, threshold=10),
            "select_best": lambda ch: ch.select_best([q, q], epsilon=0.5)}


@pytest.mark.parametrize("kind", list(_tct_calls(_session())))
@pytest.mark.parametrize("failure", [*FAILURES, KeyboardInterrupt()], ids=lambda f: type(f).__name__)
def test_channel_failure_closes_it(monkeypatch: pytest.MonkeyPatch, failure: BaseException, kind: str) -> None:
    sess = _session()
    breaker = _Breaker(sess, monkeypatch, failure)
    call = _tct_calls(sess)[kind]
    with sess.target_charging(epsilon=1, max_hits=5, delta=1e-6, min_q=q_boundary(0.75)) as ch:
        breaker.on = True
        _expect_failure(lambda: call(ch), failure)
        breaker.on = False
        assert ch.closed and ch.hits == 0 and _statuses(sess) == ["failed"]
        with pytest.raises(dp.DPFrameError, match="closed"):
            ch.test(_q(sess), threshold=10)
    assert sess.spent() == ch.cost and _statuses(sess) == ["failed"]


@pytest.mark.parametrize("failure", [*FAILURES, KeyboardInterrupt()], ids=lambda f: type(f).__name__)
def test_per_unit_channel_failure_closes_it(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    sess = _session()
    breaker = _Breaker(sess, monkeypatch, failure)
    with sess.target_charging(epsilon=1, max_hits=2, delta=1e-6, per_unit=True) as ch:
        assert ch.test(_q(sess), threshold=10)
        breaker.on = True
        _expect_failure(lambda: ch.conditional_release(_q(sess), when=dp.above(10)), failure)
        assert ch.closed and _statuses(sess) == ["failed"]
        assert set(ch._unit_hits.values()) == {1}       # the first hit stays charged to its units


@pytest.mark.parametrize("failure", [*FAILURES, KeyboardInterrupt()], ids=lambda f: type(f).__name__)
def test_individual_filter_failure_closes_it(monkeypatch: pytest.MonkeyPatch, failure: BaseException) -> None:
    sess = _session(dp.ZCDP(10))
    breaker = _Breaker(sess, monkeypatch, failure)
    filt = sess.individual_filter(budget=dp.ZCDP(1))
    filt.collect(_q(sess), budget=dp.ZCDP(0.25))
    spent = dict(filt._spent)
    breaker.on = True
    _expect_failure(lambda: filt.collect(_q(sess), budget=dp.ZCDP(0.25)), failure)
    breaker.on = False
    assert filt.closed and sess.spent() == dp.ZCDP(1)
    with pytest.raises(dp.DPFrameError, match="closed"):
        filt.collect(_q(sess), budget=dp.ZCDP(0.25))
    assert all(filt._spent[u] >= rho for u, rho in spent.items())   # nothing a unit paid is given back


def test_a_real_panic_is_refused_or_charged_never_raw() -> None:
    """A polars panic (a datetime out of chrono's range) never reaches the analyst as itself.

    Today the far datetimes are null before ``month_start`` reads them (``dpframe.plan.totality``), so the
    test runs; were the expression refused when built, nothing would be charged and the stream would stay
    open; were a panic caught while running, the stream would close, charged in full.
    """
    sess = _session(dp.PureDP(10))
    bad = (sess.table("t").with_columns(d=(pl.col("u") * 10**15).cast(pl.Datetime("ms"), strict=False)
                                        .dt.month_start()).filter(pl.col("d").is_not_null()).agg(dp.len()))
    sv = sess.sparse_vector(threshold=10_000, max_positives=3, budget=dp.PureDP(1))
    try:
        answer = sv.test(bad)
    except dp.DPFrameError as info:
        error: dp.DPFrameError | None = info
    else:
        error = None
        assert answer is False and not sv.closed and _statuses(sess) == ["reserved"]
    if error is None:
        pass
    elif "failed while running" in str(error):
        assert sv.closed and _statuses(sess) == ["failed"]
    else:
        assert not sv.closed and _statuses(sess) == ["reserved"]
    sv.close()
    assert sess.spent() == (dp.PureDP(1) if _statuses(sess) == ["failed"] else sv.charged())
