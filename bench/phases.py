#!/usr/bin/env python3
"""Where one query's time goes: wall time of its phases, at several dpframe thread counts.

Usage::

    python bench/phases.py [--rows 10000000] [--threads 1,4,16] [--runs 3]
                           [--queries "median per group,median per 100k groups,..."]

Data as in ``bench/quantiles.py`` (``x`` uniform in [0, 1000), ``g`` uniform group ids) plus ``v``
integers for the group-by, ``c`` skewed city codes (for the count-only query: a user's rows often share a
city, so they are copies) and ``u``, a user id with about 10 rows per user (the user-level query bounds
to ``max_rows=10``, as ``bench/aggregations.py`` case 4). Each query is collected ``--runs`` times per
thread count (``DPFRAME_THREADS``; Polars keeps its own pool) after one warm-up; the phases are the wall
time spent inside a few named functions (:data:`PHASES`; nested phases count in both), taken by wrapping
them for the timed runs, and the rest of the query as "other". The plain Polars query runs in the same
process for the ratio.
A diagnostic for the 16-core machine (``bench/device_run.sh``), not a benchmark of record.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scaling import cores  # noqa: E402

PHASES = [
    ("dpframe.backends.polars", "PolarsBackend", "statistics"),
    ("dpframe.backends.polars", "PolarsBackend", "bounded"),
    ("dpframe.backends.polars", None, "row_hashes"),
    ("dpframe.backends.polars", None, "kept_mask"),
    ("dpframe.backends._bounding", None, "_over"),
    ("dpframe.backends._bounding", None, "_bottom_k"),
    ("dpframe.backends._bounding", None, "sort"),
    ("dpframe.backends._bounding", None, "_with_copies"),
    ("dpframe.backends._bounding", None, "_ranks"),
    ("dpframe.backends.polars_lists", None, "sorted_lists"),
    ("dpframe.backends.polars_windows", "RankWindows", "plan"),
    ("dpframe.backends.polars_windows", None, "sort_each"),
    ("dpframe.backends.polars_windows", None, "finish"),
    ("dpframe_quantiles.em", None, "em_quantile"),
    ("dpframe_quantiles.em", None, "joint_quantiles"),
    ("dpframe.noise.samplers", None, "discrete_laplace_batch"),
    ("dpframe.noise.samplers", None, "discrete_gaussian_batch"),
    ("polars.lazyframe.frame", "LazyFrame", "collect"),
    ("polars", None, "collect_all"),
    ("dpframe.release", None, "release"),
]
"""(module, class or None, function): each is timed where it is looked up from (module attribute or class)."""

spent: dict[str, float] = defaultdict(float)


def _wrap(owner: Any, name: str, label: str) -> Callable[[], None]:
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start

    setattr(owner, name, timed)
    return lambda: setattr(owner, name, original)


def instrument() -> list[Callable[[], None]]:
    """Wrap every phase where it is defined and where other modules imported it by name."""
    undo = []
    for module, cls, fn in PHASES:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        label = f"{cls}.{fn}" if cls else fn
        if cls is not None:
            undo.append(_wrap(getattr(mod, cls), fn, label))
            continue
        if not hasattr(mod, fn):
            continue
        target = getattr(mod, fn)
        for other in list(sys.modules.values()):     # `from x import fn` copies: wrap those too
            if other is not None and getattr(other, "__name__", "").startswith(("dpframe", "polars")) and (
                    getattr(other, fn, None) is target):
                undo.append(_wrap(other, fn, label))
    return undo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--threads", default="1,4,16")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--queries", default="")
    args = p.parse_args()

    import numpy as np
    import polars as pl

    import dpframe as dp

    rng = np.random.default_rng(7)
    x = rng.uniform(0, 1000, args.rows)
    g1k, g100k = rng.integers(0, 1000, args.rows), rng.integers(0, 100_000, args.rows)
    users = rng.integers(0, max(1, args.rows // 10), args.rows)     # ~10 rows per user, as in aggregations.py
    city = (rng.zipf(1.1, args.rows) - 1) % 1000        # skewed, as aggregations.py's cities: units hold copies
    df = pl.DataFrame({"x": x, "g": g1k, "h": g100k, "v": rng.integers(0, 100, args.rows), "u": users, "c": city})
    sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10**9))
    t = sess.table("t")
    by_user = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit("u", max_rows=10), budget=dp.PureDP(10**9)).table("t")
    k1, k100 = list(range(1000)), list(range(100_000))
    deciles = [i / 10 for i in range(1, 10)]

    def median(by: str, keys: list[int]) -> Any:
        return t.group_by(by, keys=keys).agg(dp.median("x", bounds=(0, 1000), resolution=2**-10))

    queries: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "median per group": (lambda: median("g", k1),
                             lambda: df.group_by("g").agg(pl.col("x").median())),
        "deciles per group": (lambda: t.group_by("g", keys=k1).agg(
            dp.quantile("x", deciles, bounds=(0, 1000), resolution=2**-10)),
            lambda: df.group_by("g").agg([pl.col("x").quantile(q).alias(f"q{q}") for q in deciles])),
        "median per 100k groups": (lambda: median("h", k100),
                                   lambda: df.group_by("h").agg(pl.col("x").median())),
        "deciles per 100k groups": (lambda: t.group_by("h", keys=k100).agg(
            dp.quantile("x", deciles, bounds=(0, 1000), resolution=2**-10)),
            lambda: df.group_by("h").agg([pl.col("x").quantile(q).alias(f"q{q}") for q in deciles])),
        "group-by public keys": (lambda: t.group_by("g", keys=k1).agg(
            dp.len(), dp.sum("v", bounds=(0, 100)), dp.mean("v", bounds=(0, 100)).alias("mean")),
            lambda: df.group_by("g").agg(pl.len(), pl.col("v").sum(), pl.col("v").mean().alias("mean"))),
        "group-by user unit": (lambda: by_user.group_by("g", keys=k1).agg(
            dp.len(), dp.sum("v", bounds=(0, 100)), dp.mean("v", bounds=(0, 100)).alias("mean")),
            lambda: df.group_by("g").agg(pl.len(), pl.col("v").sum(), pl.col("v").mean().alias("mean"))),
        "count only user unit": (lambda: by_user.group_by("c", keys=k1).agg(dp.len()),
                                 lambda: df.group_by("c").agg(pl.len())),
    }
    wanted = [q.strip() for q in args.queries.split(",")] if args.queries else list(queries)
    print(f"# Phases of a query ({args.rows:,} rows; {cores()}; polars {pl.__version__}, numpy {np.__version__})\n")
    for name in wanted:
        build, plain = queries[name]
        plain()
        plain_ms = statistics.median(_ms(plain) for _ in range(args.runs))
        print(f"## {name}: plain Polars {plain_ms:.0f} ms\n")
        print("| threads | dpframe ms | ratio | phases (ms per query) |\n|---:|---:|---:|---|")
        for n in [int(v) for v in args.threads.split(",")]:
            os.environ["DPFRAME_THREADS"] = str(n)
            build().collect(dp.PureDP(1))
            undo = instrument()
            spent.clear()
            walls = [_ms(lambda build=build: build().collect(dp.PureDP(1))) for _ in range(args.runs)]
            for u in undo:
                u()
            wall = statistics.median(walls)
            ranked = sorted(spent.items(), key=lambda kv: -kv[1])
            parts = ", ".join(f"{k} {v * 1000 / args.runs:.0f}" for k, v in ranked)
            print(f"| {n} | {wall:.0f} | {wall / plain_ms:.2f}× | {parts} |", flush=True)
        print()


def _ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    main()
