#!/usr/bin/env python3
"""Benchmark of the learning queries: success rate versus rows, against the digest's minimum row counts.

Usage::

    python bench/learning.py [--runs 50] [--rows 1000000]

For each query the row count n is a multiple (½×, 1×, 2×, 4×) of the *required* rows the planner
states (``explain()``: the algorithm's minimum for success probability 1 − β, β = 1e-6, at 9/10 of the
budget); each run is a full ``collect`` (fresh session, seeded, noisy-count gate included). Reported:
how often the gate answered, and how often an answer was correct:

* interior point (ε = 1, 2⁴⁰ codes, worst-case data: two adjacent values): answer in [min, max];
* TreeLog (ε = 4, δ = 1e-6, all-equal data, at 1× its minimum only; the gate sees n ≈ min);
* threshold (ε = 1, 10⁴ codes, realizable uniform data): training error ≤ 2k/n;
* rectangle (ε = 2, d = 2, 10³ codes per axis, uniform positives in a box): box inside the true box.

Time: ``interior_point`` and ``learn_threshold`` on ``--rows`` rows, as a ratio to the plain Polars
query giving the non-private answer (``median`` / a sort plus ``min``/``max``) on the same DataFrame, with
the CPU ratio, the serial time and the projected 16-core ratio (``bench/_scaling.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import format_table, machine_info  # noqa: E402
from _scaling import SCALING_HEADERS, cores, scaling_columns, timed  # noqa: E402
from dpframe_learning import InteriorPoint, NoAnswer, Rectangle, Threshold  # noqa: E402

import dpframe as dp  # noqa: E402

MULTIPLES = (0.5, 1.0, 2.0, 4.0)


def session(data: pl.DataFrame, seed: int) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(100, 1e-5), seed=seed)


def required(query: Any, budget: dp.Budget) -> int:
    return int(query.plan(budget).params["gate"].required)


def rate(runs: int, make: Callable[[int], tuple[Any, Callable[[Any], bool]]], budget: dp.Budget) -> tuple[str, str]:
    answered = correct = 0
    for seed in range(runs):
        query, ok = make(seed)
        out = query.collect(budget)
        if not isinstance(out, NoAnswer):
            answered += 1
            correct += ok(out)
    return f"{answered}/{runs}", (f"{correct}/{answered}" if answered else "–")


def interior_rows(runs: int) -> list[list[object]]:
    rows = []
    budget = dp.PureDP(1)
    for method in ("exponential", "binary_search"):
        need = required(session(pl.DataFrame({"x": [0]}), 0).table("t").interior_point(
            "x", bounds=(0, 2**40 - 1), method=method), budget)
        for mult in MULTIPLES:
            n = max(2, int(need * mult))
            data = pl.DataFrame({"x": [2**39] * (n // 2) + [2**39 + 1] * (n - n // 2)})

            def make(seed: int, data: pl.DataFrame = data, method: str = method) -> tuple[Any, Callable[[Any], bool]]:
                q = session(data, seed).table("t").interior_point("x", bounds=(0, 2**40 - 1), method=method)
                return q, lambda r: isinstance(r, InteriorPoint) and 2**39 <= r.value <= 2**39 + 1

            rows.append([f"interior_point {method}", need, f"{mult:g}× = {n}", *rate(runs, make, budget)])
    budget_tl = dp.ApproxDP(4, 1e-6)
    need = required(session(pl.DataFrame({"x": [0]}), 0).table("t").interior_point(
        "x", bounds=(0, 2**40 - 1), method="treelog"), budget_tl)
    data = pl.DataFrame({"x": [12345] * (2 * need)})

    def make_tl(seed: int) -> tuple[Any, Callable[[Any], bool]]:
        q = session(data, seed).table("t").interior_point("x", bounds=(0, 2**40 - 1), method="treelog")
        return q, lambda r: isinstance(r, InteriorPoint) and r.value == 12345

    rows.append(["interior_point treelog", need, f"2× = {2 * need}", *rate(max(3, runs // 10), make_tl, budget_tl)])
    return rows


def threshold_rows(runs: int) -> list[list[object]]:
    budget = dp.PureDP(1)
    probe = session(pl.DataFrame({"x": [0], "y": [1]}), 0).table("t").learn_threshold(
        "x", label="y", bounds=(0, 9999), positive="auto")
    plan = probe.plan(budget)
    need, k = plan.params["gate"].required, plan.params["k"]
    rows = []
    for mult in (1.0, 2.0, 4.0, 16.0):
        n = int(need * mult)

        def make(seed: int, n: int = n) -> tuple[Any, Callable[[Any], bool]]:
            rng = np.random.default_rng(seed)
            u = int(rng.integers(1000, 9000))
            x = rng.integers(0, 10_000, n)
            data = pl.DataFrame({"x": x, "y": (x <= u).astype(np.int8)})
            q = session(data, seed).table("t").learn_threshold("x", label="y", bounds=(0, 9999))
            return q, lambda r: isinstance(r, Threshold) and int(np.sum(r.predict(x) != (x <= u))) <= 2 * k

        rows.append(["learn_threshold", need, f"{mult:g}× = {n}", *rate(runs, make, budget)])
    return rows


def rectangle_rows(runs: int) -> list[list[object]]:
    budget = dp.PureDP(2)
    bounds = {"a": (0, 999), "b": (0, 999)}
    probe = session(pl.DataFrame({"a": [0], "b": [0], "y": [1]}), 0).table("t").learn_rectangle(
        ["a", "b"], label="y", bounds=bounds)
    need = required(probe, budget)
    rows = []
    for mult in MULTIPLES:
        n = int(need * mult)

        def make(seed: int, n: int = n) -> tuple[Any, Callable[[Any], bool]]:
            rng = np.random.default_rng(seed)
            data = pl.DataFrame({"a": rng.integers(200, 701, n), "b": rng.integers(100, 401, n), "y": [1] * n})
            q = session(data, seed).table("t").learn_rectangle(["a", "b"], label="y", bounds=bounds)

            def ok(r: Any) -> bool:
                (a0, a1), (b0, b1) = r.intervals["a"], r.intervals["b"]    # half-open: lower ≤ x < upper
                return isinstance(r, Rectangle) and 200 <= a0 < a1 <= 701 and 100 <= b0 < b1 <= 401
            return q, ok

        rows.append(["learn_rectangle d=2", need, f"{mult:g}× = {n}", *rate(runs, make, budget)])
    return rows


def timing_rows(n: int, runs: int) -> list[list[object]]:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**40, n)
    data = pl.DataFrame({"x": x, "y": (x <= 2**39).astype(np.int8)})
    sess = session(data, 0)       # built once: the session is not what is timed
    out = []
    cases = [
        ("interior_point (auto)", lambda: sess.table("t").interior_point("x", bounds=(0, 2**40)).collect(dp.PureDP(1)),
         lambda: data.select(pl.col("x").median())),
        ("learn_threshold (auto)", lambda: sess.table("t").learn_threshold(
            "x", label="y", bounds=(0, 2**40)).collect(dp.PureDP(1)),
         lambda: data.sort("x").group_by("y").agg(pl.col("x").min().alias("lo"), pl.col("x").max().alias("hi"))),
    ]
    for name, private, plain in cases:
        out.append([name, f"{n:,}", *scaling_columns(timed(private, runs), timed(plain, runs))])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50, help="collects per cell (default 50)")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows for the timing table")
    parser.add_argument("--time-runs", type=int, default=3)
    parser.add_argument("--time-only", action="store_true", help="skip the success-rate tables")
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"# dpframe learning benchmark\n\n{machine_info()}; β = 1e-6; {args.runs} runs per cell  \n{cores()}\n")
    if not args.time_only:
        headers = ["query", "required rows", "n", "answered", "correct | answered"]
        rows = interior_rows(args.runs) + threshold_rows(args.runs) + rectangle_rows(args.runs)
        print(format_table(headers, rows))
        print()
    print(format_table(["query", "rows", *SCALING_HEADERS], timing_rows(args.rows, args.time_runs)))
    print(f"\n(total {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
