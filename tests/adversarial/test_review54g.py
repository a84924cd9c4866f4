"""Review 54g: every privacy claim says what it protects (neighbouring relation + guarantee), for every release path.

The registry (:func:`dpframe.testing.query_entry_points`: every public query method, registered family and method
variant, the module-level entry points and the plugins' own, plus every installed mechanism) is enumerated, and
each path must

* have a row in ``docs/guarantees.md``'s "What each release protects" table whose relation starts with one of
  :data:`dpframe.privacy_unit.RELATIONS`' phrases and whose guarantee names a notion (ε / δ / ρ / RDP) — and no
  row may name a path the registry does not have;
* have a ``Protects:`` paragraph in its docstring, starting with the same relation phrase as its row;
* and ``explain()`` must show a ``protects:`` line: the session's unit for every session query, PATE's record or
  teacher for PATE (which is not the session's unit), and a family's own ``Explain.protects`` only in
  ``RELATIONS``' vocabulary (anything else is a PluginError, before anything is charged).
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.errors import PluginError
from dpframe.family import Explain, FamilyPlan, Releasable, guarantee
from dpframe.frame import Frame, GroupBy
from dpframe.plugin import plugin_host
from dpframe.privacy_unit import RELATIONS
from dpframe.session import Session
from dpframe.testing.registry import query_entry_points

DOC = Path(__file__).resolve().parents[2] / "docs" / "guarantees.md"
NOTION = re.compile(r"ε|δ|ρ|RDP|zCDP")


def release_paths() -> list[str]:
    """Every entry point, and ``mechanism:<name>`` for every installed mechanism."""
    return query_entry_points() + [f"mechanism:{m.name}" for _, m in plugin_host().mechanisms()]


def documented(path: str) -> Any:
    """The object whose docstring documents ``path``."""
    base = path.split("[", 1)[0]
    if base.startswith("mechanism:"):
        return type({m.name: m for _, m in plugin_host().mechanisms()}[base.partition(":")[2]])
    if ":" in base:
        module, _, attribute = base.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attribute.split("."):
            obj = getattr(obj, part)
        return obj
    owner_name, _, name = base.partition(".")
    owner = {"Frame": Frame, "GroupBy": GroupBy, "Session": Session}[owner_name]
    if name in vars(owner):
        return vars(owner)[name]
    family = {e.name: e.item for e in plugin_host().families()}[name]
    return getattr(family, "takes", None) or type(family)


def table() -> dict[str, tuple[str, str]]:
    """``{path: (protects, guarantee)}`` from the docs table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### What each release protects", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.fullmatch(r"\| `([^`]+)` \| (.+) \| (.+) \|", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} has two rows"
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def relation_of(text: str) -> str | None:
    """The RELATIONS key whose phrase ``text`` starts with (case-insensitively), if any."""
    return next((k for k, v in RELATIONS.items() if text.lower().startswith(v.lower())), None)


def test_every_release_path_has_a_row_in_the_guarantees_table() -> None:
    rows, paths = table(), release_paths()
    assert sorted(set(paths) - set(rows)) == [], "release paths with no 'What each release protects' row"
    extra = {p for p in set(rows) - set(paths) if not p.startswith("option:")}
    assert sorted(p for p in extra if not p.startswith("api:")) == [], \
        "rows for paths the registry does not have (renamed or removed?)"
    for api in extra:                                            # public building blocks outside the registry
        _resolve(api.removeprefix("api:"))
    assert {"option:collect(ci=...)", "option:collect(diagnostics=True)"} <= set(rows)
    for path, (protects, promise) in rows.items():
        assert relation_of(protects), f"{path}: {protects!r} starts with no relation of {list(RELATIONS.values())}"
        assert NOTION.search(promise), f"{path}: its guarantee {promise!r} names no notion (ε, δ, ρ, RDP)"


def test_every_release_path_documents_what_it_protects() -> None:
    rows = table()
    apis = [p for p in rows if p.startswith("api:")]
    for path in release_paths() + apis:
        target = _resolve(path.removeprefix("api:")) if path.startswith("api:") else documented(path)
        doc = inspect.getdoc(target) or ""
        m = re.search(r"^Protects: (.+)", doc, re.MULTILINE)
        assert m, f"{path}: its docstring ({target!r}) has no 'Protects:' paragraph"
        assert relation_of(m.group(1)) == relation_of(rows[path][0]), \
            f"{path}: its docstring and docs/guarantees.md name different relations"
        assert "Guarantee" in doc, f"{path}: its 'Protects:' paragraph states no guarantee"


def test_pate_says_it_protects_a_record_or_a_teacher_not_the_unit() -> None:
    from dpframe_topk import MultiLabelPATE

    record = MultiLabelPATE().explain(10)
    teacher = MultiLabelPATE(privacy_unit="teacher").explain(10)
    assert "protects: add/remove one training record (not the session's privacy unit)" in record
    assert "protects: add/remove one teacher (not the session's privacy unit)" in teacher
    assert "δ-approximate ρ-zCDP" in record
    assert relation_of(table()["dpframe_topk:MultiLabelPATE.collect"][0]) == "record"


def _session(unit: dp.PrivacyUnit, budget: object = None) -> dp.Session:
    data = pl.DataFrame({"u": [1, 2, 3, 3], "x": [1.0, 2.0, 3.0, 4.0], "y": [0, 1, 0, 1], "g": ["a", "b", "a", "a"]})
    return dp.Session({"t": data}, privacy_unit=unit, budget=budget or dp.ApproxDP(50, 1e-5), seed=0)


UNIT = dp.PrivacyUnit("u", max_rows=2)


def _queries(sess: dp.Session) -> dict[str, tuple[Callable[[], Any], object]]:
    t = sess.table("t")
    pure, approx = dp.PureDP(1), dp.ApproxDP(1, 1e-7)
    return {
        "Frame.agg": (lambda: t.agg(dp.len(), dp.mean("x", bounds=(0, 5))), pure),
        "GroupBy.agg": (lambda: t.group_by("g").agg(dp.len()), approx),
        "GroupBy.top_k": (lambda: t.group_by("g").top_k(k=1), approx),
        "Frame.bounds": (lambda: t.bounds("x"), pure),
        "Frame.interior_point": (lambda: t.interior_point("x", bounds=(0, 10)), pure),
        "Frame.learn_threshold": (lambda: t.learn_threshold("x", label="y", bounds=(0, 10)), pure),
        "Frame.learn_rectangle": (lambda: t.learn_rectangle(["x"], label="y", bounds={"x": (0, 10)}), pure),
        "Frame.linear_regression": (lambda: t.linear_regression(["x"], "y", bounds={"x": (0, 10), "y": (0, 1)}), pure),
        "Frame.sample": (lambda: t.sample(0.5).agg(dp.len()), pure),
        "Session.sql": (lambda: sess.sql("SELECT COUNT(*) AS n FROM t"), pure),
        "dpframe.interactive.ptr:robust_median": (lambda: dp.interactive.ptr.robust_median(t, "x", (0, 10)), approx),
    }


@pytest.mark.parametrize("unit", [UNIT, dp.PrivacyUnit.row(), dp.PrivacyUnit("u", max_rows="auto")], ids=repr)
def test_explain_shows_the_relation_and_the_notion(unit: dp.PrivacyUnit) -> None:
    sess = _session(unit)
    for path, (build, budget) in _queries(sess).items():
        if unit.auto and path not in ("Frame.agg", "GroupBy.agg", "Session.sql", "Frame.linear_regression"):
            continue                               # other endings need numbers under "auto" (refused, free)
        query = build()
        text = query.explain(budget)
        line = next((ln for ln in text.splitlines() if ln.startswith("protects: ")), None)
        assert line is not None, f"{path}: explain() has no protects: line"
        assert line.startswith(f"protects: {unit.protects()}; guarantee: "), (path, line)
        cost = query.cost(budget)
        assert line.endswith(guarantee(cost)), (path, line, cost)
        assert query.explain(budget, format="json")["protects"] == line.removeprefix("protects: ")
    assert sess.spent().epsilon == 0 and sess.history().height == 0          # explain is free


def test_the_unit_statement_is_whom_it_protects_not_what_it_keeps() -> None:
    assert dp.PrivacyUnit("u", max_rows=3).protects() == (
        "add/remove one privacy unit: every row whose 'u' holds one id, however many (each query keeps ≤ 3 of them)")
    assert dp.PrivacyUnit("u", max_rows=3, max_groups=2).protects().endswith("keeps ≤ 3 of them, in ≤ 2 groups)")
    assert "chosen privately" in dp.PrivacyUnit("u", max_rows="auto", max_groups="auto").protects()
    assert dp.PrivacyUnit.row().protects() == "add/remove one privacy unit: one row (dp.PrivacyUnit.row())"
    assert [guarantee(b) for b in (dp.PureDP(1), dp.ApproxDP(1, 0), dp.ApproxDP(1, 1e-9), dp.ZCDP(1),
                                   dp.ZCDP(1, 1e-9))] == [
        "ε-DP at the cost below", "ε-DP at the cost below", "(ε, δ)-DP at the cost below",
        "ρ-zCDP at the cost below", "δ-approximate ρ-zCDP at the cost below"]


class _Claims:
    """A toy family whose plan claims ``protects`` (a plugin's own relation, or a made-up one)."""

    name, attach, methods, result_types = "claims", "frame", (), {}

    def __init__(self, protects: str | None) -> None:
        self.protects = protects

    def build(self, source: Any) -> Any:
        claims = self

        class Query:
            def describe(self) -> str:
                return "claims()"

            def plan(self, budget: Any) -> FamilyPlan[int]:
                charge = source.context.accountant.charge(budget)
                return FamilyPlan(budget, budget, charge, "claims", Explain("claims query", protects=claims.protects),
                                  lambda reader, rng: 0)

        return Query()


def _family_query(protects: str | None) -> tuple[dp.Session, Releasable[int]]:
    from dpframe.family import Source
    from dpframe.frame import _ENGINE

    sess = _session(UNIT)
    family = _Claims(protects)
    frame = sess.table("t")
    source = Source(frame._node, sess.plan_context)
    return sess, Releasable(sess, family.build(source), family="claims", _engine=_ENGINE)


def test_a_family_states_its_own_relation_only_in_the_known_vocabulary() -> None:
    sess, own = _family_query("add/remove one teacher: a plugin's teacher ensemble")
    assert "protects: add/remove one teacher: a plugin's teacher ensemble; guarantee: ε-DP" in own.explain(dp.PureDP(1))
    sess, default = _family_query(None)
    assert f"protects: {UNIT.protects()}; guarantee: ε-DP" in default.explain(dp.PureDP(1))
    sess, vague = _family_query("privacy")
    with pytest.raises(PluginError, match="names no neighbouring relation") as info:
        vague.explain(dp.PureDP(1))
    assert info.value.argument == "query" and "RELATIONS" in str(info.value)
    assert sess.spent().epsilon == 0 and sess.history().height == 0


# ------------------------------------------------------------------ derived formulas: the proofs checked exactly

def _hockey(p: list[float], q: list[float], x: float) -> float:
    """H_x(P‖Q) = Σ (p − x·q)₊ of two distributions on one finite set."""
    return sum(max(0.0, a - x * b) for a, b in zip(p, q))


def test_subsampled_profiles_are_the_add_and_remove_pairs_of_an_asymmetric_mechanism() -> None:
    """hs_subsampled's two profiles are the exact add and remove pairs of Thm 3.3.5 (docstring's proof).

    M(D) = Bernoulli(0.9) when x ∈ D, Bernoulli(0.2) otherwise: (P, Q) = (M(S ∪ {x}), M(S)) is a tight remove pair,
    asymmetric, so the add direction (Q, (1 − γ)Q + γP) differs from the pair (P, (1 − γ)P + γQ) a reading of the
    theorem with (P, Q) as its *add* pair would take — at γ = 0.3, ε = 0.1 by 0.0105 in δ: under-reported if taken.
    """
    import numpy as np

    from dpframe.accounting.numerics.subsampling import hs_subsampled

    p, q, rate = [0.9, 0.1], [0.2, 0.8], 0.3
    hs = np.vectorize(lambda e: _hockey(p, q, math.exp(e)), otypes=[float])
    hs_rev = np.vectorize(lambda e: _hockey(q, p, math.exp(e)), otypes=[float])
    rem, add = hs_subsampled(hs, hs_rev, rate)
    mix = [(1 - rate) * b + rate * a for a, b in zip(p, q)]            # M∘S(S ∪ {x}) = (1 − γ)Q + γP
    other = [(1 - rate) * a + rate * b for a, b in zip(p, q)]          # (1 − γ)P + γQ: not a pair of M∘S
    for e in (0.0, 0.05, 0.1, 0.3, 0.6, 1.0, 2.0):
        x = math.exp(e)
        exact_remove, exact_add = _hockey(mix, q, x), _hockey(q, mix, x)   # D ∋ x vs D − x; D vs D + x
        assert exact_remove <= float(rem(np.array([e]))[0]) <= exact_remove * (1 + 1e-12) + 1e-300
        assert exact_add <= float(add(np.array([e]))[0]) <= exact_add * (1 + 1e-12) + 1e-300
    assert _hockey(q, mix, math.exp(0.1)) - _hockey(p, other, math.exp(0.1)) > 0.01


def formula_rows() -> list[tuple[str, str, str, str, list[str]]]:
    """(formula, code, proof, status, tests) for every row of docs/guarantees.md's derived-formula table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### Where each derived formula is proved", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.fullmatch(r"\| (.+?) \| `([^`]+)` \| (.+?) \| (.+?) \| (.+) \|", line)
        if m:
            rows.append((m.group(1), m.group(2), m.group(3), m.group(4), re.findall(r"`([^`]+)`", m.group(5))))
    return rows


def _resolve(ref: str) -> Any:
    module, _, attribute = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, attribute.split(".")):
        obj = getattr(obj, part)
    return obj


PROOF = re.compile(r"Proof|proof|∎|Thm|Theorem|Lemma|Prop\.|Cor\.|Assumption|assumption|composition|≤|≥")
STATUS = ("proved here", "cited", "assumption", "partly unproven")


def test_every_derived_formula_names_a_proof_that_exists() -> None:
    rows, root = formula_rows(), DOC.parents[1]
    assert len(rows) >= 25, "the derived-formula table lost rows"
    for formula, code, proof, status, tests in rows:
        target = _resolve(code)                                   # the code named exists
        assert status.startswith(STATUS), f"{formula}: status {status!r}"
        assert tests and all((root / t).is_file() for t in tests), f"{formula}: a test named does not exist: {tests}"
        if "›" in proof:                                          # a section of a docs page
            page, _, heading = proof.partition(" › ")
            assert heading in (root / "docs" / page).read_text(encoding="utf-8"), f"{formula}: no {heading!r} in {page}"
            continue
        named = re.match(r"docstring of ([\w.]+)", proof)
        doc = inspect.getdoc(importlib.import_module(named.group(1)) if named else target) or ""
        assert PROOF.search(doc), f"{formula}: the docstring named holds no proof, theorem or assumption"
        if status.startswith("assumption"):
            assert "assum" in doc.lower() or "stated" in doc.lower(), f"{formula}: the assumption is not stated there"


@pytest.mark.parametrize("ids", [pl.Series("u", range(300), dtype=pl.Int64),
                                 pl.Series("u", [f"user-{i}" for i in range(300)]),
                                 pl.Series("u", [i * 2**32 for i in range(300)], dtype=pl.UInt64)],
                         ids=["consecutive ints", "strings", "multiples of 2^32"])
def test_poisson_inclusion_is_independent_per_unit_empirically(ids: pl.Series) -> None:
    """The stated assumption of ``dpframe.plan.sample`` (inclusion independent, probability ``rate``), measured.

    2,000 fresh seeds at rate 0.1 through :meth:`Sample.apply_seeded` itself: each id's inclusion count and each
    adjacent pair's joint count within 6 standard deviations of Bin(2000, 0.1) and Bin(2000, 0.01), and the pooled
    joint count of all adjacent pairs within 6 standard deviations of its mean (a hash correlating neighbours fails).
    """
    import numpy as np

    from dpframe.plan.nodes import Scan
    from dpframe.plan.sample import Sample

    rate, seeds = 0.1, 2000
    sample = Sample.of(Scan.of("t", pl.Schema({"u": ids.dtype})), rate, "u")
    frame = pl.DataFrame({"u": ids}).with_row_index("i").lazy()
    kept = np.zeros((seeds, len(ids)), dtype=bool)
    for s in range(seeds):
        kept[s, sample.apply_seeded(frame, 7_919 * s + 12_345).select("i").collect()["i"].to_numpy()] = True
    sd = math.sqrt(seeds * rate * (1 - rate))
    assert np.abs(kept.sum(axis=0) - seeds * rate).max() <= 6 * sd
    joint = (kept[:, 1:] & kept[:, :-1]).sum(axis=0)
    sd2 = math.sqrt(seeds * rate**2 * (1 - rate**2))
    assert np.abs(joint - seeds * rate**2).max() <= 6 * sd2
    assert abs(joint.sum() - joint.size * seeds * rate**2) <= 6 * sd2 * math.sqrt(joint.size) * 2
