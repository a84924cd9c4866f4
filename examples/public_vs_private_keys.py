"""Group-by keys: public (you list them) versus private (DP partition selection picks them).

Public keys are free information: every listed key gets a row, even one missing from the data, and
pure ε is enough. Private keys come from the data, so whether a key appears at all is a release:
dpframe keeps a key only if its noisy count of distinct users clears a threshold τ, which costs a δ.
"""

import polars as pl

import dpframe as dp

data = dp.datasets.visits(50_000)  # 25 cities, Zipf-popular: the last ones are rare
sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=5),
                  budget=dp.ApproxDP(epsilon=2.0, delta=1e-6))
visits = sess.table("visits")

# 1. Public keys: the analyst supplies them (from a public list, never from the private table).
public = visits.group_by("city", keys=["Amsterdam", "Oslo", "Zurich", "Atlantis"]).agg(dp.len())
print("public keys, pure ε=0.25 — one row per listed key (Atlantis is not in the data):")
print(public.collect(budget=dp.PureDP(0.25)))

# 2. Private keys: no keys= argument. Needs a budget with δ > 0.
private = visits.group_by("city").agg(dp.len())
try:
    private.cost(budget=dp.PureDP(0.25))  # cost() is free; it validates the plan
except dp.BudgetError as e:
    print("\nprivate keys with pure ε are refused before anything runs:\n ", e)

budget = dp.ApproxDP(epsilon=0.25, delta=1e-7)
notes = private.explain(budget=budget, format="json")["notes"]
print("\nexplain() says:", notes[0])  # the threshold τ, computed from ε, δ and max_rows only
released = private.collect(budget=budget)
print(f"private keys released {released.height} of 25 cities (rare ones may be suppressed):")
print(released.sort("len", descending=True).tail(5))

# 3. Several key columns: a dict gives all combinations; a DataFrame gives exactly its rows.
adults = visits.filter(pl.col("age") >= 18).with_columns(senior=pl.col("age") >= 65)
grid = adults.group_by("city", "senior", keys={"city": ["Berlin", "Porto"], "senior": [False, True]})
print("\ndict keys = cross product (2 cities × 2 age bands):")
print(grid.agg(dp.len(), dp.mean("spend", bounds=(0, 300))).collect(budget=dp.PureDP(0.5)))

print("\nspent:", sess.spent(), " remaining:", sess.remaining())
