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

from typing import TYPE_CHECKING

from dpframe import datasets, plots
from dpframe.accuracy import Accuracy
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP
from dpframe.errors import (
    ArgumentError,
    ArgumentTypeError,
    BoundsError,
    BudgetConversionError,
    BudgetError,
    BudgetExceededError,
    DPFrameError,
    LedgerError,
    MissingBoundsError,
    NoIntervalWarning,
    PlanError,
    PluginError,
    PolarsHabitError,
    RemoteError,
    SchemaError,
    SignatureError,
    TableChangedError,
    TopKWarning,
)
from dpframe.frame import Frame, GroupBy, Query
from dpframe.interactive.targets import above, below, between, outside
from dpframe.measures import (
    Measure,
    count,
    count_distinct,
    count_units,
    len,
    mean,
    measure,
    median,
    quantile,
    std,
    sum,
    var,
)
from dpframe.plugin import hookimpl
from dpframe.privacy_unit import PrivacyUnit
from dpframe.remote import (
    Remote,
    RemoteCharge,
    RemoteFrame,
    RemoteGroupBy,
    RemoteQuery,
    RemoteRobustMedian,
    RemoteTool,
    Server,
    connect,
)
from dpframe.session import Session
from dpframe.tuning import Diagnosed

if TYPE_CHECKING:   # the built-in families' result types, as type checkers see dp.<Name> (at run time: __getattr__)
    from dpframe_learning.queries import NoAnswer as NoAnswer
    from dpframe_topk.results import TopKFailed as TopKFailed
    from dpframe_topk.results import TopKPartial as TopKPartial

__version__ = "0.1.0"

def _result_types() -> dict[str, type]:
    """The result types query families declare (``dp.TopKFailed``, ``dp.NoAnswer`` ...), by name."""
    from dpframe.plugin import plugin_host

    return plugin_host().result_types()


def __getattr__(name: str) -> object:
    # Result types of query families that callers check for (``isinstance(out, dp.TopKFailed)``). Looked up
    # on first access, so ``import dpframe`` imports no plugin package before a session does.
    types = _result_types()
    if name in types:
        return types[name]
    from dpframe.plugin import plugin_host

    blocked = plugin_host().blocked
    if blocked and name[:1].isupper():
        raise PluginError(f"dp.{name} is not defined: no installed query family declares it (blocked plugins: "
                          f"{sorted(blocked)})", argument="plugin", fix="remove its plugin from DPFRAME_BLOCK_PLUGINS")
    raise AttributeError(f"module 'dpframe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_result_types()])


__all__ = [
    "ZCDP", "Accuracy", "ApproxDP", "ArgumentError", "ArgumentTypeError", "BoundsError", "Budget",
    "BudgetConversionError", "BudgetError",
    "BudgetExceededError", "DPFrameError", "Diagnosed", "Frame", "GroupBy", "LedgerError", "Measure",
    "MissingBoundsError", "NoIntervalWarning", "PlanError",
    "PluginError", "PolarsHabitError", "PrivacyUnit", "PureDP", "Query", "Remote", "RemoteCharge", "RemoteError",
    "RemoteFrame", "RemoteGroupBy", "RemoteQuery", "RemoteRobustMedian", "RemoteTool",
    "SchemaError", "Server", "Session", "SignatureError", "TableChangedError", "TopKWarning",
    "connect",
    "count",
    "count_distinct",
    "count_units",
    "above", "below", "between", "hookimpl", "len", "outside",
    "datasets", "mean", "measure", "median", "plots", "quantile", "std", "sum", "var",
]
