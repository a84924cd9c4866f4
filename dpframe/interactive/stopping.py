"""Iterative releases that may stop early, charged by their stopping time (output DP).

Digest 002 §2.3 (Alg. 3, Lemma 11): an iteration of ε_i-DP steps whose stopping rule reads only the
released outputs has the output-DP spec "stopped after j steps → Σ_{i≤j} ε_i", δ = Σ δ_i = 0 here
(pure steps). The whole run's worst case is reserved before the first step, so it can never be cut
short by the budget halfway, and on stopping the charge is settled to the steps actually run (basic
composition; other sessions pay the worst case). With additive inner accounting this equals running
the steps as separate ledger rounds (the digest's "practical reading"); the tighter Thm 15 only pays
off with a non-additive inner accountant, which this module does not offer.

Example:
    >>> import polars as pl, dpframe as dp
    >>> sess = dp.Session({"t": pl.DataFrame({"x": list(range(100))})}, privacy_unit=dp.PrivacyUnit.row(),
    ...                   budget=dp.PureDP(1), seed=0)
    >>> steps = [sess.table("t").filter(pl.col("x") < b).agg(dp.len()) for b in (10, 50, 90)]
    >>> out = run_until(steps, dp.PureDP(0.25), stop=lambda results: results[-1]["len"][0] > 30)
    >>> len(out), sess.spent()
    (2, PureDP(epsilon=1/2))

"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

import polars as pl

from dpframe.budgets import make
from dpframe.errors import DPFrameError, PlanError
from dpframe.frame import Query
from dpframe.interactive.odp import OdpSpec, run_ex_post
from dpframe.interactive.svt import pure_epsilon


def run_until(steps: Sequence[Query], budget: object, stop: Callable[[list[pl.DataFrame]], bool]) -> list[pl.DataFrame]:
    """Collect ``steps`` in order at ``budget`` (pure ε each) until ``stop(results so far)`` is true.

    ``stop`` sees only released results. Returns the released results; charged for their number.
    """
    if isinstance(steps, str) or not isinstance(steps, Sequence) or not steps:
        raise DPFrameError("expected a non-empty list of queries", argument="steps", fix="pass [query1, ...]")
    if not all(type(s) is Query for s in steps) or len({id(s._session) for s in steps}) != 1:
        raise PlanError("every step must be an agg query of one session", argument="steps",
                        fix="build the steps from one session's tables")
    if not callable(stop):
        raise DPFrameError("must be a function of the released results", argument="stop", fix="pass stop=lambda r: ...")
    eps = pure_epsilon(budget)
    session = steps[0]._session
    plans = [s.plan(make("pure", eps)) for s in steps]          # validate all steps before anything is charged
    from dpframe.session import _dry_run

    for p in plans:
        _dry_run(p)
    cells = {str(j): j * eps for j in range(1, len(steps) + 1)}

    def run() -> list[pl.DataFrame]:
        results: list[pl.DataFrame] = []
        for query, plan in zip(steps, plans, strict=True):
            results.append(session._run(query.node, plan))
            if stop(results):
                break
        return results

    spec = OdpSpec(cells, Fraction(0), lambda results: str(len(results)))
    return run_ex_post(session, spec, f"run_until({len(steps)} steps)", "early stopping (output DP)", run)
