"""Interior point, threshold learning and rectangles: private learning with the row counts it needs.

Each query explains itself for free (the rows every method needs, the noisy-count gate, the guarantee,
the cost) and returns a result, or dp's NoAnswer when the noisy row count is too small.
"""

import numpy as np
import polars as pl

import dpframe as dp

rng = np.random.default_rng(7)
n = 5_000
income = rng.integers(10_000, 200_000, n)
age = rng.integers(18, 90, n)
data = pl.DataFrame({
    "income": income,
    "age": age,
    "approved": (income >= 60_000).astype(np.int8),                                   # a threshold
    "target": ((age >= 30) & (age <= 55) & (income <= 120_000)).astype(np.int8),      # a box
})
sess = dp.Session({"loans": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.ApproxDP(4, 1e-6))
loans = sess.table("loans")

# 1. An interior point: some value between the smallest and largest income. explain() shows it needs 154
#    rows at ε = 1 and that the noisy-count gate answers reliably from 432 rows.
q = loans.interior_point("income", bounds=(0, 10**9))
print(q.explain(dp.PureDP(1)))
print("interior point:", q.collect(dp.PureDP(1)))

# 2. A threshold classifier: the direction and the cut are learned privately.
model = loans.learn_threshold("income", label="approved", bounds=(0, 10**6)).collect(dp.PureDP(1))
print("threshold:", model)
if not isinstance(model, dp.NoAnswer):
    print("training accuracy:", float(np.mean(model.predict(income) == data["approved"].to_numpy())))

# 3. An axis-aligned box around the positive rows (inside the true box when every step succeeds).
box = loans.learn_rectangle(["age", "income"], label="target",
                            bounds={"age": (0, 120), "income": (0, 10**6)}).collect(dp.PureDP(2))
print("rectangle:", box)

# 4. Too few rows: a DP "no answer", charged like any answer.
tiny = dp.Session({"t": data.head(50)}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(1))
print("50 rows:", tiny.table("t").interior_point("income", bounds=(0, 10**9)).collect(dp.PureDP(1)))
print("spent:", sess.spent(), "| tiny spent:", tiny.spent())
