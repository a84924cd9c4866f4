"""Review 36 (lead): a name a target-charging channel keeps, and a stream under an automatic unit.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp


class Never(str):
    """A name that is never equal to anything, and hashes anew every time: always "not seen yet"."""

    __slots__ = ()
    _calls = [0]

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        self._calls[0] += 1
        return self._calls[0]


def test_a_name_kept_for_revise_is_read_as_a_plain_string() -> None:
    """``conditional_release(name=...)`` checked "a new name" with the analyst's own ``__eq__``/``__hash__``.

    A ``str`` subclass that never equals anything registered the name ``"x"`` twice (two unreleased values
    under one visible name, ``revise("x")`` reaching only one of them). The name is now read as a plain
    string first, so the second use of ``"x"`` is refused before anything runs.
    """
    sess = dp.Session({"t": pl.DataFrame({"g": [0] * 100})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(60, 1e-6), seed=0)
    q = sess.table("t").agg(dp.len())
    with sess.target_charging(epsilon=0.5, max_hits=5, delta=1e-7) as ch:
        assert ch.conditional_release(q, when=dp.above(10**6), name=Never("x")) is None
        spent = sess.spent
        with pytest.raises(dp.ArgumentError, match="not a new string"):
            ch.conditional_release(q, when=dp.above(10**6), name=Never("x"))
        assert sess.spent == spent


def test_a_gaussian_sparse_vector_under_an_automatic_unit_is_refused_naming_the_unit() -> None:
    """Review 36d noticed: the Gaussian stream read ``max_rows`` before the unit check every stream makes.

    Under ``max_rows="auto"`` (an RDP session) it raised a bare ``DPFrameError`` naming ``max_rows``, where
    the Laplace stream, the channels and the individual filter give a ``PlanError`` naming ``privacy_unit``
    and its fix. Free either way; now the same refusal.
    """
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2, 3], "g": [0, 1, 0]})},
                      privacy_unit=dp.PrivacyUnit("u", max_rows="auto"), budget=dp.ApproxDP(1, 1e-6),
                      accountant="rdp", seed=0)
    for kw in ({"budget": dp.ZCDP(0.1), "noise": "gaussian"}, {"budget": dp.PureDP(0.1)}):
        with pytest.raises(dp.PlanError, match="cannot run queries whose bounds are chosen per query") as caught:
            sess.sparse_vector(threshold=5, max_positives=1, **kw)   # type: ignore[arg-type]
        assert caught.value.argument == "privacy_unit"
    assert not sess.history().height
