"""The ``dpframe`` command line.

dpframe demo [--rows N] [--epsilon E]   run the headline query on a generated dataset
dpframe plugins                          list installed plugins and what they provide
dpframe query "SELECT ..." --table ...   run a private SQL query (see docs/sql.md)
dpframe explain "SELECT ..." ...         its plan, cost and accuracy (spends nothing)
dpframe budget --ledger PATH             a ledger's total, spent and remaining budget
dpframe --version
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import polars as pl

import dpframe as dp
from dpframe.datasets import visits
from dpframe.plugin import plugin_host


def demo(rows: int, epsilon: float) -> None:
    """Private group-by on a synthetic 'visits' table: explain, collect, budget, and the exact answer."""
    data = visits(rows)
    sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=10),
                      budget=dp.ApproxDP(epsilon=3.0, delta=1e-6))
    print(f"dpframe demo: {rows:,} synthetic visits by {data['user_id'].n_unique():,} users "
          f"(privacy unit: user_id, ≤ 10 rows each; total budget ε=3, δ=1e-6)\n")
    budget = dp.ApproxDP(epsilon, 1e-7)
    query = (sess.table("visits").filter(pl.col("age") >= 18).group_by("city")
             .agg(dp.len(), dp.sum("spend", bounds=(0, 250)), dp.mean("spend", bounds=(0, 250)),
                  dp.var("spend", bounds=(0, 250))))
    print(query.explain(budget=budget), end="\n\n")
    result = query.collect(budget=budget)
    print("released (private keys chosen by DP partition selection):")
    print(result)
    public = (sess.table("visits").group_by("city", keys=list(dp.datasets.CITIES[:5]))
              .agg(dp.len(), dp.mean("age", bounds=(0, 100))))
    print("\nreleased with public keys (pure ε = 0.5):")
    print(public.collect(budget=dp.PureDP(0.5)))
    print(f"\nspent {sess.spent()}, remaining {sess.remaining()}")
    print(sess.history().select("id", "status", "mechanisms", "cost"))
    clamped = pl.col("spend").fill_nan(None).clip(0, 250)
    exact = (data.filter(pl.col("age") >= 18).group_by("city")
             .agg(pl.len(), clamped.sum().alias("spend_sum"), clamped.mean().alias("spend_mean"),
                  clamped.var().alias("spend_var")).sort("city"))
    print("\nfor comparison, the exact answer without contribution bounding (synthetic data only —"
          " an analyst never sees this):")
    print(exact)


def plugins() -> None:
    """Print the installed plugins."""
    rows = plugin_host().describe()
    head = ("name", "version", "package")
    widths = [max(len(h), *(len(getattr(r, h)) for r in rows)) for h in head]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)) + "  provides")
    for r in rows:
        print("  ".join(getattr(r, h).ljust(w) for h, w in zip(head, widths)) + "  " + r.provides)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line."""
    parser = argparse.ArgumentParser(prog="dpframe", description="Differentially private dataframes.")
    parser.add_argument("--version", action="version", version=f"dpframe {dp.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run a private group-by on a generated dataset")
    d.add_argument("--rows", type=int, default=200_000, help="rows to generate (default 200,000)")
    d.add_argument("--epsilon", type=float, default=1.0, help="ε for the main query (default 1)")
    sub.add_parser("plugins", help="list installed plugins")
    from dpframe.sql import cli as sql_cli

    sql_cli.add_commands(sub)
    args = parser.parse_args(argv)
    pl.Config.set_tbl_rows(30)
    pl.Config.set_tbl_width_chars(160)
    pl.Config.set_fmt_str_lengths(80)
    if args.command in sql_cli.COMMANDS:
        return sql_cli.run(args)
    try:
        if args.command == "demo":
            demo(args.rows, args.epsilon)
        else:
            plugins()
    except dp.DPFrameError as e:
        print(f"dpframe: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
