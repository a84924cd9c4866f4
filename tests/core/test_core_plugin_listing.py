"""``dpframe plugins`` says what every plugin handles, query plugins included (audit issue 2, G6)."""

from __future__ import annotations

import types

import polars as pl
import pytest

import dpframe as dp
from dpframe.cli import main
from dpframe.plugin.manager import QUERY_ENTRY_POINTS, PluginHost, plugin_host


def _rows() -> dict[str, str]:
    return {r.name: r.provides for r in plugin_host().describe()}


@pytest.mark.parametrize("plugin", ["learning", "topk", "quantiles"])
def test_query_plugins_list_their_queries(plugin: str) -> None:
    provides = _rows()[plugin]
    assert "queries: " in provides
    for entry in QUERY_ENTRY_POINTS[plugin]:
        assert entry in provides


def test_the_cli_shows_a_non_empty_provides_cell_for_every_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    by_name = {line.split()[0]: line for line in lines}
    assert "Frame.interior_point" in by_name["learning"] and "GroupBy.top_k" in by_name["topk"]
    assert all(len(line.split()) > 3 for line in lines), lines


def _frame() -> dp.Frame:
    data = pl.DataFrame({"x": [1, 2, 3], "y": [0, 1, 1], "k": ["a", "b", "a"]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(1, 1e-6)).table("t")


CALLS = {
    "Frame.interior_point": lambda f: f.interior_point("x", bounds=(0, 10)),
    "Frame.learn_threshold": lambda f: f.learn_threshold("x", label="y", bounds=(0, 10)),
    "Frame.learn_rectangle": lambda f: f.learn_rectangle(["x"], label="y", bounds={"x": (0, 10)}),
    "Frame.bounds": lambda f: f.bounds("x", domain=(0, 10)),
    "GroupBy.top_k": lambda f: f.group_by("k").top_k(k=1),
}


@pytest.mark.parametrize("plugin, entry", [(p, e) for p, es in QUERY_ENTRY_POINTS.items() for e in es
                                           if e.split(".")[0] in ("Frame", "GroupBy")])
def test_listed_methods_really_belong_to_the_plugin(monkeypatch: pytest.MonkeyPatch, plugin: str, entry: str) -> None:
    """Each listed method exists, and blocking the plugin makes exactly that method refuse (truthful list)."""
    owner, method = entry.split(".")
    assert callable(getattr(dp.Frame if owner == "Frame" else dp.frame.GroupBy, method))
    CALLS[entry](_frame())                                    # works with the plugin loaded
    monkeypatch.setenv("DPFRAME_BLOCK_PLUGINS", plugin)
    with pytest.raises(dp.PluginError, match=plugin):
        CALLS[entry](_frame())


def test_a_plugin_without_hooks_says_so() -> None:
    host = PluginHost()
    host.register(types.ModuleType("empty_plugin"), name="empty")
    assert {r.name: r.provides for r in host.describe()}["empty"] == "(no hooks)"
