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

from dataclasses import dataclass

from dpframe.errors import DPFrameError


def _positive_int(value: object, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DPFrameError(f"must be a whole number ≥ 1, got {value!r}", argument=argument,
                           fix=f"pass {argument}=1 or more (the most one privacy unit may contribute)")
    return value


@dataclass(frozen=True)
class PrivacyUnit:
    """A privacy unit: an id column (or one row) with public contribution bounds.

    Args:
        column: the column holding the unit's id (e.g. ``"user_id"``); ``None`` means each row is a unit
            (use :meth:`row`).
        max_rows: at most this many rows per unit are kept (a uniformly random subset).
        max_groups: in a group-by, at most this many distinct groups per unit are kept (a uniformly
            random subset). ``None`` means ``max_rows`` (a unit cannot touch more groups than rows).

    """

    column: str | None
    max_rows: int = 1
    max_groups: int | None = None

    def __init__(self, column: str | None, max_rows: int = 1, max_groups: int | None = None) -> None:
        if column is not None and (not isinstance(column, str) or not column):
            raise DPFrameError(f"must be a column name, got {column!r}", argument="column",
                               fix="pass the name of the id column, or use dp.PrivacyUnit.row()")
        object.__setattr__(self, "column", column)
        object.__setattr__(self, "max_rows", _positive_int(max_rows, "max_rows"))
        if column is None and max_rows != 1:
            raise DPFrameError("a row-level unit owns exactly one row", argument="max_rows",
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

    @property
    def groups_per_unit(self) -> int:
        """The most distinct groups one unit can touch after bounding (the L0 sensitivity)."""
        return min(self.max_groups or self.max_rows, self.max_rows)

    def __repr__(self) -> str:
        if self.column is None:
            return "PrivacyUnit.row()"
        extra = f", max_groups={self.max_groups}" if self.max_groups is not None else ""
        return f"PrivacyUnit({self.column!r}, max_rows={self.max_rows}{extra})"

    def describe(self) -> str:
        """One line for explain()."""
        if self.column is None:
            return "one row per unit"
        text = f"unit {self.column!r}: ≤ {self.max_rows} rows"
        if self.max_groups is not None:
            text += f", ≤ {self.max_groups} groups"
        return text + " per unit (uniform random subset; null ids dropped)"
