"""Empirical privacy audits: a statistically sound *lower bound* on the ε a mechanism really has.

The test (the standard distinguishing-test audit, e.g. Jagielski et al. 2020, Nasr et al. 2021):
run the mechanism many times on two neighbouring datasets D and D'. For an event S (here a threshold
event ``{output ≥ τ}`` or its complement) every (ε, δ)-DP mechanism satisfies
P[M(D) ∈ S] ≤ e^ε · P[M(D') ∈ S] + δ, in both directions. With Clopper–Pearson bounds p̲ on the larger and
p̄ on the smaller probability (each holding with probability ≥ 1 − α/2),

    ε ≥ ln((p̲ − δ) / p̄)

holds with probability ≥ 1 − α whatever the sample. If this lower bound exceeds the ε the mechanism
claims, the claim is false (up to a 1 − α confidence; α = 1e-6 by default, so a correct mechanism
fails about once in a million runs).

Choosing the best output, threshold and direction from the same samples would bias the bound, so
:func:`audit_samples` picks them on a *pilot* sample and computes the bound on an independent *final*
sample.

Example:
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource, discrete_laplace
    >>> a = discrete_laplace(Fraction(1), 20_000, SeededRandomSource(1))        # t = 1 on a shift of 1: ε = 1
    >>> b = 1 + discrete_laplace(Fraction(1), 20_000, SeededRandomSource(2))
    >>> 0.5 < epsilon_lower_bound(a, b, threshold=1) <= 1.0
    True

"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.accounting.pld import PLDAccountant
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.polars import PolarsBackend
from dpframe.budgets import Budget
from dpframe.mechanism import MechanismPlan, Statistic
from dpframe.noise import SeededRandomSource
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.stats import clopper_pearson

__all__ = [
    "AuditResult",
    "audit_claims",
    "audit_curves",
    "audit_release",
    "audit_sampler",
    "audit_samples",
    "bound_extremes",
    "claimed_epsilon_delta",
    "curve_claims",
    "epsilon_lower_bound",
    "exact_statistics",
    "extreme_assignments",
    "neighbouring_tables",
    "release_sampler",
]

Samples = Mapping[str, npt.ArrayLike]
#: ``sampler(n, seed)`` → ``{output: array of n samples}``: n independent runs of a mechanism on one dataset.
Sampler = Callable[[int, int], Mapping[str, npt.ArrayLike]]

_MAX_THRESHOLDS = 256


def _as_float(x: npt.ArrayLike) -> npt.NDArray[np.float64]:
    arr = np.asarray(x)
    out = arr.astype(np.float64).ravel()
    return np.where(np.isnan(out), np.inf, out)  # NaN is one more (top) value, the same in both runs


def _thresholds(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    pooled = np.unique(np.concatenate([a, b]))
    if pooled.size <= _MAX_THRESHOLDS:
        return pooled[1:] if pooled.size > 1 else pooled
    return np.unique(np.quantile(np.concatenate([a, b]), np.linspace(0.002, 0.998, _MAX_THRESHOLDS),
                                 method="higher"))


def _bounds(k_hi: npt.NDArray[np.float64], n_hi: int, k_lo: npt.NDArray[np.float64], n_lo: int,
            delta: float, alpha: float) -> npt.NDArray[np.float64]:
    """ln((CP lower of k_hi/n_hi − δ) / CP upper of k_lo/n_lo), each bound at α/2; 0 when not positive."""
    lower, _ = clopper_pearson(k_hi, n_hi, alpha / 2)
    _, upper = clopper_pearson(k_lo, n_lo, alpha / 2)
    num = lower - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(num > 0, np.log(np.maximum(num, 1e-300) / upper), 0.0)
    return np.maximum(eps, 0.0)


def _events(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], taus: npt.NDArray[np.float64],
            delta: float, alpha: float) -> npt.NDArray[np.float64]:
    """Lower bounds (4 × len(taus)) for the events {≥τ}, {<τ}, each with D over D' and D' over D."""
    sa, sb = np.sort(a), np.sort(b)
    ge_a = a.size - np.searchsorted(sa, taus, side="left")
    ge_b = b.size - np.searchsorted(sb, taus, side="left")
    lt_a, lt_b = a.size - ge_a, b.size - ge_b
    f = np.asarray
    return np.stack([
        _bounds(f(ge_a, float), a.size, f(ge_b, float), b.size, delta, alpha),
        _bounds(f(ge_b, float), b.size, f(ge_a, float), a.size, delta, alpha),
        _bounds(f(lt_a, float), a.size, f(lt_b, float), b.size, delta, alpha),
        _bounds(f(lt_b, float), b.size, f(lt_a, float), a.size, delta, alpha),
    ])


_EVENT_TEXT = ("P[{o} ≥ {t}] on D over D'", "P[{o} ≥ {t}] on D' over D",
               "P[{o} < {t}] on D over D'", "P[{o} < {t}] on D' over D")


def epsilon_lower_bound(samples_a: npt.ArrayLike, samples_b: npt.ArrayLike, threshold: float, *,
                        delta: float = 0.0, alpha: float = 1e-6) -> float:
    """A lower bound on ε (holding with probability ≥ 1 − alpha) from one threshold test.

    ``samples_a``/``samples_b`` are independent outputs of the mechanism on two neighbouring datasets.
    The four events ``x ≥ threshold`` / ``x < threshold`` in both directions are tested with a Bonferroni
    split of ``alpha``; the largest bound is returned (0.0 if none is positive). Boolean samples work
    (use ``threshold=1``).

    Example:
        >>> import numpy as np
        >>> epsilon_lower_bound(np.zeros(1000), np.zeros(1000), threshold=0.5)
        0.0

    """
    a, b = _as_float(samples_a), _as_float(samples_b)
    if a.size == 0 or b.size == 0:
        raise ValueError("give at least one sample for each dataset")
    bounds = _events(a, b, np.asarray([float(threshold)]), delta, alpha / 4)
    return float(bounds.max())


@dataclass(frozen=True)
class AuditResult:
    """The outcome of one audit: the lower bound found, the claim, and the test that found it.

    Example:
        >>> r = AuditResult(1.2, 1.0, 0.0, "len", "P[len ≥ 3] on D' over D", 3.0, 1.3, 20_000, 1e-6)
        >>> r.passed
        False

    """

    epsilon_lower_bound: float
    claimed_epsilon: float
    delta: float
    output: str
    event: str
    threshold: float
    pilot_bound: float
    samples: int
    alpha: float
    label: str = ""

    @property
    def passed(self) -> bool:
        """True when the empirical lower bound does not exceed the claimed ε."""
        return self.epsilon_lower_bound <= self.claimed_epsilon

    def labelled(self, label: str) -> AuditResult:
        """The same result, naming what was audited (e.g. the mechanism and the neighbouring pair)."""
        return replace(self, label=label)

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "VIOLATION"
        label = f"{self.label}: " if self.label else ""
        return (f"{label}audit {verdict}: ε ≥ {self.epsilon_lower_bound:.4f} (confidence 1 − {self.alpha:g}) vs "
                f"claimed ε = {self.claimed_epsilon:.4f}, δ = {self.delta:g}; test {self.event} "
                f"[n = {self.samples} per dataset; pilot bound {self.pilot_bound:.4f}]")


def claimed_epsilon_delta(cost: Budget, delta: float = 1e-3) -> tuple[float, float]:
    """The (ε, δ) a cost claims: pure ε → (ε, 0); (ε, δ) as is; ρ-zCDP → its (ε, δ₀ + ``delta``)-DP form.

    Example:
        >>> import dpframe as dp
        >>> claimed_epsilon_delta(dp.PureDP(1))
        (1.0, 0.0)

    """
    if cost.notion == "pure":
        return float(cost.epsilon), 0.0  # type: ignore[union-attr]
    if cost.notion == "approx":
        return float(cost.epsilon), float(cost.delta)  # type: ignore[union-attr]
    approx = cost.to_approx(delta)
    return float(approx.epsilon), float(approx.delta)


def audit_samples(pilot_a: Samples, pilot_b: Samples, final_a: Samples, final_b: Samples, *,
                  claimed_epsilon: float, delta: float = 0.0, alpha: float = 1e-6,
                  outputs: Sequence[str] | None = None) -> AuditResult:
    """Pick the most revealing (output, threshold, event) on the pilot samples, bound ε on the final ones.

    Every argument maps output names to samples (one entry per run). Pilot and final samples must be
    independent runs. The returned bound holds with probability ≥ 1 − alpha.

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource, discrete_laplace
        >>> def runs(shift, seed):
        ...     return {"x": shift + discrete_laplace(Fraction(1, 2), 20_000, SeededRandomSource(seed))}
        >>> r = audit_samples(runs(0, 1), runs(1, 2), runs(0, 3), runs(1, 4), claimed_epsilon=1.0)
        >>> r.passed, r.epsilon_lower_bound > 1.0      # the noise really has ε = 2: the claim is caught
        (False, True)

    """
    return audit_claims(pilot_a, pilot_b, final_a, final_b, [(claimed_epsilon, delta)], alpha=alpha, outputs=outputs)


def audit_claims(pilot_a: Samples, pilot_b: Samples, final_a: Samples, final_b: Samples,
                 claims: Sequence[tuple[float, float]], *, alpha: float = 1e-6,
                 outputs: Sequence[str] | None = None) -> AuditResult:
    """:func:`audit_samples` against several (ε, δ) claims at once: a mechanism claiming all of them must meet each.

    A privacy curve claims a δ at every ε (``claims``: some of its points, :func:`curve_claims`). The pilot picks
    the claim, output, threshold and event whose lower bound exceeds its claim's ε by the most; the final samples
    bound ε for that one test only, so the result keeps its 1 − alpha confidence however many claims there are.

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource, discrete_laplace
        >>> def runs(shift, seed):
        ...     return {"x": shift + discrete_laplace(Fraction(4), 20_000, SeededRandomSource(seed))}
        >>> r = audit_claims(runs(0, 1), runs(4, 2), runs(0, 3), runs(4, 4), [(1.0, 0.0), (0.5, 0.04)])
        >>> r.passed, (r.claimed_epsilon, r.delta)    # ε = 1 is true; (1/2, 0.04) is not: the shift has δ ≈ 0.22
        (False, (0.5, 0.04))

    """
    names = list(outputs) if outputs is not None else [k for k in pilot_a if k in pilot_b]
    if not names:
        raise ValueError("no common output to audit")
    if not claims:
        raise ValueError("no claim to audit")
    runs: dict[str, Runs] = {name: (_as_float(pilot_a[name]), _as_float(pilot_b[name]), _output(final_a, name),
                                    _output(final_b, name)) for name in names}
    runs.update(_ranked_outputs(runs))
    best: tuple[float, float, tuple[float, float], str, int, float] | None = None
    for eps, delta in claims:
        for name, (a, b, _, _) in runs.items():
            taus = _thresholds(a, b)
            bounds = _events(a, b, taus, delta, alpha)
            row, col = (int(i) for i in np.unravel_index(int(np.argmax(bounds)), bounds.shape))
            value = float(bounds[row, col])
            if best is None or value - eps > best[0]:
                best = (value - eps, value, (eps, delta), name, row, float(taus[col]))
    assert best is not None
    _, pilot_value, (eps, delta), name, event, tau = best
    a, b = runs[name][2], runs[name][3]
    final = float(_events(a, b, np.asarray([tau]), delta, alpha)[event, 0])
    return AuditResult(final, eps, delta, name, _EVENT_TEXT[event].format(o=name, t=f"{tau:g}"),
                       tau, pilot_value, int(min(a.size, b.size)), alpha)


#: Where :func:`audit_curves` reads a plan's curves: these fractions of the ε its cost claims.
CURVE_POINTS = (0.25, 0.5, 0.75, 1.0)


def curve_claims(curves: Sequence[Any], epsilons: Sequence[float]) -> list[tuple[float, float]]:
    """The (ε, δ) pairs a plan's privacy curves (``MechanismPlan.privacy``), composed, claim at each ε of ``epsilons``.

    Composed by the PLD accountant (tight: the curves' own δ(ε), rounded toward privacy, as ``sess.spent_report()``
    reads them in a ``pld`` session); a pair whose δ is 1 or more claims nothing and is left out.

    Example:
        >>> from dpframe import accounting as acc
        >>> [(e, round(d, 4)) for e, d in curve_claims([acc.laplace(1.0)], [0.5, 1.0])]   # Laplace(1) is 1-DP
        [(0.5, 0.2212), (1.0, 0.0)]

    """
    pld = PLDAccountant()
    for curve in curves:
        pld.compose(curve)
    pairs = [(float(e), float(pld.delta(float(e)))) for e in epsilons]
    return [(e, d) for e, d in pairs if d < 1]


def _output(samples: Samples, name: str) -> npt.NDArray[np.float64]:
    """``samples[name]`` as floats; an output no run of ``samples`` produced is NaN in every run (+inf here)."""
    if name in samples:
        return _as_float(samples[name])
    runs = max((np.asarray(v).size for v in samples.values()), default=0)
    return np.full(runs, np.inf)


#: The most distinct values (pilot runs of both datasets) of an output the audit also tests ranked by likelihood ratio.
MAX_RANKED = 64

Runs = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]


def _ranked_outputs(runs: Mapping[str, Runs]) -> dict[str, Runs]:
    """Discrete outputs, and all outputs jointly, recoded so that a threshold event is a likelihood-ratio event.

    A threshold event ``{x ≥ τ}`` on an output taken as it is sees only the leak that is monotone in its value: a
    date bound that moves both ways, a top-k key code, or two bounds that each move a little (the pair moves
    more) escape it. For each output with at most :data:`MAX_RANKED` distinct pilot values, and for the tuple of
    all outputs (``"joint(...)"``, when it has that few), each value is replaced by its rank in the order of the
    *pilot* ratio P̂[value | D] / P̂[value | D'] (add-½ counts); values the pilot never saw get the middle rank.
    The events ``{rank ≥ τ}`` are then the Neyman–Pearson (most powerful) events of that discrete output, as
    estimated on the pilot. The recoding is a function of the pilot runs only, so the bound computed on the
    final runs keeps its 1 − α confidence.
    """
    out: dict[str, Runs] = {}
    for name, four in runs.items():
        ranked = _rank_by_pilot_ratio(four)
        if ranked is not None:
            out[f"{name} (ranked by pilot ratio)"] = ranked
    if len(runs) > 1:
        joint = _joint_codes(list(runs.values()))
        ranked = _rank_by_pilot_ratio(joint)
        if ranked is not None:
            out[f"joint({', '.join(runs)}) (ranked by pilot ratio)"] = ranked
    return out


def _joint_codes(outputs: Sequence[Runs]) -> Runs:
    """One code per run for the tuple of all outputs (the same tuple, the same code, in all four sets of runs)."""
    sizes = [x.size for x in outputs[0]]
    rows = np.column_stack([np.concatenate(o) for o in outputs])
    _, codes = np.unique(rows, axis=0, return_inverse=True)
    parts = np.split(codes.astype(np.float64).ravel(), np.cumsum(sizes)[:-1])
    return parts[0], parts[1], parts[2], parts[3]


def _rank_by_pilot_ratio(four: Runs) -> Runs | None:
    pilot_a, pilot_b, final_a, final_b = four
    values = np.unique(np.concatenate([pilot_a, pilot_b]))
    if not 2 <= values.size <= MAX_RANKED:
        return None
    count_a = np.searchsorted(np.sort(pilot_a), values, side="right") - np.searchsorted(np.sort(pilot_a), values)
    count_b = np.searchsorted(np.sort(pilot_b), values, side="right") - np.searchsorted(np.sort(pilot_b), values)
    ratio = np.log((count_a + 0.5) / pilot_a.size) - np.log((count_b + 0.5) / pilot_b.size)
    rank = np.empty(values.size, dtype=np.float64)
    rank[np.argsort(ratio, kind="stable")] = np.arange(values.size, dtype=np.float64)
    middle = (values.size - 1) / 2

    def recode(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        at = np.minimum(np.searchsorted(values, x), values.size - 1)
        return np.where(values[at] == x, rank[at], middle)
    return recode(pilot_a), recode(pilot_b), recode(final_a), recode(final_b)


def _tile(stats: Mapping[str, npt.ArrayLike], group: int, n: int) -> dict[str, npt.NDArray[Any]]:
    return {k: np.repeat(np.asarray(v)[group:group + 1], n) for k, v in stats.items()}


def release_sampler(plan: MechanismPlan, stats: Mapping[str, npt.ArrayLike], *, group: int = 0,
                    batched: bool = True) -> Sampler:
    """``sampler(n, seed)``: n independent releases of ``plan`` on group ``group`` of ``stats``.

    ``batched=True`` makes one ``release`` call on n copies of the group (valid when the mechanism noises
    groups independently, as every additive mechanism does); ``batched=False`` calls ``release`` n times.

    Example:
        >>> from fractions import Fraction
        >>> import dpframe as dp
        >>> from dpframe_aggregates import AggregateMechanism
        >>> from dpframe.testing import measure_context
        >>> plan = AggregateMechanism().plan([dp.len()], measure_context(), dp.PureDP(1))
        >>> sampler = release_sampler(plan, {"__rows": [10]})
        >>> sampler(5, 0)["len"].shape
        (5,)

    """
    def sample(n: int, seed: int) -> dict[str, npt.NDArray[Any]]:
        rng = SeededRandomSource(seed)
        if batched:
            return {k: np.asarray(v) for k, v in plan.release(_tile(stats, group, n), rng).items()}
        runs = [plan.release(_tile(stats, group, 1), rng) for _ in range(n)]
        return {k: np.concatenate([np.asarray(r[k]) for r in runs]) for k in runs[0]}
    return sample


def audit_sampler(sample_a: Sampler, sample_b: Sampler, *, claimed_epsilon: float, delta: float = 0.0,
                  samples: int = 20_000, seed: int = 0, alpha: float = 1e-6,
                  outputs: Sequence[str] | None = None) -> AuditResult:
    """Audit any mechanism given as two samplers (runs on D and on D'): pilot then final, all seeded.

    Example:
        >>> from fractions import Fraction
        >>> from dpframe.noise import SeededRandomSource, discrete_laplace
        >>> def on(shift):
        ...     return lambda n, seed: {"x": shift + discrete_laplace(Fraction(2), n, SeededRandomSource(seed))}
        >>> audit_sampler(on(0), on(1), claimed_epsilon=0.5, samples=10_000).passed
        True

    """
    seeds = [seed * 4 + i for i in range(4)]
    return audit_samples(sample_a(samples, seeds[0]), sample_b(samples, seeds[1]), sample_a(samples, seeds[2]),
                         sample_b(samples, seeds[3]), claimed_epsilon=claimed_epsilon, delta=delta,
                         alpha=alpha, outputs=outputs)


def audit_release(plan: MechanismPlan, stats_a: Mapping[str, npt.ArrayLike], stats_b: Mapping[str, npt.ArrayLike],
                  *, samples: int = 20_000, seed: int = 0, group: int = 0, alpha: float = 1e-6,
                  zcdp_delta: float = 1e-3, batched: bool = True,
                  outputs: Sequence[str] | None = None) -> AuditResult:
    """Audit ``plan.release`` on the exact statistics of two neighbouring datasets.

    The claim audited is ``plan.cost`` (see :func:`claimed_epsilon_delta`; a zCDP cost is audited as
    its (ε, ``zcdp_delta``)-DP form). ``group`` selects the group (row of the statistics) the neighbour
    changed.

    Example:
        >>> import dpframe as dp
        >>> from dpframe_aggregates import AggregateMechanism
        >>> from dpframe.testing import measure_context
        >>> plan = AggregateMechanism().plan([dp.len()], measure_context(max_rows=3), dp.PureDP(1))
        >>> r = audit_release(plan, {"__rows": [40]}, {"__rows": [43]}, samples=10_000)
        >>> r.passed, r.claimed_epsilon
        (True, 1.0)

    """
    eps, delta = claimed_epsilon_delta(plan.cost, zcdp_delta)
    return audit_sampler(release_sampler(plan, stats_a, group=group, batched=batched),
                         release_sampler(plan, stats_b, group=group, batched=batched),
                         claimed_epsilon=eps, delta=delta, samples=samples, seed=seed, alpha=alpha,
                         outputs=outputs)


def audit_curves(plan: MechanismPlan, stats_a: Mapping[str, npt.ArrayLike], stats_b: Mapping[str, npt.ArrayLike],
                 *, samples: int = 20_000, seed: int = 0, group: int = 0, alpha: float = 1e-6,
                 zcdp_delta: float = 1e-3, batched: bool = True,
                 outputs: Sequence[str] | None = None) -> list[AuditResult]:
    """Audit ``plan.release`` on two neighbours' statistics against the privacy curves the plan declares.

    RDP and PLD sessions charge a plan's ``privacy`` curves instead of its ``cost``, and the engine can check them
    only against what the plan *says*: its declared :class:`~dpframe.mechanism.Noise` (a false
    ``coordinate_sensitivity`` is believed) or, with no ``Noise`` declared, its cost (which curves spreading the
    move over several coordinates meet). This audit holds the release to the curves themselves: the (ε, δ) pairs
    they claim (:func:`curve_claims`, at :data:`CURVE_POINTS` of the ε :func:`claimed_epsilon_delta` reads from
    the cost) are tested together (:func:`audit_claims`). ``[]`` when the plan declares no curves.

    Example:
        >>> import numpy as np, dpframe as dp
        >>> from fractions import Fraction
        >>> from dpframe import accounting as acc
        >>> from dpframe_aggregates import AggregateMechanism
        >>> from dpframe.testing import measure_context
        >>> plan = AggregateMechanism().plan([dp.len()], measure_context(max_rows=4), dp.PureDP(1))
        >>> t = float(plan.noise["count(rows)"].scale)
        >>> [r.passed for r in audit_curves(plan, {"__rows": [40]}, {"__rows": [44]}, samples=10_000)]
        [True]
        >>> plan.privacy = [acc.discrete_laplace(t, 1)] * 4     # the lie: four one-step moves; one moves by 4
        >>> [r.passed for r in audit_curves(plan, {"__rows": [40]}, {"__rows": [44]}, samples=10_000)]
        [False]

    """
    if plan.privacy is None:
        return []
    curves = list(plan.privacy)          # read once: what is audited is what was read
    top, _ = claimed_epsilon_delta(plan.cost, zcdp_delta)
    claims = curve_claims(curves, [top * p for p in CURVE_POINTS])
    if not claims:
        return []
    seeds = [seed * 4 + i for i in range(4)]
    a = release_sampler(plan, stats_a, group=group, batched=batched)
    b = release_sampler(plan, stats_b, group=group, batched=batched)
    result = audit_claims(a(samples, seeds[0]), b(samples, seeds[1]), a(samples, seeds[2]), b(samples, seeds[3]),
                          claims, alpha=alpha, outputs=outputs)
    return [result.labelled(f"curves {', '.join(getattr(c, 'label', type(c).__name__) for c in curves)}")]


def exact_statistics(table: pl.DataFrame, unit: PrivacyUnit, statistics: Sequence[Statistic], *,
                     by: Sequence[str] = (), keys: pl.DataFrame | None = None,
                     seed: int = 0) -> dict[str, npt.NDArray[Any]]:
    """Compute exact statistics with the Polars backend: what a mechanism's ``release`` receives (tests only).

    One array per :attr:`Statistic.key`, one entry per group, for ``table`` under ``unit`` (contribution
    bounding included, seeded by ``seed``).

    Example:
        >>> import polars as pl
        >>> from dpframe.mechanism import Statistic
        >>> from dpframe.privacy_unit import PrivacyUnit
        >>> t = pl.DataFrame({"user": [1, 1, 2], "x": [1.0, 5.0, 9.0]})
        >>> exact_statistics(t, PrivacyUnit("user", max_rows=2), [Statistic("rows")])["__rows"].tolist()
        [3]

    """
    backend = PolarsBackend()
    backend.register("t", table.lazy())
    request = StatisticsRequest("t", (), unit, tuple(by), keys, tuple(statistics), seed)
    frame = backend.statistics(request)
    return {s.key: frame[s.key].to_numpy() for s in statistics}


def _new_unit_id(column: pl.Series) -> Any:
    top: Any = column.max()
    if column.dtype.is_integer():
        return int(top or 0) + 1
    if column.dtype.is_float():
        return float(top or 0) + 1
    return "__dpframe_neighbour__"


def neighbouring_tables(table: pl.DataFrame, unit: PrivacyUnit, values: Mapping[str, Any]) -> pl.DataFrame:
    """``table`` plus one new privacy unit with ``unit.max_rows`` rows (D' for the neighbour pair (D, D')).

    Every new row takes ``values[column]`` where given, else the first row's value (so group columns
    put the neighbour in the first row's group). The unit column gets a fresh id.

    Example:
        >>> import polars as pl
        >>> from dpframe.privacy_unit import PrivacyUnit
        >>> t = pl.DataFrame({"user": [1, 2], "x": [1.0, 2.0]})
        >>> neighbouring_tables(t, PrivacyUnit("user", max_rows=2), {"x": 100.0})["x"].to_list()
        [1.0, 2.0, 100.0, 100.0]

    """
    unknown = set(values) - set(table.columns)
    if unknown:
        raise ValueError(f"values name columns that are not in the table: {sorted(unknown)}")
    row: dict[str, Any] = {c: table[c][0] for c in table.columns}
    row.update(values)
    if unit.column is not None:
        row[unit.column] = _new_unit_id(table[unit.column])
    extra = pl.DataFrame([row] * unit.max_rows, schema=table.schema, orient="row")
    return pl.concat([table, extra])


def extreme_assignments(candidates: Mapping[str, Sequence[Any]], limit: int = 8) -> list[dict[str, Any]]:
    """Combinations of per-column candidate values for the neighbour's rows (at most ``limit``).

    Example:
        >>> extreme_assignments({"x": [0, 10], "y": [1]})
        [{'x': 0, 'y': 1}, {'x': 10, 'y': 1}]

    """
    cols = list(candidates)
    combos = itertools.islice(itertools.product(*(candidates[c] for c in cols)), limit)
    return [dict(zip(cols, combo)) for combo in combos]


def bound_extremes(bounds: tuple[Fraction, Fraction]) -> list[float]:
    """The two ends of clipping bounds, farthest from zero first (the rows that move a sum the most).

    Example:
        >>> from fractions import Fraction
        >>> bound_extremes((Fraction(-10), Fraction(5)))
        [-10.0, 5.0]

    """
    lo, hi = float(bounds[0]), float(bounds[1])
    return [hi, lo] if abs(hi) >= abs(lo) else [lo, hi]
