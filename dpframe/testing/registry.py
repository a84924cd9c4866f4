"""Audit specifications: which neighbouring datasets to audit each mechanism kind on, and a registry of them.

An :class:`AuditSpec` says how to run a mechanism (a *sampler factory*: dataset → ``(claimed cost,
sampler)``), the budget to audit at, and the adversarial neighbouring pairs (D, D') to audit it on.
:func:`run_audit` runs :func:`~dpframe.testing.audit_sampler` on every pair and checks, on the way, that
the cost does not depend on the data. :func:`register_audit` adds a spec to the registry that the
engine's own audit suite (``tests/audit``) and ``bench/audit_report.py`` run, and
:func:`unaudited_kinds` / :func:`unaudited_notions` / :func:`unaudited_queries` list the measure kinds
and noise notions of installed mechanisms, and the public query entry points (:func:`query_entry_points`),
that no spec covers (the audit suite fails on each of them), so a new mechanism or query method is
audited by registering one spec.

Two sampler factories cover most mechanisms:

* :func:`agg_sampler` — a ``Frame.agg`` query (optionally grouped, by public keys or with partition
  selection). The exact statistics of each dataset are computed once by a real backend (contribution
  bounding included) and the plan's ``release`` is called on n copies of the audited group: fast
  (20 000 runs in milliseconds) and valid because every group is noised independently.
* :func:`~dpframe.testing.queries.query_sampler` — any query object with ``cost(budget)`` /
  ``collect(budget)`` (top-k, interior point, an interactive stream wrapped in
  :class:`~dpframe.testing.queries.Stream`, ...): runs ``collect`` n times in seeded sessions. Slower but
  assumes nothing; the built-in query-level specs are in :mod:`dpframe.testing.query_audits`.

Adversarial neighbours (:func:`adversarial_pairs`): the empty dataset vs one unit; D vs D plus one unit
with ``max_rows`` rows at each extreme value (ends of the bounds, and values far outside them that
clamping must catch); D vs D plus one unit with 3 × ``max_rows`` rows (contribution bounding must cut).

Example:
    >>> import dpframe as dp
    >>> from dpframe.testing import default_table
    >>> unit = dp.PrivacyUnit("user", max_rows=2)
    >>> base = default_table([dp.len()], unit=unit)
    >>> spec = AuditSpec("len", frozenset({"len"}), dp.PureDP(1),
    ...                  lambda: adversarial_pairs(base, unit, {}), agg_sampler([dp.len()], unit), samples=5_000)
    >>> [r.passed for r in run_audit(spec)]
    [True, True, True]

"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.budgets import Budget, make
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, Mechanism, MechanismPlan
from dpframe.noise import SeededRandomSource
from dpframe.plugin import PluginHost
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.audit import (
    AuditResult,
    Sampler,
    audit_samples,
    claimed_epsilon_delta,
    extreme_assignments,
    neighbouring_tables,
)
from dpframe.testing.queries import SamplerFactory, _session, query_sampler, stable_code

__all__ = [
    "MODULE_QUERIES",
    "NOT_QUERIES",
    "AuditSpec",
    "Neighbours",
    "Overclaiming",
    "SamplerFactory",
    "adversarial_pairs",
    "agg_sampler",
    "query_entry_points",
    "query_sampler",
    "register_audit",
    "registered_audits",
    "release_outputs",
    "run_audit",
    "unaudited_kinds",
    "unaudited_notions",
    "unaudited_queries",
]



@dataclass(frozen=True)
class Neighbours:
    """Two datasets that differ by one privacy unit (D' = D plus the unit's rows)."""

    label: str
    table: pl.DataFrame
    neighbour: pl.DataFrame


@dataclass(frozen=True)
class AuditSpec:
    """How to audit one mechanism: budget, neighbouring pairs, and how to run it.

    ``kinds`` are the measure kinds (``Mechanism.handles``) the spec covers, at the noise notions of
    ``notions`` (default: from the budget — ``zcdp`` for a ρ budget, ``pure`` and ``approx`` for an (ε, δ)
    budget, ``pure`` for ε). ``queries`` are the public query entry points it covers (see
    :func:`query_entry_points`), e.g. ``"GroupBy.top_k[method=gumbel]"``. ``fast`` specs run in the
    default test run; the others only under ``-m slow``. ``min_power`` (a fraction of the claimed ε)
    guards against an audit too weak to catch anything: the best pair's lower bound must reach it.
    ``ex_post``: the mechanism settles its charge after the run (output DP); every cell is also audited
    against the ε it was settled to (:mod:`dpframe.testing.expost`). ``fast_pairs``: how many of the
    pairs the default run audits (None: all; every pair under ``-m slow``). ``max_samples``: the most runs
    ``bench/audit_report.py`` uses (query-level specs: each run is a ``collect``). ``known_bug``: the id of a known,
    reported bug that makes this audit fail until it is fixed; the test suite marks the spec
    ``xfail(strict=True)``, so the fix turns it into a failure that asks for the mark to go.
    """

    name: str
    kinds: frozenset[str]
    budget: Budget
    pairs: Callable[[], Sequence[Neighbours]]
    sampler: SamplerFactory
    samples: int = 20_000
    slow_samples: int = 200_000
    fast: bool = True
    min_power: float = 0.0
    zcdp_delta: float = 1e-3
    outputs: tuple[str, ...] | None = None
    notes: str = ""
    queries: frozenset[str] = frozenset()
    notions: frozenset[str] | None = None
    ex_post: bool = False
    known_bug: str | None = None
    fast_pairs: int | None = None
    max_samples: int | None = None

    def covered(self) -> set[tuple[str, str]]:
        """The (measure kind, noise notion) pairs this spec audits."""
        notions = self.notions if self.notions is not None else _notions_of(self.budget)
        return {(k, n) for k in self.kinds for n in notions}


def _notions_of(budget: Budget) -> frozenset[str]:
    if budget.notion == "zcdp":
        return frozenset({"zcdp"})
    return frozenset({"pure", "approx"}) if budget.notion == "approx" else frozenset({"pure"})


_REGISTRY: dict[str, AuditSpec] = {}
_LOADED: weakref.WeakSet[PluginHost] = weakref.WeakSet()   # hosts whose plugins registered their audits


def register_audit(spec: AuditSpec) -> AuditSpec:
    """Add ``spec`` to the registry (replacing a spec of the same name); returns it.

    Example:
        >>> import dpframe as dp
        >>> s = register_audit(AuditSpec("doc-example", frozenset({"len"}), dp.PureDP(1), list,
        ...                              agg_sampler([dp.len()], dp.PrivacyUnit.row())))
        >>> "doc-example" in [r.name for r in registered_audits()]
        True
        >>> _ = _REGISTRY.pop("doc-example")

    """
    _REGISTRY[spec.name] = spec
    return spec


def registered_audits() -> list[AuditSpec]:
    """Every registered spec: the built-in ones (``dpframe.testing.builtin_audits``) and the plugins' own.

    A plugin registers its specs through the ``dpframe_audits`` hook (a factory, called here once per
    plugin host); the built-ins and third-party plugins take the same road.
    """
    import dpframe.testing.builtin_audits  # noqa: F401  (registers the built-in specs)
    from dpframe.plugin import plugin_host

    host = plugin_host()
    if host not in _LOADED:
        for audits in host.audits():
            for spec in audits.specs():
                register_audit(spec)
        _LOADED.add(host)
    return list(_REGISTRY.values())


def unaudited_kinds(host: PluginHost, specs: Iterable[AuditSpec] | None = None) -> dict[str, str]:
    """``{kind: mechanism name}`` for every kind an installed mechanism handles that no spec covers.

    Example:
        >>> from dpframe.plugin import plugin_host
        >>> unaudited_kinds(plugin_host(), []).get("len")
        'aggregates'

    """
    covered = {k for s in (registered_audits() if specs is None else specs) for k in s.kinds}
    return {kind: mech.name for _, mech in host.mechanisms() for kind in sorted(mech.handles)
            if kind not in covered}


def unaudited_notions(host: PluginHost, specs: Iterable[AuditSpec] | None = None) -> dict[str, str]:
    """``{"kind@notion": mechanism name}`` for every (kind, notion) an installed mechanism declares unaudited.

    A mechanism's ``notions`` are the noise notions it calibrates to (``pure``, ``zcdp``; ``approx`` for
    partition selection): each is a different noise distribution, so each needs its own spec.

    Example:
        >>> from dpframe.plugin import plugin_host
        >>> unaudited_notions(plugin_host(), []).get("len@zcdp")
        'aggregates'

    """
    covered = {pair for s in (registered_audits() if specs is None else specs) for pair in s.covered()}
    return {f"{kind}@{notion}": mech.name for _, mech in host.mechanisms() for kind in sorted(mech.handles)
            for notion in sorted(mech.notions) if (kind, notion) not in covered}


def unaudited_queries(specs: Iterable[AuditSpec] | None = None,
                      entry_points: Iterable[str] | None = None) -> list[str]:
    """The public query entry points (:func:`query_entry_points`) that no spec's ``queries`` covers.

    Example:
        >>> unaudited_queries([], ["Frame.agg"])
        ['Frame.agg']

    """
    covered = {q for s in (registered_audits() if specs is None else specs) for q in s.queries}
    wanted = query_entry_points() if entry_points is None else list(entry_points)
    return [q for q in wanted if q not in covered]


#: Public methods that build or inspect but never release anything (no spec needed). Every *other*
#: public method of ``Frame``, ``GroupBy`` and ``Session`` is a query entry point and needs a spec.
NOT_QUERIES = frozenset({
    "Frame.filter", "Frame.with_columns", "Frame.select", "Frame.group_by", "Frame.schema", "Frame.columns",
    "Frame.query", "GroupBy.query", "Frame.drop", "Frame.rename", "Frame.dtypes", "Frame.width",
    "Frame.collect_schema", "Frame.bound",   # bound() tightens the unit of later queries; it releases nothing
    "Session.table", "Session.tables", "Session.spent", "Session.spent_report", "Session.spent_as_approx",
    "Session.remaining", "Session.history", "Session.close", "Session.closed", "Session.backend_name",
    "Session.privacy_unit", "Session.accountant", "Session.rng", "Session.plugins", "Session.plan_context",
})

#: The core's query entry points outside the three classes (documented in ``docs/interactive.md``);
#: plugins name theirs when they register their audits (``dpframe_audits(register)``, ``entry_points=``).
MODULE_QUERIES = ("dpframe.interactive.ptr:propose_test_release", "dpframe.interactive.ptr:gated_release",
                  "dpframe.interactive.ptr:robust_median", "dpframe.interactive.stopping:run_until")


def query_entry_points() -> list[str]:
    """Every public way to release something, as ``"Class.method"`` (plus variants), each needing a spec.

    The public methods of :class:`~dpframe.Frame`, :class:`~dpframe.GroupBy` and
    :class:`~dpframe.Session` except :data:`NOT_QUERIES` (so a new query method fails the audit suite
    until a spec covers it), every registered query family (a plugin's too) and each of its ``methods``
    (``GroupBy.top_k[method=...]``), :data:`MODULE_QUERIES` and the module-level entry points plugins
    name in ``dpframe_audits`` (``"dpframe_topk:MultiLabelPATE.collect"``).

    Example:
        >>> "GroupBy.top_k[method=peeling]" in query_entry_points()
        True

    """
    from dpframe.frame import Frame, GroupBy
    from dpframe.plugin import plugin_host
    from dpframe.session import Session

    out = [f"{cls.__name__}.{name}" for cls in (Frame, GroupBy, Session) for name in sorted(vars(cls))
           if not name.startswith("_") and f"{cls.__name__}.{name}" not in NOT_QUERIES]
    for entry in plugin_host().families():      # every registered family, and each of its audited variants
        owner = "GroupBy" if entry.item.attach == "group_by" else "Frame"
        name = f"{owner}.{entry.name}"
        if name not in out and name not in NOT_QUERIES:
            out.append(name)
        out += [f"{name}[method={m}]" for m in entry.item.methods]
    return out + list(MODULE_QUERIES) + [e for audits in plugin_host().audits() for e in audits.entry_points]


def run_audit(spec: AuditSpec, *, samples: int | None = None, seed: int = 0, alpha: float = 1e-6,
              pairs: int | None = None) -> list[AuditResult]:
    """Audit ``spec`` on each of its neighbouring pairs (one :class:`AuditResult` per pair).

    An ``ex_post`` spec gives two results per pair: the claim, then the settled cells. ``pairs``: audit
    only the first ``pairs`` pairs (default: all).

    Raises AssertionError if the cost the engine would charge differs between D and D' (a cost must
    depend on public information only).
    """
    from dpframe.testing.expost import audit_ex_post_samples

    n = spec.samples if samples is None else samples
    results = []
    for i, pair in enumerate(spec.pairs()[:pairs]):
        cost_a, sample_a = spec.sampler(pair.table, spec.budget)
        cost_b, sample_b = spec.sampler(pair.neighbour, spec.budget)
        if cost_a != cost_b:
            raise AssertionError(f"{spec.name} / {pair.label}: the cost depends on the data "
                                 f"({cost_a!r} on D, {cost_b!r} on D')")
        eps, delta = claimed_epsilon_delta(cost_a, spec.zcdp_delta)
        seeds = [(seed * 1000 + i) * 4 + j for j in range(4)]       # as audit_sampler draws them
        runs = (sample_a(n, seeds[0]), sample_b(n, seeds[1]), sample_a(n, seeds[2]), sample_b(n, seeds[3]))
        result = audit_samples(*runs, claimed_epsilon=eps, delta=delta, alpha=alpha, outputs=spec.outputs)
        results.append(result.labelled(f"{spec.name}: {pair.label}"))
        if spec.ex_post:     # a second test on the same runs: each result holds at 1 − alpha on its own
            cells = audit_ex_post_samples(*runs, delta=delta, alpha=alpha, outputs=spec.outputs)
            results.append(cells.labelled(f"{spec.name} (settled cells): {pair.label}"))
    return results


# ------------------------------------------------------------------------------------ neighbours


def adversarial_pairs(base: pl.DataFrame, unit: PrivacyUnit, values: Mapping[str, Sequence[Any]], *,
                      oversized: int = 3, limit: int = 8) -> list[Neighbours]:
    """Adversarial neighbouring pairs around ``base`` for the candidate values of the neighbour's rows.

    * ``empty vs one unit``: D has no rows, D' is one unit with ``max_rows`` rows (first assignment);
    * ``+unit at {...}``: D = ``base``, D' = ``base`` plus one unit of ``max_rows`` rows taking each
      assignment of :func:`~dpframe.testing.extreme_assignments` (columns not given copy base's first row);
    * ``+unit of k rows``: the same with ``oversized`` × ``max_rows`` rows (per-unit bounding must cut
      them to ``max_rows``; only for a unit column).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> t = pl.DataFrame({"user": [1, 2], "x": [1.0, 2.0]})
        >>> [p.label for p in adversarial_pairs(t, dp.PrivacyUnit("user", max_rows=2), {"x": [9.0]})]
        ['empty vs one unit at x=9.0', '+unit at x=9.0', '+unit of 6 rows at x=9.0']

    """
    assignments = extreme_assignments(values, limit) if values else [{}]
    first = assignments[0]
    shown = [", ".join(f"{k}={v}" for k, v in a.items()) for a in assignments]
    suffix = [f" at {s}" if s else "" for s in shown]
    one = neighbouring_tables(base, unit, first).tail(unit.max_rows)
    pairs = [Neighbours("empty vs one unit" + suffix[0], base.head(0), one)]
    pairs += [Neighbours("+unit" + sfx, base, neighbouring_tables(base, unit, a))
              for a, sfx in zip(assignments, suffix)]
    if unit.column is not None and oversized > 1:
        big = PrivacyUnit(unit.column, max_rows=unit.max_rows * oversized)
        pairs.append(Neighbours(f"+unit of {big.max_rows} rows" + suffix[0], base,
                                neighbouring_tables(base, big, first)))
    return pairs


# -------------------------------------------------------------------------------------- samplers


def _tile(stats: pl.DataFrame, row: int, n: int) -> dict[str, npt.NDArray[Any]]:
    return {k: np.repeat(stats[k].to_numpy()[row:row + 1], n) for k in stats.columns if k.startswith("__")}


def agg_sampler(measures: Sequence[Measure], unit: PrivacyUnit, *, by: Sequence[str] = (),
                keys: Any = None, group: Any = None, mechanisms: Sequence[Any] = (),
                backend: str = "polars") -> SamplerFactory:
    """Samples of ``table.group_by(by, keys=keys).agg(*measures)`` for the group ``group``.

    The query is planned once per dataset by a real session (the ``mechanisms`` pinned first); the
    exact statistics of the dataset are computed by ``backend`` (D may be empty: a session needs rows,
    so the plan comes from a session over a one-row stand-in with the same schema). ``release`` runs on
    n copies of the group's statistics. With partition selection (``by`` without ``keys``) the output
    ``released`` is 1.0 when the group is kept (a group absent from the data is never kept), and the
    measures are NaN when it is not.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> t = pl.DataFrame({"user": [1, 2, 3], "g": ["a", "a", "b"]})
        >>> cost, sample = agg_sampler([dp.len()], dp.PrivacyUnit("user"), by=["g"], keys=["a", "b"],
        ...                            group="a")(t, dp.PureDP(1))
        >>> cost, sample(4, 0)["len"].shape
        (PureDP(epsilon=1), (4,))

    """
    def factory(table: pl.DataFrame, budget: Budget) -> tuple[Budget, Sampler]:
        stand_in = table if table.height else pl.DataFrame([_filler(table.schema)], schema=table.schema,
                                                           orient="row")
        sess = _session(stand_in, unit, budget, mechanisms, seed=0)
        frame = sess.table("t")
        query = frame.group_by(*by, keys=keys).agg(*measures) if by else frame.agg(*measures)
        plan = query.plan(budget)
        engine = sess.plugins.backend(backend)
        engine.register("t", table.lazy())
        node = query.node
        # whole sorted lists (not partial ones), renamed to the keys the plans read: tiled copies of a
        # group must not depend on a completion function
        wanted = plan.statistics()
        request = sess._release.reader().request(node.input, tuple(dict.fromkeys(s.whole() for s in wanted)),
                                                 by=node.by, keys=node.keys)
        stats = engine.statistics(request)
        stats = stats.with_columns([stats[s.whole().key].alias(s.key) for s in wanted if s.near])
        row = _group_row(stats, list(by), group)
        outputs = [name for p in plan.plans for name in p.output_names()]

        def sample(n: int, seed: int) -> dict[str, npt.NDArray[Any]]:
            rng = SeededRandomSource(seed)
            if row is None:     # the group is not in the data: partition selection never releases it
                out = {name: np.full(n, np.nan) for name in outputs}
                return {**out, "released": np.zeros(n)}
            tiled = _tile(stats, row, n)
            out = {}
            for p in plan.plans:
                for k, v in p.release(tiled, rng).items():
                    out.update(release_outputs(k, v))
            if plan.selection is None:
                return out
            keep = np.asarray(plan.selection.release(tiled, rng)["__keep"], dtype=bool)
            return {**{k: np.where(keep, v, np.nan) for k, v in out.items()}, "released": keep.astype(np.float64)}
        return plan.cost, sample
    return factory


def release_outputs(name: str, values: Any) -> dict[str, npt.NDArray[np.float64]]:
    """The audited outputs of one released column (one entry per run): numbers as floats, in order.

    A numeric column is ``{name: floats}``. A column of lists (several quantiles in one measure) gives one
    output per position, ``"name[i]"``, and a temporal column (date, datetime, duration) its ordered codes
    (:func:`~dpframe.testing.queries.stable_code`: a date is its day number), so the audit's threshold events
    stay "at or above τ" — the events in which a quantile or bounds release leaks.

    Example:
        >>> import datetime as dt
        >>> out = release_outputs("q", pl.Series([[dt.date(2020, 1, 1), dt.date(2020, 1, 3)]]))
        >>> {k: v.tolist() for k, v in out.items()}
        {'q[0]': [737425.0], 'q[1]': [737427.0]}

    """
    series = values if isinstance(values, pl.Series) else None
    if series is None or series.dtype.is_numeric() or series.dtype == pl.Boolean:
        return {name: np.asarray(values, dtype=np.float64)}
    if isinstance(series.dtype, pl.List | pl.Array):
        longest: Any = series.list.len().max() if isinstance(series.dtype, pl.List) else series.dtype.size
        width = int(longest or 0)
        return {k: v for i in range(width)
                for k, v in release_outputs(f"{name}[{i}]", series.list.get(i, null_on_oob=True)).items()}
    return {name: np.asarray([stable_code(v) for v in series.to_list()], dtype=np.float64)}


def _filler(schema: pl.Schema) -> dict[str, Any]:
    return {c: (0 if t.is_numeric() else False if t == pl.Boolean else "x") for c, t in schema.items()}


def _group_row(stats: pl.DataFrame, by: list[str], group: Any) -> int | None:
    if not by:
        return 0
    key = group if isinstance(group, Mapping) else {by[0]: group}
    mask = np.ones(stats.height, dtype=bool)
    for c in by:
        mask &= (stats[c] == key[c]).fill_null(False).to_numpy()
    rows = np.flatnonzero(mask)
    return int(rows[0]) if rows.size else None


# ----------------------------------------------------------------------------- broken mechanisms


@dataclass
class Overclaiming:
    """A deliberately broken mechanism (tests only): plans for ``factor`` × its share, claims the share.

    With ``factor=2`` an additive mechanism's noise scale is halved (discrete Laplace t = Δ/(2ε)) while
    its reported cost stays ε: the audit must catch it. δ is multiplied by ``delta_factor`` (default:
    ``factor``; e.g. a lower selection threshold for partition selection). It declares the noise, curves and
    accuracy of the honest plan for the share (what explain() shows and the engine's plan checks read), so the
    engine sees a consistent plan and only the release draws less noise: the lie no check before the charge can
    see (a plan that declared its real noise is refused as a plugin bug), which an audit must catch.

    Example:
        >>> import dpframe as dp
        >>> from dpframe.plugin import plugin_host
        >>> from dpframe.testing import measure_context
        >>> broken = Overclaiming(plugin_host().mechanism_for("len", "pure"))
        >>> plan = broken.plan([dp.len()], measure_context(max_rows=2), dp.PureDP(1))
        >>> plan.cost, plan.noises["__rows"].scale
        (PureDP(epsilon=1), Fraction(1, 1))

    """

    inner: Mechanism
    factor: int = 2
    delta_factor: int | None = None
    name: str = field(init=False)
    handles: frozenset[str] = field(init=False)
    notions: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.name, self.handles, self.notions = self.inner.name, self.inner.handles, self.inner.notions

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        """As the inner mechanism."""
        self.inner.validate(measure, ctx)

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        """As the inner mechanism."""
        return self.inner.parts(measures, ctx)

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> MechanismPlan:
        """The inner plan for ``factor`` × ``share``, reporting the cost ``share`` and the share's declared noise."""
        first = share.rho if share.notion == "zcdp" else share.epsilon  # type: ignore[union-attr]
        delta = getattr(share, "delta", Fraction(0)) * (self.factor if self.delta_factor is None else self.delta_factor)
        plan = self.inner.plan(measures, ctx, make(share.notion, first * self.factor, delta))
        honest = self.inner.plan(measures, ctx, share)
        plan.cost, plan.noise, plan.privacy = share, honest.noise, honest.privacy
        plan.accuracy, plan.ci95 = honest.accuracy, honest.ci95
        return plan
