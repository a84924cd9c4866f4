"""Hook specifications of the ``dpframe`` plugin project.

A plugin is a module (or object) with functions marked ``@dpframe.hookimpl``, advertised in its
package metadata under the ``dpframe`` entry-point group::

    [project.entry-points.dpframe]
    histogram = "dpframe_histogram"

Every hook receives a ``register`` callback and calls it once per item; the host owns naming and
collisions (:mod:`dpframe.plugin.registry`). The built-ins register through the same hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import pluggy

hookspec = pluggy.HookspecMarker("dpframe")
hookimpl = pluggy.HookimplMarker("dpframe")


class RegisterMechanism(Protocol):
    """``register(mechanism, replaces=None)``: the name is ``mechanism.name``."""

    def __call__(self, mechanism: Any, /, *, replaces: str | None = None) -> None: ...


class RegisterFactory(Protocol):
    """``register(factory, name=..., replaces=None)`` for accountants and backends."""

    def __call__(self, factory: Callable[..., Any], /, *, name: str, replaces: str | None = None) -> None: ...


class RegisterFamily(Protocol):
    """``register(family, replaces=None)``: the name is ``family.name``."""

    def __call__(self, family: Any, /, *, replaces: str | None = None) -> None: ...


class RegisterMethod(Protocol):
    """``register(method, family=..., name=None, replaces=None)``: a sub-method of a query family."""

    def __call__(self, method: Any, /, *, family: str, name: str | None = None,
                 replaces: str | None = None) -> None: ...


class RegisterAudits(Protocol):
    """``register(specs, name=..., entry_points=())``: a zero-argument factory of privacy-audit specs."""

    def __call__(self, specs: Callable[[], Iterable[Any]], /, *, name: str,
                 entry_points: Sequence[str] = ()) -> None: ...


class DPFrameSpecs:
    """The extension points."""

    @hookspec
    def dpframe_mechanisms(self, register: RegisterMechanism) -> None:
        """Register mechanism objects (see :class:`dpframe.mechanism.Mechanism`).

        Example::

            @dpframe.hookimpl
            def dpframe_mechanisms(register):
                register(HistogramMechanism())
        """

    @hookspec
    def dpframe_accountants(self, register: RegisterFactory) -> None:
        """Register accountant factories: ``factory(total_budget)`` builds an accountant.

        Accountants enforce the budget, so a name can never be registered twice (``replaces=`` is refused).

        Example::

            @dpframe.hookimpl
            def dpframe_accountants(register):
                register(HoldBackAccountant, name="basic_holdback")
        """

    @hookspec
    def dpframe_backends(self, register: RegisterFactory) -> None:
        """Register execution-backend factories: ``factory()`` builds a backend.

        Example::

            @dpframe.hookimpl
            def dpframe_backends(register):
                register(MyBackend, name="mine")
        """

    @hookspec
    def dpframe_query_families(self, register: RegisterFamily) -> None:
        """Register query families (:class:`dpframe.family.QueryFamily`): ``agg``, ``top_k`` ... and yours.

        A family becomes a method of ``Frame`` or ``GroupBy`` (its ``attach``) and of ``frame.query(name)``.
        A name that is a core method (``filter``, ``select`` ...) is refused; a taken name needs ``replaces=``.

        Example::

            @dpframe.hookimpl
            def dpframe_query_families(register):
                register(LinearRegression())
        """

    @hookspec
    def dpframe_methods(self, register: RegisterMethod) -> None:
        """Register sub-methods of a query family, e.g. an interior-point algorithm (``family="interior_point"``).

        The family validates its own methods (the learning plugin checks ``InteriorPointAlgorithm``). See
        ``docs/plugins.md``.

        Example::

            @dpframe.hookimpl
            def dpframe_methods(register):
                register(MyInteriorPoint(), family="interior_point")
        """

    @hookspec
    def dpframe_audits(self, register: RegisterAudits) -> None:
        """Register the privacy audits of your queries: factories of :class:`dpframe.testing.AuditSpec`.

        A factory runs only when an audit does (:func:`dpframe.testing.registered_audits`), so importing
        the plugin never loads the test kit. ``entry_points`` names module-level query entry points
        (``"package.module:Class.method"``) that the audit meta-test must find covered by a spec; the
        query families and their methods it finds in the family registry.

        Example::

            @dpframe.hookimpl
            def dpframe_audits(register):
                from my_plugin.audits import specs   # a function returning a list of AuditSpec
                register(specs, name="my_plugin")
        """
