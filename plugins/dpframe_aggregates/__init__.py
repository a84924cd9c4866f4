"""dpframe's built-in aggregate mechanisms (a first-party plugin, loaded through entry points).

* :class:`AggregateMechanism`: ``len``, ``count``, ``sum``, ``mean``, ``var``, ``std``.
* :class:`PartitionSelection`: which private group keys may be released.
"""

from typing import Any

from dpframe.plugin import hookimpl
from dpframe_aggregates.aggregates import AggregateMechanism
from dpframe_aggregates.partition_selection import PartitionSelection

__all__ = ["AggregateMechanism", "PartitionSelection"]


@hookimpl
def dpframe_mechanisms() -> list[Any]:
    """The built-in aggregate mechanisms."""
    return [AggregateMechanism(), PartitionSelection()]
