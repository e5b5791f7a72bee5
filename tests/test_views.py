"""The views layer holds what a timeline shows without rich or click: ``tacho show`` and
``tacho runs`` render exactly its rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import cli
from tachograph.demo.agent import billing_agent
from tachograph.views.timeline import run_rows, timeline_rows


def test_views_import_neither_rich_nor_click() -> None:
    code = (
        "import sys, json; import tachograph.views.timeline; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'click'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_show_and_runs_render_the_view_rows(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with tg.open_store(path, create=True) as store:
        result = tg.record_run(billing_agent, "Order A-4471 arrived damaged.", store=store)
        events = store.events(result.run_id)
        runs = store.runs()
    runner = CliRunner()
    shown = runner.invoke(cli, ["--store", str(path), "show", result.run_id]).output.splitlines()
    rows = timeline_rows(events)
    assert len(rows) == len(events)
    table = shown[-len(rows) :]
    for row, line in zip(rows, table, strict=True):
        assert line.split() == " ".join(row.cells()).split()
    listed = runner.invoke(cli, ["--store", str(path), "runs"]).output.splitlines()
    (row,) = run_rows(runs)
    assert listed[1].split() == " ".join(row.cells()).split()


def test_a_langchain_request_is_summarized_by_its_last_message() -> None:
    from tachograph.record.event import new_event
    from tachograph.views.timeline import summarize

    request = {
        "model": "gpt-5.6",
        "messages": [
            {"type": "system", "data": {"content": "Be brief."}},
            {"type": "human", "data": {"content": "Refund order B-2002"}},
        ],
    }
    event = new_event(
        run_id="r",
        seq=0,
        type="model.request",
        actor="a",
        payload={"request": request},
        prev_hash=None,
    )
    assert summarize(event) == "human: Refund order B-2002"  # was "?: null"
