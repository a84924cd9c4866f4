"""Review 55i: the public surface swept for exact data, writable state and unsanitised logs.

Each test is one attack; those that found something say so in their docstring (``Found:``). The sweep is
table-driven (:data:`SURFACE`): every public name of an object an analyst gets from a session must be classified
there, so a new attribute or method fails the sweep until someone has looked at what it returns.
"""

from __future__ import annotations

import copy
import inspect
import io
import logging
import pickle
import secrets
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import polars as pl
import pytest

import dpframe as dp
from dpframe.sealed import ReadOnlyKeys

KEY = secrets.token_bytes(32)
ROWS = 7919
SECRET_KEY = "SECRETKEY"
SECRET_MAX = 987654321.5
CANARIES = (SECRET_KEY, str(ROWS), "987654321")
"""What the private table holds that no public name may show: a key, its row count, its maximum."""


def _session() -> dp.Session:
    data = pl.DataFrame({"g": [SECRET_KEY] * ROWS, "x": [0.5] * (ROWS - 1) + [SECRET_MAX]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10))


# -- 1. the sweep ----------------------------------------------------------------------------------------------------

SURFACE: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # class name: (names read here — properties, and methods that spend nothing, called with no argument (those of
    #              PRICED with a budget, which they price and do not charge);
    #              names not read — methods that take arguments, charge, or close)
    "Session": (frozenset({"accountant", "backend_name", "closed", "plan_context", "plugins", "privacy_unit", "rng",
                           "history", "remaining", "spent", "spent_as_approx", "spent_report", "tables"}),
                frozenset({"close", "individual_filter", "sparse_vector", "sql", "table", "target_charging"})),
    "Frame": (frozenset({"columns", "dtypes", "schema", "width", "collect_schema"}),
              frozenset({"agg", "bound", "bounds", "drop", "filter", "group_by", "interior_point", "learn_rectangle",
                         "learn_threshold", "query", "rename", "sample", "select", "with_columns"})),
    "GroupBy": (frozenset(), frozenset({"agg", "query", "top_k"})),
    "Query": (frozenset({"node", "query", "describe", "cost", "explain", "plan"}), frozenset({"collect"})),
    "SQLQuery": (frozenset({"node", "query", "notes", "text", "post", "explain_only", "backend_name", "describe",
                            "cost", "explain", "plan"}), frozenset({"collect"})),
    "Explanation": (frozenset({"heading", "private", "steps", "lines", "budget", "remaining", "notes", "extra", "data",
                               "protects", "to_dict"}), frozenset({"extended"}) | frozenset(dir(str))),
}


PRICED = frozenset({"cost", "explain", "plan"})
"""A query's methods that take the budget to price, and charge nothing."""


def _objects() -> dict[str, Any]:
    """One object of each class in :data:`SURFACE`, built over the canary table."""
    sess = _session()
    frame = sess.table("t").filter(pl.col("x") > 0)
    query = frame.group_by("g", keys=["a", "b"]).agg(dp.len())
    return {"Session": sess, "Frame": frame, "GroupBy": frame.group_by("g", keys=["a"]), "Query": query,
            "SQLQuery": sess.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", keys={"g": ["a"]}),
            "Explanation": query.explain(dp.PureDP(1))}


def _public(obj: object) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def _read(obj: object, name: str) -> Any:
    value = getattr(obj, name)
    static = inspect.getattr_static(type(obj), name, None)
    if callable(value) and not isinstance(static, property):
        return value(dp.PureDP(1)) if name in PRICED else value()
    return value


PUBLIC_FRAMES = frozenset({"Session.history"})
"""The names whose value is a frame of public values (the ledger); any other frame is a leak."""


def _leaks(value: Any, path: str, depth: int = 0, seen: set[int] | None = None) -> Iterator[str]:
    """Where, under ``value``'s public attributes, a canary, a private frame or the engine's connection shows."""
    seen = set() if seen is None else seen
    if id(value) in seen or depth > 5:
        return
    seen.add(id(value))
    if isinstance(value, pl.DataFrame | pl.LazyFrame | duckdb.DuckDBPyConnection) \
            and not isinstance(value, ReadOnlyKeys) and path not in PUBLIC_FRAMES:
        yield f"{path}: a {type(value).__name__}"
    text = value.write_csv() if isinstance(value, pl.DataFrame) else repr(value)
    if any(c in text for c in CANARIES):
        yield f"{path}: {text[:120]}"
    if isinstance(value, list | tuple | set | frozenset):
        for i, item in enumerate(list(value)[:100]):
            yield from _leaks(item, f"{path}[{i}]", depth + 1, seen)
    elif isinstance(value, dict):
        for k, item in list(value.items())[:100]:
            yield from _leaks(item, f"{path}[{k!r}]", depth + 1, seen)
    elif type(value).__module__.startswith("dpframe") and not isinstance(value, str):
        for name in _public(value):
            if isinstance(inspect.getattr_static(type(value), name, None), property) or name in vars(value):
                try:
                    yield from _leaks(getattr(value, name), f"{path}.{name}", depth + 1, seen)
                except Exception:   # noqa: BLE001, S112 — a property refused (a closed tool): nothing shown
                    continue


def test_every_public_name_is_classified() -> None:
    """A new public attribute or method fails here until it is added to :data:`SURFACE` (and so read below)."""
    for cls, obj in _objects().items():
        read, other = SURFACE[cls]
        assert _public(obj) - read - other == set(), cls
        assert read & other == set() and read <= _public(obj), cls


def test_no_public_name_shows_private_data() -> None:
    """Every property and argument-free method of the objects a session hands out, their repr, str, bool, and the
    public attributes of what they return: no row count, key or extreme of the private table, no private frame."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cls, obj in _objects().items():
            found = [leak for f in (repr, str, bool) for leak in _leaks(f(obj), f"{f.__name__}({cls})")]
            for name in sorted(SURFACE[cls][0]):
                found += _leaks(_read(obj, name), f"{cls}.{name}")
            assert found == [], found


def test_no_public_name_of_an_analyst_s_object_can_be_reassigned() -> None:
    """Found: a ``dp.Frame``, a ``dp.GroupBy`` and an ``Explanation`` took new values for their public names
    (``frame.agg = ...``, ``explanation.private = True``: a seeded run's explanation then rendered as private), where
    the session, queries and tools refuse (``Sealed``). Every public name of each is read-only now."""
    for cls, obj in _objects().items():
        for name in sorted(_public(obj)):
            with pytest.raises(AttributeError, match="read-only"):
                setattr(obj, name, None)
            with pytest.raises(AttributeError, match="read-only"):
                delattr(obj, name)


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps])
def test_copying_an_analyst_s_object_is_refused_or_an_equal_object(how: Callable[[Any], Any]) -> None:
    """Found: ``copy.copy(frame)`` (and of a group-by) recursed until ``RecursionError`` (``__getattr__`` read the
    session an empty copy did not have yet); ``copy.copy(explanation)`` failed in ``__new__``. A frame, a group-by and
    an explanation are immutable: they copy (a frame's copy is the same plan on the same session; pickling one is
    refused, as its session's is); the session, queries and tools refuse (one of a kind)."""
    for cls, obj in _objects().items():
        try:
            out = how(obj)
        except TypeError as e:
            assert "cannot be copied" in str(e), (cls, e)
            continue
        if how is pickle.dumps:
            assert cls == "Explanation"
            out = pickle.loads(out)   # noqa: S301 — our own bytes
        assert type(out) is type(obj) and repr(out) == repr(obj), cls
        if cls == "Explanation":
            assert out == obj and out.to_dict() == obj.to_dict()


# -- 2. the server's log ---------------------------------------------------------------------------------------------

ESCAPE = "\x1b]0;owned\x07\x1b[2J\x1b[31m"
"""A terminal title change, a screen clear and red text: what a name could do to the owner's terminal."""


def _log_text(record_it: Callable[[logging.Logger], None]) -> str:
    """What a plain handler on the ``dpframe.remote`` logger writes for ``record_it``'s record."""
    from dpframe.remote.server import LOG

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    LOG.addHandler(handler)
    try:
        record_it(LOG)
    finally:
        LOG.removeHandler(handler)
    return out.getvalue()


def _failing(logger: logging.Logger) -> None:
    try:
        raise RuntimeError("no column " + ESCAPE + "\nforged: INFO all is well")
    except RuntimeError:
        logger.exception("a remote request failed for %s", "\x1b[1mname\u202e\nforged: INFO")


def test_the_server_log_escapes_control_characters() -> None:
    """Found (r55e): ``LOG.exception`` wrote an exception's text unsanitised to the data owner's log, and the text of
    a library's exception can quote a name the analyst chose (a column, an alias, a table): escape sequences
    reached the owner's terminal (retitle it, clear it, recolour it), and a newline in the message forged a log line.
    The ``dpframe.remote`` logger now escapes control and bidirectional-format characters in the message, its
    arguments and the traceback (the traceback keeps its own line breaks, a message's are escaped)."""
    text = _log_text(_failing)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, repr(text)
    assert "\\x1b[1mname\\u202e" in text and "\\x1b]0;owned\\x07" in text
    assert "Traceback" in text and "RuntimeError" in text
    assert "\nforged: INFO" not in text and "\\nforged: INFO" in text


def test_a_request_failing_on_an_analyst_s_name_logs_it_escaped(caplog: pytest.LogCaptureFixture,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: a request the server fails on (an unexpected exception quoting the analyst's table name) is
    logged escaped, and the client gets the usual refusal."""
    from dpframe.remote.server import Server

    def fail(self: Server, request: dict[str, Any], *args: Any) -> Any:
        raise RuntimeError(f"cannot read {request.get('table')}")

    sess = _session()
    monkeypatch.setattr(Server, "_run", fail)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote, caplog.at_level(logging.ERROR, "dpframe.remote"):
        with pytest.raises(dp.RemoteError, match="its log says why"):
            remote.schema("t" + ESCAPE)
        logged = [logging.Formatter().format(r) for r in caplog.records]     # (the suite's handler may be JSON)
    assert logged and all("\x1b" not in t and "\x07" not in t for t in logged), logged
    assert any("cannot read t\\x1b]0;owned\\x07" in t for t in logged), logged


# -- 3. remote keys of 128-bit integers ------------------------------------------------------------------------------


def test_remote_keys_of_128_bit_integers_are_refused_naming_the_type() -> None:
    """Found (r55e): public keys given as a frame or series of ``UInt128`` (or ``Int128``) values, which work in
    process, were refused remotely as ``keys: not an Arrow IPC stream (ArrowNotImplementedError)`` (the keys are sent
    as an Arrow stream, and Arrow's Python library reads no integer of more than 64 bits): the analyst's keys were
    right, the message said they were garbage. Refused now, before anything is charged, naming the type and a form
    that crosses (the same keys as Python ints); a server sent such a stream names the type too."""
    from dpframe.remote import wire

    data = pl.DataFrame({"k": pl.Series([1, 2**128 - 1, 1], dtype=pl.UInt128), "x": [1.0, 2.0, 3.0]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    keys = pl.DataFrame({"k": pl.Series([1, 2**128 - 1], dtype=pl.UInt128)})
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        queries = [lambda k=k: remote.table("t").group_by("k", keys=k).agg(dp.len())
                   for k in (keys, keys["k"], pl.DataFrame({"k": pl.Series([1], dtype=pl.Int128)}))]
        queries.append(lambda: remote.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k", keys={"k": keys["k"]}))
        for query in queries:
            with pytest.raises(dp.ArgumentError, match=r"128-bit integers.*k") as info:
                query().collect(dp.PureDP(1))
            assert info.value.argument == "keys" and "to_list()" in (info.value.fix or "")
        out = remote.table("t").group_by("k", keys={"k": keys["k"].to_list()}).agg(dp.len()).collect(dp.PureDP(1))
        assert out["k"].to_list() == [1, 2**128 - 1]
        assert len(remote.history()) == 1
    with pytest.raises(dp.ArgumentError, match="more than 64 bits") as info:
        wire.read_keys(wire.frame_bytes(keys.select(pl.all().implode())))
    assert info.value.argument == "keys"
