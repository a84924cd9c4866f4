"""Query-level samplers: run any private query (or interactive stream) end to end through ``collect``.

:func:`query_sampler` turns ``make_query(session)`` — anything with ``cost(budget)`` and ``collect(budget)``
— into an audit sampler factory: each sample is one ``collect`` in a seeded session, so the whole engine
(planning, charging, bounding, the backend, the mechanism, ex-post settlement) is audited. Results of
every type become numeric outputs (:func:`result_features`): data frames cell by cell, tuples element by
element, result objects (``InteriorPoint``, ``Threshold``, ``Rectangle``, ``TopKFailed``, ``NoAnswer``)
field by field, and every run also reports ``"answered"`` (the result is truthy) and ``"__charged"``
(the ε or ρ the session was charged for it, after any ex-post settlement: see
:mod:`dpframe.testing.expost`).

:class:`Stream` wraps an interactive mechanism (sparse vector, target-charging channel, individual
filter) as such a query: ``cost`` is what opening it reserves, ``collect`` opens it, runs a fixed
script of calls and returns the answers.

Example:
    >>> import polars as pl, dpframe as dp
    >>> t = pl.DataFrame({"user": [1, 2, 3]})
    >>> cost, sample = query_sampler(lambda s: s.table("t").agg(dp.len()), dp.PrivacyUnit("user"))(
    ...     t, dp.PureDP(1))
    >>> sorted(sample(3, 0))
    ['__charged', 'answered', 'len[0]', 'rows']

"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.budgets import ZCDP, Budget
from dpframe.privacy_unit import PrivacyUnit
from dpframe.testing.audit import Sampler

__all__ = ["SamplerFactory", "Stream", "family_sampler", "query_sampler", "result_features", "stable_code"]

_MICROSECOND = dt.timedelta(microseconds=1)
_EPOCH = dt.datetime(1970, 1, 1)

#: ``factory(dataset, budget)`` → ``(the cost the engine charges for it, sampler(n, seed))``.
SamplerFactory = Callable[[pl.DataFrame, Budget], tuple[Budget, Sampler]]


def stable_code(value: Any) -> float:
    """A number for any value: numbers as themselves, None as NaN, anything else a stable hash code.

    Ordered values keep their order, so the audit's threshold events ``{output ≥ τ}`` mean "at or after τ":
    a ``date`` is its day number (``date.toordinal()``), a ``datetime`` its microseconds since 1970-01-01
    (exact in a float for the years 1685–2255; ``tzinfo`` dropped), a ``time`` its microseconds since
    midnight and a ``timedelta`` its microseconds. (A hash code would scatter neighbouring dates at random, so
    an audit of a date-valued release could only test equality events and would miss most of a leak.)

    Example:
        >>> import datetime as dt
        >>> stable_code(3), stable_code(None), stable_code("a") == stable_code("a")
        (3.0, nan, True)
        >>> stable_code(dt.date(2020, 1, 2)) - stable_code(dt.date(2020, 1, 1))
        1.0

    """
    if value is None:
        return math.nan
    if isinstance(value, bool | int | float | Fraction | np.integer | np.floating):
        return float(value)
    if isinstance(value, dt.datetime):
        return float((value.replace(tzinfo=None) - _EPOCH) // _MICROSECOND)
    if isinstance(value, dt.date):
        return float(value.toordinal())
    if isinstance(value, dt.time):
        return float((value.hour * 3600 + value.minute * 60 + value.second) * 10**6 + value.microsecond)
    if isinstance(value, dt.timedelta):
        return float(value // _MICROSECOND)
    return float(int.from_bytes(hashlib.sha256(repr(value).encode()).digest()[:6], "big"))


def _column(values: pl.Series) -> list[float]:
    if values.dtype.is_numeric() or values.dtype == pl.Boolean:
        return [math.nan if v is None else float(v) for v in values.to_list()]
    return [stable_code(v) for v in values.to_list()]


def result_features(result: Any, rows: int = 1) -> dict[str, float]:
    """The numeric outputs of one released result (what the audit's events are built on).

    A data frame gives ``"{column}[{i}]"`` for rows i < ``rows`` and ``"rows"`` (its height); a tuple or
    list ``"[i]"``; a dataclass one output per field (nested dicts and tuples flattened); anything else
    ``"value"``. Every result also gives ``"answered"``: 1.0 when it is truthy (not ``TopKFailed`` /
    ``NoAnswer`` / None / an empty frame).

    Example:
        >>> result_features(pl.DataFrame({"k": ["a", "b"], "n": [3, 1]}), rows=1)["n[0]"]
        3.0
        >>> result_features((2, 7))
        {'[0]': 2.0, '[1]': 7.0, 'answered': 1.0}

    """
    out: dict[str, float] = {}
    if isinstance(result, pl.DataFrame):
        out["rows"] = float(result.height)
        for column in result.columns:
            values = _column(result[column])
            for i in range(rows):
                out[f"{column}[{i}]"] = values[i] if i < len(values) else math.nan
        out["answered"] = float(result.height > 0)
        return out
    _flatten(result, "", out)
    out["answered"] = float(bool(result))
    return out


def _flatten(value: Any, prefix: str, out: dict[str, float]) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _flatten(getattr(value, f.name), f"{prefix}{f.name}.", out)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, f"{prefix}{k}.", out)
    elif isinstance(value, tuple | list):
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}[{i}].", out)
    else:
        out[prefix.rstrip(".") or "value"] = stable_code(value)


def _first(budget: Budget) -> Fraction:
    return budget.rho if isinstance(budget, ZCDP) else budget.epsilon


def _session(table: pl.DataFrame, unit: PrivacyUnit, budget: Budget, mechanisms: Sequence[Any],
             seed: int, **kwargs: Any) -> Any:
    """A seeded session over ``table`` (as ``"t"``), large enough for many queries of ``budget``."""
    from dpframe.session import Session
    from dpframe.testing.harness import pin_mechanisms, session_budget

    total = kwargs.pop("total", None) or session_budget(budget, 10**9)
    sess = Session({"t": table}, privacy_unit=unit, budget=total, seed=seed, **kwargs)
    return pin_mechanisms(sess, *mechanisms) if mechanisms else sess


def _reuse_statistics(sess: Any) -> None:
    """Compute each distinct statistics request of ``sess`` once (the data never change within a sampler).

    Memoizes :meth:`~dpframe.release.PrivateReader.statistics` (families and streams read through it; an
    ``agg`` query's own request is not memoized). Only for queries whose statistics are a deterministic
    function of the data: not for ``.sample()`` (a fresh Poisson sample at every execution).
    """
    context = sess._release
    memo: dict[tuple[Any, ...], tuple[Any, pl.DataFrame]] = {}
    make = context.reader

    def reader(backend: str | None = None) -> Any:
        inner = make(backend)
        original = inner.statistics

        def statistics(node: Any, statistics: Any, *, by: Any = (), keys: Any = None, bound: bool = True) -> Any:
            key = (id(node), tuple(by), id(keys), tuple(statistics), backend, bound)
            if key not in memo:
                memo[key] = ((node, keys), original(node, statistics, by=by, keys=keys, bound=bound))
            return memo[key][1]
        inner.statistics = statistics
        return inner
    context.reader = reader


def query_sampler(make_query: Callable[[Any], Any], unit: PrivacyUnit, *, mechanisms: Sequence[Any] = (),
                  rows: int = 1, per_session: int = 200, reuse_statistics: bool = False,
                  features: Callable[[Any], Mapping[str, float]] | None = None,
                  **session_kwargs: Any) -> SamplerFactory:
    """Samples of any query: ``make_query(session)`` returns an object with ``cost``/``collect``.

    Each sample is one ``collect`` (in a fresh seeded session every ``per_session`` runs; the session's
    total is ``total=`` if given, else 10⁹ times the audited budget). The outputs are
    ``features(result)`` (default :func:`result_features` with ``rows``; NaN where a run lacks an output
    others have) and ``"__charged"``, the ε (ρ for a zCDP session) that run was charged.
    ``reuse_statistics=True`` computes the exact statistics once per session (faster; not for
    ``.sample()``). D must not be empty.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> t = pl.DataFrame({"user": list(range(60)), "x": [5, 6, 7] * 20})
        >>> cost, sample = query_sampler(lambda s: s.table("t").interior_point("x", bounds=(0, 15), beta=0.5),
        ...                              dp.PrivacyUnit("user"))(t, dp.PureDP(4))
        >>> out = sample(3, 0)
        >>> sorted(out), out["__charged"].tolist()
        (['__charged', 'answered', 'column', 'method', 'value'], [4.0, 4.0, 4.0])

    """
    featurize = features if features is not None else (lambda r: result_features(r, rows))

    def factory(table: pl.DataFrame, budget: Budget) -> tuple[Budget, Sampler]:
        cost = make_query(_session(table, unit, budget, mechanisms, 0, **session_kwargs)).cost(budget)

        def sample(n: int, seed: int) -> dict[str, npt.NDArray[Any]]:
            runs: list[Mapping[str, float]] = []
            charged: list[float] = []
            for chunk in range(-(-n // per_session)):
                sess = _session(table, unit, budget, mechanisms, seed * 100_003 + chunk, **session_kwargs)
                if reuse_statistics:
                    _reuse_statistics(sess)
                query = make_query(sess)
                for _ in range(min(per_session, n - len(runs))):
                    before = _first(sess.spent())
                    runs.append(featurize(query.collect(budget)))
                    charged.append(float(_first(sess.spent()) - before))
            names = sorted({k for r in runs for k in r})
            out = {k: np.asarray([r.get(k, math.nan) for r in runs], dtype=np.float64) for k in names}
            out["__charged"] = np.asarray(charged)
            return out
        return cost, sample
    return factory


def family_sampler(make_query: Callable[[Any], Any], unit: PrivacyUnit, *, mechanisms: Sequence[Any] = (),
                   families: Sequence[Any] = (), rows: int = 1,
                   features: Callable[[Any], Mapping[str, float]] | None = None,
                   **session_kwargs: Any) -> SamplerFactory:
    """Fast samples of a query-family query (``frame.bounds``, ``top_k``, ``interior_point`` ...): its plan's run.

    ``make_query(session)`` returns the public query object of a registered family (``families`` are pinned
    first, :func:`~dpframe.testing.pin_families`, as ``mechanisms`` are). The query is planned once per dataset
    (the claimed cost is the plan's charge, what ``cost(budget)`` returns) and each sample is one call of the
    plan's ``run`` on the session's private reader, with the exact statistics computed once: what ``collect``
    releases, without the ledger's work per run (reserve, commit) — 10 to 100 times faster than
    :func:`query_sampler`, so an audit can afford the 10⁴–10⁵ runs that a small leak needs. Not for what the
    ledger itself decides (ex-post settlement, refusals after a charge, streams: use :func:`query_sampler`), nor
    for ``.sample()`` (its statistics are not deterministic).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> t = pl.DataFrame({"user": list(range(60)), "x": [5, 6, 7] * 20})
        >>> cost, sample = family_sampler(lambda s: s.table("t").bounds("x", domain=(0, 15)),
        ...                               dp.PrivacyUnit("user"))(t, dp.PureDP(4))
        >>> out = sample(3, 0)
        >>> cost, sorted(out)
        (PureDP(epsilon=4), ['[0]', '[1]', 'answered'])

    """
    from dpframe.noise import SeededRandomSource
    from dpframe.testing.harness import pin_families

    featurize = features if features is not None else (lambda r: result_features(r, rows))

    def factory(table: pl.DataFrame, budget: Budget) -> tuple[Budget, Sampler]:
        sess = _session(table, unit, budget, mechanisms, 0, **session_kwargs)
        if families:
            pin_families(sess, *families)
        _reuse_statistics(sess)
        query = make_query(sess)
        plan = query._planned(budget)
        reader = sess._release.reader(getattr(query._query, "backend", None))

        def sample(n: int, seed: int) -> dict[str, npt.NDArray[Any]]:
            rng = SeededRandomSource(seed)
            runs = [featurize(plan.run(reader, rng)) for _ in range(n)]
            names = sorted({k for r in runs for k in r})
            return {k: np.asarray([r.get(k, math.nan) for r in runs], dtype=np.float64) for k in names}
        return plan.charge, sample
    return factory


class Stream:
    """An interactive mechanism as a query: ``cost`` is its reservation, ``collect`` runs a fixed script.

    ``open(session, budget)`` opens the stream (an object, or a context manager that is entered);
    ``reserved(stream)`` is what opening it reserved; ``script(session, stream)`` makes the calls and
    returns the released answers (a tuple). ``collect`` closes the stream afterwards (settling any
    refund). ``cost`` opens a stream to read its reservation, so it charges the session it runs on (the
    sampler's throw-away planning session).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0] * 30})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(10), seed=0)
        >>> s = Stream(sess, lambda sess, b: sess.sparse_vector(threshold=20, max_positives=1, budget=b),
        ...            lambda sess, sv: (sv.test(sess.table("t").agg(dp.len())),),
        ...            reserved=lambda sv: sv.charged())
        >>> s.cost(dp.PureDP(1)), s.collect(dp.PureDP(1))
        (PureDP(epsilon=1), (True,))

    """

    def __init__(self, session: Any, open: Callable[[Any, Budget], Any], script: Callable[[Any, Any], tuple[Any, ...]],
                 *, reserved: Callable[[Any], Budget]) -> None:
        self.session, self._open, self._script, self._reserved = session, open, script, reserved

    def _enter(self, budget: Budget) -> Any:
        stream = self._open(self.session, budget)
        return stream.__enter__() if hasattr(stream, "__enter__") else stream

    def cost(self, budget: Budget) -> Budget:
        """What opening the stream reserves (charges this session: use it on a throw-away one)."""
        stream = self._enter(budget)
        try:
            return self._reserved(stream)
        finally:
            _close(stream)

    def collect(self, budget: Budget) -> tuple[Any, ...]:
        """Open, run the script, close; returns the script's answers."""
        stream = self._enter(budget)
        try:
            return self._script(self.session, stream)
        finally:
            _close(stream)


def _close(stream: Any) -> None:
    close = getattr(stream, "close", None)
    if close is not None:
        close()
