"""The plugin author kit: a conformance suite, an empirical privacy audit and test helpers.

A plugin's tests subclass :class:`MechanismConformance` (pytest collects the inherited ``test_*``
methods), a backend's tests :class:`BackendConformance`; the audit helpers are plain functions that
other tests can reuse. The engine-wide audit registry (:func:`register_audit`, :func:`run_audit`,
:class:`AuditSpec`) says on which adversarial neighbouring datasets each mechanism kind is audited (see
``docs/guarantees.md``).

Example:
    >>> import dpframe as dp
    >>> from dpframe.testing import MechanismConformance
    >>> from dpframe_aggregates import AggregateMechanism
    >>> class TestCount(MechanismConformance):        # in a pytest module
    ...     mechanism = AggregateMechanism()
    ...     measures = [dp.count("x")]
    ...     bad_measures = [dp.count("no_such_column")]
    >>> from fractions import Fraction
    >>> from dpframe.noise import SeededRandomSource, discrete_laplace
    >>> a = discrete_laplace(Fraction(2), 10_000, SeededRandomSource(1))
    >>> b = 1 + discrete_laplace(Fraction(2), 10_000, SeededRandomSource(2))
    >>> epsilon_lower_bound(a, b, threshold=1) <= 0.5      # the true ε is 1/2
    True

Nothing here is private: every random source in this package is seeded and for tests only.

"""

from dpframe.testing.audit import (
    AuditResult,
    audit_claims,
    audit_curves,
    audit_release,
    audit_sampler,
    audit_samples,
    bound_extremes,
    claimed_epsilon_delta,
    curve_claims,
    epsilon_lower_bound,
    exact_statistics,
    extreme_assignments,
    neighbouring_tables,
    release_sampler,
)
from dpframe.testing.backends import BackendConformance
from dpframe.testing.builtin_audits import broken_specs
from dpframe.testing.conformance import MechanismConformance
from dpframe.testing.expost import audit_ex_post_sampler, audit_ex_post_samples
from dpframe.testing.families import FamilyConformance
from dpframe.testing.harness import (
    CountingRandomSource,
    check_refused,
    context_for,
    default_shares,
    default_table,
    measure_context,
    pin_families,
    pin_mechanisms,
    session_budget,
)
from dpframe.testing.queries import Stream, family_sampler, query_sampler, result_features
from dpframe.testing.registry import (
    AuditSpec,
    Neighbours,
    Overclaiming,
    adversarial_pairs,
    agg_sampler,
    query_entry_points,
    register_audit,
    registered_audits,
    release_outputs,
    run_audit,
    unaudited_kinds,
    unaudited_notions,
    unaudited_queries,
)
from dpframe.testing.stats import clopper_pearson, noise_cdf, noise_chisquare, noise_pmf

__all__ = [
    "AuditResult",
    "AuditSpec",
    "BackendConformance",
    "CountingRandomSource",
    "FamilyConformance",
    "MechanismConformance",
    "Neighbours",
    "Overclaiming",
    "adversarial_pairs",
    "agg_sampler",
    "Stream",
    "audit_claims",
    "audit_curves",
    "audit_ex_post_sampler",
    "audit_ex_post_samples",
    "audit_release",
    "audit_sampler",
    "audit_samples",
    "bound_extremes",
    "broken_specs",
    "check_refused",
    "claimed_epsilon_delta",
    "clopper_pearson",
    "curve_claims",
    "context_for",
    "default_shares",
    "default_table",
    "epsilon_lower_bound",
    "exact_statistics",
    "extreme_assignments",
    "family_sampler",
    "measure_context",
    "neighbouring_tables",
    "noise_cdf",
    "noise_chisquare",
    "noise_pmf",
    "pin_families",
    "pin_mechanisms",
    "query_entry_points",
    "query_sampler",
    "register_audit",
    "registered_audits",
    "release_outputs",
    "release_sampler",
    "result_features",
    "run_audit",
    "session_budget",
    "unaudited_kinds",
    "unaudited_notions",
    "unaudited_queries",
]
