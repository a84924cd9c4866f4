"""Review 31b: a systematic sweep of review 31's classes — the engine's own objects built from public
constructors; process-wide caches keyed by the analyst's values, module-level tables and registries the
engine decides by; analyst objects (dates, arrays, number and string subclasses) read more than once;
sealed objects copied.

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp


def _session(**kwargs: Any) -> dp.Session:
    data = pl.DataFrame({"x": [float(i) for i in range(100)], "g": [str(i % 2) for i in range(100)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0, **kwargs)


def test_a_query_is_built_by_the_engine_only() -> None:
    """``dp.Query(sess, node)``, ``dp.Frame(sess, node)`` and ``GroupBy(frame, by, keys)`` were public
    constructors around plan nodes the engine trusts: a node built with the dataclass's own constructor
    skips every check of ``Filter.of`` (``Filter(scan, schema, pl.col("x") <= pl.col("x").max() - 50)``,
    an aggregate in a filter, counted 50 rows on D and 100 on D′ at sensitivity 1; a ``map_elements``
    expression would hand every private value to the analyst's function), and public keys given to
    ``GroupBy`` directly skip the duplicate check (one group released twice for the price of one). They
    are built by the engine only (``sess.table``, ``frame.filter(...)``, ``agg``, ``sess.sql``)."""
    from dpframe.frame import Frame, GroupBy
    from dpframe.plan.nodes import Aggregate, Filter
    sess = _session()
    t = sess.table("t")
    base = t.agg(dp.len()).node
    forged = Filter(base.input, base.input.schema, pl.col("x") <= pl.col("x").max() - 50)
    builds = [lambda: dp.Query(sess, Aggregate(forged, (), None, base.measures)),
              lambda: Frame(sess, forged).agg(dp.len()),
              lambda: GroupBy(t, ("g",), pl.DataFrame({"g": ["0", "0"]})).agg(dp.len())]
    for build in builds:
        with pytest.raises(dp.ArgumentError, match="built by dpframe") as info:
            build().collect(dp.PureDP(1))
        assert info.value.fix
    assert sess.history().height == 0


def test_a_releasable_runs_a_registered_familys_query_only() -> None:
    """``dpframe.family.Releasable(sess, query)`` charged and ran any object with ``describe`` and ``plan``:
    its ``FamilyPlan.run`` received the session's private reader, and returned the exact row count and
    sum for a charge of ε = 0.001 (a query family is the data owner's plugin, registered through the
    plugin hook; the analyst may not register one). A releasable is built by the engine only, around a
    registered family's query."""
    from dpframe.family import Explain, FamilyPlan, Releasable
    from dpframe.mechanism import Statistic
    sess = _session()
    node = sess.table("t").agg(dp.len()).node.input

    class Exact:
        def describe(self) -> str:
            return "exact rows"

        def plan(self, budget: dp.Budget) -> FamilyPlan[pl.DataFrame]:
            return FamilyPlan(budget, budget, sess.accountant.charge(budget), "none", Explain("exact"),
                              lambda reader, rng: reader.statistics(node, (Statistic("rows"),)))
    with pytest.raises(dp.ArgumentError, match="built by dpframe"):
        Releasable(sess, Exact()).collect(dp.PureDP(0.001))
    assert sess.history().height == 0


def _equal_to(base: type, target: object, value: object) -> Any:
    """A ``base`` subclass instance holding ``value`` that hashes and compares equal to ``target``."""
    cls = type(f"Posing{base.__name__}", (base,), {"__hash__": lambda self: hash(target),
                                                   "__eq__": lambda self, other: other == target})
    return cls(value)


def test_a_cached_probe_cannot_be_keyed_by_a_data_type_that_reads_differently() -> None:
    """``probe_values(dtype)`` cached the totality probe's values under ``(repr(dtype), dtype)``: a
    ``pl.Decimal`` subclass that hashed, compared and printed as ``Decimal(38, 0)`` but read its
    ``precision`` as 5 once (the values were made) and 38 after (Polars built the Series) left five-digit
    values as *the* probe of ``Decimal(38, 0)`` (once 300 other types had evicted the real entry).
    ``filter(pl.col("d") * 100 > 0)``, which overflows on 38-digit values, then passed the build-time
    probe, and the count failed after its charge exactly when some row was ≥ 10³⁶ (an exception oracle,
    for every later query in the process). Cached helpers read their arguments as plain values
    (``dpframe.sealed.plain_cache``; a data type as Polars reads it, once)."""
    import contextlib
    import decimal

    from dpframe.plan.values import probe_values
    real = pl.Decimal(38, 0)

    class Decimal(pl.Decimal):
        reads = 0

        def __init__(self) -> None:
            pass

        @property  # type: ignore[override]
        def precision(self) -> int:
            Decimal.reads += 1
            return 5 if Decimal.reads == 1 else 38
        scale = 0  # type: ignore[assignment]

        @classmethod
        def base_type(cls) -> type[pl.DataType]:
            return pl.Decimal

        def __eq__(self, other: object) -> bool:
            return other == real

        def __hash__(self) -> int:
            return hash(real)

        def __repr__(self) -> str:
            return repr(real)
    probe_values(real)
    for i in range(300):
        probe_values(pl.Enum([f"evict{i}"]))
    with contextlib.suppress(dp.ArgumentError):     # Polars refuses a local class's name; a module's is read
        probe_values(Decimal())
    assert probe_values(real).max() == decimal.Decimal(10**38 - 1)
    for big in (1, 10**37):
        data = pl.DataFrame({"d31b": [decimal.Decimal(1)] * 9 + [decimal.Decimal(big)]}).cast({"d31b": real})
        sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
        with pytest.raises(dp.PlanError, match="Multiply"):
            sess.table("t").filter(pl.col("d31b") * 100 > 0).agg(dp.len())
        assert sess.history().height == 0


def test_process_wide_caches_are_keyed_by_plain_values() -> None:
    """Every public function with a process-wide cache stored what it computed from the analyst's object
    under that object: a Fraction subclass equal to ε = 7919/13 (and hashing so) but worth 10 made
    ``zcdp_rho(ε, δ)`` — the ρ top-k's Gaussian PTR is calibrated with when it converts (ε, δ) — 2,500
    times too large for every later query at that ε; the same held for the subsampled Gaussian's moments
    (``gaussian_moments``, the RDP accountant's amplification), limited domain's per-step ε and the TCT
    plan (``dpframe_topk.calibrate``), and the noise's confidence half-widths. Keys are plain values."""
    from fractions import Fraction

    from dpframe_topk import calibrate

    from dpframe.accounting.numerics import replacement
    from dpframe.budgets import zcdp_rho
    from dpframe.mechanism import noise
    eps, delta = Fraction(7919, 13), Fraction(1, 10**6)
    liar = _equal_to(Fraction, eps, 10)
    zcdp_rho(liar, delta)
    assert zcdp_rho(eps, delta) == zcdp_rho.__wrapped__(eps, delta)
    calibrate.ld_step_epsilon(liar, delta, 3)
    assert calibrate.ld_step_epsilon(eps, delta, 3) == calibrate.ld_step_epsilon.__wrapped__(eps, delta, 3)
    small = Fraction(1, 7919)
    calibrate.tct_plan("approx", _equal_to(Fraction, small, Fraction(1, 2)), delta, 2)
    assert calibrate.tct_plan("approx", small, delta, 2) == calibrate.tct_plan.__wrapped__("approx", small, delta, 2)
    mu = 0.7919
    replacement.gaussian_moments(_equal_to(float, mu, 0.5))(2)
    assert replacement.gaussian_moments(mu)(2) == replacement._chis.__wrapped__(mu)[0]
    scale = Fraction(7919, 7)
    noise.Noise("discrete_laplace", _equal_to(Fraction, scale, 1), Fraction(1)).half_width(0.95)
    assert noise.Noise("discrete_laplace", scale, Fraction(1)).half_width(0.95) == \
        noise._half_width_units.__wrapped__("discrete_laplace", scale, 0.95)


# Caches whose arguments only the engine builds (never an analyst's object): the sampler's tables of a
# ``_Scale``/``_Sigma2`` it made from a plain Fraction, the plugin host per blocked-plugin set (an
# environment variable), and the thread pool per worker count.
_INTERNAL_CACHES = {("dpframe/noise/samplers.py", "_threshold_table"),
                    ("dpframe/noise/samplers.py", "_acceptance_table"),
                    ("dpframe/plugin/manager.py", "_host"), ("dpframe/parallel.py", "_pool")}


def test_every_cache_with_arguments_reads_them_as_plain_values() -> None:
    """The guard of the test above: a new ``functools.lru_cache``/``cache`` on a function with arguments
    (reachable with an analyst's object, however indirectly) uses ``dpframe.sealed.plain_cache``."""
    import ast
    from pathlib import Path
    root = Path(dp.__file__).parent.parent
    found = set()
    for path in [*root.joinpath("dpframe").rglob("*.py"), *root.joinpath("plugins").rglob("*.py")]:
        if "tests" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            takes = isinstance(node, ast.FunctionDef) and (node.args.args or node.args.vararg or node.args.kwonlyargs)
            if not takes:
                continue
            for d in node.decorator_list:
                name = ast.unparse(d.func if isinstance(d, ast.Call) else d)
                if name.split(".")[-1] in ("lru_cache", "cache", "cached_property"):
                    found.add((path.relative_to(root).as_posix(), node.name))
    assert found == _INTERNAL_CACHES


def test_module_level_tables_the_engine_reads_are_read_only() -> None:
    """Module-level dicts and lists the engine decides by were public and mutable:
    ``dpframe_topk.pate.UNITS["record"] = (text, Fraction(1, 100))`` made MultiLabelPATE's gap sensitivity
    1/100 instead of 2 (a charge 200 times too small for the same noise), ``dpframe.sql.expr.DENIED.pop("error")``
    let SQL call DuckDB's ``error()``, ``dpframe.sql.sandbox.CONFIG`` set what every later DuckDB connection
    allows (Python replacement scans: a table name resolved to a variable of the caller), and
    ``dpframe_learning.ALGORITHMS`` said which interior-point method is a built-in. Every public
    module-level table of the engine and its plugins is a read-only mapping, a tuple or a frozenset (the
    audit harness's own specs, ``dpframe.testing`` and the plugins' ``audits``, are not read by any query)."""
    import importlib
    import pkgutil
    from fractions import Fraction

    import dpframe_learning
    import dpframe_topk
    from dpframe_topk import pate

    from dpframe.sql import expr, parse, sandbox
    for write in (lambda: pate.UNITS.__setitem__("record", ("one record", Fraction(1, 100))),
                  lambda: expr.DENIED.pop("error"),
                  lambda: sandbox.CONFIG.__setitem__("python_enable_replacements", True),
                  lambda: parse.SET_OPERATIONS.append(("MINUS",)),
                  lambda: dpframe_learning.ALGORITHMS.__setitem__("exponential", None)):
        with pytest.raises((TypeError, AttributeError)):
            write()
    assert pate.MultiLabelPATE().g == 2
    mutable = []
    for package in (dp, dpframe_topk, dpframe_learning, importlib.import_module("dpframe_quantiles"),
                    importlib.import_module("dpframe_aggregates"), importlib.import_module("dpframe_histogram")):
        names = [package.__name__, *(m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))]
        for name in names:
            if name.startswith("dpframe.testing") or name.endswith(".audits") or ".tests" in name:
                continue
            module = importlib.import_module(name)
            mutable += [f"{name}.{attr}" for attr, value in vars(module).items()
                        if not attr.startswith("_") and isinstance(value, dict | list | set | bytearray)
                        and not isinstance(value, pl.Schema)]
    assert mutable == []


def test_temporal_bounds_are_read_as_plain_values() -> None:
    """``plain`` left dates, datetimes and their time zones as given: ``dp.median("d", bounds=(SpyDate(...),
    ...))`` kept the analyst's ``date`` subclass in the measure, and its ``__sub__`` ran again when the
    query ran, after the charge (the quantile's domain is rebuilt from the bounds then): a stateful one
    gave the run another domain than the one planned. A datetime's ``tzinfo`` subclass is called on every
    subtraction the same way. Temporal values are read once into plain ``date``/``datetime``/``timedelta``
    objects (a time zone other than ``datetime.timezone`` or ``zoneinfo.ZoneInfo`` becomes its offset), and
    a family's arguments copy a tuple subclass (whose ``__getitem__`` could lie on a later read) and any
    mapping into plain tuples and dicts."""
    import datetime as dt

    from dpframe.sealed import plain, plain_copy
    seen: list[object] = []

    class SpyDate(dt.date):
        def __sub__(self, other: Any) -> Any:
            seen.append(other)
            return dt.date.__sub__(self, other)

    class SpyZone(dt.tzinfo):
        def utcoffset(self, when: Any) -> dt.timedelta:
            seen.append(when)
            return dt.timedelta(hours=1)
    data = pl.DataFrame({"d": [dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(100)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    q = sess.table("t").agg(dp.median("d", bounds=(SpyDate(2019, 1, 1), dt.date(2021, 1, 1))))
    aware = plain(dt.datetime(2020, 1, 1, 12, tzinfo=SpyZone()))
    seen.clear()
    q.collect(dp.PureDP(1))
    assert aware - dt.datetime(2020, 1, 1, tzinfo=dt.UTC) == dt.timedelta(hours=11)
    assert seen == [] and type(q.node.measures[0].option("bounds")[0]) is dt.date
    assert type(plain(SpyDate(2019, 1, 1))) is dt.date and type(aware.tzinfo) is dt.timezone
    Pair = type("Pair", (tuple,), {"__getitem__": lambda self, i: 10**6})     # a family's argument, read again
    copied = plain_copy({"bounds": Pair((0, 10))})["bounds"]
    assert type(copied) is tuple and copied[1] == 10


def test_arrays_given_as_options_or_arguments_are_copied() -> None:
    """A measure's options and a family's arguments were frozen or copied when they were lists, but a
    NumPy array (or a ``pl.Series``) was kept as given: ``edges = np.array([0, 5, 10])`` for a
    histogram, changed in place after the query was priced (by the analyst, or another thread between
    the plan that validated the edges and the run that reads them again), ran other bins than the ones
    checked. Arrays and Series are read once into tuples (options) and lists (arguments)."""
    import numpy as np

    from dpframe.sealed import plain_copy
    data = pl.DataFrame({"x": [float(i % 10) for i in range(100)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    edges = np.array([0.0, 5.0, 10.0])
    q = sess.table("t").agg(dp.measure("histogram", "x", bounds=(0, 10), edges=edges))
    edges[1] = 7.0
    assert q.collect(dp.PureDP(1)).columns == ["x_hist_0_5", "x_hist_5_10"]
    series = pl.Series([0.01, 0.99])
    assert type(plain_copy({"quantiles": series})["quantiles"]) is list
    assert type(plain_copy(np.array([1, 2]))) is list


def test_a_registered_curve_kind_is_never_taken_over() -> None:
    """``register_curve(kind, build)`` refused another builder for a kind already taken only when its
    ``__module__.__qualname__`` differed: a function posing as ``dpframe.accounting.curves.pure`` (two
    attribute assignments) replaced the builder of every stored pure-ε charge, and ``sess.spent_report()``
    — what the session spent at δ, by every accountant, rebuilt from the ledger's curve descriptions —
    showed ε = 0 after ε = 1 was charged. A kind keeps its first builder."""
    from dpframe import accounting as acc
    sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.ApproxDP(2, 1e-6), seed=0)
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))

    def pure(epsilon: float) -> acc.PrivacyCurve:
        return acc.curves.pure(1e-9)
    pure.__module__, pure.__qualname__ = "dpframe.accounting.curves", "pure"
    acc.register_curve("pure", pure)
    assert sess.spent_report()["basic"] == pytest.approx(1)


def test_pate_parameters_are_read_as_plain_numbers() -> None:
    """``MultiLabelPATE(gumbel_scale=, sigma=, delta_t=)`` made Fractions of the analyst's numbers as given:
    ``Fraction(x)`` keeps ``x.numerator``, so an int subclass lived inside ``pate.sigma`` and its ``__pow__``
    answered each computation of σ²: 10¹² while the charge was computed (ρ = g²/(2σ²) next to nothing),
    then 1 when the run drew the PTR noise (σ = 1). The parameters (and the privacy unit's name, which
    every computation of the gap sensitivity looks up) are read through ``plain``."""
    from dpframe_topk import MultiLabelPATE

    class Shifty(int):
        calls = 0

        @property
        def numerator(self) -> int:
            return self

        def __pow__(self, power: Any, modulo: Any = None) -> int:
            Shifty.calls += 1
            return 10**12 if Shifty.calls <= 2 else 1
    pate = MultiLabelPATE(sigma=Shifty(60))
    assert pate.cost(1) == MultiLabelPATE(sigma=60).cost(1) and type(pate.sigma.numerator) is int
    assert type(MultiLabelPATE(privacy_unit=type("Unit", (str,), {})("teacher")).privacy_unit) is str


def test_a_stream_cannot_be_copied() -> None:
    """``copy.copy(channel)`` made a second channel on the same reservation with its own counters:
    ``max_hits=3`` answered 5 hits (2 on the channel, 3 on its copy) for one charge; a copied sparse vector
    drew its own threshold noise (two independent thresholds against one ε₁), and a copied session was
    another key of the one-open-stream registry. A sealed object (session, query, stream, channel, filter,
    accountant, random source) cannot be copied or pickled."""
    import copy
    import pickle
    data = pl.DataFrame({"x": [float(i) for i in range(1000)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(1000, 1e-5), seed=0)
    q = sess.table("t").agg(dp.len())
    clones = (copy.copy, copy.deepcopy, lambda o: pickle.loads(pickle.dumps(o)))
    with sess.sparse_vector(threshold=10, max_positives=2, budget=dp.PureDP(1)) as sv:
        for obj in (sv, sess, q, sess.accountant):
            for clone in clones:
                with pytest.raises(TypeError, match="cannot be copied"):
                    clone(obj)
    with sess.target_charging(epsilon=1, max_hits=3, delta=1e-6) as ch:
        for clone in clones:
            with pytest.raises(TypeError, match="cannot be copied"):
                clone(ch)
        assert sum(ch.test(q, threshold=10) for _ in range(5) if not ch.closed) == 3


def test_a_table_name_is_read_as_a_plain_string() -> None:
    """``sess.table(name)`` looked the schema up with the analyst's object and kept it as the scan's table:
    a ``str`` subclass that hashed and compared as "a" for the schema lookup, then as "b", made the
    backend read table b under a's schema (Float64 where b holds strings): ``dp.sum("x")`` was released
    when every string of b was a number and failed after its charge when one was not (and the
    changed-file check looked at one table while the query read the other). The name is a plain str."""
    a = pl.DataFrame({"x": [1.0, 2.0, 3.0]})

    class Name(str):
        calls = 0

        def __hash__(self) -> int:
            Name.calls += 1
            return hash("a" if Name.calls <= 2 else "b")

        def __eq__(self, other: object) -> bool:
            return other == ("a" if Name.calls <= 2 else "b")
    for last in ("3", "oops"):
        Name.calls = 0
        sess = dp.Session({"a": a, "b": pl.DataFrame({"x": ["1", "2", last]})}, privacy_unit=dp.PrivacyUnit.row(),
                          budget=dp.PureDP(10), seed=0)
        t = sess.table(Name("a"))
        assert t.agg(dp.sum("x", bounds=(0, 10))).collect(dp.PureDP(1))["x_sum"].dtype == pl.Float64
        assert type(t.agg(dp.len()).node.input.table) is str
