"""Review 40 (lead): process-wide settings of the engines' libraries, changed through their public APIs.

Code in the session's process (an analyst who may call from threads, catch every exception and fork) can also
call Polars' and numpy's public configuration: ``pl.Config.set_verbose(True)`` made Polars print, on the
process's standard error, how many private rows passed a filter (``rows_before: 49, rows_after: 49``) and how
many groups a group-by found; ``np.seterr(all="raise")`` made the accountant raise a raw ``FloatingPointError``
and a mechanism's float arithmetic on exact statistics fail where the data made it underflow.
Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.engine_output import DIAGNOSTICS

# Diagnostic lines that carry statistics of the rows a query read (Polars 2.x wording).
_LEAKS = ("rows_after", "estimated groups", "sort: buffered", "recv(row=", "PQ-Metrics", "[SENSITIVE]")


def _session(path: str | None = None, accountant: str | None = None) -> dp.Session:
    frame = pl.DataFrame({"u": list(range(100)) * 3, "city": ["a", "b", "c"] * 100,
                          "x": [float(i) for i in range(300)]})
    source: object = frame
    if path is not None:
        frame.write_parquet(path, row_group_size=50)
        source = path
    options = {} if accountant is None else {"accountant": accountant}
    return dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.ApproxDP(10, 1e-5),
                      **options)


def _query(sess: dp.Session) -> object:
    return sess.table("t").filter(pl.col("x") > 250).group_by("city").agg(dp.len()).collect(dp.ApproxDP(1, 1e-6))


def test_polars_verbose_output_is_refused_before_the_charge(tmp_path, capfd) -> None:
    """``pl.Config(verbose=True)`` printed the filtered row count of a Parquet scan and the number of groups."""
    sess = _session(str(tmp_path / "t.parquet"))
    capfd.readouterr()
    with pl.Config(verbose=True), pytest.raises(dp.ArgumentError, match="POLARS_VERBOSE") as refused:
        _query(sess)
    err = capfd.readouterr().err
    assert not any(leak in err for leak in _LEAKS), err
    assert "nothing was charged" in str(refused.value) and "set_verbose(False)" in str(refused.value)
    assert sess.history().height == 0
    _query(sess)                                     # verbose off again: the query runs
    assert sess.history().height == 1


@pytest.mark.parametrize("name", DIAGNOSTICS)
def test_every_diagnostic_setting_is_refused(name, tmp_path, capfd, monkeypatch) -> None:
    """Each of Polars' printing settings, set in the environment only (some Polars reads there every time)."""
    sess = _session(str(tmp_path / "t.parquet"))
    capfd.readouterr()
    monkeypatch.chdir(tmp_path)     # a plan-file setting names a file ("1"): the checks' plans are written here
    monkeypatch.setenv(name, "1")
    with pytest.raises(dp.ArgumentError, match=name):
        _query(sess)
    assert not any(leak in capfd.readouterr().err for leak in _LEAKS)
    assert sess.history().height == 0


def test_polars_own_copy_of_the_setting_is_the_one_checked(tmp_path, capfd) -> None:
    """Polars keeps ``POLARS_VERBOSE`` in its own state: turned on, then unset in the environment alone, it
    still printed; the check reloads Polars' copy from the environment it read."""
    sess = _session(str(tmp_path / "t.parquet"))
    pl.Config.set_verbose(True)
    try:
        del os.environ["POLARS_VERBOSE"]            # the environment says off; Polars' own copy says on
        capfd.readouterr()
        _query(sess)
        assert not any(leak in capfd.readouterr().err for leak in _LEAKS)
    finally:
        pl.Config.set_verbose(None)


def test_a_setting_turned_on_after_the_charge_fails_the_read_alike_on_every_dataset(monkeypatch) -> None:
    """An interactive stream is charged once and reads later: a read while the setting is on fails, charged."""
    outcomes = []
    for extra in (0, 1):
        frame = pl.DataFrame({"u": list(range(20 + extra)), "x": [1.0] * (20 + extra)})
        sess = dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10))
        sv = sess.sparse_vector(5, 1, dp.PureDP(1))
        monkeypatch.setenv("POLARS_VERBOSE", "1")
        try:
            sv.test(sess.table("t").agg(dp.len()))
            outcome = "released"
        except dp.DPFrameError as e:
            outcome = str(e)
        finally:
            monkeypatch.delenv("POLARS_VERBOSE")
        outcomes.append((outcome, sess.history()["status"].to_list()))
    assert outcomes[0] == outcomes[1]
    assert "ArgumentError" in outcomes[0][0], outcomes


def test_numpy_raising_on_floating_point_errors_does_not_reach_the_accountant() -> None:
    """Under ``np.seterr(all="raise")`` a Rényi session's reservation raised ``FloatingPointError`` (an
    underflow in its rounded-up running total, ``budgets.add_up``), a raw error on every query."""
    sess = _session(accountant="rdp")
    with np.errstate(all="raise"):
        _query(sess)
        _query(sess)
    assert sess.history()["status"].to_list() == ["committed", "committed"]


def float_work_on_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give the built-in aggregates' release a mechanism's harmless float work on its exact statistics:
    ``exp(-count)``, which underflows (to 0) for large counts."""
    from dpframe_aggregates.aggregates import AggregatePlan

    release = AggregatePlan.release

    def with_float_work(self: object, stats: dict[str, np.ndarray], rng: object) -> object:
        for values in stats.values():
            np.exp(-np.asarray(values, dtype=np.float64))
        return release(self, stats, rng)  # type: ignore[arg-type]

    monkeypatch.setattr(AggregatePlan, "release", with_float_work)


def test_numpy_raising_on_floating_point_errors_reaches_no_private_computation(monkeypatch) -> None:
    """A mechanism's float arithmetic on exact statistics (here ``exp(-count)``, harmless: it underflows to 0
    for large counts) raised ``FloatingPointError`` under the caller's ``np.seterr(all="raise")`` on the
    larger dataset only: the query failed on D′ and was released on D."""
    float_work_on_statistics(monkeypatch)
    outcomes = []
    for rows in (10, 1_000):
        sess = dp.Session({"t": pl.DataFrame({"u": list(range(rows))})}, privacy_unit=dp.PrivacyUnit("u"),
                          budget=dp.PureDP(10))
        with np.errstate(all="raise"):
            try:
                sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
                outcome = "released"
            except dp.DPFrameError as e:
                outcome = str(e)
        outcomes.append((outcome, sess.history()["status"].to_list()))
    assert outcomes == [("released", ["committed"])] * 2, outcomes


def test_the_environment_is_left_as_the_data_owner_set_it(monkeypatch) -> None:
    """The check reads the environment; it never writes it (a write races with Polars' threads reading it)."""
    monkeypatch.setenv("POLARS_VERBOSE", "0")
    before = dict(os.environ)
    _query(_session())
    assert dict(os.environ) == before


def test_numpy_raising_on_floating_point_errors_does_not_reach_public_numerics() -> None:
    """The Gaussian sparse vector's accounting (scipy's ``logsumexp``, an underflow) raised a raw
    ``FloatingPointError`` from ``sess.sparse_vector`` under ``np.seterr(all="raise")``."""
    frame = pl.DataFrame({"u": list(range(20)), "x": [1.0] * 20})
    sess = dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, 1e-5), accountant="rdp")
    with np.errstate(all="raise"):
        sv = sess.sparse_vector(0, 1, dp.ZCDP(0.1), noise="gaussian")
        sv.test(sess.table("t").agg(dp.len()))
        sv.close()
    assert sess.history().height == 1
