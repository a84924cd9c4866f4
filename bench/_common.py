"""Shared helpers for dpframe's benchmarks (stdlib only at import time).

* data: :func:`cached_file` builds a file once under ``bench/.data/`` (git-ignored) and reuses it;
  :func:`synthetic_visits` is the standard synthetic table (users, Zipf-distributed cities, spend, qty).
* timing: :func:`time_runs` / :func:`median` — wall time with ``time.perf_counter``, median of N runs.
* memory: each case runs in its own subprocess (:func:`run_worker`); inside it :func:`measure` resets the
  kernel's peak-RSS mark after the data is loaded (``/proc/self/clear_refs``), so the reported peak is
  "loaded data + what the query needed"; the parent also records the child's lifetime ``ru_maxrss``
  (``os.wait4``), which includes loading.
* output: :func:`format_table` renders a Markdown table; ``fmt_*`` format cells.

This module imports nothing outside the standard library at top level, so a worker running in another
virtual environment (the peer libraries' venv) can import it too.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / ".data"

# --------------------------------------------------------------------------------------------------
# data


def cached_file(name: str, build: Callable[[Path], None]) -> tuple[Path, float | None]:
    """``DATA_DIR / name``, built by ``build(tmp_path)`` on first use; returns (path, build seconds or None).

    The builder writes to a temporary name that is renamed into place, so an interrupted build never
    leaves a truncated file behind. Put every generation parameter in ``name``: it is the cache key.
    """
    path = DATA_DIR / name
    if path.exists():
        return path, None
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    t = time.perf_counter()
    try:
        build(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path, time.perf_counter() - t


def city_names(n: int) -> list[str]:
    """The public city keys: ``c0000``, ``c0001``, ... (rank order: ``c0000`` is the most frequent)."""
    width = max(4, len(str(n - 1)))
    return [f"c{i:0{width}d}" for i in range(n)]


PARETO_SHAPE = 1.5
"""Shape α of the heavy-tailed rows-per-user law (``tail="pareto"``): infinite variance, finite mean."""


def user_ids(rows: int, users: int, tail: str, rng: Any) -> Any:
    """``rows`` user ids, shuffled: uniform over ``users`` ids, or with Pareto-distributed rows per user.

    ``tail="uniform"``: each row's user uniform in [0, users) (Poisson rows per user, mean rows/users).
    ``tail="pareto"``: user i has about ``m·(1 + Lomax(α))`` rows, α = :data:`PARETO_SHAPE`, scaled so the
    mean is rows/users (truncated to ``rows`` in all): most users have a few rows, a few have tens of
    thousands (at 10M rows by 1M users the largest has about 30k).
    """
    import numpy as np

    if tail == "uniform":
        return rng.integers(0, users, size=rows, dtype=np.int64)
    if tail != "pareto":
        raise ValueError(f"unknown tail {tail!r}")
    scale = (rows / users) * (PARETO_SHAPE - 1) / PARETO_SHAPE
    counts = np.maximum(1, np.floor(scale * (1 + rng.pareto(PARETO_SHAPE, users)))).astype(np.int64)
    ids = np.repeat(np.arange(users, dtype=np.int64), counts)
    ids = ids[rng.permutation(ids.size)[:rows]] if ids.size >= rows else \
        np.concatenate([ids, rng.integers(0, users, size=rows - ids.size, dtype=np.int64)])
    rng.shuffle(ids)
    return ids


def synthetic_visits(rows: int, *, users: int = 1_000_000, cities: int = 1_000, zipf_s: float = 1.1,
                     spend_max: float = 600.0, qty_max: int = 1_000, seed: int = 20240601,
                     row_group_size: int = 1_000_000, tail: str = "uniform") -> tuple[Path, float | None]:
    """A deterministic Parquet table of ``rows`` visits (cached under ``bench/.data/``).

    Columns: ``user_id`` int64 (:func:`user_ids`: uniform in [0, users), or with ``tail="pareto"``
    heavy-tailed rows per user); ``city`` string, ``cities`` names drawn with Zipf(``zipf_s``) frequencies
    over ranks (as in shared/peers/perf_baseline.py); ``spend`` float64 uniform in [0, spend_max); ``qty``
    int64 uniform in [0, qty_max). Returns (path, seconds it took to build, or None when reused).
    """
    shape = "" if tail == "uniform" else f"_{tail}{PARETO_SHAPE:g}"
    name = f"visits_r{rows}_u{users}{shape}_c{cities}_z{zipf_s:g}_s{spend_max:g}_q{qty_max}_seed{seed}.parquet"

    def build(tmp: Path) -> None:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        rng = np.random.default_rng(seed)
        p = np.arange(1, cities + 1, dtype=np.float64) ** -zipf_s
        p /= p.sum()
        codes = rng.choice(cities, size=rows, p=p).astype(np.int32)
        city = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(city_names(cities))).cast(pa.string())
        table = pa.table({
            "user_id": pa.array(user_ids(rows, users, tail, rng)),
            "city": city,
            "spend": pa.array(rng.uniform(0.0, spend_max, size=rows)),
            "qty": pa.array(rng.integers(0, qty_max, size=rows, dtype=np.int64)),
        })
        pq.write_table(table, tmp, row_group_size=row_group_size)

    return cached_file(name, build)


# --------------------------------------------------------------------------------------------------
# timing and memory (inside a worker process)


def core_query(dp: Any, table: Any, case: str, bounds: tuple[float, float], keys: Sequence[str]) -> Any:
    """The core benchmark's dpframe query for ``case`` on the private frame ``table``.

    ``dp`` is the ``dpframe`` module, passed in because this file is also imported by peer venvs
    that do not have dpframe installed.
    """
    measures = [dp.len(), dp.sum("spend", bounds=bounds), dp.mean("spend", bounds=bounds)]
    if case == "count":
        return table.agg(dp.len())
    if case == "sum":
        return table.agg(dp.sum("spend", bounds=bounds))
    if case == "mean":
        return table.agg(dp.mean("spend", bounds=bounds))
    if case == "grp_private":
        return table.group_by("city").agg(*measures)
    if case in ("grp_public", "grp_public_user"):
        return table.group_by("city", keys=list(keys)).agg(*measures)
    if case == "grp_public_user_count":
        return table.group_by("city", keys=list(keys)).agg(dp.len())
    if case == "grp_public_distinct":
        return table.group_by("city", keys=list(keys)).agg(dp.count_distinct("qty"))
    raise ValueError(f"unknown case {case!r}")


def median(xs: Sequence[float]) -> float:
    """The median (NaN for an empty sequence)."""
    return statistics.median(xs) if xs else float("nan")


def _proc_status() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])  # KiB
    except OSError:
        pass
    return out


def rss_kib() -> int:
    """Current resident set size of this process (KiB); the lifetime peak where /proc is missing."""
    return _proc_status().get("VmRSS", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def peak_rss_kib() -> int:
    """Peak resident set size since the last :func:`reset_peak_rss` (or since start), in KiB."""
    return _proc_status().get("VmHWM", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux ≥ 4.0); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def measure(fn: Callable[[], Any], runs: int, warmup: int = 1, slow_s: float = 5.0,
            prime: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Time ``fn`` (median of ``runs`` perf_counter wall times) and record the peak RSS while it runs.

    Call it after the data is loaded. ``prime()`` (e.g. the same query on a few rows) runs first, so
    one-off lazy imports and plugin loading are not counted as the query's memory. Then the peak-RSS mark
    is reset, so ``peak_kib`` is the largest RSS during the runs (loaded data included) and
    ``extra_kib`` what the runs added on top of ``base_kib``. ``warmup`` untimed calls come next (inside
    the memory window: warming up must not hide the query's memory in the allocator's cache); a warm-up
    call slower than ``slow_s`` is kept as the first timed run instead (warming up cannot matter at that
    scale, and it saves a long run).
    """
    if prime is not None:
        prime()
    gc.collect()
    exact_peak = reset_peak_rss()
    base = rss_kib()
    times: list[float] = []
    cold = None
    result = None
    for i in range(warmup):
        t = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - t
        if i == 0:
            cold = elapsed
        if elapsed > slow_s:
            times.append(elapsed)
            break
    while len(times) < runs:
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    peak = peak_rss_kib()
    return {"times_s": times, "median_s": median(times), "cold_s": cold, "base_kib": base, "peak_kib": peak,
            "extra_kib": max(peak - base, 0), "peak_exact": exact_peak, "result": result}


def time_runs(fn: Callable[[], Any], runs: int, warmup: int = 0) -> list[float]:
    """Wall times (``time.perf_counter``) of ``runs`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def interleaved(engines: dict[str, Callable[[], Any]], runs: int) -> dict[str, float]:
    """Median wall time of each engine's call over ``runs`` rounds (after one warm-up round).

    Each round calls every engine once, in turn, so that all see the same load on a shared machine.
    """
    times: dict[str, list[float]] = {name: [] for name in engines}
    for run in range(runs + 1):
        for name, fn in engines.items():
            t = time.perf_counter()
            fn()
            if run:  # the first round warms up
                times[name].append(time.perf_counter() - t)
    return {name: median(ts) for name, ts in times.items()}


def load_average() -> str:
    """The 1, 5 and 15-minute load averages ("?" where unknown): read timings on a shared machine against them."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as JSON (non-JSON values become strings)."""
    with open(path, "w") as fh:
        json.dump(obj, fh, default=str)


def worker_main(run: Callable[[], dict[str, Any]], out: str | Path) -> None:
    """Run one worker job and write its result (or the error and traceback) to ``out`` as JSON."""
    try:
        res = run()
    except Exception as e:  # noqa: BLE001 - reported to the driver, which prints it
        res = {"error": f"{type(e).__name__}: {e}"[:800], "traceback": traceback.format_exc()[-3000:]}
    write_json(out, res)


# --------------------------------------------------------------------------------------------------
# running workers (in the driver)


def run_worker(cmd: Sequence[str], out: str | Path, timeout_s: float, env: dict[str, str] | None = None,
               log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run ``cmd`` (a worker that writes JSON to ``out``), return that JSON plus the child's peak RSS.

    ``child_maxrss_kib`` is the child's lifetime ``ru_maxrss`` from ``os.wait4`` (per child, unlike
    ``RUSAGE_CHILDREN``, which keeps the maximum over all children). stderr lines are passed to ``log``.
    """
    out = Path(out)
    if out.exists():
        out.unlink()
    t = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    stderr_lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_lines.append(line.rstrip("\n"))
            if log:
                log(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            _pid, status, usage = os.wait4(proc.pid, 0)
            timed_out = True
            break
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from waiting on a reaped pid
    reader.join(timeout=5)
    res: dict[str, Any] = {}
    if out.exists() and out.stat().st_size:
        with open(out) as fh:
            res = json.load(fh)
    if timed_out:
        res.setdefault("error", f"timed out after {timeout_s:.0f}s")
    elif not res:
        tail = "\n".join(stderr_lines[-15:])
        res = {"error": f"worker exited with code {proc.returncode} and wrote no result", "stderr": tail}
    res["child_maxrss_kib"] = usage.ru_maxrss
    res["wall_s"] = time.perf_counter() - t
    return res


def machine_info() -> str:
    """One line: cores (and Polars' thread pool), RAM, platform, Python."""
    try:
        ram = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        ram = "? RAM"
    try:
        import polars as pl

        pool = f" (Polars thread pool: {pl.thread_pool_size()})"
    except ImportError:   # a peer venv without Polars
        pool = ""
    return f"{os.cpu_count()} CPU cores{pool}, {ram}, {platform.platform()}, Python {platform.python_version()}"


def log_stderr(msg: str) -> None:
    """Progress output goes to stderr so stdout holds only the report."""
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# output


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None) -> str:
    """A Markdown table; ``align`` is one letter per column, ``l`` or ``r`` (default: first l, rest r)."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    n = len(headers)
    align = align or "l" + "r" * (n - 1)
    width = [max(len(r[i]) for r in cells) for i in range(n)]

    def line(r: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(width[i]) if align[i] == "l" else c.rjust(width[i])
                                 for i, c in enumerate(r)) + " |"

    rule = "|" + "|".join(("-" * (width[i] + 1) + ":") if align[i] == "r" else ("-" * (width[i] + 2))
                          for i in range(n)) + "|"
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def fmt_s(x: float | None) -> str:
    """Seconds with 3 significant decimals (ms precision below 10 s)."""
    if x is None or x != x:
        return "-"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def fmt_ms(x: float | None) -> str:
    """Seconds shown as milliseconds."""
    if x is None or x != x:
        return "-"
    return f"{x * 1000:.1f}" if x < 1 else f"{x * 1000:.0f}"


def fmt_mib(kib: float | None) -> str:
    """KiB shown as MiB."""
    return "-" if kib is None else f"{kib / 1024:,.0f}"


def fmt_ratio(x: float | None) -> str:
    """A ratio like ``1.23×``."""
    if x is None or x != x:
        return "-"
    if x < 0.1:
        return f"{x:.2g}×"
    return f"{x:.2f}×" if x < 100 else f"{x:.0f}×"


def ratio(a: float | None, b: float | None, floor: float = 0.0) -> float | None:
    """``a / max(b, floor)``, or None when either is missing."""
    if a is None or b is None or a != a or b != b:
        return None
    den = max(b, floor)
    return a / den if den > 0 else None
