"""``tacho demo``: the whole idea in one command, in the store in force, store untouched."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import EXIT_OK, cli

from .conftest import Tacho


def test_demo_shows_every_step_and_what_to_run_next(tmp_path: Path, runner: CliRunner) -> None:
    tacho = Tacho(tmp_path / "demo.db", runner)
    result = tacho("demo")
    assert result.exit_code == EXIT_OK, result.output
    out = result.stdout
    with tg.open_store(tmp_path / "demo.db") as store:
        (info,) = store.runs()
        assert store.verify(info.run_id).ok  # the user's store was not tampered with
    run_id = info.run_id
    headings = [line for line in out.splitlines() if line.startswith("== ")]
    assert [h.split(".")[0] for h in headings[:6]] == [f"== {n}" for n in range(1, 7)]
    assert headings[-1] == "== What to run next"
    assert f"{run_id}: verified, 15 events, chain intact" in out
    assert "issue_refund(order_id=A-4471, amount_cents=2500)" in out  # the timeline
    assert f"replay of {run_id}: REPRODUCED (reproduction)" in out
    assert "payments API calls after replay: 1" in out
    assert f"replay of {run_id}: DIVERGED (simulation)" in out
    assert "seq 9: args_changed" in out
    assert "-> caught at seq 9, the refund call itself" in out
    assert "changed amount_cents at seq 9: 2500 -> 25000" in out
    assert f"{run_id}: FAILED at seq 9 (line 10), check 5 (payload digest)" in out
    assert f"tacho replay {run_id} --agent tachograph.demo.agent:billing_agent_v2" in out


def test_demo_records_a_fresh_run_each_time_and_reports_json(
    tmp_path: Path, runner: CliRunner
) -> None:
    tacho = Tacho(tmp_path / "demo.db", runner)
    first = tacho.json("demo")
    second = tacho.json("demo")
    assert first["ok"] is True
    assert first["run_id"] != second["run_id"]
    assert first["replay"]["reproduced"] is True
    assert first["replay_v2"]["first_divergence"]["seq"] == 9
    assert first["tamper"]["status"] == "failed"
    assert first["tamper"]["first_failure"]["seq"] == 9
    assert first["tamper"]["first_failure"]["check_name"] == "payload"
    assert first["refunds_issued"] == first["refunds_after_replay"] == 1
    assert len(tacho.json("runs")["runs"]) == 2
    assert tacho.json("verify")["ok"] is True


def test_demo_uses_the_default_store_in_the_current_directory(
    run_tacho: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    result = run_tacho("demo")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / ".tachograph" / "tachograph.db").is_file()
    assert "DIVERGED" in result.stdout
    assert "check 5 (payload digest)" in result.stdout
    assert "\x1b[" not in result.stdout  # a pipe gets plain text
    listed = run_tacho("runs", "--json")
    assert listed.returncode == 0
    assert '"events": 15' in listed.stdout


def test_demo_honours_tachograph_store(
    run_tacho: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere" / "runs.db"
    result = run_tacho("demo", env={"TACHOGRAPH_STORE": f"sqlite:///{target}"})
    assert result.returncode == 0, result.stderr
    assert target.is_file()
    assert not (tmp_path / ".tachograph").exists()


def test_demo_through_a_sqlite_url_with_a_tenant(tmp_path: Path, runner: CliRunner) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}?tenant=acme"
    result = runner.invoke(cli, ["--store", url, "demo", "--json"], catch_exceptions=False)
    assert result.exit_code == EXIT_OK, result.output
    run_id = json.loads(result.stdout)["run_id"]
    with tg.open_store(tmp_path / "demo.db") as store:
        assert store.run_info(run_id).tenant == "acme"
    shown = runner.invoke(cli, ["--store", url, "show", run_id, "--json"], catch_exceptions=False)
    assert shown.exit_code == EXIT_OK, shown.output
    assert json.loads(shown.stdout)["run"]["tenant"] == "acme"
