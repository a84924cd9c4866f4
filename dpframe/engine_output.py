"""What the engines may print or raise while they read private rows: no diagnostics, numpy's default errors.

Two process-wide settings that any code in the process can change through its libraries' public APIs turn
the engines' work on private rows into something the analyst reads outside any ε:

* **Polars' diagnostic output.** With ``pl.Config.set_verbose(True)`` (``POLARS_VERBOSE=1``) Polars prints to
  the process's standard error what it learns while it runs a query: ``rows_before: 49, rows_after: 49``
  for a filter of a Parquet scan (how many private rows passed it), ``3 estimated groups`` for a group-by,
  the bytes a sort buffered. ``POLARS_VERBOSE_SENSITIVE`` adds schemas and predicates,
  ``POLARS_LOG_METRICS`` prints each operator's row counts, ``POLARS_PARQUET_METRICS`` each column's page
  counts, ``POLARS_OOC_LOG_METRICS`` spill statistics. ``POLARS_VISUALIZE_PHYSICAL_PLAN`` and
  ``POLARS_VISUALIZE_IR`` write the plan of each query Polars runs to the file they name (``/dev/stderr``
  too): how many queries a release runs on the private rows, and which, depends on them (a median reads
  its rows once more from 4,096 rows). Code in the process reads its own standard error
  (it redirects file descriptor 2). :func:`check_quiet` refuses a release while one of them is on —
  before the charge (nothing charged), and again before each private read (charged then failed alike on
  every dataset: the setting is the analyst's, not the data's). Polars keeps some of these settings in its
  own state, read from the environment when ``pl.Config`` reloads it; the check reloads them from the
  environment it read, so the state Polars runs with is the one checked. That environment is the process's
  own, which Polars' native code reads, not ``os.environ`` (Python's copy of it: ``os.putenv`` changes the
  process's environment alone, and turned ``POLARS_VERBOSE`` on past a check of ``os.environ``).
* **numpy's floating-point errors.** ``np.seterr(all="raise")`` turns an overflow or an underflow in
  numpy into a ``FloatingPointError``: raised by a computation on private values, that would answer
  whether the data made it overflow. The engine's work on private values runs with numpy's errors ignored
  (:func:`numpy_quiet`: numpy's warning of an overflow there, printed or raised under
  ``warnings.simplefilter("error")``, said whether the data made it overflow too); the public methods of the
  engine's objects (:func:`under_numpy_defaults`), whose costs and calibrations compute in numpy and scipy on
  public values, run under numpy's default error handling (:func:`numpy_defaults`: warn on overflow, division
  by zero and invalid values; ignore underflow).

* **Python's recursion limit.** ``sys.setrecursionlimit(n)`` fails, with a ``RecursionError``, whatever runs
  deeper than ``n`` frames; the analyst picks both ``n`` and the depth they call from, so they can leave the
  engine exactly as many frames as it uses on one dataset: how deep the engine's stack goes while it reads
  depends on the data (a count over one unit's row skips the thread pool that ranks units' rows), and a limit
  between the two depths failed the release, charged, on the larger dataset only. :func:`check_headroom`
  refuses a limit that leaves fewer than :data:`HEADROOM` frames above the caller's stack — at the entry of
  each public method of the engine's objects (:func:`under_numpy_defaults`), before the charge, and before
  each private read.

* **Polars' panics on errors.** ``POLARS_PANIC_ON_ERR=1`` makes Polars panic where it would raise an error,
  printing the error's message and a backtrace to standard error: it fails the errors Polars raises and
  recovers from inside a query (every release on the Polars backend panicked, charged, at an internal
  downcast), and prints what an error says. Polars reads it once, at its first error, and keeps it for the
  process: set after dpframe was imported but before any error, it turned every later release into a
  charged failure. Importing this module makes Polars read it (:data:`PANICS`), in the data owner's process;
  a release is refused while it is on.

* **Polars' query monitoring.** ``POLARS_QUERY_MONITORING=1`` sends the metrics of every query Polars runs to
  a Polars Cloud workspace (row counts of the private rows among them) when ``polars_cloud`` is installed, and
  fails every query when it is not; a release is refused while it is on (:data:`MONITORING`).

* **Polars' default engine.** ``pl.Config.set_engine_affinity(engine)`` takes an ``Engine`` object, and every
  ``collect()`` that names no engine hands its ``LazyFrame`` to that object's ``collect``: a subclass of
  ``InMemoryEngine`` received the private rows of a release (every unit id and value, then the exact sum). The
  GPU engine (``"gpu"``) runs queries on another engine (cuDF) that falls back to Polars' own where it cannot.
  The engine's checks collect through it too: the build-time probe (cached for the process) asked an engine
  object that swallowed errors whether an operation fails, and kept its answer. :func:`check_engine` refuses
  both — at the entry of each public method of the engine's objects (:func:`under_numpy_defaults`), in
  :func:`check_quiet` and in the probe; Polars' own named engines (``"auto"``, ``"in-memory"``,
  ``"streaming"``) are not refused. A check runs before a read, and another thread can set the default engine
  right after it (1 release in 300 in a race handed its private rows to the engine object): every ``collect`` of
  dpframe's names its engine (:data:`ENGINE`, :data:`STREAMING`), which no default engine replaces.

Not covered (same-process code, see docs/guarantees.md, "Known limitations"): another thread turning a
diagnostic setting on, or lowering the recursion limit, while a query runs (after the checks: what Polars prints
then is printed, and a ``RecursionError`` then depends on how deep the engine goes), and ``POLARS_TIMEOUT_MS``,
which fails a query that runs longer than it (its run time, which that code can measure anyway).

Example:
    >>> import polars as pl
    >>> check_quiet()                       # nothing on: no error
    >>> with pl.Config(verbose=True):
    ...     try:
    ...         check_quiet()
    ...     except ArgumentError as e:
    ...         print(e.argument)
    POLARS_VERBOSE

"""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable, Mapping
from types import FrameType, MappingProxyType
from typing import Any, TypeVar

import numpy as np
import polars as pl
import polars._plr as _plr
from polars.lazyframe.engine import Engine, InMemoryEngine, StreamingEngine, _AutoEngine
from polars.lazyframe.engine_config import get_engine_affinity_override

from dpframe.errors import ArgumentError
from dpframe.signatures import refuse

T = TypeVar("T")

PLAN_FILES = ("POLARS_VISUALIZE_PHYSICAL_PLAN", "POLARS_VISUALIZE_IR")
"""Polars' settings that write each query's plan to the file they name (refused while set to anything)."""

DIAGNOSTICS = ("POLARS_VERBOSE", "POLARS_VERBOSE_SENSITIVE", "POLARS_LOG_METRICS", "POLARS_PARQUET_METRICS",
               "POLARS_OOC_LOG_METRICS", *PLAN_FILES)
"""Polars' settings that print statistics of the rows a query reads (refused while set, other than to ``0``, or
while set at all for :data:`PLAN_FILES`)."""

MONITORING = "POLARS_QUERY_MONITORING"
"""Polars' setting that sends every query's metrics to Polars Cloud (read from ``os.environ``; on at ``"1"``)."""

KEPT = ("POLARS_VERBOSE", "POLARS_VERBOSE_SENSITIVE", "POLARS_OOC_LOG_METRICS")
"""The settings of :data:`DIAGNOSTICS` Polars keeps a copy of (it reads the others from the environment each time;
asked to reload one of those, it warns of an unknown option under ``POLARS_WARN_UNKNOWN_CONFIG=1``)."""


def _panics() -> bool:
    """Whether Polars panics on its errors: raise one (its first, if no error came before, fixing the setting)."""
    try:
        pl.Series(["x"]).cast(pl.Int64)
    except pl.exceptions.PolarsError:
        return False
    except pl.exceptions.PanicException:
        return True
    return False   # pragma: no cover - the cast always fails


PANICS = _panics()
"""Whether Polars panics on its errors (``POLARS_PANIC_ON_ERR``), fixed for the process when dpframe is imported."""

_LOCAL: Mapping[str, type[InMemoryEngine | StreamingEngine]] = MappingProxyType(
    {"in-memory": InMemoryEngine, "streaming": StreamingEngine})
"""Polars' engines by the names :class:`_Named` follows (any other name runs ``"auto"``)."""


class _Named(Engine):
    """An engine of Polars' own, named by dpframe's collects: never an object the process could hand it.

    ``fixed`` names the engine (``"streaming"``), or ``None``: the engine named as Polars' default
    (``pl.Config.set_engine_affinity("in-memory")``, ``POLARS_ENGINE_AFFINITY``), read at each collect as a
    ``collect()`` that names none reads it, with ``"auto"`` for the GPU engine (refused by :func:`check_engine`;
    one set by another thread after that check runs nothing). The engine object a collect runs on is built
    for it, with query monitoring off; this one refuses every assignment (``ENGINE.collect = spy`` received every
    private row of a release, ``ENGINE.monitoring = True`` turned monitoring back on).

    Example:
        >>> STREAMING.name, type(STREAMING.engine()).__name__
        ('streaming', 'StreamingEngine')
        >>> STREAMING.collect = print
        Traceback (most recent call last):
        ...
        AttributeError: dpframe's engine cannot be changed: every private read runs on it

    """

    _fixed: str | None

    def __init__(self, fixed: str | None) -> None:
        object.__setattr__(self, "_fixed", fixed)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("dpframe's engine cannot be changed: every private read runs on it")

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)

    def engine(self) -> Engine:
        """A new engine object of the engine this one names, with query monitoring off."""
        name = self._fixed or _plr.get_engine_affinity()
        return _LOCAL.get(name, _AutoEngine)(monitoring=False)

    @property
    def name(self) -> str:
        """The name of the engine a collect runs on now."""
        return self.engine().name

    def collect(self, lf: pl.LazyFrame, **kwargs: Any) -> Any:  # type: ignore[override]
        """``lf``'s rows, collected by :meth:`engine` (``LazyFrame.collect(engine=ENGINE)`` calls it)."""
        return self.engine().collect(lf, **kwargs)

    def collect_all(self, lfs: Any, *, optimizations: Any) -> list[pl.DataFrame]:
        """The rows of each of ``lfs``, collected by :meth:`engine` (``pl.collect_all(..., engine=...)`` calls it)."""
        return self.engine().collect_all(lfs, optimizations=optimizations)

    def execute(self, lf: pl.LazyFrame, *, optimizations: Any) -> Any:
        """``lf``'s result, by :meth:`engine`."""
        return self.engine().execute(lf, optimizations=optimizations)


ENGINE: Engine = _Named(None)
"""The engine every ``collect`` of dpframe's names: the engine named as Polars' default (``"auto"``, Polars' own
choice between its engines, unless ``pl.Config.set_engine_affinity`` named another), as a ``collect()`` that names
none runs, but never a default engine *object* (which the string ``"auto"`` would hand the rows to at each
``collect``) nor the GPU engine, with query monitoring off whatever ``POLARS_QUERY_MONITORING`` says then; it cannot
be changed (:class:`_Named`).

Example:
    >>> try:
    ...     _ = pl.Config.set_engine_affinity(pl.GPUEngine())     # what another thread may do after a check
    ...     print(pl.LazyFrame({"x": [1, 2]}).select(pl.col("x").sum()).collect(engine=ENGINE).item())
    ... finally:
    ...     _ = pl.Config.set_engine_affinity(None)
    3

"""

STREAMING: Engine = _Named("streaming")
"""Polars' streaming engine with query monitoring off: for dpframe's collects that stream (see :data:`ENGINE`)."""

HEADROOM = 500
"""Python frames a call into the engine may use above its caller's stack (its deepest release uses about 150)."""

_GETENV = None if os.name != "posix" else ctypes.CDLL(None).getenv
"""libc's ``getenv`` (POSIX; elsewhere ``os.environ`` is read)."""
if _GETENV is not None:
    _GETENV.restype, _GETENV.argtypes = ctypes.c_char_p, [ctypes.c_char_p]

_ENTERED = threading.local()
"""Per thread: how many public methods of the engine's objects are running (``calls``; the outermost one checks)
and the stack depth of the outermost one's caller (``depth``)."""


def check_headroom(depth: int | None = None) -> None:
    """An :class:`ArgumentError` naming ``sys.setrecursionlimit`` if it leaves fewer than :data:`HEADROOM` frames.

    The frames are counted above the stack of the outermost public method running on this thread (inside the
    engine, where the same check runs again before each private read, at a depth a data-dependent path such
    as a second read of the same rows may deepen: the answer must not depend on it), else above the caller's
    (``depth``: that stack's depth, when the caller has just counted it).

    Example:
        >>> check_headroom()                    # Python's default limit (1000) from a shallow stack: no error
        >>> limit = sys.getrecursionlimit()
        >>> sys.setrecursionlimit(200)
        >>> try:
        ...     check_headroom()
        ... except ArgumentError as e:
        ...     print(e.argument)
        ... finally:
        ...     sys.setrecursionlimit(limit)
        sys.setrecursionlimit

    """
    if depth is None:
        depth = _ENTERED.depth if getattr(_ENTERED, "calls", 0) else _depth()
    limit = sys.getrecursionlimit()
    if limit - depth < HEADROOM:
        raise ArgumentError(f"Python's recursion limit ({limit}) leaves {limit - depth} frames above this call's "
                            f"{depth}: the engine may need {HEADROOM}, and how many it uses while it reads private "
                            "rows depends on them; nothing was charged", argument="sys.setrecursionlimit",
                            fix=f"sys.setrecursionlimit({depth + HEADROOM}) or more (or call from a shallower stack)")


def _depth() -> int:
    """The calling thread's stack depth, in frames."""
    frame: FrameType | None = sys._getframe()
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def check_quiet() -> None:
    """An :class:`ArgumentError` naming the first Polars setting on that reveals private rows, or the recursion limit.

    See the module docstring (diagnostic output, plan files, panics on errors, query monitoring); the recursion
    limit is refused if it leaves too few frames (:func:`check_headroom`).

    Otherwise Polars' own copy of each setting it keeps one of (:data:`KEPT`) is reloaded from the environment
    just read.
    """
    check_headroom()
    if PANICS:
        raise ArgumentError("Polars panics on its errors in this process (POLARS_PANIC_ON_ERR): it fails the errors "
                            "it raises and recovers from while it reads private rows, and prints what they say; "
                            "nothing was charged", argument="POLARS_PANIC_ON_ERR",
                            fix="start the process without POLARS_PANIC_ON_ERR (Polars reads it once)")
    for name in DIAGNOSTICS:
        value = environment(name)
        if value != "" and (value != "0" or name in PLAN_FILES):
            fix = ("pl.Config.set_verbose(False)" if name == "POLARS_VERBOSE"
                   else f"unset it (os.environ.pop({name!r}, None); os.unsetenv({name!r}))")
            raise ArgumentError(f"Polars' diagnostic output is on ({name}={value!r}): it prints or writes row counts "
                                "and other statistics of the private rows (how many queries run on them, and "
                                "which); nothing was charged",
                                argument=name, fix=fix)
    if os.environ.get(MONITORING) == "1":
        raise ArgumentError(f"Polars' query monitoring is on ({MONITORING}=1): it sends the metrics of every query "
                            "Polars runs, row counts of the private rows among them, to Polars Cloud (and fails "
                            "every query where polars_cloud is not installed); nothing was charged",
                            argument=MONITORING, fix=f"unset it (os.environ.pop({MONITORING!r}, None))")
    check_engine()
    for name in KEPT:
        _plr.config_reload_env_var(name)


def check_engine() -> None:
    """An :class:`ArgumentError` naming ``pl.Config.set_engine_affinity`` while Polars' default engine is not its own.

    See the module docstring: an ``Engine`` object set as the default receives every query that names no engine,
    private rows included, and the GPU engine is another engine.

    Example:
        >>> check_engine()                      # Polars' default ("auto"): no error
        >>> try:
        ...     _ = pl.Config.set_engine_affinity("gpu")
        ...     check_engine()
        ... except ArgumentError as e:
        ...     print(e.argument)
        ... finally:
        ...     _ = pl.Config.set_engine_affinity(None)
        pl.Config.set_engine_affinity

    """
    engine = get_engine_affinity_override()
    name = _plr.get_engine_affinity() if engine is None else type(engine).__name__
    if engine is not None or name == "gpu":
        raise ArgumentError(f"Polars' default engine is {name!r} (pl.Config.set_engine_affinity): every query that "
                            "names no engine runs there, private rows included; nothing was charged",
                            argument="pl.Config.set_engine_affinity",
                            fix="pl.Config.set_engine_affinity(None) (or 'in-memory' / 'streaming')")


def environment(name: str) -> str:
    """The process's environment variable ``name`` as native code reads it (``getenv``; ``""`` if unset).

    ``os.environ`` is Python's copy, taken at start and kept in step by its own writes only: ``os.putenv`` and
    ``os.unsetenv`` change the process's environment without it.

    Example:
        >>> os.putenv("DPFRAME_EXAMPLE", "1")
        >>> "DPFRAME_EXAMPLE" in os.environ, environment("DPFRAME_EXAMPLE")
        (False, '1')
        >>> os.unsetenv("DPFRAME_EXAMPLE")

    """
    if _GETENV is None:
        return os.environ.get(name, "")
    value = _GETENV(os.fsencode(name))
    return "" if value is None else os.fsdecode(value)


def under_numpy_defaults(cls: type) -> None:
    """Make each public method defined on ``cls`` (and ``__init__``) run under :func:`numpy_defaults`.

    The outermost such call on a thread first checks the recursion limit (:func:`check_headroom`): a limit
    just above the caller's stack made planning raise a raw ``RecursionError``; and Polars' default engine
    (:func:`check_engine`).

    A call whose arguments the method's signature refuses (a misspelt keyword) raises a
    :class:`~dpframe.errors.SignatureError` with the fix (:func:`dpframe.signatures.refuse`, once the call failed:
    nothing is added to a call that succeeds).

    The engine's objects the analyst calls (the session, frames, queries, streams, the accountant: every
    :class:`~dpframe.sealed.FixedClass`) compute costs, calibrations and releases in numpy and scipy; under
    ``np.seterr(all="raise")`` a harmless underflow there (an accountant's ``logsumexp``) became a raw
    ``FloatingPointError``.

    Example:
        >>> class Curve:
        ...     def tail(self) -> float:
        ...         return float(np.exp(np.float64(-800.0)))
        >>> under_numpy_defaults(Curve)
        >>> with np.errstate(all="raise"):
        ...     Curve().tail()
        0.0

    """
    for name, method in list(vars(cls).items()):
        if (name == "__init__" or not name.startswith("_")) and inspect.isfunction(method):
            setattr(cls, name, _under_defaults(method))


def _under_defaults(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> T:
        entered = getattr(_ENTERED, "calls", 0)
        if not entered:     # the outermost call: its caller's depth, counted once
            depth = _depth()
            check_headroom(depth)
            check_engine()
            _ENTERED.depth = depth
        _ENTERED.calls = entered + 1
        try:
            with numpy_defaults():
                return method(*args, **kwargs)
        except TypeError as e:      # arguments its signature does not take: a dpframe error with the fix
            refuse(method, args, kwargs, e)
            raise
        finally:
            _ENTERED.calls = entered
    return call


def numpy_quiet() -> np.errstate:
    """Run the block with numpy's floating-point errors ignored (this thread's): the engine's work on private values.

    Under :func:`numpy_defaults` numpy warns of an overflow: a mechanism's harmless float work on an exact count
    (``exp(count)``, infinite past 709) printed ``RuntimeWarning: overflow encountered in exp`` on the larger
    dataset only, and failed the release there under ``warnings.simplefilter("error")``. A value's overflow,
    division by zero or invalid result stays what it is (``inf``, ``nan``); only the warning goes.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error")
        ...     with numpy_quiet():
        ...         float(np.exp(np.float64(800.0)))
        inf

    """
    return np.errstate(all="ignore")


def numpy_defaults() -> np.errstate:
    """Run the block under numpy's default floating-point error handling (this thread's: numpy keeps it per context).

    The ``np.errstate`` itself (a fresh one per block), not a generator around it: every public method of the
    engine's objects enters one (about 30 per query; the generator's frames cost as much as the errstate).

    Example:
        >>> with np.errstate(all="raise"), numpy_defaults():
        ...     float(np.float64(1e-300) * np.float64(1e-300))      # an underflow: 0.0, not a FloatingPointError
        0.0

    """
    return np.errstate(divide="warn", over="warn", under="ignore", invalid="warn")


__all__ = ["DIAGNOSTICS", "ENGINE", "HEADROOM", "KEPT", "MONITORING", "PANICS", "PLAN_FILES", "STREAMING",
           "check_engine", "check_headroom", "check_quiet", "environment", "numpy_defaults", "numpy_quiet",
           "under_numpy_defaults"]

