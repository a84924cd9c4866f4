"""The Rényi-DP accountant: composition on a grid of orders (fractional ones included), two conversions.

**Standalone** it composes any sequence of mechanisms fixed in advance (the mechanisms themselves may
be chosen adaptively, their curves may not): ε(α) adds up pointwise; the conversion to (ε, δ) takes
the smaller of the standard one, ε(α) + log(1/δ)/(α − 1) (Mironov 2017, Prop. 3), and the improved
one, ε(α) + log(1 − 1/α) − (log δ + log α)/(α − 1) (Balle et al. 2020; Canonne, Kamath & Steinke
2020, Prop. 12), minimised over the grid and then refined over continuous α (the thesis' oracle 5.676
needs α* ≈ 5.51; digest §1.2, §7.2). ``explain()`` shows which conversion and order won.

**As a session filter** the sequence is chosen adaptively (a query's budget may depend on earlier
answers), so the order cannot be picked after the fact for free. The filter keeps one Rényi filter
per order α ∈ Λ (Feldman & Zrnic 2021: if Σ_t ε_t(α) ≤ G_α almost surely the composition is
(α, G_α)-RDP) and admits a query while *some* order still fits: Σ ε(α) ≤ G_α with G_α the largest RDP
whose conversion at δ/|Λ| is ≤ ε. Proof sketch (union bound over orders): let E_α be the event "α is
the first order of Λ that still fits at the end" — disjoint events that cover every run, since no query
that would leave no order fitting is admitted; on E_α the run coincides with the α-filter run P_α
(α fitted throughout, so that filter refused exactly what this one refused), so
Pr_D[S] − e^ε Pr_D'[S] = Σ_α (Pr_{P_α(D)}[S ∩ E_α] − e^ε Pr_{P_α(D')}[S ∩ E_α])
≤ Σ_α H_{e^ε}(P_α(D)‖P_α(D')) ≤ |Λ|·δ/|Λ|. (With overlapping events "α still fits" the sum over α
would count Pr_D'[S] up to |Λ| times.) Approximate parts δ0 (partition
selection) are subtracted from δ first (basic composition of the δ0s, also a valid filter).

Example:
    >>> from dpframe import accounting as acc
    >>> a = acc.RDPAccountant().compose(acc.gaussian(sigma=85.0), times=8192)
    >>> round(a.epsilon(delta=1e-5, conversion="standard"), 3)
    5.676

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpframe.accounting.accountants import (
    Accountant,
    check_budget,
    check_curves,
    curve_of,
    plan_curves,
    pure_total,
    round_up,
)
from dpframe.accounting.checks import (
    check_alpha,
    check_delta,
    check_epsilon,
    check_rate,
    delta_out,
    epsilon_out,
    shown,
)
from dpframe.accounting.composition import compose_up, composition
from dpframe.accounting.curve import PrivacyCurve
from dpframe.accounting.numerics.rdp import (
    RDP_ORDERS,
    Conversion,
    Converted,
    best_epsilon,
    conversion_margin,
    delta_conversions,
    total_up,
)
from dpframe.accounting.rdp_charge import FILTER_ORDERS as FILTER_ORDERS
from dpframe.accounting.rdp_charge import RDPCharge as RDPCharge
from dpframe.budgets import Budget, add_up, down, make
from dpframe.errors import BudgetError


def check_conversion(conversion: object) -> Conversion:
    """One of the conversion rules."""
    if not isinstance(conversion, str) or conversion not in ("best", "standard", "improved"):
        raise BudgetError(f"must be 'best', 'standard' or 'improved', got {shown(conversion)}", argument="conversion",
                          fix="pass conversion='best'")
    return conversion  # type: ignore[return-value]


class RenyiFilter(Accountant):
    """The session half of the RDP and PLD accountants: a multi-order Rényi filter (see the module docstring).

    A charge is an :class:`RDPCharge`: the RDP curve of a plan on :data:`FILTER_ORDERS` (plus δ0). Subclasses
    add the standalone half (:class:`RDPAccountant`, :class:`~dpframe.accounting.PLDAccountant`) and may
    add to :meth:`describe_charge` through :meth:`plan_note`.
    """

    accepts = frozenset({"approx"})

    def __init__(self, total: Budget | None = None) -> None:
        super().__init__(total)
        if total is not None and getattr(total, "delta", 0) == 0:
            raise BudgetError("an RDP session needs a total budget with δ > 0", argument="budget",
                              fix="use dp.ApproxDP(epsilon, delta=1e-6), or accountant='basic' for pure DP")
        if total is not None and total.epsilon >= Fraction(10**300):  # type: ignore[union-attr]
            raise BudgetError("the Rényi filter accounts in floats: ε must be below 1e300", argument="budget",
                              fix="use a smaller total ε, or accountant='basic'")
        if total is not None and down(total.delta / len(FILTER_ORDERS)) == 0:  # type: ignore[union-attr]
            raise BudgetError(f"the Rényi filter accounts in floats and splits δ over {len(FILTER_ORDERS)} orders: "
                              "this δ is so small that each order's share rounds to 0 (it could admit no query)",
                              argument="budget", fix="use δ ≥ 1e-300, or accountant='basic'")

    def charge(self, cost: Budget) -> RDPCharge:
        """A bare budget's RDP charge (pure ε → the tight ε-DP curve; ρ → αρ; (ε, δ) → δ0-approximate)."""
        return RDPCharge.of([curve_of(check_budget(cost))])

    def charge_plan(  # type: ignore[override]
            self, cost: Budget, curves: Sequence[PrivacyCurve] | None, rate: float = 1.0) -> RDPCharge:
        """The RDP charge of a plan: its curves composed, amplified once when they share a Poisson sample.

        A plan whose curves are missing or lack an RDP curve is charged the curve of ``cost`` (sound:
        ``cost`` bounds the whole plan; see :func:`~dpframe.accounting.accountants.plan_curves`).
        """
        check_budget(cost)
        check_curves(curves)
        rate = check_rate(rate)
        plan = plan_curves(curves, cost)
        if rate < 1:
            plan = [composition(plan).subsampled(rate)]
        return RDPCharge.of(plan)

    def _compose_charges(self, charges: Sequence[Any]) -> RDPCharge:
        values = np.zeros(len(FILTER_ORDERS))
        d0 = np.zeros(1)
        for c in charges:                              # rounded up: a running total never under-reports
            values = add_up(values, np.asarray(c.values))
            d0 = add_up(d0, np.array([c.delta0]))
        return RDPCharge(tuple(float(v) for v in values), float(d0[0]))

    def empty(self) -> RDPCharge:
        return RDPCharge(tuple(0.0 for _ in FILTER_ORDERS), 0.0)

    def _budget(self) -> tuple[float, float]:
        """The total (ε, δ) as the largest floats not above them (the filter never allows more)."""
        return down(self._session_total().epsilon), down(self._session_total().delta)  # type: ignore[union-attr]

    def check_charge(self, charge: object, argument: str = "charges") -> None:
        """Refuse what is not an :class:`RDPCharge` on this filter's orders."""
        if not isinstance(charge, RDPCharge) or len(charge.values) != len(FILTER_ORDERS):
            raise BudgetError(f"expected an RDP charge of this accountant, got {shown(charge)}", argument=argument,
                              fix="pass what charge()/charge_plan()/compose() returned")

    def filter_epsilon(self, spent: RDPCharge) -> Converted:
        """The filter's ε for a composed total: min over Λ of the conversion at (δ − Σδ0)/|Λ|."""
        self.check_charge(spent, "spent")
        left = down(self._session_total().delta - Fraction(spent.delta0))  # type: ignore[union-attr]
        if left <= 0:
            return Converted(math.inf, math.nan, "δ0 exceeds δ")
        values = np.asarray(spent.values) * (1 + 1e-12)
        if not np.any(values > 0):
            return Converted(0.0, math.nan, "nothing spent")
        # each order's share rounded down, so that the shares of the union bound add up to at most δ − Σδ0
        share = down(Fraction(left) / len(FILTER_ORDERS))
        c = best_epsilon(FILTER_ORDERS, values, share)
        if not math.isfinite(c.epsilon):
            return c
        # The conversions add float terms rounded to nearest (a few ulps each, below the exact value as often as
        # above): round the result up by 10⁻¹² of the terms' size at the winning order, so that the filter's ε is
        # never below the exact conversion of the recorded total (the margin on the values alone was nothing next
        # to log(1/δ′)/(α − 1) when the charges were small).
        return Converted(c.epsilon + conversion_margin(c.epsilon, c.alpha, share), c.alpha, c.rule)

    def fits(self, spent: Any) -> bool:
        eps, _ = self._budget()
        return self.filter_epsilon(spent).epsilon <= eps

    def report(self, spent: Any) -> Budget:
        """The filter's (ε, δ) of a composed total: the conversion uses all of δ once some RDP is spent.

        Before that (nothing spent, or only the δ0 of mechanisms with a zero RDP curve) the total is (0, Σδ0): the
        whole session δ was reported spent by a fresh session's ``spent()`` and every ``explain()``'s "spent so
        far", while ``remaining()`` kept all of it.

        Example:
            >>> from dpframe.budgets import ApproxDP
            >>> a = RDPAccountant(ApproxDP(1, Fraction(1, 10**6)))
            >>> a.report(a.empty()), a.report(a.charge(ApproxDP(Fraction(1, 2), 0))).delta
            (ApproxDP(epsilon=0, delta=0), Fraction(1, 1000000))

        """
        c = self.filter_epsilon(spent)
        if c.rule == "nothing spent":
            return make("approx", Fraction(0), Fraction(repr(spent.delta0)))
        eps = round_up(c.epsilon) if math.isfinite(c.epsilon) else Fraction(10**9)
        return make("approx", eps, self._session_total().delta)  # type: ignore[union-attr]

    def remaining(self, spent: Any) -> Budget:
        eps, delta = self._budget()
        used = self.report(spent)
        return make("approx", max(Fraction(0), Fraction(repr(eps)) - used.epsilon),  # type: ignore[union-attr]
                    max(Fraction(0), self._session_total().delta - Fraction(repr(spent.delta0))))  # type: ignore[union-attr]

    def shortfall(self, spent_after: Any) -> str:
        if self.short_of_delta(spent_after):
            over = Fraction(repr(spent_after.delta0)) - self._session_total().delta  # type: ignore[union-attr]
            return (f"δ={max(0.0, float(over)):.6g} (the mechanisms' δ0 add up to {spent_after.delta0:.6g}, and the "
                    "Rényi filter needs some of the session δ for its conversion)")
        c = self.filter_epsilon(spent_after)
        eps, _ = self._budget()
        return f"ε={max(0.0, c.epsilon - eps):.6g} (by the Rényi filter)"

    def short_of_delta(self, spent_after: Any) -> bool:
        """Whether the δ0 of a total leave no δ for the filter's conversion (its ε is then ∞ whatever the RDP)."""
        self.check_charge(spent_after, "spent_after")
        return down(self._session_total().delta - Fraction(repr(spent_after.delta0))) <= 0  # type: ignore[union-attr]

    def describe_charge(self, charge: Any) -> str:
        c = self.filter_epsilon(charge)
        if self.short_of_delta(charge):
            return (f"RDP curve of [{'; '.join(charge.labels) or 'budget'}], whose δ0={charge.delta0:.6g} alone leaves "
                    f"nothing of the session δ for the filter's conversion")
        text = (f"RDP curve of [{'; '.join(charge.labels) or 'budget'}]; alone ε={c.epsilon:.6g} by the filter "
                f"({c.rule} conversion at α={c.alpha:g}, δ/{len(FILTER_ORDERS)} per order)")
        note = self.plan_note(charge)
        return f"{text}; {note}" if note else text

    def plan_note(self, charge: RDPCharge) -> str:
        """More about a charge for :meth:`describe_charge` (none here)."""
        return ""


class RDPAccountant(RenyiFilter):
    """Rényi-DP accountant (standalone: odometer of a fixed sequence; session: multi-order Rényi filter).

    Args:
        total: the session's total ``dp.ApproxDP(ε, δ)`` budget (δ > 0); omit for standalone use.
        orders: the Rényi orders (default: 1.1 … 10.9 step 0.1, 11 … 63, 80, 128, 256, 512, 1024).

    """

    name = "rdp"
    requires = "RDP curve"

    def __init__(self, total: Budget | None = None, *, orders: Sequence[float] | None = None) -> None:
        super().__init__(total)
        self.orders = RDP_ORDERS if orders is None else np.unique(check_alpha(orders))
        self._curve: np.ndarray | None = None

    def describe(self) -> str:
        if self._total is None:
            return "Rényi DP: ε(α) adds up; the smaller of the standard and improved conversion"
        return (f"Rényi filter over {len(FILTER_ORDERS)} orders (δ split over them); ε(α) adds up; "
                "the smaller of the standard and improved conversion")

    def supports(self, curve: PrivacyCurve) -> bool:
        """Curves with an RDP curve."""
        return isinstance(curve, PrivacyCurve) and curve.rdp is not None

    # ---------------------------------------------------------------------------------- standalone
    def _changed(self) -> None:
        self._curve = None

    def _delta0(self) -> float:
        return total_up((c.delta0, t) for c, t in self.entries)

    def rdp(self, alpha: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
        """The composed ε(α) at ``alpha`` (default: the accountant's orders)."""
        if alpha is None:
            if self._curve is None:
                self._curve = self._sum(self.orders)
            return self._curve
        return self._sum(check_alpha(alpha))

    def _sum(self, alpha: np.ndarray) -> np.ndarray:
        return compose_up(((curve.rdp_at(alpha), times) for curve, times in self.entries), len(alpha))

    def conversion(self, delta: float, conversion: Conversion = "best", *, refine: bool = True) -> Converted:
        """ε at ``delta`` with the order and the rule used.

        A sequence of pure ε-DP mechanisms is never reported above Σε (basic composition, rule ``"basic"``,
        order α = ∞): both bounds are valid, so is the smaller.

        Example:
            >>> from dpframe import accounting as acc
            >>> RDPAccountant().compose(acc.laplace(scale=100.0)).conversion(1e-6)
            Converted(epsilon=0.01, alpha=inf, rule='basic')

        """
        rule = check_conversion(conversion)
        d = check_delta(delta) - self._delta0()
        if d <= 0:
            return Converted(math.inf, math.nan, "δ0 of the mechanisms exceeds δ")
        if not self.entries:
            return Converted(0.0, math.nan, "nothing composed")
        best = best_epsilon(self.orders, self.rdp(), d, rule)
        if refine and math.isfinite(best.epsilon):
            best = self._refine(best, d, rule)
        if math.isfinite(best.epsilon):    # rounded up: never below the exact conversion (as the filter's)
            best = Converted(best.epsilon + conversion_margin(best.epsilon, best.alpha, d), best.alpha, best.rule)
        pure = pure_total(self.entries)
        if pure is not None and pure <= best.epsilon:
            return Converted(pure, math.inf, "basic")
        return Converted(epsilon_out(best.epsilon), best.alpha, best.rule)

    def _refine(self, best: Converted, delta: float, conversion: Conversion) -> Converted:
        from scipy.optimize import minimize_scalar

        i = int(np.searchsorted(self.orders, best.alpha))
        lo = float(self.orders[max(i - 1, 0)])
        hi = float(self.orders[min(i + 1, len(self.orders) - 1)])
        if hi - lo <= 0:
            return best
        rules: list[Literal["standard", "improved"]] = (
            ["standard", "improved"] if conversion == "best" else [conversion])
        out = best
        for rule in rules:
            def f(a: float, rule: str = rule) -> float:
                c = best_epsilon(np.array([a]), self._sum(np.array([a])), delta, rule)  # type: ignore[arg-type]
                return c.epsilon

            res = minimize_scalar(f, bounds=(max(lo, 1 + 1e-6), hi), method="bounded",
                                  options={"xatol": 1e-4})
            if float(res.fun) < out.epsilon:
                out = Converted(float(res.fun), float(res.x), rule)
        return out

    def epsilon(self, delta: float, conversion: Conversion = "best") -> float:
        """ε at ``delta`` (the smaller of both conversions unless one is named)."""
        return self.conversion(delta, conversion).epsilon

    def delta(self, epsilon: float, conversion: Conversion = "best") -> float:
        """δ at ``epsilon`` (plus the mechanisms' δ0)."""
        e = check_epsilon(epsilon)
        rule = check_conversion(conversion)
        pure = pure_total(self.entries)
        if not self.entries or (pure is not None and e >= pure):
            return 0.0                                   # basic composition: (Σε, 0)-DP
        std, imp = delta_conversions(self.orders, self.rdp(), e)
        pick = {"best": np.minimum(std, imp), "standard": std, "improved": imp}[rule]
        return delta_out(np.nanmin(pick, initial=1.0) + self._delta0())

    def explain(self, delta: float = 1e-6) -> str:
        delta = check_delta(delta)
        c = self.conversion(delta)
        lines = [f"rdp accountant: {self.describe()}", *filter(None, [self.relation_note()])]
        lines += [f"  {t} × {curve.label}" for curve, t in self.entries]
        if c.rule == "basic":
            rdp = best_epsilon(self.orders, self.rdp(), delta - self._delta0())
            lines.append(f"  ε = {c.epsilon:.6g} at δ = {delta:g} by basic composition (every mechanism is pure ε-DP; "
                         f"the RDP conversion gives {rdp.epsilon:.6g})")
            return "\n".join(lines)
        other = self.conversion(delta, "standard" if c.rule == "improved" else "improved")
        lines.append(f"  ε = {c.epsilon:.6g} at δ = {delta:g}: {c.rule} conversion at α = {c.alpha:.4g} "
                     f"(the {other.rule} conversion gives {other.epsilon:.6g})")
        edge = self.orders[-1]
        if math.isfinite(c.alpha) and c.alpha >= edge * 0.99:
            lines.append(f"  warning: the best order is at the edge of the grid ({edge:g}); add larger orders")
        return "\n".join(lines)


