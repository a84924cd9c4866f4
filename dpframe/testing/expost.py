"""Audits of ex-post (output-DP) charging: each output cell must meet the ε it was *settled* to.

A mechanism with an output-DP spec (Hartmann et al. 2022; :mod:`dpframe.interactive.odp`) is charged
ε(C) when its released output falls in cell C (a sparse vector with k positives, a PTR ⊥, an early stop
after j steps). The guarantee behind the refund is per cell: for every event S inside C,

    P[M(D) ∈ S] ≤ e^{ε(C)} · P[M(D') ∈ S] + δ        (both directions).

So a refund is audited like a claim, cell by cell: the sampler reports, per run, the ε it was charged
(output ``"__charged"``, recorded by :func:`~dpframe.testing.query_sampler`), the cell is the set of
runs with one charged value, and the events are the cell itself and the cell intersected with
threshold events on each output. As in :func:`~dpframe.testing.audit_samples`, the most revealing
(cell, output, event) — largest lower bound *relative to the cell's ε* — is chosen on a pilot sample
and bounded on an independent final sample.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> def runs():         # a fair coin whatever the data; heads is charged ε = 1, tails 0
    ...     heads = rng.random(4000) < 0.5
    ...     return {"x": heads.astype(float), "__charged": np.where(heads, 1.0, 0.0)}
    >>> audit_ex_post_samples(runs(), runs(), runs(), runs()).passed
    True

"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from dpframe.testing.audit import AuditResult, Sampler, _as_float, _bounds, _thresholds

__all__ = ["CHARGED", "audit_ex_post_sampler", "audit_ex_post_samples"]

#: The sampler output holding the ε (first budget coordinate) each run was charged after settlement.
CHARGED = "__charged"

Samples = Mapping[str, npt.ArrayLike]
_TEXT = ("P[charged {c:g} and {o} ≥ {t}] on D over D'", "P[charged {c:g} and {o} ≥ {t}] on D' over D",
         "P[charged {c:g} and {o} < {t}] on D over D'", "P[charged {c:g} and {o} < {t}] on D' over D")


def _cell_bounds(a: npt.NDArray[np.float64], n_a: int, b: npt.NDArray[np.float64], n_b: int,
                 taus: npt.NDArray[np.float64], delta: float, alpha: float) -> npt.NDArray[np.float64]:
    """Lower bounds (4 × len(taus)) for {in cell and ≥ τ}, {in cell and < τ}; a, b: the runs inside the cell."""
    sa, sb = np.sort(a), np.sort(b)
    ge_a = (a.size - np.searchsorted(sa, taus, side="left")).astype(float)
    ge_b = (b.size - np.searchsorted(sb, taus, side="left")).astype(float)
    lt_a, lt_b = a.size - ge_a, b.size - ge_b
    return np.stack([_bounds(ge_a, n_a, ge_b, n_b, delta, alpha), _bounds(ge_b, n_b, ge_a, n_a, delta, alpha),
                     _bounds(lt_a, n_a, lt_b, n_b, delta, alpha), _bounds(lt_b, n_b, lt_a, n_a, delta, alpha)])


def _ratio(bound: float, eps: float) -> float:
    if eps > 0:
        return bound / eps
    return float("inf") if bound > 0 else 0.0


def audit_ex_post_samples(pilot_a: Samples, pilot_b: Samples, final_a: Samples, final_b: Samples, *,
                          delta: float = 0.0, alpha: float = 1e-6,
                          outputs: Sequence[str] | None = None) -> AuditResult:
    """The per-cell audit: ``claimed_epsilon`` of the result is the ε of the most revealing cell.

    Every sample set maps output names to one value per run and holds :data:`CHARGED`. The bound holds
    with probability ≥ 1 − alpha; ``passed`` means it does not exceed the cell's ε.
    """
    names = list(outputs) if outputs is not None else [k for k in pilot_a if k in pilot_b and k != CHARGED]
    ca, cb = _as_float(pilot_a[CHARGED]), _as_float(pilot_b[CHARGED])
    best: tuple[float, float, str, int, float, float] | None = None      # ratio, bound, output, event, τ, cell
    for cell in np.unique(np.concatenate([ca, cb])):
        in_a, in_b = ca == cell, cb == cell
        for name in names:
            a, b = _as_float(pilot_a[name]), _as_float(pilot_b[name])
            taus = np.concatenate([[-np.inf], _thresholds(a[in_a], b[in_b]) if in_a.any() or in_b.any() else []])
            bounds = _cell_bounds(a[in_a], a.size, b[in_b], b.size, taus, delta, alpha)
            row, col = (int(i) for i in np.unravel_index(int(np.argmax(bounds)), bounds.shape))
            ratio = _ratio(float(bounds[row, col]), float(cell))
            if best is None or ratio > best[0]:
                best = (ratio, float(bounds[row, col]), name, row, float(taus[col]), float(cell))
    assert best is not None
    _, pilot_bound, name, event, tau, cell = best
    a, b = _as_float(final_a[name]), _as_float(final_b[name])
    in_a, in_b = _as_float(final_a[CHARGED]) == cell, _as_float(final_b[CHARGED]) == cell
    final = float(_cell_bounds(a[in_a], a.size, b[in_b], b.size, np.asarray([tau]), delta, alpha)[event, 0])
    text = _TEXT[event].format(c=cell, o=name, t=f"{tau:g}")
    return AuditResult(final, cell, delta, name, text, tau, pilot_bound, int(min(a.size, b.size)), alpha)


def audit_ex_post_sampler(sample_a: Sampler, sample_b: Sampler, *, delta: float = 0.0, samples: int = 2_000,
                          seed: int = 0, alpha: float = 1e-6, outputs: Sequence[str] | None = None) -> AuditResult:
    """:func:`audit_ex_post_samples` on pilot and final runs of two samplers (seeds distinct from the ε audit).

    Example:
        >>> import numpy as np
        >>> def on(p):       # 1 w.p. p, charged ln 2; 0 charged ln(4/3): meets p = 0.4 vs 0.2 exactly
        ...     def sample(n, seed):
        ...         x = (np.random.default_rng(seed).random(n) < p).astype(float)
        ...         return {"x": x, "__charged": np.where(x == 1, np.log(2), np.log(4 / 3))}
        ...     return sample
        >>> audit_ex_post_sampler(on(0.4), on(0.2), samples=20_000).passed
        True
        >>> audit_ex_post_sampler(on(0.6), on(0.2), samples=20_000).passed      # ratio 3 > e^{ln 2}
        False

    """
    seeds = [10**6 + seed * 4 + i for i in range(4)]
    return audit_ex_post_samples(sample_a(samples, seeds[0]), sample_b(samples, seeds[1]),
                                 sample_a(samples, seeds[2]), sample_b(samples, seeds[3]), delta=delta,
                                 alpha=alpha, outputs=outputs)
