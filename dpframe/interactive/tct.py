"""Target-charging channels: pay only for calls whose output hits their target (Cohen & Lyu 2023).

Digest ``000_target_charging.md``. Every call in a channel is an ε_call-DP mechanism with a target (a
set of outputs fixed before the call, from public state only) that is a q-target (Def. 2.1). The
channel counts hits — calls whose *published* output is in the target — and halts at τ hits. Calls
that miss are free. Theorem B.4 (simulation argument): if the channel allows at most n data accesses
at ε_ch, the whole adaptive interaction is (f_ε(n, ε_ch), f_δ + δ*)-DP where

    δ* = P[Binomial(n, q_ch) ≤ τ − 1]        (exact binomial tail, [R2]: n trials, not n + 1)

and (f_ε, f_δ) is any adaptive composition bound of n ε_ch-DP calls (the proof: conditioned on no
failure, the data holder answers at most n adaptive ε-DP calls, Lemma A.6). dpframe uses the *optimal*
one, exact for every n (Kairouz, Oh & Viswanath 2015, Thm 3.3: the exact privacy profile of n-fold
randomized response, the worst case of n adaptive ε-DP calls;
:func:`dpframe.interactive.composition.optimal_epsilon`), where the
paper uses advanced composition min(n·ε, ½nε² + ε·√(2n·ln(1/δ_c))) (Lemma A.4 with the √2 the printed
theorem drops, [R1]): e.g. 25.33 → 22.57 for 100 hits at ε = 0.2, δ = 1e-6 (docs/interactive.md). n is
chosen when the channel opens (data-independently) to minimise ε' subject to δ* + δ_c ≤ δ (oracles
O6–O8). zCDP sessions reserve ρ = n·ε²/2 with δ* as the approximate-zCDP δ (the simulation's failure
event).

Admission (public state only): ε_call ≤ ε_ch, q(call) ≥ q_ch, hits + h ≤ τ, channel open. Targets:

* ``test`` — NotPrior (Lemma 2.3): q = 1/(e^ε + 1); ``prior`` (default "below") is free.
* ``conditional_release`` — Lemma 2.4: publish the noisy value iff it lies in ``when``, a declarative
  target (``dp.above(x)``, ``dp.below(x)``, ``dp.between(a, b)``, ``dp.outside(a, b)``,
  :mod:`dpframe.interactive.targets`) the library evaluates itself; q = 1/(e^ε + 1). No analyst code
  sees the value before it is released (a function ``when=`` is refused). With ``name=``, the
  unreleased value is kept secret and ``revise(name, when)`` may release it later: Lemma 2.5, a 2ε
  call with q = 1/(e^{2ε} + 1).
* ``between`` — BetweenThresholds (Lemma G.1) on a discrete Laplace value: "between" is the target,
  q = (1 − e^{−wε/Δ})/(e^ε + 1) for w integer grid steps between the thresholds (verified by the LP of
  digest §9 in the tests).
* ``select_best`` — best of m candidates (Thm I.1 / Remark I.2): one hit of a 2ε call.
* ``boundary_test`` — the boundary wrapper (Alg. 4, Lemmas E.1/E.2) of a threshold test with an exact
  oracle: "boundary" is the target, charged as a 4ε/3 call with q = (e^t − 1)/(2(e^{ε+t} − 1)), t = 4ε/3
  (:mod:`dpframe.interactive.boundary`).

The channel is a *filter*: the reservation is charged in full whatever the hit count (there is no
odometer for TCT); ``status()`` says "reserved (ε', δ'); h of τ hits used". Calls from several threads
run one at a time (admission, the private run and the hit count are one step), and a call that fails
while running closes the channel (:mod:`dpframe.interactive.stream`).

``per_unit=True`` (Alg. 5, SVT with individual charging): tests and conditional releases only; hits
are counted per privacy unit (every unit with a non-zero contribution to a hit pays one), a unit is
removed from all later calls at τ hits, and the channel itself never runs out. Needs a privacy-unit
column (stable identity) and add/remove neighbours.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"g": [i % 20 for i in range(20_000)]})
    >>> sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(60, 1e-6), seed=1)
    >>> with sess.target_charging(epsilon=0.5, max_hits=30, delta=1e-7) as ch:
    ...     low = [ch.test(sess.table("t").filter(pl.col("g") == g).agg(dp.len()), threshold=4000) for g in range(20)]
    ...     print(ch.status())  # doctest: +ELLIPSIS
    reserved ε=49.97..., δ=1e-07; 0 of 30 hits used; open; protects add/remove one privacy unit: one row (dp.Pri...
    >>> any(low)
    False

"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpframe.accounting.accountants import round_up
from dpframe.budgets import ZCDP, ApproxDP, Budget, describe, down, exact, make, up
from dpframe.errors import ArgumentError, BudgetError, DPFrameError, PlanError
from dpframe.interactive.boundary import WRAPPER_FACTOR, q_boundary, wrapped_test
from dpframe.interactive.composition import optimal_epsilon
from dpframe.interactive.scalar import Scalar, public_number, scalar
from dpframe.interactive.stream import Reservation, _atomic
from dpframe.interactive.svt import positive_int
from dpframe.interactive.targets import Target, as_target
from dpframe.interactive.unit_keys import check_keyable
from dpframe.noise import discrete_laplace
from dpframe.sealed import Sealed, plain, plain_cache

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.session import Session

_Q_SLACK = 1 - 1e-12          # q is rounded down (a smaller q only makes δ* larger: never under-reports)


MAX_ACCESSES = 10**6
"""The most data accesses a channel may plan for (⌈τ/q⌉ above it: TCT cannot pay off, refuse)."""


def q_notprior(eps: float) -> float:
    """Lemma 2.3: a NotPrior target of an ε-DP call is a 1/(e^ε + 1)-target (e^{−ε}/(1 + e^{−ε}): no overflow)."""
    return math.exp(-eps) / (1.0 + math.exp(-eps))


def q_revise(eps: float) -> float:
    """Lemma 2.5: a revise call is a NotPrior target of a 2ε-DP call."""
    return q_notprior(2 * eps)


def q_between(eps: float, width: int, sensitivity: int) -> float:
    """BetweenThresholds (Lemma G.1) with w = ``width`` grid steps and discrete Laplace noise.

    A gap too wide for a float (10⁴⁰⁰ steps: a bare OverflowError from ``between(q, 10**400, 10**401)``) is an
    infinite exponent, where ``expm1`` is −1.

    Example:
        >>> q_between(1.0, 10**400, 1) == q_notprior(1.0)
        True

    """
    try:
        exponent = width * eps / sensitivity
    except OverflowError:
        exponent = math.inf
    return -math.expm1(-exponent) * q_notprior(eps)


def delta_star(tau: int, n: int, q: float) -> float:
    """P[Binomial(n, q) ≤ τ − 1]: the chance that n data accesses see fewer than τ hits (exact tail).

    The regularized upper incomplete beta function 1 − I_q(τ, n − τ + 1) (Boost's, the same routine as
    ``scipy.stats.binom.cdf`` without its 0.6 s import): within 1e-13 relative of the exact rational tail on
    the grid of ``tests/interactive/test_tct.py``, far inside the 1e-9 margin every plan adds.

    Example:
        >>> round(delta_star(1, 27, 0.4), 9) == round(0.6**27, 9)
        True

    """
    from scipy.special import betaincc

    return 1.0 if tau > n else float(betaincc(tau, n - tau + 1, q))


def planning_delta(delta: Fraction, argument: str = "delta") -> float:
    """The float δ a TCT plan is calibrated to: ``down(δ)``, refused below the smallest normal float (2.2e-308).

    Below it a float is subnormal: δ*(n) and the composition's δ keep a few significant bits there, so the
    relative margins of the plans (10⁻⁹) mean nothing, and plans checked at δ = 10⁻³²³ exceeded it by up to 45 %
    (review 37b). Public inputs only: the refusal is made before anything is charged.

    Example:
        >>> planning_delta(Fraction(1, 10**6)) <= 1e-6
        True
        >>> try:
        ...     planning_delta(Fraction(1, 10**320))
        ... except BudgetError as e:
        ...     e.argument
        'delta'

    """
    d = down(delta)
    if d < sys.float_info.min:
        raise BudgetError(f"δ = {float(delta):.3g} is below the smallest normal float (2.2e-308), where the plan's "
                          "float tails lose their precision", argument=argument, fix="pass a δ of at least 1e-300")
    return d


@dataclass(frozen=True)
class ChannelPlan:
    """The reservation of a channel: n data accesses, δ*, and the (ε', δ) it composes to."""

    n: int
    delta_star: float
    epsilon: float

    @staticmethod
    @plain_cache(maxsize=256)
    def optimise(eps: float, q: float, tau: int, delta: float) -> ChannelPlan:
        """Minimise ε'(n) over n ≥ ⌈τ/q⌉ subject to δ*(n) < δ (digest O7). Public inputs only.

        Memoized (a pure function of public floats, its result immutable): the search costs ~60 ms, which every
        channel opened with the same parameters paid again.

        A coarse pass in steps of ~0.5 % of n, then finer passes around the best (a tenth of the step each
        time, down to 1 or n/2000). Any n gives a valid reservation; the search only decides how tight it
        is. The coarse pass
        stops at the first n with δ*(n) ≤ δ/1000: every larger n has ε'(n) ≥ f_ε(n, δ) ≥ f_ε(n_stop, δ)
        (more calls never compose to less), which is at most a hair below ε'(n_stop) = f_ε(n_stop, 0.999·δ).
        """
        start = ChannelPlan._first(q, tau)

        def at(n: int) -> ChannelPlan | None:
            ds = ChannelPlan.tail(q, tau, n)
            return None if ds >= delta else ChannelPlan(n, ds, optimal_epsilon(n, eps, delta - ds))

        best: ChannelPlan | None = None
        n, step, stop = start, 1, start + 40 * max(tau, 10) + int(60 / q)
        while n < stop:
            plan = at(n)
            if plan is not None and (best is None or plan.epsilon < best.epsilon):
                best = plan
            if plan is not None and plan.delta_star <= delta * 1e-3:
                break
            step = max(1, n // 200)
            n += step
        if best is None:
            raise BudgetError(f"no number of data accesses gives δ* < {delta:g} for τ={tau}", argument="delta",
                              fix="raise delta or max_hits")
        while step > max(1, best.n // 2000):      # a step of n/2000 moves ε' by ~1/4000 of itself: stop there
            fine = max(1, step // 10)
            for m in range(max(start, best.n - step), best.n + step + 1, fine):
                plan = at(m)
                if plan is not None and plan.epsilon < best.epsilon:
                    best = plan
            step = fine
        return best

    @staticmethod
    def _first(q: float, tau: int, argument: str = "epsilon") -> int:
        """⌈τ/q⌉, the fewest accesses that can see τ hits; refused (public inputs) beyond MAX_ACCESSES."""
        if q <= 0 or tau / q > MAX_ACCESSES:
            per_hit = 1 / q if q > 0 else math.inf
            raise BudgetError(f"a hit costs ~1/q = {per_hit:.3g} data accesses at this per-call ε (q = {q:.3g}), so "
                              f"{tau} hits need more than {MAX_ACCESSES:,}: target charging cannot pay off",
                              argument=argument, fix="use a per-call epsilon ≲ 2 (q near 1/2), or run the "
                                                      "queries as ordinary collects (plain composition)")
        return math.ceil(tau / q)

    @staticmethod
    def tail(q: float, tau: int, n: int) -> float:
        """δ*(n) as every plan reserves it: q rounded down and the tail rounded up (float margins)."""
        return delta_star(tau, n, q * _Q_SLACK) * (1 + 1e-9)

    @staticmethod
    def smallest(q: float, tau: int, delta: float) -> ChannelPlan:
        """The smallest n with δ*(n) ≤ δ (for zCDP sessions: ρ = nε²/2 grows with n)."""
        n = ChannelPlan._first(q, tau)
        while ChannelPlan.tail(q, tau, n) > delta:
            n += max(1, n // 50)
        return ChannelPlan(n, ChannelPlan.tail(q, tau, n), math.nan)


class TargetChargingChannel(Sealed):
    """A TCT channel (use as ``with sess.target_charging(epsilon=, max_hits=, delta=) as ch:``)."""

    def __init__(self, session: Session, epsilon: object, max_hits: object, delta: object, *,
                 min_q: float | None = None, per_unit: bool = False) -> None:
        self.session = session
        self._lock = threading.RLock()      # one call at a time: admission, private run and hit count atomically
        self.epsilon = exact(epsilon, "epsilon")  # type: ignore[arg-type]
        self.max_hits = positive_int(max_hits, "max_hits", MAX_ACCESSES)
        delta, min_q = plain(delta), plain(min_q)     # a number subclass's comparisons could pass δ = 5 as < 1
        if isinstance(delta, bool) or not isinstance(delta, int | float | Fraction) or not 0 < delta < 1:
            raise BudgetError(f"must be in (0, 1), got {delta!r}; target charging needs δ > 0 (no pure-DP "
                              "savings exist, LT19)", argument="delta", fix="pass delta=1e-7")
        self.charged_delta = exact(delta, "delta")     # what is charged: δ as the analyst wrote it
        self.delta = planning_delta(self.charged_delta)  # what the plan is calibrated to: never above it
        # rounded up: the composition never under-reports, and q = 1/(e^ε + 1) (decreasing) is a lower bound
        eps = up(self.epsilon) if self.epsilon < 10**6 else math.inf   # q = 0 there: refused just below
        ChannelPlan._first(q_notprior(eps), self.max_hits)     # refuses an ε at which TCT cannot pay off
        if min_q is not None and (isinstance(min_q, bool) or not isinstance(min_q, int | float | Fraction)):
            raise BudgetError(f"must be a number or None, got {type(min_q).__name__}", argument="min_q",
                              fix="omit it (NotPrior targets) or pass a probability such as 0.01")
        if min_q is not None and not 0 < min_q <= q_notprior(eps):     # (compared exactly: an int past floats too)
            raise BudgetError(f"must be in (0, 1/(e^ε+1)] = (0, {q_notprior(eps):.6g}], got {min_q!r}",
                              argument="min_q", fix="omit it (NotPrior targets) or lower it for between()")
        self.q = q_notprior(eps) if min_q is None else float(min_q)
        ChannelPlan._first(self.q, self.max_hits, "min_q")
        if not isinstance(per_unit, bool | np.bool_):
            raise ArgumentError(f"must be True or False, got {type(per_unit).__name__}", argument="per_unit",
                                fix="pass per_unit=True for individual charging, or leave it out")
        self.per_unit = bool(per_unit)
        if self.per_unit and session.privacy_unit.column is None:
            raise PlanError("per-unit charging needs a privacy-unit column (a stable identity per unit)",
                            argument="per_unit", fix="open the session with dp.PrivacyUnit('user_id', ...)")
        total = session.accountant.total
        if getattr(total, "delta", 0) == 0:
            raise BudgetError("target charging needs δ > 0 but this session's total budget has δ = 0",
                              argument="delta",
                              fix="open the session with dp.ApproxDP(eps, delta) or dp.ZCDP(rho, delta)")
        if total.notion == "zcdp":
            self.plan = ChannelPlan.smallest(self.q, self.max_hits, self.delta)
            self.cost: SessionCost = make("zcdp", round_up(self.plan.n * eps * eps / 2), self.charged_delta)
            self.guarantee: Budget = self.cost
        else:
            self.plan = ChannelPlan.optimise(eps, self.q, self.max_hits, self.delta)
            self.guarantee = ApproxDP(round_up(self.plan.epsilon), self.charged_delta)
            self.cost = session.accountant.charge(self.guarantee)
        self._hits = 0
        self._calls = 0
        self._handles: dict[str, tuple[Scalar, int, Fraction]] = {}
        self._unit_hits: dict[Any, int] = {}
        self._reservation: Reservation | None = None

    # ------------------------------------------------------------------------------ lifecycle
    @_atomic
    def __enter__(self) -> TargetChargingChannel:
        if self._reservation is not None:
            raise PlanError("this channel was already opened", argument="channel",
                            fix="open a new one with sess.target_charging(...)")
        self._reservation = Reservation(self.session, self.cost,
                                        f"target_charging(ε={self.epsilon}, τ={self.max_hits}, δ={self.delta:g})",
                                        f"TCT channel (n={self.plan.n} accesses, δ*={self.plan.delta_star:.3g})",
                                        owner=self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @_atomic
    def close(self) -> None:
        """Close the channel; its reservation stays charged in full (a filter, not an odometer)."""
        if self._reservation is not None:
            self._reservation.commit()

    @property
    def hits(self) -> int:
        """Hits used so far (channel-wide; a per-unit channel counts them per unit, privately)."""
        return self._hits

    @property
    def calls(self) -> int:
        """Calls admitted so far (public)."""
        return self._calls

    @property
    def closed(self) -> bool:
        """Closed by close(), by the τ-th hit or by a failure (or never opened)."""
        return self._reservation is None or self._reservation.closed

    def status(self) -> str:
        """E.g. "reserved ε=7.58, δ=1e-07; 3 of 30 hits used; open; protects add/remove one privacy unit: ..."."""
        state = "not open" if self._reservation is None else ("closed" if self.closed else "open")
        # Per unit: which units are exhausted is private (never shown); only the cap is public.
        used = (f"{self.max_hits} hits per privacy unit" if self.per_unit
                else f"{self.hits} of {self.max_hits} hits used")
        # The channel's own guarantee (not the accountant's rendering of the charge: a PLD session would
        # re-discretise an (ε', δ) point and print a meaningless ε).
        return f"reserved {describe(self.guarantee)}; {used}; {state}; protects {self.session.privacy_unit.protects()}"

    def __repr__(self) -> str:
        return f"<dp.TargetChargingChannel {self.status()}>"

    # ------------------------------------------------------------------------------ admission
    def _call_epsilon(self, epsilon: object, factor: Fraction | int) -> Fraction:
        """The ε of the call's mechanism; the call is charged factor·ε, which must be ≤ the channel's ε."""
        eps = self.epsilon / factor if epsilon is None else exact(epsilon, "epsilon")  # type: ignore[arg-type]
        if eps * factor > self.epsilon:
            shown = f"{float(eps * factor):g}" if eps * factor < 10**300 else "over 1e300"
            raise BudgetError(f"this call is {factor}·ε = {shown}-DP, more than the channel's "
                              f"ε = {float(self.epsilon):g}", argument="epsilon",
                              fix=f"pass epsilon ≤ {float(self.epsilon / factor):g}")
        return Fraction(eps)

    def _admit(self, q: float, hits: int = 1, kind: str = "this call") -> Reservation:
        """Admission from public state only: open, q ≥ q_ch, room for the hits."""
        if self._reservation is None:
            raise DPFrameError("the channel is not open", argument="channel",
                               fix="use it inside `with sess.target_charging(...) as ch:`")
        self._reservation.check_open()
        if q < self.q:
            raise BudgetError(f"{kind} has a q = {q:.6g} target, below the channel's q = {self.q:.6g}",
                              argument="min_q", fix="open the channel with a smaller min_q")
        if not self.per_unit and self.hits + hits > self.max_hits:
            raise BudgetError(f"{kind} needs {hits} hits, {self.max_hits - self.hits} left", argument="max_hits",
                              fix="open a new channel")
        return self._reservation

    def _hit(self, contributors: Sequence[Any] = ()) -> None:
        if self.per_unit:
            for u in contributors:
                self._unit_hits[u] = self._unit_hits.get(u, 0) + 1
            return
        self._hits += 1
        if self.hits >= self.max_hits:
            self.close()

    def _measure(self, sc: Scalar, eps: Fraction) -> tuple[int, list[Any]]:
        """One noisy evaluation: (noisy value, units that contributed to it) — both PRIVATE until published.

        The units come from the same statistics call as the value (per-unit channels; [] otherwise), so
        a hit charges exactly the units that moved the released value.
        """
        scale = sc.sensitivity / eps
        if self.per_unit:       # before any read: a record per unit needs ids that can key one (unit_keys)
            unit = self.session.privacy_unit.column
            assert unit is not None
            check_keyable(sc.query.node.input.schema[unit], "a per-unit target-charging channel")

        def run() -> tuple[int, list[Any]]:
            if self.per_unit:   # read from the counts at each call: a cached set could lag them (an interrupt)
                exhausted = frozenset(u for u, h in self._unit_hits.items() if h >= self.max_hits)
                exact, units = sc._exact_by_unit(self.session, exhausted)
            else:
                exact, units = sc._exact(self.session), []
            return exact + int(discrete_laplace(scale, 1, self.session.rng)[0]), units
        assert self._reservation is not None
        return self._reservation.run(run)

    # -------------------------------------------------------------------------------- calls
    @_atomic
    def test(self, query: Any, threshold: object, *, prior: bool = False, epsilon: object = None) -> bool:
        """Private test "query ≥ threshold?"; NotPrior target: only an answer ≠ ``prior`` is charged."""
        eps = self._call_epsilon(epsilon, 1)
        bar_value = public_number(threshold, "threshold")
        if not isinstance(prior, bool):
            raise ArgumentError(f"must be True or False, got {prior!r}", argument="prior",
                               fix="pass the expected answer (e.g. the previous one)")
        if self.per_unit and prior:
            raise PlanError("per-unit channels charge 'above' answers only", argument="prior", fix="omit prior")
        sc = scalar(self.session, query, eps)
        self._admit(q_notprior(up(eps)))
        bar = sc.threshold_units(bar_value)
        value, units = self._measure(sc, eps)
        above = value >= bar
        self._calls += 1
        if above != prior:
            self._hit(units)
        return bool(above)

    @_atomic
    def conditional_release(self, query: Any, when: Target, *, epsilon: object = None,
                            name: str | None = None) -> Any:
        """The noisy value if it lies in the target ``when``, else None; only releases are charged.

        ``when`` is declarative — ``dp.above(x)``, ``dp.below(x)``, ``dp.between(a, b)`` or
        ``dp.outside(a, b)`` — and the library evaluates it, exactly, on the noisy value: no analyst code
        sees a value that is not released (a function is refused). With ``name=``, an unreleased value
        is kept (secretly) for :meth:`revise`; revisions cost 2ε, so a named call runs at ε/2 by default.

        Example:
            >>> import polars as pl, dpframe as dp
            >>> sess = dp.Session({"t": pl.DataFrame({"g": [i % 4 for i in range(4000)]})},
            ...                   privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(60, 1e-6), seed=0)
            >>> with sess.target_charging(epsilon=0.5, max_hits=5, delta=1e-7) as ch:
            ...     big = ch.conditional_release(sess.table("t").agg(dp.len()), when=dp.above(3000))
            ...     small = ch.conditional_release(sess.table("t").agg(dp.len()), when=dp.below(3000))
            >>> 3950 < big < 4050, small, ch.hits
            (True, None, 1)

        """
        target = as_target(when)
        name = plain(name)      # a str subclass's __eq__/__hash__ could say "new" for a name already kept
        if name is not None and (not isinstance(name, str) or name in self._handles):
            raise ArgumentError(f"name {name!r} is not a new string", argument="name", fix="use a fresh name")
        if name is not None and self.per_unit:
            raise PlanError("revisions are not supported in per-unit channels", argument="name", fix="omit name")
        eps = self._call_epsilon(epsilon, 1 if name is None else 2)
        sc = scalar(self.session, query, eps)
        self._admit(q_notprior(up(eps)))
        value, units = self._measure(sc, eps)
        self._calls += 1
        if target.contains(sc.in_output_units(value)):
            self._hit(units)
            return sc.to_output(value)
        if name is not None:
            self._handles[name] = (sc, value, eps)
        return None

    @_atomic
    def revise(self, name: str, when: Target) -> Any:
        """Release a named, not yet released value if it lies in the target ``when`` (a 2ε call, Lemma 2.5).

        ``when`` is declarative, as for :meth:`conditional_release` (e.g. a lower bar: ``dp.above(3000)``).
        """
        target = as_target(when)
        name = plain(name)
        if not isinstance(name, str) or name not in self._handles:    # a list or dict is no name (and unhashable)
            raise ArgumentError(f"no unreleased value named {name!r}", argument="name",
                               fix=f"use one of {sorted(self._handles)}")
        sc, value, eps = self._handles[name]
        self._admit(q_revise(up(eps)), kind="a revision")
        self._calls += 1
        if target.contains(sc.in_output_units(value)):
            del self._handles[name]
            self._hit()
            return sc.to_output(value)
        return None

    @_atomic
    def between(self, query: Any, lower: object, upper: object, *, epsilon: object = None) -> str:
        """BetweenThresholds: "below", "between" or "above"; only "between" is charged (Lemma G.1)."""
        if self.per_unit:
            raise PlanError("per-unit channels support test and conditional_release", argument="between",
                            fix="use a channel without per_unit")
        eps = self._call_epsilon(epsilon, 1)
        lo, hi = public_number(lower, "lower"), public_number(upper, "upper")
        if not lo < hi:
            fix = "swap them" if lo > hi else "pass two different thresholds (for one threshold use ch.test)"
            raise ArgumentError(f"needs lower < upper, got {lo} ≥ {hi}", argument="lower", fix=fix)
        sc = scalar(self.session, query, eps)
        lo_units, hi_units = sc.threshold_units(lo), math.floor(hi / sc.unit)
        width = hi_units - lo_units
        self._admit(q_between(up(eps), width, int(sc.sensitivity)) if width > 0 else 0.0,
                    kind=f"between() with a {width}-step gap")
        value, _ = self._measure(sc, eps)
        self._calls += 1
        if value < lo_units:
            return "below"
        if value > hi_units:
            return "above"
        self._hit()
        return "between"

    @_atomic
    def boundary_test(self, query: Any, threshold: object, *, epsilon: object = None) -> str:
        """The boundary-wrapped test "query ≥ threshold?": "above", "below" or "boundary" (the target).

        Alg. 4 with an exact oracle (:mod:`dpframe.interactive.boundary`): "boundary" comes out with
        probability π/(1+π), π the chance of the test's less likely answer, else a fresh test answer.
        Only "boundary" is charged: a t = 4ε/3 call with q = (e^t − 1)/(2(e^{ε+t} − 1)) ≈ 2/7 (Lemmas
        E.1/E.2), so the test runs at ε = 3/4 of the channel's by default and the channel needs
        ``min_q ≤ q_boundary(ε)``. Values far from the threshold on *either* side are almost free.
        """
        if self.per_unit:
            raise PlanError("per-unit channels support test and conditional_release", argument="boundary_test",
                            fix="use a channel without per_unit")
        eps = self._call_epsilon(epsilon, WRAPPER_FACTOR)
        bar_value = public_number(threshold, "threshold")
        sc = scalar(self.session, query, eps)
        self._admit(q_boundary(up(eps)), kind="a boundary test")
        bar, scale = sc.threshold_units(bar_value), sc.sensitivity / eps
        assert self._reservation is not None
        outcome = self._reservation.run(lambda: wrapped_test(sc._exact(self.session), bar, scale, self.session.rng))
        self._calls += 1
        if outcome == "boundary":
            self._hit()
        return outcome

    @_atomic
    def select_best(self, queries: Sequence[Any], *, epsilon: object = None) -> tuple[int, Any]:
        """The index and noisy value of the largest of m scalar queries: one hit of a 2ε call."""
        if self.per_unit:
            raise PlanError("per-unit channels support test and conditional_release", argument="select_best",
                            fix="use a channel without per_unit")
        # read once, then checked: a sequence whose len() and iteration disagree (len 1, no item) reached max() of
        # nothing, a raw ValueError
        listed = () if isinstance(queries, str) or not isinstance(queries, Sequence) else tuple(queries)
        if not listed:
            raise ArgumentError("expected a non-empty list of queries", argument="queries",
                               fix="pass [query1, query2, ...]")
        eps = self._call_epsilon(epsilon, 2)
        scalars = [scalar(self.session, q, eps, argument=f"queries[{i}]") for i, q in enumerate(listed)]
        self._admit(q_notprior(2 * up(eps)), kind="a selection")
        values = [self._measure(sc, eps)[0] for sc in scalars]
        exact_values = [sc.in_output_units(v) for sc, v in zip(scalars, values, strict=True)]
        best = max(range(len(values)), key=lambda i: (exact_values[i], -i))  # ties: lowest index
        self._calls += 1
        self._hit()
        return best, scalars[best].to_output(values[best])


def zcdp_session(session: Session) -> bool:
    """Whether the session accounts in zCDP."""
    return isinstance(session.accountant.total, ZCDP)
