"""Review 53i: the query families shipped as plugins (quantiles, learning, top-k, PATE, histogram) as an adversary.

**Released float keys carried one row's bits.** A float group key from the data was released with the bits of
whichever row the backend met first in its group: ``-0.0`` and ``0.0`` (and NaNs with different sign or payload)
are one group — equal keys — but the released key was ``-0.0`` when the first row held ``-0.0`` and ``0.0``
otherwise. Adding one row at the front of a table (or changing one row's sign of zero) changed the released
key's sign bit with probability 1, whatever the noise: `group_by(x).top_k(...)`, `group_by(x).agg(...)` and
SQL's ``GROUP BY x`` on Polars and DuckDB. The reader now releases every float key column canonically (``0.0``,
the one quiet NaN ``0x7ff8000000000000``).
"""

from __future__ import annotations

import struct
import warnings

import numpy as np
import polars as pl
import pytest

import dpframe as dp

NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8_0000_0000_0001))[0]


def _bits(values: list[float]) -> list[int]:
    return [struct.unpack("<Q", struct.pack("<d", v))[0] for v in values]


def _session(first: float, backend: str, dtype: pl.DataType = pl.Float64) -> dp.Session:
    """A table whose key 0.0 has 1,000 rows of each zero and 1,000 NaNs, with ``first`` in front."""
    xs = np.array([first] + [0.0] * 1000 + [-0.0] * 1000 + [float("nan")] * 1000)
    frame = pl.DataFrame({"x": pl.Series(xs, dtype=dtype)})
    return dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(100, 1e-3),
                      backend=backend, seed=1)


def _released(sess: dp.Session, how: str) -> list[float]:
    t = sess.table("t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "top_k":
            out = t.group_by("x").top_k(k=2).collect(dp.ApproxDP(10, 1e-5))
        elif how == "agg":
            out = t.group_by("x").agg(dp.len()).collect(dp.ApproxDP(10, 1e-5))
        else:
            out = sess.sql("SELECT x, COUNT(*) AS n FROM t GROUP BY x").collect(dp.ApproxDP(10, 1e-5))
    assert isinstance(out, pl.DataFrame)
    return sorted(out["x"].cast(pl.Float64).to_list(), key=lambda v: (v != v, v))


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("how", ["top_k", "agg", "sql"])
def test_a_released_float_key_does_not_carry_the_first_rows_sign_or_payload(backend: str, how: str) -> None:
    seen: set[tuple[int, ...]] = set()
    for first in (-0.0, 0.0, NEG_NAN, float("nan")):
        keys = _released(_session(first, backend), how)
        assert len(keys) == 2, keys              # 0.0 and NaN, both far above any threshold
        seen.add(tuple(_bits(keys)))
    assert seen == {(0x0, 0x7FF8_0000_0000_0000)}, [[hex(b) for b in s] for s in seen]


@pytest.mark.parametrize("first", [-0.0, NEG_NAN])
def test_float32_keys_are_released_canonically_too(first: float) -> None:
    keys = _released(_session(first, "polars", pl.Float32), "agg")
    assert _bits(keys) == [0x0, 0x7FF8_0000_0000_0000]


# --- PATE: a σ the exact sampler cannot draw was charged, then failed --------------------------------------------
#
# ``MultiLabelPATE(sigma=1e30).collect(session, votes)`` reserved T·ρ, then the discrete Gaussian sampler refused
# σ² > 2¹¹⁰ (σ > 2⁵⁵) while running: "the query failed while running; its cost stays charged". σ is public, so the
# refusal belongs before the charge, at construction, naming ``sigma``.

def _votes() -> pl.DataFrame:
    return pl.DataFrame({"query": [0, 0, 0, 1, 1, 1], "label": ["a", "b", "c"] * 2,
                         "vote": [700, 0, 5, 3, 650, 640]})


def _ledger_session() -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"a": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ZCDP(10.0**300, 0.5), seed=1)


@pytest.mark.parametrize("sigma", [2.0**55 + 2**3, 1e30])
def test_pate_refuses_a_sigma_beyond_the_sampler_before_charging(sigma: float) -> None:
    from dpframe_topk import MultiLabelPATE

    sess = _ledger_session()
    with pytest.raises(dp.errors.PlanError, match="sigma") as err:
        MultiLabelPATE(sigma=sigma).collect(sess, _votes())
    assert err.value.argument == "sigma"
    assert sess.history().height == 0


def test_pate_runs_at_the_largest_sigma_the_sampler_draws() -> None:
    from dpframe_topk import MultiLabelPATE

    sess = _ledger_session()
    out = MultiLabelPATE(sigma=2**55).collect(sess, _votes())
    assert out.height == 2 and sess.history().height == 1


# --- a δ with a 10,000-digit denominator: a raw ValueError from the ledger ---------------------------------------
#
# ``dp.ZCDP(ρ, Fraction(1, 10**10000))`` (an exact δ, as a remote analyst may send one) and PATE's
# ``delta_t=Fraction(1, 10**10000)`` reached the ledger, whose ``str`` of the denominator passed Python's 4,300-digit
# limit: a bare ``ValueError`` from ``collect``. The accountant now rounds such a charge up to a multiple of 2^-2048
# (over-reporting by less than 2^-2048, as it already does for totals) and the query runs.

TINY = __import__("fractions").Fraction(1, 10**10000)


def test_a_zcdp_budget_with_a_huge_denominator_delta_is_charged_not_a_value_error() -> None:
    sess = dp.Session({"t": pl.DataFrame({"a": [1] * 100})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ZCDP(10, 0.5), seed=1)
    out = sess.table("t").group_by("a").agg(dp.len()).collect(dp.ZCDP(1, TINY))
    assert isinstance(out, pl.DataFrame)
    assert sess.history().height == 1
    spent = sess.spent()
    assert TINY <= spent.delta <= TINY + __import__("fractions").Fraction(1, 2**2048)


def test_pate_with_a_huge_denominator_delta_t_is_charged_not_a_value_error() -> None:
    from dpframe_topk import MultiLabelPATE

    sess = _ledger_session()
    out = MultiLabelPATE(delta_t=TINY).collect(sess, _votes())
    assert out.height == 2 and sess.history().height == 1


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("kind", ["list", "array", "struct"])
def test_floats_inside_nested_keys_are_released_canonically(backend: str, kind: str) -> None:
    """DuckDB released ``[-0.0]`` / ``{'a': -0.0}`` when the first row of the group held it."""
    dtype = {"list": pl.List(pl.Float64), "array": pl.Array(pl.Float64, 1),
             "struct": pl.Struct({"a": pl.Float64})}[kind]
    released = set()
    for first in (-0.0, 0.0, NEG_NAN):
        def key(v: float) -> object:
            return {"a": v} if kind == "struct" else [v]
        rows = [key(first)] + [key(0.0)] * 1000 + [key(-0.0)] * 1000 + [key(float("nan"))] * 1000 + [None] * 1000
        sess = dp.Session({"t": pl.DataFrame({"k": pl.Series(rows, dtype=dtype)})},
                          privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(100, 1e-3), backend=backend, seed=1)
        out = sess.table("t").group_by("k").agg(dp.len()).collect(dp.ApproxDP(10, 1e-5))
        assert out.height == 3                    # 0.0, NaN and null: null stays null
        inner = out["k"].struct.field("a") if kind == "struct" else out["k"].cast(pl.List(pl.Float64)).list.first()
        released.add(tuple(sorted(_bits([v for v in inner.to_list() if v is not None]))))
        assert inner.null_count() == 1
    assert released == {(0x0, 0x7FF8_0000_0000_0000)}
