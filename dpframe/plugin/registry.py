"""One registry, one collision policy, for everything plugins register.

Mechanisms, accountants, backends, query families and families' sub-methods (interior-point
algorithms, ...) are all kept in a :class:`Registry`, filled by the plugins' ``register`` callbacks
(built-ins use the same hooks). The policy is the same for every kind:

* a name is registered once; a second plugin using it is refused with a :class:`PluginError` that
  names both plugins — unless it passes ``replaces=<name>`` explicitly;
* names that dpframe itself registers are reserved the same way: replacing one needs ``replaces=``;
* an **enforcement-critical** kind (accountants: they decide what a session may spend) can never be
  replaced, not even with ``replaces=``;
* a replacement takes the replaced item's place, in its registration order (:attr:`Entry.previous` keeps what it
  replaced: a mechanism replacing a built-in keeps the built-in's routing precedence, see
  :meth:`dpframe.plugin.PluginHost.mechanism_for`). A second plugin replacing the same name is refused, naming
  both: which one won would depend on the order the environment lists entry points in.

Example:
    >>> reg = Registry("backend", replaceable=True)
    >>> reg.add(object, name="polars", plugin="core", first_party=True)
    >>> reg.add(object, name="polars", plugin="fast_polars", first_party=False)
    Traceback (most recent call last):
    ...
    dpframe.errors.PluginError: backend: plugin 'fast_polars' registers a backend named 'polars', which ...
    >>> reg.add(dict, name="polars", plugin="fast_polars", first_party=False, replaces="polars")
    >>> reg.get("polars"), reg.entry("polars").plugin, reg.entry("polars").replaced
    (<class 'dict'>, 'fast_polars', 'core')

"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from dpframe.errors import PluginError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered item: its name, the item, the plugin that registered it and whether that is built in.

    ``replaced``: the plugin whose item of the same name this one replaced (``replaces=``), None otherwise;
    ``previous``: that plugin's entry.
    """

    name: str
    item: T
    plugin: str
    first_party: bool
    replaced: str | None = None
    previous: Entry[T] | None = field(default=None, repr=False, compare=False)

    def replaces_built_in(self) -> Entry[T] | None:
        """The built-in entry this one replaced (``replaces=``), directly or through test pins; None otherwise.

        Example:
            >>> reg = Registry("backend", replaceable=True)
            >>> reg.add(object, name="polars", plugin="core", first_party=True)
            >>> reg.add(dict, name="polars", plugin="fast_polars", first_party=False, replaces="polars")
            >>> reg.entry("polars").replaces_built_in().plugin
            'core'

        """
        previous = self.previous
        while previous is not None and not previous.first_party:
            previous = previous.previous
        return previous


class Registry(Generic[T]):
    """Named items of one kind, in registration order (built-ins are registered first)."""

    def __init__(self, kind: str, *, replaceable: bool) -> None:
        self.kind = kind
        self.replaceable = replaceable
        self._entries: dict[str, Entry[T]] = {}

    def add(self, item: T, *, name: str, plugin: str, first_party: bool, replaces: str | None = None) -> None:
        """Register ``item`` as ``name`` (see the module docstring for the collision policy)."""
        if not isinstance(name, str) or not name:
            raise PluginError(f"plugin {plugin!r} registers a {self.kind} without a name ({name!r})",
                              argument=self.kind, fix="give it a non-empty string name")
        if replaces is not None and replaces != name:
            raise PluginError(f"plugin {plugin!r} registers {self.kind} {name!r} with replaces={replaces!r}",
                              argument="replaces", fix="replaces= must repeat the name being replaced")
        existing = self._entries.get(name)
        if existing is None and replaces is not None:
            raise PluginError(f"plugin {plugin!r} replaces {self.kind} {name!r}, which nothing registered",
                              argument="replaces", fix=f"leave replaces= out (no {self.kind} {name!r} exists)")
        if existing is not None:
            owner = f"{existing.plugin!r}{' (built in)' if existing.first_party else ''}"
            if not self.replaceable:
                raise PluginError(f"plugin {plugin!r} registers an {self.kind} named {name!r}, which plugin {owner} "
                                  f"already registered; {self.kind}s enforce the budget and can never be replaced",
                                  argument=self.kind, fix="give it another name and select it by that name")
            if replaces is None:
                raise PluginError(f"plugin {plugin!r} registers a {self.kind} named {name!r}, which plugin {owner} "
                                  "already registered", argument=self.kind,
                                  fix=f"give it another name, pass replaces={name!r} to replace it on purpose, or "
                                      "block one of the two plugins with DPFRAME_BLOCK_PLUGINS")
            if existing.replaced is not None and existing.plugin != plugin:
                raise PluginError(f"plugins {existing.plugin!r} and {plugin!r} both replace the {self.kind} {name!r} "
                                  f"of plugin {existing.replaced!r}: which one runs would depend on the order the "
                                  "environment lists them in", argument="replaces",
                                  fix=f"keep one: block the other with DPFRAME_BLOCK_PLUGINS={plugin} (or "
                                      f"{existing.plugin}), or uninstall it")
        self._entries[name] = Entry(name, item, plugin, first_party, None if existing is None else existing.plugin,
                                    existing)

    def pin(self, item: T, *, name: str, plugin: str) -> None:
        """Put ``item`` in front as ``name`` for a test (``dpframe.testing.pin_families``); not for plugins.

        It replaces whatever has that name, pins included (the last pinned wins), with no collision check; an
        enforcement-critical registry (``replaceable=False``: accountants) takes no pins, as it takes no ``replaces=``.

        Example:
            >>> reg = Registry("query family", replaceable=True)
            >>> reg.add(object, name="top_k", plugin="topk", first_party=True)
            >>> reg.pin(dict, name="top_k", plugin="dpframe.testing")
            >>> reg.get("top_k"), reg.entry("top_k").replaced
            (<class 'dict'>, 'topk')
            >>> Registry("accountant", replaceable=False).pin(dict, name="basic", plugin="mine")
            Traceback (most recent call last):
            ...
            dpframe.errors.PluginError: accountant: accountants enforce the budget: 'basic' cannot be pinned...

        """
        if not self.replaceable:
            raise PluginError(f"{self.kind}s enforce the budget: {name!r} cannot be pinned", argument=self.kind,
                              fix="register it under another name and select it by that name")
        existing = self._entries.get(name)
        self._entries[name] = Entry(name, item, plugin, False, None if existing is None else existing.plugin,
                                    existing)

    def get(self, name: str) -> T:
        """The item registered as ``name``; a :class:`PluginError` listing the names otherwise."""
        return self.entry(name).item

    def entry(self, name: str) -> Entry[T]:
        """The entry registered as ``name``."""
        if not isinstance(name, str) or name not in self._entries:
            raise PluginError(f"unknown {self.kind} {name!r}", argument=self.kind,
                              fix=f"use one of {sorted(self._entries)} (`dpframe plugins` lists what is installed)")
        return self._entries[name]

    def copy(self) -> Registry[T]:
        """A new registry of the same kind and policy holding the same entries (adding to it leaves this one as is).

        Example:
            >>> reg = Registry("backend", replaceable=True)
            >>> reg.add(object, name="polars", plugin="core", first_party=True)
            >>> view = reg.copy()
            >>> view.add(dict, name="mine", plugin="me", first_party=False)
            >>> reg.names(), view.names()
            (['polars'], ['mine', 'polars'])

        """
        copied: Registry[T] = Registry(self.kind, replaceable=self.replaceable)
        copied._entries = dict(self._entries)
        return copied

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(list(self._entries.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["Entry", "Registry"]
