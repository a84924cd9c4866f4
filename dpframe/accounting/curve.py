"""The privacy curve: what an accountant needs to know about one mechanism, and its plain-data description.

A :class:`PrivacyCurve` describes a mechanism under add/remove-one neighbours (or, after
:func:`~dpframe.accounting.replace_one`, replace-one neighbours: its ``neighbours``) by up to four facts:

* ``rdp(α)``: its Rényi-DP curve ε(α) for α > 1 (Mironov 2017), used by the RDP accountant;
* ``hs`` / ``hs_rev``: the hockey-stick profile δ(ε) = H_{e^ε}(P‖Q) (ε ≥ 0) of a *dominating pair*
  (P, Q) and of the reversed pair (Q, P) (Zhu, Dong & Wang 2022, Def. 3.3.1 of the thesis), used by the
  PLD accountant; symmetric mechanisms have ``hs_rev is hs``;
* ``eps_inf``: a pure ε-DP bound (the RDP curve at α = ∞), used to cap subsampled curves;
* ``delta0``: an additive δ (approximate RDP / approximate zCDP: with probability ≤ δ0 anything may
  happen, otherwise the curves hold), e.g. DP partition selection.

A mechanism that knows only an RDP curve still gets a PLD profile (the RDP → (ε, δ) conversion is a
valid privacy-profile bound, made a dominating pair by connect-the-dots).

**Descriptions.** A curve's ``spec`` is plain data (a JSON object with a ``"kind"``, the constructor's
parameters and, after subsampling, a ``"rate"``): the ledger stores it and :func:`from_json` rebuilds the
curve through the constructor :func:`register_curve` recorded for that kind. The registry is open:
a plugin mechanism registers the kinds of its own curves (at import) and then its curves are stored and
re-composed like the built-ins. Stored descriptions are forever, so, as for dp_accounting's events:

* a kind is never removed and its builder never replaced (a second registration is refused);
* new parameters are optional (a description without them means what it meant before);
* a description never changes meaning: a builder may only become tighter where that is proven.

Example:
    >>> from dpframe import accounting as acc
    >>> g = acc.gaussian(sigma=2.0)
    >>> float(g.rdp_at([2.0, 4.0])[1])
    0.5
    >>> s = g.subsampled(rate=0.01)
    >>> bool(s.rdp_at([2.0])[0] < g.rdp_at([2.0])[0])
    True
    >>> from_json(s.to_json()).label
    'Gaussian(σ=2, Δ=1) sampled at rate 0.01'

"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpframe.accounting.checks import check_alpha, check_delta, check_epsilon, check_rate, delta_out, rdp_out, shown
from dpframe.accounting.numerics.common import Array, Fn
from dpframe.accounting.numerics.profiles import hs_from_rdp, hs_mixture
from dpframe.accounting.numerics.rdp import RDP_ORDERS, best_epsilon, conversion_margin, difference_down
from dpframe.accounting.numerics.subsampling import amplified_epsilon, hs_subsampled, subsampled_rdp
from dpframe.budgets import up
from dpframe.errors import BudgetError, DPFrameError

#: The neighbouring relations a curve can describe: one unit added or removed, or one unit's data replaced.
Neighbours = Literal["add_remove", "replace_one"]


@dataclass(frozen=True, eq=False)
class PrivacyCurve:
    """One mechanism as accountants see it (build with :func:`~dpframe.accounting.gaussian`, ...).

    The curve functions (``rdp``, ``hs``, ``hs_rev``) and ``sampled_rdp`` receive public values only (orders
    α, losses ε, a sampling rate γ), never data.
    """

    label: str
    spec: dict[str, Any] | None
    rdp: Fn | None = None
    hs: Fn | None = None
    hs_rev: Fn | None = None
    eps_inf: float | None = None
    delta0: float = 0.0
    rho: float | None = None            # a zCDP bound, if the mechanism has one
    tight_subsampling: bool = False     # condition (2.2) of thesis Thm 2.3.4 holds
    rate: float = 1.0
    pure_eps: float | None = field(default=None)  # an ε-DP bound (for basic composition)
    kl: float | None = None             # the RDP curve at α = 1 (KL divergence), or a bound of it, where known
    sampled_rdp: Callable[[float], Fn] | None = None   # γ ↦ the exact RDP curve on a Poisson sample of rate γ
    neighbours: Neighbours = "add_remove"              # the relation the curve is for (see neighbours.py)

    # ----------------------------------------------------------------------------- public queries
    @property
    def symmetric(self) -> bool:
        """Whether the dominating pair is symmetric (add and remove directions coincide)."""
        return self.hs is not None and self.hs is self.hs_rev

    def rdp_at(self, alpha: Sequence[float] | Array) -> Array:
        """ε(α) at the given orders α ≥ 1 (∞ where unbounded or unknown).

        α = 1 is the KL divergence (the limit of ε(α) as α ↓ 1) where the curve knows it (Gaussian,
        Laplace, randomized response, pure, exponential, zCDP, compositions of these; the subsampled
        Gaussian and Laplace to within 10⁻⁶ of α, from above); α = ∞ is the pure bound ε∞.

        Example:
            >>> from dpframe import accounting as acc
            >>> [float(v) for v in acc.gaussian(sigma=2.0).rdp_at([1.0, 2.0, math.inf])]
            [0.125, 0.25, inf]

        """
        a = check_alpha(alpha, limits=True)
        out = np.full(a.shape, math.inf)
        inner = (a > 1) & np.isfinite(a)
        if self.rdp is not None and np.any(inner):
            with np.errstate(all="ignore"):
                out[inner] = rdp_out(self.rdp(a[inner]))
        if self.kl is not None:
            out[a == 1] = self.kl
        if self.eps_inf is not None:
            out[a == math.inf] = self.eps_inf
        return out

    def profile(self) -> tuple[Fn, Fn]:
        """(hs, hs_rev) of a dominating pair: the declared one, or one derived from the RDP curve."""
        if self.hs is not None and self.hs_rev is not None:
            return self.hs, self.hs_rev
        if self.rdp is None:
            raise DPFrameError(f"{self.label} has neither an RDP curve nor a privacy profile",
                               argument="mechanism", fix="declare rdp= or profile= for it")
        cached: tuple[Fn, Fn] | None = self.__dict__.get("_derived_profile")
        if cached is None:            # derived once per curve (δ(ε) queries call this in loops)
            h = hs_from_rdp(self.rdp, RDP_ORDERS)
            if self.delta0:
                h = hs_mixture(h, self.delta0)
            cached = (h, h)
            object.__setattr__(self, "_derived_profile", cached)
        return cached

    def delta_at(self, epsilon: float) -> float:
        """δ(ε) of this single mechanism (max over both neighbour directions), for a finite ε ≥ 0.

        Example:
            >>> from dpframe import accounting as acc
            >>> round(acc.laplace(scale=1.0).delta_at(0.5), 6)      # 1 − e^{(0.5 − 1)/2}
            0.221199

        """
        return self._delta_at(check_epsilon(epsilon))

    def _delta_at(self, epsilon: float) -> float:
        hs, rev = self.profile()
        e = np.array([epsilon])
        with np.errstate(all="ignore"):
            return max(delta_out(hs(e)[0]), delta_out(rev(e)[0]))

    def approx_dp(self, delta: float) -> float:
        """The smallest ε with δ(ε) ≤ ``delta`` (in (0, 1)) for this mechanism alone (bisection; the upper end).

        ∞ when no ε up to max(10⁴, 2·ε∞) has that δ (e.g. ``delta`` below the mechanism's δ0).

        Example:
            >>> from dpframe import accounting as acc
            >>> round(acc.laplace(scale=1.0).approx_dp(0.221199), 4)
            0.5

        """
        return self._approx_dp(check_delta(delta))

    def _approx_dp(self, delta: float) -> float:
        if delta < sys.float_info.min:
            return self._approx_dp_subnormal(delta)
        if self._delta_at(0.0) <= delta:
            return 0.0
        limit = max(1e4, 2 * self.eps_inf) if self.eps_inf is not None and math.isfinite(self.eps_inf) else 1e4
        lo, hi = 0.0, 1.0
        while self._delta_at(hi) > delta:
            lo, hi = hi, hi * 2
            if hi > limit:
                return math.inf
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if self._delta_at(mid) <= delta else (mid, hi)
            if hi - lo <= 1e-15 * hi:
                break
        return hi

    def _approx_dp_subnormal(self, delta: float) -> float:
        """:meth:`approx_dp` at a ``delta`` below the normal floats (10⁻³⁰⁸), where a profile cannot be inverted.

        A float privacy profile there carries absolute errors of a few subnormal ulps (4.9·10⁻³²⁴ each: rounding the
        terms' exponentials, and every sum), a large part of δ: the Gaussian's, inverted, gave ε = 38.865 at
        δ = 5·10⁻³²⁴ where its exact δ is 6.5·10⁻³²⁴. The answer is instead the smaller of two bounds computed without
        it: the pure bound ε∞ where δ ≥ δ0 (the curve is (ε∞, δ0)-DP), and the RDP conversion at δ − δ0 (in logs,
        rounded up by :func:`~dpframe.accounting.numerics.rdp.conversion_margin`, as an RDP accountant's); ∞ where
        neither applies.

        Example:
            >>> from dpframe import accounting as acc
            >>> round(acc.gaussian(1.0).approx_dp(5e-324), 3), acc.laplace(1.0).approx_dp(5e-324)
            (38.968, 1.0)

        """
        options = [math.inf]
        if self.eps_inf is not None and self.delta0 <= delta:
            options.append(self.eps_inf)
        left = difference_down(delta, self.delta0)
        if self.rdp is not None and left > 0:
            with np.errstate(all="ignore"):
                values = rdp_out(self.rdp(RDP_ORDERS))
            best = best_epsilon(RDP_ORDERS, values, left)
            if math.isfinite(best.epsilon):
                options.append(best.epsilon + conversion_margin(best.epsilon, best.alpha, left))
        return max(0.0, min(options))

    def subsampled(self, rate: float) -> PrivacyCurve:
        """The same mechanism run on a Poisson sample that keeps each unit with probability ``rate``."""
        g = check_rate(rate)
        if self.neighbours != "add_remove":
            raise BudgetError(f"{self.label} is a replace-one curve; Poisson sampling is analysed under add/remove "
                              "neighbours", argument="rate",
                              fix="subsample the add/remove curve, then convert: acc.replace_one(curve.subsampled"
                                  "(rate)); for fixed-size batches use acc.sampled_without_replacement")
        if g == 1:
            return self
        spec = None if self.spec is None else {**self.spec, "rate": self.rate * g}
        rdp = None
        cap = None if self.eps_inf is None else amplified_epsilon(self.eps_inf, g)
        if self.rdp is not None:
            rdp = subsampled_rdp(self.rdp, g, self.tight_subsampling and self.delta0 == 0, cap)
        kl = None
        if self.sampled_rdp is not None and self.delta0 == 0:   # exact at every order: Poisson samples nest,
            exact = self.sampled_rdp(self.rate * g)            # a rate-γ sample of a rate-r one is rate rγ
            rdp = exact if rdp is None else _least(rdp, exact)
            kl = float(exact(np.array([1 + 1e-6]))[0])          # ε(α) is non-decreasing: ≥ the KL divergence
        hs, rev = self.profile()
        hs_s, rev_s = hs_subsampled(hs, rev, g)
        return PrivacyCurve(f"{self.label} sampled at rate {g:g}", spec, rdp, hs_s, rev_s, cap,
                            up(Fraction(self.delta0) * Fraction(g)), None, False, self.rate * g,
                            None if self.pure_eps is None else cap, kl, self.sampled_rdp)

    def to_json(self) -> str:
        """Serialise (for a ledger); raises for curves built from Python callables."""
        if self.spec is None:
            raise DPFrameError(f"{self.label} was built from Python functions and cannot be stored",
                               argument="mechanism", fix="build it with a dpframe.accounting constructor, or "
                                                         "register its kind with acc.register_curve")
        return json.dumps(self.spec, sort_keys=True)

    def __repr__(self) -> str:
        return f"<PrivacyCurve {self.label}>"


def _least(f: Fn, g: Fn) -> Fn:
    """The pointwise least of two valid RDP bounds (a valid bound)."""
    return lambda a: np.minimum(f(a), g(a))


# ---------------------------------------------------------------------------------------- registry
_BUILDERS: dict[str, Callable[..., PrivacyCurve]] = {}


def register_curve(kind: str, build: Callable[..., PrivacyCurve]) -> None:
    """Make the curves whose ``spec`` has ``"kind": kind`` storable: ``build(**params)`` rebuilds one.

    ``params`` are the spec's entries other than ``kind`` and ``rate`` (a stored ``rate`` is applied
    with :meth:`PrivacyCurve.subsampled`); ``build`` receives public values only (a description's
    parameters, never data). A kind is registered once: registering another builder for a
    kind already taken is refused (a stored description must keep its meaning); registering the same
    builder again (by name: a module or notebook cell run again) is a no-op that keeps the first one (a
    function given the first one's name is not it).

    Example:
        >>> from dpframe import accounting as acc
        >>> def coin(p: float) -> acc.PrivacyCurve:
        ...     base = acc.randomized_response(p)
        ...     return acc.PrivacyCurve(f"coin({p})", {"kind": "example.coin", "p": p}, base.rdp, base.hs,
        ...                             base.hs_rev, base.eps_inf, 0.0, base.rho, True, pure_eps=base.pure_eps)
        >>> acc.register_curve("example.coin", coin)
        >>> acc.from_json(coin(0.75).subsampled(0.5).to_json()).label
        'coin(0.75) sampled at rate 0.5'

    """
    if not isinstance(kind, str) or not kind or kind in ("rate", "kind"):
        raise BudgetError(f"a curve kind must be a non-empty string, got {shown(kind)}", argument="kind",
                          fix="name it after your plugin, e.g. 'myplugin.noise'")
    if not callable(build):
        raise BudgetError(f"expected a function that builds the curve, got {shown(build)}", argument="build",
                          fix="pass the constructor whose parameters are the spec's entries")
    known = _BUILDERS.get(kind)
    if known is not None and _name(known) != _name(build):
        raise DPFrameError(f"the curve kind {kind!r} is already registered by {_name(known)}; a stored "
                           "description must keep its meaning", argument="kind",
                           fix="give your curves a kind of their own, e.g. prefixed with your plugin's name")
    _BUILDERS.setdefault(kind, build)


def _name(build: Callable[..., Any]) -> str:
    return f"{getattr(build, '__module__', '?')}.{getattr(build, '__qualname__', repr(build))}"


def curve_kinds() -> list[str]:
    """The registered curve kinds, sorted.

    Example:
        >>> from dpframe import accounting as acc
        >>> {"gaussian", "composition", "threshold_test"} <= set(acc.curve_kinds())
        True

    """
    return sorted(_BUILDERS)


def is_core_kind(kind: str) -> bool:
    """Whether curves of ``kind`` are rebuilt by dpframe's own accounting code (not a plugin's registered builder).

    The engine checks a plan's charge against the curves its descriptions rebuild
    (:func:`~dpframe.accounting.curve_charge.check_curve_charge`) only where dpframe builds them.

    Example:
        >>> is_core_kind("gaussian"), is_core_kind("composition"), is_core_kind("no.such.kind")
        (True, True, False)

    """
    return kind in _CORE


_CORE: set[str] = set()


def register_core_curve(kind: str, build: Callable[..., PrivacyCurve]) -> None:
    """:func:`register_curve` for dpframe's own kinds (the accounting package's builders): :func:`is_core_kind`.

    ``build`` receives public values only (a description's parameters, never data), as for :func:`register_curve`.
    """
    register_curve(kind, build)
    _CORE.add(kind)


def from_spec(spec: Mapping[str, Any]) -> PrivacyCurve:
    """Rebuild a curve from its plain-data description (see :func:`register_curve`)."""
    params = dict(spec)
    rate = float(params.pop("rate", 1.0))
    kind = params.pop("kind", None)
    build = _BUILDERS.get(kind) if isinstance(kind, str) else None
    if build is None:
        raise DPFrameError(f"unknown curve kind {kind!r}", argument="ledger",
                           fix="upgrade dpframe, or install and import the plugin that registers this kind")
    curve = build(**params)
    return curve.subsampled(rate) if rate != 1 else curve


def from_json(text: str) -> PrivacyCurve:
    """Rebuild a curve stored with :meth:`PrivacyCurve.to_json`.

    Text that is not such a description (not a string, not JSON, not an object, an unknown kind, parameters
    the kind does not take) is a BudgetError naming ``text``.

    Example:
        >>> from dpframe import accounting as acc
        >>> acc.from_json(acc.gaussian(2.0).to_json()).label
        'Gaussian(σ=2, Δ=1)'

    """
    fix = "pass the text a curve's to_json() returned"
    if not isinstance(text, str):
        raise BudgetError(f"expected the JSON text of a curve, got {shown(text)}", argument="text", fix=fix)
    try:
        spec = json.loads(text)
    except (ValueError, RecursionError) as e:        # (JSONDecodeError is a ValueError)
        raise BudgetError(f"not JSON: {type(e).__name__}", argument="text", fix=fix) from None
    if not isinstance(spec, dict):
        raise BudgetError(f"expected a JSON object, got {shown(spec)}", argument="text", fix=fix)
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in _BUILDERS:
        raise BudgetError(f"unknown curve kind {shown(kind)}", argument="text",
                          fix="upgrade dpframe, or install and import the plugin that registers this kind")
    try:
        return from_spec(spec)
    except DPFrameError:
        raise
    except (TypeError, ValueError) as e:
        raise BudgetError(f"not a curve description: {type(e).__name__}: {e}", argument="text", fix=fix) from None
