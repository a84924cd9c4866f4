"""A row-level session over one table ``t``, served and connected to: the remote attacks' common ground."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import polars as pl

import dpframe as dp


@contextmanager
def served_table(data: pl.DataFrame, key: bytes) -> Iterator[tuple[dp.Session, dp.Remote]]:
    """A seeded session over ``{"t": data}`` (unit ``u``, ε = 10), served on a free port, and a client of it."""
    sess = dp.Session({"t": data}, privacy_unit=dp.PrivacyUnit("u"), budget=dp.PureDP(10), seed=0)
    with dp.Server(sess, ("127.0.0.1", 0), authkey=key).start() as server, \
            dp.connect(server.address, authkey=key) as remote:
        yield sess, remote
