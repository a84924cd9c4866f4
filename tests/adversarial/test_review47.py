"""Review 47 (lead): the interactive D/D′ oracle through the remote boundary.

``test_interactive_oracle.py`` runs random sequences of interactive calls (sparse vectors, target-charging
channels, individual filters, gated releases, robust medians, ``run_until``, ordinary collects; refused
arguments, calls after a close or a halt) in the session's process. A remote analyst makes the same calls through
``dp.connect`` (``remote.sparse_vector(...)`` ...: :mod:`dpframe.remote.tools`; ``remote.gated_release``,
``remote.robust_median``, ``remote.run_until`` whose ``stop`` runs in the analyst's process). Here each drawn
sequence, restricted to what a server serves, runs through a served D and a served D′ (seeded alike, so both draw
the same noise), and must behave alike up to the first step whose released outputs differ — the same outcome
(released, or the same error class and text), the same public state of every tool and the same ledger — and,
step by step, as the same sequence does on D in process (the same seed: the same answers), public state and
ledger included.

Left out of the remote sequences, and why: ``propose_test_release`` is not served (its test and release are
Python functions that run charged queries, docs/remote.md); losing a handle (a remote tool stays open on its
connection until it is closed or the connection ends, where in process its finalizer commits it); entering a
channel twice (a remote channel is entered when it opens). The analyst's recording numbers stay in the analyst's
process (only their JSON values cross), so remote runs pass plain numbers.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

import dpframe as dp

from . import test_interactive_oracle as oracle
from .composed import apply_steps
from .test_interactive_oracle import (
    NEIGHBOURS,
    UNITS_ADDED,
    Hostile,
    Run,
    Seen,
    Sequence,
    Step,
    ledger,
    play,
    sequences,
)
from .test_review46 import CLIENT_SIDE

KEY = secrets.token_bytes(32)
REMOTE = settings(max_examples=10, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
#: A remote budget must be a decimal fraction (docs/remote.md: new prime factors in every budget would grow the
#: session's exact totals without bound); in process ``Fraction(1, 3)`` is taken.
NOT_DECIMAL = ("ArgumentError", "budget: epsilon is not a decimal fraction")
NO_OBJECT = ("released", ("answer", "no object"))
#: Calls a server does not serve, or that mean something else through a connection (see the module docstring).
NOT_SERVED = frozenset({"ptr", "lose", "ch_enter"})


def served_sequences() -> st.SearchStrategy[Sequence]:
    """Interactive sequences less the calls a server does not serve (at least one call left)."""
    def served(seq: Sequence) -> Sequence:
        return replace(seq, steps=[s for s in seq.steps if s.op not in NOT_SERVED])
    return sequences(max_steps=10).map(served).filter(lambda seq: bool(seq.steps))


@dataclass
class RemoteRun(Run):
    """A run whose calls go through a client of a server serving ``owner`` (the ledger is read there)."""

    owner: Any = None

    def arg(self, value: Any) -> Any:
        return value.value if isinstance(value, Hostile) else super().arg(value)

    def public(self) -> tuple[Any, ...]:
        return comparable(super().public()[:-1] + (ledger(self.owner),))

    def call(self, step: Step) -> Any:
        """As in process, except the gated release, the robust median and ``run_until``: the client's methods."""
        if step.op not in ("gated", "robust", "run_until"):
            return super().call(step)
        a = {k: self.arg(v) for k, v in step.args}
        if step.op == "run_until":          # stop runs here, asked by the server between steps
            stop_at = a.pop("stop_at")

            def stop(results: list[pl.DataFrame]) -> bool:
                self.stopped_on.append([r.clone() for r in results])
                return len(results) == stop_at

            out = self.sess.run_until(a["steps"], a["budget"], stop, delta=a["delta"], stops=a["stops"],
                                      refund=a["refund"])
            for seen in self.stopped_on[-len(out):]:
                assert len(seen) <= len(out) and all(s.equals(r) for s, r in zip(seen, out, strict=False)), \
                    "stop received what run_until did not return"
            self.stopped_on.clear()
            return out
        if step.op == "gated":
            return self.sess.gated_release(a["query"], a["budget"], a["gate"], a["threshold"], a["gate_budget"],
                                           refund=a["refund"])
        frame = apply_steps(self.sess.table("t"), a["steps"])
        return self.sess.robust_median(frame, a["column"], a["bounds"]).collect(a["budget"], refund=a["refund"])


def comparable(public: tuple[Any, ...]) -> tuple[Any, ...]:
    """A run's public state less what only differs in form: a filter's repr (a remote handle's is its own)."""
    sv, ch, filt, rows = public
    return sv, ch, None if filt is None else filt[0], rows


@contextmanager
def client(sess: dp.Session) -> Iterator[dp.Remote]:
    with dp.Server(sess, ("127.0.0.1", 0), authkey=KEY).start() as server, \
            dp.connect(server.address, authkey=KEY) as remote:
        yield remote


def play_remote(sess: dp.Session, seq: Sequence) -> tuple[Seen, ...]:
    with client(sess) as remote:
        return tuple(play(sess, seq, RemoteRun(remote, owner=sess)))     # type: ignore[arg-type]


def not_decimal(outcome: tuple[Any, ...]) -> bool:
    return outcome[0] == NOT_DECIMAL[0] and str(outcome[1]).startswith(NOT_DECIMAL[1])


def client_side(outcome: tuple[Any, ...]) -> bool:
    """Refused in the analyst's process before anything is sent (a query JSON cannot carry): the remote run checks
    its arguments in another order than the tool does in process (both refuse, nothing changes)."""
    return outcome[0] != "released" and any(text in str(outcome[1]) for text in CLIENT_SIDE)


def alike_in_process(remote: tuple[Seen, ...], here: list[Seen], seq: Sequence) -> None:
    """Step by step, the remote run on D and the in-process run on D: the same outcome and public state.

    Except where only one side refuses because of the boundary: a query the client cannot send (refused when it is
    built or sent, where in process another check may come first), a budget that is not a decimal fraction, or a call
    on a tool that is not open whose query the analyst's process refused when built (a remote chain is typed on the
    server, so it is never sent). If nothing changed on either side the runs go on alike; else they are compared up
    to there.
    """
    for i, (r, h) in enumerate(zip(remote, here, strict=True)):
        if r.outcome != h.outcome and (client_side(r.outcome) or not_decimal(r.outcome)
                                       or r.outcome == NO_OBJECT and h.outcome[0] != "released"):
            if r.after != comparable(h.after):      # the call ran in process: from here the runs hold other state
                event("the runs part at a refusal only the remote boundary makes")
                return
            event("both refused (one by the remote boundary), nothing changed")
            continue
        assert r.outcome == h.outcome, f"step {i} of {seq!r}\n  remote : {r.outcome}\n  process: {h.outcome}"
        assert r.after == comparable(h.after), \
            f"step {i} of {seq!r}: public state\n  remote : {r.after}\n  process: {comparable(h.after)}"


def check(seq: Sequence, extra: Any, backend: str) -> str:
    """The sequence through a served D and D′ (alike up to the first released difference), then against D in
    process; returns a label for events."""
    return oracle.check(seq, extra, backend, play_remote, lambda on_d: alike_in_process(
        on_d, play(NEIGHBOURS.d(backend, (seq.unit, seq.kind), seq.storage), seq), seq))


@REMOTE
@given(seq=served_sequences(), extra=UNITS_ADDED)
def test_interactive_calls_sent_to_a_server_behave_alike_on_neighbours_and_as_in_process(seq: Sequence,
                                                                                         extra: Any) -> None:
    event(check(seq, extra, "polars"))


@pytest.mark.slow
@settings(REMOTE, max_examples=300)
@given(seq=served_sequences(), extra=UNITS_ADDED)
def test_many_interactive_sequences_sent_to_a_server_behave_alike(seq: Sequence, extra: Any) -> None:
    event(check(seq, extra, "duckdb"))
