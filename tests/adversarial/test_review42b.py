"""Review 42b: accounting completeness and consistency (items carried from review 41d), and the shared SQL database.

Scope:

* **One budget rule for every family** (:func:`dpframe.family.Releasable._planned`, ``docs/concepts.md``): a budget
  of the session's notion, or one that converts to it, is taken and the query is charged what its mechanisms use;
  one that cannot convert is a ``BudgetConversionError``, free. The learners (``interior_point``,
  ``learn_threshold``, ``learn_rectangle``) and the Gaussian sparse vector refused ``dp.ZCDP(rho, delta)`` in the
  sessions that take it (``zcdp``, ``rdp``, ``pld``) where ``agg`` charges its ρ; the robust median and stable
  top-k advised a budget the session refuses.
* **Refusals of a δ the session has not got**: ``BudgetExceededError``'s text, and the Rényi filter's reports
  (``spent()``, ``explain()``) before any charge.
* ``dpframe.budgets.convert``'s docstring example (run by the doctests).
* ``dpframe.sql.sandbox``: its module lock and a fork; a cursor holder filling the shared database.
* A sweep of the reports (``explain``, ``cost(diagnostics=True)``, ``history``, ``remaining``) against the ledger
  under every built-in accountant.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

_FORK = textwrap.dedent("""
    import os, sys, threading, time
    import polars as pl, dpframe as dp
    from dpframe.sql import sandbox

    sess = dp.Session({"t": pl.DataFrame({"x": [1.0, 2.0]})}, privacy_unit=dp.PrivacyUnit.row(),
                      budget=dp.PureDP(10), seed=0)
    sess.sql("SELECT COUNT(*) + 1 AS m FROM t ORDER BY m LIMIT 1").collect(dp.PureDP(1))   # both connections exist
    held, release = threading.Event(), threading.Event()

    def hold():
        with sandbox._LOCK:
            held.set()
            release.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait()
    pid = os.fork()
    if pid == 0:                                     # the child: what its first SQL query parses and post-processes on
        code = 1
        try:
            with sandbox._shared() as con:
                assert con.sql("SELECT 2").fetchall() == [(2,)]
            with sandbox.public_connection() as con:
                assert con.sql("SELECT 41 + 1").fetchall() == [(42,)]
            code = 0
        finally:
            os._exit(code)
    release.set()
    thread.join()
    deadline = time.time() + 30
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("exit", os.waitstatus_to_exitcode(status))
            sys.exit(0)
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("hung")
""")


def test_a_child_forked_while_another_thread_holds_the_sql_lock_runs_its_sql() -> None:
    """``os.fork`` copies only the forking thread: the module lock of ``dpframe.sql.sandbox``, held by another thread
    at the fork, stayed held in the child for ever, and the child's first SQL parse or post-processing waited on it
    without end. The child now gets a fresh lock (``os.register_at_fork``) and connections of its own. (A whole
    query cannot run in such a child anyway: Polars is not fork-safe — a ``collect`` in the child of a process that
    used Polars hangs in its thread pool — and a session's ledger refuses a forked process. The sandbox no longer
    adds a hang of its own.)"""
    out = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True, timeout=240)
    assert out.stdout.strip() == "exit 0", (out.stdout, out.stderr[-2000:])
