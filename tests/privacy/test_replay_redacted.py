"""A run recorded with redaction replays as reproduced: the live side passes through the same
processors before it is compared. A changed e-mail diverges, and the report shows tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tachograph
from tachograph.errors import PrivacyError
from tachograph.privacy import KeyRing, Rule, pii_policy
from tachograph.replay.report import DivergenceKind

from .planted import KEY, STRIPE

MODEL = "replay-model-2026-01-01"


@tachograph.tool(effect="write")
def notify(email: str, name: str, api_key: str) -> dict[str, Any]:
    return {"queued": True, "to": email}


@tachograph.model(MODEL)
def draft(request: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "text": f"Dear customer, we wrote to {request['to']}."}


def agent(task: dict[str, Any]) -> str:
    answer = draft({"to": task["email"], "system": "Be brief."})
    notify(task["email"], task["name"], STRIPE)
    return str(answer["text"])


def changed_agent(task: dict[str, Any]) -> str:
    return agent({**task, "email": "other.person@example.net"})


TASK = {"email": "Ann.Lee@example.com", "name": "Ann Lee"}
RULES = [Rule("$..name", types=("tool.requested", "run.started"))]


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[str, str]:
    db = str(tmp_path / "runs.db")
    result = tachograph.record_run(
        agent, TASK, store=db, actor="mailer", processors=[pii_policy(KEY, rules=RULES)]
    )
    return db, result.run_id


def test_redacted_run_replays_as_reproduced(recorded: tuple[str, str]) -> None:
    db, run_id = recorded
    text = str([e.payload for e in tachograph.open_store(db).events(run_id)])
    assert "Ann" not in text
    assert STRIPE not in text
    assert "pii1:t1:" in text
    report = tachograph.replay(db, run_id, agent, processors=[pii_policy(KEY, rules=RULES)])
    assert report.reproduced, report.render()


def test_changed_email_diverges_showing_tokens(recorded: tuple[str, str]) -> None:
    db, run_id = recorded
    report = tachograph.replay(db, run_id, changed_agent, processors=[pii_policy(KEY, rules=RULES)])
    assert not report.reproduced
    first = report.first
    assert first is not None
    assert first.kind is DivergenceKind.REQUEST_CHANGED
    change = {c.path: (c.old, c.new) for c in first.changes}["$.payload.request.to"]
    assert change == (KEY.token("ann.lee@example.com"), KEY.token("other.person@example.net"))
    rendered = report.render() + str(report.to_dict())
    assert "pii1:t1:" in rendered
    for plain in ("ann.lee", "Ann Lee", "other.person", STRIPE):
        assert plain.lower() not in rendered.lower()


def test_replay_with_a_rotated_key_pins_the_recorded_one(recorded: tuple[str, str]) -> None:
    db, run_id = recorded
    rotated = KeyRing(current="t2", keys={"t2": b"\x01" * 32, "t1": KEY.keys["t1"]})
    report = tachograph.replay(db, run_id, agent, processors=[pii_policy(rotated, rules=RULES)])
    assert report.reproduced, report.render()


def test_replay_without_the_policy_or_the_key_is_refused(recorded: tuple[str, str]) -> None:
    db, run_id = recorded
    with pytest.raises(PrivacyError, match="recorded with PII redaction"):
        tachograph.replay(db, run_id, agent)
    other = KeyRing.of(b"\x02" * 32, key_id="t9")
    with pytest.raises(PrivacyError, match="key id 't1'"):
        tachograph.replay(db, run_id, agent, processors=[pii_policy(other, rules=RULES)])


def test_default_secret_redaction_replays_in_any_process(tmp_path: Path) -> None:
    """No key configured: secrets become markers, which a replay reproduces without a key."""
    db = str(tmp_path / "runs.db")
    result = tachograph.record_run(agent, TASK, store=db, actor="mailer")
    events = tachograph.open_store(db).events(result.run_id)
    notified = next(e for e in events if e.type == "tool.requested")
    assert notified.payload is not None
    assert notified.payload["args"]["api_key"] == "[redacted:secret:field]"
    assert notified.payload["args"]["email"] == TASK["email"]  # PII only with a policy
    assert tachograph.replay(db, result.run_id, agent).reproduced


def test_fork_and_resume_apply_the_same_redaction(recorded: tuple[str, str]) -> None:
    db, run_id = recorded
    report = tachograph.fork(db, run_id, 2, agent, processors=[pii_policy(KEY, rules=RULES)])
    assert report.new_run_id is not None
    forked = tachograph.open_store(db).events(report.new_run_id)
    text = str([e.payload for e in forked])
    assert "ann.lee" not in text.lower()
    assert STRIPE not in text
    assert "pii1:t1:" in text
