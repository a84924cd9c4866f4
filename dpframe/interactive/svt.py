"""Sparse vector (AboveThreshold with c positives) with output-DP refund of unused positives.

Mechanism (Lyu, Su & Li 2017, Alg. 1; digest 002 §2.1). One threshold noise ρ ~ DLap(Δ/ε₁) for the
whole stream, fresh ν_i ~ DLap(2cΔ/ε₂) per query; answer "above" iff q_i + ν_i ≥ T + ρ; halt at the
c-th "above". All queries are scalar counts / bounded sums of sensitivity ≤ Δ (Δ and the grid are
fixed by the first query; later queries must match). Exact discrete noise on integer statistics: the
proof's shifts ρ → ρ + Δ and ν → ν + 2Δ are integer shifts, so the continuous argument holds verbatim.

Privacy. Classic: (ε₁ + ε₂)-DP. Output DP (Lemma 8): the outputs with k "above" answers form a cell
of ε(O_k) = ε₁ + k·ε₂/c, δ = 0. The session reserves ε₁ + ε₂ (+ ε₃ for value release) when the
stream opens and, on close, under basic composition and when no other query ran meanwhile (the
lemma covers the SVT's own adaptive stream only), charges ε₁ + k·ε₂/c. Split ε₁ : ε₂ = 1 : (2c)^{2/3}
(Lyu et al.'s optimum, rounded to a rational).

Value release (optional ``release=dp.PureDP(ε₃)``): on close, each of the k positive queries is
re-measured with fresh noise at ε_entry = (ε₃ + (c−k)·ε₂/c)/k (the refund is re-invested; O10) —
a second ledger round whose ε depends only on the public k. Without the refund: ε₃/k each.

Gaussian noise (``noise="gaussian"``, RDP/PLD sessions, ``budget=dp.ZCDP(ρ)``): threshold noise
ρ ~ N_ℤ(0, σ₁²), query noise ν_i ~ N_ℤ(0, (2σ₁)²) with σ₁ = Δ·√((1+c)/(2ρ)) (so ε_ρ(α) + c·ε_ν(α) = αρ),
no threshold refresh, same ⊤ rule and halting (plus ``max_length``). The stream is charged the RDP
curve of :func:`dpframe.accounting.curves.gaussian_sparse_vector` when it opens: with ``max_length``
k the length-capped bound (Thm 7.2.7), for c = 1 without it the nonnegative-query bound (7.2) —
then only counts may be tested (they are ≥ 0; the bound depends on the noise in statistic units,
fixed at open to Δ = ``max_rows`` on the unit grid). No refund, no value release.

Other sessions: zCDP sessions are charged ρ = (ε₁+ε₂+ε₃)²/2 at open and never refunded; asking for
``refund=True`` there is an error (no theorem covers it).

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"g": [i % 10 for i in range(10_000)]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(2), seed=3)
    >>> with sess.sparse_vector(threshold=1500, max_positives=2, budget=dp.PureDP(1)) as sv:
    ...     answers = [sv.test(sess.table("t").filter(pl.col("g") == g).agg(dp.len())) for g in range(5)]
    >>> answers, sv.positives
    ([False, False, False, False, False], 0)
    >>> sess.spent().epsilon == sv.eps1, round(float(sv.eps1), 3)   # only ε₁ charged: nothing was above
    (True, 0.284)

"""

from __future__ import annotations

import math
import threading
from fractions import Fraction
from functools import partial
from typing import TYPE_CHECKING, Any

from dpframe.accounting import curves
from dpframe.accounting.checks import shown
from dpframe.budgets import ZCDP, ApproxDP, PureDP, make, sqrt_down, up
from dpframe.errors import ArgumentError, BudgetError, DPFrameError, PlanError
from dpframe.interactive.odp import additive, check_refund, require_additive
from dpframe.interactive.scalar import Scalar, public_number, scalar
from dpframe.interactive.stream import Reservation, _atomic
from dpframe.noise import MAX_GAUSSIAN_SIGMA2, discrete_gaussian, discrete_laplace
from dpframe.planning.passes import MAX_QUERY_BUDGET
from dpframe.sealed import Sealed, plain

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.session import Session


def pure_epsilon(budget: object, argument: str = "budget") -> Fraction:
    """The ε of a pure budget (``dp.PureDP`` or ``dp.ApproxDP`` with δ = 0); BudgetError otherwise."""
    if isinstance(budget, PureDP) or (isinstance(budget, ApproxDP) and budget.delta == 0):
        if budget.epsilon >= MAX_QUERY_BUDGET:         # its noise scales and curve are floats
            raise BudgetError("ε of one stream must be below 1e300 (the noise scales and the privacy curve are "
                              "floats)", argument=argument, fix="pass a smaller ε; 1e6 already adds next to no noise")
        return budget.epsilon
    raise BudgetError(f"expected a pure ε budget, got {budget!r}", argument=argument,
                      fix="pass dp.PureDP(epsilon)")


def positive_int(value: object, argument: str, at_most: int) -> int:
    """An int in [1, at_most] (BudgetError otherwise), read as a plain int before it is checked.

    Example:
        >>> class Liar(int):
        ...     def __lt__(self, other): return False     # "not below 1" for 0
        >>> positive_int(Liar(0), "max_positives", 10)
        Traceback (most recent call last):
        ...
        dpframe.errors.BudgetError: max_positives: must be an int ≥ 1, got 0. Fix: pass max_positives=5

    """
    value = plain(value)     # an int subclass's comparisons would pass a 0 (or -1) as ≥ 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BudgetError(f"must be an int ≥ 1, got {shown(value)}", argument=argument, fix=f"pass {argument}=5")
    if value > at_most:
        raise BudgetError(f"must be at most {at_most:,}, got {shown(value)}", argument=argument,
                          fix=f"pass {argument} ≤ {at_most:,} (a stream cannot use more)")
    return value


MAX_POSITIVES = 10**9
"""The most "above" answers a sparse-vector stream may plan for."""

MAX_LENGTH = curves.MAX_SVT_LENGTH
"""The longest stream (``max_length``) a sparse vector may declare."""


def svt_split(epsilon: Fraction, c: int) -> tuple[Fraction, Fraction]:
    """(ε₁, ε₂) with ε₁ : ε₂ ≈ 1 : (2c)^{2/3} (Lyu et al.), exact rationals summing to ε.

    The ratio is rounded to a denominator ≤ 1000 (small exact noise scales), but never below 1/10⁶ (at
    c ≳ 45,000 it would round to 0, leaving nothing for the threshold's noise).

    Example:
        >>> svt_split(Fraction(1), 1)
        (Fraction(349, 903), Fraction(554, 903))

    """
    precise = 1 / (1 + (2 * c) ** (2 / 3))
    ratio = max(Fraction(precise).limit_denominator(1000 if precise > 1e-3 else 10**6), Fraction(1, 10**6))
    eps1 = epsilon * ratio
    return eps1, epsilon - eps1


def cell_epsilon(eps1: Fraction, eps2: Fraction, c: int, k: int) -> Fraction:
    """Lemma 8: the output-DP ε of the cell of outputs with k "above" answers, ε₁ + k·ε₂/c."""
    return eps1 + k * eps2 / c


def entry_epsilon(eps2: Fraction, eps3: Fraction, c: int, k: int, refund: bool) -> Fraction:
    """ε of each released value: (ε₃ + (c−k)ε₂/c)/k with the refund, ε₃/k without (k ≥ 1)."""
    return ((eps3 + (c - k) * eps2 / c) if refund else eps3) / k


class SparseVector(Sealed):
    """An open sparse-vector stream: ``test(query) -> bool`` until ``max_positives`` "above" answers."""

    def __init__(self, session: Session, threshold: object, max_positives: object, budget: object, *,
                 release: object = None, refund: bool | None = None, noise: object = "laplace",
                 max_length: object = None) -> None:
        self._threshold = public_number(threshold, "threshold")
        self.max_positives = positive_int(max_positives, "max_positives", MAX_POSITIVES)
        if not isinstance(noise, str) or noise not in ("laplace", "gaussian"):
            raise ArgumentError(f"must be 'laplace' or 'gaussian', got {shown(noise)}", argument="noise",
                               fix="pass noise='laplace' (pure ε) or noise='gaussian' (zCDP budget, RDP session)")
        self.noise = str(noise)
        self.max_length = None if max_length is None else positive_int(max_length, "max_length", MAX_LENGTH)
        # before the Gaussian stream reads max_rows (an 'auto' unit has none: a bare DPFrameError naming max_rows)
        session.privacy_unit.require_numbers(f"sparse_vector(T={self._threshold}, c={self.max_positives})")
        self.session = session
        self._lock = threading.RLock()      # one test (or close) at a time: check, run and record atomically
        self._answers: list[bool] = []
        self._values: dict[int, float | int] = {}
        self._positive_queries: list[tuple[int, Scalar]] = []
        self._rho: int | None = None
        self._shape: tuple[Fraction, Fraction] | None = None   # (Δ, unit) fixed by the first query
        refund = check_refund(refund)
        if self.noise == "gaussian":
            self._open_gaussian(budget, release, refund)
            return
        eps = pure_epsilon(budget)
        self.eps3 = Fraction(0) if release is None else pure_epsilon(release, "release")
        if refund is True:
            require_additive(session, "the sparse vector's refund")
        self.refund = additive(session) if refund is None else refund
        self.eps1, self.eps2 = svt_split(eps, self.max_positives)
        # RDP/PLD sessions charge the SVT's RDP curve (curves.sparse_vector); others its pure cost
        svt_curve = curves.sparse_vector(up(self.eps1), up(self.eps2), self.max_positives)
        cost = session.accountant.charge_plan(PureDP(eps + self.eps3),
                                              [svt_curve] + ([curves.pure(up(self.eps3))] if self.eps3 else []))
        self._reservation = Reservation(session, cost, f"sparse_vector(T={self._threshold}, c={self.max_positives})",
                                        "sparse vector (discrete Laplace)", owner=self)

    # Gaussian stream: the budget ρ sets the noise, the stream is charged its RDP curve
    eps1 = eps2 = eps3 = Fraction(0)
    refund = False
    nonnegative = False
    curve: curves.PrivacyCurve | None = None
    _sigma2: Fraction | None = None          # σ₁² per unit Δ² (σ₁² = Δ²·(1+c)/(2ρ)); σ₂² = 4σ₁²

    def _open_gaussian(self, budget: object, release: object, refund: bool | None) -> None:
        from dpframe.accounting.rdp import RenyiFilter

        session, c, k = self.session, self.max_positives, self.max_length
        if not isinstance(budget, ZCDP):       # its δ, if any, is not used (nor charged), as agg's
            raise BudgetError(f"noise='gaussian' needs a zCDP budget (it sets the noise), got {shown(budget)}",
                              argument="budget", fix="pass budget=dp.ZCDP(rho)")
        if not isinstance(session.accountant, RenyiFilter):
            raise BudgetError(f"noise='gaussian' is charged an RDP curve; this session's accountant is "
                              f"{session.accountant.name!r}", argument="noise",
                              fix="open the session with accountant='rdp' (or 'pld'), or use noise='laplace'")
        if release is not None:
            raise PlanError("noise='gaussian' does not release values", argument="release",
                            fix="omit release= (or run a separate query on the positives)")
        if refund not in (None, False):
            raise BudgetError("noise='gaussian' has no refund (output DP covers the Laplace stream under basic "
                              "composition only)", argument="refund", fix="omit refund=")
        if c > 1 and k is None:
            raise BudgetError("a Gaussian sparse vector with max_positives > 1 has a finite RDP curve only with a "
                              "maximum length (thesis Thm 7.2.7)", argument="max_length",
                              fix="pass max_length=k (the stream halts after k queries)")
        if budget.rho >= MAX_QUERY_BUDGET:         # σ² ∝ 1/ρ would underflow to 0 as a float
            raise BudgetError("ρ of one stream must be below 1e300 (the noise scale is a float)", argument="budget",
                              fix="pass a smaller ρ; 1e6 already adds next to no noise")
        self._sigma2 = Fraction(1 + c) / (2 * budget.rho)
        # c = 1 without max_length: the nonnegative-query bound (7.2), which depends on the noise in statistic
        # units — calibrated for counts (Δ = max_rows, grid 1; sums are on a finer grid), counts only.
        # With max_length: the length-capped curve, the same in any statistic units (σ ∝ Δ), any scalar query.
        nonneg = c == 1 and k is None
        if nonneg:
            delta = Fraction(session.privacy_unit.max_rows)
            sigma1 = sqrt_down(delta**2 * self._sigma2)
            self._shape = (delta, Fraction(1))
            self._check_sampler(delta)
            self.curve = curves.gaussian_sparse_vector(sigma1, 2 * sigma1, float(delta), 1, math.ceil(self._threshold),
                                                       None, True)
        else:
            self._check_sampler(Fraction(1))     # Δ ≥ 1 is only known at the first query
            unit_sigma = sqrt_down(self._sigma2)
            self.curve = curves.gaussian_sparse_vector(unit_sigma, 2 * unit_sigma, 1.0, c, 0, k)
        self.nonnegative = nonneg
        assert self.curve is not None
        cost = self.session.accountant.charge_plan(ZCDP(budget.rho), [self.curve])
        what = f"sparse_vector(T={self._threshold}, c={c}" + (f", k={k}" if k is not None else "") + ", gaussian)"
        self._reservation = Reservation(session, cost, what, f"sparse vector (discrete Gaussian): {self.curve.label}",
                                        owner=self)

    def _check_sampler(self, delta: Fraction) -> None:
        assert self._sigma2 is not None
        if 4 * delta * delta * self._sigma2 > MAX_GAUSSIAN_SIGMA2:
            raise BudgetError("the query noise's variance is beyond the exact sampler's range", argument="budget",
                              fix="pass a larger rho")

    # ----------------------------------------------------------------------------------- status
    @property
    def answers(self) -> tuple[bool, ...]:
        """The answers given so far, in order (public; a copy)."""
        return tuple(self._answers)

    @property
    def values(self) -> dict[int, float | int]:
        """``{index of the query in the stream: noisy value}`` released at close (a copy; empty before)."""
        return dict(self._values)

    @property
    def positives(self) -> int:
        """How many "above" answers were given (public)."""
        return sum(self._answers)

    @property
    def closed(self) -> bool:
        """Whether the stream is closed (by close(), the c-th positive, or a failure)."""
        return self._reservation.closed

    def status(self) -> str:
        """E.g. "reserved ε=1; 2 of 5 positives used; open; protects add/remove one privacy unit: every row whose ...".

        After a refunded close, also what the ledger kept.

        (It said only "reserved ε=1" after a close that settled the charge to the realised cell, e.g. ε=252/887,
        which :meth:`charged` and the history showed.)
        """
        state = "closed" if self.closed else "open"
        describe_charge = self.session.accountant.describe_charge
        settled = f", charged {describe_charge(self.charged())} on close (output DP)" if self._refunded else ""
        return f"reserved {describe_charge(self._reservation.cost)}{settled}; " \
               f"{self.positives} of {self.max_positives} positives used; {state}; " \
               f"protects {self.session.privacy_unit.protects()}"

    def __repr__(self) -> str:
        return f"<dp.SparseVector {self.status()}>"

    # --------------------------------------------------------------------------------- queries
    @_atomic
    def test(self, query: Any) -> bool:
        """Whether the query's value is (noisily) above the threshold. Nothing extra is charged.

        Concurrent tests from several threads run one at a time (the threshold's noise, drawn at the
        first test, included), so no more than ``max_positives`` "above" answers are ever given.
        """
        self._reservation.check_open()
        c = self.max_positives
        if self._closing or self._halted():
            # its cap was reached (or a close began) but closing did not finish (the ledger failed, an interrupt
            # landed): the stream is over all the same
            raise DPFrameError(f"{self._reservation.what} is closed: it reached its cap or began closing",
                               argument="stream", fix="call sv.close() and open a new stream")
        gaussian = self.noise == "gaussian"
        sc = scalar(self.session, query, Fraction(1) if gaussian else self.eps2 / (2 * c))
        if gaussian and self.nonnegative:
            self._require_nonnegative(sc)
        if self._shape is None:
            shape = (sc.sensitivity, sc.unit)
        else:
            shape = self._shape
            if sc.unit != shape[1] or sc.sensitivity > shape[0]:
                fixed = "for counts" if self.nonnegative else "by its first query"
                raise PlanError(f"this query has sensitivity {sc.sensitivity * sc.unit} on grid {sc.unit}; the "
                                f"stream was fixed to {shape[0] * shape[1]} on grid {shape[1]} {fixed}",
                                argument="query", fix="give all queries of one stream the same measure and bounds")
        delta, unit = shape
        bar = -((-self._threshold) // unit)   # ⌈T / unit⌉
        if gaussian:
            self._check_sampler(delta)
            assert self._sigma2 is not None
            var1 = delta * delta * self._sigma2

            def draw_rho() -> int:
                return int(discrete_gaussian(var1, 1, self.session.rng)[0])

            def draw_nu() -> int:
                return int(discrete_gaussian(4 * var1, 1, self.session.rng)[0])
        else:
            rho_scale, nu_scale = delta / self.eps1, 2 * c * delta / self.eps2

            def draw_rho() -> int:
                return int(discrete_laplace(rho_scale, 1, self.session.rng)[0])

            def draw_nu() -> int:
                return int(discrete_laplace(nu_scale, 1, self.session.rng)[0])

        def run() -> bool:
            if self._rho is None:
                self._rho = draw_rho()
            noisy = sc._exact(self.session) + draw_nu()
            return noisy - self._rho >= bar

        above = self._reservation.run(run)
        self._shape = shape
        self._answers.append(bool(above))
        if above:
            self._positive_queries.append((len(self._answers) - 1, sc))
        if self._halted():
            self.close()
        return bool(above)

    def _halted(self) -> bool:
        """Whether the stream reached its cap: ``max_positives`` "above" answers or ``max_length`` tests."""
        return self.positives >= self.max_positives or (self.max_length is not None
                                                         and len(self._answers) >= self.max_length)

    def _require_nonnegative(self, sc: Scalar) -> None:
        if sc.kind in ("len", "count"):
            return
        raise PlanError(f"{sc.describe()} is not a count; this Gaussian stream (max_positives=1, no max_length) is "
                        "charged the nonnegative-query curve (thesis (7.2)), calibrated for counts", argument="query",
                        fix="test counts (dp.len / dp.count), or open the stream with max_length=k "
                            "(the length-capped curve covers any scalar query)")

    # ----------------------------------------------------------------------------------- close
    def charged(self) -> SessionCost:
        """What the stream is charged: the reservation, or after a refunded close the realised cell."""
        return self._cell_cost() if self._refunded else self._reservation.cost

    def _cell_cost(self) -> SessionCost:
        k, c = self.positives, self.max_positives
        eps = cell_epsilon(self.eps1, self.eps2, c, k)
        if self.eps3 and k:   # the value release spends ε₃ plus the refunded (c−k)ε₂/c
            eps += self.eps3 + (c - k) * self.eps2 / c
        return self.session.accountant.charge(make("pure", eps))

    _refunded = False
    _closing = False

    @_atomic
    def close(self) -> dict[int, float | int]:
        """Close the stream: release the positive queries' values (if ``release``), settle the charge.

        Returns ``{index of the query in the stream: noisy value}`` (empty without ``release``). A stream
        closed by a failure stays charged in full (no refund), and so does one whose earlier close did not
        finish (an interrupt or a ledger error): its values are released once, never measured again.
        """
        if self.closed:
            return self.values
        if self._closing:
            self._reservation.commit()
            return self.values
        self._closing = True
        k = self.positives
        refund = self.refund and not self._reservation.interleaved()
        if self.eps3 and k:
            eps_entry = entry_epsilon(self.eps2, self.eps3, self.max_positives, k, refund)
            for index, sc in self._positive_queries:
                scale = sc.sensitivity / eps_entry
                self._values[index] = sc.to_output(self._reservation.run(partial(
                    sc._noisy, self.session, scale, self.session.rng)))
        if refund:
            self._reservation.settle(self._cell_cost(), f"{k} positives")
            self._refunded = True
        else:
            self._reservation.commit()
        return self.values

    def __enter__(self) -> SparseVector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
