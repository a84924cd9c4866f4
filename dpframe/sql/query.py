"""``sess.sql(text)``: a :class:`dp.Query` built from SQL, plus its post-processing and EXPLAIN.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": [1, 2, 3], "city": ["a", "b", "a"], "spend": [5.0, 7.0, 9.0]})
    >>> sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(2),
    ...                   public_keys={"visits.city": ["a", "b"]}, seed=0)
    >>> q = sess.sql("SELECT city, COUNT(*) AS n, AVG(CLAMP(spend, 0, 10)) AS avg FROM visits GROUP BY city")
    >>> isinstance(q, dp.Query), q.cost(dp.PureDP(1))
    (True, PureDP(epsilon=1))
    >>> q.collect(dp.PureDP(1)).columns
    ['city', 'n', 'avg']

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import duckdb
import polars as pl

from dpframe.aggregate import confidence
from dpframe.backends.base import unsupported
from dpframe.errors import BudgetError, DPFrameError, PlanError
from dpframe.family import FamilyPlan, check_format, needs_budget
from dpframe.frame import Query, diagnostics_flag
from dpframe.plan.nodes import Aggregate, Node, RowNode
from dpframe.planning import budget_of
from dpframe.planning.passes import plugin_hook
from dpframe.sealed import _ENGINE, plain
from dpframe.sql.compile import Compiler
from dpframe.sql.parse import parse
from dpframe.sql.post import INTERVAL_ENDS, PostProcess
from dpframe.sql.topk import SQLTopKQuery, top_k_call, top_k_query
from dpframe.tuning.diagnostics import Diagnosed
from dpframe.tuning.stage import StagedPlan

if TYPE_CHECKING:
    from dpframe.mechanism import MechanismPlan
    from dpframe.session import Session


def refusal(backend: Any, node: Node) -> str | None:
    """The first row node of ``node``'s lineage that ``backend`` cannot run, with the reason (None: all run)."""
    for n in node.lineage():
        if isinstance(n, RowNode):
            reason = unsupported(backend, n)
            if reason is not None:
                text = n.describe()
                return text if reason in text else f"{text}: {reason}"
    return None


class SQLQuery(Query):
    """A query written in SQL: the same plan, cost and accountant path as the method chain.

    ``collect()`` additionally applies the post-processing (output expressions, HAVING, ORDER BY,
    LIMIT) to the released values; for an ``EXPLAIN SELECT ...`` it charges nothing and returns the plan
    text in a one-row frame (column ``explain``).
    """

    def __init__(self, session: Session, node: Aggregate, *, text: str, post: PostProcess, explain_only: bool,
                 backend: str | None, notes: Sequence[str], _engine: object = None) -> None:
        super().__init__(session, node, backend=backend, _engine=_engine)
        self.text = text
        self.post = post
        self.explain_only = explain_only
        self.backend_name = backend
        self._notes = tuple(notes)

    @property
    def notes(self) -> tuple[str, ...]:
        """What the SQL lowering noted for ``explain()`` (e.g. a GROUP BY left to partition selection)."""
        return self._notes

    def _backend(self) -> Any:
        return self._session._catalog.backend(self.backend_name)

    def _refusal(self) -> str | None:
        return refusal(self._backend(), self.node)

    def _planned(self, budget: object) -> FamilyPlan[pl.DataFrame]:
        budget = budget_of(budget)
        if self.node.grouped and self.node.keys is None and getattr(budget, "delta", 0) == 0:
            # the fix names what this session can take, as the method chain's (require_delta_for_private_keys)
            total = self._session.accountant.total
            keys = "declare the keys: dp.Session(..., public_keys={'table.column': [...]}) or sess.sql(..., keys={...})"
            if getattr(total, "delta", 0) == 0:
                where, fix = "and this session's total budget has δ = 0", keys
            else:
                example = "dp.ZCDP(rho, delta=1e-7)" if total.notion == "zcdp" else "dp.ApproxDP(epsilon, delta=1e-7)"
                where, fix = "and the query budget has δ = 0", f"{keys}; or give the query a δ: {example}"
            raise BudgetError(f"GROUP BY {', '.join(self.node.by)} has no public keys, so DP partition selection "
                              f"must choose them, which needs δ > 0, {where}", argument="budget", fix=fix)
        return super()._planned(budget)

    def explain(self, budget: object = None, format: str = "text", *, accuracy: object = None) -> Any:
        check_format(format)
        refusal = self._refusal()
        backend = str(self._backend().name)
        lines = [f"sql: {' '.join(self.text.split())}", f"backend: {backend}"]
        if self.post.describe():
            lines.append(f"post-processing (free, on released values only): {self.post.describe()}")
        lines += [f"note: {n}" for n in self.notes]
        if refusal:
            lines.append(f"REFUSED on this backend: {refusal}; run it with backend='duckdb'")
        out = super().explain(budget, accuracy=accuracy).extended(lines, {
            "backend": backend, "sql": self.text, "post_processing": self.post.describe(),
            "sql_notes": list(self.notes), "refused": refusal})
        return out.to_dict() if format == "json" else out

    @overload
    def collect(self, budget: object = None, *, ci: float | None = None, diagnostics: Literal[False] = False,
                accuracy: object = None) -> pl.DataFrame: ...

    @overload
    def collect(self, budget: object = None, *, ci: float | None = None, diagnostics: Literal[True],
                accuracy: object = None) -> Diagnosed: ...

    def collect(self, budget: object = None, *, ci: float | None = None, diagnostics: bool = False,
                accuracy: object = None) -> pl.DataFrame | Diagnosed:
        """Charge and run, then apply the SQL's post-processing to the released values.

        ``ci`` (see :meth:`dpframe.Query.collect`) adds ``<name>_ci_low`` / ``<name>_ci_high`` for every
        selected column that is a measure itself (not for expressions over measures: a ``dp.NoIntervalWarning``
        names them, before the charge; a query with no interval at all is a PlanError, free). ``diagnostics=True``
        (see :meth:`dpframe.Query.collect`) returns ``Diagnosed(frame, diagnostics)``; ``accuracy`` (see
        there too) chooses the budget.
        """
        if self.explain_only:
            return pl.DataFrame({"explain": [str(self.explain(budget, accuracy=accuracy))]})
        diagnostics = diagnostics_flag(diagnostics)
        budget = (self._affordable(budget, accuracy, diagnostics) if accuracy is not None
                  else needs_budget(budget, "collect"))
        plan = self._planned(budget)                # bad budgets raise first, uncharged
        if ci is not None:
            confidence(ci)
            self._check_interval_names(plan)
        refusal = self._refusal()
        if refusal is not None:
            raise PlanError(f"backend {self._backend().name!r} cannot run {refusal}", argument="backend",
                            fix="run it on DuckDB: sess.sql(..., backend='duckdb') or "
                                "dp.Session(..., backend='duckdb'); nothing was charged")
        if diagnostics:
            result = super().collect(budget, ci=ci, diagnostics=True)
            return Diagnosed(self._post(result.frame, ci), result.diagnostics)
        if ci is None:
            return self._post(self._collect(plan), None)         # the plan just made (planning is ~1 ms)
        return self._post(super().collect(budget, ci=ci), ci)

    def _check_interval_names(self, plan: FamilyPlan[pl.DataFrame]) -> None:
        """A PlanError naming ``ci`` (nothing charged) when an output's interval column takes another output's name.

        ``_post`` adds ``<name>_ci_low`` / ``<name>_ci_high`` beside the selected columns: a key or measure
        selected under that name (``SELECT g AS n_ci_low, COUNT(*) AS n``) would be replaced by the interval.
        """
        detail = plan.detail
        plans = detail.shown.plans if isinstance(detail, StagedPlan) else detail.plans
        with_intervals = {name for p in plans
                          for name in plugin_hook(p.mechanism, "interval_outputs()", p.interval_outputs)}
        outputs = set(self.post.names)
        for name, src in self.post.columns:
            taken = [f"{name}_{end}" for end in INTERVAL_ENDS if f"{name}_{end}" in outputs]
            if src in with_intervals and taken:
                raise PlanError(f"two output columns are named {taken[0]!r} (the interval of {name!r} and a selected "
                                "column)", argument="ci",
                                fix="give the selected column another alias, or leave ci= out")

    def _no_intervals(self, plans: Sequence[MechanismPlan]) -> tuple[dict[str, str], bool]:
        """The selected columns without an interval: measures without one, and expressions over measures."""
        return self.post.no_intervals(
            {n: why for p in plans for n, why in plugin_hook(p.mechanism, "no_intervals()", p.no_intervals).items()},
            {name for p in plans for name in plugin_hook(p.mechanism, "interval_outputs()", p.interval_outputs)})

    def _post(self, released: pl.DataFrame, ci: float | None) -> pl.DataFrame:
        try:
            return self.post.apply(released, intervals=ci is not None)
        except Exception as e:
            error = DPFrameError(f"post-processing of the released values failed ({str(e).splitlines()[0]}); the "
                                 "query was charged; the released values are in this error's .released",
                                 argument="sql", fix="check the output expressions")
            error.released = released  # type: ignore[attr-defined]
            raise error from None

    def describe(self) -> str:
        return "SQL: " + " ".join(self.text.split())

    def __repr__(self) -> str:
        return f"<dp.Query {self.describe()}>"


def check_keys(keys: object) -> None:
    """``sess.sql``'s ``keys=``: None or a mapping of column names to values (a PlanError otherwise)."""
    if keys is not None and not isinstance(keys, Mapping):
        raise PlanError(f"expected a dict, got {type(keys).__name__}", argument="keys",
                        fix="pass keys={'column': [value, ...]}")


def sql_query(session: Session, text: str, *, keys: Mapping[str, Any] | None = None,
              backend: str | None = None) -> SQLQuery | SQLTopKQuery:
    """Parse, check and lower ``text`` for ``session`` (free: reads no private data)."""
    # plain strings: the backend name is checked now and looked up again when the query runs, and the
    # text's parse is cached by its hash (a str subclass could answer either differently each time)
    text, backend = plain(text), plain(backend)
    if backend is not None:
        session._catalog.backend(backend)  # validates the name
    check_keys(keys)
    try:        # the parse, the checks and the lowering recurse over the tree (in Python and in DuckDB's JSON writer)
        parsed = parse(text)
        call = top_k_call(parsed)
        if call is not None:
            return top_k_query(session, parsed, call, keys, backend)
        compiled = Compiler(session._sql_catalog, parsed, keys).compile()
    except (RecursionError, duckdb.SerializationException):
        raise PlanError("the query is nested too deep to check (a long chain of operators nests its tree)",
                        argument="sql", fix="split it into several queries, pass a long IN list as keys= or a "
                                            "public table, or sum fewer terms in one expression") from None
    return SQLQuery(session, compiled.node, text=parsed.text, post=compiled.post, explain_only=parsed.explain,
                    backend=backend, notes=compiled.notes, _engine=_ENGINE)
