"""What the engines may print or raise while they read private rows: no diagnostics, numpy's default errors.

Two process-wide settings that any code in the process can change through its libraries' public APIs turn
the engines' work on private rows into something the analyst reads outside any ε:

* **Polars' diagnostic output.** With ``pl.Config.set_verbose(True)`` (``POLARS_VERBOSE=1``) Polars prints to
  the process's standard error what it learns while it runs a query: ``rows_before: 49, rows_after: 49``
  for a filter of a Parquet scan (how many private rows passed it), ``3 estimated groups`` for a group-by,
  the bytes a sort buffered. ``POLARS_VERBOSE_SENSITIVE`` adds schemas and predicates,
  ``POLARS_LOG_METRICS`` prints each operator's row counts, ``POLARS_PARQUET_METRICS`` each column's page
  counts, ``POLARS_OOC_LOG_METRICS`` spill statistics. Code in the process reads its own standard error
  (it redirects file descriptor 2). :func:`check_quiet` refuses a release while one of them is on —
  before the charge (nothing charged), and again before each private read (charged then failed alike on
  every dataset: the setting is the analyst's, not the data's). Polars keeps some of these settings in its
  own state, read from the environment when ``pl.Config`` reloads it; the check reloads them from the
  environment it read, so the state Polars runs with is the one checked.
* **numpy's floating-point errors.** ``np.seterr(all="raise")`` turns an overflow or an underflow in
  numpy into a ``FloatingPointError``: raised by a computation on private values, that would answer
  whether the data made it overflow. :func:`numpy_defaults` runs the engine's work under numpy's default
  error handling (warn on overflow, division by zero and invalid values; ignore underflow), the handling
  the engine is tested under (its warnings are checked to be the same on neighbouring datasets); so do the
  public methods of the engine's objects (:func:`under_numpy_defaults`), whose costs and calibrations
  compute in numpy and scipy.

Not covered (same-process code, see docs/guarantees.md, "Known limitations"): another thread turning a
setting on while a query runs, and ``POLARS_TIMEOUT_MS``, which fails a query that runs longer than it
(its run time, which that code can measure anyway).

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

import contextlib
import functools
import inspect
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import polars._plr as _plr

from dpframe.errors import ArgumentError

T = TypeVar("T")

DIAGNOSTICS = ("POLARS_VERBOSE", "POLARS_VERBOSE_SENSITIVE", "POLARS_LOG_METRICS", "POLARS_PARQUET_METRICS",
               "POLARS_OOC_LOG_METRICS")
"""Polars' settings that print statistics of the rows a query reads (refused while set, other than to ``0``)."""


def check_quiet() -> None:
    """An :class:`ArgumentError` naming the first Polars diagnostic setting that is on (see the module docstring).

    Otherwise Polars' own copy of each setting is reloaded from the environment just read.
    """
    for name in DIAGNOSTICS:
        value = os.environ.get(name, "")
        if value not in ("", "0"):
            fix = ("pl.Config.set_verbose(False)" if name == "POLARS_VERBOSE"
                   else f"unset it (del os.environ[{name!r}])")
            raise ArgumentError(f"Polars' diagnostic output is on ({name}={value!r}): it prints row counts and "
                                "other statistics of the private rows to standard error; nothing was charged",
                                argument=name, fix=fix)
    for name in DIAGNOSTICS:
        _plr.config_reload_env_var(name)


def under_numpy_defaults(cls: type) -> None:
    """Make each public method defined on ``cls`` (and ``__init__``) run under :func:`numpy_defaults`.

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
        with numpy_defaults():
            return method(*args, **kwargs)
    return call


@contextlib.contextmanager
def numpy_defaults() -> Iterator[None]:
    """Run the block under numpy's default floating-point error handling (this thread's: numpy keeps it per context).

    Example:
        >>> with np.errstate(all="raise"), numpy_defaults():
        ...     float(np.float64(1e-300) * np.float64(1e-300))      # an underflow: 0.0, not a FloatingPointError
        0.0

    """
    with np.errstate(divide="warn", over="warn", under="ignore", invalid="warn"):
        yield


__all__ = ["DIAGNOSTICS", "check_quiet", "numpy_defaults", "under_numpy_defaults"]
