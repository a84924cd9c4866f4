"""Paying only for what you learn: how many threshold queries one budget answers.

Scenario A (issue 7): a 1M-row table, 1,000 threshold queries "count of group g ≥ 3000?", 5% of them
above. Every method gets the same total ε = 10 (δ = 1e-6) and answers queries until its budget (or
its stream) runs out: plain composition (a noisy count per query at ε = 0.1), sparse vector (restarted
when it halts), sparse vector with the output-DP refund of unused positives, and a target-charging
channel (NotPrior tests at ε = 0.1, τ = 60). Reported: queries answered, wrong answers, answers per
unit ε and the ratio to plain composition, and the wall time per answer as a ratio to the plain
(non-private) Polars query.

Scenario B ("pay only for change"): the same 100 queries re-run on 20 slightly updated versions of the
table (1% of groups cross the threshold each time). The privacy unit is a person id shared by all
versions (``PrivacyUnit("person", max_rows=1)``: one row per person per version), so a person present
in every version is protected across the whole run. The channel's tests use the previous answer as
their NotPrior target, so only changes are charged; the plain baseline actually runs noisy counts at
ε = 0.1 over the same queries until the budget refuses.

Run: ``python bench/interactive.py`` (about a minute; ``--quick`` uses 100k rows).
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl

import dpframe as dp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine_info  # noqa: E402  (bench/ is not a package)

ROWS = 100_000 if "--quick" in sys.argv else 1_000_000
GROUPS, ABOVE, THRESHOLD, TOTAL = 1_000, 50, 3_000 * ROWS // 1_000_000, 10


def table(rng: np.random.Generator, big: set[int]) -> pl.DataFrame:
    sizes = np.full(GROUPS, 0)
    for g in range(GROUPS):
        sizes[g] = 5 * THRESHOLD // 3 if g in big else THRESHOLD // 4
    sizes[0] += ROWS - sizes.sum()          # pad to the row count (group 0 is big)
    g = np.repeat(np.arange(GROUPS), sizes)
    return pl.DataFrame({"g": rng.permutation(g)})


def session(data: pl.DataFrame) -> dp.Session:
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(TOTAL, 1e-6), seed=7)


def q(sess: dp.Session, g: int) -> dp.Query:
    return sess.table("t").filter(pl.col("g") == g).agg(dp.len())


def plain(data: pl.DataFrame, truth: list[bool]) -> tuple[int, int]:
    sess, answered, wrong = session(data), 0, 0
    for g in range(GROUPS):
        try:
            v = q(sess, g).collect(dp.PureDP(Fraction(1, 10)))["len"][0]
        except dp.BudgetExceededError:
            break
        answered += 1
        wrong += (v >= THRESHOLD) != truth[g]
    return answered, wrong


def svt(data: pl.DataFrame, truth: list[bool], refund: bool) -> tuple[int, int, float]:
    sess, answered, wrong, g = session(data), 0, 0, 0
    while g < GROUPS:
        try:
            sv = sess.sparse_vector(threshold=THRESHOLD, max_positives=60, budget=dp.PureDP(2), refund=refund)
        except dp.BudgetExceededError:
            break
        while g < GROUPS and not sv.closed:
            wrong += sv.test(q(sess, g)) != truth[g]
            answered, g = answered + 1, g + 1
        sv.close()
    return answered, wrong, float(sess.spent().epsilon)  # type: ignore[attr-defined]


def tct(data: pl.DataFrame, truth: list[bool]) -> tuple[int, int, float]:
    sess, answered, wrong = session(data), 0, 0
    with sess.target_charging(epsilon=0.1, max_hits=60, delta=1e-6) as ch:
        for g in range(GROUPS):
            if ch.closed:
                break
            wrong += ch.test(q(sess, g), threshold=THRESHOLD) != truth[g]
            answered += 1
        reserved = float(ch.cost.epsilon)  # type: ignore[attr-defined]
    return answered, wrong, reserved


def main() -> None:
    rng = np.random.default_rng(0)
    big = set(rng.choice(GROUPS, ABOVE, replace=False).tolist()) | {0}
    data = table(rng, big)
    truth = [g in big for g in range(GROUPS)]
    t0 = time.perf_counter()
    heights = [data.filter(pl.col("g") == g).height for g in range(100)]
    assert sum(heights) > 0
    plain_polars = (time.perf_counter() - t0) / 100
    rows = []
    for name, fn in (("plain composition (ε=0.1 each)", lambda: (*plain(data, truth), TOTAL)),
                     ("sparse vector (c=60, ε=2 per stream)", lambda: svt(data, truth, False)),
                     ("sparse vector + output-DP refund", lambda: svt(data, truth, True)),
                     ("target-charging channel (ε=0.1/call, τ=60)", lambda: tct(data, truth))):
        t0 = time.perf_counter()
        answered, wrong, eps = fn()
        per = (time.perf_counter() - t0) / max(answered, 1)
        rows.append((name, answered, wrong, answered / eps, per / plain_polars))
    base = rows[0][3]
    print(f"machine: {machine_info()}\n")
    print(f"Scenario A: {GROUPS} threshold queries on {ROWS:,} rows, {ABOVE / GROUPS:.0%} above; total ε = {TOTAL}")
    print("| method | answered | wrong | answers per ε spent | × plain | time / answer vs Polars |")
    print("|---|---|---|---|---|---|")
    for name, answered, wrong, per_eps, t in rows:
        print(f"| {name} | {answered} | {wrong} | {per_eps:.1f} | {per_eps / base:.1f}× | {t:.1f}× |")

    scenario_b(rng, big)


def versioned_session(tables: list[pl.DataFrame], seed: int) -> dp.Session:
    """All versions in one session, protected per person across versions."""
    return dp.Session({f"t{v}": t for v, t in enumerate(tables)}, privacy_unit=dp.PrivacyUnit("person", max_rows=1),
                      budget=dp.ApproxDP(TOTAL, 1e-6), seed=seed)


def vq(sess: dp.Session, v: int, g: int) -> dp.Query:
    return sess.table(f"t{v}").filter(pl.col("g") == g).agg(dp.len())


def scenario_b(rng: np.random.Generator, big: set[int]) -> None:
    """Pay only for change over 20 refreshes of the same 100 queries (see the module docstring)."""
    versions, queries = 20, 100
    state = [g in big for g in range(queries)]
    truths, tables, changes = [], [], 0
    for v in range(versions):
        if v:
            for g in rng.choice(np.arange(1, queries), 1, replace=False):
                state[g] = not state[g]
                changes += 1
        truths.append(list(state))
        data = table(rng, {g for g in range(queries) if state[g]} | {0})
        tables.append(data.with_columns(person=pl.int_range(0, data.height)))   # person i is in every version

    plain_sess, plain_answered, plain_wrong = versioned_session(tables, 5), 0, 0
    try:
        for v in range(versions):
            for g in range(queries):
                value = vq(plain_sess, v, g).collect(dp.PureDP(Fraction(1, 10)))["len"][0]
                plain_wrong += (value >= THRESHOLD) != truths[v][g]
                plain_answered += 1
    except dp.BudgetExceededError:
        pass
    plain_eps = float(plain_sess.spent().epsilon)  # type: ignore[attr-defined]

    sess, answered, wrong = versioned_session(tables, 3), 0, 0
    prior: list[bool] = [False] * queries
    with sess.target_charging(epsilon=0.1, max_hits=40, delta=1e-6) as ch:
        for v in range(versions):
            for g in range(queries):
                if ch.closed:
                    break
                prior[g] = ch.test(vq(sess, v, g), threshold=THRESHOLD, prior=prior[g])
                wrong += prior[g] != truths[v][g]
                answered += 1
        reserved = float(ch.cost.epsilon)  # type: ignore[attr-defined]
        status = ch.status()
    base = plain_answered / plain_eps
    print(f"\nScenario B: {queries} queries × {versions} table versions ({changes} answers change), "
          "privacy unit: a person in every version")
    print(f"  plain composition (ε=0.1 each, run): {plain_answered} answers ({plain_wrong} wrong) for "
          f"ε={plain_eps:g} → {base:.1f} per ε")
    print(f"  TCT pay-only-for-change: {answered} answers ({wrong} wrong) for reserved ε={reserved:.2f} ({status}) → "
          f"{answered / reserved:.1f} per ε = {answered / reserved / base:.1f}× plain")

if __name__ == "__main__":
    main()
