"""Fixtures shared by every test package: Spark in local mode (``local[2]``), one SparkSession per test process.

Skipped, with the reason shown in the summary (``pytest -rs``), when PySpark or Java is unavailable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


def spark_unavailable() -> str | None:
    """Why a local SparkSession cannot start here (None if it can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "PySpark is not installed (pip install 'dpframe[spark]')"
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    if java is None or subprocess.run([java, "-version"], capture_output=True).returncode != 0:
        return "Java is not available (the Spark backend tests need Java 17+)"
    return None


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    reason = spark_unavailable()
    if reason is not None:
        pytest.skip(f"Spark backend: {reason}")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("dpframe-tests")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2").config("spark.driver.memory", "1g")
             # Tiny test tables: compiling generated code would cost more than it saves; so would the JVM's
             # optimizing JIT (C2) and a parallel GC: C1 and the serial GC halve the JVM's CPU time here.
             .config("spark.sql.codegen.wholeStage", "false").config("spark.sql.adaptive.enabled", "false")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from dpframe.backends.spark import quiet_task_failures

    quiet_task_failures(spark)   # as the backend does on taking it: tests read metrics_reachable before one does
    yield spark
    spark.stop()


def uses_spark(item: pytest.Item) -> bool:
    """Whether a test may start its process's JVM: it asks for ``spark_session``, is parametrized on the
    ``"spark"`` backend, or names Spark (``..._on_spark``, ``TestSpark``)."""
    params = getattr(item, "callspec", None)
    return ("spark_session" in getattr(item, "fixturenames", ()) or "spark" in item.nodeid.lower()
            or (params is not None and any(isinstance(v, str) and v == "spark" for v in params.params.values())))


#: Test functions of the default run with cases that take 2 s or more of CPU (measured at stop 43): they run
#: early, so the run does not end on one of them while the other worker idles. A stale entry only costs order.
LONG = frozenset({
    "tests/audit/test_audit_registry.py::test_mechanism_passes_audit",
    "tests/audit/test_audit_registry.py::test_audit_catches_a_broken_refund",
    "tests/audit/test_audit_registry.py::test_session_collect_catches_halved_noise",
    "tests/adversarial/test_distinguishers.py::test_entry_point",
    "tests/adversarial/test_distinguishers.py::test_attack_does_not_kill_the_process",
    "tests/adversarial/test_distinguishers.py::test_under_noised_mechanism_is_caught",
    "tests/adversarial/test_review35b.py::test_queries_streams_and_ledger_reads_at_once_never_exceed_the_total",
    "tests/adversarial/test_sql_composed_oracle.py::test_a_sql_query_behaves_alike_on_neighbouring_datasets",
    "tests/adversarial/test_interactive_oracle.py::test_a_sequence_on_tuned_frames_behaves_alike_on_neighbouring_datasets",
    "tests/test_docs_snippets.py::test_page_snippets_run",
    "tests/test_examples.py::test_example_runs",
    "tests/interactive/test_svt.py::test_implementation_matches_exact_law",
    "tests/interactive/test_svt_gaussian.py::test_gaussian_stream_law_matches_the_declared_noise",
    "tests/accounting/test_extreme_inputs.py::test_coarsened_pld_of_large_epsilon_mechanisms_is_sound",
    "tests/accounting/test_extreme_inputs.py::test_pld_memory_is_bounded_in_a_1_gib_process",
    "tests/accounting/test_fuzz_standalone.py::test_standalone_accountants_give_results_or_dpframe_errors",
    "tests/accounting/test_pld_soundness.py::test_discrete_gaussian_is_never_under_reported",
    "tests/ledger/test_ledger_faults.py::test_random_sigkills_never_lose_a_released_charge",
    "tests/ledger/test_ledger_faults.py::test_two_processes_racing_on_one_ledger_never_exceed_the_budget",
    "tests/topk/test_topk_regressions.py::test_signed_scores_over_keys_from_the_data_are_dp",
    "tests/learning/test_algorithms.py::test_listed_em_with_envelopes_matches_exact_pmf",
    "plugins/dpframe_histogram/tests/test_regression.py::TestRegressionFamily::test_neighbouring_audit",
})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark tests first, in their order, so one xdist worker runs them all and starts the only JVM;
    then the :data:`LONG` tests; then the rest, each group in collection order.

    Those that ask for ``spark_session`` come first, so the JVM starts with the fixture's options.

    ``--dist worksteal`` hands each worker a contiguous share of the collection, the first share to one
    worker, and a worker that runs out steals from the *tail* of another's queue: the head stays where it
    was sent. Spread over two workers, the Spark tests started two JVMs (each ~10 s of CPU to start, more
    to warm up: the default Spark tests took 114 s of CPU, JVMs included, in two processes, 73 s in one).
    With the long tests at the head, what is left to steal at the end is short tests.
    """
    items[:] = sorted(items, key=lambda item: (not uses_spark(item),
                                                "spark_session" not in getattr(item, "fixturenames", ()),
                                                item.nodeid.partition("[")[0] not in LONG))


class SparkStarts:
    """What a :class:`~dpframe.backends.spark.SparkBackend` does when no SparkSession is active, without Spark.

    ``backend()`` is a backend whose PySpark module is a stand-in: its ``SparkSession.builder`` records every
    ``config(key, value)`` in ``seen`` and its ``getOrCreate()`` returns ``created``; reading
    ``backend().spark`` runs the backend's own start-up code against them.
    """

    def __init__(self, created: object) -> None:
        self.created = created
        self.seen: list[tuple[str, str]] = []

    def backend(self) -> Any:
        from dpframe.backends.spark import SparkBackend

        starts = self

        class Builder:
            def config(self, key: str, value: str) -> Builder:
                starts.seen.append((key, value))
                return self

            def getOrCreate(self) -> object:  # noqa: N802 - PySpark's name
                return starts.created

        class FakeSparkSession:
            builder = Builder()

            @staticmethod
            def getActiveSession() -> None:  # noqa: N802 - PySpark's name
                return None

        b = SparkBackend.__new__(SparkBackend)
        b._sql, b._spark = type("FakeSql", (), {"SparkSession": FakeSparkSession}), None
        return b


@pytest.fixture
def spark_starts() -> type[SparkStarts]:
    """:class:`SparkStarts`, for tests of how the Spark backend starts its own SparkSession (no Spark needed)."""
    return SparkStarts


@pytest.fixture(scope="session")
def tls_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files (made with the openssl command).

    For the remote sessions' TLS tests (``dp.Server(..., tls=)``); skipped where openssl is missing.
    """
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@dataclass(frozen=True)
class Hold:
    """One wait of a padded ``dp.Server`` before it lets a reply (or a question) go, as the server computed it: tests
    of ``pad`` check the schedule the server set, which holds under any machine load, not how late the machine ran.

    ``began`` is when the request's (or step's) work began, ``entered`` when the server's hold was called (after the
    work), ``asked`` when it waited, ``waited`` the timeout it waited for, ``left`` when it let the reply go (all
    ``time.monotonic()``). The server reads its clock between ``entered`` and ``asked``.
    """

    began: float
    pad: float
    entered: float
    asked: float
    waited: float
    left: float

    def period(self) -> float | None:
        """When the reply was scheduled to leave, in seconds after ``began``, if that is the first of pad, 2·pad,
        4·pad, ... ≥ the work's time (what the server's clock read of it: between ``entered`` and ``asked``), and the
        server waited for it; ``None`` otherwise (a schedule that shows the work's time finer than a period)."""
        from dpframe.remote.server import reply_time

        target = self.asked - self.began + self.waited         # the schedule, read by our later clock: ≥ the server's
        for period in (reply_time(self.entered - self.began, self.pad), reply_time(self.asked - self.began, self.pad)):
            if target - (self.asked - self.entered) - 1e-6 <= period <= target + 1e-6 \
                    and self.left - self.began >= period - 1e-3:
                return period
        return None


@pytest.fixture
def padded_holds(monkeypatch: pytest.MonkeyPatch) -> list[Hold]:
    """Every :class:`Hold` a ``dp.Server`` made in this test, in order (each server's close event records the
    timeout its padded hold waits for; nothing else waits on it with a timeout)."""
    from dpframe.remote import server as server_module

    holds: list[Hold] = []
    lock = threading.Lock()
    context = threading.local()

    class Recorded(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            asked = time.monotonic()
            closed = super().wait(timeout)
            hold: tuple[float, float, float] | None = getattr(context, "hold", None)
            if timeout is not None and hold is not None:
                began, pad, entered = hold
                with lock:
                    holds.append(Hold(began, pad, entered, asked, timeout, time.monotonic()))
            return closed

    plain_init, plain_hold = server_module.Server.__init__, server_module.Server._hold

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        plain_init(self, *args, **kwargs)
        self._closed = Recorded()

    def hold(self: Any, arrived: float, pad: float) -> bool:
        context.hold = (arrived, pad, time.monotonic())
        try:
            return bool(plain_hold(self, arrived, pad))
        finally:
            context.hold = None

    monkeypatch.setattr(server_module.Server, "__init__", init)
    monkeypatch.setattr(server_module.Server, "_hold", hold)
    return holds


@pytest.fixture
def peak_memory() -> Callable[[Callable[[], object]], int]:
    """A function that runs a call (an exception it raises is kept from the test) and returns the peak of the Python
    memory it allocated, in bytes (``tracemalloc``): a measure of its work that machine load does not change, for
    tests that some input is refused before a large computation (a huge power of ten: ``10**400000`` alone is
    166 kB)."""
    import tracemalloc

    def peak(call: Callable[[], object]) -> int:
        tracemalloc.start()
        try:
            try:
                call()
            except Exception:       # noqa: BLE001 - the test checks what is raised separately
                pass
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    return peak
