"""The OpenAI example of docs/integrations.md runs as written, against the fake server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fakes.llm_server import FakeLLMServer

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## An agent on the OpenAI SDK, recorded in one line", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_documented_agent_loop_records_in_one_line_and_replays_offline(
    srv: FakeLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _example()
    tachograph_lines = [
        line for line in code.splitlines() if "instrument(" in line and "import" not in line
    ]
    assert tachograph_lines == [
        "client = instrument(OpenAI())  # the one line: every call this client makes is recorded"
    ]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs")

    # Imported (as tacho replay --agent imports it), the example records nothing.
    exec(compile(code, str(DOC), "exec"), {"__name__": "docs_example"})
    assert srv.request_count == 0
    assert not (tmp_path / "runs.db").exists()

    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, str(DOC), "exec"), namespace)

    out = capsys.readouterr().out
    assert "REPRODUCED" in out
    report: Any = namespace["report"]
    run: Any = namespace["run"]
    assert report.reproduced
    assert report.output == run.output
    assert run.output.startswith("Refund of 19.99 issued for order B-2002.")
    # Three model calls were recorded; the replay, run right after, sent none.
    assert srv.request_count == 3
    assert (tmp_path / "runs.db").is_file()

    # The divergence shown in the same page is what a one-word edit gives.
    edited = code.replace("Refund damaged orders.", "Refund all orders.")
    edited = edited.split('if __name__ == "__main__":')[0]
    exec(compile(edited, str(DOC), "exec"), namespace)
    tachograph = namespace["tachograph"]
    diverged = tachograph.replay("runs.db", run.run_id, namespace["billing_agent"])
    assert diverged.first.seq == 1
    shown = diverged.first.render().splitlines()[3:5]
    page = DOC.read_text(encoding="utf-8")
    assert all(line in page for line in shown), shown
    assert srv.request_count == 3
