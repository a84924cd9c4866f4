"""Scalar private queries: an ungrouped ``agg`` with one ``len``/``count``/``sum`` measure.

Interactive mechanisms (sparse vector, target-charging tests, PTR gates) need a *scalar* statistic
of known L1 sensitivity. :func:`scalar` reads it from the query's ordinary plan (public information
only: bounds, privacy unit, budget): the integer statistic the backend computes, its sensitivity Δ in
statistic units (``max_rows`` for counts; ``max_rows`` × one row's grid steps for clamped sums) and
the grid unit that maps it back to output units. Its private reads (``_exact``, ``_exact_by_unit``,
``_noisy``) are not public names: they return exact or arbitrarily lightly noised statistics uncharged,
so only the interactive mechanisms call them, inside a charged run.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from fractions import Fraction
    >>> sess = dp.Session({"t": pl.DataFrame({"u": [1, 1, 2]})}, privacy_unit=dp.PrivacyUnit("u", max_rows=2),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> s = scalar(sess, sess.table("t").agg(dp.len()), Fraction(1, 2))
    >>> s.sensitivity, s.unit, s.noise_scale
    (Fraction(2, 1), Fraction(1, 1), Fraction(4, 1))
    >>> hasattr(s, "exact")          # no public name reads the private statistic
    False

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpframe.budgets import NUMBER_BITS, PureDP, exact
from dpframe.errors import ArgumentError, PlanError
from dpframe.interactive.unit_keys import unit_key_expr, unit_keys
from dpframe.measures import FLOAT64_MAX
from dpframe.mechanism import Noise, Statistic
from dpframe.noise import RandomSource, discrete_laplace
from dpframe.sealed import _ENGINE, plain

if TYPE_CHECKING:
    from dpframe.frame import Query
    from dpframe.plan.nodes import Node
    from dpframe.session import Session

SCALAR_KINDS = frozenset({"len", "count", "sum"})


@dataclass(frozen=True)
class Scalar:
    """A scalar query, its integer statistic, L1 sensitivity (statistic units) and grid unit."""

    query: Query
    statistic: Statistic
    sensitivity: Fraction
    unit: Fraction
    kind: str
    noise_scale: Fraction          # discrete Laplace scale t = Δ/ε for the ε it was planned with

    def _exact(self, session: Session, exclude: frozenset[Any] = frozenset()) -> int:
        """The exact statistic, without the privacy units in ``exclude`` (PRIVATE: only inside a run)."""
        stats = session._release.reader().statistics(self._input(session, exclude), (self.statistic,))
        return int(stats[self.statistic.key][0])

    def _exact_by_unit(self, session: Session, exclude: frozenset[Any] = frozenset()) -> tuple[int, list[Any]]:
        """(exact statistic, the keys of the units whose contribution to it is non-zero) — PRIVATE: only inside a run.

        Units are named by their :func:`~dpframe.interactive.unit_keys.unit_keys`, as ``exclude`` names them.

        ONE statistics call grouped by privacy unit: contribution bounding (which keeps ``max_rows`` rows
        per unit by a seeded hash) runs once, so the units returned are exactly the units that moved the
        statistic returned (per-unit charging, Alg. 5: charge every unit with f_i(x) > 0).
        """
        unit = session.privacy_unit.column
        assert unit is not None
        stats = session._release.reader().statistics(self._input(session, exclude), (self.statistic,), by=(unit,))
        values = stats[self.statistic.key].to_list()
        units = unit_keys(stats[unit])      # never the ids as Python values: a NaN or a far date (unit_keys)
        return sum(int(v) for v in values), [u for u, v in zip(units, values, strict=True) if v != 0]

    def _input(self, session: Session, exclude: frozenset[Any]) -> Node:
        node = self.query.node.input
        if not exclude:
            return node
        from dpframe.frame import Frame

        unit = session.privacy_unit.column
        assert unit is not None
        key = unit_key_expr(unit, node.schema[unit])
        return Frame(session, node, _engine=_ENGINE).filter(~key.is_in(list(exclude)))._node

    def _noisy(self, session: Session, scale: Fraction, rng: RandomSource,
               exclude: frozenset[Any] = frozenset()) -> int:
        """Exact + discrete Laplace(scale), in statistic units (PRIVATE input, DP output only at a charged scale)."""
        return self._exact(session, exclude) + int(discrete_laplace(scale, 1, rng)[0])

    def in_output_units(self, value: int) -> Fraction:
        """A statistic-unit integer in the query's output units, exactly (targets are compared on this)."""
        return value * self.unit

    def to_output(self, value: int) -> float | int:
        """A statistic-unit integer in the query's output units (counts stay ints; beyond float range: ±inf)."""
        if self.kind in ("len", "count"):
            return int(value)
        try:
            return float(value * self.unit)
        except OverflowError:
            return math.copysign(math.inf, value)

    def threshold_units(self, threshold: Fraction) -> int:
        """The smallest integer statistic value v with v·unit ≥ threshold."""
        return math.ceil(threshold / self.unit)

    def describe(self) -> str:
        """The query's one-line text."""
        return self.query.describe()


def scalar(session: Session, query: Any, epsilon: Fraction, argument: str = "query") -> Scalar:
    """Validate ``query`` as a scalar, bounded query of ``session`` and plan it at pure ``epsilon``.

    Raises a :class:`PlanError` (nothing charged) for anything else: grouped queries, several
    measures, mean/var/quantiles (not Lipschitz in one unit), sampled inputs, another session's query.
    """
    from dpframe.frame import Query
    from dpframe.planning import sampling_rate

    fix = "pass sess.table(...).filter(...).agg(dp.len()) (or one dp.count / dp.sum(col, bounds=...))"
    if not isinstance(query, Query) or type(query) is not Query:
        raise PlanError(f"expected an ungrouped .agg(...) query, got {type(query).__name__}", argument=argument,
                        fix=fix)
    if query._session is not session:
        raise PlanError("the query belongs to another session", argument=argument,
                        fix="build the query from this session's tables")
    node = query.node
    if node.by or len(node.measures) != 1 or node.measures[0].kind not in SCALAR_KINDS:
        raise PlanError(f"{query.describe()} is not a scalar count or bounded sum", argument=argument, fix=fix)
    if sampling_rate(node.input) != 1:
        raise PlanError("sampled inputs are not supported by interactive mechanisms", argument=argument,
                        fix="drop .sample(...)")
    query._require_plan("an interactive mechanism")
    plan = query.plan(PureDP(epsilon))
    noises = list(plan.plans[0].noise.values()) if len(plan.plans) == 1 else []
    if len(noises) != 1 or not isinstance(noises[0], Noise) or noises[0].distribution != "discrete_laplace":
        raise PlanError(f"{query.describe()} has no single additive statistic", argument=argument, fix=fix)
    noise = noises[0]
    return Scalar(query, plan.statistics()[0], noise.sensitivity, noise.unit, node.measures[0].kind, noise.scale)


def public_number(value: object, argument: str) -> Fraction:
    """A threshold-like argument: a finite public number (never a query, column or data-derived object).

    Exact numbers keep at most :data:`~dpframe.budgets.NUMBER_BITS` bits in numerator and denominator, as budgets
    do: a stream's name and a target's repr quote them, and Python writes no int of more than 4,300 digits.
    """
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction | np.integer | np.floating):
        raise ArgumentError(f"must be a public number fixed before running, got {type(value).__name__}",
                           argument=argument,
                           fix="pass a constant (a threshold computed from the private data is not allowed)")
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        raise ArgumentError(f"must be finite, got {value}", argument=argument, fix="pass a finite number")
    out = value if isinstance(value, Fraction) else Fraction(int(value)) if isinstance(value, int | np.integer) \
        else Fraction(repr(float(value)))
    if abs(out) > FLOAT64_MAX:      # the noise and the comparisons compute in floats too
        raise ArgumentError("must be within the float range (|x| ≤ 1.8e308)", argument=argument,
                            fix="pass a threshold that a float can hold")
    bits = max(abs(out.numerator).bit_length(), out.denominator.bit_length())
    if bits > NUMBER_BITS:          # before anything writes it: Python writes no int past 4,300 digits as text
        raise ArgumentError(f"an exact number of about {int(bits * math.log10(2)):,} digits (numerator or "
                            f"denominator); a public number has at most {int(NUMBER_BITS * math.log10(2)):,}, as a "
                            "budget's (streams and targets show theirs as text)", argument=argument,
                            fix="pass it rounded to a few significant digits, e.g. as a float")
    return out


def positive_epsilon(value: object, argument: str = "epsilon") -> Fraction:
    """ε > 0 as an exact Fraction (BudgetError otherwise)."""
    return exact(value, argument)  # type: ignore[arg-type]
