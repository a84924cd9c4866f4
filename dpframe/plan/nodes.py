"""Logical plan nodes.

A node is frozen and validated when it is built: its output schema is derived by running the same
Polars operation on an *empty* frame with the input's schema, so unknown columns and type errors fail
at build time, free, without reading a private row. Row-level nodes know how to apply themselves to a
Polars LazyFrame (:meth:`RowNode.apply`), which both validation and the Polars backend use.

Example:
    >>> import polars as pl
    >>> scan = Scan.of("visits", pl.Schema({"age": pl.Int64, "city": pl.String}))
    >>> Filter.of(scan, pl.col("age") >= 18).describe()
    'Filter [(col("age")) >= (dyn int: 18)]'

"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from dpframe.engine_output import ENGINE
from dpframe.errors import PlanError, SchemaError, one_of
from dpframe.measures import Measure
from dpframe.plan.growth import Growth, column_growth
from dpframe.plan.rowlevel import too_deep
from dpframe.plan.totality import output_schema, total_expression
from dpframe.plan.values import probe_frame
from dpframe.privacy_unit import PrivacyUnit
from dpframe.sealed import ExprCopies, ReadOnlyKeys, ReadOnlySchema
from dpframe.tables import reserved_name

_PROBE_ROWS = 3


def case_key(name: str) -> str:
    """``name`` with case ignored as Spark's and DuckDB's names ignore it: equal keys, names they may equate.

    Spark matches names with Java's ``equalsIgnoreCase``: character by character, equal when their upper
    cases, or the lower cases of those, are. That equates more than Python's ``lower()`` (``ſ``, long s,
    with ``s``; ``İ`` with ``i``; the Kelvin sign with ``k``). Each character is keyed by the lower case of
    its upper case (the first character of a longer mapping: a superset of Java's single-character one).

    Example:
        >>> case_key("uſer") == case_key("USER") == case_key("user"), case_key("İd") == case_key("id")
        (True, True)

    """
    def key(ch: str) -> str:
        upper = ch.upper()
        return (upper if len(upper) == 1 else ch).lower()[0]
    return "".join(key(ch) for ch in name)


def case_clashes(names: Sequence[str]) -> list[str]:
    """The names of ``names`` that another differs from only in case (:func:`case_key`), sorted.

    DuckDB and Spark cannot tell such columns of a table apart: each refuses the table when it is registered
    (on Spark every query failed after its charge, ``test_review39c.py``).

    Example:
        >>> case_clashes(["u", "U", "x", "uſ", "US"])
        ['U', 'US', 'u', 'uſ']

    """
    keys = [case_key(name) for name in names]
    return sorted(name for name, key in zip(names, keys) if keys.count(key) > 1)


def check_new_names(input_schema: pl.Schema, names: Sequence[str], argument: str) -> None:
    """Refuse a new column (one of ``names`` not in ``input_schema``) the backends could not tell apart.

    A :func:`~dpframe.tables.reserved_name` (empty, or starting with ``__dp`` in any case: the DuckDB
    backend's helper columns, ``__dp_hash`` shadowed the bounding hash, and the charged query failed with one
    exception on D and another on D′; or a pattern to ``pl.col``, ``*`` or ``^...$``) or a name equal to
    another column's but for case (DuckDB's and Spark's names ignore case: :func:`case_key`) would break the
    query after it is charged: a PlanError now, nothing charged, whatever the backend.

    Example:
        >>> check_new_names(pl.Schema({"x": pl.Int64}), ["x", "__DP_HASH"], "exprs")
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: exprs: a new column may not be named '__DP_HASH': ...

    """
    seen: dict[str, str] = {}
    for name in names:
        new = name not in input_schema
        why = reserved_name(name) if new else None
        if why is not None:
            raise PlanError(f"a new column may not be named {name!r}: {why}, and such a column would break the "
                            "query after it is charged", argument=argument,
                            fix="give the column another name (.alias('...'), or AS in SQL)")
        other = seen.setdefault(case_key(name), name)
        if other != name and (new or other not in input_schema):
            raise PlanError(f"the columns {other!r} and {name!r} differ only in case, which DuckDB's and Spark's "
                            "names ignore (the query would fail there after it is charged)", argument=argument,
                            fix=f"give {name!r} another name (.alias('...'), or AS in SQL)")


def _derive(input_schema: pl.Schema, node: RowNode, argument: str) -> pl.Schema:
    """Output schema of ``node`` applied to an empty frame of ``input_schema`` (reads no data).

    The node is also run on a few rows of nulls and on the adversarial values of every input column
    (:func:`~dpframe.plan.values.probe_frame`; public, made up here): an expression that fails, that does
    not give one output row per input row (``select`` of literals only, a function that shortens its
    input), or whose values come out in another type than Polars reports for it (a struct cast to a
    number casts each field; then any later step fails; integer literals combined beyond 64 bits, which
    the lazy schema calls ``Int32`` and which compute as ``Int128``: the DuckDB backend converts rows by
    the lazy schema) is refused now rather than failing or misbehaving on the private data.
    """
    schema = output_schema(node.apply, input_schema, argument)
    check_new_names(input_schema, schema.names(), argument)
    _check_types(node.apply(pl.LazyFrame(schema=input_schema)).collect_schema(), schema, argument)
    for probe, what in ((pl.DataFrame(schema=input_schema).clear(_PROBE_ROWS), "null values"),
                        (probe_frame(input_schema), "some values of its input types")):
        try:
            out = node.apply(probe.lazy()).collect(engine=ENGINE)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:   # noqa: BLE001 — a Polars panic (pyo3's PanicException) too
            lines = str(e).strip().splitlines()
            raise PlanError(f"fails on {what} ({type(e).__name__}: {lines[0] if lines else ''}), so it could fail on "
                            "the private data", argument=argument,
                            fix="handle nulls, e.g. with fill_null(...) or pl.when(...)") from None
        if not isinstance(node, Filter) and out.height != probe.height:
            raise PlanError(f"gives {out.height} rows for {probe.height} input rows: every expression must give one "
                            "value per row", argument=argument,
                            fix="reference a column in the expression (a literal alone gives a single row)")
        _check_types(schema, out.schema, argument)
    return schema


def _check_types(said: pl.Schema, got: pl.Schema, argument: str) -> None:
    """A PlanError for a column Polars reports (``said``) in another type than it computes (``got``)."""
    wrong = [(c, said[c], t) for c, t in got.items() if c in said and said[c] != t]
    if wrong:
        name, reported, computed = wrong[0]
        raise PlanError(f"column {name!r} is reported as {reported} but computed as {computed} (a Polars type "
                        "inconsistency), so the query would fail after it is charged", argument=argument,
                        fix=f"cast {name!r} explicitly to the type you want, e.g. .cast(pl.{reported}, strict=False)")


@dataclass(frozen=True, eq=False)
class Node:
    """Base of all plan nodes."""

    @property
    @abstractmethod
    def schema(self) -> pl.Schema:
        """The (public) output schema."""

    @abstractmethod
    def describe(self) -> str:
        """One line for explain()."""

    def lineage(self) -> list[Node]:
        """The nodes from the scan to this one."""
        chain: list[Node] = [self]
        while isinstance(chain[-1], RowNode):
            chain.append(chain[-1].input)
        return chain[::-1]


@dataclass(frozen=True, eq=False)
class Scan(Node):
    """Reads a registered private table (``bound``: tighter contribution bounds for queries on it)."""

    table: str
    table_schema: pl.Schema
    bound: PrivacyUnit | None = None

    def __post_init__(self) -> None:
        if type(self.table_schema) is not ReadOnlySchema:         # frame.schema hands it out
            object.__setattr__(self, "table_schema", ReadOnlySchema(self.table_schema))

    @classmethod
    def of(cls, table: str, schema: pl.Schema) -> Scan:
        """A scan of ``table`` whose public schema is ``schema``."""
        return cls(table, schema)

    @property
    def schema(self) -> pl.Schema:
        return self.table_schema

    def describe(self) -> str:
        bound = ""
        if self.bound is not None:       # a number, or "auto" where bound() left the session's choice in place
            rows, groups = self.bound.rows, self.bound.groups
            parts = [f"≤ {n} {what}" for n, what in ((rows, "rows"), (groups, "groups")) if isinstance(n, int)]
            bound = f", bound to {', '.join(parts)} per unit"
        return f"Scan {self.table} ({len(self.table_schema)} columns{bound})"


def bounded_unit(unit: PrivacyUnit, node: Node) -> PrivacyUnit:
    """The unit queries on ``node`` are bounded by: ``unit``, tightened by the scan's ``bound`` (never loosened).

    Planning and execution both call it, so the sensitivity a query is charged for and the contribution
    bounding its rows get come from the same place.
    """
    scan = node.lineage()[0]
    return unit if not isinstance(scan, Scan) or scan.bound is None else unit.within(scan.bound)


def tables_read(node: Node) -> frozenset[str]:
    """The private tables a query on ``node`` reads: its scan's (every plan is one chain from one scan).

    A SQL join or CTE lowers to that chain too (it may join public tables, which are held in memory;
    a join of two private tables is refused). What a release checks for changed files before charging
    (:mod:`dpframe.file_versions`).

    Example:
        >>> tables_read(Filter.of(Scan.of("visits", pl.Schema({"x": pl.Int64})), pl.col("x") > 0))
        frozenset({'visits'})

    """
    return frozenset(n.table for n in node.lineage() if isinstance(n, Scan))


def rebound(node: Node, unit: PrivacyUnit) -> Node:
    """``node``'s chain of row steps on a scan bound by ``unit``."""
    chain = node.lineage()
    scan = chain[0]
    assert isinstance(scan, Scan)
    out: Node = dataclasses.replace(scan, bound=unit)
    for n in chain[1:]:
        assert isinstance(n, RowNode)
        out = dataclasses.replace(n, input=out)
    return out


@dataclass(frozen=True, eq=False)
class RowNode(Node):
    """A stable row-level transformation: each output row comes from one input row."""

    input: Node
    output_schema: pl.Schema

    def __post_init__(self) -> None:
        if type(self.output_schema) is not ReadOnlySchema:        # frame.schema hands it out
            object.__setattr__(self, "output_schema", ReadOnlySchema(self.output_schema))

    @property
    def schema(self) -> pl.Schema:
        return self.output_schema

    @abstractmethod
    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        """Apply this transformation to a Polars LazyFrame."""


@dataclass(frozen=True, eq=False)
class Filter(ExprCopies, RowNode):
    """Keeps the rows where a row-level boolean predicate holds (nulls count as false)."""

    predicate: pl.Expr
    expr_fields = frozenset({"predicate"})

    @classmethod
    def of(cls, input: Node, predicate: pl.Expr) -> Filter:
        """Validate and build."""
        predicate = _checked(predicate, "predicate", input.schema, column_growth(input))
        node = cls(input, input.schema, predicate)
        schema = _derive(input.schema, node, "predicate")
        if schema != input.schema:
            raise PlanError("a filter must not change the columns", argument="predicate",
                            fix="pass a boolean expression")
        dtype = pl.LazyFrame(schema=input.schema).select(predicate).collect_schema().dtypes()
        if len(dtype) != 1 or dtype[0] != pl.Boolean:
            raise SchemaError(f"must be a boolean expression, got {dtype}", argument="predicate",
                              fix="compare a column, e.g. pl.col('age') >= 18")
        return node

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        return frame.filter(self.predicate)

    def describe(self) -> str:
        return f"Filter {self.predicate}"


def _checked(expr: object, argument: str, schema: pl.Schema, growth: Mapping[str, Growth]) -> pl.Expr:
    """:func:`~dpframe.plan.totality.total_expression`, a tree too deep for its walks refused as such (free).

    (SQL's builder calls ``total_expression`` itself and refuses a RecursionError in its own words.)
    """
    try:
        return total_expression(expr, argument, schema, growth)
    except RecursionError:
        raise too_deep(argument) from None
    except pl.exceptions.ComputeError as e:     # Polars' own reader: "depth limit exceeded"
        if "depth limit" not in str(e):
            raise
        raise too_deep(argument) from None


def _named(exprs: Sequence[pl.Expr], named: dict[str, pl.Expr], argument: str,
           input: Node) -> tuple[pl.Expr, ...]:
    out = []
    schema, growth = input.schema, column_growth(input)
    flat = [x for e in exprs for x in (e if isinstance(e, list | tuple) else [e])]   # like Polars: lists too
    for e in flat:
        if isinstance(e, str):
            if e not in schema:                     # (a name Polars cannot take, a lone surrogate, refused here too)
                raise SchemaError(f"unknown column {e!r:.60}", argument=argument, fix=one_of(e, schema.names()))
            e = pl.col(e)
        out.append(_checked(e, argument, schema, growth))
    for name, e in named.items():
        if not isinstance(e, pl.Expr):
            try:
                e = pl.lit(e)
            except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError,   # (10**400: Polars' error)
                    pl.exceptions.PanicException) as err:                               # (Decimal("nan"): a panic)
                raise PlanError(f"expected a Polars expression or a single value, got {type(e).__name__}",
                                argument=name, fix=f"pass e.g. {name}=pl.col('x') * 2 or {name}=0") from err
        out.append(_checked(e.alias(name), name, schema, growth))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class WithColumns(ExprCopies, RowNode):
    """Adds or replaces columns computed row by row. The privacy-unit column cannot be replaced."""

    exprs: tuple[pl.Expr, ...]
    expr_fields = frozenset({"exprs"})

    @classmethod
    def of(cls, input: Node, exprs: Sequence[pl.Expr], named: dict[str, pl.Expr],
           protected: str | None) -> WithColumns:
        """Validate and build."""
        checked = _named(exprs, named, "exprs", input)
        node = cls(input, input.schema, checked)
        schema = _derive(input.schema, node, "exprs")
        written = pl.LazyFrame(schema=input.schema).select(checked).collect_schema().names()
        if protected is not None and protected in written:
            raise PlanError(f"would overwrite the privacy-unit column {protected!r}", argument="exprs",
                            fix="write the result to a column with another name")
        return cls(input, schema, checked)

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        return frame.with_columns(self.exprs)

    def describe(self) -> str:
        return "WithColumns [" + ", ".join(str(e) for e in self.exprs) + "]"


@dataclass(frozen=True, eq=False)
class Select(ExprCopies, RowNode):
    """Keeps only the given (row-level) columns; the privacy-unit column is always kept."""

    exprs: tuple[pl.Expr, ...]
    expr_fields = frozenset({"exprs"})

    @classmethod
    def of(cls, input: Node, exprs: Sequence[pl.Expr], named: dict[str, pl.Expr],
           protected: str | None) -> Select:
        """Validate and build."""
        checked = _named(exprs, named, "exprs", input)
        names = list(_derive(input.schema, cls(input, input.schema, checked), "exprs").names()) if checked else []
        if protected is not None and protected in names:
            # Selected explicitly: it must be the unit column itself, unchanged.
            raise PlanError(f"the privacy-unit column {protected!r} is kept automatically",
                            argument="exprs", fix=f"leave {protected!r} out of select()")
        if protected is not None:
            checked = (pl.col(protected), *checked)
        if not checked:     # no column at all (a row-level frame): a frame of no columns has no rows to count
            raise PlanError("would leave no columns", argument="exprs",
                            fix="keep at least one column (any column: dp.len() counts rows whatever they hold)")
        node = cls(input, input.schema, checked)
        return cls(input, _derive(input.schema, node, "exprs"), checked)

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        return frame.select(self.exprs)

    def describe(self) -> str:
        return "Select [" + ", ".join(str(e) for e in self.exprs) + "]"


@dataclass(frozen=True, eq=False)
class Aggregate(Node):
    """The private aggregation a query releases: measures, optionally per group.

    ``keys`` is a DataFrame of public group keys, or ``None`` for keys chosen by DP partition
    selection (grouped queries only).
    """

    input: Node
    by: tuple[str, ...]
    keys: pl.DataFrame | None
    measures: tuple[Measure, ...]

    def __post_init__(self) -> None:
        if self.keys is not None and type(self.keys) is not ReadOnlyKeys:    # q.node.keys hands them out
            object.__setattr__(self, "keys", ReadOnlyKeys.of(self.keys))

    @property
    def schema(self) -> pl.Schema:
        return self.input.schema

    @property
    def grouped(self) -> bool:
        """Whether this is a group-by."""
        return bool(self.by)

    def describe(self) -> str:
        if not self.by:
            return "Aggregate (one row)"
        source = "public keys" if self.keys is not None else "private keys (DP partition selection)"
        n = f", {self.keys.height} groups" if self.keys is not None else ""
        return f"GroupBy {list(self.by)}: {source}{n}"

    def lineage(self) -> list[Node]:
        return [*self.input.lineage(), self]
