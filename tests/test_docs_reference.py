"""Every public name is documented: ``dp.__all__`` in docs/reference.md.

(Hooks: tests/plugins/test_registry_policy.py.)
"""

from pathlib import Path

import pytest

import dpframe as dp

REFERENCE = (Path(__file__).resolve().parent.parent / "docs" / "reference.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(dp.__all__))
def test_public_name_is_in_the_reference(name: str) -> None:
    assert f"`dp.{name}" in REFERENCE or f"`{name}(" in REFERENCE or f"`{name}`" in REFERENCE, \
        f"dp.{name} is public but docs/reference.md does not mention it"
