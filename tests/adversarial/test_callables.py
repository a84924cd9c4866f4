"""No analyst callable ever receives a private or unreleased value (issue 16, finding 3).

``conditional_release(q, when=f)`` and ``revise(name, when=f)`` used to call the analyst's ``f`` on the
noisy value *before* deciding whether to release it: ``lambda v: seen.append(v) or False`` recorded
every value and every call missed, so was free. Targets are now declarative (``dp.above``,
``dp.below``, ``dp.between``, ``dp.outside``), evaluated by the library; a callable is refused before
any data is read, with nothing charged.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.scalar import scalar


def _session() -> dp.Session:
    data = pl.DataFrame({"u": range(600), "g": [i % 6 for i in range(600)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(100, 1e-5), seed=0)


def _no_data(*args: object, **kwargs: object) -> None:
    raise AssertionError("private data read for a refused call")


def test_a_when_callable_never_sees_the_value(monkeypatch: pytest.MonkeyPatch) -> None:
    sess = _session()
    q = sess.table("t").agg(dp.len())
    seen: list[Any] = []
    with sess.target_charging(epsilon=1, max_hits=1, delta=1e-6) as ch:
        assert ch.conditional_release(q, when=dp.above(10**9), name="h") is None
        spent = sess.spent()
        with monkeypatch.context() as m:
            m.setattr(dp.Session, "_statistics", _no_data)
            for call in (lambda: ch.conditional_release(q, when=lambda v: seen.append(v) or False),
                         lambda: ch.conditional_release(q, lambda v: seen.append(v) or False, name="x"),
                         lambda: ch.revise("h", when=lambda v: seen.append(v) or False)):
                with pytest.raises(dp.DPFrameError, match="function") as info:
                    call()
                assert info.value.argument == "when" and "dp.above(4000)" in (info.value.fix or "")
        assert seen == [] and ch.calls == 1 and ch.hits == 0 and sess.spent() == spent
        assert ch.revise("h", when=dp.above(0)) == pytest.approx(600, abs=40)   # the named value is still there


def test_no_public_name_reads_an_exact_statistic() -> None:
    """Finding 5: ``scalar(...).exact(sess)`` returned the exact statistic, uncharged. The reads are private."""
    sess = _session()
    sc = scalar(sess, sess.table("t").agg(dp.len()), Fraction(1))
    public = {name for name in dir(sc) if not name.startswith("_")}
    assert public == {"query", "statistic", "sensitivity", "unit", "kind", "noise_scale", "to_output",
                      "in_output_units", "threshold_units", "describe"}
