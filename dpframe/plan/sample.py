"""Poisson sampling of privacy units (or rows) with a public rate: the input of privacy amplification.

``frame.sample(rate)`` keeps each privacy unit (each row, for ``PrivacyUnit.row()``) independently
with probability ``rate``, freshly at every execution: a unit is kept iff a 64-bit hash of its id
(rows: of its position) keyed by the query's fresh random seed is below ⌊rate·2⁶⁴⌋, so the real
inclusion probability is ≤ ``rate`` and amplification computed with ``rate`` never under-reports.
Mechanisms downstream are charged their *amplified* cost (thesis Ch. 2 for RDP, Thm 3.3.5 for PLD,
Li et al. 2012 for basic composition); zCDP cannot express amplification and charges the full cost.

Example:
    >>> import polars as pl
    >>> from dpframe.plan.nodes import Scan
    >>> s = Sample.of(Scan.of("t", pl.Schema({"u": pl.Int64})), 0.25, "u")
    >>> s.describe(), s.rate
    ('PoissonSample rate=0.25 of privacy units', 0.25)

"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from dpframe.accounting.curves import check_rate
from dpframe.plan.nodes import Node, RowNode

_SALT = 0x9E3779B97F4A7C15
_MASK = (1 << 63) - 1


@dataclass(frozen=True, eq=False)
class Sample(RowNode):
    """Keeps each privacy unit (or row) independently with probability ``rate``."""

    rate: float
    unit: str | None

    @classmethod
    def of(cls, input: Node, rate: float, unit: str | None) -> Sample:
        """Validate and build (the rate must be in (0, 1])."""
        return cls(input, input.schema, check_rate(rate), unit)

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        """Schema-preserving form used for validation (seed 0); engines call :meth:`apply_seeded`."""
        return self.apply_seeded(frame, 0)

    def apply_seeded(self, frame: pl.LazyFrame, seed: int) -> pl.LazyFrame:
        """Keep the units whose seeded hash is below ⌊rate·2⁶⁴⌋ (fresh ``seed`` per execution)."""
        threshold = min(int(self.rate * 2**64), 2**64 - 1)
        key = pl.col(self.unit) if self.unit is not None else pl.int_range(pl.len(), dtype=pl.UInt64)
        keep = key.hash((seed ^ _SALT) & _MASK) < pl.lit(threshold, dtype=pl.UInt64)
        return frame.filter(keep) if self.rate < 1 else frame

    def describe(self) -> str:
        return f"PoissonSample rate={self.rate:g} of {'privacy units' if self.unit is not None else 'rows'}"


def apply_node(node: RowNode, frame: pl.LazyFrame, seed: int) -> pl.LazyFrame:
    """Apply a row node in an engine: sampling nodes get the query's fresh seed."""
    if isinstance(node, Sample):
        return node.apply_seeded(frame, seed)
    return node.apply(frame)
