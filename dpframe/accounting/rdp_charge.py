"""What an RDP session is charged: :class:`RDPCharge`, on the filter's orders; and :data:`SessionCost`.

A leaf of the accounting package (numpy, the budgets and the sealed helpers only), so that the
accountants' interface can name the charge type without importing the RDP accountant.

Example:
    >>> from dpframe.accounting import curves
    >>> charge = RDPCharge.of([curves.gaussian(1.0)])
    >>> RDPCharge.from_json(charge.to_json()) == charge
    True

"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from dpframe.accounting.curve import PrivacyCurve
from dpframe.budgets import Budget, add_up
from dpframe.sealed import frozen_array

#: The orders of the session filter (few: the filter pays log |Λ| in its δ split).
FILTER_ORDERS = frozen_array([1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32, 48,
                              64, 128, 256])


def filter_rdp(curve: PrivacyCurve) -> np.ndarray:
    """``curve.rdp_at(FILTER_ORDERS)`` (:class:`PrivacyCurve`'s), computed once per curve and kept on it (read-only).

    Planning reads a plan's curves twice (the plugin checks, then the charge): one evaluation, and the charge is
    what was checked even where a curve's function would answer differently the second time.

    Example:
        >>> from dpframe.accounting import curves
        >>> g = curves.gaussian(sigma=2.0)
        >>> float(filter_rdp(g)[3]), filter_rdp(g) is filter_rdp(g)
        (0.25, True)

    """
    values: np.ndarray | None = curve.__dict__.get("_filter_rdp")
    if values is None:
        values = frozen_array(PrivacyCurve.rdp_at(curve, FILTER_ORDERS))   # a subclass's own rdp_at is not asked
        object.__setattr__(curve, "_filter_rdp", values)
    return values


@dataclass(frozen=True)
class RDPCharge:
    """An RDP charge on :data:`FILTER_ORDERS` (plus δ0), with the curves it came from (for reports)."""

    values: tuple[float, ...]
    delta0: float
    specs: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    notion: str = "rdp"

    @classmethod
    def of(cls, curves: Sequence[PrivacyCurve]) -> RDPCharge:
        """The charge of running ``curves`` once each."""
        values, d0 = np.zeros(len(FILTER_ORDERS)), np.zeros(1)
        for c in curves:                               # rounded up, as the filter's running total
            values = add_up(values, filter_rdp(c))
            d0 = add_up(d0, np.array([c.delta0]))
        specs = tuple(c.to_json() for c in curves if c.spec is not None)
        return cls(tuple(float(v) for v in values), float(d0[0]),
                   specs if len(specs) == len(curves) else (), tuple(c.label for c in curves))

    def __repr__(self) -> str:
        orders = ", ".join(f"ε({a:g})={v:.4g}" for a, v in zip(FILTER_ORDERS, self.values) if a in (2, 8, 32))
        return f"RDPCharge({orders}, δ0={self.delta0:g}; {'; '.join(self.labels) or 'budget'})"

    def to_json(self) -> str:
        """Exact text (floats by repr, which round-trips)."""
        return json.dumps({"notion": "rdp", "values": [repr(v) for v in self.values], "delta0": repr(self.delta0),
                           "specs": list(self.specs), "labels": list(self.labels)})

    @classmethod
    def from_json(cls, text: str) -> RDPCharge:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return cls(tuple(float(v) for v in d["values"]), float(d["delta0"]), tuple(d["specs"]), tuple(d["labels"]))


SessionCost: TypeAlias = Budget | RDPCharge
"""What a session is charged for a release (``Query.cost()``, ``Accountant.charge``): a budget in the
session's notion, or an :class:`RDPCharge` in an ``rdp`` / ``pld`` session. Treat it as an opaque value
for ``compose`` / ``fits`` / ``describe_charge`` and the ledger."""
