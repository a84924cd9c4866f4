"""Issue 19 item 1: pandas DataFrames and Arrow-stream objects are accepted (converted once); others named."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pytest

import dpframe as dp

pd = pytest.importorskip("pandas")

ROWS = {"u": [1, 2, 3, 4], "city": ["a", "b", "a", "a"], "x": [1.5, 2.0, None, 4.0]}


class Stream:
    """A minimal third-party object exposing only the Arrow PyCapsule stream interface."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.table.__arrow_c_stream__(requested_schema)


def _count(source: object, backend: str = "polars") -> list[int]:
    sess = dp.Session({"t": source}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10**9), seed=0,
                      backend=backend)
    assert sess.table("t").schema == pl.Schema({"u": pl.Int64, "city": pl.String, "x": pl.Float64})
    return sess.table("t").group_by("city", keys=["a", "b"]).agg(dp.len()).collect(dp.PureDP(10**8))["len"].to_list()


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("kind", ["pandas", "stream", "reader", "duckdb"])
def test_pandas_and_arrow_streams_are_tables(kind: str, backend: str) -> None:
    arrow = pa.table(ROWS)
    source = {"pandas": lambda: pd.DataFrame(ROWS), "stream": lambda: Stream(arrow),
              "reader": lambda: arrow.to_reader(), "duckdb": lambda: duckdb.arrow(arrow)}[kind]()
    assert _count(source, backend) == [3, 1]


def test_pandas_is_converted_once() -> None:
    df = pd.DataFrame(ROWS)
    sess = dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10**9), seed=0)
    df.loc[0, "city"] = "b"          # later changes to the caller's frame do not reach the session
    out = sess.table("t").group_by("city", keys=["a", "b"]).agg(dp.len()).collect(dp.PureDP(10**8))
    assert out["len"].to_list() == [3, 1]


@pytest.mark.parametrize("source, message", [
    ({"u": [1]}, "unsupported table type builtins.dict"),
    ([1, 2], "unsupported table type builtins.list"),
    (pd.DataFrame({0: [1], "u": [2]}), "non-string column names"),
    (pd.DataFrame([[1, 2]], columns=["u", "u"]), "duplicate column names"),
])
def test_other_sources_are_refused_naming_the_table(source: object, message: str) -> None:
    with pytest.raises(dp.SchemaError, match=message) as err:
        dp.Session({"flights": source}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(1))
    assert err.value.argument == "tables['flights']"
    assert "pandas DataFrame" in str(err.value) or "rename" in str(err.value)


def test_public_tables_accept_pandas_too() -> None:
    sess = dp.Session({"t": pl.DataFrame(ROWS)}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10**9), seed=0,
                      public_tables={"cities": pd.DataFrame({"city": ["a", "b"], "country": ["x", "y"]})})
    q = sess.sql("SELECT country, COUNT(*) AS n FROM t JOIN cities USING (city) GROUP BY country",
                 keys={"country": ["x", "y"]})
    assert q.collect(dp.PureDP(10**8))["n"].to_list() == [3, 1]
