"""Privacy audit report: per registered mechanism, the claimed ε vs the empirical lower bound on ε.

For every spec in ``dpframe.testing.registered_audits()`` (and, with ``--broken``, the deliberately broken
mechanisms) it runs the audit on each adversarial neighbouring pair and prints the strongest pair: the
Clopper–Pearson lower bound on the realised ε (confidence 1 − 10⁻⁶), the claimed (ε, δ), their ratio,
and the verdict. A correct mechanism shows ratio ≤ 1; the closer to 1, the tighter its accounting (and the
stronger the audit). Run from the repository root:

    python bench/audit_report.py [--samples N] [--broken]

Default: 200 000 runs per dataset and pair (about a minute); ``--samples 20000`` is the CI setting.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table  # noqa: E402

from dpframe.testing import broken_specs, registered_audits, run_audit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000, help="runs per dataset and pair")
    parser.add_argument("--broken", action="store_true", help="also audit the deliberately broken mechanisms")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    specs = registered_audits() + (broken_specs() if args.broken else [])
    rows = []
    for spec in specs:
        started = time.perf_counter()
        results = run_audit(spec, samples=args.samples, seed=args.seed)
        best = max(results, key=lambda r: r.epsilon_lower_bound)
        verdict = "ok" if all(r.passed for r in results) else "VIOLATION"
        pair = best.label.split(": ", 1)[1]
        rows.append([spec.name, sorted(spec.kinds), f"{best.claimed_epsilon:.4g}", f"{best.delta:g}",
                     f"{best.epsilon_lower_bound:.4f}", f"{best.epsilon_lower_bound / best.claimed_epsilon:.3f}",
                     len(results), pair, verdict, f"{time.perf_counter() - started:.1f}"])
    print(f"Privacy audit: {args.samples:,} runs per dataset and neighbouring pair, confidence 1 − 1e-6\n")
    print(format_table(["mechanism", "kinds", "claimed ε", "δ", "audited ε ≥", "ratio", "pairs",
                        "strongest pair", "verdict", "s"], rows, align="lllrrrrllr"))


if __name__ == "__main__":
    main()
