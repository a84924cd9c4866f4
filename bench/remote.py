#!/usr/bin/env python3
"""What a remote session costs: the same query in process, over a Unix socket and over local TCP.

Usage::

    python bench/remote.py [--rows 1000000] [--groups 1000] [--runs 20]

Data (deterministic, numpy seed 11): ``--rows`` rows, ``g`` uniform over ``--groups`` names, ``x`` uniform
in [0, 100). The data owner's process (a subprocess: ``dp.Server`` on a Unix socket and on 127.0.0.1)
and this process build the same table and the same session (row-level unit, Polars backend). Queries:

* ``count``: ``SELECT COUNT(*) AS n FROM t`` (the fixed cost of a request);
* ``group-by``: ``SELECT g, COUNT(*) AS n, SUM(CLAMP(x, 0, 100)) AS s, AVG(CLAMP(x, 0, 100)) AS m FROM t
  GROUP BY g`` with the ``--groups`` public keys sent along (``keys=``);
* ``group-by, method chain``: the same query as ``table("t").group_by("g", keys=...).agg(...)`` (on a remote
  session, recorded and replayed by the server).

Each round runs the plain Polars query, the in-process session, the Unix-socket client and the TCP client
once each (interleaved, so all see the same load); medians of ``--runs`` rounds after a warm-up round.
Ratios: each remote client to the in-process session, and every dpframe column to plain Polars. On a
2-core machine the server's process and this one share the cores.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fmt_ratio, format_table, interleaved, load_average, machine_info  # noqa: E402

GROUPED = ("SELECT g, COUNT(*) AS n, SUM(CLAMP(x, 0, 100)) AS s, AVG(CLAMP(x, 0, 100)) AS m FROM t GROUP BY g")
OWNER = """
import sys
sys.path.insert(0, {bench!r})
import remote
sess = remote.session({rows}, {groups})
import dpframe as dp
unix = dp.Server(sess, {path!r}, authkey={key!r}).start()
tcp = dp.Server(sess, ("127.0.0.1", 0), authkey={key!r}).start()
print(tcp.address[1], flush=True)
sys.stdin.readline()
unix.close(); tcp.close()
"""


def table(rows: int, groups: int) -> Any:
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(11)
    names = [f"g{i:05d}" for i in range(groups)]
    return pl.DataFrame({"g": pl.Series(names).gather(rng.integers(0, groups, rows)), "x": rng.uniform(0, 100, rows)})


def session(rows: int, groups: int) -> Any:
    import dpframe as dp

    return dp.Session({"t": table(rows, groups)}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10**9))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()

    import polars as pl

    import dpframe as dp

    key = secrets.token_bytes(32)
    folder = tempfile.mkdtemp(prefix="dpframe-bench-")
    path = os.path.join(folder, "s.sock")
    script = OWNER.format(bench=str(Path(__file__).resolve().parent), rows=args.rows, groups=args.groups,
                          path=path, key=key)
    owner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    load_before = load_average()
    try:
        assert owner.stdout is not None
        port = int(owner.stdout.readline())
        df = table(args.rows, args.groups)
        sess = session(args.rows, args.groups)
        keys = {"g": sorted(df["g"].unique().to_list())}
        unix, tcp = dp.connect(path, authkey=key), dp.connect(("127.0.0.1", port), authkey=key)
        eps = dp.PureDP(1)
        def grouped_plain() -> Any:
            return df.group_by("g").agg(pl.len(), pl.col("x").clip(0, 100).sum().alias("s"),
                                        pl.col("x").clip(0, 100).mean().alias("m")).sort("g")

        def chain(front: Any) -> Any:
            return front.table("t").group_by("g", keys=keys["g"]).agg(
                n=dp.len(), s=dp.sum("x", bounds=(0, 100)), m=dp.mean("x", bounds=(0, 100)))

        cases: dict[str, tuple[Any, Any]] = {
            "count": (lambda front: front.sql("SELECT COUNT(*) AS n FROM t"), lambda: df.select(pl.len())),
            "group-by": (lambda front: front.sql(GROUPED, keys=keys), grouped_plain),
            "group-by, method chain": (chain, grouped_plain),
        }
        rows = []
        for name, (build, plain) in cases.items():
            t = interleaved({
                "plain": plain,
                "in process": lambda build=build: build(sess).collect(eps),
                "unix": lambda build=build: build(unix).collect(eps),
                "tcp": lambda build=build: build(tcp).collect(eps),
            }, args.runs)
            rows.append([name, f"{t['plain'] * 1e3:.1f}", f"{t['in process'] * 1e3:.1f}", f"{t['unix'] * 1e3:.1f}",
                         f"{t['tcp'] * 1e3:.1f}", fmt_ratio(t["unix"] / t["in process"]),
                         fmt_ratio(t["tcp"] / t["in process"]), fmt_ratio(t["in process"] / t["plain"]),
                         fmt_ratio(t["unix"] / t["plain"])])
        unix.close()
        tcp.close()
    finally:
        assert owner.stdin is not None
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.wait(timeout=60)
    print(f"# Remote sessions ({args.rows:,} rows, {args.groups:,} groups, median of {args.runs})\n")
    print(f"{machine_info()}; load {load_before} → {load_average()}\n")
    print(format_table(["query", "plain ms", "in process ms", "unix ms", "tcp ms", "unix ÷ in process",
                        "tcp ÷ in process", "in process ÷ plain", "unix ÷ plain"], rows))


if __name__ == "__main__":
    main()
