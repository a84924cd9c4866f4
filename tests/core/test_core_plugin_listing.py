"""``dpframe plugins`` says what every plugin handles, query families included (audit issue 2, G6)."""

from __future__ import annotations

import types

import polars as pl
import pytest

import dpframe as dp
from dpframe.cli import main
from dpframe.plugin.manager import PluginHost, plugin_host

#: The first-party query families and the plugin that registers each.
FAMILIES = {"interior_point": "learning", "learn_threshold": "learning", "learn_rectangle": "learning",
            "bounds": "quantiles", "top_k": "topk", "agg": "core", "linear_regression": "histogram"}


def _rows() -> dict[str, str]:
    return {r.name: r.provides for r in plugin_host().describe()}


def test_every_registered_family_is_listed_under_its_plugin() -> None:
    registered = {e.name: e.plugin for e in plugin_host().families()}
    assert registered == FAMILIES
    for family, plugin in FAMILIES.items():
        assert f"query family {family} (" in _rows()[plugin]


def test_the_cli_shows_a_non_empty_provides_cell_for_every_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]     # the plugin table; routing follows
    by_name = {line.split()[0]: line for line in lines}
    assert "query family interior_point (frame)" in by_name["learning"]
    assert "query family top_k (group_by)" in by_name["topk"]
    assert all(len(line.split()) > 3 for line in lines), lines


def _frame() -> dp.Frame:
    data = pl.DataFrame({"x": [1, 2, 3], "y": [0, 1, 1], "k": ["a", "b", "a"]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(1, 1e-6)).table("t")


CALLS = {
    "linear_regression": lambda f: f.linear_regression(["x"], "y", bounds={"x": (0, 10), "y": (0, 1)}),
    "interior_point": lambda f: f.interior_point("x", bounds=(0, 10)),
    "learn_threshold": lambda f: f.learn_threshold("x", label="y", bounds=(0, 10)),
    "learn_rectangle": lambda f: f.learn_rectangle(["x"], label="y", bounds={"x": (0, 10)}),
    "bounds": lambda f: f.bounds("x", domain=(0, 10)),
    "top_k": lambda f: f.group_by("k").top_k(k=1),
}


@pytest.mark.parametrize("family", sorted(CALLS))
def test_listed_families_really_belong_to_the_plugin(monkeypatch: pytest.MonkeyPatch, family: str) -> None:
    """Each family works with its plugin loaded, and blocking the plugin makes exactly that method refuse."""
    CALLS[family](_frame())
    monkeypatch.setenv("DPFRAME_BLOCK_PLUGINS", FAMILIES[family])
    # A built-in's typed method says which plugin is blocked; a plugin's method is no attribute any more.
    error = dp.PluginError if hasattr(dp.Frame, family) or hasattr(dp.GroupBy, family) else AttributeError
    with pytest.raises(error, match=FAMILIES[family]):
        CALLS[family](_frame())


def test_a_plugin_without_hooks_says_so() -> None:
    host = PluginHost()
    host.register(types.ModuleType("empty_plugin"), name="empty")
    assert {r.name: r.provides for r in host.describe()}["empty"] == "(no hooks)"
