"""Review 45a: a remote session's options (``ci``, ``diagnostics``, ``accuracy``), multi-frame replies, the
forwarded TOP_K warning and the tagged channel, against an analyst who speaks the wire protocol by hand.

* An option's value crosses as the analyst sent it: the session's own checks refuse what they refuse in
  process (``ci=False``, ``diagnostics=None``), uncharged, and nothing stands for "left out" but the
  value the client sends for it.
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

import dpframe as dp

KEY = secrets.token_bytes(32)
COUNT = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"
SUM = "SELECT SUM(CLAMP(x, 0, 10)) AS s FROM t"
ONE = {"type": "PureDP", "epsilon": "1"}


def session(seed: int = 0, rows: int = 50) -> dp.Session:
    data = pl.DataFrame({"g": ["a", "b"] * (rows // 2), "x": [float(i % 7) for i in range(rows)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(3, 1e-5), seed=seed)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Server]]:
    sess = session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        yield sess, server


def _outcome(call: Any) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call()
    except dp.DPFrameError as e:
        return type(e).__name__, str(e)
    return "released"


@pytest.mark.parametrize("sql", [COUNT, SUM])
@pytest.mark.parametrize("options", [{"ci": False}, {"diagnostics": None}, {"ci": False, "diagnostics": None}])
def test_an_option_the_session_refuses_in_process_is_refused_remotely_free(sql: str, options: dict[str, Any]) -> None:
    """JSON ``false`` for ``ci`` and ``null`` for ``diagnostics`` are values, not "left out": in process
    both are refused before the charge, so remotely too (they were dropped, and the query charged)."""
    keys = {"g": ["a", "b"]} if "GROUP" in sql else None
    local = session()
    here = _outcome(lambda: local.sql(sql, keys=keys).collect(dp.PureDP(1), **options))
    assert here[0] == "PlanError" and local.history().height == 0
    sess = session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        q = remote.sql(sql, keys=keys)
        there = _outcome(lambda: remote._request({"op": "collect", **q._source, "budget": ONE, **options},
                                                 q._attached))
        assert there == here
        assert remote.remaining() == dp.ApproxDP(3, 1e-5)
    assert sess.history().height == 0


@pytest.mark.parametrize("sql", [SUM, "EXPLAIN SELECT COUNT(*) AS n FROM t",
                                 "SELECT g FROM t GROUP BY g HAVING TOP_K(COUNT(*), NULL, method := 'stable')"])
@pytest.mark.parametrize("form", ["xml", 3, None, ["text"]])
def test_an_explain_format_is_refused_as_in_process(served: tuple[dp.Session, dp.Server], sql: str,
                                                    form: object) -> None:
    """The server's own check of ``format`` raised an ArgumentError with its own text; in process it is a
    PlanError (``check_format``): the same class and text remotely."""
    sess, server = served
    here = _outcome(lambda: session().sql(sql).explain(dp.ApproxDP(1, 1e-6), format=form))  # type: ignore[arg-type]
    assert here[0] == "PlanError"
    with dp.connect(server.address, authkey=KEY) as remote:
        there = _outcome(lambda: remote._request({"op": "explain", "sql": sql, "format": form,
                                                  "budget": {"type": "ApproxDP", "epsilon": "1",
                                                             "delta": "1/1000000"}}))
    assert there == here
    assert sess.history().height == 0
