"""Private medians, quartiles and deciles, grouped and in SQL, and private clipping bounds."""

import polars as pl

import dpframe as dp

data = dp.datasets.visits(20_000, seed=0)
sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=5),
                  budget=dp.PureDP(5.0), seed=0)
visits = sess.table("visits")

# 1. Don't know good clipping bounds? Estimate them privately (this spends ε = 0.5, visibly).
bounds = visits.bounds("spend", domain=(-1e6, 1e6), quantiles=(0.05, 0.95), resolution=0.01)
print(bounds.explain(budget=dp.PureDP(0.5)))
low, high = bounds.collect(budget=dp.PureDP(0.5))
print(f"private bounds for spend: [{low:.2f}, {high:.2f}]")

# 2. Median and quartiles (released jointly) per city, with public keys; explain() is free.
q = (visits.group_by("city", keys=["Berlin", "Geneva", "Lisbon"])
     .agg(dp.median("age", bounds=(0, 120)),
          dp.quantile("spend", [0.25, 0.5, 0.75], bounds=(low, high), resolution=0.01)))
print(q.explain(budget=dp.PureDP(1.0)))
print(q.collect(budget=dp.PureDP(1.0)))

# 3. Deciles of the whole table, and the same in SQL.
deciles = visits.agg(dp.quantile("age", [k / 10 for k in range(1, 10)], bounds=(0, 120))).collect(dp.PureDP(0.5))
print("age deciles:", deciles["age_quantile"][0].to_list())
print(sess.sql("SELECT MEDIAN(CLAMP(age, 0, 120)) AS median_age, "
               "QUANTILE_CONT(CLAMP(visits, 0, 50), [0.1, 0.9]) AS visits_p10_p90 FROM visits")
      .collect(budget=dp.PureDP(0.5)))
print("true (NOT private) age deciles:",
      data.select(pl.col("age").quantile(k / 10, "lower").alias(str(k)) for k in range(1, 10)).row(0))
print("spent:", sess.spent(), "remaining:", sess.remaining())
