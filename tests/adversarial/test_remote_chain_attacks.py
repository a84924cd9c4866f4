"""Attacks on remote method chains: an analyst who writes the chain's JSON by hand, with a valid key.

The server rebuilds every value from JSON and replays the calls on its session's API. Polars' JSON reader
unpickles a Python function it finds in an expression, so a tree must be checked before Polars reads it;
only the public builder methods may be called; nothing refused is charged.
"""

from __future__ import annotations

import builtins
import json
import pickle
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import dpframe as dp
from dpframe.plan.rowlevel import check_row_level, check_tree, tree_objects
from dpframe.remote.values import unpack_expression

from .operations import CASES
from .remote import served_table

KEY = secrets.token_bytes(32)
DATA = pl.DataFrame({"u": list(range(200)), "g": ["a", "b"] * 100, "x": [float(i % 13) for i in range(200)]})
FLAG = "_dpframe_remote_pickle_ran"


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (f"import builtins; builtins.{FLAG} = True",)


# Polars' own framing of a pickled Python function in a ``name.map`` (version bytes, then the pickle).
PICKLED = list(bytes([1, 11, 7]) + pickle.dumps(_Payload(), protocol=5))
RENAME_MAP = {"RenameAlias": {"function": {"Map": PICKLED}, "expr": {"Column": "x"}}}
ANONYMOUS = {"AnonymousFunction": {"input": [{"Column": "x"}], "function": list(b"PLPYFN") + PICKLED,
                                   "options": {}}}


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Remote]]:
    with served_table(DATA, KEY) as pair:
        yield pair


def chain(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"op": "collect", "chain": {"table": "t", "steps": list(steps)},
            "budget": {"type": "PureDP", "epsilon": "1"}}


def count() -> dict[str, Any]:
    return {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}


def test_the_pickle_attack_is_real_for_this_polars() -> None:
    """Polars' reader runs the pickle: without the check below, the analyst's code would run on the server."""
    script = (f"import io, json, builtins, polars as pl\ntree = json.loads({json.dumps(json.dumps(RENAME_MAP))})\n"
              f"try:\n    pl.Expr.deserialize(io.StringIO(json.dumps(tree)), format='json')\nexcept BaseException:\n"
              f"    pass\nprint(getattr(builtins, {FLAG!r}, False))")
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert ran.stdout.strip() == "True"


@pytest.mark.parametrize("tree", [RENAME_MAP, ANONYMOUS], ids=["name.map", "map_batches"])
def test_a_pickled_function_is_never_read(served: tuple[dp.Session, dp.Remote], tree: dict[str, Any]) -> None:
    sess, remote = served
    between = {"Boolean": {"IsBetween": {"closed": "Both"}}}
    hidden = {"Function": {"input": [{"Column": "x"}, tree], "function": between}}
    placements = [
        chain({"call": "with_columns", "args": [{"$expr": tree}]}, count()),
        chain({"call": "filter", "args": [{"$expr": hidden}]}, count()),
        chain({"call": "group_by", "args": [{"$expr": tree}], "kwargs": {"keys": [1]}}, count()),
        chain({"call": "agg", "args": [{"$measure": {"kind": "sum", "expression": tree,
                                                     "bounds": {"$tuple": [0, 1]}}}]}),
        chain({"call": "agg", "args": [{"$measure": {"kind": "len", "options": [["x", {"$expr": tree}]]}}]}),
        chain({"call": "query", "args": ["agg", {"$measure": {"kind": "len"}}], "kwargs": {"n": {"$expr": tree}}}),
    ]
    for request in placements:
        with pytest.raises(dp.DPFrameError):
            remote._request(request)
    assert not getattr(builtins, FLAG, False)
    assert sess.history().height == 0 and remote.spent() == sess.spent()


def test_a_function_hidden_in_an_allowed_nodes_options_is_refused(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    for tree in [{"Function": {"input": [{"Column": "x"}], "function": {"Abs": {"Map": PICKLED}}}},
                 {"Cast": {"expr": {"Column": "x"}, "dtype": {"Literal": {"Object": "object"}},
                           "options": "NonStrict"}},
                 {"Alias": [{"Column": "x"}, {"PythonObject": PICKLED}]}]:
        with pytest.raises(dp.PlanError, match="Python objects or code"):
            remote._request(chain({"call": "with_columns", "args": [{"$expr": tree}]}, count()))
    assert not getattr(builtins, FLAG, False) and sess.history().height == 0


def test_only_public_builder_methods_can_be_called(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    for call in ("_node", "__init__", "__getattr__", "__class__", "collect", "cost", "explain", "schema",
                 "_source", "_session", "_unit"):
        with pytest.raises(dp.PlanError, match="no method"):
            remote._request(chain({"call": call}, count()))
    with pytest.raises(dp.PlanError, match="no method"):
        remote._request(chain(count(), {"call": "collect", "args": [{"$measure": {"kind": "len"}}]}))
    with pytest.raises(dp.PlanError, match="no method"):
        remote._request(chain({"call": "group_by", "args": ["g"]}, {"call": "filter", "args": [True]}))
    with pytest.raises(dp.PlanError, match="does not end in a query"):
        remote._request(chain({"call": "filter", "kwargs": {"g": "a"}}))
    assert sess.history().height == 0


@pytest.mark.parametrize("value", [
    {"$dataclass": {"module": "dpframe.budgets", "name": "PureDP", "fields": {"epsilon": 1}}},
    {"$frame": 3}, {"$series": -1}, {"$dtype": 0}, {"$fraction": "1" * 500 + "/3"}, {"$float": "1e999"},
    {"$date": "x" * 100}, {"$timedelta": [1, 2]}, {"$tuple": [1], "$dict": []}, {"$dict": [[[1], 2]]},
    {"$unknown": 1}, {"$measure": {"kind": ""}}, {"$measure": {"kind": "len", "options": [[1, 2]]}},
    {"$expr": "pl.col('x')"}, {"$expr": {"Column": "x", "Len": None}},
    {"$measure": {"kind": "len", "options": [["q", 1], ["q", {"$tuple": []}]]}},
    {"$target": {"ends": ["1e100000", None], "inside": True}}, {"$target": {"ends": [{"$float": "nan"}, None],
                                                                            "inside": True}},
    {"$target": {"ends": [None, 1], "inside": True}}, {"$target": {"ends": [1, 2], "inside": 1}},
])
def test_values_the_client_never_sends_are_refused_free(served: tuple[dp.Session, dp.Remote], value: Any) -> None:
    sess, remote = served
    with pytest.raises(dp.DPFrameError):
        remote._request(chain({"call": "filter", "args": [value]}, count()))
    assert sess.history().height == 0


def test_chains_that_are_not_chains(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    budget = {"type": "PureDP", "epsilon": "1"}
    for shape in [None, [], {"table": 1, "steps": []}, {"table": "t", "steps": {}}, {"table": "t", "steps": [1]},
                  {"table": "t", "steps": [{"call": "agg", "args": {}}]}, {"table": "t", "steps": [count()] * 300}]:
        with pytest.raises(dp.ArgumentError):
            remote._request({"op": "collect", "chain": shape, "budget": budget})
    with pytest.raises(dp.SchemaError):
        remote._request({"op": "collect", "chain": {"table": "nope", "steps": [count()]}, "budget": budget})
    assert sess.history().height == 0


def test_too_many_attached_streams_break_the_connection_only(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    with pytest.raises(dp.RemoteError):
        remote._request(chain(count()), [b"x"] * 17)
    assert remote.closed and sess.history().height == 0


def _ipc(table: pa.Table, compression: str | None = None) -> list[int]:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return list(sink.getvalue().to_pybytes())


def test_arrow_bytes_inside_an_expression_are_bounded(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    real = json.loads(pl.col("x").is_in([1.0, 2.0]).meta.serialize(format="json"))
    literal = real["Function"]["input"][1]["Literal"]["Scalar"]
    assert list(literal) == ["List"]

    def with_list(data: list[int]) -> dict[str, Any]:
        tree = json.loads(json.dumps(real))
        tree["Function"]["input"][1]["Literal"]["Scalar"]["List"] = data
        return chain({"call": "filter", "args": [{"$expr": tree}]}, count())

    ok = remote._request(with_list(literal["List"]))        # Polars' own bytes pass
    assert ok[1][0].columns == ["len"]
    many = pa.table({"x": pa.array([[0.0] * 200_000])})
    nulls = pa.table({"x": pa.nulls(10_000_000)})
    repeated = b"".join(int.to_bytes(1000, 4, "little") + b"aaaa" + bytes(8) for _ in range(10))  # 10 views, 1 string
    views = pa.table({"x": pa.Array.from_buffers(pa.string_view(), 10, [None, pa.py_buffer(repeated),
                                                                        pa.py_buffer(b"a" * 1000)])})
    extension = pa.table({"x": pa.array([1.0])}).cast(pa.schema([pa.field("x", pa.float64(), metadata={
        b"ARROW:extension:name": b"polars.object"})]))
    for data in (_ipc(many, "zstd"), _ipc(nulls), _ipc(views), _ipc(extension), [255, 255, 255, 255, 0], [256, 1]):
        with pytest.raises(dp.PlanError, match="Arrow"):
            remote._request(with_list(data))
    assert sess.history().height == 1


def test_a_refused_expression_is_refused_alike_on_neighbouring_data() -> None:
    errors = []
    for data in (DATA, DATA.head(199)):
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0)
        with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
                dp.connect(server.address, authkey=KEY) as remote:
            for tree in (RENAME_MAP, {"Agg": {"Mean": {"Column": "x"}}}):
                with pytest.raises(dp.PlanError) as refused:
                    remote._request(chain({"call": "with_columns", "args": [{"$expr": tree}]}, count()))
                errors.append(str(refused.value))
            assert sess.history().height == 0
    assert errors[:2] == errors[2:]


def test_every_expression_allowed_in_process_crosses() -> None:
    """The check before Polars reads a tree refuses nothing the in-process check allows (the fuzzer's cases)."""
    crossed = 0
    for name, case in CASES.items():
        for dtype in case.types:
            schema = pl.Schema({"c": dtype, "d": case.second or dtype})
            expr = case.build(pl.col("c"), pl.col("d"))
            try:
                check_row_level(expr, "e", schema)
            except dp.PlanError:
                continue
            tree = json.loads(expr.meta.serialize(format="json"))
            check_tree(tree, name)      # and the whole road: Arrow bytes, bytes elsewhere, Polars' reader
            assert unpack_expression(tree, name).meta.serialize() == expr.meta.serialize()
            crossed += 1
    assert crossed > 2000


def test_bytes_anywhere_but_arrow_streams_and_binary_literals_are_refused(
        served: tuple[dp.Session, dp.Remote]) -> None:
    """A pickle is bytes: under a key the name screen does not know, in an allowed node's options, it is refused
    for its shape (the key screen and the allowlist are the other two lines)."""
    sess, remote = served
    for tree in [{"Function": {"input": [{"Column": "x"}], "function": {"Abs": {"hook": PICKLED}}}},
                 {"Alias": [{"Column": "x"}, {"name_fn": PICKLED}]},
                 {"Cast": {"expr": {"Column": "x"}, "dtype": {"Literal": {"Int64": {"payload": PICKLED}}},
                           "options": "NonStrict"}}]:
        with pytest.raises(dp.PlanError, match="pickled Python function"):
            remote._request(chain({"call": "with_columns", "args": [{"$expr": tree}]}, count()))
    literal = pl.col("g").cast(pl.Binary, strict=False) == b"a long binary literal"
    binary = json.loads(literal.meta.serialize(format="json"))
    assert remote._request(chain({"call": "filter", "args": [{"$expr": binary}]}, count()))[1][0].columns == ["len"]
    assert not getattr(builtins, FLAG, False) and sess.history().height == 1


def test_expressions_that_would_hold_the_server_are_refused_early(served: tuple[dp.Session, dp.Remote]) -> None:
    """Checking an expression costs time growing with the square of its size: a sum of 1,600 small terms took
    29 s of the server's time. One tree has at most 2,000 objects, one request 10,000 (free, before planning)."""
    sess, remote = served
    wide = pl.sum_horizontal([(pl.col("x") * i + 1).abs() for i in range(200)])
    with pytest.raises(dp.PlanError, match="more than 2000 parts"):
        remote.table("t").with_columns(w=wide).agg(dp.len())            # refused in the analyst's process
    tree = json.loads(wide.meta.serialize(format="json"))
    with pytest.raises(dp.PlanError, match="more than 2000 parts"):
        remote._request(chain({"call": "with_columns", "args": [{"$expr": tree}]}, count()))
    part = json.loads(pl.sum_horizontal([(pl.col("x") * i + 1).abs() for i in range(140)]).meta.serialize(
        format="json"))
    assert 1500 < tree_objects(part) <= 2000
    started = time.monotonic()
    with pytest.raises(dp.PlanError, match="10000 parts in all"):
        remote._request(chain({"call": "with_columns", "args": [{"$expr": part}] * 8}, count()))
    assert time.monotonic() - started < 10 and sess.history().height == 0
