"""Review 49c: a new user's mistakes, and whether the error names the argument and a fix that works.

Each test is one mistake an analyst coming from OpenDP or Tumult makes on the first day: a fix that names an API
the session cannot take (an (ε, δ) budget in a pure-ε or zCDP session), bounds left out of ``dp.mean`` (a Python
``TypeError`` instead of the ``dp.BoundsError`` the guide promises), and the command line telling its user to write
Python. Each refusal is free: nothing is charged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

import dpframe as dp

DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "city": ["Oslo", "Rome"] * 200,
                     "x": [float(i % 13) for i in range(400)]})
GROUPED = "SELECT city, COUNT(*) AS n FROM t GROUP BY city"


def session(budget: dp.Budget) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=budget, seed=0)


@pytest.mark.parametrize(("total", "query", "works"), [
    (dp.PureDP(2), dp.PureDP(0.5), None),                             # no δ in the session: keys are the only fix
    (dp.ZCDP(1, 1e-6), dp.ZCDP(0.1), dp.ZCDP(0.1, 1e-7)),             # zCDP: the δ goes on a ZCDP budget
    (dp.ApproxDP(2, 1e-6), dp.PureDP(0.5), dp.ApproxDP(0.5, 1e-7)),   # (ε, δ): an ApproxDP budget
])
def test_sql_private_keys_fix_names_a_budget_the_session_takes(total: dp.Budget, query: dp.Budget,
                                                               works: dp.Budget | None) -> None:
    """SQL's refusal of private keys without δ gives the method chain's fix: one the session can take."""
    sess = session(total)
    with pytest.raises(dp.BudgetError) as sql:
        sess.sql(GROUPED).cost(query)
    with pytest.raises(dp.BudgetError) as chain:
        sess.table("t").group_by("city").agg(n=dp.len()).cost(query)
    assert sql.value.argument == chain.value.argument == "budget"
    fix = sql.value.fix or ""
    assert "keys" in fix
    if works is None:
        assert "delta" not in fix and "δ" not in fix, fix          # the session has no δ to give
        assert "session" in str(sql.value)
    else:
        suggested = "dp.ZCDP(rho, delta=" if isinstance(works, dp.ZCDP) else "dp.ApproxDP(epsilon, delta="
        assert suggested in fix, fix
        assert sess.sql(GROUPED).cost(works) == sess.table("t").group_by("city").agg(n=dp.len()).cost(works)
    assert sess.history().height == 0


AUTO = ("sum", "mean", "var", "std")


@pytest.mark.parametrize(("build", "takes_auto"), [
    (lambda: dp.sum("x"), True), (lambda: dp.mean("x"), True), (lambda: dp.var("x"), True),
    (lambda: dp.std("x", ddof=0), True), (lambda: dp.median("x"), False), (lambda: dp.quantile("x", 0.5), False),
    (lambda: dp.quantile("x", [0.1, 0.9], resolution=1), False),
], ids=["sum", "mean", "var", "std", "median", "quantile", "quantiles"])
def test_bounds_left_out_is_a_bounds_error_with_the_fix(build: Callable[[], Any], takes_auto: bool) -> None:
    """The guide's error table: missing clipping bounds are a ``dp.BoundsError`` naming ``bounds`` — not Python's
    ``TypeError: mean() missing 1 required positional argument``; its fix offers ``bounds="auto"`` where the
    measure takes it (sum, mean, var, std), and ``frame.bounds`` where it does not (quantiles)."""
    with pytest.raises(dp.BoundsError) as caught:
        build()
    e = caught.value
    assert e.argument == "bounds"
    assert isinstance(e, TypeError)            # as Python's missing-argument error was (test_core_measures_unit)
    assert "bounds=(lower, upper)" in (e.fix or "")
    assert ("bounds='auto'" in (e.fix or "")) == takes_auto, e


@pytest.mark.parametrize("kind", AUTO)
def test_auto_measures_offer_auto_bounds(kind: str) -> None:
    """``dp.sum``/``mean``/``var``/``std`` without bounds, or with a misspelt ``"Auto"``: the fix offers ``"auto"``."""
    measure: Callable[..., Any] = getattr(dp, kind)
    calls: list[tuple[Callable[[], Any], bool]] = [
        (lambda: measure("x"), True), (lambda: measure("x", None), True), (lambda: measure("x", bounds="Auto"), False)]
    for call, missing in calls:
        with pytest.raises(dp.BoundsError) as caught:
            call()
        assert caught.value.argument == "bounds"
        assert "bounds='auto'" in (caught.value.fix or ""), caught.value
        assert (f"{kind}('x') needs clipping bounds" in str(caught.value)) == missing, caught.value


@pytest.mark.parametrize("build", [lambda: dp.median("x"), lambda: dp.quantile("x", 0.5),
                                   lambda: dp.median("x", bounds="Auto")])  # type: ignore[arg-type]
def test_quantile_measures_do_not_offer_auto_bounds(build: Callable[[], Any]) -> None:
    """``bounds="auto"`` is refused for quantiles (docs/bounds.md): their fix points to ``frame.bounds`` instead."""
    with pytest.raises(dp.BoundsError) as caught:
        build()
    fix = caught.value.fix or ""
    assert "'auto'" not in fix and "frame.bounds" in fix, fix


def test_bounds_left_out_costs_nothing_and_the_fixed_call_runs() -> None:
    sess = session(dp.PureDP(2))
    with pytest.raises(dp.BoundsError):
        sess.table("t").agg(dp.mean("x")).collect(dp.PureDP(0.5))
    assert sess.history().height == 0
    assert sess.table("t").agg(dp.mean("x", bounds=(0, 12))).cost(dp.PureDP(0.5)) == dp.PureDP(0.5)


def test_sql_bounds_fix_for_an_expression_does_not_offer_declared_bounds() -> None:
    """Declared bounds follow a column, not an expression (docs/sql.md): ``SUM(x * 2)`` is refused even with
    ``bounds={'t.x': ...}`` declared, so its fix must not offer declaring them; it says to write ``CLAMP``."""
    declared = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(2),
                          bounds={"t.x": (0, 12)}, seed=0)
    plain = session(dp.PureDP(2))
    for sess in (declared, plain):
        with pytest.raises(dp.BoundsError) as caught:
            sess.sql("SELECT SUM(x * 2) AS s FROM t").cost(dp.PureDP(0.5))
        fix = caught.value.fix or ""
        assert "CLAMP(x * 2, lower, upper)" in fix and "declare" not in fix and "dp.Session" not in fix, fix
        assert sess.history().height == 0
    with pytest.raises(dp.BoundsError) as caught:              # a plain column: declaring its bounds works
        plain.sql("SELECT SUM(x) AS s FROM t").cost(dp.PureDP(0.5))
    assert "dp.Session(..., bounds={'t.x': (lower, upper)})" in (caught.value.fix or "")
    assert declared.sql("SELECT SUM(x) AS s FROM t").cost(dp.PureDP(0.5)) == dp.PureDP(0.5)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from dpframe.cli import main

    try:
        code = main(list(args))
    except SystemExit as e:                  # argparse's one-line usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_takes_max_rows_and_max_groups_auto(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/bounds.md: SQL queries take ``max_rows="auto"`` from the session's privacy unit; the command line,
    which runs SQL, could not say it (``--max-rows auto``: "invalid int value")."""
    path = str(tmp_path / "t.parquet")
    DATA.write_parquet(path)
    sql = "SELECT city, COUNT(*) AS n FROM t GROUP BY city"
    table = ["--table", f"t={path}", "--privacy-unit", "u"]
    code, out, err = cli(capsys, "explain", sql, *table, "--max-rows", "auto", "--epsilon", "1", "--delta", "1e-7")
    assert code == 0, err
    assert "max_rows chosen privately" in out
    ledger = ["--ledger", str(tmp_path / "b.ledger")]
    code, out, err = cli(capsys, "query", sql, *table, "--max-rows", "auto", "--epsilon", "1", "--delta", "1e-7",
                         "--total-epsilon", "2", "--total-delta", "1e-6", "--keys", "t.city=Oslo,Rome", "--seed", "0",
                         *ledger)
    assert code == 0, err
    assert "Oslo" in out and "Rome" in out
    code, out, err = cli(capsys, "budget", *ledger)
    assert code == 0 and "max_rows='auto'" in out and "spent       ε=1, δ=0" in out, out      # public keys: no δ used
    code, out, err = cli(capsys, "explain", sql, *table, "--max-rows", "2", "--max-groups", "auto", "--epsilon", "1",
                         "--delta", "1e-7")
    assert code == 0 and "max_groups chosen privately" in out, (out, err)
    for bad in ("ten", "0", "1.5"):
        code, out, err = cli(capsys, "explain", sql, *table, "--max-rows", bad, "--epsilon", "1", "--delta", "1e-7")
        assert code == 2 and out == "" and "max" in err and "auto" in err, err
        assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("sql", "extra", "flag"), [
    ("SELECT SUM(x) AS s FROM t", ["--epsilon", "1"], "--bounds t.x=LOWER:UPPER"),
    ("SELECT MEDIAN(x) AS m FROM t", ["--epsilon", "1"], "--bounds t.x=LOWER:UPPER"),
    (GROUPED, ["--epsilon", "1", "--total-epsilon", "2", "--total-delta", "1e-6"], "--keys TABLE.COLUMN=V1,V2,..."),
    (GROUPED, ["--epsilon", "1", "--total-epsilon", "2", "--total-delta", "1e-6"], "--delta 1e-7"),
    (GROUPED, ["--rho", "0.1", "--total-rho", "1", "--total-delta", "1e-6", "--delta", "0"], "--delta 1e-7"),
    (GROUPED, ["--epsilon", "1"], "--keys TABLE.COLUMN=V1,V2,..."),
    (GROUPED, ["--epsilon", "1"], "--delta D"),          # a one-shot session's total is the query's budget
    ("SELECT city FROM t GROUP BY city HAVING TOP_K(COUNT(*), 1)", ["--max-rows", "auto", "--epsilon", "1",
                                                                    "--delta", "1e-7"], "--max-rows N"),
    ("SELECT COUNT(*) AS n FROM t", ["--rho", "0.1", "--total-epsilon", "1"], "--epsilon E"),
    ("SELECT COUNT(*) AS n FROM t", ["--epsilon", "0.1", "--delta", "1e-7", "--total-rho", "1",
                                     "--total-delta", "1e-6"], "--rho R"),
])
def test_cli_errors_give_the_fix_in_command_line_terms(tmp_path: Any, capsys: pytest.CaptureFixture[str], sql: str,
                                                        extra: list[str], flag: str) -> None:
    """The command line's one-line errors tell its user which flag to pass, not which Python to write
    (``dp.Session(..., bounds=...)``, ``dp.ApproxDP(epsilon, delta=1e-7)``, ``dp.PrivacyUnit(...)``)."""
    path = str(tmp_path / "t.parquet")
    DATA.write_parquet(path)
    args = ["--table", f"t={path}", "--privacy-unit", "u", *(["--max-rows", "2"] if "--max-rows" not in extra else []),
            *extra]
    for command in ("query", "explain"):
        code, out, err = cli(capsys, command, sql, *args)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
        assert flag in err, err
        assert "dp." not in err and "sess.sql" not in err, err


def test_cli_explain_notes_give_the_fix_in_command_line_terms(tmp_path: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``dpframe explain``'s notes (no ``--max-rows``, no ``--keys``) name the flags, as its errors do."""
    path = str(tmp_path / "t.parquet")
    DATA.write_parquet(path)
    code, out, err = cli(capsys, "explain", GROUPED, "--table", f"t={path}", "--privacy-unit", "u", "--epsilon", "1",
                         "--delta", "1e-7")
    assert code == 0, err
    assert "max_rows was not given" in out and "pass --max-rows N with N the most rows" in out, out
    assert "no public keys declared" in out and "declare them with --keys TABLE.COLUMN=V1,V2,..." in out, out
    assert "dp." not in out and "sess.sql" not in out


@pytest.mark.parametrize(("unit", "measure", "shown", "not_shown"), [
    (dp.PrivacyUnit("u", max_rows="auto"), dp.mean("x", bounds=(0, 12)), ["max_rows=1"], ["bounds (−1, 1)"]),
    (dp.PrivacyUnit("u", max_rows=2), dp.mean("x", bounds="auto"), ["bounds (−1, 1)"], ["max_rows=1"]),
    (dp.PrivacyUnit("u", max_rows="auto"), dp.mean("x", bounds="auto"), ["max_rows=1", "bounds (−1, 1)"], []),
    (dp.PrivacyUnit("u", max_rows=2, max_groups="auto"), dp.mean("x", bounds=(0, 12)), ["max_groups=1"],
     ["max_rows=1", "bounds (−1, 1)"]),
])
def test_explain_of_a_tuned_query_names_only_its_stand_ins(unit: dp.PrivacyUnit, measure: Any, shown: list[str],
                                                           not_shown: list[str]) -> None:
    """``explain()`` of a query that tunes its bounds shows the release at stand-in values: it names those the query
    chooses (and only those: a fixed ``bounds=(0, 12)`` is shown as itself, not as ``(−1, 1)``), and says that
    the partition-selection threshold τ, like the ±, is at the stand-ins."""
    sess = dp.Session({"t": DATA}, privacy_unit=unit, budget=dp.ApproxDP(2, 1e-6), seed=0)
    text = str(sess.table("t").group_by("city").agg(measure).explain(dp.ApproxDP(1, 1e-7)))
    line = next(x for x in text.splitlines() if x.startswith("release: shown below at"))
    assert all(s in line for s in shown) and not any(s in line for s in not_shown), line
    assert "τ" in line, line
