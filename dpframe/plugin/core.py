"""The core plugin: the built-in accountants and execution backends.

They register through the same hooks third-party plugins use; the built-in *mechanisms* live in
``plugins/`` and load through entry points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpframe.accounting import BasicAccountant, PLDAccountant, RDPAccountant, ZCDPAccountant
from dpframe.backends.polars import PolarsBackend
from dpframe.plugin.hookspecs import hookimpl


@hookimpl
def dpframe_accountants() -> dict[str, Callable[..., Any]]:
    """Basic composition, zCDP, the Rényi filter and the PLD (reporting) accountant."""
    return {"basic": BasicAccountant, "zcdp": ZCDPAccountant, "rdp": RDPAccountant, "pld": PLDAccountant}


@hookimpl
def dpframe_backends() -> dict[str, Callable[[], Any]]:
    """The Polars, DuckDB and Spark backends (Spark needs the ``spark`` extra; PySpark loads on first use)."""
    from dpframe.backends.duckdb import DuckDBBackend
    from dpframe.backends.spark import SparkBackend

    return {"polars": PolarsBackend, "duckdb": DuckDBBackend, "spark": SparkBackend}
