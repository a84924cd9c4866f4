"""Review 50b: what a demanding analyst is told, in the language they wrote the query in.

A SQL ``TOP_K`` refusal's fix is spelled in SQL (``method := 'gumbel'``, ``TOP_K(score, 10)``), never in the method
chain's keywords the analyst did not write. Every refusal is free: nothing is charged.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import pytest

import dpframe as dp

CITIES = ["a", "b", "c"]
DATA = pl.DataFrame({"user": list(range(300)), "city": CITIES * 100, "spend": [1, 2, 3] * 100, "name": ["x"] * 300})
APPROX = dp.ApproxDP(2, 1e-6)
PUBLIC = {"public_keys": {"v.city": CITIES}}

PYTHON = re.compile(r"\b(k|method|ptr|k_max|lam|delta_t|release_scores|score)=|group_by\(|\.top_k\(|dp\.count_units"
                    r"|\bNone\b")
"""The method chain's spelling of a top-k argument (``method='gumbel'``, ``k=None``, ``group_by(..., keys=...)``)."""


def _session(total: dp.Budget = dp.ApproxDP(100, 1e-3), **options: Any) -> dp.Session:
    return dp.Session({"v": DATA}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=total, seed=0, **options)


# (the HAVING clause, session options, the query's budget, what the fix must say in SQL)
TOP_K_REFUSALS = [
    ("TOP_K(COUNT(*), 0)", {}, APPROX, "TOP_K(score, 10), or TOP_K(score, NULL)"),
    ("TOP_K(COUNT(*), 100000000000)", {}, APPROX, "TOP_K(score, NULL)"),
    ("TOP_K(COUNT(*), 2, method := 'best')", {}, APPROX, "method := 'stable'"),
    ("TOP_K(COUNT(*), 2, ptr := 'cauchy')", {}, APPROX, "ptr := 'gaussian'"),
    ("TOP_K(COUNT(*), NULL, method := 'gumbel')", {}, APPROX, "method := 'stable'"),
    ("TOP_K(AVG(CLAMP(spend, 0, 5)), 2)", {}, APPROX, "COUNT(DISTINCT"),
    ("TOP_K(SUM(CLAMP(name, 0, 5)), 2)", {}, APPROX, "SUM(CLAMP(x, "),
    ("TOP_K(COUNT(*), 5)", PUBLIC, APPROX, "TOP_K(score, 3)"),
    ("TOP_K(COUNT(*), 2, method := 'gumbel')", {}, APPROX, "sess.sql(..., keys={...}), or use method := 'stable'"),
    ("TOP_K(COUNT(*), 3, k_max := 2)", {}, APPROX, "k_max := "),
    ("TOP_K(COUNT(*), NULL, delta_t := 2)", {}, APPROX, "delta_t := 1e-9"),
    ("TOP_K(COUNT(*), NULL, delta_t := 0.1)", {}, APPROX, "delta_t := "),
    ("TOP_K(COUNT(*), NULL, lam := -1)", {}, APPROX, "lam := "),
    ("TOP_K(COUNT(*), NULL, lam := 1e300)", {}, APPROX, "lam := "),
    ("TOP_K(COUNT(*), NULL, lam := 1e999)", {}, APPROX, "lam := "),           # was a raw ValueError (inf)
    ("TOP_K(COUNT(*), NULL)", {}, dp.PureDP(1), "method := 'gumbel'"),
    ("TOP_K(COUNT(*), NULL)", {"total": dp.PureDP(100)}, dp.PureDP(1), "method := 'gumbel'"),
    ("TOP_K(COUNT(*), 2, method := 'limited_domain')", {"total": dp.ZCDP(100, 1e-3)}, dp.ZCDP(1, 1e-6),
     "method := 'stable'"),
    ("TOP_K(COUNT(*), 2)", {}, dp.ApproxDP(1e-300, 1e-300), "larger budget"),
    ("TOP_K(SUM(CLAMP(spend, 5, 0)), 2)", {}, APPROX, "CLAMP(x, lower, upper)"),     # was bounds=(lower, upper)
    ("TOP_K(SUM(CLAMP(spend, 0, 1e400)), 2)", {}, APPROX, "CLAMP(x, lower, upper)"),
]


@pytest.mark.parametrize(("having", "options", "budget", "spelled"), TOP_K_REFUSALS)
def test_sql_top_k_refusals_speak_sql(having: str, options: dict[str, Any], budget: dp.Budget, spelled: str) -> None:
    """Each TOP_K refusal a SQL query can meet gives its one fix in SQL, names the argument, and charges nothing."""
    sess = _session(**options)
    text = f"SELECT city FROM v GROUP BY city HAVING {having}"
    with pytest.raises(dp.DPFrameError) as refused:
        sess.sql(text).explain(budget)
    with pytest.raises(dp.DPFrameError) as again:
        sess.sql(text).collect(budget)
    for e in (refused.value, again.value):
        assert e.argument and e.fix, e
        assert spelled in e.fix, e
        assert not PYTHON.search(e.fix) and "bounds=" not in e.fix, e
        assert not PYTHON.search(e.message.replace("k=", "")), e
    assert sess.spent() == _session(**options).spent()
    assert sess.history().height == 0


@pytest.mark.parametrize(("call", "options", "budget", "spelled"), [
    (lambda g: g.top_k(k=None, method="gumbel"), {}, APPROX, "method='stable'"),
    (lambda g: g.top_k(k=2, method="gumbel"), {}, APPROX, "group_by(..., keys=[...])"),
    (lambda g: g.top_k(k=None, lam=-1), {}, APPROX, "lam="),
    (lambda g: g.top_k(k=None), {}, dp.PureDP(1), "method='gumbel'"),
])
def test_the_method_chain_keeps_its_own_spelling(call: Any, options: dict[str, Any], budget: dp.Budget,
                                                 spelled: str) -> None:
    """The same refusals from ``group_by(...).top_k(...)`` still speak Python: one check, two spellings."""
    sess = _session(**options)
    with pytest.raises(dp.DPFrameError) as refused:
        call(sess.table("v").group_by("city")).explain(budget)
    assert refused.value.fix is not None and spelled in refused.value.fix and ":=" not in refused.value.fix


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from dpframe.cli import main

    try:
        code = main(list(args))
    except SystemExit as e:     # argparse's refusal of a flag's value (one line, exit status 2)
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def table(tmp_path: Any) -> list[str]:
    path = tmp_path / "v.parquet"
    DATA.write_parquet(path)
    return ["--table", f"v={path}", "--privacy-unit", "user", "--max-rows", "2"]


def test_cli_top_k_refusal_and_note_speak_flags_and_sql(table: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """On the command line a TOP_K fix names flags (--keys) and TOP_K's arguments, never Python keywords."""
    gumbel = "SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, method := 'gumbel')"
    code, _, err = _cli(capsys, "query", gumbel, *table, "--epsilon", "1", "--delta", "1e-7")
    assert code == 2 and "--keys TABLE.COLUMN=" in err and "method := 'stable'" in err and not PYTHON.search(err)
    # a failed selection's note (ε = 0.01: the stability test cannot pass) names --keys too, not sess.sql(...)
    code, _, err = _cli(capsys, "query", "SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 3)", *table,
                        "--epsilon", "0.01", "--delta", "1e-7", "--seed", "1")
    assert code == 0 and "dpframe: note: TOP_K released" in err
    assert "--keys TABLE.COLUMN=" in err and "sess.sql(" not in err and not PYTHON.search(err)


# -- 2. dpframe query --ci / --diagnostics ---------------------------------------------------------------------

GROUPED = "SELECT city, COUNT(*) AS n FROM v GROUP BY city"


def _ledger_queries(capsys: pytest.CaptureFixture[str], ledger: str) -> int:
    code, out, _ = _cli(capsys, "budget", "--ledger", ledger, "--format", "json")
    assert code == 0
    return int(__import__("json").loads(out)["queries"])


def test_cli_ci_releases_intervals(table: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--ci 0.9`` is ``collect(budget, ci=0.9)``: interval columns beside each measure, no extra cost."""
    args = [*table, "--keys", "v.city=a,b,c", "--epsilon", "1", "--seed", "3", "--format", "csv"]
    code, out, err = _cli(capsys, "query", GROUPED, *args, "--ci", "0.9")
    assert code == 0, err
    assert out.splitlines()[0] == "city,n,n_ci_low,n_ci_high" and len(out.splitlines()) == 4
    frame = pl.read_csv(out.encode())
    assert (frame["n_ci_low"] <= frame["n"]).all() and (frame["n"] <= frame["n_ci_high"]).all()
    assert "spent ε=1 of ε=1" in err        # intervals are post-processing: the same cost as without --ci


@pytest.mark.parametrize("value", ["95", "0", "1", "nan", "-0.5", "abc"])
def test_cli_bad_ci_names_the_flag_and_charges_nothing(table: list[str], capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Any, value: str) -> None:
    ledger = str(tmp_path / "b.ledger")
    args = [*table, "--keys", "v.city=a,b,c", "--epsilon", "1", "--ledger", ledger, "--total-epsilon", "3"]
    assert _cli(capsys, "query", GROUPED, *args)[0] == 0      # the ledger exists, one query recorded
    code, out, err = _cli(capsys, "query", GROUPED, *args, "--ci", value)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--ci" in err and "ci=" not in err and "Fix: give e.g. --ci 0.95" in err, err
    assert _ledger_queries(capsys, ledger) == 1


def test_cli_ci_fixes_are_flags(table: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A ci refusal found at collect (an interval column taking a selected name; TOP_K has no intervals) names --ci."""
    base = [*table, "--keys", "v.city=a,b,c", "--epsilon", "1", "--delta", "1e-7", "--ci", "0.9"]
    for sql in ("SELECT city AS n_ci_low, COUNT(*) AS n FROM v GROUP BY city",
                "SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, method := 'gumbel')"):
        code, out, err = _cli(capsys, "query", sql, *base)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith("dpframe: error: --ci: ") and "leave --ci out" in err and "ci=" not in err, err


def test_cli_diagnostics(table: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--diagnostics`` is ``collect(budget, diagnostics=True)``: the frame, then its diagnostics (on stderr for
    csv and json)."""
    sql = "SELECT city, SUM(CLAMP(spend, 0, 2)) AS s FROM v GROUP BY city"
    args = [*table, "--keys", "v.city=a,b,c", "--epsilon", "1", "--seed", "3"]
    code, out, err = _cli(capsys, "query", sql, *args, "--diagnostics")
    assert code == 0, err
    assert "diagnostics (1/10 of this query's budget)" in out and "clipped" in out and "spent ε=1 of ε=1" in out
    code, out, err = _cli(capsys, "query", sql, *args, "--diagnostics", "--format", "json")
    assert code == 0, err
    rows = __import__("json").loads(out)      # stdout stays one JSON document: the released rows
    assert sorted(r["city"] for r in rows) == CITIES
    assert "dpframe: diagnostics (1/10 of this query's budget)" in err and '"diagnostic"' in err


def test_cli_diagnostics_refusals_name_the_flag(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "v.parquet"
    DATA.write_parquet(path)
    rows = ["--table", f"v={path}", "--row-privacy", "--keys", "v.city=a,b,c", "--epsilon", "1", "--delta", "1e-7"]
    for sql in (GROUPED,     # row privacy, public keys, a count: nothing to diagnose
                "SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, method := 'gumbel')"):
        code, out, err = _cli(capsys, "query", sql, *rows, "--diagnostics")
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith("dpframe: error: --diagnostics: ") and "--diagnostics" in err.split("Fix:")[1], err
        assert "diagnostics=" not in err, err


# -- 3. a budget number given as text ---------------------------------------------------------------------------------

untyped: Any = dp      # budgets built from what a type checker would refuse (text)


@pytest.mark.parametrize(("build", "argument", "number"), [
    (lambda: untyped.PureDP("0.5"), "epsilon", "epsilon=0.5"),
    (lambda: untyped.PureDP("1/3"), "epsilon", "epsilon=Fraction(1, 3)"),
    (lambda: untyped.PureDP(" 2 "), "epsilon", "epsilon=2"),
    (lambda: untyped.ApproxDP("1", 1e-6), "epsilon", "epsilon=1"),
    (lambda: untyped.ApproxDP(1, "1e-6"), "delta", "delta=1e-06"),
    (lambda: untyped.ZCDP("0.5"), "rho", "rho=0.5"),
    (lambda: untyped.ZCDP(0.5, "1e-9"), "delta", "delta=1e-09"),
    (lambda: untyped.ZCDP(0.5).to_approx("1e-6"), "delta", "delta=1e-06"),
    (lambda: untyped.PureDP(__import__("numpy").str_("0.5")), "epsilon", "epsilon=0.5"),
    (lambda: untyped.PureDP("abc"), "epsilon", "a number such as 0.5"),
    (lambda: untyped.PureDP("inf"), "epsilon", "a number such as 0.5"),
])
def test_a_budget_number_given_as_text_is_refused(build: Any, argument: str, number: str) -> None:
    """``dp.PureDP("0.5")`` was read as 1/2 while ``bounds=("0", "500")`` is refused: text is a bug (a CSV cell, an
    environment variable), refused with the number to write instead, as the bounds are."""
    with pytest.raises(dp.BudgetError) as refused:
        build()
    e = refused.value
    assert e.argument == argument and "text" in e.message and e.fix is not None and number in e.fix, e
    assert "float(" in e.fix, e


def test_numbers_and_the_remote_wire_still_build_budgets() -> None:
    """Numbers (int, float, Fraction, numpy) still build budgets; the remote wire's exact fractions (JSON text) are
    read by the server into Fractions first, so a remote session's budgets are unchanged."""
    from fractions import Fraction

    import numpy as np

    from dpframe.remote.wire import budget_from_json, budget_to_json

    assert dp.PureDP(Fraction(1, 3)).epsilon == Fraction(1, 3) and dp.PureDP(np.float64(0.5)) == dp.PureDP(0.5)
    assert untyped.ApproxDP(np.int64(1), 1e-6) == dp.ApproxDP(1, 1e-6)
    for budget in (dp.PureDP(0.5), dp.ApproxDP(1, 1e-6), dp.ZCDP(0.25, 1e-9)):
        wire = budget_to_json(budget)
        assert all(isinstance(v, str) for v in wire.values()) and budget_from_json(wire) == budget


# -- 4. ci= and measures without intervals (quantiles) ----------------------------------------------------------------

def _warned(run: Any) -> tuple[Any, list[Any]]:
    """``run()``'s result and the dp.NoIntervalWarnings it gave, each warned at the caller's line (this file)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run()
    found = [w for w in caught if issubclass(w.category, dp.NoIntervalWarning)]
    assert all(w.filename == __file__ for w in found), [w.filename for w in found]   # not the engine's, the server's
    return out, [w.message for w in found]


def test_ci_names_the_quantiles_it_gives_no_interval() -> None:
    """``collect(ci=...)`` on a query with a median beside a count warns, naming the median and why; explain() says
    it in advance (a plan note; explain takes no ci). The warning reads the plan only (public parameters)."""
    sess = _session()
    q = sess.table("v").group_by("city", keys=CITIES).agg(dp.len(), dp.median("spend", bounds=(0, 10)))
    note = [n for n in q.explain(dp.PureDP(1)).notes if "no interval columns" in n]
    assert len(note) == 1 and "'spend_median'" in note[0] and "rank error" in note[0], note
    out, caught = _warned(lambda: q.collect(dp.PureDP(1), ci=0.9))
    assert "len_ci_low" in out.columns and not any(c.startswith("spend_median_ci") for c in out.columns)
    assert len(caught) == 1 and caught[0].outputs == ("spend_median",), caught
    assert "'spend_median'" in str(caught[0]) and "rank error" in str(caught[0]) and "len" not in caught[0].outputs
    _, none = _warned(lambda: sess.table("v").group_by("city", keys=CITIES).agg(dp.len()).collect(dp.PureDP(1), ci=0.9))
    assert none == []
    assert not [n for n in sess.table("v").agg(dp.len()).explain(dp.PureDP(1)).notes if "no interval columns" in n]


def test_a_strict_caller_is_refused_before_the_charge() -> None:
    import warnings

    sess = _session()
    q = sess.table("v").group_by("city", keys=CITIES).agg(dp.len(), dp.median("spend", bounds=(0, 10)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dp.NoIntervalWarning)
        with pytest.raises(dp.NoIntervalWarning):
            q.collect(dp.PureDP(1), ci=0.9)
    assert sess.history().height == 0


@pytest.mark.parametrize("query", [
    lambda s: s.table("v").group_by("city", keys=CITIES).agg(dp.median("spend", bounds=(0, 10))),
    lambda s: s.table("v").agg(dp.quantile("spend", [0.25, 0.75], bounds=(0, 10))),
    lambda s: s.sql("SELECT city, MEDIAN(CLAMP(spend, 0, 10)) AS m FROM v GROUP BY city", keys={"city": CITIES}),
])
def test_ci_on_a_query_with_no_interval_at_all_is_refused_free(query: Any) -> None:
    """ci= where no measure of the query has an interval would do nothing: refused, free, fix: leave ci= out."""
    sess = _session()
    with pytest.raises(dp.PlanError) as refused:
        query(sess).collect(dp.PureDP(1), ci=0.9)
    e = refused.value
    assert e.argument == "ci" and e.fix == "leave ci= out" and "rank error" in str(e)
    assert sess.history().height == 0
    query(sess).collect(dp.PureDP(1))            # without ci= it runs


def test_sql_ci_warning_names_the_selected_column() -> None:
    sess = _session()
    q = sess.sql("SELECT city, COUNT(*) AS n, MEDIAN(CLAMP(spend, 0, 10)) AS med FROM v GROUP BY city",
                 keys={"city": CITIES})
    assert any("no interval columns" in n for n in q.explain(dp.PureDP(1)).notes)
    out, caught = _warned(lambda: q.collect(dp.PureDP(1), ci=0.9))
    assert {"n_ci_low", "n_ci_high"} <= set(out.columns) and "med_ci_low" not in out.columns
    assert len(caught) == 1 and caught[0].outputs == ("med",), caught


def test_remote_collect_forwards_the_warning() -> None:
    import secrets

    key = secrets.token_bytes(32)
    sess = _session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        chain = remote.table("v").group_by("city", keys=CITIES).agg(dp.len(), dp.median("spend", bounds=(0, 10)))
        out, caught = _warned(lambda: chain.collect(dp.PureDP(1), ci=0.9))
        assert "len_ci_low" in out.columns and len(caught) == 1 and caught[0].outputs == ("spend_median",)
        sql = remote.sql("SELECT city, COUNT(*) AS n, MEDIAN(CLAMP(spend, 0, 10)) AS med FROM v GROUP BY city",
                         keys={"city": CITIES})
        out, caught = _warned(lambda: sql.collect(dp.PureDP(1), ci=0.9))
        assert "n_ci_low" in out.columns and len(caught) == 1 and caught[0].outputs == ("med",)


def test_cli_ci_note_and_explain_name_the_flag(table: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT city, COUNT(*) AS n, MEDIAN(CLAMP(spend, 0, 10)) AS med FROM v GROUP BY city"
    args = [*table, "--keys", "v.city=a,b,c", "--epsilon", "1"]
    code, out, err = _cli(capsys, "query", sql, *args, "--ci", "0.9")
    assert code == 0 and "n_ci_low" in out and "dpframe: note: --ci adds no interval columns for 'med'" in err, err
    assert len(err.strip().splitlines()) == 1, err
    code, out, _ = _cli(capsys, "explain", sql, *args)
    assert code == 0 and "--ci adds no interval columns" in out and "ci=" not in out, out


def test_sql_top_k_ci_and_diagnostics_refused_alike_in_process_and_remote() -> None:
    """A SQL TOP_K refuses ci= and diagnostics= (it has neither), free, with the same error through a server."""
    import secrets

    text = "SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), NULL)"
    key = secrets.token_bytes(32)
    sess = _session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        for options in ({"ci": 0.9}, {"diagnostics": True}):
            errors = []
            for q in (sess.sql(text), remote.sql(text)):
                with pytest.raises(dp.PlanError) as refused:
                    q.collect(APPROX, **options)
                errors.append((type(refused.value), refused.value.argument, refused.value.fix))
            assert errors[0] == errors[1] and errors[0][1] == next(iter(options)), errors
    assert sess.history().height == 0
