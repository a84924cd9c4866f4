"""Audit specifications: which neighbouring datasets to audit each mechanism kind on, and a registry of them.

An :class:`AuditSpec` says how to run a mechanism (a *sampler factory*: dataset → ``(claimed cost,
sampler)``), the budget to audit at, and the adversarial neighbouring pairs (D, D') to audit it on.
:func:`run_audit` runs :func:`~dpframe.testing.audit_sampler` on every pair and checks, on the way, that
the cost does not depend on the data. :func:`register_audit` adds a spec to the registry that the
engine's own audit suite (``tests/audit``) and ``bench/audit_report.py`` run, and
:func:`unaudited_kinds` lists the measure kinds of installed mechanisms that no spec covers (the audit
suite fails on each of them), so a new mechanism is audited by registering one spec.

Two sampler factories cover most mechanisms:

* :func:`agg_sampler` — a ``Frame.agg`` query (optionally grouped, by public keys or with partition
  selection). The exact statistics of each dataset are computed once by a real backend (contribution
  bounding included) and the plan's ``release`` is called on n copies of the audited group: fast
  (20 000 runs in milliseconds) and valid because every group is noised independently.
* :func:`query_sampler` — any query object with ``cost(budget)`` / ``collect(budget)`` (top-k,
  interior point, ...): runs ``collect`` n times in seeded sessions. Slow but assumes nothing.

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

import hashlib
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
    audit_sampler,
    claimed_epsilon_delta,
    extreme_assignments,
    neighbouring_tables,
)

__all__ = [
    "AuditSpec",
    "Neighbours",
    "Overclaiming",
    "SamplerFactory",
    "adversarial_pairs",
    "agg_sampler",
    "query_sampler",
    "register_audit",
    "registered_audits",
    "run_audit",
    "unaudited_kinds",
]

#: ``factory(dataset, budget)`` → ``(the cost the engine charges for it, sampler(n, seed))``.
SamplerFactory = Callable[[pl.DataFrame, Budget], tuple[Budget, Sampler]]


@dataclass(frozen=True)
class Neighbours:
    """Two datasets that differ by one privacy unit (D' = D plus the unit's rows)."""

    label: str
    table: pl.DataFrame
    neighbour: pl.DataFrame


@dataclass(frozen=True)
class AuditSpec:
    """How to audit one mechanism: budget, neighbouring pairs, and how to run it.

    ``kinds`` are the measure kinds (``Mechanism.handles``) the spec covers. ``fast`` specs run in the
    default test run; the others only under ``-m slow``. ``min_power`` (a fraction of the claimed ε)
    guards against an audit too weak to catch anything: the best pair's lower bound must reach it.
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


_REGISTRY: dict[str, AuditSpec] = {}


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
    """Every registered spec, the built-in ones (``dpframe.testing.builtin_audits``) included."""
    import dpframe.testing.builtin_audits  # noqa: F401  (registers the built-in specs)

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


def run_audit(spec: AuditSpec, *, samples: int | None = None, seed: int = 0,
              alpha: float = 1e-6) -> list[AuditResult]:
    """Audit ``spec`` on each of its neighbouring pairs (one :class:`AuditResult` per pair).

    Raises AssertionError if the cost the engine would charge differs between D and D' (a cost must
    depend on public information only).
    """
    n = spec.samples if samples is None else samples
    results = []
    for i, pair in enumerate(spec.pairs()):
        cost_a, sample_a = spec.sampler(pair.table, spec.budget)
        cost_b, sample_b = spec.sampler(pair.neighbour, spec.budget)
        if cost_a != cost_b:
            raise AssertionError(f"{spec.name} / {pair.label}: the cost depends on the data "
                                 f"({cost_a!r} on D, {cost_b!r} on D')")
        eps, delta = claimed_epsilon_delta(cost_a, spec.zcdp_delta)
        result = audit_sampler(sample_a, sample_b, claimed_epsilon=eps, delta=delta, samples=n,
                               seed=seed * 1000 + i, alpha=alpha, outputs=spec.outputs)
        results.append(result.labelled(f"{spec.name}: {pair.label}"))
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


def _session(table: pl.DataFrame, unit: PrivacyUnit, budget: Budget, mechanisms: Sequence[Any],
             seed: int, **kwargs: Any) -> Any:
    """A seeded session over ``table`` (as ``"t"``), large enough for many queries of ``budget``."""
    from dpframe.session import Session
    from dpframe.testing.harness import pin_mechanisms, session_budget

    sess = Session({"t": table}, privacy_unit=unit, budget=session_budget(budget, 10**9), seed=seed, **kwargs)
    return pin_mechanisms(sess, *mechanisms) if mechanisms else sess


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
        stats = sess._statistics(node.input, node.by, node.keys, plan.statistics(), engine)
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
                out.update({k: np.asarray(v, dtype=np.float64) for k, v in p.release(tiled, rng).items()})
            if plan.selection is None:
                return out
            keep = np.asarray(plan.selection.release(tiled, rng)["__keep"], dtype=bool)
            return {**{k: np.where(keep, v, np.nan) for k, v in out.items()}, "released": keep.astype(np.float64)}
        return plan.cost, sample
    return factory


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


def _numeric(values: pl.Series) -> npt.NDArray[np.float64]:
    if values.dtype.is_numeric() or values.dtype == pl.Boolean:
        return values.cast(pl.Float64).fill_null(np.nan).to_numpy()
    codes = [int.from_bytes(hashlib.sha256(repr(v).encode()).digest()[:6], "big") for v in values.to_list()]
    return np.asarray(codes, dtype=np.float64)


def query_sampler(make_query: Callable[[Any], Any], unit: PrivacyUnit, *, mechanisms: Sequence[Any] = (),
                  rows: int = 1, per_session: int = 200, **session_kwargs: Any) -> SamplerFactory:
    """Samples of any query: ``make_query(session)`` returns an object with ``cost``/``collect``.

    Each sample is one ``collect`` (in a fresh seeded session every ``per_session`` runs). Output
    ``"{column}[{i}]"`` is the value in row i < ``rows`` (NaN when the result is shorter; non-numeric
    values become stable hash codes), and ``"rows"`` the result's height. D must not be empty.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> t = pl.DataFrame({"user": [1, 2, 3]})
        >>> cost, sample = query_sampler(lambda s: s.table("t").agg(dp.len()), dp.PrivacyUnit("user"))(
        ...     t, dp.PureDP(1))
        >>> sorted(sample(3, 0))
        ['len[0]', 'rows']

    """
    def factory(table: pl.DataFrame, budget: Budget) -> tuple[Budget, Sampler]:
        cost = make_query(_session(table, unit, budget, mechanisms, 0, **session_kwargs)).cost(budget)

        def sample(n: int, seed: int) -> dict[str, npt.NDArray[Any]]:
            runs: list[pl.DataFrame] = []
            for chunk in range(-(-n // per_session)):
                sess = _session(table, unit, budget, mechanisms, seed * 100_003 + chunk, **session_kwargs)
                query = make_query(sess)
                runs += [query.collect(budget) for _ in range(min(per_session, n - len(runs)))]
            out: dict[str, npt.NDArray[Any]] = {"rows": np.asarray([r.height for r in runs], dtype=np.float64)}
            for column in runs[0].columns:
                for i in range(rows):
                    out[f"{column}[{i}]"] = np.asarray([_numeric(r[column])[i] if i < r.height else np.nan
                                                        for r in runs])
            return out
        return cost, sample
    return factory


# ----------------------------------------------------------------------------- broken mechanisms


@dataclass
class Overclaiming:
    """A deliberately broken mechanism (tests only): plans for ``factor`` × its share, claims the share.

    With ``factor=2`` an additive mechanism's noise scale is halved (discrete Laplace t = Δ/(2ε)) while
    its reported cost stays ε: the audit must catch it. δ is multiplied by ``delta_factor`` (default:
    ``factor``; e.g. a lower selection threshold for partition selection).

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
        """The inner plan for ``factor`` × ``share``, reporting the cost ``share``."""
        first = share.rho if share.notion == "zcdp" else share.epsilon  # type: ignore[union-attr]
        delta = getattr(share, "delta", Fraction(0)) * (self.factor if self.delta_factor is None else self.delta_factor)
        plan = self.inner.plan(measures, ctx, make(share.notion, first * self.factor, delta))
        plan.cost = share
        return plan
