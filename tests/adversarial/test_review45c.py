"""Review 45c: an analyst who writes remote requests by hand, against the server's process and budget.

Each attack is one request (or a few) a client with a valid key can send; what must hold: the server
process lives and answers, nothing is charged for a refused request, and no request holds the server
for long.
"""

from __future__ import annotations

import json
import resource
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.errors import ArgumentError
from dpframe.plan.rowlevel import check_tree
from dpframe.remote.values import Unpacker

from .remote import served_table

KEY = secrets.token_bytes(32)
DATA = pl.DataFrame({"u": list(range(200)), "s": ["a,b", "c"] * 100, "x": [float(i % 13) for i in range(200)]})
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Remote]]:
    with served_table(DATA, KEY) as pair:
        yield pair


def _split_exact(n: int) -> dict[str, Any]:
    return {"Alias": [{"Function": {"input": [{"Column": "s"}, {"Literal": {"Scalar": {"String": ","}}}],
                                    "function": {"StringExpr": {"SplitExact": {"n": n, "inclusive": False}}}}},
                      "parts"]}


def _split_n(n: int) -> dict[str, Any]:
    return {"Alias": [{"Function": {"input": [{"Column": "s"}, {"Literal": {"Scalar": {"String": ","}}}],
                                    "function": {"StringExpr": {"SplitN": n}}}}, "parts"]}


def _limit_memory() -> None:   # the child aborts at once on a huge allocation instead of swapping the machine
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def _null_as_array(width: int) -> dict[str, Any]:
    return {"Alias": [{"Cast": {"expr": {"Literal": {"Scalar": {"Null": "Null"}}}, "options": "NonStrict",
                                "dtype": {"Literal": {"Array": [{"List": "Int64"}, width]}}}}, "z"]}


@pytest.mark.parametrize("tree", [_split_exact(10**12), _split_n(10**12), _null_as_array(10**12)],
                         ids=["split_exact", "splitn", "array_width"])
def test_a_huge_split_count_is_refused_before_polars_plans_it(tree: dict[str, Any]) -> None:
    """split_exact(n) types its output as a struct of n + 1 fields: planning it allocated them all.

    The server's replay computed the schema of the analyst's expression before its size limits ran, and
    Polars aborted the process (an allocation failure is not an exception): one request took the server
    down. Now the count is refused first, in the tree check and in the API's own check. Likewise a null
    cast to ``pl.Array(pl.List(pl.Int64), 10**12)``: the probe of the cast allocated its 10**12 offsets.
    """
    chain = {"table": "t", "steps": [{"call": "with_columns", "args": [{"$expr": tree}]},
                                     {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}
    script = ("import json, polars as pl, dpframe as dp\nfrom dpframe.remote.replay import replay\n"
              f"data = pl.DataFrame({{'u': [1, 2], 's': ['a,b', 'c']}})\n"
              "sess = dp.Session({'t': data}, privacy_unit=dp.PrivacyUnit('u'), budget=dp.PureDP(1), seed=0)\n"
              "try:\n"
              f"    replay(sess, json.loads({json.dumps(json.dumps(chain))}), [])\n"
              "    print('built')\n"
              "except dp.DPFrameError as e:\n"
              "    print(type(e).__name__, e)\n")
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'plugins'}", "PYTHONDONTWRITEBYTECODE": "1", "RUST_BACKTRACE": "0"}
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                         preexec_fn=_limit_memory)
    assert ran.returncode == 0, ran.stderr[-500:]
    assert ran.stdout.startswith("PlanError") and "10,000" in ran.stdout
    with pytest.raises(dp.PlanError, match="10,000"):
        check_tree(tree, "exprs")


def test_a_split_count_within_the_limit_still_crosses(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    q = remote.table("t").with_columns(pl.col("s").str.split_exact(",", 2).alias("p")).agg(dp.len())
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    wide = pl.lit(None).cast(pl.Array(pl.Array(pl.Float64, 100), 100), strict=False).alias("a")
    assert remote.table("t").with_columns(wide).agg(dp.len()).cost(dp.PureDP(1)) == dp.PureDP(1)
    with pytest.raises(dp.PlanError, match="10,000"):
        sess.table("t").with_columns(pl.lit(None).cast(pl.Array(pl.Array(pl.Int8, 101), 100), strict=False))
    with pytest.raises(dp.PlanError, match="10,000"):
        sess.table("t").with_columns(pl.col("s").str.split_exact(",", 10_001).alias("p"))


@pytest.mark.parametrize("end", ["1e400000", {"$decimal": "1e400000"}, "7", True],
                         ids=["text", "decimal", "small_text", "bool"])
def test_a_targets_end_is_a_number_the_client_sends(end: Any, peak_memory: Any) -> None:
    """``Fraction("1e999999999")`` computes 10**999999999 holding the GIL: every connection stopped for hours.

    A target's ends cross as numbers (``$fraction``, bounded to 400 digits; ints; floats); text or a
    decimal with a huge exponent was turned into a Fraction there. Here with an exponent small enough that
    the old code finished (in about a second): it must be refused as a value the client never sends, before any
    conversion: the refusal's peak memory (a few kB) is far below 10**400000's 166 kB (a measure of the work that
    does not depend on the machine's load, as its time did).
    """
    target = {"$target": {"ends": [end, None], "inside": True}}
    with pytest.raises(ArgumentError, match="does not send"):
        Unpacker([]).unpack(target, "when")
    assert peak_memory(lambda: Unpacker([]).unpack(target, "when")) < 60_000


def test_a_huge_decimal_exponent_is_refused(served: tuple[dp.Session, dp.Remote]) -> None:
    """A decimal's exponent is bounded like a fraction's digits: ``Decimal("1e999999999")`` is 12 characters."""
    with pytest.raises(ArgumentError, match="does not send"):
        Unpacker([]).unpack({"$decimal": "1e999999999"}, "bounds")
    with pytest.raises(ArgumentError, match="does not send"):
        Unpacker([]).unpack({"$decimal": "1e-999999999"}, "bounds")
    from decimal import Decimal
    assert Unpacker([]).unpack({"$decimal": "123.456e10"}, "bounds") == Decimal("123.456e10")


def test_target_ends_the_client_sends_still_cross(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    for target in (dp.above(3), dp.between(0.5, 10**300), dp.outside(-1, 2.25)):
        packed = {"$target": {"ends": [{"$fraction": f"{e.numerator}/{e.denominator}"} if e is not None else None
                                       for e in (target.lower, target.upper)], "inside": target.inside}}
        assert Unpacker([]).unpack(packed, "when") == target
    assert Unpacker([]).unpack({"$target": {"ends": [3, 4.5], "inside": False}}, "when") == dp.outside(3, 4.5)


def _zstd_stream(values: list[str]) -> list[int]:
    """A small, zstd-compressed Arrow stream: a stand-in for a bomb (its bodies could inflate to gigabytes)."""
    import io

    import pyarrow as pa
    sink = io.BytesIO()
    table = pa.table({"": pa.array(values, pa.large_string())})
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table)
    return list(sink.getvalue())


def _enum_literal(categories: list[int]) -> dict[str, Any]:
    return {"Literal": {"Scalar": {"Enum": {"value": 0, "categories": categories}}}}


def _array_literal(values: list[int], width: int) -> dict[str, Any]:
    return {"Literal": {"Scalar": {"Array": [values, width]}}}


@pytest.mark.parametrize("tree", [_enum_literal(_zstd_stream(["x" * 5000, "y"])),
                                  _array_literal(_zstd_stream(["x" * 5000]), 1)], ids=["enum", "array"])
def test_arrow_bytes_of_an_enum_or_array_literal_are_bounded(served: tuple[dp.Session, dp.Remote],
                                                              tree: dict[str, Any]) -> None:
    """An Enum literal holds its categories, and an Array literal its values, as Arrow bytes too.

    The bytes check looked under ``Series``/``List``/``Array``/``Struct``/``strings`` keys holding a plain
    list of bytes: an Enum value's ``categories`` and an Array value's ``[bytes, width]`` were read
    unchecked, compressed included (a few kilobytes that Polars inflated to gigabytes on the server).
    """
    from dpframe.remote.values import unpack_expression
    with pytest.raises(dp.PlanError, match="Arrow bytes"):
        unpack_expression(tree, "exprs")
    sess, remote = served
    message = {"op": "cost", "chain": {"table": "t", "steps": [
        {"call": "with_columns", "args": [{"$expr": {"Alias": [tree, "lit"]}}]},
        {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}, "budget": {"type": "PureDP", "epsilon": "1"}}
    with pytest.raises(dp.PlanError, match="Arrow bytes"):
        remote._request(message)
    assert sess.history().height == 0


def test_enum_and_array_literals_built_by_polars_still_cross(served: tuple[dp.Session, dp.Remote]) -> None:
    from dpframe.remote.values import expression_tree, unpack_expression
    for expr in (pl.lit("a", dtype=pl.Enum(["a", "b"])), pl.lit([1, 2], dtype=pl.Array(pl.Int64, 2)),
                 pl.col("s").cast(pl.Enum(["a,b", "c"]), strict=False),
                 pl.col("s").replace(pl.Series(["c"]), pl.Series(["d"]))):
        back = unpack_expression(expression_tree(expr, "exprs"), "exprs")
        assert back.meta.serialize() == expr.meta.serialize()
    sess, remote = served
    kind = pl.Enum(["a,b", "c"])
    q = remote.table("t").filter(pl.col("s").cast(kind, strict=False) == pl.lit("c", dtype=kind))
    assert q.agg(dp.len()).cost(dp.PureDP(1)) == dp.PureDP(1)


def test_string_views_that_repeat_their_bytes_are_refused() -> None:
    """Polars' strings travel as Arrow string views; a view may point at any bytes, so many views of one long
    string stand for far more than the bytes sent. What they stand for is bounded by the bytes received."""
    import io

    import numpy as np
    import pyarrow as pa

    from dpframe.remote.values import unpack_expression
    length, count = 2000, 2000
    views = np.zeros((count, 4), dtype=np.int32)
    views[:, 0] = length                                                   # length; then prefix, buffer 0, offset 0
    views[:, 1] = np.frombuffer(b"xxxx", dtype=np.int32)[0]
    array = pa.Array.from_buffers(pa.string_view(), count, [None, pa.py_buffer(views.tobytes()),
                                                            pa.py_buffer(b"x" * length)])
    array.validate(full=True)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, pa.schema([pa.field("", pa.string_view())])) as writer:
        writer.write_table(pa.table({"": array}))
    assert len(sink.getvalue()) * 20 < length * count
    tree = json.loads(pl.col("s").replace(["a"], ["b"]).meta.serialize(format="json"))   # a Series literal's place
    tree["Function"]["input"][1]["Literal"]["Series"] = list(sink.getvalue())
    with pytest.raises(dp.PlanError, match="more than they hold"):
        unpack_expression(tree, "exprs")


def test_closed_tools_do_not_count_against_the_open_limit(served: tuple[dp.Session, dp.Remote]) -> None:
    """MAX_OPEN bounds the tools a connection holds *open*; every tool closed stayed counted, so a long-lived
    connection could open no 65th tool (one at a time, each closed) and had to reconnect."""
    from dpframe.remote.tools import MAX_OPEN
    sess, remote = served
    for _ in range(MAX_OPEN + 1):
        with remote.sparse_vector(threshold=10_000, max_positives=1, budget=dp.PureDP(0.01)) as sv:
            assert sv.test(remote.table("t").agg(dp.len())) is False
    assert sv.closed and sv.answers == (False,)           # the last one still reads after its block
    sessions = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ZCDP(1), seed=0)
    with dp.Server(sessions, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as other:
        filters = [other.individual_filter(budget=dp.ZCDP(0.001)) for _ in range(MAX_OPEN)]
        assert not filters[-1].closed
        with pytest.raises(dp.ArgumentError, match="open on this connection"):
            other.individual_filter(budget=dp.ZCDP(0.001))    # an individual filter stays open: still bounded


FLAG = "_dpframe_review45c_pickle_ran"


class _Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (f"import builtins; builtins.{FLAG} = True",)


def _pickled() -> list[int]:
    import pickle
    return list(bytes([1, 11, 7]) + pickle.dumps(_Payload(), protocol=5))   # Polars' framing, then the pickle


def _callbacks() -> dict[str, dict[str, Any]]:
    """Polars' nodes that carry a pickled Python callback under keys no name screen matched (as Polars writes them)."""
    x, zero, code = {"Column": "x"}, {"Literal": {"Dyn": {"Int": 0}}}, _pickled()
    options = {"callback": code, "returns_scalar": False, "return_dtype": None}
    return {
        "fold": {"Function": {"input": [zero, x], "function": {"FoldHorizontal": options}}},
        "reduce": {"Function": {"input": [x], "function": {"ReduceHorizontal": options}}},
        "cum_fold": {"Function": {"input": [zero, x], "function": {"CumFoldHorizontal": {**options,
                                                                                        "include_init": False}}}},
        "cum_reduce": {"Function": {"input": [x], "function": {"CumReduceHorizontal": options}}},
        "map_fields": {"Function": {"input": [x], "function": {"StructExpr": {"MapFieldNames": code}}}},
        "pipe_with_dtype": {"PipeWithDtype": {"input": [x], "callback": code}},
    }


def _in_a_type(hidden: dict[str, Any]) -> dict[str, Any]:
    """``hidden`` as the type of an allowed ``str.strptime``: a type computed from an expression (``pl.dtype_of``)."""
    strptime = {"Strptime": [{"OfExpr": hidden}, {"format": "%Y", "strict": False, "exact": True, "cache": True}]}
    return {"Function": {"input": [{"Column": "s"}, {"Literal": {"Scalar": {"String": "null"}}}],
                         "function": {"StringExpr": strptime}}}


@pytest.mark.parametrize("name", list(_callbacks()))
def test_a_callback_hidden_in_a_computed_type_is_never_read(served: tuple[dp.Session, dp.Remote], name: str) -> None:
    """The tree check walks expression positions; a function's options were screened by key names only.

    A type in a function's options may be computed from an expression (``{"OfExpr": expr}``), and Polars'
    fold/reduce, ``name.map_fields`` and ``pipe_with_dtype`` nodes carry a pickled Python function under
    ``callback`` (or ``MapFieldNames``): hidden there, in ``str.strptime``'s type, the tree passed the
    check, and reading it ran the analyst's code in the server (this test's flag was set).
    """
    import builtins
    sess, remote = served
    tree = _in_a_type(_callbacks()[name])
    message = {"op": "cost", "chain": {"table": "t", "steps": [
        {"call": "with_columns", "args": [{"$expr": {"Alias": [tree, "d"]}}]},
        {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}, "budget": {"type": "PureDP", "epsilon": "1"}}
    try:
        with pytest.raises(dp.PlanError, match="Python objects or code"):
            remote._request(message)
        with pytest.raises(dp.PlanError):
            check_tree(_callbacks()[name], "exprs")            # not hidden: refused as well
        assert not getattr(builtins, FLAG, False)
    finally:
        if hasattr(builtins, FLAG):
            delattr(builtins, FLAG)
    assert sess.history().height == 0


def test_an_attached_frame_is_read_once_per_request(served: tuple[dp.Session, dp.Remote]) -> None:
    """One attached stream named many times became that many frames in the server (5 KB of JSON and a 2 MB
    stream grew it by 1.2 GB): each stream is read once; the client attaches one per value it sends."""
    from dpframe.remote.wire import frame_bytes
    sess, remote = served
    keys = frame_bytes(pl.DataFrame({"s": [["a,b", "c"]]}))
    twice = {"op": "cost", "budget": {"type": "PureDP", "epsilon": "1"}, "chain": {"table": "t", "steps": [
        {"call": "group_by", "args": ["s"], "kwargs": {"keys": {"$tuple": [{"$series": 0}, {"$series": 0}]}}},
        {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}}
    with pytest.raises(dp.ArgumentError, match="used twice"):
        remote._request(twice, [keys])
    sql = {"sql": "SELECT s, COUNT(*) AS n FROM t GROUP BY s", "keys": 0}
    sv = remote.sparse_vector(threshold=10_000, max_positives=1, budget=dp.PureDP(1))
    with pytest.raises(dp.ArgumentError, match="used twice"):
        remote._request({"op": "use", "handle": 1, "call": "test", "args": [{"$query": sql}, {"$query": sql}]},
                        [frame_bytes(pl.DataFrame({"s": [["a,b", "c"]]}))])
    sv.close()
    q = remote.table("t").group_by("s", keys=pl.Series("s", ["a,b", "c"])).agg(dp.len())   # once each: as before
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    assert remote.sql("SELECT s, COUNT(*) AS n FROM t GROUP BY s", keys={"s": ["a,b", "c"]}).cost(dp.PureDP(1)) \
        == dp.PureDP(1)
    assert sess.history().height == 1      # the sparse vector's reservation only
