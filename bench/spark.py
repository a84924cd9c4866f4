#!/usr/bin/env python3
"""The core benchmark queries on the Spark backend (local mode) against plain Spark SQL on the same data.

Usage::

    python bench/spark.py [--rows 10000000] [--users 1000000] [--runs 3] [--master local[*]] [--driver-memory 6g]

Data and queries are those of ``bench/aggregations.py`` (``--rows`` visits by ``--users`` users, 1,000 Zipf cities;
count / sum / mean ungrouped, then by city with public keys, private keys, a user unit with
``max_rows=10`` on uniform and on Pareto-distributed rows per user), plus the median of ``spend``. Spark
reads each Parquet file itself and caches it (as a cluster would hold it); per query, the median of
``--runs`` timed runs after one warm-up, the engines interleaved:

* plain Spark SQL — the non-private query (``least(greatest(spend, 0), 500)`` for the clamp;
  ``median(spend)``, Spark's exact median) on a temporary view of the cached DataFrame;
* dpframe on the Spark backend, **open session** — ``collect()`` of the query on a session made once;
* dpframe on the Spark backend, **fresh session** — ``dp.Session`` over the cached DataFrame, then the
  query (registering a Spark DataFrame moves no data);
* plain Polars and dpframe's Polars backend on the same data in memory, for reference.

The target (issue 22): ≤ 1.5× plain Spark SQL. The report gives the core count and the load averages.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402  (bench/ is not a package)
    core_query,
    fmt_ratio,
    fmt_s,
    format_table,
    interleaved,
    load_average,
    log_stderr,
    machine_info,
    ratio,
    synthetic_visits,
)
from aggregations import (  # noqa: E402
    BOUNDS,
    CASES,
    COUNT_ONLY,
    DELTA,
    EPS,
    MAX_ROWS,
    N_CITIES,
    N_USERS,
    SESSION_BUDGET,
    SPEND_MAX,
    TAILS,
    USER_CASES,
    ZIPF_S,
    city_names,
    core_case,
    polars_query,
)

TARGET = 1.5
MEDIAN = "median"
LABELS = {**{c.id: c.label for c in CASES}, MEDIAN: "6 median(spend) (row unit)"}
PLAIN_COLUMNS = "count(*) AS n, sum(least(greatest(spend, 0), 500)) AS s, avg(least(greatest(spend, 0), 500)) AS m"
PLAIN_SQL = {
    "count": "SELECT count(*) AS n FROM {t}",
    "sum": "SELECT sum(least(greatest(spend, 0), 500)) AS s FROM {t}",
    "mean": "SELECT avg(least(greatest(spend, 0), 500)) AS m FROM {t}",
    **{c: f"SELECT city, {PLAIN_COLUMNS} FROM {{t}} GROUP BY city" for c in ("grp_public", "grp_private", *USER_CASES)},
    MEDIAN: "SELECT median(spend) AS med FROM {t}",
    COUNT_ONLY: "SELECT city, count(*) AS n FROM {t} GROUP BY city",
}


def dp_session(source: Any, case: str, backend: str, spark: Any = None) -> Any:
    """A dpframe Session over ``source`` with the privacy unit of ``case``."""
    import dpframe as dp

    unit = dp.PrivacyUnit("user_id", max_rows=MAX_ROWS) if case in USER_CASES else dp.PrivacyUnit.row()
    extra = {"spark": spark} if spark is not None else {}
    return dp.Session({"visits": source}, privacy_unit=unit, budget=dp.ApproxDP(*SESSION_BUDGET), backend=backend,
                      **extra)


def dp_query(sess: Any, case: str) -> Any:
    """``case``'s query on ``sess``, collected."""
    import dpframe as dp

    budget = dp.ApproxDP(EPS, DELTA) if case == "grp_private" else dp.PureDP(EPS)
    table = sess.table("visits")
    if case == MEDIAN:
        return table.agg(dp.median("spend", bounds=(0.0, SPEND_MAX))).collect(budget=budget)
    query = core_query(dp, table, core_case(case), BOUNDS, city_names(N_CITIES))
    return query.collect(budget=budget)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--users", type=int, default=N_USERS,
                   help="distinct user_id values (--rows 2000000 --users 200000 keeps the default's rows per user)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--cases", default=",".join([*(c.id for c in CASES), MEDIAN]), help="comma-separated case ids")
    p.add_argument("--no-polars", action="store_true", help="skip the Polars reference columns")
    args = p.parse_args()

    import polars as pl

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    before = load_average()
    cases = args.cases.split(",")
    tails = {TAILS.get(c, "uniform") for c in cases}
    paths = {t: synthetic_visits(args.rows, users=args.users, cities=N_CITIES, zipf_s=ZIPF_S, spend_max=SPEND_MAX,
                                 tail=t)[0] for t in tails}
    t = time.perf_counter()
    spark = (SparkSession.builder.master(args.master).appName("dpframe-bench")
             .config("spark.driver.memory", args.driver_memory).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t
    cached = {tail: spark.read.parquet(str(path)).cache() for tail, path in paths.items()}
    for tail, frame in cached.items():
        frame.count()   # materialize the cache once, like the in-memory Polars DataFrame
        frame.createOrReplaceTempView(f"visits_{tail}")
    frames = {} if args.no_polars else {tail: pl.read_parquet(path) for tail, path in paths.items()}

    rows = []
    for case in cases:
        tail = TAILS.get(case, "uniform")
        source = cached[tail]
        open_sess = dp_session(source, case, "spark", spark)
        engines: dict[str, Callable[[], Any]] = {
            "plain Spark SQL": lambda: spark.sql(PLAIN_SQL[case].format(t=f"visits_{tail}")).toArrow(),  # noqa: B023
            "dpframe Spark (open)": lambda: dp_query(open_sess, case),                                   # noqa: B023
            "dpframe Spark (fresh)": lambda: dp_query(dp_session(source, case, "spark", spark), case),  # noqa: B023
        }
        if not args.no_polars:
            df = frames[tail]
            polars_case = "grp_public" if case in USER_CASES and case != COUNT_ONLY else case
            engines["plain Polars"] = (
                (lambda: df.select(pl.col("spend").median())) if case == MEDIAN else polars_query(df, polars_case))  # noqa: B023
            engines["dpframe Polars"] = lambda: dp_query(dp_session(df, case, "polars"), case)          # noqa: B023
        got = interleaved(engines, args.runs)
        log_stderr(f"{case}: " + ", ".join(f"{n} {v:.3f}s" for n, v in got.items()))
        plain = got["plain Spark SQL"]
        opened, fresh = ratio(got["dpframe Spark (open)"], plain), ratio(got["dpframe Spark (fresh)"], plain)
        rows.append([LABELS[case], fmt_s(plain), fmt_s(got["dpframe Spark (open)"]), fmt_ratio(opened),
                     "yes" if opened is not None and opened <= TARGET else "NO",
                     fmt_s(got["dpframe Spark (fresh)"]), fmt_ratio(fresh),
                     fmt_s(got.get("plain Polars")), fmt_s(got.get("dpframe Polars"))])
    print(f"# dpframe Spark backend ({args.master}, Spark {spark.version}) vs plain Spark SQL, {args.rows:,} rows by "
          f"{args.users:,} users, "
          f"{os.cpu_count()} cores\n")
    print(f"{machine_info()}; SparkSession startup {startup:.1f} s (not in the times); median of {args.runs} runs; "
          f"load average before / after: {before} / {load_average()}\n")
    print(format_table(["query", "plain Spark SQL s", "dpframe open s", "ratio", f"≤ {TARGET:g}×", "dpframe fresh s",
                        "ratio", "plain Polars s", "dpframe Polars s"], rows))
    spark.stop()


if __name__ == "__main__":
    main()
