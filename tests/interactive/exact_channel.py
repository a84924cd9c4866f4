"""Exact privacy loss of a whole target-charging channel on a small neighbouring pair, by enumeration.

A channel runs ``calls`` identical, independent calls whose output laws on the two neighbouring datasets
are ``p`` and ``q`` (finite arrays over the call's outcomes) and halts at the τ-th outcome in the target.
A transcript's probability depends only on how many times each outcome occurs (and, for a halting
transcript, on its last outcome being a hit), so the hockey-stick divergence

    δ(ε) = Σ_transcripts max(0, P(t) − e^ε·Q(t))

is summed over count vectors with their multinomial multiplicities: exactly, in log space. Both
directions are computed and the larger is returned.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln


def channel_delta(p: np.ndarray, q: np.ndarray, hit: np.ndarray, tau: int, calls: int, eps: float) -> float:
    """Exact δ(ε) of a channel of ``calls`` calls with laws ``p``/``q``, halting at ``tau`` outcomes in ``hit``.

    At most two outcomes may be misses (every channel call type in dpframe has one or two).
    """
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    miss = np.flatnonzero(~hit)
    assert 1 <= miss.size <= 2
    log_hit = {0: np.log(p[hit].sum()), 1: np.log(q[hit].sum())}
    log_miss = {0: np.log(p[miss]), 1: np.log(q[miss])}
    worst = 0.0
    for a, b in ((0, 1), (1, 0)):
        total = 0.0
        for misses in range(calls + 1):
            x = np.arange(misses + 1)
            counts = np.array([[misses]]) if miss.size == 1 else np.stack([x, misses - x], axis=1)
            arrange = gammaln(misses + 1) - gammaln(counts + 1).sum(axis=1)      # orders of the misses
            la, lb = (counts * log_miss[a]).sum(axis=1), (counts * log_miss[b]).sum(axis=1)
            cases = []
            if tau + misses <= calls:      # halts at the τ-th hit: τ − 1 hits among the first τ − 1 + misses
                cases.append((tau, gammaln(tau + misses) - gammaln(tau) - gammaln(misses + 1)))
            hits = calls - misses
            if 0 <= hits < tau:            # never halts: all calls made
                cases.append((hits, gammaln(calls + 1) - gammaln(hits + 1) - gammaln(misses + 1)))
            for h, places in cases:
                lp = places + arrange + la + h * log_hit[a]
                lq = places + arrange + lb + h * log_hit[b]
                total += float(np.sum(np.exp(lp) * np.maximum(0.0, -np.expm1(eps + lq - lp))))
        worst = max(worst, total)
    return worst
