"""The composed exception-oracle fuzzer: a chain of accepted operations behaves alike on D and on D′.

``test_exception_oracle.py`` checks each allow-listed operation on its own; an analyst composes them: derived
columns read by later steps, filters, casts between them, group keys computed from expressions, measures on
derived columns (:mod:`tests.adversarial.composed` builds such chains at random). Each chain runs on D and on
D′ = D plus one unit whose rows hold adversarial values of every column's type (the engine's own probe values),
on the Polars and DuckDB backends (Spark: on :data:`~tests.adversarial.composed.SPARK`, the table less the
``Duration`` column it refuses; a few tuned chains by default, more under ``-m slow``), with both datasets in
memory or each written to a Parquet or CSV file registered by its path
(:data:`~tests.adversarial.composed.STORAGES`: the file is scanned lazily by Polars, scanned by DuckDB itself, or
read through Polars). What the analyst sees must be the same kind of
outcome on both: released on both (values and row counts may differ), or the same dpframe error with the
same message on both; the same warnings; the same ledger statuses. A chain charged, then failed, or refused
on one dataset only, answers "is this unit in the data?" outside any ε. The tuned chains (``chains(tuned=True)``)
add what an analyst sets around them — automatic parameters, ``collect``'s ``ci=`` / ``diagnostics=`` /
``accuracy=`` with output names of their choosing — and every other query ending (top-k's methods, the frame
query families, the robust median), against a unit that may have many rows, and may Poisson-sample the frame
(``chains(sample=True)``); a ⊥ answer (``dp.NoAnswer``,
``dp.TopKFailed``, ``None``) is itself a DP release and matches any other.
"""

from __future__ import annotations

import warnings
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import dpframe as dp

from .composed import (
    DP_ERRORS,
    MEMORY,
    SPARK,
    SPARK_PARQUET,
    STORAGES,
    UNIT_TYPES,
    Chain,
    Neighbours,
    Outcome,
    Storage,
    base,
    chains,
    extreme_rows,
    open_session,
)

CI = settings(max_examples=25, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
FEW = settings(CI, max_examples=4)
DEEP = settings(max_examples=1_000, deadline=None, database=None, suppress_health_check=list(HealthCheck))
#: (backend, storage) pairs run on files: the DuckDB backend scans ``parquet_duckdb`` itself and reads the others
#: through Polars.
FILES = [("polars", "parquet"), ("polars", "csv"), ("duckdb", "parquet"), ("duckdb", "parquet_duckdb"),
         ("duckdb", "csv")]
BUDGET = dp.ApproxDP(1, 1e-6)



SESSIONS = Neighbours(open_session)
_d_session = SESSIONS.d


def outcome(sess: dp.Session, chain: Chain) -> Outcome:
    """What the analyst sees of one chain: released (with its columns and types) or the error, warnings, statuses."""
    before = sess.history().height
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            seen: tuple[Any, ...] = ("released", *_shape(chain.collect(sess, BUDGET)))
        except BaseException as e:  # noqa: BLE001 - the analyst catches everything, panics included
            seen = (type(e).__name__, str(e))
    statuses = tuple(sess.history()["status"].to_list()[before:])
    return seen, tuple(sorted((w.category.__name__, str(w.message)) for w in caught)), statuses


def _shape(result: object) -> tuple[Any, ...]:
    """What a release shows besides its values: a frame's columns and types (a diagnosed one's, and the names of
    its diagnostics), or ⊥ for a release that says no answer (``dp.TopKFailed``, ``dp.NoAnswer``, the robust median's
    ``None``): an ε-DP outcome of the data, which may differ between D and D′."""
    if isinstance(result, dp.Diagnosed):
        return tuple(result.frame.schema.items()), tuple(result.diagnostics["diagnostic"])
    if isinstance(result, pl.DataFrame):
        return (tuple(result.schema.items()),)
    return (BOTTOM,) if result is None or isinstance(result, dp.TopKFailed | dp.NoAnswer) else ()


BOTTOM = "⊥"


def same(on_d: Outcome, on_plus: Outcome) -> bool:
    """The analyst sees the same on D and D′: a ⊥ on either side (:func:`_shape`) matches any release."""
    (seen, *rest), (seen_plus, *rest_plus) = on_d, on_plus
    if BOTTOM in seen[1:2] + seen_plus[1:2]:
        seen, seen_plus = seen[:1], seen_plus[:1]
    return bool(seen == seen_plus and rest == rest_plus)


def check(chain: Chain, extra: pl.DataFrame, backend: str, storage: Storage = MEMORY, runs: int = 1) -> str:
    """The chain's outcome on D and on D′ (D plus ``extra``), both in ``storage``, agree; a refusal charged nothing.

    D′'s session runs the chain ``runs`` times, each compared (:class:`~tests.adversarial.composed.Neighbours`).
    """
    on_d = SESSIONS.compare(chain, (chain.unit, chain.account), extra, backend, storage, runs, outcome, same)
    if on_d is None:
        return "D′ refused by the session"
    seen, _, statuses = on_d
    assert seen[0] == "released" or statuses == (), f"{backend}: refused but charged: {chain}: {on_d}"
    assert seen[0] in DP_ERRORS | {"released"}, f"{backend}: not a dpframe error: {chain}: {on_d}"
    return f"{seen[0]}: {seen[1][:60]}" if seen[0] != "released" else "released"


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@CI
@given(chain=chains(), extra=extreme_rows())
def test_a_chain_behaves_alike_on_neighbouring_datasets(backend: str, chain: Chain, extra: pl.DataFrame) -> None:
    event(check(chain, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@DEEP
@given(chain=chains(max_steps=5, depth=3), extra=extreme_rows())
def test_many_chains_behave_alike_on_neighbouring_datasets(backend: str, chain: Chain, extra: pl.DataFrame) -> None:
    event(check(chain, extra, backend))


@pytest.mark.parametrize(("backend", "stored"), FILES)
@FEW
@given(data=st.data())
def test_a_chain_behaves_alike_on_neighbouring_files(backend: str, stored: str, data: st.DataObject) -> None:
    storage = STORAGES[stored]
    event(check(data.draw(chains(storage=storage)), data.draw(extreme_rows(storage)), backend, storage,
                data.draw(st.sampled_from([1, 3]))))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "stored"), FILES)
@DEEP
@given(data=st.data())
def test_many_chains_behave_alike_on_neighbouring_files(backend: str, stored: str, data: st.DataObject) -> None:
    storage = STORAGES[stored]
    event(check(data.draw(chains(max_steps=5, depth=3, storage=storage)), data.draw(extreme_rows(storage)),
                backend, storage, data.draw(st.sampled_from([1, 3]))))


@pytest.mark.slow
@settings(max_examples=15, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(chain=chains(storage=SPARK), extra=extreme_rows(SPARK))
def test_a_chain_behaves_alike_on_spark(chain: Chain, extra: pl.DataFrame, spark_session: Any) -> None:
    """On the Spark backend, the table less the ``Duration`` column it refuses (:data:`SPARK`; with it, every
    example compared two refused sessions)."""
    check(chain, extra, "spark", SPARK)


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(CI, max_examples=12)
@given(chain=chains(tuned=True), extra=extreme_rows(many=True))
def test_a_tuned_chain_behaves_alike_on_neighbouring_datasets(backend: str, chain: Chain, extra: pl.DataFrame
                                                              ) -> None:
    """Automatic parameters, ``collect`` options and names, and every other query ending (``chains(tuned=True)``),
    against a unit that may also have many rows (``extreme_rows(many=True)``)."""
    event(check(chain, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@DEEP
@given(chain=chains(max_steps=5, depth=3, tuned=True), extra=extreme_rows(many=True))
def test_many_tuned_chains_behave_alike_on_neighbouring_datasets(backend: str, chain: Chain, extra: pl.DataFrame
                                                                 ) -> None:
    event(check(chain, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "stored"), FILES)
@DEEP
@given(data=st.data())
def test_many_tuned_chains_behave_alike_on_neighbouring_files(backend: str, stored: str, data: st.DataObject
                                                              ) -> None:
    storage = STORAGES[stored]
    event(check(data.draw(chains(max_steps=5, depth=3, storage=storage, tuned=True)),
                data.draw(extreme_rows(storage, many=True)), backend, storage, data.draw(st.sampled_from([1, 3]))))


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(CI, max_examples=10)
@given(chain=chains(tuned=True, sample=True), extra=extreme_rows(many=True))
def test_a_tuned_chain_with_samples_behaves_alike_on_neighbouring_datasets(backend: str, chain: Chain,
                                                                           extra: pl.DataFrame) -> None:
    """Tuned chains whose steps may Poisson-sample the frame (``frame.sample(rate)``, composed with filters,
    derived columns and ``bound()``): refused, free, under an ``"auto"`` unit; amplified otherwise. D's session is
    shared by the examples, so D's and D′'s runs draw different query seeds and sample independently (one may keep
    no unit where the other keeps some): the outcome may depend on neither the data nor the sample drawn. (The
    interactive oracle's fresh sessions draw the same seeds: there both keep the same units of D.)"""
    event(check(chain, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@DEEP
@given(chain=chains(max_steps=5, depth=3, tuned=True, sample=True), extra=extreme_rows(many=True))
def test_many_tuned_chains_with_samples_behave_alike_on_neighbouring_datasets(backend: str, chain: Chain,
                                                                              extra: pl.DataFrame) -> None:
    event(check(chain, extra, backend))


@settings(CI, max_examples=2)
@given(chain=chains(tuned=True, sample=True, storage=SPARK), extra=extreme_rows(SPARK))
def test_a_tuned_chain_behaves_alike_on_spark(chain: Chain, extra: pl.DataFrame, spark_session: Any) -> None:
    """The tuned surfaces (automatic bounds, ``ci=``, ``diagnostics=True``, every ending, samples) on the Spark
    backend: a few chains here (Spark is slow), many under ``-m slow``."""
    event(check(chain, extra, "spark", SPARK))


@pytest.mark.slow
@settings(DEEP, max_examples=150)
@given(chain=chains(max_steps=5, depth=3, tuned=True, sample=True, storage=SPARK),
       extra=extreme_rows(SPARK, many=True))
def test_many_tuned_chains_behave_alike_on_spark(chain: Chain, extra: pl.DataFrame, spark_session: Any) -> None:
    event(check(chain, extra, "spark", SPARK))


@pytest.mark.slow
@settings(DEEP, max_examples=100)
@given(data=st.data())
def test_many_tuned_chains_behave_alike_on_spark_files(data: st.DataObject, spark_session: Any) -> None:
    """D and D′ each written to a Parquet file the Spark backend reads itself (:data:`SPARK_PARQUET`)."""
    storage = SPARK_PARQUET
    event(check(data.draw(chains(max_steps=5, depth=3, storage=storage, tuned=True, sample=True)),
                data.draw(extreme_rows(storage, many=True)), "spark", storage, data.draw(st.sampled_from([1, 3]))))


class _FailsOnDPlus(Chain):
    """A stand-in for a bug: the query fails on every session but D's."""

    def build(self, sess: dp.Session) -> Any:
        if sess is not _d_session("polars", (self.unit, self.account)):
            raise RuntimeError("failed on D′ only")
        return super().build(sess)


def test_the_check_catches_a_chain_that_fails_on_one_dataset_only() -> None:
    """The comparison can fail: an outcome that differs between D and D′ is reported, with the chain and the unit."""
    extra = base().head(1).with_columns(u=pl.lit(10_000, dtype=pl.Int64))
    with pytest.raises(AssertionError, match="RuntimeError"):
        check(_FailsOnDPlus(ending=("agg", (dp.len(),))), extra, "polars")
    check(Chain(ending=("agg", (dp.len(),))), extra, "polars")


def test_a_bottom_answer_matches_a_release_only() -> None:
    """⊥ matches another release, never an error, other warnings or other ledger statuses."""
    bottom, frame = ("released", BOTTOM), ("released", (("m0", pl.Int64()),))
    assert same((bottom, (), ("committed",)), (frame, (), ("committed",)))
    assert not same((bottom, (), ("committed",)), (("DPFrameError", "x"), (), ()))
    assert not same((bottom, (), ("committed",)), (frame, (), ("failed",)))


def test_the_duckdb_backend_scans_only_parquet_duckdb_itself() -> None:
    """The file storages reach the paths they are for: DuckDB's own Parquet scan (``DuckDBBackend._parquet``) for
    ``parquet_duckdb``; the session's rows, read through Polars, for the others."""
    unit = (dp.PrivacyUnit("u", max_rows=2), "default")
    scanned = {name: _d_session("duckdb", unit, STORAGES[name])._catalog.default_backend._tables["t"].path is not None
               for name in ("parquet", "parquet_duckdb", "csv")}
    assert scanned == {"parquet": False, "parquet_duckdb": True, "csv": False}


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(CI, max_examples=3)
@given(chain=chains(tuned=True, unread=True), extra=extreme_rows(many=True))
def test_a_chain_that_reads_no_row_of_d_behaves_alike_on_neighbouring_datasets(backend: str, chain: Chain,
                                                                               extra: pl.DataFrame) -> None:
    """Tuned chains whose first step is a filter no row of D passes (``chains(unread=True)``): the query reads no row
    of D, and D′'s unit's rows when its probe values pass (what a query on no rows does — a grid of bins on DuckDB
    once failed after its charge — must not tell D from D′; review 38b)."""
    event(check(chain, extra, backend))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(DEEP, max_examples=500)
@given(chain=chains(max_steps=5, depth=3, tuned=True, sample=True, unread=True), extra=extreme_rows(many=True))
def test_many_chains_that_read_no_row_of_d_behave_alike_on_neighbouring_datasets(backend: str, chain: Chain,
                                                                                 extra: pl.DataFrame) -> None:
    event(check(chain, extra, backend))


# ------------------------------------------------------------------------------------------------ unit types

def unit_storage(data: st.DataObject, storage: Storage) -> Storage:
    """``storage`` for a unit column of a type drawn from :data:`UNIT_TYPES` (in a CSV, not binaries, which it cannot
    hold, nor millisecond datetimes, whose far ids Polars cannot write as text, nor maps, which it has no text for,
    nor unsigned 128-bit ids past 2¹²⁷ − 1, which Polars' CSV reader infers as ``Int128`` and cannot read: the
    session refuses the file, naming it)."""
    types = [t for t in sorted(UNIT_TYPES)
             if t not in ("binary", "datetime_ms", "map", "uint128") or storage.suffix != ".csv"]
    return storage.of_unit(UNIT_TYPES[data.draw(st.sampled_from(types), label="unit type")])


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@settings(CI, max_examples=3)
@given(data=st.data())
def test_a_chain_on_any_unit_type_behaves_alike_on_neighbouring_datasets(backend: str, data: st.DataObject) -> None:
    """The unit column in every type a data owner may register (:data:`~tests.adversarial.composed.UNIT_TYPES`), the
    added unit's id adversarial (an extreme, equal to one of D's by the unit equality, merged with one of D's by
    a conversion or normalization it must not make, null): tuned chains with samples, and group keys that are the
    unit column itself. A type a backend refuses (``Int128`` and millisecond datetimes on DuckDB and Spark) is
    refused on D and D′ alike."""
    storage = unit_storage(data, MEMORY)
    event(check(data.draw(chains(storage=storage, tuned=True, sample=True, units=True)),
                data.draw(extreme_rows(storage, many=True, ids=True)), backend, storage))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@DEEP
@given(data=st.data())
def test_many_chains_on_any_unit_type_behave_alike_on_neighbouring_datasets(backend: str, data: st.DataObject
                                                                            ) -> None:
    storage = unit_storage(data, MEMORY)
    tuned = data.draw(st.booleans())
    event(check(data.draw(chains(max_steps=5, depth=3, storage=storage, tuned=tuned, sample=tuned, units=True)),
                data.draw(extreme_rows(storage, many=tuned, ids=True)), backend, storage))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "stored"), FILES)
@settings(DEEP, max_examples=300)
@given(data=st.data())
def test_many_chains_on_any_unit_type_behave_alike_on_neighbouring_files(backend: str, stored: str,
                                                                         data: st.DataObject) -> None:
    """Samples and ``bound()`` steps on file-backed tables whose unit column is of any type (a CSV reads dates and
    categories back as text, and D′'s ids are those that survive the file)."""
    storage = unit_storage(data, STORAGES[stored])
    event(check(data.draw(chains(max_steps=5, depth=3, storage=storage, tuned=True, sample=True, units=True)),
                data.draw(extreme_rows(storage, many=True, ids=True)), backend, storage,
                data.draw(st.sampled_from([1, 3]))))


@pytest.mark.slow
@settings(DEEP, max_examples=150)
@given(data=st.data())
def test_many_chains_on_any_unit_type_behave_alike_on_spark(data: st.DataObject, spark_session: Any) -> None:
    storage = unit_storage(data, data.draw(st.sampled_from([SPARK, SPARK_PARQUET])))
    event(check(data.draw(chains(max_steps=5, depth=3, storage=storage, tuned=True, sample=True, units=True)),
                data.draw(extreme_rows(storage, many=True, ids=True)), "spark", storage,
                data.draw(st.sampled_from([1, 3]))))
