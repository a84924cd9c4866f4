"""The conformance suite for mechanism plugins: subclass :class:`MechanismConformance` in a pytest module.

Example (a plugin's ``tests/test_histogram.py``)::

    import dpframe as dp
    from dpframe.testing import MechanismConformance
    from dpframe_histogram import HistogramMechanism

    class TestHistogram(MechanismConformance):
        mechanism = HistogramMechanism()
        measures = [dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))]
        bad_measures = [dp.measure("histogram", "age", bounds=(0, 100), edges=(5,))]

What the inherited tests check (each runs in well under 3 s by default):

* ``test_declares_mechanism_protocol`` / ``test_validate_accepts_measures`` / ``test_parts_is_positive``:
  the plugin object satisfies :class:`~dpframe.mechanism.Mechanism` and accepts its good measures.
* ``test_cost_equals_share``: for several shares of each notion the mechanism accepts, ``plan.cost`` equals
  the share *exactly* (Fractions), for all measures together and each alone; planning is deterministic.
* ``test_noise_cost_matches_calibration``: every declared :class:`~dpframe.mechanism.Noise` costs what its
  parameters say (ε = Δ/t; ρ = Δ²/(2σ²)), and the noise costs add up to the plan's cost.
* ``test_release_contract``: ``release`` returns one array per output and group, draws all its randomness
  from the source it is given (same seed → same output; global numpy/random state untouched), and does
  not modify the statistics.
* ``test_bad_measures_refused`` / ``test_bad_measures_charge_nothing``: each bad measure raises a
  :class:`~dpframe.errors.DPFrameError` from ``validate`` or planning, and a session charges nothing.
* ``test_runs_in_session``: the measures run end to end (ungrouped and grouped by public keys) through a
  seeded session, and the session is charged exactly the plan's cost.
* ``test_noise_distribution``: the noise on count-like outputs follows the declared discrete Laplace /
  discrete Gaussian pmf (chi-square goodness of fit, fails only if p < 1e-6). The releases are drawn by
  one ``release`` call on n identical groups (``batched_release = False``: n calls on one group).
* ``test_neighbouring_audit`` (and ``test_neighbouring_audit_large``, marked ``slow``): an empirical privacy
  audit on two neighbouring tables (see :mod:`dpframe.testing.audit`): fails if the Clopper–Pearson lower
  bound on ε exceeds the claimed ε at confidence 1 − 1e-6. The claim is the plan's ``cost``, and, for a plan
  that declares ``privacy`` curves (what RDP/PLD sessions charge), the (ε, δ) pairs the curves claim
  (:func:`~dpframe.testing.audit_curves`).

Override the class attributes below to fit the mechanism (e.g. ``shares`` for a mechanism that needs δ,
``noise_outputs`` to say which output carries which declared noise, ``neighbour_values`` to say where the
neighbour's rows go).
"""

from __future__ import annotations

import pickle
import random
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest

from dpframe.budgets import Budget, make
from dpframe.errors import DPFrameError
from dpframe.measures import Measure
from dpframe.mechanism import Mechanism, MechanismPlan, Noise, Statistic
from dpframe.privacy_unit import PrivacyUnit
from dpframe.session import Session
from dpframe.testing.audit import (
    AuditResult,
    audit_curves,
    audit_release,
    bound_extremes,
    exact_statistics,
    extreme_assignments,
    neighbouring_tables,
)
from dpframe.testing.harness import (
    CountingRandomSource,
    check_refused,
    context_for,
    default_shares,
    default_table,
    pin_mechanisms,
    session_budget,
)
from dpframe.testing.stats import noise_chisquare

__all__ = ["MechanismConformance"]

_NOTIONS = frozenset({"pure", "approx", "zcdp"})


def _global_random_state() -> bytes:
    """Return the global numpy and Python random states (a mechanism must touch neither)."""
    return pickle.dumps((np.random.get_state(), random.getstate()))


def _first(b: Budget) -> Fraction:
    return b.rho if b.notion == "zcdp" else b.epsilon  # type: ignore[union-attr]


class MechanismConformance:
    """Base class of a plugin's conformance tests. Set :attr:`mechanism` and :attr:`measures`; the rest is optional.

    Example:
        >>> import dpframe as dp
        >>> from dpframe_aggregates import AggregateMechanism
        >>> class TestLen(MechanismConformance):
        ...     mechanism = AggregateMechanism()
        ...     measures = [dp.len()]
        >>> sorted(n for n in dir(TestLen) if n.startswith("test_"))[:2]
        ['test_bad_measures_charge_nothing', 'test_bad_measures_refused']

    """

    #: The mechanism object under test (what the plugin's ``dpframe_mechanisms`` hook returns).
    mechanism: ClassVar[Any] = None
    #: Well-formed measures the mechanism handles (planned together, and each alone).
    measures: ClassVar[Sequence[Measure]] = ()
    #: Malformed measures: each must be refused with a DPFrameError before anything is charged.
    bad_measures: ClassVar[Sequence[Measure]] = ()
    #: The private table (default: :func:`~dpframe.testing.default_table` for :attr:`measures`).
    table: ClassVar[pl.DataFrame | None] = None
    #: The privacy unit; its column must be in the table.
    privacy_unit: ClassVar[PrivacyUnit] = PrivacyUnit("user", max_rows=3)
    #: Column used for the grouped (public keys) session run; None to skip it.
    group_column: ClassVar[str | None] = "group"
    #: Shares to calibrate to (default: :func:`~dpframe.testing.default_shares` of the mechanism's notions).
    shares: ClassVar[Sequence[Budget] | None] = None
    #: Whether ``plan.cost`` must equal the share exactly (else: at most the share).
    exact_cost: ClassVar[bool] = True
    #: Whether the declared noises' costs must add up to ``plan.cost`` (basic / zCDP composition).
    cost_is_noise_sum: ClassVar[bool] = True
    #: ``{output column: noise label}`` for the distribution test; default: every integer output, if all
    #: unit-grid noises of the plan have the same distribution.
    noise_outputs: ClassVar[Mapping[str, str] | None] = None
    #: The value every exact statistic takes in the distribution test.
    fixed_statistic: ClassVar[int] = 1000
    distribution_samples: ClassVar[int] = 20_000
    #: Share audited on neighbouring tables (default: the first share).
    audit_budget: ClassVar[Budget | None] = None
    audit_samples: ClassVar[int] = 20_000
    slow_audit_samples: ClassVar[int] = 400_000
    #: ``{column: [values...]}`` the neighbour's rows take (default: both ends of each measure's bounds).
    neighbour_values: ClassVar[Mapping[str, Sequence[Any]] | None] = None
    #: Whether ``release`` may be called once on n copies of a group instead of n times.
    batched_release: ClassVar[bool] = True
    #: Whether ``release`` must return exactly the columns ``plan.output_names()`` declares.
    check_declared_outputs: ClassVar[bool] = True
    #: Whether the measures can be collected through ``Session.table(...).agg(...)``.
    run_in_session: ClassVar[bool] = True
    #: Confidence parameter of the statistical tests (a correct mechanism fails with probability ≤ alpha).
    alpha: ClassVar[float] = 1e-6
    #: δ used to turn a zCDP claim into an (ε, δ) claim for the audit.
    zcdp_audit_delta: ClassVar[float] = 1e-3

    # ------------------------------------------------------------------------------------------ helpers

    def conformance_mechanism(self) -> Any:
        """The mechanism under test (fails clearly when the subclass forgot to set it)."""
        if self.mechanism is None:
            pytest.fail(f"{type(self).__name__}: set the class attribute `mechanism = MyMechanism()`")
        if not self.measures:
            pytest.fail(f"{type(self).__name__}: set the class attribute `measures = [dp.measure(...), ...]`")
        return self.mechanism

    def conformance_table(self) -> pl.DataFrame:
        """The private table the tests use."""
        if self.table is not None:
            return self.table
        return default_table(self.measures, unit=self.privacy_unit, group_column=self.group_column)

    def conformance_shares(self) -> list[Budget]:
        """The shares the tests calibrate to."""
        mech = self.conformance_mechanism()
        shares = list(self.shares) if self.shares is not None else default_shares(mech.notions)
        if not shares:
            pytest.fail(f"no shares to test: notions {sorted(mech.notions)}; set `shares = [...]`")
        return shares

    def conformance_plan(self, share: Budget, measures: Sequence[Measure] | None = None,
                         grouped: bool = False) -> MechanismPlan:
        """Validate and plan ``measures`` (default: all) for ``share``, as the planner would."""
        mech = self.conformance_mechanism()
        ms = list(self.measures if measures is None else measures)
        ctx = context_for(share, self.privacy_unit, self.conformance_table().schema, grouped)
        for m in ms:
            mech.validate(m, ctx)
        plan: MechanismPlan = mech.plan(ms, ctx, share)
        return plan

    def conformance_session(self, share: Budget) -> Session:
        """A seeded (not private) session over :meth:`conformance_table` using the mechanism under test."""
        sess = Session({"data": self.conformance_table()}, privacy_unit=self.privacy_unit,
                       budget=session_budget(share), seed=0)
        return pin_mechanisms(sess, self.conformance_mechanism())  # type: ignore[no-any-return]

    def conformance_fixed_stats(self, plan: MechanismPlan, groups: int,
                                value: int | None = None) -> dict[str, npt.NDArray[np.int64]]:
        """Every statistic of ``plan`` equal to ``value`` (default :attr:`fixed_statistic`) in ``groups`` groups."""
        v = self.fixed_statistic if value is None else value
        return {s.key: np.full(groups, v, dtype=np.int64) for s in plan.statistics}

    def conformance_one_per_notion(self) -> list[Budget]:
        """The first share of each notion."""
        seen: dict[str, Budget] = {}
        for s in self.conformance_shares():
            seen.setdefault(s.notion, s)
        return list(seen.values())

    def conformance_noise_outputs(self, plan: MechanismPlan, released: Mapping[str, Any]) -> dict[str, Noise]:
        """Which outputs carry which declared noise (see :attr:`noise_outputs`)."""
        if self.noise_outputs is not None:
            out = {}
            for column, label in self.noise_outputs.items():
                if column not in released:
                    pytest.fail(f"noise_outputs names {column!r}, not an output; outputs: {sorted(released)}")
                noise = plan.noise.get(label)
                if not isinstance(noise, Noise):
                    pytest.fail(f"noise_outputs maps {column!r} to {label!r}, not a declared Noise; "
                                f"declared: {sorted(plan.noise)}")
                out[column] = noise
            return out
        unit_noises = {(n.distribution, n.scale): n for n in plan.noise.values()
                       if isinstance(n, Noise) and n.unit == 1}
        integer = [k for k, v in released.items() if np.issubdtype(np.asarray(v).dtype, np.integer)]
        if not integer or not unit_noises:
            return {}
        if len(unit_noises) > 1:
            pytest.fail(f"cannot tell which of the declared noises {sorted(plan.noise)} each of the integer "
                        f"outputs {integer} carries: set `noise_outputs = {{output: noise label}}`")
        noise = next(iter(unit_noises.values()))
        return dict.fromkeys(integer, noise)

    def conformance_neighbour_values(self) -> list[dict[str, Any]]:
        """The value assignments tried for the neighbour's rows."""
        if self.neighbour_values is not None:
            return extreme_assignments(self.neighbour_values)
        candidates: dict[str, list[Any]] = {}
        for m in self.measures:
            if m.column is not None and m.bounds is not None and m.column not in candidates:
                candidates[m.column] = list(bound_extremes(m.bounds))
        return extreme_assignments(candidates) if candidates else [{}]

    def conformance_audit(self, samples: int) -> list[AuditResult]:
        """Audit the release on each neighbour assignment; fails the test on a violation."""
        share = self.audit_budget or self.conformance_shares()[0]
        table = self.conformance_table()
        neighbours = [neighbouring_tables(table, self.privacy_unit, values)
                      for values in self.conformance_neighbour_values()]
        # All measures together, and each alone (where one output gets the whole share: the sharpest test).
        measure_sets = [list(self.measures)] + ([[m] for m in self.measures] if len(self.measures) > 1 else [])
        results: list[AuditResult] = []
        moved = False
        seed = 0
        for ms in measure_sets:
            plan = self.conformance_plan(share, ms)
            base = exact_statistics(table, self.privacy_unit, plan.statistics)
            for neighbour in neighbours:
                other = exact_statistics(neighbour, self.privacy_unit, plan.statistics)
                if all(np.array_equal(base[k], other[k]) for k in base):
                    continue        # this neighbour changes none of these statistics: nothing to test
                moved = True
                seed += 1
                results.append(audit_release(plan, base, other, samples=samples, seed=seed, alpha=self.alpha,
                                             zcdp_delta=self.zcdp_audit_delta, batched=self.batched_release))
                # RDP/PLD sessions charge the plan's curves: the release is held to them too (a false
                # coordinate_sensitivity, or curves with no Noise declared, pass every static check).
                results += audit_curves(plan, base, other, samples=samples, seed=seed, alpha=self.alpha,
                                        zcdp_delta=self.zcdp_audit_delta, batched=self.batched_release)
        if not moved:
            pytest.fail("the neighbour's rows changed no statistic, so the audit tests nothing: set "
                        "`neighbour_values = {column: [values...]}` to values the measures count")
        for r in results:
            print(r)        # shown with pytest -s / -rP
        bad = [r for r in results if not r.passed]
        if bad:
            pytest.fail("privacy audit failed:\n" + "\n".join(str(r) for r in bad))
        return results

    # -------------------------------------------------------------------------------------------- tests

    def test_declares_mechanism_protocol(self) -> None:
        mech = self.conformance_mechanism()
        assert isinstance(mech, Mechanism), f"{mech!r} lacks name/handles/notions/validate/parts/plan"
        assert isinstance(mech.name, str) and mech.name, "name must be a non-empty string"
        assert isinstance(mech.handles, frozenset) and mech.handles, "handles must be a non-empty frozenset"
        assert isinstance(mech.notions, frozenset) and mech.notions, "notions must be a non-empty frozenset"
        assert mech.notions <= _NOTIONS, f"notions must be among {sorted(_NOTIONS)}, got {sorted(mech.notions)}"
        for m in self.measures:
            assert m.kind in mech.handles, f"{m.describe()}: kind {m.kind!r} is not in handles {sorted(mech.handles)}"

    def test_validate_accepts_measures(self) -> None:
        mech = self.conformance_mechanism()
        schema = self.conformance_table().schema
        for share in self.conformance_one_per_notion():
            for grouped in (False, True):
                ctx = context_for(share, self.privacy_unit, schema, grouped)
                for m in self.measures:
                    mech.validate(m, ctx)

    def test_parts_is_positive(self) -> None:
        mech = self.conformance_mechanism()
        for share in self.conformance_one_per_notion():
            ctx = context_for(share, self.privacy_unit, self.conformance_table().schema)
            for ms in [list(self.measures)] + [[m] for m in self.measures]:
                parts = mech.parts(ms, ctx)
                assert isinstance(parts, int) and not isinstance(parts, bool) and parts >= 1, \
                    f"parts({[m.describe() for m in ms]}) = {parts!r}; must be an int ≥ 1"

    def test_cost_equals_share(self) -> None:
        for share in self.conformance_shares():
            for ms in [list(self.measures)] + [[m] for m in self.measures]:
                plan = self.conformance_plan(share, ms)
                what = f"{[m.describe() for m in ms]} with share {share!r}"
                assert plan.cost.notion == share.notion, f"{what}: cost {plan.cost!r} is not in the share's notion"
                if self.exact_cost:
                    assert plan.cost == share, f"{what}: cost {plan.cost!r} != share {share!r}"
                else:
                    assert _first(plan.cost) <= _first(share), f"{what}: cost {plan.cost!r} exceeds the share"
                    assert getattr(plan.cost, "delta", 0) <= getattr(share, "delta", 0), f"{what}: δ exceeds the share"
                again = self.conformance_plan(share, ms)
                assert again.cost == plan.cost and again.statistics == plan.statistics, \
                    f"{what}: planning twice gave different costs or statistics"
                assert all(isinstance(s, Statistic) for s in plan.statistics), f"{what}: statistics must be Statistic"

    def test_noise_cost_matches_calibration(self) -> None:
        for share in self.conformance_shares():
            plan = self.conformance_plan(share)
            total = Fraction(0)
            noises = [(label, n) for label, n in plan.noise.items() if isinstance(n, Noise)]
            for label, n in noises:
                assert n.scale > 0 and n.sensitivity > 0, f"{label}: scale and sensitivity must be > 0"
                if n.distribution == "discrete_laplace":
                    expected = make("pure", n.sensitivity / n.scale)
                else:
                    assert n.distribution == "discrete_gaussian", f"{label}: unknown distribution {n.distribution}"
                    expected = make("zcdp", n.sensitivity**2 / (2 * n.scale))
                assert n.cost() == expected, f"{label}: Noise.cost() {n.cost()!r} != calibration {expected!r}"
                if share.notion == "zcdp" and expected.notion == "pure":
                    total += expected.epsilon**2 / 2  # type: ignore[union-attr]
                else:
                    total += _first(expected)
            if self.cost_is_noise_sum and noises:
                assert total == _first(plan.cost), (
                    f"share {share!r}: the declared noises cost {total} in total, the plan claims "
                    f"{_first(plan.cost)}: declare every noise the release adds, at its true parameters")

    def test_release_contract(self) -> None:
        groups = 7
        for share in self.conformance_one_per_notion():
            plan = self.conformance_plan(share)
            stats = {s.key: self.fixed_statistic + np.arange(groups, dtype=np.int64) for s in plan.statistics}
            before = {k: v.copy() for k, v in stats.items()}
            state = _global_random_state()
            src = CountingRandomSource(123)
            first = plan.release(stats, src)
            assert _global_random_state() == state, \
                "release used numpy's/Python's global random state: draw only from the rng argument"
            for k in stats:
                assert np.array_equal(stats[k], before[k]), f"release modified the statistic {k!r}"
            assert isinstance(first, dict) and first, "release must return a non-empty {output: array} dict"
            declared = sorted(plan.output_names())
            if self.check_declared_outputs:
                assert sorted(first) == declared, (f"release returned {sorted(first)}, the plan declares {declared}: "
                                                   "set MechanismPlan.outputs to what release returns")
            for name, values in first.items():
                assert isinstance(name, str) and name, f"output names must be strings, got {name!r}"
                assert np.asarray(values).shape == (groups,), \
                    f"output {name!r} has shape {np.asarray(values).shape}, expected one value per group ({groups},)"
            assert src.words > 0, "release drew no randomness from the rng it was given"
            again = plan.release(stats, CountingRandomSource(123))
            assert set(again) == set(first), "outputs differ between two releases"
            for name in first:
                assert np.array_equal(np.asarray(first[name]), np.asarray(again[name]), equal_nan=True), (
                    f"output {name!r} differs under the same seed: release draws randomness that does not come "
                    f"from the rng argument (os.urandom, secrets, np.random.default_rng(), ...)")

    def test_bad_measures_refused(self) -> None:
        if not self.bad_measures:
            pytest.skip("no bad_measures declared")
        mech = self.conformance_mechanism()
        schema = self.conformance_table().schema
        for share in self.conformance_shares():
            ctx = context_for(share, self.privacy_unit, schema)
            for m in self.bad_measures:
                check_refused(mech, m, ctx, share)

    def test_bad_measures_charge_nothing(self) -> None:
        if not self.bad_measures:
            pytest.skip("no bad_measures declared")
        if not self.run_in_session:
            pytest.skip("run_in_session is False")
        for share in self.conformance_one_per_notion():
            sess = self.conformance_session(share)
            for m in self.bad_measures:
                with pytest.raises(DPFrameError):
                    sess.table("data").agg(m).explain(budget=share)
                with pytest.raises(DPFrameError):
                    sess.table("data").agg(m).collect(budget=share)
                assert _first(sess.spent()) == 0, f"{m.describe()} was refused but {sess.spent()!r} was charged"
                assert sess.history().height == 0, f"{m.describe()} left a ledger entry"

    def test_runs_in_session(self) -> None:
        if not self.run_in_session:
            pytest.skip("run_in_session is False")
        mech = self.conformance_mechanism()
        table = self.conformance_table()
        for share in self.conformance_one_per_notion():
            outputs = set(self.conformance_plan(share).release(
                self.conformance_fixed_stats(self.conformance_plan(share), 1), CountingRandomSource(0)))
            sess = self.conformance_session(share)
            frame = sess.table("data")
            runs: list[tuple[Any, tuple[str, ...], int]] = [(frame.agg(*self.measures), (), 1)]
            if self.group_column is not None and self.group_column in table.columns:
                keys = table[self.group_column].unique().sort().to_list()
                runs.append((frame.group_by(self.group_column, keys=keys).agg(*self.measures),
                             (self.group_column,), len(keys)))
            for query, by, height in runs:
                cost = query.cost(budget=share)
                assert mech.name in query.explain(budget=share), "explain() does not name the mechanism"
                spent_before = _first(sess.spent())
                out = query.collect(budget=share)
                assert isinstance(out, pl.DataFrame) and out.height == height, f"expected {height} rows, got {out}"
                assert set(out.columns) == set(by) | outputs, f"columns {out.columns} != {sorted(set(by) | outputs)}"
                charged = _first(sess.spent()) - spent_before
                assert charged == _first(cost), f"session charged {charged}, the query's cost is {cost!r}"

    def test_noise_distribution(self) -> None:
        n = self.distribution_samples
        tested = 0
        for share in self.conformance_one_per_notion():
            plan = self.conformance_plan(share)
            if self.batched_release:       # one call on n identical groups = n independent releases
                released = plan.release(self.conformance_fixed_stats(plan, n), CountingRandomSource(2024))
            else:
                src = CountingRandomSource(2024)
                runs = [plan.release(self.conformance_fixed_stats(plan, 1), src) for _ in range(n)]
                released = {k: np.concatenate([np.asarray(r[k]) for r in runs]) for k in runs[0]}
            for output, noise in self.conformance_noise_outputs(plan, released).items():
                values = np.asarray(released[output], dtype=np.float64) / float(noise.unit)
                residual = values - self.fixed_statistic
                p = noise_chisquare(residual, noise)
                assert p >= self.alpha, (f"share {share!r}: output {output!r} minus the exact statistic does not "
                                         f"follow the declared {noise.describe()} (chi-square p = {p:.3g})")
                tested += 1
        if tested == 0:
            pytest.skip("no count-like output to test: set `noise_outputs = {output: noise label}`")

    def test_neighbouring_audit(self) -> None:
        self.conformance_audit(self.audit_samples)

    @pytest.mark.slow
    def test_neighbouring_audit_large(self) -> None:
        self.conformance_audit(self.slow_audit_samples)
