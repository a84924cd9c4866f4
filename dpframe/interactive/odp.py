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
* a refund needs the mechanism to have run alone: if any other ledger row appeared or changed status
  while it ran (a query run from inside ``run`` — e.g. an early-stopping rule — or from another thread),
  or another reservation is open (a stream or channel, whose calls add no ledger row), it is settled at
  its worst cell (interleaving is concurrent composition: §5, pitfall 7);
* every cell must fit before running (the worst cell is reserved);
* only the basic accountant: RDP/zCDP/PLD sessions are refused (:func:`require_additive`) — no
  theorem covers refunds under non-additive composition; user-facing tools take ``refund=False`` to
  run there at the worst cell instead (:func:`resolve_refund`);
* a spec is validated when built: at least one cell, every ε finite and ≥ 0, 0 ≤ δ < 1 (digest §4.3);
  :func:`odp_delta` checks a discrete mechanism's spec exactly on a neighbouring pair.

This is also the public hook for mechanism and plugin authors (DESIGN §3, "its ex-post cost where it
has one"): declare an :class:`OdpSpec` from public information and run through :func:`run_ex_post`.

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

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from dpframe.accounting.checks import shown
from dpframe.budgets import Budget, make
from dpframe.errors import ArgumentError, BudgetConversionError, PluginError
from dpframe.sealed import is_text, plain, plain_copy
from dpframe.session import check_session

if TYPE_CHECKING:
    from dpframe.accounting import SessionCost
    from dpframe.session import Session

T = TypeVar("T")


@dataclass(frozen=True)
class OdpSpec:
    """An output-DP spec: ε per cell (finite, ≥ 0, at least one cell), one δ, and the released value → cell map.

    Declared before the mechanism runs, from public information only (digest §4.1); validated here
    (a :class:`~dpframe.errors.PluginError` names the bad field). ``classify`` receives released values
    only: the output the mechanism returns to its caller. Lemma 4: the mechanism is (max ε, δ)-DP, which
    is what is reserved.
    """

    cells: Mapping[str, Fraction]
    delta: Fraction
    classify: Callable[[Any], str]

    def __post_init__(self) -> None:
        if not isinstance(self.cells, Mapping) or not self.cells:
            raise PluginError("an output-DP spec needs at least one cell", argument="cells",
                              fix="pass {'cell name': epsilon, ...} (one cell: the trivial spec, Lemma 3)")
        cells: dict[str, Fraction] = {}
        for name, eps in self.cells.items():
            if not isinstance(name, str):
                raise PluginError(f"cell names must be strings, got {name!r}", argument="cells",
                                  fix="name cells by str")
            cells[name] = _finite(eps, f"cells[{name!r}]")
        object.__setattr__(self, "cells", cells)
        delta = _finite(self.delta, "delta")
        if delta >= 1:
            raise PluginError(f"δ must be < 1, got {shown(self.delta)}", argument="delta", fix="pass a δ such as 1e-7")
        object.__setattr__(self, "delta", delta)
        if not callable(self.classify):
            raise PluginError("classify must map the released value to a cell name", argument="classify",
                              fix="pass classify=lambda released: 'cell name'")

    @staticmethod
    def trivial(epsilon: object, delta: object = 0) -> OdpSpec:
        """Lemma 3: every (ε, δ)-DP mechanism has the one-cell spec {*: ε}, δ (no refund)."""
        return OdpSpec({"*": epsilon}, delta, lambda _: "*")  # type: ignore[dict-item, arg-type]

    @property
    def worst(self) -> Fraction:
        """The ε reserved before running (Lemma 4: the mechanism is (max ε, δ)-DP)."""
        return max(self.cells.values())

    def cell_of(self, released: object) -> str:
        """The cell ``classify`` puts a released value in; a PluginError if it is not one of the spec's cells."""
        cell = self.classify(released)
        if not isinstance(cell, str) or cell not in self.cells:
            raise PluginError(f"output classified into unknown cell {cell!r}", argument="classify",
                              fix="this is a mechanism bug: classify must return one of the spec's cell names")
        return cell

    def budget(self, cell: str | None = None) -> Budget:
        """The cost of ``cell`` (None: the worst cell) as a pure/approx budget."""
        eps = self.worst if cell is None else self.cells[cell]
        return make("approx", eps, self.delta) if self.delta else make("pure", eps)


def _finite(value: object, argument: str) -> Fraction:
    """A finite number ≥ 0 as an exact Fraction (PluginError otherwise)."""
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise PluginError(f"must be a number, got {type(value).__name__}", argument=argument, fix="pass a number ≥ 0")
    if isinstance(value, float) and not math.isfinite(value):
        raise PluginError(f"must be finite, got {value}", argument=argument, fix="pass a finite number ≥ 0")
    exact_value = Fraction(value) if not isinstance(value, float) else Fraction(repr(value))
    if exact_value < 0:
        raise PluginError(f"must be ≥ 0, got {value}", argument=argument, fix="pass a number ≥ 0")
    return exact_value


def odp_delta(law0: Mapping[Any, float], law1: Mapping[Any, float], spec: OdpSpec) -> float:
    """The exact δ a discrete mechanism needs for ``spec``'s cells on one neighbouring pair (digest §1.2).

    max over both directions of Σ_o max(0, P[M(x)=o] − e^{ε(cell(o))}·P[M(x′)=o]): a spec validator for
    plugin authors (compute it on small neighbouring datasets and check it is ≤ the declared δ).

    Example:
        >>> coin = OdpSpec({"⊥": 0, "value": 1}, 0, lambda y: "⊥" if y is None else "value")
        >>> odp_delta({None: 0.5, 1: 0.5}, {None: 0.5, 1: 0.5}, coin)
        0.0

    """
    if not isinstance(spec, OdpSpec):
        raise ArgumentError(f"expected an OdpSpec, got {type(spec).__name__}", argument="spec",
                            fix="pass OdpSpec({'cell': epsilon, ...}, delta, classify)")
    p0, p1 = _law(law0, "law0"), _law(law1, "law1")

    def one_way(p: Mapping[Any, float], q: Mapping[Any, float]) -> float:
        return sum(max(0.0, pr - math.exp(float(spec.cells[spec.cell_of(o)])) * q.get(o, 0.0)) for o, pr in p.items())

    return max(one_way(p0, p1), one_way(p1, p0))


def _law(law: object, argument: str) -> dict[Any, float]:
    """A discrete law (outcome → probability in [0, 1]) as a dict of floats; ArgumentError otherwise."""
    if not isinstance(law, Mapping):
        raise ArgumentError(f"expected a mapping of outcomes to probabilities, got {type(law).__name__}",
                            argument=argument, fix="pass {outcome: probability, ...}")
    out: dict[Any, float] = {}
    for outcome, probability in law.items():
        value = plain(probability)
        if isinstance(value, bool) or not isinstance(value, int | float | Fraction) or not 0 <= value <= 1:
            raise ArgumentError(f"the probability of {outcome!r} must be a number in [0, 1], got {probability!r}",
                                argument=argument, fix="pass {outcome: probability, ...} with probabilities in [0, 1]")
        out[outcome] = float(value)
    return out


def _label(value: object, argument: str) -> str:
    """A ledger label (the charge's query or mechanisms text): a non-empty string; ArgumentError otherwise."""
    if not is_text(value) or not value:
        raise ArgumentError(f"expected a non-empty string of text, got {value!r:.60}", argument=argument,
                            fix="pass a short text naming it in the session's history")
    return value



def additive(session: Session) -> bool:
    """Whether the session composes by basic (additive) composition: the only one refunds are proven for."""
    return session.accountant.additive


def require_additive(session: Session, what: str) -> None:
    """Raise (nothing charged) unless the session's accountant is the additive one."""
    if not additive(session):
        raise BudgetConversionError(
            f"{what} refunds budget after the fact (output DP), which is proven only under basic (additive) "
            f"composition; this session's accountant is {session.accountant.name!r}", argument="refund",
            fix="pass refund=False (charged the worst case, no refund), or use a pure/approx session with "
                "accountant='basic' (see docs/interactive.md)")


def check_refund(refund: object) -> bool | None:
    """``refund`` as None, True or False (numpy's bool as Python's); an ArgumentError naming it otherwise.

    Callers read the value returned, never the argument: ``np.bool_(False)`` equals False but is not it,
    and ``0`` equals False too (a number is refused: it is no flag).

    Example:
        >>> import numpy as np
        >>> check_refund(np.bool_(False)), check_refund(None)
        (False, None)
        >>> check_refund(0)
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: refund: must be None, True or False, got 0...

    """
    if refund is None:
        return None
    if isinstance(refund, bool | np.bool_):
        return bool(refund)
    raise ArgumentError(f"must be None, True or False, got {shown(refund)}", argument="refund",
                        fix="omit it (refund, basic sessions only) or pass refund=False (worst case)")


def resolve_refund(session: Session, refund: object, what: str) -> bool:
    """Resolve a user-facing ``refund=`` argument (nothing is charged when this raises).

    None/True → refund (refused, clearly, outside basic sessions); False → the worst cell everywhere.
    """
    refund = check_refund(refund)
    if refund is False:
        return False
    require_additive(session, what)
    return True


def declared_tables(session: Session, tables: object) -> frozenset[str] | None:
    """``tables=`` of a release: the names of the session's tables its run reads, or None (not known).

    Before charging, the files of these tables — of every table for None — are checked for changes
    (:mod:`dpframe.file_versions`). An ArgumentError, nothing charged, for anything else.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(1), seed=0)
        >>> declared_tables(sess, ["t"]), declared_tables(sess, None)
        (frozenset({'t'}), None)

    """
    if tables is None:
        return None
    names = session.tables()
    items = [plain(t) for t in plain_copy(tables)] if isinstance(tables, Collection) and not isinstance(tables, str) \
        and not (isinstance(tables, np.ndarray) and tables.ndim == 0) else None
    if items is None or not all(isinstance(t, str) and t in names for t in items):
        raise ArgumentError(f"expected a list of the session's table names, got {tables!r}", argument="tables",
                           fix=f"pass the tables run reads (of {names}), e.g. tables=[{names[0]!r}]; or "
                               "None to check every table's file before charging")
    return frozenset(items)


def interleaved_charges(charges: Iterable[Any], before: Collection[tuple[int, str]]) -> list[Any]:
    """The ledger rows that show a refund's run did not run alone (its own new row is among them).

    ``before``: ``(id, status)`` of every row just before the run reserved. A row that appeared or
    changed status since is another charge made meanwhile; a row still ``reserved`` is another open
    reservation — an interactive stream or channel whose calls add no row of their own, so a call on it
    (from a stop rule, another thread or process) leaves no other trace. Either forfeits the refund. (So
    does a row a crashed process left ``reserved`` in a ledger file: it is charged in full, and refunds
    on that file stop — the safe side, since its owner can no longer say whether it is in use.)

    Example:
        >>> from types import SimpleNamespace as Row
        >>> rows = [Row(id=1, status="committed"), Row(id=2, status="reserved")]
        >>> [r.id for r in interleaved_charges(rows, {(1, "committed")})]           # only the run's own row
        [2]
        >>> [r.id for r in interleaved_charges(rows, {(1, "reserved")})]           # 1 finished meanwhile
        [1, 2]

    """
    return [c for c in charges if (c.id, c.status) not in before or c.status == "reserved"]


def check_ex_post(session: object, what: object, mechanisms: object) -> None:
    """The session and the ledger labels of an ex-post run, checked before anything is charged.

    Example:
        >>> check_ex_post(None, "coin", "toy")
        Traceback (most recent call last):
        ...
        dpframe.errors.ArgumentError: session: expected a dp.Session, got NoneType...

    """
    check_session(session)
    _label(what, "what")
    _label(mechanisms, "mechanisms")


def run_ex_post(session: Session, spec: OdpSpec, what: str, mechanisms: str, run: Callable[[], T], *,
                refund: bool | None = None, tables: Collection[str] | None = None) -> T:
    """Reserve the worst cell of ``spec``, run, settle to the released output's cell (basic sessions).

    The public building block for mechanisms and plugins with an ex-post cost (DESIGN §3): declare an
    :class:`OdpSpec` from public information, pass the private computation as ``run`` (it receives no
    values; it runs inside the reservation). ``refund``: None — settle in basic sessions, charge the
    worst cell in others; True — settle (a non-basic session is refused, nothing charged); False — always
    the worst cell. A failure leaves the worst cell charged, and so does any other charge reserved or
    finished while ``run`` ran, or any other reservation still open (an interactive stream: its calls
    leave no row), forfeits the refund (:func:`interleaved_charges`). ``tables``: the names of the session's
    tables ``run`` reads, whose files are checked before charging (:mod:`dpframe.file_versions`); None
    (the default): not known, every table's file is checked.

    Protects: add/remove one privacy unit (the session's, with all its rows) — the relation the spec's cells must
    be ε-DP for: the mechanism's author computes them for it. Guarantee: (max cell ε, δ)-DP reserved, settled to
    the released cell's ε under basic composition (Hartmann et al. 2022, Thm 7; δ never refunded).
    """
    check_ex_post(session, what, mechanisms)
    refund = check_refund(refund)
    if not isinstance(spec, OdpSpec):
        raise ArgumentError(f"expected an OdpSpec, got {type(spec).__name__}", argument="spec",
                            fix="pass OdpSpec({'cell': epsilon, ...}, delta, classify)")
    if not callable(run):
        raise ArgumentError(f"must be a callable, got {type(run).__name__}", argument="run",
                            fix="pass run=lambda: ... (it runs inside the charged reservation)")
    read = declared_tables(session, tables)
    worst = session.accountant.charge(spec.budget())
    if refund is True:
        require_additive(session, what)
    if refund is False or not additive(session):
        return session._release.release(worst, what, mechanisms, lambda reader: run(), tables=read)
    before = {(c.id, c.status) for c in session._release.charges()}

    def settle(result: T) -> tuple[SessionCost, str]:
        cell = spec.cell_of(result)
        if len(interleaved_charges(session._release.charges(), before)) > 1:   # more than its own: not alone
            return worst, f"{cell} (interleaved with another charge: not refunded)"
        return session.accountant.charge(spec.budget(cell)), cell

    return session._release.release(worst, what, mechanisms, lambda reader: run(), settle=settle, tables=read)
