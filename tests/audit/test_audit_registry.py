"""The privacy audit of every registered mechanism on adversarial neighbouring datasets.

* Every spec in the registry (``dpframe.testing.registered_audits()``) passes: the Clopper–Pearson lower
  bound on the realised ε (confidence 1 − 10⁻⁶) does not exceed the claimed ε at the claimed δ, on every
  pair, and the strongest pair reaches ``min_power`` × ε (the audit is strong enough to catch a factor 2).
* Every measure kind an installed mechanism handles is covered by a spec, at every noise notion it
  declares (``pure``, ``zcdp``, ``approx``), and every public query entry point (the release methods of
  ``Frame``, ``GroupBy`` and ``Session``, each top-k method, the PTR / early-stopping helpers, PATE) is
  covered by a query-level spec: a new mechanism plugin or query method without one fails here (register
  a spec, see ``docs/guarantees.md``).
* Query-level specs run the query end to end through ``collect`` (``dpframe.testing.query_audits``);
  ex-post (output-DP) mechanisms are also audited cell by cell against the ε each run was settled to,
  and a deliberately broken refund is caught. A spec that fails because of a known, reported bug is
  ``xfail(strict=True)`` with the bug's id: the fix makes it XPASS, a failure that asks for the mark to go.
* Deliberately broken mechanisms (noise scale halved; a selection threshold meant for 50 × δ) are caught,
  at the release level and end to end through ``Session.collect``.

Default run: 20 000 runs per dataset and pair for the release-level specs; the fast query-level specs on
their first pair with a few hundred to a few thousand runs. ``-m slow``: every spec on every pair with ten
times the runs (200 000 for release-level specs: ε bounds within a few % of the claim), and the end-to-end
audits of the correct mechanisms.
"""

from __future__ import annotations

import polars as pl
import pytest

import dpframe as dp
from dpframe.plugin import plugin_host
from dpframe.testing import (
    AuditSpec,
    Neighbours,
    Overclaiming,
    audit_sampler,
    broken_specs,
    query_entry_points,
    query_sampler,
    registered_audits,
    run_audit,
    unaudited_kinds,
    unaudited_notions,
    unaudited_queries,
)

SPECS = registered_audits()


def _params(specs: list[AuditSpec]) -> list[object]:
    """Specs as pytest params; one failing on a known, reported bug is xfail(strict=True) with its id."""
    return [pytest.param(s, id=s.name, marks=pytest.mark.xfail(strict=True, reason=s.known_bug))
            if s.known_bug else pytest.param(s, id=s.name) for s in specs]


def _check(spec: AuditSpec, samples: int, seed: int, pairs: int | None = None) -> None:
    results = run_audit(spec, samples=samples, seed=seed, pairs=pairs)
    for r in results:
        print(r)
    bad = [r for r in results if not r.passed]
    assert not bad, "privacy audit failed:\n" + "\n".join(map(str, bad))
    best = max(results, key=lambda r: r.epsilon_lower_bound)
    assert best.epsilon_lower_bound >= spec.min_power * best.claimed_epsilon, (
        f"the audit of {spec.name} is too weak to catch anything: {best}")


@pytest.mark.parametrize("spec", _params([s for s in SPECS if s.fast]))
def test_mechanism_passes_audit(spec: AuditSpec) -> None:
    _check(spec, spec.samples, seed=1, pairs=spec.fast_pairs)


@pytest.mark.slow
@pytest.mark.parametrize("spec", _params(SPECS))
def test_mechanism_passes_large_audit(spec: AuditSpec) -> None:
    _check(spec, spec.slow_samples, seed=2)


def _installed_kinds() -> list[str]:
    return sorted({k for _, m in plugin_host().mechanisms() for k in m.handles})


@pytest.mark.parametrize("kind", _installed_kinds())
def test_every_installed_mechanism_kind_is_audited(kind: str) -> None:
    missing = unaudited_kinds(plugin_host())
    assert kind not in missing, (
        f"measure kind {kind!r} (mechanism {missing.get(kind)!r}) has no audit spec: register one with "
        "dpframe.testing.register_audit(AuditSpec(...)) in dpframe/testing/builtin_audits.py "
        "(see docs/guarantees.md, 'Adding a mechanism to the audit')")


def _installed_notions() -> list[str]:
    return sorted({f"{k}@{n}" for _, m in plugin_host().mechanisms() for k in m.handles for n in m.notions})


@pytest.mark.parametrize("kind_notion", _installed_notions())
def test_every_installed_mechanism_notion_is_audited(kind_notion: str) -> None:
    missing = unaudited_notions(plugin_host())
    assert kind_notion not in missing, (
        f"{kind_notion!r} (mechanism {missing.get(kind_notion)!r}) has no audit spec at this noise notion: register "
        "an AuditSpec whose budget has that notion (e.g. dp.ZCDP(1/2) for 'zcdp') in dpframe/testing/builtin_audits.py")


@pytest.mark.parametrize("entry_point", query_entry_points())
def test_every_query_entry_point_is_audited(entry_point: str) -> None:
    assert entry_point not in unaudited_queries(), (
        f"the query entry point {entry_point} has no audit spec: register an AuditSpec with "
        f"queries={{{entry_point!r}}} (a query_sampler over the query) in dpframe/testing/query_audits.py "
        "(see docs/guarantees.md, 'Adding a mechanism to the audit')")


def test_a_new_query_method_without_spec_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A public method added to Frame / GroupBy / Session is an entry point the audit suite asks a spec for."""
    assert unaudited_queries() == []
    monkeypatch.setattr(dp.Frame, "private_median", lambda self, column: None, raising=False)
    monkeypatch.setattr(dp.Session, "private_stream", lambda self: None, raising=False)
    assert unaudited_queries() == ["Frame.private_median", "Session.private_stream"]
    gumbel = [s for s in SPECS if "GroupBy.top_k[method=gumbel]" in s.queries]
    assert unaudited_queries([s for s in SPECS if s not in gumbel], ["GroupBy.top_k[method=gumbel]"]) == [
        "GroupBy.top_k[method=gumbel]"]


def test_unaudited_notions_reports_a_missing_notion() -> None:
    without_zcdp_len = [s for s in SPECS if ("len", "zcdp") not in s.covered()]
    assert unaudited_notions(plugin_host(), without_zcdp_len) == {"len@zcdp": "aggregates"}


def test_unaudited_kinds_reports_a_mechanism_without_spec() -> None:
    without_len = [s for s in SPECS if "len" not in s.kinds]
    host = plugin_host()
    missing = unaudited_kinds(host, without_len)
    assert missing["len"] == "aggregates"
    assert set(missing) - set(unaudited_kinds(host)) == {"len"}


@pytest.mark.parametrize("spec", broken_specs(), ids=lambda s: s.name)
def test_audit_catches_broken_mechanism(spec: AuditSpec) -> None:
    results = run_audit(spec, seed=3)
    caught = [r for r in results if not r.passed]
    assert caught, f"the audit missed a broken mechanism: {spec.name}\n" + "\n".join(map(str, results))
    assert max(r.epsilon_lower_bound / r.claimed_epsilon for r in caught) > 1.5, caught


def test_audit_catches_a_broken_refund(monkeypatch: pytest.MonkeyPatch) -> None:
    """An output-DP mechanism that settles its cells to 1/8 of their ε is caught by the per-cell audit."""
    from dpframe.budgets import make
    from dpframe.interactive.odp import OdpSpec

    original = OdpSpec.budget

    def stingy(self: OdpSpec, cell: str | None = None) -> dp.Budget:
        full = original(self, cell)
        return full if cell is None else make(full.notion, full.epsilon / 8, getattr(full, "delta", 0))

    monkeypatch.setattr(OdpSpec, "budget", stingy)
    spec = next(s for s in SPECS if "dpframe.interactive.ptr:gated_release" in s.queries)
    results = run_audit(spec, samples=300, seed=3, pairs=1)      # half the spec's runs: a refund to 1/8 is glaring
    claim, cells = results
    assert claim.passed, claim                # the reservation (the worst cell) is still right
    assert not cells.passed, f"the per-cell audit missed a refund to 1/8 of each cell's ε: {cells}"


def test_audit_refuses_a_data_dependent_cost() -> None:
    table = pl.DataFrame({"user": [1, 2]})
    pairs = [Neighbours("two vs three", table, pl.concat([table, pl.DataFrame({"user": [3]})]))]

    def factory(data: pl.DataFrame, budget: dp.Budget):       # cost grows with the number of rows
        return dp.PureDP(data.height), lambda n, seed: {"x": [0] * n}

    spec = AuditSpec("data-dependent", frozenset(), dp.PureDP(1), lambda: pairs, factory)
    with pytest.raises(AssertionError, match="the cost depends on the data"):
        run_audit(spec)


# ------------------------------------------------------------------------------ end to end (collect)

UNIT = dp.PrivacyUnit("user", max_rows=2)
BASE = pl.DataFrame({"user": [u for u in range(20) for _ in range(1 + u % 2)]})
PLUS = pl.concat([BASE, pl.DataFrame({"user": [99, 99]})])


def _len_query(sess: dp.Session) -> dp.Query:
    return sess.table("t").agg(dp.len())


def _session_audit(mechanisms: tuple[object, ...], samples: int, claimed: float = 1.0):
    factory = query_sampler(_len_query, UNIT, mechanisms=mechanisms)
    cost, a = factory(BASE, dp.PureDP(claimed))
    same, b = factory(PLUS, dp.PureDP(claimed))
    assert cost == same == dp.PureDP(claimed)
    return audit_sampler(a, b, claimed_epsilon=claimed, samples=samples, seed=7)


def test_session_collect_catches_halved_noise() -> None:
    """Through the whole engine (planner, backend, bounding, ledger): a 4× over-claiming count is caught."""
    broken = Overclaiming(plugin_host().mechanism_for("len", "pure"), factor=4)
    result = _session_audit((broken,), samples=400)
    print(result)
    assert not result.passed, result


@pytest.mark.slow
def test_session_collect_passes_audit() -> None:
    result = _session_audit((), samples=4000)
    print(result)
    assert result.passed and result.epsilon_lower_bound > 0.5, result
