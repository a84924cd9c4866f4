#!/usr/bin/env python3
"""Benchmark of dpframe's core aggregations against the same non-private Polars queries (and peers).

Usage::

    python bench/aggregations.py [--rows 10000000] [--runs 3] [--peers]

Data: ``--rows`` visits by 1M users (``user_id``) in 1,000 Zipf(1.1)-distributed cities, ``spend``
uniform in [0, 600), ``qty`` int; deterministic (numpy seed), written once to Parquet under
``bench/.data/`` and loaded into memory (``pl.read_parquet``) by every case.

Queries (dpframe budget ε = 1 pure DP; (ε, δ) = (1, 1e-6) where partition selection needs δ), each
next to the same non-private Polars query on the same in-memory DataFrame:

1. ungrouped count, clamped sum, clamped mean of ``spend`` (bounds [0, 500]), row-level unit;
2. group by city: count, sum, mean, with the 1,000 public city names as keys;
3. the same with private keys (DP partition selection);
4. the same as 2 with the unit ``PrivacyUnit("user_id", max_rows=10)`` (contribution bounding);
5. the same as 4 on heavy-tailed data: rows per user ~ Pareto (shape 1.5, same mean; the largest user
   has tens of thousands of rows at 10M rows);
6. the same as 4 with the count alone: rows are told apart by (user, city) only, so most users over the
   limit hold copies (a user in one city twice), the bounding law's slowest common path.

Targets: ≤ 1.5× plain Polars time and ≤ 2× its peak memory for the row-level queries; ≤ 3× time and
≤ 1.5× its *extra* peak memory for the user-level ones (issue 17). The report prints the core count and
the load averages: on a shared machine read the ratios, not the seconds.

A dpframe time covers creating the Session (generous total budget), building the query and
``collect()``; ``explain()`` is timed alone. Every (engine, query) runs in its own subprocess: it loads
the data, resets the peak-RSS mark, runs 1 warm-up and ``--runs`` timed calls (median reported) and
records the peak RSS. ``--runs`` extra cProfile'd dpframe runs per query split its time into session,
planning, the Polars query, noise/post-processing and the rest (medians). The exact discrete Laplace / Gaussian
samplers are timed for 1M draws.

``--peers`` also runs OpenDP's Polars API (in-memory LazyFrame as dpframe, and on a Parquet scan,
OpenDP's faster mode) and diffprivlib (count/sum/mean only: it has no group-by) in the peer venv
(default ``/tmp/peers-venv``; see bench/README.md), never in dpframe's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402  (bench/ is not a package)
    DATA_DIR,
    PARETO_SHAPE,
    city_names,
    core_query,
    fmt_mib,
    fmt_ms,
    fmt_ratio,
    fmt_s,
    format_table,
    load_average,
    log_stderr,
    machine_info,
    measure,
    median,
    ratio,
    run_worker,
    synthetic_visits,
    time_runs,
    worker_main,
)

# ---- workload constants (shared with the peer worker through JSON) ----
N_USERS = 1_000_000
N_CITIES = 1_000
ZIPF_S = 1.1            # as shared/peers/perf_baseline.py
SPEND_MAX = 600.0
BOUNDS = (0.0, 500.0)   # public clamping bounds for spend (some values lie above: clamping matters)
EPS = 1.0
DELTA = 1e-6
MAX_ROWS = 10           # user-level unit: at most 10 rows per user
SESSION_BUDGET = (1000.0, 1e-3)   # generous total (ε, δ) so no run is refused
TIME_TARGET = 1.5       # dpframe time ≤ 1.5 × plain Polars
MEM_TARGET = 2.0        # dpframe peak RSS ≤ 2 × plain Polars
TIME_FLOOR_S = 0.010    # ratios use max(Polars time, 10 ms): O(1) metadata answers are not a baseline
NOISE_TARGET_S = 1.0    # a million draws "well under a second"
DEFAULT_PEERS_VENV = os.environ.get("DPFRAME_PEERS_VENV", "/tmp/peers-venv")

HERE = Path(__file__).resolve()


USER_TIME_TARGET = 3.0  # user-level cases (contribution bounding): ≤ 3 × plain Polars (issue 17)
USER_MEM_TARGET = 1.5   # ... and ≤ 1.5 × its extra peak memory


@dataclass(frozen=True)
class Case:
    """One benchmark query (``tail``: the rows-per-user law of its data, see ``_common.user_ids``)."""

    id: str
    label: str
    tail: str = "uniform"
    time_target: float = TIME_TARGET
    mem_target: float = MEM_TARGET


CASES = [
    Case("count", "1a count (row unit)"),
    Case("sum", "1b sum(spend) (row unit)"),
    Case("mean", "1c mean(spend) (row unit)"),
    Case("grp_public", "2 by city, public keys: len+sum+mean"),
    Case("grp_private", "3 by city, private keys (δ=1e-6)"),
    Case("grp_public_user", "4 = 2, user unit ≤10 rows/user", "uniform", USER_TIME_TARGET, USER_MEM_TARGET),
    Case("grp_public_user_pareto", "5 = 4, Pareto rows per user", "pareto", USER_TIME_TARGET, USER_MEM_TARGET),
    Case("grp_public_user_count", "6 = 4, count only (copies)", "uniform", USER_TIME_TARGET, USER_MEM_TARGET),
    Case("grp_public_distinct", "7 by city, public keys: count_distinct(qty)"),
]
CASE_IDS = [c.id for c in CASES]
TAILS = {c.id: c.tail for c in CASES}
USER_CASES = ("grp_public_user", "grp_public_user_pareto", "grp_public_user_count")
COUNT_ONLY = "grp_public_user_count"   # rows hashed on (user, city) alone: most units hold copies
# dpframe's bounding step for case 4 and a plain Polars group-by on its result (not a DP query): separates
# the price of contribution bounding from the rest of dpframe's work.
BOUNDING_ONLY = "bounding_only"
PEER_ENGINES = ("opendp", "opendp_scan", "diffprivlib")
PEER_CASES = {"opendp": CASE_IDS[:6], "opendp_scan": CASE_IDS[:6], "diffprivlib": ["count", "sum", "mean"]}

NOISE_CASES = [
    # (sampler, exact scale as "p/q", what it corresponds to)
    ("discrete_laplace", "4", "count at ε/4 (group-by with 4 statistics)"),
    ("discrete_laplace", "2048004", "fixed-point sum at ε/4 (grid 2^-10)"),
    ("discrete_gaussian", "8", "count at ρ/4 = 1/16 (σ² = 8)"),
    ("discrete_gaussian", str(2**40), "fixed-point sum under zCDP (σ² = 2^40)"),
]


# ==================================================================================================
# workers (run in a subprocess, one per engine and query)


def _load_frame(path: str) -> Any:
    import polars as pl

    return pl.read_parquet(path)


def summarize(df: Any) -> str:
    """A compact, comparable text of a query result (one value, or groups / total count / mean)."""
    if df.height == 1 and "city" not in df.columns:
        return ", ".join(f"{c}={_num(df[c][0])}" for c in df.columns)
    parts = [f"{df.height} groups"]
    for c in df.columns:
        if c == "city":
            continue
        if "mean" in c:
            parts.append(f"avg {c}={_num(df[c].fill_nan(None).mean())}")
        else:
            parts.append(f"Σ{c}={_num(df[c].sum())}")
    return ", ".join(parts)


def _num(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def polars_query(df: Any, case: str) -> Callable[[], Any]:
    """The non-private Polars query for ``case`` on the in-memory DataFrame."""
    import polars as pl

    lf = df.lazy()
    spend = pl.col("spend").clip(*BOUNDS)
    grouped = [pl.len(), spend.sum().alias("spend_sum"), spend.mean().alias("spend_mean")]
    if case == "count":
        return lambda: lf.select(pl.len()).collect()
    if case == "sum":
        return lambda: lf.select(spend.sum().alias("spend_sum")).collect()
    if case == "mean":
        return lambda: lf.select(spend.mean().alias("spend_mean")).collect()
    if case == COUNT_ONLY:
        return lambda: lf.group_by("city").agg(pl.len()).sort("city").collect()
    if case == "grp_public_distinct":
        return lambda: lf.group_by("city").agg(pl.col("qty").drop_nulls().n_unique().alias("qty_count_distinct")
                                               ).sort("city").collect()
    if case in ("grp_public", "grp_private", *USER_CASES):
        return lambda: lf.group_by("city").agg(grouped).sort("city").collect()
    if case == BOUNDING_ONLY:   # the backend's bounding step (the mask) and a plain group-by through it
        return lambda: dpframe_bounded_frame(df, "grp_public_user").group_by("city").agg(grouped).sort("city").collect()
    raise ValueError(f"unknown case {case!r}")


def dpframe_bounded_frame(df: Any, case: str) -> Any:
    """The lazy frame dpframe's Polars backend builds for ``case`` up to contribution bounding (no aggregation).

    Uses dpframe internals (``PolarsBackend.bounded``) so it tracks the backend's current bounding; if they
    change, this case fails with an error in the report and nothing else is affected.
    """
    from dpframe.backends.base import StatisticsRequest
    from dpframe.plan.nodes import RowNode

    build, _run, budget = dpframe_query(df, case)
    sess, q = build()
    plan = q.plan(budget)
    node = q.node
    rows = tuple(n for n in node.lineage() if isinstance(n, RowNode))
    request = StatisticsRequest(node.lineage()[0].table, rows, sess.privacy_unit, node.by, node.keys,
                                plan.statistics(), 20240601)  # type: ignore[arg-type]
    backend = sess._catalog.default_backend
    return backend.bounded(request)


def _cities() -> list[str]:
    return city_names(N_CITIES)


def dpframe_query(df: Any, case: str) -> tuple[Callable[[], Any], Callable[[], Any], Any]:
    """(build() -> (session, query), run() -> released frame, query budget) for ``case``."""
    import dpframe as dp

    unit = dp.PrivacyUnit("user_id", max_rows=MAX_ROWS) if case in USER_CASES else dp.PrivacyUnit.row()
    budget = dp.ApproxDP(EPS, DELTA) if case == "grp_private" else dp.PureDP(EPS)
    total = dp.ApproxDP(*SESSION_BUDGET)
    keys = _cities()
    def build() -> tuple[Any, Any]:
        sess = dp.Session({"visits": df}, privacy_unit=unit, budget=total)
        return sess, core_query(dp, sess.table("visits"), core_case(case), BOUNDS, keys)

    def run() -> Any:
        _sess, q = build()
        return q.collect(budget=budget)

    return build, run, budget


def core_case(case: str) -> str:
    """The ``_common.core_query`` case behind a benchmark case (the user-level ones share case 4's query)."""
    return case if case == COUNT_ONLY or case not in USER_CASES else "grp_public_user"


# Where a dpframe run spends its time, read from cProfile'd runs: (label, file suffix, functions).
# Cumulative times; "noise" is inside "release". Names that stop matching show as "-".
PROFILE_PARTS = [
    ("session", "dpframe/session.py", ("__init__",)),
    ("plan", "dpframe/planning/__init__.py", ("plan_query",)),
    ("polars", "dpframe/backends/polars.py", ("statistics",)),
    ("release", "dpframe_aggregates/", ("release",)),
    ("noise", "dpframe/noise/samplers.py", ("discrete_laplace", "discrete_gaussian")),
    ("ledger", "dpframe/accounting/ledger.py", ("reserve", "commit")),
]


def profile_breakdown(run: Callable[[], Any], runs: int) -> dict[str, Any]:
    """Run ``runs`` times under cProfile; per PROFILE_PARTS entry the median cumulative seconds.

    Also returns the functions with the most own time (summed over the runs).
    """
    import cProfile
    import pstats

    totals: list[float] = []
    per_part: dict[str, list[float]] = {label: [] for label, _s, _f in PROFILE_PARTS}
    own: dict[str, float] = {}
    for _ in range(max(runs, 1)):
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        run()
        prof.disable()
        totals.append(time.perf_counter() - t)
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        for label, suffix, funcs in PROFILE_PARTS:
            found = [v[3] for (file, _line, func), v in stats.items()
                     if func in funcs and suffix in Path(file).as_posix()]
            if found:
                per_part[label].append(sum(found))
        for k, v in stats.items():
            name = f"{Path(k[0]).name}:{k[1]}:{k[2]}"
            own[name] = own.get(name, 0.0) + v[2]
    top = sorted(own.items(), key=lambda kv: -kv[1])[:8]
    parts = {label: (median(v) if v else None) for label, v in per_part.items()}
    return {"total_s": median(totals), "parts": parts, "top_self": [[n, s] for n, s in top]}


def worker(engine: str, case: str, path: str, runs: int, warmup: int, out: str) -> None:
    """Run one (engine, case) in this process and write the result JSON to ``out``."""

    def job() -> dict[str, Any]:
        import warnings

        import polars as pl

        warnings.filterwarnings("ignore")
        res: dict[str, Any] = {"engine": engine, "case": case, "polars": pl.__version__}
        if engine == "noise":
            return {**res, **noise_worker(runs)}
        df = _load_frame(path)
        res["rows"] = df.height
        small = df.head(1000)  # primes lazy imports / plugin loading outside the memory window
        if engine == "polars":
            m = measure(polars_query(df, case), runs, warmup, prime=polars_query(small, case))
            m["result"] = summarize(m["result"])
            return {**res, **m}
        if engine == "dpframe":
            import dpframe

            build, run, budget = dpframe_query(df, case)
            m = measure(run, runs, warmup, prime=dpframe_query(small, case)[1])
            m["result"] = summarize(m["result"])
            res["dpframe"] = getattr(dpframe, "__version__", "?")
            _sess, q = build()
            explain_runs = time_runs(lambda: q.explain(budget=budget), max(runs, 5), warmup=1)
            m["explain_s"] = median(explain_runs)
            m["explain_text"] = q.explain(budget=budget)
            _sess, q = build()
            t = time.perf_counter()
            q.plan(budget)
            m["plan_s"] = time.perf_counter() - t
            m["profile"] = profile_breakdown(run, runs)
            return {**res, **m}
        raise ValueError(f"unknown engine {engine!r}")

    worker_main(job, out)


def noise_worker(runs: int) -> dict[str, Any]:
    """Time 1M draws of each sampler in NOISE_CASES from the private source (OS CSPRNG)."""
    from fractions import Fraction

    import numpy as np

    from dpframe.noise import default_source, discrete_gaussian, discrete_laplace

    draws = int(os.environ.get("BENCH_NOISE_DRAWS", "1000000"))
    src = default_source()  # SystemRandomSource: what private releases use
    fns = {"discrete_laplace": discrete_laplace, "discrete_gaussian": discrete_gaussian}
    out = []
    for name, scale, what in NOISE_CASES:
        s = Fraction(scale)
        z = fns[name](s, draws, src)
        times = time_runs(lambda fn=fns[name], s=s: fn(s, draws, src), runs, warmup=0)
        out.append({"sampler": name, "scale": scale, "what": what, "draws": draws, "times_s": times,
                    "median_s": median(times), "sample_std": float(np.std(z))})
    ref = time_runs(lambda: src.random_uint64(draws), runs)
    return {"noise": out, "urandom_1M_words_s": median(ref), "draws": draws}


# ==================================================================================================
# peer worker: runs in the peer venv (opendp pins polars 1.x), imports only _common from bench/

PEER_SCRIPT = r'''
import json, os, sys, warnings
warnings.filterwarnings("ignore")
engine, case, path, runs, warmup, out, bench_dir, consts = sys.argv[1:9]
sys.path.insert(0, bench_dir)
from _common import measure, worker_main, city_names
C = json.loads(consts)
runs, warmup = int(runs), int(warmup)
LO, HI = C["bounds"]

def summarize(df):
    if df.height == 1 and "city" not in df.columns:
        return ", ".join(f"{c}={df[c][0]:.6g}" if isinstance(df[c][0], float) else f"{c}={df[c][0]}"
                         for c in df.columns)
    return f"{df.height} groups, Σlen={df['len'].sum()}, avg spend_mean={df['spend_mean'].fill_nan(None).mean():.6g}"

def load():
    import polars as pl
    if engine == "diffprivlib":
        import diffprivlib  # noqa: F401  (import cost kept out of the timed calls)
        return {"spend": pl.read_parquet(path)["spend"].to_numpy()}
    import opendp.prelude as dp
    dp.enable_features("contrib")
    lf = pl.scan_parquet(path) if engine == "opendp_scan" else pl.read_parquet(path).lazy()
    return {"lf": lf, "n_max": 2 * lf.select(pl.len()).collect().item(), "keys": city_names(C["cities"])}

def opendp_query(st):
    import polars as pl
    import opendp.prelude as dp
    E, A = dp.loss_of(epsilon=C["eps"]), dp.loss_of(epsilon=C["eps"], delta=C["delta"])
    rows = dp.unit_of(contributions=1)
    users = dp.unit_of(contributions=1, identifier="user_id")

    def ctx(loss, unit=rows, margins=None):
        # a fresh compositor per timed query (as dpframe's Session): one query, the whole loss
        return dp.Context.compositor(data=st["lf"], privacy_unit=unit, privacy_loss=loss, split_evenly_over=1,
                                     margins=margins or [dp.polars.Margin(max_length=st["n_max"])])

    spend = pl.col("spend").fill_nan(0.0).fill_null(0.0)
    aggs = [dp.len(), spend.dp.sum((LO, HI)).alias("spend_sum"), spend.dp.mean((LO, HI)).alias("spend_mean")]
    keys = pl.LazyFrame({"city": st["keys"]})
    if case == "count":
        return lambda: ctx(E).query().select(dp.len()).release().collect()
    if case == "sum":
        return lambda: ctx(E).query().select(spend.dp.sum((LO, HI)).alias("spend_sum")).release().collect()
    if case == "mean":
        return lambda: ctx(E).query().select(spend.dp.mean((LO, HI)).alias("spend_mean")).release().collect()
    if case == "grp_public":
        return lambda: ctx(E).query().group_by("city").agg(*aggs).with_keys(keys).release().collect()
    if case == "grp_private":
        # OpenDP needs a public bound on the number of groups for float sums of private keys.
        m = [dp.polars.Margin(max_length=st["n_max"]),
             dp.polars.Margin(by=["city"], max_length=st["n_max"], max_groups=C["cities"])]
        return lambda: ctx(A, margins=m).query().group_by("city").agg(*aggs).release().collect()
    if case == "grp_public_user":
        return lambda: (ctx(E, unit=users).query().truncate_per_group(C["max_rows"])
                        .group_by("city").agg(*aggs).with_keys(keys).release().collect())
    raise ValueError(case)

def diffprivlib_query(st):
    import diffprivlib as dpl
    import numpy as np
    import polars as pl
    x = st["spend"]
    one = lambda name, v: pl.DataFrame({name: [v]})
    if case == "count":
        return lambda: one("len", int(dpl.tools.count_nonzero(~np.isnan(x), epsilon=C["eps"])))
    if case == "sum":
        return lambda: one("spend_sum", float(dpl.tools.sum(x, epsilon=C["eps"], bounds=(LO, HI))))
    if case == "mean":
        return lambda: one("spend_mean", float(dpl.tools.mean(x, epsilon=C["eps"], bounds=(LO, HI))))
    raise ValueError(f"diffprivlib has no {case}")

def job():
    import importlib.metadata as md
    st = load()
    fn = diffprivlib_query(st) if engine == "diffprivlib" else opendp_query(st)
    m = measure(fn, runs, warmup)  # its warm-up (inside the memory window) includes one-off imports
    m["result"] = summarize(m["result"])
    pkgs = ["diffprivlib", "numpy"] if engine == "diffprivlib" else ["opendp", "polars"]
    m["versions"] = {p: md.version(p) for p in pkgs}
    return m

worker_main(job, out)
'''


def peer_constants() -> str:
    """The workload constants the peer worker needs, as JSON."""
    return json.dumps({"bounds": list(BOUNDS), "eps": EPS, "delta": DELTA, "max_rows": MAX_ROWS,
                       "cities": N_CITIES})


# ==================================================================================================
# driver


def run_all(args: argparse.Namespace, paths: dict[str, Path]) -> dict[str, Any]:
    """Run every (engine, case) worker; results[engine][case] = worker JSON. ``paths``: data per tail."""
    results: dict[str, dict[str, Any]] = {}
    cases = args.cases.split(",") if args.cases else CASE_IDS
    tmpdir = Path(tempfile.mkdtemp(prefix="dpframe-bench-"))
    try:
        _run_all(args, paths, cases, tmpdir, results)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    return results


def _run_all(args: argparse.Namespace, paths: dict[str, Path], cases: list[str], tmpdir: Path,
             results: dict[str, dict[str, Any]]) -> None:
    me = [sys.executable, str(HERE)]

    def go(engine: str, case: str, cmd: list[str], out: Path, env: dict[str, str] | None = None) -> None:
        log_stderr(f"== {engine:12s} {case:16s} ...")
        res = run_worker(cmd, out, args.timeout, env=env, log=lambda line: log_stderr("   " + line))
        results.setdefault(engine, {})[case] = res
        if "error" in res:
            log_stderr(f"   {engine} {case} FAILED: {res['error']}")
            if res.get("traceback"):
                log_stderr(res["traceback"])
        elif "noise" in res:
            log_stderr("   " + ", ".join(f"{n['sampler']}({n['scale']}) {fmt_s(n['median_s'])} s"
                                     for n in res["noise"]))
        else:
            log_stderr(f"   median {fmt_s(res.get('median_s'))} s, peak {fmt_mib(res.get('peak_kib'))} MiB "
                       f"-> {res.get('result')}  ({res['wall_s']:.0f}s wall)")

    path = paths["uniform"]
    common = ["--path", str(path), "--runs", str(args.runs), "--warmup", str(args.warmup)]
    for case in cases:
        for engine in ("polars", "dpframe"):   # one after the other, so that both see the same load
            out = tmpdir / f"{engine}-{case}.json"
            go(engine, case, [*me, "--worker", engine, "--case", case, "--path", str(paths[TAILS[case]]),
                              *common[2:], "--out", str(out)], out)
    if "grp_public_user" in cases:
        out = tmpdir / "polars-bounding.json"
        go("polars", BOUNDING_ONLY, [*me, "--worker", "polars", "--case", BOUNDING_ONLY, *common, "--out", str(out)],
           out)
    if not args.no_noise:
        out = tmpdir / "noise.json"
        go("noise", "samplers", [*me, "--worker", "noise", "--case", "-", *common, "--out", str(out)], out,
           env={**os.environ, "BENCH_NOISE_DRAWS": str(args.noise_draws)})
    if args.peers and args.peers_json:
        earlier = json.loads(Path(args.peers_json).read_text())["results"]
        for engine in args.peer_engines.split(","):
            results[engine] = {c: r for c, r in earlier.get(engine, {}).items() if c in cases}
        log_stderr(f"peers: results reused from {args.peers_json}")
    elif args.peers:
        py = Path(args.peers_venv) / "bin" / "python"
        if not py.exists():
            results["_peers_missing"] = {"venv": str(args.peers_venv)}
            log_stderr(f"NOTE: --peers: no peer venv at {args.peers_venv}; see bench/README.md to create it")
        else:
            for engine in args.peer_engines.split(","):
                for case in cases:
                    if case not in PEER_CASES[engine]:
                        continue
                    out = tmpdir / f"{engine}-{case}.json"
                    cmd = [str(py), "-c", PEER_SCRIPT, engine, case, str(path), str(args.runs), str(args.warmup),
                           str(out), str(HERE.parent), peer_constants()]
                    go(engine, case, cmd, out)


def _git_rev() -> str:
    """`` (git abc1234[, uncommitted changes])`` for the tree this script lives in, or ``""``."""
    import subprocess

    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "dpframe", "plugins"], cwd=HERE.parent,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" (git {rev}{', uncommitted changes in dpframe/ or plugins/' if dirty else ''})" if rev else ""


def _get(results: dict[str, Any], engine: str, case: str, key: str = "median_s") -> Any:
    r = results.get(engine, {}).get(case, {})
    return None if "error" in r else r.get(key)


def _verdict(x: float | None, target: float) -> str:
    if x is None:
        return "-"
    return "yes" if x <= target else "NO"


def render(results: dict[str, Any], args: argparse.Namespace, paths: dict[str, Path], gen_s: float | None) -> str:
    """The printed report."""
    cases = [c for c in CASES if c.id in (args.cases.split(",") if args.cases else CASE_IDS)]
    peers = args.peers and "_peers_missing" not in results
    out: list[str] = []
    rows_n = next((r.get("rows") for r in results.get("polars", {}).values() if r.get("rows")), args.rows)
    out.append(f"# dpframe aggregations benchmark: {rows_n:,} rows, {os.cpu_count()} cores, median of {args.runs} "
               f"runs (+{args.warmup} warm-up)\n")
    out.append(f"- load average before / after: {args.load_before} / {load_average()}")
    out.append(f"- machine: {machine_info()}")
    pv = next((r.get("polars") for r in results.get("polars", {}).values() if r.get("polars")), "?")
    dv = next((r.get("dpframe") for r in results.get("dpframe", {}).values() if r.get("dpframe")), "?")
    out.append(f"- dpframe {dv}{_git_rev()}, polars {pv} (venv {sys.prefix}); both collect() with Polars' "
               "default engine")
    path = paths["uniform"]
    out.append(f"- data: {path} ({path.stat().st_size / 2**20:.0f} MiB Parquet"
               f"{f', generated in {gen_s:.0f}s' if gen_s else ', cached'}); {args.users:,} users "
               f"({rows_n / args.users:g} rows per user), {N_CITIES:,} "
               f"Zipf({ZIPF_S}) cities, spend ~ U[0, {SPEND_MAX:g}), bounds {list(BOUNDS)}")
    if "pareto" in paths:
        out.append(f"- case 5: {paths['pareto'].name}: the same columns, rows per user ~ Pareto "
                   f"(shape {PARETO_SHAPE}, mean {rows_n / args.users:g}; bench/_common.py user_ids)")
    out.append(f"- dpframe: ε={EPS:g} pure DP (case 3: ε={EPS:g}, δ={DELTA:g}); time = Session + query + collect(). "
               f"Ratios use max(Polars, {TIME_FLOOR_S * 1000:.0f} ms) as the base (marked *).")
    out.append("- peak RSS = highest RSS while the query runs, loaded data included (the peak mark is reset "
               "after loading); 'extra' = peak minus the RSS before the first run.\n")

    head = ["query", "Polars s", "dpframe s", "dp/Polars", "target", "met", "Polars MiB", "dpframe MiB",
            "peak dp/Polars", "extra MiB pl/dp", "mem target", "met", "explain ms"]
    if peers:
        head += ["OpenDP s", "dp/OpenDP", "OpenDP scan s", "dp/scan", "diffprivlib s", "dp/dpl"]
    rows = []
    for c in cases:
        pl_t, dp_t = _get(results, "polars", c.id), _get(results, "dpframe", c.id)
        floored = pl_t is not None and pl_t < TIME_FLOOR_S
        tr = ratio(dp_t, pl_t, TIME_FLOOR_S)
        pl_m, dp_m = _get(results, "polars", c.id, "peak_kib"), _get(results, "dpframe", c.id, "peak_kib")
        mr = ratio(dp_m, pl_m)
        pl_x, dp_x = _get(results, "polars", c.id, "extra_kib"), _get(results, "dpframe", c.id, "extra_kib")
        user = c.id in USER_CASES   # issue 17's memory target is on the extra memory (floor: 1 MiB)
        memory = ratio(dp_x, pl_x, 1024) if user else mr
        row = [c.label, fmt_s(pl_t), fmt_s(dp_t), fmt_ratio(tr) + ("*" if floored else ""), f"≤{c.time_target:g}×",
               _verdict(tr, c.time_target), fmt_mib(pl_m), fmt_mib(dp_m), fmt_ratio(mr),
               f"{fmt_mib(pl_x)} / {fmt_mib(dp_x)}", f"{'extra' if user else 'peak'} ≤{c.mem_target:g}×",
               _verdict(memory, c.mem_target), fmt_ms(_get(results, "dpframe", c.id, "explain_s"))]
        if peers:
            for eng in PEER_ENGINES:
                if c.id not in PEER_CASES[eng] or eng not in args.peer_engines.split(","):
                    row += ["n/a", "-"]
                    continue
                pt = _get(results, eng, c.id)
                row += [fmt_s(pt) if pt is not None else "fail", fmt_ratio(ratio(dp_t, pt))]
        rows.append(row)
    out.append(format_table(head, rows))
    out.append("")

    # contribution bounding
    b = _get(results, "polars", BOUNDING_ONLY)
    if b is not None:
        pub, usr = _get(results, "dpframe", "grp_public"), _get(results, "dpframe", "grp_public_user")
        plain = _get(results, "polars", "grp_public_user")
        out.append("## Contribution bounding (case 4)\n")
        out.append(format_table(
            ["what", "s"],
            [["plain Polars group-by (no bounding)", fmt_s(plain)],
             ["dpframe's bounding step (PolarsBackend.bounded), then a plain Polars group-by", fmt_s(b)],
             ["dpframe, public keys, row unit (case 2)", fmt_s(pub)],
             ["dpframe, public keys, user unit (case 4)", fmt_s(usr)],
             ["extra cost of user-level bounding in dpframe (4 − 2)",
              fmt_s(usr - pub if usr is not None and pub is not None else None)]], "lr"))
        out.append("")

    # where dpframe's time goes
    prows = []
    for c in cases:
        p = results.get("dpframe", {}).get(c.id, {}).get("profile")
        if not p:
            continue
        parts = p["parts"]
        known = sum(parts[k] or 0.0 for k in ("session", "plan", "polars", "release", "ledger"))
        prows.append([c.label, fmt_ms(p["total_s"])] + [fmt_ms(parts[k]) for k in
                     ("session", "plan", "polars", "release", "noise", "ledger")]
                     + [fmt_ms(p["total_s"] - known)])
    if prows:
        out.append("## Where dpframe's time goes (cProfile, median of runs, ms; noise ⊂ release)\n")
        out.append(format_table(["query", "total", "Session()", "plan", "Polars query", "release", "noise",
                                 "ledger", "other"], prows))
        out.append("")

    # noise
    nz = results.get("noise", {}).get("samplers", {})
    if nz.get("noise"):
        out.append(f"## Exact noise samplers ({nz['draws']:,} draws, OS CSPRNG, median of {args.runs})\n")
        out.append(format_table(["sampler", "scale", "for", "s", f"< {NOISE_TARGET_S:g} s"],
                                [[n["sampler"], n["scale"], n["what"], fmt_s(n["median_s"]),
                                  _verdict(n["median_s"], NOISE_TARGET_S)] for n in nz["noise"]], "lrlrr"))
        out.append(f"\n(os.urandom alone, {nz['draws']:,} 64-bit words: {fmt_s(nz['urandom_1M_words_s'])} s)\n")
    elif "noise" in results:
        out.append(f"## Noise samplers: FAILED: {nz.get('error')}\n")

    # released values
    engines = ["polars", "dpframe"] + ([e for e in args.peer_engines.split(",")] if peers else [])
    vrows = [[c.label] + [str(results.get(e, {}).get(c.id, {}).get("result", "-"))
                          if "error" not in results.get(e, {}).get(c.id, {})
                          else "fail" for e in engines] for c in cases]
    out.append("## Released values (last run; sanity check)\n")
    out.append(format_table(["query", *engines], vrows, "l" * (len(engines) + 1)))
    out.append("")

    # notes
    notes = []
    if args.peers and not peers:
        notes.append(f"--peers: no peer venv at {args.peers_venv} (create it as bench/README.md says, or pass "
                     "--peers-venv / set DPFRAME_PEERS_VENV); peer columns left out.")
    for eng, per in results.items():
        if eng.startswith("_"):
            continue
        for case, r in per.items():
            if "error" in r:
                notes.append(f"{eng}/{case} failed: {r['error']}")
            elif not r.get("peak_exact", True):
                notes.append(f"{eng}/{case}: could not reset the peak-RSS mark; its peak includes loading")
    if peers:
        vers = {k: v for r in results.get("opendp", {}).values() for k, v in r.get("versions", {}).items()}
        vers.update({k: v for r in results.get("diffprivlib", {}).values() for k, v in r.get("versions", {}).items()})
        notes.append("peers (" + ", ".join(f"{k} {v}" for k, v in sorted(vers.items())) + f", venv {args.peers_venv}): "
                     "OpenDP Context.compositor per query, ε=1 (case 3: δ=1e-6 and a public max_groups=1000 "
                     "margin, which OpenDP needs for float sums over private keys; case 4: unit_of(identifier="
                     "'user_id') + truncate_per_group(10)). 'OpenDP' reads the same in-memory frame as dpframe; "
                     "'OpenDP scan' gets pl.scan_parquet(path). diffprivlib: numpy array of spend, count/sum/mean "
                     "only (no group-by).")
    if peers and args.peers_json:
        notes.append(f"peer figures reused from an earlier run: {args.peers_json}")
    cold = [(c.label, _get(results, "dpframe", c.id, "cold_s")) for c in cases]
    cold = [(lbl, s) for lbl, s in cold if s is not None]
    if cold:
        notes.append("dpframe first call in a fresh process (plugin loading etc., not in the medians): "
                     + "; ".join(f"{lbl.split(' ')[0]} {fmt_s(s)} s" for lbl, s in cold))
    if notes:
        out.append("## Notes\n")
        out += [f"- {n}" for n in notes]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000, help="table rows (default 10M)")
    ap.add_argument("--users", type=int, default=N_USERS,
                    help="distinct user_id values (default 1M). Contribution bounding (case 4) costs most when "
                         "users have more than max_rows=10 rows: --rows 2000000 --users 200000 has the 10 rows "
                         "per user of the default 10M-row table at a fifth of the size")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per query; the median is reported")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up calls before the timed runs")
    ap.add_argument("--peers", action="store_true", help="also run OpenDP and diffprivlib in the peer venv")
    ap.add_argument("--peers-venv", default=DEFAULT_PEERS_VENV, help="peer venv (default %(default)s)")
    ap.add_argument("--peer-engines", default=",".join(PEER_ENGINES), help="subset of %(default)s")
    ap.add_argument("--peers-json", default=None,
                    help="with --peers: reuse the peer results of an earlier run (its raw JSON) instead of rerunning")
    ap.add_argument("--cases", default=None, help="comma list, subset of " + ",".join(CASE_IDS))
    ap.add_argument("--no-noise", action="store_true", help="skip the noise sampler timings")
    ap.add_argument("--noise-draws", type=int, default=1_000_000, help="draws per sampler timing")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per worker subprocess")
    ap.add_argument("--json-out", default=None, help="raw results (default bench/.data/aggregations_<rows>.json)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.case, args.path, args.runs, args.warmup, args.out)
        return
    if args.cases:
        bad = set(args.cases.split(",")) - set(CASE_IDS)
        if bad:
            ap.error(f"unknown cases {sorted(bad)}; use {CASE_IDS}")
    bad_peers = set(args.peer_engines.split(",")) - set(PEER_ENGINES)
    if bad_peers:
        ap.error(f"unknown peer engines {sorted(bad_peers)}; use {list(PEER_ENGINES)}")
    if args.peers and not args.peers_json and not (Path(args.peers_venv) / "bin" / "python").exists():
        log_stderr(f"NOTE: --peers given but {args.peers_venv}/bin/python does not exist; the peers are skipped. "
                   "Create the venv as bench/README.md explains.")
    log_stderr(f"data: {args.rows:,} rows ...")
    args.load_before = load_average()
    paths: dict[str, Path] = {}
    gen_s = None
    for tail in sorted({TAILS[c] for c in (args.cases.split(",") if args.cases else CASE_IDS)} | {"uniform"}):
        paths[tail], built = synthetic_visits(args.rows, users=args.users, cities=N_CITIES, zipf_s=ZIPF_S,
                                              spend_max=SPEND_MAX, tail=tail)
        gen_s = (gen_s or 0.0) + built if built else gen_s
        log_stderr(f"data: {paths[tail]} ({f'generated in {built:.0f}s' if built else 'cached'})")
    results = run_all(args, paths)
    report = render(results, args, paths, gen_s)
    suffix = "" if args.users == N_USERS else f"_u{args.users}"
    json_out = Path(args.json_out) if args.json_out else DATA_DIR / f"aggregations_{args.rows}{suffix}.json"
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps({"args": vars(args), "results": results}, indent=1, default=str))
    print(report)
    log_stderr(f"raw results: {json_out}")


if __name__ == "__main__":
    main()
