"""Shared types and constants of the numerics modules.

Example:
    >>> import numpy as np
    >>> f: Fn = lambda a: np.asarray(a * 0.5)
    >>> float(f(np.array([2.0]))[0])
    1.0

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Array = np.ndarray
#: A curve evaluated on an array of points (orders α, or privacy losses ε).
Fn = Callable[[Array], Array]

#: Evaluations of a profile or RDP function are done in blocks of at most this many array entries.
BLOCK = 1 << 21

#: Profiles are evaluated at ε ≤ this (δ is non-increasing in ε, so a smaller ε only raises δ: sound).
U = 2.0 ** -53
"""The unit roundoff of float64 (round to nearest): every correctly rounded operation has relative error ≤ U."""

E_MAX = 1e300


def special() -> Any:
    """``scipy.special``, imported lazily (slow to import, and ``import dpframe`` must stay fast)."""
    import scipy.special

    return scipy.special
