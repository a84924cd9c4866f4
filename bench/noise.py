"""Throughput of the exact samplers with the OS CSPRNG source (a script, not a test).

Times ``--draws`` draws (default 1,000,000) of each sampler at a few scales, ``--repeat`` times, and
prints the best and median draws/second, and the best time over the best time of ``os.urandom`` for
as many 64-bit words (the price over raw random bits); the core count heads the report. Run from the repository root:

    PYTHONPATH=. python bench/noise.py [--draws N] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np

from dpframe.noise import SystemRandomSource, bernoulli_exp, discrete_gaussian, discrete_laplace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info  # noqa: E402  (bench/ is not a package)

CASES: list[tuple[str, Callable[[int, SystemRandomSource], np.ndarray]]] = [
    ("discrete_laplace  scale=1", lambda n, rng: discrete_laplace(Fraction(1), n, rng)),
    ("discrete_laplace  scale=10", lambda n, rng: discrete_laplace(Fraction(10), n, rng)),
    ("discrete_laplace  scale=1e6", lambda n, rng: discrete_laplace(Fraction(10**6), n, rng)),
    ("discrete_laplace  scale=1/3", lambda n, rng: discrete_laplace(Fraction(1, 3), n, rng)),
    ("discrete_laplace  scale=7/2", lambda n, rng: discrete_laplace(Fraction(7, 2), n, rng)),
    ("discrete_laplace  scale=0.1 (float, 2^-55 den.)", lambda n, rng: discrete_laplace(0.1, n, rng)),
    ("discrete_gaussian sigma2=1", lambda n, rng: discrete_gaussian(Fraction(1), n, rng)),
    ("discrete_gaussian sigma2=100", lambda n, rng: discrete_gaussian(Fraction(100), n, rng)),
    ("discrete_gaussian sigma2=1e12", lambda n, rng: discrete_gaussian(Fraction(10**12), n, rng)),
    ("discrete_gaussian sigma2=9/2", lambda n, rng: discrete_gaussian(Fraction(9, 2), n, rng)),
    ("discrete_gaussian sigma2=0.3 (float, 128-bit)", lambda n, rng: discrete_gaussian(0.3, n, rng)),
    ("discrete_gaussian sigma2=(1e40+1)/1e39 (py ints)",
     lambda n, rng: discrete_gaussian(Fraction(10**40 + 1, 10**39), n, rng)),
    ("bernoulli_exp     gamma=1/3", lambda n, rng: bernoulli_exp(Fraction(1, 3), n, rng)),
    ("bernoulli_exp     gamma=1", lambda n, rng: bernoulli_exp(Fraction(1), n, rng)),
]


def _time(fn: Callable[[], object], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, rng = args.draws, SystemRandomSource()

    base = _time(lambda: os.urandom(8 * n), args.repeat)
    print(f"machine: {machine_info()}")
    print(f"os.urandom baseline: {n:,} 64-bit words in {min(base):.3f} s "
          f"({8 * n / min(base) / 1e6:,.0f} MB/s)")
    print(f"{'sampler':50s} {'best s':>8s} {'median s':>9s} {'best draws/s':>14s} {'× urandom':>10s}")
    for name, sample in CASES:
        sample(1000, rng)  # warm up
        times = _time(lambda sample=sample: sample(n, rng), args.repeat)  # type: ignore[misc]
        best = min(times)
        print(f"{name:50s} {best:8.3f} {statistics.median(times):9.3f} {n / best:14,.0f} {best / min(base):9.1f}×")


if __name__ == "__main__":
    main()
