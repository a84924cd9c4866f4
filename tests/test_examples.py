"""Every script in examples/ runs to completion and prints something, in a plain ``pip install .`` too.

Parametrized over the glob, so a new example is picked up without touching this file. Each script runs
first as in a plain install (tests/plain_install.py hides the extras and the example plugin): it must
exit 0 and print something, and where it needs something missing it must say what to install. A script
that said so runs again in this (dev) install, where it must do the real thing.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
EXAMPLES = sorted((TESTS.parent / "examples").glob("*.py"))
PLAIN = TESTS / "plain_install.py"


def test_there_are_examples():
    assert EXAMPLES, "examples/*.py not found next to tests/"


def run(args: list[str], cwd: Path) -> str:
    # Run from an empty directory so an example cannot depend on (or litter) the checkout.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("DPFRAME_BLOCK_PLUGINS", None)
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          encoding="utf-8", timeout=120)
    assert proc.returncode == 0, f"{args[-1]} exited {proc.returncode}\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{args[-1]} printed nothing"
    return proc.stdout


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path):
    plain = run([str(PLAIN), str(script)], tmp_path)
    if "pip install" in plain:
        assert "Traceback" not in plain
        assert "pip install" not in run([str(script)], tmp_path), f"{script.name} asks for an install in the dev env"


def test_the_plugin_example_says_what_to_install_when_the_plugin_is_missing(tmp_path: Path):
    out = run([str(PLAIN), str(TESTS.parent / "examples" / "custom_plugin.py")], tmp_path)
    assert "pip install -e plugins/dpframe_histogram" in out


def test_the_plain_install_hides_the_extras_and_the_plugin(tmp_path: Path):
    probe = tmp_path / "probe.py"
    probe.write_text("import importlib.util\nfrom dpframe.plugin import plugin_host\n"
                     "print([importlib.util.find_spec(m) for m in ('pandas', 'matplotlib', 'dpframe_histogram')])\n"
                     "print(sorted(p.name for p in plugin_host().describe()))\n")
    out = run([str(PLAIN), str(probe)], tmp_path)
    assert out.splitlines()[0] == "[None, None, None]"
    assert "histogram" not in out.splitlines()[1]
