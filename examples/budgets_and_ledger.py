"""Budgets: zCDP accounting, exact conversions, a ledger file that outlives the session, and refusals."""

import tempfile
from pathlib import Path

import dpframe as dp

# Budgets are exact fractions; conversions are sound (and ε from zCDP is rounded up).
print("PureDP(1)       -> zCDP :", dp.PureDP(1).to_zcdp())  # ρ = ε²/2
print("ZCDP(1/2)       -> (ε,δ):", dp.ZCDP(0.5).to_approx(delta=1e-6))  # CKS20 conversion
print("0.1 + 0.2 is exact      :", dp.PureDP(0.1) + dp.PureDP(0.2))  # 3/10, not 0.30000000000000004

data = dp.datasets.visits(20_000)
unit = dp.PrivacyUnit("user_id", max_rows=10)

with tempfile.TemporaryDirectory() as tmp:
    ledger = Path(tmp) / "visits.ledger"  # SQLite file: every charge, durably

    sess = dp.Session({"visits": data}, privacy_unit=unit, budget=dp.ZCDP(0.5), ledger=ledger)
    q = sess.table("visits").agg(dp.len(), dp.mean("spend", bounds=(0, 500)))
    print("\nzCDP query (discrete Gaussian noise):")
    print(q.collect(budget=dp.ZCDP(0.1)))
    # A pure-ε budget is accepted too: Laplace noise, charged as ρ = ε²/2 = 0.125.
    print("cost of PureDP(0.5) in this session:", q.cost(budget=dp.PureDP(0.5)))
    q.collect(budget=dp.PureDP(0.5))
    print("spent:", sess.spent(), "=", sess.spent_as_approx(delta=1e-6), "(as ε, δ)")
    sess.close()

    # A new Session on the same ledger (a restart, another process) sees what was spent.
    again = dp.Session({"visits": data}, privacy_unit=unit, budget=dp.ZCDP(0.5), ledger=ledger)
    print("\nafter a restart: spent", again.spent(), "remaining", again.remaining())
    print(again.history().select("id", "status", "cost"))

    # Over budget: refused before any row is read, with the arithmetic done for you.
    try:
        again.table("visits").agg(dp.len()).collect(budget=dp.ZCDP(0.5))
    except dp.BudgetExceededError as e:
        print("\nrefused:", e)
        print(f"requested {e.requested} | remaining {e.remaining} | difference {e.difference}")
    print("still spent:", again.spent())  # nothing was charged for the refused query

    # A ledger belongs to one total budget: opening it with another one is an error.
    try:
        dp.Session({"visits": data}, privacy_unit=unit, budget=dp.ZCDP(5), ledger=ledger)
    except dp.LedgerError as e:
        print("\n" + str(e))
    again.close()
