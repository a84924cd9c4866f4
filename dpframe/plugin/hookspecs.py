"""Hook specifications of the ``dpframe`` plugin project.

A plugin is a module (or object) with functions marked ``@dpframe.hookimpl``, advertised in its
package metadata under the ``dpframe`` entry-point group::

    [project.entry-points.dpframe]
    histogram = "dpframe_histogram"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("dpframe")
hookimpl = pluggy.HookimplMarker("dpframe")


class DPFrameSpecs:
    """The extension points."""

    @hookspec
    def dpframe_mechanisms(self) -> list[Any]:
        """Return mechanism objects (see :class:`dpframe.mechanism.Mechanism`).

        Example::

            @dpframe.hookimpl
            def dpframe_mechanisms():
                return [HistogramMechanism()]
        """
        raise NotImplementedError

    @hookspec
    def dpframe_accountants(self) -> dict[str, Callable[..., Any]]:
        """Return ``{name: factory}``; ``factory(total_budget)`` builds an accountant.

        Example::

            @dpframe.hookimpl
            def dpframe_accountants():
                return {"basic": BasicAccountant}
        """
        raise NotImplementedError

    @hookspec
    def dpframe_backends(self) -> dict[str, Callable[[], Any]]:
        """Return ``{name: factory}``; ``factory()`` builds an execution backend.

        Example::

            @dpframe.hookimpl
            def dpframe_backends():
                return {"polars": PolarsBackend}
        """
        raise NotImplementedError

    @hookspec
    def dpframe_interior_points(self) -> list[Any]:
        """Return interior-point algorithms for ``Frame.interior_point(method=...)`` (learning plugin).

        Each object follows ``dpframe_learning.interior_point.InteriorPointAlgorithm``: ``name``,
        ``approximate``, ``min_rows()``, ``cost()`` and ``run()``. A new name is offered next to the
        built-ins (``method="auto"`` picks whichever needs the fewest rows); a name already taken is
        refused. See ``docs/plugins.md``.

        Example::

            @dpframe.hookimpl
            def dpframe_interior_points():
                return [MyInteriorPoint()]
        """
        raise NotImplementedError
