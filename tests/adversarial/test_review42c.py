"""Review 42c: what stop 42 added or changed (``git diff 2c12b48 db26a66 -- dpframe plugins``).

Scope:

* ``dpframe.engine_output.ENGINE`` / ``STREAMING``, the engines every collect of dpframe names: whether they run
  what a ``collect()`` naming no engine ran (a default engine *named* with ``pl.Config.set_engine_affinity``),
  whether the analyst can change them (module-level objects), and whether any query Polars runs for dpframe names
  no engine (``sink_*``, ``gather_every``).
* The budget rule of review 42b: ``dp.ZCDP(rho, delta)`` budgets now taken by the learners, the Gaussian sparse
  vector and the individual filter (charges against hand-computed values; the δ dropped is unused), the refusal
  texts of ``Accountant.exceeded``, and ``RenyiFilter.report``'s new branch (never less than the real spend).
* ``dpframe.sql.sandbox``: the lock re-made in a forked child and the per-process shared connection.
* ``dpframe.backends._bounding.kept``: integer units take the id-bucket path only while their span is small
  (``ID_SPAN``); the kept rows must be the law's either way (``dpframe.backends.polars.definition``).
* ``dpframe.interactive.tct.ChannelPlan.optimise``, memoized with ``dpframe.sealed.plain_cache``.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.engine_output import ENGINE, STREAMING


# --- ENGINE / STREAMING -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", [ENGINE, STREAMING], ids=["ENGINE", "STREAMING"])
@pytest.mark.parametrize("attribute", ["collect", "collect_all", "monitoring", "_name", "name", "__class__"])
def test_dpframes_engines_cannot_be_changed(engine: Any, attribute: str) -> None:
    """``dpframe.engine_output.ENGINE`` was a plain ``_AutoEngine``: ``ENGINE.collect = spy`` made every private
    read of every later release go to ``spy`` (a release's unit ids and values, then its exact sums),
    ``ENGINE.monitoring = True`` turned query monitoring back on, ``ENGINE._name = "gpu"`` ran the GPU engine, and
    ``ENGINE.__class__`` could be another class. Both engines now refuse every assignment."""
    original = type(engine)

    class Other(original):  # type: ignore[misc, valid-type]
        pass

    value: object = Other if attribute == "__class__" else (lambda *a, **k: None)
    try:
        with pytest.raises(AttributeError, match="cannot be changed"):
            setattr(engine, attribute, value)
        with pytest.raises(AttributeError, match="cannot be changed"):
            delattr(engine, attribute)
    finally:   # before the fix: undo the change
        object.__setattr__(engine, "__class__", original)
        vars(engine).pop(attribute, None)


def test_a_spy_on_the_engine_sees_no_release() -> None:
    """The end-to-end form of the attack above: a spy set on ``ENGINE`` received a release's private rows."""
    seen: list[pl.LazyFrame] = []
    collect = ENGINE.collect

    def spy(lf: pl.LazyFrame, **kwargs: Any) -> Any:
        seen.append(lf)
        return collect(lf, **kwargs)

    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2, 3], "x": [1.0, 2.0, 3.0]})}, privacy_unit=dp.PrivacyUnit("u", max_rows=1),
                      budget=dp.PureDP(10))
    try:
        try:
            ENGINE.collect = spy  # type: ignore[method-assign]
        except AttributeError:
            pass
        sess.table("t").agg(dp.sum("x", bounds=(0, 5))).collect(dp.PureDP(1))
    finally:
        vars(ENGINE).pop("collect", None)
    assert seen == []


@pytest.fixture
def engine_names(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """The name and monitoring setting of each of Polars' engine objects that collects, in order."""
    from polars.lazyframe.engine import _LocalEngine

    names: list[tuple[str, object]] = []

    def recorded(method: Any) -> Any:
        def run(self: Any, lf: Any, **kwargs: Any) -> Any:
            names.append((self.name, self.monitoring))
            return method(self, lf, **kwargs)
        return run

    monkeypatch.setattr(_LocalEngine, "collect", recorded(_LocalEngine.collect))
    monkeypatch.setattr(_LocalEngine, "collect_all", recorded(_LocalEngine.collect_all))
    return names


@pytest.mark.parametrize(("affinity", "runs"), [(None, "auto"), ("auto", "auto"), ("in-memory", "in-memory"),
                                                ("streaming", "streaming"), ("gpu", "auto")])
def test_a_named_default_engine_runs_dpframes_collects(affinity: str | None, runs: str,
                                                      engine_names: list[tuple[str, object]]) -> None:
    """A ``collect()`` that names no engine runs on the engine named with ``pl.Config.set_engine_affinity``
    (``"in-memory"``, ``"streaming"``): Polars' ``"auto"`` engine ran dpframe's collects whatever the data owner
    named (in Polars 2.1 ``"auto"`` streams, so ``"in-memory"`` was never run), while ``docs/guarantees.md`` said
    it follows a named default. A named GPU engine (refused by ``check_engine`` before each read, but one set by
    another thread after it) runs ``"auto"``; ``STREAMING`` streams whatever is named."""
    frame = pl.LazyFrame({"x": [1, 2, 3]}).select(pl.col("x").sum())
    try:
        pl.Config.set_engine_affinity(affinity)  # type: ignore[arg-type]
        assert frame.collect(engine=ENGINE).item() == 6
        assert pl.collect_all([frame], engine=ENGINE)[0].item() == 6
        assert frame.collect(engine=STREAMING).item() == 6
    finally:
        pl.Config.set_engine_affinity(None)
    assert engine_names == [(runs, False), (runs, False), ("streaming", False)]


def test_a_release_runs_on_the_named_default_engine(engine_names: list[tuple[str, object]]) -> None:
    """A release under ``pl.Config.set_engine_affinity("in-memory")`` runs no query on the ``"auto"`` engine (the
    catalog's count of a table's rows streams by choice: ``STREAMING``)."""
    sess = dp.Session({"t": pl.DataFrame({"u": [1, 2, 2, 3], "g": ["a", "b", "a", "b"], "x": [1.0, 2.0, 3.0, 4.0]})},
                      privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=dp.PureDP(10))
    try:
        pl.Config.set_engine_affinity("in-memory")
        sess.table("t").group_by("g", keys=["a", "b"]).agg(dp.sum("x", bounds=(0, 5))).collect(dp.PureDP(1))
    finally:
        pl.Config.set_engine_affinity(None)
    assert ("in-memory", False) in engine_names and "auto" not in {name for name, _ in engine_names}, engine_names


def test_no_query_of_the_engine_runs_on_polars_default_engine() -> None:
    """Review 42a's meta-test holds ``collect``, ``collect_all``, ``collect_async`` and ``collect_batches``; Polars
    also runs a query on its default engine for ``LazyFrame.sink_*`` (an ``engine=`` of their own), and for
    ``LazyFrame.describe`` and ``LazyFrame.show``, which take none: dpframe and its plugins call the former only
    with ``engine=ENGINE``/``STREAMING``, and the latter never. (``DataFrame.gather_every`` collects on the default
    engine too; dpframe's two calls, in ``polars_windows``, are on lazy frames.)"""
    import ast
    from pathlib import Path

    root = Path(dp.__file__).parent
    sinks = ("sink_parquet", "sink_ipc", "sink_csv", "sink_ndjson", "sink_batches", "sink_delta", "sink_iceberg")
    unnamed = []
    for path in [*root.rglob("*.py"), *(root.parent / "plugins").rglob("*.py")]:
        if "testing" in path.parts:
            continue
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            engine = next((k.value for k in call.keywords if k.arg == "engine"), None)
            named = isinstance(engine, ast.Name) and engine.id in ("ENGINE", "STREAMING")
            if (call.func.attr in sinks and not named) or (
                    call.func.attr in ("describe", "show") and not call.args and not call.keywords
                    and "lazy" in ast.unparse(call.func.value)):
                unnamed.append(f"{path.relative_to(root.parent)}:{call.lineno}: {ast.unparse(call)[-60:]}")
    assert unnamed == [], unnamed
