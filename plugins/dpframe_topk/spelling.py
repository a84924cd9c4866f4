"""How a top-k refusal or next step spells the query's arguments: as the method chain or as SQL ``TOP_K``.

The checks are written once, in :mod:`dpframe_topk.query`; each fix names an argument through a
:class:`Spelling`, so the analyst reads it in the language they wrote the query in: ``method='gumbel'`` after
``group_by(...).top_k(...)``, ``method := 'gumbel'`` after ``HAVING TOP_K(...)``.

Example:
    >>> CHAIN.arg("method", "'gumbel'"), SQL.arg("method", "'gumbel'")
    ("method='gumbel'", "method := 'gumbel'")
    >>> CHAIN.arg("k", CHAIN.none), SQL.arg("k", SQL.none)
    ('k=None', 'TOP_K(score, NULL)')

"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spelling:
    """The method chain's keywords (``sql=False``) or SQL ``TOP_K``'s arguments (``sql=True``)."""

    sql: bool = False

    @property
    def none(self) -> str:
        """"No k": ``None`` or ``NULL``."""
        return "NULL" if self.sql else "None"

    @property
    def give(self) -> str:
        """The verb of a fix: arguments are passed, SQL is written."""
        return "write" if self.sql else "pass"

    def arg(self, name: str, value: str) -> str:
        """``name=value`` or ``name := value``; ``k`` is TOP_K's second argument (``TOP_K(score, value)``)."""
        if name == "k":
            return f"TOP_K(score, {value})" if self.sql else f"k={value}"
        return f"{name} := {value}" if self.sql else f"{name}={value}"

    def option(self, k: object, name: str, value: str) -> str:
        """An option together with k in SQL (``TOP_K(score, 3, method := 'x')``), the keyword alone otherwise."""
        return f"TOP_K(score, {k}, {name} := {value})" if self.sql else f"{name}={value}"

    @property
    def keys(self) -> str:
        """Where public keys are given."""
        return "dp.Session(..., public_keys={'table.column': [...]}) or sess.sql(..., keys={...})" if self.sql else \
            "group_by(..., keys=[...])"

    @property
    def scores(self) -> str:
        """The scores top-k ranks by."""
        return "COUNT(DISTINCT <privacy unit>), COUNT(*), COUNT(x) or SUM(CLAMP(x, 0, B)) as the TOP_K score" \
            if self.sql else "score=dp.count_units(), dp.len(), dp.count(col) or dp.sum(col, bounds=(0, B))"

    @property
    def release_scores(self) -> str:
        """How to also release noisy scores."""
        return "select the TOP_K score too" if self.sql else "pass release_scores=True"


CHAIN = Spelling()
SQL = Spelling(sql=True)

__all__ = ["CHAIN", "SQL", "Spelling"]
