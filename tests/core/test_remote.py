"""dp.Server / dp.connect: a session served to another process answers as the session does in process."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest

import dpframe as dp
from dpframe.remote import wire

KEY = secrets.token_bytes(32)
DATA = pl.DataFrame({"u": [1, 1, 2, 3, 3, 3], "g": ["a", "b", "a", "a", "b", "b"], "x": [1.0, 2, 3, 4, 5, 6]})
QUERY = "SELECT g, COUNT(*) AS n, SUM(CLAMP(x, 0, 10)) AS s FROM t GROUP BY g"


def session(total: float = 10, seed: int | None = 0) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(total), seed=seed)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Server]]:
    sess = session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        yield sess, server


def test_a_remote_release_is_the_release_in_process(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        got = remote.sql(QUERY, keys={"g": ["a", "b"]}).collect(dp.PureDP(1), ci=0.9)
    here = session().sql(QUERY, keys={"g": ["a", "b"]}).collect(dp.PureDP(1), ci=0.9)
    assert got.equals(here)
    assert set(got.columns) == {"g", "n", "n_ci_low", "n_ci_high", "s", "s_ci_low", "s_ci_high"}


def test_metadata_cost_explain_and_the_budget(served: tuple[dp.Session, dp.Server]) -> None:
    sess, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        assert remote.tables() == ["t"]
        assert remote.schema("t") == DATA.schema
        q = remote.sql(QUERY, keys={"g": ["a", "b"]})
        local = sess.sql(QUERY, keys={"g": ["a", "b"]})
        assert q.cost(dp.PureDP(0.5)) == local.cost(dp.PureDP(0.5)) == dp.PureDP(0.5)
        assert q.explain(dp.PureDP(0.5)) == str(local.explain(dp.PureDP(0.5)))
        shown = local.explain(dp.PureDP(0.5), format="json")
        assert q.explain(dp.PureDP(0.5), format="json") == json.loads(json.dumps(shown, default=str))
        assert remote.spent() == sess.spent() and remote.remaining() == dp.PureDP(10)
        q.collect(dp.PureDP(1))
        remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(0.5))
        assert remote.spent() == sess.spent() == dp.PureDP(1.5)
        assert remote.remaining() == dp.PureDP(8.5)
        assert remote.history().equals(sess.history())
        assert remote.sql("EXPLAIN " + QUERY, keys={"g": ["a", "b"]}).collect(dp.PureDP(1)).columns == ["explain"]
        assert remote.spent() == dp.PureDP(1.5)


def test_typed_keys_keep_their_type() -> None:
    from datetime import date

    frame = pl.DataFrame({"u": [1, 2, 3], "d": [date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 1)]})
    sess = dp.Session({"t": frame}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1), seed=0)
    days = [date(2024, 1, 1), date(2024, 1, 2), date(2024, 1, 3)]
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        out = remote.sql("SELECT d, COUNT(*) AS n FROM t GROUP BY d", keys={"d": days}).collect(dp.PureDP(1))
    assert out["d"].to_list() == days


def test_the_sessions_errors_arrive_as_themselves_and_nothing_is_charged(served: tuple[dp.Session, dp.Server]) -> None:
    sess, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.BudgetExceededError) as exceeded:
            remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(11))
        with pytest.raises(dp.BudgetExceededError) as here:
            sess.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(11))
        assert str(exceeded.value) == str(here.value)
        assert (exceeded.value.argument, exceeded.value.requested) == ("budget", here.value.requested)
        with pytest.raises(dp.PlanError, match="raw column") as plan:
            remote.sql("SELECT x FROM t").collect(dp.PureDP(1))
        assert plan.value.argument == "sql" and plan.value.fix
        with pytest.raises(dp.BudgetError):
            remote._request({"op": "collect", "sql": "SELECT COUNT(*) FROM t",
                             "budget": {"type": "PureDP", "epsilon": "-1"}})
        with pytest.raises(dp.PlanError, match="ci"):
            sess.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1), ci=1.5)
        with pytest.raises(dp.PlanError, match="ci"):
            remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1), ci=1.5)
        assert remote.spent() == sess.spent() and remote.remaining() == dp.PureDP(10)
        assert remote.tables() == ["t"]             # the connection survives refused requests


def test_bad_input_names_the_argument() -> None:
    sess = session()
    with pytest.raises(dp.ArgumentError, match="authkey"):
        dp.Server(sess, ("127.0.0.1", 0), authkey=b"short")
    with pytest.raises(dp.ArgumentError, match="authkey"):
        dp.Server(sess, ("127.0.0.1", 0), authkey="a string key of some length")  # type: ignore[arg-type]
    with pytest.raises(dp.ArgumentError, match="session"):
        dp.Server(DATA, ("127.0.0.1", 0), authkey=KEY)  # type: ignore[arg-type]
    with pytest.raises(dp.ArgumentError, match="address"):
        dp.Server(sess, 7070, authkey=KEY)  # type: ignore[arg-type]
    with pytest.raises(dp.ArgumentError, match="max_clients"):
        dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, max_clients=0)
    with pytest.raises(dp.ArgumentError, match="authkey"):
        dp.connect(("127.0.0.1", 1), authkey=b"")
    with pytest.raises(dp.ArgumentError, match="address"):
        dp.connect(7070, authkey=KEY)  # type: ignore[arg-type]
    for address in [(1, 2), ("127.0.0.1", "80"), ("127.0.0.1", True), ("127.0.0.1", 70000), ("127.0.0.1", -1)]:
        for call in (lambda: dp.connect(address, authkey=KEY), lambda: dp.Server(sess, address, authkey=KEY)):
            with pytest.raises(dp.ArgumentError, match="port from 0 to 65535") as info:     # (a TypeError or
                call()  # type: ignore[arg-type]                                          # OverflowError once)
            assert info.value.argument == "address"
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(dp.RemoteError, match="cannot connect"):
        dp.connect(("127.0.0.1", port), authkey=KEY)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        with pytest.raises(dp.RemoteError, match="already started"):
            server.start()
        with dp.connect(server.address, authkey=KEY) as remote:
            with pytest.raises(dp.PlanError, match="keys: expected a dict"):      # as in process
                remote.sql(QUERY, keys=["a"])  # type: ignore[arg-type]
            with pytest.raises(dp.SchemaError, match="keys"):     # as in process, when sent (checked by the session)
                remote.sql(QUERY, keys={"g": ["a", 1]}).cost(dp.PureDP(1))
            with pytest.raises(dp.BudgetError, match="budget"):            # as in process (class and text)
                remote.sql(QUERY).cost(dp.Accuracy(1, 0.9))  # type: ignore[arg-type]
            with pytest.raises(dp.PlanError, match="format"):
                remote.sql(QUERY, keys={"g": ["a"]}).explain(dp.PureDP(1), format="html")
            with pytest.raises(dp.PlanError, match="expected a SQL string"):
                remote.sql(42)  # type: ignore[arg-type]


def test_a_wrong_key_is_refused_and_the_server_goes_on(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    with pytest.raises(dp.RemoteError):
        dp.connect(server.address, authkey=secrets.token_bytes(32))
    with dp.connect(server.address, authkey=KEY) as remote:
        assert remote.tables() == ["t"]


def test_a_unix_socket(tmp_path: Path) -> None:
    path = tmp_path / "dp.sock"
    with dp.Server(session(), str(path), authkey=KEY).start() as server:
        assert server.address == str(path)
        with pytest.raises(dp.ArgumentError, match="exists"):
            dp.Server(session(), str(path), authkey=KEY)
        with dp.connect(path, authkey=KEY) as remote:
            assert remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1)).columns == ["n"]
    assert not path.exists()


def test_closing_ends_every_connection(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    remote = dp.connect(server.address, authkey=KEY)
    assert remote.tables() == ["t"]
    server.close()
    with pytest.raises(dp.RemoteError):
        remote.tables()
    assert remote.closed and server.closed and "closed" in repr(server) and "closed" in repr(remote)
    with pytest.raises(dp.RemoteError, match="closed"):
        remote.tables()


@pytest.mark.parametrize("build", [lambda remote: remote.sql("SELECT COUNT(*) AS n FROM t"),
                                   lambda remote: remote.table("t").agg(dp.len())], ids=["sql", "method chain"])
def test_clients_in_threads_share_one_budget_exactly(build: Callable[[dp.Remote], dp.RemoteQuery]) -> None:
    sess = session(total=5, seed=None)
    outcomes: list[str] = []
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        barrier = threading.Barrier(8)

        def client() -> None:
            with dp.connect(server.address, authkey=KEY) as remote:
                q = build(remote)
                barrier.wait()
                try:
                    q.collect(dp.PureDP(1))
                    outcomes.append("released")
                except dp.BudgetExceededError:
                    outcomes.append("refused")

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(outcomes) == ["refused"] * 3 + ["released"] * 5
    assert sess.spent() == dp.PureDP(5)


def test_a_server_in_another_process(tmp_path: Path) -> None:
    """The deployment the page describes: the data owner's process serves, the analyst's connects."""
    path = tmp_path / "s.sock"
    script = (
        "import sys, polars as pl, dpframe as dp\n"
        f"sess = dp.Session({{'t': pl.DataFrame({{'x': [1.0, 2.0, 3.0]}})}}, privacy_unit=dp.PrivacyUnit.row(),"
        " budget=dp.PureDP(1), seed=0)\n"
        f"server = dp.Server(sess, {str(path)!r}, authkey={KEY!r})\n"
        "print('ready', flush=True)\n"
        "import threading; threading.Thread(target=server.serve_forever, daemon=True).start()\n"
        "sys.stdin.readline(); server.close()\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "ready"
        with dp.connect(path, authkey=KEY) as remote:
            out = remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1))
            assert out.columns == ["n"] and remote.spent() == dp.PureDP(1)
    finally:
        assert owner.stdin is not None
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.wait(timeout=30)


def test_budgets_cross_exactly() -> None:
    for budget in (dp.PureDP(0.1), dp.ApproxDP(1 / 3, 1e-9), dp.ZCDP(0.25), dp.ZCDP(0.5, 1e-7)):
        assert wire.budget_from_json(wire.budget_to_json(budget)) == budget
    assert wire.budget_from_json(None) is None


def test_tls_encrypts_and_verifies_the_server(tls_certificate: tuple[Path, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    from dpframe.remote import client

    monkeypatch.setattr(client, "CONNECT_SECONDS", 1.0)

    cert, key = tls_certificate
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    with dp.Server(session(), ("127.0.0.1", 0), authkey=KEY, tls=server_side).start() as server:
        with dp.connect(server.address, authkey=KEY, tls=trusted) as remote:
            assert remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(1)).columns == ["n"]
        with pytest.raises(dp.RemoteError):              # a client without TLS gets nothing
            dp.connect(server.address, authkey=KEY)
        with pytest.raises(dp.RemoteError, match="cannot connect"):    # nor one that does not trust the certificate
            dp.connect(server.address, authkey=KEY, tls=ssl.create_default_context())
        with dp.connect(server.address, authkey=KEY, tls=trusted) as remote:
            assert remote.tables() == ["t"]
    with dp.Server(session(), ("127.0.0.1", 0), authkey=KEY).start() as plain, pytest.raises(dp.RemoteError):
        dp.connect(plain.address, authkey=KEY, tls=trusted)
    with pytest.raises(dp.ArgumentError, match="tls"):
        dp.Server(session(), ("127.0.0.1", 0), authkey=KEY, tls="cert.pem")  # type: ignore[arg-type]
    with pytest.raises(dp.ArgumentError, match="tls"):
        dp.connect("/tmp/some.sock", authkey=KEY, tls=trusted)


def test_accuracy_targets_and_diagnostics_as_in_process(served: tuple[dp.Session, dp.Server]) -> None:
    _, server = served
    aim = dp.Accuracy(half_width={"n": 4}, confidence=0.9)
    with dp.connect(server.address, authkey=KEY) as remote:
        q = remote.sql(QUERY, keys={"g": ["a", "b"]})
        local = session().sql(QUERY, keys={"g": ["a", "b"]})
        assert q.cost(accuracy=aim) == local.cost(accuracy=aim)
        assert q.explain(accuracy=aim) == str(local.explain(accuracy=aim))
        assert q.cost(dp.PureDP(1), diagnostics=True) == local.cost(dp.PureDP(1), diagnostics=True)
        got = q.collect(dp.PureDP(1), diagnostics=True)
        here = local.collect(dp.PureDP(1), diagnostics=True)
        assert isinstance(got, dp.Diagnosed)
        assert got.frame.equals(here.frame) and got.diagnostics.equals(here.diagnostics)
        assert q.collect(accuracy=aim).equals(local.collect(accuracy=aim))
        with pytest.raises(dp.PlanError, match="accuracy"):
            q.collect(accuracy=4)  # type: ignore[arg-type]
        with pytest.raises(dp.ArgumentError, match="accuracy"):
            remote._request({"op": "cost", "sql": QUERY, "budget": None,
                             "accuracy": {"half_width": True, "confidence": 0.9, "notion": None}})
        with pytest.raises(dp.DPFrameError, match="diagnostics"):
            remote._request({"op": "collect", "sql": QUERY, "budget": {"type": "PureDP", "epsilon": "1"},
                             "diagnostics": "yes"})
        assert remote.spent() == dp.PureDP(1) + local.cost(accuracy=aim)


@pytest.mark.parametrize(("sql", "budget", "kind", "rows"), [
    ("SELECT k AS key, COUNT(DISTINCT u) AS n FROM v GROUP BY k HAVING TOP_K(COUNT(DISTINCT u), 4)",
     dp.ApproxDP(8, 1e-6), "TopKPartial", 2),
    ("SELECT k AS key, COUNT(DISTINCT u) AS n FROM v GROUP BY k HAVING TOP_K(COUNT(DISTINCT u), NULL)",
     dp.ApproxDP(0.01, 1e-6), "TopKFailed", 0),
])
def test_a_short_top_k_warns_the_analyst_as_in_process(sql: str, budget: dp.Budget, kind: str, rows: int) -> None:
    import warnings

    data = pl.DataFrame([(u, "a") for u in range(300)] + [(1000 + u, "b") for u in range(250)],
                        schema=["u", "k"], orient="row")

    def short_session() -> dp.Session:
        return dp.Session({"v": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(100, 1e-3), seed=2)

    with pytest.warns(dp.TopKWarning) as here:
        local = short_session().sql(sql).collect(budget)
    with dp.Server(short_session(), ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = remote.sql(sql).collect(budget)
    assert got.equals(local) and got.height == rows
    (at,) = [w for w in caught if isinstance(w.message, dp.TopKWarning)]
    assert here[0].filename == at.filename == __file__       # warned at the analyst's line, not dpframe's
    warned, expected = at.message, here[0].message
    assert str(warned) == str(expected) and type(warned.outcome).__name__ == kind
    assert (warned.outcome.k, warned.outcome.method, warned.outcome.reason) == (
        expected.outcome.k, expected.outcome.method, expected.outcome.reason)
    if kind == "TopKPartial":
        assert warned.outcome.keys.equals(got)


def test_explain_select_with_diagnostics_is_a_frame_as_in_process(served: tuple[dp.Session, dp.Server]) -> None:
    sess, server = served
    text = "EXPLAIN SELECT COUNT(*) AS n FROM t"
    here = sess.sql(text).collect(dp.PureDP(1), diagnostics=True)
    with dp.connect(server.address, authkey=KEY) as remote:
        got = remote.sql(text).collect(dp.PureDP(1), diagnostics=True)
    assert isinstance(here, pl.DataFrame) and isinstance(got, pl.DataFrame) and got.columns == here.columns
    assert sess.history().height == 0


def test_early_refusals_are_the_in_process_errors(served: tuple[dp.Session, dp.Server]) -> None:
    """What the client refuses before sending (a budget that is not one, an accuracy that is not a dp.Accuracy,
    SQL that is not text) is refused with the class and text the same call gets in process, nothing charged."""
    sess, server = served
    calls = {
        "budget text": lambda s: s.sql(QUERY).collect("1"),
        "budget float": lambda s: s.sql(QUERY).cost(0.5),
        "budget too large": lambda s: s.sql(QUERY).collect(dp.PureDP(1e301)),
        "chain budget": lambda s: s.table("t").agg(dp.len()).explain(1),
        "accuracy": lambda s: s.sql(QUERY).collect(accuracy=4),
        "chain accuracy": lambda s: s.table("t").agg(dp.len()).collect(accuracy="5"),
        "sql": lambda s: s.sql(123),
        "blank sql": lambda s: s.sql("   ").cost(dp.PureDP(1)),
        # a tool's budget keeps the tool's own rules (not a query's 1e300 limit)
        "tool budget too large": lambda s: s.sparse_vector(threshold=1, max_positives=1, budget=dp.PureDP(1e301)),
        "tool budget text": lambda s: s.individual_filter(budget="x"),
    }
    with dp.connect(server.address, authkey=KEY) as remote:
        for name, call in calls.items():
            with pytest.raises(dp.DPFrameError) as here:
                call(sess)
            with pytest.raises(dp.DPFrameError) as there:
                call(remote)
            assert (type(there.value), str(there.value)) == (type(here.value), str(here.value)), name
    assert sess.history().height == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="elsewhere the accepting thread polls")
def test_close_returns_at_once_not_at_the_accepting_thread_s_next_poll(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """``close()`` waited for the accepting thread to see it at its next poll (0.2 s): every ``with dp.Server(...)``
    ended 0.2 s late (most of the remote tests' time). It now wakes the thread (shutting the listener down)."""
    import time

    from dpframe.remote import server as served_module

    monkeypatch.setattr(served_module, "POLL_SECONDS", 60.0)      # a poll would take a minute
    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    for address in (("127.0.0.1", 0), str(tmp_path / "s.sock")):
        server = dp.Server(sess, address, authkey=KEY).start()
        with dp.connect(server.address, authkey=KEY) as remote:
            assert remote.sql("SELECT COUNT(*) AS n FROM t").cost(dp.PureDP(0.5)) == dp.PureDP(0.5)
        started = time.monotonic()
        server.close()
        assert time.monotonic() - started < 30 and server.closed
