"""dpframe: a differentially private analysis engine for dataframes.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": [1, 2, 3, 4], "city": ["a", "b", "a", "a"], "spend": [1.0, 2, 3, 4]})
    >>> sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=1),
    ...                   budget=dp.ApproxDP(epsilon=3.0, delta=1e-6), seed=0)
    >>> q = sess.table("visits").group_by("city", keys=["a", "b"]).agg(dp.len(), dp.mean("spend", bounds=(0, 5)))
    >>> q.collect(budget=dp.PureDP(1.0)).columns
    ['city', 'len', 'spend_mean']

"""

from dpframe import datasets
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP
from dpframe.errors import (
    BoundsError,
    BudgetConversionError,
    BudgetError,
    BudgetExceededError,
    DPFrameError,
    LedgerError,
    PlanError,
    PluginError,
    SchemaError,
)
from dpframe.frame import Frame, GroupBy, Query
from dpframe.interactive.targets import above, below, between, outside
from dpframe.measures import Measure, count, count_units, len, mean, measure, median, quantile, std, sum, var
from dpframe.plugin import hookimpl
from dpframe.privacy_unit import PrivacyUnit
from dpframe.session import Session

__version__ = "0.1.0"

# Result types of first-party plugins that callers must check for (``isinstance(out, dp.TopKFailed)``).
# Loaded on first access, so ``import dpframe`` imports no plugin package (and a blocked or missing plugin
# fails only when its type is used, with a PluginError saying how to fix it).
_PLUGIN_TYPES = {
    "TopKFailed": ("topk", "dpframe_topk.results"),    # top_k: the stability test did not pass
    "TopKPartial": ("topk", "dpframe_topk.results"),   # top_k with a fixed k: fewer than k keys released
    "NoAnswer": ("learning", "dpframe_learning.queries"),  # interior_point / learn_*: too few rows for the guarantee
}


def __getattr__(name: str) -> object:
    if name in _PLUGIN_TYPES:
        from dpframe.frame import _plugin_module

        plugin, module = _PLUGIN_TYPES[name]
        value = getattr(_plugin_module(plugin, module), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dpframe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PLUGIN_TYPES])


__all__ = [
    "ZCDP", "ApproxDP", "BoundsError", "Budget", "BudgetConversionError", "BudgetError",
    "BudgetExceededError", "DPFrameError", "Frame", "GroupBy", "LedgerError", "Measure", "PlanError",
    "PluginError", "PrivacyUnit", "PureDP", "Query", "SchemaError", "Session", "count", "count_units",
    "above", "below", "between", "hookimpl", "len", "outside",
    "datasets", "mean", "measure", "median", "quantile", "std", "sum", "var",
]
