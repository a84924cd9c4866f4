"""Declarative release targets: ``dp.above``, ``dp.below``, ``dp.between``, ``dp.outside``.

A target-charging channel's ``conditional_release(query, when=...)`` publishes its noisy value only if
the value lies in ``when``, a target fixed before the call; ``revise(name, when=...)`` may release a kept
value later. The target is a *public set* the library evaluates itself — exactly, on the statistic's
grid, before any conversion to float — so no analyst code ever sees a value that is not released. A
function (``when=lambda v: ...``) is refused: it would see every noisy value, released or not, and
record it (misses are free).

The four targets split the number line at public points (ends included as shown):

* ``dp.above(x)``: x ≤ v — the complement of ``dp.below(x)``, v < x (the same split as ``ch.test``'s
  "query ≥ threshold");
* ``dp.between(a, b)``: a ≤ v ≤ b — the complement of ``dp.outside(a, b)``, v < a or v > b.

Example:
    >>> import dpframe as dp
    >>> dp.above(4000), dp.between(0.1, 20.5), dp.outside(-1, 1)
    (dp.above(4000), dp.between(0.1, 20.5), dp.outside(-1, 1))
    >>> [dp.above(4000).contains(v) for v in (3999, 4000)], dp.below(4000).contains(4000)
    ([False, True], False)
    >>> dp.between(5, 1)
    Traceback (most recent call last):
    ...
    dpframe.errors.ArgumentError: upper: must be ≥ lower = 5, got 1. Fix: pass dp.between(1, 5)

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dpframe.errors import ArgumentError
from dpframe.interactive.scalar import public_number
from dpframe.sealed import Final, plain
from dpframe.signatures import checked, checked_class


def _shown(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    as_float = repr(float(value))
    return as_float if Fraction(as_float) == value else str(value)      # 0.1 as typed, not 1/10


@checked_class
@dataclass(frozen=True)
class Target(Final, argument="when"):
    """A public set of values: the interval [lower, upper] (``inside=True``) or its complement.

    ``upper=None`` is +∞ (``dp.above`` / ``dp.below``). Build one with :func:`above`, :func:`below`,
    :func:`between` or :func:`outside`; the library evaluates it with :meth:`contains`.
    """

    lower: Fraction
    upper: Fraction | None
    inside: bool

    def __post_init__(self) -> None:
        bounds = (self.lower,) if self.upper is None else (self.lower, self.upper)
        if not all(isinstance(b, Fraction) for b in bounds) or not isinstance(self.inside, bool):
            raise ArgumentError("a target's ends are exact numbers", argument="when",
                               fix="build it with dp.above(x), dp.below(x), dp.between(a, b) or dp.outside(a, b)")
        # plain Fractions: a subclass's comparisons would receive every noisy value, released or not
        object.__setattr__(self, "lower", plain(self.lower))
        object.__setattr__(self, "upper", None if self.upper is None else plain(self.upper))
        if self.upper is not None and self.upper < self.lower:
            raise ArgumentError(f"must be ≥ lower = {_shown(self.lower)}, got {_shown(self.upper)}", argument="upper",
                               fix=f"pass dp.{self.kind}({_shown(self.upper)}, {_shown(self.lower)})")

    @property
    def kind(self) -> str:
        """``"above"``, ``"below"``, ``"between"`` or ``"outside"``."""
        if self.upper is None:
            return "above" if self.inside else "below"
        return "between" if self.inside else "outside"

    def contains(self, value: int | float | Fraction) -> bool:
        """Whether ``value`` is in the target (exact; a float is read as the target's ends are, by its repr).

        The library calls this on the exact noisy value; the analyst never has to.
        """
        if isinstance(value, float) and not math.isfinite(value):
            if math.isnan(value):
                raise ArgumentError("must be a number, got nan", argument="value", fix="pass a finite number or ±inf")
            return (value > 0 and self.upper is None) == self.inside     # +inf is above every end, -inf below
        v = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
        in_interval = self.lower <= v and (self.upper is None or v <= self.upper)
        return in_interval == self.inside

    def __repr__(self) -> str:
        ends = [self.lower] if self.upper is None else [self.lower, self.upper]
        return f"dp.{self.kind}({', '.join(_shown(e) for e in ends)})"


@checked
def above(threshold: float) -> Target:
    """The target "value ≥ ``threshold``" (a public, finite number).

    Example:
        >>> import dpframe as dp
        >>> dp.above(4000).contains(4000.0)
        True

    """
    return Target(public_number(threshold, "threshold"), None, True)


@checked
def below(threshold: float) -> Target:
    """The target "value < ``threshold``" (the complement of :func:`above`).

    Example:
        >>> import dpframe as dp
        >>> dp.below(10).contains(9), dp.below(10).contains(10)
        (True, False)

    """
    return Target(public_number(threshold, "threshold"), None, False)


@checked
def between(lower: float, upper: float) -> Target:
    """The target "``lower`` ≤ value ≤ ``upper``" (public, finite, ``lower`` ≤ ``upper``).

    Example:
        >>> import dpframe as dp
        >>> dp.between(10, 20).contains(20), dp.between(10, 20).contains(21)
        (True, False)

    """
    return Target(public_number(lower, "lower"), public_number(upper, "upper"), True)


@checked
def outside(lower: float, upper: float) -> Target:
    """The target "value < ``lower`` or value > ``upper``" (the complement of :func:`between`).

    Example:
        >>> import dpframe as dp
        >>> dp.outside(10, 20).contains(9), dp.outside(10, 20).contains(15)
        (True, False)

    """
    return Target(public_number(lower, "lower"), public_number(upper, "upper"), False)


def as_target(when: object) -> Target:
    """``when`` as a :class:`Target`; a function or anything else is refused (nothing is run or charged)."""
    if isinstance(when, Target):
        return when
    fix = "pass when=dp.above(4000) (or dp.below(x), dp.between(a, b), dp.outside(a, b))"
    if callable(when):
        raise ArgumentError("must be a declarative target, not a function: a function would see the noisy value "
                           "before it is released", argument="when", fix=fix)
    raise ArgumentError(f"must be a target such as dp.above(4000), got {type(when).__name__}", argument="when", fix=fix)
