"""What ``explain()`` shows of an ``agg`` plan: the steps, the measures, the noise and the notes (reads no data).

The budget block and the text/JSON layout are the same for every query family
(:func:`dpframe.family.render`); this module builds the ``agg`` family's part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpframe.family import Explain
from dpframe.plan.nodes import Aggregate

if TYPE_CHECKING:
    from dpframe.planning import PhysicalPlan
    from dpframe.privacy_unit import PrivacyUnit

NULLS = ("nulls: len counts rows; count/sum/mean/var/std ignore null and NaN values; "
         "±inf and out-of-range values are clamped to the bounds")


def explain_aggregate(unit: PrivacyUnit, node: Aggregate, plan: PhysicalPlan, backend: str) -> Explain:
    """The explanation of ``plan`` for ``node``: steps, measures (with accuracy), noise, notes."""
    steps = [n.describe() for n in node.lineage()[:-1]]
    steps.append(f"ContributionBound: {unit.describe()}")
    steps.append(node.describe())
    measures: list[dict[str, Any]] = []
    for p in plan.plans:
        described = {m.output_name: m.describe() for m in p.measures}
        for name in p.output_names():
            measures.append({"output": name, "measure": described.get(name, ", ".join(described.values())),
                             "mechanism": p.mechanism, "accuracy": p.accuracy.get(name, ""),
                             "ci95": p.ci95.get(name)})
    noise = [{"plan": p.mechanism, "statistic": label, "noise": n.describe()}  # type: ignore[attr-defined]
             for p in ([plan.selection] if plan.selection else []) + plan.plans for label, n in p.noise.items()]
    notes = [*plan.notes, *(n for p in ([plan.selection] if plan.selection else []) + plan.plans for n in p.notes),
             NULLS]
    width = max(len(m["output"]) for m in measures)
    lines = ["measures:",
             *(f"  {m['output']:<{width}}  {m['measure']}  via {m['mechanism']}  {m['accuracy']}" for m in measures),
             "noise:", *(f"  {n['statistic']}: {n['noise']}" for n in noise)]
    return Explain("dpframe query plan", tuple(steps), tuple(lines), tuple(notes),
                   {"backend": backend, "measures": measures, "noise": noise})
