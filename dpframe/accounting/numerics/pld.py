"""Privacy-loss distributions: discretised dominating pairs, composed by FFT.

For a dominating pair with hockey-stick profile f(x) = H_x(P‖Q) (and its reverse), :func:`discretize`
takes f at the points x_j = e^{jh} of a uniform privacy-loss grid and builds the discrete pair whose
profile is the chord interpolation of those points ("connect the dots", Doroshenko et al. 2022): the loss
atom at jh gets mass p_j = x_j·(s_j − s_{j−1}) (s = chord slopes), the mass beyond the top point goes to
+∞. f is convex, so the chords lie above it: the discrete pair *dominates* the mechanism (pessimistic;
thesis Lemma 3.3.3 and Cor. 3.5.1 say any convex profile bound is a dominating pair, which is also how a
mechanism known only by δ(ε) is composed).

Composition of dominating pairs dominates the composition (thesis Thm 3.3.4), and the loss of a product
pair is the sum of losses, so the composed loss distribution is the convolution: the product of the
characteristic functions on the grid (an FFT), with heterogeneous mechanisms and multiplicities handled
as Π φ_i^{k_i} (:func:`compose_pairs`). The FFT window is chosen from Chernoff bounds on the composed
moment-generating function so that at most τ = 1e-15 mass lies outside on each side; that mass is added
to δ (cyclic wrap-around only adds mass inside the window, which can only increase δ). δ(ε) =
Σ_j p_j(1 − e^{ε − jh})_+ + p_∞ (:func:`delta_at`, :func:`epsilon_at`).

Example:
    >>> from dpframe.accounting.numerics.profiles import hs_gaussian
    >>> f = hs_gaussian(1 / 85.0)
    >>> c = compose_pairs([(f, f, 8192)], 1e-4)
    >>> round(max(epsilon_at(p, s, extra, c.grid, 1e-5) for p, s, extra in c.directions), 3)
    4.708

"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpframe.accounting.numerics.common import BLOCK, E_MAX, Fn, U
from dpframe.errors import DPFrameError
from dpframe.sealed import frozen_array

TAIL = 1e-15          # mass allowed outside the FFT window on each side (added to δ)
ATOM_TAIL = 1e-18     # profile value at which a single mechanism's grid stops (rest → +∞)
MAX_POINTS = 1 << 20  # grid points per side of one mechanism at most (beyond: the rest of δ goes to +∞)
LOSS_MAX = 700.0      # largest loss of one mechanism's grid: x = e^{loss} must stay a finite float
MAX_WINDOW = 1 << 22  # FFT window of a composition at most (beyond: the grid is coarsened)


@dataclass(frozen=True)
class DiscretePLD:
    """A sub-probability distribution of privacy loss on the grid {j·h}: p[i] at (start + i)·h, plus p_inf."""

    start: int
    p: np.ndarray
    p_inf: float
    err: float = 0.0
    """A bound on ‖p − p*‖₁ + |p_inf − p*_inf| against the masses p* of the exact envelope (:func:`envelope_error`)."""




def _reach(h: float) -> int:
    """Grid steps of one side at step h: at most :data:`MAX_POINTS`, and losses at most :data:`LOSS_MAX`."""
    steps = LOSS_MAX / h          # ∞ for a subnormal h
    return MAX_POINTS if steps >= MAX_POINTS else max(0, math.floor(steps))


def _value(f: Fn, e: float) -> float:
    with np.errstate(all="ignore"):
        return float(f(np.array([e]))[0])


def _grid_end(f: Fn, h: float) -> int:
    """Grid steps n after which f is flat: f(nh) ≤ ATOM_TAIL + f at the far end (doubling, then bisection).

    f is non-increasing, so putting its value at the last point into the mass at +∞ is always sound; the
    plateau rule stops a profile that never reaches 0 (an (ε0, δ0) step) at its plateau instead of
    walking a huge grid, and :func:`_reach` bounds the grid for profiles that decay too slowly.
    """
    limit = _reach(h)
    if limit == 0:
        return 0
    far = _value(f, limit * h)
    target = ATOM_TAIL + (far if math.isfinite(far) else 0.0)

    def flat(n: int) -> bool:
        return _value(f, n * h) <= target   # NaN: not flat

    hi = 1
    while not flat(hi):
        if hi >= limit:
            return limit
        hi = min(hi * 2, limit)
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if flat(mid) else (mid, hi)
    return hi


def discretize(hs: Fn, hs_rev: Fn, h: float) -> DiscretePLD:
    """Connect-the-dots discretisation of the pair with profiles ``hs`` (P‖Q) and ``hs_rev`` (Q‖P).

    The profile values are upper bounds (they need not be convex: profiles derived from RDP curves or
    declared by plugins are not); the discrete pair's profile is the chord interpolation of their lower
    convex envelope (:func:`envelope_masses`), which dominates every mechanism the bounds hold for.

    Example:
        >>> from dpframe.accounting.numerics.profiles import hs_atoms
        >>> rr = hs_atoms(np.array([1.0, -1.0]), np.array([0.7311, 0.2689]))
        >>> d = discretize(rr, rr, 0.5)
        >>> d.start, [round(float(x), 4) for x in d.p if x > 1e-12], d.p_inf   # RR: atoms at ±1
        (-2, [0.2689, 0.7311], 0.0)

    """
    top = _grid_end(hs, h)
    bottom = _grid_end(hs_rev, h)
    j = np.arange(-bottom, top + 1, dtype=np.float64)
    eps = j * h
    x = np.exp(eps)
    # g = f − (1 − x)_+ is small where f is close to 1 − x (below ε = 0), which avoids cancellation:
    # for ε < 0, f − (1 − x) = x·H_{1/x}(Q‖P).
    g = np.empty_like(eps)
    neg = j < 0
    with np.errstate(all="ignore"):
        g[neg] = x[neg] * hs_rev(-eps[neg])
        g[~neg] = hs(eps[~neg])
    p, p_inf, err = _envelope(x, g)
    return DiscretePLD(int(-bottom), p, p_inf, err)


def truncated(f: Fn, h: float) -> bool:
    """Whether a profile still decreases after the grid's reach at step h (so mass would go to +∞)."""
    at_reach, far = _value(f, _reach(h) * h), _value(f, E_MAX)
    return at_reach > ATOM_TAIL + (far if math.isfinite(far) else 0.0)    # NaN: no


def coarse_grid(profiles: Sequence[Fn], grid: float) -> float:
    """The step to discretise at: ``grid`` doubled while some profile would be cut off by the grid's reach.

    A profile that still carries mass beyond :data:`MAX_POINTS` steps (a large-ε mechanism: Laplace with a
    tiny scale) is better described by a coarser grid than by moving its mass to +∞; connect-the-dots is
    pessimistic at any step, so the result stays an upper bound. The step stops growing once the reach
    is :data:`LOSS_MAX` (beyond, the rest of δ goes to +∞).

    Example:
        >>> from dpframe.accounting.numerics.profiles import hs_gaussian, hs_laplace
        >>> coarse_grid([hs_gaussian(1.0)], 1e-4), coarse_grid([hs_laplace(200.0)], 1e-4)
        (0.0001, 0.0002)

    """
    h = grid
    while _reach(h) == MAX_POINTS and any(truncated(f, h) for f in profiles):
        h *= 2
    return h


def envelope_masses(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, float]:
    """Loss-atom masses of the pair whose profile is the lower convex envelope of the given points.

    The points are upper bounds f_j ≥ H_{x_j}(P‖Q) of a mechanism's two-sided profile at increasing
    x_j = e^{jh} (with x_0 < 1 ≤ x_last), given as g_j = f_j − (1 − x_j)_+. Thesis Cor. 3.5.1 (HS(h)):
    the true profile H is convex, non-increasing, ≤ 1 and ≥ (1 − x)_+, so capping at 1, raising to
    (1 − x)_+, taking the running minimum and then the lower convex envelope of the points (with
    (0, 1) first and a flat ray after the last point) keeps an upper bound of H; the envelope is a valid
    profile (Lemma 3.3.3), so the discrete pair it defines dominates the mechanism. Its P-mass at loss
    log x_j is x_j times the envelope's slope increase there, the mass at +∞ its final value; they sum
    to its value at 0, which is 1: masses are never clipped or rescaled.

    Example (a non-convex bound: the envelope drops the middle point):
        >>> x = np.array([0.5, 1.0, 2.0])
        >>> p, p_inf = envelope_masses(x, np.array([0.1, 0.45, 0.0]))   # f = 0.6, 0.45, 0 at x = ½, 1, 2
        >>> [round(float(v), 4) for v in p], p_inf
        ([0.2, 0.0, 0.8], 0.0)

    """
    p, p_inf, _ = _envelope(x, g)
    return p, p_inf


def _envelope(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, float, float]:
    """:func:`envelope_masses` and a bound on the rounding error of the masses (:func:`envelope_error`)."""
    m = np.minimum(x, 1.0)
    g = np.where(np.isnan(g), m, np.clip(g, 0.0, m))          # (1 − x)_+ ≤ f ≤ 1
    f = g + (1.0 - m)
    run = np.minimum.accumulate(f)                              # H is non-increasing
    lower = run < f
    if lower.any():
        # run is a rounded sum g + (1 − m) (within U of exact): raise the difference by 4U to stay an upper bound
        g[lower] = np.maximum(run[lower] - (1.0 - m[lower]), 0.0) + 4 * U
    xs = np.concatenate([[0.0], x])
    gs = np.concatenate([[0.0], g])
    ms = np.concatenate([[0.0], m])
    keep = _lower_hull(xs, gs, ms)
    dx = np.diff(xs[keep])
    sg, kap = np.diff(gs[keep]) / dx, -np.diff(ms[keep]) / dx
    sg, kap = np.append(sg, 0.0), np.append(kap, 0.0)          # flat after the last point
    p = np.zeros(len(x))
    p[keep[1:] - 1] = np.maximum(xs[keep[1:]] * (np.diff(sg) + np.diff(kap)), 0.0)
    p_inf = float(g[-1])
    total = math.fsum(p) + p_inf
    if total > 1 + 1e-9:
        raise DPFrameError(f"internal error: the discretised pair has mass {total!r} > 1", argument="mechanism",
                           fix="report this bug to the dpframe authors with the mechanism's curve")
    return p, p_inf, envelope_error(dx, sg, kap, p)


def _sum_up(values: np.ndarray) -> float:
    """Σ values (≥ 0) rounded up: numpy's pairwise sum is within (⌈log₂ n⌉ + 128)·U ≪ 1e-10 relative of exact.

    Example:
        >>> _sum_up(np.array([0.1, 0.2])) >= 0.30000000000000004
        True

    """
    return float(np.sum(values)) * (1 + 1e-10)


def envelope_error(dx: np.ndarray, sg: np.ndarray, kap: np.ndarray, p: np.ndarray) -> float:
    """τ ≥ sup_x |F̃(x) − F(x)|: the computed masses' profile F̃ against the exact chord interpolation F.

    F(x) = Σ_j p_j·(1 − x/x_j)_+ + p_∞ with p_j = x_j·(s_j − s_{j−1}), s the chord slopes (of g, ``sg``, and of
    (1 − x)_+, ``kap``; ``dx`` the chord widths, from x = 0; the last slope 0, exact). Both profiles are piecewise
    linear with the same kinks, so the sup is at a kink x_m, where by summation by parts
    F̃(x_m) − F(x_m) = −Σ_{j ≥ m} dx_j·(s̃_j − s_j) + Σ_{j > m} θ_j·p̃_j·(1 − x_m/x_j), with each slope (a difference
    and a quotient of floats over a rounded width) within 4U·|s_j| and θ (the difference of slopes, the product
    by x_j) within 2U. So τ = 4U·Σ dx_j·(|sg_j| + |κ_j|) + 2U·Σ p̃_j (Σ dx·|s| is the profile's variation, ≤ 2).
    Negative masses clipped to 0 only raise F̃.

    δ of a composition is linear in each part's profile with non-negative weights (δ_{A⊗B}(ε) =
    E_{L_B}[δ_A(ε − L_B)], the masses of B ≤ 1 + their own τ), so each run of a part moves it by at most τ:
    :func:`compose` adds Σ times·τ (doubled) to δ.

    Example:
        >>> dx = np.array([0.5, 0.5, 1.0])
        >>> sg, kap = np.array([0.2, 0.2, -0.45, 0.0]), np.array([1.0, 1.0, 0.0, 0.0])   # chords from x = 0, then flat
        >>> 0 < envelope_error(dx, sg, kap, np.array([0.0, 0.65, 0.0])) < 1e-14
        True

    """
    variation = _sum_up(dx * (np.abs(sg[:len(dx)]) + np.abs(kap[:len(dx)])))
    return float((4 * U * variation + 2 * U * _sum_up(p)) * (1 + 1e-9))


def _turns(xs: np.ndarray, gs: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """Slope increase of f = g + 1 − m at each interior point.

    The chord slopes of g and of (1 − x)_+ are kept apart (the latter are exactly −1 or 0 away from
    x = 1), so no digits of the small g are lost.
    """
    dx = np.diff(xs)
    return np.asarray(np.diff(np.diff(gs) / dx) + np.diff(-np.diff(ms) / dx))


def _lower_hull(xs: np.ndarray, gs: np.ndarray, ms: np.ndarray) -> np.ndarray:
    """Indices of the vertices of the lower convex envelope of the points (x, g + 1 − m), in order."""
    keep = np.arange(len(xs))
    for _ in range(8):   # vectorised passes: a point above the chord of its neighbours is no vertex
        bad = np.nonzero(_turns(xs[keep], gs[keep], ms[keep]) < 0)[0]
        if len(bad) == 0:
            return keep
        keep = np.delete(keep, bad + 1)
    # compact arrays (not lists of Python floats): up to 2·MAX_POINTS points stay within a few dozen MB
    x, g, m = (array("d", np.ascontiguousarray(v[keep]).tobytes()) for v in (xs, gs, ms))
    stack = array("q")
    for c in range(len(x)):   # Andrew's monotone chain on what is left
        while len(stack) >= 2:
            a, b = stack[-2], stack[-1]
            left, right = x[b] - x[a], x[c] - x[b]
            turn = ((g[c] - g[b]) / right - (g[b] - g[a]) / left) + ((m[b] - m[c]) / right - (m[a] - m[b]) / left)
            if turn >= 0:
                break
            stack.pop()
        stack.append(c)
    return np.asarray(keep[np.frombuffer(stack, dtype=np.int64)])


def _log_mgf(d: DiscretePLD, h: float, t: np.ndarray) -> np.ndarray:
    """Log Σ p_i e^{t·l_i} over the finite atoms, for each t (a few t at a time: bounded memory)."""
    nz = d.p > 0
    losses = (d.start + np.nonzero(nz)[0]) * h
    log_p = np.log(d.p[nz])
    out = np.empty(len(t))
    step = max(1, BLOCK // max(1, len(losses)))
    for i in range(0, len(t), step):
        a = t[i:i + step, None] * losses[None, :] + log_p[None, :]
        top = a.max(axis=1)
        out[i:i + step] = top + np.log(np.exp(a - top[:, None]).sum(axis=1))
    return out


TS = frozen_array(np.geomspace(1e-3, 1e3, 61))
"""The t of the Chernoff bounds of :func:`window` (any t gives a valid bound; the smallest bound is taken)."""
COARSE = 4
""":func:`_chernoff` evaluates every COARSE-th t of :data:`TS`, then the t around the best of those."""


def _chernoff(parts: Sequence[tuple[DiscretePLD, int]], h: float, sign: float) -> float:
    """A Chernoff bound b with P[sign·S ≥ b] ≤ TAIL: the smallest (K(sign·t) − log TAIL)/t over t in :data:`TS`.

    K is the log MGF of the composed loss S. The bound (K(t) − c)/t is the slope of the chord from (0, c) to the
    convex K, c = log TAIL: it falls, then rises, in t (it only rises where c ≥ K(0), a finite mass below TAIL).
    So the minimum over :data:`TS` is found on every :data:`COARSE`-th t and the t between the neighbours of the
    best of them: 23 evaluations of the log MGF (each a pass over every atom per t) instead of 61. Any t gives a
    valid Chernoff bound, so the window is sound whichever t is taken.

    Example:
        >>> d = DiscretePLD(start=-2, p=np.array([0.1, 0.2, 0.4, 0.2, 0.1]), p_inf=0.0)
        >>> full = float(np.min((2 * _log_mgf(d, 0.5, TS) - math.log(TAIL)) / TS))
        >>> _chernoff([(d, 2)], 0.5, 1.0) == full
        True

    """
    def bound(at: np.ndarray) -> np.ndarray:
        ts = TS[at]
        k = sum(t * _log_mgf(d, h, sign * ts) for d, t in parts)
        return np.asarray((k - math.log(TAIL)) / ts)
    coarse = np.arange(0, len(TS), COARSE)
    best = int(coarse[int(np.argmin(bound(coarse)))])
    near = np.arange(max(0, best - COARSE + 1), min(len(TS), best + COARSE))
    return float(np.min(bound(near)))


def window(parts: Sequence[tuple[DiscretePLD, int]], h: float) -> tuple[int, int]:
    """(first index, width) of the FFT window: Chernoff bounds leave at most TAIL outside on each side."""
    if any(not np.any(d.p > 0) for d, _ in parts):
        return 0, 1              # a part with all its mass at +∞: so has the composition
    upper = _chernoff(parts, h, 1.0)                         # P[S ≥ upper] ≤ TAIL
    lower = -_chernoff(parts, h, -1.0)                       # P[S ≤ lower] ≤ TAIL
    full_lo, full_hi = support(parts)
    lo_idx = max(math.floor(lower / h), full_lo)            # never wider than the support itself
    hi_idx = min(math.ceil(upper / h), full_hi)
    return lo_idx, max(hi_idx - lo_idx + 1, max(len(d.p) for d, _ in parts))


def support(parts: Sequence[tuple[DiscretePLD, int]]) -> tuple[int, int]:
    """(lowest, highest) grid index of the composition's finite atoms: Σ times·(first, last atom of each part)."""
    lo = hi = 0
    for d, t in parts:
        nz = np.nonzero(d.p > 0)[0]
        lo += t * (d.start + int(nz[0]))
        hi += t * (d.start + int(nz[-1]))
    return lo, hi


def mass_at_infinity(parts: Sequence[tuple[DiscretePLD, int]]) -> float:
    """1 − Π(1 − p_∞)^times, rounded up: exactly (rationals) for up to 64 runs, else in log space plus 8 ulps.

    The margin in log space: log1p (≤ 1 ulp, relative ≤ 2U), the product by times (U) and the correctly
    rounded fsum of same-signed terms (U) give S = Σ t·log1p(−p) within 4U relative; x = −expm1(S) has
    |dx/dS|·|S|/x = |S|e^S/(1 − e^S) ≤ 1 for S ≤ 0, so x is within 4U, and expm1's own ≤ 1 ulp adds 2U:
    6U relative in all, and an ulp of x is ≥ U·x, so 8 ulps up cover it.

    Exact rounding matters where a δ asked for is a point mass's δ: (ε=1, δ=0.1) then (ε=2, δ=0.2) has
    δ(3) = 0.28 exactly, and 0.28 must not come out a rounding above it.

    Example:
        >>> mass_at_infinity([(DiscretePLD(0, np.ones(1), 0.1), 1), (DiscretePLD(0, np.ones(1), 0.2), 1)]) <= 0.28
        True

    """
    return at_least_one([(d.p_inf, t) for d, t in parts])


def at_least_one(probabilities: Sequence[tuple[float, int]]) -> float:
    """1 − Π(1 − p)^times over (p, times): the chance that some run happens, rounded up (see :func:`mass_at_infinity`).

    Example:
        >>> at_least_one([(0.1, 1), (0.2, 1)]) >= 0.28, at_least_one([(0.5, 2)])
        (True, 0.75)

    """
    if any(p >= 1 for p, _ in probabilities):
        return 1.0
    if sum(t for _, t in probabilities) <= 64:
        survive = Fraction(1)
        for p, t in probabilities:
            survive *= (1 - Fraction(p)) ** t
        exact = 1 - survive
        out = float(exact)
        return out if Fraction(out) >= exact else math.nextafter(out, math.inf)
    out = -math.expm1(math.fsum(t * math.log1p(-p) for p, t in probabilities if p > 0))
    if out == 0.0:
        return 0.0
    for _ in range(8):
        out = math.nextafter(out, math.inf)
    return min(1.0, out)


FFT_ETA = 16 * U
"""Rounding of one level of an FFT (Cooley–Tukey, as pocketfft): each level's butterflies or radix-r passes
add at most FFT_ETA relative to the sum of the moduli of their inputs (Higham 2002, Thm 24.2: η = μ + γ₄(√2 + μ)
≈ 6U per radix-2 level with twiddles accurate to μ ≈ U; the margin up to 16U covers radix-3/4/5 passes, each
counted as one level). So with L = ⌈log₂ n⌉: every output of a length-n transform is within FFT_ETA·L·‖x‖₁ of
exact (every intermediate value is a sub-transform, bounded by its inputs' ‖·‖₁), and in 2-norm
‖fl(Fx) − Fx‖₂ ≤ FFT_ETA·L·‖Fx‖₂.

Proof sketch for the transforms used (scipy's pocketfft on 5-smooth lengths, ``next_fast_len(real=True)``; a
sketch of its passes, not a proof of its code): the real transform runs one pass per factor r ∈ {4, 2, 3, 5} of
n; a pass maps each group of r sub-transform outputs to r new ones by an r-point DFT (sums and differences,
products by ±i and ½, which are exact, and for r = 3, 5 by the constants cos/sin(2π/r), correctly rounded) and one
complex product by a precomputed twiddle. By Higham's argument (Lemma 3.5, proof of Thm 24.2) each output of a
pass is the exact pass of its inputs times (1 + θ), |θ| ≤ μ + √2·γ_c, μ the twiddles' error and c the rounded
operations on the longest path through the pass: c = 4 for r = 2 (Higham's case), about 6 for r = 4 (two levels of
sums, one twiddle product), 7 for r = 3 and 9 for r = 5 (their constants add a product and a level of sums). A
pass of radix r counts for log₂ r of the L levels, so per level it adds at most (μ + √2·γ_c)/log₂ r: μ + 5.7U
(r = 2), μ/2 + 4.3U (r = 4), 0.64μ + 6.3U (r = 3), 0.44μ + 5.5U (r = 5); within 16U while μ ≤ 9U. The twiddles:
pocketfft reduces every angle to [0, π/4] exactly (jk mod n in integers) and builds the n values from 2√n sin/cos
calls by angle addition in extended precision; that they are within an ulp or two is its authors' statement, the
assumption left here. Measured against a long-double DFT on PLD-like inputs (``tests/adversarial/test_review55g.py``):
at most 0.9U per level, forward and inverse, with the reference's own error included."""


def fft_error(parts: Sequence[tuple[DiscretePLD, int]], n: int, width: int, spectrum: np.ndarray,
              powers: list[tuple[np.ndarray, int]]) -> float:
    """A bound on Σ_i |y_i − fl(y)_i| over ``width`` entries of y = F⁻¹ Π (F x_j)^{t_j} computed by FFT at length n.

    With L = ⌈log₂ n⌉, η = :data:`FFT_ETA` and the half spectrum k ≤ n/2 that a real transform keeps (the rest
    is its conjugate, so a sum over the full spectrum is at most twice the sum over the half):

    * forward: |X̂_jk − X_jk| ≤ ε_j := η·L·‖x_j‖₁, and |a^t − b^t| ≤ t·max(|a|, |b|)^{t−1}·|a − b|, so with
      M_jk = |X̂_jk| + ε_j ≥ both moduli, S_k = Π_j X_jk^{t_j} moves by at most Π_j M_jk^{t_j}·Σ_j t_j·ε_j/M_jk;
    * powers and products: numpy's complex power is binary exponentiation (t < 100: ≤ 2·log₂t + 2 products
      of ≤ 4U) or cexp(t·clog z) (clog's parts within 4U: |Δ(t·log z)| ≤ 4U·t·(|log|z|| + |arg z|), cexp ≤ 4U),
      each product of parts ≤ 4U: relative error ρ_k ≤ Σ_j 8U·(t_j·(|log|z_jk|| + |arg z_jk|) + 2·log₂t_j + 4);
    * inverse (F⁻¹ = F*/n): each entry moves by ≤ (2/n)·(Σ_k |ΔS_k| + η·L·Σ_k |Ŝ_k|), so w entries by w times
      that; or, in 2-norm, ‖Δy‖₂ ≤ √2·(‖ΔS‖₂ + η·L·‖Ŝ‖₂)/√n and w entries by √w·‖Δy‖₂.

    The smaller of the two is returned, doubled (second-order terms). Clipping negative entries at 0 only moves
    them towards the exact y ≥ 0.

    Assumption: each level of the FFT rounds within :data:`FFT_ETA` = 16U of its inputs' ‖·‖₁ (sketched there, per
    pocketfft pass, from Higham 2002, Thm 24.2, given twiddles within 9U; pocketfft's authors state 1–2U; measured
    at ≤ 0.9U per level, ``tests/adversarial/test_review55g.py``). ``tests/adversarial/test_review53j.py`` checks
    the bound against exact Fraction convolutions; ``docs/accounting.md`` lists it under known limits.

    Example:
        >>> d = DiscretePLD(start=-1, p=np.array([0.25, 0.5, 0.25]), p_inf=0.0)
        >>> z = np.fft.rfft(d.p, 8)
        >>> 0 < fft_error([(d, 3)], 8, 7, z ** 3, [(z, 3)]) < 1e-13
        True

    """
    levels = max(1, math.ceil(math.log2(n)))
    log_m = np.zeros(len(spectrum))
    spread = np.zeros(len(spectrum))
    rho = np.zeros(len(spectrum))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for (d, _), (z, t) in zip(parts, powers):
            eps = FFT_ETA * levels * _sum_up(d.p)
            mod = np.abs(z)
            bound = mod + eps
            log_m += t * np.log(bound)
            spread += t * eps / bound
            size = t * (np.abs(np.log(mod)) + np.abs(np.angle(z))) + 2 * math.log2(max(t, 1)) + 4
            rho += 8 * U * np.where(mod > 0, size, 0.0)
        change = np.exp(log_m) * spread + np.where(rho > 0, np.abs(spectrum) * rho, 0.0)
    size_s = np.abs(spectrum)
    entrywise = 2 * width / n * (_sum_up(change) + FFT_ETA * levels * _sum_up(size_s))
    # 2-norms by sums of squares (rounded up), not BLAS: a threaded dot product is slower here than the FFT
    energy = math.sqrt(2 * width / n) * (math.sqrt(_sum_up(change * change))
                                         + FFT_ETA * levels * math.sqrt(_sum_up(size_s * size_s))) * (1 + 1e-10)
    return 2 * min(entrywise, energy) * (1 + 1e-9)


def compose(parts: Sequence[tuple[DiscretePLD, int]], h: float,
            span: tuple[int, int] | None = None) -> tuple[np.ndarray, int, float]:
    """The composed pmf over the FFT window (see :func:`window`), its first index and the extra δ.

    The extra δ includes the rounding margin of :func:`compose_parts` (which keeps it apart).
    """
    kept, lo_idx, extra, margin = compose_parts(parts, h, span)
    return kept, lo_idx, math.nextafter(extra + margin, math.inf)


def compose_parts(parts: Sequence[tuple[DiscretePLD, int]], h: float,
                  span: tuple[int, int] | None = None) -> tuple[np.ndarray, int, float, float]:
    """The composed pmf over the FFT window, its first index, the extra δ (p_∞, tails) and the rounding margin.

    The extra δ is p_∞ (rounded up), the window's tail bounds, :func:`fft_error` (the FFT's rounding summed
    over the window: δ(ε) = Σ p_l·(1 − e^{ε−l})_+ weighs each entry by at most 1) and 2·Σ times·err of the
    parts (their masses' rounding, :func:`envelope_error`: δ of a composition is multilinear in the parts'
    masses, each run's weights are products of the other parts' masses, ≤ 1 + their errors), so δ from the
    result is ≥ δ of the exact composition of the parts' exact envelopes. The margin is needed only at ε
    below the window's top loss: above every finite loss the exact δ is p_∞ and the computed pmf adds ≥ 0.
    A single run of one part is its own pmf (no FFT, no FFT margin).
    """
    from scipy.fft import irfft, next_fast_len, rfft

    p_inf = mass_at_infinity(parts)
    lo_idx, width = window(parts, h) if span is None else span
    if any(not np.any(d.p > 0) for d, _ in parts):
        return np.zeros(1), 0, 1.0 + 2 * TAIL, 0.0
    full_lo, full_hi = support(parts)
    # a window over the whole support truncates nothing (and n ≥ width: nothing aliases); else TAIL per side
    tail = TAIL * ((lo_idx > full_lo) + (lo_idx + width - 1 < full_hi))
    if len(parts) == 1 and parts[0][1] == 1:
        d = parts[0][0]
        kept = np.zeros(width)
        a, b = max(lo_idx, d.start), min(lo_idx + width, d.start + len(d.p))
        if b > a:
            kept[a - lo_idx:b - lo_idx] = d.p[a - d.start:b - d.start]
        return kept, lo_idx, p_inf + tail, 2 * d.err
    n = next_fast_len(width, real=True)
    spectrum = np.ones(n // 2 + 1, dtype=np.complex128)
    base = 0
    powers = []
    for d, times in parts:
        z = rfft(d.p, n)
        powers.append((z, times))
        spectrum *= z ** times
        base += times * d.start
    rounding = fft_error(parts, n, width, spectrum, powers) + 2 * sum(t * d.err for d, t in parts)
    out = irfft(spectrum, n)
    out = np.maximum(out, 0.0)
    # entry m holds the folded mass of every loss index s with (s − base) mod n == m; read the window
    kept = np.roll(out, -((lo_idx - base) % n))[:width]
    return kept, lo_idx, p_inf + tail, math.nextafter(rounding, math.inf)


def losses_of(start: int, n: int, h: float) -> np.ndarray:
    """The losses (start + i)·h, i < n, rounded up when the index is beyond exact int64/float range.

    Example:
        >>> losses_of(-2, 3, 0.5).tolist(), bool(losses_of(2**62, 1, 1.0)[0] >= 2.0**62)
        ([-1.0, -0.5, 0.0], True)

    """
    if abs(start) + n < 2**52:
        return (start + np.arange(n)) * h
    out = float(start) * h + np.arange(n) * h             # each step rounds: nudge up (larger losses: pessimistic)
    return np.asarray(np.nextafter(np.nextafter(np.nextafter(out, math.inf), math.inf), math.inf))


def delta_at(p: np.ndarray, start: int, extra: float, h: float, eps: float, margin: float = 0.0) -> float:
    """δ at ``eps`` of a composed pmf over the window from ``start`` (plus the extra δ), rounded up.

    The exact value is Σ_{l > ε} p_l·(1 − e^{ε − l}) over the exact losses l = (start + i)·h. Each computed
    loss is within U·|l| of exact (one product; :func:`losses_of` beyond 2⁵²), ε − l adds U·|ε − l| and expm1
    ≤ 2U relative; 1 − e^{ε − l} has slope ≤ 1 in l, so each weight is within 4U·(|l| + |ε| + 1) of exact
    (which also covers atoms the comparison l > ε misplaces: their exact weight is below that). numpy's
    pairwise sum of the non-negative terms is within (⌈log₂ w⌉ + 128)·U of their sum (blocks of 128 summed in
    a row). Both margins are added, so the result is never below the exact δ of the pmf; ``margin`` (the
    pmf's own rounding, :func:`compose_parts`) is added where some loss of the window is above ``eps``.

    Example:
        >>> delta_at(np.array([0.5, 0.5]), 0, 0.0, 1.0, 0.0) >= 0.5 * (1 - math.exp(-1))    # losses 0 and 1
        True

    """
    losses = losses_of(start, len(p), h)
    scale = 4 * U * (np.abs(losses) + (abs(eps) + 1))
    near = losses > eps - scale
    mask = losses > eps
    total = float(np.sum(p[mask] * -np.expm1(eps - losses[mask])))
    rounding = float(np.sum(p[near] * scale[near])) + (math.ceil(math.log2(len(p) + 1)) + 130) * U * total
    if losses[-1] > eps - scale[-1]:
        margin += rounding
    return math.nextafter(math.nextafter(total + margin, math.inf) + extra, math.inf)


def _tails(p: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) with A_m = Σ_{i ≥ m} p_i and B_m = Σ_{i ≥ m} p_i e^{−(l_i − l_m)} for atoms on a grid of step h."""
    from scipy.signal import lfilter

    return np.cumsum(p[::-1])[::-1], lfilter([1.0], [1.0, -math.exp(-h)], p[::-1])[::-1]


def tail_error(n: int) -> float:
    """The relative error bound of :func:`_tails` over n atoms, 8U·(n + 1).

    A (a running sum of non-negative terms) is within 2nU of exact, B (with e^{−h} rounded, its powers off
    by ≤ 2U per step) within 6nU, each relative to itself.

    Example:
        >>> tail_error(1) < 1e-14
        True

    """
    return 8 * U * (n + 1) * (1 + 1e-9)


def epsilon_at(p: np.ndarray, start: int, extra: float, h: float, delta: float, margin: float = 0.0) -> float:
    """The smallest ε ≥ 0 with δ(ε) ≤ ``delta`` (δ is exact and monotone between grid points), rounded up.

    The tail sums A and B are taken within :func:`tail_error` of exact (the subtraction A − e^{−h}·B may
    cancel: the margin is relative to A + B, not to δ), and the losses are rounded up by an ulp (within
    U·|l| of exact, so at least the exact loss), so the ε returned has exact δ(ε) ≤ ``delta``; ``margin``
    (the pmf's own rounding) counts below the window's top loss.

    Example:
        >>> epsilon_at(np.array([0.5, 0.5]), 0, 0.0, 1.0, 0.1) >= 1 + math.log(0.8)   # 0.5·(1 − e^{ε − 1}) = 0.1
        True

    """
    target = delta - extra
    if target < 0:
        return math.inf
    losses = np.nextafter(losses_of(start, len(p), h), math.inf)
    a, b = _tails(p, h)
    rel = tail_error(len(p))
    # δ(l_k) − extra = A_{k+1} − e^{−h}·B_{k+1} (the atoms above l_k), and 0 at the last point
    at_grid = np.concatenate([a[1:] - math.exp(-h) * b[1:] + rel * (a[1:] + b[1:]) + margin, [0.0]])
    k = int(np.argmax(at_grid <= target))                       # first grid point meeting the target
    # on (l_{k−1}, l_k] the atoms above ε are those ≥ k: δ = A_k − e^{ε − l_k}·B_k
    low_b = b[k] * (1 - rel)
    if low_b <= 0:
        return max(0.0, float(losses[k]))
    ratio = (a[k] * (1 + rel) - (target - margin)) / low_b * (1 + 4 * U)
    if not ratio > 0:
        return max(0.0, float(losses[k]))
    step = math.log(ratio)
    eps = float(losses[k]) + step
    eps += 4 * U * (abs(float(losses[k])) + abs(step) + 1)      # log ≤ 1 ulp, the sum ≤ 1 ulp
    return max(0.0, min(eps, float(losses[k])))


@dataclass(frozen=True)
class ComposedPLD:
    """A composition: per neighbour direction (pmf over the window, window start index, extra δ), the step used.

    ``degraded``: the step is coarser than asked, or some profile still carried mass beyond its grid's reach
    (its rest went to +∞): still an upper bound, but a loose one.
    """

    directions: list[tuple[np.ndarray, int, float]]
    grid: float
    degraded: bool
    margins: tuple[float, ...] = ()
    """Per direction, the rounding margin of the pmf (:func:`compose_parts`): δ below the window's top loss."""

    def margin(self, i: int) -> float:
        """The rounding margin of direction ``i`` (0 if none was recorded)."""
        return self.margins[i] if i < len(self.margins) else 0.0


def compose_pairs(pairs: Sequence[tuple[Fn, Fn, int]], grid: float) -> ComposedPLD:
    """Compose dominating pairs given by their profiles (hs, hs_rev) and multiplicities, in both directions.

    The remove direction composes the pairs (P, Q) with profiles ``hs``; the add direction the reversed
    pairs (thesis Thm 3.3.5: the max of the two k-fold compositions, not per step); when every pair is
    symmetric (``hs is hs_rev``) there is one direction. The step is ``grid`` unless a profile's losses
    reach beyond :data:`MAX_POINTS` steps or the composition's window beyond :data:`MAX_WINDOW` points;
    then it is doubled until they fit (both pessimistic: the result stays an upper bound).
    """
    profiles = [f for hs, rev, _ in pairs for f in (hs, rev)]
    h = coarse_grid(profiles, grid)
    symmetric = all(hs is rev for hs, rev, _ in pairs)
    for _ in range(64):
        cache: dict[tuple[int, int], tuple[DiscretePLD, DiscretePLD]] = {}
        rem: list[tuple[DiscretePLD, int]] = []
        add: list[tuple[DiscretePLD, int]] = []
        for hs, rev, times in pairs:
            key = (id(hs), id(rev))
            if key not in cache:
                d_rem = discretize(hs, rev, h)
                cache[key] = (d_rem, d_rem if hs is rev else discretize(rev, hs, h))
            rem.append((cache[key][0], times))
            add.append((cache[key][1], times))
        dirs = [rem] if symmetric else [rem, add]
        windows = [window(parts, h) for parts in dirs]
        width = max(w for _, w in windows)
        if width <= MAX_WINDOW:
            break
        h *= 2.0 ** math.ceil(math.log2(width / MAX_WINDOW))
    degraded = h > grid or any(truncated(f, h) for f in profiles)
    done = [compose_parts(parts, h, w) for parts, w in zip(dirs, windows)]
    return ComposedPLD([(p, s, extra) for p, s, extra, _ in done], h, degraded, tuple(m for *_, m in done))


def composed_profile(build: Callable[[], ComposedPLD], symmetric: bool) -> tuple[Fn, Fn]:
    """(hs, hs_rev) of a composition's discrete pair, composed on first use.

    ``build`` receives no values; it is called once, when a profile is first evaluated. The profile at ε is
    Σ_{l > ε} p_l(1 − e^{ε−l}) + p_∞ (+ the FFT window's tail and rounding bounds), rounded up by the tail
    sums' and the exponential's error bounds; the add direction
    is the composition of the reversed pairs.
    """
    done: list[ComposedPLD] = []
    tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
    rel: list[float] = []
    margins: dict[int, float] = {}

    def table(i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        if i not in tables:
            if not done:
                done.append(build())
            c = done[0]
            p, start, extra = c.directions[min(i, len(c.directions) - 1)]
            tables[i] = (losses_of(start, len(p), c.grid), *_tails(p, c.grid), extra)
            rel.append(tail_error(len(p)))
            margins[i] = c.margin(min(i, len(c.directions) - 1))
        return tables[i]

    def direction(i: int) -> Fn:
        def f(e: np.ndarray) -> np.ndarray:
            losses, a, b, extra = table(i)
            e = np.asarray(e, dtype=np.float64)
            m = np.searchsorted(losses, e, side="right")               # first atom with loss > ε
            inside = m < len(losses)
            k = np.minimum(m, len(losses) - 1)
            with np.errstate(over="ignore", invalid="ignore"):
                above = np.where(inside, a[k] - np.exp(np.minimum(e - losses[k], 0.0)) * b[k], 0.0)
                # A, B within :func:`tail_error`; ε − l within U·(|ε| + 2|l|), exp ≤ 2U (slope ≤ 1 times B)
                slack = max(rel) * (a[k] + b[k]) + 4 * U * (np.abs(e) + 2 * np.abs(losses[k]) + 1) * b[k]
                above = np.where(inside, above + slack + margins[i], 0.0)
            return np.asarray(np.clip(np.maximum(above, 0.0) + extra, 0.0, 1.0))

        return f

    rem = direction(0)
    return (rem, rem) if symmetric else (rem, direction(1))
