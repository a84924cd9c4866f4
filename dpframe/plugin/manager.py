"""A typed facade over the pluggy plugin manager.

Example:
    >>> host = plugin_host()
    >>> "polars" in host.backend_names()
    True

"""

from __future__ import annotations

import importlib.metadata as md
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pluggy

from dpframe.errors import PluginError
from dpframe.mechanism import Mechanism
from dpframe.plugin import hookspecs

BLOCK_ENV = "DPFRAME_BLOCK_PLUGINS"

QUERY_ENTRY_POINTS: dict[str, tuple[str, ...]] = {
    "learning": ("Frame.interior_point", "Frame.learn_threshold", "Frame.learn_rectangle"),
    "quantiles": ("Frame.bounds",),
    "topk": ("GroupBy.top_k", "SQL HAVING TOP_K(...)", "dpframe_topk.MultiLabelPATE"),
}
"""First-party plugins that add query types rather than (only) mechanisms through hooks: the methods
that build their queries (each raises ``PluginError`` naming the plugin when it is blocked or missing).
``dpframe plugins`` lists them under ``provides``."""


@dataclass(frozen=True)
class PluginInfo:
    """One row of ``dpframe plugins``."""

    name: str
    version: str
    package: str
    provides: str


class PluginHost:
    """Loads plugins once and answers the engine's questions about them."""

    def __init__(self, blocked: frozenset[str] = frozenset()) -> None:
        self.pm = pluggy.PluginManager("dpframe")
        self.pm.add_hookspecs(hookspecs.DPFrameSpecs)
        self.blocked = blocked
        for name in blocked:
            self.pm.set_blocked(name)
        from dpframe.plugin import core

        if "core" not in blocked:
            self.pm.register(core, name="core")
        self.pm.load_setuptools_entrypoints("dpframe")
        self.first_party = {"core"} | {ep.name for ep in md.entry_points(group="dpframe")
                                       if ep.dist is not None and ep.dist.name == "dpframe"}

    def register(self, plugin: object, name: str) -> None:
        """Register a plugin object in this process (e.g. a module with ``@dpframe.hookimpl`` functions)."""
        if name in self.blocked:
            raise PluginError(f"plugin {name!r} is blocked by {BLOCK_ENV}", argument="name",
                              fix=f"remove it from {BLOCK_ENV}")
        self.pm.register(plugin, name=name)

    def unregister(self, name: str) -> None:
        """Remove a plugin registered under ``name``."""
        plugin = self.pm.get_plugin(name)
        if plugin is None:
            raise PluginError(f"no plugin named {name!r}", argument="name", fix="see `dpframe plugins`")
        self.pm.unregister(plugin)

    def _collect(self, hook: Callable[..., list[Any]]) -> list[tuple[str, Any]]:
        out = []
        for impl in hook.get_hookimpls():  # type: ignore[attr-defined]
            result = impl.function()
            name = self.pm.get_name(impl.plugin) or "?"
            items = result.items() if isinstance(result, dict) else [(getattr(r, "name", "?"), r) for r in result]
            out += [(name, item) for item in items]
        return out

    def mechanisms(self) -> list[tuple[str, Mechanism]]:
        """(plugin name, mechanism) pairs in registration order (built-ins first)."""
        found = []
        for plugin, (_, mech) in self._collect(self.pm.hook.dpframe_mechanisms):
            if not isinstance(mech, Mechanism):
                raise PluginError(f"plugin {plugin!r} returned {mech!r}, which is not a Mechanism",
                                  argument="dpframe_mechanisms",
                                  fix="give it name, handles, notions, validate(), parts() and plan()")
            found.append((plugin, mech))
        return found

    def mechanism_for(self, kind: str, notion: str, name: str | None = None) -> Mechanism:
        """The mechanism that handles measure ``kind`` under ``notion`` (or the one named ``name``).

        Built-in mechanisms come first; if only third-party plugins offer ``kind`` and more than one
        could run it, the choice is refused as ambiguous (name one with ``mechanism=``).
        """
        found = [(p, m) for p, m in self.mechanisms() if kind in m.handles]
        if name is not None:
            found = [(p, m) for p, m in found if m.name == name]
        usable = [(p, m) for p, m in found if notion in m.notions]
        builtin = [m for p, m in usable if p in self.first_party]
        if builtin:
            return builtin[0]
        if len(usable) > 1:
            raise PluginError(f"several plugins offer {kind!r}: {[f'{p}:{m.name}' for p, m in usable]}",
                              argument="mechanism",
                              fix=f"choose one: dp.measure({kind!r}, ..., mechanism='<name>')")
        if usable:
            return usable[0][1]
        candidates = [m for _, m in found]
        if candidates:
            raise PluginError(
                f"no mechanism for {kind!r} works with {notion} budgets "
                f"(found {[m.name for m in candidates]} for {sorted({n for m in candidates for n in m.notions})})",
                argument="budget", fix="give the query a budget of a notion listed there")
        blocked = f"; blocked by {BLOCK_ENV}: {sorted(self.blocked)}" if self.blocked else ""
        raise PluginError(f"no installed mechanism handles {kind!r}{blocked}", argument="measure",
                          fix="install the plugin that provides it (`dpframe plugins` lists what is installed;"
                              " a source checkout needs `pip install -e .`)" +
                              (f", or unblock it in {BLOCK_ENV}" if self.blocked else ""))

    def _named(self, hook: Callable[..., list[Any]], what: str, name: str) -> Any:
        table = dict(item for _, item in self._collect(hook))
        if name not in table:
            raise PluginError(f"unknown {what} {name!r}", argument=what,
                              fix=f"use one of {sorted(table)}")
        return table[name]

    def accountant(self, name: str) -> Callable[..., Any]:
        """The accountant factory registered as ``name``."""
        return self._named(self.pm.hook.dpframe_accountants, "accountant", name)  # type: ignore[no-any-return]

    def backend(self, name: str) -> Any:
        """A new instance of the backend registered as ``name``."""
        return self._named(self.pm.hook.dpframe_backends, "backend", name)()

    def backend_names(self) -> list[str]:
        """Registered backend names."""
        return sorted(dict(item for _, item in self._collect(self.pm.hook.dpframe_backends)))

    def describe(self) -> list[PluginInfo]:
        """Name, version, source package and what each plugin provides."""
        dists: dict[str, md.Distribution] = {}
        for dist in md.distributions():
            for ep in dist.entry_points:
                if ep.group == "dpframe":
                    dists[ep.name] = dist
        rows = [PluginInfo(name, dists[name].version if name in dists else "?",
                           dists[name].metadata["Name"] if name in dists else "?", f"BLOCKED by {BLOCK_ENV}")
                for name in sorted(self.blocked)]
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # a blocked name
                continue
            found = dists.get(name)
            provides = []
            mech = getattr(plugin, "dpframe_mechanisms", None)
            if mech:
                provides += [f"{m.name}: {', '.join(sorted(m.handles))} [{'/'.join(sorted(m.notions))}]"
                             for m in mech()]
            for hook, label in (("dpframe_accountants", "accountant"), ("dpframe_backends", "backend")):
                fn = getattr(plugin, hook, None)
                if fn:
                    provides += [f"{label} {n}" for n in fn()]
            if name in QUERY_ENTRY_POINTS and name in self.first_party:
                provides.append("queries: " + ", ".join(QUERY_ENTRY_POINTS[name]))
            points = getattr(plugin, "dpframe_interior_points", None)
            if points:
                provides += [f"interior point {getattr(a, 'name', '?')}" for a in points()]
            package = found.metadata["Name"] if found else "dpframe"
            version = found.version if found else md.version("dpframe")
            rows.append(PluginInfo(name, version, package, "; ".join(provides) or "(no hooks)"))
        return rows


@lru_cache(maxsize=4)
def _host(blocked: frozenset[str]) -> PluginHost:
    return PluginHost(blocked)


def plugin_host() -> PluginHost:
    """The process-wide plugin host (rebuilt when ``DPFRAME_BLOCK_PLUGINS`` changes)."""
    blocked = frozenset(n.strip() for n in os.environ.get(BLOCK_ENV, "").split(",") if n.strip())
    return _host(blocked)
