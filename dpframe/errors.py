"""The errors dpframe raises.

Every error names the argument (or column) that was wrong and says how to fix it. All of them derive
from :class:`DPFrameError`, so ``except dp.DPFrameError`` catches anything the engine refuses. An error
raised while a query is being validated or planned means nothing was charged.

Example:
    >>> import dpframe as dp
    >>> try:
    ...     dp.PureDP(-1)
    ... except dp.BudgetError as e:
    ...     print(e.argument)
    epsilon

"""

from __future__ import annotations


class DPFrameError(Exception):
    """Base class of every error dpframe raises on purpose."""

    def __init__(self, message: str, *, argument: str | None = None, fix: str | None = None) -> None:
        self.argument = argument
        self.fix = fix
        text = message
        if argument is not None and not message.startswith(f"{argument}:"):
            text = f"{argument}: {message}"
        if fix:
            text = f"{text}. Fix: {fix}"
        super().__init__(text)


class BudgetError(DPFrameError, ValueError):
    """A privacy budget is malformed (≤ 0, NaN, δ ≥ 1, ...)."""


class BudgetConversionError(DPFrameError, ValueError):
    """A budget cannot be converted soundly into the notion the session accounts in."""


class BudgetExceededError(DPFrameError):
    """A query's cost does not fit into the remaining budget. Nothing was charged."""

    def __init__(self, requested: str, remaining: str, difference: str, *, argument: str = "budget",
                 fix: str = "ask for a smaller budget for this query, or open a session with a larger total budget",
                 ) -> None:
        self.requested = requested
        self.remaining = remaining
        self.difference = difference
        super().__init__(f"requested {requested}, remaining {remaining}, short by {difference}; nothing was charged",
                         argument=argument, fix=fix)


class SchemaError(DPFrameError, ValueError):
    """Unknown table or column, or a column of the wrong type."""


class BoundsError(DPFrameError, ValueError):
    """Clipping bounds are missing, inverted, NaN or infinite."""


class PlanError(DPFrameError, ValueError):
    """A query that is not fully private or that the planner cannot run (e.g. a raw column in the output)."""


class PluginError(DPFrameError):
    """A plugin could not be loaded, or no plugin handles what a query asks for."""


class LedgerError(DPFrameError):
    """The budget ledger file is corrupt or belongs to a session with a different total budget."""
