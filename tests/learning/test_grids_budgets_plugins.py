"""Learning queries on gridded features, their guarantees as stated, zCDP/RDP charging, and the algorithm hook."""

from __future__ import annotations

import datetime as dt
import math
from fractions import Fraction

import numpy as np
import polars as pl
import pytest
from dpframe_learning import InteriorPoint, Rectangle, Threshold, algorithms
from dpframe_learning.interior_point import BinarySearch, Exponential, Stability
from dpframe_learning.learners import Labelled, choose_direction
from dpframe_learning.queries import direction_rows

import dpframe as dp
from dpframe import accounting as acc
from dpframe.domains import OrderedDomain
from dpframe.noise import SeededRandomSource
from dpframe.plugin import PluginHost


def session(data: pl.DataFrame, budget: dp.Budget = dp.PureDP(1000), **kw) -> dp.Session:
    kw.setdefault("privacy_unit", dp.PrivacyUnit.row())
    return dp.Session({"t": data}, budget=budget, seed=kw.pop("seed", 1), **kw)


def probes(domain: OrderedDomain, rng: np.random.Generator) -> np.ndarray:
    """Random values, every cell edge of a few cells and its float neighbours, and values outside the bounds."""
    lo, hi = float(domain.lower), float(domain.upper)
    edges = [float(domain.edge(c)) for c in range(0, domain.size + 1, max(1, domain.size // 50))]
    near = [math.nextafter(e, s) for e in edges for s in (-math.inf, math.inf)]
    return np.array([*rng.uniform(lo - 1, hi + 1, 2000), *edges, *near, lo - 5, hi + 5, lo, hi])


# ------------------------------------------------------------------ item 1: gridded features, exact classifiers

@pytest.mark.parametrize("resolution", [0.25, 0.01, None])
@pytest.mark.parametrize("positive", ["below", "above"])
def test_float_thresholds_equal_the_code_space_classifier(resolution: float | None, positive: str) -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    x = rng.uniform(0, 1, n)
    y = ((x < 0.5) if positive == "below" else (x >= 0.5)).astype(np.int8)
    q = session(pl.DataFrame({"x": x, "y": y}), seed=3).table("t").learn_threshold(
        "x", label="y", bounds=(0, 1), resolution=resolution, positive=positive)
    k = q.plan(dp.PureDP(1)).params["k"]
    model = q.collect(dp.PureDP(1))
    assert isinstance(model, Threshold)
    # the stated guarantee: training error ≤ 2k/n (0.5 is a grid point of every grid here: realizable)
    assert np.mean(model.predict(x) != y) <= 2 * k / n
    # the released classifier is the learned one on every input: code(x) ≥ cut ⇔ x ≥ threshold (clamped)
    v = probes(q.domain, rng)
    code_space = q.domain.encode(pl.Series(v)) >= model.cut
    want = code_space if positive == "above" else ~code_space
    assert model.predict(v).tolist() == want.astype(np.int8).tolist()
    clamped = np.clip(v, 0, 1)
    by_value = clamped >= model.threshold if positive == "above" else clamped < model.threshold
    assert model.predict(v).tolist() == by_value.astype(np.int8).tolist()


def test_integer_and_date_thresholds_with_a_resolution() -> None:
    x = np.arange(0, 4000)
    data = pl.DataFrame({"x": x, "y": (x < 1600).astype(np.int8),
                         "d": [dt.date(2000, 1, 1) + dt.timedelta(days=int(v)) for v in x]})
    frame = session(data, seed=2).table("t")
    q = frame.learn_threshold("x", label="y", bounds=(0, 4000), resolution=16, positive="below")
    model = q.collect(dp.PureDP(1))
    k = q.plan(dp.PureDP(1)).params["k"]
    assert np.mean(model.predict(x) != (x < 1600)) <= 2 * k / x.size
    v = np.arange(-50, 4100)
    assert model.predict(v).tolist() == (q.domain.encode(pl.Series(v)) < model.cut).astype(np.int8).tolist()
    days = frame.learn_threshold("d", label="y", bounds=(dt.date(2000, 1, 1), dt.date(2011, 12, 31)),
                                 resolution=8, positive="below").collect(dp.PureDP(1))
    assert isinstance(days.threshold, dt.date)
    assert np.mean(days.predict(data["d"]) != data["y"].to_numpy()) <= 2 * k / x.size


def test_float_rectangle_has_few_false_negatives_and_equals_its_cells() -> None:
    rng = np.random.default_rng(4)
    n = 20_000
    a, b = rng.uniform(0, 1, n), rng.uniform(-1, 1, n)
    y = ((a < 0.5) & (b >= -0.25) & (b < 0.75)).astype(np.int8)
    q = session(pl.DataFrame({"a": a, "b": b, "y": y})).table("t").learn_rectangle(
        ["a", "b"], label="y", bounds={"a": (0, 1), "b": (-1, 1)}, resolution={"a": 0.25, "b": 0.25})
    required = q.plan(dp.PureDP(2)).params["gate"].required
    box = q.collect(dp.PureDP(2))
    assert isinstance(box, Rectangle) and not box.empty
    pred = box.predict(pl.DataFrame({"a": a, "b": b}))
    assert np.all(pred <= y)                                             # inside the target box
    assert np.sum((pred == 0) & (y == 1)) <= required                   # errs only on the sliced positives
    va, vb = probes(q.domains[0], rng)[:1000], probes(q.domains[1], rng)[:1000]
    cells = np.ones(1000, dtype=bool)
    for dom, values, (first, last) in zip(q.domains, (va, vb), [c[1:] for c in box.cells], strict=True):
        codes = dom.encode(pl.Series(values))
        cells &= (codes >= first) & (codes <= last)
    assert box.predict(pl.DataFrame({"a": va, "b": vb})).tolist() == cells.astype(np.int8).tolist()
    (a0, a1), (b0, b1) = box.intervals["a"], box.intervals["b"]
    assert 0 <= a0 < a1 <= 0.5
    # With a negative lower bound, x − (−1) rounds in float64: the cells of −0.25 and 0.75 start a few ulps
    # below them, and the released ends are those exact edges.
    b = q.domains[1]
    assert b.edge(3) <= b0 < b1 <= b.edge(7) and abs(b.edge(3) + 0.25) < 1e-15 and abs(b.edge(7) - 0.75) < 1e-15


# ------------------------------------------------------------------ item 6: interior point on grids

def test_interior_point_on_grids_returns_the_nearest_grid_point() -> None:
    data = pl.DataFrame({"g": [0.25] * 2000, "f": [0.3] * 2000, "i": [7] * 2000, "j": [6] * 2000})
    frame = session(data).table("t")
    assert frame.interior_point("g", bounds=(0, 1)).collect(dp.PureDP(1)).value == 0.25     # on the grid: itself
    assert frame.interior_point("g", bounds=(0, 1), resolution=0.25).collect(dp.PureDP(1)).value == 0.25
    assert frame.interior_point("f", bounds=(0, 1), resolution=0.25).collect(dp.PureDP(1)).value == 0.25
    fine = frame.interior_point("f", bounds=(0, 1)).collect(dp.PureDP(1)).value
    assert abs(fine - 0.3) <= 2.0**-32                                    # the nearest point of the 2^-31 grid
    assert frame.interior_point("i", bounds=(0, 100), resolution=4).collect(dp.PureDP(1)).value == 8
    assert frame.interior_point("j", bounds=(0, 100), resolution=4).collect(dp.PureDP(1)).value == 8
    assert frame.interior_point("i", bounds=(0, 100)).collect(dp.PureDP(1)).value == 7
    text = frame.interior_point("f", bounds=(0, 1), resolution=0.25).explain(dp.PureDP(1))
    assert "g(v) = the grid point nearest v (grid step 1/4)" in text and "NoAnswer" in text
    assert "min(i) ≤ value ≤ max(i)" in frame.interior_point("i", bounds=(0, 100)).explain(dp.PureDP(1))


def test_float_bounds_too_far_apart_are_refused_uncharged() -> None:
    sess = session(pl.DataFrame({"f": [1.0, 2.0]}))
    with pytest.raises(dp.BoundsError) as info:
        sess.table("t").interior_point("f", bounds=(-1.7e308, 1.7e308)).collect(dp.PureDP(1))
    assert info.value.argument == "bounds['f']" and "narrower" in info.value.fix
    with pytest.raises(dp.BoundsError):
        sess.table("t").agg(dp.median("f", bounds=(-1.7e308, 1.7e308))).collect(dp.PureDP(1))
    assert sess.spent().epsilon == 0
    assert sess.table("t").interior_point("f", bounds=(-1e300, 1e300)).cost(dp.PureDP(1)) == dp.PureDP(1)


# ------------------------------------------------------------------ item 2: the direction's guarantee

def test_direction_errs_at_most_as_stated_once_each_class_has_the_stated_rows() -> None:
    eps, beta = Fraction(1, 10), 0.05
    m = direction_rows(eps, 1, beta)                                    # ⌈20·ln 20⌉ = 60
    assert m == math.ceil(20 * math.log(20))
    rng = SeededRandomSource(7)

    def wrong_rate(minority: int, runs: int = 3000) -> float:
        x = np.arange(1000, dtype=np.int64)
        y = (x < minority).astype(np.int8)                              # realizable, "below", m positives
        data = Labelled.of(x, y)
        return sum(choose_direction(data, eps, 1, rng) != "below" for _ in range(runs)) / runs

    exact = 1 / (1 + math.exp(float(eps) * m / 2))
    assert exact <= beta
    assert wrong_rate(m) <= beta                                        # ≈ 0.047: within the bound
    assert wrong_rate(m // 4) > 2 * beta                                # below the stated rows it is not covered


@pytest.mark.parametrize("runs", [pytest.param(120, id="fast"), pytest.param(1200, id="long", marks=pytest.mark.slow)])
def test_threshold_guarantee_holds_empirically_with_auto_direction(runs: int) -> None:
    """scratch-4/direction.py with the stated condition met: population error > ξ in ≤ 2β of the runs."""
    rng = np.random.default_rng(1)
    beta, xi = 0.02, 0.1
    x = rng.integers(0, 10_000, 5000)
    u = int(np.sort(x)[100])                              # the smaller class: ~100 rows, ≥ the stated count
    y = (x <= u).astype(np.int8)
    sess = session(pl.DataFrame({"x": x, "y": y}), budget=dp.PureDP(10**6), seed=5)
    q = sess.table("t").learn_threshold("x", label="y", bounds=(0, 10_000), xi=xi, beta=beta)
    plan = q.plan(dp.PureDP(1))
    assert int(y.sum()) >= plan.params["direction_rows"] and x.size >= int(plan.guarantee.split("n ≥ ")[1].split()[0])
    assert f"each class has ≥ {plan.params['direction_rows']} rows" in plan.guarantee
    assert f"≥ 1 − {2 * beta:g}" in plan.guarantee
    fresh = rng.integers(0, 10_000, 100_000)
    bad = 0
    for _ in range(runs):
        model = q.collect(dp.PureDP(1))
        bad += not model or float(np.mean((model.predict(fresh) == 1) != (fresh <= u))) > xi
    assert bad <= 2 * beta * runs


def test_unmet_direction_condition_is_visible_in_explain() -> None:
    x = np.arange(5000)
    frame = session(pl.DataFrame({"x": x, "y": (x < 76).astype(np.int8)})).table("t")
    text = frame.learn_threshold("x", label="y", bounds=(0, 10_000)).explain(dp.PureDP(1))
    assert "each class has ≥ 277 rows (else the direction may be wrong: pass positive=" in text
    fixed = frame.learn_threshold("x", label="y", bounds=(0, 10_000), positive="below").explain(dp.PureDP(1))
    assert "each class" not in fixed and "≥ 1 − 1e-06 training error" in fixed


# ------------------------------------------------------------------ item 11: zCDP (bounded range) and RDP curves

def test_zcdp_budgets_use_the_bounded_range_conversion_hand_checked() -> None:
    data = pl.DataFrame({"x": np.arange(3000), "y": (np.arange(3000) < 1000).astype(np.int8)})
    sess = session(data, budget=dp.ZCDP(10))
    rho = Fraction(1, 2)
    ip = sess.table("t").interior_point("x", bounds=(0, 10_000)).plan(dp.ZCDP(rho))
    assert abs(float(ip.params["gate"].epsilon) - math.sqrt(2 * 0.05)) < 1e-9           # noisy count: ε²/2
    assert abs(float(ip.params["epsilon"]) - math.sqrt(8 * 0.45)) < 1e-9                # EM: ε²/8
    assert ip.params["gate"].epsilon ** 2 / 2 + ip.params["epsilon"] ** 2 / 8 <= rho
    binary = sess.table("t").interior_point("x", bounds=(0, 10_000), method="binary_search").plan(dp.ZCDP(rho))
    b = BinarySearch.rounds(10_001)                                                       # 14 rounds at ε/b each
    assert abs(float(binary.params["epsilon"]) - math.sqrt(2 * b * 0.45)) < 1e-8
    th = sess.table("t").learn_threshold("x", label="y", bounds=(0, 10_000)).plan(dp.ZCDP(rho))
    assert abs(float(th.params["eps_dir"]) - math.sqrt(8 * 0.05)) < 1e-9
    assert abs(float(th.params["eps_ip"]) - math.sqrt(8 * 0.4)) < 1e-9
    box = sess.table("t").learn_rectangle(["x"], label="y", bounds={"x": (0, 10_000)}).plan(dp.ZCDP(rho))
    assert abs(float(box.params["plan"].epsilon0) - math.sqrt(8 * 0.45 / 2)) < 1e-9        # 2 slices share 9ρ/10
    for plan in (ip, binary, th, box):
        assert plan.cost == dp.ZCDP(rho) and plan.session_cost == dp.ZCDP(rho)
    with pytest.raises(dp.DPFrameError):                                                  # TreeLog has no zCDP
        sess.table("t").interior_point("x", bounds=(0, 10_000), method="treelog").cost(dp.ZCDP(rho))
    sess.table("t").interior_point("x", bounds=(0, 10_000)).collect(dp.ZCDP(rho))
    assert sess.spent() == dp.ZCDP(rho)


def test_rdp_sessions_are_charged_the_declared_curves() -> None:
    data = pl.DataFrame({"x": np.arange(3000), "y": (np.arange(3000) < 1000).astype(np.int8)})
    sess = session(data, budget=dp.ApproxDP(10, 1e-6), accountant="rdp")
    q = sess.table("t").learn_threshold("x", label="y", bounds=(0, 10_000))
    charged = q.cost(dp.PureDP(1))
    want = acc.RDPCharge.of([acc.discrete_laplace(10.0, 1), acc.exponential(0.1), acc.exponential(0.8)])
    assert np.allclose(charged.values, want.values, rtol=1e-12) and charged.delta0 == 0   # type: ignore[attr-defined]
    generic = acc.RDPCharge.of([acc.pure(1.0)])                  # what a bare ε = 1 would be charged
    assert np.all(np.asarray(want.values) <= np.asarray(generic.values) + 1e-12)
    assert np.any(np.asarray(want.values) < np.asarray(generic.values))
    pure_ip = sess.table("t").interior_point("x", bounds=(0, 10_000)).plan(dp.PureDP(1))
    assert "exponential mechanism(ε=0.9)" in sess.accountant.describe_charge(pure_ip.session_cost)


def test_rdp_curve_of_the_exponential_mechanism_is_valid_for_neighbouring_interior_points() -> None:
    """The exponential interior point's output distributions on neighbours stay within the declared ε-bounded-range
    curve: the log-ratio of output probabilities spans at most ε (checked exactly on the score blocks)."""
    from dpframe_learning.interior_point import score_blocks

    eps, size = Fraction(1), 64
    scale = Exponential.scale(eps, Stability(1))
    base = np.array([3, 3, 9, 20, 20, 21, 40], dtype=np.int64)
    for extra in (0, 3, 10, 63):
        pairs = [np.sort(base), np.sort(np.append(base, extra))]
        logp = []
        for codes in pairs:
            starts, lengths, scores = score_blocks(codes, size)
            per_z = np.repeat(scores, lengths).astype(float) * float(scale)
            logp.append(per_z - np.log(np.exp(per_z).sum()))
        ratio = logp[1] - logp[0]
        assert ratio.max() - ratio.min() <= float(eps) + 1e-12


# ------------------------------------------------------------------ item 8: interior-point algorithms as plugins

class Midpoint:
    """A third-party (toy, data-independent) interior-point 'algorithm': always the middle code. 0-DP."""

    name = "midpoint"
    approximate = False

    def min_rows(self, epsilon, delta, beta, size, stability):  # noqa: ANN001, ANN201
        return 1

    def cost(self, epsilon, delta):  # noqa: ANN001, ANN201
        return dp.PureDP(epsilon)

    def run(self, codes, size, epsilon, delta, beta, stability, rng):  # noqa: ANN001, ANN201
        return size // 2


def _host_with(*algos: object) -> PluginHost:
    host = PluginHost()

    class Plugin:
        @dp.hookimpl
        def dpframe_methods(self, register):  # noqa: ANN001, ANN202
            for algo in algos:
                register(algo, family="interior_point")

    host.pm.register(Plugin(), name="third-party")
    return host


def test_a_plugin_adds_an_interior_point_method() -> None:
    host = _host_with(Midpoint())
    assert sorted(algorithms(host)) == ["binary_search", "exponential", "midpoint", "treelog"]
    sess = session(pl.DataFrame({"x": [40, 60] * 200}))
    sess._plugins = host
    q = sess.table("t").interior_point("x", bounds=(0, 100), method="midpoint")
    assert "midpoint       1 rows   ← chosen" in q.explain(dp.PureDP(1))
    assert q.collect(dp.PureDP(1)) == InteriorPoint("x", 50, "midpoint")
    assert sess.spent() == dp.PureDP(1)
    auto = sess.table("t").interior_point("x", bounds=(0, 100))
    assert auto.plan(dp.PureDP(1)).mechanisms == "noisy count + midpoint"        # auto: fewest rows
    assert "interior_point method midpoint" in " ".join(i.provides for i in host.describe())


@pytest.mark.parametrize("bad", [Exponential(), object()])
def test_a_clashing_or_malformed_interior_point_plugin_is_refused(bad: object) -> None:
    sess = session(pl.DataFrame({"x": [1, 2]}))
    sess._plugins = _host_with(bad)
    with pytest.raises(dp.PluginError) as info:
        sess.table("t").interior_point("x", bounds=(0, 10))
    assert info.value.argument == "interior_point method"
    assert sess.spent().epsilon == 0
