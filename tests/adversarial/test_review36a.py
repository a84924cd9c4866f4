"""Review 36a: concurrency and time-of-check/time-of-use across every public entry point.

Scope: arguments changed between the check and the use — by another thread, or through memory the engine
shares with the caller (a NumPy array a Polars frame or Series was built on) — for quantile levels, bounds,
candidate sets, keys, scores, budgets, column lists, public-key frames, SQL keys, row-level expressions and the
data owner's in-memory tables; many threads on one session (ordinary collects, SQL, tuned and ``ci=`` /
``diagnostics=`` queries, top-k, interactive objects, ``sess.close()``, a budget near exhaustion), checked by
the random concurrency oracle in ``tests/adversarial/concurrency.py``; plans and costs read before a collect.

Each test of a finding is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import dpframe as dp
from tests.adversarial.concurrency import race
from tests.adversarial.test_races import slow_private_steps

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _session(data: pl.DataFrame | object, *, backend: str = "polars", max_rows: int = 1) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=max_rows), budget=dp.PureDP(100),
                      backend=backend, seed=0)


# ------------------------------------------------------------------------- public keys on a NumPy array


def test_public_keys_on_a_numpy_array_cannot_gain_a_duplicate_after_the_check() -> None:
    """Finding 1: ``keys=pl.DataFrame({"g": array})`` shared the array's memory with the checked keys.

    The keys were checked for duplicates when the group-by was built; ``array[1] = 0`` afterwards made them
    ``[0, 0]``, and the query released group 0 twice, each with its own noise, for one charge (with 1,000
    copies of a key, the mean of 1,000 noisy counts). Now the keys are copied into memory of their own.
    """
    data = pl.DataFrame({"u": list(range(100)), "g": [i % 2 for i in range(100)]})
    sess = _session(data)
    array = np.array([0, 1], dtype=np.int64)
    q = sess.table("t").group_by("g", keys=pl.DataFrame({"g": array})).agg(dp.len())
    array[1] = 0
    assert q.node.keys["g"].to_list() == [0, 1]
    out = q.collect(dp.PureDP(1))
    assert out["g"].to_list() == [0, 1]


def test_read_only_keys_are_a_copy_of_their_own() -> None:
    """``ReadOnlyKeys.of`` promised "a read-only copy" but shared the caller's buffers (a shallow clone)."""
    from dpframe.sealed import ReadOnlyKeys

    array = np.array([3, 4], dtype=np.int64)
    keys = ReadOnlyKeys.of(pl.DataFrame({"g": array}))
    array[0] = 4
    assert keys["g"].to_list() == [3, 4]


# ------------------------------------------------------------------ a literal Series in a row expression


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_literal_series_on_a_numpy_array_runs_as_it_was_checked(backend: str) -> None:
    """Finding 2: a row-level expression kept the analyst's literal Series, which shares a NumPy array's memory.

    ``pl.col("x").replace(pl.Series(old), pl.Series(new))`` was checked (allow-list, isolation probe) with
    distinct old values; ``old[1] = old[0]`` afterwards made Polars refuse the mapping when the query ran:
    charged, then failed, on every dataset (and the expression that ran was not the one checked). Now the
    engine keeps its own copy of every row-level expression, read once through Polars' binary form.
    """
    data = pl.DataFrame({"u": [0, 1, 2], "x": [1, 2, 5]})
    sess = _session(data, backend=backend)
    old = np.array([1, 2], dtype=np.int64)
    frame = sess.table("t").with_columns(y=pl.col("x").replace(pl.Series(old), pl.Series([10, 20])))
    q = frame.agg(dp.sum("y", bounds=(0, 100)))
    old[1] = 1
    q.collect(dp.PureDP(50))
    assert sess.history()["status"].to_list() == ["committed"]


def test_a_filter_on_a_numpy_literal_keeps_the_checked_value() -> None:
    """The same for a filter (its predicate is kept by the plan node and read again by every collect)."""
    data = pl.DataFrame({"u": list(range(10)), "x": list(range(10))})
    sess = _session(data)
    old = np.array([1, 2], dtype=np.int64)
    frame = sess.table("t").filter(pl.col("x").replace(pl.Series(old), pl.Series([100, 200])) >= 100)
    old[0] = 20     # no row has x = 20: one row would pass, where the checked predicate passes two
    assert round(frame.agg(dp.len()).collect(dp.PureDP(50))["len"][0]) == 2


# ----------------------------------------------------------------- the data owner's in-memory tables


def _numpy_polars(keys: np.ndarray, region: np.ndarray) -> object:
    return pl.DataFrame({"k": keys, "region": region})


def _pandas(keys: np.ndarray, region: np.ndarray) -> object:
    return pd.DataFrame({"k": keys, "region": region}, copy=False)


def _arrow(keys: np.ndarray, region: np.ndarray) -> object:
    return pa.table({"k": keys, "region": region})


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("build", [_numpy_polars, _pandas, _arrow])
def test_a_public_table_is_the_session_s_own_copy(build: object, backend: str) -> None:
    """Finding 3: a public lookup table built on NumPy arrays (Polars, pandas, Arrow) shared their memory.

    A SQL join checks that the public side's join key is unique (each private row joins at most one public
    row, so the sensitivity is unchanged). With ``keys[1] = 0`` written after the session was created, key 0
    was there twice: the table the session had checked was not the one the query read (here the query's own
    duplicate-key check then refused it). Public tables are now copied when the session is created. (The
    owner's private in-memory tables are not copied: a 10M-row table is not duplicated per session;
    ``docs/guarantees.md`` states the owner's contract.)
    """
    keys, region = np.array([0, 1], dtype=np.int64), np.array([5, 6], dtype=np.int64)
    data = pl.DataFrame({"u": list(range(200)), "g": [0] * 200})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(100),
                      backend=backend, seed=0, public_tables={"p": build(keys, region)})  # type: ignore[operator]
    keys[1] = 0
    out = sess.sql("SELECT COUNT(*) AS n FROM t JOIN p ON t.g = p.k").collect(dp.PureDP(20))
    assert abs(out["n"][0] - 200) < 10        # one public row per private row: 200, not 400


# ----------------------------------------------------------------- counted, then read: a pair of bounds


def test_bounds_whose_length_and_items_disagree_are_a_dpframe_error() -> None:
    """Finding 4: ``check_bounds`` counted the pair, then iterated it again (a raw ``IndexError``, not a dpframe error).

    A list another thread shortens between the two reads — or a list whose ``__len__`` says 2 while it
    yields one item — made ``dp.sum``/``dp.quantile`` raise Python's ``IndexError``; now the pair is read once.
    """
    class Short(list):      # type: ignore[type-arg]
        def __len__(self) -> int:
            return 2

        def __iter__(self) -> Any:
            return iter([1])

    for build in (lambda: dp.sum("x", bounds=Short([0, 1])), lambda: dp.quantile("x", 0.5, bounds=Short([0, 1]))):
        with pytest.raises(dp.BoundsError, match="expected a pair"):
            build()


# ------------------------------------------------------------------------- the random concurrency oracle


@pytest.mark.parametrize(("seed", "backend", "close"), [(0, "polars", False), (1, "duckdb", False),
                                                        (2, "polars", True)])
def test_racing_calls_on_one_session_keep_the_ledger_whole(seed: int, backend: str, close: bool,
                                                           tmp_path: Any) -> None:
    """32 threads at one barrier, each a query entry point (``concurrency.race``), the budget asked twice over."""
    report = race(seed, 32, backend=backend, ledger=str(tmp_path / "budget.ledger") if close else None)
    assert report.calls == 32 and report.spent_fits
    assert close or report.refused > 0          # the budget ran out while they raced


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb", "close"])
def test_racing_calls_on_one_session_keep_the_ledger_whole_at_scale(backend: str, tmp_path: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle on 40 seeds × 64 threads, every private read and reservation slowed (wider race windows)."""
    with slow_private_steps(monkeypatch):
        for seed in range(40):
            ledger = str(tmp_path / f"{seed}.ledger") if backend == "close" else None
            race(seed, 64, backend="polars" if backend == "close" else backend, ledger=ledger)
