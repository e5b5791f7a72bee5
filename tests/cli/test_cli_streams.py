"""stdout and stderr in every state a shell can leave them: closed (``>&-``, ``2>&-``), on a
full disk, a pipe whose reader went away. A closed stream is the null device; stderr that
fails never ends a command nor changes its exit code; a command that has found a failure
exits 1 even when its reader stops reading. Real ``tacho`` processes, where the stream's
state matters."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tachograph.cli.app import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_STORE,
    EXIT_USAGE,
    CliError,
    agent_output,
)
from tachograph.errors import ReplayError
from tachograph.regression.corpus import NAME_BYTES
from tachograph.replay.guard import parse_allow

from .conftest import Tacho, read_and_close

Run = Callable[..., subprocess.CompletedProcess[bytes]]

REFUND = (b'"amount_cents":2500', b'"amount_cents":2600')
"""The demo run's refund at seq 9, changed."""

needs_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")


def _tamper(db: Path, run_id: str, seq: int, old: bytes, new: bytes) -> None:
    """Change one stored payload behind tachograph's back (its append-only trigger dropped)."""
    con = sqlite3.connect(db)
    con.execute("DROP TRIGGER payloads_erase_only")
    (pid,) = con.execute("SELECT id FROM events WHERE run_id=? AND seq=?", (run_id, seq)).fetchone()
    (body,) = con.execute("SELECT body FROM payloads WHERE id=?", (pid,)).fetchone()
    edited = bytes(body).replace(old, new)
    assert edited != bytes(body)
    con.execute("UPDATE payloads SET body=? WHERE id=?", (edited, pid))
    con.commit()
    con.close()


@pytest.fixture
def env(child_env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in child_env.items() if k not in ("FORCE_COLOR", "NO_COLOR")}


@pytest.fixture
def sh(tacho_exe: str, env: dict[str, str], tmp_path: Path) -> Run:
    """``tacho ARGS`` with the shell redirections ``redirect`` (``>&-``, ``2>&-``)."""

    def run(redirect: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["sh", "-c", f'exec "$@" {redirect}', "sh", tacho_exe, *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )

    return run


# -- 1. a closed stdout or stderr ----------------------------------------------------------


def test_a_closed_stdout_is_the_null_device(
    sh: Run, store_path: Path, run_id: str, tmp_path: Path
) -> None:
    out = tmp_path / "f.jsonl"
    done = sh(">&-", "--store", str(store_path), "export", run_id, "-o", str(out))
    assert done.returncode == EXIT_OK, done.stderr
    assert b"Traceback" not in done.stderr
    assert out.read_bytes().count(b"\n") == 15
    _tamper(store_path, run_id, 9, *REFUND)
    failed = sh(">&-", "--store", str(store_path), "export", run_id, "-o", str(out))
    assert failed.returncode == EXIT_FAILED, failed.stderr
    assert b"TAMPERED: " in failed.stderr
    assert b"Traceback" not in failed.stderr
    unknown = sh(">&-", "nosuchcmd")
    assert unknown.returncode == EXIT_USAGE, unknown.stderr
    assert b"No such command" in unknown.stderr
    missing = sh(">&-", "--store", str(store_path), "show", "nosuchrun", "--json")
    assert missing.returncode == EXIT_STORE, missing.stderr
    assert b"Traceback" not in missing.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("runs", "--limit", "-1", "--json"), EXIT_USAGE),  # click's own usage error
        (("show", "nosuchrun", "--json"), EXIT_STORE),  # a CliError
        (("nosuchcmd",), EXIT_USAGE),
    ],
)
def test_with_stderr_closed_an_error_goes_nowhere_never_to_stdout(
    sh: Run, store_path: Path, args: tuple[str, ...], code: int
) -> None:
    done = sh("2>&-", "--store", str(store_path), *args)
    assert done.returncode == code
    assert done.stdout == b""


def test_replay_json_with_stderr_closed_prints_its_document(
    sh: Run, store_path: Path, run_id: str
) -> None:
    agent = "tachograph.demo.agent:billing_agent"
    done = sh("2>&-", "--store", str(store_path), "replay", run_id, "--agent", agent, "--json")
    assert done.returncode == EXIT_OK
    assert json.loads(done.stdout)["run_id"] == run_id


def test_an_error_shown_without_stderr_is_not_written_to_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stderr", None)
    CliError("no such run", hints=("try this",)).show()
    assert capsys.readouterr().out == ""


def test_an_agent_under_json_without_stderr_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", None)
    with agent_output(True):
        print("from the agent")


# -- 2. stderr that fails ------------------------------------------------------------------


@needs_full
def test_stderr_on_a_full_disk_does_not_change_the_exit_code(
    tacho_exe: str, env: dict[str, str], store_path: Path, run_id: str
) -> None:
    whole = subprocess.run(
        [tacho_exe, "--store", str(store_path), "export", run_id],
        capture_output=True,
        env=env,
        check=True,
    ).stdout
    _tamper(store_path, run_id, 9, *REFUND)
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [tacho_exe, "--store", str(store_path), "export", run_id],
            stdout=subprocess.PIPE,
            stderr=full,
            env=env,
            check=False,
        )
    assert done.returncode == EXIT_FAILED  # the run does not verify; not 2
    assert len(done.stdout) == len(whole)


def test_stderr_whose_reader_went_away_does_not_end_the_command(
    tacho_exe: str, env: dict[str, str], store_path: Path, run_id: str
) -> None:
    _tamper(store_path, run_id, 9, *REFUND)
    read, write = os.pipe()
    os.close(read)  # every write to stderr fails: EPIPE
    try:
        done = subprocess.run(
            [tacho_exe, "--store", str(store_path), "export", run_id],
            stdout=subprocess.PIPE,
            stderr=write,
            env=env,
            check=False,
        )
    finally:
        os.close(write)
    assert done.returncode == EXIT_FAILED  # not 141: stdout was read whole
    assert done.stdout.count(b"\n") == 15


# -- 3. a failure found before the reader went away ------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("export", "--all"),
        ("show", "long"),
        ("show", "long", "--json"),
        ("state", "long"),
        ("state", "long", "--json"),
    ],
)
def test_a_failure_found_before_the_reader_went_away_exits_1_not_141(
    tacho_exe: str, env: dict[str, str], long_store: Path, args: tuple[str, ...]
) -> None:
    _tamper(long_store, "long", 700, b'"pad":"x', b'"pad":"y')
    code, err = read_and_close(tacho_exe, env, "--store", str(long_store), *args)
    assert code == EXIT_FAILED, err
    assert "Traceback" not in err
    if args[0] == "export":  # named on stderr before the data
        assert err.startswith("TAMPERED: long: FAILED at seq 700")


# -- 4. the root's --help and --version ------------------------------------------------------


@needs_full
@pytest.mark.parametrize("flag", ["--help", "-V"])
def test_root_help_and_version_on_a_full_disk_are_an_error(
    tacho_exe: str, env: dict[str, str], flag: str
) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [tacho_exe, flag], stdout=full, stderr=subprocess.PIPE, text=True, env=env, check=False
        )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Error: cannot write the output: No space left on device" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("flag", ["--help", "-V"])
def test_root_help_and_version_to_a_reader_gone_exit_141(
    tacho_exe: str, env: dict[str, str], flag: str
) -> None:
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [tacho_exe, flag], stdout=write, stderr=subprocess.PIPE, text=True, env=env, check=False
        )
    finally:
        os.close(write)
    assert done.returncode == EXIT_PIPE, done.stderr
    assert done.stderr == ""


# -- 5. a saved run's name that no file can have ---------------------------------------------


def test_save_refuses_a_name_too_long_for_a_file(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    for name in ("a" * 300, "é" * (NAME_BYTES // 2 + 1), "a" * (NAME_BYTES + 1)):
        result = tacho("save", run_id, "--to", str(corpus), "--verdict", "good", "--name", name)
        assert result.exit_code == EXIT_USAGE, result.output
        assert "is too long" in result.stderr
        assert not any(corpus.iterdir())
    fits = tacho(
        "save", run_id, "--to", str(corpus), "--verdict", "good", "--name", "a" * NAME_BYTES
    )
    assert fits.exit_code == EXIT_OK, fits.output
    assert (corpus / ("a" * NAME_BYTES + ".tacho.json")).is_file()


# -- 6. a key that cannot be written -----------------------------------------------------------


def test_keys_init_on_a_full_disk_leaves_no_key_behind(
    tacho: Tacho, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cryptography")
    target = tmp_path_factory.mktemp("keys") / "log.key"  # apart from the store's folder
    real = os.fdopen

    class Full:
        """A file on a full disk (the OS's answer, which a test cannot get unprivileged)."""

        def __init__(self, fd: int) -> None:
            self._file = real(fd, "w")

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self._file.close()

        def write(self, text: str) -> Any:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(fd))
    full = tacho("keys", "init", "-o", str(target))
    assert full.exit_code == EXIT_USAGE, full.output
    assert f"Error: cannot write the key {target}: No space left on device" in full.stderr
    assert not target.exists()
    monkeypatch.setattr(os, "fdopen", real)
    again = tacho("keys", "init", "-o", str(target))  # the retry is not refused
    assert again.exit_code == EXIT_OK, again.output
    assert target.read_text().startswith("PRIVATE+KEY+")


# -- 7. numbers out of range -------------------------------------------------------------------


def test_verify_refuses_a_negative_min_witnesses(tacho: Tacho) -> None:
    result = tacho("verify", "--min-witnesses", "-5")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "--min-witnesses" in result.stderr


@pytest.mark.parametrize("entry", ["host:99999", "host:65536", "host:²", "host:" + "9" * 5000])
def test_an_allowed_port_outside_0_to_65535_is_refused(
    tacho: Tacho, run_id: str, entry: str
) -> None:
    with pytest.raises(ReplayError):
        parse_allow([entry])
    agent = "tachograph.demo.agent:billing_agent"
    result = tacho("replay", run_id, "--agent", agent, "--allow-network", entry)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "a port 0-65535" in result.stderr


def test_the_ports_0_to_65535_are_allowed() -> None:
    assert parse_allow(["host:0", "host:65535", "host:*"]) == {"host:0", "host:65535", "host:*"}
