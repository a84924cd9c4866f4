"""Review 45b: the DuckDB backend's user-level grouping by public-key codes (``_key_codes``, ``_Groups``).

An in-memory table grouped by one string column of public keys keeps each row's key code (1 + its index
among the distinct keys, 0 outside them) and DuckDB groups by ``codes × keep`` (uint16, or uint32 from
65,536 codes on). The analyst picks the keys, the queries and their order. Each attack below compares the
coded statistics with the same backend's without codes (``_key_codes`` off) and, where the contract says
so (rows hashed by Polars: an in-memory table whose read columns are plain, not dictionary-encoded, and
no ``max_groups``; ``docs/scaling.md`` "Same answers"), with the Polars backend's for the same seed:

* keys absent from the data, null keys and null key values, the empty string, repeated keys, one key,
  only the null key, no key; strings Polars and DuckDB tell apart by their bytes only (NFC against NFD,
  a combining accent, a trailing space, an embedded NUL, ``ß``/``ss``, case, 10,000 characters, two long
  strings with one prefix); every statistic kind;
* 65,535 / 65,536 / 65,537 codes, with and without the null key (the uint16 → uint32 switch, the null
  key's code the largest);
* key columns that are not strings take the old path (ints, dates, booleans, categoricals, enums,
  binaries, an all-null column);
* ``max_groups``: rows outside the keys use none of a unit's groups, on both backends, for every seed;
* the codes' cache across key lists, query kinds and orders, two tables of the same data, a table
  registered again under its name, many chunks;
* end to end: the same released values on both backends for one seed, every query committed; repeated
  or missing keys refused free.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from fractions import Fraction as F
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import dpframe as dp
from dpframe.backends import duckdb as duckdb_backend
from dpframe.backends.base import StatisticsRequest
from dpframe.backends.duckdb import KEEP, DuckDBBackend
from dpframe.backends.polars import PolarsBackend
from dpframe.mechanism import Statistic

STATS = (Statistic("rows"), Statistic("units"), Statistic("nonnull", "x"),
         Statistic("fixed_sum", "x", F(-2), F(9), grid_exp=-4))
EVERY_KIND = (*STATS, Statistic("indicator_sum", "x", F(0), F(4)), Statistic("nonnull", "g"),
              Statistic("fixed_sum", "x", F(-2), F(9), power=2, grid_exp=-3),
              Statistic("sorted", "x", F(-2), F(9), grid_exp=-2))
WORDS = ["a", "b", "", "a ", " a", "A", "e\u0301", "\u00e9", "a\x00", "ß", "ss", "x" * 10_000, "y" * 40, "y" * 39 + "z"]
UNIT = dp.PrivacyUnit("u", max_rows=2)


@pytest.fixture
def sqls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL query the DuckDB backends run (the last one: the statistics query)."""
    run, seen = DuckDBBackend._run, []

    def logged(self: DuckDBBackend, sql: str, frames: dict[str, object]) -> pl.DataFrame:
        seen.append(sql)
        return run(self, sql, frames)

    monkeypatch.setattr(DuckDBBackend, "_run", logged)
    return seen


def _duck(**tables: pl.DataFrame) -> DuckDBBackend:
    b = DuckDBBackend()
    for name, df in tables.items():
        b.register(name, df.lazy())
    return b


def _polars(df: pl.DataFrame) -> PolarsBackend:
    b = PolarsBackend()
    b.register("t", df.lazy())
    return b


def _without_codes(df: pl.DataFrame, requests: list[StatisticsRequest], monkeypatch: pytest.MonkeyPatch) \
        -> list[pl.DataFrame]:
    """The DuckDB backend's statistics for ``requests`` in order, on one table, with no key codes."""
    with monkeypatch.context() as m:
        m.setattr(duckdb_backend, "_key_codes", lambda *_: None)
        plain = _duck(t=df)
        return [plain.statistics(request) for request in requests]


def _data(words: list[str], n: int = 400, seed: int = 1, nulls: bool = True) -> pl.DataFrame:
    """``n`` rows of 40 units over ``words`` (some keys null, some units null); ``x`` distinct (no copies)."""
    rng = np.random.default_rng(seed)
    df = pl.DataFrame({"u": rng.integers(0, 40, n), "g": pl.Series(list(rng.choice(words, n)), dtype=pl.String),
                       "x": rng.normal(3, 3, n)})
    if nulls:
        df = df.with_columns(g=pl.when(pl.col("u") % 7 == 0).then(None).otherwise(pl.col("g")),
                             u=pl.when(pl.col("u") == 11).then(None).otherwise(pl.col("u")))
    return df


def _check(df: pl.DataFrame, requests: list[StatisticsRequest], coded: list[bool], sqls: list[str],
           monkeypatch: pytest.MonkeyPatch, *, polars: list[bool] | None = None,
           duck: DuckDBBackend | None = None) -> DuckDBBackend:
    """Run ``requests`` in order on one DuckDB backend: each grouped by codes where ``coded`` says, each equal
    to the backend's without codes and (where ``polars`` says; default: all) to the Polars backend's."""
    duck = duck if duck is not None else _duck(t=df)
    pol = _polars(df)
    plain = iter(_without_codes(df, requests, monkeypatch))
    for i, request in enumerate(requests):
        got = duck.statistics(request)
        assert (f"GROUP BY {KEEP}" in sqls[-1]) == coded[i], (i, sqls[-1])
        assert_frame_equal(got, next(plain))
        if polars is None or polars[i]:
            assert_frame_equal(got, pol.statistics(request), check_column_order=False)
        if request.keys is not None:     # every public key once, in order, whatever the data
            assert got["g"].to_list() == request.keys["g"].sort(nulls_last=False).to_list()
    return duck


def _request(keys: list[Any] | pl.DataFrame | None, seed: int, *, unit: dp.PrivacyUnit = UNIT,
             stats: tuple[Statistic, ...] = STATS, dtype: Any = pl.String) -> StatisticsRequest:
    public = keys if keys is None or isinstance(keys, pl.DataFrame) else \
        pl.DataFrame({"g": pl.Series(keys, dtype=dtype)})
    return StatisticsRequest("t", (), unit, ("g",), public, stats, seed)


KEY_LISTS: dict[str, list[str | None]] = {
    "bytes apart": [*WORDS, "never"],
    "bytes apart, null key": [None, *WORDS],
    "repeated keys": ["a", "a", None, "b", None, "", ""],
    "one key": ["é"],
    "only the null key": [None],
    "keys absent from the data": ["q", "r", "a\x00\x00", "y" * 41],
    "the empty string alone": [""],
}


@pytest.mark.parametrize("case", list(KEY_LISTS))
def test_adversarial_string_keys_group_by_codes_as_by_the_strings(case: str, sqls: list[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: keys whose strings differ only in bytes a collation or a normalization would merge (NFC/NFD,
    trailing/leading space, case, NUL, ß/ss), long ones (out of line, a shared 39-character prefix), the
    empty string, null, repeated and absent keys. Held: the first query (codes found with the ranking) and
    the settled ones group exactly as the strings do, as the Polars backend does."""
    df = _data(WORDS)
    keys = KEY_LISTS[case]
    requests = [_request(keys, seed) for seed in (3, 4, 5)] + [_request(keys, 6, stats=EVERY_KIND)]
    duck = _check(df, requests, [True] * 4, sqls, monkeypatch)
    ranking = duck._tables["t"].ranking
    assert ranking is not None and ranking.groups is not None
    distinct = list(dict.fromkeys(k for k in keys if k is not None))
    assert ranking.groups.values.to_list() == distinct + ([None] if None in keys else [])
    codes = ranking.groups.codes
    expected = [distinct.index(v) + 1 if v in distinct else len(distinct) + 1 if v is None and None in keys else 0
                for v in df["g"].to_list()]
    assert codes.tolist() == expected


def test_no_keys_and_an_empty_table(sqls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No public key at all (a backend request; the API refuses it free, below): no codes, the old path.
    An empty table and a table whose key column is all null: codes, no group with a row."""
    df = _data(WORDS)
    _check(df, [_request(pl.DataFrame({"g": pl.Series([], dtype=pl.String)}), s) for s in (3, 4)],
           [False, False], sqls, monkeypatch)
    _check(df.head(0), [_request(WORDS, s) for s in (3, 4)], [True, True], sqls, monkeypatch)
    _check(df.with_columns(g=pl.lit(None, pl.String)), [_request([None, "a"], s) for s in (3, 4)], [True, True],
           sqls, monkeypatch)


@pytest.mark.parametrize(("count", "null"), [(65_535, False), (65_535, True), (65_536, False), (65_536, True),
                                             (65_537, False), (2, True), (1, False)])
def test_code_width_boundaries(count: int, null: bool, sqls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: 65,535 codes (the largest uint16, the null key's code when it is last), 65,536 and 65,537
    (uint32), one code. The rows are of the first, the middle and the last keys, null and outside the keys:
    each lands in its own group (a wrapped code would move rows to another key or to none)."""
    values = [f"k{i}" for i in range(count - null)]
    keys: list[str | None] = [*values, *([None] if null else [])]
    picks = list(dict.fromkeys([values[0], values[len(values) // 2], values[-1], "outside"]))
    df = _data(picks, n=300, seed=count + null)     # (null keys in the data: the null key's rows)
    requests = [_request(keys, 3), _request(keys, 4)]
    duck = _check(df, requests, [True, True], sqls, monkeypatch)
    ranking = duck._tables["t"].ranking
    assert ranking is not None and ranking.groups is not None
    assert ranking.groups.codes.dtype == (np.uint16 if count < 2**16 else np.uint32)
    assert int(ranking.groups.codes.max()) == count      # the last key's code (the null key's where there is one)
    got = duck.statistics(requests[0])
    per_key = dict(zip(got["g"].to_list(), got["__rows"].to_list(), strict=True))
    assert per_key[values[-1]] > 0 and (not null or per_key[None] > 0)


NON_STRING: dict[str, tuple[pl.Expr, list[Any], Any]] = {
    "int": ((pl.col("u") % 5).alias("g"), [0, 1, 4, 9, None], pl.Int64),
    "date": (pl.date(2020, 1, 1).dt.offset_by(pl.format("{}d", pl.col("u") % 3)).alias("g"),
             [date(2020, 1, 2), None], pl.Date),
    "bool": ((pl.col("u") % 2 == 0).alias("g"), [True, None], pl.Boolean),
    "categorical": (pl.col("g").cast(pl.Categorical), ["a", "é", None], pl.Categorical),
    "enum": (pl.col("g").cast(pl.Enum(list(dict.fromkeys(WORDS)))), ["a", "é", None],
             pl.Enum(list(dict.fromkeys(WORDS)))),
    "binary": (pl.col("g").cast(pl.Binary), [b"a", b"", None], pl.Binary),
}


@pytest.mark.parametrize("case", list(NON_STRING))
def test_key_columns_that_are_not_strings_take_the_old_path(case: str, sqls: list[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A key column of another type (keys of its type, as the API casts them) groups by its values, not by
    codes. Same seed, same statistics as the Polars backend where Polars hashes the rows on both (plain
    Arrow columns); for dictionary-encoded or binary keys DuckDB hashes them (another engine's hash: the
    same values only where bounding keeps every row)."""
    expr, keys, dtype = NON_STRING[case]
    df = _data(WORDS).with_columns(expr)
    same_hash = case in ("int", "date", "bool")
    for unit in (UNIT, dp.PrivacyUnit("u", max_rows=1_000)):
        _check(df, [_request(keys, s, dtype=dtype, unit=unit) for s in (3, 4)], [False, False], sqls, monkeypatch,
               polars=[same_hash or unit.max_rows == 1_000] * 2)


def test_rows_outside_the_keys_use_none_of_a_units_groups(sqls: list[str]) -> None:
    """``max_groups=1``: each unit has 4 rows of one public key, 6 rows of keys outside them, a null key and
    the empty string (neither a key). Every seed, fresh (the numbered path) and after a ranking (the same
    mask grouped by the codes): each unit keeps all its rows of its key, on DuckDB as on Polars."""
    rows: list[tuple[int, str | None, float]] = [(u, f"k{u % 3}", float(j)) for u in range(30) for j in range(4)]
    rows += [(u, f"out{u}_{j}", 10.0 + j) for u in range(30) for j in range(6)]
    rows += [(u, key, 20.0) for u in range(30) for key in (None, "")]
    df = pl.DataFrame(rows, schema={"u": pl.Int64, "g": pl.String, "x": pl.Float64}, orient="row")
    keys = ["k0", "k1", "k2", "zz"]
    duck, pol = _duck(t=df), _polars(df)
    for seed in range(1, 5):
        for unit in (dp.PrivacyUnit("u", max_rows=4, max_groups=1), UNIT, dp.PrivacyUnit("u", max_rows=4)):
            request = _request(keys, seed, unit=unit)
            got, want = duck.statistics(request), pol.statistics(request)
            rows_per_key = [10 * min(4, unit.max_rows)] * 3 + [0]
            assert got["__rows"].to_list() == want["__rows"].to_list() == rows_per_key, (seed, unit)
            assert got["__units"].to_list() == want["__units"].to_list() == [10, 10, 10, 0]
            assert (f"GROUP BY {KEEP}" in sqls[-1]) == (seed > 1 or unit.max_groups is None)


def test_the_codes_follow_the_keys_queries_and_tables(sqls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack on the codes' cache: one table asked with keys, then ``max_groups`` (the same keys and
    ``max_rows``: the codes; another ``max_rows``: not), a subset of the keys, the keys reordered, no keys,
    row level, the first keys again, ``max_groups`` on the subset; alternating between two tables of the
    same data, and a table registered again under its name. Each answer is the one without codes (and the
    Polars backend's, except ``max_groups``: DuckDB hashes its pairs)."""
    df = _data(WORDS)
    keys = [None, *WORDS, "never"]
    groups = dp.PrivacyUnit("u", max_rows=2, max_groups=1)
    other = dp.PrivacyUnit("u", max_rows=3, max_groups=1)
    sequence: list[tuple[StatisticsRequest, bool, bool]] = [
        (_request(keys, 3), True, True),
        (_request(keys, 4, unit=groups), True, False),
        (_request(keys, 5, unit=other), False, False),
        (_request(keys[:3], 6), True, True),
        (_request(list(reversed(keys)), 7), True, True),
        (_request(None, 8), False, True),
        (_request(keys, 9, unit=dp.PrivacyUnit.row(), stats=STATS[:1]), False, True),
        (_request(keys, 10), True, True),
        (_request(keys[:3], 11, unit=groups), False, False),
        (_request(keys, 12, unit=groups), True, False),
    ]
    requests, coded, polars = (list(c) for c in zip(*sequence, strict=True))
    _check(df, requests, coded, sqls, monkeypatch, polars=polars)

    twin = df.clone()
    both = _duck(t=df, s=twin)
    pol = _polars(df)
    for seed, (table, ks) in enumerate([("t", keys), ("s", keys[:4]), ("t", keys), ("s", keys[:4]), ("s", keys)]):
        request = StatisticsRequest(table, (), UNIT, ("g",), pl.DataFrame({"g": pl.Series(ks, dtype=pl.String)}),
                                    STATS, seed)
        got = both.statistics(request)
        assert f"GROUP BY {KEEP}" in sqls[-1]
        assert_frame_equal(got, pol.statistics(_request(ks, seed)))

    again = _duck(t=df)
    assert_frame_equal(again.statistics(_request(keys, 3)), pol.statistics(_request(keys, 3)))
    changed = _data(WORDS, seed=2)
    again.register("t", changed.lazy())     # the same name, other rows: no codes of the old table survive
    got = again.statistics(_request(keys, 3))
    assert f"GROUP BY {KEEP}" in sqls[-1]
    assert_frame_equal(got, _polars(changed).statistics(_request(keys, 3)))


def test_many_chunks(sqls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A table of many small chunks (the codes and the mask are one column beside them)."""
    df = _data(WORDS)
    chunked = pl.concat([df.slice(i, 7) for i in range(0, df.height, 7)], rechunk=False)
    keys = [None, *WORDS]
    requests = [_request(keys, 3), _request(keys, 4), _request(keys, 5, unit=dp.PrivacyUnit("u", max_rows=2,
                                                                                            max_groups=1))]
    duck = _check(chunked, requests, [True, True, True], sqls, monkeypatch, polars=[True, True, False])
    assert duck._tables["t"].data is not None and duck._tables["t"].data.column("g").num_chunks > 1


def _session(backend: str, df: pl.DataFrame) -> dp.Session:
    return dp.Session({"t": df}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(100), seed=5,
                      backend=backend)


def test_end_to_end_same_released_values_and_charges(sqls: list[str]) -> None:
    """Same seed, same data: the DuckDB session releases what the Polars one does for count/sum/mean by a
    string column of adversarial public keys (method chain and SQL, each asked twice: the codes of the first
    query and of a settled ranking), every query committed; repeated or missing keys are refused before
    any charge, on both."""
    df = _data(WORDS, n=300)
    sql = "SELECT g, COUNT(*) AS n, SUM(CLAMP(x, -2, 9)) AS s, AVG(CLAMP(x, -2, 9)) AS m FROM t GROUP BY g"
    released: dict[str, list[pl.DataFrame]] = {}
    for backend in ("polars", "duckdb"):
        sess = _session(backend, df)
        out = released[backend] = []
        for keys in ([*WORDS, "never"], [None, *WORDS], ["a"], [None], ["q"], [*WORDS, "never"]):
            query = sess.table("t").group_by("g", keys=keys).agg(n=dp.len(), s=dp.sum("x", bounds=(-2, 9)),
                                                                 m=dp.mean("x", bounds=(-2, 9)))
            out.append(query.collect(dp.PureDP(1)))
            if backend == "duckdb":
                assert f"GROUP BY {KEEP}" in sqls[-1]
        for _ in range(2):
            out.append(sess.sql(sql, keys={"g": [None, *WORDS]}).collect(dp.PureDP(1)))
        history = sess.history()
        for bad in (["a", "a"], [None, None], []):
            with pytest.raises(dp.SchemaError, match="duplicates|no keys"):
                sess.table("t").group_by("g", keys=bad).agg(dp.len()).collect(dp.PureDP(1))
        assert_frame_equal(sess.history(), history)
        assert history["status"].to_list() == ["committed"] * 8
    for got, want in zip(released["duckdb"], released["polars"], strict=True):
        assert_frame_equal(got, want)


STATISTIC_NAMES = ["__rows", "__units", "__nonnull:x", "__ROWS", "__Units", "__sum:x:[0,1]-0^1@2^0"]


def _named(name: str) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    return pl.DataFrame({"u": rng.integers(0, 30, 200), name: rng.choice(["a", "b"], 200), "x": rng.normal(3, 3, 200)})


@pytest.mark.parametrize("backend", ["polars", "duckdb"])
@pytest.mark.parametrize("name", STATISTIC_NAMES)
def test_a_key_named_like_a_statistic_is_refused_before_the_charge(backend: str, name: str) -> None:
    """Attack: a group-by key column named like one of the engine's statistics (the backends' result columns
    ``__rows``, ``__units``, ``__nonnull:x`` ..., in any case: DuckDB's names ignore it) made the result hold
    two columns of that name: ``group_by("__rows", keys=...).agg(dp.len())`` (and ``dp.count``, SQL, DP
    partition selection; ``__ROWS`` under partition selection on DuckDB only) was charged, then failed, on
    every dataset. Now such a name is the engine's, as ``__dp...``: a table's column of that name is refused
    when the session is created, a new one when the query is built, nothing charged."""
    with pytest.raises(dp.SchemaError, match="engine's statistics"):
        dp.Session({"t": _named(name)}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=dp.PureDP(10),
                   backend=backend)
    sess = dp.Session({"t": _named("g")}, privacy_unit=dp.PrivacyUnit("u", max_rows=2),
                      budget=dp.ApproxDP(10, 1e-5), seed=5, backend=backend)
    queries: list[Callable[[], Any]] = [
        lambda: sess.table("t").with_columns(pl.col("g").alias(name)).group_by(name, keys=["a", "b"])
        .agg(dp.len(), dp.count("x"), dp.count_units()),
        lambda: sess.table("t").group_by(pl.col("g").alias(name), keys=["a", "b"]).agg(dp.len(), dp.count("x")),
        lambda: sess.table("t").with_columns(pl.col("g").alias(name)).group_by(name).agg(dp.len()),
        lambda: sess.sql(f'WITH s AS (SELECT u, x, g AS "{name}" FROM t) SELECT "{name}", COUNT(*) AS n, '
                         f'COUNT(x) AS c FROM s GROUP BY "{name}"', keys={name: ["a", "b"]}),
    ]
    for query in queries:
        with pytest.raises(dp.PlanError, match="engine's statistics"):
            query().collect(dp.ApproxDP(1, 1e-6))
    assert sess.history().height == 0


def test_every_statistic_kind_is_named_as_reserved() -> None:
    """Each statistic kind's result column (and the helper columns a backend names after it) is a reserved
    name, so a new kind named otherwise fails here."""
    from typing import get_args

    from dpframe.mechanism.base import StatisticKind
    from dpframe.tables import reserved_name

    for kind in get_args(StatisticKind):
        column = None if kind in ("rows", "units") else "x"
        bounds = (F(0), F(1)) if kind in ("fixed_sum", "indicator_sum", "sorted") else (None, None)
        key = Statistic(kind, column, *bounds).key
        assert reserved_name(key) is not None and reserved_name(key.upper()) is not None, key
        if column is not None:      # (a sorted statistic's helper columns: its key, then "#")
            assert reserved_name(f"{key}#1") is not None, key


@pytest.mark.parametrize("keys", [["a", "\ud800"], {"g": ["\udfff"]}])
def test_keys_that_are_not_utf8_are_a_schema_error(keys: Any) -> None:
    """Attack: a key with a lone surrogate (a Python ``str`` UTF-8 cannot encode) raised a bare
    ``UnicodeEncodeError`` out of ``group_by`` and ``sess.sql(keys=...)``: now the dpframe error naming
    ``keys``, nothing charged."""
    sess = _session("duckdb", _data(WORDS, n=50))
    with pytest.raises(dp.SchemaError, match="keys"):
        sess.table("t").group_by("g", keys=keys)
    with pytest.raises(dp.SchemaError, match="keys"):
        sess.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", keys=keys if isinstance(keys, dict) else {"g": keys})
    assert sess.history().height == 0


def test_sql_text_that_is_not_utf8_is_a_plan_error() -> None:
    """Found with the keys above: a lone surrogate in the SQL text (a literal compared with the key column)
    escaped ``sess.sql`` as DuckDB's bare ``InvalidInputException``; now the PlanError naming ``sql``."""
    sess = _session("duckdb", _data(WORDS, n=50))
    with pytest.raises(dp.PlanError, match="sql.*UTF-8"):
        sess.sql("SELECT g, COUNT(*) AS n FROM t WHERE g <> '\ud800' GROUP BY g", keys={"g": ["a"]})
    assert sess.history().height == 0


def test_a_table_registered_again_keeps_its_own_view() -> None:
    """A backend's view names were ``__dp_t{number of tables}``: registering ``t``, ``s``, then ``t`` and ``s``
    again gave both the same view, and ``t``'s row-level query read ``s``'s rows (not reachable through
    ``dp.Session``, which registers each table once per backend; ``register`` is the backend's public API)."""
    duck = DuckDBBackend()
    t, s = pl.DataFrame({"g": ["t"] * 3}), pl.DataFrame({"g": ["s"] * 5})
    for name, df in (("t", t), ("s", s), ("t", t), ("s", s)):
        duck.register(name, df.lazy())
    for name, df in (("t", t), ("s", s)):
        request = StatisticsRequest(name, (), dp.PrivacyUnit.row(), ("g",), None, (Statistic("rows"),), 3)
        assert duck.statistics(request).to_dicts() == [{"g": name, "__rows": df.height}]
