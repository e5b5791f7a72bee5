"""Option values a reviewer found taken wrongly: a malformed ``--allow-network`` exited 1
(a divergence's code) naming a Python parameter; a negative ``--limit`` meant "all"; a
time past the calendar's end in UTC, and ``inf`` or ``nan`` seconds, ended in tracebacks
or in an exporter's failure. Each is a usage error (exit 2) naming the option."""

from __future__ import annotations

import pytest

from tachograph.cli.app import EXIT_OK, EXIT_USAGE

from .conftest import Tacho

AGENT = "tachograph.demo.agent:billing_agent"


@pytest.mark.parametrize("command", ["replay", "fork"])
@pytest.mark.parametrize("value", ["foo", "127.0.0.1:abc", ":80"])
def test_a_malformed_allow_network_entry_is_a_usage_error(
    tacho: Tacho, run_id: str, command: str, value: str
) -> None:
    extra = ["--at", "3"] if command == "fork" else []
    result = tacho(command, run_id, "--agent", AGENT, *extra, "--allow-network", value)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "Invalid value for '--allow-network'" in result.output
    assert "HOST:PORT" in result.output


@pytest.mark.parametrize(("command", "limit"), [("runs", "-1"), ("audit", "-5")])
def test_a_negative_limit_is_refused(tacho: Tacho, command: str, limit: str) -> None:
    result = tacho(command, "--limit", limit)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "is negative (0 means all)" in result.output


def test_a_huge_limit_is_all(tacho: Tacho, run_id: str) -> None:
    result = tacho("runs", "--limit", str(10**30))
    assert result.exit_code == EXIT_OK, result.output
    assert run_id in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("runs", "--since", "9999-12-31T23:59:59-14:00"),
        ("runs", "--until", "0001-01-01T00:00+01:00"),
        ("retention", "plan", "--now", "0001-01-01T00:00:00+14:00"),
    ],
)
def test_a_time_outside_the_calendar_in_utc_is_a_usage_error(
    tacho: Tacho, args: tuple[str, ...]
) -> None:
    result = tacho(*args)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "outside the years 1 to 9999 in UTC" in result.output


@pytest.mark.parametrize("value", ["inf", "nan", "1e400", "-1"])
def test_seconds_must_be_finite(tacho: Tacho, run_id: str, value: str) -> None:
    gap = tacho("otel", "import", "nowhere.json", "--gap", value)
    assert gap.exit_code == EXIT_USAGE, gap.output
    assert "Invalid value for '--gap'" in gap.output
    timeout = tacho("otel", "export", run_id, "--timeout", value)
    assert timeout.exit_code == EXIT_USAGE, timeout.output
    assert "Invalid value for '--timeout'" in timeout.output


def test_verify_json_says_unvouched_even_when_there_are_none(tacho: Tacho, run_id: str) -> None:
    one = tacho.json("verify", run_id)
    assert one["runs"][0]["unvouched"] == []
    whole = tacho.json("verify")
    assert "unvouched" not in whole["runs"][0]  # a store's runs are not checked for them


def test_the_output_option_has_both_names_everywhere(
    tacho: Tacho, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    where = tmp_path_factory.mktemp("out")
    assert tacho("export", run_id, "--out", str(where / "a.jsonl")).exit_code == EXIT_OK
    assert (where / "a.jsonl").stat().st_size > 0
    key = tacho("keys", "init", "--output", str(where / "k.key"), store=False)
    assert key.exit_code == EXIT_OK, key.output
    assert (where / "k.key").exists()


def test_migrate_names_its_source_not_the_global_store_option(
    tacho: Tacho, tmp_path_factory: pytest.TempPathFactory
) -> None:
    where = tmp_path_factory.mktemp("mig")
    result = tacho("migrate", str(where / "nope.db"), str(where / "to.db"), store=False)
    assert result.exit_code == 3, result.output
    assert f"no tachograph store at {where / 'nope.db'} (SRC)" in result.output
    assert "--store" not in result.output
    assert not (where / "to.db").exists()
    # a destination that cannot be opened is named as DST, not blamed on SRC
    blocked = where / "file"
    blocked.write_text("x")
    into = tacho("migrate", str(tacho.store), str(blocked / "to.db"), store=False)
    assert into.exit_code == 3, into.output
    assert "(DST)" in into.output
    assert "(SRC)" not in into.output


def test_replay_of_a_missing_file_or_a_file_of_many_runs_is_a_usage_error(
    tacho: Tacho, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    where = tmp_path_factory.mktemp("files")
    missing = tacho("replay", str(where / "nofile.jsonl"), "--agent", AGENT)
    assert missing.exit_code == EXIT_USAGE, missing.output
    assert "no such file" in missing.output
    assert tacho("fork", run_id, "--at", "3", "--agent", AGENT).exit_code == EXIT_OK
    assert tacho("export", "--all", "-o", str(where / "all.jsonl")).exit_code == EXIT_OK
    many = tacho("replay", str(where / "all.jsonl"), "--agent", AGENT)
    assert many.exit_code == EXIT_USAGE, many.output
    assert "holds 2 runs; replay takes a file of one run" in many.output


def test_a_store_under_a_file_is_a_clear_error(
    tacho: Tacho, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A store path whose folder is a file: one line, exit 3 (it was a NotADirectoryError
    traceback)."""
    where = tmp_path_factory.mktemp("under")
    (where / "afile").write_text("x")
    result = tacho("--store", str(where / "afile" / "x.db"), "demo", store=False)
    assert result.exit_code == 3, result.output
    assert "cannot create a store at" in result.output
    assert "Not a directory" in result.output
