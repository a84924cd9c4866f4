"""``frame.group_by(key).top_k(...)``: the lazy private top-k query (explain / cost / collect).

Validation and the exact cost happen before anything runs (bad input raises, nothing charged); the
cost is the whole query budget in the session's notion, reserved with ``Session._charged``. The exact
per-key scores come from ``Session._statistics`` (keys from the data, or the public ``keys=`` of the
group-by) and never leave :meth:`TopKQuery.collect`'s ``run``. See ``docs/topk.md``.

Example:
    >>> import polars as pl, dpframe as dp
    >>> rows = [(u, c) for u in range(300) for c in ["a", "b", "c"][: 1 + (u % 3 != 0) + (u % 3 == 2)]]
    >>> data = pl.DataFrame(rows, schema=["user", "city"], orient="row")
    >>> sess = dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=3),
    ...                   budget=dp.ApproxDP(4, 1e-6), seed=3)
    >>> q = sess.table("v").group_by("city").top_k(k=2)
    >>> q.cost(dp.ApproxDP(2, 1e-7))
    ApproxDP(epsilon=2, delta=1e-07)
    >>> q.collect(dp.ApproxDP(2, 1e-7))["city"].to_list()
    ['a', 'b']

"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dpframe.budgets import ZCDP, Budget, PureDP, describe, make
from dpframe.errors import BoundsError, BudgetError, PlanError
from dpframe.measures import Measure
from dpframe.mechanism import Statistic
from dpframe.mechanism.noise import Noise
from dpframe.planner import check_budget
from dpframe_topk import calibrate as cal
from dpframe_topk import select

if TYPE_CHECKING:
    from dpframe.plan.nodes import Node
    from dpframe.session import Session

METHODS = ("stable", "gumbel", "peeling", "limited_domain", "tct")
SCORE_SHARE = Fraction(1, 4)          # of the first budget coordinate, when release_scores=True
_SUM_BITS = 16                         # sum scores live on a grid with |one row| ≤ 2^16 grid units


@dataclass(frozen=True)
class TopKFailed:
    """The typed "failed" outcome: the PTR test did not pass, so no key set is released.

    It is *not* an empty result: the data may well have a top-k, but its k-th and (k+1)-th scores were
    not separated enough to release the set exactly at this budget. ``k`` is the (released) size that
    was tested. The cost stays charged (the failure itself is a private, accounted outcome).
    """

    k: int
    method: str
    reason: str = "the PTR stability test did not pass (gap at k too small for this budget)"

    def __bool__(self) -> bool:
        return False


def gap_sensitivity(key_sensitivity: Fraction, monotone: bool, substitution: bool = False) -> Fraction:
    """How far one unit can move every sorted gap (digest §0, §6 P1).

    Scores move together within an interval: [0, Δ] (add/remove, non-negative contributions) has
    width Δ; signed contributions ([−Δ, Δ]) or substitution of a unit's whole vector double it.
    """
    return key_sensitivity if monotone and not substitution else 2 * key_sensitivity


@dataclass(frozen=True)
class Score:
    """What is ranked: one exact integer statistic per key and its public sensitivities."""

    measure: Measure
    statistic: Statistic
    key_sensitivity: Fraction     # max |change| of one key's score (statistic units)
    gap: Fraction                 # gap sensitivity g
    unit: Fraction                # one statistic unit in score units (2^grid for sums)


def score_of(measure: object, session: Session, schema: pl.Schema) -> Score:
    """Validate ``score`` and derive its statistic and sensitivities from public facts only."""
    fix = "use score=dp.count_units(), dp.len(), dp.count(col) or dp.sum(col, bounds=(0, B))"
    if not isinstance(measure, Measure):
        raise PlanError(f"{measure!r} is not a dp measure", argument="score", fix=fix)
    unit = session.privacy_unit
    rows = Fraction(1 if unit.is_row else unit.max_rows)
    if measure.column is not None and measure.column not in schema:
        raise PlanError(f"unknown column {measure.column!r}", argument="score", fix=f"use one of {schema.names()}")
    if measure.kind == "count_units":
        return Score(measure, Statistic("units"), Fraction(1), Fraction(1), Fraction(1))
    if measure.kind == "len":
        return Score(measure, Statistic("rows"), rows, rows, Fraction(1))
    if measure.kind == "count":
        return Score(measure, Statistic("nonnull", measure.column), rows, rows, Fraction(1))
    if measure.kind == "sum":
        assert measure.bounds is not None and measure.column is not None
        if not schema[measure.column].is_numeric():
            raise PlanError(f"column {measure.column!r} is not numeric", argument="score", fix=fix)
        lo, hi = measure.bounds
        top = max(abs(lo), abs(hi))
        grid = math.floor(math.log2(top)) - _SUM_BITS
        stat = Statistic("fixed_sum", measure.column, lo, hi, grid_exp=grid)
        key = rows * stat.row_bound()
        return Score(measure, stat, key, gap_sensitivity(key, lo >= 0), Fraction(2) ** grid)
    raise PlanError(f"{measure.describe()} is not a score top-k can rank: it needs a per-key total with "
                    "bounded per-unit contributions (a count or a bounded sum)", argument="score", fix=fix)


@dataclass
class TopKPlan:
    """Everything :meth:`TopKQuery.collect` will do, computed from public information."""

    method: str
    budget: Budget                      # the query budget, in the session's notion (what is charged)
    mode: str                           # "zcdp" (ρ composes) or "pure" (ε composes) or "tct"
    selection_first: Fraction           # ρ or ε given to the selection
    delta_t: Fraction = Fraction(0)     # PTR failure probability (stable)
    delta_ld: Fraction = Fraction(0)    # limited-domain ⊥ failure probability
    stable: cal.StablePlan | None = None
    step_epsilon: Fraction | None = None
    tct: cal.TCTPlan | None = None
    score_noise_first: Fraction = Fraction(0)
    notes: list[str] = field(default_factory=list)


class TopKQuery:
    """A private top-k selection over the keys of a group-by (see :meth:`dpframe.GroupBy.top_k`)."""

    def __init__(self, session: Session, node: Node, by: tuple[str, ...], keys: pl.DataFrame | None, *,
                 k: int | None, score: Measure, method: str, release_scores: bool, k_max: int | None,
                 lam: float | Fraction | None, ptr: str, delta_t: float | Fraction | None,
                 backend: str | None = None) -> None:
        self._session, self._node, self._by, self._keys = session, node, by, keys
        self._backend = backend     # a backend name other than the session's (sess.sql(..., backend=))
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise PlanError(f"must be a whole number ≥ 1 or None, got {k!r}", argument="k",
                            fix="pass k=10, or k=None to choose k from the data")
        if method not in METHODS:
            raise PlanError(f"unknown method {method!r}", argument="method", fix=f"use one of {list(METHODS)}")
        if ptr not in ("gaussian", "laplace"):
            raise PlanError(f"unknown PTR noise {ptr!r}", argument="ptr", fix="use 'gaussian' or 'laplace'")
        if k is None and method != "stable":
            raise PlanError(f"method {method!r} needs a fixed k", argument="k",
                            fix="pass k=..., or use method='stable' for a data-chosen k")
        self.score = score_of(score, session, node.schema)
        m = None if keys is None else keys.height
        if k is not None and m is not None and k > m:
            raise PlanError(f"k={k} is larger than the {m} public keys", argument="k", fix=f"pass k ≤ {m}")
        if method in ("gumbel", "peeling", "tct") and keys is None:
            raise PlanError(f"method {method!r} samples among all candidate keys, so it needs a public key "
                            "domain (keys present in the data would leak which keys exist)", argument="keys",
                            fix="pass group_by(..., keys=[...]), or use method='stable' or 'limited_domain'")
        if k_max is not None and (isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < (k or 1)):
            raise PlanError(f"must be a whole number ≥ {k or 1}, got {k_max!r}", argument="k_max",
                            fix="pass the largest k you would accept (public)")
        default_max = 100 if k is None else 2 * k
        k_max = k_max if k_max is not None else (default_max if m is None else min(default_max, m))
        if m is not None:
            k_max = min(k_max, m)
        self.k, self.k_max, self.method, self.ptr = k, k_max, method, ptr
        self.release_scores = bool(release_scores)
        self.lam = self.score.gap if lam is None else _fraction(lam, "lam")
        self.delta_t = None if delta_t is None else _fraction(delta_t, "delta_t")
        if self.delta_t is not None and not 0 < self.delta_t < 1:
            raise BudgetError(f"must be in (0, 1), got {delta_t}", argument="delta_t", fix="pass e.g. 1e-9")

    # -- planning (free) ------------------------------------------------------------------------

    def plan(self, budget: object) -> TopKPlan:
        """Calibrate to ``budget`` (converted to the session's notion); raises before anything is charged."""
        b = self._session.accountant.charge(check_budget(budget))
        first = b.rho if isinstance(b, ZCDP) else b.epsilon  # type: ignore[union-attr]
        delta = getattr(b, "delta", Fraction(0))
        sel = first * (1 - SCORE_SHARE) if self.release_scores and self.method != "tct" else first
        plan = TopKPlan(self.method, b, "zcdp" if isinstance(b, ZCDP) else "pure", sel,
                        score_noise_first=first - sel)
        g = self.score.gap
        needs_delta = self.method != "gumbel" and self.method != "peeling"
        if needs_delta and delta == 0:
            kind = "a pure-DP session" if isinstance(b, PureDP) else "a budget with δ = 0"
            raise BudgetError(f"method {self.method!r} is approximate DP (it needs δ > 0), got {kind}",
                              argument="budget",
                              fix="give an (ε, δ) or (ρ, δ) budget, e.g. dp.ApproxDP(1, 1e-7) / dp.ZCDP(0.1, 1e-8),"
                                  " or use method='gumbel' (public keys) for pure DP")
        if self.method == "stable":
            self._plan_stable(plan, b, sel, delta, g)
        elif self.method in ("gumbel", "peeling"):
            notion = "zcdp" if isinstance(b, ZCDP) else ("pure" if delta == 0 else "approx")
            plan.step_epsilon = cal.em_step_epsilon(notion, sel, delta, self._k, "br" if self.method == "gumbel"
                                                    else "dp")
            plan.mode = notion
        elif self.method == "limited_domain":
            notion = "zcdp" if isinstance(b, ZCDP) else "approx"
            plan.step_epsilon = cal.ld_step_epsilon(notion, sel, delta, self._k + 1)
            plan.delta_ld = delta if notion == "zcdp" else delta / 2
        else:
            t = cal.tct_plan("zcdp" if isinstance(b, ZCDP) else "approx", sel, delta, self._k)
            if t is None:
                raise BudgetError(f"no TCT calibration fits {b!r} for k={self._k}", argument="budget",
                                  fix="give a larger ε or δ, or use method='stable'")
            plan.tct, plan.mode = t, "tct"
        self._check_noise(plan)
        return plan

    @property
    def _k(self) -> int:
        assert self.k is not None
        return self.k

    def _plan_stable(self, plan: TopKPlan, b: Budget, sel: Fraction, delta: Fraction, g: Fraction) -> None:
        unknown_fixed = self.k is not None and self._keys is None
        if isinstance(b, ZCDP):
            if self.delta_t is not None and self.delta_t > delta:
                raise BudgetError(f"δ_t = {float(self.delta_t):g} must not exceed the budget's δ = {float(delta):g}",
                                  argument="delta_t", fix="omit delta_t (it is the budget's δ) or pass a smaller one")
            dt = self.delta_t if self.delta_t is not None else (delta / 2 if unknown_fixed else delta)
            plan.delta_t, plan.delta_ld = dt, (delta - dt if unknown_fixed else Fraction(0))
            plan.mode, rho = "zcdp", sel
        else:
            default = delta / 4 if unknown_fixed else (delta if self.ptr == "laplace" else delta / 2)
            dt = self.delta_t if self.delta_t is not None else default
            plan.delta_t = dt
            plan.delta_ld = dt if unknown_fixed else Fraction(0)
            rest = delta - dt - plan.delta_ld
            # An explicit δ_t must leave room (δ_t < δ); the Laplace default may take all of δ (cost (ε, δ_t)).
            if (self.delta_t is not None and dt >= delta) or rest < 0 or (self.ptr == "gaussian" and rest <= 0):
                raise BudgetError(f"δ_t = {float(dt):g} leaves no δ for the rest of the budget δ = {float(delta):g}",
                                  argument="delta_t", fix="pass delta_t well below the budget's δ (e.g. δ/10)")
            if self.ptr == "laplace":
                plan.mode, rho = "pure", sel
            else:
                plan.mode, rho = "zcdp", cal.rho_from_approx(sel, rest)
                plan.notes.append(f"(ε, δ) → zCDP: ρ = {float(rho):.6g} from ε = ρ + 2√(ρ ln 1/δ') at "
                                  f"δ' = {float(rest):.3g} (Thm 11, corrected)")
        plan.selection_first = rho
        half = rho if self.k is None else rho / 2
        if plan.mode == "pure":
            plan.stable = cal.stable_plan_pure_parts(half, plan.delta_t, g)
        else:
            plan.stable = cal.stable_plan_zcdp(half, plan.delta_t, g, self.ptr)

    def _check_noise(self, plan: TopKPlan) -> None:
        s = plan.stable
        if s is not None and (s.em_epsilon <= 0 or s.ptr_scale > 2**100):
            raise BudgetError("this budget is too small for the exact samplers", argument="budget",
                              fix="give the query a larger budget")
        if plan.step_epsilon is not None and plan.step_epsilon <= 0:
            raise BudgetError("this budget is too small for k selection steps", argument="budget",
                              fix="give the query a larger budget or a smaller k")

    def cost(self, budget: object) -> Budget:
        """The exact cost this query is charged (the whole budget, in the session's notion). Free."""
        return self.plan(budget).budget

    def explain(self, budget: object, format: str = "text") -> Any:
        """The method, candidates, sensitivity, noise, PTR threshold and cost, as text or a dict. Free."""
        if format not in ("text", "json"):
            raise PlanError(f"unknown format {format!r}", argument="format", fix="use 'text' or 'json'")
        p = self.plan(budget)
        data = self._explain_data(p)
        if format == "json":
            return data
        lines = [f"top-k: {data['query']}", f"method: {data['method']}", f"candidates: {data['candidates']}",
                 f"score: {data['score']}", *[f"  {line}" for line in data["mechanisms"]],
                 *[f"note: {n}" for n in data["notes"]],
                 f"cost: {data['cost']} (charged in full, also when the result is 'failed')",
                 f"output: {data['output']}"]
        if not self._session.rng.private:
            lines.insert(0, "WARNING: seeded session — NOT PRIVATE (tests only)")
        return "\n".join(lines)

    def _explain_data(self, p: TopKPlan) -> dict[str, Any]:
        s, g = self.score, self.score.gap
        mech: list[str] = []
        if p.stable is not None:
            st = p.stable
            what = "k from the data (Regularized Large Gap)" if self.k is None else \
                f"k̃ near k={self.k} (regularizer −{float(self.lam):g}·|j−k|)"
            mech.append(f"Alg 1: exact EM on gaps j ≤ {self.k_max}, ε = {float(st.em_epsilon):.6g} "
                        f"(Gumbel scale {float(1 / st.em_scale):.4g}): {what}")
            noise = (f"discrete Gaussian σ = {math.sqrt(float(st.ptr_scale)):.4g}" if st.ptr == "gaussian"
                     else f"discrete Laplace t = {float(st.ptr_scale):.4g}")
            mech.append(f"PTR: {noise}, δ_t = {float(st.delta_t):.3g}; releases the exact set iff "
                        f"{'max{g, q_k}' if st.ptr == 'gaussian' else 'q_k'} + noise > {st.threshold()} "
                        f"(passes w.p. ≥ 1/2 when the gap q_k ≥ {int(st.threshold()) + 1} score units)")
            if self.k is not None:
                mech.append("Alg 3 patch to exactly k: peeling EM (public keys) / limited domain (keys from the "
                            "data) on the other half, excluding the released set; charged even when not run")
        elif p.tct is not None:
            mech.append(f"TCT one-shot top-k: each key's score + discrete Laplace(t = "
                        f"{float(s.key_sensitivity / p.tct.candidate_epsilon):.4g}); k hits of 2ε_c-DP calls, "
                        f"n = {p.tct.accesses}, tail δ* = {p.tct.tail:.3g}; noisy scores released free")
        elif p.step_epsilon is not None:
            mech.append(f"{self.method}: {self.k} exact-EM steps, ε per step = {float(p.step_epsilon):.6g} "
                        f"(Gumbel scale {float(g / p.step_epsilon):.4g})" +
                        (f", ⊥ threshold with δ = {float(p.delta_ld):.3g}" if self.method == "limited_domain"
                         else ""))
        if self.release_scores and p.tct is None:
            mech.append(f"scores: {self._score_noise(p, self.k or self.k_max).describe()} "
                        f"(share {SCORE_SHARE} of the budget; shown for k = {self.k or self.k_max})")
        cand = (f"{self._keys.height} public keys" if self._keys is not None else
                f"keys from the data (unknown domain; unobserved keys score 0; k ≤ {self.k_max})")
        return {
            "query": f"group_by{list(self._by)}.top_k(k={self.k}, score={s.measure.describe()})",
            "method": self.method, "candidates": cand, "private": self._session.rng.private,
            "score": f"{s.measure.describe()}: one unit moves a key's score by ≤ {float(s.key_sensitivity * s.unit):g}"
                     f", every gap by ≤ {float(g * s.unit):g}",
            "mechanisms": mech, "notes": p.notes, "cost": describe(p.budget),
            "output": "keys sorted by key" + (" + noisy score" if self.release_scores or p.tct else "") +
                      (", or dp.TopKFailed" if p.stable is not None and self.k is None else ""),
        }

    def _score_noise(self, p: TopKPlan, k: int) -> Noise:
        # One unit may touch every released key: L1 sensitivity k·Δ (Laplace), L2 √k·Δ (Gaussian).
        delta = self.score.key_sensitivity
        if isinstance(p.budget, ZCDP):   # σ² = kΔ²/(2ρ); `sensitivity` shows the per-key Δ
            return Noise("discrete_gaussian", k * delta**2 / (2 * p.score_noise_first), delta, self.score.unit)
        return Noise.calibrate(k * delta, make("pure", p.score_noise_first), self.score.unit)

    # -- running (charged) ----------------------------------------------------------------------

    def collect(self, budget: object) -> pl.DataFrame | TopKFailed:
        """Reserve the cost, run, and release the key set (sorted by key) or :class:`TopKFailed`."""
        plan = self.plan(budget)
        sess = self._session
        return sess._charged(plan.budget, self.describe(), f"topk:{self.method}", lambda: self._run(plan))

    def _run(self, plan: TopKPlan) -> pl.DataFrame | TopKFailed:
        sess = self._session
        stats = sess._statistics(self._node, self._by, self._keys, (self.score.statistic,),
                                 backend=sess._backend_for(self._backend))
        scores = stats[self.score.statistic.key].to_numpy().astype(np.int64)
        k_tested, chosen, noisy = self._select(plan, scores)
        if chosen is None:
            return TopKFailed(k_tested, self.method)
        out: pl.DataFrame = stats.select(self._by)[np.sort(chosen).tolist()]
        if noisy is None and self.release_scores and chosen.size:
            noise = self._score_noise(plan, int(chosen.size))
            noisy = scores[np.sort(chosen)] + noise.sample(int(chosen.size), sess.rng)
        elif noisy is not None:
            noisy = noisy[np.argsort(chosen)]
        if self.release_scores or plan.tct is not None:
            assert noisy is not None or chosen.size == 0
            values = np.zeros(0) if noisy is None else noisy.astype(np.float64) * float(self.score.unit)
            out = out.with_columns(pl.Series(self.score.measure.output_name, values))
        return out

    def _select(self, plan: TopKPlan, scores: np.ndarray) -> tuple[int, np.ndarray | None, np.ndarray | None]:
        """(k tested, chosen candidate indices or None for ⊥, noisy scores when the method releases them)."""
        rng, g = self._session.rng, self.score.gap
        m = scores.size
        everyone = np.arange(m, dtype=np.int64)
        if plan.tct is not None:
            top, noisy = select.tct_topk(scores, self._k, self.score.key_sensitivity / plan.tct.candidate_epsilon,
                                         rng)
            return self._k, top, noisy
        if plan.method in ("gumbel", "peeling"):
            assert plan.step_epsilon is not None
            return self._k, select.peeling(scores, everyone, self._k, plan.step_epsilon / g, rng), None
        if plan.method == "limited_domain":
            assert plan.step_epsilon is not None
            return self._k, self._ld(scores, everyone, self._k, plan.step_epsilon, plan.delta_ld), None
        assert plan.stable is not None
        k_tilde, found = select.stable_topk(scores, plan.stable, rng, k_max=self.k_max, k_target=self.k,
                                            lam=self.lam if self.k is not None else Fraction(0))
        if self.k is None:
            return k_tilde, found, None
        return self._k, self._patch(plan, scores, k_tilde, found), None

    def _ld(self, scores: np.ndarray, pool: np.ndarray, steps: int, eps: Fraction, delta: Fraction) -> np.ndarray:
        k_bar = max(steps, self.k_max)
        return select.limited_domain(scores, pool, steps, k_bar, eps, self.score.gap,
                                     math.log(k_bar) + cal.log_inv(delta), self._session.rng)

    def _patch(self, plan: TopKPlan, scores: np.ndarray, k_tilde: int, found: np.ndarray | None) -> np.ndarray:
        """Alg 3 lines 3–6: reach exactly k with the second half of the budget (public s = #steps)."""
        k, rng, g = self._k, self._session.rng, self.score.gap
        rest = plan.selection_first / 2
        public = self._keys is not None
        if found is not None and k_tilde == k:
            return found
        if found is not None and k_tilde > k:
            drop = k_tilde - k < k          # fewer steps: drop the k̃−k lowest (EM on negated scores)
            steps = k_tilde - k if drop else k
            eps = self._patch_epsilon(plan, rest, steps, ld=False)
            picked = select.peeling(-scores if drop else scores, found, steps, eps / g, rng)
            return np.setdiff1d(found, picked) if drop else picked
        have = np.zeros(0, dtype=np.int64) if found is None else found
        steps = k - have.size
        outside = np.setdiff1d(np.arange(scores.size, dtype=np.int64), have)
        if public:
            eps = self._patch_epsilon(plan, rest, steps, ld=False)
            return np.concatenate([have, select.peeling(scores, outside, steps, eps / g, rng)])
        eps = self._patch_epsilon(plan, rest, steps + 1, ld=True)
        return np.concatenate([have, self._ld(scores, outside, steps, eps, plan.delta_ld)])

    def _patch_epsilon(self, plan: TopKPlan, rest: Fraction, steps: int, ld: bool) -> Fraction:
        # zCDP: `steps` ε-BR steps with steps·ε²/8 = rest; pure: basic composition rest/steps.
        return cal.sqrt_down(8 * rest / steps) if plan.mode == "zcdp" else rest / steps

    def describe(self) -> str:
        """One line for the ledger history."""
        steps = " | ".join(n.describe() for n in self._node.lineage())
        return (f"{steps} | group_by{list(self._by)} | top_k(k={self.k}, score={self.score.measure.describe()}, "
                f"method={self.method!r})")

    def __repr__(self) -> str:
        return f"<dp.TopKQuery {self.describe()}>"


def _fraction(value: object, argument: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise BoundsError(f"expected a number, got {value!r}", argument=argument, fix="pass a number ≥ 0")
    if isinstance(value, float) and not math.isfinite(value):
        raise BoundsError(f"must be finite, got {value}", argument=argument, fix="pass a finite number ≥ 0")
    out = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if out < 0:
        raise BoundsError(f"must be ≥ 0, got {value}", argument=argument, fix="pass a number ≥ 0")
    return out


__all__ = ["METHODS", "Score", "TopKFailed", "TopKPlan", "TopKQuery", "gap_sensitivity", "score_of"]
