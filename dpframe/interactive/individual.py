"""Per-unit (individual) Rényi filter: every privacy unit has its own budget and pays only its own loss.

Digest ``004_modern_accounting.md`` §3.2–3.3 (thesis ch. 5; Feldman & Zrnic 2021). A query releases
``Σ_u c_u + Z`` where ``c_u`` is unit u's (contribution-bounded) vector of integer statistics over the
released groups and ``Z`` is discrete Gaussian noise with variance parameter σ² per statistic. For a unit
u the *individual* Rényi divergence between the outputs with and without u is at most

    D_α ≤ α · ρ_u,     ρ_u = Σ_statistics ‖c_u‖₂² / (2σ²)        (Lemma 5.2.3; CKS20 Thm. 14 per coordinate)

— linear in α, so one scalar per unit tracks every order. (Per coordinate, for an integer shift c:
α z² + (1 − α)(z − c)² = (z − (1 − α)c)² + α(1 − α)c², so D_α = αc²/(2σ²) + log(Θ((α − 1)c)/Θ(0))/(α − 1) with
Θ(s) = Σ_z e^{−(z − s)²/(2σ²)}, which is largest at integer s: equality exactly when (α − 1)c is an integer, below
otherwise. The filter needs only the upper bound; coordinates' independent noises add their divergences.) The
filter (Alg. 2, Thm. 5.2.4 — fully adaptive composition) keeps ``spent_u``; before each query it computes ρ_u from
u's own rows and public parameters, and u takes part only if ``spent_u + ρ_u ≤ B`` (the prospective check includes
this query's charge); otherwise u is left out of this query and pays nothing. Every unit's total loss then stays
≤ B almost surely, and the whole interaction is (α, α·B)-RDP for every α ≥ 1, i.e. B-zCDP: that is what
the session is charged, once, when the filter is opened (:meth:`dpframe.Session.individual_filter`).
A unit that contributes nothing to a query (filtered out, or only rows outside the public keys) pays 0.

Validity (checked; anything else is refused before charging): a unit's participation and contribution
must depend only on its own rows and public parameters, and σ² must be public:

* ungrouped queries, or groups with **public keys** (``group_by(..., keys=[...])``): private keys need
  partition selection, whose outcome depends on other units (a unit's loss would not be its own);
* measures of the built-in ``aggregates`` mechanism under a ``dp.ZCDP`` budget (discrete Gaussian noise on
  linear statistics: ``len``, ``count``, ``count_units``, ``sum``, ``mean``, ``var``, ``std`` — means and
  variances are post-processing of noisy sums); quantiles, Laplace noise and plugin mechanisms are not
  Gaussian-linear (their RDP is not linear in α, so a scalar filter is unsound);
* no ``.sample(...)`` (amplification is not individual); a privacy-unit column (the per-unit state is
  keyed by it). Filters and row-level columns are per row, hence per unit.

The per-unit state is private: a dict inside the filter, never returned; nothing reports how many units
were left out (dropping units biases answers towards zero — the docs say so, the result does not).

Failures and threads: a query that fails while running — any ``BaseException``, a Rust panic included —
closes the filter for good (what every unit paid stays paid; the session's charge was never refundable)
and is reported by its type only (``KeyboardInterrupt``/``SystemExit`` are re-raised after closing).
Queries from several threads run one at a time: each unit's check "spent + ρ_u ≤ B" and its update are
one step, so no unit ever pays more than B.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": [1, 1, 2, 3], "x": [1.0, 2.0, 3.0, 4.0]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
    ...                   budget=dp.ZCDP(1), seed=3)
    >>> filt = sess.individual_filter(budget=dp.ZCDP(0.5))
    >>> sess.spent()
    ZCDP(rho=1/2)
    >>> out = filt.collect(sess.table("t").agg(dp.len()), budget=dp.ZCDP(0.25))
    >>> out.columns, sess.spent()
    (['len'], ZCDP(rho=1/2))

"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dpframe.budgets import ZCDP, describe
from dpframe.engine_output import numpy_quiet
from dpframe.errors import BudgetConversionError, BudgetError, DPFrameError, PlanError
from dpframe.interactive.stream import _atomic
from dpframe.interactive.unit_keys import check_keyable, unit_keys
from dpframe.mechanism import Noise
from dpframe.release import bare_interrupt
from dpframe.sealed import Sealed

if TYPE_CHECKING:
    from dpframe.frame import Query
    from dpframe.planning import PhysicalPlan
    from dpframe.session import Session

LINEAR_KINDS = frozenset({"rows", "nonnull", "fixed_sum", "units"})
"""Statistic kinds that are sums over rows/units of a value depending on one unit only."""


def individual_losses(rows: Iterable[Sequence[Any]], variances: Sequence[Fraction]) -> dict[Any, Fraction]:
    """ρ_u = Σ c²/(2σ²) per unit, exactly, over rows ``(unit, c_1, …, c_m)`` with the statistics' σ² in ``variances``.

    A unit's rows (one per group it reaches) add up. The terms are put over one common denominator L:
    1/(2σ²_k) = w_k/L with whole w_k, so each row adds the integer Σ c_k²·w_k to its unit's numerator and one
    fraction per unit is formed at the end (the same exact values as summing fractions term by term, about 10×
    faster: an analysis of 20 queries over 6,000 units spent 4 of its 6 s in fraction arithmetic).

    Example:
        >>> individual_losses([(7, 3, 1, 2), (7, -1, 0, 0), (8, 0, 2, 0)], [Fraction(2), Fraction(2), Fraction(8)])
        {7: Fraction(3, 1), 8: Fraction(1, 1)}

    """
    halves = [2 * Fraction(v) for v in variances]
    denominator = math.lcm(*(h.numerator for h in halves))
    weights = [h.denominator * (denominator // h.numerator) for h in halves]
    numerators: dict[Any, int] = {}
    for unit, *contributions in rows:
        numerators[unit] = numerators.get(unit, 0) + sum(int(c) ** 2 * w for c, w in zip(contributions, weights,
                                                                                          strict=True))
    return {u: Fraction(n, denominator) for u, n in numerators.items()}


def _zcdp(budget: object, argument: str) -> ZCDP:
    """The ρ of a zCDP budget, as ``dp.ZCDP(rho)`` (a BudgetError naming ``argument`` for any other budget).

    The filter's Gaussian queries use no δ, so a δ given is neither used nor charged (the rule of ``agg``, which
    charges a ``dp.ZCDP(rho, delta)`` without partition selection its ρ).

    Example:
        >>> _zcdp(ZCDP(Fraction(1, 2), Fraction(1, 10**6)), "budget")
        ZCDP(rho=1/2)

    """
    if not isinstance(budget, ZCDP):
        raise BudgetError(f"expected dp.ZCDP(rho), got {budget!r}", argument=argument,
                          fix="pass dp.ZCDP(0.1): the individual filter uses Gaussian noise (Rényi DP)")
    return ZCDP(budget.rho)


class IndividualFilter(Sealed):
    """A per-unit Rényi filter with budget ρ = B per unit; see the module docstring.

    Open it with :meth:`dpframe.Session.individual_filter`; run queries with :meth:`collect`.
    """

    def __init__(self, session: Session, budget: object) -> None:
        bound = _zcdp(budget, "budget")
        if session.privacy_unit.column is None:
            raise PlanError("the individual filter keeps a budget per privacy unit and needs a unit id column",
                            argument="privacy_unit",
                            fix="open the session with dp.PrivacyUnit('user_id', ...) (add a row id column "
                                "and use max_rows=1 for row-level privacy)")
        session.privacy_unit.require_numbers("an individual filter")
        try:
            charge = session.accountant.charge(bound)
        except BudgetConversionError as e:
            raise BudgetConversionError(f"this session's accountant cannot compose a zCDP filter ({e.message})",
                                        argument="budget",
                                        fix="open the session with a dp.ZCDP budget, or an (ε, δ) budget with "
                                            "accountant='rdp'") from None
        self.session = session
        self.budget = bound
        self._spent: dict[Any, Fraction] = {}       # PRIVATE: per-unit spent ρ; never returned
        self._lock = threading.RLock()              # one query at a time: each unit's check and charge atomically
        self._closed = False
        # its queries come later, so every table's file is checked now (each read then checks its own)
        session._release.release(charge, f"individual Rényi filter (per unit {describe(bound)})", "individual_rdp",
                                 lambda reader: None)

    def __repr__(self) -> str:
        protects = self.session.privacy_unit.protects()
        return (f"<dp.IndividualFilter per-unit budget={self.budget!r}; protects {protects}"
                f"{' closed' if self._closed else ''}>")

    @property
    def closed(self) -> bool:
        """Whether a query failed while running, which closes the filter for good (public)."""
        return self._closed

    def plan(self, query: object, budget: object) -> PhysicalPlan:
        """The ordinary plan of ``query`` at ``budget`` (σ² per statistic), after the validity checks. Free."""
        from dpframe.frame import Query
        from dpframe.planning import sampling_rate

        rho = _zcdp(budget, "budget")
        if rho.rho > self.budget.rho:
            raise BudgetError(f"{rho!r} is more than the per-unit budget {self.budget!r}", argument="budget",
                              fix=f"pass at most {describe(self.budget)}")
        fix = "pass sess.table(...).agg(...) or .group_by(col, keys=[...]).agg(...) of len/count/sum/mean"
        if type(query) is not Query:
            raise PlanError(f"expected an .agg(...) query, got {type(query).__name__}", argument="query", fix=fix)
        if query._session is not self.session:
            raise PlanError("the query belongs to another session", argument="query",
                            fix="build the query from this session's tables")
        node = query.node
        if node.by and node.keys is None:
            raise PlanError("grouping by private keys needs partition selection, whose outcome depends on "
                            "other units: a unit's loss would not be its own", argument="query",
                            fix="pass public keys: group_by(..., keys=[...])")
        if sampling_rate(node.input) != 1:
            raise PlanError("sampled inputs are not supported by the individual filter", argument="query",
                            fix="drop .sample(...)")
        unit = self.session.privacy_unit.column
        assert unit is not None
        check_keyable(node.input.schema[unit], "the individual filter")
        query._require_plan("the individual filter")
        plan = query.plan(rho)
        for p in plan.plans:
            noises: dict[str, Noise] = getattr(p, "noises", None) or {}
            linear = (p.mechanism == "aggregates" and set(noises) == {s.key for s in p.statistics}
                      and all(s.kind in LINEAR_KINDS for s in p.statistics)
                      and all(n.distribution == "discrete_gaussian" for n in noises.values()))
            if not linear:
                names = ", ".join(m.describe() for m in p.measures)
                raise PlanError(f"{names} is not a Gaussian linear query (mechanism {p.mechanism!r}): its "
                                "individual loss is not α·Σc²/(2σ²)", argument="query",
                                fix="use len/count/count_units/sum/mean/var/std of the built-in mechanism")
        return plan

    def cost(self, query: object, budget: object) -> ZCDP:
        """The most one unit can pay for ``query`` (the nominal ρ); most units pay less. Free."""
        return ZCDP(sum((n.cost().rho for p in self.plan(query, budget).plans  # type: ignore[union-attr]
                         for n in p.noises.values()), Fraction(0)))  # type: ignore[attr-defined]

    @_atomic
    def collect(self, query: Query, budget: ZCDP) -> pl.DataFrame:
        """Run ``query`` with the units that can afford their own loss; each pays only ρ_u.

        The session is not charged again (the filter's B was charged when it was opened). A failure
        while running (any ``BaseException``) closes the filter: units stay charged, only the exception's
        type is reported, and no further query runs. A query cut short by ``sess.close()`` raises the closed
        session's LedgerError, as every other entry point does.
        """
        self.session._release.check_readable()          # a closed session reads nothing (nothing charged)
        if self._closed:
            raise DPFrameError("the filter is closed: a query failed while running (everything it was charged "
                               "stays)", argument="filter", fix="open a new one with sess.individual_filter(...)")
        plan = self.plan(query, budget)
        interrupted: KeyboardInterrupt | SystemExit | None = None
        try:
            with numpy_quiet():                     # private work: numpy's warnings would say what the data did
                return self._run(query, plan)
        except (KeyboardInterrupt, SystemExit) as e:    # its traceback holds the run's exact statistics: a new one
            interrupted = bare_interrupt(e)
        except BaseException as e:  # noqa: BLE001 — its message may quote private values: only the type is reported
            failure = type(e).__name__
        self._closed = True
        if interrupted is not None:
            raise interrupted
        self.session._release.check_readable()      # cut short by sess.close(): its LedgerError, as on every path
        raise DPFrameError(f"the query failed while running ({failure}); units stay charged and the filter is "
                           "closed", argument="query", fix="check column types and expressions against Frame.schema")

    def _run(self, query: Query, plan: PhysicalPlan) -> pl.DataFrame:
        sess, node = self.session, query.node
        unit = sess.privacy_unit.column
        assert unit is not None
        stats = plan.statistics()
        sigma2 = {k: n.scale for p in plan.plans for k, n in p.noises.items()}  # type: ignore[attr-defined]
        by = list(node.by)
        # PRIVATE: per (unit, group); a query grouped by the unit column names it once (twice failed every run)
        per = sess._release.reader().statistics(node.input, stats, by=(unit, *(b for b in by if b != unit)))
        if by:
            assert node.keys is not None
            per = per.join(node.keys, on=by, how="semi", nulls_equal=True)   # only released groups
        keys = [s.key for s in stats]
        # Each unit by its key (unit_keys: every NaN id one key, a far date its physical integer), never by the
        # id as a Python value: a NaN id was a new unit at every query, a date past year 9999 failed the query.
        ids = unit_keys(per[unit])
        loss = individual_losses(zip(ids, *(per[k] for k in keys), strict=True), [sigma2[k] for k in keys])
        after = {u: self._spent.get(u, 0) + r for u, r in loss.items() if r}
        active = {u for u, total in after.items() if total <= self.budget.rho}
        for u in active:
            self._spent[u] = after[u]
        kept = per.filter(pl.Series([u in active for u in ids], dtype=pl.Boolean)) if active else per.clear()
        if by:
            assert node.keys is not None
            summed = kept.group_by(by).agg([pl.col(k).sum().cast(pl.Int64) for k in keys])
            totals = (node.keys.join(summed, on=by, how="left", nulls_equal=True)
                      .with_columns([pl.col(k).fill_null(0) for k in keys]).sort(by, nulls_last=False))
        else:
            totals = pl.DataFrame({k: [int(kept[k].sum())] for k in keys}, schema={k: pl.Int64 for k in keys})
        columns: dict[str, Any] = {c: totals[c] for c in by}
        for p in plan.plans:
            released = p.release({s.key: np.asarray(totals[s.key].to_numpy(), dtype=np.int64)
                                  for s in p.statistics}, sess.rng)
            columns.update({name: pl.Series(name, values) for name, values in released.items()})
        return pl.DataFrame(columns)
