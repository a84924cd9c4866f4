"""Threshold and axis-aligned-rectangle learners on encoded (integer) features, via interior points.

Both work on integer codes in ``[0, size)`` (see :mod:`dpframe.domains`) and binary labels.

Thresholds (digest §5.2). For ``positive="below"`` (label 1 ⇔ x ≤ u): take the k largest positives P_k
and the k smallest negatives N_k, run an interior point on ``{p + 1 : p ∈ P_k} ∪ N_k`` over
``[0, size]`` and return ``z − 1``. Every positive outside P_k is ≤ min P_k ≤ z and every negative
outside N_k is ≥ max N_k > z, so at most the 2k points of P_k ∪ N_k are misclassified (the +1 shift
makes this hold with ties). ``positive="above"`` mirrors the codes.

Rectangles (digest §6): from the positive points, per axis slice off the points with the smallest
coordinate, take an interior point of that coordinate, delete the slice, then the same with the
largest; the box of the 2d interior points is inside the target box whenever every call succeeds.

Example:
    >>> import numpy as np
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource
    >>> x = np.arange(400, dtype=np.int64); y = (x <= 150).astype(np.int8)
    >>> z = learn_threshold_codes(Labelled.of(x, y), 400, "below", k=60, epsilon=Fraction(1), rows=1,
    ...                           rng=SeededRandomSource(0))
    >>> int(((x <= z) != (y == 1)).sum()) <= 2 * 60      # at most the 2k sliced points are wrong
    True

"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpframe.noise import RandomSource, exponential_index
from dpframe.parallel import map_chunks
from dpframe_learning.interior_point import Codes, Exponential, Stability
from dpframe_learning.slicing import SlicePlan, geometric

Direction = Literal["below", "above"]
_EM = Exponential()


@dataclass(frozen=True)
class Labelled:
    """Binary-labelled codes as two sorted arrays: the codes of the positives and of the negatives.

    Example:
        >>> import numpy as np
        >>> d = Labelled.of(np.array([4, 1, 3, 2]), np.array([0, 1, 0, 1], dtype=np.int8))
        >>> d.pos.tolist(), d.neg.tolist(), d.size
        ([1, 2], [3, 4], 4)

    """

    pos: Codes
    neg: Codes

    @classmethod
    def of(cls, x: Codes, y: npt.NDArray[np.int8]) -> Labelled:
        """From codes ``x`` and labels ``y`` (1 positive, 0 negative), in any order."""
        return cls(np.sort(x[y == 1]), np.sort(x[y == 0]))

    @property
    def size(self) -> int:
        """The number of labelled codes."""
        return int(self.pos.size + self.neg.size)


def best_errors(data: Labelled) -> tuple[int, int]:
    """The smallest training error of any threshold for ``positive="below"`` and ``"above"``.

    Each changes by at most m when a privacy unit with m rows is added or removed (every threshold's
    error does), so they are valid exponential-mechanism scores for choosing the direction. From the
    sorted codes: "below" (predict 1 iff x ≤ z) errs #{pos > z} + #{neg ≤ z}, smallest at z = −1 or at a
    positive code (between them only #{neg ≤ z} grows); "above" errs #{pos ≤ z} + #{neg > z}, smallest
    at z = −1 or a negative code. One binary search per code (numpy, on sorted keys).

    Example:
        >>> import numpy as np
        >>> best_errors(Labelled.of(np.array([1, 2, 3, 4]), np.array([1, 1, 0, 0], dtype=np.int8)))
        (0, 2)

    """
    def smallest(keys: Codes, other: Codes) -> int:
        """min(|keys|, minᵢ #{keys > keys[i]} + #{other ≤ keys[i]}): "below" on the positives, "above" on the negatives.

        Chunks of keys are searched on the thread pool.
        """
        n = int(keys.size)

        def part(a: int, b: int) -> int:     # at a key's last copy, #{keys > key} = n − (its index + 1)
            errors = n - np.arange(a + 1, b + 1) + np.searchsorted(other, keys[a:b], side="right")
            return int(errors.min(initial=n))
        return min([n, *map_chunks(part, n, 1 << 18)])

    return smallest(data.pos, data.neg), smallest(data.neg, data.pos)


def choose_direction(data: Labelled, epsilon: Fraction, rows: int, rng: RandomSource) -> Direction:
    """The exponential mechanism over the two directions with score −(best training error), ε-DP."""
    below, above = best_errors(data)
    i = exponential_index(np.array([-below, -above], dtype=np.int64), epsilon / (2 * rows), rng)
    return "below" if i == 0 else "above"


def learn_threshold_codes(data: Labelled, size: int, positive: Direction, *, k: int, epsilon: Fraction, rows: int,
                          rng: RandomSource) -> int:
    """A threshold code z (``below``: predict 1 iff x ≤ z, z ∈ [−1, size − 1]; ``above``: iff x ≥ z, z ∈ [0, size]).

    Privacy: P_k and N_k are deterministic slices (k is public), so neighbouring inputs differ by at
    most ``rows`` swaps and the exponential interior point calibrated to swap-stability is ε-DP. Reads
    only the k largest positive and k smallest negative codes of the sorted arrays.
    """
    if positive == "below":
        pos, neg = data.pos, data.neg
    else:                               # mirrored codes, still ascending
        pos, neg = (size - 1) - data.pos[::-1], (size - 1) - data.neg[::-1]
    sample = np.sort(np.concatenate([pos[max(0, pos.size - k):] + 1, neg[:k]]))
    z = _EM.run(sample, size + 1, epsilon, Fraction(0), 0.5, Stability(rows, swap=True), rng) - 1
    return z if positive == "below" else (size - 1) - z


def learn_rectangle_codes(points: npt.NDArray[np.int64], sizes: list[int], plan: SlicePlan, target: list[int],
                          rows: int, rng: RandomSource) -> list[tuple[int, int]]:
    """Per-axis code intervals [a_i, b_i] from the positive ``points`` (n × d), by 2d sliced interior points.

    Slices are cut in a total order on whole records (the axis coordinate, then the other coordinates),
    so they depend only on the multiset of points. ``target[i]`` is the slice size for axis i; with
    ``plan.method == "rsc"`` each size is padded with Geom(1 − e^{−ε₀}) noise that is never published.
    """
    d = points.shape[1]
    remaining = points
    box = []
    for i in range(d):
        ends = []
        for largest in (False, True):
            keys = [remaining[:, j] for j in reversed(range(d)) if j != i] + [remaining[:, i]]
            order = np.lexsort(keys)
            if largest:
                order = order[::-1]
            m = target[i] + (int(geometric(plan.epsilon0, 1, rng)[0]) if plan.method == "rsc" else 0)
            chosen, keep = order[:m], order[m:]
            coords = np.sort(remaining[chosen, i])
            ends.append(_EM.run(coords, sizes[i], plan.epsilon0, Fraction(0), 0.5, Stability(rows, swap=True), rng))
            remaining = remaining[np.sort(keep)]
        box.append((ends[0], ends[1]))
    return box
