"""Every script in examples/ runs to completion and prints something.

Parametrized over the glob, so a new example is picked up without touching this file.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


def test_there_are_examples():
    assert EXAMPLES, "examples/*.py not found next to tests/"


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path):
    # Run from an empty directory so an example cannot depend on (or litter) the checkout.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, encoding="utf-8", timeout=120)
    assert proc.returncode == 0, f"{script.name} exited {proc.returncode}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{script.name} printed nothing"
