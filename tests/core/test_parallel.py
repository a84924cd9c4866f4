"""dpframe.parallel.map_chunks: chunk order, the ``workers`` cap, nested calls, seeded sources stay serial."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from dpframe.noise import SeededRandomSource, SystemRandomSource
from dpframe.parallel import chunks, map_chunks


@pytest.mark.parametrize("threads", ["1", "2", "8"])
@pytest.mark.parametrize("workers", [None, 1, 2, 3, 64])
def test_results_come_in_chunk_order_each_chunk_once(threads: str, workers: int | None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPFRAME_THREADS", threads)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def fn(a: int, b: int) -> int:
        with lock:
            seen.append((a, b))
        return int(np.arange(a, b).sum())

    out = map_chunks(fn, 1_000, 37, workers=workers)
    parts = chunks(1_000, 37)
    assert out == [sum(range(a, b)) for a, b in parts]
    assert sorted(seen) == parts


def test_workers_caps_the_chunks_running_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 8 threads and ``workers=2``, never more than two chunks run at the same time (and two do)."""
    monkeypatch.setenv("DPFRAME_THREADS", "8")
    running, peak = 0, 0
    lock = threading.Lock()

    def fn(a: int, b: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return a

    assert map_chunks(fn, 16, 1, workers=2) == list(range(16))
    assert peak == 2
    assert map_chunks(fn, 16, 1, rng=SystemRandomSource(), workers=2) == list(range(16))


def test_a_seeded_source_runs_its_chunks_in_order_on_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPFRAME_THREADS", "8")
    caller = threading.get_ident()
    order: list[int] = []

    def fn(a: int, b: int) -> int:
        assert threading.get_ident() == caller
        order.append(a)
        return a

    map_chunks(fn, 10, 2, rng=SeededRandomSource(1), workers=4)
    assert order == [0, 2, 4, 6, 8]


def test_a_chunk_that_maps_chunks_itself_never_waits_on_a_full_pool() -> None:
    """Every pool thread busy in an outer chunk, each mapping inner chunks: the inner ones run inline.

    (A sorted-codes completion inside the exponential mechanism does this.) Were the inner chunks queued on
    the pool, the outer chunks would wait on them forever; run in a child process with a time limit.
    """
    code = textwrap.dedent("""
        import os, threading
        os.environ["DPFRAME_THREADS"] = "2"
        from dpframe.parallel import map_chunks
        gate = threading.Barrier(2)
        def outer(a, b):
            gate.wait(timeout=20)              # both pool threads are now busy here
            return sum(map_chunks(lambda c, d: d - c, 8, 1))
        assert map_chunks(outer, 2, 1) == [8, 8]
        assert map_chunks(outer, 2, 1, workers=2) == [8, 8]
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
