"""dpframe's built-in aggregate mechanisms (a first-party plugin, loaded through entry points).

* :class:`AggregateMechanism`: ``len``, ``count``, ``sum``, ``mean``, ``var``, ``std``.
* :class:`PartitionSelection`: which private group keys may be released.
"""

from dpframe.plugin import RegisterMechanism, hookimpl
from dpframe_aggregates.aggregates import AggregateMechanism
from dpframe_aggregates.partition_selection import PartitionSelection

__all__ = ["AggregateMechanism", "PartitionSelection"]


@hookimpl
def dpframe_mechanisms(register: RegisterMechanism) -> None:
    """The built-in aggregate mechanisms."""
    register(AggregateMechanism())
    register(PartitionSelection())
