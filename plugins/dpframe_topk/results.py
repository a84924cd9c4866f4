"""The typed outcomes of a top-k query other than a full key set: :class:`TopKFailed` and :class:`TopKPartial`.

``collect()`` returns a ``pl.DataFrame`` with exactly the requested number of keys (sorted by key), or one
of these. Both are falsy, so ``if isinstance(out, pl.DataFrame)`` (or ``if out``) is the success test, and
neither can be mistaken for "no keys": a :class:`TopKFailed` says the set could not be released at this
budget, a :class:`TopKPartial` (a subclass) carries the keys that *were* released — fewer than ``k``.

Example:
    >>> import polars as pl
    >>> out = TopKPartial(3, "stable", "the patch found 1 of the 3 keys", keys=pl.DataFrame({"city": ["a"]}))
    >>> bool(out), isinstance(out, TopKFailed), out.k_returned
    (False, True, 1)

"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


@dataclass(frozen=True)
class TopKFailed:
    """The typed "failed" outcome: no key set is released.

    It is *not* an empty result: the data may well have a top-k, but this budget could not release it
    (for StableTopK: the k-th and (k+1)-th scores were not separated enough for the PTR test to pass).
    ``k`` is the size that was tested or requested. The cost stays charged (the failure itself is a
    private, accounted outcome; retrying with fresh noise costs again).
    """

    k: int
    method: str
    reason: str = "the PTR stability test did not pass (gap at k too small for this budget)"

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True, eq=False)
class TopKPartial(TopKFailed):
    """A fixed-``k`` query that released fewer than ``k`` keys (``k_returned`` of them, in ``keys``).

    Happens only over keys from the data (unknown domain), where the last keys can come only from the
    limited-domain mechanism, which may stop early (its ⊥ item), or, in zCDP sessions, where no
    zCDP-accounted patch for an unknown domain exists (see ``docs/topk.md``). ``keys`` is sorted by key
    and has the same columns a full result would have.
    """

    keys: pl.DataFrame = field(default_factory=pl.DataFrame)

    @property
    def k_returned(self) -> int:
        """How many keys were released (0 < k_returned < k)."""
        return self.keys.height


__all__ = ["TopKFailed", "TopKPartial"]
