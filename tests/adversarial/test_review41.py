"""Review 41 (lead): Polars' query monitoring, refused like its diagnostic output.

``POLARS_QUERY_MONITORING=1`` (read by Polars from ``os.environ`` at every collect) sends each query's metrics to a
Polars Cloud workspace where ``polars_cloud`` is installed, and fails every query where it is not: each DP release
was charged, then failed (the same on every dataset, but the budget was spent for nothing, and with
``polars_cloud`` installed the private rows' counts would leave the process). A release is now refused first,
with nothing charged (``dpframe.engine_output.check_quiet``).
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.engine_output import MONITORING


def test_query_monitoring_is_refused_and_charges_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0, 3.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(2), seed=0)
    monkeypatch.setenv(MONITORING, "1")
    with pytest.raises(dp.ArgumentError, match=MONITORING) as refused:
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    assert refused.value.argument == MONITORING
    assert sess.history().height == 0
    monkeypatch.setenv(MONITORING, "0")      # Polars monitors at "1" only
    assert sess.table("t").agg(dp.len()).collect(dp.PureDP(1)).height == 1
