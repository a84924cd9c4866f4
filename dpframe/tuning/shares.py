"""How a query that tunes its own bounds (or releases diagnostics) splits its budget: stated, public shares.

The query's budget is split before anything runs: each tuned item (``max_rows``, ``max_groups``, the
clipping range of each ``bounds="auto"`` column) takes :data:`TUNING_PART` of ε (or ρ) — at most
:data:`MAX_TUNING` together, split evenly beyond three items —, diagnostics take
:data:`DIAGNOSTICS_SHARE`, and the release the rest together with all of δ. By sequential composition the
query costs exactly its budget, whatever the data.

Example:
    >>> import dpframe as dp
    >>> s = split(dp.ApproxDP(1, 1e-6), ("max_rows",), diagnostics=False)
    >>> s.tuning, s.release
    ((('max_rows', PureDP(epsilon=1/10)),), ApproxDP(epsilon=9/10, delta=1e-06))

"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dpframe.budgets import Budget, Notion, describe, make
from dpframe.errors import BudgetError
from dpframe.planning import first

TUNING_PART = Fraction(1, 10)
"""The share of a query's ε (or ρ) each tuned bound spends."""
MAX_TUNING = Fraction(3, 10)
"""The most that tuning takes of a query's ε (or ρ), however many bounds are tuned."""
DIAGNOSTICS_SHARE = Fraction(1, 10)
"""The share of a query's ε (or ρ) that ``collect(..., diagnostics=True)`` spends."""
MIN_TUNING_EPSILON = Fraction(1, 100)
"""The smallest ε one tuned item may have (ρ: ε²/2): below it the histogram's noise hides everything."""


@dataclass(frozen=True)
class Shares:
    """A query budget split into tuning shares, a diagnostics share and the release's share."""

    budget: Budget
    tuning: tuple[tuple[str, Budget], ...]
    diagnostics: Budget | None
    release: Budget

    def describe(self) -> str:
        """E.g. 'max_rows ε=1/10, diagnostics ε=1/20, release ε=17/20, δ=1e-06'."""
        parts = [f"{item} {describe(share)}" for item, share in self.tuning]
        if self.diagnostics is not None:
            parts.append(f"diagnostics {describe(self.diagnostics)}")
        return ", ".join([*parts, f"release {describe(self.release)}"])


def split(budget: Budget, items: tuple[str, ...], *, diagnostics: bool) -> Shares:
    """The shares of ``budget`` for tuning ``items`` (and diagnostics); a BudgetError if a tuning part is too small.

    Example:
        >>> import dpframe as dp
        >>> split(dp.PureDP(0.05), ("max_rows",), diagnostics=False)
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: budget: max_rows='auto' needs a query budget of at least ε = 0.1 (each tuned ...

    """
    notion: Notion = "zcdp" if budget.notion == "zcdp" else "pure"
    total = first(budget)
    tuning = min(TUNING_PART * len(items), MAX_TUNING)
    each = total * tuning / len(items) if items else Fraction(0)
    minimum = MIN_TUNING_EPSILON if notion == "pure" else MIN_TUNING_EPSILON**2 / 2
    if items and each < minimum:
        symbol = "ε" if notion == "pure" else "ρ"
        needed = minimum * len(items) / tuning
        names = ", ".join(f"{i}='auto'" if not i.startswith("bounds") else f"{i[7:-1]} bounds='auto'" for i in items)
        raise BudgetError(f"{names} needs a query budget of at least {symbol} = {float(needed):g} (each tuned bound "
                          f"spends {float(tuning / len(items)):g} of it, and needs {symbol} ≥ {float(minimum):g}); got "
                          f"{symbol} = {float(total):g}", argument="budget",
                          fix=f"give this query {symbol} ≥ {float(needed):g}, or pass fixed bounds (max_rows=..., "
                              "bounds=(lower, upper))")
    diag = total * DIAGNOSTICS_SHARE if diagnostics else Fraction(0)
    release = make(budget.notion, total - each * len(items) - diag, getattr(budget, "delta", Fraction(0)))
    return Shares(budget, tuple((item, make(notion, each)) for item in items),
                  make(notion, diag) if diagnostics else None, release)


__all__ = ["DIAGNOSTICS_SHARE", "MAX_TUNING", "MIN_TUNING_EPSILON", "TUNING_PART", "Shares", "split"]
