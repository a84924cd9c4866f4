"""Privacy curves: what an accountant needs to know about one mechanism.

A :class:`PrivacyCurve` describes a mechanism under add/remove-one neighbours by up to four facts:

* ``rdp(α)``: its Rényi-DP curve ε(α) for α > 1 (Mironov 2017), used by :class:`RDPAccountant`;
* ``hs`` / ``hs_rev``: the hockey-stick profile δ(ε) = H_{e^ε}(P‖Q) (ε ≥ 0) of a *dominating pair*
  (P, Q) and of the reversed pair (Q, P) (Zhu, Dong & Wang 2022, Def. 3.3.1 of the thesis), used by
  :class:`PLDAccountant`; symmetric mechanisms have ``hs_rev is hs``;
* ``eps_inf``: a pure ε-DP bound (the RDP curve at α = ∞), used to cap subsampled curves;
* ``delta0``: an additive δ (approximate RDP / approximate zCDP: with probability ≤ δ0 anything may
  happen, otherwise the curves hold), e.g. DP partition selection.

A mechanism that knows only an RDP curve still gets a PLD profile (the RDP → (ε, δ) conversion is a
valid privacy-profile bound, made a dominating pair by connect-the-dots), and one that knows only δ(ε)
(:func:`from_profile`) composes under the PLD accountant. Curves are built by the functions below and
are serialisable (:meth:`PrivacyCurve.to_json`), so a session ledger re-composes them exactly.

Closed forms (sensitivity-normalised; proofs/derivations in the digest
``research/004_modern_accounting.md`` §1.3, §2.3–2.4):

* Gaussian σ: ε(α) = α/(2σ²); δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), μ = 1/σ (exact).
* Laplace b: ε(α) = 1/b + log1p((α−1)·expm1((1−2α)/b)/(2α−1))/(α−1); δ(ε) = 1 − e^{(ε−1/b)/2} on
  [0, 1/b] (exact).
* Randomized response p: binary pair (p, 1−p) vs (1−p, p) (exact).
* pure ε-DP (any mechanism): dominated by randomized response with p = e^ε/(1+e^ε) (Kairouz et al.
  2015); RDP (1/(α−1))·log[(sinh(αε) − sinh((α−1)ε))/sinh(ε)] (Bun & Steinke 2016).
* ε-bounded-range (exponential mechanism, report-noisy-max with Gumbel noise): RDP min(pure, αε²/8)
  (Cesar & Rogers 2021); δ(ε') = (e^{ε/2} − e^{ε'/2})²/(e^ε − 1) for 0 ≤ ε' ≤ ε (the sup over the
  binary worst cases with losses in [t − ε, t]; derived in this module's tests).
* discrete Laplace t, integer sensitivity Δ (one coordinate): exact RDP and profile by geometric sums.
* threshold test (thesis Thm 4.3.1): a binary output "noisy count ≥ T" with Gaussian noise on a count
  in [lo, hi]; exact binary divergences (also after subsampling, where they stay binary).

Poisson subsampling with rate γ (:meth:`PrivacyCurve.subsampled`): RDP by the tight bound (thesis
Thm 2.3.4; only for mechanisms meeting its condition: Gaussian, Laplace, randomized response) or the
general bound (Thm 2.3.1), both in log space with the expm1 form (digest §1.4.1), CGF-interpolated
between integer orders, and capped by log(1 + γ(e^{ε∞} − 1)); PLD by the two amplified dominating
pairs of Thm 3.3.5 (remove: ((1−γ)Q + γP, Q); add: the reverse) — accountants take the max of both.

Example:
    >>> from dpframe.accounting import curves as c
    >>> g = c.gaussian(sigma=2.0)
    >>> float(g.rdp_at([2.0, 4.0])[1])
    0.5
    >>> s = g.subsampled(rate=0.01)
    >>> bool(s.rdp_at([2.0])[0] < g.rdp_at([2.0])[0])
    True

"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpframe.accounting.checks import (
    check_alpha,
    check_delta,
    check_epsilon,
    check_grid,
    check_rate,
    delta_out,
    nonnegative,
    positive,
    ratio,
    rdp_out,
    real,
    shown,
)
from dpframe.errors import BudgetError, DPFrameError

Array = np.ndarray
Fn = Callable[[Array], Array]


def _special() -> Any:
    import scipy.special  # lazily: slow to import, and `import dpframe` must stay fast

    return scipy.special


#: Evaluations of a profile or RDP function are done in blocks of at most this many array entries.
BLOCK = 1 << 21

#: Largest integer order at which a subsampled RDP curve is computed term by term (beyond: the cap).
MAX_SUBSAMPLED_ORDER = 4096

#: Largest count range [lower, upper] of :func:`threshold_test` (its cost grows with the range).
MAX_COUNT_RANGE = 100_000


def amplified_epsilon(epsilon: float, rate: float) -> float:
    """log(1 + γ(e^ε − 1)): ε-DP on a Poisson sample of rate γ (Li et al. 2012), finite for any finite ε.

    Example:
        >>> round(amplified_epsilon(1.0, 0.01), 6), round(amplified_epsilon(1000.0, 0.5), 6)
        (0.017037, 999.306853)

    """
    if epsilon < 700:
        return math.log1p(rate * math.expm1(epsilon))
    return epsilon + math.log(rate) + math.log1p((1 - rate) * math.exp(-epsilon) / rate)  # log((1−γ) + γe^ε)


# ------------------------------------------------------------------------------------------------ RDP
def _rdp_linear(rho: float) -> Fn:
    """ε(α) = αρ (Gaussian with ρ = Δ²/(2σ²), any ρ-zCDP mechanism); ρ may be +∞ (vacuous)."""
    return lambda a: np.asarray(a * rho)


def _rdp_laplace(eps: float) -> Fn:
    """Laplace with ε = Δ/b: ε + log1p((α−1)·expm1((1−2α)ε)/(2α−1))/(α−1)."""
    def f(a: Array) -> Array:
        with np.errstate(over="ignore"):
            return np.asarray(eps + np.log1p((a - 1) * np.expm1((1 - 2 * a) * eps) / (2 * a - 1)) / (a - 1))

    return f


def _rdp_binary(lp: float, l1p: float, lq: float, l1q: float) -> Fn:
    """D_α((p, 1−p) ‖ (q, 1−q)) from logs of the four probabilities."""
    def f(a: Array) -> Array:
        return np.asarray(np.logaddexp(a * lp + (1 - a) * lq, a * l1p + (1 - a) * l1q) / (a - 1))

    return f


def _rdp_pure(eps: float) -> Fn:
    # (1/(α−1)) log[(sinh(αε) − sinh((α−1)ε))/sinh(ε)] = RR with p = e^ε/(1+e^ε), evaluated stably.
    p = -float(np.logaddexp(0.0, -eps))        # log p
    q = -float(np.logaddexp(0.0, eps))         # log (1 − p)
    rr = _rdp_binary(p, q, q, p)
    return lambda a: np.minimum(rr(a), eps)


def _rdp_discrete_laplace(t: float, d: int) -> Fn:
    def f(a: Array) -> Array:
        with np.errstate(over="ignore"):
            k = (2 * a - 1) / t
            # middle sum Σ_{k=1}^{Δ−1} r^k with r = e^{−(2α−1)/t}, written with expm1 (all terms ≥ 0)
            mid = np.exp(-k) * (-np.expm1(-k * (d - 1))) / (-np.expm1(-k)) if d > 1 else np.zeros_like(a)
            inner = 1 + np.exp(-(2 * a - 1) * (d / t)) + (-math.expm1(-1 / t)) * mid
            return np.asarray(((a - 1) * (d / t) + np.log(inner) - math.log1p(math.exp(-1 / t))) / (a - 1))

    return f


# ------------------------------------------------------------------------------------ hockey sticks
#: Profiles are evaluated at ε ≤ this (δ is non-increasing in ε, so a smaller ε only raises δ: sound).
E_MAX = 1e300


def _hs_gaussian(mu: float) -> Fn:
    def f(e: Array) -> Array:
        sp = _special()
        e = np.minimum(np.asarray(e, dtype=np.float64), E_MAX)
        with np.errstate(over="ignore", invalid="ignore"):
            out = np.exp(sp.log_ndtr(-e / mu + mu / 2)) - np.exp(e + sp.log_ndtr(-e / mu - mu / 2))
        return np.asarray(np.clip(out, 0.0, 1.0))

    return f


def _hs_laplace(eps: float) -> Fn:
    """Laplace with ε = Δ/b: δ(e) = 1 − e^{(e−ε)/2} on [0, ε], 0 beyond."""
    return lambda e: np.where(e >= eps, 0.0, -np.expm1(np.minimum(e - eps, 0.0) / 2))


def _hs_atoms(losses: Array, probs: Array) -> Fn:
    """δ(ε) = Σ p_i (1 − e^{ε − L_i})_+ for a discrete privacy-loss distribution."""
    def f(e: Array) -> Array:
        e = np.asarray(e, dtype=np.float64)
        terms = probs[None, :] * -np.expm1(np.minimum(e[:, None] - losses[None, :], 0.0))
        return np.asarray(np.clip(terms.sum(axis=1), 0.0, 1.0))

    return f


def _hs_bounded_range(eps: float) -> Fn:
    # (e^{ε/2} − e^{e/2})²/(e^ε − 1) = (1 − e^{(e−ε)/2})²/(1 − e^{−ε}): no overflow for any ε
    return lambda e: np.where(e >= eps, 0.0, np.expm1((np.minimum(e, eps) - eps) / 2) ** 2 / -math.expm1(-eps))


def _hs_discrete_laplace(t: float, d: int) -> Fn:
    """Exact profile of discrete Laplace(t) shifted by integer Δ (P-loss atoms, summed in closed form)."""
    norm = 1 + math.exp(-1 / t)

    def f(e: Array) -> Array:
        e = np.minimum(np.asarray(e, dtype=np.float64), E_MAX)
        top = (1 / norm) * -np.expm1(np.minimum(e - d / t, 0.0))          # atom at +Δ/t (k ≤ 0)
        # middle atoms k = 1..K with loss (Δ − 2k)/t > ε and P-mass c·e^{−k/t}, c = (1 − e^{−1/t})/norm:
        # Σ_k c e^{−k/t}(1 − e^{ε − (Δ−2k)/t}) = (1 − e^{−K/t})/norm · (e^{−1/t} − e^{ε − (Δ−K)/t}),
        # both exponents ≤ 0 on the atoms used, so nothing overflows for a tiny t
        kmax = np.clip(np.ceil((d - e * t) / 2) - 1, 0, d - 1)
        with np.errstate(over="ignore", invalid="ignore"):
            mid = -np.expm1(-kmax / t) / norm * (math.exp(-1 / t) - np.exp(np.minimum(e - (d - kmax) / t, 0.0)))
        mid = np.where(kmax > 0, mid, 0.0)
        return np.clip(top + np.maximum(mid, 0.0), 0.0, 1.0)

    return f


def two_sided(hs: Fn, hs_rev: Fn, e: Array) -> Array:
    """H_{e^ε}(P‖Q) for every real ε: for ε < 0, H_x(P‖Q) = 1 − x + x·H_{1/x}(Q‖P)."""
    e = np.asarray(e, dtype=np.float64)
    neg = e < 0
    out = np.empty_like(e)
    out[~neg] = hs(e[~neg])
    x = np.exp(e[neg])
    out[neg] = -np.expm1(e[neg]) + x * hs_rev(-e[neg])
    return out


def _hs_from_rdp(rdp: Fn, orders: Array, fine: int = 8) -> Fn:
    """A privacy-profile bound from an RDP curve: min over orders of the improved conversion (≤ 1).

    At order α, log δ(ε) = (α−1)(ε(α) + log(1 − 1/α)) − log α − (α−1)ε is a line in ε, so the minimum
    over orders is the lower envelope of lines (computed once, evaluated by binary search). The orders
    are ``orders`` refined by ``fine`` points between neighbours (the curve is evaluated once on them).
    """
    grid = np.unique(np.concatenate([np.linspace(a, b, fine + 1) for a, b in zip(orders[:-1], orders[1:])]))
    with np.errstate(all="ignore"):
        intercept = (grid - 1) * (np.asarray(rdp(grid), dtype=np.float64) + np.log1p(-1 / grid)) - np.log(grid)
    ok = np.isfinite(intercept)
    if not ok.any():
        return lambda e: np.ones(np.shape(e))
    b_all, m_all = intercept[ok].tolist(), (1 - grid[ok]).tolist()       # slopes decrease along the grid
    lines: list[tuple[float, float]] = []      # (slope, intercept) of the envelope, slopes decreasing
    breaks: list[float] = []                   # where line k + 1 takes over from line k
    for m, b in zip(m_all, b_all):
        while lines:
            m0, b0 = lines[-1]
            at = (b - b0) / (m0 - m)           # where the new line drops below the last one
            if breaks and at <= breaks[-1]:    # ... before the last one is ever the lowest: drop it
                lines.pop()
                breaks.pop()
                continue
            breaks.append(at)
            break
        lines.append((m, b))
    slope = np.array([m for m, _ in lines])
    inter = np.array([b for _, b in lines])
    cut = np.array(breaks)

    def f(e: Array) -> Array:
        e = np.asarray(e, dtype=np.float64)
        k = np.searchsorted(cut, e, side="right")
        with np.errstate(over="ignore"):
            return np.asarray(np.minimum(1.0, np.exp(inter[k] + slope[k] * e)))

    return f


def _hs_mixture(hs: Fn, delta0: float) -> Fn:
    return lambda e: delta0 + (1 - delta0) * hs(e)


# ----------------------------------------------------------------------------------- subsampling
def _log_comb(n: Array, k: Array) -> Array:
    sp = _special()
    return np.asarray(sp.gammaln(n + 1) - sp.gammaln(k + 1) - sp.gammaln(n - k + 1))


def subsampled_rdp_integer(alpha: int, rate: float, rdp: Fn, *, tight: bool) -> float:
    """ε of the Poisson-subsampled mechanism at integer α ≥ 2 (thesis Thm 2.3.4 / Thm 2.3.1).

    Tight: log1p(Σ_{ℓ≥2} w_ℓ·expm1((ℓ−1)ε(ℓ)))/(α−1) with w_ℓ = C(α,ℓ)(1−γ)^{α−ℓ}γ^ℓ, all terms ≥ 0
    (no cancellation, digest §1.4.1). General: log{(1−γ)^{α−1}(αγ−γ+1) + w_2 e^{ε(2)} + 3Σ_{ℓ≥3} w_ℓ
    e^{(ℓ−1)ε(ℓ)}}/(α−1) in plain log-sum-exp.

    Example:
        >>> round(subsampled_rdp_integer(2, 0.01, lambda a: a / 8.0, tight=True), 14)
        2.840213832e-05

    """
    sp = _special()
    if rate == 1:
        return float(rdp(np.array([float(alpha)]))[0])
    ell = np.arange(2, alpha + 1, dtype=np.float64)
    eps = rdp(ell)
    if not np.all(np.isfinite(eps)):
        return math.inf
    log_w = _log_comb(np.asarray(float(alpha)), ell) + ell * math.log(rate) + (alpha - ell) * math.log1p(-rate)
    x = (ell - 1) * eps
    if tight:
        small = x < 30
        log_em1 = np.empty_like(x)
        log_em1[small] = np.log(np.expm1(np.maximum(x[small], 1e-300)))
        log_em1[~small] = x[~small] + np.log1p(-np.exp(-x[~small]))
        return float(np.logaddexp(0.0, sp.logsumexp(log_w + log_em1))) / (alpha - 1)
    terms = [(alpha - 1) * math.log1p(-rate) + math.log1p((alpha - 1) * rate), float(log_w[0] + x[0])]
    if alpha >= 3:
        terms.append(math.log(3) + float(sp.logsumexp(log_w[1:] + x[1:])))
    return float(sp.logsumexp(terms)) / (alpha - 1)


def _subsampled_rdp(rdp: Fn, rate: float, tight: bool, cap: float | None) -> Fn:
    cache: dict[int, float] = {}

    def at_int(n: int) -> float:
        if n not in cache:
            cache[n] = subsampled_rdp_integer(n, rate, rdp, tight=tight)
        return cache[n]

    def f(a: Array) -> Array:
        out = np.empty(len(a))
        for i, alpha in enumerate(np.asarray(a, dtype=np.float64)):
            if alpha <= 2:
                v = at_int(2)  # RDP is non-decreasing in α
            elif alpha > MAX_SUBSAMPLED_ORDER:
                # subsampling never increases a Rényi divergence (joint quasi-convexity, van Erven &
                # Harremoës 2014, Thm 13: D_α((1−γ)Q + γP‖Q) ≤ D_α(P‖Q), likewise for the reverse pair)
                v = float(rdp(np.array([alpha]))[0])
            else:
                lo, hi = math.floor(alpha), math.ceil(alpha)
                if lo == hi:
                    v = at_int(lo)
                else:  # the CGF (α−1)ε(α) is convex: linear interpolation bounds it from above
                    w = alpha - lo
                    v = ((1 - w) * (lo - 1) * at_int(lo) + w * (hi - 1) * at_int(hi)) / (alpha - 1)
            out[i] = v if cap is None else min(v, cap)
        return out

    return f


def unamplified_epsilon(e: Array, rate: float) -> Array:
    """log(1 + (e^ε − 1)/γ) for ε ≥ 0 (the inverse of :func:`amplified_epsilon`), finite where it can be.

    Example:
        >>> [round(float(v), 6) for v in unamplified_epsilon(np.array([0.017037, 1000.0]), 0.01)]
        [1.000005, 1004.60517]

    """
    e = np.asarray(e, dtype=np.float64)
    log_rate = math.log(rate)
    with np.errstate(over="ignore", divide="ignore"):
        em1 = np.expm1(np.minimum(e, 700.0))
        direct = np.log1p(em1 / rate)                               # accurate for small ε
        summed = np.log(em1 + rate) - log_rate                      # when em1/γ overflows
        large = e + np.log1p((rate - 1) * np.exp(-e)) - log_rate    # when e^ε overflows
    out = np.where(e >= 700.0, large, np.where(np.isfinite(direct), direct, summed))
    return np.asarray(np.minimum(out, E_MAX))


def _hs_subsampled(hs: Fn, hs_rev: Fn, rate: float) -> tuple[Fn, Fn]:
    """Profiles of the remove pair ((1−γ)Q + γP, Q) and its reverse (thesis Thm 3.3.5), for ε ≥ 0."""
    def rem(e: Array) -> Array:
        return rate * hs(unamplified_epsilon(e, rate))

    def rev(e: Array) -> Array:
        with np.errstate(over="ignore"):
            x = np.exp(np.asarray(e, dtype=np.float64))
            c = 1 - x * (1 - rate)                   # H_x(Q‖A) = c·H_{xγ/c}(Q‖P) when c > 0
        out = np.zeros_like(x)
        ok = c > 0
        out[ok] = c[ok] * two_sided(hs_rev, hs, np.log(x[ok] * rate / c[ok]))
        return np.clip(out, 0.0, 1.0)

    return rem, rev


# ------------------------------------------------------------------------------------------ curve
RDP_ORDERS = np.concatenate([np.arange(1.1, 11.0, 0.1), np.arange(11, 64, dtype=np.float64),
                             np.array([80.0, 128, 256, 512, 1024])])


@dataclass(frozen=True, eq=False)
class PrivacyCurve:
    """One mechanism as accountants see it (build with :func:`gaussian`, :func:`laplace`, ...)."""

    label: str
    spec: dict[str, Any] | None
    rdp: Fn | None = None
    hs: Fn | None = None
    hs_rev: Fn | None = None
    eps_inf: float | None = None
    delta0: float = 0.0
    rho: float | None = None            # a zCDP bound, if the mechanism has one
    tight_subsampling: bool = False     # condition (2.2) of thesis Thm 2.3.4 holds
    rate: float = 1.0
    pure_eps: float | None = field(default=None)  # an ε-DP bound (for basic composition)

    # ----------------------------------------------------------------------------- public queries
    @property
    def symmetric(self) -> bool:
        """Whether the dominating pair is symmetric (add and remove directions coincide)."""
        return self.hs is not None and self.hs is self.hs_rev

    def rdp_at(self, alpha: Sequence[float] | Array) -> Array:
        """ε(α) at the given orders (∞ where unbounded)."""
        a = check_alpha(alpha)
        if self.rdp is None:
            return np.full(a.shape, math.inf)
        with np.errstate(all="ignore"):
            return rdp_out(self.rdp(a))

    def profile(self) -> tuple[Fn, Fn]:
        """(hs, hs_rev) of a dominating pair: the declared one, or one derived from the RDP curve."""
        if self.hs is not None and self.hs_rev is not None:
            return self.hs, self.hs_rev
        if self.rdp is None:
            raise DPFrameError(f"{self.label} has neither an RDP curve nor a privacy profile",
                               argument="mechanism", fix="declare rdp= or profile= for it")
        cached: tuple[Fn, Fn] | None = self.__dict__.get("_derived_profile")
        if cached is None:            # derived once per curve (δ(ε) queries call this in loops)
            h = _hs_from_rdp(self.rdp, RDP_ORDERS)
            if self.delta0:
                h = _hs_mixture(h, self.delta0)
            cached = (h, h)
            object.__setattr__(self, "_derived_profile", cached)
        return cached

    def delta_at(self, epsilon: float) -> float:
        """δ(ε) of this single mechanism (max over both neighbour directions), for a finite ε ≥ 0.

        Example:
            >>> round(laplace(scale=1.0).delta_at(0.5), 6)      # 1 − e^{(0.5 − 1)/2}
            0.221199

        """
        return self._delta_at(check_epsilon(epsilon))

    def _delta_at(self, epsilon: float) -> float:
        hs, rev = self.profile()
        e = np.array([epsilon])
        with np.errstate(all="ignore"):
            return max(delta_out(hs(e)[0]), delta_out(rev(e)[0]))

    def approx_dp(self, delta: float) -> float:
        """The smallest ε with δ(ε) ≤ ``delta`` (in (0, 1)) for this mechanism alone (bisection; the upper end).

        ∞ when no ε up to max(10⁴, 2·ε∞) has that δ (e.g. ``delta`` below the mechanism's δ0).

        Example:
            >>> round(laplace(scale=1.0).approx_dp(0.221199), 4)
            0.5

        """
        return self._approx_dp(check_delta(delta))

    def _approx_dp(self, delta: float) -> float:
        if self._delta_at(0.0) <= delta:
            return 0.0
        limit = max(1e4, 2 * self.eps_inf) if self.eps_inf is not None and math.isfinite(self.eps_inf) else 1e4
        lo, hi = 0.0, 1.0
        while self._delta_at(hi) > delta:
            lo, hi = hi, hi * 2
            if hi > limit:
                return math.inf
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self._delta_at(mid) <= delta else (mid, hi)
            if hi - lo <= 1e-15 * hi:
                break
        return hi

    def subsampled(self, rate: float) -> PrivacyCurve:
        """The same mechanism run on a Poisson sample that keeps each unit with probability ``rate``."""
        g = check_rate(rate)
        if g == 1:
            return self
        spec = None if self.spec is None else {**self.spec, "rate": self.rate * g}
        rdp = None
        cap = None if self.eps_inf is None else amplified_epsilon(self.eps_inf, g)
        if self.rdp is not None:
            rdp = _subsampled_rdp(self.rdp, g, self.tight_subsampling and self.delta0 == 0, cap)
        hs, rev = self.profile()
        hs_s, rev_s = _hs_subsampled(hs, rev, g)
        return PrivacyCurve(f"{self.label} sampled at rate {g:g}", spec, rdp, hs_s, rev_s, cap,
                            self.delta0 * g, None, False, self.rate * g,
                            None if self.pure_eps is None else cap)

    def to_json(self) -> str:
        """Serialise (for a ledger); raises for curves built from Python callables."""
        if self.spec is None:
            raise DPFrameError(f"{self.label} was built from Python functions and cannot be stored",
                               argument="mechanism", fix="build it with a dpframe.accounting constructor")
        return json.dumps(self.spec, sort_keys=True)

    def __repr__(self) -> str:
        return f"<PrivacyCurve {self.label}>"


def from_json(text: str) -> PrivacyCurve:
    """Rebuild a curve stored with :meth:`PrivacyCurve.to_json`."""
    spec = dict(json.loads(text))
    rate = float(spec.pop("rate", 1.0))
    kind = spec.pop("kind")
    if kind not in _KINDS:
        raise DPFrameError(f"unknown curve kind {kind!r}", argument="ledger", fix="upgrade dpframe")
    curve: PrivacyCurve = _KINDS[kind](**spec)
    return curve.subsampled(rate) if rate != 1 else curve


# ----------------------------------------------------------------------------------- constructors
def gaussian(sigma: float, sensitivity: float = 1.0) -> PrivacyCurve:
    """Gaussian noise of standard deviation ``sigma`` on a statistic of L2 sensitivity ``sensitivity``.

    Example:
        >>> round(gaussian(sigma=1.0).delta_at(0.276617), 4)
        0.3

    """
    s = positive(sigma, "sigma", "pass the noise standard deviation, e.g. sigma=1.0")
    d = positive(sensitivity, "sensitivity", "pass the L2 sensitivity, e.g. 1.0")
    mu = ratio(d, s, "sigma", "μ = Δ/σ")
    hs = _hs_gaussian(mu)
    rho = mu * mu / 2                          # +∞ when μ² overflows: a vacuous, valid bound
    return PrivacyCurve(f"Gaussian(σ={s:g}, Δ={d:g})", {"kind": "gaussian", "sigma": s, "sensitivity": d},
                        _rdp_linear(rho), hs, hs, None, 0.0, rho, True)


def laplace(scale: float, sensitivity: float = 1.0) -> PrivacyCurve:
    """Laplace noise of scale ``scale`` on a statistic of L1 sensitivity ``sensitivity`` (ε = Δ/b).

    Example:
        >>> laplace(scale=10.0).eps_inf
        0.1

    """
    b = positive(scale, "scale", "pass the Laplace scale, e.g. scale=10.0")
    d = positive(sensitivity, "sensitivity", "pass the L1 sensitivity, e.g. 1.0")
    eps = ratio(d, b, "scale", "ε = Δ/b")
    hs = _hs_laplace(eps)
    return PrivacyCurve(f"Laplace(b={b:g}, Δ={d:g})", {"kind": "laplace", "scale": b, "sensitivity": d},
                        _rdp_laplace(eps), hs, hs, eps, 0.0, eps * eps / 2, True, pure_eps=eps)


def randomized_response(p: float | None = None, *, epsilon: float | None = None) -> PrivacyCurve:
    """Binary randomized response: the true bit with probability ``p`` > ½ (or p = e^ε/(1+e^ε)).

    Example:
        >>> randomized_response(epsilon=1000.0).eps_inf      # p rounds to 1 as a float: built from ε
        1000.0

    """
    if (p is None) == (epsilon is None):
        raise BudgetError("give exactly one of p and epsilon", argument="p",
                          fix="randomized_response(p=0.75) or randomized_response(epsilon=1.0)")
    spec: dict[str, Any]
    if p is None:
        eta = positive(epsilon, "epsilon", "pass epsilon > 0")
        prob = 1 / (1 + math.exp(-eta))
        if 0.5 < prob < 1:           # representable: described by p, as always
            return randomized_response(prob)
        lp, lq = -float(np.logaddexp(0.0, -eta)), -float(np.logaddexp(0.0, eta))   # log p, log(1 − p)
        label, spec = f"randomized response(ε={eta:g})", {"kind": "randomized_response", "epsilon": eta}
    else:
        prob = real(p, "p", "pass the truth probability, in (0.5, 1)")
        if not (0.5 < prob < 1):
            raise BudgetError(f"must be in (0.5, 1), got {shown(p)}", argument="p", fix="pass the truth probability")
        eta, lp, lq = math.log(prob / (1 - prob)), math.log(prob), math.log1p(-prob)
        label, spec = f"randomized response(p={prob:g})", {"kind": "randomized_response", "p": prob}
    probs = np.array([prob, 1 - prob]) if p is not None else np.array([math.exp(lp), math.exp(lq)])
    hs = _hs_atoms(np.array([eta, -eta]), probs)
    return PrivacyCurve(label, spec, _rdp_binary(lp, lq, lq, lp), hs, hs, eta, 0.0, eta * eta / 2, True,
                        pure_eps=eta)


def pure(epsilon: float) -> PrivacyCurve:
    """Any ε-DP mechanism (dominated by randomized response with p = e^ε/(1+e^ε))."""
    e = positive(epsilon, "epsilon", "pass epsilon > 0")
    p = 1 / (1 + math.exp(-e))
    hs = _hs_atoms(np.array([e, -e]), np.array([p, math.exp(-float(np.logaddexp(0.0, e)))]))
    return PrivacyCurve(f"ε-DP(ε={e:g})", {"kind": "pure", "epsilon": e}, _rdp_pure(e), hs, hs, e, 0.0,
                        e * e / 2, False, pure_eps=e)   # e * e: inf (not OverflowError) for absurd ε


def sparse_vector(eps1: float, eps2: float, max_positives: int) -> PrivacyCurve:
    """Sparse vector with one ε₁-DP threshold noise and ε₂/c-DP query noise (at sensitivity 2Δ), cut-off c.

    RDP at order α (digest 004 §5.2; ``R_ε`` is the RDP of any ε-DP mechanism, the curve of :func:`pure`):
    the classic (ε₁ + ε₂)-DP bound ``R_{ε₁+ε₂}(α)``, and for c = 1 the least of it and the thesis's (7.3),
    ``R_{ε₁}(α) + ε₂`` (query noise with ε_ν(∞) = ε₂ at sensitivity 2Δ). The privacy profile is the
    classic one.

    Proof of (7.3) for the stream of :mod:`dpframe.interactive.svt` (c = 1; thesis §7.6.1, re-derived).
    Integers throughout: ρ ~ DLap(Δ/ε₁) with pmf p, ν_i ~ DLap(2Δ/ε₂), "above" iff q_i + ν_i ≥ T + ρ, halt at
    the first "above". Before it every answer is "below", so the i-th query is a fixed function of i (and
    of the analyst's coins, conditioned on); a stream closed after k "below"s is the stream whose (k+1)-th
    query always answers "above" (the same on both datasets). The output is the stopping index K. Fix an
    ordered neighbouring pair (D, D'); |q_i(D) − q_i(D')| ≤ Δ. Substituting z = u − Δ for the threshold noise,

        P_D[K = k] = Σ_u p(u)·λ(u)·a_k(u),   P_D'[K = k] = Σ_u p(u)·b_k(u),   λ(u) = p(u − Δ)/p(u),

    where a_k(u) is the law of K at threshold T + u for the *shifted* queries q_i(D) + Δ and b_k(u) that of
    the queries q_i(D'). (1) Jensen for the jointly convex (x, y) ↦ x^α y^{1−α} (α > 1):
    Σ_k P_D[k]^α P_D'[k]^{1−α} ≤ Σ_u p(u) λ(u)^α Σ_k a_k(u)^α b_k(u)^{1−α}. (2) For fixed u let
    X_k = a_k(u)/b_k(u): each "below" factor P[q_i(D) + Δ + ν < T + u]/P[q_i(D') + ν < T + u] ≤ 1 because
    q_i(D) + Δ ≥ q_i(D'); the "above" factor is ≤ e^{ε₂} because the two statistics differ by a shift in
    [0, 2Δ] and DLap(2Δ/ε₂) tails move by at most e^{ε₂} under it. So 0 ≤ X_k ≤ e^{ε₂}, and
    Σ_k b_k X_k = Σ_k a_k(u) ≤ 1 (a is a sub-probability law of K), hence
    Σ_k b_k X_k^α ≤ e^{(α−1)ε₂}·Σ_k b_k X_k ≤ e^{(α−1)ε₂} (X^α ≤ X·e^{(α−1)ε₂} on [0, e^{ε₂}]). (3)
    Σ_u p(u) λ(u)^α = exp((α−1)·D_α(p(· − Δ)‖p)) and p(u − Δ)/p(u) ∈ [e^{−ε₁}, e^{ε₁}], so that divergence
    is at most R_{ε₁}(α), the largest α-Rényi divergence of two laws with likelihood ratio in that range
    (attained by randomized response). Together: D_α(K_D‖K_D') ≤ R_{ε₁}(α) + ε₂ for every ordered pair, so
    both directions. The classic bound holds because the stream is (ε₁ + ε₂)-DP (Lyu et al. 2017); the
    minimum of two valid bounds is valid. ``tests/interactive/test_svt_rdp.py`` checks the curve against the
    exact Rényi divergence of small discrete streams.

    The thesis's length-capped bound (Thm. 7.2.7, ``R_{ε₁} + c·R_{ε₂/c} + log Σ_{j≤c} C(k, j)/(α−1)``)
    is not used: with Laplace noise it never beats ``R_{ε₁+ε₂}`` (checked on a grid of ε₁, ε₂, c, k, α).

    Example:
        >>> [round(float(v), 4) for v in sparse_vector(0.1, 0.9, 1).rdp_at([8, 64])]   # ε-DP(1): 0.9552, 0.995
        [0.9367, 0.9898]

    """
    e1 = positive(eps1, "eps1", "pass ε₁ > 0")
    e2 = positive(eps2, "eps2", "pass ε₂ > 0")
    if isinstance(max_positives, bool) or not isinstance(max_positives, int) or max_positives < 1:
        raise BudgetError(f"must be an int ≥ 1, got {shown(max_positives)}", argument="max_positives",
                          fix="pass 1 or more")
    total = pure(e1 + e2)
    assert total.rdp is not None
    rdp = total.rdp
    if max_positives == 1:
        r1, classic = _rdp_pure(e1), total.rdp

        def rdp(a: Array) -> Array:
            return np.minimum(classic(a), r1(a) + e2)

    return PrivacyCurve(f"sparse vector(ε₁={e1:g}, ε₂={e2:g}, c={max_positives})",
                        {"kind": "sparse_vector", "eps1": e1, "eps2": e2, "max_positives": max_positives},
                        rdp, total.hs, total.hs_rev, e1 + e2, 0.0, total.rho, False, pure_eps=e1 + e2)


#: Longest stream a length-capped sparse vector may declare (its log-term sums min(c, k) + 1 binomials).
MAX_SVT_LENGTH = 10**6

#: Orders γ of the Hölder step in (7.2), as fractions of the way from 1 to (σ₂/σ₁)² (where the moment diverges).
_SVT_GAMMA_FRACTIONS = np.array([0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65,
                                 0.7, 0.75, 0.8, 0.85, 0.9])

_TERMS = 64          # pmf terms summed exactly before a tail is bounded by an integral
_MOMENT_POINTS = 40_000   # beyond this many integers z, the moment sum is bounded block by block


def _log_norm_bounds(s: float) -> tuple[float, float]:
    """(lower, upper) bounds of log Σ_{x∈ℤ} exp(−x²/(2s²)) (direct sum + integral tail; Poisson summation)."""
    sp = _special()
    x = np.arange(1, _TERMS + 1, dtype=np.float64)
    direct = 1 + 2 * float(np.exp(-x * x / (2 * s * s)).sum())
    # Σ_{x>J} f(x) ≤ ∫_J^∞ f (f decreasing); Poisson: Z = √(2π)s·Σ_k exp(−2π²s²k²) ≥ √(2π)s
    upper = direct + 2 * s * math.sqrt(2 * math.pi) * float(sp.ndtr(-_TERMS / s))
    root = math.sqrt(2 * math.pi) * s
    q = math.exp(-2 * math.pi ** 2 * s * s)
    if q < 0.5:
        upper = min(upper, root * (1 + 2 * q / (1 - q)))
    return math.log(max(direct, root)), math.log(upper)


def _log_tail_lower(m: Array, s: float) -> Array:
    """Lower bounds of log P[ν ≥ m] for ν ~ N_ℤ(0, s²) and integers m (float64 array)."""
    sp = _special()
    log_low, log_up = _log_norm_bounds(s)
    j = np.arange(_TERMS + 1, dtype=np.float64)
    out = np.empty(m.shape)
    pos = m >= 0
    n = np.where(pos, m, -m + 1)        # m < 0: P[ν ≥ m] = 1 − P[ν ≥ |m| + 1]
    out_n = np.empty(m.shape)
    for lo in range(0, m.size, 4096):
        nn = n[lo:lo + 4096]
        x = nn[:, None] + j[None, :]
        head = sp.logsumexp(-x * x / (2 * s * s), axis=1)
        out_n[lo:lo + 4096] = head
    log_root = math.log(s * math.sqrt(2 * math.pi))
    # m ≥ 0: Σ_{x>m+J} f(x) ≥ ∫_{m+J+1}^∞ f (each f(x) ≥ ∫_x^{x+1} f), over Z ≤ e^{log_up}
    tail_low = log_root + sp.log_ndtr(-(n + _TERMS + 1) / s)
    low = np.logaddexp(out_n, tail_low) - log_up
    # m < 0: P[ν ≥ |m|+1] ≤ (Σ_{x=n}^{n+J} f + ∫_{n+J}^∞ f)/Z with Z ≥ e^{log_low}; and P[ν ≥ m] ≥ P[ν ≥ 0] > 1/2
    tail_up = log_root + sp.log_ndtr(-(n + _TERMS) / s)
    up = np.minimum(np.logaddexp(out_n, tail_up) - log_low, 0.0)
    with np.errstate(divide="ignore"):
        neg = np.maximum(np.log(-np.expm1(up)), math.log(0.5))
    out[pos] = low[pos]
    out[~pos] = neg[~pos]
    return out


def gaussian_svt_log_moments(sigma1: float, sigma2: float, threshold: int, gammas: Array) -> Array:
    """Upper bounds of log M_γ = log E_{z∼N_ℤ(0,σ₁²)}[P[ν ≥ T + z]^{−γ}], ν ∼ N_ℤ(0, σ₂²), for each γ.

    M_γ bounds E_z[E[K|z]^γ] of a c = 1 sparse vector on nonnegative queries (see
    :func:`gaussian_sparse_vector`); it is finite iff γ < (σ₂/σ₁)². Computed in log space (M_γ is
    astronomically large when T ≫ σ₁) as a sum over the integers z, every piece an upper bound: the pmf
    of z over a lower bound of its normaliser, the tail probability from below (64 exact terms plus an
    integral), integers beyond ±40 widths of the summand by geometric bounds (the summand is log-concave
    there), and — when σ₁ is large — blocks of integers each bounded by its largest pmf value times its
    largest P[·]^{−γ}.

    Example (thesis digest O-16 is the continuous σ₁ = 1, σ₂ = √3, γ = 2: 12.9644 at T = 0, 161.4347 at T = 1;
    σ₁ = 100 on the integers is close to it):
        >>> [round(float(v), 2) for v in np.exp(gaussian_svt_log_moments(100.0, 100 * 3 ** 0.5, 0, np.array([2.0])))]
        [12.91]

    """
    s1, s2 = float(sigma1), float(sigma2)
    g = np.asarray(gammas, dtype=np.float64)
    if np.any(g <= 1) or np.any(g * s1 * s1 >= s2 * s2):
        raise BudgetError("the moment is finite only for 1 < γ < (σ₂/σ₁)²", argument="gammas",
                          fix="pass orders between 1 and (σ₂/σ₁)²")
    if abs(threshold) > 2**52 or max(s1, s2) > 2**40:   # beyond exact float integers: the vacuous bound
        return np.full(g.shape, math.inf)
    bar = float(threshold)
    log_z1_low, _ = _log_norm_bounds(s1)
    _, log_z2_up = _log_norm_bounds(s2)
    gmax = float(g.max())
    kappa = 1 / (s1 * s1) - gmax / (s2 * s2)
    z_peak = gmax * bar * s1 * s1 / (s2 * s2 - gmax * s1 * s1)
    zlo = -math.ceil(40 * s1) - 1
    zhi = math.ceil(max(z_peak, 0.0) + 40 / math.sqrt(kappa)) + 1
    z0 = max(zhi, -bar)        # T + z ≥ 0 from here on
    n = zhi - zlo + 1
    width = max(1, math.ceil(n / _MOMENT_POINTS))
    a = np.arange(zlo, zhi + 1, width, dtype=np.float64)
    b = np.minimum(a + width - 1, zhi)
    nearest = np.clip(0.0, a, b)
    log_p = np.log(b - a + 1) - nearest * nearest / (2 * s1 * s1) - log_z1_low
    log_s = _log_tail_lower(bar + b, s2)
    left_s = float(_log_tail_lower(np.array([bar + zlo]), s2)[0])
    out = np.empty(g.shape)
    for i, gamma in enumerate(g.flat):
        parts = list(log_p - gamma * log_s)
        # z < zlo: pmf tail Σ_{j≥1} exp(−(zlo−j)²/2σ₁²) ≤ exp(−zlo²/2σ₁²)·r/(1−r), r = exp(−|zlo|/σ₁²); P ≥ P[ν ≥ T+zlo]
        t = -zlo / (s1 * s1)
        parts.append(-zlo * zlo / (2 * s1 * s1) - t - math.log(-math.expm1(-t)) - log_z1_low - gamma * left_s)
        # zhi < z < z0 (T + z < 0, so P ≥ P[ν ≥ 0] > 1/2): summand ≤ 2^γ·pmf; the pmf's right tail as on the left
        t = zhi / (s1 * s1)
        parts.append(gamma * math.log(2) - zhi * zhi / (2 * s1 * s1) - t - math.log(-math.expm1(-t)) - log_z1_low)
        # z ≥ z0 (T + z ≥ 0; P ≥ pmf(T+z)): summand ≤ exp(G(z)), G(z) = −z²/2σ₁² + γ((T+z)²/2σ₂² + log Z₂) − log Z₁,
        # concave, decreasing beyond its peak z_peak < zhi ≤ z0: Σ_{z≥z0} ≤ exp(G(z0))/(1−r), r = exp(G'(z0)) < 1
        big = -z0 * z0 / (2 * s1 * s1) + gamma * ((bar + z0) ** 2 / (2 * s2 * s2) + log_z2_up) - log_z1_low
        slope = -z0 / (s1 * s1) + gamma * (bar + z0) / (s2 * s2)
        assert slope < 0
        parts.append(big - math.log(-math.expm1(slope)))
        out.flat[i] = float(_special().logsumexp(np.array(parts))) + 1e-9   # + 1e-9: float rounding (upward)
    return out


def _log_binomial_sum(k: int, c: int) -> float:
    """The log of Σ_{j=0}^{min(c,k)} C(k, j), the number of outputs of a c-positive, length-k stream."""
    if c >= k:
        return k * math.log(2)
    j = np.arange(c + 1, dtype=np.float64)
    sp = _special()
    terms = sp.gammaln(k + 1) - sp.gammaln(j + 1) - sp.gammaln(k - j + 1)
    return float(sp.logsumexp(terms))


def gaussian_sparse_vector(sigma1: float, sigma2: float, sensitivity: float, max_positives: int,
                           threshold: float, max_length: int | None = None,
                           nonnegative: bool = False) -> PrivacyCurve:
    """Gaussian sparse vector: one threshold noise N_ℤ(0, σ₁²), query noise N_ℤ(0, σ₂²), cut-off c, no refresh.

    The stream answers ⊤ iff q_i + ν_i ≥ T + ρ for integer statistics q_i of sensitivity Δ (integer
    noise ρ, ν_i; a non-integer T acts as ⌈T⌉, since q_i + ν_i − ρ is an integer). With
    ε_ρ(α) = αΔ²/(2σ₁²) and ε_ν(α) = α(2Δ)²/(2σ₂²) (discrete Gaussian RDP is at most the continuous one,
    Canonne–Kamath–Steinke 2020), the RDP curve at order α is the least of the bounds that apply
    (thesis Ch. 7, digest 004 §5.2, with the digest's corrections):

    * ``max_length`` k given (any c; Thm 7.2.7, Remark 7.2.3 for c = 1):
      ε_ρ(α) + c·ε_ν(α) + log(Σ_{j≤c} C(k, j))/(α−1) — the log of the number of outputs.
    * c = 1 and ``nonnegative`` (every query is ≥ 0 on every dataset; (7.2)), minimised over a grid
      of γ ∈ (1, (σ₂/σ₁)²): ((α − (γ−1)/γ)/(α−1))·ε_ρ(γα/(γ−1)) + ε_ν(α) + log M_γ/(γ(α−1)),
      M_γ = E_{z}[E[K|z]^γ] bounded by :func:`gaussian_svt_log_moments`.

    Why M_γ bounds the moment for every nonnegative stream (the extremal stream is q ≡ 0): given the
    threshold noise ρ = z, K (the number of queries asked, up to and including the first ⊤) counts
    independent trials; trial i is ⊤ iff ν_i ≥ ⌈T⌉ + z − q_i, of probability P[ν ≥ ⌈T⌉ + z − q_i] ≥
    P[ν ≥ ⌈T⌉ + z] =: p(z) because q_i ≥ 0 (the tail is non-increasing). An adaptive analyst only
    chooses q_i after i − 1 ⊥'s, so each trial still succeeds with probability ≥ p(z) and K is
    stochastically dominated by a geometric variable: E[K|z] = Σ_{k≥0} P[K > k | z] ≤ Σ_k (1 − p(z))^k
    = 1/p(z) — i.e. 1/(1 − F_ν(T + z − 1)), not the thesis's F/(1 − F) = E[K|z] − 1 (the digest's
    off-by-one). The proof's fictitious queries q + Δ are nonnegative too. The Hölder step (exponents
    γ/(γ−1) and γ) gives the threshold term ((α − (γ−1)/γ)/(α−1))·ε_ρ(γα/(γ−1)) (the factor the thesis's
    Prop. 7.2.5 drops). Halting after k queries post-processes the uncapped stream, so both bounds
    hold together. Without ``max_length`` and for c > 1 or queries that can be negative no finite
    bound is known: refused (BudgetError naming ``max_length``).

    Example (ρ = 1/2 split as in ``sess.sparse_vector``: σ₁ = Δ·√((1+c)/(2ρ)), σ₂ = 2σ₁):
        >>> curve = gaussian_sparse_vector(2 ** 0.5, 2 * 2 ** 0.5, 1, 1, 0, max_length=100)
        >>> [round(float(v), 4) for v in curve.rdp_at([2, 8])]     # α/2 + log(101)/(α−1)
        [5.6151, 4.6593]

    """
    s1 = positive(sigma1, "sigma1", "pass the threshold noise's σ₁ > 0")
    s2 = positive(sigma2, "sigma2", "pass the query noise's σ₂ > 0")
    d = positive(sensitivity, "sensitivity", "pass the queries' sensitivity Δ")
    t = real(threshold, "threshold", "pass the threshold in statistic units")
    c = max_positives
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise BudgetError(f"must be an int ≥ 1, got {shown(c)}", argument="max_positives", fix="pass 1 or more")
    k = max_length
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not (1 <= k <= MAX_SVT_LENGTH)):
        raise BudgetError(f"must be None or an int in [1, {MAX_SVT_LENGTH:,}], got {shown(k)}",
                          argument="max_length", fix="pass the most queries the stream may test, e.g. 1000")
    if not isinstance(nonnegative, bool):
        raise BudgetError(f"must be True or False, got {shown(nonnegative)}", argument="nonnegative",
                          fix="pass True only if every query is ≥ 0 on every dataset")
    use_moment = nonnegative and c == 1
    if k is None and not use_moment:
        raise BudgetError("a Gaussian sparse vector has no finite RDP bound without a maximum length "
                          + ("for max_positives > 1" if c > 1 else "when queries can be negative"),
                          argument="max_length", fix="pass max_length=k (the stream halts after k queries)")
    r1 = d * d / (2 * s1 * s1)
    r2 = 4 * d * d / (2 * s2 * s2)
    fns: list[Fn] = []
    if k is not None:
        log_outputs = _log_binomial_sum(k, c)

        def capped(a: Array) -> Array:
            return a * (r1 + c * r2) + log_outputs / (a - 1)
        fns.append(capped)
    if use_moment:
        if s2 <= s1:
            raise BudgetError("the nonnegative-query bound needs σ₂ > σ₁", argument="sigma2",
                              fix="pass σ₂ = 2σ₁ (as sess.sparse_vector does), or a max_length")
        gam = 1 + ((s2 / s1) ** 2 - 1) * _SVT_GAMMA_FRACTIONS
        log_m = gaussian_svt_log_moments(s1, s2, math.ceil(t), gam)

        def moment(a: Array) -> Array:
            x = np.asarray(a, dtype=np.float64)[..., None]
            thr = (x - (gam - 1) / gam) / (x - 1) * r1 * (gam * x / (gam - 1))
            out: Array = np.min(thr + r2 * x + log_m / (gam * (x - 1)), axis=-1)
            return out
        fns.append(moment)

    def rdp(a: Array) -> Array:
        out: Array = np.min(np.stack([f(a) for f in fns]), axis=0)
        return out

    spec = {"kind": "gaussian_sparse_vector", "sigma1": s1, "sigma2": s2, "sensitivity": d, "max_positives": c,
            "threshold": t, "max_length": k, "nonnegative": nonnegative}
    noise = f"σ₁={s1:g}, σ₂={s2:g}, Δ={d:g}, T={t:g}" if use_moment else f"σ₁/Δ={s1 / d:g}, σ₂/Δ={s2 / d:g}"
    label = (f"Gaussian sparse vector({noise}, c={c}"
             + (f", k={k}" if k is not None else "") + (", q ≥ 0" if nonnegative else "") + ")")
    return PrivacyCurve(label, spec, rdp, None, None, None, 0.0, None, False)


def zcdp(rho: float, delta0: float = 0.0) -> PrivacyCurve:
    """Any ρ-zCDP mechanism (ε(α) = αρ), optionally δ0-approximate."""
    r = positive(rho, "rho", "pass rho > 0")
    d0 = _delta0(delta0)
    return PrivacyCurve(f"{r:g}-zCDP" + (f" (δ0={d0:g})" if d0 else ""), {"kind": "zcdp", "rho": r, "delta0": d0},
                        _rdp_linear(r), None, None, None, d0, r, False)


def approx(epsilon: float, delta: float) -> PrivacyCurve:
    """Any (ε, δ)-DP mechanism: δ-approximately ε-DP (its tight dominating pair: δ + (1−δ)·RR_ε)."""
    base = pure(epsilon)
    d0 = _delta0(delta)
    assert base.hs is not None
    hs = _hs_mixture(base.hs, d0)
    return PrivacyCurve(f"(ε={base.eps_inf:g}, δ={d0:g})-DP", {"kind": "approx", "epsilon": base.eps_inf,
                        "delta": d0}, base.rdp, hs, hs, base.eps_inf, d0, base.rho, False, pure_eps=base.eps_inf)


def discrete_laplace(scale: float, sensitivity: int = 1) -> PrivacyCurve:
    """Discrete Laplace noise (pmf ∝ e^{−|k|/t}) on one integer statistic of sensitivity Δ (exact curves)."""
    t = positive(scale, "scale", "pass the discrete Laplace scale t > 0")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or not (1 <= sensitivity <= 2**53):
        raise BudgetError(f"must be an int in [1, 2**53], got {shown(sensitivity)}", argument="sensitivity",
                          fix="the sensitivity of an integer statistic is a positive integer")
    eps = ratio(sensitivity, t, "scale", "ε = Δ/t")
    hs = _hs_discrete_laplace(t, sensitivity)
    return PrivacyCurve(f"discrete Laplace(t={t:g}, Δ={sensitivity})",
                        {"kind": "discrete_laplace", "scale": t, "sensitivity": sensitivity},
                        _rdp_discrete_laplace(t, sensitivity), hs, hs, eps, 0.0, eps * eps / 2, False, pure_eps=eps)


def discrete_gaussian(sigma: float, sensitivity: float = 1.0) -> PrivacyCurve:
    """Discrete Gaussian noise N_Z(0, σ²) with L2 sensitivity Δ: ε(α) = αΔ²/(2σ²) (Canonne et al. 2020).

    Its PLD is derived from this RDP curve (valid for vectors of any dimension).
    """
    s = positive(sigma, "sigma", "pass sigma > 0")
    d = positive(sensitivity, "sensitivity", "pass the L2 sensitivity")
    mu = ratio(d, s, "sigma", "Δ/σ")
    rho = mu * mu / 2
    return PrivacyCurve(f"discrete Gaussian(σ={s:g}, Δ={d:g})",
                        {"kind": "discrete_gaussian", "sigma": s, "sensitivity": d},
                        _rdp_linear(rho), None, None, None, 0.0, rho, False)


def exponential(epsilon: float) -> PrivacyCurve:
    """An ε-bounded-range mechanism: the exponential mechanism exp(ε·u/(2Δ)), report-noisy-max (Gumbel)."""
    base = pure(epsilon)
    e = float(base.eps_inf)  # type: ignore[arg-type]
    hs = _hs_bounded_range(e)
    assert base.rdp is not None
    pure_rdp = base.rdp
    return PrivacyCurve(f"exponential mechanism(ε={e:g})", {"kind": "exponential", "epsilon": e},
                        lambda a: np.minimum(pure_rdp(a), a * (e * e / 8)), hs, hs, e, 0.0, e * e / 8, False,
                        pure_eps=e)


def threshold_test(sigma: float, threshold: float, lower: int, upper: int) -> PrivacyCurve:
    """Noisy threshold test 1[c + N(0, σ²) ≥ T] on a count c ∈ [lower, upper] (thesis Thm 4.3.1).

    The output is binary, so its RDP curve and profile are exact maxima over the neighbour pairs
    (c, c ± 1); subsampled versions stay binary and are computed exactly too.

    Validity condition: [``lower``, ``upper``] must contain every count the test can *see*. After
    ``.subsampled(rate)`` that is the count on the Poisson sample, not on the full data: the exact
    subsampled curves take the max over mixtures of the pairs (c, c ± 1) with c in the range (valid by
    joint convexity of the divergences only while the sampled count stays in it), and sampling can push
    the count below a ``lower`` that holds for the full data. Use ``lower=0`` for a subsampled test
    unless the sampled count is bounded below by construction.
    """
    s = positive(sigma, "sigma", "pass sigma > 0")
    t = real(threshold, "threshold", "pass the public threshold T as a finite number")
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_) for v in (lower, upper)) or not (
            0 <= lower <= upper <= 2**53):
        raise BudgetError(f"need integers 0 ≤ lower ≤ upper ≤ 2**53, got {shown(lower)}, {shown(upper)}",
                          argument="lower", fix="pass the public range of the count")
    lo, hi = int(lower), int(upper)
    if hi - lo > MAX_COUNT_RANGE:
        raise BudgetError(f"the count range [{lo}, {hi}] has more than {MAX_COUNT_RANGE} values (the curves are "
                          "exact maxima over every count in it)", argument="upper",
                          fix=f"pass a range of at most {MAX_COUNT_RANGE} counts around the values the count can take")
    spec = {"kind": "threshold_test", "sigma": s, "threshold": t, "lower": lo, "upper": hi}
    return _binary_family(f"threshold test(σ={s:g}, T={t:g}, c∈[{lo},{hi}])", spec,
                          _threshold_pairs(s, t, lo, hi), 1.0)


def _threshold_pairs(sigma: float, threshold: float, lower: int, upper: int) -> Array:
    """Log-probabilities of P[noisy ≥ T] for c and its neighbour c ± 1: rows (log p, log(1−p), log q, log(1−q)).

    Kept in log space (log Φ, not Φ): a probability that underflows as a float still has its exact log, so the
    divergences of far-away counts are not cut off.
    """
    c = np.arange(lower, upper + 1, dtype=np.float64)
    sp = _special()
    with np.errstate(over="ignore", invalid="ignore"):
        z = (c - threshold) / sigma
        rows = [np.stack([sp.log_ndtr(z), sp.log_ndtr(-z), sp.log_ndtr(z + d / sigma), sp.log_ndtr(-z - d / sigma)],
                         axis=1) for d in (1, -1)]
    return np.concatenate(rows)


def _binary_family(label: str, spec: dict[str, Any], pairs: Array, rate: float) -> PrivacyCurve:
    """Exact curves of a mechanism with a binary output over a finite set of neighbour pairs (P, Q).

    ``pairs`` holds rows (log p, log(1−p), log q, log(1−q)) of the output "1". Under Poisson subsampling
    the remove pair is ((1−γ)Q + γP, Q) and the add pair its reverse, so both directions are included.
    The profile is H_x = max over pairs of (p − xq)_+ + ((1−p) − x(1−q))_+ = max(0, 1 − x, p − xq,
    (1−p) − x(1−q)) (the two parts add up to 1 − x), the upper envelope of lines in x, evaluated by binary
    search; the RDP curve is evaluated in blocks (bounded memory for wide count ranges).
    """
    lp, l1p, lq, l1q = (pairs[:, i] for i in range(4))
    if rate < 1:
        la = np.logaddexp(math.log1p(-rate) + lq, math.log(rate) + lp)        # A = (1−γ)Q + γP
        l1a = np.logaddexp(math.log1p(-rate) + l1q, math.log(rate) + l1p)
        lp, l1p, lq, l1q = (np.concatenate(v) for v in ((la, lq), (l1a, l1q), (lq, la), (l1q, l1a)))
    else:
        lp, l1p, lq, l1q = (np.concatenate(v) for v in ((lp, lq), (l1p, l1q), (lq, lp), (l1q, l1p)))
    step = max(1, BLOCK // len(lp))

    def rdp(a: Array) -> Array:
        a = np.asarray(a, dtype=np.float64)
        out = np.empty(len(a))
        for i in range(0, len(a), step):
            b = a[i:i + step, None]
            with np.errstate(invalid="ignore", over="ignore"):
                one, zero = b * lp + (1 - b) * lq, b * l1p + (1 - b) * l1q
                v = np.logaddexp(np.nan_to_num(one, nan=-math.inf), np.nan_to_num(zero, nan=-math.inf)) / (b - 1)
            out[i:i + step] = np.max(v, axis=1)        # 0·log 0 terms (p = q = 0) count as 0 above
        return out

    with np.errstate(under="ignore"):
        hull = _upper_envelope(np.concatenate([-np.exp(lq), -np.exp(l1q), [0.0, -1.0]]),
                               np.concatenate([np.exp(lp), np.exp(l1p), [0.0, 1.0]]))

    def hs(e: Array) -> Array:
        with np.errstate(over="ignore"):
            x = np.minimum(np.exp(np.asarray(e, dtype=np.float64)), 1e308)   # a smaller x only raises H: sound
        return np.asarray(np.clip(_evaluate_envelope(hull, x), 0.0, 1.0))

    spec = {**spec, "rate": rate} if rate < 1 else spec
    curve = PrivacyCurve(label, spec, rdp, hs, hs, None, 0.0, None, False, rate)
    return _BinaryCurve(curve, pairs)


Envelope = tuple[Array, Array, Array]


def _upper_envelope(slopes: Array, intercepts: Array) -> Envelope:
    """The upper envelope of the lines y = m·x + b: (slopes, intercepts, breakpoints), slopes increasing.

    Example:
        >>> env = _upper_envelope(np.array([-1.0, 0.0, -0.5]), np.array([1.0, 0.0, 0.9]))
        >>> [float(v) for v in _evaluate_envelope(env, np.array([0.0, 1.0, 10.0]))]
        [1.0, 0.4, 0.0]

    """
    order = np.lexsort((intercepts, slopes))               # by slope, then intercept
    m, b = slopes[order], intercepts[order]
    last = np.append(m[1:] != m[:-1], True)                # of equal slopes keep the largest intercept
    ms, bs = m[last].tolist(), b[last].tolist()
    hm: list[float] = []
    hb: list[float] = []
    cut: list[float] = []
    for mi, bi in zip(ms, bs):
        while hm:
            x = (hb[-1] - bi) / (mi - hm[-1])                # where the new (steeper) line overtakes the last
            if cut and x <= cut[-1]:
                hm.pop()
                hb.pop()
                cut.pop()
                continue
            cut.append(x)
            break
        hm.append(mi)
        hb.append(bi)
    return np.array(hm), np.array(hb), np.array(cut)


def _evaluate_envelope(env: Envelope, x: Array) -> Array:
    m, b, cut = env
    k = np.searchsorted(cut, x, side="right")
    with np.errstate(over="ignore"):
        return np.asarray(m[k] * x + b[k])


class _BinaryCurve(PrivacyCurve):
    """A binary-output curve whose subsampling is computed exactly."""

    def __init__(self, curve: PrivacyCurve, pairs: Array) -> None:
        for name in curve.__dataclass_fields__:
            object.__setattr__(self, name, getattr(curve, name))
        object.__setattr__(self, "_pairs", pairs)

    def subsampled(self, rate: float) -> PrivacyCurve:
        g = check_rate(rate)
        if g == 1:
            return self
        assert self.spec is not None
        base = {k: v for k, v in self.spec.items() if k != "rate"}
        pairs = self._pairs  # type: ignore[attr-defined]
        if self.rate < 1:  # compose the rates: sampling at a then b keeps a unit w.p. a·b
            g, pairs = g * self.rate, pairs
        return _binary_family(f"{self.label} sampled at rate {g:g}", base, pairs, g)


def from_profile(delta: Callable[[float], float], *, label: str = "custom (δ(ε) only)") -> PrivacyCurve:
    """A mechanism known only by its privacy profile ε ↦ δ(ε) ≥ sup over neighbours (both orders).

    The PLD accountant composes it via a dominating pair built from the profile (thesis Lemma 3.3.3 and
    Cor. 3.5.1: connect-the-dots of the convex envelope); the RDP and zCDP accountants cannot. ``delta``
    receives public values only (the accountant's ε grid), never data.
    """
    if not callable(delta):
        raise BudgetError(f"expected a function ε ↦ δ(ε), got {shown(delta)}", argument="delta",
                          fix="pass e.g. lambda eps: max(0.0, 1e-6 - eps)")
    _check_label(label)

    def hs(e: Array) -> Array:
        values = np.array([_returned(delta, float(v), "delta") for v in np.asarray(e)])
        return np.asarray(np.clip(values, 0.0, 1.0))      # a NaN stays: it is read as the vacuous δ = 1

    return PrivacyCurve(label, None, None, hs, hs, None, 0.0, None, False)


def _check_label(label: object) -> None:
    if not isinstance(label, str):
        raise BudgetError(f"must be a string, got {shown(label)}", argument="label", fix="pass a short description")


def _returned(function: Callable[[float], object], x: float, argument: str) -> float:
    """``function(x)`` for a user's curve function: a number (NaN allowed: read as the vacuous bound).

    An exception the function raises becomes a BudgetError naming the argument (chained to the cause).
    """
    try:
        value = function(x)
    except Exception as e:
        raise BudgetError(f"the function raised {type(e).__name__}: {e} at {x!r}", argument=argument,
                          fix="make the function return a number (math.inf for no bound) for every input") from e
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise BudgetError(f"the function returned {shown(value)}, not a number", argument=argument,
                          fix="return a float from the function")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def from_rdp(rdp: Callable[[float], float], *, label: str = "custom (RDP only)",
             eps_inf: float | None = None) -> PrivacyCurve:
    """A mechanism known only by its RDP curve α ↦ ε(α); subsampling uses the general bound.

    ``rdp`` receives public values only (the accountant's orders α), never data.
    """
    if not callable(rdp):
        raise BudgetError(f"expected a function α ↦ ε(α), got {shown(rdp)}", argument="rdp",
                          fix="pass e.g. lambda alpha: alpha / 8")
    _check_label(label)
    cap = None if eps_inf is None else nonnegative(eps_inf, "eps_inf", "pass the pure ε-DP bound, or None")

    def f(a: Array) -> Array:
        return rdp_out([_returned(rdp, float(v), "rdp") for v in np.asarray(a)])   # NaN → ∞, below 0 → 0

    return PrivacyCurve(label, None, f, None, None, cap, 0.0, None, False)


def composition(curves: Sequence[PrivacyCurve], *, grid: float = 1e-4) -> PrivacyCurve:
    """Several mechanisms run on the same input, as one mechanism.

    Use it when the mechanisms share one Poisson sample: ``composition([a, b]).subsampled(rate)`` is the
    cost of running a and b on the same sample; ``a.subsampled(rate)`` composed with
    ``b.subsampled(rate)`` is the cost of two *independent* samples and under-reports here. Facts of the
    composition (each proven for adaptive composition of the parts):

    * RDP: ε(α) adds up (Mironov 2017, Prop. 1); the pure bound ε∞ and ρ add up; the δ0 parts add up;
    * profile: the product of the parts' dominating pairs dominates (thesis Thm 3.3.4); it is computed
      (on first use) as the composed discretised PLD at step ``grid``, in each neighbour direction;
    * Gaussian parts only: noise σᵢ on statistics of L2 sensitivity Δᵢ is one Gaussian mechanism with
      Δ/σ = √(Σ (Δᵢ/σᵢ)²) (stack the statistics, divided by σᵢ: the L2 sensitivity of the stack is at
      most that), so the tight subsampling bound (thesis Thm 2.3.4) still applies.

    Subsampling the composition uses the general bound (Thm 2.3.1; the tight one needs condition (2.2),
    which is not known for a composition of different families) capped at log(1 + γ(e^{Σε∞} − 1)).

    Example:
        >>> c = composition([pure(1.0), pure(1.0)])
        >>> round(c.subsampled(0.01).eps_inf, 6)                 # log(1 + 0.01(e² − 1)), not 2·log(1 + 0.01(e − 1))
        0.061933
        >>> g = composition([gaussian(sigma=3.0), gaussian(sigma=4.0)])
        >>> round(float(g.rdp_at([2.0])[0]), 6) == round(2 * (1 / 9 + 1 / 16) / 2, 6)   # one Gaussian, Δ/σ = 5/12
        True

    """
    parts = list(curves) if isinstance(curves, Sequence) else []
    if not parts or not all(isinstance(c, PrivacyCurve) for c in parts):
        raise BudgetError(f"expected a non-empty list of privacy curves, got {shown(curves)}", argument="curves",
                          fix="pass e.g. [acc.laplace(scale=2.0), acc.gaussian(sigma=3.0)]")
    if len(parts) == 1:
        return parts[0]
    label = f"composition of ({'; '.join(c.label for c in parts)})"
    h = check_grid(grid)
    mu = math.inf
    if all(c.spec is not None and c.spec.get("kind") == "gaussian" and "rate" not in c.spec for c in parts):
        mu = math.hypot(*(c.spec["sensitivity"] / c.spec["sigma"] for c in parts))  # type: ignore[index]
    if math.isfinite(mu):   # (an overflowing μ is composed like any other mechanisms)
        one = gaussian(sigma=1.0, sensitivity=mu)
        return PrivacyCurve(label, one.spec, one.rdp, one.hs, one.hs_rev, None, 0.0, one.rho, True)
    specs = [c.spec for c in parts]
    spec = None if any(x is None for x in specs) else {"kind": "composition", "parts": specs}
    rdps = [c.rdp for c in parts]
    rdp = None
    if all(f is not None for f in rdps):
        def rdp(a: Array) -> Array:
            return np.asarray(sum(f(a) for f in rdps))  # type: ignore[misc]

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else math.fsum(values)  # type: ignore[arg-type]

    from dpframe.accounting.pld import composition_profile

    hs, hs_rev = composition_profile(parts, h)
    return PrivacyCurve(label, spec, rdp, hs, hs_rev, total([c.eps_inf for c in parts]),
                        min(1.0, math.fsum(c.delta0 for c in parts)), total([c.rho for c in parts]), False,
                        pure_eps=total([c.pure_eps for c in parts]))


def _composition_of_specs(parts: list[dict[str, Any]]) -> PrivacyCurve:
    return composition([from_json(json.dumps(p)) for p in parts])


def _delta0(value: object) -> float:
    d = nonnegative(value, "delta", "pass a δ such as 1e-7")
    if d >= 1:
        raise BudgetError(f"must be in [0, 1), got {shown(value)}", argument="delta", fix="pass a δ such as 1e-7")
    return d


_KINDS: dict[str, Callable[..., PrivacyCurve]] = {
    "gaussian": gaussian, "laplace": laplace, "randomized_response": randomized_response, "pure": pure,
    "zcdp": zcdp, "approx": approx, "discrete_laplace": discrete_laplace, "discrete_gaussian": discrete_gaussian,
    "exponential": exponential, "threshold_test": threshold_test, "sparse_vector": sparse_vector,
    "gaussian_sparse_vector": gaussian_sparse_vector,
    "composition": _composition_of_specs,
}
