"""A child process for the ledger fault tests (run with ``sys.executable``, not collected by pytest).

Usage: ``python ledger_child.py LEDGER MODE [ARG]``

* ``pause POINT``: run one complete query (ε = 1/4), then a second one (ε = 1/2) that stops at POINT,
  prints ``PAUSED`` and sleeps until killed. POINTs, in execution order:
  ``in_reserve`` (inside the reserve transaction: the charge row is inserted, COMMIT not yet run),
  ``after_reserve`` (the reservation is committed, no private row read yet), ``in_run`` (inside the
  backend, reading private rows), ``before_commit`` (the noisy result exists, not yet marked committed),
  ``after_commit`` (committed, about to be returned).
* ``loop N``: run queries of ε = 1/N forever, printing ``released`` after each result is returned.
* ``race N BARRIER``: wait for the file BARRIER to exist, then try N queries of (ε = 1/8, δ = 10⁻⁶)
  (private group keys, so δ is
  charged) and print how many were admitted.
* ``spill N``: commit N charges of ε = 1/4 on a bare ledger (total ε = 1000), then reserve ε = 1/2 with a
  300 kB query text and a 10-page cache, so SQLite spills pages to the main file and syncs the journal
  (a *hot* journal) before COMMIT; pause at COMMIT (``PAUSED``) until killed.
* ``legacy_wal N``: an older dpframe's ledger: the same tables in WAL mode, N committed charges of ε = 1/4
  written by plain SQLite; print ``PAUSED`` and sleep until killed (the charges are only in the ``-wal``).
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl

import dpframe as dp
from dpframe.accounting.ledger import Ledger
from dpframe.backends.polars import PolarsBackend

DATA = pl.DataFrame({"u": [1, 2, 3, 4], "g": ["a", "a", "b", "b"], "x": [1.0, 2.0, 3.0, 4.0]})
TOTAL = dp.ApproxDP(2, 1e-5)


def pause() -> None:
    print("PAUSED", flush=True)
    time.sleep(600)


def wrap(cls: type, name: str, *, before: bool) -> None:
    original = getattr(cls, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before:
            pause()
        out = original(*args, **kwargs)
        if not before:
            pause()
        return out
    setattr(cls, name, wrapped)


def instrument(point: str) -> None:
    if point == "in_reserve":
        original = Ledger.reserve

        def reserve(self: Ledger, *args: Any) -> int:
            self._db.set_trace_callback(lambda sql: pause() if sql.strip().upper() == "COMMIT" else None)
            return original(self, *args)
        Ledger.reserve = reserve  # type: ignore[method-assign]
    elif point == "after_reserve":
        wrap(Ledger, "reserve", before=False)
    elif point == "in_run":
        wrap(PolarsBackend, "statistics", before=True)
    elif point == "before_commit":
        wrap(Ledger, "commit", before=True)
    elif point == "after_commit":
        wrap(Ledger, "commit", before=False)
    else:
        raise SystemExit(f"unknown point {point}")


def bare(path: str, mode: str, charges: int) -> None:
    from dpframe.accounting import BasicAccountant

    if mode == "spill":
        led = Ledger(path, BasicAccountant(dp.PureDP(1000)))
        for i in range(charges):
            led.commit(led.reserve(dp.PureDP(Fraction(1, 4)), f"query {i} " + "q" * 300, "aggregates"))
        led._db.execute("PRAGMA cache_size=10")
        led._db.set_trace_callback(lambda sql: pause() if sql.strip().upper() == "COMMIT" else None)
        led.reserve(dp.PureDP(Fraction(1, 2)), "big" * 100_000, "aggregates")
        return
    import sqlite3

    from dpframe.accounting.ledger import _SCHEMA, encode

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")       # keep every commit in the -wal file
    db.executescript(_SCHEMA)
    db.executemany("INSERT INTO meta VALUES (?, ?)", [("total", encode(dp.PureDP(1000))), ("accountant", "basic")])
    for i in range(charges):
        db.execute("INSERT INTO charges (created, status, query, mechanisms, cost) VALUES (?, ?, ?, ?, ?)",
                   (time.time(), "committed", f"query {i}", "aggregates", encode(dp.PureDP(Fraction(1, 4)))))
    pause()


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    if mode in ("spill", "legacy_wal"):
        bare(path, mode, int(sys.argv[3]))
        return
    sess = dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u"), budget=TOTAL, ledger=path)
    query = sess.table("t").agg(dp.len(), dp.sum("x", bounds=(0, 5)))
    if mode == "pause":
        query.collect(dp.PureDP(0.25))
        instrument(sys.argv[3])
        query.collect(dp.PureDP(0.5))
        print("NOT PAUSED", flush=True)
    elif mode == "loop":
        share = dp.PureDP(Fraction(1, int(sys.argv[3])))
        while True:
            query.collect(share)
            print("released", flush=True)
    elif mode == "race":
        tries, barrier = int(sys.argv[3]), Path(sys.argv[4])
        while not barrier.exists():
            time.sleep(0.001)
        admitted = 0
        grouped = sess.table("t").group_by("g").agg(dp.len())    # private keys: the cost includes δ
        for _ in range(tries):
            try:
                grouped.collect(dp.ApproxDP(0.125, 1e-6))
                admitted += 1
            except dp.BudgetExceededError:
                pass
        print(admitted, flush=True)


if __name__ == "__main__":
    main()
