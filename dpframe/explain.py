"""Rendering of ``Query.explain()``: the plan, mechanisms, noise, cost and accuracy (reads no data)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpframe.budgets import describe
from dpframe.plan.nodes import Aggregate

if TYPE_CHECKING:
    from dpframe.planning import PhysicalPlan
    from dpframe.session import Session

NULLS = ("nulls: len counts rows; count/sum/mean/var/std ignore null and NaN values; "
         "±inf and out-of-range values are clamped to the bounds")


def _data(session: Session, node: Aggregate, plan: PhysicalPlan) -> dict[str, Any]:
    steps = [n.describe() for n in node.lineage()[:-1]]
    steps.append(f"ContributionBound: {session.privacy_unit.describe()}")
    steps.append(node.describe())
    measures = []
    for p in plan.plans:
        described = {m.output_name: m.describe() for m in p.measures}
        for name in p.output_names():
            measures.append({"output": name, "measure": described.get(name, ", ".join(described.values())),
                             "mechanism": p.mechanism, "accuracy": p.accuracy.get(name, ""),
                             "ci95": p.ci95.get(name)})
    noise = [{"plan": p.mechanism, "statistic": label, "noise": n.describe()}  # type: ignore[attr-defined]
             for p in ([plan.selection] if plan.selection else []) + plan.plans for label, n in p.noise.items()]
    spent = session.accountant.report(session._release.spent())
    after = session.accountant.compose([session._release.spent(), plan.session_cost])
    return {
        "private": session.rng.private,
        "backend": session.backend_name,
        "steps": steps,
        "measures": measures,
        "noise": noise,
        "notes": [*plan.notes, *(n for p in ([plan.selection] if plan.selection else []) + plan.plans
                                 for n in p.notes), NULLS],
        "budget": {"requested": describe(plan.budget), "cost": describe(plan.cost),
                   "charged": session.accountant.describe_charge(plan.session_cost),
                   "accountant": session.accountant.describe(),
                   "spent": describe(spent),
                   "fits": session.accountant.fits(after),
                   "remaining_after": describe(session.accountant.remaining(after))},
    }


def render(session: Session, node: Aggregate, plan: PhysicalPlan, format: str) -> Any:
    """Text or a JSON-able dict."""
    d = _data(session, node, plan)
    if format == "json":
        return d
    lines = ["dpframe query plan" + ("" if d["private"] else "   [seeded random source: NOT PRIVATE]")]
    lines += [f"  {i}. {s}" for i, s in enumerate(d["steps"], 1)]
    lines.append("measures:")
    width = max(len(m["output"]) for m in d["measures"])
    lines += [f"  {m['output']:<{width}}  {m['measure']}  via {m['mechanism']}  {m['accuracy']}" for m in d["measures"]]
    lines.append("noise:")
    lines += [f"  {n['statistic']}: {n['noise']}" for n in d["noise"]]
    b = d["budget"]
    lines.append(f"budget: requested {b['requested']}; cost {b['cost']}; charged {b['charged']} "
                 f"({b['accountant']})")
    if b["fits"]:
        lines.append(f"        spent so far {b['spent']}; remaining after this query {b['remaining_after']}")
    else:
        lines.append(f"        spent so far {b['spent']}; DOES NOT FIT the remaining "
                     f"{describe(session.remaining())}: collect() would be refused")
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)
