"""Review 53i: the query families shipped as plugins (quantiles, learning, top-k, PATE, histogram) as an adversary.

**Released float keys carried one row's bits.** A float group key from the data was released with the bits of
whichever row the backend met first in its group: ``-0.0`` and ``0.0`` (and NaNs with different sign or payload)
are one group — equal keys — but the released key was ``-0.0`` when the first row held ``-0.0`` and ``0.0``
otherwise. Adding one row at the front of a table (or changing one row's sign of zero) changed the released
key's sign bit with probability 1, whatever the noise: `group_by(x).top_k(...)`, `group_by(x).agg(...)` and
SQL's ``GROUP BY x`` on Polars and DuckDB (and floats inside list, array and struct keys on DuckDB). The reader now
releases every float key column canonically (``0.0``, the one quiet NaN ``0x7ff8000000000000``).

Also here: PATE parameters the sampler or a float cannot hold (charged, then failed; raw OverflowError /
ValueError), a δ or a bound too long for ``str`` (raw ValueError), ``frame.bounds`` releasing an empty range
(x, x) that every later query refused, its default domain on a time-zone-aware column, and each family's charge
checked against a hand-computed value.
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
# (over-reporting by less than 2^-2048, as it already does for totals) and the query runs (since review 53e a number
# past 4,096 bits is refused when the budget is made).

TINY = __import__("fractions").Fraction(1, 10**10000)


def test_a_zcdp_budget_with_a_huge_denominator_delta_is_charged_not_a_value_error() -> None:
    # Since review 53e a budget number past 4,096 bits is refused when made (naming it, nothing charged); one between
    # 2,048 and 4,096 bits is charged rounded up to a multiple of 2^-2048, as totals are.
    with pytest.raises(dp.BudgetError) as err:
        dp.ZCDP(1, TINY)
    assert err.value.argument == "delta"
    wide = __import__("fractions").Fraction(1, 3**1900)        # ~3,011 bits
    sess = dp.Session({"t": pl.DataFrame({"a": [1] * 100})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ZCDP(10, 0.5), seed=1)
    out = sess.table("t").group_by("a").agg(dp.len()).collect(dp.ZCDP(1, wide))
    assert isinstance(out, pl.DataFrame)
    assert sess.history().height == 1
    spent = sess.spent()
    assert wide < spent.delta <= wide + __import__("fractions").Fraction(1, 2**2048)


# PATE reads its parameters as floats in explain() and its RDP curves: ``explain()`` raised a raw OverflowError for
# ``gumbel_scale=10**400`` (a query that runs), and an RDP session a raw ValueError for ``gumbel_scale=1/10**5000``.
# Each parameter must now be a float64-sized number, refused when the MultiLabelPATE is built.

@pytest.mark.parametrize(("argument", "value"), [("delta_t", TINY), ("gumbel_scale", 10**400),
                                                 ("gumbel_scale", __import__("fractions").Fraction(1, 10**5000)),
                                                 ("sigma", __import__("fractions").Fraction(1, 10**400))])
def test_pate_refuses_parameters_beyond_float64(argument: str, value: object) -> None:
    from dpframe_topk import MultiLabelPATE

    with pytest.raises(dp.errors.PlanError, match="float64") as err:
        MultiLabelPATE(**{argument: value})  # type: ignore[arg-type]
    assert err.value.argument == argument


@pytest.mark.parametrize("accountant", ["zcdp", "rdp"])
@pytest.mark.parametrize("kw", [{"gumbel_scale": 1.7e308}, {"gumbel_scale": 5e-324}, {"sigma": 5e-324},
                                {"delta_t": 5e-324}, {"sigma": 2**55}])
def test_pate_at_the_float64_extremes_explains_and_charges_or_refuses_with_a_dpframe_error(
        accountant: str, kw: dict[str, float]) -> None:
    from dpframe_topk import MultiLabelPATE

    pate = MultiLabelPATE(**kw)
    assert "multi-label PATE" in pate.explain(3)
    budget = dp.ZCDP(1, 1e-3) if accountant == "zcdp" else dp.ApproxDP(1, 1e-3)
    sess = dp.Session({"t": pl.DataFrame({"a": [1]})}, privacy_unit=dp.PrivacyUnit.row(), budget=budget,
                      accountant=accountant, seed=1)
    try:
        pate.collect(sess, _votes())
    except dp.errors.DPFrameError:
        assert sess.history().height == 0      # refused (the budget is exceeded): nothing charged
    else:
        assert sess.history()["status"].to_list() == ["committed"]


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


# --- cost: each family's charge is fixed before it runs and equals a hand-computed value -------------------------

def _fresh(budget: dp.budgets.Budget, rows: int = 2000) -> dp.Session:
    frame = pl.DataFrame({"x": [i % 1000 for i in range(rows)], "y": [i % 2 for i in range(rows)],
                          "g": [str(i % 5) for i in range(rows)]})
    return dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit.row(), budget=budget, seed=3)


def test_each_family_charges_its_hand_computed_cost() -> None:
    from fractions import Fraction as F

    from dpframe_topk import MultiLabelPATE

    # PATE, T = 3 queries, record level (g = 2), b = 50, σ = 60: per query (2g/b)²/8 + g²/(2σ²)
    # = 0.08²/8 + 4/7200 = 1/1250 + 1/1800 = 61/45000, so ZCDP(61/15000, 3·10⁻⁹)
    votes = pl.DataFrame({"query": [0, 0, 1, 1, 2, 2], "label": ["a", "b"] * 3, "vote": [9, 1, 5, 5, 0, 10]})
    sess = _fresh(dp.ZCDP(1, 1e-6))
    pate = MultiLabelPATE()
    assert pate.cost(3) == dp.ZCDP(F(61, 15000), F(3, 10**9))
    pate.collect(sess, votes)
    assert sess.spent() == dp.ZCDP(F(61, 15000), F(3, 10**9))

    # a histogram and a median under a pure budget in a zCDP session: ρ = ε²/2 each
    sess = _fresh(dp.ZCDP(1))
    hist = sess.table("t").agg(dp.measure("histogram", "x", bounds=(0, 1000), edges=(0, 10, 500, 1000)))
    assert hist.cost(dp.PureDP(F(1, 2))) == dp.ZCDP(F(1, 8))
    hist.collect(dp.PureDP(F(1, 2)))
    med = sess.table("t").agg(dp.median("x", bounds=(0, 1000)))
    assert med.cost(dp.PureDP(F(1, 2))) == dp.ZCDP(F(1, 8))
    med.collect(dp.PureDP(F(1, 2)))
    assert sess.spent() == dp.ZCDP(F(1, 4))

    # a one-feature rectangle at (2, 10⁻⁶): sequential composition (2d = 2 slices at ε₀ = 0.9, plus the ε/10
    # gate) is pure and as cheap as RSC, so the charge is (2, 0): no δ is spent
    sess = _fresh(dp.ApproxDP(10, 1e-3))
    rect = sess.table("t").learn_rectangle(["x"], label="y", bounds={"x": (0, 1000)})
    assert rect.cost(dp.ApproxDP(2, 1e-6)) == dp.ApproxDP(2, 0)
    rect.collect(dp.ApproxDP(2, 1e-6))
    assert sess.spent() == dp.ApproxDP(2, 0)

    # top-k over keys from the data: the whole (ε, δ), whatever the outcome (a ⊥ is charged too)
    sess = _fresh(dp.ApproxDP(10, 1e-3))
    top = sess.table("t").group_by("g").top_k(k=2, release_scores=True)
    assert top.cost(dp.ApproxDP(1, 1e-7)) == dp.ApproxDP(1, 1e-7)
    top.collect(dp.ApproxDP(1, 1e-7))
    assert sess.spent() == dp.ApproxDP(1, 1e-7)


# --- frame.bounds released an empty range (x, x) -----------------------------------------------------------------
#
# When both quantiles fell in one outer bin of the grid (every value ≥ 2⁶⁰, or every value below ``domain``'s low
# end), the result was that bin's edge twice: ``(1.15e18, 1.15e18)``, ``(5.0, 5.0)``. The docs promise the pair
# "may be used as the bounds of later queries", but every later query refused it ("lower must be below upper").
# The outer bin now releases the grid's last (first) bin with it: a valid range, the same post-processing of the
# same draw.

@pytest.mark.parametrize(("values", "domain", "expected"), [
    ([1e300] * 3000, None, "top"),
    ([-1e300] * 3000, None, "bottom"),
    ([0.5] * 3000, (5.0, 6.0), None),
    ([9.0] * 3000, (5.0, 6.0), None),
])
def test_bounds_never_releases_an_empty_range(values: list[float], domain: tuple[float, float] | None,
                                             expected: str | None) -> None:
    from dpframe_quantiles.grid_bounds import grid

    sess = dp.Session({"t": pl.DataFrame({"x": values})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=1)
    low, high = sess.table("t").bounds("x", domain=domain).collect(dp.PureDP(2))
    assert low < high
    edges = [float(e) for e in grid("x", pl.Float64(), None, None)]
    if expected == "top":                   # the grid's last bin, with the outer bin beyond it
        assert (low, high) == (edges[-2], edges[-1])
    elif expected == "bottom":
        assert (low, high) == (edges[0], edges[1])
    if domain is not None:
        assert domain[0] <= low < high <= domain[1]
    out = sess.table("t").agg(dp.mean("x", bounds=(low, high))).collect(dp.PureDP(1))     # usable as bounds
    assert out.height == 1


@pytest.mark.parametrize("value", [__import__("datetime").date(2000, 1, 1), __import__("datetime").date(1, 1, 1),
                                   __import__("datetime").date(9999, 12, 31)])
def test_date_bounds_never_release_one_day_twice(value: object) -> None:
    """All rows on one day (or beyond the 1900–2100 domain): both quantiles on one day gave (d, d)."""
    sess = dp.Session({"t": pl.DataFrame({"d": [value] * 3000})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=1)
    low, high = sess.table("t").bounds("d").collect(dp.PureDP(2))
    assert low < high
    assert __import__("datetime").date(1900, 1, 1) <= low and high <= __import__("datetime").date(2100, 12, 31)
    assert sess.table("t").agg(dp.median("d", bounds=(low, high))).collect(dp.PureDP(1)).height == 1


def test_bounds_of_a_time_zone_aware_column_uses_an_aware_default_domain() -> None:
    """``bounds('d')`` on a tz-aware column refused its own default domain (naive 1900–2100) as ``bounds['d']``."""
    import datetime as dt

    col = pl.Series([dt.datetime(2000, 1, 1, 12) + dt.timedelta(hours=i) for i in range(3000)])
    sess = dp.Session({"t": pl.DataFrame({"d": col.dt.replace_time_zone("Asia/Tokyo")})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=1)
    low, high = sess.table("t").bounds("d").collect(dp.PureDP(5))
    assert low.tzinfo is not None and low < high
    assert sess.table("t").agg(dp.median("d", bounds=(low, high))).collect(dp.PureDP(1)).height == 1


# --- a bound with a 5,000-digit integer part: a raw ValueError while the refusal was being written --------------

@pytest.mark.parametrize("make", [lambda b: dp.mean("x", bounds=(0, b)),
                                  lambda b: dp.measure("histogram", "x", bounds=(0, b), edges=(0, 1))])
def test_a_bound_too_large_for_text_is_a_bounds_error(make: object) -> None:
    from fractions import Fraction

    with pytest.raises(dp.errors.BoundsError, match="beyond the range of a float64") as err:
        make(Fraction(10**5000))  # type: ignore[operator]
    assert err.value.argument == "bounds"


# --- PATE: a query column named like an output column was silently dropped -------------------------------------
#
# The output is ``{query: ..., "labels": ..., "k": ...}``: with ``query="k"`` (or ``"labels"``) the dict kept one of
# the two, so the charged result had no query ids (``[(1, ['a']), (1, ['b'])]`` for queries 7 and 9). Refused now,
# before the charge, naming ``query``.

@pytest.mark.parametrize("name", ["k", "labels"])
def test_pate_refuses_a_query_column_named_like_an_output_column(name: str) -> None:
    from dpframe_topk import MultiLabelPATE

    votes = _votes().rename({"query": name})
    sess = _ledger_session()
    with pytest.raises(dp.errors.SchemaError, match="output") as err:
        MultiLabelPATE().collect(sess, votes, query=name)
    assert err.value.argument == "query"
    assert sess.history().height == 0


@pytest.mark.parametrize("resolution", [10**39, 1e308])
def test_bounds_refuses_a_resolution_that_leaves_no_range(resolution: float) -> None:
    """A resolution above every grid edge left only 0: the pair was (0, 0), and with its neighbour there was none."""
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 100})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=1)
    with pytest.raises(dp.errors.BoundsError, match="no range") as err:
        sess.table("t").bounds("x", resolution=resolution).collect(dp.PureDP(1))
    assert err.value.argument == "resolution"
    assert sess.history().height == 0
