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


# -- D7: URL credentials ------------------------------------------------------------------

URL_SECRETS = [
    # no user name: the standard Redis form
    ("redis://:CANARYpw@localhost:6379", "redis://:[redacted:secret:url_password]@localhost:6379"),
    # a "/" in a generated password
    ("postgres://app:ab/CANARY@db/x", "postgres://app:[redacted:secret:url_password]@db/x"),
    ("mongodb+srv://u:pa/ss/CANARY@c0.x.net/db?w=1",
     "mongodb+srv://u:[redacted:secret:url_password]@c0.x.net/db?w=1"),
    # an "@" in it: to the "@" before the host, and no further (an e-mail in the query stays)
    ("postgres://app:p@ssCANARY@db/x?to=a@b.com",
     "postgres://app:[redacted:secret:url_password]@db/x?to=a@b.com"),
    # a token as the user name of a web URL, with its password if it has one
    ("https://CANARYtok12345@github.com/x/y.git",
     "https://[redacted:secret:url_password]@github.com/x/y.git"),
    ("git clone https://CANARY0123456789abcdef0123456789abcdef01@github.com/o/r",
     "git clone https://[redacted:secret:url_password]@github.com/o/r"),
    ("https://CANARYtok12345:x-oauth-basic@github.com/a",
     "https://[redacted:secret:url_password]@github.com/a"),
    ("git+https://CANARYtok12345@github.com/x", "git+https://[redacted:secret:url_password]@github.com/x"),
    ("HTTP://CANARYtok12345@host", "HTTP://[redacted:secret:url_password]@host"),
    # as before
    ("postgres://app:CANARY@db/x", "postgres://app:[redacted:secret:url_password]@db/x"),
]  # fmt: skip

URL_KEPT = [
    "git@github.com:org/repo.git",
    "ssh://git@github.com/org/repo",
    "ssh://deploy2024user@host/x",  # ssh names users
    "ftp://anonymous1234567@ftp.example.org/pub",
    "user@host",
    "https://user@host/x",  # no digit: a name
    "https://deploy-bot@host/x",
    "https://john.smith.2024@host/",  # a dot: a name
    "https://short1@github.com",  # shorter than 12
    "https://example.com:443/users/@alice",  # a port and a path, not a password
    "https://example.com:8443?e=a@b.com",
    "see https://medium.com/@user",
    "http://[::1]:8080/x@y",
]


@pytest.mark.parametrize(("text", "expected"), URL_SECRETS)
def test_url_credentials_are_redacted(text: str, expected: str) -> None:
    assert _secrets(text) == expected
    assert _secrets(expected) == expected  # idempotent


@pytest.mark.parametrize("text", URL_KEPT)
def test_what_only_looks_like_url_credentials_is_kept(text: str) -> None:
    assert _secrets(text) == text


def test_url_credentials_do_not_reach_the_store(tmp_path: Path) -> None:
    stored = _recorded(tmp_path, [text for text, _ in URL_SECRETS])
    assert b"CANARY" not in stored


# -- D9: e-mail addresses beyond ASCII ----------------------------------------------------

ADDRESSES = [
    # (text, the address in it)
    ("ann@exämple.com", "ann@exämple.com"),
    ("jöhn@example.com", "jöhn@example.com"),
    ("write to jöhn.çanary@exämple.com now", "jöhn.çanary@exämple.com"),
    ("Ärger@Bücher.de", "Ärger@Bücher.de"),
    ("пишите на иван@пример.рф.", "иван@пример.рф"),
    ("a@xn--e1afmkfd.xn--p1ai", "a@xn--e1afmkfd.xn--p1ai"),
    # scripts written without spaces bound an address as punctuation does
    ("请联系ann@example.com谢谢", "ann@example.com"),
    ("ann@example.com으로 보내 주세요", "ann@example.com"),
    ("メールはann@example.comまで", "ann@example.com"),
    ("ann@example.com، شكرا", "ann@example.com"),
]


@pytest.mark.parametrize(("text", "address"), ADDRESSES)
def test_an_address_beyond_ascii_is_tokenized_whole(text: str, address: str) -> None:
    out = POLICY("x", {"s": text})["s"]
    token = KEY.token(address.lower())
    assert out == text.replace(address, token)  # the whole address, and nothing around it
    assert POLICY("x", {"s": out})["s"] == out  # idempotent


def test_a_composed_and_a_decomposed_address_are_one_token() -> None:
    composed = POLICY("x", {"s": "jöhn@example.com"})["s"]
    decomposed = POLICY("x", {"s": "jo\u0308hn@example.com"})["s"]
    assert composed == decomposed == KEY.token("jöhn@example.com")


def test_an_ascii_address_keeps_its_token() -> None:
    assert POLICY("x", {"s": "mail Ann@Example.com now"})["s"] == (
        f"mail {KEY.token('ann@example.com')} now"
    )


def test_addresses_beyond_ascii_do_not_reach_the_store(tmp_path: Path) -> None:
    texts = ["ann@exämple.com", "jöhn@example.com", "jöhn.çanary@exämple.com"]
    stored = _recorded(tmp_path, texts, [POLICY])
    for text in texts:
        assert text.encode() not in stored
    for part in ("exämple", "jö", "hn@example", "çanary"):
        assert part.encode() not in stored
