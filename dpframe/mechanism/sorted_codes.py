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

import threading
from collections.abc import Callable, Iterator, Sequence
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

    def __init__(self, sizes: npt.ArrayLike, positions: npt.ArrayLike | None, values: npt.ArrayLike,
                 complete: Callable[[], Sequence[Any]] | None = None) -> None:
        self.sizes: Int64s = np.asarray(sizes, dtype=np.int64)
        ends = np.cumsum(self.sizes)
        self.starts: Int64s = ends - self.sizes
        self.total = int(ends[-1]) if ends.size else 0
        vals: Int64s = np.asarray(values, dtype=np.int64)
        known: Int64s | None = None if positions is None else np.asarray(positions, dtype=np.int64)
        if known is None or known.size == self.total:
            if vals.size != self.total:
                raise ValueError("values must hold every code when every position is known")
            known = None                            # every position known (no index array needed)
        elif known.size != vals.size:
            raise ValueError("positions and values must have the same length")
        elif complete is None:
            raise ValueError("partial sorted codes need a `complete` function")
        # (known positions or None for all, codes): one attribute, replaced at once on completion, so a
        # reader on another thread never mixes the partial positions with the full codes
        self._state: tuple[Int64s | None, Int64s] = (known, vals)
        self._complete = complete
        self._clip: tuple[int, int] | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, groups: SortedCodes | Sequence[Any] | npt.NDArray[Any]) -> SortedCodes:
        """``groups`` as is if already :class:`SortedCodes`, else from one sorted int64 array per group."""
        if isinstance(groups, SortedCodes):
            return groups
        arrays = [np.asarray(g, dtype=np.int64) for g in groups]
        values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        return cls([a.size for a in arrays], None, values)

    @classmethod
    def lists(cls, values: Int64s, offsets: Int64s) -> SortedCodes:
        """Every group's sorted codes from one buffer: group g is ``values[offsets[g]:offsets[g + 1]]`` (no copy)."""
        return cls(np.diff(offsets), None, values[offsets[0]:offsets[-1]] if offsets.size else values[:0])

    @property
    def known(self) -> bool:
        """Whether every position is known (no completion can happen any more)."""
        return self._state[0] is None

    def known_positions(self) -> Int64s:
        """The global positions whose codes are known (every position once complete)."""
        known = self._state[0]
        return np.arange(self.total, dtype=np.int64) if known is None else known.copy()

    def is_known(self, pos: Int64s) -> npt.NDArray[np.bool_]:
        """Whether the code at each global position is known (reading it with :meth:`at` cannot complete).

        Example:
            >>> part = SortedCodes(np.array([4]), np.array([0, 2]), np.array([1, 5]), complete=lambda: [])
            >>> part.is_known(np.array([0, 1, 2])).tolist()
            [True, False, True]

        """
        known = self._state[0]
        if known is None:
            return np.ones(pos.shape, dtype=bool)
        k = np.searchsorted(known, pos)
        hit = k < known.size
        hit[hit] = known[k[hit]] == pos[hit]
        return hit

    def __len__(self) -> int:
        """The number of groups."""
        return int(self.sizes.size)

    def __getitem__(self, g: int) -> Int64s:
        """Group ``g``'s whole sorted codes (as :meth:`group`): the object behaves as a sequence of arrays."""
        return self.group(g)

    def __iter__(self) -> Iterator[Int64s]:
        return (self.group(g) for g in range(len(self)))

    def group(self, g: int) -> Int64s:
        """Group ``g``'s whole sorted codes (completing partial codes first)."""
        out: Int64s = self._full()[self.starts[g]:self.starts[g] + self.sizes[g]]
        return out

    def clipped(self, lo: int, hi: int) -> SortedCodes:
        """The same codes clipped to ``[lo, hi]`` (a monotone map: still sorted; completion clips too).

        Codes already inside are shared, not copied (the usual case: only float rounding at an upper bound
        can reach past it); for full codes that is read off each group's first and last code, not a scan.
        """
        known, values = self._state
        if known is None:              # every group sorted in the buffer: its ends are its extremes
            ends = self.starts[self.sizes > 0]
            first, last = values[ends], values[ends + self.sizes[self.sizes > 0] - 1]
        else:                          # the known codes (a few windows): scanned
            first = last = values
        inside = not first.size or (int(first.min()) >= lo and int(last.max()) <= hi)
        out = SortedCodes(self.sizes, known, values if inside else np.clip(values, lo, hi), self._complete)
        out._clip = (lo, hi)
        return out

    def at(self, pos: Int64s) -> Int64s:
        """The codes at the global positions ``pos`` (each inside its group)."""
        known, values = self._state
        if known is not None:
            k = np.searchsorted(known, pos)
            hit = k < known.size
            hit[hit] = known[k[hit]] == pos[hit]
            if hit.all():
                out: Int64s = values[k]
                return out
            values = self._full()
        out = values[pos]
        return out

    def at_where(self, pos: Int64s, mask: npt.NDArray[np.bool_], default: Any = 0) -> Int64s:
        """The codes at ``pos`` where ``mask`` holds, ``default`` (a scalar or an array like ``pos``) elsewhere.

        Only the masked positions count as read: partial codes complete only if one of those is unknown.
        (Complete codes are gathered everywhere, clipped to the buffer, and the rest replaced: faster.)
        """
        known, values = self._state
        if known is None and values.size:
            out: Int64s = np.take(values, pos, mode="clip")
            if not mask.all():
                np.copyto(out, default, where=~mask)
            return out
        out = np.broadcast_to(np.asarray(default, dtype=np.int64), pos.shape).copy()
        out[mask] = self.at(pos[mask])
        return out

    def count(self, start: Int64s, end: Int64s, v: Int64s, *, strict: bool) -> Int64s:
        """``#{x < v[i]}`` (``strict``) or ``#{x ≤ v[i]}`` among the positions ``[start[i], end[i])``.

        Each range lies inside one group. With partial codes, a binary search over the known positions
        finds the first known position p whose code fails the test; the count is ``p − start`` if ``p``
        is the range's first position or the position before ``p`` is known (it passes, so everything
        before does), and ``end − start`` if no known code fails and the range's last position is known.
        Otherwise the codes are completed and the count is taken from the full array.
        """
        known, values = self._state
        if known is not None:
            lo = np.searchsorted(known, start)
            hi = np.searchsorted(known, end)
            k = search_ranges(values, lo, hi, v, strict)
            found = k < hi
            p = np.where(found, known[np.minimum(k, max(known.size - 1, 0))], end) if known.size else end
            before_known = (k > lo) & (known[np.maximum(k - 1, 0)] == p - 1) if known.size \
                else np.zeros(k.size, dtype=bool)
            decided = (p == start) | before_known
            if decided.all():
                out: Int64s = p - start
                return out
            values = self._full()
        k = search_ranges(values, start, end, v, strict)
        out = k - start
        return out

    def _full(self) -> Int64s:
        """Every code, completing partial codes first (once, whichever thread asks first; see the module docstring)."""
        known, values = self._state
        if known is None:
            return values
        with self._lock:
            known, values = self._state
            if known is None:
                return values
            assert self._complete is not None
            groups = [np.asarray(g, dtype=np.int64) for g in self._complete()]
            sizes = np.array([g.size for g in groups], dtype=np.int64)
            if sizes.shape != self.sizes.shape or np.any(sizes != self.sizes):
                raise RuntimeError("the data changed between two reads of one query (group sizes differ); "
                                   "nothing was released")
            full = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
            if self._clip is not None:
                full = np.clip(full, *self._clip)
            self._state = (None, full)
            return full


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


def ranges(start: Int64s, end: Int64s) -> Int64s:
    """Concatenated ``arange(start[i], end[i])`` (vectorised).

    Example:
        >>> ranges(np.array([3, 0, 7]), np.array([5, 0, 9])).tolist()
        [3, 4, 7, 8]

    """
    count = end - start
    total = int(count.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(start - (np.cumsum(count) - count), count)
    out: Int64s = np.arange(total, dtype=np.int64) + shift
    return out
