"""Deterministic synthetic datasets for demos, docs and tests (public, generated; no real people).

Example:
    >>> visits(rows=1000).columns
    ['user_id', 'age', 'city', 'spend', 'visits']

"""

from __future__ import annotations

import numpy as np
import polars as pl

from dpframe.errors import ArgumentError
from dpframe.signatures import checked

CITIES = ("Amsterdam", "Berlin", "Copenhagen", "Dublin", "Edinburgh", "Florence", "Geneva", "Helsinki",
          "Istanbul", "Jena", "Krakow", "Lisbon", "Madrid", "Naples", "Oslo", "Porto", "Quimper", "Riga",
          "Stockholm", "Tallinn", "Utrecht", "Vienna", "Warsaw", "Ypres", "Zurich")


MAX_ROWS = 100_000_000
"""The most rows :func:`visits` generates (about 4 GB in memory)."""


@checked
def visits(rows: int = 200_000, users: int | None = None, seed: int = 2024) -> pl.DataFrame:
    """A 'visits' table: each user visits a few times (Zipf-popular cities, skewed spend).

    Columns: ``user_id`` (int), ``age`` (int, a few nulls), ``city`` (str), ``spend`` (float, a few NaN
    and outliers above 500), ``visits`` (int). ``rows`` from 1 to :data:`MAX_ROWS`; ``users`` (default
    ``rows // 5``) at least 1; ``seed`` an int ≥ 0: otherwise an ArgumentError naming it.

    Example:
        >>> visits(rows=10, users=2)["user_id"].n_unique() <= 2
        True

    """
    _whole(rows, "rows", 1, MAX_ROWS, "pass e.g. rows=200_000")
    if users is not None:
        _whole(users, "users", 1, MAX_ROWS, "pass a number of users ≥ 1, or None for rows // 5")
    _whole(seed, "seed", 0, 2**63 - 1, "pass an int ≥ 0")
    rng = np.random.default_rng(seed)
    users = users or max(1, rows // 5)
    user = rng.integers(0, users, rows)
    user_age = rng.integers(12, 90, users)
    p = 1.0 / np.arange(1, len(CITIES) + 1) ** 1.1
    city = rng.choice(np.array(CITIES), rows, p=p / p.sum())
    spend = np.round(rng.lognormal(3.5, 0.9, rows), 2)
    spend[rng.random(rows) < 0.002] = np.nan
    age = pl.Series("age", user_age[user]).scatter(np.flatnonzero(rng.random(rows) < 0.01), None)
    return pl.DataFrame({"user_id": user, "age": age, "city": city, "spend": spend,
                         "visits": rng.integers(1, 6, rows)})


def _whole(value: object, argument: str, low: int, high: int, fix: str) -> None:
    """An ArgumentError naming ``argument`` unless ``value`` is an int in [low, high] (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not low <= value <= high:
        raise ArgumentError(f"expected a whole number from {low:,} to {high:,}, got {value!r}", argument=argument,
                            fix=fix)


__all__ = ["CITIES", "MAX_ROWS", "visits"]
