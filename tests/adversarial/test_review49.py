"""Review 49 (lead): findings of the stop's own review, each a test written before its fix."""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp


def test_the_individual_filter_in_a_basic_session_gives_one_fix() -> None:
    """Its refusal quoted the accountant's whole error, whose own "Fix:" offered a query budget the filter does
    not take ("give this query an (ε, δ) budget such as dp.ApproxDP(1, 1e-7)"), then gave its own: two fixes,
    the first wrong. Now the accountant's reason alone, and the filter's fix once."""
    sess = dp.Session({"t": pl.DataFrame({"u": list(range(10)), "x": [1.0] * 10})}, budget=dp.ApproxDP(1, 1e-6),
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), seed=0)
    with pytest.raises(dp.BudgetConversionError) as refused:
        sess.individual_filter(dp.ZCDP(0.1))
    text = str(refused.value)
    assert text.count("Fix:") == 1 and "ApproxDP(1, 1e-7)" not in text, text
    assert text.startswith("budget: this session's accountant cannot compose a zCDP filter (ZCDP(rho=1/10) cannot be "
                           "charged to an (ε, δ) budget)"), text
    assert refused.value.message.startswith("this session's accountant cannot compose")
    assert sess.history().height == 0


def test_every_dpframe_error_keeps_its_message_apart() -> None:
    """``e.message`` is the text without the argument and the fix, for code that quotes one error in another."""
    e = dp.ArgumentError("must be positive", argument="q", fix="pass q=0.5")
    assert (str(e), e.message, e.argument, e.fix) == ("q: must be positive. Fix: pass q=0.5", "must be positive",
                                                       "q", "pass q=0.5")


def test_a_remote_error_keeps_its_message_apart_too() -> None:
    """The client rebuilt the server's error with its text, argument and fix, but no ``message``: an
    ``AttributeError`` for code that quotes it, where in process it is there."""
    sess = dp.Session({"t": pl.DataFrame({"u": list(range(10)), "x": [1.0] * 10})}, budget=dp.ApproxDP(1, 1e-6),
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), seed=0)
    key = b"k" * 32
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        with pytest.raises(dp.BudgetExceededError) as refused:
            remote.sql("SELECT COUNT(*) AS n FROM t").collect(dp.PureDP(5))
    assert refused.value.message.startswith("requested ") and "Fix:" not in refused.value.message
    assert str(refused.value) == f"budget: {refused.value.message}. Fix: {refused.value.fix}"


def test_sql_keys_that_do_not_fit_name_keys_with_one_fix() -> None:
    """Found by the hostile-argument harness once it checked every refusal's argument and fix: a member of
    ``sess.sql(keys=...)`` of another type than its column was refused naming ``public_keys`` (the session's
    argument, not the one given) and quoting the inner error whole: "keys: cannot read keys: ... Fix: ...", then
    the outer fix. Now ``keys``, the reason, one fix; the session's own keys still name ``public_keys``."""
    data = pl.DataFrame({"u": list(range(10)), "g": ["a", "b"] * 5})
    sess = dp.Session({"t": data}, budget=dp.PureDP(1), privacy_unit=dp.PrivacyUnit("u", max_rows=1), seed=0)
    query = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"
    with pytest.raises(dp.SchemaError) as refused:
        sess.sql(query, keys={"g": ["a", 1.5]})
    text = str(refused.value)
    assert refused.value.argument == "keys" and text.startswith("keys: the public keys do not fit the GROUP BY "
                                                                "columns: cannot read keys"), text
    assert text.count("Fix:") == 1 and "keys: keys:" not in text, text
    with pytest.raises(dp.SchemaError) as declared:
        dp.Session({"t": data}, budget=dp.PureDP(1), privacy_unit=dp.PrivacyUnit("u", max_rows=1),
                   public_keys={"t.g": ["a", 1.5]}).sql(query)
    assert declared.value.argument == "public_keys" and str(declared.value).count("Fix:") == 1, str(declared.value)
    assert sess.history().height == 0


@pytest.mark.parametrize(("accountant", "total", "budget"), [("basic", dp.PureDP(1), dp.PureDP(1)),
                                                             ("zcdp", dp.ZCDP(0.5), dp.ZCDP(0.5))])
def test_a_used_up_session_does_not_advise_a_smaller_query(accountant: str, total: dp.Budget,
                                                           budget: dp.Budget) -> None:
    """r49c's friction item 8: with nothing left, the fix still said "ask for a smaller budget for this query",
    which no query can follow. Now it says the budget is used up, and what gives more."""
    sess = dp.Session({"t": pl.DataFrame({"u": list(range(20)), "x": [1.0] * 20})}, budget=total, seed=0,
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), accountant=accountant)
    sess.table("t").agg(dp.len()).collect(budget)
    with pytest.raises(dp.BudgetExceededError) as refused:
        sess.table("t").agg(dp.len()).collect(budget)
    assert "smaller budget" not in str(refused.value) and "used up" in refused.value.fix, str(refused.value)
    assert "ledger=" in refused.value.fix
    half = dp.Session({"t": pl.DataFrame({"u": [1, 2], "x": [1.0, 2.0]})}, budget=total, seed=0,
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), accountant=accountant)
    with pytest.raises(dp.BudgetExceededError) as short:                 # something left: the old advice stands
        half.table("t").agg(dp.len()).collect(budget + budget)  # type: ignore[operator]
    assert "smaller budget" in short.value.fix


def test_two_outputs_of_one_name_are_refused_where_written() -> None:
    """r49c's friction item 9: ``agg(dp.len(), dp.len())`` was built, and refused only by ``cost``/``collect``;
    every other check of a step runs on the line that wrote it (the guide). Now ``agg`` refuses it."""
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2], "x": [1.0, 2.0], "g": ["a", "b"]})}, budget=dp.PureDP(1),
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), seed=0)
    for build in (lambda: sess.table("t").agg(dp.len(), dp.len()),
                  lambda: sess.table("t").agg(dp.len(), len=dp.sum("x", bounds=(0, 1))),
                  lambda: sess.table("t").group_by("g", keys=["a"]).agg(dp.len(), g=dp.len())):
        with pytest.raises(dp.PlanError, match=r"^measures: two output columns are named '(len|g)'. Fix: rename one"):
            build()
    assert sess.table("t").agg(dp.len(), n=dp.len()).cost(dp.PureDP(1)) == dp.PureDP(1)


@pytest.mark.parametrize("name", ["collect", "explain", "cost"])
def test_a_group_by_ended_as_a_query_says_to_finish_it(name: str) -> None:
    """r49c's item 15: ``frame.group_by("g").collect(...)`` was a plain AttributeError with no hint."""
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2], "g": ["a", "b"]})}, budget=dp.PureDP(1), seed=0,
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1))
    with pytest.raises(dp.PolarsHabitError, match=rf"^{name}: a group-by is not a query yet .* Fix: finish it"):
        getattr(sess.table("t").group_by("g"), name)
    assert not hasattr(sess.table("t").group_by("g"), name)


def test_the_datasets_module_lists_what_it_offers() -> None:
    """r49c's item 15: ``dir(dp.datasets)`` lists ``np``, ``pl``: its ``__all__`` says what it offers."""
    assert dp.datasets.__all__ == ["CITIES", "MAX_ROWS", "visits"]
