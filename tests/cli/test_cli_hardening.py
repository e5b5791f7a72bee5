"""What an adversary or a tired user found, each as a test: atomic imports, hostile input,
terminal-safe output, narrow terminals, store paths, exports, tampered events, contention and
read-only stores. Real stores, real files, real ``tacho`` processes where the terminal or
the process matters."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.record.jsonl import write_events
from tachograph.testing import build_run

from .conftest import Tacho

Run = Callable[..., subprocess.CompletedProcess[str]]


def _write(path: Path, *runs: list[tg.Event]) -> Path:
    with path.open("wb") as out:
        for events in runs:
            write_events(events, out)
    return path


def _event_ids(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {row[0] for row in con.execute("SELECT event_id FROM events")}
    finally:
        con.close()


def _untrigger(db: Path) -> sqlite3.Connection:
    """A connection to ``db`` with the append-only triggers dropped: a tamperer's."""
    con = sqlite3.connect(db)
    for name in ("events_append_only_update", "payloads_erase_only"):
        con.execute(f"DROP TRIGGER {name}")
    return con


# -- 1. import is atomic ------------------------------------------------------------------


def test_an_import_refused_after_its_first_batches_stores_nothing(tacho: Tacho) -> None:
    # 2,500 events: the store already holds other events for the last run, which the old
    # batch-by-batch import discovered only after storing 2,000 of them.
    runs = [build_run(f"big-{n}", 1000 if n < 2 else 500) for n in range(3)]
    clash = build_run("big-2", 4, actor="someone-else")
    with tg.open_store(tacho.store) as store:
        store.append(clash)
        before = store.count_events()
    path = _write(tacho.store.parent / "big.jsonl", *runs)
    result = tacho("import", str(path), "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["stored"] is False
    assert report["written"] == 0
    (refusal,) = report["refused"]
    assert refusal["reason"] == "conflict"
    assert refusal["run_id"] == "big-2"
    assert refusal["seq"] == 0
    with tg.open_store(tacho.store) as store:
        assert store.count_events() == before
        assert not any(i.run_id in ("big-0", "big-1") for i in store.runs())
    text = tacho("import", str(path))
    assert text.exit_code == 1
    assert "nothing stored" in text.stderr
    assert "big-2" in text.stderr


def test_a_duplicate_event_id_refuses_the_whole_import(tacho: Tacho) -> None:
    first = build_run("dup-a", 1200)
    second = build_run("dup-b", 3)
    # The same event id in another run: the store's uniqueness refuses it.
    stolen = tg.Event(**{**_fields(second[1]), "event_id": first[5].event_id})
    second = [second[0], _rehash(stolen, second[0].hash)]
    path = _write(tacho.store.parent / "dup.jsonl", first, second)
    report = tacho.json("import", str(path), code=1)
    assert report["stored"] is False
    assert report["refused"][0]["reason"] == "conflict"
    assert not {e.event_id for e in first} & _event_ids(tacho.store)


def _fields(event: tg.Event) -> dict[str, object]:
    return {name: getattr(event, name) for name in tg.Event.__slots__}


def _rehash(event: tg.Event, prev: str) -> tg.Event:
    from tachograph.record.event import envelope_bytes, hash_envelope

    fields = _fields(event)
    fields["prev_hash"] = prev
    keys = (
        "v", "tenant", "run_id", "seq", "event_id", "ts", "type", "actor", "trace_id",
        "span_id", "idempotency_key", "model", "seed", "payload_digest", "prev_hash",
    )  # fmt: skip
    fields["hash"] = hash_envelope(envelope_bytes(*(fields[k] for k in keys)))
    return tg.Event(**fields)  # type: ignore[arg-type]


# -- 2. hostile input: typed errors with a location, every run reported -----------------------


def test_deep_nesting_is_a_typed_failure_not_a_traceback(tacho: Tacho, tmp_path: Path) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 10_000 + "]" * 10_000 + "\n")
    for command in ("verify", "import"):
        result = tacho(command, str(deep), "--json")
        assert result.exit_code == 1, (command, result.output)
        data = json.loads(result.stdout)
        text = json.dumps(data)
        assert "nested deeper than 64 levels" in text
        assert "Traceback" not in result.output


def test_a_tampered_seq_beyond_2_53_fails_its_run_and_every_run_is_reported(
    tacho: Tacho, run_id: str
) -> None:
    with tg.open_store(tacho.store) as store:
        store.append(build_run("other", 5))
    con = _untrigger(tacho.store)
    con.execute("UPDATE events SET seq=? WHERE run_id=? AND seq=3", (2**60, run_id))
    con.commit()
    con.close()
    data = tacho.json("verify", "--all", code=1)
    by_run = {r["run_id"]: r for r in data["runs"]}
    assert set(by_run) == {run_id, "other"}
    assert by_run["other"]["status"] == "verified"
    assert by_run[run_id]["status"] == "failed"


def test_an_unreadable_payload_is_reported_and_shown_marked_tampered(
    tacho: Tacho, run_id: str
) -> None:
    with tg.open_store(tacho.store) as store:
        store.append(build_run("other", 4))
    con = _untrigger(tacho.store)
    row = con.execute("SELECT id FROM events WHERE run_id=? AND seq=2", (run_id,)).fetchone()
    con.execute("UPDATE payloads SET body=? WHERE id=?", (b"[" * 5000, row[0]))
    con.commit()
    con.close()
    data = tacho.json("verify", code=1)
    assert {r["run_id"]: r["status"] for r in data["runs"]} == {
        run_id: "failed",
        "other": "verified",
    }
    shown = tacho("show", run_id)
    assert shown.exit_code == 1  # shown whole, marked, and a failure
    assert f"{run_id}: FAILED at seq 2, check 5" in shown.stdout
    assert "TAMPERED  (the stored payload is not valid JSON)" in shown.stdout
    assert "Traceback" not in shown.output


# -- 3. terminal-safe output ------------------------------------------------------------------

HOSTILE = "\x1b[2J\x1b]0;owned\x07\rok\n  99  12:00:00.000  admin  run.finished  forged\u202e\x00"


@pytest.fixture
def hostile_store(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "hostile.db"
    events = build_run(
        "hostile-run",
        4,
        actor="evil" + HOSTILE[:12],
        payload=lambda seq: {"name": "answer", "chosen": HOSTILE},
    )
    with tg.open_store(path, create=True) as store:
        store.append(events)
    return path, "hostile-run"


@pytest.mark.parametrize("force", [False, True], ids=["plain", "terminal"])
def test_recorded_control_and_bidi_characters_are_escaped(
    run_tacho: Run, hostile_store: tuple[Path, str], force: bool
) -> None:
    path, run_id = hostile_store
    env = {"FORCE_COLOR": "1", "NO_COLOR": "1", "COLUMNS": "200"} if force else {}
    for args in (("show", run_id), ("show", run_id, "--full"), ("runs",)):
        result = run_tacho("--store", str(path), *args, env=env)
        assert result.returncode == 0, result.stderr
        body = _strip_sgr(result.stdout)
        for bad in ("\x1b]", "\x1b[2J", "\r", "\x00", "\u202e", "\x07"):
            assert bad not in body, (args, bad)
        assert "\\x1b" in body or "\\u001b" in body
        assert not any(line.lstrip().startswith("99 ") for line in body.splitlines())


def test_json_output_escapes_c1_and_bidi_and_stays_equal(run_tacho: Run, tmp_path: Path) -> None:
    # JSON leaves DEL, C1 controls (CSI is U+009B) and bidi overrides raw; every --json
    # document must carry them as \\u escapes, and parse back to the same text.
    text = "ab\u202edc\u200b\u2066x\x85y\x9b2Jz\x7f\u2028"
    path = tmp_path / "c1.db"
    with tg.open_store(path, create=True) as store:
        store.append(build_run("c1-run", 3, payload=lambda seq: {"chosen": text}))
    for args in (("show", "c1-run", "--full", "--json"), ("runs", "--json")):
        result = run_tacho("--store", str(path), *args)
        assert result.returncode == 0, result.stderr
        for bad in ("\u202e", "\u2066", "\x85", "\x9b", "\x7f", "\u2028"):
            assert bad not in result.stdout, (args, repr(bad))
        data = json.loads(result.stdout)
        if args[0] == "show":
            assert any((e.get("payload") or {}).get("chosen") == text for e in data["events"]), data


def _strip_sgr(text: str) -> str:
    """Remove rich's own colour codes (ESC [ ... m), which are ours, not recorded bytes."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# -- 3. narrow terminals --------------------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_timeline_and_run_list_keep_seq_type_and_run_id(
    run_tacho: Run, store_path: Path, run_id: str, columns: int
) -> None:
    env = {"FORCE_COLOR": "1", "NO_COLOR": "1", "COLUMNS": str(columns)}
    shown = run_tacho("--store", str(store_path), "show", run_id, env=env)
    assert shown.returncode == 0, shown.stderr
    with tg.open_store(store_path) as store:
        events = store.events(run_id)
    lines = [_strip_sgr(line) for line in shown.stdout.splitlines()]
    for event in events:
        matching = [line for line in lines if line.split()[:1] == [str(event.seq)]]
        assert matching, (columns, event.seq)
        assert event.type in matching[0], (columns, event.seq, matching[0])
    assert max(len(line) for line in lines) <= columns
    listed = run_tacho("--store", str(store_path), "runs", env=env)
    assert run_id in _strip_sgr(listed.stdout)


# -- 4. store paths, exports, tampered events -------------------------------------------------


def test_verify_recognises_a_store_by_its_content(run_tacho: Run, store_path: Path) -> None:
    plain = store_path.parent / "store.db"
    shutil.copy(store_path, plain)
    result = run_tacho("verify", str(plain), "--json")
    assert result.returncode == 0, result.stdout
    data = json.loads(result.stdout)
    assert data["verified"] == 1
    assert data["failed"] == 0


def test_an_absolute_path_in_a_three_slash_url_is_absolute(
    run_tacho: Run, store_path: Path
) -> None:
    url = "sqlite://" + str(store_path)  # sqlite:///abs/path, as file:/// reads
    result = run_tacho("--store", url, "runs", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["runs"]) == 1


def test_export_to_a_folder_is_a_usage_error(tacho: Tacho, tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    result = tacho("export", "--all", "-o", str(folder))
    assert result.exit_code == 2
    assert "is a directory" in result.stderr
    fresh = tmp_path / "newdir"
    result = tacho("export", "--all", "-o", f"{fresh}/")
    assert result.exit_code == 2
    assert not fresh.exists()


def test_show_and_export_mark_tampered_events(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    con = _untrigger(tacho.store)
    con.execute("UPDATE events SET actor='mallory' WHERE run_id=? AND seq=4", (run_id,))
    con.commit()
    con.close()
    shown = tacho("show", run_id)
    assert "TAMPERED" in shown.stdout
    assert shown.exit_code == 1
    tampered_rows = [line for line in shown.stdout.splitlines() if "TAMPERED" in line]
    assert any(line.split()[0] == "4" for line in tampered_rows)
    data = tacho.json("show", run_id, code=1)
    assert next(e["seq"] for e in data["events"] if e["tampered"]) == 4
    exported = tacho("export", run_id, "-o", str(tmp_path / "out.jsonl"))
    assert exported.exit_code == 1
    assert "TAMPERED" in exported.stderr


# -- 4. contention and read-only stores -------------------------------------------------------

HOLD_LOCK = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN IMMEDIATE")
con.execute("INSERT INTO meta VALUES ('held', 'yes')")
print("locked", flush=True)
time.sleep(120)
"""


@pytest.fixture
def locked_store(
    store_path: Path, python: str, child_env: dict[str, str]
) -> tuple[Path, subprocess.Popen[str]]:
    holder = subprocess.Popen(
        [python, "-c", HOLD_LOCK, str(store_path)], stdout=subprocess.PIPE, text=True, env=child_env
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    yield store_path, holder
    holder.kill()
    holder.wait()


def test_reads_work_while_another_process_holds_the_write_lock(
    run_tacho: Run,
    tacho_exe: str,
    child_env: dict[str, str],
    tmp_path: Path,
    locked_store: tuple[Path, subprocess.Popen[str]],
    run_id: str,
) -> None:
    path, holder = locked_store
    # Envelope reads (the run list, verification, the audit) need no write: WAL readers.
    for args in (("runs", "--json"), ("verify", "--json"), ("audit", "--json")):
        result = run_tacho("--store", str(path), *args)
        assert result.returncode == 0, (args, result.stderr)
    # A payload read is itself audited (a write): it says what it waits for, then goes on as
    # soon as the writer lets go, with its answer complete.
    show = subprocess.Popen(
        [tacho_exe, "--store", str(path), "show", run_id, "--json"],
        cwd=tmp_path,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert show.stderr is not None
    line = show.stderr.readline()  # blocks until the wait is announced
    assert "waiting for the write lock" in line
    assert str(path) in line
    holder.kill()
    holder.wait()
    out, err = show.communicate(timeout=60)
    assert show.returncode == 0, err
    assert json.loads(out)["run"]["run_id"] == run_id


def test_a_writer_waiting_for_the_lock_says_so_and_stops_on_ctrl_c(
    tacho_exe: str,
    child_env: dict[str, str],
    locked_store: tuple[Path, subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    path, _holder = locked_store
    demo = subprocess.Popen(
        [tacho_exe, "--store", str(path), "demo"],
        cwd=tmp_path,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: a process started in the background of a non-interactive
        # shell inherits SIGINT ignored, which Python then keeps.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert demo.stderr is not None
    line = demo.stderr.readline()  # blocks until the wait is announced
    assert "waiting for the write lock" in line
    assert str(path) in line
    demo.send_signal(signal.SIGINT)
    demo.wait(timeout=30)  # stopped, rather than waiting out the lock (or TimeoutExpired)
    err = demo.stderr.read()
    assert demo.returncode == 130, err  # 128 + SIGINT, not 1 (a failed verification)
    demo.stdout.close() if demo.stdout else None
    demo.stderr.close()


def test_sigterm_stops_a_command_as_ctrl_c_does_with_exit_143(
    tacho_exe: str,
    child_env: dict[str, str],
    locked_store: tuple[Path, subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    # kill, timeout, systemd and Kubernetes stop a process with SIGTERM: its clean-up runs
    # (the lock wait gives up) and the exit status says so, 128 + SIGTERM
    path, _holder = locked_store
    demo = subprocess.Popen(
        [tacho_exe, "--store", str(path), "demo"],
        cwd=tmp_path,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert demo.stderr is not None
    assert "waiting for the write lock" in demo.stderr.readline()
    demo.send_signal(signal.SIGTERM)
    demo.wait(timeout=30)
    err = demo.stderr.read()
    assert demo.returncode == 143, err
    assert "Terminated" in err
    assert "Traceback" not in err
    demo.stdout.close() if demo.stdout else None
    demo.stderr.close()


def test_sigterm_during_an_export_leaves_no_partial_file(
    tacho_exe: str, child_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "big.db"
    with tg.open_store(path, create=True) as store:
        for i in range(4):
            store.append(
                build_run(f"big-{i}", 20_000, payload=lambda seq: {"n": seq, "pad": "x" * 200})
            )
    out = tmp_path / "out"
    out.mkdir()
    export = subprocess.Popen(
        [tacho_exe, "--store", str(path), "export", "--all", "-o", str(out / "all.jsonl")],
        env=child_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not list(out.glob("*.partial")) and export.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert export.poll() is None, "the export ended before it could be stopped"
    export.send_signal(signal.SIGTERM)
    _, err = export.communicate(timeout=60)
    assert export.returncode == 143, err
    assert sorted(p.name for p in out.iterdir()) == []  # no partial, no truncated file


def _read_only_mount(folder: Path, argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    script = f'mount --bind -o ro "{folder}" "{folder}" && exec "$@"'
    return subprocess.Popen(
        ["unshare", "-m", "sh", "-c", script, "sh", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _can_mount_read_only() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind -o ro / / 2>/dev/null"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


@pytest.mark.skipif(
    not _can_mount_read_only(), reason="needs a private read-only bind mount (unshare -m)"
)
def test_every_read_command_works_on_a_read_only_folder(
    tacho_exe: str, child_env: dict[str, str], store_path: Path, run_id: str, tmp_path: Path
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(store_path, folder / "runs.db")
    os.chmod(folder / "runs.db", 0o444)
    db = str(folder / "runs.db")
    env = {k: v for k, v in child_env.items() if k != "TACHOGRAPH_STORE"}
    for args in (
        ["runs"],
        ["show", run_id],
        ["verify"],
        ["verify", db],
        ["state", run_id],
        ["export", "--all"],
        ["diff", run_id, run_id],
    ):
        proc = _read_only_mount(folder, [tacho_exe, "--store", db, *args], env)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, (args, err)
        assert "readonly" not in err
    proc = _read_only_mount(folder, [tacho_exe, "--store", db, "demo"], env)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert "read-only" in err


# -- 6. tacho doctor --------------------------------------------------------------------------


def test_doctor_reports_a_healthy_store_and_advises_on_problems(tacho: Tacho, run_id: str) -> None:
    os.chmod(tacho.store, 0o600)
    data = tacho.json("doctor")
    assert data["ok"] is True
    checks = {f["check"]: f["level"] for f in data["findings"]}
    assert checks == {
        "integrity": "ok",
        "verification": "ok",
        "permissions": "ok",
        "schema": "ok",
        "seals": "ok",  # every recording is sealed by default
    }
    os.chmod(tacho.store, 0o666)
    con = _untrigger(tacho.store)
    con.execute("UPDATE events SET actor='mallory' WHERE run_id=? AND seq=2", (run_id,))
    con.commit()
    con.close()
    result = tacho("doctor")
    assert result.exit_code == 1
    assert "problem  verification" in result.stdout
    assert "chmod go-w" in result.stdout
