"""Shared pieces of the sealing tests: recording sealed runs, rehashing lines, keys."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from tachograph.capture.recorder import Recorder
from tachograph.cli.app import cli
from tachograph.record.checkpoint import SigningKey, generate_key
from tachograph.record.event import Event, new_event
from tachograph.record.jsonl import write_events
from tachograph.sealing import SealingObserver, SealPolicy
from tachograph.store import SQLiteStore


def make_key(
    tmp_path: Path, name: str = "log.example/tachograph", *, witness: bool = False
) -> tuple[SigningKey, Path]:
    key = generate_key(name, kind=4 if witness else 1)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name.replace('/', '_')}.key"
    path.write_text(key.encode() + "\n")
    path.chmod(0o600)
    return key, path


def record(
    store: SQLiteStore,
    run_id: str,
    events: int,
    *,
    key: SigningKey | None,
    every: int = 5,
    finish: bool = True,
    witnesses: list[Any] | None = None,
    tenant: str = "default",
) -> SealingObserver:
    """Record a run of ``events`` events (the last one ``run.finished`` when ``finish``)."""
    observer = SealingObserver(
        policy=SealPolicy(every_events=every, every_seconds=3600),
        key=key,
        witnesses=witnesses or [],
    )
    recorder = Recorder(store, run_id=run_id, actor="agent", tenant=tenant, observers=[observer])
    for seq in range(events):
        if seq == 0:
            recorder.append("run.started", {"input": run_id, "env": {}})
        elif finish and seq == events - 1:
            recorder.append("run.finished", {"status": "ok"})
        else:
            recorder.append("decision", {"name": "step", "chosen": seq})
    recorder.flush()
    observer.drain()
    assert observer.errors == []
    return observer


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rehash(lines: list[dict[str, Any]]) -> bytes:
    """Rebuild a valid chain over ``lines`` (new salts, digests and hashes): a forger's work."""
    events: list[Event] = []
    prev = None
    for seq, line in enumerate(lines):
        event = new_event(
            run_id=line["run_id"],
            seq=seq,
            type=line["type"],
            actor=line["actor"],
            payload=line["payload"],
            prev_hash=prev,
            tenant=line["tenant"],
            ts=line["ts"],
        )
        events.append(event)
        prev = event.hash
    out = io.BytesIO()
    write_events(events, out)
    return out.getvalue()


def tacho(*args: str, store: Path | None = None) -> Result:
    argv = (["--store", str(store)] if store is not None else []) + list(args)
    return CliRunner().invoke(cli, argv, catch_exceptions=False)


def start_witness(wdir: Path, wkey_file: Path, log_key: str) -> tuple[subprocess.Popen[str], str]:
    """A ``tacho witness`` process on 127.0.0.1 (a free port) keeping its state in ``wdir``,
    cosigning with the key in ``wkey_file`` for the log ``log_key``: (process, its URL)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tachograph.cli import main; main()",
            "witness",
            "--dir",
            str(wdir),
            "--key-file",
            str(wkey_file),
            "--log-key",
            log_key,
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    raw = ""
    while not raw.rstrip().endswith("}"):
        line = proc.stdout.readline()
        assert line, "the witness exited"
        raw += line
    return proc, json.loads(raw)["url"]
