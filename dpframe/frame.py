"""The lazy, private frame users chain methods on, and the terminal :class:`Query`.

A :class:`Frame` never hands back rows. Its methods build immutable plan nodes (validated at once,
free); ``agg`` turns it into a :class:`Query` whose ``explain``/``cost`` are free and whose ``collect``
charges the session and runs.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": [1, 2, 3], "age": [20, 30, 40], "city": ["a", "b", "a"]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(1), seed=1)
    >>> q = sess.table("t").filter(pl.col("age") >= 18).group_by("city", keys=["a", "b"]).agg(dp.len())
    >>> q.cost(budget=dp.PureDP(0.5))
    PureDP(epsilon=1/2)

"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import polars as pl

from dpframe.accuracy import Accuracy, check_accuracy, smallest_budget
from dpframe.accuracy import note as accuracy_note
from dpframe.aggregate import AggregateQuery
from dpframe.backends.base import unsupported
from dpframe.budgets import Budget
from dpframe.display import query_html
from dpframe.errors import (
    BudgetError,
    DPFrameError,
    NoIntervalWarning,
    PlanError,
    SchemaError,
    emit,
    one_of,
    plugin_failure,
)
from dpframe.explain import no_interval_notes
from dpframe.family import Releasable, Source, check_format, needs_budget, render
from dpframe.habits import FRAME, GROUP_BY, habit
from dpframe.measures import Measure
from dpframe.plan.derive import derive_keys, derive_measures
from dpframe.plan.nodes import Aggregate, Filter, Node, RowNode, Select, WithColumns, bounded_unit, rebound, tables_read
from dpframe.planning import PhysicalPlan, sampling_rate
from dpframe.planning.passes import plugin_hook
from dpframe.sealed import _ENGINE, ReadOnlyKeys, ReadOnlyNames, engine_only, is_text, plain, plain_copy, plain_frame
from dpframe.signatures import refuse
from dpframe.tuning.diagnostics import Diagnosed
from dpframe.tuning.stage import StagedPlan, require_plan

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.mechanism import MechanismPlan
    from dpframe.session import Session


def _family_query(session: Session, where: str, name: str, source: Source, args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
    """Build query family ``name`` on ``source``; a PluginError when no installed family attaches ``where``."""
    family = session.plugins.family(name)
    if family.attach not in (where, "both"):
        raise PlanError(f"{name!r} is a {family.attach.replace('_', '-')} query, not a {where.replace('_', '-')} one",
                        argument=name, fix="call it on a group_by(...)" if family.attach == "group_by"
                        else "call it on the frame, before group_by")
    # plain copies: a builder checks its arguments, its query reads them again when it runs
    try:
        return family.build(source, *plain_copy(args), **plain_copy(kwargs))
    except TypeError as e:      # arguments the builder's signature, or the one it passes them to, does not take
        for target in (family.build, getattr(family, "takes", None)):
            if target is not None:
                refuse(functools.partial(target, source), args, kwargs, e, name)
        raise
    except DPFrameError as e:   # the family refuses an argument; a sampler refusing the family's own call is its bug
        failure = plugin_failure(e, f"query family {name!r}", "in build()", argument=name,
                                 fix="a bug of the plugin that registers it (see `dpframe plugins`): one of dpframe's "
                                     "samplers refused the arguments the family gave it; report it to its authors")
        if failure is None:
            raise
        raise failure from e


def _families(session: Session, where: str) -> list[str]:
    return [e.name for e in session.plugins.families() if e.item.attach in (where, "both")]


def _no_attribute(session: Session, owner: str, name: str) -> AttributeError:
    found = habit(owner, FRAME if owner == "Frame" else GROUP_BY, name)
    if found is not None:
        return found
    blocked = sorted(session.plugins.blocked)
    hint = f" (no installed query family is named so; blocked plugins: {blocked})" if blocked else ""
    return AttributeError(f"'{owner}' object has no attribute {name!r}{hint}")


class Frame(ReadOnlyNames):
    """A private, lazy table: filter, derive columns, then aggregate with dp measures.

    Built by the engine only (``sess.table(name)``, then its methods): its plan was checked step by step.
    """

    def __init__(self, session: Session, node: Node, *, _engine: object = None) -> None:
        engine_only(_engine, "Frame", "start from sess.table(name) and chain its methods")
        backend = session._catalog.backend(None)
        reason = unsupported(backend, node) if isinstance(node, RowNode) else None
        if reason is not None:   # refused now, free: it would fail after its charge
            raise PlanError(f"backend {backend.name!r} cannot run {node.describe()}: {reason}", argument="backend",
                            fix="change the step as the message says, or use another backend: "
                                "dp.Session(..., backend='polars')")
        self._session = session
        self._node = node

    @property
    def schema(self) -> pl.Schema:
        """Column names and types (public metadata; no rows)."""
        return self._node.schema

    @property
    def columns(self) -> list[str]:
        """Column names."""
        return list(self._node.schema.names())

    @property
    def dtypes(self) -> list[pl.DataType]:
        """Column types, in column order (public metadata)."""
        return list(self._node.schema.dtypes())

    @property
    def width(self) -> int:
        """The number of columns (public; the number of rows is not: ``agg(dp.len())``)."""
        return len(self._node.schema)

    def collect_schema(self) -> pl.Schema:
        """The schema, as ``pl.LazyFrame.collect_schema()`` gives it (public; reads no rows)."""
        return self._node.schema

    def __len__(self) -> int:
        raise _no_attribute(self._session, "Frame", "__len__")

    def __iter__(self) -> Any:
        raise _no_attribute(self._session, "Frame", "__iter__")

    def __getitem__(self, item: object) -> Any:
        raise _no_attribute(self._session, "Frame", "__getitem__")

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "<dp.Frame (private) " + " → ".join(n.describe() for n in self._node.lineage()) + ">"

    def _repr_html_(self) -> str:
        return query_html("dp.Frame", [n.describe() for n in self._node.lineage()],
                          f"columns: {', '.join(self.columns)}. Aggregate it: .agg(dp.len(), ...) or "
                          ".group_by(...).agg(...), then .explain(budget) / .collect(budget)")

    def _unit(self) -> str | None:
        return self._session.privacy_unit.column

    def _source(self) -> Source:
        return Source(self._node, self._session.plan_context)

    def query(self, family: str, /, *args: Any, **kwargs: Any) -> Releasable[Any]:
        """A query of any registered query family by name (built-in or a plugin's); ``frame.<family>(...)`` too.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.PureDP(1), seed=0)
            >>> sess.table("t").query("agg", dp.len()).cost(dp.PureDP(0.5))
            PureDP(epsilon=1/2)

        """
        source = self._source()
        return Releasable(self._session, _family_query(self._session, "frame", family, source, args, kwargs),
                          family=family, tables=tables_read(self._node), rate=sampling_rate(self._node),
                          unit=source.unit, _engine=_ENGINE)

    def __getattr__(self, name: str) -> Any:
        if "_session" not in vars(self):    # an empty copy being built (copy.copy): no session to ask yet
            raise AttributeError(name)
        if not name.startswith("_") and name in _families(self._session, "frame"):
            return functools.partial(self.query, name)
        raise _no_attribute(self._session, "Frame", name)

    def filter(self, *predicates: pl.Expr, **constraints: Any) -> Frame:
        """Keep the rows where every (row-level) predicate holds; nulls count as false.

        Like Polars, ``filter(city="a")`` is short for ``filter(pl.col("city") == "a")``.
        """
        if not predicates and not constraints:
            raise PlanError("give at least one predicate", argument="predicates", fix="e.g. pl.col('age') >= 18")
        node = self._node
        for name, value in constraints.items():
            if name not in self.schema:
                raise SchemaError(f"unknown column {name!r}", argument=name, fix=one_of(name, self.columns))
            if isinstance(value, pl.Expr | pl.Series | pl.DataFrame | list | tuple | dict | set):
                raise PlanError(f"{name}=... must be a single value, got {type(value).__name__}", argument=name,
                                fix=f"pass a value, e.g. {name}=..., or a predicate such as pl.col({name!r}) > 1")
            try:
                literal = pl.lit(value)
            except (TypeError, ValueError, pl.exceptions.PolarsError, pl.exceptions.PanicException):   # Decimal NaN
                raise PlanError(f"{name}=... must be a value Polars can compare with, got {type(value).__name__}",
                                argument=name, fix=f"pass a number, string, date or bool, or a predicate such as "
                                                   f"pl.col({name!r}) > 1") from None
            predicates = (*predicates, pl.col(name) == literal)
        for p in predicates:
            node = Filter.of(node, p)
        return Frame(self._session, node, _engine=_ENGINE)

    def with_columns(self, *exprs: pl.Expr, **named: Any) -> Frame:
        """Add or replace columns computed row by row (like ``pl.LazyFrame.with_columns``)."""
        return Frame(self._session, WithColumns.of(self._node, exprs, named, self._unit()), _engine=_ENGINE)

    def select(self, *exprs: pl.Expr | str, **named: Any) -> Frame:
        """Keep only these row-level columns (the privacy-unit column stays, hidden from results)."""
        return Frame(self._session, Select.of(self._node, exprs, named, self._unit()),  # type: ignore[arg-type]
                     _engine=_ENGINE)

    def bound(self, *, max_rows: int | None = None, max_groups: int | None = None) -> Frame:
        """The frame with tighter contribution bounds for the queries built on it, never looser than the session's.

        A query by carrier may want ``max_groups=1``, one by airport 3: each unit then keeps at most
        ``max_rows`` rows (in at most ``max_groups`` groups, in a group-by) of this frame, a uniformly random
        subset, and the query's noise is calibrated to these bounds (``explain()`` shows them). A bound
        looser than the session's privacy unit is refused: the session's unit is the most any query may
        read of one unit. Charges are in the session's budget, as for any query.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> data = pl.DataFrame({"u": [1, 1, 2], "g": ["a", "b", "a"]})
            >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=10), budget=dp.PureDP(1))
            >>> by_g = sess.table("t").bound(max_groups=1).group_by("g", keys=["a", "b"]).agg(dp.len())
            >>> [line[:64] for line in str(by_g.explain(dp.PureDP(1))).splitlines() if "ContributionBound" in line]
            ["  2. ContributionBound: unit 'u': ≤ 10 rows, ≤ 1 groups per unit"]

        """
        unit = self._session.privacy_unit.tightened(max_rows, max_groups)
        return Frame(self._session, rebound(self._node, unit.within(bounded_unit(unit, self._node))), _engine=_ENGINE)

    def drop(self, *columns: str | Sequence[str]) -> Frame:
        """The frame without these columns (the privacy-unit column cannot be dropped).

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"u": [1], "a": [1], "b": [2]})},
            ...                   privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(1))
            >>> sess.table("t").drop("b").columns
            ['u', 'a']

        """
        names: list[object] = []
        for c in columns:
            if not isinstance(c, str | list | tuple):      # a number, None, an object: no column names
                raise SchemaError(f"expected column names, got {type(c).__name__}", argument="columns",
                                  fix=f"pass names of {self.columns}, e.g. drop('a', 'b') or drop(['a', 'b'])")
            names += [c] if isinstance(c, str) else list(c)
        self._check_own(names, "columns", "stays", "drop()")
        kept = [c for c in self.columns if c not in names and c != self._unit()]
        if not kept and self._unit() is None:
            raise PlanError("would drop every column", argument="columns",
                            fix="keep at least one column (any column: dp.len() counts rows whatever they hold)")
        return self.select(*kept)

    def _check_own(self, names: Sequence[object], argument: str, unit_rule: str, method: str) -> None:
        """Each name is a column of this frame other than the privacy unit's (a SchemaError / PlanError otherwise)."""
        for c in names:
            if not isinstance(c, str):
                raise SchemaError(f"expected a column name, got {type(c).__name__}", argument=argument,
                                  fix=f"use one of {self.columns}")
            if c not in self.schema:
                raise SchemaError(f"unknown column {c!r}", argument=argument, fix=one_of(c, self.columns))
            if c == self._unit():
                raise PlanError(f"the privacy-unit column {c!r} {unit_rule}", argument=argument,
                                fix=f"leave {c!r} out of {method}")

    def rename(self, mapping: dict[str, str]) -> Frame:
        """The frame with columns renamed ``{old: new}`` (not the privacy-unit column).

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"a": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.PureDP(1))
            >>> sess.table("t").rename({"a": "b"}).columns
            ['b']

        """
        if not isinstance(mapping, dict) or not all(isinstance(k, str) and is_text(v) for k, v in mapping.items()):
            raise PlanError(f"expected a dict {{old: new}} of column names, got {mapping!r}", argument="mapping",
                            fix="e.g. rename({'dep_delay': 'delay'})")
        self._check_own(list(mapping), "mapping", "keeps its name", "rename()")
        return self.select(*[pl.col(c).alias(mapping.get(c, c)) for c in self.columns if c != self._unit()])

    def sample(self, rate: float) -> Frame:
        """Poisson-sample privacy units (rows for a row unit) with public probability ``rate`` ∈ (0, 1].

        Fresh randomness at every execution. Queries on the sample are charged the *amplified* cost
        (shown in ``explain()``): e.g. ε → log(1 + rate·(e^ε − 1)) under basic composition, and the
        tight subsampled curves under ``accountant="rdp"``/``"pld"`` (see ``docs/accounting.md``).

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups): each unit is in the sample with probability ``rate``, independently; the
        amplification holds for add/remove neighbours (a session refuses replace-one curves). Guarantee: the amplified
        cost each query on the sample shows.
        """
        from dpframe.plan.sample import Sample

        return Frame(self._session, Sample.of(self._node, rate, self._unit()), _engine=_ENGINE)

    def group_by(self, *by: str | pl.Expr | Sequence[str | pl.Expr], keys: Any = None) -> GroupBy:
        """Group by columns, with public keys or with keys chosen by DP partition selection.

        ``by``: column names, or row-level expressions (checked like ``with_columns``): ``pl.col("origin")``,
        ``(pl.col("dep_time") // 100).alias("hour")``.
        ``keys``: the public group keys (recommended), or ``None`` to let DP partition selection choose
        keys from the data (needs a budget with δ > 0). ``keys`` may be a list of values (one column),
        a dict ``{column: values}`` (all combinations), or a ``pl.DataFrame`` with the key columns.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"dep_time": [905, 1410]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.PureDP(1), seed=0)
            >>> q = sess.table("t").group_by((pl.col("dep_time") // 100).alias("hour"), keys=[9, 14]).agg(dp.len())
            >>> q.collect(dp.PureDP(1)).columns
            ['hour', 'len']

        """
        items = [c for b in by for c in (list(b) if isinstance(b, list | tuple) else [b])]
        node, names = derive_keys(self._node, items, self._unit())
        frame = Frame(self._session, node, _engine=_ENGINE)
        cols: list[str] = []
        for c in names:
            if not isinstance(c, str):
                raise PlanError(f"expected column names or expressions, got {c!r} ({type(c).__name__})",
                                argument="by", fix="pass column names, e.g. group_by('city') or group_by(['city', "
                                                   "'year']), or expressions such as pl.col('city')")
            cols.append(plain(c))
        if not cols:
            raise PlanError("group by at least one column", argument="by", fix="e.g. group_by('city')")
        for c in cols:
            if c not in frame.schema:
                raise SchemaError(f"unknown column {c!r}", argument="by", fix=one_of(c, self.columns))
        if len(set(cols)) != len(cols):
            raise PlanError(f"repeated key column in {cols}", argument="by", fix="name each column once")
        return GroupBy(frame, tuple(cols), None if keys is None else _public_keys(keys, cols, frame.schema),
                       _engine=_ENGINE)

    def agg(self, *measures: Measure | Iterable[Measure], **named: Measure) -> Query:
        """Aggregate the whole (filtered) table into one row of private statistics.

        ``agg(n=dp.len())`` releases the measure under the column name ``n`` (like ``.alias("n")``).
        Each measure is validated now, free: its kind must be handled by an installed mechanism, its
        column must exist and have a type the mechanism accepts.

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the cost ``explain()`` shows (its ``protects:`` line): ε-DP for a pure
        budget, ρ-zCDP for a ``dp.ZCDP`` one; automatic bounds spend a stated share of that same cost.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"s": ["a"]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.PureDP(1))
            >>> sess.table("t").agg(dp.sum("s", bounds=(0, 1)))
            Traceback (most recent call last):
            ...
            dpframe.errors.SchemaError: column: sum() needs a numeric column; 's' is String. Fix: ...

        """
        node, measures, named = derive_measures(self._node, measures, named, self._unit())
        source = Source(node, self._session.plan_context)
        return Query(self._session, _family_query(self._session, "frame", "agg", source, measures, named).node,
                     _engine=_ENGINE)

    def bounds(self, column: str, *, domain: Any = None, quantiles: Any = (0.01, 0.99),
               resolution: Any = None) -> Releasable[tuple[Any, Any]]:
        """Private clipping bounds (the low/high quantiles over a wide public ``domain``); costs the budget.

        ``collect(budget)`` returns ``(low, high)``; see ``dpframe_quantiles.bounds`` and ``docs/quantiles.md``.

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: ε-DP exponential mechanisms (ρ-zCDP under a ``dp.ZCDP`` budget, as
        bounded range), the cost ``explain()`` shows.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"n": list(range(100, 300)) * 50})},
            ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), seed=0)
            >>> low, high = sess.table("t").bounds("n", quantiles=(0.05, 0.95)).collect(dp.PureDP(1))
            >>> 90 < low < 130 and 270 < high < 310
            True

        """
        return self.query("bounds", column, domain=domain, quantiles=quantiles, resolution=resolution)

    def interior_point(self, column: str, *, bounds: Any, method: str = "auto", beta: float = 1e-6,
                       resolution: float | None = None) -> Releasable[Any]:
        """A private grid point between min(column) and max(column) w.p. ≥ 1 − β; see ``docs/learning.md``.

        (Precisely: between the grid points nearest them; on an integer column without ``resolution``,
        between min and max.)

        ``method``: ``"auto"`` (fewest rows needed), ``"exponential"``, ``"binary_search"`` or
        ``"treelog"`` (needs δ > 0). ``collect`` returns ``InteriorPoint`` or ``NoAnswer`` (too few rows).

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the cost ``explain()`` shows (ε-DP; (ε, δ)-DP for ``"treelog"``;
        ρ-zCDP under a ``dp.ZCDP`` budget).

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"x": range(500, 900)})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.PureDP(1), seed=0)
            >>> 500 <= sess.table("t").interior_point("x", bounds=(0, 10**6)).collect(dp.PureDP(1)).value < 900
            True

        """
        return self.query("interior_point", column, bounds=bounds, method=method, beta=beta, resolution=resolution)

    def learn_threshold(self, feature: str, *, label: str, bounds: Any, positive: str = "auto",
                        beta: float = 1e-6, xi: float = 0.05, resolution: float | None = None) -> Releasable[Any]:
        """A private threshold classifier of a 0/1 ``label`` on ``feature``; see ``docs/learning.md``.

        ``positive="below"`` predicts 1 iff x < threshold, ``"above"`` iff x ≥ threshold. Guarantee, when
        it answers (else ``NoAnswer``), on data some grid cut separates, with a *fixed* direction: with
        probability ≥ 1 − β the training error is ≤ 2k/n and the population error ≤ ξ once
        n ≥ max(2k/ξ, (8/ξ)·ln(4/β)), k the interior point's row requirement. With ``positive="auto"``
        it holds (w.p. ≥ 1 − 2β) only if each class has ≥ (2Δ/ε_dir)·ln(1/β) rows; ``explain()`` prints
        k, that row count and the bounds. ``collect`` returns ``Threshold`` or ``NoAnswer``.

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the cost ``explain()`` shows (ε-DP, (ε, δ)-DP or ρ-zCDP as the
        budget).

        Example:
            >>> import polars as pl, dpframe as dp
            >>> data = pl.DataFrame({"x": range(2000), "y": [int(v <= 700) for v in range(2000)]})
            >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), seed=0)
            >>> model = sess.table("t").learn_threshold("x", label="y", bounds=(0, 2000)).collect(dp.PureDP(1))
            >>> model.positive, abs(model.threshold - 700) < 300
            ('below', True)

        """
        return self.query("learn_threshold", feature, label=label, bounds=bounds, positive=positive, beta=beta,
                          xi=xi, resolution=resolution)

    def learn_rectangle(self, features: Sequence[str], *, label: str, bounds: Any, beta: float = 1e-6,
                        resolution: Any = None) -> Releasable[Any]:
        """A private axis-aligned box around the rows labelled 1; see ``docs/learning.md``.

        ``bounds={feature: (lower, upper)}``. ``collect`` returns ``Rectangle`` (1 iff lower ≤ x < upper on
        every feature) or ``NoAnswer``.

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the cost ``explain()`` shows (ε-DP, (ε, δ)-DP or ρ-zCDP as the
        budget).

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"a": [5] * 900, "b": [7] * 900, "y": [1] * 900})},
            ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2), seed=0)
            >>> sess.table("t").learn_rectangle(["a", "b"], label="y", bounds={"a": (0, 99), "b": (0, 99)}
            ...                                 ).collect(dp.PureDP(2)).intervals
            {'a': (5, 6), 'b': (7, 8)}

        """
        return self.query("learn_rectangle", features, label=label, bounds=bounds, beta=beta, resolution=resolution)


class GroupBy(ReadOnlyNames):
    """A grouped private frame; finish it with :meth:`agg`."""

    def __init__(self, frame: Frame, by: tuple[str, ...], keys: pl.DataFrame | None, *,
                 _engine: object = None) -> None:
        engine_only(_engine, "GroupBy", "use frame.group_by(...)")
        self._frame, self._by, self._keys = frame, by, keys

    def _source(self) -> Source:
        return Source(self._frame._node, self._frame._session.plan_context, self._by, self._keys)

    def __len__(self) -> int:
        raise _no_attribute(self._frame._session, "GroupBy", "__len__")

    def __iter__(self) -> Any:
        raise _no_attribute(self._frame._session, "GroupBy", "__iter__")

    def __bool__(self) -> bool:
        return True

    def query(self, family: str, /, *args: Any, **kwargs: Any) -> Releasable[Any]:
        """A query of any registered group-by query family by name; ``group_by(...).<family>(...)`` too."""
        session = self._frame._session
        source = self._source()
        return Releasable(session, _family_query(session, "group_by", family, source, args, kwargs),
                          family=family, tables=tables_read(self._frame._node), rate=sampling_rate(self._frame._node),
                          unit=source.unit, _engine=_ENGINE)

    def __getattr__(self, name: str) -> Any:
        if "_frame" not in vars(self):      # an empty copy being built (copy.copy): no frame to ask yet
            raise AttributeError(name)
        if not name.startswith("_") and name in _families(self._frame._session, "group_by"):
            return functools.partial(self.query, name)
        raise _no_attribute(self._frame._session, "GroupBy", name)

    def agg(self, *measures: Measure | Iterable[Measure], **named: Measure) -> Query:
        """Private statistics per group (one row per public key, or per selected private key).

        Measures are validated now, free, as in :meth:`Frame.agg`; ``agg(n=dp.len())`` names a column.

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the cost ``explain()`` shows: ε-DP or ρ-zCDP for public keys; with
        private keys, partition selection makes it (ε, δ)-DP or δ-approximate ρ-zCDP.
        """
        session = self._frame._session
        node, measures, named = derive_measures(self._frame._node, measures, named, self._frame._unit())
        source = Source(node, session.plan_context, self._by, self._keys)
        return Query(session, _family_query(session, "group_by", "agg", source, measures, named).node,
                     _engine=_ENGINE)

    def top_k(self, k: int | None = 10, score: Measure | None = None, method: str = "stable",
              release_scores: bool = False, *, k_max: int | None = None, lam: float | None = None,
              ptr: str = "gaussian", delta_t: float | None = None) -> Releasable[Any]:
        """The private set of the k keys with the largest ``score``; see ``docs/topk.md``.

        ``score``: ``dp.count_units()`` (default), ``dp.len()``, ``dp.count(col)`` or ``dp.sum(col,
        bounds=(lo, hi))``. ``k=None`` chooses k from the data (largest gap, ≤ ``k_max``). ``method``:
        ``"stable"`` (StableTopK), ``"gumbel"``, ``"peeling"``, ``"limited_domain"``, ``"tct"``.
        ``collect`` returns the keys sorted by key (plus noisy scores if ``release_scores``) or a
        ``dp.TopKFailed`` when the stability test does not pass.

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the method's cost ``explain()`` shows (``gumbel``, ``peeling``: ε-DP
        or bounded range; ``stable``, ``limited_domain``, ``tct``: (ε, δ)-DP or δ-approximate ρ-zCDP;
        ``docs/topk.md``).

        Example:
            >>> import polars as pl, dpframe as dp
            >>> data = pl.DataFrame({"user": range(400), "city": ["a"] * 250 + ["b"] * 150})
            >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.ZCDP(1, 1e-8), seed=0)
            >>> sess.table("t").group_by("city").top_k(k=None).collect(dp.ZCDP(1, 1e-8))["city"].to_list()
            ['a', 'b']

        """
        node, (score,), _ = derive_measures(self._frame._node, (score,), {}, self._frame._unit())
        grouped = GroupBy(Frame(self._frame._session, node, _engine=_ENGINE), self._by, self._keys, _engine=_ENGINE)
        return grouped.query("top_k", k=k, score=score, method=method, release_scores=release_scores, k_max=k_max,
                             lam=lam, ptr=ptr, delta_t=delta_t)

    def __repr__(self) -> str:
        return f"<dp.GroupBy {list(self._by)} of {self._frame!r}>"

    def _repr_html_(self) -> str:
        keys = "public keys" if self._keys is not None else "private keys (DP partition selection)"
        return query_html("dp.GroupBy", [n.describe() for n in self._frame._node.lineage()] + [
            f"group by {list(self._by)}: {keys}"], "finish it with .agg(dp.len(), ...) or .top_k(...)")


def _diagnostics_miss_accuracy() -> PlanError:
    """The refusal of ``diagnostics=True`` with an accuracy target (``collect`` and ``cost``)."""
    return PlanError("diagnostics spend 1/10 of the query's budget, so the release would miss the accuracy target",
                     argument="diagnostics",
                     fix="collect(accuracy=...) without diagnostics, or pass the budget cost(accuracy=...) shows, "
                         "plus diagnostics' share, as collect(budget, diagnostics=True)")


def accuracy_target(budget: object, accuracy: object) -> Accuracy:
    """An aggregate's ``accuracy=`` target (given, not None), checked.

    A PlanError when a budget is given too, or when it is not a ``dp.Accuracy``.
    """
    if budget is not None:
        raise PlanError("give a budget or an accuracy target, not both", argument="accuracy",
                        fix="drop the budget: the accuracy target chooses it")
    return check_accuracy(accuracy)


def diagnostics_flag(diagnostics: object) -> bool:
    """``collect``'s ``diagnostics``: True or False (a PlanError otherwise; read once, as a plain bool).

    Example:
        >>> diagnostics_flag(1)
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: diagnostics: expected True or False, got 1...

    """
    if not isinstance(diagnostics, bool):
        raise PlanError(f"expected True or False, got {diagnostics!r}", argument="diagnostics",
                        fix="pass diagnostics=True to release noisy counts of what bounding left out")
    return diagnostics is True


def _public_keys(keys: Any, by: list[str], schema: pl.Schema) -> ReadOnlyKeys:
    fix = "pass keys=[...] (one column), {column: [...]} or a pl.DataFrame with the key columns"
    if isinstance(keys, str | bytes):
        raise SchemaError(f"got the string {keys!r}, not a collection of keys", argument="keys",
                          fix=f"pass keys=[{keys!r}] for a single key")
    if isinstance(keys, dict) and sorted(keys) != sorted(by):
        raise SchemaError(f"keys name the columns {sorted(keys)}, the group-by has {by}", argument="keys", fix=fix)
    try:
        if isinstance(keys, pl.DataFrame):
            frame = plain_frame(keys)      # read once: a subclass's schema or n_unique could say otherwise
        elif isinstance(keys, dict):
            parts = [pl.DataFrame({c: _key_series(c, list(keys[c]), schema[c])}) for c in by]
            frame = parts[0]
            for p in parts[1:]:
                frame = frame.join(p, how="cross")
        elif len(by) == 1:
            frame = pl.DataFrame({by[0]: _key_series(by[0], list(keys), schema[by[0]])})
        else:
            raise TypeError("a plain list of keys needs a single key column")
    except (TypeError, KeyError, OverflowError, UnicodeError, pl.exceptions.PolarsError,
            pl.exceptions.PanicException) as e:
        # (Overflow: an int beyond 128 bits; Unicode: a str UTF-8 cannot encode, a lone surrogate; a panic:
        # Decimal('NaN'), which Polars' constructor cannot read)
        reason = "a value Polars cannot read" if isinstance(e, pl.exceptions.PanicException) else str(e)
        raise SchemaError(f"cannot read keys: {reason}", argument="keys", fix=fix) from None
    if sorted(frame.columns) != sorted(by):
        raise SchemaError(f"keys have columns {frame.columns}, the group-by has {by}", argument="keys", fix=fix)
    for c in by:
        if not _same_kind(frame.schema[c], schema[c]):
            raise SchemaError(f"keys for {c!r} are {frame.schema[c]}, the column is {schema[c]}", argument="keys",
                              fix=f"pass keys of the column's type ({schema[c]}), e.g. "
                                  + ("strings" if _kind(schema[c]) == "string" else "numbers"
                                     if _kind(schema[c]) == "numeric" else f"{schema[c]} values"))
    if all(frame.schema[c] == schema[c] for c in by):    # a cast to the column's own type changes nothing
        frame = frame.select(by)
    else:
        try:
            cast = frame.select([pl.col(c).cast(schema[c]) for c in by])
            lossless = cast.select([pl.col(c).cast(frame.schema[c]) for c in by]).equals(frame.select(by))
        except pl.exceptions.PolarsError as e:
            raise SchemaError(f"keys do not match the key column types: {e}", argument="keys", fix=fix) from e
        if not lossless:
            raise SchemaError(f"keys change value when cast to the key column types {[str(schema[c]) for c in by]}",
                              argument="keys",
                              fix="pass keys of the same type as the column (e.g. ints for an int column)")
        frame = cast
    if frame.height == 0:
        raise SchemaError("no keys given", argument="keys", fix="pass at least one key")
    distinct = frame.to_series().n_unique() if frame.width == 1 else frame.n_unique()   # (cheaper than marking
    if distinct < frame.height:                                                       # each duplicate)
        raise SchemaError("keys contain duplicates", argument="keys", fix="pass each key once")
    return ReadOnlyKeys.owned(frame)     # built or copied (plain_frame) above: the engine's own memory


_INT_BITS = {"Int8": 8, "Int16": 16, "Int32": 32, "Int64": 64, "Int128": 128, "UInt8": 8, "UInt16": 16, "UInt32": 32,
             "UInt64": 64, "UInt128": 128}


def _key_series(name: str, values: list[Any], dtype: pl.DataType) -> pl.Series:
    """One column of public keys, for a key column of type ``dtype``.

    Plain ints (or None) for an integer column are built in the column's own type (their type was guessed from the
    first key: ``[1, 2**128 - 1]`` failed as ``Int64`` for a ``UInt128`` column), after a check that
    each fits it (a SchemaError naming the key otherwise); other keys as Polars reads them (their kind and a lossless
    cast are checked by :func:`_public_keys`). Reads only the analyst's keys.

    Example:
        >>> _key_series("g", [1, 2**128 - 1], pl.UInt128()).dtype
        UInt128
        >>> _key_series("g", [1, 256], pl.UInt8())
        Traceback (most recent call last):
        ...
        dpframe.errors.SchemaError: keys: the key 256 does not fit the column 'g' of type UInt8 (0 to 255)...

    """
    if not dtype.is_integer() or not values or not all(v is None or type(v) is int for v in values):
        return pl.Series(name, values)
    bits = _INT_BITS[dtype.base_type().__name__]
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if dtype.is_signed_integer() else (0, 2**bits - 1)
    for v in values:
        if v is not None and not lo <= v <= hi:
            raise SchemaError(f"the key {v} does not fit the column {name!r} of type {dtype} ({lo} to {hi})",
                              argument="keys", fix=f"pass keys from {lo} to {hi}, or drop the key {v} (no row of "
                                                   f"the column can hold it)")
    return pl.Series(name, values, dtype=dtype)


def _kind(dtype: pl.DataType) -> str:
    """The family of a type for matching public keys: strings, numbers, booleans, or the type's class."""
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum | pl.Categorical):
        return "string"
    if dtype.is_numeric():
        return "numeric"
    return type(dtype).__name__


def _same_kind(keys: pl.DataType, column: pl.DataType) -> bool:
    """Whether public keys of type ``keys`` may stand for values of ``column`` (all-null keys always may).

    Example:
        >>> _same_kind(pl.Int64, pl.String), _same_kind(pl.Int64, pl.Float32), _same_kind(pl.String, pl.Enum(["a"]))
        (False, True, True)

    """
    return keys == pl.Null or _kind(keys) == _kind(column)


class Query(Releasable[pl.DataFrame]):
    """A terminal ``agg`` query: ``explain`` and ``cost`` are free; ``collect`` charges and runs.

    The ``agg`` query family's releasable (see :mod:`dpframe.family`); ``plan(budget)`` gives its
    :class:`~dpframe.planning.PhysicalPlan`.
    """

    def __init__(self, session: Session, node: Aggregate, *, backend: str | None = None,
                 _engine: object = None) -> None:
        engine_only(_engine, type(self).__name__, "use frame.agg(...), frame.group_by(...).agg(...) or sess.sql(...)")
        source = Source(node.input, session.plan_context, node.by, node.keys, backend)
        super().__init__(session, AggregateQuery(source, node), tables=tables_read(node), unit=source.unit,
                         _engine=_engine)
        self._session = session
        self._node = node

    @property
    def node(self) -> Aggregate:
        """The query's plan node (read-only: it was validated, and is planned and run, as built)."""
        return self._node

    def plan(self, budget: object = None) -> PhysicalPlan:
        """The physical plan (mechanisms, shares, cost) for ``budget``. Free.

        A query with ``"auto"`` bounds has no single plan before it runs (its release is planned with the
        bounds it chooses): a PlanError; ``explain(budget)`` and ``cost(budget)`` describe it.
        """
        budget = needs_budget(budget, "plan")
        self._require_plan("plan()")
        detail = self._planned(budget).detail
        assert isinstance(detail, PhysicalPlan)
        return detail

    def _require_plan(self, what: str) -> None:
        """A PlanError (free) if this query chooses bounds when it runs, so ``what`` cannot plan it beforehand.

        The one refusal of every entry point that plans a query before running it (``plan()``, accuracy targets,
        ``run_until``, ``gated_release``, the individual filter): :func:`dpframe.tuning.stage.require_plan`.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"u": [1, 2], "g": [0, 1]})}, budget=dp.PureDP(1),
            ...                   privacy_unit=dp.PrivacyUnit("u", max_rows=2, max_groups="auto"))
            >>> sess.table("t").agg(dp.len())._require_plan("gated_release")     # no group-by: planned as it is
            >>> sess.table("t").group_by("g", keys=[0, 1]).agg(dp.len())._require_plan("gated_release")
            Traceback (most recent call last):
            ...
            dpframe.errors.PlanError: privacy_unit: this query chooses max_groups when it runs, so gated_release ...

        """
        query = self._query
        assert isinstance(query, AggregateQuery)
        require_plan(query.source.unit, self._node, what)

    def _budget(self, budget: object, accuracy: object, method: str) -> tuple[object, str | None]:
        """``budget``, or the smallest budget meeting ``accuracy`` and the line ``explain()`` adds (free)."""
        if accuracy is None:
            if budget is None:
                raise BudgetError(f"{method}() needs this query's privacy budget, or an accuracy target",
                                  argument="budget", fix=f"pass one, e.g. {method}(budget=dp.PureDP(0.5)) (or "
                                  f"dp.ApproxDP(eps, delta), dp.ZCDP(rho)), or {method}(accuracy=dp.Accuracy("
                                  "half_width=5)); explain(budget) shows what it buys and costs nothing")
            return budget, None
        target = accuracy_target(budget, accuracy)
        self._require_plan("an accuracy target")
        notion = target.notion or ("zcdp" if self._session.accountant.total.notion == "zcdp" else "pure")
        query = self._query
        assert isinstance(query, AggregateQuery)

        def widths(b: Budget) -> dict[str, float]:
            out: dict[str, float] = {}
            detail = query.plan(b).detail
            assert isinstance(detail, PhysicalPlan)
            for p in detail.plans:
                out.update(plugin_hook(p.mechanism, "half_widths()", p.half_widths, target.confidence))
            return out

        found, at = smallest_budget(widths, [m.output_name for m in self.node.measures], target, notion)
        return found, accuracy_note(target, found, at)

    def _affordable(self, budget: object, accuracy: object, diagnostics: bool) -> object:
        """The budget ``accuracy`` chooses, refused (uncharged) when the remaining budget cannot pay for it.

        Not with ``diagnostics``: they would take their share of that budget from the release, which would
        then miss the accuracy it was chosen for.
        """
        if diagnostics:
            raise _diagnostics_miss_accuracy()
        chosen = self._budget(budget, accuracy, "collect")[0]
        front, charge = self._front, self._planned(chosen).charge
        accountant, spent = front.accountant, front._release.spent()
        after = accountant.compose([spent, charge])
        if not accountant.fits(after):
            raise accountant.exceeded(charge, spent, after, argument="accuracy",
                                      fix="ask for a wider half_width or a lower confidence (the remaining budget "
                                          "cannot give this accuracy)")
        return chosen

    def cost(self, budget: object = None, *, accuracy: object = None, diagnostics: bool = False) -> SessionCost:
        """The exact charge this query would be charged, in the session's notion. Free.

        ``accuracy=dp.Accuracy(half_width, confidence)`` instead of a budget: the charge of the smallest
        budget whose noise meets it (see :mod:`dpframe.accuracy`). ``diagnostics=True``: the charge of
        ``collect(budget, diagnostics=True)``, which runs in stages (:mod:`dpframe.tuning.stage`): the same
        budget, but in ``rdp``/``pld`` sessions the curves each share guarantees, which may lie above the curves
        of the mechanisms ``cost(budget)`` prices.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"u": [1, 2], "x": [1.0, 2.0]})}, budget=dp.ApproxDP(4, 1e-6),
            ...                   privacy_unit=dp.PrivacyUnit("u", max_rows=1), accountant="rdp")
            >>> q = sess.table("t").agg(s=dp.sum("x", bounds=(0, 2)))
            >>> q.cost(dp.ApproxDP(1, 1e-6)) == q.cost(dp.ApproxDP(1, 1e-6), diagnostics=True)
            False

        """
        if diagnostics_flag(diagnostics) and accuracy is not None:
            raise _diagnostics_miss_accuracy()
        chosen = self._budget(budget, accuracy, "cost")[0]
        charge = super().cost(chosen)   # the query's own refusals first (SQL's partition selection), free
        if not diagnostics:
            return charge
        query = self._query
        assert isinstance(query, AggregateQuery)
        return query.plan(chosen, diagnostics=True).charge

    def explain(self, budget: object = None, format: str = "text", *, accuracy: object = None) -> Any:
        """The plan, the mechanisms, the cost and the accuracy, as text or a JSON-able dict. Free.

        With ``accuracy=`` the plan is at the smallest budget meeting it, and a note says which.
        """
        check_format(format)
        chosen, line = self._budget(budget, accuracy, "explain")
        if line is None:
            return super().explain(chosen, format)
        planned = self._shown(self._planned(chosen))
        shown = self._explained(planned)
        planned = dataclasses.replace(planned, explain=dataclasses.replace(shown, notes=(*shown.notes, line)))
        return render(self._front, planned, format, self._unit)

    @overload
    def collect(self, budget: object = None, *, ci: float | None = None, diagnostics: Literal[False] = False,
                accuracy: object = None) -> pl.DataFrame: ...

    @overload
    def collect(self, budget: object = None, *, ci: float | None = None, diagnostics: Literal[True],
                accuracy: object = None) -> Diagnosed: ...

    def collect(self, budget: object = None, *, ci: float | None = None, diagnostics: bool = False,
                accuracy: object = None) -> pl.DataFrame | Diagnosed:
        """Reserve the cost, run, release the noisy result (rows sorted by key).

        ``ci=0.95`` also releases ``<output>_ci_low`` and ``<output>_ci_high`` for every measure whose
        mechanism gives intervals (the built-in counts, sums, means, variances and standard deviations): a
        noise-only interval holding with probability ≥ ``ci`` — exact for counts and sums, conservative for
        mean, var and std. Post-processing of the same noisy statistics: no extra budget. The intervals do
        not cover contribution-bounding or clipping bias (``explain()`` names those).

        ``diagnostics=True`` spends a stated share of ``budget`` (1/10) on noisy counts of the rows dropped
        by contribution bounding, the values clipped and the groups suppressed by partition selection, and
        returns ``Diagnosed(frame, diagnostics)`` (it unpacks as a pair); it also lists the bounds chosen
        for ``"auto"`` (``docs/bounds.md``).

        ``accuracy=dp.Accuracy(half_width=5, confidence=0.95)`` instead of a budget charges the smallest budget
        whose noise meets it for every targeted measure (``cost``/``explain`` show it first, free), and is
        refused, uncharged, when the remaining budget cannot pay for it.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 100})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.PureDP(1), seed=0)
            >>> out = sess.table("t").agg(dp.len()).collect(dp.PureDP(1), ci=0.9)
            >>> out.columns, out["len_ci_low"][0] <= out["len"][0] <= out["len_ci_high"][0]
            (['len', 'len_ci_low', 'len_ci_high'], True)

        """
        diagnostics = diagnostics_flag(diagnostics)
        budget = (self._affordable(budget, accuracy, diagnostics) if accuracy is not None
                  else self._budget(budget, None, "collect")[0])
        if ci is None and not diagnostics:
            return super().collect(budget)
        query = self._query
        assert isinstance(query, AggregateQuery)
        planned = query.plan(budget, ci=ci, diagnostics=diagnostics)
        if ci is not None:
            self._without_intervals(planned.detail)
        return self._collect(planned)  # type: ignore[no-any-return]

    def _without_intervals(self, detail: object) -> None:
        """Before the charge: warn :class:`dpframe.NoIntervalWarning` naming the outputs ``ci=`` gives no interval.

        A PlanError naming ``ci`` (free) when no output has one: ``ci=`` would add nothing. Public parameters only
        (the plan's mechanisms).
        """
        plans = detail.shown.plans if isinstance(detail, StagedPlan) else detail.plans  # type: ignore[attr-defined]
        shown, has = self._no_intervals(plans)
        if not shown:
            return
        if not has:
            raise PlanError(f"no output of this query has a confidence interval: {'; '.join(no_interval_notes(shown))}",
                            argument="ci", fix="leave ci= out")
        emit(NoIntervalWarning("; ".join(no_interval_notes(shown)), tuple(shown)))

    def _no_intervals(self, plans: Sequence[MechanismPlan]) -> tuple[dict[str, str], bool]:
        """The outputs the result shows without an interval (each with why), and whether any output has one.

        Here the plans' outputs; a SQL query's are its SELECT list's
        (:meth:`dpframe.sql.post.PostProcess.no_intervals`).
        """
        missing = {n: why for p in plans
                   for n, why in plugin_hook(p.mechanism, "no_intervals()", p.no_intervals).items()}
        return missing, any(plugin_hook(p.mechanism, "interval_outputs()", p.interval_outputs) for p in plans)

    def __repr__(self) -> str:
        return f"<dp.Query {self.describe()}>"
