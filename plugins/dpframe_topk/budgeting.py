"""How a top-k query's budget is calibrated and charged: public information only, no data.

Before any row is read, :func:`plan_topk`

1. takes the query budget in a notion the session can charge: a basic (pure / (ε, δ)) or zCDP session
   converts it (``accountant.charge``: pure ε → ρ = ε²/2, ...); an RDP or PLD session keeps it as given;
2. calibrates the method in that notion — pure ε, (ε, δ), or δ-approximate ρ-zCDP (:class:`TopKPlan`);
3. fixes the charge: the whole budget in basic and zCDP sessions; in RDP/PLD sessions the privacy curves of
   the mechanisms that run (:mod:`dpframe.accounting.curves`), so the Rényi filter charges them tightly.

Curves (digest ``001_adaptive_topk.md`` §2–§3, §7; approximate RDP/zCDP as in F5, additive δ0):

* StableTopK (Alg 2, Thm 11): the exponential mechanism on the gaps is ε_EM-bounded-range
  (``exponential(ε_EM)``, RDP min(pure, αε²/8)); the PTR releases a noisy gap of sensitivity g, and the
  key set is released only when it passes, which is δ_t-approximately as private as the noisy gap (the
  paper's PTR lemma): ``zcdp(g²/(2σ²), δ0=δ_t)`` (Gaussian) or ``approx(g/t, δ_t)`` (Laplace).
* Alg 3's patch (second half, charged even when it does not run): peeling over a public candidate set is
  a sequence of s bounded-range steps fitting the share, so the share's own curve bounds it whatever s
  is (``zcdp(ρ/2)`` or ``pure(ε/2)``); over keys from the data it may run limited domain, which is only
  proven (ε, δ)-DP: ``approx(ε/2, δ_patch)``.
* ``gumbel`` / ``peeling``: k exact-EM steps, each ε_step-bounded-range (the sampler is the same for both;
  ``peeling`` only *calibrates* with the looser ε²/2 per step): k × ``exponential(ε_step)``.
* ``limited_domain``: (ε, δ)-DP (Durfee & Rogers 2019): ``approx(ε, δ)``. No zCDP guarantee is claimed
  (their proof is for (ε, δ); see :data:`LD_NO_ZCDP`), so it is refused for zCDP budgets, and in zCDP the
  Alg 3 patch over keys from the data never uses it.
* ``tct``: its (ε, δ) or (ρ, δ) share as a whole: ``approx`` / ``zcdp`` curve.
* ``release_scores``: noise on the released scores, ``pure(ε_s)`` (Laplace) or ``zcdp(ρ_s)`` (Gaussian).

Example:
    >>> from fractions import Fraction
    >>> Patch("pure", Fraction(1, 2), Fraction(0), "peel").peel_epsilon(4)
    Fraction(1, 8)

"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from dpframe.accounting import curves
from dpframe.accounting.curves import PrivacyCurve
from dpframe.budgets import ZCDP, ApproxDP, Budget, PureDP, up, zcdp_rho
from dpframe.errors import BudgetError
from dpframe.planning import budget_of as check_budget
from dpframe_topk import calibrate as cal
from dpframe_topk.spelling import CHAIN, Spelling

if TYPE_CHECKING:
    from dpframe.accounting.accountants import Accountant

SCORE_SHARE = Fraction(1, 4)    # of the first budget coordinate, when release_scores=True
#: Curves beyond this many identical steps are declared as one zCDP curve (k·ρ_step) to keep charging fast.
_REPEAT = 64
LD_NO_ZCDP = ("limited domain (Durfee & Rogers 2019) is proven (ε, δ)-DP only, so dpframe does not charge "
              "it as approximate zCDP")


@dataclass(frozen=True)
class Patch:
    """Alg 3's second half, which reaches exactly k: its share and how its steps are calibrated.

    ``notion``: ``"zcdp"`` (ρ = ``first``: s bounded-range steps of ε = √(8ρ/s)), ``"pure"`` (ε/s per
    step, basic composition) or ``"approx"`` ((ε, δ) = (``first``, ``delta``): peeling at the better of
    basic composition and the zCDP route at δ; limited domain at :func:`calibrate.ld_step_epsilon`, which
    leaves δ/2 to its ⊥ threshold). Dropping keys from a released set
    that is too large always peels (the released set is public). ``fill`` says where *missing* keys come
    from: ``"peel"`` (public keys: peeling over the other public keys), ``"ld"`` (keys from the data,
    (ε, δ): limited domain, which may stop early) or ``"none"`` (keys from the data in zCDP: nothing —
    the result is partial).
    """

    notion: str
    first: Fraction
    delta: Fraction
    fill: str

    def peel_epsilon(self, steps: int) -> Fraction:
        """Per-step ε of ``steps`` exact-EM steps over a public candidate set, fitting the share."""
        if self.notion == "zcdp":
            return cal.root_down(8 * self.first / steps)
        if self.notion == "pure":
            return self.first / steps
        return cal.em_step_epsilon("approx", self.first, self.delta, steps, "br")

    def ld_epsilon(self, steps: int) -> Fraction:
        """Per-step ε' of limited domain returning up to ``steps`` keys (at most ``steps`` draws, ⊥ included)."""
        assert self.fill == "ld"
        return cal.ld_step_epsilon(self.first, self.delta, steps)

    @property
    def ld_delta(self) -> Fraction:
        """The δ of limited domain's ⊥ threshold (the other half pays its composition)."""
        return self.delta / 2

    def curve(self) -> PrivacyCurve:
        """A curve bounding the patch whatever its (data-dependent) number of steps is."""
        if self.notion == "zcdp":
            return curves.zcdp(up(self.first))
        if self.notion == "pure":
            return curves.pure(up(self.first))
        return curves.approx(up(self.first), up(self.delta))


@dataclass
class TopKPlan:
    """Everything :meth:`TopKQuery.collect` will do, computed from public information."""

    method: str
    budget: Budget                      # the query budget in the notion it is calibrated in
    notion: str                         # "pure" | "approx" | "zcdp": the calibration notion of ``budget``
    selection_first: Fraction           # ε or ρ given to the selection
    delta_t: Fraction = Fraction(0)     # PTR failure probability (stable)
    delta_ld: Fraction = Fraction(0)    # limited-domain ⊥ failure probability (method="limited_domain")
    stable: cal.StablePlan | None = None
    patch: Patch | None = None
    step_epsilon: Fraction | None = None
    tct: cal.TCTPlan | None = None
    score_noise_first: Fraction = Fraction(0)
    curves: list[PrivacyCurve] = field(default_factory=list)
    charge: Any = None                  # what the session accountant reserves (a Budget, or an RDP charge)
    notes: list[str] = field(default_factory=list)


def repeat(curve: PrivacyCurve, times: int) -> list[PrivacyCurve]:
    """``times`` runs of ``curve``; many runs of a zCDP-bounded curve as one zCDP curve (times·ρ)."""
    if times <= _REPEAT or curve.rho is None:
        return [curve] * times
    return [curves.zcdp(up(Fraction(curve.rho) * times))]


def stable_curves(st: cal.StablePlan) -> list[PrivacyCurve]:
    """Alg 2: the EM on gaps (bounded range) and the δ_t-approximate PTR on a gap of sensitivity g."""
    em = curves.exponential(up(st.em_epsilon))
    if st.ptr == "gaussian":
        return [em, curves.zcdp(up(st.g**2 / (2 * st.ptr_scale)), up(st.delta_t))]
    return [em, curves.approx(up(st.g / st.ptr_scale), up(st.delta_t))]


def query_budget(accountant: Accountant, budget: object) -> tuple[Budget, bool]:
    """(the budget to calibrate in, whether the session charges curves) — raises for unsound conversions."""
    given = check_budget(budget)
    charged = accountant.charge(given)
    if isinstance(charged, PureDP | ApproxDP | ZCDP):
        return charged, False
    return given, True


def notion_of(b: Budget) -> str:
    """``"zcdp"``, ``"pure"`` (also an (ε, 0) budget) or ``"approx"``."""
    if isinstance(b, ZCDP):
        return "zcdp"
    return "approx" if getattr(b, "delta", 0) else "pure"


def first_of(b: Budget) -> Fraction:
    """ρ of a zCDP budget, ε otherwise."""
    return b.rho if isinstance(b, ZCDP) else b.epsilon


@dataclass(frozen=True)
class StableRequest:
    """The public parameters of a StableTopK run (from :class:`TopKQuery`)."""

    k: int | None
    public: bool            # the candidate keys are public (group_by(..., keys=...))
    ptr: str
    delta_t: Fraction | None
    g: Fraction
    spelling: Spelling = CHAIN     # how the refusal of a bad δ_t names delta_t (the method chain's or SQL's)


def plan_stable(plan: TopKPlan, delta: Fraction, req: StableRequest) -> None:
    """Calibrate Alg 2 (adaptive k) or Alg 3 (fixed k) in ``plan.notion``; raises on a bad δ_t."""
    fixed = req.k is not None
    if req.delta_t is not None and req.delta_t >= delta:
        raise BudgetError(f"δ_t = {float(req.delta_t):g} must be smaller than the budget's δ = {float(delta):g}",
                          argument="delta_t", fix="omit delta_t (top-k picks its share of δ) or pass a smaller one, "
                                                  f"e.g. {req.spelling.arg('delta_t', 'δ/10')}")
    sel, g = plan.selection_first, req.g
    if plan.notion == "zcdp":
        # δ_t-approximate ρ-zCDP; the patch (fixed k) peels over public candidates only (no limited domain).
        dt = req.delta_t if req.delta_t is not None else delta
        plan.stable = cal.stable_plan_zcdp(sel / 2 if fixed else sel, dt, g, req.ptr)
        plan.patch = Patch("zcdp", sel / 2, Fraction(0), "peel" if req.public else "none") if fixed else None
    elif fixed and not req.public:
        # (ε/2, δ_a) StableTopK + (ε/2, δ_patch) patch that may run limited domain: basic composition.
        half = sel / 2
        if req.ptr == "gaussian":
            dt = req.delta_t if req.delta_t is not None else delta / 4
            conv, patch_delta = (delta - dt) / 3, (delta - dt) * 2 / 3
            rho = zcdp_rho(half, conv)
            plan.stable = cal.stable_plan_zcdp(rho, dt, g, "gaussian")
            plan.notes.append(f"StableTopK half (ε/2, δ_t + δ'): ρ = {float(rho):.6g}, the largest ρ whose optimal "
                              f"(CKS20) conversion at δ' = {float(conv):.3g} is ≤ ε/2")
        else:
            dt = req.delta_t if req.delta_t is not None else delta / 2
            patch_delta = delta - dt
            plan.stable = cal.stable_plan_pure_parts(half, dt, g)
        plan.patch = Patch("approx", half, patch_delta, "ld")
    elif req.ptr == "gaussian":
        dt = req.delta_t if req.delta_t is not None else delta / 2
        rho = zcdp_rho(sel, delta - dt)
        plan.notes.append(f"(ε, δ) → zCDP: ρ = {float(rho):.6g}, the largest ρ whose optimal (CKS20) conversion at "
                          f"δ' = {float(delta - dt):.3g} is ≤ ε")
        plan.stable = cal.stable_plan_zcdp(rho / 2 if fixed else rho, dt, g, "gaussian")
        plan.patch = Patch("zcdp", rho / 2, Fraction(0), "peel") if fixed else None
    else:
        dt = req.delta_t if req.delta_t is not None else delta
        plan.stable = cal.stable_plan_pure_parts(sel / 2 if fixed else sel, dt, g)
        plan.patch = Patch("pure", sel / 2, Fraction(0), "peel") if fixed else None
    plan.delta_t = dt
    plan.curves += stable_curves(plan.stable) + ([plan.patch.curve()] if plan.patch is not None else [])


__all__ = ["LD_NO_ZCDP", "SCORE_SHARE", "Patch", "StableRequest", "TopKPlan", "first_of", "notion_of",
           "plan_stable", "query_budget", "repeat", "stable_curves", "up"]
