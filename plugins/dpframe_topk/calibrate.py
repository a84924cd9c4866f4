"""Exact costs and noise calibration of the top-k methods (public parameters only, no data).

Everything here is computed before a query runs. Noise parameters are exact Fractions rounded so that
the cost they imply never exceeds the share they are calibrated to (square roots of ε rounded *down*,
variances *up*); the query is then charged its full budget, which is an upper bound of the true cost.

Notation (digest ``001_adaptive_topk.md``):

* ``g`` — the gap sensitivity: the width of the interval in which one privacy unit can move every score
  at once (Δ for monotone non-negative contributions under add/remove; 2Δ for signed contributions or
  substitution). Every sorted gap moves by at most ``g`` and the EM on raw scores with ``exp(s·h)``,
  ``s = ε/g``, is ε-DP and ε-bounded-range (§2 F9/F10, §6 P1/P10).
* zCDP ↔ (ε, δ): the optimal conversion of Canonne, Kamath & Steinke (2020), :func:`dpframe.budgets.zcdp_epsilon`
  and its inverse :func:`dpframe.budgets.zcdp_rho` (the largest ρ whose conversion fits (ε, δ)). The paper
  uses ``ε = ρ + 2√(ρ ln 1/δ)`` (its Thm 11 prints ``√(2ρ ln 1/δ)``, a typo that under-reports by √2 —
  digest §7); the optimal conversion gives more ρ for the same (ε, δ) — 0.02436 instead of 0.01747 at
  (1, 1e-6) — so the same charge buys less noise.

Example:
    >>> from fractions import Fraction
    >>> round(float(zcdp_rho(Fraction(1), Fraction(1, 2293) / 2)), 5)    # the paper's conversion: 0.02802
    0.0456

"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from dpframe.accounting.accountants import round_up
from dpframe.budgets import down, exact_log, sqrt_down, up, zcdp_rho
from dpframe.errors import BudgetError
from dpframe.interactive.composition import optimal_delta, optimal_epsilon
from dpframe.interactive.tct import MAX_ACCESSES, ChannelPlan, planning_delta, q_notprior
from dpframe.sealed import plain_cache

_PREC = 10**15


def floor_frac(x: float) -> Fraction:
    """A Fraction ≤ x (to 1e-15), for parameters that must not exceed a float bound."""
    return Fraction(math.floor(x * (1 - 1e-12) * _PREC), _PREC)


def root_down(x: Fraction) -> Fraction:
    """:func:`dpframe.budgets.sqrt_down` as an exact Fraction: the largest float whose square is ≤ x.

    What the EM and PTR parameters read from a ρ (ε = √(8ρ/k), ...): never above the exact root, within one ulp
    of it (also where x is far below 10⁻³⁰, where a fixed 10⁻¹⁵ grid gave 0).

    Example:
        >>> root_down(Fraction(9, 4)), root_down(Fraction(2)) ** 2 <= 2, float(root_down(Fraction(1, 10**40)))
        (Fraction(3, 2), True, 1e-20)

    """
    return Fraction(sqrt_down(x))


def log_inv(delta: Fraction) -> float:
    """ln(1/δ) for an exact δ (also for δ far below float's smallest normal)."""
    return -exact_log(delta)


def gaussian_shift(sigma2: Fraction, delta_t: Fraction) -> int:
    """The integer PTR shift T ≥ σ√(2 ln 1/δ_t): P[Z > T] ≤ δ_t for a discrete Gaussian (sub-Gaussian tail)."""
    return math.ceil(math.sqrt(2 * float(sigma2) * log_inv(delta_t)) * (1 + 1e-12))


def laplace_shift(scale: Fraction, delta_t: Fraction) -> int:
    """The integer PTR shift T with P[Z > T] ≤ e^{-(T+1)/t} ≤ δ_t for a discrete Laplace of scale t."""
    return max(0, math.ceil(float(scale) * log_inv(delta_t) * (1 + 1e-12)))


@dataclass(frozen=True)
class StablePlan:
    """Alg 2 (one StableTopK call) calibrated to an exact share: EM on gaps, then the PTR test."""

    em_epsilon: Fraction      # Alg 1's ε (EM ∝ exp(ε/(2g)·gap))
    ptr: str                  # "gaussian" | "laplace"
    ptr_scale: Fraction       # σ² (Gaussian) or t (Laplace), in score units
    shift: int                # integer PTR shift
    delta_t: Fraction
    g: Fraction

    @property
    def em_scale(self) -> Fraction:
        """The exact EM scale s in P(j) ∝ exp(s·utility_j) on gaps (sensitivity g, non-monotone)."""
        return self.em_epsilon / (2 * self.g)

    def threshold(self) -> Fraction:
        """Pass iff statistic + noise > threshold (statistic: max{g, q} for Gaussian, q for Laplace)."""
        return self.g + self.shift


def stable_plan_zcdp(rho: Fraction, delta_t: Fraction, g: Fraction, ptr: str = "gaussian") -> StablePlan:
    """Alg 2 at δ_t-approximate ρ-zCDP: EM gets ε = 2√ρ (ε²/8 = ρ/2), the PTR the exact rest.

    Gaussian PTR: σ² = g²/(2ρ_ptr) (ρ_ptr-zCDP, CKS20 Thm 14). Laplace PTR: ε_ptr = √(2ρ_ptr)
    (pure ε-DP ⇒ ε²/2-zCDP), scale t = g/ε_ptr.
    """
    em = root_down(4 * rho)
    rest = rho - em * em / 8
    if rest <= 0 or (ptr != "gaussian" and root_down(2 * rest) <= 0):
        raise BudgetError(f"ρ = {float(rho):.3g} for StableTopK is too small for its PTR test's noise",
                          argument="budget", fix="give the query a larger budget")
    if ptr == "gaussian":
        s2 = g * g / (2 * rest)
        return StablePlan(em, ptr, s2, gaussian_shift(s2, delta_t), delta_t, g)
    eps_ptr = root_down(2 * rest)
    t = g / eps_ptr
    return StablePlan(em, ptr, t, laplace_shift(t, delta_t), delta_t, g)


def stable_plan_pure_parts(epsilon: Fraction, delta_t: Fraction, g: Fraction) -> StablePlan:
    """Alg 2 with the Laplace PTR under basic composition: (ε/2 EM) + (ε/2, δ_t) PTR = (ε, δ_t)-DP."""
    t = g / (epsilon / 2)
    return StablePlan(epsilon / 2, "laplace", t, laplace_shift(t, delta_t), delta_t, g)


def em_step_epsilon(notion: str, first: Fraction, delta: Fraction, steps: int, accounting: str) -> Fraction:
    """Per-step ε of ``steps`` adaptive EM selections fitting a budget.

    ``accounting="br"`` (one-shot Gumbel, EM-CDP): each step is ε-bounded-range ⇒ ε²/8-zCDP.
    ``accounting="dp"`` (classic peeling): each step ε-DP ⇒ ε²/2-zCDP. ``notion`` is the budget's:
    pure (basic composition: ε/steps), zcdp (ρ = first), approx (the better of basic composition and
    the zCDP route converted optimally at δ; δ = 0 means pure).
    """
    basic = first / steps
    per = Fraction(8) if accounting == "br" else Fraction(2)
    if notion == "pure" or (notion == "approx" and delta == 0):
        return basic
    rho = first if notion == "zcdp" else zcdp_rho(first, delta)
    via_rho = root_down(per * rho / steps)
    return via_rho if notion == "zcdp" else max(basic, via_rho)


@plain_cache(maxsize=4096)
def ld_step_epsilon(epsilon: Fraction, delta: Fraction, steps: int) -> Fraction:
    """Per-step ε' of a limited-domain run of at most ``steps`` draws that is (ε, δ)-DP with its ⊥ at δ/2.

    The run (Durfee–Rogers; :func:`select.limited_domain`, ⊥ threshold set at δ_⊥ = δ/2) draws at most
    ``steps`` times (a draw of ⊥ or of a virtual zero-score slot stops it). Each draw is the EM at scale
    s = ε'/g over the k̄ slots (the top k̄ keys, padded with virtual slots) and ⊥,
    whose score is b = h₍k̄₊₁₎ + g + ⌈g·ln(k̄/δ_⊥)/ε'⌉. Proof that the run is
    (ε* + (steps + 1)·ln(1 + δ_⊥), (1 + δ_⊥)·δ* + δ_⊥)-DP, where (ε*, δ*) is any composition bound of
    ``steps`` adaptive ε'-bounded-range steps:

    * Fix neighbours D, D'. Every key's score (0 when absent) moves within one interval I of width g, so
      does every order statistic, hence h₍k̄₊₁₎ and b. Let G be the keys in both top-k̄ sets and let the
      *ideal* run I(X) be the same peeling EM over G ∪ {⊥} only. Each of its draws is an EM over a common
      set whose scores all move within I: ε'-bounded range. So I is a composition of ``steps`` ε'-BR steps
      (Cesar & Rogers 2021: ε'²/8-zCDP each, hence steps·ε'²/8-zCDP; or ε'-DP each), (ε*, δ*)-DP.
    * A slot of X outside G is a virtual slot (score 0 ≤ h₍k̄₊₁₎), or a key missing from the other
      dataset's top k̄, whose score there is ≤ that dataset's h₍k̄₊₁₎, so here ≤ h₍k̄₊₁₎ + g. Either way its EM
      weight is ≤ e^{−ln(k̄/δ_⊥)} = δ_⊥/k̄ times ⊥'s, and there are ≤ k̄ of them: their total weight N is
      ≤ δ_⊥·w(⊥), and (one-shot Gumbel view) a key outside G is drawn before ⊥ with probability ≤ δ_⊥.
    * For an output o of keys of G, the real run and the ideal run differ only in the normalisers (by N)
      and in the stop weight (⊥ plus the virtual slots): per draw the ratio is within [1/(1 + δ_⊥), 1 + δ_⊥],
      so P_D[o] ≤ (1 + δ_⊥)·P_{I(D)}[o] and P_{I(D')}[o] ≤ (1 + δ_⊥)^{steps}·P_D'[o]. Hence for any set S
      P_D[S] ≤ (1 + δ_⊥)·(e^{ε*}·(1 + δ_⊥)^{steps}·P_D'[S] + δ*) + δ_⊥.

    So ε' is the larger of the two routes that fit ε − (steps + 1)·ln(1 + δ_⊥) at δ* = (δ/2)/(1 + δ/2):
    steps·ε'²/8-zCDP read with the optimal conversion (:func:`dpframe.budgets.zcdp_rho`), and ``steps``
    ε'-DP steps under the optimal composition (:func:`dpframe.interactive.composition.optimal_epsilon`,
    which includes basic composition; beyond 200 draws basic composition alone, to keep planning fast).
    Durfee & Rogers compose with min(basic, advanced, kε'²/2 + ε'√(k/2·ln 1/δ)) over k + 1 selections: at
    ε = 1, δ = 10⁻⁶ and k = 10 / 100 / 1000 that is ε' = 0.1051 / 0.0347 / 0.0110, here 0.1355 / 0.0428 /
    0.0135 (checked by enumeration in ``tests/topk/test_limited_domain_exact.py``).
    Returns 0 when the slack alone exceeds ε.

    Example:
        >>> round(float(ld_step_epsilon(Fraction(1), Fraction(1, 10**6), 10)), 4)
        0.1355

    """
    half = delta / 2
    slack = Fraction((steps + 1) * math.log1p(up(half))) * Fraction(10**9 + 1, 10**9)   # rounded up
    budget = epsilon - slack
    if budget <= 0:
        return Fraction(0)
    d_comp = half / (1 + half)
    via_br = root_down(8 * zcdp_rho(budget, d_comp) / steps)
    if steps > _LD_OPTIMAL_STEPS:           # the bounded-range route wins there: pure steps by basic composition
        return max(via_br, budget / steps)
    lo, hi = 0.0, float(budget)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if optimal_epsilon(steps, mid, down(d_comp)) <= budget else (lo, mid)   # δ down, exact ≤
    return max(via_br, floor_frac(lo))


#: Up to this many draws the pure route of :func:`ld_step_epsilon` uses the optimal composition (O(steps) per
#: evaluation); beyond it basic composition, which the bounded-range route beats anyway.
_LD_OPTIMAL_STEPS = 200


@dataclass(frozen=True)
class TCTPlan:
    """One-shot top-k inside TCT (target-charging digest §3.6): per-candidate ε_c, n data accesses."""

    candidate_epsilon: Fraction   # each candidate: score + discrete Laplace(Δ_key/ε_c)
    accesses: int                 # n: charged as n calls of 2ε_c-DP
    tail: float                   # δ* = P[Bin(n, q) ≤ k − 1], q = 1/(e^{2ε_c}+1)


def within(first: Fraction) -> float:
    """A float E ≤ ``first`` whose :func:`~dpframe.accounting.accountants.round_up` is still ≤ ``first``.

    A float cost c fits a budget when ``round_up(c) ≤ first`` (the margin for float error every channel
    adds); round_up is monotone, so every float c ≤ E fits. 0.0 when ``first`` is below round_up's margin.

    Example:
        >>> within(Fraction(1, 10)) < 0.1, round_up(within(Fraction(1, 10))) <= Fraction(1, 10)
        (True, True)

    """
    m = math.floor(first * 10**12) - 1            # round_up(x) ≤ first ⟺ ⌈x(1 + 1e-12)·10¹²⌉ ≤ m
    if m <= 0:
        return 0.0
    x = m / 1e12 / (1 + 1e-12)
    while round_up(x) > first:                     # float division may land an ulp or two above
        x = math.nextafter(x, 0.0)
    return x


def tct_channel(notion: str, k: int, eps_c: float, first: float, delta: float) -> ChannelPlan | None:
    """A TCT channel of k hits of 2ε_c-DP NotPrior calls that fits (``first``, δ), or None if none is found.

    The reservation is ``sess.target_charging``'s (:class:`~dpframe.interactive.tct.ChannelPlan`: q rounded
    down, the tail δ*(n) rounded up, the optimal composition's δ checked with a 1e-9 margin):

    * zcdp — the smallest n with δ*(n) ≤ δ; it fits iff ρ = n(2ε_c)²/2 ≤ ``first`` (the tail is charged as
      the approximate-zCDP δ). ρ grows with n, so no other n fits when this one does not.
    * approx — an n with δ*(n) < δ and δ_opt(n, 2ε_c, ``first``) ≤ (δ − δ*(n))(1 − 1e-9), where δ_opt is the
      exact optimal composition δ of n 2ε_c-DP calls at ε = ``first``
      (:func:`~dpframe.interactive.composition.optimal_delta`): then the channel is (``first``, δ)-DP
      (Thm B.4). This is the condition ``ChannelPlan.optimise`` checks at the ε' it reports (optimal_epsilon
      is the smallest ε' passing it), evaluated at the budget instead, which needs no search over ε'. The scan
      starts at the first n with δ*(n) < δ (δ* falls with n: bisection) and steps by max(1, n/2000) (the
      resolution of ``optimise``); it stops at the first fit, or once δ_opt alone reaches δ (δ_opt grows
      with n — n calls are post-processed from n + 1 — and δ* ≥ 0: no larger n fits).

    Example:
        >>> tct_channel("approx", 1, 0.02, 1.0, 1e-6).n, tct_channel("approx", 1, 0.03, 1.0, 1e-6)
        (21, None)

    """
    e2 = 2 * eps_c
    q = q_notprior(e2)
    try:
        low = ChannelPlan._first(q, k)
    except BudgetError:          # more than MAX_ACCESSES accesses: TCT cannot pay off
        return None
    if notion == "zcdp":
        plan = ChannelPlan.smallest(q, k, delta)
        return plan if plan.n * e2 * e2 / 2 <= first else None
    if ChannelPlan.tail(q, k, MAX_ACCESSES) >= delta:
        return None
    high = MAX_ACCESSES                          # δ*(high) < δ ≤ δ*(low − 1): bisect for the first n below δ
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if ChannelPlan.tail(q, k, mid) >= delta else (low, mid)
    n = low
    while n <= MAX_ACCESSES:
        tail = ChannelPlan.tail(q, k, n)
        spent = optimal_delta(n, e2, first)
        if spent <= (delta - tail) * (1 - 1e-9):
            return ChannelPlan(n, tail, first)
        if spent >= delta * (1 - 1e-9):
            return None
        n += max(1, n // 2000)
    return None


@plain_cache(maxsize=64)
def tct_plan(notion: str, first: Fraction, delta: Fraction, k: int) -> TCTPlan | None:
    """The largest per-candidate ε_c whose TCT channel fits (first, δ), found by bisection; None if none does.

    As ``sess.target_charging`` does, the channel is planned at a δ rounded down (refused below the smallest
    normal float: :func:`~dpframe.interactive.tct.planning_delta`), and a float cost fits only
    once rounded up with a margin for float error: :func:`tct_channel` checks it against :func:`within`
    (first), the largest such float. The search only decides how large ε_c is: the ε_c returned is one at
    which :func:`tct_channel` found a channel that fits (the bisection keeps ``lo`` at such a point), so the
    plan is valid even where the scan misses a better n. The search's upper end: for approx, ε_c is at most
    first/2 + 2δ (the channel's first call alone is 2ε_c-DP, and one ε-DP call is (E, δ)-DP only if
    (e^ε − e^E)/(1 + e^ε) ≤ δ, i.e. ε ≤ E + ln((e^E + δ)/(e^E(1 − δ))) ≤ E + 3δ for δ ≤ 1/2); for zcdp, at
    most √(ρ/2) (n ≥ 1 calls cost ρ = n(2ε_c)²/2 ≥ 2ε_c²).

    Example:
        >>> tct_plan("approx", Fraction(1), Fraction(1, 10**6), 1).accesses
        22

    """
    budget, d = within(first), planning_delta(delta, "budget")
    lo, hi, found = 0.0, (math.sqrt(budget / 2) if notion == "zcdp" else budget / 2 + 2 * d), None
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        plan = tct_channel(notion, k, mid, budget, d)
        lo, hi, found = (mid, hi, plan) if plan is not None else (lo, mid, found)
    if found is None:
        return None
    return TCTPlan(Fraction(lo), found.n, found.delta_star)      # lo itself, exactly: it was found to fit
