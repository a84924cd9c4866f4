"""The privacy-loss-distribution (PLD) accountant: discretised dominating pairs, composed by FFT.

For each mechanism and each neighbour direction (remove, add) the accountant discretises the hockey-stick
profile of a dominating pair (see :mod:`dpframe.accounting.curve`) by connect-the-dots on a uniform
privacy-loss grid and composes the discrete pairs by FFT (the numerics, with their proofs, are in
:mod:`dpframe.accounting.numerics.pld`); add- and remove-direction compositions are kept apart and the max
is reported (thesis Thm 3.3.5; feeding only the remove pair certifies remove-only privacy).

Validity: the PLD (like any accountant that optimises over the whole curve after the fact) composes a
sequence fixed in advance. dpframe sessions therefore *enforce* with the Rényi filter
(:class:`~dpframe.accounting.rdp.RenyiFilter`) and use the PLD within one query's plan and for reporting
(``sess.spent_report()``).

Example:
    >>> from dpframe import accounting as acc
    >>> a = acc.PLDAccountant().compose(acc.gaussian(sigma=85.0), times=8192)
    >>> round(a.epsilon(delta=1e-5), 3)   # the exact value (Gaussian DP) is 4.708077
    4.708

"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpframe.accounting.accountants import pure_total
from dpframe.accounting.checks import check_delta, check_epsilon, check_grid, delta_out, epsilon_out, shown
from dpframe.accounting.composition import group_rdp_only
from dpframe.accounting.curve import from_json
from dpframe.accounting.numerics.pld import ComposedPLD, compose_pairs, composed_profile, delta_at, epsilon_at
from dpframe.accounting.rdp import RDPAccountant, RenyiFilter
from dpframe.accounting.rdp_charge import RDPCharge
from dpframe.budgets import Budget
from dpframe.errors import BudgetError

#: Plans whose PLD note a session accountant keeps (each costs a PLD composition; ``history()`` asks for all).
NOTES = 4096


class PLDAccountant(RenyiFilter):
    """PLD accountant (standalone: tight ε(δ)/δ(ε) of a fixed sequence; session: reports, RDP filter enforces).

    Args:
        total: the session's total ``dp.ApproxDP(ε, δ)``; omit for standalone use.
        grid: the privacy-loss discretisation step h (smaller: tighter and slower; default 1e-4).

    """

    name = "pld"

    def __init__(self, total: Budget | None = None, *, grid: float = 1e-4) -> None:
        super().__init__(total)
        self.grid = check_grid(grid)
        self._composed: ComposedPLD | None = None
        self._rdp: RDPAccountant | None = None
        self._notes: dict[tuple[str, ...], str] = {}   # plan_note per stored plan (history() reads every charge)

    def describe(self) -> str:
        if self._total is None:
            return f"privacy-loss distributions (connect-the-dots, grid {self.grid:g}), composed by FFT"
        return ("Rényi filter enforces (valid under adaptivity); PLD composes each plan and reports "
                "(valid for the fixed sequence)")

    def _changed(self) -> None:
        self._composed = None
        self._rdp = None

    # -------------------------------------------------------------------------------- composition
    def _composition(self) -> ComposedPLD:
        if self._composed is None:
            groups = group_rdp_only(self.entries)
            self._composed = compose_pairs([(*curve.profile(), times) for curve, times in groups], self.grid)
        return self._composed

    def composed(self) -> list[tuple[np.ndarray, int, float]]:
        """Per direction: (pmf over the window, window start index, extra δ: p_∞ + tail bounds).

        The grid is :attr:`grid` unless a mechanism's losses reach too far or the composition's window is
        too wide; then it is coarsened (pessimistic: the result stays an upper bound; :attr:`effective_grid`
        says which step was used; :func:`~dpframe.accounting.numerics.pld.compose_pairs`). Nothing composed: ``[]``.
        """
        if not self.entries:
            return []
        c = self._composition()
        return [(p, s, math.nextafter(extra + c.margin(i), math.inf)) for i, (p, s, extra) in enumerate(c.directions)]

    def _directions(self) -> list[tuple[np.ndarray, int, float, float]]:
        """Per direction (pmf, start, extra δ, rounding margin below the window's top loss)."""
        c = self._composition()
        return [(p, s, extra, c.margin(i)) for i, (p, s, extra) in enumerate(c.directions)]

    @property
    def effective_grid(self) -> float:
        """The discretisation step of the last composition (:attr:`grid`, or coarser: see :meth:`composed`).

        Example:
            >>> PLDAccountant(grid=1e-3).effective_grid          # nothing composed yet: the grid asked for
            0.001

        """
        return self._composition().grid if self.entries else self.grid

    def _rdp_fallback(self, vacuous: bool = False) -> RDPAccountant | None:
        """The RDP accountant of the same sequence, when the PLD is degraded or vacuous and every mechanism has RDP."""
        if not ((self._composition().degraded or vacuous) and all(c.rdp is not None for c, _ in self.entries)):
            return None
        if self._rdp is None:
            self._rdp = RDPAccountant()
            for curve, times in self.entries:
                self._rdp.compose(curve, times=times)
        return self._rdp

    def delta(self, epsilon: float) -> float:
        """δ at ``epsilon``: the max over the add and remove directions.

        Example:
            >>> from dpframe import accounting as acc
            >>> round(PLDAccountant().compose(acc.laplace(1.0)).delta(0.5), 4)      # 1 − e^{(0.5 − 1)/2}
            0.2212

        """
        e = check_epsilon(epsilon)
        if not self.entries:
            return 0.0
        pure = pure_total(self.entries)
        if pure is not None and e >= pure:
            return 0.0                                   # basic composition: (Σε, 0)-DP
        h = self.effective_grid
        d = max(delta_out(delta_at(p, s, extra, h, e, m)) for p, s, extra, m in self._directions())
        rdp = self._rdp_fallback(d >= 1)
        return d if rdp is None else min(d, rdp.delta(e))

    def deltas(self, epsilons: Sequence[float] | np.ndarray) -> np.ndarray:
        """δ at each ε of ``epsilons`` (≥ 0) at once, from the composed PLD's tail sums (0 from Σε on, if pure)."""
        try:
            e = np.asarray(epsilons, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            e = np.array([math.nan])
        if e.ndim != 1 or not np.all(e >= 0):
            raise BudgetError(f"expected a list of ε ≥ 0, got {shown(epsilons)}", argument="epsilons",
                              fix="pass e.g. [0.5, 1.0, 2.0]")
        if not self.entries:
            return np.zeros(len(e))
        composed = self._composition()
        hs, rev = composed_profile(lambda: composed, len(composed.directions) == 1)
        out = np.maximum(hs(e), rev(e))
        pure = pure_total(self.entries)
        return np.where(e >= pure, 0.0, out) if pure is not None else out

    def epsilon(self, delta: float) -> float:
        """ε at ``delta``: the max over both directions (exact on the piecewise form between grid points).

        When the grid had to be coarsened (a mechanism with a huge ε, a huge composition) or the PLD cannot
        certify ``delta`` at all (below its 2·10⁻¹⁵ tail bound plus its proven rounding margin) the RDP bound
        of the same sequence is taken as well, if every mechanism has an RDP curve, and a sequence of pure
        ε-DP mechanisms is never reported above Σε (basic composition): all are valid, so is the smallest.

        Example:
            >>> from dpframe import accounting as acc
            >>> round(PLDAccountant().compose(acc.laplace(0.001)).epsilon(0.5))   # ε∞ = 1000; exactly 1000 − 2 log 2
            999

        """
        d = check_delta(delta)
        if not self.entries:
            return 0.0
        h = self.effective_grid
        eps = max(epsilon_out(epsilon_at(p, s, extra, h, d, m)) for p, s, extra, m in self._directions())
        rdp = self._rdp_fallback(math.isinf(eps))
        if rdp is not None:
            eps = min(eps, rdp.epsilon(d))
        pure = pure_total(self.entries)
        return eps if pure is None else min(eps, pure)

    def directions(self, delta: float) -> dict[str, float]:
        """ε at ``delta`` for each neighbour direction on its own: ``{"remove": ε, "add": ε}``.

        The remove direction is the pairs (P, Q) (a record removed from the input), the add direction the
        reversed pairs; :meth:`epsilon` is their max (before the RDP and pure-ε caps). Symmetric pairs give
        the same ε in both.

        Example:
            >>> from dpframe import accounting as acc
            >>> d = PLDAccountant().compose(acc.laplace(1.0).subsampled(0.5), times=10).directions(1e-6)
            >>> d["remove"] > d["add"]
            True

        """
        d = check_delta(delta)
        if not self.entries:
            return {"remove": 0.0, "add": 0.0}
        h = self.effective_grid
        eps = [epsilon_out(epsilon_at(p, s, extra, h, d, m)) for p, s, extra, m in self._directions()]
        return {"remove": eps[0], "add": eps[-1]}

    def explain(self, delta: float = 1e-6) -> str:
        d = check_delta(delta)
        lines = [f"pld accountant: {self.describe()}", *filter(None, [self.relation_note()])]
        lines += [f"  {t} × {curve.label}" for curve, t in self.entries]
        if not self.entries:
            return "\n".join([*lines, f"  nothing composed: ε = 0 at δ = {d:g}"])
        dirs = self.composed()
        h = self.effective_grid
        lines.append(f"  ε = {self.epsilon(d):.6g} at δ = {d:g} "
                     f"({'one direction (all pairs symmetric)' if len(dirs) == 1 else 'max of add and remove'}; "
                     f"window {len(dirs[0][0])} points of {h:g})")
        if h > self.grid:
            lines.append(f"  note: the grid was coarsened from {self.grid:g} to {h:g} (a mechanism's losses "
                         "or the composition reach too far for the finer grid)")
        if self._rdp_fallback() is not None:
            lines.append("  note: the PLD is degraded here; the RDP bound of the same sequence is used where smaller")
        return "\n".join(lines)

    # ------------------------------------------------------------------------------ session filter
    def plan_note(self, charge: RDPCharge) -> str:
        """The PLD of the plan's curves at the session δ (when they were stored)."""
        if not charge.specs:
            return ""
        specs = tuple(str(s) for s in charge.specs)
        note = self._notes.get(specs)
        if note is None:
            plan = PLDAccountant()
            for spec in specs:
                plan.compose(from_json(spec))
            delta = float(self._session_total().delta)  # type: ignore[union-attr]
            note = f"PLD of this plan: ε={plan.epsilon(delta):.6g} at δ={delta:g}"
            if len(self._notes) < NOTES:
                self._notes[specs] = note
        return note
