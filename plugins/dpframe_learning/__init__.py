"""dpframe's learning plugin: interior point, threshold learning and axis-aligned rectangles.

Reached through ``Frame.interior_point``, ``Frame.learn_threshold`` and ``Frame.learn_rectangle``; the
algorithms and their privacy arguments follow ``research/003_thresholds_rsc.md`` (Cohen, Lyu, Nelson,
Sarlós, Stemmer 2022): the exponential interior point, noisy binary search, TreeLog, and
Reorder-Slice-Compute accounting. Guide: ``docs/learning.md``.

The interior-point algorithms are registered through the ``dpframe_methods`` hook, like a
third-party package's would be (``docs/plugins.md``).
"""

from dpframe.plugin import RegisterFamily, RegisterMethod, hookimpl
from dpframe_learning.interior_point import (
    ALGORITHMS,
    BUILTIN,
    FAMILY,
    BinarySearch,
    Exponential,
    InteriorPointAlgorithm,
    Stability,
    TreeLog,
    algorithms,
)
from dpframe_learning.queries import (
    FAMILIES,
    InteriorPoint,
    InteriorPointQuery,
    NoAnswer,
    Rectangle,
    RectangleQuery,
    Threshold,
    ThresholdQuery,
)

__all__ = [
    "ALGORITHMS", "BinarySearch", "Exponential", "InteriorPoint", "InteriorPointAlgorithm", "InteriorPointQuery",
    "NoAnswer", "Rectangle", "RectangleQuery", "Stability", "Threshold", "ThresholdQuery", "TreeLog", "algorithms",
]


@hookimpl
def dpframe_query_families(register: RegisterFamily) -> None:
    """The learning query families: interior_point, learn_threshold, learn_rectangle."""
    for family in FAMILIES:
        register(family)


@hookimpl
def dpframe_methods(register: RegisterMethod) -> None:
    """The built-in interior-point algorithms: exponential, binary_search, treelog."""
    for algorithm in BUILTIN:
        register(algorithm, family=FAMILY)
