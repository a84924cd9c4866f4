"""Review 54b: stop 53's non-accounting changes attacked, and the remote server's stream leftovers.

* A remote client's ``open`` of a sparse vector or channel while another user of the session held its one stream
  was refused with the holder's parameters (``sparse_vector(T=480, c=2) is still open``) and a fix the caller
  cannot follow ("close it first"): it now says that another user holds the session's stream, and how it gets
  free, naming nothing of it. (The session's ``history()``, which every client of one server reads, lists the
  reservation all the same: clients of one server share one session; analysts who must not see each other's
  queries get sessions of their own, ``docs/remote.md``.)
* The data owner's own stream (opened in process on the served session) is not closed by ``stream_idle``: the
  server sees none of the owner's calls, so it cannot tell that stream idle, and closing it would fail the owner's
  program mid-use. A client's open is refused while it is open, saying so; documented.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from decimal import localcontext
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from dpframe_aggregates.partition_selection import gaussian_threshold, subgaussian_threshold

import dpframe as dp

from .selection_exact import PREC, any_released, dec, gaussian_tail_range
from .test_review53g import KEY, _store, _visits  # its remote stream fixtures


def _refused_open(sess: dp.Session, remote: Any, *secrets_shown: str) -> dp.PlanError:
    """``remote``'s sparse vector refused, free, its message and fix naming none of ``secrets_shown``."""
    before = sess.history().height
    with pytest.raises(dp.PlanError, match="still open") as info:
        remote.sparse_vector(threshold=123, max_positives=1, budget=dp.PureDP(1))
    text = f"{info.value} {info.value.fix}"
    assert "another" in str(info.value) and info.value.argument == "session", text
    for secret in secrets_shown:
        assert secret not in text, text
    assert sess.history().height == before
    return info.value


@pytest.mark.parametrize("tool", ["sparse_vector", "target_charging"])
def test_a_refused_remote_open_names_nothing_of_another_clients_stream(tool: str) -> None:
    """The attack: analyst B opens while analyst A holds the stream; the refusal quoted A's threshold and count
    (or ε, τ, δ) and told B to close a stream B cannot reach."""
    sess = _visits(dp.ApproxDP(50, 1e-5))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=None).start() as server, \
            dp.connect(server.address, authkey=KEY) as holder, dp.connect(server.address, authkey=KEY) as other:
        if tool == "sparse_vector":
            held = holder.sparse_vector(threshold=4817, max_positives=7, budget=dp.PureDP(1))
            shown = ("4817", "T=", "c=7")
        else:
            held = holder.target_charging(epsilon=0.3125, max_hits=29, delta=3e-7)
            shown = ("5/16", "0.3125", "τ=29", "3e-07", "target_charging(")
        error = _refused_open(sess, other, *shown)
        assert "stream_idle" in error.fix
        with pytest.raises(dp.PlanError, match="still open") as own:     # the holder's own second open names its own
            holder.sparse_vector(threshold=1, max_positives=1, budget=dp.PureDP(1))
        assert shown[0] in str(own.value) and "another" not in str(own.value)
        held.close()
        with other.sparse_vector(threshold=123, max_positives=1, budget=dp.PureDP(1)) as sv:
            assert sv.test(_store(other, 0)) in (True, False)


def test_the_data_owners_stream_is_not_released_and_its_refusal_names_nothing() -> None:
    """The owner's in-process stream: the server sees none of its calls (it cannot tell it idle) and does not close
    it under the owner's code; a client's open is refused meanwhile, naming nothing of it."""
    sess = _visits()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=0.1).start() as server, \
            dp.connect(server.address, authkey=KEY) as other:
        with sess.sparse_vector(threshold=5903, max_positives=3, budget=dp.PureDP(1)) as mine:
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:          # idle well past stream_idle
                time.sleep(0.05)
            _refused_open(sess, other, "5903", "T=", "c=3")
            assert not mine.closed and mine.test(_store(sess, 0)) in (True, False)
        with other.sparse_vector(threshold=123, max_positives=1, budget=dp.PureDP(1)) as sv:
            assert sv.test(_store(other, 1)) in (True, False)
    assert sess.history()["status"].to_list() == ["committed", "committed"]


def test_in_process_the_refusal_still_names_the_open_stream() -> None:
    """One process, one user: nesting is refused naming the stream that is open (its own), as before."""
    sess = _visits()
    with sess.sparse_vector(threshold=4817, max_positives=7, budget=dp.PureDP(1)), \
            pytest.raises(dp.PlanError, match=r"sparse_vector\(T=4817, c=7\) is still open"):
        sess.sparse_vector(threshold=1, max_positives=1, budget=dp.PureDP(1))


# --- canonical keys: float keys made every other way still carry no row's sign bit or NaN payload -----------------
#
# Review 53i made the released float keys canonical in the private reader (``release.canonical_keys``); its tests
# cover Float64/Float32 columns and one level of nesting. Here: Float16, keys computed by an expression (a derived
# column, an expression in group_by, SQL GROUP BY on an expression), SQL select expressions over a group key
# (evaluated on the released key, so 1/x is +inf, never -inf) and floats two levels deep. All were canonical already.

NEG_NAN = struct.unpack("<d", struct.pack("<Q", 0xFFF8_0000_0000_0001))[0]
CANONICAL = {0x0, 0x7FF8_0000_0000_0000}


def _floats(value: object) -> list[int]:
    """The bits of every float in ``value`` (nested lists and dicts walked)."""
    if isinstance(value, float):
        return [struct.unpack("<Q", struct.pack("<d", value))[0]]
    items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
    return [b for v in items for b in _floats(v)]


NESTED = {
    "list of lists": (pl.List(pl.List(pl.Float64)), lambda v: [[v]]),
    "list of structs (Float32)": (pl.List(pl.Struct({"a": pl.Float32, "s": pl.String})),
                                  lambda v: [{"a": v, "s": "q"}]),
    "struct of list": (pl.Struct({"a": pl.List(pl.Float64)}), lambda v: {"a": [v]}),
    "array of arrays": (pl.Array(pl.Array(pl.Float64, 1), 1), lambda v: [[v]]),
    "struct of struct": (pl.Struct({"o": pl.Struct({"a": pl.Float64})}), lambda v: {"o": {"a": v}}),
    "Float16": (pl.Float16, lambda v: v),
}

QUERIES: dict[str, Callable[[dp.Session], Any]] = {
    "derived column": lambda s: s.table("t").with_columns(y=-pl.col("x")).group_by("y").agg(dp.len()),
    "group_by expression": lambda s: s.table("t").group_by((pl.col("x") * 1.0).alias("y")).agg(dp.len()),
    "SQL GROUP BY expression": lambda s: s.sql("SELECT -x AS y, COUNT(*) AS n FROM t GROUP BY -x"),
    "SQL 1/key": lambda s: s.sql("SELECT 1/x AS y, COUNT(*) AS n FROM t GROUP BY x"),
    "SQL text of key": lambda s: s.sql("SELECT CAST(x AS VARCHAR) AS y, COUNT(*) AS n FROM t GROUP BY x"),
}


def _keyed(first: float, dtype: pl.DataType, make: Callable[[float], object], backend: str) -> dp.Session:
    values = [first] + [0.0] * 300 + [-0.0] * 300 + [NEG_NAN] * 300
    frame = pl.DataFrame({"x": pl.Series([make(v) for v in values], dtype=dtype)})
    return dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(100, 1e-3),
                      backend=backend, seed=1)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_keys_of_every_float_shape_are_released_canonically(backend: str) -> None:
    for name, (dtype, make) in NESTED.items():
        for first in (-0.0, NEG_NAN):
            out = _keyed(first, dtype, make, backend).table("t").group_by("x").agg(dp.len()) \
                .collect(dp.ApproxDP(10, 1e-5))
            assert isinstance(out, pl.DataFrame)
            assert sorted(b for v in out["x"].to_list() for b in _floats(v)) == sorted(CANONICAL), (name, first)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_keys_computed_by_expressions_are_released_canonically(backend: str) -> None:
    for name, query in QUERIES.items():
        seen = set()
        for first in (-0.0, 0.0, NEG_NAN):
            out = query(_keyed(first, pl.Float64(), lambda v: v, backend)).collect(dp.ApproxDP(10, 1e-5))
            assert isinstance(out, pl.DataFrame) and out.height == 2, (name, out)
            seen.add(tuple(sorted(map(str, out["y"].to_list()))))
            if out["y"].dtype.is_float():
                assert set(_floats(out["y"].to_list())) <= CANONICAL | {0x7FF0_0000_0000_0000}, name   # 0, NaN, +inf
        assert len(seen) == 1, (name, seen)


# --- the discrete Gaussian selection threshold at random points (review 53d's τ) ----------------------------------
#
# test_review53d checks τ on a grid of calibrated σ², round scales and seven δ. Here: 250 random points — σ² any
# rational from 10⁻⁶ to 10⁵ and the points either side of the switches at σ² = 4 (the lattice total's bound) and
# 10⁴ (the direct sum / Euler–Maclaurin), δ from 10⁻³⁰ to 0.999, L0 up to 10⁶ — against the 90-digit lattice sum:
# τ meets δ and τ − 1 does not. And adversarial parameters plan at once (no hang): the longest bisection is ~500
# tail evaluations (σ² near 10³⁰⁰).


def _tau_points() -> list[tuple[int, Fraction, Fraction]]:
    rnd = random.Random(54)
    edges = [Fraction(3999999, 10**6), Fraction(4), Fraction(4000001, 10**6), Fraction(19999, 2), Fraction(10**4),
             Fraction(10**4 + 1)]
    points = []
    while len(points) < 250:
        s2 = Fraction(rnd.randint(1, 10**9), 10**9) * Fraction(10) ** rnd.randint(-5, 5) if rnd.random() < 0.7 \
            else rnd.choice(edges)
        delta = Fraction(rnd.uniform(1e-3, 0.999)) if rnd.random() < 0.3 else Fraction(10 ** rnd.uniform(-30, -1))
        l0 = rnd.choice([1, 2, 5, rnd.randint(1, 10**6)])
        if Fraction(1, 10**6) <= s2 <= 10**5:
            points.append((l0, s2, delta))
    return points


def test_gaussian_threshold_is_the_smallest_sound_one_at_random_points() -> None:
    for l0, s2, delta in _tau_points():
        tau = gaussian_threshold(l0, s2, delta)
        with localcontext() as ctx:
            ctx.prec = PREC
            assert any_released(l0, gaussian_tail_range(s2, tau - 1)[1]) <= dec(delta), (l0, s2, delta, tau)
            if tau > 1:         # (τ = 1 where δ allows it, review 55g: τ = 2 is checked against τ − 1 too)
                assert any_released(l0, gaussian_tail_range(s2, tau - 2)[0]) > dec(delta), (l0, s2, delta, tau)


@pytest.mark.parametrize(("l0", "s2", "delta"), [
    (10**6, Fraction(3**600, 7**700), Fraction(1, 3**1800)), (1, Fraction(10**299, 3), Fraction(1, 2**3000)),
    (2**62, Fraction(10**4), Fraction(1, 2**3000)), (1, Fraction(10**4), Fraction(1, 2**100000)),
    (10**9, Fraction(10**20 + 1, 7), Fraction(1, 10**300)), (1, Fraction(10**5), Fraction(999999, 10**6))])
def test_gaussian_threshold_of_adversarial_parameters_is_quick(l0: int, s2: Fraction, delta: Fraction) -> None:
    start = time.process_time()
    tau = gaussian_threshold.__wrapped__(l0, s2, delta)     # uncached
    assert 1 <= tau <= subgaussian_threshold(l0, s2, delta)       # τ = 1 at δ = 0.999999 (review 55g)
    assert time.process_time() - start < 1.0
