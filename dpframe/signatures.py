"""Calls a function's signature does not take: a :class:`~dpframe.errors.SignatureError` naming the argument, and a fix.

Python refuses a misspelt keyword (``dp.sum("x", bound=(0, 10))``), a missing argument or one positional argument too
many before the function's body runs, with a ``TypeError`` that names the keyword but says nothing of what was
meant. dpframe's public calls raise a :class:`~dpframe.errors.SignatureError` instead (also a ``TypeError``): the
keyword as its ``argument``, the closest parameter as its fix ("did you mean bounds=...?"), or the keywords the call
takes when none is close.

Only once the call has failed (:func:`refuse`, in the wrappers of the engine's public methods and :func:`checked`):
a call that succeeds does no extra work. And only when the signature refuses the arguments *and* Python's error is
that refusal (its text starts with the function's name): a ``TypeError`` raised inside a body (a wrapper's own, or
one from a call the body makes) goes on as it is. The text names parameters only, never a value, so that a remote
session (:func:`dpframe.remote.values.call_as_given`) answers with the same text as the session in process.

Example:
    >>> @checked
    ... def total(column, bounds=None): ...
    >>> try:
    ...     total("x", bound=(0, 10))
    ... except TypeError as e:
    ...     print(e)
    bound: not an argument of total(). Fix: did you mean bounds=...?

"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from dpframe.errors import DPFrameError, SignatureError, closest

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

_P = inspect.Parameter
_BY_POSITION = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_BUDGET_FIELDS = frozenset({"epsilon", "eps", "delta", "rho"})
"""A budget's fields, passed where a call takes ``budget=``: the fix builds the budget."""


def refuse(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], error: TypeError,
           name: str | None = None) -> None:
    """Raise the :class:`SignatureError` for ``function(*args, **kwargs)``, if ``error`` is its signature's refusal.

    Call it in an ``except TypeError`` around that very call, then re-raise (``raise``): it returns when ``error``
    came from somewhere else (a body, a wrapper), and for a dpframe error (one already raised further in).
    ``function`` (dpframe's own) is not called here: it receives public values only (none). A class stands for its
    ``__init__``; ``name``: how the error names the call (default: the function's own name).
    """
    if isinstance(error, DPFrameError):
        return
    inner = inspect.unwrap(function.func if isinstance(function, functools.partial) else function)
    if isinstance(inner, type):
        inner = next(vars(c)["__init__"] for c in inner.__mro__ if "__init__" in vars(c))    # Python names that one
    if not str(error).startswith(f"{getattr(inner, '__qualname__', None)}() "):
        return      # not Python's refusal of this function's arguments: the body's, or a wrapper's own
    refused = refusal(function, args, kwargs, name)
    if refused is not None:
        raise refused from None


def refusal(function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
            name: str | None = None) -> SignatureError | None:
    """The :class:`SignatureError` for ``function(*args, **kwargs)``, or None when its signature takes them.

    It binds the arguments: ``function`` (dpframe's own) is not called, and receives public values only (none).
    Named, in the order Python checks them: an unknown keyword (the first), a positional-only one passed by keyword,
    one given twice, too many positional arguments, a missing one.

    Example:
        >>> def f(x, *, y=0): ...
        >>> refusal(f, [1], {"y": 2}) is None
        True
        >>> print(refusal(f, [], {"y": 2}))
        x: required by f() but not given. Fix: pass x=...

    """
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):     # no signature to read
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return _refused(signature, name or _name(function), args, kwargs)
    return None


def checked(function: F) -> F:
    """``function``, whose calls its signature refuses raise a :class:`SignatureError` (module docstring)."""
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except TypeError as e:
            refuse(function, args, kwargs, e)
            raise
    return call  # type: ignore[return-value]


def checked_class(cls: C) -> C:
    """``cls`` with :func:`checked` ``__init__``, public methods and class methods: a decorator.

    For the public classes outside the engine's objects: value classes (budgets, the privacy unit ...) and the
    remote client's. The engine's objects (every :class:`~dpframe.sealed.FixedClass`) are checked alike by the
    wrapper of their public methods (:func:`~dpframe.engine_output.under_numpy_defaults`), with no wrapper of its own.
    """
    return _checked_members(cls, methods=True)


def checked_constructors(cls: C) -> C:
    """``cls`` with :func:`checked` ``__init__`` and class methods: a decorator (``dp.Measure``).

    Its other methods are the engine's to read it with (``measure.option(...)``, several times for each measure of
    each query): left as they are, so that a query's fixed cost stays what it was.
    """
    return _checked_members(cls, methods=False)


def _checked_members(cls: C, *, methods: bool) -> C:
    for name, member in list(vars(cls).items()):
        if name != "__init__" and name.startswith("_"):
            continue
        if inspect.isfunction(member) and (methods or name == "__init__"):
            setattr(cls, name, checked(member))
        elif isinstance(member, classmethod | staticmethod):
            setattr(cls, name, type(member)(checked(member.__func__)))
    return cls


def _name(function: Callable[..., Any]) -> str:
    """How the error names ``function``: its own name, its class's for ``__init__`` (``PrivacyUnit``)."""
    inner = inspect.unwrap(function.func if isinstance(function, functools.partial) else function)
    parts = str(getattr(inner, "__qualname__", getattr(inner, "__name__", "call"))).split(".")
    return parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]


def _refused(signature: inspect.Signature, name: str, args: Sequence[Any],
             kwargs: Mapping[str, Any]) -> SignatureError | None:
    params = list(signature.parameters.values())
    own = params[0].name if params and params[0].name in ("self", "cls") and params[0].kind in _BY_POSITION else None
    positional = [p for p in params if p.kind in _BY_POSITION]
    many = any(p.kind is _P.VAR_POSITIONAL for p in params)
    free = any(p.kind is _P.VAR_KEYWORD for p in params)
    by_position = {p.name for p in positional[:len(args)]}
    keywords = [p.name for p in params if p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY) and p.name != own]
    for key in kwargs:
        p = signature.parameters.get(key)
        if p is None or p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD):
            if not free:
                return SignatureError(f"not an argument of {name}()", argument=key,
                                      fix=_meant(key, name, keywords, by_position))
        elif p.kind is _P.POSITIONAL_ONLY:
            if not free:
                return SignatureError(f"{name}() takes {key} by position only", argument=key,
                                      fix=f"pass {key} by position, without '{key}='")
        elif key in by_position:
            return SignatureError(f"given twice to {name}(), by position and as {key}=", argument=key,
                                  fix=f"pass {key} once")
    if len(args) > len(positional) and not many:
        names = [p.name for p in positional if p.name != own]
        most, given = len(names), len(args) - (own is not None)
        taken = "no positional arguments" if not most else \
            f"at most {most} positional argument{'s' if most > 1 else ''} ({', '.join(names)})"
        later = [p.name for p in params if p.kind is _P.KEYWORD_ONLY]
        return SignatureError(f"takes {taken} but {given} {'was' if given == 1 else 'were'} given", argument=name,
                              fix="pass the others by keyword: " + ", ".join(f"{k}=..." for k in later) if later
                              else f"pass at most {most}" if most else "pass none")
    for p in params:
        only = p.kind is _P.POSITIONAL_ONLY         # a keyword of its name goes to **kwargs
        if p.default is _P.empty and (only or p.name not in kwargs) and p.name not in by_position \
                and p.name != own and p.kind in (*_BY_POSITION, _P.KEYWORD_ONLY):
            fix = f"pass {p.name} by position" + (f", without '{p.name}='" if p.name in kwargs else "") if only \
                else f"pass {p.name}=..."
            return SignatureError(f"required by {name}() but not given", argument=p.name, fix=fix)
    return None


def _meant(key: str, name: str, keywords: list[str], given: set[str]) -> str:
    """The fix for an unknown keyword: the closest keyword not ``given`` by position, else the keywords it takes."""
    close = closest(key, [k for k in keywords if k not in given])
    if close:
        return f"did you mean {close}=...?"
    if key in _BUDGET_FIELDS and "budget" in keywords:
        return f"pass the budget as budget=dp.PureDP(epsilon), dp.ApproxDP(epsilon, delta) or dp.ZCDP(rho), not {key}="
    if not keywords:
        return f"{name}() takes no keyword arguments: leave {key}= out"
    return "use one of its keywords: " + ", ".join(keywords)


__all__ = ["checked", "checked_class", "checked_constructors", "refusal", "refuse"]
