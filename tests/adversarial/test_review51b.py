"""Review 51b: a remote session behaves as the session in process, and the top-k query's wording is not an argument.

1. ``collect(budget, ci=...)``'s ``dp.NoIntervalWarning`` reads the plan only and comes before the charge in process,
   so a strict caller (``simplefilter("error", dp.NoIntervalWarning)``) is refused free; through ``dp.Server`` it came
   with the reply, after the charge: a strict caller lost a charged release.
2. An option given at its default value (``ci=None``, ``diagnostics=False``, ``accuracy=None``) to a query that takes
   no such option is a ``dp.SignatureError`` in process; the server dropped default values before binding, so a
   remote ``top_k(...).collect(budget, ci=None)`` ran (and was charged) where the same call fails in process.
3. ``spelling=`` (how the top-k checks word their fixes: the method chain's or SQL's) was an argument of
   ``group_by(...).top_k(...)``: an analyst could ask for SQL fixes in Python, and an unknown value fell back to the
   chain's words silently. It is not an argument: SQL sets it where it builds a ``TOP_K`` (``dpframe.family``).
"""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import polars as pl
import pytest

import dpframe as dp

CITIES = ["a", "b", "c"]
DATA = pl.DataFrame({"user": list(range(300)), "city": CITIES * 100, "spend": [1, 2, 3] * 100})
APPROX = dp.ApproxDP(1, 1e-6)
MIXED_SQL = "SELECT city, COUNT(*) AS n, MEDIAN(CLAMP(spend, 0, 10)) AS med FROM v GROUP BY city"


def _session() -> dp.Session:
    return dp.Session({"v": DATA}, privacy_unit=dp.PrivacyUnit("user", max_rows=2), budget=dp.ApproxDP(100, 1e-3),
                      seed=0)


@pytest.fixture
def sides() -> Iterator[tuple[dp.Session, Any]]:
    """A session, and a connection to a server of it."""
    key = secrets.token_bytes(32)
    sess = _session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        yield sess, remote


def _mixed(front: Any, sql: bool) -> Any:
    """A count beside a median (which has no interval), as a method chain or in SQL."""
    if sql:
        return front.sql(MIXED_SQL, keys={"city": CITIES})
    return front.table("v").group_by("city", keys=CITIES).agg(dp.len(), dp.median("spend", bounds=(0, 10)))


# -- 1. the NoIntervalWarning comes before the charge, remotely too ---------------------------------------------------

@pytest.mark.parametrize("remote_side", [False, True], ids=["in_process", "remote"])
@pytest.mark.parametrize("sql", [False, True], ids=["chain", "sql"])
def test_the_warning_is_given_before_the_charge(sides: tuple[dp.Session, Any], remote_side: bool, sql: bool) -> None:
    """When the analyst's process is warned, the ledger holds nothing yet; the release is charged after."""
    sess, remote = sides
    query = _mixed(remote if remote_side else sess, sql)
    seen: list[tuple[type[Warning], str, int]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, filename, *_: seen.append(
            (category, filename, sess.history().height))
        out = query.collect(dp.PureDP(1), ci=0.9)
    assert [(c, h) for c, _, h in seen] == [(dp.NoIntervalWarning, 0)], seen       # warned before the charge
    assert seen[0][1] == __file__                                                    # at the analyst's line
    assert sess.history().height == 1 and any(c.endswith("_ci_low") for c in out.columns), out.columns


@pytest.mark.parametrize("sql", [False, True], ids=["chain", "sql"])
def test_a_strict_remote_caller_is_refused_free_as_in_process(sides: tuple[dp.Session, Any], sql: bool) -> None:
    """``simplefilter("error", dp.NoIntervalWarning)``: the same exception (class, text, outputs), nothing charged."""
    sess, remote = sides
    raised = []
    for front in (sess, remote):
        with warnings.catch_warnings():
            warnings.simplefilter("error", dp.NoIntervalWarning)
            with pytest.raises(dp.NoIntervalWarning) as refused:
                _mixed(front, sql).collect(dp.PureDP(1), ci=0.9)
        raised.append((type(refused.value), str(refused.value), refused.value.outputs))
    assert raised[0] == raised[1], raised
    assert sess.history().height == 0 and remote.remaining() == sess.remaining() == dp.ApproxDP(100, 1e-3)
    with warnings.catch_warnings():             # the connection is still in step: its next request is answered
        warnings.simplefilter("ignore", dp.NoIntervalWarning)
        assert "len" in _mixed(remote, False).collect(dp.PureDP(1), ci=0.9).columns
    assert sess.history().height == 1


def test_a_strict_remote_caller_keeps_other_warnings_filters(sides: tuple[dp.Session, Any]) -> None:
    """``ignore`` still ignores it (the release goes on, one charge), and no warning reaches the server's process."""
    sess, remote = sides
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        warnings.simplefilter("ignore", dp.NoIntervalWarning)
        _mixed(remote, True).collect(dp.PureDP(1), ci=0.9)
    assert not [w for w in caught if issubclass(w.category, dp.NoIntervalWarning)]
    assert sess.history().height == 1


@pytest.mark.parametrize("sql", [False, True], ids=["chain", "sql"])
def test_ci_with_no_interval_at_all_is_refused_free_remotely_too(sides: tuple[dp.Session, Any], sql: bool) -> None:
    """Only a median: ``ci=`` would add nothing, a PlanError naming ``ci`` (same text) on both sides, and no warning."""
    sess, remote = sides
    found = []
    for front in (sess, remote):
        query = front.sql("SELECT city, MEDIAN(CLAMP(spend, 0, 10)) AS m FROM v GROUP BY city", keys={"city": CITIES}) \
            if sql else front.table("v").group_by("city", keys=CITIES).agg(dp.median("spend", bounds=(0, 10)))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(dp.PlanError) as refused:
                query.collect(dp.PureDP(1), ci=0.9)
        found.append((str(refused.value), refused.value.argument, refused.value.fix))
    assert found[0] == found[1] and found[0][1] == "ci", found
    assert sess.history().height == 0


def test_a_warning_hook_that_calls_the_connection_is_refused_not_hung(sides: tuple[dp.Session, Any]) -> None:
    """The connection is waiting for the warning's answer: a hook that asks it something is refused (an ArgumentError
    naming ``warnings``), which stops the query before its charge, as an exception from a hook does in process."""
    sess, remote = sides
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda *_: remote.remaining()
        with pytest.raises(dp.ArgumentError) as refused:
            _mixed(remote, False).collect(dp.PureDP(1), ci=0.9)
    assert refused.value.argument == "warnings" and "another connection" in str(refused.value.fix)
    assert sess.history().height == 0 and remote.history().height == 0        # and the connection still answers


def test_a_padded_server_warns_before_the_charge_too() -> None:
    """The question is held as a reply is (``pad``), and the release after it is charged once."""
    key = secrets.token_bytes(32)
    sess = _session()
    heights: list[int] = []
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key, pad=0.05).start() as server, \
            dp.connect(server.address, authkey=key) as remote, warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda *_: heights.append(sess.history().height)
        _mixed(remote, True).collect(dp.PureDP(1), ci=0.9)
    assert heights == [0] and sess.history().height == 1


def test_a_sql_top_k_warning_comes_after_its_charge_on_both_sides(sides: tuple[dp.Session, Any]) -> None:
    """A short ``TOP_K``'s ``dp.TopKWarning`` takes the same road (the server asks the analyst's process to warn it):
    after the charge, as in process; a strict caller gets it (same text, outcome) and the charge stays."""
    sess, remote = sides
    text = "SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), NULL)"
    raised = []
    for front in (sess, remote):
        before = sess.history().height
        heights: list[int] = []
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda *_: heights.append(sess.history().height)
            assert front.sql(text).collect(dp.ApproxDP(0.01, 1e-6)).height == 0
        assert heights == [before + 1], heights
        with warnings.catch_warnings():
            warnings.simplefilter("error", dp.TopKWarning)
            with pytest.raises(dp.TopKWarning) as refused:
                front.sql(text).collect(dp.ApproxDP(0.01, 1e-6))
        outcome = refused.value.outcome
        raised.append((str(refused.value), type(outcome).__name__, getattr(outcome, "reason", None)))
        assert sess.history().height == before + 2
    assert raised[0] == raised[1] and raised[0][1] == "TopKFailed", raised


# -- 2. an option at its default value is refused where the query takes no such option --------------------------------

QUERIES: dict[str, Callable[[Any], Any]] = {
    "top_k": lambda f: f.table("v").group_by("city").top_k(k=2),
    "bounds": lambda f: f.table("v").bounds("spend", domain=(0, 100)),
    "interior_point": lambda f: f.table("v").interior_point("spend", bounds=(0, 100)),
    "sql_top_k": lambda f: f.sql("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2)"),
    "agg": lambda f: f.table("v").group_by("city", keys=CITIES).agg(dp.len()),
    "sql_agg": lambda f: f.sql("SELECT city, COUNT(*) AS n FROM v GROUP BY city", keys={"city": CITIES}),
}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("collect", {"ci": None}), ("collect", {"diagnostics": False}), ("collect", {"accuracy": None}),
    ("cost", {"accuracy": None}), ("cost", {"diagnostics": False}), ("explain", {"accuracy": None}),
    ("explain", {"format": "text"})]


def _outcome(run: Callable[[], Any]) -> tuple[str, str, object]:
    try:
        run()
    except dp.DPFrameError as e:
        return type(e).__name__, str(e), e.argument
    return "ok", "", None


@pytest.mark.filterwarnings("ignore::dpframe.TopKWarning")
@pytest.mark.parametrize("kind", list(QUERIES))
@pytest.mark.parametrize(("call", "options"), CALLS, ids=[f"{c}-{next(iter(o))}" for c, o in CALLS])
def test_an_option_at_its_default_is_refused_remotely_as_in_process(sides: tuple[dp.Session, Any], kind: str,
                                                                    call: str, options: dict[str, Any]) -> None:
    """The same outcome (class, text, argument) in process and through a server; a refusal charges nothing."""
    sess, remote = sides
    def run(front: Any) -> Callable[[], Any]:
        return lambda: getattr(QUERIES[kind](front), call)(APPROX, **options)

    local, far = _outcome(run(sess)), _outcome(run(remote))
    assert local == far, (local, far)
    refused = local[0] != "ok"
    assert refused == (kind not in ("agg", "sql_agg") and next(iter(options)) != "format"
                       and not (kind == "sql_top_k" and next(iter(options)) in ("ci", "diagnostics")
                                and call == "collect"))
    assert sess.history().height == (0 if refused or call != "collect" else 2)


# -- 3. spelling= is not an argument of top_k ------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["sql", "chain", "SQL", 1])
@pytest.mark.parametrize("through", ["top_k", "query"])
def test_spelling_is_not_an_argument_of_top_k(sides: tuple[dp.Session, Any], spelling: object, through: str) -> None:
    """``top_k(spelling=...)``, and the family's generic entry ``query("top_k", spelling=...)`` (which took it, and
    fell back to the chain's words for an unknown value), are a dp.SignatureError naming it, in process and remotely;
    nothing is charged."""
    sess, remote = sides
    found = []
    fronts: tuple[Any, ...] = (sess, remote)
    for front in fronts:
        grouped = front.table("v").group_by("city")
        with pytest.raises(dp.SignatureError) as refused:
            call = grouped.top_k if through == "top_k" else lambda **kw: grouped.query("top_k", **kw)
            call(k=2, method="best", spelling=spelling).cost(APPROX)
        found.append((str(refused.value), refused.value.argument))
    assert found[0] == found[1] and found[0][1] == "spelling", found
    assert "method" in found[0][0] and "spelling" not in found[0][0].split("Fix:")[1], found
    assert sess.history().height == 0


def test_the_chain_and_sql_still_word_their_fixes_apart(sides: tuple[dp.Session, Any]) -> None:
    """One check, two wordings: the SQL builder sets the SQL wording; the chain (and its replay on a server) its own."""
    sess, remote = sides
    for front in (sess, remote):
        with pytest.raises(dp.PlanError) as sql:
            front.sql("SELECT city FROM v GROUP BY city HAVING TOP_K(COUNT(*), 2, method := 'best')").cost(APPROX)
        with pytest.raises(dp.PlanError) as chain:
            front.table("v").group_by("city").top_k(k=2, method="best").cost(APPROX)
        assert "method := 'stable'" in str(sql.value.fix) and "method='stable'" in str(chain.value.fix)
