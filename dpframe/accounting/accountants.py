"""Built-in accountants: basic composition (pure / approximate DP) and zCDP composition.

Both are *filters*: every charge is composed with what was spent before, and a charge is admitted
only if the composition still fits the total. Basic composition of (εᵢ, δᵢ) and additive composition
of ρᵢ (with δᵢ for approximate zCDP) stay valid when later budgets are chosen after seeing earlier
results (Rogers et al. 2016 for basic composition filters; Whitehouse et al. 2023 for zCDP filters).

Example:
    >>> from dpframe.budgets import PureDP, ZCDP
    >>> acc = ZCDPAccountant(ZCDP(1))
    >>> spent = acc.compose([acc.charge(PureDP(1)), ZCDP(0.25)])
    >>> spent, acc.fits(spent)
    (ZCDP(rho=3/4), True)

"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from typing import ClassVar

from dpframe.budgets import Budget, Notion, convert, describe, make, zero
from dpframe.errors import BudgetConversionError


class Accountant(ABC):
    """How a session composes charges. Subclass and register via ``dpframe_accountants``."""

    name: ClassVar[str]
    accepts: ClassVar[frozenset[Notion]]

    def __init__(self, total: Budget) -> None:
        if total.notion not in self.accepts:
            raise BudgetConversionError(
                f"the {self.name!r} accountant accounts in {sorted(self.accepts)}, not {total.notion}",
                argument="accountant", fix="pick the accountant that matches the session budget, or omit it")
        self.total = total

    @property
    def notion(self) -> Notion:
        """The notion charges are kept in (the total budget's)."""
        return self.total.notion

    def charge(self, cost: Budget) -> Budget:
        """A query's cost in this accountant's notion (raises if it cannot convert soundly)."""
        return convert(cost, self.notion)

    def compose(self, charges: Sequence[Budget]) -> Budget:
        """The total of ``charges`` (additive in the first coordinate and in δ)."""
        first = sum((_first(c) for c in charges), Fraction(0))
        delta = sum((getattr(c, "delta", Fraction(0)) for c in charges), Fraction(0))
        return make(self.notion, first, delta)

    def fits(self, spent: Budget) -> bool:
        """Whether a composed total is within the session's budget."""
        return _first(spent) <= _first(self.total) and _delta(spent) <= _delta(self.total)

    def remaining(self, spent: Budget) -> Budget:
        """What is left (coordinate-wise, never negative)."""
        return make(self.notion, max(Fraction(0), _first(self.total) - _first(spent)),
                    max(Fraction(0), _delta(self.total) - _delta(spent)))

    def shortfall(self, spent_after: Budget) -> str:
        """By how much a total overshoots the budget, as text."""
        over = make(self.notion, max(Fraction(0), _first(spent_after) - _first(self.total)),
                    max(Fraction(0), _delta(spent_after) - _delta(self.total)))
        return describe(over)

    def empty(self) -> Budget:
        """Nothing spent."""
        return zero(self.notion)

    @abstractmethod
    def describe(self) -> str:
        """One line for explain()."""


def _first(b: Budget) -> Fraction:
    return b.rho if b.notion == "zcdp" else b.epsilon  # type: ignore[union-attr]


def _delta(b: Budget) -> Fraction:
    return getattr(b, "delta", Fraction(0))


class BasicAccountant(Accountant):
    """Basic composition: ε and δ add up. For pure and approximate DP sessions."""

    name = "basic"
    accepts = frozenset({"pure", "approx"})

    def describe(self) -> str:
        return "basic composition (ε and δ add up)"


class ZCDPAccountant(Accountant):
    """zCDP composition: ρ adds up (pure ε converts to ρ = ε²/2); δ of approximate zCDP adds up."""

    name = "zcdp"
    accepts = frozenset({"zcdp"})

    def describe(self) -> str:
        return "zCDP composition (ρ adds up; pure ε counts as ε²/2)"


def default_accountant(total: Budget) -> str:
    """The accountant a session uses when none is named."""
    return "zcdp" if total.notion == "zcdp" else "basic"
