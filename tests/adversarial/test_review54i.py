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
