"""Issue 21 item 5 (part): k-ary randomized response, tree aggregation, and the two add/remove directions.

Reference values: dp_accounting 0.4 (``_compute_randomized_response_rdp(q, k, orders, REPLACE_ONE)``,
``RdpAccountant(REPLACE_SPECIAL)`` with ``SingleEpochTreeAggregationDpEvent``), recomputed outside the
repository, and the exact k-fold loss distribution of k-RR by enumeration.
"""

from __future__ import annotations

import math

import pytest
from scipy.stats import multinomial

import dpframe as dp
from dpframe import accounting as acc

# (q, k) → RDP at α = 2, 8 (dp_accounting's RandomizedResponseDpEvent(q, k): p = 1 − q + q/k)
RR = {(0.5, 10): [1.8647846042429452, 2.312489992307652], (0.2, 4): [2.6777931159021717, 2.809996354168921],
      (0.9, 100): [0.7897538969415239, 2.177493707030528]}


@pytest.mark.parametrize(("key", "values"), RR.items())
def test_k_ary_randomized_response_rdp_matches_dp_accounting(key: tuple[float, int], values: list[float]) -> None:
    q, k = key
    curve = acc.randomized_response(1 - q + q / k, k=k)
    assert curve.rdp_at([2, 8]) == pytest.approx(values, rel=1e-12)
    assert curve.eps_inf == pytest.approx(math.log((1 - q + q / k) / (q / k)))


def test_k_ary_randomized_response_pld_is_exact() -> None:
    """Five runs of 4-ary RR with p = 0.6: δ(ε) from the multinomial law of the loss (+ε, −ε, 0)."""
    p, k, n = 0.6, 4, 5
    eta = math.log(p / ((1 - p) / (k - 1)))
    probs = [p, (1 - p) / (k - 1), 1 - p - (1 - p) / (k - 1)]
    a = acc.PLDAccountant().compose(acc.randomized_response(p, k=k), times=n)
    for eps in (0.5, 2.0, 4.0):
        exact = 0.0
        for up in range(n + 1):
            for down in range(n + 1 - up):
                loss = (up - down) * eta
                if loss > eps:
                    exact += multinomial.pmf([up, down, n - up - down], n, probs) * -math.expm1(eps - loss)
        assert exact <= a.delta(eps) <= exact + 2e-4                 # connect-the-dots at step 1e-4: pessimistic
    assert acc.randomized_response(0.75, k=2).to_json() == acc.randomized_response(0.75).to_json()   # k = 2: as before
    again = acc.from_json(acc.randomized_response(epsilon=2.0, k=5).subsampled(0.1).to_json())
    assert again.label == "randomized response(p=0.648786, k=5) sampled at rate 0.1"


def test_tree_aggregation_matches_dp_accounting() -> None:
    for sigma, steps, peer in [(1.0, [100], 16.438090423375677), (2.0, [1000, 10], 8.84687435850794)]:
        eps = acc.RDPAccountant().compose(acc.tree_aggregation(sigma, steps)).epsilon(1e-6)
        assert peer * 0.999 <= eps <= peer                              # refined orders: a little tighter
    assert acc.tree_aggregation(1.0, 100).rdp_at([2.0]) == pytest.approx(acc.gaussian(1 / math.sqrt(7)).rdp_at([2.0]))


def test_each_neighbour_direction_separately() -> None:
    a = acc.PLDAccountant().compose(acc.laplace(1.0).subsampled(0.2), times=20)
    d = a.directions(1e-6)
    assert d["remove"] != d["add"] and max(d.values()) == pytest.approx(a.epsilon(1e-6))
    g = acc.PLDAccountant().compose(acc.gaussian(2.0), times=3).directions(1e-6)
    assert g["remove"] == g["add"]
    assert acc.PLDAccountant().directions(1e-6) == {"remove": 0.0, "add": 0.0}


@pytest.mark.parametrize(("call", "argument"), [
    (lambda: acc.randomized_response(0.2, k=4), "p"), (lambda: acc.randomized_response(0.6, k=1), "k"),
    (lambda: acc.randomized_response(0.6, k=True), "k"), (lambda: acc.tree_aggregation(1.0, 0), "steps"),
    (lambda: acc.tree_aggregation(1.0, []), "steps"), (lambda: acc.tree_aggregation(1.0, [3, 2.5]), "steps"),
    (lambda: acc.tree_aggregation(-1.0, 10), "sigma"), (lambda: acc.PLDAccountant().directions(2.0), "delta"),
])
def test_bad_input_names_the_argument(call, argument: str) -> None:  # noqa: ANN001
    with pytest.raises(dp.BudgetError) as info:
        call()
    assert info.value.argument == argument
