"""The accountant interface and the built-in basic and zCDP accountants.

An accountant has two faces.

**Session filter** (constructed with the session's total budget): it converts each query's cost into
a *charge* (:meth:`Accountant.charge`, or :meth:`Accountant.charge_plan` from the plan's privacy
curves and sampling rate), composes charges (:meth:`Accountant.compose` on a list) and says whether a
total fits (:meth:`Accountant.fits`). Every built-in filter stays valid when later budgets are chosen
after seeing earlier results: basic composition of (εᵢ, δᵢ) (Rogers et al. 2016), additive ρ for
zCDP (Whitehouse et al. 2023), and the RDP filter of :mod:`dpframe.accounting.rdp` (Feldman & Zrnic
2021, one filter per order with δ split over the orders).

**Standalone** (constructed without a total): ``compose(curve, times=k)`` records mechanisms (see
:mod:`dpframe.accounting.curves`), ``epsilon(delta=...)`` / ``delta(epsilon=...)`` report the
guarantee of the whole (fixed) sequence, ``explain()`` says how it was computed.

Example:
    >>> from dpframe.budgets import PureDP, ZCDP
    >>> acc = ZCDPAccountant(ZCDP(1))
    >>> spent = acc.compose([acc.charge(PureDP(1)), ZCDP(0.25)])
    >>> spent, acc.fits(spent)
    (ZCDP(rho=3/4), True)
    >>> from dpframe import accounting as a
    >>> round(a.BasicAccountant().compose(a.laplace(scale=10.0), times=5).epsilon(delta=1e-6), 6)
    0.5

"""

from __future__ import annotations

import copy
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar, overload

import numpy as np

from dpframe.accounting.checks import (
    check_delta,
    check_epsilon,
    check_rate,
    check_times,
    delta_out,
    epsilon_out,
    shown,
)
from dpframe.accounting.curve import PrivacyCurve
from dpframe.accounting.curves import approx, pure, zcdp
from dpframe.accounting.numerics.rdp import dot_up
from dpframe.accounting.numerics.subsampling import amplified_epsilon
from dpframe.accounting.rdp_charge import SessionCost
from dpframe.budgets import (
    ZCDP,
    ApproxDP,
    Budget,
    Notion,
    PureDP,
    convert,
    describe,
    down,
    make,
    up,
    zcdp_delta,
    zcdp_epsilon,
    zero,
)
from dpframe.errors import BudgetConversionError, BudgetError, BudgetExceededError, DPFrameError
from dpframe.sealed import Sealed


def round_up(x: float) -> Fraction:
    """A Fraction ≥ x with margin for float error (never under-reports)."""
    if not math.isfinite(x):
        raise BudgetError(f"the computed value is {x}", argument="budget", fix="use more noise or fewer queries")
    if x <= 0:
        return Fraction(0)
    return Fraction(math.ceil(x * (1 + 1e-12) * 10**12) + 1, 10**12)


def check_budget(value: object, argument: str = "cost") -> Budget:
    """A privacy budget: dp.PureDP, dp.ApproxDP or dp.ZCDP."""
    if not isinstance(value, PureDP | ApproxDP | ZCDP):
        raise BudgetError(f"expected a budget, got {shown(value)}", argument=argument,
                          fix="pass dp.PureDP(epsilon), dp.ApproxDP(epsilon, delta) or dp.ZCDP(rho)")
    return value


def _float_of(x: Fraction, argument: str) -> float:
    """The smallest float ≥ ``x`` (a curve never under-reports), or a BudgetError naming ``argument``."""
    try:
        return up(Fraction(x))
    except OverflowError:
        raise BudgetError(f"{_short(x)} is too large to account with privacy curves", argument=argument,
                          fix="use a budget below 1e300") from None


def _short(x: Fraction) -> str:
    return f"a number with {len(str(x.numerator // x.denominator))} digits"


def curve_of(cost: Budget) -> PrivacyCurve:
    """The privacy curve a bare budget guarantees (for charges without declared curves)."""
    if cost.notion == "zcdp":
        return zcdp(_float_of(cost.rho, "rho"), up(Fraction(cost.delta)))  # type: ignore[union-attr]
    eps = _float_of(cost.epsilon, "epsilon")  # type: ignore[union-attr]
    delta = up(Fraction(getattr(cost, "delta", 0)))
    return approx(eps, delta) if delta else pure(eps)


class Accountant(Sealed, ABC):
    """How charges compose. Subclass and register a factory via the ``dpframe_accountants`` hook.

    Class attributes: ``name`` (the registered name), ``accepts`` (the session notions it filters),
    ``requires`` (what :meth:`supports` needs of a curve, for error messages) and ``additive`` (charges
    compose by adding ε and δ: basic composition, the only composition ex-post refunds are proven for).
    Sealed: a session hands its accountant out (``sess.accountant``); a method replaced on it (``fits``,
    ``charge``) would be the filter.
    """

    name: ClassVar[str]
    accepts: ClassVar[frozenset[Notion]]
    requires: ClassVar[str] = "privacy curve this accountant can use"
    additive: ClassVar[bool] = False

    def __init__(self, total: Budget | None = None) -> None:
        if total is not None:
            check_budget(total, "total")
        if total is not None and total.notion not in self.accepts:
            raise BudgetConversionError(
                f"the {self.name!r} accountant accounts in {sorted(self.accepts)}, not {total.notion}",
                argument="accountant", fix="pick the accountant that matches the session budget, or omit it")
        self._total = total
        self._entries: list[tuple[PrivacyCurve, int]] = []

    @property
    def entries(self) -> tuple[tuple[PrivacyCurve, int], ...]:
        """Standalone: the composed ``(curve, times)`` pairs, in order (a copy: ``compose`` adds to them)."""
        return tuple(self._entries)

    # ------------------------------------------------------------------------------ session filter
    @property
    def total(self) -> Budget:
        """The session's total budget (only for session accountants): a copy, so changing it changes nothing.

        (``object.__setattr__(sess.accountant.total, "epsilon", 10**6)`` raised the total the ledger checks
        charges against, when this was the accountant's own object.)
        """
        return copy.copy(self._session_total())

    def _session_total(self) -> Budget:
        """The total budget itself, for the accountant's own checks (a DPFrameError for a standalone one)."""
        if self._total is None:
            raise DPFrameError("this accountant was built standalone, without a total budget",
                               argument="total", fix=f"construct it as {type(self).__name__}(total_budget)")
        return self._total

    @property
    def notion(self) -> str:
        """The notion charges are kept in."""
        return self._session_total().notion

    def charge(self, cost: Budget) -> SessionCost:
        """A query's cost as a charge of this accountant (raises if it cannot convert soundly).

        RDP/PLD sessions return an :class:`~dpframe.accounting.RDPCharge` in place of a budget; treat
        charges as opaque values for ``compose``/``fits``/``describe_charge`` and the ledger.
        """
        charged = convert(check_budget(cost), self._session_total().notion)
        first, delta = rounded_up(_first(charged)), rounded_up(_delta(charged))
        if first == _first(charged) and delta == _delta(charged):
            return charged
        # a denominator past 2^TOTAL_BITS (δ = 10^-10000 sent exactly): the ledger could not write it (review 53i)
        return make(charged.notion, first, delta)

    def charge_plan(self, cost: Budget, curves: Sequence[PrivacyCurve] | None, rate: float = 1.0) -> SessionCost:
        """The charge of a plan whose mechanisms cost ``cost`` in total, all run on one Poisson sample.

        ``curves`` are the plan's mechanisms (not subsampled: they all read the *same* sample, so
        accountants that use curves amplify their composition once, see
        :func:`~dpframe.accounting.curves.composition`); ``rate`` < 1 means the input was Poisson-sampled.
        Default: basic amplification of the whole cost (Li et al. 2012: (ε, δ) → (log(1 + γ(e^ε − 1)),
        γδ)) for pure/approximate DP; none for zCDP (sampling never hurts, but zCDP cannot express the gain).
        """
        charged = self.charge(cost)
        check_curves(curves)
        rate = check_rate(rate)
        if rate >= 1 or self._session_total().notion == "zcdp":
            return charged
        first = charged.epsilon  # type: ignore[union-attr]
        try:
            eps = min(first, round_up(amplified_epsilon(up(first), rate)))
        except (OverflowError, BudgetError):      # ε beyond floats: no amplification (sound, and it fits nothing)
            eps = first
        # γδ with γ the float's exact value: its decimal repr can be below it (repr 0.1 is 1/10, the float
        # 0.1000000000000000055...), and the sample keeps a unit with probability ⌊γ·2⁶⁴⌋/2⁶⁴ ≤ γ.
        return make(self._session_total().notion, eps, getattr(charged, "delta", Fraction(0)) * Fraction(rate))

    @overload
    def compose(self, charges: Sequence[Any]) -> Any: ...

    @overload
    def compose(self, charges: PrivacyCurve, times: int = 1) -> Accountant: ...

    def compose(self, charges: Any, times: int = 1) -> Any:
        """Session: the total of a list of charges. Standalone: record ``times`` runs of a curve."""
        if isinstance(charges, PrivacyCurve):
            times = check_times(times)
            if not self.supports(charges):
                raise composability_error(charges, self)
            if self.entries and charges.neighbours != self.neighbours:
                raise BudgetError(f"{charges.label} is a {_RELATION[charges.neighbours]} curve and this accountant "
                                  f"composes {_RELATION[self.neighbours]} ones (a guarantee is for one relation)",
                                  argument="charges", fix="convert the add/remove curves with acc.replace_one(curve)")
            self._entries.append((charges, times))
            self._changed()
            return self
        if isinstance(charges, str | bytes) or not isinstance(charges, Sequence):
            raise BudgetError(f"expected a privacy curve or a list of charges, got {shown(charges)}",
                              argument="charges",
                              fix="pass a curve such as acc.gaussian(sigma=1.0) (a list of charges only to a "
                                  "session accountant, built with its total budget)")
        for c in charges:
            self.check_charge(c)
        return self._compose_charges(charges)

    @property
    def neighbours(self) -> str:
        """Standalone: the neighbouring relation of the composed curves (``"add_remove"`` or ``"replace_one"``).

        Example:
            >>> from dpframe import accounting as acc
            >>> acc.PLDAccountant().compose(acc.replace_one(acc.laplace(1.0))).neighbours
            'replace_one'

        """
        return self.entries[0][0].neighbours if self.entries else "add_remove"

    def relation_note(self) -> str:
        """Standalone: a line for ``explain()`` naming a replace-one relation (empty for add/remove)."""
        return "  neighbours: replace-one (one unit's data replaced)" if self.neighbours == "replace_one" else ""

    def check_charge(self, charge: object, argument: str = "charges") -> None:
        """Refuse what is not a charge of this accountant (a budget of the session's notion here)."""
        if not isinstance(charge, PureDP | ApproxDP | ZCDP) or charge.notion != self._session_total().notion:
            raise BudgetError(f"expected a {self._session_total().notion} charge of this accountant, got "
                              f"{shown(charge)}", argument=argument,
                              fix="pass what charge()/charge_plan()/compose() returned")

    def charge_from_json(self, text: str) -> Any:
        """A charge of this accountant's own kind from the text its ``to_json()`` wrote: how the ledger reads it back.

        The ledger stores dp budgets and :class:`~dpframe.accounting.RDPCharge` s itself; a charge of another kind
        (its ``notion`` none of ``pure``, ``approx``, ``zcdp``, ``rdp``) is stored as ``charge.to_json()`` and read
        back by this method, which an accountant with charges of its own overrides. The ledger records such a charge
        only if it reads back equal to itself (else a :class:`~dpframe.errors.LedgerError`, nothing charged): a
        charge it could not read would make every later read of the ledger fail. Here: a ValueError (this accountant
        has no charge kind of its own).

        Example:
            >>> BasicAccountant(PureDP(1)).charge_from_json("{}")
            Traceback (most recent call last):
            ...
            ValueError: the 'basic' accountant has no charge kind of its own to read from '{}'...

        """
        raise ValueError(f"the {self.name!r} accountant has no charge kind of its own to read from {text[:80]!r}: "
                         "an accountant whose charges are not dp budgets or RDPCharges overrides charge_from_json")

    def supports(self, curve: PrivacyCurve) -> bool:
        """Whether this accountant can compose ``curve`` standalone (here: any curve with an RDP curve or a profile).

        Example:
            >>> from dpframe import accounting as acc
            >>> acc.BasicAccountant().supports(acc.laplace(1.0)), acc.BasicAccountant().supports("laplace")
            (True, False)

        """
        return isinstance(curve, PrivacyCurve) and (curve.rdp is not None or curve.hs is not None)

    def can_compose(self, curve: PrivacyCurve) -> bool:
        """The same as :meth:`supports` (its earlier name)."""
        return self.supports(curve)

    def _changed(self) -> None:  # noqa: B027 - optional hook
        """Hook: drop caches after a standalone compose()."""

    def _compose_charges(self, charges: Sequence[Any]) -> Any:
        first = sum((_first(c) for c in charges), Fraction(0))
        delta = sum((getattr(c, "delta", Fraction(0)) for c in charges), Fraction(0))
        return make(self._session_total().notion, rounded_up(first), rounded_up(delta))

    def fits(self, spent: Any) -> bool:
        """Whether a composed total is within the session's budget."""
        self.check_charge(spent, "spent")
        return _first(spent) <= _first(self._session_total()) and _delta(spent) <= _delta(self._session_total())

    def remaining(self, spent: Any) -> Budget:
        """What is left (coordinate-wise, never negative)."""
        self.check_charge(spent, "spent")
        return make(self._session_total().notion, max(Fraction(0), _first(self._session_total()) - _first(spent)),
                    max(Fraction(0), _delta(self._session_total()) - _delta(spent)))

    def shortfall(self, spent_after: Any) -> str:
        """By how much a total overshoots the budget, as text (every coordinate; a zCDP δ where it is short).

        Example:
            >>> from dpframe.budgets import ZCDP
            >>> ZCDPAccountant(ZCDP(1)).shortfall(ZCDP(Fraction(1, 2), Fraction(1, 10**6)))
            'ρ=0, δ=1e-06'

        """
        self.check_charge(spent_after, "spent_after")
        over = make(self._session_total().notion, max(Fraction(0), _first(spent_after) - _first(self._session_total())),
                    max(Fraction(0), _delta(spent_after) - _delta(self._session_total())))
        return describe(over)

    def short_of_delta(self, spent_after: Any) -> bool:
        """Whether a total overshoots the budget's δ (a query's δ, or its mechanisms' δ0, does not fit)."""
        self.check_charge(spent_after, "spent_after")
        return _delta(spent_after) > _delta(self._session_total())

    def exceeded(self, charge: Any, spent: Any, after: Any, *, argument: str = "budget",
                 fix: str | None = None) -> BudgetExceededError:
        """The refusal of ``charge`` when ``after`` (``spent`` composed with it) does not fit.

        It says what the query asked, what is left and what is short, each by its coordinates; a δ that is short is
        named, and so is a session total with δ = 0, which no query with a δ can fit (a zCDP budget's text omits a δ
        of 0: "remaining ρ=1" read as if a ρ = 1/2 query with a δ should fit).

        Example:
            >>> from dpframe.budgets import ZCDP
            >>> a = ZCDPAccountant(ZCDP(1))
            >>> cost = ZCDP(Fraction(1, 2), Fraction(1, 10**6))
            >>> print(a.exceeded(cost, a.empty(), a.compose([a.empty(), cost])))
            budget: requested ρ=1/2, δ=1e-06, remaining ρ=1, δ=0, short by ρ=0, δ=1e-06; nothing ... δ = 0, ...

        """
        left = self.remaining(spent)
        remaining = describe(left)
        delta_short = self.short_of_delta(after)
        if delta_short and "δ=" not in remaining:
            remaining += ", δ=0"
        if fix is None and delta_short:
            if _delta(self._session_total()) == 0:
                fix = ("this session's total budget has δ = 0, so no query that spends a δ fits: give this query a "
                       "budget without δ (grouping by private keys and the approximate top-k methods need one: use "
                       "public keys or method='gumbel'), or open the session with a total budget that has a δ")
            else:
                fix = ("this query's δ does not fit in the δ the session has left: give it a smaller δ, below what "
                       "remains (a Rényi filter, accountant 'rdp' or 'pld', keeps some of it for its conversion), "
                       "or none (public keys for a group-by)")
        if fix is None and getattr(left, "epsilon", getattr(left, "rho", None)) == 0:
            fix = ("this session's budget is used up: no query fits, however small. More answers need a new budget, "
                   "the data owner's decision: a session with a new ledger= file (a ledger keeps the total it was "
                   "made with), whose releases add to this one's in the guarantee")
        extra = {"fix": fix} if fix is not None else {}
        return BudgetExceededError(self.describe_charge(charge), remaining, self.shortfall(after), argument=argument,
                                   **extra)

    def empty(self) -> Any:
        """Nothing spent."""
        return zero(self._session_total().notion)

    def report(self, spent: Any) -> Budget:
        """A composed total as a budget (what ``sess.spent()`` shows)."""
        self.check_charge(spent, "spent")
        return spent  # type: ignore[no-any-return]

    def describe_charge(self, charge: Any) -> str:
        """A charge as text."""
        self.check_charge(charge, "charge")
        return describe(charge)

    @abstractmethod
    def describe(self) -> str:
        """One line for explain()."""

    # ---------------------------------------------------------------------------------- standalone
    @abstractmethod
    def epsilon(self, delta: float) -> float:
        """Standalone: the ε of everything composed, at ``delta``."""

    @abstractmethod
    def delta(self, epsilon: float) -> float:
        """Standalone: the δ of everything composed, at ``epsilon``."""

    def deltas(self, epsilons: Sequence[float] | np.ndarray) -> np.ndarray:
        """Standalone: :meth:`delta` at each of ``epsilons`` (accountants may compute them at once)."""
        return np.array([self.delta(float(e)) for e in np.asarray(epsilons, dtype=np.float64)])

    def explain(self, delta: float = 1e-6) -> str:
        """Standalone: how the guarantee is computed, and the result at ``delta``."""
        delta = check_delta(delta)
        lines = [f"{self.name} accountant: {self.describe()}", self.relation_note()]
        lines += [f"  {times} × {curve.label}" for curve, times in self.entries]
        lines.append(f"  ε = {self.epsilon(delta=delta):.6g} at δ = {delta:g}")
        return "\n".join(line for line in lines if line)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {len(self.entries)} mechanism kinds>"


_RELATION = {"add_remove": "add/remove", "replace_one": "replace-one"}


def check_curves(curves: object) -> None:
    """``None`` or a sequence of add/remove privacy curves (sessions account add/remove neighbours)."""
    if curves is not None and (isinstance(curves, str | bytes) or not isinstance(curves, Sequence) or not all(
            isinstance(c, PrivacyCurve) for c in curves)):
        raise BudgetError(f"expected a list of privacy curves or None, got {shown(curves)}", argument="curves",
                          fix="pass the plan's curves, e.g. [acc.laplace(scale=1.0)]")
    if curves is not None and any(c.neighbours != "add_remove" for c in curves):
        raise BudgetError("a session accounts add/remove neighbours; got a replace-one curve", argument="curves",
                          fix="pass the mechanisms' add/remove curves (before acc.replace_one)")


def pure_total(entries: Sequence[tuple[PrivacyCurve, int]]) -> float | None:
    """Σ times·ε of a sequence when every mechanism is pure ε-DP (basic composition: (Σε, 0)-DP; else None).

    Rounded up (exactly: :func:`~dpframe.accounting.numerics.rdp.dot_up`).

    Example:
        >>> from dpframe.accounting.curves import gaussian, laplace
        >>> pure_total([(laplace(scale=100.0), 3)]), pure_total([(gaussian(sigma=1.0), 1)])   # 3 × float 0.01 > 0.03
        (0.030000000000000002, None)

    """
    if all(c.pure_eps is not None and c.delta0 == 0 for c, _ in entries):
        return dot_up((t, float(c.pure_eps)) for c, t in entries)  # type: ignore[arg-type]   # rounded up
    return None


def registered_accountants(host: Any = None) -> dict[str, Accountant]:
    """A standalone instance of every accountant registered with ``host`` (default: the process' plugin host).

    Built-ins first, then plugins' accountants, in registration order. An accountant whose factory needs the
    session's total budget (it cannot be built standalone) is left out.

    Example:
        >>> list(registered_accountants())[:4]
        ['basic', 'zcdp', 'rdp', 'pld']

    """
    if host is None:
        from dpframe.plugin import plugin_host  # the host registers the accountants: it imports this package

        host = plugin_host()
    out: dict[str, Accountant] = {}
    for entry in host.accountants():
        try:
            inspect.signature(entry.item).bind()
        except TypeError:
            continue                  # needs a total budget: a session-only accountant
        except ValueError:
            pass                      # no signature to inspect (a builtin): try it
        out[entry.name] = entry.item()
    return out


def composability_error(curve: PrivacyCurve, accountant: Accountant) -> DPFrameError:
    """The error for a curve a standalone accountant cannot compose, naming the registered ones that can."""
    able = [n for n, other in registered_accountants().items() if n != accountant.name and other.supports(curve)]
    fix = (f"compose it with the {' or '.join(repr(n) for n in able)} accountant" if able
           else "declare an RDP curve or a privacy profile for the mechanism")
    return BudgetConversionError(f"{curve.label} has no {accountant.requires}, so the {accountant.name!r} "
                                 "accountant cannot compose it", argument="mechanism", fix=fix)


def plan_curves(declared: Sequence[PrivacyCurve] | None, cost: Budget) -> list[PrivacyCurve]:
    """The curves a session charges for one mechanism's plan.

    Session filters compose RDP curves (the Rényi filter of ``rdp``/``pld`` sessions; ``basic`` and
    ``zcdp`` sessions charge budgets), so a mechanism is charged its declared curves when each has
    one, and otherwise the curve its budget ``cost`` guarantees (:func:`curve_of`) — always sound,
    since the mechanism is ``cost``-private. That is how a plugin mechanism that declares only δ(ε)
    (:func:`~dpframe.accounting.curves.from_profile`) still composes in every session.

    Example:
        >>> from dpframe.budgets import PureDP
        >>> from dpframe.accounting.curves import from_profile, gaussian
        >>> [c.label for c in plan_curves([from_profile(lambda e: 0.0, label="δ(ε) only")], PureDP(1))]
        ['ε-DP(ε=1)']
        >>> [c.label for c in plan_curves([gaussian(sigma=2.0)], PureDP(1))]
        ['Gaussian(σ=2, Δ=1)']

    """
    if declared and all(c.rdp is not None for c in declared):
        return list(declared)
    return [curve_of(cost)]


TOTAL_BITS = 2048
"""A composed total whose denominator passes 2^TOTAL_BITS is rounded up to a multiple of 2^-TOTAL_BITS."""


def rounded_up(x: Fraction) -> Fraction:
    """``x``, or where its denominator passes 2^:data:`TOTAL_BITS`, the next multiple of 2^-TOTAL_BITS above it.

    A session's totals are exact sums, and charges whose denominators share no factor (δ = p/q for 400-digit q's,
    as a remote analyst may send them) grow the total's denominator with each charge: past 4,300 digits, Python no
    longer writes it as text (``remaining()``/``spent()`` of a server failed for every analyst), and every later sum
    is slower. Rounding the total up over-reports it by less than 2^-2048 (sound); totals of ordinary charges (decimal
    or small denominators) stay exact.

    Example:
        >>> rounded_up(Fraction(1, 3))
        Fraction(1, 3)
        >>> q = 3 ** 1300
        >>> x = rounded_up(Fraction(1, q))
        >>> x.denominator == 2 ** TOTAL_BITS, 0 < x - Fraction(1, q) <= Fraction(1, 2 ** TOTAL_BITS)
        (True, True)

    """
    if not isinstance(x, Fraction) or x.denominator.bit_length() <= TOTAL_BITS:
        return x        # (a float coordinate, as a hand-made charge may hold, is left as it is)
    return Fraction(-((-x.numerator << TOTAL_BITS) // x.denominator), 1 << TOTAL_BITS)


def _first(b: Any) -> Fraction:
    return b.rho if b.notion == "zcdp" else b.epsilon  # type: ignore[no-any-return]


def _delta(b: Any) -> Fraction:
    return getattr(b, "delta", Fraction(0))


class BasicAccountant(Accountant):
    """Basic composition: ε and δ add up. For pure and approximate DP sessions.

    Standalone, a mechanism that is not pure ε-DP gets an equal share of δ (after the δ0 parts) and is
    charged its own tight ε at that δ.
    """

    name = "basic"
    accepts = frozenset({"pure", "approx"})
    requires = "(ε, δ) guarantee"
    additive = True

    def describe(self) -> str:
        return "basic composition (ε and δ add up)"

    def epsilon(self, delta: float) -> float:
        d = check_delta(delta)
        exact = [(c, t) for c, t in self.entries if c.pure_eps is not None and c.delta0 == 0]
        other = [(c, t) for c, t in self.entries if not (c.pure_eps is not None and c.delta0 == 0)]
        eps = dot_up((t, float(c.pure_eps or 0.0)) for c, t in exact)
        if not other:
            return float(eps)
        # exact: δ less the δ0 parts, in equal shares; each mechanism's δ (share + its δ0) rounded down, so the
        # δs used add up to at most δ; the ε add up rounded up
        spare = Fraction(d) - sum((t * Fraction(c.delta0) for c, t in other), Fraction(0))
        if spare <= 0:
            return math.inf
        share = spare / sum(t for _, t in other)
        used = [(t, c._approx_dp(down(share + Fraction(c.delta0)))) for c, t in other]
        return epsilon_out(dot_up([(1, eps), *used]))

    def delta(self, epsilon: float) -> float:
        e = check_epsilon(epsilon)
        if not self.entries:
            return 0.0
        lo, hi = 1e-300, 1 - 1e-12
        if self.epsilon(hi) > e:
            return 1.0
        for _ in range(200):  # bisection on log δ
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if self.epsilon(mid) <= e else (mid, hi)
            if hi / lo < 1 + 1e-9:
                break
        return hi


class ZCDPAccountant(Accountant):
    """zCDP composition: ρ adds up (pure ε converts to ρ = ε²/2); δ of approximate zCDP adds up.

    Conversion to (ε, δ): Canonne, Kamath & Steinke (2020, Cor. 13). It cannot express amplification
    by subsampling.
    """

    name = "zcdp"
    accepts = frozenset({"zcdp"})
    requires = "zCDP bound (subsampled and purely profile-defined mechanisms have none)"

    def supports(self, curve: PrivacyCurve) -> bool:
        """Curves with a zCDP bound ρ."""
        return isinstance(curve, PrivacyCurve) and curve.rho is not None

    def describe(self) -> str:
        return "zCDP composition (ρ adds up; pure ε counts as ε²/2)"

    def _rho(self) -> tuple[float, float]:
        return (dot_up((t, float(c.rho)) for c, t in self.entries),  # type: ignore[arg-type]
                dot_up((t, c.delta0) for c, t in self.entries))        # both rounded up

    def epsilon(self, delta: float) -> float:
        d = check_delta(delta)
        rho, d0 = self._rho()
        if d <= d0 or not math.isfinite(rho):
            return math.inf
        try:
            return epsilon_out(zcdp_epsilon(Fraction(rho), Fraction(d) - Fraction(d0)))
        except OverflowError:       # ε beyond floats
            return math.inf

    def delta(self, epsilon: float) -> float:
        e = check_epsilon(epsilon)
        rho, d0 = self._rho()
        if not math.isfinite(rho):
            return 1.0
        return delta_out(dot_up([(1, zcdp_delta(Fraction(rho), Fraction(e))), (1, d0)]))


def default_accountant(total: Budget) -> str:
    """The accountant a session uses when none is named."""
    return "zcdp" if total.notion == "zcdp" else "basic"
