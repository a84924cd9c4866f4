"""Per-group numpy work on chunks of groups across a thread pool (numpy releases the GIL in its loops).

Polars parallelises the data side of a query by itself; what is left in Python — sorting each group's
codes, the exponential mechanism over thousands of groups — runs here on contiguous chunks of groups,
one task per chunk. Chunks are laid out by a fixed size, never by the number of cores, so the work each
chunk does (and, for seeded sources, the random stream it reads) does not depend on the machine.

Randomness: a task that draws needs a random source it may use from a worker thread. The OS CSPRNG
(:class:`~dpframe.noise.SystemRandomSource`, every private session's source) is safe to share; any
other source (seeded test sources, counting sources) is not assumed thread-safe, and its chunks then
run one after the other, in chunk order, on the calling thread — so a seeded run gives the same output
on every machine. The distribution is the same either way: chunks hold disjoint groups, and each group's
draws are independent of the others'.

``DPFRAME_THREADS`` (an integer ≥ 1) caps the pool; the default is the number of usable cores.

Example:
    >>> import numpy as np
    >>> chunks(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    >>> [int(x) for x in map_chunks(lambda a, b: np.arange(a, b).sum(), 10, 4)]
    [6, 22, 17]

"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from dpframe.noise import RandomSource, SystemRandomSource

__all__ = ["TASKS", "chunk_size", "chunks", "map_chunks", "threads"]

T = TypeVar("T")
_PREFIX = "dpframe-pool"


def threads() -> int:
    """Worker threads: ``DPFRAME_THREADS`` if set (≥ 1), else the usable cores.

    Example:
        >>> threads() >= 1
        True

    """
    env = os.environ.get("DPFRAME_THREADS", "")
    if env.strip().isdigit() and int(env) >= 1:
        return int(env)
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return len(usable) if usable else (os.cpu_count() or 1)


@functools.cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=_PREFIX)


def chunks(n: int, size: int) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of at most ``size`` items covering ``range(n)`` in order."""
    return [(a, min(a + size, n)) for a in range(0, n, max(1, size))]


TASKS = 32
"""At most this many chunks per call of :func:`chunk_size`: enough tasks to keep 16 cores busy, few enough that
each one's fixed Python dispatch stays small next to its numpy work."""


def chunk_size(n: int, least: int, tasks: int = TASKS) -> int:
    """A chunk size for ``n`` items: at least ``least``, and at most ``tasks`` chunks in all.

    A function of ``n`` alone, never of the machine (module docstring): many small groups get a few large
    chunks rather than thousands of tiny ones.

    Example:
        >>> chunk_size(1_000, 256), chunk_size(100_000, 256)
        (256, 3125)

    """
    return max(least, -(-n // tasks))


def map_chunks(fn: Callable[[int, int], T], n: int, size: int, rng: RandomSource | None = None, *,
               workers: int | None = None) -> list[T]:
    """``[fn(start, end) for each chunk]``, in chunk order; on the thread pool when it may be.

    ``rng``: the random source ``fn`` draws from, if any. Threads are used only when there is more
    than one chunk and more than one thread, and ``rng`` is None or the OS CSPRNG (module docstring).
    ``workers``: at most this many chunks run at once, each thread taking one contiguous run of chunks —
    for work that holds the GIL for much of its time (many small numpy calls), where more threads than
    that only queue for the GIL and each hand-over costs more than it frees. The chunks, and so a
    seeded run's stream, do not change with it.
    A call made from a pool thread (a chunk that itself maps chunks, such as a sorted-codes completion
    inside the exponential mechanism) runs its chunks on that thread: the pool's other threads may all
    be waiting on it.
    ``fn`` receives public values only: chunk boundaries (engine code; nothing public hands it data).
    """
    parts = chunks(n, size)
    active = min(threads(), len(parts), workers or len(parts))
    nested = threading.current_thread().name.startswith(_PREFIX)      # on the pool already: it may be full
    if active <= 1 or nested or not (rng is None or isinstance(rng, SystemRandomSource)):
        return [fn(a, b) for a, b in parts]
    if workers is None:
        return list(_pool(threads()).map(lambda ab: fn(*ab), parts))
    runs = [parts[len(parts) * i // active:len(parts) * (i + 1) // active] for i in range(active)]
    done = _pool(threads()).map(lambda run: [fn(a, b) for a, b in run], runs)
    return [out for run in done for out in run]
