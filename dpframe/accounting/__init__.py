"""Privacy accounting: privacy curves, accountants (how costs compose) and the ledger (where charges are kept).

Standalone use (the accountants compose a sequence fixed in advance)::

    >>> from dpframe import accounting as acc
    >>> a = acc.PLDAccountant()
    >>> _ = a.compose(acc.gaussian(sigma=1.0).subsampled(rate=0.01), times=1000)
    >>> _ = a.compose(acc.laplace(scale=10.0))
    >>> r = acc.RDPAccountant().compose(acc.gaussian(sigma=1.0).subsampled(rate=0.01), times=1000)
    >>> 0 < a.epsilon(delta=1e-5) < r.compose(acc.laplace(scale=10.0)).epsilon(delta=1e-5)
    True

Calibration (:mod:`~dpframe.accounting.calibrate`): the smallest noise, the largest ε per step or the most
steps that meet a target, rounded toward privacy::

    >>> acc.most_steps(acc.gaussian(sigma=10.0), epsilon=1.0, delta=1e-5)
    7

Mechanisms that read the *same* Poisson sample are composed first and subsampled once
(:func:`composition`; amplifying each and adding under-reports)::

    >>> one_batch = acc.composition([acc.gaussian(sigma=1.0), acc.laplace(scale=2.0)]).subsampled(rate=0.01)
    >>> _ = acc.RDPAccountant().compose(one_batch, times=1000)

In a session an accountant is a *filter*: it converts each query's cost into a charge, composes
charges and says whether a total fits. The :class:`Ledger` stores every charge durably and does the
check-and-charge atomically (one SQLite transaction, so threads and processes sharing a ledger file
can never overspend). See ``docs/accounting.md``.

Layers (each imports only the ones above it; ``tests/accounting/test_layers.py`` checks it):
``checks`` → ``numerics/`` (the math) → ``curve`` (the curve type and the open registry of curve kinds)
→ ``curves``, ``composition`` (the built-in curves) → ``neighbours`` (replace-one, sampling without
replacement) → ``accountants`` (the interface, basic, zCDP) →
``rdp`` → ``pld`` → ``report``, ``ledger``, ``calibrate``, ``fdp``.
"""

from dpframe.accounting.accountants import Accountant, BasicAccountant, ZCDPAccountant
from dpframe.accounting.calibrate import largest_epsilon, most_steps, smallest_noise
from dpframe.accounting.composition import composition
from dpframe.accounting.curve import PrivacyCurve, curve_kinds, from_json, register_curve
from dpframe.accounting.curves import (
    approx,
    discrete_gaussian,
    discrete_laplace,
    exponential,
    from_profile,
    from_rdp,
    gaussian,
    laplace,
    pure,
    randomized_response,
    threshold_test,
    tree_aggregation,
    zcdp,
)
from dpframe.accounting.fdp import gdp_mu, power, tradeoff
from dpframe.accounting.ledger import Charge, Ledger
from dpframe.accounting.neighbours import replace_one, sampled_without_replacement
from dpframe.accounting.pld import PLDAccountant
from dpframe.accounting.rdp import RDPAccountant
from dpframe.accounting.rdp_charge import RDPCharge, SessionCost

__all__ = [
    "Accountant", "BasicAccountant", "Charge", "Ledger", "PLDAccountant", "PrivacyCurve", "RDPAccountant",
    "RDPCharge", "SessionCost", "ZCDPAccountant", "approx", "composition", "curve_kinds", "discrete_gaussian",
    "discrete_laplace", "exponential", "from_json", "from_profile", "from_rdp", "gaussian", "gdp_mu", "laplace",
    "largest_epsilon", "most_steps", "power", "pure", "randomized_response", "register_curve", "replace_one",
    "sampled_without_replacement", "smallest_noise", "threshold_test", "tradeoff", "tree_aggregation", "zcdp",
]
