"""Review 51c: a plugin author's second day (leftovers of stop 50's plugin review).

1. ``dpframe plugins`` shows routing order: which mechanism handles a measure kind under each notion (and who
   else offers it, reachable only with ``mechanism=``), which family builds each query name (``replaces=``).
2. The quantiles and histogram mechanisms split their share with the public ``dpframe.budgets.divide``; a share
   of a notion they do not declare is a dpframe error, not an AttributeError of the plugin.
3. ``dpframe.noise``'s samplers refuse bad arguments with dpframe errors naming the argument and the fix.
4. ``dpframe.testing.pin_families`` routes a query name to a family object in one session (tests only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import polars as pl
import pytest
from dpframe_aggregates import AggregateMechanism
from dpframe_quantiles.mechanism import QuantileMechanism

import dpframe as dp
from dpframe import cli
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
from dpframe.plugin import PluginHost, Route, plugin_host
from dpframe.testing import check_refused, measure_context, pin_families, pin_mechanisms


def test_quantiles_refuse_an_approximate_share_with_a_dpframe_error() -> None:
    """The mechanism declares pure/zCDP; a conformance test calling plan() with (ε, δ) got an AttributeError."""
    err = check_refused(QuantileMechanism(), dp.quantile("x", 0.5, bounds=(0, 100)), measure_context(),
                        dp.ApproxDP(1, 1e-6))
    assert err.argument == "budget" and "PureDP" in (err.fix or "")


class Renamed:
    """An installed family (``frame.bounds``) under another name, counting its builds (a family under test)."""

    def __init__(self, name: str, inner: str = "bounds") -> None:
        self.inner = plugin_host().family(inner)
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


def _mechanism(name: str, kinds: set[str], notions: tuple[str, ...] = ("pure", "zcdp")) -> AggregateMechanism:
    m = AggregateMechanism()
    m.name, m.handles, m.notions = name, frozenset(kinds), frozenset(notions)     # type: ignore[misc]
    return m


class _Hooks:
    def __init__(self, mechanisms: Sequence[tuple[Any, str | None]] = (),
                 families: Sequence[tuple[Any, str | None]] = ()) -> None:
        self.mechanisms, self.families = mechanisms, families

    @dp.hookimpl
    def dpframe_mechanisms(self, register: Any) -> None:
        for m, replaces in self.mechanisms:
            register(m, replaces=replaces)

    @dp.hookimpl
    def dpframe_query_families(self, register: Any) -> None:
        for f, replaces in self.families:
            register(f, replaces=replaces)


def _host() -> PluginHost:
    """A fresh host: the installed plugins, and three third-party ones an author might have written."""
    host = PluginHost()
    host.register(_Hooks([(_mechanism("fastsum", {"sum", "mykind"}, ("pure",)), None)]), name="fast")
    host.register(_Hooks([(_mechanism("othersum", {"mykind"}), None)], [(Renamed("top_k", "top_k"), "top_k")]),
                  name="other")
    host.register(_Hooks([(_mechanism("quantiles", {"quantile"}), "quantiles")]), name="myq")
    return host


def _route(host: PluginHost, what: str, name: str, notion: str) -> Route:
    [found] = [r for r in host.routes() if (r.what, r.name, r.notion) == (what, name, notion)]
    return found


def test_routes_say_which_mechanism_handles_a_kind_and_who_else_offers_it() -> None:
    host = _host()
    plain = _route(host, "measure", "sum", "pure")      # the built-in wins; fastsum runs only when named
    assert (plain.handler, plain.plugin, plain.also) == ("aggregates", "aggregates", ("fastsum (fast)",))
    assert host.mechanism_for("sum", "pure") is not host.mechanism_for("sum", "pure", "fastsum")
    zcdp = _route(host, "measure", "sum", "zcdp")
    assert (zcdp.handler, zcdp.also) == ("aggregates", ())
    ambiguous = _route(host, "measure", "mykind", "pure")   # two third-party mechanisms: refused unless named
    assert ambiguous.handler is None and ambiguous.also == ("fastsum (fast)", "othersum (other)")
    with pytest.raises(dp.PluginError, match="several plugins"):
        host.mechanism_for("mykind", "pure")
    single = _route(host, "measure", "mykind", "zcdp")
    assert (single.handler, single.plugin, single.also) == ("othersum", "other", ())
    replaced = _route(host, "measure", "quantile", "pure")   # replaces=: the built-in's name, another plugin's object
    assert (replaced.handler, replaced.plugin, replaced.replaced) == ("quantiles", "myq", "quantiles")
    assert host.mechanism_for("quantile", "pure") is dict(host.mechanisms())["myq"]
    family = _route(host, "query", "top_k", "group_by")
    assert (family.handler, family.plugin, family.replaced) == ("top_k", "other", "topk")
    assert family.plugin == host.families().entry("top_k").plugin
    assert _route(host, "query", "bounds", "frame").plugin == "quantiles"


def test_routes_follow_the_mechanisms_a_test_pins() -> None:
    sess = pin_mechanisms(_session(), _mechanism("mine", {"len"}, ("pure",)))
    route = _route(sess.plugins, "measure", "len", "pure")
    assert (route.handler, route.plugin, route.also) == ("mine", "dpframe.testing", ("aggregates (aggregates)",))
    assert _route(pin_families(_session(), Renamed("bounds")).plugins, "query", "bounds", "frame").plugin == \
        "dpframe.testing"


def test_the_cli_lists_routing_order(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    host = _host()
    monkeypatch.setattr(cli, "plugin_host", lambda: host)
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    table, routing = out.split("\n\n", 1)
    assert table.splitlines()[0].split() == ["name", "version", "package", "provides"]
    lines = routing.splitlines()
    row = next(line for line in lines if line.split()[:2] == ["sum", "pure"])
    assert row.split()[2:] == ["aggregates", "(aggregates)", "fastsum", "(fast)"]
    row = next(line for line in lines if line.split()[:2] == ["sum", "zcdp"])     # what differs gets its own row
    assert row.split()[2:] == ["aggregates", "(aggregates)"] and row == row.rstrip()
    row = next(line for line in lines if line.split()[0] == "len")                 # what does not, one row
    assert row.split()[1:] == ["pure/zcdp", "aggregates", "(aggregates)"]
    row = next(line for line in lines if line.split()[:2] == ["mykind", "pure"])
    assert "ambiguous" in row and "fastsum (fast), othersum (other)" in row
    row = next(line for line in lines if line.split()[:2] == ["quantile", "pure/zcdp"])
    assert "quantiles (myq, replaces quantiles's)" in row
    row = next(line for line in lines if line.split()[:2] == ["top_k", "group_by"])
    assert "top_k (other, replaces topk's)" in row
    kinds = [line.split()[0] for line in lines[2:lines.index("")]]
    assert kinds == sorted(kinds)


def test_pin_mechanisms_checks_what_registering_checks() -> None:
    """A pinned mechanism declaring ``handles = "len"`` (a str) was routed by substring (``"e" in "len"``)."""
    text = _mechanism("mine", {"len"})
    text.handles = "len"    # type: ignore[misc,assignment]
    with pytest.raises(dp.PluginError, match="declares handles") as e:
        pin_mechanisms(_session(), text)
    assert e.value.argument == "mechanisms" and e.value.fix
