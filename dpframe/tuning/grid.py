"""Public candidate grids for private bound tuning, and the histograms read on them.

Every candidate is fixed before any data is read (it depends on the column's type only): contribution
bounds come from :data:`ROW_CANDIDATES` (1, 2, 3, 4, 6, 8, 12, ... — powers of two and 1.5 times them,
up to 2¹⁶); clipping bounds from a signed grid of powers of two (:func:`value_edges`), with 0 in it.
A histogram on a grid counts, per bin ``[edge_j, edge_{j+1})``, the units (or rows) whose statistic
falls there; the last bin is open-ended.

Example:
    >>> ROW_CANDIDATES[:8]
    (1, 2, 3, 4, 6, 8, 12, 16)
    >>> bin_of(np.array([1, 5, 6, 70000]), ROW_CANDIDATES).tolist()
    [0, 3, 4, 31]

"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.privacy_unit import AUTO_MAX


def _ladder(low_exp: int, high_exp: int) -> list[Fraction]:
    """2^k and 1.5·2^k for k in [low_exp, high_exp), then 2^high_exp: ratios of 1.5 and 4/3 in turn."""
    out = []
    for k in range(low_exp, high_exp):
        out += [Fraction(2) ** k, Fraction(3, 2) * Fraction(2) ** k]
    return [*out, Fraction(2) ** high_exp]


AUTO_MAX_ROWS = AUTO_MAX
"""The largest ``max_rows`` / ``max_groups`` that ``"auto"`` may choose."""

ROW_CANDIDATES: tuple[int, ...] = tuple(sorted({int(x) for x in _ladder(0, 16)}))
"""The values ``max_rows="auto"`` / ``max_groups="auto"`` choose from."""

OUTER = Fraction(2) ** 1023
"""The open ends of a value histogram (a float comparison with ±2¹⁰²³ never overflows)."""


def value_edges(dtype: pl.DataType, steps: int = 1) -> tuple[Fraction, ...]:
    """The candidate bounds of a column: 0 and ± 2^(k/steps) (integers from 1, floats from 2⁻²⁰).

    Integer columns go up to the type's range (2⁶² at most), floats to 2⁶⁰ (sums of larger bounds lose
    their grid). ``steps`` points per octave (1: powers of two, coarse, so each bin of a tuning histogram
    holds many rows and a bound is within a factor 2 of the best one; 4: every 19%, for
    ``frame.bounds()``), rounded to 3 significant digits (to whole numbers for integer columns).

    Example:
        >>> [str(e) for e in value_edges(pl.Int8)], len(value_edges(pl.Float64))
        (['-128', '-64', '-32', '-16', '-8', '-4', '-2', '-1', '0', '1', '2', '4', '8', '16', '32', '64', '128'], 163)
        >>> [float(e) for e in value_edges(pl.Float64, 4) if 90 < e < 400]
        [90.5, 108.0, 128.0, 152.0, 181.0, 215.0, 256.0, 304.0, 362.0]

    """
    if dtype == pl.Boolean:
        low, high = 0, 1
    elif dtype.is_integer():
        low, high = 0, _bits(dtype)
    else:
        low, high = -20, 60
    if steps == 1:
        ladder = [Fraction(2) ** k for k in range(low, high + 1)]
    else:
        digits = [float(f"{2 ** (k / steps):.3g}") for k in range(low * steps, high * steps + 1)]
        whole = dtype.is_integer() or dtype == pl.Boolean
        ladder = sorted({Fraction(round(d)) if whole else Fraction(d) for d in digits} - {Fraction(0)})
    return (*(-x for x in reversed(ladder)), Fraction(0), *ladder)


def _bits(dtype: pl.DataType) -> int:
    """log₂ of the largest magnitude of an integer type (7 for Int8, 8 for UInt8, 62 for 64-bit types)."""
    top = pl.select(pl.lit(0, dtype=dtype).upper_bound()).item()
    return min(62, int(top).bit_length())


def bin_of(values: npt.NDArray[np.int64], edges: tuple[int, ...] | tuple[Fraction, ...]) -> npt.NDArray[np.int64]:
    """The bin of each value: j with edges[j] ≤ v < edges[j + 1] (the last bin open; values ≥ edges[0])."""
    cuts = np.asarray([float(e) for e in edges[1:]])
    return np.searchsorted(cuts, np.asarray(values, dtype=np.float64), side="right").astype(np.int64)


def representatives(edges: tuple[int, ...] | tuple[Fraction, ...]) -> npt.NDArray[np.float64]:
    """A value standing for each bin: its midpoint; the open last bin stands at its lower edge."""
    e = np.asarray([float(x) for x in edges])
    return np.concatenate([(e[:-1] + e[1:]) / 2, e[-1:]])


__all__ = ["AUTO_MAX_ROWS", "OUTER", "ROW_CANDIDATES", "bin_of", "representatives", "value_edges"]
