"""Run a script as in a plain ``pip install .``: ``python tests/plain_install.py SCRIPT [ARGS...]``.

What a plain install lacks is hidden from the script: the optional extras' packages (matplotlib,
pandas, pyspark) cannot be imported, and the example plugin ``dpframe-histogram`` is neither importable
nor listed among the installed distributions (so its ``dpframe`` entry point does not load).
"""

from __future__ import annotations

import importlib.metadata as md
import runpy
import sys
from collections.abc import Iterator
from typing import Any

MODULES = ("dpframe_histogram", "matplotlib", "pandas", "pyspark")
DISTRIBUTIONS = frozenset({"dpframe-histogram", "matplotlib", "pandas", "pyspark"})


class _Hiding:
    """A finder of ``sys.meta_path`` that finds nothing under the hidden top-level names."""

    def __init__(self, finder: Any) -> None:
        self.finder = finder

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.partition(".")[0] in MODULES:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.finder, attribute)


def hide() -> None:
    """Make the modules unimportable (as if absent: ``find_spec`` answers None) and the distributions invisible."""
    sys.meta_path[:] = [_Hiding(f) for f in sys.meta_path]
    everything = md.distributions

    def distributions(**kwargs: object) -> Iterator[md.Distribution]:
        return (d for d in everything(**kwargs) if (d.metadata["Name"] or "").lower() not in DISTRIBUTIONS)

    md.distributions = distributions  # type: ignore[assignment]


if __name__ == "__main__":
    hide()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
