"""What a trace did not capture is shown as "not captured" (never as null or {}), and a value
the span says is JSON is stored as JSON (never as a string of JSON)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

import tachograph as tg
import tachograph.otel as tgo
from conftest import GOLDEN
from tachograph.otel.export import build_spans
from tachograph.store import SQLiteStore
from tachograph.views.captured import display_payload, not_captured


def _tacho(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("TACHOGRAPH_STORE", "FORCE_COLOR")}
    code = "import sys\nfrom tachograph.cli import main\nsys.argv[0] = 'tacho'\nmain()"
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**env, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def no_content(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "runs.db"
    with SQLiteStore(db) as store:
        (run,) = tgo.import_otlp(store, GOLDEN / "genai_no_content.json").runs
    return db, run.run_id


def _summaries(text: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split(None, 4)
        if len(parts) == 5 and parts[0].isdigit():
            rows.setdefault(parts[3], []).append(parts[4])
    return rows


def test_show_says_not_captured_where_the_trace_captured_nothing(
    no_content: tuple[Path, str],
) -> None:
    db, run_id = no_content
    rows = _summaries(_tacho("--store", str(db), "show", run_id))
    assert rows["run.started"] == ["input not captured"]
    assert rows["model.request"] == ["gpt-4o-mini: messages not captured"] * 2
    assert rows["model.response"] == [
        "message not captured (finish tool_calls)  [103 tokens]",
        "message not captured (finish stop)  [137 tokens]",
    ]
    assert rows["tool.requested"] == ["get_weather(not captured)  [irreversible]"]
    assert rows["tool.completed"] == ["get_weather -> not captured"]
    assert rows["run.finished"] == ["ok: not captured"]
    for summaries in rows.values():
        assert not any("null" in s or "{}" in s for s in summaries)


def test_a_recorded_null_is_still_shown_as_null(tmp_path: Path) -> None:
    """The other side of the distinction: a tool that returned nothing, in a native run."""

    @tg.tool(effect="read")
    def nothing(x: int) -> None:
        return None

    def agent(task: str) -> str:
        nothing(x=1)
        return ""

    db = tmp_path / "runs.db"
    run = tg.record_run(agent, "go", store=db)
    rows = _summaries(_tacho("--store", str(db), "show", run.run_id))
    assert rows["tool.completed"] == ["nothing -> null"]
    assert [s.strip() for s in rows["run.finished"]] == ["ok:"]  # an empty output


def test_show_full_and_json_list_what_was_not_captured(no_content: tuple[Path, str]) -> None:
    db, run_id = no_content
    full = _tacho("--store", str(db), "show", run_id, "--full")
    blocks = full.split("\n\n")
    completed = next(b for b in blocks if "tool.completed" in b)
    assert "result: not captured" in completed
    assert '"result"' not in completed  # the stored placeholder (null) is not shown
    assert '"not_captured"' not in completed
    started = next(b for b in blocks if "run.started" in b)
    assert "input: not captured" in started
    assert '"input"' not in started
    data = json.loads(_tacho("--store", str(db), "show", run_id, "--json", "--full"))
    by_type = {e["type"]: e for e in data["events"]}
    assert by_type["tool.completed"]["not_captured"] == ["result"]
    assert by_type["model.request"]["not_captured"] == ["messages", "tools"]
    # --json keeps the payload as stored
    assert by_type["tool.completed"]["payload"]["result"] is None


def test_display_payload_keeps_recorded_values() -> None:
    payload = {"tool": "t", "result": {"a": 1}, "not_captured": ["args"]}
    shown, missing = display_payload("tool.completed", payload)
    assert shown == {"tool": "t", "result": {"a": 1}}
    assert missing == ("args",)
    assert not_captured({"not_captured": "result"}) == ()  # malformed: says nothing
    assert display_payload("tool.completed", {"result": None}) == ({"result": None}, ())


def test_export_sends_no_empty_value_for_what_was_not_captured(
    no_content: tuple[Path, str],
) -> None:
    db, run_id = no_content
    with SQLiteStore(db) as store:
        spans = build_spans(store.events(run_id), capture_content=True)
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    attrs = dict(tool.attributes or {})
    assert "gen_ai.tool.call.arguments" not in attrs
    assert "gen_ai.tool.call.result" not in attrs
    agent = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert "gen_ai.output.messages" not in dict(agent.attributes or {})


# -- JSON stays JSON --------------------------------------------------------------------------


def _openinference(agent_output: tuple[str, str], tool_output: tuple[str, str]) -> bytes:
    """The OpenInference golden with the agent's and the tool's output values and mime types
    replaced."""
    doc = json.loads((GOLDEN / "openinference.json").read_text())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                attrs = {a["key"]: a for a in span["attributes"]}
                kind = attrs["openinference.span.kind"]["value"]["stringValue"]
                new = {"AGENT": agent_output, "TOOL": tool_output}.get(kind)
                if new is None:
                    continue
                attrs["output.value"]["value"] = {"stringValue": new[0]}
                attrs["output.mime_type"]["value"] = {"stringValue": new[1]}
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("agent", "tool", "output", "result"),
    [
        # the span says JSON: stored as JSON
        (
            ('{"answer": "14 °C", "rain": true}', "application/json"),
            ('{"temperature_c": 14}', "application/json"),
            {"answer": "14 °C", "rain": True},
            {"temperature_c": 14},
        ),
        # the span says text: stored as the text, even when it looks like JSON
        (("42", "text/plain"), ("[1, 2]", "text/plain"), "42", "[1, 2]"),
    ],
)
def test_openinference_mime_type_decides(
    store: SQLiteStore, agent: tuple[str, str], tool: tuple[str, str], output: Any, result: Any
) -> None:
    (run,) = tgo.import_otlp(store, _openinference(agent, tool)).runs
    events = store.events(run.run_id)
    finished = events[-1]
    assert finished.type == "run.finished"
    assert finished.payload["output"] == output
    completed = next(e for e in events if e.type == "tool.completed")
    assert completed.payload["result"] == result
    assert tg.fold(events).output == output


def _sdk_json(spans: Any) -> bytes:
    return json_format.MessageToJson(encode_spans(spans)).encode()


@pytest.mark.parametrize("output", [{"refund_id": "rf_1", "amount": 19.99}, "42", "plain text"])
def test_genai_output_round_trips_as_what_it_was(
    store: SQLiteStore, tmp_path: Path, output: Any
) -> None:
    """A run whose output is JSON exports it as a text part with ``gen_ai.output.type=json``
    and imports back as JSON; a string that looks like JSON stays a string."""
    run = tg.record_run(lambda _task: output, "go", store=store, actor="agent")
    spans = build_spans(store.events(run.run_id), capture_content=True)
    agent = next(s for s in spans if s.name.startswith("invoke_agent"))
    attrs = dict(agent.attributes or {})
    if isinstance(output, str):
        assert "gen_ai.output.type" not in attrs
    else:
        assert attrs["gen_ai.output.type"] == "json"
    other = SQLiteStore(tmp_path / "imported.db")
    try:
        (imported,) = tgo.import_otlp(other, _sdk_json(spans)).runs
        assert other.events(imported.run_id)[-1].payload["output"] == output
    finally:
        other.close()
