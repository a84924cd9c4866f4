"""dpframe's private top-k selection (a first-party plugin package).

``frame.group_by(key).top_k(k=10 | None, score=dp.count_units(), method="stable")`` builds a
:class:`~dpframe_topk.query.TopKQuery` through the ``top_k`` query family this package registers.
Methods: ``stable`` (StableTopK, Zhu & Wang: adaptive k and fixed k, Gaussian or Laplace PTR),
``gumbel`` (one-shot Gumbel / EM-CDP), ``peeling`` (peeling EM under standard composition),
``limited_domain`` (Durfee & Rogers), ``tct`` (one-shot top-k in the target-charging technique).
:mod:`dpframe_topk.pate` aggregates multi-label PATE votes with StableTopK. A query that cannot
release its set returns :class:`TopKFailed`; a fixed-k query that releases fewer than k keys returns
:class:`TopKPartial` (a falsy subclass carrying the keys). See ``docs/topk.md``.
"""

from dpframe.plugin import RegisterAudits, RegisterFamily, hookimpl
from dpframe_topk.pate import MultiLabelPATE
from dpframe_topk.query import METHODS, TopK, TopKQuery
from dpframe_topk.results import TopKFailed, TopKPartial

__all__ = ["METHODS", "MultiLabelPATE", "TopK", "TopKFailed", "TopKPartial", "TopKQuery", "dpframe_audits",
           "dpframe_query_families"]


@hookimpl
def dpframe_query_families(register: RegisterFamily) -> None:
    """The ``top_k`` query family (its methods: ``METHODS``)."""
    register(TopK())


@hookimpl
def dpframe_audits(register: RegisterAudits) -> None:
    """Multi-label PATE's privacy audit (:mod:`dpframe_topk.audits`), loaded only when an audit runs."""
    def specs() -> list[object]:
        from dpframe_topk.audits import specs

        return list(specs())

    register(specs, name="multi-label PATE", entry_points=("dpframe_topk:MultiLabelPATE.collect",))
