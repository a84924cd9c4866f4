"""A third-party query family: DP linear regression from noisy sufficient statistics.

``frame.linear_regression(["x1", "x2"], "y", bounds={...})`` fits y ≈ β₀ + Σ βᵢ·xᵢ by ridge least squares
on *noisy* sufficient statistics: the row count n, the sums Σxᵢ, Σy, Σxᵢxⱼ (i ≤ j) and Σxᵢy, each over
values clamped to the public ``bounds``. It adds no mechanism of its own: it derives the product columns
with row-level expressions (``with_columns``) and asks the built-in ``agg`` family for one clamped sum
per statistic, so the core plans the budget split (equal parts), calibrates the noise, charges the
query once before any row is read, and the plugin only solves the normal equations on released values.

**Privacy.** Each statistic is a sum over the rows of one privacy unit bounded by ``max_rows`` rows and
by the clamping range of its product (the product of two clamped values lies between the smallest and
the largest product of the ranges' ends), so the ``agg`` family's sum mechanism is DP for it at its
share; the d(d+1)/2 + 2d + 1 releases compose (basic composition, or zCDP for a zCDP budget) to the
query budget, and the fit is post-processing. Nothing is data-dependent before the release: the
statistics, their bounds and the ridge penalty are public.

Example:
    >>> import polars as pl, dpframe as dp
    >>> x = [i % 50 for i in range(5000)]
    >>> data = pl.DataFrame({"x": x, "y": [2.0 * v + 1.0 for v in x]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    >>> q = sess.table("t").linear_regression(["x"], "y", bounds={"x": (0, 50), "y": (0, 110)})
    >>> q.cost(dp.PureDP(5))
    PureDP(epsilon=5)
    >>> model = q.collect(dp.PureDP(5))
    >>> abs(model.coefficients["x"] - 2) < 0.1 and abs(model.intercept - 1) < 3
    True

"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

import dpframe as dp
import numpy as np
import polars as pl
from dpframe.aggregate import AggregateQuery, Aggregates
from dpframe.errors import BoundsError, PlanError, SchemaError
from dpframe.family import Explain, FamilyPlan, Source
from dpframe.measures import FLOAT64_MAX, check_bounds
from dpframe.plan.nodes import WithColumns


@dataclass(frozen=True)
class LinearModel:
    """A released linear model: y ≈ intercept + Σ coefficients[x]·x (post-processing of noisy sums)."""

    coefficients: dict[str, float]
    intercept: float
    rows: float            # the noisy row count the fit used

    def predict(self, frame: pl.DataFrame) -> np.ndarray:
        """Predictions for the rows of ``frame`` (which has the feature columns)."""
        out = np.full(frame.height, self.intercept)
        for name, beta in self.coefficients.items():
            out = out + beta * frame[name].to_numpy()
        return out


def _clamped(column: str, bounds: tuple[float, float]) -> pl.Expr:
    """``column`` as a float clamped to ``bounds`` (NaN and nulls stay missing: the sums skip them)."""
    return pl.col(column).cast(pl.Float64, strict=False).clip(*bounds)


def _range(lo: float, hi: float, lo2: float, hi2: float) -> tuple[float, float]:
    """Give the range of a·b for a ∈ [lo, hi], b ∈ [lo2, hi2] (its extremes are at the corners)."""
    corners = [lo * lo2, lo * hi2, hi * lo2, hi * hi2]
    return min(corners), max(corners)


class RegressionQuery:
    """The built query: the clamped product columns and one ``agg`` query for their sums.

    Protects: add/remove one privacy unit (the session's, with all its rows; a query keeps ≤ ``max_rows`` of them, in
    ≤ ``max_groups`` groups). Guarantee: the composed cost of its releases, which ``explain()`` shows (ε-DP, or ρ-zCDP
    for a ``dp.ZCDP`` budget).
    """

    def __init__(self, source: Source, features: Sequence[str], label: str, *, bounds: Mapping[str, Any],
                 ridge: float = 1.0) -> None:
        if isinstance(features, str) or not isinstance(features, Sequence) or not features:
            raise SchemaError(f"expected a list of feature columns, got {features!r}", argument="features",
                              fix="pass e.g. ['x1', 'x2']")
        columns = [*features, label]
        for i, c in enumerate(columns):
            if not isinstance(c, str) or c not in source.schema or not source.schema[c].is_numeric():
                raise SchemaError(f"{c!r:.60} is not a numeric column", argument="label" if i == len(features)
                                  else "features", fix=f"use numeric columns of {list(source.schema)}")
        if len(set(columns)) != len(columns):
            raise SchemaError(f"repeated column in {columns}", argument="features", fix="name each column once")
        if not isinstance(bounds, Mapping) or sorted(bounds) != sorted(columns):
            raise BoundsError(f"bounds must give (lower, upper) for every feature and the label {columns}",
                              argument="bounds", fix="pass bounds={'x': (0, 10), 'y': (0, 100)}")
        clamp: dict[str, tuple[float, float]] = {}
        for c in columns:
            lower, upper = check_bounds(bounds[c], f"bounds[{c!r}]")   # finite numbers a float64 holds
            clamp[c] = (float(lower), float(upper))
        if isinstance(ridge, bool) or not isinstance(ridge, int | float) or not 0 <= ridge <= FLOAT64_MAX:
            raise PlanError(f"ridge must be a finite number ≥ 0, got {ridge!r}", argument="ridge", fix="pass ridge=1.0")
        # a tuple and a read-only mapping: read again when it runs, after the statistics were planned
        self.features, self.label, self.ridge = tuple(features), label, float(ridge)
        self.bounds: Mapping[str, tuple[float, float]] = MappingProxyType(clamp)
        derived, measures = {}, [dp.len()]
        for name in columns:                                  # Σ x and Σ y
            measures.append(dp.sum(name, bounds=clamp[name]).alias(f"sum_{name}"))
        pairs = [*itertools.combinations_with_replacement(self.features, 2), *((f, label) for f in self.features)]
        for a, b in pairs:                                    # Σ xᵢxⱼ and Σ xᵢy over clamped values
            column = f"__lr_{a}*{b}"
            derived[column] = _clamped(a, clamp[a]) * _clamped(b, clamp[b])
            measures.append(dp.sum(column, bounds=_range(*clamp[a], *clamp[b])).alias(f"sum_{a}*{b}"))
        node = WithColumns.of(source.node, [], derived, source.unit.column)
        self._sums: AggregateQuery = Aggregates().build(dataclasses.replace(source, node=node), *measures)

    @property
    def backend(self) -> str | None:
        """The backend this query runs on (None: the session's)."""
        return self._sums.backend

    def describe(self) -> str:
        """One line for the history."""
        return f"linear_regression({list(self.features)}, {self.label!r}, ridge={self.ridge:g})"

    def plan(self, budget: object) -> FamilyPlan[LinearModel]:
        """Plan the sums (the core splits the budget and calibrates); the run fits the model. Free."""
        sums = self._sums.plan(budget)

        def run(reader: Any, rng: Any) -> LinearModel:
            return self._fit(sums.run(reader, rng).row(0, named=True))

        def explain() -> Explain:     # made only when explain() asks (collect shows no text)
            shown = sums.explained()
            lines = (f"model: {self.label} ≈ β₀ + " + " + ".join(f"β·{f}" for f in self.features),
                     f"fit: ridge least squares (λ = {self.ridge:g}) on the noisy sums below (post-processing)",
                     *shown.lines)
            return Explain("dpframe linear regression", shown.steps, lines, shown.notes,
                           {**shown.data, "features": list(self.features), "label": self.label, "ridge": self.ridge})
        return dataclasses.replace(sums, run=run, explain=explain, mechanisms=f"linear_regression ({sums.mechanisms})")

    def _fit(self, released: Mapping[str, float]) -> LinearModel:
        """Solve (XᵀX + λI)β = Xᵀy from the released sums (the intercept's column is 1; it is not penalised)."""
        names = ["1", *self.features]
        d = len(names)

        def moment(a: str, b: str) -> float:
            if a == "1" and b == "1":
                return float(released["len"])
            if a == "1" or b == "1":
                return float(released[f"sum_{b if a == '1' else a}"])
            first, second = sorted((a, b), key=self.features.index)
            return float(released[f"sum_{first}*{second}"])
        xtx = np.array([[moment(a, b) for b in names] for a in names])
        xty = np.array([float(released[f"sum_{self.label}"]), *(released[f"sum_{f}*{self.label}"]
                                                                 for f in self.features)])
        penalty = np.diag([0.0] + [self.ridge] * (d - 1))
        beta, *_ = np.linalg.lstsq(xtx + penalty, xty, rcond=None)
        return LinearModel(dict(zip(self.features, (float(b) for b in beta[1:]))), float(beta[0]),
                           float(released["len"]))


class LinearRegression:
    """The ``linear_regression`` query family (attached to frames)."""

    name = "linear_regression"
    attach: Literal["frame", "group_by", "both"] = "frame"
    methods: tuple[str, ...] = ()
    result_types: Mapping[str, type] = MappingProxyType({"LinearModel": LinearModel})
    takes = RegressionQuery
    """What ``build`` passes its arguments to: an argument it does not take is a ``dp.SignatureError``."""

    def build(self, source: Source, /, *args: Any, **kwargs: Any) -> RegressionQuery:
        """Validate the arguments (free) and build the query."""
        return RegressionQuery(source, *args, **kwargs)


__all__ = ["LinearModel", "LinearRegression", "RegressionQuery"]
