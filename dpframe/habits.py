"""Polars habits on private frames: what to do instead of a method that would hand back private rows.

A :class:`~dpframe.Frame` is lazy and private: it never returns rows, so ``head()``, ``collect()``,
``describe()``, ``sort()`` or ``len(frame)`` cannot work as in Polars. Each such name raises a
:class:`~dpframe.errors.PolarsHabitError` (also an ``AttributeError``, so ``hasattr`` stays False) whose
fix says what to write instead. Names not listed here raise a plain ``AttributeError``.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": [1.0]})}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
    >>> sess.table("t").head()
    Traceback (most recent call last):
    ...
    dpframe.errors.PolarsHabitError: head: a private frame never returns rows (.head() on a Frame ...). Fix: ...

"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from dpframe.errors import PolarsHabitError

_ROWS = ("a private frame never returns rows",
         "release statistics instead: frame.agg(dp.len(), dp.mean('x', bounds=(lo, hi)))"
         ".collect(budget=dp.PureDP(0.5)); frame.schema and frame.columns show its public columns")
_COUNT = ("the number of rows is private",
          "release it: frame.agg(dp.len()).collect(budget=dp.PureDP(0.5)) (dp.count_units() counts privacy units)")
_STAT = ("a statistic of private rows needs noise",
         "use a dp measure with public bounds: frame.agg(dp.{name}('x', bounds=(lo, hi))).collect(budget=...)")
_EXTREME = ("the exact minimum and maximum are not private",
            "estimate bounds privately: frame.bounds('x').collect(budget=...), or dp.quantile('x', [0.01, 0.99], "
            "bounds=(lo, hi))")
_UDF = ("no Python function runs on private rows",
        "write the transformation with Polars expressions: frame.with_columns(pl.col('x') * 2)")

FRAME: Mapping[str, tuple[str, str]] = MappingProxyType({
    **dict.fromkeys(("head", "tail", "limit", "first", "last", "slice", "fetch", "show", "glimpse", "to_pandas",
                     "to_arrow", "to_dicts", "to_dict", "to_numpy", "rows", "iter_rows", "row", "item", "write_csv",
                     "write_parquet", "write_json", "sink_parquet", "sink_csv", "sink_ipc", "lazy", "__getitem__",
                     "__iter__"), _ROWS),
    "collect": ("frame.collect() would return private rows",
                "aggregate first, then collect with a budget: frame.agg(dp.len()).collect(budget=dp.PureDP(0.5))"),
    "describe": ("describe() would read every statistic of every column",
                 "ask for the statistics you need: frame.agg(dp.len(), dp.mean('x', bounds=(lo, hi)), "
                 "dp.quantile('x', [0.25, 0.5, 0.75], bounds=(lo, hi))); frame.bounds('x') estimates bounds"),
    **dict.fromkeys(("sort", "top_k", "bottom_k"), (
        "a private frame has no row order",
        "released rows come sorted by key: sort the collected pl.DataFrame; for the largest groups use "
        "frame.group_by('key').top_k(k=10)")),
    **dict.fromkeys(("unique", "n_unique", "distinct"), (
        "the distinct values of a private column are private",
        "release the frequent ones: frame.group_by('x').top_k(k=10), or group by public keys: "
        "frame.group_by('x', keys=[...]).agg(dp.len())")),
    **dict.fromkeys(("__len__", "len", "count", "height", "shape"), _COUNT),
    **{name: (_STAT[0], _STAT[1].format(name=name)) for name in ("mean", "sum", "median", "std", "var")},
    "quantile": (_STAT[0], "frame.agg(dp.quantile('x', 0.9, bounds=(lo, hi))).collect(budget=...)"),
    "null_count": (_STAT[0], "count non-null values: frame.agg(dp.len(), dp.count('x')) (nulls = len - count)"),
    **dict.fromkeys(("min", "max"), _EXTREME),
    **dict.fromkeys(("join", "join_asof", "join_where", "merge"), (
        "the frame API does not join private tables",
        "in SQL, join a private table to public lookup tables: sess.sql('SELECT ... FROM t JOIN lookup ...') "
        "with dp.Session(..., public_tables={'lookup': df}) (see docs/sql.md); two private tables that share the "
        "privacy-unit column: join them on it before creating the session (docs/guide.md)")),
    **dict.fromkeys(("map_batches", "map_rows", "apply", "pipe_with_schema"), _UDF),
})

GROUP_BY: Mapping[str, tuple[str, str]] = MappingProxyType({
    **dict.fromkeys(("len", "count", "__len__"), ("group sizes are private", "release them: .agg(dp.len())")),
    **{name: (_STAT[0], f".agg(dp.{name}('x', bounds=(lo, hi)))") for name in ("mean", "sum", "median", "std", "var")},
    "quantile": (_STAT[0], ".agg(dp.quantile('x', 0.9, bounds=(lo, hi)))"),
    **dict.fromkeys(("min", "max"), _EXTREME),
    **dict.fromkeys(("head", "tail", "first", "last", "all", "__iter__"), (
        "a private group-by never returns rows", "release statistics per group: .agg(dp.len(), ...)")),
    "n_unique": ("distinct counts are private", "count distinct privacy units: .agg(dp.count_units())"),
    **dict.fromkeys(("map_groups", "apply"), (_UDF[0], "use dp measures in .agg(...)")),
    **dict.fromkeys(("collect", "explain", "cost"), (
        "a group-by is not a query yet", "finish it: .agg(dp.len(), ...) or .top_k(k=10), then .collect(budget=...)")),
})

QUERY: Mapping[str, tuple[str, str]] = MappingProxyType({
    **dict.fromkeys(("head", "tail", "limit", "sort", "filter", "select", "with_columns", "show",
                     "to_pandas", "to_arrow", "to_dicts", "rows", "height", "shape", "write_csv", "write_parquet",
                     "__len__", "__iter__", "__getitem__"), (
        "a query is not its result yet",
        "release it first: df = q.collect(budget=dp.PureDP(0.5)) returns a pl.DataFrame (q.explain(budget) "
        "is free); then use {name} on df")),
})


def habit(owner: str, table: Mapping[str, tuple[str, str]], name: str) -> PolarsHabitError | None:
    """The error for ``<owner>.<name>`` when it is a Polars habit listed in ``table``; else None.

    Example:
        >>> print(habit("Query", QUERY, "head"))
        head: a query is not its result yet (.head() on a Query ...). Fix: release it first: ...; then use .head() on df

    """
    found = table.get(name)
    if found is None:
        return None
    what, fix = found
    shown = _DUNDERS.get(name, f".{name}()")
    return PolarsHabitError(f"{what} ({shown} on a {owner} is a Polars habit dpframe does not have)",
                            argument=name.strip("_"), fix=fix.replace("{name}", shown))


_DUNDERS = {"__len__": "len()", "__getitem__": "[...]", "__iter__": "iteration"}
