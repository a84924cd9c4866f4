"""Review 55a: SQL's growth bound (review 54k), second pass; and quantile probabilities checked when SQL is built.

Each attack is only built here (or run on a tiny input to show the bound it was given is exceeded): running them at
size could exhaust the machine's memory.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp


def _session(backend: str = "duckdb") -> dp.Session:
    data = pl.DataFrame({"u": range(40), "x": [1] * 40, "s": ["ab"] * 40, "t": ["cd"] * 40,
                         "l": [["a", "b"]] * 40})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0, backend=backend)


@pytest.mark.parametrize("backend", ["duckdb", "polars"])
@pytest.mark.parametrize("qs", ["[0.5, 0.5]", "[0.1, 0.25, 0.10000000001]"])
def test_duplicate_quantile_probabilities_are_refused_when_sql_is_built(backend: str, qs: str) -> None:
    sess = _session(backend)
    with pytest.raises(dp.errors.PlanError, match="duplicate quantile probabilities") as e:
        sess.sql(f"SELECT QUANTILE_CONT(CLAMP(x, 0, 10), {qs}) AS q FROM t")
    assert e.value.argument == "sql" and "once" in str(e.value)
    assert sess.history().height == 0
