"""Multi-label PATE aggregation with StableTopK (Zhu & Wang §3.4; digest ``001`` §3.8, §4.4).

Each teacher votes for any subset of the labels of a public query; per query the vote counts
``n_1..n_m`` go through Alg 2 (EM on the gaps, then the PTR test) and the released label *set* (or ⊥) is
the pseudo-label. A teacher can vote for all m labels, yet every gap moves by ≤ 1 when a teacher is
added or removed (``neighbouring="add_remove"``, the paper's analysis); if one private record can change
one teacher's whole vote vector, that is substitution and the gap sensitivity is 2 (``"substitute"``,
digest §6 P2). T queries cost T·ρ_q-zCDP with T·δ_t (approximate-zCDP composition, F6).

Noise follows the *provable* reading of the paper's experiment (§4.4): Alg 1 as the exact EM with
Gumbel scale b (ε_EM = 2g/b, ε²/8-zCDP), PTR discrete Gaussian σ. With b = 50, σ = 60, δ_t = 1e-9,
T = 600 and δ = 1e-6 this gives ε = 3.665 (the paper reports 3.6 for RNM-Gaussian σ₁ = 50, an accounting
its own Cor. 9 does not support: that gives ≈ 71).

Example:
    >>> pate = MultiLabelPATE(gumbel_scale=50, sigma=60, delta_t=1e-9)
    >>> pate.cost(600)
    ZCDP(rho=61/300, delta=6e-07)
    >>> round(pate.epsilon(600, delta=1e-6), 3)
    3.665

"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from dpframe.budgets import ZCDP
from dpframe.errors import BudgetError, PlanError, SchemaError
from dpframe.noise import RandomSource, discrete_gaussian, exponential_index_grouped
from dpframe_topk import calibrate as cal

if TYPE_CHECKING:
    from dpframe.session import Session


def _exact(value: object, argument: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction) or not value > 0:
        raise PlanError(f"must be a positive number, got {value!r}", argument=argument, fix="pass e.g. 50")
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


@dataclass(frozen=True)
class MultiLabelPATE:
    """StableTopK label-set aggregation of teacher votes; cost per query is fixed in advance."""

    gumbel_scale: Fraction
    sigma: Fraction
    delta_t: Fraction
    neighbouring: str = "add_remove"

    def __init__(self, gumbel_scale: float = 50, sigma: float = 60, delta_t: float = 1e-9,
                 neighbouring: str = "add_remove") -> None:
        object.__setattr__(self, "gumbel_scale", _exact(gumbel_scale, "gumbel_scale"))
        object.__setattr__(self, "sigma", _exact(sigma, "sigma"))
        dt = _exact(delta_t, "delta_t")
        if dt >= 1:
            raise BudgetError(f"must be < 1, got {delta_t}", argument="delta_t", fix="pass e.g. 1e-9")
        object.__setattr__(self, "delta_t", dt)
        if neighbouring not in ("add_remove", "substitute"):
            raise PlanError(f"unknown relation {neighbouring!r}", argument="neighbouring",
                            fix="use 'add_remove' (a teacher added/removed) or 'substitute' (a vote vector changes)")
        object.__setattr__(self, "neighbouring", neighbouring)

    @property
    def g(self) -> Fraction:
        """Gap sensitivity: 1 (add/remove a teacher) or 2 (one teacher's vote vector replaced)."""
        return Fraction(1 if self.neighbouring == "add_remove" else 2)

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
        """ε at total δ: ρ_T + 2√(ρ_T ln 1/(δ − T·δ_t)) (Lemma 17 with the Thm 11 typo corrected)."""
        c = self.cost(queries)
        rest = Fraction(repr(delta)) - c.delta
        if rest <= 0:
            raise BudgetError(f"δ = {delta} does not cover T·δ_t = {float(c.delta):g}", argument="delta",
                              fix="use a larger δ or a smaller delta_t")
        return cal.epsilon_from_rho(c.rho, rest)

    def release(self, votes: pl.DataFrame, rng: RandomSource, *, query: str = "query", label: str = "label",
                vote: str = "vote") -> pl.DataFrame:
        """Per query: the released label set (sorted), or null when the PTR fails. Private input, no charge.

        ``votes`` has one row per (query, label) with the number of teachers voting for the label
        (every query lists the same public labels). Use :meth:`collect` to charge a session.
        """
        for c in (query, label, vote):
            if c not in votes.columns:
                raise SchemaError(f"no column {c!r}", argument="votes", fix=f"columns are {votes.columns}")
        table = votes.sort(query, label)
        labels = table[label].unique(maintain_order=True).sort()
        m = labels.len()
        if m < 2 or table.height != m * table[query].n_unique():
            raise SchemaError("every query needs one row per label (≥ 2 labels)", argument="votes",
                              fix="fill missing (query, label) pairs with vote 0")
        counts = table[vote].to_numpy().astype(np.int64).reshape(-1, m)
        queries = table[query].unique(maintain_order=True)
        t = counts.shape[0]
        p = self.plan()
        desc = -np.sort(-counts, axis=1)
        gaps = (desc[:, :-1] - desc[:, 1:]).reshape(-1)
        k = 1 + exponential_index_grouped(gaps, p.em_scale, rng, np.arange(0, t * (m - 1) + 1, m - 1))
        q = desc[np.arange(t), k - 1] - desc[np.arange(t), k]
        z = discrete_gaussian(p.ptr_scale, t, rng)
        passed = np.maximum(q, int(p.g)) + z > p.threshold()
        order = np.argsort(-counts, axis=1, kind="stable")
        names = labels.to_list()
        sets = [sorted(names[j] for j in order[i, :k[i]]) if passed[i] else None for i in range(t)]
        return pl.DataFrame({query: queries, "labels": pl.Series("labels", sets, dtype=pl.List(labels.dtype)),
                             "k": k.astype(np.int64)})

    def collect(self, session: Session, votes: pl.DataFrame, **columns: str) -> pl.DataFrame:
        """Charge ``session`` the cost of ``votes``' queries (a zCDP session), then :meth:`release`."""
        if session.accountant.notion != "zcdp":
            raise BudgetError("multi-label PATE is accounted in approximate zCDP", argument="session",
                              fix="open the session with a dp.ZCDP(rho, delta) budget")
        t = votes[columns.get("query", "query")].n_unique()
        return session._charged(self.cost(t), f"multilabel_pate(T={t})", "pate:stable_topk",
                                lambda: self.release(votes, session.rng, **columns))
