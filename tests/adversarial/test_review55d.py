"""Review 55d: plugin leftovers of stop 54 — what a session's plugin view shows, plugins registered while plugins
load, the cap on released cells per query, the family audit against its curves, and the histogram's inexact edges.

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

from typing import Any

import pluggy
import polars as pl
import pytest

import dpframe as dp
from dpframe.cli import plugins as plugins_command
from dpframe.family import Source
from dpframe.plugin import PluginHost, plugin_host

# --- 1. a session's describe() and `dpframe plugins` read the session's snapshot ------------------------------------


class LateFamily:
    """A family a plugin registers after a session was made."""

    name, attach, methods, result_types = "late_family_r55d", "frame", (), {}

    def build(self, source: Source) -> None:
        raise AssertionError("never built here")


class LateHooks:
    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        register(LateFamily())


def _session() -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"u": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1),
                      seed=0)


def test_a_plugin_registered_later_is_not_in_the_sessions_describe(capsys: pytest.CaptureFixture[str]) -> None:
    """Found: ``sess.plugins.describe()`` (and so `dpframe plugins` printed for a session) listed the plugins of the
    live plugin manager: a plugin registered in the process after the session was made appeared there, "(hooks
    dpframe_query_families: nothing registered)", though the session's queries never see it. It now lists the
    plugins of the session's snapshot; the process-wide host (and a new session) shows the new plugin."""
    sess = _session()
    host = plugin_host()
    host.register(LateHooks(), name="late_r55d")
    try:
        assert "late_r55d" in [p.name for p in host.describe()]
        assert "late_r55d" in [p.name for p in _session().plugins.describe()]
        assert "late_r55d" not in [p.name for p in sess.plugins.describe()]
        plugins_command(sess.plugins)
        shown = capsys.readouterr().out
        assert "late_r55d" not in shown and "late_family_r55d" not in shown and "histogram" in shown, shown
        plugins_command()
        assert "late_family_r55d" in capsys.readouterr().out
    finally:
        host.unregister("late_r55d")
    # a plugin unregistered in the process after the session was made stays in that session's view (its queries use it)
    sess = _session()
    host.register(LateHooks(), name="late_r55d")
    later = _session()
    host.unregister("late_r55d")
    assert "late_r55d" in [p.name for p in later.plugins.describe()]
    assert "late_r55d" not in [p.name for p in sess.plugins.describe()]


# --- 2. a plugin that registers another plugin while plugins load -------------------------------------------------


class InnerHooks:
    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        register(LateFamily())


class RegisteringHooks:
    """A plugin whose own hook registers another plugin in the process-wide host (instead of calling ``register``)."""

    @dp.hookimpl
    def dpframe_mechanisms(self, register: Any) -> None:
        plugin_host().register(InnerHooks(), name="inner_r55d")


class UnregisteringHooks:
    @dp.hookimpl
    def dpframe_mechanisms(self, register: Any) -> None:
        plugin_host().unregister("histogram")


@pytest.mark.parametrize("hooks", [RegisteringHooks, UnregisteringHooks])
def test_a_hook_that_registers_a_plugin_is_refused_by_name(hooks: type) -> None:
    """Found: a plugin whose hook registered another plugin (``plugin_host().register`` inside
    ``dpframe_mechanisms``) reloaded the host's registries inside its own loading: the hook ran again, the second
    registration failed with pluggy's raw "Plugin name already registered: ... {'core': <module ...>, ...}", and both
    plugins were lost. It is now a PluginError naming the plugin and hook, saying a hook registers only through its
    ``register`` argument; the host is left as it was."""
    host = PluginHost()
    before = [n for n, _ in host.pm.list_name_plugin()]
    with pytest.raises(dp.PluginError) as refused:
        host.register(hooks(), name="outer_r55d")
    err = refused.value
    assert "while dpframe was loading plugins" in err.message and "'outer_r55d'" in err.message, err.message
    assert "dpframe_mechanisms" in err.message and "<module" not in err.message, err.message
    assert err.argument == "plugin" and "entry point" in (err.fix or ""), err.fix
    assert [n for n, _ in host.pm.list_name_plugin()] == before
    assert "inner_r55d" not in [n for n, _ in plugin_host().pm.list_name_plugin()]
    assert "histogram" in [n for n, _ in plugin_host().pm.list_name_plugin()]
    assert [m.name for _, m in host.mechanisms()] == [m.name for _, m in PluginHost().mechanisms()]


def test_a_plugin_that_registers_a_plugin_at_import_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: an entry point whose module, when imported, registers another plugin (``plugin_host().register(...)`` at
    module level) registered it in whatever host ``plugin_host()`` returned — a second host built inside the first
    one's loading (the process's first), or the cached one — never in the host being loaded, where it was lost. It is
    now refused while the host loads its entry points."""
    def load_entry_points(group: str) -> int:
        plugin_host().register(InnerHooks(), name="inner_r55d")    # what the module's import does
        return 0
    monkeypatch.setattr(pluggy.PluginManager, "load_setuptools_entrypoints",
                        lambda self, group, name=None: load_entry_points(group))
    with pytest.raises(dp.PluginError) as refused:
        PluginHost()
    assert "while dpframe was loading plugins" in refused.value.message and "entry points" in refused.value.message
    assert "inner_r55d" not in [n for n, _ in plugin_host().pm.list_name_plugin()]
    monkeypatch.undo()
    host = PluginHost()          # loading ended: registering works again
    host.register(InnerHooks(), name="inner_r55d")
    assert "late_family_r55d" in host.families()
