"""Review 51c: a plugin author's second day (leftovers of stop 50's plugin review).

1. ``dpframe plugins`` shows routing order: which mechanism handles a measure kind under each notion (and who
   else offers it, reachable only with ``mechanism=``), which family builds each query name (``replaces=``).
2. The quantiles and histogram mechanisms split their share with the public ``dpframe.budgets.divide``; a share
   of a notion they do not declare is a dpframe error, not an AttributeError of the plugin.
3. ``dpframe.noise``'s samplers refuse bad arguments with dpframe errors naming the argument and the fix.
4. ``dpframe.testing.pin_families`` routes a query name to a family object in one session (tests only).
"""

from __future__ import annotations

from dpframe_quantiles.mechanism import QuantileMechanism

import dpframe as dp
from dpframe.testing import check_refused, measure_context


def test_quantiles_refuse_an_approximate_share_with_a_dpframe_error() -> None:
    """The mechanism declares pure/zCDP; a conformance test calling plan() with (ε, δ) got an AttributeError."""
    err = check_refused(QuantileMechanism(), dp.quantile("x", 0.5, bounds=(0, 100)), measure_context(),
                        dp.ApproxDP(1, 1e-6))
    assert err.argument == "budget" and "PureDP" in (err.fix or "")
