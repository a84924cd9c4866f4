#!/usr/bin/env python3
"""Benchmark of ``sess.sql`` on the DuckDB (and Polars) backend against plain DuckDB SQL on the same data.

Usage::

    python bench/sql.py [--rows 10000000] [--runs 5] [--parquet]

Data: the standard synthetic visits table of ``bench/_common.py`` (``--rows`` rows, 1M users, 1,000
Zipf-distributed cities, ``spend`` uniform in [0, 600)), built once as Parquet under ``bench/.data/`` and
loaded into memory once; for query 5 the same columns with Pareto-distributed rows per user.

Queries (the core benchmark of bench/aggregations.py, written in SQL), each against the same
non-private query in plain DuckDB (``least(greatest(spend, 0), 500)`` for the clamp):

1. ``SELECT COUNT(*), SUM(CLAMP(spend, 0, 500)), AVG(CLAMP(spend, 0, 500)) FROM visits`` (unit = row);
2. the same per city, with the 1,000 city names declared as public keys;
3. the same per city with private keys (DP partition selection, δ = 1e-6);
4. as 2 with ``PrivacyUnit("user_id", max_rows=10)``: contribution bounding (plain DuckDB does none);
5. as 4 with heavy-tailed users (Pareto rows per user, same mean);
6. ``MEDIAN(CLAMP(spend, 0, 600))`` (unit = row) against DuckDB's exact ``median(spend)``.

Two columns per engine:

* **open session** — ``sess.sql(text).collect(budget)`` on a session created once (parse, plan,
  reserve, the backend's queries, noise) against the plain query on an open connection that already
  holds the table;
* **fresh session** — ``dp.Session(...)`` over the in-memory frame, then the same query (the table is
  handed to DuckDB inside, zero-copy) against a plain DuckDB connection doing the same: connect,
  register the frame's Arrow data (zero-copy too), run the query.

Every case is timed ``--runs`` times after a warm-up, engines interleaved, median reported. Targets
(issues 17 and 22): queries 1–3 ≤ 1.3× plain DuckDB on an open session; the median ≤ 2× DuckDB's exact
median; the user-level queries ≤ 3×; a fresh session's first answer ≤ 2× the fresh plain connection.
The report says which are met, with the core count and the load averages (a shared machine).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402  (bench/ is not a package)
    DATA_DIR,
    city_names,
    fmt_ms,
    fmt_ratio,
    format_table,
    interleaved,
    load_average,
    log_stderr,
    machine_info,
    ratio,
    synthetic_visits,
    write_json,
)

COLUMNS = "COUNT(*) AS n, SUM(CLAMP(spend, 0, 500)) AS s, AVG(CLAMP(spend, 0, 500)) AS m"
PLAIN = "count(*) AS n, sum(least(greatest(spend, 0), 500)) AS s, avg(least(greatest(spend, 0), 500)) AS m"
GROUPED = (f"SELECT city, {COLUMNS} FROM visits GROUP BY city", f"SELECT city, {PLAIN} FROM visits GROUP BY city")
# (label, unit, data, dpframe SQL, plain DuckDB SQL, open-session target)
QUERIES = [
    ("1. count/sum/mean", "row", "uniform", f"SELECT {COLUMNS} FROM visits", f"SELECT {PLAIN} FROM visits", 1.3),
    ("2. per city, public keys", "row", "uniform", *GROUPED, 1.3),
    ("3. per city, private keys", "row-private", "uniform", *GROUPED, 1.3),
    ("4. as 2, user_id ≤ 10 rows", "user", "uniform", *GROUPED, 3.0),
    ("5. as 4, Pareto rows per user", "user", "pareto", *GROUPED, 3.0),
    ("6. median(spend)", "row", "uniform", "SELECT MEDIAN(CLAMP(spend, 0, 600)) AS med FROM visits",
     "SELECT median(spend) AS med FROM visits", 2.0),
]
FRESH_TARGET = 2.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--users", type=int, default=1_000_000,
                        help="distinct user_id values (default 1M; --rows 2000000 --users 200000 has the rows per "
                             "user of the default 10M-row table)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--queries", default="1,2,3,4,5,6", help="which queries (numbers)")
    parser.add_argument("--parquet", action="store_true", help="also compare sessions over the Parquet path")
    args = parser.parse_args()

    import duckdb
    import polars as pl

    import dpframe as dp

    before = load_average()
    chosen = [q for q in QUERIES if q[0].split(".")[0] in args.queries.split(",")]
    paths = {tail: synthetic_visits(args.rows, users=args.users, tail=tail)[0] for tail in {q[2] for q in chosen}}
    data = {tail: pl.read_parquet(path) for tail, path in paths.items()}
    units = {"row": dp.PrivacyUnit.row(), "row-private": dp.PrivacyUnit.row(),
             "user": dp.PrivacyUnit("user_id", max_rows=10)}
    budget_for = {"row": dp.PureDP(1.0), "row-private": dp.ApproxDP(1.0, 1e-6), "user": dp.PureDP(1.0)}
    total = dp.ApproxDP(1e9, 0.5)
    keys = {"visits.city": city_names(1000)}

    def session(backend: str, source: Any, unit: str) -> dp.Session:
        return dp.Session({"visits": source}, privacy_unit=units[unit], budget=total, backend=backend,
                          public_keys={} if unit == "row-private" else keys)

    def plain_connection(frame: Any) -> Any:   # handed over as dpframe does it: Arrow, zero-copy (string views)
        con = duckdb.connect(":memory:")
        con.register("visits", frame.to_arrow(compat_level=pl.CompatLevel.newest()))
        return con

    results: dict[str, dict[str, float]] = {}
    for label, unit, tail, sql, plain_sql, _target in chosen:
        frame = data[tail]
        sessions = {b: session(b, frame, unit) for b in ("polars", "duckdb")}
        plain = plain_connection(frame)
        engines: dict[str, Callable[[], Any]] = {
            "plain DuckDB": lambda: plain.sql(plain_sql).fetchall(),                               # noqa: B023
            "dpframe duckdb": lambda: sessions["duckdb"].sql(sql).collect(budget_for[unit]),       # noqa: B023
            "dpframe polars": lambda: sessions["polars"].sql(sql).collect(budget_for[unit]),       # noqa: B023
            "fresh plain DuckDB": lambda: plain_connection(frame).sql(plain_sql).fetchall(),       # noqa: B023
            "fresh dpframe duckdb": lambda: session("duckdb", frame, unit).sql(sql).collect(     # noqa: B023
                budget_for[unit]),                                                                  # noqa: B023
        }
        if args.parquet:
            sessions["parquet"] = session("duckdb", paths[tail], unit)
            path = paths[tail]
            engines["plain DuckDB (parquet)"] = (
                lambda: plain.sql(plain_sql.replace("FROM visits", f"FROM read_parquet('{path}')")).fetchall())  # noqa: B023
            engines["dpframe duckdb (parquet)"] = (
                lambda: sessions["parquet"].sql(sql).collect(budget_for[unit]))                    # noqa: B023
        results[label] = interleaved(engines, args.runs)
        log_stderr(f"{label}: " + ", ".join(f"{n} {fmt_ms(v)}" for n, v in results[label].items()))

    headers = ["query", "plain DuckDB ms", "dpframe duckdb ms", "ratio", "target", "met", "fresh plain ms",
               "fresh dpframe ms", "ratio", f"≤ {FRESH_TARGET:g}×", "dpframe polars ms", "ratio"]
    rows = []
    for label, _unit, _tail, _sql, _plain, target in chosen:
        r = results[label]
        open_ratio = ratio(r["dpframe duckdb"], r["plain DuckDB"])
        fresh_ratio = ratio(r["fresh dpframe duckdb"], r["fresh plain DuckDB"])
        rows.append([label, fmt_ms(r["plain DuckDB"]), fmt_ms(r["dpframe duckdb"]), fmt_ratio(open_ratio),
                     f"≤ {target:g}×", "yes" if open_ratio is not None and open_ratio <= target else "NO",
                     fmt_ms(r["fresh plain DuckDB"]), fmt_ms(r["fresh dpframe duckdb"]), fmt_ratio(fresh_ratio),
                     "yes" if fresh_ratio is not None and fresh_ratio <= FRESH_TARGET else "NO",
                     fmt_ms(r["dpframe polars"]), fmt_ratio(ratio(r["dpframe polars"], r["plain DuckDB"]))])
    print(f"# sess.sql vs plain DuckDB {duckdb.__version__}, {args.rows:,} rows by {args.users:,} users, "
          f"{os.cpu_count()} cores, median of {args.runs} runs\n")
    print(f"machine: {machine_info()}; load average before / after: {before} / {load_average()}\n")
    print(format_table(headers, rows))
    print("\nopen session: the table already in the session / connection; fresh: a new session (or connection) "
          "over the in-memory frame, then the query. The median is compared with DuckDB's exact median.")
    if args.parquet:
        print("\nfrom the Parquet file (DuckDB scans it; nothing loaded into Python first):\n")
        prow = [[label, fmt_ms(results[label]["plain DuckDB (parquet)"]),
                 fmt_ms(results[label]["dpframe duckdb (parquet)"]),
                 fmt_ratio(ratio(results[label]["dpframe duckdb (parquet)"], results[label]["plain DuckDB (parquet)"]))]
                for label, *_ in chosen]
        print(format_table(["query", "plain DuckDB read_parquet ms", "dpframe duckdb ms", "ratio"], prow))
    suffix = "" if args.users == 1_000_000 else f"_u{args.users}"
    write_json(DATA_DIR / f"sql_{args.rows}{suffix}.json", {"results": results, "load": [before, load_average()]})


if __name__ == "__main__":
    main()
