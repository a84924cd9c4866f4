"""The plugin host: pluggy hook specifications and the typed facade the engine uses.

Plugins are found through the ``dpframe`` entry-point group (the built-ins too). Set the environment
variable ``DPFRAME_BLOCK_PLUGINS`` to a comma-separated list of plugin names to keep them from loading.
"""

from dpframe.plugin.hookspecs import hookimpl, hookspec
from dpframe.plugin.manager import PluginHost, PluginInfo, plugin_host

__all__ = ["PluginHost", "PluginInfo", "hookimpl", "hookspec", "plugin_host"]
