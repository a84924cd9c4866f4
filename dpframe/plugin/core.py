"""The core plugin: the built-in accountants, execution backends and the ``agg`` query family.

They register through the same hooks third-party plugins use; the built-in *mechanisms* live in
``plugins/`` and load through entry points.
"""

from __future__ import annotations

from dpframe.accounting import BasicAccountant, PLDAccountant, RDPAccountant, ZCDPAccountant
from dpframe.backends.polars import PolarsBackend
from dpframe.plugin.hookspecs import RegisterFactory, RegisterFamily, hookimpl


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


@hookimpl
def dpframe_query_families(register: RegisterFamily) -> None:
    """The ``agg`` family (measures per group): the query families' road is the same for the built-ins."""
    from dpframe.aggregate import Aggregates

    register(Aggregates())
