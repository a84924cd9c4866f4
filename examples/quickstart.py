"""The README example: one private group-by, explained for free, then collected.

Run: python examples/quickstart.py
"""

import polars as pl

import dpframe as dp

# A deterministic synthetic table (no real people): user_id, age, city, spend, visits.
data = dp.datasets.visits(200_000)

sess = dp.Session(
    {"visits": data},
    privacy_unit=dp.PrivacyUnit("user_id", max_rows=10),  # protect users; keep ≤ 10 rows per user
    budget=dp.ApproxDP(epsilon=3.0, delta=1e-6),  # the total, enforced before anything runs
)

adults = sess.table("visits").filter(pl.col("age") >= 18)  # lazy: nothing is read yet

# Private keys: which cities appear is itself decided by DP partition selection (needs δ > 0).
q = adults.group_by("city").agg(
    dp.len(),
    dp.sum("spend", bounds=(0, 500)),
    dp.mean("spend", bounds=(0, 500)),
    dp.var("spend", bounds=(0, 500)),
)
budget = dp.ApproxDP(epsilon=1.0, delta=1e-7)
print(q.explain(budget=budget))  # free: no budget spent, no private row read
print(q.collect(budget=budget))  # reserves ε=1, δ=1e-7, then runs

# Public keys: every listed city gets a row, whatever the data holds; pure ε is enough.
public = adults.group_by("city", keys=["Amsterdam", "Berlin", "Oslo"]).agg(
    dp.len(), dp.mean("age", bounds=(0, 100))
)
print(public.collect(budget=dp.PureDP(0.5)))

print("spent:", sess.spent())  # ApproxDP(epsilon=3/2, delta=1e-07)
print("remaining:", sess.remaining())  # ApproxDP(epsilon=3/2, delta=9e-07)
