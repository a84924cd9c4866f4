"""Test doubles for the adversarial suite's fake plugins: a noisy row count as a mechanism and as a query family.

The reviews red-team the plugin surface by writing plugins that lie or slip in one place. Each double here is the
honest rest of such a plugin; a test subclasses it and overrides the one place it attacks:

* :class:`CountPlan`: a mechanism plan releasing the row count plus ``used`` noise (whatever it declares);
* :class:`FakeMechanism`: a mechanism that accepts every measure and asks for one budget part (write ``plan``);
* :class:`RowsQuery` / :class:`RowsFamily`: a query family releasing the row count plus noise calibrated to
  ``max_rows``, with hooks for the share it calibrates to, the curves it charges, its explanation, and what happens
  before and after it reads;
* :class:`FamilyHooks`: a plugin object whose ``dpframe_query_families`` registers the families it is given;
  :func:`installed` registers them in the process-wide host for a fixture's life.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from dpframe.testing import pin_families
    >>> sess = dp.Session({"t": pl.DataFrame({"u": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit("u"),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> pin_families(sess, RowsFamily("noisy_rows")).table("t").noisy_rows().cost(dp.PureDP(1))
    PureDP(epsilon=1)

"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

import dpframe as dp
from dpframe.budgets import Budget
from dpframe.family import Explain, FamilyPlan, Source
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise, Statistic
from dpframe.noise import RandomSource
from dpframe.plugin import plugin_host

ROWS = Statistic("rows")


@dataclass
class CountPlan(MechanismPlan):
    """A row count released with ``used`` noise (what the release adds), whatever the plan declares.

    ``exact_too`` also releases the exact count, as ``exact`` (an unnoised second output).
    """

    used: Noise | None = None
    exact_too: bool = False

    def release(self, stats: Mapping[str, np.ndarray], rng: RandomSource) -> dict[str, np.ndarray]:
        assert self.used is not None
        exact = np.asarray(stats[ROWS.key], dtype=np.int64)
        out = {m.output_name: exact + self.used.sample(exact.size, rng) for m in self.measures}
        return out | ({"exact": exact} if self.exact_too else {})


class FakeMechanism:
    """A mechanism that accepts every measure and asks for one budget part; a subclass sets ``name`` (``handles``
    defaults to it) and ``notions``, and writes ``plan``."""

    name = "fake"
    notions = frozenset({"pure"})

    def __init__(self, name: str | None = None) -> None:
        if name is not None:
            self.name = name
        if "handles" not in vars(type(self)):
            self.handles = frozenset({self.name})

    def validate(self, measure: Measure, ctx: MeasureContext) -> None:
        pass

    def parts(self, measures: Sequence[Measure], ctx: MeasureContext) -> int:
        return 1


class RowsQuery:
    """A family's query: the row count plus noise calibrated to ``max_rows`` at :meth:`share` of the budget.

    ``how`` is the variant a test asked for (``frame.<family>(how)``); the hooks a test overrides: :meth:`share`,
    :meth:`curves` (what an RDP/PLD session charges; None: the cost's curve), :meth:`explain`, :meth:`before_read`
    and :meth:`released` (in ``run``).
    """

    def __init__(self, source: Source, how: Any = "", family: str = "rows") -> None:
        self.source, self.how, self.family = source, how, family

    def describe(self) -> str:
        return f"{self.family}({self.how})"

    def share(self, budget: Any) -> Budget:
        """The budget the noise is calibrated to (here: its ε, as a pure budget)."""
        return dp.PureDP(budget.epsilon)

    def curves(self, noise: Noise) -> Sequence[Any] | None:
        return None

    def explain(self) -> Explain:
        return Explain(self.describe())

    def before_read(self) -> None:
        """Runs in ``run`` before the private reader is read."""

    def released(self, exact: int, noise: Noise, rng: RandomSource) -> int:
        return exact + int(noise.sample(1, rng)[0])

    def plan(self, budget: Any) -> FamilyPlan[int]:
        noise = Noise.calibrate(Fraction(self.source.unit.max_rows), self.share(budget))

        def run(reader: Any, rng: RandomSource) -> int:
            self.before_read()
            exact = int(reader.statistics(self.source.node, (ROWS,))[ROWS.key][0])
            return self.released(exact, noise, rng)
        charge = self.source.context.accountant.charge_plan(noise.cost(), self.curves(noise))
        return FamilyPlan(budget, noise.cost(), charge, self.family.replace("_", " "), self.explain, run)


class RowsFamily:
    """A query family named ``name`` (attached to frames) building ``query(source, how)``.

    ``how``: the variant ``frame.<name>()`` builds (``frame.<name>(how)`` another); a :class:`RowsQuery` subclass
    also gets the family's name (``family=``), which its description shows.
    """

    attach, methods = "frame", ()

    def __init__(self, name: str, query: Callable[..., Any] = RowsQuery, how: Any = "") -> None:
        self.name, self.query, self.how = name, query, how
        self.result_types: Mapping[str, type] = {}

    def build(self, source: Source, how: Any = None) -> Any:
        how = self.how if how is None else how
        if isinstance(self.query, type) and issubclass(self.query, RowsQuery):
            return self.query(source, how, family=self.name)
        return self.query(source, how)


class FamilyHooks:
    """A plugin whose ``dpframe_query_families`` registers ``families`` (``replaces=`` each with ``replaces``)."""

    def __init__(self, *families: Any, replaces: str | None = None) -> None:
        self.families, self.replaces = families, replaces

    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        for family in self.families:
            register(family, replaces=self.replaces)


def installed(name: str, *families: Any) -> Iterator[None]:
    """For a fixture (``yield from installed(...)``): ``families`` registered in the process-wide host as plugin
    ``name`` until the fixture ends."""
    host = plugin_host()
    host.register(FamilyHooks(*families), name=name)
    try:
        yield
    finally:
        host.unregister(name)
