"""Paying only for what you learn: sparse vector, target charging (with the boundary wrapper), PTR, early stopping.

Run: python examples/interactive.py   (seeded for reproducibility: NOT private; drop seed= in real use)
"""

import polars as pl

import dpframe as dp
from dpframe.interactive.boundary import q_boundary
from dpframe.interactive.ptr import gated_release, robust_median
from dpframe.interactive.stopping import run_until

# 20 stores, 2 of them busy (0 and 5: 12,000 visits; the others 2,000); one row per visit, a visitor has at most 5 visits.
visits = pl.DataFrame({
    "visitor": [i // 5 for i in range(60_000)],
    "store": [i % 20 if i % 3 else (i % 3) + (i % 60 < 30) * 5 for i in range(60_000)],
    "basket": [float(10 + (i * 7) % 40) for i in range(60_000)],
})
sess = dp.Session({"visits": visits}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=5),
                  budget=dp.ApproxDP(130, 1e-6), seed=11)
store = lambda s: sess.table("visits").filter(pl.col("store") == s).agg(dp.len())  # noqa: E731

# 1. Sparse vector: which stores have more than 4000 visits? Only "above" answers use the budget.
with sess.sparse_vector(threshold=4000, max_positives=5, budget=dp.PureDP(1.0), release=dp.PureDP(0.5)) as sv:
    busy = [s for s in range(20) if not sv.closed and sv.test(store(s))]
print("busy stores:", busy, "| noisy visits:", sv.values, "| sparse vector charged", sv.charged())

# 2. A target-charging channel: tests and conditional releases, paying only for "above"/released.
with sess.target_charging(epsilon=0.5, max_hits=30, delta=1e-7) as ch:
    flags = [ch.test(store(s), threshold=4000) for s in range(20)]
    big = ch.conditional_release(store(0), when=dp.above(4000))   # released only if ≥ 4000
    print("channel:", ch.status(), "| store 0 released:", big)

# 2b. The boundary wrapper: pay only for *uncertain* answers, on either side of the threshold.
with sess.target_charging(epsilon=0.5, max_hits=10, delta=1e-7, min_q=q_boundary(0.375)) as ch:
    answers = [ch.boundary_test(store(s), threshold=3000) for s in range(20)]
    print("boundary-wrapped tests:", answers.count("above"), "above,", answers.count("below"), "below,",
          answers.count("boundary"), "boundary |", ch.status())

# 3. Generalized PTR: a median whose noise adapts to the data (⊥ would cost only the test).
print("robust median basket:", robust_median(sess.table("visits"), "basket", bounds=(0, 10_000))
      .collect(dp.ApproxDP(1, 1e-7)))

# 4. Gated release: the mean basket only if the store has > 1000 visits (a ⊥ costs only the gate).
t = sess.table("visits").filter(pl.col("store") == 7)
print("gated mean:", gated_release(t.agg(dp.mean("basket", bounds=(0, 100))), dp.PureDP(1), t.agg(dp.len()),
                                   1000, dp.PureDP(0.25)))

# 5. Early stopping: widen a filter until it covers 10,000 visits; charged for the steps actually run.
steps = [sess.table("visits").filter(pl.col("store") < k).agg(dp.len()) for k in (2, 5, 10, 20)]
out = run_until(steps, dp.PureDP(0.25), stop=lambda r: r[-1]["len"][0] > 10_000)
print("early stopping ran", len(out), "of", len(steps), "steps; spent so far:", sess.spent())

# 6. Early stopping with Gaussian steps: ρ adds up inside the run (Lemma 11), the session settles (ε_j, δ).
steps = [sess.table("visits").filter(pl.col("store") < k).agg(dp.len()) for k in range(1, 21)]
out = run_until(steps, dp.ZCDP(0.01), stop=lambda r: r[-1]["len"][0] > 20_000, delta=1e-7, stops=[5, 10, 15])
print("Gaussian early stopping ran", len(out), "of", len(steps), "steps; spent so far:", sess.spent())

# 7. Gaussian sparse vector (RDP session, ρ budget): charged its RDP curve — length-capped for c > 1.
rsess = dp.Session({"visits": visits}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=5),
                   budget=dp.ApproxDP(8, 1e-6), accountant="rdp", seed=11)
rstore = lambda s: rsess.table("visits").filter(pl.col("store") == s).agg(dp.len())  # noqa: E731
with rsess.sparse_vector(threshold=4000, max_positives=5, budget=dp.ZCDP(0.05), noise="gaussian",
                         max_length=20) as sv:
    busy = [s for s in range(20) if not sv.closed and sv.test(rstore(s))]
print("Gaussian SVT busy stores:", busy, "|", sv.status())
