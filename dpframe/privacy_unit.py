"""The privacy unit: whose presence the guarantee hides, and how much one unit may contribute.

dpframe uses one neighbouring relation everywhere: two datasets are neighbours when one is the other
plus all rows of one privacy unit. Because a unit may own many rows, the engine bounds its contribution
*inside the backend query*, before any statistic is computed: it keeps a uniformly random subset of at
most ``max_groups`` distinct group keys per unit (for group-by queries) and then of at most ``max_rows``
rows per unit (every row is equally likely to be kept, repeated rows too: a unit's rows are sampled,
not its distinct rows). Rows whose unit id is null are dropped (they cannot be attributed to a unit).

Example:
    >>> import dpframe as dp
    >>> dp.PrivacyUnit("user_id", max_rows=10)
    PrivacyUnit('user_id', max_rows=10)
    >>> dp.PrivacyUnit.row()
    PrivacyUnit.row()

"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpframe.errors import ArgumentError, PlanError


def _positive_int(value: object, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"must be a whole number ≥ 1, got {value!r}", argument=argument,
                           fix=f"pass {argument}=1 or more (the most one privacy unit may contribute)")
    return value


@dataclass(frozen=True)
class PrivacyUnit:
    """A privacy unit: an id column (or one row) with public contribution bounds.

    Args:
        column: the column holding the unit's id (e.g. ``"user_id"``); ``None`` means each row is a unit
            (use :meth:`row`).
        max_rows: at most this many rows per unit are kept (a uniformly random subset). Give it for a
            column unit: left out, it is 1 (each unit keeps one random row), and ``explain()`` says so.
        max_groups: in a group-by, at most this many distinct groups per unit are kept (a uniformly
            random subset). ``None`` means ``max_rows`` (a unit cannot touch more groups than rows).

    """

    column: str | None
    max_rows: int = 1
    max_groups: int | None = None
    max_rows_given: bool = field(default=True, compare=False, repr=False)  # False: the default 1 (explained)

    def __init__(self, column: str | None, max_rows: int | None = None, max_groups: int | None = None) -> None:
        if column is not None and (not isinstance(column, str) or not column):
            raise ArgumentError(f"must be a column name, got {column!r}", argument="column",
                               fix="pass the name of the id column, or use dp.PrivacyUnit.row()")
        object.__setattr__(self, "column", column)
        object.__setattr__(self, "max_rows_given", max_rows is not None or column is None)
        max_rows = 1 if max_rows is None else max_rows
        object.__setattr__(self, "max_rows", _positive_int(max_rows, "max_rows"))
        if column is None and max_rows != 1:
            raise ArgumentError("a row-level unit owns exactly one row", argument="max_rows",
                               fix="name the id column: dp.PrivacyUnit('user_id', max_rows=...)")
        groups = None if max_groups is None else _positive_int(max_groups, "max_groups")
        object.__setattr__(self, "max_groups", groups)

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

    def within(self, other: PrivacyUnit) -> PrivacyUnit:
        """The tighter of this unit's and ``other``'s bounds, on this unit's column (``other`` cannot loosen them).

        Example:
            >>> PrivacyUnit("user", max_rows=5).within(PrivacyUnit("user", max_rows=50, max_groups=2))
            PrivacyUnit('user', max_rows=5, max_groups=2)

        """
        if self.column is None:
            return self
        groups = [g for g in (self.max_groups, other.max_groups) if g is not None]
        return PrivacyUnit(self.column, min(self.max_rows, other.max_rows), min(groups) if groups else None)

    @property
    def groups_per_unit(self) -> int:
        """The most distinct groups one unit can touch after bounding (the L0 sensitivity)."""
        return min(self.max_groups or self.max_rows, self.max_rows)

    def __repr__(self) -> str:
        if self.column is None:
            return "PrivacyUnit.row()"
        extra = f", max_groups={self.max_groups}" if self.max_groups is not None else ""
        return f"PrivacyUnit({self.column!r}, max_rows={self.max_rows}{extra})"

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

    def describe(self) -> str:
        """One line for explain()."""
        if self.column is None:
            return "one row per unit"
        text = f"unit {self.column!r}: ≤ {self.max_rows} rows" + ("" if self.max_rows_given else " (the default)")
        if self.max_groups is not None:
            text += f", ≤ {self.max_groups} groups"
        return text + " per unit (uniform random subset; null ids dropped)"
