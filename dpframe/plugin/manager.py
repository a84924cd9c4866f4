"""A typed facade over the pluggy plugin manager.

Example:
    >>> host = plugin_host()
    >>> "polars" in host.backend_names()
    True

"""

from __future__ import annotations

import importlib.metadata as md
import os
import pkgutil
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import pluggy

from dpframe.backends.base import check_listed_kinds
from dpframe.errors import PluginError
from dpframe.family import RESERVED, QueryFamily
from dpframe.mechanism import Mechanism
from dpframe.plugin import hookspecs
from dpframe.plugin.registry import Entry, Registry
from dpframe.sealed import Sealed

BLOCK_ENV = "DPFRAME_BLOCK_PLUGINS"
TRACE_ENV = "DPFRAME_TRACE_PLUGINS"


@dataclass(frozen=True)
class PluginInfo:
    """One row of ``dpframe plugins``."""

    name: str
    version: str
    package: str
    provides: str


@dataclass(frozen=True)
class Route:
    """One row of the routing part of ``dpframe plugins``: what handles a measure kind or builds a query.

    ``what`` is ``"measure"`` (``name`` a measure kind, ``notion`` the share notion its mechanism is calibrated
    to: ``"pure"`` for pure and (ε, δ) query budgets, ``"zcdp"`` for zCDP ones, ``"approx"`` for partition
    selection's (ε, δ)) or ``"query"`` (``name`` a query name, ``notion`` where it attaches: ``"frame"``,
    ``"group_by"`` or ``"both"``). ``handler`` and ``plugin`` name the mechanism or family the engine uses,
    ``replaced`` the plugin whose item of that name it replaced (``replaces=``). ``also`` lists, as
    ``"name (plugin)"`` in the order tried, the other mechanisms that offer the kind under the notion: they run
    only when a measure names them (``mechanism=``). ``handler`` is None when the choice is ambiguous (several
    third-party mechanisms and no built-in, nor a mechanism that replaced one serving the kind: every measure of
    the kind must name one; they are in ``also``).
    """

    what: str
    name: str
    notion: str
    handler: str | None
    plugin: str | None
    also: tuple[str, ...] = ()
    replaced: str | None = None


@dataclass(frozen=True)
class Audits:
    """What a plugin registered through ``dpframe_audits``: a factory of audit specs and its entry points.

    ``specs`` receives no values: it is called with no arguments when an audit runs and returns
    :class:`dpframe.testing.AuditSpec` objects.
    """

    specs: Callable[[], Iterable[Any]]
    entry_points: tuple[str, ...]


@dataclass
class _Registries:
    """Everything the loaded plugins registered."""

    mechanisms: Registry[Mechanism] = field(default_factory=lambda: Registry("mechanism", replaceable=True))
    accountants: Registry[Callable[..., Any]] = field(
        default_factory=lambda: Registry("accountant", replaceable=False))
    backends: Registry[Callable[[], Any]] = field(default_factory=lambda: Registry("backend", replaceable=True))
    families: Registry[QueryFamily] = field(default_factory=lambda: Registry("query family", replaceable=True))
    methods: dict[str, Registry[Any]] = field(default_factory=dict)
    audits: Registry[Audits] = field(default_factory=lambda: Registry("audit", replaceable=False))
    # Each family's result types as it declared them when registered (read once: the check and dp.<Name> read them).
    result_types: dict[str, tuple[object, Mapping[str, type]]] = field(default_factory=dict)
    # Registrations with ``replaces=``, applied after every plugin's plain ones (whatever the load order).
    replacements: list[Callable[[], None]] = field(default_factory=list)


class PluginHost(Sealed):
    """Loads plugins once and answers the engine's questions about them.

    After loading the entry points, ``pm.check_pending()`` refuses an implementation of a hook that does
    not exist (a misspelled hook name). ``DPFRAME_TRACE_PLUGINS=1`` prints every hook call to stderr.
    Its attributes are read-only once it is built (``sess.plugins.blocked = ...`` is refused), and it is
    not copied (:class:`~dpframe.sealed.Sealed`).
    """

    def __init__(self, blocked: frozenset[str] = frozenset()) -> None:
        _refuse_while_loading("built", "*")
        self.pm = pluggy.PluginManager("dpframe")
        self.pm.add_hookspecs(hookspecs.DPFrameSpecs)
        self.blocked = blocked
        for name in blocked:
            self.pm.set_blocked(name)
        from dpframe.plugin import core

        if "core" not in blocked:
            self.pm.register(core, name="core")
        with _loading("the 'dpframe' entry points (importing them)"):
            self.pm.load_setuptools_entrypoints("dpframe")
        self._check()
        self.first_party = frozenset({"core"}) | {ep.name for ep in md.entry_points(group="dpframe")
                                       if ep.dist is not None and ep.dist.name == "dpframe"}
        if os.environ.get(TRACE_ENV, "") not in ("", "0"):
            self.pm.trace.root.setwriter(lambda text: print(text, end="", file=sys.stderr))
            self.pm.enable_tracing()
        self._loaded: _Registries | None = None

    def _check(self) -> None:
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            raise PluginError(f"plugin {self.pm.get_name(e.plugin)!r}: {e}", argument="hookimpl",
                              fix="hooks are dpframe_mechanisms, dpframe_accountants, dpframe_backends, "
                                  "dpframe_query_families, dpframe_methods and dpframe_audits (see docs/plugins.md)"
                              ) from None

    def register(self, plugin: object, name: str) -> None:
        """Register a plugin object in this process (e.g. a module with ``@dpframe.hookimpl`` functions).

        Refused while plugins load (:func:`_refuse_while_loading`): from a plugin's hook or its entry point's import.
        """
        _refuse_while_loading("registered", name)
        if name in self.blocked:
            raise PluginError(f"plugin {name!r} is blocked by {BLOCK_ENV}", argument="name",
                              fix=f"remove it from {BLOCK_ENV}")
        self.pm.register(plugin, name=name)
        try:
            self._check()
            self._loaded = None
            self._registries()
        except PluginError:
            self.pm.unregister(plugin)
            self._loaded = None
            raise

    def unregister(self, name: str) -> None:
        """Remove a plugin registered under ``name`` (refused while plugins load, as :meth:`register`)."""
        _refuse_while_loading("unregistered", name)
        plugin = self.pm.get_plugin(name)
        if plugin is None:
            raise PluginError(f"no plugin named {name!r}", argument="name", fix="see `dpframe plugins`")
        self.pm.unregister(plugin)
        self._loaded = None

    def _plugins(self) -> list[tuple[str, object]]:
        """(name, plugin) in load order: built-ins first, so their names are taken before third parties'."""
        loaded = [(n, p) for n, p in self.pm.list_name_plugin() if p is not None]
        return sorted(loaded, key=lambda item: item[0] not in self.first_party)

    def _registries(self) -> _Registries:
        if self._loaded is None:
            found = _Registries()
            for name, plugin in self._plugins():
                first = name in self.first_party
                for caller in self.pm.get_hookcallers(plugin) or []:
                    register = _registrar(caller.name, found, name, first)
                    others = [p for n, p in self._plugins() if n != name]
                    try:
                        with _loading(f"plugin {name!r}'s {caller.name} hook"):
                            results = self.pm.subset_hook_caller(caller.name, remove_plugins=others)(
                                register=register)
                    except PluginError:
                        raise
                    except Exception as e:   # the plugin's own bug (a missing file ...): name it, not a raw error
                        raise PluginError(f"plugin {name!r}: {caller.name} raised {type(e).__name__}: {e}",
                                          argument=caller.name,
                                          fix=f"a bug of that plugin: report it to its authors; meanwhile keep it from "
                                              f"loading with {BLOCK_ENV}={name}") from e
                    if any(r is not None for r in results):
                        raise PluginError(f"plugin {name!r}: {caller.name} returned a value instead of calling "
                                          "register(...)", argument=caller.name,
                                          fix=f"write `def {caller.name}(register): register(...)` (see "
                                              "docs/plugins.md)")
            # A replacement (``replaces=``) applies once every plain registration is in: which plugin the environment
            # lists first must not decide whether "replaces 'x', which nothing registered" fails the whole host.
            for apply in found.replacements:
                apply()
            self._loaded = found
        return self._loaded

    def mechanisms(self) -> list[tuple[str, Mechanism]]:
        """(plugin name, mechanism) pairs in registration order (built-ins first)."""
        return [(e.plugin, e.item) for e in self._registries().mechanisms]

    def mechanism_for(self, kind: str, notion: str, name: str | None = None) -> Mechanism:
        """The mechanism that handles measure ``kind`` under ``notion`` (or the one named ``name``).

        Built-in mechanisms come first, and so does a mechanism that replaced a built-in by name (``replaces=``,
        the documented override) for what that built-in served: the kinds it handled under its notions. Otherwise,
        if only third-party plugins offer ``kind`` and more than one could run it, the choice is refused as
        ambiguous, naming them (name one with ``mechanism=``).
        """
        entries = [e for e in self._registries().mechanisms if kind in e.item.handles]
        if name is not None:
            entries = [e for e in entries if e.name == name]
        usable = [e for e in entries if notion in e.item.notions]
        builtin = [e.item for e in usable if e.first_party or _serves_built_in(e, kind, notion)]
        if builtin:
            return builtin[0]
        if len(usable) > 1:
            offers = ", ".join(f"plugin {e.plugin!r} (mechanism {e.name!r})" for e in usable)
            names = " or ".join(f"mechanism={e.name!r}" for e in usable)
            raise PluginError(f"several plugins offer {kind!r} under {notion} budgets, none built in or replacing a "
                              f"built-in: {offers}", argument="mechanism",
                              fix=f"choose one in each measure: dp.measure({kind!r}, ..., {names}); or keep one "
                                  f"plugin: block the others with DPFRAME_BLOCK_PLUGINS")
        if usable:
            return usable[0].item
        candidates = [e.item for e in entries]
        if candidates:
            raise PluginError(
                f"no mechanism for {kind!r} works with {notion} budgets "
                f"(found {[m.name for m in candidates]} for {sorted({n for m in candidates for n in m.notions})})",
                argument="budget", fix="give the query a budget of a notion listed there")
        blocked = f"; blocked by {BLOCK_ENV}: {sorted(self.blocked)}" if self.blocked else ""
        raise PluginError(f"no installed mechanism handles {kind!r}{blocked}", argument="measure",
                          fix="install the plugin that provides it (`dpframe plugins` lists what is installed;"
                              " for the example plugin of a source checkout: "
                              "`pip install -e plugins/dpframe_histogram`)" +
                              (f", or unblock it in {BLOCK_ENV}" if self.blocked else ""))

    def routes(self) -> list[Route]:
        """Who handles what, as the engine routes it: each measure kind under each notion, then each query name.

        Measure kinds are sorted, each with its notions in the order ``pure``, ``zcdp``, ``approx``; query names
        in registration order (built-ins first). Built from :meth:`mechanism_for` and :meth:`family` themselves
        (so a host that pins mechanisms or families, :func:`dpframe.testing.pin_mechanisms`, shows the pins).

        Example:
            >>> [(r.handler, r.plugin) for r in plugin_host().routes() if (r.name, r.notion) == ("sum", "pure")]
            [('aggregates', 'aggregates')]
            >>> [r.plugin for r in plugin_host().routes() if r.what == "query" and r.name == "top_k"]
            ['topk']

        """
        offered = self.mechanisms()
        registered = {(e.plugin, e.name): e.replaced for e in self._registries().mechanisms}
        routes = []
        for kind in sorted({k for _, m in offered for k in m.handles}):
            for notion in sorted({n for _, m in offered if kind in m.handles for n in m.notions}, key=_notion_rank):
                candidates = [(p, m) for p, m in offered if kind in m.handles and notion in m.notions]
                try:
                    chosen = self.mechanism_for(kind, notion)
                except PluginError:     # several third-party mechanisms, no built-in: each measure names one
                    routes.append(Route("measure", kind, notion, None, None, tuple(f"{m.name} ({p})" for p, m in
                                                                                     candidates)))
                    continue
                plugin = next(p for p, m in candidates if m is chosen)
                also = tuple(f"{m.name} ({p})" for p, m in candidates if m is not chosen)
                routes.append(Route("measure", kind, notion, chosen.name, plugin, also,
                                    registered.get((plugin, chosen.name))))
        for e in self.families():
            family = self.family(e.name)
            routes.append(Route("query", e.name, family.attach, family.name, e.plugin, (), e.replaced))
        return routes

    def accountant(self, name: str) -> Callable[..., Any]:
        """The accountant factory registered as ``name``."""
        return self._registries().accountants.get(name)

    def backend(self, name: str) -> Any:
        """A new instance of the backend registered as ``name`` (its ``statistic_kinds``, if any, checked)."""
        engine = self._registries().backends.get(name)()
        check_listed_kinds(engine, name)
        return engine

    def backend_names(self) -> list[str]:
        """Registered backend names."""
        return self._registries().backends.names()

    def accountant_names(self) -> list[str]:
        """Registered accountant names."""
        return self._registries().accountants.names()

    def accountants(self) -> Registry[Callable[..., Any]]:
        """Every registered accountant factory, built-ins first: a copy (adding to it changes no host)."""
        return self._registries().accountants.copy()

    def families(self) -> Registry[QueryFamily]:
        """Every registered query family (built-ins first): a copy (pinning in it changes no host)."""
        return self._registries().families.copy()

    def snapshot(self) -> PluginHost:
        """A view of this host for one session: its registries stay those loaded now (:class:`SessionPlugins`).

        Example:
            >>> host = plugin_host().snapshot()
            >>> host.family("top_k") is plugin_host().family("top_k")
            True

        """
        return SessionPlugins(self)

    def family(self, name: str) -> QueryFamily:
        """The query family registered as ``name``; a PluginError (naming blocked plugins) otherwise."""
        families = self._registries().families
        if isinstance(name, str) and name not in families and self.blocked:
            raise PluginError(f"no query family {name!r} is installed; blocked by {BLOCK_ENV}: {sorted(self.blocked)}",
                              argument="plugin", fix=f"remove its plugin from {BLOCK_ENV}")
        return families.get(name)

    def result_types(self) -> dict[str, type]:
        """The result types the query families of this host declare (``result_types``), by name.

        ``dp.<Name>`` reads them from the process-wide host (``plugin_host()``); a session's host
        (``sess.plugins``) also has those of the families a test pinned in it (:func:`dpframe.testing.pin_families`),
        which ``dp.<Name>``, module-wide, does not show.

        Example:
            >>> import dpframe as dp
            >>> plugin_host().result_types()["TopKFailed"] is dp.TopKFailed
            True

        """
        declared = self._registries().result_types
        out: dict[str, type] = {}
        for e in self.families():
            item, types = declared.get(e.name, (None, {}))
            # as declared when registered; a family pinned in a test session (not registered) is read now
            out.update(types if item is e.item else dict(e.item.result_types))
        return out

    def methods(self, family: str) -> Registry[Any]:
        """The sub-methods registered for query family ``family`` (empty when none): a copy."""
        found = self._registries().methods.get(family)
        return found.copy() if found is not None else Registry(f"{family} method", replaceable=True)

    def audits(self) -> list[Audits]:
        """The audit factories plugins registered (``dpframe_audits``), built-ins first."""
        return [e.item for e in self._registries().audits]

    def _listed(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(name, its hooks, sorted) of each plugin loaded, in registration order (blocked names left out)."""
        return tuple((name, tuple(sorted(c.name for c in self.pm.get_hookcallers(plugin) or [])))
                     for name, plugin in self.pm.list_name_plugin() if plugin is not None)

    def describe(self) -> list[PluginInfo]:
        """Name, version, source package and what each plugin provides (a session's: those it was made with).

        Example:
            >>> [(p.name, p.package) for p in plugin_host().describe()][:2]
            [('core', 'dpframe'), ('aggregates', 'dpframe')]

        """
        dists: dict[str, md.Distribution] = {}
        for dist in md.distributions():
            for ep in dist.entry_points:
                if ep.group == "dpframe":
                    dists[ep.name] = dist
        rows = [PluginInfo(name, dists[name].version if name in dists else "?",
                           dists[name].metadata["Name"] if name in dists else "?", f"BLOCKED by {BLOCK_ENV}")
                for name in sorted(self.blocked)]
        found = self._registries()
        for name, hooks in self._listed():
            provides = [f"{e.name}: {', '.join(sorted(e.item.handles))} [{'/'.join(sorted(e.item.notions))}]"
                        f"{_replaces(e)}" for e in found.mechanisms if e.plugin == name]
            provides += [f"accountant {e.name}" for e in found.accountants if e.plugin == name]
            provides += [f"backend {e.name}{_replaces(e)}" for e in found.backends if e.plugin == name]
            provides += [f"query family {e.name} ({e.item.attach}){_replaces(e)}" for e in found.families
                         if e.plugin == name]
            provides += [f"{family} method {e.name}{_replaces(e)}" for family, reg in found.methods.items()
                         for e in reg if e.plugin == name]
            provides += [f"audits {e.name}" for e in found.audits if e.plugin == name]
            if not provides:
                provides = [f"(hooks {', '.join(hooks)}: nothing registered)" if hooks else "(no hooks)"]
            source = dists.get(name)
            package = source.metadata["Name"] if source else "dpframe"
            version = source.version if source else md.version("dpframe")
            rows.append(PluginInfo(name, version, package, "; ".join(provides)))
        return rows


def _replaces(entry: Entry[Any]) -> str:
    """The marker ``dpframe plugins`` shows next to an item that replaced another plugin's (``replaces=``)."""
    return f" (replaces {entry.replaced}'s)" if entry.replaced else ""


def _serves_built_in(entry: Entry[Mechanism], kind: str, notion: str) -> bool:
    """Whether ``entry`` replaced (``replaces=``) a built-in mechanism that handled ``kind`` under ``notion``."""
    built_in = entry.replaces_built_in()
    return built_in is not None and kind in built_in.item.handles and notion in built_in.item.notions


NOTIONS = frozenset({"pure", "zcdp", "approx"})
"""The share notions a mechanism may declare (``approx``: partition selection's (ε, δ) share)."""


def _notion_rank(notion: str) -> int:
    """Routes list a kind's notions as pure, zCDP, approximate."""
    return ("pure", "zcdp", "approx").index(notion)


def check_declared(plugin: str, item: Any, argument: str = "dpframe_mechanisms") -> None:
    """A PluginError naming ``argument`` unless ``handles`` and ``notions`` are well-formed frozensets.

    ``handles``: a non-empty frozenset of kind names; ``notions``: a non-empty frozenset of :data:`NOTIONS`. A
    ``str`` was routed by substring (``"zcdp" in "pure"``), and a misspelt notion routed nowhere.

    Example:
        >>> class Mine:
        ...     name, handles, notions = "mine", frozenset({"my_kind"}), frozenset({"puree"})
        >>> check_declared("mine", Mine())
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: dpframe_mechanisms: plugin 'mine': mechanism 'mine' declares notions ['puree']...

    """
    fix = ('declare handles = frozenset({"<kind>", ...}) (the kinds of dp.measure(kind, ...)) and notions = '
           'frozenset({"pure", "zcdp"}) (the share notions its plan() calibrates to)')
    for attribute in ("handles", "notions"):
        value = getattr(item, attribute)
        if not isinstance(value, frozenset) or not value or not all(isinstance(v, str) and v for v in value):
            raise PluginError(f"plugin {plugin!r}: mechanism {item.name!r} declares {attribute} = {value!r}",
                              argument=argument, fix=fix)
    unknown = sorted(item.notions - NOTIONS)
    if unknown:
        raise PluginError(f"plugin {plugin!r}: mechanism {item.name!r} declares notions {unknown}, not among "
                          f"{sorted(NOTIONS)}", argument=argument, fix=fix)


def check_family(plugin: str, item: Any, argument: str) -> None:
    """A PluginError (naming ``argument``) unless ``item`` is a query family whose name is not a core method.

    Example:
        >>> class Rows:
        ...     name, attach, methods, result_types = "filter", "frame", (), {}
        ...     def build(self, source, /, *args, **kwargs): ...
        >>> check_family("mine", Rows(), "dpframe_query_families")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: dpframe_query_families: plugin 'mine' registers a query family named 'filter', ...

    """
    if not isinstance(item, QueryFamily) or getattr(item, "attach", None) not in ("frame", "group_by", "both"):
        raise PluginError(f"plugin {plugin!r} registered {item!r}, which is not a query family", argument=argument,
                          fix="give it name, attach ('frame', 'group_by' or 'both'), methods, result_types and "
                              "build() (see dpframe.family.QueryFamily)")
    if item.name in RESERVED:
        raise PluginError(f"plugin {plugin!r} registers a query family named {item.name!r}, a core method of "
                          "dpframe.Frame / GroupBy", argument=argument, fix="give the family another name")
    types = item.result_types
    fix = 'declare result_types = {"MyResult": MyResult}: the classes its results may be, exported as dp.<Name>'
    if not isinstance(types, Mapping):
        raise PluginError(f"plugin {plugin!r}: query family {item.name!r} declares result_types = {types!r}, not a "
                          "mapping", argument=argument, fix=fix)
    import dpframe

    for name, kind in types.items():
        if not isinstance(name, str) or not name.isidentifier() or not isinstance(kind, type):
            raise PluginError(f"plugin {plugin!r}: query family {item.name!r} declares result type {name!r}: "
                              f"{kind!r}, not a name and a class", argument=argument, fix=fix)
        if name.startswith("_"):    # dp.__class__ is the module's class, dp.__init__ its method: never the plugin's
            raise PluginError(f"plugin {plugin!r}: query family {item.name!r} declares a result type named {name!r}, "
                              "which dp.<Name> cannot export (a dunder is the module's own attribute; a leading _ "
                              "marks a private name)", argument=argument,
                              fix="give the result type a public class name (MyResult)")
        if name in vars(dpframe) or name in _submodules():   # dp.testing, before dpframe.testing is imported
            raise PluginError(f"plugin {plugin!r}: query family {item.name!r} declares a result type named {name!r}, "
                              f"which is dp.{name} already (dpframe's own)", argument=argument,
                              fix="give the result type another name")


def check_result_types(families: Registry[QueryFamily], plugin: str, item: QueryFamily, argument: str) -> None:
    """A PluginError (naming ``argument``) when ``item`` gives a result type name another family has another class.

    ``dp.<Name>`` is one class: two families of two plugins declaring ``{"Fit": their own class}`` left ``dp.Fit``
    to whichever registered last, and ``isinstance(out, dp.Fit)`` false for the other's results. The same class under
    the same name (families of one plugin sharing it) is no conflict, nor is the family ``item`` replaces by name
    (``replaces=``: its types go with it).

    Example:
        >>> class Fit: ...
        >>> class OtherFit: ...
        >>> class Mine:
        ...     name, attach, methods, result_types = "mine", "frame", (), {"Fit": Fit}
        ...     def build(self, source, /, *args, **kwargs): ...
        >>> class Theirs(Mine):
        ...     name, result_types = "theirs", {"Fit": OtherFit}
        >>> families = Registry("query family", replaceable=True)
        >>> families.add(Mine(), name="mine", plugin="mine_plugin", first_party=False)
        >>> check_result_types(families, "their_plugin", Theirs(), "dpframe_query_families")
        Traceback (most recent call last):
        ...
        dpframe.errors.PluginError: dpframe_query_families: plugins 'mine_plugin' (query family 'mine') and ...

    """
    for entry in families:
        if entry.name == item.name:     # replaced by name (replaces=), or refused as a second family of that name
            continue
        for name, kind in entry.item.result_types.items():
            theirs = item.result_types.get(name)
            if theirs is not None and theirs is not kind:
                raise PluginError(f"plugins {entry.plugin!r} (query family {entry.name!r}) and {plugin!r} (query "
                                  f"family {item.name!r}) both declare a result type named {name!r}, as different "
                                  f"classes ({kind.__module__}.{kind.__qualname__}, {theirs.__module__}."
                                  f"{theirs.__qualname__}): dp.{name} would be whichever registered last",
                                  argument=argument,
                                  fix=f"give one of them another name, declare the other plugin's class under "
                                      f"{name!r}, or block one of the two plugins with {BLOCK_ENV}")


@lru_cache(maxsize=1)
def _submodules() -> frozenset[str]:
    """The names of dpframe's submodules: ``dp.<name>`` once imported, whatever a plugin declares."""
    import dpframe

    return frozenset(m.name for m in pkgutil.iter_modules(dpframe.__path__))


def _registrar(hook: str, found: _Registries, plugin: str, first_party: bool) -> Callable[..., None]:
    """The ``register`` callback ``plugin`` gets in ``hook``."""
    def mechanism(item: Any, /, *, replaces: str | None = None) -> None:
        if not isinstance(item, Mechanism):
            raise PluginError(f"plugin {plugin!r} registered {item!r}, which is not a Mechanism",
                              argument="dpframe_mechanisms",
                              fix="give it name, handles, notions, validate(), parts() and plan()")
        check_declared(plugin, item)
        found.mechanisms.add(item, name=item.name, plugin=plugin, first_party=first_party, replaces=replaces)

    def factory(registry: Registry[Any]) -> Callable[..., None]:
        def add(item: Callable[..., Any], /, *, name: str, replaces: str | None = None) -> None:
            if not callable(item):
                raise PluginError(f"plugin {plugin!r} registered {item!r} as {registry.kind} {name!r}, which is not "
                                  "callable", argument=hook, fix=f"register a factory (a class or function) of the "
                                                                 f"{registry.kind}")
            registry.add(item, name=name, plugin=plugin, first_party=first_party, replaces=replaces)
        return add

    def query_family(item: Any, /, *, replaces: str | None = None) -> None:
        check_family(plugin, item, "dpframe_query_families")
        check_result_types(found.families, plugin, item, "dpframe_query_families")
        declared = MappingProxyType(dict(item.result_types))        # what was checked is what dp.<Name> reads
        found.families.add(item, name=item.name, plugin=plugin, first_party=first_party, replaces=replaces)
        found.result_types[item.name] = (item, declared)

    def method(item: Any, /, *, family: str, name: str | None = None, replaces: str | None = None) -> None:
        registry = found.methods.setdefault(family, Registry(f"{family} method", replaceable=True))
        registry.add(item, name=name if name is not None else str(getattr(item, "name", "")), plugin=plugin,
                     first_party=first_party, replaces=replaces)

    def audits(specs: Callable[[], Iterable[Any]], /, *, name: str, entry_points: Sequence[str] = ()) -> None:
        if not callable(specs) or isinstance(entry_points, str):
            raise PluginError(f"plugin {plugin!r} registered audits {name!r} with specs={specs!r}, "
                              f"entry_points={entry_points!r}", argument="dpframe_audits",
                              fix="register a zero-argument function returning AuditSpecs, and a list of "
                                  "'package.module:Class.method' names")
        found.audits.add(Audits(specs, tuple(entry_points)), name=name, plugin=plugin, first_party=first_party)

    def after_plain(register: Callable[..., None]) -> Callable[..., None]:
        """``register``, keeping a call with ``replaces=`` for after every plugin's plain registrations."""
        def call(*args: Any, replaces: str | None = None, **kwargs: Any) -> None:
            if replaces is None:
                register(*args, **kwargs)
            else:
                found.replacements.append(lambda: register(*args, replaces=replaces, **kwargs))
        return call

    registrars: dict[str, Callable[..., None]] = {
        "dpframe_mechanisms": after_plain(mechanism), "dpframe_accountants": after_plain(factory(found.accountants)),
        "dpframe_backends": after_plain(factory(found.backends)), "dpframe_methods": after_plain(method),
        "dpframe_query_families": after_plain(query_family), "dpframe_audits": audits}
    return registrars[hook]


class SessionPlugins(PluginHost):
    """What one session sees of a plugin host: its registries as they were when the session was made.

    ``Session`` takes one of the process-wide host (:meth:`PluginHost.snapshot`): a plugin registered in the process
    afterwards (another library's import, a test's ``plugin_host().register``) does not change the mechanisms,
    families, backends or routing of a running session's queries; a new session sees it. Registering in it is
    refused: register in ``plugin_host()`` before making the session (tests pin objects in one session with
    :func:`dpframe.testing.pin_mechanisms` / :func:`~dpframe.testing.pin_families`).
    """

    def __init__(self, base: PluginHost) -> None:
        self.__dict__.update(base.__dict__)     # share the loaded plugin manager; no reload of entry points
        self._loaded = base._registries()       # the process-wide host makes new registries when plugins change
        self._plugins_listed = base._listed()   # what describe() shows: the plugins these registries came from

    def _registries(self) -> _Registries:
        assert self._loaded is not None
        return self._loaded

    def _listed(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return self._plugins_listed

    def register(self, plugin: object, name: str) -> None:
        """Refused: a session's plugins are fixed when it is made."""
        raise _fixed(name)

    def unregister(self, name: str) -> None:
        """Refused: a session's plugins are fixed when it is made."""
        raise _fixed(name)


def _fixed(name: str) -> PluginError:
    return PluginError(f"plugin {name!r}: a session's plugins are fixed when it is made", argument="plugin",
                       fix="register it in dpframe.plugin.plugin_host() before creating the session (a test pins "
                           "objects in one session with dpframe.testing.pin_mechanisms / pin_families)")


_LOADING = threading.local()


@contextmanager
def _loading(where: str) -> Iterator[None]:
    """Mark this thread as loading plugins (``where``: what runs) until the block ends."""
    stack: list[str] = getattr(_LOADING, "stack", [])
    _LOADING.stack = stack
    stack.append(where)
    try:
        yield
    finally:
        stack.pop()


def _refuse_while_loading(action: str, name: str) -> None:
    """A PluginError when plugin ``name`` is (un)registered while this thread loads plugins (a hook, an import).

    ``name`` ``"*"``: a second host is being built there (``plugin_host()`` called at an entry point's import, before
    the first host is cached, built another inside the first one's loading, with the importing module half-defined).

    Registering inside a hook reloaded the host's registries inside its own loading (the hook ran again; pluggy's raw
    "already registered" error, both plugins lost); registering at an entry point's import went to whichever host
    ``plugin_host()`` returned — a second one built inside the first one's loading, or the cached one — never to
    the one loading, where it was lost.
    """
    stack: list[str] = getattr(_LOADING, "stack", [])
    if stack:
        if name == "*":
            raise PluginError(f"a second plugin host was {action} while dpframe was loading plugins (in {stack[-1]}): "
                              "plugin_host() called when a plugin's module is imported, before the first host is "
                              "ready, loads every plugin again (the importing one half-defined)", argument="plugin",
                              fix="call dpframe.plugin.plugin_host() when your code runs, not at import")
        raise PluginError(f"plugin {name!r} was {action} while dpframe was loading plugins (in {stack[-1]}): that "
                          "plugin would be lost", argument="plugin",
                          fix="a hook registers what its plugin provides only through its `register` argument; "
                              "make another plugin its own entry point in the 'dpframe' group (pyproject.toml: "
                              "[project.entry-points.dpframe]), or register it with plugin_host().register(...) "
                              "after dpframe has loaded its plugins (not at import)")


@lru_cache(maxsize=4)
def _host(blocked: frozenset[str]) -> PluginHost:
    return PluginHost(blocked)


def plugin_host() -> PluginHost:
    """The process-wide plugin host (rebuilt when ``DPFRAME_BLOCK_PLUGINS`` changes)."""
    blocked = frozenset(n.strip() for n in os.environ.get(BLOCK_ENV, "").split(",") if n.strip())
    return _host(blocked)
