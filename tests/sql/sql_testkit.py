"""Shared data and sessions for the SQL tests.

``visits``: 300 users with at most 8 rows each (so ``max_rows=10`` never drops a row and the Polars and
DuckDB backends see identical bounded data), cities with a NULL and a city missing from the public
table, NaN / ±inf / NULL spends, NULL ages, dates. ``cities``: a public lookup table.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import polars as pl

import dpframe as dp

CITIES = ["Amsterdam", "Berlin", "Cairo", "Delhi", "Lima", "Oslo"]
DEVICES = ["android", "ios", "web"]


def _visits() -> pl.DataFrame:
    rng = np.random.default_rng(2024)
    sizes = rng.integers(1, 9, 300)
    user = np.repeat(np.arange(300), sizes)
    n = user.size
    spend = rng.gamma(2.0, 40.0, n)
    spend[rng.random(n) < 0.03] = np.nan
    spend[rng.random(n) < 0.01] = np.inf
    city = rng.choice([*CITIES, "Atlantis"], n).astype(object)
    city[rng.random(n) < 0.03] = None
    age = rng.integers(10, 90, n).astype(object)
    age[rng.random(n) < 0.05] = None
    return pl.DataFrame({
        "user_id": user,
        "city": pl.Series(city.tolist(), dtype=pl.String),
        "device": rng.choice(DEVICES, n),
        "age": pl.Series(age.tolist(), dtype=pl.Int64),
        "spend": pl.Series(spend).set(pl.Series(rng.random(n) < 0.03), None),
        "day": [dt.date(2023, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 730, n)],
    })


VISITS = _visits()
PUBLIC_CITIES = pl.DataFrame({
    "name": [*CITIES, "Zurich"],
    "region": ["europe", "europe", "africa", "asia", "americas", "europe", "europe"],
    "population": [900_000, 3_700_000, 10_000_000, 32_000_000, 10_000_000, 700_000, 400_000],
})
DUP_CITIES = pl.DataFrame({"name": ["Oslo", "Oslo"], "region": ["a", "b"]})
REGIONS = sorted(set(PUBLIC_CITIES["region"].to_list()))
# Pre-joined tables: what the frame API (which has no joins) queries to get the same rows.
VISITS_INNER = VISITS.join(PUBLIC_CITIES, left_on="city", right_on="name", how="inner", maintain_order="left")
VISITS_LEFT = VISITS.join(PUBLIC_CITIES, left_on="city", right_on="name", how="left", maintain_order="left",
                          coalesce=False).drop("name")
UNIT = dp.PrivacyUnit("user_id", max_rows=10)
TOTAL = dp.ApproxDP(1000.0, 1e-3)


def make_session(backend: str = "polars", seed: int | None = 42, **extra: Any) -> dp.Session:
    """A session over ``visits`` with public keys, bounds and the public ``cities`` table."""
    kwargs: dict[str, Any] = dict(
        privacy_unit=UNIT, budget=TOTAL, backend=backend, seed=seed,
        public_tables={"cities": PUBLIC_CITIES, "dupcities": DUP_CITIES},
        public_keys={"visits.city": CITIES, "visits.device": DEVICES},
        bounds={"visits.spend": (0, 250)},
    )
    kwargs.update(extra)
    return dp.Session({"visits": VISITS, "vj": VISITS_INNER, "vl": VISITS_LEFT}, **kwargs)
