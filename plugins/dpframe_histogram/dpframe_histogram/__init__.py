"""dpframe-histogram: an example third-party dpframe plugin.

It adds the measure kind ``"histogram"`` (a mechanism, :mod:`dpframe_histogram.mechanism`) and the query
family ``linear_regression`` (:mod:`dpframe_histogram.regression`: ``frame.linear_regression(...)``).
Install it next to dpframe (``pip install -e plugins/dpframe_histogram`` in a source checkout); dpframe
finds it through the ``dpframe`` entry-point group (``histogram = "dpframe_histogram"``) and calls the
``dpframe_mechanisms``, ``dpframe_query_families`` and ``dpframe_audits`` hooks below. Block it with
``DPFRAME_BLOCK_PLUGINS=histogram``.

See :mod:`dpframe_histogram.mechanism` and :mod:`dpframe_histogram.regression` for the privacy proof sketches.

Example:
    >>> import polars as pl, dpframe as dp
    >>> data = pl.DataFrame({"user": [1, 2, 3], "city": ["a", "b", "a"], "age": [12.0, 40.0, 70.0]})
    >>> sess = dp.Session({"people": data}, privacy_unit=dp.PrivacyUnit("user"), budget=dp.PureDP(1), seed=0)
    >>> q = (sess.table("people").group_by("city", keys=["a", "b"])
    ...      .agg(dp.measure("histogram", "age", bounds=(0, 100), edges=(0, 18, 65, 100))))
    >>> q.collect(budget=dp.PureDP(0.5)).columns
    ['city', 'age_hist_0_18', 'age_hist_18_65', 'age_hist_65_100']

"""

from dpframe.plugin import RegisterAudits, RegisterFamily, RegisterMechanism, hookimpl

from dpframe_histogram.mechanism import MAX_BINS, HistogramMechanism, HistogramPlan, bin_columns, parse_edges
from dpframe_histogram.regression import LinearModel, LinearRegression

__all__ = ["MAX_BINS", "HistogramMechanism", "HistogramPlan", "LinearModel", "LinearRegression", "bin_columns",
           "dpframe_audits", "dpframe_mechanisms", "dpframe_query_families", "parse_edges"]
__version__ = "0.1.0"


@hookimpl
def dpframe_mechanisms(register: RegisterMechanism) -> None:
    """Register the mechanisms this plugin provides (dpframe calls this hook once per plugin host).

    Example:
        >>> found = []
        >>> dpframe_mechanisms(lambda mechanism: found.append(mechanism.name))
        >>> found
        ['histogram']

    """
    register(HistogramMechanism())


@hookimpl
def dpframe_query_families(register: RegisterFamily) -> None:
    """Register the query families this plugin provides: ``linear_regression``."""
    register(LinearRegression())


@hookimpl
def dpframe_audits(register: RegisterAudits) -> None:
    """Register this plugin's privacy audits (:mod:`dpframe_histogram.audits`), loaded only when an audit runs."""
    def specs() -> list[object]:
        from dpframe_histogram.audits import specs

        return list(specs())

    register(specs, name="histogram")
