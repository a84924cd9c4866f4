"""Measures and group keys given as row-level expressions become columns of a ``WithColumns`` step.

``dp.mean(pl.col("delay") > 15, bounds=(0, 1))`` and ``group_by(pl.col("dep_time") // 100)`` read an
expression, not a column. Before the query is built, each expression is computed into a column by a
:class:`~dpframe.plan.nodes.WithColumns` step, so it passes exactly the checks of ``with_columns``: the
row-level allow-list and the totality guards (no data-dependent failure after charging). The measure
then reads that column and keeps its output name.

Example:
    >>> import polars as pl, dpframe as dp
    >>> from dpframe.plan.nodes import Scan
    >>> scan = Scan.of("t", pl.Schema({"delay": pl.Int64}))
    >>> node, (m,), _ = derive_measures(scan, (dp.mean(pl.col("delay") > 15, bounds=(0, 1)),), {}, None)
    >>> node.describe()
    'WithColumns [[(col("delay")) > (dyn int: 15)].alias("delay_mean")]'
    >>> m.describe(), m.output_name
    ('mean(delay_mean, bounds=[0, 1])', 'delay_mean')

"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import polars as pl

from dpframe.errors import PlanError
from dpframe.measures import Measure
from dpframe.plan.nodes import Node, WithColumns


def derive_measures(node: Node, measures: tuple[Any, ...], named: dict[str, Any],
                    unit: str | None) -> tuple[Node, tuple[Any, ...], dict[str, Any]]:
    """``node`` plus one ``WithColumns`` computing every measure expression, and the measures reading it.

    Arguments that are not measures (or lists of them) pass through unchanged: the query family reports them.
    """
    columns: dict[bytes, str] = {}      # serialized expression -> derived column
    exprs: dict[str, pl.Expr] = {}

    def lower(m: Any, alias: str | None = None) -> Any:
        if isinstance(m, list | tuple):
            return type(m)(lower(x) for x in m)
        expr = m.expr if isinstance(m, Measure) else None
        if expr is None:
            return m
        name = alias or m.output_name
        if m.expression not in columns:
            column, n = name, 1
            while column in node.schema or column in exprs:
                n += 1
                column = f"{name}_{n}"
            columns[m.expression] = column
            exprs[column] = expr
        return dataclasses.replace(m, column=columns[m.expression], expression=None, name=name)

    lowered = tuple(lower(m) for m in measures)
    lowered_named = {k: lower(m, k) for k, m in named.items()}
    if not exprs:
        return node, measures, named
    return WithColumns.of(node, (), exprs, unit), lowered, lowered_named


def derive_keys(node: Node, by: Iterable[Any], unit: str | None) -> tuple[Node, list[Any]]:
    """``node`` plus a ``WithColumns`` computing every key expression, and the key column names.

    ``pl.col("x")`` is the column ``x``. Another expression's key column takes the expression's Polars
    output name, which must not be an existing column (the measures still read that column's values).
    """
    names: list[Any] = []
    exprs: dict[str, pl.Expr] = {}
    for b in by:
        if not isinstance(b, pl.Expr):
            names.append(b)
            continue
        if b.meta.has_multiple_outputs():
            raise PlanError("a key expression has several outputs", argument="by",
                            fix="pass one expression per key, e.g. group_by(pl.col('a'), pl.col('b'))")
        name = b.meta.output_name()
        if not b.meta.is_column():
            if name in node.schema:
                raise PlanError(f"the key expression {b} would be named {name!r}, like the column it replaces "
                                "(the measures read that column)", argument="by",
                                fix=f"name the key: group_by((<expression>).alias('{name}_key'))")
            exprs[name] = b
        names.append(name)
    if not exprs:
        return node, names
    return WithColumns.of(node, (), exprs, unit), names
