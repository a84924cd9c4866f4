"""``frame.group_by(key).top_k(...)``: the lazy private top-k query (explain / cost / collect).

Validation and the exact cost happen before anything runs (bad input raises, nothing charged); the
cost is the whole query budget in the session's notion (in RDP/PLD sessions: the privacy curves of the
mechanisms, see :mod:`dpframe_topk.budgeting`), reserved by the session's release context. The exact
per-key scores come from its private reader (keys from the data, or the public ``keys=`` of the
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
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import polars as pl

from dpframe.accounting import curves
from dpframe.budgets import ZCDP, Budget, describe, make, up
from dpframe.errors import BoundsError, BudgetError, PlanError, one_of
from dpframe.family import Explain, FamilyPlan, Source, written_in_sql
from dpframe.measures import Measure, count_units
from dpframe.mechanism import MIN_GRID_EXPONENT, Statistic
from dpframe.mechanism.noise import Noise
from dpframe.sealed import plain
from dpframe_topk import calibrate as cal
from dpframe_topk import select
from dpframe_topk.budgeting import (
    LD_NO_ZCDP,
    SCORE_SHARE,
    StableRequest,
    TopKPlan,
    first_of,
    notion_of,
    plan_stable,
    query_budget,
    repeat,
)
from dpframe_topk.results import TopKFailed, TopKPartial
from dpframe_topk.spelling import CHAIN, SQL, Spelling

if TYPE_CHECKING:
    from dpframe.noise import RandomSource
    from dpframe.privacy_unit import PrivacyUnit
    from dpframe.release import PrivateReader

METHODS = ("stable", "gumbel", "peeling", "limited_domain", "tct")
K_LIMIT = 1_000_000                    # largest k / k_max (public sizes; the selection is O(k_max))
_SUM_BITS = 16                         # sum scores live on a grid with |one row| ≤ 2^16 grid units


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
    bound_rows: bool = True       # the statistic needs max_rows / max_groups bounding (count_units does not)

    def released_noise(self, share: Budget, k: int) -> Noise:
        """The noise on k released scores that makes their release cost ``share`` (pure ε or ρ-zCDP).

        The released vector's sensitivity under adding or removing one unit: a bounded score (``len``,
        ``count``, ``sum``) keeps at most ``max_rows`` rows of the unit *in all keys together* and each row
        moves one key by at most its row bound, so the whole vector moves by at most Δ in L1 (hence in L2),
        whatever k is — Δ = ``max_rows`` × the row bound is also the per-key sensitivity. ``count_units``
        is not bounded (a unit may touch every key, each by 1): L1 k·Δ, L2 √k·Δ. A clamped total
        max(x, 0) (signed sums over keys from the data) is 1-Lipschitz, so neither bound grows.

        Example:
            >>> import dpframe as dp
            >>> schema, unit = pl.Schema({"u": pl.Int64, "c": pl.String}), dp.PrivacyUnit("u", max_rows=5)
            >>> score_of(dp.len(), unit, schema).released_noise(dp.PureDP(1), 3).scale        # Δ/ε = 5, not 3·5
            Fraction(5, 1)
            >>> score_of(dp.count_units(), unit, schema).released_noise(dp.ZCDP(1), 3).scale  # σ² = 3·1²/(2·1)
            Fraction(3, 2)

        """
        if self.bound_rows:
            return Noise.calibrate(self.key_sensitivity, share, self.unit)
        if isinstance(share, ZCDP):   # σ² = kΔ²/(2ρ) (L2 √k·Δ, not a Fraction); `sensitivity` shows the per-key Δ
            return Noise("discrete_gaussian", k * self.key_sensitivity**2 / (2 * share.rho), self.key_sensitivity,
                         self.unit)
        return Noise.calibrate(k * self.key_sensitivity, share, self.unit)


def score_of(measure: object, unit: PrivacyUnit, schema: pl.Schema, spelling: Spelling = CHAIN) -> Score:
    """Validate ``score`` and derive its statistic and sensitivities from public facts only.

    ``count_units`` (distinct units per key) moves every key by 0 or 1 when a unit is added or removed,
    however many rows and keys the unit has, so it is computed *without* contribution bounding (Δ = 1,
    g = 1; digest §0). The other scores count or sum rows, so the backend keeps ≤ ``max_rows`` rows per
    unit and Δ scales with it.
    """
    fix = f"use {spelling.scores}"
    if not isinstance(measure, Measure):
        raise PlanError(f"{measure!r} is not a dp measure", argument="score", fix=fix)
    rows = Fraction(1 if unit.is_row else unit.max_rows)
    if measure.column is not None and measure.column not in schema:
        raise PlanError(f"unknown column {measure.column!r}", argument="score",
                        fix=one_of(measure.column, schema.names()))
    if measure.kind == "count_units":
        return Score(measure, Statistic("units"), Fraction(1), Fraction(1), Fraction(1), bound_rows=False)
    if measure.kind == "len":
        return Score(measure, Statistic("rows"), rows, rows, Fraction(1))
    if measure.kind == "count":
        return Score(measure, Statistic("nonnull", measure.column), rows, rows, Fraction(1))
    if measure.kind == "sum":
        if measure.bounds is None:      # bounds="auto": chosen by agg queries only, from a share of their budget
            raise PlanError(f"{measure.describe()} has no bounds: top-k ranks by a sum clipped to fixed bounds "
                            "(bounds='auto' is chosen by agg queries only)", argument="score", fix=fix)
        assert measure.column is not None
        if not schema[measure.column].is_numeric():
            raise PlanError(f"column {measure.column!r} is not numeric", argument="score", fix=fix)
        lo, hi = measure.bounds
        top = max(abs(lo), abs(hi))
        grid = max(math.floor(math.log2(top)) - _SUM_BITS, MIN_GRID_EXPONENT)   # subnormal bounds: 2⁻¹⁰²²
        stat = Statistic("fixed_sum", measure.column, lo, hi, grid_exp=grid)
        key = rows * stat.row_bound()
        return Score(measure, stat, key, gap_sensitivity(key, lo >= 0), Fraction(2) ** grid)
    raise PlanError(f"{measure.describe()} is not a score top-k can rank: it needs a per-key total with "
                    "bounded per-unit contributions (a count or a bounded sum)", argument="score", fix=fix)


class Selection(NamedTuple):
    """What a run selected: the k tested, candidate indices (None: ⊥), noisy scores, and why it fell short."""

    k: int
    chosen: np.ndarray | None
    noisy: np.ndarray | None = None
    reason: str = ""


class TopKQuery:
    """A private top-k selection over the keys of a group-by (see :meth:`dpframe.GroupBy.top_k`)."""

    def __init__(self, source: Source, *, k: int | None = 10, score: Measure | None = None, method: str = "stable",
                 release_scores: bool = False, k_max: int | None = None, lam: float | Fraction | None = None,
                 ptr: str = "gaussian", delta_t: float | Fraction | None = None) -> None:
        # how refusals and next steps name the arguments: SQL's when the SQL front end builds it (HAVING TOP_K(...)),
        # else the method chain's keywords; never an argument (the analyst's chain cannot ask for the other words)
        self._spelling = spell = SQL if written_in_sql() else CHAIN
        self._source, self._node, self._by, self._keys = source, source.node, source.by, source.keys
        self._context = source.context
        score = count_units() if score is None else score
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_LIMIT):
            raise PlanError(f"must be a whole number ≥ 1 (at most {K_LIMIT:,}) or {spell.none}, got {_short(k)}",
                            argument="k", fix=f"{spell.give} {spell.arg('k', '10')}, or {spell.arg('k', spell.none)} "
                                              "to choose k from the data")
        stable = spell.arg("method", "'stable'")
        if not isinstance(method, str) or method not in METHODS:
            raise PlanError(f"unknown method {method!r}", argument="method",
                            fix=f"use one of {list(METHODS)}, e.g. {stable}")
        if not isinstance(ptr, str) or ptr not in ("gaussian", "laplace"):
            raise PlanError(f"unknown PTR noise {ptr!r}", argument="ptr",
                            fix=f"use {spell.arg('ptr', repr('gaussian'))} or {spell.arg('ptr', repr('laplace'))}")
        if not isinstance(release_scores, bool):
            raise PlanError(f"must be True or False, got {release_scores!r}", argument="release_scores",
                            fix=f"{spell.release_scores} to also release noisy scores")
        if k is None and method != "stable":
            raise PlanError(f"method {method!r} needs a fixed k", argument="k",
                            fix=f"{spell.give} {spell.option(10, 'method', repr(method))}, or use {stable} for a "
                                "data-chosen k")
        self.score = score_of(score, source.unit, source.schema, spell)
        m = None if self._keys is None else self._keys.height
        if k is not None and m is not None and k > m:
            raise PlanError(f"k = {k} is larger than the {m} public keys", argument="k",
                            fix=f"{spell.give} a k ≤ {m}, e.g. {spell.arg('k', str(m))}")
        if method in ("gumbel", "peeling", "tct") and self._keys is None:
            raise PlanError(f"method {method!r} samples among all candidate keys, so it needs a public key "
                            "domain (keys present in the data would leak which keys exist)", argument="keys",
                            fix=f"pass {spell.keys}, or use {stable} or 'limited_domain'")
        if k_max is not None and (isinstance(k_max, bool) or not isinstance(k_max, int)
                                  or not (k or 1) <= k_max <= K_LIMIT):
            raise PlanError(f"must be a whole number from {k or 1} to {K_LIMIT:,}, got {_short(k_max)}",
                            argument="k_max", fix=f"{spell.give} {spell.arg('k_max', 'n')}, n the largest k you "
                                                  "would accept (public)")
        # plain ints: an int subclass's comparisons with k would see the data-chosen k̃
        k = None if k is None else int.__index__(k)
        k_max = None if k_max is None else int.__index__(k_max)
        default_max = 100 if k is None else max(k, min(2 * k, K_LIMIT))
        k_max = k_max if k_max is not None else default_max
        if m is not None:
            k_max = min(k_max, m)
        self.k, self.k_max, self.method, self.ptr = k, k_max, method, ptr
        self.release_scores = release_scores
        self.lam = self.score.gap if lam is None else _regularizer(lam, spell)
        self.delta_t = None if delta_t is None else _fraction(delta_t, "delta_t", spell)
        if self.delta_t is not None and not 0 < self.delta_t < 1:
            raise BudgetError(f"must be in (0, 1), got {delta_t}", argument="delta_t",
                              fix=f"{spell.give} e.g. {spell.arg('delta_t', '1e-9')}")

    # -- planning (free) ------------------------------------------------------------------------

    @property
    def backend(self) -> str | None:
        """The backend this query runs on (None: the session's)."""
        return self._source.backend

    def plan(self, budget: object) -> FamilyPlan[pl.DataFrame | TopKFailed]:
        """Calibrate to ``budget`` (in a notion the session can charge); raises before anything is charged."""
        plan = self._calibrate(budget)
        data = self._explain_data(plan)
        lines = (f"method: {data['method']}", f"candidates: {data['candidates']}", f"score: {data['score']}",
                 *(f"  {line}" for line in data["mechanisms"]), f"output: {data['output']}")
        notes = (*data["notes"], "the cost is charged in full, also when the result is failed or partial")
        explain = Explain(f"top-k: {data['query']}", steps=self._steps(), lines=lines, notes=notes, data=data)
        return FamilyPlan(plan.budget, plan.budget, plan.charge, f"topk:{self.method}", explain,
                          lambda reader, rng: self._run(plan, reader, rng), detail=plan)

    def _steps(self) -> tuple[str, ...]:
        """The row-level steps and the privacy unit the selection protects (as the ``agg`` queries show them)."""
        unit = self._source.unit
        bound = unit.describe() if self.score.bound_rows or unit.column is None else \
            f"unit {unit.column!r}: every row (count_units counts each unit once per key)"
        return (*(n.describe() for n in self._node.lineage()), f"ContributionBound: {bound}")

    def _needs_delta(self, budget: Budget, notion: str) -> BudgetError:
        """The refusal of a budget without δ by an approximate-DP method, with a fix the session takes.

        A session whose total has δ = 0 takes no query δ (an (ε, δ) budget in a pure session is a
        ``BudgetConversionError``, a δ in a zCDP session with δ = 0 does not fit): the fix then names the session.
        """
        kind = "a pure-DP budget" if notion == "pure" and not isinstance(budget, ZCDP) else "a budget with δ = 0"
        gumbel = self._spelling.arg("method", "'gumbel'")
        total = self._context.accountant.total
        if getattr(total, "delta", 0) == 0:
            return BudgetError(f"method {self.method!r} is approximate DP (it needs δ > 0), got {kind}, and this "
                               "session's total budget has δ = 0", argument="budget",
                               fix=f"use {gumbel} (public keys) for pure DP, or open the session with a total "
                                   "budget that has a δ")
        example = "dp.ZCDP(0.1, 1e-8)" if total.notion == "zcdp" else \
            "dp.ApproxDP(1, 1e-7) / dp.ZCDP(0.1, 1e-8)" if self._context.accountant.name in ("rdp", "pld") else \
            "dp.ApproxDP(1, 1e-7)"
        return BudgetError(f"method {self.method!r} is approximate DP (it needs δ > 0), got {kind}", argument="budget",
                           fix=f"give a budget with a δ, e.g. {example}, or use {gumbel} (public keys) for pure DP")

    def _calibrate(self, budget: object) -> TopKPlan:
        b, curve_session = query_budget(self._context.accountant, budget)
        notion, first = notion_of(b), first_of(b)
        delta = getattr(b, "delta", Fraction(0))
        sel = first * (1 - SCORE_SHARE) if self.release_scores and self.method != "tct" else first
        plan = TopKPlan(self.method, b, notion, sel, score_noise_first=first - sel)
        if self.method not in ("gumbel", "peeling") and delta == 0:
            raise self._needs_delta(b, notion)
        if self.method == "stable":
            plan_stable(plan, delta, StableRequest(self.k, self._keys is not None, self.ptr, self.delta_t,
                                                   self.score.gap, self._spelling))
        elif self.method in ("gumbel", "peeling"):
            plan.step_epsilon = cal.em_step_epsilon(notion, sel, delta, self._k,
                                                    "br" if self.method == "gumbel" else "dp")
            plan.curves += repeat(curves.exponential(up(plan.step_epsilon)), self._k)
        elif self.method == "limited_domain":
            if notion == "zcdp":
                raise BudgetError(f"{LD_NO_ZCDP}; this budget is zCDP", argument="method",
                                  fix=f"use {self._spelling.arg('method', repr('stable'))}, or give an (ε, δ) budget "
                                      "in a session with the 'basic', 'rdp' or 'pld' accountant")
            plan.step_epsilon = cal.ld_step_epsilon(sel, delta, self._k)
            plan.delta_ld = delta / 2
            plan.curves.append(curves.approx(up(sel), up(delta)))
        else:
            t = cal.tct_plan(notion, sel, delta, self._k)
            if t is None:
                raise BudgetError(f"no TCT calibration fits {b!r} for k={self._k}", argument="budget",
                                  fix=f"give a larger ε or δ, or use {self._spelling.arg('method', repr('stable'))}")
            plan.tct = t
            plan.curves.append(curves.zcdp(up(sel), up(delta)) if notion == "zcdp" else
                               curves.approx(up(sel), up(delta)))
        if plan.score_noise_first:
            plan.curves.append(curves.zcdp(up(plan.score_noise_first)) if notion == "zcdp" else
                               curves.pure(up(plan.score_noise_first)))
        self._check_noise(plan)
        plan.charge = self._context.accountant.charge_plan(b, plan.curves) if curve_session else b
        return plan

    @property
    def _k(self) -> int:
        assert self.k is not None
        return self.k

    def _check_noise(self, plan: TopKPlan) -> None:
        s = plan.stable
        if s is not None and (s.em_epsilon <= 0 or s.ptr_scale > 2**100):
            raise BudgetError("this budget is too small for the exact samplers", argument="budget",
                              fix="give the query a larger budget")
        if plan.step_epsilon is not None and plan.step_epsilon <= 0:
            raise BudgetError("this budget is too small for k selection steps", argument="budget",
                              fix="give the query a larger budget or a smaller k")
        if self.release_scores and plan.tct is None:
            self._score_noise(plan, self.k or self.k_max)    # raises if the noise is beyond the sampler

    def _units(self, grid: float | int | Fraction) -> str:
        """A quantity in the statistic's grid units, shown in score units (and grid units for sums)."""
        s = self.score
        if s.unit == 1:
            return f"{grid} score units"
        return f"{_num(Fraction(grid) * s.unit, 6)} score units ({grid} grid units of {_num(s.unit, 6)})"

    def _explain_data(self, p: TopKPlan) -> dict[str, Any]:
        s, g = self.score, self.score.gap
        mech: list[str] = []
        if p.stable is not None:
            st = p.stable
            what = "k from the data (Regularized Large Gap)" if self.k is None else \
                f"k̃ near k={self.k} (regularizer −{_num(self.lam * s.unit, 6)}·|j−k|)"
            mech.append(f"Alg 1: exact EM on gaps j ≤ {self.k_max}, ε = {_num(st.em_epsilon, 6)} "
                        f"(Gumbel scale {_num(s.unit / st.em_scale)} score units): {what}")
            sigma = Fraction(math.sqrt(st.ptr_scale)) * s.unit
            noise = (f"discrete Gaussian σ = {_num(sigma)}" if st.ptr == "gaussian"
                     else f"discrete Laplace t = {_num(st.ptr_scale * s.unit)}")
            mech.append(f"PTR: {noise} (score units), δ_t = {float(st.delta_t):.3g}; releases the exact set iff "
                        f"{'max{g, q_k}' if st.ptr == 'gaussian' else 'q_k'} + noise > {self._units(st.threshold())} "
                        f"(passes w.p. ≥ 1/2 when the gap q_k ≥ {self._units(int(st.threshold()) + 1)})")
            if p.patch is not None:
                fill = {"peel": "the missing keys by peeling EM over the other public keys",
                        "ld": "the missing keys by limited domain over keys from the data, which may stop early "
                              "(result: dp.TopKFailed or a partial result with fewer than k keys)",
                        "none": "missing keys cannot be added: in zCDP there is no patch over keys from the data "
                                "(limited domain has no zCDP proof), so a short set is returned as partial"}
                mech.append(f"Alg 3 patch to exactly k on the other half ({p.patch.notion}): extra keys dropped by "
                            f"peeling EM over the released set; {fill[p.patch.fill]}; charged even when not run")
        elif p.tct is not None:
            mech.append(f"TCT one-shot top-k: each key's score + discrete Laplace(t = "
                        f"{_num(s.key_sensitivity / p.tct.candidate_epsilon * s.unit)} score units); k hits of "
                        f"2ε_c-DP calls, n = {p.tct.accesses}, tail δ* = {p.tct.tail:.3g}; noisy scores released free")
        elif p.step_epsilon is not None:
            mech.append(f"{self.method}: {self.k} exact-EM steps, ε per step = {_num(p.step_epsilon, 6)} "
                        f"(Gumbel scale {_num(g * s.unit / p.step_epsilon)} score units)" +
                        (f", ⊥ threshold with δ = {float(p.delta_ld):.3g}; may return fewer than k keys"
                         if self.method == "limited_domain" else ""))
        if self.release_scores and p.tct is None:
            mech.append(f"scores: {self._score_noise(p, self.k or self.k_max).describe()} "
                        f"(share {SCORE_SHARE} of the budget; shown for k = {self.k or self.k_max})")
        cand = (f"{self._keys.height} public keys" if self._keys is not None else
                f"keys from the data (unknown domain; unobserved keys score 0; k ≤ {self.k_max})")
        notes = list(p.notes)
        if self._keys is None and s.gap != s.key_sensitivity and s.measure.kind == "sum":
            notes.append("signed sum over keys from the data: a key's negative total is ranked as 0, like the "
                         "unobserved keys (max(total, 0) keeps the gap sensitivity)")
        if not s.bound_rows and self._source.unit.column is not None:
            notes.append("count_units: every row counts (no max_rows / max_groups bounding: one unit moves each "
                         "key's distinct-unit count by at most 1)")
        cost = describe(p.charge) if p.charge is p.budget else self._context.accountant.describe_charge(p.charge)
        short = p.stable is not None and self.k is None or (p.patch is not None and p.patch.fill != "peel") \
            or self.method == "limited_domain"
        return {
            "query": f"group_by{list(self._by)}.top_k(k={self.k}, score={s.measure.describe()})",
            "method": self.method, "candidates": cand,
            "score": f"{s.measure.describe()}: one unit moves a key's score by ≤ {_num(s.key_sensitivity * s.unit, 6)}"
                     f", every gap by ≤ {_num(g * s.unit, 6)}",
            "mechanisms": mech, "notes": notes, "cost": cost,
            "output": "keys sorted by key" + (" + noisy score" if self.release_scores or p.tct else "") +
                      (", or dp.TopKFailed / dp.TopKPartial (fewer than k keys)" if short and self.k else
                       ", or dp.TopKFailed" if short else ""),
        }

    def _score_noise(self, p: TopKPlan, k: int) -> Noise:
        """The noise on k released scores: the score share as pure ε (Laplace) or ρ-zCDP (Gaussian)."""
        share = make("zcdp" if isinstance(p.budget, ZCDP) else "pure", p.score_noise_first)
        return self.score.released_noise(share, k)

    # -- running (charged) ----------------------------------------------------------------------

    def _run(self, plan: TopKPlan, reader: PrivateReader, rng: RandomSource) -> pl.DataFrame | TopKFailed:
        """Select on the exact per-key scores (inside the release: ``reader`` reads private rows)."""
        stats = reader.statistics(self._node, (self.score.statistic,), by=self._by, keys=self._keys,
                                  bound=self.score.bound_rows)
        scores = stats[self.score.statistic.key].to_numpy().astype(np.int64)
        if self._keys is None:
            # Unknown domain: every unobserved key scores 0. Ranking max(score, 0) for *every* key (observed
            # or not) keeps each key within the same interval of width g under a neighbour (x ↦ max(x, 0)
            # is 1-Lipschitz and monotone), so the gap sensitivity is unchanged, and the observed keys plus
            # zero padding are then exactly the top of that clamped histogram (signed sums only; counts ≥ 0).
            scores = np.maximum(scores, 0)
        sel = self._select(plan, scores, rng)
        if sel.chosen is None or sel.chosen.size == 0:
            return TopKFailed(sel.k, self.method, f"{sel.reason or TopKFailed.reason}; {self.next_step(plan)}")
        chosen = np.sort(sel.chosen)
        out: pl.DataFrame = stats.select(self._by)[chosen.tolist()]
        noisy = sel.noisy
        if noisy is None and self.release_scores:
            noisy = scores[chosen] + self._score_noise(plan, int(chosen.size)).sample(int(chosen.size), rng)
        elif noisy is not None:
            noisy = noisy[np.argsort(sel.chosen)]
        if noisy is not None:
            out = out.with_columns(self._released_scores(noisy))
        if self.k is not None and out.height < self.k:
            return TopKPartial(self.k, self.method, f"{sel.reason}; {self.next_step(plan)}", keys=out)
        return out

    def next_step(self, plan: TopKPlan) -> str:
        """What to try after a failed or partial release, from public parameters only (method, k, keys, notion).

        The end of a :class:`TopKFailed`'s ``reason``, in the query's spelling (SQL: ``TOP_K(...)``).
        """
        k, spell = self.k, self._spelling
        fixed = spell.arg("k", "10")
        limited = spell.option(k, "method", "'limited_domain'")
        chosen = spell.arg("k", spell.none)
        k_max = spell.arg("k_max", "n")
        public = f"public keys: {spell.keys} with {spell.option(k or 'k', 'method', repr('gumbel'))}"
        tries = []
        if self.method == "stable" and k is None:
            tries.append(f"a fixed k, e.g. {fixed} (with public keys it always returns k keys; over keys from the "
                         "data it may return fewer)")
        elif self.method == "stable" and plan.notion != "zcdp":
            tries.append(f"{limited} (fixed k over keys from the data)")
        if self.method == "limited_domain" or (self.method == "stable" and k is not None):
            tries.append(f"{chosen} (a data-chosen k: a superset or subset of the top {k})")
        if self.method == "limited_domain":
            tries.append(f"a larger {k_max} (now {self.k_max}: more candidate keys)")
        if self._keys is None:
            tries.append(f"{public} always returns k keys")
        tries.append("a larger budget for this query (each retry is charged again)")
        return "try " + "; or ".join(tries)

    @property
    def output_schema(self) -> pl.Schema:
        """The columns and dtypes of a full result (public): the group keys, then the noisy score if released."""
        keys = [(name, self._node.schema[name]) for name in self._by]
        score = [(self.score.measure.output_name, self._score_dtype())] if self.release_scores or \
            self.method == "tct" else []
        return pl.Schema([*keys, *score])

    def _score_dtype(self) -> pl.DataType:
        """Int64 for counts in whole units (as the same measure in ``agg``), Float64 otherwise."""
        whole = self.score.unit == 1 and self.score.measure.kind in ("len", "count", "count_units")
        return pl.Int64() if whole else pl.Float64()

    def _released_scores(self, noisy: np.ndarray) -> pl.Series:
        """The noisy scores in score units, typed like the same measure in ``agg``: Int64 for counts."""
        name, dtype = self.score.measure.output_name, self._score_dtype()
        if dtype == pl.Int64:
            return pl.Series(name, noisy.astype(np.int64), dtype=dtype)
        return pl.Series(name, noisy.astype(np.float64) * float(self.score.unit), dtype=dtype)

    def _select(self, plan: TopKPlan, scores: np.ndarray, rng: RandomSource) -> Selection:
        """The selection on exact scores (candidate indices), per method."""
        g = self.score.gap
        m = scores.size
        everyone = np.arange(m, dtype=np.int64)
        if plan.tct is not None:
            top, noisy = select.tct_topk(scores, self._k, self.score.key_sensitivity / plan.tct.candidate_epsilon,
                                         rng)
            return Selection(self._k, top, noisy)
        if plan.method in ("gumbel", "peeling"):
            assert plan.step_epsilon is not None
            return Selection(self._k, select.peeling(scores, everyone, self._k, plan.step_epsilon / g, rng))
        if plan.method == "limited_domain":
            assert plan.step_epsilon is not None
            got = self._ld(scores, everyone, self._k, plan.step_epsilon, plan.delta_ld, rng)
            return Selection(self._k, got, reason=f"limited domain stopped at its ⊥ item after {got.size} of "
                                                  f"{self._k} keys")
        assert plan.stable is not None
        k_tilde, found = select.stable_topk(scores, plan.stable, rng, k_max=self.k_max, k_target=self.k,
                                            lam=self.lam if self.k is not None else Fraction(0))
        if self.k is None:
            return Selection(k_tilde, found)
        return self._patch(plan, scores, k_tilde, found, rng)

    def _ld(self, scores: np.ndarray, pool: np.ndarray, steps: int, eps: Fraction, delta: Fraction,
            rng: RandomSource) -> np.ndarray:
        k_bar = max(steps, self.k_max)
        return select.limited_domain(scores, pool, steps, k_bar, eps, self.score.gap,
                                     math.log(k_bar) + cal.log_inv(delta), rng)

    def _patch(self, plan: TopKPlan, scores: np.ndarray, k_tilde: int, found: np.ndarray | None,
               rng: RandomSource) -> Selection:
        """Alg 3 lines 3–6: reach exactly k with the second half of the budget (public s = #steps)."""
        k, g, patch = self._k, self.score.gap, plan.patch
        assert patch is not None
        if found is not None and k_tilde == k:
            return Selection(k, found)
        if found is not None and k_tilde > k:
            drop = k_tilde - k < k          # fewer steps: drop the k̃−k lowest (EM on negated scores)
            steps = k_tilde - k if drop else k
            picked = select.peeling(-scores if drop else scores, found, steps, patch.peel_epsilon(steps) / g, rng)
            return Selection(k, np.setdiff1d(found, picked) if drop else picked)
        have = np.zeros(0, dtype=np.int64) if found is None else found
        steps = k - have.size
        first = ("the stability test did not pass" if found is None else
                 f"StableTopK released {have.size} keys (k̃ = {k_tilde} < k)")
        if patch.fill == "none":
            return Selection(k, have, reason=f"{first}, and in zCDP there is no patch over keys from the data "
                                             "(limited domain has no zCDP proof)")
        inside = np.zeros(scores.size, dtype=bool)
        inside[have] = True
        outside = np.flatnonzero(~inside)              # the other candidates, ascending (a mask, not a set difference)
        if patch.fill == "peel":
            return Selection(k, np.concatenate([have, select.peeling(scores, outside, steps,
                                                                     patch.peel_epsilon(steps) / g, rng)]))
        extra = self._ld(scores, outside, steps, patch.ld_epsilon(steps), patch.ld_delta, rng)
        return Selection(k, np.concatenate([have, extra]),
                         reason=f"{first}, and the limited-domain patch stopped at its ⊥ item after {extra.size} "
                                f"of the {steps} missing keys")

    def describe(self) -> str:
        """One line for the ledger history."""
        steps = " | ".join(n.describe() for n in self._node.lineage())
        return (f"{steps} | group_by{list(self._by)} | top_k(k={self.k}, score={self.score.measure.describe()}, "
                f"method={self.method!r})")

def _num(x: Fraction, digits: int = 4) -> str:
    """``x`` to ``digits`` significant digits, also beyond the float range (explain() must not fail on it).

    A tiny budget's noise scale or the grid of a sum bounded near 1e308 is a Fraction no float holds.

    Example:
        >>> _num(Fraction(1, 3)), _num(3 / Fraction(10**310)), _num(Fraction(2) ** 1100, 3)
        ('0.3333', '3E-310', '1.36E+331')

    """
    if x == 0 or Fraction(1, 10**300) < abs(x) < 10**300:
        return f"{float(x):.{digits}g}"
    return f"{Decimal(x.numerator) / Decimal(x.denominator):.{digits}G}"


LAM_LIMIT = 2**31
"""The largest regularizer λ, and the finest: λ is rounded to a denominator ≤ 2³¹. The selection scales its
int64 utilities by λ's numerator and denominator (λ = 1e-300 is 1/10³⁰⁰: it overflowed int64 after the charge)."""


def _regularizer(value: object, spelling: Spelling = CHAIN) -> Fraction:
    """λ ≥ 0 rounded to a denominator ≤ :data:`LAM_LIMIT` (public: any λ keeps the selection's privacy).

    Example:
        >>> _regularizer(1e-300), _regularizer(0.5)
        (Fraction(0, 1), Fraction(1, 2))

    """
    lam = _fraction(value, "lam", spelling)
    if lam > LAM_LIMIT:
        shown = f"{float(value):g}" if isinstance(value, Fraction) else _short(value)
        raise BoundsError(f"must be at most 2^31, got {shown}", argument="lam",
                          fix=f"{spelling.give} {spelling.arg('lam', '<at most 2^31>')} (one beyond the largest gap "
                              "already makes k̃ = k)")
    return lam.limit_denominator(LAM_LIMIT)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


def _fraction(value: object, argument: str, spelling: Spelling = CHAIN) -> Fraction:
    value = plain(value)
    fix = f"{spelling.give} {spelling.arg(argument, '<a number ≥ 0>')}"
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise BoundsError(f"expected a number, got {value!r}", argument=argument, fix=fix)
    if isinstance(value, float) and not math.isfinite(value):
        raise BoundsError(f"must be finite, got {value}", argument=argument, fix=fix)
    out = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if out < 0:
        raise BoundsError(f"must be ≥ 0, got {value}", argument=argument, fix=fix)
    return out


__all__ = ["K_LIMIT", "LAM_LIMIT", "METHODS", "Score", "Selection", "TopK", "TopKFailed", "TopKPartial", "TopKPlan",
           "TopKQuery", "gap_sensitivity", "score_of"]


class TopK:
    """The ``top_k`` query family: ``frame.group_by(...).top_k(...)`` (and SQL ``HAVING TOP_K(...)``)."""

    name = "top_k"
    attach: Literal["frame", "group_by", "both"] = "group_by"
    methods: tuple[str, ...] = METHODS
    result_types: Mapping[str, type] = MappingProxyType({"TopKFailed": TopKFailed, "TopKPartial": TopKPartial})
    takes = TopKQuery
    """What ``build`` passes its arguments to: an argument it does not take is a ``dp.SignatureError``."""

    def build(self, source: Source, /, *args: Any, **kwargs: Any) -> TopKQuery:
        """Validate the arguments (free) and build the query."""
        return TopKQuery(source, *args, **kwargs)
