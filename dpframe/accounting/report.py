"""``sess.spent_report()``: the ledger's charges composed by every built-in accountant.

Each charge becomes privacy curves: RDP/PLD sessions store the plan's curves with the charge; other
charges are their budget's curve (pure ε, ρ-zCDP, or (ε, δ)). Identical curves are counted once
with a multiplicity, so long histories stay fast.

Example:
    >>> from dpframe.accounting.ledger import Charge
    >>> from dpframe.budgets import PureDP
    >>> rows = [Charge(i, 0.0, "committed", "q", "laplace", PureDP(0.5), None) for i in range(4)]
    >>> spent_report(rows, 1e-6)["basic"]
    2.0

"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from dpframe.accounting.accountants import BasicAccountant, ZCDPAccountant, curve_of
from dpframe.accounting.curves import PrivacyCurve, from_json
from dpframe.accounting.pld import PLDAccountant
from dpframe.accounting.rdp import RDPAccountant, RDPCharge

ACCOUNTANTS = {"basic": BasicAccountant, "zcdp": ZCDPAccountant, "rdp": RDPAccountant, "pld": PLDAccountant}


def charge_curves(cost: Any) -> list[str] | None:
    """The serialised curves of one stored charge (None: not recoverable)."""
    if isinstance(cost, RDPCharge):
        return list(cost.specs) if cost.specs else None
    return [curve_of(cost).to_json()]


def spent_report(charges: Sequence[Any], delta: float) -> dict[str, float | None]:
    """ε at ``delta`` of all ``charges`` by each accountant (None where it cannot compose them)."""
    counts: Counter[str] = Counter()
    complete = True
    for c in charges:
        specs = charge_curves(c.cost)
        if specs is None:
            complete = False
            continue
        counts.update(specs)
    curves: list[tuple[PrivacyCurve, int]] = [(from_json(s), n) for s, n in counts.items()]
    out: dict[str, float | None] = {}
    for name, cls in ACCOUNTANTS.items():
        acc = cls()
        if not complete or not all(acc.can_compose(c) for c, _ in curves):
            out[name] = None
            continue
        for curve, n in curves:
            acc.compose(curve, times=n)
        out[name] = float(acc.epsilon(delta=delta))
    return out
