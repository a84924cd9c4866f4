"""Iterative releases that may stop early, charged by their stopping time (output DP, Lemma 11).

Digest 002 §2.3 (Alg. 3). Steps are agg queries run in order; ``stop(results so far)`` reads only
released results and is consulted at public stopping points k_1 < … < k_m (default: after every
step). The output-DP spec is "stopped at k_j → ε_j", δ = Σ_j δ_j (Lemma 11, δ_j = δ/m), with ε_j from
an **inner** composition theorem applied to the first k_j steps (:mod:`dpframe.interactive.composition`):

* ``budget=dp.PureDP(ε)`` (Laplace steps), no ``delta``: ε_j = k_j·ε, δ = 0 — the same as separate
  ledger rounds (the digest's "practical reading"); kept for a single reservation up front;
* ``budget=dp.PureDP(ε)`` with ``delta``: ε_j = the exact optimal composition of k_j ε-DP steps at δ_j
  (Kairouz–Oh–Viswanath; e.g. 20 steps of 0.1 at δ_j = 10⁻⁶: 1.79, not 2.0);
* ``budget=dp.ZCDP(ρ)`` (discrete Gaussian steps) with ``delta``: ρ adds up inside the run and
  ε_j = the CKS20 conversion of k_j·ρ at δ_j — grows like √k_j (30 steps of ρ = 0.005, δ = 10⁻⁶, a
  stopping point after every step: ε_30 = 3.04, where 30 separate rounds at (ε, δ/30) cost 15.0).

The worst cell (ε_m, δ) is reserved before the first step, so the run is never cut short by the budget,
and on stopping the session is settled to ε_j under **basic composition** (Thm 7; δ is never
refunded). Other accountants are refused unless ``refund=False``: then (ε_m, δ) is charged, except in a zCDP
session, which is charged the steps' composed ρ — n steps of ``dp.ZCDP(ρ)`` (or ``dp.PureDP(ε)``, ρ = ε²/2) cost
n·ρ whatever the stopping time, no ``delta`` (zCDP composes additively under adaptive composition, Bun & Steinke
2016 Lemma 2.3, and ``stop`` reads released results only: the run is an adaptive composition of at most n steps).
Thm 15's tighter δ_OPT is available as :func:`~dpframe.interactive.composition.optimal_stopping_delta`
to validate specs; the cells here come from Lemma 11.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": list(range(100))})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> steps = [sess.table("t").filter(pl.col("x") < b).agg(dp.len()) for b in (10, 50, 90)]
    >>> out = run_until(steps, dp.PureDP(0.25), stop=lambda results: results[-1]["len"][0] > 30)
    >>> len(out), sess.spent()
    (2, PureDP(epsilon=1/2))
    >>> stopping_cells(30, dp.ZCDP(0.005), delta=1e-6, stops=[10, 20, 30])   # doctest: +ELLIPSIS
    {'10': Fraction(...), '20': Fraction(...), '30': Fraction(...)}

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import polars as pl

from dpframe.accounting.accountants import ZCDPAccountant, round_up
from dpframe.backends.base import check_kinds
from dpframe.budgets import ZCDP, Budget, down, exact, make, up
from dpframe.errors import ArgumentError, BudgetError, PlanError
from dpframe.frame import Query
from dpframe.interactive.composition import optimal_epsilon
from dpframe.interactive.odp import OdpSpec, declared_tables, resolve_refund, run_ex_post
from dpframe.interactive.svt import pure_epsilon
from dpframe.plan.nodes import tables_read
from dpframe.signatures import checked


def _step_budget(budget: object, delta: Fraction) -> Budget:
    if isinstance(budget, ZCDP):
        if budget.delta != 0:
            raise BudgetError(f"expected dp.ZCDP(rho) with δ = 0 per step, got {budget!r}", argument="budget",
                              fix="pass dp.ZCDP(0.01) and the run's δ as delta=")
        if delta == 0:
            raise BudgetError("zCDP steps need delta > 0 to convert each stopping point's ρ to (ε, δ_j)",
                              argument="delta", fix="pass delta=1e-6")
        return budget
    return make("pure", pure_epsilon(budget))


def _composed_step(budget: object, delta: Fraction) -> Budget:
    """A step's budget in a zCDP session that composes the steps' ρ: ``dp.ZCDP(ρ)`` or ``dp.PureDP(ε)``, no δ."""
    if delta != 0:
        raise BudgetError("a zCDP session composes the steps' ρ (no δ to spend): delta= is for the (ε, δ) cells of "
                          "a basic session", argument="delta", fix="leave delta out")
    return _step_budget(budget, Fraction(1))    # a step's own checks; no δ needed to convert a cell


def _stops(stops: object, n: int) -> list[int]:
    if stops is None:
        return list(range(1, n + 1))
    if isinstance(stops, str) or not isinstance(stops, Sequence) or not all(
            isinstance(k, int) and not isinstance(k, bool) for k in stops):
        raise ArgumentError(f"expected a list of step counts, got {stops!r}", argument="stops",
                            fix="pass stops=[5, 10]")
    points = sorted({int.__index__(k) for k in stops} | {n})   # plain: cells are keyed by str(k)
    if points[0] < 1 or points[-1] > n:
        raise ArgumentError(f"stopping points must be in 1..{n}, got {sorted(set(stops))}", argument="stops",
                           fix=f"pass step counts between 1 and {n}")
    return points


def stopping_cells(n: int, budget: object, *, delta: object = 0, stops: object = None) -> dict[str, Fraction]:
    """The cells "stopped after k_j steps" → ε_j of ``n`` steps at ``budget`` each (public inputs only).

    Lemma 11 with δ_j = delta/m; see the module docstring for the inner composition used.
    """
    d = exact(delta, "delta", allow_zero=True)  # type: ignore[arg-type]   # read once, as a plain number
    step = _step_budget(budget, d)
    points = _stops(stops, n)
    if d >= 1:
        raise BudgetError(f"must be < 1, got {delta}", argument="delta", fix="pass delta=1e-6")
    d_j = d / len(points)
    cells: dict[str, Fraction] = {}
    for k in points:
        if isinstance(step, ZCDP):
            cells[str(k)] = ZCDP(k * step.rho).to_approx(d_j).epsilon
        else:
            eps = step.epsilon   # type: ignore[union-attr]
            basic = k * eps
            # ε rounded up, δ_j down (float(·) is to nearest: float(1/3) < 1/3 would compose a smaller step)
            cells[str(k)] = basic if d == 0 else min(basic, round_up(optimal_epsilon(k, up(eps), down(d_j))))
    return cells


def step_list(steps: object) -> tuple[Any, ...]:
    """``run_until``'s steps read once, as a tuple: an ``ArgumentError`` unless a non-empty sequence (not text)."""
    if isinstance(steps, str) or not isinstance(steps, Sequence):
        raise ArgumentError("expected a non-empty list of queries", argument="steps", fix="pass [query1, ...]")
    out = tuple(steps)
    if not out:
        raise ArgumentError("expected a non-empty list of queries", argument="steps", fix="pass [query1, ...]")
    return out


@checked
def run_until(steps: Sequence[Query], budget: object, stop: Callable[[list[pl.DataFrame]], bool], *,
              delta: object = 0, stops: object = None, refund: bool | None = None) -> list[pl.DataFrame]:
    """Collect ``steps`` in order at ``budget`` each until ``stop(results so far)`` is true at a stopping point.

    ``stop`` receives released values only: a new list of the results of the steps run so far, each a DP
    release covered by the reserved cell (changing the list changes nothing), and every one of them is
    returned. Returns the released results;
    charged the cell of their number (see the module docstring: ``budget`` is ``dp.PureDP(ε)`` or
    ``dp.ZCDP(ρ)``, ``delta`` the spec's δ). ``stop`` runs while the run's reservation is open: a query
    it runs (or another thread's) forfeits the refund, and an exception it raises fails the run (the
    worst cell stays charged).

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups). Guarantee: (ε_m, δ)-DP reserved (Lemma 11 cells), settled to ε_j at the stopping point
    under basic composition; n·ρ-zCDP in a zCDP session.
    """
    # a snapshot, read once and checked: ``stop`` (or another thread) replacing an item, or a sequence whose
    # ``__iter__`` gives other queries on a later read, would run a query that was never checked here
    listed: tuple[Query, ...] = step_list(steps)      # their types are checked below
    steps = listed
    if not all(type(s) is Query for s in steps) or len({id(s._session) for s in steps}) != 1:
        raise PlanError("every step must be an agg query of one session", argument="steps",
                        fix="build the steps from one session's tables")
    if not callable(stop):
        raise ArgumentError("must be a function of the released results", argument="stop",
                            fix="pass stop=lambda r: ...")
    session = steps[0]._session
    for s in steps:     # planned here, before it runs: a step that chooses its bounds when it runs has no plan yet
        s._require_plan("run_until")
    # δ read once: a float subclass's ``== 0`` could say "not 0" to the cells (priced with a δ) and "0" to the spec
    d = exact(delta, "delta", allow_zero=True)  # type: ignore[arg-type]
    what = f"run_until({len(steps)} steps)"
    settle = resolve_refund(session, refund, what)      # a refund outside a basic session: refused first
    # a zCDP session that refunds nothing composes the steps' ρ (adaptively: any stopping time), no cells
    composed = not settle and session.accountant.total.notion == "zcdp"
    if composed:
        step = _composed_step(budget, d)
        points = set(_stops(stops, len(steps)))
    else:
        cells = stopping_cells(len(steps), budget, delta=d, stops=stops)
        points = {int(k) for k in cells}
        step = _step_budget(budget, Fraction(1))
    from dpframe.aggregate import dry_run, run_aggregate
    from dpframe.planning import plan_query

    inner = ZCDPAccountant(ZCDP(len(steps) * step.rho)) if isinstance(step, ZCDP) else None
    # validate every step, nothing charged
    plans = [plan_query(session.plan_context, s.node, step, inner) for s in steps]
    for p in plans:
        dry_run(p)
        check_kinds(session._release.catalog.backend(), p.kinds())

    def run() -> list[pl.DataFrame]:
        results: list[pl.DataFrame] = []
        for query, plan in zip(steps, plans, strict=True):
            results.append(run_aggregate(session._release.reader(), query.node, plan, session.rng))
            if len(results) in points and len(results) < len(steps) and stop(list(results)):   # a copy: the
                break                                       # rule cannot change the count the cell is read from
        return results

    read = frozenset().union(*(tables_read(s.node) for s in steps))
    if composed:
        # each step is ρ_i-zCDP and stop reads released results only: an adaptive composition of at most n steps,
        # Σ ρ_i-zCDP whatever the stopping time (zCDP composes additively under adaptivity); the worst case is charged
        rho = session.accountant.charge(step).rho  # type: ignore[union-attr]
        worst = session.accountant.charge(ZCDP(len(steps) * rho))
        return session._release.release(worst, what, "early stopping (zCDP composition)", lambda reader: run(),
                                        tables=declared_tables(session, read))
    spec = OdpSpec(cells, d, lambda results: str(len(results)))
    return run_ex_post(session, spec, what, "early stopping (output DP, Lemma 11)", run, refund=settle, tables=read)
