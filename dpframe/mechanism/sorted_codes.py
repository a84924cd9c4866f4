"""Each group's sorted codes, possibly known only near some ranks, completed from the data on demand.

A ``sorted`` :class:`~dpframe.mechanism.Statistic` with ``near`` set asks the backend for the codes at
ranks near ``q·n`` only: a mechanism such as the exponential-mechanism quantile reads a few hundred ranks
around each target, and sorting (or even listing) every value of a 10-million-row column is most of the
query's time. The backend may answer with the full sorted list or with a *partial* one: the group's size
``n`` and the codes at some of its ranks (the ranks it chose, by a sample of the data; any choice is
fine). :class:`SortedCodes` holds either, laid out as one virtual array (group ``g`` at positions
``starts[g] .. starts[g] + sizes[g]``), and answers two questions **exactly as the full sorted array
would**:

* :meth:`SortedCodes.at` — the codes at some positions;
* :meth:`SortedCodes.count` — ``#{x < v}`` or ``#{x ≤ v}`` inside a range of positions.

When the known ranks cannot decide an answer (a position that is not known, or a count whose boundary
falls next to an unknown rank), it first *completes* itself: it calls the ``complete`` function (the
session runs the same statistics request again, same seed, same contribution bounding, with ``near``
dropped), checks that the group sizes agree, and from then on answers from the full array. So a
mechanism reading through this class computes exactly what it would compute from the fully sorted
data, with the same random draws: the released distribution does not depend on which ranks were known,
only the time does. (Privacy: the data are read twice only in that rare case, and both reads are the
same bounded table — the request is deterministic given its seed; a size mismatch raises instead of
releasing.)

Example:
    >>> import numpy as np
    >>> full = SortedCodes.of([np.array([1, 2, 2, 5, 9])])
    >>> part = SortedCodes(np.array([5]), np.array([1, 2, 3]), np.array([2, 2, 5]),
    ...                    complete=lambda: [np.array([1, 2, 2, 5, 9])])
    >>> part.at(np.array([2, 3])).tolist(), part.known
    ([2, 5], False)
    >>> start, end = np.array([0]), np.array([5])
    >>> part.count(start, end, np.array([5]), strict=True).tolist()   # 2 ≤ 5 < … decided by ranks 2, 3
    [3]
    >>> part.count(start, end, np.array([9]), strict=False).tolist()  # rank 4 unknown: completes first
    [5]
    >>> part.known
    True

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Int64s = npt.NDArray[np.int64]


class SortedCodes:
    """Sorted codes of several groups, fully or partly known (see the module docstring).

    Args:
        sizes: ``n`` of each group (its number of codes).
        positions: the global virtual positions whose codes are known, strictly increasing.
        values: the codes at those positions (non-decreasing within each group).
        complete: returns every group's full sorted codes (one int64 array per group), or None when
            ``positions`` already covers everything. The engine supplies it and the mechanism calls it
            inside the charged run; it receives no values.

    """

    def __init__(self, sizes: npt.ArrayLike, positions: npt.ArrayLike, values: npt.ArrayLike,
                 complete: Callable[[], Sequence[Any]] | None = None) -> None:
        self.sizes: Int64s = np.asarray(sizes, dtype=np.int64)
        ends = np.cumsum(self.sizes)
        self.starts: Int64s = ends - self.sizes
        self.total = int(ends[-1]) if ends.size else 0
        self._positions: Int64s = np.asarray(positions, dtype=np.int64)
        self._values: Int64s = np.asarray(values, dtype=np.int64)
        self._complete = complete
        self._clip: tuple[int, int] | None = None
        if self._positions.size != self._values.size:
            raise ValueError("positions and values must have the same length")
        if self._positions.size == self.total:
            self._positions = np.arange(self.total, dtype=np.int64)
        elif complete is None:
            raise ValueError("partial sorted codes need a `complete` function")

    @classmethod
    def of(cls, groups: SortedCodes | Sequence[Any] | npt.NDArray[Any]) -> SortedCodes:
        """``groups`` as is if already :class:`SortedCodes`, else from one sorted int64 array per group."""
        if isinstance(groups, SortedCodes):
            return groups
        arrays = [np.asarray(g, dtype=np.int64) for g in groups]
        values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        return cls([a.size for a in arrays], np.arange(values.size), values)

    @property
    def known(self) -> bool:
        """Whether every position is known (no completion can happen any more)."""
        return self._positions.size == self.total

    def known_positions(self) -> Int64s:
        """The global positions whose codes are known (every position once complete)."""
        return self._positions.copy()

    def clipped(self, lo: int, hi: int) -> SortedCodes:
        """The same codes clipped to ``[lo, hi]`` (a monotone map: still sorted; completion clips too)."""
        out = SortedCodes(self.sizes, self._positions, np.clip(self._values, lo, hi), self._complete)
        out._clip = (lo, hi)
        return out

    def at(self, pos: Int64s) -> Int64s:
        """The codes at the global positions ``pos`` (each inside its group)."""
        if not self.known:
            k = np.searchsorted(self._positions, pos)
            hit = k < self._positions.size
            hit[hit] = self._positions[k[hit]] == pos[hit]
            if hit.all():
                out: Int64s = self._values[k]
                return out
            self._fill()
        out = self._values[pos]
        return out

    def count(self, start: Int64s, end: Int64s, v: Int64s, *, strict: bool) -> Int64s:
        """``#{x < v[i]}`` (``strict``) or ``#{x ≤ v[i]}`` among the positions ``[start[i], end[i])``.

        Each range lies inside one group. With partial codes, a binary search over the known positions
        finds the first known position p whose code fails the test; the count is ``p − start`` if ``p``
        is the range's first position or the position before ``p`` is known (it passes, so everything
        before does), and ``end − start`` if no known code fails and the range's last position is known.
        Otherwise the codes are completed and the count is taken from the full array.
        """
        if not self.known:
            lo = np.searchsorted(self._positions, start)
            hi = np.searchsorted(self._positions, end)
            k = search_ranges(self._values, lo, hi, v, strict)
            found = k < hi
            p = np.where(found, self._positions[np.minimum(k, max(self._positions.size - 1, 0))], end) \
                if self._positions.size else end
            before_known = (k > lo) & (self._positions[np.maximum(k - 1, 0)] == p - 1) if self._positions.size \
                else np.zeros(k.size, dtype=bool)
            decided = (p == start) | before_known
            if decided.all():
                out: Int64s = p - start
                return out
            self._fill()
        k = search_ranges(self._values, start, end, v, strict)
        out = k - start
        return out

    def _fill(self) -> None:
        """Replace the partial codes by the full sorted codes (see the module docstring)."""
        assert self._complete is not None
        groups = [np.asarray(g, dtype=np.int64) for g in self._complete()]
        sizes = np.array([g.size for g in groups], dtype=np.int64)
        if sizes.shape != self.sizes.shape or np.any(sizes != self.sizes):
            raise RuntimeError("the data changed between two reads of one query (group sizes differ); "
                               "nothing was released")
        values = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
        if self._clip is not None:
            values = np.clip(values, *self._clip)
        self._positions, self._values = np.arange(self.total, dtype=np.int64), values


def search_ranges(values: Int64s, lo: Int64s, hi: Int64s, v: Int64s, strict: bool) -> Int64s:
    """Per i, the first index k in [lo[i], hi[i]) with values[k] ≥ v[i] (``strict``) or > v[i], else hi[i].

    ``values[lo[i]:hi[i]]`` must be sorted. Vectorised binary search (a ``searchsorted`` per range).

    Example:
        >>> search_ranges(np.array([1, 3, 3, 0, 2]), np.array([0, 3]), np.array([3, 5]), np.array([3, 1]),
        ...               True).tolist()
        [1, 4]

    """
    lo, hi = lo.copy(), hi.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        x = values[np.where(active, mid, 0)]
        right = active & ((x < v) if strict else (x <= v))
        lo = np.where(right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)
