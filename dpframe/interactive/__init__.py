"""Interactive, pay-for-what-you-learn mechanisms (``docs/interactive.md``).

* :mod:`~dpframe.interactive.odp`: output-DP (ex-post) settlement — reserve the worst cell, charge
  the released output's cell (basic composition only; δ never refunded);
* :mod:`~dpframe.interactive.svt`: sparse vector with refund of unused positives (``sess.sparse_vector``);
* :mod:`~dpframe.interactive.tct`: target-charging channels (``sess.target_charging``);
* :mod:`~dpframe.interactive.boundary`: the boundary wrapper's exact oracle and coin (``ch.boundary_test``);
* :mod:`~dpframe.interactive.ptr`: propose-test-release, gated release, generalized PTR median;
* :mod:`~dpframe.interactive.stopping`: early stopping charged by stopping time (Lemma 11 inner composition);
* :mod:`~dpframe.interactive.composition`: the inner composition theorems and the exact δ of Eq. 4 / Thm 15.

For mechanism and plugin authors, a mechanism with an ex-post cost (DESIGN §3) declares an
:class:`OdpSpec` (cells → ε, one δ, released value → cell) from public information and runs its private
computation through :func:`run_ex_post`; :func:`odp_delta` validates a discrete spec exactly.
"""

from dpframe.interactive.odp import OdpSpec, odp_delta, run_ex_post

__all__ = ["OdpSpec", "odp_delta", "run_ex_post"]
