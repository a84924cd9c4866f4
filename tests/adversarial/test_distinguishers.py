"""Neighbour distinguishers (issue 16, harness part b): every public entry point, end to end, exceptions included.

For each query entry point (:func:`dpframe.testing.query_entry_points`) a distinguisher runs the query
many times on D and on D′ = D plus one privacy unit chosen adversarially, records each run's outcome —
the released values, or the exception's type and message if it raised (any ``BaseException``: Rust
panics included) — with what it was charged and the ledger statuses it left, and bounds ε from below
(Clopper–Pearson at confidence 1 − 10⁻⁶, the event chosen on a pilot half:
:mod:`dpframe.testing.distinguish`). The bound must not exceed the ε the query is charged.

* ``test_entry_point``: each case on its first pair (one unit whose rows carry NaN, inf, -1.8e308, null
  and new, null, empty and odd-Unicode keys, more rows than ``max_rows``); then the same distinguisher
  must flag a failure injected on D′ only (so it is not a test that cannot fail). ``-m slow``: every
  pair, and five times the runs on the first.
* ``test_attack_*``: row-level expressions an analyst can make fail on the added unit's rows only (issue
  16 findings 1 and 2, and the further instances this harness found), in ``with_columns`` + ``dp.count``
  at ε = 0.01 as in the issue; one that aborts the process, in a child process; and (``-m slow``) two of
  them inside every frame-based entry point. Today's leaks are ``xfail(strict=True)``: the fix turns
  them into XPASS failures that ask for the mark to go.
* ``test_under_noised_mechanism_is_caught``: a mechanism with a tenth of its noise scale is flagged.
* ``test_every_entry_point_has_a_distinguisher``: a new entry point without a case fails here.
* ``test_explain_does_not_read_the_data``: ``explain`` (free) gives the same text on D and D′.

Every claim here is at most ε = 3/4 and the default run makes 40 runs per dataset and half: a
difference that happens on every run then bounds ε ≥ 0.83.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any
from unittest import mock

import polars as pl
import pytest
from dpframe_topk.pate import MultiLabelPATE

import dpframe as dp
from dpframe.backends.duckdb import DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.interactive.ptr import gated_release, robust_median
from dpframe.interactive.stopping import run_until
from dpframe.plugin import plugin_host
from dpframe.testing import (
    AuditSpec,
    Neighbours,
    Overclaiming,
    Stream,
    query_entry_points,
    run_audit,
    session_budget,
    unaudited_queries,
)
from dpframe.testing.audit import Sampler
from dpframe.testing.distinguish import distinguisher, outcome_sampler
from dpframe.testing.queries import SamplerFactory

UNIT = dp.PrivacyUnit("user", max_rows=2)
NEW = 10**6                                # the added unit's id
ADDED = pl.col("user") == NEW              # the analyst's predicate: true on the added unit's rows only
KEYS = ["a", "b", "c"]
RUNS = 40
BIG = 1.7976931348623157e308


def _base(units: int = 800) -> pl.DataFrame:
    """``units`` units of one or two rows: x in 0..10, keys a / b / c for 3 : 2 : 1 of the units, y = (x ≤ 5)."""
    users = [u for u in range(units) for _ in range(1 + u % 2)]
    xs = [float((7 * i) % 11) for i in range(len(users))]
    return pl.DataFrame({"user": users, "x": xs, "g": ["aaabbc"[u % 6] for u in users], "y": [int(x <= 5) for x in xs]},
                        schema={"user": pl.Int64, "x": pl.Float64, "g": pl.String, "y": pl.Int64})


BASE = _base()
ROWS = {k: BASE.filter(pl.col("g") == k).height for k in KEYS}           # a 535, b 399, c 266 rows
SUMS = {k: float(BASE.filter(pl.col("g") == k)["x"].sum()) for k in KEYS}


def plus_unit(table: pl.DataFrame, *rows: Mapping[str, Any]) -> pl.DataFrame:
    """``table`` plus the unit ``NEW`` with one row per mapping (columns not given copy the first row)."""
    first = table.row(0, named=True)
    added = [{**first, **row, "user": NEW} for row in rows]
    return pl.concat([table, pl.DataFrame(added, schema=table.schema, orient="row")])


def _pairs(base: pl.DataFrame) -> tuple[Neighbours, ...]:
    """D = ``base``; D′ adds one unit: first one whose rows carry every extreme at once, then one extreme each."""
    def pair(label: str, *rows: Mapping[str, Any]) -> Neighbours:
        return Neighbours(label, base, plus_unit(base, *rows))
    # more rows than max_rows, each extreme: bounding keeps a random two of them
    kitchen_sink = pair("+1 unit of 4 rows: x = NaN / inf / -1.8e308 / null, keys z / null / '' / U+10FFFF",
                        {"x": math.nan, "g": "z", "y": 1}, {"x": math.inf, "g": None, "y": None},
                        {"x": -BIG, "g": "", "y": 0}, {"x": None, "g": "\U0010ffff", "y": 1})
    return (kitchen_sink,
            *(pair(f"+1 unit, x = {v}", {"x": v}, {"x": v}) for v in (math.nan, math.inf, -BIG, None, 10.0)),
            *(pair(f"+1 unit, key {k!r:.12}", {"g": k}, {"g": k}) for k in ("z", None, "é" * 1000)))


PAIRS = _pairs(BASE)
#: For the attacks: an ordinary unit (what its rows trigger is the attack expression itself).
ORDINARY = [{"x": 5.0, "g": "a"}] * 2
PLAIN = (Neighbours("+1 ordinary unit (x = 5, key a)", BASE, plus_unit(BASE, *ORDINARY)),)
SMALL = _base(30)
SMALL_PLAIN = (Neighbours("+1 ordinary unit (x = 5, key a)", SMALL, plus_unit(SMALL, *ORDINARY)),)


# --------------------------------------------------------------------------------------------- cases

Query = Callable[[Any, Any], Any]          # (session, frame over "t") -> anything with cost / collect
Faults = tuple[tuple[type, str], ...]      # methods every run on D′ calls: where a fault is injected
BACKEND_FAULTS: Faults = ((PolarsBackend, "statistics"), (DuckDBBackend, "statistics"))


@dataclass(frozen=True)
class Case:
    """One entry point's distinguisher: the query, the budget it is collected at, and how it is sampled."""

    name: str
    queries: frozenset[str]
    budget: dp.Budget
    query: Query
    rows: int = 1                          # result rows whose cells are outputs
    frame_based: bool = True               # the query reads ``frame`` (an attack can be put into it)
    per_session: int = 200
    session: tuple[tuple[str, Any], ...] = ()       # Session arguments (backend, accountant, total)
    faults: Faults = BACKEND_FAULTS
    fast: bool = True                      # in the default run (else only under -m slow)
    pairs: tuple[Neighbours, ...] = PAIRS
    unit: dp.PrivacyUnit = UNIT

    def spec(self, derive: Callable[[Any], Any] | None = None, pairs: tuple[Neighbours, ...] | None = None,
             known_bug: str | None = None, runs: int = RUNS) -> AuditSpec:
        """The distinguisher on ``pairs``, with ``derive`` applied to the frame first (an attack)."""
        def make(session: Any) -> Any:
            frame = session.table("t")
            return self.query(session, derive(frame) if derive is not None else frame)
        sampler = outcome_sampler(make, self.unit, rows=self.rows, per_session=self.per_session,
                                  reuse_statistics=True, **dict(self.session))
        return distinguisher(self.name, self.queries, self.budget, sampler, pairs or self.pairs, runs=runs,
                             slow_runs=5 * runs, fast=self.fast, known_bug=known_bug)


def _q(*names: str) -> frozenset[str]:
    return frozenset(names)


EPS = Fraction(3, 4)
PURE = dp.PureDP(EPS)
APPROX = dp.ApproxDP(EPS, Fraction(1, 10**6))
HALF, QUARTER = dp.PureDP(Fraction(1, 2)), dp.PureDP(Fraction(1, 4))
BOUNDS = (0, 10)


def _agg(session: Any, f: Any) -> Any:
    return f.agg(dp.len(), dp.count("x"), dp.sum("x", bounds=BOUNDS), dp.mean("x", bounds=BOUNDS),
                 dp.var("x", bounds=BOUNDS), dp.std("x", bounds=BOUNDS), dp.median("x", bounds=BOUNDS),
                 dp.quantile("x", [0.1, 0.9], bounds=BOUNDS))


def _count(f: Any, key: str) -> Any:
    return f.filter(pl.col("g") == key).agg(dp.len())


def _sum(f: Any, key: str) -> Any:
    return f.filter(pl.col("g") == key).agg(dp.sum("x", bounds=BOUNDS))


def _svt(session: Any, f: Any) -> Stream:
    """Sums per key against key b's sum, two positives, their values released on close."""
    def script(sess: Any, sv: Any) -> tuple[Any, ...]:
        return tuple(None if sv.closed else sv.test(_sum(f, k)) for k in KEYS)
    return Stream(session, lambda s, b: s.sparse_vector(threshold=SUMS["b"], max_positives=2, budget=HALF,
                                                        release=QUARTER), script, reserved=lambda sv: sv.charged())


#: The δ at which the Gaussian sparse vector's RDP curve is read as its (ε, δ) claim.
SVT_DELTA = Fraction(1, 10**6)


def _gaussian_svt(session: Any, f: Any) -> Stream:
    def script(sess: Any, sv: Any) -> tuple[Any, ...]:
        return tuple(None if sv.closed else sv.test(_count(f, k)) for k in KEYS)
    return Stream(session, lambda s, b: s.sparse_vector(threshold=ROWS["c"], max_positives=1, budget=b,
                                                        noise="gaussian"),
                  script, reserved=lambda sv: dp.ApproxDP(sv.curve.approx_dp(float(SVT_DELTA)), SVT_DELTA))


def _tct(session: Any, f: Any) -> Stream:
    def script(sess: Any, ch: Any) -> tuple[Any, ...]:
        return tuple(None if ch.closed else ch.test(_count(f, k), threshold=ROWS["b"]) for k in KEYS)
    return Stream(session, lambda s, b: s.target_charging(epsilon=0.08, max_hits=1, delta=float(b.delta)), script,
                  reserved=lambda ch: ch.cost)


def _individual(session: Any, f: Any) -> Stream:
    def script(sess: Any, filt: Any) -> tuple[Any, ...]:
        q = f.agg(dp.sum("x", bounds=BOUNDS))
        return (float(filt.collect(q, budget=dp.ZCDP(Fraction(1, 200))).item()),)
    return Stream(session, lambda s, b: s.individual_filter(b), script,
                  reserved=lambda filt: filt.session.accountant.charge(filt.budget))


@dataclass
class _Fixed:
    """A query of the module-level entry points: a fixed, public cost; ``collect`` calls ``release``."""

    charged: dp.Budget
    release: Callable[[], Any]

    def cost(self, budget: dp.Budget) -> dp.Budget:
        return self.charged

    def collect(self, budget: dp.Budget) -> Any:
        return self.release()


def _gated(session: Any, f: Any) -> _Fixed:
    """``gated_release`` (and so ``propose_test_release``): a mean, released if the noisy row count ≥ |D|."""
    return _Fixed(PURE, lambda: gated_release(f.agg(dp.mean("x", bounds=BOUNDS)), HALF, f.agg(dp.len()), BASE.height,
                                              QUARTER))


def _until(session: Any, f: Any) -> _Fixed:
    """``run_until`` over the three keys' counts at ε = 1/4 each, stopping at a released count ≥ key b's."""
    def release() -> tuple[float, ...]:
        out = run_until([_count(f, k) for k in KEYS], QUARTER,
                        stop=lambda released: released[-1]["len"][0] >= ROWS["b"])
        return tuple(float(r["len"][0]) for r in out)
    return _Fixed(PURE, release)


def _top_k(method: str, public: bool, **kw: Any) -> Query:
    def query(session: Any, f: Any) -> Any:
        return (f.group_by("g", keys=KEYS) if public else f.group_by("g")).top_k(method=method, **kw)
    return query


def _sql(text: str, **kw: Any) -> Query:
    return lambda session, f: session.sql(text, **kw)


SQL_AGG = ("SELECT COUNT(*) AS n, SUM(CLAMP(x, 0, 10)) AS s, AVG(CLAMP(x, 0, 10)) AS m, MEDIAN(CLAMP(x, 0, 10)) AS md "
           "FROM t")
RDP = (("accountant", "rdp"), ("total", dp.ApproxDP(10**9, Fraction(1, 2))))

CASES = [
    Case("agg: len, count, sum, mean, var, std, median, quantiles", _q("Frame.agg"), PURE, _agg),
    Case("agg in a zCDP session", _q("Frame.agg"), dp.ZCDP(Fraction(1, 100)),
         lambda s, f: f.agg(dp.sum("x", bounds=(-10, 10)), dp.mean("x", bounds=(-10, 10)),
                            dp.median("x", bounds=BOUNDS))),
    Case("group_by public keys", _q("GroupBy.agg"), PURE,
         lambda s, f: f.group_by("g", keys=KEYS).agg(dp.len(), dp.sum("x", bounds=BOUNDS)), rows=3),
    Case("group_by private keys (partition selection)", _q("GroupBy.agg"), APPROX,
         lambda s, f: f.group_by("g").agg(dp.len(), dp.mean("x", bounds=BOUNDS)), rows=4),
    Case("sample(0.5).agg", _q("Frame.sample"), PURE,
         lambda s, f: f.sample(0.5).agg(dp.len(), dp.sum("x", bounds=BOUNDS))),
    Case("bounds", _q("Frame.bounds"), PURE, lambda s, f: f.bounds("x", domain=BOUNDS)),
    Case("bounds on the relative grid (no domain)", _q("Frame.bounds"), PURE, lambda s, f: f.bounds("x")),
    # issue 17: bounds chosen privately inside the query (tuning shares + release = the query's ε)
    Case("agg with max_rows='auto', bounds='auto'", _q("Frame.agg"), PURE,
         lambda s, f: f.agg(dp.len(), dp.mean("x", bounds="auto")), unit=dp.PrivacyUnit("user", max_rows="auto")),
    Case("group_by private keys, max_rows and max_groups 'auto', sum bounds='auto'", _q("GroupBy.agg"), APPROX,
         lambda s, f: f.group_by("g").agg(dp.sum("x", bounds="auto")), rows=4, fast=False,
         unit=dp.PrivacyUnit("user", max_rows="auto", max_groups="auto")),
    Case("linear_regression (the example plugin's query family)", _q("Frame.linear_regression"), PURE,
         lambda s, f: f.query("linear_regression", ["x"], "y", bounds={"x": BOUNDS, "y": (0, 1)})),
    Case("interior_point", _q("Frame.interior_point"), PURE,
         lambda s, f: f.interior_point("x", bounds=BOUNDS, beta=0.5)),
    Case("learn_threshold", _q("Frame.learn_threshold"), PURE,
         lambda s, f: f.learn_threshold("x", label="y", bounds=BOUNDS, beta=0.5)),
    Case("learn_rectangle (every row with x ≥ 0 positive)", _q("Frame.learn_rectangle"), PURE,
         lambda s, f: f.with_columns(p=(pl.col("x") >= 0).cast(pl.Int64, strict=False))
         .learn_rectangle(["x"], label="p", bounds={"x": BOUNDS}, beta=0.5)),
    Case("top_k stable, keys from the data, k=None", _q("GroupBy.top_k", "GroupBy.top_k[method=stable]"), APPROX,
         _top_k("stable", False, k=None), rows=4),
    Case("top_k stable, public keys, sum score", _q("GroupBy.top_k"), APPROX,
         _top_k("stable", True, k=1, score=dp.sum("x", bounds=BOUNDS)), rows=2),
    Case("top_k gumbel", _q("GroupBy.top_k[method=gumbel]"), PURE, _top_k("gumbel", True, k=1), rows=2),
    Case("top_k peeling", _q("GroupBy.top_k[method=peeling]"), PURE, _top_k("peeling", True, k=2), rows=2),
    Case("top_k limited_domain, keys from the data", _q("GroupBy.top_k[method=limited_domain]"), APPROX,
         _top_k("limited_domain", False, k=1), rows=2),
    Case("top_k tct", _q("GroupBy.top_k[method=tct]"), dp.ApproxDP(EPS, Fraction(1, 10**4)), _top_k("tct", True, k=1),
         rows=2),
    Case("sql aggregates (polars)", _q("Session.sql"), PURE, _sql(SQL_AGG), frame_based=False),
    Case("sql aggregates (duckdb)", _q("Session.sql"), PURE, _sql(SQL_AGG), frame_based=False,
         session=(("backend", "duckdb"),)),
    Case("sql GROUP BY private keys", _q("Session.sql"), APPROX,
         _sql("SELECT g, COUNT(*) AS n, AVG(CLAMP(x, 0, 10)) AS m FROM t GROUP BY g"), rows=4, frame_based=False),
    Case("sql TOP_K", _q("Session.sql"), APPROX,
         _sql("SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(DISTINCT user), 1)", keys={"g": KEYS}), rows=2,
         frame_based=False),
    Case("sparse_vector (Laplace, c=2, release)", _q("Session.sparse_vector"), PURE, _svt, per_session=50),
    Case("sparse_vector (Gaussian, RDP curve at δ=1e-6)", _q("Session.sparse_vector"), dp.ZCDP(Fraction(1, 400)),
         _gaussian_svt, per_session=50, session=RDP, fast=False),     # 75 ms to open: its curve is computed
    Case("target_charging test", _q("Session.target_charging"), dp.ApproxDP(EPS, Fraction(1, 100)), _tct,
         per_session=40, session=RDP[1:]),
    Case("individual_filter", _q("Session.individual_filter"), dp.ZCDP(Fraction(1, 100)), _individual,
         pairs=_pairs(_base(100))),        # per-unit accounting in Python: a small table
    Case("gated_release", _q("dpframe.interactive.ptr:gated_release", "dpframe.interactive.ptr:propose_test_release"),
         PURE, _gated, per_session=50),
    Case("run_until", _q("dpframe.interactive.stopping:run_until"), PURE, _until, per_session=50),
    Case("robust_median", _q("dpframe.interactive.ptr:robust_median"), dp.ApproxDP(EPS, Fraction(1, 1000)),
         lambda s, f: robust_median(f, "x", bounds=BOUNDS), per_session=50),
]

PATE = MultiLabelPATE(gumbel_scale=20, sigma=10, delta_t=1e-6)
LABELS = ["l0", "l1", "l2"]


def _pate_sampler(teachers: pl.DataFrame, budget: dp.Budget) -> tuple[dp.Budget, Sampler]:
    votes = pl.DataFrame({"query": [0] * 3, "label": LABELS, "vote": [int(teachers[c].sum()) for c in LABELS]})
    return outcome_sampler(lambda s: _Fixed(PATE.cost(1), lambda: PATE.collect(s, votes)),
                           dp.PrivacyUnit("user"))(teachers, budget)


def _teachers(*votes: tuple[int, int, int], start: int = 0) -> pl.DataFrame:
    return pl.DataFrame([(start + i, *v) for i, v in enumerate(votes)], schema=["user", *LABELS], orient="row")


TEACHERS = _teachers(*[(1, 1, 0)] * 20, *[(1, 0, 0)] * 12)
PATE_SPEC = distinguisher(
    "multi-label PATE", {"dpframe_topk:MultiLabelPATE.collect"}, PATE.cost(1), _pate_sampler,
    [Neighbours(f"+1 teacher voting {v}", TEACHERS, pl.concat([TEACHERS, _teachers(v, start=NEW)]))
     for v in ((1, 1, 1), (0, 1, 0), (0, 0, 1))], runs=RUNS, slow_runs=5 * RUNS)

#: Every distinguisher, with the methods where a fault on D′ is injected to show that it can fail.
TARGETS: list[tuple[AuditSpec, Faults]] = [(c.spec(), c.faults) for c in CASES] + [
    (PATE_SPEC, ((MultiLabelPATE, "_release"),))]
SPECS = [spec for spec, _ in TARGETS]


# ----------------------------------------------------------------------------------------- attacks

def _on_added(value: Any) -> pl.Expr:
    """``value`` on the added unit's rows, null elsewhere: whatever fails on it fails on D′ only."""
    return pl.when(ADDED).then(value).otherwise(None)


def _datetime(ms: int, zone: str | None = None) -> pl.Expr:
    """A non-strict cast of ``ms`` to ``Datetime("ms")``: values past chrono's range stay (no null)."""
    return _on_added(pl.lit(ms)).cast(pl.Datetime("ms", zone), strict=False)


@dataclass(frozen=True)
class Attack:
    """A row-level expression that is null on D's rows and may fail on the added unit's."""

    name: str
    expr: Callable[[], pl.Expr]
    known_bug: str | None = None


ATTACKS = [
    Attack("str.to_integer(base=1) (the issue's example)",
           lambda: _on_added(pl.lit("1")).str.to_integer(base=1, strict=False)),
    Attack("str.to_integer(base=37)", lambda: _on_added(pl.lit("1")).str.to_integer(base=37, strict=False)),
    Attack("Date.dt.to_string('%Y-%m-%d %H:%M')",
           lambda: _on_added(pl.lit(dt.date(2020, 1, 1))).dt.to_string("%Y-%m-%d %H:%M")),
    Attack("String -> Date cast, strict=False", lambda: _on_added(pl.lit("2020-99-99")).cast(pl.Date, strict=False)),
    Attack("List -> Array(String, 3) cast, strict=False",
           lambda: _on_added(pl.lit("a,b")).str.split(",").cast(pl.Array(pl.String, 3), strict=False)),
    Attack("dt.month_start() past chrono's range", lambda: _datetime(10**18).dt.month_start()),
    Attack("dt.month_end() past chrono's range", lambda: _datetime(10**18).dt.month_end()),
    Attack("dt.offset_by('1mo') past chrono's range", lambda: _datetime(10**18).dt.offset_by("1mo")),
    Attack("dt.truncate('1mo') past chrono's range", lambda: _datetime(10**18).dt.truncate("1mo")),
    Attack("dt.round('1y') past chrono's range", lambda: _datetime(10**18).dt.round("1y")),
    Attack("dt.to_string('%Y') past chrono's range", lambda: _datetime(10**18).dt.to_string("%Y")),
    Attack("dt.cast_time_unit('ns') overflow", lambda: _datetime(10**17).dt.cast_time_unit("ns")),
    Attack("dt.base_utc_offset() past chrono's range", lambda: _datetime(10**18, "UTC").dt.base_utc_offset()),
    Attack("str.zfill(2**40)", lambda: _on_added(pl.lit("1")).str.zfill(2**40)),
    # total today: regression guards
    Attack("Int64 min // -1", lambda: _on_added(pl.lit(-2**63, dtype=pl.Int64)) // -1),
    Attack("Int64 min % -1", lambda: _on_added(pl.lit(-2**63, dtype=pl.Int64)) % -1),
    Attack("abs(Int64 min)", lambda: _on_added(pl.lit(-2**63, dtype=pl.Int64)).abs()),
    Attack("str.slice(-2**62, 2**62)", lambda: _on_added(pl.lit("abc")).str.slice(-2**62, 2**62)),
    Attack("str.strptime of an invalid date, strict=False",
           lambda: _on_added(pl.lit("2020-13-45")).str.strptime(pl.Date, "%Y-%m-%d", strict=False)),
    Attack("inf -> Int64 cast, strict=False", lambda: _on_added(pl.lit(math.inf)).cast(pl.Int64, strict=False)),
    Attack("1e30 -> Decimal(10, 2) cast, strict=False",
           lambda: _on_added(pl.lit(1e30)).cast(pl.Decimal(10, 2), strict=False)),
    Attack("dt.year() past chrono's range", lambda: _datetime(10**18).dt.year()),
    Attack("dt.convert_time_zone() past chrono's range", lambda: _datetime(10**18).dt.convert_time_zone("Asia/Tokyo")),
]
#: Aborts the process (a failed allocation) on D′ only: tested in a child process.
ABORTS = Attack("str.pad_start(2**40)", lambda: _on_added(pl.lit("1")).str.pad_start(2**40))
#: Put into every frame-based entry point: one attack that raises, one that panics.
MATRIX = [ATTACKS[0], ATTACKS[5]]
AGG = CASES[0]


def _issue_form(attack: Attack) -> AuditSpec:
    """The issue's form: ``with_columns(y=attack)``, then ``dp.count("y")`` at the issue's ε = 0.01.

    On a small table, with 30 runs per dataset and half: a difference on every run bounds ε ≥ 0.45.
    """
    case = replace(AGG, name=f"with_columns({attack.name}) + count", query=lambda s, f: f.agg(dp.count("y")),
                   budget=dp.PureDP(Fraction(1, 100)))
    return case.spec(lambda f: f.with_columns(y=attack.expr()), SMALL_PLAIN, attack.known_bug, runs=30)


def _inside(case: Case, attack: Attack) -> AuditSpec:
    """``case`` on the rows where the attack expression is null (all of D's; D′'s unless it fails)."""
    return replace(case.spec(lambda f: f.filter(attack.expr().is_null()), PLAIN, attack.known_bug),
                   name=f"{case.name} after filter({attack.name})")


# ------------------------------------------------------------------------------------------ checks

def _check(spec: AuditSpec, samples: int, seed: int, pairs: int | None = None) -> None:
    results = run_audit(spec, samples=samples, seed=seed, pairs=pairs)
    for r in results:
        print(r)
    bad = [r for r in results if not r.passed]
    assert not bad, "a neighbour distinguisher beat the claimed ε:\n" + "\n".join(map(str, bad))


class _Fault(RuntimeError):
    """A failure injected into every run on D′ (e.g. a backend that fails on the added unit's rows)."""


@contextlib.contextmanager
def _failing(faults: Faults) -> Iterator[None]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise _Fault("injected on D′ only")
    with contextlib.ExitStack() as stack:
        for owner, name in faults:
            stack.enter_context(mock.patch.object(owner, name, fail))
        yield


class _Kept:
    """A sampler factory whose runs are kept: the honest and the sabotaged audit share the runs on D."""

    def __init__(self, factory: SamplerFactory) -> None:
        self.factory = factory
        self.made: dict[int, tuple[dp.Budget, Sampler]] = {}
        self.runs: dict[tuple[int, int, int], Any] = {}

    def __call__(self, table: pl.DataFrame, budget: dp.Budget) -> tuple[dp.Budget, Sampler]:
        if id(table) not in self.made:
            self.made[id(table)] = self.factory(table, budget)
        cost, sample = self.made[id(table)]

        def kept(n: int, seed: int) -> Any:
            if (id(table), n, seed) not in self.runs:
                self.runs[id(table), n, seed] = sample(n, seed)
            return self.runs[id(table), n, seed]
        return cost, kept

    def raised(self, table: pl.DataFrame) -> float:
        """The share of the kept runs on ``table`` that raised."""
        shares = [float(out["raised"].mean()) for (key, _, _), out in self.runs.items() if key == id(table)]
        return sum(shares) / len(shares)


def _sabotaged(spec: AuditSpec, faults: Faults) -> AuditSpec:
    """``spec`` with every run on D′ failing in ``faults`` (the runs on D taken from ``spec``)."""
    neighbours = {id(p.neighbour) for p in spec.pairs()}

    def factory(table: pl.DataFrame, budget: dp.Budget) -> tuple[dp.Budget, Sampler]:
        if id(table) not in neighbours:
            return spec.sampler(table, budget)
        cost, sample = spec.sampler(table, budget)

        def failing(n: int, seed: int) -> Any:
            with _failing(faults):
                return sample(n, seed + 1)      # not the honest runs' seed: these runs are not kept
        return cost, failing
    return replace(spec, sampler=factory)


def _params(specs: list[AuditSpec]) -> list[Any]:
    """Specs as pytest params; one that a known bug makes fail is xfail(strict=True): the fix makes it XPASS."""
    return [pytest.param(s, id=s.name, marks=[pytest.mark.xfail(strict=True, raises=AssertionError, reason=s.known_bug)]
                         if s.known_bug else []) for s in specs]


@pytest.mark.parametrize(("spec", "faults"), [pytest.param(s, f, id=s.name) for s, f in TARGETS if s.fast])
def test_entry_point(spec: AuditSpec, faults: Faults) -> None:
    kept = _Kept(spec.sampler)
    spec = replace(spec, sampler=kept)
    _check(spec, spec.samples, seed=1, pairs=spec.fast_pairs)
    assert kept.raised(spec.pairs()[0].table) == 0, f"{spec.name} raised on D: the distinguisher tests nothing"
    caught = run_audit(_sabotaged(spec, faults), samples=spec.samples, seed=1, pairs=spec.fast_pairs)
    assert not any(r.passed for r in caught), ("the distinguisher cannot fail: it missed a fault injected into every "
                                               "run on D′\n" + "\n".join(map(str, caught)))


@pytest.mark.slow
@pytest.mark.parametrize("spec", _params(SPECS))
def test_entry_point_every_pair(spec: AuditSpec) -> None:
    _check(spec, spec.samples, seed=2)
    _check(spec, spec.slow_samples, seed=3, pairs=1)


@pytest.mark.parametrize("entry_point", query_entry_points())
def test_every_entry_point_has_a_distinguisher(entry_point: str) -> None:
    assert unaudited_queries(SPECS, [entry_point]) == [], (
        f"the query entry point {entry_point} has no neighbour distinguisher: add a Case for it to CASES in "
        "tests/adversarial/test_distinguishers.py (D′ = D plus one adversarial unit; outcomes include exceptions)")


def _explained(case: Case, table: pl.DataFrame) -> str | None:
    options = dict(case.session)
    total = options.pop("total", session_budget(case.budget))
    session = dp.Session({"t": table}, privacy_unit=UNIT, budget=total, seed=0, **options)
    query = case.query(session, session.table("t"))
    return str(query.explain(case.budget)) if hasattr(query, "explain") else None


def test_explain_does_not_read_the_data() -> None:
    """``explain`` is free: its text on D′ (every case's first pair) is its text on D, character for character."""
    texts = {case.name: (_explained(case, case.pairs[0].table), _explained(case, case.pairs[0].neighbour))
             for case in CASES}
    assert sum(d is not None for d, _ in texts.values()) >= 15          # most queries have an explain()
    assert {name: d for name, (d, n) in texts.items() if d != n} == {}


def test_under_noised_mechanism_is_caught() -> None:
    """A count mechanism planned for 10 ε while claiming ε (noise scale ÷ 10) is flagged end to end."""
    broken = Overclaiming(plugin_host().mechanism_for("len", "pure"), factor=10)
    sampler = outcome_sampler(lambda s: s.table("t").agg(dp.len()), UNIT, mechanisms=(broken,))
    spec = distinguisher("len, noise ÷ 10", {"Frame.agg"}, PURE, sampler, PLAIN, runs=100)
    results = run_audit(spec, seed=4)
    assert not any(r.passed for r in results), results


def _refused_when_built(spec: AuditSpec) -> str | None:
    """The refusal both neighbours get when the query is built (it reads no data), or None if it is built."""
    pair = spec.pairs()[0]
    refusals = []
    for table in (pair.table, pair.neighbour):
        try:
            spec.sampler(table, spec.budget)
        except dp.DPFrameError as e:
            refusals.append(f"{type(e).__name__}: {e}")
        else:
            refusals.append(None)
    assert refusals[0] == refusals[1], f"built on one neighbour only: {refusals}"
    return refusals[0]


@pytest.mark.parametrize("spec", _params([_issue_form(a) for a in ATTACKS]))
def test_attack_with_columns_count(spec: AuditSpec) -> None:
    """Refused when built on both neighbours alike (free, data-independent), or no distinguisher beats ε."""
    if _refused_when_built(spec) is None:
        _check(spec, spec.samples, seed=5, pairs=1)


@pytest.mark.slow
@pytest.mark.parametrize("spec", _params([_inside(c, a) for a in MATRIX for c in CASES if c.frame_based]))
def test_attack_inside_entry_point(spec: AuditSpec) -> None:
    if _refused_when_built(spec) is None:
        _check(spec, spec.samples, seed=6, pairs=1)


#: Runs the ABORTS attack in ``with_columns`` + ``dp.count`` on D or D′ (argv[1]) and prints what it raised.
_CHILD = """
import sys
sys.path.insert(0, {here!r})
import test_distinguishers as T
import dpframe as dp
spec = T._issue_form(T.ABORTS)
pair = spec.pairs()[0]
try:
    cost, sample = spec.sampler(pair.neighbour if sys.argv[1] == "D'" else pair.table, spec.budget)
except dp.DPFrameError as e:       # refused when built: the same on both (it reads no data)
    print("refused:", type(e).__name__, e)
else:
    print(sample(3, 0)["raised"].tolist())
"""


def _limit_memory() -> None:      # a child that does get its allocation must not take the machine's memory
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_attack_does_not_kill_the_process() -> None:
    """An outcome no ``except`` can turn into an answer: the query must not end the process on D′ only."""
    code = _CHILD.format(here=str(Path(__file__).parent))
    d, neighbour = (subprocess.run([sys.executable, "-c", code, side], capture_output=True, text=True, timeout=300,
                                   preexec_fn=_limit_memory) for side in ("D", "D'"))
    assert d.returncode == 0, d.stderr[-2000:]
    assert neighbour.returncode == 0, f"the query ended the process on D′ only (exit status {neighbour.returncode})"
    assert d.stdout == neighbour.stdout
    assert d.stdout.startswith("refused: PlanError") or d.stdout == "[0.0, 0.0, 0.0]\n"
