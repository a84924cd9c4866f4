"""Review 55e: the remote server and client, the CLI and the notebook displays, attacked by a client (an analyst who
picks every request, argument, order and thread) and by what an analyst names (columns, aliases, plugins).

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import polars as pl
import pytest

import dpframe as dp

KEY = secrets.token_bytes(32)
EVIL = "<img src=x onerror=alert(1)>"
FENCE = "```\n<script>alert(2)</script>\n```"


def _session(total: float = 10) -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"g": ["a", "b"] * 20, EVIL: [float(i % 3) for i in range(40)]})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(total), seed=0)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Server]]:
    sess = _session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        yield sess, server


# -- 1. the notebook displays: what an analyst names must not become markup ------------------------------------------


def _raw_html(markdown: str) -> list[str]:
    """The raw HTML tags a CommonMark renderer would pass through from ``markdown``: tags outside code spans and
    fenced blocks, not escaped by a backslash (a fence closes at a line of at least as many backticks as opened it)."""
    found, fence = [], ""
    for line in markdown.split("\n"):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence) and set(stripped) == {"`"}:
                fence = ""
            continue
        opened = re.match(r"`{3,}", stripped)
        if opened:
            fence = opened.group(0)
            continue
        spans = re.sub(r"(`+)(.+?)\1", "", line)           # code spans (the same run of backticks on both sides)
        found += re.findall(r"(?<!\\)<[a-zA-Z/][^>]*>", spans)
    return found


def test_explain_markdown_escapes_column_names_aliases_and_notes() -> None:
    """Found: ``Explanation._repr_markdown_`` wrote plan steps in single backticks, measures in a ``` fence and notes
    as plain Markdown, all unescaped: an alias holding ```` ``` ```` closed the fence, and a column name holding
    ``<img src=x onerror=...>`` reached the notes as raw HTML, which a notebook's Markdown view (or a report
    converted with nbconvert) renders: a script in the colleague's browser who opens the analyst's notebook. The
    Markdown now keeps every name inside a code span or fence longer than any run of backticks it holds, and escapes
    the Markdown punctuation of plain text."""
    sess = _session()
    query = sess.table("t").filter(pl.col(EVIL) >= 0).group_by("g", keys=["a", "b"]).agg(
        dp.sum(pl.col(EVIL), bounds=(0, 2)).alias(FENCE), dp.len().alias("`" + EVIL + "`"))
    shown = query.explain(dp.PureDP(1))
    markdown = shown._repr_markdown_()
    assert EVIL in str(shown)                       # the names are in the plan ...
    assert _raw_html(markdown) == [], markdown      # ... and none is markup
    assert "<script" not in shown._repr_html_() and "<img" not in shown._repr_html_()


def test_the_raw_html_finder_sees_what_it_looks_for() -> None:
    """The checker of the test above finds a tag outside code, and none inside a span or a fence."""
    assert _raw_html(f"- note: {EVIL}") == [EVIL]
    assert _raw_html(f"1. `{EVIL}`\n```\n{EVIL}\n```") == []
    assert _raw_html(f"```\n```\n{EVIL}\n```") == [EVIL]


def test_html_reprs_escape_what_the_analyst_names(served: tuple[dp.Session, dp.Server]) -> None:
    """Frames, group-bys, queries and the session show names only escaped (no finding: the HTML reprs escape)."""
    sess, _ = served
    frame = sess.table("t").filter(pl.col(EVIL) > 0).with_columns(pl.col(EVIL).alias(FENCE))
    query = frame.group_by("g", keys=["a"]).agg(dp.len().alias(EVIL))
    sess.sql(f'SELECT COUNT(*) AS "{EVIL}" FROM t').collect(dp.PureDP(0.1))      # the history shows its text
    for html in (frame._repr_html_(), frame.group_by("g")._repr_html_(), query._repr_html_(), sess._repr_html_()):
        assert "<img" not in html and "<script" not in html, html
