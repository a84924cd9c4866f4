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
    assert "rank error ≤" in q.explain(dp.PureDP(1)) and sess.history().height == 0
    low, high = q.collect(dp.PureDP(1))
    # grid of 4, values count as their nearest grid point: the 1st percentile (rank 400, 101|102) may come back as 104
    assert isinstance(low, int) and 90 <= low <= 104 and 296 <= high <= 310
    assert sess.spent() == dp.PureDP(1)


def test_float_and_date_bounds() -> None:
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2), seed=3)
    low, high = sess.table("t").bounds("x", domain=(-1e6, 1e6)).collect(dp.PureDP(1))
    assert -5.5 < low < -4.6 and 4.6 < high < 5.5
    dlow, dhigh = sess.table("t").bounds("d", quantiles=(0.05, 0.95)).collect(dp.PureDP(1))
    assert dt.date(2000, 1, 1) < dlow < dt.date(2000, 4, 1) and dt.date(2002, 6, 1) < dhigh < dt.date(2002, 10, 1)


@pytest.mark.parametrize(("call", "error", "argument"), [
    (lambda f: f.bounds("x"), dp.BoundsError, "domain"),
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
