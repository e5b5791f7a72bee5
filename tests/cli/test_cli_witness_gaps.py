"""``tacho seal --witness`` and ``tacho evidence --witness`` never fail quietly, and a run
recorded with sealing off says so, against a real ``tacho witness`` process on 127.0.0.1.

With ``TACHOGRAPH_SIGNING_KEY`` set, every recording is checkpointed as it is sealed, so
``tacho seal`` has no seal waiting and signs nothing: it pushes the latest checkpoint to the
witnesses instead. ``tacho evidence --witness`` writes nothing unless the witness holds a
cosigned checkpoint covering the run.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import tachograph as tg
from sealing.helpers import make_key, start_witness
from tachograph.cli.app import cli
from tachograph.record.checkpoint import Checkpoint, Note, SigningKey

ORIGIN = "tachograph.localhost/tachograph/default"


@dataclass
class Setup:
    db: Path
    key: SigningKey
    key_file: Path
    wkey: SigningKey
    url: str
    wdir: Path

    def held(self) -> Note | None:
        """What the witness serves for the default tenant's origin (GET /checkpoint)."""
        query = urllib.parse.urlencode({"origin": ORIGIN})
        try:
            with urllib.request.urlopen(f"{self.url}/checkpoint?{query}", timeout=10) as r:
                return Note.parse(r.read())
        except urllib.error.HTTPError as exc:
            code = exc.code
        assert code == 404
        return None


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    """A signing key in TACHOGRAPH_SIGNING_KEY (as docs/concepts.md says to set it), a store
    path, and a ``tacho witness`` process that trusts the key and holds nothing yet."""
    for name in ("TACHOGRAPH_STORE", "TACHOGRAPH_LOG_NAME", "TACHOGRAPH_SEAL"):
        monkeypatch.delenv(name, raising=False)
    key, key_file = make_key(tmp_path / "keys", "log.example/tachograph")
    wkey, wkey_file = make_key(tmp_path / "wkeys", "witness.example/w1", witness=True)
    monkeypatch.setenv("TACHOGRAPH_SIGNING_KEY", str(key_file))
    wdir = tmp_path / "wstate"
    proc, url = start_witness(wdir, wkey_file, str(key.verifier))
    try:
        yield Setup(tmp_path / "store" / "seal.db", key, key_file, wkey, url, wdir)
    finally:
        proc.kill()
        proc.wait()


def _record(db: Path, run_id: str, *, seal: bool = True) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    kw = {} if seal else {"seal": False}
    with tg.record(str(db), actor="agent", run_id=run_id, **kw):  # type: ignore[arg-type]
        tg.decide("step", 1)


def _tacho(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--store", str(db), *args], catch_exceptions=False)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# 1. tacho seal --witness when no seal waits for a checkpoint


def test_seal_pushes_the_latest_checkpoint_when_no_seal_waits(setup: Setup) -> None:
    for run in ("a", "b", "c"):
        _record(setup.db, run)  # checkpointed at record time: no seal waits
    assert setup.held() is None
    result = _tacho(setup.db, "seal", "--witness", setup.url)
    assert result.exit_code == 0, result.output
    assert f"checkpoint {ORIGIN} size 3 (the latest: no seal waited for a new one)" in result.stdout
    assert "accepted by 1 of 1 witness(es), cosigned by witness.example/w1" in result.stdout
    held = setup.held()
    assert held is not None
    assert Checkpoint.parse(held.text).size == 3
    assert held.verified_by([setup.key.verifier])
    # Again, with --json: the witness holds it already and cosigns it again.
    again = _tacho(setup.db, "seal", "--witness", setup.url, "--json")
    assert again.exit_code == 0, again.output
    data = json.loads(again.stdout)
    assert data["issued"] is False
    assert data["size"] == 3
    assert data["cosigned_by"] == ["witness.example/w1"]
    assert data["witness_errors"] == []
    assert "— witness.example/w1 " in data["checkpoint"]


def test_seal_after_new_seals_pushes_from_the_size_the_witness_holds(setup: Setup) -> None:
    _record(setup.db, "a")
    assert _tacho(setup.db, "seal", "--witness", setup.url).exit_code == 0
    _record(setup.db, "b")
    _record(setup.db, "c")
    result = _tacho(setup.db, "seal", "--witness", setup.url, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["witness_errors"] == []
    held = setup.held()
    assert held is not None
    assert Checkpoint.parse(held.text).size == 3


def test_seal_exits_1_for_an_unreachable_witness(setup: Setup) -> None:
    _record(setup.db, "a")
    url = _closed_port_url()
    result = _tacho(setup.db, "seal", "--witness", url)
    assert result.exit_code == 1
    assert f"witness: witness {url}: cannot reach the witness {url}" in result.stderr
    assert "accepted by 0 of 1 witness(es), no cosignature" in result.stdout


def test_seal_exits_1_when_the_witness_refuses(setup: Setup, tmp_path: Path) -> None:
    _record(setup.db, "a")
    other, _ = make_key(tmp_path / "other", "other.example/tachograph")
    _, wkey_file = make_key(tmp_path / "wkeys2", "witness.example/w2", witness=True)
    proc, url = start_witness(tmp_path / "w2", wkey_file, str(other.verifier))
    try:
        result = _tacho(setup.db, "seal", "--witness", url, "--witness", setup.url)
    finally:
        proc.kill()
        proc.wait()
    assert result.exit_code == 1
    assert "refused the checkpoint (403)" in result.stderr
    assert "accepted by 1 of 2 witness(es), cosigned by witness.example/w1" in result.stdout


# 2. tacho evidence --witness never falls back to an uncosigned checkpoint


def test_evidence_fails_when_the_witness_holds_nothing(setup: Setup, tmp_path: Path) -> None:
    _record(setup.db, "a")
    out = tmp_path / "ev"
    result = _tacho(setup.db, "evidence", "a", "-o", str(out), "--witness", setup.url)
    assert result.exit_code == 1
    assert f"the witness {setup.url} holds no checkpoint of {ORIGIN}" in result.stderr
    assert f"tacho seal --witness {setup.url}" in result.stderr
    assert not out.exists()


def test_evidence_fails_for_a_witness_directory_that_does_not_exist(
    setup: Setup, tmp_path: Path
) -> None:
    _record(setup.db, "a")
    out, missing = tmp_path / "ev", tmp_path / "no-such-witness"
    result = _tacho(setup.db, "evidence", "a", "-o", str(out), "--witness", str(missing))
    assert result.exit_code == 1
    assert f"no witness directory at {missing}" in result.stderr
    assert not out.exists()
    assert not missing.exists()  # reading a witness does not make one


def test_evidence_fails_for_an_unreachable_witness(setup: Setup, tmp_path: Path) -> None:
    _record(setup.db, "a")
    out = tmp_path / "ev"
    result = _tacho(setup.db, "evidence", "a", "-o", str(out), "--witness", _closed_port_url())
    assert result.exit_code == 1
    assert "cannot reach the witness" in result.stderr
    assert not out.exists()


def test_evidence_fails_when_the_witness_checkpoint_does_not_cover_the_run(
    setup: Setup, tmp_path: Path
) -> None:
    _record(setup.db, "a")
    assert _tacho(setup.db, "seal", "--witness", setup.url).exit_code == 0
    _record(setup.db, "b")  # checkpoint 2 in the store; the witness still holds 1
    out = tmp_path / "ev"
    result = _tacho(setup.db, "evidence", "b", "-o", str(out), "--witness", setup.url)
    assert result.exit_code == 1
    assert "the witness's checkpoint 1 does not cover run 'b''s last seal" in result.stderr
    assert "tacho seal --witness" in result.stderr
    assert not out.exists()
    # Run a is covered by what the witness holds: its evidence is to the cosigned checkpoint.
    assert _tacho(setup.db, "evidence", "a", "-o", str(out), "--witness", setup.url).exit_code == 0
    # Pushed, b's evidence is written too, and an auditor finds the cosignature.
    assert _tacho(setup.db, "seal", "--witness", setup.url).exit_code == 0
    out_b = tmp_path / "ev-b"
    made = _tacho(setup.db, "evidence", "b", "-o", str(out_b), "--witness", setup.url)
    assert made.exit_code == 0, made.output
    for folder in (out, out_b):
        audit = _tacho(
            setup.db,
            "verify",
            str(folder),
            "--key",
            str(setup.key.verifier),
            "--witness-key",
            str(setup.wkey.verifier),
            "--min-witnesses",
            "1",
        )
        assert audit.exit_code == 0, audit.output
        assert "witnessed by witness.example/w1" in audit.stdout


def test_evidence_fails_without_a_cosignature_by_the_given_witness_key(
    setup: Setup, tmp_path: Path
) -> None:
    _record(setup.db, "a")
    assert _tacho(setup.db, "seal", "--witness", setup.url).exit_code == 0
    stranger, _ = make_key(tmp_path / "stranger", "stranger.example/w9", witness=True)
    out = tmp_path / "ev"
    result = _tacho(
        setup.db,
        "evidence",
        "a",
        "-o",
        str(out),
        "--witness",
        setup.url,
        "--witness-key",
        str(stranger.verifier),
    )
    assert result.exit_code == 1
    assert "carries no cosignature by stranger.example/w9" in result.stderr
    assert not out.exists()
    ok = _tacho(
        setup.db,
        "evidence",
        "a",
        "-o",
        str(out),
        "--witness",
        setup.url,
        "--witness-key",
        str(setup.wkey.verifier),
    )
    assert ok.exit_code == 0, ok.output


def test_evidence_fails_for_a_witness_directory_that_cosigns_nothing(
    setup: Setup, tmp_path: Path
) -> None:
    _record(setup.db, "a")
    keyless = tmp_path / "keyless-witness"
    # A directory witness made by tacho seal has no cosigning key: it keeps, never cosigns.
    pushed = _tacho(setup.db, "seal", "--witness", str(keyless))
    assert pushed.exit_code == 0, pushed.output
    assert "no cosignature" in pushed.stdout
    out = tmp_path / "ev"
    result = _tacho(setup.db, "evidence", "a", "-o", str(out), "--witness", str(keyless))
    assert result.exit_code == 1
    assert "the witness's checkpoint 1 carries no cosignature" in result.stderr
    assert not out.exists()
    # The state directory of the running tacho witness holds cosigned checkpoints.
    assert _tacho(setup.db, "seal", "--witness", setup.url).exit_code == 0
    made = _tacho(setup.db, "evidence", "a", "-o", str(out), "--witness", str(setup.wdir))
    assert made.exit_code == 0, made.output


def test_evidence_without_a_witness_still_uses_the_store_checkpoint(
    setup: Setup, tmp_path: Path
) -> None:
    _record(setup.db, "a")
    out = tmp_path / "ev"
    assert _tacho(setup.db, "evidence", "a", "-o", str(out)).exit_code == 0
    assert (out / "run.tlog-proof").exists()


# 3. the unsealed reason is about the run


def test_a_run_recorded_with_sealing_off_says_so(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record(setup.db, "a")
    _record(setup.db, "off", seal=False)
    signed = _tacho(setup.db, "verify")
    assert signed.exit_code == 0, signed.output
    expected = "off: verified, 3 events, chain intact; unsealed (no seal of this run: it was "
    expected += "recorded with sealing off, or imported)\n"
    assert expected in signed.stdout
    # Without a signing key, run a's seal waits for a checkpoint: run off says the same thing.
    monkeypatch.delenv("TACHOGRAPH_SIGNING_KEY")
    plain = setup.db.with_name("plain.db")
    _record(plain, "a")
    _record(plain, "off", seal=False)
    result = _tacho(plain, "verify")
    assert result.exit_code == 0, result.output
    assert expected in result.stdout
    line = next(x for x in result.stdout.splitlines() if x.startswith("off:"))
    assert "wait for one" not in line
    reason = line.split("unsealed (", 1)[1]
    assert "(" not in reason
    assert reason.count(")") == 1
    data = json.loads(_tacho(plain, "verify", "--json").stdout)
    run = next(r for r in data["runs"] if r["run_id"] == "off")
    assert run["seal"]["status"] == "unsealed"
    assert run["seal"]["reason"] == (
        "no seal of this run: it was recorded with sealing off, or imported"
    )


def test_verify_of_an_evidence_folder_trusts_the_signing_keys_public_half_by_default(
    setup: Setup, tmp_path: Path
) -> None:
    # docs/cli.md: --key defaults to the public half of TACHOGRAPH_SIGNING_KEY
    _record(setup.db, "a")
    out = tmp_path / "ev"
    assert _tacho(setup.db, "evidence", "a", "-o", str(out)).exit_code == 0
    audit = _tacho(setup.db, "verify", str(out))
    assert audit.exit_code == 0, audit.output
    assert "no trusted verifier key" not in audit.output


def test_seal_with_an_empty_key_file_is_a_usage_error(setup: Setup, tmp_path: Path) -> None:
    empty = tmp_path / "empty.key"
    empty.write_text("")
    _record(setup.db, "a")
    result = _tacho(setup.db, "seal", "--key-file", str(empty))
    assert result.exit_code == 2, result.output
    assert "not a tachograph signing key file" in result.output


def test_verify_against_a_witness_directory_that_does_not_exist_is_a_usage_error(
    setup: Setup, tmp_path: Path
) -> None:
    _record(setup.db, "a")
    missing = tmp_path / "no-such-witness"
    result = _tacho(setup.db, "verify", "--witness", str(missing))
    assert result.exit_code == 2, result.output
    assert "no witness directory" in result.output
    assert not missing.exists()  # reading a witness never creates one


def test_a_witness_refusal_is_escaped_before_it_reaches_the_terminal(setup: Setup) -> None:
    """The refusal quotes the witness's answer: text from another host, escaped."""
    import http.server
    import threading

    class Hostile(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            body = b"no \x1b[2J\x1b]8;;http://evil\x07 thanks\r forged"
            self.send_response(403)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _record(setup.db, "a")
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = _tacho(setup.db, "seal", "--witness", url)
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 1
    assert "\x1b" not in result.stderr
    assert "\r" not in result.stderr
    assert "\\x1b[2J" in result.stderr
