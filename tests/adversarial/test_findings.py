"""Regression tests for issue 16's findings 1, 2 and 5 (session side), each an attack as the analyst would run it.

Each attack failed before the fix: a row predicate came back exactly through "the query failed while
running" (finding 1), a Rust panic escaped the session guard and left the charge ``reserved`` (finding 2),
and a public attribute assignment turned bounding or private noise off (finding 5).
"""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

import dpframe as dp
from dpframe.errors import DPFrameError, PlanError

SALARIES = [1_000 * i for i in range(60)]


def _session(extra: bool, backend: str = "polars") -> dp.Session:
    """D (60 people) or D′ = D plus one person with a salary of 123,456."""
    salaries = SALARIES + ([123_456] if extra else [])
    n = len(salaries)
    data = pl.DataFrame({"user": list(range(n)), "salary": salaries, "name": ["a"] * n,
                         "day": [dt.date(2020, 1, 1)] * n, "at": [dt.datetime(2020, 1, 1)] * n})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("user", max_rows=1), budget=dp.PureDP(10),
                      backend=backend, seed=1)


def _outcome(sess: dp.Session, build: object) -> str:
    """What the analyst sees: the exception type at build or run time, or "released"."""
    try:
        query = build(sess.table("t"))   # type: ignore[operator]
    except DPFrameError as e:
        return f"refused when built: {type(e).__name__}"
    try:
        query.collect(dp.PureDP(0.01))
    except BaseException as e:   # noqa: BLE001
        return f"failed when run: {type(e).__name__}"
    return "released"


TARGET = pl.col("salary") == 123_456
ORACLES = {
    "to_integer base 1 (finding 1)": lambda f: f.with_columns(
        z=pl.when(TARGET).then(pl.lit("1")).otherwise(None).str.to_integer(base=1, strict=False)).agg(dp.count("z")),
    "Date.to_string with %H (finding 1)": lambda f: f.with_columns(
        z=pl.when(TARGET).then(pl.col("day")).otherwise(None).dt.to_string("%Y-%m-%d %H:%M")).agg(dp.count("z")),
    "cast_time_unit overflow (finding 1)": lambda f: f.with_columns(
        z=pl.when(TARGET).then(pl.lit(10**17)).otherwise(0).cast(pl.Datetime("us"), strict=False)
        .dt.cast_time_unit("ns")).agg(dp.count("z")),
    "month_start of a far datetime (finding 2)": lambda f: f.with_columns(
        z=pl.when(TARGET).then(pl.lit(10**18)).otherwise(0).cast(pl.Datetime("ms"), strict=False)
        .dt.month_start()).agg(dp.count("z")),
    "to_string of a far datetime (finding 2)": lambda f: f.with_columns(
        z=(pl.col("salary") * 10**13).cast(pl.Datetime("ms"), strict=False).dt.to_string("%Y")).agg(dp.count("z")),
    "cast of a far date to string (finding 2)": lambda f: f.filter(
        (pl.col("salary") * 1_000).cast(pl.Date, strict=False).cast(pl.String, strict=False).is_null()).agg(dp.len()),
    "offset_by near the calendar's end (finding 2)": lambda f: f.with_columns(
        z=(pl.col("salary") * 10**15).cast(pl.Datetime("ms"), strict=False).dt.offset_by("1y")).agg(dp.count("z")),
    "truncate 1mo (finding 2)": lambda f: f.with_columns(
        z=(pl.col("salary") * 10**15).cast(pl.Datetime("ms"), strict=False).dt.truncate("1mo")).agg(dp.count("z")),
    "replace_time_zone (finding 2)": lambda f: f.with_columns(
        z=(pl.col("salary") * 10**15).cast(pl.Datetime("ms"), strict=False)
        .dt.replace_time_zone("Europe/Amsterdam", ambiguous="earliest", non_existent="null")).agg(dp.count("z")),
    "round 0ns at build time (finding 2)": lambda f: f.with_columns(z=pl.col("at").dt.round("0ns")).agg(dp.count("z")),
    "decimal overflow": lambda f: f.with_columns(
        z=pl.col("salary").cast(pl.Decimal(38, 10), strict=False) * 10**27).agg(dp.count("z")),
    "pad to a huge length": lambda f: f.with_columns(z=pl.col("name").str.pad_start(10**9)).agg(dp.count("z")),
}


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("attack", sorted(ORACLES))
def test_no_exception_oracle(attack: str, backend: str) -> None:
    """Neighbours give the same outcome, never a failure after charging; a refusal charges nothing."""
    outcomes = []
    for extra in (False, True):
        sess = _session(extra, backend)
        outcomes.append(_outcome(sess, ORACLES[attack]))
        if outcomes[-1].startswith("refused"):
            assert sess.history().height == 0
        assert set(sess.history()["status"].to_list()) <= {"committed"}
    assert outcomes[0] == outcomes[1], outcomes
    assert not outcomes[0].startswith("failed"), outcomes


def test_the_first_finding_is_refused_with_the_fix() -> None:
    sess = _session(False)
    with pytest.raises(PlanError, match=r"ToInteger.*fails on some values.*base from 2 to 36"):
        ORACLES["to_integer base 1 (finding 1)"](sess.table("t"))
    assert sess.history().height == 0


def test_far_dates_become_null_before_a_date_operation() -> None:
    """The temporal guard: ±100,000 years from 1970 run as written, farther ones are null (documented)."""
    sess = _session(False)
    days = (pl.col("salary") - 30_000) * 1_500   # -45M .. +43.5M days: beyond ±36.5M at both ends
    query = sess.table("t").with_columns(d=days.cast(pl.Int32, strict=False).cast(pl.Date, strict=False)
                                         .dt.year()).filter(pl.col("d").is_null()).agg(dp.len())
    assert "is_between" in str(query.node.input.input.exprs[0])   # type: ignore[attr-defined]
    query.collect(dp.PureDP(1))


class _Panic(BaseException):
    """Stands in for pyo3's PanicException (a BaseException, not an Exception)."""


def _break_backend(sess: dp.Session, error: BaseException, monkeypatch: pytest.MonkeyPatch) -> None:
    def statistics(request: object) -> pl.DataFrame:
        raise error
    monkeypatch.setattr(sess._catalog.default_backend, "statistics", statistics)


def test_a_panic_while_running_is_caught_and_stays_charged(monkeypatch: pytest.MonkeyPatch) -> None:
    sess = _session(False)
    _break_backend(sess, _Panic("secret 123456"), monkeypatch)
    with pytest.raises(DPFrameError, match=r"failed while running \(_Panic\)") as info:
        sess.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    assert "123456" not in str(info.value) and info.value.__context__ is None and info.value.__cause__ is None
    assert sess.history()["status"].to_list() == ["failed"]
    assert sess.spent() == dp.PureDP(0.5)


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupt_is_reraised_after_the_charge_is_marked(error: BaseException,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    sess = _session(False)
    _break_backend(sess, error, monkeypatch)
    with pytest.raises(type(error)):
        sess.table("t").agg(dp.len()).collect(dp.PureDP(0.5))
    assert sess.history()["status"].to_list() == ["failed"]
    assert sess.spent() == dp.PureDP(0.5)


@pytest.mark.parametrize("attribute", ["privacy_unit", "rng", "accountant", "plugins"])
def test_the_guarantee_inputs_are_read_only(attribute: str) -> None:
    """Finding 5: reassigning them would drop bounding, make noise replayable or swap the enforcing accountant."""
    sess = _session(False)
    replacement = {"privacy_unit": dp.PrivacyUnit.row(), "rng": None, "accountant": None, "plugins": None}[attribute]
    with pytest.raises(AttributeError):
        setattr(sess, attribute, replacement)
