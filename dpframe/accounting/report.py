"""``sess.spent_report()``: the ledger's charges composed by every registered accountant.

Each charge becomes privacy curves: RDP/PLD sessions store the plan's curves with the charge; other
charges are their budget's curve (pure ε, ρ-zCDP, or (ε, δ)). Identical curves are counted once
with a multiplicity, so long histories stay fast. The accountants are the plugin host's (the built-ins
and any a plugin registers); an accountant reports None where it does not :meth:`~Accountant.supports`
some charge's curve.

Example:
    >>> from dpframe.accounting.ledger import Charge
    >>> from dpframe.budgets import PureDP
    >>> rows = [Charge(i, 0.0, "committed", "q", "laplace", PureDP(0.5), None) for i in range(4)]
    >>> spent_report(rows, 1e-6)["basic"]
    2.0

"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from dpframe.accounting.accountants import Accountant, curve_of, registered_accountants
from dpframe.accounting.curve import PrivacyCurve, from_spec
from dpframe.accounting.rdp_charge import RDPCharge


def charge_curves(cost: Any) -> list[str] | None:
    """The serialised curves of one stored charge (None: not recoverable)."""
    if isinstance(cost, RDPCharge):
        return list(cost.specs) if cost.specs else None
    return [curve_of(cost).to_json()]


def spent_report(charges: Sequence[Any], delta: float,
                 accountants: Mapping[str, Accountant] | None = None) -> dict[str, float | None]:
    """ε at ``delta`` of all ``charges`` by each accountant (None where it cannot compose them).

    ``accountants``: fresh standalone accountants by name (default: every accountant registered with the
    plugin host, :func:`~dpframe.accounting.accountants.registered_accountants`).
    """
    counts: Counter[str] = Counter()
    complete = True
    for c in charges:
        specs = charge_curves(c.cost)
        if specs is None:
            complete = False
            continue
        counts.update(specs)
    # the ledger's own descriptions (written by to_json): an unknown kind is the ledger's error
    curves: list[tuple[PrivacyCurve, int]] = [(from_spec(json.loads(s)), n) for s, n in counts.items()]
    out: dict[str, float | None] = {}
    for name, acc in (registered_accountants() if accountants is None else accountants).items():
        if not complete or not all(acc.supports(c) for c, _ in curves):
            out[name] = None
            continue
        for curve, n in curves:
            acc.compose(curve, times=n)
        out[name] = float(acc.epsilon(delta=delta))
    return out
