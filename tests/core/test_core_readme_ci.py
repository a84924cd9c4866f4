"""CI runs exactly the README's test command (audit issue 2, G8)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"^python3 -m venv .* -m pytest$", re.M)


def test_the_readme_has_one_test_command_with_the_ci_extras() -> None:
    commands = COMMAND.findall((ROOT / "README.md").read_text())
    assert len(commands) == 1
    assert commands[0].startswith("python3 -m venv .venv && .venv/bin/pip install -U pip && ")
    assert '-e ".[test,spark]" -e plugins/dpframe_histogram' in commands[0]


def test_ci_reads_its_command_from_the_readme_and_keeps_pytests_exit_code(tmp_path: Path) -> None:
    """Run .ci/run on a stand-in checkout whose README command fails in pytest (exit 5) or in pip (3), or
    whose mypy fails (1) on the package or on the plugins."""
    ci = tmp_path / ".ci"
    ci.mkdir()
    (ci / "run").write_text((ROOT / ".ci" / "run").read_text())
    (ci / "run").chmod(0o755)
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for tool, code in (("pip", "${PIPEXIT:-0}"), ("python", "${PYEXIT:-5}"), ("ruff", "0")):
        (bin_ / tool).write_text(f"#!/bin/sh\nexit {code}\n")
        (bin_ / tool).chmod(0o755)
    (bin_ / "mypy").write_text('#!/bin/sh\n[ "$1" = "${MYPYFAILS:-}" ] && exit 1\nexit 0\n')
    (bin_ / "mypy").chmod(0o755)
    (tmp_path / "README.md").write_text("```bash\npython3 -m venv --help > /dev/null && .venv/bin/pip install -U pip"
                                        " && .venv/bin/python -m pytest\n```\n")
    for env, code in (({}, 5), ({"PYEXIT": "0"}, 0), ({"PYEXIT": "0", "PIPEXIT": "3"}, 3),
                      ({"PYEXIT": "0", "MYPYFAILS": "dpframe"}, 1), ({"PYEXIT": "0", "MYPYFAILS": "plugins"}, 1)):
        out = subprocess.run([str(ci / "run")], capture_output=True, text=True, env={"PATH": os.environ["PATH"], **env},
                             timeout=60)
        assert out.returncode == code, out.stdout + out.stderr
        assert ("passed" in out.stdout) == (code == 0)


def test_pytest_reports_skip_reasons() -> None:
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-rs" in addopts.split()
