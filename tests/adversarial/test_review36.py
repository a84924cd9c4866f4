"""Review 36 (lead): arguments a target-charging channel keeps, read as plain values.

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
