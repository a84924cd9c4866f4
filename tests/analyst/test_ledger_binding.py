"""Issue 19 item 2: a ledger records its privacy unit and tables and refuses a session that differs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import dpframe as dp
from dpframe.cli import main

DATA = pl.DataFrame({"tail": [1, 1, 2, 3], "delay": [5.0, 7.0, 1.0, 2.0]})
OTHER = pl.DataFrame({"tail": [1, 2], "x": ["a", "b"]})
AIRCRAFT = dp.PrivacyUnit("tail", max_rows=100)


def _open(path: Path, unit: dp.PrivacyUnit = AIRCRAFT, tables: dict[str, pl.DataFrame] | None = None) -> dp.Session:
    return dp.Session(tables or {"flights": DATA}, privacy_unit=unit, budget=dp.PureDP(3), ledger=path, seed=0)


def test_a_ledger_refuses_another_privacy_unit(tmp_path: Path) -> None:
    path = tmp_path / "b.ledger"
    with _open(path) as sess:
        sess.table("flights").agg(dp.len()).collect(dp.PureDP(1))
    for unit in (dp.PrivacyUnit.row(), dp.PrivacyUnit("tail", max_rows=10),
                 dp.PrivacyUnit("tail", max_rows=100, max_groups=2)):
        with pytest.raises(dp.LedgerError, match=r"PrivacyUnit\('tail', max_rows=100\)") as err:
            _open(path, unit)
        assert err.value.argument == "ledger" and "dpframe budget" in str(err.value)
    with _open(path) as sess:            # the original unit still opens it, with its spending
        assert sess.spent() == dp.PureDP(1)


def test_a_ledger_refuses_other_tables(tmp_path: Path) -> None:
    path = tmp_path / "b.ledger"
    _open(path).close()
    with pytest.raises(dp.LedgerError, match=r"tables \['flights'\] are missing; tables \['other'\] are new"):
        _open(path, tables={"other": OTHER})
    with pytest.raises(dp.LedgerError, match=r"tables \['flights'\] have another schema"):
        _open(path, tables={"flights": DATA.with_columns(pl.col("delay").cast(pl.Int64))})
    with pytest.raises(dp.LedgerError, match=r"tables \['other'\] are new"):
        _open(path, tables={"flights": DATA, "other": OTHER})
    _open(path, tables={"flights": DATA.reverse()}).close()     # same names and schema: the same tables


def test_a_ledger_without_the_record_adopts_the_first_session(tmp_path: Path) -> None:
    path = tmp_path / "old.ledger"
    _open(path).close()
    db = sqlite3.connect(path)
    db.execute("DELETE FROM meta WHERE key IN ('privacy_unit', 'tables')")    # as written by an older dpframe
    db.commit()
    db.close()
    _open(path, dp.PrivacyUnit.row()).close()           # adopted
    with pytest.raises(dp.LedgerError, match=r"PrivacyUnit\.row\(\)"):
        _open(path)


def test_a_refused_session_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "b.ledger"
    _open(path).close()
    before = path.read_bytes()
    with pytest.raises(dp.LedgerError):
        dp.Session({"flights": DATA}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(3), ledger=path)
    assert path.read_bytes() == before


def test_the_cli_shows_and_enforces_the_binding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "flights.parquet"
    DATA.write_parquet(table)
    ledger = str(tmp_path / "b.ledger")
    base = ["SELECT COUNT(*) AS n FROM flights", "--table", f"flights={table}", "--epsilon", "1",
            "--ledger", ledger]
    assert main(["query", *base, "--privacy-unit", "tail", "--max-rows", "100", "--total-epsilon", "3"]) == 0
    capsys.readouterr()
    assert main(["query", *base, "--row-privacy"]) == 2
    err = capsys.readouterr().err
    assert "PrivacyUnit('tail', max_rows=100)" in err and len(err.strip().splitlines()) == 1
    assert main(["budget", "--ledger", ledger, "--format", "json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["unit"] == "PrivacyUnit('tail', max_rows=100)" and info["tables"].startswith("tables 'flights'")
    assert info["spent"] == "ε=1"
