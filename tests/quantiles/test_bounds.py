"""Frame.bounds: private clipping bounds over a wide public domain, with a visible cost."""

from __future__ import annotations

import datetime as dt

import numpy as np
import polars as pl
import pytest

import dpframe as dp

DATA = pl.DataFrame({
    "n": np.repeat(np.arange(100, 300), 200),
    "x": np.random.default_rng(0).uniform(-5, 5, 40_000),
    "d": [dt.date(2000, 1, 1) + dt.timedelta(days=int(k % 1000)) for k in range(40_000)],
    "s": ["a"] * 40_000,
})


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_integer_bounds_on_the_whole_int64_range(backend: str) -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2), backend=backend, seed=2)
    q = sess.table("t").bounds("n")
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    assert "inwards" in q.explain(dp.PureDP(1)) and sess.history().height == 0
    low, high = q.collect(dp.PureDP(1))
    # grid of 4, values count as their nearest grid point: the 1st percentile (rank 400, 101|102) may come back as 104
    assert isinstance(low, int) and 90 <= low <= 104 and 296 <= high <= 310
    assert sess.spent() == dp.PureDP(1)


def test_float_and_date_bounds() -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(3), seed=3)
    low, high = sess.table("t").bounds("x", domain=(-1e6, 1e6)).collect(dp.PureDP(1))
    assert -6 < low < -4.6 and 4.6 < high < 6          # the edges of the bins holding the 1% and 99% (every 19%)
    assert -6 < sess.table("t").bounds("x").collect(dp.PureDP(1))[0] < -4.6        # no domain needed
    dlow, dhigh = sess.table("t").bounds("d", quantiles=(0.05, 0.95)).collect(dp.PureDP(1))
    assert dt.date(2000, 1, 1) < dlow < dt.date(2000, 4, 1) and dt.date(2002, 6, 1) < dhigh < dt.date(2002, 10, 1)


@pytest.mark.parametrize(("call", "error", "argument"), [
    (lambda f: f.bounds("x", resolution=-1), dp.BoundsError, "resolution"),
    (lambda f: f.bounds("s"), dp.SchemaError, "s"),
    (lambda f: f.bounds("nope"), dp.SchemaError, "column"),
    (lambda f: f.bounds("n", quantiles=(0.5,)), dp.DPFrameError, "quantiles"),
    (lambda f: f.bounds("n", quantiles=(0.1, 1.2)), dp.DPFrameError, "quantiles"),
    (lambda f: f.bounds("n", domain=(5, 1)), dp.BoundsError, "bounds['n']"),
])
def test_bad_input_is_refused_before_anything_is_charged(call: object, error: type, argument: str) -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2), seed=3)
    with pytest.raises(error) as info:
        call(sess.table("t"))  # type: ignore[operator]
    assert info.value.argument == argument and info.value.fix
    assert sess.history().height == 0


def test_heavy_tailed_user_level_bounds_are_near_the_central_mass() -> None:
    """Issue 17: a delay-like column, units of up to ~500 rows: near the 1%/99% quantiles, not the extremes."""
    rng = np.random.default_rng(5)
    rows = np.minimum(np.ceil(rng.pareto(1.5, 3000) * 30), 500).astype(int)
    unit = np.repeat(np.arange(rows.size), rows)
    delay = np.round(rng.standard_t(1.5, unit.size) * 12 + 5)
    sess = dp.Session({"t": pl.DataFrame({"u": unit, "delay": delay.astype(np.int64)})},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=100), budget=dp.PureDP(1), seed=4)
    low, high = sess.table("t").bounds("delay").collect(dp.PureDP(1))
    # the range covers the central 90% and stays inside the central 99.8% (the extremes are ±10,000s)
    q, share = np.quantile(delay, [0.001, 0.05, 0.95, 0.999]), lambda v: float(np.mean(delay < v))
    assert q[0] < low <= q[1] and q[2] <= high < q[3], (low, high, q, share(low), share(high))


def test_explain_names_the_privacy_unit_it_protects() -> None:
    """As every other query's explain, the bounds query lists the contribution bound its rank error assumes."""
    sess = dp.Session({"t": DATA.with_columns(u=pl.int_range(pl.len()) % 500)},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=3), budget=dp.PureDP(2), seed=2)
    text = str(sess.table("t").bounds("n").explain(dp.PureDP(1)))
    assert "  2. ContributionBound: unit 'u': ≤ 3 rows per unit" in text, text
