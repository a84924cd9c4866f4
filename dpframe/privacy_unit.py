"""The privacy unit: whose presence the guarantee hides, and how much one unit may contribute.

dpframe uses one neighbouring relation everywhere: two datasets are neighbours when one is the other
plus all rows of one privacy unit. Because a unit may own many rows, the engine bounds its contribution
*inside the backend query*, before any statistic is computed: it keeps a uniformly random subset of at
most ``max_groups`` distinct group keys per unit (for group-by queries) and then of at most ``max_rows``
rows per unit (every row is equally likely to be kept, repeated rows too: a unit's rows are sampled,
not its distinct rows). Rows whose unit id is null are dropped (they cannot be attributed to a unit).

``max_rows="auto"`` / ``max_groups="auto"`` let each ``agg`` query choose the bound privately, from a
stated share of its own budget (:mod:`dpframe.tuning`, ``docs/bounds.md``).

Example:
    >>> import dpframe as dp
    >>> dp.PrivacyUnit("user_id", max_rows=10)
    PrivacyUnit('user_id', max_rows=10)
    >>> dp.PrivacyUnit("user_id", max_rows="auto", max_groups="auto")
    PrivacyUnit('user_id', max_rows='auto', max_groups='auto')
    >>> dp.PrivacyUnit.row()
    PrivacyUnit.row()

"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from dpframe.errors import ArgumentError, PlanError
from dpframe.sealed import Final
from dpframe.signatures import checked_class

AUTO: Literal["auto"] = "auto"
"""The value of ``max_rows`` / ``max_groups`` (and of a measure's ``bounds``) chosen privately per query."""

Bound = int | Literal["auto"]

RELATIONS: Mapping[str, str] = MappingProxyType({
    "unit": "add/remove one privacy unit",
    "record": "add/remove one training record",
    "teacher": "add/remove one teacher",
})
"""The neighbouring relations a dpframe release may protect, by key: the first words of every ``protects:`` line.

``unit``: the session's relation (:meth:`PrivacyUnit.protects`; every session query, stream and filter);
``record`` / ``teacher``: ``dpframe_topk.MultiLabelPATE``'s ``privacy_unit`` (one training record of a teacher
trained on a disjoint partition, or one whole teacher). Every relation is add/remove; replace-one curves exist
only in the standalone accountants (``dp.accounting.replace_one``), which sessions refuse. ``docs/guarantees.md``
("What each release protects") gives each public release path's relation and guarantee, and
``tests/adversarial/test_review54g.py`` fails when a path lacks one.
"""

AUTO_MAX = 2**16
"""The largest ``max_rows`` / ``max_groups`` that ``"auto"`` may choose: the most ``bound()`` may give under it."""


def _bound(value: object, argument: str) -> Bound:
    if isinstance(value, str) and value == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"must be a whole number ≥ 1 or 'auto', got {value!r}", argument=argument,
                            fix=f"pass {argument}=1 or more (the most one privacy unit may contribute), or "
                                f"{argument}='auto' to choose it privately per query")
    return int.__index__(value)      # a plain int: an int subclass's comparisons would see private counts


def _tighter(a: Bound | None, b: Bound | None) -> Bound | None:
    """The smaller number of the two; ``"auto"`` if neither is a number but one is ``"auto"``; else None."""
    numbers = [v for v in (a, b) if isinstance(v, int)]
    return min(numbers) if numbers else (AUTO if AUTO in (a, b) else None)


def _positive_int(value: object, argument: str) -> int:
    """A whole number ≥ 1 (``bound()``: a number, never ``"auto"``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"must be a whole number ≥ 1, got {value!r}", argument=argument,
                            fix=f"pass {argument}=1 or more (at most the session's bound)")
    return int.__index__(value)


@checked_class
@dataclass(frozen=True)
class PrivacyUnit(Final, argument="privacy_unit"):
    """A privacy unit: an id column (or one row) with public contribution bounds.

    Args:
        column: the column holding the unit's id (e.g. ``"user_id"``); ``None`` means each row is a unit
            (use :meth:`row`).
        max_rows: at most this many rows per unit are kept (a uniformly random subset); ``"auto"``: each
            ``agg`` query chooses it privately from a share of its budget (``docs/bounds.md``). Give it for a
            column unit: left out, it is 1 (each unit keeps one random row), and ``explain()`` says so.
        max_groups: in a group-by, at most this many distinct groups per unit are kept (a uniformly
            random subset). ``None`` means ``max_rows`` (a unit cannot touch more groups than rows);
            ``"auto"``: chosen privately per query, like ``max_rows``.

    """

    column: str | None
    rows: Bound = 1
    groups: Bound | None = None
    max_rows_given: bool = field(default=True, compare=False, repr=False)  # False: the default 1 (explained)

    def __init__(self, column: str | None, max_rows: Bound | None = None, max_groups: Bound | None = None) -> None:
        if column is not None and (not isinstance(column, str) or not column):
            raise ArgumentError(f"must be a column name, got {column!r}", argument="column",
                               fix="pass the name of the id column, or use dp.PrivacyUnit.row()")
        object.__setattr__(self, "column", column)
        object.__setattr__(self, "max_rows_given", max_rows is not None or column is None)
        max_rows = 1 if max_rows is None else max_rows
        object.__setattr__(self, "rows", _bound(max_rows, "max_rows"))
        if column is None and max_rows != 1:
            raise ArgumentError("a row-level unit owns exactly one row", argument="max_rows",
                               fix="name the id column: dp.PrivacyUnit('user_id', max_rows=...)")
        object.__setattr__(self, "groups", None if max_groups is None else _bound(max_groups, "max_groups"))

    @classmethod
    def row(cls) -> PrivacyUnit:
        """Each row is one privacy unit (the classic 'add/remove one row' relation)."""
        return cls(None)

    @property
    def is_row(self) -> bool:
        """True when each row is its own unit."""
        return self.column is None

    def tightened(self, max_rows: int | None = None, max_groups: int | None = None) -> PrivacyUnit:
        """The unit with smaller contribution bounds (for one query); never looser than this one.

        Example:
            >>> PrivacyUnit("user", max_rows=10).tightened(max_rows=3, max_groups=1)
            PrivacyUnit('user', max_rows=3, max_groups=1)
            >>> PrivacyUnit("user", max_rows=10).tightened(max_rows=20)
            Traceback (most recent call last):
            ...
            dpframe.errors.PlanError: max_rows: 20 is looser than the session's unit (max_rows=10)...

        """
        if self.column is None:
            raise PlanError("each row is its own unit: there is no contribution to bound", argument="bound",
                            fix="leave bound() out with dp.PrivacyUnit.row()")
        if max_rows is None and max_groups is None:
            raise PlanError("give max_rows, max_groups or both", argument="bound", fix="e.g. bound(max_groups=1)")
        if self.auto:
            return self._pinned(max_rows, max_groups)
        rows = self.max_rows if max_rows is None else _positive_int(max_rows, "max_rows")
        groups = None if max_groups is None else _positive_int(max_groups, "max_groups")
        fix = ("a query may only tighten the bounds the session was opened with; open the session with the larger "
               "bound (dp.PrivacyUnit(..., max_rows=..., max_groups=...))")
        if rows > self.max_rows:
            raise PlanError(f"{rows} is looser than the session's unit (max_rows={self.max_rows})",
                            argument="max_rows", fix=fix)
        if groups is not None and groups > self.groups_per_unit:
            raise PlanError(f"{groups} is looser than the session's unit (at most {self.groups_per_unit} groups per "
                            "unit)", argument="max_groups", fix=fix)
        if groups is None and self.max_groups is not None:
            groups = min(self.max_groups, rows)
        return PrivacyUnit(self.column, rows, groups)

    def _pinned(self, max_rows: int | None, max_groups: int | None) -> PrivacyUnit:
        """:meth:`tightened` of a unit with an ``"auto"`` bound: numbers pinned for the frame's queries.

        Each is at most what ``"auto"`` may choose (:data:`AUTO_MAX`) or the session's number; a bound left out
        stays as the session has it.

        Example:
            >>> PrivacyUnit("user", max_rows="auto").tightened(max_rows=100)
            PrivacyUnit('user', max_rows=100)
            >>> PrivacyUnit("user", max_rows="auto").tightened(max_groups=1)
            PrivacyUnit('user', max_rows='auto', max_groups=1)

        """
        rows: Bound = self.rows if max_rows is None else _positive_int(max_rows, "max_rows")
        groups: Bound | None = self.groups if max_groups is None else _positive_int(max_groups, "max_groups")
        fix = (f"under 'auto' a query may pin a number up to {AUTO_MAX} (the most 'auto' may choose), or up to the "
               "session's own number; open the session with a larger one for more")
        top_rows = AUTO_MAX if self.rows == AUTO else self.rows
        if rows != AUTO and rows > top_rows:
            raise PlanError(f"{rows} is looser than the session's unit (max_rows={self.rows!r}, at most {top_rows})",
                            argument="max_rows", fix=fix)
        top_groups = AUTO_MAX if self.groups in (AUTO, None) else self.groups
        if groups not in (AUTO, None) and groups > top_groups:
            raise PlanError(f"{groups} is looser than the session's unit (max_groups={self.groups!r}, at most "
                            f"{top_groups})", argument="max_groups", fix=fix)
        return PrivacyUnit(self.column, rows, groups)

    def within(self, other: PrivacyUnit) -> PrivacyUnit:
        """The tighter of this unit's and ``other``'s bounds, on this unit's column (``other`` cannot loosen them).

        A number is tighter than ``"auto"``; ``max_groups`` left out (None) follows ``max_rows``. This unit's, under
        a number of rows, is a number too: tighter than ``other``'s ``"auto"`` (the unit a query's tuning stage
        chose, leaving ``max_groups`` out, read through a frame that ``bound()`` pinned under a session's
        ``max_groups="auto"``: taking ``"auto"`` there made the read fail after the charge).

        Example:
            >>> PrivacyUnit("user", max_rows=5).within(PrivacyUnit("user", max_rows=50, max_groups=2))
            PrivacyUnit('user', max_rows=5, max_groups=2)
            >>> PrivacyUnit("user", max_rows="auto", max_groups="auto").within(PrivacyUnit("user", max_rows=64))
            PrivacyUnit('user', max_rows=64, max_groups='auto')
            >>> PrivacyUnit("user", max_rows=3).within(PrivacyUnit("user", max_rows=4, max_groups="auto"))
            PrivacyUnit('user', max_rows=3)

        """
        if self.column is None:
            return self
        groups = _tighter(self.groups, other.groups)
        if groups == AUTO and self.groups is None and isinstance(self.rows, int):
            groups = None
        return PrivacyUnit(self.column, _tighter(self.rows, other.rows) or AUTO, groups)

    @property
    def auto(self) -> bool:
        """Whether ``max_rows`` or ``max_groups`` is ``"auto"`` (chosen per query)."""
        return AUTO in (self.rows, self.groups)

    def require_numbers(self, what: str) -> None:
        """A PlanError naming ``privacy_unit`` if ``max_rows`` is ``"auto"``: ``what`` could run no query.

        ``max_groups="auto"`` alone is no refusal: a query without a group-by reads ``max_rows`` alone (as under a
        unit without ``max_groups``), so an interactive stream's scalar queries run.

        Example:
            >>> PrivacyUnit("u", max_rows="auto").require_numbers("a sparse vector")
            Traceback (most recent call last):
            ...
            dpframe.errors.PlanError: privacy_unit: a sparse vector cannot run queries whose bounds are chosen ...
            >>> PrivacyUnit("u", max_rows=3, max_groups="auto").require_numbers("a sparse vector")   # runs

        """
        if self.rows == AUTO:
            raise PlanError(f"{what} cannot run queries whose bounds are chosen per query (this session's unit has "
                            "max_rows 'auto'): it would be charged and answer nothing", argument="privacy_unit",
                            fix="open a session with a number for max_rows for interactive streams")

    @property
    def max_rows(self) -> int:
        """The most rows one unit keeps (a PlanError for ``"auto"``: only ``agg`` queries tune it)."""
        if self.rows == AUTO:
            raise _needs_number("max_rows")
        return self.rows

    @property
    def max_groups(self) -> int | None:
        """The most groups one unit keeps (None: ``max_rows``); a PlanError for ``"auto"``."""
        if self.groups == AUTO:
            raise _needs_number("max_groups")
        return self.groups

    @property
    def groups_per_unit(self) -> int:
        """The most distinct groups one unit can touch after bounding (the L0 sensitivity)."""
        return min(self.max_groups or self.max_rows, self.max_rows)

    def tuned(self, max_rows: int, max_groups: int | None) -> PrivacyUnit:
        """The same unit with numbers in place of ``"auto"`` (a number already given is kept).

        Example:
            >>> PrivacyUnit("u", max_rows="auto", max_groups=2).tuned(40, 8)
            PrivacyUnit('u', max_rows=40, max_groups=2)

        """
        rows = max_rows if self.rows == AUTO else self.rows
        groups = max_groups if self.groups == AUTO else self.groups
        return PrivacyUnit(self.column, rows, groups)

    def __repr__(self) -> str:
        if self.column is None:
            return "PrivacyUnit.row()"
        extra = f", max_groups={self.groups!r}" if self.groups is not None else ""
        return f"PrivacyUnit({self.column!r}, max_rows={self.rows!r}{extra})"

    @property
    def default_note(self) -> str | None:
        """What ``explain()`` says when ``max_rows`` was left out of a column unit (None when it was given).

        Example:
            >>> print(PrivacyUnit("tailnum").default_note)
            privacy unit: max_rows was not given, so it is 1: each unit 'tailnum' keeps one random row ...

        """
        if self.max_rows_given:
            return None
        return (f"privacy unit: max_rows was not given, so it is 1: each unit {self.column!r} keeps one random row "
                "in every query and its other rows are dropped; if a unit owns several rows, pass "
                f"dp.PrivacyUnit({self.column!r}, max_rows=N) with N the most rows one unit may contribute (the "
                "noise grows with N)")

    def _rows_text(self) -> str:
        return "max_rows chosen privately" if self.rows == AUTO else f"≤ {self.rows} rows"

    def protects(self) -> str:
        """The neighbouring relation a release under this unit protects (``explain()``'s ``protects:`` line).

        Datasets that differ by adding or removing ONE unit with ALL its rows, however many it owns: the bounds
        limit what a query *keeps* of a unit (inside the query, before any statistic), not whom it protects.
        Starts with ``RELATIONS["unit"]``'s key phrase (the audit's meta-test reads it).

        Example:
            >>> print(PrivacyUnit("u", max_rows=3).protects())
            add/remove one privacy unit: every row whose 'u' holds one id, however many (each query keeps ≤ 3 of them)
            >>> print(PrivacyUnit.row().protects())
            add/remove one privacy unit: one row (dp.PrivacyUnit.row())

        """
        if self.column is None:
            return f"{RELATIONS['unit']}: one row (dp.PrivacyUnit.row())"
        kept = "max_rows chosen privately per query" if self.rows == AUTO else f"≤ {self.rows}"
        groups = ("" if self.groups is None else ", max_groups chosen privately per query" if self.groups == AUTO
                  else f", in ≤ {self.groups} groups")
        return (f"{RELATIONS['unit']}: every row whose {self.column!r} holds one id, however many (each query keeps "
                f"{kept} of them{groups})")

    def describe(self) -> str:
        """One line for explain().

        Example:
            >>> print(PrivacyUnit("u", max_rows=3, max_groups="auto").describe())
            unit 'u': ≤ 3 rows, max_groups chosen privately by each grouped agg query (queries without a group-by, ...

        """
        if self.column is None:
            return "one row per unit"
        text = f"unit {self.column!r}: {self._rows_text()}" + ("" if self.max_rows_given else " (the default)")
        if self.groups is not None:
            auto = (", max_groups chosen privately by each grouped agg query (queries without a group-by, and "
                    "top-k: max_rows alone)")
            text += auto if self.groups == AUTO else f", ≤ {self.groups} groups"
        return text + " per unit (uniform random subset; null ids dropped)"


PIN_FIX = ("pin one for this query: frame.bound({argument}=<a number>) (at most " + str(AUTO_MAX) + "), or open the "
           "session with dp.PrivacyUnit(column, {argument}=<a number>)")
"""The fix of a query that needs a number where the session's unit says ``"auto"`` (``{argument}``: which)."""


def _needs_number(argument: str) -> PlanError:
    return PlanError(f"{argument}='auto' is chosen per query by agg queries (group_by(...).agg, agg, SQL "
                     "aggregates); this query needs a number", argument=argument,
                     fix=PIN_FIX.format(argument=argument))
