"""What a second adversarial review of the command line found, each as a test: exports that
replaced a device, a FIFO or a symbolic link; agents that exit or return what has no JSON
form; --json output mixed with the agent's own writes; recorded line separators that became
line breaks; unescaped corpus reports; empty files taken for stores or imported as nothing.
Real store files and, where file descriptors matter, real ``tacho`` processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.record.jsonl import verify_jsonl

from .conftest import Tacho

Run = Callable[..., subprocess.CompletedProcess[str]]

AGENTS = """
import os
import sys

def exits(task):
    sys.exit(0)

def generator(task):
    return (i for i in range(3))

def noisy(task):
    print("printed by the agent")
    os.write(1, b"written to descriptor 1 by the agent\\n")
    return "done"
"""


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of odd agents in the current directory (``--agent review_agents:NAME``)."""
    (tmp_path / "review_agents.py").write_text(AGENTS)
    monkeypatch.chdir(tmp_path)
    return "review_agents"


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


# -- export -o --------------------------------------------------------------------------


def test_export_into_a_fifo_writes_through_it_and_leaves_it_a_fifo(
    tacho: Tacho, run_id: str, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    # a daemon: if the export replaced the FIFO, the reader would wait on it for ever
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = tacho("export", run_id, "-o", str(fifo))
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert not reader.is_alive(), "nothing was written through the FIFO"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # not replaced by a regular file
    lines = [json.loads(line) for line in received[0].splitlines()]
    assert [line["seq"] for line in lines] == list(range(len(lines)))
    assert lines[0]["run_id"] == run_id


def test_export_through_a_symbolic_link_replaces_the_file_it_names(
    tacho: Tacho, run_id: str, tmp_path: Path
) -> None:
    real = tmp_path / "real.jsonl"
    real.write_text("an older export\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    result = tacho("export", run_id, "-o", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    assert link.resolve() == real.resolve()
    assert _lines(real)[0]["run_id"] == run_id
    assert stat.S_IMODE(real.stat().st_mode) == 0o600  # an export holds payloads
    # nothing of the temporary name is left beside it
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")) == []


def test_export_ignores_a_planted_partial_link(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    # The old export wrote to FILE.partial with O_TRUNC, following a link planted there.
    victim = tmp_path / "victim.txt"
    victim.write_text("must survive\n")
    (tmp_path / "out.jsonl.partial").symlink_to(victim)
    result = tacho("export", run_id, "-o", str(tmp_path / "out.jsonl"))
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "must survive\n"
    assert _lines(tmp_path / "out.jsonl")[0]["run_id"] == run_id


# -- agents that exit, or return what has no JSON form -------------------------------------


def test_replay_of_an_agent_that_exits_is_a_divergence_not_a_silent_success(
    tacho: Tacho, run_id: str, agents: str
) -> None:
    result = tacho("replay", run_id, "--agent", f"{agents}:exits")
    assert result.exit_code == 1, result.output
    assert "DIVERGED" in result.output
    assert "SystemExit" in result.output


def test_fork_of_an_agent_that_exits_finishes_the_new_run_aborted(
    tacho: Tacho, run_id: str, agents: str
) -> None:
    report = tacho.json("fork", run_id, "--at", "3", "--agent", f"{agents}:exits", code=1)
    assert report["final_status"] == "aborted"
    with tg.open_store(tacho.store) as store:
        finished = list(store.read(report["new_run_id"]))[-1]
    assert finished.type == "run.finished"
    assert finished.payload["status"] == "aborted"
    assert finished.payload["error"]["type"] == "SystemExit"


def test_replay_json_of_an_output_with_no_json_form_is_one_document(
    tacho: Tacho, run_id: str, agents: str
) -> None:
    report = tacho.json("replay", run_id, "--agent", f"{agents}:generator", code=1)
    assert report["error"]["type"] == "tachograph.errors.ProfileError"
    assert "generator" in report["error"]["message"]


def test_replay_json_keeps_the_agents_descriptor_writes_off_stdout(
    store_path: Path, run_id: str, tmp_path: Path, run_tacho: Run
) -> None:
    (tmp_path / "review_agents.py").write_text(AGENTS)
    done = run_tacho(
        "--store", str(store_path), "replay", run_id, "--agent", "review_agents:noisy", "--json"
    )
    assert done.returncode == 1, done.stderr  # the noisy agent does not follow the record
    report = json.loads(done.stdout)  # nothing else on stdout
    assert report["run_id"] == run_id
    assert "printed by the agent" in done.stderr
    assert "written to descriptor 1 by the agent" in done.stderr


def test_corpus_test_json_keeps_the_agents_output_off_stdout(
    store_path: Path, run_id: str, tmp_path: Path, run_tacho: Run
) -> None:
    (tmp_path / "review_agents.py").write_text(AGENTS)
    saved = run_tacho(
        "--store", str(store_path), "save", run_id, "--to", "corpus", "--verdict", "good"
    )
    assert saved.returncode == 0, saved.stderr
    done = run_tacho("test", "corpus", "--agent", "review_agents:noisy", "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert "printed by the agent" in done.stderr


# -- recorded text on the terminal ---------------------------------------------------------


HOSTILE = "hello\u2028runs are identical\r\x1b[2Jforged"


def _two_runs(path: Path) -> tuple[str, str]:
    ids = []
    for value in (HOSTILE, "hello"):
        with tg.record(path, actor="review", input={"text": value}) as run:
            ids.append(run.run_id)
    return ids[0], ids[1]


def test_diff_keeps_recorded_line_separators_on_their_line(tmp_path: Path, runner: object) -> None:
    path = tmp_path / "sep.db"
    a, b = _two_runs(path)
    tacho = Tacho(path, runner)  # type: ignore[arg-type]
    result = tacho("diff", a, b)
    assert result.exit_code == 1, result.output
    out = result.output
    assert "\u2028" not in out
    assert "\r" not in out
    assert "\x1b" not in out
    # the changed value is on one line, escaped, not split into a forged "runs are identical"
    assert not any(line.strip().startswith("runs are identical") for line in out.split("\n"))
    assert "\\u2028" in out


def test_corpus_test_report_escapes_recorded_text(
    tacho: Tacho, run_id: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    saved = tacho(
        "save", run_id, "--to", str(corpus), "--verdict", "good", "--note", "note\x1b[2J\rx"
    )
    assert saved.exit_code == 0, saved.output
    result = tacho(
        "test", str(corpus), "--agent", "tachograph.demo.agent:billing_agent_v2", store=False
    )
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output
    assert "\r" not in result.output
    assert "\\x1b[2J" in result.output


# -- empty files ---------------------------------------------------------------------------


def test_a_read_command_does_not_turn_an_empty_file_into_a_store(
    tmp_path: Path, runner: object
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"")
    result = Tacho(notes, runner)("runs")  # type: ignore[arg-type]
    assert result.exit_code == 3
    assert "empty file, not a tachograph store" in result.output
    assert notes.read_bytes() == b""


def test_import_of_an_empty_file_is_refused_and_creates_no_store(
    tmp_path: Path, runner: object
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    store = tmp_path / "new.db"
    tacho = Tacho(store, runner)  # type: ignore[arg-type]
    result = tacho("import", str(empty), "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["stored"] is False
    assert "empty file" in report["refused"][0]["message"]
    assert not store.exists()


def test_import_json_into_a_store_that_cannot_be_opened_still_prints_its_report(
    tacho: Tacho, run_id: str, tmp_path: Path, runner: object
) -> None:
    exported = tmp_path / "run.jsonl"
    assert tacho("export", run_id, "-o", str(exported)).exit_code == 0
    broken = tmp_path / "broken.db"
    broken.write_text("not a database\n")
    result = Tacho(broken, runner)("import", str(exported), "--json")  # type: ignore[arg-type]
    assert result.exit_code == 3
    report = json.loads(result.stdout)
    assert report["refused"][0]["reason"] == "store"


# -- reads of payloads name a purpose and are audited ---------------------------------------


def _reads(path: Path) -> list[tuple[str, str]]:
    with tg.open_store(path) as store:
        return [
            (r.detail["purpose"], r.detail["run_id"])
            for r in store.read_audit()
            if r.action == "read"
        ]


def test_diff_reads_for_a_purpose_and_is_audited(tmp_path: Path, runner: object) -> None:
    path = tmp_path / "two.db"
    a, b = _two_runs(path)
    tacho = Tacho(path, runner)  # type: ignore[arg-type]
    before = len(_reads(path))
    result = tacho("diff", a, b, "--purpose", "metrics")
    reads = _reads(path)[before:]
    assert ("metrics", a) in reads
    assert ("metrics", b) in reads
    assert "hello" not in result.output  # metrics may not read the payloads: withheld


def test_save_reads_for_a_purpose_and_is_audited(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    before = len(_reads(tacho.store))
    saved = tacho(
        "save", run_id, "--to", str(tmp_path / "c"), "--verdict", "good", "--purpose", "metrics"
    )
    assert saved.exit_code == 0, saved.output
    assert ("metrics", run_id) in _reads(tacho.store)[before:]
    (fixture,) = (tmp_path / "c").glob("*.jsonl")
    assert all(line["payload"] is None for line in _lines(fixture))  # withheld, still verifies
    (report,) = verify_jsonl(fixture)
    assert report.ok


def test_export_to_a_terminal_escapes_what_json_leaves_raw(
    tmp_path: Path, tacho_exe: str, child_env: dict[str, str]
) -> None:
    """On a terminal the JSON lines keep their values but not the raw bidi override or line
    separator a recorded answer held; through a pipe the bytes are the stored ones."""
    import pty
    import select

    path = tmp_path / "tty.db"
    with tg.record(path, actor="review", input={"text": "abc\u202edef\u2028x\x7f"}) as run:
        pass
    env = {k: v for k, v in child_env.items() if k != "TACHOGRAPH_STORE"}
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [tacho_exe, "--store", str(path), "export", run.run_id],
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=30)
    os.close(master)
    shown = b"".join(chunks)
    assert proc.returncode == 0
    for raw in ("\u202e", "\u2028", "\x7f"):
        assert raw.encode() not in shown
    assert b"\\u202e" in shown
    piped = subprocess.run(
        [tacho_exe, "--store", str(path), "export", run.run_id],
        capture_output=True,
        env=env,
        check=True,
    ).stdout
    assert "\u202e".encode() in piped  # the evidence, byte for byte
    on_screen = [json.loads(line) for line in shown.replace(b"\r\n", b"\n").splitlines()]
    assert on_screen == [json.loads(line) for line in piped.splitlines()]
