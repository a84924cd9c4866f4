"""The plugin host: pluggy hook specifications and the typed facade the engine uses.

Plugins are found through the ``dpframe`` entry-point group (the built-ins too). Set the environment
variable ``DPFRAME_BLOCK_PLUGINS`` to a comma-separated list of plugin names to keep them from loading.
"""

from dpframe.plugin.hookspecs import (
    RegisterAudits,
    RegisterFactory,
    RegisterFamily,
    RegisterMechanism,
    RegisterMethod,
    hookimpl,
    hookspec,
)
from dpframe.plugin.manager import PluginHost, PluginInfo, Route, SessionPlugins, plugin_host
from dpframe.plugin.registry import Entry, Registry

__all__ = ["Entry", "PluginHost", "PluginInfo", "RegisterAudits", "RegisterFactory", "RegisterFamily",
           "RegisterMechanism", "RegisterMethod", "Registry", "Route", "SessionPlugins", "hookimpl", "hookspec",
           "plugin_host"]
