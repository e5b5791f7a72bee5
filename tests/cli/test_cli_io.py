"""export and import: the JSONL of SPEC section 4, verified on the way in."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.cli.app import EXIT_FAILED, EXIT_OK, EXIT_STORE, EXIT_USAGE
from tachograph.demo.agent import billing_agent
from tachograph.record.event import LINE_KEYS

from .conftest import TASK, Tacho


def test_export_one_run_to_stdout_is_spec_jsonl(tacho: Tacho, run_id: str) -> None:
    result = tacho("export", run_id)
    assert result.exit_code == EXIT_OK
    lines = [orjson.loads(x) for x in result.stdout_bytes.splitlines()]
    assert [line["seq"] for line in lines] == list(range(15))
    for line in lines:
        assert set(line) == LINE_KEYS
        assert line["run_id"] == run_id
    (report,) = tg.verify_jsonl(io.BytesIO(result.stdout_bytes))
    assert report.ok
    assert report.run_id == run_id


def test_export_to_a_file_and_all_runs(tacho: Tacho, run_id: str, store_path: Path) -> None:
    with tg.open_store(store_path) as store:
        second = tg.record_run(billing_agent, TASK, store=store).run_id
    out = store_path.parent / "all.jsonl"
    result = tacho("export", "--all", "-o", str(out))
    assert result.exit_code == EXIT_OK
    assert "exported 2 run(s), 30 events" in result.stderr
    runs = {line["run_id"] for line in map(orjson.loads, out.read_bytes().splitlines())}
    assert runs == {run_id, second}
    assert not list(store_path.parent.glob("*.partial"))
    both = store_path.parent / "both.jsonl"
    assert tacho("export", run_id, second, "-o", str(both)).exit_code == EXIT_OK
    assert sorted(both.read_bytes().splitlines()) == sorted(out.read_bytes().splitlines())


def test_export_usage_and_unknown_runs(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    unwritable = tacho("export", run_id, "-o", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert unwritable.exit_code == EXIT_USAGE
    assert "cannot write" in unwritable.stderr
    assert tacho("export").exit_code == EXIT_USAGE
    assert tacho("export", run_id, "--all").exit_code == EXIT_USAGE
    missing = tacho("export", "run_missing")
    assert missing.exit_code == EXIT_STORE
    assert missing.stdout == ""


def test_import_into_a_new_store_then_again(
    tacho: Tacho, run_id: str, tmp_path: Path, runner: CliRunner
) -> None:
    exported = tmp_path / "run.jsonl"
    tacho("export", run_id, "-o", str(exported))
    other = Tacho(tmp_path / "other" / "store.db", runner)
    first = other.json("import", str(exported))
    assert first["ok"] is True
    assert (first["events"], first["written"], first["duplicates"]) == (15, 15, 0)
    assert first["runs"][0]["run_id"] == run_id
    assert first["runs"][0]["status"] == "verified"
    again = other.json("import", str(exported))
    assert (again["written"], again["duplicates"]) == (0, 15)
    assert other.json("verify")["ok"] is True
    assert other.json("show", run_id)["events"] == tacho.json("show", run_id)["events"]
    text = other("import", str(exported))
    assert text.exit_code == EXIT_OK
    assert "0 events written, 15 already present" in text.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_import_refuses_a_tampered_file_and_stores_nothing(
    tacho: Tacho, run_id: str, tmp_path: Path, runner: CliRunner, as_json: bool
) -> None:
    exported = tmp_path / "run.jsonl"
    tacho("export", run_id, "-o", str(exported))
    lines = exported.read_bytes().splitlines()
    line = orjson.loads(lines[9])
    line["payload"]["args"]["amount_cents"] = 9
    lines[9] = orjson.dumps(line)
    exported.write_bytes(b"\n".join(lines) + b"\n")
    other = Tacho(tmp_path / "other.db", runner)
    if as_json:
        data = other.json("import", str(exported), code=EXIT_FAILED)
        assert data["ok"] is False
        assert data["written"] == 0
        assert data["runs"][0]["first_failure"]["seq"] == 9
    else:
        result = other("import", str(exported))
        assert result.exit_code == EXIT_FAILED
        assert "import refused, nothing stored" in result.stderr
        assert "FAILED at seq 9 (line 10), check 5 (payload digest)" in result.stderr
    # Nothing stored, and no store created either: a refused import leaves nothing behind.
    assert not (tmp_path / "other.db").exists()
    assert other("runs").exit_code == EXIT_STORE


def test_import_of_a_malformed_file_is_refused(tmp_path: Path, runner: CliRunner) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "an event"}\n')
    result = Tacho(tmp_path / "s.db", runner)("import", str(bad))
    assert result.exit_code == EXIT_FAILED
    assert "refused" in result.stderr


def test_import_of_a_missing_file_is_a_usage_error(tmp_path: Path, runner: CliRunner) -> None:
    result = Tacho(tmp_path / "s.db", runner)("import", str(tmp_path / "none.jsonl"))
    assert result.exit_code == EXIT_USAGE
    assert "no such file" in result.stderr
    assert not (tmp_path / "s.db").exists()


def test_a_run_named_twice_is_exported_once(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    out = tmp_path / "twice.jsonl"
    result = tacho("export", run_id, run_id, run_id[:12], "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "exported 1 run(s), 15 events" in result.output
    assert len(out.read_bytes().splitlines()) == 15
    assert tacho("verify", str(out), store=False).exit_code == 0


@pytest.mark.parametrize("command", ["verify", "test"])
def test_workers_beyond_the_bound_are_a_usage_error(tacho: Tacho, command: str) -> None:
    from tachograph.cli import MAX_WORKERS

    args = ["verify"] if command == "verify" else ["test", ".", "--agent", "x:y"]
    result = tacho(*args, "--workers", str(MAX_WORKERS + 1))
    assert result.exit_code == 2, result.output
    assert f"1<=x<={MAX_WORKERS}" in result.output
