"""replay, fork and resume from the command line, and loading agents by import path."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED, EXIT_OK, EXIT_STORE, EXIT_USAGE
from tachograph.cli.app import cli as tg_cli
from tachograph.demo import agent as demo

from .conftest import Tacho

V1 = "tachograph.demo.agent:billing_agent"
V2 = "tachograph.demo.agent:billing_agent_v2"

# -- replay -------------------------------------------------------------------------------


def test_replay_of_the_same_agent_reproduces_without_firing_the_refund(
    tacho: Tacho, run_id: str
) -> None:
    calls = demo.PAYMENTS.calls
    data = tacho.json("replay", run_id, "--agent", V1)
    assert demo.PAYMENTS.calls == calls
    assert data["verdict"] == "reproduced"
    assert data["reproduced"] is True
    assert data["kind"] == "reproduction"
    assert data["served"] == data["events"] == 15
    assert data["first_divergence"] is None
    text = tacho("replay", run_id, "--agent", V1)
    assert text.exit_code == EXIT_OK
    assert text.stdout.startswith(f"replay of {run_id}: REPRODUCED (reproduction)")


def test_replay_of_a_changed_agent_reports_the_step_and_exits_1(tacho: Tacho, run_id: str) -> None:
    data = tacho.json("replay", run_id, "--agent", V2, code=EXIT_FAILED)
    assert data["verdict"] == "diverged"
    assert data["kind"] == "simulation"
    assert data["drift"] == [{"field": "code_version", "recorded": "demo-1", "current": "demo-2"}]
    first = data["first_divergence"]
    assert first["seq"] == 9
    assert first["kind"] == "args_changed"
    assert first["changes"][0]["path"].endswith("amount_cents")
    text = tacho("replay", run_id, "--agent", V2)
    assert text.exit_code == EXIT_FAILED
    assert "DIVERGED (simulation)" in text.stdout
    assert "seq 9: args_changed" in text.stdout
    assert "$.payload.args.amount_cents: 2500 -> 1250" in text.stdout


def test_replay_of_an_exported_file_needs_no_store(
    tacho: Tacho, run_id: str, tmp_path: Path
) -> None:
    exported = tmp_path / "one.jsonl"
    assert tacho("export", run_id, "-o", str(exported)).exit_code == EXIT_OK
    nowhere = tmp_path / "no-store-here.db"
    calls = demo.PAYMENTS.calls
    result = tacho.runner.invoke(
        tg_cli, ["--store", str(nowhere), "replay", str(exported), "--agent", V1, "--json"]
    )
    assert result.exit_code == EXIT_OK, result.output
    assert '"reproduced": true' in result.stdout
    assert demo.PAYMENTS.calls == calls
    assert not nowhere.exists()  # no store was opened, let alone created
    changed = tacho.runner.invoke(tg_cli, ["replay", str(exported), "--agent", V2])
    assert changed.exit_code == EXIT_FAILED
    assert "seq 9: args_changed" in changed.stdout


def test_replay_options_are_passed_through(tacho: Tacho, run_id: str) -> None:
    collected = tacho.json("replay", run_id, "--agent", V2, "--collect", code=EXIT_FAILED)
    assert len(collected["divergences"]) >= len(
        tacho.json("replay", run_id, "--agent", V2, code=EXIT_FAILED)["divergences"]
    )
    by_key = tacho.json("replay", run_id, "--agent", V1, "--match", "key", "--rerun-pure")
    assert by_key["reproduced"] is True
    bad = tacho("replay", run_id, "--agent", V1, "--match", "loose")
    assert bad.exit_code == EXIT_USAGE
    assert "strict" in bad.stderr


def test_replay_refuses_an_unverified_run_unless_allowed(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    from .test_cli_read import _tamper_store

    _tamper_store(store_path, run_id, 9)
    refused = tacho("replay", run_id, "--agent", V1)
    assert refused.exit_code == EXIT_FAILED
    assert "does not verify" in refused.stderr
    allowed = tacho.json("replay", run_id, "--agent", V1, "--allow-unverified", code=EXIT_FAILED)
    assert allowed["unverified"] is True
    assert allowed["kind"] == "simulation"


def test_replay_of_a_file_that_does_not_verify_is_refused_unless_allowed(
    tacho: Tacho, run_id: str, tmp_path: Path
) -> None:
    exported = tmp_path / "one.jsonl"
    assert tacho("export", run_id, "-o", str(exported)).exit_code == EXIT_OK
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    (plan,) = [line for line in lines if line["type"] == "plan.selected"]
    plan["payload"]["reason"] = "edited after the fact"
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(line) + "\n" for line in lines))
    refused = tacho("replay", str(tampered), "--agent", V1)
    assert refused.exit_code == EXIT_FAILED
    assert f"FAILED at seq {plan['seq']}" in refused.stderr
    allowed = tacho.json("replay", str(tampered), "--agent", V1, "--allow-unverified", code=1)
    assert allowed["unverified"] is True
    assert allowed["kind"] == "simulation"
    assert allowed["divergences"][0]["seq"] == plan["seq"]  # replayed, up to the edited step
    text = tacho("replay", str(tampered), "--agent", V1, "--allow-unverified")
    assert "WARNING: the run did not verify; replayed anyway on request" in text.stdout


def test_replay_of_an_unknown_run_is_a_store_error(tacho: Tacho) -> None:
    result = tacho("replay", "run_nope", "--agent", V1)
    assert result.exit_code == EXIT_STORE


# -- agent loading ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("tachograph.demo.agent", "is not of the form module:function"),
        ("no_such_module_xyz:agent", "no module named 'no_such_module_xyz'"),
        ("tachograph.no_such_mod:agent", "no module named 'tachograph.no_such_mod'"),
        ("tachograph.demo.agent:billing_agnet", "did you mean billing_agent"),
        ("tachograph.demo.agent:MODEL", "it is a str, not a callable agent"),
    ],
)
def test_a_bad_agent_path_says_what_failed(
    tacho: Tacho, run_id: str, target: str, message: str
) -> None:
    result = tacho("replay", run_id, "--agent", target)
    assert result.exit_code == EXIT_USAGE
    assert message in result.stderr
    assert result.stdout == ""


def test_an_agent_whose_import_fails_names_the_cause(
    tacho: Tacho, run_id: str, in_tmp: Path
) -> None:
    (in_tmp / "cli_broken_dep_agent.py").write_text("import not_installed_pkg_q\n")
    (in_tmp / "cli_raising_agent.py").write_text("raise RuntimeError('config missing')\n")
    dep = tacho("replay", run_id, "--agent", "cli_broken_dep_agent:agent")
    assert dep.exit_code == EXIT_USAGE
    assert "imports 'not_installed_pkg_q', which is not installed" in dep.stderr
    raising = tacho("replay", run_id, "--agent", "cli_raising_agent:agent")
    assert raising.exit_code == EXIT_USAGE
    assert "raised RuntimeError: config missing" in raising.stderr


def test_an_agent_in_the_current_directory_is_found(
    tacho: Tacho, run_id: str, in_tmp: Path
) -> None:
    (in_tmp / "cli_local_agent.py").write_text(
        "from tachograph.demo.agent import billing_agent as mine\n"
    )
    data = tacho.json("replay", run_id, "--agent", "cli_local_agent:mine")
    assert data["reproduced"] is True


# -- fork ---------------------------------------------------------------------------------


def test_fork_continues_live_in_a_new_run_with_dry_run_by_default(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    calls = demo.PAYMENTS.calls
    result = tacho("fork", run_id, "--at", "7", "--agent", V2)
    assert result.exit_code == EXIT_OK
    new = result.stdout.strip().splitlines()[-1].removeprefix("new run: ")
    assert new.startswith(f"{run_id}.fork-")
    assert demo.PAYMENTS.calls == calls  # the refund was simulated
    with tg.open_store(store_path) as store:
        events = store.events(new)
        assert store.verify(new).ok
    started = events[0].payload
    assert started["parent"] == {"run_id": run_id, "seq": 7}
    assert started["labels"]["tachograph.dry_run"] == "true"
    assert events[9].payload["args"]["amount_cents"] == 1250
    assert events[10].payload["dry_run"] is True


def test_fork_live_really_calls_the_tool(tacho: Tacho, run_id: str, store_path: Path) -> None:
    calls = demo.PAYMENTS.calls
    data = tacho.json("fork", run_id, "--at", "7", "--agent", V2, "--live")
    assert demo.PAYMENTS.calls == calls + 1
    with tg.open_store(store_path) as store:
        events = store.events(data["new_run_id"])
    assert "tachograph.dry_run" not in (events[0].payload.get("labels") or {})
    assert events[10].payload["result"]["amount_cents"] == 1250


def test_fork_with_an_override_serves_another_answer(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    answer = (
        '{"id": "resp_02", "model": "demo-scripted-2026-11-01", "choices": [{"message": '
        '{"role": "assistant", "content": "Let me ask a colleague."}}]}'
    )
    data = tacho.json("fork", run_id, "--at", "7", "--agent", V1, "--override", answer)
    with tg.open_store(store_path) as store:
        events = store.events(data["new_run_id"])
    assert events[-1].payload == {"status": "ok", "output": "Let me ask a colleague."}
    assert not any(e.type == "tool.requested" and e.seq > 7 for e in events)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--at", "7", "--override", "{not json"), "not valid JSON"),
        (("--at", "99"), "outside run"),
        (("--at", "8", "--override", "{}"), "seq 8 is plan.selected"),
    ],
)
def test_fork_usage_errors(tacho: Tacho, run_id: str, args: tuple[str, ...], message: str) -> None:
    result = tacho("fork", run_id, *args, "--agent", V2)
    assert result.exit_code == EXIT_USAGE
    assert message in result.stderr


# -- resume -------------------------------------------------------------------------------


def test_resume_continues_a_crashed_run_in_the_same_run(
    tacho: Tacho, crash_run: Callable[[str, str], str], in_tmp: Path, store_path: Path
) -> None:
    crashed = crash_run("cli_crashy_a", "CRASH_AFTER_DOUBLE")
    assert tacho.json("runs", "--status", "unfinished")["runs"][0]["run_id"] == crashed
    data = tacho.json("resume", crashed, "--agent", "cli_crashy_a:agent")
    assert data["new_run_id"] == crashed
    assert data["mode"] == "resume"
    with tg.open_store(store_path) as store:
        info = store.run_info(crashed)
        assert store.verify(crashed).ok
    assert info.status == "ok"
    again = tacho("resume", crashed, "--agent", "cli_crashy_a:agent")
    assert again.exit_code == EXIT_USAGE
    assert "has finished (ok)" in again.stderr
    assert f"tacho fork {crashed}" in again.stderr


def test_resume_over_an_irreversible_intent_needs_confirm(
    tacho: Tacho, crash_run: Callable[[str, str], str], in_tmp: Path, store_path: Path
) -> None:
    crashed = crash_run("cli_crashy_b", "CRASH_IN_PAY")
    refused = tacho("resume", crashed, "--agent", "cli_crashy_b:agent")
    assert refused.exit_code == EXIT_USAGE
    assert "--confirm" in refused.stderr
    with tg.open_store(store_path) as store:
        assert store.run_info(crashed).status is None  # nothing finished it
    data = tacho.json("resume", crashed, "--agent", "cli_crashy_b:agent", "--confirm")
    assert data["new_run_id"] == crashed
    with tg.open_store(store_path) as store:
        events = store.events(crashed)
    assert events[-1].type == "run.finished"
    assert events[-1].payload["output"] == {"paid": 42}
