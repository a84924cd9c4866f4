"""Review 38b: the D/D′ oracles with a privacy-unit column of every type, and queries grouped by the unit column.

Scope: the composed oracles (method chains and SQL; ``tests/adversarial/composed.py``, ``sql_composed.py``) now draw
the unit column's type (:data:`~tests.adversarial.composed.UNIT_TYPES`: Int64, UInt64, Int128, Float64, Float32,
String, Categorical, Enum, Binary, Decimal, Date, Datetime, Datetime with a time zone, Boolean) and the added
unit's id adversarially — the type's extremes, an id equal to one of D's by the unit equality (``-0.0`` for
``0.0``, a NaN of another payload), ids a conversion or normalization would merge with one of D's (a trailing
space, another case or Unicode form, ``2**53 + 1`` as a float, another UTC offset of one instant), null-like
strings and a null id — and group by the unit column itself; on the Polars, DuckDB and Spark backends, in memory
and in files (with ``sample()`` and ``bound()`` steps); and the engine's unit equality (``docs/guarantees.md``:
0.0 and −0.0 one unit, every NaN one unit, strings and binaries byte by byte) checked end to end on each backend.
Each test is an attack that broke, kept with its fix, or a check that found the engine sound.
"""

from __future__ import annotations

import math
import struct
import unicodedata
from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

import dpframe as dp

_APPROX = dp.ApproxDP(1, 1e-6)

# ---------------------------------------------------------------------------- 1. grouping by the unit column


def _ids() -> pl.DataFrame:
    return pl.DataFrame({"u": [f"u{i}" for i in range(40)] * 2, "x": [0.5] * 80})


_BY_UNIT: dict[str, tuple[dp.PrivacyUnit, Callable[[dp.Session], Any]]] = {
    "max_rows=auto": (dp.PrivacyUnit("u", max_rows="auto"),
                      lambda s: s.table("t").group_by("u").agg(n=dp.len()).collect(_APPROX)),
    "max_groups=auto": (dp.PrivacyUnit("u", max_rows=2, max_groups="auto"),
                        lambda s: s.table("t").group_by("u", keys=["u1", "u2"]).agg(n=dp.len()).collect(_APPROX)),
    "diagnostics": (dp.PrivacyUnit("u", max_rows=2),
                    lambda s: s.table("t").group_by("u").agg(n=dp.mean("x", bounds=(0, 1))).collect(
                        _APPROX, diagnostics=True)),
    "sql_diagnostics": (dp.PrivacyUnit("u", max_rows=2, max_groups=1),
                        lambda s: s.sql("SELECT u, COUNT(*) AS n FROM t GROUP BY u").collect(_APPROX, diagnostics=True)),
}


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("entry", sorted(_BY_UNIT))
def test_a_query_grouped_by_the_unit_column_runs_when_it_tunes_or_diagnoses(entry: str, backend: str) -> None:
    """Attack (found by the composed oracle once its chains could group by the unit column): ``group_by("u")`` —
    grouping by the privacy-unit column itself, which the engine accepts — under a unit with ``max_rows="auto"``
    or ``max_groups="auto"``, or collected with ``diagnostics=True``, was charged, then failed with a
    ``DuplicateError`` on every dataset (``failed`` in the ledger, the budget spent for nothing): the tuning stage
    and the diagnostics count rows per unit and group, ``by=(unit, *keys)``, and asked for ``("u", "u")``. Both now
    ask for the unit column once (``dpframe.tuning.diagnostics.by_unit_and_group``): the query is released and
    committed."""
    unit, query = _BY_UNIT[entry]
    sess = dp.Session({"t": _ids()}, privacy_unit=unit, budget=dp.ApproxDP(10, 1e-3), backend=backend, seed=0)
    query(sess)
    assert sess.history()["status"].to_list() == ["committed"]
