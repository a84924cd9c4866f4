"""Neighbour distinguishers: a lower bound on ε from everything a run shows the analyst, exceptions included.

An analyst sees more of a query than its released value: whether the run raised, the exception's type
and message (and those of its chained causes), what the session was charged, and the statuses the
ledger recorded. A *distinguisher* runs a public entry point end to end many times on two neighbouring
datasets D and D′ and records each run's **outcome**: the released value, or the exception if the run
raised — any ``BaseException``, Rust panics (``pyo3_runtime.PanicException``) included. The outcomes
feed the audit's Clopper–Pearson test (:func:`~dpframe.testing.audit_samples`: the event is chosen on a
pilot half of the runs and the bound computed on the other half), so a data-dependent error, panic or
refusal is caught like an under-noised mechanism: a difference that happens every time gives a bound
that grows without limit with the number of runs (200 runs per half bound ε ≥ 2.6 at confidence
1 − 10⁻⁶), far above any claim an audit runs at.

* :func:`catching` wraps a query factory so that ``collect`` never raises: each run returns an
  :class:`Observed` — the result or a :class:`Raised` — with the ledger statuses the run left;
* :func:`outcome_features` turns an :class:`Observed` into the numeric outputs the test reads (the
  released values as :func:`~dpframe.testing.result_features` gives them, plus ``raised``,
  ``exception``, ``message`` and ``ledger``);
* :func:`outcome_sampler` is :func:`~dpframe.testing.query_sampler` over both, and :func:`distinguisher`
  an :class:`~dpframe.testing.AuditSpec` around it: :func:`~dpframe.testing.run_audit` runs it (the
  claimed cost must not depend on the data either), and
  :func:`~dpframe.testing.unaudited_queries` lists the public entry points a set of distinguishers
  leaves uncovered.

The engine's own distinguishers are in ``tests/adversarial/test_distinguishers.py``; a plugin that adds
an entry point adds one there (or in its own suite) so the same test covers it.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from dpframe.testing import Neighbours, run_audit
    >>> unit = dp.PrivacyUnit("user")
    >>> d = pl.DataFrame({"user": list(range(20)), "x": [1.0] * 20})
    >>> pair = Neighbours("+1 unit", d, pl.concat([d, pl.DataFrame({"user": [99], "x": [1.0]})]))
    >>> sampler = outcome_sampler(lambda s: s.table("t").agg(dp.len()), unit)
    >>> spec = distinguisher("count", {"Frame.agg"}, dp.PureDP(1), sampler, [pair], runs=100)
    >>> [r.passed for r in run_audit(spec)]
    [True]

"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpframe.budgets import Budget
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.queries import SamplerFactory, query_sampler, result_features, stable_code
from dpframe.testing.registry import AuditSpec, Neighbours

__all__ = ["Observed", "Raised", "catching", "distinguisher", "outcome_features", "outcome_sampler"]


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as e:     # a message that cannot be rendered is an outcome too
        return f"<unprintable: {type(e).__name__}>"


@dataclass(frozen=True)
class Raised:
    """What an analyst sees of a run that raised: the types and messages of the exception and its chain.

    The chain follows ``__cause__`` and ``__context__`` (an analyst can read both). A ``Raised`` is
    falsy, like a run that released nothing.

    Example:
        >>> try:
        ...     try:
        ...         1 / 0
        ...     except ZeroDivisionError as e:
        ...         raise ValueError("bad") from e
        ... except ValueError as e:
        ...     r = Raised.of(e)
        >>> r.types, bool(r)
        (('builtins.ValueError', 'builtins.ZeroDivisionError'), False)

    """

    types: tuple[str, ...]
    messages: tuple[str, ...]

    @classmethod
    def of(cls, exc: BaseException) -> Raised:
        """The outcome of a run that raised ``exc``."""
        chain: list[BaseException] = []
        current: BaseException | None = exc
        while current is not None and all(current is not seen for seen in chain):
            chain.append(current)
            current = current.__cause__ or current.__context__
        return cls(tuple(_type_name(e) for e in chain), tuple(_message(e) for e in chain))

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Observed:
    """One run's outcome: its result (a :class:`Raised` if it raised) and the ledger statuses it left.

    ``ledger`` lists the status of every ledger row added since the previous run of the same query (or
    since the query was made), oldest first: e.g. ``("committed",)``, ``("failed",)``, or
    ``("reserved",)`` for a reservation a failure left open.
    """

    result: Any
    ledger: tuple[str, ...]


class _Catching:
    """``make_query(session)`` as a query whose ``collect`` never raises (see :func:`catching`)."""

    def __init__(self, session: Any, make_query: Callable[[Any], Any]) -> None:
        self.session, self._make = session, make_query
        self._query: Any = None
        self._rows = int(session.history().height)

    def cost(self, budget: Budget) -> Budget:
        cost: Budget = self._make(self.session).cost(budget)
        return cost

    def collect(self, budget: Budget) -> Observed:
        try:
            if self._query is None:
                self._query = self._make(self.session)
            result = self._query.collect(budget)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:   # panics, SystemExit ...: everything the analyst could catch
            result = Raised.of(exc)
        statuses = self.session.history()["status"].to_list()
        ledger, self._rows = tuple(statuses[self._rows:]), len(statuses)
        return Observed(result, ledger)


def catching(make_query: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``make_query`` whose queries' ``collect`` returns an :class:`Observed` instead of raising.

    The query is built on the first ``collect`` (so an exception while building it is an outcome too)
    and reused; ``cost`` builds one and asks it (exceptions propagate: the claim must be computable).
    Only ``KeyboardInterrupt`` propagates from ``collect``.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(1), seed=0)
        >>> query = catching(lambda s: s.table("t").agg(dp.len()))(sess)
        >>> query.collect(dp.PureDP(2)).result.types
        ('dpframe.errors.BudgetExceededError',)
        >>> query.collect(dp.PureDP(1)).ledger
        ('committed',)

    """
    return lambda session: _Catching(session, make_query)


def outcome_features(features: Callable[[Any], Mapping[str, float]] | None = None,
                     rows: int = 1) -> Callable[[Observed], dict[str, float]]:
    """The numeric outputs of an :class:`Observed` run, exceptions and ledger included.

    A run that released gives ``features(result)`` (default :func:`~dpframe.testing.result_features`
    with ``rows``) and ``raised = 0``; a run that raised gives ``raised = 1``, ``answered = 0``, and
    stable codes of its exception types (``exception``) and messages (``message``). Every run gives
    ``ledger``, a code of the statuses it left in the ledger.

    Example:
        >>> out = outcome_features()(Observed(Raised(("pyo3_runtime.PanicException",), ("boom",)), ("reserved",)))
        >>> out["raised"], out["answered"], out["exception"] == stable_code(("pyo3_runtime.PanicException",))
        (1.0, 0.0, True)

    """
    def featurize(result: Any) -> Mapping[str, float]:
        return features(result) if features is not None else result_features(result, rows)

    def outcome(observed: Observed) -> dict[str, float]:
        ledger = stable_code(observed.ledger)
        result = observed.result
        if isinstance(result, Raised):
            return {"raised": 1.0, "answered": 0.0, "exception": stable_code(result.types),
                    "message": stable_code(result.messages), "ledger": ledger}
        return {**featurize(result), "raised": 0.0, "ledger": ledger}
    return outcome


def outcome_sampler(make_query: Callable[[Any], Any], unit: PrivacyUnit, *,
                    features: Callable[[Any], Mapping[str, float]] | None = None, rows: int = 1,
                    **kwargs: Any) -> SamplerFactory:
    """:func:`~dpframe.testing.query_sampler` over :func:`catching` queries and :func:`outcome_features`.

    ``kwargs`` go to ``query_sampler`` (``reuse_statistics``, ``per_session``, ``mechanisms``, and the
    ``Session`` arguments such as ``backend``, ``accountant`` or ``total``).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> t = pl.DataFrame({"user": [1, 2, 3]})
        >>> cost, sample = outcome_sampler(lambda s: s.table("t").agg(dp.len()), dp.PrivacyUnit("user"))(
        ...     t, dp.PureDP(1))
        >>> out = sample(2, 0)
        >>> sorted(out), out["raised"].tolist()
        (['__charged', 'answered', 'ledger', 'len[0]', 'raised', 'rows'], [0.0, 0.0])

    """
    return query_sampler(catching(make_query), unit, features=outcome_features(features, rows), **kwargs)


def distinguisher(name: str, queries: Iterable[str], budget: Budget, sampler: SamplerFactory,
                  pairs: Sequence[Neighbours], *, runs: int = 100, slow_runs: int = 1_000, fast: bool = True,
                  known_bug: str | None = None, notes: str = "") -> AuditSpec:
    """An :class:`~dpframe.testing.AuditSpec` auditing the outcomes ``sampler`` records on ``pairs``.

    ``queries``: the public entry points it covers (:func:`~dpframe.testing.query_entry_points`);
    ``budget``: what each run is collected at; ``sampler``: usually an :func:`outcome_sampler`;
    ``runs`` / ``slow_runs``: runs per dataset and half in the default and the slow test run (the
    default run audits the first pair only). ``known_bug``: the reason a test suite marks the spec
    ``xfail(strict=True)`` until the bug is fixed. No measure kind or noise notion is claimed covered.

    Example:
        >>> import dpframe as dp
        >>> spec = distinguisher("len", {"Frame.agg"}, dp.PureDP(1),
        ...                      outcome_sampler(lambda s: s.table("t").agg(dp.len()), dp.PrivacyUnit.row()), [])
        >>> spec.queries, spec.samples, spec.fast_pairs, spec.covered()
        (frozenset({'Frame.agg'}), 100, 1, set())

    """
    listed = list(pairs)
    return AuditSpec(name, frozenset(), budget, lambda: listed, sampler, samples=runs, slow_samples=slow_runs,
                     fast=fast, queries=frozenset(queries), notions=frozenset(), known_bug=known_bug, notes=notes,
                     fast_pairs=1)
