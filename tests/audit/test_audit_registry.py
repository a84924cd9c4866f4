"""The privacy audit of every registered mechanism on adversarial neighbouring datasets.

* Every spec in the registry (``dpframe.testing.registered_audits()``) passes: the Clopper–Pearson lower
  bound on the realised ε (confidence 1 − 10⁻⁶) does not exceed the claimed ε at the claimed δ, on every
  pair, and the strongest pair reaches ``min_power`` × ε (the audit is strong enough to catch a factor 2).
* Every measure kind an installed mechanism handles is covered by a spec (a new mechanism plugin without
  one fails here: register a spec, see ``docs/guarantees.md``).
* Deliberately broken mechanisms (noise scale halved; a selection threshold meant for 50 × δ) are caught,
  at the release level and end to end through ``Session.collect``.

Default run: 20 000 runs per dataset and pair. ``-m slow``: 200 000 runs (ε bounds within a few % of
the claim) and the end-to-end audits of the correct mechanisms.
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
    query_sampler,
    registered_audits,
    run_audit,
    unaudited_kinds,
)

SPECS = registered_audits()


def _check(spec: AuditSpec, samples: int, seed: int) -> None:
    results = run_audit(spec, samples=samples, seed=seed)
    for r in results:
        print(r)
    bad = [r for r in results if not r.passed]
    assert not bad, "privacy audit failed:\n" + "\n".join(map(str, bad))
    best = max(results, key=lambda r: r.epsilon_lower_bound)
    assert best.epsilon_lower_bound >= spec.min_power * best.claimed_epsilon, (
        f"the audit of {spec.name} is too weak to catch anything: {best}")


@pytest.mark.parametrize("spec", [s for s in SPECS if s.fast], ids=lambda s: s.name)
def test_mechanism_passes_audit(spec: AuditSpec) -> None:
    _check(spec, spec.samples, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
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
