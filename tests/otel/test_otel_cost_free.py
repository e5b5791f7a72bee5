"""With the bridge off, recording pays nothing for it: OpenTelemetry is never even imported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

SCRIPT = """
import json, sys
import tachograph as tg

@tg.tool(effect="read")
def lookup(order_id: str) -> dict:
    return {"order_id": order_id}

@tg.model("m-2026-01-01", provider="test")
def ask(request: dict) -> dict:
    return {"id": "r1", "model": "m-2026-01-01", "content": "ok"}

def agent(task):
    ask({"messages": [{"role": "user", "content": task}]})
    tg.decide("route", "lookup")
    return lookup("A-1")

result = tg.record_run(agent, "go", store=sys.argv[1], actor="probe")
store = tg.open_store(sys.argv[1])
events = store.events(result.run_id)
import tachograph.cli.app  # the tacho command, with its plugged otel group
print(json.dumps({
    "status": result.status,
    "events": len(events),
    "trace_ids": [e.trace_id for e in events],
    "otel_modules": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
}))
"""


def _run(python: str, env: dict[str, str], tmp_path: Path) -> dict[str, object]:
    done = subprocess.run(
        [python, "-c", SCRIPT, str(tmp_path / "probe.db")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_recording_without_the_bridge_never_imports_opentelemetry(
    python: str, child_env: dict[str, str], tmp_path: Path
) -> None:
    report = _run(python, child_env, tmp_path)
    assert report["status"] == "ok"
    assert report["events"] == 7
    assert report["otel_modules"] == []
    assert report["trace_ids"] == [None] * 7


def test_the_probe_would_see_opentelemetry_if_it_were_imported(
    python: str, child_env: dict[str, str], tmp_path: Path
) -> None:
    """The same probe, with the bridge on, does see OpenTelemetry (so the check above can fail)."""
    script_env = dict(child_env)
    script_env["PYTHONSTARTUP"] = ""
    done = subprocess.run(
        [
            python,
            "-c",
            "import tachograph.otel as o; o.instrument(); exec(open(0).read())",
            str(tmp_path / "probe.db"),
        ],
        input=SCRIPT,
        env=script_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "opentelemetry.trace" in report["otel_modules"]
    assert report["status"] == "ok"
