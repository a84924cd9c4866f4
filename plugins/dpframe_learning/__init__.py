"""dpframe's learning plugin: interior point, threshold learning and axis-aligned rectangles.

Reached through ``Frame.interior_point``, ``Frame.learn_threshold`` and ``Frame.learn_rectangle``; the
algorithms and their privacy arguments follow ``research/003_thresholds_rsc.md`` (Cohen, Lyu, Nelson,
Sarlós, Stemmer 2022): the exponential interior point, noisy binary search, TreeLog, and
Reorder-Slice-Compute accounting. Guide: ``docs/learning.md``.
"""

from dpframe_learning.interior_point import ALGORITHMS, BinarySearch, Exponential, Stability, TreeLog
from dpframe_learning.queries import (
    InteriorPoint,
    InteriorPointQuery,
    NoAnswer,
    Rectangle,
    RectangleQuery,
    Threshold,
    ThresholdQuery,
)

__all__ = [
    "ALGORITHMS", "BinarySearch", "Exponential", "InteriorPoint", "InteriorPointQuery", "NoAnswer", "Rectangle",
    "RectangleQuery", "Stability", "Threshold", "ThresholdQuery", "TreeLog",
]
