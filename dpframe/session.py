"""The session: private tables, the privacy unit, the total budget and the accountant that enforces it.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": [1, 1, 2, 3], "spend": [10.0, 20.0, 5.0, 7.5]})
    >>> sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
    ...                   budget=dp.PureDP(1.0), seed=7)
    >>> out = sess.table("visits").agg(dp.len()).collect(budget=dp.PureDP(0.5))
    >>> out.columns, sess.remaining()
    (['len'], PureDP(epsilon=1/2))

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

from dpframe.accounting import Ledger
from dpframe.accounting.accountants import Accountant, default_accountant
from dpframe.backends.base import StatisticsRequest
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP
from dpframe.errors import BudgetError, DPFrameError, PluginError, SchemaError
from dpframe.frame import Frame
from dpframe.mechanism import LIST_KINDS, Statistic, statistic_values
from dpframe.noise import RandomSource, SeededRandomSource, default_source
from dpframe.plan.nodes import Aggregate, Node, RowNode, Scan
from dpframe.planning import PlanContext
from dpframe.plugin import PluginHost, plugin_host
from dpframe.privacy_unit import PrivacyUnit
from dpframe.sql.catalog import SQLCatalog
from dpframe.tables import load_table

if TYPE_CHECKING:
    from dpframe.frame import Query
    from dpframe.interactive.individual import IndividualFilter
    from dpframe.interactive.svt import SparseVector
    from dpframe.interactive.tct import TargetChargingChannel
    from dpframe.planning import PhysicalPlan
    from dpframe.sql.topk import SQLTopKQuery

T = TypeVar("T")
TableSource: TypeAlias = pl.DataFrame | pl.LazyFrame | pa.Table | str | Path


def _empty_lists(n: int) -> np.ndarray:
    """An object array of ``n`` empty int64 arrays (the all-empty value of a list-valued statistic)."""
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = np.zeros(0, dtype=np.int64)
    return out


def _dry_run(plan: PhysicalPlan) -> None:
    """Run each mechanism's release on all-zero statistics (no data): a broken plugin fails uncharged."""
    for p in ([plan.selection] if plan.selection else []) + plan.plans:
        zeros = {s.key: _empty_lists(1) if s.kind in LIST_KINDS else np.zeros(1, dtype=np.int64)
                 for s in p.statistics}
        try:
            released = p.release(zeros, SeededRandomSource(0))
        except Exception as e:
            raise PluginError(f"mechanism {p.mechanism!r} fails on empty statistics ({type(e).__name__}: {e})",
                              argument="mechanism", fix="this is a plugin bug: report it") from e
        if set(released) != set(p.output_names()):
            raise PluginError(f"mechanism {p.mechanism!r} releases {sorted(released)}, declared "
                              f"{sorted(p.output_names())}", argument="mechanism", fix="this is a plugin bug")


def _register(backend: Any, name: str, frame: pl.LazyFrame, source: object) -> None:
    """Hand a private table to a backend.

    A backend with ``register_source`` also gets the original source (e.g. a Parquet path DuckDB can
    scan itself).
    """
    hook = getattr(backend, "register_source", None)
    if callable(hook):
        hook(name, frame, source)
    else:
        backend.register(name, frame)


class Session:
    """Private tables under one privacy unit and one enforced total budget.

    Args:
        tables: ``{name: table}``; a table is a polars DataFrame/LazyFrame, a pyarrow Table or a path to
            a Parquet/CSV file.
        privacy_unit: whose privacy is protected (``dp.PrivacyUnit("user_id", max_rows=10)`` or
            ``dp.PrivacyUnit.row()``).
        budget: the total budget: ``dp.PureDP``, ``dp.ApproxDP`` or ``dp.ZCDP``.
        ledger: a file path to keep the spent budget across restarts (SQLite); ``None`` keeps it in memory.
        backend: execution engine name (``"polars"``, ``"duckdb"`` or ``"spark"``; see ``dpframe plugins``).
        spark: for ``backend="spark"``: the ``SparkSession`` to run on (default: the active one); tables may
            then also be Spark DataFrames or Parquet/Delta paths read by Spark. See ``docs/scaling.md``.
        accountant: ``"basic"`` (pure/approx budgets) or ``"zcdp"`` (zCDP budgets), the default by budget;
            ``"rdp"`` (Rényi filter) or ``"pld"`` (Rényi filter + PLD reports) for (ε, δ > 0) budgets.
        seed: **tests only** — a deterministic, NOT PRIVATE random source (``explain()`` says so).
        public_tables: for SQL: ``{name: table}`` of *public* lookup tables a query may JOIN with.
        public_keys: for SQL: ``{"table.column": [key, ...]}``, the public GROUP BY keys of a column.
        bounds: for SQL: ``{"table.column": (lower, upper)}``, clipping bounds used when an aggregate
            names the column without ``CLAMP(col, lower, upper)``. See ``docs/sql.md``.

    """

    def __init__(self, tables: Mapping[str, TableSource], *, privacy_unit: PrivacyUnit, budget: Budget,
                 ledger: str | Path | None = None, backend: str = "polars", accountant: str | None = None,
                 seed: int | None = None, public_tables: Mapping[str, Any] | None = None,
                 public_keys: Mapping[str, Any] | None = None, bounds: Mapping[str, Any] | None = None,
                 spark: Any = None) -> None:
        if not isinstance(privacy_unit, PrivacyUnit):
            raise DPFrameError(f"expected dp.PrivacyUnit, got {privacy_unit!r}", argument="privacy_unit",
                               fix="pass dp.PrivacyUnit('user_id', max_rows=...) or dp.PrivacyUnit.row()")
        if not isinstance(budget, PureDP | ApproxDP | ZCDP):
            raise BudgetError(f"expected a dp budget, got {budget!r}", argument="budget",
                              fix="pass dp.PureDP(eps), dp.ApproxDP(eps, delta) or dp.ZCDP(rho)")
        if not isinstance(tables, Mapping) or not tables:
            raise SchemaError("give at least one table", argument="tables", fix="pass {'name': dataframe}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise DPFrameError(f"expected a non-negative int, got {seed!r}", argument="seed",
                               fix="pass an int ≥ 0 (tests only), or None for private randomness")
        self._privacy_unit = privacy_unit
        self._plugins: PluginHost = plugin_host()
        self._accountant: Accountant = self.plugins.accountant(accountant or default_accountant(budget))(budget)
        self._backend = self.plugins.backend(backend)
        if spark is not None:
            if not hasattr(self._backend, "use_spark"):
                raise DPFrameError(f"spark= is for backend='spark', not {backend!r}", argument="spark",
                                   fix="pass backend='spark', or leave spark= out")
            self._backend.use_spark(spark)
        self._rng: RandomSource = default_source(seed)
        self._schemas: dict[str, pl.Schema] = {}
        self._sources: dict[str, tuple[pl.LazyFrame, object]] = {}
        self._backends: dict[str, Any] = {str(self._backend.name): self._backend}
        for name, source in tables.items():
            if not isinstance(name, str) or not name:
                raise SchemaError(f"table names must be strings, got {name!r}", argument="tables",
                                  fix="use {'visits': data}")
            # A backend may read its own sources (Spark DataFrames and paths stay in Spark).
            frame = getattr(self._backend, "load_table", load_table)(name, source)
            self._schemas[name] = self._check_table(name, frame)
            self._sources[name] = (frame, source)
            _register(self._backend, name, frame, source)
        self._sql_catalog = SQLCatalog.build(self._schemas, privacy_unit.column, public_tables=public_tables,
                                             public_keys=public_keys, bounds=bounds)
        self._ledger = Ledger(ledger, self.accountant)

    def _check_table(self, name: str, frame: pl.LazyFrame) -> pl.Schema:
        # Run by the data owner when the session is created, before any analyst query.
        try:
            schema = frame.collect_schema()
            own = getattr(self._backend, "table_is_empty", None)  # counted in place by such a backend
            rows = int(not own(name)) if own is not None else frame.select(pl.len()).collect().item()
        except pl.exceptions.PolarsError as e:
            raise SchemaError(f"cannot read table {name!r}: {str(e).splitlines()[0]}", argument="tables",
                              fix="check the file or frame") from e
        if len(schema) == 0 or rows == 0:
            raise SchemaError(f"table {name!r} is empty", argument="tables", fix="register a table with rows")
        if len(set(schema.names())) != len(schema):
            raise SchemaError(f"table {name!r} has duplicate column names", argument="tables",
                              fix="rename the columns")
        if any("\x00" in c for c in schema.names()):   # Arrow (and so DuckDB) cannot carry such a name
            raise SchemaError(f"table {name!r} has a column name with a NUL character", argument="tables",
                              fix="rename the column")
        unit = self.privacy_unit.column
        if unit is not None and unit not in schema:
            raise SchemaError(f"table {name!r} has no privacy-unit column {unit!r}", argument="privacy_unit",
                              fix=f"use one of {list(schema.names())}")
        return schema

    def __repr__(self) -> str:
        return (f"<dp.Session tables={list(self._schemas)} {self.privacy_unit!r} budget={self.accountant.total!r} "
                f"spent={self.spent()!r}{' SEEDED (not private)' if not self.rng.private else ''}>")

    # Read-only: reassigning any of these would drop contribution bounding, swap the enforcing accountant or
    # make the noise replayable (the guarantee's inputs are fixed when the session is created).
    @property
    def privacy_unit(self) -> PrivacyUnit:
        """Whose privacy is protected (fixed for the session's life)."""
        return self._privacy_unit

    @property
    def accountant(self) -> Accountant:
        """The accountant that enforces the total budget."""
        return self._accountant

    @property
    def rng(self) -> RandomSource:
        """The random source every mechanism draws from (the OS CSPRNG unless ``seed=`` was given)."""
        return self._rng

    @property
    def plugins(self) -> PluginHost:
        """The plugin host the session's mechanisms, accountant and backends came from."""
        return self._plugins

    @property
    def plan_context(self) -> PlanContext:
        """The public facts plans depend on (privacy unit, plugins, accountant); reading it charges nothing."""
        return PlanContext(self._privacy_unit, self._plugins, self._accountant)

    @property
    def backend_name(self) -> str:
        """The execution backend's name (the backend itself holds the private tables and stays hidden)."""
        return str(self._backend.name)

    def _backend_for(self, name: str | None) -> Any:
        """The backend named ``name`` (None: the session's), created on first use with every table."""
        if name is None:
            return self._backend
        if name not in self._backends:
            backend = self.plugins.backend(name)
            for table, (frame, source) in self._sources.items():
                _register(backend, table, frame, source)
            self._backends[name] = backend
        return self._backends[name]

    def sql(self, query: str, *, keys: Mapping[str, Any] | None = None,
            backend: str | None = None) -> Query | SQLTopKQuery:
        """A private query written in SQL (DuckDB dialect): the same ``dp.Query`` as the method chain.

        ``keys={"column": [...]}`` gives public keys for GROUP BY columns (e.g. derived ones) in this query;
        ``backend="duckdb"`` runs this query on another backend than the session's. ``EXPLAIN SELECT ...``
        gives a query whose ``collect()`` returns the plan text and charges nothing. See ``docs/sql.md``.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.PureDP(1), seed=0)
            >>> sess.sql("SELECT COUNT(*) AS n, SUM(CLAMP(x, 0, 5)) AS s FROM t").cost(dp.PureDP(0.5))
            PureDP(epsilon=1/2)

        """
        from dpframe.sql.query import sql_query

        return sql_query(self, query, keys=keys, backend=backend)

    def sparse_vector(self, threshold: float, max_positives: int, budget: Budget, *, release: Budget | None = None,
                      refund: bool | None = None, noise: str = "laplace",
                      max_length: int | None = None) -> SparseVector:
        """A sparse-vector stream: ``sv.test(query) -> bool`` answers "above ``threshold``?".

        For scalar queries, halting after ``max_positives`` "above" answers (or ``max_length`` tests).

        ``noise="laplace"`` (default): ``budget`` (pure ε) is reserved now and, under basic composition, the
        unused positives are refunded on ``sv.close()`` (output DP). ``release=dp.PureDP(ε3)`` also releases
        the positive queries' values on close.

        ``noise="gaussian"`` (``accountant="rdp"``/``"pld"`` sessions; ``budget=dp.ZCDP(rho)``): discrete
        Gaussian threshold noise σ₁ = Δ·√((1+c)/(2ρ)) and query noise σ₂ = 2σ₁; the stream is charged its RDP
        curve (:func:`dpframe.accounting.curves.gaussian_sparse_vector`: αρ plus a length or moment term),
        reserved now (``sv.status()`` shows it). ``max_positives > 1`` needs ``max_length``; with
        ``max_positives=1`` and no ``max_length`` it is the nonnegative-query curve and only counts may be tested.
        No refund, no release. See ``docs/interactive.md``.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"g": [i % 4 for i in range(40)]})},
            ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(8, 1e-6),
            ...                   accountant="rdp", seed=0)
            >>> with sess.sparse_vector(threshold=50, max_positives=2, budget=dp.ZCDP(0.1), noise="gaussian",
            ...                         max_length=4) as sv:
            ...     answers = [sv.test(sess.table("t").filter(pl.col("g") == g).agg(dp.len())) for g in range(4)]
            >>> answers, sv.closed     # four counts of 10, far below 50; closed after max_length tests
            ([False, False, False, False], True)

        """
        from dpframe.interactive.svt import SparseVector

        return SparseVector(self, threshold, max_positives, budget, release=release, refund=refund, noise=noise,
                            max_length=max_length)

    def individual_filter(self, budget: Budget) -> IndividualFilter:
        """A per-unit Rényi filter: each privacy unit gets ``budget`` (ρ) and pays only its own loss.

        Charges the session ``budget`` once, now; ``filt.collect(query, budget=dp.ZCDP(rho))`` then runs
        Gaussian linear queries in which each unit pays Σc²/(2σ²) for its own contribution c, and units that
        cannot afford it are left out. See ``docs/interactive.md`` (conditions and refused queries).
        """
        from dpframe.interactive.individual import IndividualFilter

        return IndividualFilter(self, budget)

    def target_charging(self, epsilon: float, max_hits: int, delta: float, *, min_q: float | None = None,
                        per_unit: bool = False) -> TargetChargingChannel:
        """A target-charging channel: a context manager that reserves on enter.

        Calls of at most ``epsilon`` are free unless their output hits its target; the channel halts at
        ``max_hits`` hits
        (per privacy unit with ``per_unit=True``). The reservation uses the exact binomial tail. See
        ``docs/interactive.md``.
        """
        from dpframe.interactive.tct import TargetChargingChannel

        return TargetChargingChannel(self, epsilon, max_hits, delta, min_q=min_q, per_unit=per_unit)

    def tables(self) -> list[str]:
        """Names of the registered tables."""
        return list(self._schemas)

    def table(self, name: str) -> Frame:
        """A lazy private frame over table ``name``."""
        if name not in self._schemas:
            raise SchemaError(f"unknown table {name!r}", argument="name", fix=f"use one of {self.tables()}")
        return Frame(self, Scan.of(name, self._schemas[name]))

    def spent(self) -> Budget:
        """Everything charged so far (reservations included), in the session's notion.

        For a zCDP session, ``sess.spent().to_approx(delta=1e-6)`` gives the (ε, δ) equivalent. For an
        ``accountant="rdp"``/``"pld"`` session it is the Rényi filter's (ε, δ): what the budget is enforced by.
        For ε at the session δ by *every* valid accountant (basic, zCDP, RDP, PLD), use
        :meth:`spent_report`; ``spent()`` keeps returning the enforcing value as a budget.
        """
        return self.accountant.report(self._ledger.spent())

    def spent_report(self, delta: float | None = None) -> dict[str, float | None]:
        """ε spent so far at ``delta`` (default: the session δ, or 1e-6) by every accountant.

        ``{"basic": ..., "zcdp": ..., "rdp": ..., "pld": ...}``; None where an accountant cannot compose
        some charge (e.g. zCDP and a sampled query). Only the session's own accountant *enforces*; the
        others compose the sequence as it happened (valid for a sequence fixed in advance) and show
        what tighter accounting buys. See ``docs/accounting.md``.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.ApproxDP(2, 1e-6), seed=0)
            >>> for _ in range(3):
            ...     _ = sess.table("t").agg(dp.len()).collect(budget=dp.PureDP(0.25))
            >>> {k: round(v, 3) for k, v in sess.spent_report().items()}
            {'basic': 0.75, 'zcdp': 2.068, 'rdp': 0.754, 'pld': 0.75}

        """
        from dpframe.accounting.report import spent_report

        total_delta = float(getattr(self.accountant.total, "delta", 0)) or 1e-6
        return spent_report(self._ledger.charges(), delta if delta is not None else total_delta)

    def spent_as_approx(self, delta: float | None = None) -> ApproxDP:
        """Everything spent so far as an (ε, δ)-DP guarantee.

        Pure and approximate sessions report it directly; a zCDP session converts ρ with the CKS20
        conversion at ``delta`` (default: the session total's δ, or 1e-6 if that is 0), adding the
        approximate-zCDP δ already spent.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.ZCDP(0.5), seed=0)
            >>> _ = sess.table("t").agg(dp.len()).collect(budget=dp.ZCDP(0.125))
            >>> round(float(sess.spent_as_approx(1e-6).epsilon), 2)
            2.42

        """
        spent = self.spent()
        if isinstance(spent, ZCDP):
            total = self.accountant.total
            d = delta if delta is not None else (getattr(total, "delta", 0) or 1e-6)
            return spent.to_approx(delta=d)
        return spent.to_approx()

    def remaining(self) -> Budget:
        """What is left of the total budget."""
        return self.accountant.remaining(self._ledger.spent())

    def history(self) -> pl.DataFrame:
        """One row per charged query: id, status, query, mechanisms, cost (exact text)."""
        rows = self._ledger.charges()
        return pl.DataFrame({
            "id": [c.id for c in rows], "status": [c.status for c in rows], "query": [c.query for c in rows],
            "mechanisms": [c.mechanisms for c in rows], "cost": [self.accountant.describe_charge(c.cost) for c in rows],
        }, schema={"id": pl.Int64, "status": pl.String, "query": pl.String, "mechanisms": pl.String,
                   "cost": pl.String})

    def _execute(self, query: Query, plan: PhysicalPlan) -> pl.DataFrame:
        mechanisms = ", ".join(p.mechanism for p in ([plan.selection] if plan.selection else []) + plan.plans)
        _dry_run(plan)
        backend = self._backend_for(getattr(query, "backend_name", None))
        return self._charged(plan.session_cost, query.describe(), mechanisms,
                             lambda: self._run(query.node, plan, backend))

    def _charged(self, cost: Budget, what: str, mechanisms: str, run: Callable[[], T],
                 settle: Callable[[T], tuple[Budget, str]] | None = None) -> T:
        """Reserve ``cost`` in the ledger, call ``run()``, and commit; the building block of every release.

        Query types other than ``agg`` (plugins' interior point, top-k, ...) plan and validate first
        (raising, uncharged, on bad input), then call this with their exact session-notion cost. If
        ``run`` raises, the charge stays (marked failed) and a :class:`DPFrameError` naming only the
        exception's type is raised: the engine's message may quote private values. ``settle`` (output-DP
        mechanisms, basic composition only) maps the *released* result to (its cell's cost, cell name):
        ``cost`` is the worst cell, and the ledger lowers the charge to the realised cell
        (:meth:`Ledger.settle`, :mod:`dpframe.interactive.odp`).
        """
        charge = self._ledger.reserve(cost, what, mechanisms)
        result = self._guarded(charge, run)
        if settle is None:
            self._ledger.commit(charge)
        else:
            # A settlement that fails (a plugin's classify bug, an unknown cell) marks the charge failed, in full.
            self._guarded(charge, lambda: self._ledger.settle(charge, *settle(result)))
        return result

    def _guarded(self, charge: int, run: Callable[[], T]) -> T:
        """Call ``run()`` for the reservation ``charge``; on any failure mark it failed (it stays spent).

        Any failure: pyo3's ``PanicException`` (a Rust panic in the engine) derives from ``BaseException``,
        not ``Exception``. ``KeyboardInterrupt`` and ``SystemExit`` are re-raised as they are, after the
        charge is marked failed; everything else becomes a :class:`DPFrameError` naming only its type.
        """
        failure = None
        try:
            result = run()
        except (KeyboardInterrupt, SystemExit):
            self._ledger.fail(charge, "interrupted")
            raise
        except BaseException as e:   # noqa: BLE001 — PanicException too
            failure = type(e).__name__
        if failure is not None:
            # Raised outside the except block so the engine's exception (whose message may quote
            # private values) is neither chained nor kept as __context__: only its type name survives.
            self._ledger.fail(charge, failure)
            raise DPFrameError(f"the query failed while running ({failure}); its cost stays charged",
                               argument="query", fix="check column types and expressions against Frame.schema")
        return result

    def _statistics(self, node: Node, by: tuple[str, ...], keys: pl.DataFrame | None,
                    statistics: tuple[Statistic, ...], backend: Any = None, *, bound: bool = True) -> pl.DataFrame:
        """The exact statistics of the rows of ``node`` per group of ``by``, bounded per privacy unit.

        ``bound=False`` skips ``max_groups`` / ``max_rows`` bounding (see :class:`StatisticsRequest`): only for
        statistics whose sensitivity does not depend on it (top-k's distinct units per key).
        Private: never return them to a user. Only call this inside :meth:`_charged`.
        """
        stats: pl.DataFrame = (backend or self._backend).statistics(self._request(node, by, keys, statistics, bound))
        return stats

    def _request(self, node: Node, by: tuple[str, ...], keys: pl.DataFrame | None,
                 statistics: tuple[Statistic, ...], bound: bool = True) -> StatisticsRequest:
        """A backend request for ``statistics`` of ``node``'s rows, with a fresh engine seed."""
        lineage = node.lineage()
        scan = lineage[0]
        assert isinstance(scan, Scan)
        rows = tuple(n for n in lineage if isinstance(n, RowNode))
        return StatisticsRequest(scan.table, rows, self.privacy_unit, by, keys, statistics,
                                 self.rng.seed_for_engine(), contribution_bounding=bound)

    def _run(self, node: Aggregate, plan: PhysicalPlan, backend: Any = None) -> pl.DataFrame:
        backend = backend or self._backend
        request = self._request(node.input, node.by, node.keys, plan.statistics())
        stats = backend.statistics(request)
        keep: pl.Series | None = None

        def values(stat: Statistic) -> Any:
            if not stat.near:
                return statistic_values(stats[stat.key])
            return statistic_values(stats[stat.key], lambda: _whole_codes(backend, request, stat, keep))
        if plan.selection is not None:     # partition selection reads its own statistics, before any filter
            inputs = {s.key: values(s) for s in plan.selection.statistics}
            keep = pl.Series(np.asarray(plan.selection.release(inputs, self.rng)["__keep"], dtype=bool))
            stats = stats.filter(keep)
        columns: dict[str, Any] = {c: stats[c] for c in node.by}
        for p in plan.plans:
            released = p.release({s.key: values(s) for s in p.statistics}, self.rng)
            if set(released) != set(p.output_names()) or set(released) & set(columns):
                raise RuntimeError(f"mechanism {p.mechanism} released unexpected columns")  # plugin bug
            columns.update({name: pl.Series(name, values) for name, values in released.items()})
        return pl.DataFrame(columns) if node.by else pl.DataFrame({k: v for k, v in columns.items()})

    def close(self) -> None:
        """Close the ledger."""
        self._ledger.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _whole_codes(backend: Any, request: StatisticsRequest, stat: Statistic, keep: pl.Series | None) -> Any:
    """Every group's full sorted codes for a partial ``sorted`` statistic: the same request run again.

    Same seed, same row plan and the same statistics (only ``near`` dropped, so the same columns are
    hashed for contribution bounding): the same bounded rows, hence the same groups; the partial-key
    selection ``keep`` is applied again. See :mod:`dpframe.mechanism.sorted_codes`.
    """
    whole = tuple(dict.fromkeys(s.whole() if s == stat else s for s in request.statistics))
    stats = backend.statistics(dataclasses.replace(request, statistics=whole))
    if keep is not None:
        stats = stats.filter(keep)
    return statistic_values(stats[stat.whole().key])
