"""Review 31/31b leftovers: public objects that could be changed in place after they were built.

``SQLQuery.notes`` was the compiler's list (``explain()`` printed whatever was appended to it), query
families' ``result_types`` were plain dicts (``dp.<Name>`` exports followed any edit), and the session's
plugin host (``sess.plugins``) took new attribute values (``sess.plugins.blocked = ...``).
"""

from __future__ import annotations

import copy
from typing import Any

import polars as pl
import pytest

import dpframe as dp
from dpframe.plugin import plugin_host


def _session() -> dp.Session:
    return dp.Session({"t": pl.DataFrame({"u": [1, 2, 3], "g": ["a", "b", "a"]})}, privacy_unit=dp.PrivacyUnit("u"),
                      budget=dp.ApproxDP(1, 1e-6))


def test_sql_notes_are_read_only() -> None:
    q = _session().sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g")
    assert isinstance(q.notes, tuple) and q.notes        # (a GROUP BY without public keys is noted)
    with pytest.raises(AttributeError):
        q.notes = ("forged",)  # type: ignore[misc]
    text = str(q.explain(dp.ApproxDP(1, 1e-6)))
    assert "note: GROUP BY g" in text and "forged" not in text


def test_result_types_of_query_families_are_read_only() -> None:
    families = [e.item for e in plugin_host().families()]
    assert any(f.result_types for f in families)
    for family in families:
        with pytest.raises(TypeError):
            family.result_types["Forged"] = object  # type: ignore[index]
    assert not hasattr(dp, "Forged")


@pytest.mark.parametrize("name, value", [("blocked", frozenset()), ("pm", None), ("first_party", {"evil"})])
def test_the_session_plugin_host_takes_no_new_attribute_values(name: str, value: Any) -> None:
    host = _session().plugins
    with pytest.raises(AttributeError, match="read-only"):
        setattr(host, name, value)
    with pytest.raises(TypeError):
        copy.copy(host)
    assert isinstance(host.first_party, frozenset) and "core" in host.first_party
