"""Review 36d: the D/D′ oracles extended to the Spark backend, Poisson samples and interactive calls on tuned frames.

Scope: the composed oracle's tuned chains (``chains(tuned=True)``: automatic bounds, ``ci=``,
``diagnostics=True``, every ending) and the interactive oracle's sequences on the Spark backend
(``tests/adversarial/composed.py``: :data:`~tests.adversarial.composed.SPARK`); ``frame.sample(rate)`` as a
chain step (``chains(sample=True)``), composed with filters, derived columns and ``bound()``, under every unit
(refused, free, under an ``"auto"`` one); interactive endings (sparse vector, target charging, individual filter,
gated release, PTR, robust median, ``run_until``) on tuned chains' frames, in sessions whose unit may choose its
bounds (``sequences(tuned=True)`` in ``test_interactive_oracle.py``); and tuned chains' ``bound()`` steps made ones
their unit accepts. Each test is an attack on the oracles or the engine that broke, kept with its fix: it fails
if the defence regresses.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

import dpframe as dp

from .composed import MEMORY, SPARK, Chain, Neighbours, base, chains, open_session


def test_an_oracle_whose_d_session_is_refused_fails_instead_of_comparing_nothing() -> None:
    """Every Spark example of the composed oracle (``test_a_chain_behaves_alike_on_spark``) passed while comparing
    nothing: the Spark backend refuses the table's ``Duration`` column when a session is created, so D′'s session
    was refused, and :meth:`Neighbours.compare` read that as "a value no query could read" and returned ``None``
    (the example passed) without ever opening D's. It now opens D's session first: a refused D fails the example."""
    def refused(source: object, backend: str, unit: Any) -> dp.Session:
        raise dp.SchemaError("this backend cannot store the table", argument="tables['t']", fix="drop the column")

    extra = base().head(1).with_columns(u=pl.lit(10_000, dtype=pl.Int64))
    with pytest.raises(dp.SchemaError, match="cannot store the table"):
        Neighbours(refused).compare(Chain(), dp.PrivacyUnit("u", max_rows=2), extra, "polars", MEMORY, 1,
                                    lambda sess, query: (), lambda a, b: True)


def test_the_spark_oracles_run_on_a_table_the_spark_backend_opens(spark_session: Any) -> None:
    """The Spark examples run on :data:`SPARK` (the table less its ``Duration`` column): D's session opens there,
    and the whole table is still refused (what made the earlier Spark examples vacuous)."""
    unit = (dp.PrivacyUnit("u", max_rows=2), "default")
    assert open_session(SPARK.source(base(SPARK)), "spark", unit).table("t").columns == base(SPARK).columns
    assert "e" not in base(SPARK).columns
    with pytest.raises(dp.SchemaError, match="'e' has type Duration"):
        open_session(MEMORY.source(base()), "spark", unit)


@settings(max_examples=300, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(chain=chains(max_steps=5, tuned=True, sample=True))
def test_a_tuned_chains_bound_steps_are_ones_its_unit_accepts(chain: Chain) -> None:
    """About one tuned chain in ten ended in a ``bound()`` step its unit always refuses (under an ``"auto"`` unit,
    which has no number to tighten, or looser than the unit): a free, data-independent refusal that tested
    nothing. Every ``bound()`` step of a tuned chain now tightens its unit."""
    for method, arg in chain.steps:
        if method == "bound":
            chain.unit.tightened(**arg)


@pytest.mark.parametrize("unit", [dp.PrivacyUnit("u", max_rows=2), dp.PrivacyUnit("u", max_rows=2, max_groups="auto")],
                         ids=["max_rows=2", "max_groups=auto"])
def test_run_until_refuses_a_step_with_automatic_bounds_naming_the_fix(unit: dp.PrivacyUnit) -> None:
    """``run_until([frame.agg(dp.sum("x", bounds="auto"))], ...)`` (an interactive ending on a tuned chain's query,
    found by ``sequences(tuned=True)``) was refused with ``ArgumentError: bounds: sum() takes no option 'bounds'.
    Fix: options of sum(): ['mechanism']``: run_until plans each step directly, and the aggregates plugin read
    ``"auto"`` as an unknown option — a message that names a fix that does not exist. It is now refused, free, as
    the other interactive mechanisms refuse such a query: the step chooses its bounds when it runs, so it has no
    plan to run under early stopping; pass numbers."""
    from dpframe.interactive.stopping import run_until

    sess = open_session(base(), "polars", (unit, "default"))
    t = sess.table("t")
    with pytest.raises(dp.PlanError, match=r"bounds: this query chooses bounds\(x\) when it runs, so run_until cannot "
                                           r"plan it.* Fix: pass bounds=\(lower"):   # the argument: review 37c
        run_until([t.agg(dp.len()), t.agg(dp.sum("x", bounds="auto"))], dp.PureDP(1), lambda r: False)
    assert sess.history().height == 0
    assert len(run_until([t.agg(dp.sum("x", bounds=(0, 1)))], dp.PureDP(1), lambda r: False)) == 1


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_diagnostics_count_the_values_clipped_at_automatic_bounds_under_a_row_unit(backend: str) -> None:
    """Under ``dp.PrivacyUnit.row()``, ``agg(dp.mean("x", bounds="auto")).collect(budget, diagnostics=True)`` (a
    tuned chain's ending, with or without a ``sample()`` step) was refused: "nothing to diagnose: no contribution
    bounding, clipping or partition selection", though the release clips at the bounds it chooses — the check read
    the measure's ``bounds`` (None until chosen) and missed ``"auto"``. It now runs, and counts the values clipped
    at the chosen bounds, as with numbers or under a user unit."""
    data = pl.DataFrame({"x": [float(i % 50) for i in range(500)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), backend=backend, seed=0)
    for frame in (sess.table("t"), sess.table("t").sample(0.5)):
        _, diagnostics = frame.agg(dp.mean("x", bounds="auto")).collect(dp.PureDP(1), diagnostics=True)
        assert "x_mean values clipped" in diagnostics["diagnostic"].to_list()
    assert sess.history()["status"].to_list() == ["committed"] * 2
