"""``dpframe query`` / ``explain`` / ``budget``: output formats, the ledger's total, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from sql_testkit import PUBLIC_CITIES, VISITS

from dpframe.cli import main


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    visits, cities = tmp_path / "visits.parquet", tmp_path / "cities.csv"
    VISITS.write_parquet(visits)
    PUBLIC_CITIES.write_csv(cities)
    return {"visits": str(visits), "cities": str(cities), "ledger": str(tmp_path / "budget.ledger"),
            "dir": str(tmp_path)}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def base(files: dict[str, str], *extra: str) -> list[str]:
    return ["--table", f"visits={files['visits']}", "--privacy-unit", "user_id", "--max-rows", "10", *extra]


def test_query_table_csv_json(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT device, COUNT(*) AS n FROM visits GROUP BY device"
    args = base(files, "--epsilon", "1", "--keys", "visits.device=android,ios,web", "--seed", "1")
    code, out, _ = run(capsys, "query", sql, *args)
    assert code == 0 and "android" in out and "spent ε=1" in out and "NOT PRIVATE" in out
    code, out, err = run(capsys, "query", sql, *args, "--format", "csv")
    assert code == 0 and out.splitlines()[0] == "device,n" and len(out.splitlines()) == 4 and "spent" in err
    code, out, _ = run(capsys, "query", sql, *args, "--format", "json")
    rows = json.loads(out)
    assert code == 0 and [r["device"] for r in rows] == ["android", "ios", "web"]


def test_ledger_keeps_the_total_and_refuses_overspending(files: dict[str, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT COUNT(*) FROM visits"
    ledger = ["--ledger", files["ledger"]]
    code, _, err = run(capsys, "query", sql, *base(files, "--epsilon", "1"), *ledger)
    assert code == 2 and "--total-epsilon" in err and len(err.strip().splitlines()) == 1
    assert not Path(files["ledger"]).exists()
    code, _, _ = run(capsys, "query", sql, *base(files, "--epsilon", "1", "--total-epsilon", "1.5"), *ledger)
    assert code == 0
    code, _, err = run(capsys, "query", sql, *base(files, "--epsilon", "1"), *ledger)
    assert code == 3 and "short by ε=1/2" in err and len(err.strip().splitlines()) == 1
    code, out, _ = run(capsys, "budget", *ledger)
    assert code == 0 and "ε=3/2" in out and "remaining   ε=1/2" in out
    code, out, _ = run(capsys, "budget", *ledger, "--format", "json")
    info = json.loads(out)
    assert info["spent"] == "ε=1" and info["queries"] == 1


def test_explain_spends_nothing(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT SUM(spend) AS s FROM visits"
    code, out, _ = run(capsys, "explain", sql, *base(files, "--epsilon", "1", "--bounds", "visits.spend=0:100",
                                                        "--ledger", files["ledger"]))
    assert code == 0 and "sum(spend, bounds=[0, 100])" in out and "backend: duckdb" in out
    assert not Path(files["ledger"]).exists()
    code, out, _ = run(capsys, "explain", sql, *base(files, "--epsilon", "1", "--bounds", "visits.spend=0:100",
                                                        "--format", "json"))
    assert code == 0 and json.loads(out)["budget"]["cost"] == "ε=1"


def test_explain_statement_through_query(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "query", "EXPLAIN SELECT COUNT(*) FROM visits", *base(files, "--epsilon", "1"))
    assert code == 0 and out.startswith("dpframe query plan")


def test_public_table_and_polars_backend(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    sql = ("SELECT c.region, COUNT(*) AS n FROM visits v JOIN cities c ON v.city = c.name "
           "GROUP BY c.region ORDER BY c.region")
    code, out, _ = run(capsys, "query", sql, *base(files, "--epsilon", "1", "--public-table",
                                                      f"cities={files['cities']}", "--backend", "polars",
                                                      "--format", "json"))
    assert code == 0
    assert [r["region"] for r in json.loads(out)] == sorted(set(PUBLIC_CITIES["region"]))


@pytest.mark.parametrize(("args", "message"), [
    (["query", "SELECT * FROM visits"], "SELECT * would release raw rows"),
    (["query", "SELECT COUNT(*) FROM read_csv('/etc/passwd')"], "table functions"),
    (["query", "SELECT SUM(spend) FROM visits"], "needs clipping bounds"),
    (["query", "SELEC 1"], "syntax error"),
    (["query", "SELECT COUNT(*) FROM nope"], "unknown table"),
    (["query", "SELECT city, COUNT(*) AS n FROM visits GROUP BY city", "--keys", "visits.city=@/no/such/file"],
     "--keys cannot read the key file '/no/such/file' (No such file or directory)"),   # (a bare OSError's text once)
])
def test_bad_input_is_one_line_exit_2(files: dict[str, str], capsys: pytest.CaptureFixture[str],
                                      args: list[str], message: str) -> None:
    code, out, err = run(capsys, *args, *base(files, "--epsilon", "1"))
    assert code == 2 and out == "" and message in err
    assert len(err.strip().splitlines()) == 1


def test_missing_arguments_are_one_line(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["query", "SELECT COUNT(*) FROM visits", "--table", f"visits={files['visits']}", "--epsilon", "1"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--privacy-unit" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "query", "SELECT COUNT(*) FROM visits", *base(files))
    assert code == 2 and "--epsilon" in err
    code, _, err = run(capsys, "budget", "--ledger", str(Path(files["dir"]) / "none.ledger"))
    assert code == 2 and "no ledger" in err


def test_subprocess_entry_point(files: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "dpframe.cli", "query",
                           "SELECT COUNT(*) AS n FROM visits WHERE age >= 18", *base(files, "--epsilon", "2"),
                           "--format", "csv"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    frame = pl.read_csv(proc.stdout.encode())
    assert frame.columns == ["n"] and frame.height == 1


def test_malformed_csv_is_one_line_exit_2(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    bad = Path(files["dir"]) / "bad.csv"
    bad.write_text('user_id,b\n1,2,3\n"x\n')
    args = ["SELECT COUNT(*) FROM visits", "--table", f"visits={bad}", "--privacy-unit", "user_id",
            "--epsilon", "1", "--ledger", files["ledger"], "--total-epsilon", "5"]
    # DuckDB (the default) reads the table when the session is created: refused before any charge.
    code, out, err = run(capsys, "query", *args)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "tables['visits']: cannot read table 'visits': ComputeError: could not parse" in err, err
    assert not Path(files["ledger"]).exists()
    # Polars scans a CSV lazily: the error surfaces when the query runs (one line too).
    code, out, err = run(capsys, "query", *args, "--backend", "polars")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_unexpected_errors_are_one_line_exit_2(files: dict[str, str], capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dpframe.sql import cli as sql_cli

    def boom(args: object, *, spend: bool) -> None:
        raise RuntimeError("engine exploded\nwith a second line")

    monkeypatch.setattr(sql_cli, "session", boom)
    code, out, err = run(capsys, "query", "SELECT COUNT(*) FROM visits", *base(files, "--epsilon", "1"))
    assert code == 2 and out == ""
    assert err.strip() == "dpframe: error: RuntimeError: engine exploded with a second line"


def test_explain_refuses_csv_format(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["explain", "SELECT COUNT(*) FROM visits", *base(files, "--epsilon", "1"), "--format", "csv"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "invalid choice: 'csv'" in err and len(err.strip().splitlines()) == 1


def test_a_short_top_k_prints_its_frame_and_a_one_line_note(files: dict[str, str],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT city FROM visits GROUP BY city HAVING TOP_K(COUNT(DISTINCT user_id), NULL)"
    code, out, err = run(capsys, "query", sql, *base(files, "--epsilon", "0.001", "--delta", "1e-7", "--seed", "1",
                                                    "--format", "csv"))
    assert code == 0 and out.splitlines() == ["city"]          # an empty frame, its header, not a traceback
    note = [line for line in err.splitlines() if line.startswith("dpframe: note: TOP_K released no key set")]
    assert len(note) == 1 and "try a fixed k, e.g. TOP_K(score, 10)" in note[0]


def test_serve_until_terminated(files: dict[str, str]) -> None:
    import secrets
    import signal

    import dpframe as dp

    key, sock = Path(files["dir"]) / "key.txt", Path(files["dir"]) / "dp.sock"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    owner = subprocess.Popen([sys.executable, "-m", "dpframe.cli", "serve", *base(files),
                              "--total-epsilon", "3", "--ledger", files["ledger"], "--address", str(sock),
                              "--authkey-file", str(key), "--pad", "0.5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().startswith(f"dpframe: serving visits on {sock}")
        with dp.connect(sock, authkey=key.read_text().strip().encode()) as remote:
            start = time.monotonic()
            out = remote.sql("SELECT device, COUNT(*) AS n FROM visits GROUP BY device",
                             keys={"device": ["android", "ios", "web"]}).collect(dp.PureDP(1))
            assert out["device"].to_list() == ["android", "ios", "web"]
            assert time.monotonic() - start >= 0.5          # --pad: the reply waited for its period
            with pytest.raises(dp.BudgetExceededError):
                remote.sql("SELECT COUNT(*) AS n FROM visits").collect(dp.PureDP(3))
    finally:
        owner.send_signal(signal.SIGTERM)
        assert owner.wait(timeout=30) == 0
    assert not sock.exists()
    proc = subprocess.run([sys.executable, "-m", "dpframe.cli", "budget", "--ledger", files["ledger"]],
                          capture_output=True, text=True, timeout=60)
    assert "spent       ε=1" in proc.stdout and "queries     1" in proc.stdout


def test_serve_bad_input_is_one_line_exit_2(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    key = Path(files["dir"]) / "key.txt"
    key.write_text("short")
    key.chmod(0o600)
    code, _, err = run(capsys, "serve", *base(files), "--total-epsilon", "1", "--address", "127.0.0.1:0",
                       "--authkey-file", str(key))
    assert code == 2 and "authkey" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run(capsys, "serve", *base(files), "--address", "127.0.0.1:0", "--authkey-file", str(key))
    assert code == 2 and "total budget" in err, err
    code, _, err = run(capsys, "serve", *base(files), "--total-epsilon", "1", "--address", "127.0.0.1:0",
                       "--authkey-file", str(key) + ".missing")
    assert code == 2 and "missing" in err, err
    key.write_text("a key long enough for the server")
    for mode in (0o644, 0o640, 0o602):
        key.chmod(mode)
        code, _, err = run(capsys, "serve", *base(files), "--total-epsilon", "1", "--address", "127.0.0.1:0",
                           "--authkey-file", str(key))
        assert code == 2 and f"chmod 600 {key}" in err and f"{mode:04o}" in err and "long enough" not in err, err
    key.chmod(0o600)
    code, _, err = run(capsys, "serve", *base(files), "--total-epsilon", "1", "--address", "127.0.0.1:0",
                       "--authkey-file", str(key), "--idle-timeout", "-1")
    assert code == 2 and "idle_timeout" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run(capsys, "serve", *base(files), "--total-epsilon", "1", "--address", "127.0.0.1:0",
                       "--authkey-file", str(key), "--pad", "-1")
    assert code == 2 and "pad" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = run(capsys, "serve", *base(files), "--total-epsilon", "1", "--address", "127.0.0.1:0",
                       "--authkey-file", str(key), "--tls-cert", str(key) + ".missing")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    code, _, err = run(capsys, "serve", *base(files), "--total-epsilon", "1", "--address", "127.0.0.1:0",
                       "--authkey-file", str(key), "--tls-key", str(key))
    assert code == 2 and "--tls-key needs --tls-cert" in err, err
