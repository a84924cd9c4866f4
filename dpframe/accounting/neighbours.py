"""Replace-one neighbours, and fixed-size batches sampled without replacement.

dpframe's curves describe *add/remove-one* neighbours (one privacy unit added or removed). Two functions give
curves under *replace-one* neighbours (one unit's data replaced by other data; the number of units n is
public), the relation under which sampling a fixed-size batch without replacement amplifies privacy:

* :func:`replace_one`: the same mechanism under replace-one neighbours. Replacing x by y is removing x and
  adding y, so the replace-one sensitivity of a statistic is at most twice its add/remove sensitivity: the
  Gaussian, Laplace, discrete Laplace/Gaussian and tree-aggregation curves double Δ, a pure ε-DP or
  ε-bounded-range curve doubles ε, ρ-zCDP becomes 4ρ (group privacy of two, Bun & Steinke 2016, Prop. 27),
  (ε, δ)-DP becomes (2ε, (1 + e^ε)δ), and randomized response is unchanged (its curve already compares one
  input value with another, as its constructor documents). Any other curve gets the group-of-two bounds of
  :mod:`~dpframe.accounting.numerics.replacement` (the weak triangle inequality for its RDP curve, group
  privacy for its profile).
* :func:`sampled_without_replacement`: the mechanism run on a batch of ``sample_size`` of the
  ``population`` units drawn uniformly without replacement (Wang, Balle & Kasiviswanathan 2019 for RDP,
  with their sharper term for the Gaussian; Balle, Barthe & Gaboardi 2018 for the profile).

A standalone accountant composes curves of one relation only (a replace-one guarantee is a statement about
other pairs of datasets than an add/remove one); sessions account add/remove neighbours and refuse
replace-one curves. Poisson subsampling (:meth:`PrivacyCurve.subsampled`) is an add/remove notion: subsample
first, then convert.

Example:
    >>> from dpframe import accounting as acc
    >>> acc.replace_one(acc.gaussian(sigma=2.0)).rdp_at([2.0])[0]        # Δ = 1 → 2: α(2Δ)²/(2σ²)
    np.float64(1.0)
    >>> batch = acc.sampled_without_replacement(acc.gaussian(sigma=2.0), sample_size=100, population=10_000)
    >>> round(float(batch.rdp_at([2.0])[0]), 10)     # dp_accounting (σ/Δ = 1 under replace-one): 0.0005435086
    0.0005435086

"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from dpframe.accounting.checks import shown
from dpframe.accounting.composition import composition
from dpframe.accounting.curve import PrivacyCurve, from_spec, register_core_curve
from dpframe.accounting.curves import (
    approx,
    discrete_gaussian,
    discrete_laplace,
    exponential,
    gaussian,
    laplace,
    pure,
    randomized_response,
    tree_aggregation,
    zcdp,
)
from dpframe.accounting.numerics.common import Array
from dpframe.accounting.numerics.rdp import rdp_pure
from dpframe.accounting.numerics.replacement import (
    gaussian_moments,
    hs_group_of_two,
    hs_without_replacement,
    rdp_group_of_two,
    wor_rdp,
)
from dpframe.accounting.numerics.subsampling import amplified_epsilon
from dpframe.errors import BudgetError

__all__ = ["replace_one", "sampled_without_replacement"]


def replace_one(curve: PrivacyCurve) -> PrivacyCurve:
    """The curve of the same mechanism under replace-one neighbours (see the module docstring for the bounds).

    A replace-one curve is returned as it is.

    Example:
        >>> from dpframe import accounting as acc
        >>> acc.replace_one(acc.laplace(scale=10.0)).eps_inf                  # L1 sensitivity 1 → 2
        0.2
        >>> acc.replace_one(acc.laplace(scale=10.0)).label
        'Laplace(b=10, Δ=1), replace-one'

    """
    _check_curve(curve)
    if curve.neighbours == "replace_one":
        return curve
    label = f"{curve.label}, replace-one"
    spec = None if curve.spec is None else {"kind": "replace_one", "curve": curve.spec}
    exact = _exact(curve.spec)
    if exact is not None:
        return replace(exact, label=label, spec=spec, neighbours="replace_one", sampled_rdp=None, rate=1.0)
    return _group_of_two(curve, label, spec)


def _exact(spec: dict[str, Any] | None) -> PrivacyCurve | None:
    """The replace-one curve of a built-in kind whose replace-one sensitivity is twice its add/remove one."""
    if spec is None or "rate" in spec:
        return None
    build = _EXACT.get(spec["kind"])
    if build is None:
        return None
    try:
        return build({k: v for k, v in spec.items() if k != "kind"})
    except BudgetError:              # a doubled parameter leaves the float range: the general bounds instead
        return None


def _approx(p: dict[str, Any]) -> PrivacyCurve | None:
    """(2ε, (1 + e^ε)δ) when that δ is below 1 (else the general bounds)."""
    if p["epsilon"] > 700 or not p["delta"]:
        return None
    delta = (1 + math.exp(p["epsilon"])) * p["delta"] * (1 + 1e-15)
    return approx(2 * p["epsilon"], delta) if delta < 1 else None


def _composition(p: dict[str, Any]) -> PrivacyCurve:
    return composition([replace_one(from_spec(part)) for part in p["parts"]])


_EXACT: dict[str, Callable[[dict[str, Any]], PrivacyCurve | None]] = {
    "gaussian": lambda p: gaussian(p["sigma"], 2 * p["sensitivity"]),
    "laplace": lambda p: laplace(p["scale"], 2 * p["sensitivity"]),
    "discrete_laplace": lambda p: discrete_laplace(p["scale"], 2 * p["sensitivity"]),
    "discrete_gaussian": lambda p: discrete_gaussian(p["sigma"], 2 * p["sensitivity"], scalar=p.get("scalar", False)),
    "tree_aggregation": lambda p: tree_aggregation(p["sigma"], p["steps"], 2 * p["sensitivity"]),
    "pure": lambda p: pure(2 * p["epsilon"]),
    "exponential": lambda p: exponential(2 * p["epsilon"]),
    "zcdp": lambda p: zcdp(4 * p["rho"]) if not p.get("delta0") else None,
    "approx": _approx,
    "randomized_response": lambda p: randomized_response(**p),
    "composition": _composition,
}


def _group_of_two(curve: PrivacyCurve, label: str, spec: dict[str, Any] | None) -> PrivacyCurve:
    """Replace-one curves from the add/remove ones (:mod:`~dpframe.accounting.numerics.replacement`)."""
    clean = curve.delta0 == 0          # with a δ0 only the profile (which includes it) converts
    rdp = rdp_group_of_two(curve.rdp) if curve.rdp is not None and clean else None
    eps_inf = 2 * curve.eps_inf if curve.eps_inf is not None and clean else None
    if rdp is not None and eps_inf is not None and math.isfinite(eps_inf):
        triangle, bounded = rdp, rdp_pure(eps_inf)          # a 2ε∞-DP mechanism: at most its tight RDP

        def rdp(a: Array) -> Array:
            return np.fmin(triangle(a), bounded(a))
    hs = None if curve.hs is None and rdp is not None else hs_group_of_two(*curve.profile())
    return PrivacyCurve(label, spec, rdp, hs, hs, eps_inf, 0.0,
                        4 * curve.rho if curve.rho is not None and clean else None, False,
                        pure_eps=2 * curve.pure_eps if curve.pure_eps is not None and clean else None,
                        neighbours="replace_one")


def sampled_without_replacement(curve: PrivacyCurve, sample_size: int, population: int) -> PrivacyCurve:
    """The mechanism run on ``sample_size`` of the ``population`` units drawn without replacement (replace-one).

    ``curve`` is the mechanism on the batch (add/remove curves are converted with :func:`replace_one`).
    RDP: Wang, Balle & Kasiviswanathan (2019, Thm 9; Thm 27 for the Gaussian) at integer orders, the cumulant
    interpolated between them; profile: δ'(ε') = γ·δ(log(1 + (e^{ε'} − 1)/γ)), γ = m/n (Balle et al. 2018);
    pure bound log(1 + γ(e^ε − 1)). A base with a δ0 keeps only its profile.

    Example:
        >>> from dpframe import accounting as acc
        >>> batch = acc.sampled_without_replacement(acc.laplace(scale=2.0), sample_size=10, population=1000)
        >>> round(batch.eps_inf, 6)                          # log(1 + 0.01(e^1 − 1)): ε = 2Δ/b = 1 replace-one
        0.017037
        >>> round(acc.PLDAccountant().compose(batch, times=100).epsilon(1e-6), 3)
        0.441

    """
    _check_curve(curve)
    m = _count(sample_size, "sample_size", "pass the batch size, an int ≥ 1")
    n = _count(population, "population", "pass the number of units the batch is drawn from, an int ≥ 1")
    if m > n:
        raise BudgetError(f"must be at most population={n}, got {shown(sample_size)}", argument="sample_size",
                          fix="pass a batch no larger than the population")
    base = replace_one(curve)
    if m == n:
        return base
    rate = m / n
    spec = None if curve.spec is None else {"kind": "sampled_without_replacement", "curve": curve.spec,
                                            "sample_size": m, "population": n}
    clean = base.delta0 == 0
    rdp = None
    if base.rdp is not None and clean:
        mu = _gaussian_mu(base)
        rdp = wor_rdp(base.rdp, rate, base.eps_inf, gaussian_moments(mu) if mu is not None else None)
    hs = None
    if base.hs is not None or rdp is None:
        one, other = base.profile()
        hs = hs_without_replacement(lambda e: np.maximum(one(e), other(e)), rate)
    eps_inf = amplified_epsilon(base.eps_inf, rate) if base.eps_inf is not None and clean else None
    return PrivacyCurve(f"{curve.label} on a batch of {m} of {n} (without replacement)", spec, rdp, hs, hs,
                        eps_inf, 0.0, None, False,
                        pure_eps=amplified_epsilon(base.pure_eps, rate) if base.pure_eps is not None and clean
                        else None, neighbours="replace_one")


def _gaussian_mu(base: PrivacyCurve) -> float | None:
    """Δ/σ of a replace-one Gaussian (the conversion of an unsampled add/remove Gaussian), else None."""
    inner = base.spec.get("curve") if base.spec is not None and base.spec.get("kind") == "replace_one" else None
    if inner is None or inner.get("kind") != "gaussian" or "rate" in inner:
        return None
    return 2 * float(inner["sensitivity"]) / float(inner["sigma"])


def _check_curve(curve: object) -> None:
    if not isinstance(curve, PrivacyCurve):
        raise BudgetError(f"expected a privacy curve, got {shown(curve)}", argument="curve",
                          fix="pass a curve such as acc.gaussian(sigma=1.0)")


def _count(value: object, argument: str, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= 2**53:
        raise BudgetError(f"must be an int in [1, 2**53], got {shown(value)}", argument=argument, fix=fix)
    return int(value)


def _from_replace_one(curve: dict[str, Any]) -> PrivacyCurve:
    return replace_one(from_spec(curve))


def _from_without_replacement(curve: dict[str, Any], sample_size: int, population: int) -> PrivacyCurve:
    return sampled_without_replacement(from_spec(curve), sample_size, population)


register_core_curve("replace_one", _from_replace_one)
register_core_curve("sampled_without_replacement", _from_without_replacement)
