"""Review 35a: the composed D/D′ exception-oracle, extended to the surfaces it did not generate.

Scope: automatic parameters (``dp.PrivacyUnit(..., max_rows="auto", max_groups="auto")``, ``bounds="auto"``),
``collect``'s post-processing options (``ci=`` at valid and edge levels, ``diagnostics=True``, ``accuracy=``) with
output names the analyst picks (colliding with the generated ``<output>_ci_low`` / ``_ci_high`` and diagnostic
columns), and every other query ending on a frame: ``frame.bounds``, interior point, threshold and rectangle
learning, the plugin's ``linear_regression``, ``top_k`` (every method, scores, ``k=None``, released scores) and the
robust median (``tests/adversarial/composed.py``: ``chains(tuned=True)``), against a unit of adversarial values
that may also have many rows (``extreme_rows(many=True)``). Each test is an attack that broke, kept with its fix:
it fails if the defence regresses. D and D′ are neighbouring datasets (D′ adds one privacy unit) where the attack
is data-dependent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.interactive.ptr import robust_median

_GROUPS_AUTO = dp.PrivacyUnit("u", max_rows=2, max_groups="auto")


def _session(backend: str) -> dp.Session:
    data = pl.DataFrame({"u": range(300), "x": [float(r % 50) for r in range(300)], "g": [r % 3 for r in range(300)],
                         "y": [r % 2 for r in range(300)]})
    return dp.Session({"t": data}, privacy_unit=_GROUPS_AUTO, budget=dp.ApproxDP(100, 0.5), backend=backend, seed=0)


_WHOLE_TABLE: dict[str, Callable[[dp.Frame], Any]] = {
    "bounds": lambda t: t.bounds("x"),
    "interior_point": lambda t: t.interior_point("x", bounds=(0, 100)),
    "learn_threshold": lambda t: t.learn_threshold("x", label="y", bounds=(0, 100)),
    "learn_rectangle": lambda t: t.learn_rectangle(["x"], label="y", bounds={"x": (0, 100)}),
    "robust_median": lambda t: robust_median(t, "x", (0, 100)),
}


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("ending", sorted(_WHOLE_TABLE))
def test_a_whole_table_query_runs_under_a_unit_with_max_groups_auto(backend: str, ending: str) -> None:
    """Under ``dp.PrivacyUnit("u", max_rows=2, max_groups="auto")``, ``frame.bounds``, the learners and the robust
    median were charged, then failed (``DPFrameError: the query failed while running``), on every dataset: they
    plan with ``max_rows`` only, but their reads went through the session's unit, whose ``max_groups`` was never
    chosen (only ``agg`` tunes), and the reader refuses an unchosen bound. A query with no group-by has one group:
    ``max_groups`` bounds nothing there, and its reads now bound by ``max_rows`` alone, as ``agg``'s tuning stage
    already did (found by the composed oracle, ``chains(tuned=True)``).
    """
    sess = _session(backend)
    _WHOLE_TABLE[ending](sess.table("t")).collect(dp.ApproxDP(1, 1e-6))
    assert sess.history()["status"].to_list() == ["committed"]


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("score", [dp.len(), dp.count("x"), dp.sum("x", bounds=(0, 50))], ids=["len", "count", "sum"])
def test_a_bounded_top_k_score_runs_under_a_unit_with_max_groups_auto(backend: str, score: dp.Measure) -> None:
    """``group_by(...).top_k(score=dp.len())`` (or a count or sum) under ``max_groups="auto"`` was charged, then
    failed on every dataset: its rows are read bounded per unit, and the unit's ``max_groups`` was never chosen.
    Its plan reads ``max_rows`` only (each key's score moves by ≤ ``max_rows`` rows' worth), so its rows are now
    bounded by ``max_rows`` alone, as under a unit without ``max_groups``."""
    sess = _session(backend)
    sess.table("t").group_by("g").top_k(k=1, score=score).collect(dp.ApproxDP(1, 1e-6))
    assert sess.history()["status"].to_list() == ["committed"]


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_tuned_agg_never_reads_through_a_unit_whose_max_groups_is_still_auto(
        backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix above must not reach ``agg``: its noise is calibrated to the ``max_groups`` it chose, so a read
    through the session's unit (``max_groups`` still ``"auto"``) bounded by ``max_rows`` alone would let a unit
    touch more groups than its noise covers. Such a read is an engine bug; it fails (the same on every dataset)
    instead of running. Here the tuning stage is broken on purpose: it hands the release its own reader."""
    from dpframe.tuning import stage

    tune = stage.Tuner.tune

    def broken(self: stage.Tuner, reader: Any, rng: Any) -> Any:
        chosen, _, tuned = tune(self, reader, rng)
        return chosen, reader, tuned
    monkeypatch.setattr(stage.Tuner, "tune", broken)
    sess = _session(backend)
    query = sess.table("t").group_by("g", keys=[0, 1, 2]).agg(dp.len())
    with pytest.raises(dp.DPFrameError, match="the query failed while running"):
        query.collect(dp.ApproxDP(1, 1e-6))
    assert sess.history()["status"].to_list() == ["failed"]


def test_a_view_of_a_view_of_the_reader_dies_with_its_reservation() -> None:
    """``reader.tuning().bounded_by(unit)`` is a view of a view: it must stop reading when the release ends, as
    the reader it was made from does (``_check`` used to look one level up only)."""
    sess = _session("polars")
    kept: list[Any] = []
    chosen = dp.PrivacyUnit("u", max_rows=2, max_groups=1)
    sess._release.release(dp.ApproxDP(1, 0), "capture", "none",
                          lambda reader: kept.append(reader.tuning().bounded_by(chosen)))
    with pytest.raises(dp.DPFrameError, match="release is over"):
        kept[0].request(sess.table("t")._node, ())
