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
        assert not PYTHON.search(e.fix), e
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

    code = main(list(args))
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
