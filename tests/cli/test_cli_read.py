"""The read commands over a real store: runs, show, state, verify, diff, version."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import orjson
import pytest

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED, EXIT_OK, EXIT_STORE, EXIT_USAGE
from tachograph.demo.agent import billing_agent

from .conftest import TASK, Tacho

# -- runs ---------------------------------------------------------------------------------


def test_runs_lists_the_run_as_a_table_and_as_json(tacho: Tacho, run_id: str) -> None:
    text = tacho("runs")
    assert text.exit_code == EXIT_OK
    header, row = text.stdout.splitlines()[:2]
    assert header.split() == ["RUN", "ACTOR", "STARTED", "EVENTS", "STATUS"]
    assert row.split()[0] == run_id
    assert row.split()[-2:] == ["15", "ok"]
    data = tacho.json("runs")
    assert data["store"].endswith("runs.db")
    assert data["more"] is False
    (info,) = data["runs"]
    assert info["run_id"] == run_id
    assert info["actor"] == "billing_agent"
    assert info["events"] == 15
    assert info["status"] == "ok"
    assert info["head_hash"].startswith("sha256:")


def test_runs_filters_and_limits(tacho: Tacho, store_path: Path, run_id: str) -> None:
    with tg.open_store(store_path) as store:
        second = tg.record_run(billing_agent, TASK, store=store).run_id
    newest_first = [r["run_id"] for r in tacho.json("runs")["runs"]]
    assert newest_first == [second, run_id]
    limited = tacho.json("runs", "--limit", "1")
    assert [r["run_id"] for r in limited["runs"]] == [second]
    assert limited["more"] is True
    assert tacho.json("runs", "--actor", "nobody")["runs"] == []
    assert tacho.json("runs", "--status", "unfinished")["runs"] == []
    assert len(tacho.json("runs", "--status", "ok")["runs"]) == 2
    assert tacho.json("runs", "--since", "2999-01-01")["runs"] == []
    assert "(showing the newest 1" in tacho("runs", "--limit", "1").stdout


def test_runs_rejects_an_unknown_status(tacho: Tacho) -> None:
    result = tacho("runs", "--status", "done")
    assert result.exit_code == EXIT_USAGE
    assert "unfinished" in result.stderr


# -- show ---------------------------------------------------------------------------------


def test_show_prints_a_timeline_with_a_summary_per_event(tacho: Tacho, run_id: str) -> None:
    result = tacho("show", run_id)
    assert result.exit_code == EXIT_OK
    lines = result.stdout.splitlines()
    assert lines[0] == f"run {run_id}"
    table = lines[lines.index(next(x for x in lines if x.startswith("SEQ"))) + 1 :]
    assert len(table) == 15
    assert [int(line.split()[0]) for line in table] == list(range(15))
    refund = table[9]
    assert "tool.requested" in refund
    assert "issue_refund(order_id=A-4471, amount_cents=2500)" in refund
    assert "[irreversible]" in refund
    assert "\x1b[" not in result.stdout  # plain when not on a terminal


def test_show_json_is_the_documented_shape(tacho: Tacho, run_id: str) -> None:
    data = tacho.json("show", run_id)
    assert data["run"]["run_id"] == run_id
    events = data["events"]
    assert [e["seq"] for e in events] == list(range(15))
    assert set(events[0]) == {
        "seq",
        "ts",
        "actor",
        "type",
        "summary",
        "idempotency_key",
        "model",
        "dry_run",
        "erased",
        "tampered",
        "not_captured",
    }
    assert not any(e["tampered"] for e in events)
    assert not any(e["not_captured"] for e in events)  # a native run captured everything
    assert data["verification"]["status"] == "verified"
    assert events[0]["type"] == "run.started"
    assert events[-1]["type"] == "run.finished"
    assert events[9]["idempotency_key"] == f"{run_id}:issue_refund:A-4471"
    assert not any(e["dry_run"] for e in events)
    full = tacho.json("show", run_id, "--full")["events"]
    assert full[9]["payload"]["args"] == {"order_id": "A-4471", "amount_cents": 2500}
    assert full[9]["hash"].startswith("sha256:")


def test_show_full_pretty_prints_payloads(tacho: Tacho, run_id: str) -> None:
    result = tacho("show", run_id, "--full")
    assert result.exit_code == EXIT_OK
    assert '"amount_cents": 2500' in result.stdout
    assert f"idempotency_key: {run_id}:issue_refund:A-4471" in result.stdout


def test_show_marks_dry_run_results(tacho: Tacho, run_id: str) -> None:
    fork = tacho.json(
        "fork", run_id, "--at", "7", "--agent", "tachograph.demo.agent:billing_agent_v2"
    )
    new = fork["new_run_id"]
    text = tacho("show", new).stdout
    assert "DRY RUN: tools that write were simulated" in text
    refund_row = next(line for line in text.splitlines() if line.startswith("10 "))
    assert "tool.completed" in refund_row
    assert "DRY RUN" in refund_row
    events = tacho.json("show", new)["events"]
    assert [e["seq"] for e in events if e["dry_run"]] == [0, 10]


def test_show_unknown_run_suggests_close_matches(tacho: Tacho, run_id: str) -> None:
    typo = run_id[:-1] + ("X" if run_id[-1] != "X" else "Y")  # never the id itself
    result = tacho("show", typo)
    assert result.exit_code == EXIT_STORE
    assert f"did you mean {run_id}" in result.stderr
    assert result.stdout == ""


def test_show_accepts_a_unique_prefix(tacho: Tacho, run_id: str) -> None:
    data = tacho.json("show", run_id[:12])
    assert data["run"]["run_id"] == run_id


def test_show_unknown_run_with_nothing_close_points_at_runs(tacho: Tacho) -> None:
    result = tacho("show", "zzzz")
    assert result.exit_code == EXIT_STORE
    assert "tacho runs\n" in result.stderr
    # looked for in one tenant: the runs of that tenant, quoted for a shell
    inside = tacho("show", "zzzz", "--tenant", "acme corp")
    assert inside.exit_code == EXIT_STORE
    assert "no run 'zzzz' in tenant 'acme corp' of" in inside.stderr
    assert "tacho runs --tenant 'acme corp'\n" in inside.stderr


# -- state --------------------------------------------------------------------------------


def test_state_at_a_step_is_the_fold(tacho: Tacho, run_id: str, store_path: Path) -> None:
    data = tacho.json("state", run_id, "--at", "9")
    assert data.pop("verification")["status"] == "verified"
    assert data.pop("seal")["status"] in ("sealed", "unsigned")
    with tg.open_store(store_path) as store:
        expected = tg.fold(store.events(run_id), 9).to_dict()
    assert data == json.loads(orjson.dumps(expected))
    assert data["last_seq"] == 9
    assert data["status"] == "running"
    (pending,) = data["pending"]
    assert pending["tool"] == "issue_refund"
    end = tacho.json("state", run_id)
    assert end["status"] == "ok"
    assert end["pending"] == []
    assert end["output"] == "Refund of 25.00 EUR issued for A-4471."
    text = tacho("state", run_id, "--at", "9").stdout
    assert text.startswith(f"state of {run_id} after seq 9 (running)")


@pytest.mark.parametrize("at", ["15", "-1"])
def test_state_outside_the_run_is_a_usage_error(tacho: Tacho, run_id: str, at: str) -> None:
    result = tacho("state", run_id, "--at", at)
    assert result.exit_code == EXIT_USAGE
    assert "seq 0..14" in result.stderr


# -- verify -------------------------------------------------------------------------------


def _tamper_store(path: Path, run_id: str, seq: int) -> None:
    """Rewrite one stored payload the way someone with the file could (triggers dropped)."""
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER payloads_erase_only")
    (pid,) = db.execute("SELECT id FROM events WHERE run_id=? AND seq=?", (run_id, seq)).fetchone()
    (body,) = db.execute("SELECT body FROM payloads WHERE id=?", (pid,)).fetchone()
    edited = bytes(body).replace(b'"amount_cents":2500', b'"amount_cents":25000')
    assert edited != bytes(body)
    db.execute("UPDATE payloads SET body=? WHERE id=?", (edited, pid))
    db.commit()
    db.close()


def test_verify_a_run_all_runs_and_no_argument(tacho: Tacho, run_id: str) -> None:
    one = tacho("verify", run_id)
    assert one.exit_code == EXIT_OK
    assert f"{run_id}: verified, 15 events" in one.stdout
    for args in (("verify",), ("verify", "--all")):
        data = tacho.json(*args)
        assert data["ok"] is True
        assert data["verified"] == 1
        assert data["failed"] == 0
        assert data["runs"][0]["run_id"] == run_id
        assert data["runs"][0]["status"] == "verified"


def test_verify_catches_an_edited_store_naming_run_seq_and_check(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    _tamper_store(store_path, run_id, 9)
    result = tacho("verify")
    assert result.exit_code == EXIT_FAILED
    assert f"{run_id}: FAILED at seq 9, check 5 (payload digest)" in result.stdout
    assert "0 of 1 run(s) verified, 1 FAILED" in result.stdout
    data = tacho.json("verify", run_id, code=EXIT_FAILED)
    assert data["ok"] is False
    first = data["runs"][0]["first_failure"]
    assert (first["seq"], first["check"], first["check_name"]) == (9, 5, "payload")


def test_verify_of_a_run_whose_payload_is_no_longer_json_reports_it(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    """A stored payload rewritten into bytes that are not JSON is a tampered event for the
    report (check 5), not an error of the command: the unvouched-call check reads the run
    undecoded and passes over what does not parse."""
    db = sqlite3.connect(store_path)
    db.execute("DROP TRIGGER payloads_erase_only")
    (pid,) = db.execute("SELECT id FROM events WHERE run_id=? AND seq=9", (run_id,)).fetchone()
    db.execute("UPDATE payloads SET body=? WHERE id=?", (b"{not json", pid))
    db.commit()
    db.close()
    result = tacho("verify", run_id)
    assert result.exit_code == EXIT_FAILED, result.output
    assert f"{run_id}: FAILED at seq 9, check 5 (payload digest)" in result.stdout
    data = tacho.json("verify", run_id, code=EXIT_FAILED)
    first = data["runs"][0]["first_failure"]
    assert (first["seq"], first["check"]) == (9, 5)


def test_verify_a_jsonl_file(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    exported = tmp_path / "run.jsonl"
    assert tacho("export", run_id, "-o", str(exported)).exit_code == EXIT_OK
    data = tacho.json("verify", str(exported))
    assert data["ok"] is True
    assert data["source"] == str(exported)
    lines = exported.read_bytes().splitlines()
    line = orjson.loads(lines[10])
    line["payload"]["result"]["amount_cents"] = 1
    lines[10] = orjson.dumps(line)
    exported.write_bytes(b"\n".join(lines) + b"\n")
    result = tacho("verify", str(exported))
    assert result.exit_code == EXIT_FAILED
    assert "FAILED at seq 10 (line 11), check 5 (payload digest)" in result.stdout
    failed = tacho.json("verify", str(exported), code=EXIT_FAILED)
    assert failed["runs"][0]["first_failure"]["line"] == 11


def test_verify_a_missing_file_is_a_usage_error(tacho: Tacho, tmp_path: Path) -> None:
    result = tacho("verify", str(tmp_path / "nope.jsonl"))
    assert result.exit_code == EXIT_USAGE
    assert "no such file" in result.stderr


def test_verify_target_and_all_together_is_a_usage_error(tacho: Tacho, run_id: str) -> None:
    assert tacho("verify", run_id, "--all").exit_code == EXIT_USAGE


# -- diff ---------------------------------------------------------------------------------


def test_diff_of_a_run_with_itself_and_with_its_fork(tacho: Tacho, run_id: str) -> None:
    same = tacho.json("diff", run_id, run_id)
    assert same["same"] is True
    assert same["seq"] is None
    fork = tacho.json(
        "fork", run_id, "--at", "7", "--agent", "tachograph.demo.agent:billing_agent_v2"
    )
    data = tacho.json("diff", run_id, fork["new_run_id"], code=EXIT_FAILED)
    assert data["same"] is False
    assert data["run_b"] == fork["new_run_id"]
    assert isinstance(data["seq"], int)
    assert data["changes"]
    text = tacho("diff", run_id, fork["new_run_id"])
    assert text.exit_code == EXIT_FAILED
    assert text.stdout.startswith(f"first difference at seq {data['seq']}")


# -- version ------------------------------------------------------------------------------


def test_version(tacho: Tacho, store_path: Path) -> None:
    data = tacho.json("version")
    assert data["tachograph"] == tg.__version__
    assert data["format_version"] == 1
    assert data["store"] == str(store_path)
    text = tacho("version").stdout
    assert text.startswith(f"tachograph {tg.__version__} (record format v1)")
    assert tacho("--version").stdout.strip() == f"tacho, version {tg.__version__}"


def test_an_erased_payload_is_shown_and_reported_not_failed(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    db = sqlite3.connect(store_path)
    (pid,) = db.execute("SELECT id FROM events WHERE run_id=? AND seq=5", (run_id,)).fetchone()
    db.execute("UPDATE payloads SET body=NULL, salt=NULL WHERE id=?", (pid,))
    db.commit()
    db.close()
    data = tacho.json("verify", run_id)
    assert data["ok"] is True
    assert data["runs"][0]["erased"] == [5]
    row = next(x for x in tacho("show", run_id).stdout.splitlines() if x.startswith("5 "))
    assert row.endswith("(payload erased)")
    events = tacho.json("show", run_id, "--full")["events"]
    assert events[5]["erased"] is True
    assert events[5]["payload"] is None
    assert "      (payload erased)" in tacho("show", run_id, "--full").stdout
    assert tacho.json("state", run_id)["erased"] == [5]


def test_verify_of_a_large_store_lists_only_failures(
    tacho: Tacho, run_id: str, store_path: Path
) -> None:
    with tg.open_store(store_path) as store:
        for _ in range(21):
            tg.record_run(billing_agent, TASK, store=store)
    _tamper_store(store_path, run_id, 9)
    result = tacho("verify")
    assert result.exit_code == EXIT_FAILED
    lines = result.stdout.splitlines()
    assert lines == [lines[0], "21 of 22 run(s) verified, 1 FAILED"]
    assert lines[0].startswith(f"{run_id}: FAILED at seq 9")
    assert len(tacho.json("verify", code=EXIT_FAILED)["runs"]) == 22


@pytest.mark.parametrize("url", ["", " ", ":memory:", "sqlite:///:memory:"])
def test_a_store_that_names_no_file_is_refused_not_made_empty(tacho: Tacho, url: str) -> None:
    # an unset variable in --store "$S" opened a temporary database: no runs, and a demo
    # recorded into it exited 0 with nothing kept
    for command in (("runs",), ("verify",), ("doctor",)):
        result = tacho("--store", url, *command, store=False)
        assert result.exit_code == EXIT_STORE, (command, result.output)
    if not url.strip():
        assert tacho("--store", url, "demo", store=False).exit_code == EXIT_STORE
