"""Output-DP (ex-post) charging: reserve the worst cell, charge the cell the released output fell in.

Hartmann, Bindschaedler, Bentkamp & West (PoPETs 2022), digest ``002_output_dp.md``. A mechanism
declares, *before* it runs and from public information only, an :class:`OdpSpec`: a partition of its
outputs into cells, an ε per cell and ONE δ. The session reserves ``(max ε, δ)``; after the run the
ledger lowers the charge to ``(ε(cell of the released output), δ)``. Theorem 7 (machine-checked):
under **basic composition** the whole adaptive transcript stays (ε_total, δ_total)-DP.

Rules this module enforces (each one is a pitfall of the digest, §5):

* δ is never refunded and never depends on the output (the δ-refund counterexample O8 leaks with
  probability 0.63 on a 10⁻³ budget: ``tests/interactive/test_odp.py``);
* the cell is computed from the released value only (``classify`` never sees data or noise);
* every cell must fit before running (the worst cell is reserved);
* only the basic accountant: RDP/zCDP/PLD sessions are refused (:func:`require_additive`) — no
  theorem covers refunds under non-additive composition.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from fractions import Fraction
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> coin = OdpSpec({"⊥": Fraction(0), "value": Fraction(1)}, Fraction(0), lambda y: "⊥" if y is None else "value")
    >>> run_ex_post(sess, coin, "coin", "toy", lambda: None), sess.spent()
    (None, PureDP(epsilon=0))

"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

from dpframe.budgets import Budget, make
from dpframe.errors import BudgetConversionError, PluginError

if TYPE_CHECKING:
    from dpframe.session import Session

T = TypeVar("T")


@dataclass(frozen=True)
class OdpSpec:
    """An output-DP spec: ε per cell (finite, ≥ 0), one δ, and the released value → cell map."""

    cells: Mapping[str, Fraction]
    delta: Fraction
    classify: Callable[[Any], str]

    @property
    def worst(self) -> Fraction:
        """The ε reserved before running (Lemma 4: the mechanism is (max ε, δ)-DP)."""
        return max(self.cells.values())

    def budget(self, cell: str | None = None) -> Budget:
        """The cost of ``cell`` (None: the worst cell) as a pure/approx budget."""
        eps = self.worst if cell is None else self.cells[cell]
        return make("approx", eps, self.delta) if self.delta else make("pure", eps)


def additive(session: Session) -> bool:
    """Whether the session composes by basic (additive) composition: the only one refunds are proven for."""
    return session.accountant.name == "basic"


def require_additive(session: Session, what: str) -> None:
    """Raise (nothing charged) unless the session's accountant is the additive one."""
    if not additive(session):
        raise BudgetConversionError(
            f"{what} refunds budget after the fact (output DP), which is proven only under basic (additive) "
            f"composition; this session's accountant is {session.accountant.name!r}", argument="refund",
            fix="pass refund=False (charged at the worst case), or use a pure/approx session with "
                "accountant='basic' (see docs/interactive.md)")


def run_ex_post(session: Session, spec: OdpSpec, what: str, mechanisms: str, run: Callable[[], T]) -> T:
    """Reserve the worst cell of ``spec``, run, settle to the released output's cell (basic sessions).

    Other sessions are charged the worst cell (no refund). A failure leaves the worst cell charged.
    """
    worst = session.accountant.charge(spec.budget())
    if not additive(session):
        return session._charged(worst, what, mechanisms, run)

    def settle(result: T) -> tuple[Budget, str]:
        cell = spec.classify(result)
        if cell not in spec.cells:
            raise PluginError(f"output classified into unknown cell {cell!r}", argument="classify",
                              fix="this is a mechanism bug")
        return session.accountant.charge(spec.budget(cell)), cell

    return session._charged(worst, what, mechanisms, run, settle=settle)

