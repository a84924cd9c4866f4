"""Review 54i: follow-ups from review 54e — public keys built in the key column's type, and the growth bound on
Polars string expressions (a method chain's output per input character).

Each test is one attack or one pinned refusal; those that found something say so in their docstring.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import dpframe as dp

_WIDE = dp.PureDP(100)


def _session(data: pl.DataFrame) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u", max_rows=1), budget=_WIDE, seed=0)


# ----------------------------------------------------------------- 1. public keys in the key column's own type

_WIDE_INTS: list[tuple[pl.DataType, list[int]]] = [
    (pl.UInt128(), [1, 2**128 - 1]), (pl.UInt64(), [0, 2**64 - 1]), (pl.Int128(), [-(2**127), 2**127 - 1]),
    (pl.UInt128(), [2**127, 3]),
]


@pytest.mark.parametrize(("dtype", "keys"), _WIDE_INTS, ids=lambda v: str(v))
def test_public_keys_past_int64_are_read_in_the_key_column_type(dtype: pl.DataType, keys: list[int]) -> None:
    """Found: ``group_by("g", keys=[1, 2**128 - 1])`` on a ``UInt128`` column was refused ("cannot read keys: ...
    Series of type Int64"): the key list's type was guessed from its first value. The keys are now built in the
    column's type (free, before any read), so every key that fits the column is accepted, as a list or a dict."""
    data = pl.DataFrame({"u": [0, 1, 2], "g": pl.Series(keys + [keys[0]], dtype=dtype)})
    sess = _session(data)
    for given in (keys, {"g": keys}):
        out = sess.table("t").group_by("g", keys=given).agg(dp.len()).collect(dp.PureDP(1))
        assert out.schema["g"] == dtype and sorted(out["g"].to_list()) == sorted(keys)
    assert sess.history()["status"].to_list() == ["committed", "committed"]


@pytest.mark.parametrize(("dtype", "key"), [(pl.UInt128(), -1), (pl.UInt128(), 2**128), (pl.UInt64(), 2**64),
                                            (pl.Int128(), 2**127), (pl.UInt8(), 256), (pl.Int8(), -129)])
def test_a_public_key_outside_the_key_column_type_is_refused_free(dtype: pl.DataType, key: int) -> None:
    """A key the column's type cannot hold is refused when the query is built, naming ``keys``, the key and the
    type, and nothing is charged (the keys are the analyst's own: the refusal reads no private row)."""
    sess = _session(pl.DataFrame({"u": [0, 1], "g": pl.Series([1, 2], dtype=dtype)}))
    with pytest.raises(dp.SchemaError) as e:
        sess.table("t").group_by("g", keys=[1, key]).agg(dp.len()).collect(dp.PureDP(1))
    assert e.value.argument == "keys" and str(key) in str(e.value) and str(dtype) in str(e.value)
    assert sess.history().height == 0


def test_keys_of_another_kind_are_still_refused_as_before() -> None:
    """Only integer keys for an integer column are built in its type: strings, floats and booleans for it keep their
    refusals (another kind, or a value the cast changes)."""
    sess = _session(pl.DataFrame({"u": [0, 1], "g": pl.Series([1, 2], dtype=pl.UInt128)}))
    bad: list[Any] = [["a", "b"], [1.5, 2.0], [True, False]]
    for keys in bad:
        with pytest.raises(dp.SchemaError) as e:
            sess.table("t").group_by("g", keys=keys).agg(dp.len()).collect(dp.PureDP(1))
        assert e.value.argument == "keys"
    assert sess.history().height == 0


# ---------------------------------------------------------------- 2. the growth bound on string expressions

_S = pl.DataFrame({"u": [0, 1, 2], "s": ["a", "bc", ""], "b": [True, False, True]})
_R = "r" * 300


def _empty(e: pl.Expr, r: str = _R) -> pl.Expr:
    return e.str.replace_all("", r, literal=True)


def _doubled(t: dp.Frame, steps: int) -> dp.Frame:
    for _ in range(steps):
        t = t.with_columns(s=pl.concat_str(pl.col("s"), pl.col("s")))
    return t


_GROWING: dict[str, Any] = {
    "nested in one expression": lambda t: t.with_columns(v=_empty(_empty(pl.col("s")))),
    "nested across two steps": lambda t: t.with_columns(v=_empty(pl.col("s"))).with_columns(w=_empty(pl.col("v"))),
    "across a rename and a select": lambda t: t.with_columns(v=_empty(pl.col("s"))).rename({"v": "x"}).select(
        "x", "b").with_columns(w=_empty(pl.col("x"))),
    "inside a filter": lambda t: t.with_columns(v=_empty(pl.col("s"))).filter(
        _empty(pl.col("v")).str.len_chars() > 3),
    "behind a private condition": lambda t: t.with_columns(
        v=pl.when(pl.col("b")).then(_empty(_empty(pl.col("s")))).otherwise(pl.lit(""))),
    "a long literal": lambda t: t.with_columns(v=_empty(pl.lit("x" * 10_000), "r" * 10_000)),
    "a regex inserting its match": lambda t: t.with_columns(
        v=pl.col("s").str.replace_all(".*", "$0" * 200)).with_columns(w=pl.col("v").str.replace_all(".*", "$0" * 200)),
    "replace_many of an empty pattern": lambda t: t.with_columns(
        v=pl.col("s").str.replace_many(["", "a"], [_R, "b"]).str.replace_many([""], [_R])),
    "concatenated copies, step by step": lambda t: _doubled(t, 16),
    "case maps and hex, step by step": lambda t: t.with_columns(v=_empty(pl.col("s"), "r" * 5000)).with_columns(
        w=pl.col("v").str.to_uppercase().str.encode("hex")),
    "a normalization, step by step": lambda t: t.with_columns(v=_empty(pl.col("s"), "r" * 2500)).with_columns(
        w=pl.col("v").str.normalize("NFKD")),
    "a measure's expression": lambda t: t.with_columns(v=_empty(pl.col("s"))).agg(
        dp.sum(_empty(pl.col("v")).str.len_chars(), bounds=(0, 10))),
}


@pytest.mark.parametrize("name", list(_GROWING))
def test_a_chain_whose_strings_multiply_is_refused_free(name: str) -> None:
    """Found (review 54e, a documented limitation until now): each call's literal is capped at 10,000 characters, but
    nested calls multiply — ``str.replace_all("", r, literal=True)`` twice turns each character into ~10⁸, in one
    expression or across steps, inside a filter or behind a private ``when``; building it took seconds to minutes of
    the engine's checks, and running it gigabytes on the rows a private condition lets through. Every such chain is
    now refused when built (free, naming the argument and the fix), before anything computes it."""
    sess = _session(_S)
    with pytest.raises(dp.PlanError) as e:
        query = _GROWING[name](sess.table("t"))
        if isinstance(query, dp.Frame):
            query.agg(dp.len()).collect(dp.PureDP(1))
        else:
            query.collect(dp.PureDP(1))
    assert "bytes per byte of its input" in str(e.value) and "25,000" in str(e.value), e.value
    assert "nested calls" in e.value.fix
    assert sess.history().height == 0


_BOUNDED: dict[str, Any] = {
    "one replacement of every position by 10,000 characters": lambda t: t.with_columns(
        v=_empty(pl.col("s"), "r" * 10_000)),
    "a literal replacement of a non-empty pattern, nested": lambda t: t.with_columns(
        v=pl.col("s").str.replace_all("a", "xyz", literal=True).str.replace_all("x", "--", literal=True)),
    "padding nested and concatenated": lambda t: t.with_columns(
        v=pl.concat_str(pl.col("s").str.zfill(10_000).str.pad_start(10_000, "-"), pl.col("s"))),
    "case maps and encodings, a few deep": lambda t: t.with_columns(
        v=pl.col("s").str.to_uppercase().str.to_lowercase().str.encode("hex").str.encode("base64")),
    "concatenated copies, ten steps": lambda t: _doubled(t, 10),
}


@pytest.mark.parametrize("name", list(_BOUNDED))
def test_a_chain_whose_strings_grow_within_the_bound_is_released(name: str) -> None:
    """What the bound keeps: single long replacements, replacements of non-empty literal patterns, paddings (which
    do not multiply), a few case maps and encodings, ten doublings."""
    sess = _session(_S)
    _BOUNDED[name](sess.table("t")).agg(dp.len()).collect(dp.PureDP(1))
    assert sess.history()["status"].to_list() == ["committed"]
