"""The actor is in every envelope, which erasure cannot reach (SPEC section 4): a redactor
processes it as it processes payload text. An e-mail given as the actor becomes its keyed
token under the PII policy, a secret becomes a marker by default; a run so recorded replays
and forks as reproduced, and an import through a redactor redacts the actors it brings."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import tachograph
from tachograph.capture.recorder import writer_for
from tachograph.capture.session import current_session
from tachograph.privacy import Redactor, pii_policy
from tachograph.record.seal import Sealer, process_actor
from tachograph.store import SQLiteStore

from .planted import KEY, STRIPE
from .test_replay_redacted import RULES, TASK, agent

EMAIL = "Ann.Lee@example.com"


def _hits(path: Path, needle: bytes) -> int:
    return sum(p.read_bytes().count(needle) for p in path.parent.glob(path.name + "*"))


def test_an_email_as_the_actor_is_its_token_in_every_envelope_and_in_no_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        policy = pii_policy(KEY)
        with tachograph.record(store, actor=EMAIL, input={"n": 1}, processors=[policy]) as run:
            tachograph.emit("acme.step", {"n": 2})
            session = current_session()  # an event's own actor (a handoff's integrations)
            assert session is not None
            session.emit("acme.step", {"n": 3}, actor=f"reviewer {EMAIL}")
        writer_for(store).drain()
        token = KEY.token(EMAIL.lower())
        actors = [e.actor for e in store.read(run.run_id)]
        assert actors[0] == token
        assert actors[2] == f"reviewer {token}"
        assert set(actors) == {token, f"reviewer {token}"}
        assert store.run_info(run.run_id).actor == token
        assert [r.run_id for r in store.runs(actor=token)] == [run.run_id]
        assert store.verify(run.run_id).ok
        assert _hits(path, b"ann.lee") + _hits(path, b"Ann.Lee") == 0
    finally:
        store.close()


def test_by_default_a_secret_in_the_actor_is_a_marker_and_a_plain_name_stays(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        with tachograph.record(store, actor=f"svc {STRIPE}", input=None) as secret_run:
            pass
        with tachograph.record(store, actor="billing_agent", input=None) as plain_run:
            pass
        writer_for(store).drain()
        assert store.run_info(secret_run.run_id).actor == "svc [redacted:secret:stripe]"
        assert store.run_info(plain_run.run_id).actor == "billing_agent"
        with tachograph.record(
            store, actor=f"svc {STRIPE}", input=None, redact_secrets=False
        ) as opted_out:
            pass
        writer_for(store).drain()
        assert store.run_info(opted_out.run_id).actor == f"svc {STRIPE}"  # the caller's choice
    finally:
        store.close()


def test_a_run_with_a_tokenized_actor_replays_and_forks_as_reproduced(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    processors = [pii_policy(KEY, rules=RULES)]
    result = tachograph.record_run(agent, TASK, store=db, actor=EMAIL, processors=processors)
    store = tachograph.open_store(db)
    assert store.run_info(result.run_id).actor == KEY.token(EMAIL.lower())
    report = tachograph.replay(db, result.run_id, agent, processors=processors)
    assert report.reproduced, report.render()
    forked = tachograph.fork(db, result.run_id, 2, agent, processors=processors)
    assert store.run_info(forked.run_id).actor == KEY.token(EMAIL.lower())


def test_an_import_through_a_redactor_redacts_the_actors_it_brings(tmp_path: Path) -> None:
    source = SQLiteStore(tmp_path / "plain.db")
    target = SQLiteStore(tmp_path / "redacted.db")
    try:
        with tachograph.record(source, actor=EMAIL, input={"n": 1}) as run:
            tachograph.emit("acme.step", {"n": 2})
        writer_for(source).drain()
        exported = io.BytesIO()
        tachograph.export_run(source, run.run_id, exported)
        assert EMAIL.encode() in exported.getvalue()
        report = tachograph.import_jsonl(
            target, io.BytesIO(exported.getvalue()), processors=[pii_policy(KEY)]
        )
        assert report.written == 3
        assert {e.actor for e in target.read(run.run_id)} == {KEY.token(EMAIL.lower())}
        assert target.verify(run.run_id).ok
        # through a redactor that finds nothing, the events are the very same
        again = SQLiteStore(tmp_path / "same.db")
        try:
            tachograph.import_jsonl(
                again, io.BytesIO(exported.getvalue()), processors=[Redactor(secrets=False)]
            )
            assert list(again.read(run.run_id)) == list(source.read(run.run_id))
        finally:
            again.close()
    finally:
        source.close()
        target.close()


def test_processors_without_a_text_method_leave_the_actor_and_its_checks_hold() -> None:
    def upper(event_type: str, payload: dict[str, object]) -> dict[str, object]:
        return payload

    assert process_actor([upper], EMAIL) == EMAIL
    assert process_actor([upper, pii_policy(KEY)], EMAIL) == KEY.token(EMAIL.lower())
    sealer = Sealer(run_id="run-a", actor=EMAIL, processors=[pii_policy(KEY)])
    event = sealer.seal("acme.step", {"n": 1}, actor="someone else")
    assert event.actor == "someone else"
    assert sealer.actor_of(EMAIL) == sealer.actor == KEY.token(EMAIL.lower())


def test_tacho_runs_finds_an_actor_by_the_address_a_user_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tacho runs --actor`` asks for the actor as given and as a recording in this
    environment stores it, so the e-mail finds its tokenized runs and the runs recorded
    before actors were redacted."""
    from click.testing import CliRunner

    from tachograph.cli.app import cli
    from tachograph.testing import build_run

    monkeypatch.setenv("TACHOGRAPH_PII", "on")
    monkeypatch.setenv("TACHOGRAPH_PII_KEY", KEY.keys[KEY.current].hex())
    monkeypatch.setenv("TACHOGRAPH_PII_KEY_ID", KEY.current)
    monkeypatch.delenv("TACHOGRAPH_PII_KEY_FILE", raising=False)
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        with tachograph.record(store, actor=EMAIL, input=None) as new:
            pass
        old = build_run("run-old", 2, actor=EMAIL)  # as written before: the address itself
        store.append(old)
        with tachograph.record(store, actor="someone-else", input=None):
            pass
        writer_for(store).drain()
    finally:
        store.close()
    result = CliRunner().invoke(cli, ["--store", str(path), "runs", "--actor", EMAIL, "--json"])
    assert result.exit_code == 0, result.output
    found = {r["run_id"]: r["actor"] for r in json.loads(result.stdout)["runs"]}
    assert found == {new.run_id: KEY.token(EMAIL.lower()), "run-old": EMAIL}


def test_an_import_redacts_the_actor_of_erased_events_too(tmp_path: Path) -> None:
    """An erased event is only re-linked on import (its payload is gone), but its actor is
    an envelope field the erasure left: a subject's erasure erases ``run.started``, so the
    run's summary kept the address."""
    from tachograph.lifecycle.erasure import erase

    source = SQLiteStore(tmp_path / "plain.db")
    target_path = tmp_path / "redacted.db"
    target = SQLiteStore(target_path)
    try:
        with tachograph.record(source, actor=EMAIL, input={"n": 1}) as run:
            tachograph.emit("acme.step", {"n": 2})
        writer_for(source).drain()
        erase(source, run.run_id, seqs=[0, 1], reason="test")
        exported = io.BytesIO()
        tachograph.export_run(source, run.run_id, exported)
        report = tachograph.import_jsonl(
            target, io.BytesIO(exported.getvalue()), processors=[pii_policy(KEY)]
        )
        assert report.redacted == 3
        token = KEY.token(EMAIL.lower())
        assert [(e.erased, e.actor) for e in target.read(run.run_id)] == [
            (True, token),
            (True, token),
            (False, token),
        ]
        assert target.run_info(run.run_id).actor == token
        verified = target.verify(run.run_id)
        assert verified.ok
        assert verified.erased == (0, 1)
    finally:
        source.close()
        target.close()
    assert _hits(target_path, b"ann.lee") + _hits(target_path, b"Ann.Lee") == 0


def test_tacho_runs_finds_an_actor_under_an_older_key_and_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a rotation the run holds the older key's token: every key of the ring is
    asked. With ``TACHOGRAPH_PII=on`` and no key, the actor as given is still asked for
    (``tacho runs`` lists runs; it records nothing)."""
    from click.testing import CliRunner

    from tachograph.cli.app import cli
    from tachograph.testing import build_run

    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        with tachograph.record(store, actor=EMAIL, input=None, processors=[pii_policy(KEY)]) as old:
            pass
        store.append(build_run("run-plain", 2, actor=EMAIL))
        writer_for(store).drain()
    finally:
        store.close()
    ring = tmp_path / "keys"
    ring.write_text(f"t2 {'ab' * 16}\nt1 {KEY.keys[KEY.current].hex()}\n")
    ring.chmod(0o600)
    monkeypatch.setenv("TACHOGRAPH_PII", "on")
    monkeypatch.delenv("TACHOGRAPH_PII_KEY", raising=False)
    monkeypatch.setenv("TACHOGRAPH_PII_KEY_FILE", str(ring))
    argv = ["--store", str(path), "runs", "--actor", EMAIL, "--json"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert {r["run_id"] for r in json.loads(result.stdout)["runs"]} == {old.run_id, "run-plain"}
    monkeypatch.delenv("TACHOGRAPH_PII_KEY_FILE")
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    assert {r["run_id"] for r in json.loads(result.stdout)["runs"]} == {"run-plain"}
    assert "warning: PII redaction needs a key" in result.stderr  # said, not silent
