"""Plots of released estimates, of a session's budget and of privacy curves (the optional ``plot`` extra).

``pip install 'dpframe[plot]'`` installs matplotlib; without it these functions raise an ``ImportError``
that says so (``import dpframe`` never needs it). Every function draws on ``ax`` (a new figure when
``None``) and returns the axes. They show public facts and released values only: a released frame, the
ledger's costs, an accountant's curve.

* :func:`estimates` — released estimates per group, with their confidence intervals when the frame has
  ``<column>_ci_low`` / ``<column>_ci_high`` columns (``collect(budget, ci=0.95)``).
* :func:`budget` — the budget spent after each charge of a session, against its total.
* :func:`privacy_curve` — ε(δ) of a standalone accountant or privacy curve (:mod:`dpframe.accounting`).

Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import polars as pl, dpframe as dp
    >>> released = pl.DataFrame({"city": ["a", "b"], "len": [120, 80]})
    >>> ax = dp.plots.estimates(released, "len")
    >>> [t.get_text() for t in ax.get_xticklabels()], ax.get_ylabel()
    (['a', 'b'], 'len')

"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from dpframe.errors import SchemaError
from dpframe.session import Session, check_session
from dpframe.signatures import checked

INSTALL = "dpframe.plots needs matplotlib: pip install 'dpframe[plot]' (or pip install matplotlib)"


def _axes(ax: Any) -> Any:
    """``ax``, or the axes of a new figure (matplotlib is imported only here)."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(INSTALL) from e
    from matplotlib.axes import Axes

    if ax is not None:
        if not isinstance(ax, Axes):
            raise SchemaError(f"expected matplotlib axes or None, got {type(ax).__name__}", argument="ax",
                              fix="pass ax=plt.subplots()[1], or leave it out for a new figure")
        return ax
    _, new = plt.subplots(figsize=(7, 4))
    return new


@checked
def estimates(result: pl.DataFrame, column: str, *, by: str | None = None, ax: Any = None) -> Any:
    """Released ``column`` per group (``by``: default the first non-numeric column), with CIs if present.

    Error bars come from ``<column>_ci_low`` and ``<column>_ci_high`` (noise-only intervals); a frame
    without them shows the estimates alone. A one-row result (``frame.agg``) is one point.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import polars as pl
        >>> out = pl.DataFrame({"g": ["x", "y"], "m": [1.0, 2.0], "m_ci_low": [0.5, 1.5], "m_ci_high": [1.5, 2.5]})
        >>> len(estimates(out, "m").containers)      # one error-bar container
        1

    """
    if not isinstance(result, pl.DataFrame):
        raise SchemaError(f"expected the released polars DataFrame, got {type(result).__name__}", argument="result",
                          fix="pass q.collect(budget)")
    if not isinstance(column, str) or column not in result.columns or not result.schema[column].is_numeric():
        numeric = [c for c, t in result.schema.items() if t.is_numeric()]
        raise SchemaError(f"{column!r} is not a numeric column of the result", argument="column",
                          fix=f"use one of {numeric}")
    if by is None:
        keys = [c for c, t in result.schema.items() if not t.is_numeric()]
        by = keys[0] if keys else None
    elif not isinstance(by, str) or by not in result.columns:
        raise SchemaError(f"unknown column {by!r}", argument="by", fix=f"use one of {result.columns}")
    axes = _axes(ax)
    labels = [str(v) for v in result[by].to_list()] if by is not None else [column]
    x = np.arange(result.height)
    y = result[column].cast(pl.Float64).to_numpy()
    low, high = f"{column}_ci_low", f"{column}_ci_high"
    if low in result.columns and high in result.columns:
        err = np.vstack([y - result[low].cast(pl.Float64).to_numpy(), result[high].cast(pl.Float64).to_numpy() - y])
        axes.errorbar(x, y, yerr=err, fmt="o", capsize=4, label=f"{column} (with CI)")
    else:
        axes.plot(x, y, "o", label=column)
    axes.set_xticks(x, labels)
    axes.set_ylabel(column)
    if by is not None:
        axes.set_xlabel(by)
    axes.grid(True, axis="y", alpha=0.3)
    return axes


def _coordinate(b: Any) -> tuple[str, float]:
    """The first coordinate of a budget (ε or ρ) with its name."""
    return ("ρ", float(b.rho)) if hasattr(b, "rho") else ("ε", float(b.epsilon))


@checked
def spent_after_each(session: Session) -> list[Any]:
    """The budget spent after each charge of ``session``'s ledger, in order (public: the ledger's costs).

    Example:
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(1), seed=0)
        >>> for eps in (0.25, 0.5):
        ...     _ = sess.table("t").agg(dp.len()).collect(dp.PureDP(eps))
        >>> spent_after_each(sess)
        [PureDP(epsilon=1/4), PureDP(epsilon=3/4)]

    """
    accountant = check_session(session).accountant
    total, out = accountant.empty(), []
    for charge in session._release.charges():
        total = accountant.compose([total, charge.cost])
        out.append(accountant.report(total))
    return out


@checked
def budget(session: Session, *, ax: Any = None) -> Any:
    """The budget spent after each charge of ``session`` (ε, or ρ for zCDP), against the total.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import polars as pl, dpframe as dp
        >>> sess = dp.Session({"t": pl.DataFrame({"x": [1]})}, privacy_unit=dp.PrivacyUnit.row(),
        ...                   budget=dp.PureDP(1), seed=0)
        >>> _ = sess.table("t").agg(dp.len()).collect(dp.PureDP(0.25))
        >>> [float(v) for v in budget(sess).lines[0].get_ydata()]
        [0.0, 0.25]

    """
    name, total = _coordinate(check_session(session).accountant.total)
    axes = _axes(ax)
    spent = [0.0, *(_coordinate(b)[1] for b in spent_after_each(session))]
    axes.step(range(len(spent)), spent, where="post", marker="o", label=f"spent {name}")
    axes.axhline(total, color="#c0392b", linestyle="--", label=f"total {name} = {total:g}")
    axes.set_xlabel("charges (sess.history() ids)")
    axes.set_ylabel(f"{name} spent")
    axes.set_ylim(0, max(total, *spent) * 1.1)
    axes.legend()
    axes.grid(True, alpha=0.3)
    return axes


@checked
def privacy_curve(sources: Any, *, deltas: Sequence[float] | None = None, ax: Any = None) -> Any:
    """ε(δ) of an accountant (anything with ``.epsilon(delta)``) or a privacy curve, or a ``{label: ...}`` of them.

    A privacy curve (``dpframe.accounting.gaussian(sigma=1)`` ...) is composed once in a PLD accountant.
    ``deltas`` default to 10⁻¹⁰ … 10⁻².

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> from dpframe import accounting as acc
        >>> a = acc.RDPAccountant().compose(acc.gaussian(sigma=2.0), times=10)
        >>> ax = privacy_curve({"10 Gaussians": a}, deltas=[1e-6, 1e-3])
        >>> [round(v, 2) for v in ax.lines[0].get_ydata()] == [round(a.epsilon(1e-6), 2), round(a.epsilon(1e-3), 2)]
        True

    """
    from dpframe.accounting import PLDAccountant, PrivacyCurve

    named: Mapping[str, Any] = sources if isinstance(sources, Mapping) else {"ε(δ)": sources}
    grid = _deltas(deltas) if deltas is not None else list(np.logspace(-10, -2, 25))
    axes = _axes(ax)
    for label, source in named.items():
        if isinstance(source, PrivacyCurve):
            source = PLDAccountant().compose(source)
        if not callable(getattr(source, "epsilon", None)):
            raise SchemaError(f"{type(source).__name__} has no epsilon(delta)", argument="sources",
                              fix="pass an accountant (dpframe.accounting.PLDAccountant() ...) or a privacy curve")
        axes.plot(grid, [source.epsilon(delta=d) for d in grid], marker=".", label=label)
    axes.set_xscale("log")
    axes.set_xlabel("δ")
    axes.set_ylabel("ε")
    axes.legend()
    axes.grid(True, which="both", alpha=0.3)
    return axes


__all__ = ["INSTALL", "budget", "estimates", "privacy_curve", "spent_after_each"]


def _deltas(deltas: object) -> list[float]:
    """``deltas`` as a non-empty list of floats in (0, 1); a SchemaError naming ``deltas`` otherwise."""
    fix = "pass e.g. deltas=[1e-8, 1e-6, 1e-4]"
    if isinstance(deltas, str | bytes | Mapping) or not isinstance(deltas, Iterable) \
            or (isinstance(deltas, np.ndarray) and deltas.ndim == 0):
        raise SchemaError(f"expected a list of δ values, got {type(deltas).__name__}", argument="deltas", fix=fix)
    grid = list(deltas)
    if not grid or any(isinstance(d, bool) or not isinstance(d, int | float | np.floating) or not 0 < d < 1
                       for d in grid):
        raise SchemaError(f"δ values must be numbers in (0, 1), got {grid[:3]}", argument="deltas", fix=fix)
    return [float(d) for d in grid]
