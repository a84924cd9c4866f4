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

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FrameType


class DPFrameError(Exception):
    """Base class of every error dpframe raises on purpose.

    ``str(e)`` is ``"<argument>: <message>. Fix: <fix>"``; ``e.message``, ``e.argument`` and ``e.fix`` are the parts
    (code quoting one error in another quotes ``e.message``, not a second fix).

    Example:
        >>> e = DPFrameError("must be positive", argument="q", fix="pass q=0.5")
        >>> str(e), e.message
        ('q: must be positive. Fix: pass q=0.5', 'must be positive')

    """

    def __init__(self, message: str, *, argument: str | None = None, fix: str | None = None) -> None:
        self.message = message
        self.argument = argument
        self.fix = fix
        text = message
        if argument is not None and not message.startswith(f"{argument}:"):
            text = f"{argument}: {message}"
        if fix:
            text = f"{text}. Fix: {fix}"
        super().__init__(text)


class ArgumentError(DPFrameError, ValueError):
    """An argument outside its domain: ``q=90`` for a quantile, ``max_rows=0``, ``ddof=2``, an empty name ...

    Raised when the call is made (or the query is built), before anything is charged.
    """


class SignatureError(ArgumentError, TypeError):
    """A call its function's signature does not take: a misspelt or unknown keyword, a missing or doubled argument ...

    ``argument`` names the keyword (the missing argument; the function, for too many positional ones), and the fix
    the closest parameter ("did you mean bounds=...?") or the keywords the call takes. Raised before the function's
    body runs: nothing was charged. It is also a ``TypeError``, as Python's own error was (see
    :mod:`dpframe.signatures`).

    Example:
        >>> import dpframe as dp
        >>> try:
        ...     dp.sum("spend", bound=(0, 10))
        ... except TypeError as e:
        ...     print(e.argument, "|", e.fix)
        bound | did you mean bounds=...?

    """


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


class TableChangedError(SchemaError):
    """A table's file changed after the session was created (see :mod:`dpframe.file_versions`).

    Raised before anything is charged when a query that reads the table starts after the change (queries
    on other tables still run); a change while a query reads the table makes that query fail instead
    (its cost stays charged, nothing is released).
    """


class BoundsError(DPFrameError, ValueError):
    """Clipping bounds are missing, inverted, NaN or infinite."""


class MissingBoundsError(BoundsError, TypeError):
    """A measure that needs clipping bounds (``dp.mean``, ``dp.median`` ...) was built without them.

    Its fix says what to pass. It is also a ``TypeError``, as Python's own missing-argument error was.
    """


class PlanError(DPFrameError, ValueError):
    """A query that is not fully private or that the planner cannot run (e.g. a raw column in the output)."""


class PolarsHabitError(PlanError, AttributeError, TypeError):
    """A Polars method a private frame, group-by or query does not have (it would hand back private rows).

    The message says what to write instead (see :mod:`dpframe.habits`). It is also an ``AttributeError``
    (``hasattr`` is False) and a ``TypeError`` (like ``len()`` of an object without a length).
    """


class PluginError(DPFrameError):
    """A plugin could not be loaded, or no plugin handles what a query asks for."""


class LedgerError(DPFrameError):
    """The budget ledger file is corrupt or belongs to a session with a different total budget."""


class RemoteError(DPFrameError):
    """A remote session's connection or protocol failed (``dp.connect``, ``dp.Server``): nothing was released.

    A request whose reply never arrived may still have been charged on the server: its ``history()`` says.
    """


class TopKWarning(UserWarning):
    """A SQL ``TOP_K`` released fewer keys than asked, or none: its frame is short or empty, not "no keys".

    ``outcome`` is the typed result the method chain returns (``dp.TopKFailed``, or ``dp.TopKPartial``
    whose ``keys`` are the returned frame); ``outcome.reason`` ends with what to try next. The query stays
    charged. ``warnings.simplefilter("error", dp.TopKWarning)`` turns it into an exception that carries the
    same ``outcome``.
    """

    def __init__(self, message: str, outcome: object) -> None:
        super().__init__(message)
        self.outcome = outcome


class NoIntervalWarning(UserWarning):
    """``collect(budget, ci=...)`` released no interval columns for some outputs: ``outputs`` names them.

    Their mechanism gives no data-independent interval (a quantile: its interval in value space would depend
    on the data near the released value; ``explain()`` gives its rank error instead). It reads the plan only
    (public parameters), and is warned before anything is charged, so ``warnings.simplefilter("error",
    dp.NoIntervalWarning)`` refuses the query free. A query whose outputs have no interval at all is refused
    instead (``PlanError`` naming ``ci``).
    """

    def __init__(self, message: str, outputs: tuple[str, ...]) -> None:
        super().__init__(message)
        self.outputs = outputs


_SINK: ContextVar[tuple[list[Warning], tuple[type[Warning], ...]] | None] = ContextVar("dpframe_warnings", default=None)


def emit(warning: Warning) -> None:
    """Warn ``warning`` at the analyst's line (the first caller outside dpframe).

    Inside :func:`collected`, hand it to the caller instead (``dp.Server`` sends it to the analyst's process), or
    raise it when it is of a class the block raises (the analyst's filters make it an error there).
    """
    sink = _SINK.get()
    if sink is not None:
        if isinstance(warning, sink[1]):
            raise warning
        sink[0].append(warning)
        return
    warnings.warn(warning, stacklevel=_caller()[1])


def _caller() -> tuple[FrameType, int]:
    """The first frame outside dpframe (the analyst's line), and its ``stacklevel`` seen from :func:`emit`."""
    root, frame, level = os.path.dirname(os.path.abspath(__file__)), sys._getframe(1), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(root + os.sep):
        frame, level = frame.f_back, level + 1
    return frame, level


def raises(warning: Warning) -> bool:
    """Whether :func:`emit` of ``warning`` here would raise it (the warning filters say ``error`` for it there).

    Read from ``warnings.filters`` as :func:`warnings.warn` matches them (message, class, module and line of the
    analyst's line), without warning anything: no filter, registry or ``showwarning`` is changed, so another
    thread's warnings are untouched. ``dp.connect``'s client tells the server, which then raises before the charge
    what in process is raised before the charge.

    Example:
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", NoIntervalWarning)
        ...     raises(NoIntervalWarning("ci= adds no interval columns", ()))
        True
        >>> raises(NoIntervalWarning("ci= adds no interval columns", ()))
        False

    """
    frame = _caller()[0]
    module, line, text = str(frame.f_globals.get("__name__", "<string>")), frame.f_lineno, str(warning)
    for action, message, category, where, at in warnings.filters:
        if (message is None or message.match(text)) and issubclass(type(warning), category) \
                and (where is None or where.match(module)) and at in (0, line):
            return bool(action == "error")
    return bool(warnings.defaultaction == "error")   # type: ignore[attr-defined]


@contextmanager
def collected(raising: tuple[type[Warning], ...] = ()) -> Iterator[list[Warning]]:
    """The warnings :func:`emit` gives while the block runs (this thread's context only), not warned.

    ``raising``: classes of warning :func:`emit` raises instead (the analyst's filters make them errors).
    """
    found: list[Warning] = []
    token = _SINK.set((found, raising))
    try:
        yield found
    finally:
        _SINK.reset(token)
