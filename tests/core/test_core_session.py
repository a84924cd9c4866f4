"""The Session (dpframe/session.py): table sources, validation, spent/remaining/history, seeding."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from core_testkit import HUGE, make_session

import dpframe as dp

DATA = pl.DataFrame({"u": [1, 2, 3, 4, 5], "city": ["a", "b", "a", "c", "a"], "x": [1.5, 2.0, None, 4.0, 5.0]})


def _exact_len(sess: dp.Session, name: str = "t") -> int:
    out = sess.table(name).group_by("city", keys=["a", "b", "c"]).agg(dp.len()).collect(dp.PureDP(HUGE // 10))
    return out["len"].to_list()


# ------------------------------------------------------------------------------------- table sources


@pytest.mark.parametrize("kind", ["DataFrame", "LazyFrame", "pyarrow", "parquet-str", "parquet-Path", "csv-str",
                                  "csv-Path", "PARQUET-upper"])
def test_table_sources(tmp_path: Path, kind: str) -> None:
    if kind == "DataFrame":
        source: object = DATA
    elif kind == "LazyFrame":
        source = DATA.lazy()
    elif kind == "pyarrow":
        source = DATA.to_arrow()
        assert isinstance(source, pa.Table)
    elif kind.startswith(("parquet", "PARQUET")):
        path = tmp_path / ("data.PARQUET" if "upper" in kind else "data.parquet")
        DATA.write_parquet(path)
        source = path if kind.endswith("Path") else str(path)
    else:
        path = tmp_path / "data.csv"
        DATA.write_csv(path)
        source = path if kind.endswith("Path") else str(path)
    s = dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(HUGE), seed=0)
    assert s.tables() == ["t"]
    assert s.table("t").columns == ["u", "city", "x"]
    assert s.table("t").schema["x"] == pl.Float64
    assert _exact_len(s) == [3, 1, 1]


def test_several_tables(tmp_path: Path) -> None:
    other = pl.DataFrame({"u": [1, 1, 2], "city": ["c", "c", "c"]})
    s = dp.Session({"t": DATA, "o": other.lazy()}, privacy_unit=dp.PrivacyUnit("u", max_rows=5),
                   budget=dp.PureDP(HUGE), seed=0)
    assert s.tables() == ["t", "o"]
    assert _exact_len(s, "o") == [0, 0, 3]


def test_unknown_table(tmp_path: Path) -> None:
    s = make_session(DATA)
    with pytest.raises(dp.SchemaError) as info:
        s.table("nope")
    assert info.value.argument == "name" and "'t'" in str(info.value)


@pytest.mark.parametrize("tables, argument", [
    ({"t": DATA.head(0)}, "tables"),                                   # no rows
    ({"t": pl.DataFrame()}, "tables"),                                 # no columns
    ({"t": DATA.lazy().filter(pl.lit(False))}, "tables"),              # lazily empty
    ({"t": DATA.drop("u")}, "privacy_unit"),                           # no unit column
    ({"t": DATA, "o": pl.DataFrame({"x": [1]})}, "privacy_unit"),      # second table lacks the unit column
    ({}, "tables"),
    ([("t", DATA)], "tables"),
    ({"t": {"u": [1]}}, "tables['t']"),
    ({"t": [1, 2, 3]}, "tables['t']"),
    ({"t": "/no/such/file.parquet"}, "tables['t']"),
    ({3: DATA}, "tables"),
    ({"": DATA}, "tables"),
], ids=["no-rows", "no-columns", "lazy-empty", "no-unit", "second-no-unit", "empty-mapping", "list", "dict",
        "list-table", "missing-file", "int-name", "empty-name"])
def test_bad_tables_raise_schema_error(tables: object, argument: str) -> None:
    with pytest.raises(dp.SchemaError) as info:
        dp.Session(tables, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))  # type: ignore[arg-type]
    assert info.value.argument == argument


def test_bad_files(tmp_path: Path) -> None:
    txt = tmp_path / "data.txt"
    txt.write_text("u\n1\n")
    with pytest.raises(dp.SchemaError, match="unsupported file type"):
        dp.Session({"t": txt}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"this is not parquet at all" * 10)
    with pytest.raises(dp.SchemaError) as info:
        dp.Session({"t": bad}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    assert info.value.argument == "tables['t']"     # the table named, as the guide says


@pytest.mark.parametrize("kwargs, exc, argument", [
    ({"budget": 1.0}, dp.BudgetError, "budget"),
    ({"budget": None}, dp.BudgetError, "budget"),
    ({"budget": "PureDP(1)"}, dp.BudgetError, "budget"),
    ({"privacy_unit": "u"}, dp.DPFrameError, "privacy_unit"),
    ({"privacy_unit": None}, dp.DPFrameError, "privacy_unit"),
    ({"seed": "1"}, dp.DPFrameError, "seed"),
    ({"seed": 1.5}, dp.DPFrameError, "seed"),
    ({"seed": True}, dp.DPFrameError, "seed"),
    ({"budget": dp.ZCDP(1), "accountant": "basic"}, dp.BudgetConversionError, "accountant"),
    ({"budget": dp.PureDP(1), "accountant": "zcdp"}, dp.BudgetConversionError, "accountant"),
    ({"accountant": "nope"}, dp.PluginError, "accountant"),
    ({"backend": "no_such_engine"}, dp.PluginError, "backend"),
    ({"ledger": (1, 2)}, dp.ArgumentError, "ledger"),
    ({"ledger": 3}, dp.ArgumentError, "ledger"),
    ({"ledger": b"x.db"}, dp.ArgumentError, "ledger"),
    ({"accountant": np.array(["basic", "zcdp"])}, dp.PluginError, "accountant"),
    ({"accountant": pl.Series(["basic"])}, dp.PluginError, "accountant"),
], ids=lambda v: repr(v) if not isinstance(v, dict) else "-".join(f"{k}={v[k]!r}" for k in v))
def test_bad_session_arguments(kwargs: dict, exc: type, argument: str) -> None:
    args = {"privacy_unit": dp.PrivacyUnit("u"), "budget": dp.PureDP(1), **kwargs}
    with pytest.raises(exc) as info:
        dp.Session({"t": DATA}, **args)
    assert info.value.argument == argument


def test_negative_seed_is_a_dpframe_error() -> None:
    with pytest.raises(dp.DPFrameError) as info:
        dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=-1)
    assert info.value.argument == "seed"


def test_positional_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        dp.Session({"t": DATA}, dp.PrivacyUnit("u"), dp.PureDP(1))  # type: ignore[misc]


# ---------------------------------------------------------------------------- spent / remaining / history


def test_spent_remaining_and_history() -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.PureDP(2))
    assert s.spent().epsilon == 0 and s.spent().notion == "pure"
    assert s.remaining() == dp.PureDP(2)
    h = s.history()
    assert h.height == 0
    assert h.schema == pl.Schema({"id": pl.Int64, "status": pl.String, "query": pl.String, "mechanisms": pl.String,
                                  "cost": pl.String})
    q1 = s.table("t").agg(dp.len())
    q2 = s.table("t").filter(pl.col("x") > 2).group_by("city", keys=["a"]).agg(dp.mean("x", bounds=(0, 10)))
    q1.collect(dp.PureDP(0.5))
    q2.collect(dp.PureDP(Fraction(1, 3)))
    assert s.spent() == dp.PureDP(Fraction(5, 6))
    assert s.remaining() == dp.PureDP(Fraction(7, 6))
    h = s.history()
    assert h.height == 2
    assert h["id"].to_list() == sorted(h["id"].to_list())
    assert h["status"].to_list() == ["committed", "committed"]
    assert h["cost"].to_list() == ["ε=1/2", "ε=1/3"]
    assert h["query"].to_list() == [q1.describe(), q2.describe()]
    assert h["mechanisms"].to_list() == ["aggregates", "aggregates"]
    # refused and invalid queries leave no trace
    with pytest.raises(dp.BudgetExceededError):
        q1.collect(dp.PureDP(2))
    with pytest.raises(dp.SchemaError):
        s.table("t").agg(dp.sum("nope", bounds=(0, 1))).collect(dp.PureDP(0.1))
    assert s.history().height == 2 and s.spent() == dp.PureDP(Fraction(5, 6))
    assert "spent=PureDP(epsilon=5/6)" in repr(s)


def test_approx_session_history_shows_delta() -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(3, 1e-5))
    s.table("t").group_by("city").agg(dp.len()).collect(dp.ApproxDP(1, 1e-6))
    s.table("t").agg(dp.len()).collect(dp.ApproxDP(0.5, 1e-6))            # nothing uses δ: not charged
    assert s.spent() == dp.ApproxDP(1.5, 1e-6)
    assert s.remaining() == dp.ApproxDP(1.5, Fraction(9, 10**6))
    assert s.history()["cost"].to_list() == ["ε=1, δ=1e-06", "ε=1/2, δ=0"]
    assert s.history()["mechanisms"][0] == "partition_selection, aggregates"


def test_spent_as_approx() -> None:
    s = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(3, 1e-5))
    s.table("t").agg(dp.len()).collect(dp.PureDP(0.25))
    assert s.spent_as_approx() == dp.ApproxDP(0.25, 0)
    z = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.ZCDP(1))
    z.table("t").agg(dp.len()).collect(dp.PureDP(1))                     # ρ = 1/2
    assert z.spent() == dp.ZCDP(0.5)
    assert z.spent_as_approx(1e-6) == dp.ZCDP(0.5).to_approx(1e-6)


def test_zcdp_session_remaining() -> None:
    z = make_session(DATA, unit=dp.PrivacyUnit("u"), budget=dp.ZCDP(1, 1e-6))
    z.table("t").group_by("city").agg(dp.len()).collect(dp.ZCDP(0.25, 1e-7))
    z.table("t").agg(dp.len()).collect(dp.PureDP(0.5))                    # ρ = 1/8
    assert z.spent() == dp.ZCDP(Fraction(3, 8), 1e-7)
    assert z.remaining() == dp.ZCDP(Fraction(5, 8), Fraction(9, 10**7))


# ---------------------------------------------------------------------------------------------- seeds


def _noisy_query(s: dp.Session) -> pl.DataFrame:
    return (s.table("t").group_by("city", keys=["a", "b", "c", "d"])
            .agg(dp.len(), dp.sum("x", bounds=(0, 10)), dp.mean("x", bounds=(0, 10)), dp.var("x", bounds=(0, 10)))
            .collect(dp.PureDP(0.5)))


def test_seeded_sessions_are_reproducible() -> None:
    a = [_noisy_query(make_session(DATA, seed=11)) for _ in range(2)]
    assert a[0].equals(a[1])
    b = _noisy_query(make_session(DATA, seed=12))
    assert not a[0].equals(b)
    # the second query of a session differs from the first (fresh randomness each time) ...
    s = make_session(DATA, seed=11)
    first, second = _noisy_query(s), _noisy_query(s)
    assert first.equals(a[0]) and not second.equals(first)


def test_seeded_private_key_selection_is_reproducible() -> None:
    big = pl.DataFrame({"u": list(range(300)), "city": ["a"] * 150 + ["b"] * 100 + ["c"] * 50, "x": [1.0] * 300})
    outs = []
    for _ in range(2):
        s = make_session(big, unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(5, 1e-5), seed=3)
        outs.append(s.table("t").group_by("city").agg(dp.len()).collect(dp.ApproxDP(1, 1e-6)))
    assert outs[0].equals(outs[1])


def test_explain_says_not_private_only_when_seeded() -> None:
    seeded = make_session(DATA, seed=0)
    private = make_session(DATA, seed=None)
    for s, flag in ((seeded, False), (private, True)):
        q = s.table("t").agg(dp.len())
        text = q.explain(dp.PureDP(1))
        assert ("NOT PRIVATE" in text) is (not flag)
        assert q.explain(dp.PureDP(1), format="json")["private"] is flag
        assert ("SEEDED" in repr(s)) is (not flag)
        assert s.rng.private is flag


def test_unseeded_sessions_differ() -> None:
    outs = {tuple(_noisy_query(make_session(DATA, seed=None)).row(0)) for _ in range(3)}
    assert len(outs) > 1


def test_a_closed_session_still_shows_itself() -> None:
    """``repr`` and the notebook repr read the ledger, which raised a LedgerError once the session was closed."""
    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    assert not sess.closed and "spent=" in repr(sess)
    sess.close()
    assert sess.closed and repr(sess).endswith("closed>") and "<i>closed</i>" in sess._repr_html_()
    with pytest.raises(dp.LedgerError):
        sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
