"""The core plugin: the built-in accountants and execution backends.

They register through the same hooks third-party plugins use; the built-in *mechanisms* live in
``plugins/`` and load through entry points.
"""

from __future__ import annotations

from dpframe.accounting import BasicAccountant, PLDAccountant, RDPAccountant, ZCDPAccountant
from dpframe.backends.polars import PolarsBackend
from dpframe.plugin.hookspecs import RegisterFactory, hookimpl


@hookimpl
def dpframe_accountants(register: RegisterFactory) -> None:
    """Basic composition, zCDP, the Rényi filter and the PLD (reporting) accountant."""
    for name, factory in (("basic", BasicAccountant), ("zcdp", ZCDPAccountant), ("rdp", RDPAccountant),
                          ("pld", PLDAccountant)):
        register(factory, name=name)


@hookimpl
def dpframe_backends(register: RegisterFactory) -> None:
    """The Polars, DuckDB and Spark backends (Spark needs the ``spark`` extra; PySpark loads on first use)."""
    from dpframe.backends.duckdb import DuckDBBackend
    from dpframe.backends.spark import SparkBackend

    for name, factory in (("polars", PolarsBackend), ("duckdb", DuckDBBackend), ("spark", SparkBackend)):
        register(factory, name=name)
