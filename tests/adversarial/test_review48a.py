"""Review 48a: arguments of the wrong type get the session's own error, in process and through a server.

A sweep of wrong-typed arguments through the remote boundary (against the same calls in process) found bare
TypeErrors in process too: they are here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp

DATA = pl.DataFrame({"visitor": [i % 300 for i in range(1500)], "store": [i % 6 for i in range(1500)],
                     "spend": [float(i % 50) for i in range(1500)], "day": [f"d{i % 3}" for i in range(1500)],
                     "label": [i % 2 == 0 for i in range(1500)]})


def session(kind: str) -> dp.Session:
    budget = dp.ZCDP(5) if kind == "zcdp" else dp.ApproxDP(400, 1e-5)
    return dp.Session({"visits": DATA}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=10), budget=budget, seed=3)


# ----------------------------------------------------------------------------- in process: what the sweep found there

@pytest.mark.parametrize("family", [["agg"], {"agg": 1}])
def test_a_family_that_is_no_name_is_a_plugin_error(family: Any) -> None:
    """``frame.query([...])`` was a bare TypeError (unhashable) in process; through a server, "the server failed this
    request (TypeError)". Now the PluginError an unknown family name gets, in both."""
    sess = session("approx")
    with pytest.raises(dp.PluginError, match="unknown query family"):
        sess.table("visits").query(family)
    with pytest.raises(dp.PluginError, match="unknown query family"):
        sess.table("visits").group_by("day", keys=["d0"]).query(family)
    assert sess.history().height == 0


@pytest.mark.parametrize("min_q", [[0.1], {"q": 0.1}, "0.1", "x", (0.1,)])
def test_a_min_q_that_is_no_number_is_refused_by_the_channel_s_check(min_q: Any) -> None:
    """``target_charging(min_q=[0.1])`` was a bare TypeError from ``float()`` (text a ValueError, and ``"0.1"`` was
    read as the number); now the channel's BudgetError naming min_q, nothing reserved."""
    sess = session("approx")
    with pytest.raises(dp.BudgetError, match="^min_q: must be a number or None"):
        sess.target_charging(epsilon=1, max_hits=3, delta=1e-6, min_q=min_q)
    assert sess.history().height == 0


@pytest.mark.parametrize("per_unit", [[1], "x", {"a": 1}, 1, None])
def test_per_unit_that_is_no_flag_is_refused(per_unit: Any) -> None:
    """``per_unit=[1]`` (or any truthy object) opened a per-unit channel; ``per_unit=None`` a plain one. A flag is
    True or False, as ``diagnostics=`` is."""
    sess = session("approx")
    with pytest.raises(dp.ArgumentError, match="^per_unit: must be True or False"):
        sess.target_charging(epsilon=1, max_hits=3, delta=1e-6, per_unit=per_unit)
    flag: Any = np.bool_(True)      # numpy's bool is a flag
    with sess.target_charging(epsilon=1, max_hits=3, delta=1e-6, per_unit=flag) as ch:
        assert "per privacy unit" in ch.status()
