"""Read-only containers a plan fills on first read: what only ``explain()`` and the curve accountants ask for.

A mechanism's plan carries accuracy texts, 95% half-widths, noise labels and privacy curves. Every one is a
function of public values fixed when the plan is made (its calibrated noises), and a plain ``collect()`` of
a ``basic`` or ``zcdp`` session reads none of them. :class:`DeferredMapping` and :class:`DeferredTuple`
build them on their first read instead, once, and then answer as the read-only mapping or tuple built.
Nothing in them is ever written after it is built, and nothing can be written to them: there is no
``__setitem__``, and the built value is a ``MappingProxyType`` or a tuple. Reads on several threads at
once each get the built value (two first reads may both build it: the same public values, one kept).

Example:
    >>> calls = []
    >>> texts = DeferredMapping(lambda: calls.append(1) or {"len": "±3 (95%)"})
    >>> len(calls), texts["len"], dict(texts), len(calls)
    (0, '±3 (95%)', {'len': '±3 (95%)'}, 1)
    >>> texts == {"len": "±3 (95%)"}, DeferredTuple(lambda: (1, 2))[1]
    (True, 2)

"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, overload

V = TypeVar("V")
T = TypeVar("T")


class DeferredMapping(Mapping[str, V]):
    """A read-only mapping whose items ``build()`` returns on the first read (then kept).

    ``build`` receives no values: the engine's own function of a plan's public parameters.
    """

    __slots__ = ("_build", "_built")

    def __init__(self, build: Callable[[], Mapping[str, V]]) -> None:
        self._build: Callable[[], Mapping[str, V]] | None = build
        self._built: Mapping[str, V] | None = None

    @property
    def built(self) -> bool:
        """Whether the items were asked for (and built) yet."""
        return self._built is not None

    def _items(self) -> Mapping[str, V]:
        built = self._built
        if built is None:
            build = self._build
            if build is None:  # another thread built it since: it set ``_built`` before clearing ``_build``
                return self._items()
            built = MappingProxyType(dict(build()))
            self._built, self._build = built, None
        return built

    def __getitem__(self, key: str) -> V:
        return self._items()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The item of ``key``, else ``default``; a failure to build the items is raised, never read as missing.

        ``Mapping.get`` catches ``KeyError`` around ``self[key]``, which includes one raised by ``build()``: a
        plugin's bug (``noises[s.key]`` on a missing key) read as a missing text. Built first, outside that catch.

        Example:
            >>> DeferredMapping(lambda: {}["edges"]).get("len", "")
            Traceback (most recent call last):
            ...
            KeyError: 'edges'

        """
        return self._items().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __repr__(self) -> str:
        return repr(dict(self._items()))


class DeferredTuple(Sequence[T]):
    """A read-only sequence whose items ``build()`` returns on the first read (then kept as a tuple).

    ``build`` receives no values: the engine's own function of a plan's public parameters.
    """

    __slots__ = ("_build", "_built")

    def __init__(self, build: Callable[[], Sequence[T]]) -> None:
        self._build: Callable[[], Sequence[T]] | None = build
        self._built: tuple[T, ...] | None = None

    @property
    def built(self) -> bool:
        """Whether the items were asked for (and built) yet."""
        return self._built is not None

    def _items(self) -> tuple[T, ...]:
        built = self._built
        if built is None:
            build = self._build
            if build is None:  # another thread built it since: it set ``_built`` before clearing ``_build``
                return self._items()
            built = tuple(build())
            self._built, self._build = built, None
        return built

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: Any) -> Any:
        return self._items()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeferredTuple):
            other = other._items()
        return self._items() == other

    def __hash__(self) -> int:
        return hash(self._items())

    def __repr__(self) -> str:
        return repr(self._items())


__all__ = ["DeferredMapping", "DeferredTuple"]
