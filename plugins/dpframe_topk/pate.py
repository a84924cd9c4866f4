"""Multi-label PATE aggregation with StableTopK (Zhu & Wang §3.4; digest ``001`` §3.8, §4.4).

Each teacher votes for any subset of the labels of a public query; per query the vote counts
``n_1..n_m`` go through Alg 2 (EM on the gaps, then the PTR test) and the released label *set* (or ⊥) is
the pseudo-label. T queries cost T·ρ_q-zCDP with T·δ_t (approximate-zCDP composition, F6); in an RDP/PLD
session they are charged their curves (T bounded-range EM steps and T δ_t-approximate Gaussian PTRs).
The vote table is validated (columns, integer and non-negative votes, one row per (query, label)) before
anything is charged.

**What is protected** (``privacy_unit``, digest §6 P2):

* ``"record"`` (the default) — one training record added or removed. A teacher trained on one record more
  or less may change its *whole* vote vector (any labels on, any off), so every count moves by ≤ 1 in
  either direction and every sorted gap by ≤ 2: gap sensitivity g = 2. This is what "PATE protects the
  training data" means, and what a user of a private aggregation expects by default (teachers trained on
  disjoint partitions: a record reaches one teacher).
* ``"teacher"`` — one whole teacher added or removed (the paper's analysis): every count moves by ≤ 1 in
  the same direction, so every gap moves by ≤ 1 (g = 1). It does **not** protect a record: changing one
  record changes one teacher's vote vector, which is a removal *and* an addition of a teacher. For the
  pair below (one teacher's vote moving from {2} to {1, 3..40}) the exact δ at the teacher-level ε is
  over 1000× the claimed one (``tests/topk/test_pate_record_level.py``).

The noise is set by ``gumbel_scale`` and ``sigma`` in vote units whatever the unit is; the unit sets g, so
the EM on the gaps is ε_EM = 2g/b-bounded-range and the PTR's noisy gap has sensitivity g.

Noise follows the *provable* reading of the paper's experiment (§4.4): Alg 1 as the exact EM with
Gumbel scale b (ε_EM = 2g/b, ε²/8-zCDP), PTR discrete Gaussian σ. With b = 50, σ = 60, δ_t = 1e-9 and
T = 600 the record-level cost is ρ = 61/75, i.e. ε = 7.124 at δ = 1e-6 (teacher level: ρ = 61/300,
ε = 3.278), with the optimal zCDP → (ε, δ) conversion (:func:`dpframe.budgets.zcdp_epsilon`, Canonne,
Kamath & Steinke 2020; the classic ρ + 2√(ρ ln 1/δ) gives 7.736 / 3.665). The paper reports 3.6 for an
RNM-Gaussian first step, which this code does not run and whose own Cor. 9 gives ≈ 71.

Example:
    >>> pate = MultiLabelPATE(gumbel_scale=50, sigma=60, delta_t=1e-9)       # protects one record
    >>> pate.cost(600)
    ZCDP(rho=61/75, delta=6e-07)
    >>> round(pate.epsilon(600, delta=1e-6), 3)
    7.124
    >>> round(MultiLabelPATE(privacy_unit="teacher").epsilon(600, delta=1e-6), 3)
    3.278

"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from dpframe.accounting import curves
from dpframe.accounting.curves import PrivacyCurve
from dpframe.budgets import ZCDP, ApproxDP, PureDP, exact, up, zcdp_epsilon
from dpframe.errors import BudgetConversionError, BudgetError, PlanError, SchemaError
from dpframe.family import guarantee
from dpframe.noise import MAX_GAUSSIAN_SIGMA2, RandomSource, discrete_gaussian, exponential_index_grouped
from dpframe.privacy_unit import RELATIONS
from dpframe.sealed import plain
from dpframe_topk import calibrate as cal
from dpframe_topk.budgeting import repeat

if TYPE_CHECKING:
    from dpframe.session import Session


def _exact(value: object, argument: str) -> Fraction:
    value = plain(value)      # its value, not its methods: Fraction(x) keeps an int subclass as its numerator
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction) or not value > 0:
        raise PlanError(f"must be a positive number, got {value!r}", argument=argument, fix="pass e.g. 50")
    exact = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if not _TINY <= exact <= _HUGE:   # explain() and the curves read it as a float: an OverflowError, once charged
        raise PlanError(f"must be a float64 number between 5e-324 and 1.8e308, got {_shown(exact)}", argument=argument,
                        fix="pass e.g. 50")
    return exact


_TINY, _HUGE = Fraction(2) ** -1074, Fraction(np.finfo(np.float64).max)


def _float(x: Fraction) -> float:
    """``x`` as a float, ``inf`` beyond float64 (2g/b for b near 5e-324)."""
    return float(x) if x <= _HUGE else math.inf


def _shown(x: Fraction) -> str:
    """``x`` in a few characters, also when its parts have more digits than ``str`` writes (4,300)."""
    return f"about 2^{x.numerator.bit_length() - x.denominator.bit_length()}"


#: What each privacy unit of :class:`MultiLabelPATE` protects, and its gap sensitivity g.
UNITS: Mapping[str, tuple[str, int]] = MappingProxyType({
    "record": ("one training record added or removed (its teacher's whole vote vector may change), if the teachers "
               "were trained on disjoint partitions: a record reaching several teachers is not covered", 2),
    "teacher": ("one whole teacher added or removed (not a record: a changed record changes a teacher's votes)", 1)})


@dataclass(frozen=True)
class MultiLabelPATE:
    """StableTopK label-set aggregation of teacher votes; cost per query is fixed in advance."""

    gumbel_scale: Fraction
    sigma: Fraction
    delta_t: Fraction
    privacy_unit: str = "record"

    def __init__(self, gumbel_scale: float = 50, sigma: float = 60, delta_t: float = 1e-9,
                 privacy_unit: str = "record") -> None:
        object.__setattr__(self, "gumbel_scale", _exact(gumbel_scale, "gumbel_scale"))
        sigma_ = _exact(sigma, "sigma")
        if sigma_**2 > MAX_GAUSSIAN_SIGMA2:     # public: refused here, not by the sampler after the charge
            raise PlanError(f"must be at most 2^55 votes (the exact discrete Gaussian sampler's range), got {sigma}",
                            argument="sigma", fix="pass a smaller sigma (the paper's is 60)")
        object.__setattr__(self, "sigma", sigma_)
        dt = _exact(delta_t, "delta_t")
        if dt >= 1:
            raise BudgetError(f"must be < 1, got {delta_t}", argument="delta_t", fix="pass e.g. 1e-9")
        object.__setattr__(self, "delta_t", dt)
        privacy_unit = plain(privacy_unit)      # a str subclass could answer the lookups of g differently
        if privacy_unit not in UNITS:
            raise PlanError(f"unknown privacy unit {privacy_unit!r}", argument="privacy_unit",
                            fix="use 'record' (the default: one training record, gap sensitivity 2) or 'teacher' "
                                "(one whole teacher added or removed, gap sensitivity 1)")
        object.__setattr__(self, "privacy_unit", privacy_unit)

    @property
    def g(self) -> Fraction:
        """Gap sensitivity: 2 (a record: one teacher's vote vector changes) or 1 (a teacher added/removed)."""
        return Fraction(UNITS[self.privacy_unit][1])

    def protects(self) -> str:
        """The protected unit in words (shown by :meth:`explain` and in the session history)."""
        return f"{self.privacy_unit}: {UNITS[self.privacy_unit][0]}"

    def plan(self) -> cal.StablePlan:
        """The per-query Alg 2 parameters: EM ε = 2g/b on the gaps, PTR σ² = σ², shift ≥ σ√(2 ln 1/δ_t)."""
        s2 = self.sigma**2
        return cal.StablePlan(2 * self.g / self.gumbel_scale, "gaussian", s2, cal.gaussian_shift(s2, self.delta_t),
                              self.delta_t, self.g)

    def query_rho(self) -> Fraction:
        """ρ per query: ε_EM²/8 (bounded range) + g²/(2σ²) (PTR)."""
        p = self.plan()
        return p.em_epsilon**2 / 8 + self.g**2 / (2 * self.sigma**2)

    def cost(self, queries: int) -> ZCDP:
        """T queries: δ_t·T-approximate T·ρ-zCDP (exact)."""
        if isinstance(queries, bool) or not isinstance(queries, int) or queries < 1:
            raise PlanError(f"must be a whole number ≥ 1, got {queries!r}", argument="queries", fix="pass T")
        return ZCDP(queries * self.query_rho(), queries * self.delta_t)

    def epsilon(self, queries: int, delta: float) -> float:
        """ε at total δ: the optimal conversion of ρ_T-zCDP at δ − T·δ_t (:func:`~dpframe.budgets.zcdp_epsilon`)."""
        c = self.cost(queries)
        rest = exact(delta, "delta") - c.delta
        if rest <= 0:
            raise BudgetError(f"δ = {delta} does not cover T·δ_t = {float(c.delta):g}", argument="delta",
                              fix="use a larger δ or a smaller delta_t")
        try:
            return float(zcdp_epsilon(c.rho, rest))
        except OverflowError:       # ε beyond floats (a σ or Gumbel scale near 5e-324)
            return math.inf

    def curves(self, queries: int) -> list[PrivacyCurve]:
        """The privacy curves of ``queries`` queries (for RDP/PLD sessions): T EM steps + the T PTR tests.

        Each query: the EM on the gaps is ε_EM-bounded-range; its PTR is δ_t-approximately g²/(2σ²)-zCDP.
        """
        self.cost(queries)                                   # validates queries
        em = curves.exponential(up(self.plan().em_epsilon))
        return [*repeat(em, queries), curves.zcdp(up(queries * self.g**2 / (2 * self.sigma**2)),
                                                  up(queries * self.delta_t))]

    def charge(self, session: Session, queries: int) -> Any:
        """What ``session`` reserves for ``queries`` queries: ZCDP(T·ρ, T·δ_t), or the curves (RDP/PLD)."""
        cost = self.cost(queries)
        try:
            charged = session.accountant.charge(cost)
        except BudgetConversionError:
            raise BudgetConversionError(
                f"multi-label PATE is accounted in approximate zCDP / RDP, which the session's "
                f"{session.accountant.name!r} accountant cannot charge", argument="session",
                fix="open the session with a dp.ZCDP(rho, delta) budget (accountant 'zcdp'), or with dp.ApproxDP and "
                    "accountant='rdp' or 'pld'") from None
        if isinstance(charged, ZCDP | ApproxDP | PureDP):
            return charged
        return session.accountant.charge_plan(cost, self.curves(queries))

    def explain(self, queries: int, delta: float = 1e-6, format: str = "text") -> Any:
        """What ``queries`` queries protect, run and cost, as text or a dict. Free: reads no votes, charges nothing.

        ``delta`` is where the ε is read (it must exceed T·δ_t).
        """
        if format not in ("text", "json"):
            raise PlanError(f"unknown format {format!r}", argument="format", fix="use 'text' or 'json'")
        cost, p = self.cost(queries), self.plan()
        data = {"queries": queries, "privacy_unit": self.privacy_unit, "protects": UNITS[self.privacy_unit][0],
                "gap_sensitivity": int(self.g), "em_epsilon": _float(p.em_epsilon),
                "gumbel_scale": float(self.gumbel_scale), "sigma": float(self.sigma), "delta_t": float(self.delta_t),
                "threshold": int(p.threshold()), "cost": repr(cost), "delta": delta,
                "epsilon": self.epsilon(queries, delta)}
        if format == "json":
            return data
        lines = [f"multi-label PATE: {queries} public queries, StableTopK on each query's label vote counts",
                 f"privacy unit: {self.protects()}; gap sensitivity g = {data['gap_sensitivity']}",
                 f"protects: {RELATIONS[self.privacy_unit]} (not the session's privacy unit); guarantee: "
                 f"{guarantee(cost)} (T·δ_t is its δ)",
                 f"  Alg 1: exact EM on the sorted vote gaps, Gumbel scale {data['gumbel_scale']:g} votes "
                 f"(ε_EM = 2g/b = {data['em_epsilon']:g}, bounded range: ε_EM²/8-zCDP)",
                 f"  PTR: discrete Gaussian σ = {data['sigma']:g} votes, δ_t = {data['delta_t']:g}; releases the top-k "
                 f"label set iff max{{g, gap}} + noise > {data['threshold']} votes",
                 f"cost: {cost!r} (T·(ε_EM²/8 + g²/(2σ²)) with T·δ_t), charged in full also for ⊥; "
                 f"ε = {data['epsilon']:.4g} at δ = {delta:g} (optimal zCDP → (ε, δ) conversion)",
                 "output: per query the released label set, or null when the PTR fails, and the EM's k"]
        if self.privacy_unit == "teacher":
            lines.append("note: teacher level does not protect a training record (a changed record changes one "
                         "teacher's whole vote vector); use privacy_unit='record' for that")
        return "\n".join(lines)

    def release(self, votes: pl.DataFrame, rng: RandomSource, *, query: str = "query", label: str = "label",
                vote: str = "vote") -> pl.DataFrame:
        """Per query: the released label set (sorted), or null when the PTR fails. Private input, no charge.

        ``votes`` has one row per (query, label) with the number of teachers voting for the label
        (every query lists the same public labels). Use :meth:`collect` to charge a session.
        """
        return self._release(_vote_table(votes, query, label, vote), rng, query)

    def _release(self, table: _Votes, rng: RandomSource, query: str) -> pl.DataFrame:
        """:meth:`release` of a vote table read and validated once (:func:`_vote_table`)."""
        queries, names, label_dtype, counts = table
        t, m = counts.shape
        p = self.plan()
        desc = -np.sort(-counts, axis=1)
        gaps = (desc[:, :-1] - desc[:, 1:]).reshape(-1)
        k = 1 + exponential_index_grouped(gaps, p.em_scale, rng, np.arange(0, t * (m - 1) + 1, m - 1))
        q = desc[np.arange(t), k - 1] - desc[np.arange(t), k]
        z = discrete_gaussian(p.ptr_scale, t, rng)
        passed = np.maximum(q, int(p.g)) + z > p.threshold()
        order = np.argsort(-counts, axis=1, kind="stable")
        sets = [sorted(names[j] for j in order[i, :k[i]]) if passed[i] else None for i in range(t)]
        return pl.DataFrame({query: queries, "labels": pl.Series("labels", sets, dtype=pl.List(label_dtype)),
                             "k": k.astype(np.int64)})

    def collect(self, session: Session, votes: pl.DataFrame, **columns: str) -> pl.DataFrame:
        """Validate ``votes`` and charge ``session`` (nothing is charged on bad input), then :meth:`release`.

        Sessions: zCDP (charged ZCDP(T·ρ, T·δ_t)), or ``accountant="rdp"`` / ``"pld"`` (charged the curves);
        a basic (ε, δ) session cannot express the zCDP cost and is refused.

        Protects: add/remove one training record (``privacy_unit="record"``, the default; teachers trained on
        disjoint partitions) or one teacher (``"teacher"``) — NOT the session's privacy unit: the votes are
        passed in and no table is read. Guarantee: δ-approximate ρ-zCDP, ZCDP(T·ρ, T·δ_t) (:meth:`cost`).
        """
        unknown = set(columns) - {"query", "label", "vote"}
        if unknown:
            raise PlanError(f"unknown argument(s) {sorted(unknown)}", argument=sorted(unknown)[0],
                            fix="pass query=, label= and/or vote= (column names)")
        table = _vote_table(votes, **columns)     # read once: the run releases the queries that were charged
        t = len(table[3])
        cost = self.charge(session, t)
        return session._release.release(cost, f"multilabel_pate(T={t}, privacy_unit={self.privacy_unit!r})",
                                        f"pate:stable_topk protecting {self.protects()}; gap sensitivity {int(self.g)}",
                                        lambda reader: self._release(table, session.rng, columns.get("query", "query")),
                                        tables=frozenset())      # the votes are passed in: no table is read


OUTPUTS = ("labels", "k")
"""The output columns beside the query column (which must be named otherwise)."""

MAX_VOTES = 2**62
"""The largest vote count accepted: counts are computed in int64, with room for the PTR's noise beside them."""

_Votes = tuple[pl.Series, list[Any], pl.DataType, np.ndarray]
"""A validated vote table: (queries, label names, label dtype, T × m vote counts)."""


def _vote_table(votes: object, query: str = "query", label: str = "label", vote: str = "vote") -> _Votes:
    """(queries, label names, label dtype, T × m vote counts) of a validated vote table; SchemaError otherwise."""
    if not isinstance(votes, pl.DataFrame):
        raise SchemaError(f"expected a polars DataFrame, got {type(votes).__name__}", argument="votes",
                          fix="pass a pl.DataFrame with one row per (query, label) and an integer vote count")
    for argument, c in (("query", query), ("label", label), ("vote", vote)):
        if not isinstance(c, str) or c not in votes.columns:
            raise SchemaError(f"no column {c!r}", argument=argument, fix=f"pass {argument}= one of {votes.columns}")
    if query in OUTPUTS:
        raise SchemaError(f"the query column {query!r} has the name of an output column {list(OUTPUTS)}",
                          argument="query", fix=f"rename it first: votes.rename({{{query!r}: 'query'}})")
    if not votes.schema[vote].is_integer():
        raise SchemaError(f"votes must be whole numbers of teachers, got dtype {votes.schema[vote]}", argument="vote",
                          fix=f"cast it: votes.with_columns(pl.col({vote!r}).cast(pl.Int64)) (after rounding)")
    table = votes.select(query, label, vote)
    if table.null_count().sum_horizontal().item():
        raise SchemaError("the vote table has nulls", argument="votes", fix="fill missing votes with 0 and drop rows "
                                                                            "without a query or label")
    if table.height and int(table[vote].min()) < 0:  # type: ignore[arg-type]
        raise SchemaError("vote counts must be ≥ 0", argument="vote", fix="pass the number of teachers per label")
    if table.height and int(table[vote].max()) > MAX_VOTES:  # type: ignore[arg-type]
        raise SchemaError(f"a vote count is above 2^62 ({int(table[vote].max())})",  # type: ignore[arg-type]
                          argument="vote", fix="pass the number of teachers per label (a UInt64 count above 2^63 "
                                               "would wrap to a negative int64)")
    if table.select(query, label).is_duplicated().any():
        raise SchemaError("a (query, label) pair appears twice", argument="votes", fix="sum duplicate rows first")
    table = table.sort(query, label)
    labels = table[label].unique(maintain_order=True).sort()
    m = labels.len()
    n = table[query].n_unique()
    if m < 2 or table.height != m * n:
        raise SchemaError("every query needs one row per label (≥ 2 labels)", argument="votes",
                          fix="fill missing (query, label) pairs with vote 0")
    counts = table[vote].to_numpy().astype(np.int64).reshape(-1, m)
    return table[query].unique(maintain_order=True), labels.to_list(), labels.dtype, counts
