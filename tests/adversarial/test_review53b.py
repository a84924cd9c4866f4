"""Review 53b: stop 52's non-accounting changes, attacked as an analyst and as a third-party plugin author.

1. ``frame.bound(max_rows=N)`` under a unit whose ``max_groups`` is ``"auto"`` (with ``max_rows`` ``"auto"`` or a
   number) pinned the rows and left the groups to the session's ``"auto"``. An ``agg`` with ``bounds="auto"`` then
   failed on every dataset *after* its charge: the tuning stage reads the chosen unit through
   ``PrivacyUnit.within(scan.bound)``, and ``within`` took the pin's ``"auto"`` over the chosen unit's resolved
   ``max_groups`` (None: it follows the chosen ``max_rows``), so the read found ``"auto"`` not chosen ("a dpframe
   bug") and the whole budget of the query was lost for nothing.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.privacy_unit import PrivacyUnit

DATA = pl.DataFrame({"u": [i % 50 for i in range(500)], "g": [i % 7 for i in range(500)],
                     "x": [float(i % 13) for i in range(500)]})


def _session(unit: dp.PrivacyUnit) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=unit, budget=dp.ApproxDP(50, 1e-3), seed=1)


@pytest.mark.parametrize("unit", [dp.PrivacyUnit("u", max_rows="auto", max_groups="auto"),
                                  dp.PrivacyUnit("u", max_rows=10, max_groups="auto")], ids=repr)
@pytest.mark.parametrize("query", ["ungrouped", "public keys", "private keys"])
def test_bounds_auto_on_a_frame_pinned_by_bound_runs(unit: dp.PrivacyUnit, query: str) -> None:
    sess = _session(unit)
    frame = sess.table("t").bound(max_rows=4)
    q = {"ungrouped": lambda: frame.agg(dp.len(), dp.sum("x", bounds="auto")),
         "public keys": lambda: frame.group_by("g", keys=list(range(7))).agg(dp.mean("x", bounds="auto")),
         "private keys": lambda: frame.group_by("g").agg(dp.sum("x", bounds="auto"))}[query]()
    _, diagnostics = q.collect(dp.ApproxDP(1, 1e-6), diagnostics=True)
    assert sess.history()["status"].to_list() == ["committed"]
    assert "max_rows (chosen)" not in diagnostics["diagnostic"].to_list()     # the pin is not tuned


def test_within_keeps_a_resolved_max_groups_over_auto() -> None:
    chosen = PrivacyUnit("u", max_rows=3)                                  # tuned: max_groups follows max_rows
    assert chosen.within(PrivacyUnit("u", max_rows=4, max_groups="auto")) == PrivacyUnit("u", max_rows=3)
    session = PrivacyUnit("u", max_rows="auto", max_groups="auto")         # planning: still to be chosen
    assert session.within(PrivacyUnit("u", max_rows=4, max_groups="auto")) == \
        PrivacyUnit("u", max_rows=4, max_groups="auto")
