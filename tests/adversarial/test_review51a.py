"""Review 51a: adversarial review of stop 50 (signature errors, the remote ``refusal`` request, plugin checks before
the charge, ``budgets.divide``/``exact``, the exponential sampler's overflow fix, the CLI's ``--ci``/``--diagnostics``).

Each test is one attack; those that found something say so in their docstring.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.budgets import Budget, describe, divide, make
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, Noise
from dpframe.testing import pin_mechanisms
from tests.adversarial.doubles import FakeMechanism, RowsFamily, installed
from tests.adversarial.test_review50d import ROWS, CountPlan  # review 50d's honest plugin count

DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "city": ["Oslo", "Rome"] * 200,
                     "x": [float(i % 13) for i in range(400)]})


# -- 1. plugin cost checks: what check_plugin_costs does not see -------------------------------------------------------


class LaplaceUnderZCDP(FakeMechanism):
    """A count plugin that, given a zCDP share ρ, adds discrete Laplace noise (a pure-ε noise, costing ε²/2 in ρ) of
    ε = √(2ρ)·10 — a hundred times the share — and reports the cost its share allows: the noise costs 100·ρ."""

    name = "laplace_zcdp"
    handles = frozenset({"laplace_zcdp"})
    notions = frozenset({"zcdp"})

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        assert isinstance(share, dp.ZCDP)
        eps = Fraction(10) * Fraction(int((2 * share.rho * 10**12) ** 0.5), 10**6)       # ≈ 10·√(2ρ)
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), dp.PureDP(eps))
        return CountPlan(self.name, tuple(measures), (ROWS,), dp.ZCDP(share.rho), noise={"count": noise},
                          count_noise=noise)


def test_soundness_a_pure_noise_under_a_zcdp_share_counts_toward_its_declared_cost() -> None:
    """Found: ``check_plugin_costs`` refuses a plan whose cost is below what its declared noise costs, but added up
    only the noises whose cost was in the share's notion: a discrete Laplace noise (pure ε) in a zCDP share counted
    as nothing, so a plugin whose noise costs 100 times its share (and its reported cost) ran and was charged the
    share. The noise's cost is now read in the share's notion (ε²/2 for a pure noise under zCDP); a noise whose cost
    cannot be read in it (a Gaussian under a pure share) is a plugin bug too."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ZCDP(10), seed=0)
    pin_mechanisms(sess, LaplaceUnderZCDP())
    q = sess.table("t").agg(dp.measure("laplace_zcdp"))
    with pytest.raises(dp.PluginError) as refused:
        q.collect(dp.ZCDP(Fraction(1, 2)))
    assert "laplace_zcdp" in str(refused.value) and sess.history().height == 0


class GaussianUnderPure(LaplaceUnderZCDP):
    """Given a pure share, a Gaussian noise (no pure-ε guarantee at all), reported at the share's cost."""

    name = "gauss_pure"
    handles = frozenset({"gauss_pure"})
    notions = frozenset({"pure"})

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
        assert isinstance(share, dp.PureDP)
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), dp.ZCDP(share.epsilon))
        return CountPlan(self.name, tuple(measures), (ROWS,), dp.PureDP(share.epsilon), noise={"count": noise},
                          count_noise=noise)


def test_soundness_a_gaussian_noise_under_a_pure_share_is_refused() -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0)
    pin_mechanisms(sess, GaussianUnderPure())
    with pytest.raises(dp.PluginError) as refused:
        sess.table("t").agg(dp.measure("gauss_pure")).collect(dp.PureDP(1))
    assert "gauss_pure" in str(refused.value) and sess.history().height == 0


def _selection(how: str) -> Any:
    from dpframe_aggregates.partition_selection import PartitionSelection

    class Selection(PartitionSelection):  # type: ignore[misc]   # the built-in selection, its reported cost changed
        def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> Any:
            plan = super().plan(measures, ctx, share)
            eps = share.epsilon  # type: ignore[union-attr]
            cost = {"tenth": make("approx", eps / 10, plan.cost.delta),  # type: ignore[union-attr]
                    "more_delta": make("approx", eps, plan.cost.delta * 2),  # type: ignore[union-attr]
                    "above": make("approx", eps * 2, plan.cost.delta),  # type: ignore[union-attr]
                    "pure": dp.PureDP(eps)}[how]
            return dataclasses.replace(plan, cost=cost, privacy=None)
    return Selection()


@pytest.mark.parametrize("how", ["tenth", "more_delta", "above", "pure"])
def test_soundness_a_partition_selection_plugin_s_cost_is_checked_too(how: str) -> None:
    """Found: the checks of a mechanism's reported cost (its notion, positive, at most its share, at least its
    declared noise) covered the measures' plans only, not the partition-selection plan, which any plugin handling the
    ``partition_selection`` kind provides: a selection plan reporting a tenth of its share (its noise calibrated to
    all of it) was charged a tenth; one reporting twice its share's δ (its threshold set for that δ) was charged
    the share's δ; one reporting a pure cost for an (ε, δ) share ran."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2, max_groups=1),
                      budget=dp.ApproxDP(10, 1e-5), seed=0)
    pin_mechanisms(sess, _selection(how))
    q = sess.table("t").group_by("city").agg(dp.len())
    with pytest.raises(dp.PluginError) as refused:
        q.collect(dp.ApproxDP(1, 1e-6))
    assert "partition_selection" in str(refused.value) and sess.history().height == 0


def test_an_honest_selection_plugin_still_runs() -> None:
    from dpframe_aggregates.partition_selection import PartitionSelection

    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2, max_groups=1),
                      budget=dp.ApproxDP(10, 1e-5), seed=0)
    pin_mechanisms(sess, PartitionSelection())
    sess.table("t").group_by("city").agg(dp.len()).collect(dp.ApproxDP(1, 1e-6))
    assert sess.spent() == dp.ApproxDP(1, 1e-6)


# -- 2. a budget number given as text (stop 50's refusal of text, with the number in its fix) ----------------------


@pytest.mark.parametrize("text", ["1e5000", "1e-5000", "-1e5000", "1/" + "3" * 60, "  1e400  "])
def test_a_huge_budget_text_is_a_budget_error_not_a_raw_value_error(text: str) -> None:
    """Found: the fix of the text refusal spelled the number the text reads as, ``Fraction(n, d)`` when no float is
    exactly it, and ``str`` of an integer past 4,300 digits is a ValueError of Python's: ``dp.PureDP("1e5000")``
    (or ``delta="1e-5000"``) raised a raw ``ValueError``, also through a server (a ``RemoteError``)."""
    untyped: Any = dp
    with pytest.raises(dp.BudgetError) as refused:
        untyped.PureDP(text)
    assert refused.value.argument == "epsilon" and "float(text)" in str(refused.value.fix)


def test_a_budget_text_is_refused_without_computing_its_power_of_ten(peak_memory: Any) -> None:
    """Found: the fix read the text with ``Fraction(text)``, which computes ``10**e`` for an exponent e: a request of
    eleven characters (``delta="1e30000000"`` in ``remote.run_until``, whose ``delta`` crosses as text) held a
    server's CPU for 77 s, and any number of such requests for as long. (``1e10000000`` here: 9 s before.)

    The refusal's peak memory (a few kB) shows no such number was made (``10**10000000`` alone is 4 MB), whatever
    the machine's load (its time did not)."""
    untyped: Any = dp
    with pytest.raises(dp.BudgetError):
        untyped.ApproxDP(1, "1e10000000")
    assert peak_memory(lambda: untyped.ApproxDP(1, "1e10000000")) < 60_000


def test_a_huge_budget_text_is_refused_through_a_server() -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0)
    key = secrets.token_bytes(32)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        with pytest.raises(dp.BudgetError) as refused:
            remote.run_until([remote.table("t").agg(dp.len())], dp.PureDP(1), lambda r: True, delta="1e-5000")
    assert refused.value.argument == "delta" and sess.history().height == 0


# -- 3. dp.NoIntervalWarning as an error through a server --------------------------------------------------------------


@pytest.mark.parametrize("chain", [True, False])
def test_a_strict_remote_caller_is_refused_before_the_charge_too(chain: bool) -> None:
    """Found: ``warnings.simplefilter("error", dp.NoIntervalWarning)`` refuses ``collect(..., ci=...)`` free in process
    (the warning is given before the charge), but through a server the warning was given in the analyst's process
    once the reply came: the query was charged and its release thrown away by the exception. The client now tells
    the server that the warning is an error where it is (its filters, probed at the analyst's line), and the server
    refuses the query before the charge, as in process."""
    import warnings

    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0)
    key = secrets.token_bytes(32)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        q = remote.table("t").agg(dp.len(), dp.median("x", bounds=(0, 20))) if chain else \
            remote.sql("SELECT COUNT(*) AS n, MEDIAN(CLAMP(x, 0, 20)) AS m FROM t")
        with warnings.catch_warnings():
            warnings.simplefilter("error", dp.NoIntervalWarning)
            with pytest.raises(dp.NoIntervalWarning) as refused:
                q.collect(dp.PureDP(1), ci=0.9)
        assert refused.value.outputs == (("x_median",) if chain else ("m",))
        assert sess.history().height == 0, "refused before the charge, as in process"
        with warnings.catch_warnings(record=True) as caught:      # not an error: released, and warned
            warnings.simplefilter("always")
            out = q.collect(dp.PureDP(1), ci=0.9)
        assert sess.history().height == 1 and out.height == 1
        assert [w.category for w in caught] == [dp.NoIntervalWarning]


# -- 4. the exponential sampler beyond float64 (stop 50's fix) ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sign", [1, -1])
def test_segments_beyond_float64_draw_their_multiplicities_exactly(sign: int) -> None:
    """Every score of a segment beyond float64 (s·u = ±2⁶²·10²⁹⁰) goes to the exact refinement: with equal
    utilities, multiplicities 1 and 3 must give 1/4 and 3/4, beside segments decided in floats (equal utilities,
    multiplicities 1, 1, 2: 1/4, 1/4, 1/2) and a segment of two items 10²⁹⁰ apart (the higher, always), each index
    within its segment. (Holds on main: a pin of stop 50's fix, slow: ~5 ms a refinement.)"""
    from dpframe.noise import SeededRandomSource
    from dpframe.noise.exponential import exponential_index_grouped

    n, big = 300, sign * 2**62
    u = np.array([big, big, 0, 0, 0, 5, 4] * n, dtype=np.int64)
    m = np.array([1, 3, 1, 1, 2, 1, 1] * n, dtype=np.int64)
    offsets = [o for i in range(n) for o in (7 * i, 7 * i + 2, 7 * i + 5)] + [7 * n]
    out = exponential_index_grouped(u, Fraction(10**290), SeededRandomSource(7), offsets, multiplicities=m)
    out = out.reshape(n, 3)
    for column, p in ((0, [0.25, 0.75]), (1, [0.25, 0.25, 0.5]), (2, [1.0, 0.0])):
        counts = np.bincount(out[:, column], minlength=len(p))
        assert counts.size == len(p), counts        # no index outside its segment
        expected = n * np.array(p)
        spread = np.sqrt(n * np.array(p) * (1 - np.array(p)))
        assert (np.abs(counts - expected) <= 4 * spread + 1e-9).all(), (column, counts, expected)


# -- 5. the CLI's --ci / --diagnostics charge what cost() says ---------------------------------------------------------

CLI_DATA = pl.DataFrame({"user": list(range(300)), "city": ["a", "b", "c"] * 100, "spend": [1, 2, 3] * 100})


@pytest.mark.parametrize(("sql", "flags", "budget"), [
    ("SELECT city, SUM(CLAMP(spend, 0, 2)) AS s, COUNT(*) AS n FROM v GROUP BY city",
     ["--keys", "v.city=a,b,c", "--ci", "0.9", "--diagnostics", "--epsilon", "1"], dp.PureDP(1)),
    ("SELECT city, AVG(CLAMP(spend, 0, 2)) AS m FROM v GROUP BY city",
     ["--diagnostics", "--ci", "0.5", "--epsilon", "1", "--delta", "1e-6"], dp.ApproxDP(1, 1e-6)),
    ("SELECT COUNT(*) AS n, SUM(CLAMP(spend, 0, 3)) AS s FROM v",
     ["--diagnostics", "--rho", "0.25", "--total-rho", "1"], dp.ZCDP(0.25)),
])
def test_cli_ci_and_diagnostics_charge_what_cost_says(tmp_path: Any, capsys: pytest.CaptureFixture[str], sql: str,
                                                       flags: list[str], budget: dp.Budget) -> None:
    """``dpframe query --ci/--diagnostics`` charges exactly ``cost(budget, diagnostics=True)`` of the same query in
    process (the ledger's one row), and ``--ci`` adds nothing to it. (Holds on main: a pin.)"""
    import json

    from dpframe.cli import main

    path, ledger = tmp_path / "v.parquet", str(tmp_path / "b.ledger")
    CLI_DATA.write_parquet(path)
    total = [] if "--total-rho" in flags else ["--total-epsilon", "5", "--total-delta", "1e-5"]
    args = ["query", sql, "--table", f"v={path}", "--privacy-unit", "user", "--max-rows", "2", "--ledger", ledger,
            *total, *flags, "--seed", "1"]
    assert main(args) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["budget", "--ledger", ledger, "--format", "json"]) == 0
    spent = json.loads(capsys.readouterr().out)
    sess = dp.Session({"v": CLI_DATA}, privacy_unit=dp.PrivacyUnit("user", max_rows=2),
                      budget=dp.ZCDP(1) if "--total-rho" in flags else dp.ApproxDP(5, 1e-5), seed=0)
    keys = {"city": ["a", "b", "c"]} if "v.city=a,b,c" in flags else None
    query: Any = sess.sql(sql, keys=keys)
    cost = query.cost(budget, diagnostics=True)
    assert spent["queries"] == 1 and spent["spent"] == describe(cost), (spent, cost)
    assert query.cost(budget) == cost, "diagnostics take their tenth inside the budget"


# -- 6. a query family's plan: its charge and a cost in another notion ----------------------------------------------


class LyingRowsQuery:
    """A noisy row count whose plan lies in one way (``how``): its ``charge`` a hundredth of its cost, or its cost in
    zCDP (ten times the query's ρ) for a pure budget."""

    def __init__(self, source: Any, how: str) -> None:
        self.source, self.how = source, how

    def describe(self) -> str:
        return f"rows_{self.how}()"

    def plan(self, budget: Any) -> Any:
        from dpframe.family import Explain, FamilyPlan

        accountant = self.source.context.accountant
        cost = budget if self.how == "small_charge" else dp.ZCDP(budget.epsilon ** 2 / 2 * 10)
        noise = Noise.calibrate(Fraction(self.source.unit.max_rows), cost)
        charged = make("pure", budget.epsilon / 100) if self.how == "small_charge" else cost

        def run(reader: Any, rng: Any) -> int:
            exact = int(reader.statistics(self.source.node, (ROWS,))[ROWS.key][0])
            return exact + int(noise.sample(1, rng)[0])
        return FamilyPlan(budget, cost, accountant.charge_plan(charged, None, 1.0), "rows", Explain("rows"), run)


@pytest.fixture(scope="module")
def lying_families() -> Iterator[None]:
    yield from installed("rows_r51a", *(RowsFamily(f"rows_{how}_r51a", LyingRowsQuery, how)
                                                for how in ("small_charge", "zcdp_cost")))


def test_soundness_a_family_charge_below_its_cost_is_refused(lying_families: Any) -> None:
    """Found: ``check_cost`` (stop 50) refuses a family plan whose ``cost`` is above the query's budget, but the
    ledger reserves the plan's ``charge``, which nothing compared with the cost: a family reporting an honest cost
    of ε = 1 and a charge of ε = 1/100 ran and was charged 1/100. In a session that charges budgets (``basic``,
    ``zcdp``), the charge must now be at least what the accountant charges for the cost."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0)
    with pytest.raises(dp.PluginError) as refused:
        sess.table("t").rows_small_charge_r51a().collect(dp.PureDP(1))
    assert "rows_small_charge()" in str(refused.value) and sess.history().height == 0


def test_a_family_cost_in_another_notion_is_the_plugin_s_error_not_the_budget_s(lying_families: Any) -> None:
    """Found: a family plan's cost that does not convert into the budget's notion (zCDP for a pure budget) was
    refused with a BudgetConversionError naming the analyst's ``budget`` and telling them to give another one — a
    plugin's bug blamed on the analyst (``check_cost`` meant to leave it to the accountant, but caught BudgetError,
    which a conversion error is not). The budget is now read in the cost's notion where it converts (pure ε as
    ε²/2), and a cost above it is the plugin's PluginError, free."""
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ZCDP(50), seed=0)
    with pytest.raises(dp.PluginError) as refused:
        sess.table("t").rows_zcdp_cost_r51a().collect(dp.PureDP(1))
    assert "rows_zcdp_cost()" in str(refused.value) and sess.history().height == 0


# -- 7. budgets.divide ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("share", [dp.PureDP(Fraction(1, 3)), dp.ApproxDP(0.7, 1e-7), dp.ZCDP(0.1, 1e-9),
                                   dp.PureDP(1e-300)])
def test_divided_parts_add_up_to_the_share_exactly(share: Budget) -> None:
    """``divide(share, n)``'s n parts compose to exactly the share (no float rounding: a part rounded up would add
    up to more than the plan's share; one rounded down, if calibrated to it, to weaker noise than charged). Pin."""
    from dpframe.planning.state import first

    for n in (1, 2, 3, 7, 10**6, 10**30):
        part = divide(share, n)
        assert part.notion == share.notion and first(part) * n == first(share)
        assert getattr(part, "delta", 0) * n == getattr(share, "delta", 0)
    for bad in (0, -1, 1.5, True, np.int64(0)):
        with pytest.raises(dp.BudgetError):
            divide(share, bad)  # type: ignore[arg-type]


class LyingTopK:
    """A top-k replacement (``replaces="top_k"``) whose plan charges a hundredth of its cost."""

    name, attach, methods = "top_k", "group_by", ()
    result_types: dict[str, type] = {}

    def build(self, source: Any, /, **arguments: Any) -> LyingRowsQuery:
        return LyingRowsQuery(source, "small_charge")


class LyingTopKHooks:
    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        register(LyingTopK(), replaces="top_k")


def test_soundness_a_top_k_replacement_s_charge_is_checked_in_sql_too() -> None:
    """SQL ``TOP_K`` runs the registered top-k family (a plugin's replacement too) through its own query class,
    which is checked as a frame's family is."""
    from dpframe.plugin import plugin_host

    host = plugin_host()
    host.register(LyingTopKHooks(), name="top_k_r51a")
    try:
        sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0,
                          public_keys={"t.city": ["Oslo", "Rome"]})
        with pytest.raises(dp.PluginError) as refused:
            sess.sql("SELECT city FROM t GROUP BY city HAVING TOP_K(COUNT(*), 1)").collect(dp.PureDP(1))
        assert "less than its cost" in str(refused.value) and sess.history().height == 0
    finally:
        host.unregister(name="top_k_r51a")


# -- 8. SQL ci= beside a measure without an interval ------------------------------------------------------------------

_NAMED_LIKE_INTERVALS = [     # (sql, the interval columns ci= adds)
    ("SELECT city, COUNT(*) AS n_ci_low, MEDIAN(CLAMP(x, 0, 20)) AS n FROM t GROUP BY city",
     ["n_ci_low_ci_low", "n_ci_low_ci_high"]),
    ("SELECT city, COUNT(*) AS n_ci_low, MEDIAN(CLAMP(x, 0, 20)) AS n FROM t GROUP BY city ORDER BY n DESC",
     ["n_ci_low_ci_low", "n_ci_low_ci_high"]),
    ("SELECT city, COUNT(*) AS n, MEDIAN(CLAMP(x, 0, 20)) AS m, SUM(CLAMP(x, 0, 20)) AS m_ci_high FROM t GROUP BY city",
     ["n_ci_low", "n_ci_high", "m_ci_high_ci_low", "m_ci_high_ci_high"]),
    ("SELECT city, COUNT(*) AS n, MEDIAN(CLAMP(x, 0, 20)) AS m, SUM(CLAMP(x, 0, 20)) AS m_ci_high FROM t GROUP BY city "
     "ORDER BY city", ["n_ci_low", "n_ci_high", "m_ci_high_ci_low", "m_ci_high_ci_high"]),
    ("SELECT city AS m_ci_low, COUNT(*) AS n, MEDIAN(CLAMP(x, 0, 20)) AS m FROM t GROUP BY city ORDER BY n",
     ["n_ci_low", "n_ci_high"]),
]


@pytest.mark.parametrize(("sql", "added"), _NAMED_LIKE_INTERVALS)
def test_sql_ci_beside_a_column_named_like_a_quantile_s_interval(sql: str, added: list[str]) -> None:
    """Found (older than stop 50, beside its ``ci=`` work): the SQL post-processing took a selected column named
    like a quantile's interval column (``COUNT(*) AS n_ci_low`` beside ``MEDIAN(...) AS n``) for that interval: the
    query was charged, then failed in post-processing (a duplicate column), on every dataset; with an ORDER BY,
    ``sess.sql(...)`` itself raised a raw polars ``DuplicateError``. A quantile has no interval, so nothing is
    taken: the query runs, with the intervals of the measures that have them, and the selected columns as they are."""
    import warnings

    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0,
                      public_keys={"t.city": ["Oslo", "Rome"]})
    plain = sess.sql(sql).collect(dp.PureDP(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dp.NoIntervalWarning)
        out = sess.sql(sql).collect(dp.PureDP(1), ci=0.9)
    beside = [x for c in plain.columns for x in (c, f"{c}_ci_low", f"{c}_ci_high") if x == c or x in added]
    assert out.columns == beside, out.columns       # each interval right after its measure (review 52g)
    assert dict(out.schema) == {**plain.schema, **{c: out.schema[c] for c in added}}


def test_sql_ci_still_refuses_free_a_column_named_like_a_real_interval() -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10), seed=0,
                      public_keys={"t.city": ["Oslo", "Rome"]})
    for sql in ("SELECT city, SUM(CLAMP(x, 0, 20)) AS n_ci_low, COUNT(*) AS n FROM t GROUP BY city",
                "SELECT city, SUM(CLAMP(x, 0, 20)) AS n_ci_low, COUNT(*) AS n FROM t GROUP BY city ORDER BY n"):
        with pytest.raises(dp.PlanError) as refused:
            sess.sql(sql).collect(dp.PureDP(1), ci=0.9)
        assert refused.value.argument == "ci"
    assert sess.history().height == 0
