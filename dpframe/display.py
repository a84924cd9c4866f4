"""What dpframe objects look like in a terminal and in a notebook: ``Explanation``, HTML reprs.

Everything shown here is public: a plan, its cost, the budget, the ledger's history (query texts and
costs) and released values. Nothing reads a private row.

* :class:`Explanation` is what ``explain()`` returns: a ``str`` (the text, as ``print`` shows it) that
  also renders as HTML or Markdown in a notebook and gives its content as a dict (``to_dict()``, the
  same as ``explain(format="json")``).
* :func:`session_html` and :func:`query_html` are the notebook reprs of ``dp.Session`` (tables, unit, a
  budget bar: spent / remaining, the history) and of frames and queries.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> e = sess.table("t").agg(dp.len()).explain(dp.PureDP(0.5))
    >>> isinstance(e, Explanation), e.splitlines()[0], e.to_dict()["budget"]["cost"]
    (True, 'dpframe query plan   [seeded random source: NOT PRIVATE]', 'ε=1/2')
    >>> "<table" in e._repr_html_() and e._repr_markdown_().startswith("**dpframe query plan**")
    True

"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from html import escape
from typing import TYPE_CHECKING, Any

from dpframe.budgets import Budget, describe

if TYPE_CHECKING:
    from dpframe.session import Session

_STYLE = "font-family: var(--jp-code-font-family, monospace); font-size: 12px"


class Explanation(str):
    """The explanation of a plan (``query.explain(budget)``): the text, plus notebook reprs and a dict.

    It *is* the text (``print(e)``, ``"laplace" in e``, ``e.splitlines()``); ``e.to_dict()`` is the same
    content as JSON-able values (``explain(format="json")``); in a notebook it renders as HTML. Like the text, its
    attributes are read-only (``e.private = True`` would render a seeded run's explanation as private); it copies
    and pickles as the same explanation.
    """

    heading: str
    private: bool
    steps: tuple[str, ...]
    lines: tuple[str, ...]
    budget: dict[str, Any]
    remaining: str
    notes: tuple[str, ...]
    extra: tuple[str, ...]
    data: dict[str, Any]
    protects: str

    def __new__(cls, title: str, *, private: bool, steps: Sequence[str] = (), lines: Sequence[str] = (),
                budget: Mapping[str, Any] | None = None, remaining: str = "", notes: Sequence[str] = (),
                extra: Sequence[str] = (), data: Mapping[str, Any] | None = None, protects: str = "") -> Explanation:
        budget = dict(budget or {})
        text = [title + ("" if private else "   [seeded random source: NOT PRIVATE]")]
        text += [f"  {i}. {s}" for i, s in enumerate(steps, 1)]
        text += lines
        if protects:
            text.append(f"protects: {protects}")
        if budget:
            text.append(f"budget: requested {budget['requested']}; cost {budget['cost']}; charged "
                        f"{budget['charged']} ({budget['accountant']})")
            if budget["fits"]:
                text.append(f"        spent so far {budget['spent']}; remaining after this query "
                            f"{budget['remaining_after']}")
            else:
                text.append(f"        spent so far {budget['spent']}; DOES NOT FIT the remaining "
                            f"{remaining}: collect() would be refused")
        text += [f"note: {n}" for n in notes]
        text += extra
        self = super().__new__(cls, "\n".join(text))
        fields = {"heading": title, "private": private, "steps": tuple(steps), "lines": tuple(lines),
                  "budget": budget, "remaining": remaining, "notes": tuple(notes), "extra": tuple(extra),
                  "data": dict(data or {}), "protects": protects}
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Explanation.{name} is read-only: it describes the plan explained; explain again")

    def __delattr__(self, name: str) -> None:
        self.__setattr__(name, None)

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return functools.partial(Explanation, self.heading, private=self.private, steps=self.steps, lines=self.lines,
                                 budget=self.budget, remaining=self.remaining, notes=self.notes, extra=self.extra,
                                 data=self.data, protects=self.protects), ()

    def __repr__(self) -> str:
        return str(self)

    def extended(self, lines: Sequence[str] = (), data: Mapping[str, Any] | None = None) -> Explanation:
        """The same explanation with more trailing ``lines`` (and ``data`` keys), e.g. a SQL query's text."""
        return Explanation(self.heading, private=self.private, steps=self.steps, lines=self.lines, budget=self.budget,
                           remaining=self.remaining, notes=self.notes, extra=(*self.extra, *lines),
                           data={**self.data, **(data or {})}, protects=self.protects)

    def to_dict(self) -> dict[str, Any]:
        """The content as JSON-able values (what ``explain(format="json")`` returns)."""
        return {"private": self.private, "steps": list(self.steps), **self.data, "notes": list(self.notes),
                "budget": dict(self.budget), **({"protects": self.protects} if self.protects else {})}

    def _budget_rows(self) -> list[tuple[str, str]]:
        b = self.budget
        if not b:
            return []
        rows = [("protects", self.protects)] if self.protects else []
        rows += [("requested", b["requested"]), ("cost", b["cost"]), ("charged", f"{b['charged']} ({b['accountant']})"),
                ("spent so far", b["spent"])]
        if b["fits"]:
            rows.append(("remaining after", b["remaining_after"]))
        else:
            rows.append(("does not fit", f"remaining {self.remaining}: collect() would be refused"))
        return rows

    def _repr_html_(self) -> str:
        warn = "" if self.private else ' <span style="color:#b00">[seeded random source: NOT PRIVATE]</span>'
        parts = [f'<div class="dpframe-explanation" style="{_STYLE}"><b>{escape(self.heading)}</b>{warn}']
        if self.steps:
            parts.append("<ol>" + "".join(f"<li>{escape(s)}</li>" for s in self.steps) + "</ol>")
        if self.lines:
            parts.append("<pre>" + escape("\n".join(self.lines)) + "</pre>")
        rows = self._budget_rows()
        if rows:
            parts.append(html_table(["budget", ""], rows))
        if self.notes:
            parts.append("<ul>" + "".join(f"<li>note: {escape(n)}</li>" for n in self.notes) + "</ul>")
        if self.extra:
            parts.append("<pre>" + escape("\n".join(self.extra)) + "</pre>")
        return "".join(parts) + "</div>"

    def _repr_markdown_(self) -> str:
        seeded = "" if self.private else " *(seeded random source: NOT PRIVATE)*"
        out = [f"**{markdown_text(self.heading)}**{seeded}", ""]
        out += [f"{i}. {markdown_code(s)}" for i, s in enumerate(self.steps, 1)]
        if self.lines:
            out += ["", *markdown_block(self.lines)]
        rows = self._budget_rows()
        if rows:
            out += ["", "| budget | |", "|---|---|", *(f"| {markdown_text(k)} | {markdown_text(v)} |" for k, v in rows)]
        if self.notes:
            out += ["", *(f"- note: {markdown_text(n)}" for n in self.notes)]
        if self.extra:
            out += ["", *markdown_block(self.extra)]
        return "\n".join(out)


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|!&~#])")
_LINE_BREAK = re.compile(r"\r\n?|\n")


def markdown_text(text: str) -> str:
    r"""``text`` as plain Markdown text: its Markdown and HTML punctuation backslash-escaped, its line breaks spaces.

    What an analyst names (a column, an alias, a label) reaches an explanation's notes and budget rows; unescaped, a
    name holding ``<img src=x onerror=...>`` is raw HTML where the Markdown is rendered (a notebook's Markdown view, a
    report converted from it), and ``|`` splits a table cell.

    Example:
        >>> print(markdown_text("a|b <img src=x>"))
        a\|b \<img src=x\>

    """
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _LINE_BREAK.sub(" ", text))


def _ticks(texts: Sequence[str], least: int) -> str:
    """Backticks one more than the longest run of them in ``texts``, at least ``least``: a delimiter none closes."""
    longest = max((len(run) for text in texts for run in re.findall("`+", text)), default=0)
    return "`" * max(longest + 1, least)


def markdown_code(text: str) -> str:
    r"""``text`` as a Markdown code span (shown as is, never markup), its line breaks written ``\n``.

    Delimited by more backticks than any run of them in ``text``, so that none closes the span early.

    Example:
        >>> markdown_code("col(`x`)")
        '`` col(`x`) ``'

    """
    shown = _LINE_BREAK.sub("\\\\n", text)
    ticks = _ticks([shown], 1)
    return f"{ticks} {shown} {ticks}"


def markdown_block(lines: Sequence[str]) -> list[str]:
    """``lines`` as a fenced Markdown code block: a fence longer than any run of backticks in them.

    Example:
        >>> markdown_block(["a", "```"])
        ['````', 'a', '```', '````']

    """
    fence = _ticks(lines, 3)
    return [fence, *lines, fence]


def html_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A small HTML table (every cell escaped).

    Example:
        >>> '<td style="text-align:left">&lt;b&gt;</td>' in html_table(["a"], [["<b>"]])
        True

    """
    th = "".join(f'<th style="text-align:left">{escape(str(h))}</th>' for h in header)
    body = "".join("<tr>" + "".join(f'<td style="text-align:left">{escape(str(c))}</td>' for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def used_fraction(spent: Budget, total: Budget) -> float:
    """The largest share of any coordinate of ``total`` (ε, ρ, δ) that ``spent`` uses, in [0, 1].

    Example:
        >>> import dpframe as dp
        >>> used_fraction(dp.ApproxDP(1, 1e-7), dp.ApproxDP(4, 1e-6))
        0.25

    """
    shares = [Fraction(getattr(spent, a, 0)) / Fraction(getattr(total, a))
              for a in ("epsilon", "rho", "delta") if getattr(total, a, 0)]
    return float(min(max(shares, default=Fraction(0)), Fraction(1)))


def budget_bar(spent: Budget, total: Budget, remaining: Budget) -> str:
    """An HTML bar of the spent share of ``total``, labelled with spent and remaining."""
    pct = 100 * used_fraction(spent, total)
    return (f'<div style="{_STYLE}">spent {escape(describe(spent))} of {escape(describe(total))} · remaining '
            f'{escape(describe(remaining))}<div style="width: 320px; height: 10px; background: #ddd; '
            f'border-radius: 3px"><div class="dpframe-spent" style="width: {pct:.1f}%; height: 10px; '
            f'background: #c0392b; border-radius: 3px"></div></div></div>')


def session_html(session: Session, rows: int = 20) -> str:
    """The notebook repr of a session: tables, privacy unit, accountant, budget bar and the last ``rows`` charges."""
    seeded = "" if session.rng.private else ' <span style="color:#b00">[seeded: NOT PRIVATE]</span>'
    tables = ", ".join(f"{escape(n)} ({len(session.table(n).schema)} columns)" for n in session.tables())
    parts = [f'<div class="dpframe-session" style="{_STYLE}"><b>dp.Session</b>{seeded}<br>tables: {tables}<br>'
             f"privacy unit: {escape(session.privacy_unit.describe())}<br>"
             f"accountant: {escape(session.accountant.describe())}"]
    if session.closed:
        return "".join(parts) + "<br><i>closed</i></div>"
    parts.append(budget_bar(session.spent(), session.accountant.total, session.remaining()))
    history = session.history()
    if history.height:
        shown = history.tail(rows)
        more = f"<i>{history.height - rows} earlier charges not shown</i>" if history.height > rows else ""
        parts.append(more + html_table(shown.columns, shown.rows()))
    else:
        parts.append("<i>no charges yet</i>")
    return "".join(parts) + "</div>"


def query_html(kind: str, lineage: Sequence[str], hint: str) -> str:
    """The notebook repr of a frame or query: its kind, its plan steps and what to do next."""
    steps = "".join(f"<li>{escape(s)}</li>" for s in lineage)
    return (f'<div class="dpframe-query" style="{_STYLE}"><b>{escape(kind)}</b> (private, lazy: no rows)'
            f"<ol>{steps}</ol><i>{escape(hint)}</i></div>")


__all__ = ["Explanation", "budget_bar", "html_table", "markdown_block", "markdown_code", "markdown_text", "query_html",
           "session_html", "used_fraction"]
