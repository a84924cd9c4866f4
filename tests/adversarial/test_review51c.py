"""Review 51c: a plugin author's second day (leftovers of stop 50's plugin review).

1. ``dpframe plugins`` shows routing order: which mechanism handles a measure kind under each notion (and who
   else offers it, reachable only with ``mechanism=``), which family builds each query name (``replaces=``).
2. The quantiles and histogram mechanisms split their share with the public ``dpframe.budgets.divide``; a share
   of a notion they do not declare is a dpframe error, not an AttributeError of the plugin.
3. ``dpframe.noise``'s samplers refuse bad arguments with dpframe errors naming the argument and the fix.
4. ``dpframe.testing.pin_families`` routes a query name to a family object in one session (tests only).
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from dpframe_quantiles.mechanism import QuantileMechanism

import dpframe as dp
from dpframe.plugin import plugin_host
from dpframe.testing import check_refused, measure_context, pin_families


def test_quantiles_refuse_an_approximate_share_with_a_dpframe_error() -> None:
    """The mechanism declares pure/zCDP; a conformance test calling plan() with (ε, δ) got an AttributeError."""
    err = check_refused(QuantileMechanism(), dp.quantile("x", 0.5, bounds=(0, 100)), measure_context(),
                        dp.ApproxDP(1, 1e-6))
    assert err.argument == "budget" and "PureDP" in (err.fix or "")


class Renamed:
    """The installed ``frame.bounds`` family under another name, counting its builds (a family under test)."""

    def __init__(self, name: str) -> None:
        self.inner = plugin_host().family("bounds")
        self.name, self.attach, self.methods = name, self.inner.attach, ()
        self.result_types: dict[str, type] = {}
        self.builds = 0

    def build(self, source: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.builds += 1
        return self.inner.build(source, *args, **kwargs)


def _session() -> dp.Session:
    data = pl.DataFrame({"x": [float(i % 10) for i in range(200)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)


def test_pin_families_adds_a_query_name_to_one_session_only() -> None:
    family = Renamed("my_bounds")
    sess = pin_families(_session(), family)
    lo, hi = sess.table("t").my_bounds("x", domain=(0, 10)).collect(dp.PureDP(1))
    assert family.builds == 1 and lo <= hi
    assert sess.spent() == dp.PureDP(1)
    with pytest.raises(AttributeError, match="my_bounds"):
        _session().table("t").my_bounds("x", domain=(0, 10))


def test_pin_families_wins_over_the_installed_family_of_that_name() -> None:
    family = Renamed("bounds")
    sess = pin_families(pin_families(_session(), Renamed("other")), family)
    sess.table("t").bounds("x", domain=(0, 10)).collect(dp.PureDP(1))
    assert family.builds == 1
    assert [e.name for e in sess.plugins.families()].count("bounds") == 1
    assert sess.plugins.families().entry("bounds").plugin == "dpframe.testing"
    assert "other" in sess.plugins.families()       # pins stack, as pin_mechanisms' do


@pytest.mark.parametrize("bad", [object(), Renamed("filter")])
def test_pin_families_refuses_what_is_not_a_family(bad: object) -> None:
    with pytest.raises(dp.PluginError) as e:
        pin_families(_session(), bad)
    assert e.value.fix
