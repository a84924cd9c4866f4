"""The ``dpframe`` command line.

dpframe demo [--rows N] [--epsilon E]   run the headline query on a generated dataset
dpframe plugins                          list installed plugins, what they provide and what handles what
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
from dpframe.plugin import PluginHost, Route, plugin_host

KEYS = ("Amsterdam", "Berlin", "Oslo")
"""The demo's public keys: the README example's."""


def demo(rows: int, epsilon: float) -> None:
    """The README example on a synthetic 'visits' table: explain, collect, budget, and the exact answers.

    The same session, queries, bounds and public keys as the README's example (``epsilon`` is the main
    query's ε, 1 there), then the exact answers of both queries on the same adult rows, for comparison.
    """
    data = visits(rows)
    sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=10),
                      budget=dp.ApproxDP(epsilon=3.0, delta=1e-6))
    print(f"dpframe demo: {rows:,} synthetic visits by {data['user_id'].n_unique():,} users "
          f"(privacy unit: user_id, ≤ 10 rows each; total budget ε=3, δ=1e-6); the README's example\n")
    budget = dp.ApproxDP(epsilon, 1e-7)
    adults = sess.table("visits").filter(pl.col("age") >= 18)
    query = adults.group_by("city").agg(dp.len(), dp.sum("spend", bounds=(0, 500)), dp.mean("spend", bounds=(0, 500)),
                                        dp.var("spend", bounds=(0, 500)))
    print(query.explain(budget=budget), end="\n\n")
    result = query.collect(budget=budget)
    print(f"released, adults by city (private keys chosen by DP partition selection; ε={epsilon:g}, δ=1e-7):")
    print(result)
    for note in released_notes(result):
        print(note)
    public = adults.group_by("city", keys=KEYS).agg(dp.len(), dp.mean("age", bounds=(0, 100)))
    print(f"\nreleased, adults in {', '.join(KEYS)} (public keys: pure ε = 0.5 is enough):")
    print(public.collect(budget=dp.PureDP(0.5)))
    print(f"\nspent {sess.spent()}, remaining {sess.remaining()}")
    print(sess.history().select("id", "status", "mechanisms", "cost"))
    rows_of = data.filter(pl.col("age") >= 18)
    clamped = pl.col("spend").fill_nan(None).clip(0, 500)
    exact = (rows_of.group_by("city").agg(pl.len(), clamped.sum().alias("spend_sum"),
                                          clamped.mean().alias("spend_mean"), clamped.var().alias("spend_var"))
             .sort("city"))
    exact_public = (rows_of.filter(pl.col("city").is_in(KEYS)).group_by("city")
                    .agg(pl.len(), pl.col("age").clip(0, 100).mean().alias("age_mean")).sort("city"))
    print("\nfor comparison, the exact answers on the same adult rows, without contribution bounding (synthetic "
          "data only — an analyst never sees these):")
    print(exact)
    print(exact_public)


def released_notes(result: pl.DataFrame) -> list[str]:
    """What the demo says of its released table (post-processing: it reads released values only).

    Example:
        >>> released_notes(pl.DataFrame({"city": ["a"], "spend_var": [0.0]}))[0][:40]
        'note: a spend_var of 0.0 is a noisy vari'

    """
    notes = []
    if result.height == 0:
        notes.append("note: no city was released: none reached the partition-selection threshold τ (see the note "
                     "in explain() above); more rows, a larger ε, public keys or max_groups=1 lower it")
    if result.height and (result["spend_var"] == 0).any():
        notes.append("note: a spend_var of 0.0 is a noisy variance clipped at 0 (it came out negative): in a small "
                     "group the noise of the variance is larger than the variance itself (see the ± in explain())")
    return notes


def plugins(host: PluginHost | None = None) -> None:
    """Print the installed plugins, then the routing: what handles each measure kind and query name.

    ``host``: whose plugins (default the process-wide ``plugin_host()``; ``sess.plugins``: those a session was made
    with, a plugin registered in the process later left out).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"u": [1]})}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
        >>> plugins(sess.plugins)        # doctest: +ELLIPSIS
        name ... provides
        core ...

    """
    host = host if host is not None else plugin_host()
    _table(("name", "version", "package", "provides"),
           [(r.name, r.version, r.package, r.provides) for r in host.describe()])
    routes = host.routes()
    print("\nrouting: the mechanism each measure kind runs on under each budget notion; the others offering it "
          "run only when a measure names them (mechanism=...)")
    rows: list[tuple[str, str, str, str]] = []
    for r in (r for r in routes if r.what == "measure"):     # a kind's notions routed alike share a row
        row = (r.name, r.notion, _handler(r), ", ".join(r.also))
        if rows and rows[-1][0] == r.name and rows[-1][2:] == row[2:]:
            row = (r.name, f"{rows.pop()[1]}/{r.notion}", *row[2:])
        rows.append(row)
    _table(("measure", "budget", "handled by", "also offered"), rows)
    print("\nthe query family that builds each query name")
    _table(("query", "on", "built by"), [(r.name, r.notion, _handler(r)) for r in routes if r.what == "query"])


def _handler(route: Route) -> str:
    """``name (plugin)``, with the plugin it replaced; for an ambiguous kind, what to do.

    Example:
        >>> _handler(Route("query", "top_k", "group_by", "top_k", "mine", (), "topk"))
        "top_k (mine, replaces topk's)"

    """
    if route.handler is None:
        return "ambiguous: a measure must name one (mechanism=...)"
    replaced = f", replaces {route.replaced}'s" if route.replaced else ""
    return f"{route.handler} ({route.plugin}{replaced})"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` under ``head`` in columns two spaces apart (the last column not padded).

    Example:
        >>> _table(("a", "b"), [("xyz", "1")])
        a    b
        xyz  1

    """
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    for line in (head, *rows):
        print(("  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths)) + "  " + line[-1]).rstrip())


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
