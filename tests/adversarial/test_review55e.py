"""Review 55e: the remote server and client, the CLI and the notebook displays, attacked by a client (an analyst who
picks every request, argument, order and thread) and by what an analyst names (columns, aliases, plugins).

Each test is one attack; those that found something say so in their docstring (``Found:``).
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.plugin.manager import PluginHost
from dpframe.remote.values import unpack_result

KEY = secrets.token_bytes(32)
EVIL = "<img src=x onerror=alert(1)>"
FENCE = "```\n<script>alert(2)</script>\n```"


def _session(total: float = 10) -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"g": ["a", "b"] * 20, EVIL: [float(i % 3) for i in range(40)]})},
                      privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(total), seed=0)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Server]]:
    sess = _session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server:
        yield sess, server


# -- 1. the notebook displays: what an analyst names must not become markup ------------------------------------------


def _raw_html(markdown: str) -> list[str]:
    """The raw HTML tags a CommonMark renderer would pass through from ``markdown``: tags outside code spans and
    fenced blocks, not escaped by a backslash (a fence closes at a line of at least as many backticks as opened it)."""
    found, fence = [], ""
    for line in markdown.split("\n"):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence) and set(stripped) == {"`"}:
                fence = ""
            continue
        opened = re.match(r"`{3,}", stripped)
        if opened:
            fence = opened.group(0)
            continue
        spans = re.sub(r"(`+)(.+?)\1", "", line)           # code spans (the same run of backticks on both sides)
        found += re.findall(r"(?<!\\)<[a-zA-Z/][^>]*>", spans)
    return found


def test_explain_markdown_escapes_column_names_aliases_and_notes() -> None:
    """Found: ``Explanation._repr_markdown_`` wrote plan steps in single backticks, measures in a ``` fence and notes
    as plain Markdown, all unescaped: an alias holding ```` ``` ```` closed the fence, and a column name holding
    ``<img src=x onerror=...>`` reached the notes as raw HTML, which a notebook's Markdown view (or a report
    converted with nbconvert) renders: a script in the colleague's browser who opens the analyst's notebook. The
    Markdown now keeps every name inside a code span or fence longer than any run of backticks it holds, and escapes
    the Markdown punctuation of plain text."""
    sess = _session()
    query = sess.table("t").filter(pl.col(EVIL) >= 0).group_by("g", keys=["a", "b"]).agg(
        dp.sum(pl.col(EVIL), bounds=(0, 2)).alias(FENCE), dp.len().alias("`" + EVIL + "`"))
    shown = query.explain(dp.PureDP(1))
    markdown = shown._repr_markdown_()
    assert EVIL in str(shown)                       # the names are in the plan ...
    assert _raw_html(markdown) == [], markdown      # ... and none is markup
    assert "<script" not in shown._repr_html_() and "<img" not in shown._repr_html_()


def test_the_raw_html_finder_sees_what_it_looks_for() -> None:
    """The checker of the test above finds a tag outside code, and none inside a span or a fence."""
    assert _raw_html(f"- note: {EVIL}") == [EVIL]
    assert _raw_html(f"1. `{EVIL}`\n```\n{EVIL}\n```") == []
    assert _raw_html(f"```\n```\n{EVIL}\n```") == [EVIL]


def test_html_reprs_escape_what_the_analyst_names(served: tuple[dp.Session, dp.Server]) -> None:
    """Frames, group-bys, queries and the session show names only escaped (no finding: the HTML reprs escape)."""
    sess, _ = served
    frame = sess.table("t").filter(pl.col(EVIL) > 0).with_columns(pl.col(EVIL).alias(FENCE))
    query = frame.group_by("g", keys=["a"]).agg(dp.len().alias(EVIL))
    sess.sql(f'SELECT COUNT(*) AS "{EVIL}" FROM t').collect(dp.PureDP(0.1))      # the history shows its text
    for html in (frame._repr_html_(), frame.group_by("g")._repr_html_(), query._repr_html_(), sess._repr_html_()):
        assert "<img" not in html and "<script" not in html, html


# -- 2. result type names: dunders ------------------------------------------------------------------------------------


class _Named:
    attach, methods = "frame", ()

    def __init__(self, name: str, result_name: str) -> None:
        self.name, self.result_types = name, {result_name: dataclasses.make_dataclass("Fit", [("x", int)])}

    def build(self, source: Any, /, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError       # never built: registration is what is checked


class _Hooks:
    def __init__(self, family: _Named) -> None:
        self.family = family

    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        register(self.family)


@pytest.mark.parametrize("name", ["__class__", "__init__", "__getattr__", "__dict__", "_Fit"])
def test_a_result_type_with_a_dunder_or_private_name_is_refused_at_registration(name: str) -> None:
    """Found: ``result_types = {"__class__": Fit}`` (or ``__init__``, ``__dict__``) was accepted: exported as
    ``dp.<Name>``, yet ``dp.__class__`` is the module's class and ``dp.__init__`` its method, so ``isinstance(out,
    dp.__class__)`` tested something else, and ``dir(dp)`` listed the name. Refused now, naming the plugin and the
    name; nothing of the plugin is left registered."""
    host = PluginHost()
    with pytest.raises(dp.PluginError) as info:
        host.register(_Hooks(_Named("fit_r55e", name)), name="plugin_r55e")
    assert repr(name) in str(info.value) and "'plugin_r55e'" in str(info.value)
    assert info.value.argument == "dpframe_query_families" and "public class name" in (info.value.fix or "")
    assert name not in host.result_types()


@pytest.mark.parametrize("module", ["dpframe.__main__", "dpframe.__init__", "dpframe_topk.__init__"])
def test_the_client_imports_no_dunder_module_a_reply_names(module: str) -> None:
    """Found: the client rebuilt a reply's ``$dataclass`` from any module matching dpframe's package names, and
    ``dpframe.__init__`` matched (``dpframe(\\.[a-z0-9_]+)*``): importing it ran dpframe's ``__init__`` again as a
    second module (``dpframe.__main__`` would run a package's command line). A module path with a dunder part is
    refused: the result arrives as a plain dict, nothing imported."""
    before = set(sys.modules)
    out = unpack_result({"$dataclass": {"module": module, "name": "Fit", "fields": {"x": 1}}}, [])
    assert out == {"type": "Fit", "x": 1}
    assert module not in sys.modules and set(sys.modules) - before == set()


@pytest.mark.parametrize("fields", [{"__dict__": {"$dict": [["k", 1]]}, "k": 3, "method": "m", "reason": "r"},
                                    {"k": 3, "method": "m"},
                                    {"k": 3, "method": "m", "reason": "r", "extra": 1}])
def test_the_client_sets_only_a_result_type_s_declared_fields(fields: dict[str, Any]) -> None:
    """Found: the client set every field a reply named on the rebuilt object with ``object.__setattr__``: a field
    ``__dict__`` replaced the instance's dict (attributes the class does not declare), and a missing field left an
    object that fails when read. A reply whose fields are not exactly the class's is returned as a plain dict."""
    body = {"module": "dpframe_topk.results", "name": "TopKFailed", "fields": fields}
    out = unpack_result({"$dataclass": body}, [])
    assert isinstance(out, dict) and out["type"] == "TopKFailed"
    good = unpack_result({"$dataclass": {**body, "fields": {"k": 3, "method": "m", "reason": "r"}}}, [])
    assert isinstance(good, dp.TopKFailed) and (good.k, good.method, good.reason) == (3, "m", "r")


# -- 3. a third-party accountant's own charge kind, remotely ----------------------------------------------------------


@pytest.fixture
def own_kind() -> Iterator[None]:
    from dpframe.plugin import plugin_host
    from tests.adversarial.test_review54a import OwnHooks

    host = plugin_host()
    host.register(OwnHooks(), name="own_r55e")
    yield
    host.unregister(name="own_r55e")


def test_remote_cost_of_an_accountant_s_own_charge_kind(own_kind: None) -> None:
    """Found: ``remote.sql(...).cost(...)`` (and a chain's) on a session whose accountant has a charge kind of its own
    (``Accountant.charge_from_json``, stop 54) raised a raw ValueError in the client ("read by its accountant's
    charge_from_json"): the client has no such accountant. It now returns a ``dp.RemoteCharge``: the charge's
    notion, the text its ``to_json()`` wrote and the served accountant's description of it, the same as in process."""
    from tests.adversarial.test_review54a import DATA, UNIT, OwnKind

    sess = dp.Session({"t": DATA}, privacy_unit=UNIT, budget=dp.PureDP(10), accountant=OwnKind.name, seed=0)
    here = sess.table("t").agg(dp.len()).cost(dp.PureDP(1))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        for query in (remote.table("t").agg(dp.len()), remote.sql("SELECT COUNT(*) AS n FROM t")):
            charge = query.cost(dp.PureDP(1))
            assert isinstance(charge, dp.RemoteCharge)
            assert (charge.notion, charge.text) == (here.notion, here.to_json())
            assert str(charge) == "moments ε=1" == sess.accountant.describe_charge(here)
            assert OwnKind.charge_from_json(sess.accountant, charge.text) == here
        assert remote.spent().epsilon == 0              # cost is free
        assert remote.table("t").agg(dp.len()).collect(dp.PureDP(1)).height == 1
        assert remote.spent() == dp.PureDP(1)


def test_remote_cost_of_dp_budgets_is_still_the_budget(served: tuple[dp.Session, dp.Server]) -> None:
    """The ledger's own notions still arrive as the budget itself (no RemoteCharge)."""
    _, server = served
    with dp.connect(server.address, authkey=KEY) as remote:
        assert remote.sql("SELECT COUNT(*) AS n FROM t").cost(dp.PureDP(1)) == dp.PureDP(1)


# -- 4. history: one session's clients are one party (documented), and see each other's queries ---------------------


def test_every_client_of_a_session_sees_the_whole_history_as_documented(served: tuple[dp.Session, dp.Server]) -> None:
    """Decided (stop 54's open question): the clients of one server share one session, its budget and its ledger; the
    ledger's text is the queries' (the analysts' own words) and their costs, never a row, and ``spent()``/
    ``remaining()`` already show every client's spending. Clients are one party; analysts who must not see each
    other's queries get a session (and a server) each: docs/remote.md says so, under "Who sees what"."""
    sess, server = served
    with dp.connect(server.address, authkey=KEY) as alice, dp.connect(server.address, authkey=KEY) as bob:
        alice.sql("SELECT COUNT(*) AS alice_count FROM t").collect(dp.PureDP(0.25))
        seen = bob.history()
        assert seen["query"].str.contains("alice_count").to_list() == [True]
        assert seen.equals(sess.history()) and bob.spent() == dp.PureDP(0.25)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "remote.md").read_text(encoding="utf-8")
    section = docs.split("## Who sees what", 1)[1].split("\n## ", 1)[0]
    assert "history()" in section and "a session of their own" in section


# -- 5. the command line ----------------------------------------------------------------------------------------------


def test_serve_names_the_flag_of_a_key_or_certificate_it_cannot_read(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Found: ``dpframe serve --authkey-file MISSING`` printed only ``[Errno 2] No such file or directory: ...``, and
    ``--tls-cert`` of a file that is no certificate only ``[SSL] PEM lib (_ssl.c:3905)``: neither named its flag nor
    said what to pass. Each now names the flag and the fix, one line, exit code 2, before the session is opened."""
    from dpframe.cli import main

    data, key = tmp_path / "t.csv", tmp_path / "key.txt"
    pl.DataFrame({"x": [1.0, 2.0]}).write_csv(data)
    key.write_text(secrets.token_hex(32))
    key.chmod(0o600)
    common = ["serve", "--table", f"t={data}", "--row-privacy", "--total-epsilon", "1", "--address", "127.0.0.1:0"]
    cases = [(["--authkey-file", str(tmp_path / "missing.txt")], "--authkey-file", "a file holding the key"),
             (["--authkey-file", str(tmp_path)], "--authkey-file", "a file holding the key"),
             (["--authkey-file", str(key), "--tls-cert", str(data)], "--tls-cert", "PEM"),
             (["--authkey-file", str(key), "--tls-cert", str(tmp_path / "none.pem")], "--tls-cert", "PEM")]
    for extra, flag, fix in cases:
        code = main([*common, *extra])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"dpframe: error: {flag} ") and fix in err and "_ssl.c" not in err, err


# -- 6. a release the wire could not carry ---------------------------------------------------------------------------


def test_a_released_frame_of_128_bit_integers_reaches_the_client() -> None:
    """Found: a released frame (or a table's schema) holding a 128-bit integer column (``UInt128`` keys, r54i) was
    charged, sent, and then unreadable in the client: ``pyarrow`` reads no integer of more than 64 bits, so the client
    raised ``ArgumentError: keys: not an Arrow IPC stream (ArrowNotImplementedError)`` (an error about keys the
    analyst had given right) and the charged release was lost; ``remote.schema`` failed the same way. Polars wrote the
    frame, so the client now reads such a frame with Polars' own reader: the same frame as in process."""
    data = pl.DataFrame({"k": pl.Series([1, 2**128 - 1, 1], dtype=pl.UInt128), "x": [1.0, 2.0, 3.0]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    here = sess.table("t").group_by("k", keys=[1, 2**128 - 1]).agg(dp.len()).collect(dp.PureDP(1))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        assert remote.schema("t") == data.schema
        out = remote.table("t").group_by("k", keys=[1, 2**128 - 1]).agg(dp.len()).collect(dp.PureDP(1))
        assert out.schema == here.schema and out["k"].to_list() == here["k"].to_list() == [1, 2**128 - 1]
        assert len(remote.history()) == 2


def test_a_reply_frame_no_reader_reads_is_a_remote_error_naming_the_reply() -> None:
    """A frame neither Arrow nor Polars reads is a ``dp.RemoteError`` about the reply (not an error about keys)."""
    from dpframe.remote import wire

    with pytest.raises(dp.RemoteError) as info:
        wire.frame_from_bytes(b"\xff\xff\xff\xff" + b"not arrow")
    assert info.value.argument == "reply"


@pytest.mark.parametrize("name", ["\ud800", "x\udfffy"])
def test_a_measure_alias_no_column_can_have_is_refused_before_the_charge(served: tuple[dp.Session, dp.Server],
                                                                         name: str) -> None:
    """Found: ``dp.len().alias("\\ud800")`` (a lone surrogate: JSON carries it, ``str`` holds it) was planned,
    charged, and then failed while running (``UnicodeEncodeError``: Polars names columns in UTF-8), in process and
    remotely, by a chain or ``agg(**{name: ...})``: ε spent for nothing. Refused when the measure is named, free."""
    sess, server = served
    with pytest.raises(dp.ArgumentError, match="lone surrogate") as info:
        sess.table("t").agg(dp.len().alias(name))
    assert info.value.argument == "name"
    with dp.connect(server.address, authkey=KEY) as remote:
        for query in (lambda: remote.table("t").agg(dp.len().alias(name)),
                      lambda: remote.table("t").group_by("g", keys=["a"]).agg(**{name: dp.len()})):
            with pytest.raises(dp.ArgumentError, match="lone surrogate"):
                query().collect(dp.PureDP(0.5))
    assert sess.history().height == 0


# -- 7. pad and a second connection ----------------------------------------------------------------------------------


def test_under_pad_a_second_connection_s_history_shows_no_release_before_its_reply() -> None:
    """Found: with ``pad=``, a release's reply left ``pad`` seconds after its request, but a second connection polling
    ``history()`` (never held: it reads no row) saw the charge turn from ``reserved`` to ``committed`` when the
    release's work ended, to the millisecond (pad 3 s: ``committed`` at 0.29 s): the time ``pad`` hides, read exactly.
    A ledger read (``history``, ``spent``, ``remaining``, ``explain``) now waits for the replies of the releases in
    flight when it arrived: it shows a release only once its held reply was sent."""
    sess = _session(100)
    pad = 0.8
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, pad=pad).start() as server, \
            dp.connect(server.address, authkey=KEY) as alice, dp.connect(server.address, authkey=KEY) as bob:
        for _ in range(2):
            replied: list[float] = []
            start = time.monotonic()
            runner = threading.Thread(target=lambda: (alice.sql("SELECT COUNT(*) AS n FROM t").collect(
                dp.PureDP(0.5)), replied.append(time.monotonic())))
            runner.start()
            seen = []
            while runner.is_alive():
                statuses = bob.history()["status"].to_list()
                seen.append((time.monotonic(), statuses))
                time.sleep(0.005)
            runner.join()
            assert replied and replied[0] - start >= pad - 0.01
            assert all(s == "committed" for _, statuses in seen for s in statuses), seen    # never "reserved"
            shown = [at for at, statuses in seen if len(statuses) == len(sess.history())]
            assert all(at >= start + pad for at in shown), (start, replied, seen)     # its reply left at start + pad


def test_under_pad_a_stop_rule_reading_another_connection_s_history_is_answered() -> None:
    """A ``run_until`` in flight is waited for by ledger reads, but not while it waits for its ``stop`` answer (its
    question is held as a reply is): a stop rule that reads ``history()`` on a second connection gets the steps charged
    so far, rather than waiting for the run that waits for it."""
    sess = _session(100)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, pad=0.2).start() as server, \
            dp.connect(server.address, authkey=KEY) as alice, dp.connect(server.address, authkey=KEY) as bob:
        seen: list[int] = []

        def stop(results: list[pl.DataFrame]) -> bool:
            seen.append(bob.history().height)
            return len(results) == 2

        steps = [alice.table("t").filter(pl.col("g") == g).agg(dp.len()) for g in ("a", "b", "a")]
        out: list[list[pl.DataFrame]] = []
        runner = threading.Thread(target=lambda: out.append(alice.run_until(steps, dp.PureDP(0.5), stop)), daemon=True)
        runner.start()
        runner.join(30)
        stalled = runner.is_alive()     # (leaving the with block closes the server: a stalled run ends there)
    assert not stalled and len(out[0]) == 2 and seen == [1, 1], seen
