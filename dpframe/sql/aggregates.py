"""SQL aggregate calls → dpframe measures, with bounds from ``CLAMP`` or from the session.

=========================================  ==========================================================
SQL                                        measure
=========================================  ==========================================================
``COUNT(*)``, ``COUNT(1)``                 ``dp.len()``
``COUNT(x)``                               ``dp.count(x)`` (rows where x is neither NULL nor NaN)
``COUNT(DISTINCT unit)``                   ``dp.count_units()`` (the privacy-unit column, also renamed)
``COUNT(DISTINCT x)``                      ``dp.count_distinct(x)`` (any other column or expression)
``SUM(CLAMP(x, lo, hi))``                  ``dp.sum(x, bounds=(lo, hi))``
``AVG`` / ``MEAN``                         ``dp.mean``
``VAR_SAMP`` / ``VARIANCE`` / ``VAR_POP``  ``dp.var(..., ddof=1 / 1 / 0)``
``STDDEV`` / ``STDDEV_SAMP`` / ``_POP``    ``dp.std(..., ddof=1 / 1 / 0)``
``MEDIAN(x)``                              ``dp.median(x, bounds=...)`` (named ``x_median``)
``QUANTILE_CONT(x, q | [q, ...])``         ``dp.measure("quantile", x, bounds=..., q=q | (q, ...))``
=========================================  ==========================================================

Bounds are ``CLAMP(x, lower, upper)`` (or ``LEAST(GREATEST(x, lower), upper)``) as the whole argument,
with numeric literals; otherwise the bounds declared on the session for the column
(``dp.Session(..., bounds={"visits.spend": (0, 500)})``). ``x`` may be any row-level expression.

Example:
    >>> from dpframe.sql.sandbox import parse_expression
    >>> bounds_of(parse_expression("CLAMP(spend, -5, 2.5)"))[1]
    (-5, 2.5)

"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dpframe.measures as dpm
from dpframe.errors import ArgumentError, BoundsError, PlanError
from dpframe.measures import Measure
from dpframe.sql.sandbox import Json, function_types

SUPPORTED = ("COUNT(*), COUNT(x), COUNT(DISTINCT x), SUM, AVG, VAR_SAMP/VARIANCE, VAR_POP, "
             "STDDEV/STDDEV_SAMP, STDDEV_POP, MEDIAN, QUANTILE_CONT")
_QUANTILE = {"median", "quantile_cont", "percentile_cont"}
_BUILD: dict[str, Callable[[str, Any], Measure]] = {
    "sum": lambda c, b: dpm.sum(c, bounds=b), "avg": lambda c, b: dpm.mean(c, bounds=b),
    "mean": lambda c, b: dpm.mean(c, bounds=b),
    "var_samp": lambda c, b: dpm.var(c, bounds=b, ddof=1), "variance": lambda c, b: dpm.var(c, bounds=b, ddof=1),
    "var_pop": lambda c, b: dpm.var(c, bounds=b, ddof=0),
    "stddev": lambda c, b: dpm.std(c, bounds=b, ddof=1), "stddev_samp": lambda c, b: dpm.std(c, bounds=b, ddof=1),
    "stddev_pop": lambda c, b: dpm.std(c, bounds=b, ddof=0),
}
_HINTS = {
    "min": "exact minima/maxima are not differentially private; use QUANTILE_CONT(CLAMP(x, lo, hi), 0.0)",
    "max": "exact minima/maxima are not differentially private; use QUANTILE_CONT(CLAMP(x, lo, hi), 1.0)",
    "quantile": "use QUANTILE_CONT(CLAMP(x, lo, hi), q)", "quantile_disc": "use QUANTILE_CONT(CLAMP(x, lo, hi), q)",
    "percentile_disc": "use QUANTILE_CONT(CLAMP(x, lo, hi), q)",
}


def is_aggregate(node: Any) -> bool:
    """Whether ``node`` is a call of an aggregate function."""
    if not isinstance(node, dict) or node.get("class") != "FUNCTION":
        return False
    kinds = function_types().get(str(node.get("function_name", "")).lower(), frozenset())
    return "aggregate" in kinds or "aggregate_macro" in kinds


def contains(node: Any, test: Callable[[Any], bool]) -> bool:
    """Whether ``test`` holds for ``node`` or any node below it.

    ``test`` receives public values only: nodes of the parsed query text, never data.
    """
    if test(node):
        return True
    if isinstance(node, dict):
        return any(contains(v, test) for v in node.values())
    if isinstance(node, list):
        return any(contains(v, test) for v in node)
    return False


def number(node: Json | None) -> int | float | None:
    """The value of a numeric literal (``-5``, ``2.5``, ``CAST(3 AS DOUBLE)``), or None."""
    if not isinstance(node, dict):
        return None
    if node.get("class") == "CONSTANT":
        lit = node.get("literal") or {}
        try:
            return int(lit["text"]) if lit.get("kind") == "INTEGER" else \
                float(lit["text"]) if lit.get("kind") == "NUMERIC" else None
        except (KeyError, ValueError):
            return None
    if node.get("class") == "CAST":
        return number(node.get("child"))
    if node.get("class") == "FUNCTION" and node.get("function_name") in ("-", "+") \
            and len(node.get("arguments", [])) == 1:
        inner = number(node["arguments"][0]["expression"])
        return None if inner is None else (-inner if node["function_name"] == "-" else inner)
    return None


def _args(node: Json) -> list[Json]:
    return [a["expression"] for a in node.get("arguments", [])]


def bounds_of(arg: Json) -> tuple[Json, tuple[int | float, int | float] | None]:
    """``(inner expression, (lower, upper))`` for ``CLAMP(x, lo, hi)``-shaped arguments, else ``(arg, None)``."""
    name = str(arg.get("function_name", "")).lower() if arg.get("class") == "FUNCTION" else ""
    args = _args(arg) if name else []
    if name == "clamp":
        if len(args) != 3:
            raise PlanError("CLAMP takes three arguments: CLAMP(column, lower, upper)", argument="sql",
                            fix="e.g. SUM(CLAMP(spend, 0, 500))")
        lo, hi = number(args[1]), number(args[2])
        if lo is None or hi is None:
            raise BoundsError("CLAMP bounds must be numeric literals (bounds are public, never computed from data)",
                              argument="sql", fix="e.g. CLAMP(spend, 0, 500)")
        return args[0], (lo, hi)
    if name in ("least", "greatest") and len(args) == 2:
        inner_name = str(args[0].get("function_name", "")).lower() if args[0].get("class") == "FUNCTION" else ""
        other = "greatest" if name == "least" else "least"
        inner_args = _args(args[0]) if inner_name == other else []
        if len(inner_args) == 2 and number(args[1]) is not None and number(inner_args[1]) is not None:
            outer, inner = number(args[1]), number(inner_args[1])
            assert outer is not None and inner is not None
            lo, hi = (inner, outer) if name == "least" else (outer, inner)
            return inner_args[0], (lo, hi)
    return arg, None


def _quantiles(node: Json | None) -> float | tuple[float, ...]:
    """``q`` of a quantile call: a float for one literal, a tuple for a list literal ``[q, ...]``."""
    fix = "pass a probability in [0, 1] or a list of them, e.g. QUANTILE_CONT(x, [0.25, 0.5, 0.75])"
    is_list = isinstance(node, dict) and node.get("class") == "FUNCTION" and \
        str(node.get("function_name")).lower() in ("list_value", "array_value")
    values = [number(a) for a in _args(node)] if is_list and node is not None else [number(node)]
    if not values or any(v is None for v in values):
        raise PlanError("quantile probabilities must be numeric literals", argument="sql", fix=fix)
    qs = tuple(float(v) for v in values if v is not None)
    if any(not 0.0 <= q <= 1.0 for q in qs):
        raise PlanError(f"quantile probabilities must be in [0, 1], got {list(qs)}", argument="sql", fix=fix)
    try:                       # as the measure will (duplicates after rounding), now: not first when it is collected
        dpm.quantile_fractions(qs, "sql")
    except ArgumentError as e:
        raise PlanError(f"duplicate quantile probabilities in {list(qs)} (after rounding to a denominator of at most "
                        f"{dpm.Q_DENOMINATOR:,})", argument="sql", fix="pass each probability once") from e
    return qs if is_list else qs[0]


def parse_call(node: Json) -> tuple[str, Json | None, tuple[int | float, int | float] | None, dict[str, Any]]:
    """``(kind, value expression, explicit bounds, options)`` of an aggregate call (no columns resolved yet).

    ``kind`` is ``len``, ``count``, ``count_distinct`` (``COUNT(DISTINCT x)``: the caller makes it
    ``count_units`` where ``x`` is the privacy unit), ``quantile`` or the SQL name of a bounded aggregate
    (``sum``, ``avg``, ``var_pop`` ...); ``options`` holds ``q`` for quantiles. Pass it to :func:`make_measure`.
    """
    name = str(node["function_name"]).lower()
    args = _args(node)
    orders = (node.get("order_bys") or {}).get("orders") or []
    if node.get("filter"):
        raise PlanError(f"{name.upper()}(...) FILTER (WHERE ...) is not supported", argument="sql",
                        fix="filter rows with WHERE (one filter per query), or use CASE inside the aggregate")
    if orders and name not in _QUANTILE:
        raise PlanError(f"ORDER BY inside {name.upper()}(...) is not supported", argument="sql", fix="remove it")
    if node.get("distinct"):        # after FILTER and ORDER BY: refused, never dropped
        if name != "count" or len(args) != 1 or bounds_of(args[0])[1] is not None:
            raise PlanError(f"{name.upper()}(DISTINCT ...) is not supported", argument="sql",
                            fix=f"supported aggregates: {SUPPORTED}")
        return "count_distinct", args[0], None, {}
    if name == "count_star" or (name == "count" and not args):
        return "len", None, None, {}
    if name == "count":
        if len(args) != 1:
            raise PlanError("COUNT takes one argument", argument="sql", fix="COUNT(*) or COUNT(column)")
        lit = args[0].get("literal") or {}
        if args[0].get("class") == "CONSTANT" and lit.get("kind") != "NULL_LITERAL":
            return "len", None, None, {}
        inner, bounds = bounds_of(args[0])
        if bounds is not None:
            raise PlanError("COUNT does not take bounds", argument="sql", fix="write COUNT(column)")
        return "count", inner, None, {}
    if name in _BUILD:
        if len(args) != 1:
            raise PlanError(f"{name.upper()} takes one argument", argument="sql",
                            fix=f"e.g. {name.upper()}(CLAMP(column, lower, upper))")
        inner, bounds = bounds_of(args[0])
        return name, inner, bounds, {}
    if name in _QUANTILE:
        q: float | tuple[float, ...]
        if name == "median":
            value, q = (args[0] if len(args) == 1 else None), 0.5
        elif orders:  # PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x)
            value, q = orders[0]["expression"], _quantiles(args[0] if args else None)
            if len(args) != 1 or len(orders) != 1 or orders[0].get("type") == "DESCENDING":
                raise PlanError("write PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY column)", argument="sql",
                                fix="or QUANTILE_CONT(CLAMP(column, lo, hi), q)")
        else:
            value, q = (args[0] if len(args) == 2 else None), _quantiles(args[1] if len(args) == 2 else None)
        if value is None:
            raise PlanError(f"wrong arguments for {name.upper()}", argument="sql",
                            fix="MEDIAN(CLAMP(x, lo, hi)) or QUANTILE_CONT(CLAMP(x, lo, hi), q | [q, ...])")
        inner, bounds = bounds_of(value)
        return "quantile", inner, bounds, {"q": q, "median": name == "median"}
    raise PlanError(f"the aggregate {name.upper()}() is not supported", argument="sql",
                    fix=_HINTS.get(name, f"supported aggregates: {SUPPORTED}; a measure kind a plugin adds (such as "
                                         f"'{name}') is used from the method chain: "
                                         f"sess.table(...).agg(dp.measure('{name}', column, ...))"))


def make_measure(kind: str, column: str | None, bounds: Any, options: dict[str, Any]) -> Measure:
    """The dpframe measure (unnamed) for a parsed call whose value is in plan column ``column``."""
    if kind == "len":
        return dpm.len()
    if kind == "count_units":
        return dpm.count_units()
    if kind == "count_distinct":
        assert column is not None
        return dpm.count_distinct(column)
    assert column is not None
    if kind == "count":
        return dpm.count(column)
    if kind == "quantile":
        m = dpm.measure("quantile", column, bounds=bounds, q=options["q"])
        return m.alias(f"{column}_median") if options.get("median") else m
    return _BUILD[kind](column, bounds)
