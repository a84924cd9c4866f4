"""Method chains on a remote session: remote.table(...) gives what sess.table(...) gives in process."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

import polars as pl
import pytest

import dpframe as dp

KEY = secrets.token_bytes(32)
ROWS = 3000
DATA = pl.DataFrame({
    "u": [i // 3 for i in range(ROWS)],
    "g": [["a", "b", "c"][i % 3] for i in range(ROWS)],
    "x": [float(i % 97) for i in range(ROWS)],
    "y": [int(i % 97 < 40) for i in range(ROWS)],
    "d": [date(2024, 1 + i % 12, 1 + i % 28) for i in range(ROWS)],
})


def session(budget: dp.Budget | None = None, seed: int | None = 0) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=3),
                      budget=budget or dp.ZCDP(50, 1e-6), seed=seed)


@pytest.fixture
def served() -> Iterator[tuple[dp.Session, dp.Remote]]:
    sess = session()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        yield sess, remote


Chain = Callable[[Any], Any]
CHAINS: dict[str, tuple[Chain, dp.Budget]] = {
    "grouped aggregates, public keys": (
        lambda t: t.filter(pl.col("x") > 3, g="a").group_by("g", keys=["a", "b"]).agg(
            dp.len(), dp.sum("x", bounds=(0, 100)), share=dp.mean(pl.col("x") > 50, bounds=(0, 1))), dp.ZCDP(1)),
    "derived columns and a median": (
        lambda t: t.with_columns(month=pl.col("d").dt.month(), big=pl.col("x") * 2).select("month", "big", "g")
        .group_by("g", keys={"g": ["a", "c"]}).agg(dp.median("big", bounds=(0, 200)), dp.count("month")),
        dp.ZCDP(1)),
    "keys as a frame, an expression key": (
        lambda t: t.group_by((pl.col("x") // 50).alias("half"), keys=pl.DataFrame({"half": [0.0, 1.0]}))
        .agg(dp.var("x", bounds=(0, 100))), dp.ZCDP(1)),
    "bound, rename, drop, ungrouped": (
        lambda t: t.bound(max_rows=1).rename({"x": "value"}).drop("d").agg(
            dp.quantile("value", [0.25, 0.75], bounds=(0, 100)), dp.std("value", bounds=(0, 100), ddof=0)),
        dp.ZCDP(1)),
    "dates as bounds": (lambda t: t.agg(dp.quantile("d", 0.5, bounds=(date(2024, 1, 1), date(2025, 1, 1)))),
                        dp.ZCDP(1)),
    "top-k": (lambda t: t.group_by("g").top_k(k=2, release_scores=True), dp.ZCDP(1, 1e-8)),
    "private keys": (lambda t: t.group_by("g").agg(dp.len()), dp.ZCDP(1, 1e-8)),
    "bounds": (lambda t: t.bounds("x", domain=(0, 1000)), dp.ZCDP(1)),
    "interior point": (lambda t: t.interior_point("x", bounds=(0, 100)), dp.ZCDP(1)),
    "threshold": (lambda t: t.learn_threshold("x", label="y", bounds=(0, 100)), dp.ZCDP(1)),
    "rectangle": (lambda t: t.learn_rectangle(["x"], label="y", bounds={"x": (0, 100)}), dp.ZCDP(1)),
    "a family by name": (lambda t: t.query("agg", dp.len()), dp.ZCDP(1)),
}


def same(a: Any, b: Any) -> bool:
    if isinstance(a, pl.DataFrame):
        return isinstance(b, pl.DataFrame) and a.equals(b)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and repr(a) == repr(b)


@pytest.mark.parametrize("name", list(CHAINS))
def test_a_chain_releases_what_it_releases_in_process(name: str) -> None:
    chain, budget = CHAINS[name]
    here = session()
    with dp.Server(session(), ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        query, local = chain(remote.table("t")), chain(here.table("t"))
        assert isinstance(query, dp.RemoteQuery)
        assert query.cost(budget) == local.cost(budget)
        assert query.explain(budget) == str(local.explain(budget))
        assert query.explain(budget, format="json") == json.loads(json.dumps(local.explain(budget, format="json"),
                                                                             default=str))
        got, want = query.collect(budget), local.collect(budget)
        assert same(got, want), (got, want)
        assert remote.spent() == here.spent()
        assert remote.history()["query"].to_list() == here.history()["query"].to_list()


def test_models_work_in_the_analysts_process(served: tuple[dp.Session, dp.Remote]) -> None:
    _, remote = served
    model = remote.table("t").learn_threshold("x", label="y", bounds=(0, 100)).collect(dp.ZCDP(1))
    assert type(model).__name__ == "Threshold" and model.predict([1.0, 99.0]).tolist() == [1, 0]
    box = remote.table("t").learn_rectangle(["x"], label="y", bounds={"x": (0, 100)}).collect(dp.ZCDP(1))
    assert type(box).__name__ == "Rectangle" and list(box.intervals) == ["x"] and box.expr() is not None
    low, high = remote.table("t").bounds("x", domain=(0, 1000)).collect(dp.ZCDP(1))
    assert 0 <= low < high <= 200


def test_options_of_an_aggregate(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    chain: Chain = lambda t: t.group_by("g", keys=["a", "b"]).agg(dp.len(), dp.mean("x", bounds=(0, 100)))  # noqa: E731
    frame = chain(remote.table("t")).collect(dp.ZCDP(1), ci=0.9)
    assert {"len_ci_low", "x_mean_ci_high"} <= set(frame.columns)
    released, diagnostics = chain(remote.table("t")).collect(dp.ZCDP(1), diagnostics=True)
    assert released.height == 2 and diagnostics.height >= 1
    aimed = dp.Accuracy(half_width={"len": 10}, confidence=0.9)
    assert chain(remote.table("t")).cost(accuracy=aimed) == chain(sess.table("t")).cost(accuracy=aimed)
    with pytest.raises(dp.SignatureError, match=r"^ci: not an argument of collect\(\)"):
        remote.table("t").bounds("x", domain=(0, 1000)).collect(dp.ZCDP(1), ci=0.9)


def test_the_sessions_errors_arrive_as_themselves_and_nothing_is_charged(
        served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    cases: list[Chain] = [
        lambda t: t.filter(pl.col("nope") > 1).agg(dp.len()),
        lambda t: t.filter(pl.col("x") > pl.col("x").mean()).agg(dp.len()),
        lambda t: t.with_columns(pl.col("x").cast(pl.Int8)).agg(dp.len()),
        lambda t: t.agg(dp.sum("g", bounds=(0, 1))),
        lambda t: t.agg(dp.sum("x", bounds=(5, 1))),
        lambda t: t.group_by("g", keys=["a"]).agg(dp.measure("no such kind", "x")),
        lambda t: t.bound(max_rows=10).agg(dp.len()),
        lambda t: t.group_by("g").top_k(k=0),
        lambda t: t.query("no_such_family", 1),
    ]
    for chain in cases:
        with pytest.raises(dp.DPFrameError) as remote_error:
            chain(remote.table("t")).collect(dp.ZCDP(1, 1e-8))
        with pytest.raises(dp.DPFrameError) as local_error:
            chain(sess.table("t")).collect(dp.ZCDP(1, 1e-8))
        assert type(remote_error.value) is type(local_error.value)
        assert str(remote_error.value) == str(local_error.value)
    with pytest.raises(dp.PluginError, match="no_such_family"):      # in process: an AttributeError, at once
        remote.table("t").no_such_family(1).cost(dp.ZCDP(1))
    assert remote.spent() == sess.spent() and sess.history().height == 0


def test_what_cannot_cross_is_refused_in_the_analysts_process(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    t = remote.table("t")
    with pytest.raises(dp.PlanError, match="Python function"):
        t.with_columns(pl.col("x").map_batches(lambda s: s)).agg(dp.len())
    with pytest.raises(dp.ArgumentError, match="cannot send a function") as refused:
        t.query("agg", lambda: 1)
    assert refused.value.argument == "query" and refused.value.fix
    with pytest.raises(dp.ArgumentError, match="NaN or infinite"):
        t.filter(pl.col("x") != float("nan")).agg(dp.len())
    deep = pl.col("x")
    for _ in range(100):
        deep = deep + 1
    with pytest.raises(dp.ArgumentError, match="nested too deep"):
        t.with_columns(z=deep).agg(dp.len())
    assert sess.history().height == 0


def test_a_chain_is_immutable_and_reusable(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    base = remote.table("t").filter(pl.col("x") > 10)
    a, b = base.agg(dp.len()), base.group_by("g", keys=["a"]).agg(dp.len())
    assert repr(a) == "<dp.RemoteQuery t.filter(...).agg(...)>"
    assert repr(base) == "<dp.RemoteFrame t.filter(...)>"
    assert a.cost(dp.ZCDP(1)) == b.cost(dp.ZCDP(1)) == dp.ZCDP(1)
    assert a.collect(dp.ZCDP(1)).columns == ["len"] and b.collect(dp.ZCDP(1)).columns == ["g", "len"]
    assert sess.spent() == dp.ZCDP(2)


def test_a_frames_schema_after_its_calls(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    for chain in (lambda t: t, lambda t: t.with_columns(z=pl.col("x") * 2, m=pl.col("d").dt.month()).drop("d"),
                  lambda t: t.select("g", (pl.col("x") > 3).alias("big")).rename({"g": "group"})):
        assert chain(remote.table("t")).schema == chain(sess.table("t")).schema
        assert chain(remote.table("t")).columns == chain(sess.table("t")).columns
    with pytest.raises(dp.SchemaError) as here:
        sess.table("t").select("nope")
    with pytest.raises(dp.SchemaError) as there:
        remote.table("t").select("nope").schema  # noqa: B018
    assert str(there.value) == str(here.value)
    with pytest.raises(dp.PlanError, match="does not end in a frame"):
        remote._request({"op": "schema", "chain": {"table": "t", "steps": [
            {"call": "agg", "args": [{"$measure": {"kind": "len"}}]}]}})
    assert sess.history().height == 0


def test_categorical_keys_cross_as_their_values(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    keys = pl.DataFrame({"g": ["a", "c"]}, schema={"g": pl.Categorical()})
    chain: Chain = lambda t: t.group_by("g", keys=keys).agg(dp.len())  # noqa: E731
    assert chain(remote.table("t")).cost(dp.ZCDP(1)) == chain(sess.table("t")).cost(dp.ZCDP(1))
    assert chain(remote.table("t")).collect(dp.ZCDP(1))["g"].cast(pl.String).to_list() == ["a", "c"]


def test_polars_habits_are_the_errors_they_are_in_process(served: tuple[dp.Session, dp.Remote]) -> None:
    sess, remote = served
    for name in ("head", "sort", "collect_schema_x", "to_pandas"):
        for here, there in ((sess.table("t"), remote.table("t")),
                            (sess.table("t").group_by("g", keys=["a"]), remote.table("t").group_by("g", keys=["a"]))):
            try:
                getattr(here, name)
            except AttributeError as e:
                local: AttributeError | None = e
            else:
                local = None
            if isinstance(local, dp.PolarsHabitError):
                with pytest.raises(dp.PolarsHabitError) as far:
                    getattr(there, name)
                assert str(far.value) == str(local)
            else:
                assert callable(getattr(there, name))     # maybe a plugin's family on the server: asked when sent


@dataclass(frozen=True)
class _Elsewhere:
    """A result class of a package the analyst's process is not trusted to import."""

    n: int
    frame: pl.DataFrame


def test_results_are_rebuilt_only_for_dpframes_packages() -> None:
    from dpframe_learning.queries import NoAnswer

    from dpframe.remote.values import pack_result, unpack_result

    frames: list[pl.DataFrame] = []
    packed = pack_result((_Elsewhere(3, pl.DataFrame({"a": [1]})), NoAnswer("few rows", 10, 20)), frames)
    other, rebuilt = unpack_result(json.loads(json.dumps(packed)), frames)
    assert other["type"] == "_Elsewhere" and other["n"] == 3 and other["frame"].equals(pl.DataFrame({"a": [1]}))
    assert rebuilt == NoAnswer("few rows", 10, 20) and not rebuilt


def test_a_result_of_no_known_type_arrives_as_its_text() -> None:
    """A plugin family's result of its own class (no dataclass) crossed as nothing: the query failed after its charge.

    It now arrives as its type and ``repr`` (released already; in process the analyst holds the object itself).
    """
    import json

    from dpframe.remote.values import REPR_LIMIT, pack_result, unpack_result

    class Odd:
        def __repr__(self) -> str:
            return "Odd(3)"

    class Broken:
        def __repr__(self) -> str:
            raise ValueError("no")

    class Long:
        def __repr__(self) -> str:
            return "x" * (REPR_LIMIT + 5)

    frames: list[pl.DataFrame] = []
    sent = json.loads(json.dumps(pack_result((Odd(), Broken(), Long()), frames)))
    odd, broken, long = unpack_result(sent, frames)
    assert odd == {"type": f"{__name__}.{Odd.__qualname__}", "repr": "Odd(3)"}
    assert broken["repr"] == "<repr failed: ValueError>"
    assert len(long["repr"]) == REPR_LIMIT + 1 and frames == []
