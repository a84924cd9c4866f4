"""Explain first, pay once: compare candidate queries for free, then collect the one you want.

explain() and cost() read no private rows and spend nothing; only collect() charges the session.
"""

import json

import polars as pl

import dpframe as dp

data = dp.datasets.visits(100_000)
sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=10),
                  budget=dp.PureDP(1.0))
cities = ["Amsterdam", "Berlin", "Copenhagen"]
frame = sess.table("visits").filter(pl.col("age").is_between(18, 64))

# Two ways to ask for the average spend: tight bounds (less noise, more clamping) or loose ones.
tight = frame.group_by("city", keys=cities).agg(dp.mean("spend", bounds=(0, 200)))
loose = frame.group_by("city", keys=cities).agg(dp.mean("spend", bounds=(0, 1000)))
for name, q in [("tight", tight), ("loose", loose)]:
    plan = q.explain(budget=dp.PureDP(0.3), format="json")  # a plain dict, JSON-serializable
    print(f"{name:5}  cost {plan['budget']['cost']}  accuracy {plan['measures'][0]['accuracy']}")

# The whole plan as JSON (what tests snapshot, what a UI would render).
print(json.dumps(tight.explain(budget=dp.PureDP(0.3), format="json"), indent=2, ensure_ascii=False))

# cost() is the exact charge, in the session's notion, as a budget object.
print("cost:", tight.cost(budget=dp.PureDP(0.3)), "| spent so far:", sess.spent())

# Only now is the budget reserved and the data read.
print(tight.collect(budget=dp.PureDP(0.3)))
print("spent:", sess.spent(), "| remaining:", sess.remaining())
