"""Propose-test-release with output-DP charging; a generalized-PTR median adapting to local sensitivity.

**Block** (:func:`propose_test_release`, digest 002 §2.2 / 004 §4.2): a DP ``test`` (ε_test) and a
``release`` that is ε_rel-DP on the data the test lets through (failure probability ≤ δ). Its output-DP
spec is {⊥: ε_test, value: ε_test + ε_rel}, δ: the worst case is reserved, and under basic composition
a ⊥ costs only the test (δ is always charged). :func:`gated_release` is the same block with a noisy
threshold test (release only if a DP quality/size check passes).

**Generalized PTR median** (:class:`RobustMedian`, thesis Alg. 7 / Thm 6.4.3 with proposal selection by
AboveThreshold, §4.1 footnote). Values are clamped to public bounds and coded on a grid 0..M. Proposals
β_1 < β_2 < … (grid steps, halving from M) are candidate local sensitivities. For the sorted codes x
(padded with 0 below and M above), c = ⌈n/2⌉ and m = max_rows,

    A(d) = x_(c+d+m) − x_(c−d−m),     D̂_β = min{d ≥ 0 : A(d) > β}.

Adding/removing one unit moves every order statistic by ≤ m ranks, so the median of any dataset at
distance d lies in the window of radius d·m… and D̂_β lower-bounds the distance (in rows) to a dataset
whose local sensitivity exceeds β; D̂_β has sensitivity m. An AboveThreshold stream (c = 1, budget
ε_test) asks "D̂_β ≥ t?" for β ascending; the first "yes" picks β, and the median is released with
discrete Laplace noise of scale β/ε_rel — small when the data are dense around the median, whatever
the bounds. A wrong pick needs D̂_β = 0 yet a "yes": probability ≤ J·(P[ν ≥ ⌈t/2⌉] + P[−ρ ≥ ⌈t/2⌉]) ≤ δ,
t chosen exactly from the discrete Laplace tails. So the query is (ε_test + ε_rel, δ)-DP, ⊥ (no
proposal passed) costs ε_test only.

The test is the general AboveThreshold (threshold noise scale 2m/ε_test, query noise 4m/ε_test). Lyu, Su & Li
(2017) halve the query noise for *monotone* queries only, and the D̂_β are not: with m = 1, codes 0…16 and
β = 1, 2, 4, 8, D = {6, 7, 7} has D̂ = (1, 1, 1, 1) and D + {0} has (0, 0, 0, 2). On that pair the halved
noise loses 1.23 > ε_test = 1 (exact output law; ``tests/adversarial/test_review36c.py``).

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"x": [50.0 + (i % 7) for i in range(4000)]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(2, 1e-6), seed=4)
    >>> q = robust_median(sess.table("t"), "x", bounds=(0, 1000))
    >>> q.cost(dp.ApproxDP(1, 1e-7))
    ApproxDP(epsilon=1, delta=1e-07)
    >>> 48 <= q.collect(dp.ApproxDP(1, 1e-7)) <= 56
    True

"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dpframe.accounting.checks import shown
from dpframe.backends.base import check_kinds
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP, exact, exact_log
from dpframe.domains import MAX_FLOAT_WIDTH, MIN_GRID_EXP, floor_log2
from dpframe.errors import ArgumentError, BoundsError, BudgetConversionError, BudgetError, SchemaError
from dpframe.family import Explain, check_format, needs_budget, render_explain
from dpframe.interactive.odp import OdpSpec, check_ex_post, check_refund, declared_tables, resolve_refund, run_ex_post
from dpframe.interactive.scalar import public_number, scalar
from dpframe.interactive.svt import pure_epsilon
from dpframe.measures import within_float64
from dpframe.mechanism import Statistic
from dpframe.noise import MAX_LAPLACE_SCALE, discrete_laplace, discrete_laplace_log_tail
from dpframe.plan.nodes import tables_read
from dpframe.planning.passes import budget_of
from dpframe.sealed import Sealed
from dpframe.signatures import checked

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.frame import Frame, Query
    from dpframe.session import Session

T = TypeVar("T")
GRID_BITS = 16


def propose_test_release(session: Session, test: Callable[[], bool], release: Callable[[], T], *,
                         test_epsilon: Fraction, release_epsilon: Fraction, delta: Fraction = Fraction(0),
                         what: str = "propose-test-release", mechanisms: str = "PTR",
                         refund: bool | None = None, tables: Collection[str] | None = None) -> T | None:
    """Run ``test`` (ε_test-DP); if it passes, ``release`` (ε_rel-DP on data the test lets through, δ).

    Returns None (⊥) when the test fails; charged ε_test (+ δ) then, ε_test + ε_rel otherwise (basic
    composition). Sessions with another accountant are refused (nothing charged) unless
    ``refund=False``: then the worst case ε_test + ε_rel is charged whatever the answer.

    ``test`` and ``release`` receive no values: they are the mechanism's own computation (a mechanism
    author's code, trusted like a plugin), run inside the charged reservation. Analyst code there can
    reach data only through ordinary charged queries — and any other charge while the block runs
    forfeits its refund (:func:`~dpframe.interactive.odp.run_ex_post`). ``tables``: the names of the
    session's tables ``test`` and ``release`` read, whose files are checked before charging; None (the
    default): every table's file (see :func:`~dpframe.interactive.odp.run_ex_post`).

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups). Guarantee: (ε_test + ε_rel, δ)-DP, settled to ε_test on ⊥ (output DP, basic composition;
    δ always charged).
    """
    check_ex_post(session, what, mechanisms)
    eps_test, eps_rel = exact(test_epsilon, "test_epsilon"), exact(release_epsilon, "release_epsilon", allow_zero=True)
    delta_value = exact(delta, "delta", allow_zero=True)
    if delta_value >= 1:
        raise BudgetError(f"δ must be < 1, got {shown(delta)}", argument="delta", fix="pass a δ such as 1e-7")
    for name, fn in (("test", test), ("release", release)):
        if not callable(fn):
            raise ArgumentError(f"must be a callable, got {type(fn).__name__}", argument=name,
                               fix=f"pass {name}=lambda: ... (it runs inside the charged reservation)")
    spec = OdpSpec({"⊥": eps_test, "value": eps_test + eps_rel}, delta_value,
                   lambda y: "⊥" if y is None else "value")
    settle = resolve_refund(session, refund, what)
    return run_ex_post(session, spec, what, mechanisms, lambda: release() if test() else None, refund=settle,
                       tables=tables)


@checked
def gated_release(query: Query, budget: Budget, gate: Query, threshold: object, gate_budget: Budget, *,
                  refund: bool | None = None) -> Any:
    """``query.collect(budget)`` only if the noisy scalar ``gate`` ≥ ``threshold``, else None.

    The gate is a ``gate_budget`` test; a None is charged the test only (basic composition; other
    sessions need ``refund=False`` and pay both budgets: a zCDP session their composed ρ, ε_gate²/2 + ε²/2).
    Both budgets are pure ε.

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups). Guarantee: (ε_gate + ε_query, δ) as :func:`propose_test_release`, settled to the gate's
    cost when it fails.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 50})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(2), seed=0)
        >>> t = sess.table("t")
        >>> gated_release(t.agg(dp.mean("x", bounds=(0, 5))), dp.PureDP(1), t.agg(dp.len()), 1000, dp.PureDP(0.25))
        >>> sess.spent()
        PureDP(epsilon=1/4)

    """
    from dpframe.frame import Query

    for name, value in (("query", query), ("gate", gate)):
        if type(value) is not Query:     # a SQL query has its own backend and post-processing: not run here
            raise ArgumentError(f"must be a query built with .agg(...), got {type(value).__name__}", argument=name,
                               fix=f"pass {name}=sess.table(...).agg(dp.len()) (a method chain, not sess.sql)")
    if gate._session is not query._session:
        raise ArgumentError("the gate and the query belong to different sessions", argument="gate",
                           fix="build both from the same dp.Session")
    session = query._session
    refund = check_refund(refund)
    eps_rel, eps_gate = pure_epsilon(budget), pure_epsilon(gate_budget, "gate_budget")
    sc = scalar(session, gate, eps_gate, argument="gate")
    bar = sc.threshold_units(public_number(threshold, "threshold"))
    query._require_plan("gated_release")
    plan = query.plan(budget)
    from dpframe.aggregate import dry_run, run_aggregate

    dry_run(plan)
    check_kinds(session._release.catalog.backend(), plan.kinds())
    what = f"gated({query.describe()} if {gate.describe()} ≥ {threshold})"
    read = tables_read(gate.node) | tables_read(query.node)

    def gate_open() -> bool:
        return bool(sc._noisy(session, sc.noise_scale, session.rng) >= bar)

    def release() -> Any:
        return run_aggregate(session._release.reader(), query.node, plan, session.rng)

    if refund is False and session.accountant.total.notion == "zcdp":
        # two pure mechanisms in sequence (the gate's Laplace count, then the query, which is ε_rel-DP whatever the
        # gate said): zCDP composes them additively, ε_gate²/2 + ε_rel²/2, below the cell (ε_gate + ε_rel)²/2
        rho = Fraction(0)
        for eps in (eps_gate, eps_rel):
            rho += session.accountant.charge(PureDP(eps)).rho  # type: ignore[union-attr]
        return session._release.release(session.accountant.charge(ZCDP(rho)), what, "gated release (zCDP composition)",
                                        lambda reader: release() if gate_open() else None,
                                        tables=declared_tables(session, read))
    return propose_test_release(session, gate_open, release, test_epsilon=eps_gate, release_epsilon=eps_rel,
                                what=what, mechanisms="gated release", refund=refund, tables=read)


def instability_distance(codes: np.ndarray, top: int, m: int, beta: int) -> int:
    """D̂_β: the first d with x_(c+d+m) − x_(c−d−m) > β (codes sorted, padded with 0 and ``top``)."""
    n = len(codes)
    c = (n + 1) // 2
    d = np.arange(0, n + 2)
    hi_idx, lo_idx = c + d + m, c - d - m           # 1-based ranks
    hi = np.where(hi_idx > n, top, codes[np.clip(hi_idx - 1, 0, max(n - 1, 0))] if n else top)
    lo = np.where(lo_idx < 1, 0, codes[np.clip(lo_idx - 1, 0, max(n - 1, 0))] if n else 0)
    over = np.nonzero(hi - lo > beta)[0]
    return int(over[0]) if len(over) else n + 2


class RobustMedian(Sealed):
    """The generalized-PTR median query (``explain``/``cost``/``collect``)."""

    def __init__(self, frame: Frame, column: str, bounds: tuple[float, float]) -> None:
        from dpframe.frame import Frame

        if type(frame) is not Frame:
            raise ArgumentError(f"expected a private frame, got {type(frame).__name__}", argument="frame",
                                fix="pass sess.table(name) (after its filters and derived columns)")
        self._session = frame._session
        self._node = frame._node
        if not isinstance(column, str):
            raise SchemaError(f"expected a column name, got {type(column).__name__}", argument="column",
                              fix=f"pass one of {list(self._node.schema.names())} as a string")
        dtype = self._node.schema.get(column)
        if dtype is None or not (dtype.is_float() or dtype.is_integer()):   # a Decimal was coded truncated
            raise SchemaError(f"{column!r} is not an integer or float column", argument="column",
                              fix=f"use one of {list(self._node.schema.names())}, or cast a decimal column: "
                                  "pl.col(...).cast(pl.Float64)")
        if not isinstance(bounds, tuple | list) or len(bounds) != 2:
            raise BoundsError("expected (lower, upper)", argument="bounds", fix="pass bounds=(0, 1000)")
        lo, hi = (public_number(b, "bounds") for b in bounds)
        if not lo < hi:
            raise BoundsError(f"lower {lo} must be < upper {hi}", argument="bounds", fix="swap them")
        if not dtype.is_float():
            # whole-number values: clamping to the whole numbers inside the bounds is clamping to the bounds, and
            # the backends code whole-number columns from whole-number ends (a fractional end was truncated)
            lo, hi = Fraction(math.ceil(lo)), Fraction(math.floor(hi))
            if not lo < hi:
                raise BoundsError(f"the bounds {tuple(bounds)!r} of the whole-number column {column!r} hold fewer "
                                  "than two whole numbers", argument="bounds", fix="pass wider bounds, e.g. (0, 1000)")
        width_exp = -floor_log2(1 / Fraction(hi - lo))          # ⌈log₂(upper − lower)⌉, exact
        if width_exp - GRID_BITS < MIN_GRID_EXP or hi - lo >= MAX_FLOAT_WIDTH:
            raise BoundsError(f"upper − lower ≈ 2^{width_exp} is outside the supported [2^-984, 2^1000) "
                              "(the grid's codes are computed in float64)", argument="bounds",
                              fix="rescale the column to a moderate range, e.g. with .with_columns(pl.col(c) * 1e6)")
        self.column, self.lo, self.hi = column, lo, hi
        self.grid_exp = width_exp - GRID_BITS
        self.top = int((hi - lo) // Fraction(2) ** self.grid_exp)
        self.m = self._session.privacy_unit.max_rows
        self.proposals = tuple(sorted({max(1, self.top >> j) for j in range(1, GRID_BITS + 2)}))

    def _split(self, budget: Budget) -> tuple[Fraction, Fraction, Fraction]:
        accountant = self._session.accountant
        accountant.charge(budget_of(budget))   # a budget of a notion the session cannot hold: refused
        total = accountant.total
        if total.notion != "approx":           # no budget converts to an (ε, δ > 0) one there
            raise BudgetConversionError(
                f"the robust median (propose-test-release) is (ε, δ)-DP with δ > 0, which a "
                f"{'pure' if total.notion == 'pure' else 'zCDP'} session cannot charge (got {budget!r})",
                argument="budget", fix="open the session with an (ε, δ) total budget, e.g. dp.ApproxDP(2, 1e-6)")
        if not isinstance(budget, ApproxDP) or budget.delta == 0:
            raise BudgetError(f"PTR needs an (ε, δ) budget with δ > 0, got {budget!r}", argument="budget",
                              fix="pass dp.ApproxDP(1, 1e-7)" if total.delta else  # type: ignore[union-attr]
                              "open the session with a total budget that has a δ, e.g. dp.ApproxDP(2, 1e-6)")
        eps_test, eps_rel = budget.epsilon / 2, budget.epsilon / 2
        # the test's noise ν (scale 4m/ε_test) and the widest release (β ≤ the largest proposal) must be drawable
        if max(4 * self.m / eps_test, self.proposals[-1] / eps_rel) > MAX_LAPLACE_SCALE:
            raise BudgetError(f"ε = {float(budget.epsilon):.3g} is so small that the robust median's noise scale "
                              "exceeds what the exact sampler supports", argument="budget",
                              fix="give the query a larger budget")
        return eps_test, eps_rel, budget.delta

    def threshold(self, eps_test: Fraction, delta: Fraction) -> tuple[int, Fraction, Fraction]:
        """(t, ρ scale, ν scale): the smallest t with J·(P[ν ≥ ⌈t/2⌉] + P[−ρ ≥ ⌈t/2⌉]) ≤ δ (public values only)."""
        # only calibrated with, never stored: any exact δ
        eps_test = within_float64(exact(eps_test, "eps_test", stored=False), "ε", "eps_test", "pass the test's ε")
        delta = exact(delta, "delta", stored=False)
        if delta >= 1:
            raise BudgetError(f"δ must be < 1, got {shown(delta)}", argument="delta", fix="pass a δ such as 1e-7")
        rho_scale, nu_scale = self.m / (eps_test / 2), 2 * self.m / (eps_test / 2)
        j = len(self.proposals)

        log_delta = exact_log(delta)        # in logs: a δ below the float range, and tails that would underflow
        # the float logs err by ulps of their size (|log δ| reaches 10⁸ at δ = 2^-10⁸): a margin relative to it
        margin = 1e-9 + 1e-12 * abs(log_delta)

        def covers(half: int) -> bool:      # the union bound at ⌈t/2⌉ = half; it only falls as half grows
            tails = np.logaddexp(discrete_laplace_log_tail(nu_scale, half), discrete_laplace_log_tail(rho_scale, half))
            return math.log(j) + float(tails) + margin <= log_delta
        lo, hi = 0, 1                       # covers(hi), not covers(lo) (half = 0 never does: its tails are ≥ 1/2)
        while not covers(hi):
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if covers(mid) else (mid, hi)
        return 2 * hi - 1, rho_scale, nu_scale    # ⌈t/2⌉ = hi; ν − ρ ≥ t needs ν ≥ hi or −ρ ≥ hi

    def cost(self, budget: Budget | None = None) -> SessionCost:
        """The worst-case cost (reserved): the whole budget; a ⊥ is settled to ε_test + δ."""
        eps_test, eps_rel, delta = self._split(needs_budget(budget, "cost"))  # type: ignore[arg-type]
        return self._session.accountant.charge(ApproxDP(eps_test + eps_rel, delta))

    def explain(self, budget: Budget | None = None, format: str = "text") -> Any:
        """Free: the proposals, the test threshold and the costs, with the budget block of every ``explain()``.

        An :class:`~dpframe.display.Explanation` (``print(e)`` is the text), or its ``to_dict()`` for
        ``format="json"``.
        """
        check_format(format)
        eps_test, eps_rel, delta = self._split(needs_budget(budget, "explain"))  # type: ignore[arg-type]
        t, _, _ = self.threshold(eps_test, delta)
        unit = float(Fraction(2) ** self.grid_exp)
        cost = ApproxDP(eps_test + eps_rel, delta)
        e = Explain(f"robust median of {self.column} in [{self.lo}, {self.hi}] (grid {unit:g})", lines=(
            f"  privacy unit: {self._session.privacy_unit.describe()}",
            f"  generalized PTR: AboveThreshold over {len(self.proposals)} proposed local sensitivities "
            f"{[b * unit for b in self.proposals[:4]]}…, test 'distance to instability ≥ {t} rows' "
            f"(ε={float(eps_test):g})",
            f"  release: median + discrete Laplace(β/{float(eps_rel):g}) of the first proposal that passes; "
            "⊥ if none",
            f"  cost: ε={float(eps_test + eps_rel):g}, δ={float(delta):g}; a ⊥ is charged ε={float(eps_test):g}, "
            f"δ={float(delta):g} (output DP)"),
            data={"column": self.column, "bounds": [float(self.lo), float(self.hi)], "grid": unit,
                  "proposals": [b * unit for b in self.proposals], "test_threshold_rows": t,
                  "epsilon_test": float(eps_test), "epsilon_release": float(eps_rel), "delta": float(delta)})
        return render_explain(self._session, e, budget, cost, self._session.accountant.charge(cost),  # type: ignore[arg-type]
                              format)

    def collect(self, budget: Budget | None = None, *, refund: bool | None = None) -> float | None:
        """The noisy median, or None (⊥) when no proposal passed the test (``refund``: see propose_test_release)."""
        eps_test, eps_rel, delta = self._split(needs_budget(budget, "collect"))  # type: ignore[arg-type]
        t, rho_scale, nu_scale = self.threshold(eps_test, delta)
        stat = Statistic("sorted", self.column, self.lo, self.hi, self.lo, 1, self.grid_exp)
        session, rng = self._session, self._session.rng
        chosen: list[int] = []
        read: list[np.ndarray] = []   # PRIVATE: this call's codes, shared by its test and release only

        def test() -> bool:
            stats = session._release.reader().statistics(self._node, (stat,))
            # ≤ top: float rounding of (upper − lower) can code a value at the upper bound as top + 1, above the
            # padding the distance to instability assumes (its sensitivity bound needs the padding on top)
            codes = np.minimum(np.asarray(stats[stat.key][0], dtype=np.int64), self.top)
            read.append(codes)
            rho = int(discrete_laplace(rho_scale, 1, rng)[0])
            for beta in self.proposals:
                d = min(instability_distance(codes, self.top, self.m, beta), 10**12)
                if d + int(discrete_laplace(nu_scale, 1, rng)[0]) >= t + rho:
                    chosen.append(beta)
                    return True
            return False

        def release() -> float:
            codes = read[0]
            median = int(codes[(len(codes) + 1) // 2 - 1]) if len(codes) else 0
            noisy = min(max(median + int(discrete_laplace(Fraction(chosen[0]) / eps_rel, 1, rng)[0]), 0), self.top)
            return float(self.lo + noisy * Fraction(2) ** self.grid_exp)

        try:
            return propose_test_release(session, test, release, test_epsilon=eps_test, release_epsilon=eps_rel,
                                        delta=delta, what=f"robust_median({self.column})",
                                        mechanisms="generalized PTR (AboveThreshold + discrete Laplace)",
                                        refund=refund, tables=tables_read(self._node))
        finally:
            read.clear()                # never keep private values around


@checked
def robust_median(frame: Frame, column: str, bounds: tuple[float, float]) -> RobustMedian:
    """A median whose noise adapts to the data's local sensitivity (generalized PTR), see module doc.

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups). Guarantee: (ε_test + ε_rel, δ)-DP (generalized PTR), ε_test on ⊥.
    """
    return RobustMedian(frame, column, bounds)


__all__ = ["RobustMedian", "gated_release", "propose_test_release", "robust_median"]
