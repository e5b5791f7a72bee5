"""Blobs (content-addressed, with times to live, verified when present, expired when not) and
purpose-scoped reads (filtered by the policy, denied with a typed error, every read audited)."""

from __future__ import annotations

import io
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph
from tachograph.cli.app import cli
from tachograph.errors import PurposeDenied, StoreError
from tachograph.lifecycle.blobs import BlobRule, BlobStore, check_blobs, is_blob_ref, refs_in
from tachograph.lifecycle.purpose import PurposePolicy, PurposeRule, load_policy, scoped
from tachograph.record.jsonl import verify_jsonl
from tachograph.store import SQLiteStore
from test_independent_verifier import audit as independent_audit


def _record_with_blobs(store: SQLiteStore) -> tuple[str, BlobStore]:
    blobs = BlobStore.beside(store)
    by_path = BlobRule(blobs, paths=["$.document"], types=["acme.*"], ttl=3600)
    by_size = BlobRule(blobs, threshold=2000, types=["acme.note"])
    with tachograph.record(store, actor="a", input="go", processors=[by_path, by_size]) as run:
        tachograph.emit("acme.upload", {"document": {"pages": ["p1", "p2"]}, "name": "contract"})
        tachograph.emit("acme.note", {"big": "y" * 5000, "small": "kept inline"})
    tachograph.capture.recorder.writer_for(store).drain()
    return run.run_id, blobs


def test_values_leave_the_log_as_references(store: SQLiteStore) -> None:
    run_id, blobs = _record_with_blobs(store)
    upload, note = store.events(run_id)[1:3]
    assert is_blob_ref(upload.payload["document"])
    assert upload.payload["name"] == "contract"
    assert is_blob_ref(note.payload["big"])
    assert note.payload["small"] == "kept inline"
    ref = note.payload["big"]
    assert ref["size"] == 5000
    assert ref["media_type"] == "text/plain; charset=utf-8"
    assert blobs.get(ref["$blob"]) == b"y" * 5000
    path = blobs.path_for(ref["$blob"])
    assert path.parent.parent.parent == Path(store.path + ".blobs")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert blobs.info(upload.payload["document"]["$blob"]).expires is not None  # type: ignore[union-attr]
    out = io.BytesIO()
    tachograph.export_run(store, run_id, out)
    assert independent_audit(out.getvalue().decode().rstrip("\n").split("\n")) == []


def test_verify_checks_present_blobs_and_reports_missing_ones(store: SQLiteStore) -> None:
    run_id, blobs = _record_with_blobs(store)
    check = check_blobs(store.events(run_id), blobs)
    assert check.ok
    assert len(check.verified) == 2
    assert check.expired == ()
    upload, note = store.events(run_id)[1:3]
    blobs.delete(upload.payload["document"]["$blob"])
    tampered = blobs.path_for(note.payload["big"]["$blob"])
    tampered.write_bytes(b"z" * 5000)
    check = check_blobs(store.events(run_id), blobs)
    assert [(s, p) for s, p, _ in check.expired] == [(1, "$.document")]
    assert [(s, p) for s, p, _ in check.failures] == [(2, "$.big")]
    assert not check.ok
    assert store.verify(run_id).ok  # the chain commits to the references only


def test_export_blobs_carries_them(store: SQLiteStore, tmp_path: Path) -> None:
    run_id, _ = _record_with_blobs(store)
    target = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        cli, ["--store", store.path, "export", run_id, "-o", str(target), "--blobs"]
    )
    assert result.exit_code == 0, result.output
    assert "2 blob(s)" in result.output
    copied = BlobStore(f"{target}.blobs")
    (events,) = tachograph.read_jsonl(target)
    assert check_blobs(events, copied).verified
    assert len(check_blobs(events, copied).verified) == 2


# -- purposes -----------------------------------------------------------------------------


def test_the_audit_purpose_reads_envelopes_and_decisions(store: SQLiteStore, demo_run: str) -> None:
    full = store.events(demo_run)
    seen = scoped(store, "audit", actor="auditor").events(demo_run)
    assert [e.hash for e in seen] == [e.hash for e in full]  # every envelope
    for before, after in zip(full, seen, strict=True):
        if before.type in ("decision", "plan.selected", "run.finished") or before.type.startswith(
            "guardrail."
        ):
            assert after.payload == before.payload
        elif before.type.startswith("model.request") or before.type == "model.response":
            assert after.erased
        elif before.type == "tool.requested":
            assert set(after.payload) == {"tool", "effect", "schema_version"} & set(before.payload)
            assert after.salt is None
    (record,) = [r for r in store.read_audit() if r.action == "read"]
    assert (record.actor, record.tenant, record.detail["purpose"]) == (
        "auditor",
        "default",
        "audit",
    )
    assert record.detail["run_id"] == demo_run


def test_an_export_under_a_narrow_purpose_still_verifies(store: SQLiteStore, demo_run: str) -> None:
    out = io.BytesIO()
    tachograph.export_run(scoped(store, "audit", whole_events=True), demo_run, out)
    lines = out.getvalue().decode().rstrip("\n").split("\n")
    withheld = independent_audit(lines)
    assert 0 < len(withheld) < len(lines)
    out.seek(0)
    assert all(r.ok for r in verify_jsonl(out))


def test_a_denied_read_is_a_typed_error_and_is_recorded(store: SQLiteStore, demo_run: str) -> None:
    with pytest.raises(PurposeDenied) as info:
        scoped(store, "marketing").events(demo_run)
    assert isinstance(info.value, StoreError)
    assert info.value.purpose == "marketing"
    policy = PurposePolicy({"support": PurposeRule("support", payloads=("*",), tenants=("acme",))})
    with pytest.raises(PurposeDenied, match="tenant 'default'"):
        scoped(store, "support", policy=policy).events(demo_run)
    assert [r.action for r in store.read_audit()] == ["read.denied", "read.denied"]


def test_a_policy_file_and_the_cli_option(
    store: SQLiteStore, demo_run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "purposes.toml"
    path.write_text(
        '[purposes.support]\npayloads = ["decision"]\n'
        '[purposes.support.fields]\n"tool.requested" = ["tool"]\n'
    )
    assert load_policy(path).rule("support").view("tool.requested") == ("tool",)
    monkeypatch.setenv("TACHOGRAPH_PURPOSE_POLICY", str(path))
    runner = CliRunner()
    shown = runner.invoke(
        cli, ["--store", store.path, "show", demo_run, "--purpose", "support", "--json", "--full"]
    )
    assert shown.exit_code == 0, shown.output
    denied = runner.invoke(cli, ["--store", store.path, "show", demo_run, "--purpose", "debug"])
    assert denied.exit_code == 3
    assert "unknown purpose 'debug'" in denied.output
    listed = runner.invoke(cli, ["--store", store.path, "audit", "--json"])
    assert '"read.denied"' in listed.output
    assert '"ok": true' in listed.output


def test_tacho_verify_checks_blobs_in_a_store_and_beside_a_file(
    store: SQLiteStore, tmp_path: Path
) -> None:
    import json

    run_id, blobs = _record_with_blobs(store)
    runner = CliRunner()

    def verify(*args: str) -> tuple[int, dict[str, object], str]:
        result = runner.invoke(cli, ["--store", store.path, "verify", *args, "--json"])
        text = runner.invoke(cli, ["--store", store.path, "verify", *args])
        assert text.exit_code == result.exit_code, text.output
        return result.exit_code, json.loads(result.stdout), text.output

    code, data, text = verify(run_id)
    assert code == 0
    (run,) = data["runs"]  # type: ignore[misc]
    assert (len(run["blobs"]["verified"]), run["blobs"]["expired"], run["blobs"]["ok"]) == (
        2,
        [],
        True,
    )
    assert data["blobs"] == {"verified": 2, "expired": 0, "failed": 0, "malformed": 0}
    assert "2 verified, 0 expired" in text

    # an export with its blobs verifies them beside the file, and reports a file without them
    target = tmp_path / "out.jsonl"
    runner.invoke(cli, ["--store", store.path, "export", run_id, "-o", str(target), "--blobs"])
    code, data, _ = verify(str(target))
    assert (code, data["blobs"]) == (
        0,
        {"verified": 2, "expired": 0, "failed": 0, "malformed": 0},
    )
    bare = tmp_path / "bare.jsonl"
    bare.write_bytes(target.read_bytes())
    code, data, text = verify(str(bare))
    assert (code, data["ok"], data["blobs"]) == (
        0,
        True,
        {"verified": 0, "expired": 2, "failed": 0, "malformed": 0},
    )
    assert "2 expired" in text

    # an expired (deleted) blob is reported, not a failure; changed bytes fail check 5
    upload, note = store.events(run_id)[1:3]
    blobs.delete(upload.payload["document"]["$blob"])
    blobs.path_for(note.payload["big"]["$blob"]).write_bytes(b"z" * 5000)
    code, data, text = verify()
    assert (code, data["ok"], data["failed"]) == (1, False, 1)
    (run,) = data["runs"]  # type: ignore[misc]
    assert [e["path"] for e in run["blobs"]["expired"]] == ["$.document"]
    assert [f["path"] for f in run["blobs"]["failures"]] == ["$.big"]
    assert run["status"] == "failed"
    assert "seq 2 $.big: check 5" in text


def test_library_reads_name_a_purpose_and_are_audited(store: SQLiteStore, demo_run: str) -> None:
    """The facade's export, RunHistory (replay, fork, resume) and the OTLP export read for a
    purpose (documented defaults: debug, replay, debug) and append a read record each."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import tachograph.otel as tgo
    from tachograph.replay.history import RunHistory

    def reads() -> list[tuple[str, str]]:
        return [
            (r.detail["purpose"], r.detail["run_id"])
            for r in store.read_audit()
            if r.action == "read"
        ]

    assert reads() == []
    out = io.BytesIO()
    tachograph.export_run(store, demo_run, out)
    assert reads() == [("debug", demo_run)]
    RunHistory.from_store(store, demo_run)
    assert reads()[-1] == ("replay", demo_run)
    spans = InMemorySpanExporter()
    assert tgo.export_run(store, demo_run, exporter=spans).ok
    assert reads()[-1] == ("debug", demo_run)

    # a narrower purpose withholds, and an export under it still verifies
    narrow = io.BytesIO()
    tachograph.export_run(store, demo_run, narrow, purpose="metrics")
    assert reads()[-1] == ("metrics", demo_run)
    narrow.seek(0)
    (events,) = tachograph.read_jsonl(narrow)
    assert all(e.erased for e in events)
    with pytest.raises(PurposeDenied):
        tachograph.export_run(store, demo_run, io.BytesIO(), purpose="gossip")
    assert [r.action for r in store.read_audit()][-1] == "read.denied"
    # replay reads for "replay": a history read under "metrics" has nothing to replay
    with pytest.raises(tachograph.Unreplayable):
        RunHistory.from_store(store, demo_run, purpose="metrics").check_replayable()
    # a store already scoped to a purpose is read once, not twice
    before = len(reads())
    tachograph.export_run(
        scoped(store, "audit", whole_events=True), demo_run, io.BytesIO(), purpose="audit"
    )
    assert len(reads()) == before + 1


def test_export_run_to_a_path_writes_the_whole_file_or_nothing(
    store: SQLiteStore, demo_run: str, tmp_path: Path
) -> None:
    target = tmp_path / "run.jsonl"
    assert tachograph.export_run(store, demo_run, target) == store.run_info(demo_run).events
    (report,) = verify_jsonl(target)
    assert report.ok
    assert report.run_id == demo_run
    # a purpose that is refused leaves the earlier file as it was, and no temporary file
    before = target.read_bytes()
    with pytest.raises(PurposeDenied):
        tachograph.export_run(store, demo_run, str(target), purpose="gossip")
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if "run.jsonl" in p.name] == ["run.jsonl"]


def test_erasing_a_payload_deletes_the_blobs_it_references(store: SQLiteStore) -> None:
    from tachograph.lifecycle.erasure import erase

    run_id, blobs = _record_with_blobs(store)
    events = store.events(run_id)
    held = {ref["$blob"] for e in events for _p, ref in refs_in(e.payload or {})}
    assert held
    assert all(blobs.path_for(d).exists() for d in held)
    report = erase(store, run_id, reason="subject request")
    assert report.runs[0].blobs == len(held)
    assert not any(blobs.path_for(d).exists() for d in held)
    assert store.verify(run_id).ok  # the chain commits to the references, not the content
    again = erase(store, run_id, reason="subject request")
    assert again.runs[0].blobs == 0


def test_a_blob_key_spelled_with_an_escape_is_still_checked(store: SQLiteStore) -> None:
    """JSON may spell a key's letters as ``\\u`` escapes, and verification hashes the decoded
    value: a body rewritten that way still verifies, so the blob check must still find its
    references (it looks for the key as written, or for an escape)."""
    import sqlite3

    from tachograph.lifecycle.blobs import check_stored_blobs

    run_id, blobs = _record_with_blobs(store)
    note = store.events(run_id)[2]
    db = sqlite3.connect(store.path, isolation_level=None)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
        db.execute(f"DROP TRIGGER {name}")
    body = db.execute(
        "SELECT p.body FROM payloads p JOIN events e ON e.id = p.id WHERE e.run_id=? AND e.seq=2",
        (run_id,),
    ).fetchone()[0]
    assert b'"$blob"' in body
    db.execute(
        "UPDATE payloads SET body=? WHERE id=(SELECT id FROM events WHERE run_id=? AND seq=2)",
        (body.replace(b'"$blob"', b'"\\u0024blob"'), run_id),
    )
    db.close()
    assert store.verify(run_id).ok  # the chain commits to the decoded value
    blobs.path_for(note.payload["big"]["$blob"]).write_bytes(b"z" * 5000)
    check = check_stored_blobs(store, run_id, blobs)
    assert [(s, p) for s, p, _ in check.failures] == [(2, "$.big")]
    assert check == check_blobs(store.read(run_id), blobs)  # as the decoded reading finds


# -- what is a reference (SPEC section 6) ----------------------------------------------------

_HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({"$blob": "sha256:" + _HEX, "size": 0, "media_type": ""}, None),
        ({"$blob": "sha256:" + _HEX, "size": 3.0, "media_type": "t"}, None),  # JSON's 3
        ({"$blob": "sha256:zz", "size": 3, "media_type": "t"}, "$blob is 'sha256:zz'"),
        ({"$blob": "sha256:" + _HEX.upper(), "size": 3, "media_type": "t"}, "$blob is"),
        ({"$blob": "sha256:" + _HEX + "0", "size": 3, "media_type": "t"}, "$blob is"),
        ({"$blob": "sha256:" + _HEX + "\n", "size": 3, "media_type": "t"}, "$blob is"),
        ({"$blob": 7, "size": 3, "media_type": "t"}, "$blob is 7"),
        ({"$blob": "sha256:" + _HEX, "size": -5, "media_type": "t"}, "size is -5"),
        ({"$blob": "sha256:" + _HEX, "size": True, "media_type": "t"}, "size is True"),
        ({"$blob": "sha256:" + _HEX, "size": 2.5, "media_type": "t"}, "size is 2.5"),
        ({"$blob": "sha256:" + _HEX, "size": "3", "media_type": "t"}, "size is '3'"),
        ({"$blob": "sha256:" + _HEX, "size": 3, "media_type": None}, "media_type is None"),
        ({"$blob": "sha256:" + _HEX, "size": 3}, "its keys are $blob, size"),
        ({"$blob": "sha256:" + _HEX, "size": 3, "media_type": "t", "x": 1}, "its keys are"),
    ],
)
def test_a_reference_is_exactly_the_shape_the_spec_gives(
    value: dict[str, object], why: str | None
) -> None:
    from tachograph.lifecycle.blobs import malformed_refs_in, ref_problem

    assert is_blob_ref(value) is (why is None)
    problem = ref_problem(value)
    assert (problem is None) is (why is None)
    if why is not None:
        assert problem is not None
        assert why in problem
        payload = {"a": [1, {"b": value}]}
        assert list(refs_in(payload)) == []
        assert list(malformed_refs_in(payload)) == [("$.a[1].b", problem)]


def test_a_value_shaped_like_a_reference_is_reported_and_walked_not_checked(
    store: SQLiteStore,
) -> None:
    """Not a reference: it names no blob (checked against none, never a path in the
    folder), is reported as malformed and is not a failure; a reference inside it is one."""
    from tachograph.lifecycle.blobs import check_stored_blobs

    blobs = BlobStore.beside(store)
    inner = blobs.put(b"inside")
    odd = {"$blob": "sha256:zz", "size": 3, "media_type": "t", "note": {"keep": inner}}
    with tachograph.record(store, actor="a", input={}) as run:
        tachograph.emit("acme.doc", {"doc": odd})
    tachograph.capture.recorder.writer_for(store).drain()
    check = check_blobs(store.events(run.run_id), blobs)
    assert check.ok
    assert check.verified == (inner["$blob"],)
    assert [(s, p) for s, p, _ in check.malformed] == [(1, "$.doc")]
    assert check == check_stored_blobs(store, run.run_id, blobs)
    assert check.to_dict()["malformed"] == [
        {"seq": 1, "path": "$.doc", "message": check.malformed[0][2]}
    ]
    assert "1 malformed (not references: not checked)" in check.render()


def test_erasing_and_doctor_pass_over_a_value_shaped_like_a_reference(
    store: SQLiteStore,
) -> None:
    """Both used to stop at it (``not a blob digest``); doctor warns of it, and neither
    counts it as a blob."""
    from tachograph.doctor import run_checks
    from tachograph.lifecycle.erasure import erase

    blobs = BlobStore.beside(store)
    kept = blobs.put(b"kept")
    with tachograph.record(store, actor="a", input={}) as run:
        tachograph.emit("acme.doc", {"doc": {"$blob": "sha256:zz", "size": 3, "media_type": "t"}})
        tachograph.emit("acme.doc", {"doc": kept})
    tachograph.capture.recorder.writer_for(store).drain()
    found = [f for f in run_checks(store) if f.check == "blobs"]
    assert [f.level for f in found] == ["warning", "ok"]
    assert "seq 1 $.doc: not a blob reference" in found[0].message
    report = erase(store, run.run_id, reason="subject request", seqs=[1, 2])
    assert report.runs[0].blobs == 1
    assert blobs.get(kept["$blob"]) is None
