"""Interior-point algorithms on an ordered integer domain ``{0, ..., size − 1}``.

An *interior point* of a multiset D of codes is any z with ``min D ≤ z ≤ max D``. Three algorithms,
each with its privacy argument, its cost and its minimum row count (digest
``research/003_thresholds_rsc.md``; section numbers below refer to it):

* :class:`Exponential` — the exponential mechanism with the interior-point score
  ``f(z) = min(#{x ≤ z}, #{x ≥ z})`` (§2, §8), pure ε-DP, ``n ≥ ⌈(4Δ/ε)·ln(size/β)⌉``.
* :class:`BinarySearch` — bisection with discrete-Laplace noise on ``#{x ≤ mid} − #{x > mid}`` (§8),
  pure ε-DP, ``n ≥ ⌈(bΔ'/ε)·ln(b/β)⌉`` with ``b = ⌈log₂ size⌉``.
* :class:`TreeLog` — the paper's recursive algorithm (§4.3) with the explicit basic-composition
  accounting of §4.5, (ε, δ)-DP, ``n ≥ 10·max(1, L)·t`` (§4.6). Needs 10⁵–10⁶ rows at ε ≈ 1. Experimental
  (``experimental = True``: its privacy proof is not closed; ``method="auto"`` skips such methods).

Algorithms are plugins: the learning plugin registers these three through the
``dpframe_methods`` hook (``family="interior_point"``), and a third-party package can add its own the same way
(:func:`algorithms` collects them; ``docs/plugins.md``). Besides the :class:`InteriorPointAlgorithm`
protocol an algorithm may define ``zcdp_epsilon(rho, size)`` (the ε it can run at for a zCDP ρ;
default: pure ε-DP ⇒ ε²/2-zCDP) and ``curves(epsilon, size, stability)`` (its privacy curves for RDP/PLD
sessions; default: charged from its cost) — see :func:`zcdp_epsilon` and :func:`privacy_curves`.

``Δ`` is the *stability* of the input: how much one privacy unit can change the counts the algorithm
reads. A privacy unit with ``max_rows = m`` rows changes every count ``#{x ≤ z}`` by at most m (add/remove
neighbours). When the input is a deterministic slice of a larger table (threshold learning,
rectangles), neighbouring slices differ by up to m *swaps*: counts of the form ``#{x ≤ z}`` still move by
at most m, differences ``#{x ≤ z} − #{x > z}`` by up to 2m. :class:`Stability` carries both.

Example:
    >>> from fractions import Fraction
    >>> import numpy as np
    >>> from dpframe.noise import SeededRandomSource
    >>> em = Exponential()
    >>> em.min_rows(Fraction(1), Fraction(0), 1e-6, 2**64, Stability(1))
    233
    >>> x = np.array([10, 11, 12, 13] * 60, dtype=np.int64)
    >>> 10 <= em.run(np.sort(x), 2**40, Fraction(1), Fraction(0), 1e-6, Stability(1), SeededRandomSource(1)) <= 13
    True

"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpframe import accounting as acc
from dpframe.budgets import ApproxDP, Budget, PureDP, down, exact_log, up
from dpframe.errors import PluginError
from dpframe.mechanism import SortedCodes
from dpframe.noise import MAX_LAPLACE_SCALE, RandomSource, bernoulli_exp_ratio, discrete_laplace, exponential_index
from dpframe.noise.exponential import epsilon_from_rho

Codes = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Stability:
    """How far apart the algorithm's inputs on neighbouring datasets can be.

    ``rows``: the number of rows one privacy unit owns (``max_rows``). ``swap``: the input is a
    deterministic slice, so neighbours differ by up to ``rows`` swaps rather than ``rows`` additions.
    """

    rows: int = 1
    swap: bool = False

    @property
    def count(self) -> int:
        """Largest change of a count ``#{x ≤ z}`` (or of the interior-point score)."""
        return self.rows

    @property
    def difference(self) -> int:
        """Largest change of ``#{x ≤ z} − #{x > z}``."""
        return 2 * self.rows if self.swap else self.rows


def within_sampler(scale: Fraction) -> bool:
    """Whether discrete Laplace noise of this scale can be drawn (:data:`~dpframe.noise.MAX_LAPLACE_SCALE`).

    Example:
        >>> within_sampler(Fraction(10**6)), within_sampler(Fraction(10**30))
        (True, False)

    """
    return scale <= MAX_LAPLACE_SCALE


def _ceil(x: float | Fraction) -> int:
    """⌈x⌉ with a relative margin far above float error (row minimums must never be understated).

    A Fraction stays exact (a factor 1/ε of a tiny ε does not overflow a float).
    """
    return math.ceil(x * (1 + Fraction(1, 10**12))) if isinstance(x, Fraction) else math.ceil(x * (1 + 1e-12))


def levels(size: int) -> int:
    """TreeLog's number of slicing levels: ``L(N) = 0 if N ≤ 8 else 1 + L(⌈log₂ N⌉)`` (§4.7).

    Example:
        >>> [levels(2**8), levels(2**9), levels(2**63)]
        [1, 2, 2]

    """
    return 0 if size <= 8 else 1 + levels(max(1, (size - 1).bit_length()))


@runtime_checkable
class InteriorPointAlgorithm(Protocol):
    """What the planner needs from an interior-point algorithm (register instances through ``dpframe_methods``)."""

    name: str
    approximate: bool     # needs δ > 0

    def min_rows(self, epsilon: Fraction, delta: Fraction, beta: float, size: int,
                 stability: Stability) -> int | None:
        """Rows needed so the output is interior with probability ≥ 1 − β (None: impossible)."""
        ...

    def cost(self, epsilon: Fraction, delta: Fraction) -> Budget:
        """The privacy cost of one run calibrated to (ε, δ)."""
        ...

    def run(self, codes: Codes, size: int, epsilon: Fraction, delta: Fraction, beta: float,
            stability: Stability, rng: RandomSource) -> int:
        """One private interior point of the sorted ``codes`` (a code in ``[0, size)``)."""
        ...


def score_blocks(codes: Codes, size: int) -> tuple[Codes, Codes, Codes]:
    """The interior-point score as constant blocks: (starts, lengths, scores) covering ``[0, size)``.

    ``codes`` is sorted. Blocks alternate: the gap below the smallest value, then for every distinct
    value v_j the point v_j (score ``min(P_j, n − P_{j−1})``) and the gap after it (score
    ``min(P_j, n − P_j)``), where P_j counts the values ≤ v_j. Empty gaps have length 0.

    Example:
        >>> import numpy as np
        >>> [b.tolist() for b in score_blocks(np.array([2, 2, 5], dtype=np.int64), 8)]
        [[0, 2, 3, 5, 6], [2, 1, 2, 1, 2], [0, 2, 1, 1, 0]]

    """
    n = int(codes.size)
    vals, counts = np.unique(codes, return_counts=True)
    k = vals.size
    cum = np.cumsum(counts)
    before = cum - counts
    starts = np.empty(2 * k + 1, dtype=np.int64)
    lengths = np.empty(2 * k + 1, dtype=np.int64)
    scores = np.empty(2 * k + 1, dtype=np.int64)
    starts[0], scores[0] = 0, 0
    lengths[0] = vals[0] if k else size
    nxt = np.append(vals[1:], size).astype(np.int64)
    starts[1::2], lengths[1::2], scores[1::2] = vals, 1, np.minimum(cum, n - before)
    starts[2::2], lengths[2::2], scores[2::2] = vals + 1, nxt - vals - 1, np.minimum(cum, n - cum)
    return starts, lengths, scores


ENVELOPE_NATS = 12
"""Listing slack: the two envelopes are proposed with probability ≤ e⁻¹² (speed only, not privacy)."""


def listing_ranks(size: int, scale: Fraction) -> int:
    """R: the exponential interior point lists the codes within R ranks of the median, (ln size + 12)/scale + 1.

    The score moves by 1 per rank away from its peak (≥ ⌈n/2⌉), so everything further than R ranks
    scores ≥ (ln size + 12)/scale below it and, weighted by at most ``size`` points, is proposed with
    probability ≤ e⁻¹². Public (from the domain and the budget); any R gives the same distribution.

    Example:
        >>> listing_ranks(2**40, Fraction(1, 2))
        82

    """
    return math.ceil(Fraction(math.ceil((size.bit_length() * 0.6932 + ENVELOPE_NATS) * 1024), 1024) / scale) + 1


def exponential_interior_point(codes: Codes | SortedCodes, size: int, scale: Fraction, rng: RandomSource,
                               ranks: int | None = None) -> int:
    """Draw z ∈ [0, size) with probability ∝ exp(scale·f(z)), f the interior-point score; reads O(R) ranks.

    ``codes``: the sorted codes (an array, or one group of :class:`~dpframe.mechanism.SortedCodes`,
    possibly partial — read only near the median, completed if a read needs more). A rejection
    sampler, exact:

    * the *core* — every point and gap between the codes of ranks ⌊n/2⌋ ∓ R (``ranks``, default
      :func:`listing_ranks`) and the gap after the last of them — is listed as blocks (those of
      :func:`score_blocks`, with global counts), each with its exact score;
    * below the core, the *left envelope* [0, v_first) has the bound L(v_first) ≥ #{x ≤ z} ≥ f(z); above
      it, the *right envelope* [next, size) has n − C(v_last) ≥ #{x ≥ z} ≥ f(z).

    One exact EM draw over the blocks and envelopes (:func:`~dpframe.noise.exponential_index`, lengths
    as multiplicities), a uniform z inside; an envelope's z is kept with probability
    exp(−scale·(bound − f(z))) (an exact Bernoulli), else everything is drawn again. Every z is thus
    proposed with weight exp(scale·f(z)) — exactly in the core, bound times acceptance outside — so
    the output has exactly the exponential mechanism's distribution (:class:`Exponential`).
    """
    sc = codes if isinstance(codes, SortedCodes) else SortedCodes.of([np.asarray(codes, dtype=np.int64)])
    n = int(sc.total)
    zero = np.zeros(1, dtype=np.int64)
    reach = listing_ranks(size, scale) if ranks is None else ranks
    while True:
        if n == 0:
            return int(rng.uniform_below(size, 1)[0])          # every score is 0: uniform
        r0, r1 = max(0, n // 2 - reach), min(n - 1, n // 2 + reach)
        vals = np.unique(np.minimum(sc.at(np.arange(r0, r1 + 1, dtype=np.int64)), size - 1))
        ends = np.full(vals.size, n, dtype=np.int64)
        low = sc.count(np.zeros(vals.size, dtype=np.int64), ends, vals, strict=True)       # L(v) = #{x < v}
        high = sc.count(np.zeros(vals.size, dtype=np.int64), ends, vals, strict=False)     # C(v) = #{x ≤ v}
        last_c = int(high[-1])
        nxt = min(int(sc.at(np.array([last_c]))[0]), size) if last_c < n else size       # first code above the core
        gaps = np.append(vals[1:], nxt) - vals - 1
        k = vals.size
        starts = np.concatenate([zero, np.ravel(np.column_stack([vals, vals + 1])), [nxt]])
        lengths = np.concatenate([[vals[0]], np.ravel(np.column_stack([np.ones(k, dtype=np.int64), gaps])),
                                  [size - nxt]])
        scores = np.concatenate([low[:1], np.ravel(np.column_stack([np.minimum(high, n - low),
                                                                   np.minimum(high, n - high)])), [n - last_c]])
        i = exponential_index(scores, scale, rng, multiplicities=lengths)
        z = int(starts[i]) + int(rng.uniform_below(int(lengths[i]), 1)[0])
        if 0 < i < scores.size - 1:
            return z
        at = np.array([z], dtype=np.int64)
        f = min(int(sc.count(zero, np.array([n]), at, strict=False)[0]),
                n - int(sc.count(zero, np.array([n]), at, strict=True)[0]))
        gap = (int(scores[i]) - f) * scale
        if bool(bernoulli_exp_ratio(np.array([gap.numerator], dtype=object), gap.denominator, rng)[0]):
            return z


class Exponential:
    """The exponential mechanism over the whole domain with the interior-point score (§2, §8).

    Privacy: f(z) = min(#{x ≤ z}, #{x ≥ z}) changes by at most Δ = ``stability.count`` between
    neighbours (both counts move by ≤ Δ, and so does their minimum), so sampling ∝ exp(ε·f/(2Δ)) is
    ε-DP (McSherry–Talwar). Utility: the maximum of f is ≥ ⌈n/2⌉ and f = 0 exactly off [min, max], so
    P[fail] ≤ size·e^{−εn/(4Δ)} ≤ β once ``n ≥ (4Δ/ε)·ln(size/β)``. The bound is tight: on two adjacent
    values (n/2 each) P[fail] = (size − 2)/((size − 2) + 2·e^{εn/(4Δ)}) (§10 T4).
    """

    name = "exponential"
    approximate = False
    summary: ClassVar[str] = "exponential mechanism, interior-point score (pure DP)"
    reads_sorted_codes: ClassVar[bool] = True
    """``run`` also takes :class:`~dpframe.mechanism.SortedCodes` and reads them near the median only (the
    query then asks the backend for the ranks within :func:`listing_ranks` of it, not a full sort)."""

    @staticmethod
    def scale(epsilon: Fraction, stability: Stability) -> Fraction:
        return epsilon / (2 * stability.count)

    def min_rows(self, epsilon: Fraction, delta: Fraction, beta: float, size: int,
                 stability: Stability) -> int | None:
        return max(1, _ceil(4 * stability.count / epsilon * Fraction(math.log(size / beta))))

    def cost(self, epsilon: Fraction, delta: Fraction) -> Budget:
        return PureDP(epsilon)

    def zcdp_epsilon(self, rho: Fraction, size: int) -> Fraction:
        """√(8ρ): the exponential mechanism is ε-bounded-range, hence ε²/8-zCDP (Cesar & Rogers 2021)."""
        return epsilon_from_rho(rho, bounded_range=True)

    def curves(self, epsilon: Fraction, size: int, stability: Stability) -> list[acc.PrivacyCurve]:
        """One ε-bounded-range curve (its score moves by ≤ Δ, sampled at ε/(2Δ): the log-ratio spans ≤ ε)."""
        return [acc.exponential(up(epsilon))]

    def run(self, codes: Codes | SortedCodes, size: int, epsilon: Fraction, delta: Fraction, beta: float,
            stability: Stability, rng: RandomSource) -> int:
        return exponential_interior_point(codes, size, self.scale(epsilon, stability), rng)


class BinarySearch:
    """Noisy bisection: b = ⌈log₂ size⌉ rounds, each comparing ``#{x ≤ mid} − #{x > mid}`` with 0 (§8).

    Privacy: each round's statistic changes by ≤ Δ' = ``stability.difference``; discrete Laplace noise
    of scale b·Δ'/ε makes each round ε/b-DP, and b adaptive rounds compose to ε (basic composition).
    Utility: going left needs a non-negative noisy difference, impossible below min D unless the
    noise is ≥ n; going right needs a negative one, impossible at or above max D unless the noise is
    ≤ −n. So the bisection stays in [min D, max D] unless some round's noise reaches n in the wrong
    direction: P[fail] ≤ b·e^{−nε/(bΔ')} ≤ β once ``n ≥ (bΔ'/ε)·ln(b/β)``.
    """

    name = "binary_search"
    approximate = False
    summary: ClassVar[str] = "noisy binary search over the domain (pure DP)"

    def min_rows(self, epsilon: Fraction, delta: Fraction, beta: float, size: int,
                 stability: Stability) -> int | None:
        b = max(1, (size - 1).bit_length())
        if not within_sampler(Fraction(b * stability.difference) / epsilon):   # its rounds' noise
            return None
        return max(1, _ceil(b * stability.difference / epsilon * Fraction(math.log(max(b / beta, 1.0)))))

    def cost(self, epsilon: Fraction, delta: Fraction) -> Budget:
        return PureDP(epsilon)

    @staticmethod
    def rounds(size: int) -> int:
        """The number of rounds, b = ⌈log₂ size⌉ (at least 1)."""
        return max(1, (size - 1).bit_length())

    def zcdp_epsilon(self, rho: Fraction, size: int) -> Fraction:
        """√(2bρ): b rounds, each pure ε/b-DP and so (ε/b)²/2-zCDP, add up to ε²/(2b)."""
        b = self.rounds(size)
        return epsilon_from_rho(rho / b, bounded_range=False) * b

    def curves(self, epsilon: Fraction, size: int, stability: Stability) -> list[acc.PrivacyCurve]:
        """One discrete-Laplace release of scale b·Δ'/ε per round, on a statistic of sensitivity Δ'."""
        b = self.rounds(size)
        return [acc.discrete_laplace(down(b * stability.difference / epsilon), stability.difference)] * b

    def run(self, codes: Codes, size: int, epsilon: Fraction, delta: Fraction, beta: float,
            stability: Stability, rng: RandomSource) -> int:
        b = (size - 1).bit_length()
        if b == 0:
            return 0
        noise = discrete_laplace(Fraction(b * stability.difference) / epsilon, b, rng)
        n = int(codes.size)
        lo, hi, step = 0, size - 1, 0
        while lo < hi:
            mid = (lo + hi) // 2
            below = int(np.searchsorted(codes, mid, side="right"))
            if 2 * below - n + int(noise[step]) >= 0:
                hi = mid
            else:
                lo = mid + 1
            step += 1
        return lo


@dataclass(frozen=True)
class TreeLogParameters:
    """TreeLog's internal parameters for a run calibrated to (ε, δ) (§4.5, §4.6).

    ε₀ = ε/(9 + 4L); δ₀ = min(δ, β)/(L·(2 + e^{ε₀}) + 1); t = ⌈100·ln(1/δ₀)/ε₀⌉. Swap-stable inputs run
    at (ε/2, δ/(1 + e^{ε/2})) so that group privacy over the two add/remove steps of a swap gives (ε, δ).
    """

    levels: int
    epsilon0: Fraction
    log_inv_delta0: float      # ln(1/δ₀), rounded up: δ₀ itself may be below the float range
    t: int

    @classmethod
    def of(cls, epsilon: Fraction, delta: Fraction, beta: float, size: int, stability: Stability) -> TreeLogParameters:
        # In logs, from the exact δ: float(δ) is 0 below 5e-324 and imprecise below 2.2e-308. ln(1/δ₀) is an upper
        # bound: ε up in the exponentials, the float rounding inside the 10⁻¹² margin; t and the threshold divide
        # it by the exact ε₀ (:func:`_ceil` of a Fraction)
        eps, log_inv = epsilon, -exact_log(delta)
        if stability.swap:
            eps, log_inv = eps / 2, log_inv + float(np.logaddexp(0.0, up(eps / 2)))     # ln(1 + e^{ε/2})
        L = levels(size)
        eps0 = eps / (9 + 4 * L)
        # ln(L(2 + e^{ε₀}) + 1) = ln(e^{ln(2L + 1)} + e^{ln L + ε₀}) (e^{ε₀} overflows past ε₀ = 709)
        log_sum = float(np.logaddexp(math.log(2 * L + 1), math.log(L) + up(eps0))) if L else 0.0
        log_inv0 = (max(log_inv, -math.log(beta)) + log_sum) * (1 + 1e-12)
        return cls(L, eps0, log_inv0, _ceil(100 * Fraction(log_inv0) / eps0))

    @property
    def delta0(self) -> float:
        """δ₀ (0.0 where it is below the float range; the thresholds use :attr:`log_inv_delta0`)."""
        return math.exp(-self.log_inv_delta0)

    @property
    def threshold(self) -> int:
        """The stability-histogram threshold 1 + ⌈ln(1/δ₀)/ε₀⌉ (a new bin passes w.p. ≤ δ₀)."""
        return 1 + _ceil(Fraction(self.log_inv_delta0) / self.epsilon0)


class TreeLog:
    """TreeLog (Cohen, Lyu, Nelson, Sarlós, Stemmer 2022, Algorithm 5) with explicit constants (§4.3–4.6).

    Each level slices off the t smallest and the t largest points (``D_border``), asks one shared
    AboveThreshold instance whether the rest is unbalanced (Γ ≥ 3t/4, then OneHeavyRound returns an
    interior point directly), otherwise labels the rest by the level where it leaves the heavy path
    (E_embed), slices off the 2t deepest points (``S_d``), recurses on the labels over a domain of size
    ⌈log₂ N⌉, picks the tree vertex at the returned depth with a stability histogram on S_d, and chooses
    among its three named leaves with the exponential mechanism on D_border. Domains of ≤ 8 values use
    the exponential mechanism directly.

    **Experimental**: ``method="auto"`` never picks it and ``explain()`` says so. What is proven (the
    sensitivity of Γ and the relabelling lemma: ``docs/learning.md``) and what is not (the composition of
    the shared AboveThreshold and OneHeavyRound across recursion levels with their failure events) is
    written there; until the rest is, the charge keeps the paper's 4ε₀ per AboveThreshold instance.

    Privacy (§4.5, reconstructed from the paper — see the digest's §12 for what awaits proof review):
    slices have deterministic sizes, so neighbouring remainders stay add/remove-adjacent and each slice
    differs by at most one swap (domino argument, §3.5). Basic composition over AboveThreshold (4ε₀),
    OneHeavyRound (4ε₀, δ₀), per level the EM on D_border (2ε₀: two swaps move its score by ≤ 2) and the
    stability histogram on S_d (one swap = two add/remove steps: 2ε₀, (1 + e^{ε₀})δ₀), and the base EM
    (ε₀) gives ε = (9 + 4L)·ε₀ and δ = (L·(2 + e^{ε₀}) + 1)·δ₀ (the last Lδ₀ bounds AboveThreshold
    missing Γ ≥ t, which E_embed's adjacency needs). Utility (Theorem 3.7): with n ≥ 10·max(1, L)·t
    the output is interior with probability ≥ 1 − O(L·δ₀).

    Why basic composition and not Reorder-Slice-Compute: RSC charges (3w·ε₀, δ) with w ≈ 21–45 at
    δ = 1e-6 (§3.5–3.6), which beats basic composition only beyond about 3w slice computations; TreeLog
    has at most 3L + 1 ≤ 10 of them (L ≤ 2 for any domain up to 2²⁵⁶, §4.7), so RSC would cost more.
    """

    name = "treelog"
    approximate = True
    experimental = True
    summary: ClassVar[str] = ("EXPERIMENTAL — its privacy proof is not closed (docs/learning.md, TreeLog); TreeLog "
                              "with deterministic slices, basic-composition accounting ((ε, δ)-DP)")

    def min_rows(self, epsilon: Fraction, delta: Fraction, beta: float, size: int,
                 stability: Stability) -> int | None:
        if delta <= 0 or stability.rows != 1:
            return None
        p = TreeLogParameters.of(epsilon, delta, beta, size, stability)
        if not within_sampler(1 / p.epsilon0):   # its AboveThreshold and histogram noise
            return None
        return 10 * max(1, p.levels) * p.t

    def cost(self, epsilon: Fraction, delta: Fraction) -> Budget:
        return ApproxDP(epsilon, delta)

    def run(self, codes: Codes, size: int, epsilon: Fraction, delta: Fraction, beta: float,
            stability: Stability, rng: RandomSource) -> int:
        p = TreeLogParameters.of(epsilon, delta, beta, size, stability)
        return _TreeLogRun(p, rng).solve(codes, size)


class _TreeLogRun:
    """One TreeLog execution: the shared AboveThreshold threshold noise ρ and the random source."""

    def __init__(self, p: TreeLogParameters, rng: RandomSource) -> None:
        self.p, self.rng = p, rng
        self.noise_scale = 1 / p.epsilon0
        self.rho = self._laplace()                       # ONE AboveThreshold instance for all levels

    def _laplace(self) -> int:
        return int(discrete_laplace(self.noise_scale, 1, self.rng)[0])

    def solve(self, x: Codes, size: int) -> int:
        t = self.p.t
        if size <= 8:
            return exponential_interior_point(x, size, self.p.epsilon0 / 2, self.rng)
        bits = (size - 1).bit_length()
        left, x = x[:t], x[t:]                                          # t smallest
        right, rest = (x[max(0, x.size - t):], x[:max(0, x.size - t)])  # t largest
        border = np.concatenate([left, right])
        gamma, leaf = _heavy_path(rest, bits)
        if 4 * (gamma + self._laplace()) >= 3 * t + 4 * self.rho:      # Γ + ν ≥ 3t/4 + ρ
            return min(self._one_heavy_round(rest, bits), size - 1)
        labels = _labels(rest, leaf, bits)                             # 1..bits
        order = np.lexsort((-rest, -labels))                           # deepest labels first (then x desc)
        deep, remaining = order[:2 * t], order[2 * t:]
        q = self.solve(np.sort(labels[remaining] - 1), bits) + 1       # a depth in 1..bits
        prefix, depth = self._choose(np.sort(rest[deep]), bits, q)
        width = bits - depth
        first = prefix << width
        candidates = np.array([first, first + (1 << width) - 1, first + (1 << (width - 1)) - 1], dtype=np.int64)
        candidates = np.minimum(candidates, size - 1)
        below = np.searchsorted(border, candidates, side="right")
        above = border.size - np.searchsorted(border, candidates, side="left")
        i = exponential_index(np.minimum(below, above), self.p.epsilon0 / 2, self.rng)
        return int(candidates[i])

    def _choose(self, deep: Codes, bits: int, q: int) -> tuple[int, int]:
        """Stability histogram over the vertices at depth q (prefixes of q − 1 bits) of the S_d points.

        Noisy counts (discrete Laplace, scale 1/ε₀) of the occupied vertices; the noisy argmax among
        those above :attr:`TreeLogParameters.threshold` is released, else the root (a failed run).
        """
        depth = q - 1
        if deep.size == 0 or depth == 0:
            return 0, 0
        vertices, counts = np.unique(deep >> (bits - depth), return_counts=True)
        noisy = counts + discrete_laplace(self.noise_scale, counts.size, self.rng)
        best = int(np.argmax(noisy))
        if noisy[best] < self.p.threshold:
            return 0, 0
        return int(vertices[best]), depth

    def _one_heavy_round(self, x: Codes, bits: int) -> int:
        """Algorithm 7: walk the heavy path; stop at the first vertex whose lighter child is heavy."""
        t, rho = self.p.t, self._laplace()
        lo, width = 0, bits
        while width > 0:
            half = 1 << (width - 1)
            a, m, b = np.searchsorted(x, [lo, lo + half, lo + 2 * half], side="left")
            w_left, w_right = int(m - a), int(b - m)
            w_min = min(w_left, w_right)
            if 10 * w_min > t and 4 * (w_min + self._laplace()) >= t + 4 * rho:
                return lo + half - 1
            lo, width = (lo if w_left >= w_right else lo + half), width - 1
        return lo


def _heavy_path(x: Codes, bits: int) -> tuple[int, int]:
    """(Γ, P): the largest lighter-child weight along the heavy path (ties left) and the leaf it reaches."""
    lo, gamma = 0, 0
    for width in range(bits, 0, -1):
        half = 1 << (width - 1)
        a, m, b = np.searchsorted(x, [lo, lo + half, lo + 2 * half], side="left")
        w_left, w_right = int(m - a), int(b - m)
        gamma = max(gamma, min(w_left, w_right))
        lo = lo if w_left >= w_right else lo + half
    return gamma, lo


def _labels(x: Codes, leaf: int, bits: int) -> Codes:
    """E_embed labels: the depth (root = 1) where x leaves the heavy path; points on the leaf get ``bits``."""
    diff = np.bitwise_xor(x, np.int64(leaf))
    length = np.zeros(x.size, dtype=np.int64)
    nz = diff > 0
    length[nz] = np.floor(np.log2(diff[nz].astype(np.float64))).astype(np.int64) + 1
    # float log2 can be off by one just below a power of two: correct it exactly
    too_big = nz & (np.right_shift(diff, np.maximum(length - 1, 0)) == 0)
    length[too_big] -= 1
    too_small = nz & (np.right_shift(diff, length) > 0)
    length[too_small] += 1
    return np.minimum(bits, bits - length + 1)


FAMILY = "interior_point"
"""The query family interior-point algorithms are registered for (``dpframe_methods``)."""

BUILTIN: tuple[InteriorPointAlgorithm, ...] = (Exponential(), BinarySearch(), TreeLog())
"""The learning plugin's own algorithms (registered through its ``dpframe_methods`` hook)."""

ALGORITHMS: Mapping[str, InteriorPointAlgorithm] = MappingProxyType({a.name: a for a in BUILTIN})
"""The built-in algorithms by name (:func:`algorithms` adds the ones other plugins register)."""


def algorithms(host: Any = None) -> dict[str, InteriorPointAlgorithm]:
    """Every interior-point algorithm registered through ``dpframe_methods`` (``family="interior_point"``), by name.

    ``host``: a :class:`~dpframe.plugin.PluginHost` (default: the process-wide one). Built-ins come first;
    names are unique (the plugin registry refuses a clash, naming both plugins). A registered object that
    is not an :class:`InteriorPointAlgorithm` is refused with a :class:`~dpframe.errors.PluginError`.

    Example:
        >>> sorted(algorithms())
        ['binary_search', 'exponential', 'treelog']

    """
    from dpframe.plugin.manager import plugin_host

    host = host if host is not None else plugin_host()
    found: dict[str, InteriorPointAlgorithm] = {}
    for entry in host.methods(FAMILY):
        if not isinstance(entry.item, InteriorPointAlgorithm):
            raise PluginError(f"plugin {entry.plugin!r} registered {entry.item!r}, which is not an interior-point "
                              "algorithm", argument="dpframe_methods",
                              fix="give it name, approximate, min_rows(), cost() and run()")
        found[entry.name] = entry.item
    return found


def zcdp_epsilon(algorithm: InteriorPointAlgorithm, rho: Fraction, size: int) -> Fraction | None:
    """The ε ``algorithm`` may run at for a zCDP budget ρ (None: it has no zCDP guarantee, e.g. needs δ).

    Uses the algorithm's own ``zcdp_epsilon`` when it has one; otherwise a pure ε-DP algorithm is
    ε²/2-zCDP (Bun & Steinke 2016), so ε = √(2ρ).
    """
    own: Any = getattr(algorithm, "zcdp_epsilon", None)
    if own is not None:
        out: Fraction | None = own(rho, size)
        return out
    return None if algorithm.approximate else epsilon_from_rho(rho, bounded_range=False)


def privacy_curves(algorithm: InteriorPointAlgorithm, epsilon: Fraction, size: int,
                   stability: Stability) -> list[acc.PrivacyCurve] | None:
    """The privacy curves of one run (for RDP/PLD sessions), or None: charged from its cost instead."""
    own: Any = getattr(algorithm, "curves", None)
    if own is None or algorithm.approximate:
        return None
    out: list[acc.PrivacyCurve] = own(epsilon, size, stability)
    return out
