"""The values of a method chain on the wire: the analyst's arguments, and the results of its queries.

A remote method chain (:class:`~dpframe.remote.frames.RemoteFrame`) sends each call's arguments as JSON;
what JSON has no word for is a one-key object whose key starts with ``$``:

- ``{"$tuple": [...]}``, ``{"$dict": [[key, value], ...]}``, ``{"$float": "nan" | "inf" | "-inf"}``,
  ``{"$fraction": "p/q"}``, ``{"$bytes": hex}``, ``{"$decimal": "1.5"}``, ``{"$date" | "$datetime" | "$time": iso}``,
  ``{"$timedelta": [days, seconds, microseconds]}``, ``{"$numpy": [type, value]}`` (a NumPy scalar, as its type),
  ``{"$ndarray": [type, values]}`` (a NumPy array of booleans, numbers or text, as its type);
- ``{"$expr": tree}``: a Polars expression as Polars' own JSON tree. The server checks the tree's shape
  against the row-level allowlist *before* Polars reads it (:func:`~dpframe.plan.rowlevel.check_tree`:
  Polars' reader would unpickle a Python function), bounds the Arrow bytes inside it (list and Series
  literals, ``Enum`` categories), then the API's own checks see the expression as in process;
- ``{"$measure": {...}}``: a measure's fields (kind, column or expression, bounds, options, name);
- ``{"$frame": i}`` / ``{"$series": i}``: public keys sent after the request as the i-th Arrow IPC stream
  (one row of list columns, read as :func:`dpframe.remote.server` reads SQL keys);
- results only: ``{"$dataclass": {"module", "name", "fields"}}`` (a dpframe result type such as
  ``InteriorPoint`` or ``TopKFailed``), ``{"$dtype": i}`` (a Polars type, as the i-th frame's one column).

Nothing else crosses: a callable, or any other object, is refused in the analyst's process. On the server
every value is rebuilt from these plain parts (never a pickle), and a tag or shape the codec does not know
is an :class:`~dpframe.errors.ArgumentError` before anything is charged.

Example:
    >>> from fractions import Fraction
    >>> packed = Packer().pack({"a": (1, Fraction(1, 3))}, "bounds")
    >>> packed
    {'$dict': [['a', {'$tuple': [1, {'$fraction': '1/3'}]}]]}
    >>> Unpacker([]).unpack(packed, "bounds")
    {'a': (1, Fraction(1, 3))}
    >>> import numpy as np
    >>> scalars = Packer().pack([np.bool_(True), np.int8(3), np.float32(0.5)], "q")
    >>> scalars
    [{'$numpy': ['bool', True]}, {'$numpy': ['int8', 3]}, {'$numpy': ['float32', 0.5]}]
    >>> Unpacker([]).unpack(scalars, "q")
    [np.True_, np.int8(3), np.float32(0.5)]

"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import io
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa

from dpframe.accounting.ledger import LEDGER_NOTIONS, decode, encode
from dpframe.accounting.rdp_charge import RDPCharge
from dpframe.budgets import Budget
from dpframe.errors import ArgumentError, PlanError
from dpframe.interactive.targets import Target
from dpframe.measures import Measure, check_bounds, column_input
from dpframe.plan.rowlevel import check_size, check_tree, tree_objects
from dpframe.remote.wire import budget_from_json, budget_to_json, frame_bytes, read_keys, table_from_bytes
from dpframe.signatures import refuse

if TYPE_CHECKING:
    from dpframe.accounting.accountants import Accountant

NUMPY_SCALARS = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                           "float32", "float64"})
"""NumPy scalar types that cross as themselves (``{"$numpy": [type, value]}``): in process the session's checks take
some (``ci=np.float32(0.9)``) and refuse others (``max_positives=np.int64(3)``), and name them by their ``repr``."""
MAX_ATTACHED = 16
"""Arrow streams (public keys) one request may carry."""
_IPC_KEYS = frozenset({"Series", "List", "Array", "Struct", "strings", "categories"})
"""Keys under which Polars' JSON holds Arrow IPC bytes (list/Series literals, ``Enum`` categories of a type or a
value); an ``Array`` value holds them as ``[bytes, width]``."""
REQUEST_OBJECTS = 10_000
"""JSON objects all expressions of one request may hold together (each at most ``TREE_NODES``)."""
_BYTES_KEYS = frozenset({*_IPC_KEYS, "Binary"})
"""Keys under which a tree may hold a run of bytes: Arrow streams (checked) and a binary literal's value. Polars
keeps a pickled Python function as bytes under other keys (``function``, ``callback``, ``Map`` ...): whatever the
key screen and the allowlist miss, a run of bytes anywhere else is refused (a second, shape-based line)."""
_SHORT_BYTES = 8
"""Runs of at most this many integers pass anywhere (a decimal's precision and scale, small options)."""
_MODULE = re.compile(r"dpframe(_[a-z0-9_]+)?(\.[a-z0-9_]+)*")
_NO_OBJECT = ("pass numbers, text, dates, tuples, lists, dicts, Polars expressions, dp measures, or public keys as "
              "a pl.DataFrame / pl.Series; functions and other objects stay in your process")


def call_as_given(method: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``method(*args, **kwargs)``, arguments its signature does not take refused as in process.

    Python refuses them before the method's body runs; the :class:`~dpframe.errors.SignatureError` then raised
    (:func:`dpframe.signatures.refuse`) names the argument and the method's parameters only, as the session's own
    public methods do in process. Any other ``TypeError`` (one from the body, whose text may hold private values)
    goes on as it is. ``method`` is the served session's own method (never analyst code) and receives public values
    only: the request's arguments.

    Example:
        >>> def f(x, *, y=0): return x + y
        >>> call_as_given(f, [1], {"y": 2})
        3
        >>> call_as_given(f, [1], {"yy": 2})
        Traceback (most recent call last):
        ...
        dpframe.errors.SignatureError: yy: not an argument of f(). Fix: did you mean y=...?

    """
    try:
        return method(*args, **kwargs)
    except TypeError as e:
        refuse(method, args, kwargs, e)
        raise


class Attached(list[bytes]):
    """A request's Arrow streams, each readable once (by index): the client attaches a stream per value it sends.

    Read again and again, one stream of 64 MiB named by a few bytes of JSON each time (``[{"$series": 0}] * n``,
    or many queries' ``keys``) became as many separate frames in the server: gigabytes from kilobytes.
    """

    def __init__(self, streams: list[bytes]) -> None:
        super().__init__(streams)
        self._read: set[int] = set()

    def __getitem__(self, index: Any) -> Any:
        if type(index) is int:
            if index in self._read:
                raise ArgumentError("an attached frame is used twice in one request", argument="keys",
                                    fix="build queries with dp.connect(...), whose client sends each frame once")
            self._read.add(index)
        return super().__getitem__(index)


class Sendable:
    """An analyst-side object that crosses as its own description (a remote query: its SQL or its chain)."""

    def packed(self, packer: Packer) -> dict[str, Any]:
        """The description, its frames attached to ``packer``."""
        raise NotImplementedError


TEXT_BITS = 14_000
"""The most bits of an int (or a fraction's numerator or denominator) a request carries: about 4,200 digits, below the
4,300 past which Python writes no int as text (JSON, and a fraction's ``"numerator/denominator"``)."""


def check_digits(value: int | Fraction, argument: str) -> None:
    """An :class:`ArgumentError` naming ``argument`` when ``value`` has too many digits to cross (:data:`TEXT_BITS`).

    Shorter numbers cross as given, so the session refuses what it refuses in process (a threshold past 4,096 bits,
    a budget number past them) with its own error.

    Example:
        >>> check_digits(Fraction(1, 10**5000), "threshold")
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: threshold: an exact number of about 5,000 digits cannot be sent...

    """
    parts = (value,) if isinstance(value, int) else (value.numerator, value.denominator)
    bits = max(abs(int(p)).bit_length() for p in parts)
    if bits > TEXT_BITS:
        raise ArgumentError(f"an exact number of about {int(bits * math.log10(2)):,} digits cannot be sent (Python "
                            "writes no int of more than 4,300 digits as text)", argument=argument,
                            fix="pass it rounded to a few significant digits, e.g. as a float")


class Packer:
    """The analyst's side: arguments to JSON, public key frames to :attr:`attached` Arrow streams."""

    def __init__(self) -> None:
        self.attached: list[bytes] = []

    def attach(self, data: bytes, argument: str = "keys") -> int:
        """Send ``data`` (an Arrow stream) after the request; its index there."""
        if len(self.attached) >= MAX_ATTACHED:
            raise ArgumentError(f"more than {MAX_ATTACHED} frames in one request", argument=argument,
                                fix="pass public keys as lists of values")
        self.attached.append(data)
        return len(self.attached) - 1

    def pack(self, value: Any, argument: str) -> Any:
        """``value`` as JSON (module docstring); an :class:`ArgumentError` naming ``argument`` if it cannot cross."""
        if isinstance(value, np.generic):
            if value.dtype.name in NUMPY_SCALARS:   # as its type: the session's checks see what they see in process
                item = value.item()
                return {"$numpy": [value.dtype.name, self.pack(item, argument) if isinstance(item, float) else item]}
            value = value.item()
        if value is None or isinstance(value, bool | str):
            return bool(value) if isinstance(value, bool) else None if value is None else str(value)
        if isinstance(value, int | Fraction):
            check_digits(value, argument)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else {"$float": repr(float(value))}
        if isinstance(value, bytes):
            return {"$bytes": bytes(value).hex()}
        if isinstance(value, Fraction):
            return {"$fraction": f"{value.numerator}/{value.denominator}"}
        if isinstance(value, Decimal):
            return {"$decimal": str(value)}
        if isinstance(value, dt.datetime | dt.date | dt.time):
            kind = "datetime" if isinstance(value, dt.datetime) else "date" if isinstance(value, dt.date) else "time"
            return {f"${kind}": value.isoformat()}
        if isinstance(value, dt.timedelta):
            return {"$timedelta": [value.days, value.seconds, value.microseconds]}
        if isinstance(value, pl.Expr):
            return {"$expr": expression_tree(value, argument)}
        if isinstance(value, Measure):
            return {"$measure": self._measure(value, argument)}
        if isinstance(value, Sendable):
            return {"$query": value.packed(self)}
        if isinstance(value, Budget):
            return {"$budget": budget_to_json(value)}
        if isinstance(value, Target):
            ends = [value.lower, value.upper]
            return {"$target": {"ends": [None if e is None else self.pack(e, argument) for e in ends],
                                "inside": value.inside}}
        if isinstance(value, pl.DataFrame | pl.Series):
            return self._frame(value, argument)
        if isinstance(value, np.ndarray):       # of a plain type: as its type too, else as its values (a list)
            if _ARRAY_TYPES.fullmatch(value.dtype.str):
                return {"$ndarray": [value.dtype.str, self.pack(value.tolist(), argument)]}
            value = value.tolist()
        if isinstance(value, tuple):
            return {"$tuple": [self.pack(v, argument) for v in value]}
        if isinstance(value, list):
            return [self.pack(v, argument) for v in value]
        if isinstance(value, dict):
            return {"$dict": [[self.pack(k, argument), self.pack(v, argument)] for k, v in value.items()]}
        raise ArgumentError(f"cannot send a {type(value).__name__} to a remote session", argument=argument,
                            fix=_NO_OBJECT)

    def _measure(self, m: Measure, argument: str) -> dict[str, Any]:
        expr = m.expr
        return {"kind": m.kind, "column": m.column, "name": m.name,
                "expression": None if expr is None else expression_tree(expr, argument),
                "bounds": None if m.bounds is None else self.pack(tuple(m.bounds), argument),
                "options": [[k, self.pack(v, argument)] for k, v in m.options]}

    def _frame(self, value: pl.DataFrame | pl.Series, argument: str) -> dict[str, int]:
        frame = value.to_frame() if isinstance(value, pl.Series) else value
        for name, dtype in frame.schema.items():    # Arrow's Python library, which reads the keys, reads neither
            if dtype in (pl.Int128, pl.UInt128):
                raise ArgumentError(f"keys of 128-bit integers ({dtype}) for {name!r}: the wire carries no integer "
                                    "of more than 64 bits", argument=argument,
                                    fix=f"pass them as Python ints: {{{name!r}: keys[{name!r}].to_list()}}")
        try:        # one row of list columns of plain values: the server reads it as it reads SQL keys
            lists = frame.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String)).select(pl.all().implode())
        except pl.exceptions.PolarsError as e:
            raise ArgumentError(f"cannot send this frame ({e})", argument=argument, fix=_NO_OBJECT) from None
        return {"$series" if isinstance(value, pl.Series) else "$frame": self.attach(frame_bytes(lists), argument)}


def expression_tree(expr: pl.Expr, argument: str) -> Any:
    """A Polars expression as Polars' JSON tree, refused (here, free) if it would not read back the same.

    JSON cannot hold a NaN or infinite float literal (Polars writes ``null``), and Polars' JSON reader stops
    at about 40 nested operations: such an expression would mean something else, or nothing, on the server.

    Example:
        >>> expression_tree(pl.col("x") > 1, "predicate")["BinaryExpr"]["op"]
        'Gt'

    """
    try:
        text = expr.meta.serialize(format="json")
    except Exception:  # Python functions (map_elements/map_batches) do not serialize without pickling
        raise PlanError("uses an operation dpframe cannot inspect (a Python function?)", argument=argument,
                        fix="express it with built-in Polars expressions") from None
    try:
        same = pl.Expr.deserialize(io.StringIO(text), format="json").meta.serialize() == expr.meta.serialize()
    except Exception:
        same = False
    if not same:
        raise ArgumentError("this expression does not cross as JSON: it has a NaN or infinite literal, or is nested "
                            "too deep for Polars' JSON reader", argument=argument,
                            fix="compare with .is_nan() / .is_infinite() instead of a NaN or infinite literal, and "
                                "split a long expression into several with_columns steps")
    tree = json.loads(text)
    check_size(tree, argument)
    return tree


class Unpacker:
    """The server's side: JSON arguments back to values, public keys read from the ``attached`` streams.

    ``queries`` builds a query from the description an analyst sent (a tool's argument): it receives public
    values only (what the analyst sent); ``None`` refuses queries as arguments.
    """

    def __init__(self, attached: list[bytes], queries: Callable[[Any], Any] | None = None) -> None:
        self._attached = attached
        self._queries = queries     # builds a query from its description (a tool's argument), or None
        self._objects = [0]         # the JSON objects of the request's expressions read so far (REQUEST_OBJECTS)

    def chained(self) -> Unpacker:
        """The unpacker of a query's method chain sent as an argument of this request (its queries' builder).

        It takes no queries as arguments, and counts its expressions' objects with this one's: the request's
        expressions share :data:`REQUEST_OBJECTS` however many queries carry them.
        """
        out = Unpacker(self._attached)
        out._objects = self._objects
        return out

    def unpack(self, value: Any, argument: str) -> Any:
        """The value ``Packer.pack`` sent; an :class:`ArgumentError` (or :class:`PlanError`) for anything else."""
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, list):
            return [self.unpack(v, argument) for v in value]
        if not (isinstance(value, dict) and len(value) == 1):
            raise _shape(argument)
        tag, body = next(iter(value.items()))
        if tag == "$tuple" and isinstance(body, list):
            return tuple(self.unpack(v, argument) for v in body)
        if tag == "$dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
            out: dict[Any, Any] = {}
            for k, v in body:
                key = self.unpack(k, argument)
                try:
                    out[key] = self.unpack(v, argument)
                except TypeError:   # an unhashable key (a list)
                    raise _shape(argument) from None
            return out
        if tag == "$ndarray" and isinstance(body, list) and len(body) == 2 and isinstance(body[0], str):
            return _array(body[0], self.unpack(body[1], argument), argument)
        if tag == "$expr":
            return self._expression(body, argument)
        if tag == "$measure" and isinstance(body, dict):
            return self._measure(body, argument)
        if tag in ("$frame", "$series") and type(body) is int and 0 <= body < len(self._attached):
            columns = read_keys(self._attached[body])
            if tag == "$frame":
                return pl.DataFrame(columns)
            if len(columns) != 1:
                raise _shape(argument)
            (name, values), = columns.items()
            return pl.Series(name, values)
        if tag == "$query" and self._queries is not None:
            return self._queries(body)
        if tag == "$budget" and isinstance(body, dict):
            return budget_from_json(body)
        if tag == "$target" and isinstance(body, dict) and isinstance(body.get("ends"), list) \
                and len(body["ends"]) == 2 and type(body.get("inside")) is bool:
            ends = [None if e is None else self.unpack(e, argument) for e in body["ends"]]
            if ends[0] is not None and all(e is None or type(e) in (int, float, Fraction) and math.isfinite(e)
                                           for e in ends):
                # numbers only: Fraction("1e999999999") computes 10**999999999, holding the GIL for hours
                return Target(Fraction(ends[0]), None if ends[1] is None else Fraction(ends[1]), body["inside"])
        return plain_value(tag, body, argument)

    def count(self, objects: int, argument: str) -> None:
        """Add ``objects`` (an expression's or a SQL query's JSON objects) to the request's: REQUEST_OBJECTS."""
        self._objects[0] += objects
        if self._objects[0] > REQUEST_OBJECTS:
            raise PlanError(f"the request's expressions have more than {REQUEST_OBJECTS} parts in all",
                            argument=argument, fix="send fewer or smaller expressions per query")

    def _expression(self, tree: Any, argument: str) -> pl.Expr:
        """:func:`unpack_expression`, all of a request's trees together at most :data:`REQUEST_OBJECTS` objects."""
        self.count(tree_objects(tree), argument)
        return unpack_expression(tree, argument)

    def _measure(self, body: dict[str, Any], argument: str) -> Measure:
        kind, column, name = body.get("kind"), body.get("column"), body.get("name")
        tree, bounds, options = body.get("expression"), body.get("bounds"), body.get("options", [])
        if not isinstance(kind, str) or not kind or not (name is None or isinstance(name, str) and name) \
                or not isinstance(options, list) \
                or not all(isinstance(o, list) and len(o) == 2 and isinstance(o[0], str) for o in options) \
                or len({o[0] for o in options}) != len(options):
            raise _shape(argument)
        if tree is not None:
            col, expression = column_input(self._expression(tree, argument))
        elif column is not None:
            col, expression = column_input(column)
        else:
            col, expression = None, None
        checked = None if bounds is None else check_bounds(self.unpack(bounds, argument))
        opts = tuple(sorted(((k, self.unpack(v, argument)) for k, v in options), key=lambda option: option[0]))
        return Measure(kind, col, checked, opts, name=name, expression=expression)


_ARRAY_TYPES = re.compile(r"[<>|=]?(b1|[iu][1248]|f[248]|U[0-9]{1,7})")
"""NumPy array types that cross as themselves (``{"$ndarray": [type, values]}``): booleans, numbers, text."""
_ARRAY_PADDING = 1 << 20
"""Characters a text array may hold beyond its values' own (its type's width times its size): a wide type of many
empty strings would unpack to far more than was sent."""


def _array(kind: str, values: Any, argument: str) -> np.ndarray:
    """The NumPy array ``{"$ndarray": [kind, values]}`` stands for.

    Values of ``kind``'s Python type only, as many as its size, and a text array no wider than its values plus
    :data:`_ARRAY_PADDING` characters.
    """
    if not _ARRAY_TYPES.fullmatch(kind):
        raise _shape(argument)
    dtype = np.dtype(kind)
    leaves, pending = [], [values]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending += node
        else:
            leaves.append(node)
    allowed = {"b": (bool,), "i": (int,), "u": (int,), "f": (int, float), "U": (str,)}[dtype.kind]
    if not all(type(v) in allowed for v in leaves) or dtype.kind == "U" and \
            dtype.itemsize // 4 * len(leaves) > _ARRAY_PADDING + sum(len(v) for v in leaves):
        raise _shape(argument)
    try:
        with np.errstate(all="ignore"):
            out = np.array(values, dtype=dtype)
    except (ValueError, TypeError, OverflowError):
        raise _shape(argument) from None
    if out.size != len(leaves):
        raise _shape(argument)
    return out


def plain_value(tag: str, body: Any, argument: str) -> Any:
    """A tagged plain value (float, fraction, decimal, date, time, duration); an :class:`ArgumentError` otherwise."""
    try:
        if tag == "$float" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "$numpy" and isinstance(body, list) and len(body) == 2 and body[0] in NUMPY_SCALARS:
            item = plain_value("$float", body[1].get("$float"), argument) if isinstance(body[1], dict) \
                and len(body[1]) == 1 else body[1]
            kind: type[np.generic] = np.dtype(body[0]).type
            if type(item) in ((bool,) if body[0] == "bool" else (int,) if issubclass(kind, np.integer)
                              else (int, float)):
                with np.errstate(all="ignore"):
                    return kind(item)
        if tag == "$bytes" and isinstance(body, str) and re.fullmatch(r"(?:[0-9a-f]{2})*", body):
            return bytes.fromhex(body)
        if tag == "$fraction" and isinstance(body, str) and re.fullmatch(r"-?[0-9]{1,400}/[0-9]{1,400}", body):
            return Fraction(body)
        if tag == "$decimal" and isinstance(body, str) and len(body) <= 400:
            number = Decimal(body)      # a bounded exponent: an exact conversion of 1e999999999 takes hours
            exponent = number.as_tuple().exponent
            if not number.is_finite() or (isinstance(exponent, int) and -400 <= exponent <= 400):
                return number
        if tag in ("$date", "$datetime", "$time") and isinstance(body, str) and len(body) <= 64:
            if tag == "$time":
                return dt.time.fromisoformat(body)
            return (dt.date if tag == "$date" else dt.datetime).fromisoformat(body)
        if tag == "$timedelta" and isinstance(body, list) and len(body) == 3 and all(type(v) is int for v in body):
            return dt.timedelta(days=body[0], seconds=body[1], microseconds=body[2])
    except (ArithmeticError, ValueError, OverflowError, ZeroDivisionError, ArgumentError):
        pass
    raise _shape(argument)


def unpack_expression(tree: Any, argument: str) -> pl.Expr:
    """A Polars expression from its JSON tree, read only once its shape and Arrow bytes were checked."""
    check_tree(tree, argument)
    _check_ipc(tree, argument)
    try:
        return pl.Expr.deserialize(io.StringIO(json.dumps(tree)), format="json")
    except Exception:   # a shape Polars does not read (another Polars version?)
        raise PlanError("not an expression this server's Polars reads", argument=argument,
                        fix=f"use the server's Polars version ({pl.__version__})") from None


def _check_ipc(tree: Any, argument: str) -> None:
    """Arrow bytes in an expression (list/Series literals, Enum categories): uncompressed, plain, bounded."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending += node
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "Array" and isinstance(value, list) and len(value) == 2 and isinstance(value[0], list):
                    value = value[0]        # an Array value: [its values' bytes, its width]
                if key in _IPC_KEYS and isinstance(value, list) and all(type(b) is int for b in value):
                    try:
                        data = bytes(value)
                        table = table_from_bytes(data)
                    except (ArgumentError, ValueError):
                        raise PlanError("a literal's Arrow bytes are not a plain Arrow stream", argument=argument,
                                        fix="build the expression with Polars") from None
                    viewed = sum(_view_bytes(chunk) for column in table.columns for chunk in column.chunks)
                    if any(_inflates(field) for field in table.schema) or max(table.num_rows, viewed) > len(data):
                        raise PlanError("a literal's Arrow bytes unpack to more than they hold", argument=argument,
                                        fix="build the expression with Polars") from None
                elif key not in _BYTES_KEYS and isinstance(value, list) and len(value) > _SHORT_BYTES \
                        and all(type(b) is int for b in value):
                    raise PlanError(f"bytes under {str(key)[:40]!r}, where only Arrow streams and binary literals are "
                                    "read (Polars keeps a pickled Python function as bytes)", argument=argument,
                                    fix="build the expression with Polars, without Python functions")
                else:
                    pending.append(value)


def _inflates(field: pa.Field) -> bool:
    """Whether a field's values can repeat other bytes or take none, or are of an extension type.

    Dictionaries and list views repeat values, nulls take none; Polars' Object type travels as an extension type
    (its values are pointers into a process's memory). String and binary views (Polars' own strings, as in an
    ``Enum``'s categories) can repeat bytes too: :func:`_view_bytes` bounds what they hold instead.
    """
    types, kind = pa.types, field.type
    if any(key.startswith(b"ARROW:extension") for key in field.metadata or {}) or isinstance(kind, pa.ExtensionType):
        return True
    if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind):
        return _inflates(kind.value_field)
    if types.is_struct(kind):
        return any(_inflates(kind.field(i)) for i in range(kind.num_fields))
    return bool(types.is_dictionary(kind) or types.is_null(kind) or types.is_list_view(kind)
                or types.is_large_list_view(kind))


def _view_bytes(array: pa.Array) -> int:
    """The bytes an array's string and binary views (at any depth) stand for: each view may point at any bytes."""
    kind = array.type
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        views = array.buffers()[1]
        if views is None or not len(array):
            return 0
        lengths = np.frombuffer(views, dtype=np.int32).reshape(-1, 4)[array.offset:array.offset + len(array), 0]
        return int(np.clip(lengths, 0, None).sum(dtype=np.int64))
    if isinstance(array, pa.ListArray | pa.LargeListArray | pa.FixedSizeListArray):
        return _view_bytes(array.flatten())
    if isinstance(array, pa.StructArray):
        return sum(_view_bytes(field) for field in array.flatten())
    return 0


def _shape(argument: str) -> ArgumentError:
    return ArgumentError("a value the remote client does not send", argument=argument,
                         fix="build queries with dp.connect(...).table(...), as its client does")


@dataclasses.dataclass(frozen=True)
class RemoteCharge:
    """A charge of the served session's accountant's own kind, as a remote ``cost()`` returns it.

    A third-party accountant may charge in a kind of its own, neither a dp budget nor an
    :class:`~dpframe.accounting.RDPCharge` (:meth:`~dpframe.accounting.Accountant.charge_from_json`); in process,
    ``query.cost(budget)`` returns that object. The analyst's process does not hold the served accountant, so a remote
    ``cost()`` returns this instead: the charge's ``notion``, the ``text`` its ``to_json()`` wrote (the accountant's
    ``charge_from_json(text)`` rebuilds it, where its plugin is installed) and ``described``, the served accountant's
    description of it (as ``history()``'s cost column shows it; also its ``str``). dp budgets and RDP charges arrive as
    themselves.

    Example:
        >>> charge = RemoteCharge("moments", '{"epsilon": 1.0}', "moments ε=1")
        >>> str(charge), charge.notion
        ('moments ε=1', 'moments')

    """

    notion: str
    text: str
    described: str

    def __str__(self) -> str:
        return self.described


def pack_charge(charge: Any, accountant: Accountant) -> Any:
    """A ``cost()``'s charge for the wire (the server's side).

    Its ledger text; with ``accountant``'s description when it is of the accountant's own kind (:class:`RemoteCharge`,
    read by :func:`unpack_charge`).
    """
    text = encode(charge)
    if charge.notion in LEDGER_NOTIONS:
        return text
    return {"charge": text, "described": str(accountant.describe_charge(charge))}


def unpack_charge(value: Any) -> Any:
    """:func:`pack_charge`'s charge rebuilt (the analyst's side): a dp budget, an RDP charge or a :class:`RemoteCharge`.

    Example:
        >>> import dpframe as dp
        >>> unpack_charge(pack_charge(dp.PureDP(1), dp.Session({"t": pl.DataFrame({"x": [1]})},
        ...     privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1)).accountant))
        PureDP(epsilon=1)

    """
    if isinstance(value, dict):
        stored = json.loads(value["charge"])
        return RemoteCharge(str(stored["notion"]), str(stored["values"][0]), str(value["described"]))
    return decode(value)


def pack_result(value: Any, frames: list[pl.DataFrame]) -> Any:
    """A query's result as JSON, its frames (and types) appended to ``frames`` (the server's side)."""
    if value is None or isinstance(value, bool | str) and not isinstance(value, np.generic):
        return value
    if isinstance(value, np.generic):       # as its type (``NUMPY_SCALARS``), else as its plain value
        return Packer().pack(value, "result")
    if isinstance(value, int | float | Fraction | Decimal | dt.date | dt.time | dt.timedelta):
        return Packer().pack(value, "result")
    if isinstance(value, Budget | RDPCharge):
        return {"$cost": encode(value)}
    if isinstance(value, pl.DataFrame):
        frames.append(value)
        return {"$frame": len(frames) - 1}
    if isinstance(value, pl.DataType):
        frames.append(pl.DataFrame(schema={"dtype": value}))
        return {"$dtype": len(frames) - 1}
    if isinstance(value, tuple | list):
        items = [pack_result(v, frames) for v in value]
        return {"$tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {"$dict": [[pack_result(k, frames), pack_result(v, frames)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):     # rebuilt only for dpframe's packages
        fields = {f.name: pack_result(getattr(value, f.name), frames) for f in dataclasses.fields(value)}
        return {"$dataclass": {"module": type(value).__module__, "name": type(value).__qualname__, "fields": fields}}
    # Any other object (a plugin family's own result class): its type and text, so that a charged release is not
    # lost on the way (it is released already: in process the analyst holds the object itself).
    return {"$object": {"type": f"{type(value).__module__}.{type(value).__qualname__}",
                        "repr": _shown(value)}}


REPR_LIMIT = 1 << 16
"""The most characters of a result's ``repr`` that cross (a plugin's result class of no type dpframe knows)."""


def _shown(value: object) -> str:
    """``repr(value)``, at most :data:`REPR_LIMIT` characters (``"<repr failed: Error>"`` when it raises).

    Without memory addresses (:func:`unplaced`: Python's default ``repr`` names one).
    """
    try:
        text = repr(value)
    except Exception as e:      # a plugin's broken __repr__: the release still arrives, as its type
        return f"<repr failed: {type(e).__name__}>"
    text = unplaced(text)
    return text if isinstance(text, str) and len(text) <= REPR_LIMIT else str(text)[:REPR_LIMIT] + "…"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+(?=>)")


def unplaced(text: Any) -> Any:
    """``text`` without the memory addresses an object's ``repr`` holds (``<... at 0x7f...>``); a non-text as is.

    An address in the server's process, where a new object lands depending on what the process allocated
    before (its private work included), is no business of the analyst's.

    Example:
        >>> unplaced("got <Result object at 0x7f8d1614be50>")
        'got <Result object>'

    """
    return _ADDRESS.sub("", text) if isinstance(text, str) else text


def unpack_result(value: Any, frames: list[pl.DataFrame]) -> Any:
    """:func:`pack_result`'s value rebuilt (the analyst's side): dpframe result types, frames, plain values."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [unpack_result(v, frames) for v in value]
    tag, body = next(iter(value.items()))
    if tag == "$tuple":
        return tuple(unpack_result(v, frames) for v in body)
    if tag == "$dict":
        return {unpack_result(k, frames): unpack_result(v, frames) for k, v in body}
    if tag == "$frame":
        return frames[body]
    if tag == "$dtype":
        return frames[body].schema["dtype"]
    if tag == "$cost":
        return decode(body)
    if tag == "$object":
        return {"type": str(body["type"]), "repr": str(body["repr"])}
    if tag == "$dataclass":
        fields = {k: unpack_result(v, frames) for k, v in body["fields"].items()}
        kind = _result_type(str(body["module"]), str(body["name"]))
        if kind is None or set(fields) != {f.name for f in dataclasses.fields(kind)}:   # as the class declares
            return {"type": body["name"], **fields}
        out: Any = object.__new__(kind)
        for name, field_value in fields.items():
            object.__setattr__(out, name, field_value)
        return out
    return plain_value(tag, body, "result")


def _result_type(module: str, name: str) -> type | None:
    """A dpframe result class by module and name (only dataclasses of dpframe's packages), or None.

    Public names only: no part of ``module``, nor ``name``, starts with ``_`` (``dpframe.__init__`` would run dpframe's
    ``__init__`` again as a module of its own, a ``__main__`` a package's command line).
    """
    if not _MODULE.fullmatch(module) or not name.isidentifier() \
            or any(part.startswith("_") for part in [*module.split("."), name]):
        return None
    try:
        kind = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return kind if isinstance(kind, type) and dataclasses.is_dataclass(kind) else None


__all__ = ["MAX_ATTACHED", "NUMPY_SCALARS", "Attached", "Packer", "RemoteCharge", "Sendable", "Unpacker",
           "call_as_given", "expression_tree", "pack_charge", "pack_result", "plain_value", "unpack_charge",
           "unpack_expression", "unpack_result", "unplaced"]
