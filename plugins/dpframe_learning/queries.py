"""The learning queries behind ``Frame.interior_point``, ``Frame.learn_threshold`` and ``Frame.learn_rectangle``.

Three query families (``dpframe.family``), registered through ``dpframe_query_families``: construction
validates columns, types and bounds (free); ``explain(budget)`` and ``cost(budget)`` plan from public
information only (free); the core's ``collect(budget)`` reserves the exact cost, hands the plan's ``run``
the private reader once, and returns a result or :class:`NoAnswer`.

**Row counts are private**, so every query spends a tenth of its ε on a noisy row count (discrete
Laplace, sensitivity ``max_rows``) and answers only when that count clears the rows the algorithm needs
plus a margin ``⌈(max_rows/ε_c)·ln(1/β)⌉``: with fewer rows than needed it answers with probability
≤ β. Otherwise it returns :class:`NoAnswer` — itself a DP output, charged in full. A query that
cannot work for *any* number of rows (TreeLog without δ, an RSC plan with several rows per unit) is
refused before anything is charged.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"x": list(range(300, 700))})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2), seed=1)
    >>> q = sess.table("t").interior_point("x", bounds=(0, 10_000))
    >>> q.cost(dp.PureDP(1))
    PureDP(epsilon=1)
    >>> 300 <= q.collect(dp.PureDP(1)).value <= 699
    True

"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe import accounting as acc
from dpframe.accounting.checks import shown
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP, describe, down, up
from dpframe.domains import OrderedDomain
from dpframe.errors import ArgumentError, BudgetError, PlanError, SchemaError, one_of
from dpframe.family import Explain, FamilyPlan, Source
from dpframe.mechanism import SortedCodes, Statistic, statistic_values
from dpframe.noise import RandomSource, discrete_laplace
from dpframe.noise.exponential import epsilon_from_rho
from dpframe.plan.nodes import Filter, Node
from dpframe.planning import budget_of
from dpframe_learning.interior_point import (
    ALGORITHMS,
    Exponential,
    InteriorPointAlgorithm,
    Stability,
    algorithms,
    listing_ranks,
    privacy_curves,
    within_sampler,
    zcdp_epsilon,
)
from dpframe_learning.learners import (
    Direction,
    Labelled,
    choose_direction,
    learn_rectangle_codes,
    learn_threshold_codes,
)
from dpframe_learning.slicing import SlicePlan, sequential_cost, slice_plan

if TYPE_CHECKING:
    from dpframe.release import PrivateReader

GATE_SHARE = Fraction(1, 10)
"""The noisy row count's share of a query's budget (of ε, or of ρ under zCDP)."""
DIRECTION_SHARE = Fraction(1, 10)
"""``learn_threshold(positive="auto")``: the direction's share of the budget (of ε, or of ρ)."""
R = TypeVar("R")


# ----------------------------------------------------------------------------------------------- results

@dataclass(frozen=True)
class NoAnswer:
    """The DP "no answer": the noisy row count was too small for the algorithm's guarantee.

    It is a differentially private output (it depends on the data only through the noisy count) and
    the query's cost stays charged. ``required_rows`` is the row count the algorithm needs;
    ``reliable_rows`` is where the gate passes with probability ≥ 1 − β. Falsy, so ``if result:`` works.
    """

    reason: str
    required_rows: int
    reliable_rows: int

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class InteriorPoint:
    """A private point of the column's grid between its smallest and largest value (w.p. ≥ 1 − β).

    Precisely: between the grid points nearest min(column) and max(column) — on an integer column
    without ``resolution``, min ≤ value ≤ max.
    """

    column: str
    value: Any
    method: str


@dataclass(frozen=True)
class Threshold:
    """A threshold classifier: one cut ``threshold`` on ``feature``.

    ``positive="below"`` predicts 1 iff x < threshold, ``"above"`` iff x ≥ threshold, with x first
    clamped to ``bounds`` (as in training). This is exactly the classifier learned on the feature's
    grid cells, for every input: :meth:`expr` evaluates it in the same arithmetic as the encoding. A
    null (or NaN) feature gets a null prediction.
    """

    feature: str
    threshold: Any
    positive: Direction
    bounds: tuple[Any, Any]
    domain: OrderedDomain = field(repr=False, compare=False)
    cut: int = field(repr=False)            # the cell code where the cut lies: code(x) ≥ cut ⇔ x ≥ threshold

    def expr(self) -> pl.Expr:
        """The classifier as a Polars expression (1 = positive, null for a null/NaN feature)."""
        above = self.domain.at_least(self.cut)
        inside = above if self.positive == "above" else ~above
        return inside.cast(pl.Int8).alias("prediction")

    def predict(self, values: Sequence[Any] | pl.Series | npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Predicted labels of ``values`` (int8; float with NaN where a value is null or NaN)."""
        frame = pl.DataFrame({self.feature: pl.Series(values)})
        return frame.select(self.expr()).to_series().to_numpy()


@dataclass(frozen=True)
class Rectangle:
    """An axis-aligned box: predicts 1 iff ``lower ≤ x < upper`` for every feature (empty: never).

    Each feature is clamped to its ``bounds`` first (as in training); like :class:`Threshold` this is
    exactly the box learned on the grid cells, for every input.
    """

    intervals: dict[str, tuple[Any, Any]]
    empty: bool
    bounds: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    cells: tuple[tuple[OrderedDomain, int, int], ...] = field(default=(), repr=False, compare=False)

    def expr(self) -> pl.Expr:
        """The classifier as a Polars expression (1 = inside the box)."""
        inside = pl.lit(not self.empty)
        for domain, first, last in self.cells:
            inside = inside & domain.at_least(first) & ~domain.at_least(last + 1)
        return inside.cast(pl.Int8).alias("prediction")

    def predict(self, frame: pl.DataFrame) -> npt.NDArray[Any]:
        """Predicted labels of the rows of ``frame`` (which has the feature columns)."""
        return frame.select(self.expr()).to_series().to_numpy()


# ----------------------------------------------------------------------------------------------- planning

@dataclass(frozen=True)
class Allowance:
    """A learning query's budget, as what each part of it may spend.

    Parts take *shares* of the budget: of ε under pure or approximate DP (basic composition adds the
    ε's), of ρ under zCDP (zCDP adds the ρ's). A share becomes the part's ε through the part's own
    zCDP guarantee: a noisy count (discrete Laplace, pure ε-DP) is ε²/2-zCDP; an exponential
    mechanism is ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers 2021) — the same tight conversion as
    the quantile mechanism's. Both are rounded down, so the parts never spend more than the budget.

    Example:
        >>> a = Allowance.of(ZCDP(Fraction(1, 2)))        # the gate: √(2ρ/10); an EM with the rest: √(8·9ρ/10)
        >>> round(float(a.pure(GATE_SHARE)), 6), round(float(a.bounded_range(1 - GATE_SHARE)), 6)
        (0.316228, 1.897367)

    """

    epsilon: Fraction
    delta: Fraction
    rho: Fraction | None = None

    @classmethod
    def of(cls, budget: object) -> Allowance:
        """Validate a query budget: dp.PureDP, dp.ApproxDP or dp.ZCDP (below 1e300, as every query's).

        A zCDP budget's δ is not used (no learning mechanism is approximate zCDP), so it is not charged: the rule
        of ``agg``, which charges ``dp.ZCDP(rho, delta)`` the ρ of its Gaussian noise and the δ only of a
        partition selection.
        """
        if isinstance(budget, PureDP | ApproxDP | ZCDP):
            budget_of(budget)
        if isinstance(budget, PureDP):
            return cls(budget.epsilon, Fraction(0))
        if isinstance(budget, ApproxDP):
            return cls(budget.epsilon, budget.delta)
        if isinstance(budget, ZCDP):
            return cls(Fraction(0), Fraction(0), budget.rho)
        raise BudgetError(f"expected dp.PureDP, dp.ApproxDP or dp.ZCDP, got {budget!r}", argument="budget",
                          fix="pass budget=dp.PureDP(1) (or dp.ApproxDP(1, 1e-7) for TreeLog / RSC)")

    def _nonzero(self, eps: Fraction) -> Fraction:
        if eps <= 0:
            raise BudgetError(f"ρ = {self.rho} is too small for this query", argument="budget",
                              fix="give a larger budget")
        return eps

    def pure(self, share: Fraction) -> Fraction:
        """The ε of a pure-DP part (a noisy count) given ``share`` of the budget."""
        if self.rho is None:
            return self.epsilon * share
        return self._nonzero(epsilon_from_rho(self.rho * share, bounded_range=False, bits=32))

    def bounded_range(self, share: Fraction) -> Fraction:
        """The ε of an exponential-mechanism part given ``share`` of the budget."""
        if self.rho is None:
            return self.epsilon * share
        return self._nonzero(epsilon_from_rho(self.rho * share, bounded_range=True, bits=32))

    def algorithm(self, algorithm: InteriorPointAlgorithm, share: Fraction, size: int) -> Fraction | None:
        """The ε an interior-point algorithm runs at with ``share`` of the budget (None: not under zCDP)."""
        if self.rho is None:
            return self.epsilon * share
        eps = zcdp_epsilon(algorithm, self.rho * share, size)
        return None if eps is None or eps <= 0 else eps

    def cost(self, delta: Fraction = Fraction(0)) -> Budget:
        """What the query charges: the whole budget (with the δ actually used)."""
        if self.rho is not None:
            return ZCDP(self.rho)
        return ApproxDP(self.epsilon, delta) if delta else PureDP(self.epsilon)

    def describe(self) -> str:
        return f"ρ={_f(self.rho)} (zCDP)" if self.rho is not None else f"ε={_f(self.epsilon)}"


MIN_PROBABILITY = 1e-100
"""The smallest β (and ξ) a learning query takes: the row requirements divide by it in floats (|X|/β, 8/ξ), and
a subnormal one made them ∞ — a raw OverflowError from ``cost()``. No guarantee needs a smaller one."""


def check_beta(beta: object) -> float:
    """β, the failure probability the row requirements are computed for: a float in [10⁻¹⁰⁰, 1/2]."""
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not MIN_PROBABILITY <= beta <= 0.5:
        raise ArgumentError(f"beta must be in [1e-100, 0.5], got {shown(beta)}", argument="beta",
                            fix="pass e.g. beta=1e-6")
    return float(beta)


@dataclass(frozen=True)
class Gate:
    """The noisy row-count check: answer iff n + DLap(rows/ε_c) ≥ required + margin."""

    epsilon: Fraction
    rows: int
    beta: float
    required: int

    def __post_init__(self) -> None:
        if not within_sampler(self.scale):     # refused while planning, as Noise.calibrate refuses
            raise BudgetError(f"ε = {float(self.epsilon):.3g} for the noisy row count is so small that its noise "
                              "scale exceeds what the exact sampler supports", argument="budget",
                              fix="give the query a larger budget")

    @property
    def scale(self) -> Fraction:
        return self.rows / self.epsilon

    @property
    def margin(self) -> int:
        return math.ceil(float(self.scale) * math.log(1 / self.beta))

    @property
    def reliable(self) -> int:
        return self.required + 2 * self.margin

    def passes(self, n: int, rng: RandomSource) -> bool:
        return n + int(discrete_laplace(self.scale, 1, rng)[0]) >= self.required + self.margin

    def curve(self) -> acc.PrivacyCurve:
        """Discrete Laplace of scale rows/ε_c on a count of sensitivity ``rows``."""
        return acc.discrete_laplace(down(self.scale), self.rows)

    def no_answer(self, what: str) -> NoAnswer:
        return NoAnswer(f"the noisy count of {what} was below the {self.required} rows the guarantee needs "
                        f"(+ a noise margin of {self.margin})", self.required, self.reliable)

    def describe(self, what: str) -> str:
        return (f"noisy count of {what} (ε={_f(self.epsilon)}, discrete Laplace scale {_f(self.scale)}); "
                f"answers iff it is ≥ {self.required} + {self.margin}; reliable from {self.reliable} rows")

    def answers(self) -> str:
        """The gate's part of every guarantee."""
        return (f"it answers with probability ≤ {self.beta:g} below {self.required} rows and ≥ 1 − {self.beta:g} "
                f"from {self.reliable} rows; otherwise NoAnswer (charged)")


def _f(x: Fraction | None) -> str:
    if x is None:
        return "-"
    return str(x) if x.denominator < 1000 else f"{float(x):.4g}"


@dataclass
class LearningPlan:
    """A planned learning query: what runs, its exact cost, and the text explain() shows."""

    budget: Budget
    cost: Budget
    session_cost: acc.SessionCost
    mechanisms: str
    details: list[str]
    guarantee: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Plan:
    """What a query's ``_plan`` returns (its ``curves``: the parts' privacy curves, None if some part has none)."""

    cost: Budget
    mechanisms: str
    details: list[str]
    guarantee: str
    params: dict[str, Any]
    curves: list[acc.PrivacyCurve] | None


class LearningQuery(Generic[R]):
    """Shared planning for learning queries (subclasses plan and run); the core explains, costs and collects."""

    def __init__(self, source: Source) -> None:
        self._source = source
        self._node: Node = source.node
        self._rows = source.unit.max_rows

    def describe(self) -> str:
        raise NotImplementedError

    def _plan(self, allowance: Allowance) -> _Plan:
        raise NotImplementedError

    def _run(self, params: dict[str, Any], reader: PrivateReader, rng: RandomSource) -> R | NoAnswer:
        raise NotImplementedError

    def plan(self, budget: object) -> FamilyPlan[R | NoAnswer]:
        """Plan under ``budget`` (free; raises a dpframe error, uncharged, if it cannot run).

        The session is charged from the parts' privacy curves where every part declares one (RDP/PLD
        sessions: exponential mechanisms as bounded-range, noisy counts as discrete Laplace), else from
        the cost.
        """
        allowance = Allowance.of(budget)
        assert isinstance(budget, PureDP | ApproxDP | ZCDP)
        b: Budget = budget
        p = self._plan(allowance)
        charged = self._source.context.accountant.charge_plan(p.cost, p.curves)
        detail = LearningPlan(b, p.cost, charged, p.mechanisms, p.details, p.guarantee, p.params)
        steps = (*(n.describe() for n in self._node.lineage()), f"ContributionBound: {self._source.unit.describe()}",
                 self.describe())
        lines = (f"mechanisms: {p.mechanisms}", *(f"  {d}" for d in p.details), f"guarantee: {p.guarantee}",
                 "no answer: returns dp NoAnswer (cost charged) when the noisy row count is below the requirement")
        explain = Explain("dpframe learning query", steps, lines,
                          data={"mechanisms": p.mechanisms, "details": p.details, "guarantee": p.guarantee})
        params = p.params
        return FamilyPlan(b, p.cost, charged, p.mechanisms, explain,
                          lambda reader, rng: self._run(params, reader, rng), detail=detail)

    @staticmethod
    def _groups(reader: PrivateReader, node: Node, columns: Sequence[str]) -> pl.DataFrame:
        """Distinct value combinations of ``columns`` with their row counts, after contribution bounding.

        Private: only inside :meth:`_run`. Rows with a null or NaN in any of ``columns`` are dropped.
        """
        stats = reader.statistics(node, (Statistic("rows"),), by=tuple(columns))
        schema = stats.schema
        keep = [pl.col(c).is_not_null() & (~pl.col(c).is_nan() if schema[c].is_float() else pl.lit(True))
                for c in columns]
        return stats.filter(pl.all_horizontal(keep)) if keep else stats


def _column(source: Source, column: object, argument: str) -> str:
    if not isinstance(column, str) or column not in source.schema:
        raise SchemaError(f"unknown column {column!r}", argument=argument, fix=one_of(column, source.schema))
    if column == source.unit.column:
        raise SchemaError(f"{column!r} is the privacy-unit column", argument=argument,
                          fix="learn from another column")
    return column


def _label(source: Source, label: object) -> str:
    name = _column(source, label, "label")
    dtype = source.schema[name]
    if not (dtype == pl.Boolean or dtype.is_integer()):
        raise SchemaError(f"label column {name!r} has type {dtype}; it must be bool or an integer 0/1 column",
                          argument="label", fix=f"derive one, e.g. .with_columns(y=(pl.col({name!r}) == ...))")
    return name


def _binary(source: Source, label: str) -> Node:
    """Keep rows whose label is 0/1 (or false/true); other labels and nulls are dropped (row-level)."""
    return Filter.of(source.node, pl.col(label).cast(pl.Int64, strict=False).is_in([0, 1]))


def _method(method: object, known: Mapping[str, InteriorPointAlgorithm]) -> str:
    if not isinstance(method, str) or (method != "auto" and method not in known):
        raise PlanError(f"unknown method {method!r}", argument="method",
                        fix=f"use 'auto' or one of {sorted(known)}")
    return str(method)


@dataclass(frozen=True)
class _Requirement:
    """One interior-point method under a query budget: the ε it runs at and the rows it needs (None: unusable)."""

    epsilon: Fraction | None
    rows: int | None
    why: str = ""
    experimental: bool = False


def _requirements(known: Mapping[str, InteriorPointAlgorithm], allowance: Allowance, share: Fraction, beta: float,
                  size: int, stability: Stability) -> dict[str, _Requirement]:
    out = {}
    for name, a in known.items():
        eps = allowance.algorithm(a, share, size)
        if eps is None:
            out[name] = _Requirement(None, None, "not available: no zCDP guarantee (it needs an (ε, δ) budget)")
            continue
        rows = a.min_rows(eps, allowance.delta, beta, size, stability)
        why = "" if rows is not None else (
            "not available: the budget is too small (its noise would exceed the exact sampler's range)"
            if not a.approximate else "not available: needs an (ε, δ) budget with δ > 0" if allowance.delta == 0
            else "not available: its accounting needs one row per privacy unit (max_rows=1)")
        out[name] = _Requirement(eps, rows, why, bool(getattr(a, "experimental", False)))
    return out


def _pick(method: str, reqs: Mapping[str, _Requirement]) -> str:
    if method == "auto":       # never an experimental method: those run only when named
        usable = {k: v.rows for k, v in reqs.items() if v.rows is not None and not v.experimental}
        if not usable:
            raise BudgetError("no interior-point method can run at this budget: "
                              + "; ".join(f"{k}: {v.why}" for k, v in reqs.items()), argument="budget",
                              fix="give the query a larger budget")
        return min(usable, key=lambda k: (usable[k], k))
    if reqs[method].rows is None:
        raise PlanError(f"method {method!r} is {reqs[method].why}", argument="method",
                        fix="use method='auto', or give the query dp.ApproxDP(epsilon, delta) (in a session whose "
                            "total is an (ε, δ) budget)")
    return method


def _table(reqs: Mapping[str, _Requirement], chosen: str) -> list[str]:
    out = []
    width = max(14, *(len(name) for name in reqs))
    for name, req in reqs.items():
        text = f"{req.rows} rows" if req.rows is not None else req.why
        text += " (experimental: never chosen by method='auto')" if req.experimental else ""
        out.append(f"  {name:<{width}} {text}{'   ← chosen' if name == chosen else ''}")
    return out


def _with_gate(gate: Gate, parts: list[acc.PrivacyCurve] | None) -> list[acc.PrivacyCurve] | None:
    return None if parts is None else [gate.curve(), *parts]


# ----------------------------------------------------------------------------------------------- queries

class InteriorPointQuery(LearningQuery[InteriorPoint]):
    """``frame.interior_point(col, bounds=...)``: a value between the column's min and max, privately.

    Methods (rows needed for success probability 1 − β, ε the algorithm's share = 9/10 of the budget,
    Δ = ``max_rows``, |X| the number of codes):

    * ``exponential``: ⌈(4Δ/ε)·ln(|X|/β)⌉ — 253 rows for 2⁶² codes at a budget of ε = 1 (β = 1e-6).
    * ``binary_search``: ⌈(bΔ/ε)·ln(b/β)⌉, b = ⌈log₂|X|⌉.
    * ``treelog``: 10·max(1, L)·⌈100·ln(1/δ₀)/ε₀⌉ (digest §4.6) — 10⁵–10⁶ rows; needs δ > 0, max_rows = 1.
    * any method a plugin registers through ``dpframe_methods``.

    ``auto`` picks the method with the smallest requirement among those not marked ``experimental``
    (TreeLog is: it runs only when named). Privacy of each method: see
    :mod:`dpframe_learning.interior_point`; the gate is ε/10-DP and the algorithm gets the rest (basic
    composition), so the cost is exactly the budget (ε, plus δ for TreeLog). Under a zCDP budget ρ the
    gate gets ρ/10 and each method converts the rest with its own zCDP guarantee (exponential:
    ε = √(8·0.9ρ), bounded range).

    The codes round each value to its **nearest** grid point (:class:`~dpframe.domains.OrderedDomain`,
    ``rounding="nearest"``), so the guarantee is on the grid: the value lies between the grid points
    nearest min(col) and max(col); on a constant column whose value is a grid point it is that value.
    """

    def __init__(self, source: Source, column: str, *, bounds: object, method: str = "auto", beta: float = 1e-6,
                 resolution: float | None = None) -> None:
        super().__init__(source)
        self.column = _column(source, column, "column")
        self.domain = OrderedDomain.of(self.column, source.schema[self.column], bounds, resolution, rounding="nearest")
        self._algorithms = algorithms(source.context.plugins)
        self.method = _method(method, self._algorithms)
        self.beta = check_beta(beta)

    def describe(self) -> str:
        return f"interior_point({self.column}, method={self.method!r}, β={self.beta:g}) over {self.domain.describe()}"

    def _plan(self, allowance: Allowance) -> _Plan:
        stability = Stability(self._rows)
        share = 1 - GATE_SHARE
        reqs = _requirements(self._algorithms, allowance, share, self.beta, self.domain.size, stability)
        chosen = _pick(self.method, reqs)
        algorithm = self._algorithms[chosen]
        summary = getattr(algorithm, "summary", chosen)
        used_delta = allowance.delta if algorithm.approximate else Fraction(0)
        required, eps_ip = reqs[chosen].rows, reqs[chosen].epsilon
        assert required is not None and eps_ip is not None
        gate = Gate(allowance.pure(GATE_SHARE), self._rows, self.beta, required)
        each = f"ε={_f(eps_ip)}" if allowance.rho is None else "each at its own ε for 9/10 of ρ"
        details = [f"rows each method needs ({each}, β={self.beta:g}, |X|={self.domain.size}):",
                   *_table(reqs, chosen),
                   f"{chosen} at ε={_f(eps_ip)}: {summary}", f"gate: {gate.describe('rows')}"]
        exact = self.domain.kind != "float" and self.domain.grid_exp == 0
        where = (f"min({self.column}) ≤ value ≤ max({self.column})" if exact else
                 f"g(min({self.column})) ≤ value ≤ g(max({self.column})), g(v) = the grid point nearest v "
                 f"(grid step {self.domain.step})")
        if ALGORITHMS.get(chosen) is not algorithm:       # a plugin's method: its guarantee is its own
            where = f"{where}, as far as method {chosen!r} guarantees an interior point of the codes"
        guarantee = (f"if it answers, with probability ≥ 1 − {self.beta:g}: {where} (needs ≥ {required} rows; "
                     f"{gate.answers()})")
        params = {"algorithm": algorithm, "epsilon": eps_ip, "delta": used_delta, "gate": gate,
                  "stability": stability}
        curves = _with_gate(gate, privacy_curves(algorithm, eps_ip, self.domain.size, stability))
        mechanisms = f"noisy count + {chosen}" + (" (experimental)" if reqs[chosen].experimental else "")
        return _Plan(allowance.cost(used_delta), mechanisms, details, guarantee, params, curves)

    def _run(self, params: dict[str, Any], reader: PrivateReader, rng: RandomSource) -> InteriorPoint | NoAnswer:
        algorithm: InteriorPointAlgorithm = params["algorithm"]
        ranked = getattr(algorithm, "reads_sorted_codes", False)
        codes = self._codes(reader, listing_ranks(self.domain.size, Exponential.scale(params["epsilon"],
                                                                                      params["stability"]))
                            if ranked else None)
        gate: Gate = params["gate"]
        if not gate.passes(int(codes.total), rng):
            return gate.no_answer("rows")
        code = algorithm.run(codes if ranked else codes.group(0), self.domain.size,  # type: ignore[arg-type]
                             params["epsilon"], params["delta"], self.beta, params["stability"], rng)
        return InteriorPoint(self.column, self.domain.decode(code), algorithm.name)

    def _codes(self, reader: PrivateReader, reach: int | None) -> SortedCodes:
        """The column's sorted codes (nulls and NaN dropped) after contribution bounding: private, only in ``_run``.

        With ``reach`` only the ranks within it of the median are listed (the backend's rank windows; the rest
        is read only if the algorithm needs it), else every code.
        """
        stat = self.domain.statistic
        if reach is not None:
            stat = replace(stat, near=(Fraction(1, 2),), reach=reach + 2)
        request = reader.request(self._node, (stat,))
        whole = stat.whole()
        values = statistic_values(reader.run(request)[stat.key],
                                  lambda: statistic_values(reader.rerun(request, (whole,))[whole.key]))
        return SortedCodes.of(values).clipped(0, self.domain.size - 1)


def direction_rows(epsilon: Fraction, rows: int, beta: float) -> int:
    """Rows the smaller class needs so that ``positive="auto"`` picks the wrong direction w.p. ≤ β.

    On data that some cut separates (say label 1 ⇔ x below it), the right direction has training error
    0 and the wrong one ≥ m, the number of rows in the smaller class: any "above" cut at or below the
    separating cut errs on every negative, any cut above it on every positive. The exponential
    mechanism at scale ε/(2Δ) therefore errs with probability 1/(1 + e^{εm/(2Δ)}) ≤ e^{−εm/(2Δ)} ≤ β once
    m ≥ (2Δ/ε)·ln(1/β).

    Example:
        >>> direction_rows(Fraction(1, 10), 1, 1e-6)
        277

    """
    return math.ceil(2 * rows / float(epsilon) * math.log(1 / beta) * (1 + 1e-12))


class ThresholdQuery(LearningQuery[Threshold]):
    """``frame.learn_threshold(feature, label=..., bounds=...)``: a private proper threshold learner.

    Reduction (digest §5.2) on the feature's grid cells (codes, ``rounding="down"``, so every possible
    cut is a grid point): with k = the exponential interior point's row requirement (at the IP's share
    of ε, β/2, swap-stability), run the interior point on the k largest positives (shifted +1) and the
    k smallest negatives. Direction ``"auto"`` first picks below/above with the exponential mechanism on
    −(best training error) (ε/10). The released ``Threshold`` is the learned cell cut, exactly.

    Guarantee, when it answers (the gate returns :class:`NoAnswer` with probability ≤ β from its
    ``reliable`` row count on, and answers with probability ≤ β below k rows). Data *realizable on the
    grid* (some cut at a grid point separates the labels; any integer cut on an integer feature
    without ``resolution``), n labelled rows, a fixed direction: with probability ≥ 1 − β the training
    error is ≤ 2k/n, and for an i.i.d. sample the population error is ≤ ξ whenever
    ``n ≥ max(2k/ξ, (8/ξ)·ln(4/β))``. Proof: every positive outside P_k is ≤ the output and every
    negative outside N_k is above it, so only the 2k sliced points can be wrong; the error region is an
    interval ending at the target u holding ≤ k sample points, and an interval of mass ≥ ξ holds ≤ k
    ≤ nξ/2 of n i.i.d. points with probability ≤ e^{−nξ/8} (Chernoff), once per side (β/4 each); the
    interior point fails with probability ≤ β/2.

    With ``positive="auto"`` the direction is wrong with probability ≤ 1/(1 + e^{ε_dir·m/(2Δ)}), m the
    rows of the smaller class (:func:`direction_rows`): the guarantee then holds with probability
    ≥ 1 − 2β *provided* each class has ≥ ``direction_rows`` rows; below that it does not — pass
    ``positive=`` when the direction is known. ``explain()`` prints that row count.

    Privacy: gate (ε/10) + direction (ε/10, if auto) + interior point on swap-stable slices (the rest),
    basic composition (zCDP: shares of ρ, each exponential mechanism as bounded range).
    """

    def __init__(self, source: Source, feature: str, *, label: str, bounds: object, positive: str = "auto",
                 beta: float = 1e-6, xi: float = 0.05, resolution: float | None = None) -> None:
        super().__init__(source)
        self.feature = _column(source, feature, "feature")
        self.label = _label(source, label)
        if self.label == self.feature:
            raise SchemaError("the label cannot be the feature", argument="label", fix="pass another column")
        self.domain = OrderedDomain.of(self.feature, source.schema[self.feature], bounds, resolution)
        if not isinstance(positive, str) or positive not in ("auto", "below", "above"):
            raise PlanError(f"unknown direction {positive!r}", argument="positive",
                            fix="use 'below' (label 1 ⇔ x < t), 'above' (label 1 ⇔ x ≥ t) or 'auto'")
        self.positive = positive
        self.beta = check_beta(beta)
        if isinstance(xi, bool) or not isinstance(xi, int | float) or not MIN_PROBABILITY <= xi < 1:
            raise ArgumentError(f"xi must be in [1e-100, 1), got {xi!r}", argument="xi", fix="pass e.g. xi=0.05")
        self.xi = float(xi)
        self._input = _binary(source, self.label)

    def describe(self) -> str:
        return (f"learn_threshold({self.feature}, label={self.label}, positive={self.positive!r}, "
                f"β={self.beta:g}) over {self.domain.describe()}")

    def _plan(self, allowance: Allowance) -> _Plan:
        auto = self.positive == "auto"
        eps_dir = allowance.bounded_range(DIRECTION_SHARE) if auto else Fraction(0)
        eps_ip = allowance.bounded_range(1 - GATE_SHARE - (DIRECTION_SHARE if auto else 0))
        stability = Stability(self._rows, swap=True)
        k = Exponential().min_rows(eps_ip, Fraction(0), self.beta / 2, self.domain.size + 1, stability)
        assert k is not None
        gate = Gate(allowance.pure(GATE_SHARE), self._rows, self.beta, k)
        needed = max(math.ceil(2 * k / self.xi), math.ceil(8 / self.xi * math.log(4 / self.beta)))
        minority = direction_rows(eps_dir, self._rows, self.beta) if auto else 0
        details = [f"slices: the k = {k} largest positives and k smallest negatives (interior point at "
                   f"ε={_f(eps_ip)}, exponential mechanism, swap-stable)",
                   (f"direction: exponential mechanism on −(best training error), ε={_f(eps_dir)}; wrong with "
                    f"probability ≤ {self.beta:g} only when each class has ≥ {minority} labelled rows")
                   if auto else f"direction: fixed, label 1 ⇔ x {'<' if self.positive == 'below' else '≥'} t",
                   f"gate: {gate.describe('labelled rows')}",
                   "rows whose label is not 0/1 (or is null) and rows with a null/NaN feature are dropped"]
        cut = "cut at a grid point" if self.domain.kind == "float" or self.domain.grid_exp else "cut"
        fixed = ("" if not auto else f" and each class has ≥ {minority} rows (else the direction may be wrong: "
                 "pass positive='below' or 'above')")
        guarantee = (f"if it answers ({gate.answers()}), on data some {cut} separates{fixed}: with probability "
                     f"≥ 1 − {(2 if auto else 1) * self.beta:g} training error ≤ 2k/n = {2 * k}/n, and population "
                     f"error ≤ ξ = {self.xi:g} for an i.i.d. sample of n ≥ {needed} rows "
                     f"({needed / gate.reliable:.1f}× the {gate.reliable} rows from which it answers reliably)")
        params = {"k": k, "eps_ip": eps_ip, "eps_dir": eps_dir, "gate": gate, "direction_rows": minority}
        curves = [gate.curve(), *([acc.exponential(up(eps_dir))] if auto else []), acc.exponential(up(eps_ip))]
        return _Plan(allowance.cost(), "noisy count + threshold via exponential interior point", details,
                     guarantee, params, curves)

    def _run(self, params: dict[str, Any], reader: PrivateReader, rng: RandomSource) -> Threshold | NoAnswer:
        data = self._labelled(reader)
        gate: Gate = params["gate"]
        if not gate.passes(data.size, rng):
            return gate.no_answer("labelled rows")
        positive: Direction = (choose_direction(data, params["eps_dir"], self._rows, rng)
                               if self.positive == "auto" else self.positive)  # type: ignore[assignment]
        z = learn_threshold_codes(data, self.domain.size, positive, k=params["k"], epsilon=params["eps_ip"],
                                  rows=self._rows, rng=rng)
        cut = z + 1 if positive == "below" else z          # below: code ≤ z ⇔ code < z + 1; above: code ≥ z
        return Threshold(self.feature, self.domain.edge(cut), positive, self.domain.bounds, self.domain, cut)

    def _labelled(self, reader: PrivateReader) -> Labelled:
        """The feature's sorted codes of the positive and of the negative rows: private, only in ``_run``.

        One backend query grouped by the label (rows with a null or NaN feature dropped).
        """
        stat = self.domain.statistic
        stats = reader.statistics(self._input, (stat,), by=(self.label,))
        codes = SortedCodes.of(statistic_values(stats[stat.key])).clipped(0, self.domain.size - 1)
        labels = stats[self.label].cast(pl.Int64).to_list()
        empty = np.zeros(0, dtype=np.int64)
        return Labelled(*(codes[labels.index(v)] if v in labels else empty for v in (1, 0)))


class RectangleQuery(LearningQuery[Rectangle]):
    """``frame.learn_rectangle(features, label=..., bounds={...})``: a private axis-aligned box learner.

    Algorithm (digest §6), on each feature's grid cells (``rounding="down"``): from the positive rows,
    for each axis slice off the m smallest points (by that coordinate, ties by the whole record) and
    take an exponential interior point of the slice's coordinate, delete the slice; the same with the m
    largest. m is the interior point's requirement at β/(4d). Every interior point that succeeds lies
    inside its slice's range, so when all 2d succeed the box lies inside the target box (no false
    positives on data realizable on the grid). The released box is the learned cells exactly:
    ``lower ≤ x < upper`` per feature.

    Accounting: the 2d computations are paid by whichever valid bound lets each run with the larger
    ε₀ (:func:`dpframe_learning.slicing.slice_plan`): sequential composition over deterministic slices
    (2d·ε₀, pure), or Reorder-Slice-Compute with Geom-padded slices ((2wε₀, δ), needs δ > 0 and
    ``max_rows = 1``); the charge is the chosen, cheaper bound plus the ε/10 gate. Under zCDP the 2d
    exponential mechanisms share 9/10 of ρ as bounded-range mechanisms (2d·ε₀²/8).
    """

    def __init__(self, source: Source, features: Sequence[str], *, label: str, bounds: Mapping[str, object],
                 beta: float = 1e-6, resolution: Mapping[str, float] | None = None) -> None:
        super().__init__(source)
        if isinstance(features, str) or not isinstance(features, Sequence) or not features:
            raise SchemaError(f"expected a list of feature columns, got {features!r}", argument="features",
                              fix="pass e.g. ['x1', 'x2']")
        # tuples: read again when it runs (after the plan priced one slice per feature); a list shown through
        # ``q.query.features`` could be appended to, by another thread too, between the pricing and the run
        self.features = tuple(_column(source, f, "features") for f in features)
        if len(set(self.features)) != len(self.features):
            raise SchemaError(f"repeated feature in {self.features}", argument="features", fix="name each once")
        self.label = _label(source, label)
        if self.label in self.features:
            raise SchemaError("the label cannot be a feature", argument="label", fix="pass another column")
        if not isinstance(bounds, Mapping) or sorted(bounds) != sorted(self.features):
            raise SchemaError(f"bounds must map every feature to (lower, upper); got {bounds!r}",
                              argument="bounds", fix="pass bounds={'x1': (0, 99), 'x2': (0, 99)}")
        if resolution is not None and not isinstance(resolution, Mapping):
            raise ArgumentError(f"expected a dict of a resolution per feature, got {resolution!r}",
                                argument="resolution", fix=f"pass e.g. resolution={{{self.features[0]!r}: 0.5}} "
                                "(a feature left out keeps its default), or leave it out")
        res = dict(resolution or {})
        unknown = [f for f in res if f not in self.features]
        if unknown:
            raise ArgumentError(f"{unknown[0]!r} is not a feature", argument="resolution",
                                fix=f"give resolutions of the features {list(self.features)} only")
        self.domains = tuple(OrderedDomain.of(f, source.schema[f], bounds[f], res.get(f)) for f in self.features)
        self.beta = check_beta(beta)
        self._input = Filter.of(source.node, pl.col(self.label).cast(pl.Int64, strict=False) == 1)

    def describe(self) -> str:
        return (f"learn_rectangle({list(self.features)}, label={self.label}, β={self.beta:g}) over "
                + "; ".join(d.describe() for d in self.domains))

    def _slices(self, allowance: Allowance, slices: int) -> SlicePlan:
        share = 1 - GATE_SHARE
        if allowance.rho is None:
            return slice_plan(allowance.epsilon * share, allowance.delta if self._rows == 1 else Fraction(0), slices)
        eps0 = allowance.bounded_range(share / slices)
        return SlicePlan("sequential", eps0, slices, sequential_cost(eps0, slices),
                         f"zCDP: {slices} bounded-range mechanisms at ε₀ cost {slices}·ε₀²/8; RSC needs δ > 0")

    def _plan(self, allowance: Allowance) -> _Plan:
        d = len(self.features)
        plan = self._slices(allowance, 2 * d)
        stability = Stability(self._rows, swap=True)
        targets = [Exponential().min_rows(plan.epsilon0, Fraction(0), self.beta / (4 * d), dom.size, stability)
                   for dom in self.domains]
        pad = math.ceil(math.log(4 * d / self.beta) / float(plan.epsilon0)) if plan.method == "rsc" else 0
        required = 2 * sum(t + pad for t in targets if t is not None)
        gate = Gate(allowance.pure(GATE_SHARE), self._rows, self.beta, required)
        if allowance.rho is not None:
            cost = allowance.cost()
        elif isinstance(plan.cost, ApproxDP):
            cost = ApproxDP(plan.cost.epsilon + gate.epsilon, plan.cost.delta)
        else:
            cost = PureDP(plan.cost.epsilon + gate.epsilon)
        details = [f"accounting: {plan.method} over {2 * d} slice computations at ε₀={_f(plan.epsilon0)} "
                   f"costs {describe(plan.cost)} ({plan.alternative})",
                   f"slice sizes: {dict(zip(self.features, targets, strict=True))}"
                   + (f" + Geom(1 − e^(−ε₀)) padding (never published); {pad} covers it w.p. 1 − β/(4d)"
                      if pad else ""),
                   f"gate: {gate.describe('positive rows')}",
                   "rows with label 1 are the positives; rows with a null/NaN feature are dropped"]
        guarantee = (f"if it answers ({gate.answers()}): with probability ≥ 1 − {self.beta:g} every interior point "
                     f"succeeds, so on data some box with sides on grid points separates, the box lies inside it "
                     f"and errs only on the ≤ {required} sliced positives (RSC: plus their padding); it needs "
                     f"{required} positive rows")
        params = {"plan": plan, "targets": targets, "gate": gate}
        curves = ([gate.curve()] + [acc.exponential(up(plan.epsilon0))] * (2 * d)) if plan.method != "rsc" \
            else None
        return _Plan(cost, f"noisy count + rectangle ({plan.method} accounting)", details, guarantee, params, curves)

    def _run(self, params: dict[str, Any], reader: PrivateReader, rng: RandomSource) -> Rectangle | NoAnswer:
        groups = self._groups(reader, self._input, self.features)
        counts = groups["__rows"].to_numpy()
        points = np.column_stack([np.repeat(dom.encode(groups[dom.column]), counts) for dom in self.domains]) \
            if groups.height else np.zeros((0, len(self.domains)), dtype=np.int64)
        gate: Gate = params["gate"]
        if not gate.passes(int(points.shape[0]), rng):
            return gate.no_answer("positive rows")
        plan: SlicePlan = params["plan"]
        box = learn_rectangle_codes(points, [dom.size for dom in self.domains], plan, params["targets"],
                                    self._rows, rng)
        empty = any(a > b for a, b in box)
        pairs = list(zip(self.domains, box, strict=True))
        return Rectangle({dom.column: (dom.edge(a), dom.edge(b + 1)) for dom, (a, b) in pairs}, empty,
                         {dom.column: dom.bounds for dom in self.domains},
                         tuple((dom, a, b) for dom, (a, b) in pairs))


@dataclass(frozen=True)
class LearningFamily:
    """One learning query family: ``frame.<name>(...)`` builds ``query(source, ...)``."""

    name: str
    query: type[LearningQuery[Any]]
    attach: Literal["frame", "group_by", "both"] = "frame"
    methods: tuple[str, ...] = ()
    result_types: Mapping[str, type] = field(default_factory=lambda: MappingProxyType({"NoAnswer": NoAnswer}))

    def build(self, source: Source, /, *args: Any, **kwargs: Any) -> LearningQuery[Any]:
        """Validate the arguments (free) and build the query."""
        return self.query(source, *args, **kwargs)

    @property
    def takes(self) -> type[LearningQuery[Any]]:
        """What ``build`` passes its arguments to: an argument it does not take is a ``dp.SignatureError``."""
        return self.query


FAMILIES = (LearningFamily("interior_point", InteriorPointQuery), LearningFamily("learn_threshold", ThresholdQuery),
            LearningFamily("learn_rectangle", RectangleQuery))
"""The learning plugin's query families (registered through ``dpframe_query_families``)."""
