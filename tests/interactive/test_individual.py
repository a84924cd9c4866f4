"""Per-unit (individual) Rényi filter: exact individual losses, dropping, per-unit budgets, refusals."""

from __future__ import annotations

import random
from fractions import Fraction

import polars as pl
import pytest

import dpframe as dp
from dpframe.errors import BudgetError, BudgetExceededError, DPFrameError, PlanError
from dpframe.interactive.individual import individual_losses

UNITS = dp.PrivacyUnit("u", max_rows=2)


def _session(data: pl.DataFrame, budget: object = None, **kw: object) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=UNITS, budget=budget or dp.ZCDP(10**6), seed=11, **kw)


def test_individual_loss_formula() -> None:
    # Σ c²/(2σ²): 9/4 + 1/4 + 4/16, one statistic per row here
    rows = [("a", 3, 0, 0), ("a", 0, -1, 0), ("a", 0, 0, 2), ("b", 0, 0, 0)]
    assert individual_losses(rows, [Fraction(2)] * 2 + [Fraction(8)]) == {"a": Fraction(11, 4), "b": 0}
    assert individual_losses([], [Fraction(2)]) == {}


def test_individual_losses_equal_the_fraction_sum_term_by_term() -> None:
    """The common-denominator sum is the exact sum of the terms, for variances of any denominators and sizes."""
    rng = random.Random(5)
    for _ in range(200):
        m = rng.randint(1, 4)
        variances = [Fraction(rng.randint(1, 10**rng.randint(1, 30)), rng.randint(1, 10**rng.randint(0, 12)))
                     for _ in range(m)]
        rows = [(rng.randint(0, 5), *(rng.randint(-(10**rng.randint(0, 25)), 10**18) for _ in range(m)))
                for _ in range(rng.randint(0, 12))]
        expected: dict[int, Fraction] = {}
        for unit, *cs in rows:
            expected[unit] = expected.get(unit, Fraction(0)) + sum(
                (Fraction(c * c) / (2 * v) for c, v in zip(cs, variances)), Fraction(0))
        assert individual_losses(rows, variances) == expected


def test_charges_match_hand_computation() -> None:
    # len with max_rows M = 2 at ρ: σ² = M²/(2ρ), so a unit with n rows (n ≤ 2) pays ρ·n²/4.
    data = pl.DataFrame({"u": [1, 1, 1, 2, 3], "g": ["a", "b", "a", "a", "c"], "x": [1, 2, 3, 4, 5]})
    sess = _session(data)
    filt = sess.individual_filter(dp.ZCDP(1))
    rho = Fraction(1, 4)
    filt.collect(sess.table("t").agg(dp.len()), budget=dp.ZCDP(rho))
    # unit 1 has 3 rows, bounded to 2; units 2 and 3 have one row each
    assert filt._spent == {1: rho, 2: rho / 4, 3: rho / 4}
    # public keys a, b: unit 1's bounded rows split over the groups; unit 3 (only "c") pays nothing
    grouped = sess.table("t").group_by("g", keys=["a", "b"]).agg(dp.len())
    before = dict(filt._spent)
    filt.collect(grouped, budget=dp.ZCDP(rho))
    paid = {u: filt._spent[u] - before[u] for u in before}
    assert paid[2] == rho / 4 and paid[3] == 0
    assert paid[1] in (rho * 2 / 4, rho * 4 / 4)     # (a, b) → 1² + 1², or (a, a) → 2²
    assert filt.cost(grouped, dp.ZCDP(rho)) == dp.ZCDP(rho)


def test_sum_charge_uses_grid_units() -> None:
    data = pl.DataFrame({"u": [1, 2], "x": [3.0, 0.0]})
    sess = _session(data)
    filt = sess.individual_filter(dp.ZCDP(1))
    query = sess.table("t").agg(dp.sum("x", bounds=(0, 4)))
    noise = next(iter(filt.plan(query, dp.ZCDP(Fraction(1, 8))).plans[0].noises.values()))  # type: ignore[attr-defined]
    filt.collect(query, budget=dp.ZCDP(Fraction(1, 8)))
    c = int(Fraction(3) / noise.unit)     # 3.0 in grid steps
    assert filt._spent == {1: Fraction(c * c) / (2 * noise.scale)}   # unit 2 contributes 0 and pays 0
    assert filt._spent[1] < Fraction(1, 8)  # less than the worst case (a unit at the bound with 2 rows)


def test_big_unit_dropped_exactly_when_exhausted() -> None:
    # σ² = 4/(2·500) = 1/250: the noise is 0 except with probability ~e^-125, so releases are exact.
    data = pl.DataFrame({"u": [1, 1, 2], "x": [1, 1, 1]})
    sess = _session(data)
    filt = sess.individual_filter(dp.ZCDP(1000))
    query = sess.table("t").agg(dp.len())
    released = [int(filt.collect(query, budget=dp.ZCDP(500))["len"][0]) for _ in range(10)]
    # unit 1 pays 500 per query (2 rows): twice; unit 2 pays 125 (1 row): eight times
    assert released == [3, 3, 1, 1, 1, 1, 1, 1, 0, 0]
    assert filt._spent == {1: 1000, 2: 1000}
    assert sess.spent() == dp.ZCDP(1000)          # the session paid the filter's budget once


def _exact_contribution(data: pl.DataFrame, unit: int, pred: int, keys: list[str] | None) -> list[int]:
    """Unit ``unit``'s count vector (over the public keys) for rows with x >= pred, without bounding."""
    rows = data.filter((pl.col("u") == unit) & (pl.col("x") >= pred))
    if keys is None:
        return [rows.height]
    return [rows.filter(pl.col("g") == k).height for k in keys]


def test_every_unit_stays_within_budget_brute_force() -> None:
    # max_rows=2 and every unit has ≤ 2 rows, so bounding keeps every row: contributions are exact.
    rnd = random.Random(5)
    data = pl.DataFrame({"u": [1, 1, 2, 3, 3, 4, 5],
                         "g": ["a", "b", "a", "b", "b", "a", "c"],
                         "x": [1, 5, 3, 2, 4, 5, 1]})
    bound = Fraction(3, 2)
    for trial in range(3):
        sess = _session(data)
        filt = sess.individual_filter(dp.ZCDP(bound))
        spent = dict.fromkeys(range(1, 6), Fraction(0))
        for _ in range(12):
            pred, rho = rnd.randint(1, 5), Fraction(rnd.choice([1, 2, 3]), 8)
            keys = rnd.choice([None, ["a", "b"], ["a"]])
            frame = sess.table("t").filter(pl.col("x") >= pred)
            query = frame.agg(dp.len()) if keys is None else frame.group_by("g", keys=keys).agg(dp.len())
            before = dict(filt._spent)
            filt.collect(query, budget=dp.ZCDP(rho))
            for u in spent:   # the filter's rule, recomputed from the raw rows
                loss = rho * sum(c * c for c in _exact_contribution(data, u, pred, keys)) / 4
                if loss and spent[u] + loss <= bound:
                    spent[u] += loss
                assert filt._spent.get(u, 0) - before.get(u, 0) in (0, spent[u] - before.get(u, 0))
            assert {u: s for u, s in spent.items() if s} == filt._spent
        assert all(s <= bound for s in spent.values()), trial
        assert sess.spent() == dp.ZCDP(bound)


def test_rdp_session_charges_filter_once() -> None:
    sess = _session(pl.DataFrame({"u": [1, 2]}), budget=dp.ApproxDP(1, 1e-6), accountant="rdp")
    sess.individual_filter(dp.ZCDP(Fraction(1, 100)))
    assert sess.history()["mechanisms"].to_list() == ["individual_rdp"]
    with pytest.raises(BudgetExceededError):        # more than the whole session budget
        sess.individual_filter(dp.ZCDP(10))


BAD_QUERIES = {
    "private keys": lambda s: (s.table("t").group_by("g").agg(dp.len()), dp.ZCDP(Fraction(1, 10))),
    "median": lambda s: (s.table("t").agg(dp.median("x", bounds=(0, 10))), dp.ZCDP(Fraction(1, 10))),
    "pure budget": lambda s: (s.table("t").agg(dp.len()), dp.PureDP(1)),
    "too much": lambda s: (s.table("t").agg(dp.len()), dp.ZCDP(2)),
    "sampled": lambda s: (s.table("t").sample(0.5).agg(dp.len()), dp.ZCDP(Fraction(1, 10))),
    "not a query": lambda s: (s.table("t"), dp.ZCDP(Fraction(1, 10))),
}


@pytest.mark.parametrize("name", list(BAD_QUERIES))
def test_refused_queries_charge_nothing(name: str) -> None:
    data = pl.DataFrame({"u": [1, 2, 2], "g": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
    sess = _session(data, budget=dp.ApproxDP(20, 1e-6), accountant="rdp")
    filt = sess.individual_filter(dp.ZCDP(1))
    spent, history = sess.spent(), sess.history().height
    query, budget = BAD_QUERIES[name](sess)
    with pytest.raises(DPFrameError) as err:
        filt.collect(query, budget=budget)
    assert err.value.argument in ("query", "budget") and err.value.fix
    assert filt._spent == {} and sess.spent() == spent and sess.history().height == history


def test_refused_filters_charge_nothing() -> None:
    data = pl.DataFrame({"u": [1, 2]})
    for kwargs, budget, error in [({}, dp.ZCDP(1), dp.BudgetConversionError),  # basic (ε, δ): BudgetError before 42b
                                  ({"accountant": "rdp"}, dp.PureDP(1), BudgetError)]:
        sess = _session(data, budget=dp.ApproxDP(2, 1e-6), **kwargs)
        with pytest.raises(error):
            sess.individual_filter(budget)
        assert sess.history().height == 0
    row = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ZCDP(1), seed=0)
    with pytest.raises(PlanError):
        row.individual_filter(dp.ZCDP(Fraction(1, 2)))
    assert row.history().height == 0


def test_other_sessions_query_refused() -> None:
    data = pl.DataFrame({"u": [1, 2]})
    a, b = _session(data), _session(data)
    filt = a.individual_filter(dp.ZCDP(1))
    with pytest.raises(PlanError):
        filt.collect(b.table("t").agg(dp.len()), budget=dp.ZCDP(Fraction(1, 10)))


def test_mean_and_grouped_output_shape() -> None:
    data = pl.DataFrame({"u": list(range(200)), "g": ["a", "b"] * 100, "x": [float(i % 7) for i in range(200)]})
    sess = _session(data)
    filt = sess.individual_filter(dp.ZCDP(10))
    out = filt.collect(sess.table("t").group_by("g", keys=["b", "a", "z"]).agg(dp.len(), dp.mean("x", bounds=(0, 6))),
                       budget=dp.ZCDP(5))
    assert out["g"].to_list() == ["a", "b", "z"]
    exact = data.group_by("g").agg(pl.len(), pl.col("x").mean()).sort("g")
    # σ² = 1.2 per count: |noise| ≤ 8 fails with probability < 1e-12 (< 2, as before, failed 1 seed in 4)
    assert all(abs(v - e) <= 8 for v, e in zip(out["len"][:2], exact["len"], strict=True))
    assert abs(out["x_mean"][0] - exact["x"][0]) < 0.5


def test_docs_scenario_each_visitor_pays_its_own_stores() -> None:
    # docs/interactive.md: 5 rows per visitor, one in each of 5 stores; 20 store counts at ρ = 0.1
    visits = pl.DataFrame({"visitor": [i // 5 for i in range(600)], "store": [i % 20 for i in range(600)]})
    sess = dp.Session({"visits": visits}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=5),
                      budget=dp.ZCDP(1), seed=2)
    filt = sess.individual_filter(budget=dp.ZCDP(Fraction(1, 2)))
    for s in range(20):
        filt.collect(sess.table("visits").filter(pl.col("store") == s).agg(dp.len()), budget=dp.ZCDP(Fraction(1, 10)))
    assert set(filt._spent.values()) == {Fraction(1, 50)} and len(filt._spent) == 120
    assert sess.spent() == dp.ZCDP(Fraction(1, 2))


def test_neighbouring_datasets_differ_only_by_the_removed_units_own_share() -> None:
    # Noise ≈ 0 (σ² = 4/(2·ρ) with ρ ≥ 400): releases are the exact sums over the units still active.
    # Removing unit 1 must change each release by exactly unit 1's contribution while unit 1 is
    # active, and leave every other unit's participation (hence the rest of the output) unchanged.
    data = pl.DataFrame({"u": [1, 1, 2, 3, 3, 4], "g": ["a", "b", "a", "a", "b", "b"], "x": [5, 5, 1, 2, 3, 4]})
    plan = [(1, None, 400), (3, ["a", "b"], 800), (1, ["a"], 400), (2, None, 800), (1, None, 400), (1, ["b"], 800)]

    def run(frame: pl.DataFrame) -> list[list[int]]:
        sess = _session(frame)
        filt = sess.individual_filter(dp.ZCDP(1600))
        out = []
        for pred, keys, rho in plan:
            q = sess.table("t").filter(pl.col("x") >= pred)
            q = q.agg(dp.len()) if keys is None else q.group_by("g", keys=keys).agg(dp.len())
            out.append([int(v) for v in filt.collect(q, budget=dp.ZCDP(rho))["len"]])
        return out

    with_u, without_u = run(data), run(data.filter(pl.col("u") != 1))
    spent = Fraction(0)
    for (pred, keys, rho), a, b in zip(plan, with_u, without_u, strict=True):
        c = _exact_contribution(data, 1, pred, keys)
        loss = Fraction(rho) * sum(v * v for v in c) / 4
        active = bool(loss) and spent + loss <= 1600
        spent += loss if active else 0
        assert [x - y for x, y in zip(a, b, strict=True)] == (c if active else [0] * len(c))
    assert spent <= 1600
