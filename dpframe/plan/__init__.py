"""The logical plan: immutable, validated nodes that a query is built from (no data is read)."""

from dpframe.plan.nodes import Aggregate, Filter, Node, Scan, Select, WithColumns
from dpframe.plan.rowlevel import check_row_level

__all__ = ["Aggregate", "Filter", "Node", "Scan", "Select", "WithColumns", "check_row_level"]
