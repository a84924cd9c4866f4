"""Accuracy-first queries: ask for an interval, get the smallest budget that gives it.

``q.collect(accuracy=dp.Accuracy(half_width=5, confidence=0.95))`` (and ``q.cost(accuracy=...)``,
``q.explain(accuracy=...)``) plans the query at candidate budgets — free: a plan depends on public
parameters only — and picks the smallest budget whose noise meets the target for every targeted measure:
P[|noise| ≤ half_width] ≥ confidence, exactly as ``collect(ci=...)`` computes its intervals (the noise's
exact distribution; the intervals do not cover contribution-bounding or clipping bias). The search
brackets the answer from a first guess (noise scales like 1/ε, or 1/√ρ) and bisects; the budget returned is
the *meeting* end, rounded up to 6 significant digits and checked again, so the target always holds.
Only measures whose noise interval does not depend on the data can be targeted (counts and sums of the
built-in mechanisms: ``MechanismPlan.half_widths``); means, variances and standard deviations divide by a
noisy count, so their intervals are known only after release.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 100})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> q = sess.table("t").agg(dp.len())
    >>> q.cost(accuracy=dp.Accuracy(half_width=5, confidence=0.95))     # discrete Laplace: P[|Z| ≤ 5] ≥ 0.95
    PureDP(epsilon=0.538175)

"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Literal

from dpframe.budgets import Budget, make
from dpframe.errors import BudgetError, PlanError
from dpframe.measures import FLOAT64_MAX
from dpframe.sealed import Final, plain
from dpframe.signatures import checked_class

#: The budgets searched: ε (or ρ) in this range.
LIMITS = (1e-9, 1e9)
#: Relative width of the final bracket (then rounded up to 6 significant digits).
TOLERANCE = 1e-6
#: The highest confidence level an interval may ask for: intervals split the miss 1 − c among up to three
#: noisy statistics and both tails, and a level within a few ulps of 1 leaves parts that round to 1.0
#: (their half-width is infinite).
MAX_CONFIDENCE = 1 - 1e-9


def level(value: object, argument: str) -> float:
    """A confidence level: a number in (0, :data:`MAX_CONFIDENCE`], as a plain float (a PlanError naming ``argument``).

    Example:
        >>> level(0.95, "ci")
        0.95
        >>> level(0.9999999999999999, "ci")
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: ci: must be a confidence level strictly between 0 and 1, at most 0.999999999, ...

    """
    c = plain(value)
    if isinstance(c, bool) or not isinstance(c, int | float) or not 0 < c <= MAX_CONFIDENCE:
        raise PlanError(f"must be a confidence level strictly between 0 and 1, at most {MAX_CONFIDENCE:.9f}, got "
                        f"{c!r}", argument=argument, fix=f"pass e.g. {argument}=0.95")
    return float(c)


def _positive(value: object, argument: str) -> float:
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction) or not 0 < value <= FLOAT64_MAX \
            or float(value) == 0:     # compared exactly first: float() of an int beyond float64 raises OverflowError
        raise PlanError(f"must be a positive finite number, got {value!r}", argument=argument,
                        fix="pass e.g. half_width=5 (in the measure's units)")
    return float(value)


@checked_class
@dataclass(frozen=True)
class Accuracy(Final, argument="accuracy"):
    """An accuracy target: each targeted measure within ± ``half_width`` of its noiseless value, w.p. ≥ ``confidence``.

    ``half_width`` is a number (every measure) or a mapping from output names to numbers (only those);
    ``notion`` is the query budget's notion, ``"pure"`` or ``"zcdp"`` (default: the session's if it is a
    zCDP session, else pure ε).

    Example:
        >>> import dpframe as dp
        >>> dp.Accuracy(half_width={"n": 5, "total": 100.0}).targets(["n", "total"])
        {'n': 5.0, 'total': 100.0}

    """

    half_width: float | Mapping[str, float]
    confidence: float = 0.95
    notion: Literal["pure", "zcdp"] | None = None

    def __post_init__(self) -> None:
        # stored as plain floats, the mapping as a read-only copy: the analyst's mapping or number subclass
        # could answer differently when cost() and collect() each read them
        if isinstance(self.half_width, Mapping):
            if not self.half_width or not all(type(k) is str for k in self.half_width):
                raise PlanError(f"must map output names to half-widths, got {self.half_width!r}",
                                argument="half_width", fix="pass e.g. half_width={'n': 5}")
            widths = {k: _positive(v, "half_width") for k, v in dict(self.half_width).items()}
            object.__setattr__(self, "half_width", MappingProxyType(widths))
        else:
            object.__setattr__(self, "half_width", _positive(self.half_width, "half_width"))
        object.__setattr__(self, "confidence", level(self.confidence, "confidence"))
        if self.notion is not None and (not isinstance(self.notion, str) or self.notion not in ("pure", "zcdp")):
            raise PlanError(f"must be 'pure', 'zcdp' or None, got {self.notion!r}", argument="notion",
                            fix="pass notion='zcdp' for Gaussian noise, 'pure' for Laplace noise")

    def targets(self, outputs: list[str]) -> dict[str, float]:
        """The half-width asked of each output (all of ``outputs``, or the named ones)."""
        if not isinstance(self.half_width, Mapping):
            return {name: float(self.half_width) for name in outputs}
        unknown = sorted(set(self.half_width) - set(outputs))
        if unknown:
            raise PlanError(f"no measure named {unknown} in this query (its outputs: {outputs})",
                            argument="half_width", fix="use the measures' output names")
        return {name: float(v) for name, v in self.half_width.items()}

    def describe(self) -> str:
        """E.g. '±5 at 95%'."""
        if isinstance(self.half_width, Mapping):
            hw = ", ".join(f"{k} ±{v:g}" for k, v in self.half_width.items())
        else:
            hw = f"±{float(self.half_width):g} for every measure"
        return f"{hw} at {self.confidence:g} confidence"


def check_accuracy(accuracy: object) -> Accuracy:
    """``accuracy`` must be a :class:`Accuracy`."""
    if not isinstance(accuracy, Accuracy):
        raise PlanError(f"expected dp.Accuracy(half_width=..., confidence=...), got {accuracy!r}",
                        argument="accuracy", fix="pass accuracy=dp.Accuracy(half_width=5, confidence=0.95)")
    return accuracy


def _budget(notion: str, x: float) -> Budget:
    return make("pure" if notion == "pure" else "zcdp", Fraction(x))


def _round_up(x: float) -> float:
    """``x`` rounded up to 6 significant digits."""
    scale = 10.0 ** (math.floor(math.log10(x)) - 5)
    return math.ceil(x / scale * (1 - 1e-15)) * scale


def smallest_budget(half_widths: Callable[[Budget], Mapping[str, float]], outputs: list[str], accuracy: Accuracy,
                    notion: str) -> tuple[Budget, dict[str, float]]:
    """The smallest budget of ``notion`` (rounded up) at which every targeted output's half-width meets its target.

    ``half_widths(budget)`` plans the query at ``budget`` (free) and returns each output's noise half-width at
    ``accuracy.confidence`` (outputs without a data-independent one are left out); it receives public values
    only (candidate budgets). Returns the budget and its half-widths. A budget too small to plan (noise
    beyond the sampler's range) counts as missing the target.

    Example:
        >>> hw = lambda b: {"n": 3 / float(b.epsilon)}          # a Laplace-like count: half-width ∝ 1/ε
        >>> smallest_budget(hw, ["n"], Accuracy(half_width=6), "pure")[0]
        PureDP(epsilon=1/2)

    """
    targets = accuracy.targets(outputs)
    first = half_widths(_budget(notion, 1.0))                   # errors here are the query's own: raised
    missing = sorted(set(targets) - set(first))
    if missing:
        raise PlanError(f"{missing} have no interval known before release (means, variances and standard "
                        "deviations divide by a noisy count)", argument="accuracy",
                        fix="target counts and sums only, e.g. dp.Accuracy(half_width={'n': 5}), or use a budget")

    def meets(x: float) -> bool:
        try:
            got = half_widths(_budget(notion, x))
        except BudgetError:
            return False                                         # too little budget to plan: too noisy
        return all(got[name] <= target for name, target in targets.items())

    ratio = max(first[name] / target for name, target in targets.items())
    guess = min(max(ratio if notion == "pure" else ratio * ratio, LIMITS[0]), LIMITS[1])
    lo, hi = LIMITS
    if meets(guess):
        good, bad = guess, guess / 2
        while bad >= lo and meets(bad):
            good, bad = bad, bad / 2
        if bad < lo:
            bad = lo / 2
    else:
        bad, good = guess, guess * 2
        while good <= hi and not meets(good):
            bad, good = good, good * 2
        if good > hi:
            raise PlanError(f"no budget up to {hi:g} meets {accuracy.describe()}", argument="accuracy",
                            fix="ask for a wider half_width or a lower confidence")
    while good / bad > 1 + TOLERANCE:
        mid = math.sqrt(good * bad)
        good, bad = (mid, bad) if meets(mid) else (good, mid)
    x = _round_up(good)
    while not meets(x):                                          # (monotone: one step at most)
        x = _round_up(x * (1 + 1e-5))
    budget = _budget(notion, x)
    return budget, dict(half_widths(budget))


def note(accuracy: Accuracy, budget: Budget, widths: Mapping[str, float]) -> str:
    """The line ``explain(accuracy=...)`` adds."""
    from dpframe.budgets import describe

    got = ", ".join(f"{k} ±{v:.6g}" for k, v in widths.items())
    return (f"accuracy-first: {accuracy.describe()} needs the budget {describe(budget)} (the smallest, rounded up; "
            f"half-widths at it: {got})")
