"""``agg`` queries that choose their own bounds privately, then release: one charge, stated shares.

With ``dp.PrivacyUnit(..., max_rows="auto", max_groups="auto")`` or ``dp.sum/mean/var/std(col,
bounds="auto")`` (or ``collect(..., diagnostics=True)``), an ``agg`` query runs in stages inside *one*
reservation of its whole budget, split before anything runs (:mod:`dpframe.tuning.shares`):

1. **Contribution bounds.** One read of each unit's rows and groups (no bounding), released as noisy
   histograms on the public :data:`~dpframe.tuning.grid.ROW_CANDIDATES` grid: rows per unit, groups per
   unit. A unit falls in exactly one bin of each, so under add/remove of one unit each histogram moves
   by 1 in one bin (L1 = L2 = 1): discrete Laplace (scale 1/ε) or discrete Gaussian (σ² = 1/(2ρ)) noise
   makes each histogram cost exactly its share. ``max_groups``, then ``max_rows`` are the candidates
   with the least estimated error (:mod:`dpframe.tuning.choose`: post-processing).
2. **Clipping bounds.** For each ``bounds="auto"`` column, one read of a uniform random subset of ≤
   :data:`SAMPLE_ROWS` rows per unit, released as a noisy histogram on the column's signed grid
   (:func:`~dpframe.tuning.grid.value_edges`): each row in one bin, L1 (and L2) sensitivity
   :data:`SAMPLE_ROWS`, noise calibrated to it (not to ``max_rows``, which would drown the histogram at
   user level). Scaled to the rows the release keeps (estimated from stage 1, else ``max_rows`` /
   :data:`SAMPLE_ROWS`: post-processing), it gives each measure's bounds: the least estimated clipping
   bias plus noise. The subset weighs units more evenly than the release does: a unit with many rows
   and unusual values is under-represented.
3. **Release.** The query is planned with the chosen numbers (public: they were released) at the
   release share, and runs as any ``agg`` query.

Proof sketch: stage 1 is (ε₁ or ρ₁)-DP, stage 2 given stage 1's output is (ε₂ or ρ₂)-DP (its
sensitivity is a function of released values), stage 3 given both is the release's guarantee
(ε₃, δ) — adaptive sequential composition (basic, or zCDP's) gives the sum: the query's budget. The
charge is computed before anything runs from the shares alone (RDP/PLD sessions: the curves each
share's budget guarantees), and the release at the largest candidates is planned beforehand too, so no
choice can make the run fail.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"u": [i % 50 for i in range(2000)], "x": [float(i % 7) for i in range(2000)]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows="auto"), budget=dp.PureDP(4),
    ...                   seed=0)
    >>> q = sess.table("t").agg(dp.len())
    >>> q.cost(dp.PureDP(2))
    PureDP(epsilon=2)
    >>> out = q.collect(dp.PureDP(2)); sess.spent()
    PureDP(epsilon=2)

"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import polars as pl

from dpframe.accounting.accountants import plan_curves
from dpframe.budgets import Budget, describe, make
from dpframe.errors import PlanError, SchemaError
from dpframe.explain import explain_aggregate
from dpframe.family import Explain, FamilyPlan, Source
from dpframe.measures import auto_bounds, with_bounds
from dpframe.mechanism import Noise, Statistic
from dpframe.plan.nodes import Aggregate
from dpframe.plan.sample import Sample
from dpframe.planning import PhysicalPlan, PlanContext, budget_of, first, plan_query
from dpframe.privacy_unit import AUTO, PrivacyUnit
from dpframe.tuning.choose import Chosen, ErrorModel, clipping_error, denoise, groups_error, kept_rows, rows_error
from dpframe.tuning.diagnostics import Diagnosed, by_unit_and_group, diagnose, noises
from dpframe.tuning.grid import AUTO_MAX_ROWS, OUTER, ROW_CANDIDATES, bin_of, value_edges
from dpframe.tuning.shares import Shares, split

if TYPE_CHECKING:
    from dpframe.noise import RandomSource
    from dpframe.release import PrivateReader

SAMPLE_ROWS = 4
"""Rows per unit the clipping histogram reads (a uniform random subset): its noise scales with this, not max_rows."""

AUTO_KINDS = frozenset({"sum", "mean", "var", "std"})
"""The measures that may take ``bounds="auto"``: every candidate range is a valid clipping range for them."""

TOTALS = frozenset({"len", "count", "count_units", "count_distinct", "sum"})
"""Measures whose value is a total (their error is judged against the total; others are ratios)."""


class RunAggregate(Protocol):
    """:func:`dpframe.aggregate.run_aggregate`: the release of a planned ``agg`` node."""

    def __call__(self, reader: PrivateReader, node: Aggregate, plan: PhysicalPlan, rng: RandomSource) -> pl.DataFrame:
        ...


@dataclass
class StagedPlan:
    """A staged plan: the shares, and the release as planned at the smallest bounds (what explain shows)."""

    shares: Shares
    shown: PhysicalPlan
    worst: PhysicalPlan

    @property
    def cost(self) -> Budget:
        """The query's cost: its whole budget (every share is spent)."""
        return self.shares.budget


def staged(unit: PrivacyUnit, node: Aggregate) -> bool:
    """Whether ``node`` must choose bounds when it runs: an ``"auto"`` number it reads, or auto clipping.

    ``max_groups="auto"`` bounds nothing without a group-by: such a query reads ``max_rows`` alone, as under a
    unit without ``max_groups``, and has an ordinary plan (so every entry point runs it alike).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> from dpframe.planning import agg_node
        >>> unit, schema = dp.PrivacyUnit("u", max_rows=3, max_groups="auto"), pl.Schema({"g": pl.Int64})
        >>> staged(unit, agg_node(schema, dp.len())), staged(unit, agg_node(schema, dp.len(), by=("g",)))
        (False, True)

    """
    return bool(_items(unit, node))


def require_plan(unit: PrivacyUnit, node: Aggregate, what: str) -> None:
    """A PlanError (free) if ``node`` chooses bounds when it runs (:func:`staged`): ``what`` plans it first.

    ``plan()``, accuracy targets, ``run_until``, ``gated_release`` and the individual filter need a query's plan
    before it runs; a query that chooses ``max_rows`` / ``max_groups`` (``"auto"``, ``max_groups`` with a group-by
    only) or ``bounds="auto"`` has none. Every one of them refuses it alike, on public facts only (the unit and the
    query): naming ``privacy_unit`` (or ``bounds``) with the same fix. ``collect(budget)`` and SQL run it.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> from dpframe.planning import agg_node
        >>> unit, schema = dp.PrivacyUnit("u", max_rows=3, max_groups="auto"), pl.Schema({"g": pl.Int64})
        >>> require_plan(unit, agg_node(schema, dp.len()), "run_until")          # no group-by: max_rows alone
        >>> require_plan(unit, agg_node(schema, dp.len(), by=("g",)), "run_until")
        Traceback (most recent call last):
        ...
        dpframe.errors.PlanError: privacy_unit: this query chooses max_groups when it runs, so run_until cannot ...

    """
    items = _items(unit, node)
    if not items:
        return
    if items[0].startswith("bounds"):
        argument, fix = "bounds", "pass bounds=(lower, upper), e.g. from frame.bounds(column)"
    else:
        argument = "privacy_unit"
        fix = ("open the session with numbers: dp.PrivacyUnit(column, max_rows=N, max_groups=M) (max_groups='auto' is "
               "read only by a query with a group-by); or run the query with collect(budget) or sess.sql(...), which "
               "choose them when it runs (explain(budget) and cost(budget) describe it)")
    raise PlanError(f"this query chooses {', '.join(items)} when it runs, so {what} cannot plan it before it runs",
                    argument=argument, fix=fix)


def check_auto(source: Source, node: Aggregate) -> None:
    """Build-time checks of the ``"auto"`` parts of a query (free): numeric columns, no Poisson sample.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> from dpframe.planning import agg_node
        >>> node = agg_node(pl.Schema({"s": pl.String}), dp.sum("s", bounds="auto"))
        >>> check_auto(None, node)
        Traceback (most recent call last):
        ...
        dpframe.errors.SchemaError: bounds: bounds='auto' needs a numeric column; 's' is String...

    """
    for m in node.measures:
        if auto_bounds(m):
            if m.kind not in AUTO_KINDS or m.column is None:
                raise PlanError(f"bounds='auto' is for {', '.join(sorted(AUTO_KINDS))} only, not {m.describe()} (the "
                                "release must accept every candidate range the tuning stage may choose)",
                                argument="bounds", fix="pass bounds=(lower, upper), e.g. from frame.bounds(column) "
                                "(under max_rows='auto': frame.bound(max_rows=<a number>).bounds(column))")
            dtype = node.schema.get(m.column)
            if dtype is not None and not (dtype.is_numeric() or dtype == pl.Boolean):
                raise SchemaError(f"bounds='auto' needs a numeric column; {m.column!r} is {dtype}", argument="bounds",
                                  fix="cast it first: .with_columns(pl.col(...).cast(pl.Float64, strict=False)), "
                                      "or pass bounds=(lower, upper)")
    if source is not None and source.unit.auto and any(isinstance(n, Sample) for n in node.lineage()):
        raise PlanError("a Poisson-sampled frame cannot tune max_rows / max_groups (tuning and release would read "
                        "different samples)", argument="privacy_unit",
                        fix="open the session with numbers for max_rows / max_groups to query a sample")


def stand_in(unit: PrivacyUnit, node: Aggregate, size: int = 1, edge: Fraction = Fraction(1)
             ) -> tuple[PrivacyUnit, Aggregate]:
    """``unit`` and ``node`` with ``size`` for every ``"auto"`` bound and ``(−edge, edge)`` for auto clipping."""
    measures = tuple(with_bounds(m, (-edge, edge)) if auto_bounds(m) else m for m in node.measures)
    return unit.tuned(size, size), dataclasses.replace(node, measures=measures)


def _items(unit: PrivacyUnit, node: Aggregate) -> tuple[str, ...]:
    rows = ("max_rows",) if unit.rows == AUTO else ()
    groups = ("max_groups",) if unit.groups == AUTO and node.grouped else ()
    columns = tuple(dict.fromkeys(f"bounds({m.column})" for m in node.measures if auto_bounds(m)))
    return rows + groups + columns


def _context(source: Source, unit: PrivacyUnit) -> PlanContext:
    return dataclasses.replace(source.context, unit=unit)


def plan_staged(source: Source, node: Aggregate, budget: object, *, ci: float | None, diagnostics: bool,
                run: RunAggregate, finish: Callable[[PhysicalPlan], PhysicalPlan]) -> FamilyPlan[Any]:
    """The plan of a staged ``agg`` query under ``budget`` (free; raises, uncharged, if it cannot run).

    ``run`` releases the tuned query (engine code: it receives the private reader, inside the reservation);
    ``finish`` adds what ``collect`` asked for (intervals) to a plan: it receives public values only (a plan
    made from released choices); it is applied to the plans checked before charging too (the dry runs of the
    smallest and largest bounds), so what it adds cannot fail only after the charge.
    """
    budget = budget_of(budget)
    source.context.accountant.charge(budget)    # one the session cannot take: refused by its name, not a share's
    unit, items = source.unit, _items(source.unit, node)
    shares = split(budget, items, diagnostics=diagnostics)
    edge = max((value_edges(node.schema[m.column])[-1] for m in node.measures if auto_bounds(m) and m.column),
               default=Fraction(1))
    worst_unit, worst_node = stand_in(unit, node, AUTO_MAX_ROWS, edge)        # the noisiest release: must plan
    worst = finish(plan_query(_context(source, worst_unit), worst_node, shares.release))
    if shares.diagnostics is not None:
        noises(worst_unit, worst_node, shares.diagnostics)      # the noisiest diagnostics: must be drawable
    shown_unit, shown_node = stand_in(unit, node)
    shown = unamplified(finish(plan_query(_context(source, shown_unit), shown_node, shares.release)))
    release_cost = make(shares.release.notion, first(shares.release), getattr(worst.cost, "delta", Fraction(0)))
    cost = make(budget.notion, first(budget), getattr(release_cost, "delta", Fraction(0)))
    curves = [c for _, share in shares.tuning for c in plan_curves(None, share)]
    curves += plan_curves(None, shares.diagnostics) if shares.diagnostics is not None else []
    curves += plan_curves(None, release_cost)
    charge = source.context.accountant.charge_plan(cost, curves, 1.0)
    names = ", ".join(p.mechanism for p in ([shown.selection] if shown.selection else []) + shown.plans)
    stages = [f"{names} ({shares.describe()})"]        # the history shows the split
    stages = (["bound tuning"] if items else []) + stages + (["diagnostics"] if diagnostics else [])
    tuner = Tuner(source, node, shares, shown)

    def execute(reader: PrivateReader, rng: RandomSource) -> Any:
        chosen, bounded, tuned = tuner.tune(reader.tuning(), rng)
        physical = finish(plan_query(_context(source, chosen.unit), tuned, shares.release))
        frame = run(bounded, tuned, physical, rng)
        if not diagnostics:
            return frame
        return Diagnosed(frame, diagnose(bounded, tuned, chosen, shares, frame.height, rng))
    return FamilyPlan(budget, cost, charge, ", ".join(stages), lambda: tuner.explain(source.context.backend),
                      execute, detail=StagedPlan(shares, shown, worst))


def unamplified(plan: PhysicalPlan) -> PhysicalPlan:
    """``plan`` (a staged query's release, as ``explain()`` shows it) saying that its sample is not amplified.

    A staged query is charged its whole budget (``charge_plan(cost, curves, 1.0)``): its stages read the data
    several times, each read a fresh Poisson sample, so the release's note "the charge is the amplified cost"
    (or "use accountant='rdp'") would describe a charge it does not make.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"u": [1], "x": [1.0]})}, budget=dp.PureDP(1),
        ...                   privacy_unit=dp.PrivacyUnit("u", max_rows=1))
        >>> plan = sess.table("t").sample(0.5).agg(dp.len()).plan(dp.PureDP(1))
        >>> plan.notes[-1]
        'Poisson sample at rate 0.5: the charge is the amplified cost'
        >>> unamplified(plan).notes[-1][:50]
        'Poisson sample at rate 0.5: charged the full cost '

    """
    if plan.rate >= 1:
        return plan
    note = (f"Poisson sample at rate {plan.rate:g}: charged the full cost (a query that chooses its bounds or "
            "releases diagnostics reads the data in stages, each on a fresh sample: its charge is not amplified; "
            "pass fixed bounds and leave diagnostics out for the amplified charge)")
    return dataclasses.replace(plan, notes=tuple(note if n.startswith("Poisson sample at rate") else n
                                                 for n in plan.notes))


class Tuner:
    """The tuning stage of one planned query: its reads, releases and choices, and its explanation."""

    def __init__(self, source: Source, node: Aggregate, shares: Shares, shown: PhysicalPlan) -> None:
        self.source, self.node, self.shares, self.shown = source, node, shares, shown
        self.model = ErrorModel(cells=node.keys.height if node.keys is not None else 1, noise=_noise_per_unit(shown),
                                totals=sum(m.kind in TOTALS for m in node.measures),
                                ratios=sum(m.kind not in TOTALS for m in node.measures))

    def share(self, item: str) -> Budget:
        """The tuning share of ``item``."""
        return dict(self.shares.tuning)[item]

    def tune(self, reader: PrivateReader, rng: RandomSource) -> tuple[Chosen, PrivateReader, Aggregate]:
        """Choose the bounds (releases noisy histograms; runs inside the reservation)."""
        unit, node = self.source.unit, self.node
        kept: float | None = None
        if unit.auto:
            unit, kept = self._contribution(reader, rng)
        bounded = reader.bounded_by(unit)
        chosen: dict[str, tuple[Fraction, Fraction]] = {}
        measures = []
        histograms: dict[str, tuple[tuple[Fraction, ...], np.ndarray]] = {}
        for m in node.measures:
            if auto_bounds(m):
                assert m.column is not None
                if m.column not in histograms:
                    histograms[m.column] = self._values(reader, unit, kept, m.column, rng)
                edges, counts = histograms[m.column]
                noise = self.model.cells * self.model.noise * unit.max_rows
                err = clipping_error(counts, np.asarray([float(e) for e in edges]), m.kind, noise)
                a, b = np.unravel_index(int(np.argmin(err)), err.shape)
                lo, hi = edges[a], edges[b]
                if m.kind == "sum":        # a sum's noise grows with max(|lo|, |hi|): reaching 0 costs nothing
                    lo, hi = min(lo, Fraction(0)), max(hi, Fraction(0))
                chosen[m.output_name] = (lo, hi)
                m = with_bounds(m, chosen[m.output_name])
            measures.append(m)
        tuned = tuple(item for item, _ in self.shares.tuning if item in ("max_rows", "max_groups"))
        return Chosen(unit, chosen, tuned), bounded, dataclasses.replace(node, measures=tuple(measures))

    def _contribution(self, reader: PrivateReader, rng: RandomSource) -> tuple[PrivacyUnit, float | None]:
        """The unit with chosen numbers, and the rows it keeps as estimated from the released histogram."""
        unit, node = self.source.unit, self.node
        if not any(item in ("max_rows", "max_groups") for item, _ in self.shares.tuning):
            return unit.tuned(unit.max_rows, None), None      # max_groups="auto" without a group-by: unused
        assert unit.column is not None
        per = reader.statistics(node.input, (Statistic("rows"),), by=by_unit_and_group(unit.column, node.by),
                                 bound=False)
        if node.keys is not None:
            per = per.join(node.keys, on=list(node.by), how="semi", nulls_equal=True)
        units = per.group_by(unit.column).agg(pl.col("__rows").sum().alias("n"), pl.len().alias("g"))
        groups = None
        if unit.groups == AUTO and node.grouped:
            counts = self._histogram(units["g"].to_numpy(), self.share("max_groups"), rng)
            cap = len(ROW_CANDIDATES) if unit.rows == AUTO else \
                int(np.searchsorted(ROW_CANDIDATES, unit.max_rows, "right"))
            costs = [self._group_cost(g) for g in ROW_CANDIDATES[:max(cap, 1)]]
            err = groups_error(counts, [*costs, *[np.inf] * (len(ROW_CANDIDATES) - len(costs))], self.model.cells)
            groups = ROW_CANDIDATES[int(np.argmin(err))]
        if unit.rows != AUTO:
            return unit.tuned(unit.max_rows, groups), None
        counts = self._histogram(units["n"].to_numpy(), self.share("max_rows"), rng)
        best = int(np.argmin(rows_error(counts, self.model) + self._selection_error(counts)))
        return unit.tuned(ROW_CANDIDATES[best], groups), float(kept_rows(counts)[best])

    def _selection_error(self, counts: np.ndarray) -> np.ndarray:
        """Under ``max_rows="auto"`` without ``max_groups``, private keys: what τ(c) costs each candidate c.

        A unit then keeps up to c groups, so the selection's L0 is c and τ grows with it (nearly linearly under
        (ε, δ), as √c under zCDP). A group of fewer than about τ units is suppressed, and no group has more units
        than the N̂ the rows histogram counts: a candidate with τ(c) ≥ N̂ releases nothing. Each cell is charged
        τ(c)/N̂ per measure — what losing a cell of τ units costs, as :func:`groups_error` charges τ for
        ``max_groups`` — so such a candidate errs by ≥ 100% and loses to every other (the error of
        :func:`rows_error` is below that whenever its noise is). τ(c) is planned from public parameters (the
        release at c) and N̂ is a released count: post-processing. τ grows with c, so past the first candidate
        whose τ reaches 2N̂ the rest are charged that τ (less than theirs) unplanned. Elsewhere: zeros.
        """
        unit, node = self.source.unit, self.node
        if unit.groups is not None or not node.grouped or node.keys is not None:
            return np.zeros(len(ROW_CANDIDATES))
        units = max(float(np.maximum(counts, 0.0).sum()), 1.0)
        taus = np.zeros(len(ROW_CANDIDATES))
        for i, size in enumerate(ROW_CANDIDATES):
            taus[i:] = self._selection_threshold(size)
            if taus[i] >= 2 * units:
                break
        out: np.ndarray = (self.model.totals + self.model.ratios) * self.model.cells * taus / units
        return out

    def _selection_threshold(self, size: int) -> int:
        """τ of the release planned with ``max_rows = size`` (``max_groups`` following it): public."""
        unit = self.source.unit
        plan = plan_query(_context(self.source, unit.tuned(size, None)), stand_in(unit, self.node, size)[1],
                          self.shares.release)
        return int(getattr(plan.selection, "threshold", 0))

    def _histogram(self, values: np.ndarray, share: Budget, rng: RandomSource) -> np.ndarray:
        exact = np.bincount(bin_of(values, ROW_CANDIDATES), minlength=len(ROW_CANDIDATES))
        noise = Noise.calibrate(Fraction(1), share)
        return denoise(exact + noise.sample(exact.size, rng), noise)

    def _group_cost(self, groups: int) -> float:
        """What one cell pays, in units, when units keep ``groups`` groups (selection threshold, unit counts)."""
        if self.node.keys is not None and not any(m.kind == "count_units" for m in self.node.measures):
            return 0.0
        unit = self.source.unit.tuned(groups, groups)
        plan = plan_query(_context(self.source, unit), stand_in(unit, self.node)[1], self.shares.release)
        units = sum(m.kind == "count_units" for m in self.node.measures) * self.model.noise * math.sqrt(groups)
        return float(getattr(plan.selection, "threshold", 0)) + units

    def _values(self, reader: PrivateReader, unit: PrivacyUnit, kept: float | None, column: str, rng: RandomSource
                ) -> tuple[tuple[Fraction, ...], np.ndarray]:
        """The column's noisy histogram, read on ≤ SAMPLE_ROWS rows per unit and scaled to the rows kept."""
        edges = value_edges(self.node.schema[column])
        cuts = (-OUTER, *edges, OUTER)
        stats = tuple(Statistic("indicator_sum", column, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:]))
        few = min(SAMPLE_ROWS, unit.max_rows)
        sample = reader.bounded_by(unit if unit.is_row else PrivacyUnit(unit.column, few))
        exact = sample.statistics(self.node.input, stats)
        counts = np.asarray([int(exact[s.key][0]) if exact.height else 0 for s in stats], dtype=np.int64)
        noise = Noise.calibrate(Fraction(few), self.share(f"bounds({column})"))
        seen = denoise(counts + noise.sample(counts.size, rng), noise)
        scale = unit.max_rows / few if kept is None else kept / max(float(seen.sum()), 1.0)
        return edges, seen * max(scale, 1.0)

    def explain(self, backend: str) -> Explain:
        """The tuning block, then the release as planned at max_rows = 1 and bounds (−1, 1)."""
        shown = explain_aggregate(self.source.unit, self.node, self.shown, backend)
        lines = [f"budget split: {self.shares.describe()}"]
        for item, share in self.shares.tuning:
            what = ("a noisy histogram of rows per unit" if item == "max_rows" else
                    "a noisy histogram of groups per unit" if item == "max_groups" else
                    f"a noisy histogram of {item[7:-1]} (rows kept by the contribution bounds) on 0, ±1, ±2, ±4, ...")
            lines.append(f"tuning {item}: {what}, {describe(share)}; chosen to minimise estimated bias + noise")
        if self.shares.tuning:      # name the stand-ins of this query's choices only (a fixed bound shows as itself)
            tuned = [item for item, _ in self.shares.tuning]
            columns = [item[7:-1] for item in tuned if item.startswith("bounds(")]
            stand = [f"{item}=1" for item in ("max_rows", "max_groups") if item in tuned]
            stand += [f"bounds (−1, 1) for {', '.join(columns)}"] if columns else []
            grows = (["every ± in proportion to the max_rows chosen"] if "max_rows" in tuned else []) + (
                [f"the ± of {', '.join(columns)} to the size of the bounds chosen"] if columns else [])
            lines.append(f"release: shown below at {' and '.join(stand)}; its ± (and, with private keys, the "
                         "threshold τ) grows with the values chosen" + (f" ({'; '.join(grows)})" if grows else "") +
                         ": the ± below is at these stand-ins, not at the values chosen (collect(..., ci=0.95) "
                         "gives intervals at the values chosen)")
        notes = [*shown.notes, *self._groups_note(),
                 "tuning: candidates 1, 2, 3, 4, 6, 8, ..., 65536 rows or groups; the rule and its failure modes are "
                 "in docs/bounds.md; collect(..., diagnostics=True) shows what was chosen"] if self.shares.tuning \
            else list(shown.notes)
        data = {**shown.data, "shares": self.shares.describe()}
        return Explain("dpframe query plan" + (" (bounds chosen privately)" if self.shares.tuning else ""),
                       shown.steps, (*lines, *shown.lines), tuple(notes), data)

    def _groups_note(self) -> list[str]:
        """Under ``max_rows="auto"`` without ``max_groups``, private keys: τ follows the chosen ``max_rows``."""
        unit, node = self.source.unit, self.node
        if unit.rows != AUTO or unit.groups is not None or not node.grouped or node.keys is not None:
            return []
        taus = []
        for size in (1, 16, 256):
            plan = plan_query(_context(self.source, unit.tuned(size, None)), stand_in(unit, node, size)[1],
                              self.shares.release)
            taus.append(f"{getattr(plan.selection, 'threshold', 0):,.0f} at {size}")
        return [f"partition selection under max_rows='auto': this privacy unit gives no max_groups, so a unit may "
                f"keep as many groups as the max_rows chosen, and τ grows with it (τ ≈ {', '.join(taus)}): groups of "
                "fewer units are suppressed. The rule charges each max_rows its τ, so it keeps fewer rows per unit "
                "where a larger τ would suppress every group. If a unit is in few groups (an aircraft flies for one "
                "carrier), say so: "
                "dp.PrivacyUnit(column, max_rows='auto', max_groups=<a number>) or max_groups='auto' (chosen "
                "privately too), or pass public keys: group_by(..., keys=[...])"]


def _noise_per_unit(plan: PhysicalPlan) -> float:
    """The release's noise standard deviation per unit of sensitivity (median over its additive noises)."""
    per = [n.std() / (float(n.unit) * float(n.sensitivity)) for p in plan.plans for n in p.noise.values()
           if isinstance(n, Noise)]
    if per:
        return statistics.median(per)
    part = float(first(plan.budget))
    return math.sqrt(2) / part if plan.budget.notion != "zcdp" else 1 / math.sqrt(2 * part)


__all__ = ["AUTO_KINDS", "RunAggregate", "StagedPlan", "TOTALS", "Tuner", "check_auto", "plan_staged",
           "require_plan", "stand_in", "staged", "unamplified"]
