"""The conformance suite for query families: subclass :class:`FamilyConformance` in a pytest module.

Example (a plugin's ``tests/test_regression.py``)::

    import dpframe as dp
    import dpframe_histogram
    from dpframe.testing import FamilyConformance
    from dpframe_histogram import LinearRegression

    class TestRegression(FamilyConformance):
        family = LinearRegression()
        plugin = dpframe_histogram             # optional: the hooks that must register it
        table = pl.DataFrame({"user": range(300), "x": [i % 10 for i in range(300)], "y": ...})
        call = staticmethod(lambda frame: frame.linear_regression(["x"], "y", bounds={"x": (0, 10), "y": (0, 30)}))
        bad_calls = [lambda frame: frame.linear_regression(["x"], "y", bounds={})]

The family needs no registration: every session the suite builds pins :attr:`FamilyConformance.family`
(:func:`~dpframe.testing.pin_families`: that session only), so a plugin tests it in its own test suite before it
is installed, and the process-wide plugin host (``plugin_host()``), other tests' sessions and ``dp.<Name>`` stay as
they were. An installed family of the same name (the plugin's own, in an editable install) is not the one tested.

What the inherited tests check:

* ``test_declares_the_family_protocol``: the object satisfies :class:`~dpframe.family.QueryFamily`, its name
  is not a core method, it is reachable as ``frame.<name>`` / ``frame.query(name)``, and (with ``plugin``, the
  module or object with the plugin's hooks) its ``dpframe_query_families`` hook registers a family of that name;
* ``test_cost_is_computed_before_running_and_is_data_independent``: the charge is a dp budget that fits the
  query budget, equals ``cost()`` and ``explain(format="json")["budget"]``, and is the same on two
  neighbouring tables (it may not depend on the data);
* ``test_collect_charges_exactly_the_cost``: in every session kind (pure, approximate, zCDP, and the RDP and
  PLD filters) the ledger records exactly the planned charge, once (each ``cost()`` and ``collect()`` goes through
  the core's checks of the charge against the cost: :func:`~dpframe.family.check_charge`, and in RDP and PLD
  sessions :func:`~dpframe.accounting.curve_charge.check_curve_charge`, so a plan whose curves are below its cost
  fails here as a :class:`~dpframe.errors.PluginError`);
* ``test_a_failure_while_running_keeps_the_charge``: a backend failure after the reservation leaves the
  charge spent and reports only the exception's type;
* ``test_bad_calls_charge_nothing``: each bad call raises a :class:`~dpframe.errors.DPFrameError` naming an
  argument, and nothing is charged;
* ``test_neighbouring_audit`` (and ``test_neighbouring_audit_large``, marked ``slow``): outputs on two
  neighbouring tables (one privacy unit added) are audited with the Clopper–Pearson test of
  :mod:`dpframe.testing.audit` (features: ``features``, default every number in the result; a result with no
  number, such as a ``str``, fails the test until ``features`` says what to compare), and the claim must hold at
  confidence 1 − 1e-6. Where the family's plan charges privacy curves of its own in RDP/PLD sessions (its
  ``charge`` is not its cost's curve), the release is also held to them: the (ε, δ) pairs they claim, composed
  (:func:`~dpframe.testing.curve_claims` at :data:`~dpframe.testing.audit.CURVE_POINTS` of the budget's ε), are
  audited on outputs of a ``pld`` session (:func:`~dpframe.testing.audit_claims`). Curves the engine's static checks
  accept can still claim too little: four one-step moves where one coordinate moves by four
  (:func:`FamilyConformance.curve_audit`).

Nothing here is private: the tables are the caller's test data and the sessions are seeded.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import polars as pl
import pytest

from dpframe.accounting.curve import from_json
from dpframe.accounting.curve_charge import reference
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP
from dpframe.errors import DPFrameError
from dpframe.family import RESERVED, QueryFamily
from dpframe.privacy_unit import PrivacyUnit
from dpframe.session import Session
from dpframe.testing.audit import CURVE_POINTS, AuditResult, audit_claims, claimed_epsilon_delta, curve_claims
from dpframe.testing.harness import pin_families
from dpframe.testing.queries import query_sampler
from dpframe.testing.registry import AuditSpec, Neighbours, run_audit

#: (session total, query budget, accountant) for every session kind the charge must be right in.
SESSIONS: tuple[tuple[Budget, Budget, str | None], ...] = (
    (PureDP(10), PureDP(1), None), (ApproxDP(10, 1e-5), ApproxDP(1, 1e-6), None), (ZCDP(5), ZCDP(0.5), None),
    (ApproxDP(10, 1e-5), PureDP(1), "rdp"), (ApproxDP(10, 1e-5), PureDP(1), "pld"),
)


#: The total of the ``pld`` sessions :meth:`FamilyConformance.curve_audit` samples in (a fresh one every 200 runs).
CURVE_SESSION = ApproxDP(10**6, 1e-5)


def _numbers(result: Any) -> dict[str, float]:
    """Every number in a result (a frame's cells, a dataclass's fields, nested dicts), by path."""
    out: dict[str, float] = {}

    def visit(value: Any, path: str) -> None:
        if isinstance(value, bool):
            out[path] = float(value)
        elif isinstance(value, int | float):
            out[path] = float(value)
        elif isinstance(value, pl.DataFrame):
            for name in value.columns:
                for i, v in enumerate(value[name].to_list()):
                    visit(v, f"{path}{name}[{i}]")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                visit(getattr(value, f.name), f"{path}{f.name}.")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                visit(v, f"{path}{k}.")
    visit(result, "")
    return out


class FamilyConformance:
    """Base class of a query family's conformance tests: set :attr:`family`, :attr:`table` and :attr:`call`."""

    family: ClassVar[Any] = None
    plugin: ClassVar[Any] = None                                # the hooks object (module) that registers it
    table: ClassVar[pl.DataFrame | None] = None
    # Set with ``staticmethod(...)`` (a plain function would be bound as a method):
    call: ClassVar[staticmethod[[Any], Any] | None] = None        # frame -> the family's query
    bad_calls: ClassVar[Sequence[Callable[[Any], Any]]] = ()
    privacy_unit: ClassVar[PrivacyUnit] = PrivacyUnit("user", max_rows=2)
    neighbour: ClassVar[pl.DataFrame | None] = None              # rows of the added unit (default: a copy of row 0)
    audit_budget: ClassVar[Budget] = PureDP(1)
    audit_samples: ClassVar[int] = 200
    slow_audit_samples: ClassVar[int] = 4_000
    features: ClassVar[staticmethod[[Any], Mapping[str, float]] | None] = None
    sessions: ClassVar[Sequence[tuple[Budget, Budget, str | None]]] = SESSIONS

    def _table(self) -> pl.DataFrame:
        if self.family is None or self.table is None or self.call is None:
            pytest.fail(f"{type(self).__name__}: set the class attributes family, table and call")
        assert self.table is not None
        return self.table

    def _neighbour(self) -> pl.DataFrame:
        table = self._table()
        added = self.neighbour if self.neighbour is not None else table.head(1)
        unit = self.privacy_unit.column
        if unit is not None and self.neighbour is None:
            added = added.with_columns(pl.lit(10**9).cast(table.schema[unit]).alias(unit))
        return pl.concat([table, added])

    def _session(self, table: pl.DataFrame, total: Budget | None = None, accountant: str | None = None,
                 seed: int = 0) -> Session:
        """A seeded session on ``table`` that routes the family's name to :attr:`family` (and no other session)."""
        sess = Session({"t": table}, privacy_unit=self.privacy_unit, budget=total or PureDP(10), accountant=accountant,
                       seed=seed)
        return self._pinned(sess)

    def _pinned(self, sess: Session) -> Session:
        return pin_families(sess, self.family)  # type: ignore[no-any-return]

    def _query(self, table: pl.DataFrame, total: Budget | None = None, accountant: str | None = None,
               seed: int = 0) -> tuple[Session, Any]:
        sess = self._session(table, total, accountant, seed)
        call = type(self).call
        assert call is not None
        return sess, call(sess.table("t"))

    def test_declares_the_family_protocol(self) -> None:
        family = self.family
        self._table()
        assert isinstance(family, QueryFamily), "give it name, attach, methods, result_types and build()"
        assert family.name not in RESERVED and family.attach in ("frame", "group_by", "both")
        sess = self._session(self._table())
        assert sess.plugins.family(family.name) is family
        where = sess.table("t") if family.attach in ("frame", "both") else sess.table("t").group_by(
            self._table().columns[0])
        assert callable(getattr(where, family.name)), f"frame.{family.name} is not reachable"
        if self.plugin is not None:
            registered: list[Any] = []
            hook = getattr(self.plugin, "dpframe_query_families", None)
            assert hook is not None, f"{self.plugin!r} has no dpframe_query_families hook"
            hook(register=lambda item, /, *, replaces=None: registered.append(item))
            assert any(getattr(item, "name", None) == family.name for item in registered), \
                f"the plugin's dpframe_query_families hook registers no family named {family.name!r}"

    def test_cost_is_computed_before_running_and_is_data_independent(self) -> None:
        for total, budget, accountant in self.sessions:
            costs = []
            for table in (self._table(), self._neighbour()):
                sess, query = self._query(table, total, accountant)
                cost = query.cost(budget)
                assert cost == query.explain(budget, format="json")["budget"]["charged"] or \
                    sess.accountant.describe_charge(cost) == query.explain(budget, format="json")["budget"]["charged"]
                assert sess.history().height == 0, "cost() and explain() must charge nothing"
                costs.append(sess.accountant.describe_charge(cost))
            assert costs[0] == costs[1], f"the charge depends on the data: {costs}"

    def test_collect_charges_exactly_the_cost(self) -> None:
        for total, budget, accountant in self.sessions:
            sess, query = self._query(self._table(), total, accountant)
            cost = query.cost(budget)
            query.collect(budget)
            history = sess.history()
            assert history.height == 1 and history["status"].to_list() == ["committed"]
            assert history["cost"][0] == sess.accountant.describe_charge(cost)

    def test_a_failure_while_running_keeps_the_charge(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from dpframe.release import PrivateReader

        def broken(self: Any, request: Any) -> pl.DataFrame:
            raise RuntimeError("private value 123456")
        monkeypatch.setattr(PrivateReader, "run", broken)
        sess, query = self._query(self._table())
        with pytest.raises(DPFrameError, match="failed while running") as info:
            query.collect(self.audit_budget)
        assert "123456" not in str(info.value)
        assert sess.history()["status"].to_list() == ["failed"]

    def test_bad_calls_charge_nothing(self) -> None:
        for bad in self.bad_calls:
            sess = self._session(self._table())
            with pytest.raises(DPFrameError) as info:
                bad(sess.table("t")).collect(PureDP(1))
            assert info.value.argument, "a bad call's error must name the argument"
            assert sess.history().height == 0

    def test_neighbouring_audit(self) -> None:
        self._audit(self.audit_samples)

    @pytest.mark.slow
    def test_neighbouring_audit_large(self) -> None:
        self._audit(self.slow_audit_samples)

    def _audit(self, samples: int) -> None:
        call = type(self).call
        assert call is not None
        features: Callable[[Any], Mapping[str, float]] = type(self).features or _numbers
        _, query = self._query(self._table())
        if not features(query.collect(self.audit_budget)):     # else the audit would compare the charge alone
            pytest.fail(f"{type(self).__name__}: the result of {query!r} has no number to audit; set features = "
                        "staticmethod(lambda result: {'name': float(...)}) (e.g. an indicator per released value)")
        sampler = query_sampler(lambda sess: call(self._pinned(sess).table("t")), self.privacy_unit,
                                features=features)
        pair = Neighbours("+1 unit", self._table(), self._neighbour())
        spec = AuditSpec(f"{self.family.name} (query family)", frozenset(), self.audit_budget, lambda: [pair],
                         sampler, samples=samples)
        failed = [r for r in [*run_audit(spec), *self.curve_audit(samples)] if not r.passed]
        assert not failed, failed

    def curve_audit(self, samples: int) -> list[AuditResult]:
        """The release held to the privacy curves its plan charges in a ``pld`` session (``[]``: it charges its cost's).

        An RDP/PLD session charges a family's curves (``context.accountant.charge_plan(cost, curves)``) instead of its
        cost; the engine checks them only against what they say (their composition may not prove less than the
        cost by basic composition), so curves of several small moves where one coordinate moves by their sum pass.
        Here the pairs the curves claim are audited on ``samples`` outputs per dataset (two pilot and two final runs,
        as :func:`~dpframe.testing.audit_curves` does for a mechanism's plan).
        """
        call = type(self).call
        assert call is not None
        features: Callable[[Any], Mapping[str, float]] = type(self).features or _numbers
        sampler = query_sampler(lambda sess: call(self._pinned(sess).table("t")), self.privacy_unit,
                                features=features, accountant="pld", total=CURVE_SESSION)
        charge_a, sample_a = sampler(self._table(), self.audit_budget)
        charge_b, sample_b = sampler(self._neighbour(), self.audit_budget)
        specs = tuple(getattr(charge_a, "specs", ()))
        assert specs == tuple(getattr(charge_b, "specs", ())), f"the charge depends on the data: {charge_a!r}, " \
                                                               f"{charge_b!r}"
        if not specs or specs == reference().charge_plan(self.audit_budget, None).specs:
            return []               # the cost's own curve: what run_audit tests
        curves = [from_json(spec) for spec in specs]
        top, _ = claimed_epsilon_delta(self.audit_budget)
        claims = curve_claims(curves, [top * p for p in CURVE_POINTS])
        if not claims:
            return []
        result = audit_claims(sample_a(samples, 1), sample_b(samples, 2), sample_a(samples, 3), sample_b(samples, 4),
                              claims)
        counted = Counter(c.label for c in curves)
        return [result.labelled(f"{self.family.name} (query family) against its curves "
                                f"{', '.join(f'{n} × {label}' if n > 1 else label for label, n in counted.items())}")]


__all__ = ["CURVE_SESSION", "FamilyConformance", "SESSIONS"]
