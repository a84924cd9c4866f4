"""The Spark backend: the stable part of a plan as Spark DataFrame operations; statistics come back.

Install with ``pip install 'dpframe[spark]'`` (PySpark, and Java 17+ for a local session). Use it with
``dp.Session({...}, backend="spark", spark=<SparkSession>)`` (without ``spark=``: the active session,
else ``SparkSession.builder.getOrCreate()``). Tables may be Spark DataFrames, Parquet paths (files or
directories, local or ``s3a://``/``hdfs://``; read by Spark — a local one only where Spark reads what Polars
reads, :func:`_reads_as_polars`, else through Polars), Delta directories (``_delta_log``; needs
Delta Lake on the cluster) or Polars/Arrow frames (shipped to Spark once).

What runs in Spark (on the executors of a cluster), as one Spark job per query:

1. the row-level plan: filters, derived columns and selects. Polars expressions are translated from their
   serialized tree (the walk :mod:`dpframe.plan.rowlevel` already checks) to native Spark columns when
   dpframe knows an exactly equivalent Spark operation (column references, literals, comparisons,
   boolean logic, null/NaN tests, Int64/Float64 ``+ - *``, widening casts, ``when/then/otherwise``);
   any other row-level node runs the Polars expressions themselves on the executors, batch by batch,
   through ``mapInArrow`` (row-level means each output row depends on one input row, so batching cannot
   change a result). Public joins become broadcast joins; Poisson sampling a seeded hash filter;
2. the semi-join with the public group keys, then contribution bounding: rows with a NULL privacy unit
   are dropped (as on every backend); with ``max_groups`` each unit keeps the distinct keys with the
   smallest seeded ``xxhash64`` of (unit, keys); then each unit keeps its ``max_rows`` rows with the
   smallest seeded hash of the values the statistics read, ties broken by those values themselves —
   the j-th copy (j ≥ 1) of a row repeated in its unit ranked by the hash of (hash, j), so that each
   row, not each distinct row, is equally likely to be kept. As in the Polars backend, what a unit
   keeps depends only on its own rows and the seed — not on row order, partitioning or other units — so
   bounding is a stable transformation for every seed. (Spark's hash is not Polars' hash: for one seed
   the two engines keep different, equally random, subsets.) It costs one shuffle of the rows by unit
   and two sorts within it (by hash, which numbers the copies; then by each row's final key), with no
   Python on the executors; Spark stops each unit's second sort after ``max_rows`` rows;
3. the exact integer statistics per group (``rows``, ``units``, ``nonnull``, ``fixed_sum``,
   ``indicator_sum``, ``sorted``), with the same definitions as the Polars backend (sums are 64-bit
   ``sum``s, exact unless a group has so many rows that one could leave 64 bits — then, or if ANSI mode
   reports an overflow, the query runs again in DECIMAL(38,0) — then clipped to ±SUM_LIMIT), each
   handed to Spark as one SQL expression (:mod:`dpframe.backends.spark_statistics`: one Py4J call, not
   one per operator). A
   partial ``sorted`` statistic (``near``: quantiles) is answered with rank windows, as on the other
   backends: a first small job samples one row in the stride and places the windows; the aggregation
   then counts each group's codes and those below each window and collects only the codes inside one
   (all of them for a group the sample missed) — the same ``SortedCodes`` contract, so the released
   quantiles are those of the other backends for the same seed and the same bounded rows.

Only the statistics come back to the driver (``toArrow``): one row per group, a few integers each — or,
for ``sorted`` (quantiles), the codes of the kept values. Noise is drawn by the mechanisms on the driver,
in Python, exactly as with the other backends.

Types: Polars types map to Spark types (unsigned integers and Float16 widen; UInt64 becomes DECIMAL(20,0);
a decimal of any precision DECIMAL(38, its scale), which holds the values a column stores beyond its
precision, :func:`held`; naive datetimes TIMESTAMP_NTZ; categoricals STRING) and come back as the plan's
types. Nanosecond datetimes, durations, times, lists, structs and Spark maps/arrays/structs are refused when
the table is registered.
Beside another backend (the session's schema is then the Polars reading) a Parquet path stays in Spark only
where Spark reads it as that schema: a UUID, a Float16, a date64 or a duration column (which Spark cannot
read, or reads as a date or an integer) has the session's rows shipped instead. Shipped millisecond
datetimes become microseconds (a value beyond them: null); a table holding a decimal of more than 38 digits (a
128-bit value stored beyond any precision) is refused when the session is created, on every backend
(:func:`dpframe.catalog.beyond_38_digits`), and a derived one becomes null (:func:`_in_38_digits`). A Spark-side
table (a DataFrame, a path) is a plan Spark runs for every query: one job reads every value of it when the session
is created (:meth:`SparkBackend.count_rows`), so a value Spark cannot read or compute is refused then,
not by every query reading its column after its charge.

Spark's web UI and event log record every operator's row count — exact statistics of the private rows —
so a SparkSession whose UI is on, that logs events or that shows a console progress bar (each job's stages
and task counts) is refused (:func:`metrics_reachable`; its owner may declare them private), and one dpframe
starts has none of them. A derived column of a type Spark cannot store
is refused when the frame is built (:meth:`SparkBackend.supports`), and comparisons Spark would compute
differently (decimals of two types, integers beyond 64 bits) run through Polars.

Differences from Polars, both only on overflow: native Int64 ``+ - *`` give NULL where Polars wraps around
(Spark's ANSI mode would raise instead: a failure that could reveal a private value), and widening casts
are exact on both.

Example (needs PySpark and Java; skipped by the doctests)::

    >>> import dpframe as dp                                          # doctest: +SKIP
    >>> from pyspark.sql import SparkSession                          # doctest: +SKIP
    >>> spark = SparkSession.builder.master("local[2]").getOrCreate()  # doctest: +SKIP
    >>> visits = spark.read.parquet("visits.parquet")                  # doctest: +SKIP
    >>> sess = dp.Session({"visits": visits}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=10),
    ...                   budget=dp.PureDP(1), backend="spark", spark=spark)  # doctest: +SKIP

"""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import secrets
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl

from dpframe.backends.base import STATISTIC_KINDS, StatisticsRequest, int64_sums_are_exact
from dpframe.backends.bins import BIN, COUNT, Bins, adjacent_bins
from dpframe.backends.polars_windows import RankWindows, code_column, fill_missing_groups, finish_lists
from dpframe.backends.rank_windows import SAMPLE_STRIDE, SINGLE_STRIDE
from dpframe.backends.spark_statistics import aggregate, code, ident, present, window_aggregates
from dpframe.engine_output import ENGINE
from dpframe.errors import ArgumentError, DPFrameError, PlanError, SchemaError
from dpframe.file_versions import local_path
from dpframe.mechanism import LIST_KINDS, SUM_LIMIT, Statistic
from dpframe.plan.nodes import Filter, RowNode, Select, WithColumns, case_clashes
from dpframe.plan.sample import _SALT, Sample, node_seed
from dpframe.sql.handover import lossless
from dpframe.sql.nodes import PublicJoin, SQLFilter, SQLProject
from dpframe.tables import check_parquet_columns, glob_pattern, load_table, parquet_reading

_SEED_MASK = (1 << 63) - 1
_RANK = "__dp_rank"
_HASH = "__dp_hash"
_COPY = "__dp_copy"
_ROWS = "__dp_rows"
_SCOPE = "__dp_scope"
_INSTALL = "install the Spark extra: pip install 'dpframe[spark]' (and Java 17+ for a local SparkSession)"


def _pyspark() -> Any:
    """``pyspark.sql`` (imported on first use: the core never needs it), or a DPFrameError with the fix."""
    try:
        import pandas  # noqa: F401  (PySpark's mapInArrow, used for untranslated expressions, needs it)
        import pyspark.sql
    except ImportError as e:
        raise DPFrameError(f"the Spark backend needs PySpark and pandas ({e.name} is not installed)",
                           argument="backend", fix=_INSTALL) from None
    return pyspark.sql


def _pyspark_context() -> Any:
    """``pyspark.SparkContext`` (after :func:`_pyspark`: PySpark is importable)."""
    import pyspark
    return pyspark.SparkContext


# ------------------------------------------------------------------------------------------------ types


def spark_type(dtype: pl.DataType) -> Any:
    """The Spark type storing a Polars type (None: Spark cannot hold it exactly)."""
    T = _pyspark().types
    simple = {pl.Int8: T.ByteType(), pl.Int16: T.ShortType(), pl.Int32: T.IntegerType(), pl.Int64: T.LongType(),
              pl.UInt8: T.ShortType(), pl.UInt16: T.IntegerType(), pl.UInt32: T.LongType(),
              pl.UInt64: T.DecimalType(20, 0), pl.Float16: T.FloatType(), pl.Float32: T.FloatType(),
              pl.Float64: T.DoubleType(),
              pl.Boolean: T.BooleanType(), pl.String: T.StringType(), pl.Categorical: T.StringType(),
              pl.Date: T.DateType(), pl.Binary: T.BinaryType()}
    if isinstance(dtype, pl.Enum):
        return T.StringType()
    if isinstance(dtype, pl.Datetime):
        if dtype.time_unit == "ns":
            return None
        return T.TimestampType() if dtype.time_zone else T.TimestampNTZType()
    if isinstance(dtype, pl.Decimal):   # the widest precision: :func:`held`
        return T.DecimalType(38, dtype.scale or 0) if (dtype.precision or 38) <= 38 else None
    return simple.get(dtype.base_type())


def held(stype: Any) -> Any:
    """The Spark type dpframe holds a column of Spark type ``stype`` in: a decimal as ``DECIMAL(38, s)``, others as is.

    A decimal column may hold values beyond its precision (a Parquet ``DECIMAL(3, 1)`` stored in an INT32 holds
    ``12345``; an Arrow array cast unsafely): Polars and DuckDB read them whole, and so does Spark's reader, but
    every step handing a ``DECIMAL(3, 1)`` over to Arrow (a row-level step run through Polars, ``toArrow``) failed
    on one after its charge, and shipping one from memory failed (``test_review54d.py``). In the widest precision
    of its scale every such value fits: the type decides, never the values.

    Example (needs PySpark; skipped by the doctests)::

        >>> held(_pyspark().types.DecimalType(3, 1))     # doctest: +SKIP
        DecimalType(38,1)

    """
    T = _pyspark().types
    return T.DecimalType(38, stype.scale) if isinstance(stype, T.DecimalType) else stype


def polars_type(stype: Any) -> pl.DataType | None:
    """The Polars type of a Spark column (None: not supported by dpframe)."""
    T = _pyspark().types
    simple: dict[type, pl.DataType] = {
        T.ByteType: pl.Int8(), T.ShortType: pl.Int16(), T.IntegerType: pl.Int32(), T.LongType: pl.Int64(),
        T.FloatType: pl.Float32(), T.DoubleType: pl.Float64(), T.BooleanType: pl.Boolean(),
        T.StringType: pl.String(), T.DateType: pl.Date(), T.BinaryType: pl.Binary(),
        T.TimestampNTZType: pl.Datetime("us"), T.TimestampType: pl.Datetime("us", "UTC")}
    if isinstance(stype, T.DecimalType):
        return pl.Decimal(stype.precision, stype.scale)
    return simple.get(type(stype))


def _spark_schema(schema: pl.Schema, what: str, argument: str = "tables",
                  read_as: Callable[[], dict[str, str]] | None = None) -> Any:
    """The Spark schema storing ``schema``; a SchemaError naming the first column Spark cannot hold exactly.

    ``read_as``: how Spark reads the table's file, if it has one (:meth:`SparkBackend._read_as`), for the error.
    """
    T = _pyspark().types
    fields = []
    for name, dtype in schema.items():
        stype = spark_type(dtype)
        if stype is None:
            found = read_as() if read_as is not None else {}
            also = f" (Spark reads the file's column as {found[name]})" if name in found else ""
            raise SchemaError(f"{what}: column {name!r} has type {dtype}{also}, which the Spark backend cannot "
                              "store exactly", argument=argument,
                              fix="cast it (e.g. Datetime('ns') to Datetime('us')) or drop it before registering, "
                                  "or query the table on another backend")
        fields.append(T.StructField(name, stype, True))
    return T.StructType(fields)


def _encode(frame: pl.DataFrame, sschema: Any) -> Any:
    """A Polars frame as the Arrow table Spark expects for ``sschema`` (storage types of :func:`spark_type`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    widen: dict[pl.DataType, pl.DataType] = {pl.UInt8(): pl.Int16(), pl.UInt16(): pl.Int32(), pl.UInt32(): pl.Int64(),
                                             pl.UInt64(): pl.Decimal(20, 0), pl.Float16(): pl.Float32()}
    casts: dict[str, pl.DataType] = {}
    for name, dtype in frame.schema.items():
        if isinstance(dtype, pl.Categorical | pl.Enum):
            casts[name] = pl.String()
        elif dtype in widen:
            casts[name] = widen[dtype]
        elif isinstance(dtype, pl.Datetime) and dtype.time_unit == "ms":   # Spark keeps microseconds: a value
            casts[name] = pl.Datetime("us", dtype.time_zone)                # beyond them becomes null
    table = frame.cast(casts, strict=False).to_arrow() if casts else frame.to_arrow()  # type: ignore[arg-type]
    return _in_38_digits(table).cast(to_arrow_schema(sschema, timezone="UTC", prefers_large_types=False))


def _in_38_digits(table: Any) -> Any:
    """``table`` (Arrow) with each decimal of more than 38 digits null: Spark holds none (a value beyond 38 digits).

    A Polars decimal is a 128-bit integer, which may hold 39 digits whatever its precision (an Arrow array cast
    unsafely): shipping one failed (``ArithmeticException``), so a Spark backend created beside another one was
    created or not depending on the rows (``test_review54d.py``). As a millisecond datetime beyond microseconds,
    such a value becomes null; every other value is shipped as it is (in ``DECIMAL(38, s)``, :func:`held`). A
    registered table holding one is refused when the session is created, on every backend
    (:func:`dpframe.catalog.beyond_38_digits`, ``test_review55f.py``): only a derived column reaches this.

    Example:
        >>> import pyarrow as pa
        >>> from decimal import Decimal
        >>> big = pa.array([Decimal(10**37), Decimal(1)], pa.decimal128(38, 0)).cast(pa.decimal128(38, 1), safe=False)
        >>> _in_38_digits(pa.table({"d": big}))["d"].to_pylist()   # 10**38 unscaled: 39 digits
        [None, Decimal('1.0')]

    """
    import pyarrow as pa  # (on the executors too)
    import pyarrow.compute as pc

    digits = pa.decimal128(38, 0)
    top, bottom = pa.scalar(Decimal(10**38 - 1), digits), pa.scalar(Decimal(1 - 10**38), digits)
    for i, field in enumerate(table.schema):
        if not pa.types.is_decimal128(field.type):
            continue
        column = table.column(i)
        unscaled = pa.chunked_array([chunk.view(digits) for chunk in column.chunks], digits)
        beyond = pc.or_(pc.greater(unscaled, top), pc.less(unscaled, bottom))
        if pc.any(beyond).as_py():
            table = table.set_column(i, field, pc.if_else(beyond, pa.scalar(None, field.type), column))
    return table


def _decode(table: Any, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """A Spark (Arrow) result as Polars with the plan's types (keys, UInt64 ...).

    A decimal goes back from the ``DECIMAL(38, s)`` Spark holds it in (:func:`held`) to its declared precision
    unchecked, as Polars holds it (and DuckDB hands it back): a value stored beyond the precision stays that value,
    not null.

    Example:
        >>> import pyarrow as pa
        >>> from decimal import Decimal
        >>> out = _decode(pa.table({"d": pa.array([Decimal("1234.5")], pa.decimal128(38, 1))}), {"d": pl.Decimal(3, 1)})
        >>> out.schema["d"], out["d"].cast(pl.Float64).to_list()
        (Decimal(precision=3, scale=1), [1234.5])

    """
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    casts: list[pl.Expr | pl.Series] = []
    for name, want in schema.items():
        have = frame.schema.get(name)
        if have is None or have == want:
            continue
        if isinstance(have, pl.Decimal) and isinstance(want, pl.Decimal) and have.scale == want.scale:
            import pyarrow as pa  # (on the executors too)

            column = frame[name].to_arrow().cast(pa.decimal128(want.precision or 38, want.scale), safe=False)
            casts.append(pl.Series(name, column))
        else:
            casts.append(pl.col(name).cast(want, strict=False))
    return frame.with_columns(casts) if casts else frame


def _first_line(error: BaseException, limit: int = 240) -> str:
    r"""The first informative line of an engine's error, without the Java stack trace.

    A Py4J error starts with "An error occurred while calling o29.load." and gives the Java exception
    on the next line: that one is kept (without its package name).

    Example:
        >>> error = RuntimeError("An error occurred while calling o1.load.\n: org.x.NotFound: [X] no delta\n\tat a.b")
        >>> _first_line(error)
        'NotFound: [X] no delta'

    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("An error occurred while calling"):
        lines = lines[1:]
    text = " ".join(lines[0].lstrip(": ").split()) if lines else ""
    head, sep, rest = text.partition(": ")
    if sep and " " not in head and "." in head:   # a Java class name: keep its last part
        text = f"{head.rsplit('.', 1)[-1]}: {rest}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _NotUTF8(ValueError):
    """A string column Spark reads holds bytes that are not UTF-8 (:func:`_count_reading_every_value`)."""


def _count_reading_every_value(frame: Any) -> int:
    """A Spark DataFrame's row count, computed by one job that reads (hashes) every value of every column.

    The same job reads every string as UTF-8: Spark's reader takes a Parquet STRING's bytes as they are, where
    Polars and DuckDB refuse a file holding one that is not UTF-8, and Polars (run on the executors for a step
    Spark has no equivalent of, or on the driver for a released key) failed on it after the charge, on D and not
    on D′ (``test_review54d.py``). Such a column is a :class:`_NotUTF8` naming it (never the value).
    """
    F, T = _pyspark().functions, _pyspark().types
    hashed = [F.max(F.xxhash64(*[_name(c) for c in frame.columns]))] if frame.columns else []
    strings = [f.name for f in frame.schema.fields if isinstance(f.dataType, T.StringType)]
    invalid = [F.expr(f"count(CASE WHEN NOT is_valid_utf8({ident(c)}) THEN 1 END)") for c in strings]
    row = frame.agg(F.count(F.lit(1)), *hashed, *invalid).first()
    bad = [c for c, n in zip(strings, list(row)[len(row) - len(strings):]) if n]
    if bad:
        raise _NotUTF8(f"its column {bad[0]!r} holds strings that are not UTF-8, which Polars and DuckDB refuse too")
    return int(row[0])


def _reads_as_polars(frame: Any, path: Path, where: str) -> bool:
    """Whether Spark's reading ``frame`` of the local Parquet ``path`` reads the files Polars reads, as its schema.

    Spark skips files whose names start with ``_`` or ``.`` and plain subdirectories, which Polars reads; it types
    hive partition values its own way (``k=01`` an Int32, ``k=2020-01-01`` a String: Polars an Int64 and a Date)
    and INT96 timestamps as UTC (Polars: naive). Where it differs, the path is read through Polars
    (``test_review39c.py``); where Polars cannot read it (a directory Spark wrote, with its ``.crc`` files), Spark's
    reading is kept. Either way, files whose columns differ are a SchemaError naming ``where``
    (:func:`~dpframe.tables.check_parquet_columns`): Spark read them against one file's schema.
    """
    read = sorted(Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path)).resolve() for uri in frame.inputFiles())
    polars = parquet_reading(path)
    check_parquet_columns(read if polars is None else polars[0], str(path), where)
    if polars is None:
        return True
    files, schema = polars
    found = [(field.name, field.dataType) for field in frame.schema.fields]
    return read == files and [(n, held(t)) for n, t in found] == [(n, held(spark_type(t))) for n, t in schema.items()]


def _reads_every_value(frame: Any) -> bool:
    """Whether Spark reads (computes) every value of ``frame`` without failing."""
    try:
        _count_reading_every_value(frame)
    except Exception:    # Py4J, or PySpark's own exception for the Java one
        return False
    return True


METRICS_PRIVATE = "spark.dpframe.metricsArePrivate"


def metrics_reachable(spark: Any) -> str | None:
    """Where others than the data owner may read ``spark``'s query metrics (None: nowhere dpframe knows of).

    Spark's web UI (on by default, on every interface, without authentication; its REST API too) and its
    event log record each operator's "number of output rows" and each stage's record counts: after a
    query they hold exact statistics of the private rows (how many passed a filter, how many each group
    has), outside any ε. Its console progress bar (``spark.ui.showConsoleProgress``, which PySpark turns on
    for every context it starts, and which cannot be turned off once the context runs) prints on standard
    error each job's stages and their task counts (``[Stage 6:> (0 + 2) / 2]``): how many jobs a release
    runs depends on the rows, and adaptive execution sets task counts from the size of the shuffled rows;
    code in the process reads its own standard error. Its driver log, once code in the process calls
    ``sc.setLogLevel("INFO")``, prints on standard error the bytes of each task and each shuffle read
    (``Getting 2 (2012.0 B) non-empty blocks`` for a group count over 300 rows, ``398.2 KiB`` over 30,000),
    and py4j's debug log (``logging``'s ``py4j`` loggers) every call the driver makes to the JVM; the logs of a
    failing task quote the row it failed on (:func:`quiet_task_failures`, which the backend calls on every session it
    takes, turns them off). Those logs
    can change at any time: a release checks them before its charge and before each read
    (:func:`logs_reachable`, :meth:`SparkBackend.check_quiet`). A data owner whose UI and logs only they can read
    (an access-controlled cluster, no untrusted code in the process) declares it with the Spark configuration
    ``spark.dpframe.metricsArePrivate=true`` (read when the backend takes the session: a runtime setting, code in
    the process may set it later).

    Example (needs PySpark and Java; skipped by the doctests)::

        >>> metrics_reachable(SparkSession.builder.config("spark.ui.enabled", "false").getOrCreate())  # doctest: +SKIP

    """
    if declared_private(spark):
        return None
    return _settings_reachable(spark) or logs_reachable(spark)


def _settings_reachable(spark: Any) -> str | None:
    """Where ``spark``'s metrics are reachable by a setting fixed when its context started (its UI, event log, bar)."""
    context = spark.sparkContext
    if context.uiWebUrl is not None:
        return f"its web UI ({context.uiWebUrl})"
    conf = context.getConf()
    if str(conf.get("spark.eventLog.enabled", "false")).lower() == "true":
        return "its event log (spark.eventLog.enabled)"
    if str(conf.get(_PROGRESS, "false")).lower() == "true":
        return f"its console progress bar ({_PROGRESS}: each job's stages and task counts, on standard error)"
    return None


_PROGRESS = "spark.ui.showConsoleProgress"
"""Spark's console progress bar: fixed when its SparkContext starts; PySpark turns it on (:func:`metrics_reachable`)."""


def declared_private(spark: Any) -> bool:
    """Whether the data owner declared ``spark``'s metrics and logs private (``spark.dpframe.metricsArePrivate``)."""
    return str(spark.conf.get(METRICS_PRIVATE, "false")).lower() == "true"


def logs_reachable(spark: Any) -> str | None:
    """Which of ``spark``'s logs print statistics of the private rows at their present level (None: neither).

    Spark's driver log at INFO level or finer, py4j's loggers at DEBUG (see :func:`metrics_reachable`), and a
    logger of :data:`TASK_LOGGERS` or :data:`CONTEXT_LOGGERS` at ERROR or finer (:func:`quiet_task_failures`).
    """
    log_manager = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
    if log_manager.getLogger("org.apache.spark").isInfoEnabled():
        return "its driver log, at INFO level or finer (sc.setLogLevel)"
    if any(logging.getLogger(name).isEnabledFor(logging.DEBUG) for name in _PY4J_LOGGERS):
        return "py4j's debug log (logging.getLogger('py4j'))"
    for name in TASK_LOGGERS:
        if log_manager.getLogger(name).isErrorEnabled():
            return f"the log of a failing task (log4j's {name}, on: a task's error quotes the row it failed on)"
    for name in CONTEXT_LOGGERS:
        if logging.getLogger(name).isEnabledFor(logging.ERROR):
            return f"PySpark's log of a failing query ({name}, on: a task's error quotes the row it failed on)"
    return None


TASK_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                "org.apache.spark.scheduler.TaskResultGetter", "org.apache.spark.api.python.PythonRunner",
                "org.apache.spark.sql.execution.python.ArrowPythonRunner",
                "org.apache.spark.storage.memory.MemoryStore")
"""The log4j loggers (on the driver: the executor's too in local mode) whose WARN and ERROR lines depend on the rows.

A failing task's exception, quoted in full (``ERROR Executor: Exception in task``, ``WARN TaskSetManager: Lost task``,
a result that cannot be read back, a Python worker's traceback), quotes the value it failed on; ``MemoryStore`` warns
how many bytes of a cached partition it had computed when memory ran out. :func:`quiet_task_failures` turns them off.
"""

_TASK_PACKAGES = ("org.apache.spark.executor", "org.apache.spark.scheduler", "org.apache.spark.api.python",
                  "org.apache.spark.sql.execution.python", "org.apache.spark.storage", "org.apache.spark.memory")
"""The log4j packages :func:`quiet_task_failures` turns off (each holding some of :data:`TASK_LOGGERS`)."""

CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
"""PySpark's loggers of an error with a query context: a JSON line on the driver's standard error, quoting it."""


def quiet_task_failures(spark: Any) -> None:
    """Turn off the logs that quote a failing task's rows: :data:`TASK_LOGGERS` and :data:`CONTEXT_LOGGERS`.

    In local mode the executors run in the driver's JVM, whose standard error is the analyst's process's: a task
    failing on a row (an error dpframe does not know of; ANSI mode's 64-bit sum overflow, which the backend catches
    and sums again in DECIMAL(38,0)) printed the exception quoting the value (``The value 'secret-4817' of the type
    "STRING" cannot be cast ...``) three times, at WARN and ERROR (``test_review55f.py``). The backend calls this on
    every SparkSession it takes (unless the data owner declared its logs private, :func:`declared_private`); a
    release is refused while one of them is back on (:func:`logs_reachable`). Spark's other warnings still print.

    Example (needs PySpark and Java; skipped by the doctests)::

        >>> quiet_task_failures(spark)                               # doctest: +SKIP
        >>> logs_reachable(spark) is None                            # doctest: +SKIP
        True

    """
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    configurator, off = log4j.core.config.Configurator, log4j.Level.OFF
    for name in (*_TASK_PACKAGES, *TASK_LOGGERS):
        configurator.setLevel(name, off)
    try:
        from pyspark.logger import PySparkLogger  # (Spark 4: the query-context loggers are PySpark loggers)
    except ImportError:
        make: Callable[[str], logging.Logger] = logging.getLogger
    else:
        make = PySparkLogger.getLogger
    for name in CONTEXT_LOGGERS:
        make(name).setLevel(logging.CRITICAL + 1)


_PY4J_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")
"""The loggers py4j logs each call to the JVM with, at DEBUG level."""


def _check_metrics(spark: Any) -> bool:
    """An ArgumentError naming ``spark`` where :func:`metrics_reachable` finds its metrics reachable.

    Else whether the data owner declared them private (:func:`declared_private`, read now: the backend keeps it).
    Before its logs are checked, the logs of a failing task are turned off (:func:`quiet_task_failures`).
    """
    if declared_private(spark):
        return True
    _refuse(_settings_reachable(spark))
    quiet_task_failures(spark)
    _refuse(logs_reachable(spark))
    return False


def _refuse(where: str | None) -> None:
    """An ArgumentError naming ``spark`` whose metrics are readable in ``where`` (None: nothing)."""
    if where is not None:
        raise ArgumentError(f"the SparkSession's query metrics are readable in {where}: each query's row counts "
                            "there are exact statistics of the private rows", argument="spark",
                            fix="start Spark with .config('spark.ui.enabled', 'false') and "
                                f".config('{_PROGRESS}', 'false') (and no event log), keep its "
                                "log level at WARN or above (sc.setLogLevel('WARN')) and py4j's loggers above DEBUG, "
                                "or, if only you can read its UI and logs, set "
                                f".config('{METRICS_PRIVATE}', 'true'); nothing was charged")


def _name(column: str) -> Any:
    F = _pyspark().functions
    return F.col("`" + column.replace("`", "``") + "`")


# ------------------------------------------------------------------------- row-level Polars expressions


class _Untranslatable(Exception):
    """The expression has no exactly equivalent native Spark form (it then runs through Polars)."""


_COMPARE = {"Eq": "__eq__", "NotEq": "__ne__", "Lt": "__lt__", "LtEq": "__le__", "Gt": "__gt__", "GtEq": "__ge__"}
_ARITH = {"Plus": "try_add", "Minus": "try_subtract", "Multiply": "try_multiply"}
_ORDERED = ("numeric", "string", "bool", "date")


def _family(dtype: pl.DataType) -> str:
    if dtype.is_numeric():
        return "numeric"
    return {pl.String: "string", pl.Boolean: "bool", pl.Date: "date"}.get(dtype.base_type(), "other")


def _dyn_int(tree: Any) -> bool:
    """A Python int literal (Polars gives it the other operand's integer type)."""
    return isinstance(tree, dict) and "Int" in tree.get("Literal", {}).get("Dyn", {})


class _Translator:
    """Polars expression (serialized JSON tree) → an exactly equivalent Spark column, or _Untranslatable."""

    def __init__(self, schema: pl.Schema) -> None:
        self.schema = schema
        self.F = _pyspark().functions

    def dtype(self, tree: Any) -> pl.DataType:
        try:
            expr = pl.Expr.deserialize(io.StringIO(json.dumps(tree)), format="json")
            return pl.LazyFrame(schema=self.schema).select(expr).collect_schema().dtypes()[0]
        except (pl.exceptions.PolarsError, ValueError) as e:  # e.g. a NaN literal does not round-trip JSON
            raise _Untranslatable(str(e)) from None

    def __call__(self, tree: Any) -> Any:
        F = self.F
        if not isinstance(tree, dict) or len(tree) != 1:
            raise _Untranslatable(str(tree))
        variant, payload = next(iter(tree.items()))
        if variant == "Column" and isinstance(payload, str):
            return _name(payload)
        if variant == "Alias":
            return self(payload[0])
        if variant == "Literal":
            return F.lit(self.literal(payload))
        if variant == "BinaryExpr":
            return self.binary(payload)
        if variant == "Ternary":
            # Spark coerces mismatched branches its own way (a String branch cast to a number fails on
            # some values under ANSI mode): native only when both branches already have the result type.
            out = self.dtype(tree)
            for branch in (payload["truthy"], payload["falsy"]):
                kind = self.dtype(branch)
                if kind != out and kind != pl.Null and not (_dyn_int(branch) and out == pl.Int64):
                    raise _Untranslatable(f"when/then/otherwise mixes {kind} into {out}")
            return F.when(self(payload["predicate"]), self(payload["truthy"])).otherwise(self(payload["falsy"]))
        if variant == "Cast" and payload.get("options") == "NonStrict":
            return self.cast(payload)
        if variant == "Function":
            function, inputs = payload.get("function"), payload.get("input", [])
            if isinstance(function, dict) and set(function) == {"Boolean"} and len(inputs) == 1:
                return self.boolean(function["Boolean"], inputs[0])
        raise _Untranslatable(variant)

    @staticmethod
    def literal(payload: Any) -> Any:
        kind, value = next(iter(payload.items()))
        inner, scalar = next(iter(value.items())) if isinstance(value, dict) else (None, None)
        if kind == "Dyn" and (inner == "Float" or inner == "Int" and isinstance(scalar, int) and
                              -(2**63) <= scalar < 2**63):    # an integer beyond 64 bits is no Spark literal
            return scalar
        if kind == "Scalar" and inner in ("String", "Boolean"):
            return scalar
        if kind == "Scalar" and inner == "Null":
            return None
        raise _Untranslatable(f"literal {payload}")

    def binary(self, payload: dict[str, Any]) -> Any:
        op, left, right = payload["op"], payload["left"], payload["right"]
        lt, rt = self.dtype(left), self.dtype(right)
        if op in _COMPARE:
            if _family(lt) != _family(rt) or _family(lt) not in _ORDERED:
                raise _Untranslatable(f"{op} on {lt}, {rt}")
            T = _pyspark().types
            stored = (spark_type(lt), spark_type(rt))
            if stored[0] != stored[1] and any(isinstance(t, T.DecimalType) for t in stored):
                # Spark casts both sides to one decimal type of at most 38 digits: the finer scale rounds
                raise _Untranslatable(f"{op} on {lt}, {rt}")
            return getattr(self(left), _COMPARE[op])(self(right))
        if op in ("And", "Or") and lt == pl.Boolean and rt == pl.Boolean:   # Kleene logic in both engines
            return self(left) & self(right) if op == "And" else self(left) | self(right)
        if op in _ARITH:
            out = self.dtype({"BinaryExpr": payload})
            if out == pl.Float64 and lt.is_numeric() and rt.is_numeric():
                a, b = self(left).cast("double"), self(right).cast("double")
                return a + b if op == "Plus" else a - b if op == "Minus" else a * b
            if out == pl.Int64 and all(t == pl.Int64 or _dyn_int(e) for t, e in ((lt, left), (rt, right))):
                return getattr(self.F, _ARITH[op])(self(left), self(right))
        raise _Untranslatable(op)

    def cast(self, payload: dict[str, Any]) -> Any:
        source = self.dtype(payload["expr"])
        target = self.dtype({"Cast": payload})
        widening = (source.is_integer() or source == pl.Boolean) and (target.is_integer() or target == pl.Float64)
        if not widening or spark_type(target) is None:
            raise _Untranslatable(f"cast {source} to {target}")
        return self(payload["expr"]).try_cast(spark_type(target))

    def boolean(self, name: Any, tree: Any) -> Any:
        value, dtype = self(tree), self.dtype(tree)
        if name == "IsNull":
            return value.isNull()
        if name == "IsNotNull":
            return value.isNotNull()
        if name == "Not" and dtype == pl.Boolean:
            return ~value
        if name in ("IsNan", "IsNotNan") and dtype.is_float():  # Polars: null stays null
            nan = self.F.isnan(value)
            return self.F.when(value.isNull(), None).otherwise(nan if name == "IsNan" else ~nan)
        raise _Untranslatable(str(name))


def _native(node: RowNode, schema: pl.Schema) -> list[tuple[str, Any]] | Any:
    """Spark columns for ``node`` (a predicate, or [(name, column)]); raises _Untranslatable."""
    translate = _Translator(schema)
    kind, exprs = _polars_form(node)
    columns = [(e.meta.output_name(), translate(json.loads(e.meta.serialize(format="json")))) for e in exprs]
    return columns[0][1] if kind == "filter" else columns


def _polars_form(node: RowNode) -> tuple[str, list[pl.Expr]]:
    """("filter" | "with_columns" | "select", the node's Polars expressions)."""
    if isinstance(node, Filter):
        return "filter", [node.predicate]
    if isinstance(node, WithColumns | Select):
        return "with_columns" if isinstance(node, WithColumns) else "select", list(node.exprs)
    assert isinstance(node, SQLFilter | SQLProject) and node.polars is not None
    return ("filter", [node.polars]) if isinstance(node, SQLFilter) else ("select", list(node.polars))


def _polars_batches(kind: str, exprs: list[pl.Expr], input_schema: dict[str, pl.DataType],
                    output_schema: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """Runs on the executors (``mapInArrow``): apply a row-level Polars node to each Arrow batch."""
    import pyarrow as pa

    for batch in batches:
        frame = _decode(pa.Table.from_batches([batch]), input_schema)
        if kind == "filter":
            frame = frame.filter(exprs[0])
        elif kind == "with_columns":
            frame = frame.with_columns(exprs)
        else:
            frame = frame.select(exprs)
        yield from _encode(frame, output_schema).to_batches()


# --------------------------------------------------------------------------------------------- backend


class SparkBackend:
    """Runs plans as Spark DataFrame operations (see the module docstring)."""

    name = "spark"
    statistic_kinds = STATISTIC_KINDS    # every kind (see dpframe.backends.base.ListsKinds)

    def __init__(self, spark: Any = None) -> None:
        self._sql = _pyspark()
        self._spark = spark
        self._private = spark is not None and declared_private(spark)   # the data owner's declaration, read once
        self._frames: dict[str, Any] = {}               # name -> Spark DataFrame
        self._schemas: dict[str, pl.Schema] = {}        # name -> the public (Polars) schema
        self._loaded: dict[str, Any] = {}               # Spark sources read by load_table, not yet registered
        self._scope = secrets.randbits(63)              # this backend's own cache entries (:meth:`statistics`)

    @property
    def spark(self) -> Any:
        """The SparkSession (given, else the active one, else ``getOrCreate()``).

        One it creates runs its Python workers on this interpreter unless ``PYSPARK_PYTHON`` says
        otherwise: Spark's default, the first ``python3`` on the path, may lack Polars, and every query
        with a step Spark runs through Polars would then fail after its charge. It has no web UI and no
        console progress bar; an
        active one whose metrics others may read is refused (:func:`metrics_reachable`).
        """
        if self._spark is None:
            session = self._sql.SparkSession
            builder = session.builder.config("spark.ui.enabled", "false")   # its metrics are exact statistics
            # and its progress bar shows each job's stages and task counts (PySpark turns it on by default)
            builder = builder.config(_PROGRESS, "false")
            if not os.environ.get("PYSPARK_PYTHON"):
                builder = builder.config("spark.pyspark.python", sys.executable)
            try:
                spark = session.getActiveSession()
                if spark is None:
                    started = _pyspark_context()._active_spark_context is None   # no JVM context yet: ours
                    spark = builder.getOrCreate()
                    if started:     # Spark 4 starts a local driver log at INFO, which prints statistics of the
                        spark.sparkContext.setLogLevel("WARN")   # private rows (metrics_reachable): before any read
            except Exception as e:  # typically no Java: PySparkRuntimeError [JAVA_GATEWAY_EXITED]
                raise DPFrameError(f"cannot start a local SparkSession ({type(e).__name__}: {_first_line(e)})",
                                   argument="spark", fix="install Java 17+ (set JAVA_HOME or put java on PATH), "
                                   "or pass spark=<SparkSession> connected to your cluster") from None
            self._private = _check_metrics(spark)
            self._spark = spark
        return self._spark

    def use_spark(self, spark: Any) -> None:
        """Run on ``spark`` (the ``spark=`` argument of ``dp.Session``).

        Refused where others may read its metrics (:func:`metrics_reachable`).
        """
        if not isinstance(spark, self._sql.SparkSession):
            raise ArgumentError(f"expected a pyspark.sql.SparkSession, got {type(spark).__name__}", argument="spark",
                               fix="pass SparkSession.builder.getOrCreate()")
        self._private = _check_metrics(spark)
        self._spark = spark

    def check_quiet(self) -> None:
        """An :class:`ArgumentError` naming ``spark`` while :func:`logs_reachable` finds a log that prints statistics.

        A release calls it before its charge and before each read: the log levels may change at any time (the web
        UI and the event log cannot: they were checked when the backend took the session). Not where the data owner
        declared the metrics private when it did.
        """
        spark = self.spark
        if not self._private:
            _refuse(logs_reachable(spark))

    # ---------------------------------------------------------------------------------- registration
    def _read(self, name: str, source: object) -> Any:
        """A Spark DataFrame for a Spark-side source (DataFrame, Parquet or Delta path), else None."""
        if isinstance(source, self._sql.DataFrame):
            return source
        if isinstance(source, str | Path):
            text, local = str(source), local_path(source)    # a file: URI is its local path, on every check
            if local is not None and not local.exists():
                raise SchemaError(f"path {text!r} does not exist", argument=f"tables[{name!r}]",
                                  fix="pass a Parquet file or directory, or a Delta table directory")
            if local is not None and glob_pattern(local):   # Spark would read the files it matches: Polars the one
                return None
            delta = local is not None and (local / "_delta_log").is_dir()
            if not (delta or local is None or local.is_dir() or local.suffix.lower() == ".parquet"):
                return None
            spark = self.spark   # (its own error when Spark cannot start)
            try:
                frame = spark.read.format("delta").load(text) if delta else spark.read.parquet(text)
            except Exception as e:   # Py4J / AnalysisException: a missing data source, an unreadable path ...
                what = "Delta table" if delta else "Parquet data"
                fix = ("Delta Lake must be on the Spark classpath (pip install delta-spark and start Spark with "
                       "delta.pip_utils.configure_spark_with_delta_pip), or pass spark.read.format('delta')"
                       ".load(path) as a DataFrame") if delta else \
                    "check the path and that Spark can read it (credentials, file system), or pass a DataFrame"
                raise SchemaError(f"Spark cannot read the {what} at {text!r} ({type(e).__name__}: "
                                  f"{_first_line(e)})", argument=f"tables[{name!r}]", fix=fix) from None
            return frame if delta or local is None or _reads_as_polars(frame, local, f"tables[{name!r}]") else None
        return None

    def _public_schema(self, name: str, frame: Any) -> pl.Schema:
        schema = {}
        for field in frame.schema.fields:
            dtype = polars_type(field.dataType)
            if dtype is None:
                raise SchemaError(f"table {name!r}: column {field.name!r} has Spark type "
                                  f"{field.dataType.simpleString()}, which dpframe does not support",
                                  argument="tables", fix=f"drop or cast it first: df.drop({field.name!r})")
            schema[field.name] = dtype
        return pl.Schema(schema)

    def load_table(self, name: str, source: object) -> pl.LazyFrame:
        """The session's (lazy, Polars) view of a table; Spark-side sources stay in Spark.

        The view reads from Spark (to the driver) only if another backend is asked to run a query on
        this session (``sess.sql(..., backend="duckdb")``); the Spark backend never uses it.
        """
        frame = self._read(name, source)
        if frame is None:
            return load_table(name, local_path(source) or source)
        schema = self._public_schema(name, frame)
        self._loaded[name] = frame
        from polars.io.plugins import register_io_source

        def read(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
                 batch_size: int | None) -> Iterator[pl.DataFrame]:
            part = frame.select(*[_name(c) for c in with_columns]) if with_columns is not None else frame
            part = part.limit(n_rows) if n_rows is not None else part
            out = _decode(part.toArrow(), dict(schema))
            yield out.filter(predicate) if predicate is not None else out

        return register_io_source(read, schema=schema)

    def count_rows(self, name: str) -> int | None:
        """The row count of a table :meth:`load_table` kept in Spark, every value read once (None: Polars read it).

        A Spark table is a plan Spark runs again for every query: a value it cannot read or compute (a
        Parquet millisecond timestamp beyond its microseconds; ``CAST(s AS INT)`` of ``'oops'`` in ANSI
        mode) would make every query reading its column fail after its charge, on D′ and not on D. One
        Spark job reads every column now; its failure is a SchemaError naming ``tables[name]``.
        """
        if name not in self._loaded:
            return None
        try:
            return _count_reading_every_value(self._loaded[name])
        except _NotUTF8 as e:
            raise SchemaError(f"cannot read table {name!r}: {e}", argument=f"tables[{name!r}]",
                              fix="repair the strings (or read the column as binary) before registering the table"
                              ) from None
        except Exception as e:   # Py4J, or PySpark's own exception for the Java one (ArithmeticException ...)
            raise SchemaError(f"cannot read table {name!r}: Spark fails reading it ({type(e).__name__}: "
                              f"{_first_line(e)})", argument=f"tables[{name!r}]",
                              fix="fix or drop the values Spark cannot read (in a DataFrame: try_cast instead of "
                                  "cast), or load the table yourself and pass a DataFrame") from None

    def check_unit(self, table: str, column: str, dtype: pl.DataType) -> None:
        """Refuse a privacy-unit column whose values may not all reach Spark (a :class:`SchemaError`).

        Spark keeps datetimes in microseconds: a millisecond datetime beyond that range is stored as null
        (:func:`_encode`), so a unit with such an id lost its rows here while the Polars backend counted them
        (a unit's rows must be one unit on every backend: ``docs/guarantees.md``). The type decides, as on
        DuckDB (:func:`dpframe.sql.handover.lossless`); the check reads no row.

        Example:
            >>> SparkBackend().check_unit("t", "u", pl.Datetime("ms"))
            Traceback (most recent call last):
            ...
            dpframe.errors.SchemaError: privacy_unit: the Spark backend cannot hold the privacy-unit column 'u' ...

        """
        if not lossless(dtype):
            raise SchemaError(f"the Spark backend cannot hold the privacy-unit column {column!r} of table {table!r} "
                              f"({dtype}: Spark keeps datetimes in microseconds and has no 128-bit integers, and a "
                              "unit beyond them would lose its rows)", argument="privacy_unit",
                              fix=f"register the ids as text (pl.col({column!r}).cast(pl.String)), or run the "
                                  "session on the Polars backend")

    def register(self, name: str, source: pl.LazyFrame) -> None:
        """Own a private table given as a Polars LazyFrame (shipped to Spark once)."""
        self.register_source(name, source, None)

    def register_source(self, name: str, frame: pl.LazyFrame, source: object) -> None:
        """Own a private table: a Spark DataFrame or path stays in Spark; Polars/Arrow data is shipped.

        ``frame``'s schema is the declared (public) schema: a Spark DataFrame missing one of its columns,
        or holding it with another type, is a SchemaError. Beside another backend (the session read
        ``frame`` in full), a path stays in Spark only where Spark reads it as that schema and every value
        of it (:meth:`_as_declared`); otherwise the session's rows are shipped, and a column Spark cannot
        hold as its declared type is a SchemaError naming ``tables[name]``, the column, both types and
        the fix.
        """
        declared = frame.collect_schema()
        clash = case_clashes(declared.names())
        if clash:   # Spark's names ignore case: every query would fail after its charge (AMBIGUOUS_REFERENCE)
            raise SchemaError(f"table {name!r} has columns that differ only in case ({clash}), which Spark cannot "
                              "tell apart", argument="tables", fix="rename them")
        spark_frame = self._loaded.pop(name, None)
        if spark_frame is None and isinstance(source, self._sql.DataFrame):
            spark_frame = source
        elif spark_frame is None:    # created beside another backend: the session read ``frame`` in full
            spark_frame = self._as_declared(name, source, declared)
        if spark_frame is None:
            sschema = _spark_schema(declared, f"table {name!r}", f"tables[{name!r}]",
                                    functools.partial(self._read_as, name, source, declared))
            spark_frame = self.spark.createDataFrame(_encode(frame.collect(engine=ENGINE), sschema), schema=sschema)
        else:
            found = self._public_schema(name, spark_frame)
            missing = [c for c in declared.names() if c not in found]
            if missing:
                raise SchemaError(f"the Spark table {name!r} has no column(s) {missing}", argument="tables",
                                  fix=f"declare only its columns {list(found.names())}")
            wrong = {c: (declared[c], found[c]) for c in declared.names()
                     if spark_type(declared[c]) != spark_type(found[c])}
            if wrong:
                raise SchemaError(f"the Spark table {name!r} stores {wrong} (declared, found) differently",
                                  argument="tables", fix="cast the columns in Spark to the declared types")
            # each column in the type dpframe holds it in (a decimal widened: :func:`held`)
            stored = {f.name: f.dataType for f in spark_frame.schema.fields}
            spark_frame = spark_frame.select(*[_name(c) if stored[c] == held(stored[c]) else
                                               _name(c).cast(held(stored[c])).alias(c) for c in declared.names()])
        self._frames[name] = spark_frame
        self._schemas[name] = declared

    def _as_declared(self, name: str, source: object, declared: pl.Schema) -> Any:
        """Spark's own reading of a path ``source`` where it means the declared values (None: ship the rows).

        That is where Spark reads it at all (not a UUID, a Float16, a TIME or a nanosecond timestamp),
        with the declared columns in the Spark types storing their declared types (:func:`spark_type`:
        not a date64 read as a date, a duration read as its integer count), and every value of it.
        """
        try:
            spark_frame = self._read(name, source)
            found = {} if spark_frame is None else {f.name: f.dataType for f in spark_frame.schema.fields}
        except SchemaError:      # Spark cannot read the file (a UUID, a Float16, a TIME column ...)
            return None
        if spark_frame is None or any(c not in found or held(spark_type(t)) != held(found[c])
                                          for c, t in declared.items()):
            return None
        return spark_frame if _reads_every_value(spark_frame) else None

    def _read_as(self, name: str, source: object, declared: pl.Schema) -> dict[str, str]:
        """How Spark reads each declared column of a path ``source`` (for errors; empty where it cannot)."""
        try:
            spark_frame = self._read(name, source)
        except SchemaError:
            return {}
        return {} if spark_frame is None else {f.name: f.dataType.simpleString() for f in spark_frame.schema.fields
                                               if f.name in declared}

    def supports(self, node: RowNode) -> str | None:
        """Why ``node`` cannot run here (None: it can): DuckDB-only SQL, or a column type Spark cannot store.

        A derived column of a type :func:`spark_type` has no Spark type for (a Duration, a Time, a Null,
        an Int128, a list) would fail the query after its charge.
        """
        if isinstance(node, SQLFilter | SQLProject) and node.polars is None:
            return node.polars_unavailable or "this SQL has no Polars form"
        for name, dtype in node.schema.items():
            if spark_type(dtype) is None:
                return (f"its column {name!r} has type {dtype}, which the Spark backend cannot store; cast it "
                        "(e.g. a duration to Int64 with .dt.total_microseconds(), pl.lit(None, dtype=pl.Int64)) "
                        "or run the query on another backend")
        return None

    # ------------------------------------------------------------------------------------ row nodes
    def _node(self, frame: Any, node: RowNode, schema: pl.Schema, seed: int) -> Any:
        F = self._sql.functions
        if isinstance(node, Sample):
            if node.rate >= 1:
                return frame
            threshold = min(int(node.rate * 2**64), 2**64 - 1)
            key = _name(node.unit) if node.unit is not None else F.monotonically_increasing_id()
            h = F.xxhash64(F.lit((seed ^ _SALT) & _SEED_MASK), key, key.isNull())
            # unsigned h < threshold  ⇔  (h XOR 2^63) < threshold − 2^63 as signed 64-bit integers
            return frame.filter(h.bitwiseXOR(F.lit(-(2**63))) < F.lit(threshold - 2**63))
        if isinstance(node, PublicJoin):
            renamed = {c: f"__dp_k{i}" for i, c in enumerate(node.right_on)}
            public = node.data.select([*node.right_on, *node.added]).rename(renamed)
            sschema = _spark_schema(public.schema, f"public table {node.table!r}")
            right = F.broadcast(self.spark.createDataFrame(_encode(public, sschema), schema=sschema))
            on = functools.reduce(lambda a, b: a & b, [_name(a) == right[renamed[b]]
                                                       for a, b in zip(node.left_on, node.right_on)])
            joined = frame.join(right, on=on, how="left" if node.how == "left" else "inner")
            return joined.select(*[_name(c) for c in node.output_schema.names()])
        if isinstance(node, SQLFilter | SQLProject) and node.polars is None:
            raise PlanError(f"{node.describe()} cannot run on the Spark backend", argument="backend",
                            fix="run it with backend='duckdb'")
        try:
            native = _native(node, schema)
        except _Untranslatable:
            return self._through_polars(frame, node, schema)
        if isinstance(node, Filter | SQLFilter):
            return frame.filter(native)
        if isinstance(node, WithColumns):
            frame = frame.withColumns(dict(native))
        else:
            frame = frame.select(*[column.alias(name) for name, column in native])
        return self._conform(frame, node.schema)

    def _conform(self, frame: Any, schema: pl.Schema) -> Any:
        """Cast columns whose Spark type is not the storage type of the node's declared Polars type."""
        have = {f.name: f.dataType for f in frame.schema.fields}
        wanted = {n: spark_type(t) for n, t in schema.items()}
        if all(have.get(n) == t for n, t in wanted.items()):
            return frame
        return frame.select(*[_name(n) if have.get(n) == t else _name(n).try_cast(t).alias(n)
                              for n, t in wanted.items()])

    def _through_polars(self, frame: Any, node: RowNode, schema: pl.Schema) -> Any:
        """Run the node's Polars expressions on the executors, one Arrow batch at a time."""
        kind, exprs = _polars_form(node)
        out = _spark_schema(node.schema, node.describe())
        run = functools.partial(_polars_batches, kind, exprs, dict(schema), out)
        return frame.mapInArrow(run, out)

    # ------------------------------------------------------------------------------------ statistics
    def bounded(self, request: StatisticsRequest) -> tuple[Any, pl.Schema]:
        """The row-level plan with contribution bounding applied (a lazy Spark DataFrame) and its schema."""
        F = self._sql.functions
        frame, schema = self._frames[request.table], self._schemas[request.table]
        seed = request.seed & _SEED_MASK
        for position, node in enumerate(request.row_nodes):   # each Sample node: its own derived seed
            frame, schema = self._node(frame, node, schema, node_seed(request.seed, position)), node.schema
        unit, by = request.unit, list(request.by)
        if unit.column is None:
            return frame, schema
        if request.keys is not None:  # before bounding: rows of other keys use none of a unit's quota
            keys = self._keys(request.keys)
            on = functools.reduce(lambda a, b: a & b, [_name(c).eqNullSafe(keys[f"__dp_key{i}"])
                                                       for i, c in enumerate(by)])
            frame = frame.join(keys, on=on, how="left_semi")
        u = unit.column
        frame = frame.filter(_name(u).isNotNull())
        if not request.contribution_bounding:
            return frame, schema
        unit_and_keys = list(dict.fromkeys([u, *by]))
        if by and unit.max_groups is not None and unit.max_groups < unit.max_rows:
            pairs = frame.select(*[_name(c) for c in unit_and_keys]).distinct()
            window = self._order(u, self._hash(unit_and_keys, seed), unit_and_keys)
            pairs = pairs.withColumn(_RANK, F.row_number().over(window))
            chosen = pairs.filter(F.col(_RANK) <= unit.max_groups).drop(_RANK)
            chosen = chosen.select(*[_name(c).alias(f"__dp_p{i}") for i, c in enumerate(unit_and_keys)])
            on = functools.reduce(lambda a, b: a & b, [_name(c).eqNullSafe(chosen[f"__dp_p{i}"])
                                                       for i, c in enumerate(unit_and_keys)])
            frame = frame.join(chosen, on=on, how="left_semi")
        used = sorted({s.column for s in request.statistics if s.column is not None} - set(unit_and_keys))
        columns, row_seed = [*unit_and_keys, *used], seed ^ 0x5DEECE66D
        # One shuffle (by unit); within it rows sorted by (hash, values), so that a row's copies (rows equal in
        # every hashed column) are its ties, numbered 0, 1, ... by row number − rank; then sorted again by
        # the row's key: its hash, or for copy j ≥ 1 the hash of (hash, j) (copies sharing one place would
        # be kept or dropped together: a choice uniform over distinct rows, not rows). Which copy gets which
        # number does not matter (copies are interchangeable): what a unit keeps depends only on its
        # multiset of rows and the seed.
        h, copy = F.col(_HASH), F.col(_COPY)
        order = self._order(u, h, columns)
        frame = (frame.withColumn(_HASH, self._hash(columns, row_seed))
                 .withColumn(_COPY, F.row_number().over(order) - F.rank().over(order)))
        key = F.when(copy == 0, h).otherwise(F.xxhash64(F.lit(row_seed), h, copy))
        frame = frame.withColumn(_RANK, F.row_number().over(self._order(u, key, [*columns, _COPY])))
        return frame.filter(F.col(_RANK) <= unit.max_rows).drop(_RANK, _COPY, _HASH), schema

    def _hash(self, columns: list[str], seed: int) -> Any:
        """A seeded 64-bit hash of a row's values in ``columns``.

        Each column is hashed with its null flag (xxhash64 skips nulls, so (1, null) and (null, 1) would
        otherwise always hash alike).
        """
        F = self._sql.functions
        return F.xxhash64(F.lit(seed), *[item for c in columns for item in (_name(c), _name(c).isNull())])

    def _order(self, unit: str, key: Any, ties: list[str]) -> Any:
        """Rows of one unit ordered by ``key`` (a seeded hash), ties by the values of ``ties`` themselves.

        The values as secondary keys make the order total on rows that differ in ``ties``, so it never
        depends on the order Spark happens to read rows in.
        """
        return self._sql.Window.partitionBy(_name(unit)).orderBy(key, *[_name(c).asc_nulls_first() for c in ties])

    def _keys(self, keys: pl.DataFrame) -> Any:
        renamed = keys.rename({c: f"__dp_key{i}" for i, c in enumerate(keys.columns)})
        sschema = _spark_schema(renamed.schema, "public keys")
        return self._sql.functions.broadcast(self.spark.createDataFrame(_encode(renamed, sschema), schema=sschema))

    def statistics(self, request: StatisticsRequest) -> pl.DataFrame:
        """One Spark job: row nodes, keys, bounding, aggregation; only the statistics reach the driver.

        Sums are 64-bit ``sum``s; only if a group's row count allows one to leave 64 bits
        (:func:`~dpframe.backends.base.int64_sums_are_exact`), or Spark's ANSI mode reports an overflow,
        does a second job sum in DECIMAL(38,0). Either way a ``fixed_sum`` is exact, then clipped to
        ±SUM_LIMIT. A partial
        ``sorted`` statistic (quantiles) adds a first, small job: a sample placing its rank windows
        (:meth:`_windows`); with bounding the bounded rows are then cached for the two reads, under a plan no
        other backend builds (a column holding this backend's random scope): Spark's cache is shared by every
        session of a SparkSession and keyed by the plan, and two dpframe sessions seeded alike over one DataFrame
        built the same one, so one read the other's cached rows while it held them (``test_review55f.py``).
        """
        from pyspark.errors import ArithmeticException  # (installed: the backend was made)

        frame, schema = self.bounded(request)
        near = [s for s in request.statistics if s.kind == "sorted" and s.near]
        cached = bool(near) and request.unit.column is not None and request.contribution_bounding
        if cached:   # Spark's cache is keyed by the plan, for every session of the SparkSession: this one's own
            frame = frame.withColumn(_SCOPE, self._sql.functions.lit(self._scope)).persist()
        try:
            windows = self._windows(frame, schema, request, near) if near else None
            bins = [] if request.by else adjacent_bins(request.statistics)
            binned = {s for b in bins for s in b.stats}
            types: dict[str, pl.DataType] = {s.key: pl.List(pl.Int64) if s.kind in LIST_KINDS else pl.Int64()
                                             for s in request.statistics if s not in binned}
            sums = [s.key for s in request.statistics if s.kind == "fixed_sum"]
            try:
                result = self._aggregate_all(frame, schema, request, types, windows, wide=False)
                most = result.get_column(_ROWS).max() if sums else 0
                exact = not sums or int64_sums_are_exact(
                    [s for s in request.statistics if s.kind == "fixed_sum"], most if isinstance(most, int) else 0)
            except ArithmeticException:   # ANSI mode: a 64-bit sum overflowed
                exact = False
            if not exact:
                result = self._aggregate_all(frame, schema, request, types, windows, wide=True)
            if bins:
                counted = [self._binned(frame, schema, b) for b in bins]
                result = pl.concat([result, *counted] if result.width else counted, how="horizontal")
        finally:
            if cached:
                frame.unpersist()
        result = result.with_columns([pl.col(k).clip(-SUM_LIMIT, SUM_LIMIT) for k in sums])
        by = list(request.by)
        names = [s.key for s in request.statistics]
        if by and request.keys is not None:
            result = result.with_columns([pl.col(b).cast(request.keys.schema[b]) for b in by])
            result = (request.keys.join(result, on=by, how="left", nulls_equal=True)
                      .with_columns([pl.col(n).fill_null(pl.lit([], dtype=t) if isinstance(t, pl.List) else 0)
                                     for n, t in types.items()])
                      .with_columns(fill_missing_groups(windows.near if windows is not None else [])))
        if by:
            result = result.sort(by, nulls_last=False)
        return finish_lists(result, windows).select([*by, *names])

    def _windows(self, frame: Any, schema: pl.Schema, request: StatisticsRequest,
                 near: list[Statistic]) -> RankWindows | None:
        """Place the rank windows of the partial ``sorted`` statistics from a sample (one row in the stride)."""
        F = self._sql.functions
        by = list(request.by)
        stride = SAMPLE_STRIDE if by else SINGLE_STRIDE
        codes = [F.expr(f"collect_list({code(s, schema)}) AS {ident(code_column(i))}") for i, s in enumerate(near)]
        sample = frame.sample(fraction=1 / stride, seed=request.seed & 0x7FFFFFFF)
        sampled = sample.groupBy(*[_name(b) for b in by]).agg(*codes) if by else sample.agg(*codes)
        types = {**{b: schema[b] for b in by}, **{code_column(i): pl.List(pl.Int64) for i in range(len(near))}}
        return RankWindows.placed(_decode(sampled.toArrow(), types), near, by, stride)

    def _binned(self, frame: Any, schema: pl.Schema, bins: Bins) -> pl.DataFrame:
        """A grid's adjacent bins counted in one job: each row's bin by :meth:`Bins.spark_search`, one group-by."""
        F = self._sql.functions
        padded, search = bins.spark_search(f"CAST({ident(bins.column)} AS DOUBLE)", "__dp_edges")
        edges = F.broadcast(self.spark.createDataFrame([(padded,)], "__dp_edges array<double>"))
        rows = frame.where(F.expr(present(bins.column, schema))).select(_name(bins.column)).crossJoin(edges)
        found = rows.selectExpr(*search).groupBy(BIN).agg(F.count(F.lit(1)).alias(COUNT))
        return bins.counted(_decode(found.toArrow(), {BIN: pl.Int64(), COUNT: pl.Int64()}))

    def _aggregate_all(self, frame: Any, schema: pl.Schema, request: StatisticsRequest,
                       types: dict[str, pl.DataType], windows: RankWindows | None, wide: bool) -> pl.DataFrame:
        """One job for the statistics in ``types`` (with those of ``windows``); an empty frame when none."""
        F = self._sql.functions
        by = list(request.by)
        near = windows.near if windows is not None else []
        aggregates = [F.expr(aggregate(s, request.unit.column, schema, wide))
                      for s in request.statistics if s not in near and s.key in types]
        if not aggregates and not near and not by:
            return pl.DataFrame()
        helpers: dict[str, pl.DataType] = {}
        if not wide and any(s.kind == "fixed_sum" for s in request.statistics):   # checks the 64-bit sums
            aggregates.append(F.expr(f"count(1) AS {ident(_ROWS)}"))
            helpers[_ROWS] = pl.Int64()
        if windows is not None and near:
            if by:    # groups the sample missed list all their codes
                seen = windows.sampled.with_columns(pl.lit(True).alias("__dp_seen"))
                seen = seen.rename({b: f"__dp_key{i}" for i, b in enumerate(by)})
                sschema = _spark_schema(seen.schema, "sampled groups")
                right = F.broadcast(self.spark.createDataFrame(_encode(seen, sschema), schema=sschema))
                on = functools.reduce(lambda a, b: a & b, [_name(b).eqNullSafe(right[f"__dp_key{i}"])
                                                           for i, b in enumerate(by)])
                frame = frame.join(right, on=on, how="left").drop(*[f"__dp_key{i}" for i in range(len(by))])
            for s in near:
                ends = [(int(lo), int(hi)) for lo, hi in windows.ends[windows.stats.index(s)]]
                aggregates += [F.expr(a) for a in window_aggregates(s, schema, ends, bool(by))]
                helpers |= {f"{s.key}#n": pl.Int64(), **{f"{s.key}#below{j}": pl.Int64() for j in range(len(s.near))}}
        out = frame.groupBy(*[_name(b) for b in by]).agg(*aggregates) if by else frame.agg(*aggregates)
        return _decode(out.toArrow(), {**{b: schema[b] for b in by}, **types, **helpers})
