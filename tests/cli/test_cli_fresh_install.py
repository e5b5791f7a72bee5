"""The README's first command, run literally on a clean copy of the checkout in a new venv."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OFFLINE = (
    "Temporary failure in name resolution",
    "Failed to establish a new connection",
    "Network is unreachable",
    "No matching distribution found for hatchling",
)


def _outside_any_venv() -> dict[str, str]:
    """The environment minus the venv running the tests: the command must make its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env.pop("TACHOGRAPH_STORE", None)
    return env


@pytest.mark.slow
def test_readme_demo_command_in_a_fresh_venv(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    (command,) = [
        x for x in readme.splitlines() if x.strip().endswith("pip install . && tacho demo")
    ]
    clean = tmp_path / "clean"
    shutil.copytree(
        ROOT,
        clean,
        ignore=shutil.ignore_patterns(
            ".venv",
            ".git",
            "*_cache",
            "__pycache__",
            ".tachograph",
            ".hypothesis",
            "results",
            "build",
            "dist",
            "*.egg-info",
        ),
    )
    proc = subprocess.run(
        ["bash", "-c", command.strip()],
        cwd=clean,
        env=_outside_any_venv(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(sign in output for sign in OFFLINE):
        pytest.skip("no package index reachable to install into a fresh venv")
    assert proc.returncode == 0, output[-3000:]
    assert re.search(r"replay of run_\w+: DIVERGED", proc.stdout)
    assert "seq 9: args_changed" in proc.stdout
    assert re.search(r"FAILED at seq 9 \(line 10\), check 5 \(payload digest\)", proc.stdout)
    assert (clean / ".tachograph" / "tachograph.db").is_file()
