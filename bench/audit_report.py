"""Privacy audit report: per registered spec, the claimed ε vs the empirical lower bound on ε.

For every spec in ``dpframe.testing.registered_audits()`` (and, with ``--broken``, the deliberately broken
mechanisms) it runs the audit on each adversarial neighbouring pair and prints the strongest result: the
Clopper–Pearson lower bound on the realised ε (confidence 1 − 10⁻⁶), the claimed (ε, δ), their ratio,
and the verdict. A correct mechanism shows ratio ≤ 1; the closer to 1, the tighter its accounting (and the
stronger the audit). Ex-post (output-DP) specs also audit each output cell against the ε it was settled
to (rows marked "cells"). A spec with a known, reported bug shows its id. Run from the repository root:

    python bench/audit_report.py [--samples N] [--query-samples M] [--broken] [--only TEXT]

Release-level specs (``Frame.agg`` measures) run ``--samples`` times per dataset and pair (default
200 000); query-level specs (each run is a whole ``collect``) run ``min(--query-samples, their
max_samples)`` times (default: their max_samples). ``--samples 20000`` is the CI setting.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, machine_info  # noqa: E402

from dpframe.testing import broken_specs, registered_audits, run_audit  # noqa: E402


def _row(spec: object, results: list, runs: int, seconds: float, cells: bool) -> list[object]:
    chosen = [r for r in results if ("(settled cells)" in r.label) == cells]
    best = max(chosen, key=lambda r: r.epsilon_lower_bound / max(r.claimed_epsilon, 1e-12))
    ok = all(r.passed for r in chosen)
    verdict = "ok" if ok else "VIOLATION"
    if spec.known_bug and not ok:
        verdict += f" (known: {spec.known_bug})"
    name = spec.name + (" — cells" if cells else "")
    covers = sorted(spec.kinds) or sorted(spec.queries)
    return [name, ", ".join(covers), f"{best.claimed_epsilon:.4g}", f"{best.delta:g}",
            f"{best.epsilon_lower_bound:.4f}", f"{best.epsilon_lower_bound / max(best.claimed_epsilon, 1e-12):.3f}",
            len(chosen), f"{runs:,}", best.label.split(": ", 1)[1], verdict, f"{seconds:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000, help="runs per dataset and pair (release level)")
    parser.add_argument("--query-samples", type=int, default=None,
                        help="cap on the runs of query-level specs (default: each spec's max_samples)")
    parser.add_argument("--broken", action="store_true", help="also audit the deliberately broken mechanisms")
    parser.add_argument("--only", default="", help="only the specs whose name contains this text")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    specs = [s for s in registered_audits() + (broken_specs() if args.broken else []) if args.only in s.name]
    rows = []
    for spec in specs:
        runs = args.samples if spec.max_samples is None else min(
            spec.max_samples, args.query_samples or spec.max_samples, args.samples)
        started = time.perf_counter()
        results = run_audit(spec, samples=runs, seed=args.seed)
        seconds = time.perf_counter() - started
        rows.append(_row(spec, results, runs, seconds, cells=False))
        if spec.ex_post:
            rows.append(_row(spec, results, runs, seconds, cells=True))
        print(f"{spec.name}: {seconds:.1f} s", file=sys.stderr, flush=True)
    print(f"Privacy audit: release-level specs {args.samples:,} runs per dataset and pair, query-level specs as "
          "shown; confidence 1 − 1e-6")
    print(f"machine: {machine_info()}\n")
    print(format_table(["spec", "covers", "claimed ε", "δ", "audited ε ≥", "ratio", "pairs", "runs",
                        "strongest pair", "verdict", "s"], rows, align="lllrrrrrllr"))


if __name__ == "__main__":
    main()
