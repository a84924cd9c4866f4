"""Issue 19 item 4: plots of released estimates (with CIs), a session's budget and ε(δ) curves, headless."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe import accounting as acc

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def test_estimates_with_and_without_intervals(tmp_path) -> None:
    with_ci = pl.DataFrame({"city": ["a", "b", "c"], "spend_mean": [10.0, 12.5, 9.0],
                            "spend_mean_ci_low": [9.0, 11.0, 7.5], "spend_mean_ci_high": [11.0, 14.0, 10.5]})
    ax = dp.plots.estimates(with_ci, "spend_mean")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"] and ax.get_xlabel() == "city"
    (bars,) = ax.containers
    segments = bars.lines[2][0].get_segments()
    assert [tuple(s[:, 1]) for s in segments] == [(9.0, 11.0), (11.0, 14.0), (7.5, 10.5)]
    ax.figure.savefig(tmp_path / "est.png")
    plain = dp.plots.estimates(with_ci.select("city", "spend_mean"), "spend_mean")
    assert not plain.containers and list(plain.lines[0].get_ydata()) == [10.0, 12.5, 9.0]
    one_row = dp.plots.estimates(pl.DataFrame({"len": [42]}), "len")
    assert [t.get_text() for t in one_row.get_xticklabels()] == ["len"]


def test_estimates_refuse_what_is_not_a_released_column() -> None:
    out = pl.DataFrame({"city": ["a"], "n": [1]})
    with pytest.raises(dp.SchemaError, match=r"use one of \['n'\]"):
        dp.plots.estimates(out, "city")
    with pytest.raises(dp.SchemaError, match="unknown column 'x'"):
        dp.plots.estimates(out, "n", by="x")


def test_budget_plot_follows_the_ledger() -> None:
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ZCDP(1), seed=0)
    for rho in (0.125, 0.25, 0.125):
        sess.table("t").agg(dp.len()).collect(dp.ZCDP(rho))
    ax = dp.plots.budget(sess)
    assert [float(v) for v in ax.lines[0].get_ydata()] == [0, 0.125, 0.375, 0.5]
    assert ax.get_ylabel() == "ρ spent" and float(ax.lines[1].get_ydata()[0]) == 1.0


def test_privacy_curve_of_accountants_and_curves() -> None:
    rdp = acc.RDPAccountant().compose(acc.gaussian(sigma=3.0), times=20)
    ax = dp.plots.privacy_curve({"rdp": rdp, "one Gaussian": acc.gaussian(sigma=3.0)}, deltas=[1e-8, 1e-5, 1e-3])
    first, second = (list(line.get_ydata()) for line in ax.lines)
    assert first == sorted(first, reverse=True) and second[0] < first[0]       # ε falls as δ grows
    with pytest.raises(dp.SchemaError, match="deltas"):
        dp.plots.privacy_curve(rdp, deltas=[0.0])
    with pytest.raises(dp.SchemaError, match="no epsilon"):
        dp.plots.privacy_curve(object())


def test_without_matplotlib_the_error_says_what_to_install() -> None:
    code = ("import sys; sys.modules['matplotlib'] = None; sys.modules['matplotlib.pyplot'] = None\n"
            "import polars as pl, dpframe as dp\n"
            "try:\n    dp.plots.estimates(pl.DataFrame({'n': [1]}), 'n')\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'dpframe[plot]'" in out


@pytest.mark.parametrize("bad", [None, 3, (1, 2), pl.DataFrame({"a": [1]}), np.array([1.0, 2.0])],
                         ids=lambda v: type(v).__name__)
def test_plots_refuse_bad_arguments_naming_them(bad: object) -> None:
    """Each was a raw AttributeError, TypeError or Polars error (review 48)."""
    out = pl.DataFrame({"city": ["a", "b"], "n": [1, 2]})
    for argument, call in [("session", lambda: dp.plots.budget(bad)),  # type: ignore[arg-type]
                           ("session", lambda: dp.plots.spent_after_each(bad)),  # type: ignore[arg-type]
                           ("column", lambda: dp.plots.estimates(out, bad)),  # type: ignore[arg-type]
                           ("by", lambda: dp.plots.estimates(out, "n", by=bad))]:  # type: ignore[arg-type]
        if argument == "by" and bad is None:
            continue                                 # by=None: the first key column
        with pytest.raises(dp.DPFrameError) as info:
            call()
        assert info.value.argument == argument
    if bad is not None:
        with pytest.raises(dp.DPFrameError) as info:
            dp.plots.privacy_curve(acc.gaussian(1.0), deltas=bad)  # type: ignore[arg-type]
        assert info.value.argument == "deltas"


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"rows": None}, "rows"), ({"rows": 0}, "rows"), ({"rows": 2.5}, "rows"), ({"rows": True}, "rows"),
    ({"rows": (1, 2)}, "rows"), ({"rows": 10**12}, "rows"), ({"users": 0}, "users"), ({"users": "x"}, "users"),
    ({"seed": -1}, "seed"), ({"seed": "x"}, "seed"), ({"seed": np.array([1, 2])}, "seed"),
])
def test_the_visits_dataset_refuses_bad_arguments(kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(dp.ArgumentError) as info:
        dp.datasets.visits(**kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument

