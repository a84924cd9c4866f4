"""Accounting benchmark: compose 1,000 and 10,000 heterogeneous mechanisms, report ε at δ = 1e-6 and time.

Workload (a third each, two parameter values per kind): Gaussian σ ∈ {150, 250}; Laplace b ∈ {800, 1200}
(sensitivity 1); Poisson-subsampled Gaussian γ = 0.01, σ ∈ {1.0, 1.5}. dpframe's basic, zCDP (cannot
express subsampling: n/a), RDP and PLD accountants; peers (in a throwaway venv, never dependencies):
dp_accounting, run with
``PEERS_PYTHON`` (default ``/tmp/peers-acc/bin/python``). Time is wall time from construction to the
ε query (median of 3), also shown as a ratio to dp_accounting's PLD.

Run: ``python bench/accounting.py [--quick]`` (``--quick``: 1,000 only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import format_table, machine_info, median  # noqa: E402

DELTA = 1e-6
KINDS = [("gaussian", 150.0, 1.0), ("gaussian", 250.0, 1.0), ("laplace", 800.0, 1.0), ("laplace", 1200.0, 1.0),
         ("sampled_gaussian", 1.0, 0.01), ("sampled_gaussian", 1.5, 0.01)]


def workload(n: int) -> list[tuple[str, float, float, int]]:
    """(kind, parameter, rate, count) with counts summing to n."""
    base, extra = divmod(n, len(KINDS))
    return [(k, p, r, base + (1 if i < extra else 0)) for i, (k, p, r) in enumerate(KINDS)]


def dpframe_run(name: str, n: int) -> float | None:
    from dpframe import accounting as acc

    a = {"basic": acc.BasicAccountant, "zcdp": acc.ZCDPAccountant, "rdp": acc.RDPAccountant,
         "pld": acc.PLDAccountant}[name]()
    for kind, p, rate, count in workload(n):
        curve = acc.laplace(scale=p) if kind == "laplace" else acc.gaussian(sigma=p)
        if kind == "sampled_gaussian":
            curve = curve.subsampled(rate=rate)
        if not a.supports(curve):
            return None
        a.compose(curve, times=count)
    return a.epsilon(delta=DELTA)


PEER_CODE = r"""
import json, sys, time
n, which = int(sys.argv[1]), sys.argv[2]
work = json.loads(sys.argv[3])
t = time.perf_counter()
if which.startswith("dp_accounting"):
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant
    a = (pld_privacy_accountant.PLDAccountant() if which.endswith("pld") else rdp_privacy_accountant.RdpAccountant())
    for kind, p, rate, count in work:
        if kind == "laplace":
            ev = dp_accounting.LaplaceDpEvent(p)
        elif kind == "gaussian":
            ev = dp_accounting.GaussianDpEvent(p)
        else:
            ev = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(p))
        a.compose(ev, count)
    eps = a.get_epsilon(1e-6)
else:
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import (GaussianMechanism, LaplaceMechanism,
                                                           PoissonSubsampledGaussianMechanism)
    prvs, counts = [], []
    for kind, p, rate, count in work:
        prvs.append(LaplaceMechanism(mu=1 / p) if kind == "laplace" else GaussianMechanism(noise_multiplier=p)
                    if kind == "gaussian" else PoissonSubsampledGaussianMechanism(sampling_probability=rate,
                                                                                   noise_multiplier=p))
        counts.append(count)
    acc = PRVAccountant(prvs=prvs, max_self_compositions=counts, eps_error=0.01, delta_error=1e-10)
    low, est, up = acc.compute_epsilon(delta=1e-6, num_self_compositions=counts)
    eps = up
print(json.dumps({"eps": eps, "seconds": time.perf_counter() - t}))
"""


def peer_run(which: str, n: int, python: str) -> tuple[float | None, float | None, str]:
    work = json.dumps(workload(n))
    try:
        out = subprocess.run([python, "-c", PEER_CODE, str(n), which, work], capture_output=True, text=True,
                             timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, None, type(e).__name__
    if out.returncode != 0:
        return None, None, out.stderr.strip().splitlines()[-1][:80] if out.stderr.strip() else "failed"
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return d["eps"], d["seconds"], ""


def main() -> None:
    sizes = [1000] if "--quick" in sys.argv else [1000, 10000]
    python = os.environ.get("PEERS_PYTHON", "/tmp/peers-acc/bin/python")
    have_peers = Path(python).exists()
    for n in sizes:
        rows: list[tuple[str, float | None, float | None, str]] = []
        for name in ("basic", "zcdp", "rdp", "pld"):
            times, eps = [], None
            for _ in range(3):
                t = time.perf_counter()
                eps = dpframe_run(name, n)
                times.append(time.perf_counter() - t)
            rows.append((f"dpframe {name}", eps, median(times) if eps is not None else None,
                         "" if eps is not None else "cannot express subsampling"))
        if have_peers:
            for which in ("dp_accounting rdp", "dp_accounting pld", "prv_accountant"):
                runs = [peer_run(which.replace(" ", "_"), n, python) for _ in range(3)]
                ok = [r for r in runs if r[0] is not None]
                if ok:
                    rows.append((which, ok[0][0], median([r[1] for r in ok if r[1] is not None]), ""))
                else:
                    rows.append((which, None, None, runs[0][2]))
        ref = next((t for name, _, t, _ in rows if name == "dp_accounting pld" and t), None)
        tight = min((e for name, e, _, _ in rows if e is not None and not name.startswith("dpframe")), default=None)
        table = []
        for name, eps, secs, note in rows:
            table.append([
                name, "n/a" if eps is None else f"{eps:.5f}",
                "" if eps is None or tight is None else f"{(eps / tight - 1) * 100:+.2f}%",
                "" if secs is None else f"{secs:.3f}",
                "" if secs is None or ref is None else f"{secs / ref:.3f}", note])
        print(f"\n### {n:,} heterogeneous mechanisms, ε at δ = {DELTA:g} ({machine_info()})\n")
        print(format_table(["accountant", "ε", "vs tightest peer", "seconds", "time / dp_accounting PLD", "note"],
                           table))
        if not have_peers:
            print(f"(peers skipped: {python} not found; create it with python -m venv /tmp/peers-acc && "
                  "/tmp/peers-acc/bin/pip install dp-accounting prv-accountant)")


if __name__ == "__main__":
    main()
