"""Issue 19 item 3: explain() returns an Explanation; sessions, frames and queries render in notebooks."""

from __future__ import annotations

import json

import polars as pl
import pytest

import dpframe as dp
from dpframe.display import Explanation

DATA = pl.DataFrame({"user": [1, 1, 2, 3, 4], "city": ["a", "b", "a", "a", "<b>"], "x": [1.0, 2.0, 3.0, 4.0, 5.0]})


@pytest.fixture
def sess() -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=dp.PureDP(2), seed=0)


def test_explain_returns_an_explanation_whose_str_is_the_text(sess: dp.Session) -> None:
    q = sess.table("t").filter(pl.col("x") > 0).agg(dp.len(), dp.mean("x", bounds=(0, 10)))
    e = q.explain(dp.PureDP(0.5))
    assert isinstance(e, Explanation) and isinstance(e, str)
    text = str(e)
    assert type(text) is str and repr(e) == text          # the REPL and a notebook's text view show the text
    assert text.splitlines()[0].startswith("dpframe query plan") and "budget: requested ε=1/2" in text
    assert e.to_dict() == q.explain(dp.PureDP(0.5), format="json")
    json.dumps(e.to_dict())                               # JSON-able
    html, md = e._repr_html_(), e._repr_markdown_()
    assert "<ol>" in html and "Filter" in html and "remaining after" in html and "NOT PRIVATE" in html
    assert md.startswith("**dpframe query plan**") and "| cost | ε=1/2 |" in md


def test_every_family_and_sql_explain_the_same_way(sess: dp.Session) -> None:
    approx = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=dp.ApproxDP(2, 1e-6))
    top = approx.table("t").group_by("city").top_k(k=1)
    sql = sess.sql("SELECT COUNT(*) AS n FROM t")
    for e in (top.explain(dp.ApproxDP(1, 1e-7)), sess.table("t").bounds("x", domain=(0, 16)).explain(dp.PureDP(0.5)),
              sql.explain(dp.PureDP(0.5)), approx.sql("SELECT city FROM t GROUP BY city ORDER BY COUNT(*) DESC "
                                                      "LIMIT 1").explain(dp.ApproxDP(1, 1e-7))):
        assert isinstance(e, Explanation) and "budget: requested" in e and "<table" in e._repr_html_()
    e = sql.explain(dp.PureDP(0.5))
    assert e.splitlines()[-2].startswith("sql: SELECT COUNT(*)") and e.to_dict()["sql"].startswith("SELECT")
    assert e.to_dict() == sql.explain(dp.PureDP(0.5), format="json")
    assert top.explain(dp.ApproxDP(1, 1e-7)).to_dict()["budget"]["fits"] is True


def test_the_explanation_carries_the_error_sources(sess: dp.Session) -> None:
    approx = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=dp.ApproxDP(2, 1e-6))
    e = approx.table("t").group_by("city").agg(dp.sum("x", bounds=(0, 10))).explain(dp.ApproxDP(1, 1e-7))
    notes = [n for n in e.to_dict()["notes"] if n.startswith("error: ")]
    assert [n.split(" — ")[0] for n in notes] == ["error: noise", "error: contribution bounding", "error: clipping",
                                                  "error: partition selection"]
    assert all(n in e and n.split(" — ")[1][:40] in e._repr_html_() for n in notes)


def test_a_query_that_does_not_fit_says_so_everywhere(sess: dp.Session) -> None:
    e = sess.table("t").agg(dp.len()).explain(dp.PureDP(5))
    assert "DOES NOT FIT the remaining ε=2" in e and "collect() would be refused" in e._repr_html_()
    assert e.to_dict()["budget"]["fits"] is False


def test_the_session_repr_shows_the_budget_bar_and_the_history(sess: dp.Session) -> None:
    html = sess._repr_html_()
    assert "spent ε=0 of ε=2 · remaining ε=2" in html and "width: 0.0%" in html and "no charges yet" in html
    sess.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    sess.table("t").group_by("city", keys=["a", "<b>"]).agg(dp.len()).collect(dp.PureDP(1))
    html = sess._repr_html_()
    assert "spent ε=3/2 of ε=2 · remaining ε=1/2" in html and "width: 75.0%" in html
    assert html.count("<tr>") == 3 and "committed" in html and "NOT PRIVATE" in html
    assert "&lt;b&gt;" not in html or "<b>" not in html.replace("<b>dp.Session</b>", "")   # keys are escaped
    assert "unit &#x27;user&#x27;" in html and "t (3 columns)" in html


def test_frames_group_bys_and_queries_have_html_reprs(sess: dp.Session) -> None:
    frame = sess.table("t").filter(pl.col("x") > 1)
    assert "Filter" in frame._repr_html_() and "no rows" in frame._repr_html_()
    assert "private keys" in frame.group_by("city")._repr_html_()
    q = frame.agg(dp.len())
    assert "explain(budget)" in q._repr_html_() and "agg(len())" in q._repr_html_()
    assert "top_k" in frame.group_by("city").top_k(k=1)._repr_html_()


def test_nothing_in_a_repr_reads_private_data(sess: dp.Session) -> None:
    before = sess.spent()
    for obj in (sess, sess.table("t"), sess.table("t").agg(dp.len())):
        obj._repr_html_()
    assert sess.spent() == before and "5.0" not in sess._repr_html_()


def test_a_budget_is_named_when_missing(sess: dp.Session) -> None:
    q = sess.table("t").agg(dp.len())
    sql = sess.sql("SELECT COUNT(*) AS n FROM t")
    for call in (q.collect, q.explain, q.cost, q.plan, sql.collect, lambda: q.collect(ci=0.9),
                 lambda: sql.collect(ci=0.9)):
        with pytest.raises(dp.BudgetError, match=r"needs this query's privacy budget") as err:
            call()
        assert "dp.PureDP(0.5)" in str(err.value)
    assert sess.history().height == 0
