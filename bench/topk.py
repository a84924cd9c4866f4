"""Top-k benchmark: the paper's synthetic recall experiment and time against a plain Polars top-k.

1. Recall / precision (Zhu & Wang 2022, Fig. 1(b)): 15,000 bins; the top k bins have count 700 (one row
   per privacy unit), the rest 0; (ε, δ) = (0.15, 1e-6) per query; k ∈ {10, 50, 100, 200, 400, 700}.
   Methods: StableTopK adaptive (k=None, k ≤ 1500) and fixed k, one-shot Gumbel (EM-CDP), peeling EM,
   limited domain, TCT. Target: StableTopK recall ≈ 0.98 at every k (closed form 0.984).
2. Time: 10M rows, 100,000 distinct keys (Zipf), 1M users; ``group_by(key).top_k(k=10)`` vs plain Polars
   ``group_by(key).agg(n_unique(user)).top_k(10)``, as a ratio (median of runs), with the CPU ratio, the
   serial time and the projected 16-core ratio (``bench/_scaling.py``).

Cells: mean recall / precision; ⊥ counts ``TopKFailed`` runs (recall 0), "partial" counts ``TopKPartial`` runs
(fewer than k keys, scored on the keys they released).

Usage: ``python bench/topk.py [--trials 20] [--rows 10_000_000] [--skip-recall] [--skip-time]``
(``--rows 200000`` for a quick check that it runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import polars as pl
from dpframe_topk import TopKFailed, TopKPartial

import dpframe as dp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    format_table,  # noqa: E402
    machine_info,  # noqa: E402  (bench/ is not a package)
)
from _scaling import SCALING_HEADERS, cores, scaling_columns, timed  # noqa: E402

BINS, COUNT = 15_000, 700
KS = (10, 50, 100, 200, 400, 700)
BUDGET = dp.ApproxDP(0.15, 1e-6)
METHODS = {  # label -> top_k kwargs
    "stable (k=None)": dict(k=None, k_max=1500),
    "stable (fixed k)": dict(method="stable"),
    "gumbel (EM-CDP)": dict(method="gumbel"),
    "peeling": dict(method="peeling"),
    "limited_domain": dict(method="limited_domain"),
    "tct": dict(method="tct"),
}


def recall_table(trials: int) -> str:
    keys = list(range(BINS))
    lines = ["| method | " + " | ".join(f"k={k}" for k in KS) + " |", "|---" * (len(KS) + 1) + "|"]
    cells: dict[str, list[str]] = {m: [] for m in METHODS}
    for k in KS:
        data = pl.DataFrame({"bin": np.repeat(np.arange(k), COUNT)})
        sess = dp.Session({"h": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10**6, 0.5))
        for label, kwargs in METHODS.items():
            kw = dict(kwargs)
            fixed_k = kw.pop("k", k)
            q = sess.table("h").group_by("bin", keys=keys).top_k(k=fixed_k, **kw)
            recalls, precisions, failed, partial = [], [], 0, 0
            for _ in range(trials):
                out = q.collect(BUDGET)
                if isinstance(out, TopKPartial):      # fewer than k keys (limited domain stopped early)
                    partial += 1
                    out = out.keys
                elif isinstance(out, TopKFailed):
                    failed += 1
                    recalls.append(0.0)
                    continue
                hit = int((out["bin"] < k).sum())
                recalls.append(hit / k)
                precisions.append(hit / out.height)
            prec = f"{statistics.mean(precisions):.2f}" if precisions else "–"
            cells[label].append(f"{statistics.mean(recalls):.2f} / {prec}" + (f" ({failed}⊥)" if failed else "")
                                + (f" ({partial} partial)" if partial else ""))
        print(f"k={k} done", flush=True)
    for label in METHODS:
        lines.append(f"| {label} | " + " | ".join(cells[label]) + " |")
    return "\n".join(lines)


def time_table(rows: int, runs: int) -> str:
    gen = np.random.default_rng(0)
    keys = np.minimum(gen.zipf(1.1, rows), 100_000) - 1
    df = pl.DataFrame({"user": gen.integers(0, 1_000_000, rows), "key": keys})
    plain = timed(lambda: df.lazy().group_by("key").agg(pl.col("user").n_unique()).top_k(10, by="user").collect(), runs)
    plain_rows = timed(lambda: df.lazy().group_by("key").agg(pl.len()).top_k(10, by="len").collect(), runs)
    cases = [("user unit, count_units, max_rows=10", dp.PrivacyUnit("user", max_rows=10), dp.count_units(), plain),
             ("row unit, len", dp.PrivacyUnit.row(), dp.len(), plain_rows)]
    out = []
    for label, unit, score, base in cases:
        sess = dp.Session({"t": df}, privacy_unit=unit, budget=dp.ApproxDP(10**6, 0.5))
        q = sess.table("t").group_by("key").top_k(k=10, score=score)
        out.append([label, *scaling_columns(timed(lambda q=q: q.collect(dp.ApproxDP(1, 1e-7)), runs), base)])
    return format_table(["case", *SCALING_HEADERS], out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--skip-recall", action="store_true")
    ap.add_argument("--skip-time", action="store_true")
    args = ap.parse_args()
    print(f"machine: {machine_info()}\n")
    if not args.skip_time:
        print(f"## time: {args.rows:,} rows, 100,000 keys (median of {args.runs})\n\n{cores()}\n")
        print(time_table(args.rows, args.runs), flush=True)
    if not args.skip_recall:
        print(f"\n## recall / precision: {BINS} bins, top k at {COUNT}, {BUDGET!r}, {args.trials} trials\n")
        print(recall_table(args.trials))


if __name__ == "__main__":
    main()
