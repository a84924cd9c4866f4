"""The learning queries behind ``Frame.interior_point``, ``Frame.learn_threshold`` and ``Frame.learn_rectangle``.

Each is lazy: construction validates columns, types and bounds (free); ``explain(budget)`` and
``cost(budget)`` plan from public information only (free); ``collect(budget)`` reserves the exact cost in
the session's ledger, reads the private rows once, and returns a result or :class:`NoAnswer`.

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
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP, describe
from dpframe.domains import OrderedDomain
from dpframe.errors import BudgetError, DPFrameError, PlanError, SchemaError
from dpframe.mechanism import Statistic
from dpframe.noise import RandomSource, discrete_laplace
from dpframe.plan.nodes import Filter, Node
from dpframe_learning.interior_point import ALGORITHMS, Exponential, InteriorPointAlgorithm, Stability
from dpframe_learning.learners import Direction, choose_direction, learn_rectangle_codes, learn_threshold_codes
from dpframe_learning.slicing import SlicePlan, slice_plan

if TYPE_CHECKING:
    from dpframe.frame import Frame
    from dpframe.session import Session

GATE_SHARE = Fraction(1, 10)


def decode_edge(domain: OrderedDomain, code: int) -> Any:
    """The value of a code in ``-1 .. size``, without clamping the two codes just outside the domain.

    ``domain.decode`` clamps codes to the domain; a threshold that labels every value negative (or
    positive) sits one grid step beyond a bound, so those codes decode one step outside.

    Example:
        >>> d = OrderedDomain.of("age", pl.Int64, (0, 120))
        >>> decode_edge(d, -1), decode_edge(d, 7), decode_edge(d, 121)
        (-1, 7, 121)

    """
    if 0 <= code < domain.size:
        return domain.decode(code)
    wider = replace(domain, lower=domain.lower - domain.step, size=domain.size + 2)
    return wider.decode(code + 1)
DIRECTION_SHARE = Fraction(1, 10)
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
    """A private point between the column's smallest and largest value (with probability ≥ 1 − β)."""

    column: str
    value: Any
    method: str


@dataclass(frozen=True)
class Threshold:
    """A threshold classifier: ``positive="below"`` predicts 1 iff x ≤ threshold, ``"above"`` iff x ≥ threshold."""

    feature: str
    threshold: Any
    positive: Direction

    def expr(self) -> pl.Expr:
        """The classifier as a Polars expression (1 = positive)."""
        col = pl.col(self.feature)
        inside = col <= self.threshold if self.positive == "below" else col >= self.threshold
        expr: pl.Expr = inside.cast(pl.Int8).alias("prediction")
        return expr

    def predict(self, values: Sequence[Any] | pl.Series) -> npt.NDArray[np.int8]:
        """Predicted labels of ``values``."""
        frame = pl.DataFrame({self.feature: pl.Series(values)})
        return frame.select(self.expr()).to_series().to_numpy()


@dataclass(frozen=True)
class Rectangle:
    """An axis-aligned box: predicts 1 iff every feature lies in its closed interval (empty: never)."""

    intervals: dict[str, tuple[Any, Any]]
    empty: bool

    def expr(self) -> pl.Expr:
        """The classifier as a Polars expression (1 = inside the box)."""
        inside = pl.lit(not self.empty)
        for name, (lo, hi) in self.intervals.items():
            inside = inside & pl.col(name).is_between(lo, hi)
        return inside.cast(pl.Int8).alias("prediction")

    def predict(self, frame: pl.DataFrame) -> npt.NDArray[np.int8]:
        """Predicted labels of the rows of ``frame`` (which has the feature columns)."""
        return frame.select(self.expr()).to_series().to_numpy()


# ----------------------------------------------------------------------------------------------- planning

def split_budget(budget: object) -> tuple[Fraction, Fraction]:
    """(ε, δ) of a query budget; a zCDP budget ρ becomes pure ε = √(2ρ) rounded down (ε²/2 ≤ ρ)."""
    if isinstance(budget, PureDP):
        return budget.epsilon, Fraction(0)
    if isinstance(budget, ApproxDP):
        return budget.epsilon, budget.delta
    if isinstance(budget, ZCDP) and budget.delta == 0:
        den = 2**32
        eps = Fraction(math.isqrt(math.floor(2 * budget.rho * den * den)), den)
        if eps == 0:
            raise BudgetError(f"{budget!r} is too small", argument="budget", fix="give a larger budget")
        return eps, Fraction(0)
    raise BudgetError(f"expected dp.PureDP, dp.ApproxDP or dp.ZCDP, got {budget!r}", argument="budget",
                      fix="pass budget=dp.PureDP(1) (or dp.ApproxDP(1, 1e-7) for TreeLog / RSC)")


def check_beta(beta: object) -> float:
    """β, the failure probability the row requirements are computed for: a float in (0, 1/2]."""
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 < beta <= 0.5:
        raise DPFrameError(f"beta must be in (0, 0.5], got {beta!r}", argument="beta", fix="pass e.g. beta=1e-6")
    return float(beta)


@dataclass(frozen=True)
class Gate:
    """The noisy row-count check: answer iff n + DLap(rows/ε_c) ≥ required + margin."""

    epsilon: Fraction
    rows: int
    beta: float
    required: int

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

    def no_answer(self, what: str) -> NoAnswer:
        return NoAnswer(f"the noisy count of {what} was below the {self.required} rows the guarantee needs "
                        f"(+ a noise margin of {self.margin})", self.required, self.reliable)

    def describe(self, what: str) -> str:
        return (f"noisy count of {what} (ε={_f(self.epsilon)}, discrete Laplace scale {_f(self.scale)}); "
                f"answers iff it is ≥ {self.required} + {self.margin}; reliable from {self.reliable} rows")


def _f(x: Fraction) -> str:
    return str(x) if x.denominator < 1000 else f"{float(x):.4g}"


@dataclass
class LearningPlan:
    """A planned learning query: what runs, its exact cost, and the text explain() shows."""

    budget: Budget
    cost: Budget
    session_cost: Budget
    mechanisms: str
    details: list[str]
    guarantee: str
    params: dict[str, Any] = field(default_factory=dict)


class LearningQuery(Generic[R]):
    """Shared explain/cost/collect for learning queries (subclasses plan and run)."""

    def __init__(self, frame: Frame) -> None:
        self._session: Session = frame._session
        self._node: Node = frame._node
        self._rows = self._session.privacy_unit.max_rows

    def describe(self) -> str:
        raise NotImplementedError

    def _plan(self, epsilon: Fraction, delta: Fraction) -> tuple[Budget, str, list[str], str, dict[str, Any]]:
        raise NotImplementedError

    def _run(self, params: dict[str, Any]) -> R | NoAnswer:
        raise NotImplementedError

    def plan(self, budget: Budget) -> LearningPlan:
        """Plan under ``budget`` (free; raises a dpframe error, uncharged, if it cannot run)."""
        epsilon, delta = split_budget(budget)
        cost, mechanisms, details, guarantee, params = self._plan(epsilon, delta)
        return LearningPlan(budget, cost, self._session.accountant.charge(cost), mechanisms, details,
                            guarantee, params)

    def cost(self, budget: Budget) -> Budget:
        """The exact cost in the session's notion. Free."""
        return self.plan(budget).session_cost

    def explain(self, budget: Budget, format: str = "text") -> Any:
        """The plan, the methods' row requirements, the gate, the guarantee and the cost. Free."""
        if format not in ("text", "json"):
            raise PlanError(f"unknown format {format!r}", argument="format", fix="use 'text' or 'json'")
        p = self.plan(budget)
        sess = self._session
        after = sess.accountant.compose([sess._ledger.spent(), p.session_cost])
        steps = [n.describe() for n in self._node.lineage()] + [f"ContributionBound: {sess.privacy_unit.describe()}",
                                                                 self.describe()]
        data = {"private": sess.rng.private, "steps": steps, "mechanisms": p.mechanisms, "details": p.details,
                "guarantee": p.guarantee,
                "budget": {"requested": describe(p.budget), "cost": describe(p.cost),
                           "charged": sess.accountant.describe_charge(p.session_cost),
                           "fits": sess.accountant.fits(after),
                           "remaining_after": describe(sess.accountant.remaining(after))}}
        if format == "json":
            return data
        lines = ["dpframe learning query" + ("" if data["private"] else "   [seeded random source: NOT PRIVATE]")]
        lines += [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
        lines += [f"mechanisms: {p.mechanisms}"] + [f"  {d}" for d in p.details]
        lines += [f"guarantee: {p.guarantee}",
                  "no answer: returns dp NoAnswer (cost charged) when the noisy row count is below the requirement"]
        b = data["budget"]
        assert isinstance(b, dict)
        lines.append(f"budget: requested {b['requested']}; cost {b['cost']}; charged {b['charged']}; "
                     f"{'fits' if b['fits'] else 'DOES NOT FIT'}; remaining after {b['remaining_after']}")
        return "\n".join(lines)

    def collect(self, budget: Budget) -> R | NoAnswer:
        """Reserve the cost, run once on the private rows, release the result (or :class:`NoAnswer`)."""
        p = self.plan(budget)
        return self._session._charged(p.session_cost, self.describe(), p.mechanisms, lambda: self._run(p.params))

    def _groups(self, node: Node, columns: list[str]) -> pl.DataFrame:
        """Distinct value combinations of ``columns`` with their row counts, after contribution bounding.

        Private: only inside :meth:`_run`. Rows with a null or NaN in any of ``columns`` are dropped.
        """
        stats = self._session._statistics(node, tuple(columns), None, (Statistic("rows"),))
        schema = stats.schema
        keep = [pl.col(c).is_not_null() & (~pl.col(c).is_nan() if schema[c].is_float() else pl.lit(True))
                for c in columns]
        return stats.filter(pl.all_horizontal(keep)) if keep else stats

    def __repr__(self) -> str:
        return f"<dp.{type(self).__name__} {self.describe()}>"


def _column(frame: Frame, column: object, argument: str) -> str:
    if not isinstance(column, str) or column not in frame.schema:
        raise SchemaError(f"unknown column {column!r}", argument=argument, fix=f"use one of {frame.columns}")
    if column == frame._session.privacy_unit.column:
        raise SchemaError(f"{column!r} is the privacy-unit column", argument=argument,
                          fix="learn from another column")
    return column


def _label(frame: Frame, label: object) -> str:
    name = _column(frame, label, "label")
    dtype = frame.schema[name]
    if not (dtype == pl.Boolean or dtype.is_integer()):
        raise SchemaError(f"label column {name!r} has type {dtype}; it must be bool or an integer 0/1 column",
                          argument="label", fix=f"derive one, e.g. .with_columns(y=(pl.col({name!r}) == ...))")
    return name


def _binary(frame: Frame, label: str) -> Node:
    """Keep rows whose label is 0/1 (or false/true); other labels and nulls are dropped (row-level)."""
    return Filter.of(frame._node, pl.col(label).cast(pl.Int64, strict=False).is_in([0, 1]))


def _method(method: object) -> str:
    if method != "auto" and method not in ALGORITHMS:
        raise PlanError(f"unknown method {method!r}", argument="method",
                        fix=f"use 'auto' or one of {sorted(ALGORITHMS)}")
    return str(method)


def _requirements(epsilon: Fraction, delta: Fraction, beta: float, size: int,
                  stability: Stability) -> dict[str, int | None]:
    return {name: a.min_rows(epsilon, delta, beta, size, stability) for name, a in ALGORITHMS.items()}


def _unavailable(name: str, delta: Fraction, stability: Stability) -> str:
    if name == "treelog" and delta == 0:
        return "not available: needs an (ε, δ) budget with δ > 0"
    return "not available: its accounting needs one row per privacy unit (max_rows=1)"


def _pick(method: str, reqs: Mapping[str, int | None], delta: Fraction, stability: Stability) -> str:
    if method == "auto":
        usable = {k: v for k, v in reqs.items() if v is not None}
        return min(usable, key=lambda k: (usable[k], k))
    if reqs[method] is None:
        raise PlanError(f"method {method!r} is {_unavailable(method, delta, stability)}", argument="method",
                        fix="use method='auto', or give the query dp.ApproxDP(epsilon, delta)")
    return method


def _table(reqs: Mapping[str, int | None], chosen: str, delta: Fraction, stability: Stability) -> list[str]:
    out = []
    for name, req in reqs.items():
        text = f"{req} rows" if req is not None else _unavailable(name, delta, stability)
        out.append(f"  {name:<14} {text}{'   ← chosen' if name == chosen else ''}")
    return out


# ----------------------------------------------------------------------------------------------- queries

class InteriorPointQuery(LearningQuery[InteriorPoint]):
    """``frame.interior_point(col, bounds=...)``: a value between the column's min and max, privately.

    Methods (rows needed for success probability 1 − β, ε the algorithm's share = 9/10 of the budget,
    Δ = ``max_rows``, |X| the number of codes):

    * ``exponential``: ⌈(4Δ/ε)·ln(|X|/β)⌉ — 256 rows for 2⁶² codes at a budget of ε = 1 (β = 1e-6).
    * ``binary_search``: ⌈(bΔ/ε)·ln(b/β)⌉, b = ⌈log₂|X|⌉.
    * ``treelog``: 10·max(1, L)·⌈100·ln(1/δ₀)/ε₀⌉ (digest §4.6) — 10⁵–10⁶ rows; needs δ > 0, max_rows = 1.

    ``auto`` picks the method with the smallest requirement. Privacy of each method: see
    :mod:`dpframe_learning.interior_point`; the gate is ε/10-DP and the algorithm gets the rest (basic
    composition), so the cost is exactly the budget (ε, plus δ for TreeLog).
    """

    def __init__(self, frame: Frame, column: str, *, bounds: object, method: str = "auto", beta: float = 1e-6,
                 resolution: float | None = None) -> None:
        super().__init__(frame)
        self.column = _column(frame, column, "column")
        self.domain = OrderedDomain.of(self.column, frame.schema[self.column], bounds, resolution)
        self.method = _method(method)
        self.beta = check_beta(beta)

    def describe(self) -> str:
        return f"interior_point({self.column}, method={self.method!r}, β={self.beta:g}) over {self.domain.describe()}"

    def _plan(self, epsilon: Fraction, delta: Fraction) -> tuple[Budget, str, list[str], str, dict[str, Any]]:
        stability = Stability(self._rows)
        eps_ip = epsilon * (1 - GATE_SHARE)
        reqs = _requirements(eps_ip, delta, self.beta, self.domain.size, stability)
        chosen = _pick(self.method, reqs, delta, stability)
        algorithm = ALGORITHMS[chosen]
        summary = getattr(algorithm, "summary", chosen)
        used_delta = delta if algorithm.approximate else Fraction(0)
        required = reqs[chosen]
        assert required is not None
        gate = Gate(epsilon * GATE_SHARE, self._rows, self.beta, required)
        details = [f"rows each method needs (ε={_f(eps_ip)}, β={self.beta:g}, |X|={self.domain.size}):",
                   *_table(reqs, chosen, delta, stability),
                   f"{chosen}: {summary}", f"gate: {gate.describe('rows')}"]
        guarantee = (f"with probability ≥ 1 − {self.beta:g}: min({self.column}) ≤ value ≤ max({self.column}) "
                     f"when the answer is given (needs ≥ {required} rows)")
        cost = ApproxDP(epsilon, used_delta) if used_delta else PureDP(epsilon)
        params = {"algorithm": algorithm, "epsilon": eps_ip, "delta": used_delta, "gate": gate,
                  "stability": stability}
        return cost, f"noisy count + {chosen}", details, guarantee, params

    def _run(self, params: dict[str, Any]) -> InteriorPoint | NoAnswer:
        rng = self._session.rng
        groups = self._groups(self._node, [self.column])
        codes = np.sort(np.repeat(self.domain.encode(groups[self.column]), groups["__rows"].to_numpy()))
        gate: Gate = params["gate"]
        if not gate.passes(int(codes.size), rng):
            return gate.no_answer("rows")
        algorithm: InteriorPointAlgorithm = params["algorithm"]
        code = algorithm.run(codes, self.domain.size, params["epsilon"], params["delta"], self.beta,
                             params["stability"], rng)
        return InteriorPoint(self.column, self.domain.decode(code), algorithm.name)


class ThresholdQuery(LearningQuery[Threshold]):
    """``frame.learn_threshold(feature, label=..., bounds=...)``: a private proper threshold learner.

    Reduction (digest §5.2): with k = the exponential interior point's row requirement (at the IP's
    share of ε, β/2, swap-stability), run the interior point on the k largest positives (shifted +1) and
    the k smallest negatives. Direction ``"auto"`` first picks below/above with the exponential
    mechanism on −(best training error) (ε/10).

    Guarantee (realizable data, i.i.d. sample of n labelled rows, fixed direction): with probability
    ≥ 1 − β the training error is ≤ 2k/n, and the population error is ≤ ξ whenever
    ``n ≥ max(2k/ξ, (8/ξ)·ln(4/β))``. Proof: every positive outside P_k is ≤ the output and every
    negative outside N_k is above it, so only the 2k sliced points can be wrong; the error region is an
    interval ending at the target u holding ≤ k sample points, and an interval of mass ≥ ξ holds ≤ k
    ≤ nξ/2 of n i.i.d. points with probability ≤ e^{−nξ/8} (Chernoff), once per side (β/4 each); the
    interior point fails with probability ≤ β/2. Privacy: gate (ε/10) + direction (ε/10, if auto) +
    interior point on swap-stable slices (the rest), basic composition.
    """

    def __init__(self, frame: Frame, feature: str, *, label: str, bounds: object, positive: str = "auto",
                 beta: float = 1e-6, xi: float = 0.05, resolution: float | None = None) -> None:
        super().__init__(frame)
        self.feature = _column(frame, feature, "feature")
        self.label = _label(frame, label)
        if self.label == self.feature:
            raise SchemaError("the label cannot be the feature", argument="label", fix="pass another column")
        self.domain = OrderedDomain.of(self.feature, frame.schema[self.feature], bounds, resolution)
        if positive not in ("auto", "below", "above"):
            raise PlanError(f"unknown direction {positive!r}", argument="positive",
                            fix="use 'below' (label 1 ⇔ x ≤ t), 'above' (label 1 ⇔ x ≥ t) or 'auto'")
        self.positive = positive
        self.beta = check_beta(beta)
        if isinstance(xi, bool) or not isinstance(xi, int | float) or not 0 < xi < 1:
            raise DPFrameError(f"xi must be in (0, 1), got {xi!r}", argument="xi", fix="pass e.g. xi=0.05")
        self.xi = float(xi)
        self._input = _binary(frame, self.label)

    def describe(self) -> str:
        return (f"learn_threshold({self.feature}, label={self.label}, positive={self.positive!r}, "
                f"β={self.beta:g}) over {self.domain.describe()}")

    def _plan(self, epsilon: Fraction, delta: Fraction) -> tuple[Budget, str, list[str], str, dict[str, Any]]:
        eps_dir = epsilon * DIRECTION_SHARE if self.positive == "auto" else Fraction(0)
        eps_ip = epsilon * (1 - GATE_SHARE) - eps_dir
        stability = Stability(self._rows, swap=True)
        k = Exponential().min_rows(eps_ip, Fraction(0), self.beta / 2, self.domain.size + 1, stability)
        assert k is not None
        gate = Gate(epsilon * GATE_SHARE, self._rows, self.beta, k)
        needed = max(math.ceil(2 * k / self.xi), math.ceil(8 / self.xi * math.log(4 / self.beta)))
        details = [f"slices: the k = {k} largest positives and k smallest negatives (interior point at "
                   f"ε={_f(eps_ip)}, exponential mechanism, swap-stable)",
                   ("direction: exponential mechanism on −(best training error), ε=" + _f(eps_dir))
                   if eps_dir else f"direction: fixed, label 1 ⇔ x {'≤' if self.positive == 'below' else '≥'} t",
                   f"gate: {gate.describe('labelled rows')}",
                   "rows whose label is not 0/1 (or is null) and rows with a null/NaN feature are dropped"]
        guarantee = (f"with probability ≥ 1 − {self.beta:g}: training error ≤ 2k/n = {2 * k}/n; population "
                     f"error ≤ ξ = {self.xi:g} for realizable data once n ≥ {needed}")
        params = {"k": k, "eps_ip": eps_ip, "eps_dir": eps_dir, "gate": gate}
        return PureDP(epsilon), "noisy count + threshold via exponential interior point", details, guarantee, params

    def _run(self, params: dict[str, Any]) -> Threshold | NoAnswer:
        rng = self._session.rng
        groups = self._groups(self._input, [self.feature, self.label])
        counts = groups["__rows"].to_numpy()
        x = np.repeat(self.domain.encode(groups[self.feature]), counts)
        y = np.repeat(groups[self.label].cast(pl.Int8).to_numpy(), counts)
        gate: Gate = params["gate"]
        if not gate.passes(int(x.size), rng):
            return gate.no_answer("labelled rows")
        positive: Direction = (choose_direction(x, y, params["eps_dir"], self._rows, rng)
                               if self.positive == "auto" else self.positive)  # type: ignore[assignment]
        z = learn_threshold_codes(x, y, self.domain.size, positive, k=params["k"], epsilon=params["eps_ip"],
                                  rows=self._rows, rng=rng)
        return Threshold(self.feature, decode_edge(self.domain, z), positive)


class RectangleQuery(LearningQuery[Rectangle]):
    """``frame.learn_rectangle(features, label=..., bounds={...})``: a private axis-aligned box learner.

    Algorithm (digest §6): from the positive rows, for each axis slice off the m smallest points (by
    that coordinate, ties by the whole record) and take an exponential interior point of the slice's
    coordinate, delete the slice; the same with the m largest. m is the interior point's requirement
    at β/(4d). Every interior point that succeeds lies inside its slice's range, so when all 2d
    succeed the box lies inside the target box (no false positives on realizable data).

    Accounting: the 2d computations are paid by whichever valid bound lets each run with the larger
    ε₀ (:func:`dpframe_learning.slicing.slice_plan`): sequential composition over deterministic slices
    (2d·ε₀, pure), or Reorder-Slice-Compute with Geom-padded slices ((3wε₀, δ), needs δ > 0 and
    ``max_rows = 1``); the charge is the chosen, cheaper bound plus the ε/10 gate.
    """

    def __init__(self, frame: Frame, features: Sequence[str], *, label: str, bounds: Mapping[str, object],
                 beta: float = 1e-6, resolution: Mapping[str, float] | None = None) -> None:
        super().__init__(frame)
        if isinstance(features, str) or not isinstance(features, Sequence) or not features:
            raise SchemaError(f"expected a list of feature columns, got {features!r}", argument="features",
                              fix="pass e.g. ['x1', 'x2']")
        self.features = [_column(frame, f, "features") for f in features]
        if len(set(self.features)) != len(self.features):
            raise SchemaError(f"repeated feature in {self.features}", argument="features", fix="name each once")
        self.label = _label(frame, label)
        if self.label in self.features:
            raise SchemaError("the label cannot be a feature", argument="label", fix="pass another column")
        if not isinstance(bounds, Mapping) or sorted(bounds) != sorted(self.features):
            raise SchemaError(f"bounds must map every feature to (lower, upper); got {bounds!r}",
                              argument="bounds", fix="pass bounds={'x1': (0, 99), 'x2': (0, 99)}")
        res = dict(resolution or {})
        self.domains = [OrderedDomain.of(f, frame.schema[f], bounds[f], res.get(f)) for f in self.features]
        self.beta = check_beta(beta)
        self._input = Filter.of(frame._node, pl.col(self.label).cast(pl.Int64, strict=False) == 1)

    def describe(self) -> str:
        return (f"learn_rectangle({self.features}, label={self.label}, β={self.beta:g}) over "
                + "; ".join(d.describe() for d in self.domains))

    def _plan(self, epsilon: Fraction, delta: Fraction) -> tuple[Budget, str, list[str], str, dict[str, Any]]:
        d = len(self.features)
        eps_slices = epsilon * (1 - GATE_SHARE)
        plan = slice_plan(eps_slices, delta if self._rows == 1 else Fraction(0), 2 * d)
        stability = Stability(self._rows, swap=True)
        targets = [Exponential().min_rows(plan.epsilon0, Fraction(0), self.beta / (4 * d), dom.size, stability)
                   for dom in self.domains]
        pad = math.ceil(math.log(4 * d / self.beta) / float(plan.epsilon0)) if plan.method == "rsc" else 0
        required = 2 * sum(t + pad for t in targets if t is not None)
        gate = Gate(epsilon * GATE_SHARE, self._rows, self.beta, required)
        cost: Budget = (ApproxDP(plan.cost.epsilon + gate.epsilon, plan.cost.delta) if isinstance(plan.cost, ApproxDP)
                        else PureDP(plan.cost.epsilon + gate.epsilon))
        details = [f"accounting: {plan.method} over {2 * d} slice computations at ε₀={_f(plan.epsilon0)} "
                   f"costs {describe(plan.cost)} ({plan.alternative})",
                   f"slice sizes: {dict(zip(self.features, targets, strict=True))}"
                   + (f" + Geom(1 − e^(−ε₀)) padding (never published); {pad} covers it w.p. 1 − β/(4d)"
                      if pad else ""),
                   f"gate: {gate.describe('positive rows')}",
                   "rows with label 1 are the positives; rows with a null/NaN feature are dropped"]
        guarantee = (f"with probability ≥ 1 − {self.beta:g} every interior point succeeds, so on realizable "
                     f"data the box lies inside the target box and errs only on the ≤ {required}+padding "
                     "sliced positives")
        params = {"plan": plan, "targets": targets, "gate": gate}
        return cost, f"noisy count + rectangle ({plan.method} accounting)", details, guarantee, params

    def _run(self, params: dict[str, Any]) -> Rectangle | NoAnswer:
        rng = self._session.rng
        groups = self._groups(self._input, self.features)
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
        ends = {dom.column: (decode_edge(dom, a), decode_edge(dom, b)) for dom, (a, b) in zip(self.domains, box,
                                                                                              strict=True)}
        return Rectangle(ends, empty)

