"""Review 43a: the fixed per-query cost cut (issue 18 item 2) keeps every charge, check and released value.

Scope:

* ``dpframe_aggregates.aggregates.AggregateMechanism.plan``: its accuracy texts, 95% half-widths, noise labels and
  privacy curves are built on first read (``dpframe.mechanism.deferred``), and ``dpframe.planning.passes.price``
  builds no curve for an accountant that only checks them. What is charged, in every session, and what
  ``explain()`` prints stay what they were.
* ``dpframe.accounting.ledger.Ledger.reserve``: the composed total after a charge is kept instead of decoding the
  charge and composing it again on the next reserve. Another session's charges on the same file are still read.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import dpframe as dp
from dpframe.accounting import BasicAccountant
from dpframe.accounting.ledger import Ledger

KEYS = ["a", "b", "c"]


def _session(**kw: Any) -> dp.Session:
    data = pl.DataFrame({"g": ["a", "b", "a", "c", "b", "a"], "x": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), seed=3, **kw)


def _query(sess: dp.Session) -> Any:
    return sess.table("t").group_by("g", keys=KEYS).agg(dp.len(), dp.sum("x", bounds=(0, 10)),
                                                         dp.mean("x", bounds=(0, 10)))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often a collect asks for a noise's half-width and for a noise's privacy curve."""
    import dpframe_aggregates.aggregates as aggregates

    from dpframe.mechanism.noise import Noise

    calls = {"half_width": 0, "curve": 0}
    half_width, curve = Noise.half_width, aggregates.noise_curve

    def counting_half_width(self: Noise, confidence: float) -> float:
        calls["half_width"] += 1
        return half_width(self, confidence)

    def counting_curve(noise: Any, cells: int) -> Any:
        calls["curve"] += 1
        return curve(noise, cells)
    monkeypatch.setattr(Noise, "half_width", counting_half_width)
    monkeypatch.setattr(aggregates, "noise_curve", counting_curve)
    return calls


@pytest.mark.parametrize("budget", [dp.PureDP(1), dp.ZCDP(Fraction(1, 4))], ids=["basic", "zcdp"])
def test_a_collect_builds_no_text_half_width_or_curve_that_only_explain_reads(counted: dict[str, int],
                                                                              budget: dp.Budget) -> None:
    """Every collect computed the accuracy texts, the 95% half-widths and the privacy curves of its plan, which only
    ``explain()`` and the curve accountants (``rdp``, ``pld``) read: ~60–90 µs of a ~1.3 ms tiny query."""
    total = dp.PureDP(100) if budget.notion == "pure" else dp.ZCDP(100)
    sess = _session(budget=total)
    out = _query(sess).collect(budget)
    assert out.height == 3
    assert counted == {"half_width": 0, "curve": 0}
    text = str(_query(sess).explain(budget))               # explain() still shows them
    assert "(95%)" in text and counted["half_width"] > 0


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_curve_accountant_is_still_charged_the_plans_curves(counted: dict[str, int], accountant: str) -> None:
    """A Rényi filter charges the plan's curves (tighter than its cost): they are built for it, and the charge is the
    one of the curves built eagerly."""
    import dpframe_aggregates.aggregates as aggregates

    from dpframe.accounting.rdp_charge import RDPCharge

    sess = _session(budget=dp.ApproxDP(50, 1e-6), accountant=accountant)
    query = _query(sess)
    plan = query.plan(dp.PureDP(1))
    curves = [aggregates.noise_curve(n, 1) for n in plan.plans[0].noises.values()]
    counted["curve"] = 0
    query.collect(dp.PureDP(1))
    assert counted["curve"] == 3
    acct = sess.accountant
    assert sess.spent() == acct.report(acct.compose([acct.empty(), RDPCharge.of(curves)]))


def test_a_plans_deferred_values_cannot_be_changed() -> None:
    """The texts, half-widths and curves built on first read are a read-only mapping and a tuple."""
    sess = _session(budget=dp.PureDP(10))
    p = _query(sess).plan(dp.PureDP(1)).plans[0]
    for values, key in ((p.accuracy, "len"), (p.ci95, "len"), (p.noise, "count(rows)")):
        with pytest.raises(TypeError):
            values[key] = 0                                          # type: ignore[index]
        with pytest.raises(TypeError):
            values._items()[key] = 0                                 # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        p.privacy[0] = None                                          # type: ignore[index]
    assert isinstance(p.privacy._items(), tuple)                     # type: ignore[union-attr]
    assert p.ci95 == {"len": p.noises["__rows"].half_width(0.95),    # type: ignore[index]
                      "x_sum": p.ci95["x_sum"]}


def test_explain_prints_what_it_printed() -> None:
    """The explanation of the deferred plan is the one of the same plan with its values built eagerly."""
    import dataclasses

    from dpframe.explain import explain_aggregate

    sess = _session(budget=dp.PureDP(10))
    query = _query(sess)
    deferred = query.plan(dp.PureDP(1))
    p = deferred.plans[0]
    eager = dataclasses.replace(p, accuracy={k: p.accuracy[k] for k in p.accuracy}, ci95=dict(p.ci95.items()),
                                noise=dict(p.noise.items()), privacy=tuple(p.privacy))
    assert type(eager.accuracy) is dict and type(eager.privacy) is tuple
    shown = explain_aggregate(sess.privacy_unit, query.node, deferred, "polars")
    assert shown == explain_aggregate(sess.privacy_unit, query.node, dataclasses.replace(deferred, plans=[eager]),
                                      "polars")
    assert "(95%)" in str(shown) and "discrete Laplace" in str(shown)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stored charges the ledger decodes."""
    import dpframe.accounting.ledger as ledger

    texts: list[str] = []
    decode = ledger.decode

    def counting(text: str, accountant: Any = None) -> Any:
        texts.append(text)
        return decode(text, accountant)
    monkeypatch.setattr(ledger, "decode", counting)
    return texts


def test_a_reserve_does_not_decode_and_compose_the_charge_before_it_again(tmp_path: Path, decoded: list[str]) -> None:
    """Each reserve re-read the charge the previous reserve had just written, decoded it and composed it again (the
    composed total was known: it had just been checked against the budget)."""
    led = Ledger(tmp_path / "budget.ledger", BasicAccountant(dp.PureDP(1)))
    for _ in range(3):
        led.commit(led.reserve(dp.PureDP(Fraction(1, 4)), "q", "aggregates"))
    assert decoded == []
    again = Ledger(tmp_path / "budget.ledger", BasicAccountant(dp.PureDP(1)))
    assert led.spent() == again.spent() == dp.PureDP(Fraction(3, 4))
    again.close()
    with pytest.raises(dp.BudgetExceededError):
        led.reserve(dp.PureDP(Fraction(1, 2)), "q", "aggregates")
    led.close()


def test_another_sessions_charges_between_two_reserves_are_read(tmp_path: Path, decoded: list[str]) -> None:
    """The total kept after a reserve covers this ledger's charges; a charge another ledger on the same file made
    since is read from the file before the next reserve is checked, and a settlement recomposes everything."""
    path = tmp_path / "budget.ledger"
    mine, theirs = Ledger(path, BasicAccountant(dp.PureDP(1))), Ledger(path, BasicAccountant(dp.PureDP(1)))
    mine.commit(mine.reserve(dp.PureDP(Fraction(1, 4)), "q", "aggregates"))
    theirs.commit(theirs.reserve(dp.PureDP(Fraction(1, 2)), "q", "aggregates"))
    with pytest.raises(dp.BudgetExceededError):
        mine.reserve(dp.PureDP(Fraction(1, 3)), "q", "aggregates")
    assert mine.spent() == dp.PureDP(Fraction(3, 4))
    cid = theirs.reserve(dp.PureDP(Fraction(1, 4)), "q", "aggregates")
    theirs.settle(cid, dp.PureDP(Fraction(1, 8)), "cell")
    assert mine.spent() == dp.PureDP(Fraction(7, 8))
    mine.close()
    theirs.close()


def test_a_charge_that_does_not_read_back_as_itself_is_composed_from_the_file(tmp_path: Path) -> None:
    """A charge whose stored text is not exactly it (a float ε, stored as its shortest decimal) is not kept: the next
    read composes the stored row, as a restarted session would."""
    from dpframe.budgets import _raw

    led = Ledger(tmp_path / "budget.ledger", BasicAccountant(dp.PureDP(1)))
    led.commit(led.reserve(_raw(dp.PureDP, epsilon=0.1), "q", "aggregates"))     # type: ignore[arg-type]
    again = Ledger(tmp_path / "budget.ledger", BasicAccountant(dp.PureDP(1)))
    assert led.spent() == again.spent() == dp.PureDP(Fraction(1, 10))
    led.close()
    again.close()


# --- SQL: what is a function of the text alone is done once per text ----------------------------------------------

def _sql_session() -> dp.Session:
    data = pl.DataFrame({"g": ["a", "b", "a", "b"], "x": [1, 2, 3, 4]})
    return dp.Session({"s": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(100), seed=1)


def test_a_sql_text_asked_again_is_not_tokenized_or_walked_for_top_k_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``sess.sql`` tokenized its text twice (EXPLAIN, a WINDOW clause) and walked the whole parse tree for a
    TOP_K and, per SELECT item, for windows and subqueries, though all of it is a function of the text alone."""
    import dpframe.sql.aggregates as aggregates
    import dpframe.sql.compile as compile_module
    import dpframe.sql.parse as parse
    import dpframe.sql.topk as topk

    calls = {"tokens": 0, "find": 0, "contains": 0}
    tokens, find, contains = parse._tokens, topk._find, aggregates.contains

    def counting(name: str, f: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            calls[name] += 1
            return f(*a, **k)
        return call
    sess = _sql_session()
    text = "SELECT g, COUNT(*) AS n FROM s WHERE x > 0 GROUP BY g /* once */"
    first = sess.sql(text, keys={"g": ["a", "b"]}).collect(dp.PureDP(1))
    monkeypatch.setattr(parse, "_tokens", counting("tokens", tokens))
    monkeypatch.setattr(topk, "_find", counting("find", find))
    monkeypatch.setattr(compile_module, "contains", counting("contains", contains))
    again = sess.sql(text, keys={"g": ["a", "b"]})
    assert calls["tokens"] == 0 and calls["find"] == 0
    assert calls["contains"] <= 2          # GROUP BY g and the SELECT item g: is either an aggregate?
    assert again.collect(dp.PureDP(1)).columns == first.columns == ["g", "n"]


@pytest.mark.parametrize("text, match", [
    ("SELECT g, COUNT(*) OVER () FROM s GROUP BY g", "window functions"),
    ("SELECT g, (SELECT 1) + COUNT(*) FROM s GROUP BY g", "subqueries"),
    ("SELECT g, TOP_K(COUNT(*), 1) FROM s GROUP BY g", "TOP_K"),
    ("SELECT g, COUNT(*) FROM s GROUP BY g WINDOW w AS (PARTITION BY g)", "WINDOW"),
    ("EXPLAIN ANALYZE SELECT COUNT(*) FROM s", "EXPLAIN ANALYZE"),
    ("SELEC 1", "syntax"),
])
def test_a_refused_sql_text_is_refused_every_time(text: str, match: str) -> None:
    """Errors are not cached: a refused text raises again, with the same message, each time it is asked."""
    sess = _sql_session()
    messages = []
    for _ in range(3):
        with pytest.raises(dp.DPFrameError, match=match) as e:
            sess.sql(text, keys={"g": ["a", "b"]}).collect(dp.PureDP(1))
        messages.append(str(e.value))
    assert len(set(messages)) == 1
    assert sess.spent().epsilon == 0                                   # type: ignore[union-attr]


def test_a_parse_built_by_hand_is_walked_in_full() -> None:
    """A ``Parsed`` without its text's kinds (the top-k rewrite builds one) is checked by walking its tree."""
    from dpframe.sql.parse import Parsed, parse
    from dpframe.sql.topk import top_k_call

    with_top_k = parse("SELECT g FROM s GROUP BY g HAVING TOP_K(COUNT(*), 1)")
    assert with_top_k.kinds is not None and "fn:top_k" in with_top_k.kinds
    assert top_k_call(with_top_k) is not None
    bare = Parsed(with_top_k.text, with_top_k.node, False)
    assert bare.may_contain("fn:top_k") and top_k_call(bare) is not None
    hidden = parse("SELECT g FROM s GROUP BY g")
    moved = Parsed(hidden.text, dict(hidden.node, having=with_top_k.node["having"]), False)
    assert top_k_call(moved) is not None                 # the tree, not the text, decides


# --- noise: a small scale's table serves every call ----------------------------------------------------------------

def test_a_small_counts_noise_reads_its_cached_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A count's noise (a few draws at a small scale) evaluated the certified exp of its thresholds on every call of
    the sampler: the table of p̂ that holds the same floats is built once per scale and now serves any run."""
    from dpframe.noise import SeededRandomSource, discrete_gaussian_batch, discrete_laplace_batch, samplers

    discrete_laplace_batch([Fraction(3)], [1], SeededRandomSource(0))          # the tables, built once
    discrete_gaussian_batch([Fraction(6)], [1], SeededRandomSource(0))
    evaluated = []
    exp_neg = samplers.exp_neg  # type: ignore[attr-defined]

    def counting(x: Any) -> Any:
        evaluated.append(len(x))
        return exp_neg(x)
    monkeypatch.setattr(samplers, "exp_neg", counting)
    discrete_laplace_batch([Fraction(3)], [1], SeededRandomSource(5))
    discrete_gaussian_batch([Fraction(6)], [2], SeededRandomSource(5))
    assert evaluated == []


@pytest.mark.parametrize("scales, sizes", [
    ([Fraction(3)], [1]), ([Fraction(1, 3), Fraction(3), 2**30 + 7], [5, 1, 3]), ([Fraction(100)], [40]),
])
def test_short_runs_with_tables_draw_what_they_drew_without(scales: list[Fraction], sizes: list[int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Same seed, same draws, with the small tables or without any table (what every seeded release relies on)."""
    from dpframe.noise import SeededRandomSource, discrete_gaussian_batch, discrete_laplace_batch, samplers

    def sample() -> list[int]:
        out = []
        for seed in range(40):
            rng = SeededRandomSource(seed)
            out += np.concatenate(discrete_laplace_batch(scales, sizes, rng) +
                                  discrete_gaussian_batch([s * 2 for s in scales], sizes, rng)).tolist()
        return out
    with_tables = sample()
    monkeypatch.setattr(samplers, "_threshold_table", lambda s: None)
    monkeypatch.setattr(samplers, "_acceptance_table", lambda g: None)
    assert sample() == with_tables
