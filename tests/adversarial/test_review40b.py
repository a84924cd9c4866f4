"""Review 40b: the accountant-drawing oracles on the Spark backend; free refusals under automatic units.

Scope: TODO
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp

from . import test_review39b as r39b
from . import test_review39d as r39d
from .composed import SPARK, SPARK_PARQUET, Storage

KINDS = r39d.KINDS
SPARK_STORAGES = {"memory": SPARK, "parquet": SPARK_PARQUET}
_DATA = pl.DataFrame({"u": [1, 2, 3, 1], "s": ["a", "b", "a", "a"], "x": [1.0, 2.0, 3.0, 4.0]})


def _report(defects: list[str]) -> None:
    assert not defects, "\n".join(defects)


# ------------------------------------------------------------------------------------------------ Spark sweeps

@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stored", sorted(SPARK_STORAGES))
def test_every_ending_under_every_accountant_on_spark(stored: str, kind: str, spark_session: Any) -> None:
    """Every ending of :data:`tests.adversarial.test_empty_inputs.ENDINGS` in a Spark session of each kind, on D and
    D′ (one more unit's row), the table in memory or in a Parquet file Spark reads itself: the same outcome,
    warnings and ledger rows (status, charge, text); none charged then failed."""
    storage: Storage = SPARK_STORAGES[stored]
    _report(r39b.sweep(None, (kind,), "spark", "user", storage))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_agg_endings_under_every_accountant_with_an_automatic_unit_on_spark(kind: str, spark_session: Any) -> None:
    _report(r39b.sweep(r39d.AGG_ENDINGS, (kind,), "spark", "auto", SPARK, cases=("one", "many")))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
@pytest.mark.parametrize("kind", KINDS)
def test_cost_is_the_charge_of_every_query_family_under_every_accountant_on_spark(kind: str, spark_session: Any
                                                                                 ) -> None:
    _report(r39b.cost_defects(kind, every=True, backend="spark", storage=SPARK))


# ------------------------------------------------------------------------------------------------ findings

@pytest.mark.parametrize("score", [dp.sum("x", bounds="auto"), dp.sum(pl.col("x") * 2, bounds="auto")])
def test_a_top_k_score_with_automatic_bounds_is_refused_by_a_dpframe_error(score: dp.Measure) -> None:
    """``group_by(...).top_k(score=dp.sum("x", bounds="auto"))`` raised a bare ``AssertionError`` when built (the
    score's bounds were asserted, not checked): free and the same on D and D′, so the composed oracle, which then
    compared any exception's type and message, passed it — but it named no argument and no fix (and under
    ``python -O`` the assertion is gone). It is now a ``PlanError`` naming ``score``; the oracles now also require
    every error to be a dpframe error (:data:`tests.adversarial.composed.DP_ERRORS`)."""
    sess = dp.Session({"t": _DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 1e-3))
    with pytest.raises(dp.PlanError, match=r"^score: .*bounds='auto'.*Fix: ") as refused:
        sess.table("t").group_by("s").top_k(k=1, score=score)
    assert refused.value.argument == "score" and sess.history().height == 0
