"""The default idempotency key of a tool call is derived from its arguments as processed
(SPEC section 5), whichever way the recording gets their canonical bytes: the bytes checked
before processing when only redactors ran and handed the arguments back untouched, the
processed arguments' own bytes otherwise (a processor may change them in place)."""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

import tachograph
from tachograph.privacy import redact_secrets
from tachograph.record.canonical import canonical
from tachograph.record.event import Event
from tachograph.record.seal import default_key
from tachograph.store import MemoryStore

SECRET = os.urandom(16).hex()


@tachograph.tool(effect="read")
def look_up_card(holder: str, card: str) -> dict[str, Any]:
    return {"holder": holder, "found": True}


def _requests(store: MemoryStore, run_id: str) -> list[Event]:
    return [e for e in store.events(run_id) if e.type == "tool.requested"]


def _key_of(run_id: str, args: dict[str, Any], repeat: int = 0) -> str:
    # SPEC section 5 spelled out with the standard library, beside the library's own form
    h = hmac.new(bytes.fromhex(SECRET), canonical(args), hashlib.sha256).hexdigest()[:16]
    key = f"{run_id}:look_up_card:{h}" + (f"#{repeat}" if repeat else "")
    assert key == default_key(
        run_id, "look_up_card", canonical(args), bytes.fromhex(SECRET), repeat
    )
    return key


def _mask_in_place(type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    # changes the caller's arguments themselves and hands the same payload back
    args = payload.get("args")
    if type_ == "tool.requested" and isinstance(args, dict) and "card" in args:
        args["card"] = "****"
    return payload


def test_a_processor_changing_the_arguments_in_place_keys_the_changed_arguments() -> None:
    with MemoryStore() as store:
        with tachograph.record(
            store, actor="desk", processors=[_mask_in_place], key_secret=SECRET
        ) as run:
            look_up_card("Ann", "4111")
            look_up_card("Ann", "5500")  # the same arguments once masked: a repeat
        requested = _requests(store, run.run_id)
        masked = {"holder": "Ann", "card": "****"}
        assert [e.payload["args"] for e in requested] == [masked, masked]
        assert [e.idempotency_key for e in requested] == [
            _key_of(run.run_id, masked),
            _key_of(run.run_id, masked, 1),
        ]
        unmasked = {"holder": "Ann", "card": "4111"}
        assert requested[0].idempotency_key != _key_of(run.run_id, unmasked)


def test_redacted_and_untouched_arguments_are_keyed_as_recorded() -> None:
    planted = "sk-live-PLANTEDa1b2c3d4e5f6g7h8"
    with MemoryStore() as store:
        with tachograph.record(store, actor="desk", key_secret=SECRET) as run:
            look_up_card("Ann", "4111")  # nothing to redact: handed back as it was
            look_up_card("Ann", planted)  # redacted into a new payload
        requested = _requests(store, run.run_id)
        assert requested[0].payload["args"] == {"holder": "Ann", "card": "4111"}
        assert requested[1].payload["args"]["card"] != planted
        for event in requested:
            assert event.idempotency_key == _key_of(run.run_id, event.payload["args"])


class _Unhashable:
    pass


def test_the_default_redactor_answers_as_its_general_walk() -> None:
    # A rule that never matches turns the inline clean test off: the general path decides.
    walking = tachograph.privacy.Redactor(
        rules=(tachograph.privacy.Rule("$.never_there", action="redact"),)
    )
    payloads: list[dict[str, Any]] = [
        {"tool": "t", "args": {"i": 5}, "effect": "read"},
        {"tool": "t", "result": {"note": "Bearer abcdefghijklmnopqrstuvwxyz0123"}},
        {"password": "hunter2", "nested": [{"api_key": "x"}, "plain"]},
        {"API": "upper-case hint", "text": "nothing here"},
        {"odd": _Unhashable()},  # outside the profile: both walk it, neither fails here
        {"tuple": (1, 2)},
    ]
    for payload in payloads:
        fast = redact_secrets("tool.completed", payload)
        slow = walking("tool.completed", payload)
        assert repr(fast) == repr(slow)
        assert (fast is payload) == (slow is payload)
