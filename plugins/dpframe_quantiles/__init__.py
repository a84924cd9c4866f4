"""dpframe's quantile mechanisms (a first-party plugin, loaded through entry points).

* :class:`QuantileMechanism`: ``dp.quantile`` / ``dp.median`` / SQL ``MEDIAN`` and ``QUANTILE_CONT`` —
  the exponential mechanism on a public ordered domain, sampled exactly, several q released jointly.
* :mod:`dpframe_quantiles.bounds`: the DP bounds helper behind ``Frame.bounds``.
"""

from dpframe.plugin import RegisterFamily, RegisterMechanism, hookimpl
from dpframe_quantiles.bounds import Bounds
from dpframe_quantiles.mechanism import QuantileMechanism

__all__ = ["QuantileMechanism"]


@hookimpl
def dpframe_mechanisms(register: RegisterMechanism) -> None:
    """The quantile mechanism."""
    register(QuantileMechanism())


@hookimpl
def dpframe_query_families(register: RegisterFamily) -> None:
    """The ``bounds`` query family."""
    register(Bounds())
