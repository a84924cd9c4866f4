"""Several mechanisms on the same input, as one curve (:func:`composition`).

Example:
    >>> from dpframe import accounting as acc
    >>> c = acc.composition([acc.laplace(scale=2.0), acc.gaussian(sigma=3.0)])
    >>> c.label
    'composition of (Laplace(b=2, Δ=1); Gaussian(σ=3, Δ=1))'
    >>> acc.from_json(c.to_json()).label == c.label
    True

"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dpframe.accounting.checks import check_grid, shown
from dpframe.accounting.curve import PrivacyCurve, from_spec, register_core_curve
from dpframe.accounting.curves import gaussian
from dpframe.accounting.numerics.common import Array
from dpframe.accounting.numerics.pld import ComposedPLD, at_least_one, compose_pairs, composed_profile
from dpframe.accounting.numerics.rdp import product_up, root_sum_squares_up, sum_up
from dpframe.budgets import add_up
from dpframe.errors import BudgetError


def composition(curves: Sequence[PrivacyCurve], *, grid: float = 1e-4) -> PrivacyCurve:
    """Several mechanisms run on the same input, as one mechanism.

    Use it when the mechanisms share one Poisson sample: ``composition([a, b]).subsampled(rate)`` is the
    cost of running a and b on the same sample; ``a.subsampled(rate)`` composed with
    ``b.subsampled(rate)`` is the cost of two *independent* samples and under-reports here. Facts of the
    composition (each proven for adaptive composition of the parts):

    * RDP: ε(α) adds up (Mironov 2017, Prop. 1); the pure bound ε∞ and ρ add up; the δ0 parts add up;
    * profile: the product of the parts' dominating pairs dominates (thesis Thm 3.3.4); it is computed
      (on first use) as the composed discretised PLD at step ``grid``, in each neighbour direction;
    * Gaussian parts only: noise σᵢ on statistics of L2 sensitivity Δᵢ is one Gaussian mechanism with
      Δ/σ = √(Σ (Δᵢ/σᵢ)²) (stack the statistics, divided by σᵢ: the L2 sensitivity of the stack is at
      most that), so the tight subsampling bound (thesis Thm 2.3.4) still applies.

    Subsampling the composition uses the general bound (Thm 2.3.1; the tight one needs condition (2.2),
    which is not known for a composition of different families) capped at log(1 + γ(e^{Σε∞} − 1)).

    Example:
        >>> from dpframe.accounting.curves import pure
        >>> c = composition([pure(1.0), pure(1.0)])
        >>> round(c.subsampled(0.01).eps_inf, 6)                 # log(1 + 0.01(e² − 1)), not 2·log(1 + 0.01(e − 1))
        0.061933
        >>> g = composition([gaussian(sigma=3.0), gaussian(sigma=4.0)])
        >>> round(float(g.rdp_at([2.0])[0]), 6) == round(2 * (1 / 9 + 1 / 16) / 2, 6)   # one Gaussian, Δ/σ = 5/12
        True

    """
    parts = list(curves) if isinstance(curves, Sequence) else []
    if not parts or not all(isinstance(c, PrivacyCurve) for c in parts):
        raise BudgetError(f"expected a non-empty list of privacy curves, got {shown(curves)}", argument="curves",
                          fix="pass e.g. [acc.laplace(scale=2.0), acc.gaussian(sigma=3.0)]")
    if len({c.neighbours for c in parts}) > 1:
        raise BudgetError("the curves are for different neighbouring relations (add/remove and replace-one)",
                          argument="curves", fix="convert the add/remove ones with acc.replace_one(curve)")
    if len(parts) == 1:
        return parts[0]
    label = f"composition of ({'; '.join(c.label for c in parts)})"
    h = check_grid(grid)
    mu = math.inf
    if all(c.spec is not None and c.spec.get("kind") == "gaussian" and "rate" not in c.spec for c in parts):
        mu = root_sum_squares_up((c.spec["sensitivity"], c.spec["sigma"], 1) for c in parts)  # type: ignore[index]
    if math.isfinite(mu):   # (an overflowing μ is composed like any other mechanisms)
        return replace(gaussian(sigma=1.0, sensitivity=mu), label=label)
    specs = [c.spec for c in parts]
    spec = None if any(x is None for x in specs) else {"kind": "composition", "parts": specs}
    rdps = [c.rdp for c in parts]
    rdp = None
    if all(f is not None for f in rdps):
        def rdp(a: Array) -> Array:
            return compose_up(((f(a), 1) for f in rdps), len(a))  # type: ignore[misc]

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum_up(values)  # type: ignore[arg-type]

    def build() -> ComposedPLD:
        return compose_pairs([(*c.profile(), t) for c, t in group_rdp_only([(c, 1) for c in parts])], h)

    hs, hs_rev = composed_profile(build, all(c.hs is None or c.hs is c.hs_rev for c in parts))
    return PrivacyCurve(label, spec, rdp, hs, hs_rev, total([c.eps_inf for c in parts]),
                        min(1.0, sum_up(c.delta0 for c in parts)), total([c.rho for c in parts]), False,
                        pure_eps=total([c.pure_eps for c in parts]), kl=total([c.kl for c in parts]),
                        neighbours=parts[0].neighbours)


def compose_up(parts: Iterable[tuple[Array, int]], size: int) -> Array:
    """Σ times·values over ``parts`` (RDP values at ``size`` orders), every product and partial sum rounded up.

    Rounded to nearest, a sum of n curves can be about n/2 ulps below the exact one; here it never is below.

    Example:
        >>> [float(v) for v in compose_up([(np.array([0.1, 0.5]), 3), (np.array([0.2, 0.25]), 1)], 2)]
        [0.5000000000000001, 1.75]

    """
    total = np.zeros(size)
    for values, times in parts:
        total = add_up(total, product_up(np.asarray(values, dtype=np.float64), float(times)))
    return total


def group_rdp_only(entries: Sequence[tuple[PrivacyCurve, int]]) -> list[tuple[PrivacyCurve, int]]:
    """Mechanisms known only by RDP curves are composed in RDP first and enter a PLD as one dominating pair.

    Converting each one to a privacy profile before composing would lose far more (the conversion is
    lossy once per mechanism instead of once); the group's summed curve is a valid RDP curve of the group,
    and its δ0 is 1 − Π(1 − δ0ᵢ)^tᵢ rounded up (exact for up to 64 runs).

    Example:
        >>> from dpframe import accounting as acc
        >>> only = acc.from_rdp(lambda a: a / 8)
        >>> [(c.label, t) for c, t in group_rdp_only([(acc.laplace(1.0), 2), (only, 3)])]
        [('Laplace(b=1, Δ=1)', 2), ('RDP-only mechanisms (composed in RDP)', 1)]

    """
    rdp_only = [(c, t) for c, t in entries if c.hs is None]
    if len(rdp_only) <= 1 and all(t == 1 for _, t in rdp_only):
        return list(entries)
    curves = [(c.rdp, t) for c, t in rdp_only]

    def total(a: Array) -> Array:
        return compose_up(((f(a), t) for f, t in curves if f is not None), len(a))

    delta0 = at_least_one([(c.delta0, t) for c, t in rdp_only])    # 1 − Π(1 − δ0)^t, rounded up
    group = PrivacyCurve("RDP-only mechanisms (composed in RDP)", None, total, delta0=delta0)
    return [(c, t) for c, t in entries if c.hs is not None] + [(group, 1)]


def _composition_of_specs(parts: list[dict[str, Any]]) -> PrivacyCurve:
    return composition([from_spec(p) for p in parts])


register_core_curve("composition", _composition_of_specs)
