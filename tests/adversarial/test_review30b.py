"""Review 30b: the analyst's numbers and lists, read after they were checked (follow-ups to review 30).

Each test is an attack that broke, kept with its fix: it fails if the defence regresses.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import polars as pl
import pytest

import dpframe as dp

SEEN: list[tuple[str, tuple[Any, ...]]] = []
ARMED = [False]


def _recording(base: type, names: tuple[str, ...]) -> dict[str, Any]:
    """Methods that record their operands once armed (after the query was built), then act as ``base``'s."""
    def make(name: str) -> Any:
        def method(self: Any, *args: Any) -> Any:
            if ARMED[0]:
                SEEN.append((name, args))
            return getattr(base, name)(self, *args)
        return method
    return {n: make(n) for n in names}


_OPS = ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__mul__", "__rmul__", "__add__", "__radd__", "__sub__",
        "__rsub__", "__truediv__", "__rtruediv__", "__floordiv__", "__neg__", "__int__", "__float__", "__index__")
SpyInt = type("SpyInt", (int,), {**_recording(int, _OPS), "__hash__": int.__hash__,
                                  "numerator": property(lambda self: self)})    # Fraction(x) keeps x itself


def _ratio(self: float) -> tuple[int, int]:
    n, d = float.as_integer_ratio(self)
    return SpyInt(n), SpyInt(d)


SpyFloat = type("SpyFloat", (float,), {**_recording(float, _OPS), "__hash__": float.__hash__,
                                       "as_integer_ratio": _ratio})


def _spy_fraction(x: object) -> Fraction:
    f = Fraction(x)  # type: ignore[arg-type]
    cls = type("SpyFraction", (Fraction,), {**_recording(Fraction, _OPS), "__hash__": Fraction.__hash__})
    return cls(SpyInt(f.numerator), SpyInt(f.denominator))  # type: ignore[no-any-return]


@pytest.fixture
def armed() -> Any:
    SEEN.clear()

    class Arm:
        def __enter__(self) -> None:
            ARMED[0] = True

        def __exit__(self, *exc: object) -> None:
            ARMED[0] = False
    yield Arm()
    ARMED[0] = False


def _session(unit: dp.PrivacyUnit | None = None) -> dp.Session:
    data = pl.DataFrame({"u": range(100), "x": [float(i % 10) for i in range(100)],
                         "g": [str(i % 3) for i in range(100)]})
    return dp.Session({"t": data}, privacy_unit=unit or dp.PrivacyUnit.row(), budget=dp.ApproxDP(100, 1e-5), seed=0)


def test_a_number_subclass_sees_nothing_the_engine_computes(armed: Any) -> None:
    """``Fraction(x)`` keeps ``x.numerator`` as given (and a float's ``as_integer_ratio()``): a budget, bounds or
    threshold given as a number subclass left the analyst's int inside the engine's Fractions, whose
    ``__mul__``/``__eq__`` then ran on every accounting step, clamp and noise calibration (a sum's bounds: 80
    calls; a budget's ε: the ledger's sums), and a threshold Fraction subclass received the channel's exact
    noisy value in ``__le__``. Numbers are read through ``dpframe.sealed.plain`` where they enter."""
    sess = _session()
    t = sess.table("t")
    queries = [t.agg(dp.sum("x", bounds=(SpyFloat(0), _spy_fraction(10))), dp.mean("x", bounds=(SpyInt(0), 10))),
               t.agg(dp.quantile("x", q=[SpyFloat(0.5)], bounds=(SpyFloat(0), SpyFloat(10)))),
               t.agg(dp.measure("histogram", "x", bounds=(0, 10), edges=(SpyFloat(0), _spy_fraction(5), 10)))]
    budget = dp.PureDP(_spy_fraction(Fraction(1, 2)))
    target = dp.above(_spy_fraction(10))
    accuracy = dp.Accuracy(half_width=SpyFloat(10), confidence=SpyFloat(0.9))
    top = t.group_by("g").top_k(k=2, lam=_spy_fraction(1))
    threshold = _spy_fraction(10**6)
    with armed:
        for q in queries:       # ci= where no output has an interval is refused (test_review50b): the first has some
            q.collect(budget, ci=SpyFloat(0.9) if q is queries[0] else None)
        t.agg(dp.len()).cost(accuracy=accuracy)
        top.collect(dp.ApproxDP(budget.epsilon, 1e-6))
        assert target.contains(Fraction(12345, 7))
        with sess.target_charging(epsilon=Fraction(1, 10), max_hits=1, delta=1e-6) as ch:
            ch.test(t.agg(dp.len()), threshold=threshold)
    assert SEEN == []
    assert type(budget.epsilon) is Fraction and type(budget.epsilon.numerator) is int


def test_a_stop_rule_cannot_replace_a_step_after_it_was_planned() -> None:
    """``run_until`` planned every step, then ran ``zip(steps, plans)`` over the analyst's list: a stop rule
    doing ``steps[1] = private_keys_query`` ran that query's node with the public-keys step's plan, and the
    key only one unit has was released with no partition selection at δ = 0. The steps are a snapshot."""
    from dpframe.interactive.stopping import run_until
    data = pl.DataFrame({"u": [i // 100 for i in range(1000)], "g": ["common"] * 999 + ["rare"]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=100), budget=dp.ApproxDP(10, 1e-6),
                      seed=0)
    t = sess.table("t")
    steps = [t.agg(dp.len()), t.group_by("g", keys=["common"]).agg(dp.len())]

    def stop(results: list[pl.DataFrame]) -> bool:
        steps[1] = t.group_by("g").agg(dp.len())
        return False
    out = run_until(steps, dp.PureDP(Fraction(1, 10)), stop=stop)
    assert out[1]["g"].to_list() == ["common"]


@pytest.mark.parametrize("method", ["spent", "remaining", "history", "spent_report", "close", "table", "sql"])
def test_a_session_handed_to_an_analyst_keeps_its_methods(method: str) -> None:
    """The session's methods were instance-assignable: an analyst given the session could set
    ``sess.history = lambda: <empty>`` or ``sess.spent = lambda: dp.PureDP(0)`` to hide what was spent from
    whoever reads the same object afterwards, or ``sess.close = lambda: None`` so that the curator's
    ``with sess:`` left it open. The session is Sealed."""
    sess = _session()
    with pytest.raises(AttributeError, match="read-only"):
        setattr(sess, method, lambda *args, **kwargs: None)
    sess.table("t").agg(dp.len()).collect(dp.PureDP(1))
    assert sess.history().height == 1 and sess.spent() == dp.ApproxDP(1, 0)


@pytest.mark.parametrize(("family", "attribute"), [("learn_rectangle", "features"), ("learn_rectangle", "domains"),
                                                   ("linear_regression", "features"),
                                                   ("linear_regression", "bounds")])
def test_a_family_query_keeps_the_lists_it_was_validated_with(family: str, attribute: str) -> None:
    """``q.query`` refuses assignment, but its lists were the engine's own: ``q.query.features.append("y")``
    added a feature after validation (the label, which the builder refuses), read again when the query runs
    — also by another thread between the plan, which priced one slice per feature, and the run. A
    regression's features and bounds were read again at run time after its statistics were planned. They
    are tuples and read-only mappings."""
    data = pl.DataFrame({"x": [float(i % 10) for i in range(200)], "y": [i % 2 for i in range(200)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(10, 1e-6), seed=0)
    t = sess.table("t")
    q = (t.learn_rectangle(["x"], label="y", bounds={"x": (0, 10)}) if family == "learn_rectangle" else
         t.query("linear_regression", features=["x"], label="y", bounds={"x": (0, 10), "y": (0, 1)}))
    value = getattr(q.query, attribute)
    with pytest.raises((AttributeError, TypeError)):
        if isinstance(value, Mapping):
            value["y"] = (0, 10**6)  # type: ignore[index]
        else:
            value.append(value[0])


def test_a_measure_keeps_the_options_it_was_built_with() -> None:
    """A measure's options held the analyst's own list (``edges=[0, 5, 10]``): changing it after the query
    was priced changed what ran (other bins), and the histogram reads the edges again when it runs, after
    the plan validated them (another thread could make them overlap: a row in two bins for the price of
    one). Options are stored as tuples of plain values."""
    data = pl.DataFrame({"x": [float(i % 10) for i in range(100)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    edges = [0, 5, 10]
    q = sess.table("t").agg(dp.measure("histogram", "x", bounds=(0, 10), edges=edges))
    assert q.cost(dp.PureDP(1)) == dp.PureDP(1)
    edges[1:2] = [2, 7]
    assert q.collect(dp.PureDP(1)).columns == ["x_hist_0_5", "x_hist_5_10"]
    assert dp.measure("histogram", "x", bounds=(0, 10), edges=[SpyInt(0), 10]).option("edges") == (0, 10)
    assert [type(e) for e in dp.measure("histogram", "x", edges=[SpyInt(0), 10]).option("edges")] == [int, int]


def test_a_stopping_point_is_read_as_a_plain_int() -> None:
    """``run_until(stops=[k])`` keyed each cell by ``str(k)`` and ran to the points read back from those keys:
    an int subclass equal to 1 whose ``__str__`` said "3" priced the cell "3" at one step's ε, and the run
    released 3 steps of ε = 1 for a charge of ε = 1. Stopping points are plain ints."""
    from dpframe.interactive.stopping import run_until

    class Liar(int):
        def __str__(self) -> str:
            return "3"
    sess = dp.Session({"t": pl.DataFrame({"x": list(range(100))})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=0)
    steps = [sess.table("t").agg(dp.len()) for _ in range(4)]
    out = run_until(steps, dp.PureDP(1), stop=lambda r: len(r) == 3, stops=[Liar(1)])
    assert len(out) == 4 and sess.spent() == dp.PureDP(4)


def test_a_str_subclass_cannot_pass_one_method_to_the_checks_and_run_another() -> None:
    """A ``str`` subclass "gumbel" whose ``__eq__`` denied being "gumbel" while ``top_k`` checked that the
    method has public keys, then admitted it when the query ran: Gumbel sampled among the keys present in
    the data, and the key only one unit has was released without partition selection. A family's
    arguments (and measure kinds, columns, names and group-by columns) are read as plain strings."""
    class Liar(str):
        checked = 0

        def __eq__(self, other: object) -> bool:
            if type(other) is str and other in ("gumbel", "peeling", "tct"):
                Liar.checked += 1
                if Liar.checked > 1:       # "gumbel" is a known method, but not one that needs public keys
                    return False
            return str.__eq__(self, other)

        def __ne__(self, other: object) -> bool:
            return not self.__eq__(other)

        __hash__ = str.__hash__
    data = pl.DataFrame({"u": range(1000), "g": ["common"] * 999 + ["rare"]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.ApproxDP(10, 1e-6), seed=0)
    with pytest.raises(dp.PlanError, match="public key") as info:
        sess.table("t").group_by("g").top_k(k=2, method=Liar("gumbel"))
    assert info.value.argument == "keys"
    assert type(dp.sum(Liar("x"), bounds=(0, 1)).column) is str


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
def test_a_frame_schema_cannot_be_changed_in_place(backend: str) -> None:
    """``frame.schema`` was the table's own schema object: ``sess.table("t").schema["s"] = pl.Int64`` on a
    string column changed it for every later frame, the backend cast the column to the declared type, and a
    query failed exactly when some row was not a number (an exception oracle, charged, on both backends).
    Schemas handed out are read-only."""
    sess = dp.Session({"t": pl.DataFrame({"s": ["1", "2", "x"]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=0, backend=backend)
    t = sess.table("t")
    for schema in (t.schema, t.collect_schema(), t.filter(pl.col("s") == "1").schema,
                   t.agg(dp.len()).node.input.schema):
        with pytest.raises(TypeError, match="read-only"):
            schema["s"] = pl.Int64
        with pytest.raises(TypeError, match="read-only"):
            schema.pop("s")
    assert sess.table("t").schema == pl.Schema({"s": pl.String}) and pl.Schema(t.schema) == t.schema


def test_public_keys_cannot_be_changed_in_place() -> None:
    """``q.node.keys`` was the query's own DataFrame, checked for duplicates when built and read again when
    run: ``q.node.keys[1, "g"] = "0"`` released the group "0" twice with independent noise for the price
    of one (ε = 1 charged, two ε = 1 answers). Public keys are read-only copies."""
    data = pl.DataFrame({"g": [str(i % 3) for i in range(300)]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)
    mine = pl.DataFrame({"g": ["0", "1"]})
    q = sess.table("t").group_by("g", keys=mine).agg(dp.len())
    for keys in (q.node.keys, q.query.source.keys):
        with pytest.raises(TypeError, match="read-only"):
            keys[1, "g"] = "0"
        with pytest.raises(TypeError, match="read-only"):
            keys.replace_column(0, pl.Series("g", ["0", "0"]))
    mine[1, "g"] = "0"
    assert q.collect(dp.PureDP(1))["g"].to_list() == ["0", "1"]


def test_sql_text_and_backend_name_are_read_as_plain_strings() -> None:
    """``sess.sql(text, backend=...)`` checks the backend name (what it refuses), then stores it and looks it
    up again when the query runs, and caches the parse of the text by its hash and equality: a ``str``
    subclass could answer those differently each time. Both are read as plain strings where they enter."""
    class Shifty(str):
        __hash__ = str.__hash__
    data = pl.DataFrame({"x": [1.0, 2.0]})
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1), seed=0)
    q = sess.sql(Shifty("SELECT COUNT(*) AS n FROM t"), backend=Shifty("duckdb"))
    assert type(q.backend_name) is str and type(q.text) is str
    assert type(q.query.source.backend) is str
