"""Review 42c: what stop 42 added or changed (``git diff 2c12b48 db26a66 -- dpframe plugins``).

Scope:

* ``dpframe.engine_output.ENGINE`` / ``STREAMING``, the engines every collect of dpframe names: whether they run
  what a ``collect()`` naming no engine ran (a default engine *named* with ``pl.Config.set_engine_affinity``),
  whether the analyst can change the objects (rebinding the module's names is patching the engine, which the
  threat model leaves to same-process code), and whether any query Polars runs for dpframe names no engine (``sink_*``,
  ``LazyFrame.describe``/``show``).
* The budget rule of review 42b: ``dp.ZCDP(rho, delta)`` budgets now taken by the learners, the Gaussian sparse
  vector and the individual filter (charges against hand-computed values; the δ dropped is unused), the refusal
  texts of ``Accountant.exceeded`` (a δ it advised was refused), and ``RenyiFilter.report``'s new branch (never
  less than the real spend).
* ``dpframe.sql.sandbox``: the lock re-made in a forked child and the per-process shared connection.
* ``dpframe.backends._bounding.kept``: integer units take the id-bucket path only while their span is small
  (``ID_SPAN``); the kept rows must be the law's either way (``dpframe.backends.polars.definition``).
* ``dpframe.interactive.tct.ChannelPlan.optimise``, memoized with ``dpframe.sealed.plain_cache``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.engine_output import ENGINE, STREAMING

# --- ENGINE / STREAMING -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", [ENGINE, STREAMING], ids=["ENGINE", "STREAMING"])
@pytest.mark.parametrize("attribute", ["collect", "collect_all", "monitoring", "_name", "name", "__class__"])
def test_dpframes_engines_cannot_be_changed(engine: Any, attribute: str) -> None:
    """``dpframe.engine_output.ENGINE`` was a plain ``_AutoEngine``: ``ENGINE.collect = spy`` made every private
    read of every later release go to ``spy`` (a release's unit ids and values, then its exact sums),
    ``ENGINE.monitoring = True`` turned query monitoring back on, ``ENGINE._name = "gpu"`` ran the GPU engine, and
    ``ENGINE.__class__`` could be another class. Both engines now refuse every assignment."""
    original = type(engine)

    class Other(original):  # type: ignore[misc, valid-type]
        pass

    value: object = Other if attribute == "__class__" else (lambda *a, **k: None)
    try:
        with pytest.raises(AttributeError, match="cannot be changed"):
            setattr(engine, attribute, value)
        with pytest.raises(AttributeError, match="cannot be changed"):
            delattr(engine, attribute)
    finally:   # before the fix: undo the change
        object.__setattr__(engine, "__class__", original)
        vars(engine).pop(attribute, None)


def test_a_spy_on_the_engine_sees_no_release() -> None:
    """The end-to-end form of the attack above: a spy set on ``ENGINE`` received a release's private rows."""
    seen: list[pl.LazyFrame] = []
    collect = ENGINE.collect

    def spy(lf: pl.LazyFrame, **kwargs: Any) -> Any:
        seen.append(lf)
        return collect(lf, **kwargs)

    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]})},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10))
    try:
        try:
            ENGINE.collect = spy  # type: ignore[method-assign]
        except AttributeError:
            pass
        sess.table("t").agg(dp.sum("x", bounds=(0, 5))).collect(dp.PureDP(1))
    finally:
        vars(ENGINE).pop("collect", None)
    assert seen == []


@pytest.fixture
def engine_names(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """The name and monitoring setting of each of Polars' engine objects that collects, in order."""
    from polars.lazyframe.engine import _LocalEngine

    names: list[tuple[str, object]] = []

    def recorded(method: Any) -> Any:
        def run(self: Any, lf: Any, **kwargs: Any) -> Any:
            names.append((self.name, self.monitoring))
            return method(self, lf, **kwargs)
        return run

    monkeypatch.setattr(_LocalEngine, "collect", recorded(_LocalEngine.collect))
    monkeypatch.setattr(_LocalEngine, "collect_all", recorded(_LocalEngine.collect_all))
    return names


@pytest.mark.parametrize(("affinity", "runs"), [(None, "auto"), ("auto", "auto"), ("in-memory", "in-memory"),
                                                ("streaming", "streaming"), ("gpu", "auto")])
def test_a_named_default_engine_runs_dpframes_collects(affinity: str | None, runs: str,
                                                      engine_names: list[tuple[str, object]]) -> None:
    """A ``collect()`` that names no engine runs on the engine named with ``pl.Config.set_engine_affinity``
    (``"in-memory"``, ``"streaming"``): Polars' ``"auto"`` engine ran dpframe's collects whatever the data owner
    named (in Polars 2.1 ``"auto"`` streams, so ``"in-memory"`` was never run), while ``docs/guarantees.md`` said
    it follows a named default. A named GPU engine (refused by ``check_engine`` before each read, but one set by
    another thread after it) runs ``"auto"``; ``STREAMING`` streams whatever is named."""
    frame = pl.LazyFrame({"x": [1, 2, 3]}).select(pl.col("x").sum())
    try:
        pl.Config.set_engine_affinity(affinity)  # type: ignore[arg-type]
        assert frame.collect(engine=ENGINE).item() == 6
        assert pl.collect_all([frame], engine=ENGINE)[0].item() == 6
        assert frame.collect(engine=STREAMING).item() == 6
    finally:
        pl.Config.set_engine_affinity(None)
    assert engine_names == [(runs, False), (runs, False), ("streaming", False)]


def test_a_release_runs_on_the_named_default_engine(engine_names: list[tuple[str, object]]) -> None:
    """A release under ``pl.Config.set_engine_affinity("in-memory")`` runs no query on the ``"auto"`` engine (the
    catalog's count of a table's rows streams by choice: ``STREAMING``)."""
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2, 2, 3], "g": ["a", "b", "a", "b"], "x": [1.0, 2.0, 3.0, 4.0]})},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10))
    try:
        pl.Config.set_engine_affinity("in-memory")
        sess.table("t").group_by("g", keys=["a", "b"]).agg(dp.sum("x", bounds=(0, 5))).collect(dp.PureDP(1))
    finally:
        pl.Config.set_engine_affinity(None)
    assert ("in-memory", False) in engine_names and "auto" not in {name for name, _ in engine_names}, engine_names


def test_no_query_of_the_engine_runs_on_polars_default_engine() -> None:
    """Review 42a's meta-test holds ``collect``, ``collect_all``, ``collect_async`` and ``collect_batches``; Polars
    also runs a query on its default engine for ``LazyFrame.sink_*`` (an ``engine=`` of their own), and for
    ``LazyFrame.describe`` and ``LazyFrame.show``, which take none: dpframe and its plugins call the former only
    with ``engine=ENGINE``/``STREAMING``, and the latter never. (``DataFrame.gather_every`` collects on the default
    engine too; dpframe's two calls, in ``polars_windows``, are on lazy frames.)"""
    import ast
    from pathlib import Path

    root = Path(dp.__file__).parent
    sinks = ("sink_parquet", "sink_ipc", "sink_csv", "sink_ndjson", "sink_batches", "sink_delta", "sink_iceberg")
    unnamed = []
    for path in [*root.rglob("*.py"), *(root.parent / "plugins").rglob("*.py")]:
        if "testing" in path.parts:
            continue
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            engine = next((k.value for k in call.keywords if k.arg == "engine"), None)
            named = isinstance(engine, ast.Name) and engine.id in ("ENGINE", "STREAMING")
            if (call.func.attr in sinks and not named) or (
                    call.func.attr in ("describe", "show") and not call.args and not call.keywords
                    and "lazy" in ast.unparse(call.func.value)):
                unnamed.append(f"{path.relative_to(root.parent)}:{call.lineno}: {ast.unparse(call)[-60:]}")
    assert unnamed == [], unnamed


# --- the budget rule of review 42b ------------------------------------------------------------------------------

DATA = pl.DataFrame({"u": list(range(40)), "x": [float(i % 10) for i in range(40)], "g": ["a", "b"] * 20,
                     "y": [i % 2 for i in range(40)]})


def _session(total: dp.Budget, accountant: str | None = None) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=total, accountant=accountant,
                      seed=0)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_individual_filter_with_a_delta_costs_its_rho_by_hand(accountant: str) -> None:
    """``sess.individual_filter(budget=dp.ZCDP(1/2, 1e-6))`` in an (ε, δ) = (10, 10⁻³) ``rdp``/``pld`` session is
    charged the RDP curve ρα of ρ = 1/2, nothing for its δ (its Gaussian queries use none): the filter then spends
    ε = min over its 23 orders of ρα + log(1 − 1/α) − (log(δ/23) + log α)/(α − 1) = 4.38531 (at α = 8), and the
    session's δ (the conversion's) — exactly what ``dp.ZCDP(1/2)`` costs."""
    import math

    from dpframe.accounting.rdp_charge import FILTER_ORDERS

    by_hand = min(0.5 * a + math.log(1 - 1 / a) - (math.log(1e-3 / 23) + math.log(a)) / (a - 1)
                  for a in map(float, FILTER_ORDERS))
    assert round(by_hand, 5) == 4.38531
    sess, plain = _session(dp.ApproxDP(10, 1e-3), accountant), _session(dp.ApproxDP(10, 1e-3), accountant)
    sess.individual_filter(budget=dp.ZCDP(0.5, 1e-6))
    plain.individual_filter(budget=dp.ZCDP(0.5))
    spent = sess.spent()
    assert spent == plain.spent() and spent.delta == Fraction(1, 10**3), spent
    assert by_hand <= spent.epsilon <= by_hand + 1e-9, (spent, by_hand)


def test_the_renyi_filter_never_reports_less_than_a_delta_alone_spent() -> None:
    """``RenyiFilter.report``'s new branch (no RDP spent) reports (0, Σδ0): a total of mechanisms with a zero RDP
    curve and δ0 > 0 reports their δ0, and once any RDP is spent, the session's whole δ (the conversion's)."""
    from dpframe.accounting import RDPAccountant
    from dpframe.accounting.rdp_charge import RDPCharge

    accountant = RDPAccountant(dp.ApproxDP(1, Fraction(1, 10**6)))
    empty = accountant.empty()
    delta_only = RDPCharge(values=tuple(0.0 for _ in empty.values), delta0=1e-7, labels=("δ only",))
    reported = accountant.report(delta_only)
    assert (reported.epsilon, reported.delta) == (0, Fraction(1, 10**7)), reported
    both = accountant.compose([delta_only, accountant.charge(dp.ApproxDP(Fraction(1, 2), 0))])
    assert accountant.report(both).delta == Fraction(1, 10**6) and accountant.report(both).epsilon > 0


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_delta_equal_to_what_remains_is_not_advised_where_it_is_refused(accountant: str) -> None:
    """``Accountant.exceeded`` (review 42b) advised "give it a smaller δ (at most what remains)" — but a Rényi
    filter refuses a query whose δ0 is exactly the δ that remains (it needs some of it for its conversion): a
    partition selection at δ = 10⁻⁶ in an (ε, δ) = (10, 10⁻⁶) session was refused, "remaining ε=10, δ=1e-06", and
    told to ask for at most that. The fix now asks for a δ below what remains, which fits; nothing is charged."""
    sess = _session(dp.ApproxDP(10, 1e-6), accountant)
    query = sess.table("t").group_by("g").agg(n=dp.len())
    with pytest.raises(dp.BudgetExceededError) as refused:
        query.collect(dp.ApproxDP(1, 1e-6))
    assert "remaining ε=10, δ=1e-06" in str(refused.value), str(refused.value)
    assert "at most" not in (refused.value.fix or "") and "below what remains" in (refused.value.fix or "")
    assert refused.value.argument == "budget" and sess.history().height == 0
    query.collect(dp.ApproxDP(1, 9.9e-7))                 # below what remains: taken
    assert sess.history()["status"].to_list() == ["committed"]


# --- bounding: the id-bucket path and the hashed path keep the law's rows ---------------------------------------

@pytest.mark.parametrize("dtype", [pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64])
def test_integer_units_keep_the_laws_rows_on_either_side_of_the_id_span(dtype: pl.DataType) -> None:
    """``kept`` takes the id-bucket path for integer units spanning fewer than ``max(ID_SPAN·rows, 2**16)`` values
    (and 2**22), else hashes them into buckets: either way the kept rows are ``definition``'s among the rows with a
    unit — spans just below, at and above each threshold, the type's extremes (UInt64 near 2**64, Int64's
    whole range, negative ids), one row, nulls (none, some, all), copies (rows of one unit with one hash)."""
    from dpframe.backends import _bounding
    from dpframe.backends.polars import definition, kept_mask

    rng = np.random.default_rng(42)
    info = np.iinfo(pl.Series([], dtype=dtype).to_numpy().dtype)
    low_end, high_end = int(info.min), int(info.max)
    cases = 0
    for n in (1, 3, 63, 300):
        threshold = max(_bounding.ID_SPAN * n, 1 << 16)
        spans = {0, 1, threshold - 2, threshold - 1, threshold, 2**22 - 2, 2**22 - 1, 2**22, 2**40, high_end - low_end}
        for span in sorted(s for s in spans if s <= high_end - low_end):
            for low in {x for x in (low_end, high_end - span, -(span // 2)) if low_end <= x <= high_end - span}:
                for nulls in (0, 1, n):
                    values: list[int | None] = [low + span * int(v) // 5 for v in rng.integers(0, 6, size=n)]
                    values[0], values[-1] = low, low + span
                    for i in rng.choice(n, size=min(nulls, n), replace=False).tolist():
                        values[i] = None
                    units = pl.Series("u", values, dtype=dtype)
                    hashes = rng.integers(0, 2**64, size=n, dtype=np.uint64)
                    hashes[rng.integers(0, n, size=n // 2)] = hashes[rng.integers(0, n, size=n // 2)]   # copies
                    k, seed = int(rng.integers(1, 4)), int(rng.integers(0, 2**63))
                    want = definition(units, hashes, seed, k) & units.is_not_null().to_numpy()
                    assert np.array_equal(kept_mask(units, hashes, seed, k), want), (n, span, low, nulls)
                    cases += 1
    assert cases >= 60


# --- the TCT plan's cache -----------------------------------------------------------------------------------------

def test_a_channels_cached_plan_is_its_own_parameters_and_cannot_be_changed() -> None:
    """``ChannelPlan.optimise`` is memoized process-wide (``plain_cache``): a number subclass that hashes and compares
    equal to another channel's parameters while it computes something else is read as its plain value first (the
    channel reads every number through ``plain`` too); a cached plan equals the search run afresh, for each of the
    parameters the cache could mix up (1 and 1.0, the nearest floats); and the plan a channel hands out, shared by
    every channel with its parameters, is frozen."""
    import dataclasses

    from dpframe.interactive.tct import ChannelPlan, q_notprior

    class Liar(float):
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return hash(1.0)

    search = ChannelPlan.optimise.__wrapped__
    q = q_notprior(1.0)
    for args in [(1.0, q, 2, 1e-6), (1, q, 2, 1e-6), (Liar(2.0), q_notprior(2.0), 2, 1e-6),
                 (1.0, float(np.nextafter(q, 0)), 2, 1e-6), (1.0, q, 2, float(np.nextafter(1e-6, 1)))]:
        plain_args = tuple(float(a) if isinstance(a, float) else a for a in args)
        assert ChannelPlan.optimise(*args) == search(*plain_args), args
    sess = _session(dp.ApproxDP(100, 1e-3))
    channel = sess.target_charging(1.0, 2, 1e-6)
    other = sess.target_charging(1.0, 2, 1e-6)
    assert channel.plan == other.plan
    for attribute, value in (("n", 1), ("epsilon", 0.0), ("__class__", object)):
        with pytest.raises((dataclasses.FrozenInstanceError, AttributeError, TypeError)):
            setattr(channel.plan, attribute, value)
    assert sess.history().height == 0
