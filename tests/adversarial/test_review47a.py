"""Review 47a: the remote server against an analyst who controls the client side completely.

The analyst sends any JSON (``remote._request``, the client's raw request: a request the client would never build)
and catches every error; what they see must be what the session charged for, and the server's stated bounds on one
request must hold however its parts are nested.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.plan.rowlevel import tree_objects
from dpframe.remote.values import REQUEST_OBJECTS, expression_tree

KEY = secrets.token_bytes(32)


@contextmanager
def served(sess: dp.Session, **options: Any) -> Iterator[dp.Server]:
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, **options).start() as server:
        yield server


def _wide_sum(terms: int) -> pl.Expr:
    """A sum of ``terms`` products as a balanced tree (shallow enough for Polars' JSON reader)."""
    parts = [pl.col("x") * i for i in range(terms)]
    while len(parts) > 1:
        parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


def _chain(expressions: int) -> dict[str, Any]:
    """A remote count after ``expressions`` derived columns, each a sum of 150 terms (about 1,200 JSON objects)."""
    steps = [{"call": "with_columns", "args": [{"$expr": expression_tree(_wide_sum(150).alias(f"y{i}"), "exprs")}]}
             for i in range(expressions)]
    return {"chain": {"table": "t", "steps": [*steps, {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}}


@pytest.mark.parametrize("op", ["gated_release", "run_until"])
def test_one_request_s_expressions_are_bounded_together_across_its_queries(op: str) -> None:
    """REQUEST_OBJECTS bounds the expressions of one request in all (docs/remote.md, Limits).

    A request that carries queries as arguments (a gated release's query and gate, ``run_until``'s steps, a tool's
    call) replayed each chain with a count of its own: two chains of 7,200 objects passed, and so would as many as
    64 MiB hold (each chain under the bound, the request many times over it).
    """
    per_chain = 6
    assert tree_objects(_chain(1)["chain"]["steps"][0]["args"][0]["$expr"]) * per_chain < REQUEST_OBJECTS
    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(1), seed=0)
    budget = {"$budget": {"type": "PureDP", "epsilon": "1/4"}}
    request = {"op": op, "args": [{"$query": _chain(per_chain)}, budget, {"$query": _chain(per_chain)}, 1, budget]} \
        if op == "gated_release" else {"op": op, "args": [[{"$query": _chain(per_chain)}] * 2, budget]}
    with served(sess) as server, dp.connect(server.address, authkey=KEY) as remote:
        remote.table("t").with_columns(  # one chain under the bound is served
            *[_wide_sum(150).alias(f"y{i}") for i in range(per_chain)]).agg(dp.len()).cost(dp.PureDP(0.25))
        with pytest.raises(dp.PlanError, match=f"more than {REQUEST_OBJECTS} parts in all"):
            remote._request(request, (), lambda results: True)
    assert sess.history().height == 0


def test_a_sql_post_processing_failure_brings_its_charged_release_to_the_remote_analyst() -> None:
    """A post-processing step that fails only on the released values fails after the charge; in process the
    error's ``.released`` holds the released frame (docs/sql.md), and its text says so. Through a server the error
    arrived with the same text but no ``.released``: the charged release was lost."""
    sess = dp.Session({"t": pl.DataFrame({"x": [1] * 70_000})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(2), seed=0, backend="duckdb")
    query = "SELECT CAST(COUNT(*) AS USMALLINT) AS n FROM t"        # passes on the stand-ins 1 and 1000
    with pytest.raises(dp.DPFrameError, match="post-processing") as here:
        sess.sql(query).collect(dp.PureDP(0.5))
    with served(sess) as server, dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.DPFrameError, match="post-processing") as there:
            remote.sql(query).collect(dp.PureDP(0.5))
        assert remote.tables() == sess.tables()            # the connection goes on
    released = getattr(there.value, "released", None)
    assert isinstance(released, pl.DataFrame)
    assert released.schema == here.value.released.schema and released.height == 1      # type: ignore[attr-defined]
    assert released.item() > 65_535 and sess.history()["status"].to_list() == ["committed"] * 2


def test_error_texts_do_not_carry_the_server_s_memory_addresses() -> None:
    """An argument of the wrong type is named in the error by its ``repr``: a Polars expression's says where it
    lies in memory (``<Expr ['col("s")'] at 0x7F8D1614BE50>``). In process that is the analyst's own object; sent
    back by a server it is an address in the data owner's process, and where a fresh object lands there depends
    on what the process allocated before (its private work too). A server's error texts leave addresses out."""
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0], "s": ["a", "b"]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(1), seed=0)
    expr = {"$expr": {"Column": "s"}}
    requests = [{"op": "open", "tool": "sparse_vector", "kwargs": {"threshold": 1, "max_positives": expr,
                                                                   "budget": {"$budget": {"type": "PureDP",
                                                                                          "epsilon": "1/10"}}}},
                {"op": "cost", "chain": {"table": "t", "steps": [{"call": "bounds", "args": [expr]}]},
                 "budget": {"type": "PureDP", "epsilon": "1/10"}}]
    with served(sess) as server, dp.connect(server.address, authkey=KEY) as remote:
        for request in requests:
            with pytest.raises(dp.DPFrameError) as raised:
                remote._request(request)
            assert "col(\"s\")" in str(raised.value) and " at 0x" not in str(raised.value)
    assert sess.history().height == 0


def test_a_released_object_s_repr_crosses_without_memory_addresses() -> None:
    """A family's result of no type dpframe knows crosses as its ``repr``; Python's default one names the object's
    address in the data owner's process (``<Result object at 0x7f...>``), left out as in error texts."""
    from dpframe.remote.values import pack_result

    class Result:
        pass

    shown = pack_result(Result(), [])["$object"]["repr"]
    assert shown.startswith("<") and "Result object" in shown and " at 0x" not in shown


def _in_list(n: int) -> str:
    return "SELECT COUNT(*) AS n FROM t WHERE x IN (" + ",".join(str(i) for i in range(n)) + ")"


def test_sql_sent_to_a_server_is_bounded_like_a_chain_s_expressions() -> None:
    """A method chain's expressions are capped (2,000 JSON objects each, 10,000 a request) because checking them
    takes time growing faster than their size, time one analyst would take from every other. SQL had no cap: an
    ``IN`` list of 4,000 numbers (19 KB) took 19 s to build, of 16,000 (90 KB) more than 4 minutes, and a request
    holds 64 MiB. A server refuses SQL whose tree has more than ``SQL_OBJECTS`` objects, or whose queries in one
    request have more than ``REQUEST_OBJECTS`` with the expressions, free and before building it."""
    from dpframe.remote.server import SQL_OBJECTS

    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(1), seed=0)
    budget = {"$budget": {"type": "PureDP", "epsilon": "1/4"}}
    built: list[int] = []     # the length of each SQL text the server built (wall time was load-dependent: 10 s)
    session_sql = dp.Session.sql

    def counted(self: dp.Session, query: str, **options: Any) -> Any:
        built.append(len(query))
        return session_sql(self, query, **options)

    with served(sess) as server, dp.connect(server.address, authkey=KEY) as remote, \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(dp.Session, "sql", counted)
        assert remote.sql(_in_list(1200)).cost(dp.PureDP(0.25)) == dp.PureDP(0.25)      # 2,409 objects, served
        assert built == [len(_in_list(1200))]
        with pytest.raises(dp.PlanError, match=f"more than {SQL_OBJECTS} parts"):
            remote.sql(_in_list(16_000)).cost(dp.PureDP(0.25))
        with pytest.raises(dp.PlanError, match=f"more than {REQUEST_OBJECTS} parts in all"):
            remote._request({"op": "run_until", "args": [[{"$query": {"sql": _in_list(1200)}}] * 5,
                                                         budget]}, (), lambda results: True)
        # the query over SQL_OBJECTS was never built; of the request's five, the four within REQUEST_OBJECTS were
        assert built == [len(_in_list(1200))] * 5
    assert sess.history().height == 0


def test_a_query_nested_too_deep_for_the_check_is_refused_as_a_dpframe_error() -> None:
    """An expression's check reads its JSON tree with Python's reader, which recurses: a tree nested past the
    recursion limit raised a raw ``RecursionError`` from the API in process (every refusal is a dpframe error), and
    a server answered only "the server failed this request (RecursionError)". ``x IN (0, ..., 499)`` in SQL, a
    chain of 500 ``or``s, failed so; now it is a query the DuckDB backend runs, as other SQL without a Polars
    equivalent, and a method chain's expression so deep a ``PlanError``, free."""
    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(1), seed=0)
    deep = pl.col("x")
    for _ in range(600):
        deep = deep + 1
    with pytest.raises(dp.PlanError, match="nested too deep"):
        sess.table("t").with_columns(y=deep).agg(dp.len())
    assert sess.sql(_in_list(500)).cost(dp.PureDP(0.25)) == dp.PureDP(0.25)
    with served(sess) as server, dp.connect(server.address, authkey=KEY) as remote:
        assert remote.sql(_in_list(500)).cost(dp.PureDP(0.25)) == dp.PureDP(0.25)
    assert sess.history().height == 0


@pytest.mark.parametrize("where", [" OR ".join(f"x = {i}" for i in range(400)),
                                   "x + " + " + ".join(f"abs(x - {i})" for i in range(100)) + " > 0",
                                   "x + " + " + ".join(f"abs(x - {i})" for i in range(400)) + " > 0"],
                         ids=["400 ors", "100 terms", "400 terms"])
def test_sql_nested_too_deep_to_build_is_refused_as_a_dpframe_error(where: str) -> None:
    """Long chains of operators nest the parsed tree deeply: building the query raised a raw ``RecursionError``
    (Python's JSON reader, or the type check's walk) or DuckDB's ``SerializationException`` (its JSON writer stops
    at 256 levels) from ``sess.sql`` in process, and a server answered only "the server failed this request"."""
    sess = dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(1), seed=0)
    query = f"SELECT COUNT(*) AS n FROM t WHERE {where}"
    with pytest.raises(dp.PlanError) as here:
        sess.sql(query).cost(dp.PureDP(0.25))
    with served(sess) as server, dp.connect(server.address, authkey=KEY) as remote:
        with pytest.raises(dp.PlanError) as there:
            remote.sql(query).cost(dp.PureDP(0.25))
    assert str(there.value) == str(here.value) and sess.history().height == 0
