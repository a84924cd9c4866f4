"""The boundary wrapper of a private threshold test (Cohen & Lyu 2023, Alg. 4, Lemmas E.1/E.2).

Digest ``000_target_charging.md`` §3.10. The wrapped test of an ε-DP test A ("is q(D) + Z ≥ T?",
Z discrete Laplace of scale Δ/ε) is

    π ← P[A(D) returns its less likely answer]                   (exact, from the data: the *oracle*)
    c ~ Bernoulli(min{1/3, π/(1+π)})
    c = 1: return ⊤ ("boundary");   c = 0: return a FRESH draw of A(D)

so the less likely answer and ⊤ each come out with probability π/(1+π), the likely one with
(1−π)/(1+π). Lemma E.1: the wrapper is t-DP with t ≤ 4ε/3 (the maximum of the five log-ratios
(3)–(7); 1.3223·ε at ε = 0.01, 1.0·ε for ε ≥ 0.5 — oracle O9 in the tests). Lemma E.2: ⊤ is a
q-target with q = (e^t − 1)/(2(e^{ε+t} − 1)); a channel call is therefore charged as a t = 4ε/3 call
with that q ([R10]: the charged ε and the t in q are the same 4ε/3; q → 2/7 as ε → 0). You pay only
for *uncertain* answers: a count far from the threshold on either side is almost never ⊤.

**The oracle is exact.** With r = e^{−ε/Δ} and d = ⌈T/unit⌉ − q(D) (integers), P[Z ≥ d] is
r^d/(1+r) for d ≥ 1 and 1 − r^{1−d}/(1+r) otherwise, so the minority answer has probability
π = r^m/(1+r) with m = max(d, 1 − d) ≥ 1 — always < 1/2 (the 1/3 cap never binds) — and the coin is

    P[c = 1] = π/(1+π) = r^m / (1 + r + r^m),

drawn exactly, with no floating point: repeat {pick i ∈ {0, 1, 2} uniformly; flip a coin of bias
(r^m, 1, r)[i] (exact Bernoulli(e^{−γ}), CKS20, for rational γ = mε/Δ and ε/Δ); on heads return
i = 0}. Each round stops with probability (r^m + 1 + r)/3 ≥ 1/3 and returns 1 with probability
r^m/(r^m + 1 + r). The fresh draw uses new discrete Laplace noise, independent of the coin.

Example:
    >>> from fractions import Fraction
    >>> round(q_boundary(0.1), 6), round(q_boundary(1e-9), 6)    # digest O10; the 2/7 limit
    (0.271365, 0.285714)
    >>> round(boundary_probability(0.5 * math.exp(-2)), 7)      # digest O12
    0.0633789
    >>> minority_steps(value=100, bar=100), minority_steps(value=100, bar=103)
    (1, 3)

"""

from __future__ import annotations

import math
from fractions import Fraction

from dpframe.noise import RandomSource, bernoulli_exp, discrete_laplace

WRAPPER_FACTOR = Fraction(4, 3)
"""Lemma E.1: the wrapped test of an ε-DP test is (4/3)·ε-DP; channel calls are charged t = 4ε/3."""


def q_boundary(eps: float, t: float | None = None) -> float:
    """Lemma E.2: ⊤ is a (e^t − 1)/(2(e^{ε+t} − 1))-target (t = 4ε/3 by default), computed without overflow."""
    t = float(WRAPPER_FACTOR) * eps if t is None else t
    return -math.expm1(-t) * math.exp(-eps) / (-2.0 * math.expm1(-eps - t))


def boundary_probability(pi: float) -> float:
    """Alg. 4's coin: P[⊤] = min(1/3, π/(1+π)) for π the probability of A's less likely outcome(s)."""
    return min(1.0 / 3.0, pi / (1.0 + pi))


def wrapped_law(pi: float) -> tuple[float, float, float]:
    """(P[⊤], P[minority answer], P[majority answer]) of a wrapped test whose minority has probability π."""
    top = boundary_probability(pi)
    return top, (1 - top) * pi, (1 - top) * (1 - pi)


def minority_steps(value: int, bar: int) -> int:
    """The m ≥ 1 with P[minority answer of "value + Z ≥ bar"] = r^m/(1+r) (integer statistic and bar)."""
    d = bar - value
    return max(d, 1 - d)


def boundary_coin(scale: Fraction, m: int, rng: RandomSource) -> bool:
    """An exact Bernoulli(r^m/(1 + r + r^m)) draw, r = e^{−1/scale} (see the module docstring)."""
    inv = 1 / Fraction(scale)
    while True:
        i = int(rng.uniform_below(3, 1)[0])
        if i == 1:
            return False
        if bool(bernoulli_exp(inv * m if i == 0 else inv, 1, rng)[0]):
            return i == 0


def wrapped_test(value: int, bar: int, scale: Fraction, rng: RandomSource) -> str:
    """The wrapped test of ``value + DLap(scale) ≥ bar``: "boundary", or a fresh "above"/"below" (PRIVATE input)."""
    if boundary_coin(scale, minority_steps(value, bar), rng):
        return "boundary"
    return "above" if value + int(discrete_laplace(scale, 1, rng)[0]) >= bar else "below"
