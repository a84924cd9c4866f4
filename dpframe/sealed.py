"""Objects the analyst cannot reshape after they were validated: sealed attributes and final value classes.

A stream, channel or filter validates its parameters (the budget, the caps, its session) and reserves
their cost when it is built; every later call reads them again. Were they assignable, an analyst could
raise ``max_positives`` or ``max_hits`` after paying for fewer, lift a per-unit budget, or point the
object at another session whose data it would then read uncharged. A :class:`Sealed` class refuses to
assign or delete any public attribute once its ``__init__`` has returned (its own state lives in
``_``-prefixed attributes; mutable state is shown through read-only properties and copies).

Example:
    >>> class Cap(Sealed):
    ...     def __init__(self, most: int) -> None:
    ...         self.most = most
    >>> cap = Cap(3)
    >>> cap.most = 10**9
    Traceback (most recent call last):
    ...
    AttributeError: Cap.most is read-only: it was validated and charged when the object was built; build a new one

The value objects a query is built from (budgets, measures, targets, accuracy targets, the privacy unit)
are frozen, and :class:`Final`: they cannot be subclassed. The engine reads them many times (the cost
charged, then the noise calibrated, then the rows clamped); a subclass's property could answer
differently on each read — bounds (0, 1) to the planner and (0, 10⁶) to the backend.

"""

from __future__ import annotations

import functools
from typing import Any

from dpframe.errors import ArgumentError


class Sealed:
    """Public attributes are set by ``__init__`` only (a subclass's ``__init__`` seals when it returns)."""

    _sealed = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__init__

        @functools.wraps(init)
        def sealed_init(self: Sealed, *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            if type(self) is cls:
                object.__setattr__(self, "_sealed", True)
        setattr(cls, "__init__", sealed_init)   # noqa: B010 (mypy refuses assigning to a method)

    def __setattr__(self, name: str, value: object) -> None:
        if self._sealed and not name.startswith("_"):
            raise AttributeError(f"{type(self).__name__}.{name} is read-only: it was validated and charged when the "
                                 "object was built; build a new one")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)
        object.__delattr__(self, name)


class Final:
    """A value class that cannot be subclassed; ``argument`` names it in the error (``class C(Final, argument=...)``).

    Example:
        >>> class Bounds(Final, argument="bounds"): ...
        >>> class Wider(Bounds): ...
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: bounds: Bounds cannot be subclassed (Wider): the engine reads it more than once...

    """

    _argument = "argument"

    def __init_subclass__(cls, argument: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if Final in cls.__bases__:
            cls._argument = argument or cls.__name__
            return
        parent = next(b for b in cls.__mro__[1:] if issubclass(b, Final) and Final in b.__bases__)
        raise ArgumentError(f"{parent.__name__} cannot be subclassed ({cls.__name__}): the engine reads it more than "
                            "once, and a subclass could answer differently each time", argument=parent._argument,
                            fix=f"pass a {parent.__name__} built by dpframe itself")


__all__ = ["Final", "Sealed"]
