"""What the replay commands print and exit with: under --json stdout holds exactly one JSON
document even when the agent prints; a fork or resume whose agent raises exits 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED, EXIT_OK, cli

AGENT = """
import os
import tachograph as tg

@tg.tool(effect="read")
def lookup(order):
    return {"order": order}

def agent(task):
    print("the agent talks on stdout")
    lookup(order="A-1")
    if os.environ.get("CW_RAISE"):
        raise RuntimeError("config missing")
    return "ok"
"""


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[CliRunner, Path]:
    (tmp_path / "cw_print_agent.py").write_text(AGENT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("TACHOGRAPH_STORE", "CW_RAISE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    import cw_print_agent

    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True) as store:
        tg.record_run(cw_print_agent.agent, None, store=store, run_id="p-1", actor="agent")
    return CliRunner(), db


def test_json_stdout_is_one_document_while_the_agent_prints(
    setup: tuple[CliRunner, Path],
) -> None:
    runner, db = setup
    result = runner.invoke(
        cli,
        ["--store", str(db), "replay", "p-1", "--agent", "cw_print_agent:agent", "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.stdout)["reproduced"] is True
    assert "the agent talks on stdout" in result.stderr
    text = runner.invoke(
        cli,
        ["--store", str(db), "replay", "p-1", "--agent", "cw_print_agent:agent"],
        catch_exceptions=False,
    )
    assert "the agent talks on stdout" in text.stdout  # without --json it stays on stdout


def test_a_fork_whose_agent_raises_exits_1(
    setup: tuple[CliRunner, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, db = setup
    with tg.open_store(db) as store:
        done = next(e.seq for e in store.events("p-1") if e.type == "tool.completed")
    base = ["--store", str(db), "fork", "p-1", "--at", str(done), "--agent"]
    fine = runner.invoke(cli, [*base, "cw_print_agent:agent", "--json"], catch_exceptions=False)
    assert fine.exit_code == EXIT_OK, fine.output
    assert json.loads(fine.stdout)["final_status"] == "ok"
    monkeypatch.setenv("CW_RAISE", "1")
    failed = runner.invoke(cli, [*base, "cw_print_agent:agent", "--json"], catch_exceptions=False)
    assert failed.exit_code == EXIT_FAILED, failed.output
    data = json.loads(failed.stdout)
    assert data["final_status"] == "error"
    assert data["reproduced"] is True  # it followed the record; it failed once live
