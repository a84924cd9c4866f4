"""Review 51c: a plugin author's second day (leftovers of stop 50's plugin review).

1. ``dpframe plugins`` shows routing order: which mechanism handles a measure kind under each notion (and who
   else offers it, reachable only with ``mechanism=``), which family builds each query name (``replaces=``).
2. The quantiles and histogram mechanisms split their share with the public ``dpframe.budgets.divide``; a share
   of a notion they do not declare is a dpframe error, not an AttributeError of the plugin.
3. ``dpframe.noise``'s samplers refuse bad arguments with dpframe errors naming the argument and the fix.
4. ``dpframe.testing.pin_families`` routes a query name to a family object in one session (tests only).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from dpframe_quantiles.mechanism import QuantileMechanism

import dpframe as dp
from dpframe.noise import (
    SeededRandomSource,
    bernoulli_exp,
    bernoulli_exp_ratio,
    discrete_gaussian,
    discrete_gaussian_batch,
    discrete_laplace,
    discrete_laplace_batch,
    discrete_laplace_log_tail,
    discrete_laplace_tail,
    discrete_laplace_variance,
    exponential_index,
    exponential_index_grouped,
)
from dpframe.noise.exponential import epsilon_from_rho
from dpframe.plugin import plugin_host
from dpframe.testing import check_refused, measure_context, pin_families


def test_quantiles_refuse_an_approximate_share_with_a_dpframe_error() -> None:
    """The mechanism declares pure/zCDP; a conformance test calling plan() with (ε, δ) got an AttributeError."""
    err = check_refused(QuantileMechanism(), dp.quantile("x", 0.5, bounds=(0, 100)), measure_context(),
                        dp.ApproxDP(1, 1e-6))
    assert err.argument == "budget" and "PureDP" in (err.fix or "")


class Renamed:
    """The installed ``frame.bounds`` family under another name, counting its builds (a family under test)."""

    def __init__(self, name: str) -> None:
        self.inner = plugin_host().family("bounds")
        self.name, self.attach, self.methods = name, self.inner.attach, ()
        self.result_types: dict[str, type] = {}
        self.builds = 0

    def build(self, source: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.builds += 1
        return self.inner.build(source, *args, **kwargs)


def _session() -> dp.Session:
    data = pl.DataFrame({"x": [float(i % 10) for i in range(200)]})
    return dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit.row(), budget=dp.PureDP(10), seed=0)


def test_pin_families_adds_a_query_name_to_one_session_only() -> None:
    family = Renamed("my_bounds")
    sess = pin_families(_session(), family)
    lo, hi = sess.table("t").my_bounds("x", domain=(0, 10)).collect(dp.PureDP(1))
    assert family.builds == 1 and lo <= hi
    assert sess.spent() == dp.PureDP(1)
    with pytest.raises(AttributeError, match="my_bounds"):
        _session().table("t").my_bounds("x", domain=(0, 10))


def test_pin_families_wins_over_the_installed_family_of_that_name() -> None:
    family = Renamed("bounds")
    sess = pin_families(pin_families(_session(), Renamed("other")), family)
    sess.table("t").bounds("x", domain=(0, 10)).collect(dp.PureDP(1))
    assert family.builds == 1
    assert [e.name for e in sess.plugins.families()].count("bounds") == 1
    assert sess.plugins.families().entry("bounds").plugin == "dpframe.testing"
    assert "other" in sess.plugins.families()       # pins stack, as pin_mechanisms' do


@pytest.mark.parametrize("bad", [object(), Renamed("filter")])
def test_pin_families_refuses_what_is_not_a_family(bad: object) -> None:
    with pytest.raises(dp.PluginError) as e:
        pin_families(_session(), bad)
    assert e.value.fix


R = SeededRandomSource(0)
#: (call, the argument it must name, the builtin class the error must stay an instance of)
BAD_NOISE: list[tuple[Callable[[], object], str, type[Exception]]] = [
    (lambda: discrete_laplace(-1, 3, R), "scale", ValueError),
    (lambda: discrete_laplace(float("nan"), 3, R), "scale", ValueError),
    (lambda: discrete_laplace(Decimal("Infinity"), 3, R), "scale", ValueError),
    (lambda: discrete_laplace(2**60, 3, R), "scale", ValueError),
    (lambda: discrete_laplace("1", 3, R), "scale", TypeError),   # type: ignore[arg-type]
    (lambda: discrete_laplace(True, 3, R), "scale", TypeError),
    (lambda: discrete_laplace(1, -1, R), "size", ValueError),
    (lambda: discrete_laplace(1, 2.0, R), "size", TypeError),   # type: ignore[arg-type]
    (lambda: discrete_laplace(1, 3, np.random.default_rng(0)), "rng", TypeError),   # type: ignore[arg-type]
    (lambda: discrete_gaussian(0, 3, R), "sigma2", ValueError),
    (lambda: discrete_gaussian_batch([1, 2], [3], R), "sizes", ValueError),
    (lambda: discrete_laplace_batch([1], [3, 4], R), "sizes", ValueError),
    (lambda: bernoulli_exp(-1, 3, R), "gamma", ValueError),
    (lambda: bernoulli_exp(float("inf"), 3, R), "gamma", ValueError),
    # bernoulli_exp_ratio checked nothing: a float, bool or negative num array, a den of 0 or 2.5 drew from
    # a wrong law (U < exp(+1/3) is always true; 0.5 was read as a float, its exact fallback as int(0.5) = 0)
    (lambda: bernoulli_exp_ratio(np.array([0.5]), 3, R), "num", TypeError),
    (lambda: bernoulli_exp_ratio(np.array([True]), 3, R), "num", TypeError),
    (lambda: bernoulli_exp_ratio(np.array(["1"]), 3, R), "num", TypeError),
    (lambda: bernoulli_exp_ratio(np.array([1, 0.5], dtype=object), 3, R), "num", TypeError),
    (lambda: bernoulli_exp_ratio(np.array([-1]), 3, R), "num", ValueError),
    (lambda: bernoulli_exp_ratio(np.zeros((2, 2), dtype=np.int64), 3, R), "num", ValueError),   # was a numpy error
    (lambda: bernoulli_exp_ratio(np.array([2**70, -1], dtype=object), 3, R), "num", ValueError),
    (lambda: bernoulli_exp_ratio(np.array([1]), 0, R), "den", ValueError),
    (lambda: bernoulli_exp_ratio(np.array([1]), 2.5, R), "den", TypeError),   # type: ignore[arg-type]
    (lambda: bernoulli_exp_ratio(np.array([1]), 2, np.random.default_rng(0)), "rng", TypeError),   # type: ignore[arg-type]
    (lambda: discrete_laplace_variance(-1), "scale", ValueError),
    (lambda: discrete_laplace_tail(1, 1.5), "k", TypeError),   # type: ignore[arg-type]
    (lambda: discrete_laplace_log_tail(1, True), "k", TypeError),
    (lambda: SeededRandomSource(-1), "seed", ValueError),
    (lambda: SeededRandomSource("1"), "seed", TypeError),   # type: ignore[arg-type]
    (lambda: R.uniform_below(0, 3), "bound", ValueError),
    (lambda: R.uniform_below(2.0, 3), "bound", TypeError),   # type: ignore[arg-type]
    (lambda: R.permutation(-1), "n", ValueError),
    (lambda: R.random_uint64(1.5), "size", TypeError),   # type: ignore[arg-type]
    (lambda: exponential_index([1], -1, R), "scale", ValueError),
    (lambda: exponential_index([0.5], 1, R), "utilities", TypeError),
    (lambda: exponential_index([[1]], 1, R), "utilities", ValueError),
    (lambda: exponential_index(np.array([2**64 - 1], dtype=np.uint64), 1, R), "utilities", ValueError),
    (lambda: exponential_index_grouped([1, 2], 1, R, [0, 1]), "offsets", ValueError),
    (lambda: exponential_index_grouped([1, 2], 1, R, [0.0, 2.0]), "offsets", ValueError),
    (lambda: exponential_index([1, 2], 1, R, multiplicities=[1]), "multiplicities", ValueError),
    (lambda: exponential_index([1], 1, R, multiplicities=[-1]), "multiplicities", ValueError),
    (lambda: exponential_index([1], 1, R, multiplicities=[1.5]), "multiplicities", TypeError),
    (lambda: exponential_index([1, 2], 1, R, multiplicities=[0, 0]), "multiplicities", ValueError),
    (lambda: exponential_index([1], 1, "rng"), "rng", TypeError),   # type: ignore[arg-type]
    (lambda: epsilon_from_rho(Fraction(-1), bounded_range=True), "rho", ValueError),
    (lambda: epsilon_from_rho("1/2", bounded_range=True), "rho", TypeError),   # type: ignore[arg-type]
]


@pytest.mark.parametrize("case", range(len(BAD_NOISE)))
def test_noise_refuses_bad_arguments_with_dpframe_errors(case: int) -> None:
    call, argument, builtin = BAD_NOISE[case]
    with pytest.raises(dp.ArgumentError) as e:
        call()
    assert isinstance(e.value, builtin), type(e.value).__mro__
    assert e.value.argument == argument and e.value.fix, str(e.value)
    assert str(e.value).startswith(f"{argument}: ") and "Fix: " in str(e.value)


def test_bernoulli_exp_ratio_still_takes_int_uint_and_python_int_arrays() -> None:
    for num in (np.array([0, 3], dtype=np.int32), np.array([0, 3], dtype=np.uint64), [0, 3],
                np.array([0, 2**70], dtype=object), np.zeros(0, dtype=np.int64)):
        got = bernoulli_exp_ratio(np.asarray(num), 3, R)
        assert got.dtype == np.bool_ and got.size == np.asarray(num).size
        assert bool(got.flat[0]) if got.size else True      # exp(-0) = 1
    assert not bernoulli_exp_ratio(np.array([2**70], dtype=object), 1, R)[0]
