"""The q-target LP verifier of digest 000 §9, shared by the BetweenThresholds and boundary-wrapper tests.

For finite output laws Z⁰, Z¹ of one mechanism on a neighbouring pair, the largest q such that
``target`` is a q-target at ε: variables w_y ∈ [0, min(Z⁰_y, Z¹_y)] (the common part p·C), constraints
Z^b_y − w_y ≤ e^ε (Z^{1−b}_y − w_y) and Σ_{y∈⊤}(Z^b_y − w_y) ≥ q(1 − Σ w); bisection on q.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog


def is_q_target(z0: np.ndarray, z1: np.ndarray, eps: float, target: np.ndarray, q: float) -> bool:
    """Whether ``target`` (a boolean mask over outcomes) is a q-target at ``eps`` for this pair: one LP."""
    e = math.exp(eps)
    k = len(z0)
    a_ub, b_ub = [], []
    for y in range(k):
        row = np.zeros(k)
        row[y] = e - 1               # Z0_y − w ≤ e(Z1_y − w)  ⇔  (e−1) w ≤ e Z1_y − Z0_y
        a_ub += [row.copy(), row.copy()]
        b_ub += [e * z1[y] - z0[y], e * z0[y] - z1[y]]
    for z in (z0, z1):               # Σ_{y∈⊤}(Z_y − w_y) ≥ q(1 − Σ w)
        a_ub.append(np.where(target, 1 - q, -q))
        b_ub.append(float(z[target].sum()) - q)
    res = linprog(np.zeros(k), A_ub=a_ub, b_ub=b_ub, bounds=[(0, min(a, b)) for a, b in zip(z0, z1)])
    return bool(res.status == 0)


def max_q(z0: np.ndarray, z1: np.ndarray, eps: float, target: np.ndarray, steps: int = 22) -> float:
    """The largest q (to 2^-steps, from below) for which ``target`` is a q-target at ``eps`` (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if is_q_target(z0, z1, eps, target, mid) else (lo, mid)
    return lo
