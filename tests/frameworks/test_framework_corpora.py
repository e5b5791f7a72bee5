"""The framework corpora pass `tacho test` as CI runs it: a fresh process, from the
repository root, with no model server and no model settings in the environment.

A fresh process matters: what an SDK does once per process (the OpenAI SDK asks the platform
for its processor, which runs ``uname -p``) happens inside the replay's closed world there.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CORPORA = [
    ("pydantic_ai", "examples.pydantic_ai_refund:agent"),
    pytest.param(
        "google_adk",
        "examples.google_adk_refund:agent",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("google") is None
            or importlib.util.find_spec("google.adk") is None,
            reason="google-adk is installed apart from the dev extra",
        ),
    ),
    ("openai_agents", "examples.openai_agents_refund:agent"),
    # no model: a shop API that is not running; a request sent in replay would be refused
    ("httpx", "examples.httpx_refund:agent"),
]


@pytest.mark.parametrize(("corpus", "agent"), CORPORA)
def test_tacho_test_passes_on_the_corpus_in_a_fresh_process(
    corpus: str, agent: str, tmp_path: Path
) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "GOOGLE_", "GEMINI_"))
    }
    env["REFUND_COUNTER"] = str(tmp_path / "refunds.json")
    tacho = shutil.which("tacho", path=str(Path(sys.executable).parent))
    main = "from tachograph.cli import main; main()"
    command = [tacho] if tacho else [sys.executable, "-c", main]
    done = subprocess.run(
        [*command, "test", f"corpus/{corpus}", "--agent", agent],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 reproduced. PASSED" in done.stdout
    assert not (tmp_path / "refunds.json").exists()  # the refund was served, not made
