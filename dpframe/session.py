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

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from dpframe.accounting import Ledger
from dpframe.accounting.accountants import Accountant, default_accountant
from dpframe.accounting.binding import LedgerBinding
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP
from dpframe.catalog import TableCatalog, TableSource
from dpframe.errors import ArgumentError, BudgetError
from dpframe.frame import Frame
from dpframe.noise import RandomSource, default_source
from dpframe.plan.nodes import Scan
from dpframe.planning import PlanContext
from dpframe.plugin import PluginHost, plugin_host
from dpframe.privacy_unit import PrivacyUnit
from dpframe.release import ReleaseContext
from dpframe.sealed import _ENGINE, Sealed, plain
from dpframe.sql.catalog import SQLCatalog

if TYPE_CHECKING:
    from dpframe.frame import Query
    from dpframe.interactive.individual import IndividualFilter
    from dpframe.interactive.svt import SparseVector
    from dpframe.interactive.tct import TargetChargingChannel
    from dpframe.sql.topk import SQLTopKQuery

class Session(Sealed):
    """Private tables under one privacy unit and one enforced total budget.

    Args:
        tables: ``{name: table}``; a table is a polars DataFrame/LazyFrame, a pyarrow Table, a pandas
            DataFrame, any object with the Arrow stream interface (``__arrow_c_stream__``), or a path to a
            Parquet/CSV file. In-memory tables are converted once, here.
        privacy_unit: whose privacy is protected (``dp.PrivacyUnit("user_id", max_rows=10)`` or
            ``dp.PrivacyUnit.row()``).
        budget: the total budget: ``dp.PureDP``, ``dp.ApproxDP`` or ``dp.ZCDP``.
        ledger: a file path to keep the spent budget across restarts (SQLite); ``None`` keeps it in memory.
            The file records the total budget, the accountant, the privacy unit and the tables (names and
            schemas); a session that differs in any of them is refused (``LedgerError``).
        backend: execution engine name (``"polars"``, ``"duckdb"`` or ``"spark"``; see ``dpframe plugins``).
        spark: for ``backend="spark"``: the ``SparkSession`` to run on (default: the active one); tables may
            then also be Spark DataFrames or Parquet/Delta paths read by Spark. One whose web UI or event log
            others may read (Spark's defaults: its metrics are exact statistics) is refused. See
            ``docs/scaling.md``.
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
            raise ArgumentError(f"expected dp.PrivacyUnit, got {privacy_unit!r}", argument="privacy_unit",
                               fix="pass dp.PrivacyUnit('user_id', max_rows=...) or dp.PrivacyUnit.row()")
        if not isinstance(budget, PureDP | ApproxDP | ZCDP):
            raise BudgetError(f"expected a dp budget, got {budget!r}", argument="budget",
                              fix="pass dp.PureDP(eps), dp.ApproxDP(eps, delta) or dp.ZCDP(rho)")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ArgumentError(f"expected a non-negative int, got {seed!r}", argument="seed",
                               fix="pass an int ≥ 0 (tests only), or None for private randomness")
        if ledger is not None and not isinstance(ledger, str | os.PathLike):
            raise ArgumentError(f"expected a file path or None, got {type(ledger).__name__}", argument="ledger",
                                fix="pass ledger='budget.db' (or a pathlib.Path) to keep the spent budget, or None")
        self._privacy_unit = privacy_unit
        self._plugins: PluginHost = plugin_host().snapshot()     # fixed for this session's life
        name = default_accountant(budget) if accountant is None else accountant
        self._accountant: Accountant = self.plugins.accountant(name)(budget)
        self._rng: RandomSource = default_source(seed)
        self._catalog = TableCatalog.load(tables, privacy_unit, self._plugins, backend, spark)
        self._sql_catalog = SQLCatalog.build(self._catalog.schemas(), privacy_unit.column,
                                             public_tables=public_tables, public_keys=public_keys, bounds=bounds)
        # The only road to private data and the ledger (private: it reads exact statistics).
        binding = LedgerBinding.of(privacy_unit, self._catalog.schemas())
        self._release = ReleaseContext(privacy_unit, Ledger(ledger, self._accountant, binding), self._rng,
                                       self._catalog)

    def __repr__(self) -> str:
        spent = "closed" if self.closed else f"spent={self.spent()!r}"
        return (f"<dp.Session tables={self.tables()} {self.privacy_unit!r} budget={self.accountant.total!r} "
                f"{spent}{' SEEDED (not private)' if not self.rng.private else ''}>")

    def _repr_html_(self) -> str:
        from dpframe.display import session_html

        return session_html(self)

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
        return PlanContext(self._privacy_unit, self._plugins, self._accountant, self.backend_name)

    @property
    def backend_name(self) -> str:
        """The execution backend's name (the backend itself holds the private tables and stays hidden)."""
        return str(self._catalog.default_backend.name)

    def sql(self, query: str, *, keys: Mapping[str, Any] | None = None,
            backend: str | None = None) -> Query | SQLTopKQuery:
        """A private query written in SQL (DuckDB dialect): the same ``dp.Query`` as the method chain.

        ``keys={"column": [...]}`` gives public keys for GROUP BY columns (e.g. derived ones) in this query;
        ``backend="duckdb"`` runs this query on another backend than the session's. ``EXPLAIN SELECT ...``
        gives a query whose ``collect()`` returns the plan text and charges nothing. See ``docs/sql.md``.

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the cost ``explain()`` shows, as for the method chain it compiles to.

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

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the stream is (ε₁ + ε₂)-DP (ε₁ + k·ε₂/c once refunded, + ε₃ with
        ``release``), or the Gaussian stream's RDP curve; ``sv.status()`` ends with the unit.

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

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups): each unit's own Rényi loss stays ≤ ``budget``. Guarantee: the whole interaction
        is ``budget``-zCDP (Feldman & Zrnic 2021), charged once when the filter opens.
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

        Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them,
        in ≤ ``max_groups`` groups). Guarantee: the channel's reserved (ε′, δ) for its whole adaptive interaction
        (Cohen & Lyu 2023, Thm B.4), or ρ = n·ε²/2 with δ* in a zCDP session; ``ch.status()`` shows both.
        """
        from dpframe.interactive.tct import TargetChargingChannel

        return TargetChargingChannel(self, epsilon, max_hits, delta, min_q=min_q, per_unit=per_unit)

    def tables(self) -> list[str]:
        """Names of the registered tables."""
        return self._catalog.names()

    def table(self, name: str) -> Frame:
        """A lazy private frame over table ``name``."""
        name = plain(name)      # a str subclass could hash as one table for the schema, as another for the backend
        return Frame(self, Scan.of(name, self._catalog.schema(name)), _engine=_ENGINE)

    def spent(self) -> Budget:
        """Everything charged so far (reservations included), in the session's notion.

        For a zCDP session, ``sess.spent().to_approx(delta=1e-6)`` gives the (ε, δ) equivalent. For an
        ``accountant="rdp"``/``"pld"`` session it is the Rényi filter's (ε, δ): what the budget is enforced by.
        For ε at the session δ by *every* valid accountant (basic, zCDP, RDP, PLD), use
        :meth:`spent_report`; ``spent()`` keeps returning the enforcing value as a budget.
        """
        return self.accountant.report(self._release.spent())

    def spent_report(self, delta: float | None = None) -> dict[str, float | None]:
        """ε spent so far at ``delta`` (default: the session δ, or 1e-6) by every accountant.

        ``{"basic": ..., "zcdp": ..., "rdp": ..., "pld": ...}`` and any accountant a plugin registers (by name;
        one that needs a total budget is left out); None where an accountant cannot compose some charge
        (e.g. zCDP and a sampled query). Only the session's own accountant *enforces*; the others compose
        the sequence as it happened (valid for a sequence fixed in advance) and show
        what tighter accounting buys. See ``docs/accounting.md``.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                   budget=dp.ApproxDP(2, 1e-6), seed=0)
            >>> for _ in range(3):
            ...     _ = sess.table("t").agg(dp.len()).collect(budget=dp.PureDP(0.25))
            >>> {k: round(v, 3) for k, v in sess.spent_report().items()}
            {'basic': 0.75, 'zcdp': 2.068, 'rdp': 0.75, 'pld': 0.75}

        """
        from dpframe.accounting.accountants import registered_accountants
        from dpframe.accounting.report import spent_report

        total_delta = float(getattr(self.accountant.total, "delta", 0)) or 1e-6
        return spent_report(self._release.charges(), delta if delta is not None else total_delta,
                            registered_accountants(self.plugins))

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
        return self.accountant.remaining(self._release.spent())

    def history(self) -> pl.DataFrame:
        """One row per charged query: id, status, query, mechanisms, cost (exact text)."""
        rows = self._release.charges()
        return pl.DataFrame({
            "id": [c.id for c in rows], "status": [c.status for c in rows], "query": [c.query for c in rows],
            "mechanisms": [c.mechanisms for c in rows], "cost": [self.accountant.describe_charge(c.cost) for c in rows],
        }, schema={"id": pl.Int64, "status": pl.String, "query": pl.String, "mechanisms": pl.String,
                   "cost": pl.String})

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called: every later query is a LedgerError, nothing charged.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> with dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
            ...                 budget=dp.PureDP(1)) as sess:
            ...     pass
            >>> sess.closed, repr(sess).endswith("closed>")
            (True, True)

        """
        return self._release.closed

    def close(self) -> None:
        """Close the ledger."""
        self._release.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def check_session(value: object, argument: str = "session") -> Session:
    """``value`` when it is a :class:`Session`; otherwise an ArgumentError naming ``argument`` (nothing charged).

    Example:
        >>> check_session(3)
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: session: expected a dp.Session, got int...

    """
    if not isinstance(value, Session):
        raise ArgumentError(f"expected a dp.Session, got {type(value).__name__}", argument=argument,
                            fix="pass a dp.Session (dp.Session(tables, privacy_unit=..., budget=...))")
    return value
