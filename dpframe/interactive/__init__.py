"""Interactive, pay-for-what-you-learn mechanisms (``docs/interactive.md``).

* :mod:`~dpframe.interactive.odp`: output-DP (ex-post) settlement — reserve the worst cell, charge
  the released output's cell (basic composition only; δ never refunded);
* :mod:`~dpframe.interactive.svt`: sparse vector with refund of unused positives (``sess.sparse_vector``);
* :mod:`~dpframe.interactive.tct`: target-charging channels (``sess.target_charging``);
* :mod:`~dpframe.interactive.boundary`: the boundary wrapper's exact oracle and coin (``ch.boundary_test``);
* :mod:`~dpframe.interactive.ptr`: propose-test-release, gated release, generalized PTR median;
* :mod:`~dpframe.interactive.stopping`: early stopping charged by stopping time.
"""
