"""A pytest plugin (auto-loaded through the ``pytest11`` entry point) for plugin authors' test suites.

It registers the ``slow`` marker that :class:`dpframe.testing.MechanismConformance` uses, so a plugin's
suite also runs under ``--strict-markers`` without extra configuration.
"""

from __future__ import annotations

from typing import Any


def pytest_configure(config: Any) -> None:
    """Register dpframe's markers."""
    config.addinivalue_line("markers", "slow: long statistical tests (deselect with -m 'not slow')")
