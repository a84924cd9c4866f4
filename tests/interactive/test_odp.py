"""Output-DP settlement: ledger rules and the exact-enumeration harness of Alg. 1 (digest 002, O7/O8)."""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import polars as pl
import pytest

import dpframe as dp
from dpframe.accounting import BasicAccountant, Ledger, ZCDPAccountant
from dpframe.budgets import make
from dpframe.errors import BudgetConversionError, LedgerError
from dpframe.interactive.odp import OdpSpec, run_ex_post


def _session(budget: dp.Budget, **kw: object) -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"x": [1, 2, 3]})}, privacy_unit=dp.PrivacyUnit.row(), budget=budget,
                      seed=0, **kw)  # type: ignore[arg-type]


def test_settle_lowers_epsilon_keeps_delta() -> None:
    led = Ledger(None, BasicAccountant(dp.ApproxDP(1, 1e-6)))
    cid = led.reserve(make("approx", Fraction(1, 2), Fraction(1, 10**7)), "m", "toy")
    assert led.spent() == make("approx", Fraction(1, 2), Fraction(1, 10**7))
    led.settle(cid, make("approx", Fraction(1, 10), Fraction(1, 10**7)), "⊥")
    assert led.spent() == make("approx", Fraction(1, 10), Fraction(1, 10**7))
    assert [c.status for c in led.charges()] == ["committed"]
    with pytest.raises(LedgerError):   # settled once only
        led.settle(cid, make("approx", Fraction(0), Fraction(1, 10**7)), "⊥")


def test_delta_is_never_refunded_and_epsilon_never_raised() -> None:
    led = Ledger(None, BasicAccountant(dp.ApproxDP(1, 1e-6)))
    cid = led.reserve(make("approx", Fraction(1, 2), Fraction(1, 10**7)), "m", "toy")
    with pytest.raises(LedgerError, match="δ is never refunded"):
        led.settle(cid, make("approx", Fraction(1, 10), Fraction(0)), "⊥")
    with pytest.raises(LedgerError):
        led.settle(cid, make("approx", Fraction(3, 4), Fraction(1, 10**7)), "⊥")
    assert led.spent() == make("approx", Fraction(1, 2), Fraction(1, 10**7))   # untouched


def test_settle_refused_under_non_additive_accountant() -> None:
    led = Ledger(None, ZCDPAccountant(dp.ZCDP(1)))
    cid = led.reserve(make("zcdp", Fraction(1, 2)), "m", "toy")
    with pytest.raises(LedgerError, match="basic"):
        led.settle(cid, make("zcdp", Fraction(1, 4)), "⊥")
    sess = _session(dp.ZCDP(1))
    spec = OdpSpec({"⊥": Fraction(0), "v": Fraction(1, 2)}, Fraction(0), lambda y: "⊥")
    run_ex_post(sess, spec, "toy", "toy", lambda: None)      # no refund: worst cell charged
    assert sess.spent() == dp.ZCDP(Fraction(1, 8))


def test_crash_between_reserve_and_settle_keeps_full_reservation(tmp_path: object) -> None:
    path = f"{tmp_path}/l.db"
    led = Ledger(path, BasicAccountant(dp.PureDP(1)))
    led.reserve(make("pure", Fraction(1, 2)), "m", "toy")      # the process dies here
    led.close()
    again = Ledger(path, BasicAccountant(dp.PureDP(1)))
    assert again.spent() == make("pure", Fraction(1, 2))


def test_settlement_seen_by_another_ledger_on_the_same_file(tmp_path: object) -> None:
    path = f"{tmp_path}/l.db"
    a, b = Ledger(path, BasicAccountant(dp.PureDP(1))), Ledger(path, BasicAccountant(dp.PureDP(1)))
    cid = a.reserve(make("pure", Fraction(1, 2)), "m", "toy")
    assert b.spent() == make("pure", Fraction(1, 2))
    a.settle(cid, make("pure", Fraction(1, 8)), "⊥")
    assert b.spent() == make("pure", Fraction(1, 8))


def test_run_ex_post_failure_keeps_worst_and_pure_session_refuses_delta() -> None:
    sess = _session(dp.PureDP(1))
    spec = OdpSpec({"⊥": Fraction(0), "v": Fraction(1, 2)}, Fraction(0), lambda y: "⊥" if y is None else "v")

    def boom() -> None:
        raise RuntimeError("private 42")

    with pytest.raises(dp.DPFrameError) as e:
        run_ex_post(sess, spec, "toy", "toy", boom)
    assert "42" not in str(e.value)
    assert sess.spent() == dp.PureDP(Fraction(1, 2))
    with_delta = OdpSpec({"v": Fraction(1, 10)}, Fraction(1, 10**6), lambda y: "v")
    with pytest.raises(BudgetConversionError):
        run_ex_post(sess, with_delta, "toy", "toy", lambda: None)
    assert sess.spent() == dp.PureDP(Fraction(1, 2))


# ------------------------------------------------------------------ exact enumeration of Alg. 1
# A toy mechanism = (outputs, pmf under x0, pmf under x1, ODP spec). The harness lets an adversary keep
# invoking it while the *accountant* admits it, enumerates every view, and returns the δ the whole
# interaction needs at ε_g: max over directions of Σ_view max(0, P_b(view) − e^{ε_g} P_{1−b}(view)).

def _needed_delta(mech: dict[str, tuple[float, float]], spec: OdpSpec, eps_g: float, policy: str,
                  total: dp.Budget, rounds: int) -> tuple[float, float, float]:
    """(δ needed at ε_g, total probability of the views under x0, E_x0[number of mechanisms run])."""
    views: list[tuple[float, float, int]] = []

    def admit_sound(led: Ledger) -> int | None:
        try:
            return led.reserve(spec.budget(), "m", "toy")
        except dp.BudgetExceededError:
            return None

    def walk(prefix: list[str], p0: float, p1: float, state: tuple[float, float]) -> None:
        # state: (ε spent, δ spent) for the unsound policy; the sound policy replays a real Ledger.
        if policy == "sound":
            led = Ledger(None, BasicAccountant(total))
            for cell in prefix:
                cid = led.reserve(spec.budget(), "m", "toy")
                assert cid is not None
                led.settle(cid, spec.budget(cell), cell)
            admitted = len(prefix) < rounds and admit_sound(led) is not None
        else:   # charges δ only when the output is not ⊥ (the bug the Lean proof caught)
            eps_s, d_s = state
            admitted = (len(prefix) < rounds and eps_s + float(spec.worst) <= eps_g + 1e-12
                        and d_s + float(spec.delta) <= float(getattr(total, "delta", 0)) + 1e-15)
        if not admitted:
            views.append((p0, p1, len(prefix)))
            return
        for out, (q0, q1) in mech.items():
            if q0 == 0 and q1 == 0:
                continue
            cell = spec.classify(out)
            new = (state[0] + float(spec.cells[cell]), state[1] + (float(spec.delta) if out != "⊥" else 0.0))
            walk([*prefix, cell], p0 * q0, p1 * q1, new)

    walk([], 1.0, 1.0, (0.0, 0.0))
    e = math.exp(eps_g)
    need = max(sum(max(0.0, a - e * b) for a, b, _ in views), sum(max(0.0, b - e * a) for a, b, _ in views))
    return need, sum(a for a, _, _ in views), sum(a * n for a, _, n in views)


def test_o7_coin_mechanism_needs_no_delta_and_answers_two_on_average() -> None:
    # heads: randomized response with ε = 1 (r0/r1); tails: ⊥ at no cost. ε_g = 1, δ_g = 0, k = 12.
    p = math.e / (1 + math.e)
    mech = {"⊥": (0.5, 0.5), "r0": (0.5 * p, 0.5 * (1 - p)), "r1": (0.5 * (1 - p), 0.5 * p)}
    spec = OdpSpec({"⊥": Fraction(0), "r": Fraction(1)}, Fraction(0), lambda y: "⊥" if y == "⊥" else "r")
    need, mass, answered = _needed_delta(mech, spec, 1.0, "sound", dp.PureDP(1), rounds=12)
    assert need <= 1e-12 and mass == pytest.approx(1.0)
    # E[#mechanisms answered] under dpframe's real ledger (refunds on ⊥) = 2 − 2^{−11} (digest O7),
    # against exactly 1 under worst-case accounting.
    assert answered == pytest.approx(2 - 2**-11, rel=1e-12)


def test_o8_delta_refund_counterexample_is_caught() -> None:
    d = 1e-3
    mech = {"T": (d, 0.0), "⊥": (1 - d, 1.0)}
    spec = OdpSpec({"T": Fraction(0), "⊥": Fraction(repr(math.log(1 / (1 - d))))}, Fraction(1, 1000),
                   lambda y: y)
    total = dp.ApproxDP(1, Fraction(1, 1000))
    sound, _, _ = _needed_delta(mech, spec, 1.0, "sound", total, rounds=2000)
    assert sound <= 1e-3 + 1e-12
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)    # the unsound accountant admits ~999 invocations in a chain
    try:
        unsound, _, _ = _needed_delta(mech, spec, 1.0, "unsound", total, rounds=2000)
    finally:
        sys.setrecursionlimit(limit)
    assert unsound == pytest.approx(0.632, abs=2e-3)     # needed δ ≫ δ_g: the harness catches it
    assert unsound > 100 * 1e-3


def test_odp_spec_is_validated_and_has_a_trivial_form() -> None:
    from dpframe.errors import PluginError

    for cells, delta, argument in [({}, 0, "cells"), ({"a": float("inf")}, 0, "cells['a']"),
                                   ({"a": -1}, 0, "cells['a']"), ({"a": "1"}, 0, "cells['a']"),
                                   ({1: 1}, 0, "cells"), ({"a": 1}, 1.5, "delta"), ({"a": 1}, float("nan"), "delta")]:
        with pytest.raises(PluginError) as info:
            OdpSpec(cells, delta, lambda y: "a")  # type: ignore[arg-type]
        assert info.value.argument == argument
    with pytest.raises(PluginError, match="classify"):
        OdpSpec({"a": 1}, 0, "a")  # type: ignore[arg-type]
    spec = OdpSpec({"⊥": 0.25, "value": 1}, 1e-7, lambda y: "⊥" if y is None else "value")  # type: ignore[dict-item, arg-type]
    assert spec.cells == {"⊥": Fraction(1, 4), "value": Fraction(1)} and spec.worst == 1
    assert spec.budget("⊥") == dp.ApproxDP(Fraction(1, 4), 1e-7)
    assert OdpSpec.trivial(0.5).budget() == dp.PureDP(0.5)


def test_odp_delta_validates_a_discrete_spec() -> None:
    """The exact spec validator (digest §1.2): the coin toy's spec needs δ = 0, a too-cheap one does not."""
    from dpframe.interactive.odp import odp_delta

    p = math.e / (1 + math.e)
    law0 = {"⊥": 0.5, "r0": 0.5 * p, "r1": 0.5 * (1 - p)}
    law1 = {"⊥": 0.5, "r0": 0.5 * (1 - p), "r1": 0.5 * p}
    good = OdpSpec({"⊥": 0, "r": 1}, 0, lambda y: "⊥" if y == "⊥" else "r")  # type: ignore[dict-item, arg-type]
    cheap = OdpSpec({"⊥": 0, "r": 0.5}, 0, lambda y: "⊥" if y == "⊥" else "r")  # type: ignore[dict-item, arg-type]
    assert odp_delta(law0, law1, good) <= 1e-15
    assert odp_delta(law0, law1, cheap) == pytest.approx(0.5 * (p - math.exp(0.5) * (1 - p)), rel=1e-12)


BAD_VALUES = [None, 3, 10**30, float("nan"), b"x", ["x"], ("x",), {"x": 1}, object(), lambda: "x"]


@pytest.mark.parametrize("bad", BAD_VALUES, ids=lambda v: type(v).__name__)
def test_run_ex_post_and_propose_test_release_refuse_bad_arguments_free(bad: object) -> None:
    """Each argument of the wrong type is the dpframe error naming it, nothing charged (they reached the
    ledger's SQLite as ``IntegrityError``/``ProgrammingError``/``OverflowError``, or were an ``AttributeError``)."""
    from dpframe.errors import DPFrameError
    from dpframe.interactive.ptr import propose_test_release

    sess = _session(dp.PureDP(10))
    spec = OdpSpec.trivial(1)
    calls: dict[str, object] = {
        "session": lambda: run_ex_post(bad, spec, "w", "m", lambda: 1),  # type: ignore[arg-type]
        "spec": lambda: run_ex_post(sess, bad, "w", "m", lambda: 1),  # type: ignore[arg-type]
        "what": lambda: run_ex_post(sess, spec, bad, "m", lambda: 1),  # type: ignore[arg-type]
        "mechanisms": lambda: run_ex_post(sess, spec, "w", bad, lambda: 1),  # type: ignore[arg-type]
        "run": lambda: run_ex_post(sess, spec, "w", "m", bad),  # type: ignore[arg-type]
    }
    ptr = {"session": lambda: propose_test_release(bad, lambda: True, lambda: 1,  # type: ignore[arg-type]
                                                   test_epsilon=1, release_epsilon=1),
           "what": lambda: propose_test_release(sess, lambda: True, lambda: 1, test_epsilon=1,
                                                release_epsilon=1, what=bad),  # type: ignore[arg-type]
           "mechanisms": lambda: propose_test_release(sess, lambda: True, lambda: 1, test_epsilon=1,
                                                      release_epsilon=1, mechanisms=bad)}  # type: ignore[arg-type]
    for argument, call in [*calls.items(), *ptr.items()]:
        if argument == "run" and callable(bad):
            continue
        with pytest.raises(DPFrameError) as info:
            call()  # type: ignore[operator]
        assert info.value.argument == argument, (argument, info.value)
    assert sess.remaining() == dp.PureDP(10) and sess.history().height == 0
    with pytest.raises(dp.ArgumentError, match="what"):
        run_ex_post(sess, spec, "", "m", lambda: 1)
    assert sess.history().height == 0


def test_odp_delta_refuses_bad_laws_and_specs() -> None:
    from dpframe.errors import DPFrameError
    from dpframe.interactive.odp import odp_delta

    spec = OdpSpec({"⊥": 0, "r": 1}, 0, lambda y: "⊥" if y is None else "r")  # type: ignore[dict-item, arg-type]
    law = {None: 0.5, 1: 0.5}
    for bad in BAD_VALUES:
        calls = [("spec", lambda: odp_delta(law, law, bad)),  # type: ignore[arg-type]
                 ("law0", lambda: odp_delta({None: bad}, law, spec))]  # type: ignore[dict-item]
        if not isinstance(bad, dict):      # ({"x": 1} is a law: the outcome "x" for sure)
            calls += [("law0", lambda: odp_delta(bad, law, spec)),  # type: ignore[arg-type]
                      ("law1", lambda: odp_delta(law, bad, spec))]  # type: ignore[arg-type]
        for argument, call in calls:
            with pytest.raises(DPFrameError) as info:
                call()
            assert info.value.argument == argument, (bad, argument, info.value)
    for probability in (-0.1, 1.5, float("inf")):
        with pytest.raises(dp.ArgumentError, match=r"law1"):
            odp_delta(law, {None: probability}, spec)
    odd = OdpSpec({"⊥": 0}, 0, lambda y: "elsewhere")
    with pytest.raises(dp.PluginError, match="unknown cell"):
        odp_delta(law, law, odd)


def test_refund_flags_of_numpy_type_mean_what_they_say_and_numbers_are_refused() -> None:
    """``refund=np.bool_(False)`` passed the check (it equals False) but was then read by identity as a refund, and
    ``refund=0`` too; the client sends numpy's bool as a plain one, so in process and remote disagreed (review 48)."""
    import numpy as np

    from dpframe.interactive.ptr import propose_test_release

    coin = OdpSpec({"⊥": Fraction(0), "value": Fraction(1)}, Fraction(0), lambda y: "⊥" if y is None else "value")
    sess = _session(dp.PureDP(10))
    run_ex_post(sess, coin, "coin", "toy", lambda: None, refund=np.bool_(False))     # no refund: the worst cell
    assert sess.spent() == dp.PureDP(1)
    run_ex_post(sess, coin, "coin", "toy", lambda: None, refund=np.bool_(True))      # refunded to the ⊥ cell: 0
    assert sess.spent() == dp.PureDP(1)
    assert propose_test_release(sess, lambda: False, lambda: 1, test_epsilon=1, release_epsilon=1,
                                refund=np.bool_(False)) is None
    assert sess.spent() == dp.PureDP(3)                                          # charged ε_test + ε_rel
    for bad in (0, 1, 1.0, "False", np.array([False])):
        for call in (lambda: run_ex_post(sess, coin, "coin", "toy", lambda: None, refund=bad),  # type: ignore[arg-type]
                     lambda: propose_test_release(sess, lambda: True, lambda: 1, test_epsilon=1, release_epsilon=1,
                                                  refund=bad),  # type: ignore[arg-type]
                     lambda: sess.sparse_vector(1, 1, dp.PureDP(1), refund=bad)):  # type: ignore[arg-type]
            with pytest.raises(dp.ArgumentError, match="^refund: must be None, True or False"):
                call()
    assert sess.spent() == dp.PureDP(3)
