#!/usr/bin/env python3
"""Benchmark of private quantiles: time against plain Polars, rank error against OpenDP.

Usage::

    python bench/quantiles.py [--rows 10000000] [--groups 1000] [--runs 3] [--error-runs 30]
                              [--queries median,deciles,...] [--peer /tmp/peers-quantiles/bin/python]

Data (deterministic, numpy seed 7): ``x`` uniform in [0, 1000) (float64), ``g`` uniform in 0..groups−1.
Queries: the median and the deciles of ``x``, over the whole table and per group (public keys).

* **time**: dpframe ``collect()`` (session created once; query built and collected each run, ε = 1)
  against the same plain Polars query (``pl.col("x").median()`` / nine ``quantile(q)``), median of
  ``--runs`` runs, as a ratio; plus a scaling table (wall, CPU, serial ms and the projected 16-core ratio,
  see ``bench/_scaling.py``). ``--groups 100000`` is the many-tiny-groups case;
* **rank error**: |rank − q·n| in rows (distance of q·n from [#{x < z}, #{x ≤ z}]), averaged over the
  quantiles and, per group, over the groups, then over ``--error-runs`` releases (default ``--runs``), at
  ε ∈ {0.1, 1} (pure DP); shown as mean ± standard error over the releases.
  Both libraries use the same public grid: bounds [0, 1000] with step 2⁻¹⁰ (1,024,001 points) —
  dpframe's ordered domain, OpenDP's ``candidates``. OpenDP (``make_private_quantile``, the EM quantile
  with a Gumbel noisy max) has no joint mechanism, so its deciles spend ε/9 each; dpframe releases the
  nine jointly (recursive split, 4 levels of ε/4). Per-group OpenDP runs its measurement once per group,
  on the first ``--peer-groups`` groups, ``--peer-group-runs`` times (each release costs O(n log c + c)
  with c = 1,024,001 candidates): its per-group standard error is over those releases.

``--peer`` is a Python with ``opendp`` installed in a throwaway venv (never a dpframe dependency); the
peer part is skipped when it is missing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fmt_ratio, format_table, log_stderr, machine_info, median, ratio  # noqa: E402
from _scaling import SCALING_HEADERS, cores, scaling_columns, timed  # noqa: E402

QUERIES = [("median", [0.5], False), ("deciles", [k / 10 for k in range(1, 10)], False),
           ("median per group", [0.5], True), ("deciles per group", [k / 10 for k in range(1, 10)], True)]

GRID = 2.0**-10
BOUNDS = (0.0, 1000.0)


def data(rows: int, groups: int) -> Any:
    import numpy as np

    rng = np.random.default_rng(7)
    return rng.uniform(*BOUNDS, rows), rng.integers(0, groups, rows)


def rank_error(sorted_x: Any, z: float, q: float) -> float:
    """Distance of q·n from [#{x < z}, #{x ≤ z}]."""
    import numpy as np

    n = sorted_x.size
    low, high = np.searchsorted(sorted_x, z, "left"), np.searchsorted(sorted_x, z, "right")
    return float(max(low - q * n, q * n - high, 0.0))


def errors(sorted_groups: list[Any], released: list[list[float]], qs: list[float]) -> float:
    """Mean rank error over groups and quantiles."""
    return sum(rank_error(s, z, q) for s, zs in zip(sorted_groups, released) for z, q in zip(zs, qs)) / (
        len(sorted_groups) * len(qs))


def summary(samples: list[float]) -> dict[str, float]:
    """Mean and standard error of the mean."""
    n = len(samples)
    mean = sum(samples) / n
    var = sum((v - mean) ** 2 for v in samples) / (n - 1) if n > 1 else 0.0
    return {"mean": mean, "se": (var / n) ** 0.5, "n": n}


def selected(args: argparse.Namespace) -> list[tuple[str, list[float], bool]]:
    wanted = [q.strip() for q in args.queries.split(",")] if args.queries else [q[0] for q in QUERIES]
    return [q for q in QUERIES if q[0] in wanted]


# ---------------------------------------------------------------------------------------------- dpframe


def run_dpframe(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    import polars as pl

    import dpframe as dp

    x, g = data(args.rows, args.groups)
    df = pl.DataFrame({"x": x, "g": g})
    sorted_all = [np.sort(x)]
    order = np.lexsort((x, g))
    cuts = np.searchsorted(g[order], np.arange(1, args.groups))
    sorted_groups = np.split(x[order], cuts)
    sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10**6))
    keys = list(range(args.groups))
    out: dict[str, Any] = {}
    for name, qs, grouped in selected(args):
        measure = dp.quantile("x", qs if len(qs) > 1 else qs[0], bounds=BOUNDS, resolution=GRID).alias("q")
        frame = sess.table("t")
        plain_expr = [pl.col("x").quantile(q).alias(f"q{q}") for q in qs] if len(qs) > 1 else [pl.col("x").median()]

        def query(frame: Any = frame, measure: Any = measure, grouped: bool = grouped) -> Any:
            return (frame.group_by("g", keys=keys) if grouped else frame).agg(measure)

        def plain(grouped: bool = grouped, plain_expr: list[Any] = plain_expr) -> Any:
            return df.group_by("g").agg(plain_expr) if grouped else df.select(plain_expr)

        ours = timed(lambda query=query: query().collect(dp.PureDP(1)), args.runs)
        theirs = timed(plain, args.runs)
        row: dict[str, Any] = {"dpframe": ours, "polars": theirs,
                               "dpframe_s": ours.wall, "polars_s": theirs.wall}
        truth = sorted_groups if grouped else sorted_all
        for eps in (0.1, 1.0):
            errs = []
            for _ in range(args.error_runs or args.runs):
                res = query().collect(dp.PureDP(eps))["q"].to_list()
                if grouped:      # one sample per group and release: the per-group errors are independent
                    errs += [errors([t], [r if isinstance(r, list) else [r]], qs) for t, r in zip(truth, res)]
                else:
                    errs.append(errors(truth, [r if isinstance(r, list) else [r] for r in res], qs))
            row[f"err_{eps:g}"] = summary(errs)
        out[name] = row
        log_stderr(f"dpframe {name}: {row}")
    return out


# ------------------------------------------------------------------------------------------------ OpenDP


def run_opendp(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in the peer venv: OpenDP's make_private_quantile on the same grid (no dpframe import)."""
    import numpy as np
    import opendp.prelude as odp

    odp.enable_features("contrib")
    x, g = data(args.rows, args.groups)
    candidates = [float(c) for c in np.arange(BOUNDS[0], BOUNDS[1] + GRID / 2, GRID)]
    space = (odp.vector_domain(odp.atom_domain(T=float, nan=False)), odp.symmetric_distance())

    def measurement(q: float, eps: float) -> Any:
        # the noise scale does not depend on the candidates: search it on a small list, build once
        scale = odp.binary_search_param(lambda s: odp.m.make_private_quantile(
            *space, odp.max_divergence(), [0.0, 1.0], q, s), d_in=1, d_out=eps)
        return odp.m.make_private_quantile(*space, odp.max_divergence(), candidates, q, scale)

    order = np.lexsort((x, g))
    cuts = np.searchsorted(g[order], np.arange(1, args.groups))
    groups_sorted = np.split(x[order], cuts)
    groups_sorted = groups_sorted[:args.peer_groups]          # rank error is a per-group average
    groups_raw = [x[g == k].tolist() for k in range(args.peer_groups)]
    all_raw = x.tolist()
    out: dict[str, Any] = {}
    for name, qs, grouped in selected(args):
        row: dict[str, Any] = {}
        truth = groups_sorted if grouped else [np.sort(x)]
        data_sets = groups_raw if grouped else [all_raw]
        for eps in (0.1, 1.0):
            ms = [measurement(q, eps / len(qs)) for q in qs]       # sequential composition: ε/k each
            errs, seconds = [], []
            for _ in range((args.error_runs or args.runs) if not grouped else args.peer_group_runs):
                t = time.perf_counter()
                released = [[m(d) for m in ms] for d in data_sets]
                seconds.append(time.perf_counter() - t)
                errs += [errors([t_], [r], qs) for t_, r in zip(truth, released)]
            row[f"err_{eps:g}"] = summary(errs)
            row["seconds"] = median(seconds)
        out[name] = row
        log_stderr(f"opendp {name}: {row}")
    return out


# -------------------------------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--groups", type=int, default=1_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--error-runs", type=int, default=0, help="releases per rank-error cell (default: --runs)")
    p.add_argument("--queries", default="", help="comma-separated subset of: " + ", ".join(q[0] for q in QUERIES))
    p.add_argument("--peer", default="/tmp/peers-quantiles/bin/python")
    p.add_argument("--peer-groups", type=int, default=20,
                   help="OpenDP per-group errors are averaged over the first N groups (its O(candidates) "
                        "cost per release makes all 1,000 groups take hours)")
    p.add_argument("--peer-group-runs", type=int, default=1, help="OpenDP releases per group (per-group cells)")
    p.add_argument("--worker", choices=["opendp"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == "opendp":
        print(json.dumps(run_opendp(args)))
        return
    ours = run_dpframe(args)
    peer: dict[str, Any] = {}
    if Path(args.peer).exists():
        cmd = [args.peer, __file__, "--worker", "opendp", "--rows", str(args.rows), "--groups", str(args.groups),
               "--runs", str(args.runs), "--error-runs", str(args.error_runs), "--peer-groups", str(args.peer_groups),
               "--peer-group-runs", str(args.peer_group_runs), "--queries", args.queries]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode == 0:
            peer = json.loads(done.stdout)
        else:
            log_stderr(f"OpenDP worker failed: {done.stderr[-2000:]}")
    else:
        log_stderr(f"no peer Python at {args.peer}: OpenDP skipped")
    def err(cell: dict[str, float] | None) -> str:
        return f"{cell['mean']:.2f} ± {cell['se']:.2f}" if cell else "-"

    rows, times = [], []
    for name, r in ours.items():
        o = peer.get(name, {})
        rows.append([name, f"{r['polars_s'] * 1000:.0f} ms", f"{r['dpframe_s'] * 1000:.0f} ms",
                     fmt_ratio(ratio(r["dpframe_s"], r["polars_s"])),
                     err(r["err_0.1"]), err(o.get("err_0.1")), err(r["err_1"]), err(o.get("err_1"))])
        times.append([name, *scaling_columns(r["dpframe"], r["polars"])])
    print(f"# Private quantiles: {args.rows:,} rows, {args.groups:,} groups, time: median of {args.runs} runs; "
          f"rank error: mean ± s.e. over {args.error_runs or args.runs} releases (per group: × groups)\n")
    print(machine_info() + "  \n" + cores() + "\n")
    print(format_table(["query", "Polars", "dpframe", "ratio", "rank err ε=0.1", "OpenDP ε=0.1",
                        "rank err ε=1", "OpenDP ε=1"], rows))
    print("\n## Scaling (bench/_scaling.py: serial = the calling thread's CPU; projected = serial + rest/16)\n")
    print(format_table(["query", *SCALING_HEADERS], times))


if __name__ == "__main__":
    main()
