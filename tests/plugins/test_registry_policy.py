"""One registry, one collision policy (issue 20, step 5): clashes name both plugins, accountants are never
replaceable, typos in hook names and return-style hooks are refused, `dpframe plugins` tells the truth for
class-based plugins, and every hook is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dpframe as dp
from dpframe.accounting import BasicAccountant
from dpframe.backends.polars import PolarsBackend
from dpframe.plugin import PluginHost
from dpframe.plugin.hookspecs import DPFrameSpecs

DOCS = Path(__file__).resolve().parents[2] / "docs"


class Lenient(BasicAccountant):
    """An accountant that would let everything through (what a malicious package would try)."""

    name = "basic"


def _host_with(plugin: object, name: str = "third") -> PluginHost:
    host = PluginHost()
    host.register(plugin, name=name)
    return host


def test_a_plugin_cannot_replace_the_enforcing_accountant() -> None:
    class Evil:
        @dp.hookimpl
        def dpframe_accountants(self, register):  # noqa: ANN001, ANN202
            register(Lenient, name="basic", replaces="basic")

    with pytest.raises(dp.PluginError, match=r"'evil' registers an accountant named 'basic'.*'core' \(built in\)"
                                             r".*never be replaced"):
        _host_with(Evil(), "evil")


def test_a_silent_clash_names_both_plugins_and_the_fix() -> None:
    class Shadow:
        @dp.hookimpl
        def dpframe_backends(self, register):  # noqa: ANN001, ANN202
            register(PolarsBackend, name="polars")

    with pytest.raises(dp.PluginError, match=r"'shadow' registers a backend named 'polars', which plugin 'core'"
                                             r".*replaces='polars'.*DPFRAME_BLOCK_PLUGINS") as info:
        _host_with(Shadow(), "shadow")
    assert info.value.argument == "backend"


def test_an_explicit_replacement_is_allowed_where_replaceable() -> None:
    class Faster(PolarsBackend):
        pass

    class Replace:
        @dp.hookimpl
        def dpframe_backends(self, register):  # noqa: ANN001, ANN202
            register(Faster, name="polars", replaces="polars")

    host = _host_with(Replace(), "faster")
    assert isinstance(host.backend("polars"), Faster)
    assert "backend polars" in {i.name: i.provides for i in host.describe()}["faster"]


def test_a_misspelled_hook_is_refused_when_the_plugin_loads() -> None:
    class Typo:
        @dp.hookimpl
        def dpframe_mechanism(self, register):  # noqa: ANN001, ANN202
            register(object())

    host = PluginHost()
    with pytest.raises(dp.PluginError, match="dpframe_mechanism") as info:
        host.register(Typo(), name="typo")
    assert info.value.argument == "hookimpl"
    assert host.pm.get_plugin("typo") is None           # the bad plugin is not left half-registered


def test_a_hook_that_returns_instead_of_registering_is_refused() -> None:
    class Old:
        @dp.hookimpl
        def dpframe_backends(self):  # noqa: ANN202
            return {"mine": PolarsBackend}

    with pytest.raises(dp.PluginError, match=r"returned a value instead of calling register"):
        _host_with(Old(), "old")


def test_class_based_and_specname_plugins_are_listed_with_what_they_register() -> None:
    class Named:
        @dp.hookimpl(specname="dpframe_backends")
        def add_backends(self, register):  # noqa: ANN001, ANN202
            register(PolarsBackend, name="polars_copy")

    host = _host_with(Named(), "named")
    assert {i.name: i.provides for i in host.describe()}["named"] == "backend polars_copy"
    assert "polars_copy" in host.backend_names()


def test_every_hook_is_documented() -> None:
    """Every hookspec has a row in docs/plugins.md's hook table (datasette's test_plugin_hooks_are_documented)."""
    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    hooks = sorted(n for n in vars(DPFrameSpecs) if n.startswith("dpframe_"))
    assert hooks and [h for h in hooks if not re.search(rf"^\| `{h}\(register\)`", text, re.M)] == []


def test_plugins_register_their_audits_and_module_entry_points() -> None:
    """The example plugin's and dpframe_topk's audits arrive through ``dpframe_audits``, like a third party's."""
    from dpframe.testing import registered_audits
    from dpframe.testing.registry import query_entry_points

    names = {s.name for s in registered_audits()}
    assert {"histogram (example plugin)", "linear_regression (example plugin)",
            "multi-label PATE (StableTopK per query, record level)"} <= names
    assert "dpframe_topk:MultiLabelPATE.collect" in query_entry_points()
    provides = {i.name: i.provides for i in dp.plugin.plugin_host().describe()}
    assert "audits histogram" in provides["histogram"]

    class Sloppy:
        @dp.hookimpl
        def dpframe_audits(self, register):  # noqa: ANN001, ANN202
            register(["not", "a", "factory"], name="sloppy")

    with pytest.raises(dp.PluginError, match="zero-argument function returning AuditSpecs"):
        _host_with(Sloppy(), "sloppy").audits()


def test_no_core_module_imports_a_plugin_package() -> None:
    """Core code reaches plugins only through hooks: no ``import dpframe_*`` anywhere under ``dpframe/``.

    One exception, never run: ``dpframe/__init__.py``'s ``if TYPE_CHECKING:`` block names the built-in families'
    result types for type checkers (``dp.TopKFailed``; at run time ``dp.__getattr__`` asks the plugin host, so a
    blocked plugin's types are still absent; test_review53g checks the block lists exactly those types).
    """
    import ast

    root = Path(dp.__file__).resolve().parent
    offenders = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path == root / "__init__.py":
            tree.body = [n for n in tree.body if not (isinstance(n, ast.If) and isinstance(n.test, ast.Name)
                                                      and n.test.id == "TYPE_CHECKING")]
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0].startswith("dpframe_")]
    assert offenders == []
