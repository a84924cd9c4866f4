#!/usr/bin/env python3
"""The core benchmark queries on the Spark backend (local mode) next to the Polars backend, same data.

Usage::

    python bench/spark.py [--rows 10000000] [--runs 3] [--master local[*]] [--driver-memory 6g]

Data and queries are those of ``bench/aggregations.py`` (``--rows`` visits, 1M users, 1,000 Zipf cities;
count / sum / mean ungrouped, then by city with public keys, private keys, and a user unit with
``max_rows=10``). Per query, the median of ``--runs`` timed runs after one warm-up of:

* plain Polars — the non-private query on the in-memory DataFrame (the baseline of every ratio);
* dpframe on the Polars backend — Session + query + ``collect()`` on the same in-memory DataFrame;
* dpframe on the Spark backend — Session + query + ``collect()`` on a Spark DataFrame that Spark reads
  from the same Parquet file itself (as on a cluster: nothing goes through the driver's Python process
  but the statistics).

Spark in local mode on one machine is expected to be slower than Polars (JVM, shuffles through local
disk, per-query scheduling); the point is that the same query runs unchanged and scales with the cluster.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import core_query, fmt_ratio, fmt_s, format_table, machine_info, median, ratio, synthetic_visits  # noqa: E402
from aggregations import (  # noqa: E402
    BOUNDS,
    CASES,
    DELTA,
    EPS,
    MAX_ROWS,
    N_CITIES,
    N_USERS,
    SESSION_BUDGET,
    SPEND_MAX,
    TIME_FLOOR_S,
    ZIPF_S,
    city_names,
    polars_query,
)


def dpframe_run(source: Any, case: str, backend: str, spark: Any = None) -> Any:
    """Session + query + collect() for ``case`` on ``backend`` (the same query text for every backend)."""
    import dpframe as dp

    unit = dp.PrivacyUnit("user_id", max_rows=MAX_ROWS) if case == "grp_public_user" else dp.PrivacyUnit.row()
    budget = dp.ApproxDP(EPS, DELTA) if case == "grp_private" else dp.PureDP(EPS)
    extra = {"spark": spark} if spark is not None else {}
    sess = dp.Session({"visits": source}, privacy_unit=unit, budget=dp.ApproxDP(*SESSION_BUDGET), backend=backend,
                      **extra)
    q = core_query(dp, sess.table("visits"), case, BOUNDS, city_names(N_CITIES))
    return q.collect(budget=budget)


def timed(fn: Any, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--cases", default=",".join(c.id for c in CASES), help="comma-separated case ids")
    args = p.parse_args()

    import polars as pl

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    path, _built = synthetic_visits(args.rows, users=N_USERS, cities=N_CITIES, zipf_s=ZIPF_S, spend_max=SPEND_MAX)
    df = pl.read_parquet(path)
    t = time.perf_counter()
    spark = (SparkSession.builder.master(args.master).appName("dpframe-bench")
             .config("spark.driver.memory", args.driver_memory).config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t
    visits = spark.read.parquet(str(path)).cache()
    visits.count()  # materialize the cache once, like the in-memory Polars DataFrame

    rows = []
    for case in [c for c in CASES if c.id in args.cases.split(",")]:
        plain = timed(polars_query(df, case.id), args.runs)
        on_polars = timed(lambda: dpframe_run(df, case.id, "polars"), args.runs)  # noqa: B023
        on_spark = timed(lambda: dpframe_run(visits, case.id, "spark", spark), args.runs)  # noqa: B023
        rows.append([case.label, fmt_s(plain), fmt_s(on_polars), fmt_s(on_spark),
                     fmt_ratio(ratio(on_polars, plain, TIME_FLOOR_S)), fmt_ratio(ratio(on_spark, plain, TIME_FLOOR_S)),
                     fmt_ratio(ratio(on_spark, on_polars))])
        print(f"{case.id}: plain {plain:.3f}s, polars backend {on_polars:.3f}s, spark backend {on_spark:.3f}s",
              file=sys.stderr, flush=True)
    print(f"# dpframe Spark backend ({args.master}, Spark {spark.version}) vs Polars backend, {args.rows:,} rows\n")
    print(f"{machine_info()}; SparkSession startup {startup:.1f} s (not in the times); median of {args.runs} runs\n")
    print(format_table(["query", "plain Polars s", "dpframe Polars s", "dpframe Spark s", "Polars backend / plain",
                        "Spark backend / plain", "Spark / Polars backend"], rows))
    spark.stop()


if __name__ == "__main__":
    main()
