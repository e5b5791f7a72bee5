"""What a demanding user tried after the README: prefixes with forks, times, refused imports."""

from __future__ import annotations

from pathlib import Path

from tachograph.cli.app import EXIT_OK, EXIT_STORE, EXIT_USAGE
from tachograph.record.event import now_ts

from .conftest import Tacho


def _fork(tacho: Tacho, run_id: str) -> str:
    data = tacho.json("fork", run_id, "--at", "7", "--agent", "tachograph.demo.agent:billing_agent")
    assert data["final_status"] == "ok"
    return str(data["new_run_id"])


def test_a_prefix_names_the_run_its_forks_descend_from(tacho: Tacho, run_id: str) -> None:
    fork_id = _fork(tacho, run_id)
    assert fork_id.startswith(run_id + ".fork-")
    shown = tacho.json("show", run_id[:10])
    assert shown["run"]["run_id"] == run_id
    assert tacho.json("show", fork_id)["run"]["run_id"] == fork_id


def test_an_ambiguous_prefix_says_so(tacho: Tacho, run_id: str) -> None:
    second = tacho.json(
        "fork", run_id, "--at", "3", "--agent", "tachograph.demo.agent:billing_agent"
    )
    first = _fork(tacho, run_id)
    common = "".join(a for a, _ in zip(first, str(second["new_run_id"]), strict=False) if a == _)
    prefix = run_id + ".fork-"
    assert common.startswith(prefix)
    result = tacho("show", prefix)
    assert result.exit_code == EXIT_STORE
    assert "is ambiguous" in result.stderr


def test_since_and_until_take_iso_times_and_refuse_anything_else(tacho: Tacho, run_id: str) -> None:
    today = now_ts()[:10]
    assert [r["run_id"] for r in tacho.json("runs", "--since", today)["runs"]] == [run_id]
    assert tacho.json("runs", "--since", f"{today} 23:59:59")["runs"] == []
    assert tacho.json("runs", "--until", f"{today}T00:00:00+00:00")["runs"] == []
    assert [r["run_id"] for r in tacho.json("runs", "--until", "2999-01-01")["runs"]] == [run_id]
    result = tacho("runs", "--since", "yesterday")
    assert result.exit_code == EXIT_USAGE
    assert "not an ISO 8601 time" in result.stderr


def test_a_fork_reports_how_its_run_ended(tacho: Tacho, run_id: str) -> None:
    result = tacho("fork", run_id, "--at", "7", "--agent", "tachograph.demo.agent:billing_agent")
    assert result.exit_code == EXIT_OK
    assert "then continued live" in result.stdout
    assert "(finished ok)" in result.stdout


def test_an_empty_store_is_not_created_by_a_read(tmp_path: Path, tacho: Tacho) -> None:
    other = Tacho(tmp_path / "missing.db", tacho.runner)
    assert other("runs").exit_code == EXIT_STORE
    assert not (tmp_path / "missing.db").exists()


def test_an_empty_file_verifies_nothing_and_fails(tmp_path: Path, tacho: Tacho) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = tacho("verify", str(empty))
    assert result.exit_code == 1
    assert "an empty file verifies nothing" in result.stdout
    assert tacho.json("verify", str(empty), code=1)["ok"] is False


def test_a_run_in_another_tenant_is_named(tacho: Tacho, run_id: str) -> None:
    result = tacho("show", run_id, "--tenant", "acme")
    assert result.exit_code == EXIT_STORE
    assert "it exists in tenant 'default'" in result.stderr
    assert "tacho runs" not in result.stderr  # the message says where the run is
