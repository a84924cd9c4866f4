"""Review 50c: stops 48-49 against an analyst who picks every argument, table, seed order and query.

1. The user-level bounding's memory rework (r49b): rows not ranked as a flag beside the unit column
   (``kept(..., ranked)``), integer units read in place, row hashes a slice of ``CHUNK`` rows at a time, the
   copy path's fewer arrays. The law must not move: each unit keeps a uniformly random ``min(k, n)`` of its
   rows, a row's hash depends on its values and the seed only (not on where the slices fall, its position, or
   the other units' rows), and a row not ranked uses up nothing.
2. The exponential mechanism's blocks of 8192 items (r49a): its draws must stay the exact argmax of the scores
   that the words decide, at and across block boundaries (segments straddling them; odd words there).
"""

from __future__ import annotations

import collections
import decimal
import itertools
import math
import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpframe.backends import polars as polars_backend
from dpframe.backends._bounding import CHUNK
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.polars import PolarsBackend, definition, kept_mask, row_hashes
from dpframe.mechanism import Statistic
from dpframe.noise import SeededRandomSource
from dpframe.noise.exponential import exponential_index_grouped
from dpframe.privacy_unit import PrivacyUnit

sys.path.insert(0, str(Path(__file__).parent))
from test_bounding_law import _TUNING, SEED, _tables, _tuned  # noqa: E402

# ---------------------------------------------------------------- 1. kept(..., ranked): the law on nulled units


def _law(units: pl.Series, hashes: npt.NDArray[np.uint64], k: int, ranked: npt.NDArray[np.bool_]) -> list[bool]:
    """The definition's rows on the units nulled where not ranked (a null unit: never kept, uses nothing)."""
    nulled = pl.select(pl.when(pl.Series(ranked, dtype=pl.Boolean)).then(units)).to_series() if units.len() \
        else units
    out = np.zeros(units.len(), dtype=bool)
    at = np.flatnonzero(nulled.is_not_null().to_numpy())
    if at.size:
        out[at] = definition(nulled.gather(at), hashes[at], SEED, k)
    return out.tolist()


def _check_ranked(table: tuple[pl.Series, npt.NDArray[np.uint64], int], tuning: dict[str, Any], threads: str,
                  ranked: list[bool]) -> None:
    units, hashes, k = table
    mask = np.array(ranked, dtype=bool)
    with _tuned(tuning, threads):
        got = kept_mask(units, hashes, SEED, k, mask)
    assert got.tolist() == _law(units, hashes, k, mask), (units.to_list(), ranked, hashes.tolist(), k, tuning)


@st.composite
def _ranked_tables(draw: st.DrawFn) -> tuple[tuple[pl.Series, npt.NDArray[np.uint64], int], list[bool]]:
    table = draw(_tables())
    n = table[0].len()
    return table, draw(st.lists(st.booleans(), min_size=n, max_size=n))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(_ranked_tables(), _TUNING, st.sampled_from(["1", "4"]))
def test_rows_not_ranked_keep_the_laws_rows_on_adversarial_tables(
        drawn: tuple[tuple[pl.Series, npt.NDArray[np.uint64], int], list[bool]], tuning: dict[str, Any],
        threads: str) -> None:
    """test_bounding_law's adversarial tables (every unit type at its extremes, nulls, chunks, hashes tied in
    their high bits, the module's constants shrunk), now with a mask of the rows ranked: ``kept(..., ranked)``
    (the flag beside the unit column, r49b) must keep exactly the law's rows on the units nulled where not
    ranked — the in-place ids, ``_ids_or`` over chunks with nulls, and the hashed route alike."""
    table, ranked = drawn
    _check_ranked(table, tuning, threads, ranked)


@pytest.mark.slow
@settings(max_examples=4_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(_ranked_tables(), _TUNING, st.sampled_from(["1", "4"]))
def test_rows_not_ranked_keep_the_laws_rows_at_length(
        drawn: tuple[tuple[pl.Series, npt.NDArray[np.uint64], int], list[bool]], tuning: dict[str, Any],
        threads: str) -> None:
    table, ranked = drawn
    _check_ranked(table, tuning, threads, ranked)


# ---------------------------------------------------------------- 1. the law's statistics, through the backend

_UNIT_TYPES: dict[str, tuple[list[Any], pl.DataType]] = {
    "int64 ids (read in place)": ([5, 0, 1, 2, 3, 4, 6, 7], pl.Int64()),
    "int64 extremes": ([-5, -(2**63), 7, 2**63 - 1], pl.Int64()),
    "uint64 above 2**63": ([2**64 - 1, 0, 1], pl.UInt64()),
    "string": (["a", "b", ""], pl.String()),
    "int128": ([2**100, -1], pl.Int128()),
    "float -0.0 / NaN": ([-0.0, float("nan"), 1.0], pl.Float64()),
    "categorical": (["a", "b"], pl.Categorical()),
}


def _unit_table(ids: list[Any], dtype: pl.DataType, unranked: bool) -> pl.DataFrame:
    """Unit ``ids[0]``: rows x = 0, 0 (a copy), 1, 2, 3 in group 'a' and, if ``unranked``, x = 4 in group 'c'
    (outside the public keys); every other id one row in group 'b'."""
    x = [0, 0, 1, 2, 3, *([4] if unranked else []), *[9] * (len(ids) - 1)]
    g = ["a"] * 5 + (["c"] if unranked else []) + ["b"] * (len(ids) - 1)
    u = [ids[0]] * (6 if unranked else 5) + list(ids[1:])
    return pl.DataFrame({"u": pl.Series(u, dtype=dtype), "g": g, "x": x})


def _kept_subsets(frame: pl.DataFrame, keys: pl.DataFrame | None, seeds: range) -> collections.Counter[tuple[int, ...]]:
    backend = PolarsBackend()
    backend.register("t", frame.lazy())
    out: collections.Counter[tuple[int, ...]] = collections.Counter()
    for seed in seeds:
        request = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=2), ("g",), keys,
                                    (Statistic("nonnull", "x"),), seed)
        kept = backend.bounded(request).filter(pl.col("g") != "b").collect()
        out[tuple(sorted(kept["x"].to_list()))] += 1
    return out


def _check_uniform(kind: str, seeds: range) -> None:
    """Unit ids[0]'s 5 ranked rows (one a copy of another) with max_rows = 2: each of the C(5, 2) = 10 row
    pairs equally likely (so a copy pair (0, 0) 1/10, x = 0 with another 4/10 ...), chi-square over the seeds;
    and a row outside the public keys (never ranked) changes nothing: the same pairs seed by seed."""
    ids, dtype = _UNIT_TYPES[kind]
    plain = _kept_subsets(_unit_table(ids, dtype, False), None, seeds)
    with_unranked = _kept_subsets(_unit_table(ids, dtype, True), pl.DataFrame({"g": ["a", "b"]}), seeds)
    assert plain == with_unranked
    rows = [0, 0, 1, 2, 3]
    law = collections.Counter(tuple(sorted((rows[i], rows[j]))) for i, j in itertools.combinations(range(5), 2))
    assert set(plain) <= set(law) and sum(plain.values()) == len(seeds), plain
    observed = [plain[pair] for pair in law]
    expected = [len(seeds) * count / 10 for count in law.values()]
    assert stats.chisquare(observed, expected).pvalue > 1e-4, (kind, plain)


@pytest.mark.parametrize("kind", ["int64 ids (read in place)", "string"])
def test_each_unit_keeps_a_uniform_subset_whether_rows_are_ranked_or_not(kind: str) -> None:
    _check_uniform(kind, range(300))


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(_UNIT_TYPES))
def test_each_unit_keeps_a_uniform_subset_of_every_unit_type(kind: str) -> None:
    _check_uniform(kind, range(2000))


# ---------------------------------------------------------------- 1. D and D′ = D plus one unit: the same rows kept

_NEIGHBOUR_IDS: dict[str, tuple[pl.DataType, list[Any], list[Any]]] = {
    # (type, D's ids, the added unit's candidates: extremes that move the id span, the minimum, the route)
    "int64": (pl.Int64(), [0, 1, 2, 3, 5, 1000], [4, -1, 2**63 - 1, -(2**63), 10**7]),
    "uint64": (pl.UInt64(), [0, 1, 2, 3, 5, 1000], [4, 2**64 - 1, 2**63, 10**7]),
    "int8": (pl.Int8(), [0, 1, 2, 3, 5], [4, 127, -128]),
    "int128": (pl.Int128(), [0, 1, 2, 2**100], [3, -(2**127), 2**127 - 1]),
    "float": (pl.Float64(), [0.0, 1.0, 2.5], [-1.0, float("nan"), float("inf"), 2.0**60]),
    "string": (pl.String(), ["a", "b", "", "a\x00"], ["zz", "b\x00", "é"]),
}


@st.composite
def _neighbours(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(_NEIGHBOUR_IDS)))
    dtype, ids, extra = _NEIGHBOUR_IDS[kind]
    n = draw(st.integers(1, 30))
    m = draw(st.integers(1, 6))
    return {"dtype": dtype, "ids": draw(st.lists(st.sampled_from(ids), min_size=n, max_size=n)),
            "g": draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n)),
            "x": draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)),
            "extra": draw(st.sampled_from(extra)), "extra_g": draw(st.lists(st.sampled_from("abc"), min_size=m,
                                                                            max_size=m)),
            "extra_x": draw(st.lists(st.integers(0, 2), min_size=m, max_size=m)), "at": draw(st.integers(0, n)),
            "cuts": sorted(draw(st.lists(st.integers(0, n), max_size=3))),
            "keys": draw(st.sampled_from([None, ["a", "b"], ["a"]])), "max_rows": draw(st.integers(1, 3)),
            "max_groups": draw(st.sampled_from([None, 1])), "seed": draw(st.integers(0, 2**40))}


def _bounded_rows(frame: pl.DataFrame, case: dict[str, Any]) -> pl.DataFrame:
    backend = PolarsBackend()
    backend.register("t", frame.lazy())
    keys = None if case["keys"] is None else pl.DataFrame({"g": case["keys"]})
    request = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=case["max_rows"], max_groups=case["max_groups"]),
                                ("g",), keys, (Statistic("nonnull", "x"),), case["seed"])
    return backend.bounded(request).collect()


def _check_neighbours(case: dict[str, Any]) -> None:
    dtype = case["dtype"]
    d = pl.DataFrame({"u": pl.Series(case["ids"], dtype=dtype), "g": case["g"],
                      "x": pl.Series(case["x"], dtype=pl.Float64)})
    added = pl.DataFrame({"u": pl.Series([case["extra"]] * len(case["extra_g"]), dtype=dtype), "g": case["extra_g"],
                          "x": pl.Series(case["extra_x"], dtype=pl.Float64)})
    cuts, at = case["cuts"], case["at"]
    chunked = pl.concat([d.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, d.height], strict=True)],
                        rechunk=False)
    neighbour = pl.concat([d.slice(0, at), added, d.slice(at)], rechunk=False)
    theirs = pl.col("u").eq_missing(pl.lit(case["extra"], dtype=dtype))
    assert not d.filter(theirs).height
    before = _bounded_rows(chunked, case).sort(pl.all())
    after = _bounded_rows(neighbour, case).filter(~theirs).sort(pl.all())
    assert before.equals(after), case


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(_neighbours())
def test_adding_a_unit_changes_no_other_units_kept_rows(case: dict[str, Any]) -> None:
    """D and D′ = D plus one unit's rows (inserted anywhere, D in chunks cut anywhere), with rows outside the
    public keys and ``max_groups``: every unit of D keeps exactly the same rows on both, seed for seed — also
    when the added unit's id moves the ids' span or minimum and so the route (ids read in place, ids minus
    their minimum with a bucket for the rows not ranked, hashed buckets)."""
    _check_neighbours(case)


@pytest.mark.slow
@settings(max_examples=2_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(_neighbours())
def test_adding_a_unit_changes_no_other_units_kept_rows_at_length(case: dict[str, Any]) -> None:
    _check_neighbours(case)


# ---------------------------------------------------------------- 1. a unit across the hash slices (real CHUNK)


def _kept_rows_of(frame: pl.DataFrame, unit: Any, keys: pl.DataFrame | None, seed: int) -> list[float]:
    backend = PolarsBackend()
    backend.register("t", frame.lazy())
    request = StatisticsRequest("t", (), PrivacyUnit("u", max_rows=2), ("g",), keys, (Statistic("nonnull", "x"),),
                                seed)
    return sorted(backend.bounded(request).filter(pl.col("u") == unit).collect()["x"].to_list())


def _straddling(unit_type: pl.DataType, mine: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """CHUNK + 4 rows (the hashes' slices and the id passes' spans end at CHUNK), unit ``mine``'s 5 rows at
    CHUNK − 2 … CHUNK + 2, in a table of chunks cut elsewhere; and ``mine``'s rows alone."""
    n = CHUNK - 1
    others = pl.DataFrame({"u": np.arange(n) % 300_000, "g": np.where(np.arange(n) % 5 == 0, "c", "a"),
                           "x": (np.arange(n) % 3).astype(float)}).cast({"u": unit_type})
    alone = pl.DataFrame({"u": [mine] * 5, "g": ["a"] * 5, "x": [0.5, 0.5, 1.5, 2.5, 3.5]}).cast({"u": unit_type})
    return pl.concat([others.slice(0, CHUNK - 2), alone, others.slice(CHUNK - 2)], rechunk=False), alone


def _check_straddling(unit_type: pl.DataType, mine: Any) -> None:
    big, alone = _straddling(unit_type, mine)
    assert big.height == CHUNK + 4 and big.filter(pl.col("u") == mine).height == 5
    for keys in (None, pl.DataFrame({"g": ["a"]})):
        for seed in (0, 1, 2):
            assert _kept_rows_of(big, mine, keys, seed) == _kept_rows_of(alone, mine, keys, seed), (keys, seed)


def test_a_unit_across_the_slice_boundary_keeps_what_it_keeps_alone() -> None:
    """A million rows around one unit whose rows straddle row CHUNK (where ``row_hashes``' slices and the id
    passes' spans end): it keeps the same rows, seed by seed, as in a table of its rows alone — with every row
    ranked (integer ids read in place) and with other units' rows outside the public keys (``_ids_or``). Its
    rows' hashes do not depend on their position, the slicing, or the other units."""
    _check_straddling(pl.Int64(), 300_001)


@pytest.mark.slow
def test_a_string_unit_across_the_slice_boundary_keeps_what_it_keeps_alone() -> None:
    _check_straddling(pl.String(), "me")


def test_row_hashes_by_slices_equal_the_whole_frames_for_every_column_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every column type a query may hash (nulls, NaN and −0.0, strings long and short, categoricals, enums,
    decimals, 128-bit integers, nested lists and structs, times with a zone): ``row_hashes`` a few rows at a time
    gives ``hash_rows``' hashes of the whole frame, in a frame of chunks cut elsewhere."""
    import datetime as dt

    n = 40
    columns: dict[str, pl.Series] = {
        "i": pl.Series([None if i % 7 == 0 else i - 10 for i in range(n)], dtype=pl.Int64),
        "u64": pl.Series([2**64 - 1 - i if i % 5 else None for i in range(n)], dtype=pl.UInt64),
        "i128": pl.Series([(-1) ** i * 2**100 + i if i % 6 else None for i in range(n)], dtype=pl.Int128),
        "f": pl.Series([[0.0, -0.0, float("nan"), None, 1.5, float("inf")][i % 6] for i in range(n)]),
        "f32": pl.Series([[0.0, -0.0, float("nan"), None, 1.5][i % 5] for i in range(n)], dtype=pl.Float32),
        "s": pl.Series([None if i % 4 == 0 else "x" * (i % 3 * 10) + str(i % 3) for i in range(n)]),
        "b": pl.Series([None if i % 3 == 0 else bool(i % 2) for i in range(n)]),
        "cat": pl.Series([None if i % 4 == 1 else "abc"[i % 3] for i in range(n)], dtype=pl.Categorical),
        "enum": pl.Series([None if i % 4 == 1 else "abc"[i % 3] for i in range(n)], dtype=pl.Enum(["a", "b", "c"])),
        "d": pl.Series([None if i % 4 == 2 else dt.date(2020, 1, 1 + i % 3) for i in range(n)]),
        "dec": pl.Series([None if i % 4 == 2 else decimal.Decimal(i % 3) / 3 for i in range(n)],
                         dtype=pl.Decimal(20, 5)),
        "bin": pl.Series([None if i % 4 == 2 else bytes([i % 3]) for i in range(n)]),
        "lst": pl.Series([None if i % 4 == 2 else [i % 3, None] for i in range(n)]),
        "st": pl.Series([None if i % 4 == 2 else {"a": i % 3, "b": None if i % 2 else "z"} for i in range(n)]),
        "dtz": pl.Series([None if i % 4 == 2 else dt.datetime(2020, 1, 1, i % 3) for i in range(n)]
                         ).dt.replace_time_zone("UTC"),
    }
    whole = pl.DataFrame(columns)
    frame = pl.concat([whole.slice(0, 13), whole.slice(13, 9), whole.slice(22)], rechunk=False)
    for size in (1, 3, 7, 16):
        monkeypatch.setattr(polars_backend, "CHUNK", size)
        for name in whole.columns:
            assert row_hashes(frame.select(name), 11).tolist() == whole.select(name).hash_rows(11).to_list(), name
        assert row_hashes(frame, 11).tolist() == whole.hash_rows(11).to_list()


@pytest.mark.slow
@pytest.mark.parametrize(("n", "users", "values", "k", "kind"), [(CHUNK + 1, 90_000, 3, 3, "int"),
                                                                 (CHUNK + 7, 40_000, 2, 5, "str"),
                                                                 (CHUNK - 1, 200_000, 4, 2, "negative")])
def test_a_million_rows_of_copies_keep_the_laws_rows(n: int, users: int, values: int, k: int, kind: str) -> None:
    """A count-only query's rows at the real CHUNK (copies in most units: the copy path on about a million rows,
    its chunked re-hashing and ranks across chunks), the units in chunks cut across CHUNK, a tenth of the rows
    not ranked: the law's rows exactly, with and without the mask."""
    rng = np.random.default_rng(n)
    ids = rng.integers(0, users, n)
    frame = pl.DataFrame({"u": ids if kind == "int" else ids - 10**12 if kind == "negative" else ids.astype(str),
                          "g": rng.integers(0, values, n)})
    frame = pl.concat([frame.slice(0, 1000), frame.slice(1000, CHUNK - 500), frame.slice(CHUNK + 500)], rechunk=False)
    hashes = row_hashes(frame, SEED)
    ranked = rng.random(n) < 0.9
    assert kept_mask(frame["u"], hashes, SEED, k).tolist() == definition(frame["u"], hashes, SEED, k).tolist()
    nulled = frame.select(pl.when(pl.Series(ranked)).then(pl.col("u"))).to_series()
    at = np.flatnonzero(ranked)
    want = np.zeros(n, dtype=bool)
    want[at] = definition(nulled.gather(at), hashes[at], SEED, k)
    assert kept_mask(frame["u"], hashes, SEED, k, ranked).tolist() == want.tolist()


# ---------------------------------------------------------------- 2. the exponential mechanism's blocks


class _Crafted:
    """A source whose first ``random_uint64`` call returns the given words (then a seeded source's)."""

    private = False

    def __init__(self, words: npt.NDArray[np.uint64]) -> None:
        self.words: npt.NDArray[np.uint64] | None = words
        self.rest = SeededRandomSource(0)

    def random_uint64(self, size: int) -> npt.NDArray[np.uint64]:
        if self.words is not None:
            words, self.words = self.words, None
            assert words.size == size
            return words
        return self.rest.random_uint64(size)

    def uniform_below(self, bound: int, size: int) -> Any:
        return self.rest.uniform_below(bound, size)

    def permutation(self, n: int) -> Any:
        return self.rest.permutation(n)

    def seed_for_engine(self) -> int:
        return self.rest.seed_for_engine()


_CONTEXT = decimal.Context(prec=50, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX)


def _gumbel(k: int) -> Decimal:
    """G(k/2⁶⁴) = −ln(−ln U) in 50 digits (−∞ at 0)."""
    if k == 0:
        return Decimal("-Infinity")
    return -(-((Decimal(k) / Decimal(2**64)).ln())).ln()


def _decided(words: npt.NDArray[np.uint64], u: npt.NDArray[np.int64], mult: Any, s: Fraction,
             offsets: list[int]) -> list[int | None]:
    """Per segment, the item whose score interval over its word (ln m + s·u + G(U), U ∈ [k, k + 1]/2⁶⁴) lies
    above every other's: the exponential mechanism's draw given these words (None where they do not decide it).

    Floats shortlist each segment's top items; 50-digit decimals decide among them."""
    k = words.astype(np.float64)
    with np.errstate(divide="ignore"):
        e = np.where(words >= np.uint64(2**63), -np.log1p(-(2.0**64 - k) / 2.0**64), 64 * math.log(2) - np.log(k))
        guess = -np.log(e) + float(s) * u + (0.0 if mult is None else np.log([float(m) for m in mult]))
    out: list[int | None] = []
    for a, b in itertools.pairwise(offsets):
        alive = [i for i in range(a, b) if mult is None or mult[i] > 0]
        top_guess = max(guess[i] for i in alive)
        near = [i for i in alive if guess[i] > top_guess - 1]
        bounds = {}
        with decimal.localcontext(_CONTEXT):
            for i in near:
                base = Decimal(1 if mult is None else int(mult[i])).ln() + Decimal(s.numerator * int(u[i])) / \
                    Decimal(s.denominator)
                bounds[i] = (base + _gumbel(int(words[i])) - Decimal("1e-30"),
                             base + _gumbel(int(words[i]) + 1) + Decimal("1e-30"))
        top = max(bounds, key=lambda i: bounds[i][0])
        sure = all(bounds[top][0] > hi for i, (_, hi) in bounds.items() if i != top) and \
            all(guess[i] + 0.5 < float(bounds[top][0]) for i in alive if i not in bounds)
        out.append(top - a if sure else None)
    return out


def _words(n: int, rng: np.random.Generator) -> npt.NDArray[np.uint64]:
    """Random words, 5 % (and every item within 3 of a multiple of 8192) outside the one-evaluation bulk:
    U < 2⁻¹⁰ or 1 − 2⁻²⁴ > U > 1 − 2⁻⁴⁴ (the rare words the blocks hand to a second pass), some U = 0 words."""
    words = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    odd = rng.random(n) < 0.05
    for edge in range(8192, n + 1, 8192):
        odd[max(0, edge - 3):edge + 3] = True
    low = rng.integers(1, 2**54, n, dtype=np.uint64)
    high = np.uint64(2**64 - 2**40) - rng.integers(0, 2**40 - 2**20, n, dtype=np.uint64)
    words[odd] = np.where(rng.random(n) < 0.5, low, high)[odd]
    words[rng.random(n) < 0.001] = 0
    return words


@pytest.mark.parametrize(("n", "offsets", "scale", "kind"), [
    (8192, [0, 8192], Fraction(1), None),
    (8193, [0, 8193], Fraction(1, 10**30), "int"),
    (8193, [0, 8190, 8193], Fraction(3, 7), "uint64"),
    (16385, [0, 1, 8191, 8192, 8193, 16384, 16385], Fraction(1, 3), "object"),
    (16384, [0, 8000, 8500, 16384], Fraction(0), "int"),
])
def test_grouped_draws_are_the_argmax_the_words_decide_across_blocks(n: int, offsets: list[int], scale: Fraction,
                                                                     kind: str | None) -> None:
    """Given its first 64 bits per item, the exponential mechanism's draw is decided wherever one item's score
    interval lies above all others': ``exponential_index_grouped`` must return exactly that item, for segments of
    exactly 8192 and 8193 items and segments straddling the blocks of 8192 (r49a), tiny and zero scales,
    multiplicities 0 to 3·2⁷⁰ (uint64 near 2⁶⁴, Python ints), U = 0 words and the rare words outside the bulk
    placed at the block edges. (Checked to fail when a block's last item is left out of its slice.)"""
    rng = np.random.default_rng(n + len(offsets))
    u = rng.integers(-5, 5, n)
    mult: Any = None
    if kind is not None:
        m = rng.integers(0, 4, n)
        m[np.array(offsets[:-1])] = 1               # each segment: a positive multiplicity
        mult = m if kind == "int" else m.astype(np.uint64) * np.uint64(2**62) if kind == "uint64" else \
            np.array([int(x) * 2**70 for x in m], dtype=object)
    decided = 0
    for _ in range(3):
        words = _words(n, rng)
        got = exponential_index_grouped(u, scale, _Crafted(words.copy()), offsets, multiplicities=mult).tolist()
        want = _decided(words, u, mult, scale, offsets)
        assert [g for g, w in zip(got, want, strict=True) if w is not None] == [w for w in want if w is not None]
        decided += sum(w is not None for w in want)
    assert decided >= 2 * (len(offsets) - 1)


def test_scores_beyond_float64_are_drawn_exactly_not_from_empty_memory() -> None:
    """Found here: when every score of a segment leaves float64 (s·u overflows: a scale ≥ ~1e289, or utilities
    near 2⁶³ with a large scale), each item's float bounds were (−∞, NaN) or (NaN, ∞), no item was a candidate,
    and the segment's index was read from ``np.empty`` — uninitialised memory: ``exponential_index([-10¹⁰,
    -10¹⁰ - 5], 10³⁰⁰)`` gave 1, whose probability is e^(−5·10³⁰⁰). With r49a's shortcut (one candidate per
    segment in all: taken as one in each), another segment's item could be returned, an index outside the
    segment. Such a segment's items are now all candidates, decided by the exact (decimal) refinement."""
    from dpframe.noise import exponential_index

    huge = Fraction(10**300)
    assert [exponential_index([-(10**10), -(10**10) - 5], huge, SeededRandomSource(s)) for s in range(5)] == [0] * 5
    assert [exponential_index([10**10 + 5, 10**10], huge, SeededRandomSource(s)) for s in range(5)] == [0] * 5
    # segment 0 beyond float64; segment 1 two items of equal score (the same word): candidates both — 2 in all
    words = np.array([2**63, 2**63, 2**62, 2**62], dtype=np.uint64)
    got = exponential_index_grouped([-(10**10) - 5, -(10**10), 0, 0], huge, _Crafted(words), [0, 2, 4]).tolist()
    assert got[0] == 1 and got[1] in (0, 1), got
