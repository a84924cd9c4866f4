"""Issue 19 item 6: sensible defaults — round grids, explain() notes on grids and small inputs, top-k next
steps, documented error subclasses, dates, and a demo consistent with the README."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from dpframe_topk import TopKFailed

import dpframe as dp
from dpframe import cli
from dpframe.domains import OrderedDomain
from tests.test_docs_snippets import not_printed, transcripts

ROOT = Path(__file__).resolve().parents[2]
MINUTES = pl.DataFrame({"u": range(3000), "delay": [float((i * 7) % 90 - 10) for i in range(3000)],
                        "g": [f"g{i % 40:02d}" for i in range(3000)],
                        "none": pl.Series([None] * 3000, dtype=pl.Float64)})


def session(budget: dp.Budget = dp.PureDP(10**6)) -> dp.Session:
    return dp.Session({"t": MINUTES}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=budget, seed=0)


def test_grids_are_anchored_on_round_numbers() -> None:
    d = OrderedDomain.of("x", pl.Float64(), (-4.3, 10.2), resolution=1, rounding="nearest")
    assert [d.decode(c) for c in range(d.size)] == [-4.3, *map(float, range(-4, 11))]
    assert d.decode_series(list(range(d.size)), "x").to_list() == [d.decode(c) for c in range(d.size)]
    # bounds such as frame.bounds() releases, then resolution=1: whole-number medians, not lower + k
    low, high = -12.345678, 91.2345
    out = session().table("t").agg(dp.median("delay", bounds=(low, high), resolution=1)).collect(dp.PureDP(10**5))
    value = out["delay_median"][0]
    assert value == round(value) and abs(value - MINUTES["delay"].median()) <= 1   # type: ignore[operator]


def test_explain_names_the_grid_and_hints_at_whole_numbers() -> None:
    t = session().table("t")
    fine = str(t.agg(dp.median("delay", bounds=(-60, 600))).explain(dp.PureDP(1)))
    assert "delay_median: the grid is 2^-22 = 2.38419e-07 (no resolution given" in fine
    assert "pass resolution=1 for whole-number outputs" in fine
    whole = str(t.agg(dp.median("delay", bounds=(-60, 600), resolution=1)).explain(dp.PureDP(1)))
    assert "the grid is" not in whole and "resolution=1 for whole-number" not in whole


def test_small_and_all_null_inputs_are_flagged_and_behave_as_documented() -> None:
    t = session().table("t")
    q = t.agg(dp.mean("none", bounds=(0, 10)), dp.median("none", bounds=(0, 10)), dp.count("none"))
    text = str(q.explain(dp.PureDP(10**5)))
    assert "aggregates: none_mean: its ± is divided by n" in text and "release dp.count('none')" in text
    assert "none_median: with fewer than about" in text and "with none (an empty or all-null input)" in text
    out = q.collect(dp.PureDP(10**5))
    assert out["none_count"][0] == 0 and out["none_mean"][0] == pytest.approx(5.0, abs=0.01)   # the bounds' centre


def test_top_k_failures_name_the_next_thing_to_try() -> None:
    sess = session(dp.ApproxDP(10, 1e-5))
    flat = sess.table("t").group_by("g")     # 40 groups of 75 rows: no gap among the top k_max = 10
    for kwargs in ({"k": None}, {"k": 2, "method": "limited_domain"}):
        out = flat.top_k(**kwargs).collect(dp.ApproxDP(0.05, 1e-7))
        assert isinstance(out, TopKFailed) and "; try " in out.reason and "public keys" in out.reason
        assert ("k=10" in out.reason) == (kwargs["k"] is None) and ("k_max" in out.reason) == ("method" in kwargs)


def test_private_keys_on_a_date_column_explain_why_they_rarely_pass_selection() -> None:
    """The hint reads the schema and the plan only: two tables of the same schema, one whose dates would all
    pass and one whose dates would all fail, get the same text; public keys and binned keys change it."""
    def explained(days: int, by: str = "day", **kw: Any) -> str:
        rows = pl.DataFrame({"u": range(3000), "x": [1.0] * 3000,
                             "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % days) for i in range(3000)]})
        sess = dp.Session({"t": rows}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.ApproxDP(5, 1e-6))
        return str(sess.table("t").group_by(by, **kw).agg(dp.len()).explain(dp.ApproxDP(1, 1e-7)))

    text = explained(365)
    assert "private keys on 'day' (Date): every distinct date is its own group" in text
    assert "keys=pl.date_range(start, end, '1d', eager=True)" in text and ".dt.truncate('1mo')" in text
    assert "date_trunc('month', day)" in text
    assert explained(2) == text                                           # data-independent
    assert "private keys on" not in explained(365, keys=[dt.date(2024, 1, 1)])
    assert "private keys on" not in explained(365, by="x")
    stamps = pl.DataFrame({"u": [1], "ts": [dt.datetime(2024, 1, 1)]})
    sess = dp.Session({"t": stamps}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.ApproxDP(5, 1e-6))
    sql = str(sess.sql("SELECT ts, COUNT(*) FROM t GROUP BY ts").explain(dp.ApproxDP(1, 1e-7)))
    assert "private keys on 'ts' (Datetime): every distinct timestamp" in sql and "pl.datetime_range(" in sql


@pytest.mark.parametrize("call, argument", [
    (lambda: dp.quantile("delay", 90, bounds=(0, 100)), "q"),
    (lambda: dp.PrivacyUnit("u", max_rows=0), "max_rows"),
    (lambda: dp.PrivacyUnit("u", max_rows=5, max_groups=0), "max_groups"),
    (lambda: dp.var("delay", bounds=(0, 1), ddof=2), "ddof"),
    (lambda: dp.count(""), "column"),
])
def test_bad_arguments_raise_the_documented_argument_error(call: object, argument: str) -> None:
    with pytest.raises(dp.ArgumentError) as err:
        call()  # type: ignore[operator]
    assert err.value.argument == argument and isinstance(err.value, ValueError) and err.value.fix
    assert "dp.ArgumentError" in (ROOT / "docs" / "reference.md").read_text()


def test_a_mean_of_dates_says_what_works() -> None:
    days = pl.DataFrame({"u": [1, 2], "day": [dt.date(2024, 1, 1), dt.date(2024, 3, 1)]})
    sess = dp.Session({"t": days}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(1))
    with pytest.raises(dp.BoundsError, match="is a date: this measure takes numbers") as err:
        dates: Any = (dt.date(2024, 1, 1), dt.date(2025, 1, 1))         # not a type the signature takes
        dp.mean("day", bounds=dates)
    assert "dp.median" in str(err.value)
    with pytest.raises(dp.SchemaError, match="mean\\(\\) of a Date column is not supported") as schema:
        sess.table("t").agg(dp.mean("day", bounds=(0, 1)))
    assert "to_physical()" in str(schema.value)
    sess.table("t").agg(dp.mean(pl.col("day").to_physical(), bounds=(19_000, 20_000)))   # what the fix says works


def _cli_page_shows(command: str) -> list[str]:
    """The lines docs/cli.md shows under ``$ <command>`` (the other commands' transcripts:
    tests/test_docs_snippets.py)."""
    page = (ROOT / "docs" / "cli.md").read_text()
    return next(shown for _, args, shown in transcripts(page) if ["dpframe", *args] == command.split())


def test_the_cli_page_shows_what_dpframe_plugins_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plugins"]) == 0
    shown = _cli_page_shows("dpframe plugins")
    assert len(shown) == 7 and shown[-1].startswith("histogram")     # the example plugin, when it is installed
    installed = importlib.util.find_spec("dpframe_histogram") is not None
    assert not_printed(shown if installed else shown[:-1], capsys.readouterr().out) == []


def test_the_cli_page_shows_the_routing_dpframe_plugins_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plugins"]) == 0
    page = (ROOT / "docs" / "cli.md").read_text()
    shown = page[page.index("```text\nrouting: "):].split("```")[1].splitlines()[1:]
    assert [line for line in shown if line.startswith(("sum ", "top_k "))] == [
        "sum                  pure/zcdp    aggregates (aggregates)", "top_k              group_by  top_k (topk)"]
    installed = importlib.util.find_spec("dpframe_histogram") is not None
    printed = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]   # widths follow the rows
    assert [line for line in shown if (installed or "histogram" not in line) and
            " ".join(line.split()) not in printed] == []


def test_the_demo_is_the_readme_example(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (ROOT / "README.md").read_text()
    example = readme[readme.index("## Example"):readme.index("## Features")]
    assert f"keys={list(cli.KEYS)!r}".replace("'", '"') in example and example.count("bounds=(0, 500)") == 3
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "adults in Amsterdam, Berlin, Oslo (public keys" in out and "spent ApproxDP(epsilon=3/2" in out
    shown = _cli_page_shows("dpframe demo")                   # the run docs/cli.md shows is this one
    assert len(shown) > 20 and not_printed(shown, out) == []
    released = pl.DataFrame({"city": ["a", "b"], "spend_var": [0.0, 3.5]})
    assert [n[:30] for n in cli.released_notes(released)] == ["note: a spend_var of 0.0 is a "]
    assert "no city was released" in cli.released_notes(released.clear())[0]
    assert cli.released_notes(released.filter(pl.col("spend_var") > 0)) == []
