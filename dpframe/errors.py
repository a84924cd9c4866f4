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

import difflib
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType


def closest(name: object, names: Iterable[str]) -> str | None:
    """The public name of ``names`` closest to ``name`` (a misspelling of it), or None when none is close.

    Example:
        >>> closest("arr_dealy", ["origin", "arr_delay"]), closest("zzz", ["origin"])
        ('arr_delay', None)

    """
    close = difflib.get_close_matches(name, list(names), n=1) if isinstance(name, str) else []
    return close[0] if close else None


def one_of(name: object, names: Iterable[str], what: str = "") -> str:
    """The fix for an unknown name: the closest public name first, if one is close, then all of them.

    ``names`` are public (a schema's columns, the session's tables), so the fix says nothing of the data.

    Example:
        >>> one_of("arr_dealy", ["origin", "arr_delay"])
        "did you mean 'arr_delay'? Use one of ['origin', 'arr_delay']"
        >>> one_of("zzz", ["origin"], "the columns ")
        "use one of the columns ['origin']"

    """
    names = list(names)
    close = closest(name, names)
    return (f"did you mean {close!r}? Use" if close else "use") + f" one of {what}{names}"


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


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type: text or a bool where a number goes, a float array where integers go ...

    Also a ``TypeError``, as Python's own error for a wrong type is (the exact samplers of :mod:`dpframe.noise`
    raised plain ``TypeError`` s before). Raised when the call is made, before anything is drawn or charged.

    Example:
        >>> from dpframe.noise import SeededRandomSource, discrete_laplace
        >>> try:
        ...     discrete_laplace("1", 3, SeededRandomSource(0))
        ... except TypeError as e:
        ...     print(type(e).__name__, e.argument)
        ArgumentTypeError scale

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


LIBRARY = "dpframe.noise"
"""The package whose :class:`ArgumentError` s concern the arguments of its own functions (a sampler's ``scale``,
``size``, ``rng``): out of plugin code, they are the plugin's call, never the analyst's (:func:`refused_in`)."""

OWN_ARGUMENTS: Mapping[str, frozenset[str]] = MappingProxyType({
    "dpframe.mechanism.noise": frozenset({"share"}),
    "dpframe.budgets": frozenset({"share", "parts"}),
})
"""Modules of the plugin API outside :data:`LIBRARY` whose functions refuse some of their own arguments, by the names
they give them: ``Noise.calibrate(sensitivity, share)`` refusing an (ε, δ) ``share``, ``divide(share, parts)``. Plugin
code passes these, never the analyst (whose ``budget`` a refusal naming ``budget`` is about: a budget too small for
the sampler), so :func:`refused_in` counts them as the plugin's call too."""


def refused_in(error: BaseException, package: str = LIBRARY) -> str | None:
    """The function of ``package`` (module-qualified) that raised ``error`` while checking its own arguments, or None.

    Read from the traceback: the outermost frame of ``package`` below where ``error`` is being handled, i.e. the
    function plugin code called (``dpframe.noise.samplers.discrete_laplace``). None when ``error`` was raised
    elsewhere (a plugin's own ``raise dp.ArgumentError(...)`` refusing an analyst's option, an engine check).

    Example:
        >>> from dpframe.noise import SeededRandomSource, discrete_laplace
        >>> try:
        ...     discrete_laplace(-1, 1, SeededRandomSource(0))
        ... except ArgumentError as e:
        ...     print(refused_in(e), refused_in(ArgumentError("q: must be in [0, 1]")))
        dpframe.noise.samplers.discrete_laplace None
        >>> from fractions import Fraction
        >>> from dpframe.budgets import ApproxDP
        >>> from dpframe.mechanism import Noise
        >>> try:
        ...     Noise.calibrate(Fraction(1), ApproxDP(1, 1e-6))      # its share: the plugin's call (OWN_ARGUMENTS)
        ... except BudgetConversionError as e:
        ...     print(refused_in(e))
        dpframe.mechanism.noise.Noise.calibrate

    """
    own = getattr(error, "argument", None)
    tb = error.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module == package or module.startswith(f"{package}.") or (
                package == LIBRARY and own in OWN_ARGUMENTS.get(module, ())):
            return f"{module}.{tb.tb_frame.f_code.co_qualname}"
        tb = tb.tb_next
    return None


def plugin_failure(error: Exception, who: str, where: str, *, argument: str, fix: str) -> PluginError | None:
    """The :class:`PluginError` for ``error``, raised by plugin code (``who`` failed ``where``) while planning.

    None for a :class:`DPFrameError` the plugin raised on purpose (it refuses the analyst's measure or argument:
    it passes through as it is). A :class:`DPFrameError` one of dpframe's samplers raised about its own arguments
    (:func:`refused_in`: a negative scale, no ``rng`` while planning) is the plugin's call, as is any other
    exception (a ``KeyError``): a PluginError naming ``who`` and the hook (``where``: ``"in plan()"``). Planning
    hooks see public values only, so the message quotes the error's.

    Example:
        >>> print(plugin_failure(KeyError("edges"), "mechanism 'mine'", "in plan()", argument="mechanism", fix="-"))
        mechanism: mechanism 'mine' failed in plan() (KeyError: 'edges'). Fix: -
        >>> plugin_failure(PlanError("no bins", argument="edges"), "mechanism 'mine'", "in plan()", argument="m",
        ...                fix="-")

    """
    if isinstance(error, DPFrameError):
        callee = refused_in(error)
        if callee is None:
            return None
        detail = f"{callee}() refused its argument ({type(error).__name__}: {error.message}" + \
                 (f", argument {error.argument!r})" if error.argument else ")")
        return PluginError(f"{who} failed {where}: {detail}", argument=argument, fix=fix)
    return PluginError(f"{who} failed {where} ({type(error).__name__}: {error})", argument=argument, fix=fix)


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
    dp.NoIntervalWarning)`` refuses the query free, in process and through ``dp.Server`` (which has the analyst's
    process warn it before the query goes on). A query whose outputs have no interval at all is refused instead
    (``PlanError`` naming ``ci``).
    """

    def __init__(self, message: str, outputs: tuple[str, ...]) -> None:
        super().__init__(message)
        self.outputs = outputs


_SINK: ContextVar[Callable[[Warning], None] | None] = ContextVar("dpframe_warnings", default=None)


def emit(warning: Warning) -> None:
    """Warn ``warning`` at the analyst's line (the first caller outside dpframe).

    Inside :func:`handed_to`, hand it to that block's handler instead, at once (``dp.Server`` sends it to the
    analyst's process, where it is warned before the request goes on).
    """
    handler = _SINK.get()
    if handler is not None:
        handler(warning)
        return
    root, frame, level = os.path.dirname(os.path.abspath(__file__)), sys._getframe(0), 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(root + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)


@contextmanager
def handed_to(handler: Callable[[Warning], None]) -> Iterator[None]:
    """The block's :func:`emit` calls hand their warning to ``handler`` (this thread's context only), not warned.

    Called where ``emit`` is, so what ``handler`` raises stops the block there, as a warning the analyst's filter
    turns into an exception does in process (before a query's charge, for a warning given before it). ``handler``
    receives released values only: every warning dpframe emits is made from public parameters before a charge
    (``NoIntervalWarning``) or from a released result after it (a SQL ``TOP_K``'s ``TopKWarning``).

    Example:
        >>> found = []
        >>> with handed_to(found.append):
        ...     emit(UserWarning("not warned here"))
        >>> [str(w) for w in found]
        ['not warned here']

    """
    token = _SINK.set(handler)
    try:
        yield
    finally:
        _SINK.reset(token)
