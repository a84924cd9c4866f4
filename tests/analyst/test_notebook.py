"""Issue 19 item 3: the example notebook runs cell by cell (without Jupyter) and shows rich reprs."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"

pytest.importorskip("matplotlib")


def _runner():
    spec = importlib.util.spec_from_file_location("run_notebook", ROOT / "docs" / "scripts" / "run_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_notebook_runs_and_shows_html(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    outputs = _runner().execute(NOTEBOOK)
    shown = [o["data"] for cell in outputs for o in cell if o["output_type"] == "execute_result"]
    html = [d["text/html"] for d in shown if "text/html" in d]
    assert any('class="dpframe-session"' in h for h in html)
    assert any('class="dpframe-explanation"' in h for h in html)
    assert any('class="dpframe-query"' in h for h in html)
    assert any("image/png" in d for d in shown)
    assert os.listdir(tmp_path) == []


def test_the_stored_notebook_shows_its_outputs() -> None:
    cells = [c for c in json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in cells), "run: python docs/scripts/run_notebook.py examples/notebook.ipynb --write"
