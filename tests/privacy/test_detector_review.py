"""Secrets and personal data a hostile review found passing the detectors, each redacted
whole; and what only looks like them, kept. Checked on the redactor alone and in a recording
into a real SQLite store, whose file must not hold the canary."""

from __future__ import annotations

from pathlib import Path

import pytest

import tachograph
from tachograph.capture.recorder import writer_for
from tachograph.privacy import pii_policy, redact_secrets

from .planted import KEY

POLICY = pii_policy(KEY)


def _secrets(text: str) -> str:
    out: str = redact_secrets("x", {"s": text})["s"]
    return out


def _recorded(tmp_path: Path, texts: list[str], processors: list[object] | None = None) -> bytes:
    """The bytes of a SQLite store (and its -wal) a run recording ``texts`` left."""
    db = tmp_path / "runs.db"
    with tachograph.open_store(db, create=True) as store:
        with tachograph.record(
            store, actor="a", input={"texts": texts}, processors=processors or []
        ) as run:
            for text in texts:
                tachograph.emit("acme.note", {"text": text})
        writer_for(store).drain()
        assert run.run_id
    return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("runs.db"))


# -- D8: a quoted password holding spaces -------------------------------------------------

QUOTED = [
    ("password: 'CANARY with spaces'", "password: '[redacted:secret:password]'"),
    ('PASSWORD="CANARY pw"', 'PASSWORD="[redacted:secret:password]"'),
    ('{"password": "CANARY two", "user": "bob"}',
     '{"password": "[redacted:secret:password]", "user": "bob"}'),
    ("db_password = \"it's CANARY\"", 'db_password = "[redacted:secret:password]"'),
    ("token: 'CANARY a' and 'b'", "token: '[redacted:secret:password]' and 'b'"),
    # a quote that does not close on its line: to a space, as an unquoted value
    ('password: "CANARY next\nline"', 'password: "[redacted:secret:password] next\nline"'),
    ("password=CANARY rest", "password=[redacted:secret:password] rest"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), QUOTED)
def test_a_quoted_password_is_redacted_to_its_closing_quote(text: str, expected: str) -> None:
    assert _secrets(text) == expected
    assert _secrets(expected) == expected  # idempotent


def test_a_quoted_passphrase_does_not_reach_the_store(tmp_path: Path) -> None:
    stored = _recorded(tmp_path, ["password: 'CANARY with spaces'", 'PASSWORD="CANARY pw"'])
    assert b"CANARY" not in stored
    assert b"with spaces" not in stored
