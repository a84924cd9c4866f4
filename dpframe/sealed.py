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

The numbers an analyst passes (budgets, bounds, thresholds, probabilities, caps) are read through
:func:`plain` where they enter the API: an ``int``, ``float`` or ``Fraction`` subclass becomes the plain
value, read without running any of its methods. Stored as given, its ``__le__`` or ``__mul__`` would
later receive the engine's values (a noisy count compared with a threshold), and ``Fraction(x)`` keeps
``x.numerator`` as given — a plain-looking Fraction with an analyst's int inside.

"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import functools
import io
import math
import zoneinfo
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, NoReturn, TypeGuard, TypeVar

import numpy as np
import polars as pl

from dpframe.engine_output import under_numpy_defaults
from dpframe.errors import ArgumentError


class FixedClass:
    """An object whose class cannot be reassigned (``obj.__class__ = C``).

    Another class's methods and properties would run on the object's state: a sparse vector's subclass whose
    ``_halted`` says "not yet" past its cap, or read-only public keys turned back into a ``pl.DataFrame`` whose
    ``extend`` adds 49 copies of a key (50 noisy counts of one group for one charge).

    Example:
        >>> class Cap(FixedClass): ...
        >>> class Wider(Cap): ...
        >>> Cap().__class__ = Wider
        Traceback (most recent call last):
        ...
        AttributeError: Cap.__class__ is read-only: another class would run its own code on this object's state; ...

    """

    __slots__ = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        under_numpy_defaults(cls)   # the engine's numerics, whatever np.seterr the caller set

    def __setattr__(self, name: str, value: object) -> None:
        if name == "__class__":
            raise AttributeError(f"{type(self).__name__}.__class__ is read-only: another class would run its own "
                                 "code on this object's state; build a new one")
        object.__setattr__(self, name, value)


class ReadOnlyNames(FixedClass):
    """An immutable object whose public names cannot be assigned or deleted (its state is ``_``-prefixed).

    A frame or a group-by is a checked plan, handed around and read again by the engine; none of its public names
    (its methods included: ``frame.agg = ...``) can be replaced on it. Unlike a :class:`Sealed` object it holds no
    counters, so a copy (the same plan on the same session) is harmless.

    Example:
        >>> class Plan(ReadOnlyNames):
        ...     def run(self) -> int:
        ...         return 1
        >>> Plan().run = lambda: 2
        Traceback (most recent call last):
        ...
        AttributeError: Plan.run is read-only: build another one through the engine's methods

    """

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        if not name.startswith("_"):
            raise AttributeError(f"{type(self).__name__}.{name} is read-only: build another one through the "
                                 "engine's methods")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)
        object.__delattr__(self, name)


class Sealed(FixedClass):
    """Public attributes are set by ``__init__`` only (a subclass's ``__init__`` seals when it returns).

    Its class is fixed (:class:`FixedClass`), and it is built once (a second ``__init__`` is refused).

    Nor can a sealed object be copied or pickled: ``copy.copy(channel)`` made a second channel on the
    same reservation with hit counters of its own (twice the hits for one charge).
    """

    _sealed = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__init__

        @functools.wraps(init)
        def sealed_init(self: Sealed, *args: Any, **kw: Any) -> None:
            if self._sealed:   # ``rm.__init__(other_frame, ...)`` set its private state, then failed on a public name
                raise TypeError(f"a {type(self).__name__} is built once: build a new one")
            init(self, *args, **kw)
            if type(self) is cls:
                object.__setattr__(self, "_sealed", True)
        setattr(cls, "__init__", sealed_init)   # noqa: B010 (mypy refuses assigning to a method)

    def __setattr__(self, name: str, value: object) -> None:
        if self._sealed and not name.startswith("_"):
            raise AttributeError(f"{type(self).__name__}.{name} is read-only: it was validated and charged when the "
                                 "object was built; build a new one")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)
        object.__delattr__(self, name)

    def __copy__(self) -> NoReturn:
        raise TypeError(f"a {type(self).__name__} cannot be copied (copy, deepcopy, pickle): it is one of a kind, and "
                        "a copy's own counters (hits, positives, the threshold's noise, closed) would start again "
                        "from the original's under the same charge; build a new one")

    def __deepcopy__(self, memo: object) -> NoReturn:
        self.__copy__()

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        self.__copy__()


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


class ReadOnlySchema(FixedClass, pl.Schema):
    """A table's or a plan node's schema: it cannot be changed in place (``frame.schema`` hands it out).

    Every check of a later step (totality, the backends' casts) reads it; an analyst who could set
    ``frame.schema["s"] = pl.Int64`` on a string column made the backend cast the column, and the query
    failed exactly when some row was not a number. Copy it (``pl.Schema(frame.schema)``) to edit one; its class
    is fixed (:class:`FixedClass`: ``frame.schema.__class__ = pl.Schema`` made it editable).

    Example:
        >>> s = ReadOnlySchema({"x": pl.Int64})
        >>> s["x"] = pl.String
        Traceback (most recent call last):
        ...
        TypeError: a frame's schema is read-only: it describes the private table; edit a copy, pl.Schema(schema)

    """

    def __init__(self, schema: Any = None) -> None:
        for name, dtype in pl.Schema(schema).items():
            collections.OrderedDict.__setitem__(self, name, dtype)

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a frame's schema is read-only: it describes the private table; edit a copy, "
                        "pl.Schema(schema)")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = move_to_end = __ior__ = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return ReadOnlySchema, (list(self.items()),)

    def __repr__(self) -> str:
        return repr(pl.Schema(self))


class ReadOnlyKeys(FixedClass, pl.DataFrame):
    """Public group keys (or a public table) the query was checked with: a DataFrame nothing can change in place.

    ``q.node.keys`` hands them out; the engine checks them once (no duplicates, the columns' types) and
    reads them again when the query runs. ``q.node.keys[1, "g"] = "0"`` made two groups "0", each
    released with its own noise for the price of one; a SQL join's public table (unique join keys) the
    same way made each private row match two public rows. What is derived from them (a join, a filter)
    is an ordinary DataFrame. Its class is fixed (:class:`FixedClass`: ``keys.__class__ = pl.DataFrame`` made
    ``keys.extend(...)`` work).

    Example:
        >>> keys = ReadOnlyKeys.of(pl.DataFrame({"g": ["a", "b"]}))
        >>> keys[1, "g"] = "a"
        Traceback (most recent call last):
        ...
        TypeError: public keys and tables are read-only: the query was checked with them; build a new query

    """

    @classmethod
    def of(cls, frame: pl.DataFrame) -> ReadOnlyKeys:
        """A read-only copy of ``frame`` (the caller's frame can change; the copy cannot)."""
        keys = cls.__new__(cls)
        keys._df = plain_frame(frame)._df      # its own memory: not a NumPy array's the caller may still write
        return keys

    @classmethod
    def owned(cls, frame: pl.DataFrame) -> ReadOnlyKeys:
        """``frame`` made read-only without a copy: only for a plain frame in the engine's own memory.

        For keys the engine has just built or copied (:func:`plain_frame`) itself and checked, where a second
        copy would only add to every query's fixed cost (about 0.2 ms for 1,000 keys).

        Example:
            >>> ReadOnlyKeys.owned(pl.DataFrame({"g": ["a"]})).to_series().to_list()
            ['a']

        """
        assert type(frame) is pl.DataFrame
        keys = cls.__new__(cls)
        keys._df = frame._df
        return keys

    @classmethod
    def _from_pydf(cls, py_df: Any) -> pl.DataFrame:
        return pl.DataFrame._from_pydf(py_df)       # what polars derives from the keys is a plain frame

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("public keys and tables are read-only: the query was checked with them; build a new query")

    __setitem__ = insert_column = replace_column = drop_in_place = extend = _refuse  # type: ignore[assignment]

    def vstack(self, other: pl.DataFrame, *, in_place: bool = False) -> pl.DataFrame:
        return self._refuse() if in_place else pl.DataFrame(self).vstack(other)

    def hstack(self, columns: Any, *, in_place: bool = False) -> pl.DataFrame:
        return self._refuse() if in_place else pl.DataFrame(self).hstack(columns)

    def shrink_to_fit(self, *, in_place: bool = False) -> pl.DataFrame:
        return self._refuse() if in_place else pl.DataFrame(self).shrink_to_fit()

    @property  # type: ignore[override]
    def columns(self) -> list[str]:
        return pl.DataFrame(self).columns

    @columns.setter
    def columns(self, names: Any) -> None:
        self._refuse()

    def __reduce__(self) -> tuple[Any, ...]:
        return ReadOnlyKeys.of, (pl.DataFrame(self),)


def plain_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """A plain DataFrame of ``frame``'s data, read once into memory of its own: nothing outside can change it.

    An analyst's DataFrame subclass could answer a check (its ``schema``, ``columns``, ``n_unique``) with
    something other than the data the engine then uses. And Polars shares memory with what a frame was built
    from — a NumPy array (``pl.DataFrame({"g": array})``, ``pl.from_pandas``), an Arrow table — so a write to
    that array reached the frame after it was checked: public keys ``[0, 1]`` became ``[0, 0]`` (group 0
    released twice for one charge), and a registered table changed under a session. So every column is
    copied (through Polars' own binary form: about 80 µs for 1,000 keys, where Arrow IPC took 1.6 ms); an
    ``Object`` column holds Python objects that no query reads, and is kept as it is.

    Example:
        >>> import numpy as np
        >>> class Liar(pl.DataFrame):
        ...     @property
        ...     def schema(self): return pl.Schema({"g": pl.String})
        >>> plain_frame(Liar({"g": [1]})).schema, type(plain_frame(Liar({"g": [1]}))).__name__
        (Schema([('g', Int64)]), 'DataFrame')
        >>> array = np.array([0, 1])
        >>> keys = plain_frame(pl.DataFrame({"g": array}))
        >>> array[1] = 0; keys["g"].to_list()
        [0, 1]

    """
    plain = pl.DataFrame._from_pydf(frame._df.clone())
    objects = [name for name, dtype in plain.schema.items() if dtype == pl.Object]
    if len(objects) == plain.width:
        return plain
    copied = pl.DataFrame.deserialize(io.BytesIO(plain.drop(objects).serialize()))
    return copied.hstack(plain.select(objects)).select(plain.columns) if objects else copied


def plain_expr(expr: pl.Expr) -> pl.Expr:
    """A plain ``pl.Expr`` of ``expr``'s expression, read once: a subclass's methods never run again.

    A ``pl.Expr`` subclass (``Masked.deserialize(...)`` builds one through Polars' public API) could show
    the checks one expression through ``meta`` while Polars runs another.

    Example:
        >>> class Masked(pl.Expr):
        ...     @property
        ...     def meta(self): return pl.col("shown").meta
        >>> import io
        >>> masked = Masked.deserialize(io.StringIO((pl.col("x") + 1).meta.serialize(format="json")), format="json")
        >>> masked.meta.root_names(), plain_expr(masked).meta.root_names(), type(plain_expr(masked)).__name__
        (['shown'], ['x'], 'Expr')

    """
    return pl.Expr._from_pyexpr(expr._pyexpr)


E = TypeVar("E")


def copy_exprs(value: E) -> E:
    """``value`` with every ``pl.Expr`` in it (itself, or an item of a tuple) a new plain expression.

    Example:
        >>> e = pl.col("x") + 1
        >>> copy_exprs(e) is e, str(copy_exprs((e, 2))[0]) == str(e)
        (False, True)

    """
    if isinstance(value, pl.Expr):
        return plain_expr(value)  # type: ignore[return-value]
    if isinstance(value, tuple) and any(isinstance(item, pl.Expr) for item in value):
        return tuple(plain_expr(item) if isinstance(item, pl.Expr) else item for item in value)  # type: ignore[return-value]
    return value


class ExprCopies:
    """A plan node that hands out copies of the expressions it holds (its ``expr_fields``), never its own.

    The class of a ``pl.Expr`` can be reassigned: ``q.node.input.predicate.__class__ = Sub``, ``Sub`` a subclass
    whose ``_pyexpr`` is another expression, made the engine run an expression that was never checked — a
    ``map_elements`` that handed every private value to the analyst's function. The engine reads its
    expressions through the same attributes, so no one holds a reference to the ones the node keeps.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Keep(ExprCopies):
        ...     predicate: pl.Expr
        ...     expr_fields = frozenset({"predicate"})
        >>> node = Keep(pl.col("x") > 1)
        >>> node.predicate is node.predicate
        False

    """

    __slots__ = ()
    expr_fields: frozenset[str] = frozenset()

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        return copy_exprs(value) if name in type(self).expr_fields else value


_ENGINE = object()
"""The token the engine passes to the constructors of the objects it alone builds (:func:`engine_only`)."""


def engine_only(token: object, what: str, fix: str) -> None:
    """An :class:`ArgumentError` unless ``token`` is the engine's own: ``what`` is built by dpframe only.

    A frame, a group-by and a query hold plan nodes, public keys and a family's query that the engine
    checked when it built them (``Filter.of`` checks a predicate; ``group_by`` checks keys for duplicates;
    a registered family validates its arguments) and trusts when it charges and runs them. Their
    constructors (and the nodes' dataclass constructors) are public names, so each one asks for this
    token: a node built directly, unchecked (an aggregate in a filter, a Python function on every row), or
    an object of the analyst's own posing as a family's query, never reaches a charge.

    Example:
        >>> engine_only(object(), "dp.Query", "build it with sess.table(...).agg(...)")
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: dp.Query: dp.Query is built by dpframe itself, from parts it checked...

    """
    if token is not _ENGINE:
        raise ArgumentError(f"{what} is built by dpframe itself, from parts it checked: a {what} made from its "
                            "constructor could hold an unchecked plan or query", argument=what, fix=fix)


N = TypeVar("N")
_EXACT = frozenset({bool, int, str, float, type(None)})
"""Types whose instances :func:`plain` returns as they are: immutable, and exactly the built-in type."""


def plain(value: N) -> N:
    """``value`` without any analyst code in it: a str/int/float/Fraction/Decimal subclass as the plain value.

    Reads the number's own storage (never a method the subclass may override); a Fraction is rebuilt from
    plain ints. Anything else (a NumPy scalar, a container, any other object) is returned as given for
    the caller's validation. (A ``str`` subclass's ``__eq__`` could say "not 'gumbel'" while the query is
    checked, then "gumbel" when it runs.)

    Example:
        >>> class Loud(int):
        ...     def __le__(self, other): raise RuntimeError("saw", other)
        >>> type(plain(Loud(3))), plain(Fraction(Loud(1), 2)) <= Fraction(1, 2)
        (<class 'int'>, True)

    """
    if type(value) in _EXACT:     # already plain: no subclass code to strip (the common case, kept cheap)
        return value
    if type(value) is not Fraction:   # (a Fraction, the next most common, skips the four tests below)
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return str.__str__(value)  # type: ignore[return-value]
        if isinstance(value, int):
            return int.__index__(value)  # type: ignore[return-value]
        if isinstance(value, float):
            return float.__float__(value)  # type: ignore[return-value]
    if isinstance(value, Fraction):
        parts = Fraction._numerator.__get__(value), Fraction._denominator.__get__(value)  # type: ignore[attr-defined]
        if type(parts[0]) is int and type(parts[1]) is int and parts[1] > 0 and math.gcd(*parts) == 1:
            return _fraction(*parts)  # type: ignore[return-value]   # already in lowest terms: no gcd step
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise ArgumentError(f"a Fraction must hold two ints, got {type(value).__name__}", argument="value",
                                fix="pass a Fraction built from ints, an int or a float")
        return Fraction(int.__index__(parts[0]), int.__index__(parts[1]))  # type: ignore[return-value]
    if isinstance(value, decimal.Decimal) and type(value) is not decimal.Decimal:
        return decimal.Decimal(decimal.Decimal.__str__(value))  # type: ignore[return-value]
    if isinstance(value, dt.date | dt.time | dt.timedelta):
        return _plain_temporal(value)  # type: ignore[return-value]
    return value


def _fraction(numerator: int, denominator: int) -> Fraction:
    """A new Fraction of two coprime ints, denominator > 0 (what ``Fraction(n, d)`` makes, without its checks)."""
    out = object.__new__(Fraction)
    out._numerator, out._denominator = numerator, denominator  # type: ignore[attr-defined]
    return out


def _plain_temporal(value: dt.date | dt.time | dt.timedelta) -> dt.date | dt.time | dt.timedelta:
    """A date, datetime, time or timedelta rebuilt from its own fields (read through the C type's descriptors).

    A subclass's ``__sub__`` (a bound minus the epoch) would run every time the engine reads the bound,
    and so would a ``tzinfo``'s ``utcoffset``: a time zone other than ``datetime.timezone`` or
    ``zoneinfo.ZoneInfo`` is read once, as the fixed offset it gives at this instant.
    """
    if isinstance(value, dt.timedelta):
        if type(value) is dt.timedelta:
            return value
        return dt.timedelta(days=dt.timedelta.days.__get__(value), seconds=dt.timedelta.seconds.__get__(value),
                            microseconds=dt.timedelta.microseconds.__get__(value))
    if not isinstance(value, dt.datetime | dt.time):
        return value if type(value) is dt.date else dt.date.fromordinal(dt.date.toordinal(value))
    clock: type[dt.datetime | dt.time] = dt.datetime if isinstance(value, dt.datetime) else dt.time
    zone = clock.tzinfo.__get__(value)
    if type(value) is clock and (zone is None or type(zone) in (dt.timezone, zoneinfo.ZoneInfo)):
        return value
    parts = (clock.hour.__get__(value), clock.minute.__get__(value), clock.second.__get__(value),
             clock.microsecond.__get__(value))
    fold = clock.fold.__get__(value)
    if isinstance(value, dt.time):
        bare: dt.datetime | dt.time = dt.time(*parts, fold=fold)
    else:
        bare = dt.datetime.combine(dt.date.fromordinal(dt.date.toordinal(value)), dt.time(*parts, fold=fold))
    if zone is None or type(zone) in (dt.timezone, zoneinfo.ZoneInfo):
        return bare.replace(tzinfo=zone)
    offset = zone.utcoffset(bare.replace(tzinfo=zone) if isinstance(bare, dt.datetime) else None)  # once
    return bare.replace(tzinfo=None if offset is None else dt.timezone(plain(offset)))


def is_text(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a ``str`` that UTF-8 can encode (no lone surrogate: Polars, DuckDB and SQLite refuse one).

    Example:
        >>> is_text("ok"), is_text(chr(0xD800)), is_text(b"x")
        (True, False, False)

    """
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeError:
        return False
    return True


def plain_copy(value: N) -> N:
    """``value`` with every number, string and date in it :func:`plain`, its lists, tuples and mappings copied.

    For arguments a query stores and reads again later (a list changed after the query was checked, or
    a ``str`` subclass that answers differently, would run something that was never checked). A tuple
    subclass becomes a tuple of its own items, any mapping a dict, and a NumPy array or a ``pl.Series``
    a list (it can be changed in place), each read once.

    Example:
        >>> features = ["x"]
        >>> copy = plain_copy({"features": features})
        >>> features.append("y"); copy
        {'features': ['x']}

    """
    if isinstance(value, list):
        return [plain_copy(v) for v in value]  # type: ignore[return-value]
    if isinstance(value, np.ndarray | pl.Series):
        items = np.ndarray.tolist(value) if isinstance(value, np.ndarray) else pl.Series.to_list(value)
        if not isinstance(items, list):       # a 0-d array is its one value (tolist() gives it alone)
            return plain_copy(items)  # type: ignore[no-any-return]
        return [plain_copy(v) for v in items]  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(plain_copy(v) for v in tuple.__iter__(value))  # type: ignore[return-value]
    if isinstance(value, Mapping):
        return {plain_copy(k): plain_copy(v) for k, v in value.items()}  # type: ignore[return-value]
    return plain(value)


def frozen_array(values: Any) -> np.ndarray:
    """A float64 array that nothing can change in place, for the module-level grids the engine decides by.

    Over an immutable ``bytes`` buffer: NumPy refuses both a write and turning ``writeable`` back on
    (a plain array's flag can be set again). ``FILTER_ORDERS[0] = 256`` re-read every stored RDP charge at
    another order: an exhausted Rényi filter admitted 36 more queries.

    Example:
        >>> grid = frozen_array([1.5, 2.0])
        >>> grid.flags.writeable, float(grid.sum())
        (False, 3.5)

    """
    return np.frombuffer(np.asarray(values, dtype=np.float64).tobytes(), dtype=np.float64)


def plain_dtype(dtype: object) -> pl.DataType:
    """``dtype`` as Polars reads it, once: a plain Polars data type (a subclass's properties never run again).

    A ``pl.DataType`` subclass could compare and hash equal to ``pl.Datetime("us")`` while its
    ``time_unit`` answered ``"ns"`` to one read and ``"us"`` to the next. Read by Polars' Rust side
    (``Series.cast`` itself compares the type with ``==`` first), which builds a new one. An
    :class:`ArgumentError` for anything Polars does not read as a data type.

    Example:
        >>> class Int8(pl.Int8):
        ...     def __eq__(self, other): return True
        ...     def __hash__(self): return hash(pl.Int64())
        >>> plain_dtype(Int8()) == pl.Int64, type(plain_dtype(Int8())).__module__, plain_dtype(pl.Int64)
        (False, 'polars.datatypes.classes', Int64)

    """
    try:
        out: pl.DataType = pl.Series("dtype", [], dtype=pl.Null)._s.cast(dtype, True, False).dtype()
    except Exception as e:   # noqa: BLE001 — whatever Polars refuses to read as a type
        raise ArgumentError(f"not a Polars data type: {type(dtype).__name__}", argument="dtype",
                            fix="pass a Polars data type such as pl.Int64 or pl.Datetime('us')") from e
    return out


def plain_key(value: object) -> object:
    """``value`` as a cache key: numbers and strings :func:`plain`, data types :func:`plain_dtype`, tuples item by item.

    A key is compared with the keys cached before it (``hash``, then ``==``): an analyst's object that
    hashed and compared equal to another key would leave what it computed under that key. A
    :class:`TypeError` for any other kind of value.

    Example:
        >>> class Loud(int):
        ...     def __eq__(self, other): return True
        >>> plain_key((Loud(3), "x", pl.Int64)), type(plain_key((Loud(3),))[0]).__name__
        ((3, 'x', Int64), 'int')

    """
    if type(value) in _EXACT:
        return value
    if isinstance(value, tuple):
        return tuple(plain_key(v) for v in tuple.__iter__(value))
    if isinstance(value, pl.DataType) or (isinstance(value, type) and issubclass(value, pl.DataType)):
        return plain_dtype(value)
    out = plain(value)
    if out is None or type(out) in (bool, str, int, float, Fraction, decimal.Decimal):
        return out
    raise TypeError(f"a cache key is a number, a string, a Polars data type or a tuple of them, not "
                    f"{type(value).__name__}")


F = TypeVar("F", bound=Callable[..., Any])


def plain_cache(maxsize: int | None) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)`` whose arguments are read through :func:`plain_key` first.

    A process-wide cache serves every later call, the engine's included: keyed by an analyst's object
    that hashes and compares equal to the engine's value while it computes another (a Fraction subclass
    equal to ε = 1 whose float is 100; a data type equal to ``Datetime("us")`` that reads as ``"ns"``),
    the cache would hand the engine a ρ 2,500 times too large, or probe values that pass an operation
    that fails on the private data. Keyed and computed on the plain value, an entry is always the right
    one for its key.

    Example:
        >>> @plain_cache(maxsize=8)
        ... def double(x):
        ...     return 2 * x
        >>> class Liar(int):
        ...     def __eq__(self, other): return True
        ...     def __hash__(self): return hash(1)
        >>> double(Liar(50)), double(1)
        (100, 2)

    """
    def decorate(function: F) -> F:
        cached = functools.lru_cache(maxsize)(function)

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            return cached(*(plain_key(a) for a in args), **{plain(k): plain_key(v) for k, v in kwargs.items()})
        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]
    return decorate


__all__ = ["Final", "ReadOnlyKeys", "ReadOnlyNames", "ReadOnlySchema", "Sealed", "engine_only", "frozen_array", "plain",
           "plain_cache", "plain_copy", "plain_dtype", "plain_expr", "plain_frame", "plain_key"]
