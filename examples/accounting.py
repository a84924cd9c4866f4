"""Modern privacy accounting: standalone accountants, a Rényi-filter session and Poisson sampling."""

import dpframe as dp
from dpframe import accounting as acc

# 1. Standalone: how much do 1,000 subsampled Gaussian steps plus one Laplace release cost?
for name in ("basic", "rdp", "pld"):
    a = {"basic": acc.BasicAccountant, "rdp": acc.RDPAccountant, "pld": acc.PLDAccountant}[name]()
    a.compose(acc.gaussian(sigma=1.0).subsampled(rate=0.01), times=1000)
    a.compose(acc.laplace(scale=10.0))
    print(f"{name:>5}: ε = {a.epsilon(delta=1e-5):8.4f} at δ = 1e-5")
print(acc.RDPAccountant().compose(acc.gaussian(sigma=85.0), times=8192).explain(delta=1e-5))

# Two mechanisms reading the SAME sample are composed first and subsampled once; subsampling each
# separately is the cost of two independent samples and under-reports.
shared = acc.composition([acc.gaussian(sigma=1.0), acc.laplace(scale=2.0)]).subsampled(rate=0.01)
separate = acc.RDPAccountant().compose(acc.gaussian(sigma=1.0).subsampled(rate=0.01), times=1000)
separate.compose(acc.laplace(scale=2.0).subsampled(rate=0.01), times=1000)
print(f"1,000 batches, one sample each: ε = {acc.RDPAccountant().compose(shared, times=1000).epsilon(1e-5):.4f} "
      f"(two independent samples would be {separate.epsilon(1e-5):.4f})")

# 2. A session enforced by the Rényi filter, with queries on a 10% Poisson sample.
data = dp.datasets.visits(5_000, seed=0)
sess = dp.Session({"visits": data}, privacy_unit=dp.PrivacyUnit("user_id", max_rows=5),
                  budget=dp.ApproxDP(1.0, 1e-6), accountant="rdp", seed=0)
q = sess.table("visits").sample(0.1).agg(dp.len(), dp.mean("spend", bounds=(0, 500)))
print(q.explain(budget=dp.ZCDP(0.01)))
for _ in range(5):
    q.collect(budget=dp.ZCDP(0.01))
print("enforced (Rényi filter):", sess.spent())     # the session's own (enforcing) accountant
print("by every accountant:", {k: None if v is None else round(v, 4) for k, v in sess.spent_report().items()})
