"""SQL through dpframe: the same engine, plan and budget as the method chain, written as DuckDB SQL.

Run: python examples/sql_queries.py   (a few seconds; synthetic data)
"""

import polars as pl

import dpframe as dp

data = dp.datasets.visits(50_000)          # user_id, age, city, spend, visits (synthetic)
cities = sorted(data["city"].unique().to_list())
regions = pl.DataFrame({"city": cities, "region": ["north" if i % 2 else "south" for i in range(len(cities))]})

sess = dp.Session(
    {"visits": data},
    privacy_unit=dp.PrivacyUnit("user_id", max_rows=10),
    budget=dp.ApproxDP(epsilon=4.0, delta=1e-6),
    public_keys={"visits.city": cities},           # GROUP BY city releases exactly these keys
    bounds={"visits.spend": (0, 250)},             # used when an aggregate has no CLAMP(...)
    public_tables={"regions": regions},            # public lookup table, may be JOINed
    backend="duckdb",                              # or "polars" (the default)
)

# 1. Explain first: free, reads no data.
query = sess.sql("""
    SELECT city, COUNT(*) AS visits, AVG(CLAMP(spend, 0, 250)) AS avg_spend
    FROM visits
    WHERE age >= 18
    GROUP BY city
    ORDER BY visits DESC
    LIMIT 5
""")
print(query.explain(budget=dp.PureDP(0.5)))
print()

# 2. Collect: charges ε = 0.5, runs one DuckDB query, adds noise in Python, then ORDER BY/LIMIT.
print("top 5 cities by (noisy) adult visits:")
print(query.collect(budget=dp.PureDP(0.5)))

# 3. A CTE, a join with the public table, declared bounds and an expression over aggregates.
by_region = sess.sql("""
    WITH adults AS (SELECT user_id, city, spend FROM visits WHERE age >= 18)
    SELECT r.region, SUM(spend) AS total_spend, SUM(spend) / COUNT(*) AS spend_per_visit
    FROM adults a JOIN regions r ON a.city = r.city
    GROUP BY r.region
""")
print("\nper region (public keys come from the public table):")
print(by_region.collect(budget=dp.PureDP(0.5)))

# 4. Private keys: DP partition selection picks which age groups to release (needs δ > 0).
ages = sess.sql("SELECT age // 10 * 10 AS decade, COUNT(*) AS n FROM visits GROUP BY decade ORDER BY decade")
print("\nvisits per age decade (keys chosen by DP partition selection):")
print(ages.collect(budget=dp.ApproxDP(0.5, 1e-7)))

# 5. Distinct counts: COUNT(DISTINCT user_id) counts privacy units (each user moves it by at most 1 per city);
#    COUNT(DISTINCT age) counts distinct values (each kept row adds at most one: a count's noise).
reach = sess.sql("SELECT city, COUNT(DISTINCT user_id) AS users, COUNT(DISTINCT age) AS ages FROM visits "
                 "GROUP BY city ORDER BY users DESC LIMIT 3")
print("\nthe 3 cities with the most (noisy) distinct users:")
print(reach.collect(budget=dp.PureDP(0.5)))

# 6. EXPLAIN as SQL: collect() returns the plan text and charges nothing.
plan = sess.sql("EXPLAIN SELECT STDDEV(CLAMP(age, 0, 100)) FROM visits").collect(budget=dp.PureDP(0.25))
print("\n" + plan["explain"][0].splitlines()[0], "...")

# 7. Unsafe SQL is refused before anything is charged.
for bad in ["SELECT * FROM visits", "SELECT user_id, spend FROM visits",
            "SELECT COUNT(*) FROM read_csv('/etc/passwd')", "SELECT SUM(age) FROM visits"]:
    try:
        sess.sql(bad)
    except dp.DPFrameError as e:
        print(f"\nrefused: {bad}\n  {type(e).__name__}: {str(e)[:150]}")

print(f"\nspent {sess.spent()}, remaining {sess.remaining()}")
print(sess.history().select("id", "query", "cost"))
