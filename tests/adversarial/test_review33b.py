"""Review 33b: the automatic and post-processing surfaces — ``"auto"`` bounds, tuning, diagnostics, ``ci=``.

The analyst picks every argument (confidence levels, output names, budgets, measures built with
``dp.Measure``) and catches every exception. Each test is an attack that broke, kept with its fix: it
fails if the defence regresses. D and D′ are neighbouring datasets (D′ adds one privacy unit) where the
attack is data-dependent; where the outcome depended on a value the tuning stage chose, that value is
released (DP) but the query was charged and failed, which no refusal may do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

import dpframe as dp


def _session(data: pl.DataFrame, unit: dp.PrivacyUnit, budget: Any = None) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=unit, budget=budget or dp.ApproxDP(100, 1e-5), seed=0)


def _outcome(sess: dp.Session, run: Callable[[dp.Session], Any]) -> tuple[str, list[str]]:
    """What the analyst sees: ``released`` or the exception's type, and the ledger's statuses."""
    try:
        run(sess)
        seen = "released"
    except dp.DPFrameError as e:
        seen = type(e).__name__
    return seen, sess.history()["status"].to_list()


def _units(rows: int, units: int = 60, extra: int = 0) -> pl.DataFrame:
    """``units`` units with ``rows`` rows each (values 0.3 … 0.7), D′ adds one unit of ``extra`` rows at 0.7."""
    base = [(u, 0.3 + 0.4 * (i % 2)) for u in range(units) for i in range(rows)]
    return pl.DataFrame(base + [(10_000, 0.7)] * extra, schema=["u", "x"], orient="row")


LAST_BELOW_ONE = 0.9999999999999999     # 1 − 2⁻⁵³: its Bonferroni parts round to 1.0


@pytest.mark.parametrize(("budget", "run"), [
    (dp.PureDP(100), lambda s: s.table("t").agg(dp.mean("x", bounds="auto")).collect(dp.PureDP(2), ci=LAST_BELOW_ONE)),
    (dp.ZCDP(100), lambda s: s.table("t").agg(dp.len(), dp.var("x", bounds="auto")).collect(dp.ZCDP(1),
                                                                                              ci=LAST_BELOW_ONE)),
    (dp.PureDP(100), lambda s: s.table("t").agg(dp.mean("x", bounds=(0, 1))).collect(dp.PureDP(1), ci=LAST_BELOW_ONE)),
    (dp.PureDP(100), lambda s: s.sql("SELECT AVG(CLAMP(x, 0, 1)) AS m FROM t").collect(dp.PureDP(1),
                                                                                        ci=LAST_BELOW_ONE)),
    (dp.PureDP(100), lambda s: s.table("t").agg(dp.len(), dp.mean("x", bounds=(0, 1))).cost(
        accuracy=dp.Accuracy(half_width={"len": 100}, confidence=LAST_BELOW_ONE))),
])
def test_a_confidence_level_whose_parts_round_to_one_is_refused_uncharged(budget: Any,
                                                                          run: Callable[[dp.Session], Any]) -> None:
    """``ci=0.9999999999999999`` passed ``0 < ci < 1``; a mean's interval splits the miss between two noisy
    statistics (1 − (1 − ci)/2 rounds to 1.0) and a discrete Gaussian with σ > 10⁵ asks for the normal
    quantile at 1 − (1 − ci)/2 (∞): ``math.log(0)`` / ``math.ceil(inf)``. A query with ``"auto"`` bounds
    planned its dry runs without the intervals, so the failure came after the charge ("the query failed
    while running (ValueError)"); on a zCDP session with ``max_rows="auto"`` it came exactly when the chosen
    ``max_rows`` made σ > 10⁵, i.e. on the data. Without ``"auto"`` the dry run said "a plugin bug", and
    ``cost(accuracy=...)`` raised a raw ``ValueError``. Now a level above 1 − 10⁻⁹ is a PlanError naming
    ``ci`` (``confidence``), and staged plans dry-run the intervals too, both before anything is charged.
    """
    for extra in (0, 40):
        sess = _session(_units(3, extra=extra), dp.PrivacyUnit("u", max_rows="auto"), budget)
        assert _outcome(sess, run) == ("PlanError", [])
    with pytest.raises(dp.PlanError, match="ci"):
        dp.Session({"t": _units(1)}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(1)).table(
            "t").agg(dp.len()).collect(dp.PureDP(1), ci=LAST_BELOW_ONE)


@pytest.mark.slow
def test_a_zcdp_interval_failure_does_not_follow_the_chosen_max_rows() -> None:
    """The data-dependent form of the attack above, on a ``max_rows="auto"`` zCDP session at ρ = 10⁻³:
    units of one row (``max_rows`` chosen 1, σ < 10⁵) were released; units of 6000 rows (``max_rows``
    chosen ≈ 6144, σ > 10⁵) were charged and failed with an OverflowError. Both are refused uncharged now.
    """
    for rows in (1, 6000):
        data = pl.DataFrame({"u": [u for u in range(400) for _ in range(rows)]})
        sess = _session(data, dp.PrivacyUnit("u", max_rows="auto"), dp.ZCDP(1))
        assert _outcome(sess, lambda s: s.table("t").agg(dp.len()).collect(dp.ZCDP(0.001), ci=LAST_BELOW_ONE)) == (
            "PlanError", [])
    sess = _session(data, dp.PrivacyUnit("u", max_rows="auto"), dp.ZCDP(1))
    assert _outcome(sess, lambda s: s.table("t").agg(dp.len()).collect(dp.ZCDP(0.001), ci=0.999999)) == (
        "released", ["committed"])


@pytest.mark.parametrize(("unit", "run"), [
    (dp.PrivacyUnit("u", max_rows=2), lambda s: s.table("t").agg(dp.len().alias("n"), dp.len().alias("n_ci_low"))
     .collect(dp.PureDP(1), ci=0.9)),
    (dp.PrivacyUnit("u", max_rows="auto"), lambda s: s.table("t").agg(dp.len().alias("n"), dp.len().alias(
        "n_ci_low")).collect(dp.PureDP(1), ci=0.9)),
    (dp.PrivacyUnit("u", max_rows=2), lambda s: s.table("t").agg(dp.len().alias("n"), dp.median(
        "x", bounds=(0, 1)).alias("n_ci_high")).collect(dp.PureDP(1), ci=0.9)),
    (dp.PrivacyUnit("u", max_rows=2), lambda s: s.table("t").with_columns(n_ci_low=pl.lit(1)).group_by(
        "n_ci_low", keys=[1]).agg(n=dp.len()).collect(dp.PureDP(1), ci=0.9)),
    (dp.PrivacyUnit("u", max_rows=2), lambda s: s.sql("SELECT COUNT(*) AS n_ci_low, COUNT(u) AS n FROM t").collect(
        dp.PureDP(1), ci=0.9)),
    (dp.PrivacyUnit("u", max_rows=2), lambda s: s.sql("SELECT x AS n_ci_low, COUNT(*) AS n FROM t GROUP BY x",
                                                      keys={"x": [0.3, 0.7]}).collect(dp.PureDP(1), ci=0.9)),
])
def test_an_interval_column_never_takes_the_name_of_another_output(unit: dp.PrivacyUnit,
                                                                   run: Callable[[dp.Session], Any]) -> None:
    """``ci=`` adds ``<output>_ci_low`` / ``<output>_ci_high``; the output names were checked before those
    were added. A measure named ``n_ci_low`` beside ``n`` was silently overwritten by ``n``'s interval end
    (or the interval by the measure: the analyst could not tell which); one of another mechanism (a
    median) or a group key of that name made the release fail after its charge (RuntimeError); in SQL a
    key renamed ``n_ci_low`` was replaced by the interval, and the released rows lost their keys. Now every
    released name, intervals included, is checked when the query is planned: a PlanError naming ``ci``.
    """
    sess = _session(_units(2), unit)
    assert _outcome(sess, run) == ("PlanError", [])
    with pytest.raises(dp.PlanError, match="ci"):
        run(_session(_units(2), unit))


@pytest.mark.parametrize("budget", [dp.PureDP(1e-16), dp.ZCDP(1e-32)])
@pytest.mark.parametrize("grouped", [False, True])
def test_diagnostics_too_noisy_to_sample_are_refused_uncharged(budget: Any, grouped: bool) -> None:
    """``diagnostics=True`` spends ε/10, split among its counts, on noise of sensitivity up to
    ``max_rows``; the release's 9/10 was checked against the exact sampler's range when planned, the
    diagnostics' noise only when drawn. At ε = 10⁻¹⁶ (ρ = 10⁻³²) the release planned and the query was
    charged, then failed ("the query failed while running (BudgetError)"). With ``max_rows="auto"`` the
    sensitivity is the chosen ``max_rows``. Now the diagnostics' noises are calibrated at plan time at the
    largest sensitivity they may have: a BudgetError before anything is charged.
    """
    sess = _session(_units(2).with_columns(g=pl.lit("a")), dp.PrivacyUnit("u", max_rows=4),
                    dp.ZCDP(1, 1e-5) if budget.notion == "zcdp" else dp.ApproxDP(1, 1e-5))
    b = dp.ZCDP(budget.rho, 1e-9) if budget.notion == "zcdp" else dp.ApproxDP(budget.epsilon, 1e-9)
    frame = sess.table("t")

    def run(s: dp.Session) -> Any:
        q = frame.group_by("g").agg(dp.len()) if grouped else frame.agg(dp.len())
        return q.collect(b, diagnostics=True)
    assert _outcome(sess, run) == ("BudgetError", [])


@pytest.mark.parametrize("values", [[0.7] * 300, [0.2] * 300, [0.7] * 150 + [-0.7] * 150])
def test_auto_bounds_are_refused_on_measures_that_cannot_take_every_candidate(values: list[float]) -> None:
    """``bounds="auto"`` is built by ``dp.sum/mean/var/std``; ``dp.Measure(kind, column, None, (("bounds",
    "auto"), ...))`` gave it to any kind. A histogram's edges must lie inside its bounds: the build checked
    them against the stand-in (−1, 1), the release against the chosen bounds, after the charge — the query
    was released when the data straddled 0 and charged and failed (BoundsError) when it did not. On
    ``len`` it was a raw AssertionError. Now ``"auto"`` on any other kind is a PlanError naming ``bounds``,
    when the query is built.
    """
    data = pl.DataFrame({"u": range(len(values)), "x": values})
    sess = _session(data, dp.PrivacyUnit("u", max_rows=4))
    hist = dp.Measure("histogram", "x", None, (("bounds", "auto"), ("edges", (0, 0.5, 1))))
    for measure in (hist, dp.Measure("len", None, None, (("bounds", "auto"),))):
        assert _outcome(sess, lambda s, m=measure: s.table("t").agg(m).collect(dp.PureDP(5))) == ("PlanError", [])
        with pytest.raises(dp.PlanError, match="bounds"):
            sess.table("t").agg(measure)


@pytest.mark.parametrize("open_stream", [
    lambda s: s.sparse_vector(10, 1, dp.PureDP(1)),
    lambda s: s.target_charging(1, 1, 1e-7).__enter__(),
    lambda s: s.individual_filter(dp.ZCDP(1)),
])
def test_a_stream_that_can_answer_nothing_is_refused_before_it_is_charged(open_stream: Callable[[dp.Session], Any]
                                                                         ) -> None:
    """With ``max_rows="auto"`` (or ``max_groups="auto"``) only ``agg`` queries run (each tunes its bounds
    inside its own charge): a sparse vector, target-charging channel or individual filter refuses every
    query ("this query chooses its bounds when it runs"). They were opened anyway and their budget
    reserved — spent on a stream that could answer nothing. Now opening one is a PlanError naming
    ``privacy_unit``, uncharged. (Under ``max_rows=3, max_groups="auto"`` they open and run since review 37a: their
    queries have no group-by and read ``max_rows`` alone; ``test_review37a.py``.)
    """
    for unit in (dp.PrivacyUnit("u", max_rows="auto"),):
        sess = dp.Session({"t": _units(2)}, privacy_unit=unit, budget=dp.ApproxDP(100, 1e-5), accountant="rdp",
                          seed=0)
        assert _outcome(sess, open_stream) == ("PlanError", [])
        with pytest.raises(dp.PlanError, match="privacy_unit"):
            open_stream(sess)


@pytest.mark.parametrize("run", [
    lambda s, a: s.table("t").agg(dp.len()).collect(accuracy=a, diagnostics=True, ci=0.95),
    lambda s, a: s.sql("SELECT COUNT(*) AS len FROM t").collect(accuracy=a, diagnostics=True, ci=0.95),
])
def test_an_accuracy_target_is_not_missed_for_diagnostics(run: Callable[[dp.Session, dp.Accuracy], Any]) -> None:
    """``collect(accuracy=dp.Accuracy(half_width=50), diagnostics=True)`` charged the smallest budget whose
    noise gives ±50, then took diagnostics' 1/10 of it from the release: the released interval was ±56,
    not the ±50 the charge was chosen (and paid) for. Now the pair is a PlanError naming ``diagnostics``,
    uncharged.
    """
    sess = _session(pl.DataFrame({"u": range(300)}), dp.PrivacyUnit("u", max_rows=3), dp.PureDP(100))
    target = dp.Accuracy(half_width=50, confidence=0.95)
    assert _outcome(sess, lambda s: run(s, target)) == ("PlanError", [])
    with pytest.raises(dp.PlanError, match="diagnostics"):
        run(sess, target)
    out = sess.table("t").agg(dp.len()).collect(accuracy=target, ci=0.95)
    assert (out["len_ci_high"] - out["len"]).item() <= 50
