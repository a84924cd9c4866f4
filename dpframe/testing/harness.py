"""Fixtures and helpers for testing mechanism plugins outside a real installation.

* :func:`measure_context` — a :class:`~dpframe.mechanism.MeasureContext` without a session.
* :func:`default_shares` — budget shares to calibrate to, by the notions a mechanism accepts.
* :func:`default_table` — a small private table holding the columns some measures need.
* :func:`pin_mechanisms` — make a session route measures to given mechanism objects first (so a mechanism
  under test need not be installed, and a deliberately broken variant can run end to end).
* :func:`pin_families` — the same for query families: a session builds a query name with a given family object.
* :func:`check_refused` — assert that a measure is refused with a :class:`~dpframe.errors.DPFrameError`.
* :class:`CountingRandomSource` — a seeded (test-only) random source that counts the words drawn.

Example:
    >>> import dpframe as dp
    >>> from dpframe_aggregates import AggregateMechanism
    >>> plan = AggregateMechanism().plan([dp.len()], measure_context(), dp.PureDP(1))
    >>> plan.cost
    PureDP(epsilon=1)

"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from dpframe.budgets import ZCDP, ApproxDP, Budget, Notion, PureDP, make
from dpframe.errors import DPFrameError, PluginError
from dpframe.family import QueryFamily
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, Mechanism
from dpframe.noise import SeededRandomSource
from dpframe.plugin import PluginHost, Registry
from dpframe.plugin.manager import check_declared, check_family, check_result_types
from dpframe.privacy_unit import PrivacyUnit

__all__ = [
    "CountingRandomSource",
    "check_refused",
    "default_shares",
    "default_table",
    "measure_context",
    "pin_families",
    "pin_mechanisms",
]

DEFAULT_SCHEMA = pl.Schema({"user": pl.Int64, "group": pl.String, "x": pl.Float64, "spend": pl.Float64,
                            "age": pl.Float64, "name": pl.String})


def measure_context(*, max_rows: int = 3, unit: PrivacyUnit | None = None,
                    schema: pl.Schema | Mapping[str, Any] | None = None, grouped: bool = False,
                    notion: Notion = "pure") -> MeasureContext:
    """A context as the planner would build it (default: unit ``user`` with ``max_rows`` rows).

    ``notion`` is the planner's noise notion: ``"zcdp"`` for zCDP query budgets, ``"pure"`` otherwise.

    Example:
        >>> measure_context(max_rows=5).unit
        PrivacyUnit('user', max_rows=5)

    """
    the_unit = unit if unit is not None else PrivacyUnit("user", max_rows=max_rows)
    the_schema = DEFAULT_SCHEMA if schema is None else pl.Schema(schema)
    return MeasureContext(the_unit, the_schema, grouped, notion)


def context_for(share: Budget, unit: PrivacyUnit, schema: pl.Schema, grouped: bool = False) -> MeasureContext:
    """The context the planner builds for a query budget of ``share``'s notion.

    Example:
        >>> import dpframe as dp
        >>> context_for(dp.ZCDP(0.5), dp.PrivacyUnit.row(), DEFAULT_SCHEMA).notion
        'zcdp'

    """
    return MeasureContext(unit, schema, grouped, "zcdp" if share.notion == "zcdp" else "pure")


def default_shares(notions: Iterable[str]) -> list[Budget]:
    """Shares to calibrate to: a few pure ε, zCDP ρ and approximate (ε, δ) values, as ``notions`` allow.

    Example:
        >>> [b.notion for b in default_shares({"pure", "zcdp"})]
        ['pure', 'pure', 'pure', 'zcdp', 'zcdp']

    """
    wanted = set(notions)
    out: list[Budget] = []
    if "pure" in wanted:
        out += [PureDP(1), PureDP(Fraction(1, 3)), PureDP(Fraction(5, 2))]
    if "zcdp" in wanted:
        out += [ZCDP(Fraction(1, 2)), ZCDP(Fraction(1, 8))]
    if "approx" in wanted:
        out += [ApproxDP(1, Fraction(1, 10**6)), ApproxDP(Fraction(1, 4), Fraction(1, 10**9))]
    return out


def session_budget(share: Budget, scale: int = 1000) -> Budget:
    """A session total of ``share``'s notion, ``scale`` times larger in ε/ρ, with room for δ.

    Example:
        >>> import dpframe as dp
        >>> session_budget(dp.PureDP(1))
        PureDP(epsilon=1000)

    """
    first = share.rho if isinstance(share, ZCDP) else share.epsilon
    delta = getattr(share, "delta", Fraction(0))
    total = make(share.notion, first * scale, min(Fraction(1, 2), delta * scale) if delta else Fraction(0))
    return total


def _spread(i: int) -> float:
    return (i * 0.6180339887498949) % 1.0


def default_table(measures: Sequence[Measure] = (), *, unit: PrivacyUnit | None = None, units: int = 45,
                  group_column: str | None = "group", groups: Sequence[str] = ("a", "b", "c")) -> pl.DataFrame:
    """A small table with the columns ``measures`` need: ``units`` privacy units of 1..max_rows rows each.

    Numeric columns are Float64, spread over each measure's bounds (or [0, 100]); ``group_column``
    cycles through ``groups``; a String column ``name`` is added for type-error tests. No unit has more
    than ``max_rows`` rows, so contribution bounding keeps everything (neighbouring tables stay neighbours).

    Example:
        >>> import dpframe as dp
        >>> t = default_table([dp.sum("spend", bounds=(0, 500))], unit=dp.PrivacyUnit("user", max_rows=2))
        >>> t.columns, t["spend"].max() <= 500
        (['user', 'group', 'name', 'spend'], True)

    """
    the_unit = unit if unit is not None else PrivacyUnit("user", max_rows=3)
    per_unit = [1 + (i % the_unit.max_rows) for i in range(units)]
    ids = [i for i, k in enumerate(per_unit) for _ in range(k)]
    n = len(ids)
    data: dict[str, Any] = {}
    if the_unit.column is not None:
        data[the_unit.column] = pl.Series(the_unit.column, ids, dtype=pl.Int64)
    if group_column is not None:
        data[group_column] = [groups[i % len(groups)] for i in range(n)]
    data["name"] = [f"n{i % 7}" for i in range(n)]
    ranges: dict[str, tuple[float, float]] = {}
    for m in measures:
        if m.column is not None and m.column not in data and m.column not in ranges:
            lo, hi = (0.0, 100.0) if m.bounds is None else (float(m.bounds[0]), float(m.bounds[1]))
            ranges[m.column] = (lo, hi)
    for col, (lo, hi) in ranges.items():
        data[col] = pl.Series(col, [lo + (hi - lo) * _spread(i) for i in range(n)], dtype=pl.Float64)
    return pl.DataFrame(data)


PINNED = "dpframe.testing"
"""The plugin name pinned mechanisms and families are listed under."""


class _PinnedHost(PluginHost):
    """A view of a plugin host that offers some mechanism and family objects before the installed ones."""

    def __init__(self, base: PluginHost, pinned: Sequence[Mechanism], families: Sequence[QueryFamily] = ()) -> None:
        self.__dict__.update(base.__dict__)     # share the loaded plugin manager; no reload of entry points
        self._pinned = tuple(pinned)
        self._pinned_families = tuple(families)

    @property
    def pinned(self) -> tuple[Mechanism, ...]:
        """The mechanisms offered first."""
        return self._pinned

    @property
    def pinned_families(self) -> tuple[QueryFamily, ...]:
        """The families that build their query names in this session (the first pinned of a name wins)."""
        return self._pinned_families

    def mechanisms(self) -> list[tuple[str, Mechanism]]:
        return [(PINNED, m) for m in self.pinned] + super().mechanisms()

    def mechanism_for(self, kind: str, notion: str, name: str | None = None) -> Mechanism:
        for m in self.pinned:
            if kind in m.handles and notion in m.notions and (name is None or m.name == name):
                return m
        return super().mechanism_for(kind, notion, name)

    def families(self) -> Registry[QueryFamily]:
        installed = super().families()
        if not self.pinned_families:
            return installed
        view = installed.copy()
        for family in reversed(self.pinned_families):   # the last added is the first pinned: it wins
            view.pin(family, name=family.name, plugin=PINNED)
        return view

    def family(self, name: str) -> QueryFamily:
        for family in self.pinned_families:
            if family.name == name:
                return family
        return super().family(name)


def _pin(session: Any, mechanisms: Sequence[Mechanism] = (), families: Sequence[QueryFamily] = ()) -> Any:
    """``session`` with ``mechanisms`` and ``families`` pinned before those it already pins."""
    base = session.plugins
    if isinstance(base, _PinnedHost):
        session._plugins = _PinnedHost(base, [*mechanisms, *base.pinned], [*families, *base.pinned_families])
    else:
        session._plugins = _PinnedHost(base, list(mechanisms), list(families))
    return session


def pin_mechanisms(session: Any, *mechanisms: Any) -> Any:
    """Route the measure kinds of ``mechanisms`` to these objects in ``session`` (tests only); returns it.

    Pinned mechanisms win over installed ones (built-ins included) for the kinds and notions they handle;
    the installed plugins stay available for every other kind. Use it to run a mechanism that is not
    installed, or a deliberately broken subclass of a built-in, through the whole public API. Its ``handles`` and
    ``notions`` are checked as when registering.

    Example:
        >>> import polars as pl, dpframe as dp
        >>> from dpframe_aggregates import AggregateMechanism
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(1), seed=0)
        >>> pin_mechanisms(sess, AggregateMechanism()).plugins.mechanisms()[0][0]
        'dpframe.testing'

    """
    for m in mechanisms:
        if not isinstance(m, Mechanism):
            raise PluginError(f"{m!r} is not a Mechanism", argument="mechanisms",
                              fix="give it name, handles, notions, validate(), parts() and plan()")
        check_declared(PINNED, m, "mechanisms")
    return _pin(session, mechanisms=mechanisms)


def pin_families(session: Any, *families: Any) -> Any:
    """Route the query names of ``families`` to these family objects in ``session`` (tests only); returns it.

    The query family counterpart of :func:`pin_mechanisms`: ``frame.<name>(...)`` (or
    ``group_by(...).<name>(...)``, as the family's ``attach`` says) builds its query with the pinned object,
    which wins over an installed family of the same name (a built-in included); the other names stay with
    the installed plugins. Use it to run a family that is not installed, or a deliberately broken variant of
    one, through the whole public API. Only ``session`` sees it: ``dp.<ResultType>`` names come from installed
    families (module-wide), and ``session.plugins.result_types()`` has the pinned ones' too. A family named like a
    core method (``filter``, ``select`` ...) is refused, as when registering, and so is a result type name another
    family of the session has for another class (:func:`~dpframe.plugin.manager.check_result_types`).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> from dpframe.plugin import plugin_host
        >>> class MyBounds:                       # the installed frame.bounds, under another name
        ...     name, attach, methods, result_types = "my_bounds", "frame", (), {}
        ...     def build(self, source, /, *args, **kwargs):
        ...         return plugin_host().family("bounds").build(source, *args, **kwargs)
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(1), seed=0)
        >>> pin_families(sess, MyBounds()).plugins.families().entry("my_bounds").plugin
        'dpframe.testing'
        >>> sess.table("t").my_bounds("x", domain=(0, 10)).cost(dp.PureDP(1))
        PureDP(epsilon=1)

    """
    view = session.plugins.families().copy()
    for family in families:
        check_family(PINNED, family, "families")
        check_result_types(view, PINNED, family, "families")
        view.pin(family, name=family.name, plugin=PINNED)
    return _pin(session, families=families)


def check_refused(mechanism: Any, measure: Measure, ctx: MeasureContext, share: Budget) -> DPFrameError:
    """The DPFrameError ``mechanism`` raises for ``measure`` from ``validate`` or ``plan``.

    Raises AssertionError if the measure is accepted, or refused with another exception type (which
    the engine would not report as a clean, uncharged refusal).

    Example:
        >>> import dpframe as dp
        >>> from dpframe_aggregates import AggregateMechanism
        >>> err = check_refused(AggregateMechanism(), dp.sum("nope", bounds=(0, 1)), measure_context(),
        ...                     dp.PureDP(1))
        >>> err.argument
        'column'

    """
    try:
        mechanism.validate(measure, ctx)
        mechanism.plan([measure], ctx, share)
    except DPFrameError as e:
        return e
    except Exception as e:  # noqa: BLE001 - the point is to report the wrong type
        raise AssertionError(f"{measure.describe()} was refused with {type(e).__name__}: {e!s}; a mechanism "
                             f"must raise a dpframe.DPFrameError (naming the argument and the fix)") from e
    raise AssertionError(f"{mechanism.name} accepted the bad measure {measure.describe()} under {share!r}")


class CountingRandomSource(SeededRandomSource):
    """A seeded, NOT PRIVATE random source that counts the 64-bit words drawn (tests only).

    Example:
        >>> src = CountingRandomSource(0)
        >>> _ = src.uniform_below(10, 3)
        >>> src.words > 0
        True

    """

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.words = 0

    def random_uint64(self, size: int) -> npt.NDArray[np.uint64]:
        """Draw and count."""
        self.words += int(size)
        return super().random_uint64(size)
