"""Review 53g: a plugin author's leftovers, and the remote server's one interactive slot.

* A deferred table (``DeferredMapping``) read with ``.get`` or ``in`` turned a ``KeyError`` its build raised (a
  plugin's bug) into a missing value: ``explain()`` showed no accuracy text, silently.
* Two plugins' families declaring a result type of one name as different classes: ``dp.<Name>`` was whichever
  registered last, silently. Refused at registration (and when pinned), naming both plugins.
* A family whose ``run`` failed after the charge said only "the query failed while running (ValueError)", with a
  fix about column types: now it names the family and ``run()``, says the charge stands, and still quotes nothing of
  the exception (its message may hold private values). A failure while the engine reads the rows stays the engine's.
* ``Noise.calibrate(..., dp.ApproxDP(...))`` from a family's plan reached the analyst as a BudgetConversionError
  naming ``share``, an argument the analyst never passed: now a PluginError naming the family, ``budget`` and the
  analyst's way round it (``dp.PureDP(ε)``). A budget too small for the sampler is still the analyst's BudgetError.
* ``dp.TopKFailed`` (and the other built-in result types) were ``object`` to a type checker (module ``__getattr__``).
"""

from __future__ import annotations

import ast
import dataclasses
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.budgets import Budget
from dpframe.family import check_format, run_family
from dpframe.measures import Measure
from dpframe.mechanism import MeasureContext, MechanismPlan, Noise
from dpframe.mechanism.deferred import DeferredMapping
from dpframe.noise import RandomSource, SeededRandomSource, discrete_laplace
from dpframe.plugin import PluginHost, plugin_host
from dpframe.release import PluginFailure
from dpframe.remote.server import PADDED
from dpframe.remote.wire import frame_bytes
from dpframe.testing import pin_families, pin_mechanisms
from tests.adversarial.doubles import ROWS, CountPlan, FakeMechanism, FamilyHooks, RowsFamily, RowsQuery

DATA = pl.DataFrame({"u": [i // 2 for i in range(400)], "city": ["Oslo", "Rome"] * 200,
                     "x": [float(i % 13) for i in range(400)]})


def _session(budget: dp.Budget = dp.PureDP(10)) -> dp.Session:
    return dp.Session({"t": DATA}, privacy_unit=dp.PrivacyUnit("u", max_rows=2), budget=budget, seed=0)


def _refused_free(sess: dp.Session, call: Callable[[], Any], kind: type[dp.DPFrameError]) -> dp.DPFrameError:
    with pytest.raises(dp.DPFrameError) as info:
        call()
    assert type(info.value) is kind, f"{type(info.value).__name__}: {info.value}"
    assert sess.spent().epsilon == 0 and sess.history().height == 0      # type: ignore[attr-defined]
    return info.value


# --- 1. A deferred table's KeyError is the plugin's bug, not a missing key -------------------------------------------

def test_a_deferred_tables_keyerror_is_not_a_missing_key() -> None:
    broken = DeferredMapping(lambda: {"count": "±3"}["len"])      # a plugin's build looking up a key it lacks
    with pytest.raises(KeyError, match="len"):
        broken.get("count", "")
    with pytest.raises(KeyError, match="len"):
        "count" in broken     # noqa: B015 — the membership test itself must raise
    honest = DeferredMapping(lambda: {"count": "±3"})
    assert honest.get("count") == "±3" and honest.get("len", "-") == "-" and "count" in honest and "len" not in honest


class LazyTexts(Mapping[str, str]):
    """A plugin's own lazy mapping (not dpframe's DeferredMapping): ``Mapping.get`` swallows its KeyError too."""

    def __init__(self, build: Callable[[], dict[str, str]]) -> None:
        self._build = build

    def __getitem__(self, key: str) -> str:
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())


class Counting(FakeMechanism):
    """A noisy row count whose accuracy texts are built on first read, by ``table`` (a mapping type)."""

    handles = frozenset({"counting"})
    notions = frozenset({"pure", "zcdp"})

    def __init__(self, table: Callable[[Callable[[], dict[str, str]]], Mapping[str, str]], broken: bool) -> None:
        super().__init__(f"counting_{getattr(table, '__name__', 'table')}_{broken}")
        self.table, self.broken = table, broken

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> MechanismPlan:
        noise = Noise.calibrate(Fraction(ctx.unit.max_rows), share)
        texts = {m.output_name: f"±{noise.ci95():.3g}" for m in measures}

        def accuracy() -> dict[str, str]:
            return {name: texts["typo" if self.broken else name] for name in texts}
        return CountPlan(self.name, tuple(measures), (ROWS,), noise.cost(), accuracy=self.table(accuracy),
                         used=noise)


@pytest.mark.parametrize("table", [DeferredMapping, LazyTexts])
def test_explain_names_the_mechanism_whose_deferred_texts_fail(table: Any) -> None:
    """The attack: explain() printed the measure with no accuracy text at all (``p.accuracy.get(name, "")``)."""
    sess = pin_mechanisms(_session(), Counting(table, broken=True))
    query = sess.table("t").agg(dp.measure("counting"))
    err = _refused_free(sess, lambda: query.explain(dp.PureDP(1)), dp.PluginError)
    assert "counting_" in str(err) and "explain()" in str(err) and "KeyError" in str(err), str(err)
    honest = pin_mechanisms(_session(), Counting(table, broken=False))
    [row] = honest.table("t").agg(dp.measure("counting")).explain(dp.PureDP(1)).data["measures"]
    assert row["accuracy"].startswith("±")


# --- 2. One result-type name, two classes: refused, naming both plugins ---------------------------------------------

class Fit:
    """One plugin's result."""


class OtherFit:
    """Another plugin's result under the same name."""


def fit_family(name: str, result: type) -> RowsFamily:
    """A family declaring ``result`` as its result type ``Fit`` (registration is what is checked)."""
    family = RowsFamily(name)
    family.result_types = {"Fit": result}
    return family


def test_two_plugins_one_result_type_name_are_refused_naming_both() -> None:
    host = PluginHost()
    host.register(FamilyHooks(fit_family("fit_a", Fit)), name="plugin_a")
    with pytest.raises(dp.PluginError) as info:
        host.register(FamilyHooks(fit_family("fit_b", OtherFit)), name="plugin_b")
    text = str(info.value)
    assert "'plugin_a'" in text and "'plugin_b'" in text and "'Fit'" in text and "OtherFit" in text, text
    assert info.value.argument == "dpframe_query_families" and "another name" in (info.value.fix or "")
    assert host.result_types()["Fit"] is Fit              # the refused plugin left nothing behind
    assert "fit_b" not in host.families()


def test_one_class_under_one_name_and_a_replacement_are_no_conflict() -> None:
    host = PluginHost()
    host.register(FamilyHooks(fit_family("fit_a", Fit)), name="plugin_a")
    host.register(FamilyHooks(fit_family("fit_c", Fit)), name="plugin_c")      # the same class: shared
    assert host.result_types()["Fit"] is Fit
    replacing = FamilyHooks(fit_family("fit_a", OtherFit), replaces="fit_a")
    with pytest.raises(dp.PluginError, match="'plugin_c'"):     # fit_c still declares Fit as the first class
        host.register(replacing, name="plugin_d")
    host.unregister("plugin_c")
    host.register(replacing, name="plugin_d")                  # fit_a replaced: its result types with it
    assert host.result_types()["Fit"] is OtherFit


def test_a_pinned_family_cannot_rebind_an_installed_result_type() -> None:
    """dp.TopKFailed is the top_k family's; a pinned family under another name declaring its own TopKFailed."""
    sess = _session()
    shadow = fit_family("shadow", Fit)
    shadow.result_types = {"TopKFailed": Fit}
    with pytest.raises(dp.PluginError, match="TopKFailed"):
        pin_families(sess, shadow)
    assert sess.plugins.result_types()["TopKFailed"] is dp.TopKFailed
    top_k = plugin_host().family("top_k")
    pin_families(sess, top_k)           # the same family (same classes) pinned again: fine
    assert sess.plugins.result_types()["TopKFailed"] is dp.TopKFailed


# --- 3. A family's run failing after the charge names the family, keeps the charge, quotes nothing -------------------

class FailingQuery(RowsQuery):
    def share(self, budget: Any) -> Budget:
        return budget if isinstance(budget, dp.ZCDP | dp.PureDP) or self.how == "calibrate" \
            else dp.PureDP(budget.epsilon)

    def released(self, exact: int, noise: Noise, rng: RandomSource) -> int:
        if self.how == "run":
            raise ValueError(f"no model for {exact} rows")            # the message holds the private count
        if self.how == "sampler":
            discrete_laplace(-exact, 1, rng)                          # a sampler refusing a data-derived scale
        return super().released(exact, noise, rng)


def failing_rows() -> RowsFamily:
    return RowsFamily("failing_rows", FailingQuery)


@pytest.mark.parametrize(("where", "kind"), [("run", "ValueError"), ("sampler", "ArgumentError")])
def test_a_family_run_failing_after_the_charge_names_the_family(where: str, kind: str) -> None:
    sess = pin_families(_session(), failing_rows())
    with pytest.raises(dp.DPFrameError) as info:
        sess.table("t").failing_rows(where).collect(dp.PureDP(1))
    text = str(info.value)
    assert "query family 'failing_rows' failed in run()" in text and kind in text, text
    assert "stays charged" in text and "Frame.schema" not in (info.value.fix or "")
    assert "400" not in text and "no model" not in text and "-400" not in text
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert sess.spent() == dp.PureDP(1) and sess.history()["status"].to_list() == ["failed"]
    assert sess.table("t").failing_rows().collect(dp.PureDP(1)) > 0      # the honest run


def test_a_failure_while_the_engine_reads_stays_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that fails under the reader is not blamed on the family that asked it to read."""
    sess = pin_families(_session(), failing_rows())
    backend = sess._catalog.backend(None)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the backend broke on row 17")
    monkeypatch.setattr(backend, "statistics", broken)
    with pytest.raises(dp.DPFrameError) as info:
        sess.table("t").failing_rows().collect(dp.PureDP(1))
    text = str(info.value)
    assert "(RuntimeError)" in text and "failing_rows" not in text and "row 17" not in text, text
    assert sess.spent() == dp.PureDP(1) and sess.history()["status"].to_list() == ["failed"]


def test_run_family_passes_the_engines_own_failures() -> None:
    """A mechanism's failure the engine named (a family running agg's plan) and an engine refusal pass as they are."""
    named = PluginFailure("mechanism", "histogram", "release", "ValueError")

    def raises(error: BaseException) -> Callable[[Any, Any], Any]:
        def run(reader: Any, rng: Any) -> Any:
            raise error
        return run
    with pytest.raises(PluginFailure) as info:
        run_family("mine", raises(named), None, SeededRandomSource(0))   # type: ignore[arg-type]
    assert info.value is named
    # An engine refusal: raised in dpframe's own code (review 54f: a refusal raised in the family's own code is the
    # family's, tests/adversarial/test_review54f.py).
    with pytest.raises(dp.PlanError) as plan_info:
        run_family("mine", lambda reader, rng: check_format("xml"), None, SeededRandomSource(0))  # type: ignore[arg-type]
    assert plan_info.value.argument == "format"


# --- 4. Noise.calibrate's refusal of an (ε, δ) share names the analyst's argument ------------------------------------

def test_a_family_calibrating_to_an_approx_budget_names_budget_and_the_way_round() -> None:
    sess = pin_families(_session(dp.ApproxDP(10, 1e-6)), failing_rows())
    query = sess.table("t").failing_rows("calibrate")
    for step in ("cost", "explain", "collect"):
        err = _refused_free(sess, lambda s=step: getattr(query, s)(dp.ApproxDP(0.5, 1e-7)), dp.PluginError)
        assert err.argument == "budget" and "failing_rows(calibrate)" in str(err), str(err)
        assert "Noise.calibrate" in str(err) and "dp.PureDP(0.5)" in (err.fix or ""), err.fix
    assert query.collect(dp.PureDP(0.5)) > 0             # the way round the fix gives


class WrongShare(FakeMechanism):
    """A mechanism whose plan calibrates to an (ε, δ) share it made itself."""

    name = "wrong_share"

    def plan(self, measures: Sequence[Measure], ctx: MeasureContext, share: Budget) -> MechanismPlan:
        noise = Noise.calibrate(Fraction(1), dp.ApproxDP(share.epsilon, 1e-9))   # type: ignore[attr-defined]
        return CountPlan(self.name, tuple(measures), (ROWS,), noise.cost(), used=noise)


def test_a_mechanism_calibrating_to_a_wrong_share_is_its_own_bug() -> None:
    sess = pin_mechanisms(_session(), WrongShare())
    err = _refused_free(sess, lambda: sess.table("t").agg(dp.measure("wrong_share")).cost(dp.PureDP(1)),
                        dp.PluginError)
    assert "wrong_share" in str(err) and "plan()" in str(err) and err.argument == "mechanism", str(err)


def test_a_budget_too_small_for_the_sampler_is_still_the_analysts() -> None:
    sess = _session()
    err = _refused_free(sess, lambda: sess.table("t").agg(dp.sum("x", bounds=(0, 1e12))).cost(dp.PureDP(1e-300)),
                        dp.BudgetError)
    assert err.argument == "budget"


# --- 5. The built-in result types are typed on dp -------------------------------------------------------------------

def _typed_exports() -> dict[str, str]:
    """``dpframe/__init__.py``'s ``if TYPE_CHECKING:`` imports: name -> module."""
    tree = ast.parse(Path(dp.__file__).read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None
                for alias in imp.names:
                    assert alias.asname == alias.name, "re-exported: `import X as X` (mypy strict)"
                    found[alias.name] = imp.module
    return found


def test_the_built_in_result_types_are_declared_for_type_checkers() -> None:
    """``dp.__getattr__`` returns ``object`` to a type checker: ``isinstance(out, dp.TopKFailed)`` then narrowed
    nothing (``out.reason`` an error under mypy strict). Every built-in family's result type is imported for type
    checkers under its dp name, from the module that defines the class the family declares."""
    host = plugin_host()
    built_in = {name: kind for e in host.families() if e.plugin in host.first_party
                for name, kind in e.item.result_types.items()}
    assert {"TopKFailed", "TopKPartial", "NoAnswer"} <= set(built_in)
    assert _typed_exports() == {name: kind.__module__ for name, kind in built_in.items()}
    assert all(getattr(dp, name) is kind for name, kind in built_in.items())


@pytest.mark.parametrize("kind", ["TopKFailed", "TopKPartial", "NoAnswer"])
def test_the_result_types_are_frozen_typed_and_shown(kind: str) -> None:
    cls = getattr(dp, kind)
    fields = dataclasses.fields(cls)
    assert cls.__dataclass_params__.frozen and all(f.type not in ("Any", "object") for f in fields)
    values = {"k": 3, "method": "stable", "reason": "gap too small", "required_rows": 10, "reliable_rows": 20}
    out = cls(**{f.name: values[f.name] for f in fields if f.name in values})
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.reason = "changed"
    assert repr(out).startswith(f"{kind}(") and "gap too small" in repr(out) and not out


# --- 6. A remote analyst cannot hold the session's one interactive stream idle -------------------------------------

KEY = secrets.token_bytes(32)
VISITS = pl.DataFrame({"visitor": [i % 700 for i in range(6000)], "store": [i % 12 for i in range(6000)]})


def _visits(budget: dp.Budget = dp.PureDP(10)) -> dp.Session:
    return dp.Session({"visits": VISITS}, privacy_unit=dp.PrivacyUnit("visitor", max_rows=10), budget=budget, seed=0)


def _store(remote: Any, store: int) -> Any:
    return remote.table("visits").filter(pl.col("store") == store).agg(dp.len())


def _wait_idle(seconds: float, remote: Any) -> None:
    """``seconds`` during which ``remote`` keeps its connection busy with other requests (not the stream's)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        remote.remaining()
        time.sleep(0.05)


@pytest.mark.parametrize("release", [None, dp.PureDP(0.5)])
def test_an_idle_stream_is_released_to_another_client_charged_once(release: Any) -> None:
    """The attack: one analyst opens the session's one sparse vector and keeps it (busy on other requests, or
    silent) for ``idle_timeout`` (an hour): every other analyst is refused meanwhile. Now a stream unused for
    ``stream_idle`` is closed for the next client who asks, as leaving its with block: charged once, never lost."""
    sess = _visits()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=0.4).start() as server, \
            dp.connect(server.address, authkey=KEY) as holder, dp.connect(server.address, authkey=KEY) as other:
        sv = holder.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1), release=release)
        first = sv.test(_store(holder, 0))
        with pytest.raises(dp.PlanError, match="still open"):        # in use a moment ago: refused as before
            other.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1))
        _wait_idle(0.6, holder)                                      # its other requests do not keep the stream
        with other.sparse_vector(threshold=480, max_positives=1, budget=dp.PureDP(1)) as theirs:
            assert theirs.test(_store(other, 1)) in (True, False)
        with pytest.raises(dp.PlanError, match="the server closed this sparse_vector") as info:
            sv.test(_store(holder, 2))
        assert info.value.argument == "test" and "charge stands" in str(info.value)
        assert sv.closed and sv.answers == (first,) and "reserved" in sv.status()
        values = sv.values
        with sv:        # leaving its with block closes it again: nothing more charged
            pass
        assert sv.values == values and (release is None) == (values == {})
    history = sess.history()
    assert history.height == 2 and history["status"].to_list() == ["committed", "committed"], history
    twin = _visits()            # in process, the holder closing its stream before the other opens: the same charges
    mine = twin.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1), release=release)
    assert mine.test(_store(twin, 0)) == first
    mine.close()
    with twin.sparse_vector(threshold=480, max_positives=1, budget=dp.PureDP(1)) as theirs:
        theirs.test(_store(twin, 1))
    assert sess.spent() == twin.spent() and history["cost"].to_list() == twin.history()["cost"].to_list()


def test_an_idle_channel_is_released_too_its_reservation_kept() -> None:
    """A target-charging channel holds the same slot: released alike, its whole reservation kept (no refund)."""
    sess = _visits(dp.ApproxDP(50, 1e-5))
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=0.3).start() as server, \
            dp.connect(server.address, authkey=KEY) as holder, dp.connect(server.address, authkey=KEY) as other:
        ch = holder.target_charging(epsilon=0.5, max_hits=30, delta=1e-6)
        ch.conditional_release(_store(holder, 0), when=dp.above(10**6))
        reserved = sess.history()["cost"].to_list()
        time.sleep(0.5)
        with other.sparse_vector(threshold=480, max_positives=1, budget=dp.PureDP(1)):
            pass
        with pytest.raises(dp.PlanError, match="the server closed this target_charging"):
            ch.conditional_release(_store(holder, 1), when=dp.above(10**6))
        assert ch.closed and ch.calls == 1 and "closed" in ch.status()
        ch.close()
    assert sess.history()["status"].to_list() == ["committed", "committed"]
    assert sess.history()["cost"].to_list()[:1] == reserved            # the channel's whole reservation, once


def test_releasing_a_stream_whose_connection_just_ended_is_nothing() -> None:
    """The holder's connection may end (its tools closed and forgotten) between the idle check and the release:
    the other client's open then goes on, rather than failing on the forgotten handle (a KeyError)."""
    from dpframe.remote.tools import Tools

    tools = Tools(_visits())
    tools.release_idle(1, 60.0)
    assert tools.idle_stream(time.monotonic()) is None


def test_no_release_without_stream_idle_and_the_argument_is_checked() -> None:
    sess = _visits()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=None).start() as server, \
            dp.connect(server.address, authkey=KEY) as holder, dp.connect(server.address, authkey=KEY) as other:
        with holder.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1)) as sv:
            time.sleep(0.3)
            with pytest.raises(dp.PlanError, match="still open"):
                other.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1))
            assert sv.test(_store(holder, 0)) in (True, False)
    for bad in (0, -1, True, "60", float("inf"), float("nan")):
        with pytest.raises(dp.ArgumentError, match="stream_idle"):
            dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=bad)


def test_an_open_that_released_a_stream_is_held_under_pad(padded_holds: list[Any]) -> None:
    """Closing a sparse vector with ``release`` measures its values: the open that caused it reads rows, so a padded
    server holds its reply as a release's; an open that released nothing is not held (it reads no row)."""
    sess = _visits()
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY, stream_idle=0.2, pad=0.05).start() as server, \
            dp.connect(server.address, authkey=KEY) as holder, dp.connect(server.address, authkey=KEY) as other:
        holder.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1), release=dp.PureDP(0.5))
        before = len(padded_holds)
        time.sleep(0.3)
        other.sparse_vector(threshold=480, max_positives=1, budget=dp.PureDP(1)).close()
        assert len(padded_holds) == before + 2          # the releasing open, then the close (a "use")


def test_remote_confidence_intervals_are_the_local_ones() -> None:
    """The carried "remote pad/raw ci" note, checked: ``collect(budget, ci=...)`` through a server gives the frame the
    same query gives in process (same seed), and nothing more: the interval columns are post-processing of the
    noisy statistics, no exact input crosses, and the reply's bytes are the local frame's Arrow stream (so its size
    tells no more than the local result); the release is a padded ``collect``."""
    def query(s: Any) -> Any:
        return s.table("visits").group_by("store").agg(dp.len(), dp.mean("visitor", bounds=(0, 700)),
                                                       dp.sum("visitor", bounds=(0, 700)))
    here, there = _visits(dp.ApproxDP(10, 1e-6)), _visits(dp.ApproxDP(10, 1e-6))
    local = query(here).collect(dp.ApproxDP(1, 1e-7), ci=0.9)
    with dp.Server(there, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        far = query(remote).collect(dp.ApproxDP(1, 1e-7), ci=0.9)
    assert far.equals(local) and far.columns == local.columns and far.schema == local.schema
    assert len(frame_bytes(far)) == len(frame_bytes(local)) and "collect" in PADDED
    assert there.spent() == here.spent()


def test_a_call_starting_between_the_idle_check_and_the_release_keeps_its_stream() -> None:
    """Check-then-act: the server finds a stream idle (:meth:`Tools.idle_stream`, under the connection's lock), lets
    the lock go, then closes it (:meth:`Tools.release_idle`). A holder's call starting in between ran beside the close
    on another thread. The release now re-checks, under the same lock the call takes, that no call is under way and
    that the stream is still idle long enough; else it closes nothing."""
    from dpframe.remote.tools import Tools

    sess = _visits()
    tools = Tools(sess)
    sv = sess.sparse_vector(threshold=480, max_positives=2, budget=dp.PureDP(1))
    tools._open[1] = ("sparse_vector", sv)          # as Tools.open leaves it (its arguments need a client's packing)
    tools._used[1] = time.monotonic() - 100.0
    found = tools.idle_stream(time.monotonic())
    assert found is not None and found[0] == 1
    tools._busy[1] = 1                              # the holder's call begins (Tools.use, under the lock)
    assert tools.release_idle(1, 60.0) is False
    assert not sv.closed
    tools._busy[1] = 0                              # its call ends: used just now, not idle for 60 s
    tools._used[1] = time.monotonic()
    assert tools.release_idle(1, 60.0) is False and not sv.closed
    tools._used[1] = time.monotonic() - 100.0       # unused for 100 s: released
    assert tools.release_idle(1, 60.0) is True and sv.closed
